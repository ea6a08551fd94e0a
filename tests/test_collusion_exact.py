"""The collusion audit against exact enumeration on tiny cases, independent of the accountants.

For each scenario ``esa audit`` prints, the adversary's view is rebuilt here from the
scenario's own label (who colludes) and the protocol's randomizer, written out from its
definition — not from ``protocols.accounting`` or the protocols' accountants:

* colluding users' reports are known and removed, so the view is the histogram of the
  victim's report, the reports of the n − 1 − K honest others and the (m − c)·n_r fakes of
  the honest shufflers (a colluding shuffler removes its own fakes);
* with every shuffler colluding the chain is traced: the view is the victim's own report.

Its exact ε(δ) — the least ε with both hockey-stick divergences at most δ — maximised over
EVERY dataset of the honest others (every composition of their values) and every
neighbouring pair, is the true privacy of the scenario. Every stated upper bound must be at
or above it, every stated lower bound at or below it (up to 10⁻⁹ for round-off). Where the
project calls its accountant exact (binary RR with fakes, a k-RR report among fakes only)
the two must agree.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np
import pytest

from protocols import CollusionConfig, ProtocolSpec, build_protocol, collusion_scenarios
from simulations._audit import audit

#: Round-off allowed between two computations of one ε.
_TOL = 1e-9

Law = dict[tuple[int, ...], float]


def _convolve(law: Law, step: Sequence[tuple[tuple[int, ...], float]]) -> Law:
    """Law of view + one more independent report, the report given as (increment, prob)."""
    out: Law = {}
    for key, p in law.items():
        for inc, w in step:
            if w == 0.0:
                continue
            nk = tuple(a + b for a, b in zip(key, inc, strict=True))
            out[nk] = out.get(nk, 0.0) + p * w
    return out


def _law(start: int, reports: Iterable[Sequence[tuple[tuple[int, ...], float]]]) -> Law:
    law: Law = {(0,) * start: 1.0}
    for step in reports:
        law = _convolve(law, step)
    return law


def exact_epsilon(p: Law, q: Law, delta: float) -> float:
    """Least ε ≥ 0 with D_ε(P‖Q) ≤ δ and D_ε(Q‖P) ≤ δ, D_ε(P‖Q) = Σ max(P − e^ε Q, 0)
    (bisection; inf if none)."""
    keys = sorted(set(p) | set(q))
    pa = np.array([p.get(key, 0.0) for key in keys])
    qa = np.array([q.get(key, 0.0) for key in keys])
    return exact_epsilon_arrays(pa, qa, delta)


def exact_epsilon_arrays(pa: np.ndarray, qa: np.ndarray, delta: float) -> float:
    """:func:`exact_epsilon` for two arrays of probabilities on the same cells."""

    def worst(eps: float) -> float:
        t = math.exp(eps)
        return float(max(np.maximum(pa - t * qa, 0.0).sum(), np.maximum(qa - t * pa, 0.0).sum()))

    if worst(0.0) <= delta:
        return 0.0
    both = (pa > 0) & (qa > 0)
    hi = float(np.max(np.abs(np.log(pa[both] / qa[both])), initial=0.0)) + 1.0
    if worst(hi) > delta:  # mass where one law is 0 and the other is not
        return math.inf
    lo = 0.0
    for _ in range(200):
        mid = (lo + hi) / 2.0
        lo, hi = (lo, mid) if worst(mid) <= delta else (mid, hi)
    return hi


# --- k-ary randomized response ---------------------------------------------------------


def _one_hot(k: int, j: int) -> tuple[int, ...]:
    return tuple(int(i == j) for i in range(k))


def _krr_report(k: int, eps: float, value: int) -> list[tuple[tuple[int, ...], float]]:
    """One k-RR report of ``value``: itself w.p. e^ε/(e^ε+k−1), each other value 1/(e^ε+k−1)."""
    z = math.exp(eps) + k - 1.0
    return [(_one_hot(k, j), (math.exp(eps) if j == value else 1.0) / z) for j in range(k)]


def _uniform_report(k: int) -> list[tuple[tuple[int, ...], float]]:
    return [(_one_hot(k, j), 1.0 / k) for j in range(k)]


def krr_worst_epsilon(*, k: int, eps: float, others: int, fakes: int, delta: float) -> float:
    """Exact ε(δ) of the histogram of the victim's k-RR report, ``others`` honest k-RR
    reports and ``fakes`` uniform ones, worst over every dataset of the others (every
    multiset of their values) and every pair of victim values (by relabelling, 0 vs 1)."""
    best = 0.0
    for data in itertools.combinations_with_replacement(range(k), others):
        crowd = [_krr_report(k, eps, v) for v in data] + [_uniform_report(k)] * fakes
        base = _law(k, crowd)
        p = _convolve(base, _krr_report(k, eps, 0))
        q = _convolve(base, _krr_report(k, eps, 1))
        best = max(best, exact_epsilon(p, q, delta))
    return best


def _expected_crowd(
    row_users: int, row_shufflers: int, cfg_n: int, m: int, r: int
) -> tuple[int, int] | None:
    """(honest others, honest fakes) of a scenario from who colludes in it; None if traced."""
    if row_shufflers == m:
        return None
    return cfg_n - 1 - row_users, (m - row_shufflers) * r


def _check_rows(
    rows: Iterable[dict[str, Any]],
    *,
    n: int,
    m: int,
    r: int,
    exact: Callable[[int, int], float],
    traced: float,
    exact_names: Sequence[str] = (),
) -> int:
    """Every row's crowd follows from its collusion, upper ≥ exact ≥ lower; returns rows seen."""
    seen = 0
    for row in rows:
        crowd = _expected_crowd(row["colluding_users"], row["colluding_shufflers"], n, m, r)
        if crowd is None:
            truth = traced
        else:
            assert (row["honest_users"], row["honest_fakes"]) == crowd, row
            truth = exact(*crowd)
        upper = float(row["epsilon_upper"])
        assert upper >= truth - _TOL, (row["scenario"], upper, truth)
        if row["bound"] in exact_names:
            assert upper == pytest.approx(truth, rel=1e-6, abs=1e-7), (row["scenario"], truth)
        lower = row["epsilon_lower"]
        if lower is not None:
            assert float(lower) <= truth + _TOL, (row["scenario"], lower, truth)
        seen += 1
    return seen


