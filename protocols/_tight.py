"""Tight numerical privacy accounting for shuffled local randomizers.

The survey's closed forms (``_amplification.py``, Thm 1–4) are loose by factors of 3–10. This
module computes ε(δ) of the shuffled output numerically, either exactly or from a reduction
that is proven to dominate it, and registers the accountants below in :data:`BOUNDS` so that
:func:`tightest_central` / :func:`largest_local` pick the tightest one automatically and name
it:

``binary_rr_exact`` (family ``krr``, k = 2)
    Exact ε(δ) of shuffled binary randomized response. The shuffled output is the count Y of
    ones (a sufficient statistic). If a of the other n−1 users hold 1, Y is
    Bin(a, p) + Bin(n−1−a, q) plus the victim's bit, Bern(q) under D0 and Bern(p) under D1
    (p = e^{ε0}/(e^{ε0}+1), q = 1 − p). The hockey-stick divergence of this pair is computed
    exactly in log space, both directions, and maximised over EVERY a, not a search: the
    maximum is often at a ≤ 2 but not always (at large δ it moves inside, e.g. a = 56 of 249
    at ε0 = 3, δ = 0.1). For all a in [lo, hi] the pair is a post-processing of the pair
    with lo others holding 1 and n−1−hi holding 0 (the other hi − lo users add the same
    independent count to both laws), so that smaller population's exact ε bounds the whole
    range; a branch and bound over ranges of a evaluates only the ranges whose bound exceeds
    the best value found (hundreds to ~10^5 pairs instead of n/2: ε varies with a by a
    lattice ripple of relative size ~10^-6 at n = 10^5, 5·10^-9 at 10^8, on a slow trend),
    and a ↔ n−1−a by symmetry. Each pair's ε is read off threshold sets {Y ≥ u}, {Y ≤ u}
    (the likelihood ratio is monotone in Y), and the ranges inside one block of
    ~16·√n values of a are evaluated from that block's law through small kernels: about
    1.5 s at n = 10^6, 8 s at 10^7, 50 s at 10^8 (CPU time; ``docs/benchmarks.md``); past
    2^28 other users it steps aside.
    ``tests/test_tight.py`` checks it against the maximum over every a.

``fmt23_stronger_clone`` (family ``krr``)
    Feldman, McMillan, Talwar, "Stronger privacy amplification by shuffling for Rényi and
    approximate DP", SODA'23 (arXiv 2208.04591) Thm 3.2 with its erratum: the result holds for
    randomizers that decompose as R(x) = α R(x⁰) + α R(x¹) + (1−2α) LO(x) with
    α = 1/(e^{ε0}+1) — true for k-RR (its mass on x⁰ is q = α (p+q)). The shuffle is then a
    post-processing of (A+Δ, C−A+1−Δ) vs (A+1−Δ, C−A+Δ) with C ~ Bin(n−1, 2/(e^{ε0}+1)),
    A ~ Bin(C, ½), Δ ~ Bern(e^{ε0}/(e^{ε0}+1)).

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

``fmt21_numerical`` (family ``generic``)
    Feldman, McMillan, Talwar, "Hiding among the clones", FOCS'21 (arXiv 2012.12803) Thm 3.2
    and their numerical procedure (Sec. 5): the same pair as above with
    C ~ Bin(n−1, e^{−ε0}); valid for every ε0-LDP randomizer.

Fakes: an honest shuffler's n_r fakes are uniform over the message space. For k-RR they are
exactly what a blanket user sends, so they enlarge the blanket (exact: T grows by n_r); in the
clone reduction a uniform report is a clone with probability 2/(k (p+q)) (the largest α with
U = α R(x⁰) + α R(x¹) + rest); for binary RR (k = 2) every fake is a fair coin added to Y.
For generic randomizers fakes are not counted (a uniform message need not look like any
user's), which is conservative.

Every evaluation is cached on rounded arguments and vectorized over the support, so one
forward evaluation at n = 10^6 takes milliseconds to ~0.1 s. scipy is imported inside the
functions that use it: ``import protocols`` (every esa command, every party process) must
not pay its ~1 s start-up.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ._amplification import AmplificationBound, register_bound
from ._base import check_delta, check_epsilon, check_n
from ._errors import BoundNotApplicable, ParameterError

__all__ = [
    "KRR_BLANKET_BOUND",
    "TIGHT_BOUND_NAMES",
    "binary_rr_epsilon",
    "clone_epsilon",
    "epsilon_for_pair",
    "fmt21_numerical_epsilon",
    "hockey_stick",
    "krr_blanket_epsilon",
    "krr_exact_epsilon",
    "krr_fakes_only_epsilon",
    "shuffled_epsilon",
    "stronger_clone_epsilon",
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
    """H_{e^ε}(P‖Q) = Σ_y max(0, P(y) − e^ε Q(y)) for log-probability vectors on one support."""
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


# --- shuffled binary randomized response, exact --------------------------------------------


def _support(n: int, prob: float, tail_sd: float = _TAIL_SD) -> tuple[int, int]:
    """[lo, hi] covering Bin(n, prob) up to a negligible tail mass (≪ 1e-14 at 8 sd)."""
    mean = n * prob
    sd = math.sqrt(max(n * prob * (1 - prob), 0.0))
    lo = max(0, math.floor(mean - tail_sd * sd - 30))
    hi = min(n, math.ceil(mean + tail_sd * sd + 30))
    return lo, hi


def binomial_window(n: int, prob: float) -> tuple[int, FloatArray]:
    """Offset and pmf of Bin(n, prob) on its (truncated) support."""
    # Imported here: scipy costs ~1 s at start-up and most esa commands never need it.
    from scipy import stats

    lo, hi = _support(n, prob)
    if hi - lo >= _MAX_SUPPORT:
        raise BoundNotApplicable(
            f"the numerical accountant would need a {hi - lo + 1:,}-point binomial law here "
            f"(over {_MAX_SUPPORT:,}: too many users for it)"
        )
    k = np.arange(lo, hi + 1)
    with np.errstate(all="ignore"):  # checked below: the law must keep its mass
        # The pmf, not exp(logpmf): see _MASS_TOLERANCE.
        pmf = np.asarray(stats.binom.pmf(k, n, prob), dtype=np.float64)
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
    # Imported here: scipy costs ~1 s at start-up and most esa commands never need it.
    from scipy import signal

    a, b = np.exp(l1), np.exp(l2)
    # Direct convolution is quadratic: 16 ms for two 11 000-point laws (n = 10^6), seconds
    # at n = 10^8; the FFT is not.
    conv = np.convolve(a, b) if min(a.size, b.size) <= 512 else signal.fftconvolve(a, b)
    conv = np.clip(conv, 0.0, None)  # FFT round-off can leave −1e−18
    with np.errstate(divide="ignore"):
        return np.asarray(np.log(conv), dtype=np.float64)


#: Other users holding 1 evaluated one by one before the search over ranges starts (the
#: maximum is usually at a ≤ 2, so these seed the pruning bound).
_BINARY_SEED = 4
#: Ranges of a at most this wide are evaluated point by point instead of split.
_BINARY_LEAF = 4
#: A range of a at most _BINARY_BLOCK·√n_others wide (and ≥ _BINARY_BLOCK_MIN) is searched
#: inside one block: its law is computed once and every range and point below it is evaluated
#: from it through a kernel of width ~√(that width) (see :class:`_BinaryBlock`).
_BINARY_BLOCK = 16
_BINARY_BLOCK_MIN = 4096
#: Most floats of kernels one search keeps (see :class:`_BinaryKernels`): 64 MiB.
_BINARY_KERNEL_CACHE = 1 << 23
#: Most other users the exact search takes: ~1 min of CPU at 10^8, growing about linearly
#: (≈ √n ranges per level, kernels of ≈ √n points). Past it the bound steps aside; since
#: binomial_window keeps its mass up to n = 2^40 nothing else would stop it (at the CLI's
#: 10^10 users it searched for hours).
_BINARY_MAX_OTHERS = 1 << 28


def _binary_rr_pair(
    eps0: float, n_others: int, a: int, n_fakes: int
) -> tuple[FloatArray, FloatArray]:
    """Log-laws of the count of ones when a others hold 1 and n_others − a hold 0.

    The reference form of the pair (any ε(δ) follows from it by :func:`epsilon_for_pair`);
    the accountant itself uses the faster equivalent :func:`_binary_rr_law_epsilon`.
    """
    q = 1.0 / (math.exp(eps0) + 1.0)
    p = 1.0 - q
    # Bin(a, p) + Bin(n_others − a, q) + Bin(n_fakes, ½): the ones' count a − Bin(a, q)
    # reflected onto the zeros' law, both truncated at _TAIL_SD.
    off, lw = _binom_sum_logpmf(n_others - a, q, n_fakes, 0.5)
    if a:
        k_off, lk = _binom_logpmf(a, p)
        lw = _log_convolve(lw, lk)
        off += k_off
    # Y = W + victim bit: log P(Y=y) = logaddexp(log r1 + logW(y−1), log r0 + logW(y)).
    lw_pad = np.concatenate(([-np.inf], lw, [-np.inf]))
    lw_prev, lw_here = lw_pad[:-1], lw_pad[1:]
    log_d0 = np.logaddexp(math.log(q) + lw_prev, math.log(p) + lw_here)  # victim holds 0
    log_d1 = np.logaddexp(math.log(p) + lw_prev, math.log(q) + lw_here)  # victim holds 1
    return log_d0, log_d1


def _convolve(a: FloatArray, b: FloatArray) -> FloatArray:
    """Convolution of two laws in linear space (FFT past 512 points on both sides)."""
    # Imported here: scipy costs ~1 s at start-up and most esa commands never need it.
    from scipy import signal

    conv = np.convolve(a, b) if min(a.size, b.size) <= 512 else signal.fftconvolve(a, b)
    return np.asarray(np.clip(conv, 0.0, None), dtype=np.float64)  # FFT round-off: −1e−18


def _binary_rr_law(p: float, q: float, ones: int, zeros: int, n_fakes: int) -> FloatArray:
    """pmf of W = Bin(ones, p) + Bin(zeros, q) + Bin(n_fakes, ½) on its truncated support
    (the offset is irrelevant: the pair's ε is translation invariant)."""
    w = binomial_window(zeros, q)[1]
    if n_fakes:
        w = _convolve(w, binomial_window(n_fakes, 0.5)[1])
    if ones:
        w = _convolve(w, binomial_window(ones, p)[1])
    return w


def _threshold_values(s_prev: FloatArray, s_here: FloatArray, r: float, delta: float) -> FloatArray:
    """log((A − δ)/B) with A = (1−r)·s_prev + r·s_here, B = r·s_prev + (1−r)·s_here; −inf
    where A ≤ δ (such a set is no constraint at any ε ≥ 0)."""
    big_a = (1.0 - r) * s_prev + r * s_here
    big_b = r * s_prev + (1.0 - r) * s_here
    # B → 0 gives +inf (a loss beyond any ε0: the caller caps at ε0).
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        return np.where(big_a > delta, np.log((big_a - delta) / big_b), -np.inf)


def _binary_rr_law_epsilon(
    w: FloatArray, q: float, delta: float
) -> tuple[float, int, int, FloatArray, FloatArray, bool]:
    """Exact ε(δ) of the pair (W + Bern(q), W + Bern(p)), from threshold sets.

    W (a sum of independent Bernoulli laws: log-concave) has W(y−1)/W(y) nondecreasing in
    y, so the likelihood ratio of the two laws of Y = W + victim's bit,
    d₁(y)/d₀(y) = (p·W(y−1) + q·W(y)) / (q·W(y−1) + p·W(y)), is nondecreasing too (p > q).
    The set where d₁ > e^ε d₀ is therefore {Y ≥ u} for some u, and where d₀ > e^ε d₁ is
    {Y ≤ u}: H_{e^ε}(d₁‖d₀) = max_u (A_u − e^ε B_u) with A_u = P₁[Y ≥ u], B_u = P₀[Y ≥ u],
    and its smallest ε with H ≤ δ is max_u log((A_u − δ)/B_u) (every u gives a lower bound
    on it, and the u of the optimal set at that ε attains it). The same in the other
    direction with lower sets. This equals :func:`epsilon_for_pair` of
    :func:`_binary_rr_pair` without sorting, logarithms of laws or log-sum-exp.

    Returns:
        (ε ≥ 0, the maximising u for {Y ≥ u} and for {Y ≤ u} as indices into W's support,
        P[W ≥ k] and P[W ≤ k] for k on W's support, whether the lower sets give the larger
        value).
    """
    suf = np.cumsum(w[::-1])[::-1]  # P[W ≥ k]; summed from the small end of the tail
    pre = np.cumsum(w)  # P[W ≤ k]
    # {Y ≥ u}, u = 1..size: P₁ = p·P[W ≥ u−1] + q·P[W ≥ u], P₀ with p and q swapped.
    f1 = _threshold_values(suf, np.append(suf[1:], 0.0), q, delta)
    # {Y ≤ u}, u = 0..size−1: P₀ = q·P[W ≤ u−1] + p·P[W ≤ u], P₁ with p and q swapped.
    f0 = _threshold_values(np.insert(pre[:-1], 0, 0.0), pre, 1.0 - q, delta)
    j1, j0 = int(np.argmax(f1)), int(np.argmax(f0))
    return max(float(f1[j1]), float(f0[j0]), 0.0), j1 + 1, j0, suf, pre, f0[j0] > f1[j1]


def _binomial_window_by_ratios(n: int, prob: float) -> tuple[int, FloatArray]:
    """:func:`binomial_window` from the ratios pmf(k+1)/pmf(k) = (n−k)/(k+1) · prob/(1−prob).

    Products of ratios outward from the mode, normalised on the window (which holds all but
    ≪ 10^-14 of the mass): each step adds ~2 roundings, so relative errors stay below
    ~4·10^-16 per point away from the mode (10^-12 at the 2 500-point edges of a kernel at
    n = 10^8), against exact rationals in tests/test_tight.py. For kernels only: ~20 times
    cheaper than scipy's ``binom.pmf`` at these sizes, which is most of a block's cost.
    Falls back to :func:`binomial_window` where the odds are not finite and positive.
    """
    odds = prob / (1.0 - prob) if prob < 1.0 else math.inf
    if n == 0 or not 0.0 < odds < math.inf:
        return binomial_window(n, prob)
    lo, hi = _support(n, prob)
    mode = min(max(math.floor((n + 1) * prob), lo), hi)
    k_up = np.arange(mode, hi, dtype=np.float64)
    k_down = np.arange(mode, lo, -1, dtype=np.float64)
    with np.errstate(under="ignore"):  # far-tail points round to 0, which is what they hold
        up = np.cumprod((n - k_up) / (k_up + 1.0) * odds)
        down = np.cumprod(k_down / (n - k_down + 1.0) / odds)
    pmf = np.concatenate((down[::-1], [1.0], up))
    return lo, pmf / float(np.sum(pmf))  # pairwise summation: ~10^-16 relative


class _BinaryKernels:
    """Kernels V = Bin(x, p) ⊛ Bin(y, q) with V's mean (as an index into V) and variance.

    Shared by the blocks of one search: a node's (x, y) depends only on its place in its
    block, and the blocks of one level have the same shape (dyadic ranges), so kernels
    repeat (about half the look-ups hit at n = 10^7). At most _BINARY_KERNEL_CACHE floats
    are kept.
    """

    def __init__(self, p: float, q: float) -> None:
        self.p, self.q = p, q
        self._cache: dict[tuple[int, int], tuple[FloatArray, float, float]] = {}
        self._binomials: dict[tuple[int, float], tuple[int, FloatArray]] = {}
        self._floats = 0

    def get(self, x: int, y: int) -> tuple[FloatArray, float, float]:
        hit = self._cache.get((x, y))
        if hit is not None:
            return hit
        (off_x, bx), (off_y, by) = self._binomial(x, self.p), self._binomial(y, self.q)
        v = _convolve(bx, by)
        entry = (v, x * self.p + y * self.q - off_x - off_y, (x + y) * self.p * self.q)
        self._make_room(v.size)
        self._cache[(x, y)] = entry
        return entry

    def _make_room(self, size: int) -> None:
        # Blocks are searched one after the other: when full, forget the older ones.
        if self._floats + size > _BINARY_KERNEL_CACHE:
            self._cache.clear()
            self._binomials.clear()
            self._floats = 0
        self._floats += size

    def _binomial(self, n: int, prob: float) -> tuple[int, FloatArray]:
        hit = self._binomials.get((n, prob))
        if hit is None:
            hit = _binomial_window_by_ratios(n, prob)
            self._make_room(hit[1].size)
            self._binomials[(n, prob)] = hit
        return hit


class _BinaryBlock:
    """Every range [lo', hi'] ⊆ [lo, hi] of a (others holding 1) from one law.

    The pruning bound of [lo', hi'] is the pair whose W is R ⊛ V, where R is the law with lo
    ones and n_others − hi zeros (computed once, full support) and V = Bin(lo' − lo, p) ⊛
    Bin(hi − hi', q) is a kernel of ≤ hi − lo + 1 points (~22·√(hi − lo) after truncation);
    a single a is the range [a, a]. Its ε is max_u log((A_u − δ)/B_u) over the threshold
    sets (see :func:`_binary_rr_law_epsilon`), and P[R ⊛ V ≥ u] = Σ_i V(i)·P[R ≥ u − i],
    so each u costs one dot product with the kernel. u ↦ log((A_u − δ)/B_u) has no local
    maximum but the global one (a strict local maximum at u′ with value ε′ would make
    u ↦ A_u − e^{ε′} B_u, which is unimodal because the likelihood ratio is monotone, peak
    at u′ at height δ, below its value at the true maximiser), so the maximum is found by
    a window that moves until its largest value is inside it, starting where R's own
    maximiser moves to under V. Anything unexpected (no finite value found) falls back to
    the full law.
    """

    def __init__(
        self,
        eps0: float,
        n_others: int,
        n_fakes: int,
        delta: float,
        lo: int,
        hi: int,
        kernels: _BinaryKernels,
    ) -> None:
        self.q = 1.0 / (math.exp(eps0) + 1.0)
        self.p = 1.0 - self.q
        self.eps0, self.n_others, self.n_fakes, self.delta = eps0, n_others, n_fakes, delta
        self.lo, self.hi = lo, hi
        law = _binary_rr_law(self.p, self.q, lo, n_others - hi, n_fakes)
        self.epsilon, self.u1, self.u0, suf, pre, self.lower_first = _binary_rr_law_epsilon(
            law, self.q, delta
        )
        self.size = law.size
        self.var = (lo + n_others - hi) * self.p * self.q + n_fakes / 4.0
        self.log_t = self._log_t(self.epsilon)
        # Padded so that P[R ≥ k] and P[R ≤ k] are one slice for any k a kernel reaches.
        self.pad = hi - lo + 2
        total = float(suf[0])
        self.suf = np.concatenate((np.full(self.pad, total), suf, np.zeros(self.pad)))
        self.pre = np.concatenate((np.zeros(self.pad), pre, np.full(self.pad, total)))
        self._kernels = kernels

    def _log_t(self, eps: float) -> float:
        e = math.exp(min(eps, self.eps0))
        if e * self.q >= self.p:
            return 0.0
        return math.log((e * self.p - self.q) / (self.p - e * self.q))

    def epsilon_of(self, lo: int, hi: int, best: float, *, exact: bool) -> float:
        """ε of the pair with lo ones and n_others − hi zeros (lo ≤ hi inside the block),
        the pruning bound of [lo, hi]: exact if ``exact`` or if it is ≤ best; otherwise
        possibly only some value in (best, exact ε] (enough to know that it exceeds best).
        """
        x, y = lo - self.lo, self.hi - hi
        if x == 0 and y == 0:
            return self.epsilon
        v, mean, var = self._kernels.get(x, y)
        m = v.size
        # Where R's maximisers move (a first guess: the search below does not depend on
        # it). In the Gaussian picture the likelihood ratio crosses e^ε where W's ratio
        # W(y−1)/W(y) crosses t = (e^ε p − q)/(p − e^ε q), at mean + σ² log t; R's maximiser
        # is at R's own ε, the node's near ``best``.
        log_t = self._log_t(best)
        spread = var * log_t + self.var * (log_t - self.log_t)
        shift = self.pad - m + 1
        size = self.size + m - 1  # support of R ⊛ V
        stop = math.inf if exact else best

        # P[R ⊛ V ≥ u] = Σ_i v[i] P[R ≥ u − i] for u = a − 1 .. b: one 'valid' convolution.
        def upper(a: int, b: int) -> FloatArray:  # u in [a, b], sets {Y ≥ u}
            s = np.convolve(self.suf[a - 1 + shift : b + shift + m], v, "valid")
            return _threshold_values(s[:-1], s[1:], self.q, self.delta)

        def lower(a: int, b: int) -> FloatArray:  # u in [a, b], sets {Y ≤ u}
            s = np.convolve(self.pre[a - 1 + shift : b + shift + m], v, "valid")
            return _threshold_values(s[:-1], s[1:], self.p, self.delta)

        searches = [
            (upper, 1, size, self.u1 + round(mean + spread), -1),
            (lower, 0, size - 1, self.u0 + round(mean - spread), 1),
        ]
        if self.lower_first:  # the side that bounded R first: often enough to exceed best
            searches.reverse()
        result = 0.0
        for values, first, last, center, toward in searches:
            value = _window_peak(values, first, last, center, toward, stop)
            if value is None:
                law = _binary_rr_law(self.p, self.q, lo, self.n_others - hi, self.n_fakes)
                return _binary_rr_law_epsilon(law, self.q, self.delta)[0]
            result = max(result, value)
            if result > stop:
                break
        return result

    def search(self, best: float, start: int, end: int) -> float:
        """max(best, the exact ε of every a in the block), by the branch and bound of
        :func:`_binary_rr_cached` restricted to the block, whose range is the dyadic
        [start, end] clipped to [lo, hi]."""
        if self.epsilon <= best:
            return best
        mid = (start + end) // 2
        ranges = [(mid + 1, end), (start, mid)]
        while ranges:
            start, end = ranges.pop()
            lo, hi = max(start, self.lo), min(end, self.hi)
            if lo > hi:
                continue
            if hi - lo < _BINARY_LEAF:
                for a in range(lo, hi + 1):
                    best = max(best, self.epsilon_of(a, a, best, exact=True))
            elif self.epsilon_of(lo, hi, best, exact=False) > best:
                mid = (start + end) // 2
                ranges += [(mid + 1, end), (start, mid)]
        return best


def _window_peak(
    values: Callable[[int, int], FloatArray],
    first: int,
    last: int,
    center: int,
    toward: int,
    stop: float,
) -> float | None:
    """Largest value of a function of u ∈ [first, last] with no local maximum but the global
    one, from windows around ``center``, or the first value found above ``stop``; ``toward``
    is the side where the values are finite when a whole window is −inf. None if no finite
    value is found."""
    half = 4
    for _ in range(64):
        a, b = max(first, center - half), min(last, center + half)
        if a > b:
            return None
        f = values(a, b)
        j = int(np.argmax(f))
        if f[j] > stop:
            return float(f[j])
        if f[j] == -np.inf:
            if (toward < 0 and a == first) or (toward > 0 and b == last):
                return None
            center = a - half if toward < 0 else b + half
        elif j == 0 and a > first:
            center = a - half
        elif j == f.size - 1 and b < last:
            center = b + half
        else:
            return float(f[j])
        half *= 2
    return None


def _binary_rr_full(eps0: float, ones: int, zeros: int, n_fakes: int, delta: float) -> float:
    """Exact ε of the pair with ``ones`` others holding 1 and ``zeros`` holding 0."""
    q = 1.0 / (math.exp(eps0) + 1.0)
    law = _binary_rr_law(1.0 - q, q, ones, zeros, n_fakes)
    return _binary_rr_law_epsilon(law, q, delta)[0]


@functools.lru_cache(maxsize=4096)
def _binary_rr_seeded(eps0: float, n_others: int, delta: float, n_fakes: int) -> float:
    """max over a ≤ _BINARY_SEED of the pair's exact ε: a LOWER bound on the accountant's
    value, cheap; :func:`_bin_inverse` brackets with it."""
    return max(
        _binary_rr_full(eps0, a, n_others - a, n_fakes, delta)
        for a in range(min(_BINARY_SEED, n_others // 2) + 1)
    )


@functools.lru_cache(maxsize=4096)
def _binary_rr_cached(eps0: float, n_others: int, delta: float, n_fakes: int) -> float:
    """max over a of the exact ε(δ) of the pair with a others holding 1 (module doc).

    Every a is covered, by evaluation or by a proven bound: for all a in [lo, hi] the pair
    is a post-processing of the pair with lo others holding 1 and n_others − hi holding 0
    (the remaining a − lo ones and hi − a zeros add the same independent count to both
    laws), whose exact ε therefore bounds the whole range. A range whose bound does not
    exceed the best value evaluated so far is dropped; else it is split (or, once at most
    _BINARY_LEAF wide, evaluated point by point). By symmetry (flip every bit) a and
    n_others − a give the same ε with the directions swapped, so a ≤ n_others // 2 suffices.
    The ranges are dyadic ([k·2^j, (k+1)·2^j − 1] clipped to [_BINARY_SEED + 1, n_others //
    2]); any covering gives the same maximum, since a range holding the maximiser is never
    dropped before that value is reached. Once a range is at most ~16·√n_others wide its
    whole subtree is searched in one :class:`_BinaryBlock` (the same exact values, from one
    law and small kernels).
    """
    half = n_others // 2
    first = min(_BINARY_SEED, half) + 1
    width = max(_BINARY_BLOCK_MIN, int(_BINARY_BLOCK * math.sqrt(n_others)))
    q = 1.0 / (math.exp(eps0) + 1.0)
    kernels = _BinaryKernels(1.0 - q, q)
    best = _binary_rr_seeded(eps0, n_others, delta, n_fakes)
    # Ranges are dyadic, [k·2^j, (k+1)·2^j − 1] clipped to [first, half], so that blocks of
    # one level have the same shape and share their kernels.
    ranges = [(0, (1 << half.bit_length()) - 1)]
    while ranges:
        start, end = ranges.pop()
        lo, hi = max(start, first), min(end, half)
        if lo > hi:
            continue
        if hi - lo < _BINARY_LEAF:
            best = max(
                best,
                *(
                    _binary_rr_full(eps0, a, n_others - a, n_fakes, delta)
                    for a in range(lo, hi + 1)
                ),
            )
        elif end - start <= width:
            block = _BinaryBlock(eps0, n_others, n_fakes, delta, lo, hi, kernels)
            best = block.search(best, start, end)
        elif _binary_rr_full(eps0, lo, n_others - hi, n_fakes, delta) > best:
            mid = (start + end) // 2
            ranges += [(mid + 1, end), (start, mid)]  # the lower half first: maxima sit low
    return min(best, eps0)


def binary_rr_epsilon(
    epsilon_local: float, n_others: int, delta: float, *, n_fakes: int = 0
) -> float:
    """Exact ε(δ) of shuffled binary RR: the victim among ``n_others`` users + fair-coin fakes.

    Args:
        epsilon_local: ε0 of the binary randomized response.
        n_others: number of other honest users whose reports are shuffled with the victim's.
        delta: target δ.
        n_fakes: number of uniformly random fake bits added by honest shufflers.

    Returns:
        The exact ε (≤ ε0) for the worst case over the other users' data.

    Raises:
        BoundNotApplicable: more than _BINARY_MAX_OTHERS (2^28) other users.
    """
    eps0 = check_epsilon(epsilon_local, "epsilon_local")
    return _binary_rr_cached(
        _round(eps0),
        _check_binary_size(check_n(n_others, "n_others", 0)),
        _round(check_delta(delta)),
        check_n(n_fakes, "n_fakes", 0),
    )


def _check_binary_size(n_others: int) -> int:
    if n_others > _BINARY_MAX_OTHERS:
        raise BoundNotApplicable(
            f"binary_rr_exact searches at most {_BINARY_MAX_OTHERS:,} other users, "
            f"got n_others={n_others:,}"
        )
    return n_others


def _sf_half(t: npt.ArrayLike, n: npt.ArrayLike) -> FloatArray:
    """Pr[Bin(n, ½) > t], vectorized, for any real t (scipy's bdtrc is NaN for t ≥ n)."""
    # Imported here: scipy costs ~1 s at start-up and most esa commands never need it.
    from scipy import special

    t_arr = np.floor(np.asarray(t, dtype=np.float64))
    n_arr = np.asarray(n, dtype=np.int64)
    t_arr, n_arr = np.broadcast_arrays(t_arr, n_arr)
    out = np.zeros(t_arr.shape)
    below = t_arr < 0
    out[below] = 1.0
    mid = ~below & (t_arr < n_arr)
    out[mid] = special.bdtrc(t_arr[mid], n_arr[mid], 0.5)
    return out


# --- clone reductions (FMT'21 numerical, FMT'23 stronger clone) ----------------------------


def _clone_weights(
    n_others: int, prob: float, n_fakes: int, fake_prob: float
) -> tuple[npt.NDArray[np.int64], FloatArray, float]:
    """Support, pmf and dropped mass of C = Bin(n_others, prob) + Bin(n_fakes, fake_prob)."""
    off, lc = _binom_sum_logpmf(n_others, prob, n_fakes, fake_prob)
    w = np.exp(lc)
    keep = w > 1e-300
    c = np.arange(off, off + w.size)[keep]
    w = w[keep]
    return c, w, max(0.0, 1.0 - float(w.sum()))


def _clone_hockey(eps: float, eps0: float, c: npt.NDArray[np.int64], w: FloatArray) -> float:
    """Σ_c w_c H_{e^ε}(P_c‖Q_c) for the clone pair (A+Δ, A+1−Δ) given C = c (FMT'21 Thm 3.2)."""
    e0 = math.exp(eps0)
    big_e = math.exp(eps)
    pv = e0 / (e0 + 1.0)  # Pr[victim's bit goes to the x⁰ side] under D0
    qv = 1.0 - pv
    # P_c(a)/Q_c(a) = (pv a + qv (c+1−a)) / (qv a + pv (c+1−a)) increases with a, so the set
    # where P > e^ε Q is a ≥ t with t the first integer above the solution of equality.
    theta = (c + 1.0) * (big_e * e0 - 1.0) / ((e0 - 1.0) * (1.0 + big_e))
    t = np.floor(theta) + 1.0
    sf_1 = _sf_half(t - 2.0, c)  # Pr[A ≥ t−1]
    sf_0 = _sf_half(t - 1.0, c)  # Pr[A ≥ t]
    tail_p = pv * sf_1 + qv * sf_0
    tail_q = qv * sf_1 + pv * sf_0
    h = np.clip(tail_p - big_e * tail_q, 0.0, None)
    return float(np.dot(w, h))


@functools.lru_cache(maxsize=4096)
def _clone_cached(
    eps0: float, n_others: int, delta: float, prob: float, n_fakes: int, fake_prob: float
) -> float:
    c, w, dropped = _clone_weights(n_others, prob, n_fakes, fake_prob)
    return _solve_decreasing(lambda e: _clone_hockey(e, eps0, c, w) + dropped, delta, eps0)


def clone_epsilon(
    epsilon_local: float,
    n_others: int,
    delta: float,
    *,
    clone_probability: float,
    n_fakes: int = 0,
    fake_clone_probability: float = 0.0,
) -> float:
    """ε(δ) of the clone reduction: each other report is a clone of the victim w.p. given.

    Args:
        epsilon_local: ε0 of the victim's randomizer.
        n_others: other honest users.
        delta: target δ.
        clone_probability: probability that one other user's report is a clone.
        n_fakes: fake reports added by honest shufflers.
        fake_clone_probability: probability that one fake is a clone.

    Returns:
        ε (capped at ε0: shuffling is post-processing of the ε0-LDP reports).
    """
    eps0 = check_epsilon(epsilon_local, "epsilon_local")
    if not 0.0 <= clone_probability <= 1.0 or not 0.0 <= fake_clone_probability <= 1.0:
        raise ParameterError(
            f"clone probabilities must lie in [0, 1], got {clone_probability!r}, "
            f"{fake_clone_probability!r}"
        )
    if eps0 > _EPS0_MAX:
        return eps0
    return _clone_cached(
        _round(eps0),
        check_n(n_others, "n_others", 0),
        _round(check_delta(delta)),
        _round(clone_probability),
        check_n(n_fakes, "n_fakes", 0),
        _round(fake_clone_probability),
    )


def fmt21_numerical_epsilon(epsilon_local: float, n_others: int, delta: float) -> float:
    """FMT'21 numerical bound (arXiv 2012.12803 Thm 3.2): clones w.p. e^{−ε0}, any ε0-LDP."""
    eps0 = check_epsilon(epsilon_local, "epsilon_local")
    return clone_epsilon(eps0, n_others, delta, clone_probability=math.exp(-eps0))


def _krr_fake_clone_probability(eps0: float, k: int) -> float:
    """Largest 2α with Uniform[k] = α R(x⁰) + α R(x¹) + (1−2α) rest: α = 1/(k (p+q))."""
    e0 = math.exp(eps0)
    return min(1.0, 2.0 * (e0 + k - 1.0) / (k * (e0 + 1.0)))


def stronger_clone_epsilon(
    epsilon_local: float, n_others: int, delta: float, *, k: int, n_fakes: int = 0
) -> float:
    """FMT'23 stronger clone for k-RR (clones w.p. 2/(e^{ε0}+1)); uniform fakes as clones."""
    eps0 = check_epsilon(epsilon_local, "epsilon_local")
    k = check_n(k, "k", 2)
    return clone_epsilon(
        eps0,
        n_others,
        delta,
        clone_probability=2.0 / (math.exp(eps0) + 1.0) if eps0 < _EPS0_MAX else 0.0,
        n_fakes=n_fakes,
        fake_clone_probability=_krr_fake_clone_probability(min(eps0, _EPS0_MAX), k),
    )


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
    # Imported here: scipy.stats costs ~1 s at start-up and most esa commands never use it.
    from scipy import stats

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
    cdf = stats.binom.cdf(edges - 1, n_others, lam)
    mass = np.diff(cdf)
    mass[0] += float(stats.binom.cdf(lo - 1, n_others, lam))  # lower tail: counted at T(lo)
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


# --- k-RR with every other user holding x⁰: exact for that dataset, for any n ---------------


def _krr_exact_hockey(eps: float, eps0: float, n: int, k: int) -> float:
    """max of both H_{e^ε} directions for D0 = all n users hold x⁰, D1 = victim holds x¹.

    Under D0 the histogram is Multinomial(n; p, q, …, q) and the likelihood ratio is linear:
    P1(h)/P0(h) = 1 + ((e^{ε0}−1) h₁ − (1−e^{−ε0}) h₀)/n, so H(P1‖P0) = E_{P0}[(L − e^ε)₊] and
    H(P0‖P1) = E_{P0}[(1 − e^ε L)₊] are sums over h₁ of partial binomial expectations in h₀.
    """
    # Imported here: scipy costs ~1 s at start-up and most esa commands never need it.
    from scipy import stats

    e0 = math.exp(eps0)
    big_e = math.exp(eps)
    p = e0 / (e0 + k - 1.0)
    q = 1.0 / (e0 + k - 1.0)
    lo, hi = _support(n, q)
    h1 = np.arange(lo, hi + 1, dtype=np.float64)
    w1 = stats.binom.pmf(h1, n, q)
    m = n - h1  # h₀ | h₁ ~ Bin(m, p0)
    p0 = min(1.0, p / (1.0 - q))
    c = (1.0 - 1.0 / e0) / n

    def partial(t: FloatArray) -> tuple[FloatArray, FloatArray]:
        """Pr[h₀ ≤ t] and E[h₀ 1{h₀ ≤ t}] given h₁."""
        cdf = stats.binom.cdf(t, m, p0)
        # E[X 1{X ≤ t}] = m p0 Pr[Bin(m−1, p0) ≤ t−1]; zero when m = 0.
        mean_part = m * p0 * stats.binom.cdf(t - 1.0, np.maximum(m - 1.0, 0.0), p0)
        return cdf, mean_part

    a = 1.0 - big_e + (e0 - 1.0) * h1 / n  # (L − E) = a − c h₀
    t1 = np.floor(a / c)
    f1, g1 = partial(t1)
    h_fwd = np.clip(a * f1 - c * g1, 0.0, None)
    b = big_e - 1.0 + big_e * (e0 - 1.0) * h1 / n  # (1 − E L) = E c h₀ − b
    t2 = np.floor(b / (big_e * c))
    f2, g2 = partial(t2)
    h_bwd = np.clip(big_e * c * (m * p0 - g2) - b * (1.0 - f2), 0.0, None)
    return max(float(np.dot(w1, h_fwd)), float(np.dot(w1, h_bwd)))


def _krr_exact_z_hockey(eps: float, eps0: float, n: int, k: int) -> float:
    """Both H_{e^ε} directions when every other user holds z ∉ {x⁰, x¹} (k ≥ 3).

    With M the Multinomial(n; R(z)) law, P_b(h) = M(h) (1 + ((e^{ε0}−1) h_b − (1−e^{−ε0}) h_z)/n),
    linear in h_z given (h₀, h₁), so each direction is a sum over (h₀, h₁) of partial binomial
    expectations in h_z.
    """
    # Imported here: scipy costs ~1 s at start-up and most esa commands never need it.
    from scipy import stats

    e0 = math.exp(eps0)
    big_e = math.exp(eps)
    p = e0 / (e0 + k - 1.0)
    q = 1.0 / (e0 + k - 1.0)
    lo, hi = _support(n, q)
    h = np.arange(lo, hi + 1, dtype=np.float64)
    h0, h1 = np.meshgrid(h, h, indexing="ij")
    # (h₀, h₁) ~ Multinomial marginal: h₀ ~ Bin(n, q), h₁ | h₀ ~ Bin(n − h₀, q/(1−q)).
    w = stats.binom.pmf(h0, n, q) * stats.binom.pmf(h1, n - h0, q / (1.0 - q))
    m = np.maximum(n - h0 - h1, 0.0)
    pz = min(1.0, p / (1.0 - 2.0 * q))
    cz = (1.0 - 1.0 / e0) / n

    def positive_part(a: FloatArray, slope: float) -> FloatArray:
        """E[(a + slope·h_z)₊] for h_z ~ Bin(m, pz), slope > 0: region h_z > −a/slope."""
        t = np.floor(-a / slope)
        cdf = stats.binom.cdf(t, m, pz)
        part = m * pz * stats.binom.cdf(t - 1.0, np.maximum(m - 1.0, 0.0), pz)
        return np.asarray(np.clip(a * (1.0 - cdf) + slope * (m * pz - part), 0.0, None), float)

    # ℓ1 − E ℓ0 = (1 − E) + (e0−1)(h₁ − E h₀)/n + (E − 1) cz h_z
    a_fwd = (1.0 - big_e) + (e0 - 1.0) * (h1 - big_e * h0) / n
    h_fwd = positive_part(a_fwd, (big_e - 1.0) * cz) if big_e > 1.0 else np.clip(a_fwd, 0, None)
    a_bwd = (1.0 - big_e) + (e0 - 1.0) * (h0 - big_e * h1) / n
    h_bwd = positive_part(a_bwd, (big_e - 1.0) * cz) if big_e > 1.0 else np.clip(a_bwd, 0, None)
    return max(float(np.sum(w * h_fwd)), float(np.sum(w * h_bwd)))


@functools.lru_cache(maxsize=4096)
def _krr_exact_cached(eps0: float, n: int, delta: float, k: int) -> float:
    x0 = _solve_decreasing(lambda e: _krr_exact_hockey(e, eps0, n, k), delta, eps0)
    if k == 2:
        return x0
    z = _solve_decreasing(lambda e: _krr_exact_z_hockey(e, eps0, n, k), delta, eps0)
    return max(x0, z)


def krr_exact_epsilon(epsilon_local: float, n_others: int, delta: float, *, k: int) -> float:
    """Exact ε(δ) of shuffled k-RR for the worst all-equal dataset of the other users.

    Two datasets are computed exactly: every other user holds the victim's D0 value x⁰, and
    (k ≥ 3) every other user holds a third value z. The larger ε is a valid *lower* bound on
    the true ε for any k (each is one neighbouring pair). At small n the exhaustive search of
    ``tests/test_tight.py`` over every composition of the others' data finds no worse
    dataset, so this is the "exact where computable" reference the proven upper bounds are
    compared with. The z dataset is a 2-D sum over (h₀, h₁): seconds at n = 10^4, about a
    minute at n = 10^5.
    """
    eps0 = check_epsilon(epsilon_local, "epsilon_local")
    if eps0 > _EPS0_MAX:
        return eps0
    return _krr_exact_cached(
        _round(eps0),
        check_n(n_others, "n_others", 0) + 1,
        _round(check_delta(delta)),
        check_n(k, "k", 2),
    )


# --- one entry point for the audit --------------------------------------------------------


def shuffled_epsilon(
    epsilon_local: float,
    n_others: int,
    delta: float,
    *,
    family: str,
    k: int = 2,
    n_fakes: int = 0,
) -> tuple[float, str]:
    """Tightest ε(δ) we can prove for one user among ``n_others`` honest users + fakes.

    Args:
        epsilon_local: ε0 of each user's randomizer.
        n_others: honest users (other than the victim) whose data the adversary does not know.
        delta: target δ.
        family: ``"krr"`` (fakes are counted exactly) or anything else (generic bound; fakes
            are not counted, which is conservative).
        k: domain of the k-RR randomizer.
        n_fakes: uniform fake reports unknown to the adversary.

    Returns:
        (ε, name of the bound that gives it). ``"local_dp"`` when shuffling proves nothing better
        than ε0.
    """
    eps0 = check_epsilon(epsilon_local, "epsilon_local")
    candidates: list[tuple[float, str]] = [(eps0, "local_dp")]
    if family == "krr":
        if k == 2:
            candidates.append(
                (binary_rr_epsilon(eps0, n_others, delta, n_fakes=n_fakes), "binary_rr_exact")
            )
        else:
            candidates.append(
                (
                    krr_blanket_epsilon(eps0, n_others, delta, k=k, n_fakes=n_fakes),
                    "krr_blanket_numerical",
                )
            )
            candidates.append(
                (
                    stronger_clone_epsilon(eps0, n_others, delta, k=k, n_fakes=n_fakes),
                    "fmt23_stronger_clone",
                )
            )
    elif n_others > 0:
        candidates.append((fmt21_numerical_epsilon(eps0, n_others, delta), "fmt21_numerical"))
    best = min(candidates, key=lambda c: c[0])
    return best


# --- registration into the survey's bound registry -----------------------------------------


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


def _clone_divergence(
    eps: float, eps_l: float, n_others: int, k: int | None, n_fakes: int = 0
) -> float:
    """H_{e^ε} of the clone pair at ε_l: stronger clone for k-RR (k given), else FMT'21."""
    if eps_l > _EPS0_MAX:
        return 1.0
    if k is None:
        c, w, dropped = _clone_weights(n_others, math.exp(-eps_l), 0, 0.0)
    else:
        c, w, dropped = _clone_weights(
            n_others,
            2.0 / (math.exp(eps_l) + 1.0),
            n_fakes,
            _krr_fake_clone_probability(eps_l, k),
        )
    return _clone_hockey(eps, eps_l, c, w) + dropped


def _bin_forward(eps_l: float, n: int, delta: float, k: int) -> float:
    if k != 2:
        raise BoundNotApplicable(f"binary_rr_exact covers binary randomized response, got k={k}")
    return binary_rr_epsilon(eps_l, n - 1, delta)


def _bin_inverse(eps_c: float, n: int, delta: float, k: int) -> float:
    if k != 2:
        raise BoundNotApplicable(f"binary_rr_exact covers binary randomized response, got k={k}")
    _check_binary_size(n - 1)
    # The seeded search is a lower bound on the full maximum, so its inverse is an upper
    # bracket on the answer, found with cheap evaluations; usually the full maximum agrees
    # there (it sits at a ≤ 2) and one full evaluation confirms it.
    seeded = _invert(lambda e: _binary_rr_seeded(_round(e), n - 1, _round(delta), 0), eps_c)

    def full(e: float) -> float:
        return binary_rr_epsilon(e, n - 1, delta)

    if full(seeded) <= eps_c:
        return seeded
    # The full maximum is a little higher: step down from the bracket until it holds (a
    # bracket near the answer keeps every evaluation cheap; far below, at tiny ε_l, the
    # laws are wide and the search over a long), then bisect.
    step = 1e-6 * seeded
    lo = seeded
    while lo > eps_c:
        lo = max(eps_c, seeded - step)
        if full(lo) <= eps_c:
            break
        step *= 4
    return _invert(full, eps_c, hi=seeded, lo=lo)


def _sc_forward(eps_l: float, n: int, delta: float, k: int) -> float:
    return stronger_clone_epsilon(eps_l, n - 1, delta, k=k)


@functools.lru_cache(maxsize=1024)
def _sc_inverse(eps_c: float, n: int, delta: float, k: int) -> float:
    return _invert_on_divergence(
        lambda e: _clone_divergence(eps_c, e, n - 1, k),
        lambda e: stronger_clone_epsilon(e, n - 1, delta, k=k),
        eps_c,
        delta,
    )


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


def _fmt_forward(eps_l: float, n: int, delta: float, k: int) -> float:
    return fmt21_numerical_epsilon(eps_l, n - 1, delta)


def _fmt_inverse(eps_c: float, n: int, delta: float, k: int) -> float:
    return _invert_on_divergence(
        lambda e: _clone_divergence(eps_c, e, n - 1, None),
        lambda e: fmt21_numerical_epsilon(e, n - 1, delta),
        eps_c,
        delta,
    )


TIGHT_BOUND_NAMES = (
    "binary_rr_exact",
    "krr_blanket_numerical",
    "fmt23_stronger_clone",
    "fmt21_numerical",
)

register_bound(
    AmplificationBound(
        name="binary_rr_exact",
        families=frozenset({"krr"}),
        citation="exact hockey-stick divergence of the shuffled count (worst case over the "
        "others' data); cf. Koskela, Heikkilä, Honkela, arXiv 2106.00477",
        forward=_bin_forward,
        inverse=_bin_inverse,
    )
)
register_bound(
    AmplificationBound(
        name="fmt23_stronger_clone",
        families=frozenset({"krr"}),
        citation="Feldman, McMillan, Talwar, SODA'23 (arXiv 2208.04591) Thm 3.2 + erratum "
        "(k-RR-type randomizers): clones w.p. 2/(e^ε0+1)",
        forward=_sc_forward,
        inverse=_sc_inverse,
    )
)
register_bound(
    AmplificationBound(
        name="fmt21_numerical",
        families=frozenset({"generic"}),
        citation="Feldman, McMillan, Talwar, FOCS'21 (arXiv 2012.12803) Thm 3.2, numerical "
        "bound of Sec. 5: clones w.p. e^-ε0",
        forward=_fmt_forward,
        inverse=_fmt_inverse,
    )
)

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
