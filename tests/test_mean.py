"""Mean estimators on [−1, 1]: unbiasedness, exact variance, support, and DCT's audit.

Thresholds (seeded): mean error within 4 standard errors of 0 over R = 1500 repeats;
empirical variance of the estimate within ±15 % of the closed form (√(2/R) ≈ 3.7 %).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from protocols import (
    DCT,
    MEAN_MECHANISMS,
    Duchi,
    Harmony,
    LaplaceMean,
    MeanMechanism,
    ParameterError,
    PiecewiseMechanism,
    audit_mechanism,
)

N = 300
REPEATS = 1500
VALUES = np.concatenate([[-1.0, 1.0, 0.0], np.random.default_rng(0).uniform(-1, 1, N - 3)])
ALL = [Duchi, PiecewiseMechanism, Harmony, LaplaceMean, DCT]


@pytest.mark.parametrize("cls", ALL, ids=lambda c: c.name)
@pytest.mark.parametrize("eps", [0.5, 3.0])
def test_unbiased_with_closed_form_variance(cls: type[MeanMechanism], eps: float) -> None:
    mech = cls(epsilon=eps)  # type: ignore[call-arg]
    rng = np.random.default_rng(17)
    reports = mech.randomize(np.tile(VALUES, REPEATS), rng=rng).reshape(REPEATS, N)
    est = reports.mean(axis=1)
    truth = VALUES.mean()
    var = mech.mean_variance(VALUES)
    assert abs(est.mean() - truth) <= 4 * math.sqrt(var / REPEATS)
    assert abs(est.var(ddof=1) / var - 1) <= 0.15
    # per-user variance is right too, at the extreme inputs where it differs most
    assert mech.estimate(reports[:, 0]) == pytest.approx(-1.0, abs=4 * math.sqrt(
        mech.variance([-1.0])[0] / REPEATS))  # fmt: skip


@pytest.mark.parametrize("cls", [Duchi, Harmony, PiecewiseMechanism, DCT], ids=lambda c: c.name)
def test_reports_stay_within_the_stated_bound(cls: type[MeanMechanism]) -> None:
    mech = cls(epsilon=1.0)  # type: ignore[call-arg]
    r = mech.randomize(np.linspace(-1, 1, 20_001), rng=np.random.default_rng(1))
    assert np.all(np.abs(r) <= mech.bound + 1e-12)


def test_two_point_mechanisms_output_plus_minus_b_with_duchis_probabilities() -> None:
    for cls in (Duchi, Harmony):
        mech = cls(epsilon=1.0)
        e = math.e
        b = (e + 1) / (e - 1)
        r = mech.randomize(np.full(100_000, 0.5), rng=np.random.default_rng(2))
        assert set(np.unique(r)) == {-b, b}
        p = 0.5 + 0.5 * (e - 1) / (2 * (e + 1))
        assert abs(np.mean(r > 0) - p) <= 4 * math.sqrt(p * (1 - p) / 100_000)


@pytest.mark.parametrize("t", [-1.0, 0.3, 1.0])
def test_pm_histogram_matches_its_density(t: float) -> None:
    mech = PiecewiseMechanism(epsilon=1.0)
    n = 200_000
    r = mech.randomize(np.full(n, t), rng=np.random.default_rng(3))
    edges = np.linspace(-mech.bound, mech.bound, 41)
    counts, _ = np.histogram(r, bins=edges)
    fine = np.linspace(-mech.bound, mech.bound, 40_001)
    dens = np.exp(mech.log_density(fine, t))
    # exact bin probabilities by integrating the piecewise-constant density finely
    cdf = np.concatenate([[0.0], np.cumsum((dens[1:] + dens[:-1]) / 2 * np.diff(fine))])
    probs = np.diff(np.interp(edges, fine, cdf))
    assert cdf[-1] == pytest.approx(1.0, abs=1e-3)
    se = np.sqrt(n * probs * (1 - probs))
    assert np.all(np.abs(counts - n * probs) <= 5 * se + 0.002 * n)


def test_pm_variance_is_lemma_1_of_wang_et_al() -> None:
    eps = 2.0
    h = math.exp(eps / 2)
    v = PiecewiseMechanism(epsilon=eps).variance([0.0, 1.0])
    assert v[0] == pytest.approx((h + 3) / (3 * (h - 1) ** 2))
    assert v[1] == pytest.approx(1 / (h - 1) + (h + 3) / (3 * (h - 1) ** 2))


@pytest.mark.parametrize("name", ["duchi", "pm", "harmony", "laplace"])
@pytest.mark.parametrize("eps", [0.25, 1.0, 4.0])
def test_ldp_mean_mechanisms_pass_the_audit_tightly(name: str, eps: float) -> None:
    res = audit_mechanism(name, eps)
    assert res.holds
    assert res.epsilon_measured <= eps * (1 + 1e-9)
    assert res.epsilon_measured == pytest.approx(eps, rel=1e-6)


@pytest.mark.parametrize("eps", [0.25, 1.0, 4.0])
def test_dct_is_not_ldp_its_support_moves_with_the_input(eps: float) -> None:
    mech = DCT(epsilon=eps)
    assert not mech.is_ldp
    res = audit_mechanism("dct", eps)
    assert not res.holds
    assert math.isinf(res.epsilon_measured)
    assert "NOT epsilon-LDP" in res.note
    # the same failure seen in samples: reports of v = +1 that v = −1 can never produce
    rng = np.random.default_rng(4)
    hi = mech.randomize(np.full(10_000, 1.0), rng=rng)
    lo_support = mech.support(-1.0)
    assert np.mean(hi > lo_support[1]) > 0.5
    assert math.isinf(-float(mech.log_density([hi.max()], -1.0)[0]))


def test_dct_reports_are_input_plus_uniform_noise() -> None:
    mech = DCT(epsilon=1.0)
    d = mech.half_width
    r = mech.randomize(np.zeros(200_000), rng=np.random.default_rng(5))
    # U = r/d should be Uniform[−1, 1]: check its deciles
    q = np.quantile(r / d, np.linspace(0.1, 0.9, 9))
    assert np.allclose(q, np.linspace(-0.8, 0.8, 9), atol=0.01)


@pytest.mark.parametrize("cls", ALL, ids=lambda c: c.name)
def test_inputs_outside_unit_interval_raise(cls: type[MeanMechanism]) -> None:
    mech = cls(epsilon=1.0)  # type: ignore[call-arg]
    with pytest.raises(ParameterError, match=r"\[-1, 1\], got 1.5"):
        mech.randomize([0.0, 1.5], rng=np.random.default_rng(0))
    with pytest.raises(ParameterError, match="nan"):
        mech.randomize([float("nan")], rng=np.random.default_rng(0))


@pytest.mark.parametrize("eps", [0.0, -1.0, float("inf"), 1000.0])
def test_bad_epsilon_raises(eps: float) -> None:
    for cls in MEAN_MECHANISMS.values():
        with pytest.raises(ParameterError, match="epsilon"):
            cls(epsilon=eps)  # type: ignore[call-arg]


def test_estimate_of_no_reports_raises() -> None:
    with pytest.raises(ParameterError, match="zero reports"):
        Duchi(epsilon=1.0).estimate([])
