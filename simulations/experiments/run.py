"""Running the survey's §5 grid (:func:`run_experiments`), or rebuilding its outputs from
the CSV of an earlier run (:func:`rebuild_experiments`); the synthetic data and baselines.

Both look up :func:`~simulations.experiments.plan.make_plan` and
:func:`~simulations.experiments.plots.plot_category` in this module's namespace at call
time, so a test replaces them here (``monkeypatch.setattr(experiments.run, ...)``).
"""

from __future__ import annotations

import importlib
import math
import statistics
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Executor, Future, wait
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

import esa
from protocols import KRR, OLH, Harmony, ParameterError, build_protocol, laplace

from . import plots as _plots
from .csv import ExperimentsCSVError, check_grid, csv_repeats, read_csv, write_csv
from .plan import (
    ExperimentPlan,
    ExperimentResult,
    Log,
    Row,
    baselines,
    category_protocols,
    grid_points,
    make_plan,
    point_seed,
    point_spec,
)
from .plots import draw_figure, figure_name, figure_needs, figures, plot_category
from .summary import write_summary

__all__ = ["generate", "rebuild_experiments", "run_experiments"]


def generate(
    category: str, n: int, domain: int, skew: float, *, rng: esa.RNGLike
) -> npt.NDArray[Any]:
    """Synthetic data of survey §5: Ber(q) bits, a discretized normal on [d], a normal on [0,1].

    ``skew`` is q for counting and the normal's d/sd (resp. 1/sd) ratio otherwise; ``rng`` a
    generator or a seed (:data:`protocols.RNGLike`).
    """
    rng = esa.as_generator(rng)
    if category == "counting":
        return (rng.random(n) < skew).astype(np.int64)
    if category == "histogram":
        x = np.rint(rng.normal((domain - 1) / 2.0, domain / skew, size=n))
        return np.clip(x, 0, domain - 1).astype(np.int64)
    return np.clip(rng.normal(0.5, 1.0 / skew, size=n), 0.0, 1.0)


def _truth(category: str, x: npt.NDArray[Any], domain: int) -> npt.NDArray[np.float64]:
    if category == "counting":
        return np.array([float(x.sum())])
    if category == "histogram":
        return np.bincount(x, minlength=domain).astype(np.float64)
    return np.array([float(x.sum())])


class _Clock:
    """Wall and CPU seconds of one span (``with _Clock() as c: ...; c.wall, c.cpu``)."""

    def __enter__(self) -> _Clock:
        self._wall, self._cpu = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc: object) -> None:
        self.cpu_end = time.process_time()
        self.wall = time.perf_counter() - self._wall
        self.cpu = self.cpu_end - self._cpu


def _run_baseline(
    method: str, category: str, x: npt.NDArray[Any], domain: int, eps: float, rng: Any
) -> tuple[npt.NDArray[np.float64], _Clock, float]:
    """(estimate, the analyzer's clock, Σ closed-form variances) of one baseline run at ε.

    The privacy ε is applied locally (LDP) or once to the exact statistic (CDP).
    """
    n = x.shape[0]
    truth = _truth(category, x, domain)
    if method == "cdp_laplace":
        with _Clock() as clock:
            # Replacement neighbours: a histogram has L1 sensitivity 2; a count or a sum on
            # [0,1] has sensitivity 1.
            sens = 2.0 if category == "histogram" else 1.0
            est = truth + laplace(sens / eps, truth.shape, rng=rng)
        var = truth.size * 2.0 * (sens / eps) ** 2
        return np.asarray(est, dtype=np.float64), clock, var
    if method == "ldp_harmony":
        mech = Harmony(epsilon=eps)
        signed = 2.0 * x - 1.0
        reports = mech.randomize(signed, rng=rng)
        with _Clock() as clock:
            est = n * (mech.estimate(reports) + 1.0) / 2.0
        return np.array([est]), clock, n * n / 4.0 * mech.mean_variance(signed)
    if method == "ldp_rr":
        oracle: KRR | OLH = KRR(d=2, epsilon=eps)
        counts_true = np.array([n - truth[0], truth[0]])
    else:
        oracle = KRR(d=domain, epsilon=eps) if method == "ldp_krr" else OLH(d=domain, epsilon=eps)
        counts_true = truth
    oreports = oracle.randomize(x, rng=rng)
    with _Clock() as clock:
        counts = np.asarray(oracle.aggregate(oreports), dtype=np.float64)
    ovar = np.asarray(oracle.variance(counts_true, n), dtype=np.float64)
    if method == "ldp_rr":
        return counts[1:], clock, float(ovar[1])
    return counts, clock, float(ovar.sum())


