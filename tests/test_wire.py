"""The wire format: known-answer vectors, round trips, tampering, hostile lengths.

Regenerate the vectors (only when the format version changes) with
``python -m tests.test_wire > simulations/conformance/vectors/wire.json``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import struct
from pathlib import Path
from typing import Any

import pytest
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from hypothesis import given, settings
from hypothesis import strategies as st

from crypto import CryptoParameterError
from esa.net import _wire as w

from ._weak_keys import SMALL_ORDER_ED25519

VECTORS = Path(__file__).parent.parent / "simulations" / "conformance" / "vectors" / "wire.json"

# Ed25519 signing is deterministic (RFC 8032), so fixed seeds give fixed signatures.
SENDER = Ed25519PrivateKey.from_private_bytes(bytes(range(32)))
OPERATOR = Ed25519PrivateKey.from_private_bytes(bytes(range(32, 64)))
OTHER = Ed25519PrivateKey.from_private_bytes(bytes(range(64, 96)))


def _chunk() -> w.BatchChunk:
    return w.BatchChunk(
        sender_hop=0,
        receiver_hop=1,
        key_epoch=7,
        epoch=3,
        batch_id=bytes(range(100, 132)),
        chunk_index=1,
        chunk_count=2,
        reports=(b"\x01\x02\x03", b"\xaa\xbb\xcc"),
    )


def _statement(hop: int, key: Ed25519PrivateKey) -> w.CountStatement:
    """Hop 0 signs a noisy threshold (T = 5, ε_t = 0.5), every other hop none."""
    return w.CountStatement(
        hop=hop,
        key_epoch=7,
        epoch=3,
        batch_id=bytes(range(100, 132)),
        received=10,
        invalid=1,
        replayed=2,
        held=0,
        fakes_added=3,
        forwarded=10,
        threshold=5 if hop == 0 else 0,
        threshold_epsilon=0.5 if hop == 0 else None,
    ).signed_by(key)


def _control(command: w.ControlCommand, epoch: int = 0) -> w.ControlFrame:
    return w.ControlFrame(
        command,
        1234567,
        epoch,
        target="shuffler-1",
        deployment_id=bytes(range(16)),
        nonce=bytes(16),
    )


def build_vectors() -> dict[str, Any]:
    """Every frame kind, encoded from fixed inputs and fixed keys."""
    return {
        "keys": {
            "sender_seed": bytes(range(32)).hex(),
            "operator_seed": bytes(range(32, 64)).hex(),
        },
        "frames": {
            "submit": w.SubmitFrame(7, (b"ab", b"cd", b"ef")).to_bytes().hex(),
            "ack": w.Ack(3, 1).to_bytes().hex(),
            "reject": w.Reject(w.RejectReason.WRONG_HOP, "hop 2").to_bytes().hex(),
            "batch": _chunk().sign(SENDER).hex(),
            "counts": w.CountsFrame((_statement(0, SENDER), _statement(1, OPERATOR)))
            .to_bytes()
            .hex(),
            "control": _control(w.ControlCommand.CLOSE_EPOCH).sign(OPERATOR).hex(),
            "control_at": _control(w.ControlCommand.CLOSE_EPOCH_AT, 42).sign(OPERATOR).hex(),
            "query": w.Query(w.QueryKind.RESULT, b'{"n":5}').to_bytes().hex(),
            "reply": w.Reply(b'{"ok":true}').to_bytes().hex(),
            "framed_ack": w.encode_frame(w.Ack(3, 1).to_bytes()).hex(),
        },
    }


def test_known_answer_vectors() -> None:
    stored = json.loads(VECTORS.read_text())
    assert stored == build_vectors()


def test_vectors_parse_back() -> None:
    frames = {k: bytes.fromhex(v) for k, v in json.loads(VECTORS.read_text())["frames"].items()}
    sub = w.parse_submit(frames["submit"])
    assert sub == w.SubmitFrame(7, (b"ab", b"cd", b"ef"))
    assert w.parse_ack(frames["ack"]) == w.Ack(3, 1)
    assert w.parse_reject(frames["reject"]) == w.Reject(w.RejectReason.WRONG_HOP, "hop 2")
    assert w.verify_batch(frames["batch"], SENDER.public_key()) == _chunk()
    counts = w.verify_counts(frames["counts"], [SENDER.public_key(), OPERATOR.public_key()])
    assert [s.hop for s in counts.statements] == [0, 1]
    assert all(s.consistent for s in counts.statements)
    assert [(s.threshold, s.threshold_epsilon) for s in counts.statements] == [(5, 0.5), (0, None)]
    ctl = w.verify_control(frames["control"], OPERATOR.public_key())
    assert ctl == _control(w.ControlCommand.CLOSE_EPOCH)
    ctl = w.verify_control(frames["control_at"], OPERATOR.public_key())
    assert ctl == _control(w.ControlCommand.CLOSE_EPOCH_AT, 42)
    assert (ctl.target, ctl.deployment_id, ctl.nonce) == ("shuffler-1", bytes(range(16)), bytes(16))
    # The kinds whose layout changed: CONTROL (its version byte) and COUNTS' statements
    # (which gained the signed crowd rule; their signing context says v2).
    assert frames["control"][0] == w.CONTROL_VERSION == 2
    assert w.parse_query(frames["query"]) == w.Query(w.QueryKind.RESULT, b'{"n":5}')
    assert w.parse_reply(frames["reply"]).body == b'{"ok":true}'
    assert w.frame_length(frames["framed_ack"][:4]) == len(frames["ack"])


def flip_byte(data: bytes, index: int) -> bytes:
    out = bytearray(data)
    out[index] ^= 0x01
    return bytes(out)


@pytest.mark.parametrize("index", [0, 1, 2, 5, 20, 60, 70, -1, -40])
def test_flip_byte_in_batch_is_rejected(index: int) -> None:
    payload = _chunk().sign(SENDER)
    with pytest.raises(w.WireError):
        w.verify_batch(flip_byte(payload, index), SENDER.public_key())


def test_batch_signature_checks() -> None:
    payload = _chunk().sign(SENDER)
    with pytest.raises(w.BadSignature):
        w.verify_batch(payload, OTHER.public_key())  # wrong signer
    with pytest.raises(w.BadSignature):
        w.verify_batch(payload[:-64] + bytes(64), SENDER.public_key())  # zeroed signature
    with pytest.raises(w.WireError):  # signature missing altogether
        w.verify_batch(payload[:-64], SENDER.public_key())
    assert w.BadSignature.reason == "bad_signature"


def test_signature_context_separates_kinds() -> None:
    # A count statement's signature must not verify as a control frame signature etc.
    ctl = w.ControlFrame(w.ControlCommand.CLOSE_EPOCH, 5)
    sig = SENDER.sign(ctl.signed_bytes())  # no context: must fail
    with pytest.raises(w.BadSignature):
        w.verify_control(ctl.signed_bytes() + sig, SENDER.public_key())


def test_counts_tampering_and_consistency() -> None:
    frame = w.CountsFrame((_statement(0, SENDER),))
    raw = frame.to_bytes()
    with pytest.raises(w.BadSignature):
        w.verify_counts(flip_byte(raw, 10), [SENDER.public_key()])
    with pytest.raises(w.BadSignature):  # statement for a hop with no key
        w.verify_counts(w.CountsFrame((_statement(3, SENDER),)).to_bytes(), [SENDER.public_key()])
    # The signed crowd rule: ε_t is the statement's last 8 bytes before the signature.
    eps_t_at = len(raw) - w.SIGNATURE_SIZE - 1
    with pytest.raises(w.BadSignature):
        w.verify_counts(flip_byte(raw, eps_t_at), [SENDER.public_key()])
    with pytest.raises(CryptoParameterError, match="threshold_epsilon"):
        w.CountStatement(0, 0, 0, bytes(32), 1, 0, 0, 0, 0, 1, threshold_epsilon=0.0)
    bad = w.CountStatement(0, 0, 0, bytes(32), 10, 0, 0, 0, 0, 9)
    assert not bad.consistent
    with pytest.raises(CryptoParameterError):
        w.CountsFrame((bad,))  # unsigned statements never go on the wire


@pytest.mark.parametrize(
    ("payload", "error"),
    [
        (b"", w.MalformedFrame),
        (b"\x01", w.MalformedFrame),
        (b"\x02\x01", w.UnsupportedVersion),
        (b"\x01\x63", w.UnknownKind),
        (b"\x01\x01\x00\x00", w.MalformedFrame),  # truncated SUBMIT header
        (b"\x01\x01" + struct.pack(">III", 0, 0, 4), w.MalformedFrame),  # zero reports
        (b"\x01\x01" + struct.pack(">III", 0, 2, 4) + b"x" * 7, w.MalformedFrame),  # short
        (b"\x01\x01" + struct.pack(">III", 0, 2, 4) + b"x" * 9, w.MalformedFrame),  # long
        (b"\x01\x01" + struct.pack(">III", 0, 0xFFFFFFFF, 0xFFFFFFFF), w.MalformedFrame),
        (b"\x01\x02" + b"\x00" * 7, w.MalformedFrame),  # wrong ACK length
    ],
)
def test_parse_errors_are_typed(payload: bytes, error: type[w.WireError]) -> None:
    with pytest.raises(error) as info:
        w.parse_submit(payload) if payload[1:2] != b"\x02" else w.parse_ack(payload)
    assert info.value.reason in {
        "malformed_frame",
        "bad_version",
        "unknown_kind",
    }


def test_kind_mismatch_is_malformed() -> None:
    with pytest.raises(w.MalformedFrame):
        w.parse_submit(w.Ack(1, 0).to_bytes())
    with pytest.raises(w.MalformedFrame):
        w.verify_batch(w.Ack(1, 0).to_bytes(), SENDER.public_key())


def test_frame_length_limits() -> None:
    assert w.frame_length(struct.pack(">I", 100), max_size=100) == 100
    with pytest.raises(w.FrameTooLarge) as info:
        w.frame_length(struct.pack(">I", 101), max_size=100)
    assert info.value.reason == "oversized_frame"
    with pytest.raises(w.FrameTooLarge):
        w.frame_length(b"\x00\x00\x00\x00")
    with pytest.raises(w.FrameTooLarge):
        w.frame_length(b"\xff\xff\xff\xff")
    with pytest.raises(w.MalformedFrame):
        w.frame_length(b"\x00\x01")
    with pytest.raises(CryptoParameterError):
        w.encode_frame(b"x" * 11, max_size=10)


def test_encoder_misuse_quotes_values() -> None:
    with pytest.raises(CryptoParameterError, match="one length"):
        w.SubmitFrame(0, (b"ab", b"c"))
    with pytest.raises(CryptoParameterError, match="at least one"):
        w.SubmitFrame(0, ())
    with pytest.raises(CryptoParameterError, match="chunk_index 2"):
        w.BatchChunk(0, 1, 0, 0, bytes(32), 2, 2, ())
    with pytest.raises(CryptoParameterError, match=r"key_epoch must be .* got -1"):
        w.SubmitFrame(-1, (b"a",))


def test_empty_batch_chunk_roundtrips() -> None:
    chunk = w.BatchChunk(1, 2, 0, 9, bytes(32), 0, 1, ())
    assert w.verify_batch(chunk.sign(SENDER), SENDER.public_key()) == chunk


reports_st = st.integers(1, 40).flatmap(
    lambda size: st.lists(st.binary(min_size=size, max_size=size), min_size=1, max_size=20)
)


@settings(max_examples=60, deadline=None)
@given(
    reports=reports_st,
    key_epoch=st.integers(0, 2**32 - 1),
    epoch=st.integers(0, 2**64 - 1),
    hops=st.tuples(st.integers(0, 255), st.integers(0, 255)),
)
def test_roundtrip_batch(
    reports: list[bytes], key_epoch: int, epoch: int, hops: tuple[int, int]
) -> None:
    chunk = w.BatchChunk(hops[0], hops[1], key_epoch, epoch, bytes(32), 0, 1, tuple(reports))
    assert w.verify_batch(chunk.sign(SENDER), SENDER.public_key()) == chunk
    sub = w.SubmitFrame(key_epoch, tuple(reports))
    assert w.parse_submit(sub.to_bytes()) == sub


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200))
def test_random_bytes_never_escape_as_untyped(data: bytes) -> None:
    for parse in (w.parse_submit, w.parse_ack, w.parse_reject, w.parse_query, w.parse_reply):
        with contextlib.suppress(w.WireError):
            parse(data)
    for verify in (w.verify_batch, w.verify_control):
        with contextlib.suppress(w.WireError):
            verify(data, SENDER.public_key())
    with contextlib.suppress(w.WireError):
        w.verify_counts(data, [SENDER.public_key()])


# --------------------------------------------------------------------------- weak verify keys


def _forge(body: bytes, key: bytes) -> bytes | None:
    """``body`` with a signature that pyca accepts under the small-order ``key``, if any."""
    public = Ed25519PublicKey.from_public_bytes(key)
    for r in SMALL_ORDER_ED25519:
        try:
            public.verify(r + bytes(32), body)
        except InvalidSignature:
            continue
        return r + bytes(32)
    return None


def test_pyca_accepts_forgeries_under_the_identity_verify_key() -> None:
    """Why the check exists: the library alone lets anyone sign for a weak key."""
    identity = SMALL_ORDER_ED25519[0]
    for command in range(1, 6):
        assert _forge(b"any message %d" % command, identity) is not None


@pytest.mark.parametrize("key", SMALL_ORDER_ED25519, ids=lambda b: b.hex()[:8] + b.hex()[-2:])
def test_forged_frames_under_a_small_order_key_are_refused(key: bytes) -> None:
    public = Ed25519PublicKey.from_public_bytes(key)
    forged_any = False
    for issued in range(8):
        control = w.ControlFrame(w.ControlCommand.CLOSE_EPOCH, issued).signed_bytes()
        batch = dataclasses.replace(_chunk(), epoch=issued).signed_bytes()
        for body, verify in ((control, w.verify_control), (batch, w.verify_batch)):
            context = w._CTX_CONTROL if verify is w.verify_control else w._CTX_BATCH
            sig = _forge(context + body, key)
            if sig is None:
                continue
            forged_any = True
            with pytest.raises(w.BadSignature, match="small order"):
                verify(body + sig, public)
    assert forged_any  # each of these keys admits a forgery for some of the 16 bodies
    statement = dataclasses.replace(_statement(0, SENDER), signature=b"")
    sig = _forge(w._CTX_STATEMENT + statement.signed_bytes(), key)
    if sig is not None:
        with pytest.raises(w.BadSignature, match="small order"):
            w.verify_counts(
                w.CountsFrame((dataclasses.replace(statement, signature=sig),)).to_bytes(), [public]
            )


# --------------------------------------------------------------------------- encoder misuse


def test_encoders_refuse_values_their_parsers_reject() -> None:
    """A frame is never built, signed or sent if the peer's parser must refuse it."""
    with pytest.raises(CryptoParameterError, match="command must be a ControlCommand, got 9"):
        w.ControlFrame(9, 1)  # type: ignore[arg-type]
    with pytest.raises(CryptoParameterError, match="what must be a QueryKind, got 99"):
        w.Query(99)  # type: ignore[arg-type]
    with pytest.raises(CryptoParameterError, match="reason must be a RejectReason, got 99"):
        w.Reject(99, "x")  # type: ignore[arg-type]
    with pytest.raises(CryptoParameterError, match="reject detail"):
        w.Reject(w.RejectReason.BUSY, b"x")  # type: ignore[arg-type]
    with pytest.raises(CryptoParameterError, match="query body must be bytes"):
        w.Query(w.QueryKind.STATUS, "{}")  # type: ignore[arg-type]
    with pytest.raises(CryptoParameterError, match="reply body must be bytes"):
        w.Reply("{}")  # type: ignore[arg-type]
    with pytest.raises(CryptoParameterError, match="batch_id is 32 bytes, got 'x"):
        w.BatchChunk(0, 1, 0, 0, "x" * 32, 0, 1, ())  # type: ignore[arg-type]
    with pytest.raises(CryptoParameterError, match="bytes, got str"):
        w.SubmitFrame(0, ("ab",))  # type: ignore[arg-type]
    with pytest.raises(CryptoParameterError, match="signature"):
        w.CountStatement(0, 0, 0, bytes(32), 1, 0, 0, 0, 0, 1, "s" * 64)  # type: ignore[arg-type]


