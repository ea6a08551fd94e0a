"""Drive a :class:`esa.net.PartyService` over in-memory streams (no sockets, no
processes): what the service tests share."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol

import trio
import trio.testing

from esa.net import FrameStream, PartyService


class Connect(Protocol):
    """A client stream to the service: its batch port, or with ``query`` its query
    listener (RESULT is answered there only)."""

    def __call__(self, *, query: bool = False) -> Awaitable[FrameStream]: ...


def drive(
    svc: PartyService,
    script: Callable[[Connect], Awaitable[None]],
    *,
    work_loop: bool = False,
    max_frame: int = 2**24,
    read_timeout: float = 60.0,
    timeout: float = 60.0,
) -> None:
    """Run ``script`` with a factory of client streams, each served by ``svc.handle``, with
    the service's writer loop (and, with ``work_loop``, its epoch processing) running; the
    service is closed afterwards. ``timeout`` bounds the script, so a hang fails the test."""

    svc._install_summary()  # what PartyService.run does first

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(svc._writer_loop)
            if work_loop:
                nursery.start_soon(svc._work_loop)

            async def connect(*, query: bool = False) -> FrameStream:
                client, server = trio.testing.memory_stream_pair()
                nursery.start_soon(svc.handle_query if query else svc.handle, server)
                return FrameStream(client, max_frame=max_frame, read_timeout=read_timeout)

            with trio.fail_after(timeout):
                await script(connect)
            nursery.cancel_scope.cancel()

    try:
        trio.run(main)
    finally:
        svc.close()
