"""Per-protocol one-epoch profiles and their composition (protocols.accounting._profiles)."""

from __future__ import annotations

import math

import pytest

from protocols import BoundNotApplicable, ParameterError, ProtocolSpec, build_protocol
from protocols.accounting import (
    PrivacyProfile,
    compose,
    compose_protocols,
    fit_budget,
    krr_profile,
    protocol_profile,
    scenario_epsilon_over_epochs,
    stronger_clone_profile,
)


def _build(name: str, **kw: object) -> object:
    base: dict[str, object] = {"epsilon": 1.0, "delta": 1e-6, "n": 10_000, "domain": 8}
    base.update(kw)
    return build_protocol(name, ProtocolSpec(**base))  # type: ignore[arg-type]


def test_krr_profile_is_the_stronger_clone_pair() -> None:
    p = _build("hist_kr")
    prof = protocol_profile(p)  # type: ignore[arg-type]
    assert prof.kind == "pair"
    assert "stronger clone" in prof.description
    eps_l = p.privacy.epsilon_local  # type: ignore[attr-defined]
    ref = stronger_clone_profile(eps_l, 9_999, k=8)
    assert prof.epsilon(1e-6) == pytest.approx(ref.epsilon(1e-6), rel=1e-12)
    # A valid pair: its one-epoch ε is at least the tightest accountant's claim.
    assert prof.epsilon(1e-6) >= p.privacy.epsilon_central * (1 - 1e-6)  # type: ignore[attr-defined]
    assert prof.epsilon(1e-6) < eps_l


def test_krr_tiny_population_falls_back_to_local_pair() -> None:
    p = _build("hist_kr", n=2, epsilon=5.0, delta=0.1)
    prof = protocol_profile(p)  # type: ignore[arg-type]
    local = krr_profile(p.privacy.epsilon_local, 8)  # type: ignore[attr-defined]
    assert prof.epsilon(0.1) <= local.epsilon(0.1) + 1e-12


def test_no_local_guarantee_gives_the_claimed_point() -> None:
    p = _build("cnt_bn")
    prof = protocol_profile(p)  # type: ignore[arg-type]
    assert prof.kind == "point"
    assert prof.points == ((p.privacy.epsilon_central, p.privacy.delta),)  # type: ignore[attr-defined]


def test_compose_protocols_several_metrics_and_methods() -> None:
    a, b = _build("hist_kr"), _build("cnt_bn", epsilon=0.5)
    res = compose_protocols([(a, 30), (b, 20)], delta=1e-4)  # type: ignore[list-item]
    g = res.guarantee
    assert g.epochs == 50
    assert [m.protocol for m in res.metrics] == ["hist_kr", "cnt_bn"]
    assert g.method == "pld_envelope"  # a pair and a point
    assert g.epsilon_total < g.epsilon_naive
    # Composition is monotone: the two metrics cost more than either alone.
    alone = compose_protocols([(a, 30)], delta=1e-4).guarantee.epsilon_total  # type: ignore[list-item]
    assert g.epsilon_total > alone


def test_single_epoch_keeps_the_tighter_claim() -> None:
    p = _build("hist_kr")
    res = compose_protocols([(p, 1)], delta=1e-6)  # type: ignore[list-item]
    # One epoch: the protocol's own (ε_c, δ) claim is tighter than the clone pair.
    assert res.guarantee.epsilon_total == pytest.approx(p.privacy.epsilon_central, rel=1e-9)  # type: ignore[attr-defined]
    assert res.metrics[0].kind == "point"


def test_dropouts_raise_the_stated_epsilon() -> None:
    p = _build("hist_kr")
    full = protocol_profile(p).epsilon(1e-6)  # type: ignore[arg-type]
    half = protocol_profile(p, arrived_fraction=0.5)  # type: ignore[arg-type]
    assert "5000 of 10000 users arrived" in half.description
    ref = stronger_clone_profile(p.privacy.epsilon_local, 4_999, k=8)  # type: ignore[attr-defined]
    assert half.epsilon(1e-6) == pytest.approx(ref.epsilon(1e-6), rel=1e-12)
    assert half.epsilon(1e-6) > full


def test_dropouts_use_the_protocols_own_accountant() -> None:
    p = _build("cnt_bn")
    prof = protocol_profile(p, arrived_fraction=0.5)  # type: ignore[arg-type]
    own = p.honest_users_bound(4_999)  # type: ignore[attr-defined]
    assert prof.points[0][0] == pytest.approx(own.epsilon_upper)
    assert own.epsilon_upper > p.privacy.epsilon_central  # type: ignore[attr-defined]


def test_dropouts_without_an_accountant_state_nothing() -> None:
    p = _build("hist_mm")
    with pytest.raises(BoundNotApplicable):
        protocol_profile(p, arrived_fraction=0.5)  # type: ignore[arg-type]
    with pytest.raises(ParameterError):
        protocol_profile(p, arrived_fraction=0.0)  # type: ignore[arg-type]


def test_fit_budget_inverts_compose() -> None:
    def make(eps: float) -> list[tuple[PrivacyProfile, int]]:
        return [(krr_profile(eps, 4), 20)]

    eps, got = fit_budget(make, 5.0, 1e-5, lower=0.01, upper=5.0)
    assert got.epsilon_total <= 5.0
    over = compose(make(eps * 1.01), delta=1e-5).epsilon_total
    assert over > 5.0
    with pytest.raises(ParameterError):
        fit_budget(make, 1e-6, 1e-5, lower=0.01, upper=5.0)


def test_scenario_over_epochs_traced_chain_is_local_pair() -> None:
    eps, how = scenario_epsilon_over_epochs(
        family="krr", k=4, epsilon_local=2.0, honest_users=None, honest_fakes=0,
        epsilon_upper=2.0, delta=1e-6, epochs=50, delta_total=1e-4,
    )  # fmt: skip
    ref = compose([(krr_profile(2.0, 4), 50)], delta=1e-4).epsilon_total
    assert eps == pytest.approx(min(ref, 100.0))
    assert eps < 100.0
    assert "pld" in how
    none, _ = scenario_epsilon_over_epochs(
        family="generic", k=2, epsilon_local=math.inf, honest_users=None, honest_fakes=0,
        epsilon_upper=math.inf, delta=1e-6, epochs=5, delta_total=1e-4,
    )  # fmt: skip
    assert none == math.inf
