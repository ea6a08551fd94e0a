"""Cnt_BN with Poisson noise: exact δ, calibration, estimator, messages, refusals.

Thresholds: "unbiased" = mean error within 4 standard errors of 0 over seeded repeats; an
empirical variance matches its closed form within ±15 % with 1500 repeats (standard error
of a variance estimate ≈ √(2/R) ≈ 3.7 %, so the margin is ≈ 4 SE); fast δ formulas match
slow direct references to a relative 1e-9.
"""

from __future__ import annotations

import math
import time

import numpy as np
import pytest
from scipy import stats

from protocols import CntBN, ParameterError, ProtocolSpec, build_protocol
from protocols._cnt_bn import (
    MAX_BN_NOISE,
    bn_shift_delta,
    calibrate_bn_noise,
    poisson_bn_delta,
)


def _reference_grid_delta(lam: float, epsilon: float) -> float:
    """Slow δ(ε; Λ): hockey-stick over the whole 2-D (ones, zeros) grid of the view.

    Honest noise ones and zeros are independent Poisson(Λ/2). Dataset D (the differing user
    holds 0) gives the view (A, Z + 1), its neighbour D' (it holds 1) gives (A + 1, Z); the
    other users' bits are a common offset and drop out. Sum max(P − e^ε Q, 0) both ways.
    """
    top = int(lam + 40 * math.sqrt(lam) + 60)
    k = np.arange(top + 2)
    p = stats.poisson.pmf(k, lam / 2)
    p_shift = np.concatenate([[0.0], p[:-1]])  # P[X = k − 1]
    view_d = np.outer(p, p_shift)  # [ones, zeros]: A = ones, Z + 1 = zeros
    view_d1 = np.outer(p_shift, p)  # A + 1 = ones, Z = zeros
    e = math.exp(epsilon)
    return float(
        max(
            np.maximum(view_d - e * view_d1, 0.0).sum(),
            np.maximum(view_d1 - e * view_d, 0.0).sum(),
        )
    )


def _reference_binomial_delta(trials: int, epsilon: float) -> float:
    k = np.arange(trials + 2)
    p0 = stats.binom.pmf(k, trials, 0.5)
    p1 = stats.binom.pmf(k - 1, trials, 0.5)
    e = math.exp(epsilon)
    return float(max(np.maximum(p0 - e * p1, 0).sum(), np.maximum(p1 - e * p0, 0).sum()))


# --- exact δ ---------------------------------------------------------------------------


@pytest.mark.parametrize("epsilon", [0.05, 0.3, 1.0, 3.0, 8.0])
def test_binomial_shift_delta_matches_direct_sum(epsilon: float) -> None:
    trials = np.array([0, 1, 2, 3, 7, 20, 64, 101, 500, 2000])
    fast = bn_shift_delta(trials, epsilon)
    slow = np.array([_reference_binomial_delta(int(t), epsilon) for t in trials])
    np.testing.assert_allclose(fast, slow, rtol=1e-9, atol=1e-300)
    assert fast[0] == 1.0  # no noise: the bit is revealed


@pytest.mark.parametrize("lam", [0.5, 3.0, 12.0, 40.0, 150.0])
@pytest.mark.parametrize("epsilon", [0.2, 1.0, 3.0])
def test_poisson_delta_matches_2d_grid_reference(lam: float, epsilon: float) -> None:
    fast = poisson_bn_delta(lam, epsilon)
    slow = _reference_grid_delta(lam, epsilon)
    assert fast == pytest.approx(slow, rel=1e-9, abs=1e-300)
    # Never below the exact value (the left-out Poisson mass is added as an upper bound).
    assert fast >= slow * (1 - 1e-12)


def test_delta_non_increasing_in_lambda_and_floor_e_to_minus_half_lambda() -> None:
    lams = np.geomspace(0.1, 3000.0, 80)
    for eps in (0.1, 1.0, 4.0):
        d = np.array([poisson_bn_delta(float(lam), eps) for lam in lams])
        # Where δ > 1e-30: below it, the < 1e-40 Poisson mass the sum leaves out and adds
        # back as an upper bound is no longer negligible against δ (module doc).
        live = d[:-1] > 1e-30
        assert live.sum() > 20
        assert np.all(np.diff(d)[live] <= 1e-15 * d[:-1][live]), eps
        # All-zero noise views are impossible under the neighbour: δ ≥ E[2^{−M}] = e^{−Λ/2}.
        assert np.all(d >= np.exp(-lams / 2) * (1 - 1e-9))


# --- calibration -----------------------------------------------------------------------


@pytest.mark.parametrize("epsilon", [0.05, 0.2, 1.0, 2.0, 5.0])
@pytest.mark.parametrize("delta", [1e-3, 1e-6, 1e-12])
def test_calibrated_noise_is_the_smallest_feasible(epsilon: float, delta: float) -> None:
    lam = calibrate_bn_noise(epsilon, delta)
    assert poisson_bn_delta(lam, epsilon) <= delta
    assert poisson_bn_delta(lam * (1 - 1e-3), epsilon) > delta
    assert lam >= 2 * math.log(1 / delta)


