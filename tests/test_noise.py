"""Central and distributed noise samplers: laws checked against exact pmfs (seeded)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from protocols import ParameterError
from protocols._noise import (
    binomial_noise,
    discrete_laplace,
    distributed_geometric_shares,
    geometric_alpha,
    laplace,
    polya,
    polya_variance,
    symmetric_geometric,
    symmetric_geometric_variance,
)

N = 200_000


def _dlap_pmf(k: np.ndarray, alpha: float) -> np.ndarray:
    return np.asarray((1 - alpha) / (1 + alpha) * alpha ** np.abs(k), dtype=np.float64)


def _check_pmf(draws: np.ndarray, support: np.ndarray, pmf: np.ndarray) -> None:
    """Every cell's empirical frequency within 5 binomial standard errors of the exact pmf."""
    counts = np.array([(draws == k).sum() for k in support])
    expected = len(draws) * pmf
    se = np.sqrt(len(draws) * pmf * (1 - pmf))
    assert np.all(np.abs(counts - expected) <= 5 * se + 1), (counts, expected)


def _check_moments(draws: np.ndarray, mean: float, var: float) -> None:
    n = len(draws)
    se = math.sqrt(var / n)
    assert abs(draws.mean() - mean) <= 4 * se
    assert abs(draws.var() / var - 1) <= 0.15


@pytest.mark.parametrize("alpha", [0.2, math.exp(-0.5)])
def test_symmetric_geometric_matches_exact_pmf(alpha: float) -> None:
    z = symmetric_geometric(alpha, N, rng=np.random.default_rng(1))
    assert z.dtype == np.int64
    support = np.arange(-6, 7)
    _check_pmf(z, support, _dlap_pmf(support, alpha))
    _check_moments(z, 0.0, symmetric_geometric_variance(alpha))


def test_discrete_laplace_uses_alpha_from_epsilon_and_sensitivity() -> None:
    assert geometric_alpha(1.0, 2.0) == pytest.approx(math.exp(-0.5))
    z = discrete_laplace(1.0, N, sensitivity=2.0, rng=np.random.default_rng(2))
    _check_moments(z, 0.0, symmetric_geometric_variance(math.exp(-0.5)))
    assert isinstance(discrete_laplace(1.0, rng=np.random.default_rng(0)), int)


@pytest.mark.parametrize(("r", "alpha"), [(0.1, 0.6), (2.5, 0.3), (1.0, 0.5)])
def test_polya_matches_negative_binomial(r: float, alpha: float) -> None:
    x = polya(r, alpha, N, rng=np.random.default_rng(3))
    assert x.dtype == np.int64
    assert x.min() >= 0
    support = np.arange(0, 8)
    # scipy's nbinom(n, p) counts failures before n successes with success prob p = 1-α.
    _check_pmf(x, support, stats.nbinom.pmf(support, r, 1 - alpha))
    _check_moments(x, r * alpha / (1 - alpha), polya_variance(r, alpha))


@pytest.mark.parametrize("parties", [1, 7, 300])
def test_distributed_geometric_shares_sum_to_discrete_laplace(parties: int) -> None:
    alpha = math.exp(-1.0)
    reps = 20_000
    shares = distributed_geometric_shares(parties, alpha, reps, rng=np.random.default_rng(4))
    assert shares.shape == (reps, parties)
    assert shares.dtype == np.int64
    total = shares.sum(axis=1)
    support = np.arange(-5, 6)
    _check_pmf(total, support, _dlap_pmf(support, alpha))
    _check_moments(total, 0.0, symmetric_geometric_variance(alpha))
    # each share alone carries 1/n of the variance (so none is DP on its own for large n)
    per_share = shares.reshape(-1)
    assert abs(per_share.var() * parties / symmetric_geometric_variance(alpha) - 1) <= 0.15


def test_distributed_shares_scalar_shape() -> None:
    s = distributed_geometric_shares(5, 0.5, rng=np.random.default_rng(0))
    assert s.shape == (5,)


def test_binomial_noise_moments_and_centering() -> None:
    rng = np.random.default_rng(5)
    b = binomial_noise(100, 0.5, N, centered=True, rng=rng)
    _check_moments(b, 0.0, 25.0)
    raw = binomial_noise(30, 0.2, N, rng=rng)
    _check_moments(raw, 6.0, 30 * 0.2 * 0.8)
    with pytest.raises(ParameterError, match="integer mean"):
        binomial_noise(7, 0.5, centered=True, rng=rng)


def test_laplace_baseline_moments() -> None:
    z = laplace(2.0, N, rng=np.random.default_rng(6))
    _check_moments(z, 0.0, 8.0)


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda r: symmetric_geometric(1.0, rng=r), "alpha must lie in"),
        (lambda r: symmetric_geometric(0.0, rng=r), "alpha must lie in"),
        (lambda r: polya(0.0, 0.5, rng=r), "r must be"),
        (lambda r: polya(1.0, 1.5, rng=r), "alpha must lie in"),
        (lambda r: laplace(-1.0, rng=r), "scale must be"),
        (lambda r: binomial_noise(-1, rng=r), "trials must be"),
        (lambda r: binomial_noise(3, 1.5, rng=r), "p must lie in"),
        (lambda r: distributed_geometric_shares(0, 0.5, rng=r), "parties must be"),
        (lambda r: discrete_laplace(float("nan"), rng=r), "epsilon must be"),
        (lambda r: symmetric_geometric(0.5, -3, rng=r), "size must be"),
    ],
)
def test_bad_parameters_raise(call, match: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ParameterError, match=match):
        call(np.random.default_rng(0))
