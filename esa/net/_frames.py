"""Frames over trio streams: bounded, timed reads; the accept loop; one request/response.

Every read has a deadline: a frame (header *and* body) must arrive within
``read_timeout`` seconds of the first byte being awaited, so a slow-loris peer that trickles
one byte per second is cut off rather than holding a connection forever. A length prefix
above ``max_frame`` is refused before any of its body is buffered, so a connection never
holds more than ``max_frame`` bytes of input.
"""

from __future__ import annotations

import errno
from collections.abc import Awaitable, Callable, Sequence
from typing import Final

import trio

from .._errors import MalformedFrame, PeerClosed, PeerRejected, ReadTimeout
from ._config import Address
from ._wire import (
    FRAME_HEADER_SIZE,
    MAX_FRAME_SIZE,
    Ack,
    FrameKind,
    encode_frame,
    frame_length,
    parse_ack,
    parse_reject,
    peek_kind,
)

__all__ = [
    "ACCEPT_OVERLOAD_ERRNOS",
    "ACCEPT_RETRY_SECONDS",
    "FrameStream",
    "expect_ack",
    "request",
    "serve_listeners",
]


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
