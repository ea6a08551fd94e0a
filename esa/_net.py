"""Frames over trio streams: bounded, timed reads; a request/response client; the submitter.

Every read has a deadline: a frame (header *and* body) must arrive within
``read_timeout`` seconds of the first byte being awaited, so a slow-loris peer that trickles
one byte per second is cut off rather than holding a connection forever. A length prefix
above ``max_frame`` is refused before any of its body is buffered, so a connection never
holds more than ``max_frame`` bytes of input.
"""

from __future__ import annotations

import errno
import math
import os
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Final, Literal

import trio
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from crypto import (
    FRAME_HEADER_SIZE,
    MAX_FRAME_SIZE,
    Ack,
    ControlCommand,
    ControlFrame,
    FrameKind,
    MalformedFrame,
    Query,
    QueryKind,
    SubmitFrame,
    WireError,
    encode_frame,
    frame_length,
    parse_ack,
    parse_reject,
    parse_reply,
    peek_kind,
)
from protocols import ParameterError

from ._config import Address
from ._errors import ESAError

__all__ = [
    "FrameStream",
    "PeerRejected",
    "ReadTimeout",
    "SubmitStats",
    "TrapSet",
    "close_epoch",
    "close_epochs_together",
    "commit_traps",
    "make_traps",
    "open_traps",
    "query",
    "request",
    "serve_listeners",
    "submit_reports",
    "trap_statement",
]


class ReadTimeout(ESAError):
    """A peer did not deliver a whole frame within the read timeout."""

    reason = "timeout"


class PeerClosed(ESAError):
    """The peer closed the connection (between frames or mid-frame)."""

    reason = "half_open"


class PeerRejected(ESAError):
    """The peer answered with a REJECT frame."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"peer rejected the frame: {reason} ({detail})")
        self.reason = reason
        self.detail = detail


class FrameStream:
    """Length-prefixed frames on a trio stream with a size cap and a per-frame deadline."""

    def __init__(self, stream: trio.abc.Stream, *, max_frame: int, read_timeout: float) -> None:
        self.stream = stream
        self.max_frame = max_frame
        self.read_timeout = read_timeout
        self._buf = bytearray()

    async def _read_exactly(self, n: int, deadline: float, *, at_boundary: bool) -> bytes:
        while len(self._buf) < n:
            with trio.move_on_at(deadline) as scope:
                # Never ask for more than the frame still needs: memory stays bounded.
                data = await self.stream.receive_some(min(65536, n - len(self._buf)))
            if scope.cancelled_caught:
                raise ReadTimeout(f"no complete frame within {self.read_timeout} s")
            if not data:
                if at_boundary and not self._buf:
                    raise PeerClosed("connection closed")
                raise PeerClosed("connection closed mid-frame")
            self._buf += data
        out = bytes(self._buf[:n])
        del self._buf[:n]
        return out

    async def receive(self) -> bytes:
        """The next frame's payload.

        Raises:
            ReadTimeout: the frame did not complete within ``read_timeout``.
            PeerClosed: the peer closed the connection.
            FrameTooLarge: the length prefix exceeds ``max_frame`` (nothing buffered).
        """
        deadline = trio.current_time() + self.read_timeout
        header = await self._read_exactly(FRAME_HEADER_SIZE, deadline, at_boundary=True)
        length = frame_length(header, max_size=self.max_frame)
        return await self._read_exactly(length, deadline, at_boundary=False)

    async def send(self, payload: bytes) -> None:
        # ``max_frame`` bounds what we *accept*; what we send is our own and only needs to
        # fit the format (the peer enforces its own limit).
        await self.stream.send_all(encode_frame(payload, max_size=MAX_FRAME_SIZE))


#: What accept(2) fails with while the process or the system is out of descriptors or
#: socket memory: passing (connections close and free them), so the party waits and retries.
ACCEPT_OVERLOAD_ERRNOS: Final = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
ACCEPT_RETRY_SECONDS: Final = 0.1


async def serve_listeners(
    handler: Callable[[trio.SocketStream], Awaitable[object]],
    listeners: Sequence[trio.abc.Listener[trio.SocketStream]],
    *,
    on_overload: Callable[[OSError], None],
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Accept connections on every listener and serve each with ``handler`` in a new task,
    until cancelled (the listeners are closed on the way out).

    Like :func:`trio.serve_listeners`, except for what an overloaded ``accept`` does: trio
    logs a full traceback on every retry, ten a second for as long as descriptors stay
    exhausted. Here each failure goes to ``on_overload`` (the party counts it and logs a
    line a minute) and accepting resumes after :data:`ACCEPT_RETRY_SECONDS`. Any other
    accept error ends the service, as in trio.
    """

    async def accept_loop(listener: trio.abc.Listener[trio.SocketStream]) -> None:
        async with listener:
            while True:
                try:
                    stream = await listener.accept()
                except OSError as exc:
                    if exc.errno not in ACCEPT_OVERLOAD_ERRNOS:
                        raise
                    on_overload(exc)
                    await trio.sleep(ACCEPT_RETRY_SECONDS)
                    continue
                nursery.start_soon(handler, stream)

    async with trio.open_nursery() as nursery:
        for listener in listeners:
            nursery.start_soon(accept_loop, listener)
        task_status.started()


