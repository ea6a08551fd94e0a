"""Lower bounds printed by ``esa audit`` hold at the audit's δ (not only at δ = 0).

A lower bound at δ must mean: the mechanism is not (ε', δ)-DP for any ε' below it. Each
protocol's ``honest_users_lower`` is checked here against the exact ε(δ) of the same
neighbouring pair, computed independently (direct convolution or Fourier inversion, then
:func:`protocols.epsilon_for_pair`), with the honest fakes of the scenario included.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import simulations._audit as audit_module
from protocols import HonestUsersBound, ProtocolSpec, build_protocol
from protocols._cnt_pure import (
    CntPURE,
    composed_lower_epsilon,
    product_lower_epsilon,
    user_laws,
)
from protocols._cnt_sgm import CntSGM, CntSGMSplitMix
from protocols._rsum_pure import RSumPURE
from protocols.accounting._collusion import CollusionConfig, collusion_scenarios, pair_lower_epsilon
from protocols.accounting._laws import epsilon_for_pair
from simulations.cli import main


def _log(p: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore"):
        return np.asarray(np.log(np.clip(p, 0.0, None)))


def _exact(p: np.ndarray, q: np.ndarray, delta: float) -> float:
    return epsilon_for_pair(_log(p.ravel()), _log(q.ravel()), delta)


def _binom(f: int) -> np.ndarray:
    from scipy import stats

    return np.asarray(stats.binom.pmf(np.arange(f + 1), f, 0.5))


# --- the generic tool ------------------------------------------------------------------


def test_pair_lower_epsilon_is_exact_on_full_laws_and_below_it_when_truncated() -> None:
    rng = np.random.default_rng(1)
    for trial in range(40):
        # concentration 0.3: cells down to ~1e-20, where the round-off allowance shows
        conc = 1.0 if trial % 2 else 0.3
        p = rng.dirichlet(np.full(30, conc))
        q = rng.dirichlet(np.full(30, conc))
        for delta in (1e-6, 1e-3, 0.1, 0.5):
            exact = _exact(p, q, delta)
            got = pair_lower_epsilon(p, q, delta)
            assert got <= exact + 1e-12
            if conc == 1.0:
                assert got == pytest.approx(exact, rel=1e-6, abs=1e-9)
            cut = np.arange(30) < 25  # drop cells: the bound stays below the exact value
            assert pair_lower_epsilon(p * cut, q * cut, delta) <= exact + 1e-12


def test_composed_lower_epsilon_brackets_composed_randomized_response() -> None:
    """t-fold binary RR: the number of flipped coordinates is sufficient, so the exact ε(δ)
    of the composition is the pair of binomials."""
    from scipy import stats

    eps0 = 0.4
    p = np.array([math.exp(eps0), 1.0]) / (1.0 + math.exp(eps0))
    q = p[::-1].copy()
    for t, delta in ((1, 1e-6), (6, 1e-6), (6, 0.01), (12, 1e-3)):
        k = np.arange(t + 1)
        exact = _exact(stats.binom.pmf(k, t, p[0]), stats.binom.pmf(k, t, q[0]), delta)
        got = composed_lower_epsilon(p, q, delta, times=t)
        assert exact - t * 1e-3 - 1e-9 <= got <= exact + 1e-9


def test_product_lower_epsilon_brackets_the_exact_product_of_unequal_pairs() -> None:
    """Two (and three) unequal random pairs: the bound lies within k·10⁻³ below the exact
    ε(δ) of the product laws (outer product, brute force), never above it, and stays below
    it when the factors' laws are truncated."""
    rng = np.random.default_rng(7)
    for trial in range(12):
        k = 2 if trial < 8 else 3
        pairs = [(rng.dirichlet(np.ones(s)), rng.dirichlet(np.ones(s))) for s in (6, 9, 4)[:k]]
        p_prod, q_prod = np.ones(1), np.ones(1)
        for p, q in pairs:
            p_prod, q_prod = np.outer(p_prod, p).ravel(), np.outer(q_prod, q).ravel()
        for delta in (0.0, 1e-6, 1e-3, 0.1):
            # ε(0): the largest |privacy loss| (all cells are positive here)
            llr = np.abs(np.log(p_prod) - np.log(q_prod))
            exact = float(llr.max()) if delta == 0.0 else _exact(p_prod, q_prod, delta)
            got = product_lower_epsilon(pairs, delta)
            assert exact - k * 1e-3 - 1e-9 <= got <= exact + 1e-9
            cut = [(p * (np.arange(p.size) > 0), q * (np.arange(q.size) > 0)) for p, q in pairs]
            assert product_lower_epsilon(cut, delta) <= exact + 1e-9


