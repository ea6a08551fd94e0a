"""Counting and real-sum protocols at n = 10^6 through the whole pipeline (ideal crypto).

Every case builds the protocol from a ProtocolSpec (ε_c = 1, δ = 10^-6, the paper-derived
defaults unless an option is listed), runs ``esa.run_pipeline`` with one shuffler and
``crypto="ideal"``, and prints one JSON line: build time (amplification accounting), pipeline
time, reports reaching the analyzer, |error|, the closed-form standard deviation and the
guarantee reported. The pure protocols run with small τ (and p) because their default
message counts (τ = 2⌈log2 n⌉ + 1 = 41 per bit, times p = 40 bits for RSum_PURE) do not fit a
pipeline batch at n = 10^6.

    python benchmarks/bench_count_sum_protocols.py              # n = 10^6
    python benchmarks/bench_count_sum_protocols.py --n 20000    # quick sanity run
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

import esa
from protocols import ProtocolSpec, build_protocol

CASES: list[tuple[str, dict[str, float]]] = [
    ("cnt_2m", {}),
    ("cnt_bn", {}),
    ("cnt_sgm", {}),
    ("cnt_pure", {"messages": 3}),
    ("rsum_rr", {"precision": 11}),  # the default r is 119 at n = 10^6: 119 reports per user
    ("rsum_kr", {}),
    ("rsum_rm", {}),
    ("rsum_dsg", {}),
    ("rsum_pure", {"precision": 4, "messages": 3}),
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--n", type=int, default=10**6)
    ap.add_argument("--seed", type=int, default=2026)
    args = ap.parse_args()
    for name, opts in CASES:
        t0 = time.perf_counter()
        p = build_protocol(name, ProtocolSpec(1.0, 1e-6, args.n, options=opts))
        _ = p.privacy  # derive every parameter now (Cnt_PURE calibrates lazily)
        build = time.perf_counter() - t0
        rng = np.random.default_rng(args.seed)
        if p.input_kind.value == "binary":
            x = (rng.random(args.n) < 0.3).astype(np.int64)
        else:
            x = rng.random(args.n)
        t0 = time.perf_counter()
        res = esa.run_pipeline(p, x, esa.PipelineConfig(shufflers=1, crypto="ideal"), rng=rng)
        wall = time.perf_counter() - t0
        g = p.privacy
        print(
            json.dumps(
                {
                    "protocol": name,
                    "options": opts,
                    "n": args.n,
                    "build_s": round(build, 2),
                    "pipeline_s": round(wall, 1),
                    "reports": res.hops[-1].received,
                    "messages_per_user": round(p.messages_per_user, 4),
                    "abs_error": round(float(abs(res.estimate.values[0] - res.truth[0])), 3),
                    "expected_std": round(float(res.estimate.expected_std[0]), 3),
                    "epsilon_central": round(g.epsilon_central, 4),
                    "delta": g.delta,
                    "bound": g.bound,
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()
