"""``esa inbox``: check an inbox for damaged reports and set them aside.

The inbox methods (:meth:`Inbox.check`, :meth:`Inbox.set_aside`, :meth:`Inbox.open_existing`)
are tested on small databases damaged by hand; the command's exit codes, table, JSON and
one-line errors through :func:`simulations.cli.main`; the locking against a running party
in-process and with a second process holding the file; and the whole operator's way on
end to end with the service machinery of ``tests/test_net_durability.py``: an epoch stopped
by a damaged report, set aside, processed after a restart with the smaller count.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import trio

import crypto
import esa.net
from esa.net._inbox import Inbox, InboxDamaged, InboxError, StoredEpoch, report_digest
from simulations.cli import main
from simulations.commands import inbox as inbox_command
from tests._cli import usage_error
from tests.test_net_durability import store_and_damage_one
from tests.test_net_faults import KEY_EPOCH, _reports, _service

PARTY = "shuffler-1"


@pytest.fixture(autouse=True)
def _wide_tables(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tables as wide as their lines, so that a long path is not wrapped mid-phrase."""
    monkeypatch.setenv("COLUMNS", "400")


def _bodies(n: int, tag: bytes) -> list[bytes]:
    return [tag + i.to_bytes(4, "big") + bytes(11) for i in range(n)]


def _flip(report: bytes) -> bytes:
    """The report with one bit flipped, as bit rot leaves it."""
    return report[:-1] + bytes([report[-1] ^ 1])


def _row(inbox: Inbox, body: bytes) -> int:
    (row_id,) = inbox._db.execute("SELECT id FROM reports WHERE body = ?", (body,)).fetchone()
    return int(row_id)


def _damaged_inbox(path: Path) -> dict[str, list[int]]:
    """An inbox with epoch 0 processed, epoch 1 closed with 5 reports of which two are
    damaged (a flipped bit; a lost digest), epoch 2 closed and sound, and 3 open reports of
    which one is damaged. Returns the damaged rows by where they are."""
    with Inbox(path, party=PARTY) as inbox:
        inbox.add_reports(KEY_EPOCH, _bodies(4, b"a"))
        inbox.close_epochs([KEY_EPOCH])
        inbox.commit_processed(0, stats={})
        first = _bodies(5, b"b")
        inbox.add_reports(KEY_EPOCH, first)
        inbox.close_epochs([KEY_EPOCH])
        inbox.add_reports(KEY_EPOCH, _bodies(2, b"c"))
        inbox.close_epochs([KEY_EPOCH])
        late = _bodies(3, b"d")
        inbox.add_reports(KEY_EPOCH, late)
        flipped, lost, open_flipped = (
            _row(inbox, first[1]),
            _row(inbox, first[3]),
            _row(inbox, late[2]),
        )
        db = inbox._db
        db.execute("UPDATE reports SET body = ? WHERE id = ?", (_flip(first[1]), flipped))
        db.execute("DELETE FROM seen WHERE digest = ?", (report_digest(KEY_EPOCH, first[3]),))
        db.execute("UPDATE reports SET body = ? WHERE id = ?", (_flip(late[2]), open_flipped))
    return {"epoch 1": [flipped, lost], "open": [open_flipped]}


# ---------------------------------------------------------------------- Inbox methods


def test_check_finds_every_damaged_report_by_epoch(tmp_path: Path) -> None:
    path = tmp_path / "inbox.db"
    rows = _damaged_inbox(path)
    with Inbox.open_existing(path) as inbox:
        found = inbox.check()
    assert found.party == PARTY
    assert found.problems == ()
    assert found.epochs == (
        StoredEpoch(0, "processed", 0, (), 0),
        StoredEpoch(1, "closed", 5, tuple(rows["epoch 1"]), 0),
        StoredEpoch(2, "closed", 2, (), 0),
        StoredEpoch(None, "open", 3, tuple(rows["open"]), 0),
    )
    assert (found.damaged, found.clean) == (3, False)
    # The same test epoch_reports applies before processing, not a second opinion.
    with Inbox(path, party=PARTY) as inbox:
        with pytest.raises(InboxDamaged, match=r"2 of its 5"):
            inbox.epoch_reports(1)
        assert len(inbox.epoch_reports(2)) == 2


