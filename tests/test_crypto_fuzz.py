"""Fuzzing every parser of :mod:`crypto` with hostile bytes.

The contract under test (docs/design.md, "Errors" and "Wire formats"): untrusted bytes fail with
the documented typed error — :class:`~esa.WireError` for frames, the opaque
:class:`~crypto.InvalidReport` for reports and padding, :class:`~crypto.InvalidKey` for key
files — and nothing else; an accepted input is the canonical encoding of what it parses to;
signatures and AEAD tags bind every byte.

Inputs are valid encodings under random damage (bit flips, truncations, extensions, length
fields at 0, 1 and their maximum) as well as plain random bytes. Hypothesis runs
``derandomize=True``, so every run draws the same examples.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from crypto import (
    CryptoParameterError,
    InvalidKey,
    InvalidReport,
    KeyDirectory,
    LayerPrivateKey,
    PartyKeys,
    PartyPublic,
    combine_shares,
    pad,
    pad_rows,
    padded_size,
    peel_batch,
    peel_report,
    report_size,
    split_mix,
    unpad,
    unpad_rows,
    wrap_report,
)
from crypto._onion import _wrap_from_parts
from crypto._splitmix import MAX_MODULUS
from esa.net import _wire as w

FUZZ = settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)

# --------------------------------------------------------------------------- mutations


def _mutations(max_len: int) -> st.SearchStrategy[list[tuple[str, int, int]]]:
    """A short list of (operation, position, argument) edits, applied in order."""
    edit = st.tuples(
        st.sampled_from(["flip", "truncate", "extend", "field", "byte"]),
        st.integers(0, max_len),
        st.integers(0, 2**64 - 1),
    )
    return st.lists(edit, min_size=1, max_size=3)


def _mutate(data: bytes, edits: list[tuple[str, int, int]]) -> bytes:
    """``data`` after ``edits``. ``field`` overwrites a 1/2/4/8-byte big-endian field at the
    position with 0, 1, its maximum or its half — the extremes length checks get wrong."""
    out = bytearray(data)
    for op, pos, arg in edits:
        if op == "flip" and out:
            out[pos % len(out)] ^= 1 << (arg % 8)
        elif op == "truncate":
            del out[pos % (len(out) + 1) :]
        elif op == "extend":
            out += arg.to_bytes(8, "big")[: 1 + arg % 8]
        elif op == "byte" and out:
            out[pos % len(out)] = arg % 256
        elif op == "field" and out:
            width = (1, 2, 4, 8)[arg % 4]
            value = (0, 1, 2 ** (8 * width) - 1, 2 ** (8 * width - 1))[(arg >> 2) % 4]
            start = pos % len(out)
            out[start : start + width] = value.to_bytes(width, "big")[: len(out) - start]
    return bytes(out)


# --------------------------------------------------------------------------- wire frames

SIGNER = Ed25519PrivateKey.from_private_bytes(bytes(range(7, 39)))
VERIFY = SIGNER.public_key()
BATCH_ID = bytes(range(32))


def _statement(hop: int) -> w.CountStatement:
    return w.CountStatement(hop, 3, 9, BATCH_ID, 10, 1, 0, 2, 3, 10).signed_by(SIGNER)


FRAMES: dict[str, bytes] = {
    "submit": w.SubmitFrame(5, (b"abcd", b"efgh", b"ijkl")).to_bytes(),
    "ack": w.Ack(4, 1).to_bytes(),
    "reject": w.Reject(w.RejectReason.WRONG_HOP, "wrong hop — ünïcode").to_bytes(),
    "batch": w.BatchChunk(0, 1, 3, 9, BATCH_ID, 1, 3, (b"r1r1r1", b"r2r2r2")).sign(SIGNER),
    "empty_batch": w.BatchChunk(1, 2, 3, 9, BATCH_ID, 0, 1, ()).sign(SIGNER),
    "counts": w.CountsFrame((_statement(0), _statement(1))).to_bytes(),
    "control": w.ControlFrame(w.ControlCommand.CLOSE_EPOCH, 77).sign(SIGNER),
    "control_at": w.ControlFrame(w.ControlCommand.CLOSE_EPOCH_AT, 77, 12).sign(SIGNER),
    "query": w.Query(w.QueryKind.RESULT, b'{"epoch": 3}').to_bytes(),
    "reply": w.Reply(b'{"ok": true}').to_bytes(),
}
_MAX_FRAME = max(len(f) for f in FRAMES.values())

# Every entry point that reads bytes from the network.
_PARSERS: dict[str, Callable[[bytes], object]] = {
    "peek_kind": w.peek_kind,
    "parse_submit": w.parse_submit,
    "parse_ack": w.parse_ack,
    "parse_reject": w.parse_reject,
    "parse_query": w.parse_query,
    "parse_reply": w.parse_reply,
    "reports_header": w.reports_header,
    "unverified_key_epoch": w.unverified_key_epoch,
    "verify_batch": lambda p: w.verify_batch(p, VERIFY),
    "verify_control": lambda p: w.verify_control(p, VERIFY),
    "verify_counts": lambda p: w.verify_counts(p, [VERIFY, VERIFY]),
    "frame_length": lambda p: w.frame_length(p[: w.FRAME_HEADER_SIZE]),
}

# Unsigned kinds parse to a value whose encoding must be the input itself.
_ENCODE: dict[str, Callable[[Any], bytes]] = {
    "parse_submit": lambda f: f.to_bytes(),
    "parse_ack": lambda f: f.to_bytes(),
    "parse_reject": lambda f: f.to_bytes(),
    "parse_query": lambda f: f.to_bytes(),
    "parse_reply": lambda f: f.to_bytes(),
    "verify_counts": lambda f: f.to_bytes(),
}
_SIGNED = {"verify_batch", "verify_control", "verify_counts"}


def _check_every_parser(payload: bytes, original: bytes | None) -> None:
    for name, parse in _PARSERS.items():
        try:
            value = parse(payload)
        except w.WireError:
            continue
        if name in _ENCODE:
            assert _ENCODE[name](value) == payload, name
        if name in _SIGNED and original is not None:
            # every byte is under the signature: only the untouched frame verifies
            assert payload == original, name


def test_every_sample_frame_parses() -> None:
    """Guard: the fuzz starts from frames the parsers accept."""
    for name, frame in FRAMES.items():
        kind = w.peek_kind(frame)
        assert kind.name.lower() == name.split("_")[-1 if name == "empty_batch" else 0], name
    assert w.verify_batch(FRAMES["batch"], VERIFY).reports == (b"r1r1r1", b"r2r2r2")
    assert w.verify_control(FRAMES["control_at"], VERIFY).epoch == 12
    assert len(w.verify_counts(FRAMES["counts"], [VERIFY, VERIFY]).statements) == 2


@FUZZ
@given(name=st.sampled_from(sorted(FRAMES)), edits=_mutations(_MAX_FRAME + 16))
def test_damaged_frames_fail_typed_and_never_verify(
    name: str, edits: list[tuple[str, int, int]]
) -> None:
    original = FRAMES[name]
    _check_every_parser(_mutate(original, edits), original)


@FUZZ
@given(
    kind=st.sampled_from(list(w.FrameKind)),
    body=st.binary(max_size=160),
)
def test_random_bodies_behind_a_valid_prefix_fail_typed(kind: w.FrameKind, body: bytes) -> None:
    """Past the version and kind bytes, every parser meets random field values."""
    _check_every_parser(bytes([w.WIRE_VERSION, kind]) + body, None)


@pytest.mark.parametrize(
    ("count", "size"),
    [(0, 0), (0, 1), (1, 0), (1, 2**32 - 1), (2**32 - 1, 1), (2**32 - 1, 2**32 - 1), (2, 2**31)],
)
def test_length_fields_at_their_extremes_are_malformed(count: int, size: int) -> None:
    """SUBMIT and BATCH headers whose count × size (up to near 2^64) disagrees with an
    8-byte body: refused from the header alone, before anything is split or allocated."""
    submit = bytes([1, w.FrameKind.SUBMIT]) + (5).to_bytes(4, "big")
    submit += count.to_bytes(4, "big") + size.to_bytes(4, "big") + b"x" * 8
    with pytest.raises(w.MalformedFrame):
        w.parse_submit(submit)
    with pytest.raises(w.MalformedFrame):
        w.reports_header(submit)
    head = bytes([1, w.FrameKind.BATCH, 0, 1]) + (3).to_bytes(4, "big") + (9).to_bytes(8, "big")
    head += BATCH_ID + (0).to_bytes(4, "big") + (1).to_bytes(4, "big")
    batch = head + count.to_bytes(4, "big") + size.to_bytes(4, "big") + b"x" * 8 + bytes(64)
    for parse in (w.reports_header, w.unverified_key_epoch):
        with pytest.raises(w.MalformedFrame):
            parse(batch)
    with pytest.raises(w.BadSignature):  # authenticated before its fields are read
        w.verify_batch(batch, VERIFY)


# --------------------------------------------------------------------------- onion reports

EPOCH = 77
PAYLOAD = 12
_KEYS = [LayerPrivateKey(np.random.default_rng(40 + i).bytes(32)) for i in range(3)]
_ROUTE = [k.public_key for k in _KEYS]
_REPORT = _wrap_from_parts(
    pad(b"payload", PAYLOAD),
    _ROUTE,
    epoch=EPOCH,
    crowd_id=5,
    first_hop=0,
    ephemeral_secrets=[np.random.default_rng(60 + i).bytes(32) for i in range(3)],
)


def test_the_sample_report_peels() -> None:
    report = _REPORT
    for hop, key in enumerate(_KEYS):
        header, report = peel_report(report, key, epoch=EPOCH, hop=hop)
        assert header.crowd_id == 5
    assert unpad(report, PAYLOAD) == b"payload"


@FUZZ
@given(edits=_mutations(len(_REPORT) + 16))
def test_damaged_reports_are_opaquely_invalid(edits: list[tuple[str, int, int]]) -> None:
    damaged = _mutate(_REPORT, edits)
    if damaged == _REPORT:
        return
    with pytest.raises(InvalidReport) as info:
        peel_report(damaged, _KEYS[0], epoch=EPOCH, hop=0)
    assert str(info.value) == ""  # opaque: no reason given
    assert peel_batch([damaged], _KEYS[0], epoch=EPOCH, hop=0) == [None]


@FUZZ
@given(body=st.binary(min_size=len(_REPORT) - 1, max_size=len(_REPORT) - 1))
def test_random_reports_of_the_right_size_and_version_are_invalid(body: bytes) -> None:
    with pytest.raises(InvalidReport):
        peel_report(b"\x01" + body, _KEYS[0], epoch=EPOCH, hop=0, expected_size=len(_REPORT))


def test_a_layer_is_bound_to_its_hop_and_epoch_even_under_one_key() -> None:
    """Replays across hops or epochs: the same key pair at every hop, so only the AD
    (version ‖ epoch ‖ hop ‖ epk) can tell them apart. Only the (hop, epoch) it was made
    for opens a layer."""
    key = _KEYS[0]
    epochs = [0, 1, EPOCH, 2**32, 2**64 - 1]
    hops = [0, 1, 2, 255, 2**16 - 1]
    for made_epoch in epochs:
        for made_hop in hops:
            report = wrap_report(b"z" * 4, [key.public_key], epoch=made_epoch, first_hop=made_hop)
            for epoch in epochs:
                for hop in hops:
                    if (epoch, hop) == (made_epoch, made_hop):
                        assert peel_report(report, key, epoch=epoch, hop=hop)[1] == b"z" * 4
                    else:
                        with pytest.raises(InvalidReport):
                            peel_report(report, key, epoch=epoch, hop=hop)


def test_inner_layers_cannot_be_replayed_at_an_earlier_hop() -> None:
    """A hop that peels a report cannot feed the inner layer back to itself or before."""
    inner = peel_report(_REPORT, _KEYS[0], epoch=EPOCH, hop=0)[1]
    for hop, key in enumerate(_KEYS):
        if hop != 1:
            with pytest.raises(InvalidReport):
                peel_report(inner, key, epoch=EPOCH, hop=hop)
            with pytest.raises(InvalidReport):
                peel_report(inner, _KEYS[1], epoch=EPOCH, hop=hop)


@FUZZ
@given(
    items=st.lists(
        st.one_of(
            st.binary(max_size=3 * len(_REPORT)),
            st.none(),
            st.integers(),
            st.text(max_size=8),
            st.builds(bytearray, st.binary(max_size=8)),
        ),
        max_size=8,
    )
)
def test_peel_batch_survives_any_batch(items: list[object]) -> None:
    """A batch holding anything at all: every item is marked invalid, none crashes it."""
    out = peel_batch([*items, _REPORT], _KEYS[0], epoch=EPOCH, hop=0)  # type: ignore[list-item]
    assert out[:-1] == [None] * len(items)
    assert out[-1] is not None


def test_every_report_at_one_hop_has_one_length() -> None:
    """Client reports and a later hop's fakes alike, whatever their payload bytes."""
    payloads = [pad(bytes([i]) * (i % (PAYLOAD + 1)), PAYLOAD) for i in range(20)]
    for first_hop in range(3):
        route = _ROUTE[first_hop:]
        sizes = {
            len(wrap_report(p, route, epoch=EPOCH, first_hop=first_hop, crowd_id=i))
            for i, p in enumerate(payloads)
        }
        assert sizes == {report_size(padded_size(PAYLOAD), len(route))}


