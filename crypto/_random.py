"""Randomness that privacy depends on: the OS CSPRNG, never a seeded statistical PRNG.

The project keeps two kinds of randomness apart (docs/design.md, "Randomness"):

* statistics of a simulation (users' data, local randomizers in a sweep) use a seeded
  ``numpy.random.Generator`` passed in explicitly, so runs are reproducible;
* everything an adversary must not predict — the shuffle permutation, fake reports, Split-Mix
  shares and key material in a live run — comes from here.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import numpy.typing as npt

from ._errors import CryptoParameterError

__all__ = ["csprng_generator", "secure_permutation", "secure_uniform_ints"]


def secure_permutation(n: int, *, dtype: npt.DTypeLike = np.int64) -> npt.NDArray[Any]:
    """A uniformly random permutation of ``range(n)`` keyed by ``os.urandom``.

    A Fisher–Yates shuffle (numpy's ``Generator.shuffle``, whose every swap index is drawn
    by rejection sampling, so exactly uniform given uniform bits) driven by a ChaCha20
    stream keyed with 256 fresh bits from ``os.urandom`` (:func:`csprng_generator`): the
    permutation is as unpredictable as the key. It is built in place in an array of
    ``dtype``: at 10^8 items a ``uint32`` permutation is 0.4 GB and nothing else (sorting
    10^8 random 64-bit keys would hold 1.6 GB and take about six times the CPU).

    Args:
        n: The length, an integer >= 0.
        dtype: An integer dtype that holds n − 1 (e.g. ``np.uint32`` for n <= 2^32).

    Returns:
        A ``dtype`` array (``int64`` by default) holding each of 0..n−1 once.

    Raises:
        CryptoParameterError: ``n`` is not an integer >= 0, or ``dtype`` is not an integer
            dtype that holds n − 1.
    """
    if isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 0:
        raise CryptoParameterError(f"n must be an integer >= 0, got {n!r}")
    n = int(n)
    try:
        kind = np.dtype(dtype)
    except TypeError:
        raise CryptoParameterError(f"dtype must be an integer dtype, got {dtype!r}") from None
    if kind.kind not in "iu" or (n > 1 and np.iinfo(kind).max < n - 1):
        raise CryptoParameterError(f"dtype must be an integer dtype that holds {n - 1}, got {kind}")
    out = np.arange(n, dtype=kind)
    csprng_generator().shuffle(out)
    return out


def secure_uniform_ints(modulus: int, size: int | tuple[int, ...]) -> npt.NDArray[np.int64]:
    """Integers uniform on [0, modulus) from ``os.urandom`` (rejection sampling, no bias).

    Args:
        modulus: The exclusive upper end, an integer in [1, 2**62].
        size: The output shape (an int, or a tuple of non-negative ints).

    Returns:
        An ``int64`` array of that shape.

    Raises:
        CryptoParameterError: ``modulus`` is not an integer in [1, 2**62], or ``size`` is not
            non-negative integers.
    """
    # A float modulus passed the range check and then drew from the wrong range (2.5 gave
    # {0, 1}); a numpy uint64 one turns the arithmetic below into float64.
    if isinstance(modulus, bool) or not isinstance(modulus, int | np.integer):
        raise CryptoParameterError(f"modulus must be an integer, got {modulus!r}")
    if not 1 <= modulus <= 2**62:
        raise CryptoParameterError(f"modulus must lie in [1, 2**62], got {modulus}")
    modulus = int(modulus)
    dims = (size,) if isinstance(size, int | np.integer) else size
    if not isinstance(dims, tuple | list) or not all(
        isinstance(d, int | np.integer) and not isinstance(d, bool) and d >= 0 for d in dims
    ):
        raise CryptoParameterError(f"size must be non-negative integers, got {size!r}")
    shape = tuple(int(d) for d in dims)
    count = int(np.prod(shape, dtype=np.int64))
    limit = (2**64 // modulus) * modulus  # accept draws below the largest multiple of q
    out = np.empty(count, dtype=np.uint64)
    filled = 0
    while filled < count:
        need = count - filled
        draw = np.frombuffer(os.urandom(8 * (need + need // 8 + 8)), dtype=np.uint64)
        ok = draw[draw < np.uint64(limit)] if limit < 2**64 else draw
        take = min(need, ok.size)
        out[filled : filled + take] = ok[:take]
        filled += take
    return (out % np.uint64(modulus)).astype(np.int64).reshape(shape)


def csprng_generator() -> np.random.Generator:
    """A numpy Generator over a ChaCha20 stream keyed with 256 bits from ``os.urandom``.

    For samplers written against the numpy Generator API (a protocol's fake-message
    sampler) when their output must be unpredictable: ChaCha20 is a stream cipher, so its
    output is computationally indistinguishable from uniform without the key.

    Returns:
        A fresh generator, seeded independently at every call.
    """
    key = int.from_bytes(os.urandom(32), "big")
    import randomgen  # here: 0.05 s of CPU at import, which a command without it skips

    return np.random.Generator(randomgen.ChaCha(key=key, counter=0, rounds=20))
