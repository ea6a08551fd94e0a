"""Local-DP mean estimation on [−1, 1] (seed 003 and the papers it cites).

Every mechanism is a frozen, slotted parameter object with ``randomize(values, *, rng)``
(values in [−1, 1] → one float report per user, vectorized), ``estimate(reports)`` (the
sample mean of the reports, unbiased for the true mean because every report is an unbiased
estimate of its input), ``variance(values)`` (exact per-user variance of a report) and
``mean_variance(values)`` = Σ_i Var_i / n². Continuous mechanisms give ``log_density(y, t)``
and ``support(t)``; two-point ones (Duchi, Harmony) give ``output_distribution(t)``; the
audit in :mod:`protocols.ldp._audit` uses them.

``DCT`` — NOT ε-LDP. Seed 003 ("differential classified transformation") lost its formulas;
reconstructed from its text (§3, Algorithm 3): around the input v it takes the window
[v − d, v + d], m = d/2, labels the two middle quarters [v − m, v + m] class 1 and the two
outer quarters class 0, picks the class by a fair coin ("since the value sits at the centre
of the window, the class is drawn at random"), perturbs that bit with randomized response,
and outputs a uniform point of the chosen class's segments. The class bit is independent of
v, so the report is v + d·U with U uniform on [−1, 1]: its support [v − d, v + d] moves with
the input, and for v ≠ v' there are outputs possible under v and impossible under v' — the
likelihood ratio is unbounded, so DCT is not ε-LDP for any finite ε whatever d and the
flip probability are. ``esa audit-ldp --mechanism dct`` shows ``holds: false`` with
ε_measured = inf. It is kept only so the claim can be audited; the window half-width
d = (e^ε + 1)/(α(e^ε − 1)) with α = 5 is our reconstruction (the seed's formula is lost; the
verdict does not depend on it).
"""

from __future__ import annotations

import abc
import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import numpy.typing as npt

from .._base import check_epsilon
from .._errors import ParameterError
from .._random import RNGLike, as_generator

__all__ = [
    "DCT",
    "MEAN_MECHANISMS",
    "Duchi",
    "Harmony",
    "LaplaceMean",
    "MeanMechanism",
    "PiecewiseMechanism",
    "check_unit_values",
]

FloatArray = npt.NDArray[np.float64]


def _check_eps(epsilon: float) -> float:
    return check_epsilon(epsilon)


def check_unit_values(values: npt.ArrayLike) -> FloatArray:
    """Return ``values`` as a 1-D float64 array, checking every value lies in [−1, 1].

    Raises:
        ParameterError: not 1-D, not finite, or a value outside [−1, 1] (quoted).
    """
    x = np.asarray(values, dtype=np.float64)
    if x.ndim != 1:
        raise ParameterError(f"values must be a 1-D array, got shape {x.shape}")
    bad = np.flatnonzero(~(np.abs(x) <= 1.0))
    if bad.size:
        raise ParameterError(
            f"values must lie in [-1, 1], got {x[bad[0]].item()!r} at index {int(bad[0])}"
        )
    return x


class MeanMechanism(abc.ABC):
    """Interface of the mean estimators; subclasses are frozen slotted dataclasses."""

    __slots__ = ()
    name: ClassVar[str]
    #: does the mechanism satisfy ε-LDP (False only for DCT, see the module docstring)
    is_ldp: ClassVar[bool] = True
    epsilon: float

    @abc.abstractmethod
    def randomize(self, values: npt.ArrayLike, *, rng: RNGLike) -> FloatArray:
        """One unbiased report per user.

        Args:
            values: one value in [−1, 1] per user.
            rng: the randomizer's generator, or a seed (:data:`~protocols.RNGLike`).

        Returns:
            One report per user, in [−bound, bound].
        """

    @abc.abstractmethod
    def variance(self, values: npt.ArrayLike) -> FloatArray:
        """Exact variance of each user's report given its value.

        Args:
            values: the users' values in [−1, 1].

        Returns:
            The variance of each user's report.
        """

    def estimate(self, reports: npt.ArrayLike) -> float:
        """Unbiased estimate of the mean of the inputs: the mean of the reports.

        Args:
            reports: the users' reports (:meth:`randomize`'s).

        Returns:
            The estimated mean.

        Raises:
            ParameterError: no reports.
        """
        r = np.asarray(reports, dtype=np.float64)
        if r.size == 0:
            raise ParameterError("cannot estimate a mean from zero reports")
        return float(r.mean())

    def mean_variance(self, values: npt.ArrayLike) -> float:
        """Var of :meth:`estimate` for the inputs ``values``: Σ Var_i / n².

        Args:
            values: the users' values in [−1, 1].

        Returns:
            The variance of the estimated mean.
        """
        v = self.variance(values)
        return float(v.sum() / v.size**2)

    @property
    def bound(self) -> float:
        """Largest ``|report|`` (inf for Laplace)."""
        return math.inf


