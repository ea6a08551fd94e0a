"""Randomness that privacy depends on: the OS CSPRNG, never a seeded statistical PRNG.

The project keeps two kinds of randomness apart (docs/design.md, "Randomness"):

* statistics of a simulation (users' data, local randomizers in a sweep) use a seeded
  ``numpy.random.Generator`` passed in explicitly, so runs are reproducible;
* everything an adversary must not predict — the shuffle permutation, fake reports, Split-Mix
  shares and key material in a live run — comes from here.
"""

from __future__ import annotations

import os

import numpy as np
import numpy.typing as npt
import randomgen

from ._errors import CryptoParameterError

__all__ = ["csprng_generator", "secure_permutation", "secure_uniform_ints"]


def secure_permutation(n: int) -> npt.NDArray[np.int64]:
    """A uniformly random permutation of ``range(n)`` keyed by ``os.urandom``.

    Sorts n random 64-bit keys. Conditioned on the keys being distinct, the sorting order is
    exactly uniform; keys collide with probability < n²/2^65 (≈ 3·10^-8 at n = 10^6), and
    then every key is redrawn, so no tie-breaking rule can bias the result.

    Args:
        n: The length, an integer >= 0.

    Returns:
        An ``int64`` array holding each of 0..n−1 once.

    Raises:
        CryptoParameterError: ``n`` is not an integer >= 0.
    """
    if isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 0:
        raise CryptoParameterError(f"n must be an integer >= 0, got {n!r}")
    n = int(n)
    while True:
        # Two arrays of n words at the peak (10^8 reports: 1.6 GB): the keys are sorted in
        # place after their order is taken, and the tie check reads them sorted.
        keys = np.frombuffer(bytearray(os.urandom(8 * n)), dtype=np.uint64)
        order = np.argsort(keys)
        keys.sort()
        if n < 2 or not np.any(keys[1:] == keys[:-1]):
            return order.astype(np.int64, copy=False)


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
    return np.random.Generator(randomgen.ChaCha(key=key, counter=0, rounds=20))
