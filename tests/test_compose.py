"""Composition accountant (protocols/accounting/_compose.py) against exact references.

References are independent of the module: the T-fold privacy loss of binary randomized
response is (T − 2L)·ε with L ~ Bin(T, q), so its exact ε(δ) is a finite maximum over
threshold sets, computed here with mpmath at 50 digits; Kairouz–Oh–Viswanath's Thm 3.3 and
Murtagh–Vadhan's heterogeneous formula are evaluated term by term in mpmath. Thresholds:
the PLD result is never below the exact one (relative slack 1e-9 for float round-off) and
within 1 % of it; at most T·Δ above it where that is the sharper statement.
"""

from __future__ import annotations

import itertools
import math

import mpmath
import numpy as np
import pytest

from protocols import (
    ParameterError,
    PrivacyProfile,
    binary_rr_profile,
    compose,
    fmt21_numerical_epsilon,
    fmt21_profile,
    kov_delta,
    kov_epsilon,
    krr_profile,
    per_epoch_epsilon,
    stronger_clone_epsilon,
    stronger_clone_profile,
)
from protocols.accounting import _compose

mpmath.mp.dps = 50
REL_BELOW = 1e-9  # float round-off allowed below an exact value


def exact_binary_rr_epsilon(eps0: float, T: int, delta: float) -> float:
    """Exact ε(δ) of T-fold binary RR: max over threshold sets {L < m} of
    log((P(S) − δ)/Q(S)) with P = Bin(T, q), Q = Bin(T, p) on the number L of flips."""
    e = mpmath.e ** mpmath.mpf(eps0)
    p, q = e / (1 + e), 1 / (1 + e)
    best = mpmath.mpf(0)
    a = b = mpmath.mpf(0)
    for m in range(T + 1):
        c = mpmath.binomial(T, m)
        a += c * q**m * p ** (T - m)
        b += c * p**m * q ** (T - m)
        if a > delta:
            best = max(best, mpmath.log((a - delta) / b))
    return float(best)


@pytest.mark.parametrize("eps0", [0.1, 1.0])
@pytest.mark.parametrize("T", [2, 3, 7, 20, 50, 100])
def test_binary_rr_composition_matches_exact(eps0: float, T: int) -> None:
    delta = 1e-6
    got = compose([(binary_rr_profile(eps0), T)], delta=delta)
    exact = exact_binary_rr_epsilon(eps0, T, delta)
    assert got.method == "pld"
    assert got.epochs == T
    assert got.epsilon_total >= exact * (1 - REL_BELOW)
    assert got.epsilon_total <= exact * 1.01
    assert got.discretization_interval is not None
    assert got.epsilon_total <= exact + T * got.discretization_interval * (1 + 1e-9)
    # RDP is a valid but looser upper bound; naive T·ε is the pure bound (at δ/T it is a hair
    # below T·ε0); the exact value never exceeds either.
    assert got.epsilon_rdp is not None
    assert got.epsilon_rdp >= exact * (1 - REL_BELOW)
    assert exact <= got.epsilon_naive * (1 + REL_BELOW) <= T * eps0 * (1 + REL_BELOW)
    # Binary RR is KOV's extremal mechanism: the exact optimal composition of (ε0, 0) points.
    assert kov_epsilon(eps0, 0.0, T, delta) == pytest.approx(exact, rel=1e-9)


def test_krr_365_epochs_against_naive_and_advanced() -> None:
    """4-RR at ε = 1 (no shuffling), every day for a year, δ = 1e-6.

    Stated: PLD ε ≈ 175.0 (RDP 182.5) against naive 365 and advanced 730: composing
    365 ε = 1 epochs keeps 48 % of the naive budget, and advanced composition is worse than
    naive at ε = 1 (its drift term T·ε(e^ε−1) alone is 627).
    """
    got = compose([(krr_profile(1.0, 4), 365)], delta=1e-6, value_discretization_interval=1e-3)
    assert got.method == "pld"
    assert got.epsilon_total == pytest.approx(175.0, abs=0.5)
    assert got.epsilon_rdp == pytest.approx(182.5, abs=0.5)
    assert got.epsilon_naive == pytest.approx(365.0, rel=1e-6)
    assert got.epsilon_advanced == pytest.approx(730.1, abs=0.5)
    assert got.epsilon_total < got.epsilon_rdp < got.epsilon_naive < got.epsilon_advanced


