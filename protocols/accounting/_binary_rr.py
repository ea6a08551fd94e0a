"""Exact ε(δ) of shuffled binary randomized response: the ``binary_rr_exact`` accountant
(family ``krr``, k = 2), registered in :data:`~protocols.BOUNDS` on import.

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
1.5 s at n = 10^6, 8 s at 10^7, 50 s at 10^8 (CPU time; ``docs/benchmarks.md``).
``tests/test_tight.py`` checks it against the maximum over every a.

Past 2^28 other users the answer is a certified upper bound instead, at most 10^-3 relative
above the exact value (:func:`_binary_rr_certified`): the same ranges, each bounded more
tightly (the range's users each report a fair coin with probability 2q whatever their bit,
so about 2q of them stay in the bound as coins instead of being dropped), and a range is
accepted once its bound is within 10^-3 of the best exact ε(a) found, which is a lower bound
on the exact value. Every a is still covered by a proven bound; only the last 10^-3 is not
searched for. A few hundred range bounds of O(√n) points each: about 4–21 s of CPU at
10^9 users and 15–75 s at 10^10 (``docs/benchmarks.md``); past 2^34 it steps aside.
``tests/test_binary_rr_certified.py`` checks it against the exact search below 2^28.

Fakes: every one of an honest shuffler's uniform fakes is a fair coin added to Y.

Every evaluation is cached on rounded arguments and vectorized over the support. scipy is
imported inside the functions that use it: ``import protocols`` must not pay its start-up.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import numpy as np

from .._base import check_delta, check_epsilon, check_n
from .._distributions import fftconvolve
from .._errors import BoundNotApplicable
from ._amplification import AmplificationBound, register_bound
from ._laws import (
    FloatArray,
    _binom_logpmf,
    _binom_sum_logpmf,
    _invert,
    _log_convolve,
    _round,
    _support,
    binomial_window,
)

__all__ = [
    "binary_rr_epsilon",
]

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
#: (≈ √n ranges per level, kernels of ≈ √n points). Past it the certified search answers
#: (:func:`_binary_rr_certified`): an upper bound within _BINARY_TOLERANCE of the exact value.
_BINARY_MAX_OTHERS = 1 << 28
#: Relative gap the certified search allows between its answer (a proven upper bound) and
#: the best exact ε(a) it evaluated (a lower bound on the exact value): its ranges are
#: about n_others/500 wide, so a few hundred range bounds of O(√n) points each answer
#: at 10^10 users (docs/benchmarks.md).
_BINARY_TOLERANCE = 1e-3
#: Below this ε a range bound is accepted whatever the best value (ε = 0 at every a when δ
#: exceeds the pair's total variation: no relative gap to close).
_BINARY_FLOOR = 1e-12
#: Share of δ a range bound of the certified search spends on "too few of the range's users
#: reported a fair coin" (see :func:`_binary_rr_range_bound`): ε moves by ~10^-8 relative.
_BINARY_SPARE = 1e-6
#: Most pieces one range of the certified search is split into at once.
_BINARY_PIECES = 256
#: Most other users the certified search takes (above the CLI's 10^10): each range bound
#: convolves laws of O(√n) points (~0.3 s of CPU at 10^10).
_BINARY_MAX_CERTIFIED = 1 << 34


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
    conv = np.convolve(a, b) if min(a.size, b.size) <= 512 else fftconvolve(a, b)
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


def _threshold_ratios(s_prev: FloatArray, s_here: FloatArray, r: float, delta: float) -> FloatArray:
    """(A − δ)/B with A = (1−r)·s_prev + r·s_here, B = r·s_prev + (1−r)·s_here; 0 where
    A ≤ δ (such a set is no constraint at any ε ≥ 0). B → 0 gives +inf (a loss beyond any
    ε0: the callers cap at ε0)."""
    big_a = (1.0 - r) * s_prev + r * s_here
    big_b = r * s_prev + (1.0 - r) * s_here
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        return np.where(big_a > delta, (big_a - delta) / big_b, 0.0)


def _threshold_values(s_prev: FloatArray, s_here: FloatArray, r: float, delta: float) -> FloatArray:
    """log of :func:`_threshold_ratios`: −inf where A ≤ δ."""
    with np.errstate(divide="ignore"):
        return np.log(_threshold_ratios(s_prev, s_here, r, delta))


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


def _coin_floor(users: int, lam: float, budget: float) -> tuple[int, float]:
    """(b, m): at least b of ``users`` users each reporting a fair coin with probability
    ``lam`` do so, except with probability m ≤ budget (0 when b = 0).

    m is the Chernoff bound P[Bin(users, λ) ≤ b − 1] ≤ exp(−users·KL((b − 1)/users ‖ λ)),
    valid for b − 1 ≤ λ·users; b is the largest it allows (bisection on the integer).
    """
    need = -math.log(budget)

    def exponent(k: int) -> float:  # users · KL(k/users ‖ λ), for 0 ≤ k ≤ λ·users
        x = k / users
        head = x * math.log(x / lam) if k else 0.0
        return users * (head + (1.0 - x) * (math.log1p(-x) - math.log1p(-lam)))

    lo, hi = 0, math.floor(lam * users)
    if users == 0 or exponent(0) < need:
        return 0, 0.0
    while lo < hi:  # the largest k in [0, ⌊λ·users⌋] with exponent(k) ≥ need
        mid = (lo + hi + 1) // 2
        if exponent(mid) >= need:
            lo = mid
        else:
            hi = mid - 1
    return lo + 1, math.exp(-exponent(lo))


def _binary_rr_range_bound(
    eps0: float, n_others: int, lo: int, hi: int, n_fakes: int, delta: float
) -> float:
    """An upper bound on the exact ε(δ) of every a in [lo, hi], exact at lo = hi.

    The w = hi − lo users beyond lo holding 1 and n_others − hi holding 0 each report, whatever
    their bit, a fair coin with probability λ = 2q and their bit otherwise (Bern(p) and
    Bern(q) are these mixtures). Given which of them reported a coin and the others' bits (a
    known shift of Y), the pair is the one with lo ones, n_others − hi zeros and B more fair
    coins, B ~ Bin(w, λ) whatever a is; the hockey-stick divergence is jointly convex, so
    that of the pair for a is at most E_B[h(B)], where h(b) (the pair with b coins) does not
    increase with b (one more coin is post-processing) and is at most 1. With b₀ and
    m = P[B < b₀] from :func:`_coin_floor`, E_B[h(B)] ≤ m + h(b₀): the pair with b₀ extra
    coins at δ − m bounds the range in both directions. It removes about (1 − λ)·w users
    instead of w (the plain bound, b₀ = 0, of :func:`_binary_rr_cached`).
    """
    q = 1.0 / (math.exp(eps0) + 1.0)
    coins, miss = _coin_floor(hi - lo, 2.0 * q, _BINARY_SPARE * delta)
    return _binary_rr_one_fft(eps0, lo, n_others - hi, n_fakes + coins, delta - miss)


def _binary_rr_one_fft(eps0: float, ones: int, zeros: int, n_fakes: int, delta: float) -> float:
    """:func:`_binary_rr_full` (the same law, the same threshold sets, the same maximum),
    cheaper on laws of ~10^6 points (n ≈ 10^10), about 2.5 times: the binomial laws come from
    :func:`_binomial_window_by_ratios` (the ε agrees with scipy's pmfs to ~10^-12 relative at
    10^10, tests/test_binary_rr_certified.py), they are convolved in one real FFT (four
    transforms instead of six), and the threshold sets are compared by (A_u − δ)/B_u, one
    logarithm in all instead of one per set."""
    # Imported here: scipy costs ~1 s at start-up and most esa commands never need it.
    from scipy import fft

    q = 1.0 / (math.exp(eps0) + 1.0)
    p = 1.0 - q
    laws = [_binomial_window_by_ratios(zeros, q)[1]]
    if n_fakes:
        laws.append(_binomial_window_by_ratios(n_fakes, 0.5)[1])
    if ones:
        laws.append(_binomial_window_by_ratios(ones, p)[1])
    size = sum(law.size for law in laws) - len(laws) + 1
    if min(law.size for law in laws) <= 512:  # a short law: direct convolutions are exact
        return _binary_rr_full(eps0, ones, zeros, n_fakes, delta)
    n_fft = fft.next_fast_len(size, real=True)
    spectrum = fft.rfft(laws[0], n_fft)
    for law in laws[1:]:
        spectrum *= fft.rfft(law, n_fft)
    w = np.clip(fft.irfft(spectrum, n_fft)[:size], 0.0, None)  # FFT round-off: −1e−18
    suf = np.cumsum(w[::-1])[::-1]  # P[W ≥ k]; summed from the small end of the tail
    pre = np.cumsum(w)  # P[W ≤ k]
    best = max(
        _threshold_ratio(suf, np.append(suf[1:], 0.0), q, delta),
        _threshold_ratio(np.insert(pre[:-1], 0, 0.0), pre, p, delta),
    )
    return math.log(best) if best > 1.0 else 0.0


def _threshold_ratio(s_prev: FloatArray, s_here: FloatArray, r: float, delta: float) -> float:
    """max over the sets of :func:`_threshold_ratios`; 0 if no set has A > δ."""
    return float(np.max(_threshold_ratios(s_prev, s_here, r, delta)))


@functools.lru_cache(maxsize=256)
def _binary_rr_certified(
    eps0: float, n_others: int, delta: float, n_fakes: int, tol: float
) -> tuple[float, float]:
    """(U, L): a proven upper bound U on max over a of the exact ε(δ) (capped at ε0), and
    the best exact ε(a) evaluated, L ≤ that maximum, with U ≤ max(L·(1 + tol), floor).

    The branch and bound of :func:`_binary_rr_cached` stopped early: [first, n_others // 2]
    is covered by ranges, each bounded by :func:`_binary_rr_range_bound`; a range whose
    bound is at most L·(1 + tol) (or _BINARY_FLOOR) is accepted and its bound enters U, any
    other is split (points, ranges of one a, are exact and raise L). L only grows, so every
    accepted bound is within the final L·(1 + tol). A range bound exceeds its range's values
    by about (1 − λ)·w/n_others relative for w users in it (the others' count keeps its
    variance whatever a is: ε(a) moves by 2·10^-5 to 2·10^-4 relative over all a at 10^9), so a
    range is split at once into the pieces its excess predicts will be accepted (at most
    _BINARY_PIECES); any covering is sound. With tol = 0 it is an exact search (slow: use
    :func:`_binary_rr_cached`).
    """
    half = n_others // 2
    first = min(_BINARY_SEED, half) + 1
    lower = _binary_rr_seeded(eps0, n_others, delta, n_fakes)
    upper = lower
    ranges = [(first, half)]
    while ranges:
        lo, hi = ranges.pop()
        if lo > hi:  # n_others < 10: the seeded a cover everything
            continue
        bound = _binary_rr_range_bound(eps0, n_others, lo, hi, n_fakes, delta)
        if lo == hi:
            lower = max(lower, bound)
        target = max(lower * (1.0 + tol), _BINARY_FLOOR)
        if bound <= target:
            upper = max(upper, bound)
            continue
        # Half the tolerance per piece: the excess is about linear in the width.
        excess = bound / lower - 1.0 if lower > 0.0 and tol > 0.0 else math.inf
        pieces = min(hi - lo + 1, _BINARY_PIECES, max(2, math.ceil(2.0 * excess / tol)))
        edges = [lo + (hi - lo + 1) * i // pieces for i in range(pieces + 1)]
        # Pushed high to low: the lowest piece is bounded first (maxima sit low).
        ranges += [(edges[i], edges[i + 1] - 1) for i in reversed(range(pieces))]
    return min(upper, eps0), min(lower, eps0)


def binary_rr_epsilon(
    epsilon_local: float, n_others: int, delta: float, *, n_fakes: int = 0
) -> float:
    """Exact ε(δ) of shuffled binary RR: the victim among ``n_others`` users + fair-coin fakes.

    Up to 2^28 other users the value is exact (the maximum over the others' data). Past
    that it is a certified upper bound on it, at most 10^-3 relative above it: a branch and
    bound that covers every dataset with a proven bound but stops refining once every bound
    is within 10^-3 of the best exact value it evaluated (module docstring).
    ``BOUNDS["binary_rr_exact"].method_at(n_others + 1)`` says which of the two it is.

    Args:
        epsilon_local: ε0 of the binary randomized response.
        n_others: number of other honest users whose reports are shuffled with the victim's.
        delta: target δ.
        n_fakes: number of uniformly random fake bits added by honest shufflers.

    Returns:
        The exact ε (≤ ε0) for the worst case over the other users' data, up to 2^28 other
        users; past that, a proven upper bound on it at most 1 + 10^-3 times it.

    Raises:
        BoundNotApplicable: more than 2^34 other users.
    """
    eps0 = check_epsilon(epsilon_local, "epsilon_local")
    args = (
        _round(eps0),
        _check_binary_size(check_n(n_others, "n_others", 0)),
        _round(check_delta(delta)),
        check_n(n_fakes, "n_fakes", 0),
    )
    if args[1] <= _BINARY_MAX_OTHERS:
        return _binary_rr_cached(*args)
    return _binary_rr_certified(*args, _BINARY_TOLERANCE)[0]


def _check_binary_size(n_others: int) -> int:
    if n_others > _BINARY_MAX_CERTIFIED:
        raise BoundNotApplicable(
            f"binary_rr_exact searches at most {_BINARY_MAX_CERTIFIED:,} other users, "
            f"got n_others={n_others:,}"
        )
    return n_others


def _bin_forward(eps_l: float, n: int, delta: float, k: int) -> float:
    if k != 2:
        raise BoundNotApplicable(f"binary_rr_exact covers binary randomized response, got k={k}")
    return binary_rr_epsilon(eps_l, n - 1, delta)


def _bin_inverse(eps_c: float, n: int, delta: float, k: int) -> float:
    if k != 2:
        raise BoundNotApplicable(f"binary_rr_exact covers binary randomized response, got k={k}")
    if _check_binary_size(n - 1) > _BINARY_MAX_OTHERS:
        return _bin_inverse_certified(eps_c, n - 1, delta)
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


def _bin_inverse_certified(eps_c: float, n_others: int, delta: float) -> float:
    """Largest ε_l found whose certified bound is at most ε_c, past 2^28 other users.

    The seeded search (a ≤ 4, a few full laws) is inverted at a target, and one certified
    search checks the ε_l found; the ratio of the two is smooth in ε_l (the maximum's place
    moves slowly, and the certified bound is within the tolerance of it), so a target
    lowered by the ratio seen, first with a quarter of the tolerance to spare and then with
    all of it, is met after one or two checks. The answer is always a checked ε_l (the
    returned ε_l is proven); it is within about the tolerance of the largest one.
    """
    rounded = _round(delta)

    def seeded(e: float) -> float:
        return _binary_rr_seeded(_round(e), n_others, rounded, 0)

    def certified(e: float) -> float:
        return min(e, _binary_rr_certified(_round(e), n_others, rounded, 0, _BINARY_TOLERANCE)[0])

    target = eps_c
    for spare in (0.25, 1.0, 2.0, 4.0):
        eps_l = _invert(seeded, target)
        upper = certified(eps_l)
        if upper <= eps_c:
            return eps_l
        target *= eps_c / upper / (1.0 + spare * _BINARY_TOLERANCE)
    raise BoundNotApplicable(
        f"binary_rr_exact found no ε_l meeting ε_c={eps_c:g} with its certified search at "
        f"n_others={n_others:,}"
    )


register_bound(
    AmplificationBound(
        name="binary_rr_exact",
        families=frozenset({"krr"}),
        citation="exact hockey-stick divergence of the shuffled count (worst case over the "
        "others' data); past 2^28 other users a certified upper bound within 10^-3 above it; "
        "cf. Koskela, Heikkilä, Honkela, arXiv 2106.00477",
        forward=_bin_forward,
        inverse=_bin_inverse,
        exact_up_to=_BINARY_MAX_OTHERS + 1,  # the victim and 2^28 others
        certified_tolerance=_BINARY_TOLERANCE,
    )
)
