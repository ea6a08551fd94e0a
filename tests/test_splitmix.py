"""Split-Mix over Z_q: recombination, validation, and uniformity of any m−1 shares."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from crypto import CryptoParameterError, combine_shares, split_mix
from crypto._splitmix import MAX_MODULUS

# --------------------------------------------------------------------------- recombination


@settings(max_examples=100, deadline=None)
@given(
    q=st.one_of(st.integers(2, 50), st.integers(2, MAX_MODULUS), st.just(MAX_MODULUS)),
    m=st.integers(2, 8),
    k=st.integers(0, 30),
    seed=st.integers(0, 2**32 - 1),
    csprng=st.booleans(),
)
def test_rows_recombine_to_values(q: int, m: int, k: int, seed: int, csprng: bool) -> None:
    rng = np.random.default_rng(seed)
    values = rng.integers(0, q, size=k, dtype=np.int64)
    shares = split_mix(values, modulus=q, shares=m, rng=None if csprng else rng)
    assert shares.dtype == np.int64
    assert shares.shape == (k, m)
    assert ((shares >= 0) & (shares < q)).all()
    for x, row in zip(values.tolist(), shares.tolist(), strict=True):
        assert sum(row) % q == x  # Python ints: no overflow in the reference
    assert combine_shares(shares, modulus=q) == sum(values.tolist()) % q


def test_empty_input_gives_empty_shares() -> None:
    out = split_mix(np.array([], dtype=np.int64), modulus=7, shares=3, rng=None)
    assert out.shape == (0, 3)
    assert combine_shares(out, modulus=7) == 0


@pytest.mark.parametrize(
    "q", [MAX_MODULUS, MAX_MODULUS - 1, MAX_MODULUS - 57, 2**61 + 1, 2**31 + 1, 2**31, 2**31 - 1]
)
def test_combine_shares_near_2_62_matches_python_ints(q: int) -> None:
    rng = np.random.default_rng(q % 1000)
    shares = rng.integers(0, q, size=5000, dtype=np.int64)
    assert combine_shares(shares, modulus=q) == sum(shares.tolist()) % q
    top = np.full(10_000, q - 1, dtype=np.int64)  # a naive int64 sum overflows at once
    assert combine_shares(top, modulus=q) == (10_000 * (q - 1)) % q
    assert combine_shares(top.reshape(100, 100), modulus=q) == (10_000 * (q - 1)) % q


# --------------------------------------------------------------------------- validation


@pytest.mark.parametrize("q", [1, 0, -5, MAX_MODULUS + 1, 2**63, 2.5, True, "7", None])
def test_bad_modulus_refused(q: object) -> None:
    with pytest.raises(CryptoParameterError, match="modulus"):
        split_mix(np.array([0]), modulus=q, shares=2, rng=None)  # type: ignore[arg-type]


@pytest.mark.parametrize("q", [1, 0, MAX_MODULUS + 1])
def test_combine_refuses_bad_modulus(q: int) -> None:
    with pytest.raises(CryptoParameterError, match="modulus"):
        combine_shares(np.array([0, 1]), modulus=q)


@pytest.mark.parametrize("m", [1, 0, -2, True, 2.0, "3", None])
def test_bad_share_count_refused(m: object) -> None:
    with pytest.raises(CryptoParameterError, match="shares"):
        split_mix(np.array([0]), modulus=7, shares=m, rng=None)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "values",
    [
        np.array([0, 7]),
        np.array([-1, 3]),
        np.array([[1, 2]]),
        np.array([0.5, 1.0]),
        np.array([2**62], dtype=np.uint64),
    ],
    ids=["equal-q", "negative", "2-D", "float", "huge-uint64"],
)
def test_bad_values_refused(values: np.ndarray) -> None:
    with pytest.raises(CryptoParameterError, match="values"):
        split_mix(values, modulus=7, shares=3, rng=np.random.default_rng(0))


def test_numpy_integer_parameters_accepted() -> None:
    out = split_mix(np.array([3]), modulus=np.int64(7), shares=np.int64(3), rng=None)  # type: ignore[arg-type]
    assert int(out.sum()) % 7 == 3


@pytest.mark.parametrize("q", [2**62 - 57, 2**53 + 1, 2**40 + 15, 7])
@pytest.mark.parametrize("csprng", [True, False])
def test_numpy_unsigned_modulus_gives_exact_shares(q: int, csprng: bool) -> None:
    """A ``np.uint64`` q (accepted as an integer) turned ``(x − Σ) % q`` into float64: the
    shares of q = 2^62 − 57 then missed their value by up to hundreds."""
    values = np.array([0, 1, q // 2, q - 1], dtype=np.int64)
    rng = None if csprng else np.random.default_rng(q % 997)
    for modulus in (np.uint64(q), np.int64(q), np.uint32(7) if q == 7 else q):
        out = split_mix(values, modulus=modulus, shares=3, rng=rng)  # type: ignore[arg-type]
        assert out.dtype == np.int64
        assert [sum(row) % q for row in out.tolist()] == values.tolist()
        assert all(0 <= v < q for v in out.ravel().tolist())
        assert combine_shares(out[-1], modulus=modulus) == q - 1  # type: ignore[arg-type]


def test_combine_shares_reduces_every_integer_dtype_exactly() -> None:
    """A uint64 share >= 2^63 was cast to a negative int64 (2^64 − 1 counted as −1), and
    Python ints beyond int64 raised OverflowError."""
    big = np.array([2**64 - 1, 2**63], dtype=np.uint64)
    assert combine_shares(big, modulus=7) == (2**64 - 1 + 2**63) % 7
    assert combine_shares([2**70, 3, -1], modulus=7) == (2**70 + 2) % 7
    assert combine_shares(np.array([5, 6], dtype=np.uint8), modulus=7) == 4
    assert combine_shares([-1], modulus=7) == 6  # residues, as before
    assert combine_shares([], modulus=7) == 0


@pytest.mark.parametrize("shares", [[1.9, 1.9], np.array([True, True]), ["1"], [1, None]], ids=str)
def test_combine_shares_refuses_non_integer_shares(shares: object) -> None:
    """[1.9, 1.9] was truncated to 1 + 1 = 2 without a word."""
    with pytest.raises(CryptoParameterError, match="shares must be integers"):
        combine_shares(shares, modulus=7)  # type: ignore[arg-type]


@pytest.mark.parametrize("q", [2.5, 7.0, True, "7", None])
def test_combine_refuses_non_integer_modulus(q: object) -> None:
    with pytest.raises(CryptoParameterError, match="modulus must be an integer"):
        combine_shares([1, 2], modulus=q)  # type: ignore[arg-type]


def test_bad_values_quote_the_offending_value() -> None:
    with pytest.raises(CryptoParameterError, match=r"\[0, 7\), got 18446744073709551615"):
        split_mix(np.array([1, 2**64 - 1], dtype=np.uint64), modulus=7, shares=2, rng=None)
    with pytest.raises(CryptoParameterError, match=r"\[0, 7\), got -3"):
        split_mix(np.array([1, -3]), modulus=7, shares=2, rng=None)


# --------------------------------------------------------------------------- uniformity

N_SPLITS = 20_000


def _chi2_joint(cols: np.ndarray, q: int) -> tuple[float, int]:
    """Chi-square statistic of the joint counts of ``cols`` (N, d) against uniform on Z_q^d."""
    d = cols.shape[1]
    cell = np.zeros(cols.shape[0], dtype=np.int64)
    for j in range(d):
        cell = cell * q + cols[:, j]
    counts = np.bincount(cell, minlength=q**d)
    expected = cols.shape[0] / q**d
    return float(((counts - expected) ** 2 / expected).sum()), q**d - 1


@pytest.mark.parametrize(("q", "m"), [(5, 3), (3, 4), (7, 2)])
@pytest.mark.parametrize("value", [0, 2])
def test_any_m_minus_1_shares_are_uniform_seeded(q: int, m: int, value: int) -> None:
    """Joint law of every (m−1)-subset of shares is uniform on Z_q^(m−1), for any value.

    Threshold: the chi-square p-value must exceed 1e-4. The seed is fixed, so the test is
    deterministic; it was not tuned (a correct split passes for all but ~1e-4 of seeds).
    """
    shares = split_mix(
        np.full(N_SPLITS, value),
        modulus=q,
        shares=m,
        rng=np.random.default_rng(100 * q + 10 * m + value),
    )
    for subset in itertools.combinations(range(m), m - 1):
        stat, df = _chi2_joint(shares[:, list(subset)], q)
        assert stats.chi2.sf(stat, df) > 1e-4, (subset, stat, df)


@pytest.mark.parametrize(("q", "m"), [(5, 3), (3, 4)])
def test_any_m_minus_1_shares_are_uniform_csprng(q: int, m: int) -> None:
    """The same on the live path (rng=None, OS CSPRNG), where no seed can be fixed.

    Threshold: the statistic must stay below the chi-square quantile at p = 1e-9, so a
    correct implementation fails about once in 10^9 runs (per subset), while a bias of a few
    percent in one cell fails every time (see the power check below).
    """
    shares = split_mix(np.full(N_SPLITS, 1), modulus=q, shares=m, rng=None)
    for subset in itertools.combinations(range(m), m - 1):
        stat, df = _chi2_joint(shares[:, list(subset)], q)
        assert stat < stats.chi2.isf(1e-9, df), (subset, stat, df)


def test_chi_square_check_has_power() -> None:
    """The checker rejects what must be rejected: all m shares jointly (they are
    determined by m−1 of them and the value), and a split with a biased first share."""
    q, m = 5, 3
    shares = split_mix(np.full(N_SPLITS, 2), modulus=q, shares=m, rng=np.random.default_rng(1))
    stat, df = _chi2_joint(shares, q)
    assert stats.chi2.sf(stat, df) < 1e-12
    biased = shares[:, :2].copy()
    # 5 % of rows get first share 0: a bias a broken sampler could plausibly have.
    biased[np.random.default_rng(2).random(N_SPLITS) < 0.05, 0] = 0
    stat, df = _chi2_joint(biased, q)
    assert stat > stats.chi2.isf(1e-9, df)


def test_large_modulus_shares_look_uniform_csprng() -> None:
    """Marginal mean of shares/q for q = 2^62 − 57: within 6 standard errors of 1/2."""
    q = MAX_MODULUS - 57
    shares = split_mix(np.full(50_000, q - 1), modulus=q, shares=3, rng=None)
    u = shares[:, :2].astype(np.float64).ravel() / q
    se = np.sqrt(1 / 12 / u.size)
    assert abs(u.mean() - 0.5) < 6 * se
    # the top quarter of Z_q is hit about a quarter of the time (no truncation to int32 etc.)
    assert abs((u > 0.75).mean() - 0.25) < 6 * np.sqrt(0.25 * 0.75 / u.size)


@pytest.mark.parametrize("m", [2, 3, 5])
def test_binary_modulus_shares_are_uniform_csprng(m: int) -> None:
    """q = 2 (DisEle's parity shares): every (m−1)-subset uniform on Z_2^(m−1), every
    row of the right parity. Threshold as above: chi-square quantile at p = 1e-9."""
    for value in (0, 1):
        shares = split_mix(np.full(N_SPLITS, value), modulus=2, shares=m, rng=None)
        assert set(np.unique(shares).tolist()) <= {0, 1}
        assert np.all(shares.sum(axis=1) % 2 == value)
        for subset in itertools.combinations(range(m), m - 1):
            stat, df = _chi2_joint(shares[:, list(subset)], 2)
            assert stat < stats.chi2.isf(1e-9, df), (value, subset, stat)


@pytest.mark.parametrize("q", [MAX_MODULUS, MAX_MODULUS - 57, 2**61 + 1, 3 * 2**60 + 1])
def test_large_modulus_shares_fill_z_q_uniformly_csprng(q: int) -> None:
    """Near 2^62 (and where rejection sampling rejects up to 1/4 of draws): the share's
    position in Z_q, cut into 8 equal bins, and its residue mod 3 are uniform, for the
    free shares and the determined last one alike. Chi-square threshold at p = 1e-9."""
    shares = split_mix(np.full(20_000, q - 1), modulus=q, shares=3, rng=None)
    assert shares.min() >= 0
    assert shares.max() < q
    for col in range(3):
        s = [int(v) for v in shares[:, col]]
        bins = np.bincount([v * 8 // q for v in s], minlength=8)
        stat = float(((bins - len(s) / 8) ** 2 / (len(s) / 8)).sum())
        assert stat < stats.chi2.isf(1e-9, 7), (col, bins)
        res = np.bincount([v % 3 for v in s], minlength=3)
        stat = float(((res - len(s) / 3) ** 2 / (len(s) / 3)).sum())
        assert stat < stats.chi2.isf(1e-9, 2), (col, res)
