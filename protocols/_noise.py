"""Central and distributed noise: Laplace, discrete Laplace, binomial, Pólya shares.

Every sampler takes a keyword-only ``rng`` (no default: a Generator, used in place, or a
seed; :data:`~protocols.RNGLike`) and a numpy-style ``size`` (``None`` for a scalar draw, an
int or a shape tuple), and validates its parameters before drawing anything
(:class:`~protocols.ParameterError` quoting the bad value).

Noise a privacy guarantee depends on is integer-valued: :func:`symmetric_geometric`
(discrete Laplace), :func:`binomial_noise`, :func:`polya` and
:func:`distributed_geometric_shares`. Floating-point Laplace (:func:`laplace`) is a baseline
only: textbook float Laplace leaks through the gaps of the double grid (Mironov, "On
significance of the least significant bits for differential privacy", CCS'12), so no private
release in this project adds it. The integer samplers draw through numpy's geometric,
binomial, gamma and Poisson generators: their outputs live on ℤ (no float is ever released),
and their probabilities are those of the named law up to the double-precision arithmetic
inside numpy's samplers — not a bit-exact rational sampler such as Canonne, Kamath and
Steinke's (NeurIPS'20), which would be the next step for a hardened release.

Distributions (α ∈ (0, 1)):

* symmetric geometric / discrete Laplace ``DLap(α)``: P[Z = k] = (1−α)/(1+α) · α^{|k|},
  k ∈ ℤ; Var = 2α/(1−α)². With α = e^{−ε/Δ} adding it to an integer query of sensitivity Δ
  is ε-DP (Ghosh, Roughgarden, Sundararajan, STOC'09, the geometric mechanism). Sampled as
  G₁ − G₂ with G₁, G₂ iid geometric on {0, 1, …}, P[G = k] = (1−α) α^k.
* binomial ``Bin(m, p)``: the coin-flipping noise of Dwork, Kenthapadi, McSherry, Mironov,
  Naor, Eurocrypt'06 ("Our data, ourselves", §3), (ε, δ)-DP for m large enough.
* Pólya ``Pólya(r, α)`` (negative binomial with real r > 0):
  P[X = k] = Γ(k+r)/(k! Γ(r)) · (1−α)^r α^k, mean rα/(1−α), Var rα/(1−α)².
  Sampled exactly as a Poisson–Gamma mixture: Λ ~ Gamma(shape r, scale α/(1−α)),
  X | Λ ~ Poisson(Λ).
* distributed geometric (survey Thm 8; Goryczka, Xiong, Sunderam, EDBT-W'13; Balle, Bell,
  Gascón, Nissim, arXiv 1906.09116 §4): n parties each add
  X_i = Pólya(1/n, α) − Pólya'(1/n, α). Pólya is infinitely divisible —
  Σ_{i≤n} Pólya(r/n, α) = Pólya(r, α) — and Pólya(1, α) is the geometric on {0, 1, …}, so
  Σ_i X_i ~ DLap(α) exactly: the sum is ε-DP with α = e^{−ε/Δ} while each share alone is
  far from it.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import numpy.typing as npt

from ._errors import ParameterError
from ._random import RNGLike, as_generator

__all__ = [
    "binomial_noise",
    "discrete_laplace",
    "distributed_geometric_shares",
    "geometric_alpha",
    "laplace",
    "polya",
    "polya_variance",
    "symmetric_geometric",
    "symmetric_geometric_variance",
]

Size = int | tuple[int, ...] | None


def _check_alpha(alpha: float, name: str = "alpha") -> float:
    a = float(alpha)
    if not 0.0 < a < 1.0:
        raise ParameterError(f"{name} must lie in (0, 1), got {alpha!r}")
    return a


def _check_positive(x: float, name: str) -> float:
    v = float(x)
    if not math.isfinite(v) or v <= 0:
        raise ParameterError(f"{name} must be a finite number > 0, got {x!r}")
    return v


def _check_size(size: Size) -> Size:
    if size is None:
        return None
    shape = (size,) if isinstance(size, int | np.integer) else tuple(size)
    for s in shape:
        if isinstance(s, bool) or int(s) != s or int(s) < 0:
            raise ParameterError(f"size must be a non-negative int or shape tuple, got {size!r}")
    return tuple(int(s) for s in shape)


def _as_tuple(shape: Size) -> tuple[int, ...]:
    if shape is None:
        return ()
    return (shape,) if isinstance(shape, int) else tuple(shape)


def geometric_alpha(epsilon: float, sensitivity: float = 1.0) -> float:
    """α = e^{−ε/Δ}: the discrete-Laplace parameter that makes a Δ-sensitive count ε-DP.

    Args:
        epsilon: target ε > 0.
        sensitivity: Δ > 0, the largest change of the integer query on neighbours.

    Returns:
        α in (0, 1).

    Raises:
        ParameterError: ε or Δ is not a finite positive number.
    """
    eps = _check_positive(epsilon, "epsilon")
    delta_f = _check_positive(sensitivity, "sensitivity")
    return math.exp(-eps / delta_f)


def laplace(scale: float, size: Size = None, *, rng: RNGLike) -> Any:
    """Floating-point Laplace noise Lap(b): density e^{−|z|/b}/(2b). BASELINE ONLY.

    Adding Lap(Δ/ε) to a real query of ℓ₁-sensitivity Δ is ε-DP in exact arithmetic
    (Dwork, McSherry, Nissim, Smith, TCC'06), but not with IEEE doubles (Mironov, CCS'12):
    use :func:`discrete_laplace` for anything released.

    Args:
        scale: b > 0.
        size: None for a scalar, else an int or a shape.
        rng: source of randomness, or a seed (:data:`~protocols.RNGLike`).

    Returns:
        A float or a float64 array of ``size``.

    Raises:
        ParameterError: b is not a finite positive number or size is malformed.
    """
    rng = as_generator(rng)
    b = _check_positive(scale, "scale")
    return rng.laplace(0.0, b, size=_check_size(size))


def symmetric_geometric(alpha: float, size: Size = None, *, rng: RNGLike) -> Any:
    """Symmetric geometric (discrete Laplace) noise DLap(α) on ℤ, sampled on integers.

    P[Z = k] = (1−α)/(1+α) · ``α^{|k|}``; E Z = 0, Var Z = 2α/(1−α)² (Ghosh, Roughgarden,
    Sundararajan, STOC'09; survey §3.1). Drawn as G₁ − G₂ with G₁, G₂ iid geometric on
    {0, 1, …} with P[G = k] = (1−α) α^k — their difference has exactly this law.

    Args:
        alpha: α in (0, 1); α = e^{−ε/Δ} gives ε-DP for sensitivity Δ (:func:`geometric_alpha`).
        size: None for a scalar, else an int or a shape.
        rng: source of randomness, or a seed (:data:`~protocols.RNGLike`).

    Returns:
        An int or an int64 array of ``size``.

    Raises:
        ParameterError: α outside (0, 1) or size malformed.
    """
    rng = as_generator(rng)
    a = _check_alpha(alpha)
    shape = _check_size(size)
    # numpy's geometric counts trials (support {1, 2, ...}); the +1 shifts cancel.
    g1 = rng.geometric(1.0 - a, size=shape)
    g2 = rng.geometric(1.0 - a, size=shape)
    if shape is None:
        return int(g1) - int(g2)
    return np.asarray(g1, dtype=np.int64) - np.asarray(g2, dtype=np.int64)


def discrete_laplace(
    epsilon: float,
    size: Size = None,
    *,
    sensitivity: float = 1.0,
    rng: RNGLike,
) -> Any:
    """Discrete Laplace noise for ε-DP at sensitivity Δ: DLap(e^{−ε/Δ}).

    See :func:`symmetric_geometric` for the law and the sampler.

    Args:
        epsilon: ε > 0.
        size: None for a scalar, else an int or a shape.
        sensitivity: Δ > 0.
        rng: source of randomness, or a seed (:data:`~protocols.RNGLike`).

    Returns:
        An int or an int64 array of ``size``.

    Raises:
        ParameterError: ε or Δ not positive, or size malformed.
    """
    rng = as_generator(rng)
    return symmetric_geometric(geometric_alpha(epsilon, sensitivity), size, rng=rng)


def symmetric_geometric_variance(alpha: float) -> float:
    """Var DLap(α) = 2α/(1−α)².

    Args:
        alpha: the parameter α in (0, 1).

    Returns:
        The variance.

    Raises:
        ParameterError: α outside (0, 1).
    """
    a = _check_alpha(alpha)
    return 2.0 * a / (1.0 - a) ** 2


def symmetric_geometric_fourth_moment(alpha: float) -> float:
    """E η⁴ = 2α(1 + 10α + α²)/(1−α)⁴ for η ~ DLap(α) (Σ k⁴ α^k = α(1 + 11α + 11α² + α³)
    /(1−α)⁵, times the normalization (1−α)/(1+α) on both sides)."""
    a = _check_alpha(alpha)
    return 2.0 * a * (1.0 + 10.0 * a + a * a) / (1.0 - a) ** 4


def binomial_noise(
    trials: int,
    p: float = 0.5,
    size: Size = None,
    *,
    centered: bool = False,
    rng: RNGLike,
) -> Any:
    """Binomial noise Bin(m, p) (Dwork et al., Eurocrypt'06 "Our data, ourselves", §3).

    Mean m·p, variance m·p(1−p). With ``centered=True`` the mean m·p is subtracted; it must
    then be an integer so the noise stays on ℤ (e.g. p = ½ and m even).

    Args:
        trials: m >= 0 coin flips.
        p: success probability in [0, 1].
        size: None for a scalar, else an int or a shape.
        centered: subtract the (integer) mean m·p.
        rng: source of randomness, or a seed (:data:`~protocols.RNGLike`).

    Returns:
        An int or an int64 array of ``size``.

    Raises:
        ParameterError: m not a non-negative integer, p outside [0, 1], m·p not an integer
            when centered, or size malformed.
    """
    rng = as_generator(rng)
    if isinstance(trials, bool) or int(trials) != trials or int(trials) < 0:
        raise ParameterError(f"trials must be an integer >= 0, got {trials!r}")
    m = int(trials)
    pf = float(p)
    if not 0.0 <= pf <= 1.0:
        raise ParameterError(f"p must lie in [0, 1], got {p!r}")
    shift = 0
    if centered:
        mean = m * pf
        if mean != round(mean):
            raise ParameterError(
                f"centered binomial noise needs an integer mean trials*p, got {m}*{pf} = {mean}"
            )
        shift = round(mean)
    shape = _check_size(size)
    draw = rng.binomial(m, pf, size=shape)
    if shape is None:
        return int(draw) - shift
    return np.asarray(draw, dtype=np.int64) - shift


def polya(r: float, alpha: float, size: Size = None, *, rng: RNGLike) -> Any:
    """Pólya(r, α) (negative binomial with real r) sampled exactly via Poisson–Gamma.

    P[X = k] = Γ(k+r)/(k! Γ(r)) · (1−α)^r α^k for k = 0, 1, …; mean rα/(1−α),
    Var rα/(1−α)². If Λ ~ Gamma(shape r, scale α/(1−α)) and X | Λ ~ Poisson(Λ), then X has
    exactly this law (integrate the Poisson pmf against the Gamma density).

    Args:
        r: shape r > 0 (real; r = 1/n for distributed geometric shares).
        alpha: α in (0, 1).
        size: None for a scalar, else an int or a shape.
        rng: source of randomness, or a seed (:data:`~protocols.RNGLike`).

    Returns:
        An int or an int64 array of ``size``.

    Raises:
        ParameterError: r not positive, α outside (0, 1), or size malformed.
    """
    rng = as_generator(rng)
    rr = _check_positive(r, "r")
    a = _check_alpha(alpha)
    shape = _check_size(size)
    lam = rng.gamma(rr, a / (1.0 - a), size=shape)
    draw = rng.poisson(lam)
    if shape is None:
        return int(draw)
    return np.asarray(draw, dtype=np.int64)


def polya_variance(r: float, alpha: float) -> float:
    """Var Pólya(r, α) = rα/(1−α)².

    Args:
        r: the shape r > 0.
        alpha: the parameter α in (0, 1).

    Returns:
        The variance.

    Raises:
        ParameterError: r not a finite number > 0, or α outside (0, 1).
    """
    rr = _check_positive(r, "r")
    a = _check_alpha(alpha)
    return rr * a / (1.0 - a) ** 2


def distributed_geometric_shares(
    parties: int,
    alpha: float,
    size: Size = None,
    *,
    rng: RNGLike,
) -> npt.NDArray[np.int64]:
    """n integer noise shares whose sum is exactly DLap(α) (survey Thm 8).

    Share i is X_i = Pólya(1/n, α) − Pólya'(1/n, α), all 2n draws independent. Since
    Σ_{i≤n} Pólya(1/n, α) = Pólya(1, α) = geometric on {0, 1, …} with P[G = k] = (1−α)α^k,
    Σ_i X_i = G₁ − G₂ ~ DLap(α): with α = e^{−ε/Δ} the aggregate of n honest parties is
    ε-DP for a Δ-sensitive sum (Goryczka, Xiong, Sunderam, EDBT-W'13; Balle et al.
    arXiv 1906.09116). Each share has variance 2α/(n(1−α)²).

    Args:
        parties: n >= 1, the number of shares (users) that together add one DLap(α).
        alpha: α in (0, 1); :func:`geometric_alpha` gives e^{−ε/Δ}.
        size: None for one set of n shares (returns shape ``(n,)``); else an int or shape S
            for independent sets (returns shape ``S + (n,)``, summing the last axis gives
            DLap(α) draws of shape S).
        rng: source of randomness, or a seed (:data:`~protocols.RNGLike`).

    Returns:
        int64 array whose last axis holds the n shares.

    Raises:
        ParameterError: n not a positive integer, α outside (0, 1), or size malformed.
    """
    rng = as_generator(rng)
    if isinstance(parties, bool) or int(parties) != parties or int(parties) < 1:
        raise ParameterError(f"parties must be an integer >= 1, got {parties!r}")
    n = int(parties)
    shape = _check_size(size)
    full: tuple[int, ...] = (n,) if shape is None else (*_as_tuple(shape), n)
    plus = polya(1.0 / n, alpha, full, rng=rng)
    minus = polya(1.0 / n, alpha, full, rng=rng)
    return np.asarray(plus - minus, dtype=np.int64)
