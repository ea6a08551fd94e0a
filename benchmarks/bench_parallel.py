"""An experiment grid on 1 and 2 local workers: wall, CPU, speedup, and identical CSVs.

Runs ``esa experiments <category> --quick --workers 1`` and ``--workers 2`` alternately
(1, 2, 1, 2, ...), each a fresh process writing into its own directory. Per run: wall time
and CPU time (user + system of the command *and* its pool workers, read with
``resource.getrusage(RUSAGE_CHILDREN)`` around the ``subprocess.run``; a worker's time is
added to its parent's when the pool joins it). Per pair: the wall speedup t1 / t2, and the
figures a loaded machine does not distort as much:

* ``cpu_overhead`` = CPU(2 workers) / CPU(1 worker): the extra work of the second process;
* ``cpu_bound_speedup`` = 2 · CPU(1) / CPU(2): the speedup if both cores were ours;
* ``task_bound``: Σ task time / makespan of the 1-worker run's task times (the CSV's
  ``total_seconds`` × ``repeats``) handed to 2 workers in the order the run queues them
  (the baselines, then the most messages first, the tasks that build the same
  protocol as one), as the pool does: the speedup the grid's longest rows allow. The
  CSV does not time a protocol's build nor the figures: ``--profile``'s task bound
  counts them (calibrations, rows and figures, in the run's own queue order);
* ``parent_cpu_1``: the CPU seconds of the command's own process in the 1-worker run
  (user + system, ``RUSAGE_SELF`` written at its exit: interpreter start, imports, setup,
  whatever it does besides waiting for its pool): the serial part;
* ``serial_fraction`` s = ``parent_cpu_1`` / CPU(1) and ``amdahl`` = 1 / (s + (1 − s)/2):
  the wall speedup two free cores allow if the pool's part divided perfectly;
* ``predicted`` = CPU(1) / (P₂ + (CPU(2) − P₂)/2), P₂ the 2-worker run's own CPU: the same
  with what the second worker costs on top (each worker's imports, per-process caches)
  counted, the load balance not;
* ``cores``: the cores this session got just after the run (:func:`cores_available`),
  the ceiling of any wall speedup on a shared machine.

``--modes grid`` runs the grid alone (``run_experiments`` with the plotting stubbed out);
``grid-cold`` the same without the parent's import of scipy before its workers fork
(``_preload``), the previous behaviour; ``grid-malloc`` the same with the workers' allocator
left at glibc's defaults (``crypto.keep_freed_memory`` disabled: freed arrays go back to
the OS and are page-faulted in again), the previous behaviour too.
``full-cold`` is the command without the parent's import of matplotlib before its
workers fork (``_preload_plotting``): each worker that draws a figure imports it itself.
``full-stats`` is the command with the parent also importing scipy.stats and scipy.signal
before its workers fork (~0.45 s of CPU), as it did when the accountants' binomial laws and
convolutions came from them (before ``protocols._distributions``, which computes the same
values with scipy's kernels and neither package): the previous serial part.
Every command starts as the ``esa`` executable does (``simulations._launch``: BLAS on one
thread per process unless the environment says otherwise, no collection at exit).
``full-blascores`` is the command
with OpenBLAS on a thread per core instead (``OPENBLAS_NUM_THREADS`` = the cores, which the
launcher keeps), as before the launcher: each process's OpenBLAS threads spin when it loads.
``full-nofreeze`` is the command without the parent's ``gc.freeze()`` before its workers
fork (``esa.resolve_executor``): each worker's full collections traverse, and copy the
pages of, every object it inherited, the previous behaviour.
``full-whole`` is the command with ``rsum_pure``'s calibrations left in the batch that
builds the protocol (``_SPLIT_CALIBRATIONS`` empty), as before they ran as tasks of their own.
``full-exitgc`` is the command with the interpreter's last garbage collection at exit
(``simulations._launch.skip_exit_collection`` left out): 0.1–0.2 s of the parent's CPU after
its pool is done, with numpy, scipy and matplotlib loaded, as before the launcher skipped it.
``--modes audit`` runs a measured collusion audit instead (``esa audit --measure --json
--workers N``, :data:`AUDIT`: its attacks' trials are the tasks); its task bound is not
computed (n/a). ``audit-malloc`` is the audit with glibc's default allocator.

Per run the script also splits the CPU time into user and system time and counts the
minor page faults of the command and its workers (``ru_minflt``): system time and faults
are what a worker's allocator costs; the second worker's extra user time (``user2/user1``)
is what it costs to share the machine's caches and memory.

A run that is 1.8× faster on 2 workers needs s ≤ 1/9 even with a perfect balance:
the serial part (≈ 1.2 s of start-up and imports for a grid, its ≈ 1.3 s plus the
protocol's calibration for an audit) must be at most an eighth of the pool's work.

Every run's CSV must equal the first run's but for the timing columns
(``analyzer_seconds``, ``total_seconds``, ``analyzer_cpu_seconds``, ``total_cpu_seconds``),
and every audit's JSON the first audit's but for the record of the invocation (``command``,
``parameters``): asserted.

    python benchmarks/bench_parallel.py --category sum --modes full,audit --pairs 3
    python benchmarks/bench_parallel.py --category counting               # 2 pairs
    python benchmarks/bench_parallel.py --category counting --protocols cnt_rr,cnt_bn --pairs 3
    python benchmarks/bench_parallel.py --modes full,audit --pairs 2
    python benchmarks/bench_parallel.py --category sum --modes grid,grid-malloc --pairs 3
    python benchmarks/bench_parallel.py --contention 3
    python benchmarks/bench_parallel.py --category sum --profile --modes full,full-whole

``--profile`` runs no pair: it says where the 1-worker command's time goes, in CPU
seconds of one process (:data:`PROFILE`: the command with every pool task run in this
process, one after the other, in the order the pool would take them): the interpreter's
start and imports, the imports before the pool forks, each pool task (a calibration, a
batch of rows, a figure), the CSV and summary. From those task times it also computes
the ``task_bound`` of the whole pool (calibrations and figures included) and the wall
speedup they allow on 2 workers with the serial part (``predicted_wall``), by running the
run's own queue policy on a simulated clock (:func:`schedule`).

Before any run the script compiles the project's modules to byte code
(:func:`compile_project`, ``python -m compileall``), as Python does at a module's first
import unless ``PYTHONDONTWRITEBYTECODE`` is set: it is on this machine, and each command
would otherwise compile the project's ~90 modules again (0.2 s of serial CPU, a third of
its start-up), which no installed copy does.

``--contention REPS`` runs no grid: it times small kernels (:data:`KERNELS`: X25519, numpy
on arrays in L2 and in DRAM, the FFTs of a calibration with and without the pool workers'
allocator setting) alone and two copies at once, alternately, to tell what the second
busy core costs each kind of work.
"""

