"""Shuffled OLH (as SLH/MURS use it) against shuffled d'-ary RR, exactly, on small cases.

SLH and MURS account a local-hashing report (H, y), y = d'-RR(H(x)), as d'-RR on the hashed
value. Here the exact ε(δ) of the shuffled OLH reports, maximised over EVERY dataset of the
other users and every victim pair, is compared with the exact ε(δ) of shuffled d'-RR at the
same n, ε_l and d', also over every dataset (``worst_pair_epsilon(all_compositions=True)``):
the OLH curve must never be above the d'-RR curve (10⁻⁹ allowed for round-off).

Sufficient statistic. P[(h, y) | x] = P(h)·(q' + (p' − q')[x ∈ h⁻¹(y)]): a report's likelihood
depends on x only through the set S = h⁻¹(y) ⊆ [d], so the histogram of the sets over the
reports is sufficient for every pair of datasets and has the same ε(δ) as the full view.
Sets with S = ∅ or S = [d] have one likelihood for every x and are merged into one cell.

Hash families. (i) Ideal hashing (h uniform over all maps [d] → [d']), which the 2-independent
family of ``protocols.lh_hash`` matches on every pair of points; (ii) a collision-free
family (h a uniform bijection when d = d'), which makes OLH exactly d'-RR up to a known
relabelling: there the two curves coincide, so the comparison is tight. Why OLH is never
worse here: for the victim's pair (a, b), a report whose h has h(a) = h(b) has one law under
both inputs, so the victim's report is, with probability P[h(a) = h(b)], the same under
both datasets; otherwise it carries the d'-RR likelihood ratios. The grid is the evidence;
the general inequality is not proven here.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from protocols import epsilon_for_pair
from protocols.accounting import krr_exact_epsilon
from protocols.accounting._exact_shuffle import krr_matrix, worst_pair_epsilon

#: Round-off allowed between the two exact computations.
_TOL = 1e-9


def _olh_matrix(eps: float, d: int, g: int, maps: list[tuple[int, ...]]) -> np.ndarray:
    """Row x: the law of the set S = h⁻¹(y) (proper non-empty sets, then one merged cell for
    ∅ and [d]) of one report, h uniform over ``maps``."""
    z = math.exp(eps) + g - 1.0
    sets = [s for r in range(1, d) for s in itertools.combinations(range(d), r)]
    index = {frozenset(s): i for i, s in enumerate(sets)}
    out = np.zeros((d, len(sets) + 1))
    for x in range(d):
        for h in maps:
            for y in range(g):
                s = frozenset(v for v in range(d) if h[v] == y)
                w = (math.exp(eps) if h[x] == y else 1.0) / z / len(maps)
                out[x, index.get(s, len(sets))] += w
    return out


def _histogram_law(rows: list[np.ndarray]) -> dict[tuple[int, ...], float]:
    law: dict[tuple[int, ...], float] = {(0,) * rows[0].size: 1.0}
    for row in rows:
        nxt: dict[tuple[int, ...], float] = {}
        for key, p in law.items():
            for j, w in enumerate(row):
                if w > 0.0:
                    k = (*key[:j], key[j] + 1, *key[j + 1 :])
                    nxt[k] = nxt.get(k, 0.0) + p * w
        law = nxt
    return law


def olh_worst_epsilon(matrix: np.ndarray, n: int, delta: float) -> float:
    """Exact ε(δ) of the shuffled reports, worst over every dataset and victim pair."""
    d = matrix.shape[0]
    best = 0.0
    for others in itertools.combinations_with_replacement(range(d), n - 1):
        base = [matrix[v] for v in others]
        for a, b in itertools.combinations(range(d), 2):
            p = _histogram_law([*base, matrix[a]])
            q = _histogram_law([*base, matrix[b]])
            keys = sorted(set(p) | set(q))
            with np.errstate(divide="ignore"):
                lp = np.log([p.get(k, 0.0) for k in keys])
                lq = np.log([q.get(k, 0.0) for k in keys])
            best = max(best, epsilon_for_pair(lp, lq, delta))
    return best


def _all_maps(d: int, g: int) -> list[tuple[int, ...]]:
    return list(itertools.product(range(g), repeat=d))


# (d, d', ε_l, n): d' = ⌊e^{ε_l/2} + 1⌉ as SLH chooses it (2 below ε_l ≈ 0.81, 3 up to 1.83).
GRID = [
    (2, 2, 0.5, 5),
    (2, 2, 0.5, 8),
    (3, 2, 0.7, 5),
    (4, 2, 0.5, 3),
    (2, 3, 1.2, 6),
    (3, 3, 1.6, 4),
]
DELTAS = (1e-3, 0.01, 0.05, 0.1, 0.2)


@pytest.mark.parametrize(("d", "g", "eps", "n"), GRID)
def test_shuffled_olh_is_within_shuffled_krr(d: int, g: int, eps: float, n: int) -> None:
    assert g == max(2, round(math.exp(eps / 2.0) + 1.0))  # the d' SLH would use
    olh = _olh_matrix(eps, d, g, _all_maps(d, g))
    for delta in DELTAS:
        krr = worst_pair_epsilon(krr_matrix(eps, g), n=n, delta=delta, all_compositions=True)
        assert olh_worst_epsilon(olh, n, delta) <= krr.epsilon + _TOL, delta
        # the all-equal-dataset reference is one of the pairs searched (a lower bound only)
        assert krr.epsilon >= krr_exact_epsilon(eps, n - 1, delta, k=g) - 1e-6


@pytest.mark.parametrize(("g", "eps", "n"), [(2, 0.5, 6), (3, 1.2, 5)])
def test_collision_free_hashing_is_exactly_krr(g: int, eps: float, n: int) -> None:
    # d = d': h a uniform bijection; OLH is d'-RR relabelled by a known h: equal curves.
    maps = list(itertools.permutations(range(g)))
    olh = _olh_matrix(eps, g, g, maps)
    for delta in DELTAS:
        krr = worst_pair_epsilon(krr_matrix(eps, g), n=n, delta=delta, all_compositions=True)
        assert olh_worst_epsilon(olh, n, delta) == pytest.approx(krr.epsilon, abs=1e-7)


def test_ideal_hashing_is_strictly_more_private_somewhere() -> None:
    # The check is not vacuous: collisions give OLH slack over d'-RR at these parameters.
    olh = _olh_matrix(0.5, 3, 2, _all_maps(3, 2))
    krr = worst_pair_epsilon(krr_matrix(0.5, 2), n=4, delta=0.01, all_compositions=True)
    assert olh_worst_epsilon(olh, 4, 0.01) < krr.epsilon - 0.1
