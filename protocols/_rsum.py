"""Real summation in the shuffle model: ``RSum_RR``, ``RSum_KR``, ``RSum_RM``, ``RSum_DSG``.

Every user holds x_i ∈ [0, 1]; the target is Σ x_i (survey §4.3, table 8). All four
protocols first map x to integers by unbiased randomized rounding at a precision k:
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

from ._amplification import BOUNDS, krr_lambda, largest_local
from ._base import (
    TALLY_BLOCK,
    Estimate,
    HonestUsersBound,
    InputKind,
    MessageTally,
    PrivacyGuarantee,
    ShareSpec,
    ShuffleProtocol,
    check_delta,
    check_epsilon,
    check_n,
)
from ._cnt_pure import PureBitCounter, check_tau, default_tau, pure_bound_name
from ._errors import BoundNotApplicable, ParameterError
from ._krr import (
    ModularMessages,
    decode_bits,
    decode_uints,
    encode_bits,
    encode_uints,
    sum_mod,
    uint_codec_size,
)
from ._noise import polya, symmetric_geometric_variance
from ._registry import ProtocolSpec, integer_option, register_protocol

__all__ = [
    "KRRLevels",
    "RSumDSG",
    "RSumKR",
    "RSumPURE",
    "RSumRM",
    "RSumRR",
    "advanced_composition_epsilon",
    "randomized_round",
]

#: Largest precision any of these protocols accepts (levels must stay a small codec).
MAX_PRECISION = 1 << 24


def randomized_round(
    x: npt.NDArray[np.float64], k: int, *, rng: np.random.Generator
) -> npt.NDArray[np.int64]:
    """R_k(x) = ⌊xk⌋ + Ber(xk − ⌊xk⌋) in {0, …, k} (unbiased: E R_k(x) = xk)."""
    scaled = np.asarray(x, dtype=np.float64) * k
    floor = np.floor(scaled)
    up = np.asarray(rng.random(scaled.shape) < (scaled - floor), dtype=np.int64)
    return np.asarray(np.minimum(floor.astype(np.int64) + up, k), dtype=np.int64)


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

    def randomize(
        self, v: npt.NDArray[np.int64], *, rng: np.random.Generator
    ) -> npt.NDArray[np.int64]:
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
    if bound is None:
        return largest_local(epsilon_central=epsilon, n=n, delta=delta, family="krr", k=levels)
    try:
        b = BOUNDS[bound]
    except KeyError:
        raise ParameterError(
            f"unknown bound {bound!r}; choose one of: {', '.join(sorted(BOUNDS))}"
        ) from None
    if not b.applies_to("krr"):
        raise BoundNotApplicable(f"bound {bound!r} does not cover k-RR randomizers")
    return b.epsilon_local(epsilon_central=epsilon, n=n, delta=delta, k=levels), bound


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

    def randomize(self, values: npt.ArrayLike, *, rng: np.random.Generator) -> npt.NDArray[Any]:
        x = _check_reals(self, values)
        return self.group.randomize(randomized_round(x, self.k, rng=rng), rng=rng)

    def encode(self, messages: npt.NDArray[Any]) -> npt.NDArray[np.uint8]:
        return encode_uints(messages, self._size)

    def decode(self, rows: npt.NDArray[np.uint8]) -> tuple[npt.NDArray[Any], npt.NDArray[np.bool_]]:
        v = decode_uints(rows, self._size)
        return v, v <= self.k

    def sample_fakes(self, count: int, *, rng: np.random.Generator) -> npt.NDArray[Any]:
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
        """Exact variance of the estimate for these inputs (rounding + k-RR + fakes)."""
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

    def randomize(self, values: npt.ArrayLike, *, rng: np.random.Generator) -> npt.NDArray[Any]:
        x = _check_reals(self, values)
        v = randomized_round(x, self.r, rng=rng)
        bits = (np.arange(self.r)[None, :] < v[:, None]).astype(np.int64).reshape(-1)
        return self.group.randomize(bits, rng=rng).astype(np.uint8)

    def encode(self, messages: npt.NDArray[Any]) -> npt.NDArray[np.uint8]:
        return encode_bits(messages)

    def decode(self, rows: npt.NDArray[np.uint8]) -> tuple[npt.NDArray[Any], npt.NDArray[np.bool_]]:
        return decode_bits(rows)

    def sample_fakes(self, count: int, *, rng: np.random.Generator) -> npt.NDArray[Any]:
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
        """Exact variance for these inputs (binary RR has data-free per-bit variance)."""
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
    m = log₃(log₂ n) messages): with ε_j = ε/m,
        p_max = ⌊(n−1) ε_j / max{14 ln(2m/δ)/ε_j, 27}⌋ − 1  (λ ≤ 1 in Thm 3.1 at δ/m for p + 1
                                                            levels)
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
        """The precision index of each message (column 0)."""
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

    def randomize(self, values: npt.ArrayLike, *, rng: np.random.Generator) -> npt.NDArray[Any]:
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

    def sample_channel_fakes(
        self, count: int, *, channel: int, rng: np.random.Generator
    ) -> npt.NDArray[Any]:
        """Fakes for precision ``channel``'s own shuffler chain: that precision's index and a
        uniform level of it (what the chain's honest messages look like)."""
        count = check_n(count, "count", 0)
        if not 0 <= channel < self.channels:
            raise ParameterError(
                f"rsum_rm: channel must lie in [0, {self.channels}), got {channel}"
            )
        v = rng.integers(0, self.levels[channel], size=count)
        return np.stack([np.full(count, channel, dtype=np.int64), v], axis=1)

    def sample_fakes(self, count: int, *, rng: np.random.Generator) -> npt.NDArray[Any]:
        """Uniform precision index, then a uniform level of that precision (fakes of a
        single chain carrying every precision; per-precision chains use
        :meth:`sample_channel_fakes`)."""
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
        """Exact variance for these inputs (fakes: ``n_fakes`` per precision)."""
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
# RSum_DSG — Balle, Bell, Gascón, Nissim (arXiv 1906.09116): distributed geometric noise
# + Split-Mix (Ishai, Kushilevitz, Ostrovsky, Sahai FOCS'06)
# ---------------------------------------------------------------------------------------


#: β of ``RSum_DSG``: its modulus leaves room for every total noise |N| ≤ t with
#: P[|N| > t] ≤ β, so the wrap-around correction is exact except with probability ≤ β.
DSG_WRAP_PROBABILITY = 2.0**-40
#: Largest modulus ``RSum_DSG`` takes: Split-Mix shares and their sums are int64
#: (:func:`crypto.split_mix` accepts q ≤ 2^62).
MAX_DSG_MODULUS = 1 << 62


def dlap_tail(alpha: float, t: int) -> float:
    """P[|N| > t] = 2α^{t+1}/(1 + α) for N ~ DLap(α) and an integer t ≥ 0 (exact).

    P[N = k] = (1−α)/(1+α)·α^{|k|}, so P[N > t] = (1−α)/(1+α)·Σ_{k>t} α^k = α^{t+1}/(1+α),
    and the law is symmetric. Computed from ln α, so α near 1 keeps its precision.
    """
    if t < 0:
        return 1.0
    log_alpha = math.log(alpha)
    return min(1.0, math.exp(math.log(2.0) - math.log1p(alpha) + (t + 1) * log_alpha))


def dlap_room(alpha: float, beta: float) -> int:
    """The smallest integer t ≥ 0 with P[|N| > t] ≤ β for N ~ DLap(α) (:func:`dlap_tail`):
    t + 1 ≥ ln(2/((1 + α)β)) / ln(1/α)."""
    need = (math.log(2.0) - math.log1p(alpha) - math.log(beta)) / -math.log(alpha)
    t = max(0, math.ceil(need) - 1)
    while t > 0 and dlap_tail(alpha, t - 1) <= beta:  # rounding of `need`, either way
        t -= 1
    while dlap_tail(alpha, t) > beta:
        t += 1
    return t


class RSumDSG(ModularMessages, ShuffleProtocol):
    """``RSum_DSG``: rounding, distributed symmetric-geometric noise, Split-Mix over Z_q.

    User i sends v_i = R_p(x_i) + X_i mod q, with X_i = Pólya(1/n, α) − Pólya(1/n, α) and
    α = e^{−ε/p}: N = Σ_i X_i ~ DLap(α) exactly (survey Thm 8; :mod:`protocols._noise`), and
    S = Σ R_p(x_i) + N has sensitivity p in the data, so S is ε-DP (geometric mechanism;
    survey: SG(e^{−ε_c/p})). The esa encoder splits v_i into m uniform shares of Z_q
    (:attr:`share_spec`); the analyzer only learns z = S mod q, a post-processing of S
    whatever q is: the modulus moves no privacy, only the wrap-around and the share count.

    Wrap-around. The analyzer reads z in the window [np + M + 1 − q, np + M],
    M = ⌊(q − np)/2⌋: z > np + M means S was negative, z ← z − q (survey: the wrap-around
    correction). Since 0 ≤ Σ R_p(x_i) ≤ np, the window holds S whenever |N| ≤ r,
    r = ⌊(q − np − 1)/2⌋ (the room on the tighter side), so the estimate z/p equals S/p
    except with probability w = P[|N| > r] = 2α^{r+1}/(1 + α) (:attr:`wrap_probability`).
    q is the smallest power of two ≥ max(2(np + 1), np + 2t + 1), t = the smallest integer
    with P[|N| > t] ≤ β = :data:`DSG_WRAP_PROBABILITY` = 2^{−40} (exact DLap tail,
    :func:`dlap_room`), so r ≥ t and w ≤ β. Estimate z/p: S/p is unbiased with
        Var = (Σ f(1−f) + 2α/(1−α)²)/p²   (rounding ≤ n/4/p², noise 2α/(1−α)²/p²),
    and z/p differs from it only on that event: a wrap by k·q needs |N| > r + (|k| − 1)q,
    so |E z/p − Σx| ≤ (q/p)·w/(1 − α^q) ≤ (q/p)·β/(1 − α^q). With p = ⌈√n⌉ (the paper's
    choice) the MSE is O(1/ε²), independent of n.
    Where this differs from the paper: Balle et al.'s messages have O(log n) bits (arXiv
    1906.09116, abstract): q depends on n and p only, as this module's did until
    2026-11-30 (q ≥ 2(np + 1), a room of about np/2). The noise sd is √2·p/ε, so that room
    holds it only when εn ≫ 1: P[wrap] ≈ e^{−εn/2}. At ε = 0.05, n = 10 (q was 128) 13 %
    of runs decoded to the wrong multiple of q (all-ones data: mean error −4.4, sd 9 against
    a stated 28.3). The room now comes from the noise tail; the old floor 2(np + 1) is
    kept, so wherever it already gave r ≥ t (εn ≳ 57) q, the share count and the wire
    format are unchanged. ``estimate`` reports w for its n as ``wrap_probability``.

    Shares: the shuffled multiset of m shares per user is 2^{−σ}-close to its sum when
    m ≥ (2σ + log₂ q)/(log₂ n − log₂ e) + 1 (:meth:`ShareSpec.shares_for`, Balle et al.,
    the IKOS analysis); a view Δ-close to an ε-DP one is (ε, (1 + e^ε)Δ)-DP, so
    σ = log₂((1 + e^ε)/δ) makes the protocol (ε, δ)-DP. Since log₂ q > log₂ n, that bound
    is above 2 and the ``max(2, ·)`` floor of ``shares_for`` never decides m here. A
    ``shares`` below it is refused (fewer shares do not give the stated δ: at n = 3,
    ε = 1, δ = 10⁻⁶, m = 2 and the then q = 16 the exact ε at δ was 2.44); more are
    allowed, with the same (ε, δ). Needs n ≥ 3 (log₂ n > log₂ e). No local guarantee
    (ε_l = ∞).
    Fakes: ``sample_fakes(c)`` returns c values each uniform on Z_q whose total is 0 mod q,
    so they vanish from z and the estimator needs no correction (c = 1: the value 0).
    """

    name: ClassVar[str] = "rsum_dsg"
    input_kind: ClassVar[InputKind] = InputKind.REAL01

    def __init__(
        self,
        *,
        epsilon: float,
        delta: float,
        n: int,
        precision: int | None = None,
        shares: int | None = None,
    ) -> None:
        self._eps = check_epsilon(epsilon)
        self._delta = check_delta(delta)
        self._n = n = check_n(n, "n", 3)
        self.p = _check_precision(precision if precision is not None else math.isqrt(n - 1) + 1)
        self.alpha = math.exp(-self._eps / self.p)
        span = n * self.p
        # q: the old floor 2(np + 1), or np + 2t + 1 where DLap(α) exceeds ±t w.p. ≤ β.
        t = dlap_room(self.alpha, DSG_WRAP_PROBABILITY)
        self.q = 1 << max(2 * (span + 1) - 1, span + 2 * t).bit_length()
        if self.q > MAX_DSG_MODULUS:
            raise ParameterError(
                f"rsum_dsg: modulus q = 2^{self.q.bit_length() - 1} (n*p = {span} plus twice "
                f"the noise room {t} at epsilon={self._eps:g}, precision={self.p}) exceeds "
                "2^62; use a larger epsilon or a smaller precision"
            )
        # σ = log₂((1 + e^ε)/δ), in log space: e^ε overflows a double near ε = 710.
        self.sigma = (
            self._eps + math.log1p(math.exp(-self._eps)) - math.log(self._delta)
        ) / math.log(2.0)
        need = ShareSpec.shares_for(sigma=self.sigma, modulus=self.q, users=n)
        if shares is None:
            shares = need
        self.m = check_n(shares, "shares", 2)
        if self.m < need:
            raise ParameterError(
                f"rsum_dsg: shares={self.m} is below the {need} that make the shuffled shares "
                f"of n={n} users 2^-{self.sigma:.1f}-close to their sum mod q={self.q}, as "
                f"delta={self._delta:g} at epsilon={self._eps:g} needs; use shares >= {need} "
                "or omit the option"
            )
        self.share_spec = ShareSpec(modulus=self.q, shares=self.m)
        self._size = uint_codec_size(self.q)

    @property
    def wrap_probability(self) -> float:
        """w = P[|N| > ⌊(q − np − 1)/2⌋] ≤ β: the chance the estimate is off by a multiple
        of q/p (class docstring), exact for n honest users."""
        return dlap_tail(self.alpha, (self.q - self._n * self.p - 1) // 2)

    @property
    def domain(self) -> int:
        return self.p + 1

    @property
    def message_size(self) -> int:
        return self._size

    @property
    def messages_per_user(self) -> float:
        return float(self.m)

    @property
    def privacy(self) -> PrivacyGuarantee:
        return PrivacyGuarantee(
            epsilon_central=self._eps,
            epsilon_local=math.inf,
            delta=self._delta,
            bound=f"bbgn_dsg (distributed DLap + Split-Mix, m={self.m}, sigma={self.sigma:.1f})",
        )

    def __repr__(self) -> str:
        return (
            f"RSumDSG(precision={self.p}, n={self._n}, epsilon={self._eps:g}, "
            f"delta={self._delta:g}, q={self.q}, shares={self.m})"
        )

    def randomize(self, values: npt.ArrayLike, *, rng: np.random.Generator) -> npt.NDArray[Any]:
        x = _check_reals(self, values)
        v = randomized_round(x, self.p, rng=rng)
        # Each user's share of one DLap(α): Pólya(1/n, α) − Pólya(1/n, α) (survey Thm 8).
        r = 1.0 / self._n
        noise = np.asarray(polya(r, self.alpha, x.size, rng=rng), dtype=np.int64) - np.asarray(
            polya(r, self.alpha, x.size, rng=rng), dtype=np.int64
        )
        return np.asarray(np.mod(v + noise, self.q), dtype=np.int64)

    def estimate(self, messages: npt.NDArray[Any], *, n: int, n_fakes: int) -> Estimate:
        m = np.asarray(messages, dtype=np.int64).reshape(-1)
        z = sum_mod(m, self.q)
        span = n * self.p
        margin = (self.q - span) // 2
        wrapped = z > span + margin
        if wrapped:
            z -= self.q
        var = (n / 4.0 + symmetric_geometric_variance(self.alpha)) / self.p**2
        return Estimate(
            values=np.array([z / self.p]),
            expected_std=np.array([math.sqrt(var)]),
            messages_used=int(m.size),
            extra={
                "wrapped": bool(wrapped),
                "precision": self.p,
                "modulus": self.q,
                # P[z/p is off by a multiple of q/p] for these n users (class docstring).
                "wrap_probability": dlap_tail(self.alpha, (self.q - span - 1) // 2),
            },
        )

    def variance(self, values: npt.ArrayLike, *, n_fakes: int = 0) -> float:
        """Exact variance for these inputs: rounding plus one DLap(α)."""
        x = _check_reals(self, values)
        return (rounding_variance(x, self.p) + symmetric_geometric_variance(self.alpha)) / self.p**2

    def truth(self, values: npt.ArrayLike) -> npt.NDArray[np.float64]:
        return np.array([float(_check_reals(self, values).sum())])


# ---------------------------------------------------------------------------------------
# RSum_PURE — Ghazi et al. (ITC'20, arXiv 2002.01919): binary digits, Cnt_PURE per digit
# ---------------------------------------------------------------------------------------

#: Most binary digits RSum_PURE accepts (x·(2^p − 1) must stay exact in a double).
MAX_PURE_BITS = 48


def default_precision(n: int) -> int:
    """p = ⌈½ log₂ n⌉ + 1: RSum_PURE's default number of binary digits (see RSumPURE)."""
    return math.ceil(0.5 * math.log2(max(check_n(n), 2))) + 1


class RSumPURE(ShuffleProtocol):
    """``RSum_PURE``: p binary digits, the ``Cnt_PURE`` mechanism on each digit position.

    User i rounds x_i to v_i = R_{2^p−1}(x_i) ∈ {0, …, 2^p − 1} (unbiased) and, for each digit
    position j (weight 2^j), runs the ``Cnt_PURE`` randomizer on its bit b_ij at ε/p, sending
    τ messages (j, bit). A user changes at most p digit counts, so basic composition makes
    the whole ε-DP with δ = 0. Estimate Σ_j 2^j ĉ_j / (2^p − 1): unbiased, variance
    Σ_j 4^j Var ĉ_j / (2^p − 1)² + Σ f(1−f)/(2^p − 1)².

    Parameters. The paper sends O_ε(log³ n) messages: O(log n) digits, each a binary
    summation at ε/p with O_{ε/p}(log n) messages. Here p = ⌈½ log₂ n⌉ + 1, the fewest
    digits whose rounding stays O(1) (2^p − 1 ≥ √n, so its std is ≤ ½), and
    τ = :func:`~protocols._cnt_pure.default_tau` (n, ε/p) = 2⌈p log₂ n / ε⌉ + 1 per digit.
    The survey (§4.3) reads p = 2 log₂ n; that many digits split ε finer and cost more
    (n = 10^4, ε = 0.9: std 178 with 23 212 messages per user, against 43 with 1 912 here),
    so it is not the default (``precision`` and ``messages`` override p and τ). Each
    digit's counter is calibrated as :mod:`protocols._cnt_pure` says (λ from the exact
    central ε of the same-digit crowd). At large n it runs as a tally with ``--crypto
    ideal`` (per position: messages and ones).
    """

    name: ClassVar[str] = "rsum_pure"
    input_kind: ClassVar[InputKind] = InputKind.REAL01

    def __init__(
        self,
        *,
        epsilon: float,
        n: int,
        precision: int | None = None,
        messages: int | None = None,
    ) -> None:
        self._eps = check_epsilon(epsilon)
        self._n = n = check_n(n)
        bits = precision if precision is not None else default_precision(n)
        self.bits = check_n(bits, "precision (binary digits)", 1)
        if self.bits > MAX_PURE_BITS:
            raise ParameterError(
                f"rsum_pure: precision must be <= {MAX_PURE_BITS} binary digits, got {self.bits}"
            )
        self.scale = (1 << self.bits) - 1
        self._tau = check_tau(
            default_tau(n, self._eps / self.bits) if messages is None else messages
        )

    @functools.cached_property
    def bit(self) -> PureBitCounter:
        """Each digit's calibrated counter (at ε/p), derived on first use (up to a minute at
        n = 10^6), so listing the protocol or its message count costs nothing."""
        return PureBitCounter.derive(
            epsilon=self._eps / self.bits, tau=self._tau, honest_users=self._n
        )

    @property
    def domain(self) -> int:
        return self.scale + 1

    @property
    def message_size(self) -> int:
        return 2

    @property
    def messages_per_user(self) -> float:
        return float(self.bits * self._tau)

    @property
    def privacy(self) -> PrivacyGuarantee:
        return PrivacyGuarantee(
            epsilon_central=self._eps,
            epsilon_local=self.bits * self.bit.epsilon_local,
            delta=0.0,
            bound=f"basic_composition[{self.bits}] x {pure_bound_name(self.bit, 1.0)}",
        )

    def honest_users_bound(self, honest_others: int) -> HonestUsersBound | None:
        """Each digit's exact accountant (``Cnt_PURE``), composed over the p digits (pure:
        an upper bound at every δ; no lower bound, see :meth:`honest_users_lower`)."""
        return self.bit.honest_users_bound(honest_others, digits=self.bits)

    def honest_users_lower(
        self, honest_others: int, *, fakes: int = 0, delta: float
    ) -> tuple[float, str] | None:
        """A lower bound on ε at δ: the victim's value 0 against 1 flips every digit, the
        honest others hold 0; the p digit counts are independent given the fakes per digit
        (each at most ``fakes``), so the exact ε(δ) of the p-fold composition of one digit's
        pair, each digit with all ``fakes`` (:meth:`PureBitCounter.honest_users_lower`), is a
        lower bound (up to p·10⁻³)."""
        return self.bit.honest_users_lower(
            honest_others, fakes=fakes, delta=delta, digits=self.bits
        )

    def __repr__(self) -> str:
        return (
            f"RSumPURE(epsilon={self._eps:g}, n={self._n}, bits={self.bits}, "
            f"tau={self.bit.tau}, lam={self.bit.lam:.6g})"
        )

    def _digits(self, x: npt.NDArray[np.float64], *, rng: np.random.Generator) -> Any:
        v = randomized_round(x, self.scale, rng=rng)
        return (v[:, None] >> np.arange(self.bits)[None, :]) & 1

    def randomize(self, values: npt.ArrayLike, *, rng: np.random.Generator) -> npt.NDArray[Any]:
        x = _check_reals(self, values)
        digits = self._digits(x, rng=rng)
        tau = self.bit.tau
        parts = []
        for j in range(self.bits):
            ones = int(self.bit.ones(digits[:, j], rng=rng).sum())
            block = np.zeros((x.size * tau, 2), dtype=np.int64)
            block[:, 0] = j
            block[:ones, 1] = 1
            parts.append(block)
        return np.concatenate(parts) if parts else np.zeros((0, 2), dtype=np.int64)

    def encode(self, messages: npt.NDArray[Any]) -> npt.NDArray[np.uint8]:
        return np.asarray(messages, dtype=np.int64).reshape(-1, 2).astype(np.uint8)

    def decode(self, rows: npt.NDArray[np.uint8]) -> tuple[npt.NDArray[Any], npt.NDArray[np.bool_]]:
        r = np.asarray(rows, dtype=np.uint8).reshape(-1, 2).astype(np.int64)
        return r, (r[:, 0] < self.bits) & (r[:, 1] <= 1)

    def sample_fakes(self, count: int, *, rng: np.random.Generator) -> npt.NDArray[Any]:
        count = check_n(count, "count", 0)
        out = np.empty((count, 2), dtype=np.int64)
        out[:, 0] = rng.integers(0, self.bits, size=count)
        out[:, 1] = rng.integers(0, 2, size=count)
        return out

    def tally(self, messages: npt.NDArray[Any]) -> MessageTally:
        """Per digit position j: (messages received, ones among them), flattened."""
        msgs = np.asarray(messages, dtype=np.int64).reshape(-1, 2)
        received = np.bincount(msgs[:, 0], minlength=self.bits)[: self.bits]
        ones = np.bincount(msgs[:, 0], weights=msgs[:, 1], minlength=self.bits)[: self.bits]
        counts = np.stack([received, ones.astype(np.int64)], axis=1).reshape(-1)
        return MessageTally(counts.astype(np.int64), int(msgs.shape[0]))

    def tally_users(self, values: npt.ArrayLike, *, rng: np.random.Generator) -> MessageTally:
        """Each user's number of ones per position is drawn (as :meth:`randomize` does);
        only the p·τ messages per user are never written out."""
        x = _check_reals(self, values)
        ones = np.zeros(self.bits, dtype=np.int64)
        for s in range(0, x.size, TALLY_BLOCK):
            digits = self._digits(x[s : s + TALLY_BLOCK], rng=rng)
            for j in range(self.bits):
                ones[j] += int(self.bit.ones(digits[:, j], rng=rng).sum())
        received = np.full(self.bits, x.size * self.bit.tau, dtype=np.int64)
        counts = np.stack([received, ones], axis=1).reshape(-1)
        return MessageTally(counts, int(received.sum()))

    def tally_fakes(self, count: int, *, rng: np.random.Generator) -> MessageTally:
        count = check_n(count, "count", 0)
        cells = rng.multinomial(count, np.full(2 * self.bits, 1.0 / (2 * self.bits)))
        per = cells.reshape(self.bits, 2)  # (position, bit) uniform, as sample_fakes
        counts = np.stack([per.sum(axis=1), per[:, 1]], axis=1).reshape(-1)
        return MessageTally(counts.astype(np.int64), count)

    def estimate(self, messages: npt.NDArray[Any], *, n: int, n_fakes: int) -> Estimate:
        return self.estimate_tally(self.tally(messages), n=n, n_fakes=n_fakes)

    def estimate_tally(self, tally: MessageTally, *, n: int, n_fakes: int) -> Estimate:
        per = tally.counts.reshape(self.bits, 2)
        total, var = 0.0, n / 4.0 / self.scale**2
        for j in range(self.bits):
            received, ones = int(per[j, 0]), int(per[j, 1])
            c_hat = self.bit.debias(ones, n=n, received=received)
            total += (1 << j) * c_hat
            fakes = max(received - n * self.bit.tau, 0)
            count = min(max(c_hat, 0.0), float(n))
            var += 4.0**j * self.bit.variance(n=n, count=count, fakes=fakes) / self.scale**2
        return Estimate(
            values=np.array([total / self.scale]),
            expected_std=np.array([math.sqrt(var)]),
            messages_used=tally.messages,
            extra={"bits": self.bits},
        )

    def variance(self, values: npt.ArrayLike, *, n_fakes: int = 0) -> float:
        """Exact variance for these inputs (``n_fakes`` fake bits per digit position)."""
        x = _check_reals(self, values)
        scaled = x * self.scale
        fl = np.floor(scaled).astype(np.int64)
        f = scaled - fl
        var = float(np.sum(f * (1 - f)))
        for j in range(self.bits):
            # E Σ b_ij over the rounding: the digit of ⌊·⌋ or of ⌊·⌋ + 1.
            lo_bit = (fl >> j) & 1
            hi_bit = ((fl + 1) >> j) & 1
            count = float(np.sum((1 - f) * lo_bit + f * hi_bit))
            var += 4.0**j * self.bit.variance(n=x.size, count=count, fakes=n_fakes)
        return var / self.scale**2

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


@register_protocol("rsum_dsg")
def _build_rsum_dsg(spec: ProtocolSpec) -> ShuffleProtocol:
    return RSumDSG(
        epsilon=spec.epsilon,
        delta=spec.delta,
        n=spec.n,
        precision=_opt_int(spec, "precision"),
        shares=_opt_int(spec, "shares"),
    )


@register_protocol("rsum_pure")
def _build_rsum_pure(spec: ProtocolSpec) -> ShuffleProtocol:
    return RSumPURE(
        epsilon=spec.epsilon,
        n=spec.n,
        precision=_opt_int(spec, "precision"),
        messages=_opt_int(spec, "messages"),
    )