from __future__ import annotations

import argparse
import csv
import heapq
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from types import SimpleNamespace
from typing import Any

#: Written first into every command: at exit, a line "<pid> <CPU seconds>" of the process
#: (user + system, ``RUSAGE_SELF``: its start-up included, its pool workers' not) appended
#: to the file named by ``$BENCH_PARENT_CPU`` (:func:`run` reads the command's own line).
PARENT_CPU = (
    "import atexit, os, resource; "
    "atexit.register(lambda: open(os.environ['BENCH_PARENT_CPU'], 'a').write("
    "f'{os.getpid()} {sum(resource.getrusage(resource.RUSAGE_SELF)[:2])!r}\\n')); "
)
#: What the ``esa`` console script runs: the launcher (BLAS threads) then the command line.
LAUNCH = (
    "import simulations._launch as launch; launch.one_blas_thread(); "
    "launch.skip_exit_collection(); "
)
MAIN = (
    PARENT_CPU
    + LAUNCH
    + ("import sys; from simulations.cli import main; sys.argv[0] = 'esa'; sys.exit(main())")
)
# The grid alone: run_experiments with the (serial) plotting replaced by a no-op, through
# the hook the module documents for tests; argv: category out workers protocols.
GRID = (
    PARENT_CPU
    + LAUNCH
    + (
        "import sys; from pathlib import Path; import simulations.experiments.run as r; "
        "r.plot_category = lambda rows, plan, out: []; "
        "r.run_experiments(sys.argv[1], out_dir=Path(sys.argv[2]), quick=True, "
        "workers=int(sys.argv[3]), only=sys.argv[4].split(',') if sys.argv[4] else None)"
    )
)
#: The grid alone as before the parent imported scipy for its forked workers (``_preload``
#: disabled): each worker imports it itself.
GRID_COLD = GRID.replace("r.plot_category =", "r._preload = lambda: None; r.plot_category =")
#: The command with its workers' malloc at glibc's defaults (their initializer a no-op).
MAIN_MALLOC = MAIN.replace(
    "import sys;", "import sys, crypto; crypto.keep_freed_memory = lambda: None;"
)
#: The grid alone with the workers' malloc at glibc's defaults.
GRID_MALLOC = GRID.replace(
    "r.plot_category =", "import crypto; crypto.keep_freed_memory = lambda: None; r.plot_category ="
)
#: The command without matplotlib imported before the pool forks.
MAIN_COLD = MAIN.replace(
    "import sys;",
    "import sys, simulations.experiments.run as r; r._preload_plotting = lambda: None;",
)
#: The command with scipy.stats and scipy.signal imported too before the pool forks, as when
#: the accountants' binomial laws came from them (before ``protocols._distributions``).
MAIN_STATS = MAIN.replace(
    "import sys;",
    "import sys, importlib, simulations.experiments.run as r; p = r._preload; "
    "r._preload = lambda: [p(), *(importlib.import_module(m) "
    "for m in ('scipy.stats', 'scipy.signal'))];",
)
#: The environment of ``full-blascores``: OpenBLAS on a thread per core, kept by the launcher.
BLAS_PER_CORE = {"OPENBLAS_NUM_THREADS": str(os.cpu_count() or 1)}
#: The command with the parent's heap left to the workers' garbage collectors (``gc.freeze``
#: disabled before the pool forks).
MAIN_NOFREEZE = MAIN.replace("import sys;", "import sys, gc; gc.freeze = lambda: None;")
#: The command with rsum_pure's calibrations computed in the batch that builds it.
MAIN_WHOLE = MAIN.replace(
    "import sys;",
    "import sys, simulations.experiments.run as r; r._SPLIT_CALIBRATIONS = frozenset();",
)
#: The command with the interpreter's last garbage collection at exit, as before the
#: launcher skipped it.
MAIN_EXITGC = MAIN.replace("launch.skip_exit_collection(); ", "")
#: ``--profile``: ``esa experiments <category> --quick --workers 1`` in one process, its
#: pool tasks run here in the pool's order (``_drive`` replaced), each timed in CPU
#: seconds; prints JSON: the serial segments, then every task with what it needs and its
#: rank. argv: category out protocols mode (``full``, or ``full-whole``).
PROFILE = """
import json, resource, sys, time
def cpu():
    return sum(resource.getrusage(resource.RUSAGE_SELF)[:2])
segments = {"interpreter": cpu()}
t = cpu()
import simulations._launch
simulations._launch.one_blas_thread()
import simulations.cli
simulations.cli.build_parser()
segments["start-up imports"] = cpu() - t
from pathlib import Path
import simulations.experiments.run as r
jobs_out = []
def timed(name, fn):
    def call(*args, **kwargs):
        t = cpu()
        try:
            return fn(*args, **kwargs)
        finally:
            segments[name] = segments.get(name, 0.0) + cpu() - t
    return call
r._preload = timed("scipy imports (before fork)", r._preload)
r._preload_plotting = timed("matplotlib import (before fork)", r._preload_plotting)
r._messages = timed("protocol builds (queue order)", r._messages)
r.write_csv = timed("csv", r.write_csv)
r.write_summary = timed("summary", r.write_summary)
def label(job, args):
    if job.fn is r._run_batch:
        t0 = args[0][0]
        return f"rows {t0.method} n={t0.point['n']:g} eps={t0.point['epsilon']:g} x{len(args[0])}"
    if job.fn is r.draw_figure:
        return f"figure {args[2]}"
    return f"calibration eps={args[0].epsilon:.4f} tau={args[0].tau}"
def drive(executor, jobs, capacity):
    index = {id(j): k for k, j in enumerate(jobs)}
    waiting, finished = sorted(jobs, key=lambda j: j.rank), set()
    while waiting:
        job = next(j for j in waiting if all(n in finished for n in j.needs))
        waiting.remove(job)
        args = job.args()
        t = cpu()
        result = job.fn(*args)
        spent = cpu() - t
        job.done(result)
        finished.add(job)
        jobs_out.append({"id": index[id(job)], "label": label(job, args), "cpu": spent,
                         "needs": [index[id(n)] for n in job.needs], "rank": list(job.rank)})
r._drive = drive
if sys.argv[4] == "full-whole":
    r._SPLIT_CALIBRATIONS = frozenset()
r.run_experiments(sys.argv[1], out_dir=Path(sys.argv[2]), quick=True, workers=1,
                  only=sys.argv[3].split(",") if sys.argv[3] else None)
segments["total"] = cpu()
print(json.dumps({"segments": segments, "jobs": jobs_out}))
"""
WALL_CLOCK_COLUMNS = (  # the timing columns: wall and CPU seconds
    "analyzer_seconds",
    "total_seconds",
    "analyzer_cpu_seconds",
    "total_cpu_seconds",
)
#: The measured audit of ``--modes audit``: 6 scenarios × 2 hypotheses × 1000 trials (the
#: command's default) of a 200-user, 2-shuffler pipeline (240 tasks of 50 trials).
AUDIT = [
    "audit", "--protocol", "cnt_rr", "--n", "200", "--epsilon", "1", "--delta", "1e-6",
    "--shufflers", "2", "--fake-reports", "4", "--colluding-users", "10",
    "--colluding-shufflers", "1", "--measure", "--seed", "1", "--json",
]  # fmt: skip


