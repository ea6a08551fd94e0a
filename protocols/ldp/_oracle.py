"""The frequency-oracle interface and what every oracle shares: input checks, the
keep-or-uniform draw, post-processing onto the simplex, and the law-size limits.

The oracles themselves (k-RR, unary encodings, local hashing, Hadamard response, histogram
encodings) are in :mod:`protocols.ldp._freq_oracles`.
"""

from __future__ import annotations

import abc
import math
from typing import Any, ClassVar, Literal

import numpy as np
import numpy.typing as npt

from .._base import check_epsilon, check_n
from .._errors import ParameterError
from .._random import RNGLike, as_generator

__all__ = [
    "FrequencyOracle",
    "check_values",
    "project_simplex",
]

Postprocess = Literal["none", "clip", "simplex"]
IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]

_TWO32 = 1 << 32


# --- validation -------------------------------------------------------------------------------
def _check_domain(d: int, minimum: int = 2) -> int:
    return check_n(d, "domain d", minimum)


def _check_eps(epsilon: float) -> float:
    # The project's range [1e-6, 700]: below, e^ε − 1 in p* − q* keeps too few digits.
    return check_epsilon(epsilon)


def _check_oracle(oracle: FrequencyOracle) -> float:
    """Check ``oracle.d`` and ``oracle.epsilon`` and store them as int and float (the
    dataclasses are frozen), so KRR(d=4.0, epsilon=1) is KRR(d=4, epsilon=1.0); returns ε."""
    object.__setattr__(oracle, "d", _check_domain(oracle.d))
    eps = _check_eps(oracle.epsilon)
    object.__setattr__(oracle, "epsilon", eps)
    return eps


def _check_hash_range(g: int) -> int:
    try:
        h = check_n(g, "hash range g", 2)
    except ParameterError:
        h = 0
    if not 2 <= h < _TWO32:
        raise ParameterError(f"hash range g must be an integer in [2, 2^32), got {g!r}")
    return h


def check_values(values: npt.ArrayLike, d: int) -> IntArray:
    """Return ``values`` as a 1-D int64 array, checking every value is an integer in [0, d).

    Raises:
        ParameterError: a value is not an integer or lies outside [0, d) (inputs are 0-based;
            the message quotes the first bad value).
    """
    x = np.asarray(values)
    if x.ndim != 1:
        raise ParameterError(f"values must be a 1-D array, got shape {x.shape}")
    if x.size == 0:
        return x.astype(np.int64)
    if not np.issubdtype(x.dtype, np.integer):
        if not np.issubdtype(x.dtype, np.floating) or not np.all(np.isfinite(x)):
            raise ParameterError(f"values must be integers in [0, {d}), got dtype {x.dtype}")
        bad = np.flatnonzero(x != np.round(x))
        if bad.size:
            raise ParameterError(f"values must be integers in [0, {d}), got {x[bad[0]].item()!r}")
    bad = np.flatnonzero((x < 0) | (x >= d))
    if bad.size:
        raise ParameterError(
            f"values must lie in [0, {d}) (0-based), got {x[bad[0]].item()!r} "
            f"at index {int(bad[0])}"
        )
    return x.astype(np.int64, copy=False)


def _check_counts(true_counts: npt.ArrayLike, d: int) -> IntArray:
    c = np.asarray(true_counts)
    if c.shape != (d,) or not np.issubdtype(c.dtype, np.integer) or np.any(c < 0):
        raise ParameterError(
            f"true_counts must be {d} non-negative integers, got shape {c.shape} dtype {c.dtype}"
        )
    return c.astype(np.int64, copy=False)


def _one_draw_scale(lam: float, k: int) -> float | None:
    """K with which :func:`_keep_or_uniform` maps u to ⌊u·K⌋ (uniform where < k), or None
    where it draws the uniform value on its own (k/(λ·2^53) > 2^-24).

    u = m·2^-53, so value j gets the m with j ≤ fl(m·K)/2^53 < j + 1: about λ·2^53/k of
    them, give or take 3 (plus λ's own few ulps of rounding). K = k/λ' with λ widened by
    that margin keeps every value's realised probability ≥ λ/k, hence the kept value's
    likelihood ratio 1 + P[keep]/P[value j] ≤ 1 + (1−λ)k/λ = e^ε exactly; with K = k/λ it
    exceeded e^ε by up to 5e-8 in ε at ε = 20 (tests/test_ldp_exact.py counts the points).
    """
    if k / (lam * 2.0**53) > 2.0**-24:
        return None
    return k / min(1.0, lam * (1.0 + 2.0**-49) + 4.0 * k * 2.0**-53)