def test_a_sound_inbox_is_clean(tmp_path: Path) -> None:
    path = tmp_path / "inbox.db"
    with Inbox(path, party=PARTY) as inbox:
        inbox.add_reports(KEY_EPOCH, _bodies(3, b"a"))
        inbox.close_epochs([KEY_EPOCH])
    with Inbox.open_existing(path) as inbox:
        found = inbox.check()
    assert found.clean
    assert found.epochs == (StoredEpoch(0, "closed", 3, (), 0),)


def test_a_report_read_back_as_another_type_is_damage_not_a_failed_query(
    tmp_path: Path,
) -> None:
    # One bit of a record header turns a BLOB into TEXT; the digest function used to raise
    # inside the query, which the party took for a storage error and retried forever.
    with Inbox(tmp_path / "inbox.db", party=PARTY) as inbox:
        inbox.add_reports(KEY_EPOCH, _bodies(3, b"a"))
        inbox.close_epochs([KEY_EPOCH])
        inbox._db.execute("UPDATE reports SET body = CAST(body AS TEXT) WHERE id = 2")
        with pytest.raises(InboxDamaged, match=r"1 of its 3 .* rows 2\)"):
            inbox.epoch_reports(0)
        assert inbox.check().epochs[0].damaged == (2,)
        assert inbox.set_aside(0) == [2]


def test_set_aside_moves_the_damaged_reports_and_keeps_their_bytes(tmp_path: Path) -> None:
    path = tmp_path / "inbox.db"
    rows = _damaged_inbox(path)
    with Inbox(path, party=PARTY) as inbox:
        bodies = dict(inbox._db.execute("SELECT id, body FROM reports WHERE epoch = 1").fetchall())
        assert inbox.set_aside(1) == rows["epoch 1"]
        # The epoch waits for processing as before, now from the three sound reports.
        assert [e.epoch for e in inbox.epochs("closed")] == [1, 2]
        assert sorted(inbox.epoch_reports(1)) == sorted(
            b for i, b in bodies.items() if i not in rows["epoch 1"]
        )
        kept = inbox._db.execute(
            "SELECT report_row, key_epoch, epoch, body, set_aside_at FROM set_aside ORDER BY id"
        ).fetchall()
        assert [(r, k, e, bytes(b)) for r, k, e, b, _ in kept] == [
            (i, KEY_EPOCH, 1, bodies[i]) for i in rows["epoch 1"]
        ]
        record = json.loads(inbox.get_meta("set_aside.1"))
        assert record == {"reports": 2, "at": kept[0][4]}
        assert inbox.set_aside_counts() == {1: 2}
        # Nothing left to set aside: refused, and nothing changes.
        with pytest.raises(InboxError, match="none of its 3 stored reports is damaged"):
            inbox.set_aside(1)
        assert inbox.set_aside_counts() == {1: 2}
        # Processing drops the epoch's input; what was set aside stays.
        inbox.commit_processed(1, stats={})
        assert inbox.set_aside_counts() == {1: 2}
    with Inbox.open_existing(path) as inbox:
        assert inbox.check().epochs[1] == StoredEpoch(1, "processed", 0, (), 2)


@pytest.mark.parametrize(
    ("epoch", "message"),
    [
        (0, "epoch 0 is processed: its reports were dropped"),
        (2, "epoch 2: none of its 2 stored reports is damaged"),
        (7, "there is no epoch 7"),
    ],
)
def test_set_aside_refuses_an_epoch_it_makes_no_sense_for(
    tmp_path: Path, epoch: int, message: str
) -> None:
    path = tmp_path / "inbox.db"
    _damaged_inbox(path)
    with Inbox(path, party=PARTY) as inbox:
        before = inbox._db.execute("SELECT COUNT(*) FROM reports").fetchone()
        with pytest.raises(InboxError, match=message):
            inbox.set_aside(epoch)
        assert inbox._db.execute("SELECT COUNT(*) FROM reports").fetchone() == before
        assert inbox.set_aside_counts() == {}
        assert inbox.get_meta(f"set_aside.{epoch}") == ""


def test_set_aside_refuses_a_file_whose_structure_is_damaged(tmp_path: Path) -> None:
    path = tmp_path / "inbox.db"
    with Inbox(path, party=PARTY) as inbox:
        reps = _bodies(400, b"a")
        inbox.add_reports(KEY_EPOCH, reps)
        inbox.close_epochs([KEY_EPOCH])
        inbox._db.execute("UPDATE reports SET body = ? WHERE body = ?", (_flip(reps[0]), reps[0]))
        (root,) = inbox._db.execute(
            "SELECT rootpage FROM sqlite_master WHERE name = 'reports_by_epoch'"
        ).fetchone()
        (page,) = inbox._db.execute("PRAGMA page_size").fetchone()
        inbox._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    with open(path, "r+b") as fh:  # garbage over part of an index page
        fh.seek((root - 1) * page + 100)
        fh.write(b"\xff" * 64)
    with Inbox.open_existing(path) as inbox:
        assert inbox.check().problems  # found, from a read-only connection
    with Inbox.open_existing(path, write=True) as inbox, pytest.raises(InboxDamaged):
        inbox.set_aside(0)
    with Inbox.open_existing(path) as inbox:
        assert inbox.set_aside_counts() == {}


