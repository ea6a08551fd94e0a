"""A forced Split-Mix share count (``--option shares=M``) below what the stated (ε, δ) needs is
refused, for RSum_DSG and DisEle; more shares than needed keep the same guarantee.

Until 2026-11-30 the option changed m and kept the statement: QA computed the exact ε at the
stated δ of the shares' view as 2.44 for rsum_dsg n = 3, ε = 1, δ = 10⁻⁶, shares = 2, and
1.17 for disele n = 8, d = 2, ε_c = 0.1, δ = 10⁻⁹, shares = 3. The DisEle half is checked
against an exact reference here: the hockey-stick divergence of the per-label counts of
one-shares (the analyzer's whole view for d = 2), for every composition of the other users.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from protocols import DisEle, ParameterError, ProtocolSpec, RSumDSG, ShareSpec, build_protocol
from protocols._disele import (
    DisEleParams,
    disele_default_shares,
    share_distance_bound,
    shares_delta,
)

# --- RSum_DSG: the minimum is ShareSpec.shares_for (Balle et al.'s Split-Mix bound) -------


def _dsg_need(epsilon: float, delta: float, n: int) -> int:
    proto = RSumDSG(epsilon=epsilon, delta=delta, n=n)
    sigma = math.log2((1 + math.exp(epsilon)) / delta)
    assert proto.sigma == pytest.approx(sigma, rel=1e-12)
    return ShareSpec.shares_for(sigma=sigma, modulus=proto.q, users=n)


@pytest.mark.parametrize(
    ("epsilon", "delta", "n"), [(1.0, 1e-6, 3), (1.0, 1e-6, 1000), (0.1, 1e-9, 20)]
)
def test_dsg_refuses_fewer_shares_than_its_delta_needs(
    epsilon: float, delta: float, n: int
) -> None:
    need = _dsg_need(epsilon, delta, n)
    assert RSumDSG(epsilon=epsilon, delta=delta, n=n).m == need
    for forced in (2, need - 1):
        with pytest.raises(ParameterError, match=rf"rsum_dsg: shares={forced} .*shares >= {need}"):
            RSumDSG(epsilon=epsilon, delta=delta, n=n, shares=forced)
        spec = ProtocolSpec(epsilon=epsilon, delta=delta, n=n, options={"shares": forced})
        with pytest.raises(ParameterError, match=rf"use shares >= {need} or omit the option"):
            build_protocol("rsum_dsg", spec)


def test_dsg_qa_configuration_is_refused_with_the_minimum_named() -> None:
    spec = ProtocolSpec(epsilon=1.0, delta=1e-6, n=3, options={"shares": 2})
    with pytest.raises(ParameterError) as info:
        build_protocol("rsum_dsg", spec)
    need = _dsg_need(1.0, 1e-6, 3)
    assert f"shares >= {need}" in str(info.value)
    assert "2^-21.8-close" in str(info.value)  # σ = log₂((1 + e)/10⁻⁶)


def test_dsg_accepts_the_minimum_and_more_with_the_same_guarantee() -> None:
    default = RSumDSG(epsilon=1.0, delta=1e-6, n=1000)
    for forced in (default.m, default.m + 5):
        proto = RSumDSG(epsilon=1.0, delta=1e-6, n=1000, shares=forced)
        assert proto.m == proto.messages_per_user == forced
        assert proto.share_spec == ShareSpec(modulus=default.q, shares=forced)
        got, want = proto.privacy, default.privacy
        assert (got.epsilon_central, got.delta) == (want.epsilon_central, want.delta) == (1.0, 1e-6)


@pytest.mark.parametrize("n", [3, 10, 1000, 10**6])
@pytest.mark.parametrize(("epsilon", "delta"), [(1e-6, 0.999), (1.0, 1e-6), (700.0, 0.5)])
def test_dsg_share_count_is_the_formula_never_its_floor(
    epsilon: float, delta: float, n: int
) -> None:
    # shares_for returns max(2, ⌈bound⌉); its known weak point is the floor at tiny σ and q
    # (q = 2, n = 40, σ = 1). RSum_DSG has σ > 1 and log₂ q > log₂ n, so the bound itself
    # exceeds 2 and δ comes from the formula, not from the floor.
    proto = RSumDSG(epsilon=epsilon, delta=delta, n=n)
    assert proto.sigma > 1
    bound = (2 * proto.sigma + math.log2(proto.q)) / (math.log2(n) - math.log2(math.e)) + 1
    assert bound > 2
    assert proto.m == math.ceil(bound)


# --- DisEle: the minimum is disele_default_shares (the proven share_distance_bound) -------


@pytest.mark.parametrize(
    ("n", "epsilon_c", "delta", "forced"),
    [(8, 0.1, 1e-9, 3), (5, 1.0, 1e-6, 2), (200, 1.0, 1e-6, 4)],
)
def test_disele_refuses_shares_further_than_delta_from_an_ideal_sum(
    n: int, epsilon_c: float, delta: float, forced: int
) -> None:
    need = disele_default_shares(n, delta, epsilon_c)
    distance = share_distance_bound(n, forced)
    cost = shares_delta(n, forced, epsilon_c)
    # Two labels change, each side's view is 2η from its ideal: δ = 2(1 + e^{ε_c})η.
    assert cost == pytest.approx(2 * (1 + math.exp(epsilon_c)) * distance, rel=1e-12)
    assert cost > delta
    spec = ProtocolSpec(epsilon=epsilon_c, delta=delta, n=n, domain=2, options={"shares": forced})
    with pytest.raises(ParameterError) as info:
        build_protocol("disele", spec)
    msg = str(info.value)
    assert msg == (
        f"disele: shares={forced} bounds the shares' distance from an ideal sum at n={n} only "
        f"by {distance:.2g}, which costs delta {cost:.2g} > {delta:g} at epsilon={epsilon_c:g}; "
        f"use shares >= {need} or omit the option"
    )
    with pytest.raises(ParameterError, match=f"use shares >= {need}"):
        DisEle(domain=2, epsilon=epsilon_c / 2, n=n, delta=delta, shares=need - 1)


def test_disele_accepts_the_minimum_and_more_with_the_same_guarantee() -> None:
    default = DisEle(domain=4, epsilon=0.5, n=200, delta=1e-6)
    need = disele_default_shares(200, 1e-6, 1.0)
    assert default.params.shares == need
    for forced in (need, need + 3):
        proto = DisEle(domain=4, epsilon=0.5, n=200, delta=1e-6, shares=forced)
        assert proto.messages_per_user == 4 * forced
        assert proto.privacy == default.privacy


def test_disele_bounds_on_shares_keep_their_own_messages() -> None:
    with pytest.raises(ParameterError, match="shares must be"):
        DisEle(domain=2, epsilon=1.0, n=10, delta=1e-6, shares=1)
    with pytest.raises(ParameterError, match="shares=4096 exceeds 2048"):
        DisEle(domain=2, epsilon=1.0, n=10, delta=1e-6, shares=4096)


def _ones_law(m: int, holders: int, others: int, flip: float) -> np.ndarray:
    """Law of the number of one-shares among the m-share splits of one label's bits: holders
    send Ber(1/2), the others Ber(flip); a bit y's m shares are uniform of parity y."""
    v = np.arange(m + 1)
    comb = np.array([math.comb(m, int(i)) for i in v], dtype=np.float64) / 2.0 ** (m - 1)

    def per_user(p_one: float) -> np.ndarray:
        return np.where(v % 2 == 1, p_one, 1.0 - p_one) * comb

    law = np.array([1.0])
    for _ in range(holders):
        law = np.convolve(law, per_user(0.5))
    for _ in range(others):
        law = np.convolve(law, per_user(flip))
    return law


