"""Network load benchmark: many concurrent clients → the first shuffler, over loopback.

Starts a real chain (m shufflers + analyzer, each its own process on 127.0.0.1), encodes
``--n`` users' reports, submits them over ``--connections`` concurrent connections and checks
zero loss end to end (every report acknowledged once, stored once, and counted by the
analyzer). Prints submit throughput and the time for the shufflers and analyzer to process
the epoch. Each ``--frame-reports`` value is measured side by side in one run (fresh chain
each), so the ratios are comparable.

    python benchmarks/bench_net.py --n 100000 --connections 50 --frame-reports 100 10

Not a test: run on demand; figures go in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import trio

import crypto
import esa
from esa.net import close_epoch, query, submit_reports
from protocols import ProtocolSpec, build_protocol
from simulations._tcp_run import running_chain, wait_processed


def one_run(
    args: argparse.Namespace, frame_reports: int, reports: list[bytes], root: Path, source: Any
) -> dict[str, Any]:
    n = args.n
    with running_chain(
        root,
        source,
        shufflers=args.shufflers,
        crypto_mode=args.crypto,
        key_epoch=1,
        chunk_reports=2000,
        keydir=args.keydir,
        workers=args.workers,
    ) as chain:

        async def main() -> dict[str, Any]:
            stats = await submit_reports(
                chain.first.address,
                reports,
                key_epoch=1,
                connections=args.connections,
                frame_reports=frame_reports,
            )
            first = await query(chain.first.query_address, esa.net.QueryKind.STATUS)
            t0 = time.perf_counter()
            await close_epoch(chain.first.address, chain.operator)
            await wait_processed(chain, timeout=3600)
            pipeline = time.perf_counter() - t0
            res = await query(chain.analyzer.query_address, esa.net.QueryKind.RESULT, {"n": n})
            return {
                "frame_reports": frame_reports,
                "connections": args.connections,
                "submitted": len(reports),
                "acknowledged": stats.acknowledged,
                "stored_once": stats.stored,
                "duplicates": stats.duplicates,
                "retries": stats.retries,
                "failed_frames": stats.failed_frames,
                "analyzer_received": res["hops"][-1]["received"],
                "drop_check_ok": res["drop_check"]["ok"],
                "group_commits": first["counters"].get("commits", 0),
                "submit_seconds": round(stats.seconds, 3),
                "submit_reports_per_second": round(stats.reports_per_second),
                "process_epoch_seconds": round(pipeline, 3),
            }

        return trio.run(main)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--connections", type=int, default=50)
    ap.add_argument("--shufflers", type=int, default=2)
    ap.add_argument("--crypto", choices=["onion", "ideal"], default="onion")
    ap.add_argument("--frame-reports", type=int, nargs="+", default=[100, 10])
    ap.add_argument(
        "--workers", type=int, default=None, help="processes for encoding and per party"
    )
    args = ap.parse_args()
    source = ("hist_kr", ProtocolSpec(epsilon=1.0, delta=1e-6, n=args.n, domain=16))
    protocol = build_protocol(*source)
    values = np.random.default_rng(0).integers(0, 16, args.n)
    with tempfile.TemporaryDirectory(prefix="esa-bench-") as tmp:
        root = Path(tmp)
        args.keydir = root / "keys"
        kd = crypto.KeyDirectory.create(args.keydir, shufflers=args.shufflers)
        codec = esa.make_codec(
            args.crypto, message_size=protocol.message_size, layers=args.shufflers + 1
        )
        enc = esa.Encoder(
            protocol, codec, [p.layer_public for p in kd.route()], workers=args.workers
        )
        t0 = time.perf_counter()
        batch = enc.encode(values, rng=np.random.default_rng(1), epoch=1)
        reports = [r.tobytes() for r in batch] if args.crypto == "ideal" else list(batch)
        encode_s = time.perf_counter() - t0
        print(
            json.dumps(
                {
                    "n": args.n,
                    "crypto": args.crypto,
                    "cores": os.cpu_count(),
                    "report_bytes": len(reports[0]),
                    "encode_seconds": round(encode_s, 2),
                }
            )
        )
        for i, fr in enumerate(args.frame_reports):
            out = one_run(args, fr, reports, root / f"run{i}", source)
            lossless = (
                out["acknowledged"] == out["stored_once"] == out["analyzer_received"] == args.n
                and out["failed_frames"] == 0
            )
            out["zero_loss"] = lossless
            print(json.dumps(out))


if __name__ == "__main__":
    main()