def run(mode: str, category: str, workers: int, out: Path, protocols: str | None) -> dict[str, Any]:
    """One run (``full``: the ``esa experiments`` command; ``grid``: its grid without the
    plots): wall and CPU seconds of the process and its workers."""
    stdout: Any = subprocess.DEVNULL
    if mode in ("audit", "audit-malloc"):
        out.mkdir(parents=True)
        code = MAIN if mode == "audit" else MAIN_MALLOC
        cmd = [sys.executable, "-c", code, *AUDIT, "--workers", str(workers)]
        stdout = (out / "audit.json").open("w")
    elif mode in ("grid", "grid-cold", "grid-malloc"):
        code = {"grid": GRID, "grid-cold": GRID_COLD, "grid-malloc": GRID_MALLOC}[mode]
        cmd = [sys.executable, "-c", code, category, str(out), str(workers), protocols or ""]
    else:
        code = {
            "full": MAIN,
            "full-cold": MAIN_COLD,
            "full-stats": MAIN_STATS,
            "full-blascores": MAIN,
            "full-whole": MAIN_WHOLE,
            "full-nofreeze": MAIN_NOFREEZE,
            "full-exitgc": MAIN_EXITGC,
        }[mode]
        cmd = [sys.executable, "-c", code, "experiments", category, "--quick"]
        cmd += ["--out", str(out), "--workers", str(workers), "--allow-weaker"]
        if protocols:
            cmd += ["--protocols", protocols]
    load = os.getloadavg()[0]
    parent_file = out.with_name(out.name + ".parent_cpu")
    env = {**os.environ, "BENCH_PARENT_CPU": str(parent_file)}
    if mode == "full-blascores":
        env.update(BLAS_PER_CORE)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=stdout, stderr=subprocess.PIPE, text=True, env=env)
    _, stderr = proc.communicate()
    wall = time.perf_counter() - t
    if stdout is not subprocess.DEVNULL:
        stdout.close()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}): {stderr[-2000:]}")
    user, system = after.ru_utime - before.ru_utime, after.ru_stime - before.ru_stime
    cpu = user + system
    lines = [line.split() for line in parent_file.read_text().splitlines()]
    (parent,) = [float(cpu) for pid, cpu in lines if int(pid) == proc.pid]
    return {
        "mode": mode,
        "workers": workers,
        "wall": wall,
        "cpu": cpu,
        "user": user,
        "system": system,
        "minor_faults": after.ru_minflt - before.ru_minflt,
        "parent_cpu": parent,
        "load_at_start": load,
    }


