"""The accountants at large n: exact binomial tails, the clone bounds' cells, and the shared
cache of bound evaluations.

* ``_sf_half`` (Pr[Bin(n, ½) > t], under both clone bounds) against exact sums, and finite
  past 2^31 trials, where scipy's ``bdtrc`` was NaN.
* The clone bounds sum the clone count C over at most ``_CLONE_CELLS`` cells once its law
  has more points: never below the sum over every value of C (the cells are charged their
  largest divergence), and within 2·10^-6 of it (relative, + the 10^-12 charged for
  rounding), on a grid of sizes where the cells kick in; the ε they return meets δ on the
  ungrouped sum too.
* A protocol built twice, and ``esa amplify`` asking what the construction asked, evaluate
  each bound once (calls counted).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import mpmath
import numpy as np
import pytest
from scipy import stats

from protocols import BOUNDS, ProtocolSpec, build_protocol
from protocols.accounting import _amplification, _clones
from protocols.accounting._laws import _sf_half, _solve_decreasing
from simulations.commands.amplify import amplify_table


def _exact_sf_half(n: int, t: int) -> float:
    """Pr[Bin(n, ½) > t] to 30 digits: the pmf from t + 1 on, by its ratio recurrence."""
    mpmath.mp.dps = 30
    k = t + 1
    term = (
        mpmath.exp(mpmath.loggamma(n + 1) - mpmath.loggamma(k + 1) - mpmath.loggamma(n - k + 1))
        / mpmath.mpf(2) ** n
    )
    total = mpmath.mpf(0)
    while total == 0 or term > mpmath.mpf(10) ** -35 * total:
        total += term
        term = term * (n - k) / (k + 1)
        k += 1
    return float(total)


@pytest.mark.parametrize(("n", "t"), [(10**6, 500_500), (10**6, 503_000), (4001, 2100)])
def test_sf_half_matches_exact_sums_to_1e13(n: int, t: int) -> None:
    # bdtrc was off by 1e-10 relative at (10^6, 500 500); betainc is within 1e-15.
    assert float(_sf_half(t, n)) == pytest.approx(_exact_sf_half(n, t), rel=1e-13)


def test_sf_half_is_finite_past_2_to_the_31_trials() -> None:
    n = np.array([5_378_279_977, 5_378_279_977, 9_999_999_999])
    t = np.array([2_689_140_000.0, 2_689_240_000.0, 5_000_100_000.0])
    got = _sf_half(t, n)
    assert np.all(np.isfinite(got))
    np.testing.assert_allclose(got, stats.binom.sf(t, n, 0.5), rtol=1e-12)
    # Edges: t < 0 is certain, t ≥ n impossible.
    np.testing.assert_array_equal(_sf_half([-1.0, 7.0, 9.0], [7, 7, 7]), [1.0, 0.0, 0.0])


def test_sf_half_near_the_middle_at_1e9_trials() -> None:
    # bdtrc gave 0.174 here (the answer is 0.4997: 65 % off near the mean at ~10^9 trials,
    # 0.3 % at 10^7), under both clone bounds and the blanket. At these n the normal law
    # with continuity correction is within ~10^-9 of the binomial tail near the mean.
    from scipy import special

    c = np.array([881_209_582, 911_186_913, 10_000_000])
    t = np.array([440_604_802.0, 455_593_439.0, 5_001_000.0])
    normal = special.ndtr(-(t + 0.5 - c / 2) / (np.sqrt(c) / 2))
    np.testing.assert_allclose(_sf_half(t, c), normal, rtol=1e-7)


#: (ε0, n_others, fakes): every law of C here has more points than _CLONE_CELLS.
CELL_GRID = [
    (0.5, 10**7, 0),
    (1.0, 10**7, 0),
    (1.0, 4 * 10**6, 300),
    (4.0, 10**8, 0),
    (8.0, 10**8, 0),
    (2.0, 3 * 10**6, 0),
]


@pytest.mark.parametrize(("eps0", "n_others", "fakes"), CELL_GRID)
def test_clone_cells_bound_the_full_sum_within_2e6(eps0: float, n_others: int, fakes: int) -> None:
    delta = 1e-6
    prob = 2.0 / (math.exp(eps0) + 1.0)
    fake_prob = _clones._krr_fake_clone_probability(eps0, 2)
    c, w, dropped = _clones._clone_weights(n_others, prob, fakes, fake_prob)
    cells, cw, cdropped = _clones._clone_cells(n_others, prob, fakes, fake_prob)
    assert c.size > _clones._CLONE_CELLS >= cells.size
    eps = _clones.stronger_clone_epsilon(eps0, n_others, delta, k=2, n_fakes=fakes)

    def full(e: float) -> float:
        return _clones._clone_hockey(e, eps0, c, w) + dropped

    for e in (0.8 * eps, eps, 1.25 * eps):
        exact = full(e)
        grouped = _clones._clone_hockey(e, eps0, cells, cw) + cdropped
        assert exact * (1 - 1e-13) <= grouped <= exact * (1 + 2e-6) + _clones._CELL_ROUNDING
    # Sound on the ungrouped sum, and the same root to the root find's tolerance (1e-7
    # relative, 1e-9 absolute): measured ≤ 1.1e-7 relative apart on this grid.
    assert full(eps) <= delta
    assert eps == pytest.approx(_solve_decreasing(full, delta, eps0), rel=1e-6, abs=2e-9)


def test_clone_bounds_at_1e10_users_use_few_cells() -> None:
    # 10^6-point laws at n = 10^10 took 23–45 s per forward map (two binomial tails per
    # point per root-find step); the cells bring it to ~1 s, and ε0 = 1 (C ≈ 5·10^9 > 2^31
    # trials) no longer leaves double precision.
    prob = 2.0 / (math.e + 1.0)
    cells, w, dropped = _clones._clone_cells(10**10 - 1, prob, 0, 0.0)
    assert cells.size <= _clones._CLONE_CELLS
    assert abs(float(w.sum()) + dropped - 1.0 - _clones._CELL_ROUNDING) < 1e-13
    eps_big = _clones.stronger_clone_epsilon(1.0, 10**10 - 1, 1e-6, k=2)
    eps_small = _clones.stronger_clone_epsilon(1.0, 10**9 - 1, 1e-6, k=2)
    assert 0.0 < eps_big < eps_small < 1.0
    # One clone count past 2^31 trials: the divergence from two incomplete-beta tails
    # against the direct sum of max(0, P − e^ε Q) over the pmf, within 10^-13 absolute.
    c, eps0 = 5_378_000_000, 1.0
    half = 14 * math.sqrt(c) / 2
    a = np.arange(int(c / 2 - half), int(c / 2 + half))
    here, before = stats.binom.pmf(a, c, 0.5), stats.binom.pmf(a - 1, c, 0.5)
    pv = math.exp(eps0) / (math.exp(eps0) + 1)
    for eps in (1e-5, 3e-5, eps_big):
        direct = np.clip(
            pv * before + (1 - pv) * here - math.exp(eps) * ((1 - pv) * before + pv * here), 0, None
        ).sum()
        tails = _clones._clone_hockey(eps, eps0, np.array([c]), np.array([1.0]))
        assert abs(tails - direct) < 1e-13 < _clones._CELL_ROUNDING


def _counting(
    calls: dict[str, int], name: str, f: Callable[[float, int, float, int], float]
) -> Callable[[float, int, float, int], float]:
    def counted(eps: float, n: int, delta: float, k: int) -> float:
        calls[name] = calls.get(name, 0) + 1
        return f(eps, n, delta, k)

    return counted


def test_second_construction_and_the_cli_do_not_recompute(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: dict[str, int] = {}
    for name, bound in list(BOUNDS.items()):
        monkeypatch.setitem(
            BOUNDS,
            name,
            dataclasses.replace(
                bound,
                forward=_counting(calls, f"{name}.forward", bound.forward),
                inverse=_counting(calls, f"{name}.inverse", bound.inverse),
            ),
        )
    # Parameters no other test asks about, so the first construction computes.
    spec = ProtocolSpec(epsilon=0.7312345, delta=1e-7, n=23_457, domain=8)
    first = build_protocol("hist_kr", spec)
    after_first = dict(calls)
    assert after_first, "the construction asked no bound"
    assert any(key.endswith(".inverse") for key in after_first)
    second = build_protocol("hist_kr", spec)
    assert calls == after_first  # nothing recomputed
    assert second.privacy == first.privacy
    # esa amplify asks every bound for ε_l at the same (ε_c, n, δ, k): the ones the
    # construction asked answer from the cache; only the others are computed.
    amplify_table(epsilon_local=None, epsilon_central=0.7312345, n=23_457, delta=1e-7, domain=8)
    for key, count in after_first.items():
        if key.endswith(".inverse"):
            assert calls[key] == count, key
    assert _amplification._evaluate.cache_info().hits > 0
