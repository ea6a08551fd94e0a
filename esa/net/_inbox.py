"""A party's durable inbox and outbox: SQLite in WAL mode (stdlib :mod:`sqlite3`).

One idea, one class (:class:`Inbox`), hence the length: every durable state of a party and
every transaction that moves it, kept together so that each invariant below is checked in
one place.

The durability contract:

* A party acknowledges a report (or a batch chunk) only after the transaction that stores
  it has committed; ``synchronous=FULL`` makes the commit survive a power cut, not only a
  process crash.
* Every acknowledged report is processed exactly once. An epoch moves through the states
  ``closed → processed → forwarded`` and each transition is one transaction: processing
  writes its whole output (the signed outgoing chunks, or the analyzer's decoded messages)
  and deletes its input in the same commit, so a crash before the commit re-runs the
  processing from the still-stored input and a crash after it never runs it again.
* A forwarded batch is never forwarded twice under two identities: its id is a function of
  (sender, key epoch, epoch) and its bytes are stored before the first send, so a resend
  after a crash is byte-identical and the receiver's ``(batch_id, chunk_index)`` key makes
  it a no-op.
* An epoch may be empty (:meth:`Inbox.close_epochs` for an operator's close with nothing
  open): it goes through the same states and transactions, and its "batch" is one signed
  chunk with zero reports.

Reports are deduplicated per key epoch by SHA-256 digest (the durable replay cache): a
client's retry of a frame whose ACK was lost stores nothing twice. Digests of a key epoch
can be dropped with :meth:`Inbox.retire_key_epoch` once its keys are destroyed, which keeps
the database bounded.

Storage is private and forgets what it deletes: the database and its side files are
created with mode 0600 whatever the umask (the analyzer's inbox holds decoded messages), and
``secure_delete`` overwrites deleted content. Counters (:meth:`Inbox.counters`) live in the
file too: the deltas queued with :meth:`Inbox.count` are written by the next write
transaction, the one that changes what they count, so a restart resumes them.

The analyzer keeps a result summary (:meth:`Inbox.summary`): a hook
(:attr:`Inbox.summarize`) computes it inside each transaction that changes what a result
reports (an epoch analyzed, a trap commitment or opening), so a query reads one row.

Damage is an error, never a different answer (:class:`InboxDamaged`): the replay cache
holds the digest of every stored report, so :meth:`Inbox.epoch_reports` checks each report
against it before the report is processed, and :meth:`Inbox.check_integrity` runs SQLite's
own check of the file's structure (a party runs it at start-up). An operator's tool (``esa
inbox``) opens an inbox with :meth:`Inbox.open_existing`, checks every stored report with
:meth:`Inbox.check`, and can move a closed epoch's damaged reports out of its way with
:meth:`Inbox.set_aside`: the epoch is then processed without them, and their bytes stay in
the file for forensics.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import sqlite3
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from .._errors import (
    ConflictingBatch,
    EpochAhead,
    InboxDamaged,
    InboxError,
    TrapsNotProcessed,
)
from ._testhooks import pause_point

__all__ = [
    "ConflictingBatch",
    "EpochAhead",
    "EpochRecord",
    "Inbox",
    "InboxCheck",
    "InboxDamaged",
    "InboxError",
    "OutboxEntry",
    "StoredEpoch",
    "TrapOpening",
    "TrapsNotProcessed",
    "report_digest",
]

_SCHEMA_VERSION: Final = 1

_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
-- durable replay cache: one row per report ever accepted, per key epoch
CREATE TABLE IF NOT EXISTS seen (
    key_epoch INTEGER NOT NULL, digest BLOB NOT NULL, PRIMARY KEY (key_epoch, digest)
) WITHOUT ROWID;
-- reports waiting to be processed; epoch NULL = not yet in a closed epoch
CREATE TABLE IF NOT EXISTS reports (
    id INTEGER PRIMARY KEY, key_epoch INTEGER NOT NULL, epoch INTEGER, body BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS reports_by_epoch ON reports (epoch, key_epoch);
-- chunks of upstream batches already committed (idempotent receipt), with a digest of
-- their reports so that a resend is told from other content under the same ids
CREATE TABLE IF NOT EXISTS chunks (
    batch_id BLOB NOT NULL, chunk_index INTEGER NOT NULL, digest BLOB,
    PRIMARY KEY (batch_id, chunk_index)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS upstream (
    batch_id BLOB PRIMARY KEY, epoch INTEGER NOT NULL UNIQUE, key_epoch INTEGER NOT NULL,
    chunk_count INTEGER NOT NULL, counts BLOB, duplicates INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS epochs (
    epoch INTEGER PRIMARY KEY, key_epoch INTEGER NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('closed', 'processed', 'forwarded')),
    upstream_counts BLOB, counts BLOB, stats TEXT, output BLOB, output_size INTEGER
);
-- auditor trap commitments (analyzer): committed before an epoch, opened after it; total,
-- arrived and repeated count the opening's traps (see Inbox.open_traps), auditor is the key
-- that signed it (NULL: opened before openings were signed)
CREATE TABLE IF NOT EXISTS traps (
    commitment BLOB PRIMARY KEY, after_epoch INTEGER NOT NULL,
    total INTEGER, arrived INTEGER, repeated INTEGER, auditor BLOB
);
-- every trap report ever opened, once (its analyzer layer's digest): a report is one trap,
-- whatever commitments list it
CREATE TABLE IF NOT EXISTS trap_reports (
    key_epoch INTEGER NOT NULL, digest BLOB NOT NULL, commitment BLOB NOT NULL,
    arrived INTEGER NOT NULL, PRIMARY KEY (key_epoch, digest)
) WITHOUT ROWID;
-- a party's counters (STATUS), written with the transactions that change them
CREATE TABLE IF NOT EXISTS counters (
    grp TEXT NOT NULL, name TEXT NOT NULL, value INTEGER NOT NULL, PRIMARY KEY (grp, name)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS outbox (
    epoch INTEGER NOT NULL, chunk_index INTEGER NOT NULL, payload BLOB NOT NULL,
    acked INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (epoch, chunk_index)
);
"""

