"""Counting protocols Cnt_2M, Cnt_BN, Cnt_SGM: estimators, variances, privacy, codecs.

Thresholds: a mean error is "unbiased" when within 4 standard errors of 0 over seeded
repeats; an empirical variance matches its closed form within ±20 % with ≥ 600 repeats
(the standard error of a variance estimate is ≈ √(2/R) ≈ 6 %, so the margin is > 3 SE).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from scipy import stats
from scipy.special import logsumexp

import protocols._cnt_pure as cnt_pure_module
from protocols import (
    BoundNotApplicable,
    Cnt2M,
    CntBN,
    CntPURE,
    CntRR,
    CntSGM,
    ParameterError,
    ProtocolSpec,
    build_protocol,
)
from protocols._cnt_pure import (
    MIX_SCALE,
    PureBitCounter,
    local_lambda,
    noise_law,
    pure_central_epsilon,
    pure_limit_epsilon,
    user_laws,
)

REPEATS = 600


def _bits(n: int, ones: int, seed: int = 0) -> np.ndarray:
    x = np.zeros(n, dtype=np.int64)
    x[np.random.default_rng(seed).choice(n, ones, replace=False)] = 1
    return x


def _run(protocol, x, rng, *, n_fakes=0):
    msgs = protocol.randomize(x, rng=rng)
    if n_fakes:
        msgs = np.concatenate([msgs, protocol.sample_fakes(n_fakes, rng=rng)])
    rows = protocol.encode(msgs)
    dec, ok = protocol.decode(rows)
    assert ok.all()
    return protocol.estimate(dec[ok], n=x.size, n_fakes=n_fakes).values[0]


def _binomial_shift_delta(trials: int, q: float, epsilon: float) -> float:
    """Exact hockey-stick δ(ε) between B and B + 1, B ~ Bin(trials, q), both directions."""
    k = np.arange(trials + 2)
    p0 = stats.binom.pmf(k, trials, q)  # law of B
    p1 = stats.binom.pmf(k - 1, trials, q)  # law of B + 1
    e = math.exp(epsilon)
    return float(max(np.maximum(p0 - e * p1, 0).sum(), np.maximum(p1 - e * p0, 0).sum()))


# --- Cnt_2M ----------------------------------------------------------------------------


def test_cnt_2m_parameters_follow_the_paper():
    p = Cnt2M(epsilon=0.5, delta=1e-6, n=100_000)
    assert p.params.p == pytest.approx(1 - 50 * math.log(2e6) / (0.25 * 100_000))
    assert p.messages_per_user == pytest.approx(1 + p.params.p)
    assert p.max_messages_per_user == 2
    assert math.isinf(p.privacy.epsilon_local)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"epsilon": 1.5, "delta": 1e-6, "n": 10**6}, "epsilon <= 1"),
        ({"epsilon": 1.0, "delta": 1e-6, "n": 1000}, "n >= 100 ln"),
        ({"epsilon": 1.0, "delta": 0.0, "n": 10**6}, "delta"),
        ({"epsilon": -1.0, "delta": 1e-6, "n": 10**6}, "epsilon"),
    ],
)
def test_cnt_2m_refuses_outside_validity(kwargs, match):
    with pytest.raises(ParameterError, match=match):
        Cnt2M(**kwargs)


def test_cnt_2m_all_zero_input_gives_exactly_zero():
    p = Cnt2M(epsilon=1.0, delta=1e-6, n=5000)
    rng = np.random.default_rng(1)
    for _ in range(20):
        assert _run(p, np.zeros(5000, dtype=np.int64), rng) == 0.0


def test_cnt_2m_unbiased_above_truncation_with_binomial_variance():
    n, ones = 20_000, 6_000
    p = Cnt2M(epsilon=1.0, delta=1e-6, n=n)
    x = _bits(n, ones)
    rng = np.random.default_rng(2)
    err = np.array([_run(p, x, rng) - ones for _ in range(REPEATS)])
    var = n * p.params.p * (1 - p.params.p)
    assert abs(err.mean()) < 4 * math.sqrt(var / REPEATS)
    assert 0.8 < err.var() / var < 1.2


def test_cnt_2m_error_bound_holds():
    n = 20_000
    p = Cnt2M(epsilon=1.0, delta=1e-6, n=n)
    bound = p.error_bound(1e-3)
    rng = np.random.default_rng(3)
    for ones in (0, 50, 500, 5_000):  # includes counts swallowed by the truncation
        x = _bits(n, ones, seed=ones)
        errs = [abs(_run(p, x, rng) - ones) for _ in range(50)]
        assert max(errs) <= bound


def test_cnt_2m_binomial_noise_is_exactly_epsilon_delta_private():
    # The shuffled count is Σx + n − Bin(n, 1−p): exact δ(ε) of a unit shift ≤ δ.
    for eps, delta, n in [(1.0, 1e-3, 800), (0.5, 1e-4, 4000), (1.0, 1e-6, 2000)]:
        p = Cnt2M(epsilon=eps, delta=delta, n=n)
        assert _binomial_shift_delta(n, 1 - p.params.p, eps) <= delta


def test_cnt_2m_messages_and_fakes():
    n = 20_000
    p = Cnt2M(epsilon=1.0, delta=1e-6, n=n)
    x = _bits(n, 5_000)
    rng = np.random.default_rng(4)
    counts = [p.randomize(x, rng=rng).size for _ in range(50)]
    expected = x.sum() + n * p.params.p
    assert abs(np.mean(counts) - expected) < 4 * math.sqrt(n * p.params.p * (1 - p.params.p) / 50)
    assert np.all(p.sample_fakes(10, rng=rng) == 1)  # the message space is {"1"}
    errs = [_run(p, x, rng, n_fakes=777) - 5_000 for _ in range(200)]
    assert abs(np.mean(errs)) < 4 * math.sqrt(n * p.params.p * (1 - p.params.p) / 200)


# --- Cnt_BN ----------------------------------------------------------------------------


# Cnt_BN's calibration, unbiasedness, variance, messages and refusals are tested in
# tests/test_cnt_bn_poisson.py (Poisson noise, exact δ); only the fakes test stays here.


def test_cnt_bn_fakes_are_fair_bits_and_need_no_correction():
    n, ones = 2_000, 700
    p = CntBN(epsilon=1.0, delta=1e-6, n=n)
    rng = np.random.default_rng(6)
    f = p.sample_fakes(40_000, rng=rng)
    assert set(np.unique(f)) == {0, 1}
    assert abs(f.mean() - 0.5) < 4 * math.sqrt(0.25 / f.size)
    x = _bits(n, ones)
    err = np.array([_run(p, x, rng, n_fakes=3000) - ones for _ in range(300)])
    assert abs(err.mean()) < 4 * math.sqrt(p.variance(n=n, n_fakes=3000) / 300)


# --- Cnt_SGM ---------------------------------------------------------------------------


def test_cnt_sgm_parameters_from_survey_formula():
    p = CntSGM.from_central(epsilon_central=0.9, n=10**6, gamma=0.5)
    eps = 0.5 * 0.9 / 3
    assert p.params.epsilon == pytest.approx(eps)
    assert p.params.lam == pytest.approx(2 * (math.exp(eps) + 1) / (math.expm1(eps) ** 2 * 10**6))
    assert p.claimed_privacy.epsilon_central == pytest.approx(0.9)
    # The reported guarantee is the provable local one, never below the survey's claim here.
    assert p.privacy.epsilon_central >= p.claimed_privacy.epsilon_central
    assert p.privacy.delta == 0.0


def test_cnt_sgm_unbiased_with_exact_variance_and_message_count():
    n, ones = 5_000, 1_200
    p = CntSGM(epsilon=0.5, n=n)
    x = _bits(n, ones)
    rng = np.random.default_rng(7)
    sizes, errs = [], []
    for _ in range(REPEATS):
        m = p.randomize(x, rng=rng)
        sizes.append(m.size)
        errs.append(p.estimate(m, n=n, n_fakes=0).values[0] - ones)
    err = np.array(errs)
    var = p.variance(n=n)
    assert abs(err.mean()) < 4 * math.sqrt(var / REPEATS)
    assert 0.8 < err.var() / var < 1.2
    # E|y| closed form; per-run message count has variance ≤ n λ E|1+η|² (loose).
    sd = math.sqrt(n * p.params.lam * 20 / REPEATS)
    assert abs(np.mean(sizes) / n - p.messages_per_user) * n < 4 * sd + 1


def test_cnt_sgm_fakes_uniform_pm1_and_unbiased():
    n, ones = 5_000, 1_200
    p = CntSGM(epsilon=0.5, n=n)
    rng = np.random.default_rng(8)
    f = p.sample_fakes(40_000, rng=rng)
    assert set(np.unique(f)) == {-1, 1}
    assert abs(f.mean()) < 4 / math.sqrt(f.size)
    x = _bits(n, ones)
    err = np.array([_run(p, x, rng, n_fakes=2000) - ones for _ in range(300)])
    assert abs(err.mean()) < 4 * math.sqrt(p.variance(n=n, n_fakes=2000) / 300)


def _sgm_view(signs, lam, alpha, Y, G):
    """Exact law of (#(+1), #(−1)) over a G×G grid for users with base values ``signs``."""
    ks = np.arange(-Y, Y + 1)
    sg = (1 - alpha) / (1 + alpha) * alpha ** np.abs(ks)
    grid = np.zeros((G, G))
    grid[0, 0] = 1.0
    for s in signs:
        law: dict[int, float] = {}
        for y, w in zip(s + ks, lam * sg, strict=True):
            law[int(y)] = law.get(int(y), 0.0) + w
        law[s] = law.get(s, 0.0) + (1 - lam)
        new = np.zeros_like(grid)
        for y, w in law.items():
            if y >= 0:
                new[y:, :] += w * grid[: G - y, :]
            else:
                new[:, -y:] += w * grid[:, : G + y]
        grid = new
    return grid


def test_cnt_sgm_reported_bound_is_valid_and_survey_claim_is_refuted_exactly():
    # Exact shuffled view for n = 40 honest users, paper ε = 1 (λ = 0.063 < 1): direct
    # convolution of positive numbers keeps relative precision even for tiny cells.
    n = 40
    p = CntSGM(epsilon=1.0, n=n)
    lam, alpha = p.params.lam, p.params.alpha
    Y = 45
    G = n + 2 * Y + 4
    others = [-1] * (n - 1)
    # Cells with #(+1) <= Y and #(−1) <= Y get no contribution from a truncated |y| > Y.
    g0 = _sgm_view([-1, *others], lam, alpha, Y, G)[: Y + 1, : Y + 1]
    g1 = _sgm_view([1, *others], lam, alpha, Y, G)[: Y + 1, : Y + 1]
    ok = (g0 > 1e-200) & (g1 > 1e-200)
    exact = float(np.max(np.abs(np.log(g0[ok]) - np.log(g1[ok]))))
    assert exact <= p.privacy.epsilon_central + 1e-9
    assert exact > p.claimed_privacy.epsilon_central  # 3ε/γ = 3 does not hold here
    # The closed-form lower bound is the exact ratio of the event "no +1 message".
    full0 = _sgm_view([-1, *others], lam, alpha, Y, G)
    full1 = _sgm_view([1, *others], lam, alpha, Y, G)
    no_plus = math.log(full0[0, :].sum() / full1[0, :].sum())
    assert p.no_plus_epsilon == pytest.approx(no_plus, rel=1e-9)
    assert p.no_plus_epsilon <= exact + 1e-9


def test_cnt_sgm_closed_form_lower_bound_refutes_the_claim_at_every_scale():
    for n in (10_000, 1_000_000):
        # the unary encoding, whose messages the survey's claim is about (the default is
        # Split-Mix, which proves the target)
        p = build_protocol("cnt_sgm", ProtocolSpec(1.0, 1e-6, n, options={"encoding": "unary"}))
        assert p.claimed_privacy.epsilon_central == pytest.approx(1.0)
        assert 1.0 < p.no_plus_epsilon <= p.privacy.epsilon_central
        got = p.honest_users_bound(n - 1)
        assert got is not None
        assert got.epsilon_upper == p.privacy.epsilon_central
        low = p.honest_users_lower(n - 1, fakes=0, delta=1e-6)
        assert low is not None
        assert 1.0 < low[0] <= p.privacy.epsilon_central  # the target 1 fails at δ too


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"epsilon": 0.0, "n": 100}, "epsilon"),
        ({"epsilon": 1.0, "n": 100, "gamma": 0.0}, "gamma"),
        ({"epsilon": 1.0, "n": 4, "gamma": 0.2}, "honest user"),
    ],
)
def test_cnt_sgm_refuses_bad_parameters(kwargs, match):
    with pytest.raises(ParameterError, match=match):
        CntSGM(**kwargs)


