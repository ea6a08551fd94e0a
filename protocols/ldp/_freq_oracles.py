"""Local-DP frequency oracles (Wang, Blocki, Li, Jha, USENIX Security'17, arXiv 1705.04421).

Every oracle is a frozen, slotted parameter object over a 0-based domain [0, d) with

* ``randomize(values, *, rng)``: user values (int array in [0, d)) → reports (vectorized);
* ``support_counts(reports)``: C_i = number of reports that *support* i;
* ``aggregate(reports, postprocess="none")``: unbiased counts ĉ_i = (C_i − n q*)/(p* − q*)
  (Wang et al. Theorem 2, pure protocols); clipping to [0, n] or Euclidean projection onto
  the simplex {c ≥ 0, Σc = n} only on request (``postprocess="clip"`` / ``"simplex"``),
  since both bias the counts;
* ``variance(true_counts, n)``: the exact variance of ĉ,
  Var ĉ_i = (c_i p*(1−p*) + (n−c_i) q*(1−q*)) / (p*−q*)²  (each user supports i
  independently with probability p* if its value is i, q* otherwise), and
  ``approx_variance(n)`` = n q*(1−q*)/(p*−q*)², Wang et al.'s Var* (§3) for small c_i
  (equation numbers of the paper are not quoted: sections and theorems are);
* ``epsilon``: the ε the randomizer satisfies; ``output_distribution()`` gives the exact
  report law for every input on small domains, which :mod:`protocols.ldp._audit` checks.

Single-message oracles whose sufficient statistic has a closed-form law (kRR, SUE, OUE, THE,
HR) also offer ``sample_support_counts(true_counts, *, rng)``: an exact draw of what
``support_counts(randomize(values))`` would return, in O(d) (O(d·K) for HR) instead of O(n)
— the shuffled histogram the analyzer sees. kRR and HR also expose
``sample_report_histogram``. Local hashing has no such shortcut (the reports' hash seeds
correlate the support counts), nor does SHE.

Report formats: kRR → int64 (n,); SUE/OUE/THE → packed bits uint8 (n, ⌈d/8⌉) in
little bit order (bit i of a report is ``(row[i // 8] >> (i % 8)) & 1``, see
:func:`unpack_unary`); SHE → float64 (n, d); BLH/OLH → uint64 (n, 2) = (hash seed, hashed
and perturbed value); HR → int64 (n,) in [0, K).

Local hashing API (for protocols built on OLH, e.g. SLH):
``lh_hash(seeds, values, g)`` evaluates h_s(x) for uint64 seeds s and ints x (broadcasting),
``lh_support_counts(seeds, ys, d=..., g=...)`` counts, for every i in [0, d), the reports with
h_s(i) = y — chunked, memory O(chunk·d), never an n×d matrix. The family is Dietzfelbinger's
multiply-add-shift (STACS'96): with (a, b) uniform on [2^64]², T(x) = ((a·x + b) mod 2^64)
>> 32 is strongly universal on [2^32] for x < 2^32, and h(x) = ⌊T(x)·g / 2^32⌋ maps it to
[g] (Lemire's range reduction; marginal error ≤ 2^−32). (a, b) are the first two SplitMix64
outputs from state s, so a report carries a single 64-bit seed; this derived family is a
pseudo-random subfamily rather than a provably universal one, and the tests check its
uniformity and collision rate.

Bernoulli bits of the unary encodings are exact comparisons [U < T] of uniform 32-bit
integers U with an integer threshold T (bit-sliced over 64-bit words for the d − 1 "other"
bits, see ``_bernoulli_words``), so the realised probabilities are p* = ⌊p·2^32⌋/2^32 and
q* = ⌈q·2^32⌉/2^32 (rounded so the likelihood ratio never exceeds e^ε); the estimator and
variance use these realised values.
"""

from __future__ import annotations

import abc
import math
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from .._errors import ParameterError
from .._random import RNGLike, as_generator
from ._oracle import (
    _MAX_LAW_ENTRIES,
    _TWO32,
    FloatArray,
    FrequencyOracle,
    IntArray,
    _check_counts,
    _check_domain,
    _check_hash_range,
    _check_oracle,
    _keep_or_uniform,
    _quantize,
    _small_domain,
    check_values,
    project_simplex,
)

__all__ = [
    "BLH",
    "FREQUENCY_ORACLES",
    "HR",
    "KRR",
    "OLH",
    "OUE",
    "SHE",
    "SUE",
    "THE",
    "FrequencyOracle",
    "check_values",
    "lh_hash",
    "lh_seed_params",
    "lh_support_counts",
    "project_simplex",
    "unpack_unary",
]

_U64 = np.uint64
_MASK64 = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15