def expect_ack(payload: bytes) -> Ack:
    """Parse a response that must be an ACK; a REJECT becomes :class:`PeerRejected`."""
    kind = peek_kind(payload)
    if kind is FrameKind.REJECT:
        rej = parse_reject(payload)
        raise PeerRejected(rej.reason.name.lower(), rej.detail)
    if kind is not FrameKind.ACK:
        raise MalformedFrame(f"expected ACK, got {kind.name}")
    return parse_ack(payload)


async def request(
    address: Address,
    payloads: Sequence[bytes],
    *,
    timeout: float = 30.0,
    max_frame: int = 16 * 1024 * 1024,
) -> list[bytes]:
    """Open a connection, send each payload and collect one response frame per payload."""
    with trio.fail_after(timeout):
        stream = await trio.open_tcp_stream(address.host, address.port)
    async with stream:
        fs = FrameStream(stream, max_frame=max_frame, read_timeout=timeout)
        out = []
        for p in payloads:
            await fs.send(p)
            out.append(await fs.receive())
        return out


async def query(
    address: Address,
    what: QueryKind,
    params: dict[str, Any] | None = None,
    *,
    timeout: float = 60.0,
) -> dict[str, Any]:
    """Send a QUERY and return the decoded JSON reply."""
    import json

    body = json.dumps(params or {}).encode()
    (resp,) = await request(address, [Query(what, body).to_bytes()], timeout=timeout)
    if peek_kind(resp) is FrameKind.REJECT:
        rej = parse_reject(resp)
        raise PeerRejected(rej.reason.name.lower(), rej.detail)
    result: dict[str, Any] = json.loads(parse_reply(resp).body)
    return result


_last_control_ms = 0


def _control_time_ms() -> int:
    """The time stamp of a new operator command: wall-clock milliseconds, but strictly after
    this process's previous one (a party refuses a command not newer than the last it took,
    so two closes within one millisecond must not share a stamp)."""
    global _last_control_ms
    _last_control_ms = max(_last_control_ms + 1, int(time.time() * 1000))
    return _last_control_ms


