"""Onion layers: round trips, tampering, misrouting and batches.

Keys and pinned ephemeral secrets come from a seeded Generator so every failure replays;
the public ``wrap_report`` (OS CSPRNG) is exercised by the round trips and batch tests.
"""

from __future__ import annotations

import os
import struct
import warnings
from concurrent.futures.process import BrokenProcessPool

import numpy as np
import pytest
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305
from hypothesis import given, settings
from hypothesis import strategies as st
from nacl import bindings

from crypto import (
    LAYER_OVERHEAD,
    CryptoParameterError,
    InvalidReport,
    LayerPrivateKey,
    _onion,
    ephemeral_key_of,
    pad,
    peel_batch,
    peel_report,
    report_progress,
    report_size,
    wrap_batch,
    wrap_report,
)
from crypto._onion import _MIN_PARALLEL, _wrap_from_parts

from ._weak_keys import LOW_ORDER_X25519

EPOCH = 1234
PAYLOAD_SIZE = 16


def _keys(count: int, seed: int = 0) -> list[LayerPrivateKey]:
    rng = np.random.default_rng(seed)
    return [LayerPrivateKey(rng.bytes(32)) for _ in range(count)]


KEYS = _keys(5)  # hops 0..4
ROUTE = [k.public_key for k in KEYS]


def _pinned(
    payload: bytes, layers: int, *, seed: int = 1, epoch: int = EPOCH, crowd_id: int = 7
) -> bytes:
    rng = np.random.default_rng(seed)
    return _wrap_from_parts(
        payload,
        ROUTE[:layers],
        epoch=epoch,
        crowd_id=crowd_id,
        first_hop=0,
        ephemeral_secrets=[rng.bytes(32) for _ in range(layers)],
    )


def flip_byte(data: bytes, index: int, mask: int = 0xFF) -> bytes:
    """``data`` with byte ``index`` XORed with ``mask`` (non-zero)."""
    assert mask & 0xFF
    out = bytearray(data)
    out[index] ^= mask
    return bytes(out)


def _peel_all(report: bytes, layers: int, *, epoch: int = EPOCH, first_hop: int = 0) -> bytes:
    for j in range(layers):
        _, report = peel_report(report, KEYS[first_hop + j], epoch=epoch, hop=first_hop + j)
    return report


# --------------------------------------------------------------------------- round trips


@pytest.mark.parametrize("layers", [1, 2, 3, 4])
def test_round_trip_through_layers(layers: int) -> None:
    payload = pad(b"secret value", PAYLOAD_SIZE)
    report = wrap_report(payload, ROUTE[:layers], epoch=EPOCH, crowd_id=99)
    assert len(report) == report_size(len(payload), layers)
    for hop in range(layers):
        assert len(report) == report_size(len(payload), layers - hop)
        assert ephemeral_key_of(report) == report[1:33]
        header, report = peel_report(report, KEYS[hop], epoch=EPOCH, hop=hop)
        assert header.crowd_id == 99
    assert report == payload


def test_wrap_uses_fresh_ephemeral_keys() -> None:
    payload = pad(b"x", PAYLOAD_SIZE)
    a = wrap_report(payload, ROUTE[:2], epoch=EPOCH)
    b = wrap_report(payload, ROUTE[:2], epoch=EPOCH)
    assert ephemeral_key_of(a) != ephemeral_key_of(b)
    assert a != b


def test_fake_wrapped_from_a_later_hop() -> None:
    """A shuffler at hop 1 wraps a fake for hops 2..4 only (``first_hop``)."""
    payload = pad(b"fake", PAYLOAD_SIZE)
    report = wrap_report(payload, ROUTE[2:], epoch=EPOCH, first_hop=2)
    assert _peel_all(report, 3, first_hop=2) == payload
    with pytest.raises(InvalidReport):
        peel_report(report, KEYS[2], epoch=EPOCH, hop=0)


@settings(max_examples=40, deadline=None)
@given(
    payload=st.binary(max_size=64),
    epoch=st.integers(0, 2**64 - 1),
    crowd_id=st.integers(0, 2**64 - 1),
    layers=st.integers(1, 3),
    first_hop=st.integers(0, 2),
)
def test_round_trip_hypothesis(
    payload: bytes, epoch: int, crowd_id: int, layers: int, first_hop: int
) -> None:
    route = ROUTE[first_hop : first_hop + layers]
    report = wrap_report(payload, route, epoch=epoch, crowd_id=crowd_id, first_hop=first_hop)
    assert len(report) == len(payload) + layers * LAYER_OVERHEAD
    for j in range(layers):
        hop = first_hop + j
        header, report = peel_report(report, KEYS[hop], epoch=epoch, hop=hop)
        assert header.crowd_id == crowd_id
    assert report == payload