def test_open_existing_creates_nothing_and_refuses_what_is_no_inbox(tmp_path: Path) -> None:
    with pytest.raises(InboxError, match="no inbox at"):
        Inbox.open_existing(tmp_path / "inbox.db")
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "text").write_text("not a database, but long enough to be read as one" * 4)
    with pytest.raises(InboxError, match=r"cannot open the inbox .*text: file is not a database"):
        Inbox.open_existing(tmp_path / "text")
    sqlite3.connect(tmp_path / "other.db").execute("CREATE TABLE t (x)").connection.close()
    with pytest.raises(InboxError, match="not a party's inbox"):
        Inbox.open_existing(tmp_path / "other.db", write=True)
    # Read-only means read-only.
    _damaged_inbox(tmp_path / "inbox.db")
    with (
        Inbox.open_existing(tmp_path / "inbox.db") as inbox,
        pytest.raises(sqlite3.OperationalError, match="readonly"),
    ):
        inbox.set_aside(1)


def test_an_inbox_from_before_set_aside_is_read_and_then_given_the_table(
    tmp_path: Path,
) -> None:
    path = tmp_path / "inbox.db"
    rows = _damaged_inbox(path)
    with Inbox(path, party=PARTY) as inbox:
        inbox._db.execute("DROP TABLE set_aside")
    with Inbox.open_existing(path) as inbox:  # read-only: cannot create it, need not
        assert inbox.set_aside_counts() == {}
        assert inbox.check().damaged == 3
    with Inbox.open_existing(path, write=True) as inbox:
        assert inbox.set_aside(1) == rows["epoch 1"]
        assert inbox.set_aside_counts() == {1: 2}


# ---------------------------------------------------------------------- locking


def test_check_reads_a_snapshot_next_to_a_writing_party(tmp_path: Path) -> None:
    path = tmp_path / "inbox.db"
    rows = _damaged_inbox(path)
    with Inbox(path, party=PARTY) as party, Inbox.open_existing(path, timeout=0.1) as reader:
        with reader._snapshot():
            assert reader._stored_epochs(reader._db)[-1].reports == 3
            # The party commits while the reader is inside its snapshot: not blocked ...
            party.add_reports(KEY_EPOCH, _bodies(2, b"e"))
            party.close_epochs([KEY_EPOCH])
            # ... and the snapshot does not move under the reader.
            assert reader._stored_epochs(reader._db)[-1].reports == 3
        assert reader.check().epochs[-1] == StoredEpoch(3, "closed", 5, tuple(rows["open"]), 0)


def test_set_aside_needs_the_file_to_itself(tmp_path: Path) -> None:
    path = tmp_path / "inbox.db"
    rows = _damaged_inbox(path)
    # A party with the inbox open, idle between transactions, holds no SQLite lock; the
    # exclusive locking mode finds it anyway. So does a reader.
    with Inbox(path, party=PARTY), pytest.raises(InboxError, match="open in another process"):
        Inbox.open_existing(path, write=True, timeout=0.1)
    with Inbox.open_existing(path), pytest.raises(InboxError, match="open in another process"):
        Inbox.open_existing(path, write=True, timeout=0.1)
    with Inbox.open_existing(path, write=True, timeout=0.1) as writer:
        # While it is held, nothing else reads the file: a party starting now waits.
        with pytest.raises(InboxError, match="locked by another process"):
            Inbox.open_existing(path, timeout=0.1)
        other = sqlite3.connect(path, timeout=0.1)
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            other.execute("SELECT COUNT(*) FROM reports").fetchone()
        other.close()
        assert writer.set_aside(1) == rows["epoch 1"]
    with Inbox(path, party=PARTY) as party:  # let go at close: the party opens it again
        assert party.set_aside_counts() == {1: 2}


