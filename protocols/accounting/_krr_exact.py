"""Exact ε(δ) of shuffled k-RR for the worst all-equal dataset of the other users.

A lower bound on the true ε for any k (each dataset is one neighbouring pair), which the
proven upper bounds are checked never to undercut. It is not the worst dataset in general
(see :func:`krr_exact_epsilon`).
"""

from __future__ import annotations

import functools
import math

import numpy as np

from .._base import check_delta, check_epsilon, check_n
from .._distributions import binom_cdf, binom_pmf
from ._laws import (
    _EPS0_MAX,
    FloatArray,
    _round,
    _solve_decreasing,
    _support,
)

__all__ = [
    "krr_exact_epsilon",
]

# --- k-RR with every other user holding x⁰: exact for that dataset, for any n ---------------


def _krr_exact_hockey(eps: float, eps0: float, n: int, k: int) -> float:
    """max of both H_{e^ε} directions for D0 = all n users hold x⁰, D1 = victim holds x¹.

    Under D0 the histogram is Multinomial(n; p, q, …, q) and the likelihood ratio is linear:
    P1(h)/P0(h) = 1 + ((e^{ε0}−1) h₁ − (1−e^{−ε0}) h₀)/n, so H(P1‖P0) = E_{P0}[(L − e^ε)₊] and
    H(P0‖P1) = E_{P0}[(1 − e^ε L)₊] are sums over h₁ of partial binomial expectations in h₀.
    """
    e0 = math.exp(eps0)
    big_e = math.exp(eps)
    p = e0 / (e0 + k - 1.0)
    q = 1.0 / (e0 + k - 1.0)
    lo, hi = _support(n, q)
    h1 = np.arange(lo, hi + 1, dtype=np.float64)
    w1 = binom_pmf(h1, n, q)
    m = n - h1  # h₀ | h₁ ~ Bin(m, p0)
    p0 = min(1.0, p / (1.0 - q))
    c = (1.0 - 1.0 / e0) / n

    def partial(t: FloatArray) -> tuple[FloatArray, FloatArray]:
        """Pr[h₀ ≤ t] and E[h₀ 1{h₀ ≤ t}] given h₁."""
        cdf = binom_cdf(t, m, p0)
        # E[X 1{X ≤ t}] = m p0 Pr[Bin(m−1, p0) ≤ t−1]; zero when m = 0.
        mean_part = m * p0 * binom_cdf(t - 1.0, np.maximum(m - 1.0, 0.0), p0)
        return cdf, mean_part

    a = 1.0 - big_e + (e0 - 1.0) * h1 / n  # (L − E) = a − c h₀
    t1 = np.floor(a / c)
    f1, g1 = partial(t1)
    h_fwd = np.clip(a * f1 - c * g1, 0.0, None)
    b = big_e - 1.0 + big_e * (e0 - 1.0) * h1 / n  # (1 − E L) = E c h₀ − b
    t2 = np.floor(b / (big_e * c))
    f2, g2 = partial(t2)
    h_bwd = np.clip(big_e * c * (m * p0 - g2) - b * (1.0 - f2), 0.0, None)
    return max(float(np.dot(w1, h_fwd)), float(np.dot(w1, h_bwd)))


