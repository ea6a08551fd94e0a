"""A parallel experiment run: its tasks queued baselines first then longest first, those
that build the same protocol together, its rows in the plan's order; its figures drawn on
the pool as soon as their rows are in, equal to those drawn in this process; rsum_pure's
digit calibrations run as tasks of their own, with the same results."""

from __future__ import annotations

import csv
import dataclasses
import io
import math
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest

from esa._executor import InlineExecutor
from protocols import ParameterError, ProtocolSpec, _cnt_pure, build_protocol
from simulations.experiments import ExperimentPlan, run_experiments
from simulations.experiments import run as experiments_run
from simulations.experiments.plan import baselines, grid_points
from simulations.experiments.plots import draw_figure, figure_needs, figures
from simulations.experiments.run import (
    _batch_key,
    _batches,
    _compute_calibration,
    _cost,
    _messages,
    _run_batch,
    _run_parallel,
    _Task,
)

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
    # the 8 baselines first (nearly free, and every figure needs some), then cnt_rr's
    # batches, the costliest first
    assert [b[0].family == "shuffle" for b in batches] == [False] * 8 + [True] * 3
    messages = _messages([t for batch in batches for t in batch])
    costs = [sum(_cost(t, messages[_batch_key(t)]) for t in batch) for batch in batches[8:]]
    assert costs == sorted(costs, reverse=True)
    assert costs[-1] > 0.0
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


def _histogram_tasks(max_messages: int) -> list[_Task]:
    plan = ExperimentPlan(
        category="histogram",
        defaults={"n": 2000, "epsilon": 0.9, "delta": 1e-6, "domain": 8, "skew": 2.0},
        sweeps={"n": (1000.0, 2000.0, 4000.0)},
        repeats=1,
        max_messages=max_messages,
        quick=True,
    )
    return [
        _Task("histogram", sweep, value, point, method, "shuffle", plan, "ideal", 0)
        for sweep, value, point in grid_points(plan)
        for method in ("hist_kr", "prhr")
    ]


def test_the_queue_is_ordered_by_the_messages_each_point_carries() -> None:
    # PRHR sends 660 messages per user at ε = 0.9, hist_kr one: PRHR at n = 1000 carries
    # 660 000 reports, more than hist_kr at n = 4000, and is queued first. Over the budget
    # (PRHR at n = 4000: 2.64·10^6 > 1.5·10^6) a row is a tally, which costs as its n.
    tasks = _histogram_tasks(max_messages=1_500_000)
    messages = _messages(tasks)
    assert messages[("prhr", 1000.0, 0.9, 1e-6, 8)] == 660.0
    assert messages[("hist_kr", 4000.0, 0.9, 1e-6, 8)] == 1.0
    order = [(tasks[b[0]].method, tasks[b[0]].point["n"]) for b in _batches(tasks, messages)]
    assert order[:2] == [("prhr", 2000.0), ("prhr", 1000.0)]
    assert set(order[2:4]) == {("prhr", 4000.0), ("hist_kr", 4000.0)}
    assert order[4:] == [("hist_kr", 2000.0), ("hist_kr", 1000.0)]
    (tally,) = [t for t in tasks if t.method == "prhr" and t.point["n"] == 4000.0]
    assert _cost(tally, 660.0) == 4000.0
    assert _cost(tally, None) == 0.0  # a refused point: its row is skipped at once


