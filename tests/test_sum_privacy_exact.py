"""Exact privacy of the shuffled view of the SUM and multi-message COUNTING protocols.

An independent check of ``privacy.epsilon_central`` at ``privacy.delta``: each user's
message law is written out here from the protocol's own randomizer and parameters (and
checked against seeded draws of ``randomize`` by a chi-square test), the analyzer's view is
computed exactly for the smallest configurations each protocol accepts, and its exact ε(δ)
for the victim's value at the extremes of the input range (the others' data fixed, searched
over all-equal datasets and a few mixtures) must not exceed the claim. Nothing here calls
the project's accountants (``protocols.accounting._exact_shuffle``, ``_binary_rr``, ``_collusion``).

The views:
* ``rsum_rr``: the number of ones among the n·r bits (the bits' total is fixed).
* ``rsum_kr``, ``rsum_rm``: the histogram of the k-RR levels (per precision for rsum_rm, the
  precisions independent given the data). The levels nobody's law favours are lumped: every
  user sends each of them with probability λ/L, so given their total count their split is
  the same multinomial under both hypotheses, and the likelihood ratio is that of the counts
  of the favoured levels.
* ``rsum_pure``: the number of ones per digit position.
* ``rsum_dsg``: the sum mod q (Split-Mix's closeness is the whole of the claimed δ, since
  σ = log₂((1 + e^ε)/δ), so the sum must be ε-DP at δ = 0).
* ``disele``: the real Split-Mix shares over Z_2: per label, the count of ones among its n·m
  shares (a value of parity b is split into m bits uniform among those of parity b).
* ``cnt_2m``: the number of messages, Σx + Bin(n, p).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from functools import cache
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from scipy.special import comb, gammaln
from scipy.stats import chisquare

import crypto
from protocols import ProtocolSpec, build_protocol

Law = npt.NDArray[np.float64]

#: Slack for the comparison with the claim: the laws are summed in floating point.
TOL = 1e-9

#: A chi-square p-value below this fails the law check (the draws are seeded).
P_MIN = 1e-6


@cache
def _build(name: str, eps: float, delta: float, n: int, domain: int = 2, **opt: Any) -> Any:
    spec = ProtocolSpec(epsilon=eps, delta=delta, n=n, domain=domain, options=opt)
    return build_protocol(name, spec)


# --- exact ε(δ) of a pair of laws ---------------------------------------------------------


def exact_epsilon(p: npt.ArrayLike, q: npt.ArrayLike, delta: float) -> float:
    """The least ε ≥ 0 with Σ max(P − e^ε Q, 0) ≤ δ and Σ max(Q − e^ε P, 0) ≤ δ."""
    a_all = np.asarray(p, dtype=np.float64).ravel()
    b_all = np.asarray(q, dtype=np.float64).ravel()

    def one(a: Law, b: Law) -> float:
        def excess(e: float) -> float:
            return float(np.sum(np.maximum(a - math.exp(e) * b, 0.0)))

        if excess(0.0) <= delta:
            return 0.0
        if float(a[b == 0].sum()) > delta:
            return math.inf
        both = (a > 0) & (b > 0)
        lo, hi = 0.0, float(np.max(np.log(a[both]) - np.log(b[both]))) + 1e-12
        if delta == 0.0:
            return hi - 1e-12
        for _ in range(100):
            mid = 0.5 * (lo + hi)
            lo, hi = (mid, hi) if excess(mid) > delta else (lo, mid)
        return hi

    return max(one(a_all, b_all), one(b_all, a_all))


def _conv(laws: list[Law]) -> Law:
    out = np.ones(1)
    for law in laws:
        out = np.convolve(out, law)
    return out


def _binom(n: int, p: float) -> Law:
    k = np.arange(n + 1)
    with np.errstate(divide="ignore"):
        log = gammaln(n + 1) - gammaln(k + 1) - gammaln(n - k + 1)
        log = log + k * np.log(p) + (n - k) * np.log1p(-p)
    return np.asarray(np.exp(log), dtype=np.float64)


def _rounding(x: float, k: int) -> list[tuple[int, float]]:
    """R_k(x) = ⌊xk⌋ + Ber(xk − ⌊xk⌋), as (level, probability)."""
    s = x * k
    fl = math.floor(s)
    f = s - fl
    if fl >= k:
        return [(k, 1.0)]
    return [(fl, 1.0 - f), (fl + 1, f)] if f > 0 else [(fl, 1.0)]


def _others(n: int, k: int) -> list[list[float]]:
    """The n − 1 others' values searched: all equal (at several levels and between levels)
    and mixtures of the two extremes."""
    levels = sorted({0, 1, k // 2, max(k - 1, 0), k})
    sets = [[v / k] * (n - 1) for v in levels]
    sets += [[x] * (n - 1) for x in (0.5 / k, 1 - 0.5 / k, 0.5)]
    h = (n - 1) // 2
    sets += [[0.0] * h + [1.0] * (n - 1 - h), [0.0] + [1.0] * (n - 2), [1.0] + [0.0] * (n - 2)]
    return [s for s in sets if len(s) == n - 1]


def _worst(claim: Any, pair: Callable[[list[float]], tuple[Law, Law]], n: int, k: int) -> float:
    return max(exact_epsilon(*pair(o), claim.delta) for o in _others(n, k))


def _chi2(observed: npt.ArrayLike, law: npt.ArrayLike) -> float:
    """p-value of observed counts against a law, cells of expectation < 5 pooled."""
    obs = np.asarray(observed, dtype=np.float64).ravel()
    exp = np.asarray(law, dtype=np.float64).ravel() * obs.sum()
    small = exp < 5
    assert obs[exp == 0].sum() == 0, "a draw fell where the written-out law has no mass"
    o = np.append(obs[~small], obs[small].sum())
    e = np.append(exp[~small], exp[small].sum())
    keep = e > 0
    return float(chisquare(o[keep], e[keep] * o[keep].sum() / e[keep].sum()).pvalue)


# --- rsum_rr --------------------------------------------------------------------------------


def _rr_user(v: int, r: int, lam: float) -> Law:
    """Ones among 1^v 0^{r−v} through binary RR (keep w.p. 1 − λ, else a fair bit)."""
    return np.convolve(_binom(v, 1 - lam / 2), _binom(r - v, lam / 2))


def _rr_law(x: float, r: int, lam: float) -> Law:
    out = np.zeros(r + 1)
    for v, w in _rounding(x, r):
        out += w * _rr_user(v, r, lam)
    return out


#: (ε, δ, n, r): r is the precision the default search picks at (ε, δ, n), fixed here since
#: that search costs seconds; the bits get the same λ either way.
RR = [(1.0, 0.1, 2, 1), (1.0, 0.1, 8, 2), (5.0, 0.1, 3, 2)]


@pytest.mark.parametrize(("eps", "delta", "n", "r"), RR)
def test_rsum_rr_exact_within_claim(eps: float, delta: float, n: int, r: int) -> None:
    p = _build("rsum_rr", eps, delta, n, precision=r)
    lam = p.group.lam

    def pair(others: list[float]) -> tuple[Law, Law]:
        base = _conv([_rr_law(x, r, lam) for x in others])
        return np.convolve(base, _rr_user(0, r, lam)), np.convolve(base, _rr_user(r, r, lam))

    exact = _worst(p.privacy, pair, n, r)
    assert exact <= p.privacy.epsilon_central + TOL, (eps, delta, n, exact)


def test_rsum_rr_message_law() -> None:
    p = _build("rsum_rr", 1.0, 0.1, 8, precision=2)
    rng = np.random.default_rng(1)
    for x in (0.0, 1.0, 0.3):
        ones = p.randomize(np.full(20_000, x), rng=rng).reshape(-1, p.r).sum(axis=1)
        counts = np.bincount(ones, minlength=p.r + 1)
        assert _chi2(counts, _rr_law(x, p.r, p.group.lam)) > P_MIN


# --- k-RR histograms: rsum_kr, rsum_rm ------------------------------------------------------


def _krr_pair(
    levels: int, lam: float, a: int, b: int, others: list[list[tuple[int, float]]]
) -> tuple[Law, Law]:
    """Laws of the counts of the favoured levels (module doc), victim at level a vs b."""
    favoured = sorted({a, b} | {v for mix in others for v, _ in mix})
    index = {v: i for i, v in enumerate(favoured)}
    shape = (len(others) + 2,) * len(favoured)

    def add(dist: Law, mix: list[tuple[int, float]]) -> Law:
        probs = np.full(len(favoured), lam / levels)
        for v, w in mix:
            probs[index[v]] += (1 - lam) * w
        out = dist * (1.0 - probs.sum())  # a lumped level: no favoured count moves
        for i, pr in enumerate(probs):
            src = tuple(slice(0, s - (j == i)) for j, s in enumerate(shape))
            dst = tuple(slice(int(j == i), s) for j, s in enumerate(shape))
            out[dst] += pr * dist[src]
        return np.asarray(out, dtype=np.float64)

    dist = np.zeros(shape)
    dist[(0,) * len(shape)] = 1.0
    for mix in others:
        dist = add(dist, mix)
    return add(dist, [(a, 1.0)]), add(dist, [(b, 1.0)])


KR = [(1.0, 0.1, 2), (1.0, 0.1, 5), (5.0, 0.1, 4), (3.0, 1e-6, 12)]


@pytest.mark.parametrize(("eps", "delta", "n"), KR)
def test_rsum_kr_exact_within_claim(eps: float, delta: float, n: int) -> None:
    p = _build("rsum_kr", eps, delta, n)
    k, lam = p.k, p.group.lam

    def pair(others: list[float]) -> tuple[Law, Law]:
        return _krr_pair(k + 1, lam, 0, k, [_rounding(x, k) for x in others])

    exact = _worst(p.privacy, pair, n, k)
    assert exact <= p.privacy.epsilon_central + TOL, (eps, delta, n, exact)


def _krr_level_law(mix: list[tuple[int, float]], levels: int, lam: float) -> Law:
    law = np.full(levels, lam / levels)
    for v, w in mix:
        law[v] += (1 - lam) * w
    return law


def test_rsum_kr_message_law() -> None:
    p = _build("rsum_kr", 5.0, 0.1, 4)
    rng = np.random.default_rng(2)
    for x in (0.0, 1.0, 0.45):
        msgs = p.randomize(np.full(20_000, x), rng=rng)
        counts = np.bincount(msgs, minlength=p.k + 1)
        law = _krr_level_law(_rounding(x, p.k), p.k + 1, p.group.lam)
        assert _chi2(counts, law) > P_MIN


def _rm_digits(x: float, precisions: tuple[int, ...]) -> list[list[tuple[int, float]]]:
    """Each precision's level of a user holding x (mixed radix, last digit rounded)."""
    out, rem = [], x
    for pj in precisions[:-1]:
        dj = min(math.floor(rem * pj), pj - 1)
        out.append([(dj, 1.0)])
        rem = rem * pj - dj
    out.append(_rounding(rem, precisions[-1]))
    return out