async def close_epoch(
    address: Address, operator_key: Any, *, at: int | None = None, timeout: float = 30.0
) -> Ack:
    """Ask a first shuffler, as its operator, to close its open batch now.

    The party always closes at least one epoch — an empty one if no report is open — and
    its batch goes down the chain, so the analyzer records the epoch. The ACK's ``stored``
    is the number of epochs closed.

    With ``at`` (a CLOSE_EPOCH_AT command) the party closes only if its next epoch id is
    ``at`` — read it from STATUS's ``next_epoch`` — so the same close can be resent after
    a lost ACK: a party that has already closed it answers ``stored = 0``. Without ``at``
    do not blindly resend (the party may have closed already; docs/network.md).

    Raises:
        PeerRejected: ``epoch_ahead`` if ``at`` is past the party's next epoch.
    """
    now = _control_time_ms()
    if at is None:
        frame = ControlFrame(ControlCommand.CLOSE_EPOCH, now)
    else:
        frame = ControlFrame(ControlCommand.CLOSE_EPOCH_AT, now, at)
    (resp,) = await request(address, [frame.sign(operator_key)], timeout=timeout)
    return expect_ack(resp)


def _may_resend(exc: BaseException) -> bool:
    """Whether resending a frame after ``exc`` can help: anything but a party's definite
    refusal (a REJECT other than ``busy`` or ``internal``)."""
    return not isinstance(exc, PeerRejected) or exc.reason in {"busy", "internal"}


async def _back_off(attempt: int, base: float) -> None:
    """Sleep before resend number ``attempt``: ``base``·2^attempt, at most 2 s."""
    await trio.sleep(min(2.0, base * 2 ** min(attempt, 10)))


async def close_epochs_together(
    addresses: Sequence[Address],
    operator_key: Any,
    *,
    retries: int = 5,
    timeout: float = 30.0,
) -> list[int]:
    """Close one epoch on each chain (``addresses``: every chain's first shuffler) so that
    the chains' epoch numbers stay aligned, with every close safe to resend.

    Reads each party's ``next_epoch`` (STATUS) and takes the largest as the target. A
    chain behind it — an earlier close that reached only some chains, its ACK lost — is
    first closed at its own next ids until it reaches the target (its extra epochs are
    empty, as docs/network.md's manual recipe does). Then every chain is closed with
    CLOSE_EPOCH_AT the target; a close whose reply is lost is resent with the same target,
    up to ``retries`` times, and a party that had closed it answers 0.

    Returns how far each party's next epoch id moved (the epochs it closed, lost ACKs
    included).

    Raises:
        PeerRejected: a party refused a close for another reason than load.
        ESAError: a chain could not be brought to the target (e.g. the chains serve
            different ``[keys.epochs]``, so one close moves them by different amounts).
    """

    async def next_epoch(address: Address) -> int:
        return int((await query(address, QueryKind.STATUS, timeout=timeout))["next_epoch"])

    async def close_at(i: int, at: int) -> None:
        for attempt in range(retries + 1):
            try:
                await close_epoch(addresses[i], operator_key, at=at, timeout=timeout)
            except (OSError, trio.TooSlowError, trio.BrokenResourceError, ESAError) as exc:
                if not _may_resend(exc) or attempt == retries:
                    raise
                await _back_off(attempt, 0.05)
                continue
            return

    nexts = [await next_epoch(a) for a in addresses]
    target = max(nexts)
    for i, at in enumerate(nexts):
        while at < target:
            await close_at(i, at)
            at = await next_epoch(addresses[i])
        if at != target:
            raise ESAError(
                f"chain {i} is at epoch {at}, past the others' {target}: do its parties "
                "serve the same [keys.epochs]?"
            )
    for i in range(len(addresses)):
        await close_at(i, target)
    return [await next_epoch(a) - before for a, before in zip(addresses, nexts, strict=True)]


_ADDED_UP = (
    "reports",
    "acknowledged",
    "stored",
    "duplicates",
    "frames",
    "retries",
    "failed_frames",
)


