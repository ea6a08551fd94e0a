"""The analyzer's budget ledger: one row per released epoch, written in the release's own
transaction; STATUS's spent ε; the ``[budget]`` refusal; SIGKILL of a real analyzer after
and inside a release."""

from __future__ import annotations

import json
import math
import signal
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import trio

import crypto
import esa
from esa import ConfigError
from esa.net import QueryKind, close_epoch, query, submit_reports
from esa.net._config import config_from_dict
from esa.net._inbox import Inbox
from esa.net._ledger import (
    Budget,
    BudgetExceeded,
    LedgerEntry,
    ledger_entries,
    parse_budget,
    record_release,
    refusals,
    spent,
)
from protocols import ProtocolSpec, build_protocol
from protocols.accounting import PrivacyProfile, compose
from simulations._tcp_run import Chain, _write_toml, running_chain, wait_processed
from tests.test_net_faults import _doc

SOURCE = ("hist_kr", ProtocolSpec(epsilon=1.0, delta=1e-6, n=400, domain=4))
PROTOCOL = build_protocol(*SOURCE)
KEY_EPOCH = 1
USERS = 400  # the calibrated n: an epoch of them states the calibrated (1, 1e-6)


def _entry(epoch: int, eps: float = 1.0, delta: float = 1e-6) -> LedgerEntry:
    return LedgerEntry(epoch, epoch, None, "hist_kr", eps, delta, 10, "test", time.time())


