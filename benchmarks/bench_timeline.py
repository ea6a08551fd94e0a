"""Where a parallel experiment grid's wall time goes: every pool task on one clock.

Runs ``esa experiments <category> --quick --workers 1`` and ``--workers 2`` alternately
(1, 2, 1, 2, ...), each a fresh process started as the ``esa`` executable starts
(``simulations._launch``), with every pool task (a batch of rows, a calibration, a figure)
timed where it runs: its worker, its start and end on the wall clock (``time.time``, one
clock for every process) and its CPU seconds (``time.process_time`` of the worker). The
parent records the CPU it spends while its pool runs (``_drive``: its main thread and the
pool's management thread). Per run:

* ``first``: seconds from the command's launch to its first task's start: the serial part
  before the pool (interpreter, imports, scipy and matplotlib before the fork, the builds
  that order the queue, the fork);
* ``busy``: the workers' task seconds, summed (wall time inside a task);
* ``gaps``: a worker's seconds between two of its tasks (the parent hands a task only to a
  free worker: the round trip of a result and the next submission);
* ``head`` and ``tail``: a worker's seconds after the first task starts before its own
  first, and after its own last task ends before the last task does (a tail is a worker
  left alone with the last task);
* ``exit``: from the last task's end to the command's exit (pool shutdown, the CSV, the
  summary, the PNG files, the interpreter's exit);
* ``drive cpu``: the parent's CPU seconds while its pool runs, taken from the workers' cores
  in a 2-worker run.

So a run's wall time is first + (busy + gaps + head + tail) / workers + exit. Per pair, the
2-worker run's wall time against half the 1-worker run's, split by the same terms:
``serial`` = (first + exit)₂ − (first + exit)₁ / 2, ``work`` = (busy₂ − busy₁) / 2 (what
the tasks cost more on two workers), ``idle`` = (gaps + head + tail)₂ / 2 − gaps₁ / 2; and
``task cpu`` = Σ task CPU₂ / Σ task CPU₁, the second worker's extra CPU at the tasks alone
(the same tasks in both runs), its start-up and its exit left out.

``--warmup`` runs no pair: it times every pool task of the 1-worker run twice, each in a
process forked for it alone from a parent that did what the command does before its pool
starts (a worker's first task, ``fresh``) and one after the other in one process (``warm``),
alternately: what the tasks owe to a process that ran tasks before (its grown heap, its
lazily loaded modules, its caches: a 2-worker run pays it in each worker).

    python benchmarks/bench_timeline.py --category counting --pairs 5
    python benchmarks/bench_timeline.py --category counting --warmup --repeats 3
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench_parallel import LAUNCH, compile_project

#: Both scripts' name of a pool task (``label(fn, args)``, ``fn`` the run's own function):
#: a batch of rows by its first row's protocol and grid point, a figure, a calibration.
LABEL = """
import simulations.experiments.run as run_module
TASK_FUNCTIONS = (run_module._run_batch, run_module.draw_figure)
def label(fn, args):
    if fn is TASK_FUNCTIONS[0]:
        t0 = args[0][0]
        return f"rows {t0.method} {t0.sweep}={t0.value:g} x{len(args[0])}"
    if fn is TASK_FUNCTIONS[1]:
        return f"figure {args[2]}"
    return f"calibration eps={args[0].epsilon:.4f} tau={args[0].tau}"
"""

#: The command with its pool tasks and its parent's ``_drive`` timed; each timing is a JSON
#: line appended to ``$BENCH_TIMELINE`` (a task: pid, label, start, end, CPU; the parent:
#: "drive", its CPU while the pool ran). The task wrappers are this ``__main__``'s, which a
#: forked worker has too.
TIMELINE = (
    LAUNCH
    + LABEL
    + """
import json, os, sys, time
import simulations.experiments.run as r
LOG = os.environ["BENCH_TIMELINE"]
def note(record):
    with open(LOG, "a") as f:
        f.write(json.dumps(record) + "\\n")
def timed(fn):
    def task(*args):
        start, cpu = time.time(), time.process_time()
        try:
            return fn(*args)
        finally:
            note({"pid": os.getpid(), "label": label(fn, args), "start": start,
                  "end": time.time(), "cpu": time.process_time() - cpu})
    return task
RUN_BATCH, DRAW, CALIBRATE = r._run_batch, r.draw_figure, r._compute_calibration
def run_batch(*args): return TIMED_RUN_BATCH(*args)
def draw_figure(*args): return TIMED_DRAW(*args)
def compute_calibration(*args): return TIMED_CALIBRATE(*args)
TIMED_RUN_BATCH, TIMED_DRAW, TIMED_CALIBRATE = timed(RUN_BATCH), timed(DRAW), timed(CALIBRATE)
r._run_batch, r.draw_figure, r._compute_calibration = run_batch, draw_figure, compute_calibration
DRIVE = r._drive
def drive(executor, jobs, capacity):
    cpu = time.process_time()
    try:
        return DRIVE(executor, jobs, capacity)
    finally:
        note({"pid": os.getpid(), "label": "drive", "cpu": time.process_time() - cpu})
