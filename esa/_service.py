"""A shuffler or the analyzer as a trio TCP service (``esa serve ...``).

The service is transport and durability around the role objects of :mod:`esa._roles`: it
never peels, thresholds, fakes, permutes or estimates itself, it calls
:class:`~esa.Shuffler` / :class:`~esa.Analyzer` (and the protocol's estimator) on the
reports its inbox holds.

Life of an epoch at a shuffler at hop ``h``:

1. reports arrive (SUBMIT from clients at hop 0; signed BATCH chunks + a COUNTS chain from
   hop ``h−1`` otherwise) and are acknowledged only after their inbox commit;
2. the epoch closes: at hop 0 when ``max_reports`` are open, ``deadline_seconds`` after the
   first open report, or on an operator CLOSE_EPOCH — which closes an epoch even when no
   report is open, so an empty batch (zero reports, counts all zero, no fakes) goes down the
   chain and the analyzer records the epoch; at later hops when the upstream batch is
   complete (all chunks and its counts);
3. a fresh :class:`~esa.Shuffler` processes the epoch in a worker thread; its output is cut
   into chunks signed with this party's Ed25519 key, and a signed :class:`CountStatement`
   is appended to the upstream chain; all of it commits in one transaction;
4. the chunks and the chain are sent to hop ``h+1`` until each is acknowledged (resends
   are byte-identical and idempotent at the receiver).

The analyzer does 1–3 with :class:`~esa.Analyzer`, checks the chain of counts (drop
detection) and stores the decoded messages; a RESULT query runs the protocol's estimator
over every processed epoch.

Several chains (``channels`` > 1, e.g. RSum_RM: one per precision). Each shuffler belongs to
one chain (``channel``), holds that chain's keys (:func:`~esa._config.chain_route`) and adds
that chain's fakes. The analyzer takes batches from the last shuffler of every chain — the
signature says which — files chain c's epoch e under inbox epoch ``e·C + c``, and analyzes
epoch e only when every chain has delivered it (:meth:`PartyService._process_group`); a
chain whose epoch was closed with no report delivers an empty batch, which counts as
delivered. To keep the chains' epoch numbers aligned, an operator's close on a multi-chain
deployment closes one epoch per key epoch in service, empty or not.

Hostile input never takes the service down: every rejected frame is answered with a REJECT
naming its reason and counted under that name (``STATUS`` shows the counters). Framing
errors (oversized prefix, timeout, mid-frame close) end the connection, since the stream
can no longer be trusted to be aligned; a well-framed bad payload leaves it open, but such a
connection is the first to be closed when the party runs out of connection slots
(:meth:`PartyService.handle`).
"""

from __future__ import annotations

import collections
import contextlib
import errno
import fcntl
import functools
import hashlib
import ipaddress
import itertools
import json
import math
import os
import pickle
import signal
import sqlite3
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

import numpy as np
import trio
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

import crypto
from crypto import (
    Ack,
    BadSignature,
    BatchChunk,
    ControlCommand,
    CountsFrame,
    CountStatement,
    FrameKind,
    KeyDirectory,
    PartyKeys,
    QueryKind,
    Reject,
    RejectReason,
    Reply,
    WireError,
    parse_query,
    parse_submit,
    peek_kind,
    reports_header,
    unverified_key_epoch,
    verify_batch,
    verify_control,
    verify_counts,
)
from protocols import ProtocolSpec, ShuffleProtocol, build_protocol

from ._codec import HopCodec, OnionCodec, make_codec
from ._config import PartyConfig, chain_route
from ._errors import ConfigError, ESAError
from ._inbox import (
    ConflictingBatch,
    EpochAhead,
    EpochRecord,
    Inbox,
    InboxDamaged,
    InboxError,
    TrapsNotProcessed,
)
from ._net import (
    ACCEPT_RETRY_SECONDS,
    TRAP_COMMITMENT_SIZE,
    FrameStream,
    PeerClosed,
    PeerRejected,
    ReadTimeout,
    expect_ack,
    serve_listeners,
    trap_statement,
)
from ._roles import Analyzer, Shuffler, check_shares, lost_estimate, reports_per_fake

__all__ = ["PartyService", "load_protocol", "serve", "trap_commitment"]

_CONTROL_WINDOW_MS = 5 * 60 * 1000  # an operator's clock may be this far off
_MESSAGE_PAGE_BYTES = 1 << 20  # decoded message bytes per RESULT reply page (hex doubles it)

T = TypeVar("T")


@dataclass(slots=True, eq=False)
class _Pending:
    """A frame waiting for the next group commit."""

    key_epoch: int
    reports: tuple[bytes, ...]
    done: trio.Event = field(default_factory=trio.Event)
    result: tuple[int, int] | None = None
    error: BaseException | None = None


@dataclass(slots=True, eq=False)
class _Connection:
    """A served connection, as the connection limits see it."""

    #: What ``max_connections_per_peer`` counts it under (:func:`_peer_of`); None: no limit.
    peer: str | None
    #: Frames answered with a REJECT.
    refused: int = 0
    #: Set while the handler waits for the next frame: cancelling it then closes the
    #: connection with nothing half done (:meth:`PartyService._make_room`).
    reading: trio.CancelScope | None = None


class _Abandoned(ESAError):
    """Raised in a worker thread whose result nobody waits for any more (a shutdown)."""


class _Rejected(ESAError):
    def __init__(self, reason: RejectReason, detail: str) -> None:
        super().__init__(detail)
        self.code = reason
        self.reason = reason.name.lower()


def load_protocol(spec: dict[str, Any]) -> ShuffleProtocol:
    """Build the protocol a config's ``[protocol]`` table names.

    ``pickle = FILE`` (written by :func:`simulations._tcp_run.run_tcp` for its own child
    processes) loads a configured protocol object; it is for local simulations only and the
    file must be trusted like the config itself.
    """
    if "pickle" in spec:
        with open(spec["pickle"], "rb") as fh:
            proto = pickle.load(fh)
        if not isinstance(proto, ShuffleProtocol):
            raise ConfigError(f"{spec['pickle']} does not hold a protocol")
        return proto
    table = protocol_table(spec)
    fields = {k: v for k, v in table.items() if k != "name"}
    return build_protocol(table["name"], ProtocolSpec(**fields))


def protocol_table(spec: Mapping[str, Any]) -> dict[str, Any]:
    """A config's ``[protocol]`` table checked, with its defaults filled in: what
    :func:`load_protocol` builds, and what STATUS tells clients (``esa submit`` encodes for
    it).

    Raises:
        ConfigError: an unknown or missing key, or a value of the wrong type.
    """
    known = {"name", "epsilon", "delta", "n", "domain", "bound", "fake_reports", "options"}
    unknown = set(spec) - known
    if unknown:
        raise ConfigError(f"[protocol]: unknown keys {sorted(unknown)}; allowed {sorted(known)}")
    missing = [k for k in ("name", "epsilon", "delta", "n") if k not in spec]
    if missing:
        raise ConfigError(f"[protocol] needs {', '.join(map(repr, missing))}")
    table = {"domain": 2, "bound": None, "fake_reports": 0, "options": {}, **spec}
    for key in ("epsilon", "delta", "n", "domain", "fake_reports"):
        value = table[key]
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"[protocol] {key} must be a number, got {value!r}")
    if not isinstance(table["bound"], str | None):
        raise ConfigError(f"[protocol] bound must be a bound's name, got {table['bound']!r}")
    if not isinstance(table["options"], dict):
        raise ConfigError(f"[protocol.options] must be a table, got {table['options']!r}")
    return {**table, "name": str(table["name"]), "options": dict(table["options"])}