def _keep_or_uniform(
    x: IntArray, lam: float, k: int, *, rng: np.random.Generator
) -> npt.NDArray[np.int64]:
    """k-ary RR: w.p. λ a uniform value of [0, k) (possibly x itself), else x.

    Keeping x w.p. 1−λ+λ/k = e^ε/(e^ε+k−1) for λ = k/(e^ε+k−1). One uniform double u per
    user decides, and given u < λ, ⌊u k/λ⌋ is the uniform value: u/λ takes about λ·2^53
    equally likely values, so each of the k values is off by at most k/(λ·2^53) of its
    probability, and λ is widened by that much (:func:`_one_draw_scale`) so that none falls
    below λ/k: the realised law is ε-LDP exactly. Where k/(λ·2^53) exceeds 2^-24 (tiny λ,
    i.e. large ε; below λ = 2^-53 it would always be 0) the uniform value is drawn on its
    own instead (u < λ happens w.p. ⌈λ·2^53⌉/2^53 ≥ λ); ⌊u k/λ⌋ is only formed where
    u < λ, so k/λ = e^ε+k−1 beyond int64 (ε > 43.7) cannot overflow it. (The one-draw form
    keeps seeded runs, e.g. the experiments' LDP baselines, as they were.)
    """
    u = np.asarray(rng.random(x.shape[0]), dtype=np.float64)
    out = np.array(x, dtype=np.int64)
    scale = _one_draw_scale(lam, k)
    if scale is not None:
        scaled = u * scale
        uniform = scaled < k
        out[uniform] = scaled[uniform].astype(np.int64)
    else:
        uniform = u < lam
        out[uniform] = rng.integers(0, k, size=int(np.count_nonzero(uniform)), dtype=np.int64)
    return out


def project_simplex(v: npt.ArrayLike, total: float) -> FloatArray:
    """Euclidean projection of ``v`` onto {c : c ≥ 0, Σ c = total} (Duchi et al. ICML'08).

    Args:
        v: the vector to project.
        total: the sum of the projection (≤ 0 gives the zero vector).

    Returns:
        The nearest vector c to ``v`` with c ≥ 0 and Σ c = ``total``.
    """
    y = np.asarray(v, dtype=np.float64)
    if total <= 0:
        return np.zeros_like(y)
    u = np.sort(y)[::-1]
    css = np.cumsum(u) - total
    idx = np.arange(1, y.size + 1)
    rho = int(np.nonzero(u - css / idx > 0)[0][-1])
    tau = css[rho] / (rho + 1)
    return np.asarray(np.maximum(y - tau, 0.0), dtype=np.float64)


def _postprocess(est: FloatArray, n: int, how: str) -> FloatArray:
    if how == "none":
        return est
    if how == "clip":
        return np.clip(est, 0.0, float(n))
    if how == "simplex":
        return project_simplex(est, float(n))
    raise ParameterError(f"postprocess must be 'none', 'clip' or 'simplex', got {how!r}")


def _quantize(p: float, q: float) -> tuple[float, float]:
    """Realised Bernoulli probabilities of a 32-bit threshold draw (p down, q up). A p that
    rounds to 1 in double precision (SUE above ε ≈ 73.5) becomes 1 − 2^-32: a u32 threshold
    cannot express 1."""
    return min(math.floor(p * _TWO32), _TWO32 - 1) / _TWO32, math.ceil(q * _TWO32) / _TWO32