r._drive = drive
from simulations.cli import main
sys.argv[0] = "esa"
sys.exit(main())
"""
)

#: ``--warmup``: argv category mode (``fresh`` or ``warm``) out; prints JSON: per pool task
#: of the 1-worker run's queue (in its order), its label and CPU seconds. The command runs
#: as it does, but for its ``_drive``: the tasks go one at a time, in the queue's order, to
#: a process pool of this script's own, forked as the command's would be (its workers keep
#: their freed memory), of one worker that runs them all (``warm``: a 1-worker run) or of a
#: worker forked for each task (``fresh``: every task a worker's first). The parent runs
#: none of them, so none is cached in the processes forked from it.
WARMUP = (
    LAUNCH
    + LABEL
    + """
import json, multiprocessing, sys, time
from pathlib import Path
import crypto
import simulations.experiments.run as r
category, mode, out = sys.argv[1], sys.argv[2], Path(sys.argv[3])
timings = []
def timed_call(fn, args):
    start = time.process_time()
    result = fn(*args)
    return result, time.process_time() - start
def drive(executor, queue, capacity):
    per_task = 1 if mode == "fresh" else None
    context = multiprocessing.get_context("fork")
    with context.Pool(1, crypto.keep_freed_memory, maxtasksperchild=per_task) as pool:
        waiting, finished = sorted(queue, key=lambda j: j.rank), set()
        while waiting:
            job = next(j for j in waiting if all(n in finished for n in j.needs))
            waiting.remove(job)
            args = job.args()
            result, cpu = pool.apply(timed_call, (job.fn, args))
            job.done(result)
            finished.add(job)
            timings.append({"label": label(job.fn, args), "cpu": cpu})
r._drive = drive
r.run_experiments(category, out_dir=out, quick=True, workers=1)
print(json.dumps(timings))
"""
)


def run(category: str, workers: int, out: Path) -> dict[str, Any]:
    """One timed command: its wall time and its tasks' and parent's timings."""
    log = out.with_name(out.name + ".jsonl")
    cmd = [sys.executable, "-c", TIMELINE, "experiments", category, "--quick"]
    cmd += ["--out", str(out), "--workers", str(workers), "--allow-weaker"]
    env = {**os.environ, "BENCH_TIMELINE": str(log)}
    launched = time.time()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    exited = time.time()
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    records = [json.loads(line) for line in log.read_text().splitlines()]
    (drive_cpu,) = [r["cpu"] for r in records if r["label"] == "drive"]
    tasks = [r for r in records if r["label"] != "drive"]
    return split(tasks, launched, exited, workers) | {"drive_cpu": drive_cpu, "tasks": tasks}


def split(
    tasks: list[dict[str, Any]], launched: float, exited: float, workers: int
) -> dict[str, Any]:
    """A run's wall time as first + (busy + gaps + head + tail) / workers + exit."""
    first = min(t["start"] for t in tasks)
    last = max(t["end"] for t in tasks)
    by_worker: dict[int, list[dict[str, Any]]] = {}
    for t in sorted(tasks, key=lambda t: t["start"]):
        by_worker.setdefault(t["pid"], []).append(t)
    if len(by_worker) > workers:
        raise SystemExit(f"{len(by_worker)} processes ran tasks for {workers} workers")
    busy = sum(t["end"] - t["start"] for t in tasks)
    pairs = [pair for ts in by_worker.values() for pair in itertools.pairwise(ts)]
    gaps = sum(b["start"] - a["end"] for a, b in pairs)
    head = sum(ts[0]["start"] - first for ts in by_worker.values())
    tail = sum(last - ts[-1]["end"] for ts in by_worker.values())
    # a worker that got no task at all idled through the whole span
    head += (workers - len(by_worker)) * (last - first)
    return {
        "workers": workers,
        "wall": exited - launched,
        "first": first - launched,
        "busy": busy,
        "gaps": gaps,
        "head": head,
        "tail": tail,
        "exit": exited - last,
        "task_cpu": sum(t["cpu"] for t in tasks),
    }


