"""Noisy crowd thresholds (esa._threshold): the plain threshold is untouched, the noisy one
follows the two-sided geometric law, its release decision is ε_t-DP, the run's statement
pays for it, and a live shuffler draws its noise from the OS CSPRNG.

Statistical tests are seeded; their tolerance is 5 binomial standard deviations.
"""

from __future__ import annotations

import math
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import crypto
import esa
import protocols
from esa._errors import ConfigError
from esa._threshold import (
    NoisyThreshold,
    check_threshold_epsilon,
    release_probability,
    reports_per_user_bound,
    threshold_cost,
)
from esa.net._config import config_from_dict

T = 5
EPS_T = 0.5


def _proto(n: int = 40) -> protocols.HistKR:
    return protocols.HistKR(domain=8, epsilon_local=3.0, n=n, delta=1e-6)


def _crowds(protocol: protocols.HistKR, size: int, crowds: int) -> tuple[Any, Any]:
    """An ideal-codec batch of ``crowds`` crowds of ``size`` reports each, and its codec."""
    codec = esa.make_codec("ideal", message_size=protocol.message_size, layers=2)
    enc = esa.Encoder(protocol, codec, [b"", b""], workers=1)
    msgs = protocol.randomize(np.zeros(size, dtype=np.int64), rng=np.random.default_rng(0))
    parts = [enc.seal_messages(msgs, epoch=1, crowd_id=j, first_hop=0) for j in range(crowds)]
    return codec.concat(parts), codec


def _shuffler(codec: Any, protocol: protocols.HistKR, **kw: Any) -> esa.Shuffler:
    return esa.Shuffler(
        hop=0, codec=codec, key=None, route=[b"", b""], protocol=protocol, threshold=T, **kw
    )


# ------------------------------------------------------------------- default unchanged


def test_plain_threshold_unchanged() -> None:
    """No noise: T − 1 reports held, T released, and the counters' JSON has no new key."""
    assert esa.PipelineConfig().threshold_noise is None
    protocol = _proto()
    for size, held in ((T - 1, T - 1), (T, 0), (T + 1, 0)):
        batch, codec = _crowds(protocol, size, 1)
        sh = _shuffler(codec, protocol)
        assert sh.noisy is None
        _, c = sh.process(batch, epoch=1)
        assert c.held == held
        assert c.forwarded == size - held
        assert not c.noisy_threshold
        assert "noisy_threshold" not in c.to_json()
    run = esa.run_pipeline(
        protocol,
        np.zeros(40, dtype=np.int64),
        esa.PipelineConfig(shufflers=2, threshold=T, crypto="ideal"),
        rng=0,
    )
    assert run.privacy == run.calibration
    assert "threshold_epsilon" not in run.run_guarantee.facts.to_json()


# ------------------------------------------------------------------------ the law


@pytest.mark.parametrize("count", [T - 1, T, T + 1])
def test_release_frequency_matches_geometric_law(count: int) -> None:
    """Over 2000 seeded crowds of ``count`` reports (one batch, one decision per crowd), the
    share released is P[c + Z ≥ T] of DLap(e^{−ε_t}) within 5 binomial std."""
    protocol = _proto()
    crowds = 2000
    batch, codec = _crowds(protocol, count, crowds)
    sh = _shuffler(
        codec, protocol, threshold_noise=EPS_T, threshold_rng=np.random.default_rng(count)
    )
    _, c = sh.process(batch, epoch=1)
    assert c.noisy_threshold
    assert c.to_json()["noisy_threshold"] is True
    released = crowds - len(sh.held)
    assert c.held == count * len(sh.held)
    assert c.forwarded == count * released
    p = release_probability(count, T, math.exp(-EPS_T))
    std = math.sqrt(crowds * p * (1 - p))
    assert abs(released - crowds * p) <= 5 * std, (released, crowds * p, std)


def test_release_probability_closed_form() -> None:
    """The closed form against the law summed term by term, in exact arithmetic."""
    alpha = Fraction(3, 5)

    def pmf(k: int) -> Fraction:
        return (1 - alpha) / (1 + alpha) * alpha ** abs(k)

    for threshold in (1, 3, 7):
        for count in range(0, 12):
            k = threshold - count
            # P[Z >= k] = 1 - P[Z <= k - 1]; the tail beyond ±60 is below 0.6^60.
            direct = 1 - sum(pmf(j) for j in range(-60, k))
            exact = release_probability(count, threshold, alpha)
            assert abs(exact - direct) < Fraction(1, 10**12)


