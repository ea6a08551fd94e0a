"""Local-DP mean estimation on [−1, 1] (seed 003 and the papers it cites).

Every mechanism is a frozen, slotted parameter object with ``randomize(values, *, rng)``
(values in [−1, 1] → one float report per user, vectorized), ``estimate(reports)`` (the
sample mean of the reports, unbiased for the true mean because every report is an unbiased
estimate of its input), ``variance(values)`` (exact per-user variance of a report) and
``mean_variance(values)`` = Σ_i Var_i / n². Continuous mechanisms give ``log_density(y, t)``
and ``support(t)``; two-point ones (Duchi, Harmony) give ``output_distribution(t)``; the
audit in :mod:`protocols._ldp_audit` uses them.

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

from ._base import check_epsilon
from ._errors import ParameterError

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
    def randomize(self, values: npt.ArrayLike, *, rng: np.random.Generator) -> FloatArray:
        """One unbiased report per user."""

    @abc.abstractmethod
    def variance(self, values: npt.ArrayLike) -> FloatArray:
        """Exact variance of each user's report given its value."""

    def estimate(self, reports: npt.ArrayLike) -> float:
        """Unbiased estimate of the mean of the inputs: the mean of the reports."""
        r = np.asarray(reports, dtype=np.float64)
        if r.size == 0:
            raise ParameterError("cannot estimate a mean from zero reports")
        return float(r.mean())

    def mean_variance(self, values: npt.ArrayLike) -> float:
        """Var of :meth:`estimate` for the inputs ``values``: Σ Var_i / n²."""
        v = self.variance(values)
        return float(v.sum() / v.size**2)

    @property
    def bound(self) -> float:
        """Largest |report| (inf for Laplace)."""
        return math.inf


class _Continuous(MeanMechanism):
    __slots__ = ()

    @abc.abstractmethod
    def log_density(self, y: npt.ArrayLike, t: float) -> FloatArray:
        """log of the report density at the points ``y`` given input t (−inf off support)."""

    @abc.abstractmethod
    def support(self, t: float) -> tuple[float, float]:
        """Closed interval holding the report's support given input t."""


class _TwoPoint(MeanMechanism):
    """Reports ±B; P[+B | t] = ½ + t/(2B), so E = t and Var = B² − t²."""

    __slots__ = ()

    @property
    def bound(self) -> float:
        e = math.exp(self.epsilon)
        return (e + 1) / (e - 1)

    def prob_plus(self, values: npt.ArrayLike) -> FloatArray:
        """P[report = +B | t] = ½ + t(e^ε−1)/(2(e^ε+1))."""
        t = np.asarray(values, dtype=np.float64)
        return np.asarray(0.5 + t / (2 * self.bound))

    def variance(self, values: npt.ArrayLike) -> FloatArray:
        t = check_unit_values(values)
        return np.asarray(self.bound**2 - t**2)

    def output_distribution(self, values: npt.ArrayLike) -> FloatArray:
        """(len(values), 2) matrix of P[−B | t], P[+B | t]."""
        p = self.prob_plus(check_unit_values(values))
        return np.stack([1 - p, p], axis=1)


@dataclass(frozen=True, slots=True)
class Duchi(_TwoPoint):
    """Duchi, Jordan, Wainwright (JASA'18) one-dimensional mechanism (seed 003 Alg. 1).

    Report +B w.p. ½ + t(e^ε−1)/(2(e^ε+1)), else −B, B = (e^ε+1)/(e^ε−1). Unbiased;
    Var = B² − t²; ε-LDP (ratio of the two probabilities at t = ±1 is exactly e^ε).
    """

    epsilon: float
    name: ClassVar[str] = "duchi"

    def __post_init__(self) -> None:
        _check_eps(self.epsilon)

    def randomize(self, values: npt.ArrayLike, *, rng: np.random.Generator) -> FloatArray:
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

    def randomize(self, values: npt.ArrayLike, *, rng: np.random.Generator) -> FloatArray:
        t = check_unit_values(values)
        n = t.shape[0]
        b = rng.random(n) < (1 + t) / 2
        e = math.exp(self.epsilon)
        keep = rng.random(n) < e / (e + 1)
        return np.where(b == keep, self.bound, -self.bound)


@dataclass(frozen=True, slots=True)
class PiecewiseMechanism(_Continuous):
    """Piecewise Mechanism ``PM`` (Wang et al., ICDE'19, arXiv 1907.00782, Alg. 2).

    C = (e^{ε/2}+1)/(e^{ε/2}−1), ℓ(t) = (C+1)t/2 − (C−1)/2, r(t) = ℓ(t) + C − 1. Report
    uniform on [ℓ(t), r(t)] w.p. e^{ε/2}/(e^{ε/2}+1), else uniform on [−C, ℓ) ∪ (r, C]:
    density p = (e^ε − e^{ε/2})/(2e^{ε/2} + 2) on the centre piece, p/e^ε elsewhere on
    [−C, C] (seed 003 eq. (3)), hence ε-LDP. Unbiased; Var = t²/(e^{ε/2}−1) +
    (e^{ε/2}+3)/(3(e^{ε/2}−1)²) (the PM variance lemma of Wang et al. ICDE'19, checked
    against samples in tests/test_mean.py).
    """

    epsilon: float
    name: ClassVar[str] = "pm"

    def __post_init__(self) -> None:
        _check_eps(self.epsilon)

    @property
    def bound(self) -> float:
        h = math.exp(self.epsilon / 2)
        return (h + 1) / (h - 1)

    def _lr(self, t: npt.ArrayLike) -> tuple[FloatArray, FloatArray]:
        c = self.bound
        left = (c + 1) * np.asarray(t, dtype=np.float64) / 2 - (c - 1) / 2
        return left, left + c - 1

    def randomize(self, values: npt.ArrayLike, *, rng: np.random.Generator) -> FloatArray:
        t = check_unit_values(values)
        n, c = t.shape[0], self.bound
        h = math.exp(self.epsilon / 2)
        left, right = self._lr(t)
        centre = rng.random(n) < h / (h + 1)
        u = rng.random(n)
        inner = left + u * (c - 1)
        # Outer part [−C, ℓ) ∪ (r, C] has total length C + 1: lay it out as one segment.
        w = u * (c + 1)
        outer = np.where(w < left + c, -c + w, right + (w - (left + c)))
        return np.where(centre, inner, outer)

    def variance(self, values: npt.ArrayLike) -> FloatArray:
        t = check_unit_values(values)
        h = math.exp(self.epsilon / 2)
        return np.asarray(t**2 / (h - 1) + (h + 3) / (3 * (h - 1) ** 2))

    def log_density(self, y: npt.ArrayLike, t: float) -> FloatArray:
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

    def randomize(self, values: npt.ArrayLike, *, rng: np.random.Generator) -> FloatArray:
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

    def randomize(self, values: npt.ArrayLike, *, rng: np.random.Generator) -> FloatArray:
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