def test_calibration_checked_on_the_grid_reference() -> None:
    eps, delta = 1.0, 1e-4
    lam = calibrate_bn_noise(eps, delta)
    assert _reference_grid_delta(lam, eps) <= delta
    assert _reference_grid_delta(lam * (1 - 1e-3), eps) > delta


def test_large_epsilon_needs_two_log_one_over_delta() -> None:
    # As ε → ∞ only the all-zero noise views remain: δ = e^{−Λ/2}, Λ = 2 ln(1/δ).
    assert calibrate_bn_noise(30.0, 1e-6) == pytest.approx(2 * math.log(1e6), rel=1e-6)


def test_calibration_is_fast_and_cached() -> None:
    # < 0.5 s of CPU per (ε, δ) for ε ∈ [0.05, 5], δ ≥ 1e-12 (measured ≈ 0.1 s at the
    # slowest corner, ε = 0.05); the second call hits the cache.
    for eps, delta in [(0.05, 1e-12), (0.05, 1e-6), (5.0, 1e-12), (0.7, 1e-9)]:
        calibrate_bn_noise.cache_clear()
        t0 = time.process_time()
        lam = calibrate_bn_noise(eps, delta)
        assert time.process_time() - t0 < 0.5, (eps, delta)
        t0 = time.process_time()
        assert calibrate_bn_noise(eps, delta) == lam
        assert time.process_time() - t0 < 0.01


# --- protocol --------------------------------------------------------------------------


def _errors(p: CntBN, n: int, ones: int, reps: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = np.zeros(n, dtype=np.int64)
    x[rng.choice(n, ones, replace=False)] = 1
    out = np.empty(reps)
    for r in range(reps):
        dec, ok = p.decode(p.encode(p.randomize(x, rng=rng)))
        assert ok.all()
        out[r] = p.estimate(dec, n=n, n_fakes=0).values[0] - ones
    return out


def test_parameters_and_privacy_follow_the_calibration() -> None:
    p = CntBN(epsilon=1.0, delta=1e-6, n=10_000, gamma=0.5)
    lam = calibrate_bn_noise(1.0, 1e-6)
    assert p.params.noise == lam
    assert p.params.mu == pytest.approx(lam / (0.5 * 10_000))
    assert p.privacy.epsilon_central == 1.0
    assert p.privacy.delta == p.params.delta_exact <= 1e-6
    assert "gamma=0.5" in p.privacy.bound
    # Var = (n μ + n_f)/4 = Λ/(4γ) + n_f/4.
    assert p.variance(n=10_000, n_fakes=40) == pytest.approx(lam / 2 + 10)


def test_unbiased_and_variance_as_stated_at_n_1e4() -> None:
    n, ones, reps = 10_000, 3_000, 1500
    p = CntBN(epsilon=1.0, delta=1e-6, n=n)
    err = _errors(p, n, ones, reps, seed=11)
    var = p.variance(n=n)
    assert abs(err.mean()) < 4 * math.sqrt(var / reps)
    assert 0.85 < err.var(ddof=1) / var < 1.15


def test_error_does_not_grow_with_n() -> None:
    # The γn honest users send Poisson(Λ) noise bits together whatever n is: the stated std
    # is the same at n = 10^3 and 10^5, and the measured RMSEs agree within ×1.3 (600
    # repeats each: relative s.e. of an RMSE ≈ 2.9 %, of their ratio ≈ 4 %).
    small = CntBN(epsilon=0.5, delta=1e-6, n=1_000)
    large = CntBN(epsilon=0.5, delta=1e-6, n=100_000)
    assert small.variance(n=1_000) == pytest.approx(large.variance(n=100_000))
    rmse_small = math.sqrt(np.mean(_errors(small, 1_000, 400, 600, seed=12) ** 2))
    rmse_large = math.sqrt(np.mean(_errors(large, 100_000, 40_000, 600, seed=13) ** 2))
    assert 1 / 1.3 < rmse_large / rmse_small < 1.3
    stated = math.sqrt(small.variance(n=1_000))
    assert 0.85 < rmse_small / stated < 1.15


def test_messages_per_user_is_one_plus_mu() -> None:
    n, reps = 2_000, 400
    p = CntBN(epsilon=0.5, delta=1e-6, n=n)
    assert p.messages_per_user == pytest.approx(1 + p.params.noise / n)
    rng = np.random.default_rng(14)
    x = np.ones(n, dtype=np.int64)
    sizes = np.array([p.randomize(x, rng=rng).size for _ in range(reps)])
    # Total noise bits ~ Poisson(n μ): the mean message count per user has s.e. √(nμ/R)/n.
    se = math.sqrt(n * p.params.mu / reps) / n
    assert abs(sizes.mean() / n - p.messages_per_user) < 4 * se
    assert sizes.min() >= n  # every user sends its own bit


def test_registry_gamma_option() -> None:
    p = build_protocol("cnt_bn", ProtocolSpec(1.0, 1e-6, 1000, options={"gamma": 0.25}))
    assert isinstance(p, CntBN)
    assert p.robust_gamma == 0.25
    assert p.params.mu == pytest.approx(calibrate_bn_noise(1.0, 1e-6) / 250)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"epsilon": 0.0}, "epsilon must be"),
        ({"epsilon": -1.0}, "epsilon must be"),
        ({"epsilon": math.nan}, "epsilon must be"),
        ({"delta": 0.0}, r"delta = 0 \(pure DP\) is not proven here"),
        ({"delta": 1.0}, "delta must lie in"),
        ({"delta": 1.5}, "delta must lie in"),
        ({"gamma": 0.0}, "gamma"),
        ({"gamma": 1.5}, "gamma"),
        ({"gamma": -0.2}, "gamma"),
        ({"n": 3, "gamma": 0.2}, "honest user"),
        ({"n": 0}, "n must be"),
        ({"epsilon": 1e-4}, "noise bits"),
    ],
)
def test_bad_parameters_refused(kwargs: dict[str, float], match: str) -> None:
    base: dict[str, float] = {"epsilon": 1.0, "delta": 1e-6, "n": 1000}
    with pytest.raises(ParameterError, match=match):
        CntBN(**{**base, **kwargs})  # type: ignore[arg-type]
    assert MAX_BN_NOISE == 1e7