class _Continuous(MeanMechanism):
    __slots__ = ()

    @abc.abstractmethod
    def log_density(self, y: npt.ArrayLike, t: float) -> FloatArray:
        """log of the report density at the points ``y`` given input t (−inf off support).

        Args:
            y: the report values at which to evaluate it.
            t: the input in [−1, 1].

        Returns:
            The log-density at each point.
        """

    @abc.abstractmethod
    def support(self, t: float) -> tuple[float, float]:
        """Closed interval holding the report's support given input t.

        Args:
            t: the input in [−1, 1].

        Returns:
            ``(lo, hi)``.
        """


#: numpy's ``Generator.random()`` returns m·2^-53 with m uniform on [0, 2^53), so the event
#: u < x has probability ⌈x·2^53⌉/2^53 exactly: a branch probability below 2^-53 (or within
#: 2^-53 of 1) cannot be sampled as written, and the rounding up of x is what is realised
_U53 = 2.0**53


def _realised(x: npt.ArrayLike) -> FloatArray:
    """P[u < x] for u = ``Generator.random()``: ⌈x·2^53⌉/2^53 (exact, x in [0, 1])."""
    return np.asarray(np.ceil(np.asarray(x, dtype=np.float64) * _U53) / _U53)


def _rare_branch(f: float) -> float:
    """A multiple of 2^-53 in [f, ½], for the probability f ∈ (0, ½) of a mechanism's rare
    branch (1/(e^ε+1) and alike). ``u < r`` then happens with probability exactly r, and
    ``u < 1 − r`` (1 − r is exact) with 1 − r: the ratio (1 − r)/r ≤ (1 − f)/f, so rounding
    can only make the randomizer more private, and r ≥ 2^-53 keeps both branches possible
    at every ε (as 1/(e^ε+1) in double precision, the rare branch would be 0 above ε ≈ 36.7
    and the report deterministic). f comes with a few ulps of rounding error, hence the
    2^-50 relative margin before rounding up.
    """
    return min(0.5, math.ceil(f * (1.0 + 2.0**-50) * _U53) / _U53)


class _TwoPoint(MeanMechanism):
    """Reports ±B; P[+B | t] = ½ + t/(2B), so E = t and Var = B² − t².

    With f = 1/(e^ε+1): ½ + t/(2B) = f + ((1+t)/2)(1 − 2f). Sampled with f replaced by
    r = :func:`_rare_branch`(f) ≥ f, a multiple of 2^-53, so every realised P[+B | t] lies in
    [r, 1 − r] and the realised law is ε-LDP exactly: (1 − r)/r ≤ (1 − f)/f = e^ε. The mean
    moves by a factor (1 − 2r)/(1 − 2f) ≥ 1 − 2^-51: unbiased and Var = B² − t² up to that.
    """

    __slots__ = ()

    @property
    def bound(self) -> float:
        e = math.exp(self.epsilon)
        return (e + 1) / (e - 1)

    @property
    def flip_probability(self) -> float:
        """r: the realised probability of the report's sign disagreeing with ±1 inputs."""
        return _rare_branch(1.0 / (math.exp(self.epsilon) + 1))

    def prob_plus(self, values: npt.ArrayLike) -> FloatArray:
        """P[report = +B | t] = r + ((1+t)/2)(1 − 2r) ≈ ½ + t(e^ε−1)/(2(e^ε+1)), in [r, 1−r].

        Rounding in the product and the sum is monotone, so the result stays in [r, 1 − r]
        (both exact) for every t in [−1, 1].
        """
        t = np.asarray(values, dtype=np.float64)
        r = self.flip_probability
        return np.asarray(r + (1 + t) / 2 * (1 - 2 * r))

    def variance(self, values: npt.ArrayLike) -> FloatArray:
        t = check_unit_values(values)
        return np.asarray(self.bound**2 - t**2)

    def output_distribution(self, values: npt.ArrayLike) -> FloatArray:
        """(len(values), 2) matrix of P[−B | t], P[+B | t], as :meth:`randomize` samples."""
        p = _realised(self.prob_plus(check_unit_values(values)))
        return np.stack([1 - p, p], axis=1)


