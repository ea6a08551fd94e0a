"""Fixed-size padding: round trips, strict parsing (opaque errors), misuse errors."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crypto import (
    CryptoParameterError,
    InvalidReport,
    pad,
    pad_rows,
    padded_size,
    unpad,
    unpad_rows,
)
from crypto._padding import MAX_PAYLOAD


@st.composite
def _payload_and_size(draw: st.DrawFn) -> tuple[bytes, int]:
    payload = draw(st.binary(max_size=300))
    size = len(payload) + draw(st.integers(0, 300))
    return payload, size


@settings(max_examples=200, deadline=None)
@given(_payload_and_size())
def test_pad_unpad_round_trip(case: tuple[bytes, int]) -> None:
    payload, size = case
    padded = pad(payload, size)
    assert len(padded) == padded_size(size) == size + 2
    assert int.from_bytes(padded[:2], "big") == len(payload)
    assert unpad(padded, size) == payload


@settings(max_examples=100, deadline=None)
@given(
    k=st.integers(0, 20),
    width=st.integers(0, 40),
    extra=st.integers(0, 40),
    seed=st.integers(0, 2**32 - 1),
)
def test_pad_rows_matches_pad(k: int, width: int, extra: int, seed: int) -> None:
    rows = np.random.default_rng(seed).integers(0, 256, size=(k, width), dtype=np.uint8)
    size = width + extra
    out = pad_rows(rows, size)
    assert out.dtype == np.uint8
    assert out.shape == (k, padded_size(size))
    for row, padded in zip(rows, out, strict=True):
        assert padded.tobytes() == pad(row.tobytes(), size)
        assert unpad(padded.tobytes(), size) == row.tobytes()


def test_pad_rows_length_prefix_is_big_endian_above_255() -> None:
    rows = np.ones((2, 258), dtype=np.uint8)
    out = pad_rows(rows, 300)
    assert out[:, :2].tolist() == [[1, 2], [1, 2]]


@pytest.mark.parametrize("size", [1, 5, 64])
def test_non_zero_padding_byte_raises_invalid_report(size: int) -> None:
    payload = b"\x07" * (size - 1)
    padded = pad(payload, size)
    assert unpad(padded, size) == payload
    for i in range(2 + len(payload), len(padded)):
        for value in (1, 0x80, 0xFF):
            bad = bytearray(padded)
            bad[i] = value
            with pytest.raises(InvalidReport):
                unpad(bytes(bad), size)


@pytest.mark.parametrize("length", [9, 10, 0x100, 0xFFFF])
def test_length_prefix_beyond_size_raises_invalid_report(length: int) -> None:
    padded = length.to_bytes(2, "big") + bytes(8)
    with pytest.raises(InvalidReport):
        unpad(padded, 8)


def test_length_prefix_shorter_than_payload_raises_invalid_report() -> None:
    """The payload's non-zero bytes then count as padding, which must be zero."""
    padded = pad(b"abcd", 8)
    for length in range(4):
        with pytest.raises(InvalidReport):
            unpad(length.to_bytes(2, "big") + padded[2:], 8)


@pytest.mark.parametrize("delta", [-3, -1, 1, 2])
def test_wrong_total_size_raises_invalid_report(delta: int) -> None:
    padded = pad(b"abc", 8)
    resized = padded[: len(padded) + delta] if delta < 0 else padded + bytes(delta)
    with pytest.raises(InvalidReport):
        unpad(resized, 8)
    with pytest.raises(InvalidReport):
        unpad(padded, 8 + delta)


def test_unpad_of_empty_or_tiny_input_raises_invalid_report() -> None:
    for data in (b"", b"\x00"):
        with pytest.raises(InvalidReport):
            unpad(data, 0)
    assert unpad(b"\x00\x00", 0) == b""


def test_oversize_payload_raises_parameter_error() -> None:
    with pytest.raises(CryptoParameterError, match="exceeds pad size 4"):
        pad(b"12345", 4)
    with pytest.raises(CryptoParameterError, match="exceeds pad size"):
        pad_rows(np.zeros((3, 5), dtype=np.uint8), 4)