def test_shuffled_krr_365_epochs_stronger_clone() -> None:
    """Shuffled 4-RR, ε0 = 1, 10^4 users, 365 epochs, δ = 1e-6 (FMT'23 pair).

    Stated: one epoch ε ≈ 0.0432; 365 epochs ε ≈ 1.04 by PLD (RDP ≈ 1.10), against naive
    21.8 and advanced 7.74.
    """
    profile = stronger_clone_profile(1.0, 9999, k=4)
    got = compose([(profile, 365)], delta=1e-6, value_discretization_interval=1e-4)
    assert got.epsilon_total == pytest.approx(1.037, abs=0.01)
    assert got.epsilon_rdp == pytest.approx(1.098, abs=0.01)
    assert got.epsilon_naive == pytest.approx(21.80, abs=0.05)
    assert got.epsilon_advanced == pytest.approx(7.74, abs=0.05)


def test_clone_pairs_give_the_accountants_single_epoch_epsilon() -> None:
    for delta in (1e-6, 1e-3):
        sc = stronger_clone_profile(1.5, 999, k=3).epsilon(delta)
        assert sc == pytest.approx(stronger_clone_epsilon(1.5, 999, delta, k=3), rel=1e-6)
        f21 = fmt21_profile(1.5, 999).epsilon(delta)
        assert f21 == pytest.approx(fmt21_numerical_epsilon(1.5, 999, delta), rel=1e-6)


def test_dp_accounting_documented_randomized_response() -> None:
    """dp_accounting documents the pessimistic PLD of RR with noise 0.2 over 4 buckets at
    Δ = 1 as {3: 0.85, −2: 0.05, 0: 0.1} (losses ±ln 17 and 0): this is 4-RR at ε = ln 17,
    so δ(ε) = 0.85 (1 − e^{ε−3}) on [0, 3] and ε(δ = ½) = 3 + ln(1 − 0.5/0.85)."""
    import dp_accounting
    from dp_accounting.pld import privacy_loss_distribution as pld_lib
    from dp_accounting.rdp import rdp_privacy_accountant

    rr = krr_profile(math.log(17.0), 4)
    one = compose([(rr, 1)], delta=0.5, value_discretization_interval=1.0)
    assert one.epsilon_total == pytest.approx(3.0 + math.log(1.0 - 0.5 / 0.85), rel=1e-12)
    # T-fold: the same as dp_accounting's own randomized-response PLD and RDP.
    theirs = pld_lib.from_randomized_response(0.2, 4).self_compose(30)
    ours = compose([(rr, 30)], delta=1e-6)
    assert ours.epsilon_total == pytest.approx(theirs.get_epsilon_for_delta(1e-6), rel=1e-9)
    acc = rdp_privacy_accountant.RdpAccountant(
        orders=list(_compose.RDP_ORDERS),
        neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE,
    )
    acc.compose(dp_accounting.RandomizedResponseDpEvent(0.2, 4), 30)
    assert ours.epsilon_rdp == pytest.approx(acc.get_epsilon(1e-6), rel=1e-9)


def kov_theorem_delta(eps: float, delta: float, k: int, i: int) -> mpmath.mpf:
    """KOV'15 Thm 3.3: (k−2i)ε holds with δ = 1 − (1−δ)^k (1 − δ_i)."""
    e = mpmath.e ** mpmath.mpf(eps)
    d_i = (
        sum(mpmath.binomial(k, j) * (e ** (k - j) - e ** (k - 2 * i + j)) for j in range(i))
        / (1 + e) ** k
    )
    return 1 - (1 - mpmath.mpf(delta)) ** k * (1 - d_i)