# --- direct encoding ----------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class KRR(FrequencyOracle):
    """Direct encoding / k-ary randomized response ``DE`` (Wang et al. §4.1; Warner'65).

    Report y = x w.p. p = e^ε/(e^ε+d−1), else each other value w.p. q = 1/(e^ε+d−1);
    ε-LDP since p/q = e^ε. Support = {y}. Var* = n(d−2+e^ε)/(e^ε−1)² (Wang et al. §4.1).
    Sampled as: w.p. λ = d/(e^ε+d−1) a uniform value in [0, d), else x.
    """

    d: int
    epsilon: float
    name: ClassVar[str] = "krr"
    aggregate_sampling: ClassVar[bool] = True

    def __post_init__(self) -> None:
        _check_oracle(self)

    @property
    def p_star(self) -> float:
        return math.exp(self.epsilon) / (math.exp(self.epsilon) + self.d - 1)

    @property
    def q_star(self) -> float:
        return 1.0 / (math.exp(self.epsilon) + self.d - 1)

    @property
    def uniform_probability(self) -> float:
        """λ = d/(e^ε+d−1)."""
        return self.d / (math.exp(self.epsilon) + self.d - 1)

    def randomize(self, values: npt.ArrayLike, *, rng: RNGLike) -> IntArray:
        rng = as_generator(rng)
        x = check_values(values, self.d)
        return _keep_or_uniform(x, self.uniform_probability, self.d, rng=rng)

    def support_counts(self, reports: npt.NDArray[Any]) -> IntArray:
        return self.report_histogram(reports)

    def report_histogram(self, reports: npt.NDArray[Any]) -> IntArray:
        """Histogram over [0, d) of the reports.

        Args:
            reports: the users' reports (:meth:`randomize`'s).

        Returns:
            The d counts.
        """
        return np.bincount(np.asarray(reports, dtype=np.int64), minlength=self.d)[: self.d]

    def sample_report_histogram(self, true_counts: npt.ArrayLike, *, rng: RNGLike) -> IntArray:
        """Exact law of the report histogram: kept_v ~ Bin(c_v, 1−λ), the other
        U = n − Σ kept reports are Multinomial(U, uniform on [0, d)). O(d).

        Args:
            true_counts: the number of users holding each value (length d).
            rng: the generator, or a seed (:data:`~protocols.RNGLike`).

        Returns:
            The d counts, distributed exactly as the histogram of the randomized reports.
        """
        rng = as_generator(rng)
        c = _check_counts(true_counts, self.d)
        kept = rng.binomial(c, 1.0 - self.uniform_probability)
        rest = int(c.sum() - kept.sum())
        return np.asarray(kept + rng.multinomial(rest, np.full(self.d, 1.0 / self.d)), np.int64)

    def sample_support_counts(self, true_counts: npt.ArrayLike, *, rng: RNGLike) -> IntArray:
        rng = as_generator(rng)
        return self.sample_report_histogram(true_counts, rng=rng)

    def output_distribution(self) -> FloatArray:
        _small_domain(self.d, 4096, "kRR")
        m = np.full((self.d, self.d), self.q_star)
        np.fill_diagonal(m, self.p_star)
        return m


# --- unary encodings -----------------------------------------------------------------------------
def unpack_unary(reports: npt.NDArray[np.uint8], d: int) -> npt.NDArray[np.uint8]:
    """(n, ⌈d/8⌉) packed reports → (n, d) 0/1 matrix (for small n; use support counts).

    Args:
        reports: the packed reports, one row of ⌈d/8⌉ bytes per report (bit i little-endian).
        d: the domain size.

    Returns:
        The ``(n, d)`` ``uint8`` matrix of the reports' bits.
    """
    return np.unpackbits(np.asarray(reports, np.uint8), axis=1, count=d, bitorder="little")


# bit b of byte value v, as a (256, 8) table for counting packed columns
_BYTE_BITS = np.unpackbits(np.arange(256, dtype=np.uint8)[:, None], axis=1, bitorder="little")


def _bernoulli_words(words: int, t: int, *, rng: np.random.Generator) -> npt.NDArray[np.uint64]:
    """``words`` uint64 words whose bits are iid Bernoulli(t / 2^32), exactly.

    Bit-sliced comparison [U < t] of a uniform 32-bit U drawn bit by bit, most significant
    first, for 64 lanes per word at once: at round j a lane is decided as soon as its random
    bit differs from bit j of t (1 if t's bit is 1, else 0); lanes still equal after 32
    rounds have U = t, hence 0. Half the lanes decide per round, so after a few dense rounds
    only the words with undecided lanes are kept (compaction): about 2 random bits and a few
    word operations per output bit instead of a 32-bit draw and a comparison per bit.
    """
    res = np.zeros(words, dtype=np.uint64)
    und = np.full(words, ~np.uint64(0), dtype=np.uint64)
    act: npt.NDArray[np.intp] | None = None
    for j in range(32):
        if und.size == 0:
            break
        r = np.asarray(rng.bit_generator.random_raw(und.size), dtype=np.uint64)
        if (t >> (31 - j)) & 1:
            newly = und & ~r
            if act is None:
                res |= newly
            else:
                res[act] |= newly
            und &= r
        else:
            und &= ~r
        if j >= 4:
            keep = und != 0
            if np.count_nonzero(keep) < 0.6 * und.size:
                und = und[keep]
                act = np.flatnonzero(keep) if act is None else act[keep]
    return res