def _rows(cfg: CollusionConfig) -> list[dict[str, Any]]:
    return [
        {
            "scenario": s.scenario,
            "colluding_users": s.colluding_users,
            "colluding_shufflers": s.colluding_shufflers,
            "honest_users": s.honest_users,
            "honest_fakes": s.honest_fakes,
            "epsilon_upper": s.epsilon_upper,
            "bound": s.bound,
            "epsilon_lower": s.epsilon_lower,
        }
        for s in collusion_scenarios(cfg)
    ]


def test_exact_epsilon_of_randomized_response_is_its_local_epsilon() -> None:
    for k, eps in ((2, 0.7), (3, 2.0), (5, 1.3)):
        p = _law(k, [_krr_report(k, eps, 0)])
        q = _law(k, [_krr_report(k, eps, 1)])
        assert exact_epsilon(p, q, 0.0) == pytest.approx(eps, abs=1e-12)
        assert exact_epsilon(p, q, 1.0) == 0.0


@pytest.mark.parametrize(
    ("family", "k", "n", "eps", "delta", "m", "r", "users", "shufflers"),
    [
        ("krr", 2, 6, 1.5, 0.05, 2, 2, 1, 1),
        ("krr", 2, 5, 3.0, 1e-3, 3, 1, 2, 2),
        ("krr", 2, 7, 0.8, 0.1, 2, 3, 3, 0),
        ("krr", 3, 5, 2.0, 0.02, 2, 2, 1, 1),
        ("krr", 3, 6, 3.0, 1e-3, 3, 1, 2, 2),
        ("krr", 4, 4, 2.5, 0.05, 2, 2, 1, 1),
        # a k-RR randomizer audited as a generic ε_l-LDP one (fakes not counted)
        ("generic", 3, 6, 1.0, 0.1, 2, 2, 1, 1),
    ],
)
def test_every_krr_scenario_bounds_the_exact_view(
    family: str,
    k: int,
    n: int,
    eps: float,
    delta: float,
    m: int,
    r: int,
    users: int,
    shufflers: int,
) -> None:
    cfg = CollusionConfig(
        family=family,
        k=k,
        n=n,
        epsilon_local=eps,
        delta=delta,
        shufflers=m,
        fake_reports=r,
        colluding_users=users,
        colluding_shufflers=shufflers,
    )

    def exact(others: int, fakes: int) -> float:
        return krr_worst_epsilon(k=k, eps=eps, others=others, fakes=fakes, delta=delta)

    # The traced view is the victim's report alone: exactly ε_l at every δ below its mass.
    traced = exact_epsilon(
        _law(k, [_krr_report(k, eps, 0)]), _law(k, [_krr_report(k, eps, 1)]), delta
    )
    exact_names = ("binary_rr_exact", "krr_fakes_exact") if k == 2 else ("krr_fakes_exact",)
    seen = _check_rows(
        _rows(cfg), n=n, m=m, r=r, exact=exact, traced=traced, exact_names=exact_names
    )
    assert seen >= 5


