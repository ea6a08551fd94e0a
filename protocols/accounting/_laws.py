"""Exact ε(δ) of a pair of discrete laws, the binomial laws the accountants use, and the
root finds that turn a forward map ε_l → ε_c into its inverse.

Shared by every numerical accountant of this package (binary RR exact, clones, blanket,
exact k-RR): the laws are truncated at :data:`_TAIL_SD` standard deviations and kept in log
space where they are combined. scipy is imported inside the functions that use it:
``import protocols`` (every esa command, every party process) must not pay its ~1 s start-up.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from .._base import check_delta
from .._distributions import binom_pmf, fftconvolve
from .._errors import BoundNotApplicable, ParameterError

__all__ = [
    "binomial_window",
    "epsilon_for_pair",
    "hockey_stick",
]

FloatArray = npt.NDArray[np.float64]

#: ε_l above which the numerical bounds are not attempted (e^{ε0} overflows the clones).
_EPS0_MAX = 40.0
#: Support truncation, in standard deviations (+ an absolute margin for tiny means).
_TAIL_SD = 11.0
#: Most points of one binomial law (32 MiB of float64): 1.1·10^6 at n = 10^10, the most
#: users ``esa`` takes (simulations/_common.py ``MAX_USERS``); ~10^11 users at p = ½. Past
#: it the numerical bounds step aside instead of allocating gigabytes (156 GiB at n = 2^62).
_MAX_SUPPORT = 1 << 22
#: How far a truncated binomial law's mass may be from 1 (the tails cut at _TAIL_SD hold
#: ≪ 10^-14); further, the law has left double precision and no bound follows from it.
#: scipy's ``binom.pmf`` keeps the mass within 10^-14 up to n = 2^40 (its ``logpmf`` does
#: not: off by 10^-9 at n = 10^6, 10^-7 at 10^8, 2·10^-5 at 10^10, which is why the laws are
#: taken as log(pmf); tests/test_tight_binomial.py checks both against exact arithmetic).
_MASS_TOLERANCE = 1e-9


def _round(x: float) -> float:
    """Round to 12 significant digits so the caches hit for equal-looking arguments."""
    return float(f"{x:.12g}")


# --- exact ε(δ) of a pair of discrete distributions ------------------------------------------


def hockey_stick(log_p: npt.ArrayLike, log_q: npt.ArrayLike, epsilon: float) -> float:
    """H_{e^ε}(P‖Q) = Σ_y max(0, P(y) − e^ε Q(y)) for log-probability vectors on one support.

    Args:
        log_p: log-probabilities of P (−inf for zero mass).
        log_q: log-probabilities of Q on the same support.
        epsilon: ε.

    Returns:
        The hockey-stick divergence, in [0, 1].
    """
    lp = np.asarray(log_p, dtype=np.float64)
    lq = np.asarray(log_q, dtype=np.float64)
    diff = np.exp(lp) - np.exp(lq + epsilon)
    return float(np.sum(diff[diff > 0]))


def _one_direction(lp: FloatArray, lq: FloatArray, delta: float) -> float:
    """Smallest ε ≥ 0 with H_{e^ε}(P‖Q) ≤ δ, exactly (piecewise closed form)."""
    keep = np.isfinite(lp)
    lp, lq = lp[keep], lq[keep]
    if lp.size == 0:  # P has no mass: H_{e^ε}(P‖Q) = 0 at every ε
        return 0.0
    with np.errstate(invalid="ignore"):
        llr = lp - lq  # +inf where Q = 0
    order = np.argsort(-llr, kind="stable")
    llr = llr[order]
    cp = np.cumsum(np.exp(lp[order]))
    cq = np.cumsum(np.exp(lq[order]))
    inf_mass = float(cp[np.isinf(llr)][-1]) if np.isinf(llr[0]) else 0.0
    if inf_mass > delta:
        return math.inf
    finite = np.isfinite(llr)
    llr, cp, cq = llr[finite], cp[finite], cq[finite]
    if llr.size == 0:
        return 0.0
    # H at breakpoint ε = llr[j] sums the entries with llr > llr[j]; entries equal to llr[j]
    # add P − e^ε Q = 0, so the inclusive cumulative sums give it exactly. H decreases in ε,
    # so h_at increases with j: find the first breakpoint where it exceeds δ.
    h_at = cp - np.exp(llr) * cq
    above = np.nonzero(h_at > delta)[0]
    if above.size == 0:
        return 0.0
    j = int(above[0])
    if j == 0:
        # Only the infinite-loss mass (≤ δ) lies above llr[0].
        return float(max(llr[0], 0.0))
    # On [llr[j], llr[j−1]) the set {llr > ε} is entries 0..j−1: H = cp[j−1] − e^ε cq[j−1].
    e = math.log(max(cp[j - 1] - delta, 1e-300) / cq[j - 1])
    return float(min(max(e, llr[j], 0.0), max(llr[j - 1], 0.0)))


def epsilon_for_pair(log_p: npt.ArrayLike, log_q: npt.ArrayLike, delta: float) -> float:
    """Exact smallest ε ≥ 0 with P ≈_{ε,δ} Q (both hockey-stick directions ≤ δ).

    Args:
        log_p: log-probabilities of P on a common finite support (−inf for zero mass).
        log_q: log-probabilities of Q on the same support.
        delta: target δ in (0, 1).

    Returns:
        ε (``inf`` if the mass where one distribution is zero already exceeds δ).

    Raises:
        ParameterError: ``log_p`` and ``log_q`` differ in shape, or δ is out of range.
    """
    delta = check_delta(delta)
    lp = np.asarray(log_p, dtype=np.float64).ravel()
    lq = np.asarray(log_q, dtype=np.float64).ravel()
    if lp.shape != lq.shape:
        raise ParameterError(f"log_p and log_q must have one shape, got {lp.shape}, {lq.shape}")
    return max(_one_direction(lp, lq, delta), _one_direction(lq, lp, delta))


def _solve_decreasing(
    raw: Callable[[float], float], delta: float, hi: float, guess: float | None = None
) -> float:
    """Smallest ε in [0, hi] with h(ε) ≤ δ for a continuous decreasing h = ``raw`` (hi if
    none); BoundNotApplicable if h is NaN somewhere (out of double precision's range).

    ``guess`` (e.g. a cheaper, looser bound's answer) narrows the bracket to [0.8·guess,
    guess] when it holds, which halves the number of (expensive) evaluations of h.
    """
    # Imported here: scipy costs ~1 s at start-up and most esa commands never need it.
    from scipy.optimize import brentq

    def h(eps: float) -> float:
        value = raw(eps)
        if math.isnan(value):  # e.g. binomial tails at n ≳ 10^10: no bound, not a wrong one
            raise BoundNotApplicable(
                "the numerical accountant leaves double precision's range at these parameters"
            )
        return value

    lo = 0.0
    if guess is not None and 0.0 < guess < hi and h(guess) <= delta:
        hi = guess
        if h(0.8 * guess) > delta:
            lo = 0.8 * guess
    if lo == 0.0 and h(0.0) <= delta:
        return 0.0
    if h(hi) > delta:
        return hi
    root = float(brentq(lambda e: h(e) - delta, lo, hi, xtol=1e-9, rtol=1e-7))
    # brentq may stop a hair below the root; step up until the guarantee holds.
    step = max(1e-9, 1e-8 * root)
    while h(root) > delta and root < hi:
        root += step
        step *= 2
    return min(root, hi)


def _support(n: int, prob: float, tail_sd: float = _TAIL_SD) -> tuple[int, int]:
    """[lo, hi] covering Bin(n, prob) up to a negligible tail mass (≪ 1e-14 at 8 sd)."""
    mean = n * prob
    sd = math.sqrt(max(n * prob * (1 - prob), 0.0))
    lo = max(0, math.floor(mean - tail_sd * sd - 30))
    hi = min(n, math.ceil(mean + tail_sd * sd + 30))
    return lo, hi


def binomial_window(n: int, prob: float) -> tuple[int, FloatArray]:
    """Offset and pmf of Bin(n, prob) on its (truncated) support.

    Args:
        n: number of trials.
        prob: success probability.

    Returns:
        ``(lo, pmf)``: pmf[i] = P[Bin(n, prob) = lo + i] on the support kept (the rest's mass is
        below double precision).

    Raises:
        BoundNotApplicable: the support would be too large, or the pmf loses its mass in double
            precision.
    """
    lo, hi = _support(n, prob)
    if hi - lo >= _MAX_SUPPORT:
        raise BoundNotApplicable(
            f"the numerical accountant would need a {hi - lo + 1:,}-point binomial law here "
            f"(over {_MAX_SUPPORT:,}: too many users for it)"
        )
    k = np.arange(lo, hi + 1)
    with np.errstate(all="ignore"):  # checked below: the law must keep its mass
        # The pmf, not exp(logpmf): see _MASS_TOLERANCE.
        pmf = np.asarray(binom_pmf(k, n, prob), dtype=np.float64)
    if not abs(float(np.sum(pmf)) - 1.0) <= _MASS_TOLERANCE:  # false for NaN
        raise BoundNotApplicable(
            "the numerical accountant leaves double precision's range at these parameters"
        )
    return lo, pmf


def _binom_logpmf(n: int, prob: float) -> tuple[int, FloatArray]:
    """Offset and log-pmf of Bin(n, prob) on its (truncated) support. Points under 10^-308
    (far beyond _TAIL_SD) are −inf, i.e. mass 0, which is what they hold."""
    lo, pmf = binomial_window(n, prob)
    with np.errstate(divide="ignore"):
        return lo, np.log(pmf)


def _binom_sum_logpmf(n1: int, p1: float, n2: int, p2: float) -> tuple[int, FloatArray]:
    """Offset and log-pmf of Bin(n1, p1) + Bin(n2, p2) (convolution in linear space)."""
    o1, l1 = _binom_logpmf(n1, p1)
    if n2 == 0:
        return o1, l1
    o2, l2 = _binom_logpmf(n2, p2)
    return o1 + o2, _log_convolve(l1, l2)


def _log_convolve(l1: FloatArray, l2: FloatArray) -> FloatArray:
    """Log of the convolution of two laws given as log-pmfs (computed in linear space)."""
    a, b = np.exp(l1), np.exp(l2)
    # Direct convolution is quadratic: 16 ms for two 11 000-point laws (n = 10^6), seconds
    # at n = 10^8; the FFT is not.
    conv = np.convolve(a, b) if min(a.size, b.size) <= 512 else fftconvolve(a, b)
    conv = np.clip(conv, 0.0, None)  # FFT round-off can leave −1e−18
    with np.errstate(divide="ignore"):
        return np.asarray(np.log(conv), dtype=np.float64)


#: Other users holding 1 evaluated one by one before the search over ranges starts (the


def _sf_half(t: npt.ArrayLike, n: npt.ArrayLike) -> FloatArray:
    """Pr[Bin(n, ½) > t] = I_½(t + 1, n − t), vectorized, for any real t.

    The regularized incomplete beta function (``scipy.special.betainc``), not ``bdtrc``:
    ``bdtrc`` takes n as a C int (NaN past 2^31 trials) and is off by 10^-10 relative at
    n = 10^6 and 4·10^-6 at 10^9, against 10^-15 for ``betainc`` (tests/test_tight_binomial.py
    checks it against exact sums).
    """
    # Imported here: scipy costs ~1 s at start-up and most esa commands never need it.
    from scipy import special

    t_arr = np.floor(np.asarray(t, dtype=np.float64))
    n_arr = np.asarray(n, dtype=np.int64)
    t_arr, n_arr = np.broadcast_arrays(t_arr, n_arr)
    out = np.zeros(t_arr.shape)
    below = t_arr < 0
    out[below] = 1.0
    mid = ~below & (t_arr < n_arr)
    k = t_arr[mid]
    out[mid] = special.betainc(k + 1.0, n_arr[mid] - k, 0.5)
    return out


def _invert(
    forward: Callable[[float], float],
    target: float,
    hi: float = _EPS0_MAX,
    lo: float | None = None,
) -> float:
    """Largest ε_l in [lo, hi] with forward(ε_l) ≤ target, for forward increasing with
    forward(ε) ≤ ε; ``lo`` (default target) must satisfy forward(lo) ≤ target."""
    # Imported here: scipy costs ~1 s at start-up and most esa commands never need it.
    from scipy.optimize import brentq

    # forward(ε) ≤ ε (shuffling never hurts), so ε_l = target always qualifies.
    lo = target if lo is None else lo
    if forward(hi) <= target:
        return hi
    if forward(lo) >= target:
        return lo
    root = float(brentq(lambda e: forward(e) - target, lo, hi, xtol=1e-8, rtol=1e-7))
    step = max(1e-9, 1e-8 * root)
    while root > lo and forward(root) > target:
        root = max(lo, root - step)
        step *= 2
    return root


def _invert_on_divergence(
    divergence: Callable[[float], float],
    forward: Callable[[float], float],
    target: float,
    delta: float,
) -> float:
    """Largest ε_l with forward(ε_l) ≤ target, by one root find on the divergence.

    forward(ε_l) ≤ target ⇔ H_{e^target}(ε_l) ≤ δ (or ε_l ≤ target, the cap), and H grows
    with ε_l, so a single root find on ε_l replaces a root find over root finds (10–20×
    fewer divergence evaluations). ``divergence(ε_l)`` is H_{e^target} for that ε_l.
    """
    # Imported here: scipy costs ~1 s at start-up and most esa commands never need it.
    from scipy.optimize import brentq

    def h(eps_l: float) -> float:
        value = divergence(eps_l)
        if math.isnan(value):  # binomial tails at n ≳ 10^10: no bound, not a wrong one
            raise BoundNotApplicable(
                "the numerical accountant leaves double precision's range at these parameters"
            )
        return value

    lo, hi = target, _EPS0_MAX
    if h(hi) <= delta:
        return hi
    if h(lo) > delta:
        return lo
    root = float(brentq(lambda e: h(e) - delta, lo, hi, xtol=1e-9, rtol=1e-8))
    # Guard the tolerance of both root finds with the forward map itself.
    step = max(1e-9, 1e-7 * root)
    while root > lo and forward(root) > target:
        root = max(lo, root - step)
        step *= 2
    return root
