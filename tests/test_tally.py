"""The ``tally`` representation: hops carry the estimator's summary of the message multiset.

What must hold for a tally run to be the same experiment as a report run:
* the direct samplers draw the summary from the same law as summarizing drawn messages
  (exhaustive enumeration at small sizes, then goodness-of-fit with stated thresholds);
* the pipeline applies thresholds and fakes as it does to reports, and the estimates agree;
* ``esa simulate --crypto ideal`` runs PRHR, PUCM and PRRQ at n = 10^6 (issue 4).
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
from collections import Counter
from typing import Any

import numpy as np
import pytest
from scipy import stats

import esa
from protocols import (
    PRHR,
    PRRQ,
    PUCM,
    CntPURE,
    HistMM,
    MessageTally,
    ParameterError,
    ProtocolSpec,
    RSumPURE,
    build_protocol,
)
from protocols._prhr import (
    nullity_distribution,
    uniform_subspace_bases,
    uniform_tuple_row_counts,
    uniform_tuples,
)
from simulations.cli import main

# Goodness-of-fit tests reject at p < 1e-4: with fixed seeds they are deterministic, and the
# threshold leaves a wide margin for a correct sampler.
P_REJECT = 1e-4


def _null_pattern(words: tuple[int, ...], L: int) -> int:
    """Bitmask of the non-zero r with XOR of the words selected by r equal to 0."""
    mask = 0
    for r in range(1, 1 << L):
        acc = 0
        for j in range(L):
            if r >> j & 1:
                acc ^= words[j]
        if acc == 0:
            mask |= 1 << r
    return mask


def _exact_patterns(L: int, tau: int) -> dict[int, float]:
    """Law of a uniform tuple's null space, by enumerating every tuple."""
    counts = Counter(_null_pattern(w, L) for w in itertools.product(range(1 << tau), repeat=L))
    total = sum(counts.values())
    return {k: v / total for k, v in counts.items()}


@pytest.mark.parametrize(("L", "tau"), [(3, 2), (2, 3), (3, 3), (4, 2)])
def test_nullity_distribution_matches_enumeration(L: int, tau: int) -> None:
    by_dim = np.zeros(L + 1)
    for pattern, p in _exact_patterns(L, tau).items():
        by_dim[int(math.log2(bin(pattern).count("1") + 1))] += p
    assert np.allclose(nullity_distribution(L, tau), by_dim, rtol=1e-12, atol=1e-15)


def test_nullity_distribution_at_scale_is_a_distribution() -> None:
    # n = 10^6 (τ = 20), d up to 2^24: P[non-trivial] ≈ (2^L − 1) 2^{−τ}.
    for L in (5, 11, 24):
        p = nullity_distribution(L, 20)
        assert p.sum() == pytest.approx(1.0, abs=1e-12)
        assert np.all(p >= 0)
        if L < 20:
            assert 1 - p[0] == pytest.approx((2**L - 1) * 2.0**-20, rel=0.01)


@pytest.mark.parametrize("k", [1, 2])
def test_uniform_subspace_bases_are_uniform(k: int) -> None:
    # GF(2)^3 has 7 subspaces of dimension 1 and 7 of dimension 2.
    rng = np.random.default_rng(5)
    bases = uniform_subspace_bases(14_000, k, 3, rng=rng)
    spans = Counter()
    for row in bases:
        span = {0}
        for v in row:
            span |= {s ^ int(v) for s in span}
        spans[frozenset(span)] += 1
    assert len(spans) == 7
    assert all(len(s) == 2**k for s in spans)
    assert stats.chisquare(list(spans.values())).pvalue > P_REJECT


