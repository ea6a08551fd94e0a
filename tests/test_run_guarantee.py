"""Every privacy statement holds for the run that actually happened.

A protocol's guarantee is calibrated for n users and so many fakes; each entry point
(run_pipeline in both representations and both codecs, ``esa simulate``, the TCP analyzer)
states the guarantee of the run that happened instead, or refuses with
``on_mismatch="refuse"``. For the k-RR family the stated ε is compared with the bound's
forward value at the users and fakes that arrived (the stated ε must be at least that).
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import esa
import protocols
from protocols import ProtocolSpec, build_protocol
from protocols.accounting import tightest_central
from simulations.cli import main

N_CAL = 100_000


def _hist_kr() -> protocols.ShuffleProtocol:
    return build_protocol("hist_kr", ProtocolSpec(epsilon=1.0, delta=1e-6, n=N_CAL, domain=8))


def _forward(protocol: protocols.ShuffleProtocol, n: int) -> float:
    """The k-RR bound's forward value at the fixed ε_l and n users (the truth to beat)."""
    p = protocol.privacy
    return tightest_central(
        epsilon_local=p.epsilon_local, n=n, delta=p.delta, family="krr", k=protocol.domain
    )[0]


def _ideal(**kw: object) -> esa.PipelineConfig:
    return esa.PipelineConfig(crypto="ideal", workers=1, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(("crypto", "representation"), [("ideal", "reports"), ("onion", "reports")])
def test_fifty_users_state_about_7_8_not_1(crypto: str, representation: str) -> None:
    proto = _hist_kr()
    assert proto.privacy.epsilon_central == pytest.approx(1.0)
    config = esa.PipelineConfig(
        shufflers=2,
        crypto=crypto,
        representation=representation,
        workers=1,  # type: ignore[arg-type]
    )
    result = esa.run_pipeline(proto, np.zeros(50, dtype=int), config, rng=0)
    stated = result.privacy.epsilon_central
    assert stated >= 7.7  # the truth for 50 users: ε_l = 7.76 is barely amplified
    assert stated >= _forward(proto, 50) - 1e-12 or stated == proto.privacy.epsilon_local
    assert result.calibration.epsilon_central == pytest.approx(1.0)
    assert result.mismatch == ("n: calibrated 100000, arrived 50",)
    j = result.to_json()
    assert j["epsilon_central"] == stated
    assert j["privacy_recomputed"] is True
    assert j["run_differences"] == ["n: calibrated 100000, arrived 50"]


@pytest.mark.parametrize("representation", ["tally", "reports"])
def test_tally_run_with_fewer_users_never_states_the_calibration(representation: str) -> None:
    # PRHR relies on the default rule: fewer users than calibrated is unknown, so the
    # run states ε_l (or ∞ where its messages carry no local guarantee).
    proto = build_protocol("prhr", ProtocolSpec(epsilon=1.0, delta=1e-6, n=4000, domain=8))
    config = _ideal(shufflers=1, representation=representation)
    result = esa.run_pipeline(proto, np.zeros(1000, dtype=int), config, rng=6)
    local = proto.privacy.epsilon_local
    assert result.privacy.epsilon_central == (local if np.isfinite(local) else np.inf)
    assert result.mismatch == ("n: calibrated 4000, arrived 1000",)
    same = esa.run_pipeline(proto, np.zeros(4000, dtype=int), config, rng=6)
    assert same.privacy == proto.privacy


def test_more_users_than_calibrated_is_recomputed_and_never_below_the_bound() -> None:
    proto = build_protocol("cnt_rr", ProtocolSpec(epsilon=1.0, delta=1e-6, n=2000))
    result = esa.run_pipeline(proto, np.zeros(4000, dtype=int), _ideal(shufflers=1), rng=1)
    assert result.privacy.epsilon_central == pytest.approx(_forward(proto, 4000), rel=1e-9)
    assert result.privacy.epsilon_central <= proto.privacy.epsilon_central
    assert result.mismatch == ("n: calibrated 2000, arrived 4000",)


def test_matching_run_states_the_calibration() -> None:
    proto = build_protocol("cnt_rr", ProtocolSpec(epsilon=1.0, delta=1e-6, n=3000))
    result = esa.run_pipeline(proto, np.zeros(3000, dtype=int), _ideal(), rng=2)
    assert result.privacy == proto.privacy
    assert result.mismatch == ()
    assert result.to_json()["privacy_recomputed"] is False


def test_murs_without_its_fakes_does_not_keep_its_claim() -> None:
    spec = ProtocolSpec(epsilon=1.0, delta=1e-6, n=20_000, domain=8, shufflers=3, fake_reports=1000)
    murs = build_protocol("murs", spec)
    assert spec.total_fake_reports == 3000
    assert murs.calibration == protocols.Calibration(20_000, 3000, 3)
    x = np.zeros(20_000, dtype=int)
    claimed = murs.privacy.epsilon_central
    # zero fakes: the blanket bound without them is above 1, so only ε_l is proven
    none = esa.run_pipeline(murs, x, _ideal(shufflers=3, fake_reports=0), rng=3)
    assert none.privacy.epsilon_central > claimed
    assert none.privacy.epsilon_central == murs.privacy.epsilon_local
    assert none.mismatch[0].startswith("fake reports: calibrated 3000 in total, 0 counted")
    # fewer fakes: the same bound forward at 3·300, between the claim and ε_l
    fewer = esa.run_pipeline(murs, x, _ideal(shufflers=3, fake_reports=300), rng=3)
    assert isinstance(murs, protocols.MURS)
    truth = (
        protocols.SLH(
            domain=8, epsilon_local=murs.params.epsilon_local, n=20_000, delta=1e-6, total_fakes=900
        ).privacy.epsilon_central
        if _blanket_holds(murs, 900)
        else murs.params.epsilon_local
    )
    assert fewer.privacy.epsilon_central >= truth - 1e-12
    assert fewer.privacy.epsilon_central > claimed
    # more fakes: never weaker than the claim, and the bound's forward value
    more = esa.run_pipeline(murs, x, _ideal(shufflers=3, fake_reports=2000), rng=3)
    assert more.privacy.epsilon_central <= claimed
    assert more.privacy.epsilon_central == pytest.approx(
        protocols.MURS(
            domain=8,
            epsilon_local=murs.params.epsilon_local,
            n=20_000,
            delta=1e-6,
            total_fakes=6000,
        ).privacy.epsilon_central
    )
    # the same total through other shufflers: the claim holds, the difference is named
    other = esa.run_pipeline(murs, x, _ideal(shufflers=1, fake_reports=3000), rng=3)
    assert other.privacy.epsilon_central == pytest.approx(claimed)
    assert other.mismatch == ("shufflers: calibrated 3, ran 1",)


def _blanket_holds(murs: protocols.MURS, fakes: int) -> bool:
    try:
        protocols.SLH(
            domain=8,
            epsilon_local=murs.params.epsilon_local,
            n=20_000,
            delta=1e-6,
            total_fakes=fakes,
        )
    except protocols.BoundNotApplicable:
        return False
    return True


def test_held_crowd_states_the_local_guarantee() -> None:
    proto = build_protocol("cnt_rr", ProtocolSpec(epsilon=1.0, delta=1e-6, n=500))
    result = esa.run_pipeline(proto, np.zeros(500, dtype=int), _ideal(threshold=1000), rng=4)
    assert result.run_guarantee.facts.n_users == 0
    assert result.privacy.epsilon_central == proto.privacy.epsilon_local
    assert "n: calibrated 500, arrived 0" in result.mismatch


def test_dropped_reports_count_as_lost_users() -> None:
    proto = build_protocol("cnt_rr", ProtocolSpec(epsilon=1.0, delta=1e-6, n=3000))
    drop = {0: lambda batch: batch[:1000]}
    result = esa.run_pipeline(
        proto, np.zeros(3000, dtype=int), _ideal(shufflers=1), rng=5, interceptors=drop
    )
    assert result.run_guarantee.facts.n_users <= 1000
    assert result.privacy.epsilon_central >= _forward(proto, 1000) - 1e-12


def test_refuse_raises_naming_the_difference() -> None:
    proto = _hist_kr()
    with pytest.raises(esa.GuaranteeMismatch, match="n: calibrated 100000, arrived 50") as info:
        esa.run_pipeline(proto, np.zeros(50, dtype=int), _ideal(), rng=0, on_mismatch="refuse")
    assert isinstance(info.value, esa.ESAError)
    assert info.value.differences == ["n: calibrated 100000, arrived 50"]
    with pytest.raises(esa.ConfigError, match="on_mismatch"):
        esa.run_pipeline(proto, np.zeros(5, dtype=int), _ideal(), on_mismatch="ignore")  # type: ignore[arg-type]


def test_protocol_that_cannot_recompute_never_states_the_calibration() -> None:
    # rsum_dsg (Split-Mix shares: no local guarantee) relies on the default rule: fewer
    # users than calibrated is unknown, so nothing is proven.
    proto = build_protocol("rsum_dsg", ProtocolSpec(epsilon=1.0, delta=1e-6, n=2000))
    assert proto.privacy_for_run(1000, 0) is None
    assert proto.privacy_for_run(3000, 0) == proto.privacy
    facts = esa.RunFacts(
        n_users=1000, fakes_added=(0,), fakes_arrived=0, shufflers=1, threshold=0, domain=2
    )
    g = esa.run_guarantee(proto, facts, on_mismatch="recompute")
    local = proto.privacy.epsilon_local
    assert g.privacy.epsilon_central == (local if np.isfinite(local) else np.inf)
    assert g.privacy.epsilon_central != proto.privacy.epsilon_central


def test_data_outside_the_domain_is_refused() -> None:
    proto = _hist_kr()
    with pytest.raises(protocols.ParameterError, match="values must lie in"):
        esa.run_pipeline(proto, np.array([0, 8, 1]), _ideal(), rng=0)


def test_integer_rng_is_default_rng_of_it() -> None:
    proto = build_protocol("cnt_rr", ProtocolSpec(epsilon=1.0, delta=1e-6, n=500))
    x = np.arange(500) % 2
    a = esa.run_pipeline(proto, x, _ideal(), rng=0)
    b = esa.run_pipeline(proto, x, _ideal(), rng=np.random.default_rng(0))
    np.testing.assert_array_equal(a.estimate.values, b.estimate.values)


def test_spec_fake_reports_is_per_shuffler() -> None:
    spec = ProtocolSpec(epsilon=1.0, delta=1e-6, n=1000, shufflers=4, fake_reports=25)
    assert (spec.fake_reports, spec.total_fake_reports) == (25, 100)
    with pytest.raises(protocols.ParameterError, match="shufflers"):
        ProtocolSpec(epsilon=1.0, delta=1e-6, n=1000, shufflers=0)


def test_simulate_cli_states_the_run_and_refuses_on_request(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["simulate", "--protocol", "cnt_rr", "--n", "300", "--crypto", "ideal", "--json"]
    assert main([*argv, "--shufflers", "2", "--fake-reports", "5"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["fake_reports"] == 5  # per shuffler, as before
    assert out["run_differences"] == []
    assert out["privacy_recomputed"] is False
    # the held crowd leaves only ε_l, above the request: stated, and exit 1 without
    # --allow-weaker (the output is printed all the same), exit 0 with it
    assert main([*argv, "--threshold", "1000"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["weaker_than_requested"] is True
    assert main([*argv, "--threshold", "1000", "--allow-weaker"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["privacy_recomputed"] is True
    assert "n: calibrated 300, arrived 0" in out["run_differences"]
    assert out["epsilon_central"] == out["epsilon_local"]
    with pytest.raises(SystemExit) as exit_info:
        main([*argv, "--threshold", "1000", "--on-mismatch", "refuse"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("esa simulate: error: the run differs from the privacy calibration")
    assert "n: calibrated 300, arrived 0" in err[-1]


def test_tcp_analyzer_states_the_run() -> None:
    from simulations._tcp_run import run_tcp

    spec = ProtocolSpec(epsilon=1.0, delta=1e-6, n=N_CAL)
    proto = build_protocol("cnt_rr", spec)
    x = np.zeros(60, dtype=int)
    config = _ideal(shufflers=1)
    result = run_tcp(("cnt_rr", spec), x, config, rng=np.random.default_rng(0), timeout=120)
    stated = result.privacy.epsilon_central
    assert stated >= _forward(proto, 60) - 1e-12 or stated == proto.privacy.epsilon_local
    assert stated > 5.0  # not the calibrated 1.0
    analyzer = result.extra["analyzer_privacy"]
    assert analyzer["epsilon_central"] == pytest.approx(stated)
    assert analyzer["run_differences"] == [f"n: calibrated {N_CAL}, arrived 60"]
    assert analyzer["facts"]["n_users"] == 60