# Another process with the inbox open and idle, as a party between transactions holds it
# (plain sqlite3 in WAL mode, as Inbox opens it: the child starts without importing esa).
_HOLDER = textwrap.dedent(
    """
    import sqlite3, sys
    db = sqlite3.connect(sys.argv[1], isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("SELECT COUNT(*) FROM reports").fetchone()
    print("open", flush=True)
    sys.stdin.read()  # hold the inbox open until the parent closes our stdin
    db.close()
    """
)


def test_set_aside_refuses_while_another_process_has_the_inbox_open(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(inbox_command, "LOCK_WAIT", 0.1)
    path = tmp_path / "inbox.db"
    _damaged_inbox(path)
    with subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as child:
        # Leaving the block closes the child's stdin (it lets go and exits) and waits.
        assert child.stdout is not None
        assert child.stdout.readline() == "open\n"
        with pytest.raises(SystemExit) as exc:
            main(["inbox", "set-aside", str(path), "--epoch", "1"])
        assert exc.value.code == 2
        err = capsys.readouterr().err
        assert err.startswith("esa inbox: error: ")
        assert "open in another process" in err
        # Checking is read-only: it runs next to the other process.
        assert main(["inbox", "check", str(path), "--json"]) == 1
        assert json.loads(capsys.readouterr().out)["damaged_reports"] == 3
    assert child.returncode == 0
    assert main(["inbox", "set-aside", str(path), "--epoch", "1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["set_aside"] == 2


# ---------------------------------------------------------------------- the command


def test_check_command_table_and_exit_codes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A table's title and caption wrap at the table's width: a short path keeps each
    # phrase checked here on one line.
    monkeypatch.chdir(tmp_path)
    state = Path("state")
    state.mkdir()
    rows = _damaged_inbox(state / "inbox.db")
    # PATH names the state_dir or the file itself.
    for path in (state, state / "inbox.db"):
        assert main(["inbox", "check", str(path)]) == 1
        out = capsys.readouterr().out
        flat = " ".join(out.split())  # the caption's lines, unwrapped
        assert f"inbox {state / 'inbox.db'} (party {PARTY}" in out
        assert "integrity check: ok" in out
        assert ", ".join(map(str, rows["epoch 1"])) in out
        advice = f"stop the party, run esa inbox set-aside {path} --epoch 1"  # no markup
        assert f"damaged reports stop epoch 1: {advice}" in flat
        assert "damaged open reports will stop their epoch" in flat
        assert "1 processed epoch with no reports left" in flat
    assert main(["inbox", "set-aside", str(state), "--epoch", "1"]) == 0
    flat = " ".join(capsys.readouterr().out.split())
    assert "processes epoch 1 from the 3 reports left" in flat
    # Still damage: the open report.
    assert main(["inbox", "check", str(state)]) == 1
    capsys.readouterr()
    with Inbox(state / "inbox.db", party=PARTY) as inbox:
        inbox._db.execute("DELETE FROM reports WHERE id = ?", (rows["open"][0],))
    assert main(["inbox", "check", str(state)]) == 0
    flat = " ".join(capsys.readouterr().out.split())
    assert "clean: every stored report matches" in flat


def test_check_and_set_aside_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "inbox.db"
    rows = _damaged_inbox(path)
    assert main(["inbox", "check", str(path), "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert (out["inbox"], out["party"]) == (str(path), PARTY)
    assert (out["clean"], out["problems"], out["damaged_reports"]) == (False, [], 3)
    assert out["epochs"][1] == {
        "epoch": 1,
        "state": "closed",
        "reports": 5,
        "damaged": 2,
        "damaged_rows": rows["epoch 1"],
        "set_aside": 0,
    }
    assert (out["epochs"][-1]["epoch"], out["epochs"][-1]["state"]) == (None, "open")
    assert main(["inbox", "set-aside", str(path), "--epoch", "1", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    head = {"schema_version", "version", "command", "parameters", "seed", "non_finite"}
    assert {k: v for k, v in doc.items() if k not in head} == {
        "inbox": str(path),
        "party": PARTY,
        "epoch": 1,
        "set_aside_rows": rows["epoch 1"],
        "set_aside": 2,
        "set_aside_total": 2,
        "reports_left": 3,
    }


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["inbox"], "esa inbox: error: the following arguments are required: ACTION"),
        (["inbox", "check"], "required: PATH"),
        (["inbox", "set-aside", "{db}"], "required: --epoch"),
        (["inbox", "set-aside", "{db}", "--epoch", "x"], "invalid int value"),
        (["inbox", "check", "{dir}/missing.db"], "esa inbox: error: no inbox at"),
        (["inbox", "check", "{dir}/missing.toml"], "cannot read config"),
        (["inbox", "check", "{dir}/junk"], "file is not a database"),
        (["inbox", "set-aside", "{db}", "--epoch", "2"], "none of its 2 stored reports"),
        (["inbox", "set-aside", "{db}", "--epoch", "0"], "epoch 0 is processed"),
        (["inbox", "set-aside", "{db}", "--epoch", "9"], "no epoch 9"),
    ],
)
def test_errors_are_one_line_with_exit_code_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], needle: str
) -> None:
    _damaged_inbox(tmp_path / "inbox.db")
    (tmp_path / "junk").write_bytes(b"junk" * 64)
    argv = [a.format(db=tmp_path / "inbox.db", dir=tmp_path) for a in argv]
    assert needle in usage_error(argv, capsys)


def test_the_command_is_listed(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "inbox" in capsys.readouterr().out


# ---------------------------------------------------------------------- end to end


@pytest.fixture(scope="module")
def keydir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("deploy")
    crypto.KeyDirectory.create(root / "keys", shufflers=2)
    return root


def _config(root: Path, state: str) -> Path:
    """The TOML config of the first shuffler whose inbox is ``root/state`` (what the
    operator names the party by)."""
    path = root / f"{state}.toml"
    path.write_text(
        textwrap.dedent(
            f"""
            role = "shuffler"
            hop = 0
            state_dir = "{state}"
            [listen]
            host = "127.0.0.1"
            port = 0
            [next]
            host = "127.0.0.1"
            port = 9
            [tls]
            insecure_plaintext = true
            [keys.epochs]
            {KEY_EPOCH} = "keys"
            [protocol]
            name = "hist_kr"
            epsilon = 1.0
            delta = 1e-6
            n = 1000
            domain = 4
            """
        )
    )
    return path


def test_a_set_aside_epoch_is_processed_after_a_restart_without_those_reports(
    keydir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(inbox_command, "LOCK_WAIT", 0.1)
    state = "state-set-aside"
    config = str(_config(keydir, state))
    reps = _reports(keydir, 10)
    svc = _service(keydir, 0, state_dir=state)  # next hop (port 9) absent: nothing leaves

    async def damage_then_work() -> None:
        await store_and_damage_one(svc, reps, 4)
        await svc._work_once()
        status = await svc.status()
        assert list(status["failed_epochs"]) == [0]
        assert "set_aside" not in status

    try:
        trio.run(damage_then_work)
        capsys.readouterr()
        # While the party runs: the check reads, the set-aside refuses and says why.
        assert main(["inbox", "check", config, "--json"]) == 1
        (row,) = json.loads(capsys.readouterr().out)["epochs"]
        assert (row["epoch"], row["state"], row["reports"], row["damaged"]) == (0, "closed", 10, 1)
        with pytest.raises(SystemExit) as exc:
            main(["inbox", "set-aside", config, "--epoch", "0"])
        assert exc.value.code == 2
        err = capsys.readouterr().err
        assert f"the party using {keydir / state} is running" in err
    finally:
        svc.close()

    assert main(["inbox", "set-aside", config, "--epoch", "0", "--json"]) == 0
    done = json.loads(capsys.readouterr().out)
    assert (done["set_aside_rows"], done["reports_left"]) == (row["damaged_rows"], 9)

    svc = _service(keydir, 0, state_dir=state)  # the restart

    async def work() -> None:
        await svc._work_once()
        status = await svc.status()
        assert "failed_epochs" not in status
        assert status["set_aside"] == {0: 1}
        # Counters survive the restart: the one damaged run before it, none after.
        assert status["counters"].get("epochs_damaged", 0) == 1
        ((rec),) = svc.inbox.epochs("processed")
        assert (rec.epoch, rec.stats["received"], rec.stats["invalid"]) == (0, 9, 0)
        # The signed count statement the epoch forwards says 9, not 10.
        own = crypto.KeyDirectory.load(keydir / "keys").route()[0].verify_key()
        assert rec.counts is not None
        (statement,) = esa.net.verify_counts(rec.counts, [own]).statements
        assert (statement.received, statement.invalid, statement.forwarded) == (9, 0, 9)

    try:
        trio.run(work)
    finally:
        svc.close()
    # Clean now; the epoch is listed for what was set aside from it.
    assert main(["inbox", "check", config, "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["epochs"]
    assert (row["epoch"], row["state"], row["reports"], row["set_aside"]) == (0, "processed", 0, 1)