@pytest.mark.parametrize(("L", "tau"), [(3, 2), (3, 3)])
def test_row_count_sampler_has_the_law_of_drawn_tuples(L: int, tau: int) -> None:
    # One tuple per draw: its row-count vector is its null-space pattern. Compare the
    # sampler's patterns with the exact law (enumeration) by a chi-square test.
    exact = _exact_patterns(L, tau)
    rng = np.random.default_rng(7)
    draws = 6000
    seen = Counter()
    for _ in range(draws):
        c = uniform_tuple_row_counts(1, L, tau, rng=rng)
        seen[int(sum(1 << r for r in np.flatnonzero(c)))] += 1
    assert set(seen) <= set(exact)
    keys = sorted(exact)
    observed = [seen.get(k, 0) for k in keys]
    expected = [exact[k] * draws for k in keys]
    assert stats.chisquare(observed, expected).pvalue > P_REJECT
    # And the per-message path agrees with the same law (guards the reference itself).
    words = uniform_tuples(draws, L, tau, rng=rng)
    per_msg = Counter(_null_pattern(tuple(int(w) for w in row), L) for row in words)
    observed = [per_msg.get(k, 0) for k in keys]
    assert stats.chisquare(observed, expected).pvalue > P_REJECT


def test_row_count_sampler_moments_at_many_tuples() -> None:
    # K tuples at once: E T_r = K 2^{−τ}, Var T_r = K 2^{−τ}(1 − 2^{−τ}); 300 replicates,
    # mean within 4 standard errors, variance within ±25 %.
    L, tau, K, R = 4, 5, 3000, 300
    rng = np.random.default_rng(9)
    T = np.array([uniform_tuple_row_counts(K, L, tau, rng=rng) for _ in range(R)])[:, 1:]
    q = 2.0**-tau
    mean, var = K * q, K * q * (1 - q)
    assert np.all(np.abs(T.mean(axis=0) - mean) < 4 * math.sqrt(var / R))
    assert np.all(np.abs(T.var(axis=0) / var - 1) < 0.25)
    assert uniform_tuple_row_counts(0, L, tau, rng=rng).sum() == 0


def test_prhr_tally_users_matches_summarized_messages() -> None:
    # tally_users (blanket sampled as a summary) vs tally(randomize(...)) (every tuple drawn):
    # same mean row counts over 150 replicates each (two-sample, 4.5 standard errors).
    proto = PRHR(domain=6, epsilon=1.0, n=64, delta=0.2)
    x = np.arange(64) % 6
    rng = np.random.default_rng(3)
    R = 150
    a = np.array([proto.tally_users(x, rng=rng).counts for _ in range(R)], dtype=float)
    b = np.array([proto.tally(proto.randomize(x, rng=rng)).counts for _ in range(R)], dtype=float)
    se = np.sqrt((a.var(axis=0) + b.var(axis=0)) / R) + 1e-9
    assert np.all(np.abs(a.mean(axis=0) - b.mean(axis=0)) < 4.5 * se)
    assert proto.tally_users(x, rng=rng).messages == 64 * (1 + proto.params.rho)


def test_prrq_and_pucm_tallies_count_every_message() -> None:
    rng = np.random.default_rng(4)
    prrq = PRRQ(domain=8, epsilon=1.0, n=40, delta=0.2)
    x = np.arange(40) % 8
    t = prrq.tally_users(x, rng=rng)
    assert t.messages == 40 * (prrq.params.sensitivity + prrq.params.rho)
    pucm = PUCM(domain=8, epsilon=1.0, n=20_000, delta=0.1, tau=2)
    x = np.arange(20_000) % 8
    t = pucm.tally_users(x, rng=rng)
    assert t.messages == int(t.counts.sum())
    direct = pucm.tally(pucm.randomize(x, rng=rng))
    # Blanket Bin(n, λ) per cell either way: totals within 5 standard deviations.
    sd = math.sqrt(pucm.params.tau * pucm.params.s * 20_000 * pucm.params.lam)
    assert abs(t.messages - direct.messages) < 5 * sd * math.sqrt(2)
    for count in (10, 100_000):  # both branches of the fake sampler
        f = pucm.tally_fakes(count, rng=rng)
        assert f.messages == count == int(f.counts.sum())


