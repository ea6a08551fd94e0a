"""Admission: the connection slots a party serves, and who gets one when they run out.

A party serves at most ``max_connections`` connections at once, and at most
``max_connections_per_peer`` from one client address (:func:`address_group`). When a
newcomer finds either full, a connection that has had a frame refused and waits for its
next one is closed to make room (:meth:`Admission.make_room`); only if there is none is
the newcomer refused as ``busy``. So junk that is answered with REJECTs cannot hold slots
against real clients, and no one address can hold all of them with valid frames either.
"""

from __future__ import annotations

import collections
import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass

import trio

from ._config import Limits

__all__ = ["Admission", "Connection", "address_group", "peer_of"]


@dataclass(slots=True, eq=False)
class Connection:
    """A served connection, as the connection limits see it."""

    #: What ``max_connections_per_peer`` counts it under (:func:`peer_of`); None: no limit.
    peer: str | None
    #: Frames answered with a REJECT.
    refused: int = 0
    #: Set while the handler waits for the next frame: cancelling it then closes the
    #: connection with nothing half done (:meth:`Admission.make_room`).
    reading: trio.CancelScope | None = None


class Admission:
    """The connections a party serves, oldest first, and how many each peer holds.

    Args:
        limits: the party's ``[limits]``.
        counters: the party's counters (``connections_closed_for_room`` is counted here).
    """

    def __init__(self, limits: Limits, counters: collections.Counter[str]) -> None:
        self._limits = limits
        self._counters = counters
        self._connections: dict[Connection, None] = {}
        self._per_peer: collections.Counter[str] = collections.Counter()

    @property
    def active(self) -> int:
        """How many connections are counted in."""
        return len(self._connections)

    def __contains__(self, conn: Connection) -> bool:
        return conn in self._connections

    def admit(self, conn: Connection) -> str | None:
        """Count ``conn`` in, closing another to make room if a limit is reached.

        Args:
            conn: the newcomer.

        Returns:
            Why it cannot be served, or None once it is counted.
        """
        peer = conn.peer
        per_peer = self._limits.max_connections_per_peer
        peer_full = peer is not None and self._per_peer[peer] >= per_peer
        if peer_full and not self.make_room(c for c in self._connections if c.peer == peer):
            return "too many connections from your address"
        full = len(self._connections) >= self._limits.max_connections
        if full and not self.make_room(self._connections):
            return "too many connections"
        self._connections[conn] = None
        if peer is not None:
            self._per_peer[peer] += 1
        return None

    def make_room(self, among: Iterable[Connection]) -> bool:
        """Close one of ``among`` that has had a frame refused and is waiting for its next
        frame — the one refused most often, the oldest of those — and stop counting it.

        Such a connection has delivered nothing the party took since its last refusal, and
        closing it while it reads cuts nothing half done. A client of this package never
        sends on after a REJECT anyway (it resends on a fresh connection), and a connection
        that only ever sent valid frames is never closed this way.

        Args:
            among: the connections that may make room, oldest first.

        Returns:
            False if none qualifies.
        """
        candidates = [c for c in among if c.refused and c.reading is not None]
        if not candidates:
            return False
        victim = max(candidates, key=lambda c: c.refused)  # the first maximum: the oldest
        assert victim.reading is not None
        victim.reading.cancel()
        self.release(victim)
        self._counters["connections_closed_for_room"] += 1
        return True

    def release(self, conn: Connection) -> None:
        """Stop counting ``conn`` (once: when closed for room, and again when it ends)."""
        if self._connections.pop(conn, False) is None and conn.peer is not None:
            self._per_peer[conn.peer] -= 1
            if not self._per_peer[conn.peer]:
                del self._per_peer[conn.peer]


def peer_of(stream: trio.abc.Stream) -> str | None:
    """What ``max_connections_per_peer`` counts a connection under (:func:`address_group`);
    None for a stream that is not a connected IP socket (tests' in-memory streams)."""
    if not isinstance(stream, trio.SocketStream):
        return None
    try:
        host = stream.socket.getpeername()[0]
    except (OSError, IndexError, TypeError):
        return None  # the peer already left, or not an IP socket
    return address_group(host) if isinstance(host, str) else None


def address_group(host: str) -> str | None:
    """A client's IPv4 address, or its IPv6 /64: one host commonly has a whole /64 to pick
    addresses from. None if ``host`` is no IP address."""
    try:
        addr = ipaddress.ip_address(host)
    except ValueError:
        return None
    if isinstance(addr, ipaddress.IPv6Address):
        if addr.ipv4_mapped is not None:  # a dual-stack listener's IPv4 client
            return str(addr.ipv4_mapped)
        return str(ipaddress.IPv6Network((int(addr) >> 64 << 64, 64)))
    return str(addr)
