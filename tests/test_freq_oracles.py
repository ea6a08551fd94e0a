"""Frequency oracles: unbiasedness, exact variance, exact privacy, aggregate-level sampling.

Thresholds (seeded, with margin): mean error of every bin within 4 standard errors of 0
over R repeats; empirical variance within ±15 % of the closed form (R = 1500 repeats: the
relative standard deviation of a variance estimate is √(2/R) ≈ 3.7 %, so 15 % is 4σ).
"""

from __future__ import annotations

import math
import tracemalloc

import numpy as np
import pytest
from scipy import stats

from protocols import (
    BLH,
    HR,
    KRR,
    OLH,
    OUE,
    SHE,
    SUE,
    THE,
    FrequencyOracle,
    ParameterError,
    audit_discrete,
    lh_hash,
    lh_support_counts,
    unpack_unary,
)
from protocols.ldp._freq_oracles import FREQUENCY_ORACLES, fwht, optimal_theta

D = 8
N = 400
REPEATS = 1500
# a skewed dataset: bin 0 heavy, bin 7 empty
COUNTS = np.array([150, 80, 60, 40, 30, 25, 15, 0])
VALUES = np.repeat(np.arange(D), COUNTS)
ALL = [KRR, SHE, THE, SUE, OUE, BLH, OLH, HR]


def _estimates(oracle: FrequencyOracle, seed: int, repeats: int = REPEATS) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.stack([oracle.aggregate(oracle.randomize(VALUES, rng=rng)) for _ in range(repeats)])


@pytest.mark.parametrize("cls", ALL, ids=lambda c: c.name)
def test_unbiased_and_variance_matches_closed_form(cls: type[FrequencyOracle]) -> None:
    oracle = cls(d=D, epsilon=1.0)  # type: ignore[call-arg]
    est = _estimates(oracle, seed=11)
    var = oracle.variance(COUNTS, N)
    err = est.mean(axis=0) - COUNTS
    se = np.sqrt(var / REPEATS)
    assert np.all(np.abs(err) <= 4 * se), err / se
    ratio = est.var(axis=0, ddof=1) / var
    assert np.all(np.abs(ratio - 1) <= 0.15), ratio


@pytest.mark.parametrize("cls", [KRR, SUE, OUE, THE, HR], ids=lambda c: c.name)
def test_aggregate_sampler_agrees_with_user_level_path(cls: type[FrequencyOracle]) -> None:
    oracle = cls(d=D, epsilon=1.5)  # type: ignore[call-arg]
    assert oracle.aggregate_sampling
    rng = np.random.default_rng(5)
    user = np.stack(
        [oracle.support_counts(oracle.randomize(VALUES, rng=rng)) for _ in range(REPEATS)]
    )
    agg = np.stack([oracle.sample_support_counts(COUNTS, rng=rng) for _ in range(REPEATS)])
    assert agg.dtype.kind == "i"
    # both paths have the exact per-bin law's mean and variance: C_i is a sum of independent
    # Bernoulli(p*) (users with value i) and Bernoulli(q*) (the others)
    p, q = oracle.p_star, oracle.q_star
    mean = COUNTS * p + (N - COUNTS) * q
    var = COUNTS * p * (1 - p) + (N - COUNTS) * q * (1 - q)
    for draws in (user, agg):
        assert np.all(np.abs(draws.mean(axis=0) - mean) <= 4 * np.sqrt(var / REPEATS))
        assert np.all(np.abs(draws.var(axis=0) / var - 1) <= 0.15)
    # and the same distribution: a KS test on two bins does not reject at 0.1 %
    for b in (0, 7):
        assert stats.ks_2samp(user[:, b], agg[:, b]).pvalue > 1e-3
    # joint law: the correlation of two bins agrees too (negative for kRR's multinomial)
    c_user = np.corrcoef(user[:, 0], user[:, 1])[0, 1]
    c_agg = np.corrcoef(agg[:, 0], agg[:, 1])[0, 1]
    assert abs(c_user - c_agg) <= 0.12


def test_report_histogram_samplers_match_the_exact_mixture() -> None:
    """Histogram bin y is a sum of independent Bernoulli(P[v, y]) over users."""
    counts = np.array([30, 0, 10, 0])
    rng = np.random.default_rng(3)
    for oracle in (KRR(d=4, epsilon=1.0), HR(d=4, epsilon=1.0)):
        draws = np.stack([oracle.sample_report_histogram(counts, rng=rng) for _ in range(4000)])
        assert np.all(draws.sum(axis=1) == 40)
        m = oracle.output_distribution()
        mean, var = counts @ m, counts @ (m * (1 - m))
        assert np.all(np.abs(draws.mean(axis=0) - mean) <= 4 * np.sqrt(var / 4000))
        assert np.all(np.abs(draws.var(axis=0) / var - 1) <= 0.15)


