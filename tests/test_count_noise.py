"""Counters' per-user error laws (``ShuffleProtocol.count_noise``) and the uniformity
testers' exact variance and worst-case variance bound built on them."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import stats

from protocols import ProtocolSpec, ShuffleProtocol, build_protocol
from protocols._base import CountNoise
from protocols._uniformity import GroupNoise, UniformityTester, _variance_bound
from tests.test_uniformity import _grouped

N = 2000


def _counter(name: str) -> ShuffleProtocol:
    return build_protocol(name, ProtocolSpec(epsilon=1.0, delta=1e-6, n=N, domain=2))


@pytest.mark.parametrize("name", ["cnt_sgm", "cnt_bn", "cnt_rr", "cnt_pure"])
def test_count_noise_variance_is_the_estimators_own(name: str) -> None:
    # The per-user law summed over n users gives exactly the variance the estimator states.
    proto = _counter(name)
    law = proto.count_noise
    assert isinstance(law, CountNoise)
    x = np.zeros(N, dtype=np.int64)
    x[:700] = 1
    rng = np.random.default_rng(0)
    std = proto.estimate(proto.randomize(x, rng=rng), n=N, n_fakes=0).expected_std[0]
    assert law.moments(N, 700)[0] == pytest.approx(std**2, rel=1e-9)


def test_count_noise_moments_against_independent_laws() -> None:
    # cnt_sgm: d = Bη/2, η ~ DLap(α), summed directly over a truncated support.
    sgm = _counter("cnt_sgm")
    a, lam = sgm.params.alpha, sgm.params.lam  # type: ignore[attr-defined]
    k = np.arange(-2000, 2001, dtype=np.float64)
    pk = (1 - a) / (1 + a) * a ** np.abs(k)
    law = sgm.count_noise
    assert law is not None
    assert law.variance == pytest.approx(lam * float(np.sum(pk * k**2)) / 4, rel=1e-12)
    assert law.fourth == pytest.approx(lam * float(np.sum(pk * k**4)) / 16, rel=1e-12)
    assert law.third == 0.0
    # cnt_bn: d = (P₁ − P₀)/2, a Skellam(μ/2, μ/2) halved.
    bn = _counter("cnt_bn")
    mu = bn.params.mu  # type: ignore[attr-defined]
    var, kurt = stats.skellam(mu / 2, mu / 2).stats(moments="vk")
    law = bn.count_noise
    assert law is not None
    assert law.variance == pytest.approx(float(var) / 4, rel=1e-12)
    assert law.fourth == pytest.approx((float(kurt) + 3) * float(var) ** 2 / 16, rel=1e-9)
    # cnt_rr: a user holding 0 sends 1 w.p. p = λ/2; its error (I − p)/(1 − λ).
    rr = _counter("cnt_rr")
    lam = rr.uniform_probability  # type: ignore[attr-defined]
    p = lam / 2
    law = rr.count_noise
    assert law is not None
    for got, r in ((law.variance, 2), (law.third, 3), (law.fourth, 4)):
        exact = (1 - p) * (-p) ** r + p * (1 - p) ** r
        assert got == pytest.approx(exact / (1 - lam) ** r, rel=1e-12)


def test_cnt_pure_count_noise_against_seeded_tallies() -> None:
    # 40 000 seeded tallies of 30 users (12 holding 1), drawn with the counter's own sampler:
    # the error's mean, variance, third and fourth moments within 4 standard errors (each
    # s.e. estimated from the sample of the corresponding power).
    proto = build_protocol("cnt_pure", ProtocolSpec(epsilon=1.0, delta=1e-6, n=30, domain=2))
    bit = proto.bit  # type: ignore[attr-defined]
    n, c, reps = 30, 12, 40_000
    x = np.tile(np.r_[np.ones(c, dtype=np.int64), np.zeros(n - c, dtype=np.int64)], reps)
    ones = bit.ones(x, rng=np.random.default_rng(7)).reshape(reps, n).sum(axis=1)
    err = np.array([bit.debias(int(o), n=n, received=n * bit.tau) for o in ones]) - c
    m2, m3, m4 = bit.count_noise.moments(n, c)
    for power, want in ((1, 0.0), (2, m2), (3, m3), (4, m4)):
        sample = err**power
        se = sample.std(ddof=1) / math.sqrt(reps)
        assert abs(sample.mean() - want) < 4 * se, power


def test_statistic_variance_is_exact_against_enumeration() -> None:
    # k = 6 into k' = 4 groups (sizes 2, 2, 1, 1), n = 7: enumerate every multinomial count
    # vector; the noise switched off so Z is the sampling statistic alone.
    t = UniformityTester(counter="cnt_bn", domain=6, epsilon=2.0, delta=1e-6, n=7, groups=4)
    t._noise = GroupNoise(0.0, 0.0)
    q = np.bincount(t.partition, minlength=4) / 6
    rng = np.random.default_rng(5)
    for _ in range(3):
        p = rng.dirichlet(np.ones(6))
        big_p = np.bincount(t.partition, weights=p, minlength=4)
        zs, ws = [], []
        for c in itertools.product(range(8), repeat=4):
            if sum(c) == 7:
                cc = np.array(c, dtype=np.float64)
                zs.append(np.sum(((cc - 7 * q) ** 2 - cc) / (7 * q)) + 1)
                ws.append(stats.multinomial.pmf(c, 7, big_p))
        z, w = np.array(zs), np.array(ws)
        mean = float(np.sum(w * z))
        assert t.statistic_moments(p, 7) == pytest.approx(
            (mean, float(np.sum(w * (z - mean) ** 2))), rel=1e-10
        )


@pytest.mark.parametrize("counter", ["cnt_bn", "cnt_rr", "cnt_sgm", "cnt_pure"])
def test_variance_bound_covers_the_exact_variance(counter: str) -> None:
    # For 600 seeded alternatives (Dirichlet with concentrations 0.05–20, plus point masses),
    # the exact Var[Z] never exceeds the bound at the same χ²; the bound is what the worst
    # type II error is computed from. k = 50 into k' = 7 unequal groups, n = 400.
    t = UniformityTester(counter=counter, domain=50, epsilon=2.0, delta=1e-6, n=400, groups=7)
    q = np.bincount(t.partition, minlength=7) / 50
    rng = np.random.default_rng(11)
    shapes = [rng.dirichlet(np.full(50, c)) for c in (0.05, 0.3, 1.0, 20.0) for _ in range(150)]
    shapes += list(np.eye(50)[:5])
    for p in shapes:
        big_p = np.bincount(t.partition, weights=p, minlength=7)
        chi2 = float(np.sum((big_p - q) ** 2 / q))
        _, var = t.statistic_moments(p, 400)
        assert var <= _variance_bound(400, 50, 7, t.noise, chi2) * (1 + 1e-12)


@pytest.mark.parametrize("counter", ["cnt_bn", "cnt_sgm"])
def test_ungrouped_worst_type_ii_bound_covers_every_alternative(counter: str) -> None:
    # The ungrouped tester's worst type II bound uses the distance itself (a spike can only
    # come on top of the spread part that makes TV ≥ α). At its stated n (k = 50, α = 0.25,
    # β = 1/3) it must cover the exact Chebyshev bound of every alternative at TV ≥ α:
    # 800 seeded Dirichlet ones moved to TV ∈ [α, 1.5α], and a spread one with a spike of
    # every size (the shape the bound's worst case has). Measured: the largest is 0.72×
    # (cnt_bn) and 0.86× (cnt_sgm) of the bound.
    k, alpha = 50, 0.25  # the α _grouped configures

    n = _grouped(counter, k, k, 1000, beta=1 / 3).min_samples
    t = _grouped(counter, k, k, n, beta=1 / 3)
    worst = t.error_bounds[1]
    assert worst <= 1 / 3
    u = np.full(k, 1 / k)
    rng = np.random.default_rng(3)
    alternatives = []
    for c in (0.05, 0.3, 1.0, 20.0):
        for _ in range(200):
            p = rng.dirichlet(np.full(k, c))
            tv = 0.5 * np.abs(p - u).sum()
            if tv >= alpha:
                alternatives.append(u + rng.uniform(alpha, min(1.5 * alpha, tv)) / tv * (p - u))
    spread = u.copy()
    spread[: k // 2] += 2 * alpha / k
    spread[k // 2 :] -= 2 * alpha / k
    for spike in np.linspace(0.0, 0.4, 81):
        p = spread.copy()
        p[k // 2] += spike
        p[k // 2 + 1 :] -= spike / (k - k // 2 - 1)
        if (p >= 0).all():
            alternatives.append(p)
    assert len(alternatives) > 500
    largest = max(t.type_ii_bound(p, n) for p in alternatives)
    assert 0.3 * worst < largest <= worst