@dataclass(frozen=True, slots=True)
class Duchi(_TwoPoint):
    """Duchi, Jordan, Wainwright (JASA'18) one-dimensional mechanism (seed 003 Alg. 1).

    Report +B w.p. ½ + t(e^ε−1)/(2(e^ε+1)), else −B, B = (e^ε+1)/(e^ε−1). Unbiased;
    Var = B² − t²; ε-LDP (ratio of the two probabilities at t = ±1 is e^ε; the realised,
    2^-53-granular probabilities keep it ≤ e^ε at every ε, see :class:`_TwoPoint`).
    """

    epsilon: float
    name: ClassVar[str] = "duchi"

    def __post_init__(self) -> None:
        _check_eps(self.epsilon)

    def randomize(self, values: npt.ArrayLike, *, rng: RNGLike) -> FloatArray:
        rng = as_generator(rng)
        t = check_unit_values(values)
        plus = rng.random(t.shape[0]) < self.prob_plus(t)
        return np.where(plus, self.bound, -self.bound)


@dataclass(frozen=True, slots=True)
class Harmony(_TwoPoint):
    """Harmony (Nguyên, Xiao, Yang, Hui, Shin, Xie, arXiv 1606.05053, Alg. 1), one dimension.

    Discretize t to b = +1 w.p. (1+t)/2 else −1, then binary randomized response (keep b
    w.p. e^ε/(e^ε+1)), report b'·B with B = (e^ε+1)/(e^ε−1). Its report law equals Duchi's
    (P[+B] = ½ + t/(2B)), so Var = B² − t² and it is ε-LDP; for k attributes Harmony samples
    one attribute per user, which :class:`protocols.SampledAttributes` does for any mechanism.
    """

    epsilon: float
    name: ClassVar[str] = "harmony"

    def __post_init__(self) -> None:
        _check_eps(self.epsilon)

    def randomize(self, values: npt.ArrayLike, *, rng: RNGLike) -> FloatArray:
        rng = as_generator(rng)
        t = check_unit_values(values)
        n = t.shape[0]
        b = rng.random(n) < (1 + t) / 2
        # keep w.p. 1 − r exactly (r ≥ 1/(e^ε+1), see _TwoPoint): e^ε/(e^ε+1) itself rounds
        # to 1 above ε ≈ 36.7, which made the report deterministic at t = ±1
        keep = rng.random(n) < 1.0 - self.flip_probability
        return np.where(b == keep, self.bound, -self.bound)

    def output_distribution(self, values: npt.ArrayLike) -> FloatArray:
        """(len(values), 2) matrix of P[−B | t], P[+B | t] as the two draws realise them:
        π̃(1 − r) + (1 − π̃)r with π̃ = P[u < (1+t)/2].

        Args:
            values: the users' values in [−1, 1].

        Returns:
            The ``(len(values), 2)`` matrix.
        """
        pi = _realised((1 + check_unit_values(values)) / 2)
        r = self.flip_probability
        p = pi * (1 - r) + (1 - pi) * r
        return np.stack([1 - p, p], axis=1)