def run_experiments(
    category: str,
    *,
    out_dir: Path,
    quick: bool = False,
    crypto: str = "ideal",
    seed: int = 0,
    repeats: int | None = None,
    only: Sequence[str] | None = None,
    progress: Any = None,
    log: Log | None = None,
    plan: ExperimentPlan | None = None,
    workers: int | None = None,
    cluster: str | Executor | Any | None = None,
) -> ExperimentResult:
    """Run the category's grid, write CSV, plots and summary into ``out_dir``.

    Each (grid point, method) is one task; its random numbers come from ``seed`` and the
    task's identity only (:func:`~simulations.experiments.plan.point_seed`), never from its
    place in the run, so the rows of a protocol are the same whichever other protocols run
    with it, and a parallel run (``workers``, ``cluster``) writes the same CSV as a serial
    one, but for the timing columns (``analyzer_seconds``, ``total_seconds``,
    ``analyzer_cpu_seconds``, ``total_cpu_seconds``: :data:`~.csv.TIMING_FIELDS`).

    Args:
        category: ``counting``, ``histogram`` or ``sum``.
        out_dir: created if missing.
        quick: the scaled-down grid.
        crypto: ``ideal`` (default) or ``onion`` for the pipeline runs.
        seed: root seed of the statistics.
        repeats: override the plan's repeats.
        only: restrict to these protocol names (default: every registered one).
        progress: a rich Progress (or stand-in) from :func:`simulations._common.progress`.
        log: called with one line per skipped point or protocol.
        plan: run this grid instead of :func:`make_plan`'s (tests use a tiny one).
        workers: run the tasks on this many local processes (default, with no
            ``cluster``: one after the other in this process), and draw the figures there
            too, each as soon as the rows it shows are in (:func:`_run_parallel` says in
            which order).
        cluster: run the tasks on a Dask cluster (a scheduler address such as
            ``"tcp://host:8786"`` or a ``distributed.Client``) or on any
            :class:`~concurrent.futures.Executor` (:func:`esa.resolve_executor`).
    """
    if crypto not in ("ideal", "onion"):
        raise ParameterError(f"crypto must be 'ideal' or 'onion', got {crypto!r}")
    plan = plan if plan is not None else make_plan(category, quick=quick, repeats=repeats)
    if plan.category != category:
        raise ParameterError(f"plan is for {plan.category!r}, not {category!r}")
    say: Log = log if log is not None else (lambda _line: None)
    names = category_protocols(category)
    if only is not None:
        unknown = sorted(set(only) - set(names))
        if unknown:
            raise ParameterError(
                f"not {category} protocols: {', '.join(unknown)}; "
                f"registered: {', '.join(names) or 'none'}"
            )
        names = [n for n in names if n in set(only)]
    out_dir.mkdir(parents=True, exist_ok=True)
    t_start = time.perf_counter()
    points = list(grid_points(plan))
    methods = [(name, "shuffle") for name in names] + baselines(category)
    tasks = [
        _Task(category, sweep, value, point, method, family, plan, crypto, seed)
        for sweep, value, point in points
        for method, family in methods
    ]
    task = None
    if progress is not None:
        task = progress.add_task(f"{category} experiments", total=len(tasks))
    rows: list[Row] = []
    skipped: list[str] = []

    def collect(row: Row) -> None:
        if row.status != "ok":
            line = f"{row.method} @ {row.sweep}={row.value:g}: {row.reason}"
            skipped.append(line)
            say(f"skipped {line}")
        rows.append(row)
        if progress is not None:
            progress.advance(task)

    csv_path = out_dir / f"{category}.csv"
    if workers is None and cluster is None:  # in this process, one task after the other
        for t in tasks:
            collect(_run_task(t))
        write_csv(rows, csv_path)
        plots = plot_category(rows, plan, out_dir)
    else:
        # The figures are tasks too on a local pool (a cluster's workers need not have
        # matplotlib); a replaced plot_category runs here, after the rows.
        on_pool = cluster is None and plot_category is _plots.plot_category
        if cluster is None:
            _preload()
            if on_pool:
                _preload_plotting()
        with esa.resolve_executor(workers, cluster) as executor:
            pngs = _run_parallel(
                executor,
                plan,
                tasks,
                collect,
                lambda: write_csv(rows, csv_path),
                figures=figures(plan) if on_pool else [],
                capacity=workers if cluster is None else None,
            )
        if on_pool:
            plots = []
            for figure in figures(plan):
                path = out_dir / figure_name(plan, figure)
                path.write_bytes(pngs[figure])
                plots.append(path)
        else:
            plots = plot_category(rows, plan, out_dir)
    seconds = time.perf_counter() - t_start
    result = ExperimentResult(
        plan=plan,
        rows=rows,
        protocols=names,
        csv_path=csv_path,
        plots=plots,
        summary_path=out_dir / f"{category}_summary.md",
        seconds=seconds,
        crypto=crypto,
        skipped=skipped,
    )
    write_summary(result)
    return result