def _audit(
    protocol: str,
    n: int,
    epsilon: float,
    delta: float,
    m: int,
    r: int,
    *,
    domain: int,
    options: dict[str, float | str] | None = None,
) -> dict[str, Any]:
    """``esa audit``'s JSON with one colluding user and one colluding shuffler of m."""
    return audit(
        protocol_name=protocol,
        n=n,
        epsilon=epsilon,
        delta=delta,
        domain=domain,
        shufflers=m,
        fake_reports=r,
        colluding_users=1,
        colluding_shufflers=1,
        options=options,
    )


@pytest.mark.parametrize(
    ("protocol", "domain", "n", "epsilon", "delta"),
    [("cnt_rr", 2, 6, 2.0, 0.05), ("hist_kr", 3, 5, 2.0, 0.05), ("cnt_rr", 2, 5, 1.0, 0.2)],
)
def test_esa_audit_of_krr_protocols_bounds_the_exact_view(
    protocol: str, domain: int, n: int, epsilon: float, delta: float
) -> None:
    m, r = 2, 2
    out = _audit(protocol, n, epsilon, delta, m, r, domain=domain)
    assert out["family"] == "krr"
    assert out["k"] == domain
    eps_l = float(out["epsilon_local"])
    # the protocol's randomizer is k-RR at ε_l: its exact law, per input
    proto = build_protocol(protocol, ProtocolSpec(epsilon=epsilon, delta=delta, n=n, domain=domain))
    z = math.exp(eps_l) + domain - 1.0
    assert proto.uniform_probability == pytest.approx(domain / z, rel=1e-12)  # type: ignore[attr-defined]

    def exact(others: int, fakes: int) -> float:
        return krr_worst_epsilon(k=domain, eps=eps_l, others=others, fakes=fakes, delta=delta)

    traced = exact_epsilon(
        _law(domain, [_krr_report(domain, eps_l, 0)]),
        _law(domain, [_krr_report(domain, eps_l, 1)]),
        delta,
    )
    assert _check_rows(out["scenarios"], n=n, m=m, r=r, exact=exact, traced=traced) >= 5
    assert out["violations"] == []


# --- Cnt_PURE: τ bits per user, the view is the count of ones -----------------------------


def _dlap(alpha: float, reach: int) -> dict[int, float]:
    """P[η = j] = (1−α)/(1+α)·α^|j| on |j| ≤ reach (the rest is < α^reach)."""
    c = (1.0 - alpha) / (1.0 + alpha)
    return {j: c * alpha ** abs(j) for j in range(-reach, reach + 1)}


def _pure_ones_law(bit: object, x: int) -> list[tuple[tuple[int], float]]:
    """One Cnt_PURE user's number of ones: m + x w.p. 1 − λ, else z ~ ω, with
    ω = w·clip(m + B + η, 0, τ) + (1 − w)·clip(m + B + S·K, 0, τ) (η ~ DLap(α),
    K ~ LogSeries(e^{−ε}) from scipy's logser, S = ±1; w = 1: the truncated DLap alone)."""
    from scipy.stats import logser

    lam, tau, alpha = bit.lam, bit.tau, bit.alpha  # type: ignore[attr-defined]
    w, eps = bit.weight, bit.epsilon  # type: ignore[attr-defined]
    m = (tau - 1) // 2
    law = [0.0] * (tau + 1)
    law[m + x] += 1.0 - lam
    # η beyond ±(τ + 60) is clipped to an end anyway; its mass α^60 is below 1e-15 here
    for b in (0, 1):
        for j, p in _dlap(alpha, tau + 200).items():
            law[min(max(m + b + j, 0), tau)] += lam * w * 0.5 * p
        for k in range(1, tau + 400):
            p = float(logser.pmf(k, math.exp(-eps)))
            for sign in (-1, 1):
                law[min(max(m + b + sign * k, 0), tau)] += lam * (1 - w) * 0.25 * p
    return [((o,), p) for o, p in enumerate(law)]