# SHE has a continuous output: it is audited on a grid in test_ldp_audit
@pytest.mark.parametrize("cls", [c for c in ALL if c is not SHE], ids=lambda c: c.name)
@pytest.mark.parametrize("eps", [0.5, 2.0])
def test_exact_audit_holds_and_is_tight(cls: type[FrequencyOracle], eps: float) -> None:
    oracle = cls(d=6, epsilon=eps)  # type: ignore[call-arg]
    res = audit_discrete(cls.name, oracle.output_distribution(), eps)
    assert res.holds
    assert res.epsilon_measured <= eps * (1 + 1e-9)
    if cls is THE:
        # thresholding is post-processing of SHE: strictly below ε
        assert res.epsilon_measured < eps
    else:
        assert res.epsilon_measured == pytest.approx(eps, rel=1e-6)


@pytest.mark.parametrize("cls", [KRR, HR, OUE, SUE, THE], ids=lambda c: c.name)
def test_output_distribution_describes_the_randomizer(cls: type[FrequencyOracle]) -> None:
    """The matrix the audit checks is the law randomize() actually samples."""
    oracle = cls(d=5, epsilon=1.0)  # type: ignore[call-arg]
    m = oracle.output_distribution()
    assert np.allclose(m.sum(axis=1), 1.0)
    rng = np.random.default_rng(8)
    draws = 20_000
    for v in (0, 3):
        rep = oracle.randomize(np.full(draws, v), rng=rng)
        codes = rep[:, 0].astype(np.int64) if rep.ndim == 2 else rep  # packed bits = code
        freq = np.bincount(codes, minlength=m.shape[1]) / draws
        se = np.sqrt(m[v] * (1 - m[v]) / draws)
        assert np.all(np.abs(freq - m[v]) <= 5 * se + 1e-12)


def test_local_hash_is_uniform_and_pairwise_collides_at_rate_one_over_g() -> None:
    rng = np.random.default_rng(2)
    seeds = rng.integers(0, 1 << 64, size=200_000, dtype=np.uint64)
    for g in (2, 4, 7):
        h0 = lh_hash(seeds, 0, g)
        h1 = lh_hash(seeds, 1, g)
        h9 = lh_hash(seeds, 1023, g)
        assert h0.min() >= 0
        assert h0.max() < g
        freq = np.bincount(h0, minlength=g) / seeds.size
        assert np.all(np.abs(freq - 1 / g) <= 5 * math.sqrt((1 / g) / seeds.size))
        for other in (h1, h9):
            coll = float(np.mean(h0 == other))
            assert abs(coll - 1 / g) <= 5 * math.sqrt((1 / g) / seeds.size)


def test_lh_support_counts_matches_naive_and_is_chunk_invariant() -> None:
    rng = np.random.default_rng(4)
    d, g, n = 37, 5, 1000
    seeds = rng.integers(0, 1 << 64, size=n, dtype=np.uint64)
    ys = rng.integers(0, g, size=n)
    naive = (lh_hash(seeds[:, None], np.arange(d)[None, :], g) == ys[:, None]).sum(axis=0)
    for chunk in (None, 1, 7, 4096):
        assert np.array_equal(lh_support_counts(seeds, ys, d=d, g=g, chunk=chunk), naive)


def test_olh_aggregation_memory_is_bounded_by_the_chunk_not_n_times_d() -> None:
    oracle = OLH(d=1024, epsilon=1.0)
    rng = np.random.default_rng(0)
    rep = oracle.randomize(rng.integers(0, 1024, size=20_000), rng=rng)
    tracemalloc.start()
    oracle.aggregate(rep)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    # an n×d boolean matrix alone would be 20 MB; the chunked kernel stays near 5 MB
    assert peak < 8 * 2**20, peak


def test_olh_default_g_and_paper_variance() -> None:
    for eps in (0.5, 1.0, 3.0):
        o = OLH(d=100, epsilon=eps)
        assert o.g == round(math.exp(eps) + 1)
        e = math.exp(eps)
        # Wang et al. §4.4: Var* = n (e^ε − 1 + g)² / ((e^ε − 1)² (g − 1))
        assert o.approx_variance(1000) == pytest.approx(
            1000 * (e - 1 + o.g) ** 2 / ((e - 1) ** 2 * (o.g - 1))
        )
    assert BLH(d=10, epsilon=1.0).g == 2
    assert OLH(d=10, epsilon=1.0, g=9).g == 9


@pytest.mark.parametrize("eps", [0.5, 2.0])
def test_paper_closed_forms_of_var_star(eps: float) -> None:
    e, n, d = math.exp(eps), 1000, 16
    assert KRR(d=d, epsilon=eps).approx_variance(n) == pytest.approx(n * (d - 2 + e) / (e - 1) ** 2)
    h = math.exp(eps / 2)
    assert SUE(d=d, epsilon=eps).approx_variance(n) == pytest.approx(n * h / (h - 1) ** 2)
    assert OUE(d=d, epsilon=eps).approx_variance(n) == pytest.approx(4 * n * e / (e - 1) ** 2)
    assert HR(d=d, epsilon=eps).approx_variance(n) == pytest.approx(n * (e + 1) ** 2 / (e - 1) ** 2)
    assert SHE(d=d, epsilon=eps).approx_variance(n) == pytest.approx(8 * n / eps**2)


