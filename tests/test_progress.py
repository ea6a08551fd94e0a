"""Long jobs show progress on stderr, as plain lines when stderr is not a terminal."""

from __future__ import annotations

import io
import time

from simulations._common import LineProgress


def test_prefixed_line_reads_as_a_sentence() -> None:
    now = [0.0]
    out = io.StringIO()
    bar = LineProgress(interval=5.0, stream=out, clock=lambda: now[0], prefix="esa demo",
                       unit="reports")  # fmt: skip
    task = bar.add_task("shuffler 2/3", total=20_000)
    now[0] = 6.0
    bar.update(task, completed=8_200)
    assert out.getvalue().splitlines() == [
        "esa demo: shuffler 2/3, 41 % (8,200/20,000 reports) (0:06 elapsed)"
    ]


def test_heartbeat_writes_while_nothing_advances() -> None:
    out = io.StringIO()
    bar = LineProgress(interval=0.05, stream=out, prefix="esa simulate")
    bar.add_task("analyze")
    with bar.heartbeat():
        time.sleep(0.5)
    lines = out.getvalue().splitlines()
    assert lines
    assert all(line.startswith("esa simulate: analyze (") for line in lines)


def test_json_run_keeps_stdout_one_object(capsys: object) -> None:
    import json

    import pytest

    from simulations.cli import main

    cap: pytest.CaptureFixture[str] = capsys  # type: ignore[assignment]
    assert main(["simulate", "--protocol", "hist_kr", "--n", "200", "--crypto", "ideal",
                 "--json"]) == 0  # fmt: skip
    json.loads(cap.readouterr().out)
