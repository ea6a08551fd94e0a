"""The ``bound=`` argument: a forced amplification bound gets the automatic one's checks.

Every protocol that takes ``bound=`` (``ProtocolSpec.bound``, ``esa --bound``) goes through
:func:`protocols.resolve_bound` inside :func:`protocols.tightest_central` and
:func:`protocols.largest_local`: a named bound must exist, cover the randomizer family, hold
at the given n, δ and k, and (ε_c → ε_l) prove the target with its own forward map — the
checks the automatic choice applies to every candidate.
"""

from __future__ import annotations

import pytest

from protocols import (
    BOUNDS,
    AmplificationBound,
    BoundNotApplicable,
    HistKR,
    ParameterError,
    ProtocolSpec,
    build_protocol,
    largest_local,
    resolve_bound,
    tightest_central,
)

DELTA = 1e-6


def test_resolve_bound_lists_the_candidates() -> None:
    assert [b.name for b in resolve_bound(None, "krr")] == [
        b.name for b in BOUNDS.values() if b.applies_to("krr")
    ]
    assert [b.name for b in resolve_bound("thm4_balle", "krr")] == ["thm4_balle"]
    with pytest.raises(ParameterError, match="unknown bound 'nope'; choose one of:"):
        resolve_bound("nope", "krr")
    with pytest.raises(ValueError, match="unknown bound"):  # misuse errors are ValueErrors
        resolve_bound("nope", "krr")
    with pytest.raises(BoundNotApplicable, match="'thm3_cheu' does not cover generic"):
        resolve_bound("thm3_cheu", "generic")


@pytest.mark.parametrize("direction", ["central", "local"])
def test_a_named_bound_outside_its_range_is_refused_with_its_reason(direction: str) -> None:
    # Thm 1 needs n > 1000: at n = 500 the automatic choice passes it over, a forced one
    # must not be evaluated outside its theorem either.
    if direction == "central":
        with pytest.raises(BoundNotApplicable) as info:
            tightest_central(
                epsilon_local=0.1, n=500, delta=DELTA, family="generic", bound="thm1_erlingsson"
            )
    else:
        with pytest.raises(BoundNotApplicable) as info:
            largest_local(
                epsilon_central=0.5, n=500, delta=DELTA, family="generic", bound="thm1_erlingsson"
            )
    message = str(info.value)
    assert "bound 'thm1_erlingsson' does not apply" in message
    assert "needs n > 1000, got n=500" in message


def test_a_named_bound_whose_inverse_overshoots_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # An inverse that lands on the wrong side of its forward map: the automatic choice
    # passes it over, and a forced one must fail the same check instead of configuring a
    # protocol that states more than the target.
    def forward(eps: float, n: int, delta: float, k: int) -> float:
        return eps

    def inverse(eps: float, n: int, delta: float, k: int) -> float:
        return 2.0 * eps

    sloppy = AmplificationBound(
        name="sloppy_inverse",
        families=frozenset({"krr"}),
        citation="test",
        forward=forward,
        inverse=inverse,
    )
    monkeypatch.setitem(BOUNDS, sloppy.name, sloppy)
    auto = largest_local(epsilon_central=1.0, n=10_000, delta=DELTA, family="krr")
    assert auto[1] != "sloppy_inverse"
    with pytest.raises(BoundNotApplicable, match=r"'sloppy_inverse' does not apply.*proves only"):
        largest_local(
            epsilon_central=1.0, n=10_000, delta=DELTA, family="krr", bound="sloppy_inverse"
        )
    spec = ProtocolSpec(epsilon=1.0, delta=DELTA, n=10_000, domain=4, bound="sloppy_inverse")
    with pytest.raises(BoundNotApplicable, match="proves only"):
        build_protocol("hist_kr", spec)


def test_a_named_bound_that_applies_gives_what_the_automatic_choice_gives() -> None:
    eps_l, name = largest_local(epsilon_central=1.0, n=50_000, delta=DELTA, family="krr", k=4)
    forced = largest_local(
        epsilon_central=1.0, n=50_000, delta=DELTA, family="krr", k=4, bound=name
    )
    assert forced == (eps_l, name)
    assert tightest_central(
        epsilon_local=eps_l, n=50_000, delta=DELTA, family="krr", k=4, bound=name
    ) == tightest_central(epsilon_local=eps_l, n=50_000, delta=DELTA, family="krr", k=4)


@pytest.mark.parametrize("name", ["hist_kr", "cnt_rr", "hist_kr_frag", "rsum_kr"])
def test_every_protocol_path_refuses_a_named_bound_that_does_not_apply(name: str) -> None:
    spec = ProtocolSpec(epsilon=0.5, delta=DELTA, n=500, domain=4, bound="thm1_erlingsson")
    with pytest.raises(BoundNotApplicable, match="n > 1000"):
        build_protocol(name, spec)


def test_the_constructor_refuses_a_named_bound_that_does_not_apply() -> None:
    with pytest.raises(BoundNotApplicable, match="bound 'thm1_erlingsson' does not apply"):
        HistKR(domain=4, epsilon_local=0.1, n=500, delta=DELTA, bound="thm1_erlingsson")


@pytest.mark.parametrize("name", ["hist_kr_frag", "hist_kr"])
def test_a_named_bound_reaches_the_fragmenting_backstop(name: str) -> None:
    options: dict[str, float | str] = {} if name == "hist_kr_frag" else {"report_fragments": 3}
    spec = ProtocolSpec(
        epsilon=0.5, delta=DELTA, n=50_000, domain=4, bound="thm4_balle", options=options
    )
    protocol = build_protocol(name, spec)
    assert protocol.privacy.bound.startswith("thm4_balle ")  # ... on the backstop
    assert protocol.privacy.epsilon_central <= 0.5