@dataclass(frozen=True, slots=True)
class _Task:
    """One (grid point, method) of a run: everything its row depends on (picklable)."""

    category: str
    sweep: str
    value: float
    point: dict[str, float]
    method: str
    family: str
    plan: ExperimentPlan
    crypto: str
    seed: int


def _preload() -> None:
    """Import what every task imports lazily (scipy's special, optimize and fft: ~0.6 s of
    CPU in a fresh process) before the local pool starts: its workers are forked from this
    process on Linux and inherit the modules instead of each importing them again. Elsewhere
    (spawned workers, a Dask cluster) it only moves one import into this process.

    Not scipy.stats nor scipy.signal (another ~0.45 s): the accountants' binomial laws and
    convolutions come from :mod:`protocols._distributions`, which needs neither."""
    importlib.import_module("scipy.special")
    importlib.import_module("scipy.optimize")
    importlib.import_module("scipy.fft")


def _preload_plotting() -> None:
    """Import matplotlib's pyplot with the Agg backend (what :func:`draw_figure` imports,
    ~0.4 s of CPU) before the local pool starts, for the same reason as :func:`_preload`:
    every worker that draws a figure would otherwise import it itself."""
    matplotlib = importlib.import_module("matplotlib")
    matplotlib.use("Agg")
    importlib.import_module("matplotlib.pyplot")


#: A protocol whose build takes longer than this (CPU seconds: it inverts an amplification
#: bound) is built only once by :func:`_messages`, at its smallest n; its other points are
#: assumed to send as many messages per user. A build that fast is repeated at every point.
_QUICK_BUILD = 0.005