def test_product_lower_epsilon_of_identical_pairs_is_the_composed_bound() -> None:
    """Where both apply (identical factors) the two agree to 10⁻¹² (one code path: the
    identical case was checked bit for bit against the former t-fold code when the product
    was introduced)."""
    c = CntPURE(epsilon=0.5, n=50, messages=15).bit
    q0, q1 = user_laws(c.lam, c.tau, omega=c.omega)
    for t in (1, 2, 5):
        for delta in (0.0, 1e-6, 0.05):
            assert product_lower_epsilon([(q0, q1)] * t, delta) == pytest.approx(
                composed_lower_epsilon(q0, q1, delta, times=t), abs=1e-12
            )
    with pytest.raises(ValueError, match="at least one"):
        product_lower_epsilon([], 1e-6)
    with pytest.raises(ValueError, match="one shape"):
        product_lower_epsilon([(q0, q1[:-1])], 1e-6)


# --- Cnt_SGM over Split-Mix: the sum T --------------------------------------------------


def _sum_law_fft(p: CntSGM, honest: int) -> np.ndarray:
    """Law of M = Σ B_i η_i over ``honest`` users by Fourier inversion of ψ^h (N = 2^14)."""
    a, lam = p.params.alpha, p.params.lam
    size = 1 << 14
    theta = 2 * np.pi * np.arange(size) / size
    psi = 1 - lam + lam * (1 - a) ** 2 / (1 - 2 * a * np.cos(theta) + a * a)
    law = np.fft.ifft(psi**honest).real
    return np.clip(np.fft.fftshift(law), 0.0, None)


def test_splitmix_lower_bound_at_delta_is_the_exact_sum_epsilon() -> None:
    """The defect: 0.667 (pure ε_T, the far tail's likelihood ratio) was printed as the
    lower bound at δ = 10⁻⁶; the exact ε(δ) of the sum is ≈ 0.264."""
    p = build_protocol("cnt_sgm", ProtocolSpec(1.0, 1e-6, 10_000, options={"encoding": "splitmix"}))
    assert isinstance(p, CntSGMSplitMix)
    law = _sum_law_fft(p, 10_000)
    zero = np.zeros(2)
    exact = _exact(np.concatenate([law, zero]), np.concatenate([zero, law]), 1e-6)
    assert exact == pytest.approx(0.264, abs=2e-3)
    low = p.honest_users_lower(9_999, fakes=0, delta=1e-6)
    assert low is not None
    assert low[0] <= exact + 1e-6
    assert low[0] == pytest.approx(exact, abs=1e-4)
    assert low[0] < p.sum_epsilon - 0.3  # far below the pure ε_T it used to print
    gamma = build_protocol(
        "cnt_sgm",
        ProtocolSpec(1.0, 1e-6, 10_000, options={"encoding": "splitmix", "gamma": 0.5}),
    )
    assert isinstance(gamma, CntSGMSplitMix)
    low_g = gamma.honest_users_lower(9_999, fakes=0, delta=1e-6)
    assert low_g is not None
    assert low_g[0] < gamma.sum_epsilon - 0.2  # was "0.333 exactly"


# --- Cnt_SGM, unary view -------------------------------------------------------------


def _sgm_user(sign: int, lam: float, alpha: float, width: int) -> dict[int, float]:
    ks = np.arange(-width, width + 1)
    sg = (1 - alpha) / (1 + alpha) * alpha ** np.abs(ks)
    law = {int(sign + k): lam * float(w) for k, w in zip(ks, sg, strict=True)}
    law[sign] += 1 - lam
    return law


def _sgm_view_direct(victim: int, others: int, fakes: int, p: CntSGM, size: int) -> np.ndarray:
    """Law of (#(+1), #(−1)) by direct 2-D convolution, one user (and fake) at a time."""
    lam, alpha = p.params.lam, p.params.alpha
    grid = np.zeros((size, size))
    grid[0, 0] = 1.0
    laws = [_sgm_user(victim, lam, alpha, 60)] + [_sgm_user(-1, lam, alpha, 60)] * others
    laws += [{1: 0.5, -1: 0.5}] * fakes
    for law in laws:
        new = np.zeros_like(grid)
        for y, w in law.items():
            if y >= 0:
                new[y:, :] += w * grid[: size - y, :]
            else:
                new[:, -y:] += w * grid[:, : size + y]
        grid = new
    return grid


@pytest.mark.parametrize(("others", "fakes"), [(0, 0), (0, 20), (30, 0), (30, 7)])
def test_cnt_sgm_unary_lower_bound_is_the_exact_pair_value(others: int, fakes: int) -> None:
    p = CntSGM(epsilon=1.0, n=40)
    size = others + fakes + 130
    g0 = _sgm_view_direct(-1, others, fakes, p, size)
    g1 = _sgm_view_direct(1, others, fakes, p, size)
    for delta in (1e-6, 1e-3):
        exact = _exact(g0, g1, delta)
        low = p.honest_users_lower(others, fakes=fakes, delta=delta)
        assert low is not None
        assert low[0] <= exact + 1e-7
        assert low[0] == pytest.approx(exact, abs=1e-5)


