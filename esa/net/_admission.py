"""Admission: the connection slots a party serves, who gets one when they run out, and the
rate and quota bounds a client is held to.

A party serves at most ``max_connections`` connections at once, and at most
``max_connections_per_peer`` from one client address (:func:`address_group`). When a
newcomer finds either full, a connection that has had a frame refused and waits for its
next one is closed to make room (:meth:`Admission.make_room`); failing that, the connection
that has waited longest for its next frame, if that is at least :data:`IDLE_GRACE_SECONDS`.
Idle connections are also closed under pressure: once ``evict_idle_above`` of
``max_connections`` is taken, every newcomer closes the longest-idle connection (idle at
least as long), so idle sockets cannot hold the slots against clients that send; and a
connection idle for ``read_timeout_seconds`` is always closed (its read times out). Only if
no connection qualifies is the newcomer refused as ``busy``. The grace keeps a client that
is between two frames (an ACK read, its next frame on the way) from losing its slot.

The first shuffler also rate-limits SUBMIT frames per connection and per address group
(:meth:`Admission.frame_wait`, token buckets) and keeps each address group's, or each
token holder's, reports per epoch (:meth:`Admission.charge`). An operator hands clients
tokens made by :func:`mint_token` (``esa token``).

Peeling a report (X25519 + AEAD) is the one costly step of intake, and it is shared fairly
between address groups: each group has at most ``peel_frames_per_peer`` frames peeled at
once, and one at a time once it has sent junk (:meth:`Admission.peel_turn`), so
a group flooding from many connections holds one peel worker while every other group has
its own; and the reports
of a group that do not open (junk) are charged to a token bucket that they may overdraw
(:meth:`Admission.junk_wait`, :meth:`Admission.charge_junk`): while it is in debt the
group's frames are refused before they are parsed, so junk costs the party at most
``invalid_reports_per_second_per_peer`` peels a second per group, on average, whatever the
sender does. Honest clients send no junk and never meet that bound.

A refusal that says when to retry (``retry_later``, ``quota_exceeded``) also throttles:
the party reads nothing more from that connection — and, when the address group's rate
or quota was the bound broken, from any connection of the group — until the hint has
passed, at most :data:`MAX_THROTTLE_SECONDS` (:meth:`Admission.throttle`,
:meth:`Admission.read_at`). The sender's next frame then waits in the kernel's buffers and
TCP flow control holds the sender back, at no cost to the party. A connection that sends
while throttled anyway has its frame refused (unparsed) once the throttle has passed, and
after :data:`THROTTLE_STRIKES` of those it is closed and its slot freed.
"""

from __future__ import annotations

import collections
import contextlib
import ipaddress
import math
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from typing import Final

import trio
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from ._config import Limits
from ._wire import ClientToken

__all__ = [
    "IDLE_GRACE_SECONDS",
    "MAX_THROTTLE_SECONDS",
    "THROTTLE_STRIKES",
    "Admission",
    "Connection",
    "TokenBucket",
    "address_group",
    "mint_token",
    "peer_of",
]

#: How long a connection must have waited for its next frame before it may be closed for
#: being idle (:meth:`Admission.admit`).
IDLE_GRACE_SECONDS: Final = 1.0
#: The longest a refusal stops a connection (or an address group) being read, whatever its
#: retry hint says (a quota's hint is the epoch deadline): a throttled connection holds a
#: slot, and a peer's close is noticed only when reading resumes.
MAX_THROTTLE_SECONDS: Final = 5.0
#: Frames a connection may send while throttled (each refused unparsed) before it is closed.
THROTTLE_STRIKES: Final = 3