@pytest.mark.parametrize("name", ["prhr", "pucm", "prrq", "hist_mm", "cnt_pure", "rsum_pure"])
def test_estimate_is_estimate_tally_of_the_tally(name: str) -> None:
    # One estimator, two entry points: on the same messages they agree exactly.
    n = {"pucm": 2000, "hist_mm": 40_000}.get(name, 64)
    spec = ProtocolSpec(epsilon=1.0, delta=0.1 if name != "hist_mm" else 1e-3, n=n, domain=8)
    # PUCM with one hash row: 1 + 2nλ ≈ 540 messages per user instead of ≈ 10^4.
    proto = PUCM(domain=8, epsilon=1.0, n=n, delta=0.1, tau=1) if name == "pucm" else None
    proto = proto or build_protocol(name, spec)
    assert proto.supports_tally
    rng = np.random.default_rng(8)
    x = rng.random(n) if name == "rsum_pure" else rng.integers(0, 2 if name == "cnt_pure" else 8, n)
    msgs = np.concatenate([proto.randomize(x, rng=rng), proto.sample_fakes(5, rng=rng)])
    a = proto.estimate(msgs, n=n, n_fakes=5)
    b = proto.estimate_tally(proto.tally(msgs), n=n, n_fakes=5)
    assert np.array_equal(a.values, b.values)
    assert np.array_equal(a.expected_std, b.expected_std)
    assert proto.tally(msgs).messages == msgs.shape[0]


def test_pure_protocols_tally_users_match_their_messages() -> None:
    # Cnt_PURE and RSum_PURE draw each user's ones exactly as randomize does; the tallies'
    # means agree within 4.5 standard errors over 150 replicates of each path.
    rng = np.random.default_rng(12)
    R = 150
    for proto, x in (
        (CntPURE(epsilon=1.0, n=300), rng.integers(0, 2, 300)),
        (RSumPURE(epsilon=1.0, n=300, precision=4), rng.random(300)),
    ):
        a = np.array([proto.tally_users(x, rng=rng).counts for _ in range(R)], dtype=float)
        b = np.array(
            [proto.tally(proto.randomize(x, rng=rng)).counts for _ in range(R)], dtype=float
        )
        se = np.sqrt((a.var(axis=0) + b.var(axis=0)) / R) + 1e-9
        assert np.all(np.abs(a.mean(axis=0) - b.mean(axis=0)) < 4.5 * se), proto
        f = proto.tally_fakes(1000, rng=rng)
        assert f.messages == 1000


def test_hist_mm_is_a_tally_protocol() -> None:
    assert HistMM(domain=4, epsilon=1.0, n=20_000, delta=1e-3).supports_tally


def test_tally_arithmetic_refuses_mismatched_shapes() -> None:
    a = MessageTally(np.zeros(4, dtype=np.int64), 0)
    with pytest.raises(ParameterError, match="different shapes"):
        _ = a + MessageTally(np.zeros(5, dtype=np.int64), 0)
    assert (a + a).messages == 0


def _prhr(n: int) -> PRHR:
    return PRHR(domain=8, epsilon=1.0, n=n, delta=0.1)


def test_pipeline_tally_counters_threshold_and_fakes() -> None:
    n = 500
    proto = _prhr(n)
    x = np.arange(n) % 8
    config = esa.PipelineConfig(crypto="ideal", representation="tally", fake_reports=7)
    r = esa.run_pipeline(proto, x, config, rng=np.random.default_rng(1))
    k = n * (1 + proto.params.rho)
    assert [h.received for h in r.hops] == [k, k + 7, k + 14, k + 21]
    assert [h.fakes_added for h in r.hops] == [7, 7, 7, 0]
    assert r.estimate.messages_used == k + 21
    assert r.to_json()["representation"] == "tally"
    held = esa.run_pipeline(
        proto,
        x,
        esa.PipelineConfig(crypto="ideal", representation="tally", threshold=k + 1),
        rng=np.random.default_rng(1),
    )
    assert held.hops[0].held == k
    assert held.hops[0].forwarded == 0
    assert held.hops[-1].received == 0