def _pure_worst(bit: object, others: int, fakes: int, delta: float) -> float:
    fair = [((0,), 0.5), ((1,), 0.5)]
    best = 0.0
    for ones in range(others + 1):
        crowd = [_pure_ones_law(bit, 1)] * ones
        crowd += [_pure_ones_law(bit, 0)] * (others - ones)
        base = _law(1, crowd + [fair] * fakes)
        p = _convolve(base, _pure_ones_law(bit, 0))
        q = _convolve(base, _pure_ones_law(bit, 1))
        best = max(best, exact_epsilon(p, q, delta))
    return best


@pytest.mark.parametrize(("n", "epsilon", "delta"), [(6, 2.0, 0.05), (5, 1.5, 1e-3)])
def test_esa_audit_of_cnt_pure_bounds_the_exact_view(n: int, epsilon: float, delta: float) -> None:
    m, r = 2, 2
    out = _audit("cnt_pure", n, epsilon, delta, m, r, domain=2)
    bit = build_protocol("cnt_pure", ProtocolSpec(epsilon=epsilon, delta=delta, n=n)).bit  # type: ignore[attr-defined]
    traced = _pure_worst(bit, 0, 0, delta)
    rows = out["scenarios"]
    assert (
        _check_rows(
            rows, n=n, m=m, r=r, exact=lambda h, f: _pure_worst(bit, h, f, delta), traced=traced
        )
        >= 5
    )
    assert all(row["epsilon_lower"] is not None for row in rows)


# --- Cnt_SGM: |y| copies of sign(y), the view is (#(+1), #(−1)) ---------------------------


def _sgm_user_law(lam: float, alpha: float, x: int) -> dict[int, float]:
    """y = (2x − 1) + B·η, B ~ Ber(λ), η ~ DLap(α), on |η| ≤ 45 (the rest < α^45 < 1e-12
    here, α = e^{−2/3}: it moves no ε(δ) by 1e-9 at the δ tested)."""
    law: dict[int, float] = {2 * x - 1: 1.0 - lam}
    for j, w in _dlap(alpha, 45).items():
        law[2 * x - 1 + j] = law.get(2 * x - 1 + j, 0.0) + lam * w
    return law


def _sgm_add(view: np.ndarray, law: dict[int, float]) -> np.ndarray:
    """Law of (#(+1), #(−1)) after one more user sending |y| copies of sign(y)."""
    out = np.zeros_like(view)
    size = view.shape[0]
    for y, w in law.items():
        a, b = max(y, 0), max(-y, 0)
        out[a:, b:] += w * view[: size - a, : size - b]
    return out


def _sgm_worst(lam: float, alpha: float, others: int, fakes: int, delta: float) -> float:
    size = 47 * (others + 1) + fakes + 1
    best = 0.0
    for ones in range(others + 1):
        base = np.zeros((size, size))
        base[0, 0] = 1.0
        for x in [1] * ones + [0] * (others - ones):
            base = _sgm_add(base, _sgm_user_law(lam, alpha, x))
        for _ in range(fakes):
            base = _sgm_add(base, {1: 0.5, -1: 0.5})
        p = _sgm_add(base, _sgm_user_law(lam, alpha, 0))
        q = _sgm_add(base, _sgm_user_law(lam, alpha, 1))
        best = max(best, exact_epsilon_arrays(p.ravel(), q.ravel(), delta))
    return best


def test_esa_audit_of_cnt_sgm_bounds_the_exact_view() -> None:
    # the unary encoding (±1 messages), whose exact view this test writes out
    n, epsilon, delta, m, r = 5, 2.0, 0.02, 2, 1
    unary: dict[str, float | str] = {"encoding": "unary"}
    out = _audit("cnt_sgm", n, epsilon, delta, m, r, domain=2, options=unary)
    spec = ProtocolSpec(epsilon=epsilon, delta=delta, n=n, options=unary)
    params = build_protocol("cnt_sgm", spec).params  # type: ignore[attr-defined]
    lam, alpha = params.lam, params.alpha

    def exact(h: int, f: int) -> float:
        return _sgm_worst(lam, alpha, h, f, delta)

    assert _check_rows(out["scenarios"], n=n, m=m, r=r, exact=exact, traced=exact(0, 0)) >= 5


# --- local hashing (SLH, MURS), accounted as g-ary RR on the hashed value -----------------