def test_cnt_sgm_with_fakes_states_no_lower_bound_above_the_exact_pair() -> None:
    """The defect: 6.662 ("no +1 message", pure) was printed with 20 and 60 honest fair ±1
    fakes; at δ = 10⁻⁶ the victim plus 20 fakes has exact ε ≈ 2.99, plus 60 fakes ≈ 1.20,
    and more honest users only lower it (post-processing)."""
    # the unary encoding (no longer the default), whose messages the exact pair models
    unary = {"encoding": "unary"}
    p = build_protocol("cnt_sgm", ProtocolSpec(1.0, 1e-6, 10_000, fake_reports=60, options=unary))
    assert isinstance(p, CntSGM)
    pair = {}
    for fakes in (20, 60):
        size = fakes + 130
        pair[fakes] = _exact(
            _sgm_view_direct(-1, 0, fakes, p, size), _sgm_view_direct(1, 0, fakes, p, size), 1e-6
        )
    assert pair[20] == pytest.approx(2.99, abs=0.01)
    assert pair[60] == pytest.approx(1.20, abs=0.02)
    out = audit_module.audit(
        protocol_name="cnt_sgm", n=10_000, epsilon=1.0, delta=1e-6, domain=2, shufflers=3,
        fake_reports=20, colluding_users=0, colluding_shufflers=0, options=unary,
    )  # fmt: skip
    rows = {r["scenario"]: r for r in out["scenarios"]}
    assert rows["m-1 shufflers + all other users"]["epsilon_lower"] <= pair[20] + 1e-6
    assert rows["m-1 shufflers + all other users"]["epsilon_lower"] > pair[20] - 1e-4
    assert rows["none"]["epsilon_lower"] <= pair[60] + 1e-6
    for r in out["scenarios"]:
        if r["honest_fakes"]:
            assert r["epsilon_lower"] < p.no_plus_epsilon - 3.0
    assert out["violations"] == []


# --- Cnt_PURE -------------------------------------------------------------------------


def test_cnt_pure_lower_bound_counts_the_fakes() -> None:
    """Direct law of the count with the fakes: the lower bound at δ is its exact ε(δ)."""
    p = CntPURE(epsilon=1.0, n=13, messages=7)
    b = p.bit
    q0, q1 = user_laws(b.lam, b.tau, omega=b.omega)
    for others, fakes in ((0, 0), (12, 0), (12, 40)):
        crowd = np.ones(1)
        for _ in range(others):
            crowd = np.convolve(crowd, q0)
        crowd = np.convolve(crowd, _binom(fakes))
        for delta in (1e-6, 1e-2, 0.5):
            exact = _exact(np.convolve(crowd, q0), np.convolve(crowd, q1), delta)
            low = p.honest_users_lower(others, fakes=fakes, delta=delta)
            assert low is not None
            assert low[0] <= exact + 1e-9
            assert low[0] == pytest.approx(exact, abs=1e-7)
    with_fakes = p.honest_users_lower(12, fakes=40, delta=1e-6)
    without = p.honest_users_lower(12, fakes=0, delta=1e-6)
    assert with_fakes is not None
    assert without is not None
    assert with_fakes[0] < without[0]


def test_cnt_pure_audit_at_large_delta_reports_no_bug(capsys: pytest.CaptureFixture[str]) -> None:
    """The defect: at δ = 0.5 the pure ratio 0.974 was compared with fmt21's 0.438 (valid at
    δ = 0.5) and reported as a "measured" BUG, exit 1."""
    argv = ["audit", "--protocol", "cnt_pure", "--n", "400", "--epsilon", "1", "--delta", "0.5"]
    assert main(argv) == 0
    assert "BUG" not in capsys.readouterr().err
    assert main([*argv, "--json"]) == 0
    import json

    out = json.loads(capsys.readouterr().out)
    assert out["violations"] == []
    for r in out["scenarios"]:
        if r["epsilon_lower"] is not None:
            assert r["epsilon_lower"] <= r["epsilon_upper"]


def test_rsum_pure_lower_bound_is_below_its_upper_bound() -> None:
    p = build_protocol("rsum_pure", ProtocolSpec(1.0, 1e-6, 1_000))
    up = p.honest_users_bound(999)
    low = p.honest_users_lower(999, fakes=0, delta=1e-6)  # type: ignore[attr-defined]
    more = p.honest_users_lower(999, fakes=200, delta=1e-6)  # type: ignore[attr-defined]
    assert up is not None
    assert low is not None
    assert more is not None
    assert 0.0 < more[0] <= low[0] <= up.epsilon_upper