# Damaged reports an operator set aside (Inbox.set_aside), bytes kept for forensics.
# report_row is the id the row had in reports; it is not the key, because SQLite may give
# a later report the id of one deleted before it.
_SET_ASIDE_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS set_aside (
    id INTEGER PRIMARY KEY, report_row INTEGER NOT NULL, key_epoch INTEGER NOT NULL,
    epoch INTEGER NOT NULL, body BLOB NOT NULL, set_aside_at REAL NOT NULL
);
"""

# Whether the reports row ``r`` still matches the replay-cache digest recorded in the
# transaction that stored it: the one test of a stored report's integrity, shared by every
# query that reads or checks reports (esa_report_digest is registered by _connect).
_MATCHES_DIGEST: Final = (
    "EXISTS (SELECT 1 FROM seen s WHERE s.key_epoch = r.key_epoch "
    "AND s.digest = esa_report_digest(r.key_epoch, r.body))"
)

# Meta key prefix: "set_aside.<epoch>" holds {"reports": how many of the epoch's reports
# were set aside in all, "at": when the last of them was (Unix seconds)} as JSON.
_SET_ASIDE_META: Final = "set_aside."


def _any_open(db: sqlite3.Connection) -> bool:
    """Whether a report is open (in no closed epoch yet)."""
    return db.execute("SELECT 1 FROM reports WHERE epoch IS NULL LIMIT 1").fetchone() is not None


def _sql_digest(key_epoch: object, report: object) -> bytes | None:
    """``esa_report_digest`` in SQL. A value of another type than was stored (one flipped
    bit in a record header turns a BLOB into TEXT) has no digest, so it matches none and
    is found damaged, rather than failing the query that reads it."""
    if not isinstance(report, bytes) or not isinstance(key_epoch, int):
        return None
    if not 0 <= key_epoch < 2**32:
        return None
    return report_digest(key_epoch, report)


def _connect(target: str, *, uri: bool = False, timeout: float = 5.0) -> sqlite3.Connection:
    """A connection with the replay-cache digest available to SQL as ``esa_report_digest``,
    so that a report is checked against the cache in the query that reads it (one round
    trip, not one lookup per report)."""
    # isolation_level=None: we issue BEGIN / COMMIT ourselves, so each logical step is
    # exactly one transaction (and one fsync).
    db = sqlite3.connect(
        target, uri=uri, timeout=timeout, isolation_level=None, check_same_thread=False
    )
    db.create_function("esa_report_digest", 2, _sql_digest, deterministic=True)
    return db


def _busy(exc: sqlite3.Error) -> bool:
    """Whether ``exc`` is SQLite giving up on another connection's lock."""
    return isinstance(exc, sqlite3.OperationalError) and any(
        word in str(exc) for word in ("locked", "busy")
    )


def _set_aside_counts(db: sqlite3.Connection) -> dict[int, int]:
    """Reports set aside per epoch. An inbox opened read-only that no party of this
    version has opened yet has no set_aside table: nothing was set aside there."""
    exists = db.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'set_aside'"
    ).fetchone()
    if exists is None:
        return {}
    rows = db.execute("SELECT epoch, COUNT(*) FROM set_aside GROUP BY epoch ORDER BY epoch")
    return {int(e): int(c) for e, c in rows.fetchall()}


