"""k attributes per user: sample m of them and split ε (Wang et al., ICDE'19, arXiv 1907.00782).

Each user holds k attributes. It samples m of them uniformly without replacement, reports
each sampled attribute with the one-attribute mechanism at ε/m (sequential composition:
ε-LDP in total) and scales by k/m; unsampled attributes are not reported. The paper's
Algorithm 4 picks m = max(1, min(k, ⌊ε/2.5⌋)) for PM/Duchi; m = 1 at small ε is Harmony's
"one attribute per user" (Nguyên et al., arXiv 1606.05053).

Means (values in [−1, 1]^k): report Y_ij = (k/m)·R_ij for sampled j (R unbiased for x_ij),
0 otherwise. E Y_ij = x_ij and Var Y_ij = (k/m)(Var R_ij + x_ij²) − x_ij² (Wang et al.
ICDE'19 §IV-C); the estimate of attribute j is the mean of column j.

Frequencies (values in [0, d_j)): the users who sampled j run a frequency oracle at ε/m;
its unbiased counts, scaled by k/m, estimate the counts of all n users:
E[(k/m)·ĉ_S] = (k/m)(m/k)c = c, and
Var = (k/m)·(c p*(1−p*) + (n−c) q*(1−q*))/(p*−q*)² + c(k/m − 1)
(the second term is the sampling noise of which users with value v report attribute j).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from .._base import MIN_EPSILON, check_epsilon, check_n
from .._errors import ParameterError
from .._random import RNGLike, as_generator
from ._freq_oracles import FrequencyOracle, check_values
from ._mean import MeanMechanism, check_unit_values

__all__ = ["AttributeReports", "SampledAttributes", "default_sampled"]

FloatArray = npt.NDArray[np.float64]


def default_sampled(k: int, epsilon: float) -> int:
    """m = max(1, min(k, ⌊ε/2.5⌋)) (Wang et al. ICDE'19, Algorithm 4)."""
    return max(1, min(int(k), math.floor(float(epsilon) / 2.5)))


@dataclass(frozen=True, slots=True)
class AttributeReports:
    """Reports of the users who sampled one attribute: their indices and their reports."""

    users: npt.NDArray[np.int64]
    reports: npt.NDArray[Any]


@dataclass(frozen=True, slots=True)
class SampledAttributes:
    """Sample m of k attributes per user, each at ε/m, scaled by k/m (see module docstring).

    Attributes:
        k: number of attributes (>= 1).
        epsilon: total ε per user (> 0).
        sampled: m in [1, k]; default :func:`default_sampled`.
    """

    k: int
    epsilon: float
    sampled: int = 0

    def __post_init__(self) -> None:
        # all checks here: k = 2.0 or sampled = 2.0 were kept as floats and failed
        # later in np.ones / slicing, None and NaN raised TypeError/ValueError, and an ε the
        # one-attribute mechanisms refuse (or an ε/m below their floor) surfaced only at
        # randomize time
        k = check_n(self.k, "k", 1)
        object.__setattr__(self, "k", k)
        eps = check_epsilon(self.epsilon)
        object.__setattr__(self, "epsilon", eps)
        try:
            m = check_n(self.sampled, "sampled", 0)
        except ParameterError:
            m = -1
        if m == 0:
            m = default_sampled(k, eps)
        if not 1 <= m <= k:
            raise ParameterError(f"sampled must be an integer in [1, {k}], got {self.sampled!r}")
        object.__setattr__(self, "sampled", m)
        if eps / m < MIN_EPSILON:
            raise ParameterError(
                f"epsilon/sampled = {eps:g}/{m} = {eps / m:g} is below the one-attribute "
                f"mechanisms' minimum {MIN_EPSILON:g}"
            )

    @property
    def epsilon_each(self) -> float:
        """ε/m spent on each sampled attribute."""
        return float(self.epsilon) / self.sampled

    @property
    def scale(self) -> float:
        """k/m."""
        return self.k / self.sampled

    def sample(self, n: int, *, rng: RNGLike) -> npt.NDArray[np.bool_]:
        """(n, k) mask: which m attributes each user reports (uniform, without replacement).

        Args:
            n: the number of users.
            rng: source of randomness, or a seed (:data:`~protocols.RNGLike`).

        Returns:
            The (n, k) boolean mask, m entries True in each row.
        """
        rng = as_generator(rng)
        if self.sampled == self.k:
            return np.ones((n, self.k), dtype=bool)
        if self.sampled == 1:
            mask = np.zeros((n, self.k), dtype=bool)
            mask[np.arange(n), rng.integers(0, self.k, size=n)] = True
            return mask
        ranks = np.argsort(rng.random((n, self.k)), axis=1)
        mask = np.zeros((n, self.k), dtype=bool)
        np.put_along_axis(mask, ranks[:, : self.sampled], True, axis=1)
        return mask

    # --- means ---------------------------------------------------------------------------------
    def randomize_means(
        self,
        mechanism: Callable[[float], MeanMechanism],
        values: npt.ArrayLike,
        *,
        rng: RNGLike,
    ) -> FloatArray:
        """(n, k) values in [−1, 1] → (n, k) reports, (k/m)·R on sampled entries, 0 elsewhere.

        Args:
            mechanism: builds the one-attribute mechanism for an ε (e.g. ``PiecewiseMechanism``).
            values: (n, k) array in [−1, 1].
            rng: source of randomness, or a seed (:data:`~protocols.RNGLike`).

        Returns:
            The (n, k) reports.
        """
        rng = as_generator(rng)
        x = self._matrix(values)
        mech = mechanism(self.epsilon_each)
        mask = self.sample(x.shape[0], rng=rng)
        out = np.zeros_like(x)
        for j in range(self.k):  # loop over attributes (k small), vectorized over users
            rows = np.flatnonzero(mask[:, j])
            out[rows, j] = self.scale * mech.randomize(x[rows, j], rng=rng)
        return out

    def estimate_means(self, reports: npt.ArrayLike) -> FloatArray:
        """Unbiased mean of each attribute: the column means of the reports.

        Args:
            reports: the (n, k) reports of :meth:`randomize_means`.

        Returns:
            The k estimated means.

        Raises:
            ParameterError: ``reports`` not of shape (n, k) with n ≥ 1.
        """
        r = np.asarray(reports, dtype=np.float64)
        if r.ndim != 2 or r.shape[1] != self.k:
            raise ParameterError(f"reports must have shape (n, {self.k}), got {r.shape}")
        if r.shape[0] == 0:
            raise ParameterError("cannot estimate means from zero users' reports")
        return np.asarray(r.mean(axis=0))

    def mean_variance(
        self, mechanism: Callable[[float], MeanMechanism], values: npt.ArrayLike
    ) -> FloatArray:
        """Exact Var of each attribute's estimated mean: Σ_i [(k/m)(Var R + x²) − x²] / n².

        Args:
            mechanism: builds the one-attribute mechanism for an ε, as given to
                :meth:`randomize_means`.
            values: the (n, k) values in [−1, 1].

        Returns:
            The k variances.
        """
        x = self._matrix(values)
        mech = mechanism(self.epsilon_each)
        n = x.shape[0]
        per = np.stack([mech.variance(x[:, j]) for j in range(self.k)], axis=1)
        return np.asarray((self.scale * (per + x**2) - x**2).sum(axis=0) / n**2)

    # --- frequencies -----------------------------------------------------------------------------
    def randomize_frequencies(
        self,
        oracle: Callable[[int, float], FrequencyOracle],
        values: npt.ArrayLike,
        domains: Sequence[int],
        *,
        rng: RNGLike,
    ) -> list[AttributeReports]:
        """(n, k) categorical values → per attribute, the reports of the users who sampled it.

        Args:
            oracle: builds the oracle for (d_j, ε/m), e.g. ``lambda d, e: OLH(d=d, epsilon=e)``.
            values: (n, k) ints, column j in [0, d_j).
            domains: the k domain sizes d_j.
            rng: source of randomness, or a seed (:data:`~protocols.RNGLike`).

        Returns:
            Per attribute j, the indices of the users who sampled it and their reports.

        Raises:
            ParameterError: ``values`` not of shape (n, k), not k domains, or a value outside
                its domain.
        """
        rng = as_generator(rng)
        x = np.asarray(values)
        if x.ndim != 2 or x.shape[1] != self.k or len(domains) != self.k:
            raise ParameterError(
                f"values must have shape (n, {self.k}) with {self.k} domains, got "
                f"{x.shape} and {len(domains)} domains"
            )
        cols = [check_values(x[:, j], int(domains[j])) for j in range(self.k)]
        mask = self.sample(x.shape[0], rng=rng)
        out = []
        for j in range(self.k):
            users = np.flatnonzero(mask[:, j]).astype(np.int64)
            fo = oracle(int(domains[j]), self.epsilon_each)
            out.append(AttributeReports(users, fo.randomize(cols[j][users], rng=rng)))
        return out

    def estimate_frequencies(
        self,
        oracle: Callable[[int, float], FrequencyOracle],
        reports: Sequence[AttributeReports],
        domains: Sequence[int],
    ) -> list[FloatArray]:
        """Unbiased counts (over all n users) of every value of every attribute.

        Args:
            oracle: builds the oracle for (d_j, ε/m), as given to :meth:`randomize_frequencies`.
            reports: :meth:`randomize_frequencies`'s reports, one entry per attribute.
            domains: the k domain sizes d_j.

        Returns:
            Per attribute, the d_j estimated counts.
        """
        return [
            self.scale * oracle(int(domains[j]), self.epsilon_each).aggregate(reports[j].reports)
            for j in range(self.k)
        ]

    def frequency_variance(
        self, oracle: FrequencyOracle, true_counts: npt.ArrayLike, n: int
    ) -> FloatArray:
        """Exact Var of one attribute's scaled counts; ``oracle`` is the one at ε/m.

        Args:
            oracle: the attribute's oracle at ε/m.
            true_counts: the number of users holding each value of the attribute.
            n: the number of users.

        Returns:
            The variance of each scaled count.
        """
        c = np.asarray(true_counts, dtype=np.float64)
        return np.asarray(self.scale * oracle.variance(c, n) + c * (self.scale - 1))

    def _matrix(self, values: npt.ArrayLike) -> FloatArray:
        x = np.asarray(values, dtype=np.float64)
        if x.ndim != 2 or x.shape[1] != self.k:
            raise ParameterError(f"values must have shape (n, {self.k}), got {x.shape}")
        check_unit_values(x.reshape(-1))
        return x
