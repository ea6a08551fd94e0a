"""``Cnt_PURE``: pure-DP binary counting with τ one-bit messages per user.

Ghazi, Golowich, Kumar, Manurangsi, Pagh, Velingker, "Pure Differentially Private Summation
from Anonymous Messages" (ITC'20, arXiv 2002.01919), as summarized in survey §4.1. Every
user sends exactly τ bits (τ odd, m = (τ−1)/2):
    with probability 1 − λ: m + x ones and m + 1 − x zeros        (input-dependent),
    with probability λ:     z ones and τ − z zeros, z ~ ω          (input-independent),
where ω is the survey's "truncated DLap(τ/2, Δ/ε)": z = clip(m + B + η, 0, τ) with
B ~ Ber(1/2) and η ~ SG(e^{−ε/Δ}) (m + B is the integer centring at τ/2; the scale Δ is
chosen by the calibration below), or a mixture of it with a truncated log-series law (see
"The noise law" below; this project's construction), symmetric about τ/2 so E z = τ/2.
The analyzer sees only C, the number of ones, and estimates
    ĉ = (C − (1−λ) n m − λ n τ/2 − f/2) / (1 − λ),
with f = (received bits) − nτ uniform fake bits: unbiased, with exact variance
    Var ĉ = [Σ_i Var o_i + f/4] / (1−λ)²,  E o = (1−λ)(m+x) + λτ/2,
    E o² = (1−λ)(m+x)² + λ E z².

PRIVACY, AND WHERE IT DEPARTS FROM THE PAPER. The survey lost every formula of this
protocol (τ, λ, Δ and the condition for ε-DP) and the paper's proofs were not available
offline, so (λ, ω) are not the paper's: they are the least-variance pair whose central pure
ε this module *computes exactly* for a subset of the other users, by this reduction. It
holds for any ω on {0, …, τ} symmetric about τ/2 with full support, so the exact
computation covers every shape of ω the calibration tries.

* One user's output is its number of ones o, with law p_x = (1−λ)·δ_{m+x} + λ·ω. The
  analyzer sees C = o_1 + S, S the other users' ones. If S = S' + R with R independent of
  S' and of user 1, then P[C = c | x_1] is a mixture over R's value of shifted laws of
  o_1 + S', so any bound max_c |ln P[o_1+S' = c | 0] / P[o_1+S' = c | 1]| ≤ ε holds for C
  too: adding independent users (honest or corrupt with known outputs) never hurts.
* Among the ⌈γn⌉ − 1 other honest users at least N = ⌈(⌈γn⌉ − 1)/2⌉ hold the same bit. If
  that bit is 0, S' is a sum of N i.i.d. p_0; if it is 1, the reflection o ↦ τ − o maps
  p_1 to p_0 and swaps the roles of x_1 = 0 and 1, so the same two-sided maximum covers
  it. :func:`pure_central_epsilon` computes that maximum for N i.i.d. p_0 exactly, in
  floating point: the law of N + 1 users is evaluated with exponentially tilted FFTs, one
  tilt per window of the support (each window wide enough, by Bernstein's inequality, that
  under 10⁻⁴⁰ of the mass aliases into it), each value used only where it is at
  least 10⁻⁷ of its tilt's peak, so the FFT's round-off (a few 10⁻¹⁶ of the peak) is
  ≲ 10⁻⁸–10⁻⁷ of it, under the calibration's 10⁻⁶ slack. It agrees with direct log-space
  convolution to 10⁻⁷ (tests), and with a 100× stricter trust to 10⁻¹⁰ at N = 262 144.
  The far tails are exact too.
* The limit in N. Near c = N·E_θ[o] the crowd's law is locally e^{θ·}-tilted, so at a
  fixed λ the exact ε decreases, as N grows, to ε_∞(λ) = max_θ |ln M_0(θ)/M_1(θ)|,
  M_x(θ) = Σ_o p_x(o)e^{θo} (:func:`pure_limit_epsilon`) — the paper's own criterion: its
  lower bound asks for two laws on {0, …, m} far apart in total variation whose moment
  generating functions stay within a constant factor. With Δ = 1 (ω decaying like
  e^{−ε|k|}) ε_∞ exceeds ε below a constant λ (≈ 3·10⁻³ at ε = 1, τ = 41), which forces
  an error Θ(√n). A flatter ω (Δ ≥ 1.5) that reaches about ln(1/λ)/ε values on each side of
  τ/2 keeps ε_∞(λ) < ε down to λ ≈ 10⁻⁶; what the crowd then needs is λ·N, the expected
  number of users in the noise branch, of a few units (≈ 2–8), so λ falls like 1/n and
  the error is O_ε(1), the paper's claim. Hence τ = 2⌈log₂ n / min(ε, 1)⌉ + 1 by default
  (:func:`default_tau`, the paper's O_ε(log n); ``messages`` overrides it).
* The calibration (:func:`_choose`): every shape of ω — the truncated DLap of every Δ in
  :data:`SCALES` = (1, 1.5, 2, 3) and the mixtures of every w in :data:`MIX_WEIGHTS` — is
  bisected on a 2 % grid in ln λ for a pilot crowd of min(N, 256) (valid for any larger
  crowd); for a larger N, λ is predicted from λ·N and λ_∞ and certified at the full N (raised
  by 25 % on failure; lowered in 10 % steps while it passes where an evaluation is cheap).
  The pair leaving the least noise variance λ·E(z − m − ½)² wins. N is capped at
  :func:`certify_cap` = 123·2¹⁹/τ (3·2¹⁹ users, n ≈ 3·10⁶, at τ = 41): the bound for the
  cap is valid for every larger n. An evaluation takes ~0.08 s at N·τ = 4 096·41, ~8 s at
  N·τ = 2¹⁹·41 and 20–35 s at the cap; a calibration 1–40 s, cached per (ε, τ, N).
* The noise law (this project's construction). A few users in the noise branch must make
  C's law ε-smooth: near its centre, where most of the mass is, and far out, where only
  users with extreme z reach. A discrete Laplace DLap(e^{−ε}) is exactly ε-smooth, and it
  is a compound Poisson law: the sum of a Poisson(2 ln(1/(1 − e^{−ε}))) number of jumps
  ±K, K ~ LogSeries(e^{−ε}) (P[K = k] ∝ e^{−εk}/k). So if the crowd's noise users draw
  z − τ/2 ≈ ±K, their sum is close to that DLap near the centre; what the log-series law
  lacks is reach (its moment generating function is finite only below ε, so ε_∞(λ) > ε
  at small λ, as with Δ = 1). Hence the mixture
      ω = w·clip(m + B + η, 0, τ) + (1 − w)·clip(m + B + S·K, 0, τ),
  η ~ SG(e^{−ε/Δ}) with Δ = :data:`MIX_SCALE` = 2 (the reach), S = ±1 fair,
  K ~ LogSeries(e^{−ε}) (the centre), for w in :data:`MIX_WEIGHTS` (0.1, 0.03, 0.01,
  0.003); w = 1 is the truncated DLap of the survey (:func:`noise_law`). Most of ω's mass
  then sits within a few units of τ/2, where the truncated DLap of Δ ≥ 1.5 spreads it over
  ≈ Δ/ε: at n = 10⁵, ε = 1 (τ = 35) the calibration certifies w = 0.1 with std 3.38,
  against 5.02 for the best truncated DLap (Δ = 1.5); 7.05 against 12.2 at ε = 0.5.
  The weights, Δ = 2 and the log-series centre were chosen by exploring shapes with this
  module's accountant at n = 8 193 and 10⁵ (Δ = 1.5 or 3 for the wide part, or a centre
  that also puts mass on z − m − B = 0, certified no smaller noise); nothing about them
  matters to the privacy claim, which is the exact computation for the chosen ω. The
  mixture is sampled by inverse transform of the very vector the accountant convolved.
* Where nothing below the local λ_l = 1/(1 + ω(m)(e^ε − 1)) is certified (tiny n; or
  ε ≳ 15, where ratios beyond e^16 or underflowing λ·ω put the computation out of double
  precision's reach) the local bound is used: user 1's own law differs between x = 0 and
  1 only at o = m, m + 1, so it is ε_l = ln(1 + (1 − λ)/(λ ω(m)))-LDP, and λ_l makes
  that ε.

Accuracy (the exact std of ĉ with half the users holding 1, no fakes, as ``esa simulate``
states it), n = 10^5, the crowd of ⌈(n − 1)/2⌉ = 50 000 certified whole:

    ε                      0.1      0.3      0.5      1        2
    τ                      335      113      69       35       35
    ω: w (Δ = 2)           0.03     0.1      0.1      0.1      0.003
    λ                      1.9e-4   8.8e-5   6.7e-5   3.7e-5   1.3e-5
    std                    35.0     12.2     7.05     3.38     1.49
    std, truncated DLap    85.4     23.3     12.2     5.02     2.06   (Δ = 1.5, w = 1)

At n = 10^4 the std is 29.8, 6.68, 3.21 at ε = 0.1, 0.5, 1 (85.4, 11.6, 4.78 with the
truncated DLap alone); at n = 100 and ε = 1 it is 2.85 (3.56). The local ε of the
computed λ is large (≈ 12 at n = 10^5, ε = 1): an analyzer colluding with every shuffler
learns far more than the central ε, as for every amplified protocol.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from ._base import (
    CountNoise,
    Estimate,
    HonestUsersBound,
    InputKind,
    MessageTally,
    PrivacyGuarantee,
    ShuffleProtocol,
    check_delta,
    check_epsilon,
    check_gamma,
    check_n,
)
from ._errors import BoundNotApplicable, ParameterError
from ._messages import decode_bits, encode_bits
from ._noise import symmetric_geometric
from ._random import RNGLike, as_generator
from ._registry import ProtocolSpec, integer_option, number_option, register_protocol
from .accounting import binomial_window, pair_lower_epsilon

__all__ = [
    "CERTIFY_WORK",
    "FINE_SCALES",
    "MIX_SCALE",
    "MIX_WEIGHTS",
    "SCALES",
    "CntPURE",
    "CounterCalibration",
    "PureBitCounter",
    "certify_cap",
    "check_tau",
    "composed_lower_epsilon",
    "default_tau",
    "local_lambda",
    "noise_law",
    "product_lower_epsilon",
    "pure_central_epsilon",
    "pure_count_laws",
    "pure_limit_epsilon",
    "user_laws",
]

#: Largest number of messages per user (τ) accepted. :func:`default_tau` asks for
#: 2⌈log₂ n/ε⌉ + 1, which reaches ≈ 4 400 at ε = 0.009 and n = 10⁶ (RSum_PURE's low digit
#: counters at ε_c = 0.1): a cap below that would keep λ from falling like 1/n there (with
#: τ capped at 1 023 RSum_PURE's error at that point was above local DP's). The
#: accountant's work stays bounded by :data:`CERTIFY_WORK` whatever τ.
MAX_TAU = 8191

#: Most (same-bit honest users) × τ the exact central accountant convolves (module doc):
#: 3·2¹⁹ users, n ≈ 3·10⁶, at τ = 41. One evaluation at the cap takes 20–35 s.
CERTIFY_WORK = 123 << 19


def certify_cap(tau: int) -> int:
    """Most same-bit honest users the accountant convolves at τ (time ∝ users × τ)."""
    return max(CERTIFY_WORK // tau, 1)


#: The crowd every scale Δ is first calibrated on (a few ms per evaluation at τ = 41).
_PILOT = 256

#: Most N·τ at which the full-crowd λ is refined downwards (≈ 1 s per evaluation).
_REFINE_WORK = 1 << 20

#: Scales Δ of ω = truncated DLap(τ/2, Δ/ε) the calibration chooses from (module doc).
SCALES = (1.0, 1.5, 2.0, 3.0)

#: A finer grid of Δ for callers that send more messages (``RSum_PURE``'s "tuned" digits):
#: with τ a few times :func:`default_tau` a truncated DLap of Δ between 1 and 1.5 is
#: certifiable and leaves less noise than Δ = 1.5 (n = 10⁵, ε = 1, that shape alone: std
#: 4.2 at Δ = 1.2 with 2τ, 4.0 at Δ = 1.1 with 4τ, against 5.0 at Δ = 1.5), though a mixed
#: ω (:data:`MIX_WEIGHTS`) certifies less still (2.99 with 4τ).
FINE_SCALES = (1.0, 1.1, 1.2, 1.3, 1.5, 2.0, 3.0)

#: Scale Δ of the wide part of a mixed ω (module doc, "The noise law").
MIX_SCALE = 2.0

#: Weights w of the wide part of a mixed ω the calibration tries (the rest, 1 − w, on the
#: log-series part); w = 1 is the plain truncated DLap of :data:`SCALES`.
MIX_WEIGHTS = (0.1, 0.03, 0.01, 0.003)

#: A tilted FFT value is trusted only at or above this fraction of its tilt's peak: the
#: FFT's round-off, a few 10⁻¹⁶ of the peak, is then ≲ 10⁻⁸–10⁻⁷ of the value.
_TRUST = 1e-7

#: ln(2/p) for the Bernstein tail p = 10⁻⁴⁰ that bounds what aliases into a tilt's window.
_ALIAS_LOG = math.log(2e40)

#: The computed ε must be below the target by this much (the computation's own error is
#: ≲ 10⁻⁷ in ε, see _TRUST).
_SLACK = 1e-6

#: The sweep puts each next tilt's mean this far (in units of the last tilt's trusted
#: half-width above its mean) beyond the top of the last trusted region, so consecutive
#: trusted regions overlap by about half a half-width; any hole left is filled afterwards.
_SWEEP_STEP = 0.5


def check_tau(tau: int) -> int:
    """τ, checked: odd, in [1, :data:`MAX_TAU`]."""
    t = check_n(tau, "messages (tau)", 1)
    if t % 2 == 0 or t > MAX_TAU:
        raise ParameterError(f"tau must be odd and <= {MAX_TAU}, got {t}")
    return t


def default_tau(n: int, epsilon: float = 1.0) -> int:
    """τ = 2⌈log₂ n / min(ε, 1)⌉ + 1 (odd, ≥ 3, ≤ :data:`MAX_TAU`): the paper's O_ε(log n).

    ω must stretch over about ln(1/λ)/ε values on each side of τ/2 for λ ~ 1/n to keep
    ε_∞(λ) below ε (module doc), hence the 1/ε."""
    n = check_n(n)
    eps = check_epsilon(epsilon)
    half = math.ceil(math.log2(max(n, 2)) / min(eps, 1.0))
    return min(2 * max(1, half) + 1, MAX_TAU)


def local_lambda(epsilon: float, tau: int, scale: float = 1.0, weight: float = 1.0) -> float:
    """λ_l = 1/(1 + ω(m)(e^ε − 1)): the λ whose randomizer is ε-LDP on its own (ω of
    scale Δ and wide weight w, :func:`noise_law`)."""
    omega_m = float(_noise_law(tau, epsilon, scale, weight)[(tau - 1) // 2])
    return 1.0 / (1.0 + omega_m * math.expm1(epsilon))


def user_laws(
    lam: float, tau: int, alpha: float | None = None, *, omega: npt.ArrayLike | None = None
) -> tuple[npt.NDArray[np.float64], ...]:
    """(p_0, p_1): the law of one user's number of ones for x = 0 and x = 1.

    Args:
        lam: λ, the probability of the input-independent branch.
        tau: τ, the number of bits each user sends.
        alpha: ω as the truncated DLap of this α (:func:`noise_law` with w = 1), or
        omega: ω itself, a law on {0, …, τ} symmetric about τ/2 (exactly one of the two).

    Returns:
        The two laws on {0, …, τ}.

    Raises:
        ParameterError: neither or both of ``alpha`` and ``omega``, or ω malformed.
    """
    law = _resolve_omega(tau, alpha, omega)
    m = (tau - 1) // 2
    p0, p1 = lam * law, lam * law
    p0[m] += 1.0 - lam
    p1[m + 1] += 1.0 - lam
    return p0, p1


def _resolve_omega(
    tau: int, alpha: float | None, omega: npt.ArrayLike | None
) -> npt.NDArray[np.float64]:
    """ω from exactly one of α (the truncated DLap) and ω itself, checked: a law on
    {0, …, τ}, symmetric about τ/2 (the reduction of the module doc needs the mirror)."""
    if (alpha is None) == (omega is None):
        raise ParameterError("give exactly one of alpha (a truncated DLap) and omega (a law)")
    if omega is None:
        return _omega(tau, float(alpha))  # type: ignore[arg-type]
    law = np.array(omega, dtype=np.float64).ravel()
    if law.size != tau + 1 or not np.all(law >= 0.0) or abs(float(law.sum()) - 1.0) > 1e-9:
        raise ParameterError(f"omega must be a probability vector of length tau + 1 = {tau + 1}")
    if not np.allclose(law, law[::-1], rtol=1e-9, atol=0.0):
        raise ParameterError("omega must be symmetric about tau/2 (omega[o] == omega[tau - o])")
    return law


def _log_laws(
    lam: float, tau: int, omega: npt.NDArray[np.float64]
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]] | None:
    """(ln p_0, ln p_1), or ``None`` where a probability underflows to 0 (λ·ω too small)."""
    p0, p1 = user_laws(lam, tau, omega=omega)
    with np.errstate(divide="ignore"):
        lq0, lq1 = np.log(p0), np.log(p1)
    if not (np.all(np.isfinite(lq0)) and np.all(np.isfinite(lq1))):
        return None
    return lq0, lq1


def pure_central_epsilon(
    *,
    lam: float,
    tau: int,
    alpha: float | None = None,
    others: int,
    omega: npt.ArrayLike | None = None,
) -> float:
    """max_c |ln P[o_1 + S = c | x_1 = 0] / P[o_1 + S = c | x_1 = 1]|, S the sum of
    ``others`` i.i.d. users holding 0: the exact pure ε of the count for that crowd, and (by
    the reduction in the module doc) an upper bound for any n ≥ 2·others + 1 honest users.
    ω is the truncated DLap of ``alpha`` or the law ``omega`` (see :func:`user_laws`).

    Computed with exponentially tilted FFTs: for a tilt θ the law of the N + 1 outputs,
    reweighted by e^{θc}, is concentrated near its mean, and an FFT gives it to an absolute
    error of ~10⁻¹⁶ of its peak; the ratio of the two laws at c does not depend on θ.
    Tilts are placed along the support until every c is covered by a tilt where both laws
    are at least :data:`_TRUST` of their peak.
    """
    from scipy import fft as sfft

    others = check_n(others, "others", 0)
    laws = _log_laws(lam, tau, _resolve_omega(tau, alpha, omega))
    if laws is None:
        raise ParameterError("pure_central_epsilon needs 0 < lam and a full-support noise law")
    lq0, lq1 = laws
    users = others + 1
    size = users * tau + 1
    o = np.arange(tau + 1, dtype=np.float64)
    covered = np.zeros(size, dtype=bool)
    worst = 0.0

    def scan(target: float) -> tuple[int, int]:
        nonlocal worst
        theta = _tilt_for_mean(lq0, target / users)
        w0, w1 = lq0 + theta * o, lq1 + theta * o
        l0, l1 = _logsumexp(w0), _logsumexp(w1)
        q0, q1 = np.exp(w0 - l0), np.exp(w1 - l1)
        # Only a window around the tilted mean is computed, with a circular FFT of the
        # window's length: by Bernstein's inequality (each output within τ of its mean) the
        # mass outside it, which aliases into it, is below 10⁻⁴⁰, far under any trusted value.
        mean = others * float(q0 @ o) + float(q1 @ o)
        var = others * float(q0 @ o**2 - (q0 @ o) ** 2) + float(q1 @ o**2 - (q1 @ o) ** 2)
        a = _ALIAS_LOG * tau / 3.0
        half = a + math.sqrt(a * a + 2.0 * _ALIAS_LOG * max(var, 0.0))
        lo, hi = max(0, math.floor(mean - half)), min(size - 1, math.ceil(mean + half))
        width = _fft_width(hi - lo + 1, tau)
        f0, f1 = sfft.rfft(np.stack([q0, q1]), width, axis=1)
        others_part = _int_power(f0, others)
        index = np.arange(lo, hi + 1) % width
        law0, law1 = sfft.irfft(np.stack([others_part * f0, others_part * f1]), width, axis=1)
        law0, law1 = law0[index], law1[index]
        good = (law0 >= _TRUST * law0.max()) & (law1 >= _TRUST * law1.max())
        if good.any():
            ratio = np.log(law0[good]) - np.log(law1[good]) + (l0 - l1)
            worst = max(worst, float(np.max(np.abs(ratio))))
            covered[lo + np.flatnonzero(good)] = True
        idx = lo + np.flatnonzero(good)
        return (int(idx[0]), int(idx[-1])) if idx.size else (size, -1)

    # Sweep the tilted mean from the bottom of the support to the top, each trusted region
    # starting inside the last (:data:`_SWEEP_STEP`), then fill any hole left (a narrower
    # or multimodal tilted law): every outcome is computed where it is trusted.
    target = 0.5
    while True:
        _, hi = scan(min(target, size - 1.5))
        if target >= size - 1.5:
            break
        target = max(target + 1.0, hi + _SWEEP_STEP * (hi - target))
    for _ in range(size):
        holes = np.flatnonzero(~covered)
        if holes.size == 0:
            return worst
        before = int(covered.sum())
        scan(min(max(float(holes[0]), 0.5), size - 1.5))
        if int(covered.sum()) == before:
            break
    raise BoundNotApplicable(
        f"pure_central_epsilon: {int((~covered).sum())} outcomes not covered by any tilt: "
        f"their likelihood ratio is beyond what one tilt resolves (about e^"
        f"{-math.log(_TRUST):.0f}), too large an epsilon to compute this way"
    )


def _fft_width(span: int, tau: int) -> int:
    """The FFT length for a window of ``span`` outcomes: at least the span (no outcome of
    the window folds onto another) and at least τ + 1 (rfft truncates, does not fold, a
    longer input), rounded up to a length scipy transforms fast (2^a 3^b 5^c …)."""
    from scipy import fft as sfft

    return int(sfft.next_fast_len(max(span, tau + 1), real=True))


def _int_power(z: npt.NDArray[np.complex128], n: int) -> npt.NDArray[np.complex128]:
    """z**n elementwise by repeated squaring: 2·log₂ n complex products, several times
    faster than numpy's complex power (exp(n log z)) and as accurate (relative error
    ~ n·2⁻⁵³ either way). Underflow to 0 is intended: |z| ≤ 1 for a characteristic function."""
    out = np.ones_like(z)
    with np.errstate(under="ignore"):
        while n:
            if n & 1:
                out = out * z
            n >>= 1
            if n:
                z = z * z
    return out


def _logsumexp(w: npt.NDArray[np.float64]) -> float:
    top = float(w.max())
    return top + math.log(float(np.exp(w - top).sum()))


def _tilt_for_mean(lq: npt.NDArray[np.float64], mean: float) -> float:
    """θ with E_θ[o] = mean under the law ∝ e^{lq(o) + θ·o}."""
    from scipy.optimize import brentq

    o = np.arange(lq.size, dtype=np.float64)

    def gap(theta: float) -> float:
        w = lq + theta * o
        w = np.exp(w - w.max())
        return float(w @ o / w.sum()) - mean

    lo, hi = -8.0, 8.0
    while gap(lo) > 0:
        lo *= 2.0
    while gap(hi) < 0:
        hi *= 2.0
    return float(brentq(gap, lo, hi, xtol=1e-12))


def pure_limit_epsilon(
    *, lam: float, tau: int, alpha: float | None = None, omega: npt.ArrayLike | None = None
) -> float:
    """ε_∞(λ) = max_θ |ln M_0(θ)/M_1(θ)|, M_x(θ) = Σ_o p_x(o) e^{θo}: the limit, as the
    crowd of users holding 0 grows, of :func:`pure_central_epsilon` (near c = N·E_θ[o]
    the other users' law is locally e^{θ·}-tilted, so the ratio there tends to
    M_0(θ)/M_1(θ)). By the reduction in the module doc the exact ε decreases in the crowd
    size, so it is ≥ ε_∞ for every n: no λ with ε_∞(λ) > ε is ε-DP for large n."""
    from scipy.optimize import minimize_scalar
    from scipy.special import logsumexp

    laws = _log_laws(lam, tau, _resolve_omega(tau, alpha, omega))
    if laws is None:
        return math.inf  # λ·ω underflows to 0 somewhere: nothing can be certified
    lq0, lq1 = laws
    o = np.arange(tau + 1, dtype=np.float64)

    def gap(theta: float) -> float:
        return -abs(_logsumexp(lq0 + theta * o) - _logsumexp(lq1 + theta * o))

    grid = np.linspace(-60.0, 60.0, 1201)
    tilted = grid[:, None] * o[None, :]
    values = -np.abs(logsumexp(lq0 + tilted, axis=1) - logsumexp(lq1 + tilted, axis=1))
    i = int(np.argmin(values))
    lo, hi = float(grid[max(i - 1, 0)]), float(grid[min(i + 1, grid.size - 1)])
    best = minimize_scalar(gap, bounds=(lo, hi), method="bounded", options={"xatol": 1e-10})
    return max(-float(best.fun), -float(values[i]))


@lru_cache(maxsize=256)
def _limit_lambda(epsilon: float, tau: int, scale: float = 1.0, weight: float = 1.0) -> float:
    """λ_∞: the λ with ε_∞(λ) = ε for ω of scale Δ and wide weight w (10⁻¹² if every λ
    down to 10⁻¹² has a smaller ε_∞; the local λ_l if none below it has)."""
    from scipy.optimize import brentq

    law = _noise_law(tau, epsilon, scale, weight)
    lam_local = local_lambda(epsilon, tau, scale, weight)
    target = epsilon - _SLACK

    def gap(log_lam: float) -> float:
        return pure_limit_epsilon(lam=math.exp(log_lam), tau=tau, omega=law) - target

    hi, floor = math.log(lam_local), math.log(1e-12)
    if gap(hi) >= 0.0:
        return lam_local
    if gap(floor) < 0.0:
        return 1e-12
    return math.exp(float(brentq(gap, floor, hi, xtol=1e-6)))


def _certified(
    epsilon: float, tau: int, scale: float, others: int, lam: float, weight: float = 1.0
) -> float:
    """The exact central ε at λ (∞ where the computation cannot reach)."""
    try:
        return pure_central_epsilon(
            lam=lam, tau=tau, omega=_noise_law(tau, epsilon, scale, weight), others=others
        )
    except ParameterError:  # ratios or laws beyond double precision: not certified
        return math.inf


@lru_cache(maxsize=256)
def _calibrate(
    epsilon: float, tau: int, others: int, scale: float = 1.0, weight: float = 1.0
) -> tuple[float, float]:
    """(λ, certified central ε): the smallest λ on a 2 % grid above λ_∞ whose exact central
    ε for ``others`` same-bit users is ≤ the target, or (λ_l, ε) from the local bound when
    nothing smaller is certified."""
    lam_local = local_lambda(epsilon, tau, scale, weight)
    if others < 1:
        return lam_local, epsilon
    target = epsilon - _SLACK
    floor = _limit_lambda(epsilon, tau, scale, weight)
    if floor >= lam_local:  # the local λ is all that can be shown
        return lam_local, epsilon
    hi, lo = math.log(lam_local), math.log(floor)

    def certified(log_lam: float) -> float:
        return _certified(epsilon, tau, scale, others, math.exp(log_lam), weight)

    # The answer is often just above λ_∞ (the exact ε is within 10⁻³ of ε_∞ from a few
    # hundred users on, when λ·N is not small): try 2 % above it first, then bisect on ln λ.
    best = (lam_local, epsilon)
    first = min(lo + 0.02, hi)
    eps_first = certified(first)
    if eps_first <= target:
        return math.exp(first), eps_first
    lo = first
    while hi - lo > 0.02:
        mid = 0.5 * (lo + hi)
        eps_mid = certified(mid)
        if eps_mid <= target:
            hi, best = mid, (math.exp(mid), eps_mid)
        else:
            lo = mid
    return best


@dataclass(frozen=True, slots=True)
class _Choice:
    """One certified calibration: ω's shape (Δ, w), λ, the crowd it was computed for, its ε."""

    scale: float
    lam: float
    users: int
    epsilon: float
    score: float  # λ·E_ω[(z − m − ½)²], the noise variance one user adds (up to O(λ²))
    weight: float = 1.0