@dataclass(frozen=True, slots=True)
class PiecewiseMechanism(_Continuous):
    """Piecewise Mechanism ``PM`` (Wang et al., ICDE'19, arXiv 1907.00782, Alg. 2).

    C = (e^{ε/2}+1)/(e^{ε/2}−1), ℓ(t) = (C+1)t/2 − (C−1)/2, r(t) = ℓ(t) + C − 1. Report
    uniform on [ℓ(t), r(t)] w.p. e^{ε/2}/(e^{ε/2}+1), else uniform on [−C, ℓ) ∪ (r, C]:
    density p = (e^ε − e^{ε/2})/(2e^{ε/2} + 2) on the centre piece, p/e^ε elsewhere on
    [−C, C] (seed 003 eq. (3)), hence ε-LDP. Unbiased; Var = t²/(e^{ε/2}−1) +
    (e^{ε/2}+3)/(3(e^{ε/2}−1)²) (the PM variance lemma of Wang et al. ICDE'19, checked
    against samples in tests/test_mean.py). The outer branch is sampled with probability
    o ≥ 1/(e^{ε/2}+1), a multiple of 2^-53 (:attr:`outer_probability`), so the realised
    branch law keeps the density ratio ≤ e^ε at every ε; mean and variance move by at most
    ~2^-52·C² from it.
    """

    epsilon: float
    name: ClassVar[str] = "pm"

    def __post_init__(self) -> None:
        _check_eps(self.epsilon)

    @property
    def width(self) -> float:
        """C − 1 = 2/(e^{ε/2}−1), the centre piece's length (computed directly: C − 1
        cancels to 0 in double precision above ε ≈ 73)."""
        return 2.0 / math.expm1(self.epsilon / 2)

    @property
    def bound(self) -> float:
        """C = 1 + 2/(e^{ε/2}−1) = (e^{ε/2}+1)/(e^{ε/2}−1)."""
        return 1.0 + self.width

    @property
    def outer_probability(self) -> float:
        """Realised probability of the outer pieces: a multiple of 2^-53 ≥ 1/(e^{ε/2}+1).

        Rounding it up moves mass from the centre piece to the outer ones, so the realised
        density ratio stays ≤ e^ε; as h/(h+1) in double precision it was rounded the other
        way (ratio above e^ε from ε ≈ 40) and 0 above ε ≈ 73.4, where every report fell in
        the input's own centre piece.
        """
        return _rare_branch(1.0 / (math.exp(self.epsilon / 2) + 1))

    def _lr(self, t: npt.ArrayLike) -> tuple[FloatArray, FloatArray]:
        # ℓ(t) = (C+1)t/2 − (C−1)/2 = t + (w/2)(t − 1), r(t) = t + (w/2)(t + 1) with w = C − 1:
        # no cancellation, and r(1) = 1 + w = C, ℓ(−1) = −C exactly
        w = self.width
        tt = np.asarray(t, dtype=np.float64)
        return tt + w / 2 * (tt - 1), tt + w / 2 * (tt + 1)

    def randomize(self, values: npt.ArrayLike, *, rng: RNGLike) -> FloatArray:
        rng = as_generator(rng)
        t = check_unit_values(values)
        n, c, w = t.shape[0], self.bound, self.width
        left, right = self._lr(t)
        # centre w.p. 1 − o exactly (o = outer_probability; 1 − o is a double)
        centre = rng.random(n) < 1.0 - self.outer_probability
        u = rng.random(n)
        inner = np.minimum(left + u * w, right)
        # Outer part [−C, ℓ) ∪ (r, C] has total length C + 1: lay it out as one segment.
        s = u * (c + 1)
        outer = np.where(s < left + c, -c + s, np.minimum(right + (s - (left + c)), c))
        return np.where(centre, inner, outer)

    def variance(self, values: npt.ArrayLike) -> FloatArray:
        t = check_unit_values(values)
        h = math.exp(self.epsilon / 2)
        return np.asarray(t**2 / (h - 1) + (h + 3) / (3 * (h - 1) ** 2))

    def log_density(self, y: npt.ArrayLike, t: float) -> FloatArray:
        """log of the paper's density: p on [ℓ(t), r(t)], p/e^ε on the rest of [−C, C].

        :meth:`randomize` realises the outer branch with o ≥ 1/(e^{ε/2}+1) (a multiple of
        2^-53), which only lowers the ratio; o's rounding is not in this density, so the
        audit measures the paper's ε exactly.

        Args:
            y: the report values at which to evaluate it.
            t: the input in [−1, 1].

        Returns:
            The log-density at each point (−inf outside [−C, C]).
        """
        yy = np.asarray(y, dtype=np.float64)
        e, h, c = math.exp(self.epsilon), math.exp(self.epsilon / 2), self.bound
        p = (e - h) / (2 * h + 2)
        left, right = self._lr(t)
        dens = np.where((yy >= left) & (yy <= right), p, p / e)
        dens = np.where(np.abs(yy) <= c, dens, 0.0)
        with np.errstate(divide="ignore"):
            return np.asarray(np.log(dens))

    def support(self, t: float) -> tuple[float, float]:
        return (-self.bound, self.bound)