def _exact_delta(n: int, m: int, epsilon_c: float) -> float:
    """max over neighbours of the hockey-stick divergence at e^{ε_c} of DisEle's view for
    d = 2: the victim moves from value 0 to value 1, c of the others hold 0."""
    flip = DisEleParams(domain=2, epsilon=epsilon_c / 2, n=n, delta=0.5, shares=m).flip_probability
    worst = 0.0
    for c in range(n):
        view = np.outer(_ones_law(m, c + 1, n - c - 1, flip), _ones_law(m, n - c - 1, c + 1, flip))
        other = np.outer(_ones_law(m, c, n - c, flip), _ones_law(m, n - c, c, flip))
        for a, b in ((view, other), (other, view)):
            worst = max(worst, float(np.maximum(a - math.exp(epsilon_c) * b, 0.0).sum()))
    return worst


@pytest.mark.parametrize(
    ("n", "epsilon_c", "delta", "forced"), [(5, 1.0, 1e-6, 2), (8, 0.1, 1e-9, 3)]
)
def test_disele_refused_counts_break_the_statement_and_the_minimum_keeps_it(
    n: int, epsilon_c: float, delta: float, forced: int
) -> None:
    # Slow exact reference: what the refusal protects is real (the forced count's view is not
    # (ε_c, δ)-DP), and the count it asks for instead is.
    assert _exact_delta(n, forced, epsilon_c) > delta
    need = disele_default_shares(n, delta, epsilon_c)
    proto = build_protocol(
        "disele",
        ProtocolSpec(epsilon=epsilon_c, delta=delta, n=n, domain=2, options={"shares": need}),
    )
    assert proto.privacy.epsilon_central == pytest.approx(epsilon_c)
    assert _exact_delta(n, need, epsilon_c) <= proto.privacy.delta == delta
