"""Exact shuffled-histogram privacy for small n (protocols/accounting/_exact_shuffle.py).

These are the lower bounds no proof may beat: every registered upper bound must sit at or
above them (an upper bound below a measured lower bound is a bug).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from protocols import (
    BOUNDS,
    ParameterError,
    histogram_distribution,
    krr_blanket_epsilon,
    krr_matrix,
    pair_epsilon,
    tightest_central,
    worst_pair_epsilon,
)


def test_histogram_of_iid_messages_is_multinomial() -> None:
    row = np.array([0.2, 0.5, 0.3])
    dist = histogram_distribution([row] * 6, 3)
    assert dist.sum() == pytest.approx(1.0, abs=1e-12)
    for h in [(6, 0, 0), (1, 3, 2), (2, 2, 2), (0, 0, 6)]:
        assert dist[h] == pytest.approx(stats.multinomial.pmf(h, 6, row), rel=1e-12)
    assert dist[(1, 1, 1)] == 0.0  # only histograms of 6 messages carry mass


def test_single_user_is_the_local_randomizer() -> None:
    # n = 1: the output is the report itself, so ε(δ) = ln((p − δ)/q) exactly.
    eps0, delta = 1.3, 1e-3
    k = 4
    q = 1.0 / (math.exp(eps0) + k - 1)
    p = math.exp(eps0) * q
    res = pair_epsilon(krr_matrix(eps0, k), victim=(0, 1), others=[], delta=delta)
    assert res.epsilon == pytest.approx(math.log((p - delta) / q), rel=1e-12)


@pytest.mark.parametrize(("k", "n", "eps0", "delta"), [(2, 16, 2.0, 1e-3), (2, 25, 3.0, 1e-2)])
def test_upper_bounds_never_below_exact_binary(k: int, n: int, eps0: float, delta: float) -> None:
    lower = worst_pair_epsilon(krr_matrix(eps0, k), n=n, delta=delta).epsilon
    for name, bound in BOUNDS.items():
        if not bound.applies_to("krr"):
            continue
        try:
            upper = bound.epsilon_central(epsilon_local=eps0, n=n, delta=delta, k=k)
        except ParameterError:
            continue  # BoundNotApplicable: the theorem does not cover this configuration
        assert upper >= lower * (1 - 1e-9), name


@pytest.mark.parametrize(("k", "n", "eps0", "delta"), [(3, 10, 1.0, 1e-2), (4, 7, 2.0, 1e-2)])
def test_krr_upper_bounds_dominate_every_composition(
    k: int, n: int, eps0: float, delta: float
) -> None:
    worst = worst_pair_epsilon(krr_matrix(eps0, k), n=n, delta=delta, all_compositions=True)
    eps_c, _ = tightest_central(epsilon_local=eps0, n=n, delta=delta, family="krr", k=k)
    assert worst.epsilon <= eps_c * (1 + 1e-9)
    assert worst.epsilon <= krr_blanket_epsilon(eps0, n - 1, delta, k=k) * (1 + 1e-9)


def test_fakes_only_lower_the_exact_epsilon() -> None:
    r = krr_matrix(2.0, 3)
    alone = pair_epsilon(r, victim=(0, 1), others=[0] * 5, delta=1e-3)
    with_fakes = pair_epsilon(r, victim=(0, 1), others=[0] * 5, delta=1e-3, n_fakes=5)
    assert with_fakes.epsilon < alone.epsilon
    assert with_fakes.n_fakes == 5
    assert alone.others == (0,) * 5


def test_bad_input_is_rejected() -> None:
    with pytest.raises(ParameterError, match="rows summing to 1"):
        pair_epsilon(np.array([[0.5, 0.6], [0.5, 0.5]]), victim=(0, 1), others=[], delta=0.1)
    with pytest.raises(ParameterError, match="cells"):
        histogram_distribution([np.full(8, 1 / 8)] * 40, 8)
    with pytest.raises(ParameterError, match="delta"):
        pair_epsilon(krr_matrix(1.0, 2), victim=(0, 1), others=[], delta=2.0)
