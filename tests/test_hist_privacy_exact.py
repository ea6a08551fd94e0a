"""Exact ε(δ) of the multi-message histogram protocols, independent of their accountants.

For each protocol the message law of one user is written out here from its ``randomize`` /
``sample_fakes`` code and parameters (and checked against seeded draws of ``randomize`` by a
chi-square goodness-of-fit test, so the computation describes the real code). The analyzer
sees the multiset of messages. Where every message law is constant on a few *types* of
message (a label, a count-min cell, whether a tuple lies in C_x^τ and C_x'^τ, whether a hashed
report matches H(x) and H(x')), the type counts are a sufficient statistic for the pair: the
likelihood ratio of two multisets with the same type counts is the same. The exact ε(δ) of a
neighbouring pair (victim x vs x', the others' data fixed) is then computed from the exact law
of those counts (a dense grid, or independent cells composed exactly), for both hockey-stick
directions, by bisection on δ(ε) = Σ max(P0 − e^ε P1, 0). The others' data: every constant
dataset, and a mixture where two values are held.

An exact ε above ``protocol.privacy.epsilon_central`` at ``protocol.privacy.delta`` is a
broken claim. Nothing from the project's accountants (``protocols.accounting``, ``_exact_shuffle``,
``_amplification``) is used here.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from scipy.special import gammaln
from scipy.stats import binom, chisquare

from protocols import ParameterError, ProtocolSpec
from protocols import build_protocol as _build_protocol

FloatArray = npt.NDArray[np.float64]


def build_protocol(name: str, spec: ProtocolSpec) -> Any:
    """The registry's protocol, typed loosely: the tests read each class's own parameters."""
    return _build_protocol(name, spec)


TOL = 1e-6  # bisection stops within 1e-8; a claim is broken beyond this


# --- exact ε(δ) of a pair of distributions ------------------------------------------------
def _bisect(delta_of: Callable[[float], float], delta: float, hi: float = 60.0) -> float:
    """Smallest ε (within 1e-8) with δ(ε) ≤ δ, for a non-increasing δ(ε); ∞ if none ≤ hi."""
    if delta_of(0.0) <= delta:
        return 0.0
    if delta_of(hi) > delta:
        return math.inf
    lo = 0.0
    while hi - lo > 1e-8:
        mid = 0.5 * (lo + hi)
        if delta_of(mid) > delta:
            lo = mid
        else:
            hi = mid
    return hi


def _one_way(a: FloatArray, b: FloatArray, delta: float) -> float:
    """ε(δ) of a ‖ b: δ(ε) = Σ_{L > ε} (a − e^ε b) with L = ln(a/b), by sorted losses."""
    keep = a > 0
    with np.errstate(divide="ignore"):
        loss = np.log(a[keep]) - np.log(b[keep])
    order = np.argsort(loss)
    loss = loss[order]
    suf_a = np.r_[np.cumsum(a[keep][order][::-1])[::-1], 0.0]
    suf_b = np.r_[np.cumsum(b[keep][order][::-1])[::-1], 0.0]

    def delta_of(eps: float) -> float:
        i = int(np.searchsorted(loss, eps, side="right"))
        return max(0.0, float(suf_a[i] - math.exp(eps) * suf_b[i]))

    return _bisect(delta_of, delta)


def exact_eps(p0: npt.ArrayLike, p1: npt.ArrayLike, delta: float) -> float:
    """Exact ε(δ) of the pair (P0, P1) on a common finite support, both directions."""
    a, b = np.ravel(np.asarray(p0, dtype=float)), np.ravel(np.asarray(p1, dtype=float))
    return max(_one_way(a, b, delta), _one_way(b, a, delta))


def _delta_product(
    a0: FloatArray, a1: FloatArray, b0: FloatArray, b1: FloatArray, eps: float
) -> float:
    """δ(ε) of (A0 ⊗ B0, A1 ⊗ B1) exactly, without the product grid: for each point of A the
    points of B with loss above ε − loss_A, by sorted losses and suffix sums."""
    keep = b0 > 0
    with np.errstate(divide="ignore"):
        lb = np.log(b0[keep]) - np.log(b1[keep])
    order = np.argsort(lb)
    lb, s_b0, s_b1 = lb[order], b0[keep][order], b1[keep][order]
    suf0 = np.r_[np.cumsum(s_b0[::-1])[::-1], 0.0]
    suf1 = np.r_[np.cumsum(s_b1[::-1])[::-1], 0.0]
    ka = a0 > 0
    with np.errstate(divide="ignore"):
        la = np.log(a0[ka]) - np.log(a1[ka])
    idx = np.searchsorted(lb, eps - la, side="right")
    val = a0[ka] * suf0[idx] - math.exp(eps) * a1[ka] * suf1[idx]
    return float(np.maximum(val, 0.0).sum())


Pair = tuple[FloatArray, FloatArray]


def exact_eps_product(a: Pair, b: Pair, delta: float) -> float:
    """Exact ε(δ) of the product of two independent pairs, both directions."""
    (a0, a1), (b0, b1) = a, b
    return max(
        _bisect(lambda e: _delta_product(a0, a1, b0, b1, e), delta),
        _bisect(lambda e: _delta_product(a1, a0, b1, b0, e), delta),
    )


def shifted_cell(pmf: FloatArray) -> tuple[FloatArray, FloatArray]:
    """A cell holding base + B (base fixed and known): +1 under D0 only."""
    return np.r_[0.0, pmf], np.r_[pmf, 0.0]


def multinomial_grid(count: int, probs: list[float], size: int) -> FloatArray:
    """Mult(count, probs) over the counts of the first T − 1 types, a dense (size,)^(T−1) grid."""
    grids = np.meshgrid(*[np.arange(size)] * (len(probs) - 1), indexing="ij")
    last = count - sum(grids)
    ok = last >= 0
    last = np.where(ok, last, 0)
    lp = gammaln(count + 1) - gammaln(last + 1)
    lp = lp + (last * math.log(probs[-1]) if probs[-1] > 0 else 0.0)
    ok = ok & (last == 0) if probs[-1] == 0 else ok
    for g, pr in zip(grids, probs[:-1], strict=True):
        lp = lp - gammaln(g + 1)
        if pr > 0:
            lp = lp + g * math.log(pr)
        else:
            ok = ok & (g == 0)
    return np.where(ok, np.exp(np.where(ok, lp, -np.inf)), 0.0)


def add_message(grid: FloatArray, law: list[float]) -> FloatArray:
    """The count grid after one more message of categorical law ``law`` (last type implied)."""
    dims = len(law) - 1
    out = law[-1] * grid
    for t in range(dims):
        if law[t] == 0:
            continue
        src, dst = [slice(None)] * dims, [slice(None)] * dims
        src[t], dst[t] = slice(0, grid.shape[t] - 1), slice(1, None)
        out[tuple(dst)] += law[t] * grid[tuple(src)]
    return out


def _gof(observed: npt.ArrayLike, law: npt.ArrayLike) -> float:
    obs, p = np.asarray(observed, dtype=float), np.asarray(law, dtype=float)
    assert obs[p == 0].sum() == 0, "a message of probability 0 was drawn"
    keep = p > 0
    return float(chisquare(obs[keep], p[keep] / p[keep].sum() * obs.sum()).pvalue)


def test_machinery_matches_closed_forms() -> None:
    """One user's binary RR at ε_l: exact ε(0⁺) = ε_l. A cell Bin(1, 1/2) + 1 vs Bin(1, 1/2):
    P0 = (0, ½, ½), P1 = (½, ½, 0), so ε(δ) = ∞ for δ < ½, 0 for δ ≥ ½."""
    e = 1.3
    p = math.exp(e) / (1 + math.exp(e))
    assert exact_eps([p, 1 - p], [1 - p, p], 1e-12) == pytest.approx(e, abs=1e-7)
    c0, c1 = shifted_cell(np.array([0.5, 0.5]))
    assert exact_eps(c0, c1, 0.49) == math.inf
    assert exact_eps(c0, c1, 0.5) == 0.0
    # The product shortcut agrees with the dense product grid.
    b0, b1 = shifted_cell(binom.pmf(np.arange(41), 40, 0.3))
    dense = exact_eps(np.outer(b0, b1), np.outer(b1, b0), 1e-3)
    assert exact_eps_product((b0, b1), (b1, b0), 1e-3) == pytest.approx(dense, abs=1e-7)


# --- Hist_MM -------------------------------------------------------------------------------
def hist_mm_exact(protocol: Any) -> float:
    """Bin j holds c_j + Bin(n, p), independently over bins: the victim moves one message
    from bin x' to bin x, the other bins' laws do not change."""
    n, p = protocol.params.n, protocol.params.p
    c0, c1 = shifted_cell(binom.pmf(np.arange(n + 1), n, p))
    return exact_eps_product((c0, c1), (c1, c0), float(protocol.privacy.delta))


@pytest.mark.parametrize(
    ("eps", "delta", "n", "expected"),
    [(2.0, 1e-3, 830, 0.1932), (2.0, 1e-6, 1521, 0.2819), (1.0, 1e-3, 3318, 0.0821)],
)
def test_hist_mm_exact_within_claim(eps: float, delta: float, n: int, expected: float) -> None:
    """Smallest accepted n (γ = ½): exact ε well below the claim."""
    pr = build_protocol("hist_mm", ProtocolSpec(epsilon=eps, delta=delta, n=n, domain=2))
    with pytest.raises(ParameterError):
        build_protocol("hist_mm", ProtocolSpec(epsilon=eps, delta=delta, n=n - 1, domain=2))
    exact = hist_mm_exact(pr)
    assert exact == pytest.approx(expected, abs=1e-3)
    assert exact <= pr.privacy.epsilon_central + TOL


def test_hist_mm_message_law() -> None:
    """One user holding x sends x once plus each label w.p. p (d = 3: 8 patterns)."""
    pr = build_protocol("hist_mm", ProtocolSpec(epsilon=2.0, delta=0.5, n=208, domain=3))
    p, d, x = pr.params.p, 3, 1
    rng = np.random.default_rng(11)
    obs = np.zeros(1 << d)
    for _ in range(4000):
        z = np.bincount(pr.randomize([x], rng=rng), minlength=d)
        z[x] -= 1
        assert z.min() >= 0
        assert z.max() <= 1
        obs[int((z << np.arange(d)).sum())] += 1
    law = [np.prod([p if (k >> j) & 1 else 1 - p for j in range(d)]) for k in range(1 << d)]
    assert _gof(obs, law) > 1e-4


# --- PUCM ----------------------------------------------------------------------------------
def pucm_cell_exact(n: int, lam: float, delta: float) -> float:
    """Exact ε(δ) of one row in which the victim's two values hash apart: each cell holds its
    users' true messages + Bin(n, λ), independently over cells, and the victim moves one
    message from one cell to the other."""
    c0, c1 = shifted_cell(binom.pmf(np.arange(n + 1), n, lam))
    return exact_eps_product((c0, c1), (c1, c0), delta)


def pucm_exact(protocol: Any, x: int = 0, x2: int = 1) -> float:
    """:func:`pucm_cell_exact` for a built one-row protocol (its hashes checked)."""
    P = protocol.params
    rows = int((protocol._hashes[:, x] != protocol._hashes[:, x2]).sum())
    assert rows == 1, "the configurations below are one-row, collision-free"
    return pucm_cell_exact(P.n, P.lam, float(P.delta))


def test_pucm_message_law() -> None:
    """Blanket per cell ~ Bin(n, λ) (true cell's n users removed), pooled over cells."""
    pr = build_protocol(
        "pucm", ProtocolSpec(epsilon=1.0, delta=1e-3, n=1370, domain=2, options={"tau": 1})
    )
    P = pr.params
    rng = np.random.default_rng(12)
    tab = np.zeros(P.n + 1)
    for _ in range(10):
        c = np.bincount(pr.randomize(np.zeros(P.n, dtype=int), rng=rng), minlength=P.s)
        c[pr._hashes[0, 0]] -= P.n
        tab += np.bincount(c, minlength=P.n + 1)
    pmf = binom.pmf(np.arange(P.n + 1), P.n, P.lam)
    # Pool the sparse tails on both sides (at λ ≈ 1/2 the mass sits around n/2).
    lo, hi = int(P.n * P.lam - 60), int(P.n * P.lam + 60)
    obs = np.r_[tab[:lo].sum(), tab[lo:hi], tab[hi:].sum()]
    exp = np.r_[pmf[:lo].sum(), pmf[lo:hi], pmf[hi:].sum()]
    assert _gof(obs, exp) > 1e-4


def test_pucm_exact_within_claim_at_lambda_below_one_half() -> None:
    pr = build_protocol(
        "pucm", ProtocolSpec(epsilon=1.0, delta=1e-3, n=1370, domain=2, options={"tau": 1})
    )
    assert pr.params.lam < 0.5
    exact = pucm_exact(pr)
    assert exact == pytest.approx(0.1423, abs=1e-3)
    assert exact <= pr.privacy.epsilon_central + TOL


@pytest.mark.parametrize(
    ("eps", "delta", "n", "exact_expected"),
    [
        (1.0, 1e-3, 685, math.inf),  # λ = 0.99866: no noise in the victim's cell w.p. ≈ 0.4
        (1.0, 1e-3, 695, 1.3675),  # λ = 0.98430
        (1.0, 1e-6, 1316, math.inf),  # λ = 0.99224
        (0.5, 0.1, 1081, 1.3054),  # λ = 0.99771, claim 0.5
    ],
)
def test_pucm_refuses_lambda_above_one_half_where_its_claim_fails(
    eps: float, delta: float, n: int, exact_expected: float
) -> None:
    """PUCM accepted λ = 90τ² ln(2τ/δ)/(ε² n) up to 1. A cell's count is then its users +
    n − Bin(n, 1 − λ): near λ = 1 the noise nearly vanishes, and the exact ε of the shuffled
    cells breaks the claim (ε = 1 at δ = 1e-3, n = 695, τ = 1: exact 1.3675; n = 685: ∞).
    The smooth-binomial lemma needs λ ≤ 1/2; λ above it is refused now."""
    lam = 90.0 * math.log(2.0 / delta) / (eps**2 * n)  # τ = 1
    assert 0.5 < lam < 1.0
    exact = pucm_cell_exact(n, lam, delta)
    if math.isinf(exact_expected):
        assert math.isinf(exact)
    else:
        assert exact == pytest.approx(exact_expected, abs=1e-3)
    assert exact > eps  # the claim would fail here ...
    spec = ProtocolSpec(epsilon=eps, delta=delta, n=n, domain=2, options={"tau": 1})
    with pytest.raises(ParameterError, match=r"> 1/2; needs n >= "):
        build_protocol("pucm", spec)  # ... so the configuration is refused


# --- PRHR ----------------------------------------------------------------------------------
def prhr_laws(tau: int) -> tuple[list[float], list[float], list[float]]:
    """Type laws for d = 2 (L = 2; x = 0 uses row 1, C_1 = {0, 2}; x' = 1 row 2, C_2 = {0, 1}).

    Types of a τ-tuple: (in both C_1^τ and C_2^τ — only the all-zero tuple, in C_1^τ only,
    in C_2^τ only, neither). Uniform tuple: 4^{−τ}, 2^{−τ} − 4^{−τ} twice, the rest. A true
    tuple of x (uniform on C_1^τ) is the zero tuple w.p. 2^{−τ}, else in C_1^τ only.
    Every law is uniform on each type, so type counts are sufficient."""
    a, b = 4.0**-tau, 2.0**-tau
    return [a, b - a, b - a, 1 - 2 * b + a], [b, 1 - b, 0.0, 0.0], [b, 0.0, 1 - b, 0.0]


def prhr_exact(protocol: Any) -> float:
    P = protocol.params
    n, rho = P.n, P.rho
    uni, m0, m1 = prhr_laws(P.tau)
    size = n * (1 + rho) + 1
    blanket = multinomial_grid(n * rho, uni, size)
    best = 0.0
    for k0 in sorted({0, (n - 1) // 2, n - 1}):  # k0 others hold 0, the rest hold 1
        grid = blanket
        for law, count in ((m0, k0), (m1, n - 1 - k0)):
            for _ in range(count):
                grid = add_message(grid, law)
        p0, p1 = add_message(grid, m0), add_message(grid, m1)
        best = max(best, exact_eps(p0, p1, P.delta))
    return best


@pytest.mark.parametrize(("delta", "n"), [(0.5, 2), (0.9, 3)])
def test_prhr_exact_within_claim(delta: float, n: int) -> None:
    """n = 2 (τ = 1) and n = 3 (τ = 2): ρ = 61 and 40 blanket tuples per user."""
    pr = build_protocol("prhr", ProtocolSpec(epsilon=1.0, delta=delta, n=n, domain=2))
    assert pr.params.L == 2
    assert prhr_exact(pr) <= pr.privacy.epsilon_central + TOL


def _tuple_index(words: npt.NDArray[np.uint32], L: int, tau: int) -> npt.NDArray[np.int64]:
    """Column form (L words of τ bits) → tuple index Σ_k a_k (2^L)^k."""
    w = words.astype(np.int64)
    a = [sum(((w[:, j] >> k) & 1) << j for j in range(L)) for k in range(tau)]
    return np.asarray(sum(a[k] * (1 << (L * k)) for k in range(tau)), dtype=np.int64)


def test_prhr_and_prrq_message_laws() -> None:
    """PRHR (τ = 2): the true tuple is uniform on C_{x+1}^τ, the blanket uniform. PRRQ
    (d = 2, τ = 1): the root tuple is uniform on C_1, x = 0's left-child tuple on C_2, x = 1's
    padding and every blanket tuple uniform."""
    rng = np.random.default_rng(13)
    pr = build_protocol("prhr", ProtocolSpec(epsilon=1.0, delta=0.5, n=3, domain=2))
    P, N = pr.params, 10000
    for x in (0, 1):
        m = pr.randomize(np.full(N, x), rng=rng)
        in_c = [bin((x + 1) & c).count("1") % 2 == 0 for c in range(4)]
        law = [float(in_c[t % 4] and in_c[t // 4]) for t in range(16)]
        assert _gof(np.bincount(_tuple_index(m[:N], P.L, P.tau), minlength=16), law) > 1e-4
        blank = _tuple_index(m[N : 5 * N], P.L, P.tau)
        assert _gof(np.bincount(blank, minlength=16), np.ones(16)) > 1e-4
    pr = build_protocol("prrq", ProtocolSpec(epsilon=1.0, delta=0.9, n=2, domain=2))
    P = pr.params
    assert (P.h, P.L, P.tau, P.sensitivity) == (1, 2, 1, 2)
    for x in (0, 1):
        m = pr.randomize(np.full(N, x), rng=rng)
        assert m.shape[0] == N * (P.sensitivity + P.rho)
        cells = _tuple_index(m, P.L, P.tau)
        used = 2 if x == 0 else 1
        true = cells[: N * used].reshape(N, used)
        assert _gof(np.bincount(true[:, 0], minlength=4), [1, 0, 1, 0]) > 1e-4
        if x == 0:
            assert _gof(np.bincount(true[:, 1], minlength=4), [1, 1, 0, 0]) > 1e-4
        rest = cells[N * used : N * used + 4 * N]
        assert _gof(np.bincount(rest, minlength=4), [1, 1, 1, 1]) > 1e-4


# --- SLH / MURS ----------------------------------------------------------------------------
def slh_laws(protocol: Any) -> tuple[list[float], list[float], list[float]]:
    """Type laws of a report (s, y) for d = 2, types (y = H_s(0) only, y = H_s(1) only,
    y = both — a colliding seed, neither). Seeds collide w.p. 1/d' (ideal 2-universal hash,
    checked by the draws below). A user holding 0 reports H_s(0) w.p. p', each other value
    w.p. q' = (1 − p')/(d' − 1); a fake is a uniform (s, y). Every law is constant on each
    type (a report's density is p' or q' times the seed's), so type counts are sufficient."""
    P = protocol.params
    g, p = P.g, P.p
    q, c = (1 - p) / (g - 1), 1.0 / g
    z = c * (1 - p) + (1 - c) * (g - 2) * q
    mu0 = [(1 - c) * p, (1 - c) * q, c * p, z]
    mu1 = [(1 - c) * q, (1 - c) * p, c * p, z]
    fake = [(1 - c) / g, (1 - c) / g, c / g, c * (g - 1) / g + (1 - c) * (g - 2) / g]
    return mu0, mu1, fake


def slh_exact(protocol: Any) -> float:
    """No fakes, the other n − 1 users hold 0 (all-1 is the mirror image). With one i.i.d.
    group the multinomial identity P(h − e_t)/P(h) = h_t/(n μ0(t)) gives
    P1(h) = P0(h) · (h_B + h_Z + h_A0 q'/p' + h_A1 p'/q')/n, a function of (h_A0, h_A1)."""
    P = protocol.params
    n, p = P.n, P.p
    q = (1 - p) / (P.g - 1)
    mu0, _, _ = slh_laws(protocol)
    a0, a1 = np.arange(n + 1)[:, None], np.arange(n + 1)[None, :]
    rest = n - a0 - a1
    ok = rest >= 0
    r = np.where(ok, rest, 0)
    lp = (
        gammaln(n + 1)
        - gammaln(a0 + 1)
        - gammaln(a1 + 1)
        - gammaln(r + 1)
        + a0 * math.log(mu0[0])
        + a1 * math.log(mu0[1])
        + r * math.log(mu0[2] + mu0[3])
    )
    p0 = np.where(ok, np.exp(np.where(ok, lp, -np.inf)), 0.0)
    p1 = p0 * (r + a0 * q / p + a1 * p / q) / n
    return exact_eps(p0, p1, P.delta)


def murs_exact(protocol: Any) -> float:
    """Dense type-count grid of the n_r fakes and the other users (all 0, all 1, half/half)."""
    P = protocol.params
    mu0, mu1, fake = slh_laws(protocol)
    size = P.n + P.total_fakes + 1
    best = 0.0
    for k0 in sorted({0, (P.n - 1) // 2, P.n - 1}):
        grid = multinomial_grid(P.total_fakes, fake, size)
        for law, count in ((mu0, k0), (mu1, P.n - 1 - k0)):
            for _ in range(count):
                grid = add_message(grid, law)
        best = max(best, exact_eps(add_message(grid, mu0), add_message(grid, mu1), P.delta))
    return best


@pytest.mark.parametrize(("delta", "n"), [(1e-3, 1000), (1e-6, 600)])
def test_slh_exact_within_claim(delta: float, n: int) -> None:
    pr = build_protocol("slh", ProtocolSpec(epsilon=1.0, delta=delta, n=n, domain=2))
    assert slh_exact(pr) <= pr.privacy.epsilon_central + TOL


@pytest.mark.parametrize(("delta", "n", "fakes"), [(0.3, 2, 60), (0.3, 2, 100)])
def test_murs_exact_within_claim(delta: float, n: int, fakes: int) -> None:
    spec = ProtocolSpec(epsilon=1.0, delta=delta, n=n, domain=2, fake_reports=fakes)
    pr = build_protocol("murs", spec)
    assert murs_exact(pr) <= pr.privacy.epsilon_central + TOL


def test_slh_murs_message_laws() -> None:
    from protocols.ldp._freq_oracles import lh_hash

    rng = np.random.default_rng(14)
    spec = ProtocolSpec(epsilon=1.0, delta=0.3, n=10, domain=2, fake_reports=200)
    pr = build_protocol("murs", spec)
    g = pr.params.g
    assert g == 7  # d' > 2: all four types occur

    def types(m: npt.NDArray[np.uint64]) -> npt.NDArray[np.int64]:
        s, y = m[:, 0].astype(np.uint64), m[:, 1].astype(np.int64)
        h0 = lh_hash(s, np.zeros(s.size, np.uint64), g).astype(np.int64)
        h1 = lh_hash(s, np.ones(s.size, np.uint64), g).astype(np.int64)
        a0, a1 = y == h0, y == h1
        return np.where(a0 & a1, 2, np.where(a0, 0, np.where(a1, 1, 3)))

    mu0, mu1, fake = slh_laws(pr)
    M = 100_000
    for x, law in ((0, mu0), (1, mu1)):
        assert (
            _gof(np.bincount(types(pr.randomize(np.full(M, x), rng=rng)), minlength=4), law) > 1e-4
        )
    assert _gof(np.bincount(types(pr.sample_fakes(M, rng=rng)), minlength=4), fake) > 1e-4


# --- report fragmenting (hist_kr_frag) and one-hot attribute fragmenting (hist_rr_attr) ----
def _power(pmf: FloatArray, m: int) -> FloatArray:
    out, base = np.array([1.0]), pmf
    while m:
        if m & 1:
            out = np.convolve(out, base)
        m >>= 1
        if m:
            base = np.convolve(base, base)
    return out


def kr_frag_user_law(protocol: Any, x: int) -> FloatArray:
    """d = 2: a user's count of 1-fragments, Σ_x̃ P(x̃ | x) Bin(ω, P(report 1 | x̃)); the
    backstop is 2-RR with uniform probability λ_b, each fragment 2-RR with λ_f."""
    om, lb, lf = protocol.fragments, protocol._lam, protocol.inner.uniform_probability
    law = np.zeros(om + 1)
    for xt in (0, 1):
        law += (lb / 2 + (1 - lb) * (xt == x)) * binom.pmf(
            np.arange(om + 1), om, lf / 2 + (1 - lf) * (xt == 1)
        )
    return law


def kr_frag_exact(protocol: Any, n: int) -> float:
    l0, l1 = kr_frag_user_law(protocol, 0), kr_frag_user_law(protocol, 1)
    best = 0.0
    for k0 in sorted({0, (n - 1) // 2, n - 1}):
        others = np.convolve(_power(l0, k0), _power(l1, n - 1 - k0))
        p0, p1 = np.convolve(others, l0), np.convolve(others, l1)
        best = max(best, exact_eps(p0, p1, protocol.privacy.delta))
    return best


@pytest.mark.parametrize(
    ("eps", "delta", "n", "omega"),
    [(1.0, 0.1, 2, 1), (1.0, 1e-3, 50, 4), (1.0, 1e-6, 500, 4), (3.0, 1e-6, 200, 8)],
)
def test_hist_kr_frag_exact_within_claim(eps: float, delta: float, n: int, omega: int) -> None:
    spec = ProtocolSpec(epsilon=eps, delta=delta, n=n, domain=2, options={"fragments": omega})
    pr = build_protocol("hist_kr_frag", spec)
    assert kr_frag_exact(pr, n) <= pr.privacy.epsilon_central + TOL


def test_hist_kr_frag_message_law() -> None:
    spec = ProtocolSpec(epsilon=1.0, delta=1e-3, n=50, domain=2, options={"fragments": 4})
    pr = build_protocol("hist_kr_frag", spec)
    rng = np.random.default_rng(15)
    for x in (0, 1):
        frags = pr.randomize(np.full(50_000, x), rng=rng).reshape(50_000, 4)
        assert _gof(np.bincount(frags.sum(axis=1), minlength=5), kr_frag_user_law(pr, x)) > 1e-4


def rr_attr_exact(protocol: Any) -> float:
    """d = 2: attribute a's count of 1-reports is independent of the other attribute's; x
    flips both bits. Others: k0 hold 0, the rest 1."""
    inner = protocol.inners[0]
    lam, n = inner.uniform_probability, inner._p.n

    def ber(b: int) -> FloatArray:
        r = lam / 2 + (1 - lam) * b
        return np.array([1 - r, r])

    best = 0.0
    for k0 in sorted({0, (n - 1) // 2, n - 1}):
        o0 = np.convolve(_power(ber(1), k0), _power(ber(0), n - 1 - k0))
        o1 = np.convolve(_power(ber(0), k0), _power(ber(1), n - 1 - k0))
        a = (np.convolve(o0, ber(1)), np.convolve(o0, ber(0)))
        b = (np.convolve(o1, ber(0)), np.convolve(o1, ber(1)))
        best = max(best, exact_eps_product(a, b, protocol.privacy.delta))
    return best


@pytest.mark.parametrize(
    ("eps", "delta", "n"), [(1.0, 0.1, 5), (1.0, 1e-3, 20), (2.0, 1e-6, 1000), (4.0, 1e-6, 200)]
)
def test_hist_rr_attr_exact_within_claim(eps: float, delta: float, n: int) -> None:
    pr = build_protocol("hist_rr_attr", ProtocolSpec(epsilon=eps, delta=delta, n=n, domain=2))
    assert rr_attr_exact(pr) <= pr.privacy.epsilon_central + TOL


def test_hist_rr_attr_message_law() -> None:
    pr = build_protocol("hist_rr_attr", ProtocolSpec(epsilon=1.0, delta=1e-3, n=20, domain=2))
    lam = pr.inners[0].uniform_probability
    rng = np.random.default_rng(16)
    for x in (0, 1):
        m = pr.randomize(np.full(50_000, x), rng=rng)
        b0, b1 = m[m[:, 0] == 0, 1], m[m[:, 0] == 1, 1]
        r0, r1 = lam / 2 + (1 - lam) * (x == 0), lam / 2 + (1 - lam) * (x == 1)
        law = [(1 - r0) * (1 - r1), r0 * (1 - r1), (1 - r0) * r1, r0 * r1]
        assert _gof(np.bincount(b0 + 2 * b1, minlength=4), law) > 1e-4