def _product(pairs: list[tuple[Law, Law]]) -> tuple[Law, Law]:
    p, q = np.ones(1), np.ones(1)
    for a, b in pairs:
        keep = (a.ravel() > 0) | (b.ravel() > 0)
        p, q = np.outer(p, a.ravel()[keep]).ravel(), np.outer(q, b.ravel()[keep]).ravel()
    return p, q


RM = [(10.0, 0.5, 10, {}), (10.0, 0.1, 20, {}), (10.0, 0.5, 20, {"messages": 2})]


@pytest.mark.parametrize(("eps", "delta", "n", "opt"), RM)
def test_rsum_rm_exact_within_claim(eps: float, delta: float, n: int, opt: dict[str, int]) -> None:
    p = _build("rsum_rm", eps, delta, n, **opt)
    lo, hi = _rm_digits(0.0, p.precisions), _rm_digits(1.0, p.precisions)

    def pair(others: list[float]) -> tuple[Law, Law]:
        digits = [_rm_digits(x, p.precisions) for x in others]
        return _product(
            [
                _krr_pair(levels, g.lam, lo[j][0][0], hi[j][0][0], [d[j] for d in digits])
                for j, (levels, g) in enumerate(zip(p.levels, p.groups, strict=True))
            ]
        )

    exact = _worst(p.privacy, pair, n, p.precisions[-1])
    assert exact <= p.privacy.epsilon_central + TOL, (eps, delta, n, opt, exact)


