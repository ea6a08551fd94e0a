"""A parallel experiment run: its tasks queued longest first, its rows in the plan's order,
and its figures drawn on the pool, equal to those drawn in this process."""

from __future__ import annotations

import csv
import io
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from esa._executor import InlineExecutor
from simulations.experiments import ExperimentPlan, run_experiments
from simulations.experiments.plan import grid_points
from simulations.experiments.plots import draw_figure, figures
from simulations.experiments.run import _cost, _run_task, _Task

WALL_CLOCK = ("analyzer_seconds", "total_seconds", "analyzer_cpu_seconds", "total_cpu_seconds")


def _plan() -> ExperimentPlan:
    return ExperimentPlan(
        category="counting",
        defaults={"n": 2000, "epsilon": 1.0, "delta": 1e-6, "domain": 2, "skew": 0.5},
        sweeps={"epsilon": (0.5, 1.0), "n": (1000.0, 3000.0)},
        repeats=2,
        max_messages=200_000,
        quick=True,
    )


class _Recording(InlineExecutor):
    """Runs every task here at once, noting the grid tasks in the order submitted."""

    def __init__(self) -> None:
        self.submitted: list[_Task] = []

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        if fn is _run_task:
            self.submitted.append(args[0])
        return super().submit(fn, *args, **kwargs)


def _rows(path: Path) -> list[dict[str, str]]:
    rows = list(csv.DictReader(io.StringIO(path.read_text())))
    return [{k: v for k, v in r.items() if k not in WALL_CLOCK} for r in rows]


def test_tasks_are_queued_longest_first_and_rows_kept_in_plan_order(tmp_path: Path) -> None:
    recording = _Recording()
    result = run_experiments(
        "counting", out_dir=tmp_path / "r", plan=_plan(), only=["cnt_rr"], cluster=recording
    )
    costs = [_cost(t) for t in recording.submitted]
    assert len(costs) == 4 * 3  # 4 points × (cnt_rr, ldp_rr, cdp_laplace)
    assert costs == sorted(costs, reverse=True)
    assert costs[0] > costs[-1] == 0.0  # the n = 3000, ε = 1 shuffle task; a baseline
    methods = ("cnt_rr", "ldp_rr", "cdp_laplace")  # the plan's order, whatever the queue's
    assert [(r.sweep, r.value, r.method) for r in result.rows] == [
        (s, v, m) for s, v, _ in grid_points(_plan()) for m in methods
    ]
    serial = run_experiments("counting", out_dir=tmp_path / "s", plan=_plan(), only=["cnt_rr"])
    assert _rows(serial.csv_path) == _rows(result.csv_path)


def test_figures_drawn_on_the_pool_equal_those_drawn_here(tmp_path: Path) -> None:
    plan = _plan()
    result = run_experiments("counting", out_dir=tmp_path, plan=plan, only=["cnt_rr"], workers=2)
    assert [p.name for p in result.plots] == [f"counting_{f}.png" for f in figures(plan)]
    for path, figure in zip(result.plots, figures(plan), strict=True):
        assert path.read_bytes() == draw_figure(result.rows, plan, figure)