def _messages(tasks: Sequence[_Task]) -> dict[tuple[Any, ...], float | None]:
    """Messages per user of each shuffle protocol at each of its points (by
    :func:`_batch_key`), to order a parallel run's queue: ``None`` where it refuses the
    point.

    Each protocol is built here, at each of its points from the smallest n up, as long as
    its builds are quick (:data:`_QUICK_BUILD`); a slow one is built at its smallest n only
    (its cheapest build) and that point's messages stand for the rest (one message per user
    if it refused that point: a slow build is one that inverts an amplification bound, a
    randomizer's single report or a fixed number of fragments). The builds' bound
    evaluations stay in this process's caches, which a forked pool worker inherits, so the
    one slow build is not done twice. Only the queue's order depends on these numbers,
    never a row.
    """
    out: dict[tuple[Any, ...], float | None] = {}
    slow: dict[str, float] = {}
    for t in sorted(tasks, key=lambda t: t.point["n"]):
        key = _batch_key(t)
        if t.family != "shuffle" or key in out:
            continue
        if t.method in slow:
            out[key] = slow[t.method]
            continue
        start = time.process_time()
        try:
            m: float | None = build_protocol(
                t.method, point_spec(t.method, t.point)[0]
            ).messages_per_user
        except ParameterError:
            m = None  # refused: its row is skipped at once
        out[key] = m
        if time.process_time() - start > _QUICK_BUILD:
            slow[t.method] = m if m is not None else 1.0
    return out


def _cost(t: _Task, messages_per_user: float | None) -> float:
    """A task's expected cost, to order the pool's queue (longest first): the messages its
    runs carry, ``repeats`` × (n × ``messages_per_user`` + its fakes), or n per run where
    they exceed the plan's budget (a tally, or a skipped row); 0 for a baseline (one
    vectorized randomizer call) or a point the protocol refuses (``None``). Only the order
    depends on it, never a row."""
    if t.family != "shuffle" or messages_per_user is None:
        return 0.0
    n = t.point["n"]
    messages = n * messages_per_user + point_spec(t.method, t.point)[1]
    if messages > t.plan.max_messages:
        messages = n
    return messages * t.plan.repeats


def _batch_key(t: _Task) -> tuple[Any, ...]:
    """What a shuffle protocol's build depends on: its name and the point's n, ε, δ, d."""
    return (t.method, *(t.point[k] for k in ("n", "epsilon", "delta", "domain")))


def _batches(
    tasks: Sequence[_Task], messages: dict[tuple[Any, ...], float | None] | None = None
) -> list[list[int]]:
    """The tasks' indices in the pool tasks of a parallel run, in the pool's queue order.

    The tasks of a shuffle protocol that build it alike (the same n, ε, δ and d: a point
    that several sweeps share, a skew sweep) form one pool task, in the plan's order: its
    calibration, cached in the process, is computed once, as in a serial run, instead of
    once in every worker that gets one of them. A batch costs the sum of its tasks'
    :func:`_cost`, from the protocols' ``messages`` per user (:func:`_messages`, computed
    here if not given). The baselines come first (each a pool task of its own, nearly free,
    and every figure needs some), then the shuffle protocols' batches, the costliest first.
    """
    if messages is None:
        messages = _messages(tasks)
    batches: dict[tuple[Any, ...], list[int]] = {}
    for i, t in enumerate(tasks):
        key: tuple[Any, ...] = (i,)
        if t.family == "shuffle":
            key = _batch_key(t)
        batches.setdefault(key, []).append(i)

    def order(batch: list[int]) -> tuple[bool, float]:
        first = tasks[batch[0]]
        cost = sum(_cost(tasks[i], messages.get(_batch_key(first))) for i in batch)
        return first.family == "shuffle", -cost

    return sorted(batches.values(), key=order)


#: Shuffle protocols whose build costs nothing (its calibrations run on first use) and
#: whose calibrations can run apart (``calibrations()``, e.g. ``RSumPURE.calibrations``:
#: one per digit). A parallel run builds these in its own process to list them, which for
#: another protocol could cost seconds of the serial part.
_SPLIT_CALIBRATIONS = frozenset({"rsum_pure"})


