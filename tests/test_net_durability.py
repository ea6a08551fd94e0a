"""A party's inbox after damage and restarts: damage is a clear error, never a different
answer, and a restart neither loses nor re-grants time.

The services are driven in-process (see ``tests/test_net_faults.py``); storage damage is
made by hand: a page overwritten in the file, or a stored report changed in place.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

import crypto
import esa
from esa.net import PartyService
from esa.net._inbox import Inbox
from tests.test_net_faults import KEY_EPOCH, _reports, _service


@pytest.fixture(scope="module")
def keydir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("deploy")
    crypto.KeyDirectory.create(root / "keys", shufflers=2)
    return root


def _inline_db(svc: PartyService, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run the service's inbox calls on the event loop, so a mock clock moves only when
    every task sleeps (a worker thread would let it jump mid-call)."""

    async def inline(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)

    monkeypatch.setattr(svc, "_db", inline)


def _flip(report: bytes) -> bytes:
    """The report with one bit flipped, as bit rot leaves it."""
    return bytes([report[0] ^ 1]) + report[1:]


async def store_and_damage_one(svc: PartyService, reports: list[bytes], index: int) -> None:
    """Store ``reports`` as one closed epoch, then flip one bit of ``reports[index]`` in the
    inbox, after it was acknowledged."""
    await svc._store_reports(KEY_EPOCH, tuple(reports))
    await svc._close_open_epochs(operator=True)
    svc.inbox._db.execute(
        "UPDATE reports SET body = ? WHERE body = ?", (_flip(reports[index]), reports[index])
    )


def _overwrite_root_page(path: Path, table: str) -> None:
    """What a torn write or a bad sector does to one page: garbage over a table's root."""
    with Inbox(path, party="shuffler-1") as inbox:
        db = inbox._db
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        (root,) = db.execute(
            "SELECT rootpage FROM sqlite_master WHERE name = ?", (table,)
        ).fetchone()
        (page,) = db.execute("PRAGMA page_size").fetchone()
    with open(path, "r+b") as fh:
        fh.seek((root - 1) * page)
        fh.write(b"\xff" * page)


# seen and epochs are read at start-up (replay-cache retirement, key rotation check); no
# start-up query reads traps: only the integrity check finds that page.
@pytest.mark.parametrize("table", ["seen", "epochs", "traps"])
def test_inbox_damage_found_at_start_is_one_config_error(keydir: Path, table: str) -> None:
    state = f"state-dmg-{table}"
    svc = _service(keydir, 0, state_dir=state)
    trio.run(svc._store_reports, KEY_EPOCH, tuple(_reports(keydir, 30)))
    svc.close()
    _overwrite_root_page(keydir / state / "inbox.db", table)
    with pytest.raises(esa.ConfigError, match=r"cannot open the inbox .*inbox\.db: \S"):
        _service(keydir, 0, state_dir=state)
    # The error let go of the state_dir: the next attempt gets the same error, not "in use".
    with pytest.raises(esa.ConfigError, match="cannot open the inbox"):
        _service(keydir, 0, state_dir=state)


def test_a_damaged_meta_value_is_one_config_error(keydir: Path) -> None:
    # The file's structure is sound, a value in it is not: a ValueError used to escape.
    state = "state-meta"
    svc = _service(keydir, 0, state_dir=state)
    svc.inbox._db.execute("INSERT OR REPLACE INTO meta VALUES ('last_control_ms', 'x1')")
    svc.close()
    with pytest.raises(esa.ConfigError, match="last_control_ms is 'x1'"):
        _service(keydir, 0, state_dir=state)


