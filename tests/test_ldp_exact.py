"""ε-LDP of the laws the randomizers really sample, in exact arithmetic, at edge parameters.

numpy's ``Generator.random()`` returns u = m·2^-53 with m uniform on [0, 2^53), so an event
u < x has probability ⌈x·2^53⌉/2^53 and a branch the code decides by comparing u with a
double has a dyadic, exactly computable probability. These tests compute those realised
probabilities (mpmath, 50 digits; e^ε exact to that precision) and require the realised
max likelihood ratio to be ≤ e^ε with no tolerance; stub generators returning chosen u show
that ``randomize`` takes the branches the counted law says it takes.

Statistical checks (seeded): mean error within 4 standard errors, empirical variance within
±15 % of the closed form over R = 2000 repeats (√(2/R) ≈ 3.2 %, so 15 % is > 4σ).
"""

from __future__ import annotations

import math
from typing import Any

import mpmath as mp
import numpy as np
import pytest

from protocols import BLH, HR, KRR, OLH, OUE, SUE, THE, Duchi, Harmony, PiecewiseMechanism
from protocols.ldp._oracle import _one_draw_scale

mp.mp.dps = 50
TWO53 = 2**53
U_MAX = 1.0 - 2.0**-53  # the largest value Generator.random() returns


class _FixedU(np.random.Generator):
    """A Generator whose ``random`` returns the listed u values (a subclass, so an ``rng``
    argument takes it as the Generator it is; the mechanisms tested draw nothing else)."""

    def __init__(self, u: list[float]) -> None:
        super().__init__(np.random.PCG64(0))
        self.u = np.asarray(u, dtype=np.float64)

    def random(self, n: int) -> np.ndarray:
        assert n == self.u.size
        return self.u.copy()


def _fixed(u: list[float]) -> Any:
    return _FixedU(u)


def _exp(eps: float) -> mp.mpf:
    return mp.exp(mp.mpf(eps))  # a double is an exact binary fraction


# --- k-ary randomized response: the one-draw split ------------------------------------------------
def _first_m(scale: float, threshold: float) -> int:
    """Smallest m in [0, 2^53] with fl(m·scale) ≥ threshold (fl(m·K) is monotone in m)."""
    lo, hi = 0, TWO53
    while lo < hi:
        mid = (lo + hi) // 2
        if float(mid) * scale >= threshold:
            hi = mid
        else:
            lo = mid + 1
    return lo


@pytest.mark.parametrize("d", [2, 3, 64])
@pytest.mark.parametrize("eps", [1e-6, 0.05, 1.0, 10.0, 15.0, 19.0, 20.0])
def test_krr_realised_law_is_eps_ldp_exactly(d: int, eps: float) -> None:
    """Value j comes from the m with j·2^53 ≤ fl(m·K) < (j+1)·2^53, the input kept from the
    m with fl(m·K) ≥ d·2^53: P[y = j | x] = a_j + [j = x]·A, so ε* = ln(1 + A/min a_j).
    Before K was widened ε* exceeded ε by 1.8e-8 at d = 2, ε = 20 (5e-8 at d = 64)."""
    oracle = KRR(d=d, epsilon=eps)
    scale = _one_draw_scale(oracle.uniform_probability, d)
    assert scale is not None  # ε ≤ 20 takes the one-draw path
    bounds = [_first_m(scale, j * 2.0**53) for j in range(d + 1)]
    a = [bounds[j + 1] - bounds[j] for j in range(d)]
    kept = TWO53 - bounds[d]
    ratio = 1 + mp.mpf(kept) / min(a)
    e = _exp(eps)
    assert ratio <= e
    # and each value's probability is at least the nominal λ/d = 1/(e^ε + d − 1)
    assert mp.mpf(min(a)) / TWO53 >= 1 / (e + d - 1)
    # randomize uses exactly these lattice points: u just below / at each boundary
    u, want = [], []
    for j in range(1, d + 1):
        for m, y in ((bounds[j] - 1, j - 1), (bounds[j], j if j < d else 0)):
            u.append(m / 2.0**53)
            want.append(y)
    got = oracle.randomize(np.zeros(len(u), dtype=np.int64), rng=_fixed(u))
    assert got.tolist() == want