def _calibrations(t: _Task) -> tuple[Any, ...]:
    """The calibrations of ``t``'s protocol that can run as pool tasks of their own, ahead
    of the batch that builds it (none for a baseline, a protocol not in
    :data:`_SPLIT_CALIBRATIONS`, or one the point refuses)."""
    if t.family != "shuffle" or t.method not in _SPLIT_CALIBRATIONS:
        return ()
    try:
        proto = build_protocol(t.method, point_spec(t.method, t.point)[0])
    except ParameterError:
        return ()  # its batch says why
    listed = getattr(proto, "calibrations", None)
    return tuple(listed()) if listed is not None else ()


def _compute_calibration(calibration: Any) -> Any:
    """A calibration's result (``calibration.compute()``: a pool task), or ``None`` where it
    refuses; the batch then computes it itself and skips the point with the same reason as
    a serial run."""
    try:
        return calibration.compute()
    except ParameterError:
        return None


def _run_batch(batch: tuple[_Task, ...], calibrations: Sequence[Any] = ()) -> list[Row]:
    """The rows of :func:`_run_task` for each task of a batch, in one process, after
    installing the ``calibrations`` of its protocol computed elsewhere
    (:func:`_compute_calibration`; ``None``: not computed)."""
    for calibration in calibrations:
        if calibration is not None:
            calibration.install()
    return [_run_task(t) for t in batch]


@dataclass(eq=False)
class _Job:
    """One pool task of a parallel run: ``fn(*args())``, its arguments taken when it is
    submitted, after the jobs it ``needs``; ``done`` takes its result; ``rank`` orders the
    ready jobs (lowest first)."""

    rank: tuple[float, ...]
    fn: Callable[..., Any]
    args: Callable[[], tuple[Any, ...]]
    done: Callable[[Any], None]
    needs: tuple[_Job, ...] = ()


def _drive(executor: Executor, jobs: Sequence[_Job], capacity: int | None) -> None:
    """Run ``jobs`` on ``executor``, each once every job it needs is done, at most
    ``capacity`` at a time (``None``: every ready job at once), the ready ones by rank.

    Only as many jobs as there are workers are submitted at a time, so a job that becomes
    ready (a figure whose rows are in) starts next instead of behind every job already
    queued. On an error, the jobs not started are cancelled and the error raised.
    """
    waiting = sorted(jobs, key=lambda j: j.rank)
    finished: set[_Job] = set()
    running: dict[Future[Any], _Job] = {}
    try:
        while waiting or running:
            for job in [j for j in waiting if all(n in finished for n in j.needs)]:
                if capacity is not None and len(running) >= capacity:
                    break
                waiting.remove(job)
                running[executor.submit(job.fn, *job.args())] = job
            if not running:
                raise RuntimeError("a parallel run's job needs one that never runs")
            ended, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in [f for f in running if f in ended]:  # in the order submitted
                job = running.pop(future)
                job.done(future.result())
                finished.add(job)
    except BaseException:
        for future in running:
            future.cancel()
        raise