def _noise_second_moment(tau: int, omega: npt.NDArray[np.float64]) -> float:
    k = np.arange(tau + 1, dtype=np.float64) - (tau - 1) / 2.0 - 0.5
    return float(omega @ (k * k))


@lru_cache(maxsize=256)
def _choose(
    epsilon: float,
    tau: int,
    others: int,
    scales: tuple[float, ...] = SCALES,
    weights: tuple[float, ...] = MIX_WEIGHTS,
) -> _Choice:
    """The calibration of the module doc: the certified (ω, λ) of least noise variance.

    The candidate shapes of ω are the truncated DLap of every Δ in ``scales`` and the
    mixtures of every wide weight w in ``weights`` (:func:`noise_law`, Δ = :data:`MIX_SCALE`).

    1. Every shape is calibrated (2 % grid) on the pilot crowd min(others, ``_PILOT``);
       that λ is valid for any larger crowd.
    2. For a larger crowd, λ·N (the expected number of users in the noise branch) is
       what the crowd needs, so λ is predicted as max(1.05·λ_∞, 1.15·λ_pilot·pilot/N)
       and certified at the full crowd, raised by 25 % up to three times if it fails and,
       where an evaluation is cheap (N·τ ≤ ``_REFINE_WORK``), lowered by 10 % while it
       still passes (up to eight times). A shape is tried only while its prediction can
       beat the best so far.
    """
    pilot = min(others, _PILOT)
    shapes = [(d, 1.0) for d in scales] + [(MIX_SCALE, w) for w in weights if w < 1.0]
    moments = {sh: _noise_second_moment(tau, _noise_law(tau, epsilon, *sh)) for sh in shapes}
    choices = []
    for scale, weight in shapes:
        lam, eps_c = _calibrate(epsilon, tau, pilot, scale, weight)
        users = pilot if lam < local_lambda(epsilon, tau, scale, weight) else 0
        score = lam * moments[scale, weight]
        choices.append(_Choice(scale, lam, users, eps_c, score, weight))
    best = min(choices, key=lambda c: c.score)
    if others <= pilot:
        return best
    target = epsilon - _SLACK
    predicted = []
    for c in choices:
        if c.users == 0:
            continue
        floor = _limit_lambda(epsilon, tau, c.scale, c.weight)
        guess = max(1.05 * floor, 1.15 * c.lam * pilot / others)
        predicted.append((guess * moments[c.scale, c.weight], guess, c.scale, c.weight))
    for score, guess, scale, weight in sorted(predicted):
        moment = moments[scale, weight]
        if score >= best.score:
            break
        found = None
        lam = guess
        for _ in range(4):
            if lam * moment >= best.score:
                break
            eps_c = _certified(epsilon, tau, scale, others, lam, weight)
            if eps_c <= target:
                found = (lam, eps_c)
                break
            lam *= 1.25
        if found is None:
            continue
        if others * tau <= _REFINE_WORK:
            for _ in range(8):
                lower = found[0] / 1.1
                eps_c = _certified(epsilon, tau, scale, others, lower, weight)
                if eps_c > target:
                    break
                found = (lower, eps_c)
        best = _Choice(scale, found[0], others, found[1], found[0] * moment, weight)
    return best


