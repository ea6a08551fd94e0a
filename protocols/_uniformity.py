"""Uniformity testing in the shuffle model: ``PUT`` (pure) and ``AUT`` (approximate).

One idea, and so one module past 1,000 lines: the grouped chi-square uniformity tester, from
its statistic and the design of its groups (the error bounds that choose them) to the
protocol that runs a counter per group; ``PUT`` and ``AUT`` differ only in that counter.

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
reconstruction (see that module). Two ways meet the target:
``--option encoding=splitmix`` (the default; ``encoding=unary``, the survey's messages, may
prove more than the target ε) keeps Cnt_SGM but sends each group's value as labeled
Split-Mix shares, so the analyzer sees each group's sum only, whose exact ε is at most the
survey's (:func:`protocols._cnt_sgm.sgm_sum_epsilon`): (ε, δ)-DP with m shares per user
and group; ``--option counter=cnt_pure`` runs PUT on ``Cnt_PURE``, whose central pure ε is
computed exactly (:mod:`protocols._cnt_pure`), with τ one-bit messages per user and group
instead of one (:data:`COUNTERS` lists each tester's choices). ``gamma`` and ``encoding``
are passed to the counter (:data:`COUNTER_OPTIONS`).

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
E_π[χ²(P, q)] ≥ χ²_α := 4α²(k' − 1)/(k − 1). The test trusts the partition to keep a
fraction κ of that (κ = 1 without grouping; below) and rejects uniformity iff Z > τ, the
midpoint
    τ = κ(n − 1)χ²_α/2 = 2κ(n − 1)α²(k' − 1)/(k − 1).
The seed must be drawn after the distribution is fixed. Everything below is an expectation
over the partition, so it holds for a p chosen independently of the seed; against a p built
from a known seed it fails outright: put each group's whole mass on one of its values, and
the group probabilities equal the null ones (χ²(P, q) = 0) while TV(p, u) = 1 − k'/k. A
deployment should therefore draw a fresh public ``partition_seed`` for each test (e.g. from
the epoch's public randomness); the fixed default 0 suits simulations
(tests/test_uniformity.py shows such a p accepted under its seed and rejected under another).

Partition failure. Spread-out alternatives keep ≈ (k'−1)/(k−1) of their distance with a
χ²_{k'−1}/(k'−1)-like spread; an alternative concentrated on two values loses its signal
when both land in one group (probability ≈ 1/k'). How far below its expectation the signal
can fall is bounded, for every alternative at once, by :func:`partition_failure_bound`: the
exact second moment of χ² over the partition (:func:`partition_moments`, checked against
every permutation at small k) and Cantelli's inequality. The chance of keeping less than
half the expected signal is at most 0.29 at k = 64, k' = 16; 0.34 at k = 1024, k' = 16;
0.15 at k = 4096, k' = 47; 0.014 at k = 4096, k' = 512. Cantelli is conservative: at
k = 64, k' = 16 the measured frequencies are 0.02 for a ± alternating alternative and 0.05
for a two-point one, against the bound 0.29.

Error bounds. Write P_j = q_j(1 + u_j), so Σ q_j u_j = 0 and
χ² := χ²(P, q) = Σ q_j u_j², and let the counter error e_j = ĉ_j − c_j have mean 0,
variance σ², fourth moment M₄ and E[e_j³ | c_j] = (n − 2c_j)t — what
:attr:`~protocols.ShuffleProtocol.count_noise` states for cnt_bn, cnt_sgm, cnt_pure and
cnt_rr (per user, summed; :class:`GroupNoise`). A counter that states none is refused:
the bounds below would not be proven for it (Cnt_2M, whose estimator also truncates to 0
whenever fewer than n ones arrive, i.e. for every group count below 50 ln(2/δ)/ε², and is
biased there). With Y_j = c_j − λ_j, Z splits into the sampling
part S = Σ_j c_j(c_j − 1)/λ_j − n + 1, the linear noise part L = Σ_j (2Y_j − 1)e_j/λ_j and
the square part Q = Σ_j (e_j² − σ²)/λ_j; S is uncorrelated with L and Q (E[e | c] = 0,
E[e² | c] = σ²), and so are different groups' noise terms.
* Exact (:meth:`UniformityTester.statistic_moments`): the multinomial factorial moments
  E c^(r) = n^(r)P^r and c^(2)·c^(2) = c^(4) + 4c^(3) + 2c^(2) give
      Var S = Σ_j (4n^(3)P_j³ + 2n^(2)P_j²)/λ_j² − 2n(n − 1)(2n − 3)(Σ_j P_j²/λ_j)²
  (checked against enumeration), Var L = σ² Σ_j E(2Y_j − 1)²/λ_j², Var Q = (M₄ − σ⁴)
  Σ_j 1/λ_j², and Cov(L, Q) = t Σ_j E[(2Y_j − 1)(n − 2c_j)]/λ_j². Seeded runs match it
  (measured/stated variance 0.94–1.07). Under uniformity Var S = 2(k' − 1)(n − 1)/n.
* Worst case for a given χ²: in those terms
      Var S = (n−1)/n·[2(k'−1) + 4(n−3)χ² + 4(n−2)Σ q_j u_j³ + 4Σ u_j + 2Σ u_j² − 2(2n−3)χ⁴],
  and Σ q u³ ≤ χ³/√q_min (|u_j| ≤ √(χ²/q_j)), Σ u² ≤ χ²/q_min, |Σ u| ≤ hχ with
  h = k/(2s(s + 1)) for sizes s and s + 1 (0 when k' divides k), while E(2Y − 1)² ≤
  4λ + 1 + 4λ²u²; Cov(L, Q) is bounded by Cauchy–Schwarz when t ≠ 0. The resulting V(χ²)
  (:func:`_variance_bound`; it covers the exact variance of hundreds of seeded
  alternatives, tests/test_count_noise.py) is a sum of powers χ^a with a ≤ 3/2, so
  V(χ²)/((n − 1)χ² − τ)² falls as χ² grows past τ/(n − 1): its worst case over every p
  whose partition kept at least κχ²_α is at χ² = κχ²_α.
* Hence, over the samples, the counters' noise and a fresh partition,
      P[reject | uniform] ≤ V(0)/τ²,
      P[accept | TV(p, u) ≥ α] ≤ F(1 − κ) + V(κχ²_α)/τ²,
  F(θ) = :func:`partition_failure_bound` (0 without grouping)
  (:attr:`UniformityTester.error_bounds`). For one alternative and one partition,
  :meth:`UniformityTester.type_ii_bound` uses the exact moments instead.
* Without grouping the distance itself is at hand, and the bound on Σ q u³ — what one
  heavy value attains, which a p at the least distance cannot have — is replaced: with
  u_j = k p_j − 1 and M = max_j u_j, Σ q u³ ≤ Mχ², and since the other k − 1 values must
  carry Σ|u| ≥ 2αk − M, Cauchy–Schwarz gives M ≤ 2α + √((k − 1)(χ² − 4α²)) (unless
  M > 2αk; M ≤ √(kχ²) always). The ratio is then no longer monotone in χ²; its supremum
  over χ² ∈ [4α², k − 1] is bounded cell by cell on a 1 % geometric grid
  (:func:`_ungrouped_type_ii`). Against the exact Chebyshev bound of 800 seeded
  alternatives and of a spread one with a spike of every size it is at most 0.72×
  (cnt_bn) and 0.86× (cnt_sgm) of it (tests/test_count_noise.py). Where sampling
  dominates it lowers the stated n by a third to a half (AUT at ε = 2, k = 4096,
  α = 0.25, β = 0.1: 18 003 instead of 27 203; noiseless, k = 10⁴, α = 0.1, β = 1/3:
  15 051 instead of 30 341), where the noise dominates hardly at all.

Stated sample size (:func:`uniformity_min_samples`): the smallest n at which both bounds are
≤ β, over κ ∈ {0.1, …, 0.9} (:data:`KAPPAS`; 1 without grouping), the noise moments held
at the tester's n (σ² of the robust counters does not depend on n). The tester itself uses
the κ whose larger bound is the least at its own n.

Choice of k'. Without the partition's failure, with σ² independent of n and λ = n/k', the
null terms of V(0) ≤ β τ² give
    n ≳ k/(α²√(2βk'))  (sampling),   n ≳ (σ²k²/β)^{1/3}/α^{4/3}  (noise × sampling),
    n ≳ σ k'^{1/4} √k/(α (2β)^{1/4})  (noise²),
and the alternative's terms n ≳ 8√k/(α β) (one heavy group) and 4/(β α²); the noise terms
fall with fewer groups, and at their balance k' ≈ k^{2/3}/((ασ)^{4/3}(2β)^{1/3}),
n ≈ k^{2/3}σ^{2/3}/(α^{4/3}(2β)^{1/3}): the Õ(k^{2/3}) of the headline (σ = O(√log(1/δ)/ε)
for ``Cnt_BN``). Ungrouped (k' = k) the noise² term is σ k^{3/4}/(α(2β)^{1/4}). But
grouping also costs F(1 − κ), which does not shrink with n and must stay below β, so it
pays only where the noise dominates. :func:`optimal_groups` minimizes the stated n over
:func:`group_candidates` (every k' ∈ [min(k, 16), 2048], a 0.5 % grid beyond, and k; ties to
the smaller k': fewer messages per user). For AUT's counter at ε = 2 (σ² ≈ 22.8), k = 4096,
α = 0.25, β = 0.1 it keeps k' = k (n = 18 003; the type I bound alone asked for 16 566); at
ε = 0.5 (σ² ≈ 259) and β = 1/3 it picks k' = 682 (n = 36 035 vs 38 843); at
σ² = 10⁵, k = 16 384, α = 0.05, β = 0.1, k' = 862 (10.7 M vs 14.3 M).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from ._base import (
    CountNoise,
    Estimate,
    InputKind,
    PrivacyGuarantee,
    ShuffleProtocol,
    check_delta,
    check_epsilon,
    check_n,
)
from ._errors import ParameterError
from ._messages import decode_uints, encode_uints, uint_codec_size
from ._random import RNGLike, as_generator
from ._registry import (
    ProtocolSpec,
    build_protocol,
    integer_option,
    number_option,
    protocol_names,
    register_protocol,
)

__all__ = [
    "COUNTERS",
    "GroupNoise",
    "UniformityDecision",
    "UniformityTester",
    "group_candidates",
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


def _size_counts(k: int, groups: Any) -> tuple[tuple[Any, Any], tuple[Any, Any]]:
    """((number, size) of the small groups, (number, size) of the large ones) of the
    near-equal partition of [k] into k' groups (sizes ⌊k/k'⌋ and ⌊k/k'⌋ + 1)."""
    g = np.asarray(groups, dtype=np.float64)
    small = np.floor(k / g)
    n_large = k - small * g
    return (g - n_large, small), (n_large, small + 1.0)