# --- codecs ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "options"),
    [("cnt_2m", {}), ("cnt_bn", {}), ("cnt_sgm", {"encoding": "unary"}), ("cnt_pure", {})],
)
def test_codec_round_trip_and_garbage_rows(name, options):
    # one-byte messages (cnt_sgm's Split-Mix shares are values of Z_q: tests/test_cnt_sgm_sum.py)
    p = build_protocol(name, ProtocolSpec(1.0, 1e-6, 20_000, options=options))
    rng = np.random.default_rng(9)
    msgs = p.randomize(_bits(20_000, 3_000), rng=rng)
    dec, ok = p.decode(p.encode(msgs))
    assert ok.all()
    np.testing.assert_array_equal(dec, msgs)
    garbage = np.arange(256, dtype=np.uint8).reshape(-1, 1)
    _, ok = p.decode(garbage)
    assert 0 < ok.sum() <= 2  # only the protocol's one or two message bytes are valid


# --- Cnt_PURE --------------------------------------------------------------------------


def test_cnt_pure_noise_law_and_local_epsilon():
    p = CntPURE(epsilon=0.7, n=5_000)
    b = p.bit
    assert b.tau == 2 * math.ceil(math.log2(5_000) / 0.7) + 1  # O_ε(log n): 2⌈log₂ n / ε⌉ + 1
    w = np.asarray(b.omega)
    assert w.sum() == pytest.approx(1.0)
    np.testing.assert_allclose(w, w[::-1])  # symmetric about τ/2, so E z = τ/2
    # Exact local likelihood ratio of the number of ones under x = 0 and x = 1.
    q0 = b.lam * w
    q1 = b.lam * w.copy()
    q0[b.m] += 1 - b.lam
    q1[b.m + 1] += 1 - b.lam
    assert np.max(np.abs(np.log(q0) - np.log(q1))) == pytest.approx(b.epsilon_local)
    assert p.privacy.epsilon_local == pytest.approx(b.epsilon_local)
    # The central ε is computed for all ⌈(n − 1)/2⌉ same-bit users, so λ is far below the
    # local calibration's.
    assert b.certified_users == 2_500
    assert b.epsilon_local > 3 * 0.7
    assert p.privacy.epsilon_central == 0.7
    assert p.privacy.delta == 0.0
    assert "cnt_pure_exact_central[2500" in p.privacy.bound