@dataclass(slots=True)
class SubmitStats:
    """What the submitter saw. ``acknowledged`` counts each report once (its frame's ACK)."""

    reports: int = 0
    acknowledged: int = 0
    stored: int = 0
    duplicates: int = 0
    frames: int = 0
    retries: int = 0
    failed_frames: int = 0
    seconds: float = 0.0
    #: Why the failed frames failed: the party's REJECT reason, or the network error.
    failure_reasons: dict[str, int] = field(default_factory=dict)

    @classmethod
    def merged(cls, parts: Sequence[SubmitStats], *, seconds: float) -> SubmitStats:
        """Several submitters' counters (one per chain) added up; ``seconds`` is the wall
        time of them all, so the rate is the overall one."""
        out = cls(seconds=seconds)
        for p in parts:
            for name in _ADDED_UP:
                setattr(out, name, getattr(out, name) + getattr(p, name))
            for reason, count in p.failure_reasons.items():
                out.failure_reasons[reason] = out.failure_reasons.get(reason, 0) + count
        return out

    def _failed(self, exc: BaseException) -> None:
        self.failed_frames += 1
        reason = exc.reason if isinstance(exc, PeerRejected) else type(exc).__name__
        self.failure_reasons[reason] = self.failure_reasons.get(reason, 0) + 1

    @property
    def reports_per_second(self) -> float:
        return self.acknowledged / self.seconds if self.seconds > 0 else math.nan

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "reports_per_second": self.reports_per_second}


async def submit_reports(
    address: Address,
    reports: Sequence[bytes],
    *,
    key_epoch: int,
    connections: int = 50,
    frame_reports: int = 100,
    retries: int = 20,
    timeout: float = 30.0,
    backoff: float = 0.05,
) -> SubmitStats:
    """Submit ``reports`` to a first shuffler over ``connections`` concurrent connections.

    Reports are grouped into SUBMIT frames of ``frame_reports``; each connection takes the
    next frame, sends it and waits for its ACK. On any failure (refused connection, timeout,
    reset) the frame is resent on a fresh connection, up to ``retries`` times with
    exponential backoff. Resending is safe: the shuffler's inbox stores a report at most
    once, and a frame is counted acknowledged exactly once, when its ACK arrives.
    """
    stats = SubmitStats(reports=len(reports))
    frames = [
        SubmitFrame(key_epoch, tuple(reports[i : i + frame_reports])).to_bytes()
        for i in range(0, len(reports), frame_reports)
    ]
    stats.frames = len(frames)
    send, recv = trio.open_memory_channel[tuple[int, bytes]](len(frames))
    for item in enumerate(frames):
        send.send_nowait(item)
    send.close()
    counts = [len(reports[i : i + frame_reports]) for i in range(0, len(reports), frame_reports)]
    t0 = time.perf_counter()

    async def worker(recv: trio.MemoryReceiveChannel[tuple[int, bytes]]) -> None:
        fs: FrameStream | None = None
        async with recv:
            async for index, payload in recv:
                attempt = 0
                while True:
                    try:
                        if fs is None:
                            with trio.fail_after(timeout):
                                stream = await trio.open_tcp_stream(address.host, address.port)
                            fs = FrameStream(
                                stream, max_frame=len(payload) + 64, read_timeout=timeout
                            )
                        await fs.send(payload)
                        ack = expect_ack(await fs.receive())
                    except (
                        OSError,
                        trio.TooSlowError,
                        trio.BrokenResourceError,
                        ESAError,
                        WireError,
                    ) as exc:
                        if fs is not None:
                            await trio.aclose_forcefully(fs.stream)
                            fs = None
                        if not _may_resend(exc):
                            stats._failed(exc)  # the shuffler will never take it
                            break
                        attempt += 1
                        if attempt > retries:
                            stats._failed(exc)
                            break
                        stats.retries += 1
                        await _back_off(attempt, backoff)
                        continue
                    stats.acknowledged += counts[index]
                    stats.stored += ack.stored
                    stats.duplicates += ack.duplicates
                    break
        if fs is not None:
            await fs.stream.aclose()

    async with trio.open_nursery() as nursery:
        for _ in range(max(1, min(connections, len(frames)))):
            nursery.start_soon(worker, recv.clone())
    recv.close()
    stats.seconds = time.perf_counter() - t0
    return stats