def _run_parallel(
    executor: Executor,
    plan: ExperimentPlan,
    tasks: Sequence[_Task],
    collect: Callable[[Row], None],
    rows_done: Callable[[], None],
    *,
    figures: Sequence[str],
    capacity: int | None,
) -> dict[str, bytes]:
    """Run ``tasks`` (of ``plan``) on ``executor`` and draw ``figures`` there: their PNG
    bytes by figure.

    The pool's tasks (:func:`_drive`), in the order a free worker takes them:

    1. the calibrations that can run apart (:func:`_calibrations`: ``rsum_pure``'s digit
       counters), the costliest first, so that one protocol's calibrations run on every
       worker instead of one after the other in the batch that builds it;
    2. a figure, as soon as every row it draws (:func:`figure_needs`) is in;
    3. the rows, one pool task per batch (:func:`_batches`), a batch once the calibrations
       it installs are done.

    Rows are handed to ``collect`` in the plan's order as soon as the ones before them are
    in, whatever order they come in; ``rows_done`` is called once all are.
    """
    batches = _batches(tasks)
    rows: dict[int, Row] = {}
    collected = 0

    def take(batch: list[int], out: list[Row]) -> None:
        nonlocal collected
        rows.update(zip(batch, out, strict=True))
        while collected in rows:
            collect(rows[collected])
            collected += 1
        if collected == len(tasks):
            rows_done()

    computed: dict[Any, Any] = {}
    calibration_jobs: dict[Any, _Job] = {}
    batch_jobs: list[_Job] = []
    for b, batch in enumerate(batches):
        needs = _calibrations(tasks[batch[0]])
        for c in needs:
            if c not in calibration_jobs:
                rank = (0, -c.work, len(calibration_jobs))
                calibration_jobs[c] = _Job(
                    rank,
                    _compute_calibration,
                    partial(tuple, (c,)),  # its arguments: (c,)
                    partial(computed.__setitem__, c),
                )
        batch_jobs.append(
            _Job(
                (2, b),
                _run_batch,
                partial(_batch_args, tasks, batch, needs, computed),
                partial(take, batch),
                tuple(calibration_jobs[c] for c in needs),
            )
        )
    jobs = [*calibration_jobs.values(), *batch_jobs]
    pngs: dict[str, bytes] = {}
    for f, figure in enumerate(figures):
        drawn = [i for i, t in enumerate(tasks) if figure_needs(plan, figure, t.sweep, t.value)]
        after = tuple(
            job for job, batch in zip(batch_jobs, batches, strict=True) if set(batch) & set(drawn)
        )
        jobs.append(
            _Job(
                (1, f),
                draw_figure,
                partial(_figure_args, rows, drawn, plan, figure),
                partial(pngs.__setitem__, figure),
                after,
            )
        )
    _drive(executor, jobs, capacity)
    return pngs


def _batch_args(
    tasks: Sequence[_Task], batch: list[int], needs: Sequence[Any], computed: dict[Any, Any]
) -> tuple[Any, ...]:
    """:func:`_run_batch`'s arguments: the batch's tasks and its calibrations' results."""
    return tuple(tasks[i] for i in batch), tuple(computed[c] for c in needs)


def _figure_args(
    rows: dict[int, Row], drawn: list[int], plan: ExperimentPlan, figure: str
) -> tuple[Any, ...]:
    """:func:`draw_figure`'s arguments: the rows it draws, in the plan's order."""
    return [rows[i] for i in drawn], plan, figure


def _run_task(t: _Task) -> Row:
    """The row of one (point, method): runs anywhere (a pool or cluster worker) alike.

    The point's data come from the stream of ``(category, "data", point)`` (the same for
    every method at the point), the method's randomness from ``(category, method, point)``.
    """
    n, d = int(t.point["n"]), int(t.point["domain"])
    data_rng = np.random.default_rng(point_seed(t.seed, t.category, "data", t.point))
    data = [
        generate(t.category, n, d, t.point["skew"], rng=r) for r in data_rng.spawn(t.plan.repeats)
    ]
    mrng = np.random.default_rng(point_seed(t.seed, t.category, t.method, t.point))
    row = Row(
        category=t.category,
        sweep=t.sweep,
        value=t.value,
        method=t.method,
        family=t.family,
        n=n,
        domain=d,
        epsilon=t.point["epsilon"],
        delta=t.point["delta"],
        skew=t.point["skew"],
        crypto=t.crypto if t.family == "shuffle" else "none",
    )
    if t.family == "shuffle":
        _run_shuffle(row, t.method, t.point, data, t.plan, t.crypto, mrng)
    else:
        _run_baseline_row(row, t.method, t.category, data, mrng)
    return row


