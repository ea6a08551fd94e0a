"""The SQLite inbox: WAL, commit-before-ack, exactly-once epochs, idempotent chunks.

Crash tests run a child Python process that writes to the inbox and is SIGKILLed (or
``os._exit``s) at a chosen point; the parent then reopens the database and checks what
survived.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from esa.net._inbox import ConflictingBatch, Inbox, InboxDamaged, InboxError, report_digest


def _reports(n: int, tag: bytes = b"r") -> list[bytes]:
    return [tag + i.to_bytes(4, "big") + bytes(11) for i in range(n)]


def test_wal_mode_and_party_binding(tmp_path: Path) -> None:
    db = tmp_path / "a.db"
    with Inbox(db, party="shuffler-1") as inbox:
        assert inbox.journal_mode == "wal"
    with pytest.raises(InboxError, match="shuffler-1"):
        Inbox(db, party="analyzer")


def test_dedup_per_key_epoch(tmp_path: Path) -> None:
    with Inbox(tmp_path / "a.db", party="s") as inbox:
        assert inbox.add_reports(0, _reports(5)) == (5, 0)
        assert inbox.add_reports(0, _reports(7)) == (2, 5)  # retry of the first five
        assert inbox.add_reports(1, _reports(3)) == (3, 0)  # another key epoch: new
        assert inbox.open_count() == {0: 7, 1: 3}
        # The digests of reports still stored stay: epoch_reports checks them.
        assert inbox.retire_key_epoch(0) == 0
        (epoch,) = inbox.close_epochs([0])
        assert len(inbox.epoch_reports(epoch)) == 7
        inbox.commit_processed(epoch, stats={})
        assert inbox.retire_key_epoch(0) == 7


def test_close_and_process_epoch_exactly_once(tmp_path: Path) -> None:
    with Inbox(tmp_path / "a.db", party="s") as inbox:
        assert inbox.close_epoch(0) is None  # nothing open: no empty epoch
        inbox.add_reports(0, _reports(4))
        e0 = inbox.close_epoch(0)
        inbox.add_reports(0, _reports(6)[4:])
        e1 = inbox.close_epoch(0)
        assert (e0, e1) == (0, 1)
        assert len(inbox.epoch_reports(0)) == 4
        assert len(inbox.epoch_reports(1)) == 2
        inbox.commit_processed(0, stats={"forwarded": 4}, counts=b"C", outbox=[b"p0", b"p1"])
        assert inbox.epoch_reports(0) == []
        with pytest.raises(InboxError, match="not awaiting"):
            inbox.commit_processed(0, stats={}, outbox=[b"again"])
        assert [e.epoch for e in inbox.epochs("closed")] == [1]
        assert [o.payload for o in inbox.pending_outbox(0)] == [b"p0", b"p1"]
        inbox.mark_acked(0, 0)
        assert [o.chunk_index for o in inbox.pending_outbox(0)] == [1]
        inbox.mark_forwarded(0)
        assert inbox.pending_outbox(0) == []
        assert inbox.epochs("forwarded")[0].stats == {"forwarded": 4}


def test_chunks_are_idempotent_and_complete_with_counts(tmp_path: Path) -> None:
    bid = bytes(32)
    kw = {"batch_id": bid, "epoch": 5, "key_epoch": 0, "chunk_count": 2}
    with Inbox(tmp_path / "a.db", party="s2") as inbox:
        assert inbox.add_chunk(chunk_index=0, reports=_reports(3), **kw) == (3, 0, True)
        assert inbox.add_chunk(chunk_index=0, reports=_reports(3), **kw) == (0, 3, False)
        assert not inbox.batch_complete(bid)
        assert inbox.add_chunk(chunk_index=1, reports=_reports(5, b"s"), **kw) == (5, 0, True)
        assert not inbox.batch_complete(bid)  # counts still missing
        assert inbox.add_counts(batch_id=bid, counts=b"COUNTS")
        assert not inbox.add_counts(batch_id=bid, counts=b"COUNTS")
        assert inbox.batch_complete(bid)
        (rec,) = inbox.epochs("closed")
        assert (rec.epoch, rec.upstream_counts) == (5, b"COUNTS")
        assert len(inbox.epoch_reports(5)) == 8
        # A different batch claiming the same epoch, or a chunk contradicting its header.
        with pytest.raises(InboxError, match="another upstream batch"):
            inbox.add_chunk(**{**kw, "batch_id": b"\x01" * 32}, chunk_index=0, reports=[])
        with pytest.raises(InboxError, match="disagrees"):
            inbox.add_chunk(**{**kw, "chunk_count": 3}, chunk_index=2, reports=[])
        with pytest.raises(InboxError, match="no chunk"):
            inbox.add_counts(batch_id=b"\x02" * 32, counts=b"x")


def test_other_content_under_stored_ids_is_a_conflict_not_a_resend(tmp_path: Path) -> None:
    # A sender that lost its inbox numbers its epochs from 0 again, so its new batch has a
    # stored batch's ids. Taken as a resend, its reports would be dropped without a word.
    bid = bytes(32)
    kw = {"batch_id": bid, "epoch": 0, "key_epoch": 0, "chunk_count": 1}
    with Inbox(tmp_path / "a.db", party="s2") as inbox:
        assert inbox.add_chunk(chunk_index=0, reports=_reports(3), **kw) == (3, 0, True)
        with pytest.raises(ConflictingBatch, match="lost or rolled back"):
            inbox.add_chunk(chunk_index=0, reports=_reports(3, b"new"), **kw)
        assert inbox.add_counts(batch_id=bid, counts=b"COUNTS")
        with pytest.raises(ConflictingBatch, match="other counts"):
            inbox.add_counts(batch_id=bid, counts=b"OTHER")
        # The genuine resends are still harmless no-ops.
        assert inbox.add_chunk(chunk_index=0, reports=_reports(3), **kw) == (0, 3, False)
        assert not inbox.add_counts(batch_id=bid, counts=b"COUNTS")


def test_an_inbox_from_before_chunk_digests_opens_and_gains_them(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    with Inbox(path, party="s2"):
        pass
    db = sqlite3.connect(path)  # rebuild the chunks table as it was: no digest column
    db.executescript(
        "DROP TABLE chunks; CREATE TABLE chunks (batch_id BLOB NOT NULL, chunk_index "
        "INTEGER NOT NULL, PRIMARY KEY (batch_id, chunk_index)) WITHOUT ROWID;"
        "INSERT INTO chunks VALUES (x'00', 0);"
    )
    db.close()
    with Inbox(path, party="s2") as inbox:
        kw = {"batch_id": b"\x01", "epoch": 1, "key_epoch": 0, "chunk_count": 1}
        assert inbox.add_chunk(chunk_index=0, reports=_reports(2), **kw) == (2, 0, True)
        with pytest.raises(ConflictingBatch):
            inbox.add_chunk(chunk_index=0, reports=_reports(2, b"x"), **kw)


def test_duplicate_reports_inside_a_batch_are_counted(tmp_path: Path) -> None:
    kw = {"batch_id": bytes(32), "epoch": 0, "key_epoch": 0, "chunk_count": 1}
    with Inbox(tmp_path / "a.db", party="s2") as inbox:
        reps = _reports(3)
        assert inbox.add_chunk(chunk_index=0, reports=[*reps, reps[0]], **kw) == (3, 1, True)
        assert inbox.upstream_duplicates(0) == 1


def test_analyzer_outputs(tmp_path: Path) -> None:
    kw = {"batch_id": bytes(32), "epoch": 0, "key_epoch": 0, "chunk_count": 1}
    with Inbox(tmp_path / "a.db", party="analyzer") as inbox:
        inbox.add_chunk(chunk_index=0, reports=_reports(2), **kw)
        inbox.add_counts(batch_id=bytes(32), counts=b"c")
        inbox.commit_processed(0, stats={"n": 2}, output=[b"ab", b"cd", b"ef"])
        ((rec, msgs),) = inbox.outputs()
        assert rec.stats == {"n": 2}
        assert msgs == [b"ab", b"cd", b"ef"]


def test_digest_binds_key_epoch() -> None:
    assert report_digest(0, b"x") != report_digest(1, b"x")


def test_a_damaged_stored_report_is_an_error_not_another_report(tmp_path: Path) -> None:
    # One flipped bit in a stored body (bit rot, a torn sector) would otherwise reach the
    # shuffler as a report that fails to decrypt: counted invalid, one user silently gone.
    with Inbox(tmp_path / "a.db", party="s") as inbox:
        inbox.add_reports(3, _reports(5))
        (epoch,) = inbox.close_epochs([3])
        (row_id,) = inbox._db.execute(
            "SELECT id FROM reports ORDER BY id LIMIT 1 OFFSET 2"
        ).fetchone()
        flipped = bytes([_reports(5)[2][0] ^ 1]) + _reports(5)[2][1:]
        inbox._db.execute("UPDATE reports SET body = ? WHERE id = ?", (flipped, row_id))
        with pytest.raises(InboxDamaged, match=rf"epoch {epoch}: 1 of its 5 .* rows {row_id}\)"):
            inbox.epoch_reports(epoch)
        assert [e.epoch for e in inbox.epochs("closed")] == [epoch]  # still to process
        # The digest is bound to the row's key epoch: a row moved to another is damage too.
        inbox._db.execute("UPDATE reports SET body = ? WHERE id = ?", (_reports(5)[2], row_id))
        assert len(inbox.epoch_reports(epoch)) == 5
        inbox._db.execute("UPDATE reports SET key_epoch = 4 WHERE id = ?", (row_id,))
        with pytest.raises(InboxDamaged):
            inbox.epoch_reports(epoch)
        inbox._db.execute("UPDATE reports SET key_epoch = 3 WHERE id = ?", (row_id,))
        # A lost digest (a damaged replay cache) is refused as well.
        inbox._db.execute("DELETE FROM seen WHERE digest = ?", (report_digest(3, _reports(5)[4]),))
        with pytest.raises(InboxDamaged, match="1 of its 5"):
            inbox.epoch_reports(epoch)


def test_integrity_check_finds_a_damaged_page(tmp_path: Path) -> None:
    path = tmp_path / "a.db"
    with Inbox(path, party="s") as inbox:
        inbox.check_integrity()  # a sound inbox passes
        inbox.add_reports(0, [os.urandom(120) for _ in range(400)])  # several pages
        inbox.check_integrity()
        # Garbage over part of an index page: found without running a query that uses it.
        (root,) = inbox._db.execute(
            "SELECT rootpage FROM sqlite_master WHERE name = 'reports_by_epoch'"
        ).fetchone()
        (page,) = inbox._db.execute("PRAGMA page_size").fetchone()
        inbox._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    with open(path, "r+b") as fh:
        fh.seek((root - 1) * page + 100)
        fh.write(b"\xff" * 64)
    with Inbox(path, party="s") as inbox, pytest.raises((InboxDamaged, sqlite3.DatabaseError)):
        inbox.check_integrity()


def test_open_since_is_the_first_open_reports_commit_time(tmp_path: Path) -> None:
    path = tmp_path / "a.db"
    with Inbox(path, party="s") as inbox:
        assert inbox.open_since(now=1.0) is None  # nothing open
        before = time.time()
        inbox.add_reports(1, _reports(3))
        after = time.time()
        since = inbox.open_since(now=1.0)
        assert since is not None
        assert before <= since <= after
        inbox.add_reports(1, _reports(5, b"x"))  # more open reports: still the first's time
        inbox.add_reports(1, _reports(3))  # a retry stores nothing
        assert inbox.open_since(now=1.0) == since
    with Inbox(path, party="s") as inbox:  # durable: a restart keeps it
        assert inbox.open_since(now=1.0) == since
        inbox.close_epochs([1])
        assert inbox.open_since(now=1.0) is None
        assert inbox.get_meta("open_since") == ""  # forgotten with the close
        inbox.add_reports(1, [b"late"])  # a new batch of open reports gets its own time
        assert (inbox.open_since(now=1.0) or 0) >= after
        # An inbox written before the time was kept: open reports but none on record are
        # taken to have arrived now, and that is kept.
        inbox._db.execute("DELETE FROM meta WHERE key = 'open_since'")
        assert inbox.open_since(now=42.0) == 42.0
        assert inbox.open_since(now=99.0) == 42.0
        # A damaged time is no time either (it used to raise ValueError in the epoch loop).
        inbox._db.execute("UPDATE meta SET value = 'x' WHERE key = 'open_since'")
        assert inbox.open_since(now=7.0) == 7.0
        assert inbox.open_since(now=8.0) == 7.0


_CHILD = textwrap.dedent(
    """
    import os, signal, sys
    from esa.net._inbox import Inbox
    inbox = Inbox(sys.argv[1], party="s")
    mode = sys.argv[2]
    reps = [b"r" + i.to_bytes(4, "big") for i in range(50)]
    inbox.add_reports(0, reps[:20])                  # committed: would be acknowledged
    print("acked 20", flush=True)
    if mode == "mid-insert":
        # Die inside an open transaction: those 30 were never acknowledged.
        inbox._db.execute("BEGIN IMMEDIATE")
        sql = "INSERT INTO reports (key_epoch, epoch, body) VALUES (0, NULL, ?)"
        for r in reps[20:]:
            inbox._db.execute(sql, (r,))
        os.kill(os.getpid(), signal.SIGKILL)
    epoch = inbox.close_epoch(0)
    if mode == "before-commit":
        os.kill(os.getpid(), signal.SIGKILL)          # processing never committed
    inbox.commit_processed(epoch, stats={}, outbox=[b"chunk"])
    os.kill(os.getpid(), signal.SIGKILL)              # after commit, before forwarding
    """
)


@pytest.mark.parametrize("mode", ["mid-insert", "before-commit", "after-commit"])
def test_sigkill_keeps_every_acknowledged_report_exactly_once(tmp_path: Path, mode: str) -> None:
    db = tmp_path / "crash.db"
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, str(db), mode],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert "acked 20" in proc.stdout
    with Inbox(db, party="s") as inbox:
        if mode == "mid-insert":
            # The uncommitted 30 are gone; the acknowledged 20 are all there, open.
            assert inbox.open_count() == {0: 20}
            assert inbox.add_reports(0, [b"r" + i.to_bytes(4, "big") for i in range(50)]) == (
                30,
                20,
            )
        elif mode == "before-commit":
            (rec,) = inbox.epochs("closed")
            assert len(inbox.epoch_reports(rec.epoch)) == 20  # re-processed on restart
            assert inbox.epochs("processed") == []
        else:
            assert inbox.epochs("closed") == []  # never processed a second time
            (rec,) = inbox.epochs("processed")
            assert [o.payload for o in inbox.pending_outbox(rec.epoch)] == [b"chunk"]
            assert inbox.open_count() == {}


def test_two_connections_see_committed_data(tmp_path: Path) -> None:
    # WAL lets a reader (e.g. a status query) see the last commit while a writer works.
    db = tmp_path / "a.db"
    writer = Inbox(db, party="s")
    reader = Inbox(db, party="s")
    try:
        writer.add_reports(0, _reports(3))
        assert reader.open_count() == {0: 3}
    finally:
        writer.close()
        reader.close()
    assert os.path.exists(db)


@settings(max_examples=25, deadline=None)
@given(
    frames=st.lists(
        st.tuples(st.integers(1, 2), st.lists(st.integers(0, 30), min_size=1, max_size=8)),
        min_size=1,
        max_size=12,
    ),
    close_after=st.sets(st.integers(0, 11)),
)
def test_every_stored_report_lands_in_exactly_one_epoch(
    tmp_path_factory: pytest.TempPathFactory,
    frames: list[tuple[int, list[int]]],
    close_after: set[int],
) -> None:
    """Random frames (with retries and repeats) and random epoch closes: each distinct
    (key epoch, report) is stored once and ends up in exactly one closed epoch."""
    db = tmp_path_factory.mktemp("prop") / "a.db"
    with Inbox(db, party="s") as inbox:
        for i, (key_epoch, ids) in enumerate(frames):
            inbox.add_reports(key_epoch, [b"r" + bytes([x]) for x in ids])
            if i in close_after:
                for ke in (1, 2):
                    inbox.close_epoch(ke)
        for ke in (1, 2):
            inbox.close_epoch(ke)
        assert inbox.open_count() == {}
        seen: list[tuple[int, bytes]] = []
        for rec in inbox.epochs("closed"):
            seen += [(rec.key_epoch, r) for r in inbox.epoch_reports(rec.epoch)]
    expected = {(ke, b"r" + bytes([x])) for ke, ids in frames for x in ids}
    assert sorted(seen) == sorted(expected)