def trap_commitment(nonce: bytes, key_epoch: int, analyzer_layers: list[bytes]) -> bytes:
    """An auditor's commitment to trap reports: SHA-256 over a 32-byte random nonce, the key
    epoch, and the sorted analyzer-layer ciphertexts the traps must deliver. Hiding (the
    nonce and the ciphertexts are unpredictable) and binding (collision resistance)."""
    h = hashlib.sha256(b"esa/traps/v1\x00" + nonce + key_epoch.to_bytes(4, "big"))
    for r in sorted(analyzer_layers):
        h.update(len(r).to_bytes(4, "big") + r)
    return h.digest()


def batch_id_for(verify_public: bytes, key_epoch: int, epoch: int) -> bytes:
    """The id of the batch a party forwards for an epoch: a function of who and when only,
    so a resend after a crash carries the same id and the receiver takes it once."""
    data = b"esa/batch-id/v1\x00" + verify_public + key_epoch.to_bytes(4, "big")
    return hashlib.sha256(data + epoch.to_bytes(8, "big")).digest()


def check_chain(
    chain: tuple[CountStatement, ...], *, hops: int, epoch: int, received: int
) -> list[str]:
    """Drop detection: the problems in a chain of count statements (empty = consistent).

    Every shuffler must appear once, in order, for this epoch; each hop's own counts must
    add up; each hop must have received what the previous one forwarded; the analyzer must
    have received what the last shuffler forwarded.
    """
    problems = []
    if [s.hop for s in chain] != list(range(hops)):
        problems.append(f"chain lists hops {[s.hop for s in chain]}, expected 0..{hops - 1}")
    for s in chain:
        if s.epoch != epoch:
            problems.append(f"hop {s.hop} signed epoch {s.epoch}, not {epoch}")
        if s.key_epoch != chain[0].key_epoch:
            problems.append(f"hop {s.hop} signed key epoch {s.key_epoch}")
        if not s.consistent:
            problems.append(f"hop {s.hop} counts do not add up: {_statement_json(s)}")
    for a, b in itertools.pairwise(chain):
        if b.received != a.forwarded:
            problems.append(
                f"hop {b.hop} received {b.received} but hop {a.hop} forwarded {a.forwarded}"
            )
    if chain and chain[-1].forwarded != received:
        problems.append(
            f"analyzer received {received} but hop {chain[-1].hop} forwarded {chain[-1].forwarded}"
        )
    return problems


def _statement_json(s: CountStatement) -> dict[str, Any]:
    d = asdict(s)
    d["batch_id"] = s.batch_id.hex()
    d.pop("signature")
    return d


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return _jsonable(obj.tolist())
    if isinstance(obj, np.generic):
        return _jsonable(obj.item())
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


