"""Tight accounting (protocols/accounting/): exact references, calibration, the 5 % target.

Fast formulas are checked against slow exact references: brute-force hockey-stick
divergences, every composition of the other users' data, and the exact shuffled histogram of
protocols/accounting/_exact_shuffle.py.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from scipy import stats
from scipy.optimize import brentq

import protocols
from protocols import (
    BOUNDS,
    binary_rr_epsilon,
    epsilon_for_pair,
    fmt21_numerical_epsilon,
    hockey_stick,
    krr_blanket_epsilon,
    krr_exact_epsilon,
    krr_fakes_only_epsilon,
    krr_matrix,
    largest_local,
    pair_epsilon,
    stronger_clone_epsilon,
    tightest_central,
)
from protocols._errors import BoundNotApplicable
from protocols.accounting import _binary_rr, _blanket, _laws

TIGHT = ("binary_rr_exact", "fmt23_stronger_clone", "fmt21_numerical")


def _slow_epsilon(log_p: np.ndarray, log_q: np.ndarray, delta: float) -> float:
    """Bisection on the hockey-stick divergence itself (the slow reference)."""

    def h(e: float) -> float:
        return max(hockey_stick(log_p, log_q, e), hockey_stick(log_q, log_p, e)) - delta

    if h(0.0) <= 0:
        return 0.0
    return float(brentq(h, 0.0, 50.0, xtol=1e-13))


@pytest.mark.parametrize("seed", range(5))
def test_epsilon_for_pair_matches_bisection(seed: int) -> None:
    rng = np.random.default_rng(seed)
    p = rng.dirichlet(np.full(40, 0.5))
    q = rng.dirichlet(np.full(40, 0.5))
    for delta in (1e-1, 1e-3):
        fast = epsilon_for_pair(np.log(p), np.log(q), delta)
        assert fast == pytest.approx(_slow_epsilon(np.log(p), np.log(q), delta), abs=1e-9)


def test_epsilon_for_pair_zero_mass_and_identical() -> None:
    with np.errstate(divide="ignore"):
        lp = np.log([0.5, 0.5, 0.0])
    lq = np.log([0.5, 0.4999, 1e-4])
    # Mass 1e-4 where P = 0: infinite loss in direction Q‖P beyond δ = 1e-5.
    assert epsilon_for_pair(lp, lq, 1e-5) == math.inf
    assert math.isfinite(epsilon_for_pair(lp, lq, 1e-3))
    assert epsilon_for_pair(lp, lp, 1e-6) == 0.0


def _binary_pair(n: int, a: int, eps0: float, fakes: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Exact laws of the count of ones: a others hold 1, n−1−a hold 0, victim 0 vs 1."""
    q = 1.0 / (math.exp(eps0) + 1.0)
    p = 1.0 - q
    z = np.convolve(
        stats.binom.pmf(np.arange(a + 1), a, p), stats.binom.pmf(np.arange(n - a), n - 1 - a, q)
    )
    if fakes:
        z = np.convolve(z, stats.binom.pmf(np.arange(fakes + 1), fakes, 0.5))
    zz = np.concatenate([[0.0], z, [0.0]])
    d0 = q * zz[:-1] + p * zz[1:]
    d1 = p * zz[:-1] + q * zz[1:]
    with np.errstate(divide="ignore"):
        return np.log(d0), np.log(d1)


@pytest.mark.parametrize(
    ("n", "eps0", "delta", "fakes"),
    [
        (30, 0.5, 1e-2, 0),  # the maximum is at a = 2 here
        (40, 1.0, 1e-3, 0),
        (60, 3.0, 1e-6, 0),
        (150, 2.0, 1e-2, 0),
        (40, 2.0, 1e-3, 7),
        (250, 3.0, 0.1, 0),  # the maximum is at a = 56: a search of a ≤ 4 gave 0.019744
        (400, 4.0, 1e-2, 0),  # ... at a = 6: 0.865806 instead of 0.868149
        (400, 4.0, 1e-2, 30),
    ],
)
def test_binary_exact_is_the_max_over_every_composition(
    n: int, eps0: float, delta: float, fakes: int
) -> None:
    # The worst case over the others' data (a of them holding 1, for every a) is what
    # binary_rr_epsilon returns: an exhaustive, independent check of its branch and bound.
    per_a = [epsilon_for_pair(*_binary_pair(n, a, eps0, fakes), delta) for a in range(n)]
    exact = binary_rr_epsilon(eps0, n - 1, delta, n_fakes=fakes)
    assert max(per_a) == pytest.approx(exact, rel=1e-9, abs=1e-12)