@functools.cache
def _lh_set_law(d: int, g: int, eps: float, x: int | None) -> list[tuple[tuple[int, ...], float]]:
    """Law of S = h⁻¹(y) ⊆ [d] for one report (h, y), h uniform over all maps [d] → [g]
    (ideal hashing), y = h(x) w.p. e^ε/(e^ε+g−1), else each other bucket; x None: a uniform
    fake (h, y). P[(h, y) | x] depends on x only through [x ∈ h⁻¹(y)], so the histogram of
    the sets S over the reports is a sufficient statistic of the view. A set is indexed by
    its bit mask, one-hot over the 2^d masks."""
    z = math.exp(eps) + g - 1.0
    law = [0.0] * (1 << d)
    for h in itertools.product(range(g), repeat=d):
        for y in range(g):
            w = 1.0 / g if x is None else (math.exp(eps) if h[x] == y else 1.0) / z
            mask = sum(1 << v for v in range(d) if h[v] == y)
            law[mask] += w / g**d
    return [(_one_hot(1 << d, s), w) for s, w in enumerate(law) if w > 0.0]


def lh_worst_epsilon(*, d: int, g: int, eps: float, others: int, fakes: int, delta: float) -> float:
    best = 0.0
    for data in itertools.combinations_with_replacement(range(d), others):
        crowd = [_lh_set_law(d, g, eps, v) for v in data] + [_lh_set_law(d, g, eps, None)] * fakes
        base = _law(1 << d, crowd)
        p = _convolve(base, _lh_set_law(d, g, eps, 0))
        q = _convolve(base, _lh_set_law(d, g, eps, 1))
        best = max(best, exact_epsilon(p, q, delta))
    return best


@pytest.mark.parametrize(
    ("d", "g", "n", "eps", "delta"),
    [(2, 3, 5, 2.0, 0.02), (2, 4, 4, 3.0, 1e-3), (3, 2, 4, 1.2, 0.05), (3, 3, 4, 2.0, 0.02)],
)
def test_local_hashing_views_are_within_their_krr_accounting(
    d: int, g: int, n: int, eps: float, delta: float
) -> None:
    # The audit accounts SLH/MURS as g-ary RR on the hashed value (simulations._attacks.
    # protocol_family). With honest users too, not only fakes, the exact local-hashing view
    # (ideal hashing) of every scenario must stay within that scenario's stated bound.
    m, r = 2, 1
    cfg = CollusionConfig(
        family="krr",
        k=g,
        n=n,
        epsilon_local=eps,
        delta=delta,
        shufflers=m,
        fake_reports=r,
        colluding_users=1,
        colluding_shufflers=1,
    )

    def exact(others: int, fakes: int) -> float:
        return lh_worst_epsilon(d=d, g=g, eps=eps, others=others, fakes=fakes, delta=delta)

    traced = exact(0, 0)
    assert traced <= eps + _TOL
    assert _check_rows(_rows(cfg), n=n, m=m, r=r, exact=exact, traced=traced) >= 5


# --- report fragmenting: ω fragments of a permanent randomized response -------------------


def _fragments_law(
    eps_b: float, eps_f: float, omega: int, x: int
) -> list[tuple[tuple[int], float]]:
    """Ones among one user's ω fragments: x̃ = binary RR_{ε_b}(x), then ω independent binary
    RR_{ε_f}(x̃) reports (Erlingsson et al.'s report fragmenting)."""
    keep_b = math.exp(eps_b) / (math.exp(eps_b) + 1.0)
    keep_f = math.exp(eps_f) / (math.exp(eps_f) + 1.0)
    law = [0.0] * (omega + 1)
    for xt, w in ((x, keep_b), (1 - x, 1.0 - keep_b)):
        one = keep_f if xt == 1 else 1.0 - keep_f
        for ones in range(omega + 1):
            law[ones] += w * math.comb(omega, ones) * one**ones * (1 - one) ** (omega - ones)
    return [((o,), w) for o, w in enumerate(law)]


def test_esa_audit_of_report_fragmenting_bounds_the_exact_view() -> None:
    # A multi-message protocol with a finite ε_l: the generic bounds and its own claim must
    # cover the count of ones over every fragment (fakes: fair bits).
    n, epsilon, delta, m, r, omega = 5, 1.5, 0.05, 2, 2, 2
    out = _audit("cnt_rr", n, epsilon, delta, m, r, domain=2, options={"report_fragments": omega})
    proto = build_protocol(
        "cnt_rr",
        ProtocolSpec(epsilon=epsilon, delta=delta, n=n, options={"report_fragments": omega}),
    )
    eps_b, eps_f = proto._eps_lb, proto._eps_lf  # type: ignore[attr-defined]
    fair = [((0,), 0.5), ((1,), 0.5)]

    def exact(others: int, fakes: int) -> float:
        best = 0.0
        for ones in range(others + 1):
            crowd = [_fragments_law(eps_b, eps_f, omega, 1)] * ones
            crowd += [_fragments_law(eps_b, eps_f, omega, 0)] * (others - ones)
            base = _law(1, crowd + [fair] * fakes)
            p = _convolve(base, _fragments_law(eps_b, eps_f, omega, 0))
            q = _convolve(base, _fragments_law(eps_b, eps_f, omega, 1))
            best = max(best, exact_epsilon(p, q, delta))
        return best

    assert out["family"] == "generic"
    assert _check_rows(out["scenarios"], n=n, m=m, r=r, exact=exact, traced=exact(0, 0)) >= 5