@pytest.mark.parametrize("eps", [0.05, 1.0, 5.0])
def test_local_hashing_split_is_eps_ldp_exactly(eps: float) -> None:
    """OLH/BLH perturb the hashed value with the same split over g values."""
    for oracle in (OLH(d=16, epsilon=eps), BLH(d=16, epsilon=eps)):
        g = oracle.g
        lam = g / (math.exp(eps) + g - 1)
        scale = _one_draw_scale(lam, g)
        assert scale is not None
        bounds = [_first_m(scale, j * 2.0**53) for j in range(g + 1)]
        a = min(bounds[j + 1] - bounds[j] for j in range(g))
        assert 1 + mp.mpf(TWO53 - bounds[g]) / a <= _exp(eps)


# --- unary encodings: dyadic p*, q* ---------------------------------------------------------------
@pytest.mark.parametrize("cls", [SUE, OUE, THE], ids=lambda c: c.name)
@pytest.mark.parametrize("eps", [1e-6, 0.05, 1.0, 10.0, 30.0])
def test_unary_realised_bits_are_eps_ldp_exactly(cls: type, eps: float) -> None:
    o = cls(d=2, epsilon=eps)
    p, q = mp.mpf(o.p_star), mp.mpf(o.q_star)
    assert p * 2**32 == int(p * 2**32)
    assert q * 2**32 == int(q * 2**32)
    assert p > q
    assert p * (1 - q) / ((1 - p) * q) <= _exp(eps)


@pytest.mark.parametrize("cls", [KRR, HR, BLH, OLH], ids=lambda c: c.name)
@pytest.mark.parametrize(("d", "eps"), [(2, 0.05), (2, 10.0), (3, 0.05), (40, 5.0)])
def test_output_distribution_ratio_at_edge_parameters(cls: type, d: int, eps: float) -> None:
    m = cls(d=d, epsilon=eps).output_distribution()
    assert np.allclose(m.sum(axis=1), 1.0)
    measured = float(np.max(np.log(m.max(axis=0)) - np.log(m.min(axis=0))))
    assert measured <= eps * (1 + 1e-12)
    assert measured == pytest.approx(eps, rel=1e-9)  # tight: no privacy is wasted


# --- Duchi and Harmony --------------------------------------------------------------------------
EPS_TWO_POINT = [1e-6, 0.05, 1.0, 10.0, 17.0, 30.0, 36.0, 37.0, 40.0, 100.0, 700.0]


@pytest.mark.parametrize("cls", [Duchi, Harmony], ids=lambda c: c.name)
@pytest.mark.parametrize("eps", EPS_TWO_POINT)
def test_two_point_realised_law_is_eps_ldp_exactly(
    cls: type[Duchi] | type[Harmony], eps: float
) -> None:
    """Before, P[−B | +1] was computed as ½ − ½/B (Duchi) or e^ε/(e^ε+1) (Harmony): rounded
    below 1/(e^ε+1) from ε ≈ 20 (ratio > e^ε) and to 0 from ε ≈ 37 (deterministic)."""
    mech = cls(epsilon=eps)
    t = np.concatenate([[-1.0, 1.0, 0.0], np.linspace(-1, 1, 101)])
    law = mech.output_distribution(t)
    # every entry is dyadic: exact as an mpf
    lo = [mp.mpf(float(x)) for x in law.min(axis=0)]
    hi = [mp.mpf(float(x)) for x in law.max(axis=0)]
    assert min(lo) > 0  # both reports possible under every input
    e = _exp(eps)
    assert max(a / b for a, b in zip(hi, lo, strict=True)) <= e
    assert mp.mpf(mech.flip_probability) >= 1 / (e + 1)


@pytest.mark.parametrize("eps", [1.0, 40.0, 700.0])
def test_two_point_randomize_can_flip_at_every_eps(eps: float) -> None:
    """With u = 0 and u = 1 − 2^-53 (the extremes Generator.random() returns) an input of
    ±1 gives both reports: before, ε = 40 gave +B for t = +1 whatever u was."""
    for cls in (Duchi, Harmony):
        mech = cls(epsilon=eps)
        for t in (-1.0, 1.0):
            lo = mech.randomize([t], rng=_fixed([0.0]))[0]
            hi = mech.randomize([t], rng=_fixed([U_MAX]))[0]
            assert {float(np.sign(lo)), float(np.sign(hi))} == {-1.0, 1.0}, (cls, t)