def test_a_slow_build_is_done_once_at_the_smallest_n(monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[tuple[str, int]] = []

    def counting_build(name: str, spec: ProtocolSpec) -> Any:
        built.append((name, spec.n))
        return build_protocol(name, spec)

    monkeypatch.setattr(experiments_run, "build_protocol", counting_build)
    tasks = _histogram_tasks(max_messages=3_000_000)
    monkeypatch.setattr(experiments_run, "_QUICK_BUILD", math.inf)  # every build is quick
    _messages(tasks)
    assert sorted(built) == sorted((m, n) for m in ("hist_kr", "prhr") for n in (1000, 2000, 4000))
    built.clear()
    monkeypatch.setattr(experiments_run, "_QUICK_BUILD", -1.0)  # every build is slow
    messages = _messages(tasks)
    assert sorted(built) == [("hist_kr", 1000), ("prhr", 1000)]
    assert messages[("prhr", 4000.0, 0.9, 1e-6, 8)] == messages[("prhr", 1000.0, 0.9, 1e-6, 8)]

    def refusing_at_1000(name: str, spec: ProtocolSpec) -> Any:
        built.append((name, spec.n))
        if spec.n == 1000:
            raise ParameterError(f"{name}: refused at n = 1000")
        return build_protocol(name, spec)

    # A slow protocol refused at its smallest n: that point costs nothing, and the others
    # are assumed to send one message per user (the protocol is not built again).
    monkeypatch.setattr(experiments_run, "build_protocol", refusing_at_1000)
    built.clear()
    messages = _messages(tasks)
    assert sorted(built) == [("hist_kr", 1000), ("prhr", 1000)]
    assert messages[("prhr", 1000.0, 0.9, 1e-6, 8)] is None
    assert messages[("prhr", 2000.0, 0.9, 1e-6, 8)] == 1.0


def test_a_run_on_two_workers_writes_the_serial_runs_csv_and_figures(tmp_path: Path) -> None:
    plan = _plan()
    result = run_experiments(
        "counting", out_dir=tmp_path / "p", plan=plan, only=["cnt_rr"], workers=2
    )
    serial = run_experiments("counting", out_dir=tmp_path / "s", plan=plan, only=["cnt_rr"])
    assert _rows(result.csv_path) == _rows(serial.csv_path)
    assert [p.name for p in result.plots] == [p.name for p in serial.plots]
    assert [p.name for p in result.plots] == [f"counting_{f}.png" for f in figures(plan)]
    # The pool drew each figure from its own rows alone (the test below); drawn here from
    # all the rows, it is the same. (The serial run's figures show other timings.)
    for path, figure in zip(result.plots, figures(plan), strict=True):
        assert path.read_bytes() == draw_figure(result.rows, plan, figure)


class _OneAtATime(InlineExecutor):
    """Runs each task when submitted, noting what was submitted, in order."""

    def __init__(self) -> None:
        self.log: list[tuple[str, Any]] = []

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        if fn is _run_batch:
            self.log.append(("rows", args[0]))
        elif fn is draw_figure:
            self.log.append(("figure", (args[2], args[0])))
        else:
            self.log.append(("other", args))
        return super().submit(fn, *args, **kwargs)


def test_figures_are_drawn_as_soon_as_their_rows_are_in_before_the_last_rows() -> None:
    # One worker (capacity 1), each task done when submitted: a deterministic schedule.
    plan = _plan()
    methods = [("cnt_rr", "shuffle"), *baselines("counting")]
    tasks = [
        _Task("counting", sweep, value, point, m, family, plan, "ideal", 0)
        for sweep, value, point in grid_points(plan)
        for m, family in methods
    ]
    executor = _OneAtATime()
    collected: list[Any] = []
    done_at: list[int] = []
    pngs = _run_parallel(
        executor,
        plan,
        tasks,
        collected.append,
        lambda: done_at.append(len(executor.log)),
        figures=figures(plan),
        capacity=1,
    )
    assert sorted(pngs) == sorted(figures(plan))
    assert [(r.sweep, r.value, r.method) for r in collected] == [
        (t.sweep, t.value, t.method) for t in tasks
    ]
    kinds = [kind for kind, _ in executor.log]
    assert kinds.count("rows") == 11
    assert kinds.count("figure") == 3
    last_rows = max(i for i, kind in enumerate(kinds) if kind == "rows")
    assert done_at == [last_rows + 1]  # the CSV's rows complete with the last batch
    started: set[tuple[str, float, str]] = set()
    early = []
    for i, (kind, what) in enumerate(executor.log):
        if kind == "rows":
            started |= {(t.sweep, t.value, t.method) for t in what}
            continue
        figure, rows = what
        wanted = {
            (t.sweep, t.value, t.method)
            for t in tasks
            if figure_needs(plan, figure, t.sweep, t.value)
        }
        assert wanted <= started  # all its rows were done before it was submitted
        assert {(r.sweep, r.value, r.method) for r in rows} == wanted
        if i < last_rows:
            early.append(figure)
    # the overview (the default point) and the ε sweep are drawn before the n sweep's
    # last batch (cnt_rr at n = 1000) is submitted; only the n sweep's figure waits for it
    assert sorted(early) == ["epsilon", "overview"]
    assert executor.log[-1][0] == "figure"
    assert executor.log[-1][1][0] == "n"


def _sum_plan() -> ExperimentPlan:
    return ExperimentPlan(
        category="sum",
        defaults={"n": 300, "epsilon": 1.0, "delta": 1e-6, "domain": 10, "skew": 6.0},
        sweeps={"epsilon": (1.0,), "n": (300.0,)},  # one point, visited by both sweeps
        repeats=2,
        max_messages=3_000_000,
        quick=True,
    )


class _Calls(InlineExecutor):
    """Runs every task here at once, noting each function submitted and its arguments."""

    def __init__(self) -> None:
        self.functions: list[Any] = []

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        self.functions.append((fn, args))
        return super().submit(fn, *args, **kwargs)


def test_rsum_pure_calibrations_run_as_tasks_ahead_of_its_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_cnt_pure, "_INSTALLED", {})  # the batch installs them here
    plan = _sum_plan()
    spec = ProtocolSpec(epsilon=1.0, delta=1e-6, n=300, domain=10)
    wanted = build_protocol("rsum_pure", spec).calibrations()
    assert len(wanted) == 2  # two digits at n = 300, each its own calibration
    recording = _Calls()
    result = run_experiments(
        "sum", out_dir=tmp_path / "c", plan=plan, only=["rsum_pure"], cluster=recording
    )
    fns = [fn for fn, _ in recording.functions]
    calibrated = [args[0] for fn, args in recording.functions if fn is _compute_calibration]
    assert sorted(calibrated, key=lambda c: c.tau) == sorted(wanted, key=lambda c: c.tau)
    (built,) = [args for fn, args in recording.functions if fn is _run_batch and len(args[0]) > 1]
    assert [t.method for t in built[0]] == ["rsum_pure", "rsum_pure"]
    assert sorted(c.tau for c in built[1]) == sorted(c.tau for c in wanted)
    assert all(c.choice is not None for c in built[1])
    assert fns.index(_run_batch) > max(i for i, f in enumerate(fns) if f is _compute_calibration)
    serial = run_experiments("sum", out_dir=tmp_path / "s", plan=plan, only=["rsum_pure"])
    assert _rows(result.csv_path) == _rows(serial.csv_path)