def test_rsum_rm_message_law() -> None:
    p = _build("rsum_rm", 10.0, 0.5, 20, messages=2)
    rng = np.random.default_rng(3)
    for x in (0.0, 1.0, 0.3):
        msgs = p.randomize(np.full(20_000, x), rng=rng).reshape(-1, p.channels, 2)
        assert (msgs[:, :, 0] == np.arange(p.channels)).all()
        # The channels' levels jointly: independent given the digits.
        cells = np.ravel_multi_index(tuple(msgs[:, j, 1] for j in range(p.channels)), p.levels)
        counts = np.bincount(cells, minlength=int(np.prod(p.levels)))
        digits = _rm_digits(x, p.precisions)
        law = np.ones(1)
        for j, g in enumerate(p.groups):
            law = np.outer(law, _krr_level_law(digits[j], p.levels[j], g.lam)).ravel()
        assert _chi2(counts, law) > P_MIN


# --- rsum_pure ------------------------------------------------------------------------------


def _pure_user(bit: int, counter: Any) -> Law:
    """Ones of one digit: m + bit w.p. 1 − λ, else z ~ ω, m = (τ − 1)/2, ω written out
    from scipy's pmfs: w·clip(m + B + η, 0, τ) + (1 − w)·clip(m + B + S·K, 0, τ),
    B ~ Ber(½), η ~ DLap(α) (scipy's dlaplace), K ~ LogSeries(e^{−ε}) (scipy's logser),
    S = ±1 fair; w = the counter's weight (1: the truncated DLap alone)."""
    from scipy.stats import dlaplace, logser

    lam, tau, alpha, w = counter.lam, counter.tau, counter.alpha, counter.weight
    m = (tau - 1) // 2
    k = np.arange(-4000, 4001)
    dlap = dlaplace.pmf(k, -math.log(alpha))
    pos = np.arange(1, 4001)
    series = logser.pmf(pos, math.exp(-counter.epsilon))
    law = np.zeros(tau + 1)
    for b in (0, 1):
        np.add.at(law, np.clip(m + b + k, 0, tau), 0.5 * lam * w * dlap)
        for sign in (-1, 1):
            np.add.at(law, np.clip(m + b + sign * pos, 0, tau), 0.25 * lam * (1 - w) * series)
    law[m + bit] += 1 - lam
    return law


