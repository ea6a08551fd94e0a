"""The k-RR privacy blanket evaluated numerically, registered in :data:`~protocols.BOUNDS`
on import (last of the numerical accountants, so that on a tie the stronger clone is named).

``krr_blanket_numerical`` (family ``krr``)
    Privacy blanket of Balle, Bell, Gascón, Nissim (Crypto'19, arXiv 1903.02837 Lemma 3.1),
    evaluated numerically instead of through their tail bounds (the "tight blanket" of
    Biswas, Jung, Palamidessi et al., arXiv 2205.04410, in its k-RR instance): each other user
    is uniform over [k] with probability λ = k/(e^{ε0}+k−1), the rest is known to the
    adversary. With T = 1 + (number of uniform reports) the privacy loss of a histogram h is
    ln[((e^{ε0}−1) h₁ + T) / ((e^{ε0}−1) h₀ + T)] (h₀, h₁ the counts of x⁰, x¹), so the
    divergence is a sum over T of two-dimensional binomial tails. T is integrated over
    bins, using the divergence at each bin's smallest T: it is decreasing in T (one more
    uniform report is a post-processing), so the binned sum is an upper bound. Fast enough
    to register: one binomial tail per cell (the other two follow by identities), the
    smallest cells (total ≤ 10^-6·δ) charged in full instead of evaluated, and a bracketed
    secant root find that returns an evaluated point at most 10^-7 above the root; the
    inverse starts from the stronger clone's inverse (cached).

Fakes: an honest shuffler's uniform fakes are exactly what a blanket user sends, so they
enlarge the blanket (exact: T grows by their number). :func:`krr_fakes_only_epsilon` is
the case with no other user: one report hidden only among the fakes.

Every evaluation is cached on rounded arguments and vectorized over the support. scipy is
imported inside the functions that use it: ``import protocols`` must not pay its start-up.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from .._base import check_delta, check_epsilon, check_n
from .._distributions import binom_cdf
from .._errors import BoundNotApplicable
from ._amplification import AmplificationBound, register_bound
from ._binary_rr import binary_rr_epsilon
from ._clones import _sc_inverse, stronger_clone_epsilon
from ._laws import (
    _EPS0_MAX,
    FloatArray,
    _round,
    _sf_half,
    _solve_decreasing,
    _support,
)

__all__ = [
    "KRR_BLANKET_BOUND",
    "krr_blanket_epsilon",
    "krr_blanket_reference_epsilon",
    "krr_fakes_only_epsilon",
]

# --- k-RR privacy blanket, numerical (exact for a fixed number of uniform reports) ----------

#: Relative tolerance of the blanket's root finds. The answer is always a verified point
#: (its divergence was evaluated and is ≤ δ), rounded up by at most this much. The secant
#: steps converge superlinearly, so 1e-7 (which keeps forward(inverse(ε_c)) equal to ε_c to
#: the 1e-6 that callers compare with) costs only one or two evaluations more than 1e-4.
_BLANKET_RTOL = 1e-7
_BLANKET_ATOL = 1e-9
#: Share of δ spent on cells of the blanket sum that are not evaluated (charged in full).
_BLANKET_PRUNE = 1e-6
#: Most cells the blanket sum is built with (~12 000 at n = 10^6–10^8 near the answer;
#: ~300 000 at n = 10^8 for the smallest ε_l tried). Past it (n ≳ 10^10) the blanket does
#: not apply, rather than allocate terabytes: the other bounds answer there.
_BLANKET_MAX_CELLS = 2_000_000


@dataclass(frozen=True, slots=True)
class _BlanketGrid:
    """Cells (T, s) of the blanket sum with their ε-independent weights (precomputed once)."""

    t_total: FloatArray  # T = 1 + number of uniform reports, per cell
    s: FloatArray  # h₀ + h₁, per cell
    w_prev: FloatArray  # bin mass × Pr[background on {x⁰, x¹} = s − 1]
    w_here: FloatArray  # bin mass × Pr[background on {x⁰, x¹} = s]
    log_fact: FloatArray  # ln j! for j ≤ max s: the pmf of Bin(s − 1, ½) by table look-up
    dropped: float  # truncated and pruned mass (with the upper tail of T), charged in full


def _log_binom_pmf(j: FloatArray, m: FloatArray, prob: float) -> FloatArray:
    """ln Pr[Bin(m, prob) = j], elementwise (−inf outside 0 ≤ j ≤ m)."""
    # Imported here: scipy.special costs start-up time that most esa commands never use.
    from scipy.special import gammaln

    ok = (j >= 0) & (j <= m)
    jj, mm = np.where(ok, j, 0.0), np.where(ok, m, 0.0)
    out = (
        gammaln(mm + 1.0)
        - gammaln(jj + 1.0)
        - gammaln(mm - jj + 1.0)
        + jj * math.log(prob)
        + (mm - jj) * math.log1p(-prob)
    )
    return np.where(ok, out, -np.inf)


def _blanket_grid(
    k: int, t_totals: Sequence[int], masses: FloatArray, prune: float = 0.0
) -> _BlanketGrid:
    """The cells of the blanket sum for T-bins ``t_totals`` of the given masses.

    Cells are pruned smallest first while their total weight stays ≤ ``prune``; a pruned
    cell contributes at most its weight to the divergence (its tail probabilities are ≤ 1),
    so that weight is added to ``dropped`` and the bound stays an upper bound.
    """
    # Imported here: scipy.special costs start-up time that most esa commands never use.
    from scipy.special import gammaln

    dropped = 0.0
    t_col: list[FloatArray] = []
    s_col: list[FloatArray] = []
    m_col: list[FloatArray] = []
    mass_col: list[FloatArray] = []
    cells = 0
    for t_total, mass in zip(t_totals, masses, strict=True):
        m = int(t_total) - 1  # uniform background reports
        if k == 2:
            s = np.array([float(t_total)])  # every report lands on x⁰ or x¹: s = T
        else:
            lo, hi = _support(m, 2.0 / k, tail_sd=8.0)
            cells += hi - lo + 2
            if cells > _BLANKET_MAX_CELLS:
                raise BoundNotApplicable(
                    f"the numerical blanket would need over {_BLANKET_MAX_CELLS:,} cells here "
                    "(too many users for it)"
                )
            s = np.arange(lo, hi + 2, dtype=np.float64)
        t_col.append(np.full(s.size, float(t_total)))
        s_col.append(s)
        m_col.append(np.full(s.size, float(m)))
        mass_col.append(np.full(s.size, float(mass)))
    t_all, s_all, m_all, mass_all = (np.concatenate(c) for c in (t_col, s_col, m_col, mass_col))
    if k == 2:
        wp, wh = mass_all.copy(), np.zeros_like(mass_all)
    else:
        wh = mass_all * np.exp(_log_binom_pmf(s_all, m_all, 2.0 / k))
        wp = mass_all * np.exp(_log_binom_pmf(s_all - 1.0, m_all, 2.0 / k))
        # Background counts outside each bin's s range (< 1e-14) count against us.
        bin_sums = np.bincount(np.searchsorted(np.asarray(t_totals, float), t_all), wh)
        dropped += float(np.clip(np.asarray(masses) - bin_sums, 0.0, None).sum())
    weight = wp + wh
    order = np.argsort(weight, kind="stable")
    cum = np.cumsum(weight[order])
    n_drop = int(np.searchsorted(cum, prune, side="right"))
    keep = np.ones(weight.size, dtype=bool)
    keep[order[:n_drop]] = False
    dropped += float(cum[n_drop - 1]) if n_drop else 0.0
    s_max = int(s_all.max()) if s_all.size else 0
    log_fact = np.asarray(gammaln(np.arange(s_max + 2, dtype=np.float64) + 1.0), np.float64)
    return _BlanketGrid(t_all[keep], s_all[keep], wp[keep], wh[keep], log_fact, dropped)


def _blanket_hockey(eps: float, eps0: float, k: int, grid: _BlanketGrid) -> float:
    """Σ over cells of H_{e^ε}: the victim's k-RR report among T − 1 uniform reports.

    Exact for each T: (h₀, h₁) is sufficient and the privacy loss is
    ln[((e^{ε0}−1) h₁ + T) / ((e^{ε0}−1) h₀ + T)], increasing in h₁ for a fixed s = h₀ + h₁,
    so the region where it exceeds ε is a tail h₁ ≥ t(s, T) of J ~ Bin(·, ½). One binomial
    tail per cell: with a = Pr[J_{s−1} ≥ t−1], b = Pr[J_{s−1} ≥ t], a = b + Pr[J_{s−1} = t−1]
    (table look-up) and Pr[J_s ≥ t] = (a + b)/2 (one more fair coin).
    """
    e0 = math.exp(eps0)
    big_e = math.exp(eps)
    p = e0 / (e0 + k - 1.0)
    q = 1.0 / (e0 + k - 1.0)
    s, t_total = grid.s, grid.t_total
    theta = (big_e * (e0 - 1.0) * s + (big_e - 1.0) * t_total) / ((e0 - 1.0) * (1.0 + big_e))
    t = np.floor(theta) + 1.0  # ≥ 1 since ε ≥ 0
    s_prev = np.maximum(s - 1.0, 0.0)  # where s = 0, the weight w_prev is 0 anyway
    b = _sf_half(t - 1.0, s_prev)
    j = t - 1.0
    inside = (j >= 0.0) & (j <= s_prev)
    ji = np.where(inside, j, 0.0).astype(np.int64)
    si = s_prev.astype(np.int64)
    lf = grid.log_fact
    log_pmf = lf[si] - lf[ji] - lf[si - ji] - s_prev * math.log(2.0)
    a = b + np.where(inside, np.exp(log_pmf), 0.0)
    c = np.where(s >= 1.0, 0.5 * (a + b), 0.0)  # Pr[J_0 ≥ t] = 0 for t ≥ 1
    rest = (k - 2.0) * q * grid.w_here * c
    tail_1 = grid.w_prev * (p * a + q * b) + rest  # victim holds x¹
    tail_0 = grid.w_prev * (q * a + p * b) + rest  # victim holds x⁰
    return float(np.clip(tail_1 - big_e * tail_0, 0.0, None).sum()) + grid.dropped


def _blanket_bins(n_others: int, lam: float, n_fakes: int) -> tuple[list[int], FloatArray]:
    """T values (bin lower ends) and bin masses of T = 1 + n_fakes + Bin(n_others, λ)."""
    if n_others == 0 or lam >= 1.0:
        return [1 + n_fakes + (n_others if lam >= 1.0 else 0)], np.array([1.0])
    lo, hi = _support(n_others, lam)
    mean, sd = n_others * lam, math.sqrt(n_others * lam * (1 - lam))
    # Central bins of width w = min(sd, T/200) (≥ 1): T moves by ≤ 0.5 % within a bin, so ε
    # by ≲ 0.3 %. Two-sd bins in the lower tail down to −13 sd (a bin is charged at its
    # smallest T, so a wide low bin would cost its whole mass); one bin above +3 sd.
    w = max(1.0, min(sd, 0.005 * mean))
    inner = np.concatenate(
        (
            np.arange(mean - 13 * sd, mean - 5 * sd, 2 * sd),
            np.arange(mean - 5 * sd, mean + 3 * sd, w),
        )
    )
    edges = np.unique(np.clip(np.concatenate(([lo], np.floor(inner), [hi + 1])), lo, hi + 1))
    cdf = binom_cdf(edges - 1, n_others, lam)
    mass = np.diff(cdf)
    mass[0] += float(binom_cdf(lo - 1, n_others, lam))  # lower tail: counted at T(lo)
    starts = [1 + n_fakes + int(e) for e in edges[:-1]]
    return starts, np.asarray(mass, dtype=np.float64)


def _blanket_setup(eps0: float, n_others: int, k: int, n_fakes: int, prune: float) -> _BlanketGrid:
    """The grid of the blanket sum at ε0, the upper tail of T charged into ``dropped``."""
    lam = k / (math.exp(eps0) + k - 1.0)
    starts, mass = _blanket_bins(n_others, lam, n_fakes)
    upper_tail = max(0.0, 1.0 - float(mass.sum()))
    keep = mass > 1e-300
    grid = _blanket_grid(
        k, [t for t, ok in zip(starts, keep, strict=True) if ok], mass[keep], prune
    )
    return _BlanketGrid(
        grid.t_total, grid.s, grid.w_prev, grid.w_here, grid.log_fact, grid.dropped + upper_tail
    )


def _feasibility(h: float, delta: float) -> float:
    """≥ 0 iff h ≤ δ; nearly linear in ln ε (forward) and in ε_l (inverse) for Gaussian-like
    tails, which makes the secant steps of :func:`_smallest_feasible` land close at once."""
    if h <= 0.0:
        return math.inf
    if h >= 1.0:
        return -math.inf
    return math.log(-math.log(h)) - math.log(-math.log(delta))


def _smallest_feasible(
    phi: Callable[[float], float],
    a: float,
    b: float,
    x0: float,
    rtol: float = _BLANKET_RTOL,
    atol: float = _BLANKET_ATOL,
) -> float:
    """Smallest x in [a, b] with φ(x) ≥ 0 for an increasing φ, within rtol·|x| + atol above.

    ``b`` is feasible by assumption (the cap) and ``a`` infeasible unless evaluated. Every
    returned point other than ``b`` has been evaluated and found feasible, so a looser
    tolerance only rounds the answer up, never below the root. Bracketed secant steps,
    biased to the side not yet pinned so that the bracket closes to within the tolerance.
    """
    lo, lo_known = a, False
    hi = b
    last: list[tuple[float, float]] = []
    widths: list[float] = []
    streak, side = 0, None
    x = min(max(x0, a), b)
    for _ in range(100):
        f = phi(x)
        streak = streak + 1 if (f >= 0.0) == side else 0
        side = f >= 0.0
        if f >= 0.0:
            hi = x
        else:
            lo, lo_known = x, True
        if math.isfinite(f):
            last = [*last[-1:], (x, f)]
        tol = rtol * max(abs(hi), abs(lo)) + atol
        if hi - lo <= tol:
            if not lo_known and lo == a:
                # The lower end was only assumed infeasible: check it.
                return a if phi(a) >= 0.0 else hi
            return hi
        widths.append(hi - lo)
        # Secant through the last two finite points (superlinear on the nearly linear φ).
        guess = math.nan
        if len(last) == 2 and last[0][1] != last[1][1]:
            (x1, f1), (x2, f2) = last
            guess = x2 - f2 * (x2 - x1) / (f2 - f1)
        if not math.isfinite(guess):
            # No usable secant: step 5 % (down if feasible, up if not), doubling on a streak.
            step = 0.05 * (abs(x) + atol) * 2.0 ** min(streak, 60)
            guess = x - step if f >= 0.0 else x + step
        # Aim a little past the estimate to the side not pinned by the last point, so the
        # next point most likely lands on the other side and the bracket closes.
        guess += -0.4 * tol if f >= 0.0 else 0.4 * tol
        if lo_known and hi != b and len(widths) >= 4 and widths[-1] > 0.5 * widths[-4]:
            guess = 0.5 * (lo + hi)  # the bracket stopped shrinking: bisect
        x = min(max(guess, lo + 0.3 * tol), hi - 0.3 * tol)
    return hi


@functools.lru_cache(maxsize=4096)
def _blanket_cached(eps0: float, n_others: int, delta: float, k: int, n_fakes: int) -> float:
    grid = _blanket_setup(eps0, n_others, k, n_fakes, _BLANKET_PRUNE * delta)
    if grid.dropped >= delta:
        return eps0
    return _smallest_feasible(
        lambda e: _feasibility(_blanket_hockey(e, eps0, k, grid), delta),
        0.0,
        eps0,
        min(_blanket_guess(eps0, n_others, delta, k, n_fakes), eps0),
    )


def _blanket_guess(eps0: float, n_others: int, delta: float, k: int, n_fakes: int) -> float:
    """A first point for the root find (only its speed depends on it): the Gaussian view.

    h₁ − h₀ has variance ≈ 2T/k from the T ≈ 1 + n_fakes + λ n_others uniform reports and the
    victim moves its mean by 2(p − q): ε ≈ 0.7 · 2(p − q)/√(2T/k) · √(2 ln(1/δ)) (0.7 fitted
    on n = 10^3 … 10^6, k = 3 … 1024: within a factor 1.5, 5–9 evaluations of the sum).
    """
    e0 = math.exp(eps0)
    p, q = e0 / (e0 + k - 1.0), 1.0 / (e0 + k - 1.0)
    t = 1.0 + n_fakes + n_others * k / (e0 + k - 1.0)
    return 0.7 * 2.0 * (p - q) / math.sqrt(2.0 * t / k) * math.sqrt(2.0 * math.log(1.0 / delta))


def krr_blanket_epsilon(
    epsilon_local: float, n_others: int, delta: float, *, k: int, n_fakes: int = 0
) -> float:
    """ε(δ) of the numerically evaluated k-RR privacy blanket (+ uniform fakes, exactly).

    Rounded up by at most 1e-7 relative (an evaluated point above the exact root of the
    blanket sum), and cells of total weight ≤ 1e-6·δ are charged in full instead of
    evaluated: both keep it an upper bound and, with one binomial tail per cell instead of
    three, cut the cost ~10× (milliseconds at n = 10^4, ≲ 0.06 s at n = 10^6).

    Args:
        epsilon_local: ε0 of the victim's k-RR randomizer.
        n_others: other honest users.
        delta: target δ.
        k: domain of the k-RR randomizer, at least 2.
        n_fakes: uniform fake reports added by honest shufflers.

    Returns:
        ε (at most ε0: shuffling is post-processing of the ε0-LDP reports).

    Raises:
        ParameterError: a parameter out of range.
    """
    eps0 = check_epsilon(epsilon_local, "epsilon_local")
    k = check_n(k, "k", 2)
    if eps0 > _EPS0_MAX:
        return eps0
    return _blanket_cached(
        _round(eps0),
        check_n(n_others, "n_others", 0),
        _round(check_delta(delta)),
        k,
        check_n(n_fakes, "n_fakes", 0),
    )


def _blanket_hockey_reference(eps: float, eps0: float, k: int, grid: _BlanketGrid) -> float:
    """The blanket sum with three binomial tails per cell (slow reference for the tests)."""
    e0 = math.exp(eps0)
    big_e = math.exp(eps)
    p = e0 / (e0 + k - 1.0)
    q = 1.0 / (e0 + k - 1.0)
    s, t_total = grid.s, grid.t_total
    theta = (big_e * (e0 - 1.0) * s + (big_e - 1.0) * t_total) / ((e0 - 1.0) * (1.0 + big_e))
    t = np.floor(theta) + 1.0
    s_prev = np.maximum(s - 1.0, 0.0)
    sf_prev_1 = _sf_half(t - 2.0, s_prev)  # Pr[J ≥ t−1 | G = s−1]
    sf_prev_0 = _sf_half(t - 1.0, s_prev)  # Pr[J ≥ t   | G = s−1]
    sf_here = _sf_half(t - 1.0, s)  # Pr[J ≥ t   | G = s]
    rest = (k - 2.0) * q * grid.w_here * sf_here
    tail_1 = grid.w_prev * (p * sf_prev_1 + q * sf_prev_0) + rest
    tail_0 = grid.w_prev * (q * sf_prev_1 + p * sf_prev_0) + rest
    return float(np.clip(tail_1 - big_e * tail_0, 0.0, None).sum()) + grid.dropped


def krr_blanket_reference_epsilon(
    epsilon_local: float, n_others: int, delta: float, *, k: int, n_fakes: int = 0
) -> float:
    """The blanket without pruning or tolerance (full root find, three tails per cell).

    The previous implementation, kept as the slow reference the fast one is tested and
    benchmarked against; not cached.

    Args:
        epsilon_local: ε0 of the victim's k-RR randomizer.
        n_others: other honest users.
        delta: target δ.
        k: domain of the k-RR randomizer, at least 2.
        n_fakes: uniform fake reports added by honest shufflers.

    Returns:
        ε (at most ε0: shuffling is post-processing of the ε0-LDP reports).

    Raises:
        ParameterError: a parameter out of range.
    """
    eps0 = check_epsilon(epsilon_local, "epsilon_local")
    grid = _blanket_setup(eps0, n_others, k, n_fakes, 0.0)
    guess = stronger_clone_epsilon(eps0, n_others, delta, k=k, n_fakes=n_fakes)
    return _solve_decreasing(
        lambda e: _blanket_hockey_reference(e, eps0, k, grid), delta, eps0, guess=guess
    )


def krr_fakes_only_epsilon(epsilon_local: float, n_fakes: int, delta: float, *, k: int) -> float:
    """Exact ε(δ) of one k-RR report hidden only among ``n_fakes`` uniform fake reports.

    This is MURS's worst case (analyzer + m−1 shufflers + all other users collude): only
    the honest shuffler's fakes are unknown to the adversary.

    Args:
        epsilon_local: ε0 of the victim's k-RR randomizer.
        n_fakes: uniform fake reports the adversary cannot tell apart.
        delta: target δ.
        k: domain of the k-RR randomizer, at least 2.

    Returns:
        ε (at most ε0; ε0 itself with no fakes).

    Raises:
        ParameterError: a parameter out of range.
    """
    if k == 2:
        return binary_rr_epsilon(epsilon_local, 0, delta, n_fakes=n_fakes)
    eps0 = check_epsilon(epsilon_local, "epsilon_local")
    if eps0 > _EPS0_MAX:
        return eps0
    return _fakes_only_cached(
        _round(eps0), check_n(n_fakes, "n_fakes", 0), _round(check_delta(delta)), check_n(k, "k", 3)
    )


@functools.lru_cache(maxsize=1024)
def _fakes_only_cached(eps0: float, n_fakes: int, delta: float, k: int) -> float:
    # One T (no other users): a single row of cells, cheap enough for a full-precision root
    # find without pruning, so the audit's "krr_fakes_exact" is exact to 1e-7.
    grid = _blanket_setup(eps0, 0, k, n_fakes, 0.0)
    return _solve_decreasing(lambda e: _blanket_hockey(e, eps0, k, grid), delta, eps0)


def _bl_check(k: int) -> None:
    if k == 2:
        raise BoundNotApplicable(
            "krr_blanket_numerical is for k >= 3; for k = 2 binary_rr_exact is exact"
        )


def _bl_forward(eps_l: float, n: int, delta: float, k: int) -> float:
    _bl_check(k)
    return krr_blanket_epsilon(eps_l, n - 1, delta, k=k)


def _bl_inverse(eps_c: float, n: int, delta: float, k: int) -> float:
    _bl_check(k)
    if eps_c > _EPS0_MAX:
        return eps_c
    return _blanket_inverse_cached(_round(eps_c), n - 1, _round(delta), k)


@functools.lru_cache(maxsize=1024)
def _blanket_inverse_cached(eps_c: float, n_others: int, delta: float, k: int) -> float:
    """Largest ε_l whose blanket proves ε_c: one bracketed secant search over ε_l.

    Each step rebuilds the grid at the trial ε_l and evaluates the divergence once, at
    e^{target}. The target sits 2·rtol below ε_c so that the forward map — rounded up by at
    most rtol — of the answer is ≤ ε_c again (what a protocol built from ε_c then states).
    """
    target = eps_c * (1.0 - 2.0 * _BLANKET_RTOL) - 2.0 * _BLANKET_ATOL
    if target <= 0.0:
        return eps_c
    prune = _BLANKET_PRUNE * delta

    def phi(y: float) -> float:  # y = −ε_l, so that φ increases and feasible means ≥ 0
        # Rounded as the forward map's cache key is: the T bins move with ε_l, so the answer
        # must be exactly the point the forward map will evaluate.
        eps_l = _round(-y)
        grid = _blanket_setup(eps_l, n_others, k, 0, prune)
        return _feasibility(_blanket_hockey(target, eps_l, k, grid), delta)

    # Where the blanket is below the stronger clone (k-RR, the usual case) the clone's ε_l
    # also qualifies for the blanket: a first point on or near the feasible side.
    guess = _sc_inverse(eps_c, n_others + 1, delta, k)
    return _round(-_smallest_feasible(phi, -_EPS0_MAX, -eps_c, -max(guess, eps_c)))


#: Registered last, so on a tie the stronger clone (cheaper, already cached) is named. One
#: forward or inverse evaluation costs ≲ 0.06 s at n = 10^6 (bracketed secant steps on a
#: 1e-7 tolerance, pruned cells charged to δ); ``docs/benchmarks.md`` has figures.
KRR_BLANKET_BOUND = register_bound(
    AmplificationBound(
        name="krr_blanket_numerical",
        families=frozenset({"krr"}),
        citation="Balle et al. Crypto'19 (arXiv 1903.02837) Lemma 3.1 privacy blanket, "
        "evaluated numerically (tight blanket, Biswas et al. arXiv 2205.04410)",
        forward=_bl_forward,
        inverse=_bl_inverse,
    )
)
