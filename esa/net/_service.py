"""A shuffler or the analyzer as a trio TCP service (``esa serve ...``).

:class:`PartyService` combines the jobs of a party, one module each: admission
(:mod:`esa.net._admission`), intake (:mod:`esa.net._intake`), closing epochs and the
operator's control (:mod:`esa.net._epochs`), processing and forwarding
(:mod:`esa.net._processing`), queries (:mod:`esa.net._queries`) and the trap audit
(:mod:`esa.net._traps`), over the state they share (:mod:`esa.net._party`). Here are the
connection loop that hands each frame to its job, and the service's life (listen, run
the loops, stop).

Life of an epoch at a shuffler at hop ``h``: reports arrive and are acknowledged only
after their inbox commit; the epoch closes; a fresh :class:`~esa.Shuffler` processes it
and the signed output commits in one transaction; it is sent to hop ``h+1`` until
acknowledged. The analyzer checks the chain of counts and stores the decoded messages and,
in the same transaction, the result summary that RESULT queries read.

Several chains (``channels`` > 1, e.g. RSum_RM: one per precision). Each shuffler belongs to
one chain (``channel``), holds that chain's keys (:func:`~esa.chain_route`) and adds
that chain's fakes. The analyzer takes batches from the last shuffler of every chain — the
signature says which — and analyzes epoch e only when every chain has delivered it; a
chain whose epoch was closed with no report delivers an empty batch, which counts as
delivered. To keep the chains' epoch numbers aligned, an operator's close on a multi-chain
deployment closes one epoch per key epoch in service, empty or not.

Two listeners. The batch port (``[listen]``) takes SUBMIT, BATCH, COUNTS and CONTROL
frames, STATUS in its public view (what a submitting client needs, nothing about the
party's counters or load), and the auditor's signed TRAP_COMMIT / TRAP_OPEN; it refuses
RESULT and the full STATUS. The query listener (``[query]``, default 127.0.0.1) answers
every QUERY, the full STATUS and RESULT included, and nothing else. With TLS (the
default: ``[tls]``) both speak TLS 1.3 with the party's certificate from the deployment
CA; the query listener requires a client certificate from that CA (mutual TLS), the batch
port takes clients without one, since users have none (their reports are sealed for the
chain, and upstream batches are signed).

Hostile input never takes the service down: every rejected frame is answered with a REJECT
naming its reason and counted under that name (the full ``STATUS`` shows the counters).
Framing errors (oversized prefix, timeout, mid-frame close) end the connection, since the
stream can no longer be trusted to be aligned; a well-framed bad payload leaves it open, but
such a connection is the first to be closed when the party runs out of connection slots.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import logging
import math
import os
import signal
import sqlite3
import sys
import time
from pathlib import Path
from typing import Any, Final

import trio

from .._errors import ConfigError, FrameRefused, PeerClosed, ReadTimeout, WireError
from ._admission import THROTTLE_STRIKES, Connection, peer_of
from ._config import PartyConfig
from ._epochs import EpochControl
from ._frames import (
    ACCEPT_RETRY_SECONDS,
    FrameStream,
    handshake,
    peer_stream,
    serve_listeners,
    tls_listeners,
)
from ._intake import Intake
from ._party import EVENT_LOGGER, event, log
from ._processing import Processing
from ._queries import Queries
from ._statedir import write_private_text
from ._wire import FrameKind, QueryKind, Reject, RejectReason, parse_query, peek_kind

__all__ = ["PartyService", "serve"]

#: Counter changes not carried by a commit are written at least this often (seconds).
COUNTER_FLUSH_SECONDS: Final = 1.0
#: One ``rejected`` event per reason and peer group per this many seconds; the event says
#: how many were not logged in between.
REJECT_LOG_SECONDS: Final = 10.0


class PartyService(Intake, EpochControl, Queries, Processing):
    """One party: its keys, inbox, counters, connection handler and background loops.

    Args:
        config: the validated party configuration.
        protocol: the configured protocol (default: built from ``config.protocol``).
    """

    async def handle_query(self, stream: trio.abc.Stream) -> None:
        """Serve one connection to the query listener (QUERY frames only).

        Args:
            stream: the accepted connection.
        """
        await self.handle(stream, query_port=True)

    def _reject(self, reason: str, conn: Connection | None) -> None:
        """Count a rejection under ``reason`` and log it (one ``rejected`` event per reason
        and peer group per :data:`REJECT_LOG_SECONDS`)."""
        self.rejected[reason] += 1
        group = conn.peer if conn is not None else None
        key = (reason, group)
        now = time.monotonic()
        last, skipped = self._reject_logged.get(key, (-math.inf, 0))
        if now - last < REJECT_LOG_SECONDS:
            self._reject_logged[key] = (last, skipped + 1)
            return
        self._reject_logged[key] = (now, 0)
        event(
            "rejected",
            party=self.party_name,
            reason=reason,
            peer_group=group,
            count=self.rejected[reason],
            not_logged_since_last=skipped,
        )

    async def handle(self, stream: trio.abc.Stream, *, query_port: bool = False) -> None:
        """Serve one connection until the peer closes it or breaks the framing.

        The connection takes a slot first (:class:`~esa.net.Admission`: a full
        party closes a connection that only had frames refused, or answers ``busy``),
        then completes its TLS handshake (a failed one is counted as ``tls_handshake``).

        Args:
            stream: the accepted connection.
            query_port: whether it came in on the query listener.
        """
        limits = self.config.limits
        conn = Connection(peer_of(peer_stream(stream)))
        refusal = self.admission.admit(conn)
        if refusal is None and not await handshake(stream):
            self.admission.release(conn)
            self._reject("tls_handshake", conn)
            return
        if refusal is not None:
            self._reject("busy", conn)
            with trio.move_on_after(1.0):
                fs = FrameStream(stream, max_frame=limits.max_frame_bytes, read_timeout=1.0)
                await fs.send(Reject(RejectReason.BUSY, refusal).to_bytes())
            await trio.aclose_forcefully(stream)
            return
        self.counters["connections"] += 1
        fs = FrameStream(
            stream, max_frame=limits.max_frame_bytes, read_timeout=limits.read_timeout_seconds
        )
        try:
            while True:
                try:
                    payload = await self._next_frame(fs, conn, throttle=not query_port)
                    if payload is None:  # closed to make room for another client
                        return
                except PeerClosed as exc:
                    if "mid-frame" in str(exc):
                        self._reject("half_open", conn)
                    return
                except ReadTimeout:
                    self._reject("timeout", conn)
                    await self._send_quietly(fs, Reject(RejectReason.TIMEOUT, "read timeout"))
                    return
                except WireError as exc:  # oversized or zero length prefix
                    self._reject(exc.reason, conn)
                    code = RejectReason[exc.reason.upper()]
                    await self._send_quietly(fs, Reject(code, str(exc)))
                    return
                try:
                    response = await self._dispatch(payload, conn, query_port=query_port)
                except WireError as exc:
                    conn.refused += 1
                    self._reject(exc.reason, conn)
                    response = Reject(RejectReason[exc.reason.upper()], str(exc)[:200]).to_bytes()
                except FrameRefused as exc:
                    conn.refused += 1
                    self._reject(exc.reason, conn)
                    response = Reject(
                        RejectReason(exc.code),
                        str(exc)[:200],
                        min(round(exc.retry_after * 1000), 0xFFFFFFFF),
                    ).to_bytes()
                except Exception as exc:
                    # A bug, odd data or a storage failure (disk full, database locked by
                    # another process) must not take the party down: answer, count, log,
                    # and keep serving. Nothing was acknowledged, so the sender resends
                    # (``busy`` and ``internal`` are the REJECTs a client retries).
                    code = _failure_code(exc)
                    conn.refused += 1
                    self._reject(code.name.lower(), conn)
                    log(f"{_kind_name(payload)} frame refused ({code.name.lower()}): {exc!r}")
                    response = Reject(code, _short(exc)).to_bytes()
                with trio.fail_after(limits.read_timeout_seconds):
                    await fs.send(response)
                if conn.sent_early and peek_kind(response) is FrameKind.REJECT:
                    conn.strikes += 1
                    if conn.strikes >= THROTTLE_STRIKES:  # it ignores the retry hints
                        self.counters["throttled_connections_closed"] += 1
                        return
        except (trio.BrokenResourceError, trio.ClosedResourceError, trio.TooSlowError):
            # Under TLS 1.3 a client without a required certificate shows up here too.
            self._reject("broken_connection", conn)
        finally:
            self.admission.release(conn)
            await trio.aclose_forcefully(stream)

    async def _next_frame(
        self, fs: FrameStream, conn: Connection, *, throttle: bool = True
    ) -> bytes | None:
        """The connection's next frame; None if it was closed meanwhile to make room.

        While the connection or its address group is throttled (a refusal's retry hint,
        :meth:`~esa.net.Admission.read_at`) nothing is read: its bytes wait in the kernel
        and TCP flow control holds the sender back. Whether the peer sent during that wait
        is noted (``conn.sent_early``): such a frame is refused unparsed. ``throttle``
        False (the query listener, which takes no SUBMIT): read at once.
        """
        payload: bytes | None = None
        conn.reading = trio.CancelScope()
        conn.idle_since = trio.current_time()
        try:
            with conn.reading:
                if throttle:
                    conn.sent_early = await _throttled(fs, self.admission.read_at(conn))
                payload = await fs.receive()
        finally:
            conn.reading = None
        # Checked after the frame too: the cancel may have come just as it arrived.
        return payload if conn in self.admission else None

    async def _send_quietly(self, fs: FrameStream, reject: Reject) -> None:
        with trio.move_on_after(1.0):
            with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                await fs.send(reject.to_bytes())

    async def _dispatch(
        self, payload: bytes, conn: Connection, *, query_port: bool = False
    ) -> bytes:
        kind = peek_kind(payload)
        if query_port:
            if kind is not FrameKind.QUERY:
                raise FrameRefused(
                    RejectReason.UNEXPECTED_KIND, f"the query listener takes QUERY, not {kind.name}"
                )
            return await self._on_query(payload, query_port=True)
        if kind is FrameKind.SUBMIT:
            return await self._on_submit(payload, conn)
        if kind is FrameKind.BATCH:
            return await self._on_batch(payload)
        if kind is FrameKind.COUNTS:
            return await self._on_counts(payload)
        if kind is FrameKind.CONTROL:
            return await self._on_control(payload)
        if kind is FrameKind.QUERY:
            if parse_query(payload).what is QueryKind.RESULT:
                raise FrameRefused(
                    RejectReason.UNEXPECTED_KIND,
                    "RESULT is served on the analyzer's query listener, not its batch port",
                )
            return await self._on_query(payload, query_port=False)
        raise FrameRefused(RejectReason.UNEXPECTED_KIND, f"a party does not accept {kind.name}")

    def _accept_failed(self, exc: OSError) -> None:
        """``accept`` failed for lack of descriptors or socket memory (the accept loop
        retries): counted, and logged once a minute with the number of failures between."""
        self.counters["accept_errors"] += 1
        name = errno.errorcode.get(exc.errno or 0, str(exc.errno))
        self._log_once(
            "accept",
            f"cannot accept connections ({name}: {exc.strerror}), retrying every "
            f"{ACCEPT_RETRY_SECONDS} s; the open-file limit (ulimit -n) should exceed "
            "[limits] max_connections with room to spare",
        )

    async def _flush_loop(self) -> None:
        """Write counter changes no commit carried (rejections, connections) every
        :data:`COUNTER_FLUSH_SECONDS`, and once more on the way out."""
        try:
            while True:
                await trio.sleep(COUNTER_FLUSH_SECONDS)
                await self._db(self.inbox.flush_counts)
        finally:
            with trio.CancelScope(shield=True), contextlib.suppress(sqlite3.Error):
                await self._db(self.inbox.flush_counts)

    async def run(self, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        """Listen, run the loops, and report the bound batch port through ``task_status``
        (the query listener's port is :attr:`query_port`).

        Args:
            task_status: trio's, for ``nursery.start``: started with the batch port.

        Raises:
            ConfigError: a listener cannot be opened.
        """
        await self._db(self._install_summary)
        await self._db(self._log_recovery)
        listen, qlisten = self.config.listen, self.config.query_listen
        listeners: list[trio.SocketListener] = []
        try:
            listeners = await trio.open_tcp_listeners(listen.port, host=listen.host)
            qlisteners = await trio.open_tcp_listeners(qlisten.port, host=qlisten.host)
        except OSError as exc:  # port in use, unknown host, no permission
            for lst in listeners:
                await lst.aclose()
            where = qlisten if listeners else listen
            raise ConfigError(f"cannot listen on {where}: {exc.strerror or exc}") from None
        self.port = int(listeners[0].socket.getsockname()[1])
        self.query_port = int(qlisteners[0].socket.getsockname()[1])
        # The query port first: a waiter on the port file finds both.
        write_private_text(self.config.query_port_file, str(self.query_port))
        write_private_text(self.config.port_file, str(self.port))
        mode = "plaintext (insecure_plaintext)" if self.tls_batch is None else "TLS"
        log(
            f"{self.party_name} (hop {self.hop}) listening on {listen.host}:{self.port}, "
            f"queries on {qlisten.host}:{self.query_port}, {mode}"
        )
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._writer_loop)
            nursery.start_soon(self._work_loop)
            nursery.start_soon(self._flush_loop)
            if self.is_first:
                nursery.start_soon(self._epoch_loop)
            await nursery.start(
                functools.partial(
                    serve_listeners,
                    self.handle,
                    tls_listeners(listeners, self.tls_batch),
                    on_overload=self._accept_failed,
                )
            )
            await nursery.start(
                functools.partial(
                    serve_listeners,
                    self.handle_query,
                    tls_listeners(qlisteners, self.tls_query),
                    on_overload=self._accept_failed,
                )
            )
            task_status.started(self.port)


async def _throttled(fs: FrameStream, until: float) -> bool:
    """Read nothing from ``fs`` until ``until`` (trio's clock); whether the peer sent
    anything meanwhile (known on a TCP socket only: False on other streams)."""
    if until <= trio.current_time():
        return False
    sent = False
    sock = peer_stream(fs.stream)
    if isinstance(sock, trio.SocketStream):
        with trio.move_on_at(until):
            await trio.lowlevel.wait_readable(sock.socket)
            sent = True
    await trio.sleep_until(until)
    return sent


def _storage_busy(exc: BaseException) -> bool:
    """Whether ``exc`` is SQLite waiting on another process's lock: passing, worth a retry."""
    return isinstance(exc, sqlite3.OperationalError) and any(
        word in str(exc) for word in ("locked", "busy")
    )


def _failure_code(exc: BaseException) -> RejectReason:
    """The REJECT for a frame that failed on the party's side: ``busy`` while the inbox is
    locked by another process, ``internal`` otherwise (disk full, a bug). A client resends
    on both."""
    return RejectReason.BUSY if _storage_busy(exc) else RejectReason.INTERNAL


def _short(exc: BaseException) -> str:
    """What a REJECT says about a party-side failure: its kind, not the party's internals."""
    return "inbox busy, retry" if _storage_busy(exc) else type(exc).__name__


def _kind_name(payload: bytes) -> str:
    try:
        return peek_kind(payload).name
    except WireError:
        return "malformed"


def serve(config: PartyConfig) -> int:
    """Run a party until SIGTERM/SIGINT (the ``esa serve`` entry point).

    Args:
        config: the party's validated configuration.

    Returns:
        0, the exit code, once the party stopped.

    Raises:
        ConfigError: the party cannot start (its state_dir or port is taken, …).
    """
    _log_events_to_stderr()
    service = PartyService(config)

    parent = config.simulation.get("parent_pid")

    async def orphan_watch(scope: trio.CancelScope) -> None:
        # Simulation only: a child of a run that died without tearing it down exits by
        # itself instead of lingering (its parent changes when the parent dies).
        while os.getppid() == parent:
            await trio.sleep(0.5)
        log(f"parent {parent} is gone; exiting")
        scope.cancel()

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            if isinstance(parent, int):
                nursery.start_soon(orphan_watch, nursery.cancel_scope)
            with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                await nursery.start(service.run)
                async for _ in signals:
                    nursery.cancel_scope.cancel()
                    break

    try:
        trio.run(main)
    except BaseExceptionGroup as group:
        # A start-up failure inside the nursery (e.g. the port is taken) arrives wrapped:
        # raise the configuration error itself, for a one-line message.
        config_errors = group.subgroup(ConfigError)
        if config_errors is None:
            raise
        raise _first_leaf(config_errors) from None
    finally:
        with contextlib.suppress(sqlite3.Error):
            service.inbox.flush_counts()
        service.close()
        Path(config.port_file).unlink(missing_ok=True)
        Path(config.query_port_file).unlink(missing_ok=True)
    return 0


def _log_events_to_stderr() -> None:
    """Send the structured events (one JSON object per line) to stderr, once."""
    logger = logging.getLogger(EVENT_LOGGER)
    if not any(getattr(h, "_esa_events", False) for h in logger.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(message)s"))
        handler._esa_events = True  # type: ignore[attr-defined]
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False


def _first_leaf(group: BaseExceptionGroup[Any]) -> BaseException:
    exc: BaseException = group
    while isinstance(exc, BaseExceptionGroup):
        exc = exc.exceptions[0]
    return exc