_FFT = (  # the median transform of rsum_pure's calibration: 2 rows, length 17280
    "import numpy as np\nfrom scipy import fft\n"
    "q = np.random.default_rng(0).random((2, 8641))\n"
    "for _ in range(2_500): f = fft.rfft(q, 17280, axis=1); fft.irfft(f * f, 17280, axis=1)"
)
#: ``--contention``: kernels of ≈ 1–3 s of CPU, from what barely touches memory to what
#: streams it: (whether its allocator is a pool worker's, ``crypto.keep_freed_memory``;
#: its code). Each prints its own user and system seconds.
KERNELS = {
    "x25519 (registers)": (
        True,
        "from nacl import bindings\n"
        "sk = bytes(range(32)); pk = bindings.crypto_scalarmult_base(sk)\n"
        "for _ in range(40_000): bindings.crypto_scalarmult(sk, pk)",
    ),
    "numpy 128 KiB (in L2)": (
        True,
        "import numpy as np\n"
        "a = np.ones(2**14); b = np.empty_like(a)\n"
        "for _ in range(61_440): np.multiply(a, 2.0, out=b)",
    ),
    "FFT 2 x 17280 (calibration)": (True, _FFT),
    "numpy 128 MiB (in DRAM)": (
        True,
        "import numpy as np\n"
        "a = np.ones(2**24); b = np.empty_like(a)\n"
        "for _ in range(60): np.multiply(a, 2.0, out=b)",
    ),
    "the FFT, glibc's default malloc": (False, _FFT),
}