def _partition_moments_many(
    k: int, groups: npt.NDArray[np.int64]
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """:func:`partition_moments` for many k' at once (the near-equal partition has only two
    group sizes, so every sum over groups is a sum over two size classes)."""
    g = np.asarray(groups, dtype=np.float64)
    counts = _size_counts(k, g)

    def over_groups(f: Any) -> npt.NDArray[np.float64]:
        return sum((c * f(s) for c, s in counts), start=np.zeros_like(g))

    def falling(s: Any, c: int) -> Any:  # s(s − 1)…(s − c + 1)
        return math.prod((s - t for t in range(c)), start=np.ones_like(s))

    a = np.zeros_like(g)
    b = np.zeros_like(g)
    for blocks in _set_partitions(4):
        r = len(blocks)
        if r > k:  # r distinct values do not exist
            continue
        block_of = {pos: i for i, blk in enumerate(blocks) for pos in blk}
        first, second = {block_of[0], block_of[1]}, {block_of[2], block_of[3]}
        e = over_groups(lambda s, r=r: falling(s, r) / (s * s))  # both pairs in one group
        if not first & second:  # ... or in two different groups
            la, lb = len(first), len(second)
            fa = over_groups(lambda s, la=la: falling(s, la) / s)
            fb = over_groups(lambda s, lb=lb: falling(s, lb) / s)
            e = (
                e
                + fa * fb
                - over_groups(lambda s, la=la, lb=lb: falling(s, la) * falling(s, lb) / s**2)
            )
        e = e / math.prod(k - t for t in range(r))
        ca, cb = _BLOCK_COEF[tuple(sorted((len(blk) for blk in blocks), reverse=True))]
        a += e * ca
        b += e * cb
    return (g - 1.0) / (k - 1.0), a, b


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
    e, a, b = _partition_moments_many(k, np.array([groups]))
    return float(e[0]), float(a[0]), float(b[0])


def _failure(k: int, groups: Any, moments: tuple[Any, Any, Any], theta: Any) -> Any:
    """:func:`partition_failure_bound` from :func:`partition_moments`' (e, a, b); every
    argument but k broadcasts (many k', many θ)."""
    e, a, b = moments
    worst = np.maximum((a + b / k) / (e * e), (a + b) / (e * e)) - 1.0
    worst = np.maximum(worst, 0.0)
    theta = np.asarray(theta)
    return np.where(np.asarray(groups) == k, 0.0, worst / (worst + theta * theta))


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
    k = check_n(k, "k", 2)
    groups = _check_groups(groups, k)
    return float(_failure(k, groups, partition_moments(k, groups), theta))


def _check_groups(groups: object, k: int) -> int:
    if isinstance(groups, bool) or not isinstance(groups, (int, np.integer, float)):
        raise ParameterError(f"groups must be an integer in [2, k={k}], got {groups!r}")
    g = int(groups)
    if g != groups or not 2 <= g <= k:
        raise ParameterError(f"groups must be an integer in [2, k={k}], got {groups:g}")
    return g


@dataclass(frozen=True, slots=True)
class GroupNoise:
    """The law of one group's count error e = ĉ_j − c_j that the error bounds use.

    Attributes:
        variance: σ² = E e².
        fourth: E e⁴.
        third_per_user: t with E[e³ | c_j] = (n − 2c_j)·t (:class:`CountNoise`); 0 for a
            symmetric law.
        exact: True when the moments are the counter's own (:attr:`count_noise`); False
            where a Gaussian stand-in (fourth = 3σ⁴) enters: a bare variance given to the
            design functions, or the error that fakes add to a run's counts (an
            approximation: :attr:`UniformityTester.error_bounds` and the stated sample
            size are for runs without fakes).
    """

    variance: float
    fourth: float
    third_per_user: float = 0.0
    exact: bool = False

    @classmethod
    def gaussian(cls, variance: float) -> GroupNoise:
        v = float(variance)
        if not math.isfinite(v) or v < 0.0:
            raise ParameterError(f"noise variance must be finite and >= 0, got {variance!r}")
        return cls(variance=v, fourth=3.0 * v * v)

    @classmethod
    def of(cls, law: CountNoise, n: int) -> GroupNoise:
        """The error of n users (no fakes) whose per-user law is ``law``."""
        var, _, fourth = law.moments(n, 0.0)
        return cls(variance=var, fourth=fourth, third_per_user=law.third, exact=True)

    @property
    def square_variance(self) -> float:
        """Var e² = E e⁴ − σ⁴."""
        return max(self.fourth - self.variance**2, 0.0)


def _as_noise(noise: float | GroupNoise) -> GroupNoise:
    return noise if isinstance(noise, GroupNoise) else GroupNoise.gaussian(noise)


def _size_classes(k: int, groups: Any) -> tuple[tuple[tuple[Any, Any], tuple[Any, Any]], Any, Any]:
    """((count, q) of the small groups, (count, q) of the large ones), q_min, and h, the
    bound |Σ_j u_j| ≤ h √χ² for every P (module doc); h = 0 when k' divides k."""
    (n_small, small), (n_large, large) = _size_counts(k, groups)
    classes = ((n_small, small / k), (n_large, large / k))
    h = np.where(n_large > 0, k / (2.0 * small * large), 0.0)
    return classes, small / k, h


def _variance_bound(
    n: Any, k: int, groups: Any, noise: GroupNoise, chi2: Any, cube: Any = None
) -> Any:
    """Upper bound V(χ²) on Var[Z] over every P with χ²(P, q) = ``chi2`` (module doc,
    "Error bounds"); its sampling part is exact at χ² = 0. ``cube`` bounds Σ_j q_j u_j³
    (default χ³/√q_min, which holds for every P)."""
    n = np.asarray(n, dtype=np.float64)
    g = np.asarray(groups, dtype=np.float64)
    x = np.asarray(chi2, dtype=np.float64)
    classes, q_min, h = _size_classes(k, g)
    if cube is None:
        cube = x**1.5 / np.sqrt(q_min)
    sampling = (
        (n - 1.0)
        / n
        * (
            2.0 * (g - 1.0)
            + 4.0 * np.maximum(n - 3.0, 0.0) * x
            + 4.0 * np.maximum(n - 2.0, 0.0) * cube
            + 4.0 * h * np.sqrt(x)
            + 2.0 * x / q_min
        )
    )
    inv_lam = sum(c * (4.0 * n * q + 1.0) / (n * q) ** 2 for c, q in classes)
    inv_lam2 = sum(c / (n * q) ** 2 for c, q in classes)
    linear = noise.variance * (inv_lam + 4.0 * x / q_min)
    square = noise.square_variance * inv_lam2
    cross = 2.0 * np.sqrt(linear * square) if noise.third_per_user != 0.0 else 0.0
    return sampling + linear + square + cross


def _least_chi2(k: int, groups: Any, alpha: float) -> Any:
    """4α²(k' − 1)/(k − 1): the least E_π χ²(P, q) over p at TV distance ≥ α."""
    return 4.0 * alpha**2 * (np.asarray(groups, dtype=np.float64) - 1.0) / (k - 1.0)


def _threshold(n: Any, k: int, groups: Any, alpha: float, kappa: Any) -> Any:
    """τ = κ(n − 1)·4α²(k' − 1)/(k − 1)/2: half the least mean of Z the partition keeps."""
    return 0.5 * np.asarray(kappa) * (np.asarray(n) - 1.0) * _least_chi2(k, groups, alpha)


#: Ratio of the χ² grid on which the ungrouped test's worst type II error is bounded.
_CHI2_STEP = 1.01


def _ungrouped_type_ii(n: Any, k: int, alpha: float, noise: GroupNoise) -> Any:
    """Worst type II bound of the ungrouped test (k' = k, κ = 1) over every p at TV ≥ α,
    using the distance itself, not only χ² ≥ 4α² (module doc, "Error bounds"): with
    u_j = k p_j − 1, Σ|u_j| ≥ 2αk, and M = max_j u_j, Σ_j u_j³/k ≤ M χ², where
    Cauchy–Schwarz on the other k − 1 values gives M ≤ 2α + √((k − 1)(χ² − 4α²)) unless
    M > 2αk (and M ≤ √(kχ²) always). Both V and the margin (n − 1)χ² − τ grow with χ², so
    on each cell [x_i, x_{i+1}] of a geometric grid over [4α², k − 1] (χ² ≤ k − 1 for
    every p) the ratio is at most V(x_{i+1})/((n − 1)x_i − τ)²: the maximum over the cells
    bounds the supremum.
    """
    n = np.asarray(n, dtype=np.float64)[..., None]
    x0 = 4.0 * alpha**2
    cells = max(1, math.ceil(math.log(max(k - 1.0, x0 * _CHI2_STEP) / x0, _CHI2_STEP)))
    xs = x0 * _CHI2_STEP ** np.arange(cells + 1)
    root = np.sqrt(k * xs)
    spike = np.minimum(root, 2.0 * alpha + np.sqrt((k - 1.0) * (xs - x0).clip(0.0)))
    spike = np.where(root > 2.0 * alpha * k, root, spike)
    var = _variance_bound(n, k, k, noise, xs, cube=spike * xs)
    tau = _threshold(n, k, k, alpha, 1.0)
    margin = (n - 1.0) * xs[:-1] - tau
    return np.max(var[..., 1:] / margin**2, axis=-1)


def _error_bounds(
    n: Any, k: int, groups: Any, alpha: float, kappa: Any, noise: GroupNoise, failure: Any
) -> tuple[Any, Any]:
    """(type I, worst type II) bounds of the test with threshold :func:`_threshold`."""
    x0 = np.asarray(kappa) * _least_chi2(k, groups, alpha)
    tau = _threshold(n, k, groups, alpha, kappa)
    type_i = _variance_bound(n, k, groups, noise, 0.0) / tau**2
    type_ii = failure + _variance_bound(n, k, groups, noise, x0) / tau**2
    ungrouped = np.broadcast_to(np.asarray(groups) == k, np.shape(type_ii))
    if ungrouped.any():
        n_all = np.broadcast_to(np.asarray(n, dtype=np.float64), np.shape(type_ii))
        type_ii = np.array(type_ii, dtype=np.float64, copy=True)
        type_ii[ungrouped] = _ungrouped_type_ii(n_all[ungrouped], k, alpha, noise)
    return np.minimum(type_i, 1.0), np.minimum(type_ii, 1.0)


#: Fractions κ of its expected signal the partition is trusted to keep (grouped tests).
KAPPAS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)