# --- honest-users bounds of Cnt_2M, PUCM, DisEle: finite, above the claim, exact-checked ---
#
# With h honest users (the victim included) the colluders' messages are a known offset. The
# views below are written out from the randomizers: Cnt_2M's count of "1"s (h Bernoulli
# draws convolved one by one), PUCM's two cells of one row (τ = 1) the victim moves between
# (each the sum of h Bernoulli(λ) blanket draws), DisEle's two released parities of the
# victim's bins (every honest bit enumerated; the others hold neither bin, the worst case).


def _bernoulli_sum(h: int, p: float) -> np.ndarray:
    law = np.ones(1)
    for _ in range(h):
        law = np.convolve(law, [1.0 - p, p])
    return law


def _honest_rows(proto: Any, others: Sequence[int]) -> list[float]:
    rows = []
    for h in others:
        b = proto.honest_users_bound(h)
        assert b is not None, h
        assert math.isfinite(b.epsilon_upper), h
        rows.append(b.epsilon_upper)
    assert rows == sorted(rows)  # honest others listed falling: ε grows with the colluders
    assert min(rows) >= proto.privacy.epsilon_central  # never below the no-collusion claim
    return rows


def test_cnt_2m_honest_users_bound_covers_the_exact_count() -> None:
    # ε = 1, δ = 0.01: n ≥ 100 ln 200 = 530; p = 1 − 50 ln 200/n.
    n, delta = 600, 0.01
    proto = build_protocol("cnt_2m", ProtocolSpec(epsilon=1.0, delta=delta, n=n))
    p = proto.params.p  # type: ignore[attr-defined]
    others = [n - 1, 200, 20, 12, 10]
    rows = _honest_rows(proto, others)
    for h, upper in zip(others, rows, strict=True):
        crowd = _bernoulli_sum(h + 1, p)  # the victim's own Ber(p) included
        exact = exact_epsilon_arrays(np.append(crowd, 0.0), np.insert(crowd, 0, 0.0), delta)
        assert exact <= upper + _TOL, (h, exact, upper)
        if upper > proto.privacy.epsilon_central:  # the exact value itself, not the floor
            assert upper == pytest.approx(exact, abs=1e-6)
    assert rows[-1] > proto.privacy.epsilon_central  # collusion is visible in the rows


def test_pucm_honest_users_bound_covers_the_exact_row() -> None:
    # τ = 1, ε = 0.8, δ = 0.5: n ≥ 180 ln 4/0.64 = 390, λ = 90 ln 4/(0.64 n).
    n, eps, delta = 400, 0.8, 0.5
    proto = build_protocol(
        "pucm", ProtocolSpec(epsilon=eps, delta=delta, n=n, domain=4, options={"tau": 1})
    )
    lam = proto.params.lam  # type: ignore[attr-defined]
    others = [n - 1, 330, 260]  # ε √(n/h) ≤ 1 needs h ≥ 256
    rows = _honest_rows(proto, others)
    for h, upper in zip(others, rows, strict=True):
        assert upper == pytest.approx(eps * math.sqrt(n / (h + 1)), rel=1e-12)
        cell = _bernoulli_sum(h + 1, lam)
        with_one = np.insert(cell, 0, 0.0)
        without = np.append(cell, 0.0)
        p = np.outer(with_one, without).ravel()  # the victim's true message in cell u
        q = np.outer(without, with_one).ravel()  # ... in cell v
        assert exact_epsilon_arrays(p, q, delta) <= upper + _TOL, h
    assert proto.honest_users_bound(200) is None  # ε √(n/h) > 1: nothing is proven