@pytest.mark.parametrize(
    "alpha", [Fraction(1, 2), Fraction(3, 5), Fraction(9, 10), Fraction(99, 100)]
)
def test_decision_is_eps_dp_exactly(alpha: Fraction) -> None:
    """For neighbouring counts c, c + 1 and both outcomes, the exact ratio of probabilities
    is at most 1/α = e^{ε_t} (ε_t = ln 1/α), with equality above the threshold."""
    for threshold in (1, 2, 5, 20):
        for count in range(0, 40):
            p0 = release_probability(count, threshold, alpha)
            p1 = release_probability(count + 1, threshold, alpha)
            for a, b in ((p0, p1), (1 - p0, 1 - p1)):
                assert a <= b / alpha, (threshold, count)
                assert b <= a / alpha, (threshold, count)
        # c < T: the release probabilities are exactly a factor α apart.
        assert release_probability(threshold - 2, threshold, alpha) == alpha * release_probability(
            threshold - 1, threshold, alpha
        )
    # In floats, with ε_t itself: ratio ≤ e^{ε_t} up to rounding.
    rule = NoisyThreshold(T, EPS_T)
    for count in range(0, 3 * T):
        q0, q1 = rule.release_probability(count), rule.release_probability(count + 1)
        assert q1 / q0 <= math.exp(EPS_T) * (1 + 1e-12)
        assert (1 - q0) / (1 - q1) <= math.exp(EPS_T) * (1 + 1e-12)


# -------------------------------------------------------------------- the statement


def test_run_statement_adds_threshold_epsilon() -> None:
    """A single-message protocol (k = 1), m = 2 shufflers: ε_c + 2·ε_t, δ unchanged; the
    facts and the bound say so."""
    n = 400
    protocol = _proto(n)
    assert reports_per_user_bound(protocol) == 1
    config = esa.PipelineConfig(shufflers=2, threshold=T, threshold_noise=EPS_T, crypto="ideal")
    run = esa.run_pipeline(protocol, np.zeros(n, dtype=np.int64), config, rng=1)
    cal = protocol.privacy
    assert run.privacy.epsilon_central == pytest.approx(cal.epsilon_central + 2 * EPS_T)
    assert run.privacy.delta == cal.delta
    assert "noisy threshold" in run.privacy.bound
    assert run.run_guarantee.facts.threshold_epsilon == EPS_T
    assert all(h.noisy_threshold for h in run.hops if h.role == "shuffler")
    # The JSON document states the composed ε.
    assert run.to_json()["epsilon_central"] == pytest.approx(cal.epsilon_central + 2 * EPS_T)


def test_statement_composes_with_recomputed_guarantee() -> None:
    """A run that differs from the calibration (fewer users): ε_t is added to the run's own
    guarantee too; a protocol with no bound on a user's reports states ∞."""
    protocol = _proto(400)
    facts = esa.RunFacts(
        n_users=300,
        fakes_added=(0, 0),
        fakes_arrived=0,
        shufflers=2,
        threshold=T,
        domain=8,
        threshold_epsilon=EPS_T,
    )
    plain = esa.run_guarantee(protocol, esa.RunFacts(300, (0, 0), 0, 2, T, 8))
    noisy = esa.run_guarantee(protocol, facts)
    assert noisy.privacy.epsilon_central == pytest.approx(plain.privacy.epsilon_central + 2 * EPS_T)
    assert facts.to_json()["threshold_epsilon"] == EPS_T

    class _Unbounded:
        share_spec = None
        messages_per_user = 1.5

    assert reports_per_user_bound(_Unbounded()) is None  # type: ignore[arg-type]
    assert threshold_cost(_Unbounded(), EPS_T, 3) == math.inf  # type: ignore[arg-type]
    cnt_2m_like = type("P", (), {"share_spec": None, "messages_per_user": 1.2})()
    cnt_2m_like.max_messages_per_user = 2
    assert threshold_cost(cnt_2m_like, EPS_T, 3) == pytest.approx(3 * 2 * EPS_T)


# -------------------------------------------------------------------- randomness