# --------------------------------------------------------------------------- equal lengths


def test_reports_at_one_hop_have_equal_length_whatever_the_payload() -> None:
    payloads = [
        pad(b"", PAYLOAD_SIZE),
        pad(b"a", PAYLOAD_SIZE),
        pad(b"\xff" * PAYLOAD_SIZE, PAYLOAD_SIZE),
        pad(bytes(range(7)), PAYLOAD_SIZE),
    ]
    crowds = [0, 1, 2**63, 2**64 - 1]
    reports = [
        wrap_report(p, ROUTE[:4], epoch=EPOCH, crowd_id=c)
        for p, c in zip(payloads, crowds, strict=True)
    ]
    for hop in range(4):
        assert len({len(r) for r in reports}) == 1, f"lengths differ at hop {hop}"
        reports = [peel_report(r, KEYS[hop], epoch=EPOCH, hop=hop)[1] for r in reports]
    assert reports == payloads


# --------------------------------------------------------------------------- tampering


@pytest.mark.parametrize("layers", [1, 3])
@pytest.mark.parametrize("mask", [0x01, 0x80, 0xFF])
def test_flip_any_byte_raises_invalid_report(layers: int, mask: int) -> None:
    report = _pinned(pad(b"tamper me", PAYLOAD_SIZE), layers)
    peel_report(report, KEYS[0], epoch=EPOCH, hop=0)  # the untampered report peels
    for i in range(len(report)):
        with pytest.raises(InvalidReport):
            peel_report(flip_byte(report, i, mask), KEYS[0], epoch=EPOCH, hop=0)


def test_flip_any_byte_of_inner_layer_raises_at_that_hop() -> None:
    """A hop that tampers with what it forwards is caught by the next hop."""
    _, inner = peel_report(_pinned(pad(b"x", PAYLOAD_SIZE), 3), KEYS[0], epoch=EPOCH, hop=0)
    peel_report(inner, KEYS[1], epoch=EPOCH, hop=1)
    for i in range(len(inner)):
        with pytest.raises(InvalidReport):
            peel_report(flip_byte(inner, i), KEYS[1], epoch=EPOCH, hop=1)


def test_truncated_reports_raise_invalid_report() -> None:
    report = _pinned(pad(b"x", PAYLOAD_SIZE), 2)
    for length in range(len(report)):
        with pytest.raises(InvalidReport):
            peel_report(report[:length], KEYS[0], epoch=EPOCH, hop=0)
    with pytest.raises(InvalidReport):
        ephemeral_key_of(report[: LAYER_OVERHEAD - 1])


@pytest.mark.parametrize("suffix", [b"\x00", b"\x01", bytes(16), b"\xff" * 100])
def test_extended_reports_raise_invalid_report(suffix: bytes) -> None:
    report = _pinned(pad(b"x", PAYLOAD_SIZE), 2)
    with pytest.raises(InvalidReport):
        peel_report(report + suffix, KEYS[0], epoch=EPOCH, hop=0)
    with pytest.raises(InvalidReport):
        peel_report(suffix + report, KEYS[0], epoch=EPOCH, hop=0)


def test_expected_size_mismatch_raises_invalid_report() -> None:
    report = _pinned(pad(b"x", PAYLOAD_SIZE), 2)
    peel_report(report, KEYS[0], epoch=EPOCH, hop=0, expected_size=len(report))
    for size in (len(report) - 1, len(report) + 1, 0):
        with pytest.raises(InvalidReport):
            peel_report(report, KEYS[0], epoch=EPOCH, hop=0, expected_size=size)


def test_wrong_key_raises_invalid_report() -> None:
    report = _pinned(pad(b"x", PAYLOAD_SIZE), 2)
    for key in [KEYS[1], KEYS[4], *_keys(2, seed=99)]:
        with pytest.raises(InvalidReport):
            peel_report(report, key, epoch=EPOCH, hop=0)


@pytest.mark.parametrize("epoch", [0, EPOCH - 1, EPOCH + 1, EPOCH + 2**32, 2**64 - 1])
def test_wrong_epoch_raises_invalid_report(epoch: int) -> None:
    report = _pinned(pad(b"x", PAYLOAD_SIZE), 2)
    with pytest.raises(InvalidReport):
        peel_report(report, KEYS[0], epoch=epoch, hop=0)


