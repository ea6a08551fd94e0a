"""Robustly shuffle-private counting with approximate privacy: ``Cnt_BN``.

Balcer, Cheu, Joseph, Mao, "Connecting Robust Shuffle Privacy and Pan-Privacy" (SODA'21,
arXiv 2004.09481), binary-sum protocols as summarized in survey §4.1 (table 6). A protocol
is (ε, δ, γ)-robustly shuffle private (RSDP) if it stays (ε, δ)-DP against the analyzer
whenever at least γn of the n users run the randomizer honestly, whatever the others send:
the others' messages are then a fixed, known offset, so only the honest users' noise counts.
The robustness fraction γ is ``ProtocolSpec.options["gamma"]`` (default 1).

``Cnt_BN`` (approximate, survey: (ε, δ, γ)-RSDP). What the survey states (seed 004, §4.1):
the protocol "is based on the Poisson distribution"; user i sends its bit x_i together with
s_i noise bits drawn iid Ber(1/2); the analyzer estimates the count from n₁, n₀ (the ones
and zeros it receives); and it is (ε, δ, γ)-RSDP when s_i satisfies a condition whose
formula was lost in extraction — so no equation of the paper can be cited for s_i, and
the paper's text beyond its abstract was not available offline. What follows is ours: the
Poisson law of s_i as the survey's prose describes it, the estimator, its variance, and an
EXACT calibration of the noise level (not the paper's constants).

Randomizer: s_i ~ Poisson(μ) iid, μ = Λ/(γ n). The ≥ γn honest users then send together
Poisson(≥ Λ) noise bits whatever n is, so the error does not grow with n; by Poisson
thinning their noise ones and zeros are independent Poisson(Λ/2) each.

Estimator: with n₁, n₀ the received ones and zeros and N = n₁ + n₀ − n the noise bits
(users' and the shufflers' uniform fakes alike — a fake is a Ber(1/2) bit like any other),
    ĉ = n₁ − (n₁ + n₀ − n)/2 = Σx + B − N/2,  B | N ~ Bin(N, 1/2),
    E ĉ = Σx,   Var ĉ = E[N]/4 = (n μ + n_f)/4
(n_f fakes; everyone honest, as in any accuracy statement). The variance n μ/4 = Λ/(4γ) does
not depend on n.

Privacy (exact, robust). Dishonest users' messages are a fixed, known offset, and so are the
bits of every honest user but the one whose input differs; what hides that input is the
honest noise only: M ~ Poisson(Λ_h), Λ_h = (#honest) μ ≥ Λ. M is visible (n₁ + n₀ reveals
it), and given M the ones among the noise are Bin(M, 1/2); neighbouring datasets shift the
observed ones by one. Hence the exact hockey-stick divergence of the shuffled view is
    δ(ε; Λ) = E_{M~Poisson(Λ)} [δ_M(ε)],
    δ_M(ε) = max{D_ε(Bin(M,½) ‖ Bin(M,½)+1), D_ε(Bin(M,½)+1 ‖ Bin(M,½))},
with D_ε(P‖Q) = Σ_a max(P(a) − e^ε Q(a), 0). The likelihood ratio b_M(a)/b_M(a−1) =
(M + 1 − a)/a is monotone in a, so each divergence is a difference of two binomial
tails: D_ε(B‖B+1) = F_M(t) − e^ε F_M(t − 1), t = ⌈(M + 1)/(1 + e^ε)⌉ − 1 (F_M the CDF),
and symmetrically with survival functions (:func:`bn_shift_delta`). δ(ε; Λ) is
non-increasing in Λ (more Poisson noise is a post-processing: add independent Poisson
bits) and in Λ_h ≥ Λ, so the calibration is the smallest Λ with δ(ε; Λ) ≤ δ, found by
bisection (:func:`calibrate_bn_noise`). The Poisson expectation is summed over
M ∈ [Λ − 14√Λ − 196, Λ + 14√Λ + 196]; the left-out mass is added as an upper bound
(δ_M ≤ 1 below, δ_M ≤ δ_hi above, by monotonicity in M), so the computed δ is never below
the exact one and exceeds it by < 10^{-40}. This guarantee holds for every ε > 0 (there is
no ε ≤ 1 restriction). Whatever ε, Λ ≥ 2 ln(1/δ): a view whose noise bits are all zeros
(M = 0 included) has probability 0 under the shifted dataset, so δ(ε; Λ) ≥ E[2^{−M}] =
e^{−Λ/2}, which is also the limit of δ(ε; Λ) as ε → ∞.
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
    ShuffleProtocol,
    check_delta,
    check_epsilon,
    check_gamma,
    check_n,
)
from ._errors import ParameterError
from ._messages import (
    decode_bits,
    encode_bits,
)
from ._random import RNGLike, as_generator
from ._registry import ProtocolSpec, number_option, register_protocol

__all__ = [
    "CntBN",
    "CntBNParams",
    "bn_shift_delta",
    "calibrate_bn_noise",
    "poisson_bn_delta",
]

# ---------------------------------------------------------------------------------------
# Cnt_BN
# ---------------------------------------------------------------------------------------


#: Half-width of the Poisson window in δ(ε; Λ), in standard deviations (plus its square):
#: the mass left out is < 2e-42 (Chernoff) and is added back as an upper bound anyway.
_POISSON_WINDOW: float = 14.0

#: Largest honest noise Λ we calibrate to (10^7 noise messages, ε ≈ 0.002 at δ = 10^{-6});
#: a smaller ε is refused rather than searched for (and simulated) at any cost.
MAX_BN_NOISE: float = 1e7


def bn_shift_delta(trials: npt.ArrayLike, epsilon: float) -> npt.NDArray[np.float64]:
    """Exact δ_M(ε) between B ~ Bin(M, 1/2) and B + 1, both directions (max), vectorized.

    The likelihood ratio b_M(a)/b_M(a − 1) = (M + 1 − a)/a falls with a, so
    D_ε(B ‖ B+1) = Σ_{a ≤ t} (b_M(a) − e^ε b_M(a−1)) = F_M(t) − e^ε F_M(t−1) with
    t = ⌈(M + 1)/(1 + e^ε)⌉ − 1, and D_ε(B+1 ‖ B) = Σ_{a ≥ u} (b_M(a−1) − e^ε b_M(a))
    = P(B ≥ u − 1) − e^ε P(B ≥ u) with u = ⌊M + 1 − (M + 1)/(1 + e^ε)⌋ + 1. (A boundary a
    whose ratio equals e^ε exactly adds 0 either way, so rounding there is harmless.)

    Args:
        trials: M ≥ 0 (array of integers).
        epsilon: ε > 0.

    Returns:
        δ_M(ε) for each M, in [0, 1].
    """
    m = np.asarray(trials, dtype=np.float64)
    e = math.exp(epsilon)
    x = (m + 1.0) / (1.0 + e)
    t = np.ceil(x) - 1.0
    forward = _bin_half_cdf(t, m) - e * _bin_half_cdf(t - 1.0, m)
    u = np.floor(m + 1.0 - x) + 1.0
    backward = _bin_half_cdf(u - 2.0, m, upper=True) - e * _bin_half_cdf(u - 1.0, m, upper=True)
    return np.asarray(np.clip(np.maximum(forward, backward), 0.0, 1.0), dtype=np.float64)


def _bin_half_cdf(
    k: npt.NDArray[np.float64], m: npt.NDArray[np.float64], *, upper: bool = False
) -> npt.NDArray[np.float64]:
    """P(B ≤ k) (or P(B > k) if ``upper``) for B ~ Bin(m, 1/2), elementwise.

    Through the regularized incomplete beta function, P(B ≤ k) = I_{1/2}(m − k, k + 1) for
    0 ≤ k < m, which keeps relative accuracy in the far tails (scipy's ``bdtr`` does too but
    is several times slower here and warns on float arguments).
    """
    from scipy import special  # lazy: keeps `import protocols` free of scipy

    inside = (k >= 0.0) & (k < m)
    kk = np.where(inside, k, 0.0)
    mm = np.where(inside, m, 1.0)
    if upper:
        val = special.betainc(kk + 1.0, mm - kk, 0.5)
        return np.asarray(np.where(inside, val, np.where(k < 0.0, 1.0, 0.0)), dtype=np.float64)
    val = special.betainc(mm - kk, kk + 1.0, 0.5)
    return np.asarray(np.where(inside, val, np.where(k < 0.0, 0.0, 1.0)), dtype=np.float64)


def poisson_bn_delta(lam: float, epsilon: float) -> float:
    """Exact δ(ε; Λ) = E_{M ~ Poisson(Λ)}[δ_M(ε)] of Cnt_BN's shuffled view (module doc).

    Sums the Poisson expectation over M ∈ Λ ± (14√Λ + 196) and adds the left-out mass as an
    upper bound (δ_M ≤ 1 below the window, ≤ δ_M at its top above it, since δ_M does not
    increase with M), so the result is never below the exact value and above it by
    < 10^{-40}.

    Args:
        lam: Λ ≥ 0, the Poisson mean of the honest noise bits.
        epsilon: ε > 0.
    """
    from scipy import special  # lazy, as above

    lam = float(lam)
    if lam <= 0.0:
        return 1.0
    half = _POISSON_WINDOW * math.sqrt(lam) + _POISSON_WINDOW**2
    lo = max(0, math.floor(lam - half))
    hi = math.ceil(lam + half)
    m = np.arange(lo, hi + 1, dtype=np.float64)
    weights = np.exp(m * math.log(lam) - lam - special.gammaln(m + 1.0))
    d = bn_shift_delta(m, epsilon)
    below = float(special.pdtr(lo - 1, lam)) if lo > 0 else 0.0
    above = float(special.pdtrc(hi, lam)) * float(d[-1])
    return min(1.0, float(np.dot(weights, d)) + below + above)


def _gaussian_noise_estimate(epsilon: float, delta: float) -> float:
    """Λ ≈ 4σ² with σ the analytic Gaussian mechanism's noise for sensitivity 1.

    Bin(M, 1/2) ≈ N(M/2, M/4), and the shift-by-one Gaussian has the exact
    δ(σ) = Φ(1/(2σ) − εσ) − e^ε Φ(−1/(2σ) − εσ) (Balle & Wang, ICML'18, Thm 8); σ is
    found by bisection in log σ. Only a starting point for :func:`calibrate_bn_noise`.
    """

    def gauss_delta(sigma: float) -> float:
        a, b = 1.0 / (2.0 * sigma), epsilon * sigma
        return 0.5 * math.erfc((b - a) / math.sqrt(2.0)) - math.exp(epsilon) * 0.5 * math.erfc(
            (a + b) / math.sqrt(2.0)
        )

    lo, hi = 1e-6, 1e8
    for _ in range(100):
        mid = math.sqrt(lo * hi)
        lo, hi = (lo, mid) if gauss_delta(mid) <= delta else (mid, hi)
    return 4.0 * hi * hi


@functools.lru_cache(maxsize=256)
def calibrate_bn_noise(epsilon: float, delta: float) -> float:
    """Smallest honest noise Λ with δ(ε; Λ) ≤ δ, to relative precision 10^{-7}.

    δ(ε; Λ) does not increase with Λ (module doc), so a bracket search applies. The bracket
    starts around the Gaussian approximation (:func:`_gaussian_noise_estimate`), each end
    checked — falling back to ln(1/δ), infeasible since δ(ε; Λ) ≥ e^{−Λ/2} — and doubles
    its upper end until feasible; it is then shrunk by regula falsi (Illinois variant) on
    ln δ(ε; Λ) − ln δ, smooth and nearly linear in Λ, every step kept at least 4·10^{-8} Λ
    inside the bracket. The returned value is the feasible end of the final bracket, so
    δ(ε; Λ) ≤ δ always holds for it. Cached per (ε, δ).

    Raises:
        ParameterError: ε ≤ 0, δ ∉ (0, 1), or Λ would exceed :data:`MAX_BN_NOISE`.
    """
    eps = check_epsilon(epsilon)
    d = check_delta(delta)
    log_d = math.log(d)

    def f(lam: float) -> float:
        return math.log(max(poisson_bn_delta(lam, eps), 1e-300)) - log_d

    # Start from the Gaussian approximation (close for small ε, where evaluations are
    # costly); every bracket end is verified, so the approximation only saves time.
    guess = _gaussian_noise_estimate(eps, d)
    if guess > 2.0 * MAX_BN_NOISE:
        raise ParameterError(
            f"cnt_bn: (epsilon={eps:g}, delta={d:g}) needs about {guess:.3g} > "
            f"{MAX_BN_NOISE:g} noise bits; use a larger epsilon or delta"
        )
    lo = max(-log_d, 0.99 * guess)
    f_lo = f(lo)
    if f_lo <= 0.0:
        lo = -log_d
        f_lo = f(lo)
    hi = max(-2.0 * log_d, 1.02 * guess, 1.01 * lo)
    f_hi = f(hi)
    while f_hi > 0.0:
        if hi >= MAX_BN_NOISE:
            raise ParameterError(
                f"cnt_bn: (epsilon={eps:g}, delta={d:g}) needs more than {MAX_BN_NOISE:g} "
                "noise bits; use a larger epsilon or delta"
            )
        lo, f_lo, hi = hi, f_hi, min(2.0 * hi, MAX_BN_NOISE)
        f_hi = f(hi)
    # Invariant: f(lo) > 0 ≥ f(hi). Illinois: halve the stale end's value so both ends move.
    side = 0
    while hi - lo > 1e-7 * hi:
        mid = hi - f_hi * (hi - lo) / (f_hi - f_lo)
        # Step at least half the tolerance inside the bracket (as Brent's method does), so
        # that once the root is located the next step closes the bracket from its far side.
        tol = 4e-8 * hi
        mid = min(max(mid, lo + tol), hi - tol) if math.isfinite(mid) else 0.5 * (lo + hi)
        f_mid = f(mid)
        if f_mid > 0.0:
            lo, f_lo = mid, f_mid
            if side == -1:
                f_hi *= 0.5
            side = -1
        else:
            hi, f_hi = mid, f_mid
            if side == 1:
                f_lo *= 0.5
            side = 1
    return hi


#: Largest ε :meth:`CntBN.honest_users_bound` searches (e^{64}: beyond it, no guarantee).
_BN_AUDIT_MAX_EPSILON = 64.0


@functools.lru_cache(maxsize=1024)
def _bn_honest_bound(lam: float, delta: float) -> HonestUsersBound | None:
    """Smallest ε with δ(ε; Λ) ≤ δ, to 10^{-9} relative, or None if ε = 64 does not reach δ."""
    if poisson_bn_delta(lam, _BN_AUDIT_MAX_EPSILON) > delta:
        return None
    lo, hi = 0.0, _BN_AUDIT_MAX_EPSILON
    while hi - lo > 1e-9 * hi:
        mid = 0.5 * (lo + hi)
        if poisson_bn_delta(lam, mid) <= delta:
            hi = mid
        else:
            lo = mid
    return HonestUsersBound(hi, f"cnt_bn_poisson_exact (Poisson({lam:.6g}) honest noise bits)")


@dataclass(frozen=True, slots=True)
class CntBNParams:
    """Parameters of ``Cnt_BN`` (survey §4.1's Poisson protocol; our exact calibration).

    The survey states the randomizer (x_i plus s_i Ber(1/2) bits, s_i Poisson) and the
    (ε, δ, γ)-RSDP claim; its formula for s_i was lost in extraction, so no paper equation
    is cited. Ours: s_i ~ Poisson(μ), μ = Λ/(γ n), with Λ the smallest value whose exact
    δ(ε; Λ) = E_{M~Poisson(Λ)}[δ_M(ε)] is ≤ δ (module doc, :func:`calibrate_bn_noise`);
    the ≥ γn honest users then send Poisson(≥ Λ) noise bits, so the protocol is
    (ε, δ, γ)-robustly shuffle private for every ε > 0.

    Attributes:
        epsilon: ε of the guarantee.
        delta: target δ of the guarantee.
        n: number of users.
        gamma: fraction of honest users the guarantee assumes.
        noise: Λ, the Poisson mean of the honest users' noise bits together.
        mu: μ = Λ/(γ n), each user's expected number of noise bits.
        delta_exact: δ(ε; Λ) ≤ delta, the exact δ at the calibrated Λ.
    """

    epsilon: float
    delta: float
    n: int
    gamma: float
    noise: float
    mu: float
    delta_exact: float

    @classmethod
    def derive(cls, *, epsilon: float, delta: float, n: int, gamma: float = 1.0) -> CntBNParams:
        eps = check_epsilon(epsilon)
        d = check_delta(delta)
        n = check_n(n)
        g = check_gamma(gamma)
        if g * n < 1.0:
            raise ParameterError(f"cnt_bn: gamma*n must be >= 1 honest user, got {g * n:g}")
        lam = calibrate_bn_noise(eps, d)
        return cls(eps, d, n, g, lam, lam / (g * n), poisson_bn_delta(lam, eps))


class CntBN(ShuffleProtocol):
    """``Cnt_BN``: own bit plus Poisson(μ) fair-coin bits per user (see module doc)."""

    name: ClassVar[str] = "cnt_bn"
    input_kind: ClassVar[InputKind] = InputKind.BINARY

    def __init__(self, *, epsilon: float, delta: float, n: int, gamma: float = 1.0) -> None:
        self.params = CntBNParams.derive(epsilon=epsilon, delta=delta, n=n, gamma=gamma)

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
        """Expected: the own bit plus E s_i = μ noise bits."""
        return 1.0 + self.params.mu

    @property
    def privacy(self) -> PrivacyGuarantee:
        p = self.params
        return PrivacyGuarantee(
            epsilon_central=p.epsilon,
            epsilon_local=math.inf,
            delta=p.delta_exact,
            bound=(
                f"cnt_bn_poisson_exact (exact delta of Poisson({p.noise:.6g}) honest "
                f"Ber(1/2) noise, gamma={p.gamma:g})"
            ),
        )

    def honest_users_bound(self, honest_others: int) -> HonestUsersBound | None:
        """Upper: the exact ε at the protocol's δ of the noise the honest users still send.

        Colluding users' bits are known to the analyzer, so ``honest_others`` + 1 honest
        users leave Poisson(μ·(honest_others + 1)) noise bits: the smallest ε with
        δ(ε; μ(h + 1)) ≤ δ (:func:`poisson_bn_delta`, non-increasing in ε), found by
        bisection and returned at the bracket's feasible end. At h + 1 ≥ γn this is at most
        the robust guarantee's ε; below, the guarantee degrades gracefully instead of being
        lost. ``None`` where no ε ≤ :data:`_BN_AUDIT_MAX_EPSILON` reaches δ (too few honest
        users: with no noise bit, which has probability e^{−μ(h+1)}, the victim's bit is
        exposed). Fakes are not counted (they would only add noise bits).

        Args:
            honest_others: the honest users besides the victim.

        Returns:
            The bound, or ``None``.
        """
        h = check_n(honest_others, "honest others", 0) + 1
        p = self.params
        return _bn_honest_bound(p.mu * h, p.delta)

    def __repr__(self) -> str:
        p = self.params
        return (
            f"CntBN(epsilon={p.epsilon:g}, delta={p.delta:g}, n={p.n}, gamma={p.gamma:g}, "
            f"noise={p.noise:.6g}, mu={p.mu:.6g})"
        )

    def randomize(self, values: npt.ArrayLike, *, rng: RNGLike) -> npt.NDArray[Any]:
        rng = as_generator(rng)
        x = self.validate_values(values).astype(np.uint8, copy=False)
        # Each user draws its own s_i; after shuffling only their total is visible.
        total = int(np.asarray(rng.poisson(self.params.mu, size=x.shape[0])).sum())
        noise = (rng.random(total) < 0.5).astype(np.uint8)
        return np.concatenate([x, noise])

    def encode(self, messages: npt.NDArray[Any]) -> npt.NDArray[np.uint8]:
        return encode_bits(messages)

    def decode(self, rows: npt.NDArray[np.uint8]) -> tuple[npt.NDArray[Any], npt.NDArray[np.bool_]]:
        return decode_bits(rows)

    def sample_fakes(self, count: int, *, rng: RNGLike) -> npt.NDArray[Any]:
        rng = as_generator(rng)
        return (rng.random(check_n(count, "count", 0)) < 0.5).astype(np.uint8)

    def estimate(self, messages: npt.NDArray[Any], *, n: int, n_fakes: int) -> Estimate:
        m = np.asarray(messages).reshape(-1)
        n1 = int(np.count_nonzero(m == 1))
        n0 = int(np.count_nonzero(m == 0))
        noise = n1 + n0 - n
        return Estimate(
            values=np.array([n1 - noise / 2.0], dtype=np.float64),
            expected_std=np.array([math.sqrt(self.variance(n=n, n_fakes=n_fakes))]),
            messages_used=int(m.size),
            extra={"noise_bits": noise},
        )

    def variance(self, *, n: int, n_fakes: int = 0) -> float:
        """Exact Var ĉ = E[N]/4 = (n μ + n_f)/4 (independent of the data).

        Args:
            n: the number of users.
            n_fakes: the fake bits among the messages.

        Returns:
            The variance of the estimate.
        """
        return (n * self.params.mu + n_fakes) / 4.0

    @property
    def count_noise(self) -> CountNoise:
        """User i's error term is (P₁ − P₀)/2, its noise ones and zeros P₁, P₀ independent
        Poisson(μ/2) (thinning): symmetric, E d² = μ/4, E d⁴ = (μ + 3μ²)/16 (Skellam:
        second and fourth cumulants μ), whatever x_i."""
        mu = self.params.mu
        return CountNoise(variance=mu / 4.0, third=0.0, fourth=(mu + 3.0 * mu * mu) / 16.0)

    def truth(self, values: npt.ArrayLike) -> npt.NDArray[np.float64]:
        x = self.validate_values(values)
        return np.array([float(x.sum())], dtype=np.float64)


@register_protocol("cnt_bn")
def _build_cnt_bn(spec: ProtocolSpec) -> ShuffleProtocol:
    return CntBN(
        epsilon=spec.epsilon,
        delta=spec.delta,
        n=spec.n,
        gamma=check_gamma(number_option(spec, "gamma", 1.0)),
    )