@dataclass(slots=True)
class TokenBucket:
    """A token bucket: ``rate`` tokens a second, holding at most ``burst``.

    Args:
        rate: tokens added per second (> 0).
        burst: the most it holds; it starts full.
    """

    rate: float
    burst: float
    tokens: float = field(init=False)
    stamp: float = field(init=False)

    def __post_init__(self) -> None:
        if not self.rate > 0 or not self.burst >= 1:
            raise ValueError(f"a token bucket needs rate > 0 and burst >= 1, got {self}")
        self.tokens = self.burst
        self.stamp = trio.current_time()

    def _refill(self, now: float) -> None:
        self.tokens = min(self.burst, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now

    def wait(self) -> float:
        """Seconds until one token is there; 0 if one is (it is not taken)."""
        self._refill(trio.current_time())
        return 0.0 if self.tokens >= 1 else (1 - self.tokens) / self.rate

    def take(self) -> None:
        """Take one token (after :meth:`wait` said 0)."""
        self.tokens -= 1

    @property
    def full(self) -> bool:
        self._refill(trio.current_time())
        return self.tokens >= self.burst


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
    #: When it began waiting for its current (next) frame, on trio's clock.
    idle_since: float = field(default_factory=trio.current_time)
    #: Its SUBMIT rate limit (None: none), made on its first SUBMIT.
    bucket: TokenBucket | None = None
    #: Until when (trio's clock) nothing is read from it (:meth:`Admission.throttle`).
    throttled_until: float = -math.inf
    #: Whether its current frame was sent while it was throttled.
    sent_early: bool = False
    #: Frames it sent while throttled that were refused (:data:`THROTTLE_STRIKES`).
    strikes: int = 0
    #: The REJECT code of the refusal that last throttled it (0: none): a frame sent
    #: while throttled is refused with the same one.
    throttle_code: int = 0


class Admission:
    """The connections a party serves, oldest first, how many each peer holds, and the
    rate limits and per-epoch quotas of the first shuffler's SUBMIT frames.

    Args:
        limits: the party's ``[limits]``.
        counters: the party's counters (``connections_closed_for_room`` and
            ``idle_connections_closed`` are counted here).
    """

    def __init__(self, limits: Limits, counters: collections.Counter[str]) -> None:
        self._limits = limits
        self._counters = counters
        self._connections: dict[Connection, None] = {}
        self._per_peer: collections.Counter[str] = collections.Counter()
        self._peer_buckets: dict[str, TokenBucket] = {}
        self._used: collections.Counter[str] = collections.Counter()
        self._peer_until: dict[str, float] = {}
        self._junk: dict[str, TokenBucket] = {}
        # Junk buckets of groups with no connection left are forgotten once repaid: on
        # release, or by a sweep when there are this many (doubling past it).
        self._junk_sweep_at = 1024
        # Each group's peel limiter and how many frames hold or wait for it.
        self._peel_turns: dict[str, tuple[trio.CapacityLimiter, int]] = {}

    @property
    def active(self) -> int:
        """How many connections are counted in."""
        return len(self._connections)

    def __contains__(self, conn: Connection) -> bool:
        return conn in self._connections

    def admit(self, conn: Connection) -> str | None:
        """Count ``conn`` in, closing another to make room if a limit is reached or the
        slots are nearly all taken (``evict_idle_above``).

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
        limit = self._limits.max_connections
        if len(self._connections) >= limit:
            if not self.make_room(self._connections):
                return "too many connections"
        elif len(self._connections) >= self._limits.evict_idle_above * limit:
            self._close_idlest(self._connections)
        self._connections[conn] = None
        if peer is not None:
            self._per_peer[peer] += 1
        return None

    def make_room(self, among: Iterable[Connection]) -> bool:
        """Close one of ``among`` that waits for its next frame: one that has had a frame
        refused if any — the one refused most often, the oldest of those — else the one
        that has waited longest (:data:`IDLE_GRACE_SECONDS` at least); and stop counting it.

        A refused connection has delivered nothing the party took since its last refusal,
        and one that waits has nothing half done: closing it while it reads cuts nothing. A
        client of this package resends on a fresh connection either way (it never sends on
        after a REJECT, and a closed connection is a failure it retries).

        Args:
            among: the connections that may make room, oldest first.

        Returns:
            False if none waits for a frame.
        """
        among = list(among)
        candidates = [c for c in among if c.refused and c.reading is not None]
        if not candidates:
            return self._close_idlest(among)
        victim = max(candidates, key=lambda c: c.refused)  # the first maximum: the oldest
        self._close(victim)
        self._counters["connections_closed_for_room"] += 1
        return True

    def _close_idlest(self, among: Iterable[Connection]) -> bool:
        """Close the connection of ``among`` that has waited longest for its next frame, if
        that is :data:`IDLE_GRACE_SECONDS` or longer."""
        since = trio.current_time() - IDLE_GRACE_SECONDS
        waiting = [c for c in among if c.reading is not None and c.idle_since <= since]
        if not waiting:
            return False
        self._close(min(waiting, key=lambda c: c.idle_since))
        self._counters["idle_connections_closed"] += 1
        return True

    def _close(self, victim: Connection) -> None:
        assert victim.reading is not None
        victim.reading.cancel()
        self.release(victim)

    def release(self, conn: Connection) -> None:
        """Stop counting ``conn`` (once: when closed for room, and again when it ends).

        Args:
            conn: the connection.
        """
        if self._connections.pop(conn, False) is None and conn.peer is not None:
            self._per_peer[conn.peer] -= 1
            if not self._per_peer[conn.peer]:
                del self._per_peer[conn.peer]
                # A full bucket is a fresh one: forget it. A drained one stays, so that
                # reconnecting does not refill it.
                for buckets in (self._peer_buckets, self._junk):
                    bucket = buckets.get(conn.peer)
                    if bucket is not None and bucket.full:
                        del buckets[conn.peer]

    def frame_wait(self, conn: Connection, *, per_connection: float, per_peer: float) -> float:
        """Take one SUBMIT frame from ``conn``'s rate limits; returns 0 if it may be taken,
        else the seconds until it may (nothing is taken then).

        Args:
            conn: the sender.
            per_connection: frames per second one connection may send (0: no limit).
            per_peer: frames per second one address group may send (0: no limit).

        Returns:
            0, or the seconds to wait.
        """
        buckets: list[TokenBucket] = []
        if per_connection:
            if conn.bucket is None:
                conn.bucket = TokenBucket(per_connection, max(1.0, per_connection))
            buckets.append(conn.bucket)
        if per_peer and conn.peer is not None:
            bucket = self._peer_buckets.get(conn.peer)
            if bucket is None:
                bucket = self._peer_buckets[conn.peer] = TokenBucket(per_peer, max(1.0, per_peer))
            buckets.append(bucket)
        waits = [b.wait() for b in buckets]
        wait = max(waits, default=0.0)
        if not wait:
            for b in buckets:
                b.take()
            return wait
        # The group's bucket is the last one: when it is spent, the whole group waits.
        group_spent = bool(per_peer and conn.peer is not None and waits[-1])
        self.throttle(conn, wait, group=group_spent)
        return wait

    def throttle(self, conn: Connection, seconds: float, *, group: bool = False) -> None:
        """Read nothing more from ``conn`` — with ``group``, from any connection of its
        address group — for ``seconds`` (at most :data:`MAX_THROTTLE_SECONDS`).

        Args:
            conn: the connection just refused.
            seconds: the retry hint its REJECT carries.
            group: whether the address group's own bound (rate, quota) was broken.
        """
        until = trio.current_time() + min(seconds, MAX_THROTTLE_SECONDS)
        conn.throttled_until = max(conn.throttled_until, until)
        if group and conn.peer is not None:
            self._peer_until[conn.peer] = max(self._peer_until.get(conn.peer, -math.inf), until)

    def read_at(self, conn: Connection) -> float:
        """When (trio's clock) ``conn``'s next frame may be read: its own throttle's end or
        its address group's, whichever is later (in the past when it is not throttled).

        Args:
            conn: the connection.

        Returns:
            A time on trio's clock.
        """
        until = conn.throttled_until
        if conn.peer is not None:
            group = self._peer_until.get(conn.peer)
            if group is not None:
                if group <= trio.current_time():
                    del self._peer_until[conn.peer]  # passed: forget it
                else:
                    until = max(until, group)
        return until

    @contextlib.asynccontextmanager
    async def peel_turn(self, peer: str | None, frames: int) -> AsyncIterator[None]:
        """Wait for ``peer``'s turn to have a frame peeled: at most ``frames`` frames of an
        address group at a time, one at a time while its junk bucket is not full (it sent
        junk lately, :meth:`charge_junk`); first come first served (no wait for ``peer``
        None).

        Args:
            peer: the frame's address group.
            frames: ``peel_frames_per_peer`` (at least 1).

        Yields:
            Once it is the frame's turn; the turn ends when the block does.
        """
        if peer is None:
            yield
            return
        limiter, users = self._peel_turns.get(peer, (None, 0))
        if limiter is None:
            limiter = trio.CapacityLimiter(frames)
        junk = self._junk.get(peer)
        # Lowering it below what is borrowed only holds back the frames still to come.
        limiter.total_tokens = 1 if junk is not None and not junk.full else frames
        self._peel_turns[peer] = (limiter, users + 1)
        try:
            async with limiter:
                yield
        finally:
            limiter, users = self._peel_turns[peer]
            if users == 1:
                del self._peel_turns[peer]
            else:
                self._peel_turns[peer] = (limiter, users - 1)

    def junk_wait(self, conn: Connection, rate: float) -> float:
        """Seconds until ``conn``'s address group has paid for the junk it sent
        (:meth:`charge_junk`); 0 if it is not in debt (or ``rate`` is 0: no bound).

        Args:
            conn: the sender.
            rate: ``invalid_reports_per_second_per_peer``.

        Returns:
            0, or the seconds to wait.
        """
        bucket = self._junk.get(conn.peer) if rate and conn.peer is not None else None
        return 0.0 if bucket is None else bucket.wait()

    def charge_junk(self, conn: Connection, reports: int, rate: float) -> float:
        """Charge ``reports`` that did not open to ``conn``'s address group, which may go
        into debt by it.

        Args:
            conn: the sender.
            reports: the reports of its frame that did not open.
            rate: ``invalid_reports_per_second_per_peer`` (0: nothing is charged).

        Returns:
            Seconds until the group is out of debt (0 if it is not in debt).
        """
        if not rate or conn.peer is None or not reports:
            return 0.0
        bucket = self._junk.get(conn.peer)
        if bucket is None:
            if len(self._junk) >= self._junk_sweep_at:
                for peer in [p for p in self._junk if p not in self._per_peer]:
                    if self._junk[peer].full:
                        del self._junk[peer]
                self._junk_sweep_at = max(1024, 2 * len(self._junk))
            bucket = self._junk[conn.peer] = TokenBucket(rate, max(1.0, rate))
        bucket.wait()  # refills it
        bucket.tokens -= reports
        return bucket.wait()

    def used(self, key: str) -> int:
        """Reports charged to ``key`` this epoch (:meth:`charge`).

        Args:
            key: ``peer:…`` or ``client:…``.

        Returns:
            The reports charged.
        """
        return self._used[key]

    def charge(self, key: str, reports: int) -> None:
        """Charge ``reports`` to ``key`` (``peer:…`` or ``client:…``) for this epoch.

        Args:
            key: ``peer:…`` or ``client:…``.
            reports: the reports to charge.
        """
        self._used[key] += reports

    def new_epoch(self) -> None:
        """An epoch closed: every quota starts afresh."""
        self._used.clear()


def peer_of(stream: trio.abc.Stream) -> str | None:
    """What ``max_connections_per_peer`` counts a connection under (:func:`address_group`);
    None for a stream that is not a connected IP socket (tests' in-memory streams). A TLS
    stream counts under the address of the TCP connection it runs on."""
    while isinstance(stream, trio.SSLStream):
        stream = stream.transport_stream
    if not isinstance(stream, trio.SocketStream):
        return None
    try:
        host = stream.socket.getpeername()[0]
    except (OSError, IndexError, TypeError):
        return None  # the peer already left, or not an IP socket
    return address_group(host) if isinstance(host, str) else None


def address_group(host: str) -> str | None:
    """A client's IPv4 address, or its IPv6 /64: one host commonly has a whole /64 to pick
    addresses from. None if ``host`` is no IP address.

    Args:
        host: the client's address, as the listener reports it.

    Returns:
        The group's name, or None.
    """
    try:
        addr = ipaddress.ip_address(host)
    except ValueError:
        return None
    if isinstance(addr, ipaddress.IPv6Address):
        if addr.ipv4_mapped is not None:  # a dual-stack listener's IPv4 client
            return str(addr.ipv4_mapped)
        return str(ipaddress.IPv6Network((int(addr) >> 64 << 64, 64)))
    return str(addr)


def mint_token(
    operator_key: Ed25519PrivateKey,
    *,
    deployment: str,
    key_epoch: int,
    client_id: str,
    expires_at: int,
    quota: int,
) -> bytes:
    """A client token signed by the operator: what a first shuffler's
    ``[admission] require_client_token`` asks for, and what
    :func:`~esa.net.submit_reports` shows with ``token=``.

    Args:
        operator_key: the ``[operator]`` signing key (its public key is in the party's config).
        deployment: the deployment id the party binds tokens to: its manifest's
            ``deployment_id`` (32 hex digits) when it has a manifest, else its
            ``[admission] deployment_id``.
        key_epoch: the key epoch the client's reports are wrapped for.
        client_id: whom the party keeps the quota under (1..64 bytes of UTF-8).
        expires_at: when the token stops being taken, in Unix seconds.
        quota: reports the client may have checked per epoch (0: no quota).

    Returns:
        The token's bytes.

    Raises:
        crypto.CryptoParameterError: a field out of range (an id too long, a negative time).
    """
    token = ClientToken(deployment, key_epoch, client_id, expires_at, quota)
    return token.sign(operator_key)
