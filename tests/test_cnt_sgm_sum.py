"""Cnt_SGM's sum T = Σ y_i: its exact pure ε, and the Split-Mix encoding that shows only T.

The survey's (3ε/γ, 0, γ) claim fails for the unary ±1 messages (test_counting_protocols.py)
but holds for T alone; ``--option encoding=splitmix`` sends y_i as Split-Mix shares, so the
analyzer sees T and the claim holds up to the shares' δ.
"""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest

from esa import PipelineConfig, run_pipeline
from protocols import ParameterError, ProtocolSpec, build_protocol
from protocols._cnt_sgm import CntSGM, CntSGMSplitMix, sgm_sum_epsilon
from simulations.cli import main


def _brute_force_sum_epsilon(eps: float, lam: float, honest: int) -> float:
    """max{2ε, max_u |ln P(M = u)/P(M = u − 2)|} over the centre of M's exact law, M the
    sum of ``honest`` i.i.d. B·η (B ~ Ber(λ), η ~ SG(e^{−ε})), by direct convolution of the
    per-user law truncated at ±400 (mass left out < 10^{−150} for ε ≥ 1/3)."""
    a = math.exp(-eps)
    k = np.arange(-400, 401)
    one = lam * (1 - a) / (1 + a) * a ** np.abs(k)
    one[400] += 1 - lam
    law = np.array([1.0])
    for _ in range(honest):
        law = np.convolve(law, one)
    c = law.size // 2
    ratios = [abs(math.log(law[c + u] / law[c + u - 2])) for u in range(-60, 61)]
    return max(2 * eps, *ratios)


@pytest.mark.parametrize(
    ("eps", "lam", "honest"),
    [
        (1.0, 0.05, 10),  # the atom at 0 dominates: ln((P₀ + Q(0))/Q(2)) ≫ 2ε
        (2.0, 0.01, 5),
        (3.0, 0.001, 40),
        (0.5, 0.2, 20),  # enough noisy users: 2ε
        (1 / 3, 0.3, 30),
        (1.0, 0.5, 3),
        (0.4, 1.0, 8),  # every user adds noise: exactly 2ε
    ],
)
def test_sum_epsilon_matches_direct_convolution(eps: float, lam: float, honest: int) -> None:
    exact = _brute_force_sum_epsilon(eps, lam, honest)
    got = sgm_sum_epsilon(epsilon=eps, lam=lam, honest=honest)
    assert got >= exact - 1e-12  # an upper bound ...
    assert got <= exact + 1e-9  # ... and tight


def test_survey_claim_holds_for_the_sum() -> None:
    # ε_T ≤ 3ε/γ = ε_c over a grid of targets, n and γ (the survey's λ and ε = γε_c/3);
    # at γ = 1 and λn ≫ 1 it is 2ε = (2/3)ε_c.
    worst = 0.0
    for eps_c in (0.01, 0.1, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0):
        for n in (3, 100, 10**4, 10**6, 10**8):
            for gamma in (1.0, 0.5, 0.1, 0.01):
                if gamma * n < 1:
                    continue
                proto = CntSGM.from_central(epsilon_central=eps_c, n=n, gamma=gamma)
                ratio = proto.sum_epsilon / eps_c
                assert ratio <= 1.0, (eps_c, n, gamma, proto.sum_epsilon)
                worst = max(worst, ratio)
    assert 0.9 < worst < 0.97  # large ε_c at γ = 1 comes close (0.965 at ε_c = 20)
    mid = CntSGM.from_central(epsilon_central=1.0, n=10**4)
    assert mid.sum_epsilon == pytest.approx(2 * mid.params.epsilon, abs=1e-9)
    # ... while the unary view's "no +1 message" event alone exceeds the claim
    assert mid.no_plus_epsilon > 6.0


def test_sum_epsilon_falls_with_more_honest_users() -> None:
    values = [sgm_sum_epsilon(epsilon=1.0, lam=0.02, honest=h) for h in (1, 2, 5, 20, 100, 400)]
    assert all(b <= a + 1e-12 for a, b in itertools.pairwise(values))
    assert values[-1] == pytest.approx(2.0, abs=1e-6)


def test_sum_epsilon_refuses_bad_parameters() -> None:
    with pytest.raises(ParameterError, match="lam"):
        sgm_sum_epsilon(epsilon=1.0, lam=0.0, honest=5)
    with pytest.raises(ParameterError, match="honest"):
        sgm_sum_epsilon(epsilon=1.0, lam=0.5, honest=0)
    with pytest.raises(ParameterError, match="epsilon"):
        sgm_sum_epsilon(epsilon=-1.0, lam=0.5, honest=5)


def _splitmix(n: int, eps_c: float = 1.0, gamma: float = 1.0) -> CntSGMSplitMix:
    p = build_protocol(
        "cnt_sgm",
        ProtocolSpec(
            epsilon=eps_c, delta=1e-6, n=n, options={"encoding": "splitmix", "gamma": gamma}
        ),
    )
    assert isinstance(p, CntSGMSplitMix)
    return p