def test_live_runs_draw_noise_from_the_csprng(monkeypatch: pytest.MonkeyPatch) -> None:
    """seeded_fakes=False: every shuffler gets no threshold generator and each decision
    draws from crypto.csprng_generator; two runs with the same seed then differ, while
    seeded runs with the same seed are identical."""
    protocol = _proto()
    crowds = 200
    batch, codec = _crowds(protocol, T, crowds)

    calls = 0
    real = crypto.csprng_generator

    def counting() -> np.random.Generator:
        nonlocal calls
        calls += 1
        return real()

    monkeypatch.setattr(crypto, "csprng_generator", counting)
    sh = _shuffler(codec, protocol, threshold_noise=EPS_T)
    assert sh.threshold_rng is None
    sh.process(batch, epoch=1)
    assert calls == crowds  # one fresh CSPRNG draw per crowd decision

    def held_pattern(seeded: bool) -> list[int]:
        cfg = esa.PipelineConfig(
            shufflers=1,
            threshold=40,
            threshold_noise=EPS_T,
            crypto="ideal",
            seeded_fakes=seeded,
        )
        return [
            esa.run_pipeline(protocol, np.zeros(40, dtype=np.int64), cfg, rng=7).hops[0].held
            for _ in range(40)
        ]

    # c = T = 40: each run is held with probability α/(1+α) ≈ 0.38 for ε_t = 0.5.
    seeded = held_pattern(True)
    assert len(set(seeded)) == 1
    live = held_pattern(False)
    assert len(set(live)) == 2  # P[all 40 alike] < 1e-8


# -------------------------------------------------------------------- validation


@pytest.mark.parametrize("bad", [0, 0.0, -1.0, math.inf, math.nan, True, "1"])
def test_threshold_epsilon_must_be_finite_positive(bad: Any) -> None:
    with pytest.raises(ConfigError):
        esa.PipelineConfig(threshold=T, threshold_noise=bad)
    with pytest.raises(ConfigError):
        check_threshold_epsilon(bad)
    protocol = _proto()
    _, codec = _crowds(protocol, 1, 1)
    with pytest.raises(ConfigError):
        _shuffler(codec, protocol, threshold_noise=bad)


def test_noisy_threshold_needs_a_threshold() -> None:
    with pytest.raises(ConfigError, match="threshold >= 1"):
        esa.PipelineConfig(threshold=0, threshold_noise=EPS_T)
    assert esa.PipelineConfig(threshold=1, threshold_noise=1).threshold_noise == 1.0


def _party_doc(shuffle: dict[str, Any]) -> dict[str, Any]:
    return {
        "role": "shuffler",
        "hop": 0,
        "state_dir": "state",
        "listen": {"host": "127.0.0.1", "port": 0},
        "tls": {"insecure_plaintext": True},
        "next": {"host": "127.0.0.1", "port": 9},
        "keys": {"epochs": {"1": "keys"}},
        "protocol": {"name": "hist_kr", "epsilon": 1.0, "delta": 1e-6, "n": 1000, "domain": 4},
        "shuffle": shuffle,
    }


def test_party_config_threshold_epsilon(tmp_path: Path) -> None:
    crypto.KeyDirectory.create(tmp_path / "keys", shufflers=1)
    cfg = config_from_dict(_party_doc({"threshold": T}), base=tmp_path, simulation=True)
    assert cfg.threshold_epsilon is None
    cfg = config_from_dict(
        _party_doc({"threshold": T, "threshold_epsilon": EPS_T}), base=tmp_path, simulation=True
    )
    assert cfg.threshold_epsilon == EPS_T
    for bad in (0, -0.5, math.inf, math.nan, "x", True):
        with pytest.raises(ConfigError, match="threshold_epsilon"):
            config_from_dict(
                _party_doc({"threshold": T, "threshold_epsilon": bad}),
                base=tmp_path,
                simulation=True,
            )
    with pytest.raises(ConfigError, match="threshold >= 1"):
        config_from_dict(_party_doc({"threshold_epsilon": EPS_T}), base=tmp_path, simulation=True)


# ------------------------------------------------- live parties: the signed crowd rule

LIVE_USERS = 60
LIVE = {"name": "hist_kr", "epsilon": 1.0, "delta": 1e-6, "n": LIVE_USERS, "domain": 4}