# --- base -------------------------------------------------------------------------------------
class FrequencyOracle(abc.ABC):
    """Interface of every frequency oracle; subclasses are frozen slotted dataclasses."""

    __slots__ = ()
    name: ClassVar[str]
    #: whether :meth:`sample_support_counts` is available (exact aggregate-level sampling)
    aggregate_sampling: ClassVar[bool] = False

    d: int
    epsilon: float

    @property
    @abc.abstractmethod
    def p_star(self) -> float:
        """Probability that a report supports the user's own value."""

    @property
    @abc.abstractmethod
    def q_star(self) -> float:
        """Probability that a report supports a given other value."""

    @abc.abstractmethod
    def randomize(self, values: npt.ArrayLike, *, rng: RNGLike) -> npt.NDArray[Any]:
        """Randomize each user's value in [0, d) into its report (vectorized).

        Args:
            values: one value in [0, d) per user.
            rng: the randomizer's generator, or a seed (:data:`~protocols.RNGLike`).

        Returns:
            The reports, one row (or entry) per user.
        """

    @abc.abstractmethod
    def support_counts(self, reports: npt.NDArray[Any]) -> npt.NDArray[Any]:
        """C_i for every i in [0, d): how many reports support i.

        Args:
            reports: the users' reports (:meth:`randomize`'s).

        Returns:
            The d support counts.
        """

    def n_reports(self, reports: npt.NDArray[Any]) -> int:
        """Number of users behind ``reports``.

        Args:
            reports: the users' reports (:meth:`randomize`'s).

        Returns:
            The number of rows of ``reports``, one per user.
        """
        return int(np.asarray(reports).shape[0])

    def estimate(
        self, support: npt.ArrayLike, n: int, *, postprocess: Postprocess = "none"
    ) -> FloatArray:
        """Unbiased counts ĉ = (C − n q*)/(p* − q*) from support counts of n reports.

        Args:
            support: the d support counts C (:meth:`support_counts`).
            n: the number of reports.
            postprocess: ``"none"`` (unbiased), ``"clip"`` (to [0, n]) or ``"simplex"``
                (:func:`project_simplex` onto counts summing to n).

        Returns:
            The d estimated counts.

        Raises:
            ParameterError: n is not an integer >= 0.
        """
        n = check_n(n, "n", 0)
        c = np.asarray(support, dtype=np.float64)
        p, q = self.p_star, self.q_star
        est = (c - n * q) / (p - q)
        return _postprocess(est, n, postprocess)

    def aggregate(
        self, reports: npt.NDArray[Any], *, postprocess: Postprocess = "none"
    ) -> FloatArray:
        """Unbiased count estimates for all d values (raw unless ``postprocess`` says so).

        Args:
            reports: the users' reports (:meth:`randomize`'s).
            postprocess: ``"none"`` (unbiased), ``"clip"`` (to [0, n]) or ``"simplex"``
                (:func:`project_simplex` onto counts summing to n).

        Returns:
            The d estimated counts.
        """
        return self.estimate(
            self.support_counts(reports), self.n_reports(reports), postprocess=postprocess
        )

    def variance(self, true_counts: npt.ArrayLike, n: int) -> FloatArray:
        """Exact Var ĉ_i given the true counts c (length d) of n users.

        Args:
            true_counts: the number of users holding each value (length d).
            n: the number of users.

        Returns:
            The d variances.
        """
        c = np.asarray(true_counts, dtype=np.float64)
        p, q = self.p_star, self.q_star
        return np.asarray((c * p * (1 - p) + (n - c) * q * (1 - q)) / (p - q) ** 2)

    def approx_variance(self, n: int) -> float:
        """Wang et al. §3: Var* = n q*(1−q*)/(p*−q*)² (the c_i-free term).

        Args:
            n: the number of users.

        Returns:
            The approximate variance of each estimated count.
        """
        p, q = self.p_star, self.q_star
        return float(n * q * (1 - q) / (p - q) ** 2)

    def sample_support_counts(self, true_counts: npt.ArrayLike, *, rng: RNGLike) -> IntArray:
        """Exact draw of ``support_counts(randomize(values))`` from the true counts alone.

        Args:
            true_counts: the number of users holding each value (length d).
            rng: the generator, or a seed (:data:`~protocols.RNGLike`).

        Returns:
            The d support counts, distributed exactly as those of the randomized reports.

        Raises:
            NotImplementedError: the oracle has no such sampler.
        """
        rng = as_generator(rng)
        raise NotImplementedError(f"{self.name} has no exact aggregate-level sampler")

    @abc.abstractmethod
    def output_distribution(self) -> FloatArray:
        """(d, K) matrix: row v is the exact law of the report given input v (small d).

        Returns:
            The ``(d, K)`` matrix over the K possible reports.
        """


#: most entries an ``output_distribution`` matrix may have (2^24 float64 = 128 MiB): the
#: domain limits below keep kRR (d²), HR (d·K) and the unary encodings (d·2^d) under it;
#: local hashing (d·S·g, with g ≈ e^ε) checks it at every call, since g grows with ε
_MAX_LAW_ENTRIES = 1 << 24


def _small_domain(d: int, limit: int, what: str) -> None:
    if d > limit:
        raise ParameterError(f"{what} output distribution needs d <= {limit}, got d={d}")