def test_rsum_pure_unequal_digits_lower_bound_is_the_exact_product_epsilon() -> None:
    """The optimal allocation's digits differ (ε_j, λ_j, τ_j): the lower bound at δ against
    the exact ε(δ) of the product of the digits' full count laws (direct convolution,
    outer product), honest fakes included."""
    p = RSumPURE(epsilon=1.0, n=9, precision=2, messages=5, allocation="optimal")
    assert p.digit_epsilons[0] != p.digit_epsilons[1]
    for others, fakes in ((0, 0), (8, 0), (8, 6)):
        p0, p1 = np.ones(1), np.ones(1)
        for c in p.counters:
            q0, q1 = user_laws(c.lam, c.tau, omega=c.omega)
            crowd = np.ones(1)
            for _ in range(others):
                crowd = np.convolve(crowd, q0)
            crowd = np.convolve(crowd, _binom(fakes))
            p0 = np.outer(p0, np.convolve(crowd, q0)).ravel()
            p1 = np.outer(p1, np.convolve(crowd, q1)).ravel()
        for delta in (1e-6, 1e-2, 0.5):
            exact = _exact(p0, p1, delta)
            low = p.honest_users_lower(others, fakes=fakes, delta=delta)
            assert low is not None
            assert exact - 2e-3 - 1e-7 <= low[0] <= exact + 1e-9


def test_rsum_pure_even_split_lower_bound_is_below_its_upper_bound() -> None:
    p = RSumPURE(epsilon=1.0, n=1_000, allocation="even")
    up = p.honest_users_bound(999)
    low = p.honest_users_lower(999, fakes=0, delta=1e-6)
    more = p.honest_users_lower(999, fakes=200, delta=1e-6)
    assert up is not None
    assert low is not None
    assert more is not None
    assert 0.0 < more[0] <= low[0] <= up.epsilon_upper


# --- the audit's plumbing --------------------------------------------------------------


def test_collusion_takes_lower_bounds_at_delta_with_the_scenarios_fakes() -> None:
    calls: list[tuple[int, int, float]] = []

    def lower(users: int, fakes: int, delta: float) -> tuple[float, str]:
        calls.append((users, fakes, delta))
        return 0.01 * fakes, "pair"

    cfg = CollusionConfig(
        family="generic", k=2, n=50, epsilon_local=3.0, delta=1e-5, shufflers=2, fake_reports=4,
        honest_bound=lambda h: HonestUsersBound(2.5, "own"),
        honest_lower=lower,
    )  # fmt: skip
    rows = {r.scenario: r for r in collusion_scenarios(cfg)}
    assert rows["none"].epsilon_lower == pytest.approx(0.08)  # 2 honest shufflers × 4 fakes
    assert rows["m-1 shufflers"].epsilon_lower == pytest.approx(0.04)
    assert rows["all shufflers"].epsilon_lower == 0.0  # the victim's messages alone
    assert {d for _, _, d in calls} == {1e-5}
    assert (49, 8) in {(u, f) for u, f, _ in calls}


def test_violation_message_says_lower_bound_not_measured(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def fake(protocol: object) -> object:
        return lambda users, fakes, delta: (100.0, "a planted contradiction")

    monkeypatch.setattr(audit_module, "_honest_lower", fake)
    argv = ["audit", "--protocol", "cnt_pure", "--n", "400", "--epsilon", "1"]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert "BUG: lower bound above the proven upper bound at δ=1e-06" in err
    assert "measured" not in err


@pytest.mark.parametrize(("others", "fakes", "lam"), [(3, 0, 1.0), (9, 100, 1.0), (7000, 0, 0.9)])
def test_sgm_laws_refuse_grids_too_large_to_hold(others: int, fakes: int, lam: float) -> None:
    """At ε_c = 10^-3 the victim's noise window alone (46/ε wide) made a 142 GiB grid that
    the multiply-add budget did not count, and `esa audit` died with numpy's MemoryError.
    Such a lower bound is now not stated (None), before anything is allocated."""
    from protocols._cnt_sgm import LOWER_CELLS, sgm_sum_laws, sgm_view_laws

    eps = 1e-3 / 3
    width = math.ceil(46.0 / eps)
    assert width**2 > LOWER_CELLS  # the grid this would have allocated
    assert sgm_view_laws(epsilon=eps, lam=lam, others=others, fakes=fakes) is None
    assert sgm_sum_laws(epsilon=eps, lam=1.0, honest=10_000) is None


def test_audit_at_tiny_epsilon_states_no_sgm_lower_bound_instead_of_crashing(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["audit", "--protocol", "cnt_sgm", "--n", "4", "--epsilon", "0.001", "--json"]
    assert main([*argv, "--delta", "1e-6", "--shufflers", "1"]) == 0
    assert '"scenarios"' in capsys.readouterr().out
