"""Every registered protocol through ``esa simulate --crypto ideal`` at n = 10^6.

Issue 4 asks that every protocol run with ``--crypto ideal`` at the survey's n = 10^6 on this
machine. Each protocol runs as its own ``esa simulate`` child process (default d = 16,
ε_c = 1, δ = 10^-6, 3 shufflers, seed 0; MURS with 3 333 fakes per shuffler, 1 % of n), so
its wall time and peak RSS are its own. ``representation`` says whether the hops carried one
report per message or the estimator's tally (``esa simulate`` picks the tally when the
reports would not fit).

    python benchmarks/bench_every_protocol.py              # every protocol, n = 10^6
    python benchmarks/bench_every_protocol.py --n 20000 cnt_rr prhr   # a quick subset
    python benchmarks/bench_every_protocol.py cnt_sgm/splitmix        # a variant (VARIANTS)
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from typing import Any

EXTRA: dict[str, list[str]] = {
    "murs": ["--fake-reports", "3333"],
    "cnt_sgm/splitmix": ["--option", "encoding=splitmix"],
}
#: Configurations an option makes a different protocol (another wire format): benchmarked
#: under their own name, ``PROTOCOL/VARIANT``.
VARIANTS: tuple[str, ...] = ("cnt_sgm/splitmix",)


#: Runs the CLI in the child and prints the child's own peak RSS on stderr at exit.
_CHILD = (
    "import resource, runpy, sys\n"
    "sys.argv = ['esa', *sys.argv[1:]]\n"
    "try:\n"
    "    runpy.run_module('simulations.cli', run_name='__main__')\n"
    "finally:\n"
    "    kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
    "    print(f'PEAK_RSS_KB={kb}', file=sys.stderr)\n"
)


def run_one(name: str, n: int) -> dict[str, Any]:
    protocol = name.split("/")[0]
    argv = ["simulate", "--protocol", protocol, "--crypto", "ideal", "--n", str(n), "--json"]
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, *argv, *EXTRA.get(name, [])],
        capture_output=True,
        text=True,
        check=False,
    )
    wall = time.perf_counter() - t0
    err = proc.stderr.strip().splitlines()
    peak = [line for line in err if line.startswith("PEAK_RSS_KB=")]
    row: dict[str, Any] = {"protocol": name, "n": n, "seconds": round(wall, 1)}
    row["peak_rss_mb"] = round(int(peak[-1].split("=")[1]) / 1024) if peak else None
    if proc.returncode != 0:
        msgs = [line for line in err if not line.startswith("PEAK_RSS_KB=")]
        row["error"] = msgs[-1] if msgs else "failed"
        return row
    j = json.loads(proc.stdout)
    std = j["expected_std"]
    row.update(
        representation=j["representation"],
        messages_per_user=round(j["messages_per_user"], 4),
        messages=j["hops"][-1]["received"],
        rmse=round(j["rmse"], 3),
        mean_expected_std=round(sum(std) / len(std), 3),
    )
    return row


def main() -> int:
    from protocols import protocol_names

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=10**6)
    ap.add_argument("protocols", nargs="*", default=None)
    args = ap.parse_args()
    names = args.protocols or sorted([*protocol_names(), *VARIANTS])
    rows = []
    for name in names:
        row = run_one(name, args.n)
        rows.append(row)
        print(json.dumps(row), flush=True)
    print()
    print(
        "| protocol | representation | messages/user | messages | wall (s) | peak RSS (MB) "
        "| RMSE | mean expected std |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        if "error" in r:
            print(f"| {r['protocol']} | error: {r['error']} | | | {r['seconds']} | | | |")
            continue
        print(
            f"| {r['protocol']} | {r['representation']} | {r['messages_per_user']:g} | "
            f"{r['messages']:.3g} | {r['seconds']} | {r['peak_rss_mb']} | {r['rmse']:g} | "
            f"{r['mean_expected_std']:g} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