def _designs(
    k: int, groups: npt.NDArray[np.int64], alpha: float, beta: float, noise: GroupNoise
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
    """For every k' in ``groups``: the smallest n whose type I and worst type II bounds are
    both ≤ β, minimized over κ ∈ :data:`KAPPAS` (κ = 1 for k' = k), and that κ. An
    infeasible k' (partition failure ≥ β at every κ) gets n = 2⁶³ − 1.

    Both bounds fall as n grows (τ grows like n, the variance bound at most like n), so
    feasibility is monotone in n: integer bisection, vectorized over (k', κ).
    """
    g_all = np.repeat(groups, len(KAPPAS))
    kap = np.tile(np.array(KAPPAS), groups.size)
    ungrouped = g_all == k
    kap = np.where(ungrouped, 1.0, kap)
    e, a, b = _partition_moments_many(k, groups)
    theta = 1.0 - np.array(KAPPAS)[None, :]
    moments = (e[:, None], a[:, None], b[:, None])
    fail = _failure(k, groups[:, None], moments, theta).ravel()  # same order as g_all
    live = fail < beta

    def ok(n: npt.NDArray[np.float64], idx: npt.NDArray[np.int64]) -> npt.NDArray[np.bool_]:
        t1, t2 = _error_bounds(n, k, g_all[idx], alpha, kap[idx], noise, fail[idx])
        return np.asarray((t1 <= beta) & (t2 <= beta))

    idx = np.flatnonzero(live)
    lo = np.full(idx.size, 1.0)  # n = 1: τ = 0, never feasible
    hi = np.full(idx.size, 2.0)
    bad = ~ok(hi, idx)
    while bad.any():
        lo = np.where(bad, hi, lo)
        hi = np.where(bad, 2.0 * hi, hi)
        if hi.max() > 2.0**62:
            keep = hi <= 2.0**62
            idx, lo, hi = idx[keep], lo[keep], hi[keep]
            if idx.size == 0:
                break
        bad = ~ok(hi, idx)
    while idx.size and np.any(hi - lo > 1):
        mid = np.floor((lo + hi) / 2.0)
        good = ok(mid, idx)
        hi = np.where(good, mid, hi)
        lo = np.where(good, lo, mid)
    n_all = np.full(g_all.size, np.iinfo(np.int64).max, dtype=np.int64)
    n_all[idx] = hi.astype(np.int64)
    n_by = n_all.reshape(groups.size, len(KAPPAS))
    best = np.argmin(n_by, axis=1)  # first minimizer: the smallest κ reaching it
    rows = np.arange(groups.size)
    kappa_best = np.where(groups == k, 1.0, np.array(KAPPAS)[best])
    return n_by[rows, best], kappa_best


def _design_one(
    k: int, groups: int, alpha: float, beta: float, noise: GroupNoise
) -> tuple[int, float]:
    n, kappa = _designs(k, np.array([groups]), alpha, beta, noise)
    if n[0] == np.iinfo(np.int64).max:
        raise ParameterError(
            f"uniformity: no sample size below 2^62 meets beta={beta:g} with k'={groups} "
            f"groups of k={k} (the random partition alone fails too often; use more groups)"
        )
    return int(n[0]), float(kappa[0])


def null_variance(n: int, k: int, noise: float | GroupNoise, groups: int | None = None) -> float:
    """Upper bound on Var₀[Z], the statistic's variance under uniformity (module doc):
    2(k' − 1)(n − 1)/n (exact, multinomial) plus the noise terms."""
    g = k if groups is None else groups
    return float(_variance_bound(n, k, g, _as_noise(noise), 0.0))


def uniformity_min_samples(
    k: int,
    alpha: float,
    beta: float,
    noise: float | GroupNoise,
    groups: int | None = None,
) -> int:
    """Smallest n at which the test's type I and worst-case type II bounds are both ≤ β.

    Args:
        k: domain size.
        alpha: distance (total variation) the tester must detect.
        beta: allowed error, of each kind.
        noise: each group's count noise: a :class:`GroupNoise`, or a variance σ² (Gaussian
            fourth moment), held fixed as n varies.
        groups: k' (default k: the ungrouped tester).

    Returns:
        The smallest such n.
    """
    k = check_n(k, "k", 2)
    _check_alpha_beta(alpha, beta)
    g = k if groups is None else _check_groups(groups, k)
    return _design_one(k, g, float(alpha), float(beta), _as_noise(noise))[0]


#: Every k' up to this many groups is a candidate; beyond it, a geometric grid.
EXACT_GROUPS = 2048


def group_candidates(k: int) -> npt.NDArray[np.int64]:
    """The k' :func:`optimal_groups` considers: every integer in [min(k, 16), min(k, 2048)],
    then a geometric grid of ratio 1.005 up to k, and k itself."""
    top = min(k, EXACT_GROUPS)
    cand = np.arange(min(k, MIN_GROUPS), top + 1, dtype=np.int64)
    if k > top:
        steps = math.ceil(math.log(k / top) / math.log(1.005))
        grid = np.rint(np.geomspace(top, k, steps + 1)).astype(np.int64)
        cand = np.unique(np.concatenate([cand, grid, [k]]))
    return cand[cand >= 2]


def optimal_groups(k: int, alpha: float, beta: float, noise: float | GroupNoise) -> tuple[int, int]:
    """The k' among :func:`group_candidates` with the smallest stated sample size, and
    that size.

    Evaluates :func:`uniformity_min_samples` for every candidate (vectorized) and returns
    the smallest minimizer (fewer groups: fewer messages per user). k' = k is always
    feasible (no partition, so no partition failure).
    """
    k = check_n(k, "k", 2)
    _check_alpha_beta(alpha, beta)
    cand = group_candidates(k)
    n, _ = _designs(k, cand, float(alpha), float(beta), _as_noise(noise))
    best = int(np.argmin(n))  # first minimizer = smallest k'
    if n[best] == np.iinfo(np.int64).max:
        raise ParameterError("uniformity: no sample size below 2^62 meets the bound")
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
        threshold: τ = 2κ(n − 1)α²(k' − 1)/(k − 1).
        uniform: the decision, Z ≤ τ.
        null_std: √Var₀[Z] (its bound), the statistic's standard deviation under uniformity.
        type_i_bound: Chebyshev bound min(1, Var₀/τ²) on the false-rejection probability.
        type_ii_bound: bound on the false-acceptance probability for every p at TV distance
            ≥ α, the random partition's failure included.
    """

    statistic: float
    threshold: float
    uniform: bool
    null_std: float
    type_i_bound: float
    type_ii_bound: float


class UniformityTester(ShuffleProtocol):
    """Public random grouping + one-hot + a registered counter per group + chi-square.

    Args:
        counter: registered name of a BINARY counting protocol that states its error law
            (:attr:`~protocols.ShuffleProtocol.count_noise`): ``cnt_sgm`` for PUT,
            ``cnt_bn`` for AUT, ``cnt_pure`` or ``cnt_rr`` too.
        domain: k.
        epsilon: total ε of the test (each group's counter gets ε/2).
        delta: total δ (each counter gets δ/2).
        n: number of users (samples).
        alpha: total-variation distance to detect.
        beta: target error probability, of each kind (sets the default k' and
            :attr:`min_samples`).
        fake_reports: passed to the counter's specification.
        groups: k' ∈ [2, k]; None (default) picks :func:`optimal_groups` for the counter's
            error law at this n; k means no grouping.
        partition_seed: public seed of the random partition (shared by users and analyzer).
        counter_options: the counter's own options (e.g. ``gamma``, or ``encoding=splitmix``
            for ``cnt_sgm``: every group's value then travels as labeled Split-Mix shares).
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
        counter_options: Mapping[str, float | str] | None = None,
    ) -> None:
        k = check_n(domain, "domain", 2)
        if k > MAX_DOMAIN:
            raise ParameterError(f"{self.name}: domain={k} exceeds {MAX_DOMAIN}")
        eps = check_epsilon(epsilon)
        delta = check_delta(delta, pure=True)  # δ = 0: the counter decides (pure or not)
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
                epsilon=eps / 2.0,
                delta=delta / 2.0,
                n=n,
                domain=2,
                fake_reports=fake_reports,
                options=dict(counter_options or {}),
            ),
        )
        if inner.input_kind is not InputKind.BINARY:
            raise ParameterError(f"{self.name}: {counter!r} is not a counting (BINARY) protocol")
        law = inner.count_noise
        if law is None:
            raise ParameterError(
                f"{self.name}: counter {counter!r} states no error law (count_noise), so the "
                "test's error bounds would not be proven for it"
            )
        self._counter = inner
        self._k, self._eps, self._delta, self._n = k, eps, delta, n
        self._alpha, self._beta = float(alpha), float(beta)
        self._noise = GroupNoise.of(law, n)
        if groups is None:
            groups, _ = optimal_groups(k, self._alpha, self._beta, self._noise)
        self._groups = groups
        self._kappa = self._best_kappa()
        self._seed = seed
        self._group_of = group_partition(k, groups, seed)
        self._q = np.bincount(self._group_of, minlength=groups) / k
        self._label_size = uint_codec_size(groups)
        self.share_spec = inner.share_spec

    def _best_kappa(self) -> float:
        """κ ∈ :data:`KAPPAS` (1 for k' = k) whose larger error bound is the least at this n."""
        k, g, n = self._k, self._groups, self._n
        if g == k:
            return 1.0
        kap = np.array(KAPPAS)
        fail = _failure(k, g, partition_moments(k, g), 1.0 - kap)
        t1, t2 = _error_bounds(float(n), k, g, self._alpha, kap, self._noise, fail)
        return float(kap[int(np.argmin(np.maximum(t1, t2)))])

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
    def kappa(self) -> float:
        """κ: the fraction of its expected χ² signal the partition is trusted to keep; the
        threshold sits at half of what that leaves (1 without grouping)."""
        return self._kappa

    @property
    def partition_failure(self) -> float:
        """:func:`partition_failure_bound` at θ = 1 − κ for this (k, k'): the worst-case
        chance that the random partition keeps less than κ of the expected χ² signal."""
        if self._groups == self._k:
            return 0.0
        return partition_failure_bound(self._k, self._groups, 1.0 - self._kappa)

    @property
    def noise_var(self) -> float:
        """σ² of each group's counter at this n, from its error law (no fakes): the variance
        its estimator states (tests/test_count_noise.py)."""
        return self._noise.variance

    @property
    def noise(self) -> GroupNoise:
        """The law of each group's count error the error bounds use (exact when the counter
        states its :attr:`~protocols.ShuffleProtocol.count_noise`)."""
        return self._noise

    @property
    def error_bounds(self) -> tuple[float, float]:
        """(type I, type II) bounds at this n: the chance of rejecting uniform data, and the
        largest chance of accepting data from any p at TV distance ≥ α from uniform, over
        the samples, the counters' noise and a fresh public partition (module doc). Without
        fakes; :meth:`test` states both for its run, the fakes' noise included."""
        t1, t2 = _error_bounds(
            float(self._n),
            self._k,
            self._groups,
            self._alpha,
            self._kappa,
            self._noise,
            self.partition_failure,
        )
        return float(t1), float(t2)

    @property
    def min_samples(self) -> int:
        """The stated sample size at this k': the smallest n at which both error bounds are
        ≤ β (κ chosen for it; the noise law held at this n's)."""
        return uniformity_min_samples(self._k, self._alpha, self._beta, self._noise, self._groups)

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
        """τ = 2κ(n − 1)α²(k' − 1)/(k − 1): half the least mean of Z at TV distance α
        when the partition keeps κ of the expected signal.

        Args:
            n: the number of users.

        Returns:
            τ.
        """
        return float(_threshold(n, self._k, self._groups, self._alpha, self._kappa))

    def statistic_moments(self, p: npt.ArrayLike, n: int) -> tuple[float, float]:
        """(E[Z], Var[Z]) for n samples from the distribution ``p`` over [k], under this
        tester's public partition and its counters' noise law (:attr:`noise`), exactly.

        E[Z] = (n − 1) χ²(P, q). Var[Z] is the multinomial variance of the sampling part
        plus the noise parts (module doc, "Error bounds"), from the counter's own error law.
        At p = uniform it is at most
        :func:`null_variance`.

        Args:
            p: a distribution over the k values.
            n: the number of samples, at least 2.

        Returns:
            ``(mean, variance)`` of Z.

        Raises:
            ParameterError: ``p`` is not a distribution over k values, or n < 2.
        """
        prob = np.asarray(p, dtype=np.float64)
        if prob.shape != (self._k,) or np.any(prob < 0) or not math.isclose(prob.sum(), 1.0):
            raise ParameterError(f"{self.name}: p must be a distribution over {self._k} values")
        n = check_n(n, "n", 2)
        big_p = np.bincount(self._group_of, weights=prob, minlength=self._groups)
        lam = n * self._q
        noise = self._noise
        mean = (n - 1) * float(np.sum((big_p - self._q) ** 2 / self._q))
        # Sampling: Var Σ_j c_j(c_j − 1)/λ_j, from the multinomial factorial moments.
        w = 1.0 / lam
        ff3, ff2 = n * (n - 1.0) * (n - 2.0), n * (n - 1.0)
        sampling = float(
            np.sum(w**2 * (4.0 * ff3 * big_p**3 + 2.0 * ff2 * big_p**2))
            - 2.0 * n * (n - 1.0) * (2.0 * n - 3.0) * np.sum(w * big_p**2) ** 2
        )
        # Noise: (2Y − 1)e and e² − σ², Y = c − λ; their covariance through E[e³ | c].
        ey = n * big_p - lam
        ey2 = n * big_p * (1.0 - big_p) + ey**2
        linear = noise.variance * (4.0 * ey2 - 4.0 * ey + 1.0)
        cross = noise.third_per_user * ((n - 2.0 * lam) * (2.0 * ey - 1.0) - 4.0 * ey2 + 2.0 * ey)
        per = linear + noise.square_variance + 2.0 * cross
        return mean, sampling + float(np.sum(per / lam**2))

    def type_ii_bound(self, p: npt.ArrayLike, n: int) -> float:
        """Chebyshev bound Var[Z]/(E[Z] − τ)² on accepting uniformity for samples from
        ``p`` (1 where E[Z] ≤ τ): the false-acceptance error for *this* alternative under
        *this* partition (:meth:`statistic_moments`). :attr:`error_bounds` bounds it for
        every alternative at distance ≥ α and a fresh partition.

        Args:
            p: a distribution over the k values.
            n: the number of samples.

        Returns:
            The bound, in [0, 1].
        """
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
    def randomize(self, values: npt.ArrayLike, *, rng: RNGLike) -> npt.NDArray[Any]:
        rng = as_generator(rng)
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

    def sample_fakes(self, count: int, *, rng: RNGLike) -> npt.NDArray[Any]:
        rng = as_generator(rng)
        count = check_n(count, "count", 0)
        labels = rng.integers(0, self._groups, size=count)
        if self.share_spec is None:
            body = np.asarray(self._counter.sample_fakes(count, rng=rng))
            return self._label_all(labels, body)
        # Split-Mix counters' fakes must vanish from each group's sum mod q, not only from
        # the batch's: each group's fakes are the counter's own (zero-sum) fakes.
        labels = np.sort(labels)
        sizes = np.bincount(labels, minlength=self._groups)
        parts = [np.asarray(self._counter.sample_fakes(int(c), rng=rng)) for c in sizes if c]
        body = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
        return self._label_all(labels, body)

    # --- analyzer ------------------------------------------------------------------------
    def counts(
        self, messages: npt.NDArray[Any], *, n: int, n_fakes: int
    ) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
        """Per-group count estimates ĉ_j and their standard deviations σ_j.

        Args:
            messages: the decoded messages (group label, counter message).
            n: the number of users.
            n_fakes: the fake values among the messages.

        Returns:
            ``(estimates, stds)``, one entry per group.
        """
        labels, body = self._unlabel(messages)
        kk = self._groups
        order = np.argsort(labels, kind="stable")
        bounds = np.searchsorted(labels[order], np.arange(kk + 1))
        # Fakes carry uniform labels, so a group holds F ~ Bin(n_f, 1/k') of them, a number
        # no one sees. The counter's estimator is affine in its fake count: interpolating
        # between floor and ceil of E F = n_f/k' keeps it unbiased, and where it depends on
        # that count (slope b ≠ 0: cnt_rr subtracts the fakes' expected ones; cnt_bn, cnt_sgm
        # and cnt_pure read theirs off the messages) it errs by b(F − E F) besides: variance
        # b² n_f (1/k')(1 − 1/k'), added to the stated one.
        per = n_fakes / kk
        lo, w = math.floor(per), per - math.floor(per)
        label_var = n_fakes * (1.0 / kk) * (1.0 - 1.0 / kk)
        est = np.empty(kk)
        std = np.empty(kk)
        for j in range(kk):
            mine = body[order[bounds[j] : bounds[j + 1]]]
            e_lo = self._counter.estimate(mine, n=n, n_fakes=lo)
            if n_fakes == 0:
                est[j], std[j] = e_lo.values[0], e_lo.expected_std[0]
                continue
            e_hi = self._counter.estimate(mine, n=n, n_fakes=lo + 1)
            slope = e_hi.values[0] - e_lo.values[0]
            est[j] = (1 - w) * e_lo.values[0] + w * e_hi.values[0]
            stated = (1 - w) * e_lo.expected_std[0] + w * e_hi.expected_std[0]
            std[j] = math.sqrt(stated**2 + slope**2 * label_var)
        return est, std

    def statistic(self, counts: npt.ArrayLike, noise_var: npt.ArrayLike, *, n: int) -> float:
        """Z = Σ_j ((ĉ_j − λ_j)² − ĉ_j − σ_j²)/λ_j + 1, λ_j = n q_j (module doc).

        Args:
            counts: the group counts ĉ_j.
            noise_var: their noise variances σ_j² (a scalar for all).
            n: the number of users.

        Returns:
            Z.
        """
        lam = n * self._q
        c = np.asarray(counts, dtype=np.float64)
        s2 = np.broadcast_to(np.asarray(noise_var, dtype=np.float64), c.shape)
        return float(np.sum(((c - lam) ** 2 - c - s2) / lam) + 1.0)

    def test(self, messages: npt.NDArray[Any], *, n: int, n_fakes: int) -> UniformityDecision:
        """Run the test on the shuffled messages of n users (+ n_fakes fakes).

        Args:
            messages: the decoded messages.
            n: the number of users.
            n_fakes: the fake values among the messages.

        Returns:
            The decision, with the statistic, the threshold and the error bounds.
        """
        est, std = self.counts(messages, n=n, n_fakes=n_fakes)
        return self._decide(est, std, n)[0]

    def _decide(
        self, est: npt.NDArray[np.float64], std: npt.NDArray[np.float64], n: int
    ) -> tuple[UniformityDecision, GroupNoise]:
        """The decision from the group counts and their stds, and the noise law it used."""
        z = self.statistic(est, std**2, n=n)
        tau = self.threshold(n)
        noise = self._noise_at(n, float(np.mean(std**2)))
        type_i, type_ii = _error_bounds(
            float(n),
            self._k,
            self._groups,
            self._alpha,
            self._kappa,
            noise,
            self.partition_failure,
        )
        decision = UniformityDecision(
            statistic=z,
            threshold=tau,
            uniform=bool(z <= tau),
            null_std=math.sqrt(null_variance(n, self._k, noise, self._groups)),
            type_i_bound=float(type_i),
            type_ii_bound=float(type_ii),
        )
        return decision, noise

    def _noise_at(self, n: int, variance: float) -> GroupNoise:
        """The count noise of n users whose estimator states ``variance`` (fakes add to it):
        the counter's law at n, plus an independent part for any excess, with a Gaussian
        fourth moment (the fakes' error, not an exact law: their count per group is random)."""
        law = self._counter.count_noise
        assert law is not None  # the constructor refuses counters without one
        base = GroupNoise.of(law, n)
        extra = max(variance - base.variance, 0.0)
        return GroupNoise(
            variance=base.variance + extra,
            fourth=base.fourth + 6.0 * base.variance * extra + 3.0 * extra * extra,
            third_per_user=base.third_per_user,
            exact=base.exact and extra == 0.0,
        )

    def estimate(self, messages: npt.NDArray[Any], *, n: int, n_fakes: int) -> Estimate:
        """The statistic Z; its stated std is Z's spread around :meth:`truth` (the noiseless
        statistic of these data) over the counters' noise, the data held fixed: not the
        spread over samples, and not the null std the test uses (in ``extra``).

        With ĉ_j = c_j + e_j, e_j of mean 0, variance σ_j² and E[e_j³ | c_j] = (n − 2c_j)t
        (:class:`GroupNoise`), Z − Z_true = Σ_j ((2a_j − 1)e_j + e_j² − σ_j²)/λ_j with
        a_j = c_j − λ_j, so::

            V := Var[Z | data] = Σ_j (σ_j² (2a_j − 1)² + Var e_j² + 2(2a_j − 1)(n − 2c_j)t) / λ_j².

        The a_j are unknown, and plugging in â_j = ĉ_j − λ_j overstates V: since
        E[(2â_j − 1)²] = (2a_j − 1)² + 4σ_j² and E[(2â_j − 1)(n − 2ĉ_j)] = (2a_j − 1)(n − 2c_j)
        − 4σ_j², it adds Σ_j 4σ_j²(σ_j² − 2t)/λ_j² on average (PUT at ε = 1, k = 16,
        n = 1000: stated std 1.5–1.8× the measured one). Each offset is removed instead::

            V̂ = Σ_j (σ_j²((2â_j − 1)² − 4σ_j²) + Var e_j²
                     + 2t((2â_j − 1)(n − 2ĉ_j) + 4σ_j²)) / λ_j²,  E[V̂ | data] = V,

        and the stated variance is max(V̂, V_min), V_min the least V over real a_j with
        Σ_j a_j = 0 (the true counts sum to n), so V_min ≤ V: the clamp only moves V̂ towards
        values V can take. It is the one upward bias left, and matters only where the noise
        dominates: the (2a_j − 1)² terms are then a small part of V that V̂ estimates with an
        error of the noise's size, V̂ falls below V_min in about half the runs, and the mean
        stated std exceeds √V by ≈ 10 % (PUT at ε = 1, k = 16, n = 1000; for AUT there it is
        0.98 √V, Jensen's inequality outweighing the clamp).
        Seeded runs (ε = 1, k = 16, uniform data, 5 data sets × 300 noise draws) measure
        sd(Z − Z_true) at 0.86–0.98 (PUT), 0.96–1.08 (AUT) of the mean stated std at n = 1000,
        0.92–0.98 and 0.93–1.04 at n = 10⁴ (tests/test_uniformity.py). Under uniformity V is
        about the null variance's noise part; on skewed data it grows with the signal (the
        null std alone understated the error 60× at n = 10^5 on Zipf data).

        Args:
            messages: the decoded messages.
            n: the number of users.
            n_fakes: the fake values among the messages.

        Returns:
            Z with its stated std; the decision, threshold, null std and the error bounds in
            ``extra``.
        """
        est, std = self.counts(messages, n=n, n_fakes=n_fakes)
        dec, noise = self._decide(est, std, n)
        var = self._stated_variance(est, std**2, n, noise)
        return Estimate(
            values=np.array([dec.statistic]),
            expected_std=np.array([math.sqrt(var)]),
            messages_used=int(np.asarray(messages).shape[0]),
            extra={
                "uniform": dec.uniform,
                "threshold": dec.threshold,
                "null_std": dec.null_std,
                "type_i_bound": dec.type_i_bound,
                "type_ii_bound": dec.type_ii_bound,
                "kappa": self._kappa,
                "alpha": self._alpha,
                "groups": self._groups,
                "partition_failure_bound": self.partition_failure,
            },
        )

    def _stated_variance(
        self, est: npt.NDArray[np.float64], s2: npt.NDArray[np.float64], n: int, noise: GroupNoise
    ) -> float:
        """max(V̂, V_min): the unbiased estimate of Var[Z | data] from the noisy counts,
        raised to the least value it can take (:meth:`estimate`)."""
        lam2 = (n * self._q) ** 2
        t = noise.third_per_user
        b = 2.0 * (est - n * self._q) - 1.0  # 2â_j − 1
        # E b² = (2a − 1)² + 4σ², E b(n − 2ĉ) = (2a − 1)(n − 2c) − 4σ²: remove both offsets.
        square = s2 * (b**2 - 4.0 * s2)
        skew = 2.0 * t * (b * (n - 2.0 * est) + 4.0 * s2)
        unbiased = float(np.sum((square + noise.square_variance + skew) / lam2))
        # V_min: with b_j = 2a_j − 1 (so Σ_j b_j = −k') and n − 2c_j = n − 2λ_j − 1 − b_j, V
        # is Σ_j (A_j b_j² + B_j b_j) + C; A_j > 0 puts its constrained minimum at
        # b_j = (μ − B_j)/(2A_j), μ fixed by Σ_j b_j = −k'.
        quad = (s2 - 2.0 * t) / lam2
        lin = 2.0 * t * (n - 2.0 * n * self._q - 1.0) / lam2
        floor = 0.0  # some A_j ≤ 0 (σ_j² ≤ 2t, very few users): unbounded below in b_j
        if np.all(quad > 0.0):
            inv = 1.0 / (2.0 * quad)
            mu = (-self._groups + float(np.sum(lin * inv))) / float(np.sum(inv))
            bmin = (mu - lin) * inv
            floor = float(np.sum(noise.square_variance / lam2 + quad * bmin**2 + lin * bmin))
        return max(unbiased, floor, 0.0)

    def truth(self, values: npt.ArrayLike) -> npt.NDArray[np.float64]:
        """The noiseless statistic Z computed on the exact group counts.

        Args:
            values: one value in [0, k) per user.

        Returns:
            ``[Z]``.
        """
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
#: paper's, the default): PUT needs a pure (δ = 0) counter, AUT an (ε, δ) one, and each must
#: state its error law (not Cnt_2M, whose truncated estimator is biased).
COUNTERS = {"put": ("cnt_sgm", "cnt_pure"), "aut": ("cnt_bn", "cnt_rr")}