#: Sizes in a trap statement (:func:`trap_statement`).
TRAP_KEY_SIZE: Final = 32
TRAP_COMMITMENT_SIZE: Final = 32
TRAP_NONCE_SIZE: Final = 32
_TRAP_CONTEXTS: Final = {
    "commit": b"esa/traps/v1/commit\x00",
    "open": b"esa/traps/v1/open\x00",
}


def trap_statement(
    action: Literal["commit", "open"], *, analyzer_key: bytes, key_epoch: int, commitment: bytes
) -> bytes:
    """The bytes an auditor signs (Ed25519, the key in the analyzer's ``[auditor]`` table)
    to commit to a trap set, or to open it::

        context ‖ B[32] analyzer_key ‖ u32 key_epoch ‖ B[32] commitment

    ``context`` is ``esa/traps/v1/commit\\0`` or ``esa/traps/v1/open\\0``, so a commit's
    signature never passes for an opening. ``analyzer_key`` is the analyzer's layer public
    key of ``key_epoch`` (the key the traps' innermost layer is sealed for): it names the
    analyzer and key epoch a signature is good for, so a captured statement cannot be
    replayed at another analyzer or under another key epoch. At one analyzer both are
    idempotent — a commitment is recorded once and opened once — so a replayed statement
    counts nothing again. The opening's content (nonce, trap layers) is bound through the
    commitment (:func:`esa._service.trap_commitment`).

    Raises:
        ParameterError: a field of the wrong size or range (programmer misuse).
    """
    if action not in _TRAP_CONTEXTS:
        raise ParameterError(f"action must be 'commit' or 'open', got {action!r}")
    if len(analyzer_key) != TRAP_KEY_SIZE or len(commitment) != TRAP_COMMITMENT_SIZE:
        raise ParameterError(
            f"analyzer_key and commitment are {TRAP_KEY_SIZE} bytes each, got "
            f"{len(analyzer_key)} and {len(commitment)}"
        )
    if isinstance(key_epoch, bool) or not isinstance(key_epoch, int) or not 0 <= key_epoch < 2**32:
        raise ParameterError(f"key_epoch must be an integer in [0, 2**32), got {key_epoch!r}")
    return _TRAP_CONTEXTS[action] + analyzer_key + key_epoch.to_bytes(4, "big") + commitment


@dataclass(frozen=True, slots=True)
class TrapSet:
    """An auditor's trap reports for one key epoch (see :func:`make_traps`).

    Attributes:
        key_epoch: the key epoch the traps are wrapped for.
        reports: what to submit to the first shuffler, mixed with real reports.
        analyzer_layers: the exact bytes each trap must deliver to the analyzer; distinct
            (an opening that lists one twice is refused).
        nonce: 32 random bytes that hide the commitment until it is opened.
        analyzer_key: the analyzer's layer public key the traps are sealed for (the last
            key of the route); the auditor's signatures name it (:func:`trap_statement`).
    """

    key_epoch: int
    reports: tuple[bytes, ...]
    analyzer_layers: tuple[bytes, ...]
    nonce: bytes
    analyzer_key: bytes

    def __post_init__(self) -> None:
        if len(self.nonce) != TRAP_NONCE_SIZE or len(self.analyzer_key) != TRAP_KEY_SIZE:
            raise ParameterError(
                f"nonce and analyzer_key are {TRAP_NONCE_SIZE} bytes each, got "
                f"{len(self.nonce)} and {len(self.analyzer_key)}"
            )

    @property
    def commitment(self) -> bytes:
        from ._service import trap_commitment

        return trap_commitment(self.nonce, self.key_epoch, list(self.analyzer_layers))

    def signature(self, action: Literal["commit", "open"], auditor: Ed25519PrivateKey) -> bytes:
        """The auditor's signature of this set's commitment (``commit``) or opening."""
        statement = trap_statement(
            action,
            analyzer_key=self.analyzer_key,
            key_epoch=self.key_epoch,
            commitment=self.commitment,
        )
        return auditor.sign(statement)