def test_a_calibration_computed_in_another_process_is_the_same(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from concurrent.futures import ProcessPoolExecutor

    monkeypatch.setattr(_cnt_pure, "_INSTALLED", {})
    proto = build_protocol("rsum_pure", ProtocolSpec(epsilon=1.0, delta=1e-6, n=300, domain=10))
    calibrations = proto.calibrations()
    with ProcessPoolExecutor(1) as pool:
        there = list(pool.map(_compute_calibration, calibrations))
    here = [c.compute() for c in calibrations]
    assert there == here
    assert all(c.choice is not None for c in there)
    for c in there:
        c.install()
    installed = build_protocol(
        "rsum_pure", ProtocolSpec(epsilon=1.0, delta=1e-6, n=300, domain=10)
    ).counters
    assert installed == proto.counters  # proto computes its own, in this process
    # and an installed result is what a build takes (not computed again): a doctored one
    c = there[0]
    assert c.choice is not None
    fake = dataclasses.replace(c.choice, lam=c.choice.lam / 2, epsilon=0.125)
    dataclasses.replace(c, choice=fake).install()
    taken = _cnt_pure.PureBitCounter.derive(
        epsilon=c.epsilon, tau=c.tau, honest_users=300, scales=c.scales
    )
    assert (taken.lam, taken.epsilon_certified) == (c.choice.lam / 2, 0.125)
    with pytest.raises(_cnt_pure.ParameterError, match="computed before"):
        calibrations[0].install()
