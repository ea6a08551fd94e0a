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
acknowledged. The analyzer checks the chain of counts and stores the decoded messages; a
RESULT query runs the protocol's estimator over every processed epoch.

Several chains (``channels`` > 1, e.g. RSum_RM: one per precision). Each shuffler belongs to
one chain (``channel``), holds that chain's keys (:func:`~esa.chain_route`) and adds
that chain's fakes. The analyzer takes batches from the last shuffler of every chain — the
signature says which — and analyzes epoch e only when every chain has delivered it; a
chain whose epoch was closed with no report delivers an empty batch, which counts as
delivered. To keep the chains' epoch numbers aligned, an operator's close on a multi-chain
deployment closes one epoch per key epoch in service, empty or not.

Hostile input never takes the service down: every rejected frame is answered with a REJECT
naming its reason and counted under that name (``STATUS`` shows the counters). Framing
errors (oversized prefix, timeout, mid-frame close) end the connection, since the stream
can no longer be trusted to be aligned; a well-framed bad payload leaves it open, but such a
connection is the first to be closed when the party runs out of connection slots.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import signal
import sqlite3
from pathlib import Path
from typing import Any

import trio

from .._errors import ConfigError, FrameRefused, PeerClosed, ReadTimeout, WireError
from ._admission import Connection, peer_of
from ._config import PartyConfig
from ._epochs import EpochControl
from ._frames import ACCEPT_RETRY_SECONDS, FrameStream, serve_listeners
from ._intake import Intake
from ._party import log
from ._processing import Processing
from ._queries import Queries
from ._wire import FrameKind, Reject, RejectReason, peek_kind

__all__ = ["PartyService", "serve"]


class PartyService(Intake, EpochControl, Queries, Processing):
    """One party: its keys, inbox, counters, connection handler and background loops.

    Args:
        config: the validated party configuration.
        protocol: the configured protocol (default: built from ``config.protocol``).
    """

    async def handle(self, stream: trio.abc.Stream) -> None:
        """Serve one connection until the peer closes it or breaks the framing.

        The connection takes a slot first (:class:`~esa.net.Admission`: a full
        party closes a connection that only had frames refused, or answers ``busy``).
        """
        limits = self.config.limits
        conn = Connection(peer_of(stream))
        refusal = self.admission.admit(conn)
        if refusal is not None:
            self.rejected["busy"] += 1
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
                    payload = await self._next_frame(fs, conn)
                    if payload is None:  # closed to make room for another client
                        return
                except PeerClosed as exc:
                    if "mid-frame" in str(exc):
                        self.rejected["half_open"] += 1
                    return
                except ReadTimeout:
                    self.rejected["timeout"] += 1
                    await self._send_quietly(fs, Reject(RejectReason.TIMEOUT, "read timeout"))
                    return
                except WireError as exc:  # oversized or zero length prefix
                    self.rejected[exc.reason] += 1
                    code = RejectReason[exc.reason.upper()]
                    await self._send_quietly(fs, Reject(code, str(exc)))
                    return
                try:
                    response = await self._dispatch(payload)
                except WireError as exc:
                    conn.refused += 1
                    self.rejected[exc.reason] += 1
                    response = Reject(RejectReason[exc.reason.upper()], str(exc)[:200]).to_bytes()
                except FrameRefused as exc:
                    conn.refused += 1
                    self.rejected[exc.reason] += 1
                    response = Reject(RejectReason(exc.code), str(exc)[:200]).to_bytes()
                except Exception as exc:
                    # A bug, odd data or a storage failure (disk full, database locked by
                    # another process) must not take the party down: answer, count, log,
                    # and keep serving. Nothing was acknowledged, so the sender resends
                    # (``busy`` and ``internal`` are the REJECTs a client retries).
                    code = _failure_code(exc)
                    conn.refused += 1
                    self.rejected[code.name.lower()] += 1
                    log(f"{_kind_name(payload)} frame refused ({code.name.lower()}): {exc!r}")
                    response = Reject(code, _short(exc)).to_bytes()
                with trio.fail_after(limits.read_timeout_seconds):
                    await fs.send(response)
        except (trio.BrokenResourceError, trio.ClosedResourceError, trio.TooSlowError):
            self.rejected["broken_connection"] += 1
        finally:
            self.admission.release(conn)
            await trio.aclose_forcefully(stream)

    async def _next_frame(self, fs: FrameStream, conn: Connection) -> bytes | None:
        """The connection's next frame; None if it was closed meanwhile to make room."""
        payload: bytes | None = None
        conn.reading = trio.CancelScope()
        try:
            with conn.reading:
                payload = await fs.receive()
        finally:
            conn.reading = None
        # Checked after the frame too: the cancel may have come just as it arrived.
        return payload if conn in self.admission else None

    async def _send_quietly(self, fs: FrameStream, reject: Reject) -> None:
        with trio.move_on_after(1.0):
            with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                await fs.send(reject.to_bytes())

    async def _dispatch(self, payload: bytes) -> bytes:
        kind = peek_kind(payload)
        if kind is FrameKind.SUBMIT:
            return await self._on_submit(payload)
        if kind is FrameKind.BATCH:
            return await self._on_batch(payload)
        if kind is FrameKind.COUNTS:
            return await self._on_counts(payload)
        if kind is FrameKind.CONTROL:
            return await self._on_control(payload)
        if kind is FrameKind.QUERY:
            return await self._on_query(payload)
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

    async def run(self, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        """Listen, run the loops, and report the bound port through ``task_status``."""
        listen = self.config.listen
        try:
            listeners = await trio.open_tcp_listeners(listen.port, host=listen.host)
        except OSError as exc:  # port in use, unknown host, no permission
            raise ConfigError(f"cannot listen on {listen}: {exc.strerror or exc}") from None
        self.port = int(listeners[0].socket.getsockname()[1])
        tmp = self.config.port_file.with_suffix(".tmp")
        tmp.write_text(str(self.port))
        os.replace(tmp, self.config.port_file)
        log(
            f"{self.party_name} (hop {self.hop}) listening on {self.config.listen.host}:{self.port}"
        )
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._writer_loop)
            nursery.start_soon(self._work_loop)
            if self.is_first:
                nursery.start_soon(self._epoch_loop)
            await nursery.start(
                functools.partial(
                    serve_listeners, self.handle, listeners, on_overload=self._accept_failed
                )
            )
            task_status.started(self.port)


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
        service.close()
        Path(config.port_file).unlink(missing_ok=True)
    return 0


def _first_leaf(group: BaseExceptionGroup[Any]) -> BaseException:
    exc: BaseException = group
    while isinstance(exc, BaseExceptionGroup):
        exc = exc.exceptions[0]
    return exc
