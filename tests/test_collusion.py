"""Collusion scenarios (protocols/accounting/_collusion.py): order, monotonicity, fakes."""

from __future__ import annotations

import math

import numpy as np
import pytest

from protocols import (
    CollusionConfig,
    ParameterError,
    binary_rr_epsilon,
    collusion_scenarios,
    krr_fakes_only_epsilon,
    krr_matrix,
    murs_formula,
    pair_epsilon,
    resolve_colluding_users,
)


def _cfg(**kw: object) -> CollusionConfig:
    base: dict[str, object] = {
        "family": "krr",
        "k": 2,
        "n": 2000,
        "epsilon_local": 3.0,
        "delta": 1e-6,
        "shufflers": 3,
        "fake_reports": 50,
        "colluding_users": 100,
        "colluding_shufflers": 1,
    }
    base.update(kw)
    return CollusionConfig(**base)  # type: ignore[arg-type]


def test_every_scenario_in_order_with_a_bound_and_an_explanation() -> None:
    rows = collusion_scenarios(_cfg())
    assert [r.scenario for r in rows] == [
        "none",
        "all shufflers",
        "m-1 shufflers",
        "100 users",
        "1 shufflers + 100 users",
        "m-1 shufflers + 100 users",
        "m-1 shufflers + all other users",
    ]
    for r in rows:
        assert r.bound
        assert r.explanation
        assert 0 < r.epsilon_upper <= 3.0
    by = {r.scenario: r for r in rows}
    assert by["all shufflers"].epsilon_upper == 3.0  # only the local randomizer
    assert (by["none"].honest_users, by["none"].honest_fakes) == (1999, 150)
    assert (by["m-1 shufflers"].honest_users, by["m-1 shufflers"].honest_fakes) == (1999, 50)
    assert by["1 shufflers + 100 users"].honest_fakes == 100


def test_more_collusion_never_helps() -> None:
    by = {r.scenario: r.epsilon_upper for r in collusion_scenarios(_cfg())}
    assert by["none"] <= by["100 users"] <= by["1 shufflers + 100 users"]
    assert by["1 shufflers + 100 users"] <= by["m-1 shufflers + 100 users"]
    assert by["m-1 shufflers + 100 users"] <= by["m-1 shufflers + all other users"]
    assert by["m-1 shufflers + all other users"] <= by["all shufflers"]


def test_none_scenario_is_the_exact_binary_accountant_with_fakes() -> None:
    none = collusion_scenarios(_cfg())[0]
    assert none.bound == "binary_rr_exact"
    assert none.epsilon_upper == pytest.approx(binary_rr_epsilon(3.0, 1999, 1e-6, n_fakes=150))


def test_murs_claim_is_computed_from_the_fakes_alone_and_exactly() -> None:
    cfg = _cfg(k=3, n=50, epsilon_local=2.0, delta=1e-3, fake_reports=6, colluding_users=0)
    murs = collusion_scenarios(cfg)[-1]
    assert murs.scenario == "m-1 shufflers + all other users"
    assert (murs.honest_users, murs.honest_fakes) == (0, 6)
    assert murs.bound == "krr_fakes_exact"
    exact = pair_epsilon(krr_matrix(2.0, 3), victim=(0, 1), others=[], delta=1e-3, n_fakes=6)
    assert murs.epsilon_upper == pytest.approx(exact.epsilon, rel=1e-7)
    assert murs.epsilon_upper == pytest.approx(krr_fakes_only_epsilon(2.0, 6, 1e-3, k=3))
    # MURS's own formula for comparison: √(14 ln(2/δ) / (n_r/d)) with no honest users.
    assert murs.murs_formula == pytest.approx(math.sqrt(14 * math.log(2 / 1e-3) / (6 / 3)))


def test_murs_formula_matches_the_paper_expression() -> None:
    v = murs_formula(epsilon_local=2.0, n_honest_others=999, n_fakes=100, delta=1e-6, d=8)
    beta = 999 / (math.exp(2.0) + 7) + 100 / 8
    assert v == pytest.approx(math.sqrt(14 * math.log(2e6) / beta))
    assert murs_formula(epsilon_local=2.0, n_honest_others=0, n_fakes=0, delta=1e-6, d=8) == (
        math.inf
    )


def test_generic_family_does_not_count_fakes() -> None:
    rows = collusion_scenarios(_cfg(family="generic"))
    by = {r.scenario: r for r in rows}
    assert by["m-1 shufflers + all other users"].epsilon_upper == 3.0
    assert "generic" in by["none"].explanation
    assert by["none"].bound == "fmt21_numerical"
    # The same users with or without fakes: identical generic bound.
    assert by["none"].epsilon_upper == by["m-1 shufflers"].epsilon_upper


def test_shares_without_local_guarantee() -> None:
    rows = collusion_scenarios(
        _cfg(family="generic", epsilon_local=math.inf, epsilon_claimed=0.5, claimed_bound="x")
    )
    assert rows[0].epsilon_upper == 0.5
    assert rows[0].bound == "x"
    assert all(math.isinf(r.epsilon_upper) for r in rows[1:])