@dataclass(frozen=True, slots=True)
class LaplaceMean(_Continuous):
    """Laplace mechanism on [−1, 1]: report t + Lap(2/ε) (sensitivity 2).

    ε-LDP in exact arithmetic; Var = 8/ε². Floating-point Laplace: a baseline only
    (Mironov, CCS'12).
    """

    epsilon: float
    name: ClassVar[str] = "laplace"

    def __post_init__(self) -> None:
        _check_eps(self.epsilon)

    @property
    def scale(self) -> float:
        """b = 2/ε."""
        return 2.0 / self.epsilon

    def randomize(self, values: npt.ArrayLike, *, rng: RNGLike) -> FloatArray:
        rng = as_generator(rng)
        t = check_unit_values(values)
        return np.asarray(t + rng.laplace(0.0, self.scale, size=t.shape[0]))

    def variance(self, values: npt.ArrayLike) -> FloatArray:
        t = check_unit_values(values)
        return np.full(t.shape, 2 * self.scale**2)

    def log_density(self, y: npt.ArrayLike, t: float) -> FloatArray:
        b = self.scale
        return np.asarray(-np.abs(np.asarray(y, dtype=np.float64) - t) / b - math.log(2 * b))

    def support(self, t: float) -> tuple[float, float]:
        return (-math.inf, math.inf)


@dataclass(frozen=True, slots=True)
class DCT(_Continuous):
    """``DCT`` as reconstructed from seed 003 — NOT ε-LDP (see the module docstring).

    Window half-width d = (e^ε+1)/(α(e^ε−1)) (reconstruction; α = 5 as in the seed's
    experiments), m = d/2. Class bit b ~ Bernoulli(½) (independent of v), perturbed by
    randomized response (kept w.p. e^ε/(e^ε+1)); report uniform on [v−m, v+m] if the bit is 1,
    else uniform on [v−d, v−m) ∪ (v+m, v+d]. The perturbed bit is still a fair coin, so the
    report is v + d·U, U ~ Uniform[−1, 1]: unbiased, Var = d²/3, and its support [v−d, v+d]
    depends on v — unbounded likelihood ratio, no ε-LDP guarantee at all. The paper's claim
    (its Lemma 1) is recorded as ``claimed_epsilon`` only so the audit can refute it.
    """

    epsilon: float
    alpha: float = 5.0
    name: ClassVar[str] = "dct"
    is_ldp: ClassVar[bool] = False

    def __post_init__(self) -> None:
        _check_eps(self.epsilon)
        a = float(self.alpha)
        if not math.isfinite(a) or a <= 0:
            raise ParameterError(f"alpha must be a finite number > 0, got {self.alpha!r}")

    @property
    def half_width(self) -> float:
        """d = (e^ε+1)/(α(e^ε−1)) (reconstructed)."""
        e = math.exp(self.epsilon)
        return (e + 1) / (self.alpha * (e - 1))

    @property
    def bound(self) -> float:
        """A = 1 + d: the output range [−A, A] the seed states."""
        return 1.0 + self.half_width

    def randomize(self, values: npt.ArrayLike, *, rng: RNGLike) -> FloatArray:
        rng = as_generator(rng)
        v = check_unit_values(values)
        n, d = v.shape[0], self.half_width
        m = d / 2
        e = math.exp(self.epsilon)
        bit = rng.random(n) < 0.5
        kept = rng.random(n) < e / (e + 1)
        inner_class = bit == kept
        u = rng.random(n)
        inner = v - m + u * (2 * m)
        # outer segments [v−d, v−m) ∪ (v+m, v+d], total length d
        w = u * d
        outer = np.where(w < m, v - d + w, v + m + (w - m))
        return np.where(inner_class, inner, outer)

    def variance(self, values: npt.ArrayLike) -> FloatArray:
        v = check_unit_values(values)
        return np.full(v.shape, self.half_width**2 / 3)

    def log_density(self, y: npt.ArrayLike, t: float) -> FloatArray:
        yy = np.asarray(y, dtype=np.float64)
        d = self.half_width
        inside = np.abs(yy - t) <= d
        with np.errstate(divide="ignore"):
            return np.asarray(np.where(inside, -math.log(2 * d), -np.inf))

    def support(self, t: float) -> tuple[float, float]:
        return (t - self.half_width, t + self.half_width)


MEAN_MECHANISMS: dict[str, type[MeanMechanism]] = {
    "duchi": Duchi,
    "pm": PiecewiseMechanism,
    "harmony": Harmony,
    "laplace": LaplaceMean,
    "dct": DCT,
}