def _disele_parities(n: int, eps: float, h: int, bin_of_victim: int) -> np.ndarray:
    """Law of (z_a, z_b) from h honest users' bits, enumerated one configuration at a time."""
    p = (1.0 - (1.0 - math.exp(-eps)) ** (1.0 / n)) / 2.0
    laws = [[0.5, 0.5] if bin_of_victim == 0 else [1.0 - p, p]]  # victim's bit in bin a
    laws += [[1.0 - p, p]] * (h - 1)
    laws_b = [[0.5, 0.5] if bin_of_victim == 1 else [1.0 - p, p]] + [[1.0 - p, p]] * (h - 1)
    out = np.zeros(4)
    for bits in itertools.product((0, 1), repeat=2 * h):
        w = 1.0
        for i in range(h):
            w *= laws[i][bits[i]] * laws_b[i][bits[h + i]]
        out[2 * (sum(bits[:h]) % 2) + sum(bits[h:]) % 2] += w
    return out


def test_disele_honest_users_bound_covers_the_exact_parities() -> None:
    n, delta = 8, 0.2
    proto = build_protocol("disele", ProtocolSpec(epsilon=1.0, delta=delta, n=n, domain=4))
    eps = proto.params.epsilon  # type: ignore[attr-defined]
    others = [n - 1, 5, 3, 1, 0]
    rows = _honest_rows(proto, others)
    for h, upper in zip(others, rows, strict=True):
        a = _disele_parities(n, eps, h + 1, 0)
        b = _disele_parities(n, eps, h + 1, 1)
        assert exact_epsilon_arrays(a, b, delta) <= upper + _TOL, h
        assert exact_epsilon_arrays(a, b, 0.0) <= upper + _TOL, h  # pure, shares aside


@pytest.mark.parametrize(
    ("name", "n", "eps", "delta", "domain", "options"),
    [
        ("cnt_2m", 600, 1.0, 0.01, 2, {}),
        ("pucm", 400, 0.8, 0.5, 4, {"tau": 1}),
        ("disele", 8, 1.0, 0.2, 4, {}),
        ("rsum_dsg", 100, 1.0, 1e-6, 2, {}),
    ],
)
def test_collusion_rows_with_colluding_users_are_finite(
    name: str, n: int, eps: float, delta: float, domain: int, options: dict[str, Any]
) -> None:
    proto = build_protocol(
        name, ProtocolSpec(epsilon=eps, delta=delta, n=n, domain=domain, options=options)
    )
    cfg = CollusionConfig(
        family="generic",
        k=2,
        n=n,
        epsilon_local=math.inf,
        delta=delta,
        colluding_users=1,
        epsilon_claimed=proto.privacy.epsilon_central,
        claimed_bound=proto.privacy.bound,
        honest_bound=proto.honest_users_bound,
    )
    rows = {s.scenario: s for s in collusion_scenarios(cfg)}
    row = rows["1 users"]
    assert math.isfinite(row.epsilon_upper), row
    assert row.epsilon_upper >= proto.privacy.epsilon_central


def _polya_pmf(r: float, alpha: float, top: int) -> np.ndarray:
    """Pólya(r, α) on [0, top] from its definition Γ(k+r)/(k! Γ(r)) (1−α)^r α^k."""
    k = np.arange(top + 1)
    log = np.array([math.lgamma(j + r) - math.lgamma(j + 1) - math.lgamma(r) for j in k])
    return np.exp(log + r * math.log1p(-alpha) + k * math.log(alpha))


def test_rsum_dsg_honest_users_bound_covers_the_exact_sum() -> None:
    # The ideal view with h honest users is their sum: rounded values + Σ (G − G'), G, G' iid
    # Pólya(1/n, α) per user, convolved user by user here. The victim's rounded value moves
    # it by k ∈ [1, p]; the exact ε(δ) of the worst shift must be within the bound (the shares
    # only add to δ). Tail beyond 800 per Pólya draw: < 1e-40 at α = e^{−1/3}.
    n, delta = 5, 1e-6
    proto = build_protocol("rsum_dsg", ProtocolSpec(epsilon=1.0, delta=delta, n=n))
    alpha, p = proto.alpha, proto.p  # type: ignore[attr-defined]
    one = _polya_pmf(1.0 / n, alpha, 800)
    user = np.convolve(one, one[::-1])  # G − G' on [−800, 800]
    others = [n - 1, 3, 2, 1, 0]
    rows = _honest_rows(proto, others)
    for h, upper in zip(others, rows, strict=True):
        noise = np.ones(1)
        for _ in range(h + 1):
            noise = np.convolve(noise, user)
        exact = max(
            exact_epsilon_arrays(np.append(noise, [0.0] * k), np.insert(noise, 0, [0.0] * k), delta)
            for k in range(1, p + 1)
        )
        assert exact <= upper + _TOL, (h, exact, upper)
        if h == 0:  # the victim alone: the bound is this exact value (bisection to 1e-6)
            assert upper == pytest.approx(exact, abs=1e-5)
    assert rows[-1] > proto.privacy.epsilon_central


