"""The first shuffler's per-epoch report quotas, kept on disk so that a restart cannot reset
them.

A quota (a client token's, or ``[admission] reports_per_epoch_per_peer``) counts the
reports charged to a client or an address group since the last epoch closed. Those counts
live in :data:`QUOTAS_FILE` in the party's state_dir, a SQLite database written the way
the inbox is (WAL, ``synchronous=FULL``, ``secure_delete``, mode 0600): the counts a frame
was charged are committed before the frame's reports, so before its ACK
(:meth:`Intake._commit_reports`).
A party killed and restarted thus finds every acknowledged report still charged; a frame
refused whole (nothing of it stored) has its charge written with the next commit.

The counts belong to a *window*: the id the next closed epoch gets
(:meth:`~esa.net._inbox.Inbox.next_epoch`), which the inbox stores with the close itself.
When an epoch closes the window moves on, and the counts of earlier windows are dropped
at the next write.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Mapping
from pathlib import Path
from typing import Final

__all__ = ["QUOTAS_FILE", "QuotaStore"]

#: The quota database's file name in a state_dir.
QUOTAS_FILE: Final = "quotas.db"

_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS quota_used (
    key TEXT PRIMARY KEY, quota_window INTEGER NOT NULL, used INTEGER NOT NULL
) WITHOUT ROWID;
"""


class QuotaStore:
    """The reports charged per client or address group in the current window, on disk.

    The database is opened on first use: a party that never charges a quota never
    creates it.

    Args:
        path: the database file (in the party's state_dir).
    """

    def __init__(self, path: Path) -> None:
        self._path = path
        self._db: sqlite3.Connection | None = None

    def _open(self) -> sqlite3.Connection:
        if self._db is None:
            fd = os.open(self._path, os.O_RDWR | os.O_CREAT, 0o600)
            os.fchmod(fd, 0o600)
            os.close(fd)
            db = sqlite3.connect(self._path, isolation_level=None, check_same_thread=False)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=FULL")
            # It names clients and addresses: an epoch's counts, once dropped, are gone.
            db.execute("PRAGMA secure_delete=ON")
            db.executescript(_SCHEMA)
            for suffix in ("-wal", "-shm"):
                side = self._path.with_name(self._path.name + suffix)
                if side.exists():
                    os.chmod(side, 0o600)
            self._db = db
        return self._db

    def load(self, window: int) -> dict[str, int]:
        """The counts stored for ``window`` (none if the database does not exist yet).

        Args:
            window: the quota window (the next epoch id).

        Returns:
            Reports charged, by key (``peer:…`` or ``client:…``).
        """
        if self._db is None and not self._path.exists():
            return {}
        rows = self._open().execute(
            "SELECT key, used FROM quota_used WHERE quota_window = ?", (window,)
        )
        return {str(key): int(used) for key, used in rows}

    def save(self, window: int, used: Mapping[str, int]) -> None:
        """Store ``used`` as ``window``'s counts of those keys, in one durable transaction
        that also drops every earlier window's counts.

        Args:
            window: the quota window.
            used: reports charged, by key.
        """
        if not used:
            return
        db = self._open()
        db.execute("BEGIN IMMEDIATE")
        try:
            db.execute("DELETE FROM quota_used WHERE quota_window <> ?", (window,))
            db.executemany(
                "INSERT INTO quota_used (key, quota_window, used) VALUES (?, ?, ?) "
                "ON CONFLICT (key) DO UPDATE "
                "SET quota_window = excluded.quota_window, used = excluded.used",
                [(key, window, n) for key, n in used.items()],
            )
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise

    def close(self) -> None:
        """Close the database (if it was opened)."""
        if self._db is not None:
            self._db.close()
            self._db = None