# --------------------------------------------------------------------------- padding


@FUZZ
@given(size=st.integers(0, 40), data=st.binary(max_size=44))
def test_unpad_accepts_only_the_canonical_padding(size: int, data: bytes) -> None:
    try:
        payload = unpad(data, size)
    except InvalidReport:
        return
    assert pad(payload, size) == data


@FUZZ
@given(size=st.integers(0, 12), seed=st.integers(0, 2**32 - 1), damage=st.booleans())
def test_unpad_rows_agrees_with_strict_unpad_on_full_width_rows(
    size: int, seed: int, damage: bool
) -> None:
    rng = np.random.default_rng(seed)
    rows = pad_rows(rng.integers(0, 256, size=(6, size), dtype=np.uint8), size)
    if damage:  # random prefixes (mostly wrong) on half the rows
        rows[::2, :2] = rng.integers(0, 256, size=(3, 2), dtype=np.uint8)
    payloads, valid = unpad_rows(rows, size)
    for row, payload, ok in zip(rows, payloads, valid, strict=True):
        try:
            strict = unpad(row.tobytes(), size)
        except InvalidReport:
            strict = None
        # unpad_rows accepts exactly the strict-valid rows that carry a full-width payload
        assert ok == (strict is not None and len(strict) == size)
        if ok:
            assert payload.tobytes() == strict


