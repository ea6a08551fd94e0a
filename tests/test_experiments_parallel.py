"""A parallel experiment run: its tasks queued longest first, those that build the same
protocol together, its rows in the plan's order, and its figures drawn on the pool, equal
to those drawn in this process."""

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
from simulations.experiments.run import _cost, _run_batch, _Task

WALL_CLOCK = ("analyzer_seconds", "total_seconds", "analyzer_cpu_seconds", "total_cpu_seconds")


def _plan() -> ExperimentPlan:
    return ExperimentPlan(
        category="counting",
        defaults={"n": 2000, "epsilon": 1.0, "delta": 1e-6, "domain": 2, "skew": 0.5},
        sweeps={"epsilon": (0.5, 1.0), "n": (1000.0, 2000.0)},  # the default twice
        repeats=2,
        max_messages=200_000,
        quick=True,
    )


class _Recording(InlineExecutor):
    """Runs every task here at once, noting the grid's pool tasks in the order submitted."""

    def __init__(self) -> None:
        self.submitted: list[tuple[_Task, ...]] = []

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        if fn is _run_batch:
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
    batches = recording.submitted
    assert sum(len(b) for b in batches) == 4 * 3  # 4 points × (cnt_rr, ldp_rr, cdp_laplace)
    costs = [sum(_cost(t) for t in batch) for batch in batches]
    assert costs == sorted(costs, reverse=True)
    assert costs[-1] == 0.0 < costs[0]  # a baseline last; a shuffle task first
    # cnt_rr at the default point, which both sweeps visit, is built once: one pool task
    (shared,) = [b for b in batches if len(b) > 1]
    assert [(t.method, t.sweep, t.value) for t in shared] == [
        ("cnt_rr", "epsilon", 1.0),
        ("cnt_rr", "n", 2000.0),
    ]
    assert len(batches) == 4 * 3 - 1
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