# --- Cnt_PURE's exact central accountant ----------------------------------------------


def _log_conv(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Log-space convolution, written out directly (no FFT, no tilting)."""
    out = np.full((b.size, a.size + b.size - 1), -np.inf)
    for j in range(b.size):
        out[j, j : j + a.size] = a + b[j]
    return logsumexp(out, axis=0)


def _direct_epsilon(lp0: np.ndarray, lp1: np.ndarray, zeros: int, ones: int) -> float:
    """Exact pure ε of user 1's bit when the others are ``zeros`` users holding 0 and
    ``ones`` holding 1, by sequential log-space convolution."""
    s = np.zeros(1)
    for lp in [lp0] * zeros + [lp1] * ones:
        s = _log_conv(s, lp)
    return float(np.max(np.abs(_log_conv(s, lp0) - _log_conv(s, lp1))))


@pytest.mark.parametrize(
    ("eps", "tau", "others", "lam"),
    [
        (1.0, 9, 50, 0.08),
        (1.0, 21, 200, 0.08),
        (0.5, 21, 300, 0.1),
        (2.0, 15, 300, 0.01),
        # large τ (windows dominated by Bernstein's τ term)
        (0.2, 101, 30, 0.05),
        (1.0, 61, 100, 0.01),
    ],
)
def test_pure_central_epsilon_matches_direct_log_space_convolution(eps, tau, others, lam):
    alpha = math.exp(-eps)
    p0, p1 = user_laws(lam, tau, alpha)
    direct = _direct_epsilon(np.log(p0), np.log(p1), others, 0)
    tilted = pure_central_epsilon(lam=lam, tau=tau, alpha=alpha, others=others)
    # FFT round-off at a value 10⁻⁷ of its tilt's peak: ≲ 10⁻⁷ relative, under the 10⁻⁶ slack
    assert tilted == pytest.approx(direct, abs=1e-7)


def _mixed_law_by_hand(tau: int, eps: float, weight: float, scale: float) -> np.ndarray:
    """ω = w·clip(m + B + η) + (1 − w)·clip(m + B + S·K), written out from scipy's pmfs:
    η ~ DLap(e^{−ε/Δ}) (scipy's dlaplace), K ~ LogSeries(e^{−ε}) (scipy's logser), S = ±1."""
    from scipy.stats import dlaplace, logser

    m = (tau - 1) // 2
    reach = np.arange(-40 * tau, 40 * tau + 1)
    out = np.zeros(tau + 1)
    for b in (0, 1):
        o = np.clip(m + b + reach, 0, tau)
        np.add.at(out, o, 0.5 * weight * dlaplace.pmf(reach, eps / scale))
        k = np.arange(1, 40 * tau + 1)
        for sign in (-1, 1):
            o = np.clip(m + b + sign * k, 0, tau)
            np.add.at(out, o, 0.25 * (1 - weight) * logser.pmf(k, math.exp(-eps)))
    return out / out.sum()


@pytest.mark.parametrize(
    ("tau", "eps", "weight"), [(41, 1.0, 0.1), (9, 0.5, 0.003), (137, 1.0, 0.01), (29, 3.0, 0.3)]
)
def test_noise_law_mixture_matches_scipy_pmfs(tau, eps, weight):
    law = noise_law(tau, eps, scale=MIX_SCALE, weight=weight)
    np.testing.assert_allclose(law, _mixed_law_by_hand(tau, eps, weight, MIX_SCALE), rtol=1e-9)
    np.testing.assert_array_equal(law, law[::-1])  # the mirror the reduction needs
    assert law.min() > 0.0  # full support
    # w = 1 is the truncated DLap alone.
    np.testing.assert_allclose(
        noise_law(tau, eps, scale=1.5), _mixed_law_by_hand(tau, eps, 1.0, 1.5), rtol=1e-9
    )


def test_noise_law_and_user_laws_refuse_malformed_input():
    with pytest.raises(ParameterError, match="weight"):
        noise_law(41, 1.0, weight=0.0)
    with pytest.raises(ParameterError, match="scale"):
        noise_law(41, 1.0, scale=0.5)
    with pytest.raises(ParameterError, match="exactly one"):
        user_laws(0.1, 5, 0.5, omega=np.full(6, 1 / 6))
    with pytest.raises(ParameterError, match="exactly one"):
        pure_central_epsilon(lam=0.1, tau=5, others=3)
    with pytest.raises(ParameterError, match="symmetric"):
        user_laws(0.1, 5, omega=[0.5, 0.1, 0.1, 0.1, 0.1, 0.1])
    with pytest.raises(ParameterError, match="length"):
        user_laws(0.1, 5, omega=[0.25] * 4)


@pytest.mark.parametrize(
    ("eps", "tau", "others", "lam", "weight"),
    [(1.0, 21, 200, 0.02, 0.1), (0.5, 15, 300, 0.05, 0.003), (2.0, 31, 100, 0.01, 0.03)],
)
def test_pure_central_epsilon_of_a_mixed_law_matches_direct_convolution(
    eps, tau, others, lam, weight
):
    law = noise_law(tau, eps, weight=weight)
    p0, p1 = user_laws(lam, tau, omega=law)
    direct = _direct_epsilon(np.log(p0), np.log(p1), others, 0)
    assert pure_central_epsilon(lam=lam, tau=tau, omega=law, others=others) == pytest.approx(
        direct, abs=1e-7
    )


def test_pure_central_epsilon_of_a_mixed_law_bounds_every_dataset():
    """The reduction holds for any ω symmetric about τ/2: the mixed law too."""
    eps, tau, lam, n = 1.0, 9, 0.2, 13
    law = noise_law(tau, eps, weight=0.1)
    p0, p1 = user_laws(lam, tau, omega=law)
    np.testing.assert_allclose(p1, p0[::-1])
    bound = pure_central_epsilon(lam=lam, tau=tau, omega=law, others=(n - 1 + 1) // 2)
    exact = [_direct_epsilon(np.log(p0), np.log(p1), n - 1 - j, j) for j in range(n)]
    assert max(exact) <= bound + 1e-9


def test_cnt_pure_mixed_noise_law_beats_the_truncated_dlap():
    """At n = 10⁴, ε = 1 (τ = 29) the calibration picks a mixed ω (w < 1): its certified
    λ leaves a std of ≈ 3.2 against ≈ 4.8 with the truncated DLap alone (Δ = 1.5)."""
    n = 10_000
    b = CntPURE(epsilon=1.0, n=n).bit
    dlap = PureBitCounter.derive(epsilon=1.0, tau=b.tau, honest_users=n, weights=())
    assert b.weight < 1.0
    assert dlap.weight == 1.0
    assert b.epsilon_certified <= 1.0
    again = pure_central_epsilon(lam=b.lam, tau=b.tau, omega=b.omega, others=b.certified_users)
    assert again == pytest.approx(b.epsilon_certified, abs=1e-12)
    std = math.sqrt(b.variance(n=n, count=n / 2, fakes=0))
    std_dlap = math.sqrt(dlap.variance(n=n, count=n / 2, fakes=0))
    assert std < 0.75 * std_dlap
    assert 2.5 < std < 4.0


def test_pure_central_epsilon_round_off_is_far_below_the_slack(monkeypatch):
    """FFT values are trusted down to _TRUST of their tilt's peak; trusting only values 100×
    larger moves the computed ε by far less than the calibration's slack (10⁻⁶)."""
    kw = {"lam": 4 / 4096, "tau": 41, "alpha": math.exp(-0.5), "others": 4096}
    base = pure_central_epsilon(**kw)
    monkeypatch.setattr(cnt_pure_module, "_TRUST", cnt_pure_module._TRUST * 100)
    assert abs(pure_central_epsilon(**kw) - base) < 1e-8


def test_pure_central_epsilon_bounds_every_dataset():
    """The reduction: the same-bit half of the others bounds every dataset of n users."""
    eps, tau, lam, n = 1.0, 7, 0.3, 13
    alpha = math.exp(-eps)
    p0, p1 = user_laws(lam, tau, alpha)
    lp0, lp1 = np.log(p0), np.log(p1)
    np.testing.assert_allclose(p1, p0[::-1])  # the reflection o -> τ − o swaps the laws
    bound = pure_central_epsilon(lam=lam, tau=tau, alpha=alpha, others=(n - 1 + 1) // 2)
    exact = [_direct_epsilon(lp0, lp1, n - 1 - j, j) for j in range(n)]
    assert max(exact) <= bound + 1e-9
    # All others holding 0 is exactly the accountant's case.
    full = pure_central_epsilon(lam=lam, tau=tau, alpha=alpha, others=n - 1)
    assert exact[0] == pytest.approx(full, abs=1e-9)
    assert full < bound  # more users, smaller ε


def test_pure_central_epsilon_decreases_to_its_large_crowd_limit():
    eps, tau, lam = 1.0, 21, 0.004
    alpha = math.exp(-eps)
    limit = pure_limit_epsilon(lam=lam, tau=tau, alpha=alpha)
    values = [
        pure_central_epsilon(lam=lam, tau=tau, alpha=alpha, others=k) for k in (64, 256, 1024)
    ]
    assert values[0] > values[1] > values[2] >= limit - 1e-9
    assert values[2] - limit < 2e-3


@pytest.mark.parametrize(
    ("eps", "n", "step"), [(0.5, 300, 0.02), (2.0, 501, 0.02), (1.0, 2_000, 0.1), (2.0, 1_500, 0.1)]
)
def test_cnt_pure_calibration_certifies_its_target_and_is_near_minimal(eps, n, step):
    """Up to the pilot crowd (256 same-bit users) every scale is bisected on a 2 % grid in
    ln λ; a larger crowd whose evaluation is cheap is refined in steps of 10 %."""
    b = CntPURE(epsilon=eps, n=n).bit
    assert b.certified_users == (n - 1 + 1) // 2
    assert b.alpha == pytest.approx(math.exp(-eps / b.scale))
    np.testing.assert_array_equal(b.omega, noise_law(b.tau, eps, scale=b.scale, weight=b.weight))
    again = pure_central_epsilon(lam=b.lam, tau=b.tau, omega=b.omega, others=b.certified_users)
    assert again == pytest.approx(b.epsilon_certified, abs=1e-12)
    assert again <= eps
    smaller = pure_central_epsilon(
        lam=b.lam * math.exp(-1.5 * step), tau=b.tau, omega=b.omega, others=b.certified_users
    )
    assert smaller > eps - 1e-6  # λ is the smallest certified one, to the step
    assert b.lam < local_lambda(eps, b.tau, b.scale, b.weight)


@pytest.mark.parametrize(("eps", "n"), [(1.0, 10_000), (0.5, 10_000), (2.0, 40_000)])
def test_cnt_pure_large_crowd_is_certified_at_its_full_size(eps, n):
    """Beyond the pilot crowd λ is predicted from λ·N and certified for the whole crowd:
    the certificate holds, λ sits within 2× of the smallest certified one, and the noise
    variance it leaves is below the pilot crowd's calibration."""
    b = CntPURE(epsilon=eps, n=n).bit
    others = (n - 1 + 1) // 2
    assert b.certified_users == others
    again = pure_central_epsilon(lam=b.lam, tau=b.tau, omega=b.omega, others=others)
    assert again == pytest.approx(b.epsilon_certified, abs=1e-12)
    assert again <= eps
    half = pure_central_epsilon(lam=b.lam / 2, tau=b.tau, omega=b.omega, others=others)
    assert half > eps
    # The pilot crowd's calibration (the best over every scale) leaves more noise.
    pilot = PureBitCounter.derive(epsilon=eps, tau=b.tau, honest_users=2 * 1_024 + 1)
    assert pilot.certified_users == 1_024
    assert b.variance(n=n, count=n / 2, fakes=0) < pilot.variance(n=n, count=n / 2, fakes=0)


def test_cnt_pure_keeps_the_pilot_certificate_when_the_crowd_cannot_lower_lambda():
    """τ = 3 bits leave ω no room to spread: no λ below the pilot crowd's is certified for
    the full crowd, so the pilot's (valid for every larger crowd) is kept."""
    b = CntPURE(epsilon=1.0, n=10_000, messages=3).bit
    assert b.certified_users == 256
    assert b.epsilon_certified <= 1.0
    full = pure_central_epsilon(lam=b.lam, tau=3, omega=b.omega, others=5_000)
    assert full <= b.epsilon_certified  # more users, smaller ε (module doc)


def test_cnt_pure_audit_reuses_the_calibration_certificate():
    """With every other user honest the audit's crowd is the calibration's: same number."""
    p = CntPURE(epsilon=1.0, n=3_001)
    b = p.bit
    got = p.honest_users_bound(3_000)
    assert got is not None
    assert b.certified_users == 1_500
    assert got.epsilon_upper == b.epsilon_certified
    again = pure_central_epsilon(lam=b.lam, tau=b.tau, omega=b.omega, others=1_500)
    assert got.epsilon_upper == pytest.approx(again, abs=1e-12)


def test_cnt_pure_robust_calibration_counts_only_honest_users():
    full = CntPURE(epsilon=1.0, n=801).bit
    half = CntPURE(epsilon=1.0, n=801, gamma=0.5).bit
    assert full.certified_users == 400
    assert half.certified_users == 200  # ⌈(⌈0.5 · 801⌉ − 1)/2⌉
    assert half.lam >= full.lam


def test_cnt_pure_error_is_far_below_the_local_calibration():
    n = 2_000
    p = CntPURE(epsilon=1.0, n=n)
    x = _bits(n, 700)
    local = PureBitCounter(
        1.0,
        p.bit.tau,
        local_lambda(1.0, p.bit.tau, p.bit.scale, p.bit.weight),
        p.bit.alpha,
        p.bit.omega,
        weight=p.bit.weight,
    )
    stated = math.sqrt(p.variance(x))
    assert stated < math.sqrt(local.variance(n=n, count=700.0, fakes=0)) / 10
    assert stated < 10.0  # O_ε(1)-sized at this n (≈ 4.7)


def test_cnt_pure_error_does_not_grow_with_n():
    """The paper's O_ε(1) error: a flatter ω (Δ > 1) lets λ fall like 1/n, so the stated
    std stays flat from n = 10³ to 10⁵ instead of growing like √n (×10 over this range)."""
    stds = []
    for n in (1_000, 10_000, 100_000):
        p = CntPURE(epsilon=1.0, n=n)
        stds.append(math.sqrt(p.variance(_bits(n, n // 2))))
    assert max(stds) < 1.5 * min(stds)
    assert max(stds) < 8.0


@pytest.mark.parametrize("weights", [None, ()])
def test_cnt_pure_sampled_noise_matches_its_law(weights):
    """Both samplers, the mixed ω's inverse transform and the truncated DLap's clip, draw
    ω; the noise branch is taken with probability λ. Thresholds: every cell within 5
    standard errors plus 5 draws' worth (the rare cells of ω's tails), seed fixed."""
    b = CntPURE(epsilon=0.7, n=5_000).bit
    if weights is not None:
        b = PureBitCounter.derive(epsilon=0.7, tau=b.tau, honest_users=5_000, weights=weights)
    assert (b.weight < 1.0) == (weights is None)
    rng = np.random.default_rng(20)
    size = 200_000
    noise = dataclasses.replace(b, lam=1.0).ones(np.zeros(size, dtype=np.int64), rng=rng)
    omega = np.asarray(b.omega)
    counts = np.bincount(noise, minlength=b.tau + 1) / size
    se = np.sqrt(omega * (1 - omega) / size)
    assert np.all(np.abs(counts - omega) <= 5 * se + 5 / size)
    # The branch: with λ raised to 0.05, about 5 % of the users leave the input's m ones
    # (less the noise draws that land on m themselves).
    branch = dataclasses.replace(b, lam=0.05).ones(np.zeros(size, dtype=np.int64), rng=rng)
    moved = float(np.mean(branch != b.m))
    expected = 0.05 * (1 - omega[b.m])
    assert abs(moved - expected) < 5 * math.sqrt(expected / size)


def test_cnt_pure_unbiased_variance_messages_fakes():
    n, ones = 2_000, 500
    p = CntPURE(epsilon=1.0, n=n)
    x = _bits(n, ones)
    rng = np.random.default_rng(21)
    assert p.randomize(x, rng=rng).size == n * p.messages_per_user
    err = np.array([_run(p, x, rng) - ones for _ in range(REPEATS)])
    var = p.variance(x)
    assert abs(err.mean()) < 4 * math.sqrt(var / REPEATS)
    assert 0.8 < err.var() / var < 1.2
    f = p.sample_fakes(40_000, rng=rng)
    assert abs(f.mean() - 0.5) < 4 * math.sqrt(0.25 / f.size)
    err = np.array([_run(p, x, rng, n_fakes=999) - ones for _ in range(200)])
    assert abs(err.mean()) < 4 * math.sqrt(p.variance(x, n_fakes=999) / 200)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"epsilon": 1.0, "n": 100, "messages": 4}, "odd"),
        ({"epsilon": 1.0, "n": 100, "messages": 8193}, "odd and <= 8191"),
        ({"epsilon": 0.0, "n": 100}, "epsilon"),
        ({"epsilon": 1.0, "n": 100, "gamma": 2.0}, "gamma"),
    ],
)
def test_cnt_pure_refuses_bad_parameters(kwargs, match):
    with pytest.raises(ParameterError, match=match):
        CntPURE(**kwargs)


def test_cnt_pure_falls_back_to_the_local_bound_where_the_computation_cannot_reach():
    # ε so large that λ·ω underflows, or the likelihood ratios exceed one tilt's range.
    for eps in (30.0, 100.0):
        b = CntPURE(epsilon=eps, n=10_000).bit
        assert b.certified_users == 0
        assert b.lam == pytest.approx(local_lambda(eps, b.tau, b.scale, b.weight))
        assert b.epsilon_local == pytest.approx(eps)
    with pytest.raises(BoundNotApplicable, match="not covered by any tilt"):
        pure_central_epsilon(lam=1e-12, tau=15, alpha=math.exp(-1.0), others=10)
    # ... and the audit then falls back to the generic bounds instead of failing.
    assert CntPURE(epsilon=100.0, n=1_000).honest_users_bound(10) is None


def test_cnt_pure_honest_users_bound_brackets_every_dataset():
    """The protocol's own accountant for h honest others: its upper bound covers every
    dataset (checked by direct convolution); the pure ε of the all-zero dataset lies below
    it, and the lower bound at δ (honest_users_lower) below that."""
    p = CntPURE(epsilon=1.0, n=13, messages=7)
    b = p.bit
    lp0, lp1 = (np.log(q) for q in user_laws(b.lam, b.tau, omega=b.omega))
    for h in (1, 4, 12):
        got = p.honest_users_bound(h)
        assert got is not None
        exact = [_direct_epsilon(lp0, lp1, h - j, j) for j in range(h + 1)]
        assert max(exact) <= got.epsilon_upper + 1e-9
        low = p.honest_users_lower(h, fakes=0, delta=1e-6)
        assert low is not None
        assert low[0] <= exact[0] + 1e-9
    assert p.honest_users_bound(0) is None
    assert CntRR(epsilon_local=1.0, n=100, delta=1e-6).honest_users_bound(5) is None


def test_cnt_pure_audit_lower_bound_at_delta_is_below_the_pure_bound() -> None:
    """At n = 4·10⁴ the lower bound at δ = 10⁻⁶ (all others holding 0) lies below the pure
    upper bound (≈ 0.96), at ≈ 0.47: the tail events behind the pure ε weigh under δ."""
    p = CntPURE(epsilon=1.0, n=40_000)
    got = p.honest_users_bound(39_999)
    assert got is not None
    low = p.honest_users_lower(39_999, fakes=0, delta=1e-6)
    assert low is not None
    assert 0.4 < low[0] <= got.epsilon_upper - 0.3


def test_default_tau_is_not_capped_where_rsum_pure_needs_it() -> None:
    # RSum_PURE's 11 digit counters at ε_c = 0.1, n = 10^6 run at ε ≈ 0.009 and need
    # τ = 2⌈log₂ n/ε⌉ + 1 ≈ 4 400 one-bit messages for λ to fall like 1/n; the former cap of
    # 1 023 left their std at 16 508 (above LDP's 10 007), uncapped it is 4 133.
    from protocols._cnt_pure import MAX_TAU, default_tau

    eps = 0.1 / 11
    assert default_tau(10**6, eps) == 2 * math.ceil(math.log2(10**6) / eps) + 1 <= MAX_TAU
    assert default_tau(10**6, 1.0) == 41
