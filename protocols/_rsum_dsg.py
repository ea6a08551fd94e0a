"""Real summation by distributed discrete Laplace noise and Split-Mix: ``RSum_DSG``.

Balle, Bell, Gascón, Nissim (arXiv 1906.09116), with the Split-Mix of Ishai, Kushilevitz,
Ostrovsky, Sahai (FOCS'06): every user rounds its x_i ∈ [0, 1] (:func:`randomized_round`),
adds its share of a discrete Laplace noise and sends the result as uniform shares of Z_q
(survey §4.3, table 8).
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from ._base import (
    Estimate,
    HonestUsersBound,
    InputKind,
    PrivacyGuarantee,
    ShareSpec,
    ShuffleProtocol,
    check_delta,
    check_epsilon,
    check_n,
)
from ._distributions import fftconvolve, nbinom_isf, nbinom_pmf, nbinom_sf
from ._errors import BoundNotApplicable, ParameterError
from ._messages import (
    ModularMessages,
    randomized_round,
    sum_mod,
    uint_codec_size,
)
from ._noise import polya, symmetric_geometric_variance
from ._random import RNGLike, as_generator
from ._registry import ProtocolSpec, register_protocol
from ._rsum import (
    _check_precision,
    _check_reals,
    _opt_int,
    rounding_variance,
)

__all__ = [
    "DSG_WRAP_PROBABILITY",
    "MAX_DSG_MODULUS",
    "RSumDSG",
    "dlap_room",
    "dlap_tail",
]


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


#: Most cells (support × shifts) :func:`_polya_difference_delta` evaluates per ε; beyond it the
#: honest-users bound is not computed (``None``).
_MAX_SHIFT_CELLS = 10_000_000


def _polya_difference_delta(r: float, alpha: float, shift: int, eps: float, tail: float) -> float:
    """An upper bound on max over shifts 1 ≤ k ≤ ``shift`` of H_{e^ε}(Z + k ‖ Z), exact up to
    2·``tail``, for Z = A − A', A, A' iid Pólya(r, α).

    The pmf of Z is the convolution of the Pólya pmf on [0, L] with its mirror image, L the
    point beyond which the Pólya tail is below ``tail``; the mass this leaves out (at most
    2·P[A > L]) is added, since dropping mass from P and Q moves a hockey-stick divergence by
    at most the mass dropped from P. Z is symmetric, so one direction per shift suffices
    (H(Z ‖ Z + k) = H(Z − k ‖ Z) = H(Z + k ‖ Z)).

    Raises:
        BoundNotApplicable: the support times the shifts exceeds ``_MAX_SHIFT_CELLS``.
    """
    top = int(nbinom_isf(tail, r, 1.0 - alpha)) + 1
    if (2 * top + 1) * shift > _MAX_SHIFT_CELLS:
        raise BoundNotApplicable(
            f"rsum_dsg: the exact noise law has {2 * top + 1} points and {shift} shifts"
        )
    f = nbinom_pmf(np.arange(top + 1), r, 1.0 - alpha)
    z = np.clip(fftconvolve(f, f[::-1]), 0.0, None)  # Z = A − A' on [−top, top]
    cut = 2.0 * float(nbinom_sf(top, r, 1.0 - alpha))
    big = math.exp(eps)
    worst = 0.0
    for k in range(1, shift + 1):
        worst = max(worst, float(np.maximum(z[:-k] - big * z[k:], 0.0).sum() + z[-k:].sum()))
    return worst + cut


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
    correction). Since 0 ≤ Σ R_p(x_i) ≤ np, the window holds S whenever ``|N|`` ≤ r,
    r = ⌊(q − np − 1)/2⌋ (the room on the tighter side), so the estimate z/p equals S/p
    except with probability w = P[``|N|`` > r] = 2α^{r+1}/(1 + α) (:attr:`wrap_probability`).
    q is the smallest power of two ≥ max(2(np + 1), np + 2t + 1), t = the smallest integer
    with P[``|N|`` > t] ≤ β = :data:`DSG_WRAP_PROBABILITY` = 2^{−40} (exact DLap tail,
    :func:`dlap_room`), so r ≥ t and w ≤ β. Estimate z/p: S/p is unbiased with

        Var = (Σ f(1−f) + 2α/(1−α)²)/p²   (rounding ≤ n/4/p², noise 2α/(1−α)²/p²),

    and z/p differs from it only on that event: a wrap by k·q needs ``|N| > r + (|k| − 1)q``,
    so ``|E z/p − Σx|`` ≤ (q/p)·w/(1 − α^q) ≤ (q/p)·β/(1 − α^q). With p = ⌈√n⌉ (the paper's
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
        """w = P[``|N|`` > ⌊(q − np − 1)/2⌋] ≤ β: the chance the estimate is off by a multiple
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

    def honest_users_bound(self, honest_others: int) -> HonestUsersBound | None:
        """Upper: the exact ε of the honest users' noise, with the Split-Mix cost at h users.

        With h = ``honest_others`` + 1 honest users the colluders' shares are known and
        removed, and what hides the victim's value is the honest users' noise: the sum of h
        Pólya(1/n, α) differences, Z = A − A' with A, A' iid Pólya(h/n, α) (no longer a
        discrete Laplace law). The victim's rounded value moves the sum by at most p (its
        rounding is a mixture of integer shifts, covered by joint convexity), so the ideal
        view (the honest sum mod q) is (ε, δ_Z(ε))-DP with δ_Z(ε) the largest
        H_{e^ε}(Z + k ‖ Z) over 1 ≤ k ≤ p (:func:`_polya_difference_delta`). For h ≥ 3 the m
        shares of the h honest users are 2^{−σ_h}-close to their sum, σ_h = ((m − 1)(log₂ h
        − log₂ e) − log₂ q)/2 (:meth:`ShareSpec.shares_for` solved for σ), which adds
        (1 + e^ε)·2^{−σ_h} to δ. The bound is the smallest ε (bisection to 10⁻⁶) with the
        total at most the protocol's δ, floored at the configured ε (with every user honest,
        the protocol's own guarantee). Since m is the fewest shares for n users, a few
        colluders can already leave σ_h too small: then the fallback below decides.

        Where that fails (h < 3, or the shares too few for h), the victim alone: its shares
        reveal exactly its own value plus its own noise (r = 1/n, no Split-Mix cost), and a
        bound for fewer honest users holds for more (the view with more honest users is the
        view with their data known, averaged over it on both sides). ``None`` when no ε
        reaches δ or the law is too large to compute (support × p above 10⁷).

        Args:
            honest_others: the honest users besides the victim.

        Returns:
            The bound, or ``None``.

        Raises:
            ParameterError: more honest users than n.
        """
        h = check_n(honest_others, "honest others", 0) + 1
        if h > self._n:
            raise ParameterError(f"rsum_dsg: {h} honest users exceed n={self._n}")
        claim = self.privacy
        if h == self._n and claim.delta <= self._delta:  # everyone honest: its own guarantee
            return HonestUsersBound(claim.epsilon_central, claim.bound)
        if h >= 3:
            sigma = ((self.m - 1) * (math.log2(h) - math.log2(math.e)) - math.log2(self.q)) / 2
            share_gap = 2.0**-sigma
            found = self._solve_noise(h / self._n, share_gap)
            if found is not None:
                return HonestUsersBound(
                    max(self._eps, found), f"rsum_dsg_polya_exact ({h} honest users' noise)"
                )
        found = self._solve_noise(1.0 / self._n, 0.0)
        if found is None:
            return None
        return HonestUsersBound(
            max(self._eps, found), "rsum_dsg_polya_exact (the victim's own noise)"
        )

    def _solve_noise(self, r: float, share_gap: float) -> float | None:
        """An ε ≤ 64 with δ_Z(ε) + (1 + e^ε)·share_gap ≤ δ, near the smallest (None if none).

        δ_Z falls and the shares' cost rises with ε, so the total need not be monotone: the
        first of 64 equally spaced ε (up to where the cost alone reaches δ) at which it holds
        is refined by bisection against the grid point below it, keeping the upper end
        valid. Whatever it returns satisfies the inequality.
        """
        delta = self._delta

        def ok(eps: float) -> bool:
            cost = (1.0 + math.exp(eps)) * share_gap
            return cost < delta and (
                _polya_difference_delta(r, self.alpha, self.p, eps, delta * 1e-6) + cost <= delta
            )

        top = 64.0
        if share_gap > 0.0:
            if delta / share_gap <= 2.0:
                return None
            top = min(top, math.log(delta / share_gap - 1.0))
        try:
            grid = np.linspace(0.0, top, 65)
            first = next((i for i, e in enumerate(grid) if ok(float(e))), None)
            if first is None:
                return None
            if first == 0:
                return 0.0
            lo, hi = float(grid[first - 1]), float(grid[first])
            while hi - lo > 1e-6:
                mid = (lo + hi) / 2.0
                lo, hi = (lo, mid) if ok(mid) else (mid, hi)
        except BoundNotApplicable:
            return None
        return hi

    def __repr__(self) -> str:
        return (
            f"RSumDSG(precision={self.p}, n={self._n}, epsilon={self._eps:g}, "
            f"delta={self._delta:g}, q={self.q}, shares={self.m})"
        )

    def randomize(self, values: npt.ArrayLike, *, rng: RNGLike) -> npt.NDArray[Any]:
        rng = as_generator(rng)
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
        """Exact variance for these inputs: rounding plus one DLap(α).

        Args:
            values: the users' values.
            n_fakes: the fake values among the messages.

        Returns:
            The variance of the estimate.
        """
        x = _check_reals(self, values)
        return (rounding_variance(x, self.p) + symmetric_geometric_variance(self.alpha)) / self.p**2

    def truth(self, values: npt.ArrayLike) -> npt.NDArray[np.float64]:
        return np.array([float(_check_reals(self, values).sum())])


@register_protocol("rsum_dsg")
def _build_rsum_dsg(spec: ProtocolSpec) -> ShuffleProtocol:
    return RSumDSG(
        epsilon=spec.epsilon,
        delta=spec.delta,
        n=spec.n,
        precision=_opt_int(spec, "precision"),
        shares=_opt_int(spec, "shares"),
    )