def _live_run(
    root: Path, state: str, shuffler_rule: dict[str, Any], analyzer_rule: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """A shuffler and the analyzer on 127.0.0.1 (plaintext: a local simulation's parties),
    ``LIVE_USERS`` onion reports in one crowd, one epoch closed; the analyzer's RESULT and
    full STATUS once the epoch is analyzed."""
    import trio

    from esa.net import PartyService, query, submit_reports
    from esa.net import _wire as w

    protocol = esa.load_protocol(LIVE)
    common = {
        "keys": {"epochs": {"1": "keys"}},
        "protocol": LIVE,
        "tls": {"insecure_plaintext": True},  # TLS: tests/test_net_tls.py
    }
    a_doc = {"role": "analyzer", "hop": 1, "state_dir": f"{state}/a", **common}
    a_doc |= {"listen": {"host": "127.0.0.1", "port": 0}, "shuffle": analyzer_rule}
    analyzer = PartyService(config_from_dict(a_doc, base=root, simulation=True))
    keys = crypto.KeyDirectory.load(root / "keys")
    codec = esa.make_codec("onion", message_size=protocol.message_size, layers=2)
    enc = esa.Encoder(protocol, codec, [p.layer_public for p in keys.route()], workers=1)
    values = np.arange(LIVE_USERS) % 4
    reports = [bytes(r) for r in enc.encode(values, rng=np.random.default_rng(3), epoch=1)]
    out: dict[str, Any] = {}
    shuffler: PartyService | None = None

    async def main() -> None:
        nonlocal shuffler
        async with trio.open_nursery() as nursery:
            port = await nursery.start(analyzer.run)
            s_doc = {"role": "shuffler", "hop": 0, "state_dir": f"{state}/s", **common}
            s_doc |= {"listen": {"host": "127.0.0.1", "port": 0}, "shuffle": shuffler_rule}
            s_doc["next"] = {"host": "127.0.0.1", "port": port}
            shuffler = PartyService(config_from_dict(s_doc, base=root, simulation=True))
            first = await nursery.start(shuffler.run)
            stats = await submit_reports(esa.Address("127.0.0.1", first), reports, key_epoch=1)
            assert stats.acknowledged == LIVE_USERS
            await shuffler._close_open_epochs(operator=True)
            assert analyzer.query_port is not None
            queries = esa.Address("127.0.0.1", analyzer.query_port)
            with trio.fail_after(60):
                while (await query(queries, w.QueryKind.RESULT))["epochs"] < 1:
                    await trio.sleep(0.05)
            out["result"] = await query(queries, w.QueryKind.RESULT)
            out["status"] = await query(queries, w.QueryKind.STATUS)
            nursery.cancel_scope.cancel()

    try:
        trio.run(main)
    finally:
        analyzer.close()
        if shuffler is not None:
            shuffler.close()
    return out["result"], out["status"]


@pytest.fixture(scope="module")
def live_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("live-threshold")
    crypto.KeyDirectory.create(path / "keys", shufflers=1)
    return path


def test_the_analyzer_states_the_epsilon_the_shufflers_signed(live_root: Path) -> None:
    """The shuffler signs T and ε_t in its count statement; the analyzer's RESULT states
    ε_c + m·k·ε_t with the signed ε_t (m = 1 shuffler, k = 1 message per user): the same
    as the statement for the same facts without the threshold, plus 1·1·ε_t."""
    rule = {"threshold": T, "threshold_epsilon": EPS_T}
    result, status = _live_run(live_root, "agree", rule, {"threshold_epsilon": EPS_T})
    assert result["drop_check"] == {"ok": True, "problems": []}
    assert "privacy_refused" not in result
    privacy = result["privacy"]
    facts = privacy["facts"]
    assert facts["threshold_epsilon"] == EPS_T
    assert facts["n_users"] == LIVE_USERS  # a crowd of 60 at T = 5: released (P ≈ 1 − 1e-14)
    protocol = esa.load_protocol(LIVE)
    plain = esa.run_guarantee(
        protocol,
        esa.RunFacts(
            n_users=facts["n_users"],
            fakes_added=tuple(facts["fakes_added"]),
            fakes_arrived=facts["fakes_arrived"],
            shufflers=facts["shufflers"],
            threshold=facts["threshold"],
            domain=facts["domain"],
        ),
        on_mismatch="recompute",
    )
    added = threshold_cost(protocol, EPS_T, 1)
    assert added == EPS_T
    assert privacy["epsilon_central"] == pytest.approx(plain.privacy.epsilon_central + added)
    assert status["counters"].get("threshold_mismatches", 0) == 0


@pytest.mark.parametrize(
    ("analyzer_rule", "signed"),
    [
        ({"threshold_epsilon": EPS_T / 2}, "threshold_epsilon = 0.5"),  # another ε_t
        ({}, "threshold_epsilon = 0.5, but the deployment states None"),  # none stated
    ],
)
def test_a_crowd_rule_other_than_the_analyzers_is_refused(
    live_root: Path,
    caplog: pytest.LogCaptureFixture,
    analyzer_rule: dict[str, Any],
    signed: str,
) -> None:
    """A shuffler that applies (and signs) another ε_t than the analyzer states: the
    analyzer states no ε for the run (privacy null, why under privacy_refused and in the
    drop check), counts the epoch under ``threshold_mismatches`` and logs one event."""
    import json
    import logging

    caplog.set_level(logging.INFO, logger="esa.net.events")
    rule = {"threshold": T, "threshold_epsilon": EPS_T}
    state = f"mismatch-{len(analyzer_rule)}"
    result, status = _live_run(live_root, state, rule, analyzer_rule)
    assert result["privacy"] is None
    (refusal,) = result["privacy_refused"]
    assert refusal.startswith("epoch 0: hop 0 signed ")
    assert signed in refusal
    assert result["drop_check"]["ok"] is False
    assert any(signed in p for p in result["drop_check"]["problems"])
    assert status["counters"]["threshold_mismatches"] == 1
    events = [json.loads(r.getMessage()) for r in caplog.records]
    (logged,) = [e for e in events if e.get("event") == "threshold_mismatch"]
    assert logged["epoch"] == 0
    assert signed in logged["problems"][0]


def test_the_statement_is_computed_from_the_signed_rule_not_a_recorded_one() -> None:
    """analyzer_guarantee on stored epochs: the ε_t the statements carry counts (the
    largest, if hops differ); an epoch stored before statements carried one uses the ε_t
    recorded with it; an epoch whose signed rule disagreed states nothing."""
    from esa.net._inbox import EpochRecord
    from esa.net._processing import analyzer_guarantee

    protocol = esa.load_protocol(LIVE)
    counts = {"received": 60, "invalid": 0, "replayed": 0, "held": 0, "fakes_added": 0}
    analyzer = {"hop": 2, "role": "analyzer", **counts, "forwarded": 60}

    def epoch(signed: list[float | None] | None, **stats: Any) -> EpochRecord:
        chain = [{"hop": h, **counts, "forwarded": 60} for h in range(2)]
        if signed is not None:
            for s, eps_t in zip(chain, signed, strict=True):
                s |= {"threshold": T, "threshold_epsilon": eps_t}
        body = {"analyzer": analyzer, "chain": chain, "problems": [], "fakes": 0, **stats}
        return EpochRecord(0, 1, "processed", None, None, body)

    def eps(rec: EpochRecord) -> float:
        g = analyzer_guarantee(protocol, [rec])
        assert g is not None
        return float(g.privacy.epsilon_central)

    plain = eps(epoch([None, None]))
    assert eps(epoch([EPS_T, EPS_T])) == pytest.approx(plain + 2 * EPS_T)  # m = 2, k = 1
    # The signed values win over one the analyzer recorded from its config.
    assert eps(epoch([EPS_T, EPS_T], threshold_epsilon=0.01)) == pytest.approx(plain + 2 * EPS_T)
    assert eps(epoch([EPS_T, 0.1])) == pytest.approx(plain + 2 * EPS_T)  # m·k·max bounds it
    assert eps(epoch(None, threshold_epsilon=0.1)) == pytest.approx(plain + 2 * 0.1)  # legacy
    refused = epoch([EPS_T, EPS_T], threshold_mismatch=["hop 0 signed …"])
    assert analyzer_guarantee(protocol, [epoch([EPS_T, EPS_T]), refused]) is None


def test_a_refused_statement_is_never_released_under_a_budget(live_root: Path) -> None:
    """The ledger row of an epoch whose signed rule disagreed states ε = ∞, so a [budget]
    refuses its release (it stays stored) and the spent ε stays finite."""
    import sqlite3

    from esa.net import PartyService, _ledger
    from esa.net._inbox import EpochRecord

    doc = {
        "role": "analyzer",
        "hop": 1,
        "state_dir": "ledger-a",
        "listen": {"host": "127.0.0.1", "port": 0},
        "keys": {"epochs": {"1": "keys"}},
        "protocol": LIVE,
        "tls": {"insecure_plaintext": True},
        "budget": {"epsilon_total": 4.0, "delta_total": 1e-5},
    }
    svc = PartyService(config_from_dict(doc, base=live_root, simulation=True))
    try:
        lead = EpochRecord(0, 1, "closed", None, None, {})
        stats = {"analyzer": {}, "chain": [], "threshold_mismatch": ["hop 0 signed …"]}
        entry = svc._ledger_entry(lead, stats)
    finally:
        svc.close()
    assert entry.epsilon == math.inf
    assert entry.bound.startswith("refused")
    db = sqlite3.connect(":memory:")
    try:
        with pytest.raises(_ledger.BudgetExceeded):
            _ledger.record_release(db, entry, budget=svc.config.budget)
    finally:
        db.close()