def contention(reps: int) -> None:
    """Each kernel alone, then two copies at once (``reps`` times, interleaved): the median
    user and system seconds of one copy, and what the second copy adds to them."""
    timed = (
        "import resource, sys, crypto\n"
        "if sys.argv[2] == 'pool': crypto.keep_freed_memory()\n"
        "u = resource.getrusage(resource.RUSAGE_SELF)\nexec(sys.argv[1])\n"
        "v = resource.getrusage(resource.RUSAGE_SELF)\n"
        "print(v.ru_utime - u.ru_utime, v.ru_stime - u.ru_stime)"
    )
    print(f"load average before {os.getloadavg()[0]:.2f}; median seconds of one copy")
    print(f"{'kernel':32} {'user 1':>7} {'user 2':>7} {'ratio':>6} {'sys 1':>6} {'sys 2':>6}")
    for name, (pool, code) in KERNELS.items():
        cmd = [sys.executable, "-c", timed, code, "pool" if pool else "default"]
        times: dict[int, list[tuple[float, float]]] = {1: [], 2: []}
        for _ in range(reps):
            for copies in (1, 2):
                procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE) for _ in range(copies)]
                for p in procs:
                    user, system = map(float, p.communicate()[0].split())
                    times[copies].append((user, system))
        u1, u2 = (statistics.median(u for u, _ in times[c]) for c in (1, 2))
        s1, s2 = (statistics.median(s for _, s in times[c]) for c in (1, 2))
        print(f"{name:32} {u1:7.2f} {u2:7.2f} {u2 / u1:6.3f} {s1:6.2f} {s2:6.2f}", flush=True)
    print(f"load average after {os.getloadavg()[0]:.2f}")


def schedule(jobs: list[dict[str, Any]], workers: int = 2) -> float:
    """The makespan of ``jobs`` (``--profile``'s: CPU seconds, the ids of the jobs each
    needs, its rank) on ``workers``, as the run's ``_drive`` hands them out: whenever a
    worker is free, the ready job of lowest rank, or the worker waits for the next job to
    end. A simulated clock: no transfer or start-up costs."""
    by_id = {j["id"]: j for j in jobs}
    waiting = sorted(by_id, key=lambda i: by_id[i]["rank"])
    ends: dict[int, float] = {}
    free = [0.0] * workers
    while waiting:
        now = min(free)
        w = free.index(now)
        ready = [
            i for i in waiting if all(ends.get(n, float("inf")) <= now for n in by_id[i]["needs"])
        ]
        if not ready:
            free[w] = min(e for e in ends.values() if e > now)
            continue
        i = ready[0]
        waiting.remove(i)
        ends[i] = free[w] = now + by_id[i]["cpu"]
    return max(ends.values(), default=0.0)