def _pure_joint(p: Any, levels: list[int], weights: float = 1.0) -> Law:
    """Law of the per-digit counts of ones of users at these rounded levels (digits
    independent given the levels; digit j runs its own counter, ``p.counters[j]``)."""
    joint = np.ones(())
    for j, b in enumerate(p.counters):
        laws = [_pure_user(k, b) for k in (0, 1)]
        joint = np.multiply.outer(joint, _conv([laws[(v >> j) & 1] for v in levels]))
    return weights * joint


def _pure_pair(p: Any, others: list[float]) -> tuple[Law, Law]:
    """Victim 0 vs 1 (every digit flips); the others' rounding enumerated exactly."""
    n_all = len(others) + 1
    combos: list[tuple[float, list[int]]] = [(1.0, [])]
    for mix, count in Counter(tuple(_rounding(x, p.scale)) for x in others).items():
        if len(mix) == 1:
            combos = [(w, lv + [mix[0][0]] * count) for w, lv in combos]
            continue
        (lo, _), (hi, up) = mix
        up_law = _binom(count, up)
        combos = [
            (w * up_law[u], lv + [hi] * u + [lo] * (count - u))
            for w, lv in combos
            for u in range(count + 1)
        ]
    laws = []
    for victim in (0, p.scale):
        law = np.zeros(tuple(b.tau * n_all + 1 for b in p.counters))
        for w, lv in combos:
            law += _pure_joint(p, [*lv, victim], w)
        laws.append(law)
    return laws[0], laws[1]


PURE = [(1.0, 2), (2.0, 2), (1.0, 4), (3.0, 3)]