def _private_files(path: Path) -> None:
    """Create ``path`` with mode 0600 if missing and make it and its side files 0600,
    whatever the umask (SQLite gives the ``-wal`` and ``-shm`` files it creates the mode
    of the database file)."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        os.fchmod(fd, 0o600)
    finally:
        os.close(fd)
    for suffix in ("-wal", "-shm", "-journal"):
        side = path.with_name(path.name + suffix)
        if side.exists():
            os.chmod(side, 0o600)


def _next_epoch_id(db: sqlite3.Connection) -> int:
    """The id the next closed epoch gets: one past the largest ever used."""
    (next_id,) = db.execute("SELECT COALESCE(MAX(epoch), -1) + 1 FROM epochs").fetchone()
    return int(next_id)


def report_digest(key_epoch: int, report: bytes) -> bytes:
    """The replay-cache key of a report: SHA-256 over its key epoch and bytes.

    Args:
        key_epoch: the key epoch the report was submitted under.
        report: the report's bytes.

    Returns:
        The 32-byte digest.
    """
    return hashlib.sha256(key_epoch.to_bytes(4, "big") + report).digest()


# Meta key: wall-clock time (seconds since the Unix epoch) at which the oldest report still
# open was committed; absent while no report is open. What a deadline counts from.
_OPEN_SINCE: Final = "open_since"


@dataclass(frozen=True, slots=True)
class EpochRecord:
    """An epoch as the inbox stores it."""

    epoch: int
    key_epoch: int
    state: str
    upstream_counts: bytes | None
    counts: bytes | None
    stats: dict[str, Any]


@dataclass(frozen=True, slots=True)
class StoredEpoch:
    """The reports an inbox holds for one epoch, each checked against its digest.

    Attributes:
        epoch: the epoch id; None for the reports still open (in no closed epoch yet).
        state: ``"open"`` for those, else the epoch's state (``closed`` until processed).
        reports: reports stored (a processed epoch's are dropped with its processing).
        damaged: ``reports`` row ids whose bytes no longer match the digest recorded when
            they were acknowledged, or whose digest is gone.
        set_aside: reports of the epoch set aside earlier (:meth:`Inbox.set_aside`).
    """

    epoch: int | None
    state: str
    reports: int
    damaged: tuple[int, ...]
    set_aside: int


@dataclass(frozen=True, slots=True)
class InboxCheck:
    """What :meth:`Inbox.check` found, from one consistent snapshot of the file.

    Attributes:
        party: the party the inbox belongs to.
        problems: what SQLite's integrity check (or a read it could not do) reports about
            the file's structure; empty when it is sound.
        epochs: every epoch the inbox knows, oldest first, then the open reports if any.
    """

    party: str
    problems: tuple[str, ...]
    epochs: tuple[StoredEpoch, ...]

    @property
    def damaged(self) -> int:
        """How many stored reports fail the digest check."""
        return sum(len(e.damaged) for e in self.epochs)

    @property
    def clean(self) -> bool:
        """Whether the file is sound and every stored report matches its digest."""
        return not self.problems and not self.damaged


@dataclass(frozen=True, slots=True)
class TrapOpening:
    """An opened trap commitment, as the analyzer's inbox records it.

    Attributes:
        commitment: the commitment (:func:`esa.net.trap_commitment`).
        auditor: the Ed25519 key that signed the opening; None for an opening recorded
            before openings were signed, which anyone could have sent.
        traps: the trap reports counted under this commitment: those it lists that no
            earlier opening listed (each trap report counts once, under its first opening).
        arrived: how many of those reached the analyzer.
        repeated: reports it lists that an earlier opening already counted.
    """

    commitment: bytes
    auditor: bytes | None
    traps: int
    arrived: int
    repeated: int

    @property
    def missing(self) -> int:
        """Counted trap reports that never reached the analyzer."""
        return self.traps - self.arrived


def _trap_opening(row: Sequence[Any]) -> TrapOpening:
    commitment, total, arrived, repeated, auditor = row
    return TrapOpening(
        bytes(commitment),
        None if auditor is None else bytes(auditor),
        int(total),
        int(arrived),
        int(repeated or 0),
    )


@dataclass(frozen=True, slots=True)
class OutboxEntry:
    """One signed outgoing chunk payload not yet acknowledged by the next hop."""

    epoch: int
    chunk_index: int
    payload: bytes


class Inbox:
    """One party's SQLite store. Not thread-safe: the service serializes calls.

    Args:
        path: database file (created if missing). ``":memory:"`` only in unit tests.
        party: the party name; an existing database of another party is refused.
    """

    def __init__(self, path: str | Path, *, party: str) -> None:
        self._path = str(path)
        self.created = False
        self._pending_counts: Counter[tuple[str, str]] = Counter()
        #: The analyzer's result summary, computed inside a write transaction (see the
        #: module docstring); None: no summary kept.
        self.summarize: Callable[[Inbox], dict[str, Any]] | None = None
        if self._path != ":memory:":
            _private_files(Path(self._path))
        self._db = _connect(self._path)
        try:
            self._setup(party)
        except BaseException:
            self._db.close()
            raise

    def _setup(self, party: str) -> None:
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.execute("PRAGMA foreign_keys=ON")
        self._db.execute("PRAGMA secure_delete=ON")
        self._db.executescript(_SCHEMA + _SET_ASIDE_SCHEMA)
        with self._txn() as db:
            # Inboxes written before chunks had a digest: their stored chunks keep none
            # (a resend of one is still taken as a resend).
            if "digest" not in {row[1] for row in db.execute("PRAGMA table_info(chunks)")}:
                db.execute("ALTER TABLE chunks ADD COLUMN digest BLOB")
            # Inboxes written before trap openings were signed: their openings keep no
            # auditor, which marks them (see trap_openings).
            trap_columns = {row[1] for row in db.execute("PRAGMA table_info(traps)")}
            for column in ("repeated INTEGER", "auditor BLOB"):
                if column.split()[0] not in trap_columns:
                    db.execute(f"ALTER TABLE traps ADD COLUMN {column}")
            rows = dict(db.execute("SELECT key, value FROM meta").fetchall())
            # Whether this open created the inbox (a party's first start on it).
            self.created = not rows
            if not rows:
                db.execute("INSERT INTO meta VALUES ('schema', ?)", (str(_SCHEMA_VERSION),))
                db.execute("INSERT INTO meta VALUES ('party', ?)", (party,))
            elif rows.get("schema") != str(_SCHEMA_VERSION) or rows.get("party") != party:
                raise InboxError(
                    f"{self._path} belongs to party {rows.get('party')!r} "
                    f"(schema {rows.get('schema')}), not {party!r}"
                )

    @classmethod
    def open_existing(cls, path: str | Path, *, write: bool = False, timeout: float = 2.0) -> Inbox:
        """Open a party's existing inbox for an operator's tool (``esa inbox``), creating,
        upgrading and binding nothing.

        Read-only (the default), it is safe next to a running party: in WAL mode a reader
        neither blocks the party's writes nor sees them half done, and each of this
        object's reads (:meth:`check`) is one snapshot. SQLite may create the file's
        ``-wal`` and ``-shm`` side files for the reader when the party is stopped, as any
        SQLite reader does; they belong to whoever runs the tool.

        With ``write`` the connection takes the file for itself for as long as it is open
        (``locking_mode=EXCLUSIVE``). That fails while any other connection has the file
        open, even an idle one, so it fails while the party runs; and while it is held,
        a party that starts waits for it (and stops with "database is locked" if it waits
        longer than its busy timeout).

        Args:
            path: the inbox database file.
            write: take the exclusive lock needed for changes (:meth:`set_aside`).
            timeout: seconds to wait for another connection's lock before giving up.

        Returns:
            The inbox.

        Raises:
            InboxError: there is no file at ``path``, it is not a party's inbox, or it is
                locked (``write``: open) by another process.
        """
        target = Path(path)
        if not target.is_file():
            raise InboxError(f"no inbox at {target}")
        uri = f"{target.resolve().as_uri()}?mode={'rw' if write else 'ro'}"
        db = _connect(uri, uri=True, timeout=timeout)
        try:
            if write:
                # Set before the first access, so the lock taken by this first
                # transaction is kept until close() (and no -shm index is shared).
                db.execute("PRAGMA locking_mode=EXCLUSIVE")
                db.execute("PRAGMA synchronous=FULL")
                db.execute("BEGIN IMMEDIATE")
                db.execute("COMMIT")
            rows = dict(db.execute("SELECT key, value FROM meta").fetchall())
        except sqlite3.Error as exc:
            db.close()
            if _busy(exc) and write:
                raise InboxError(
                    f"{target} is open in another process (a running party, or another "
                    "tool); stop the party first"
                ) from None
            if _busy(exc):
                raise InboxError(f"{target} is locked by another process; try again") from None
            if "no such table" in str(exc):
                raise InboxError(
                    f"{target} is not a party's inbox (it has no meta table)"
                ) from None
            raise InboxError(f"cannot open the inbox {target}: {exc}") from None
        if rows.get("schema") != str(_SCHEMA_VERSION) or "party" not in rows:
            db.close()
            raise InboxError(
                f"{target} is not a party's inbox of schema {_SCHEMA_VERSION} (its meta says "
                f"schema {rows.get('schema')!r}, party {rows.get('party')!r})"
            )
        inbox = cls.__new__(cls)
        inbox._path = str(target)
        inbox._db = db
        inbox._pending_counts = Counter()
        inbox.summarize = None
        inbox.created = False
        return inbox

    # ------------------------------------------------------------------ plumbing

    @contextmanager
    def _txn(self, *, summary: bool = False, pause: str = "") -> Iterator[sqlite3.Connection]:
        """One write transaction; it also writes the counter deltas queued so far and,
        with ``summary``, the result summary as of its own changes. ``pause`` names the
        crash tests' pause point before its COMMIT (:mod:`esa.net._testhooks`)."""
        self._db.execute("BEGIN IMMEDIATE")
        pending = self._pending_counts
        try:
            yield self._db
            if summary and self.summarize is not None:
                self._store_summary(self.summarize)
            self._pending_counts = Counter()
            self._write_counts(pending)
            if pause:
                pause_point(pause)
        except BaseException:
            self._db.execute("ROLLBACK")
            self._pending_counts = pending + self._pending_counts
            raise
        self._db.execute("COMMIT")

    def _store_summary(self, summarize: Callable[[Inbox], dict[str, Any]]) -> None:
        """Store the result summary; if computing it fails, drop the stored one instead
        (a query then computes the result afresh), so that the transaction — an epoch's
        analysis — never fails for its summary's sake."""
        try:
            text = json.dumps(summarize(self), sort_keys=True)
        except Exception:
            self._db.execute("DELETE FROM meta WHERE key = 'result_summary'")
            return
        self._db.execute("INSERT OR REPLACE INTO meta VALUES ('result_summary', ?)", (text,))

    def _write_counts(self, deltas: Counter[tuple[str, str]]) -> None:
        self._db.executemany(
            "INSERT INTO counters VALUES (?, ?, ?) ON CONFLICT (grp, name) "
            "DO UPDATE SET value = value + excluded.value",
            [(g, n, v) for (g, n), v in deltas.items() if v],
        )

    # ------------------------------------------------------------------ counters

    def count(self, group: str, name: str, delta: int = 1) -> None:
        """Queue ``delta`` for counter ``group/name``: written by the next write
        transaction (or :meth:`flush_counts`).

        Args:
            group: the counter's group.
            name: the counter's name.
            delta: the amount to add.
        """
        self._pending_counts[(group, name)] += delta

    def flush_counts(self) -> None:
        """Write the queued counter deltas now (a transaction of their own; none if none)."""
        if any(self._pending_counts.values()):
            with self._txn():
                pass

    def counters(self) -> dict[str, dict[str, int]]:
        """The counters as stored: ``{group: {name: value}}`` (queued deltas excluded).

        Returns:
            The stored counters.
        """
        if not self._db.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'counters'"
        ).fetchone():
            return {}
        out: dict[str, dict[str, int]] = defaultdict(dict)
        for g, n, v in self._db.execute("SELECT grp, name, value FROM counters ORDER BY grp, name"):
            out[str(g)][str(n)] = int(v)
        return dict(out)

    def summary(self) -> dict[str, Any] | None:
        """The stored result summary (the analyzer), or None if none was written yet.

        Returns:
            The summary, or None.
        """
        row = self._db.execute("SELECT value FROM meta WHERE key = 'result_summary'").fetchone()
        return None if row is None else dict(json.loads(row[0]))

    def refresh_summary(self) -> None:
        """Recompute and store the result summary now (e.g. after the summary hook was set
        on an inbox whose epochs were analyzed before)."""
        with self._txn(summary=True):
            pass

    @contextmanager
    def _snapshot(self) -> Iterator[sqlite3.Connection]:
        """One read transaction: every query in it sees the same committed state."""
        self._db.execute("BEGIN")
        try:
            yield self._db
        finally:
            # ROLLBACK, not COMMIT: a read has nothing to commit, and after a read that
            # met damage COMMIT fails with that damage once more.
            if self._db.in_transaction:
                self._db.execute("ROLLBACK")

    def close(self) -> None:
        self._db.close()

    @property
    def party(self) -> str:
        """The party this inbox belongs to (recorded when it was created)."""
        return self.get_meta("party")

    def __enter__(self) -> Inbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def check_integrity(self) -> None:
        """Run SQLite's ``PRAGMA integrity_check`` over the whole file.

        It reads every page: b-tree structure, NOT NULL and CHECK constraints, and that
        every index matches its table (a damaged ``reports_by_epoch`` index would make an
        epoch's query miss reports without an error, which ``quick_check`` would not
        find). Measured on a warm cache: 0.12 s for 10^5 stored reports (25 MB), 1.8 s for
        10^6 (250 MB); about twice ``quick_check``.

        Raises:
            InboxDamaged: the check found problems (the first few are quoted).
            sqlite3.DatabaseError: the damage is such that SQLite cannot even check.
        """
        rows = [str(r[0]) for r in self._db.execute("PRAGMA integrity_check(5)").fetchall()]
        if rows != ["ok"]:
            # One problem a line, after a "*** in database main ***" header when there are
            # several.
            lines = [ln for r in rows for ln in r.splitlines() if not ln.startswith("***")]
            raise InboxDamaged(f"integrity check failed: {'; '.join(lines)}")

    @property
    def journal_mode(self) -> str:
        return str(self._db.execute("PRAGMA journal_mode").fetchone()[0])

    def get_meta(self, key: str, default: str = "") -> str:
        """A stored metadata value.

        Args:
            key: the metadata key.
            default: what to return if it is not stored.

        Returns:
            The value, or ``default``.
        """
        row = self._db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return str(row[0]) if row else default

    def set_meta(self, key: str, value: str) -> None:
        """Store a metadata value (replacing any).

        Args:
            key: the metadata key.
            value: the value.
        """
        with self._txn() as db:
            db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, value))

    # ------------------------------------------------------------------ first hop

    def add_reports(self, key_epoch: int, reports: Sequence[bytes]) -> tuple[int, int]:
        """Durably store client reports; returns ``(stored, duplicates)`` after COMMIT.

        A report already seen in ``key_epoch`` (a retry or a replay) is not stored again.

        Args:
            key_epoch: the key epoch the reports were submitted under.
            reports: the reports.

        Returns:
            ``(stored, duplicates)``.
        """
        return self.add_report_groups([(key_epoch, reports)])[0]

    def add_report_groups(
        self, groups: Sequence[tuple[int, Sequence[bytes]]]
    ) -> list[tuple[int, int]]:
        """Store several frames' reports in ONE transaction (group commit).

        The commit's fsync is the cost of durability; concurrent frames share it. Returns
        ``(stored, duplicates)`` per group, valid once this call returns (committed).

        Args:
            groups: ``(key_epoch, reports)`` per frame.

        Returns:
            ``(stored, duplicates)`` per group, in order.
        """
        out = []
        with self._txn(pause="commit_reports") as db:
            was_open = _any_open(db)
            for key_epoch, reports in groups:
                stored = self._store_new(db, key_epoch, None, reports)
                out.append((stored, len(reports) - stored))
            if not was_open and any(stored for stored, _ in out):
                # The first open report: a deadline counts from this commit, also across
                # restarts (wall clock: a monotonic clock restarts with the machine).
                db.execute(
                    "INSERT OR REPLACE INTO meta VALUES (?, ?)", (_OPEN_SINCE, repr(time.time()))
                )
        return out

    @staticmethod
    def _store_new(
        db: sqlite3.Connection, key_epoch: int, epoch: int | None, reports: Sequence[bytes]
    ) -> int:
        """Insert the reports not yet seen in ``key_epoch`` (epoch None: still open);
        returns how many were new. Runs inside the caller's transaction."""
        stored = 0
        for body in reports:
            cur = db.execute(
                "INSERT OR IGNORE INTO seen VALUES (?, ?)",
                (key_epoch, report_digest(key_epoch, body)),
            )
            if cur.rowcount:
                db.execute(
                    "INSERT INTO reports (key_epoch, epoch, body) VALUES (?, ?, ?)",
                    (key_epoch, epoch, body),
                )
                stored += 1
        return stored

    def open_count(self) -> dict[int, int]:
        """Reports not yet in a closed epoch, per key epoch.

        Returns:
            ``{key_epoch: reports}``.
        """
        rows = self._db.execute(
            "SELECT key_epoch, COUNT(*) FROM reports WHERE epoch IS NULL GROUP BY key_epoch"
        ).fetchall()
        return {int(k): int(c) for k, c in rows}

    def open_since(self, *, now: float) -> float | None:
        """When the oldest report still open was committed (wall-clock seconds since the
        Unix epoch), or None when no report is open.

        An inbox written before this time was kept has open reports but no time on
        record, and a damaged record is no time either: they are taken to have arrived at
        ``now``, which is recorded (the deadline then starts once more, as it did on every
        restart before).

        Args:
            now: the current wall-clock time, recorded where no time is on record.

        Returns:
            The time, or None.
        """
        if not _any_open(self._db):
            return None
        row = self._db.execute("SELECT value FROM meta WHERE key = ?", (_OPEN_SINCE,)).fetchone()
        if row is not None:
            try:
                since = float(row[0])
            except (TypeError, ValueError):
                since = math.nan
            if math.isfinite(since):
                return since
        with self._txn() as db:
            db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (_OPEN_SINCE, repr(now)))
        return now

    def close_epoch(self, key_epoch: int) -> int | None:
        """Put every open report of ``key_epoch`` into a new closed epoch; returns its id.

        Returns ``None`` (and creates nothing) when no report of ``key_epoch`` is open; an
        operator's close that must always produce an epoch uses :meth:`close_epochs`.

        Args:
            key_epoch: the key epoch whose open reports to close.

        Returns:
            The new epoch's id, or ``None``.
        """
        created = self.close_epochs([key_epoch])
        return created[0] if created else None

    def close_epochs(
        self,
        key_epochs: Sequence[int],
        *,
        empty: Collection[int] = (),
        if_none_open: int | None = None,
        at: int | None = None,
    ) -> list[int]:
        """Close one epoch per key epoch in ONE transaction; returns the new epoch ids.

        With ``at``, close only if the next epoch id is ``at``: if it is past ``at`` that
        close already happened and nothing is closed (an operator's resend is a no-op); if
        it is before ``at``, :class:`EpochAhead` is raised.

        For each of ``key_epochs`` in order, its open reports go into a new closed epoch.
        A key epoch with no open report gets an *empty* closed epoch only if it is in
        ``empty``, or if it is ``if_none_open`` and no report of any of ``key_epochs`` is
        open. An empty epoch is an epoch like any other: it moves ``closed → processed →
        forwarded`` and its (empty) batch is forwarded once — that is what lets an
        operator's close reach the analyzer when nobody submitted anything.

        Args:
            key_epochs: the key epochs to close, one epoch each, in order.
            empty: key epochs that get an empty epoch when they have no open report.
            if_none_open: the key epoch that gets an empty epoch when none of ``key_epochs``
                has an open report.
            at: close only if the next epoch id is ``at``.

        Returns:
            The new epoch ids (empty if nothing was closed).

        Raises:
            EpochAhead: ``at`` is past the next epoch id.
        """
        created = []
        with self._txn() as db:
            if at is not None:
                next_id = _next_epoch_id(db)
                if next_id > at:
                    return []
                if next_id < at:
                    raise EpochAhead(f"asked to close epoch {at}, but the next epoch is {next_id}")
            counts = {
                k: int(
                    db.execute(
                        "SELECT COUNT(*) FROM reports WHERE epoch IS NULL AND key_epoch = ?",
                        (k,),
                    ).fetchone()[0]
                )
                for k in key_epochs
            }
            nothing_open = not any(counts.values())
            for key_epoch in key_epochs:
                if not (
                    counts[key_epoch]
                    or key_epoch in empty
                    or (nothing_open and key_epoch == if_none_open)
                ):
                    continue
                epoch = _next_epoch_id(db)
                db.execute(
                    "UPDATE reports SET epoch = ? WHERE epoch IS NULL AND key_epoch = ?",
                    (epoch, key_epoch),
                )
                db.execute(
                    "INSERT INTO epochs (epoch, key_epoch, state) VALUES (?, ?, 'closed')",
                    (epoch, key_epoch),
                )
                created.append(int(epoch))
            if not _any_open(db):
                # Reports of key epochs not closed here stay open and keep the older time:
                # their deadline is, if anything, early.
                db.execute("DELETE FROM meta WHERE key = ?", (_OPEN_SINCE,))
        return created

    # ------------------------------------------------------------------ later hops

    def add_chunk(
        self,
        *,
        batch_id: bytes,
        epoch: int,
        key_epoch: int,
        chunk_index: int,
        chunk_count: int,
        reports: Sequence[bytes],
    ) -> tuple[int, int, bool]:
        """Durably store one chunk of an upstream batch.

        Args:
            batch_id: the upstream batch's id.
            epoch: the upstream party's epoch id of the batch.
            key_epoch: the key epoch of its reports.
            chunk_index: this chunk's index in the batch.
            chunk_count: the batch's number of chunks.
            reports: the chunk's reports.

        Returns:
            ``(stored, duplicates, new_chunk)``. A chunk already committed is a no-op
            (``new_chunk`` False): this is what makes resends after a crash harmless.

        Raises:
            ConflictingBatch: the chunk contradicts what was stored for its batch or epoch
                (a second batch for one epoch, another chunk count, other reports under a
                stored chunk's ids); the caller rejects it.
        """
        digest = hashlib.sha256(b"".join(len(r).to_bytes(4, "big") + r for r in reports)).digest()
        with self._txn(pause="commit_chunk") as db:
            row = db.execute(
                "SELECT epoch, key_epoch, chunk_count FROM upstream WHERE batch_id = ?",
                (batch_id,),
            ).fetchone()
            if row is None:
                other = db.execute("SELECT 1 FROM upstream WHERE epoch = ?", (epoch,)).fetchone()
                if other is not None:
                    raise ConflictingBatch(
                        f"epoch {epoch} already has another upstream batch (has the sender "
                        "lost or rolled back its inbox?)"
                    )
                db.execute(
                    "INSERT INTO upstream VALUES (?, ?, ?, ?, NULL, 0)",
                    (batch_id, epoch, key_epoch, chunk_count),
                )
            elif tuple(row) != (epoch, key_epoch, chunk_count):
                raise ConflictingBatch("chunk disagrees with its batch header")
            cur = db.execute(
                "INSERT OR IGNORE INTO chunks VALUES (?, ?, ?)", (batch_id, chunk_index, digest)
            )
            if not cur.rowcount:
                (stored_digest,) = db.execute(
                    "SELECT digest FROM chunks WHERE batch_id = ? AND chunk_index = ?",
                    (batch_id, chunk_index),
                ).fetchone()
                if stored_digest is not None and stored_digest != digest:
                    raise ConflictingBatch(
                        f"chunk {chunk_index} of epoch {epoch}'s batch differs from the one "
                        "stored under the same ids (has the sender lost or rolled back its "
                        "inbox?)"
                    )
                return 0, len(reports), False
            stored = self._store_new(db, key_epoch, epoch, reports)
            db.execute(
                "UPDATE upstream SET duplicates = duplicates + ? WHERE batch_id = ?",
                (len(reports) - stored, batch_id),
            )
            self._maybe_complete(db, batch_id)
        return stored, len(reports) - stored, True

    def add_counts(self, *, batch_id: bytes, counts: bytes) -> bool:
        """Store the upstream COUNTS frame of a batch; returns whether it was new.

        Args:
            batch_id: the upstream batch's id.
            counts: the COUNTS frame's payload.

        Returns:
            True if the counts were new.

        Raises:
            InboxError: no chunk of the batch has arrived yet.
            ConflictingBatch: other counts are stored for the batch (a resend is byte for
                byte the same: the statements are signed deterministically).
        """
        with self._txn() as db:
            row = db.execute(
                "SELECT counts FROM upstream WHERE batch_id = ?", (batch_id,)
            ).fetchone()
            if row is None:
                raise InboxError("counts for a batch with no chunk yet")
            if row[0] is not None:
                if bytes(row[0]) != counts:
                    raise ConflictingBatch(
                        "other counts are stored for this batch (has the sender lost or "
                        "rolled back its inbox?)"
                    )
                return False
            db.execute("UPDATE upstream SET counts = ? WHERE batch_id = ?", (counts, batch_id))
            self._maybe_complete(db, batch_id)
        return True

    def upstream_duplicates(self, epoch: int) -> int:
        """Reports of an epoch's upstream batch that repeated an already-seen report.

        Args:
            epoch: the epoch's id.

        Returns:
            The number of repeated reports.
        """
        row = self._db.execute(
            "SELECT duplicates FROM upstream WHERE epoch = ?", (epoch,)
        ).fetchone()
        return int(row[0]) if row else 0

    def batch_complete(self, batch_id: bytes) -> bool:
        """Whether an upstream batch is stored whole, its epoch recorded.

        Args:
            batch_id: the upstream batch's id.

        Returns:
            True once every chunk (and the batch's epoch) is stored.
        """
        row = self._db.execute(
            "SELECT u.epoch FROM upstream u JOIN epochs e ON e.epoch = u.epoch "
            "WHERE u.batch_id = ?",
            (batch_id,),
        ).fetchone()
        return row is not None

    @staticmethod
    def _maybe_complete(db: sqlite3.Connection, batch_id: bytes) -> None:
        epoch, key_epoch, chunk_count, counts = db.execute(
            "SELECT epoch, key_epoch, chunk_count, counts FROM upstream WHERE batch_id = ?",
            (batch_id,),
        ).fetchone()
        (have,) = db.execute(
            "SELECT COUNT(*) FROM chunks WHERE batch_id = ?", (batch_id,)
        ).fetchone()
        if counts is None or have < chunk_count:
            return
        db.execute(
            "INSERT OR IGNORE INTO epochs (epoch, key_epoch, state, upstream_counts) "
            "VALUES (?, ?, 'closed', ?)",
            (epoch, key_epoch, counts),
        )

    # ------------------------------------------------------------------ processing

    def next_epoch(self) -> int:
        """The id the next closed epoch will get (epoch ids are never reused).

        Returns:
            The next epoch id.
        """
        with self._txn() as db:
            return _next_epoch_id(db)

    def epochs(self, state: str | None = None) -> list[EpochRecord]:
        """Epochs in ``state`` (all when None), oldest first.

        Args:
            state: an epoch state, or None for every epoch.

        Returns:
            The epochs' records.
        """
        query = "SELECT epoch, key_epoch, state, upstream_counts, counts, stats FROM epochs"
        args: tuple[Any, ...] = ()
        if state is not None:
            query += " WHERE state = ?"
            args = (state,)
        rows = self._db.execute(query + " ORDER BY epoch", args).fetchall()
        return [
            EpochRecord(int(e), int(k), str(s), u, c, json.loads(st) if st else {})
            for e, k, s, u, c, st in rows
        ]

    def epoch_reports(self, epoch: int) -> list[bytes]:
        """The stored input reports of a closed epoch, in arrival order, each checked
        against the replay-cache digest recorded in the transaction that stored it.

        Args:
            epoch: a closed epoch's id.

        Returns:
            The reports.

        Raises:
            InboxDamaged: a report does not match its digest (or its digest is gone): the
                stored bytes are not what was acknowledged, so the epoch must not be
                processed from them. The message names the ``reports`` rows.
        """
        rows = self._db.execute(
            f"SELECT r.id, r.body, {_MATCHES_DIGEST} FROM reports r WHERE r.epoch = ? "
            "ORDER BY r.id",
            (epoch,),
        ).fetchall()
        damaged = [int(i) for i, _, ok in rows if not ok]
        if damaged:
            shown = ", ".join(map(str, damaged[:10])) + (", …" if len(damaged) > 10 else "")
            raise InboxDamaged(
                f"epoch {epoch}: {len(damaged)} of its {len(rows)} stored reports do not "
                f"match the digest recorded when they were acknowledged (reports rows "
                f"{shown}): the inbox file is damaged"
            )
        return [bytes(body) for _, body, _ in rows]

    def check(self) -> InboxCheck:
        """Check the whole inbox from one snapshot: SQLite's integrity check
        (:meth:`check_integrity`), then every stored report against its digest, as
        :meth:`epoch_reports` checks an epoch's before processing it.

        Nothing is written: this runs on a read-only inbox next to a running party. It
        costs about the integrity check plus one SHA-256 per stored report.

        Returns:
            An :class:`InboxCheck`: structural problems (damage SQLite cannot even read
            past is one of them), and per epoch its state, stored reports, damaged rows
            and reports set aside earlier.

        Raises:
            sqlite3.OperationalError: another connection's lock outlasted the timeout
                (only a writer holding the file for itself, see :meth:`open_existing`).
        """
        problems: list[str] = []
        epochs: tuple[StoredEpoch, ...] = ()
        with self._snapshot() as db:
            try:
                self.check_integrity()
            except InboxDamaged as exc:
                problems.append(str(exc))
            except sqlite3.DatabaseError as exc:
                if _busy(exc):
                    raise
                problems.append(f"SQLite cannot check the file: {exc}")
            try:
                epochs = self._stored_epochs(db)
            except sqlite3.DatabaseError as exc:
                if _busy(exc):
                    raise
                problems.append(f"cannot read the stored reports: {exc}")
        return InboxCheck(self.party, tuple(problems), epochs)

    @staticmethod
    def _stored_epochs(db: sqlite3.Connection) -> tuple[StoredEpoch, ...]:
        counts = {
            e: int(c) for e, c in db.execute("SELECT epoch, COUNT(*) FROM reports GROUP BY epoch")
        }
        damaged: defaultdict[int | None, list[int]] = defaultdict(list)
        for row_id, epoch in db.execute(
            f"SELECT r.id, r.epoch FROM reports r WHERE NOT {_MATCHES_DIGEST} ORDER BY r.id"
        ):
            damaged[epoch].append(int(row_id))
        states = {int(e): str(s) for e, s in db.execute("SELECT epoch, state FROM epochs")}
        aside = _set_aside_counts(db)
        # Reports filed under an epoch with no epochs row are damage of another kind; they
        # are listed (state "unknown") rather than skipped.
        ids = sorted(set(states) | {e for e in counts if e is not None} | set(aside))
        out = [
            StoredEpoch(
                e, states.get(e, "unknown"), counts.get(e, 0), tuple(damaged[e]), aside.get(e, 0)
            )
            for e in ids
        ]
        if None in counts:
            out.append(StoredEpoch(None, "open", counts[None], tuple(damaged[None]), 0))
        return tuple(out)

    def set_aside(self, epoch: int) -> list[int]:
        """Move the damaged reports of a closed epoch out of its way, in ONE transaction.

        The reports that fail the digest check (as :meth:`epoch_reports` would find them)
        move from ``reports`` to the ``set_aside`` table, bytes and all: nothing is
        deleted. The meta key ``set_aside.<epoch>`` records how many of the epoch's
        reports were set aside in all and when the last were. The epoch stays ``closed``,
        so the party's next start processes it from the reports left; its count statement
        then shows them only.

        SQLite's integrity check runs first, in the same transaction: moving rows inside a
        file whose structure is damaged could lose more than it saves.

        Args:
            epoch: a ``closed`` epoch that :meth:`epoch_reports` refuses as damaged.

        Returns:
            The ``reports`` row ids set aside, ascending.

        Raises:
            InboxError: the epoch does not exist, is not ``closed`` (a processed epoch's
                reports are gone already), or none of its reports is damaged.
            InboxDamaged: the integrity check fails; restore the file from a backup.
            sqlite3.Error: the transaction failed (a full disk, damage met while moving the
                rows); it is rolled back, nothing changed.
        """
        with self._txn() as db:
            try:
                self.check_integrity()
            except sqlite3.DatabaseError as exc:
                if _busy(exc):
                    raise
                raise InboxDamaged(f"SQLite cannot check the file: {exc}") from None
            row = db.execute("SELECT state FROM epochs WHERE epoch = ?", (epoch,)).fetchone()
            if row is None:
                raise InboxError(f"there is no epoch {epoch} in this inbox")
            if row[0] != "closed":
                raise InboxError(
                    f"epoch {epoch} is {row[0]}: its reports were dropped when it was "
                    "processed, so there is nothing to set aside (only a closed epoch holds "
                    "reports)"
                )
            rows = db.execute(
                f"SELECT r.id, {_MATCHES_DIGEST} FROM reports r WHERE r.epoch = ? ORDER BY r.id",
                (epoch,),
            ).fetchall()
            damaged = [int(i) for i, ok in rows if not ok]
            if not damaged:
                raise InboxError(
                    f"epoch {epoch}: none of its {len(rows)} stored reports is damaged; "
                    "nothing set aside"
                )
            now = time.time()
            db.execute(_SET_ASIDE_SCHEMA)  # an inbox not opened by this version's party yet
            db.executemany(
                "INSERT INTO set_aside (report_row, key_epoch, epoch, body, set_aside_at) "
                "SELECT id, key_epoch, epoch, body, ? FROM reports WHERE id = ?",
                [(now, i) for i in damaged],
            )
            db.executemany("DELETE FROM reports WHERE id = ?", [(i,) for i in damaged])
            (total,) = db.execute(
                "SELECT COUNT(*) FROM set_aside WHERE epoch = ?", (epoch,)
            ).fetchone()
            db.execute(
                "INSERT OR REPLACE INTO meta VALUES (?, ?)",
                (f"{_SET_ASIDE_META}{epoch}", json.dumps({"reports": int(total), "at": now})),
            )
        return damaged

    def set_aside_counts(self) -> dict[int, int]:
        """How many reports were set aside per epoch (:meth:`set_aside`); empty if none.

        Returns:
            ``{epoch: reports set aside}``.
        """
        return _set_aside_counts(self._db)

    def epoch_size(self, epoch: int) -> int:
        """How many input reports a closed epoch holds (0 for an empty epoch).

        Args:
            epoch: a closed epoch's id.

        Returns:
            The number of reports.
        """
        row = self._db.execute("SELECT COUNT(*) FROM reports WHERE epoch = ?", (epoch,)).fetchone()
        return int(row[0])

    def commit_processed(
        self,
        epoch: int,
        *,
        stats: dict[str, Any],
        counts: bytes | None = None,
        outbox: Sequence[bytes] = (),
        output: Sequence[bytes] | None = None,
        also: Callable[[sqlite3.Connection], object] | None = None,
    ) -> None:
        """Atomically record an epoch's processing and drop its input.

        Args:
            epoch: a ``closed`` epoch.
            stats: per-epoch counters (JSON).
            counts: the COUNTS payload to send after the chunks (shufflers).
            outbox: the signed outgoing chunk payloads (shufflers).
            output: decoded fixed-size messages (the analyzer), stored concatenated.
            also: called with the connection inside the same transaction, after the
                epoch's own writes (the analyzer's budget ledger, :mod:`esa.net._ledger`);
                whatever it raises rolls the whole transaction back.

        Raises:
            InboxError: the epoch is not ``closed`` (it was processed already).
        """
        pause_point("before_commit_processed")
        with self._txn(summary=True, pause="commit_processed") as db:
            row = db.execute("SELECT state FROM epochs WHERE epoch = ?", (epoch,)).fetchone()
            if row is None or row[0] != "closed":
                raise InboxError(f"epoch {epoch} is not awaiting processing (state {row})")
            size = len(output[0]) if output else 0
            db.execute(
                "UPDATE epochs SET state = 'processed', stats = ?, counts = ?, output = ?, "
                "output_size = ? WHERE epoch = ?",
                (
                    json.dumps(stats, sort_keys=True),
                    counts,
                    b"".join(output) if output is not None else None,
                    size,
                    epoch,
                ),
            )
            db.executemany(
                "INSERT INTO outbox (epoch, chunk_index, payload) VALUES (?, ?, ?)",
                [(epoch, i, p) for i, p in enumerate(outbox)],
            )
            db.execute("DELETE FROM reports WHERE epoch = ?", (epoch,))
            if also is not None:
                also(db)

    def pending_outbox(self, epoch: int) -> list[OutboxEntry]:
        """The outgoing chunks of an epoch that the next hop has not acknowledged.

        Args:
            epoch: the epoch's id.

        Returns:
            The chunks, in chunk order.
        """
        rows = self._db.execute(
            "SELECT chunk_index, payload FROM outbox WHERE epoch = ? AND acked = 0 "
            "ORDER BY chunk_index",
            (epoch,),
        ).fetchall()
        return [OutboxEntry(epoch, int(i), bytes(p)) for i, p in rows]

    def mark_acked(self, epoch: int, chunk_index: int) -> None:
        """Record that the next hop acknowledged one outgoing chunk of an epoch.

        Args:
            epoch: the epoch's id.
            chunk_index: the chunk's index.
        """
        with self._txn() as db:
            db.execute(
                "UPDATE outbox SET acked = 1 WHERE epoch = ? AND chunk_index = ?",
                (epoch, chunk_index),
            )

    def mark_forwarded(self, epoch: int) -> None:
        """The next hop acknowledged every chunk and the counts; outgoing bytes are freed.

        Args:
            epoch: the epoch's id.
        """
        with self._txn() as db:
            db.execute(
                "UPDATE epochs SET state = 'forwarded' WHERE epoch = ? AND state = 'processed'",
                (epoch,),
            )
            db.execute("DELETE FROM outbox WHERE epoch = ?", (epoch,))

    def outputs(self) -> list[tuple[EpochRecord, list[bytes]]]:
        """Every processed epoch's decoded messages (the analyzer), oldest first.

        Returns:
            ``(epoch, messages)`` per processed epoch.
        """
        rows = self._db.execute(
            "SELECT epoch, output, output_size FROM epochs WHERE state != 'closed' ORDER BY epoch"
        ).fetchall()
        records = {r.epoch: r for r in self.epochs()}
        out = []
        for epoch, blob, size in rows:
            blob = bytes(blob or b"")
            msgs = [blob[i : i + size] for i in range(0, len(blob), size)] if size else []
            out.append((records[int(epoch)], msgs))
        return out

    def key_epochs_seen(self) -> list[int]:
        """Key epochs with replay digests on record.

        Returns:
            The key epochs, ascending.
        """
        rows = self._db.execute("SELECT DISTINCT key_epoch FROM seen ORDER BY key_epoch")
        return [int(r[0]) for r in rows.fetchall()]

    def retire_key_epoch(self, key_epoch: int) -> int:
        """Forget the replay digests of a key epoch whose private keys are destroyed.

        Reports for it can no longer be decrypted, so a replay fails anyway; dropping the
        digests bounds the database. The digests of reports still stored are kept: they
        are what :meth:`epoch_reports` checks those reports against. Returns the number
        of digests removed.

        Args:
            key_epoch: the retired key epoch.

        Returns:
            The number of digests removed.
        """
        with self._txn() as db:
            keep = {
                (key_epoch, bytes(digest))
                for (digest,) in db.execute(
                    "SELECT s.digest FROM reports r JOIN seen s ON s.key_epoch = r.key_epoch "
                    "AND s.digest = esa_report_digest(r.key_epoch, r.body) "
                    "WHERE r.key_epoch = ?",
                    (key_epoch,),
                ).fetchall()
            }
            cur = db.execute("DELETE FROM seen WHERE key_epoch = ?", (key_epoch,))
            db.executemany("INSERT OR IGNORE INTO seen VALUES (?, ?)", keep)
        return int(cur.rowcount) - len(keep)

    # ------------------------------------------------------------------ traps (analyzer)

    def add_trap_commitment(self, commitment: bytes) -> int:
        """Record an auditor's commitment; returns the last epoch it does *not* cover.

        Args:
            commitment: the 32-byte commitment.

        Returns:
            The largest epoch id when the commitment was first recorded (−1 if there was none).
        """
        with self._txn(summary=True) as db:
            (last,) = db.execute("SELECT COALESCE(MAX(epoch), -1) FROM epochs").fetchone()
            db.execute(
                "INSERT OR IGNORE INTO traps (commitment, after_epoch) VALUES (?, ?)",
                (commitment, last),
            )
            (after,) = db.execute(
                "SELECT after_epoch FROM traps WHERE commitment = ?", (commitment,)
            ).fetchone()
        return int(after)

    def trap(self, commitment: bytes) -> tuple[int, TrapOpening | None] | None:
        """``(after_epoch, its opening or None while unopened)`` of a commitment, or None
        if it is unknown.

        Args:
            commitment: the commitment.

        Returns:
            The pair, or None.
        """
        row = self._db.execute(
            "SELECT after_epoch, commitment, total, arrived, repeated, auditor FROM traps "
            "WHERE commitment = ?",
            (commitment,),
        ).fetchone()
        if row is None:
            return None
        return int(row[0]), None if row[2] is None else _trap_opening(row[1:])

    def open_traps(
        self, commitment: bytes, key_epoch: int, reports: Sequence[bytes], *, auditor: bytes
    ) -> TrapOpening:
        """Record the opening of a known commitment, signed by ``auditor``: which of its
        trap reports (analyzer layers) reached this party.

        Each trap report counts once, ever: one an earlier opening already listed — under
        this commitment or another — is ``repeated``, not counted again, so the traps
        counted never exceed the distinct trap reports opened, nor the arrived ones the
        distinct reports received. Opening a commitment again changes nothing and returns
        the first opening.

        Args:
            commitment: the commitment being opened.
            key_epoch: the traps' key epoch.
            reports: the trap reports (analyzer layers) of the opening.
            auditor: the auditor's verify key that signed the opening.

        Returns:
            The opening: the traps listed, repeated, arrived and missing.

        Raises:
            InboxError: ``commitment`` is unknown, or ``reports`` lists one report twice.
            TrapsNotProcessed: a listed report is stored here unprocessed; nothing is
                recorded.
        """
        if len(set(reports)) != len(reports):
            raise InboxError("a trap opening lists a report twice")
        digests = [report_digest(key_epoch, r) for r in reports]
        with self._txn(summary=True) as db:
            row = db.execute(
                "SELECT commitment, total, arrived, repeated, auditor FROM traps "
                "WHERE commitment = ?",
                (commitment,),
            ).fetchone()
            if row is None:
                raise InboxError("no such trap commitment")
            if row[1] is not None:
                return _trap_opening(row)
            wanted = set(reports)
            waiting = sum(
                body in wanted
                for (body,) in db.execute(
                    "SELECT body FROM reports WHERE key_epoch = ?", (key_epoch,)
                )
            )
            if waiting:
                raise TrapsNotProcessed(
                    f"{waiting} of the traps reached the analyzer in an epoch not processed "
                    "yet; open again once it is"
                )
            counted = arrived = repeated = 0
            for digest in digests:
                if db.execute(
                    "SELECT 1 FROM trap_reports WHERE key_epoch = ? AND digest = ?",
                    (key_epoch, digest),
                ).fetchone():
                    repeated += 1
                    continue
                hit = db.execute(
                    "SELECT 1 FROM seen WHERE key_epoch = ? AND digest = ?", (key_epoch, digest)
                ).fetchone()
                db.execute(
                    "INSERT INTO trap_reports VALUES (?, ?, ?, ?)",
                    (key_epoch, digest, commitment, int(hit is not None)),
                )
                counted += 1
                arrived += hit is not None
            db.execute(
                "UPDATE traps SET total = ?, arrived = ?, repeated = ?, auditor = ? "
                "WHERE commitment = ?",
                (counted, arrived, repeated, auditor, commitment),
            )
        return TrapOpening(commitment, auditor, counted, arrived, repeated)

    def trap_openings(self) -> tuple[list[TrapOpening], int]:
        """``(every opening in the order of the commitments, unopened commitments)``.

        An opening with no ``auditor`` was recorded before openings were signed: anyone
        could have sent it, and its traps were counted without the one-count-per-report
        rule, so RESULT leaves it out (and says how many).

        Returns:
            The openings and the number of unopened commitments.
        """
        rows = self._db.execute(
            "SELECT commitment, total, arrived, repeated, auditor FROM traps "
            "WHERE total IS NOT NULL ORDER BY rowid"
        ).fetchall()
        (pending,) = self._db.execute("SELECT COUNT(*) FROM traps WHERE total IS NULL").fetchone()
        return [_trap_opening(r) for r in rows], int(pending)
