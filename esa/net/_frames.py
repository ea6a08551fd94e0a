"""Frames over trio streams: bounded, timed reads; the accept loop; one request/response;
TLS on both ends (:func:`open_stream`, :func:`tls_listeners`, :func:`handshake`).

Every read has a deadline: a frame (header *and* body) must arrive within
``read_timeout`` seconds of the first byte being awaited, so a slow-loris peer that trickles
one byte per second is cut off rather than holding a connection forever. A length prefix
above ``max_frame`` is refused before any of its body is buffered, so a connection never
holds more than ``max_frame`` bytes of input.
"""

from __future__ import annotations

import errno
import ssl
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
    "HANDSHAKE_TIMEOUT_SECONDS",
    "FrameStream",
    "expect_ack",
    "handshake",
    "open_stream",
    "peer_stream",
    "request",
    "serve_listeners",
    "tls_listeners",
]

#: A TLS handshake on a listener must complete within this many seconds.
HANDSHAKE_TIMEOUT_SECONDS: Final = 10.0


async def open_stream(address: Address, *, timeout: float) -> trio.abc.Stream:
    """Connect to ``address``: TLS with ``address.tls`` when set (the server's certificate
    must come from the deployment CA and name ``address.host``), else plain TCP.

    Raises:
        OSError: the connection failed (TLS failures included: :class:`ssl.SSLError` is one).
        trio.TooSlowError: no connection (and handshake) within ``timeout``.
    """
    with trio.fail_after(timeout):
        if address.tls is None:
            return await trio.open_tcp_stream(address.host, address.port)
        stream = await trio.open_ssl_over_tcp_stream(
            address.host, address.port, ssl_context=address.tls, https_compatible=False
        )
        try:
            await stream.do_handshake()
        except trio.BrokenResourceError as exc:
            await trio.aclose_forcefully(stream)
            raise ConnectionError(f"TLS handshake with {address} failed: {exc.__cause__}") from None
        return stream


def tls_listeners(
    listeners: Sequence[trio.SocketListener], context: ssl.SSLContext | None
) -> list[trio.abc.Listener[trio.abc.Stream]]:
    """``listeners`` wrapped in TLS with ``context`` (unchanged when it is None)."""
    if context is None:
        return list(listeners)
    return [trio.SSLListener(lst, context, https_compatible=False) for lst in listeners]


async def handshake(stream: trio.abc.Stream) -> bool:
    """Complete a server-side TLS handshake (a no-op on plain TCP) within
    :data:`HANDSHAKE_TIMEOUT_SECONDS`; False if the peer failed it or went away (the
    stream is then closed)."""
    if not isinstance(stream, trio.SSLStream):
        return True
    try:
        with trio.fail_after(HANDSHAKE_TIMEOUT_SECONDS):
            await stream.do_handshake()
    except (trio.BrokenResourceError, trio.ClosedResourceError, trio.TooSlowError):
        await trio.aclose_forcefully(stream)
        return False
    return True


def peer_stream(stream: trio.abc.Stream) -> trio.abc.Stream:
    """The TCP stream under a TLS stream (where the peer's address is), else ``stream``."""
    while isinstance(stream, trio.SSLStream):
        stream = stream.transport_stream
    return stream


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
                try:
                    data = await self.stream.receive_some(min(65536, n - len(self._buf)))
                except trio.BrokenResourceError:
                    # Many TLS clients close without a close_notify: between two frames
                    # that is an ordinary close, not a broken connection.
                    if isinstance(self.stream, trio.SSLStream) and at_boundary and not self._buf:
                        raise PeerClosed("connection closed") from None
                    raise
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

        Returns:
            The payload, without its length prefix.

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
        """Send one frame: ``payload`` after its length prefix.

        Args:
            payload: the frame's payload (1 byte to :data:`MAX_FRAME_SIZE`).
        """
        await self.stream.send_all(encode_frame(payload, max_size=MAX_FRAME_SIZE))


#: What accept(2) fails with while the process or the system is out of descriptors or
#: socket memory: passing (connections close and free them), so the party waits and retries.
ACCEPT_OVERLOAD_ERRNOS: Final = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
ACCEPT_RETRY_SECONDS: Final = 0.1


async def serve_listeners(
    handler: Callable[[trio.abc.Stream], Awaitable[object]],
    listeners: Sequence[trio.abc.Listener[trio.abc.Stream]],
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

    Args:
        handler: serves one connection.
        listeners: the listeners to accept on.
        on_overload: called with each accept error of an exhausted process or system.
        task_status: trio's, for ``nursery.start`` (started once every accept loop runs).
    """

    async def accept_loop(listener: trio.abc.Listener[trio.abc.Stream]) -> None:
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
    """Parse a response that must be an ACK; a REJECT becomes :class:`PeerRejected`.

    Args:
        payload: the response frame's payload.

    Returns:
        The ACK.

    Raises:
        PeerRejected: the response is a REJECT (its reason, detail and retry wait).
        MalformedFrame: the response is another kind of frame.
    """
    kind = peek_kind(payload)
    if kind is FrameKind.REJECT:
        rej = parse_reject(payload)
        raise PeerRejected(rej.reason.name.lower(), rej.detail, rej.retry_after_ms / 1000)
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
    """Open a connection (TLS if ``address.tls``), send each payload and collect one
    response frame per payload.

    Args:
        address: the party.
        payloads: the frame payloads to send, in order.
        timeout: seconds for the connection and each response.
        max_frame: the largest response accepted, in bytes.

    Returns:
        One response payload per payload sent, in order.
    """
    stream = await open_stream(address, timeout=timeout)
    async with stream:
        fs = FrameStream(stream, max_frame=max_frame, read_timeout=timeout)
        out = []
        for p in payloads:
            await fs.send(p)
            out.append(await fs.receive())
        return out
