"""CSPRNG helpers: permutations, uniform integers, ChaCha20-backed Generators.

These draw from the OS CSPRNG, so no seed can be fixed: every statistical threshold is set
at a false-alarm probability of about 1e-9 per run (stated at each test), far below anything
that could flake, while the biases they guard against fail by tens of standard errors.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable

import numpy as np
import pytest
from scipy import stats

from crypto import CryptoParameterError, csprng_generator, secure_permutation, secure_uniform_ints

P_FALSE_ALARM = 1e-9
Z = float(stats.norm.isf(P_FALSE_ALARM / 2))  # two-sided, ≈ 6.1


@pytest.mark.parametrize("n", [0, 1, 2, 17, 1000])
def test_secure_permutation_is_a_permutation(n: int) -> None:
    perm = secure_permutation(n)
    assert perm.dtype == np.int64
    assert perm.shape == (n,)
    assert np.array_equal(np.sort(perm), np.arange(n))


@pytest.mark.parametrize("dtype", [np.uint32, np.int32, np.uint16, np.uint8])
@pytest.mark.parametrize("n", [0, 1, 2, 17, 256])
def test_secure_permutation_in_a_narrower_dtype(n: int, dtype: type[np.integer]) -> None:
    """The permutation is built in the dtype asked for (a word per item saved at 10^8)."""
    perm = secure_permutation(n, dtype=dtype)
    assert perm.dtype == dtype
    assert np.array_equal(np.sort(perm), np.arange(n))


@pytest.mark.parametrize(("n", "dtype"), [(257, np.uint8), (2**16 + 2, np.uint16), (5, np.float64)])
def test_secure_permutation_refuses_a_dtype_too_narrow_or_not_integer(
    n: int, dtype: type[np.generic]
) -> None:
    with pytest.raises(CryptoParameterError, match="dtype"):
        secure_permutation(n, dtype=dtype)


def test_secure_permutation_differs_between_calls() -> None:
    # two equal permutations of 64 items: probability 1/64!, i.e. never
    assert not np.array_equal(secure_permutation(64), secure_permutation(64))


def test_secure_permutation_is_uniform_on_s3() -> None:
    """All 6 permutations of 3 items equally likely: chi-square below the 1e-9 quantile."""
    draws = 12_000
    index = {p: i for i, p in enumerate(itertools.permutations(range(3)))}
    counts = np.zeros(6)
    for _ in range(draws):
        counts[index[tuple(secure_permutation(3).tolist())]] += 1
    expected = draws / 6
    stat = float(((counts - expected) ** 2 / expected).sum())
    assert stat < stats.chi2.isf(P_FALSE_ALARM, 5), counts


def _permutation_law(n: int, draws: int, sample: Callable[[], list[int]]) -> np.ndarray:
    """Counts of each of the n! permutations of range(n) among ``draws`` samples."""
    index = {p: i for i, p in enumerate(itertools.permutations(range(n)))}
    counts = np.zeros(len(index))
    for _ in range(draws):
        counts[index[tuple(sample())]] += 1
    return counts


def _naive_swap_law(n: int) -> np.ndarray:
    """Exact law of the classic broken shuffle ``swap(a[i], a[randrange(n)])`` for each i,
    from all n^n equally likely swap sequences (not a multiple of n!, so never uniform)."""
    index = {p: i for i, p in enumerate(itertools.permutations(range(n)))}
    law = np.zeros(len(index))
    for seq in itertools.product(range(n), repeat=n):
        a = list(range(n))
        for i, j in enumerate(seq):
            a[i], a[j] = a[j], a[i]
        law[index[tuple(a)]] += 1
    law /= n**n
    return law


@pytest.mark.parametrize(
    ("n", "draws", "dtype"), [(4, 48_000, np.int64), (5, 60_000, np.int64), (4, 48_000, np.uint32)]
)
def test_secure_permutation_is_exactly_uniform_over_every_permutation(
    n: int, draws: int, dtype: type[np.integer]
) -> None:
    """All n! permutations of a small batch (24 or 120 cells), against the exact uniform law:
    the chi-square statistic stays below its 1e-9 quantile (n! − 1 degrees of freedom).

    Power, computed exactly rather than drawn: the naive swap shuffle's law has a
    noncentrality λ = draws · n! · Σ (p − 1/n!)² of about 1400 at n = 4 (the quantile is 89),
    so the same test rejects it with probability 1 − 10^-300.
    """
    counts = _permutation_law(n, draws, lambda: secure_permutation(n, dtype=dtype).tolist())
    cells = math.factorial(n)
    expected = draws / cells
    assert counts.min() > 0
    stat = float(((counts - expected) ** 2 / expected).sum())
    quantile = float(stats.chi2.isf(P_FALSE_ALARM, cells - 1))
    assert stat < quantile, counts
    law = _naive_swap_law(n)
    noncentrality = draws * cells * float(((law - 1 / cells) ** 2).sum())
    assert stats.ncx2.sf(quantile, cells - 1, noncentrality) > 1 - 1e-12


def test_secure_permutation_positions_are_uniform() -> None:
    """Each item lands in each of 10 positions ~1/10 of the time (100 x 10 cells)."""
    n, draws = 10, 4000
    where = np.zeros((n, n))
    for _ in range(draws):
        where[np.arange(n), secure_permutation(n)] += 1
    stat = float(((where - draws / n) ** 2 / (draws / n)).sum())
    # rows and columns both sum to `draws`, so (n-1)^2 degrees of freedom
    assert stat < stats.chi2.isf(P_FALSE_ALARM, (n - 1) ** 2)


def test_secure_permutation_refuses_negative_n() -> None:
    with pytest.raises(CryptoParameterError, match="-1"):
        secure_permutation(-1)


@pytest.mark.parametrize("q", [1, 2, 3, 7, 2**31 - 1, 2**31, 2**62 - 1, 2**62])
def test_secure_uniform_ints_in_range(q: int) -> None:
    out = secure_uniform_ints(q, (40, 50))
    assert out.dtype == np.int64
    assert out.shape == (40, 50)
    assert out.min() >= 0
    assert out.max() < q
    if q == 1:
        assert not out.any()
    elif q >= 2**31:
        # 2000 draws all below q/2 would have probability 2^-2000
        assert out.max() > q // 2


def test_secure_uniform_ints_int_size_and_empty() -> None:
    assert secure_uniform_ints(5, 7).shape == (7,)
    assert secure_uniform_ints(5, 0).shape == (0,)
    assert secure_uniform_ints(5, (0, 3)).shape == (0, 3)


def test_secure_uniform_ints_roughly_uniform() -> None:
    q, n = 10, 100_000
    counts = np.bincount(secure_uniform_ints(q, n), minlength=q)
    stat = float(((counts - n / q) ** 2 / (n / q)).sum())
    assert stat < stats.chi2.isf(P_FALSE_ALARM, q - 1), counts


def test_secure_uniform_ints_has_no_modulo_bias() -> None:
    """q = 0.15 · 2^64: a plain ``draw % q`` would put 7/6 weight on [0, r) with
    r = 2^64 − 6q, i.e. P(x < r) = 0.70 instead of r/q = 2/3, 30 standard errors away."""
    q = (15 * 2**64) // 100
    assert q <= 2**62
    r = 2**64 - 6 * q
    n = 200_000
    p = r / q
    frac = float((secure_uniform_ints(q, n) < r).mean())
    assert abs(frac - p) < Z * math.sqrt(p * (1 - p) / n), frac


@pytest.mark.parametrize("q", [0, -1, 2**62 + 1])
def test_secure_uniform_ints_refuses_bad_modulus(q: int) -> None:
    with pytest.raises(CryptoParameterError, match="modulus"):
        secure_uniform_ints(q, 3)


@pytest.mark.parametrize("q", [2.5, 7.0, True, "7", None])
def test_secure_uniform_ints_refuses_a_non_integer_modulus(q: object) -> None:
    """q = 2.5 passed the range check and returned draws from {0, 1}."""
    with pytest.raises(CryptoParameterError, match="modulus must be an integer"):
        secure_uniform_ints(q, 10)  # type: ignore[arg-type]


@pytest.mark.parametrize("size", [-1, (2, -1), 2.0, (2.0,), None, True])
def test_secure_uniform_ints_refuses_a_bad_size(size: object) -> None:
    with pytest.raises(CryptoParameterError, match="size must be non-negative integers"):
        secure_uniform_ints(7, size)  # type: ignore[arg-type]


def test_secure_uniform_ints_takes_numpy_integers() -> None:
    out = secure_uniform_ints(np.uint64(2**62 - 57), np.int64(1000))  # type: ignore[arg-type]
    assert out.dtype == np.int64
    assert out.shape == (1000,)
    assert out.min() >= 0
    assert out.max() < 2**62 - 57
    assert secure_uniform_ints(np.int32(3), (np.int64(2), 5)).shape == (2, 5)  # type: ignore[arg-type]


@pytest.mark.parametrize("n", [2.0, None, True, "3"])
def test_secure_permutation_refuses_a_non_integer_n(n: object) -> None:
    with pytest.raises(CryptoParameterError, match="n must be an integer"):
        secure_permutation(n)  # type: ignore[arg-type]


def test_csprng_generators_give_different_streams() -> None:
    a, b = csprng_generator(), csprng_generator()
    assert isinstance(a, np.random.Generator)
    xa = a.integers(0, 2**63, size=8)
    xb = b.integers(0, 2**63, size=8)
    assert not np.array_equal(xa, xb)
    # one generator's stream moves on (it is not reseeded per call)
    assert not np.array_equal(xa, a.integers(0, 2**63, size=8))


def test_csprng_generator_is_chacha20_and_uniform() -> None:
    gen = csprng_generator()
    assert type(gen.bit_generator).__name__ == "ChaCha"
    assert gen.bit_generator.state["state"]["rounds"] == 20
    u = gen.random(100_000)
    assert abs(u.mean() - 0.5) < Z * math.sqrt(1 / 12 / u.size)
    counts = np.bincount(gen.integers(0, 8, size=80_000), minlength=8)
    stat = float(((counts - 10_000) ** 2 / 10_000).sum())
    assert stat < stats.chi2.isf(P_FALSE_ALARM, 7)