# --------------------------------------------------------------------------- Split-Mix

_EDGE_MODULI = [2, 3, 2**31 - 1, 2**31, 2**31 + 1, 2**53 + 1, MAX_MODULUS - 1, MAX_MODULUS]


@FUZZ
@given(
    q=st.one_of(st.sampled_from(_EDGE_MODULI), st.integers(2, MAX_MODULUS)),
    m=st.integers(2, 6),
    data=st.data(),
)
def test_split_mix_recombines_at_every_modulus(q: int, m: int, data: st.DataObject) -> None:
    values = data.draw(st.lists(st.integers(0, q - 1), min_size=1, max_size=8))
    for modulus in (q, np.int64(q), np.uint64(q)):
        shares = split_mix(np.array(values, dtype=np.int64), modulus=modulus, shares=m)  # type: ignore[arg-type]
        assert all(0 <= s < q for s in shares.ravel().tolist())
        assert [sum(row) % q for row in shares.tolist()] == values
        assert combine_shares(shares, modulus=modulus) == sum(values) % q  # type: ignore[arg-type]


@FUZZ
@given(
    q=st.one_of(st.sampled_from(_EDGE_MODULI), st.integers(2, MAX_MODULUS)),
    bad=st.sampled_from(["q", "q+1", "-1", "2^63-1", "uint64-max"]),
)
def test_split_mix_refuses_values_outside_z_q(q: int, bad: str) -> None:
    value = {
        "q": q,
        "q+1": q + 1,
        "-1": -1,
        "2^63-1": 2**63 - 1,
        "uint64-max": 2**64 - 1,
    }[bad]
    dtype = np.uint64 if value >= 2**63 else np.int64
    with pytest.raises(CryptoParameterError, match=f"got {value}"):
        split_mix(np.array([0, value], dtype=dtype), modulus=q, shares=2)