def _run_shuffle(
    row: Row,
    name: str,
    point: dict[str, float],
    data: list[npt.NDArray[Any]],
    plan: ExperimentPlan,
    crypto: str,
    rng: np.random.Generator,
) -> None:
    try:
        spec, fakes = point_spec(name, point)
        proto = build_protocol(name, spec)
        _ = proto.privacy  # derive every parameter now (Cnt_PURE calibrates lazily)
    except ParameterError as exc:
        row.status, row.reason = "skipped", f"ParameterError: {exc}"
        return
    budget = row.n * proto.messages_per_user + fakes
    representation = "reports"
    if budget > plan.max_messages:
        if crypto != "ideal" or not proto.supports_tally:
            row.status = "skipped"
            row.reason = (
                f"n x messages_per_user = {budget:.3g} exceeds this grid's budget of "
                f"{plan.max_messages:.3g} messages per run"
            )
            return
        # Too many reports, but the estimator reads only an additive summary of the
        # message multiset: the hops carry that instead (esa.PipelineConfig.representation).
        representation = "tally"
    row.representation = representation
    config = esa.PipelineConfig(
        shufflers=1,
        fake_reports=fakes,
        crypto=crypto,  # type: ignore[arg-type]
        representation=representation,  # type: ignore[arg-type]
    )
    errors: list[npt.NDArray[np.float64]] = []
    exp_var, analyze, total, analyze_cpu, total_cpu, msgs = 0.0, 0.0, 0.0, 0.0, 0.0, 0.0
    try:
        for x, r in zip(data, rng.spawn(len(data)), strict=True):
            stages = _AnalyzeStart()
            with _Clock() as clock:
                res = esa.run_pipeline(proto, x, config, rng=r, on_stage=stages)
            errors.append(np.asarray(res.estimate.values - res.truth, dtype=np.float64))
            exp_var += float(np.sum(np.asarray(res.estimate.expected_std) ** 2))
            analyze += res.seconds["analyze"]
            total += res.seconds["total"]
            analyze_cpu += clock.cpu_end - stages.cpu
            total_cpu += clock.cpu
            msgs += res.hops[-1].received / row.n  # reports or tally: what reached it
    except ParameterError as exc:
        row.status, row.reason = "skipped", f"ParameterError: {exc}"
        return
    k = len(data)
    _set_errors(row, errors, exp_var)
    row.analyzer_seconds = analyze / k
    row.total_seconds = total / k
    row.analyzer_cpu_seconds = analyze_cpu / k
    row.total_cpu_seconds = total_cpu / k
    row.messages_per_user = msgs / k
    row.epsilon_central = proto.privacy.epsilon_central


class _AnalyzeStart:
    """An ``on_stage`` callback of :func:`esa.run_pipeline`: ``cpu`` is the process CPU time
    at which the analyze stage (the run's last) started."""

    def __init__(self) -> None:
        self.cpu = math.nan

    def __call__(self, stage: str) -> None:
        if stage == "analyze":
            self.cpu = time.process_time()


def _set_errors(row: Row, errors: Sequence[npt.NDArray[np.float64]], exp_var: float) -> None:
    """``row``'s repeats, RMSE, spread of the per-run RMSEs and expected RMSE from each
    run's error vector and the runs' summed closed-form variances."""
    squares = [float(np.sum(e**2)) for e in errors]
    entries = sum(e.size for e in errors)
    per_run = [math.sqrt(sq / e.size) for sq, e in zip(squares, errors, strict=True)]
    row.repeats = len(errors)
    row.rmse = math.sqrt(sum(squares) / entries)
    row.rmse_sd = statistics.stdev(per_run) if len(per_run) > 1 else math.nan
    row.expected_rmse = math.sqrt(exp_var / entries)