def test_all_shufflers_colluding_dedups_the_configured_row() -> None:
    names = [r.scenario for r in collusion_scenarios(_cfg(colluding_shufflers=3))]
    assert "3 shufflers + 100 users" not in names
    assert names.count("all shufflers") == 1


def test_resolve_colluding_users() -> None:
    assert resolve_colluding_users(0.1, 1001) == 100
    assert resolve_colluding_users(7, 1001) == 7
    assert resolve_colluding_users(0, 5) == 0
    with pytest.raises(ParameterError, match="exceeds"):
        resolve_colluding_users(10, 5)
    with pytest.raises(ParameterError, match="integer"):
        resolve_colluding_users(2.5, 100)
    with pytest.raises(ParameterError, match=">= 0"):
        resolve_colluding_users(-1, 100)


def test_config_validation() -> None:
    with pytest.raises(ParameterError, match="colluding_shufflers"):
        _cfg(colluding_shufflers=4)
    with pytest.raises(ParameterError, match="colluding_users"):
        _cfg(colluding_users=2000)
    with pytest.raises(ParameterError, match="delta"):
        _cfg(delta=1.0)
    # δ = 0 is a pure audit: only the pure bounds (local DP) apply to its scenarios
    assert _cfg(delta=0.0).delta == 0.0


def _local_hashing_laws(eps: float, g: int) -> tuple[np.ndarray, np.ndarray]:
    """Laws of (matches x⁰, matches x¹) of an LH report under x⁰ / x¹, and of a uniform fake.

    Ideal 2-independent hashing: H(x⁰), H(x¹) independent uniform on [g]. Categories:
    (1,1), (1,0), (0,1), (0,0). These four counts are sufficient for the pair.
    """
    q = 1.0 / (math.exp(eps) + g - 1.0)
    p = math.exp(eps) * q
    c = 1.0 / g
    rest = c * (1 - p) + (1 - c) * (1 - p - q)
    laws = np.array(
        [[c * p, (1 - c) * p, (1 - c) * q, rest], [c * p, (1 - c) * q, (1 - c) * p, rest]]
    )
    fake = np.array([c * c, c * (1 - c), c * (1 - c), (1 - c) ** 2])
    return laws, fake


@pytest.mark.parametrize(("eps", "g", "n_r", "delta"), [(2.0, 4, 6, 1e-3), (3.0, 8, 10, 1e-3)])
def test_murs_local_hashing_is_no_worse_than_its_krr_model(
    eps: float, g: int, n_r: int, delta: float
) -> None:
    # The audit accounts MURS/SLH reports as g-ary RR on the hashed value. For the fakes-only
    # scenario the exact local-hashing view (ideal hashing) is at most that number.
    laws, fake = _local_hashing_laws(eps, g)
    exact = pair_epsilon(
        laws, victim=(0, 1), others=[], delta=delta, n_fakes=n_r, fake_law=fake
    ).epsilon
    model = krr_fakes_only_epsilon(eps, n_r, delta, k=g)
    assert exact <= model
    assert exact >= 0.85 * model  # and the model is not far off


def test_none_uses_the_protocols_own_theorem_when_tighter() -> None:
    # A multi-message protocol with a large bundle ε_l: the generic accountant proves little,
    # the protocol's own theorem (its no-collusion claim) is used and named.
    cfg = _cfg(family="generic", epsilon_local=9.0, epsilon_claimed=1.0, claimed_bound="own")
    rows = {r.scenario: r for r in collusion_scenarios(cfg)}
    assert rows["none"].epsilon_upper == 1.0
    assert rows["none"].bound == "own"
    assert rows["all shufflers"].epsilon_upper == 9.0
    # A looser claim is not used.
    tight = collusion_scenarios(_cfg(epsilon_claimed=2.0, claimed_bound="own"))[0]
    assert tight.bound == "binary_rr_exact"


def test_the_claim_without_fakes_covers_every_scenario_with_all_users_honest() -> None:
    """Colluding shufflers remove only their own fakes: with every other user honest the
    protocol's claim for no fakes still holds (fakes are data-independent post-processing).
    Before, only ``none`` used the claim, so adding fakes made ``m-1 shufflers`` worse."""
    cfg = CollusionConfig(
        family="generic",
        k=2,
        n=20_000,
        epsilon_local=10.0,
        delta=1e-6,
        shufflers=3,
        fake_reports=50,
        colluding_users=10,
        colluding_shufflers=1,
        epsilon_claimed=0.9,
        claimed_bound="own",
        epsilon_claimed_without_fakes=1.0,
    )
    rows = {r.scenario: r for r in collusion_scenarios(cfg)}
    assert rows["none"].epsilon_upper == 0.9  # as configured, fakes included
    assert rows["m-1 shufflers"].epsilon_upper == 1.0
    assert rows["m-1 shufflers"].bound == "own"
    assert rows["all shufflers"].epsilon_upper == 10.0  # no shuffler left: ε_l
    # with colluding users, fewer honest users than the claim assumed: not the claim
    assert rows["10 users"].epsilon_upper > 1.0
