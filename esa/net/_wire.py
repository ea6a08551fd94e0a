"""The wire format between ESA parties: length-prefixed, versioned, signed frames.

One idea, in one module on purpose (it is over a thousand lines): the byte layout of every
frame kind, each with its one parser and its encoder side by side, so a format and its
parser never drift apart and the known-answer vectors pin them together.

Every message on a TCP connection is one *frame*: a 4-byte big-endian length, then that many
bytes of payload. A payload starts with a version byte (:data:`WIRE_VERSION`) and a kind
byte (:class:`FrameKind`); the rest is fixed-size big-endian fields. Each kind has exactly
one ``_parse_unverified_*`` function; signed kinds are only reachable through ``verify_*``,
which checks the Ed25519 signature over the bytes *before* parsing anything (as Fernet
authenticates before decrypting).

Kinds (``>`` big-endian; ``u8/u16/u32/u64``; ``B[n]`` raw bytes)::

    SUBMIT   client -> first shuffler (unsigned: users are anonymous)
             u8 ver | u8 kind | u32 key_epoch | u32 count | u32 report_size
             | B[count*report_size] reports | [u16 len | B[len] TOKEN]
             (the token is optional: present iff bytes follow the reports)
    TOKEN    operator -> client, shown in SUBMIT; signed by the operator key
             u8 ver | u8 len | B[len] deployment | u32 key_epoch | u8 len | B[len] client_id
             | u64 expires_at (Unix seconds) | u32 quota | B[64] signature
    ACK      u8 ver | u8 kind | u32 stored | u32 duplicates
    REJECT   u8 ver | u8 kind | u8 reason | u16 len | B[len] utf-8 detail
             | [u32 retry_after_ms]   (RETRY_LATER and QUOTA_EXCEEDED only)
    BATCH    hop -> next hop, signed by the sender; one chunk of an epoch's batch
             u8 ver | u8 kind | u8 sender_hop | u8 receiver_hop | u32 key_epoch | u64 epoch
             | B[32] batch_id | u32 chunk_index | u32 chunk_count | u32 count
             | u32 report_size | B[count*report_size] reports | B[64] signature
    COUNTS   hop -> next hop: the chain of signed per-epoch count statements so far
             u8 ver | u8 kind | u8 n | n * STATEMENT
             STATEMENT = u8 hop | u32 key_epoch | u64 epoch | B[32] batch_id
                         | u64 received | u64 invalid | u64 replayed | u64 held
                         | u64 fakes_added | u64 forwarded | u64 threshold
                         | f64 threshold_epsilon (0.0: none) | B[64] signature
             (signed under the context ``esa/wire/v2/counts``)
    CONTROL  operator -> party, signed by the operator key; version 2 (:data:`CONTROL_VERSION`)
             u8 ver | u8 kind | u8 command | u64 issued_at_ms | B[16] nonce
             | B[16] deployment_id | u8 len | B[len] utf-8 target party name
             | [u64 epoch] | B[64] signature
             (``epoch`` only for CLOSE_EPOCH_AT: close iff the next epoch id is ``epoch``)
    QUERY    u8 ver | u8 kind | u8 what | u32 len | B[len] utf-8 JSON
    REPLY    u8 ver | u8 kind | u32 len | B[len] utf-8 JSON

Every kind carries :data:`WIRE_VERSION` except CONTROL, whose layout binds a command to one
deployment and one party and carries :data:`CONTROL_VERSION` (:func:`frame_version`).

Signatures are Ed25519 (pyca/cryptography) over ``context ‖ signed bytes``, with a
per-kind context string so a signature on one kind never verifies as another. A verify key
of small order is refused before any check (OpenSSL would accept forgeries under it).

Every parse failure raises a :class:`~esa.WireError` leaf whose ``reason`` names a counter;
the services count rejections by that name. A frame built with a bad field (programmer
misuse) raises :class:`crypto.CryptoParameterError`, as it did when this format lived in
:mod:`crypto`. The signatures are :func:`crypto.sign` / :func:`crypto.is_valid_signature`.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import secrets
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)

import crypto
from crypto import CryptoParameterError

from .._errors import (
    BadSignature,
    FrameTooLarge,
    MalformedFrame,
    UnknownKind,
    UnsupportedVersion,
    WireError,
)

__all__ = [
    "BATCH_ID_SIZE",
    "CONTROL_NONCE_SIZE",
    "CONTROL_VERSION",
    "DEPLOYMENT_ID_SIZE",
    "FRAME_HEADER_SIZE",
    "MAX_FRAME_SIZE",
    "MAX_TOKEN_ID_SIZE",
    "RETRY_REASONS",
    "SIGNATURE_SIZE",
    "STATEMENT_SIZE",
    "WIRE_VERSION",
    "Ack",
    "BadSignature",
    "BatchChunk",
    "ClientToken",
    "ControlCommand",
    "ControlFrame",
    "CountStatement",
    "CountsFrame",
    "FrameKind",
    "FrameTooLarge",
    "MalformedFrame",
    "Query",
    "QueryKind",
    "Reject",
    "RejectReason",
    "Reply",
    "SubmitFrame",
    "UnknownKind",
    "UnsupportedVersion",
    "WireError",
    "encode_frame",
    "frame_length",
    "frame_version",
    "parse_ack",
    "parse_query",
    "parse_reject",
    "parse_reply",
    "parse_submit",
    "parse_token",
    "peek_kind",
    "reports_header",
    "unverified_key_epoch",
    "verify_batch",
    "verify_control",
    "verify_counts",
]

WIRE_VERSION: Final = 1
#: The version byte of CONTROL frames (their layout differs from version 1's).
CONTROL_VERSION: Final = 2
CONTROL_NONCE_SIZE: Final = 16
#: A deployment's id as CONTROL frames carry it (the manifest's ``deployment_id``).
DEPLOYMENT_ID_SIZE: Final = 16
MAX_TARGET_SIZE: Final = 64
FRAME_HEADER_SIZE: Final = 4
#: Hard upper bound of a frame payload; a party may configure a smaller one.
MAX_FRAME_SIZE: Final = 16 * 1024 * 1024
SIGNATURE_SIZE: Final = 64
BATCH_ID_SIZE: Final = 32
MAX_DETAIL_SIZE: Final = 1024

_PREFIX: Final = struct.Struct(">BB")
_LENGTH: Final = struct.Struct(">I")
_SUBMIT: Final = struct.Struct(">III")
_ACK: Final = struct.Struct(">II")
_REJECT: Final = struct.Struct(">BH")
_BATCH: Final = struct.Struct(">BBIQ32sIIII")
_STATEMENT: Final = struct.Struct(">BIQ32sQQQQQQQd")
_CONTROL: Final = struct.Struct(">BQ16s16sB")
_CONTROL_EPOCH: Final = struct.Struct(">Q")
_QUERY: Final = struct.Struct(">BI")
_REPLY: Final = struct.Struct(">I")
STATEMENT_SIZE: Final = _STATEMENT.size + SIGNATURE_SIZE

_CTX_BATCH: Final = b"esa/wire/v1/batch\x00"
_CTX_STATEMENT: Final = b"esa/wire/v2/counts\x00"
_CTX_CONTROL: Final = b"esa/wire/v2/control\x00"
_CTX_TOKEN: Final = b"esa/wire/v1/client-token\x00"
_TOKEN_TAIL: Final = struct.Struct(">QI")
_TOKEN_LENGTH: Final = struct.Struct(">H")
_RETRY_AFTER: Final = struct.Struct(">I")
#: Longest deployment id and client id a token carries, in UTF-8 bytes.
MAX_TOKEN_ID_SIZE: Final = 64

_U8: Final = 0xFF
_U32: Final = 0xFFFFFFFF
_U64: Final = 0xFFFFFFFFFFFFFFFF


class FrameKind(enum.IntEnum):
    SUBMIT = 1
    ACK = 2
    REJECT = 3
    BATCH = 4
    COUNTS = 5
    CONTROL = 6
    QUERY = 7
    REPLY = 8


class RejectReason(enum.IntEnum):
    """Why a party refused a frame; the name is the counter it increments."""

    MALFORMED_FRAME = 1
    OVERSIZED_FRAME = 2
    BAD_VERSION = 3
    UNKNOWN_KIND = 4
    BAD_SIGNATURE = 5
    WRONG_HOP = 6
    REPLAYED_BATCH = 7
    UNKNOWN_KEY_EPOCH = 8
    WRONG_REPORT_SIZE = 9
    UNEXPECTED_KIND = 10
    TIMEOUT = 11
    BUSY = 12
    INTERNAL = 13
    BAD_TRAP_OPENING = 14
    STALE_CONTROL = 15
    EPOCH_AHEAD = 16  # CLOSE_EPOCH_AT names an epoch after the party's next one
    CONFLICTING_BATCH = 17  # another batch, or other content, under a stored batch/epoch id
    RETRY_LATER = 18  # back-pressure or a rate limit: resend after the REJECT's retry_after
    QUOTA_EXCEEDED = 19  # the sender's reports for this epoch are used up (retry_after: hint)
    UNAUTHENTICATED = 20  # no client token where one is required, or one that does not verify
    INVALID_REPORT = 21  # a report of the frame fails to open (the first shuffler peels at intake)
    WRONG_TARGET = 22  # a CONTROL frame names another party or another deployment


class ControlCommand(enum.IntEnum):
    CLOSE_EPOCH = 1
    CLOSE_EPOCH_AT = 2  # idempotent: close only if the next epoch id is the frame's ``epoch``


class QueryKind(enum.IntEnum):
    STATUS = 1
    RESULT = 2
    TRAP_COMMIT = 3  # an auditor commits to trap reports before the epoch
    TRAP_OPEN = 4  # … and opens the commitment after it


# --------------------------------------------------------------------------- framing


def encode_frame(payload: bytes, *, max_size: int = MAX_FRAME_SIZE) -> bytes:
    """Prefix ``payload`` with its 4-byte big-endian length.

    Args:
        payload: the frame's payload.
        max_size: the largest payload allowed.

    Returns:
        The frame: the length prefix, then the payload.

    Raises:
        CryptoParameterError: the payload is empty or longer than ``max_size``.
    """
    if not 0 < len(payload) <= max_size:
        raise CryptoParameterError(f"frame payload must be 1..{max_size} bytes, got {len(payload)}")
    return _LENGTH.pack(len(payload)) + payload


def frame_length(header: bytes, *, max_size: int = MAX_FRAME_SIZE) -> int:
    """Parse a 4-byte length prefix, refusing it before any payload is buffered.

    Args:
        header: the frame's first 4 bytes.
        max_size: the largest payload accepted.

    Returns:
        The payload's length.

    Raises:
        MalformedFrame: ``header`` is not 4 bytes.
        FrameTooLarge: the length is 0 or above ``max_size``.
    """
    if len(header) != FRAME_HEADER_SIZE:
        raise MalformedFrame("a frame header is 4 bytes")
    (length,) = _LENGTH.unpack(header)
    if not 0 < length <= max_size:
        raise FrameTooLarge(f"frame length {length} outside 1..{max_size}")
    return int(length)


def peek_kind(payload: bytes) -> FrameKind:
    """The kind of a payload after checking its version byte.

    Args:
        payload: a frame's payload.

    Returns:
        Its kind.

    Raises:
        MalformedFrame: fewer than 2 bytes.
        UnsupportedVersion: version byte is not :data:`WIRE_VERSION`.
        UnknownKind: kind byte is not a :class:`FrameKind`.
    """
    if len(payload) < _PREFIX.size:
        raise MalformedFrame("payload shorter than its version and kind bytes")
    version, kind = _PREFIX.unpack_from(payload)
    try:
        member = FrameKind(kind)
    except ValueError:
        if version not in (WIRE_VERSION, CONTROL_VERSION):
            raise UnsupportedVersion(f"wire version {version}, expected {WIRE_VERSION}") from None
        raise UnknownKind(f"unknown frame kind {kind}") from None
    expected = frame_version(member)
    if version != expected:
        raise UnsupportedVersion(f"wire version {version}, expected {expected} for {member.name}")
    return member


def frame_version(kind: FrameKind) -> int:
    """The version byte frames of ``kind`` carry: :data:`CONTROL_VERSION` for CONTROL,
    :data:`WIRE_VERSION` for every other kind."""
    return CONTROL_VERSION if kind is FrameKind.CONTROL else WIRE_VERSION


def _expect(payload: bytes, kind: FrameKind) -> None:
    if peek_kind(payload) is not kind:
        raise MalformedFrame(f"expected a {kind.name} frame")


def _split_reports(blob: bytes, count: int, size: int) -> tuple[bytes, ...]:
    if len(blob) != count * size:
        raise MalformedFrame(
            f"{count} reports of {size} bytes need {count * size}, got {len(blob)}"
        )
    return tuple(blob[i * size : (i + 1) * size] for i in range(count))


def _check_reports(reports: Sequence[bytes], *, allow_empty: bool) -> int:
    """Validate a report list for encoding; returns the common report size."""
    if not reports:
        if not allow_empty:
            raise CryptoParameterError("a submit frame carries at least one report")
        return 0
    size = len(reports[0])
    if size == 0 or size > _U32:
        raise CryptoParameterError(f"report size must be 1..{_U32}, got {size}")
    for r in reports:
        if not isinstance(r, bytes):
            raise CryptoParameterError(f"every report of a frame is bytes, got {type(r).__name__}")
        if len(r) != size:
            raise CryptoParameterError(
                f"all reports of a frame have one length; got {len(r)} and {size}"
            )
    return size


def _check_enum(frame: object, name: str, enum_type: type[enum.IntEnum]) -> None:
    """Coerce ``frame.<name>`` to ``enum_type`` in place, refusing a value it does not name:
    an encoder must never sign or send a frame its own parser rejects."""
    value = getattr(frame, name)
    try:
        member = enum_type(value)
    except ValueError:
        raise CryptoParameterError(
            f"{name} must be a {enum_type.__name__}, got {value!r}"
        ) from None
    object.__setattr__(frame, name, member)  # the dataclasses are frozen


def _check_body(body: bytes, name: str, bound: int) -> None:
    if not isinstance(body, bytes) or len(body) > bound:
        shown = len(body) if isinstance(body, bytes) else repr(body)
        raise CryptoParameterError(f"{name} must be bytes, at most {bound}, got {shown}")


def _check_uint(value: int, bound: int, name: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= bound:
        raise CryptoParameterError(f"{name} must be an integer in [0, {bound}], got {value!r}")


# --------------------------------------------------------------------------- SUBMIT


@dataclass(frozen=True, slots=True)
class SubmitFrame:
    """Reports a client submits to the first shuffler, all wrapped for ``key_epoch``.

    ``token`` is an operator-signed :class:`ClientToken`'s bytes (:meth:`ClientToken.sign`),
    or empty for a keyless client; the party verifies it, the frame only carries it.
    """

    key_epoch: int
    reports: tuple[bytes, ...]
    token: bytes = b""

    def __post_init__(self) -> None:
        _check_uint(self.key_epoch, _U32, "key_epoch")
        _check_reports(self.reports, allow_empty=False)
        _check_body(self.token, "token", 0xFFFF)

    def to_bytes(self) -> bytes:
        """The frame's payload.

        Returns:
            The SUBMIT payload (without the length prefix).
        """
        size = len(self.reports[0])
        head = _PREFIX.pack(WIRE_VERSION, FrameKind.SUBMIT)
        tail = _TOKEN_LENGTH.pack(len(self.token)) + self.token if self.token else b""
        return (
            head
            + _SUBMIT.pack(self.key_epoch, len(self.reports), size)
            + b"".join(self.reports)
            + tail
        )


def _submit_header(payload: bytes) -> tuple[int, int, int]:
    """(key_epoch, count, report size) of a SUBMIT payload, nothing split."""
    _expect(payload, FrameKind.SUBMIT)
    if len(payload) < _PREFIX.size + _SUBMIT.size:
        raise MalformedFrame("truncated SUBMIT header")
    key_epoch, count, size = _SUBMIT.unpack_from(payload, _PREFIX.size)
    if count == 0 or size == 0:
        raise MalformedFrame("a SUBMIT frame carries at least one non-empty report")
    end = _PREFIX.size + _SUBMIT.size + count * size
    if len(payload) != end:
        rest = len(payload) - end
        if rest < _TOKEN_LENGTH.size or rest != (
            _TOKEN_LENGTH.size + _TOKEN_LENGTH.unpack_from(payload, end)[0]
        ):
            raise MalformedFrame(f"{count} reports of {size} bytes do not fill the SUBMIT frame")
    return key_epoch, count, size


def _parse_unverified_submit(payload: bytes) -> SubmitFrame:
    """Parse a SUBMIT payload (unsigned by design: users are anonymous).

    Args:
        payload: the frame's payload.

    Returns:
        The SUBMIT frame.

    Raises:
        WireError: a payload of another version or kind, or malformed (:class:`MalformedFrame`).
    """
    key_epoch, count, size = _submit_header(payload)
    end = _PREFIX.size + _SUBMIT.size + count * size
    reports = _split_reports(payload[_PREFIX.size + _SUBMIT.size : end], count, size)
    return SubmitFrame(key_epoch, reports, payload[end + _TOKEN_LENGTH.size :])


parse_submit = _parse_unverified_submit  # unsigned by design: users are anonymous


def _check_id(value: str, name: str) -> bytes:
    if not isinstance(value, str) or not 0 < len(value.encode()) <= MAX_TOKEN_ID_SIZE:
        raise CryptoParameterError(
            f"{name} must be a str of 1..{MAX_TOKEN_ID_SIZE} bytes in UTF-8, got {value!r:.80}"
        )
    return value.encode()


@dataclass(frozen=True, slots=True)
class ClientToken:
    """An operator's permission for one client to submit under one key epoch.

    Bound to the deployment (``deployment``: the first shuffler's ``[admission]
    deployment_id``), the key epoch its reports are wrapped for (the SUBMIT's
    ``key_epoch``), the client (``client_id``, which the party's quota is kept under) and
    an expiry (``expires_at``, Unix seconds); ``quota`` is how many reports the client may
    have stored per epoch. A token is a bearer credential: whoever holds it submits as
    ``client_id``, within its quota and expiry.
    """

    deployment: str
    key_epoch: int
    client_id: str
    expires_at: int
    quota: int

    def __post_init__(self) -> None:
        _check_id(self.deployment, "deployment")
        _check_id(self.client_id, "client_id")
        _check_uint(self.key_epoch, _U32, "key_epoch")
        _check_uint(self.expires_at, _U64, "expires_at")
        _check_uint(self.quota, _U32, "quota")

    def signed_bytes(self) -> bytes:
        """The bytes the signature covers.

        Returns:
            The token without its signature.
        """
        dep, cid = self.deployment.encode(), self.client_id.encode()
        return (
            bytes([WIRE_VERSION, len(dep)])
            + dep
            + struct.pack(">I", self.key_epoch)
            + bytes([len(cid)])
            + cid
            + _TOKEN_TAIL.pack(self.expires_at, self.quota)
        )

    def sign(self, key: Ed25519PrivateKey) -> bytes:
        """The token's bytes: signed bytes followed by the operator's Ed25519 signature.

        Args:
            key: the operator's signing key.

        Returns:
            The signed token.
        """
        body = self.signed_bytes()
        return body + _sign(key, _CTX_TOKEN, body)


def parse_token(token: bytes, key: Ed25519PublicKey) -> ClientToken:
    """Check the operator's signature on a token, then parse it (expiry and bindings are
    the party's to check).

    Args:
        token: the token's bytes.
        key: the operator's verify key.

    Returns:
        The token's deployment, key epoch, client id, expiry and quota.

    Raises:
        WireError: a malformed token (:class:`MalformedFrame`) or a signature that does not
            verify (:class:`BadSignature`).
    """
    if len(token) <= SIGNATURE_SIZE:
        raise MalformedFrame("truncated client token")
    body, signature = token[:-SIGNATURE_SIZE], token[-SIGNATURE_SIZE:]
    _verify(key, _CTX_TOKEN, body, signature)
    try:
        if body[0] != WIRE_VERSION:
            raise MalformedFrame(f"client token version {body[0]}, expected {WIRE_VERSION}")
        at = 2 + body[1]
        dep = body[2:at]
        (key_epoch,) = struct.unpack_from(">I", body, at)
        cid_len = body[at + 4]
        cid = body[at + 5 : at + 5 + cid_len]
        tail = at + 5 + cid_len
        if len(cid) != cid_len or len(body) != tail + _TOKEN_TAIL.size:
            raise MalformedFrame("client token length mismatch")
        expires_at, quota = _TOKEN_TAIL.unpack_from(body, tail)
        return ClientToken(dep.decode(), key_epoch, cid.decode(), expires_at, quota)
    except (IndexError, struct.error, UnicodeDecodeError, CryptoParameterError):
        raise MalformedFrame("malformed client token") from None


# --------------------------------------------------------------------------- ACK / REJECT


@dataclass(frozen=True, slots=True)
class Ack:
    """A party committed a frame: ``stored`` new reports, ``duplicates`` it already had."""

    stored: int
    duplicates: int

    def __post_init__(self) -> None:
        _check_uint(self.stored, _U32, "stored")
        _check_uint(self.duplicates, _U32, "duplicates")

    def to_bytes(self) -> bytes:
        """The frame's payload.

        Returns:
            The ACK payload (without the length prefix).
        """
        return _PREFIX.pack(WIRE_VERSION, FrameKind.ACK) + _ACK.pack(self.stored, self.duplicates)


def _parse_unverified_ack(payload: bytes) -> Ack:
    """Parse an ACK payload (ACKs are unsigned).

    Args:
        payload: the frame's payload.

    Returns:
        The ACK frame.

    Raises:
        WireError: a payload of another version or kind, or malformed (:class:`MalformedFrame`).
    """
    _expect(payload, FrameKind.ACK)
    if len(payload) != _PREFIX.size + _ACK.size:
        raise MalformedFrame("an ACK frame is 10 bytes")
    return Ack(*_ACK.unpack_from(payload, _PREFIX.size))


parse_ack = _parse_unverified_ack


#: The REJECT reasons that carry a ``retry_after_ms`` hint.
RETRY_REASONS: Final = frozenset({RejectReason.RETRY_LATER, RejectReason.QUOTA_EXCEEDED})


@dataclass(frozen=True, slots=True)
class Reject:
    """A party refused a frame for ``reason``; ``detail`` is a short human hint.

    ``retry_after_ms`` (only for :data:`RETRY_REASONS`; 0 otherwise) is how long the party
    asks the sender to wait before resending.
    """

    reason: RejectReason
    detail: str = ""
    retry_after_ms: int = 0

    def __post_init__(self) -> None:
        _check_enum(self, "reason", RejectReason)
        if not isinstance(self.detail, str) or len(self.detail.encode()) > MAX_DETAIL_SIZE:
            raise CryptoParameterError(
                f"reject detail is a str of at most {MAX_DETAIL_SIZE} bytes in UTF-8, "
                f"got {self.detail!r:.80}"
            )
        _check_uint(self.retry_after_ms, _U32, "retry_after_ms")
        if self.retry_after_ms and self.reason not in RETRY_REASONS:
            raise CryptoParameterError(f"a {self.reason.name} REJECT carries no retry_after_ms")

    def to_bytes(self) -> bytes:
        """The frame's payload.

        Returns:
            The REJECT payload (without the length prefix).
        """
        detail = self.detail.encode()
        hint = _RETRY_AFTER.pack(self.retry_after_ms) if self.reason in RETRY_REASONS else b""
        return (
            _PREFIX.pack(WIRE_VERSION, FrameKind.REJECT)
            + _REJECT.pack(self.reason, len(detail))
            + detail
            + hint
        )


def _parse_unverified_reject(payload: bytes) -> Reject:
    """Parse a REJECT payload (REJECTs are unsigned).

    Args:
        payload: the frame's payload.

    Returns:
        The REJECT frame.

    Raises:
        WireError: a payload of another version or kind, or malformed (:class:`MalformedFrame`).
    """
    _expect(payload, FrameKind.REJECT)
    if len(payload) < _PREFIX.size + _REJECT.size:
        raise MalformedFrame("truncated REJECT frame")
    reason, length = _REJECT.unpack_from(payload, _PREFIX.size)
    detail = payload[_PREFIX.size + _REJECT.size :]
    retry_after = 0
    if reason in RETRY_REASONS:
        if len(detail) < _RETRY_AFTER.size:
            raise MalformedFrame("REJECT lacks its retry_after_ms")
        (retry_after,) = _RETRY_AFTER.unpack_from(detail, len(detail) - _RETRY_AFTER.size)
        detail = detail[: -_RETRY_AFTER.size]
    if len(detail) != length or length > MAX_DETAIL_SIZE:
        raise MalformedFrame("REJECT detail length mismatch")
    try:
        return Reject(RejectReason(reason), detail.decode(), retry_after)
    except (ValueError, UnicodeDecodeError):
        raise MalformedFrame("bad REJECT reason or detail") from None


parse_reject = _parse_unverified_reject


# --------------------------------------------------------------------------- signing


def _sign(key: Ed25519PrivateKey, context: bytes, data: bytes) -> bytes:
    return crypto.sign(key, context + data)


def _verify(key: Ed25519PublicKey, context: bytes, data: bytes, signature: bytes) -> None:
    # pyca/OpenSSL verifies under a small-order key, where (R, S = 0) forges any message;
    # refuse such a key here too, for verify keys that did not come through PartyPublic
    # (the operator's, from a party's config).
    if crypto.is_weak_verify_key(key.public_bytes_raw()):
        raise BadSignature("verify key is not a valid Ed25519 key (small order)")
    if not crypto.is_valid_signature(key, context + data, signature):
        raise BadSignature("signature does not verify")


# --------------------------------------------------------------------------- BATCH


@dataclass(frozen=True, slots=True)
class BatchChunk:
    """One chunk of the batch a hop forwards for one epoch.

    A batch may exceed the maximum frame size, so it travels as ``chunk_count`` chunks
    sharing ``batch_id``; the receiver commits each chunk idempotently under
    ``(batch_id, chunk_index)``. ``receiver_hop`` is signed so a batch cannot be replayed to
    another hop, ``epoch``/``key_epoch`` so it cannot be replayed into another epoch.
    """

    sender_hop: int
    receiver_hop: int
    key_epoch: int
    epoch: int
    batch_id: bytes
    chunk_index: int
    chunk_count: int
    reports: tuple[bytes, ...]

    def __post_init__(self) -> None:
        _check_uint(self.sender_hop, _U8, "sender_hop")
        _check_uint(self.receiver_hop, _U8, "receiver_hop")
        _check_uint(self.key_epoch, _U32, "key_epoch")
        _check_uint(self.epoch, _U64, "epoch")
        _check_uint(self.chunk_count, _U32, "chunk_count")
        _check_uint(self.chunk_index, _U32, "chunk_index")
        if not isinstance(self.batch_id, bytes) or len(self.batch_id) != BATCH_ID_SIZE:
            raise CryptoParameterError(f"batch_id is {BATCH_ID_SIZE} bytes, got {self.batch_id!r}")
        if not self.chunk_index < self.chunk_count:
            raise CryptoParameterError(
                f"chunk_index {self.chunk_index} must be < chunk_count {self.chunk_count}"
            )
        _check_reports(self.reports, allow_empty=True)

    def signed_bytes(self) -> bytes:
        """The bytes the signature covers.

        Returns:
            The BATCH payload without its signature.
        """
        size = len(self.reports[0]) if self.reports else 0
        return (
            _PREFIX.pack(WIRE_VERSION, FrameKind.BATCH)
            + _BATCH.pack(
                self.sender_hop,
                self.receiver_hop,
                self.key_epoch,
                self.epoch,
                self.batch_id,
                self.chunk_index,
                self.chunk_count,
                len(self.reports),
                size,
            )
            + b"".join(self.reports)
        )

    def sign(self, key: Ed25519PrivateKey) -> bytes:
        """The payload: signed bytes followed by the sender's Ed25519 signature.

        Args:
            key: the sending party's signing key.

        Returns:
            The signed BATCH payload.
        """
        body = self.signed_bytes()
        return body + _sign(key, _CTX_BATCH, body)


def _batch_header(payload: bytes) -> tuple[Any, ...]:
    """The header fields of a BATCH payload, checked for shape, nothing split."""
    _expect(payload, FrameKind.BATCH)
    if len(payload) < _PREFIX.size + _BATCH.size + SIGNATURE_SIZE:
        raise MalformedFrame("truncated BATCH frame")
    fields = _BATCH.unpack_from(payload, _PREFIX.size)
    _, _, _, _, _, index, chunks, count, size = fields
    if index >= chunks:
        raise MalformedFrame("chunk index beyond chunk count")
    if count and not size:
        raise MalformedFrame("reports of size 0")
    if len(payload) != _PREFIX.size + _BATCH.size + count * size + SIGNATURE_SIZE:
        raise MalformedFrame(f"{count} reports of {size} bytes do not fill the BATCH frame")
    return tuple(fields)


def reports_header(payload: bytes) -> tuple[int, int]:
    """(count, report size) that a SUBMIT or BATCH payload declares, read from its header
    alone: a party checks the size it expects before anything is split into reports or a
    signature checked, so a frame of millions of tiny reports costs no more than its bytes.

    Args:
        payload: a SUBMIT or BATCH payload.

    Returns:
        ``(count, size)``: the number of reports and the bytes of each.

    Raises:
        WireError: not a well-formed SUBMIT or BATCH header.
    """
    kind = peek_kind(payload)
    if kind is FrameKind.SUBMIT:
        _, count, size = _submit_header(payload)
        return count, size
    if kind is FrameKind.BATCH:
        *_, count, size = _batch_header(payload)
        return count, size
    raise MalformedFrame(f"{kind.name} frames carry no reports")


def _parse_unverified_batch(payload: bytes) -> BatchChunk:
    fields = _batch_header(payload)
    sender, receiver, key_epoch, epoch, batch_id, index, chunks, count, size = fields
    blob = payload[_PREFIX.size + _BATCH.size : -SIGNATURE_SIZE]
    reports = _split_reports(blob, count, size)
    return BatchChunk(sender, receiver, key_epoch, epoch, batch_id, index, chunks, reports)


def unverified_key_epoch(payload: bytes) -> int:
    """The key epoch a BATCH or COUNTS payload claims, *before* any signature check.

    Only for choosing which key directory's verify key to check the signature with; the
    value is authenticated when :func:`verify_batch` / :func:`verify_counts` succeeds.

    Args:
        payload: a BATCH or COUNTS payload.

    Returns:
        The key epoch it claims.

    Raises:
        WireError: not a well-formed BATCH or COUNTS payload.
    """
    kind = peek_kind(payload)
    if kind is FrameKind.BATCH:
        return int(_batch_header(payload)[2])  # from the header alone
    if kind is FrameKind.COUNTS:
        return _parse_unverified_counts(payload).statements[-1].key_epoch
    raise MalformedFrame(f"{kind.name} frames carry no key epoch")


def verify_batch(payload: bytes, key: Ed25519PublicKey) -> BatchChunk:
    """Check the sender's signature on a BATCH payload, then parse it.

    Args:
        payload: the BATCH payload.
        key: the sending party's verify key.

    Returns:
        The verified batch chunk.

    Raises:
        WireError: a leaf naming why (bad version/kind, bad signature, malformed).
    """
    _expect(payload, FrameKind.BATCH)
    if len(payload) < _PREFIX.size + _BATCH.size + SIGNATURE_SIZE:
        raise MalformedFrame("truncated BATCH frame")
    _verify(key, _CTX_BATCH, payload[:-SIGNATURE_SIZE], payload[-SIGNATURE_SIZE:])
    return _parse_unverified_batch(payload)


# --------------------------------------------------------------------------- COUNTS


@dataclass(frozen=True, slots=True)
class CountStatement:
    """What one hop says it did in one epoch, signed by that hop (drop detection).

    The chain is consistent when, for every hop, ``received − invalid − replayed − held +
    fakes_added = forwarded`` and each hop's ``received`` equals the previous hop's
    ``forwarded``; the analyzer checks both against the batch it actually got.

    The hop also signs the crowd rule it applied, which the run's privacy statement
    depends on: ``threshold`` (its crowd threshold T, 0: none) and ``threshold_epsilon``
    (ε_t of its noisy threshold; None: the plain rule, sent as 0.0 since ε_t > 0). The
    analyzer states the run's privacy from these signed values, never from its own config.
    """

    hop: int
    key_epoch: int
    epoch: int
    batch_id: bytes
    received: int
    invalid: int
    replayed: int
    held: int
    fakes_added: int
    forwarded: int
    signature: bytes = b""
    threshold: int = 0
    threshold_epsilon: float | None = None

    def __post_init__(self) -> None:
        _check_uint(self.hop, _U8, "hop")
        _check_uint(self.key_epoch, _U32, "key_epoch")
        _check_uint(self.epoch, _U64, "epoch")
        for name in (
            "received",
            "invalid",
            "replayed",
            "held",
            "fakes_added",
            "forwarded",
            "threshold",
        ):
            _check_uint(getattr(self, name), _U64, name)
        eps_t = self.threshold_epsilon
        if eps_t is not None and (
            isinstance(eps_t, bool)
            or not isinstance(eps_t, int | float)
            or not (math.isfinite(eps_t) and eps_t > 0)
        ):
            raise CryptoParameterError(
                f"threshold_epsilon must be None or a finite number > 0, got {eps_t!r}"
            )
        if not isinstance(self.batch_id, bytes) or len(self.batch_id) != BATCH_ID_SIZE:
            raise CryptoParameterError(f"batch_id is {BATCH_ID_SIZE} bytes, got {self.batch_id!r}")
        if not isinstance(self.signature, bytes) or (
            self.signature and len(self.signature) != SIGNATURE_SIZE
        ):
            raise CryptoParameterError(f"a signature is {SIGNATURE_SIZE} bytes")

    def signed_bytes(self) -> bytes:
        """The bytes the signature covers.

        Returns:
            The statement without its signature.
        """
        return _STATEMENT.pack(
            self.hop,
            self.key_epoch,
            self.epoch,
            self.batch_id,
            self.received,
            self.invalid,
            self.replayed,
            self.held,
            self.fakes_added,
            self.forwarded,
            self.threshold,
            0.0 if self.threshold_epsilon is None else float(self.threshold_epsilon),
        )

    def signed_by(self, key: Ed25519PrivateKey) -> CountStatement:
        """A copy carrying ``key``'s signature.

        Args:
            key: the hop's signing key.

        Returns:
            The signed statement.
        """
        sig = _sign(key, _CTX_STATEMENT, self.signed_bytes())
        return dataclasses.replace(self, signature=sig)

    def verify(self, key: Ed25519PublicKey) -> None:
        """Raises :class:`BadSignature` unless ``key`` signed this statement.

        Args:
            key: the hop's verify key.

        Raises:
            BadSignature: the statement is unsigned or ``key`` did not sign it.
        """
        if len(self.signature) != SIGNATURE_SIZE:
            raise BadSignature("count statement is unsigned")
        _verify(key, _CTX_STATEMENT, self.signed_bytes(), self.signature)

    @property
    def consistent(self) -> bool:
        """Whether the hop's own counts add up."""
        kept = self.received - self.invalid - self.replayed - self.held
        return kept >= 0 and kept + self.fakes_added == self.forwarded


@dataclass(frozen=True, slots=True)
class CountsFrame:
    """The chain of signed statements for one epoch, one per hop so far, in hop order."""

    statements: tuple[CountStatement, ...]

    def __post_init__(self) -> None:
        if not 0 < len(self.statements) <= _U8:
            raise CryptoParameterError(f"a COUNTS frame holds 1..{_U8} statements")
        for s in self.statements:
            if len(s.signature) != SIGNATURE_SIZE:
                raise CryptoParameterError("every statement of a COUNTS frame is signed")

    def to_bytes(self) -> bytes:
        """The frame's payload.

        Returns:
            The COUNTS payload (without the length prefix).
        """
        head = _PREFIX.pack(WIRE_VERSION, FrameKind.COUNTS) + bytes([len(self.statements)])
        return head + b"".join(s.signed_bytes() + s.signature for s in self.statements)


def _parse_unverified_counts(payload: bytes) -> CountsFrame:
    _expect(payload, FrameKind.COUNTS)
    if len(payload) < _PREFIX.size + 1:
        raise MalformedFrame("truncated COUNTS frame")
    n = payload[_PREFIX.size]
    body = payload[_PREFIX.size + 1 :]
    if n == 0 or len(body) != n * STATEMENT_SIZE:
        raise MalformedFrame(f"COUNTS frame of {n} statements has {len(body)} bytes")
    out = []
    for i in range(n):
        raw = body[i * STATEMENT_SIZE : (i + 1) * STATEMENT_SIZE]
        hop, key_epoch, epoch, batch_id, *counts, threshold, eps_t = _STATEMENT.unpack_from(raw)
        received, invalid, replayed, held, fakes, forwarded = counts
        if eps_t != 0.0 and not (math.isfinite(eps_t) and eps_t > 0):
            raise MalformedFrame("COUNTS statement with a threshold_epsilon not > 0")
        out.append(
            CountStatement(
                hop,
                key_epoch,
                epoch,
                batch_id,
                received,
                invalid,
                replayed,
                held,
                fakes,
                forwarded,
                raw[_STATEMENT.size :],
                threshold,
                None if eps_t == 0.0 else eps_t,
            )
        )
    return CountsFrame(tuple(out))


def verify_counts(payload: bytes, keys: Sequence[Ed25519PublicKey]) -> CountsFrame:
    """Parse a COUNTS payload and check statement ``i`` against ``keys[statement.hop]``.

    Each statement is signed separately (hops sign in turn), so there is no signature over
    the whole frame to check first; every statement is verified before it is returned.

    Args:
        payload: the COUNTS payload.
        keys: the verify keys of the hops, by hop index.

    Returns:
        The frame, every statement verified.

    Raises:
        WireError: malformed frame, a hop with no key, or a signature that does not verify.
    """
    frame = _parse_unverified_counts(payload)
    for s in frame.statements:
        if s.hop >= len(keys):
            raise BadSignature(f"no verify key for hop {s.hop}")
        s.verify(keys[s.hop])
    return frame


# --------------------------------------------------------------------------- CONTROL


def _random_nonce() -> bytes:
    return secrets.token_bytes(CONTROL_NONCE_SIZE)  # the OS CSPRNG


@dataclass(frozen=True, slots=True)
class ControlFrame:
    """An operator command (e.g. close the current epoch now), signed by the operator.

    The signature covers which deployment (``deployment_id``, the manifest's, 16 bytes; all
    zero for a party serving no manifest) and which party (``target``, its key name such as
    ``shuffler-1``) the command is for, so a command for one party is refused by every
    other, even one trusting the same operator key; and a random ``nonce`` the party
    remembers while the command is fresh, so a replay is refused. ``epoch`` is carried
    only by CLOSE_EPOCH_AT (the epoch id it closes); it is 0 otherwise.
    """

    command: ControlCommand
    issued_at_ms: int
    epoch: int = 0
    target: str = ""
    deployment_id: bytes = bytes(DEPLOYMENT_ID_SIZE)
    nonce: bytes = dataclasses.field(default_factory=_random_nonce)

    def __post_init__(self) -> None:
        _check_enum(self, "command", ControlCommand)
        _check_uint(self.issued_at_ms, _U64, "issued_at_ms")
        _check_uint(self.epoch, _U64, "epoch")
        if self.epoch and self.command is not ControlCommand.CLOSE_EPOCH_AT:
            raise CryptoParameterError(f"{self.command.name} carries no epoch")
        if not isinstance(self.target, str) or len(self.target.encode()) > MAX_TARGET_SIZE:
            raise CryptoParameterError(
                f"target must name a party in at most {MAX_TARGET_SIZE} UTF-8 bytes, "
                f"got {self.target!r:.80}"
            )
        for name, size in (("deployment_id", DEPLOYMENT_ID_SIZE), ("nonce", CONTROL_NONCE_SIZE)):
            value = getattr(self, name)
            if not isinstance(value, bytes) or len(value) != size:
                raise CryptoParameterError(f"{name} is {size} bytes, got {value!r:.80}")

    def signed_bytes(self) -> bytes:
        """The bytes the signature covers.

        Returns:
            The CONTROL payload without its signature.
        """
        target = self.target.encode()
        head = _PREFIX.pack(CONTROL_VERSION, FrameKind.CONTROL)
        body = _CONTROL.pack(
            self.command, self.issued_at_ms, self.nonce, self.deployment_id, len(target)
        )
        body += target
        if self.command is ControlCommand.CLOSE_EPOCH_AT:
            body += _CONTROL_EPOCH.pack(self.epoch)
        return head + body

    def sign(self, key: Ed25519PrivateKey) -> bytes:
        """The payload: signed bytes followed by the operator's Ed25519 signature.

        Args:
            key: the operator's signing key.

        Returns:
            The signed CONTROL payload.
        """
        body = self.signed_bytes()
        return body + _sign(key, _CTX_CONTROL, body)


def _control_size(payload: bytes) -> int:
    """The size a CONTROL payload must have, from its command and target length bytes."""
    _expect(payload, FrameKind.CONTROL)
    if len(payload) < _PREFIX.size + _CONTROL.size:
        raise MalformedFrame("truncated CONTROL frame")
    command, _, _, _, target_len = _CONTROL.unpack_from(payload, _PREFIX.size)
    extra = _CONTROL_EPOCH.size if command == ControlCommand.CLOSE_EPOCH_AT else 0
    return _PREFIX.size + _CONTROL.size + int(target_len) + extra + SIGNATURE_SIZE


def _parse_unverified_control(payload: bytes) -> ControlFrame:
    if len(payload) != _control_size(payload):
        raise MalformedFrame("CONTROL frame size does not match its command and target")
    command, issued, nonce, deployment, target_len = _CONTROL.unpack_from(payload, _PREFIX.size)
    try:
        cmd = ControlCommand(command)
    except ValueError:
        raise MalformedFrame(f"unknown control command {command}") from None
    start = _PREFIX.size + _CONTROL.size
    epoch = 0
    if cmd is ControlCommand.CLOSE_EPOCH_AT:
        (epoch,) = _CONTROL_EPOCH.unpack_from(payload, start + target_len)
    try:
        target = payload[start : start + target_len].decode()
        return ControlFrame(cmd, issued, epoch, target, deployment, nonce)
    except (UnicodeDecodeError, CryptoParameterError):
        raise MalformedFrame("bad CONTROL target") from None


def verify_control(payload: bytes, key: Ed25519PublicKey) -> ControlFrame:
    """Check the operator's signature on a CONTROL payload, then parse it.

    Args:
        payload: the CONTROL payload.
        key: the operator's verify key.

    Returns:
        The verified command.

    Raises:
        WireError: a leaf naming why (bad version/kind, bad signature, malformed).
    """
    if len(payload) != _control_size(payload):
        raise MalformedFrame("CONTROL frame size does not match its command and target")
    _verify(key, _CTX_CONTROL, payload[:-SIGNATURE_SIZE], payload[-SIGNATURE_SIZE:])
    return _parse_unverified_control(payload)


# --------------------------------------------------------------------------- QUERY / REPLY


@dataclass(frozen=True, slots=True)
class Query:
    """A status or result request; ``body`` is UTF-8 JSON (parameters)."""

    what: QueryKind
    body: bytes = b"{}"

    def __post_init__(self) -> None:
        _check_enum(self, "what", QueryKind)
        _check_body(self.body, "query body", _U32)

    def to_bytes(self) -> bytes:
        """The frame's payload.

        Returns:
            The QUERY payload (without the length prefix).
        """
        head = _PREFIX.pack(WIRE_VERSION, FrameKind.QUERY)
        return head + _QUERY.pack(self.what, len(self.body)) + self.body


def _parse_unverified_query(payload: bytes) -> Query:
    """Parse a QUERY payload (queries are unsigned; the query listener authenticates
    clients by TLS).

    Args:
        payload: the frame's payload.

    Returns:
        The QUERY frame.

    Raises:
        WireError: a payload of another version or kind, or malformed (:class:`MalformedFrame`).
    """
    _expect(payload, FrameKind.QUERY)
    if len(payload) < _PREFIX.size + _QUERY.size:
        raise MalformedFrame("truncated QUERY frame")
    what, length = _QUERY.unpack_from(payload, _PREFIX.size)
    body = payload[_PREFIX.size + _QUERY.size :]
    if len(body) != length:
        raise MalformedFrame("QUERY body length mismatch")
    try:
        return Query(QueryKind(what), body)
    except ValueError:
        raise MalformedFrame(f"unknown query {what}") from None


parse_query = _parse_unverified_query


@dataclass(frozen=True, slots=True)
class Reply:
    """The answer to a :class:`Query`; ``body`` is UTF-8 JSON."""

    body: bytes

    def __post_init__(self) -> None:
        _check_body(self.body, "reply body", _U32)

    def to_bytes(self) -> bytes:
        """The frame's payload.

        Returns:
            The REPLY payload (without the length prefix).
        """
        head = _PREFIX.pack(WIRE_VERSION, FrameKind.REPLY)
        return head + _REPLY.pack(len(self.body)) + self.body


def _parse_unverified_reply(payload: bytes) -> Reply:
    """Parse a REPLY payload (replies are unsigned).

    Args:
        payload: the frame's payload.

    Returns:
        The REPLY frame.

    Raises:
        WireError: a payload of another version or kind, or malformed (:class:`MalformedFrame`).
    """
    _expect(payload, FrameKind.REPLY)
    if len(payload) < _PREFIX.size + _REPLY.size:
        raise MalformedFrame("truncated REPLY frame")
    (length,) = _REPLY.unpack_from(payload, _PREFIX.size)
    body = payload[_PREFIX.size + _REPLY.size :]
    if len(body) != length:
        raise MalformedFrame("REPLY body length mismatch")
    return Reply(body)


parse_reply = _parse_unverified_reply