#: Options each tester passes to its counter: the robustness fraction, and (PUT) Cnt_SGM's
#: encoding.
COUNTER_OPTIONS: dict[str, tuple[str, ...]] = {"put": ("gamma", "encoding"), "aut": ("gamma",)}


def _build(name: str, spec: ProtocolSpec) -> ShuffleProtocol:
    opts = spec.options
    # Only a number here; the tester states the range [2, k] (_check_groups).
    groups = integer_option(spec, "groups", minimum=0)
    allowed = COUNTERS[name]
    counter = opts.get("counter", allowed[0])
    if counter not in allowed:
        raise ParameterError(
            f"{name}: counter must be one of {', '.join(allowed)}, got {counter!r}"
        )
    cls = PUT if name == "put" else AUT
    # The counter's own options, passed through (its registry refuses any it does not read).
    forwarded = {key: opts[key] for key in COUNTER_OPTIONS[name] if key in opts}
    return cls(
        counter_options=forwarded,
        counter=str(counter),
        domain=spec.domain,
        epsilon=spec.epsilon,
        delta=spec.delta,
        n=spec.n,
        alpha=number_option(spec, "alpha", 0.25),
        beta=number_option(spec, "beta", 1.0 / 3.0),
        fake_reports=spec.total_fake_reports,
        groups=groups,
        partition_seed=integer_option(spec, "partition_seed", 0),
    )


@register_protocol("put")
def _build_put(spec: ProtocolSpec) -> ShuffleProtocol:
    """``PUT``: grouping + one-hot + ``Cnt_SGM`` per group (robust pure shuffle privacy);
    ``--option encoding=splitmix`` (its sums proven, with δ) or ``counter=cnt_pure``."""
    return _build("put", spec)


@register_protocol("aut")
def _build_aut(spec: ProtocolSpec) -> ShuffleProtocol:
    """``AUT``: grouping + one-hot + ``Cnt_BN`` per group (robust approximate privacy);
    ``--option counter=cnt_rr`` swaps the counter."""
    return _build("aut", spec)