def test_the_default_theta_minimises_variance() -> None:
    for eps in (0.5, 2.0):
        best = THE(d=8, epsilon=eps)
        assert best.theta is not None
        theta_opt = best.theta
        assert theta_opt == pytest.approx(optimal_theta(eps))
        assert 0.5 < theta_opt < 1.0
        for theta in (0.55, 0.75, 0.95):
            if abs(theta - theta_opt) > 0.02:
                other = THE(d=8, epsilon=eps, theta=theta)
                assert best.approx_variance(100) < other.approx_variance(100)


def test_fwht_matches_explicit_hadamard_matrix() -> None:
    k = 16
    idx = np.arange(k)
    h = np.where(np.bitwise_count(idx[:, None] & idx[None, :]) % 2 == 0, 1, -1)
    v = np.random.default_rng(1).integers(0, 50, size=k)
    assert np.array_equal(fwht(v), h @ v)


def test_krr_raw_counts_sum_to_n_and_postprocessing_is_opt_in() -> None:
    o = KRR(d=D, epsilon=0.5)
    est = o.aggregate(o.randomize(VALUES, rng=np.random.default_rng(0)))
    assert est.sum() == pytest.approx(N)
    assert est.min() < 0  # raw unbiased counts may be negative (bin 7 is empty)
    clipped = o.aggregate(o.randomize(VALUES, rng=np.random.default_rng(0)), postprocess="clip")
    assert clipped.min() >= 0
    assert clipped.max() <= N
    simplex = o.aggregate(o.randomize(VALUES, rng=np.random.default_rng(0)), postprocess="simplex")
    assert simplex.min() >= 0
    assert simplex.sum() == pytest.approx(N)
    with pytest.raises(ParameterError, match="postprocess"):
        o.aggregate(o.randomize(VALUES, rng=np.random.default_rng(0)), postprocess="round")  # type: ignore[arg-type]


@pytest.mark.parametrize("d", [13, 64, 100])
def test_unary_reports_are_packed_bits_and_counted_exactly(d: int) -> None:
    """Both support-count kernels (byte histogram for d <= 32, bit-plane adder tree above)."""
    o = OUE(d=d, epsilon=1.0)
    x = np.random.default_rng(1).integers(0, d, size=5001)
    rep = o.randomize(x, rng=np.random.default_rng(0))
    assert rep.shape == (5001, (d + 7) // 8)
    assert rep.dtype == np.uint8
    bits = unpack_unary(rep, d)
    assert bits.shape == (5001, d)
    assert np.array_equal(o.support_counts(rep), bits.sum(axis=0))
    # padding bits beyond d are zero
    assert np.unpackbits(rep, axis=1, bitorder="little")[:, d:].sum() == 0


@pytest.mark.parametrize("cls", ALL, ids=lambda c: c.name)
def test_inputs_are_zero_based_with_a_clear_error(cls: type[FrequencyOracle]) -> None:
    o = cls(d=4, epsilon=1.0)  # type: ignore[call-arg]
    rng = np.random.default_rng(0)
    with pytest.raises(ParameterError, match=r"\[0, 4\) \(0-based\), got 4"):
        o.randomize([0, 1, 4], rng=rng)
    with pytest.raises(ParameterError, match="got -1"):
        o.randomize([-1], rng=rng)
    with pytest.raises(ParameterError, match="integers"):
        o.randomize([0.5], rng=rng)


@pytest.mark.parametrize(
    ("build", "match"),
    [
        (lambda: KRR(d=1, epsilon=1.0), "domain d"),
        (lambda: OUE(d=4, epsilon=0.0), "epsilon"),
        (lambda: SUE(d=4, epsilon=float("inf")), "epsilon"),
        (lambda: THE(d=4, epsilon=1.0, theta=0.3), "theta"),
        (lambda: OLH(d=4, epsilon=1.0, g=1), "g must be"),
        (lambda: lh_hash(np.uint64(1), 3, 1), "hash range"),
    ],
)
def test_bad_parameters_raise(build, match: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ParameterError, match=match):
        build()


def test_registry_names() -> None:
    assert set(FREQUENCY_ORACLES) == {"krr", "de", "she", "the", "sue", "oue", "blh", "olh", "hr"}
    assert FREQUENCY_ORACLES["de"] is KRR


def test_sue_randomizes_where_p_rounds_to_one() -> None:
    # Above ε ≈ 73.5, e^{ε/2}/(e^{ε/2} + 1) is 1.0 in double precision and the 32-bit
    # threshold overflowed (OverflowError); p* is now 1 − 2^-32, the most a u32 expresses.
    sue = SUE(d=4, epsilon=100.0)
    assert sue.p_star == 1.0 - 2.0**-32
    reports = sue.randomize(np.arange(4), rng=np.random.default_rng(0))
    assert reports[:, 0].tolist() == [1, 2, 4, 8]  # each user's own bit, nothing else