def make_traps(
    protocol: Any,
    route: Sequence[bytes],
    *,
    count: int,
    key_epoch: int,
    crowd_id: int = 0,
    channel: int = 0,
) -> TrapSet:
    """Build ``count`` trap reports an auditor commits to before an epoch.

    A trap is an ordinary report carrying a uniform fake message (the MURS fake sampler),
    wrapped in two steps: first the analyzer's layer alone, whose bytes the auditor keeps,
    then the shufflers' layers around it. Every shuffler peels its layer honestly and sees
    a report indistinguishable from a user's, so a shuffler that drops or replaces a
    fraction f of its reports loses each trap with probability f; after the epoch the
    auditor opens the commitment and the analyzer checks that each kept ciphertext arrived.
    Values come from the OS CSPRNG: traps are part of a live audit, not of the statistics.
    In a deployment of several chains, ``route`` is chain ``channel``'s route
    (:func:`esa._config.chain_route`) and the traps are that chain's fakes
    (``sample_channel_fakes``), so they look like the chain's honest traffic.
    """
    import crypto

    from ._roles import split_messages

    fakes = protocol.sample_channel_fakes(count, channel=channel, rng=crypto.csprng_generator())
    msgs = split_messages(protocol, fakes)
    payloads = crypto.pad_rows(protocol.encode(msgs), protocol.message_size)
    m = len(route) - 1
    crowds = [crowd_id] * len(payloads)
    inner = crypto.wrap_batch(
        [p.tobytes() for p in payloads],
        [route[m]],
        epoch=key_epoch,
        crowd_ids=crowds,
        first_hop=m,
        workers=1,
    )
    outer = crypto.wrap_batch(
        list(inner), list(route[:m]), epoch=key_epoch, crowd_ids=crowds, first_hop=0, workers=1
    )
    return TrapSet(
        key_epoch, tuple(outer), tuple(inner), os.urandom(TRAP_NONCE_SIZE), bytes(route[m])
    )


async def commit_traps(
    analyzer: Address, traps: TrapSet, *, auditor: Ed25519PrivateKey
) -> dict[str, Any]:
    """Send the commitment to the analyzer (before the epoch closes), signed with the
    ``auditor`` key whose public half is in the analyzer's ``[auditor]`` table.

    Resending is safe: the analyzer records a commitment once.

    Raises:
        PeerRejected: ``bad_signature`` if the analyzer has no ``[auditor]`` key or another
            one; ``unknown_key_epoch`` if it does not serve the traps' key epoch.
    """
    params = {
        "commitment": traps.commitment.hex(),
        "key_epoch": traps.key_epoch,
        "signature": traps.signature("commit", auditor).hex(),
    }
    return await query(analyzer, QueryKind.TRAP_COMMIT, params)


async def open_traps(
    analyzer: Address, traps: TrapSet, *, auditor: Ed25519PrivateKey
) -> dict[str, Any]:
    """Open the commitment after the epoch, signed like :func:`commit_traps`: how many
    traps reached the analyzer.

    The reply: ``traps`` (listed), ``repeated`` (opened before under another commitment,
    not counted again), ``arrived`` and ``missing`` (of the others), ``ok``. Resending is
    safe: a commitment is opened once, and the same opening again gets the same reply.

    Raises:
        PeerRejected: ``bad_signature`` as for :func:`commit_traps`; ``bad_trap_opening`` if
            the opening matches no commitment, lists a trap twice, comes before any epoch
            was processed since the commitment, or some trap that arrived is still waiting
            in an unprocessed epoch (open again once it is processed).
    """
    params = {
        "commitment": traps.commitment.hex(),
        "key_epoch": traps.key_epoch,
        "nonce": traps.nonce.hex(),
        "reports": [r.hex() for r in traps.analyzer_layers],
        "signature": traps.signature("open", auditor).hex(),
    }
    return await query(analyzer, QueryKind.TRAP_OPEN, params)