def _column_bit_counts(rep: npt.NDArray[np.uint8]) -> IntArray:
    """Column sums of the bits of packed rows (n, nbytes), as 8·⌈nbytes/8⌉ counts.

    Vertical popcount by a carry-save adder tree over 64-bit words: pairs of rows are added
    as binary numbers held in bit planes (plane k = bit k of the running count of every
    column), halving the rows per level, so each input word costs about ten word operations
    and no bit is unpacked until the last level. Blocks of rows keep memory bounded.
    """
    n, nbytes = rep.shape
    W = (nbytes + 7) // 8
    counts = np.zeros(W * 64, dtype=np.int64)
    block = max(2048, (1 << 17) // W)
    zero_row = np.zeros((1, W), dtype=np.uint64)
    for s in range(0, n, block):
        blk = np.ascontiguousarray(rep[s : s + block])
        if nbytes % 8:
            padded = np.zeros((blk.shape[0], W * 8), dtype=np.uint8)
            padded[:, :nbytes] = blk
            blk = padded
        planes = [blk.view("<u8")]
        while planes[0].shape[0] > 1:
            if planes[0].shape[0] % 2:
                planes = [np.concatenate([p, zero_row]) for p in planes]
            summed: list[npt.NDArray[np.uint64]] = []
            carry: npt.NDArray[np.uint64] | None = None
            for p in planes:
                a, b = p[0::2], p[1::2]
                x = a ^ b
                if carry is None:
                    summed.append(x)
                    carry = a & b
                else:
                    summed.append(x ^ carry)
                    carry = (a & b) | (carry & x)
            assert carry is not None
            summed.append(carry)
            planes = summed
        for k, p in enumerate(planes):
            bits = np.unpackbits(p.reshape(-1).astype("<u8").view(np.uint8), bitorder="little")
            counts += bits.astype(np.int64) << k
    return counts


class _Unary(FrequencyOracle):
    """One-hot encoding with independent bit flips: bit x is 1 w.p. p, others w.p. q."""

    __slots__ = ()
    aggregate_sampling: ClassVar[bool] = True
    #: bits per chunk in support_counts and 64-bit words per chunk in randomize (memory bound)
    chunk_bits: ClassVar[int] = 1 << 22
    chunk_words: ClassVar[int] = 1 << 20

    @property
    @abc.abstractmethod
    def p_nominal(self) -> float:
        """p before 32-bit quantization."""

    @property
    @abc.abstractmethod
    def q_nominal(self) -> float:
        """q before 32-bit quantization."""

    @property
    def p_star(self) -> float:
        return _quantize(self.p_nominal, self.q_nominal)[0]

    @property
    def q_star(self) -> float:
        return _quantize(self.p_nominal, self.q_nominal)[1]

    def _thresholds(self) -> tuple[np.uint32, np.uint32]:
        p, q = self.p_star, self.q_star
        # p* = T_p / 2^32 realised as u32 < T_p; T_p <= 2^32 − 1 (_quantize caps p*).
        return np.uint32(round(p * _TWO32)), np.uint32(round(q * _TWO32))

    def randomize(self, values: npt.ArrayLike, *, rng: RNGLike) -> npt.NDArray[np.uint8]:
        rng = as_generator(rng)
        x = check_values(values, self.d)
        n, d = x.shape[0], self.d
        tp, tq = self._thresholds()
        nbytes, W = (d + 7) // 8, (d + 63) // 64
        out = np.empty((n, nbytes), dtype=np.uint8)
        step = max(1, self.chunk_words // W)
        one = np.uint64(1)
        tail = np.uint64((1 << (d % 64)) - 1) if d % 64 else None
        for s in range(0, n, step):
            xs = x[s : s + step]
            m = xs.shape[0]
            words = _bernoulli_words(m * W, int(tq), rng=rng).reshape(m, W)
            own = rng.integers(0, _TWO32, size=m, dtype=np.uint32) < tp
            rows, col = np.arange(m), xs >> 6
            bit = one << (xs & 63).astype(np.uint64)
            cur = words[rows, col] & ~bit
            words[rows, col] = cur | np.where(own, bit, np.uint64(0))
            if tail is not None:
                words[:, -1] &= tail
            out[s : s + step] = words.astype("<u8", copy=False).view(np.uint8)[:, :nbytes]
        return out

    def support_counts(self, reports: npt.NDArray[Any]) -> IntArray:
        rep = np.asarray(reports, dtype=np.uint8)
        nbytes = (self.d + 7) // 8
        if rep.ndim != 2 or rep.shape[1] != nbytes:
            raise ParameterError(f"unary reports must have shape (n, {nbytes}), got {rep.shape}")
        if nbytes > 4:
            return _column_bit_counts(rep)[: self.d]
        # Few bytes per report: histogram of byte values per byte column, then expand each
        # byte value to its 8 bits.
        table = np.zeros((nbytes, 256), dtype=np.int64)
        offsets = (np.arange(nbytes, dtype=np.int64) * 256)[None, :]
        step = max(1, self.chunk_bits // (8 * nbytes))
        for s in range(0, rep.shape[0], step):
            idx = rep[s : s + step].astype(np.int64) + offsets
            table += np.bincount(idx.ravel(), minlength=nbytes * 256).reshape(nbytes, 256)
        return (table @ _BYTE_BITS.astype(np.int64)).reshape(-1)[: self.d]

    def sample_support_counts(self, true_counts: npt.ArrayLike, *, rng: RNGLike) -> IntArray:
        """Coordinates are independent: C_i ~ Bin(c_i, p*) + Bin(n − c_i, q*). O(d)."""
        rng = as_generator(rng)
        c = _check_counts(true_counts, self.d)
        n = int(c.sum())
        return np.asarray(rng.binomial(c, self.p_star) + rng.binomial(n - c, self.q_star))

    def output_distribution(self) -> FloatArray:
        _small_domain(self.d, 12, "unary-encoding")
        d = self.d
        outs = (np.arange(1 << d)[:, None] >> np.arange(d)[None, :]) & 1  # (2^d, d) bits
        p, q = self.p_star, self.q_star
        rows = []
        for v in range(d):
            prob_one = np.full(d, q)
            prob_one[v] = p
            rows.append(np.prod(np.where(outs == 1, prob_one, 1 - prob_one), axis=1))
        return np.asarray(rows)

    @property
    def realised_epsilon(self) -> float:
        """ln(p*(1−q*)/((1−p*)q*)): the exact ε of the quantized randomizer (≤ ε)."""
        p, q = self.p_star, self.q_star
        return math.log(p * (1 - q) / ((1 - p) * q))


@dataclass(frozen=True, slots=True)
class SUE(_Unary):
    """Symmetric unary encoding ``SUE`` = basic one-time RAPPOR (Wang et al. §4.3).

    p = e^{ε/2}/(e^{ε/2}+1), q = 1/(e^{ε/2}+1); ε-LDP since (p(1−q))/((1−p)q) = e^ε.
    Var* = n e^{ε/2}/(e^{ε/2}−1)² (Wang et al. §4.3).
    """

    d: int
    epsilon: float
    name: ClassVar[str] = "sue"

    def __post_init__(self) -> None:
        _check_oracle(self)

    @property
    def p_nominal(self) -> float:
        h = math.exp(self.epsilon / 2)
        return h / (h + 1)

    @property
    def q_nominal(self) -> float:
        return 1.0 / (math.exp(self.epsilon / 2) + 1)


@dataclass(frozen=True, slots=True)
class OUE(_Unary):
    """Optimized unary encoding ``OUE`` (Wang et al. §4.3).

    p = ½, q = 1/(e^ε+1); ε-LDP; Var* = 4n e^ε/(e^ε−1)² (Wang et al. §4.3).
    """

    d: int
    epsilon: float
    name: ClassVar[str] = "oue"

    def __post_init__(self) -> None:
        _check_oracle(self)

    @property
    def p_nominal(self) -> float:
        return 0.5

    @property
    def q_nominal(self) -> float:
        return 1.0 / (math.exp(self.epsilon) + 1)


def _the_pq(epsilon: float, theta: float) -> tuple[float, float]:
    return 1 - 0.5 * math.exp(epsilon * (theta - 1) / 2), 0.5 * math.exp(-epsilon * theta / 2)


def optimal_theta(epsilon: float) -> float:
    """θ ∈ (½, 1) minimising THE's Var* = q(1−q)/(p−q)² (Wang et al. §4.2)."""

    def var(theta: float) -> float:
        p, q = _the_pq(epsilon, theta)
        return q * (1 - q) / (p - q) ** 2

    from scipy import optimize  # lazily: scipy costs ~0.5 s at every esa start-up

    res = optimize.minimize_scalar(var, bounds=(0.5, 1.0), method="bounded")
    return float(res.x)


@dataclass(frozen=True, slots=True)
class THE(_Unary):
    """Thresholding with histogram encoding ``THE`` (Wang et al. §4.2).

    B = one-hot(x) + Lap(2/ε)^d; report the set {i : B_i > θ}. Coordinates are independent, so
    the report is exactly one-hot with bit x set w.p. p = 1 − ½e^{ε(θ−1)/2} and each other bit
    w.p. q = ½e^{−εθ/2}, which is how it is sampled. ε-LDP as post-processing of SHE (its
    exact ε, ln(p(1−q)/((1−p)q)), is smaller). θ ∈ (½, 1); default: the θ minimising Var*.
    """

    d: int
    epsilon: float
    theta: float | None = None
    name: ClassVar[str] = "the"

    def __post_init__(self) -> None:
        eps = _check_oracle(self)
        if self.theta is None:
            object.__setattr__(self, "theta", optimal_theta(eps))
        elif isinstance(self.theta, (str, bytes, bool)) or not 0.5 < float(self.theta) < 1.0:
            raise ParameterError(f"theta must lie in (0.5, 1), got {self.theta!r}")
        else:
            object.__setattr__(self, "theta", float(self.theta))

    @property
    def p_nominal(self) -> float:
        assert self.theta is not None
        return _the_pq(self.epsilon, self.theta)[0]

    @property
    def q_nominal(self) -> float:
        assert self.theta is not None
        return _the_pq(self.epsilon, self.theta)[1]


@dataclass(frozen=True, slots=True)
class SHE(FrequencyOracle):
    """Summation with histogram encoding ``SHE`` (Wang et al. §4.2; Hsu et al.).

    Report B = one-hot(x) + (Lap(2/ε))^d (ℓ₁ sensitivity of one-hot is 2, so ε-LDP);
    ĉ_i = Σ_users B_i, unbiased, Var ĉ_i = n·8/ε² exactly. Floating-point Laplace: a
    baseline mechanism only (Mironov, CCS'12). Reports are float64 (n, d).
    """

    d: int
    epsilon: float
    name: ClassVar[str] = "she"

    def __post_init__(self) -> None:
        _check_oracle(self)

    @property
    def p_star(self) -> float:
        return 1.0

    @property
    def q_star(self) -> float:
        return 0.0

    @property
    def scale(self) -> float:
        """Laplace scale b = 2/ε."""
        return 2.0 / self.epsilon

    def randomize(self, values: npt.ArrayLike, *, rng: RNGLike) -> FloatArray:
        rng = as_generator(rng)
        x = check_values(values, self.d)
        out = rng.laplace(0.0, self.scale, size=(x.shape[0], self.d))
        out[np.arange(x.shape[0]), x] += 1.0
        return out

    def support_counts(self, reports: npt.NDArray[Any]) -> FloatArray:
        return np.asarray(np.asarray(reports, dtype=np.float64).sum(axis=0))

    def variance(self, true_counts: npt.ArrayLike, n: int) -> FloatArray:
        c = np.asarray(true_counts, dtype=np.float64)
        return np.full(c.shape, n * 2 * self.scale**2)

    def approx_variance(self, n: int) -> float:
        return float(n * 2 * self.scale**2)

    def output_distribution(self) -> FloatArray:
        """Not defined: SHE's reports are continuous (see :meth:`log_density`).

        Raises:
            ParameterError: always.
        """
        raise ParameterError("SHE has a continuous output; audit it with a density grid")

    def log_density(self, outputs: npt.ArrayLike, value: int) -> FloatArray:
        """log f(B | x = value) for report vectors ``outputs`` of shape (m, d).

        Args:
            outputs: the report vectors, shape (m, d).
            value: the input value in [0, d).

        Returns:
            The m log-densities.
        """
        y = np.asarray(outputs, dtype=np.float64)
        e = np.zeros(self.d)
        e[value] = 1.0
        b = self.scale
        return np.asarray(-np.abs(y - e).sum(axis=1) / b - self.d * math.log(2 * b))


# --- local hashing --------------------------------------------------------------------------------
def _splitmix64(z: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    """SplitMix64 finalizer (Steele, Lea, Flood, OOPSLA'14), in place on a fresh copy."""
    z = np.array(z, dtype=np.uint64)
    t = np.empty_like(z)
    for shift, mult in ((30, 0xBF58476D1CE4E5B9), (27, 0x94D049BB133111EB)):
        np.right_shift(z, _U64(shift), out=t)
        np.bitwise_xor(z, t, out=z)
        np.multiply(z, _U64(mult), out=z)
    np.right_shift(z, _U64(31), out=t)
    np.bitwise_xor(z, t, out=z)
    return z


def lh_seed_params(
    seeds: npt.ArrayLike,
) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.uint64]]:
    """(a, b) of the multiply-add-shift hash for each 64-bit seed (two SplitMix64 outputs).

    Args:
        seeds: the reports' 64-bit hash seeds.

    Returns:
        ``(a, b)``: two ``uint64`` arrays of the seeds' shape.
    """
    s = np.asarray(seeds, dtype=np.uint64)
    a = _splitmix64(s + _U64(_GOLDEN))
    b = _splitmix64(s + _U64((2 * _GOLDEN) & _MASK64))
    return a, b


def lh_hash(seeds: npt.ArrayLike, values: npt.ArrayLike, g: int) -> IntArray:
    """h_s(x) = ⌊(((a_s·x + b_s) mod 2^64) >> 32)·g / 2^32⌋ ∈ [0, g), broadcasting s and x.

    Args:
        seeds: uint64 hash seeds (one per report).
        values: non-negative ints < 2^32.
        g: hash range, 2 <= g < 2^32.

    Returns:
        int64 array of hashed values, the broadcast shape of ``seeds`` and ``values``.
    """
    g = _check_hash_range(g)
    a, b = lh_seed_params(seeds)
    x = np.asarray(values).astype(np.uint64)
    t = a * x
    t += b
    t >>= _U64(32)
    t *= _U64(int(g))
    t >>= _U64(32)
    return t.astype(np.int64)


def lh_support_counts(
    seeds: npt.ArrayLike,
    ys: npt.ArrayLike,
    *,
    d: int,
    g: int,
    chunk: int | None = None,
) -> IntArray:
    """For every i in [0, d): #reports (s, y) with h_s(i) = y. Memory O(chunk·d).

    h_s(i) = y ⟺ T_s(i) ∈ [lo_y, hi_y) with lo_y = ⌈y·2^32/g⌉, hi_y = ⌈(y+1)·2^32/g⌉ ⟺
    (a_s·i + b_s − lo_y·2^32) mod 2^64 < (hi_y − lo_y)·2^32, so each (report, i) pair costs
    one multiply, one add and one compare on uint64.

    Args:
        seeds: the reports' 64-bit hash seeds.
        ys: the reports' hashed values, in [0, g).
        d: the input domain size.
        g: the hash range.
        chunk: reports processed at once (default: about 2^19/d).

    Returns:
        An ``int64`` array of length d: the support count of every input value.

    Raises:
        ParameterError: a bad domain, ``seeds`` and ``ys`` of different lengths, or a hashed
            value outside [0, g).
    """
    d = _check_domain(d, 1)
    s = np.asarray(seeds, dtype=np.uint64).reshape(-1)
    y = np.asarray(ys).astype(np.int64).reshape(-1)
    if s.shape != y.shape:
        raise ParameterError(f"seeds and ys must have the same length, got {s.shape}, {y.shape}")
    if y.size and (y.min() < 0 or y.max() >= g):
        raise ParameterError(
            f"hashed values must lie in [0, {g}), got range [{y.min()}, {y.max()}]"
        )
    a, b = lh_seed_params(s)
    lo = ((y.astype(np.uint64) << _U64(32)) + _U64(g - 1)) // _U64(g)
    hi = (((y + 1).astype(np.uint64) << _U64(32)) + _U64(g - 1)) // _U64(g)
    c = b - (lo << _U64(32))
    width = (hi - lo) << _U64(32)
    xs = np.arange(d, dtype=np.uint64)[None, :]
    step = chunk if chunk is not None else max(1, (1 << 19) // d)
    counts = np.zeros(d, dtype=np.int64)
    z = np.empty((min(step, max(1, s.size)), d), dtype=np.uint64)
    hit = np.empty(z.shape, dtype=bool)
    for start in range(0, s.size, step):
        m = min(step, s.size - start)
        zz, hh = z[:m], hit[:m]
        np.multiply(a[start : start + m, None], xs, out=zz)
        np.add(zz, c[start : start + m, None], out=zz)
        np.less(zz, width[start : start + m, None], out=hh)
        counts += np.add.reduce(hh, axis=0, dtype=np.int64)
    return counts


class _LocalHashing(FrequencyOracle):
    """Local hashing: report (s, y), y = kRR_g(h_s(x)); supports i iff h_s(i) = y."""

    __slots__ = ()
    g: int

    @property
    def p_star(self) -> float:
        e = math.exp(self.epsilon)
        return e / (e + self.g - 1)

    @property
    def q_star(self) -> float:
        return 1.0 / self.g

    def randomize(self, values: npt.ArrayLike, *, rng: RNGLike) -> npt.NDArray[np.uint64]:
        rng = as_generator(rng)
        x = check_values(values, self.d)
        n = x.shape[0]
        out = np.empty((n, 2), dtype=np.uint64)
        out[:, 0] = rng.integers(0, 1 << 64, size=n, dtype=np.uint64, endpoint=False)
        lam = self.g / (math.exp(self.epsilon) + self.g - 1)
        step = 1 << 15  # blocks that stay in cache through the ~25 elementwise passes
        for s in range(0, n, step):
            h = lh_hash(out[s : s + step, 0], x[s : s + step], self.g)
            out[s : s + step, 1] = _keep_or_uniform(h, lam, self.g, rng=rng)
        return out

    def support_counts(self, reports: npt.NDArray[Any]) -> IntArray:
        rep = np.asarray(reports, dtype=np.uint64)
        if rep.ndim != 2 or rep.shape[1] != 2:
            raise ParameterError(f"local-hashing reports must have shape (n, 2), got {rep.shape}")
        return lh_support_counts(rep[:, 0], rep[:, 1], d=self.d, g=self.g)

    def output_distribution(self, seeds: npt.ArrayLike | None = None) -> FloatArray:
        """Exact law of (s, y) over the listed seeds (each equally likely), shape (d, S·g).

        The seed is drawn independently of the input, so the likelihood ratio of a report is
        that of y given s; listing S seeds gives the exact ratios of those hash functions.
        The matrix has d·S·g entries and g ≈ e^ε + 1 for OLH, so it is refused above 2^24
        entries (ε > 10.39 at d = 8 with the 64 default seeds) instead of exhausting memory.
        """
        _small_domain(self.d, 256, "local-hashing")
        s = np.arange(64, dtype=np.uint64) if seeds is None else np.asarray(seeds, np.uint64)
        entries = self.d * s.size * self.g
        if entries > _MAX_LAW_ENTRIES:
            raise ParameterError(
                f"local-hashing output distribution needs d*S*g <= 2^24 entries, got "
                f"{self.d}*{s.size}*{self.g} = {entries:.3g} ({entries * 8 / 2**30:.3g} GiB)"
            )
        h = lh_hash(s[None, :], np.arange(self.d)[:, None], self.g)  # (d, S)
        e = math.exp(self.epsilon)
        p, q = e / (e + self.g - 1), 1.0 / (e + self.g - 1)
        onehot = h[:, :, None] == np.arange(self.g)[None, None, :]  # (d, S, g)
        return np.where(onehot, p, q).reshape(self.d, -1) / s.size


@dataclass(frozen=True, slots=True)
class BLH(_LocalHashing):
    """Binary local hashing ``BLH`` (Wang et al. §4.4; Bassily & Smith STOC'15): g = 2.

    p* = e^ε/(e^ε+1), q* = ½; Var* = n(e^ε+1)²/(e^ε−1)².
    """

    d: int
    epsilon: float
    g: int = field(default=2, init=False)
    name: ClassVar[str] = "blh"

    def __post_init__(self) -> None:
        _check_oracle(self)


@dataclass(frozen=True, slots=True)
class OLH(_LocalHashing):
    """Optimized local hashing ``OLH`` (Wang et al. §4.4): g = round(e^ε + 1) by default
    (at most 2^32 − 1, the range of the hash family).

    y = h_s(x) w.p. p = e^ε/(e^ε+g−1), else each other hash value w.p. 1/(e^ε+g−1); ε-LDP.
    p* = p, q* = 1/g; Var* = n(e^ε−1+g)²/((e^ε−1)²(g−1)) ≈ 4n e^ε/(e^ε−1)² at g = e^ε+1
    (Wang et al. §4.4).
    """

    d: int
    epsilon: float
    g: int = 0
    name: ClassVar[str] = "olh"

    def __post_init__(self) -> None:
        eps = _check_oracle(self)
        if not isinstance(self.g, (bool, np.bool_)) and self.g == 0:
            # round(e^ε + 1) minimizes Var*; the hash family's range stops at 2^32 − 1
            # (ε ≳ 22.2), any g keeps the report ε-LDP.
            object.__setattr__(self, "g", min(max(2, round(math.exp(eps) + 1)), _TWO32 - 1))
        else:
            object.__setattr__(self, "g", _check_hash_range(self.g))


# --- Hadamard response ----------------------------------------------------------------------------
def fwht(a: npt.ArrayLike) -> IntArray:
    """Unnormalised fast Walsh–Hadamard transform of a length-2^k integer vector."""
    h = np.array(a, dtype=np.int64)
    k = h.shape[0]
    step = 1
    while step < k:
        v = h.reshape(-1, 2, step)
        top, bot = v[:, 0, :].copy(), v[:, 1, :]
        v[:, 0, :] += bot
        v[:, 1, :] = top - bot
        step *= 2
    return h


@dataclass(frozen=True, slots=True)
class HR(FrequencyOracle):
    """Hadamard response ``HR`` (Acharya, Sun, Zhang, AISTATS'19, arXiv 1802.04705 §4).

    K = the smallest power of 2 > d, H the K×K Sylvester–Hadamard matrix,
    H[i, y] = (−1)^{popcount(i & y)}. Value x owns the half C_x = {y : H[x+1, y] = +1}
    (row 0, all ones, is skipped). Report y uniform on C_x w.p. e^ε/(e^ε+1), else uniform
    on its complement: P(y|x) ∈ {2e^ε/(K(e^ε+1)), 2/(K(e^ε+1))}, so ε-LDP. Any two distinct
    rows ≥ 1 agree on exactly half of [K], so a report of x' ≠ x lands in C_x w.p. ½:
    p* = e^ε/(e^ε+1), q* = ½, C_x = (n + (H·hist)[x+1])/2 via one fast Walsh–Hadamard
    transform of the report histogram. Var* = n(e^ε+1)²/(e^ε−1)².
    """

    d: int
    epsilon: float
    name: ClassVar[str] = "hr"
    aggregate_sampling: ClassVar[bool] = True

    def __post_init__(self) -> None:
        _check_oracle(self)

    @property
    def K(self) -> int:  # noqa: N802 - the paper's symbol
        """Report alphabet size: the smallest power of two > d."""
        return 1 << self.d.bit_length()

    @property
    def p_star(self) -> float:
        e = math.exp(self.epsilon)
        return e / (e + 1)

    @property
    def q_star(self) -> float:
        return 0.5

    def randomize(self, values: npt.ArrayLike, *, rng: RNGLike) -> IntArray:
        rng = as_generator(rng)
        x = check_values(values, self.d)
        row = (x + 1).astype(np.int64)
        y0 = rng.integers(0, self.K, size=x.shape[0], dtype=np.int64)
        want_in = rng.random(x.shape[0]) < self.p_star
        is_in = (np.bitwise_count(row & y0) & 1) == 0
        # Flipping the lowest set bit of row toggles H[row, y]: a bijection between C_x and
        # its complement, so the result is uniform on the wanted half.
        low = row & -row
        return np.where(is_in == want_in, y0, y0 ^ low)

    def report_histogram(self, reports: npt.NDArray[Any]) -> IntArray:
        """Histogram over [0, K) of the reports.

        Args:
            reports: the users' reports (:meth:`randomize`'s).

        Returns:
            The K counts.
        """
        return np.bincount(np.asarray(reports, dtype=np.int64), minlength=self.K)[: self.K]

    def support_counts(self, reports: npt.NDArray[Any]) -> IntArray:
        return self.support_from_histogram(self.report_histogram(reports))

    def support_from_histogram(self, hist: npt.ArrayLike) -> IntArray:
        """C_x = #reports in C_x, from the report histogram, by one FWHT (O(K log K)).

        Args:
            hist: the K report counts (:meth:`report_histogram`'s).

        Returns:
            The d support counts.
        """
        h = np.asarray(hist, dtype=np.int64)
        n = int(h.sum())
        return (n + fwht(h)[1 : self.d + 1]) // 2

    def _membership(self) -> npt.NDArray[np.bool_]:
        rows = np.arange(1, self.d + 1)[:, None]
        ys = np.arange(self.K)[None, :]
        return np.asarray((np.bitwise_count(rows & ys) & 1) == 0)

    def sample_report_histogram(self, true_counts: npt.ArrayLike, *, rng: RNGLike) -> IntArray:
        """Exact law of the report histogram: per value x, A_x ~ Bin(c_x, p*) reports spread
        uniformly (multinomially) over C_x and c_x − A_x over its complement. O(d·K).

        Args:
            true_counts: the number of users holding each value (length d).
            rng: the generator, or a seed (:data:`~protocols.RNGLike`).

        Returns:
            The K counts, distributed exactly as the histogram of the randomized reports.
        """
        rng = as_generator(rng)
        c = _check_counts(true_counts, self.d)
        member = self._membership()
        half = self.K // 2
        a = rng.binomial(c, self.p_star)
        uni = np.full(half, 1.0 / half)
        inside = rng.multinomial(a, uni)  # (d, K/2)
        outside = rng.multinomial(c - a, uni)
        full = np.empty((self.d, self.K), dtype=np.int64)
        full[member] = inside.ravel()  # each row of member has exactly K/2 True, row-major
        full[~member] = outside.ravel()
        return np.asarray(full.sum(axis=0))

    def sample_support_counts(self, true_counts: npt.ArrayLike, *, rng: RNGLike) -> IntArray:
        rng = as_generator(rng)
        return self.support_from_histogram(self.sample_report_histogram(true_counts, rng=rng))

    def output_distribution(self) -> FloatArray:
        _small_domain(self.d, 2048, "HR")
        e = math.exp(self.epsilon)
        inside = 2 * e / (self.K * (e + 1))
        outside = 2 / (self.K * (e + 1))
        return np.where(self._membership(), inside, outside)


#: public names of the oracles (CLI and audit); ``de`` is the survey's name for kRR
FREQUENCY_ORACLES: dict[str, type[FrequencyOracle]] = {
    "krr": KRR,
    "de": KRR,
    "she": SHE,
    "the": THE,
    "sue": SUE,
    "oue": OUE,
    "blh": BLH,
    "olh": OLH,
    "hr": HR,
}
