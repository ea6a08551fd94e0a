"""Attribute sampling (Wang et al. ICDE'19): unbiased, exact variance, ε split.

Thresholds (seeded): mean error within 4 standard errors over R = 1500 repeats; empirical
variance within ±15 % of the closed form.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from protocols import (
    KRR,
    OUE,
    Duchi,
    ParameterError,
    PiecewiseMechanism,
    SampledAttributes,
)
from protocols.ldp._multidim import default_sampled

REPEATS = 1500


def test_default_sampled_follows_algorithm_4() -> None:
    assert default_sampled(10, 1.0) == 1
    assert default_sampled(10, 5.0) == 2
    assert default_sampled(10, 100.0) == 10
    assert default_sampled(3, 9.0) == 3
    s = SampledAttributes(k=6, epsilon=6.0)
    assert s.sampled == 2
    assert s.epsilon_each * s.sampled == pytest.approx(6.0)
    assert s.scale == 3.0


@pytest.mark.parametrize("m", [1, 2, 5])
def test_sample_picks_m_distinct_uniform_attributes(m: int) -> None:
    s = SampledAttributes(k=5, epsilon=1.0, sampled=m)
    mask = s.sample(50_000, rng=np.random.default_rng(0))
    assert np.all(mask.sum(axis=1) == m)
    p = m / 5
    if m < 5:
        assert np.all(np.abs(mask.mean(axis=0) - p) <= 4 * math.sqrt(p * (1 - p) / 50_000))


@pytest.mark.parametrize(("mech", "eps", "m"), [(PiecewiseMechanism, 1.0, 0), (Duchi, 6.0, 2)])
def test_means_unbiased_with_exact_variance(mech, eps: float, m: int) -> None:  # type: ignore[no-untyped-def]
    k, n = 4, 200
    s = SampledAttributes(k=k, epsilon=eps, sampled=m)
    values = np.random.default_rng(1).uniform(-1, 1, size=(n, k))
    values[:, 0] = 1.0
    rng = np.random.default_rng(2)
    est = np.stack(
        [s.estimate_means(s.randomize_means(mech, values, rng=rng)) for _ in range(REPEATS)]
    )
    var = s.mean_variance(mech, values)
    err = est.mean(axis=0) - values.mean(axis=0)
    assert np.all(np.abs(err) <= 4 * np.sqrt(var / REPEATS))
    assert np.all(np.abs(est.var(axis=0, ddof=1) / var - 1) <= 0.15)


@pytest.mark.parametrize(("oracle_cls", "m"), [(KRR, 1), (OUE, 2)])
def test_frequencies_unbiased_with_exact_variance(oracle_cls, m: int) -> None:  # type: ignore[no-untyped-def]
    domains = [4, 6, 3]
    n = 300
    rng = np.random.default_rng(3)
    values = np.stack([rng.integers(0, d, size=n) for d in domains], axis=1)
    values[:150, 1] = 2  # a heavy value
    s = SampledAttributes(k=3, epsilon=2.0, sampled=m)

    def build(d: int, e: float):  # type: ignore[no-untyped-def]
        return oracle_cls(d=d, epsilon=e)

    runs = [
        s.estimate_frequencies(
            build, s.randomize_frequencies(build, values, domains, rng=rng), domains
        )
        for _ in range(REPEATS)
    ]
    for j, d in enumerate(domains):
        est = np.stack([r[j] for r in runs])
        truth = np.bincount(values[:, j], minlength=d)
        var = s.frequency_variance(build(d, s.epsilon_each), truth, n)
        assert np.all(np.abs(est.mean(axis=0) - truth) <= 4 * np.sqrt(var / REPEATS))
        assert np.all(np.abs(est.var(axis=0, ddof=1) / var - 1) <= 0.15)


def test_each_user_reports_only_its_sampled_attributes() -> None:
    s = SampledAttributes(k=5, epsilon=1.0)
    r = s.randomize_means(Duchi, np.zeros((1000, 5)), rng=np.random.default_rng(4))
    assert np.all((r != 0).sum(axis=1) == 1)
    e = math.exp(1.0)
    assert np.allclose(np.abs(r[r != 0]), 5 * (e + 1) / (e - 1))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"k": 0, "epsilon": 1.0}, "k must be"),
        ({"k": 3, "epsilon": -1.0}, "epsilon"),
        ({"k": 3, "epsilon": 1.0, "sampled": 4}, "sampled must be"),
    ],
)
def test_bad_parameters_raise(kwargs: dict[str, float], match: str) -> None:
    with pytest.raises(ParameterError, match=match):
        SampledAttributes(**kwargs)  # type: ignore[arg-type]


def test_bad_shapes_and_values_raise() -> None:
    s = SampledAttributes(k=2, epsilon=1.0)
    rng = np.random.default_rng(0)
    with pytest.raises(ParameterError, match="shape"):
        s.randomize_means(Duchi, np.zeros((3, 3)), rng=rng)
    with pytest.raises(ParameterError, match=r"\[-1, 1\]"):
        s.randomize_means(Duchi, np.full((3, 2), 2.0), rng=rng)
    with pytest.raises(ParameterError, match="0-based"):
        s.randomize_frequencies(
            lambda d, e: KRR(d=d, epsilon=e), np.array([[0, 5]]), [4, 4], rng=rng
        )


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"k": None, "epsilon": 1.0}, "k must be an integer >= 1, got None"),
        ({"k": float("nan"), "epsilon": 1.0}, "k must be an integer >= 1, got nan"),
        ({"k": 3, "epsilon": "1"}, "epsilon must be a number"),
        ({"k": 3, "epsilon": 1000.0}, "epsilon must be <= 700"),
        ({"k": 3, "epsilon": 1.0, "sampled": None}, r"sampled must be an integer in \[1, 3\]"),
        ({"k": 3, "epsilon": 1.0, "sampled": 2.5}, r"sampled must be an integer in \[1, 3\]"),
        ({"k": 3, "epsilon": 1.0, "sampled": True}, r"sampled must be an integer in \[1, 3\]"),
        ({"k": 1000, "epsilon": 1e-4, "sampled": 1000}, "epsilon/sampled = 0.0001/1000"),
    ],
)
def test_bad_parameters_raise_a_parameter_error_at_construction(
    kwargs: dict[str, object], match: str
) -> None:
    """Before, None/NaN raised TypeError/ValueError, a string ε was stored as a string, and
    ε > 700 or ε/m < 1e-6 were accepted here and refused only by the mechanism later."""
    with pytest.raises(ParameterError, match=match):
        SampledAttributes(**kwargs)  # type: ignore[arg-type]


def test_integral_floats_are_stored_as_ints() -> None:
    """k = 4.0 and sampled = 2.0 used to stay floats and fail inside np.ones / slicing."""
    s = SampledAttributes(k=4.0, epsilon=2.0, sampled=2.0)  # type: ignore[arg-type]
    assert (s.k, s.sampled) == (4, 2)
    assert type(s.k) is int
    assert type(s.sampled) is int
    r = s.randomize_means(Duchi, np.zeros((10, 4)), rng=np.random.default_rng(0))
    assert np.all((r != 0).sum(axis=1) == 2)


def test_estimate_means_of_no_users_raises() -> None:
    """Like MeanMechanism.estimate; before, numpy warned 'Mean of empty slice' (an error
    under the test settings) and returned NaN."""
    s = SampledAttributes(k=2, epsilon=1.0)
    with pytest.raises(ParameterError, match="zero users"):
        s.estimate_means(np.zeros((0, 2)))
    with pytest.raises(ParameterError, match=r"shape \(n, 2\)"):
        s.estimate_means(np.zeros((3, 3)))
