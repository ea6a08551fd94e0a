"""``PRRQ``: range counting by the matrix mechanism over a range tree, on PRHR.

Ghazi, Golowich, Kumar, Pagh, Velingker (arXiv 1908.11358), range queries via the matrix
mechanism (Li et al.; survey §4.4.2, Fig. 6, Table 9).

Range tree. Pad the domain to D = 2^h ≥ d and index the complete binary tree heap-style
(root 1, children 2v and 2v + 1, leaf of value x at D + x). The matrix M ∈ {0,1}^{D×D} keeps
the root and every left child: y_0 = n (root) and, for k ∈ [1, D), y_k = the count of the
left child 2k of node k. M is invertible (a right child's count is its parent's minus its
left sibling's), so any prefix count is a sum of at most h of the y's:
    #{x < a} = Σ over the levels ℓ where the path to leaf D + a turns right of y_{parent}.
A range count [lo, hi) is prefix(hi) − prefix(lo); the histogram is x̂ = M^{−1} ŷ.

Each user's column of M has Δ_x ≤ Δ = 1 + h = log2(2D) ones (the root and the left children on
its path, the survey's sensitivity Δ = 1 + lb d). The user runs the PRHR randomizer on every
such node (one true tuple per node over the domain [D] of node indices) and pads to exactly Δ
true slots with uniform tuples, so the message count reveals nothing; plus ρ blanket tuples:
    ρ = ⌈36 Δ² ln(e Δ d / (ε δ)) / ε²⌉     (survey §4.4.2, PRRQ), τ = ⌈log2 n⌉, ε ≤ 1.
(The survey's extracted formula reads "36 (lb 2d)² d ln(e (lb 2d) d/(ε δ)) / [lost]". This
module's reconstruction keeps the d inside the logarithm and drops the d after the square:
* derivation: a change of x changes the node indices of at most Δ slots, each slot a PRHR
  report over the shared blanket, so PRHR's ρ = 36 ln(1/δ₀)/ε₁² at ε₁ = ε/Δ (composition
  over the slots) gives 36 Δ² ln(1/δ₀)/ε²; d enters only through the failure probability
  (a union bound over the node rows), inside the logarithm, δ₀ = εδ/(eΔd);
* unbiasedness holds for every ρ (the estimator subtracts K 2^{−τ}, K counting every tuple);
* more blanket tuples never cost privacy (the analyzer could add uniform tuples itself:
  post-processing), so the factor d could only buy privacy the derivation does not need,
  at a price: Var[ŷ_k] ≈ ρ, so it would make every range's error grow as √d, against the
  paper's polylogarithmic error (survey Table 9).
At d = 2 the reading is checked exactly (tests/test_prrq_privacy_exact.py): even an
adversary told every tuple but the victim's differing one and the blanket has ε(δ) ≤ 0.08 ε
with this ρ over n ∈ [2, 1000], ε ∈ [0.2, 1], δ ∈ [10⁻⁶, 10⁻²]. Larger d is not computed.)
Messages per user: Δ + ρ. The PRHR estimator (with K the number of tuples received — the
padding tuples are uniform, like the blanket, so K absorbs them) gives unbiased ŷ_k, hence
unbiased ranges. Variance of a range: Σ_k coef_k² Var[ŷ_k] with coef ∈ {−1, 0, 1} on at most
2h nodes (row counts of distinct nodes are nearly independent: they share a tuple only when it
lies in two of the C_r^τ, probability ≤ 2^{−τ}): polylogarithmic error for every range,
the paper's O(log^{O(1)}(d)·√log(1/δ)/ε).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from ._base import (
    TALLY_BLOCK,
    Estimate,
    HonestUsersBound,
    InputKind,
    MessageTally,
    PrivacyGuarantee,
    ShuffleProtocol,
    check_delta,
    check_epsilon,
    check_n,
)
from ._errors import ParameterError
from ._prhr import TupleSpace, computable_blanket, prhr_revealed_epsilon, true_tuples
from ._random import RNGLike, as_generator
from ._registry import ProtocolSpec, register_protocol
from .accounting import binomial_window, epsilon_for_pair

__all__ = ["PRRQ", "PRRQParams", "range_coefficients", "user_nodes"]


def user_nodes(values: npt.NDArray[Any], h: int) -> npt.NDArray[np.int64]:
    """(n, 1 + h) node indices of each user's column of M, −1 marking unused slots.

    Slot 0 is the root (index 0); slot ℓ ≥ 1 is the node at depth ℓ on the path to the leaf
    when it is a left child (even heap id 2k ↦ index k), else −1.
    """
    x = np.asarray(values, dtype=np.int64)
    D = 1 << h
    out = np.full((x.shape[0], 1 + h), -1, dtype=np.int64)
    out[:, 0] = 0
    leaf = D + x
    for depth in range(1, h + 1):
        node = leaf >> (h - depth)
        out[:, depth] = np.where(node % 2 == 0, node >> 1, -1)
    return out


def range_coefficients(lo: npt.ArrayLike, hi: npt.ArrayLike, h: int) -> npt.NDArray[np.int64]:
    """(q, D) coefficients c with count[lo, hi) = c · y, for 0 ≤ lo ≤ hi ≤ D."""
    lo_a = np.atleast_1d(np.asarray(lo, dtype=np.int64))
    hi_a = np.atleast_1d(np.asarray(hi, dtype=np.int64))
    D = 1 << h
    coef = np.zeros((lo_a.shape[0], D), dtype=np.int64)
    rows = np.arange(lo_a.shape[0])

    def add_prefix(a: npt.NDArray[np.int64], sign: int) -> None:
        full = a == D
        np.add.at(coef, (rows[full], np.zeros(int(full.sum()), dtype=np.int64)), sign)
        part = ~full
        leaf = D + np.where(part, a, 0)
        for depth in range(1, h + 1):
            node = leaf >> (h - depth)
            right = part & (node % 2 == 1)
            np.add.at(coef, (rows[right], (node[right] - 1) >> 1), sign)

    add_prefix(hi_a, 1)
    add_prefix(lo_a, -1)
    return coef


def node_vs_padding_epsilon(blanket: int, tau: int, delta: float) -> float:
    """Exact ε(δ) of one tuple, uniform in some C_r^τ or uniform on [2^L]^τ, among
    ``blanket`` uniform tuples (the victim's node tuple against its padding).

    The likelihood depends only on K, the tuples in C_r^τ (each blanket tuple lies there
    w.p. 2^{−τ}): P_node(K) = B(K − 1), P_pad(K) = 2^{−τ} B(K − 1) + (1 − 2^{−τ}) B(K),
    B = Bin(``blanket``, 2^{−τ}) on its window (the mass outside is below double precision).

    Args:
        blanket: the uniform tuples around it.
        tau: τ, the tuple length.
        delta: δ.

    Returns:
        ε.
    """
    inside = 2.0**-tau
    _, law = binomial_window(blanket, inside)
    shifted = np.concatenate([[0.0], law])
    law = np.concatenate([law, [0.0]])
    with np.errstate(divide="ignore"):
        return epsilon_for_pair(
            np.log(shifted), np.log(inside * shifted + (1.0 - inside) * law), delta
        )


@dataclass(frozen=True, slots=True)
class PRRQParams:
    """Configuration of ``PRRQ`` (module docstring).

    Attributes:
        domain: d.
        h: ⌈log2 d⌉, tree height; D = 2^h leaves.
        L: ⌈log2(D + 1)⌉ Hadamard bits for the D node indices (row = index + 1).
        sensitivity: Δ = 1 + h.
        tau: τ = ⌈log2 n⌉.
        rho: ρ = ⌈36 Δ² ln(e Δ d/(ε δ))/ε²⌉ blanket tuples per user.
        n: users.
        epsilon: ε ≤ 1.
        delta: δ.
    """

    domain: int
    h: int
    L: int
    sensitivity: int
    tau: int
    rho: int
    n: int
    epsilon: float
    delta: float


class PRRQ(ShuffleProtocol):
    """``PRRQ``: range counting (Ghazi et al.; survey §4.4.2).

    :meth:`estimate` returns the histogram x̂ = M^{−1} ŷ (d entries) with per-bin std; use
    :meth:`range_counts` / :meth:`range_variance` for ranges, which are exactly the matrix
    mechanism's answers (prefix sums of x̂ telescope to the tree decomposition).
    """

    name: ClassVar[str] = "prrq"
    input_kind: ClassVar[InputKind] = InputKind.CATEGORICAL
    bound_name: ClassVar[str] = (
        "Ghazi et al. arXiv 1908.11358 range counting via matrix mechanism on PRHR; "
        "survey §4.4.2 (rho = 36 Delta^2 ln(e Delta d/(eps delta))/eps^2)"
    )

    def __init__(self, *, domain: int, epsilon: float, n: int, delta: float) -> None:
        d = check_n(domain, "domain", 2)
        eps = check_epsilon(epsilon)
        n = check_n(n, "n", 2)
        delta = check_delta(delta)
        if eps > 1.0:
            raise ParameterError(f"prrq: the analysis holds for epsilon <= 1, got {eps:g}")
        h = max(1, math.ceil(math.log2(d)))
        if h > 20:
            raise ParameterError(f"prrq: domain must be <= 2^20, got {d}")
        D = 1 << h
        L = int(D).bit_length()
        tau = max(1, math.ceil(math.log2(n)))
        if tau > 32:
            raise ParameterError(f"prrq: n must be <= 2^32, got {n}")
        sens = 1 + h
        rho = math.ceil(36.0 * sens**2 * math.log(math.e * sens * d / (eps * delta)) / eps**2)
        self._p = PRRQParams(d, h, L, sens, tau, rho, n, eps, delta)
        self._space = TupleSpace(L, tau)

    @property
    def params(self) -> PRRQParams:
        return self._p

    @property
    def domain(self) -> int:
        return self._p.domain

    @property
    def message_size(self) -> int:
        return self._space.message_size

    @property
    def messages_per_user(self) -> float:
        return float(self._p.sensitivity + self._p.rho)

    @property
    def privacy(self) -> PrivacyGuarantee:
        return PrivacyGuarantee(
            epsilon_central=self._p.epsilon,
            epsilon_local=math.inf,
            delta=self._p.delta,
            bound=self.bound_name,
        )

    def honest_users_bound(self, honest_others: int) -> HonestUsersBound | None:
        """Upper: per differing node slot, an exact one-tuple view; composed over the slots.

        A change of value moves at most k = h node slots (the root is shared); each slot's
        tuple changes from one C_u^τ to another (the PRHR pair,
        :func:`~protocols._prhr.prhr_revealed_epsilon`) or between C_u^τ and a uniform
        padding tuple (:func:`node_vs_padding_epsilon`). The adversary is also told every
        tuple but the victim's differing ones and the ρh blanket tuples of the h =
        ``honest_others`` + 1 honest users, and a uniformly random split of that blanket
        into k groups of at least ⌊ρh/k⌋ tuples, group s holding slot s's tuple. More
        knowledge only helps it, and given the split the groups are independent, so basic
        composition gives ε ≤ k·max(ε_node-node, ε_node-pad), each at δ/k. Where a group's
        view is too large to compute, fewer of its tuples are used (the adversary told the
        rest are blanket: again more knowledge). Floored at the configured ε; ``None``
        where no ε reaches δ.

        Args:
            honest_others: the honest users besides the victim.

        Returns:
            The bound, or ``None``.
        """
        h = check_n(honest_others, "honest others", 0) + 1
        p = self._p
        k = p.h
        # Too large to compute: fewer blanket tuples (the rest told) bound it.
        group = computable_blanket(h * p.rho // k, p.tau, p.delta / k)
        one = max(
            prhr_revealed_epsilon(group, p.tau, p.delta / k),
            node_vs_padding_epsilon(group, p.tau, p.delta / k),
        )
        if not math.isfinite(one):
            return None
        return HonestUsersBound(
            max(p.epsilon, k * one), f"prrq_slots_exact ({k} slots, {group} blanket tuples each)"
        )

    def __repr__(self) -> str:
        p = self._p
        return (
            f"PRRQ(domain={p.domain}, epsilon={p.epsilon:g}, delta={p.delta:g}, n={p.n}, "
            f"h={p.h}, tau={p.tau}, rho={p.rho})"
        )

    def randomize(self, values: npt.ArrayLike, *, rng: RNGLike) -> npt.NDArray[Any]:
        rng = as_generator(rng)
        x = self.validate_values(values)
        p = self._p
        nodes = user_nodes(x, p.h).reshape(-1)
        used = nodes >= 0
        true = true_tuples((nodes[used] + 1).astype(np.uint32), p.L, p.tau, rng=rng)
        pad = self._space.uniform(int((~used).sum()) + x.shape[0] * p.rho, rng=rng)
        return np.concatenate([true, pad], axis=0)

    def encode(self, messages: npt.NDArray[Any]) -> npt.NDArray[np.uint8]:
        return self._space.encode(messages)

    def decode(self, rows: npt.NDArray[np.uint8]) -> tuple[npt.NDArray[Any], npt.NDArray[np.bool_]]:
        return self._space.decode(rows)

    def sample_fakes(self, count: int, *, rng: RNGLike) -> npt.NDArray[Any]:
        rng = as_generator(rng)
        return self._space.uniform(count, rng=rng)

    def tally(self, messages: npt.NDArray[Any]) -> MessageTally:
        """Row counts T_r over every r ∈ [2^L] and the number of tuples K.

        Args:
            messages: the decoded messages.

        Returns:
            Their tally.
        """
        return self._space.tally(messages)

    def tally_users(self, values: npt.ArrayLike, *, rng: RNGLike) -> MessageTally:
        """True node tuples drawn per user (block by block); the padding and blanket tuples,
        which are uniform, through :meth:`TupleSpace.uniform_tally` (same law, not drawn).

        Args:
            values: one value per user.
            rng: the randomizers' generator, or a seed (:data:`~protocols.RNGLike`).

        Returns:
            The tally, equal in distribution to ``tally(randomize(values))``.
        """
        rng = as_generator(rng)
        x = self.validate_values(values)
        p = self._p
        tally = MessageTally(np.zeros(1 << p.L, dtype=np.int64), 0)
        for s in range(0, x.shape[0], TALLY_BLOCK):
            nodes = user_nodes(x[s : s + TALLY_BLOCK], p.h).reshape(-1)
            used = (nodes[nodes >= 0] + 1).astype(np.uint32)
            tally += self._space.tally(true_tuples(used, p.L, p.tau, rng=rng))
        total = int(x.shape[0]) * (p.sensitivity + p.rho)
        return tally + self._space.uniform_tally(total - tally.messages, rng=rng)

    def tally_fakes(self, count: int, *, rng: RNGLike) -> MessageTally:
        rng = as_generator(rng)
        return self._space.uniform_tally(count, rng=rng)

    def node_estimates(
        self, messages: npt.NDArray[Any] | MessageTally
    ) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
        """(ŷ, Var[ŷ]) for the D node indices, by the PRHR estimator.

        Args:
            messages: the decoded tuples, or their tally.

        Returns:
            ``(estimates, variances)``, one entry per node.
        """
        tally = messages if isinstance(messages, MessageTally) else self.tally(messages)
        return self._space.debias(tally.counts[1 : (1 << self._p.h) + 1], messages=tally.messages)

    def estimate(self, messages: npt.NDArray[Any], *, n: int, n_fakes: int) -> Estimate:
        return self.estimate_tally(self.tally(messages), n=n, n_fakes=n_fakes)

    def estimate_tally(self, tally: MessageTally, *, n: int, n_fakes: int) -> Estimate:
        y, var = self.node_estimates(tally)
        k = np.arange(self._p.domain)
        coef = range_coefficients(k, k + 1, self._p.h)
        return Estimate(
            values=(coef @ y).astype(np.float64),
            expected_std=np.sqrt((coef**2) @ var),
            messages_used=tally.messages,
            extra={"rho": self._p.rho, "tau": self._p.tau},
        )

    def range_counts(
        self, messages: npt.NDArray[Any] | MessageTally, lo: npt.ArrayLike, hi: npt.ArrayLike
    ) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
        """Estimated counts of [lo, hi) and their standard deviations (matrix mechanism).

        Args:
            messages: the decoded tuples, or their tally.
            lo: the ranges' first values.
            hi: the ranges' ends (exclusive), with 0 ≤ lo ≤ hi ≤ domain.

        Returns:
            ``(counts, stds)``, one entry per range.

        Raises:
            ParameterError: a range outside [0, domain] or with lo > hi.
        """
        lo_a, hi_a = np.atleast_1d(lo), np.atleast_1d(hi)
        if (lo_a < 0).any() or (hi_a > self._p.domain).any() or (lo_a > hi_a).any():
            raise ParameterError(f"prrq: ranges must satisfy 0 <= lo <= hi <= {self._p.domain}")
        y, var = self.node_estimates(messages)
        coef = range_coefficients(lo_a, hi_a, self._p.h)
        return coef @ y, np.sqrt((coef**2) @ var)

    def truth(self, values: npt.ArrayLike) -> npt.NDArray[np.float64]:
        return self.categorical_counts(values)


@register_protocol("prrq")
def _build_prrq(spec: ProtocolSpec) -> ShuffleProtocol:
    return PRRQ(domain=spec.domain, epsilon=spec.epsilon, n=spec.n, delta=spec.delta)