def profile(category: str, protocols: str | None, mode: str = "full") -> dict[str, Any]:
    """``--profile``: the 1-worker command's CPU seconds by segment and by pool task, the
    pool's task bound on 2 workers and the wall speedup it allows with the serial part
    (``mode`` ``full-whole``: with rsum_pure's calibrations in the batch that builds it)."""
    load = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="bench_profile_") as tmp:
        cmd = [sys.executable, "-c", PROFILE, category, tmp, protocols or "", mode]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"profile failed ({proc.returncode}): {proc.stderr[-2000:]}")
    out: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    jobs = out["jobs"]
    pool = sum(j["cpu"] for j in jobs)
    serial = out["segments"]["total"] - pool
    makespan = schedule(jobs)
    kinds: dict[str, float] = {}
    for j in jobs:
        kind = j["label"].split()[0]
        kinds[kind] = kinds.get(kind, 0.0) + j["cpu"]
    out.update(
        mode=mode,
        load_average=(load, os.getloadavg()),
        pool_cpu=pool,
        pool_cpu_by_kind=kinds,
        serial_cpu=serial,
        makespan_2=makespan,
        task_bound=pool / makespan,
        predicted_wall=(serial + pool) / (serial + makespan),
    )
    return out


def amdahl(serial_fraction: float, workers: int = 2) -> float:
    """Amdahl's speedup on ``workers`` of a job whose ``serial_fraction`` cannot be shared."""
    return 1.0 / (serial_fraction + (1.0 - serial_fraction) / workers)


def _burn(seconds: float) -> float:
    t = time.process_time()
    while time.process_time() - t < seconds:
        pass
    return seconds


def cores_available(seconds: float = 2.0) -> float:
    """Cores this session gets now: 2 CPU burners' total CPU over their wall, side by side.

    Linux's autogroup scheduler shares the CPUs fairly between *sessions*, not processes:
    while another session keeps one core busy, two workers of ours get one core between
    them, and no wall speedup is possible; this figure is that ceiling.
    """
    with ProcessPoolExecutor(2) as pool:
        list(pool.map(_burn, [0.1, 0.1]))  # the pool started before timing
        t = time.perf_counter()
        list(pool.map(_burn, [seconds, seconds]))
        return 2 * seconds / (time.perf_counter() - t)