@pytest.mark.parametrize("delta0", [0.0, 1e-5])
def test_kov_closed_form_small_k(delta0: float) -> None:
    for k, eps in itertools.product(range(1, 9), (0.3, 1.0, 2.0)):
        for i in range(k // 2 + 1):
            ref = float(kov_theorem_delta(eps, delta0, k, i))
            assert kov_delta(eps, delta0, k, (k - 2 * i) * eps) == pytest.approx(
                ref, rel=1e-10, abs=1e-15
            )
        for target in (1e-4, 1e-2, 0.2):
            e_tot = kov_epsilon(eps, delta0, k, target)
            if math.isfinite(e_tot) and e_tot > 0:
                # The smallest ε_total: δ holds there and fails just below.
                assert kov_delta(eps, delta0, k, e_tot) <= target * (1 + 1e-9)
                assert kov_delta(eps, delta0, k, e_tot * (1 - 1e-6)) > target


def test_kov_epsilon_is_infinite_when_delta_is_spent() -> None:
    assert kov_epsilon(1.0, 1e-3, 10, 5e-3) == math.inf  # 1 − (1 − 1e-3)^10 ≈ 0.00996


def test_points_use_kov_and_agree_with_pld_of_the_canonical_pair() -> None:
    point = PrivacyProfile.from_point(0.5, 1e-8)
    got = compose([(point, 40)], delta=1e-5)
    assert got.method == "kov_optimal"
    assert got.epsilon_total == kov_epsilon(0.5, 1e-8, 40, 1e-5)
    as_pair = PrivacyProfile.from_log_pair(point.log_p, point.log_q)
    pld = compose([(as_pair, 40)], delta=1e-5)
    assert pld.method == "pld"
    assert got.epsilon_total * (1 - REL_BELOW) <= pld.epsilon_total
    assert pld.epsilon_total <= got.epsilon_total + 40 * 1e-4


def murtagh_vadhan_delta(points: list[tuple[float, float]], eps_g: float) -> mpmath.mpf:
    """Murtagh–Vadhan (TCC'16) Thm 1.5: the optimal δ of the heterogeneous composition."""
    eps = [mpmath.mpf(e) for e, _ in points]
    total = mpmath.mpf(0)
    for subset in itertools.product((0, 1), repeat=len(points)):
        inside = sum(e for e, s in zip(eps, subset, strict=True) if s)
        outside = sum(e for e, s in zip(eps, subset, strict=True) if not s)
        total += max(mpmath.mpf(0), mpmath.e**inside - mpmath.e ** (eps_g + outside))
    denom = mpmath.fprod(1 + mpmath.e**e for e in eps)
    keep = mpmath.fprod(1 - mpmath.mpf(d) for _, d in points)
    return 1 - keep * (1 - total / denom)


def test_heterogeneous_points_match_murtagh_vadhan() -> None:
    points = [(0.2, 1e-7), (0.7, 0.0), (1.3, 1e-6), (0.4, 1e-8), (0.9, 0.0)]
    profiles = [(PrivacyProfile.from_point(e, d), 1) for e, d in points]
    delta = 1e-4
    got = compose(profiles, delta=delta)
    assert got.method == "murtagh_vadhan_pld"
    # Valid: MV's optimal δ at the PLD's ε is within δ. Tight: below it by T·Δ, it is not.
    assert murtagh_vadhan_delta(points, got.epsilon_total) <= delta * (1 + 1e-9)
    assert murtagh_vadhan_delta(points, got.epsilon_total - len(points) * 1e-4) > delta


def test_curve_envelope_dominates_and_meets_its_points() -> None:
    rr = binary_rr_profile(0.5)
    curve = PrivacyProfile.from_curve(rr.epsilon, description="binary RR curve")
    assert curve.kind == "curve"
    for eps, dlt in curve.points:  # the envelope pair meets every point read
        pair_only = PrivacyProfile.from_log_pair(curve.log_p, curve.log_q)
        # (δ read back from log space differs from δ by an ulp: ask at a hair above it)
        assert pair_only.epsilon(dlt * (1 + 1e-9)) <= eps * (1 + 1e-9) + 1e-12
    for d in (1e-9, 1e-6, 1e-3):  # and is no stronger than the mechanism it came from
        assert _compose.epsilon_for_pair(curve.log_p, curve.log_q, d) >= rr.epsilon(d) * (1 - 1e-9)
    for T in (1, 10, 50):
        exact = exact_binary_rr_epsilon(0.5, T, 1e-6)
        got = compose([(curve, T)], delta=1e-6)
        assert got.method == "pld_envelope"
        assert exact * (1 - REL_BELOW) <= got.epsilon_total <= exact * 1.01


def test_curve_of_a_point_is_the_canonical_pair() -> None:
    def curve(d: float) -> float:
        return 1.0 if d >= 1e-9 else math.inf

    from_curve = PrivacyProfile.from_curve(curve, deltas=(1e-12, 1e-9, 1e-6, 0.1))
    point = PrivacyProfile.from_point(1.0, 1e-9)
    for d in (1e-8, 1e-6, 1e-3):
        assert from_curve.epsilon(d) == pytest.approx(point.epsilon(d), rel=1e-12)


def test_mixed_profiles_compose_as_the_sum() -> None:
    rr = binary_rr_profile(0.3)
    mixed = compose([(rr, 5), (PrivacyProfile.from_point(0.3, 0.0), 5)], delta=1e-6)
    assert mixed.method == "pld_envelope"
    assert mixed.epochs == 10
    assert mixed.epsilon_total == pytest.approx(exact_binary_rr_epsilon(0.3, 10, 1e-6), rel=1e-3)
    assert [c for _, c in mixed.profiles] == [5, 5]


def test_numpy_rounding_path_equals_dp_accounting_dict_path(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rng = np.random.default_rng(20240607)
    p, q = rng.dirichlet(np.ones(300)), rng.dirichlet(np.ones(300))
    p[7] = 0.0  # a zero of P and
    q[11] = 0.0  # an infinite loss
    profile = PrivacyProfile.from_pair(p / p.sum(), q / q.sum())
    via_dict = compose([(profile, 3)], delta=0.2)
    monkeypatch.setattr(_compose, "DICT_PATH_MAX", 0)
    via_numpy = compose([(profile, 3)], delta=0.2)
    assert via_numpy.epsilon_total == pytest.approx(via_dict.epsilon_total, rel=1e-12)


@pytest.mark.parametrize("budget", [1.0, 5.0])
def test_per_epoch_epsilon_round_trips(budget: float) -> None:
    T, delta = 12, 1e-6
    eps = per_epoch_epsilon(binary_rr_profile, T, budget, delta, rtol=1e-5)
    assert compose([(binary_rr_profile(eps), T)], delta=delta).epsilon_total <= budget
    above = compose([(binary_rr_profile(eps * (1 + 1e-4)), T)], delta=delta).epsilon_total
    assert above > budget


def test_per_epoch_epsilon_for_points_inverts_kov() -> None:
    eps = per_epoch_epsilon(lambda e: PrivacyProfile.from_point(e, 1e-9), 365, 10.0, 1e-6)
    assert kov_epsilon(eps, 1e-9, 365, 1e-6) <= 10.0 < kov_epsilon(eps * 1.001, 1e-9, 365, 1e-6)


def test_per_epoch_epsilon_when_nothing_fits() -> None:
    with pytest.raises(ParameterError, match="exceeds"):
        per_epoch_epsilon(lambda e: PrivacyProfile.from_point(e, 1e-3), 10, 1.0, 1e-3)


@pytest.mark.parametrize("bad", [0, -1, 1.5, "3", True])
def test_bad_counts(bad: object) -> None:
    with pytest.raises(ParameterError):
        compose([(binary_rr_profile(1.0), bad)], delta=1e-6)  # type: ignore[list-item]
    with pytest.raises(ParameterError):
        per_epoch_epsilon(binary_rr_profile, bad, 1.0, 1e-6)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [0.0, 1.0, -1e-6, 1.5, math.nan])
def test_bad_delta(bad: float) -> None:
    with pytest.raises(ParameterError):
        compose([(binary_rr_profile(1.0), 2)], delta=bad)
    with pytest.raises(ValueError, match="delta"):  # misuse errors are ValueErrors too
        compose([(binary_rr_profile(1.0), 2)], delta=bad)


def test_bad_pairs() -> None:
    with pytest.raises(ParameterError, match="one support"):
        PrivacyProfile.from_pair([0.5, 0.5], [0.2, 0.3, 0.5])
    with pytest.raises(ParameterError, match="sum to 1"):
        PrivacyProfile.from_pair([0.5, 0.6], [0.5, 0.5])
    with pytest.raises(ParameterError, match="sum to 1"):
        PrivacyProfile.from_log_pair([0.0, 0.0], [math.log(0.5), math.log(0.5)])
    with pytest.raises(ParameterError, match="non-negative"):
        PrivacyProfile.from_pair([1.5, -0.5], [0.5, 0.5])
    with pytest.raises(ParameterError):
        PrivacyProfile.from_pair([[0.5, 0.5]], [[0.5, 0.5]])


def test_bad_points_curves_and_arguments() -> None:
    with pytest.raises(ParameterError):
        PrivacyProfile.from_point(1.0, 1.0)
    with pytest.raises(ParameterError):
        PrivacyProfile.from_point(-1.0, 0.0)
    with pytest.raises(ParameterError, match="no finite"):
        PrivacyProfile.from_curve(lambda d: math.inf)
    with pytest.raises(ParameterError):
        PrivacyProfile.from_curve(lambda d: -1.0)
    with pytest.raises(ParameterError):
        compose([], delta=1e-6)
    with pytest.raises(ParameterError):
        compose([(binary_rr_profile(1.0), 1)], delta=1e-6, value_discretization_interval=0.0)
    with pytest.raises(ParameterError):
        compose([("not a profile", 1)], delta=1e-6)  # type: ignore[list-item]
    with pytest.raises(ParameterError):
        kov_epsilon(1.0, 0.0, 0, 1e-6)