def test_a_damaged_report_stops_its_epoch_not_the_party(
    keydir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = "state-body"
    reps = _reports(keydir, 10)
    svc = _service(keydir, 0, state_dir=state)  # next hop (port 9) absent: nothing leaves

    async def damage_then_work() -> None:
        await store_and_damage_one(svc, reps, 4)
        await svc._store_reports(KEY_EPOCH, tuple(_reports(keydir, 13)[10:]))
        await svc._close_open_epochs(operator=True)
        await svc._work_once()
        status = await svc.status()
        assert status["counters"]["epochs_damaged"] == 1
        assert list(status["failed_epochs"]) == [0]
        assert "1 of its 10 stored reports do not match" in status["failed_epochs"][0]
        # Epoch 0 is neither processed nor shown as if one of its reports were invalid;
        # the next epoch goes on.
        assert [e.epoch for e in svc.inbox.epochs("closed")] == [0]
        ((processed, rec),) = [(e.epoch, e) for e in svc.inbox.epochs("processed")]
        assert (processed, rec.stats["received"], rec.stats["invalid"]) == (1, 3, 0)

    try:
        trio.run(damage_then_work)
    finally:
        svc.close()
    logged = capsys.readouterr().err
    assert "epoch 0 not processed: epoch 0: 1 of its 10 stored reports" in logged
    assert "the inbox file is damaged" in logged

    # The operator's way on without a backup: delete the damaged row knowingly, restart.
    with Inbox(keydir / state / "inbox.db", party="shuffler-1") as inbox:
        inbox._db.execute("DELETE FROM reports WHERE body = ?", (_flip(reps[4]),))
    svc = _service(keydir, 0, state_dir=state)

    async def work() -> None:
        await svc._work_once()
        stats = {e.epoch: e.stats for e in svc.inbox.epochs("processed")}
        assert (stats[0]["received"], stats[0]["invalid"]) == (9, 0)

    try:
        trio.run(work)
    finally:
        svc.close()


def _time_to_close(svc: PartyService, submit: dict[float, bytes] | None = None) -> list[float]:
    """Run the epoch loop on a mock clock until every epoch expected closed; returns when
    (from the start) each closed. ``submit``: reports submitted at given mock times."""
    closed_at: list[float] = []
    submit_at = submit or {}

    async def main() -> None:
        start = trio.current_time()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(svc._epoch_loop)

            async def submit_one(at: float, report: bytes) -> None:
                await trio.sleep_until(start + at)
                await svc._store_reports(KEY_EPOCH, (report,))
                svc._wake_epoch.set()  # as a SUBMIT frame does

            for at, report in submit_at.items():
                nursery.start_soon(submit_one, at, report)
            with trio.fail_after(600):
                while len(closed_at) < 1 + len(submit_at):
                    seen = svc.counters["epochs_closed"]
                    await trio.sleep(0.01)
                    if svc.counters["epochs_closed"] > seen:
                        assert svc.last_epoch_closed_at is not None
                        closed_at.append(svc.last_epoch_closed_at - start)
            nursery.cancel_scope.cancel()

    try:
        trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    finally:
        svc.close()
    return closed_at


@pytest.mark.parametrize(
    ("arrived_ago", "closes_after"),
    [
        (8.0, 2.0),  # the party was down 8 s of its 10 s deadline: 2 s are left
        (30.0, 0.0),  # past the deadline while it was down: closed at once
        (-100.0, 10.0),  # the clock was stepped back meanwhile: at most one whole deadline
    ],
)
def test_a_restart_keeps_the_epoch_deadline(
    keydir: Path, monkeypatch: pytest.MonkeyPatch, arrived_ago: float, closes_after: float
) -> None:
    state = f"state-deadline-{arrived_ago:g}"
    rule = {"max_reports": 1000, "deadline_seconds": 10.0}
    svc = _service(keydir, 0, state_dir=state, epoch=rule)
    trio.run(svc._store_reports, KEY_EPOCH, tuple(_reports(keydir, 5)))
    svc.close()
    with Inbox(keydir / state / "inbox.db", party="shuffler-1") as inbox:
        # As if the reports had been committed that long before this restart.
        inbox.set_meta("open_since", repr(time.time() - arrived_ago))
    svc = _service(keydir, 0, state_dir=state, epoch=rule)
    _inline_db(svc, monkeypatch)
    (closed,) = _time_to_close(svc)
    assert closed == pytest.approx(closes_after, abs=0.3)


def test_reports_after_an_operator_close_get_their_own_deadline(
    keydir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rule = {"max_reports": 1000, "deadline_seconds": 10.0}
    svc = _service(keydir, 0, state_dir="state-deadline-op", epoch=rule)
    _inline_db(svc, monkeypatch)
    trio.run(svc._store_reports, KEY_EPOCH, tuple(_reports(keydir, 5)))

    async def operator_close_at_5() -> None:
        await trio.sleep(5.0)
        await svc._close_open_epochs(operator=True)

    original = svc._epoch_loop

    async def loop_and_operator() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(operator_close_at_5)
            await original()

    monkeypatch.setattr(svc, "_epoch_loop", loop_and_operator)
    # Epoch 0 by the operator at 5 s; the report submitted at 6 s closes 10 s later.
    closed = _time_to_close(svc, {6.0: _reports(keydir, 1)[0]})
    assert closed == [pytest.approx(5.0, abs=0.05), pytest.approx(16.0, abs=0.3)]