@pytest.mark.parametrize("hop", [1, 2, 256, 2**16 - 1])
def test_wrong_hop_raises_invalid_report(hop: int) -> None:
    """The same key at another hop index (a party holding two roles) still refuses it."""
    report = _pinned(pad(b"x", PAYLOAD_SIZE), 2)
    with pytest.raises(InvalidReport):
        peel_report(report, KEYS[0], epoch=EPOCH, hop=hop)


@pytest.mark.parametrize("version", [0, 2, 0x81, 0xFF])
def test_wrong_outer_version_raises_invalid_report(version: int) -> None:
    report = _pinned(pad(b"x", PAYLOAD_SIZE), 2)
    with pytest.raises(InvalidReport):
        peel_report(bytes([version]) + report[1:], KEYS[0], epoch=EPOCH, hop=0)


def _forge_layer(inner_plain: bytes, recipient: LayerPrivateKey, *, epoch: int, hop: int) -> bytes:
    """A layer that authenticates, built by anyone who knows the public key.

    Mirrors the documented construction (tests/vectors/generate.py) so the test can put
    a malformed header under a valid tag.
    """
    import hashlib

    esk = np.random.default_rng(5).bytes(32)
    epk = bindings.crypto_scalarmult_base(esk)
    shared = bindings.crypto_scalarmult(esk, recipient.public_key)
    key = hashlib.blake2b(
        shared + epk + recipient.public_key, digest_size=32, person=b"esa-onion-key-v1"
    ).digest()
    ad = struct.pack(">BQH", 1, epoch, hop) + epk
    return b"\x01" + epk + ChaCha20Poly1305(key).encrypt(bytes(12), inner_plain, ad)


def test_forged_layer_helper_matches_real_layers() -> None:
    """Guard for the next test: a forged layer with a good header does peel."""
    report = _forge_layer(struct.pack(">BQ", 1, 5) + b"abc", KEYS[0], epoch=EPOCH, hop=0)
    header, inner = peel_report(report, KEYS[0], epoch=EPOCH, hop=0)
    assert (header.crowd_id, inner) == (5, b"abc")


@pytest.mark.parametrize("version", [0, 2, 0xFF])
def test_authenticated_layer_with_wrong_header_version_raises_invalid_report(
    version: int,
) -> None:
    report = _forge_layer(struct.pack(">BQ", version, 5) + b"abc", KEYS[0], epoch=EPOCH, hop=0)
    with pytest.raises(InvalidReport):
        peel_report(report, KEYS[0], epoch=EPOCH, hop=0)


@pytest.mark.parametrize("point", LOW_ORDER_X25519, ids=lambda p: p[:4].hex() + p[-1:].hex())
def test_low_order_ephemeral_key_raises_invalid_report(point: bytes) -> None:
    report = _pinned(pad(b"x", PAYLOAD_SIZE), 2)
    forged = report[:1] + point + report[33:]
    with pytest.raises(InvalidReport):
        peel_report(forged, KEYS[0], epoch=EPOCH, hop=0)


@pytest.mark.parametrize("point", LOW_ORDER_X25519[:3])
def test_wrapping_for_a_low_order_route_key_is_refused(point: bytes) -> None:
    with pytest.raises(CryptoParameterError):
        wrap_report(pad(b"x", PAYLOAD_SIZE), [ROUTE[0], point], epoch=EPOCH)


def test_random_garbage_raises_invalid_report() -> None:
    rng = np.random.default_rng(11)
    size = report_size(PAYLOAD_SIZE + 2, 2)
    for _ in range(200):
        garbage = b"\x01" + rng.bytes(size - 1)
        with pytest.raises(InvalidReport):
            peel_report(garbage, KEYS[0], epoch=EPOCH, hop=0)


# --------------------------------------------------------------------------- misuse