def test_binary_exact_range_bound_dominates_every_point_of_its_range() -> None:
    # What the branch and bound prunes with: the pair with lo others holding 1 and
    # n_others − hi holding 0 bounds every a in [lo, hi] (post-processing).
    eps0, n_others, delta = 3.0, 249, 0.1
    for lo, hi in [(5, 60), (40, 70), (56, 56), (100, 124)]:
        bound = epsilon_for_pair(
            *_binary_rr._binary_rr_pair(eps0, n_others - (hi - lo), lo, 0), delta
        )
        for a in range(lo, hi + 1):
            point = epsilon_for_pair(*_binary_pair(n_others + 1, a, eps0, 0), delta)
            assert point <= bound * (1 + 1e-12)


@pytest.mark.parametrize(
    ("eps0", "n_others", "delta", "fakes"),
    [
        (1.0, 999, 1e-6, 0),
        (0.05, 5_000, 1e-3, 0),  # ε = 0 at many a: no threshold set reaches δ
        (3.0, 249, 0.1, 0),
        (8.0, 300, 1e-9, 0),  # ε close to ε0
        (2.0, 2_000, 1e-12, 40),
        (0.5, 20_000, 1e-6, 700),  # fakes past the direct-convolution size
    ],
)
def test_binary_threshold_formula_equals_sorted_likelihood_ratios(
    eps0: float, n_others: int, delta: float, fakes: int
) -> None:
    # _binary_rr_law_epsilon takes the optimal sets to be {Y ≥ u} / {Y ≤ u} (monotone
    # likelihood ratio); epsilon_for_pair sorts the ratios of the log-laws instead.
    q = 1.0 / (math.exp(eps0) + 1.0)
    for a in (0, 1, 7, n_others // 3, n_others // 2):
        law = _binary_rr._binary_rr_law(1.0 - q, q, a, n_others - a, fakes)
        fast = _binary_rr._binary_rr_law_epsilon(law, q, delta)[0]
        ref = epsilon_for_pair(*_binary_rr._binary_rr_pair(eps0, n_others, a, fakes), delta)
        assert fast == pytest.approx(ref, rel=1e-10, abs=1e-13), a


@pytest.mark.parametrize(("eps0", "delta", "fakes"), [(1.0, 1e-6, 0), (4.0, 1e-10, 25)])
def test_binary_block_kernels_equal_the_full_law(eps0: float, delta: float, fakes: int) -> None:
    # A block computes each range's pair as R ⊛ V from one law R; every range and point of
    # it must give the exact ε of its own full law (the early exit of a range may stop at
    # any value above ``best``, never at one below its exact ε).
    n_others, lo, hi = 30_000, 2_000, 6_095
    q = 1.0 / (math.exp(eps0) + 1.0)
    block = _binary_rr._BinaryBlock(
        eps0, n_others, fakes, delta, lo, hi, _binary_rr._BinaryKernels(1.0 - q, q)
    )
    rng = np.random.default_rng(3)
    cases = [(lo, hi), (lo, lo), (hi, hi), (lo + 1, hi - 1)]
    cases += [tuple(sorted(rng.integers(lo, hi + 1, size=2))) for _ in range(12)]
    for a, b in cases:
        full = _binary_rr._binary_rr_full(eps0, a, n_others - b, fakes, delta)
        assert block.epsilon_of(a, b, full, exact=True) == pytest.approx(full, rel=1e-10)
        assert block.epsilon_of(a, b, 0.9 * full, exact=False) > 0.9 * full
        assert block.epsilon_of(a, b, 1.1 * full, exact=False) == pytest.approx(full, rel=1e-10)


def test_binary_block_falls_back_to_the_full_law(monkeypatch: pytest.MonkeyPatch) -> None:
    # When the moving window finds no finite value the block evaluates the full law.
    eps0, n_others, delta = 1.0, 30_000, 1e-6
    q = 1.0 / (math.exp(eps0) + 1.0)
    block = _binary_rr._BinaryBlock(
        eps0, n_others, 0, delta, 100, 4_195, _binary_rr._BinaryKernels(1.0 - q, q)
    )
    full = _binary_rr._binary_rr_full(eps0, 300, n_others - 3_000, 0, delta)
    monkeypatch.setattr(_binary_rr, "_window_peak", lambda *args: None)
    assert block.epsilon_of(300, 3_000, 0.0, exact=True) == pytest.approx(full, rel=1e-12)


@pytest.mark.parametrize(
    ("n", "prob"),
    [(0, 0.3), (1, 0.5), (999, 1 / (math.e + 1)), (5_000, 0.5), (60_000, 0.75), (700, 1e-3)],
)
def test_kernel_binomials_match_exact_rationals(n: int, prob: float) -> None:
    # The blocks' kernels take binomial laws from ratios of successive points (cheaper than
    # scipy's binom.pmf); same window as binomial_window, every point within 1e-12.
    lo, pmf = _binary_rr._binomial_window_by_ratios(n, prob)
    lo_ref, ref = _laws.binomial_window(n, prob)
    assert lo == lo_ref
    assert pmf.size == ref.size
    exact_p = Fraction(prob)
    for i in np.linspace(0, pmf.size - 1, 9).astype(int):
        k = lo + int(i)
        exact = math.comb(n, k) * exact_p**k * (1 - exact_p) ** (n - k)
        assert pmf[i] == pytest.approx(float(exact), rel=1e-12, abs=1e-300)
    np.testing.assert_allclose(pmf, ref, rtol=1e-11, atol=1e-300)


def test_kernel_binomials_fall_back_where_the_odds_are_degenerate() -> None:
    # ε0 ≥ 37: q < 1.1e-16, p rounds to 1.0 and the odds are infinite.
    for prob in (1.0, 0.0):
        lo, pmf = _binary_rr._binomial_window_by_ratios(50, prob)
        lo_ref, ref = _laws.binomial_window(50, prob)
        assert lo == lo_ref
        np.testing.assert_array_equal(pmf, ref)


def test_window_peak_moves_to_the_maximum_and_stops_at_the_edges() -> None:
    def values(center: float) -> Callable[[int, int], np.ndarray]:
        return lambda a, b: -((np.arange(a, b + 1) - center) ** 2.0)

    assert _binary_rr._window_peak(values(500.0), 0, 1000, 3, -1, math.inf) == 0.0
    assert _binary_rr._window_peak(values(-50.0), 0, 1000, 400, -1, math.inf) == -2500.0
    # The first value above ``stop`` ends the search.
    assert _binary_rr._window_peak(values(500.0), 0, 1000, 3, -1, -1e6) == -(493.0**2)

    def minus_inf(a: int, b: int) -> np.ndarray:
        return np.full(b - a + 1, -np.inf)

    assert _binary_rr._window_peak(minus_inf, 0, 1000, 40, -1, math.inf) is None


def test_binary_exact_is_the_max_over_every_a_with_blocks_and_wide_ranges(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Blocks 64 wide: the search runs through full-law ranges, then blocks, then points;
    # every a evaluated on its own (1 500 pairs) is the reference. The maximum is at a = 6.
    monkeypatch.setattr(_binary_rr, "_BINARY_BLOCK_MIN", 64)
    monkeypatch.setattr(_binary_rr, "_BINARY_BLOCK", 1)
    eps0, n_others, delta = 1.0, 2_999, 1e-3
    q = 1.0 / (math.exp(eps0) + 1.0)
    per_a = [
        _binary_rr._binary_rr_law_epsilon(
            _binary_rr._binary_rr_law(1.0 - q, q, a, n_others - a, 0), q, delta
        )[0]
        for a in range(n_others // 2 + 1)
    ]
    assert int(np.argmax(per_a)) > _binary_rr._BINARY_SEED  # the search has something to find
    _binary_rr._binary_rr_cached.cache_clear()
    assert binary_rr_epsilon(eps0, n_others, delta) == pytest.approx(max(per_a), rel=1e-12)
    _binary_rr._binary_rr_cached.cache_clear()


def test_binary_exact_inverse_meets_the_target_with_the_full_maximum() -> None:
    # At n = 10^4, ε_c = 0.5 the maximum sits beyond a ≤ 4, so the inverse of the search
    # over a ≤ 4 alone is slightly too large; the calibrated ε_l must meet the target.
    eps_l, _ = largest_local(epsilon_central=0.5, n=10_000, delta=1e-6, family="krr", k=2)
    assert binary_rr_epsilon(eps_l, 9_999, 1e-6) <= 0.5
    seeded = _binary_rr._binary_rr_seeded(eps_l, 9_999, 1e-6, 0)
    assert seeded < binary_rr_epsilon(eps_l, 9_999, 1e-6)


def test_binary_exact_matches_exact_shuffled_histogram() -> None:
    res = pair_epsilon(krr_matrix(1.5, 2), victim=(0, 1), others=[0] * 11, delta=1e-4, n_fakes=3)
    assert res.epsilon == pytest.approx(binary_rr_epsilon(1.5, 11, 1e-4, n_fakes=3), rel=1e-9)


def test_krr_fakes_only_is_exact() -> None:
    # Victim's 3-RR report among 6 uniform fakes: the fast accountant equals the exact
    # shuffled histogram (the (h₀, h₁, T) reduction loses nothing).
    # So does the slow reference blanket; the fast blanket rounds up by ≤ 1e-4 (+ pruning).
    exact = pair_epsilon(krr_matrix(2.0, 3), victim=(0, 1), others=[], delta=1e-3, n_fakes=6)
    assert krr_fakes_only_epsilon(2.0, 6, 1e-3, k=3) == pytest.approx(exact.epsilon, rel=1e-7)
    reference = _blanket.krr_blanket_reference_epsilon(2.0, 0, 1e-3, k=3, n_fakes=6)
    assert reference == pytest.approx(exact.epsilon, rel=1e-7)
    fast = krr_blanket_epsilon(2.0, 0, 1e-3, k=3, n_fakes=6)
    assert exact.epsilon * (1 - 1e-9) <= fast <= exact.epsilon * (1 + 3e-4)


def test_calibration_at_eps4_n1e5() -> None:
    # Issue 5: FMT'21 closed form 0.538, FMT'21 numerical ≈ 0.17, stronger clone ≈ 0.12.
    kw: dict[str, Any] = {"epsilon_local": 4.0, "n": 100_000, "delta": 1e-6, "k": 2}
    closed = BOUNDS["thm2_fmt_closed_form"].epsilon_central(**kw)
    fmt21 = BOUNDS["fmt21_numerical"].epsilon_central(**kw)
    clone = BOUNDS["fmt23_stronger_clone"].epsilon_central(**kw)
    exact = BOUNDS["binary_rr_exact"].epsilon_central(**kw)
    assert closed == pytest.approx(0.538, abs=0.01)
    assert fmt21 == pytest.approx(0.17, abs=0.01)
    assert clone == pytest.approx(0.12, abs=0.005)
    assert exact < clone < fmt21 < closed
    # k-RR (k ≥ 3): the numerical blanket is at or below the stronger clone.
    for k in (3, 16):
        assert krr_blanket_epsilon(4.0, 99_999, 1e-6, k=k) <= stronger_clone_epsilon(
            4.0, 99_999, 1e-6, k=k
        )


@pytest.mark.parametrize("n", [100, 1_000, 10_000, 100_000])
def test_default_binary_bound_within_5_percent_of_exact(n: int) -> None:
    # Done-when criterion of issue 5, on the grid n ∈ 10^2..10^5, ε_l ∈ [0.5, 8], δ = 1e-6.
    for eps_l in (0.5, 1.0, 2.0, 4.0, 6.0, 8.0):
        exact = binary_rr_epsilon(eps_l, n - 1, 1e-6)
        eps_c, name = tightest_central(epsilon_local=eps_l, n=n, delta=1e-6, family="krr", k=2)
        assert exact * (1 - 1e-9) <= eps_c <= 1.05 * exact + 1e-12, (eps_l, name)


def test_krr_blanket_close_to_exact_where_computable() -> None:
    # For k ≥ 3 the dataset "all others hold z ∉ {x⁰, x¹}" is the worst one the exhaustive
    # search finds; krr_exact_epsilon computes it (slow, so moderate n here).
    for k, n, eps0, delta in [(3, 2000, 4.0, 1e-6), (3, 12, 1.0, 1e-2), (8, 500, 2.0, 1e-5)]:
        exact = krr_exact_epsilon(eps0, n - 1, delta, k=k)
        bound = krr_blanket_epsilon(eps0, n - 1, delta, k=k)
        assert exact <= bound <= 1.05 * exact, (k, n, exact, bound)


def test_krr_exact_is_a_lower_bound_not_always_the_worst_dataset() -> None:
    # Binary RR at n = 5: the all-equal dataset gives 0.229, but others = (0, 0, 0, 1) gives
    # 0.271; binary_rr_exact maximises over every dataset and finds it.
    all_equal = krr_exact_epsilon(0.7, 4, 0.05, k=2)
    worst = BOUNDS["binary_rr_exact"].epsilon_central(epsilon_local=0.7, n=5, delta=0.05)
    assert all_equal == pytest.approx(0.22938, abs=1e-4)
    assert worst == pytest.approx(0.27109, abs=1e-4)
    exhaustive = protocols.worst_pair_epsilon(
        krr_matrix(0.7, 2), n=5, delta=0.05, all_compositions=True
    )
    assert exhaustive.epsilon == pytest.approx(worst, rel=1e-6)


def test_krr_exact_is_the_worst_composition_for_small_n() -> None:
    worst = protocols.worst_pair_epsilon(
        krr_matrix(1.0, 3), n=12, delta=1e-2, all_compositions=True
    )
    assert worst.epsilon == pytest.approx(krr_exact_epsilon(1.0, 11, 1e-2, k=3), rel=1e-8)
    assert worst.epsilon <= krr_blanket_epsilon(1.0, 11, 1e-2, k=3)


@pytest.mark.parametrize("name", TIGHT)
def test_inverse_is_consistent(name: str) -> None:
    bound = BOUNDS[name]
    for n, target in [(1_000, 1.0), (50_000, 0.2)]:
        eps_l = bound.epsilon_local(epsilon_central=target, n=n, delta=1e-6, k=2)
        back = bound.epsilon_central(epsilon_local=eps_l, n=n, delta=1e-6, k=2)
        assert back <= target * (1 + 1e-9)
        assert back >= target * (1 - 1e-3)  # the largest ε_l, not just any


def test_monotone_in_n_and_eps0() -> None:
    fs: list[Callable[[float, int], float]] = [
        lambda e, n: binary_rr_epsilon(e, n, 1e-6),
        lambda e, n: stronger_clone_epsilon(e, n, 1e-6, k=4),
        lambda e, n: fmt21_numerical_epsilon(e, n, 1e-6),
    ]
    for f in fs:
        assert f(2.0, 10_000) < f(2.0, 1_000) < f(2.0, 100)
        assert f(1.0, 5_000) < f(2.0, 5_000) < f(3.0, 5_000)


def test_fakes_enlarge_the_blanket() -> None:
    assert binary_rr_epsilon(2.0, 500, 1e-6, n_fakes=200) < binary_rr_epsilon(2.0, 500, 1e-6)
    assert krr_blanket_epsilon(2.0, 500, 1e-6, k=5, n_fakes=200) < krr_blanket_epsilon(
        2.0, 500, 1e-6, k=5
    )
    assert stronger_clone_epsilon(2.0, 500, 1e-6, k=5, n_fakes=200) < stronger_clone_epsilon(
        2.0, 500, 1e-6, k=5
    )


def test_capped_at_local_epsilon_and_default_registered() -> None:
    assert binary_rr_epsilon(3.0, 0, 1e-9) <= 3.0
    assert fmt21_numerical_epsilon(1.0, 1, 1e-9) <= 1.0
    eps_c, name = tightest_central(epsilon_local=2.0, n=10_000, delta=1e-6, family="generic")
    assert name == "fmt21_numerical"
    assert eps_c == pytest.approx(fmt21_numerical_epsilon(2.0, 9_999, 1e-6))


def test_bad_arguments_raise_parameter_error() -> None:
    with pytest.raises(protocols.ParameterError, match="epsilon_local"):
        binary_rr_epsilon(-1.0, 10, 1e-6)
    with pytest.raises(protocols.ParameterError, match="n_others"):
        binary_rr_epsilon(1.0, -1, 1e-6)
    with pytest.raises(protocols.BoundNotApplicable, match="k=3"):
        BOUNDS["binary_rr_exact"].epsilon_central(epsilon_local=1, n=100, delta=1e-6, k=3)
    with pytest.raises(protocols.ParameterError, match="shape"):
        epsilon_for_pair(np.zeros(3), np.zeros(4), 1e-6)


def test_a_nan_accountant_is_not_applicable_rather_than_a_crash() -> None:
    # At n ≈ 10^10 scipy's binomial tails return NaN, and brentq raised a bare ValueError
    # through `esa amplify`; the bound now says it does not apply there.
    with pytest.raises(BoundNotApplicable, match="double precision"):
        _laws._solve_decreasing(lambda eps: math.nan, 1e-6, 2.0)
