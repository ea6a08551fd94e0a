"""``PRHR`` and ``PUCM``: multi-message frequency estimation (Ghazi et al., FORC'20).

Ghazi, Golowich, Kumar, Pagh, Velingker, "On the Power of Multiple Anonymous Messages"
(arXiv 1908.11358), as summarized in survey §4.2 (PRHR and PUCM paragraphs, Table 7).

PRHR — private-coin Hadamard response
-------------------------------------
Let L = ⌈log2(d + 1)⌉, B = 2^L, and H the B×B Sylvester–Hadamard matrix,
H[r, c] = (−1)^{popcount(r ∧ c)}; value x ∈ [d] uses row r = x + 1 (row 0 is all ones) and
C_r = {c ∈ [B] : H[r, c] = +1} = {c : r·c = 0 over GF(2)}, |C_r| = B/2. Each user sends

* one "true" tuple (a_1, …, a_τ), the a_k independent and uniform in C_{x+1};
* ρ "blanket" tuples, each of τ independent uniform indices in [B];

every tuple is its own message (1 + ρ messages per user). Parameters (survey §4.2):
    τ = ⌈log2 n⌉,   ρ = ⌈36 ln(1/δ₀) / ε²⌉,   ε ≤ 1,
and the survey states the result is (ε, δ₀ e^{ε}/ε)-DP; we set δ₀ = δ ε / e^{ε} so the
reported guarantee is the requested (ε, δ).

Estimator (unbiased). T_r = #{tuples with every a_k ∈ C_r}. A user's true tuple lies in its
own C_r^τ always, and in C_{r'}^τ for r' ≠ r with probability exactly 2^{−τ} (two distinct
non-zero rows agree on exactly half of C_r); a blanket or fake tuple lies in any C_r^τ
(r ≠ 0) with probability 2^{−τ}. With K the number of tuples received (users' and fakes'),
    ĉ_r = (T_r − K 2^{−τ}) / (1 − 2^{−τ}),
    Var[ĉ_r] = (K − c_r) 2^{−τ} (1 − 2^{−τ}) / (1 − 2^{−τ})²  ≈ (1 + ρ) for K ≈ n(1 + ρ),
so the error is O(√(log(1/δ))/ε), independent of n and of d up to the union bound over
rows (the paper's polylogarithmic error).

Fast aggregation. t ∈ C_r^τ ⇔ r·a_k = 0 for every k ⇔ r lies in the null space of the τ×L
GF(2) matrix of the tuple. A message is stored in *column form*: L words of τ bits, word j
holding bit j of every a_k — a bijective re-encoding of the same tuple, so uniform words are
uniform tuples and a true tuple is L uniform words with one word fixed to make the XOR of the
words selected by r vanish. The analyzer runs Gaussian elimination over GF(2) on the L words
of every message at once (numpy bit operations over a block of messages), tracks which
original words combine to zero (the null-space basis), and adds one to every non-zero vector
of that null space. Blanket tuples almost always have a trivial null space (probability of a
non-trivial one ≈ 2^{L−τ}), so the enumeration only touches the rare low-rank messages. The
cost is O(L²) word operations per message, against O(d·τ) for the direct row-by-row
comparison the survey's implementation used.

PUCM — public-coin count-min
----------------------------
Public hash functions h_t : [d] → [s], t ∈ [τ] (a public seed), s = 2n. A user sends
(t, h_t(x)) for every t, and, for every cell (t, ℓ) ∈ [τ]×[s], the message (t, ℓ) with
probability λ = 90 τ² ln(2τ/δ)/(ε² n) (survey §4.2: s = 2n, λ ≥ 90 τ² ln(2τ/δ)/n, the ε²
lost in the survey's extraction). The paper's own statement, read in a public copy of
arXiv 1908.11358 (the proof of Lemma 4.10, privacy of its count-min Algorithm 2): by
Lemma 4.12 at α = ε/(3τk), Bin(n, γ) is (ε/(τk), δ/(τk), k)-smooth when
δ ≥ 2τk·exp(−ε²γn/(90τ²k²)) and k ≤ εγn/(6τk), "in particular γn ≥ 90τ²k² ln(2τk/δ)/ε²";
one value per user is k = 1, which is λ above (and εγn/(6τ) = 15τ ln(2τ/δ)/ε ≥ 1 holds
then). The lemma's smoothness is that of a binomial with variance ≈ γn, so it needs γ ≤ ½:
Bin(n, γ) is the mirror image of Bin(n, 1 − γ), only as smooth as the smaller of γn and
(1 − γ)n. λ > ½ is refused (n ≥ 180τ² ln(2τ/δ)/ε²). Until 2026-11-30 λ ≤ 1 was accepted,
and near λ = 1 a cell's noise n − Bin(n, 1 − λ) nearly vanishes: the exact ε at n = 695,
d = 2 (τ = 1), ε = 1, δ = 10⁻³ (λ = 0.984) is 1.37, and ∞ at n = 685
(tests/test_hist_privacy_exact.py). The analyzer forms the
count-min table C[t, ℓ] and answers
    ĉ_j = min_t C[t, h_t(j)] − nλ − n_f/(τ s) − E[M],
the expected blanket (+ fakes) being the same in every cell, so removing it before or after
the min is the same estimator, and E[M] the known bias of the minimum (below).

Error law (:meth:`PUCM.error_bound`, tests/test_pucm_error.py). Fix the public hashes and the
data; let K_{t,j} = Σ_{j' ≠ j, h_t(j') = h_t(j)} c_{j'} ≥ 0 be the users of other values in
j's row-t cell, and N_t = B_t + F_t − nλ − n_f/(τ s) that cell's centred noise: B_t ~ Bin(n, λ),
independent over cells, and F_t ~ Bin(n_f, 1/(τ s)) the fakes in it (multinomial over the τs
cells). Then, before the bias correction,
    ĉ_j − c_j = min_t (K_{t,j} + N_t),   so   M ≤ ĉ_j − c_j ≤ K_{t,j} + N_t for every t,
with M = min_t N_t. Hash collisions only raise the error, the noise is centred, and the
minimum of τ ≥ 2 centred rows is biased *low*: the estimate is neither unbiased nor one-sided
(the survey's "one-sided error" is that of a noiseless count-min, collisions only). A bin
whose τ cells hold no other value's users (K_{·,j} = 0, the common case: for a random hash
a cell holds ≈ (n − c_j)/s ≤ ½ other users on average at s = 2n) errs by exactly M, with
    P[M ≥ k] = P[N ≥ k]^τ
(rows independent: exact without fakes; with fakes the multinomial's correlation
−1/(τs − 1) between two cells is ignored). E[M] = 0 at τ = 1 and E[M] < 0 at τ ≥ 2 (unless
λ = 1 without fakes, when N = 0): for a near-normal row of std σ, E[M] ≈ −0.56σ, −0.85σ,
−1.03σ, −1.54σ and √E[M²] ≈ 1.00σ, 1.13σ, 1.25σ, 1.65σ at τ = 2, 3, 4, 10. E[M] depends
only on (n, λ, n_f, τ, s), all public, so the estimator subtracts it (computed from the exact
binomial laws): a bin without collisions then errs by M − E[M], unbiased, and the estimate
states ``expected_std`` = sd M = √(E[M²] − E[M]²), a standard deviation, with the
subtracted E[M] in ``extra["bias_subtracted"]``, the residual bias of a collision-free bin
in ``extra["bias"]`` (0 by construction; with fakes the multinomial correlation of the cells
is ignored, a residual below the tests' resolution) and σ = sd N_t in ``extra["row_std"]``.
A bin with collisions errs by M − E[M] plus something in [0, max_t K_{t,j}], a residual
upward bias that depends on the data (:meth:`PUCM.collisions` computes K for given data).
Bound: for any data and any bin j, with probability ≥ 1 − β,
    lower − E[M] ≤ ĉ_j − c_j ≤ upper − E[M] + min_t K_{t,j},
where τ·P[N < lower] ≤ β/2 (a union bound over the rows; collisions cannot lower the error)
and P[N > upper] ≤ β/2 (the error is at most the noisy count of the row with fewest
collisions); both tails from the exact law of one cell (binomial marginals, exact with fakes
too), the mass cut off the tabulated window added to each tail.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, ClassVar, Final

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
from ._distributions import binom_isf, binom_pmf, binom_ppf
from ._errors import BoundNotApplicable, ParameterError
from ._messages import decode_uints, encode_uints, uint_codec_size
from ._random import RNGLike, as_generator
from ._registry import ProtocolSpec, integer_option, register_protocol
from .accounting import binomial_window, epsilon_for_pair
from .ldp import lh_hash

__all__ = [
    "PRHR",
    "PUCM",
    "PRHRParams",
    "PUCMParams",
    "TupleSpace",
    "hadamard_row_counts",
    "nullity_distribution",
    "true_tuples",
    "uniform_subspace_bases",
    "uniform_tuple_row_counts",
    "uniform_tuples",
]

_BLOCK: Final = 1 << 18  # messages per elimination pass with null-space tracking
_RANK_BLOCK: Final = 1 << 14  # messages per rank-only pass: L words × 16 Ki stay in cache
_ENUM_CELLS: Final = 1 << 22  # null-space vectors enumerated per pass


def uniform_tuples(count: int, L: int, tau: int, *, rng: RNGLike) -> npt.NDArray[Any]:
    """``count`` uniform τ-tuples over [2^L] in column form: (count, L) uint32 words < 2^τ."""
    rng = as_generator(rng)
    return np.asarray(rng.integers(0, 1 << tau, size=(count, L), dtype=np.uint32))


def true_tuples(rows: npt.NDArray[Any], L: int, tau: int, *, rng: RNGLike) -> npt.NDArray[Any]:
    """For each row r ≠ 0, a tuple of τ independent uniform elements of C_r (column form).

    Column form makes the constraint linear in the words: r·a_k = 0 for every k iff the XOR
    of the words j with bit j of r set is 0. Drawing all words uniformly and then fixing the
    word of r's lowest set bit to the XOR of the other selected words gives the uniform
    distribution on that subspace.
    """
    rng = as_generator(rng)
    r = np.asarray(rows, dtype=np.uint32)
    w = uniform_tuples(r.shape[0], L, tau, rng=rng)
    low = np.asarray(r & (~r + np.uint32(1)), dtype=np.uint32)  # lowest set bit of r
    acc = np.zeros(r.shape[0], dtype=np.uint32)
    for j in range(L):
        sel = ((r >> np.uint32(j)) & np.uint32(1)).astype(bool) & (low != np.uint32(1 << j))
        acc ^= np.where(sel, w[:, j], np.uint32(0))
    j0 = np.log2(low.astype(np.float64)).astype(np.int64)
    w[np.arange(r.shape[0]), j0] = acc
    return w


def _null_space_blocks(
    words: npt.NDArray[Any], L: int
) -> Iterator[tuple[npt.NDArray[np.uint32], npt.NDArray[np.bool_]]]:
    """Per block of messages: (combination masks C (L, k), zero-row mask Z (L, k)).

    After elimination, row j is zero iff original word j is the XOR of the earlier words
    named by C[j]; those C[j] form a basis of the null space (each has bit j set and no
    higher bit).
    """
    for s in range(0, words.shape[0], _BLOCK):
        W = np.ascontiguousarray(words[s : s + _BLOCK].T.astype(np.uint32))
        k = W.shape[1]
        C = np.empty((L, k), dtype=np.uint32)
        for j in range(L):
            C[j] = np.uint32(1 << j)
        for j in range(L - 1):
            w = W[j]
            piv = w & (~w + np.uint32(1))
            hit = (W[j + 1 :] & piv) != 0
            W[j + 1 :] ^= hit * w
            C[j + 1 :] ^= hit * C[j]
        yield C, W == 0


def _rank_deficient(words: npt.NDArray[Any], L: int) -> npt.NDArray[np.bool_]:
    """Messages whose L words are linearly dependent (a non-trivial null space).

    The same elimination as :func:`_null_space_blocks` without the combination masks, on
    cache-sized blocks with preallocated buffers: this pass touches every message, the
    null-space pass afterwards only the few rank-deficient ones.
    """
    k = words.shape[0]
    out = np.empty(k, dtype=bool)
    wt = words.T
    tmp = np.empty((max(L - 1, 1), _RANK_BLOCK), dtype=np.uint32)
    hit = np.empty((max(L - 1, 1), _RANK_BLOCK), dtype=bool)
    for s in range(0, k, _RANK_BLOCK):
        W = np.array(wt[:, s : s + _RANK_BLOCK], dtype=np.uint32, order="C")
        b = W.shape[1]
        for j in range(L - 1):
            w = W[j]
            piv = w & (~w + np.uint32(1))
            t, h = tmp[: L - j - 1, :b], hit[: L - j - 1, :b]
            np.bitwise_and(W[j + 1 :], piv, out=t)
            np.not_equal(t, 0, out=h)
            np.multiply(h, w, out=t)
            np.bitwise_xor(W[j + 1 :], t, out=W[j + 1 :])
        out[s : s + b] = (W == 0).any(axis=0)
    return out


def _add_spans(counts: npt.NDArray[np.int64], basis: npt.NDArray[np.uint32], m: int) -> None:
    """Add one to ``counts[r]`` for every non-zero r in the span of each row of ``basis``
    ((k, m) independent vectors of GF(2)^L as integers)."""
    step = max(1, _ENUM_CELLS >> m)
    for b0 in range(0, basis.shape[0], step):
        bb = basis[b0 : b0 + step]
        span = np.zeros((bb.shape[0], 1 << m), dtype=np.uint32)
        for sub in range(1, 1 << m):
            low = (sub & -sub).bit_length() - 1
            span[:, sub] = span[:, sub & (sub - 1)] ^ bb[:, low]
        counts += np.bincount(span[:, 1:].ravel(), minlength=counts.shape[0])


def hadamard_row_counts(words: npt.NDArray[Any], L: int) -> npt.NDArray[np.int64]:
    """T_r for every r ∈ [2^L] (T_0 unused): tuples t with r·a_k = 0 for all k, r ≠ 0."""
    counts = np.zeros(1 << L, dtype=np.int64)
    w = np.asarray(words).reshape(-1, L)
    w = w[_rank_deficient(w, L)]
    for C, Z in _null_space_blocks(w, L):
        nullity = Z.sum(axis=0)
        for m in range(1, L + 1):
            idx = np.flatnonzero(nullity == m)
            if idx.size == 0:
                continue
            # Basis vectors of each message with nullity m, as an (k_m, m) array.
            zmask = Z[:, idx].T
            _add_spans(counts, C[:, idx].T[zmask].reshape(idx.size, m), m)
    return counts


def nullity_distribution(L: int, tau: int) -> npt.NDArray[np.float64]:
    """P[the null space of a uniform τ-tuple over [2^L] has dimension k], k = 0, …, L.

    In column form a uniform tuple is a uniform τ×L matrix W over GF(2), and its null space
    {r : W r = 0} — the rows r whose C_r^τ contains the tuple — has dimension L − rank W.
    Counting matrices of rank ρ (Π_{i<ρ} (2^τ − 2^i)(2^L − 2^i)/(2^ρ − 2^i) of them):
        P[rank W = ρ] = [L choose ρ]_2 · Π_{i<ρ} (1 − 2^{i−τ}) · 2^{−τ(L−ρ)},
    with [L choose ρ]_2 = Π_{i<ρ} (2^{L−i} − 1)/(2^{i+1} − 1) the Gaussian binomial. Computed
    in log₂ so no factor overflows; ranks above τ get probability 0.
    """
    out = np.zeros(L + 1, dtype=np.float64)
    for rank in range(L + 1):
        if rank > tau:
            continue
        log2p = -float(tau * (L - rank))
        for i in range(rank):
            log2p += math.log2(2.0 ** (L - i) - 1) - math.log2(2.0 ** (i + 1) - 1)
            log2p += math.log2(-math.expm1((i - tau) * math.log(2)))
        out[L - rank] = 2.0**log2p
    return np.asarray(out / out.sum(), dtype=np.float64)


def _independent(vectors: npt.NDArray[np.uint32]) -> npt.NDArray[np.bool_]:
    """Rows of (c, k) GF(2)^L vectors (as integers) that are linearly independent."""
    V = np.array(vectors, dtype=np.uint32)
    k = V.shape[1]
    for j in range(k - 1):
        w = V[:, j]
        piv = w & (~w + np.uint32(1))  # lowest set bit (0 if w = 0)
        hit = (V[:, j + 1 :] & piv[:, None]) != 0
        V[:, j + 1 :] ^= hit * w[:, None]
    return np.asarray((V != 0).all(axis=1), dtype=bool)


def uniform_subspace_bases(count: int, k: int, L: int, *, rng: RNGLike) -> npt.NDArray[np.uint32]:
    """Bases ((count, k) integers) of ``count`` independent uniform k-dim subspaces of GF(2)^L.

    k uniform vectors conditioned on being independent are a uniform ordered basis, and every
    k-dim subspace has the same number of ordered bases, so their span is uniform. Rejection
    accepts with probability Π_{i<k} (1 − 2^{i−L}) ≥ 0.28.
    """
    rng = as_generator(rng)
    out = np.empty((count, k), dtype=np.uint32)
    todo = np.arange(count)
    while todo.size:
        v = np.asarray(rng.integers(1, 1 << L, size=(todo.size, k), dtype=np.uint32))
        ok = _independent(v)
        out[todo[ok]] = v[ok]
        todo = todo[~ok]
    return out


def uniform_tuple_row_counts(
    count: int, L: int, tau: int, *, rng: RNGLike
) -> npt.NDArray[np.int64]:
    """Row counts T of ``count`` uniform τ-tuples, drawn without drawing the tuples.

    Equal in distribution to ``hadamard_row_counts(uniform_tuples(count, L, tau), L)``: a
    uniform tuple's null space has the dimension law of :func:`nullity_distribution` and,
    given its dimension, is a uniform subspace (W ↦ W A for invertible A preserves the law of
    W and maps the null space to A^{-1}·null space, and GL_L acts transitively on subspaces of
    one dimension). So the number of tuples of each nullity is multinomial, and only the rare
    tuples with a non-trivial null space (≈ 2^{L−τ} of them) are materialized, as subspaces:
    ρn = 5·10^8 blanket tuples cost milliseconds instead of minutes.
    """
    rng = as_generator(rng)
    count = check_n(count, "count", 0)
    counts = np.zeros(1 << L, dtype=np.int64)
    p = nullity_distribution(L, tau)
    # Rare classes first, the trivial null space last (multinomial needs the bulk implied).
    per = rng.multinomial(count, np.r_[p[1:], p[0]])
    for k in range(1, L + 1):
        c = int(per[k - 1])
        for s in range(0, c, _BLOCK):  # bounded memory when 2^{L−τ} is not small
            _add_spans(counts, uniform_subspace_bases(min(_BLOCK, c - s), k, L, rng=rng), k)
    return counts


def _word_bytes(tau: int) -> int:
    return (tau + 7) // 8


@dataclass(frozen=True, slots=True)
class TupleSpace:
    """τ-tuples over [2^L] in column form, as PRHR and PRRQ send them: the wire format,
    uniform draws (blanket, padding, fakes), tallies and the Hadamard-response debiasing.

    Attributes:
        L: words per tuple (the Hadamard matrix is 2^L × 2^L).
        tau: τ bits per word (indices per tuple).
    """

    L: int
    tau: int

    @property
    def message_size(self) -> int:
        """L big-endian words of ⌈τ/8⌉ bytes."""
        return self.L * _word_bytes(self.tau)

    def encode(self, messages: npt.NDArray[Any]) -> npt.NDArray[np.uint8]:
        m = np.asarray(messages, dtype=np.uint32).reshape(-1, self.L)
        rows = encode_uints(m.reshape(-1), _word_bytes(self.tau))
        return rows.reshape(m.shape[0], self.message_size)

    def decode(self, rows: npt.NDArray[np.uint8]) -> tuple[npt.NDArray[Any], npt.NDArray[np.bool_]]:
        wb = _word_bytes(self.tau)
        r = np.asarray(rows, dtype=np.uint8).reshape(-1, self.message_size)
        words = decode_uints(r.reshape(-1, wb), wb).reshape(-1, self.L)
        valid = np.asarray((words < (1 << self.tau)).all(axis=1), dtype=bool)
        return np.where(valid[:, None], words, 0).astype(np.uint32), valid

    def uniform(self, count: int, *, rng: RNGLike) -> npt.NDArray[Any]:
        """``count`` uniform tuples (the blanket, padding and fakes)."""
        rng = as_generator(rng)
        return uniform_tuples(check_n(count, "count", 0), self.L, self.tau, rng=rng)

    def tally(self, messages: npt.NDArray[Any]) -> MessageTally:
        """Row counts T_r over every r ∈ [2^L] and the number of tuples K."""
        m = np.asarray(messages).reshape(-1, self.L)
        return MessageTally(hadamard_row_counts(m, self.L), int(m.shape[0]))

    def uniform_tally(self, count: int, *, rng: RNGLike) -> MessageTally:
        """The tally of ``count`` uniform tuples, none drawn (:func:`uniform_tuple_row_counts`)."""
        rng = as_generator(rng)
        count = check_n(count, "count", 0)
        return MessageTally(uniform_tuple_row_counts(count, self.L, self.tau, rng=rng), count)

    def debias(
        self, counts: npt.ArrayLike, *, messages: int
    ) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
        """(ĉ, Var ĉ) per row from its count T among K = ``messages`` tuples.

        ĉ = (T − K q)/(1 − q), q = 2^{−τ}, unbiased; Var = (K − c) q (1 − q)/(1 − q)², evaluated
        at c = max(ĉ, 0).
        """
        q = 2.0**-self.tau
        est = (np.asarray(counts, dtype=np.float64) - messages * q) / (1.0 - q)
        return est, self.variance(np.clip(est, 0, None), messages=messages)

    def variance(self, counts: npt.ArrayLike, *, messages: int) -> npt.NDArray[np.float64]:
        """Exact Var ĉ of a row holding ``counts`` true tuples among K = ``messages``."""
        q = 2.0**-self.tau
        c = np.asarray(counts, dtype=np.float64)
        return np.asarray(np.maximum(messages - c, 0) * q * (1 - q) / (1 - q) ** 2)


@dataclass(frozen=True, slots=True)
class PRHRParams:
    """Configuration of ``PRHR`` (formulas in the module docstring).

    Attributes:
        domain: d.
        L: ⌈log2(d + 1)⌉; the Hadamard matrix is 2^L × 2^L and value x uses row x + 1.
        tau: τ = ⌈log2 n⌉ indices per tuple.
        rho: ρ = ⌈36 ln(1/δ₀)/ε²⌉ blanket tuples per user, δ₀ = δ ε e^{−ε}.
        n: users.
        epsilon: ε ≤ 1.
        delta: δ of the guarantee (= δ₀ e^{ε}/ε, survey §4.2).
    """

    domain: int
    L: int
    tau: int
    rho: int
    n: int
    epsilon: float
    delta: float


#: Most cells of the exact view :func:`prhr_revealed_epsilon` builds (small τ: large windows).
_PRHR_MAX_CELLS = 3_000_000


def _view_windows(blanket: int, tau: int, delta: float) -> tuple[npt.NDArray[Any], ...]:
    """Windows of the counts in C_r^τ ∩ C_{r'}^τ and in one of them only, each holding all
    but δ·10⁻⁴/6 of its binomial law, one cell longer for the victim's tuple."""
    both = 4.0**-tau
    one = 2.0**-tau - both
    tail = delta * 1e-4 / 6.0
    b = np.arange(int(binom_ppf(tail, blanket, both)), int(binom_isf(tail, blanket, both)) + 2)
    r = np.arange(int(binom_ppf(tail, blanket, one)), int(binom_isf(tail, blanket, one)) + 2)
    return b, r


def computable_blanket(blanket: int, tau: int, delta: float) -> int:
    """The largest count ≤ ``blanket`` whose :func:`prhr_revealed_epsilon` view fits
    ``_PRHR_MAX_CELLS`` (the windows grow with the count; bisection).

    Args:
        blanket: the blanket tuples available.
        tau: τ.
        delta: δ.

    Returns:
        That count (0 if none fits).
    """

    def fits(count: int) -> bool:
        b, r = _view_windows(count, tau, delta)
        return b.size * r.size**2 <= _PRHR_MAX_CELLS

    if fits(blanket):
        return blanket
    lo, hi = 0, blanket  # fits(lo) (an empty blanket has a one-cell view), not fits(hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo


def prhr_revealed_epsilon(blanket: int, tau: int, delta: float) -> float:
    """ε(δ) of one true PRHR tuple among ``blanket`` uniform tuples, exact (an upper bound on
    the ε of any PRHR view with that many honest blanket tuples).

    The adversary is also told every true tuple but the victim's (more knowledge: the real
    view forgets it). For two distinct non-zero rows r, r' a uniform τ-tuple lies in
    C_r^τ ∩ C_{r'}^τ w.p. 4^{−τ} and in exactly one of them w.p. 2^{−τ} − 4^{−τ} each (two
    rows agree on a quarter of [2^L] per coordinate); the victim's tuple, uniform in C_r^τ,
    lies in the intersection w.p. 2^{−τ}, else in C_r^τ only. The likelihood of the multiset
    depends on the tuples only through those three counts (the blanket is iid uniform), so
    their laws — the blanket's multinomial plus the victim's one tuple — give the exact
    ε(δ); the mass outside the computed windows is charged to δ.

    Args:
        blanket: the honest users' blanket tuples.
        tau: τ, the tuple length.
        delta: δ.

    Returns:
        ε (``inf`` if no ε reaches δ).

    Raises:
        BoundNotApplicable: the windows would exceed ``_PRHR_MAX_CELLS`` cells.
    """
    both = 4.0**-tau
    one = 2.0**-tau - both
    # Windows holding all but delta·1e-4 of each count (the rest is charged to δ below).
    b, r = _view_windows(blanket, tau, delta)
    if b.size * r.size**2 > _PRHR_MAX_CELLS:
        raise BoundNotApplicable(
            f"prhr: the exact view has {b.size * r.size**2} cells > {_PRHR_MAX_CELLS}"
        )
    law_b = binom_pmf(b, blanket, both)
    left = blanket - b
    law_r1 = binom_pmf(r[None, :], left[:, None], one / (1.0 - both))
    rest = left[:, None] - r[None, :]
    law_r2 = (
        binom_pmf(r[None, None, :], np.maximum(rest, 0)[:, :, None], one / (1.0 - both - one))
        * (rest >= 0)[:, :, None]
    )
    grid = law_b[:, None, None] * law_r1[:, :, None] * law_r2  # blanket (b, r1, r2)
    inside = 2.0**-tau
    shifted_b = np.zeros_like(grid)
    shifted_b[1:] = grid[:-1]
    shifted_1 = np.zeros_like(grid)
    shifted_1[:, 1:] = grid[:, :-1]
    shifted_2 = np.zeros_like(grid)
    shifted_2[:, :, 1:] = grid[:, :, :-1]
    p = inside * shifted_b + (1.0 - inside) * shifted_1  # victim in C_r^τ
    q = inside * shifted_b + (1.0 - inside) * shifted_2  # victim in C_{r'}^τ
    missing = max(0.0, 1.0 - float(p.sum()), 1.0 - float(q.sum()))
    if missing >= delta:
        return math.inf
    with np.errstate(divide="ignore"):
        return epsilon_for_pair(np.log(p), np.log(q), delta - missing)


class PRHR(ShuffleProtocol):
    """``PRHR``: private-coin multi-message Hadamard response (Ghazi et al.; survey §4.2).

    Messages are τ-tuples over [2^L] stored in column form (``(k, L)`` uint32 words < 2^τ),
    encoded as L big-endian words of ⌈τ/8⌉ bytes. 1 + ρ messages per user. For n = 10^6 the
    message set (≈ n(1 + ρ) tuples) does not fit a pipeline batch; the ``ideal`` pipeline then
    carries the estimator's tally instead (:meth:`tally_users`, :meth:`tally_fakes`).
    """

    name: ClassVar[str] = "prhr"
    input_kind: ClassVar[InputKind] = InputKind.CATEGORICAL
    bound_name: ClassVar[str] = (
        "Ghazi et al. arXiv 1908.11358, private-coin Hadamard response; survey §4.2 "
        "(tau = log2 n, rho = 36 ln(1/delta0)/eps^2, (eps, delta0 e^eps/eps)-DP)"
    )

    def __init__(self, *, domain: int, epsilon: float, n: int, delta: float) -> None:
        d = check_n(domain, "domain", 2)
        eps = check_epsilon(epsilon)
        n = check_n(n, "n", 2)
        delta = check_delta(delta)
        if eps > 1.0:
            raise ParameterError(f"{self.name}: the analysis holds for epsilon <= 1, got {eps:g}")
        L = int(d).bit_length()  # ⌈log2(d + 1)⌉
        if L > 24:
            raise ParameterError(f"{self.name}: domain must be < 2^24, got {d}")
        tau = max(1, math.ceil(math.log2(n)))
        if tau > 32:
            raise ParameterError(f"{self.name}: n must be <= 2^32, got {n}")
        delta0 = delta * eps / math.exp(eps)
        rho = math.ceil(36.0 * math.log(1.0 / delta0) / eps**2)
        self._p = PRHRParams(d, L, tau, rho, n, eps, delta)
        self._space = TupleSpace(L, tau)

    @property
    def params(self) -> PRHRParams:
        return self._p

    @property
    def domain(self) -> int:
        return self._p.domain

    @property
    def message_size(self) -> int:
        return self._space.message_size

    @property
    def messages_per_user(self) -> float:
        return float(1 + self._p.rho)

    @property
    def privacy(self) -> PrivacyGuarantee:
        # Multi-message: one user's true tuple alone identifies its row, no local guarantee.
        return PrivacyGuarantee(
            epsilon_central=self._p.epsilon,
            epsilon_local=math.inf,
            delta=self._p.delta,
            bound=self.bound_name,
        )

    def honest_users_bound(self, honest_others: int) -> HonestUsersBound | None:
        """Upper: the exact ε of the victim's true tuple among the honest users' blanket.

        Colluders' tuples are known and removed; the h = ``honest_others`` + 1 honest users'
        ρh blanket tuples remain, and :func:`prhr_revealed_epsilon` bounds the view exactly
        for an adversary also told the other honest users' true tuples. Floored at the
        configured ε (the survey's claim, which holds with every user honest).

        Args:
            honest_others: the honest users besides the victim.

        Where the view is too large to compute (small τ, above 3·10⁶ cells) fewer blanket
        tuples are used: an adversary told the rest are blanket knows more.

        Returns:
            The bound, or ``None`` when even the exact view reaches no ε at δ (too few
            blanket tuples).
        """
        h = check_n(honest_others, "honest others", 0) + 1
        p = self._p
        # Too large to compute: fewer blanket tuples (the rest told) bound it.
        blanket = computable_blanket(h * p.rho, p.tau, p.delta)
        exact = prhr_revealed_epsilon(blanket, p.tau, p.delta)
        if not math.isfinite(exact):
            return None
        return HonestUsersBound(
            max(p.epsilon, exact), f"prhr_revealed_exact ({blanket} honest blanket tuples)"
        )

    def __repr__(self) -> str:
        p = self._p
        return (
            f"PRHR(domain={p.domain}, epsilon={p.epsilon:g}, delta={p.delta:g}, n={p.n}, "
            f"L={p.L}, tau={p.tau}, rho={p.rho})"
        )

    # --- client ------------------------------------------------------------------------
    def randomize(self, values: npt.ArrayLike, *, rng: RNGLike) -> npt.NDArray[Any]:
        rng = as_generator(rng)
        x = self.validate_values(values).astype(np.uint32, copy=False)
        p = self._p
        true = true_tuples(x + np.uint32(1), p.L, p.tau, rng=rng)
        blanket = uniform_tuples(x.shape[0] * p.rho, p.L, p.tau, rng=rng)
        return np.concatenate([true, blanket], axis=0)

    def encode(self, messages: npt.NDArray[Any]) -> npt.NDArray[np.uint8]:
        return self._space.encode(messages)

    def decode(self, rows: npt.NDArray[np.uint8]) -> tuple[npt.NDArray[Any], npt.NDArray[np.bool_]]:
        return self._space.decode(rows)

    def sample_fakes(self, count: int, *, rng: RNGLike) -> npt.NDArray[Any]:
        rng = as_generator(rng)
        return self._space.uniform(count, rng=rng)

    # --- analyzer ------------------------------------------------------------------------
    def row_counts(self, messages: npt.NDArray[Any]) -> npt.NDArray[np.int64]:
        """T_{x+1} for x ∈ [d].

        Args:
            messages: the decoded tuples.

        Returns:
            The d row counts.
        """
        L = self._p.L
        return hadamard_row_counts(messages, L)[1 : self._p.domain + 1]

    def estimate_from_counts(self, counts: npt.ArrayLike, *, messages: int) -> Estimate:
        """ĉ from the row counts of ``messages`` received tuples (users' and fakes').

        Args:
            counts: the row counts (:meth:`row_counts`'s).
            messages: the number of tuples received.

        Returns:
            The estimate.
        """
        est, var = self._space.debias(counts, messages=messages)
        return Estimate(
            values=est,
            expected_std=np.sqrt(var),
            messages_used=int(messages),
            extra={"tau": self._p.tau, "rho": self._p.rho},
        )

    def tally(self, messages: npt.NDArray[Any]) -> MessageTally:
        """Row counts T_r over every r ∈ [2^L] and the number of tuples K.

        Args:
            messages: the decoded messages.

        Returns:
            Their tally.
        """
        return self._space.tally(messages)

    def estimate_tally(self, tally: MessageTally, *, n: int, n_fakes: int) -> Estimate:
        return self.estimate_from_counts(
            tally.counts[1 : self._p.domain + 1], messages=tally.messages
        )

    def estimate(self, messages: npt.NDArray[Any], *, n: int, n_fakes: int) -> Estimate:
        return self.estimate_tally(self.tally(messages), n=n, n_fakes=n_fakes)

    def tally_users(self, values: npt.ArrayLike, *, rng: RNGLike) -> MessageTally:
        """True tuples drawn per user (block by block); the nρ blanket tuples, which are
        uniform, through :func:`uniform_tuple_row_counts` (same law, no tuple drawn).

        Args:
            values: one value per user.
            rng: the randomizers' generator, or a seed (:data:`~protocols.RNGLike`).

        Returns:
            The tally, equal in distribution to ``tally(randomize(values))``.
        """
        rng = as_generator(rng)
        x = self.validate_values(values)
        p = self._p
        tally = self._space.uniform_tally(x.shape[0] * p.rho, rng=rng)
        for s in range(0, x.shape[0], TALLY_BLOCK):
            block = x[s : s + TALLY_BLOCK].astype(np.uint32) + np.uint32(1)
            tally += self._space.tally(true_tuples(block, p.L, p.tau, rng=rng))
        return tally

    def tally_fakes(self, count: int, *, rng: RNGLike) -> MessageTally:
        rng = as_generator(rng)
        return self._space.uniform_tally(count, rng=rng)

    def variance(self, counts: npt.ArrayLike, *, messages: int) -> npt.NDArray[np.float64]:
        """Exact variance of the estimate per value given true counts and K tuples.

        Args:
            counts: the true counts of the d values.
            messages: the number of tuples K.

        Returns:
            The d variances.
        """
        return self._space.variance(counts, messages=messages)

    def simulate(self, values: npt.ArrayLike, *, rng: RNGLike, n_fakes: int = 0) -> Estimate:
        """``estimate(shuffle(randomize(values) ∪ fakes))`` in distribution, through the
        tally (:meth:`tally_users`, :meth:`tally_fakes`): no message set in memory.

        Args:
            values: one value per user.
            rng: the generator of the users' randomizers and of the fakes, or a seed
                (:data:`~protocols.RNGLike`).
            n_fakes: the number of fake tuples.

        Returns:
            The estimate.
        """
        rng = as_generator(rng)
        x = self.validate_values(values)
        tally = self.tally_users(x, rng=rng) + self.tally_fakes(n_fakes, rng=rng)
        return self.estimate_tally(tally, n=int(x.shape[0]), n_fakes=n_fakes)

    def truth(self, values: npt.ArrayLike) -> npt.NDArray[np.float64]:
        return self.categorical_counts(values)


def _cell_noise_law(
    n: int, lam: float, n_fakes: int, q: float
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """Support and pmf of one count-min cell's centred noise N = B + F − nλ − n_f q.

    B ~ Bin(n, λ) is the cell's blanket, F ~ Bin(n_f, q) its fakes (q = 1/(τs): the marginal of
    the fakes' multinomial over the τs cells). Both are tabulated on
    :func:`~protocols.binomial_window`'s window, so the pmf sums to 1 − (mass cut off,
    ≪ 1e−14); :meth:`PUCM.error_bound` adds that mass to each tail.
    """
    lo, law = (n, np.ones(1)) if lam >= 1.0 else binomial_window(n, lam)
    if n_fakes:
        f_lo, f_law = binomial_window(n_fakes, q)
        lo += f_lo
        law = np.convolve(law, f_law)
    support = lo + np.arange(law.size, dtype=np.float64) - (n * lam + n_fakes * q)
    return support, np.asarray(law, dtype=np.float64)


def _count_min_error_moments(
    pmf: npt.NDArray[np.float64], support: npt.NDArray[np.float64], tau: int
) -> tuple[float, float]:
    """(E[M], √E[M²]) of M = min of τ independent copies of N (law ``support``, ``pmf``).

    P[M ≥ k] = P[N ≥ k]^τ, so P[M = k] = S(k)^τ − S(k⁺)^τ with S the upper tail of N.
    """
    p = pmf / pmf.sum()
    tail = np.cumsum(p[::-1])[::-1]  # S(k) = P[N ≥ k]
    tail_next = np.r_[tail[1:], 0.0]
    pm = tail**tau - tail_next**tau
    return float(pm @ support), math.sqrt(float(pm @ support**2))


@dataclass(frozen=True, slots=True)
class PUCMParams:
    """Configuration of ``PUCM`` (formulas in the module docstring).

    Attributes:
        domain: d.
        tau: τ hash functions (count-min rows).
        s: s = 2n buckets per row.
        lam: λ = 90 τ² ln(2τ/δ)/(ε² n) ≤ 1, per-cell blanket probability.
        n: users.
        epsilon: ε ≤ 1.
        delta: δ.
        seed: public hash seed (public coin).
    """

    domain: int
    tau: int
    s: int
    lam: float
    n: int
    epsilon: float
    delta: float
    seed: int


class PUCM(ShuffleProtocol):
    """``PUCM``: public-coin count-min with a multi-message blanket (Ghazi et al.).

    Messages are cells (t, ℓ) ∈ [τ]×[s]; τ true messages plus Bin(τs, λ) blanket messages
    per user. The blanket is generated cell by cell (the count of users sending a cell is
    Bin(n, λ)), which gives the same multiset distribution as per-user Bernoulli draws without
    an n×τs matrix; the messages are therefore not ordered by user.

    The count-min minimum is biased low by its noise at τ ≥ 2 by a known E[M], which the
    estimator subtracts, and high by hash collisions (module docstring, "Error law"):
    ``expected_std`` is the standard deviation of a collision-free bin's (unbiased) error,
    and :meth:`error_bound` a per-bin interval.
    """

    name: ClassVar[str] = "pucm"
    input_kind: ClassVar[InputKind] = InputKind.CATEGORICAL
    bound_name: ClassVar[str] = (
        "Ghazi et al. arXiv 1908.11358, public-coin count-min; survey §4.2 "
        "(s = 2n, lambda = 90 tau^2 ln(2 tau/delta)/(eps^2 n))"
    )

    def __init__(
        self, *, domain: int, epsilon: float, n: int, delta: float, tau: int, seed: int = 0
    ) -> None:
        d = check_n(domain, "domain", 2)
        eps = check_epsilon(epsilon)
        n = check_n(n, "n", 2)
        delta = check_delta(delta)
        tau = check_n(tau, "tau", 1)
        if eps > 1.0:
            raise ParameterError(f"{self.name}: the analysis holds for epsilon <= 1, got {eps:g}")
        lam = 90.0 * tau**2 * math.log(2.0 * tau / delta) / (eps**2 * n)
        if lam > 0.5:  # the smooth-binomial lemma needs λ ≤ 1/2 (module docstring)
            n_min = math.ceil(180.0 * tau**2 * math.log(2.0 * tau / delta) / eps**2)
            raise ParameterError(
                f"{self.name}: lambda = 90 tau^2 ln(2 tau/delta)/(eps^2 n) = {lam:.3g} > 1/2; "
                f"needs n >= {n_min} at tau={tau}, epsilon={eps:g}, delta={delta:g}, got n={n}"
            )
        self._p = PUCMParams(d, tau, 2 * n, lam, n, eps, delta, int(seed))
        self._hashes = self._hash_table()
        self._size = uint_codec_size(tau * 2 * n)

    def _hash_table(self) -> npt.NDArray[np.int64]:
        p = self._p
        seeds = np.asarray(
            np.random.default_rng(p.seed).integers(0, 1 << 64, size=p.tau, dtype=np.uint64)
        )
        v = np.arange(p.domain, dtype=np.uint64)
        return np.stack([lh_hash(np.full(p.domain, sd), v, p.s) for sd in seeds]).astype(np.int64)

    @property
    def params(self) -> PUCMParams:
        return self._p

    @property
    def domain(self) -> int:
        return self._p.domain

    @property
    def message_size(self) -> int:
        return self._size

    @property
    def messages_per_user(self) -> float:
        return self._p.tau * (1.0 + self._p.s * self._p.lam)

    @property
    def privacy(self) -> PrivacyGuarantee:
        return PrivacyGuarantee(
            epsilon_central=self._p.epsilon,
            epsilon_local=math.inf,
            delta=self._p.delta,
            bound=self.bound_name,
        )

    def honest_users_bound(self, honest_others: int) -> HonestUsersBound | None:
        """Upper: the paper's smooth-binomial argument with the honest users' blanket only.

        The proof of Lemma 4.10 (module docstring) uses the users only through the blanket
        of each cell, Bin(n, λ), independent over cells: a neighbouring pair moves one true
        message in each of the τ rows, and each row is (ε/τ, δ/τ)-DP when that binomial is
        (ε/τ, δ/τ, 1)-smooth. Colluding users' messages (true and blanket) are known to the
        analyzer and removed, so with h = ``honest_others`` + 1 honest users the same lemma
        applies to Bin(h, λ): its condition γn ≥ 90τ² ln(2τ/δ)/ε² at γn = λh gives

            ε_h = √(90 τ² ln(2τ/δ) / (λ h)) = ε √(n/h),

        with the lemma's other conditions unchanged (λ ≤ ½ as configured, and
        k ≤ ε_h λ h/(6τ) = 15τ ln(2τ/δ)/ε_h holds for ε_h ≤ 1), and ε_h ≤ 1 as the analysis
        requires. ``None`` when ε_h > 1 (fewer than n ε² honest users): no bound is proven.

        Args:
            honest_others: the honest users besides the victim.

        Returns:
            The bound, or ``None``.
        """
        h = check_n(honest_others, "honest others", 0) + 1
        p = self._p
        eps_h = math.sqrt(90.0 * p.tau**2 * math.log(2.0 * p.tau / p.delta) / (p.lam * h))
        if eps_h > 1.0:
            return None
        return HonestUsersBound(
            max(p.epsilon, eps_h), f"ggkpv_count_min (blanket Bin({h}, {p.lam:.4g}) per cell)"
        )

    def __repr__(self) -> str:
        p = self._p
        return f"PUCM(domain={p.domain}, epsilon={p.epsilon:g}, n={p.n}, tau={p.tau}, s={p.s})"

    def randomize(self, values: npt.ArrayLike, *, rng: RNGLike) -> npt.NDArray[Any]:
        rng = as_generator(rng)
        x = self.validate_values(values)
        p = self._p
        cells_true = (np.arange(p.tau)[None, :] * p.s + self._hashes[:, x].T).reshape(-1)
        per_cell = rng.binomial(x.shape[0], p.lam, size=p.tau * p.s)
        blanket = np.repeat(np.arange(p.tau * p.s, dtype=np.int64), per_cell)
        return np.concatenate([cells_true, blanket])

    def encode(self, messages: npt.NDArray[Any]) -> npt.NDArray[np.uint8]:
        return encode_uints(messages, self._size)

    def decode(self, rows: npt.NDArray[np.uint8]) -> tuple[npt.NDArray[Any], npt.NDArray[np.bool_]]:
        v = decode_uints(rows, self._size)
        valid = v < self._p.tau * self._p.s
        return np.where(valid, v, 0), valid

    def sample_fakes(self, count: int, *, rng: RNGLike) -> npt.NDArray[Any]:
        rng = as_generator(rng)
        return rng.integers(0, self._p.tau * self._p.s, size=check_n(count, "count", 0))

    def tally(self, messages: npt.NDArray[Any]) -> MessageTally:
        """The count-min table C[t, ℓ] (flattened, τs cells) and the number of messages.

        Args:
            messages: the decoded messages.

        Returns:
            Their tally.
        """
        p = self._p
        m = np.asarray(messages, dtype=np.int64)
        return MessageTally(np.bincount(m, minlength=p.tau * p.s)[: p.tau * p.s], int(m.shape[0]))

    def tally_users(self, values: npt.ArrayLike, *, rng: RNGLike) -> MessageTally:
        """The true cells, plus Bin(n, λ) blanket messages per cell: the same law as
        ``tally(randomize(values))`` (which draws the blanket the same way).

        Args:
            values: one value per user.
            rng: the randomizers' generator, or a seed (:data:`~protocols.RNGLike`).

        Returns:
            The tally, equal in distribution to ``tally(randomize(values))``.
        """
        rng = as_generator(rng)
        x = self.validate_values(values)
        p = self._p
        cells = (np.arange(p.tau)[None, :] * p.s + self._hashes[:, x].T).reshape(-1)
        table = np.bincount(cells, minlength=p.tau * p.s).astype(np.int64)
        blanket = rng.binomial(x.shape[0], p.lam, size=p.tau * p.s)
        table += blanket
        return MessageTally(table, int(cells.shape[0] + blanket.sum()))

    def tally_fakes(self, count: int, *, rng: RNGLike) -> MessageTally:
        rng = as_generator(rng)
        count = check_n(count, "count", 0)
        cells = self._p.tau * self._p.s
        if count <= cells:
            table = np.bincount(self.sample_fakes(count, rng=rng), minlength=cells)
        else:
            table = rng.multinomial(count, np.full(cells, 1.0 / cells))
        return MessageTally(np.asarray(table, dtype=np.int64), count)

    def estimate(self, messages: npt.NDArray[Any], *, n: int, n_fakes: int) -> Estimate:
        return self.estimate_tally(self.tally(messages), n=n, n_fakes=n_fakes)

    def estimate_tally(self, tally: MessageTally, *, n: int, n_fakes: int) -> Estimate:
        """ĉ_j = min_t C[t, h_t(j)] − nλ − n_f/(τs) − E[M] for every j.

        M = min_t N_t is the error of the raw minimum for a bin without hash collisions
        (module docstring); subtracting its exact mean E[M] (< 0 at τ ≥ 2) leaves such a bin
        unbiased, and ``expected_std`` is sd M = √(E[M²] − E[M]²). ``extra`` holds the
        subtracted E[M] (``"bias_subtracted"``), the residual bias of a collision-free bin
        (``"bias"``: 0; collisions add an upward bias that depends on the data, see
        :meth:`collisions`) and one row's noise std (``"row_std"``).

        Args:
            tally: the tally of the received messages.
            n: the number of users.
            n_fakes: the fake values among the messages.

        Returns:
            The estimate.
        """
        p = self._p
        q = 1.0 / (p.tau * p.s)
        noise = n * p.lam + n_fakes * q
        cells = tally.counts.reshape(p.tau, p.s) - noise
        rows = np.arange(p.tau)[:, None]
        support, pmf = _cell_noise_law(n, p.lam, n_fakes, q)
        bias, rmse = _count_min_error_moments(pmf, support, p.tau)
        est = cells[rows, self._hashes].min(axis=0) - bias
        row_var = n * p.lam * (1 - p.lam) + n_fakes * q * (1 - q)
        return Estimate(
            values=est.astype(np.float64),
            expected_std=np.full(p.domain, math.sqrt(max(rmse * rmse - bias * bias, 0.0))),
            messages_used=tally.messages,
            extra={
                "tau": p.tau,
                "s": p.s,
                "lambda": p.lam,
                "bias": 0.0,
                "bias_subtracted": bias,
                "row_std": math.sqrt(row_var),
            },
        )

    def error_bound(self, beta: float, *, n_fakes: int = 0) -> tuple[float, float]:
        """(lower, upper) with lower ≤ ĉ_j − c_j ≤ upper + min_t K_{t,j} w.p. ≥ 1 − β.

        Per bin j, for any data, with n = ``params.n`` users and ``n_fakes`` uniform fakes;
        K = :meth:`collisions` (0 in every row for most bins). Each side fails with
        probability ≤ β/2: τ·P[N < lower] ≤ β/2 (M ≤ error, union bound over the rows) and
        P[N > upper] ≤ β/2 (error ≤ K_{t,j} + N_t in the row with fewest collisions), N one
        cell's centred noise (module docstring, "Error law"); both ends are then shifted by
        the subtracted bias E[M]. For all d bins at once use β/d.

        Args:
            beta: the failure probability β, in (0, 1).
            n_fakes: the number of uniform fakes.

        Returns:
            ``(lower, upper)``.

        Raises:
            ParameterError: β outside (0, 1), or below the mass the tabulated law cuts off.
        """
        b = float(beta)
        if not 0.0 < b < 1.0:
            raise ParameterError(f"beta must lie in (0, 1), got {beta!r}")
        p = self._p
        n_fakes = check_n(n_fakes, "n_fakes", 0)
        support, pmf = _cell_noise_law(p.n, p.lam, n_fakes, 1.0 / (p.tau * p.s))
        cut = max(0.0, 1.0 - float(pmf.sum()))
        below = np.r_[0.0, np.cumsum(pmf)[:-1]] + cut  # ≥ P[N < support[i]]
        above = np.r_[np.cumsum(pmf[::-1])[::-1][1:], 0.0] + cut  # ≥ P[N > support[i]]
        low_ok = np.flatnonzero(p.tau * below <= b / 2)
        high_ok = np.flatnonzero(above <= b / 2)
        if low_ok.size == 0 or high_ok.size == 0:
            raise ParameterError(
                f"beta = {b:g} is below the tail mass the tabulated noise law leaves out "
                f"({p.tau * cut:.3g})"
            )
        bias, _ = _count_min_error_moments(pmf, support, p.tau)
        return float(support[low_ok[-1]] - bias), float(support[high_ok[0]] - bias)

    def collisions(self, values: npt.ArrayLike) -> npt.NDArray[np.int64]:
        """K[t, j] = Σ_{j' ≠ j, h_t(j') = h_t(j)} c_{j'}, shape (τ, d): the users of other
        values sharing j's row-t cell, the count-min's only upward error (module docstring).

        Args:
            values: the users' values.

        Returns:
            The ``(τ, d)`` collision counts.

        Raises:
            ParameterError: values outside the domain.
        """
        p = self._p
        c = np.bincount(self.validate_values(values), minlength=p.domain).astype(np.int64)
        K = np.empty((p.tau, p.domain), dtype=np.int64)
        for t in range(p.tau):  # τ rows, each vectorized over values
            cell = np.bincount(self._hashes[t], weights=c, minlength=p.s).astype(np.int64)
            K[t] = cell[self._hashes[t]] - c
        return K

    def truth(self, values: npt.ArrayLike) -> npt.NDArray[np.float64]:
        return self.categorical_counts(values)


@register_protocol("prhr")
def _build_prhr(spec: ProtocolSpec) -> ShuffleProtocol:
    return PRHR(domain=spec.domain, epsilon=spec.epsilon, n=spec.n, delta=spec.delta)


@register_protocol("pucm")
def _build_pucm(spec: ProtocolSpec) -> ShuffleProtocol:
    tau = integer_option(spec, "tau", max(1, math.ceil(math.log2(spec.domain))), minimum=1)
    seed = integer_option(spec, "seed", 0)
    return PUCM(
        domain=spec.domain,
        epsilon=spec.epsilon,
        n=spec.n,
        delta=spec.delta,
        tau=tau,
        seed=seed,
    )