def _run_baseline_row(
    row: Row, method: str, category: str, data: list[npt.NDArray[Any]], rng: np.random.Generator
) -> None:
    errors: list[npt.NDArray[np.float64]] = []
    exp_var, analyze, total, analyze_cpu, total_cpu = 0.0, 0.0, 0.0, 0.0, 0.0
    for x, r in zip(data, rng.spawn(len(data)), strict=True):
        with _Clock() as run:
            est, analyzer, var = _run_baseline(method, category, x, row.domain, row.epsilon, r)
        exp_var += var
        errors.append(np.asarray(est - _truth(category, x, row.domain), dtype=np.float64))
        analyze += analyzer.wall
        total += run.wall
        analyze_cpu += analyzer.cpu
        total_cpu += run.cpu
    k = len(data)
    _set_errors(row, errors, exp_var)
    row.analyzer_seconds = analyze / k
    row.total_seconds = total / k
    row.analyzer_cpu_seconds = analyze_cpu / k
    row.total_cpu_seconds = total_cpu / k
    row.messages_per_user = 1.0
    row.epsilon_central = row.epsilon


def rebuild_experiments(
    category: str,
    *,
    csv_path: Path,
    out_dir: Path,
    quick: bool = False,
    plan: ExperimentPlan | None = None,
) -> ExperimentResult:
    """Write the plots and the summary of an earlier run again from its CSV; run nothing.

    The rows are :func:`read_csv`'s; everything else the summary states comes from them:
    the protocols (the shuffle methods, in the CSV's order), the crypto they ran with, the
    runs per point (the rows' ``repeats``), the skipped points and their reasons. Only the
    run's wall time is not in the CSV: the summary says where its rows came from instead.

    Args:
        category: ``counting``, ``histogram`` or ``sum``.
        csv_path: a ``<category>.csv`` written by :func:`run_experiments`; it is neither
            rewritten nor copied into ``out_dir``.
        out_dir: where the plots and ``<category>_summary.md`` go (created if missing).
        quick: whether the CSV is of the ``--quick`` grid (a CSV does not say).
        plan: read the CSV as of this grid instead of :func:`make_plan`'s.

    Returns:
        The result, with ``from_csv`` set and ``seconds`` the time the rebuild took.

    Raises:
        ExperimentsCSVError: the CSV is not readable as :func:`read_csv` says, or its grid
            points, their coordinates, the methods at each point, its runs per point or
            its crypto are not what a run of the plan writes.
        ParameterError: unknown category, or ``plan`` is for another category.
    """
    t_start = time.perf_counter()
    rows = read_csv(csv_path, category=category)
    if plan is None:
        plan = make_plan(category, quick=quick, repeats=csv_repeats(rows, csv_path))
    elif plan.category != category:
        raise ParameterError(f"plan is for {plan.category!r}, not {category!r}")
    check_grid(rows, plan, csv_path)
    shuffle = [r for r in rows if r.family == "shuffle"]
    cryptos = sorted({r.crypto for r in shuffle})
    if len(cryptos) > 1 or cryptos == ["none"]:
        raise ExperimentsCSVError(
            f"{csv_path}: the shuffle rows ran with crypto {', '.join(cryptos)}; "
            "a run uses one of ideal, onion"
        )
    if any(r.crypto != "none" for r in rows if r.family != "shuffle"):
        raise ExperimentsCSVError(f"{csv_path}: a baseline row with a crypto other than none")
    out_dir.mkdir(parents=True, exist_ok=True)
    plots = plot_category(rows, plan, out_dir)
    result = ExperimentResult(
        plan=plan,
        rows=rows,
        protocols=list(dict.fromkeys(r.method for r in shuffle)),
        csv_path=csv_path,
        plots=plots,
        summary_path=out_dir / f"{category}_summary.md",
        seconds=0.0,
        crypto=cryptos[0] if cryptos else "ideal",
        skipped=[
            f"{r.method} @ {r.sweep}={r.value:g}: {r.reason}" for r in rows if r.status != "ok"
        ],
        from_csv=True,
    )
    write_summary(result)
    result.seconds = time.perf_counter() - t_start
    return result