@pytest.mark.parametrize(("rows", "blanket"), [((1, 2), 30), ((1, 3), 25), ((2, 3), 40)])
def test_prhr_revealed_view_matches_the_full_histogram(rows: tuple[int, int], blanket: int) -> None:
    # τ = 1, B = 4: the full histogram of the victim's tuple (uniform in C_r) among uniform
    # blanket tuples, every cell kept; C_r = {c : popcount(r ∧ c) even}.
    from protocols._prhr import prhr_revealed_epsilon

    def uniform_on(cells: list[int]) -> list[tuple[tuple[int, ...], float]]:
        return [(_one_hot(4, c), 1.0 / len(cells)) for c in cells]

    members = [[c for c in range(4) if bin(r & c).count("1") % 2 == 0] for r in rows]
    base = _law(4, [uniform_on(list(range(4)))] * blanket)
    p = _convolve(base, uniform_on(members[0]))
    q = _convolve(base, uniform_on(members[1]))
    for delta in (1e-2, 1e-4):
        brute = exact_epsilon(p, q, delta)
        assert brute > 0.0
        assert prhr_revealed_epsilon(blanket, 1, delta) == pytest.approx(brute, rel=1e-3)
        assert prhr_revealed_epsilon(blanket, 1, delta) >= brute - _TOL


def test_prhr_honest_users_bound_rows() -> None:
    n = 1000
    proto = build_protocol("prhr", ProtocolSpec(epsilon=1.0, delta=1e-6, n=n, domain=8))
    rows = _honest_rows(proto, [n - 1, 500, 100, 60])
    assert rows[-1] > proto.privacy.epsilon_central  # few honest users: visibly weaker
    # The victim's own 534 blanket tuples over 2^10 sets C_r^τ reach no ε at δ: no bound.
    assert proto.honest_users_bound(0) is None


@pytest.mark.parametrize(("row", "blanket"), [(1, 30), (2, 25), (3, 40)])
def test_prrq_node_vs_padding_matches_the_full_histogram(row: int, blanket: int) -> None:
    # τ = 1, B = 4: a tuple uniform in C_row against a uniform padding tuple, among uniform
    # blanket tuples, every cell of the histogram kept.
    from protocols._prrq import node_vs_padding_epsilon

    def uniform_on(cells: list[int]) -> list[tuple[tuple[int, ...], float]]:
        return [(_one_hot(4, c), 1.0 / len(cells)) for c in cells]

    members = [c for c in range(4) if bin(row & c).count("1") % 2 == 0]
    base = _law(4, [uniform_on(list(range(4)))] * blanket)
    p = _convolve(base, uniform_on(members))
    q = _convolve(base, uniform_on(list(range(4))))
    for delta in (1e-2, 1e-4):
        brute = exact_epsilon(p, q, delta)
        assert brute > 0.0
        assert node_vs_padding_epsilon(blanket, 1, delta) == pytest.approx(brute, rel=1e-6)


@pytest.mark.parametrize("domain", [2, 16])
def test_prrq_honest_users_bound_rows(domain: int) -> None:
    n = 1000
    proto = build_protocol("prrq", ProtocolSpec(epsilon=1.0, delta=1e-6, n=n, domain=domain))
    rows = _honest_rows(proto, [n - 1, 500, 100, 20])
    if domain == 16:  # 4 slots composed: 20 honest users leave a visibly weaker bound
        assert rows[-1] > 2 * proto.privacy.epsilon_central
    assert proto.honest_users_bound(0) is None  # the victim's own blanket hides nothing


def test_prhr_large_views_use_a_computable_part_of_the_blanket() -> None:
    # τ = 1 (n = 2): the full view exceeds the cell cap; a smaller blanket (the rest told to
    # the adversary) still bounds it, and the rows stay monotone.
    from protocols._prhr import computable_blanket

    proto = build_protocol("prhr", ProtocolSpec(epsilon=1.0, delta=1e-6, n=2, domain=8))
    rho = proto.params.rho  # type: ignore[attr-defined]
    assert computable_blanket(2 * rho, 1, 1e-6) < 2 * rho
    assert computable_blanket(10, 1, 1e-6) == 10
    rows = _honest_rows(proto, [1, 0])
    assert rows == [proto.privacy.epsilon_central] * 2
