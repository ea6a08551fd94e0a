"""The state every job of a party shares: keys, routes, TLS contexts, inbox, counters,
logging.

:class:`PartyBase` is built once per party from its config; each job of the service
(intake, epoch closing and control, processing and forwarding, queries, the trap audit)
is a class deriving from it, and :class:`esa.net.PartyService` combines them.

Counters survive a restart: they are :class:`DurableCounter` objects whose increments are
queued in the inbox and written by its next write transaction (and at least once a second
by the service), and a starting party resumes them from the file.

Logs: :func:`log` writes a human line on stderr (``esa serve: ...``); :func:`event` writes
one JSON object per line through the stdlib :mod:`logging` logger ``esa.net.events``
(``esa serve`` sends it to stderr): rejections (``"event": "rejected"``, with the reason,
the peer's address group and the counts) and recoveries after a restart (``"event":
"recovered"``, with the epochs resumed and the reports recovered).
"""

from __future__ import annotations

import collections
import json
import logging
import sqlite3
import ssl
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar

import numpy as np
import trio
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

import crypto
from crypto import KeyDirectory, PartyKeys
from protocols import ShuffleProtocol

from .._codec import HopCodec, OnionCodec, make_codec
from .._errors import ConfigError, FrameRefused, InboxDamaged
from ._admission import Admission
from ._config import Address, PartyConfig, chain_route, load_protocol, protocol_table
from ._inbox import Inbox
from ._statedir import lock_state_dir
from ._wire import RejectReason

__all__ = ["EVENT_LOGGER", "DurableCounter", "PartyBase", "Pending", "event", "log"]

T = TypeVar("T")

#: The logger of the structured (JSON line) events.
EVENT_LOGGER: Final = "esa.net.events"
_events = logging.getLogger(EVENT_LOGGER)


class DurableCounter(collections.Counter[str]):
    """A :class:`collections.Counter` whose changes are queued in an inbox under
    ``group`` (:meth:`Inbox.count`), so that they are stored with the next transaction.

    Args:
        inbox: where the changes go.
        group: the counters' group in the inbox (``counters`` or ``rejected``).
    """

    def __init__(self, inbox: Inbox, group: str) -> None:
        super().__init__()
        self._inbox = inbox
        self._group = group
        for name, value in inbox.counters().get(group, {}).items():
            super().__setitem__(name, value)

    def __setitem__(self, key: str, value: int) -> None:
        delta = value - self.get(key, 0)
        super().__setitem__(key, value)
        if delta:
            self._inbox.count(self._group, key, delta)


@dataclass(slots=True, eq=False)
class Pending:
    """A frame waiting for the next group commit."""

    key_epoch: int
    reports: tuple[bytes, ...]
    done: trio.Event = field(default_factory=trio.Event)
    result: tuple[int, int] | None = None
    error: BaseException | None = None


class PartyBase:
    """One party's state: its keys, inbox, counters; the base of every job's part of
    :class:`esa.net.PartyService`.

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
        self._lock = lock_state_dir(config.state_dir)
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
        self.counters: collections.Counter[str] = DurableCounter(self.inbox, "counters")
        self.rejected: collections.Counter[str] = DurableCounter(self.inbox, "rejected")
        # Built once: a bad certificate or key stops the party at start-up.
        try:
            contexts = config.tls.contexts()
        except BaseException:
            self.close()
            raise
        self.tls_batch: ssl.SSLContext | None = contexts[0] if contexts else None
        self.tls_query: ssl.SSLContext | None = contexts[1] if contexts else None
        self.tls_next: ssl.SSLContext | None = contexts[2] if contexts else None
        self._db_lock = trio.Lock()
        self.admission = Admission(config.limits, self.counters)
        self._wake_epoch = trio.Event()
        self._wake_work = trio.Event()
        self.port: int | None = None
        self.query_port: int | None = None
        # (reason, peer group) -> (when last logged, rejections not logged since).
        self._reject_logged: dict[tuple[str, str | None], tuple[float, int]] = {}
        self.last_epoch_closed_at: float | None = None
        # Epochs left closed after their processing failed (retried after a restart), and
        # why: STATUS shows them.
        self._failed_epochs: dict[int, str] = {}
        self._pending: list[Pending] = []
        self._pending_wake = trio.Event()
        self._writer_running = False
        self.last_forward_error = ""
        # topic -> (message, when logged, repeats not logged since); see _log_once.
        self._logged: dict[str, tuple[str, float, int]] = {}
        # What STATUS tells clients (esa submit encodes for it).
        self.protocol_table = protocol_table(config.protocol)

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
    def next_address(self) -> Address:
        """The next hop, dialled with the party's TLS client context (if TLS is on)."""
        assert self.config.next is not None
        return Address(self.config.next.host, self.config.next.port, tls=self.tls_next)

    def _log_recovery(self) -> None:
        """Log what a restart resumes: epochs not yet forwarded (or analyzed) and the
        reports stored before it (one ``recovered`` event on every start but the first)."""
        epochs = self.inbox.epochs()
        resumed = [e.epoch for e in epochs if e.state == "closed"]
        unsent = [e.epoch for e in epochs if e.state == "processed" and self.config.next]
        open_reports = sum(self.inbox.open_count().values())
        closed_reports = sum(self.inbox.epoch_size(e) for e in resumed)
        if not self.inbox.created:
            event(
                "recovered",
                party=self.party_name,
                epochs_resumed=resumed,
                epochs_to_forward=unsent,
                reports_recovered=open_reports + closed_reports,
                open_reports=open_reports,
                counters=dict(self.counters),
            )

    @property
    def party_name(self) -> str:
        """The party's key name (``shuffler-{c·m + hop + 1}`` in chain c; see
        :func:`esa.chain_route`)."""
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

    def _check_key_epoch(self, key_epoch: int) -> None:
        if key_epoch not in self.keys:
            raise FrameRefused(
                RejectReason.UNKNOWN_KEY_EPOCH,
                f"key epoch {key_epoch} not served; have {sorted(self.keys)}",
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
        log(f"{message} ({repeats} more times since last logged)" if repeats else message)

    def close(self) -> None:
        """Close the inbox and release the state_dir for the next instance."""
        self.inbox.close()
        self._lock.close()


def log(message: str) -> None:
    """One line on stderr, as ``esa serve`` logs."""
    print(f"esa serve: {message}", file=sys.stderr, flush=True)


def event(name: str, **fields: Any) -> None:
    """One structured event: a JSON object ``{"event": name, "time": ..., **fields}`` on
    the ``esa.net.events`` logger (INFO)."""
    if _events.isEnabledFor(logging.INFO):
        record = {"event": name, "time": round(time.time(), 3), **fields}
        _events.info(json.dumps(record, sort_keys=True, default=str))