#: Calibrations computed elsewhere and installed in this process
#: (:meth:`CounterCalibration.install`), oldest first, at most :data:`_INSTALLED_MAX`.
_INSTALLED: dict[tuple[float, int, int, tuple[float, ...], tuple[float, ...]], _Choice] = {}

#: Most calibrations installed in one process (as many as :func:`_choose` caches).
_INSTALLED_MAX = 256


@dataclass(frozen=True, slots=True)
class CounterCalibration:
    """One counter's calibration (module doc) as a value that can travel between processes.

    :meth:`PureBitCounter.derive` computes its calibration where it runs, cached per
    process. A caller that builds counters on a pool of processes can instead compute each
    calibration as a task of its own (:meth:`compute`, in any process) and :meth:`install`
    the result in the process that builds the counter, before it does: the build then uses
    it instead of computing it again. The counter is the same, bit for bit: the result is
    the same deterministic computation on the same arguments, and its floats pickle exactly.

    Attributes:
        epsilon: the counter's target ε (validated).
        tau: its τ (validated).
        others: the same-bit crowd N its central ε is computed for (0: the local bound,
            nothing to compute).
        scales: the Δ of the truncated DLap shapes the calibration chooses from.
        weights: the wide weights w of the mixed shapes it also tries.
        choice: the result once computed (:meth:`compute`), else ``None``.
    """

    epsilon: float
    tau: int
    others: int
    scales: tuple[float, ...]
    weights: tuple[float, ...] = MIX_WEIGHTS
    choice: _Choice | None = None

    @classmethod
    def of(
        cls,
        *,
        epsilon: float,
        tau: int,
        honest_users: int = 0,
        scales: Sequence[float] = SCALES,
        weights: Sequence[float] = MIX_WEIGHTS,
    ) -> CounterCalibration:
        """The calibration :meth:`PureBitCounter.derive` needs for these arguments, not yet
        computed.

        Args:
            epsilon: the counter's target ε.
            tau: its τ.
            honest_users: the honest users (user 1 included), as for ``derive``.
            scales: the Δ to choose from, as for ``derive``.
            weights: the mixed shapes' wide weights, as for ``derive``.

        Returns:
            The calibration, its ``choice`` ``None``.

        Raises:
            ParameterError: an argument ``derive`` refuses.
        """
        grid = tuple(float(d) for d in scales)
        if not grid or any(not (math.isfinite(d) and d >= 1.0) for d in grid):
            raise ParameterError(f"scales must be finite and >= 1, got {tuple(scales)!r}")
        mix = tuple(float(w) for w in weights)
        if any(not 0.0 < w < 1.0 for w in mix):
            raise ParameterError(f"weights must lie in (0, 1), got {tuple(weights)!r}")
        eps = check_epsilon(epsilon)
        t = check_tau(tau)
        honest = check_n(honest_users, "honest users", 0)
        others = min((max(honest - 1, 0) + 1) // 2, certify_cap(t))  # ⌈(honest − 1)/2⌉
        if float(_omega(t, math.exp(-eps)).min()) <= 0.0:
            others = 0  # ω underflows (huge ε·τ): only the local bound is exact
        return cls(eps, t, others, grid, mix)

    @property
    def work(self) -> int:
        """A relative cost, to order calibrations run as tasks (largest first): τ times the
        pilot crowd, the size of the transforms that dominate a calibration."""
        return self.tau * min(self.others, _PILOT)

    def compute(self) -> CounterCalibration:
        """This calibration with its result (:meth:`result`).

        Returns:
            A copy whose ``choice`` is set.
        """
        return dataclasses.replace(self, choice=self.result())

    def install(self) -> None:
        """Make this process's builds of the same counter use this result.

        Raises:
            ParameterError: it was not computed (:meth:`compute`).
        """
        if self.choice is None:
            raise ParameterError("a calibration must be computed before it is installed")
        key = (self.epsilon, self.tau, self.others, self.scales, self.weights)
        _INSTALLED.pop(key, None)
        _INSTALLED[key] = self.choice
        while len(_INSTALLED) > _INSTALLED_MAX:
            del _INSTALLED[next(iter(_INSTALLED))]

    def result(self) -> _Choice:
        """The calibration's result: ``choice`` if set, else the one installed in this
        process, else computed here (:func:`_choose`, cached per process).

        Returns:
            The chosen (Δ, λ), the crowd it was certified for and its central ε.
        """
        if self.choice is not None:
            return self.choice
        if self.others == 0:
            return _Choice(1.0, local_lambda(self.epsilon, self.tau), 0, self.epsilon, math.nan)
        key = (self.epsilon, self.tau, self.others, self.scales, self.weights)
        installed = _INSTALLED.get(key)
        return installed if installed is not None else _choose(*key)


@dataclass(frozen=True, slots=True)
class PureBitCounter:
    """The per-bit mechanism of ``Cnt_PURE`` (see module doc), without any codec.

    Attributes:
        epsilon: the target pure ε of the shuffled count (central).
        tau: τ, odd number of bits each user sends.
        lam: λ, probability of the input-independent branch.
        alpha: e^{−ε/Δ}, the SG parameter of ω.
        omega: ω as a probability vector over {0, …, τ}.
        certified_users: N, the same-bit honest users the central ε was computed for
            (0: λ is the local calibration and the bound is local).
        epsilon_certified: the computed central ε at λ (≤ epsilon).
        scale: Δ, the scale of ω's truncated DLap part (module doc): α = e^{−ε/Δ}.
        weight: w, the weight of that part in ω (1: ω is that truncated DLap; else the
            rest, 1 − w, is the log-series part, :func:`noise_law`).
    """

    epsilon: float
    tau: int
    lam: float
    alpha: float
    omega: tuple[float, ...]
    certified_users: int = 0
    epsilon_certified: float = 0.0
    scale: float = 1.0
    weight: float = 1.0

    @classmethod
    def derive(
        cls,
        *,
        epsilon: float,
        tau: int,
        honest_users: int = 0,
        scales: Sequence[float] = SCALES,
        weights: Sequence[float] = MIX_WEIGHTS,
    ) -> PureBitCounter:
        """Calibrate λ for ``honest_users`` honest users (user 1 included); 0 or 1 gives the
        local calibration. ``scales``: the Δ of the truncated DLap shapes of ω the
        calibration chooses from (:data:`SCALES`, ``Cnt_PURE``'s own; :data:`FINE_SCALES`
        with more messages); ``weights``: the wide weights w of the mixed shapes it also
        tries (:data:`MIX_WEIGHTS`; empty for the truncated DLap alone). Whatever shape is
        chosen, the central ε is the exact computation of the module doc. A calibration
        computed in another process and installed in this one (:class:`CounterCalibration`)
        is used as is."""
        calibration = CounterCalibration.of(
            epsilon=epsilon, tau=tau, honest_users=honest_users, scales=scales, weights=weights
        )
        eps, t = calibration.epsilon, calibration.tau
        choice = calibration.result()
        alpha = math.exp(-eps / choice.scale)
        omega = tuple(float(w) for w in _noise_law(t, eps, choice.scale, choice.weight))
        return cls(
            eps,
            t,
            choice.lam,
            alpha,
            omega,
            choice.users,
            choice.epsilon,
            choice.scale,
            choice.weight,
        )

    def honest_users_bound(self, honest_others: int, *, digits: int = 1) -> HonestUsersBound | None:
        """The exact accountant for one user among ``honest_others`` other honest users,
        composed over ``digits`` independent counters (``RSum_PURE``'s p digit positions).

        Upper: N = min(⌈h/2⌉, certify_cap(τ)) same-bit users (module doc), pure, so it holds
        at every δ. No lower bound here (a pure ε is none at δ > 0):
        :meth:`honest_users_lower` gives one at δ. ``None`` when h = 0 or the computation
        cannot reach."""
        h = check_n(honest_others, "honest others", 0)
        if h == 0:
            return None
        n_up = min((h + 1) // 2, certify_cap(self.tau))
        try:
            upper = (
                self.epsilon_certified  # the calibration computed exactly this (up to ~35 s)
                if n_up == self.certified_users
                else pure_central_epsilon(lam=self.lam, tau=self.tau, omega=self.omega, others=n_up)
            )
        except ParameterError:  # beyond double precision (BoundNotApplicable included)
            return None
        name = f"cnt_pure_exact_central[{n_up} same-bit honest users]"
        if digits > 1:
            name = f"basic_composition[{digits}] x {name}"
        return HonestUsersBound(digits * upper, name)

    def honest_users_lower(
        self, honest_others: int, *, fakes: int = 0, delta: float, digits: int = 1
    ) -> tuple[float, str] | None:
        """A lower bound on the victim's ε at δ, as (ε, the neighbouring pair): the count
        of ones when the ``honest_others`` honest others hold 0 and ``fakes`` fair fake bits
        are mixed in, victim 0 against 1 (:func:`pure_count_laws`).

        One counter: its exact ε(δ) (:func:`~protocols.pair_lower_epsilon`).
        ``digits`` > 1 (``RSum_PURE``, the victim's value flipping every digit): the
        ``digits``-fold composition of that pair, each digit counted with all ``fakes``
        (a digit gets at most that many, and fewer fakes only help the analyzer), by
        :func:`composed_lower_epsilon` — at most ``digits``·10⁻³ below the exact ε(δ) of
        that composition. ``None`` where the laws are too wide to compute directly."""

        h = check_n(honest_others, "honest others", 0)
        f = check_n(fakes, "fakes", 0)
        d = check_delta(delta, pure=True)  # a lower bound holds at δ = 0 too
        laws = pure_count_laws(lam=self.lam, tau=self.tau, omega=self.omega, others=h, fakes=f)
        if laws is None:
            return None
        crowd = f"all {h} honest others hold 0" if h else "no honest other user"
        dataset = f"{crowd}, {f} honest fakes"
        if digits <= 1:
            return pair_lower_epsilon(laws[0], laws[1], d), dataset + " (exact)"
        eps = composed_lower_epsilon(laws[0], laws[1], d, times=digits)
        return eps, dataset + f" per digit, the victim's value flips all {digits} digits"

    @property
    def epsilon_local(self) -> float:
        """ε_l = ln(1 + (1 − λ)/(λ ω(m))): what one user's τ bits reveal on their own."""
        return math.log1p((1.0 - self.lam) / (self.lam * self.omega[self.m]))

    @property
    def m(self) -> int:
        return (self.tau - 1) // 2

    @property
    def z_second_moment(self) -> float:
        k = np.arange(self.tau + 1, dtype=np.float64)
        return float(np.dot(np.asarray(self.omega), k * k))

    def ones(self, x: npt.NDArray[np.int64], *, rng: RNGLike) -> Any:
        """Number of ones each user sends (vectorized)."""
        rng = as_generator(rng)
        o = self.m + np.asarray(x, dtype=np.int64)
        noisy = np.flatnonzero(rng.random(o.shape[0]) < self.lam)
        if self.weight >= 1.0:  # ω is the truncated DLap: clip(m + B + η), η ~ SG(α)
            b = (rng.random(noisy.size) < 0.5).astype(np.int64)
            eta = np.asarray(symmetric_geometric(self.alpha, noisy.size, rng=rng), dtype=np.int64)
            o[noisy] = np.clip(self.m + b + eta, 0, self.tau)
        else:  # any other ω: inverse transform of the very vector the accountant convolved
            o[noisy] = _draw(self.omega, noisy.size, rng)
        return o

    def debias(self, ones: int, *, n: int, received: int) -> float:
        fakes = received - n * self.tau
        lam, m, t = self.lam, self.m, self.tau
        return (ones - (1 - lam) * n * m - lam * n * t / 2.0 - fakes / 2.0) / (1.0 - lam)

    def variance(self, *, n: int, count: float, fakes: int) -> float:
        """Exact Var of :meth:`debias` for ``count`` ones among n users and ``fakes`` bits."""
        lam, m, t = self.lam, self.m, self.tau
        ez2 = self.z_second_moment

        def var_o(x: int) -> float:
            mean = (1 - lam) * (m + x) + lam * t / 2.0
            return (1 - lam) * (m + x) ** 2 + lam * ez2 - mean * mean

        total = count * var_o(1) + (n - count) * var_o(0) + fakes / 4.0
        return total / (1.0 - lam) ** 2

    @property
    def count_noise(self) -> CountNoise:
        """A user holding 0 sends o ones, o ~ (1 − λ)·δ_m + λ·ω; its error term in
        :meth:`debias` is (o − E o)/(1 − λ). A user holding 1 has the mirror law (o ↦ τ − o
        maps its law to this one's), as :class:`CountNoise` requires. Moments summed exactly
        over o ∈ [0, τ]."""
        law, _ = user_laws(self.lam, self.tau, omega=self.omega)
        o = np.arange(self.tau + 1, dtype=np.float64)
        d = (o - float(np.dot(law, o))) / (1.0 - self.lam)
        return CountNoise(
            variance=float(np.dot(law, d**2)),
            third=float(np.dot(law, d**3)),
            fourth=float(np.dot(law, d**4)),
        )


#: Most multiply-adds of the direct convolutions behind one lower bound
#: (:func:`pure_count_laws`); beyond it no lower bound is stated.
LOWER_WORK = 3e9

#: Grid of the privacy-loss values in :func:`composed_lower_epsilon`.
_LOSS_GRID = 1e-3


def pure_count_laws(
    *,
    lam: float,
    tau: int,
    alpha: float | None = None,
    others: int,
    fakes: int = 0,
    omega: npt.ArrayLike | None = None,
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]] | None:
    """The laws of the count of ones C for the victim holding 0 and 1, when ``others``
    honest others hold 0 and ``fakes`` fair fake bits are mixed in, on a common window.

    Each other user sends m ones unless it is in the noise branch (K ~ Bin(h, λ) of them),
    so C = m(h − K) + Σ_{i ≤ K} z_i + o_victim + Bin(F, ½), z_i ~ ω: a mixture over K of
    convolution powers of ω, convolved directly (non-negative terms, no Fourier inversion),
    K and the fakes' count cut 10 sd + 20 around their means. Each computed probability is
    therefore at most the true one, as :func:`~protocols.pair_lower_epsilon`
    needs. ``None`` when this would take more than :data:`LOWER_WORK` multiply-adds.
    """
    h = check_n(others, "others", 0)
    f = check_n(fakes, "fakes", 0)
    t = check_tau(tau)
    m = (t - 1) // 2
    k_lo, k_law = binomial_window(h, lam) if lam < 1.0 else (h, np.ones(1))
    kmax = k_lo + k_law.size - 1
    _, f_law = binomial_window(f, 0.5) if f else (0, np.ones(1))
    work = (kmax + 1) ** 2 * (t + 1) ** 2 / 2 + 2 * (kmax + 2) * (t + 1) * (t + 1 + f_law.size)
    if work > LOWER_WORK:
        return None
    law = _resolve_omega(t, alpha, omega)
    crowd = np.zeros(kmax * t + 1)  # index Σz − mK + m·kmax
    power = np.ones(1)
    for k in range(kmax + 1):
        if k >= k_lo:
            start = m * (kmax - k)
            crowd[start : start + power.size] += k_law[k - k_lo] * power
        if k < kmax:
            power = np.convolve(power, law)
    p0, p1 = user_laws(lam, t, omega=law)
    return (
        np.convolve(np.convolve(crowd, p0), f_law),
        np.convolve(np.convolve(crowd, p1), f_law),
    )


def composed_lower_epsilon(
    p: npt.ArrayLike, q: npt.ArrayLike, delta: float, *, times: int
) -> float:
    """A lower bound on the exact ε(δ) of the ``times``-fold product pair (P^×t, Q^×t), from
    truncated laws p ≤ P, q ≤ Q of one factor (as :func:`~protocols.pair_lower_epsilon`).

    H(ε) = E_{P^×t}[(1 − e^{ε − L})₊], L the summed privacy loss; ε(δ) is the least ε with
    H(ε) ≤ δ (and the same from Q's side). Each cell's loss is taken as
    ln(p/(q + m)) ≤ ln(P/Q) (m = 1 − Σq, the mass q leaves out), rounded down to a
    multiple of 10⁻³, and cells whose loss cannot bring the sum above 0 are dropped: every
    step only lowers H, so the least ε with the computed H ≤ δ is at most the exact one (and
    at most t·10⁻³ below it, plus what the truncation costs). The rounded losses' law is
    convolved t times directly (non-negative terms): :func:`product_lower_epsilon` with t
    identical factors.
    """
    return product_lower_epsilon([(p, q)] * check_n(times, "times", 1), delta)


def product_lower_epsilon(
    pairs: Sequence[tuple[npt.ArrayLike, npt.ArrayLike]], delta: float
) -> float:
    """A lower bound on the exact ε(δ) of the product pair (P₁×…×P_k, Q₁×…×Q_k) of
    independent factors with different laws, from truncated laws p_i ≤ P_i, q_i ≤ Q_i of
    each factor (as :func:`~protocols.pair_lower_epsilon`); :func:`composed_lower_epsilon`
    is the case of k identical factors.

    H(ε) = E_{ΠP_i}[(1 − e^{ε − L})₊], L = Σ_i L_i the summed privacy loss; ε(δ) is the
    least ε with H(ε) ≤ δ (and the same from the Q side). Each factor's cell loss is taken
    as ln(p_i/(q_i + m_i)) ≤ ln(P_i/Q_i) (m_i = 1 − Σq_i, the mass q_i leaves out, which
    may sit in any cell, so Q_i ≤ q_i + m_i cell by cell), rounded down to a multiple of
    10⁻³, its probability taken as p_i ≤ P_i, and cells whose loss cannot bring the sum
    above 0 (given the other factors' largest losses) are dropped. (1 − e^{ε − L})₊ grows
    with L, so every step only lowers H: the least ε with the computed H ≤ δ is at most the
    exact one (at most k·10⁻³ below it, plus what the truncation costs). The factors'
    rounded-loss laws are convolved directly (non-negative terms, no Fourier inversion).

    Args:
        pairs: one (p_i, q_i) per factor, each the two laws on the same cells.
        delta: δ.

    Returns:
        A lower bound ε ≥ 0 on the exact ε(δ) of the product pair.

    Raises:
        ParameterError: no factor, p_i and q_i differ in shape, or δ is out of range.
    """
    d = check_delta(delta, pure=True)
    if not pairs:
        raise ParameterError("product_lower_epsilon needs at least one pair of laws")
    laws = []
    for p, q in pairs:
        pp = np.clip(np.asarray(p, dtype=np.float64).ravel(), 0.0, None)
        qq = np.clip(np.asarray(q, dtype=np.float64).ravel(), 0.0, None)
        if pp.shape != qq.shape:
            raise ParameterError(f"p and q must have one shape, got {pp.shape}, {qq.shape}")
        laws.append((pp, qq))
    best = 0.0
    for side in (0, 1):  # P against Q, then Q against P
        factors = []  # per factor: (cell probabilities, losses)
        for pq in laws:
            a, b = pq[side], pq[1 - side]
            missing = max(0.0, 1.0 - float(b.sum())) + b.size * float(np.finfo(np.float64).eps)
            keep = a > 0.0
            factors.append((a[keep], np.log(a[keep]) - np.log(b[keep] + missing)))
        tops = [float(loss.max(initial=-math.inf)) for _, loss in factors]
        if not all(math.isfinite(top) for top in tops) or sum(tops) <= 0.0:
            continue
        total, lo_sum = np.ones(1), 0
        for (a, loss), top in zip(factors, tops, strict=True):
            steps = np.floor(loss / _LOSS_GRID).astype(np.int64)
            floor_step = -math.ceil((sum(tops) - top) / _LOSS_GRID) - 1
            useful = steps >= floor_step
            lo = int(steps[useful].min())
            weights = np.bincount(steps[useful] - lo, weights=a[useful] * (1.0 - 1e-12))
            total = np.convolve(total, weights)
            lo_sum += lo
        grid = (np.arange(total.size) + lo_sum) * _LOSS_GRID

        def hockey(eps: float, total: npt.NDArray[np.float64] = total, grid: Any = grid) -> float:
            over = grid > eps
            return float(np.dot(total[over], -np.expm1(eps - grid[over])))

        if hockey(0.0) <= d:
            continue
        lo_eps, hi_eps = 0.0, float(grid[-1])
        for _ in range(60):
            mid = 0.5 * (lo_eps + hi_eps)
            lo_eps, hi_eps = (mid, hi_eps) if hockey(mid) > d else (lo_eps, mid)
        best = max(best, lo_eps)
    return best


def _omega(tau: int, alpha: float) -> npt.NDArray[np.float64]:
    """Law of clip(m + B + η, 0, τ): B ~ Ber(1/2), η ~ SG(α), exactly (tails summed)."""
    m = (tau - 1) // 2
    c = (1.0 - alpha) / (1.0 + alpha)
    out = np.zeros(tau + 1)
    for b in (0, 1):
        centre = m + b
        for o in range(1, tau):
            out[o] += 0.5 * c * alpha ** abs(o - centre)
        # P[η ≤ −centre] and P[η ≥ τ − centre]: geometric tails c α^k / (1 − α).
        out[0] += 0.5 * c * alpha**centre / (1.0 - alpha)
        out[tau] += 0.5 * c * alpha ** (tau - centre) / (1.0 - alpha)
    return np.asarray(out / out.sum(), dtype=np.float64)


def _logseries(tau: int, beta: float) -> npt.NDArray[np.float64]:
    """Law of clip(m + B + S·K, 0, τ): B ~ Ber(½), S = ±1 fair, K ~ LogSeries(β),
    P[K = k] = β^k / (k·ln(1/(1 − β))) for k ≥ 1 — exactly (tails summed)."""
    m = (tau - 1) // 2
    # Terms β^k/k up to where they fall below 10⁻²⁰ of the tail they end (or underflow):
    # K ≤ τ + 1 + ⌈46/ln(1/β)⌉ covers every tail this law sums to 10⁻²⁰ relative.
    top = tau + 2 + math.ceil(46.0 / -math.log(beta))
    k = np.arange(1, top + 1, dtype=np.float64)
    with np.errstate(under="ignore"):
        terms = np.exp(k * math.log(beta)) / k / -math.log1p(-beta)
    tails = np.cumsum(terms[::-1])[::-1]  # tails[j − 1] = P[K ≥ j]
    out = np.zeros(tau + 1)
    for b in (0, 1):
        centre = m + b
        for sign, edge in ((-1, 0), (1, tau)):
            reach = abs(edge - centre)  # K = reach lands on the edge; K ≥ reach is clipped there
            j = np.arange(1, reach)
            out[centre + sign * j] += 0.25 * terms[j - 1]
            out[edge] += 0.25 * tails[reach - 1]
    return np.asarray(out / out.sum(), dtype=np.float64)


@lru_cache(maxsize=1024)
def _noise_law_cached(tau: int, epsilon: float, scale: float, weight: float) -> tuple[float, ...]:
    wide = _omega(tau, math.exp(-epsilon / scale))
    if weight >= 1.0:
        return tuple(float(v) for v in wide)
    law = weight * wide + (1.0 - weight) * _logseries(tau, math.exp(-epsilon))
    return tuple(float(v) for v in law / law.sum())


def _noise_law(tau: int, epsilon: float, scale: float, weight: float) -> npt.NDArray[np.float64]:
    return np.array(_noise_law_cached(tau, epsilon, scale, weight), dtype=np.float64)


def noise_law(
    tau: int, epsilon: float, *, scale: float = MIX_SCALE, weight: float = 1.0
) -> npt.NDArray[np.float64]:
    """ω, the law of the input-independent branch's number of ones (module doc, "The noise
    law"): w·(truncated DLap of α = e^{−ε/Δ}) + (1 − w)·(truncated log-series of e^{−ε}).

    Args:
        tau: τ, the number of bits each user sends (odd).
        epsilon: the counter's target ε.
        scale: Δ of the truncated DLap part.
        weight: its weight w in (0, 1] (1: the truncated DLap alone).

    Returns:
        ω on {0, …, τ}, symmetric about τ/2.

    Raises:
        ParameterError: τ, ε, Δ or w out of range.
    """
    t = check_tau(tau)
    eps = check_epsilon(epsilon)
    if not (math.isfinite(scale) and scale >= 1.0):
        raise ParameterError(f"scale must be finite and >= 1, got {scale!r}")
    if not 0.0 < weight <= 1.0:
        raise ParameterError(f"weight must lie in (0, 1], got {weight!r}")
    return _noise_law(t, eps, float(scale), float(weight))


def _draw(omega: Sequence[float], size: int, rng: np.random.Generator) -> npt.NDArray[np.int64]:
    """``size`` draws from the law ``omega`` on {0, …, τ} by inverse transform."""
    cdf = np.cumsum(np.asarray(omega, dtype=np.float64))
    cdf /= cdf[-1]
    out = np.searchsorted(cdf, rng.random(size), side="right")
    return np.minimum(out, cdf.size - 1).astype(np.int64)


def pure_bound_name(bit: PureBitCounter, gamma: float) -> str:
    """The name of the bound behind ``bit``'s central ε (for ``PrivacyGuarantee.bound``)."""
    if bit.certified_users:
        return (
            f"cnt_pure_exact_central[{bit.certified_users} same-bit honest users, "
            f"gamma={gamma:g}] (computed eps={bit.epsilon_certified:.6f})"
        )
    return "cnt_pure_local_pure (local calibration; robust for any gamma)"


class CntPURE(ShuffleProtocol):
    """``Cnt_PURE``: τ bits per user, pure ε-DP computed exactly (see module doc)."""

    name: ClassVar[str] = "cnt_pure"
    input_kind: ClassVar[InputKind] = InputKind.BINARY

    def __init__(
        self, *, epsilon: float, n: int, messages: int | None = None, gamma: float = 1.0
    ) -> None:
        self._n = check_n(n)
        self._gamma = check_gamma(gamma)
        self._eps = check_epsilon(epsilon)
        self._tau = check_tau(default_tau(n, epsilon) if messages is None else messages)

    @cached_property
    def bit(self) -> PureBitCounter:
        """The calibrated per-bit mechanism, derived on first use (up to ~40 s at n = 10^6;
        module doc), so listing the protocol or its message count costs nothing."""
        return PureBitCounter.derive(
            epsilon=self._eps, tau=self._tau, honest_users=math.ceil(self._gamma * self._n)
        )

    @property
    def domain(self) -> int:
        return 2

    @property
    def message_size(self) -> int:
        return 1

    @property
    def messages_per_user(self) -> float:
        return float(self._tau)

    @property
    def privacy(self) -> PrivacyGuarantee:
        return PrivacyGuarantee(
            epsilon_central=self.bit.epsilon,
            epsilon_local=self.bit.epsilon_local,
            delta=0.0,
            bound=pure_bound_name(self.bit, self._gamma),
        )

    @property
    def count_noise(self) -> CountNoise:
        return self.bit.count_noise

    def __repr__(self) -> str:
        b = self.bit
        return (
            f"CntPURE(epsilon={b.epsilon:g}, n={self._n}, tau={b.tau}, lam={b.lam:.6g}, "
            f"certified_users={b.certified_users})"
        )

    def honest_users_bound(self, honest_others: int) -> HonestUsersBound | None:
        """The exact accountant of the module doc for ``honest_others`` honest users.

        Args:
            honest_others: the honest users besides the victim.

        Returns:
            The bound, or ``None``.
        """
        return self.bit.honest_users_bound(honest_others)

    def honest_users_lower(
        self, honest_others: int, *, fakes: int = 0, delta: float
    ) -> tuple[float, str] | None:
        """The exact ε(δ) of the count when the honest others hold 0 (with the fakes).

        Args:
            honest_others: the honest users besides the victim.
            fakes: the fake values the adversary cannot tell apart.
            delta: δ.

        Returns:
            ``(epsilon, pair)``: the lower bound and a description of the neighbouring pair, or
            ``None``.
        """
        return self.bit.honest_users_lower(honest_others, fakes=fakes, delta=delta)

    def randomize(self, values: npt.ArrayLike, *, rng: RNGLike) -> npt.NDArray[Any]:
        rng = as_generator(rng)
        x = self.validate_values(values).astype(np.int64, copy=False)
        ones = int(self.bit.ones(x, rng=rng).sum())
        out = np.zeros(x.size * self.bit.tau, dtype=np.uint8)
        out[:ones] = 1
        return out

    def encode(self, messages: npt.NDArray[Any]) -> npt.NDArray[np.uint8]:
        return encode_bits(messages)

    def decode(self, rows: npt.NDArray[np.uint8]) -> tuple[npt.NDArray[Any], npt.NDArray[np.bool_]]:
        return decode_bits(rows)

    def sample_fakes(self, count: int, *, rng: RNGLike) -> npt.NDArray[Any]:
        rng = as_generator(rng)
        return (rng.random(check_n(count, "count", 0)) < 0.5).astype(np.uint8)

    def tally(self, messages: npt.NDArray[Any]) -> MessageTally:
        """The number of ones (all the estimator reads besides the message count).

        Args:
            messages: the decoded messages.

        Returns:
            Their tally.
        """
        m = np.asarray(messages).reshape(-1)
        return MessageTally(np.array([np.count_nonzero(m == 1)], dtype=np.int64), int(m.size))

    def tally_users(self, values: npt.ArrayLike, *, rng: RNGLike) -> MessageTally:
        """Each user's number of ones is drawn as :meth:`randomize` does; the nτ one-bit
        messages are never written out.

        Args:
            values: one value per user.
            rng: the randomizers' generator, or a seed (:data:`~protocols.RNGLike`).

        Returns:
            The tally, equal in distribution to ``tally(randomize(values))``.
        """
        rng = as_generator(rng)
        x = self.validate_values(values).astype(np.int64, copy=False)
        ones = int(self.bit.ones(x, rng=rng).sum())
        return MessageTally(np.array([ones], dtype=np.int64), int(x.size) * self.bit.tau)

    def tally_fakes(self, count: int, *, rng: RNGLike) -> MessageTally:
        rng = as_generator(rng)
        count = check_n(count, "count", 0)
        return MessageTally(np.array([rng.binomial(count, 0.5)], dtype=np.int64), count)

    def estimate(self, messages: npt.NDArray[Any], *, n: int, n_fakes: int) -> Estimate:
        return self.estimate_tally(self.tally(messages), n=n, n_fakes=n_fakes)

    def estimate_tally(self, tally: MessageTally, *, n: int, n_fakes: int) -> Estimate:
        est = self.bit.debias(int(tally.counts[0]), n=n, received=tally.messages)
        fakes = max(tally.messages - n * self.bit.tau, 0)
        var = self.bit.variance(n=n, count=min(max(est, 0.0), float(n)), fakes=fakes)
        return Estimate(
            values=np.array([est]),
            expected_std=np.array([math.sqrt(var)]),
            messages_used=tally.messages,
        )

    def variance(self, values: npt.ArrayLike, *, n_fakes: int = 0) -> float:
        """Exact variance of the estimate for these inputs (``n_fakes`` fake bits).

        Args:
            values: the users' bits.
            n_fakes: the fake bits among the messages.

        Returns:
            The variance of the estimate.
        """
        x = self.validate_values(values)
        return self.bit.variance(n=x.size, count=float(x.sum()), fakes=n_fakes)

    def truth(self, values: npt.ArrayLike) -> npt.NDArray[np.float64]:
        x = self.validate_values(values)
        return np.array([float(x.sum())])


@register_protocol("cnt_pure")
def _build_cnt_pure(spec: ProtocolSpec) -> ShuffleProtocol:
    return CntPURE(
        epsilon=spec.epsilon,
        n=spec.n,
        messages=integer_option(spec, "messages", minimum=1),
        gamma=check_gamma(number_option(spec, "gamma", 1.0)),
    )
