"""The certified search of ``binary_rr_exact`` (past 2^28 other users): its range bounds,
its coin floor, and its answer against the exact search where both run.

The certified search returns (U, L): U a proven upper bound on the maximum over a of the
exact ε(δ), L the best exact ε(a) it evaluated. These tests run it below 2^28, where the
exact search (``_binary_rr_cached``, itself checked against every a in tests/test_tight.py)
is the reference: L ≤ exact ≤ U ≤ (1 + tol)·L must hold at every seeded random parameter.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from protocols import BOUNDS, BoundNotApplicable, binary_rr_epsilon, epsilon_for_pair
from protocols.accounting import _binary_rr


def _pair(n_others: int, a: int, eps0: float, fakes: int) -> tuple[np.ndarray, np.ndarray]:
    """Exact laws of the count of ones (scipy pmfs, direct convolutions): a others hold 1,
    n_others − a hold 0, ``fakes`` fair coins, victim 0 against 1."""
    q = 1.0 / (math.exp(eps0) + 1.0)
    p = 1.0 - q
    ones = stats.binom.pmf(np.arange(a + 1), a, p)
    zeros = stats.binom.pmf(np.arange(n_others - a + 1), n_others - a, q)
    z = np.convolve(ones, zeros)
    if fakes:
        z = np.convolve(z, stats.binom.pmf(np.arange(fakes + 1), fakes, 0.5))
    zz = np.concatenate([[0.0], z, [0.0]])
    with np.errstate(divide="ignore"):
        return np.log(q * zz[:-1] + p * zz[1:]), np.log(p * zz[:-1] + q * zz[1:])


@pytest.mark.parametrize(
    ("users", "lam", "budget"),
    [
        (1, 0.5, 1e-6),
        (40, 0.54, 1e-9),
        (1_000, 0.036, 1e-12),
        (10**6, 0.54, 1e-12),
        (500, 0.9, 0.1),
    ],
)
def test_coin_floor_is_a_true_tail_bound(users: int, lam: float, budget: float) -> None:
    # P[Bin(users, λ) < b] ≤ m ≤ budget (m a Chernoff bound, so at least the exact tail),
    # and b is not needlessly low: one more coin would break the budget by the same bound.
    coins, miss = _binary_rr._coin_floor(users, lam, budget)
    if coins == 0:
        assert miss == 0.0
        assert users * -math.log1p(-lam) < -math.log(budget)  # not even b = 1 is allowed
        return
    exact_tail = float(stats.binom.cdf(coins - 1, users, lam))
    assert exact_tail <= miss * (1 + 1e-9)
    assert miss <= budget
    if coins - 1 < math.floor(lam * users):
        _, looser = _binary_rr._coin_floor(users, lam, budget * 10.0)
        assert looser >= miss
        x = coins / users
        exponent = users * (x * math.log(x / lam) + (1 - x) * math.log((1 - x) / (1 - lam)))
        assert math.exp(-exponent) > budget


@pytest.mark.parametrize(
    ("eps0", "n_others", "delta", "fakes"),
    [(1.0, 249, 1e-3, 0), (3.0, 249, 0.1, 0), (0.5, 399, 1e-6, 20), (4.0, 300, 1e-2, 0)],
)
def test_range_bound_dominates_every_point_of_its_range(
    eps0: float, n_others: int, delta: float, fakes: int
) -> None:
    # Every a against its own exact pair (an independent reference: scipy pmfs, direct
    # convolutions, epsilon_for_pair), for ranges narrow and wide (wide ones draw coins).
    per_a = [
        epsilon_for_pair(*_pair(n_others, a, eps0, fakes), delta) for a in range(n_others // 2 + 1)
    ]
    half = n_others // 2
    for lo, hi in [(5, half), (5, 60), (40, 70), (56, 56), (100, 124), (0, half)]:
        bound = _binary_rr._binary_rr_range_bound(eps0, n_others, lo, hi, fakes, delta)
        assert max(per_a[lo : hi + 1]) <= bound * (1 + 1e-10) + 1e-13
        if lo == hi:
            assert bound == pytest.approx(per_a[lo], rel=1e-9, abs=1e-13)


def test_range_bound_with_coins_is_tighter_than_dropping_the_range() -> None:
    # The plain bound (the exact search's) drops the range's w users; the coin bound keeps
    # ~λ·w of them as fair coins: strictly smaller on a wide range at ε0 = 1 (λ = 0.54).
    eps0, n_others, delta, lo, hi = 1.0, 20_000, 1e-6, 5, 10_000
    plain = _binary_rr._binary_rr_full(eps0, lo, n_others - hi, 0, delta)
    coins = _binary_rr._binary_rr_range_bound(eps0, n_others, lo, hi, 0, delta)
    exact_lo = _binary_rr._binary_rr_full(eps0, lo, n_others - lo, 0, delta)
    assert exact_lo < coins < plain
    # It removes about (1 − λ)·w users instead of w: the excess shrinks by ≥ 1.5×.
    assert coins - exact_lo < (plain - exact_lo) / 1.5


@pytest.mark.parametrize(
    ("eps0", "ones", "zeros", "fakes"),
    [
        (1.0, 10**7, 10**8 - 10**7 - 10**5, 40_000),
        (0.3, 4 * 10**7, 6 * 10**7, 0),
        (4.0, 3, 10**8, 5_000),
        (1.0, 2 * 10**9, 8 * 10**9 - 10**7, 2_700_000),  # 10^10 users: laws of 10^6 points
    ],
)
def test_one_fft_range_bound_equals_the_full_law(
    eps0: float, ones: int, zeros: int, fakes: int
) -> None:
    # The certified search's evaluation (ratio pmfs, one FFT, ratios of the sets) against the
    # exact search's (scipy pmfs, two FFTs, logarithms): the same ε to round-off.
    full = _binary_rr._binary_rr_full(eps0, ones, zeros, fakes, 1e-6)
    fast = _binary_rr._binary_rr_one_fft(eps0, ones, zeros, fakes, 1e-6)
    assert fast == pytest.approx(full, rel=1e-10)


def _random_cases(count: int, seed: int) -> list[tuple[float, int, float, int]]:
    rng = np.random.default_rng(seed)
    cases = []
    for _ in range(count):
        eps0 = float(rng.choice([0.3, 1.0, 2.0, 4.0, 6.0]))
        n_others = int(10 ** rng.uniform(3.0, 4.5))
        delta = float(10 ** rng.uniform(-9.0, -2.0))
        fakes = int(rng.choice([0, 0, 17, 300]))
        cases.append((eps0, n_others, delta, fakes))
    return cases


@pytest.mark.parametrize("tol", [1e-2, 1e-3])
@pytest.mark.parametrize(("eps0", "n_others", "delta", "fakes"), _random_cases(6, seed=20261205))
def test_certified_brackets_the_exact_maximum(
    eps0: float, n_others: int, delta: float, fakes: int, tol: float
) -> None:
    # L ≤ exact ≤ U ≤ L·(1 + tol) (or U ≤ the floor): the answer is proven and within tol.
    exact = _binary_rr._binary_rr_cached(eps0, n_others, delta, fakes)
    upper, lower = _binary_rr._binary_rr_certified(eps0, n_others, delta, fakes, tol)
    assert lower <= exact * (1 + 1e-12) + 1e-15
    assert exact <= upper * (1 + 1e-12) + 1e-15
    assert upper <= max(lower * (1 + tol), _binary_rr._BINARY_FLOOR)
    assert upper <= max(exact * (1 + tol), _binary_rr._BINARY_FLOOR) * (1 + 1e-12)


@pytest.mark.parametrize("n_others", [0, 1, 7, 9, 10, 12])
def test_certified_at_tiny_populations_is_exact(n_others: int) -> None:
    # Below 10 other users the seeded a ≤ 4 (and their mirror images) are every a.
    exact = _binary_rr._binary_rr_cached(1.0, n_others, 1e-3, 0)
    upper, lower = _binary_rr._binary_rr_certified(1.0, n_others, 1e-3, 0, 1e-3)
    assert lower == pytest.approx(exact, rel=1e-12)
    assert exact <= upper * (1 + 1e-12) <= exact * (1 + 1e-3) * (1 + 1e-12)


def test_certified_at_a_million_users_within_its_tolerance() -> None:
    # The registered tolerance, at 10^6 other users (ε0 = 4: about 0.5 s): the exact value
    # (about 0.3 s here) lies in [L, U], and U is within 10^-3 of it.
    eps0, n_others, delta = 4.0, 10**6, 1e-6
    tol = _binary_rr._BINARY_TOLERANCE
    exact = _binary_rr._binary_rr_cached(eps0, n_others, delta, 0)
    upper, lower = _binary_rr._binary_rr_certified(eps0, n_others, delta, 0, tol)
    assert lower <= exact <= upper <= lower * (1 + tol)
    assert upper / exact - 1 < tol


def test_certified_at_a_billion_users_brackets_every_evaluated_point() -> None:
    # Past 2^28, with no exact value to compare with: the printed ε is U, U is at least every
    # exact ε(a) evaluated on its own here (a ≤ 4, a mid-range a and n/2, by the full law),
    # L at least those it evaluates itself (a ≤ 4), and the gap (U − L)/L is at most the
    # tolerance. ε0 = 6 keeps the laws short (~2.5 s of CPU).
    eps0, n_others, delta = 6.0, 10**9, 1e-6
    tol = _binary_rr._BINARY_TOLERANCE
    _binary_rr._binary_rr_certified.cache_clear()
    upper, lower = _binary_rr._binary_rr_certified(eps0, n_others, delta, 0, tol)
    assert binary_rr_epsilon(eps0, n_others, delta) == upper

    def point(a: int) -> float:
        return _binary_rr._binary_rr_full(eps0, a, n_others - a, 0, delta)

    seeded = max(point(a) for a in range(_binary_rr._BINARY_SEED + 1))
    assert seeded <= lower <= upper <= lower * (1 + tol)  # L: at least the a ≤ 4 it evaluates
    assert max(point(12_345_678), point(n_others // 2)) <= upper  # U: at least every a
    assert (upper - lower) / lower > 0.0  # a real gap: the search did stop early


@pytest.fixture
def certified_past_1000(monkeypatch: pytest.MonkeyPatch) -> None:
    """The exact search's limit lowered to 1 000 other users: the certified search answers
    past it, through binary_rr_epsilon and the registered bound, at sizes a test affords."""
    monkeypatch.setattr(_binary_rr, "_BINARY_MAX_OTHERS", 1_000)
    _binary_rr._binary_rr_cached.cache_clear()
    _binary_rr._binary_rr_certified.cache_clear()
    from protocols.accounting import _amplification

    _amplification._evaluate.cache_clear()


@pytest.mark.usefixtures("certified_past_1000")
def test_public_function_and_bound_answer_the_certified_upper_bound() -> None:
    eps0, n_others, delta = 1.0, 9_999, 1e-6
    tol = _binary_rr._BINARY_TOLERANCE
    exact = _binary_rr._binary_rr_cached(eps0, n_others, delta, 0)
    upper, lower = _binary_rr._binary_rr_certified(eps0, n_others, delta, 0, tol)
    assert binary_rr_epsilon(eps0, n_others, delta) == upper
    via_bound = BOUNDS["binary_rr_exact"].epsilon_central(
        epsilon_local=eps0, n=n_others + 1, delta=delta, k=2
    )
    assert via_bound == upper
    assert exact <= upper <= exact * (1 + tol)
    assert lower <= exact


@pytest.mark.usefixtures("certified_past_1000")
def test_certified_inverse_is_proven_and_close_to_the_exact_inverse() -> None:
    # The ε_l returned meets ε_c by the certified bound (what the inverse guarantees), and
    # is at most the exact inverse (whose ε_l meets ε_c by the exact value), within a few
    # tolerances of it (ε_l moves by ~1/(dlogε_c/dlogε_l) times the gap in ε_c).
    eps_c, n, delta = 0.1, 4_000, 1e-6
    tol = _binary_rr._BINARY_TOLERANCE
    eps_l = BOUNDS["binary_rr_exact"].epsilon_local(epsilon_central=eps_c, n=n, delta=delta, k=2)
    upper = _binary_rr._binary_rr_certified(
        _binary_rr._round(eps_l), n - 1, _binary_rr._round(delta), 0, tol
    )[0]
    assert upper <= eps_c
    exact = _binary_rr._binary_rr_cached(_binary_rr._round(eps_l), n - 1, delta, 0)
    assert exact <= eps_c

    # The exact search's own inverse at the same (n, δ): the largest ε_l it proves.
    def exact_at(e: float) -> float:
        return _binary_rr._binary_rr_cached(_binary_rr._round(e), n - 1, delta, 0)

    best = _binary_rr._invert(exact_at, eps_c)
    assert eps_l <= best * (1 + 1e-7)
    assert eps_l >= best * (1 - 10 * tol)


def test_steps_aside_past_the_certified_limit() -> None:
    limit = _binary_rr._BINARY_MAX_CERTIFIED
    assert limit > 10**10  # the CLI's largest n is answered
    with pytest.raises(BoundNotApplicable, match=f"n_others={limit + 1:,}"):
        binary_rr_epsilon(1.0, limit + 1, 1e-6)
    bound = BOUNDS["binary_rr_exact"]
    with pytest.raises(BoundNotApplicable, match=f"at most {limit:,}"):
        bound.epsilon_central(epsilon_local=1.0, n=limit + 2, delta=1e-6, k=2)
    with pytest.raises(BoundNotApplicable, match=f"at most {limit:,}"):
        bound.epsilon_local(epsilon_central=0.01, n=limit + 2, delta=1e-6, k=2)