class PartyService:
    """One party: its keys, inbox, counters, connection handler and background loops.

    Args:
        config: the validated party configuration.
        protocol: the configured protocol (default: built from ``config.protocol``).
    """

    def __init__(self, config: PartyConfig, *, protocol: ShuffleProtocol | None = None) -> None:
        self.config = config
        self.hop = config.hop
        self.protocol = protocol if protocol is not None else load_protocol(dict(config.protocol))
        self.keys: dict[int, PartyKeys] = {}
        self.routes: dict[int, list[bytes]] = {}
        # verify_keys: this party's own chain; chain_verify_keys: every chain (the analyzer
        # takes batches from the last shuffler of each).
        self.verify_keys: dict[int, list[Ed25519PublicKey]] = {}
        self.chain_verify_keys: dict[int, list[list[Ed25519PublicKey]]] = {}
        self.channels = config.channels
        self.channel = config.channel
        if self.protocol.channels != self.channels:
            # One chain for a protocol that needs one per channel (or the reverse) would
            # silently mix what the protocol keeps apart: refuse to start.
            raise ConfigError(
                f"{self.protocol.name} sends its messages through {self.protocol.channels} "
                f"shuffler chain(s), but the config says channels = {self.channels}"
            )
        shufflers = None
        name = crypto.analyzer_name()
        for key_epoch, directory in sorted(config.key_epochs.items()):
            kd = KeyDirectory.load(directory)
            chains = [
                chain_route(kd, channels=self.channels, channel=c) for c in range(self.channels)
            ]
            m = len(chains[0]) - 1
            if shufflers is not None and m != shufflers:
                raise ConfigError("every key epoch must have the same number of shufflers")
            shufflers = m
            own = chains[self.channel]
            if config.role == "shuffler":
                if config.hop >= m:
                    raise ConfigError(f"hop {config.hop} >= {m} shufflers per chain in {directory}")
                name = own[config.hop].name
            elif config.hop != m:
                raise ConfigError(f"the analyzer's hop is {m}, got {config.hop}")
            self.keys[key_epoch] = kd.private(name)
            self.routes[key_epoch] = [p.layer_public for p in own]
            self.chain_verify_keys[key_epoch] = [[p.verify_key() for p in c] for c in chains]
            self.verify_keys[key_epoch] = self.chain_verify_keys[key_epoch][self.channel]
        assert shufflers is not None
        self._name = name
        self.shufflers = shufflers
        self.codec: HopCodec = make_codec(
            config.crypto, message_size=self.protocol.message_size, layers=shufflers + 1
        )
        self.operator_key = (
            Ed25519PublicKey.from_public_bytes(config.operator_public_key)
            if config.operator_public_key
            else None
        )
        # Who signs trap commitments and openings (the analyzer's [auditor]); None: no audit.
        self.auditor_key = (
            Ed25519PublicKey.from_public_bytes(config.auditor_public_key)
            if config.auditor_public_key
            else None
        )
        self.fake_rng: np.random.Generator | None = None
        state = config.simulation.get("fake_rng_state")
        if state is not None:
            # Simulation only: reproduce the in-process run's fakes for the same seed.
            st = json.loads(state)
            bitgen = getattr(np.random, st["bit_generator"])()
            bitgen.state = st
            self.fake_rng = np.random.Generator(bitgen)
        self._lock = _lock_state_dir(config.state_dir)
        try:
            self.inbox = Inbox(config.inbox_path, party=self.party_name)
        except sqlite3.Error as exc:
            self._lock.close()
            raise ConfigError(f"cannot open the inbox {config.inbox_path}: {exc}") from None
        except BaseException:
            self._lock.close()
            raise
        try:
            self._last_control_ms = self._start_inbox()
        except BaseException:
            self.close()
            raise
        self.counters: collections.Counter[str] = collections.Counter()
        self.rejected: collections.Counter[str] = collections.Counter()
        self._db_lock = trio.Lock()
        # Admitted connections, oldest first, and how many each peer holds.
        self._connections: dict[_Connection, None] = {}
        self._per_peer: collections.Counter[str] = collections.Counter()
        self._wake_epoch = trio.Event()
        self._wake_work = trio.Event()
        self.port: int | None = None
        self.last_epoch_closed_at: float | None = None
        # Epochs left closed after their processing failed (retried after a restart), and
        # why: STATUS shows them.
        self._failed_epochs: dict[int, str] = {}
        self._pending: list[_Pending] = []
        self._pending_wake = trio.Event()
        self._writer_running = False
        self.last_forward_error = ""
        # topic -> (message, when logged, repeats not logged since); see _log_once.
        self._logged: dict[str, tuple[str, float, int]] = {}
        # What STATUS tells clients (esa submit encodes for it); a pickled protocol
        # (simulations) is known by its name only.
        self.protocol_table = (
            {"name": self.protocol.name}
            if "pickle" in config.protocol
            else protocol_table(config.protocol)
        )

    def _start_inbox(self) -> int:
        """Check the inbox and apply the config to it before anything is served; returns
        the time stamp of the last operator command accepted.

        Damage found here stops the party with one line, like an inbox that cannot be
        opened at all, rather than midway through an epoch (see
        :meth:`Inbox.check_integrity` for what the check finds and costs).

        Raises:
            ConfigError: the inbox is damaged or unreadable, or a key epoch dropped from
                the config still has unprocessed reports.
        """
        try:
            self.inbox.check_integrity()
            # Key rotation. Reports still waiting under a key epoch dropped from the config
            # could never be opened: refuse to start rather than lose them silently.
            waiting = set(self.inbox.open_count()) | {
                e.key_epoch for e in self.inbox.epochs("closed")
            }
            if waiting - set(self.keys):
                raise ConfigError(
                    f"key epochs {sorted(waiting - set(self.keys))} still have unprocessed "
                    "reports; keep their keys in [keys.epochs] until those are processed"
                )
            # A dropped key epoch's keys are destroyed, so a replay of its reports cannot be
            # opened any more: its replay digests go too, bounding the replay cache by the
            # key epochs still served.
            for retired in set(self.inbox.key_epochs_seen()) - set(self.keys):
                self.inbox.retire_key_epoch(retired)
            # Durable, so a restart does not reopen the replay window of earlier commands.
            last_control = self.inbox.get_meta("last_control_ms", "0")
            if not last_control.isascii() or not last_control.isdigit():
                raise InboxDamaged(f"meta last_control_ms is {last_control!r}, not a time stamp")
            return int(last_control)
        except (sqlite3.Error, InboxDamaged) as exc:
            raise ConfigError(f"cannot open the inbox {self.config.inbox_path}: {exc}") from None

    @property
    def party_name(self) -> str:
        """The party's key name (``shuffler-{c·m + hop + 1}`` in chain c; see chain_route)."""
        return self._name

    @property
    def is_first(self) -> bool:
        return self.config.role == "shuffler" and self.hop == 0

    def expected_size(self) -> int:
        if isinstance(self.codec, OnionCodec):
            return self.codec.expected_size(self.hop)
        return int(self.codec.row_size)  # type: ignore[attr-defined]

    async def _db(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        # One SQLite connection, one writer at a time, off the event loop.
        async with self._db_lock:
            return await trio.to_thread.run_sync(lambda: fn(*args, **kwargs))

    def _kick(self) -> None:
        self._wake_work.set()

    # ------------------------------------------------------------------ connections

    async def handle(self, stream: trio.abc.Stream) -> None:
        """Serve one connection until the peer closes it or breaks the framing.

        A party serves at most ``max_connections`` at once, and at most
        ``max_connections_per_peer`` from one client address (:func:`_peer_of`). When a
        newcomer finds either full, a connection that has had a frame refused and waits for
        its next one is closed to make room (:meth:`_make_room`); only if there is none is
        the newcomer refused as ``busy``. So junk that is answered with REJECTs cannot hold
        slots against real clients, and no one address can hold all of them with valid
        frames either.
        """
        limits = self.config.limits
        conn = _Connection(_peer_of(stream))
        refusal = self._admit(conn)
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
                except _Rejected as exc:
                    conn.refused += 1
                    self.rejected[exc.reason] += 1
                    response = Reject(exc.code, str(exc)[:200]).to_bytes()
                except Exception as exc:
                    # A bug, odd data or a storage failure (disk full, database locked by
                    # another process) must not take the party down: answer, count, log,
                    # and keep serving. Nothing was acknowledged, so the sender resends
                    # (``busy`` and ``internal`` are the REJECTs a client retries).
                    code = _failure_code(exc)
                    conn.refused += 1
                    self.rejected[code.name.lower()] += 1
                    _log(f"{_kind_name(payload)} frame refused ({code.name.lower()}): {exc!r}")
                    response = Reject(code, _short(exc)).to_bytes()
                with trio.fail_after(limits.read_timeout_seconds):
                    await fs.send(response)
        except (trio.BrokenResourceError, trio.ClosedResourceError, trio.TooSlowError):
            self.rejected["broken_connection"] += 1
        finally:
            self._release(conn)
            await trio.aclose_forcefully(stream)

    def _admit(self, conn: _Connection) -> str | None:
        """Count ``conn`` in, closing another to make room if a limit is reached; returns
        why it cannot be served, or None once it is counted."""
        limits = self.config.limits
        peer = conn.peer
        peer_full = peer is not None and self._per_peer[peer] >= limits.max_connections_per_peer
        if peer_full and not self._make_room(c for c in self._connections if c.peer == peer):
            return "too many connections from your address"
        full = len(self._connections) >= limits.max_connections
        if full and not self._make_room(self._connections):
            return "too many connections"
        self._connections[conn] = None
        if peer is not None:
            self._per_peer[peer] += 1
        return None

    def _make_room(self, among: Iterable[_Connection]) -> bool:
        """Close one of ``among`` that has had a frame refused and is waiting for its next
        frame — the one refused most often, the oldest of those — and stop counting it;
        False if none qualifies.

        Such a connection has delivered nothing the party took since its last refusal, and
        closing it while it reads cuts nothing half done. A client of this package never
        sends on after a REJECT anyway (it resends on a fresh connection), and a connection
        that only ever sent valid frames is never closed this way.
        """
        candidates = [c for c in among if c.refused and c.reading is not None]
        if not candidates:
            return False
        victim = max(candidates, key=lambda c: c.refused)  # the first maximum: the oldest
        assert victim.reading is not None
        victim.reading.cancel()
        self._release(victim)
        self.counters["connections_closed_for_room"] += 1
        return True

    def _release(self, conn: _Connection) -> None:
        """Stop counting ``conn`` (once: when closed for room, and again when it ends)."""
        if self._connections.pop(conn, False) is None and conn.peer is not None:
            self._per_peer[conn.peer] -= 1
            if not self._per_peer[conn.peer]:
                del self._per_peer[conn.peer]

    async def _next_frame(self, fs: FrameStream, conn: _Connection) -> bytes | None:
        """The connection's next frame; None if it was closed meanwhile to make room."""
        payload: bytes | None = None
        conn.reading = trio.CancelScope()
        try:
            with conn.reading:
                payload = await fs.receive()
        finally:
            conn.reading = None
        # Checked after the frame too: the cancel may have come just as it arrived.
        return payload if conn in self._connections else None

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
        raise _Rejected(RejectReason.UNEXPECTED_KIND, f"a party does not accept {kind.name}")

    def _check_key_epoch(self, key_epoch: int) -> None:
        if key_epoch not in self.keys:
            raise _Rejected(
                RejectReason.UNKNOWN_KEY_EPOCH,
                f"key epoch {key_epoch} not served; have {sorted(self.keys)}",
            )

    def _check_sizes(self, reports: tuple[bytes, ...]) -> None:
        if reports:
            self._check_size(len(reports[0]))

    def _check_size(self, size: int) -> None:
        expected = self.expected_size()
        if size != expected:
            raise _Rejected(
                RejectReason.WRONG_REPORT_SIZE,
                f"reports for hop {self.hop} are {expected} bytes, got {size}",
            )

    def _check_declared_size(self, payload: bytes) -> None:
        """Refuse a SUBMIT or BATCH whose header declares the wrong report size before it
        is split into reports or its signature checked: a 4 MiB frame of 2-byte reports
        would otherwise become two million objects on the event loop, unauthenticated."""
        count, size = reports_header(payload)
        if count:
            self._check_size(size)

    async def _on_submit(self, payload: bytes) -> bytes:
        if not self.is_first:
            raise _Rejected(RejectReason.WRONG_HOP, f"hop {self.hop} takes no client reports")
        self._check_declared_size(payload)
        frame = parse_submit(payload)
        self._check_key_epoch(frame.key_epoch)
        self._check_sizes(frame.reports)
        stored, dups = await self._store_reports(frame.key_epoch, frame.reports)
        self.counters["reports_acknowledged"] += len(frame.reports)
        self.counters["duplicate_reports"] += dups
        self._wake_epoch.set()
        return Ack(stored, dups).to_bytes()

    async def _store_reports(self, key_epoch: int, reports: tuple[bytes, ...]) -> tuple[int, int]:
        """Commit a frame's reports, sharing the transaction with concurrent frames."""
        if not self._writer_running:
            return await self._db(self.inbox.add_reports, key_epoch, reports)
        slot = _Pending(key_epoch, reports)
        self._pending.append(slot)
        self._pending_wake.set()
        # Shielded: once queued, the frame is committed whether or not this connection
        # lives to see the ACK (a client that retries then finds it stored once).
        with trio.CancelScope(shield=True):
            await slot.done.wait()
        if slot.error is not None:
            raise slot.error
        assert slot.result is not None
        return slot.result

    async def _writer_loop(self) -> None:
        """Group commit: every frame queued while a commit runs goes into the next one."""
        self._writer_running = True
        try:
            while True:
                await self._pending_wake.wait()
                self._pending_wake = trio.Event()
                batch, self._pending = self._pending, []
                if not batch:
                    continue
                groups = [(p.key_epoch, p.reports) for p in batch]
                try:
                    results = await self._db(self.inbox.add_report_groups, groups)
                    self.counters["commits"] += 1
                    for p, r in zip(batch, results, strict=True):
                        p.result = r
                except Exception as exc:  # e.g. disk full: every frame of it fails
                    for p in batch:
                        p.error = exc
                finally:
                    # Even when cancelled mid-commit, no handler is left waiting.
                    for p in batch:
                        if p.result is None and p.error is None:
                            p.error = ESAError("service stopping")
                        p.done.set()
        finally:
            self._writer_running = False
            for p in self._pending:
                p.error = ESAError("service stopping")
                p.done.set()

    async def _on_batch(self, payload: bytes) -> bytes:
        if self.is_first:
            raise _Rejected(RejectReason.WRONG_HOP, "hop 0 takes reports from clients only")
        # The header only chooses which key to verify with; nothing is used before that.
        self._check_declared_size(payload)
        key_epoch = unverified_key_epoch(payload)
        self._check_key_epoch(key_epoch)
        channel, chunk = self._verify_upstream(
            payload, key_epoch, lambda keys: verify_batch(payload, keys[self.hop - 1])
        )
        if chunk.receiver_hop != self.hop or chunk.sender_hop != self.hop - 1:
            raise _Rejected(
                RejectReason.WRONG_HOP,
                f"batch from hop {chunk.sender_hop} to hop {chunk.receiver_hop}; "
                f"this is hop {self.hop}",
            )
        self._check_sizes(chunk.reports)
        try:
            stored, dups, new = await self._db(
                self.inbox.add_chunk,
                batch_id=chunk.batch_id,
                epoch=self._inbox_epoch(chunk.epoch, channel),
                key_epoch=chunk.key_epoch,
                chunk_index=chunk.chunk_index,
                chunk_count=chunk.chunk_count,
                reports=chunk.reports,
            )
        except ConflictingBatch as exc:
            self._log_conflict(exc)
            raise _Rejected(RejectReason.CONFLICTING_BATCH, str(exc)) from None
        if not new:
            # A resend after a lost ACK (what a crash recovery sends) or a replay of it:
            # either way it is taken only once, and it is no failure.
            self.counters["duplicate_frames"] += 1
            return Ack(0, len(chunk.reports)).to_bytes()
        self.counters["chunks_received"] += 1
        self.counters["reports_acknowledged"] += len(chunk.reports)
        self._kick()
        return Ack(stored, dups).to_bytes()

    def _verify_upstream(
        self, payload: bytes, key_epoch: int, verify: Callable[[list[Ed25519PublicKey]], T]
    ) -> tuple[int, T]:
        """Verify an upstream frame with its chain's keys; returns ``(channel, frame)``.

        A shuffler takes frames from its own chain only. The analyzer ends every chain, and
        the signature says which chain a frame comes from: each chain's shufflers have their
        own keys, so it verifies under at most one chain's keys (tried in turn).
        """
        if self.config.role == "shuffler" or self.channels == 1:
            return self.channel, verify(self.verify_keys[key_epoch])
        error: WireError | None = None
        for channel, keys in enumerate(self.chain_verify_keys[key_epoch]):
            try:
                return channel, verify(keys)
            except BadSignature as exc:
                error = exc
        assert error is not None
        raise error

    def _inbox_epoch(self, epoch: int, channel: int) -> int:
        """Where the analyzer files chain ``channel``'s batch of ``epoch``: its inbox holds
        one upstream batch per epoch id, so chain c's epoch e is ``e·C + c`` (the identity
        for one chain). The chains' batches of epoch e are joined by :meth:`_process`."""
        return epoch * self.channels + channel if self.config.role == "analyzer" else epoch

    async def _on_counts(self, payload: bytes) -> bytes:
        if self.is_first:
            raise _Rejected(RejectReason.WRONG_HOP, "hop 0 takes reports from clients only")
        key_epoch = unverified_key_epoch(payload)
        self._check_key_epoch(key_epoch)
        _, frame = self._verify_upstream(
            payload, key_epoch, lambda keys: verify_counts(payload, keys[: self.hop])
        )
        last = frame.statements[-1]
        if last.hop != self.hop - 1:
            raise _Rejected(RejectReason.WRONG_HOP, f"counts end at hop {last.hop}")
        # Each statement is signed on its own, so genuine ones replayed from the wire could
        # be recombined (a hop left out, another epoch's mixed in) and sent ahead of the real
        # chain, which would then be dropped as a replay: take only a whole chain.
        hops = [st.hop for st in frame.statements]
        if (
            hops != list(range(self.hop))
            or len({(st.epoch, st.key_epoch) for st in frame.statements}) != 1
        ):
            raise _Rejected(
                RejectReason.MALFORMED_FRAME,
                f"counts must chain hops 0..{self.hop - 1} of one epoch, got hops {hops}",
            )
        try:
            new = await self._db(self.inbox.add_counts, batch_id=last.batch_id, counts=payload)
        except ConflictingBatch as exc:
            self._log_conflict(exc)
            raise _Rejected(RejectReason.CONFLICTING_BATCH, str(exc)) from None
        except InboxError as exc:
            raise _Rejected(RejectReason.MALFORMED_FRAME, str(exc)) from None
        if not new:
            self.counters["duplicate_frames"] += 1
        self._kick()
        return Ack(0, 0).to_bytes()

    async def _on_control(self, payload: bytes) -> bytes:
        if self.operator_key is None:
            raise _Rejected(RejectReason.BAD_SIGNATURE, "no operator key configured")
        frame = verify_control(payload, self.operator_key)
        # Signed commands are replayable by anyone who saw one on the wire: accept each
        # only once (strictly increasing time stamps) and only while fresh.
        now_ms = int(time.time() * 1000)
        if abs(now_ms - frame.issued_at_ms) > _CONTROL_WINDOW_MS or (
            frame.issued_at_ms <= self._last_control_ms
        ):
            raise _Rejected(
                RejectReason.STALE_CONTROL,
                f"control frame issued at {frame.issued_at_ms} ms is stale or replayed",
            )
        self._last_control_ms = frame.issued_at_ms
        await self._db(self.inbox.set_meta, "last_control_ms", str(frame.issued_at_ms))
        if frame.command in (ControlCommand.CLOSE_EPOCH, ControlCommand.CLOSE_EPOCH_AT):
            if not self.is_first:
                raise _Rejected(RejectReason.WRONG_HOP, "only the first shuffler closes epochs")
            at = frame.epoch if frame.command is ControlCommand.CLOSE_EPOCH_AT else None
            try:
                closed = await self._close_open_epochs(operator=True, at=at)
            except EpochAhead as exc:
                raise _Rejected(RejectReason.EPOCH_AHEAD, str(exc)) from None
            return Ack(closed, 0).to_bytes()
        raise _Rejected(RejectReason.UNEXPECTED_KIND, f"command {frame.command}")

    async def _on_query(self, payload: bytes) -> bytes:
        q = parse_query(payload)
        try:
            params = json.loads(q.body or b"{}")
            if not isinstance(params, dict):
                raise ValueError
        except (ValueError, RecursionError):  # RecursionError: nesting deeper than json parses
            raise _Rejected(
                RejectReason.MALFORMED_FRAME, "query body must be a JSON object"
            ) from None
        if q.what is QueryKind.STATUS:
            body = await self.status()
        elif self.config.role != "analyzer":
            raise _Rejected(RejectReason.UNEXPECTED_KIND, f"{q.what.name} is for the analyzer")
        elif q.what is QueryKind.RESULT:
            body = await self._db(self.result, params)
        elif q.what is QueryKind.TRAP_COMMIT:
            body = await self._trap_commit(params)
        else:
            body = await self._trap_open(params)
        return Reply(json.dumps(_jsonable(body)).encode()).to_bytes()

    def _trap_signer(
        self, action: Literal["commit", "open"], params: dict[str, Any]
    ) -> tuple[bytes, int, bytes]:
        """Authenticate a trap commit or opening before anything else of it is used:
        returns ``(commitment, key_epoch, the auditor's public key)``.

        The ``signature`` must verify under the ``[auditor]`` key over
        :func:`~esa._net.trap_statement` for this analyzer's layer key of ``key_epoch``.

        Raises:
            _Rejected: ``bad_signature`` without an ``[auditor]`` key, or for a missing or
                wrong signature; ``bad_trap_opening`` for malformed fields;
                ``unknown_key_epoch`` for a key epoch not served.
        """
        if self.auditor_key is None:
            raise _Rejected(
                RejectReason.BAD_SIGNATURE,
                "trap audit is off: this analyzer has no [auditor] public_key",
            )
        if "signature" not in params:  # e.g. a client from before trap frames were signed
            raise _Rejected(
                RejectReason.BAD_SIGNATURE,
                f"unsigned trap {action}: sign it with the analyzer's [auditor] key",
            )
        try:
            commitment = bytes.fromhex(params["commitment"])
            key_epoch = params["key_epoch"]
            if isinstance(key_epoch, bool) or not isinstance(key_epoch, int):
                raise TypeError
            if len(commitment) != TRAP_COMMITMENT_SIZE or not 0 <= key_epoch < 2**32:
                raise ValueError
        except (KeyError, ValueError, TypeError):
            raise _Rejected(
                RejectReason.BAD_TRAP_OPENING,
                "trap frames need commitment (32 bytes hex) and key_epoch (u32)",
            ) from None
        self._check_key_epoch(key_epoch)
        try:
            signature = bytes.fromhex(params["signature"])
        except (KeyError, ValueError, TypeError):
            signature = b""
        statement = trap_statement(
            action,
            analyzer_key=self.routes[key_epoch][-1],
            key_epoch=key_epoch,
            commitment=commitment,
        )
        try:
            self.auditor_key.verify(signature, statement)
        except InvalidSignature:
            raise _Rejected(
                RejectReason.BAD_SIGNATURE,
                f"trap {action} not signed by this analyzer's [auditor] key",
            ) from None
        return commitment, key_epoch, self.auditor_key.public_bytes_raw()

    async def _trap_commit(self, params: dict[str, Any]) -> dict[str, Any]:
        # Idempotent: a resent (or replayed) commit keeps the epochs the first one covers.
        commitment, _, _ = self._trap_signer("commit", params)
        after = await self._db(self.inbox.add_trap_commitment, commitment)
        self.counters["trap_commitments"] += 1
        return {"commitment": commitment.hex(), "covers_epochs_after": after}

    async def _trap_open(self, params: dict[str, Any]) -> dict[str, Any]:
        """Open a signed commitment: count its traps, each trap report once ever.

        A trap set that lists a report twice is malformed (each trap is one report); one
        listed by an earlier opening is answered as ``repeated`` and not counted again
        (:meth:`Inbox.open_traps`). A commitment is opened once: the same opening again
        (a resend, or a replay of the signed one) gets the first answer.
        """
        commitment, key_epoch, auditor = self._trap_signer("open", params)
        try:
            nonce = bytes.fromhex(params["nonce"])
            listed = params["reports"]
            if not isinstance(listed, list):
                raise TypeError
            reports = [bytes.fromhex(r) for r in listed]
        except (KeyError, ValueError, TypeError):
            raise _Rejected(
                RejectReason.BAD_TRAP_OPENING, "opening needs nonce and reports (hex strings)"
            ) from None
        if trap_commitment(nonce, key_epoch, reports) != commitment:
            raise _Rejected(RejectReason.BAD_TRAP_OPENING, "opening does not match its commitment")
        if len(set(reports)) != len(reports):
            raise _Rejected(
                RejectReason.BAD_TRAP_OPENING,
                "the opening lists a trap report twice: each trap is one report",
            )
        known = await self._db(self.inbox.trap, commitment)
        if known is None:
            raise _Rejected(RejectReason.BAD_TRAP_OPENING, "opening matches no commitment")
        after, opening = known
        if opening is None:
            epochs = await self._db(self.inbox.epochs, "processed")
            if not any(e.epoch > after for e in epochs):
                raise _Rejected(
                    RejectReason.BAD_TRAP_OPENING, "no epoch processed since the commitment"
                )
            try:
                opening = await self._db(
                    self.inbox.open_traps, commitment, key_epoch, reports, auditor=auditor
                )
            except TrapsNotProcessed as exc:
                raise _Rejected(RejectReason.BAD_TRAP_OPENING, str(exc)) from None
            self.counters["trap_openings"] += 1
        return {
            "traps": opening.traps + opening.repeated,
            "repeated": opening.repeated,
            "arrived": opening.arrived,
            "missing": opening.missing,
            "ok": not opening.missing,
        }

    async def status(self) -> dict[str, Any]:
        epochs = await self._db(self.inbox.epochs)
        open_count = await self._db(self.inbox.open_count)
        set_aside = await self._db(self.inbox.set_aside_counts)
        by_state = collections.Counter(e.state for e in epochs)
        # The first shuffler's next epoch id is what an operator's CLOSE_EPOCH_AT names.
        first = {"next_epoch": await self._db(self.inbox.next_epoch)} if self.is_first else {}
        return {
            **first,
            "party": self.party_name,
            "hop": self.hop,
            "channel": self.channel,
            "channels": self.channels,
            "counters": dict(self.counters),
            "rejected": dict(self.rejected),
            "epochs": {s: by_state.get(s, 0) for s in ("closed", "processed", "forwarded")},
            "open_reports": sum(open_count.values()),
            "active_connections": len(self._connections),
            "protocol": self.protocol_table,
            "crypto": self.config.crypto,
            **({"last_forward_error": self.last_forward_error} if self.last_forward_error else {}),
            **({"failed_epochs": dict(self._failed_epochs)} if self._failed_epochs else {}),
            **({"set_aside": set_aside} if set_aside else {}),
        }

    # ------------------------------------------------------------------ epochs

    async def _close_open_epochs(self, *, operator: bool = False, at: int | None = None) -> int:
        """Close the open reports into one epoch per key epoch; returns how many epochs.

        The size/deadline rule closes only key epochs with open reports. An operator's
        close always produces at least one epoch, empty if nobody submitted: its empty
        batch flows down the chain, so the analyzer records the epoch instead of waiting
        for it. With several chains the analyzer joins the chains' epochs by number, so an
        operator's close then closes one epoch per key epoch in service, open reports or
        not: every chain's numbering advances alike (given the same ``[keys.epochs]``).
        ``at`` (CLOSE_EPOCH_AT) makes the operator's close idempotent: it closes only if
        the next epoch id is ``at`` (:meth:`Inbox.close_epochs`).
        """
        served = sorted(self.keys)
        if not operator:
            closed = await self._db(self.inbox.close_epochs, served)
        elif self.channels > 1:
            closed = await self._db(self.inbox.close_epochs, served, empty=served, at=at)
        else:
            closed = await self._db(self.inbox.close_epochs, served, if_none_open=served[-1], at=at)
        if closed:
            # Stamped before the counter moves: whoever sees the count sees the time too.
            self.last_epoch_closed_at = trio.current_time()
            self.counters["epochs_closed"] += len(closed)
            sizes = [await self._db(self.inbox.epoch_size, e) for e in closed]
            self.counters["empty_epochs_closed"] += sizes.count(0)
            self._kick()
        return len(closed)

    async def _epoch_loop(self) -> None:
        """Hop 0: close the open batch at ``max_reports`` or at its deadline.

        The deadline counts from the commit of the oldest open report, whose wall-clock
        time the inbox keeps (:meth:`Inbox.open_since`), so a restart does not give open
        reports a new deadline: the restarted party closes their epoch at that time +
        ``deadline_seconds``, at once if that is past. Wall-clock time is read once per
        batch of open reports, its elapsed part clamped to ``[0, deadline]``, and the wait
        is then timed on trio's monotonic clock: a clock step while the party runs changes
        nothing; a step while it is down moves the close by the step, but never before the
        restart and never more than one deadline after it.
        """
        rule = self.config.epoch
        # (the open reports' recorded wall-clock time, their deadline on trio's clock)
        due: tuple[float, float] | None = None
        while True:
            # Reset before reading, so a submit committed during the reads still wakes us.
            self._wake_epoch = trio.Event()
            try:
                total = sum((await self._db(self.inbox.open_count)).values())
                since = await self._db(self.inbox.open_since, now=time.time()) if total else None
                if since is None:
                    due = None
                elif due is None or due[0] != since:
                    elapsed = min(max(time.time() - since, 0.0), rule.deadline_seconds)
                    due = (since, trio.current_time() + rule.deadline_seconds - elapsed)
                if due is not None and (total >= rule.max_reports or trio.current_time() >= due[1]):
                    await self._close_open_epochs()
                    continue
            except sqlite3.Error as exc:  # e.g. disk full while closing: retry shortly
                self.counters["storage_errors"] += 1
                self._log_once("epoch", f"cannot close epochs, will retry: {exc!r}")
                await trio.sleep(1.0)
                continue
            wait = due[1] - trio.current_time() if due is not None else math.inf
            with trio.move_on_after(max(wait, 0.0)):
                await self._wake_epoch.wait()

    async def _work_loop(self) -> None:
        """Process closed epochs, then forward processed ones (shufflers)."""
        backoff = 0.05
        while True:
            self._wake_work = trio.Event()
            try:
                ok = await self._work_once()
            except Exception as exc:
                # The inbox itself failed (disk full, locked by another process; a bug
                # would land here too). Every write is one transaction, so nothing is
                # half done: retry later, with backoff, and keep serving meanwhile.
                ok = False
                storage = isinstance(exc, sqlite3.Error)
                self.counters["storage_errors" if storage else "work_errors"] += 1
                self._log_once("work", f"processing paused, will retry: {exc!r}")
            if ok:
                backoff = 0.05
                await self._wake_work.wait()
            else:
                backoff = min(2.0, backoff * 2)
                with trio.move_on_after(backoff):
                    await self._wake_work.wait()

    async def _work_once(self) -> bool:
        """Process every closed epoch, then forward every processed one (shufflers);
        False if something is left to retry."""
        for rec in await self._db(self.inbox.epochs, "closed"):
            if rec.epoch in self._failed_epochs:
                continue
            try:
                await self._process(rec)
            except sqlite3.Error:
                raise  # the inbox, not the epoch: retried as a whole
            except Exception as exc:
                # Leave the epoch closed (its reports stay durable) and go on with the
                # others; it is retried after a restart, e.g. with a fixed config or a
                # repaired inbox.
                if isinstance(exc, InboxDamaged):
                    reason = f"not processed: {exc}"
                    self.counters["epochs_damaged"] += 1
                    advice = (
                        "; its reports stay stored. Restore the inbox from a backup, or "
                        "stop the party, set the damaged reports aside (esa inbox set-aside) "
                        "and restart it to process the rest"
                    )
                else:
                    reason, advice = f"failed to process: {exc!r}", ""
                for e in self._epoch_group(rec.epoch):
                    self._failed_epochs[e] = reason
                self.counters["epochs_failed"] += 1
                _log(f"epoch {rec.epoch} {reason}{advice}")
        ok = True
        if self.config.role == "shuffler":
            for rec in await self._db(self.inbox.epochs, "processed"):
                ok = await self._forward(rec) and ok
        return ok

    def _log_conflict(self, exc: ConflictingBatch) -> None:
        """A conflicting upstream frame needs an operator: the sender's epochs collide with
        ones stored here, and it will resend until they stop colliding."""
        self._log_once(
            "conflicting_batch", f"refused an upstream frame: {exc}; the sender keeps its reports"
        )

    def _log_once(self, topic: str, message: str) -> None:
        """Log ``message`` unless ``topic`` logged the same within the last minute: a
        failure retried every two seconds (or ten times a second) is told, not repeated.
        When the same message is logged again, the line says how often it recurred
        unlogged in between."""
        now = time.monotonic()
        last = self._logged.get(topic)
        if last is not None and last[0] == message and now - last[1] < 60.0:
            self._logged[topic] = (message, last[1], last[2] + 1)
            return
        repeats = last[2] if last is not None and last[0] == message else 0
        self._logged[topic] = (message, now, 0)
        _log(f"{message} ({repeats} more times since last logged)" if repeats else message)

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

    def _epoch_group(self, epoch: int) -> range:
        """The inbox epoch ids processed together with ``epoch``: at the analyzer, every
        chain's batch of one epoch (see :meth:`_inbox_epoch`); elsewhere just ``epoch``."""
        if self.config.role != "analyzer":
            return range(epoch, epoch + 1)
        lead = epoch - epoch % self.channels
        return range(lead, lead + self.channels)

    async def _process(self, rec: EpochRecord) -> None:
        if self.config.role == "analyzer":
            await self._process_group(rec)
            return
        reports = await self._db(self.inbox.epoch_reports, rec.epoch)
        dups = await self._db(self.inbox.upstream_duplicates, rec.epoch)
        commit = await _compute(lambda: self._shuffle_epoch(rec, reports, dups))
        # Finished work is kept: a shutdown now waits for this one short transaction.
        with trio.CancelScope(shield=True):
            await self._db(self.inbox.commit_processed, rec.epoch, **commit)
        self.counters["epochs_processed"] += 1

    async def _process_group(self, rec: EpochRecord) -> None:
        """Analyze one epoch once every chain has delivered (closed) its batch of it.

        The whole group's output and statistics commit in ONE transaction, on the first
        chain's epoch id (the lead); the other chains' ids are then marked processed (their
        input dropped) one transaction each. A crash in between leaves the lead processed
        and some others closed: those are only marked on restart, never analyzed again, so
        every report is still counted exactly once. With one chain the group is the epoch.
        """
        group = self._epoch_group(rec.epoch)
        by_id = {r.epoch: r for r in await self._db(self.inbox.epochs)}
        members = [by_id.get(i) for i in group]
        lead = members[0]
        if lead is not None and lead.state != "closed":
            for r in members[1:]:
                if r is not None and r.state == "closed":
                    await self._db(
                        self.inbox.commit_processed, r.epoch, stats={"merged_into": lead.epoch}
                    )
            return
        ready = [r for r in members if r is not None]
        if len(ready) < len(members):
            return  # a chain has not delivered this epoch yet; its batch wakes us up
        if any(r.state != "closed" for r in ready):
            raise ESAError(f"epoch group {list(group)}: a member was processed before its lead")
        reports = [await self._db(self.inbox.epoch_reports, r.epoch) for r in ready]
        dups = [await self._db(self.inbox.upstream_duplicates, r.epoch) for r in ready]
        commit = await _compute(lambda: self._analyze_epoch(ready, reports, dups))
        with trio.CancelScope(shield=True):  # as in _process
            await self._db(self.inbox.commit_processed, ready[0].epoch, **commit)
            for r in ready[1:]:
                await self._db(
                    self.inbox.commit_processed, r.epoch, stats={"merged_into": ready[0].epoch}
                )
        self.counters["epochs_processed"] += 1

    def _as_batch(self, reports: list[bytes]) -> Any:
        if isinstance(self.codec, OnionCodec):
            arr = np.empty(len(reports), dtype=object)
            arr[:] = reports
            return arr
        return reports  # the ideal codec parses a list of row bytes itself

    def _upstream(self, rec: EpochRecord, channel: int | None = None) -> tuple[CountStatement, ...]:
        if rec.upstream_counts is None:
            return ()
        # Verified on receipt; checked again (m signatures, cheap) rather than trusted.
        chain = self.channel if channel is None else channel
        keys = self.chain_verify_keys[rec.key_epoch][chain][: self.hop]
        return verify_counts(rec.upstream_counts, keys).statements

    def _shuffle_epoch(self, rec: EpochRecord, reports: list[bytes], dups: int) -> dict[str, Any]:
        keys = self.keys[rec.key_epoch]
        shuffler = Shuffler(
            hop=self.hop,
            codec=self.codec,
            key=keys.layer if isinstance(self.codec, OnionCodec) else None,
            route=self.routes[rec.key_epoch],
            protocol=self.protocol,
            threshold=self.config.threshold,
            fake_reports=self.config.fake_reports,
            fake_rng=self.fake_rng,
            workers=self.config.workers,
            channel=self.channel,  # its fakes look like this chain's traffic
        )
        out, c = shuffler.process(self._as_batch(reports), epoch=rec.key_epoch)
        items = [bytes(r) if isinstance(r, bytes) else r.tobytes() for r in out]
        bid = batch_id_for(keys.public().verify_public, rec.key_epoch, rec.epoch)
        size = self.config.limits.chunk_reports
        parts = [items[i : i + size] for i in range(0, len(items), size)] or [[]]
        outbox = [
            BatchChunk(
                self.hop, self.hop + 1, rec.key_epoch, rec.epoch, bid, i, len(parts), tuple(p)
            ).sign(keys.signing)
            for i, p in enumerate(parts)
        ]
        statement = CountStatement(
            hop=self.hop,
            key_epoch=rec.key_epoch,
            epoch=rec.epoch,
            batch_id=bid,
            received=c.received + dups,
            invalid=c.invalid,
            replayed=c.replayed + dups,
            held=c.held,
            fakes_added=c.fakes_added,
            forwarded=c.forwarded,
        ).signed_by(keys.signing)
        chain = CountsFrame((*self._upstream(rec), statement)).to_bytes()
        return {"stats": _statement_json(statement), "counts": chain, "outbox": outbox}

    def _analyze_epoch(
        self, members: list[EpochRecord], reports: list[list[bytes]], dups: list[int]
    ) -> dict[str, Any]:
        """Analyze every chain's batch of one epoch (``members[c]`` from chain c).

        Each batch is opened with the analyzer key of its own key epoch; counters add up and
        messages are concatenated, which is what the in-process analyzer computes on the
        concatenated batches (a report repeated across chains never reaches this point: the
        inbox keeps one copy per key epoch and counts the rest as replayed).
        """
        counters: dict[str, Any] = {}
        messages = []
        chains = []
        problems: list[str] = []
        for c, (rec, batch, dup) in enumerate(zip(members, reports, dups, strict=True)):
            keys = self.keys[rec.key_epoch]
            analyzer = Analyzer(
                hop=self.hop,
                codec=self.codec,
                key=keys.layer if isinstance(self.codec, OnionCodec) else None,
                protocol=self.protocol,
                workers=self.config.workers,
            )
            # The per-epoch estimate is discarded: the RESULT query estimates over all epochs.
            out = analyzer.process(
                self._as_batch(batch), epoch=rec.key_epoch, n_users=max(1, len(batch)), n_fakes=0
            )
            got = out.counters.to_json()
            got["received"] += dup
            got["replayed"] += dup
            if not counters:
                counters = got
            else:
                for k in _COUNTS:
                    counters[k] += got[k]
            messages.append(out.messages)
            chain = self._upstream(rec, c)
            chains.append([_statement_json(s) for s in chain])
            found = check_chain(
                chain,
                hops=self.shufflers,
                epoch=rec.epoch // self.channels,
                received=len(batch) + dup,
            )
            problems += found if self.channels == 1 else [f"chain {c + 1}: {p}" for p in found]
        msgs = np.concatenate(messages) if len(messages) > 1 else messages[0]
        rows = self.protocol.encode(msgs) if len(msgs) else np.zeros((0, 1), np.uint8)
        stats: dict[str, Any] = {
            "analyzer": counters,
            "problems": problems,
            "fakes": sum(int(s["fakes_added"]) for chain in chains for s in chain),
        }
        # One chain keeps the stats format of existing inboxes.
        if self.channels == 1:
            stats["chain"] = chains[0]
        else:
            stats["chains"] = chains
        return {"stats": stats, "output": [r.tobytes() for r in rows]}

    async def _forward(self, rec: EpochRecord) -> bool:
        """Send an epoch's stored chunks and counts to the next hop; False on failure."""
        assert self.config.next is not None
        pending = await self._db(self.inbox.pending_outbox, rec.epoch)
        timeout = self.config.limits.read_timeout_seconds
        try:
            with trio.fail_after(timeout):
                stream = await trio.open_tcp_stream(self.config.next.host, self.config.next.port)
            async with stream:
                fs = FrameStream(stream, max_frame=crypto.MAX_FRAME_SIZE, read_timeout=timeout)
                for entry in pending:
                    await fs.send(entry.payload)
                    expect_ack(await fs.receive())
                    await self._db(self.inbox.mark_acked, rec.epoch, entry.chunk_index)
                assert rec.counts is not None
                await fs.send(rec.counts)
                expect_ack(await fs.receive())
        except (OSError, trio.TooSlowError, trio.BrokenResourceError, ESAError, WireError) as exc:
            self.counters["forward_failures"] += 1
            self.last_forward_error = _forward_reason(exc)
            self._log_once(
                "forward",
                f"cannot forward epoch {rec.epoch} to {self.config.next.host}:"
                f"{self.config.next.port}, will retry: {self.last_forward_error}",
            )
            return False
        self.last_forward_error = ""
        await self._db(self.inbox.mark_forwarded, rec.epoch)
        self.counters["epochs_forwarded"] += 1
        return True

    # ------------------------------------------------------------------ analyzer result

    def result(self, params: dict[str, Any]) -> dict[str, Any]:
        """The estimate over every processed epoch (runs in a worker thread)."""
        # Records merged into their epoch's lead (the other chains' ids) carry no output.
        outputs = [(r, msgs) for r, msgs in self.inbox.outputs() if "merged_into" not in r.stats]
        rows = [m for _, msgs in outputs for m in msgs]
        size = self.protocol.message_size
        arr = (
            np.frombuffer(b"".join(rows), dtype=np.uint8).reshape(-1, size)
            if rows
            else np.zeros((0, size), np.uint8)
        )
        messages, valid = self.protocol.decode(arr)
        messages = messages[valid]
        # Opened trap reports are uniform fake messages (see make_traps): the estimator
        # removes them like the shufflers' fakes. Only openings the [auditor] signed count,
        # and each trap report once (Inbox.open_traps): the reports removed are distinct
        # reports that reached the analyzer, so n never drops below the other reports.
        openings, trap_pending = self.inbox.trap_openings()
        signed = [o for o in openings if o.auditor is not None]
        unsigned = len(openings) - len(signed)
        trap_total = sum(o.traps for o in signed)
        trap_arrived = sum(o.arrived for o in signed)
        # The estimators count fake values; the shufflers' statements and the trap audit
        # count reports, and a Split-Mix fake value travels as `shares` reports.
        spec = self.protocol.share_spec
        per_value = reports_per_fake(self.protocol)
        fake_reports = sum(int(rec.stats.get("fakes", 0)) for rec, _ in outputs) + trap_arrived
        n_fakes = fake_reports // per_value
        n_param = params.get("n")
        if n_param is not None and (
            isinstance(n_param, bool) or not isinstance(n_param, int) or not 1 <= n_param <= 2**53
        ):
            raise _Rejected(
                RejectReason.MALFORMED_FRAME, f"n must be an integer in [1, 2**53], got {n_param!r}"
            )
        users_messages = len(messages) - fake_reports
        n = n_param or max(1, round(users_messages / self.protocol.messages_per_user))
        est = self.protocol.estimate(messages, n=n, n_fakes=n_fakes)
        if not outputs:  # nothing processed yet: no estimate, rather than one of no data
            est = lost_estimate(est, no_epoch_processed=True)
        elif spec is not None:  # a lost share loses the sum (see check_shares)
            est = check_shares(self.protocol, est, len(messages), n, n_fakes)
        hops: list[dict[str, Any]] = []
        problems: list[str] = []
        for rec, _ in outputs:
            problems += [f"epoch {rec.epoch}: {p}" for p in rec.stats.get("problems", [])]
            # Every chain's shufflers in chain order, then the analyzer (run_pipeline's order).
            chains = _chains(rec)
            per_hop = [
                {"hop": s["hop"], "role": "shuffler", "channel": c, **_counts(s)}
                for c, chain in enumerate(chains)
                for s in chain
            ] + [rec.stats["analyzer"]]
            if not hops:
                hops = [dict(h) for h in per_hop]
            else:
                for acc, h in zip(hops, per_hop, strict=False):
                    for k in _COUNTS:
                        acc[k] += h[k]
        body: dict[str, Any] = {
            "estimate": est.values,
            "expected_std": est.expected_std,
            "messages_used": est.messages_used,
            "estimate_extra": est.extra,
            "n": n,
            "n_fakes": n_fakes,
            "epochs": len(outputs),
            # Epochs closed with no report on any chain (an operator's close of an epoch
            # nobody submitted to): recorded, so the operator sees the close went through.
            "empty_epochs": [rec.epoch // self.channels for rec, _ in outputs if _empty(rec)],
            "hops": hops,
            "drop_check": {"ok": False, "problems": problems},
            "traps": {
                "opened": trap_total,
                "arrived": trap_arrived,
                "unopened_commitments": trap_pending,
                # Openings recorded before openings were signed may be anyone's: left out.
                **({"unsigned_openings": unsigned} if unsigned else {}),
            },
        }
        for o in signed:
            if o.missing:
                assert o.auditor is not None
                problems.append(
                    f"trap commitment {o.commitment.hex()[:16]}… opened by auditor "
                    f"{o.auditor.hex()[:16]}…: {o.missing} of its {o.traps} trap reports never "
                    "reached the analyzer: a hop dropped or replaced reports (unless the "
                    "auditor did not submit them before the epoch closed)"
                )
        body["drop_check"]["ok"] = not problems
        if params.get("messages"):
            # Paged, so a reply stays far below the frame limit whatever n is.
            offset = params.get("messages_offset", 0)
            if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
                raise _Rejected(RejectReason.MALFORMED_FRAME, f"bad messages_offset {offset!r}")
            page = rows[offset : offset + _MESSAGE_PAGE_BYTES // size]
            body["messages_hex"] = b"".join(page).hex()
            body["messages_total"] = len(rows)
        return body

    # ------------------------------------------------------------------ running

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
        _log(
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

    def close(self) -> None:
        self.inbox.close()
        self._lock.close()  # releases the state_dir for the next instance


def _lock_state_dir(state_dir: Path) -> Any:
    """Create ``state_dir`` and hold an exclusive lock on it for the life of the party: two
    instances on one inbox would each close, process and forward the same epochs.

    Raises:
        ConfigError: the directory cannot be created or is in use by another party.
    """
    try:
        state_dir.mkdir(parents=True, exist_ok=True)
        fh = open(state_dir / "lock", "a+")  # noqa: SIM115 - held until close()
    except OSError as exc:
        raise ConfigError(f"cannot use state_dir {state_dir}: {exc.strerror or exc}") from None
    try:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        fh.close()
        raise ConfigError(
            f"state_dir {state_dir} is in use by another running party; give each party "
            "its own state_dir"
        ) from None
    return fh


def _log(message: str) -> None:
    print(f"esa serve: {message}", file=sys.stderr, flush=True)


async def _compute(fn: Callable[[], T]) -> T:
    """``fn()`` — an epoch's CPU work: peel, threshold, fakes, permute, sign or analyze — in
    a worker thread that a shutdown abandons instead of waiting for.

    The work only computes: it writes nothing to the inbox, and its caller commits the
    result in one transaction after it returns. So a SIGTERM during it stops the party at
    once, nothing of the epoch is stored, and after the restart the epoch, still closed,
    is processed again from its stored input: every acknowledged report still counts
    exactly once. The abandoned thread's result is dropped, and the thread itself stops at
    its next progress point (every ~16 k reports, :func:`crypto.report_progress`) rather
    than running on in a process that outlives the service (tests).
    """
    abandoned = threading.Event()

    def work() -> T:
        def checkpoint(done: int) -> None:
            if abandoned.is_set():
                raise _Abandoned("the service stopped; this result would be discarded")

        with crypto.report_progress(checkpoint):
            return fn()

    try:
        return await trio.to_thread.run_sync(work, abandon_on_cancel=True)
    finally:
        abandoned.set()  # a no-op once the work is done


def _peer_of(stream: trio.abc.Stream) -> str | None:
    """What ``max_connections_per_peer`` counts a connection under (:func:`_address_group`);
    None for a stream that is not a connected IP socket (tests' in-memory streams)."""
    if not isinstance(stream, trio.SocketStream):
        return None
    try:
        host = stream.socket.getpeername()[0]
    except (OSError, IndexError, TypeError):
        return None  # the peer already left, or not an IP socket
    return _address_group(host) if isinstance(host, str) else None


def _address_group(host: str) -> str | None:
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


def _forward_reason(exc: BaseException) -> str:
    """Why a forward failed, in words: the next hop's REJECT reason, or the network error."""
    if isinstance(exc, PeerRejected):
        return f"the next hop refused it: {exc.reason} ({exc.detail})"
    if isinstance(exc, trio.TooSlowError):
        return "the next hop did not answer in time"
    return f"{type(exc).__name__}: {exc}"


def _kind_name(payload: bytes) -> str:
    try:
        return peek_kind(payload).name
    except WireError:
        return "malformed"


_COUNTS = ("received", "invalid", "replayed", "held", "fakes_added", "forwarded")


def _empty(rec: EpochRecord) -> bool:
    """Whether an epoch had no report on any chain: none reached the analyzer, and none
    reached a first shuffler either (a crowd held there is not an empty epoch)."""
    if rec.stats.get("analyzer", {}).get("received", 0):
        return False
    return not any(chain and int(chain[0]["received"]) for chain in _chains(rec))


def _chains(rec: EpochRecord) -> list[list[dict[str, Any]]]:
    """An analyzed epoch's count statements, one list per chain (one chain keeps the
    ``chain`` key of earlier inboxes)."""
    return rec.stats["chains"] if "chains" in rec.stats else [rec.stats.get("chain", [])]


def _counts(s: dict[str, Any]) -> dict[str, int]:
    return {k: int(s[k]) for k in _COUNTS}


def serve(config: PartyConfig) -> int:
    """Run a party until SIGTERM/SIGINT (the ``esa serve`` entry point)."""
    service = PartyService(config)

    parent = config.simulation.get("parent_pid")

    async def orphan_watch(scope: trio.CancelScope) -> None:
        # Simulation only: a child of a run that died without tearing it down exits by
        # itself instead of lingering (its parent changes when the parent dies).
        while os.getppid() == parent:
            await trio.sleep(0.5)
        _log(f"parent {parent} is gone; exiting")
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
