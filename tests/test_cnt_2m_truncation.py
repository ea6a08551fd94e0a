"""Cnt_2M reports 0 when c* ≤ n (the zero-sum property); its stated std must then cover the
error that truncation makes, not only the binomial noise."""

from __future__ import annotations

import math

import numpy as np

from protocols import Cnt2M


def test_stated_std_covers_a_truncated_count() -> None:
    # Σx = 150 ≪ nγ = 50 ln(2/δ)/ε² ≈ 725: usually truncated to 0 (error −150). Over 200 runs
    # the measured RMSE lies within [0.5, 1.25] × the root mean stated variance.
    n, reps = 20_000, 200
    proto = Cnt2M(epsilon=1.0, delta=1e-6, n=n)
    x = np.zeros(n, dtype=np.int64)
    x[:150] = 1
    rng = np.random.default_rng(31)
    sq, var, truncated = 0.0, 0.0, 0
    for _ in range(reps):
        est = proto.estimate(proto.randomize(x, rng=rng), n=n, n_fakes=0)
        truncated += est.extra["truncated"]
        sq += float(est.values[0] - 150) ** 2
        var += float(est.expected_std[0]) ** 2
    assert truncated > reps // 2
    assert 0.5 <= math.sqrt(sq / var) <= 1.25


def test_stated_std_is_the_noise_above_the_threshold() -> None:
    n = 20_000
    proto = Cnt2M(epsilon=1.0, delta=1e-6, n=n)
    x = np.ones(n, dtype=np.int64)  # c* ≈ n + pn > n: never truncated
    est = proto.estimate(proto.randomize(x, rng=np.random.default_rng(32)), n=n, n_fakes=0)
    p = proto.params.p
    assert not est.extra["truncated"]
    assert est.expected_std[0] == math.sqrt(n * p * (1 - p))