# --- Piecewise mechanism --------------------------------------------------------------------------
@pytest.mark.parametrize("eps", [1e-6, 0.05, 1.0, 10.0, 40.0, 60.0, 74.0, 200.0, 700.0])
def test_pm_realised_branch_law_is_eps_ldp_exactly(eps: float) -> None:
    """Centre density (1 − o)/w, outer o/(C + 1) with w = 2/(h−1), C + 1 = 2h/(h−1): the
    ratio is h(1 − o)/o ≤ h² = e^ε iff o ≥ 1/(h+1); o must be what ``u < 1 − o`` realises."""
    mech = PiecewiseMechanism(epsilon=eps)
    o = mp.mpf(mech.outer_probability)
    assert o * TWO53 == int(o * TWO53)  # a multiple of 2^-53: realised exactly
    h = mp.exp(mp.mpf(eps) / 2)
    assert o >= 1 / (h + 1)
    assert h * (1 - o) / o <= _exp(eps)
    assert mech.width > 0
    assert mech.bound == pytest.approx(float((h + 1) / (h - 1)), rel=1e-15)


@pytest.mark.parametrize("eps", [1.0, 50.0, 80.0, 700.0])
def test_pm_outer_branch_is_reachable_at_every_eps(eps: float) -> None:
    """u = 1 − 2^-53 takes the outer branch; for t = −1 the outer pieces lie right of
    r(−1) = −1, and this u lands near +C. Before, above ε ≈ 73.4 h/(h+1) was 1.0 and every
    report stayed in the input's centre piece (here ≈ −1)."""
    mech = PiecewiseMechanism(epsilon=eps)
    out = mech.randomize([-1.0, 1.0], rng=_fixed([U_MAX, U_MAX]))
    _, right = mech._lr(-1.0)
    assert out[0] > right
    assert np.all(np.abs(out) <= mech.bound)
    centre = mech.randomize([-1.0], rng=_fixed([0.0]))
    assert -mech.bound <= centre[0] <= right


# --- variance and bias at edge parameters ---------------------------------------------------------
R = 2000


@pytest.mark.parametrize("cls", [Duchi, Harmony, PiecewiseMechanism], ids=lambda c: c.name)
@pytest.mark.parametrize("eps", [0.05, 10.0])
def test_mean_mechanisms_at_edge_epsilon(cls: type, eps: float) -> None:
    mech = cls(epsilon=eps)
    values = np.array([-1.0, -0.3, 0.0, 0.8, 1.0])
    rep = mech.randomize(np.tile(values, R), rng=np.random.default_rng(21)).reshape(R, -1)
    var = mech.variance(values)
    assert np.all(np.abs(rep.mean(axis=0) - values) <= 4 * np.sqrt(var / R))
    # at ε = 10 the two-point reports at t = ±1 are almost deterministic (variance ~1e-4,
    # a rare-event count): check the variance where it is not
    ok = var > 0.01
    assert np.all(np.abs(rep.var(axis=0, ddof=1)[ok] / var[ok] - 1) <= 0.15)


EDGE_CASES = [
    *[(cls, 2, eps, 20) for cls in (KRR, SUE, OUE, THE, BLH, OLH, HR) for eps in (0.05, 2.0)],
    # one unary encoding stands for the three (same sampler and counter)
    *[(cls, 200, 0.05, 150) for cls in (KRR, OUE, OLH, HR)],
]


@pytest.mark.parametrize(
    ("cls", "d", "eps", "n"), EDGE_CASES, ids=lambda v: getattr(v, "name", str(v))
)
def test_frequency_oracles_at_edge_parameters(cls: type, d: int, eps: float, n: int) -> None:
    """Bins 0 and d − 1 hold 60 % and 40 % of the users; at d = 200 the 198 empty bins have
    one law, so their variance ratios are pooled (one bin of kRR sees < 1 report per run)."""
    counts = np.zeros(d, dtype=np.int64)
    counts[0], counts[-1] = 3 * n // 5, n - 3 * n // 5
    values = np.repeat(np.arange(d), counts)
    oracle = cls(d=d, epsilon=eps)
    rng = np.random.default_rng(33)
    est = np.stack([oracle.aggregate(oracle.randomize(values, rng=rng)) for _ in range(R)])
    var = oracle.variance(counts, n)
    z = (est.mean(axis=0) - counts) / np.sqrt(var / R)
    # d = 200 bins: a 4.5σ band keeps the family-wise false-alarm rate below 0.2 %
    assert np.all(np.abs(z) <= (4.0 if d == 2 else 4.5))
    ratio = est.var(axis=0, ddof=1) / var
    assert np.all(np.abs(ratio[[0, -1]] - 1) <= 0.15), ratio[[0, -1]]
    if d > 2:
        assert abs(ratio[1:-1].mean() - 1) <= 0.15
