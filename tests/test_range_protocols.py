"""PRRQ: range tree matrix mechanism on PRHR — exact decomposition, unbiasedness, variance.

Thresholds: means within 4 standard errors; the pooled variance of node z-scores within
±15 % (1600 z-scores: > 4 standard errors of the variance estimate); per-range variance
ratios within [0.65, 1.45] (200 repeats: ~3 standard errors).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import esa
import protocols
from protocols import PRRQ, ParameterError, ProtocolSpec
from protocols._prrq import range_coefficients, user_nodes


def _node_counts(x: np.ndarray, h: int) -> np.ndarray:
    nodes = user_nodes(x, h)
    return np.bincount(nodes[nodes >= 0], minlength=1 << h).astype(np.float64)


@pytest.mark.parametrize("d", [2, 3, 8, 13, 32])
def test_tree_coefficients_give_every_range_exactly(d: int) -> None:
    h = max(1, math.ceil(math.log2(d)))
    x = np.random.default_rng(d).integers(0, d, 400)
    y = _node_counts(x, h)
    lo, hi = np.triu_indices(d + 1)
    coef = range_coefficients(lo, hi, h)
    cum = np.concatenate([[0], np.cumsum(np.bincount(x, minlength=d))])
    assert np.array_equal(coef @ y, cum[hi] - cum[lo])
    # The matrix mechanism's promise: every range uses at most 2h node counts.
    assert np.abs(coef).sum(axis=1).max() <= 2 * h


def test_user_columns_have_at_most_delta_ones() -> None:
    h = 5
    nodes = user_nodes(np.arange(32), h)
    assert np.all(nodes[:, 0] == 0)  # the root counts everybody
    assert (nodes >= 0).sum(axis=1).max() == 1 + h  # value 0: a left child at every level
    assert (nodes >= 0).sum(axis=1).min() == 1  # value 31: only the root


def test_parameters_and_messages_per_user() -> None:
    proto = PRRQ(domain=16, epsilon=1.0, n=500, delta=1e-2)
    p = proto.params
    assert p.h == 4
    assert p.sensitivity == 5  # Δ = 1 + lb d
    assert p.tau == math.ceil(math.log2(500))
    assert p.rho == math.ceil(36 * 25 * math.log(math.e * 5 * 16 / (1.0 * 1e-2)))
    assert proto.messages_per_user == p.sensitivity + p.rho
    x = np.random.default_rng(0).integers(0, 16, 20)
    proto20 = PRRQ(domain=16, epsilon=1.0, n=20, delta=1e-2)
    msgs = proto20.randomize(x, rng=np.random.default_rng(1))
    assert msgs.shape[0] == 20 * proto20.messages_per_user  # padded: count is data-independent
    built = protocols.build_protocol(
        "prrq", ProtocolSpec(epsilon=1.0, delta=1e-2, n=500, domain=16)
    )
    assert isinstance(built, PRRQ)
    assert built.params == p


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"domain": 8, "epsilon": 1.5, "n": 100, "delta": 0.1}, "epsilon <= 1"),
        ({"domain": 1, "epsilon": 1.0, "n": 100, "delta": 0.1}, "domain"),
        ({"domain": 8, "epsilon": 1.0, "n": 1, "delta": 0.1}, "n must be"),
        ({"domain": 2**21, "epsilon": 1.0, "n": 100, "delta": 0.1}, "2\\^20"),
    ],
)
def test_invalid_parameters_refused(kwargs: dict[str, float], match: str) -> None:
    with pytest.raises(ParameterError, match=match):
        PRRQ(**kwargs)  # type: ignore[arg-type]


def test_invalid_range_refused() -> None:
    proto = PRRQ(domain=8, epsilon=1.0, n=16, delta=0.5)
    msgs = proto.randomize(np.zeros(16, dtype=np.int64), rng=np.random.default_rng(2))
    with pytest.raises(ParameterError, match="lo <= hi"):
        proto.range_counts(msgs, [5], [3])


def test_prrq_unbiased_nodes_and_ranges_with_stated_variance() -> None:
    n, d, reps = 16, 8, 200
    rng = np.random.default_rng(3)
    proto = PRRQ(domain=d, epsilon=1.0, n=n, delta=0.3)
    x = rng.integers(0, d, n)
    y_true = _node_counts(x, proto.params.h)
    lo = np.array([0, 0, 2, 3, 5])
    hi = np.array([8, 4, 7, 4, 8])
    cum = np.concatenate([[0], np.cumsum(proto.truth(x))])
    r_true = cum[hi] - cum[lo]
    K = n * int(proto.messages_per_user)
    q = 2.0**-proto.params.tau
    node_var = (K - y_true) * q / (1 - q)
    z_nodes, ranges = [], []
    for _ in range(reps):
        msgs = proto.randomize(x, rng=rng)
        y, _ = proto.node_estimates(msgs)
        z_nodes.append((y - y_true) / np.sqrt(node_var))
        ranges.append(range_coefficients(lo, hi, proto.params.h) @ y)
    z = np.concatenate(z_nodes)
    assert abs(z.mean()) < 4 / math.sqrt(z.size)
    assert 0.85 < z.var() < 1.15
    r = np.array(ranges)
    coef = range_coefficients(lo, hi, proto.params.h)
    r_var = (coef**2) @ node_var
    assert np.all(np.abs(r.mean(axis=0) - r_true) < 4 * np.sqrt(r_var / reps))
    ratio = r.var(axis=0) / r_var
    assert np.all((ratio > 0.65) & (ratio < 1.45)), ratio


def test_estimate_histogram_telescopes_to_ranges() -> None:
    n, d = 32, 8
    rng = np.random.default_rng(4)
    proto = PRRQ(domain=d, epsilon=1.0, n=n, delta=0.3)
    x = rng.integers(0, d, n)
    msgs = proto.randomize(x, rng=rng)
    hist = proto.estimate(msgs, n=n, n_fakes=0)
    est, std = proto.range_counts(msgs, [1, 0], [6, 8])
    assert est == pytest.approx([hist.values[1:6].sum(), hist.values.sum()])
    # Error within the stated std (5σ) for every bin and both ranges.
    assert np.all(np.abs(hist.values - proto.truth(x)) < 5 * hist.expected_std)
    truth = [((x >= 1) & (x < 6)).sum(), n]
    assert np.all(np.abs(est - truth) < 5 * std)


def test_fakes_and_garbage() -> None:
    proto = PRRQ(domain=8, epsilon=1.0, n=64, delta=0.3)
    rng = np.random.default_rng(5)
    x = rng.integers(0, 8, 64)
    fakes = proto.sample_fakes(5000, rng=rng)
    assert fakes.max() < 2**proto.params.tau  # uniform over the whole message space
    msgs = np.concatenate([proto.randomize(x, rng=rng), fakes])
    est = proto.estimate(msgs, n=64, n_fakes=5000)
    assert np.all(np.abs(est.values - proto.truth(x)) < 5 * est.expected_std)
    back, ok = proto.decode(proto.encode(fakes[:3]))
    assert ok.all()
    assert np.array_equal(back, fakes[:3])
    _, ok = proto.decode(np.full((2, proto.message_size), 0xFF, dtype=np.uint8))
    assert not ok.any()


def test_pipeline_onion_small_n() -> None:
    n, d = 8, 2
    proto = PRRQ(domain=d, epsilon=1.0, n=n, delta=0.9)
    x = np.array([0, 0, 0, 1, 1, 0, 1, 0])
    config = esa.PipelineConfig(shufflers=2, crypto="onion", workers=1)
    result = esa.run_pipeline(proto, x, config, rng=np.random.default_rng(6))
    assert result.hops[0].received == n * proto.messages_per_user
    assert result.hops[-1].invalid == 0
    z = (result.estimate.values - result.truth) / result.estimate.expected_std
    assert np.all(np.abs(z) < 5)
