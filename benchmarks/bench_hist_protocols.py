"""SLH, MURS and PRHR at n = 10^6 on this machine: wall time and peak memory.

The survey (seed 004, §5) could run SLH/MURS only with precomputed hash tables and stopped
PRHR after 5 h and 22 GB for 30 % of the users. Here:

* ``slh`` / ``murs``: the whole in-process pipeline (``esa.run_pipeline``, ``crypto="ideal"``:
  encoder, shufflers with CSPRNG permutations and, for MURS, uniform fakes, analyzer), with
  the chunked support counting of ``protocols._slh`` at the analyzer.
* ``prhr`` / ``pucm`` / ``prrq``: the whole pipeline with ``representation="tally"``: the
  paper's parameters give 535 (PRHR), ≈ 1.8·10^5 (PUCM) and ≈ 1.7·10^4 (PRRQ, d = 16) messages
  per user, 5·10^8–1.8·10^11 in all, which no batch of reports can hold; the hops carry the
  estimator's summary of the message multiset instead (``protocols.MessageTally``).
* ``prhr-...-per-message``: the same PRHR tally built by drawing and summarizing every tuple
  block by block (the base ``ShuffleProtocol.tally_users``), the pre-sampler method, for the
  side-by-side ratio.

Every case runs in its own child process so its peak RSS (``ru_maxrss``) is its own.

    python benchmarks/bench_hist_protocols.py            # full: n = 10^6
    python benchmarks/bench_hist_protocols.py --n 20000  # quick sanity run
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from typing import Any

import numpy as np

CASES = {
    # name: (protocol, domain)
    "slh-d1024": ("slh", 1024),
    "murs-d1024": ("murs", 1024),
    "prhr-d100": ("prhr", 100),
    "prhr-d1024": ("prhr", 1024),
    "prhr-d1024-per-message": ("prhr", 1024),
    "pucm-d16": ("pucm", 16),
    "pucm-d1024": ("pucm", 1024),
    "prrq-d16": ("prrq", 16),
    "prrq-d1024": ("prrq", 1024),
}
EPS_SLH, EPS_PRHR, DELTA = 0.5, 1.0, 1e-6


def _data(n: int, d: int) -> np.ndarray:
    # Skewed data as in the survey's experiments (a discretised normal around d/2).
    rng = np.random.default_rng(2026)
    return np.clip(np.round(rng.normal(d / 2, d / 8, n)), 0, d - 1).astype(np.int64)


def run_case(case: str, n: int) -> dict[str, Any]:
    import esa
    import protocols

    name, d = CASES[case]
    x = _data(n, d)
    t0 = time.perf_counter()
    out: dict[str, Any] = {"case": case, "n": n, "domain": d}
    if name in ("slh", "murs"):
        shufflers, per = (3, n // 300) if name == "murs" else (1, 0)  # MURS: 1 % of n fakes
        spec = protocols.ProtocolSpec(
            epsilon=EPS_SLH, delta=DELTA, n=n, domain=d, shufflers=shufflers, fake_reports=per
        )
        proto = protocols.build_protocol(name, spec)
        config = esa.PipelineConfig(
            shufflers=shufflers, fake_reports=per, crypto="ideal", workers=1
        )
        result = esa.run_pipeline(proto, x, config, rng=np.random.default_rng(1))
        est, truth = result.estimate, result.truth
        out["seconds_by_stage"] = {k: round(v, 2) for k, v in result.seconds.items()}
        out["messages"] = est.messages_used
        out["params"] = repr(proto)
    elif case.endswith("-per-message"):
        proto = protocols.PRHR(domain=d, epsilon=EPS_PRHR, n=n, delta=DELTA)
        rng = np.random.default_rng(1)
        tally = protocols.ShuffleProtocol.tally_users(proto, x, rng=rng)  # every tuple drawn
        est = proto.estimate_tally(tally, n=n, n_fakes=0)
        truth = proto.truth(x)
        out["messages"] = est.messages_used
        out["params"] = repr(proto)
    else:
        spec = protocols.ProtocolSpec(epsilon=EPS_PRHR, delta=DELTA, n=n, domain=d)
        proto = protocols.build_protocol(name, spec)
        config = esa.PipelineConfig(crypto="ideal", representation="tally", workers=1)
        result = esa.run_pipeline(proto, x, config, rng=np.random.default_rng(1))
        est, truth = result.estimate, result.truth
        out["seconds_by_stage"] = {k: round(v, 2) for k, v in result.seconds.items()}
        out["messages"] = est.messages_used
        out["params"] = repr(proto)
    out["seconds"] = round(time.perf_counter() - t0, 1)
    out["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 0)
    err = est.values - truth
    out["rmse"] = round(float(np.sqrt(np.mean(err**2))), 2)
    out["mean_expected_std"] = round(float(np.mean(est.expected_std)), 2)
    out["max_abs_z"] = round(float(np.max(np.abs(err) / est.expected_std)), 2)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=10**6)
    ap.add_argument("--cases", nargs="*", default=list(CASES))
    ap.add_argument("--case", help=argparse.SUPPRESS)  # child mode
    args = ap.parse_args()
    if args.case:
        from protocols import ParameterError

        try:
            print(json.dumps(run_case(args.case, args.n)))
        except ParameterError as exc:  # e.g. PUCM needs n large enough for λ ≤ 1
            print(json.dumps({"case": args.case, "n": args.n, "refused": str(exc)}))
        return 0
    rows = []
    for case in args.cases:
        proc = subprocess.run(
            [sys.executable, __file__, "--case", case, "--n", str(args.n)],
            capture_output=True,
            text=True,
            check=True,
        )
        row = json.loads(proc.stdout.strip().splitlines()[-1])
        rows.append(row)
        print(json.dumps(row), flush=True)
    print()
    print("| case | n | messages | time (s) | peak RSS (MB) | RMSE | mean expected std |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        if "refused" in r:
            print(f"| {r['case']} | {r['n']:,} | refused: {r['refused']} | | | | |")
            continue
        print(
            f"| {r['case']} | {r['n']:,} | {r['messages']:,} | {r['seconds']} | "
            f"{r['peak_rss_mb']:.0f} | {r['rmse']} | {r['mean_expected_std']} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