def rows_without_wall_clock(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return [
            {k: v for k, v in row.items() if k not in WALL_CLOCK_COLUMNS}
            for row in csv.DictReader(f)
        ]


def task_bound(path: Path, workers: int = 2) -> float:
    """Σ task seconds / makespan of the run's pool tasks handed to ``workers`` in the order
    the run queues them (``simulations.experiments.run._batches``: the baselines, then the
    most messages first, the tasks that build the same protocol as one), the
    earliest free worker taking
    the next. A task's seconds are its row's ``total_seconds`` × ``repeats`` (its pipeline
    runs; the protocol's build, calibration included, is not timed in the CSV)."""
    from simulations.experiments import make_plan
    from simulations.experiments.run import _batches

    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    plan = SimpleNamespace(
        repeats=max(int(r["repeats"] or 0) for r in rows),
        max_messages=make_plan(rows[0]["category"], quick=True).max_messages,
    )
    tasks = [
        SimpleNamespace(
            family=r["family"],
            method=r["method"],
            point={k: float(r[k]) for k in ("n", "epsilon", "delta", "domain")},
            plan=plan,
        )
        for r in rows
    ]
    times = [float(r["total_seconds"] or 0.0) * int(r["repeats"] or 0) for r in rows]
    free = [0.0] * workers  # when each worker is next free; the earliest takes the next task
    for batch in _batches(tasks):  # type: ignore[arg-type]
        heapq.heappush(free, heapq.heappop(free) + sum(times[i] for i in batch))
    return sum(times) / max(free) if max(free) > 0 else 1.0


#: The project's top-level packages, whose byte code :func:`compile_project` writes.
PACKAGES = ("crypto", "protocols", "esa", "simulations")


def compile_project() -> None:
    """Write the byte code of the project's modules (``__pycache__``, which git ignores), as
    a first import does where ``PYTHONDONTWRITEBYTECODE`` is not set."""
    root = Path(__file__).resolve().parent.parent
    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", *(str(root / p) for p in PACKAGES)],
        check=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--category", default="counting", choices=("counting", "histogram", "sum"))
    parser.add_argument("--protocols", default=None, help="comma-separated subset")
    parser.add_argument("--pairs", type=int, default=2)
    parser.add_argument(
        "--modes",
        default="full,grid",
        help="any of full, full-cold, full-stats, full-blascores, full-nofreeze, full-whole, "
        "full-exitgc, grid, grid-cold, grid-malloc, audit, audit-malloc",
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="instead: the 1-worker command's CPU by segment and task, and its task bound "
        "(of --modes full and/or full-whole)",
    )
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--contention",
        type=int,
        metavar="REPS",
        help="instead: CPU of kernels run alone and two at once, REPS times each",
    )
    args = parser.parse_args()
    compile_project()
    if args.contention:
        contention(args.contention)
        return
    if args.profile:
        modes = [m for m in args.modes.split(",") if m in ("full", "full-whole")] or ["full"]
        results = [profile(args.category, args.protocols, mode) for mode in modes]
        if args.json:
            print(json.dumps(results, indent=2))
            return
        for result in results:
            before, after = result["load_average"]
            print(
                f"{args.category} --quick ({result['mode']}), 1 worker, CPU s; "
                f"load {before[0]:.2f} -> {after[0]:.2f}"
            )
            for name, seconds in result["segments"].items():
                print(f"  {name:34} {seconds:7.2f}")
            for kind, seconds in result["pool_cpu_by_kind"].items():
                print(f"  pool: {kind:28} {seconds:7.2f}")
            for j in sorted(result["jobs"], key=lambda j: -j["cpu"]):
                print(f"    {j['label']:52} {j['cpu']:6.2f}")
            print(
                f"serial {result['serial_cpu']:.2f} s, pool {result['pool_cpu']:.2f} s, "
                f"2-worker makespan {result['makespan_2']:.2f} s: task bound "
                f"{result['task_bound']:.2f}x, predicted wall speedup "
                f"{result['predicted_wall']:.2f}x"
            )
        return
    modes = args.modes.split(",")

    load0 = os.getloadavg()
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench_parallel_") as tmp:
        reference: list[dict[str, str]] | None = None
        audit_reference: dict[str, Any] | None = None
        for i in range(args.pairs):
            for mode, workers in [(m, w) for m in modes for w in (1, 2)]:
                out = Path(tmp) / f"pair{i}_{mode}_w{workers}"
                r = run(mode, args.category, workers, out, args.protocols)
                if mode.startswith("audit"):
                    document = json.loads((out / "audit.json").read_text())
                    del document["command"], document["parameters"]  # the invocation
                    audit_reference = audit_reference or document
                    assert document == audit_reference, f"pair {i}, {workers} workers: JSON differs"
                    r["task_bound"] = float("nan")
                else:
                    csv_path = out / f"{args.category}.csv"
                    rows = rows_without_wall_clock(csv_path)
                    if reference is None:
                        reference = rows
                    assert rows == reference, f"pair {i}, {mode}, {workers} workers: CSV differs"
                    r["task_bound"] = task_bound(csv_path)
                r["cores_available"] = cores_available()
                runs.append(r)
                if not args.json:
                    print(
                        f"pair {i + 1} {mode:>4} workers={workers}: wall {r['wall']:7.2f} s  "
                        f"cpu {r['cpu']:7.2f} s  load {r['load_at_start']:.2f}  "
                        f"cores available after {r['cores_available']:.2f}",
                        flush=True,
                    )
        n_rows = len(reference) if reference is not None else 0
    load1 = os.getloadavg()
    pairs = []
    for i in range(0, len(runs), 2):
        one, two = runs[i], runs[i + 1]
        pairs.append(
            {
                "mode": one["mode"],
                "wall_1": one["wall"],
                "wall_2": two["wall"],
                "cpu_1": one["cpu"],
                "cpu_2": two["cpu"],
                "speedup": one["wall"] / two["wall"],
                "cpu_overhead": two["cpu"] / one["cpu"],
                "user_1": one["user"],
                "user_2": two["user"],
                "system_1": one["system"],
                "system_2": two["system"],
                "faults_1": one["minor_faults"],
                "faults_2": two["minor_faults"],
                "user_overhead": two["user"] / one["user"],
                "cpu_bound_speedup": 2.0 * one["cpu"] / two["cpu"],
                "task_bound": one["task_bound"],
                "parent_cpu_1": one["parent_cpu"],
                "parent_cpu_2": two["parent_cpu"],
                "serial_fraction": one["parent_cpu"] / one["cpu"],
                "amdahl": amdahl(one["parent_cpu"] / one["cpu"]),
                "predicted": one["cpu"]
                / (two["parent_cpu"] + (two["cpu"] - two["parent_cpu"]) / 2.0),
                "cores_available": statistics.mean(
                    (one["cores_available"], two["cores_available"])
                ),
            }
        )
    keys = (
        "speedup",
        "cpu_overhead",
        "user_overhead",
        "system_1",
        "system_2",
        "faults_1",
        "faults_2",
        "cpu_bound_speedup",
        "task_bound",
        "parent_cpu_1",
        "serial_fraction",
        "amdahl",
        "predicted",
        "cores_available",
    )
    result = {
        "category": args.category,
        "protocols": args.protocols,
        "rows": n_rows,
        "csv_identical_but_wall_clock": True,
        "audit_json_identical": audit_reference is not None,
        "load_average_before": load0,
        "load_average_after": load1,
        "pairs": pairs,
        "median": {
            mode: {k: statistics.median(p[k] for p in pairs if p["mode"] == mode) for k in keys}
            for mode in modes
        },
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"{args.category} --quick, {n_rows} rows; CSVs identical but {WALL_CLOCK_COLUMNS}")
    print(f"load average before {load0[0]:.2f}, after {load1[0]:.2f}")
    print(
        "mode  wall1   wall2  speedup   cpu1    cpu2  cpu2/cpu1  2*cpu1/cpu2  task bound  "
        "serial1  s      Amdahl  predicted  cores"
    )
    for p in pairs:
        print(
            f"{p['mode']:>4} {p['wall_1']:6.1f}  {p['wall_2']:6.1f}  {p['speedup']:6.2f}x "
            f"{p['cpu_1']:6.1f}  {p['cpu_2']:6.1f}  {p['cpu_overhead']:8.2f}  "
            f"{p['cpu_bound_speedup']:10.2f}x  {p['task_bound']:9.2f}x  "
            f"{p['parent_cpu_1']:6.2f}  {p['serial_fraction']:5.3f}  {p['amdahl']:5.2f}x  "
            f"{p['predicted']:8.2f}x  "
            f"{p['cores_available']:5.2f}"
        )
    print("mode  user1   user2  user2/user1  sys1   sys2   faults1   faults2")
    for p in pairs:
        print(
            f"{p['mode']:>4} {p['user_1']:6.1f}  {p['user_2']:6.1f}  {p['user_overhead']:10.3f}  "
            f"{p['system_1']:5.2f}  {p['system_2']:5.2f}  {p['faults_1']:8d}  {p['faults_2']:8d}"
        )
    for mode in modes:
        m = result["median"][mode]
        print(
            f"median {mode:>4}        {m['speedup']:6.2f}x                 "
            f"{m['cpu_overhead']:8.2f}  {m['cpu_bound_speedup']:10.2f}x  {m['task_bound']:9.2f}x  "
            f"{m['parent_cpu_1']:6.2f}  {m['serial_fraction']:5.3f}  {m['amdahl']:5.2f}x  "
            f"{m['predicted']:8.2f}x  "
            f"{m['cores_available']:5.2f}"
        )


if __name__ == "__main__":
    main()
