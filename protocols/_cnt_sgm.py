"""Robustly shuffle-private counting with pure privacy: ``Cnt_SGM`` and its Split-Mix form.

Balcer, Cheu, Joseph, Mao, "Connecting Robust Shuffle Privacy and Pan-Privacy" (SODA'21,
arXiv 2004.09481), binary-sum protocols as summarized in survey §4.1 (table 6). A protocol
is (ε, δ, γ)-robustly shuffle private (RSDP) if it stays (ε, δ)-DP against the analyzer
whenever at least γn of the n users run the randomizer honestly, whatever the others send:
the others' messages are then a fixed, known offset, so only the honest users' noise counts.
The robustness fraction γ is ``ProtocolSpec.options["gamma"]`` (default 1).

``Cnt_SGM`` (pure, survey: (3ε/γ, 0, γ)-RSDP). User i maps x_i ∈ {0, 1} to s_i = 2x_i − 1 ∈
{−1, 1}; with probability
    λ = min{1, 2(e^ε + 1) / ((e^ε − 1)² n)}                      (survey §4.1, Cnt_SGM)
it adds symmetric geometric noise η ~ SG(e^{−ε}) (P[η = k] ∝ e^{−ε|k|}), y_i = s_i + η,
else y_i = s_i; it sends |y_i| copies of the message sign(y_i) ∈ {−1, +1} (y_i = 2 → "+1,+1";
y_i = −2 → "−1,−1"; y_i = 0 → nothing). With T = #(+1) − #(−1) = Σ y_i,
    ĉ = (T + n) / 2                                                (unbiased: E η = 0)
    Var ĉ = (n λ · 2α/(1−α)² + n_f) / 4,  α = e^{−ε}
(n_f uniform ±1 fakes have mean 0 and variance 1 each). The registry configures it for a
target ε_c at robustness γ by running the paper's ε = γ ε_c / 3, so 3ε/γ = ε_c.

What this module can and cannot claim for ``Cnt_SGM``. The survey's formulas were lost in
extraction and the paper was not available offline, so the randomizer above is rebuilt from
the survey's prose. For this reconstruction the survey's pure (3ε/γ, 0, γ) claim is FALSE:
exact computation of the shuffled view (#(+1), #(−1)) for neighbouring datasets at small n
(tests/test_counting_protocols.py) finds views with no "+1" message: when the others all
hold 0, such a view needs the one user holding 1 to draw noise η ≤ −1, so its likelihood
ratio is ≈ (1 − λ + λP[η ≤ 1])/(λ P[η ≤ −1]), unbounded as λ ∝ 1/n shrinks. (ε = 1, n = 40:
exact 4.6 > 3.) In closed form, for every n: the event "no +1 message" has likelihood ratio
q₀/q₁ with q₀ = 1 − λ + λP[η ≤ 1] and q₁ = λP[η ≤ −1] whatever the other users' number
(:attr:`CntSGM.no_plus_epsilon`; 6.66 ≤ ε ≤ 8.25 for a target of 1 at n = 10^4, growing like
ln n as λ ∝ 1/n shrinks). That is a pure-DP (δ = 0) statement: the event weighs about
λ·P[η ≤ −1] under the shifted dataset, and 2^{−F} less with F honest fakes, so it says
nothing at a δ above that. ``esa audit`` prints at its δ the exact ε(δ) of the unary view
for the same dataset, fakes included (:meth:`CntSGM.honest_users_lower`,
:func:`sgm_view_laws`): 6.75 at δ = 10^{-6}, n = 10^4 without fakes, so the claim fails at
that δ too; 2.99 for the victim with 20 honest fakes.
:attr:`CntSGM.privacy` therefore reports the pure guarantee we can prove — the local one,
ε_l = max{2ε, ln((1−λ+λP[η=0])/(λP[η=2]))}, which holds for every γ — and
:attr:`CntSGM.claimed_privacy` keeps the survey's statement for comparison. The estimator
and its variance are exact.

Where the claim does hold: the sum. The survey's λ and ε make the SUM T = Σ y_i alone
(3ε/γ)-DP with ⌈γn⌉ honest users: :func:`sgm_sum_epsilon` computes T's pure ε exactly
(a log-concavity argument leaves one likelihood ratio to evaluate, by exact Fourier
inversion), and it is at most 3ε/γ on every grid point we tried (ε_c from 0.01 to 20, n
from 3 to 10^8, γ from 0.01 to 1; :attr:`CntSGM.sum_epsilon`), usually 2ε = (2/3)ε_c. What
breaks the claim is the unary encoding, which shows the two counts #(+1), #(−1) and not just
their difference. ``--option encoding=splitmix`` (:class:`CntSGMSplitMix`, the registered
``cnt_sgm``'s default; ``--option encoding=unary`` runs the survey's messages) keeps the
randomizer and sends y_i mod q as Split-Mix shares instead, so the analyzer learns T and,
up to the shares' statistical distance, nothing else: robust (ε_T, δ, γ)-DP with ε_T ≤ the
survey's 3ε/γ — its pure claim, up to a δ.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from ._base import (
    CountNoise,
    Estimate,
    HonestUsersBound,
    InputKind,
    PrivacyGuarantee,
    ShareSpec,
    ShuffleProtocol,
    check_delta,
    check_epsilon,
    check_gamma,
    check_n,
)
from ._distributions import nbinom_pmf
from ._errors import ParameterError
from ._messages import (
    ModularMessages,
    sum_mod,
    uint_codec_size,
)
from ._noise import (
    symmetric_geometric,
    symmetric_geometric_fourth_moment,
    symmetric_geometric_variance,
)
from ._random import RNGLike, as_generator
from ._registry import ProtocolSpec, number_option, register_protocol
from .accounting import binomial_window, pair_lower_epsilon

__all__ = [
    "SGM_ENCODINGS",
    "CntSGM",
    "CntSGMParams",
    "CntSGMSplitMix",
    "sgm_sum_epsilon",
    "sgm_sum_laws",
    "sgm_view_laws",
]

#: Wire values of the Cnt_SGM messages (+1 and −1); any other byte is invalid.
PLUS: int = 1
MINUS: int = 2


# ---------------------------------------------------------------------------------------
# Cnt_SGM
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CntSGMParams:
    """Parameters of ``Cnt_SGM`` (arXiv 2004.09481 via survey §4.1).

    λ = min{1, 2(e^ε + 1)/((e^ε − 1)² n)} is the probability of adding SG(e^{−ε}) noise;
    the guarantee is (3ε/γ, 0, γ)-RSDP, i.e. pure ε_c = 3ε/γ-DP with γn honest users.

    Attributes:
        epsilon: the paper's ε (noise level), = γ ε_c / 3 when built from a target ε_c.
        n: number of users.
        gamma: fraction of honest users the guarantee assumes.
        lam: probability that a user adds noise.
        alpha: e^{−ε}, the SG noise parameter.
    """

    epsilon: float
    n: int
    gamma: float
    lam: float
    alpha: float

    @classmethod
    def derive(cls, *, epsilon: float, n: int, gamma: float = 1.0) -> CntSGMParams:
        eps = check_epsilon(epsilon)
        n = check_n(n)
        g = check_gamma(gamma)
        if g * n < 1.0:
            raise ParameterError(f"cnt_sgm: gamma*n must be >= 1 honest user, got {g * n:g}")
        lam = min(1.0, 2.0 * (math.exp(eps) + 1.0) / (math.expm1(eps) ** 2 * n))
        return cls(epsilon=eps, n=n, gamma=g, lam=lam, alpha=math.exp(-eps))

    @property
    def epsilon_central(self) -> float:
        return 3.0 * self.epsilon / self.gamma


class CntSGM(ShuffleProtocol):
    """``Cnt_SGM``: ±1 messages carrying s_i + Bernoulli(λ)·SG noise (see module doc;
    ``--option encoding=splitmix`` sends the value as Split-Mix shares instead)."""

    name: ClassVar[str] = "cnt_sgm"
    input_kind: ClassVar[InputKind] = InputKind.BINARY

    def __init__(self, *, epsilon: float, n: int, gamma: float = 1.0) -> None:
        self.params = CntSGMParams.derive(epsilon=epsilon, n=n, gamma=gamma)

    @classmethod
    def from_central(cls, *, epsilon_central: float, n: int, gamma: float = 1.0) -> CntSGM:
        """Configure so that the robust guarantee 3ε/γ equals ``epsilon_central``.

        Args:
            epsilon_central: the target robust ε_c.
            n: the number of users.
            gamma: the fraction γ of users assumed honest, in (0, 1].

        Returns:
            The configured protocol.
        """
        eps_c = check_epsilon(epsilon_central, "epsilon_central")
        g = check_gamma(gamma)
        return cls(epsilon=g * eps_c / 3.0, n=n, gamma=g)

    @property
    def domain(self) -> int:
        return 2

    @property
    def message_size(self) -> int:
        return 1

    @property
    def robust_gamma(self) -> float:
        return self.params.gamma

    @property
    def messages_per_user(self) -> float:
        """E|y| = (1 − λ) + λ E|1 + η|, E|1 + η| = 2α/(1−α²) + (1−α)/(1+α)."""
        a, lam = self.params.alpha, self.params.lam
        noisy = 2.0 * a / (1.0 - a * a) + (1.0 - a) / (1.0 + a)
        return (1.0 - lam) + lam * noisy

    @property
    def epsilon_local(self) -> float:
        """Pure ε of one user's messages (a function of y_i alone), hence of any view.

        Under s = −1 and s = +1 the laws of y differ most at y = ∓1:
        ε_l = max{2ε, ln((1 − λ + λ P[η=0]) / (λ P[η=2]))}; at λ = 1 it is 2ε.
        """
        p = self.params
        a = p.alpha
        p0 = (1.0 - a) / (1.0 + a)
        p2 = p0 * a * a
        return max(2.0 * p.epsilon, math.log((1.0 - p.lam + p.lam * p0) / (p.lam * p2)))

    @property
    def no_plus_epsilon(self) -> float:
        """ln(q₀/q₁): the exact likelihood ratio of the event "no +1 message" when every
        other honest user holds 0 and there are no fakes, whatever the others' number:
        P[no +1] = q_x·q₀^{others} with q₀ = 1 − λ + λ P[η ≤ 1] (y = −1 + η ≤ 0) and
        q₁ = λ P[η ≤ −1] (y = 1 + η ≤ 0). A lower bound on the central PURE ε (δ = 0) for
        every n, which refutes the survey's pure (3ε/γ)-claim whenever it exceeds 3ε/γ. It
        is no lower bound at a δ > 0: the event has probability about λ·P[η ≤ −1] under the
        shifted dataset, below a typical δ, and F fair ±1 fakes multiply it by 2^{−F}
        (:meth:`honest_users_lower` gives the lower bound at δ)."""
        p = self.params
        a, lam = p.alpha, p.lam
        q0 = 1.0 - lam + lam * (1.0 - a * a / (1.0 + a))
        q1 = lam * a / (1.0 + a)
        return math.log(q0 / q1)

    @property
    def honest_users(self) -> int:
        """⌈γn⌉, the honest users (the victim included) the robust guarantee assumes."""
        return max(1, math.ceil(self.params.gamma * self.params.n - 1e-9))

    @functools.cached_property
    def sum_epsilon(self) -> float:
        """Exact pure ε of the sum T = Σ y_i alone with :attr:`honest_users` honest users
        (:func:`sgm_sum_epsilon`): at most the survey's 3ε/γ wherever we computed it, so its
        claim holds for T; the unary messages reveal more than T (:attr:`no_plus_epsilon`),
        and ``encoding=splitmix`` (:class:`CntSGMSplitMix`) reveals only T."""
        p = self.params
        return sgm_sum_epsilon(epsilon=p.epsilon, lam=p.lam, honest=self.honest_users)

    def honest_users_bound(self, honest_others: int) -> HonestUsersBound | None:
        """Upper: the local bound (:attr:`privacy`), pure, so it holds at every δ. No lower
        bound here (it would carry no δ): :meth:`honest_users_lower` gives one at δ.

        Args:
            honest_others: the honest users besides the victim.

        Returns:
            The bound, or ``None``.
        """
        check_n(honest_others, "honest others", 0)
        return HonestUsersBound(self.epsilon_local, "cnt_sgm_local_pure")

    def honest_users_lower(
        self, honest_others: int, *, fakes: int = 0, delta: float
    ) -> tuple[float, str] | None:
        """A lower bound on the victim's ε at δ: the exact ε(δ) of the unary view
        (#(+1), #(−1)) when the ``honest_others`` honest others hold 0 and ``fakes`` honest
        fair ±1 fakes are mixed in, victim 0 against 1 (:func:`sgm_view_laws`,
        :func:`~protocols.pair_lower_epsilon`), as (ε, that pair); ``None`` where
        the laws are too wide to compute directly (tiny ε).

        Args:
            honest_others: the honest users besides the victim.
            fakes: the fake values the adversary cannot tell apart.
            delta: δ.

        Returns:
            ``(epsilon, pair)``: the lower bound and a description of the neighbouring pair, or
            ``None``.
        """

        h = check_n(honest_others, "honest others", 0)
        f = check_n(fakes, "fakes", 0)
        laws = sgm_view_laws(epsilon=self.params.epsilon, lam=self.params.lam, others=h, fakes=f)
        if laws is None:
            return None
        eps = pair_lower_epsilon(laws[0], laws[1], check_delta(delta, pure=True))
        crowd = f"all {h} honest others hold 0" if h else "no honest other user"
        return eps, f"{crowd}, {f} honest fakes (unary view, exact)"

    @property
    def claimed_privacy(self) -> PrivacyGuarantee:
        """The survey's statement of the paper's guarantee, (3ε/γ, 0, γ)-RSDP (see doc)."""
        p = self.params
        return PrivacyGuarantee(
            epsilon_central=p.epsilon_central,
            epsilon_local=math.inf,
            delta=0.0,
            bound=f"bcjm21_cnt_sgm_claim (survey §4.1, (3ε/γ,0,γ)-RSDP, gamma={p.gamma:g})",
        )

    @property
    def privacy(self) -> PrivacyGuarantee:
        # The survey's (3ε/γ, 0, γ) claim does not hold for this reconstruction (exact
        # computation, module doc): report the pure bound we can prove, which holds for
        # every γ because it is the local guarantee of one user's messages.
        eps_l = self.epsilon_local
        return PrivacyGuarantee(
            epsilon_central=eps_l,
            epsilon_local=eps_l,
            delta=0.0,
            bound="cnt_sgm_local_pure (post-processing of one user's ε_l; robust for any gamma)",
        )

    def __repr__(self) -> str:
        p = self.params
        return (
            f"CntSGM(epsilon={p.epsilon:.6g}, n={p.n}, gamma={p.gamma:g}, lam={p.lam:.6g}, "
            f"epsilon_central={p.epsilon_central:.6g})"
        )

    # --- client ----------------------------------------------------------------------
    def _noisy_values(
        self, values: npt.ArrayLike, *, rng: np.random.Generator
    ) -> npt.NDArray[np.int64]:
        """y_i = (2x_i − 1) + B_i η_i, B_i ~ Ber(λ), η_i ~ SG(α): one integer per user."""
        x = self.validate_values(values).astype(np.int64, copy=False)
        y = 2 * x - 1
        noisy = np.flatnonzero(rng.random(x.shape[0]) < self.params.lam)
        y[noisy] += np.asarray(
            symmetric_geometric(self.params.alpha, noisy.size, rng=rng), dtype=np.int64
        )
        return y

    def randomize(self, values: npt.ArrayLike, *, rng: RNGLike) -> npt.NDArray[Any]:
        rng = as_generator(rng)
        y = self._noisy_values(values, rng=rng)
        # User i contributes |y_i| copies of sign(y_i): only the two totals matter.
        plus = int(y[y > 0].sum())
        minus = int(-y[y < 0].sum())
        out = np.empty(plus + minus, dtype=np.int8)
        out[:plus] = 1
        out[plus:] = -1
        return out

    def encode(self, messages: npt.NDArray[Any]) -> npt.NDArray[np.uint8]:
        m = np.asarray(messages).reshape(-1)
        return np.where(m > 0, PLUS, MINUS).astype(np.uint8).reshape(-1, 1)

    def decode(self, rows: npt.NDArray[np.uint8]) -> tuple[npt.NDArray[Any], npt.NDArray[np.bool_]]:
        b = np.asarray(rows, dtype=np.uint8).reshape(-1, 1)[:, 0]
        valid = (b == PLUS) | (b == MINUS)
        return np.where(b == PLUS, 1, -1).astype(np.int8), valid

    def sample_fakes(self, count: int, *, rng: RNGLike) -> npt.NDArray[Any]:
        rng = as_generator(rng)
        count = check_n(count, "count", 0)
        return np.where(rng.random(count) < 0.5, 1, -1).astype(np.int8)

    # --- analyzer ----------------------------------------------------------------------
    def estimate(self, messages: npt.NDArray[Any], *, n: int, n_fakes: int) -> Estimate:
        m = np.asarray(messages).reshape(-1)
        total = int(np.count_nonzero(m > 0)) - int(np.count_nonzero(m < 0))
        return Estimate(
            values=np.array([(total + n) / 2.0], dtype=np.float64),
            expected_std=np.array([math.sqrt(self.variance(n=n, n_fakes=n_fakes))]),
            messages_used=int(m.size),
        )

    def variance(self, *, n: int, n_fakes: int = 0) -> float:
        """Exact Var ĉ = (n λ Var η + n_f) / 4 (independent of the data).

        Args:
            n: the number of users.
            n_fakes: the fake values among the messages.

        Returns:
            The variance of the estimate.
        """
        p = self.params
        return (n * p.lam * symmetric_geometric_variance(p.alpha) + n_fakes) / 4.0

    @property
    def count_noise(self) -> CountNoise:
        """User i's error term is B_i η_i / 2, B_i ~ Ber(λ): symmetric, with E d² = λ E η²/4
        and E d⁴ = λ E η⁴/16, whatever x_i."""
        p = self.params
        return CountNoise(
            variance=p.lam * symmetric_geometric_variance(p.alpha) / 4.0,
            third=0.0,
            fourth=p.lam * symmetric_geometric_fourth_moment(p.alpha) / 16.0,
        )

    def truth(self, values: npt.ArrayLike) -> npt.NDArray[np.float64]:
        x = self.validate_values(values)
        return np.array([float(x.sum())], dtype=np.float64)


# ---------------------------------------------------------------------------------------
# Cnt_SGM's sum, and Cnt_SGM over Split-Mix
# ---------------------------------------------------------------------------------------

#: :func:`sgm_sum_epsilon` returns its closed-form upper bound without quadrature when that
#: bound is within this relative slack of 2ε, the least ε_T can be.
_SUM_QUADRATURE_SLACK: float = 1e-9


def sgm_sum_epsilon(*, epsilon: float, lam: float, honest: int) -> float:
    """Exact pure ε of Cnt_SGM's sum T = Σ y_i alone, with ``honest`` honest users.

    T = s + M + c: s = ±1 the victim's mapped bit, c the other users' known part (dishonest
    users' messages, honest users' bits) and M = Σ_{i ≤ h} B_i η_i the honest users' noise
    (victim included), B_i ~ Ber(λ), η_i ~ SG(α), α = e^{−ε}. Neighbouring datasets shift T
    by 2, so ε_T = sup_u ``|ln P(M = u)/P(M = u − 2)|``. Write P(M = u) = P₀[u = 0] + Q(u),
    P₀ = (1 − λ)^h, Q(u) = Σ_{k ≥ 1} P(K = k) P(S_k = u) with K ~ Bin(h, λ) noisy users
    and S_k a sum of k SG(α) — a difference of two NB(k, 1 − α), hence discrete
    log-concave and symmetric. For such a law P(u)/P(u + 1) does not decrease in u and tends
    to 1/α, so every ratio P(S_k = u)/P(S_k = u − 2) lies in [α², α^{−2}] and tends to
    α^{−2} as u → ∞ (k = h dominates the tail); mixtures keep the range. The atom P₀ only
    moves the two ratios that involve u = 0, the larger being (P₀ + Q(0))/Q(2). Hence

        ε_T = max{2ε, ln((P₀ + Q(0))/Q(2))}   (2ε alone when λ = 1).

    Q(0) and Q(2) come from the exact inversion of M's lattice characteristic function
    ψ(θ)^h, ψ = 1 − λ + λ(1 − α)²/(1 − 2α cos θ + α²), at N points: the mean of
    (ψ^h − P₀)·cos(uθ) is Σ_j Q(u + jN), whose aliased part is at most
    2·exp(−θ₀(N − 2))·E[e^{θ₀B η}]^h (Chernoff at θ₀ = ε/2); N doubles (from 2^12, up to
    2^24) until that is under 10^{−12}·Q(2), and the result is rounded up by the aliasing
    and round-off bounds. First, and where N runs out or Q(2) is below the round-off, the
    closed-form bound ln(e^{2ε} + P₀/Q₂) is used, Q₂ ≤ Q(2) one term of Q(2)
    (:func:`_log_atom_over_q2`; Q(0) ≤ e^{2ε}Q(2) by the ratios above): it is 2ε to 10^{−9}
    whenever λh is large. Adding honest users is a post-processing (independent noise), so
    fewer than ``honest`` only raises ε_T.

    Args:
        epsilon: the noise's ε (α = e^{−ε}).
        lam: the probability λ ∈ (0, 1] that a user adds noise.
        honest: h ≥ 1 honest users, the victim included.

    Returns:
        ε_T, never below the exact value and above it by at most 10^{−9}·ε_T + 3·10^{−10}
        (or the closed-form bound where the quadrature cannot certify, as stated).

    Raises:
        ParameterError: ε out of range, λ outside (0, 1], or fewer than one honest user.
    """
    eps = check_epsilon(epsilon)
    h = check_n(honest, "honest", 1)
    lam = float(lam)
    if not 0.0 < lam <= 1.0:
        raise ParameterError(f"lam must lie in (0, 1], got {lam!r}")
    if lam == 1.0:
        return 2.0 * eps
    a = math.exp(-eps)
    log_p0 = h * math.log1p(-lam)
    p0 = math.exp(log_p0)
    closed_form = math.log(math.exp(2.0 * eps) + math.exp(_log_atom_over_q2(eps, lam, h)))
    if closed_form <= 2.0 * eps * (1.0 + _SUM_QUADRATURE_SLACK):
        return closed_form
    theta0 = eps / 2.0
    log_mgf = math.log1p(
        lam * ((1.0 - a) ** 2 / ((1.0 - a * math.exp(theta0)) * (1.0 - a / math.exp(theta0))) - 1)
    )
    size = 1 << 12
    while size <= 1 << 24:
        theta = 2.0 * math.pi * np.arange(size) / size
        phi = (1.0 - a) ** 2 / (1.0 - 2.0 * a * np.cos(theta) + a * a)
        # ψ^h − P₀ = ψ^h·(1 − e^{−x}), x = h·log1p(λφ/(1 − λ)): neither cancels nor
        # overflows, whether λh is small or P₀ underflows.
        x = h * np.log1p(lam * phi / (1.0 - lam))
        f = np.exp(log_p0 + x) * -np.expm1(-x)
        q0 = float(f.mean())
        q2 = float((f * np.cos(2.0 * theta)).mean())
        # Each f value carries ≲ (|ln P₀| + 16) ulps (log1p/expm1 at argument ≲ |ln P₀|), and
        # numpy's pairwise mean adds ≲ log₂ N ulps of max f.
        ulps = 2.0 * math.log2(size) + 64.0 - log_p0
        rounding = ulps * float(np.finfo(np.float64).eps) * float(f.max())
        aliasing = 2.0 * math.exp(min(0.0, -theta0 * (size - 2) + h * log_mgf))
        err = aliasing + rounding
        if aliasing <= 1e-12 * q2 and rounding <= 1e-10 * q2:
            return max(2.0 * eps, math.log((p0 + q0 + err) / (q2 - err)))
        if rounding > 1e-10 * q2:
            break  # Q(2) is below the round-off of this quadrature: more points won't help
        size <<= 1
    return closed_form


def _log_atom_over_q2(eps: float, lam: float, h: int) -> float:
    """An upper bound on ln(P₀/Q(2)) (:func:`sgm_sum_epsilon`), from one term of Q(2).

    Q(2) ≥ P(K = k)·P(S_k = 2) for every k ∈ [1, h]. For k = 1, P(S_1 = 2) = P[η = 2]; for
    any k, S_k is symmetric and log-concave, so its mode is 0, P(S_k = 2) ≥ α²P(S_k = 0),
    and Chebyshev puts half its mass on the ≤ 2t + 1 points of [−t, t], t = √(2k Var η):
    P(S_k = 0) ≥ 1/(2(2t + 1)). Tried at k = 1 and k ≈ λh; in logs, so nothing underflows.
    """
    a = math.exp(-eps)
    var = symmetric_geometric_variance(a)
    log_odds = math.log(lam) - math.log1p(-lam)

    def log_ratio(k: int) -> float:
        log_choose = math.lgamma(h + 1) - math.lgamma(k + 1) - math.lgamma(h - k + 1)
        if k == 1:
            log_p2 = math.log((1.0 - a) / (1.0 + a)) + 2.0 * math.log(a)
        else:
            log_p2 = 2.0 * math.log(a) - math.log(2.0 * (2.0 * math.sqrt(2.0 * k * var) + 1.0))
        return -log_choose - k * log_odds - log_p2  # ln P₀ − ln P(K = k) − ln P(S_k = 2)

    mode = min(h, max(1, round(lam * h)))
    return min(log_ratio(1), log_ratio(mode))


#: The laws the audit's lower bounds are computed on keep each count to its mean plus this
#: many standard deviations (plus :data:`_LOWER_MARGIN`; binomial counts use
#: :func:`~protocols.binomial_window`'s window); what is cut off only loosens the
#: bound (:func:`~protocols.pair_lower_epsilon` charges it to the other law).
_LOWER_TAIL_SD: float = 10.0
_LOWER_MARGIN: int = 20

#: Most multiply-adds the direct (non-negative, round-off-free) convolutions of one lower
#: bound may take (a few seconds); beyond it no lower bound is stated.
LOWER_WORK: float = 3e9
#: Most entries (8 bytes each) one grid of a lower bound may hold: 400 MB.
LOWER_CELLS: float = 5e7


def _upper_count(mean: float, var: float, cap: int | None = None) -> int:
    top = math.ceil(mean + _LOWER_TAIL_SD * math.sqrt(max(var, 0.0))) + _LOWER_MARGIN
    return top if cap is None else min(cap, top)


def _nb_matrix(counts: int, values: int, alpha: float) -> npt.NDArray[np.float64]:
    """nb[k, v] = P(G_1 + … + G_k = v), G_i iid geometric, P(G = j) = (1 − α)α^j (k = 0: v = 0)."""
    k = np.arange(counts + 1, dtype=np.float64)[:, None]
    v = np.arange(values + 1, dtype=np.float64)[None, :]
    out = np.asarray(nbinom_pmf(v, np.maximum(k, 1.0), 1.0 - alpha), dtype=np.float64)
    out[0, :] = 0.0
    out[0, 0] = 1.0
    return out


def _victim_law(epsilon: float, lam: float, bit: int, width: int) -> npt.NDArray[np.float64]:
    """P(y = 2·bit − 1 + B·η) on y ∈ [−1 − width, 1 + width] (|η| ≤ width kept)."""
    a = math.exp(-epsilon)
    y = np.arange(-1 - width, 2 + width)
    centre = 2 * bit - 1
    dist = np.abs(y - centre)
    law = np.where(dist <= width, lam * (1.0 - a) / (1.0 + a) * a ** dist.astype(np.float64), 0.0)
    law[y == centre] += 1.0 - lam
    return np.asarray(law, dtype=np.float64)


def sgm_view_laws(
    *, epsilon: float, lam: float, others: int, fakes: int = 0
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]] | None:
    """The laws of Cnt_SGM's unary view (#(+1), #(−1)) for the victim holding 0 and 1, when
    ``others`` honest other users hold 0 and ``fakes`` fair ±1 fakes are mixed in.

    Each other user sends y = −1 + B η: nothing but one −1 (B = 0), or with η ≥ 1 (probability
    λα/(1 + α)) η − 1 ~ Geom(α) ones, or with η ≤ 0 (probability λ/(1 + α)) 1 + |η| minus
    ones, |η| ~ Geom(α) (P(G = j) = (1 − α)α^j). With J and L users in the two noisy cases
    (multinomial), #(+1) = NB(J) and #(−1) − h = NB'(L) − J, NB sums of geometric laws:
    a product of two matrix products, no Fourier inversion. The victim's y and the fakes'
    (B_F, F − B_F), B_F ~ Bin(F, ½), are then convolved in directly. The grid is
    (#(+1), #(+1) + #(−1) − h − F); every entry is a sum of non-negative exact terms, the
    counts cut at 10 sd + 20 beyond their means (|η| ≤ 46/ε for the victim), so each
    computed probability is at most the true one, as
    :func:`~protocols.pair_lower_epsilon` needs. ``None`` when this would take
    more than :data:`LOWER_WORK` multiply-adds or a grid more than :data:`LOWER_CELLS`
    entries (tiny ε, or very many fakes).
    """
    from scipy.special import gammaln, xlogy

    eps = check_epsilon(epsilon)
    h = check_n(others, "others", 0)
    f = check_n(fakes, "fakes", 0)
    a = math.exp(-eps)
    p_plus, p_minus = lam * a / (1.0 + a), lam / (1.0 + a)
    g_mean, g_var = a / (1.0 - a), a / (1.0 - a) ** 2
    jmax = _upper_count(h * p_plus, h * p_plus * (1.0 - p_plus), h)
    lmax = _upper_count(h * p_minus, h * p_minus * (1.0 - p_minus), h)
    amax = _upper_count(jmax * g_mean, jmax * g_var)
    emax = _upper_count(lmax * g_mean, lmax * g_var)
    width = math.ceil(46.0 / eps) + 2  # P(|η| > width) < e^{−46}
    rows, cols = amax + width + 3, amax + jmax + emax + width + 3
    b_lo, b_law = binomial_window(f, 0.5) if f else (0, np.ones(1))
    work = (
        (jmax + 1) * (lmax + 1) * (emax + 1)
        + (amax + 1) * (jmax + 1) * (jmax + emax + 1)
        + 2 * (2 * width + 3) * (amax + 1) * (amax + jmax + emax + 1)
        + (2 * (rows + b_law.size) * rows * cols if f else 0)
    )
    # The grids themselves, not only the work: at tiny ε the victim's width alone
    # (46/ε) makes rows·cols huge while the work above stays small.
    cells = rows * cols + ((rows + b_law.size) * rows if f else 0)
    if work > LOWER_WORK or cells > LOWER_CELLS:
        return None
    j = np.arange(jmax + 1, dtype=np.float64)[:, None]
    ll = np.arange(lmax + 1, dtype=np.float64)[None, :]
    rest = h - j - ll
    with np.errstate(divide="ignore", invalid="ignore"):
        log_mult = (
            gammaln(h + 1.0)
            - gammaln(j + 1.0)
            - gammaln(ll + 1.0)
            - gammaln(np.maximum(rest, 0.0) + 1.0)
            + xlogy(j, p_plus)
            + xlogy(ll, p_minus)
            + xlogy(np.maximum(rest, 0.0), 1.0 - lam)
        )
    mult = np.where(rest >= 0, np.exp(log_mult), 0.0)
    v = mult @ _nb_matrix(lmax, emax, a)  # v[J, e] = P(J, NB'(L) = e)
    g = np.zeros((jmax + 1, jmax + emax + 1))
    for jj in range(jmax + 1):  # index d + jmax, d = e − J = #(−1) − h
        g[jj, jmax - jj : jmax - jj + emax + 1] = v[jj]
    r = _nb_matrix(jmax, amax, a).T @ g  # r[#(+1), d + jmax]
    crowd = np.zeros((amax + 1, amax + jmax + emax + 1))
    for p_ones in range(amax + 1):  # s = #(+1) + d: index s + jmax
        crowd[p_ones, p_ones : p_ones + jmax + emax + 1] = r[p_ones]
    laws = []
    for bit in (0, 1):
        out = np.zeros((rows, cols))
        vic = _victim_law(eps, lam, bit, width)
        for y, w in zip(range(-1 - width, 2 + width), vic, strict=True):
            if w > 0.0:
                dp, ds = max(y, 0), abs(y)
                out[dp : dp + amax + 1, ds : ds + crowd.shape[1]] += w * crowd
        if f:
            # #(+1) gains B_F and s is unchanged: a Toeplitz product along the first axis.
            size = rows + b_law.size - 1
            toeplitz = np.zeros((size, rows))
            for k in range(rows):
                toeplitz[k : k + b_law.size, k] = b_law
            out = toeplitz @ out
        laws.append(out)
    del b_lo  # the window's offset shifts both laws alike
    return laws[0], laws[1]


def sgm_sum_laws(*, epsilon: float, lam: float, honest: int) -> npt.NDArray[np.float64] | None:
    """The law of M = Σ_{i ≤ h} B_i η_i, the honest users' noise in Cnt_SGM's sum T (victim
    included), on [−U, U]: K ~ Bin(h, λ) noisy users, and given K, M = NB(K) − NB'(K)
    (an SG(α) is the difference of two iid Geom(α)). Non-negative exact terms, K and the NB
    sums cut at 10 sd + 20 beyond their means, so each value is at most the true one.
    ``None`` beyond :data:`LOWER_WORK` multiply-adds or :data:`LOWER_CELLS` entries (tiny ε
    with λ = 1 and many users)."""
    eps = check_epsilon(epsilon)
    h = check_n(honest, "honest", 1)
    a = math.exp(-eps)
    lo, k_law = binomial_window(h, lam) if lam < 1.0 else (h, np.ones(1))
    kmax = lo + k_law.size - 1
    umax = _upper_count(kmax * a / (1.0 - a), kmax * a / (1.0 - a) ** 2)
    if k_law.size * (umax + 1) ** 2 > LOWER_WORK or (kmax + 1) * (umax + 1) > LOWER_CELLS:
        return None
    nb = _nb_matrix(kmax, umax, a)
    law = np.zeros(2 * umax + 1)
    for k, w in zip(range(lo, kmax + 1), k_law, strict=True):
        if w > 0.0:
            law += w * np.convolve(nb[k], nb[k][::-1])
    return law


class CntSGMSplitMix(ModularMessages, CntSGM):
    """``Cnt_SGM`` as registered by default: the analyzer learns only Σ y_i (the survey's
    unary ±1 messages also show their two counts, so y_i mod q travels as Split-Mix shares
    instead).

    ``--option encoding=splitmix``. The randomizer is Cnt_SGM's: y_i = s_i + B_i η_i with
    the survey's λ and α = e^{−ε}, ε = γε_c/3. Instead of ``|y_i|`` unary ±1 messages, the
    encoder splits y_i mod q into m uniform shares (:attr:`share_spec`); the analyzer sums
    them mod q and unwraps, T = z − q if z > q/2, so it sees T (and the fakes, whose values
    sum to 0 mod q) and nothing else up to the Split-Mix distance. The estimator and its
    exact variance are Cnt_SGM's: ĉ = (T + n)/2, Var ĉ = nλ Var η / 4 (fakes add nothing).

    Privacy. T alone is ε_T-DP (:func:`sgm_sum_epsilon`, exact) with the ⌈γn⌉ honest users
    the robustness assumes; ε_T ≤ 3ε/γ, the survey's claim, everywhere we computed it
    (tests), and 2ε = (2/3)ε_c at γ = 1 for the usual λn ≫ 1. The shuffled shares of h ≥ 3
    honest users are 2^{−σ}-close to a function of their sum (:meth:`ShareSpec.shares_for`,
    m chosen for h = ⌈γn⌉ and σ = log₂((1 + e^{ε_T})/δ)), so the view is (ε_T, δ)-DP — the
    survey's pure claim up to a δ of the shares: robust (ε_T, δ, γ). One user's y_i is
    ε_l-LDP (Cnt_SGM's local bound), and its shares are a post-processing of it, so with
    every shuffler colluding the user keeps ε_l. q is a power of two ≥ 2(n + W) + 1,
    W = ⌈64/ε⌉ + 64·sd(M): T unwraps correctly unless the noise exceeds W, which Chebyshev
    already bounds by 1/4096 (M's tails are exponential, so in fact far less); a wrap would
    cost accuracy, never privacy. Needs ⌈γn⌉ ≥ 3.
    """

    def __init__(self, *, epsilon: float, n: int, delta: float, gamma: float = 1.0) -> None:
        super().__init__(epsilon=epsilon, n=n, gamma=gamma)
        p = self.params
        self._delta = check_delta(
            delta,
            why="its Split-Mix shares are 2^-sigma-close, approximate DP "
            "(--option encoding=unary is pure)",
        )
        if self.honest_users < 3:
            raise ParameterError(
                f"cnt_sgm (encoding=splitmix): Split-Mix needs at least 3 honest users, "
                f"gamma*n = {p.gamma * p.n:g}"
            )
        sd = math.sqrt(p.n * p.lam * symmetric_geometric_variance(p.alpha))
        width = math.ceil(64.0 / p.epsilon) + math.ceil(64.0 * sd)
        self.q = 1 << (2 * (p.n + width)).bit_length()
        self.sigma = math.log2((1.0 + math.exp(self.sum_epsilon)) / self._delta)
        self.share_spec = ShareSpec(
            modulus=self.q,
            shares=ShareSpec.shares_for(sigma=self.sigma, modulus=self.q, users=self.honest_users),
        )
        self._size = uint_codec_size(self.q)

    @classmethod
    def from_central(  # type: ignore[override]
        cls, *, epsilon_central: float, n: int, delta: float, gamma: float = 1.0
    ) -> CntSGMSplitMix:
        """Configure as the survey does (ε = γε_c/3); the proven ε_T is at most ε_c.

        Args:
            epsilon_central: the target ε_c.
            n: the number of users.
            delta: the target δ (the Split-Mix shares' closeness).
            gamma: the fraction γ of users assumed honest, in (0, 1].

        Returns:
            The configured protocol.
        """
        eps_c = check_epsilon(epsilon_central, "epsilon_central")
        g = check_gamma(gamma)
        return cls(epsilon=g * eps_c / 3.0, n=n, delta=delta, gamma=g)

    @property
    def message_size(self) -> int:
        return self._size

    @property
    def messages_per_user(self) -> float:
        assert self.share_spec is not None
        return float(self.share_spec.shares)

    @property
    def privacy(self) -> PrivacyGuarantee:
        assert self.share_spec is not None
        return PrivacyGuarantee(
            epsilon_central=self.sum_epsilon,
            epsilon_local=self.epsilon_local,
            delta=self._delta,
            bound=(
                f"cnt_sgm_splitmix_exact (exact pure ε of the sum, {self.honest_users} honest "
                f"users, gamma={self.params.gamma:g}; Split-Mix m={self.share_spec.shares}, "
                f"sigma={self.sigma:.1f})"
            ),
        )

    def honest_users_bound(self, honest_others: int) -> HonestUsersBound | None:
        """Upper: the exact pure ε_T for ``honest_others`` + 1 honest users (the view is
        δ-close to a function of T); only while they are at least the ⌈γn⌉ the shares were
        sized for — below that the audit falls back on ε_l. No lower bound here (a pure
        ε_T is none at δ > 0): :meth:`honest_users_lower` gives one at δ.

        Args:
            honest_others: the honest users besides the victim.

        Returns:
            The bound, or ``None``.
        """
        h = check_n(honest_others, "honest others", 0) + 1
        if h < self.honest_users:
            return None
        eps = sgm_sum_epsilon(epsilon=self.params.epsilon, lam=self.params.lam, honest=h)
        return HonestUsersBound(eps, "cnt_sgm_splitmix_exact")

    def honest_users_lower(
        self, honest_others: int, *, fakes: int = 0, delta: float
    ) -> tuple[float, str] | None:
        """A lower bound on the victim's ε at δ: the exact ε(δ) of the sum T, which the
        analyzer computes from the view (so it is a post-processing of it, whatever the
        number of shares), for ``honest_others`` + 1 honest users, the others holding 0,
        victim 0 against 1 (:func:`sgm_sum_laws`). Fakes sum to 0 mod q and do not change
        T. ``None`` where the law is too wide to compute directly (tiny ε).

        Args:
            honest_others: the honest users besides the victim.
            fakes: the fake values the adversary cannot tell apart.
            delta: δ.

        Returns:
            ``(epsilon, pair)``: the lower bound and a description of the neighbouring pair, or
            ``None``.
        """

        h = check_n(honest_others, "honest others", 0) + 1
        check_n(fakes, "fakes", 0)
        law = sgm_sum_laws(epsilon=self.params.epsilon, lam=self.params.lam, honest=h)
        if law is None:
            return None
        zero = np.zeros(2)
        eps = pair_lower_epsilon(
            np.concatenate([law, zero]), np.concatenate([zero, law]), check_delta(delta)
        )
        who = f"{h} honest users" if h > 1 else "the victim alone"
        return eps, f"{who}, the others holding 0 (the sum T, exact)"

    def __repr__(self) -> str:
        p = self.params
        assert self.share_spec is not None
        return (
            f"CntSGMSplitMix(epsilon={p.epsilon:.6g}, n={p.n}, gamma={p.gamma:g}, "
            f"lam={p.lam:.6g}, q={self.q}, shares={self.share_spec.shares})"
        )

    def randomize(self, values: npt.ArrayLike, *, rng: RNGLike) -> npt.NDArray[Any]:
        rng = as_generator(rng)
        y = self._noisy_values(values, rng=rng)
        return np.asarray(np.mod(y, self.q), dtype=np.int64)  # one value per user

    def estimate(self, messages: npt.NDArray[Any], *, n: int, n_fakes: int) -> Estimate:
        m = np.asarray(messages, dtype=np.int64).reshape(-1)
        z = sum_mod(m, self.q)
        total = z - self.q if z > self.q // 2 else z
        return Estimate(
            values=np.array([(total + n) / 2.0], dtype=np.float64),
            expected_std=np.array([math.sqrt(self.variance(n=n))]),
            messages_used=int(m.size),
            extra={"modulus": self.q},
        )

    def variance(self, *, n: int, n_fakes: int = 0) -> float:
        """Exact Var ĉ = nλ Var η / 4: fakes sum to 0 mod q and add nothing.

        Args:
            n: the number of users.
            n_fakes: the fake values (ignored: they add nothing).

        Returns:
            The variance of the estimate.
        """
        return super().variance(n=n, n_fakes=0)


#: Cnt_SGM's encodings (``--option encoding=NAME``): Split-Mix shares of y_i, which prove
#: the survey's robust bound up to a δ (the default: it meets the requested ε), or the
#: survey's unary ±1 messages, which cannot (their two counts reveal more than the sum).
SGM_ENCODINGS: tuple[str, ...] = ("splitmix", "unary")


@register_protocol("cnt_sgm")
def _build_cnt_sgm(spec: ProtocolSpec) -> ShuffleProtocol:
    encoding = spec.options.get("encoding", SGM_ENCODINGS[0])
    if encoding not in SGM_ENCODINGS:
        raise ParameterError(
            f"cnt_sgm: encoding must be one of {', '.join(SGM_ENCODINGS)}, got {encoding!r}"
        )
    if encoding == "splitmix":
        return CntSGMSplitMix.from_central(
            epsilon_central=spec.epsilon,
            n=spec.n,
            delta=spec.delta,
            gamma=check_gamma(number_option(spec, "gamma", 1.0)),
        )
    return CntSGM.from_central(
        epsilon_central=spec.epsilon, n=spec.n, gamma=check_gamma(number_option(spec, "gamma", 1.0))
    )