# --------------------------------------------------------------------------- keys


@FUZZ
@given(layer=st.binary(min_size=32, max_size=32), verify=st.binary(min_size=32, max_size=32))
def test_random_public_keys_are_accepted_or_invalid(layer: bytes, verify: bytes) -> None:
    with contextlib.suppress(InvalidKey):
        PartyPublic("analyzer", layer, verify)


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=70),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=12,
)


def _public_doc(draw_party: dict[str, Any] | None = None) -> dict[str, Any]:
    parties = [
        {"name": name, "x25519": p.layer_public.hex(), "ed25519": p.verify_public.hex()}
        for name, p in ((n, PartyKeys.generate(n).public()) for n in ("shuffler-1", "analyzer"))
    ]
    if draw_party is not None:
        parties[0] = draw_party
    return {"version": 1, "parties": parties}


@settings(FUZZ, max_examples=60)
@given(
    doc=st.one_of(
        _JSON,
        st.builds(
            _public_doc, st.dictionaries(st.sampled_from(["name", "x25519", "ed25519"]), _JSON)
        ),
    ),
    raw=st.binary(max_size=60),
)
def test_any_public_json_loads_or_is_invalid_key(tmp_path: Path, doc: object, raw: bytes) -> None:
    for content in (json.dumps(doc).encode(), raw):
        (tmp_path / "public.json").write_bytes(content)
        with contextlib.suppress(InvalidKey):
            KeyDirectory.load(tmp_path)


@pytest.fixture(scope="module")
def keydir_once(tmp_path_factory: pytest.TempPathFactory) -> KeyDirectory:
    return KeyDirectory.create(tmp_path_factory.mktemp("keys"), shufflers=1)


@settings(FUZZ, max_examples=80)
@given(edits=_mutations(200))
def test_damaged_private_key_files_are_invalid_key_and_not_echoed(
    keydir_once: KeyDirectory, edits: list[tuple[str, int, int]]
) -> None:
    path = keydir_once.path / "shuffler-1.key"
    original = path.read_bytes()
    secret = json.loads(original)["x25519"]
    message = None
    try:
        path.write_bytes(_mutate(original, edits))
        try:
            keys = keydir_once.private("shuffler-1")
        except InvalidKey as exc:
            message = str(exc)
        else:
            assert keys.public() == keydir_once.public("shuffler-1")
    finally:
        path.write_bytes(original)
    if message is not None:
        assert secret[:16] not in message
