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
    MessageTally,
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

    def plug_in_variance(
        self, *, level_sum: float, level_sq_sum: float, n: int, received: int
    ) -> float:
        """:meth:`variance` with Σv and Σv² estimated from the received levels' sum and sum
        of squares (E m = (1−λ)v + λμ, E m² = (1−λ)v² + λs₂ for a user, E U² = s₂ for a
        uniform fake), so unbiased for it; clipped to [0, :meth:`worst_variance`].

        Args:
            level_sum: Σ of the received levels.
            level_sq_sum: Σ of their squares.
            n: the number of users (one message each).
            received: the number of received messages (users and fakes).

        Returns:
            The estimated variance of :meth:`debiased_sum`.
        """
        fakes = max(received - n, 0)
        s2 = (self.levels - 1) * (2 * self.levels - 1) / 6.0
        v_sum = self.debiased_sum(level_sum, n=n, received=received)
        v2_sum = (level_sq_sum - (self.lam * n + fakes) * s2) / (1.0 - self.lam)
        plug = self.variance(v2_sum=v2_sum, v_sum=v_sum, n=n, fakes=fakes)
        return min(max(plug, 0.0), self.worst_variance(n=n, fakes=fakes))

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
        """Σx ≈ Ŝ/k (class docstring), with a plug-in of the exact noise variance.

        The k-RR noise's variance depends on the data only through Σv and Σv² (module
        docstring), both estimated without bias from the messages (E m = (1−λ)v + λμ,
        E m² = (1−λ)v² + λs₂, fakes uniform), so the stated noise variance is unbiased for
        the exact one (clipped to [0, worst case]); the rounding's Σf(1−f)/k² is stated by
        its bound n/(4k²), the analyzer not seeing the values' fractional parts. ``extra``
        holds both parts (``"noise_variance"``, ``"rounding_variance_bound"``) and the std
        of the worst case over the data (``"worst_case_std"``).

        Args:
            messages: the decoded messages.
            n: the number of users.
            n_fakes: the fake values among the messages.

        Returns:
            The estimate.
        """
        g, k = self.group, self.k
        m = np.asarray(messages, dtype=np.int64).reshape(-1)
        s_hat = g.debiased_sum(float(m.sum()), n=n, received=int(m.size))
        fakes = max(int(m.size) - n, 0)
        worst = g.worst_variance(n=n, fakes=fakes)
        q = float(np.sum(m.astype(np.float64) ** 2))
        noise = g.plug_in_variance(
            level_sum=float(m.sum()), level_sq_sum=q, n=n, received=int(m.size)
        )
        noise /= k**2
        rounding = n / (4.0 * k**2)
        return Estimate(
            values=np.array([s_hat / k]),
            expected_std=np.array([math.sqrt(noise + rounding)]),
            messages_used=int(m.size),
            extra={
                "precision": k,
                "variance_is_bound": True,
                "noise_variance": noise,
                "rounding_variance_bound": rounding,
                "worst_case_std": math.sqrt(worst / k**2 + rounding),
            },
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
    unbiased, variance n r (λ'/2)(1 − λ'/2)/((1−λ')r)² + Σf(1−f)/r²: a privacy noise that
    does not depend on the data, and the rounding's, at most n/(4r²).

    Number of messages r (one bit each, so r is the cost per user). The privacy noise is
    O(1) in r: the shuffled count of one position at (ε', δ') needs a noise variance
    ≈ ln(1/δ')/(e^{ε'} − 1)² and ε' ∝ 1/√r, so its share in the sum, r times that over r²,
    grows only like ln(r/δ) (std ≈ 14, 20, 25 at n = 10⁴, 10⁵, 10⁶, ε = 1, δ = 10⁻⁶,
    against 6 for a single count at ε). The rounding std √(n/4)/r falls like 1/r. So r grows
    like √n, as in Cheu et al. (r = Θ(ε√n/log(1/δ)), error O_{ε,δ}(1)): by default r is
    the r ∈ [1, ``max_precision``] minimizing the model MSE

        ln(2r/δ)/(r (e^{ε'(r)} − 1)²) + n/(4r²),

    a Gaussian approximation of the binary-RR noise (the exact accountant's noise variance is
    1.36× the model's at r = 8 and 1.05× at r = 64, n = 10⁵, ε = 1, δ = 10⁻⁶; the model is
    this project's choice, the paper states only the order), and that r then gets the λ'
    of the tightest registered bound (``bound`` forces one). At ε = 1, δ = 10⁻⁶ that is
    r = 7, 14, 119 at n = 10⁴, 10⁵, 10⁶ (std 13.9, 19.9, 25.0). ``max_precision`` (default
    256) caps the messages per user: past n ≈ 5·10⁶ the cap binds and the rounding std
    √(n/4)/256 (6.2 at n = 10⁷, 19.5 at 10⁸) adds to the noise. ``precision`` sets r.
    Should the tightest bound not apply at the chosen r (small crowds), r is halved until
    it does.

    ``expected_std`` states the exact privacy-noise variance plus the rounding variance's
    bound n/(4r²) (the analyzer cannot see the values' fractional parts); ``extra`` holds
    both parts, and :meth:`variance` the exact total for known values.
    """

    name: ClassVar[str] = "rsum_rr"
    input_kind: ClassVar[InputKind] = InputKind.REAL01
    #: Default cap on r, the one-bit messages per user (``max_precision``).
    DEFAULT_MAX_PRECISION: ClassVar[int] = 256

    def __init__(
        self,
        *,
        epsilon: float,
        delta: float,
        n: int,
        precision: int | None = None,
        bound: str | None = None,
        max_precision: int = DEFAULT_MAX_PRECISION,
    ) -> None:
        self._eps = check_epsilon(epsilon)
        self._delta = check_delta(delta)
        self._n = check_n(n)
        self.max_precision = _check_precision(max_precision, "max_precision")
        if precision is not None:
            self.r = _check_precision(precision)
            try:
                self.group = self._bit_group(self.r, bound=bound)
            except BoundNotApplicable as exc:
                raise BoundNotApplicable(f"rsum_rr with {self.r} bits: {exc}") from None
            return
        r = self.model_precision(
            epsilon=self._eps, delta=self._delta, n=self._n, cap=self.max_precision
        )
        while True:
            try:
                self.group = self._bit_group(r, bound=bound)
                break
            except BoundNotApplicable as exc:
                if r == 1:
                    raise BoundNotApplicable(f"rsum_rr with 1 bit: {exc}") from None
                r //= 2
        self.r = r

    @staticmethod
    def model_precision(*, epsilon: float, delta: float, n: int, cap: int) -> int:
        """The r ∈ [1, cap] minimizing ln(2r/δ)/(r(e^{ε'(r)} − 1)²) + n/(4r²) (class doc).

        Args:
            epsilon: the target ε.
            delta: the target δ.
            n: the number of users.
            cap: the largest r considered.

        Returns:
            The default number of one-bit messages per user.

        Raises:
            ParameterError: ``cap`` below 1.
        """
        best, best_r = math.inf, 1
        for r in range(1, check_n(cap, "cap") + 1):
            e = advanced_composition_epsilon(epsilon, delta / 2.0, r)
            mse = math.log(2.0 * r / delta) / (r * math.expm1(e) ** 2) + n / (4.0 * r * r)
            if mse < best:
                best, best_r = mse, r
        return best_r

    def _bit_group(self, r: int, *, bound: str | None = None) -> KRRLevels:
        eps_bit = advanced_composition_epsilon(self._eps, self._delta / 2.0, r)
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

    def tally(self, messages: npt.NDArray[Any]) -> MessageTally:
        """The number of ones among the bits (and the number of bits).

        Args:
            messages: the decoded messages.

        Returns:
            Their tally.
        """
        m = np.asarray(messages, dtype=np.int64).reshape(-1)
        return MessageTally(np.array([int(m.sum())], dtype=np.int64), int(m.size))

    def tally_users(self, values: npt.ArrayLike, *, rng: RNGLike) -> MessageTally:
        """Ones among the n·r randomized bits, drawn from the rounded levels directly: a true
        one stays one w.p. 1 − λ'/2, a true zero turns one w.p. λ'/2.

        Args:
            values: one value per user.
            rng: the randomizers' generator, or a seed (:data:`~protocols.RNGLike`).

        Returns:
            The tally, equal in distribution to ``tally(randomize(values))``.
        """
        rng = as_generator(rng)
        x = _check_reals(self, values)
        ones = int(randomized_round(x, self.r, rng=rng).sum())
        half = self.group.lam / 2.0
        bits = x.size * self.r
        drawn = int(rng.binomial(ones, 1.0 - half)) + int(rng.binomial(bits - ones, half))
        return MessageTally(np.array([drawn], dtype=np.int64), bits)

    def tally_fakes(self, count: int, *, rng: RNGLike) -> MessageTally:
        rng = as_generator(rng)
        count = check_n(count, "count", 0)
        return MessageTally(np.array([int(rng.binomial(count, 0.5))], dtype=np.int64), count)

    def estimate(self, messages: npt.NDArray[Any], *, n: int, n_fakes: int) -> Estimate:
        return self.estimate_tally(self.tally(messages), n=n, n_fakes=n_fakes)

    def estimate_tally(self, tally: MessageTally, *, n: int, n_fakes: int) -> Estimate:
        """Σx ≈ Ŝ/r from the ones among the received bits (class docstring).

        ``expected_std`` is √(noise + rounding bound): the privacy noise's variance is exact
        (binary RR's does not depend on the data), the rounding's Σf(1−f)/r² is stated by
        its bound n/(4r²); ``extra`` holds both (``"noise_variance"``,
        ``"rounding_variance_bound"``).

        Args:
            tally: the tally of the received messages.
            n: the number of users.
            n_fakes: the fake values among the messages.

        Returns:
            The estimate.
        """
        r = self.r
        received = tally.messages
        s_hat = self.group.debiased_sum(float(tally.counts[0]), n=n * r, received=received)
        fakes = max(received - n * r, 0)
        noise = self.group.worst_variance(n=n * r, fakes=fakes) / r**2
        rounding = n / (4.0 * r * r)
        return Estimate(
            values=np.array([s_hat / r]),
            expected_std=np.array([math.sqrt(noise + rounding)]),
            messages_used=received,
            extra={
                "precision": r,
                "variance_is_bound": True,
                "noise_variance": noise,
                "rounding_variance_bound": rounding,
            },
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

    ``expected_std`` states a plug-in of the exact k-RR noise variance of every precision
    (:meth:`KRRLevels.plug_in_variance`) plus the last digit's rounding bound n/(4q_m²);
    ``extra`` holds both parts.
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

        Raises:
            ParameterError: ``count`` negative, or an ``rng`` that is not
                :data:`~protocols.RNGLike`.
        """
        rng = as_generator(rng)
        count = check_n(count, "count", 0)
        j = rng.integers(0, len(self.levels), size=count)
        v = np.floor(rng.random(count) * np.asarray(self.levels)[j]).astype(np.int64)
        return np.stack([j, v], axis=1)

    def estimate(self, messages: npt.NDArray[Any], *, n: int, n_fakes: int) -> Estimate:
        msgs = np.asarray(messages, dtype=np.int64).reshape(-1, 2)
        total, var = 0.0, 0.0
        rounding = n / (4.0 * self.q[-1] ** 2)
        per_group = []
        for j, g in enumerate(self.groups):
            vals = msgs[msgs[:, 0] == j, 1]
            # Every user sends exactly one message per precision: the surplus are fakes.
            level_sum = float(vals.sum())
            s_hat = g.debiased_sum(level_sum, n=n, received=int(vals.size))
            total += s_hat / self.q[j]
            sq = float(np.sum(vals.astype(np.float64) ** 2))
            var += (
                g.plug_in_variance(
                    level_sum=level_sum, level_sq_sum=sq, n=n, received=int(vals.size)
                )
                / self.q[j] ** 2
            )
            per_group.append(int(vals.size))
        return Estimate(
            values=np.array([total]),
            expected_std=np.array([math.sqrt(var + rounding)]),
            messages_used=int(msgs.shape[0]),
            extra={
                "precisions": list(self.precisions),
                "messages_per_precision": per_group,
                "noise_variance": var,
                "rounding_variance_bound": rounding,
            },
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
    cap = _opt_int(spec, "max_precision")
    return RSumRR(
        epsilon=spec.epsilon,
        delta=spec.delta,
        n=spec.n,
        precision=_opt_int(spec, "precision"),
        bound=spec.bound,
        max_precision=RSumRR.DEFAULT_MAX_PRECISION if cap is None else cap,
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
