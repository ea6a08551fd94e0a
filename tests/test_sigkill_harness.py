"""Crash safety: SIGKILL a party mid-commit or mid-processing, restart it, lose nothing.

A seeded, randomized harness over real party processes (`esa serve`, TLS on, real SQLite):
two shufflers and the analyzer. Each round picks a victim and a named pause point
(:mod:`esa.net._testhooks`: the victim, restarted with ``ESA_TEST_PAUSE_AT``, sleeps there
so that the kill lands there), submits a round of distinct reports and closes the epoch,
SIGKILLs the victim as it reaches the point, and restarts it. Checked:

* every report the first shuffler acknowledged reaches the analyzer exactly once: the
  analyzer's inferred n and its received count equal the reports submitted, over all
  rounds, and every epoch is analyzed once;
* the counters a restarted party resumes (its ``recovered`` log event) are exactly those
  its inbox held at the kill (read from the file after the kill), not zero;
* every restart logs a ``recovered`` event.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import trio

import crypto
import esa
from esa.net import QueryKind, close_epoch, query, submit_reports
from protocols import ProtocolSpec, build_protocol
from simulations._tcp_run import Chain, running_chain, wait_processed

pytestmark = pytest.mark.slow

SEED = 20261202
ROUNDS = 4
SPEC = ("hist_kr", ProtocolSpec(epsilon=1.0, delta=1e-6, n=400, domain=4))
PROTOCOL = build_protocol(*SPEC)
#: (party index in the chain: 0 first shuffler, 1 second, 2 analyzer; pause point)
SCENARIOS = [
    (0, "commit_reports"),  # mid-commit of clients' reports: nothing acknowledged yet
    (0, "before_commit_processed"),  # mid-processing: the epoch shuffled in memory only
    (0, "commit_processed"),  # mid-commit of the processed epoch
    (1, "commit_chunk"),  # mid-commit of an upstream chunk
    (1, "commit_processed"),
    (2, "commit_chunk"),
    (2, "before_commit_processed"),
    (2, "commit_processed"),  # mid-commit of the analyzed epoch (and its result summary)
]


def _stored_counters(chain: Chain, index: int) -> dict[str, int]:
    name = chain.parties[index].name
    db = sqlite3.connect(chain.root / "state" / name / "inbox.db")
    try:
        rows = db.execute("SELECT name, value FROM counters WHERE grp = 'counters'").fetchall()
    finally:
        db.close()
    return {str(n): int(v) for n, v in rows}


def _recovered_events(log: Path) -> list[dict[str, Any]]:
    out = []
    for line in log.read_text(errors="replace").splitlines():
        if line.startswith("{") and '"event": "recovered"' in line:
            out.append(json.loads(line))
    return out


async def _round(chain: Chain, reports: list[bytes], victim: int, marker: Path) -> dict[str, Any]:
    """Submit ``reports`` and close the epoch while the victim runs to its pause point;
    SIGKILL it there, read its stored counters, restart it, wait until all is analyzed."""
    got: dict[str, Any] = {}

    async def drive() -> None:
        stats = await submit_reports(
            chain.first.address, reports, key_epoch=1, connections=3, frame_reports=7
        )
        got["acknowledged"] = stats.acknowledged
        got["failed"] = stats.failed_frames
        for _ in range(40):  # the first shuffler may be down just now: retry the close
            try:
                await close_epoch(chain.first.address, chain.operator)
                return
            except (OSError, esa.ESAError, trio.TooSlowError):
                await trio.sleep(0.25)
        raise AssertionError("the epoch was never closed")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(drive)
        with trio.fail_after(60):
            while not marker.exists():
                await trio.sleep(0.02)
        await trio.to_thread.run_sync(chain.parties[victim].kill)
        got["stored"] = _stored_counters(chain, victim)
        await trio.to_thread.run_sync(chain.restart, victim)
    await wait_processed(chain, timeout=90)
    return got


def test_sigkill_at_random_points_loses_and_doubles_nothing(tmp_path: Path) -> None:
    rng = np.random.default_rng(SEED)
    picks = [SCENARIOS[i] for i in rng.choice(len(SCENARIOS), size=ROUNDS, replace=False)]
    sizes = [int(s) for s in rng.integers(20, 60, size=ROUNDS)]
    with running_chain(tmp_path, SPEC, shufflers=2, key_epoch=1) as chain:
        kd = crypto.KeyDirectory.load(tmp_path / "keys")
        codec = esa.make_codec("onion", message_size=PROTOCOL.message_size, layers=3)
        enc = esa.Encoder(PROTOCOL, codec, [p.layer_public for p in kd.route()], workers=1)
        acknowledged = 0
        for round_no, ((victim, point), size) in enumerate(zip(picks, sizes, strict=True)):
            values = rng.integers(0, 4, size=size)
            reports = [bytes(r) for r in enc.encode(values, rng=rng, epoch=1)]
            marker = tmp_path / f"paused-{round_no}"
            env = {"ESA_TEST_PAUSE_AT": point, "ESA_TEST_PAUSE_MARKER": str(marker)}
            chain.restart(victim, env=env)
            restarts_before = len(_recovered_events(chain.parties[victim].log))
            got = trio.run(_round, chain, reports, victim, marker)
            assert marker.read_text() == point
            assert got["failed"] == 0
            assert got["acknowledged"] == size
            acknowledged += size
            events = _recovered_events(chain.parties[victim].log)
            assert len(events) == restarts_before + 1, f"no recovery logged ({victim}, {point})"
            assert events[-1]["counters"] == got["stored"], (victim, point)

        async def final() -> dict[str, Any]:
            return await query(chain.analyzer.query_address, QueryKind.RESULT)

        res = trio.run(final)
    assert res["epochs"] == ROUNDS
    assert res["n"] == acknowledged
    assert res["hops"][-1]["received"] == acknowledged
    assert res["drop_check"]["ok"], res["drop_check"]