def test_pipeline_tally_and_reports_agree_in_distribution() -> None:
    # Same protocol, same data: the mean error over 25 seeded runs of each representation is
    # within 4 standard errors of 0 (PRHR is unbiased), and the per-run spread matches the
    # stated std within ±35 % for both.
    n, R = 400, 25
    proto = _prhr(n)
    x = np.arange(n) % 8
    truth = proto.truth(x)
    for rep in ("reports", "tally"):
        config = esa.PipelineConfig(crypto="ideal", representation=rep, shufflers=1)
        errs, stds = [], []
        for seed in range(R):
            r = esa.run_pipeline(proto, x, config, rng=np.random.default_rng(seed))
            errs.append(r.estimate.values - truth)
            stds.append(r.estimate.expected_std)
        e, s = np.array(errs), np.array(stds).mean(axis=0)
        assert np.all(np.abs(e.mean(axis=0)) < 4 * s / math.sqrt(R)), rep
        assert abs(float(np.sqrt((e**2).mean())) / float(s.mean()) - 1) < 0.35, rep


def test_pipeline_tally_refusals() -> None:
    proto = _prhr(100)
    x = np.arange(100) % 8
    with pytest.raises(esa.ConfigError, match="crypto='ideal'"):
        esa.PipelineConfig(crypto="onion", representation="tally")
    config = esa.PipelineConfig(crypto="ideal", representation="tally")
    with pytest.raises(esa.ConfigError, match="intercept"):
        esa.run_pipeline(proto, x, config, rng=np.random.default_rng(0), interceptors={0: id})
    hist = build_protocol("hist_kr", ProtocolSpec(epsilon=1.0, delta=1e-6, n=100, domain=8))
    assert not hist.supports_tally
    with pytest.raises(esa.ConfigError, match="cannot run as a tally"):
        esa.run_pipeline(hist, x, config, rng=np.random.default_rng(0))


@pytest.mark.parametrize(
    ("name", "per_user"),
    [("prhr", 535.0), ("prrq", 17283.0), ("pucm", None), ("rsum_pure", 4851.0)],
)
def test_esa_simulate_runs_multi_message_protocols_at_a_million_users(
    name: str, per_user: float | None, capsys: pytest.CaptureFixture[str]
) -> None:
    # Every multi-message protocol through `esa simulate --crypto ideal` at n = 10^6. These
    # send 535–183,000 messages per user (5·10^8–1.8·10^11 in all): only a tally fits.
    # rsum_pure runs its even split here (9 identical digit counters, one calibration): the
    # default optimal allocation calibrates 7 different counters, 4–5 CPU-minutes at this n,
    # and is run at n = 10^4 by tests/test_accuracy.py.
    argv = ["simulate", "--protocol", name, "--crypto", "ideal", "--n", "1000000", "--json"]
    if name == "rsum_pure":
        argv += ["--option", "allocation=even"]
    assert main(argv) == 0
    j = json.loads(capsys.readouterr().out)
    assert j["representation"] == "tally"
    assert j["n"] == 1_000_000
    if per_user is not None:
        assert j["messages_per_user"] == per_user
    assert j["hops"][0]["received"] == pytest.approx(j["messages_per_user"] * 1e6, rel=1e-3)
    err = np.array(j["estimate"]) - np.array(j["truth"])
    std = np.array(j["expected_std"])
    if name == "pucm":  # count-min: a bias from hash collisions is left; blanket scale
        assert float(np.sqrt(np.mean(err**2))) < 3 * float(std.mean())
    else:  # unbiased with the stated std: every bin within 5 std
        assert np.all(np.abs(err) < 5 * std)


def _usage_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    return err


