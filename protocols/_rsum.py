"""Real summation by k-RR over rounded levels: ``RSum_RR``, ``RSum_KR``, ``RSum_RM``.

Every user holds x_i ∈ [0, 1]; the target is Σ x_i (survey §4.3, table 8). These three, like
``RSum_DSG`` (:mod:`protocols._rsum_dsg`) and ``RSum_PURE`` (:mod:`protocols._rsum_pure`),
which take their shared helpers from here, first map x to integers by unbiased randomized
rounding at a precision k:
    R_k(x) = ⌊xk⌋ + Ber(xk − ⌊xk⌋),   E R_k(x) = xk,   Var R_k(x) = f(1 − f), f = xk − ⌊xk⌋
(Balle et al. arXiv 1903.02837 §4; Cheu et al. arXiv 1808.01394 §5), so the rounding adds
Σ f_i(1 − f_i)/k² ≤ n/(4k²) to the variance of the sum.

k-RR over L levels {0, …, L−1} (the building block of three of them): a user keeps its level
with probability 1 − λ and sends a uniform level otherwise. With S the sum of the N received
levels of one group (n users plus N − n uniform fakes),
    Ŝ = (S − λ n μ − (N − n) μ) / (1 − λ),   μ = (L − 1)/2,
is unbiased for the sum of the true levels, with exact variance (given the levels v_i)
    Var Ŝ = [Σ_i ((1−λ)λ v_i² − 2(1−λ)λ μ v_i + λ s₂ − λ² μ²) + (N − n) σ²_U] / (1 − λ)²,
s₂ = (L−1)(2L−1)/6 = E U², σ²_U = (L² − 1)/12 for U uniform on the L levels. The worst case
over v is λ s₂ − λ² μ² per user (the per-user term is convex in v and equal at both ends).
Privacy of each group comes from the tightest registered amplification bound for k-RR
(survey Thm 2–4 via :func:`~protocols.largest_local`).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from ._base import (
    Estimate,
    InputKind,
    PrivacyGuarantee,
    ShuffleProtocol,
    check_delta,
    check_epsilon,
    check_n,
)
from ._errors import BoundNotApplicable, ParameterError
from ._messages import (
    decode_bits,
    decode_uints,
    encode_bits,
    encode_uints,
    randomized_round,
    uint_codec_size,
)
from ._random import RNGLike, as_generator
from ._registry import ProtocolSpec, integer_option, register_protocol
from .accounting import BOUNDS, krr_lambda, largest_local

__all__ = [
    "KRRLevels",
    "RSumKR",
    "RSumRM",
    "RSumRR",
    "advanced_composition_epsilon",
    "rounding_variance",
]

#: Largest precision any of these protocols accepts (levels must stay a small codec).
MAX_PRECISION = 1 << 24


def rounding_variance(x: npt.NDArray[np.float64], k: int) -> float:
    """Σ_i f_i (1 − f_i) with f_i = x_i k − ⌊x_i k⌋: the variance R_k adds to Σ R_k(x_i)."""
    scaled = np.asarray(x, dtype=np.float64) * k
    f = scaled - np.floor(scaled)
    return float(np.sum(f * (1.0 - f)))


def advanced_composition_epsilon(epsilon_total: float, delta_slack: float, rounds: int) -> float:
    """Largest per-round ε' whose ``rounds``-fold composition is ε_total-DP.

    Dwork, Rothblum, Vadhan (FOCS'10) Thm III.3: r-fold composition of (ε', δ')-DP is
    (√(2r ln(1/δ'')) ε' + r ε'(e^{ε'} − 1), r δ' + δ'')-DP. Basic composition (r ε', r δ')
    is also valid; we return the larger ε' of the two.
    """
    # Imported here: scipy.optimize costs every esa command and party process at start-up.
    from scipy.optimize import brentq

    r = check_n(rounds, "rounds")
    eps = check_epsilon(epsilon_total, "epsilon_total")
    slack = check_delta(delta_slack, "delta_slack")
    basic = eps / r

    def total(e: float) -> float:
        return math.sqrt(2.0 * r * math.log(1.0 / slack)) * e + r * e * math.expm1(e)

    hi = eps  # total(ε) > ε, so the root lies in (0, ε)
    advanced = float(brentq(lambda e: total(e) - eps, 1e-15, hi, xtol=1e-14, rtol=1e-12))
    return max(basic, advanced)


@dataclass(frozen=True, slots=True)
class KRRLevels:
    """One group of k-RR over L levels: the randomizer, the debiased sum and its variance.

    Attributes:
        levels: L >= 2.
        lam: λ, probability of a uniform level; ε_l = ln(1 + L(1−λ)/λ).
        epsilon_local: ε_l of one message.
        epsilon_central: ε_c of the group after shuffling (by ``bound``).
        delta: δ of the group.
        bound: name of the amplification bound used.
    """

    levels: int
    lam: float
    epsilon_local: float
    epsilon_central: float
    delta: float
    bound: str

    @classmethod
    def for_central(
        cls, *, levels: int, epsilon: float, delta: float, n: int, bound: str | None = None
    ) -> KRRLevels:
        """The least-noise k-RR over ``levels`` whose shuffle of n messages is (ε, δ)-DP.

        ``bound`` forces one registered amplification bound; ``None`` takes the tightest
        (largest ε_l) of every bound registered for k-RR, which can take seconds per call
        for the numerical ones (results are cached per configuration).
        """
        eps_l, name = _krr_local(levels, float(epsilon), float(delta), int(n), bound)
        return cls(levels, krr_lambda(eps_l, levels), eps_l, epsilon, delta, name)

    @classmethod
    def for_search(cls, *, levels: int, epsilon: float, delta: float, n: int) -> KRRLevels:
        """As :meth:`for_central` with the closed-form bounds only (fast; for tuning k),
        or with every bound where no closed form applies (small n)."""
        best: tuple[float, str] | None = None
        for name in _CLOSED_FORM_BOUNDS:
            bound = BOUNDS.get(name)
            if bound is None or not bound.applies_to("krr"):
                continue
            try:
                e = bound.epsilon_local(epsilon_central=epsilon, n=n, delta=delta, k=levels)
            except BoundNotApplicable:
                continue
            if best is None or e > best[0]:
                best = (e, name)
        if best is None:
            # Small crowds, where no closed form applies: the numerical bounds (cheap there).
            return cls.for_central(levels=levels, epsilon=epsilon, delta=delta, n=n)
        return cls(levels, krr_lambda(best[0], levels), best[0], epsilon, delta, best[1])

    @property
    def mean_level(self) -> float:
        return (self.levels - 1) / 2.0

    def randomize(self, v: npt.NDArray[np.int64], *, rng: RNGLike) -> npt.NDArray[np.int64]:
        rng = as_generator(rng)
        out = np.array(v, dtype=np.int64, copy=True)
        uniform = np.flatnonzero(rng.random(out.shape[0]) < self.lam)
        out[uniform] = rng.integers(0, self.levels, size=uniform.size)
        return out

    def debiased_sum(self, level_sum: float, *, n: int, received: int) -> float:
        mu = self.mean_level
        return (level_sum - self.lam * n * mu - (received - n) * mu) / (1.0 - self.lam)

    def variance(self, *, v2_sum: float, v_sum: float, n: int, fakes: int) -> float:
        """E over v of Var(:meth:`debiased_sum` | v), from E Σv, E Σv², n and the fakes."""
        lam, L, mu = self.lam, self.levels, self.mean_level
        s2 = (L - 1) * (2 * L - 1) / 6.0
        per = (1 - lam) * lam * v2_sum - 2 * (1 - lam) * lam * mu * v_sum
        per += n * (lam * s2 - lam**2 * mu**2)
        return (per + fakes * (L * L - 1) / 12.0) / (1.0 - lam) ** 2

    def worst_variance(self, *, n: int, fakes: int = 0) -> float:
        lam, L, mu = self.lam, self.levels, self.mean_level
        s2 = (L - 1) * (2 * L - 1) / 6.0
        return (n * (lam * s2 - lam**2 * mu**2) + fakes * (L * L - 1) / 12.0) / (1 - lam) ** 2


#: Bounds cheap enough to evaluate inside a precision search (the papers' own bounds).
_CLOSED_FORM_BOUNDS = ("thm3_cheu", "thm4_balle", "thm2_fmt_closed_form")


@functools.lru_cache(maxsize=1024)
def _krr_local(
    levels: int, epsilon: float, delta: float, n: int, bound: str | None
) -> tuple[float, str]:
    return largest_local(
        epsilon_central=epsilon, n=n, delta=delta, family="krr", k=levels, bound=bound
    )


def _rounded_moments(x: npt.NDArray[np.float64], k: int) -> tuple[float, float]:
    """E Σ R_k(x_i) and E Σ R_k(x_i)² (exact over the rounding coin)."""
    scaled = np.asarray(x, dtype=np.float64) * k
    fl = np.floor(scaled)
    f = scaled - fl
    return float(scaled.sum()), float(np.sum(fl * fl + f * (2 * fl + 1)))


def _check_reals(protocol: ShuffleProtocol, values: npt.ArrayLike) -> npt.NDArray[np.float64]:
    return np.asarray(protocol.validate_values(values), dtype=np.float64)


def _argmin_int(f: Callable[[int], float], lo: int, hi: int, *, what: str) -> int:
    """Integer in [lo, hi] minimizing f (f may raise BoundNotApplicable: skipped).

    Raises:
        BoundNotApplicable: for every k, naming ``what`` and the reason at k = lo.
    """
    best, best_k, first = math.inf, None, None
    for k in range(lo, hi + 1):
        try:
            v = f(k)
        except BoundNotApplicable as exc:
            first = first or f"at precision {k}: {exc}"
            continue
        if v < best:
            best, best_k = v, k
    if best_k is None:
        raise BoundNotApplicable(
            f"{what}: no precision in [{lo}, {hi}] has an applicable amplification bound "
            f"({first}); use more users or a larger epsilon"
        )
    return best_k


def _check_precision(k: Any, name: str = "precision") -> int:
    value = check_n(k, name, 1)
    if value > MAX_PRECISION:
        raise ParameterError(f"{name} must be <= {MAX_PRECISION}, got {value}")
    return value


# ---------------------------------------------------------------------------------------
# RSum_KR — Balle, Bell, Gascón, Nissim (Crypto'19, arXiv 1903.02837) §4
# ---------------------------------------------------------------------------------------


class RSumKR(ShuffleProtocol):
    """``RSum_KR``: randomized rounding to {0..k}, then (k+1)-ary RR (privacy blanket).

    Each user sends one message R_k(x_i) passed through k-RR over L = k + 1 levels with the
    λ of the tightest k-RR amplification bound (survey Thm 4 = Balle et al. Thm 3.1 and
    its successors). Estimate Σx ≈ Ŝ/k (module doc), unbiased, with

        MSE ≤ n/(4k²) + n(λ s₂ − λ²μ²)/((1−λ)k)².

    Balle et al. pick k ∝ (ε² n / log(1/δ))^{1/3} to balance the two terms (error
    O(n^{1/6} log^{1/3}(1/δ)/ε^{2/3})); by default we take the integer k minimizing this
    worst-case MSE with the λ of the closed-form bounds (Thm 2–4: fast enough to search),
    around k* = (3nε²/(7 ln(2/δ)))^{1/3} (the minimizer of the Thm 3.1 form
    n/(4k²) + 7k ln(2/δ)/(6ε²)); the chosen k then gets the λ of the tightest registered
    bound (``bound`` forces one). ``precision`` overrides k.
    """

    name: ClassVar[str] = "rsum_kr"
    input_kind: ClassVar[InputKind] = InputKind.REAL01

    def __init__(
        self,
        *,
        epsilon: float,
        delta: float,
        n: int,
        precision: int | None = None,
        bound: str | None = None,
    ) -> None:
        eps = check_epsilon(epsilon)
        d = check_delta(delta)
        self._n = check_n(n)
        if precision is None:
            k_star = (3.0 * n * eps**2 / (7.0 * math.log(2.0 / d))) ** (1.0 / 3.0)
            lo, hi = max(1, int(k_star / 4)), max(4, int(4 * k_star) + 4)

            def mse(k: int) -> float:
                g = KRRLevels.for_search(levels=k + 1, epsilon=eps, delta=d, n=n)
                return n / (4.0 * k * k) + g.worst_variance(n=n) / k**2

            precision = _argmin_int(mse, lo, min(hi, MAX_PRECISION), what=f"rsum_kr at n={n}")
        self.k = _check_precision(precision)
        try:
            self.group = KRRLevels.for_central(
                levels=self.k + 1, epsilon=eps, delta=d, n=n, bound=bound
            )
        except BoundNotApplicable as exc:
            raise BoundNotApplicable(f"rsum_kr with precision {self.k}: {exc}") from None
        self._size = uint_codec_size(self.k + 1)

    @property
    def domain(self) -> int:
        return self.k + 1

    @property
    def message_size(self) -> int:
        return self._size

    @property
    def messages_per_user(self) -> float:
        return 1.0

    @property
    def privacy(self) -> PrivacyGuarantee:
        g = self.group
        return PrivacyGuarantee(g.epsilon_central, g.epsilon_local, g.delta, g.bound)

    def __repr__(self) -> str:
        g = self.group
        return (
            f"RSumKR(precision={self.k}, n={self._n}, lam={g.lam:.6g}, "
            f"epsilon_local={g.epsilon_local:.6g}, bound={g.bound!r})"
        )

    def randomize(self, values: npt.ArrayLike, *, rng: RNGLike) -> npt.NDArray[Any]:
        rng = as_generator(rng)
        x = _check_reals(self, values)
        return self.group.randomize(randomized_round(x, self.k, rng=rng), rng=rng)

    def encode(self, messages: npt.NDArray[Any]) -> npt.NDArray[np.uint8]:
        return encode_uints(messages, self._size)

    def decode(self, rows: npt.NDArray[np.uint8]) -> tuple[npt.NDArray[Any], npt.NDArray[np.bool_]]:
        v = decode_uints(rows, self._size)
        return v, v <= self.k

    def sample_fakes(self, count: int, *, rng: RNGLike) -> npt.NDArray[Any]:
        rng = as_generator(rng)
        return rng.integers(0, self.k + 1, size=check_n(count, "count", 0))

    def estimate(self, messages: npt.NDArray[Any], *, n: int, n_fakes: int) -> Estimate:
        m = np.asarray(messages, dtype=np.int64).reshape(-1)
        s_hat = self.group.debiased_sum(float(m.sum()), n=n, received=int(m.size))
        fakes = max(int(m.size) - n, 0)
        var = n / (4.0 * self.k**2) + self.group.worst_variance(n=n, fakes=fakes) / self.k**2
        return Estimate(
            values=np.array([s_hat / self.k]),
            expected_std=np.array([math.sqrt(var)]),
            messages_used=int(m.size),
            extra={"precision": self.k, "variance_is_bound": True},
        )

    def variance(self, values: npt.ArrayLike, *, n_fakes: int = 0) -> float:
        """Exact variance of the estimate for these inputs (rounding + k-RR + fakes).

        Args:
            values: the users' values.
            n_fakes: the fake values among the messages.

        Returns:
            The variance of the estimate.
        """
        x = _check_reals(self, values)
        v_sum, v2_sum = _rounded_moments(x, self.k)
        var = self.group.variance(v2_sum=v2_sum, v_sum=v_sum, n=x.size, fakes=n_fakes)
        # Law of total variance: E Var(Ŝ | v) above, plus Var E(Ŝ | v) = Var Σ v (rounding).
        return (var + rounding_variance(x, self.k)) / self.k**2

    def truth(self, values: npt.ArrayLike) -> npt.NDArray[np.float64]:
        return np.array([float(_check_reals(self, values).sum())])


# ---------------------------------------------------------------------------------------
# RSum_RR — Cheu, Smith, Ullman, Zeber, Zhilyaev (Eurocrypt'19, arXiv 1808.01394) §5
# ---------------------------------------------------------------------------------------


class RSumRR(ShuffleProtocol):
    """``RSum_RR``: x ↦ r unary bits by randomized rounding, binary RR (``Cnt_RR``) per bit.

    User i rounds x_i to v_i = R_r(x_i) ∈ {0..r} and sends the r bits 1^{v_i} 0^{r−v_i},
    each through binary randomized response at (ε', δ'), pooled in one shuffle. The r bit
    positions are r uses of the counting protocol, so (ε_c, δ) splits by advanced
    composition (Dwork–Rothblum–Vadhan; survey §4.3): δ' = δ/(2r), slack δ'' = δ/2 and the
    largest ε' with √(2r ln(1/δ''))ε' + rε'(e^{ε'}−1) ≤ ε_c (or basic ε_c/r if larger).
    λ' comes from the tightest binary-RR bound at (ε', δ') (survey Thm 3, Cheu et al.).
    Estimator: Σx ≈ [(S − λ' r n/2 − (N − rn)/2)/(1 − λ')]/r over all N received bits;
    unbiased, variance n r (λ'/2)(1 − λ'/2)/((1−λ')r)² + Σf(1−f)/r² (data-free bound
    n/(4r²) for the second term). Cheu et al. take r = Θ(ε√n / log(1/δ)) (error
    O(log(1/δ)/ε) with O(ε√n) messages); by default we take the r ∈ [1, 64] minimizing the
    worst-case MSE with the λ'(r) of the closed-form bounds, then give that r the λ' of the
    tightest registered bound (``bound`` forces one). ``precision`` overrides r.
    """

    name: ClassVar[str] = "rsum_rr"
    input_kind: ClassVar[InputKind] = InputKind.REAL01
    MAX_DEFAULT_BITS: ClassVar[int] = 64

    def __init__(
        self,
        *,
        epsilon: float,
        delta: float,
        n: int,
        precision: int | None = None,
        bound: str | None = None,
    ) -> None:
        self._eps = check_epsilon(epsilon)
        self._delta = check_delta(delta)
        self._n = check_n(n)
        if precision is None:

            def mse(r: int) -> float:
                g = self._bit_group(r, search=True)
                lam = g.lam
                return n / (4.0 * r * r) + n * r * (lam / 2) * (1 - lam / 2) / ((1 - lam) * r) ** 2

            precision = _argmin_int(mse, 1, self.MAX_DEFAULT_BITS, what=f"rsum_rr at n={n}")
        self.r = _check_precision(precision)
        try:
            self.group = self._bit_group(self.r, bound=bound)
        except BoundNotApplicable as exc:
            raise BoundNotApplicable(f"rsum_rr with {self.r} bits: {exc}") from None

    def _bit_group(self, r: int, *, search: bool = False, bound: str | None = None) -> KRRLevels:
        eps_bit = advanced_composition_epsilon(self._eps, self._delta / 2.0, r)
        if search:
            return KRRLevels.for_search(
                levels=2, epsilon=eps_bit, delta=self._delta / (2.0 * r), n=self._n
            )
        return KRRLevels.for_central(
            levels=2, epsilon=eps_bit, delta=self._delta / (2.0 * r), n=self._n, bound=bound
        )

    @property
    def domain(self) -> int:
        return self.r + 1

    @property
    def message_size(self) -> int:
        return 1

    @property
    def messages_per_user(self) -> float:
        return float(self.r)

    @property
    def privacy(self) -> PrivacyGuarantee:
        g = self.group
        return PrivacyGuarantee(
            epsilon_central=self._eps,
            epsilon_local=self.r * g.epsilon_local,
            delta=self._delta,
            bound=f"advanced_composition[{self.r}] x {g.bound}",
        )

    def __repr__(self) -> str:
        g = self.group
        return (
            f"RSumRR(bits={self.r}, n={self._n}, epsilon={self._eps:g}, delta={self._delta:g}, "
            f"epsilon_bit={g.epsilon_central:.6g}, lam={g.lam:.6g}, bound={g.bound!r})"
        )

    def randomize(self, values: npt.ArrayLike, *, rng: RNGLike) -> npt.NDArray[Any]:
        rng = as_generator(rng)
        x = _check_reals(self, values)
        v = randomized_round(x, self.r, rng=rng)
        bits = (np.arange(self.r)[None, :] < v[:, None]).astype(np.int64).reshape(-1)
        return self.group.randomize(bits, rng=rng).astype(np.uint8)

    def encode(self, messages: npt.NDArray[Any]) -> npt.NDArray[np.uint8]:
        return encode_bits(messages)

    def decode(self, rows: npt.NDArray[np.uint8]) -> tuple[npt.NDArray[Any], npt.NDArray[np.bool_]]:
        return decode_bits(rows)

    def sample_fakes(self, count: int, *, rng: RNGLike) -> npt.NDArray[Any]:
        rng = as_generator(rng)
        return rng.integers(0, 2, size=check_n(count, "count", 0)).astype(np.uint8)

    def estimate(self, messages: npt.NDArray[Any], *, n: int, n_fakes: int) -> Estimate:
        m = np.asarray(messages, dtype=np.int64).reshape(-1)
        r = self.r
        s_hat = self.group.debiased_sum(float(m.sum()), n=n * r, received=int(m.size))
        fakes = max(int(m.size) - n * r, 0)
        var = n / (4.0 * r * r) + self.group.worst_variance(n=n * r, fakes=fakes) / r**2
        return Estimate(
            values=np.array([s_hat / r]),
            expected_std=np.array([math.sqrt(var)]),
            messages_used=int(m.size),
            extra={"precision": r, "variance_is_bound": True},
        )

    def variance(self, values: npt.ArrayLike, *, n_fakes: int = 0) -> float:
        """Exact variance for these inputs (binary RR has data-free per-bit variance).

        Args:
            values: the users' values.
            n_fakes: the fake values among the messages.

        Returns:
            The variance of the estimate.
        """
        x = _check_reals(self, values)
        r = self.r
        return (
            self.group.worst_variance(n=x.size * r, fakes=n_fakes) + rounding_variance(x, r)
        ) / r**2

    def truth(self, values: npt.ArrayLike) -> npt.NDArray[np.float64]:
        return np.array([float(_check_reals(self, values).sum())])


# ---------------------------------------------------------------------------------------
# RSum_RM — Balle, Bell, Gascón, Nissim (CCS'20, arXiv 2002.00817 / 1906.09116) recursive
# ---------------------------------------------------------------------------------------


class RSumRM(ShuffleProtocol):
    """``RSum_RM``: m precisions, one k-RR message (and one shuffler) per precision.

    Precisions p_1..p_m with q_j = p_1⋯p_j. User i writes x_i in mixed radix:
    s_{i1} = ⌊p_1 x⌋, r_1 = p_1 x − s_{i1}; s_{ij} = ⌊p_j r_{j−1}⌋, r_j = p_j r_{j−1} − s_{ij}
    for j < m; the last digit is randomized-rounded, s_{im} = R_{p_m}(r_{m−1}) ∈ {0..p_m}, so
    Σ_j s_{ij}/q_j is an unbiased encoding of x_i. Digit j is sent through k-RR over L_j
    levels (L_j = p_j for j < m, p_m + 1 for the last) at (ε/m, δ/m) — basic composition over
    the m messages gives (ε, δ) (survey §4.3: ε_c is split as ε_c/m, δ/m). Estimate
    Σ_j Ŝ_j / q_j, unbiased, variance Σ_j Var Ŝ_j / q_j² + Σ f(1−f)/q_m².

    Precisions (the paper's generic choice; survey: p_j = n^{3^{j−m−1}} up to constants, and
    m = log₃(log₂ n) messages): with ε_j = ε/m, p_max is the largest precision with λ ≤ 1 in
    Thm 3.1 at δ/m for p + 1 levels, and::

        p_max = ⌊(n−1) ε_j / max{14 ln(2m/δ)/ε_j, 27}⌋ − 1
        a = ((3^m − 1) n ε² / m³)^{3^{−m−1}},   p_j = min{⌈a^{3^j}⌉, p_max},  j = 1..m.

    Messages are rows (j, level): the precision index j travels with every message so each
    precision can have its own shuffler (:meth:`channel_of`), and the analyzer splits by j.
    """

    name: ClassVar[str] = "rsum_rm"
    input_kind: ClassVar[InputKind] = InputKind.REAL01

    def __init__(
        self,
        *,
        epsilon: float,
        delta: float,
        n: int,
        messages: int | None = None,
        precisions: tuple[int, ...] | None = None,
        bound: str | None = None,
    ) -> None:
        eps = check_epsilon(epsilon)
        d = check_delta(delta)
        self._n = n = check_n(n, "n", 2)
        self._eps, self._delta = eps, d
        if precisions is None:
            m = (
                check_n(messages, "messages", 1)
                if messages is not None
                else max(1, round(math.log(math.log2(max(n, 3)), 3)))
            )
            precisions = self.default_precisions(epsilon=eps, delta=d, n=n, messages=m)
        self.precisions = tuple(_check_precision(p) for p in precisions)
        m = len(self.precisions)
        if m < 1:
            raise ParameterError("rsum_rm needs at least one precision")
        if any(p < 2 for p in self.precisions[:-1]):
            raise ParameterError(
                f"rsum_rm: every precision but the last must be >= 2, got {self.precisions}"
            )
        self.levels = tuple(p + (1 if j == m - 1 else 0) for j, p in enumerate(self.precisions))
        try:
            self.groups = tuple(
                KRRLevels.for_central(levels=L, epsilon=eps / m, delta=d / m, n=n, bound=bound)
                for L in self.levels
            )
        except BoundNotApplicable as exc:
            raise BoundNotApplicable(f"rsum_rm with precisions {self.precisions}: {exc}") from None
        self.q = tuple(int(v) for v in np.cumprod(np.asarray(self.precisions, dtype=np.float64)))
        self._vsize = uint_codec_size(max(self.levels))

    @staticmethod
    def default_precisions(
        *, epsilon: float, delta: float, n: int, messages: int
    ) -> tuple[int, ...]:
        """The paper's precisions p_1..p_m for these parameters (class docstring).

        Args:
            epsilon: the target ε.
            delta: the target δ.
            n: the number of users.
            messages: the number m of messages (precisions), at least 1.

        Returns:
            The m precisions.

        Raises:
            ParameterError: n too small for the blanket bound at the largest allowed precision.
        """
        m = check_n(messages, "messages", 1)
        eps_j = epsilon / m
        # Thm 3.1 needs λ = max{14k ln(2m/δ)/((n−1)ε_j²), 27k/((n−1)ε_j)} ≤ 1 for k levels;
        # the last digit has p + 1 levels, hence the − 1.
        p_max = (
            math.floor((n - 1) * eps_j / max(14.0 * math.log(2.0 * m / delta) / eps_j, 27.0)) - 1
        )
        if p_max < 2:
            raise ParameterError(
                f"rsum_rm: n={n} is too small for epsilon={epsilon:g}, delta={delta:g}, "
                f"m={m}: the largest precision the blanket bound allows is {p_max} < 2"
            )
        a = ((3**m - 1) * n * epsilon**2 / m**3) ** (3.0 ** (-m - 1))
        return tuple(min(math.ceil(a ** (3**j)), p_max) for j in range(1, m + 1))

    @property
    def channels(self) -> int:
        """Number of precisions m: one shuffler (channel) per precision."""
        return len(self.precisions)

    def channel_of(self, messages: npt.NDArray[Any]) -> npt.NDArray[np.int64]:
        """The precision index of each message (column 0).

        Args:
            messages: the ``(precision index, level)`` messages.

        Returns:
            The channel of each message.
        """
        return np.asarray(messages, dtype=np.int64).reshape(-1, 2)[:, 0]

    @property
    def domain(self) -> int:
        return int(self.q[-1]) + 1

    @property
    def message_size(self) -> int:
        return 1 + self._vsize

    @property
    def messages_per_user(self) -> float:
        return float(len(self.precisions))

    @property
    def privacy(self) -> PrivacyGuarantee:
        bounds = sorted({g.bound for g in self.groups})
        return PrivacyGuarantee(
            epsilon_central=self._eps,
            epsilon_local=float(sum(g.epsilon_local for g in self.groups)),
            delta=self._delta,
            bound=f"basic_composition[{self.channels}] x {'+'.join(bounds)}",
        )

    def __repr__(self) -> str:
        lams = ", ".join(f"{g.lam:.4g}" for g in self.groups)
        return f"RSumRM(precisions={self.precisions}, n={self._n}, lam=({lams}))"

    def _digits(self, x: npt.NDArray[np.float64], *, rng: np.random.Generator) -> Any:
        m = len(self.precisions)
        digits = np.empty((x.size, m), dtype=np.int64)
        rem = x.copy()
        for j, p in enumerate(self.precisions[:-1]):
            scaled = rem * p
            # x = 1 gives scaled = p; keep digits in [0, p) by carrying the top value down.
            dj = np.minimum(np.floor(scaled), p - 1)
            digits[:, j] = dj
            rem = scaled - dj
        digits[:, m - 1] = randomized_round(rem, self.precisions[-1], rng=rng)
        return digits

    def randomize(self, values: npt.ArrayLike, *, rng: RNGLike) -> npt.NDArray[Any]:
        rng = as_generator(rng)
        x = _check_reals(self, values)
        digits = self._digits(x, rng=rng)
        m = len(self.precisions)
        out = np.empty((x.size, m, 2), dtype=np.int64)
        out[:, :, 0] = np.arange(m)[None, :]
        for j, g in enumerate(self.groups):
            out[:, j, 1] = g.randomize(digits[:, j], rng=rng)
        return out.reshape(-1, 2)

    def encode(self, messages: npt.NDArray[Any]) -> npt.NDArray[np.uint8]:
        msgs = np.asarray(messages, dtype=np.int64).reshape(-1, 2)
        out = np.empty((msgs.shape[0], self.message_size), dtype=np.uint8)
        out[:, 0] = msgs[:, 0]
        out[:, 1:] = encode_uints(msgs[:, 1], self._vsize)
        return out

    def decode(self, rows: npt.NDArray[np.uint8]) -> tuple[npt.NDArray[Any], npt.NDArray[np.bool_]]:
        rows = np.asarray(rows, dtype=np.uint8).reshape(-1, self.message_size)
        j = rows[:, 0].astype(np.int64)
        v = decode_uints(rows[:, 1:], self._vsize)
        limits = np.asarray(self.levels, dtype=np.int64)
        valid = j < len(self.levels)
        valid &= v < limits[np.minimum(j, len(self.levels) - 1)]
        return np.stack([j, v], axis=1), valid

    def sample_channel_fakes(self, count: int, *, channel: int, rng: RNGLike) -> npt.NDArray[Any]:
        """Fakes for precision ``channel``'s own shuffler chain: that precision's index and a
        uniform level of it (what the chain's honest messages look like).

        Args:
            count: the number of fakes.
            channel: the precision index, in [0, channels).
            rng: the generator, or a seed (:data:`~protocols.RNGLike`).

        Returns:
            The ``(count, 2)`` fake messages.

        Raises:
            ParameterError: ``channel`` out of range, or a negative count.
        """
        rng = as_generator(rng)
        count = check_n(count, "count", 0)
        if not 0 <= channel < self.channels:
            raise ParameterError(
                f"rsum_rm: channel must lie in [0, {self.channels}), got {channel}"
            )
        v = rng.integers(0, self.levels[channel], size=count)
        return np.stack([np.full(count, channel, dtype=np.int64), v], axis=1)

    def sample_fakes(self, count: int, *, rng: RNGLike) -> npt.NDArray[Any]:
        """Uniform precision index, then a uniform level of that precision (fakes of a
        single chain carrying every precision; per-precision chains use
        :meth:`sample_channel_fakes`).

        Args:
            count: the number of fakes.
            rng: the generator, or a seed (:data:`~protocols.RNGLike`).

        Returns:
            The ``(count, 2)`` fake messages.
        """
        rng = as_generator(rng)
        count = check_n(count, "count", 0)
        j = rng.integers(0, len(self.levels), size=count)
        v = np.floor(rng.random(count) * np.asarray(self.levels)[j]).astype(np.int64)
        return np.stack([j, v], axis=1)

    def estimate(self, messages: npt.NDArray[Any], *, n: int, n_fakes: int) -> Estimate:
        msgs = np.asarray(messages, dtype=np.int64).reshape(-1, 2)
        total, var = 0.0, n / (4.0 * self.q[-1] ** 2)
        per_group = []
        for j, g in enumerate(self.groups):
            vals = msgs[msgs[:, 0] == j, 1]
            # Every user sends exactly one message per precision: the surplus are fakes.
            s_hat = g.debiased_sum(float(vals.sum()), n=n, received=int(vals.size))
            total += s_hat / self.q[j]
            fakes = max(int(vals.size) - n, 0)
            var += g.worst_variance(n=n, fakes=fakes) / self.q[j] ** 2
            per_group.append(int(vals.size))
        return Estimate(
            values=np.array([total]),
            expected_std=np.array([math.sqrt(var)]),
            messages_used=int(msgs.shape[0]),
            extra={"precisions": list(self.precisions), "messages_per_precision": per_group},
        )

    def variance(self, values: npt.ArrayLike, *, n_fakes: int = 0) -> float:
        """Exact variance for these inputs (fakes: ``n_fakes`` per precision).

        Args:
            values: the users' values.
            n_fakes: the fake values among the messages.

        Returns:
            The variance of the estimate.
        """
        x = _check_reals(self, values)
        m = len(self.precisions)
        # Digits j < m are deterministic; the last is rounded from the remainder.
        rem = x.copy()
        var = 0.0
        for j, (p, g) in enumerate(zip(self.precisions, self.groups, strict=True)):
            if j < m - 1:
                scaled = rem * p
                dj = np.minimum(np.floor(scaled), p - 1)
                rem = scaled - dj
                v_sum, v2_sum = float(dj.sum()), float((dj * dj).sum())
            else:
                v_sum, v2_sum = _rounded_moments(rem, p)
            var += g.variance(v2_sum=v2_sum, v_sum=v_sum, n=x.size, fakes=n_fakes) / self.q[j] ** 2
        return var + rounding_variance(rem, self.precisions[-1]) / self.q[-1] ** 2

    def truth(self, values: npt.ArrayLike) -> npt.NDArray[np.float64]:
        return np.array([float(_check_reals(self, values).sum())])


# ---------------------------------------------------------------------------------------
# registry
# ---------------------------------------------------------------------------------------


def _opt_int(spec: ProtocolSpec, key: str) -> int | None:
    return integer_option(spec, key, minimum=1)


@register_protocol("rsum_kr")
def _build_rsum_kr(spec: ProtocolSpec) -> ShuffleProtocol:
    return RSumKR(
        epsilon=spec.epsilon,
        delta=spec.delta,
        n=spec.n,
        precision=_opt_int(spec, "precision"),
        bound=spec.bound,
    )


@register_protocol("rsum_rr")
def _build_rsum_rr(spec: ProtocolSpec) -> ShuffleProtocol:
    return RSumRR(
        epsilon=spec.epsilon,
        delta=spec.delta,
        n=spec.n,
        precision=_opt_int(spec, "precision"),
        bound=spec.bound,
    )


@register_protocol("rsum_rm")
def _build_rsum_rm(spec: ProtocolSpec) -> ShuffleProtocol:
    return RSumRM(
        epsilon=spec.epsilon,
        delta=spec.delta,
        n=spec.n,
        messages=_opt_int(spec, "messages"),
        bound=spec.bound,
    )