# ---------------------------------------------------------------------------- in process


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ([], "must be a table"),
        ({"epsilon_total": 1.0}, "needs ['delta_total']"),
        ({"epsilon_total": 1.0, "delta_total": 1e-6, "x": 1}, "unknown keys ['x']"),
        ({"epsilon_total": 0, "delta_total": 1e-6}, "epsilon_total must be a finite number > 0"),
        ({"epsilon_total": math.inf, "delta_total": 1e-6}, "epsilon_total must be a finite"),
        ({"epsilon_total": True, "delta_total": 1e-6}, "epsilon_total must be a finite"),
        ({"epsilon_total": 1.0, "delta_total": 1.0}, "delta_total must be a number in (0, 1)"),
        ({"epsilon_total": 1.0, "delta_total": "1e-6"}, "delta_total must be a number"),
    ],
)
def test_budget_table_is_validated(table: Any, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_budget(table)
    assert message in str(info.value)


def test_budget_is_the_analyzers(tmp_path: Path) -> None:
    crypto.KeyDirectory.create(tmp_path / "keys", shufflers=2)
    budget = {"epsilon_total": 3.0, "delta_total": 1e-5}
    config = config_from_dict(_doc(2, budget=budget), base=tmp_path, simulation=True)
    assert config.budget == Budget(3.0, 1e-5)
    assert config_from_dict(_doc(2), base=tmp_path, simulation=True).budget is None
    with pytest.raises(ConfigError, match=r"\[budget\] is the analyzer's"):
        config_from_dict(_doc(0, budget=budget), base=tmp_path, simulation=True)
    with pytest.raises(ConfigError, match="delta_total"):
        config_from_dict(_doc(2, budget={"epsilon_total": 3.0}), base=tmp_path, simulation=True)


def test_the_docs_budget_table_is_accepted(tmp_path: Path) -> None:
    """docs/network.md's [budget] example, in an analyzer's config."""
    import re
    import tomllib

    text = (Path(__file__).resolve().parent.parent / "docs/network.md").read_text()
    (block,) = re.findall(r"```\n(\[budget\]\n.*?)```", text, re.S)
    crypto.KeyDirectory.create(tmp_path / "keys", shufflers=2)
    config = config_from_dict(_doc(2, **tomllib.loads(block)), base=tmp_path, simulation=True)
    assert config.budget is not None


def _closed_epoch(inbox: Inbox, reports: int, tag: bytes) -> int:
    inbox.add_reports(0, [tag + i.to_bytes(4, "big") + bytes(11) for i in range(reports)])
    epoch = inbox.close_epoch(0)
    assert epoch is not None
    return epoch


def test_the_ledger_row_commits_with_the_release_or_not_at_all(tmp_path: Path) -> None:
    with Inbox(tmp_path / "a.db", party="analyzer") as inbox:
        budget = Budget(1.5, 1e-5)
        e0 = _closed_epoch(inbox, 5, b"a")
        inbox.commit_processed(
            e0,
            stats={},
            output=[b"m"],
            also=lambda db: record_release(db, _entry(e0), budget=budget),
        )
        assert [e.epoch for e in ledger_entries(inbox)] == [e0]
        # Two (1, 1e-6) epochs compose above 1.5 at 1e-5: refused, rolled back whole.
        e1 = _closed_epoch(inbox, 7, b"b")
        with pytest.raises(BudgetExceeded) as info:
            inbox.commit_processed(
                e1,
                stats={},
                output=[b"m"],
                also=lambda db: record_release(db, _entry(e1), budget=budget),
            )
        assert info.value.epoch == e1
        assert "above the budget" in info.value.reason
        assert [r.epoch for r in inbox.epochs("closed")] == [e1]
        assert len(inbox.epoch_reports(e1)) == 7  # kept, not lost
        assert [e.epoch for e in ledger_entries(inbox)] == [e0]
        # An epoch is never recorded twice.
        with pytest.raises(Exception, match=r"UNIQUE|PRIMARY"):
            inbox.commit_processed(
                e1,
                stats={},
                output=[b"m"],
                also=lambda db: record_release(db, _entry(e0), budget=None),
            )
        assert [r.epoch for r in inbox.epochs("closed")] == [e1]


def test_spent_is_the_composition_of_the_stated_points() -> None:
    points = [(1.0, 1e-6), (0.5, 1e-7), (1.0, 1e-6)]
    got = spent(points, budget=Budget(10.0, 1e-5))
    want = compose(
        [
            (PrivacyProfile.from_point(0.5, 1e-7), 1),
            (PrivacyProfile.from_point(1.0, 1e-6), 2),
        ],
        delta=1e-5,
    )
    assert got["epsilon_spent"] == pytest.approx(want.epsilon_total, rel=1e-12)
    assert got["epochs_released"] == 3
    assert got["delta"] == 1e-5
    assert got["epsilon_remaining"] == pytest.approx(10.0 - want.epsilon_total)
    assert "per-epoch stated" in got["composed_from"]
    assert spent([], budget=None)["epsilon_spent"] == 0.0
    assert spent([(math.inf, 1.0)], budget=None)["epsilon_spent"] is None  # nothing proven


# ---------------------------------------------------------------------------- processes


def _encode(count: int, seed: int, chain: Chain) -> list[bytes]:
    kd = crypto.KeyDirectory.load(chain.root / "keys")
    codec = esa.make_codec("onion", message_size=PROTOCOL.message_size, layers=2)
    enc = esa.Encoder(PROTOCOL, codec, [p.layer_public for p in kd.route()], workers=1)
    values = np.arange(count) % 4
    return list(enc.encode(values, rng=np.random.default_rng(seed), epoch=KEY_EPOCH))


def _epoch(chain: Chain, seed: int, *, wait: bool = True) -> None:
    """Submit USERS reports to the first shuffler, close the epoch, wait until analyzed."""
    reports = _encode(USERS, seed, chain)

    async def run() -> None:
        stats = await submit_reports(chain.first.address, reports, key_epoch=KEY_EPOCH)
        assert stats.stored == USERS
        assert stats.failed_frames == 0
        await close_epoch(chain.first.address, chain.operator)
        if wait:
            await wait_processed(chain, timeout=60)

    trio.run(run)


def _status(chain: Chain) -> dict[str, Any]:
    return trio.run(query, chain.analyzer.query_address, QueryKind.STATUS)


def _analyzer_inbox(chain: Chain) -> Path:
    return chain.root / "state" / crypto.analyzer_name() / "inbox.db"


def _ledger(chain: Chain) -> list[LedgerEntry]:
    with Inbox.open_existing(_analyzer_inbox(chain)) as inbox:
        return ledger_entries(inbox)


def _reconfigure(chain: Chain, **changes: Any) -> None:
    doc = {**chain.configs[-1], **changes}
    doc["simulation"] = {**chain.configs[-1]["simulation"], **changes.get("simulation", {})}
    _write_toml(chain.analyzer.config, doc)
    chain.restart(len(chain.parties) - 1)


def _start(tmp_path: Path) -> Any:
    return running_chain(tmp_path, SOURCE, shufflers=1, key_epoch=KEY_EPOCH, tls=False)


@pytest.mark.slow
def test_ledger_and_spent_survive_sigkill_after_and_inside_a_release(tmp_path: Path) -> None:
    with _start(tmp_path) as chain:
        assert _analyzer_inbox(chain).parent.is_dir()
        _epoch(chain, 0)
        _epoch(chain, 1)
        rows = _ledger(chain)
        assert [r.epoch for r in rows] == [0, 1]
        for r in rows:
            assert (r.protocol, r.users, r.deployment) == ("hist_kr", USERS, None)
            # The calibrated run: the protocol's own claim.
            assert (r.epsilon, r.delta) == (
                PROTOCOL.privacy.epsilon_central,
                PROTOCOL.privacy.delta,
            )
        status = _status(chain)["budget"]
        point = PrivacyProfile.from_point(rows[0].epsilon, rows[0].delta)
        want = compose([(point, 2)], delta=status["delta"])
        assert status["epochs_released"] == 2
        assert status["epsilon_spent"] == pytest.approx(want.epsilon_total, rel=1e-12)
        assert "per-epoch stated" in status["composed_from"]

        # SIGKILL after the release: the ledger is intact, nothing recorded twice.
        chain.analyzer.kill()
        chain.restart(len(chain.parties) - 1)
        assert _ledger(chain) == rows
        assert _status(chain)["budget"]["epochs_released"] == 2

        # SIGKILL inside the release's transaction (after the ledger row is written, before
        # COMMIT): neither released nor recorded.
        _reconfigure(chain, simulation={"kill_in_release": True})
        _epoch(chain, 2, wait=False)
        deadline = time.monotonic() + 60
        while chain.analyzer.popen.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert chain.analyzer.popen.returncode == -signal.SIGKILL
        with Inbox.open_existing(_analyzer_inbox(chain)) as inbox:
            states = {r.epoch: r.state for r in inbox.epochs()}
            assert states[2] == "closed"
            assert inbox.epoch_size(2) == USERS
            assert [r.epoch for r in ledger_entries(inbox)] == [0, 1]
        # Restarted without the hook: released and recorded, once.
        _reconfigure(chain, simulation={"kill_in_release": False})
        trio.run(lambda: wait_processed(chain, timeout=60))
        assert [r.epoch for r in _ledger(chain)] == [0, 1, 2]
        assert _status(chain)["budget"]["epochs_released"] == 3


@pytest.mark.slow
def test_a_release_over_budget_is_refused_counted_logged_and_kept(tmp_path: Path) -> None:
    with _start(tmp_path) as chain:
        # One (1, 1e-6) epoch fits in 1.5 at 1e-5; two compose above it.
        _reconfigure(chain, budget={"epsilon_total": 1.5, "delta_total": 1e-5})
        _epoch(chain, 0)
        _epoch(chain, 1, wait=False)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            status = _status(chain)
            if status["counters"].get("budget_refusals"):
                break
            time.sleep(0.05)
        assert status["counters"]["budget_refusals"] == 1
        assert status["budget"]["epochs_released"] == 1
        assert status["budget"]["refused_epochs"] == [1]
        assert status["budget"]["epsilon_total"] == 1.5
        one = PrivacyProfile.from_point(PROTOCOL.privacy.epsilon_central, PROTOCOL.privacy.delta)
        want = compose([(one, 1)], delta=1e-5).epsilon_total
        assert status["budget"]["epsilon_spent"] == pytest.approx(want, rel=1e-12)
        assert "refused" in status["failed_epochs"]["1"]
        result = trio.run(query, chain.analyzer.query_address, QueryKind.RESULT)
        assert result["epochs"] == 1
        assert "above the budget" in result["budget"]["refused"]["1"]
        with Inbox.open_existing(_analyzer_inbox(chain)) as inbox:
            assert inbox.epoch_size(1) == USERS  # the reports stay stored
            assert [r.epoch for r in ledger_entries(inbox)] == [0]
            assert list(refusals(inbox._db)) == [1]
        events = [
            json.loads(line[line.index("{") :])
            for line in chain.analyzer.log.read_text().splitlines()
            if '"budget_refused"' in line
        ]
        assert len(events) == 1
        assert events[0]["epoch"] == 1
        # A restart refuses it again, but counts it once.
        chain.restart(len(chain.parties) - 1)
        deadline = time.monotonic() + 30
        while "failed_epochs" not in _status(chain) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _status(chain)["counters"]["budget_refusals"] == 1
        # A larger budget releases it.
        _reconfigure(chain, budget={"epsilon_total": 5.0, "delta_total": 1e-5})
        trio.run(lambda: wait_processed(chain, timeout=60))
        assert [r.epoch for r in _ledger(chain)] == [0, 1]
        assert _status(chain)["budget"]["refused_epochs"] == []