def test_wrap_parameter_errors() -> None:
    payload = pad(b"x", PAYLOAD_SIZE)
    with pytest.raises(CryptoParameterError, match="crowd_id"):
        wrap_report(payload, ROUTE[:1], epoch=EPOCH, crowd_id=2**64)
    with pytest.raises(CryptoParameterError, match="crowd_id"):
        wrap_report(payload, ROUTE[:1], epoch=EPOCH, crowd_id=-1)
    with pytest.raises(CryptoParameterError, match="epoch"):
        wrap_report(payload, ROUTE[:1], epoch=-1)
    with pytest.raises(CryptoParameterError, match="epoch"):
        wrap_report(payload, ROUTE[:1], epoch=2**64)
    with pytest.raises(CryptoParameterError, match="hop"):
        wrap_report(payload, ROUTE[:2], epoch=EPOCH, first_hop=2**16 - 1)
    with pytest.raises(CryptoParameterError, match="route key 1"):
        wrap_report(payload, [ROUTE[0], ROUTE[1][:31]], epoch=EPOCH)
    with pytest.raises(CryptoParameterError, match="ephemeral"):
        _wrap_from_parts(
            payload, ROUTE[:2], epoch=EPOCH, crowd_id=0, first_hop=0, ephemeral_secrets=[bytes(32)]
        )


@pytest.mark.parametrize(("epoch", "hop"), [(EPOCH, 2**16), (-1, 0), (2**64, 0)])
def test_peel_report_refuses_out_of_range_epoch_or_hop(epoch: int, hop: int) -> None:
    """Misuse by the caller, not an invalid report: a detailed, typed error."""
    report = _pinned(pad(b"x", PAYLOAD_SIZE), 1)
    with pytest.raises(CryptoParameterError, match="epoch" if hop == 0 else "hop"):
        peel_report(report, KEYS[0], epoch=epoch, hop=hop)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"first_hop": -1}, r"first_hop must be an integer \[0, 65535\], got -1"),
        ({"first_hop": 1.0}, r"first_hop .* got 1\.0"),
        ({"first_hop": None}, r"first_hop .* got None"),
        ({"epoch": 1.0}, r"epoch .* got 1\.0"),
        ({"epoch": None}, r"epoch .* got None"),
        ({"crowd_id": True}, r"crowd_id .* got True"),
        ({"crowd_id": 1.5}, r"crowd_id .* got 1\.5"),
    ],
)
def test_wrap_refuses_non_integer_or_negative_route_fields(
    kwargs: dict[str, object], match: str
) -> None:
    """These once escaped as a bare ``struct.error`` (or were packed as ``True`` = 1)."""
    args: dict[str, object] = {"epoch": EPOCH, "crowd_id": 0, "first_hop": 0, **kwargs}
    with pytest.raises(CryptoParameterError, match=match):
        wrap_report(pad(b"x", PAYLOAD_SIZE), ROUTE[:2], **args)  # type: ignore[arg-type]


@pytest.mark.parametrize(("epoch", "hop"), [(1.0, 0), (EPOCH, 0.5), (None, 0), (EPOCH, True)])
def test_peel_refuses_non_integer_epoch_or_hop(epoch: object, hop: object) -> None:
    report = _pinned(pad(b"x", PAYLOAD_SIZE), 1)
    with pytest.raises(CryptoParameterError, match="must be an integer"):
        peel_report(report, KEYS[0], epoch=epoch, hop=hop)  # type: ignore[arg-type]
    with pytest.raises(CryptoParameterError, match="must be an integer"):
        peel_batch([report], KEYS[0], epoch=epoch, hop=hop)  # type: ignore[arg-type]


def test_route_keys_must_be_bytes() -> None:
    with pytest.raises(CryptoParameterError, match="route key 0"):
        wrap_report(b"x", [bytearray(ROUTE[0])], epoch=EPOCH)  # type: ignore[list-item]
    with pytest.raises(CryptoParameterError, match="route key 0"):
        wrap_report(b"x", ["k" * 32], epoch=EPOCH)  # type: ignore[list-item]


def test_an_empty_wrap_batch_is_validated_like_a_full_one() -> None:
    """Validate at the call, not per report: an empty batch must refuse what one refuses."""
    with pytest.raises(CryptoParameterError, match="at least one hop"):
        wrap_batch([], [], epoch=EPOCH, crowd_ids=[])
    with pytest.raises(CryptoParameterError, match="epoch"):
        wrap_batch([], ROUTE[:2], epoch=-1, crowd_ids=[])
    with pytest.raises(CryptoParameterError, match="first_hop"):
        wrap_batch([], ROUTE[:2], epoch=EPOCH, crowd_ids=[], first_hop=-1)
    assert wrap_batch([], ROUTE[:2], epoch=EPOCH, crowd_ids=[]) == []


def test_ephemeral_key_of_a_non_report_is_invalid() -> None:
    for junk in (None, bytearray(LAYER_OVERHEAD), "x" * LAYER_OVERHEAD, 5):
        with pytest.raises(InvalidReport):
            ephemeral_key_of(junk)  # type: ignore[arg-type]