@pytest.mark.parametrize(("eps", "n"), PURE)
def test_rsum_pure_exact_within_claim(eps: float, n: int) -> None:
    p = _build("rsum_pure", eps, 0.1, n)
    assert p.privacy.delta == 0.0
    exact = _worst(p.privacy, lambda o: _pure_pair(p, o), n, p.scale)
    assert exact <= p.privacy.epsilon_central + TOL, (eps, n, exact)


@pytest.mark.parametrize(("eps", "n"), [(1.0, 2), (2.0, 3)])
def test_rsum_pure_optimal_allocation_exact_within_claim(eps: float, n: int) -> None:
    """The optimal allocation (unequal ε_j, one calibrated counter per digit, τ_j each):
    the exact ε of the joint per-digit counts, worst case over the others' values, within
    the claimed ε (basic composition over the digits)."""
    p = _build("rsum_pure", eps, 0.1, n, precision=2, allocation="optimal")
    assert len(set(p.digit_epsilons)) == 2
    assert sum(p.digit_epsilons) == pytest.approx(eps)
    assert p.privacy.delta == 0.0
    exact = _worst(p.privacy, lambda o: _pure_pair(p, o), n, p.scale)
    assert exact <= p.privacy.epsilon_central + TOL, (eps, n, exact)


def test_rsum_pure_message_law() -> None:
    p = _build("rsum_pure", 1.0, 0.1, 2)
    rng = np.random.default_rng(4)
    for x in (0.0, 1.0, 0.4):
        counts = np.zeros(tuple(c.tau + 1 for c in p.counters))
        for _ in range(2_000):
            msgs = p.randomize(np.array([x]), rng=rng)
            ones = np.bincount(msgs[:, 0], weights=msgs[:, 1], minlength=p.bits)
            counts[tuple(ones.astype(np.int64))] += 1
        law = sum(_pure_joint(p, [v], w) for v, w in _rounding(x, p.scale))
        assert _chi2(counts, law) > P_MIN


# --- rsum_dsg -------------------------------------------------------------------------------


def _dsg_user_noise(p: Any, n: int) -> tuple[Law, int]:
    """Law of one user's Pólya(1/n, α) − Pólya(1/n, α) (P[k] = Γ(k+r)/(k!Γ(r))(1−α)^r α^k),
    cut where α^k underflows; returned with its offset."""
    top = int(745 / -math.log(p.alpha)) + 10
    k = np.arange(top + 1)
    r = 1.0 / n
    log = gammaln(k + r) - gammaln(k + 1) - gammaln(r) + r * math.log1p(-p.alpha)
    polya = np.exp(log + k * math.log(p.alpha))
    return np.convolve(polya, polya[::-1]), top


DSG = [(1.0, 0.1, 3, {}), (1.0, 0.5, 3, {"precision": 1}), (5.0, 0.5, 3, {"precision": 1})]


@pytest.mark.parametrize(("eps", "delta", "n", "opt"), DSG)
def test_rsum_dsg_sum_exact_within_claim(
    eps: float, delta: float, n: int, opt: dict[str, int]
) -> None:
    p = _build("rsum_dsg", eps, delta, n, **opt)
    # σ = log₂((1 + e^ε)/δ): the shares' closeness takes the whole δ, the sum gets δ = 0.
    assert (1 + math.exp(eps)) * 2.0**-p.sigma == pytest.approx(delta, rel=1e-9)
    user, off = _dsg_user_noise(p, n)
    total = _conv([user] * n)
    cyclic = np.zeros(p.q)
    np.add.at(cyclic, (np.arange(total.size) - n * off) % p.q, total)
    # The others' rounded values only rotate the sum mod q; the victim moves it by p.
    exact = exact_epsilon(cyclic, np.roll(cyclic, p.p), 0.0)
    assert exact <= p.privacy.epsilon_central + TOL, (eps, delta, n, opt, exact)


def test_rsum_dsg_message_law() -> None:
    n = 3
    p = _build("rsum_dsg", 5.0, 0.5, n, precision=1)
    user, off = _dsg_user_noise(p, n)
    noise = np.zeros(p.q)
    np.add.at(noise, (np.arange(user.size) - off) % p.q, user)
    rng = np.random.default_rng(5)
    for x in (0.0, 1.0, 0.5):
        counts = np.bincount(p.randomize(np.full(40_000, x), rng=rng), minlength=p.q)
        law = sum(w * np.roll(noise, v) for v, w in _rounding(x, p.p))
        assert _chi2(counts, law) > P_MIN