@pytest.mark.parametrize("size", [-1, MAX_PAYLOAD + 1, 2**20])
def test_pad_size_out_of_range_raises_parameter_error(size: int) -> None:
    with pytest.raises(CryptoParameterError):
        pad(b"", size)
    with pytest.raises(CryptoParameterError):
        pad_rows(np.zeros((1, 0), dtype=np.uint8), size)


def test_pad_rows_names_the_bound_it_refuses() -> None:
    """The refusal said "payload width 3 exceeds pad size 70000", of a size that fits it."""
    with pytest.raises(CryptoParameterError, match=rf"\[0, {MAX_PAYLOAD}\], got 70000"):
        pad_rows(np.zeros((2, 3), dtype=np.uint8), 70_000)


@pytest.mark.parametrize("size", [2.0, 2.5, True, None, "4"])
def test_pad_size_must_be_an_integer(size: object) -> None:
    """``unpad(b"\\0" * 4, 2.0)`` once returned ``b""``; ``pad(..., 2.5)`` a TypeError."""
    for call in (
        lambda: pad(b"ab", size),  # type: ignore[arg-type]
        lambda: unpad(b"\x00" * 4, size),  # type: ignore[arg-type]
        lambda: pad_rows(np.zeros((1, 0), dtype=np.uint8), size),  # type: ignore[arg-type]
        lambda: unpad_rows(np.zeros((1, 4), dtype=np.uint8), size),  # type: ignore[arg-type]
        lambda: padded_size(size),  # type: ignore[arg-type]
    ):
        with pytest.raises(CryptoParameterError, match="pad size must be an integer"):
            call()


def test_unpad_rows_refuses_a_size_the_prefix_cannot_state() -> None:
    with pytest.raises(CryptoParameterError, match=str(MAX_PAYLOAD)):
        unpad_rows(np.zeros((1, MAX_PAYLOAD + 3), dtype=np.uint8), MAX_PAYLOAD + 1)


@pytest.mark.parametrize("junk", [None, bytearray(6), "\x00" * 6, 6])
def test_unpad_of_a_non_bytes_value_is_invalid(junk: object) -> None:
    with pytest.raises(InvalidReport):
        unpad(junk, 4)  # type: ignore[arg-type]


def test_pad_rows_refuses_non_2d_input() -> None:
    with pytest.raises(CryptoParameterError, match="2-D"):
        pad_rows(np.zeros(4, dtype=np.uint8), 8)
    with pytest.raises(CryptoParameterError, match="2-D"):
        pad_rows(np.zeros((1, 2, 3), dtype=np.uint8), 8)


def test_max_payload_round_trip() -> None:
    payload = b"\xaa" * MAX_PAYLOAD
    assert unpad(pad(payload, MAX_PAYLOAD), MAX_PAYLOAD) == payload


def test_unpad_rows_accepts_full_width_payloads_only() -> None:
    """Honest protocol payloads fill the pad size exactly, so a row is valid iff its length
    prefix equals ``size``; every valid row also passes the strict scalar :func:`unpad`."""
    size = 6
    rng = np.random.default_rng(8)
    rows = pad_rows(rng.integers(0, 256, size=(50, size), dtype=np.uint8), size)
    rows[10] = np.frombuffer(pad(b"abc", size), dtype=np.uint8)  # shorter payload
    rows[11, :2] = [0, size + 1]  # prefix beyond size
    rows[12, :2] = [1, size]  # high byte set: prefix 256 + size
    payloads, valid = unpad_rows(rows, size)
    assert payloads.shape == (50, size)
    assert valid.dtype == np.bool_
    assert np.flatnonzero(~valid).tolist() == [10, 11, 12]
    for row, payload, ok in zip(rows, payloads, valid, strict=True):
        if ok:
            assert unpad(row.tobytes(), size) == payload.tobytes()
    for i in (11, 12):
        with pytest.raises(InvalidReport):
            unpad(rows[i].tobytes(), size)


@pytest.mark.parametrize("shape", [(3, 7), (3, 9), (8,), (1, 2, 8)])
def test_unpad_rows_refuses_wrong_shape(shape: tuple[int, ...]) -> None:
    with pytest.raises(CryptoParameterError, match="shape"):
        unpad_rows(np.zeros(shape, dtype=np.uint8), 6)