@pytest.mark.parametrize(("payload", "layers"), [(-100, 1), (10, -1), (1.5, 1), (10, None)])
def test_report_size_refuses_negative_or_non_integer_arguments(
    payload: object, layers: object
) -> None:
    with pytest.raises(CryptoParameterError, match="must be an integer"):
        report_size(payload, layers)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- batches


def _mixed_batch(count: int) -> tuple[list[bytes], set[int], list[bytes]]:
    """``count`` two-layer reports; every 7th is corrupted in some way. Returns payloads."""
    rng = np.random.default_rng(3)
    payloads = [
        pad(rng.bytes(int(rng.integers(0, PAYLOAD_SIZE + 1))), PAYLOAD_SIZE) for _ in range(count)
    ]
    reports = wrap_batch(
        payloads, ROUTE[:2], epoch=EPOCH, crowd_ids=[i % 5 for i in range(count)], workers=1
    )
    bad: set[int] = set()
    for i in range(0, count, 7):
        kind = (i // 7) % 4
        if kind == 0:
            reports[i] = flip_byte(reports[i], int(rng.integers(len(reports[i]))))
        elif kind == 1:
            reports[i] = reports[i][:-1]
        elif kind == 2:
            reports[i] = _pinned(payloads[i], 2, epoch=EPOCH + 1)
        else:
            reports[i] = b""
        bad.add(i)
    return reports, bad, payloads


def test_peel_batch_marks_invalid_reports_and_keeps_the_rest() -> None:
    reports, bad, payloads = _mixed_batch(60)
    out = peel_batch(reports, KEYS[0], epoch=EPOCH, hop=0, workers=1)
    assert len(out) == len(reports)
    assert {i for i, item in enumerate(out) if item is None} == bad
    for i, item in enumerate(out):
        if item is None:
            continue
        crowd, inner = item
        assert crowd == i % 5
        assert peel_report(inner, KEYS[1], epoch=EPOCH, hop=1)[1] == payloads[i]


def test_peel_batch_expected_size_drops_wrong_lengths() -> None:
    reports, _, _ = _mixed_batch(14)
    size = report_size(PAYLOAD_SIZE + 2, 2)
    reports.append(reports[1] + b"\x00")
    out = peel_batch(reports, KEYS[0], epoch=EPOCH, hop=0, expected_size=size)
    assert out[-1] is None
    assert out[1] is not None


@pytest.fixture(scope="module")
def large_batch() -> tuple[list[bytes], set[int], list[bytes]]:
    """Large enough that the process pool really runs (``_MIN_PARALLEL``)."""
    return _mixed_batch(_MIN_PARALLEL + 100)


def test_batches_identical_with_one_and_two_workers(
    large_batch: tuple[list[bytes], set[int], list[bytes]],
) -> None:
    reports, bad, payloads = large_batch
    count = len(reports)
    one = peel_batch(reports, KEYS[0], epoch=EPOCH, hop=0, workers=1)
    two = peel_batch(reports, KEYS[0], epoch=EPOCH, hop=0, workers=2)
    assert one == two
    assert {i for i, item in enumerate(two) if item is None} == bad

    # wrap_batch on two workers: fresh randomness, so compare what peels out of it.
    wrapped = wrap_batch(payloads, ROUTE[:2], epoch=EPOCH, crowd_ids=list(range(count)), workers=2)
    assert len(wrapped) == count
    assert len({len(r) for r in wrapped}) == 1
    first = peel_batch(wrapped, KEYS[0], epoch=EPOCH, hop=0, workers=1)
    assert all(item is not None for item in first)
    assert [item[0] for item in first if item is not None] == list(range(count))
    inner = [item[1] for item in first if item is not None]
    last = peel_batch(inner, KEYS[1], epoch=EPOCH, hop=1, workers=1)
    assert [item[1] for item in last if item is not None] == payloads


def test_batch_parameter_errors() -> None:
    payloads = [pad(b"x", PAYLOAD_SIZE)] * 3
    with pytest.raises(CryptoParameterError, match="crowd id"):
        wrap_batch(payloads, ROUTE[:1], epoch=EPOCH, crowd_ids=[0, 1])
    with pytest.raises(CryptoParameterError, match="workers"):
        wrap_batch(payloads, ROUTE[:1], epoch=EPOCH, crowd_ids=[0, 1, 2], workers=0)
    with pytest.raises(CryptoParameterError, match="workers"):
        peel_batch([], KEYS[0], epoch=EPOCH, hop=0, workers=0)
    with pytest.raises(CryptoParameterError, match="hop"):
        peel_batch([], KEYS[0], epoch=EPOCH, hop=2**16)
    with pytest.raises(CryptoParameterError, match="epoch"):
        peel_batch([], KEYS[0], epoch=-1, hop=0)
    assert peel_batch([], KEYS[0], epoch=EPOCH, hop=0) == []
    assert wrap_batch([], ROUTE[:1], epoch=EPOCH, crowd_ids=[]) == []


def test_pool_is_reused_and_replaced_when_a_worker_dies(
    large_batch: tuple[list[bytes], set[int], list[bytes]],
) -> None:
    """One pool per worker count serves every batch (a fresh pool per batch cost more than
    the batch); a dead worker fails that batch loudly and the next batch gets a new pool."""
    reports = large_batch[0]
    expected = peel_batch(reports, KEYS[0], epoch=EPOCH, hop=0, workers=2)
    pool = _onion._POOLS[2]
    assert peel_batch(reports, KEYS[0], epoch=EPOCH, hop=0, workers=2) == expected
    assert _onion._POOLS[2] is pool
    for process in list(pool._processes.values()):
        process.kill()
        process.join()
    with pytest.raises(BrokenProcessPool):
        peel_batch(reports, KEYS[0], epoch=EPOCH, hop=0, workers=2)
    assert 2 not in _onion._POOLS
    assert peel_batch(reports, KEYS[0], epoch=EPOCH, hop=0, workers=2) == expected
    assert _onion._POOLS[2] is not pool


def test_forked_child_does_not_inherit_pools(
    large_batch: tuple[list[bytes], set[int], list[bytes]],
) -> None:
    peel_batch(large_batch[0], KEYS[0], epoch=EPOCH, hop=0, workers=2)
    assert 2 in _onion._POOLS
    with warnings.catch_warnings():
        # Python >= 3.12 warns about fork() in a threaded process; the child below only
        # inspects module state and exits, so the warned-about deadlock cannot happen.
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:  # child: report through the exit code only
        os._exit(0 if not _onion._POOLS and not _onion._POOLS_LOCK.locked() else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert 2 in _onion._POOLS  # the parent keeps its pool


@pytest.mark.parametrize("workers", [1, 2])
def test_report_progress_counts_every_report_in_order(
    large_batch: tuple[list[bytes], set[int], list[bytes]], workers: int
) -> None:
    """Inside ``report_progress`` both batch functions announce finished reports in chunks;
    outside it nothing is called and the results are the same."""
    reports, _, payloads = large_batch
    many = reports * 8  # more than one progress chunk, in process and on the pool
    steps: list[int] = []
    with report_progress(steps.append):
        peeled = peel_batch(many, KEYS[0], epoch=EPOCH, hop=0, workers=workers)
    assert sum(steps) == len(many)
    assert len(steps) >= 2
    assert all(k > 0 for k in steps)
    assert peeled == peel_batch(many, KEYS[0], epoch=EPOCH, hop=0, workers=workers)
    steps.clear()
    with report_progress(steps.append):
        wrapped = wrap_batch(
            payloads, ROUTE[:1], epoch=EPOCH, crowd_ids=[0] * len(payloads), workers=workers
        )
    assert sum(steps) == len(payloads) == len(wrapped)
    steps.clear()
    peel_batch(reports, KEYS[0], epoch=EPOCH, hop=0, workers=workers)  # hook gone
    assert steps == []


def test_a_batch_stopped_by_its_progress_hook_drops_its_queued_slices(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A party shutting down stops a batch by raising from the progress hook. Slices still
    queued on the pool must not run (before, the interpreter's exit waited for them all:
    9.5 s of a 40 000-report epoch at workers = 2); at most the running ones finish."""
    import threading
    import time
    from concurrent.futures import ThreadPoolExecutor

    ran: list[int] = []
    lock = threading.Lock()

    def slow(i: int) -> list[int]:
        time.sleep(0.02)
        with lock:
            ran.append(i)
        return [i]

    class Stop(Exception):
        pass

    def hook(_: int) -> None:
        raise Stop

    pool = ThreadPoolExecutor(1)  # stands in for the process pool: same futures
    monkeypatch.setattr(_onion, "process_pool", lambda workers, **_: pool)
    with pytest.raises(Stop):
        _onion._run_on_pool(2, slow, [(i,) for i in range(50)], hook)
    pool.shutdown(wait=True)
    assert len(ran) <= 2  # the first slice, and one that may have started meanwhile