# --- disele ---------------------------------------------------------------------------------


def _share_ones(m: int, one: float) -> Law:
    """Ones among the m Split-Mix shares (mod 2) of a bit that is 1 w.p. ``one``:
    C(m, v)/2^m · (1 + (−1)^v (1 − 2·one))."""
    v = np.arange(m + 1)
    return np.asarray(comb(m, v) / 2.0**m * (1 + (-1.0) ** v * (1 - 2 * one)), dtype=np.float64)


def _flip(p: Any) -> float:
    """P[y = 1] off the user's own label: (1 − (1 − e^{−ε})^{1/n})/2, ε per bin."""
    eps, n = p.params.epsilon, p.params.n
    return float((1 - (1 - math.exp(-eps)) ** (1.0 / n)) / 2)


DISELE = [(1.0, 0.1, 2), (4.0, 0.1, 3), (2.0, 0.3, 3), (0.2, 1e-3, 8), (1.0, 1e-6, 10)]


@pytest.mark.parametrize(("eps", "delta", "n"), DISELE)
def test_disele_shares_exact_within_claim(eps: float, delta: float, n: int) -> None:
    """d = 3, the others all hold 2: labels 0 and 1 both change (label 2 does not)."""
    p = _build("disele", eps, delta, n, domain=3)
    m, flip = p.params.shares, _flip(p)
    held = _conv([_share_ones(m, 0.5)] + [_share_ones(m, flip)] * (n - 1))
    empty = _conv([_share_ones(m, flip)] * n)
    exact = exact_epsilon(np.outer(held, empty), np.outer(empty, held), p.privacy.delta)
    assert exact <= p.privacy.epsilon_central + TOL, (eps, delta, n, exact)


def test_disele_message_law() -> None:
    p = _build("disele", 4.0, 0.1, 3, domain=3)
    rng = np.random.default_rng(6)
    flip = _flip(p)
    for x in (0, 2):
        msgs = p.randomize(np.full(20_000, x), rng=rng).reshape(-1, 3, 2)
        assert (msgs[:, :, 0] == np.arange(3)).all()
        cells = msgs[:, :, 1] @ np.array([4, 2, 1])
        one = [0.5 if j == x else flip for j in range(3)]
        law = np.ones(1)
        for j in range(3):
            law = np.outer(law, [1 - one[j], one[j]]).ravel()
        assert _chi2(np.bincount(cells, minlength=8), law) > P_MIN
    # The encoder's split (crypto.split_mix, as esa's encoder calls it).
    m = p.params.shares
    for bit in (0, 1):
        shares = crypto.split_mix(
            np.full(20_000, bit), modulus=2, shares=m, rng=np.random.default_rng(7 + bit)
        )
        counts = np.bincount(shares.sum(axis=1), minlength=m + 1)
        assert _chi2(counts, _share_ones(m, float(bit))) > P_MIN


# --- cnt_2m ---------------------------------------------------------------------------------

CNT_2M = [(1.0, 0.99, 71), (1.0, 1e-6, 1451), (0.5, 1e-3, 3041)]


@pytest.mark.parametrize(("eps", "delta", "n"), CNT_2M)
def test_cnt_2m_exact_within_claim(eps: float, delta: float, n: int) -> None:
    p = _build("cnt_2m", eps, delta, n)
    crowd = _binom(n, p.params.p)  # the others' extra "1"s and the victim's, Σx fixed
    exact = exact_epsilon(np.append(crowd, 0.0), np.insert(crowd, 0, 0.0), p.privacy.delta)
    assert exact <= p.privacy.epsilon_central + TOL, (eps, delta, n, exact)


def test_cnt_2m_message_law() -> None:
    p = _build("cnt_2m", 1.0, 0.99, 71)
    rng = np.random.default_rng(8)
    for x in (0, 1):
        sent = [p.randomize(np.array([x]), rng=rng).size for _ in range(4_000)]
        law = np.zeros(3)
        law[x], law[x + 1] = 1 - p.params.p, p.params.p
        assert _chi2(np.bincount(sent, minlength=3), law) > P_MIN