def test_splitmix_states_the_sum_epsilon_with_delta() -> None:
    p = _splitmix(10_000)
    g = p.privacy
    assert g.epsilon_central == p.sum_epsilon <= 1.0
    assert g.delta == 1e-6
    assert g.epsilon_local == CntSGM.from_central(epsilon_central=1.0, n=10_000).epsilon_local
    assert "cnt_sgm_splitmix_exact" in g.bound
    spec = p.share_spec
    assert spec is not None
    assert p.messages_per_user == spec.shares >= 2
    # m shares of Z_q are 2^-σ-close to their sum for the ⌈γn⌉ honest users (Balle et al.)
    need = (2 * p.sigma + math.log2(spec.modulus)) / (math.log2(10_000) - math.log2(math.e)) + 1
    assert spec.shares == max(2, math.ceil(need))
    # fewer honest users than the shares were sized for: no own bound, the audit goes generic
    assert p.honest_users_bound(9_999) is not None
    assert p.honest_users_bound(5_000) is None
    robust = _splitmix(10_000, gamma=0.5)
    bound = robust.honest_users_bound(4_999)
    assert bound is not None
    assert bound.epsilon_upper == pytest.approx(robust.sum_epsilon)
    low = robust.honest_users_lower(4_999, fakes=0, delta=1e-6)
    assert low is not None
    assert 0.0 < low[0] < robust.sum_epsilon


def test_splitmix_is_unbiased_with_the_stated_variance() -> None:
    # 600 seeded runs of randomize → shares → estimate at n = 400: mean within 4 standard
    # errors of the truth, variance within ±20 % of the stated one (the sd of a sample
    # variance of 600 draws is ≈ 6 %, so that is over 3 sd).
    n, runs = 400, 600
    p = _splitmix(n)
    rng = np.random.default_rng(2026)
    x = (rng.random(n) < 0.3).astype(np.int64)
    spec = p.share_spec
    assert spec is not None
    errors = []
    for _ in range(runs):
        values = p.randomize(x, rng=rng)
        shares = rng.integers(0, spec.modulus, size=(n, spec.shares - 1), dtype=np.int64)
        last = (values - shares.sum(axis=1)) % spec.modulus
        msgs = np.concatenate([shares, last[:, None]], axis=1).reshape(-1)
        est = p.estimate(msgs, n=n, n_fakes=0)
        errors.append(float(est.values[0]) - float(x.sum()))
    err = np.asarray(errors)
    var = p.variance(n=n)
    assert abs(err.mean()) <= 4 * math.sqrt(var / runs)
    assert 0.8 <= err.var() / var <= 1.2


def test_splitmix_fakes_vanish_from_the_sum() -> None:
    p = _splitmix(500)
    rng = np.random.default_rng(7)
    values = p.randomize(np.ones(500, dtype=np.int64), rng=rng)
    fakes = p.sample_fakes(37, rng=rng)
    plain = p.estimate(values, n=500, n_fakes=0)
    with_fakes = p.estimate(np.concatenate([values, fakes]), n=500, n_fakes=37)
    assert with_fakes.values[0] == plain.values[0]
    assert with_fakes.expected_std[0] == plain.expected_std[0]


def test_splitmix_refusals() -> None:
    with pytest.raises(ParameterError, match="at least 3 honest users"):
        _splitmix(4, gamma=0.5)
    with pytest.raises(ParameterError, match="encoding must be one of splitmix, unary"):
        build_protocol(
            "cnt_sgm", ProtocolSpec(epsilon=1.0, delta=1e-6, n=100, options={"encoding": "x"})
        )


def test_splitmix_through_the_onion_pipeline() -> None:
    n = 1_000
    p = _splitmix(n)
    rng = np.random.default_rng(11)
    x = (rng.random(n) < 0.5).astype(np.int64)
    config = PipelineConfig(shufflers=2, fake_reports=3, crypto="onion", workers=1)
    res = run_pipeline(p, x, config, rng=np.random.default_rng(5))
    assert res.estimate.extra["complete"] is True
    spec = p.share_spec
    assert spec is not None
    assert res.estimate.extra["shares_received"] == n * spec.shares + 2 * 3 * spec.shares
    assert abs(res.estimate.values[0] - x.sum()) <= 5 * res.estimate.expected_std[0]


def test_cli_splitmix_meets_the_target_without_warning(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["simulate", "--protocol", "cnt_sgm", "--n", "300", "--crypto", "onion", "--json"]
    assert main([*argv, "--option", "encoding=splitmix"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["privacy_warning"] is None
    assert out["epsilon_central"] <= 1.0
    assert out["delta"] == 1e-6
    # splitmix is the default; the unary encoding is refused (exit 1) unless --allow-weaker,
    # and then it warns and names the encoding as the fix
    assert main([*argv, "--option", "encoding=unary"]) == 1
    assert "--allow-weaker" in capsys.readouterr().err
    assert main([*argv, "--option", "encoding=unary", "--allow-weaker"]) == 0
    captured = capsys.readouterr()
    out = json.loads(captured.out)
    assert "encoding=splitmix" in out["privacy_warning"]
    assert out["weaker_than_requested"] is True


def test_service_config_options_build_the_variant_and_refuse_typos() -> None:
    # What `esa serve` reads from a [protocol] table with a [protocol.options] sub-table.
    from esa.net import load_protocol

    table = {"name": "cnt_sgm", "epsilon": 1.0, "delta": 1e-6, "n": 1000}
    p = load_protocol({**table, "options": {"encoding": "splitmix", "gamma": 0.5}})
    assert isinstance(p, CntSGMSplitMix)
    assert p.params.gamma == 0.5
    with pytest.raises(ParameterError, match="unknown option gama"):
        load_protocol({**table, "options": {"gama": 0.5}})
