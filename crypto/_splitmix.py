"""Split-Mix additive secret sharing over Z_q (Ishai, Kushilevitz, Ostrovsky, Sahai, FOCS'06).

A value x ∈ Z_q becomes m shares: m−1 drawn uniformly from Z_q and a last one
x − Σ others (mod q). Any m−1 shares are uniform and independent of x; all m sum to x mod q.
Each share travels as its own report, so after shuffling the analyzer learns only the
multiset of shares, i.e. (for the protocols that use it) the sum.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from ._errors import CryptoParameterError
from ._random import secure_uniform_ints

__all__ = ["MAX_MODULUS", "combine_shares", "split_mix"]

MAX_MODULUS = 2**62


def _check_modulus(modulus: int) -> int:
    """``modulus`` as a Python int, after checking it is an integer in [2, 2**62].

    A numpy scalar is converted because numpy promotes int64 arithmetic with a ``uint64``
    scalar to float64, which silently rounds shares once q exceeds 2^53.
    """
    if isinstance(modulus, bool) or not isinstance(modulus, int | np.integer):
        raise CryptoParameterError(f"modulus must be an integer, got {modulus!r}")
    if not 2 <= modulus <= MAX_MODULUS:
        raise CryptoParameterError(f"modulus must lie in [2, 2**62], got {modulus}")
    return int(modulus)


def _check(modulus: int, shares: int) -> int:
    q = _check_modulus(modulus)
    if isinstance(shares, bool) or not isinstance(shares, int | np.integer) or shares < 2:
        raise CryptoParameterError(f"shares must be an integer >= 2, got {shares!r}")
    return q


def split_mix(
    values: npt.ArrayLike,
    *,
    modulus: int,
    shares: int,
    rng: np.random.Generator | None = None,
) -> npt.NDArray[np.int64]:
    """Split each value into ``shares`` additive shares mod ``modulus``.

    Args:
        values: integers in [0, modulus), any shape (k,).
        modulus: q, in [2, 2**62].
        shares: m >= 2.
        rng: ``None`` (default) draws the shares from the OS CSPRNG, as a live run must;
            a seeded Generator is for reproducible statistical simulations only.

    Returns:
        ``(k, shares)`` int64 array; row i sums to ``values[i]`` mod q.

    Raises:
        CryptoParameterError: bad modulus/shares, or a value outside [0, modulus).
    """
    modulus = _check(modulus, shares)
    shares = int(shares)
    x = np.asarray(values)
    if x.ndim != 1 or not np.issubdtype(x.dtype, np.integer):
        raise CryptoParameterError("values must be a 1-D integer array")
    outside = (x < 0) | (x >= modulus)  # before the int64 cast, which wraps uint64 >= 2^63
    if outside.any():
        bad = x[np.argmax(outside)]
        raise CryptoParameterError(f"values must lie in [0, {modulus}), got {bad}")
    x = x.astype(np.int64)
    k = x.shape[0]
    if rng is None:
        head = secure_uniform_ints(modulus, (k, shares - 1))
    else:
        head = rng.integers(0, modulus, size=(k, shares - 1), dtype=np.int64)
    out = np.empty((k, shares), dtype=np.int64)
    out[:, :-1] = head
    out[:, -1] = (x - _sum_mod(head, modulus, axis=1)) % modulus
    return out


def combine_shares(shares: npt.ArrayLike, *, modulus: int) -> int:
    """Sum of all shares mod q (the analyzer's recombination of a shuffled multiset).

    Every integer share counts as its residue mod q, whatever its dtype (a ``uint64`` share
    above 2^63 included); non-integer shares are refused rather than truncated.

    Args:
        shares: The shares, any shape.
        modulus: The share modulus q.

    Returns:
        The sum of the shares mod q, in [0, q) (0 for no share).

    Raises:
        CryptoParameterError: bad modulus, or shares that are not integers.
    """
    q = _check_modulus(modulus)
    raw = np.asarray(shares)
    if raw.size == 0:
        return 0
    flat = raw.reshape(-1)
    if np.issubdtype(raw.dtype, np.unsignedinteger):
        # reduce in uint64 first: a cast to int64 would wrap values >= 2^63 to negatives
        arr = (flat.astype(np.uint64) % np.uint64(q)).astype(np.int64)
    elif np.issubdtype(raw.dtype, np.signedinteger):
        arr = flat.astype(np.int64)
    elif raw.dtype == object and all(
        isinstance(v, int | np.integer) and not isinstance(v, bool | np.bool_) for v in flat
    ):
        arr = np.array([int(v) % q for v in flat], dtype=np.int64)  # Python ints beyond int64
    else:
        raise CryptoParameterError(f"shares must be integers, got dtype {raw.dtype}")
    return int(_sum_mod(arr.reshape(1, -1), q, axis=1)[0])


def _sum_mod(a: npt.NDArray[np.int64], q: int, axis: int) -> npt.NDArray[np.int64]:
    """Sums mod q along ``axis`` with no overflow, vectorized.

    Entries are reduced into [0, q) with q <= 2^62 and split as hi·2^31 + lo with hi, lo <
    2^31, so each partial sum is exact in int64 for fewer than 2^32 terms; the final
    hi·2^31 + lo recombination is done in Python integers only when q > 2^31.
    """
    a = np.asarray(a, dtype=np.int64) % q
    if q <= 2**31:
        return np.asarray(a.sum(axis=axis) % q, dtype=np.int64)
    hi = (a >> 31).sum(axis=axis) % q
    lo = (a & (2**31 - 1)).sum(axis=axis) % q
    mixed = (hi.astype(object) * (2**31 % q) + lo.astype(object)) % q
    return np.asarray(mixed, dtype=np.int64)
