"""Clone reductions, registered in :data:`~protocols.BOUNDS` on import.

``fmt23_stronger_clone`` (family ``krr``)
    Feldman, McMillan, Talwar, "Stronger privacy amplification by shuffling for Rényi and
    approximate DP", SODA'23 (arXiv 2208.04591) Thm 3.2 with its erratum: the result holds for
    randomizers that decompose as R(x) = α R(x⁰) + α R(x¹) + (1−2α) LO(x) with
    α = 1/(e^{ε0}+1) — true for k-RR (its mass on x⁰ is q = α (p+q)). The shuffle is then a
    post-processing of (A+Δ, C−A+1−Δ) vs (A+1−Δ, C−A+Δ) with C ~ Bin(n−1, 2/(e^{ε0}+1)),
    A ~ Bin(C, ½), Δ ~ Bern(e^{ε0}/(e^{ε0}+1)).

``fmt21_numerical`` (family ``generic``)
    Feldman, McMillan, Talwar, "Hiding among the clones", FOCS'21 (arXiv 2012.12803) Thm 3.2
    and their numerical procedure (Sec. 5): the same pair as above with
    C ~ Bin(n−1, e^{−ε0}); valid for every ε0-LDP randomizer.

Fakes: for k-RR a uniform report is a clone with probability 2/(k (p+q)) (the largest α
with U = α R(x⁰) + α R(x¹) + rest). For generic randomizers fakes are not counted (a
uniform message need not look like any user's), which is conservative.

Every evaluation is cached on rounded arguments and vectorized over the support. scipy is
imported inside the functions that use it: ``import protocols`` must not pay its start-up.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import numpy.typing as npt

from .._base import check_delta, check_epsilon, check_n
from .._distributions import binom_cdf, binom_sf
from .._errors import BoundNotApplicable, ParameterError
from ._amplification import AmplificationBound, register_bound
from ._laws import (
    _EPS0_MAX,
    _MASS_TOLERANCE,
    _TAIL_SD,
    FloatArray,
    _binom_sum_logpmf,
    _invert_on_divergence,
    _round,
    _sf_half,
    _solve_decreasing,
    _support,
)

__all__ = [
    "clone_epsilon",
    "fmt21_numerical_epsilon",
    "stronger_clone_epsilon",
]

# --- clone reductions (FMT'21 numerical, FMT'23 stronger clone) ----------------------------


#: Most cells the clone count C is summed over. A law of C with more points (n_others ≳ 2·10^6
#: at ε0 = 1; every known-answer vector has fewer) is grouped into at most this many runs of
#: consecutive values, each charged the divergence of its smallest c: H_c does not increase
#: with c (one more clone adds an independent fair coin to both laws: a post-processing), so
#: the sum stays an upper bound. Cells are 1 wide at C's mean and widen in its tails (width ∝
#: 1/√pmf, which minimises Σ mass·width); the bound moves by ≤ 10^-7 relative at the sizes
#: tests/test_tight_binomial.py compares (and ~10^-9 at 10^10).
_CLONE_CELLS = 1 << 12
#: Charged to δ on the cells' path for rounding: of the cells' masses (≤ 3·10^-15, see
#: :func:`_clone_cells`) and of the incomplete beta tails past 10^9 trials (within 10^-13
#: absolute of direct pmf sums at C ≈ 5·10^9, tests/test_accounting_scale.py).
_CELL_ROUNDING = 1e-12


def _clone_weights(
    n_others: int, prob: float, n_fakes: int, fake_prob: float
) -> tuple[npt.NDArray[np.int64], FloatArray, float]:
    """Support, pmf and dropped mass of C = Bin(n_others, prob) + Bin(n_fakes, fake_prob)."""
    off, lc = _binom_sum_logpmf(n_others, prob, n_fakes, fake_prob)
    w = np.exp(lc)
    keep = w > 1e-300
    c = np.arange(off, off + w.size)[keep]
    w = w[keep]
    return c, w, max(0.0, 1.0 - float(w.sum()))


def _clone_cells(
    n_others: int, prob: float, n_fakes: int, fake_prob: float
) -> tuple[npt.NDArray[np.int64], FloatArray, float]:
    """(c, weight, dropped mass) of C on at most _CLONE_CELLS cells: each cell is a run of
    consecutive values of C, represented by its smallest (the largest divergence) and
    weighted by its mass, so Σ weight·H(c) bounds E[H_C] from above.

    Up to _CLONE_CELLS points every value is its own cell (:func:`_clone_weights` as is).
    Past it, without fakes, a cell's mass is a difference of binomial CDFs at its edges (the
    lower tail below the mean, the upper tail above), so only the edges are evaluated. The
    masses' rounding errors telescope: with H monotone in c, Σ (F(b+1) − F(b))·H_b moves by
    at most 3·max |error of F| ≤ 3·10^-15 (a few ulps of the tails, at most ½ each), and
    _CELL_ROUNDING is charged to the dropped mass for it. With fakes the law is the
    convolution, summed cell by cell.
    """
    lo, hi = _support(n_others, prob)
    if not n_fakes and hi - lo + 1 <= _CLONE_CELLS:
        return _clone_weights(n_others, prob, n_fakes, fake_prob)
    if n_fakes:
        c, w, dropped = _clone_weights(n_others, prob, n_fakes, fake_prob)
        if c.size <= _CLONE_CELLS:
            return c, w, dropped
        starts = np.unique(np.searchsorted(c, _cell_edges(int(c[0]), int(c[-1]), _CLONE_CELLS)))
        return c[starts], np.add.reduceat(w, starts), dropped
    edges = _cell_edges(lo, hi, _CLONE_CELLS)
    bounds = np.append(edges, hi + 1)  # cell i is [bounds[i], bounds[i+1])
    with np.errstate(all="ignore"):  # checked below: the cells must keep the mass
        below = np.asarray(binom_cdf(bounds - 1, n_others, prob), dtype=np.float64)  # P[C < bound]
        above = np.asarray(binom_sf(bounds - 1, n_others, prob), dtype=np.float64)  # P[C ≥ bound]
    w = np.clip(np.where(bounds[1:] <= n_others * prob, np.diff(below), -np.diff(above)), 0, None)
    if not abs(float(w.sum()) + float(below[0] + above[-1]) - 1.0) <= _MASS_TOLERANCE:
        raise BoundNotApplicable(  # also false for NaN
            "the numerical accountant leaves double precision's range at these parameters"
        )
    return edges, w, max(0.0, 1.0 - float(w.sum())) + _CELL_ROUNDING


def _cell_edges(lo: int, hi: int, cells: int) -> npt.NDArray[np.int64]:
    """First values of at most ``cells`` runs covering [lo, hi], 1 wide at the middle and
    wider in the tails: equal steps of Φ(x/(√2 σ)) (cells ∝ 1/√pmf of a normal law with
    [lo, hi] = mean ± 11σ). Any edges keep the bound (see :func:`_clone_cells`)."""
    from scipy import special

    mid, half = (lo + hi) / 2.0, max((hi - lo) / 2.0, 1.0)
    scale = half / _TAIL_SD * math.sqrt(2.0)
    ends = special.ndtr(np.array([lo - mid, hi - mid]) / scale)
    x = mid + scale * special.ndtri(np.linspace(ends[0], ends[1], cells + 1)[:-1])
    edges = np.unique(np.clip(np.floor(x), lo, hi).astype(np.int64))
    edges[0] = lo
    return edges


def _clone_hockey(eps: float, eps0: float, c: npt.NDArray[np.int64], w: FloatArray) -> float:
    """Σ_c w_c H_{e^ε}(P_c‖Q_c) for the clone pair (A+Δ, A+1−Δ) given C = c (FMT'21 Thm 3.2)."""
    e0 = math.exp(eps0)
    big_e = math.exp(eps)
    pv = e0 / (e0 + 1.0)  # Pr[victim's bit goes to the x⁰ side] under D0
    qv = 1.0 - pv
    # P_c(a)/Q_c(a) = (pv a + qv (c+1−a)) / (qv a + pv (c+1−a)) increases with a, so the set
    # where P > e^ε Q is a ≥ t with t the first integer above the solution of equality.
    theta = (c + 1.0) * (big_e * e0 - 1.0) / ((e0 - 1.0) * (1.0 + big_e))
    t = np.floor(theta) + 1.0
    sf_1 = _sf_half(t - 2.0, c)  # Pr[A ≥ t−1]
    sf_0 = _sf_half(t - 1.0, c)  # Pr[A ≥ t]
    tail_p = pv * sf_1 + qv * sf_0
    tail_q = qv * sf_1 + pv * sf_0
    h = np.clip(tail_p - big_e * tail_q, 0.0, None)
    return float(np.dot(w, h))


@functools.lru_cache(maxsize=4096)
def _clone_cached(
    eps0: float, n_others: int, delta: float, prob: float, n_fakes: int, fake_prob: float
) -> float:
    c, w, dropped = _clone_cells(n_others, prob, n_fakes, fake_prob)
    return _solve_decreasing(lambda e: _clone_hockey(e, eps0, c, w) + dropped, delta, eps0)


def clone_epsilon(
    epsilon_local: float,
    n_others: int,
    delta: float,
    *,
    clone_probability: float,
    n_fakes: int = 0,
    fake_clone_probability: float = 0.0,
) -> float:
    """ε(δ) of the clone reduction: each other report is a clone of the victim w.p. given.

    Args:
        epsilon_local: ε0 of the victim's randomizer.
        n_others: other honest users.
        delta: target δ.
        clone_probability: probability that one other user's report is a clone.
        n_fakes: fake reports added by honest shufflers.
        fake_clone_probability: probability that one fake is a clone.

    Returns:
        ε (capped at ε0: shuffling is post-processing of the ε0-LDP reports).

    Raises:
        ParameterError: a probability outside [0, 1], or another parameter out of range.
    """
    eps0 = check_epsilon(epsilon_local, "epsilon_local")
    if not 0.0 <= clone_probability <= 1.0 or not 0.0 <= fake_clone_probability <= 1.0:
        raise ParameterError(
            f"clone probabilities must lie in [0, 1], got {clone_probability!r}, "
            f"{fake_clone_probability!r}"
        )
    if eps0 > _EPS0_MAX:
        return eps0
    return _clone_cached(
        _round(eps0),
        check_n(n_others, "n_others", 0),
        _round(check_delta(delta)),
        _round(clone_probability),
        check_n(n_fakes, "n_fakes", 0),
        _round(fake_clone_probability),
    )


def fmt21_numerical_epsilon(epsilon_local: float, n_others: int, delta: float) -> float:
    """FMT'21 numerical bound (arXiv 2012.12803 Thm 3.2): clones w.p. e^{−ε0}, any ε0-LDP.

    Args:
        epsilon_local: ε0 of the victim's randomizer.
        n_others: other honest users.
        delta: target δ.

    Returns:
        ε (capped at ε0).

    Raises:
        ParameterError: a parameter out of range.
    """
    eps0 = check_epsilon(epsilon_local, "epsilon_local")
    return clone_epsilon(eps0, n_others, delta, clone_probability=math.exp(-eps0))


def _krr_fake_clone_probability(eps0: float, k: int) -> float:
    """Largest 2α with Uniform[k] = α R(x⁰) + α R(x¹) + (1−2α) rest: α = 1/(k (p+q))."""
    e0 = math.exp(eps0)
    return min(1.0, 2.0 * (e0 + k - 1.0) / (k * (e0 + 1.0)))


def stronger_clone_epsilon(
    epsilon_local: float, n_others: int, delta: float, *, k: int, n_fakes: int = 0
) -> float:
    """FMT'23 stronger clone for k-RR (clones w.p. 2/(e^{ε0}+1)); uniform fakes as clones.

    Args:
        epsilon_local: ε0 of the victim's k-RR randomizer.
        n_others: other honest users.
        delta: target δ.
        k: domain of the k-RR randomizer, at least 2.
        n_fakes: uniform fake reports added by honest shufflers.

    Returns:
        ε (capped at ε0).

    Raises:
        ParameterError: a parameter out of range.
    """
    eps0 = check_epsilon(epsilon_local, "epsilon_local")
    k = check_n(k, "k", 2)
    return clone_epsilon(
        eps0,
        n_others,
        delta,
        clone_probability=2.0 / (math.exp(eps0) + 1.0) if eps0 < _EPS0_MAX else 0.0,
        n_fakes=n_fakes,
        fake_clone_probability=_krr_fake_clone_probability(min(eps0, _EPS0_MAX), k),
    )


def _clone_divergence(
    eps: float, eps_l: float, n_others: int, k: int | None, n_fakes: int = 0
) -> float:
    """H_{e^ε} of the clone pair at ε_l: stronger clone for k-RR (k given), else FMT'21."""
    if eps_l > _EPS0_MAX:
        return 1.0
    if k is None:
        c, w, dropped = _clone_cells(n_others, math.exp(-eps_l), 0, 0.0)
    else:
        c, w, dropped = _clone_cells(
            n_others,
            2.0 / (math.exp(eps_l) + 1.0),
            n_fakes,
            _krr_fake_clone_probability(eps_l, k),
        )
    return _clone_hockey(eps, eps_l, c, w) + dropped


def _sc_forward(eps_l: float, n: int, delta: float, k: int) -> float:
    return stronger_clone_epsilon(eps_l, n - 1, delta, k=k)


@functools.lru_cache(maxsize=1024)
def _sc_inverse(eps_c: float, n: int, delta: float, k: int) -> float:
    return _invert_on_divergence(
        lambda e: _clone_divergence(eps_c, e, n - 1, k),
        lambda e: stronger_clone_epsilon(e, n - 1, delta, k=k),
        eps_c,
        delta,
    )


def _fmt_forward(eps_l: float, n: int, delta: float, k: int) -> float:
    return fmt21_numerical_epsilon(eps_l, n - 1, delta)


def _fmt_inverse(eps_c: float, n: int, delta: float, k: int) -> float:
    return _invert_on_divergence(
        lambda e: _clone_divergence(eps_c, e, n - 1, None),
        lambda e: fmt21_numerical_epsilon(e, n - 1, delta),
        eps_c,
        delta,
    )


register_bound(
    AmplificationBound(
        name="fmt23_stronger_clone",
        families=frozenset({"krr"}),
        citation="Feldman, McMillan, Talwar, SODA'23 (arXiv 2208.04591) Thm 3.2 + erratum "
        "(k-RR-type randomizers): clones w.p. 2/(e^ε0+1)",
        forward=_sc_forward,
        inverse=_sc_inverse,
    )
)
register_bound(
    AmplificationBound(
        name="fmt21_numerical",
        families=frozenset({"generic"}),
        citation="Feldman, McMillan, Talwar, FOCS'21 (arXiv 2012.12803) Thm 3.2, numerical "
        "bound of Sec. 5: clones w.p. e^-ε0",
        forward=_fmt_forward,
        inverse=_fmt_inverse,
    )
)
