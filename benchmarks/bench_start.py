"""Start-up cost of the ``esa`` command: import + parser against the whole ``esa amplify``.

Every figure is the CPU time (user + system) of a fresh interpreter, read with
``resource.getrusage(RUSAGE_CHILDREN)`` around one ``subprocess.run``, so the other jobs on
a shared machine do not inflate it the way they inflate wall time. One repetition runs, one
after the other (interleaved, so a change of load hits all of them alike):

* ``bare``: ``python -c pass``, the interpreter alone;
* ``import``: what the ``esa`` executable does before its parser (``simulations._launch``:
  BLAS on one thread, then ``import simulations.cli``);
* ``start``: import + ``build_parser()`` (every command module registered) + the protocol
  plugins, i.e. all ``esa amplify`` does before its handler;
* ``help``: ``esa --help``;
* ``amplify``: ``esa amplify --epsilon-local 1 --n 1000000`` (the whole command);
* ``start-blas`` and ``amplify-blas``: the same with OpenBLAS on a thread per core
  (``OPENBLAS_NUM_THREADS`` = the machine's cores, which the launcher leaves alone), as
  before the launcher set one thread;
* ``start-gc`` and ``amplify-gc``: the same with the interpreter's last garbage collection
  at exit (the launcher's :func:`~simulations._launch.skip_exit_collection` left out), as
  before the launcher skipped it.

Every figure but the ``-gc`` ones exits as the executable does, so ``import`` and ``start``
end with the launcher's exit too.

The share is start / amplify per repetition; the median over repetitions is the figure.
``--importtime`` also prints the largest imports of the amplify path by cumulative time
(``python -X importtime``, one run, wall µs of a loaded machine: a ranking, not a figure).

    python benchmarks/bench_start.py                 # 5 repetitions
    python benchmarks/bench_start.py --repeats 7 --importtime --json
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import time
from typing import Any

from bench_parallel import compile_project

AMPLIFY = ["amplify", "--epsilon-local", "1", "--n", "1000000"]
#: What the ``esa`` console script runs (``[project.scripts]``).
MAIN = "import sys; from simulations._launch import main; sys.argv[0] = 'esa'; sys.exit(main())"
IMPORT = (
    "import simulations._launch as launch; launch.one_blas_thread(); "
    "launch.skip_exit_collection(); import simulations.cli"
)
START = IMPORT + " as c; c.build_parser(); c._load_protocols([])"
#: The same two with the interpreter's last collection at exit, as before the launcher.
MAIN_GC = MAIN.replace(
    "import sys;", "import sys, simulations._launch as l; l.skip_exit_collection = lambda: None;"
)
START_GC = START.replace(" launch.skip_exit_collection();", "")
#: OpenBLAS on a thread per core: the launcher keeps a variable the caller set.
BLAS_PER_CORE = {"OPENBLAS_NUM_THREADS": str(os.cpu_count() or 1)}

COMMANDS: dict[str, tuple[list[str], dict[str, str]]] = {
    "bare": (["-c", "pass"], {}),
    "import": (["-c", IMPORT], {}),
    "start": (["-c", START], {}),
    "help": (["-c", MAIN, "--help"], {}),
    "amplify": (["-c", MAIN, *AMPLIFY], {}),
    "start-blas": (["-c", START], BLAS_PER_CORE),
    "amplify-blas": (["-c", MAIN, *AMPLIFY], BLAS_PER_CORE),
    "start-gc": (["-c", START_GC], {}),
    "amplify-gc": (["-c", MAIN_GC, *AMPLIFY], {}),
}


def run_cpu(args: list[str], env: dict[str, str] | None = None) -> tuple[float, float]:
    """(CPU seconds of the child, wall seconds) of ``python *args`` with ``env`` added to
    this environment; output discarded."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"{args!r} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall


def import_times(top: int) -> list[tuple[str, int, int]]:
    """(module, self µs, cumulative µs) of the ``top`` largest cumulative imports of amplify."""
    env = dict(os.environ, PYTHONPROFILEIMPORTTIME="1")
    proc = subprocess.run(
        [sys.executable, "-c", MAIN, *AMPLIFY],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        check=True,
    )
    rows: list[tuple[str, int, int]] = []
    for line in proc.stderr.splitlines():
        m = re.match(r"import time:\s+(\d+)\s+\|\s+(\d+)\s+\|(\s*)(\S+)", line)
        if m:
            rows.append((m.group(4), int(m.group(1)), int(m.group(2))))
    rows.sort(key=lambda r: -r[2])
    return rows[:top]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--importtime", action="store_true")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    load0 = os.getloadavg()
    cpu: dict[str, list[float]] = {k: [] for k in COMMANDS}
    wall: dict[str, list[float]] = {k: [] for k in COMMANDS}
    compile_project()  # the byte code a first import writes (not here: see bench_parallel)
    run_cpu(COMMANDS["import"][0])  # warm the page cache, not counted
    for _ in range(args.repeats):
        for name, (cmd, env) in COMMANDS.items():
            c, w = run_cpu(cmd, env)
            cpu[name].append(c)
            wall[name].append(w)
    load1 = os.getloadavg()
    share = [s / a for s, a in zip(cpu["start"], cpu["amplify"], strict=True)]
    share_import = [s / a for s, a in zip(cpu["import"], cpu["amplify"], strict=True)]
    share_blas = [s / a for s, a in zip(cpu["start-blas"], cpu["amplify-blas"], strict=True)]
    blas_saved = [b - a for a, b in zip(cpu["amplify"], cpu["amplify-blas"], strict=True)]
    share_gc = [s / a for s, a in zip(cpu["start-gc"], cpu["amplify-gc"], strict=True)]
    gc_saved = [b - a for a, b in zip(cpu["amplify"], cpu["amplify-gc"], strict=True)]
    result: dict[str, Any] = {
        "load_average_before": load0,
        "load_average_after": load1,
        "cpu_seconds": cpu,
        "wall_seconds": wall,
        "median_cpu_seconds": {k: statistics.median(v) for k, v in cpu.items()},
        "start_share_of_amplify": share,
        "median_start_share": statistics.median(share),
        "median_import_share": statistics.median(share_import),
        "median_start_share_blas_per_core": statistics.median(share_blas),
        "median_amplify_cpu_saved_by_one_blas_thread": statistics.median(blas_saved),
        "median_start_share_exit_collection": statistics.median(share_gc),
        "median_amplify_cpu_saved_by_skipping_exit_collection": statistics.median(gc_saved),
    }
    if args.importtime:
        result["largest_imports"] = [
            {"module": m, "self_us": s, "cumulative_us": c} for m, s, c in import_times(args.top)
        ]
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"load average before {load0[0]:.2f}, after {load1[0]:.2f}")
    print(f"{'rep':>4} " + " ".join(f"{k[:9]:>9}" for k in COMMANDS) + "   start/amplify")
    for i in range(args.repeats):
        cells = " ".join(f"{cpu[k][i]:9.3f}" for k in COMMANDS)
        print(f"{i + 1:>4} {cells}   {share[i]:.1%}")
    med = " ".join(f"{result['median_cpu_seconds'][k]:9.3f}" for k in COMMANDS)
    print(f"{'med':>4} {med}   {result['median_start_share']:.1%}")
    print(f"import only / amplify, median: {result['median_import_share']:.1%}")
    print(
        "BLAS on a thread per core: start/amplify "
        f"{result['median_start_share_blas_per_core']:.1%}, amplify CPU "
        f"+{result['median_amplify_cpu_saved_by_one_blas_thread']:.3f} s"
    )
    print(
        "with the exit collection: start/amplify "
        f"{result['median_start_share_exit_collection']:.1%}, amplify CPU "
        f"+{result['median_amplify_cpu_saved_by_skipping_exit_collection']:.3f} s"
    )
    if args.importtime:
        print("largest imports on the amplify path (cumulative µs, wall, one run):")
        for row in result["largest_imports"]:
            print(f"  {row['cumulative_us']:>9} {row['self_us']:>8}  {row['module']}")


if __name__ == "__main__":
    main()
