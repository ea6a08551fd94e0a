"""Uniformity testing in the shuffle model: ``PUT`` (pure) and ``AUT`` (approximate).

Balcer, Cheu, Joseph, Mao (SODA'21, arXiv 2004.09481) §4, as summarized in survey §4.4.3:
each user one-hot encodes its sample and runs a robust shuffle-private *counter* on every
coordinate, each message labeled with its coordinate; the analyzer estimates every count
and computes a chi-square-type statistic from them (survey: "from these counts [Acharya,
Daskalakis, Kamath NeurIPS'15] and the Poisson parameter m compute z; if z < τ the
distribution is uniform"). PUT uses the pure counter ``Cnt_SGM`` (robust ε-DP), AUT the
approximate counter ``Cnt_BN`` (robust (ε, δ)-DP); both are looked up in the protocol
registry, so this module composes whatever counters are registered.

Domain grouping. As in the pan-private tester of Amin, Joseph, Mao (COLT'20, "Pan-private
uniformity testing") that BCJM adapt, the domain [k] is first cut by a public-coin random
partition into k' groups of near-equal size (sizes ⌊k/k'⌋ and ⌈k/k'⌉: group j of a
uniformly random permutation π of [k] holds the values π(i) with i ≡ j mod k'); users
one-hot encode their *group* over [k'], and the test runs on the k' group counts. The
partition is a function of a public seed (option ``partition_seed``, default 0) that
users and analyzer share; k' is option ``groups`` (default: the k' minimizing the stated
sample size below; ``groups = k`` is the ungrouped tester, with the identity partition).

The papers' text beyond their abstracts (headline: a robust approximate shuffle-private
tester with sample complexity Õ(k^{2/3}), and Ω(k^{2/3}) for robust *pure* testers) was not
available offline, so the statistic, threshold and choice of k' below are OUR
RECONSTRUCTION, derived here, and checked against that headline.

Privacy: a user changing its sample changes at most two group coordinates, so each
coordinate's counter is configured at (ε/2, δ/2) and the labeled union is (ε, δ)-DP by basic
composition (and (2ε', 2δ', γ)-robust when the counter is (ε', δ', γ)-robust); the
partition is public and data-independent. :attr:`privacy` is always twice what the
counter's own ``privacy`` proves, so PUT states only what ``cnt_sgm`` can prove for its
reconstruction (see that module), which may exceed the target ε. ``--option
counter=cnt_pure`` runs PUT on ``Cnt_PURE`` instead: its central pure ε is computed exactly
(:mod:`protocols._cnt_pure`), so the test meets the target, with τ one-bit messages per
user and group instead of one (:data:`COUNTERS` lists each tester's choices).

Statistic. n samples, group j of size s_j has null probability q_j = s_j/k and mean count
λ_j = n q_j; the counter gives ĉ_j = c_j + η_j with noise variance σ_j² (its
``expected_std``²). With the noise-corrected Poissonized chi-square of Acharya, Daskalakis,
Kamath (the "− c_j" term removes the sampling variance),
    Z = Σ_j ((ĉ_j − λ_j)² − ĉ_j − σ_j²)/λ_j + 1.
For n i.i.d. samples from p with group probabilities P_j, E[(c_j − λ_j)² − c_j] =
n²(P_j − q_j)² − n P_j², so E[Z] = (n − 1) χ²(P, q), χ²(P, q) = Σ_j (P_j − q_j)²/q_j: zero
under uniformity, whatever the group sizes.

Signal after a random partition. Let d = p − u on [k] (Σd = 0) and D_j = Σ_{i∈G_j} d_i.
Two distinct values share group j with probability s_j(s_j − 1)/(k(k − 1)), so
E[D_j²] = ‖d‖² s_j(k − s_j)/(k(k − 1)) and, dividing by q_j and summing,
    E_π[χ²(P, q)] = ‖d‖² k (k' − 1)/(k − 1)
(for k' = k, the ungrouped k‖d‖²). TV(p, u) ≥ α gives ‖d‖² ≥ 4α²/k, hence
E[Z] ≥ 4(n − 1)α²(k' − 1)/(k − 1); the test rejects uniformity iff Z > τ, the midpoint
    τ = 2(n − 1)α²(k' − 1)/(k − 1).
The seed must be drawn after the distribution is fixed. Everything below is an expectation
over the partition, so it holds for a p chosen independently of the seed; against a p built
from a known seed it fails outright: put each group's whole mass on one of its values, and
the group probabilities equal the null ones (χ²(P, q) = 0) while TV(p, u) = 1 − k'/k. A
deployment should therefore draw a fresh public ``partition_seed`` for each test (e.g. from
the epoch's public randomness); the fixed default 0 suits simulations
(tests/test_uniformity.py shows such a p accepted under its seed and rejected under another).

This is an expectation over the partition: spread-out alternatives keep ≈ (k'−1)/(k−1) of
their distance with a χ²_{k'−1}/(k'−1)-like spread, which is why k' is kept ≥ min(k, 16)
(:data:`MIN_GROUPS`); an alternative concentrated on two values loses its signal when both
land in one group (probability ≈ 1/k'). How far below its expectation the signal can fall
is bounded, for every alternative at once, by :func:`partition_failure_bound`: the exact
second moment of χ² over the partition (:func:`partition_moments`, checked against every
permutation at small k) and Cantelli's inequality. The chance of keeping less than half the
expected signal is at most 0.29 at k = 64, k' = 16; 0.34 at k = 1024, k' = 16; 0.15 at
k = 4096, k' = 47; 0.014 at k = 4096, k' = 512 (:attr:`UniformityTester.partition_failure`).
Cantelli is conservative: at k = 64, k' = 16 the measured frequencies are 0.02 for a ±
alternating alternative and 0.05 for a two-point one, against the bound 0.29.
The stated sample size does not include it: it is the test's error for a partition that
keeps the expected signal, and the bound says how often that may fail (a worst case over
alternatives; for a given one the tests measure the error rates with a fresh partition per
repeat). For a given alternative p and the tester's own partition,
:meth:`UniformityTester.type_ii_bound` states the false-acceptance error: Chebyshev with
E[Z] (exact) and the Poissonized Var[Z] (:meth:`UniformityTester.statistic_moments`);
e.g. 0.013 for AUT at k = 10, n = 5 000, ε = 2 on a half-up/half-down p at TV 0.25
(measured: 0 of 300), 1 below TV ≈ 0.185, where E[Z] falls under τ.

Null variance (Poissonized counts, noise independent with Gaussian fourth moment): with
Y = c_j − λ_j, (Y + η)² − (λ + Y + η) − σ² = (Y² − Y − λ) + (2Y − 1)η + (η² − σ²), three
uncorrelated parts of variances 2λ², (4λ + 1)σ², 2σ⁴, so
    Var₀[Z] ≈ 2(k' − 1) + Σ_j ((4λ_j + 1)σ_j² + 2σ_j⁴)/λ_j²
(2(k' − 1): the multinomial Pearson variance). Chebyshev bounds the type I error by
Var₀/τ². Stated sample size: the smallest n with Var₀ ≤ β τ² (:func:`uniformity_min_samples`).

Choice of k'. With σ² independent of n (the robust counters) and λ = n/k', the three terms
of Var₀ ≤ β τ² ≈ 4βn²α⁴k'²/k² give
    n ≳ k/(α²√(2βk'))  (sampling),   n ≳ (σ²k²/β)^{1/3}/α^{4/3}  (noise × sampling),
    n ≳ σ k'^{1/4} √k/(α (2β)^{1/4})  (noise²).
The first falls and the last grows with k', the middle one does not depend on it; they
balance at k' ≈ k^{2/3}/((ασ)^{4/3}(2β)^{1/3}), where n ≈ k^{2/3}σ^{2/3}/(α^{4/3}(2β)^{1/3}),
the order of the middle term: the Õ(k^{2/3}) of the headline (σ = O(√log(1/δ)/ε) for
``Cnt_BN``). Ungrouped (k' = k) the noise² term is σ k^{3/4}/(α(2β)^{1/4}).
:func:`optimal_groups` minimizes the exact stated n over every integer k' ∈ [min(k, 16), k]
(ties to the smaller k': fewer messages per user). At k = 4096, α = 0.25, β = 0.1 it picks
k' = 512 (n = 12 545 vs 16 566 ungrouped) for AUT's counter noise at ε = 2 (σ² ≈ 22.8), and
k' = 47 (n = 44 690 vs 98 008) at σ² = 1000.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from ._base import (
    Estimate,
    InputKind,
    PrivacyGuarantee,
    ShuffleProtocol,
    check_delta,
    check_epsilon,
    check_n,
)
from ._errors import ParameterError
from ._krr import decode_uints, encode_uints, uint_codec_size
from ._registry import ProtocolSpec, build_protocol, protocol_names, register_protocol

__all__ = [
    "COUNTERS",
    "UniformityDecision",
    "UniformityTester",
    "group_partition",
    "null_variance",
    "optimal_groups",
    "partition_failure_bound",
    "partition_moments",
    "uniformity_min_samples",
]

#: Largest domain: every user runs one counter per group, and k' ≤ k.
MAX_DOMAIN = 1 << 16

#: Smallest number of groups the optimizer picks (module doc: partition fluctuation).
MIN_GROUPS = 16


def group_partition(k: int, groups: int, seed: int) -> npt.NDArray[np.int64]:
    """Public-coin partition of [k] into ``groups`` near-equal groups: value → group.

    Group j holds π(i) for every i ≡ j (mod k'), π a permutation of [k] drawn from
    ``numpy.random.default_rng(seed)``, so sizes are ⌊k/k'⌋ or ⌈k/k'⌉. ``groups == k`` is
    the identity (no grouping). Deterministic given (k, k', seed): users and analyzer derive
    the same partition from the public seed.
    """
    k = check_n(k, "k", 2)
    groups = _check_groups(groups, k)
    if groups == k:
        return np.arange(k, dtype=np.int64)
    perm = np.random.default_rng(seed).permutation(k)
    out = np.empty(k, dtype=np.int64)
    out[perm] = np.arange(k, dtype=np.int64) % groups
    return out


# Coefficients (of p₂², of p₄) of Σ over distinct values of Π_b d_{v_b}^{|b|}, by the block
# sizes of a set partition of four positions, when Σ d = 0 (Newton's identities).
_BLOCK_COEF: dict[tuple[int, ...], tuple[float, float]] = {
    (4,): (0.0, 1.0),
    (3, 1): (0.0, -1.0),
    (2, 2): (1.0, -1.0),
    (2, 1, 1): (-1.0, 2.0),
    (1, 1, 1, 1): (3.0, -6.0),
}


def _set_partitions(n: int) -> list[list[list[int]]]:
    if n == 0:
        return [[]]
    out = []
    for p in _set_partitions(n - 1):
        for i in range(len(p)):
            out.append([*p[:i], [*p[i], n - 1], *p[i + 1 :]])
        out.append([*p, [n - 1]])
    return out


def _falling(s: float, c: int) -> float:
    return math.prod(s - t for t in range(c))


@lru_cache(maxsize=64)
def partition_moments(k: int, groups: int) -> tuple[float, float, float]:
    """(e, a, b) with E_π[Q] = e·‖d‖² and E_π[Q²] = a·‖d‖⁴ + b·Σd⁴, exactly, for every
    d with Σd = 0, where Q = Σ_j D_j²/s_j = χ²(P, q)/k over the random partition of
    :func:`group_partition` (sizes s_j = |{i < k : i ≡ j mod k'}|).

    Q = Σ_{i,l} d_i d_l w(i, l), w = 1/s_j when i and l share group j. E[Q²] sums
    E[w(i,l) w(i',l')] over the 15 equality patterns of (i, l, i', l'): distinct values
    land in groups with multiplicities c_j with probability Π_j (s_j)_{c_j} / (k)_r.
    """
    k = check_n(k, "k", 2)
    groups = _check_groups(groups, k)
    sizes = [float(len(range(j, k, groups))) for j in range(groups)]
    a = b = 0.0
    for blocks in _set_partitions(4):
        r = len(blocks)
        block_of = {pos: i for i, blk in enumerate(blocks) for pos in blk}
        first, second = {block_of[0], block_of[1]}, {block_of[2], block_of[3]}
        e = sum(_falling(s, r) / (s * s) for s in sizes)  # both pairs in one group
        if not first & second:  # ... or in two different groups
            fa = [_falling(s, len(first)) / s for s in sizes]
            fb = [_falling(s, len(second)) / s for s in sizes]
            e += sum(fa) * sum(fb) - sum(x * y for x, y in zip(fa, fb, strict=True))
        e /= _falling(k, r)
        ca, cb = _BLOCK_COEF[tuple(sorted((len(blk) for blk in blocks), reverse=True))]
        a += e * ca
        b += e * cb
    return (groups - 1) / (k - 1), a, b


def partition_failure_bound(k: int, groups: int, theta: float = 0.5) -> float:
    """Upper bound, over every alternative, on P_π[χ²(P, q) ≤ (1 − θ)·E_π χ²(P, q)]: the
    chance that the random partition keeps less than 1 − θ of the expected signal.

    Cantelli's inequality with the exact second moment (:func:`partition_moments`): with
    R = E[Q²]/E[Q]² = (a + b r)/e², r = Σd⁴/‖d‖⁴ ∈ [1/k, 1] (Cauchy–Schwarz), the bound is
    (R* − 1)/(R* − 1 + θ²), R* the larger of R at r = 1/k and r = 1 (R is linear in r).
    For ``groups == k`` (no grouping) it is 0.
    """
    if not 0.0 < theta < 1.0:
        raise ParameterError(f"theta must lie in (0, 1), got {theta!r}")
    if groups == k:
        return 0.0
    e, a, b = partition_moments(k, groups)
    worst = max((a + b * r) / (e * e) for r in (1.0 / k, 1.0)) - 1.0
    return max(worst, 0.0) / (max(worst, 0.0) + theta * theta)


def _check_groups(groups: object, k: int) -> int:
    if isinstance(groups, bool) or not isinstance(groups, (int, np.integer, float)):
        raise ParameterError(f"groups must be an integer in [2, k={k}], got {groups!r}")
    g = int(groups)
    if g != groups or not 2 <= g <= k:
        raise ParameterError(f"groups must be an integer in [2, k={k}], got {groups!r}")
    return g


def _group_sizes(k: int, groups: int) -> tuple[int, int, int]:
    """(small size, large size, number of large groups) of the near-equal partition."""
    small, large_count = divmod(k, groups)
    return small, small + 1, large_count


def null_variance(n: int, k: int, noise_var: npt.ArrayLike, groups: int | None = None) -> float:
    """Var₀[Z] ≈ 2(k' − 1) + Σ_j ((4λ_j + 1)σ_j² + 2σ_j⁴)/λ_j² (module docstring).

    Args:
        n: number of samples.
        k: domain size.
        noise_var: σ_j² per group (length k') or one value for all.
        groups: k' (default k: no grouping); λ_j = n s_j/k with the near-equal sizes s_j.
    """
    g = k if groups is None else groups
    small, large, n_large = _group_sizes(k, g)
    sizes = np.full(g, small, dtype=np.float64)
    sizes[:n_large] = large
    lam = n * sizes / k
    s2 = np.broadcast_to(np.asarray(noise_var, dtype=np.float64), (g,))
    return float(2.0 * (g - 1) + np.sum(((4.0 * lam + 1.0) * s2 + 2.0 * s2**2) / lam**2))


def _threshold(n: npt.ArrayLike, k: int, groups: npt.ArrayLike, alpha: float) -> Any:
    """τ = 2(n − 1)α²(k' − 1)/(k − 1): half the least expected Z at TV distance α."""
    return 2.0 * (np.asarray(n) - 1.0) * alpha**2 * (np.asarray(groups) - 1.0) / (k - 1.0)


def _min_samples_many(
    k: int, groups: npt.NDArray[np.int64], alpha: float, beta: float, noise_var: float
) -> npt.NDArray[np.int64]:
    """Smallest n with Var₀ ≤ β τ², for every k' in ``groups`` at once (integer bisection).

    Var₀ falls and τ grows with n, so feasibility is monotone in n. Equal-size groups are
    treated through the two size classes of the near-equal partition.
    """
    g = groups.astype(np.float64)
    small = np.floor(k / g)
    n_large = k - small * g
    s2 = float(noise_var)

    def ok(n: npt.NDArray[np.float64]) -> npt.NDArray[np.bool_]:
        noise = np.zeros_like(n)
        for size, count in ((small, g - n_large), (small + 1.0, n_large)):
            lam = n * size / k
            noise += count * ((4.0 * lam + 1.0) * s2 + 2.0 * s2 * s2) / lam**2
        tau = _threshold(n, k, g, alpha)
        return np.asarray(2.0 * (g - 1.0) + noise <= beta * tau * tau)

    lo = np.ones_like(g)  # n = 1: τ = 0, never feasible
    hi = np.full_like(g, 2.0)
    bad = ~ok(hi)
    while bad.any():
        lo = np.where(bad, hi, lo)
        hi = np.where(bad, 2.0 * hi, hi)
        if hi.max() > 2.0**62:
            raise ParameterError("uniformity: no sample size below 2^62 meets the bound")
        bad = ~ok(hi)
    while np.any(hi - lo > 1):
        mid = np.floor((lo + hi) / 2.0)
        good = ok(mid)
        hi = np.where(good, mid, hi)
        lo = np.where(good, lo, mid)
    return hi.astype(np.int64)


def uniformity_min_samples(
    k: int, alpha: float, beta: float, noise_var: float, groups: int | None = None
) -> int:
    """Smallest n whose Chebyshev type I bound Var₀/τ² is ≤ β, for constant noise σ².

    Args:
        k: domain size.
        alpha: distance (total variation) the tester must detect.
        beta: allowed type I error.
        noise_var: per-group noise variance σ² of the counter (assumed independent of n).
        groups: k' (default k: the ungrouped tester).
    """
    k = check_n(k, "k", 2)
    _check_alpha_beta(alpha, beta)
    g = k if groups is None else _check_groups(groups, k)
    return int(_min_samples_many(k, np.array([g]), float(alpha), float(beta), noise_var)[0])


def optimal_groups(k: int, alpha: float, beta: float, noise_var: float) -> tuple[int, int]:
    """The k' ∈ [min(k, 16), k] with the smallest stated sample size, and that size.

    Evaluates :func:`uniformity_min_samples` for every such k' (vectorized) and returns the
    smallest minimizer (fewer groups: fewer messages per user).
    """
    k = check_n(k, "k", 2)
    _check_alpha_beta(alpha, beta)
    cand = np.arange(min(k, MIN_GROUPS), k + 1, dtype=np.int64)
    cand = cand[cand >= 2]
    n = _min_samples_many(k, cand, float(alpha), float(beta), noise_var)
    best = int(np.argmin(n))  # first minimizer = smallest k'
    return int(cand[best]), int(n[best])


def _check_alpha_beta(alpha: float, beta: float) -> None:
    if not 0.0 < float(alpha) <= 1.0:
        raise ParameterError(f"alpha (TV distance to detect) must lie in (0, 1], got {alpha!r}")
    if not 0.0 < float(beta) < 1.0:
        raise ParameterError(f"beta (error probability) must lie in (0, 1), got {beta!r}")


@dataclass(frozen=True, slots=True)
class UniformityDecision:
    """The tester's output.

    Attributes:
        statistic: Z (module docstring).
        threshold: τ = 2(n − 1)α²(k' − 1)/(k − 1).
        uniform: the decision, Z ≤ τ.
        null_std: √Var₀[Z], the statistic's standard deviation under uniformity.
        type_i_bound: Chebyshev bound min(1, Var₀/τ²) on the false-rejection probability.
    """

    statistic: float
    threshold: float
    uniform: bool
    null_std: float
    type_i_bound: float


class UniformityTester(ShuffleProtocol):
    """Public random grouping + one-hot + a registered counter per group + chi-square.

    Args:
        counter: registered name of a BINARY counting protocol (``cnt_sgm`` for PUT,
            ``cnt_bn`` for AUT; any counter works, e.g. ``cnt_rr`` in tests).
        domain: k.
        epsilon: total ε of the test (each group's counter gets ε/2).
        delta: total δ (each counter gets δ/2).
        n: number of users (samples).
        alpha: total-variation distance to detect.
        beta: target error probability (sets the default k' and :attr:`min_samples`).
        fake_reports: passed to the counter's specification.
        groups: k' ∈ [2, k]; None (default) picks :func:`optimal_groups` for the counter's
            noise variance at this n; k means no grouping.
        partition_seed: public seed of the random partition (shared by users and analyzer).
    """

    name: ClassVar[str] = "uniformity"
    input_kind: ClassVar[InputKind] = InputKind.CATEGORICAL

    def __init__(
        self,
        *,
        counter: str,
        domain: int,
        epsilon: float,
        delta: float,
        n: int,
        alpha: float = 0.25,
        beta: float = 1.0 / 3.0,
        fake_reports: int = 0,
        groups: int | None = None,
        partition_seed: int = 0,
    ) -> None:
        k = check_n(domain, "domain", 2)
        if k > MAX_DOMAIN:
            raise ParameterError(f"{self.name}: domain={k} exceeds {MAX_DOMAIN}")
        eps = check_epsilon(epsilon)
        delta = check_delta(delta)
        n = check_n(n, "n", 2)
        _check_alpha_beta(alpha, beta)
        if groups is not None:
            groups = _check_groups(groups, k)
        seed = check_n(partition_seed, "partition_seed", 0)
        if counter not in protocol_names():
            raise ParameterError(
                f"{self.name}: counter {counter!r} is not registered; "
                f"choose one of: {', '.join(protocol_names())}"
            )
        inner = build_protocol(
            counter,
            ProtocolSpec(
                epsilon=eps / 2.0, delta=delta / 2.0, n=n, domain=2, fake_reports=fake_reports
            ),
        )
        if inner.input_kind is not InputKind.BINARY:
            raise ParameterError(f"{self.name}: {counter!r} is not a counting (BINARY) protocol")
        self._counter = inner
        self._k, self._eps, self._delta, self._n = k, eps, delta, n
        self._alpha, self._beta = float(alpha), float(beta)
        self._noise_var = self._design_noise_var()
        if groups is None:
            groups, _ = optimal_groups(k, self._alpha, self._beta, self._noise_var)
        self._groups = groups
        self._seed = seed
        self._group_of = group_partition(k, groups, seed)
        self._q = np.bincount(self._group_of, minlength=groups) / k
        self._label_size = uint_codec_size(groups)
        self.share_spec = inner.share_spec

    def _design_noise_var(self) -> float:
        """σ² of one group's counter at this n, from its own ``expected_std``.

        Counters state their std through ``estimate``; it is read off one run on a fixed
        synthetic column (n/k ones, seed 0) — exact for counters whose noise does not depend
        on the data (``cnt_bn``, ``cnt_sgm``), the null level for the others.
        """
        x = np.zeros(self._n, dtype=np.int64)
        x[: max(1, self._n // self._k)] = 1
        msgs = np.asarray(self._counter.randomize(x, rng=np.random.default_rng(0)))
        std = self._counter.estimate(msgs, n=self._n, n_fakes=0).expected_std[0]
        return float(std) ** 2

    # --- parameters -------------------------------------------------------------------
    @property
    def counter(self) -> ShuffleProtocol:
        return self._counter

    @property
    def domain(self) -> int:
        return self._k

    @property
    def groups(self) -> int:
        """k', the number of groups the domain is partitioned into."""
        return self._groups

    @property
    def partition(self) -> npt.NDArray[np.int64]:
        """The public value → group map (read-only copy)."""
        return self._group_of.copy()

    @property
    def alpha(self) -> float:
        return self._alpha

    @property
    def partition_failure(self) -> float:
        """:func:`partition_failure_bound` at θ = 1/2 for this (k, k'): the worst-case chance
        that the random partition keeps less than half of the expected χ² signal."""
        return partition_failure_bound(self._k, self._groups, 0.5)

    @property
    def noise_var(self) -> float:
        """σ² the design (k' and :attr:`min_samples`) assumed for each group's counter."""
        return self._noise_var

    @property
    def min_samples(self) -> int:
        """The stated sample size at this k': smallest n with Var₀ ≤ β τ² (module doc)."""
        return uniformity_min_samples(
            self._k, self._alpha, self._beta, self._noise_var, self._groups
        )

    @property
    def message_size(self) -> int:
        return self._label_size + self._counter.message_size

    @property
    def messages_per_user(self) -> float:
        return self._groups * self._counter.messages_per_user

    @property
    def privacy(self) -> PrivacyGuarantee:
        g = self._counter.privacy
        return PrivacyGuarantee(
            epsilon_central=2.0 * g.epsilon_central,
            epsilon_local=2.0 * g.epsilon_local,
            delta=min(1.0, 2.0 * g.delta),
            bound=f"2 x {self._counter.name} ({g.bound}); one-hot: two coordinates change",
        )

    def threshold(self, n: int) -> float:
        """τ = 2(n − 1)α²(k' − 1)/(k − 1): half the least mean of Z at TV distance α."""
        return float(_threshold(n, self._k, self._groups, self._alpha))

    def statistic_moments(self, p: npt.ArrayLike, n: int) -> tuple[float, float]:
        """(E[Z], Var[Z]) for n samples from the distribution ``p`` over [k], under this
        tester's public partition and design noise σ² (:attr:`noise_var`).

        E[Z] = (n − 1) χ²(P, q) exactly (module doc). The variance is the Poissonized one,
        as for Var₀: with μ_j = nP_j, λ_j = nq_j, d_j = μ_j − λ_j, each group contributes
        [2μ² + 4μd² + (4μ + (2d − 1)²)σ² + 2σ⁴]/λ² (Poisson Y = c − μ: Var Y² = 2μ² + μ,
        Cov(Y², Y) = μ; the noise terms are uncorrelated with them, Gaussian fourth moment).
        At p = uniform it is Var₀ (:func:`null_variance`) + 2: Poisson counts give 2k' where
        the multinomial gives 2(k' − 1). Against seeded runs (k = 10, n = 5 000) it is
        conservative: measured/stated 0.68–0.98, the gap growing with the distance (the
        multinomial's negative correlations, which Poissonization drops).
        """
        prob = np.asarray(p, dtype=np.float64)
        if prob.shape != (self._k,) or np.any(prob < 0) or not math.isclose(prob.sum(), 1.0):
            raise ParameterError(f"{self.name}: p must be a distribution over {self._k} values")
        n = check_n(n, "n", 2)
        big_p = np.bincount(self._group_of, weights=prob, minlength=self._groups)
        mu, lam = n * big_p, n * self._q
        d = mu - lam
        s2 = self._noise_var
        mean = (n - 1) * float(np.sum((big_p - self._q) ** 2 / self._q))
        per = 2 * mu**2 + 4 * mu * d**2 + (4 * mu + (2 * d - 1) ** 2) * s2 + 2 * s2**2
        return mean, float(np.sum(per / lam**2))

    def type_ii_bound(self, p: npt.ArrayLike, n: int) -> float:
        """Chebyshev bound Var[Z]/(E[Z] − τ)² on accepting uniformity for samples from
        ``p`` (1 where E[Z] ≤ τ): the test's false-acceptance error for *this* alternative
        under *this* partition (:meth:`statistic_moments`). Over a fresh random partition,
        :attr:`partition_failure` bounds the chance that E[Z] falls below 2τ."""
        mean, var = self.statistic_moments(p, n)
        tau = self.threshold(n)
        if mean <= tau:
            return 1.0
        return min(1.0, var / (mean - tau) ** 2)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(counter={self._counter.name!r}, domain={self._k}, "
            f"groups={self._groups}, epsilon={self._eps:.6g}, delta={self._delta:g}, "
            f"n={self._n}, alpha={self._alpha})"
        )

    # --- client ------------------------------------------------------------------------
    def randomize(self, values: npt.ArrayLike, *, rng: np.random.Generator) -> npt.NDArray[Any]:
        g = self._group_of[self.validate_values(values).astype(np.int64, copy=False)]
        parts = []
        # A loop over the k' groups (each vectorized over users), not over users.
        for j in range(self._groups):
            msgs = np.asarray(self._counter.randomize((g == j).astype(np.int64), rng=rng))
            parts.append(self._label(j, msgs))
        return np.concatenate(parts)

    @staticmethod
    def _as_rows(body: npt.NDArray[Any]) -> npt.NDArray[Any]:
        # reshape(k, -1) cannot infer the width of zero rows: give 1-D bodies one column.
        return body[:, None] if body.ndim == 1 else body.reshape(body.shape[0], -1)

    @classmethod
    def _label(cls, j: int, msgs: npt.NDArray[Any]) -> npt.NDArray[Any]:
        return cls._label_all(np.full(np.shape(msgs)[0], j, dtype=np.min_scalar_type(j)), msgs)

    def _unlabel(self, messages: npt.NDArray[Any]) -> tuple[npt.NDArray[Any], npt.NDArray[Any]]:
        msgs = np.asarray(messages)
        labels = msgs[:, 0].astype(np.int64)
        body = msgs[:, 1:]
        if body.shape[1] == 1:
            body = body[:, 0]
        return labels, body

    def encode(self, messages: npt.NDArray[Any]) -> npt.NDArray[np.uint8]:
        labels, body = self._unlabel(messages)
        out = np.empty((labels.size, self.message_size), dtype=np.uint8)
        out[:, : self._label_size] = encode_uints(labels, self._label_size)
        out[:, self._label_size :] = self._counter.encode(body)
        return out

    def decode(self, rows: npt.NDArray[np.uint8]) -> tuple[npt.NDArray[Any], npt.NDArray[np.bool_]]:
        rows = np.asarray(rows, dtype=np.uint8).reshape(-1, self.message_size)
        labels = decode_uints(rows[:, : self._label_size], self._label_size)
        body, ok = self._counter.decode(np.ascontiguousarray(rows[:, self._label_size :]))
        return self._label_all(labels, np.asarray(body)), ok & (labels < self._groups)

    @classmethod
    def _label_all(cls, labels: npt.NDArray[Any], body: npt.NDArray[Any]) -> npt.NDArray[Any]:
        """Rows (label, body…) in a dtype that holds both: a counter's uint8 bits must not
        wrap labels ≥ 256."""
        body2 = cls._as_rows(np.asarray(body))
        dtype = np.result_type(body2.dtype, np.asarray(labels).dtype)
        return np.concatenate(
            [np.asarray(labels).reshape(-1, 1).astype(dtype), body2.astype(dtype)], axis=1
        )

    def sample_fakes(self, count: int, *, rng: np.random.Generator) -> npt.NDArray[Any]:
        count = check_n(count, "count", 0)
        labels = rng.integers(0, self._groups, size=count)
        body = np.asarray(self._counter.sample_fakes(count, rng=rng))
        return self._label_all(labels, body)

    # --- analyzer ------------------------------------------------------------------------
    def counts(
        self, messages: npt.NDArray[Any], *, n: int, n_fakes: int
    ) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
        """Per-group count estimates ĉ_j and their standard deviations σ_j."""
        labels, body = self._unlabel(messages)
        kk = self._groups
        order = np.argsort(labels, kind="stable")
        bounds = np.searchsorted(labels[order], np.arange(kk + 1))
        # Fakes carry uniform labels; the counter's estimator is affine in its fake count,
        # so interpolating between floor and ceil of n_f/k' keeps it unbiased.
        per = n_fakes / kk
        lo, w = math.floor(per), per - math.floor(per)
        est = np.empty(kk)
        std = np.empty(kk)
        for j in range(kk):
            mine = body[order[bounds[j] : bounds[j + 1]]]
            e_lo = self._counter.estimate(mine, n=n, n_fakes=lo)
            if w > 0:
                e_hi = self._counter.estimate(mine, n=n, n_fakes=lo + 1)
                est[j] = (1 - w) * e_lo.values[0] + w * e_hi.values[0]
                std[j] = (1 - w) * e_lo.expected_std[0] + w * e_hi.expected_std[0]
            else:
                est[j], std[j] = e_lo.values[0], e_lo.expected_std[0]
        return est, std

    def statistic(self, counts: npt.ArrayLike, noise_var: npt.ArrayLike, *, n: int) -> float:
        """Z = Σ_j ((ĉ_j − λ_j)² − ĉ_j − σ_j²)/λ_j + 1, λ_j = n q_j (module doc)."""
        lam = n * self._q
        c = np.asarray(counts, dtype=np.float64)
        s2 = np.broadcast_to(np.asarray(noise_var, dtype=np.float64), c.shape)
        return float(np.sum(((c - lam) ** 2 - c - s2) / lam) + 1.0)

    def test(self, messages: npt.NDArray[Any], *, n: int, n_fakes: int) -> UniformityDecision:
        """Run the test on the shuffled messages of n users (+ n_fakes fakes)."""
        est, std = self.counts(messages, n=n, n_fakes=n_fakes)
        z = self.statistic(est, std**2, n=n)
        tau = self.threshold(n)
        var0 = null_variance(n, self._k, std**2, self._groups)
        return UniformityDecision(
            statistic=z,
            threshold=tau,
            uniform=bool(z <= tau),
            null_std=math.sqrt(var0),
            type_i_bound=min(1.0, var0 / tau**2),
        )

    def estimate(self, messages: npt.NDArray[Any], *, n: int, n_fakes: int) -> Estimate:
        """The statistic Z; its stated std is Z's spread around :meth:`truth` (the noiseless
        statistic of these data), not the null std the test uses (in ``extra``).

        With ĉ_j = c_j + e_j, e_j of mean 0 and variance σ_j² (symmetric, near-Gaussian),
        Z − Z_true = Σ_j (2 a_j e_j + e_j² − e_j − σ_j²)/λ_j with a_j = c_j − λ_j, so
            Var[Z | data] ≈ Σ_j (σ_j² (2 a_j − 1)² + 2 σ_j⁴) / λ_j²,
        evaluated at â_j = ĉ_j − λ_j. Under uniformity this is about the null variance's
        noise part; on skewed data it grows with the signal (the null std alone understated
        the error 60× at n = 10^5 on Zipf data).
        """
        dec = self.test(messages, n=n, n_fakes=n_fakes)
        est, std = self.counts(messages, n=n, n_fakes=n_fakes)
        lam = n * self._q
        s2 = np.broadcast_to(np.asarray(std, dtype=np.float64) ** 2, np.shape(est))
        a = np.asarray(est, dtype=np.float64) - lam
        var = float(np.sum((s2 * (2 * a - 1) ** 2 + 2 * s2**2) / lam**2))
        return Estimate(
            values=np.array([dec.statistic]),
            expected_std=np.array([math.sqrt(var)]),
            messages_used=int(np.asarray(messages).shape[0]),
            extra={
                "uniform": dec.uniform,
                "threshold": dec.threshold,
                "null_std": dec.null_std,
                "type_i_bound": dec.type_i_bound,
                "alpha": self._alpha,
                "groups": self._groups,
                "partition_failure_bound": self.partition_failure,
            },
        )

    def truth(self, values: npt.ArrayLike) -> npt.NDArray[np.float64]:
        """The noiseless statistic Z computed on the exact group counts."""
        x = self.validate_values(values)
        c = np.bincount(self._group_of[x], minlength=self._groups)
        return np.array([self.statistic(c, 0.0, n=x.shape[0])])


class PUT(UniformityTester):
    """``PUT``: the tester on ``Cnt_SGM`` counters (robust pure shuffle privacy), or on
    ``Cnt_PURE`` ones (``counter="cnt_pure"``): the survey's PUT states only Cnt_SGM's
    local bound, far above the target (module doc); Cnt_PURE's central ε is computed
    exactly, at τ one-bit messages per user and group."""

    name: ClassVar[str] = "put"


class AUT(UniformityTester):
    """``AUT``: the tester on ``Cnt_BN`` counters (robust approximate shuffle privacy)."""

    name: ClassVar[str] = "aut"


#: Counters each tester accepts through ``--option counter=NAME`` (the first is the
#: paper's, the default): PUT needs a pure (δ = 0) counter, AUT an (ε, δ) one.
COUNTERS = {"put": ("cnt_sgm", "cnt_pure"), "aut": ("cnt_bn", "cnt_rr", "cnt_2m")}


def _build(name: str, spec: ProtocolSpec) -> ShuffleProtocol:
    opts = spec.options
    groups = opts.get("groups")
    allowed = COUNTERS[name]
    counter = opts.get("counter", allowed[0])
    if counter not in allowed:
        raise ParameterError(
            f"{name}: counter must be one of {', '.join(allowed)}, got {counter!r}"
        )
    cls = PUT if name == "put" else AUT
    return cls(
        counter=str(counter),
        domain=spec.domain,
        epsilon=spec.epsilon,
        delta=spec.delta,
        n=spec.n,
        alpha=float(opts.get("alpha", 0.25)),
        beta=float(opts.get("beta", 1.0 / 3.0)),
        fake_reports=spec.fake_reports,
        groups=None if groups is None else groups,  # type: ignore[arg-type]
        partition_seed=opts.get("partition_seed", 0),  # type: ignore[arg-type]
    )


@register_protocol("put")
def _build_put(spec: ProtocolSpec) -> ShuffleProtocol:
    """``PUT``: grouping + one-hot + ``Cnt_SGM`` per group (robust pure shuffle privacy);
    ``--option counter=cnt_pure`` uses ``Cnt_PURE``, whose central ε is proven."""
    return _build("put", spec)


@register_protocol("aut")
def _build_aut(spec: ProtocolSpec) -> ShuffleProtocol:
    """``AUT``: grouping + one-hot + ``Cnt_BN`` per group (robust approximate privacy);
    ``--option counter=cnt_rr`` or ``cnt_2m`` swaps the counter."""
    return _build("aut", spec)
