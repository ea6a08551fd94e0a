"""Fixed-size padding of payloads, so every report at one hop has the same length.

Format: ``length (2 bytes, big-endian) ‖ payload ‖ zero bytes`` up to ``2 + size``. The
parser is strict (length in range, every padding byte zero) and fails opaquely.
"""

from __future__ import annotations

import struct
from typing import Final

import numpy as np
import numpy.typing as npt

from ._errors import CryptoParameterError, InvalidReport

__all__ = ["LENGTH_PREFIX", "MAX_PAYLOAD", "pad", "pad_rows", "padded_size", "unpad", "unpad_rows"]

LENGTH_PREFIX: Final = 2
MAX_PAYLOAD: Final = 0xFFFF


def _check_size(size: int) -> int:
    """``size`` as an int, after checking it is an integer in [0, MAX_PAYLOAD] (the
    2-byte length prefix cannot state more)."""
    if (
        isinstance(size, bool)
        or not isinstance(size, int | np.integer)
        or not 0 <= size <= MAX_PAYLOAD
    ):
        raise CryptoParameterError(
            f"pad size must be an integer in [0, {MAX_PAYLOAD}], got {size!r}"
        )
    return int(size)


def padded_size(size: int) -> int:
    """Bytes of a payload padded to ``size``.

    Args:
        size: The payload capacity, an integer in [0, 65535].

    Returns:
        ``2 + size``: the length prefix and the capacity.

    Raises:
        CryptoParameterError: ``size`` is not an integer in [0, 65535].
    """
    return LENGTH_PREFIX + _check_size(size)


def pad(payload: bytes, size: int) -> bytes:
    """Pad ``payload`` to exactly ``padded_size(size)`` bytes.

    Args:
        payload: The bytes to pad, at most ``size`` of them.
        size: The payload capacity, an integer in [0, 65535].

    Returns:
        ``length ‖ payload ‖ zeros``, of ``padded_size(size)`` bytes.

    Raises:
        CryptoParameterError: the payload is longer than ``size`` or ``size`` is out of range.

    Example:
        >>> from crypto import pad, unpad
        >>> pad(b"hi", 4)
        b'\\x00\\x02hi\\x00\\x00'
        >>> unpad(pad(b"hi", 4), 4)
        b'hi'
    """
    size = _check_size(size)
    if len(payload) > size:
        raise CryptoParameterError(f"payload of {len(payload)} bytes exceeds pad size {size}")
    return struct.pack(">H", len(payload)) + payload + bytes(size - len(payload))


def pad_rows(rows: npt.NDArray[np.uint8], size: int) -> npt.NDArray[np.uint8]:
    """Vectorized :func:`pad` of an ``(k, w)`` array of equal-length payloads.

    Args:
        rows: A 2-D ``uint8`` array, one payload of width ``w`` per row.
        size: The payload capacity, an integer in [w, 65535].

    Returns:
        A ``(k, padded_size(size))`` ``uint8`` array, row i the padding of ``rows[i]``.

    Raises:
        CryptoParameterError: ``rows`` is not 2-D, its width exceeds ``size``, or ``size`` is out
            of range.
    """
    rows = np.asarray(rows, dtype=np.uint8)
    if rows.ndim != 2:
        raise CryptoParameterError(f"rows must be a 2-D uint8 array, got shape {rows.shape}")
    k, width = rows.shape
    size = _check_size(size)
    if width > size:
        raise CryptoParameterError(f"payload width {width} exceeds pad size {size}")
    out = np.zeros((k, padded_size(size)), dtype=np.uint8)
    out[:, 0] = width >> 8
    out[:, 1] = width & 0xFF
    out[:, LENGTH_PREFIX : LENGTH_PREFIX + width] = rows
    return out


def unpad(padded: bytes, size: int) -> bytes:
    """Inverse of :func:`pad`; any malformation raises the opaque :class:`InvalidReport`.

    Args:
        padded: The padded bytes, of ``padded_size(size)`` bytes.
        size: The payload capacity it was padded to.

    Returns:
        The payload.

    Raises:
        CryptoParameterError: ``size`` is out of range (a caller's error, as in :func:`pad`).
        InvalidReport: ``padded`` is not bytes, has the wrong length, a length prefix above
            ``size`` or a non-zero padding byte.
    """
    size = _check_size(size)
    if not isinstance(padded, bytes) or len(padded) != padded_size(size):
        raise InvalidReport
    (length,) = struct.unpack_from(">H", padded)
    if length > size or any(padded[LENGTH_PREFIX + length :]):
        raise InvalidReport
    return padded[LENGTH_PREFIX : LENGTH_PREFIX + length]


def unpad_rows(
    rows: npt.NDArray[np.uint8], size: int
) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.bool_]]:
    """Vectorized strict :func:`unpad` of fixed-width payloads.

    Every honest payload of a protocol has exactly ``size`` bytes, so a row is valid iff its
    length prefix is ``size`` (there is no padding left to check).

    Returns:
        ``(payloads, valid)``: the ``(k, size)`` payload bytes and a mask of valid rows.

    Args:
        rows: A ``(k, padded_size(size))`` ``uint8`` array of padded payloads.
        size: The payload width every valid row states.

    Raises:
        CryptoParameterError: ``rows`` does not have that shape, or ``size`` is out of range.
    """
    size = _check_size(size)
    rows = np.asarray(rows, dtype=np.uint8)
    if rows.ndim != 2 or rows.shape[1] != padded_size(size):
        raise CryptoParameterError(
            f"rows must have shape (k, {padded_size(size)}), got {rows.shape}"
        )
    length = rows[:, 0].astype(np.int64) << 8 | rows[:, 1]
    return rows[:, LENGTH_PREFIX:], length == size
