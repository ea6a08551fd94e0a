"""Measured lower bounds on real pipeline runs (simulations/_attacks.py).

Every measured ε must sit at or below the proven upper bound of the same scenario; a case
where it does not is a bug in the accountant (or the attack), not a flaky test: the runs are
seeded, so each number below is deterministic.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from protocols import CntRR, CollusionConfig, HistKR, ParameterError, collusion_scenarios
from simulations._attacks import (
    AttackSetup,
    _multiset_minus,
    clopper_pearson,
    distinguishing_attack,
    epsilon_lower_bound,
    protocol_family,
    replay_attack,
)

DELTA = 1e-3
TRIALS = 450


def test_clopper_pearson_edges_and_coverage() -> None:
    lo, hi = clopper_pearson(0, 100, 0.05)
    assert lo == 0.0
    assert hi == pytest.approx(1 - 0.05 ** (1 / 100))
    lo, hi = clopper_pearson(100, 100, 0.05)
    assert hi == 1.0
    assert lo == pytest.approx(0.05 ** (1 / 100))
    lo, hi = clopper_pearson(30, 100, 0.025)
    assert stats.binom.sf(29, 100, lo) == pytest.approx(0.025, rel=1e-6)
    assert stats.binom.cdf(30, 100, hi) == pytest.approx(0.025, rel=1e-6)
    with pytest.raises(ParameterError):
        clopper_pearson(5, 3, 0.05)


def test_epsilon_lower_bound_is_conservative() -> None:
    # Perfect separation with 1000 trials each: ε ≥ ln(TPR_lo / FPR_hi) > 0, finite.
    eps = epsilon_lower_bound(hits_1=1000, trials_1=1000, hits_0=0, trials_0=1000, delta=1e-6)
    assert 5.0 < eps < 10.0
    # No separation: nothing can be claimed.
    assert epsilon_lower_bound(hits_1=500, trials_1=1000, hits_0=500, trials_0=1000, delta=0) == 0


def test_multiset_minus() -> None:
    a = np.array([1, 2, 2, 3, 3, 3])
    assert sorted(_multiset_minus(a, np.array([2, 3, 3, 4])).tolist()) == [1, 2, 3]
    rows = np.array([[1, 2], [1, 2], [3, 4]])
    assert _multiset_minus(rows, np.array([[1, 2]])).tolist() == [[1, 2], [3, 4]]


def _upper(proto: CntRR, setup: AttackSetup) -> float:
    family, k, _ = protocol_family(proto)
    cfg = CollusionConfig(
        family=family,
        k=k,
        n=setup.n,
        epsilon_local=proto.privacy.epsilon_local,
        delta=setup.delta,
        shufflers=setup.shufflers,
        fake_reports=setup.fake_reports,
        colluding_users=setup.colluding_users,
        colluding_shufflers=setup.colluding_shufflers,
    )
    want = (setup.colluding_users, setup.colluding_shufflers)
    for sc in collusion_scenarios(cfg):
        if (sc.colluding_users, sc.colluding_shufflers) == want:
            return sc.epsilon_upper
    raise AssertionError(f"no scenario for {want}")


@pytest.mark.parametrize(
    ("users", "shufflers_colluding", "min_lower"),
    [
        (0, 2, 1.2),  # the chain is traced: the victim's bit alone (ε_l = 2)
        (19, 1, 0.3),  # MURS's scenario: 3 honest fakes are all that is left
        (0, 0, 0.0),  # nobody colludes
    ],
)
def test_lower_never_above_upper(users: int, shufflers_colluding: int, min_lower: float) -> None:
    proto = CntRR(epsilon_local=2.0, n=20, delta=DELTA)
    setup = AttackSetup(
        n=20,
        shufflers=2,
        fake_reports=3,
        colluding_users=users,
        colluding_shufflers=shufflers_colluding,
        delta=DELTA,
        trials=TRIALS,
        seed=7,
    )
    res = distinguishing_attack(proto, setup)
    upper = _upper(proto, setup)
    assert res.epsilon_lower <= upper
    assert res.epsilon_lower >= min_lower  # the attack has power where it should


def test_histogram_protocol_attack() -> None:
    proto = HistKR(domain=4, epsilon_local=2.5, n=15, delta=DELTA)
    setup = AttackSetup(
        n=15, shufflers=2, fake_reports=4, colluding_users=14, colluding_shufflers=1,
        delta=DELTA, trials=TRIALS, seed=3,
    )  # fmt: skip
    res = distinguishing_attack(proto, setup)
    assert 0.2 < res.epsilon_lower <= _upper(proto, setup)


def test_replay_raises_epsilon_and_protection_drops_replays() -> None:
    # n = 100 at ε_l = 2.5: the shuffle amplifies to ε ≈ 1.3; replays undo it toward ε_l.
    proto = CntRR(epsilon_local=2.5, n=100, delta=DELTA)
    kw = {"n": 100, "delta": DELTA, "trials": TRIALS, "seed": 11}
    measured = {}
    for copies in (0, 4, 16):
        res, upper = replay_attack(proto, copies=copies, replay_protection=False, **kw)
        measured[copies] = res.epsilon_lower
        assert res.epsilon_lower <= upper
        assert res.replayed_dropped == 0
    # ε rises with the number of replays (thresholds stated with margin).
    assert measured[0] < 0.3
    assert measured[4] > measured[0] + 0.5
    assert measured[16] > measured[4] + 0.3
    base_upper = replay_attack(proto, copies=0, replay_protection=True, **kw)[1]
    res, upper = replay_attack(proto, copies=16, replay_protection=True, **kw)
    assert res.replayed_dropped == 16  # the first shuffler dropped every copy
    assert upper == base_upper  # the bound is unchanged
    assert res.epsilon_lower <= min(upper, 0.3)
    assert math.isfinite(upper)


def test_attack_rejects_what_it_cannot_audit() -> None:
    with pytest.raises(ParameterError, match="colluding_users"):
        AttackSetup(n=5, colluding_users=5)
    with pytest.raises(ParameterError, match="trials"):
        AttackSetup(n=5, trials=10)


def test_protocol_family_declared_hashed_or_generic() -> None:
    from protocols import ProtocolSpec, build_protocol

    assert protocol_family(CntRR(epsilon_local=1.0, n=100, delta=DELTA))[:2] == ("krr", 2)
    assert protocol_family(HistKR(domain=5, epsilon_local=1.0, n=100, delta=DELTA))[:2] == (
        "krr",
        5,
    )
    spec = ProtocolSpec(epsilon=1.0, delta=1e-6, n=20_000, domain=16, fake_reports=30)
    murs = build_protocol("murs", spec)
    family, k, note = protocol_family(murs)
    assert family == "krr"
    assert k == murs.params.g  # type: ignore[attr-defined]
    assert "hash" in note
    family, _, note = protocol_family(build_protocol("cnt_pure", spec))
    assert family == "generic"
    assert "generic" in note