@pytest.mark.parametrize("honest_others", [2_999, 1_999, 1_200])
def test_honest_users_bound_is_the_exact_epsilon_of_the_remaining_noise(
    honest_others: int,
) -> None:
    # Colluding users' bits are known: h + 1 honest users leave Poisson(μ(h + 1)) noise
    # bits. Checked on the slow 2-D grid reference: the stated ε meets δ, and 10^-6 less
    # does not (so it is the smallest, not merely some upper bound).
    p = CntBN(epsilon=1.0, delta=1e-6, n=4_000, gamma=0.5)
    got = p.honest_users_bound(honest_others)
    assert got is not None
    lam = p.params.mu * (honest_others + 1)
    assert _reference_grid_delta(lam, got.epsilon_upper) <= 1e-6 * (1 + 1e-9)
    assert _reference_grid_delta(lam, got.epsilon_upper * (1 - 1e-6)) > 1e-6
    # At least ⌈γn⌉ = 2 000 honest users: the robust guarantee (ε = 1) holds, and more honest
    # users give less; fewer give more, gracefully, instead of no guarantee at all.
    if honest_others + 1 >= 2_000:
        assert got.epsilon_upper <= 1.0
    else:
        assert 1.0 < got.epsilon_upper < 10.0


def test_honest_users_bound_none_where_the_noise_cannot_reach_delta() -> None:
    # With no noise bit (probability e^{−Λ}) the victim's bit is exposed: δ(ε) ≥ e^{−Λ}.
    p = CntBN(epsilon=1.0, delta=1e-6, n=4_000, gamma=0.5)
    tiny = 10  # Λ = 11 μ ≈ 0.5: e^{−Λ} ≫ 10^-6
    assert math.exp(-p.params.mu * (tiny + 1)) > 1e-6
    assert p.honest_users_bound(tiny) is None


def test_audit_keeps_the_robust_guarantee_under_user_collusion() -> None:
    # 40 % of the others collude: 2 400 ≥ γn = 2 000 honest users remain, so the row is
    # finite and within the robust claim (it was ∞: "reports alone give no guarantee").
    from simulations._audit import audit

    out = audit(
        protocol_name="cnt_bn",
        n=4_000,
        epsilon=1.0,
        delta=1e-6,
        domain=2,
        shufflers=1,
        fake_reports=0,
        colluding_users=0.4,
        colluding_shufflers=0,
        options={"gamma": 0.5},
    )
    rows = {r["scenario"]: r for r in out["scenarios"]}
    users = next(r for name, r in rows.items() if name.endswith(" users") and "+" not in name)
    assert users["colluding_users"] == 1_600
    assert 0.5 < users["epsilon_upper"] <= 1.0
    assert users["bound"].startswith("cnt_bn_poisson_exact")
    assert math.isinf(rows["all shufflers"]["epsilon_upper"])  # the traced view: no guarantee
    # With no collusion all 4 000 users' noise counts: below the claim, which assumes γn.
    assert rows["none"]["epsilon_upper"] < users["epsilon_upper"] < 1.0
    assert rows["none"]["bound"].startswith("cnt_bn_poisson_exact (Poisson(")
