"""Every error class of :mod:`esa` (the roles and the network services), and the integer
check the roles' parameters share.

:class:`ESAError` is the root the roles and the CLI catch. The lower layers cannot import it
(they import nothing of ours), so they have their own roots; their leaves are re-exported
from :mod:`esa` so callers have one place to import every error from.

The wire format's errors (:class:`WireError` and its leaves) derive from
:class:`crypto.CryptoError`, not from :class:`ESAError`: the format began in :mod:`crypto`,
and code that retries on an :class:`ESAError` (a lost ACK, a busy party) must keep
treating a frame that does not parse as final.
"""

from __future__ import annotations

import enum
import numbers
from typing import ClassVar

from crypto import CryptoError


class ESAError(Exception):
    """Root of every error raised by :mod:`esa`."""


class ConfigError(ESAError, ValueError):
    """A party or pipeline was configured with invalid settings."""


class DataError(ESAError, ValueError):
    """Users' data that a protocol cannot take as given: a missing value, a value of the wrong
    kind or outside the range (with refusal asked for), more categories than bins. The message
    names the row."""


class ReplayedReport(ESAError):
    """A report whose ephemeral key was already seen in this epoch.

    The roles never raise it: a replay is untrusted input, dropped and counted
    (``HopCounters.replayed``) so the rest of the batch goes on. It is the type for a
    caller that handles one report and must refuse it."""


class ThresholdNotMet(ESAError):
    """A crowd has fewer reports than the shuffler's threshold and is held back.

    The roles never raise it: a held crowd is counted (``HopCounters.held``), and a
    simulated run's estimate is marked lost (``esa.check_held``)."""


class GuaranteeMismatch(ESAError):
    """The run that happened is not the one the protocol's guarantee was calibrated for,
    and the caller asked to refuse such a run (``on_mismatch="refuse"``).

    Attributes:
        differences: what differs, one line each (e.g. ``"n: calibrated 100000, arrived 50"``).
    """

    def __init__(self, differences: list[str]) -> None:
        self.differences = list(differences)
        super().__init__(
            "the run differs from the privacy calibration: " + "; ".join(self.differences)
        )


# --------------------------------------------------------------------------- wire format


class WireError(CryptoError):
    """Bytes from the network that are not a valid frame. ``reason`` names its counter."""

    reason: ClassVar[str] = "malformed_frame"


class FrameTooLarge(WireError):
    """A length prefix above the receiver's maximum frame size (or zero)."""

    reason: ClassVar[str] = "oversized_frame"


class MalformedFrame(WireError):
    """A payload whose fields do not parse (wrong sizes, counts, trailing bytes)."""

    reason: ClassVar[str] = "malformed_frame"


class UnsupportedVersion(WireError):
    """A payload whose version byte is not the wire version (``esa.net.WIRE_VERSION``)."""

    reason: ClassVar[str] = "bad_version"


class UnknownKind(WireError):
    """A payload whose kind byte names no frame kind (``esa.net.FrameKind``)."""

    reason: ClassVar[str] = "unknown_kind"


class BadSignature(WireError):
    """A signed frame whose Ed25519 signature is missing or does not verify."""

    reason: ClassVar[str] = "bad_signature"


# --------------------------------------------------------------------------- connections


class ReadTimeout(ESAError):
    """A peer did not deliver a whole frame within the read timeout."""

    reason = "timeout"


class PeerClosed(ESAError):
    """The peer closed the connection (between frames or mid-frame)."""

    reason = "half_open"


class PeerRejected(ESAError):
    """The peer answered with a REJECT frame.

    Attributes:
        reason: the REJECT's reason, as its counter name (e.g. ``"busy"``).
        detail: the party's short explanation.
        retry_after: seconds the party asked the sender to wait before resending
            (``retry_later``, ``quota_exceeded``); 0 if it gave no hint.
    """

    def __init__(self, reason: str, detail: str, retry_after: float = 0.0) -> None:
        super().__init__(f"peer rejected the frame: {reason} ({detail})")
        self.reason = reason
        self.detail = detail
        self.retry_after = retry_after


class FrameRefused(ESAError):
    """A party refuses a well-framed request; it answers with a REJECT of ``code``.

    Args:
        code: the REJECT reason (an ``esa.net.RejectReason``).
        detail: what the REJECT says.
        retry_after: seconds the sender should wait before resending (the REJECT's
            ``retry_after_ms``; only for ``RETRY_LATER`` and ``QUOTA_EXCEEDED``).

    Attributes:
        code: as given.
        reason: the counter the refusal is counted under (``code``'s name, lower case).
        retry_after: as given.
    """

    def __init__(self, code: enum.IntEnum, detail: str, *, retry_after: float = 0.0) -> None:
        super().__init__(detail)
        self.code = code
        self.reason = code.name.lower()
        self.retry_after = retry_after


class _Abandoned(ESAError):
    """Raised in a worker thread whose result nobody waits for any more (a shutdown).

    Private: it never leaves the service (the thread's result is dropped)."""


# --------------------------------------------------------------------------- inbox


class InboxError(ESAError):
    """The inbox database is unusable (wrong schema, wrong party, misuse of a state)."""


class InboxDamaged(InboxError):
    """The inbox's stored data is damaged: SQLite's integrity check fails, or a stored
    report no longer matches the digest recorded when it was acknowledged (a flipped bit, a
    torn write). Nothing is processed from damaged data: an acknowledged report that reads
    back different is not a client's invalid report, and counting it as one would be a
    silently wrong answer."""


class ConflictingBatch(InboxError):
    """An upstream frame reuses a stored batch or epoch id with other content: the sender
    numbers its epochs afresh (its inbox lost or rolled back). Taking it as a resend would
    drop its reports silently; the frame is refused instead, and the sender keeps them."""


class TrapsNotProcessed(InboxError):
    """Trap reports of an opening reached the analyzer but their epoch is not processed
    yet: counted now they would be removed from an estimate that does not hold them yet.
    Nothing is recorded; open again once the epoch is processed."""


class EpochAhead(ESAError):
    """An operator asked to close an epoch id beyond the next one (see
    ``esa.net.Inbox.close_epochs``)."""


# --------------------------------------------------------------------------- checks


def check_integer(value: object, name: str, lo: int, hi: int | None = None) -> int:
    """``value`` as an ``int`` in [lo, hi] (no upper bound if ``hi`` is None).

    Counts, hops and ids of the roles are integers: a ``bool``, a float (even 2.0) or a
    string is a caller's mistake, refused here rather than failing later in numpy or the
    crypto, or silently changing a comparison (a threshold of 2.5 acts as 3). numpy
    integers are accepted (sweeps build configs from arrays).

    Raises:
        ConfigError: quoting the value and the bound.
    """
    bound = f">= {lo}" if hi is None else f"in [{lo}, {hi}]"
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ConfigError(f"{name} must be an integer {bound}, got {value!r}")
    v = int(value)
    if v < lo or (hi is not None and v > hi):
        raise ConfigError(f"{name} must be an integer {bound}, got {v}")
    return v


def check_workers(workers: object) -> int | None:
    """``workers``: ``None`` (every core) or an integer >= 1 (see :func:`check_integer`)."""
    return None if workers is None else check_integer(workers, "workers", 1)