def _krr_exact_z_hockey(eps: float, eps0: float, n: int, k: int) -> float:
    """Both H_{e^ε} directions when every other user holds z ∉ {x⁰, x¹} (k ≥ 3).

    With M the Multinomial(n; R(z)) law, P_b(h) = M(h) (1 + ((e^{ε0}−1) h_b − (1−e^{−ε0}) h_z)/n),
    linear in h_z given (h₀, h₁), so each direction is a sum over (h₀, h₁) of partial binomial
    expectations in h_z.
    """
    e0 = math.exp(eps0)
    big_e = math.exp(eps)
    p = e0 / (e0 + k - 1.0)
    q = 1.0 / (e0 + k - 1.0)
    lo, hi = _support(n, q)
    h = np.arange(lo, hi + 1, dtype=np.float64)
    h0, h1 = np.meshgrid(h, h, indexing="ij")
    # (h₀, h₁) ~ Multinomial marginal: h₀ ~ Bin(n, q), h₁ | h₀ ~ Bin(n − h₀, q/(1−q)).
    w = binom_pmf(h0, n, q) * binom_pmf(h1, n - h0, q / (1.0 - q))
    m = np.maximum(n - h0 - h1, 0.0)
    pz = min(1.0, p / (1.0 - 2.0 * q))
    cz = (1.0 - 1.0 / e0) / n

    def positive_part(a: FloatArray, slope: float) -> FloatArray:
        """E[(a + slope·h_z)₊] for h_z ~ Bin(m, pz), slope > 0: region h_z > −a/slope."""
        t = np.floor(-a / slope)
        cdf = binom_cdf(t, m, pz)
        part = m * pz * binom_cdf(t - 1.0, np.maximum(m - 1.0, 0.0), pz)
        return np.asarray(np.clip(a * (1.0 - cdf) + slope * (m * pz - part), 0.0, None), float)

    # ℓ1 − E ℓ0 = (1 − E) + (e0−1)(h₁ − E h₀)/n + (E − 1) cz h_z
    a_fwd = (1.0 - big_e) + (e0 - 1.0) * (h1 - big_e * h0) / n
    h_fwd = positive_part(a_fwd, (big_e - 1.0) * cz) if big_e > 1.0 else np.clip(a_fwd, 0, None)
    a_bwd = (1.0 - big_e) + (e0 - 1.0) * (h0 - big_e * h1) / n
    h_bwd = positive_part(a_bwd, (big_e - 1.0) * cz) if big_e > 1.0 else np.clip(a_bwd, 0, None)
    return max(float(np.sum(w * h_fwd)), float(np.sum(w * h_bwd)))


@functools.lru_cache(maxsize=4096)
def _krr_exact_cached(eps0: float, n: int, delta: float, k: int) -> float:
    x0 = _solve_decreasing(lambda e: _krr_exact_hockey(e, eps0, n, k), delta, eps0)
    if k == 2:
        return x0
    z = _solve_decreasing(lambda e: _krr_exact_z_hockey(e, eps0, n, k), delta, eps0)
    return max(x0, z)


def krr_exact_epsilon(epsilon_local: float, n_others: int, delta: float, *, k: int) -> float:
    """Exact ε(δ) of shuffled k-RR for the worst all-equal dataset of the other users.

    Two datasets are computed exactly: every other user holds the victim's D0 value x⁰, and
    (k ≥ 3) every other user holds a third value z. The larger ε is a valid *lower* bound on
    the true ε for any k (each is one neighbouring pair), never an upper bound: no
    accountant states it as a run's ε. It is not always the worst dataset: at k = 2, n = 5,
    ε0 = 0.7, δ = 0.05 it gives 0.229 while others = (0, 0, 0, 1) gives 0.271 (the maximum
    over every dataset, which ``binary_rr_exact`` computes; ``tests/test_tight.py`` pins
    both). For k = 3 at n = 12 the exhaustive search over every composition of the others'
    data finds no worse dataset. The z dataset is a 2-D sum over (h₀, h₁): seconds at
    n = 10^4, about a minute at n = 10^5.

    Args:
        epsilon_local: ε0 of the k-RR randomizer.
        n_others: other honest users.
        delta: target δ.
        k: domain of the k-RR randomizer, at least 2.

    Returns:
        ε (at most ε0).

    Raises:
        ParameterError: a parameter out of range.
    """
    eps0 = check_epsilon(epsilon_local, "epsilon_local")
    if eps0 > _EPS0_MAX:
        return eps0
    return _krr_exact_cached(
        _round(eps0),
        check_n(n_others, "n_others", 0) + 1,
        _round(check_delta(delta)),
        check_n(k, "k", 2),
    )