def test_plain_int_commands_are_coerced_and_round_trip() -> None:
    """``ControlFrame(2, t, e)`` once signed a CLOSE_EPOCH_AT without its epoch field."""
    frame = w.ControlFrame(2, 5, 3)  # type: ignore[arg-type]
    assert frame.command is w.ControlCommand.CLOSE_EPOCH_AT
    assert w.verify_control(frame.sign(OPERATOR), OPERATOR.public_key()) == frame
    at_zero = w.ControlFrame(2, 5)  # type: ignore[arg-type]
    assert w.verify_control(at_zero.sign(OPERATOR), OPERATOR.public_key()) == at_zero
    assert w.parse_query(w.Query(1).to_bytes()).what is w.QueryKind.STATUS  # type: ignore[arg-type]
    assert w.parse_reject(w.Reject(12).to_bytes()).reason is w.RejectReason.BUSY  # type: ignore[arg-type]


if __name__ == "__main__":  # pragma: no cover
    print(json.dumps(build_vectors(), indent=2))


def test_unverified_key_epoch_only_selects_a_key() -> None:
    assert w.unverified_key_epoch(_chunk().sign(SENDER)) == 7
    counts = w.CountsFrame((_statement(0, SENDER), _statement(1, OPERATOR))).to_bytes()
    assert w.unverified_key_epoch(counts) == 7
    with pytest.raises(w.MalformedFrame):
        w.unverified_key_epoch(w.Ack(1, 1).to_bytes())
    # Tampering with the claimed key epoch is caught by the signature it selects a key for.
    tampered = bytearray(_chunk().sign(SENDER))
    tampered[7] ^= 1  # low byte of key_epoch
    assert w.unverified_key_epoch(bytes(tampered)) == 6
    with pytest.raises(w.BadSignature):
        w.verify_batch(bytes(tampered), SENDER.public_key())