def compare(one: dict[str, Any], two: dict[str, Any]) -> dict[str, Any]:
    """The 2-worker run's wall time against half the 1-worker run's, term by term."""
    cpu_1 = {t["label"]: t["cpu"] for t in one["tasks"]}
    cpu_2 = {t["label"]: t["cpu"] for t in two["tasks"]}
    if len(cpu_1) != len(one["tasks"]) or sorted(cpu_1) != sorted(cpu_2):
        raise SystemExit("the two runs ran different tasks (or two tasks share a label)")
    return {
        "speedup": one["wall"] / two["wall"],
        "excess": two["wall"] - one["wall"] / 2,
        "serial": two["first"] + two["exit"] - (one["first"] + one["exit"]) / 2,
        "work": (two["busy"] - one["busy"]) / 2,
        "idle": (two["gaps"] + two["head"] + two["tail"]) / 2 - one["gaps"] / 2,
        "task_cpu_ratio": two["task_cpu"] / one["task_cpu"],
    }


def warmup(category: str, repeats: int) -> dict[str, Any]:
    """``--warmup``: each pool task's CPU as a fresh worker's first task and in a warm one."""
    cpus: dict[str, dict[str, list[float]]] = {"fresh": {}, "warm": {}}
    with tempfile.TemporaryDirectory(prefix="bench_warmup_") as tmp:
        for i in range(repeats):
            for mode in ("warm", "fresh"):
                out = Path(tmp) / f"{mode}{i}"
                cmd = [sys.executable, "-c", WARMUP, category, mode, str(out)]
                proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
                if proc.returncode != 0:
                    raise SystemExit(f"warm-up {mode} failed: {proc.stderr[-2000:]}")
                for task in json.loads(proc.stdout.strip().splitlines()[-1]):
                    cpus[mode].setdefault(task["label"], []).append(task["cpu"])
    labels = list(cpus["warm"])
    median = {m: {k: statistics.median(cpus[m][k]) for k in labels} for m in cpus}
    return {
        "category": category,
        "repeats": repeats,
        "tasks": [
            {"label": k, "warm": median["warm"][k], "fresh": median["fresh"][k]} for k in labels
        ],
        "warm_total": sum(median["warm"].values()),
        "fresh_total": sum(median["fresh"].values()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--category", default="counting", choices=("counting", "histogram", "sum"))
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--warmup", action="store_true", help="instead: fresh against warm tasks")
    parser.add_argument("--repeats", type=int, default=3, help="of --warmup")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    compile_project()
    if args.warmup:
        result = warmup(args.category, args.repeats)
        if args.json:
            print(json.dumps(result, indent=2))
            return
        print(f"{args.category} --quick, pool tasks' CPU s, median of {args.repeats}")
        print(f"{'task':52} {'warm':>6} {'fresh':>6}")
        for t in sorted(result["tasks"], key=lambda t: -t["warm"]):
            if max(t["warm"], t["fresh"]) >= 0.05:
                print(f"{t['label']:52} {t['warm']:6.2f} {t['fresh']:6.2f}")
        print(
            f"{'all ' + str(len(result['tasks'])) + ' tasks':52} "
            f"{result['warm_total']:6.2f} {result['fresh_total']:6.2f}"
        )
        return
    load0 = os.getloadavg()
    runs = []
    with tempfile.TemporaryDirectory(prefix="bench_timeline_") as tmp:
        for i in range(args.pairs):
            for workers in (1, 2):
                runs.append(run(args.category, workers, Path(tmp) / f"pair{i}_w{workers}"))
    load1 = os.getloadavg()
    pairs = [compare(runs[i], runs[i + 1]) for i in range(0, len(runs), 2)]
    for r in runs:
        del r["tasks"]
    result = {
        "category": args.category,
        "load_average_before": load0,
        "load_average_after": load1,
        "runs": runs,
        "pairs": pairs,
        "median": {k: statistics.median(p[k] for p in pairs) for k in pairs[0]},
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"{args.category} --quick; load average {load0[0]:.2f} -> {load1[0]:.2f}; seconds")
    print(" w   wall  first   busy   gaps   head   tail   exit  drive cpu  task cpu")
    for r in runs:
        print(
            f"{r['workers']:2d} {r['wall']:6.2f} {r['first']:6.2f} {r['busy']:6.2f} "
            f"{r['gaps']:6.3f} {r['head']:6.3f} {r['tail']:6.3f} {r['exit']:6.2f} "
            f"{r['drive_cpu']:10.3f} {r['task_cpu']:9.2f}"
        )
    print("speedup  excess  serial    work    idle  task cpu 2/1")
    for p in [*pairs, result["median"]]:
        print(
            f"{p['speedup']:6.2f}x {p['excess']:7.2f} {p['serial']:7.2f} {p['work']:7.2f} "
            f"{p['idle']:7.2f} {p['task_cpu_ratio']:13.3f}"
            + ("  (median)" if p is result["median"] else "")
        )


if __name__ == "__main__":
    main()