def test_esa_simulate_representation_usage_errors(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _free_disk(monkeypatch, 10**9)  # PRHR's 5.35·10^8 rows need 36 GB spilled
    base = ["simulate", "--protocol", "prhr", "--n", "1000000"]
    err = _usage_error([*base, "--crypto", "onion", "--representation", "tally"], capsys)
    assert "needs --crypto ideal" in err
    err = _usage_error([*base, "--crypto", "ideal", "--representation", "reports"], capsys)
    assert "--representation tally" in err
    hist = ["simulate", "--protocol", "hist_kr", "--crypto", "ideal", "--n", "100"]
    assert "cannot run as a tally" in _usage_error([*hist, "--representation", "tally"], capsys)


def test_auto_tallies_a_run_of_millions_of_reports() -> None:
    """auto used to build every report up to the 5·10^7 cap: RSum_PURE at n = 20 000 (4.7·10^7
    one-bit reports) took 189 s and 6.3 GB as rows, 6 s tallied, with the same estimate."""
    from simulations.commands.simulate import AUTO_TALLY_ABOVE, choose_representation

    protocol = build_protocol("hist_kr", ProtocolSpec(epsilon=1.0, delta=1e-6, n=100))

    class Big:  # a tallied protocol sending more than AUTO_TALLY_ABOVE messages in all
        supports_tally = True
        messages_per_user = 1.0
        message_size = 1
        share_spec = None
        channels = 1

    def args(n: int, crypto: str = "ideal", representation: str = "auto") -> Any:
        return argparse.Namespace(
            n=n, shufflers=3, fake_reports=0, crypto=crypto, representation=representation
        )

    big = AUTO_TALLY_ABOVE + 1
    assert choose_representation(Big(), args(big)) == "tally"  # type: ignore[arg-type]
    assert choose_representation(Big(), args(big - 1)) == "reports"  # type: ignore[arg-type]
    assert choose_representation(Big(), args(1000, "onion")) == "reports"  # type: ignore[arg-type]
    assert choose_representation(protocol, args(big)) == "reports"  # no tally: rows
    rows = choose_representation(Big(), args(big, representation="reports"))  # type: ignore[arg-type]
    assert rows == "reports"  # asked for explicitly


def _free_disk(monkeypatch: pytest.MonkeyPatch, free: int) -> None:
    """The temp directory's disk reports ``free`` bytes (how a full disk is made here)."""
    import shutil

    usage = shutil.disk_usage(".")
    monkeypatch.setattr(shutil, "disk_usage", lambda _: usage._replace(free=free))


def test_the_disk_a_spilled_run_needs_counts_every_chain_and_every_fake_share(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # RSum_DSG sends each fake value as m shares, and RSum_RM runs one chain per precision,
    # each with its own shufflers' fakes: the disk check counts every report they create.
    from simulations._common import UsageError
    from simulations.commands.simulate import SPILL_COPIES, choose_representation

    def args(fakes: int) -> Any:
        return argparse.Namespace(
            n=100, shufflers=3, fake_reports=fakes, crypto="onion", representation="auto"
        )

    free = 200 * 2**20  # bytes on the temp directory's disk
    _free_disk(monkeypatch, free)
    dsg = build_protocol("rsum_dsg", ProtocolSpec(epsilon=1.0, delta=1e-6, n=100))
    rm = build_protocol("rsum_rm", ProtocolSpec(epsilon=1.0, delta=1e-6, n=20_000))
    assert dsg.share_spec is not None
    assert dsg.share_spec.shares > 1
    assert rm.channels > 1
    for protocol in (dsg, rm):
        codec = esa.make_codec("onion", message_size=protocol.message_size, layers=4)
        width = codec.expected_size(0)  # type: ignore[attr-defined]
        per_fake = 3 * protocol.channels * esa.reports_per_fake(protocol)
        users = protocol.messages_per_user * 100
        fits = int((free / (SPILL_COPIES * width) - users) // per_fake)  # fakes that just fit
        assert choose_representation(protocol, args(fits)) == "reports"
        with pytest.raises(UsageError, match="spill"):
            choose_representation(protocol, args(fits + 1))
