"""The parties' clients: submit reports, query a party, close epochs as the operator.

Every function here is safe to call again after a failure: a party stores a report at
most once, and a close names the epoch it closes (:func:`close_epoch` with ``at``).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import trio

from .._errors import ESAError, PeerRejected, WireError
from ._config import Address
from ._frames import FrameStream, expect_ack, open_stream, request
from ._wire import (
    Ack,
    ControlCommand,
    ControlFrame,
    FrameKind,
    Query,
    QueryKind,
    SubmitFrame,
    parse_reject,
    parse_reply,
    peek_kind,
)

__all__ = [
    "SubmitStats",
    "close_epoch",
    "close_epochs_together",
    "query",
    "submit_reports",
]


async def query(
    address: Address,
    what: QueryKind,
    params: dict[str, Any] | None = None,
    *,
    timeout: float = 60.0,
) -> dict[str, Any]:
    """Send a QUERY and return the decoded JSON reply.

    Args:
        address: the party.
        what: the query.
        params: the query's JSON parameters.
        timeout: seconds for the connection and the reply.

    Returns:
        The party's JSON reply.

    Raises:
        PeerRejected: the party answered with a REJECT.
    """
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
    address: Address,
    operator_key: Any,
    *,
    at: int | None = None,
    party: str | None = None,
    deployment: bytes | None = None,
    timeout: float = 30.0,
) -> Ack:
    """Ask a first shuffler, as its operator, to close its open batch now.

    The party always closes at least one epoch — an empty one if no report is open — and
    its batch goes down the chain, so the analyzer records the epoch. The ACK's ``stored``
    is the number of epochs closed.

    The signed frame names the party (``party``, its key name, e.g. ``shuffler-1``) and
    the deployment (``deployment``, the manifest's 16-byte id), so no other party takes
    it. Give both from the signed manifest (``esa close-epoch --manifest`` does); a value
    left None is read from the party's STATUS reply, which is not signed: a party that
    lies there gets a command only it would take, never one for another party.

    With ``at`` (a CLOSE_EPOCH_AT command) the party closes only if its next epoch id is
    ``at`` — read it from STATUS's ``next_epoch`` — so the same close can be resent after
    a lost ACK: a party that has already closed it answers ``stored = 0``. Without ``at``
    do not blindly resend (the party may have closed already; docs/network.md).

    Args:
        address: the first shuffler.
        operator_key: the operator's Ed25519 private key, which signs the command.
        at: close only if the party's next epoch id is ``at`` (None: close now).
        party: the party's key name (None: from its STATUS reply).
        deployment: the deployment's 16-byte id (None: from the party's STATUS reply).
        timeout: seconds for each connection and reply.

    Returns:
        The party's ACK (``stored``: the number of epochs closed).

    Raises:
        PeerRejected: ``epoch_ahead`` if ``at`` is past the party's next epoch;
            ``wrong_target`` if the frame names another party or deployment.
    """
    if party is None or deployment is None:
        status = await query(address, QueryKind.STATUS, timeout=timeout)
        if party is None:
            party = str(status.get("party", ""))
        if deployment is None:
            said = status.get("deployment")
            deployment = bytes.fromhex(said) if isinstance(said, str) else bytes(16)
    now = _control_time_ms()
    if at is None:
        frame = ControlFrame(
            ControlCommand.CLOSE_EPOCH, now, target=party, deployment_id=deployment
        )
    else:
        frame = ControlFrame(
            ControlCommand.CLOSE_EPOCH_AT, now, at, target=party, deployment_id=deployment
        )
    (resp,) = await request(address, [frame.sign(operator_key)], timeout=timeout)
    return expect_ack(resp)


#: The REJECTs worth resending after: passing load, or a party's back-pressure and quotas
#: (which say when to retry, :attr:`PeerRejected.retry_after`).
_RESENDABLE = frozenset({"busy", "internal", "retry_later", "quota_exceeded"})


def _may_resend(exc: BaseException) -> bool:
    """Whether resending a frame after ``exc`` can help: anything but a party's definite
    refusal (a REJECT other than ``busy``, ``internal``, ``retry_later`` or
    ``quota_exceeded``)."""
    return not isinstance(exc, PeerRejected) or exc.reason in _RESENDABLE


async def _back_off(attempt: int, base: float) -> None:
    """Sleep before resend number ``attempt``: ``base``·2^attempt, at most 2 s."""
    await trio.sleep(min(2.0, base * 2 ** min(attempt, 10)))


async def close_epochs_together(
    addresses: Sequence[Address],
    operator_key: Any,
    *,
    parties: Sequence[str] | None = None,
    deployment: bytes | None = None,
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

    ``parties`` (each chain's first shuffler's key name) and ``deployment`` name whom
    the signed commands are for, as in :func:`close_epoch` (None: from STATUS).

    Args:
        addresses: every chain's first shuffler.
        operator_key: the operator's Ed25519 private key, which signs the commands.
        parties: each chain's first shuffler's key name (None: from STATUS).
        deployment: the deployment's 16-byte id (None: from STATUS).
        retries: resends of a close whose reply is lost.
        timeout: seconds for each connection and reply.

    Returns:
        How far each party's next epoch id moved (the epochs it closed, lost ACKs
        included), in the order of ``addresses``.

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
                await close_epoch(
                    addresses[i],
                    operator_key,
                    at=at,
                    party=None if parties is None else parties[i],
                    deployment=deployment,
                    timeout=timeout,
                )
            except (OSError, trio.TooSlowError, trio.BrokenResourceError, ESAError) as exc:
                if not _may_resend(exc) or attempt == retries:
                    raise
                await _back_off(attempt, 0.05)
                continue
            return

    if parties is not None and len(parties) != len(addresses):
        raise ValueError(f"{len(addresses)} addresses but {len(parties)} party names")
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
        time of them all, so the rate is the overall one.

        Args:
            parts: the submitters' counters.
            seconds: the wall time of them all.

        Returns:
            The sums, with ``seconds``; failure reasons added up too.
        """
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
        """The counters as a JSON object.

        Returns:
            One key per field, and ``reports_per_second``.
        """
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
    token: bytes = b"",
    max_wait: float = 5.0,
) -> SubmitStats:
    """Submit ``reports`` to a first shuffler over ``connections`` concurrent connections.

    Reports are grouped into SUBMIT frames of ``frame_reports``; each connection takes the
    next frame, sends it and waits for its ACK. On any failure (refused connection, timeout,
    reset) the frame is resent on a fresh connection, up to ``retries`` times with
    exponential backoff. Resending is safe: the shuffler's inbox stores a report at most
    once, and a frame is counted acknowledged exactly once, when its ACK arrives. A
    ``retry_later`` or ``quota_exceeded`` REJECT (the party's back-pressure) is resent
    after the wait it asks for, at most ``max_wait`` seconds, within the same ``retries``.

    ``token`` is an operator's client token (:func:`esa.net.mint_token`), shown in every
    frame; empty for a keyless client.

    Args:
        address: the first shuffler.
        reports: the onion reports.
        key_epoch: the key epoch the reports are sealed under.
        connections: concurrent connections.
        frame_reports: reports per SUBMIT frame.
        retries: resends of one frame before it counts as failed.
        timeout: seconds for each connection and ACK.
        backoff: the first retry's wait in seconds, doubled at every retry.
        token: the client token shown in every frame.
        max_wait: the longest back-pressure wait honoured, in seconds.

    Returns:
        What the submitter saw: reports acknowledged, stored and duplicated, frames sent,
        retried and failed (with why), and the time taken.
    """
    stats = SubmitStats(reports=len(reports))
    frames = [
        SubmitFrame(key_epoch, tuple(reports[i : i + frame_reports]), token).to_bytes()
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
                            stream = await open_stream(address, timeout=timeout)
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
                        hint = exc.retry_after if isinstance(exc, PeerRejected) else 0.0
                        if hint > 0:  # the party said when: wait that long, within bounds
                            await trio.sleep(min(max_wait, hint))
                        else:
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
