"""The message codecs and message helpers shared by the shuffle protocols.

Values travel as fixed-size big-endian unsigned integers (:func:`encode_uints`, one or more
bytes by :func:`uint_codec_size`) or as one byte holding 0 or 1 (:func:`encode_bits`);
Split-Mix protocols carry values of Z_q (:class:`ModularMessages`, :func:`sum_mod`), and the
sum protocols round reals to integers unbiasedly (:func:`randomized_round`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from ._base import check_n
from ._random import RNGLike, as_generator

__all__ = [
    "ModularMessages",
    "decode_bits",
    "decode_uints",
    "encode_bits",
    "encode_uints",
    "randomized_round",
    "sum_mod",
    "uint_codec_size",
    "zero_sum_values",
]


def uint_codec_size(domain: int) -> int:
    """Bytes of the big-endian unsigned encoding of a value in [0, domain)."""
    return max(1, (int(domain - 1).bit_length() + 7) // 8)


def encode_uints(values: npt.NDArray[Any], size: int) -> npt.NDArray[np.uint8]:
    """Vectorized big-endian encoding of non-negative ints to ``(k, size)`` bytes."""
    v = np.asarray(values, dtype=">u8").reshape(-1, 1).view(np.uint8).reshape(-1, 8)
    return np.ascontiguousarray(v[:, 8 - size :])


def decode_uints(rows: npt.NDArray[np.uint8], size: int) -> npt.NDArray[np.int64]:
    """Inverse of :func:`encode_uints`."""
    rows = np.asarray(rows, dtype=np.uint8).reshape(-1, size)
    padded = np.zeros((rows.shape[0], 8), dtype=np.uint8)
    padded[:, 8 - size :] = rows
    return padded.view(">u8").reshape(-1).astype(np.int64)


def sum_mod(values: npt.NDArray[np.int64], q: int) -> int:
    """Σ values mod q without overflow (int64 when the total fits, else in chunks)."""
    v = np.asarray(values, dtype=np.int64).reshape(-1) % q
    chunk = max(1, (1 << 62) // max(q, 1))
    total = 0
    for start in range(0, v.size, chunk):
        total = (total + int(v[start : start + chunk].sum())) % q
    return total


def zero_sum_values(count: int, q: int, *, rng: RNGLike) -> npt.NDArray[np.int64]:
    """``count`` values uniform on Z_q subject to a total of 0 mod q (Split-Mix fakes that
    leave every sum unchanged; ``count`` = 1 gives the value 0)."""
    rng = as_generator(rng)
    if count == 0:
        return np.zeros(0, dtype=np.int64)
    out = rng.integers(0, q, size=count, dtype=np.int64)
    out[-1] = (-sum_mod(out[:-1], q)) % q
    return out


class ModularMessages:
    """Wire format and fakes of a protocol whose messages are values of Z_q (Split-Mix).

    Mixed in before :class:`~protocols.ShuffleProtocol` by protocols that set ``q`` (the
    modulus) and ``_size`` (:func:`uint_codec_size` of q): values travel big-endian, a value
    ≥ q is invalid, and fakes sum to 0 mod q (:func:`zero_sum_values`) so no sum moves.
    """

    q: int
    _size: int

    def encode(self, messages: npt.NDArray[Any]) -> npt.NDArray[np.uint8]:
        return encode_uints(messages, self._size)

    def decode(self, rows: npt.NDArray[np.uint8]) -> tuple[npt.NDArray[Any], npt.NDArray[np.bool_]]:
        v = decode_uints(rows, self._size)
        return v, v < self.q

    def sample_fakes(self, count: int, *, rng: RNGLike) -> npt.NDArray[Any]:
        """``count`` values uniform on Z_q whose total is 0 mod q: they leave sums unchanged."""
        rng = as_generator(rng)
        return zero_sum_values(check_n(count, "count", 0), self.q, rng=rng)


def encode_bits(messages: npt.NDArray[Any]) -> npt.NDArray[np.uint8]:
    """One-byte messages of 0/1 protocols as ``(k, 1)`` rows."""
    return np.asarray(messages, dtype=np.uint8).reshape(-1, 1).copy()


def decode_bits(rows: npt.NDArray[np.uint8]) -> tuple[npt.NDArray[Any], npt.NDArray[np.bool_]]:
    """Inverse of :func:`encode_bits`, with the mask of rows holding 0 or 1."""
    b = np.asarray(rows, dtype=np.uint8).reshape(-1, 1)[:, 0]
    return b.copy(), b <= 1


def randomized_round(x: npt.NDArray[np.float64], k: int, *, rng: RNGLike) -> npt.NDArray[np.int64]:
    """R_k(x) = ⌊xk⌋ + Ber(xk − ⌊xk⌋) in {0, …, k} (unbiased: E R_k(x) = xk)."""
    rng = as_generator(rng)
    scaled = np.asarray(x, dtype=np.float64) * k
    floor = np.floor(scaled)
    up = np.asarray(rng.random(scaled.shape) < (scaled - floor), dtype=np.int64)
    return np.asarray(np.minimum(floor.astype(np.int64) + up, k), dtype=np.int64)
