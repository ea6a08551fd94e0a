"""What two defences cost: TLS on the batch port, and the analyzer's stored result summary.

Each pair of runs starts two fresh chains (one shuffler + the analyzer, each its own process
on 127.0.0.1, ``hist_kr`` d = 16, onion reports): one speaking TLS 1.3 with certificates from
a deployment CA (the default), one with ``[tls] insecure_plaintext = true``, which only a
``--local-simulation`` party accepts. Runs alternate TLS, plaintext, TLS, ... (``--pairs``
pairs; the order flips each pair). In each run:

* ``--n`` reports are submitted over ``--connections`` connections, ``--frame-reports`` per
  SUBMIT frame: the throughput and the first shuffler's CPU seconds over the submit
  (utime + stime, /proc/PID/stat);
* ``--handshakes`` connections are opened one after another, each asking STATUS once and
  closing: connections a second, a TLS handshake each in the TLS runs;
* the reports go through in ``--epochs`` epochs; after each epoch is analyzed: the time
  from the close to the analysis, which includes computing and storing the summary (done
  in the analysis's transaction); on a read-only snapshot of the analyzer's inbox opened
  by this process, the time to compute the summary (what the analyzer does once per
  analyzed epoch, and what every RESULT would cost without a stored summary) and to read
  the stored one (what a RESULT costs with it), medians of 3; and, over the network, a
  RESULT served from the summary (median of ``--queries``) and one recomputed (a RESULT
  for another ``n`` takes that path), connection set-up included.

    python benchmarks/bench_defences.py --pairs 3 --n 20000 --epochs 4

Not a test: run on demand; figures go in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import trio

import crypto
import esa
from esa.net import QueryKind, close_epoch, query, submit_reports
from esa.net._inbox import Inbox
from esa.net._queries import compute_result
from esa.net._statedir import INBOX_FILE
from protocols import ProtocolSpec, ShuffleProtocol, build_protocol
from simulations._tcp_run import Chain, running_chain, wait_processed


def _cpu_seconds(pid: int) -> float:
    """utime + stime of ``pid`` (all its threads), in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _handshakes(chain: Chain, count: int) -> float:
    """Connections a second: each opened (TLS handshake included), asked STATUS, closed
    (:func:`esa.net.query` opens a connection per query)."""
    t0 = time.perf_counter()
    for _ in range(count):
        await query(chain.first.address, QueryKind.STATUS)
    return count / (time.perf_counter() - t0)


def _summary_costs(chain: Chain, protocol: ShuffleProtocol) -> tuple[float, float]:
    """Milliseconds to compute the analyzer's result summary, and to read the stored one,
    on a read-only snapshot of its inbox (medians of 3)."""
    path = chain.root / "state" / chain.analyzer.name / INBOX_FILE
    computes, reads = [], []
    with Inbox.open_existing(path) as snapshot:
        for _ in range(3):
            t0 = time.perf_counter()
            compute_result(snapshot, protocol, chain.channels, {})
            t1 = time.perf_counter()
            assert snapshot.summary() is not None
            t2 = time.perf_counter()
            computes.append(t1 - t0)
            reads.append(t2 - t1)
    return 1000 * statistics.median(computes), 1000 * statistics.median(reads)


def one_run(
    tls: bool, reports: list[bytes], root: Path, source: Any, args: argparse.Namespace
) -> dict[str, Any]:
    with running_chain(
        root, source, shufflers=1, key_epoch=1, keydir=args.keydir, tls=tls
    ) as chain:

        async def main() -> dict[str, Any]:
            cpu0 = _cpu_seconds(chain.first.popen.pid)
            stats = await submit_reports(
                chain.first.address,
                reports[: args.n // args.epochs],
                key_epoch=1,
                connections=args.connections,
                frame_reports=args.frame_reports,
            )
            seconds, acked = stats.seconds, stats.acknowledged
            cpu = _cpu_seconds(chain.first.popen.pid) - cpu0
            per_second = await _handshakes(chain, args.handshakes)
            epochs: list[dict[str, float]] = []
            per = args.n // args.epochs
            for e in range(args.epochs):
                if e:  # the first epoch's reports were submitted (and timed) above
                    more = await submit_reports(
                        chain.first.address,
                        reports[e * per : (e + 1) * per],
                        key_epoch=1,
                        connections=args.connections,
                        frame_reports=args.frame_reports,
                    )
                    acked += more.acknowledged
                t0 = time.perf_counter()
                await close_epoch(chain.first.address, chain.operator)
                await wait_processed(chain, timeout=3600)
                processed = time.perf_counter() - t0
                served = []
                for _ in range(args.queries):
                    t1 = time.perf_counter()
                    res = await query(chain.analyzer.query_address, QueryKind.RESULT)
                    served.append(time.perf_counter() - t1)
                t1 = time.perf_counter()
                fresh = await query(
                    chain.analyzer.query_address, QueryKind.RESULT, {"n": (e + 1) * per + 1}
                )
                recomputed = time.perf_counter() - t1
                assert fresh["hops"][-1]["received"] == res["hops"][-1]["received"]
                compute_ms, read_ms = await trio.to_thread.run_sync(
                    _summary_costs, chain, args.protocol
                )
                epochs.append(
                    {
                        "messages_stored": res["hops"][-1]["received"],
                        "close_to_analyzed_s": round(processed, 3),
                        "summary_compute_ms": round(compute_ms, 2),
                        "summary_read_ms": round(read_ms, 3),
                        "result_from_summary_ms": round(1000 * statistics.median(served), 2),
                        "result_recomputed_ms": round(1000 * recomputed, 1),
                    }
                )
            assert acked == per * args.epochs, (acked, per * args.epochs)
            return {
                "tls": tls,
                "submit_reports_per_second": round(stats.acknowledged / seconds),
                "first_shuffler_cpu_s": round(cpu, 3),
                "cpu_ms_per_1000_reports": round(1000 * cpu / (stats.acknowledged / 1000), 1),
                "connections_per_second": round(per_second, 1),
                "epochs": epochs,
            }

        return trio.run(main)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pairs", type=int, default=3, help="TLS/plaintext pairs (1..50)")
    ap.add_argument("--n", type=int, default=20_000, help="reports per run, all epochs")
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--connections", type=int, default=20)
    ap.add_argument("--frame-reports", type=int, default=100)
    ap.add_argument("--handshakes", type=int, default=200)
    ap.add_argument("--queries", type=int, default=20, help="RESULT queries per epoch")
    ap.add_argument("--json", action="store_true", help="print every run as JSON")
    args = ap.parse_args()
    if not 1 <= args.pairs <= 50 or not 1 <= args.epochs <= args.n:
        ap.error("--pairs must lie in [1, 50] and --epochs in [1, --n]")
    source = ("hist_kr", ProtocolSpec(epsilon=1.0, delta=1e-6, n=args.n, domain=16))
    protocol = args.protocol = build_protocol(*source)
    load_before = os.getloadavg()[0]
    t_start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="esa-defences-") as tmp:
        root = Path(tmp)
        args.keydir = root / "keys"
        kd = crypto.KeyDirectory.create(args.keydir, shufflers=1)
        codec = esa.make_codec("onion", message_size=protocol.message_size, layers=2)
        enc = esa.Encoder(protocol, codec, [p.layer_public for p in kd.route()], workers=1)
        values = np.random.default_rng(0).integers(0, 16, args.n)
        reports = list(enc.encode(values, rng=np.random.default_rng(1), epoch=1))
        runs: list[dict[str, Any]] = []
        for p in range(args.pairs):
            order = (True, False) if p % 2 == 0 else (False, True)
            for tls in order:
                run = one_run(tls, reports, root / f"run{len(runs)}", source, args)
                runs.append(run)
                if args.json:
                    print(json.dumps(run), flush=True)
    print(
        f"n={args.n} in {args.epochs} epochs, {args.connections} connections x "
        f"{args.frame_reports} reports/frame, report {len(reports[0])} B; 1 shuffler + "
        f"analyzer; load average {load_before:.1f} before, {os.getloadavg()[0]:.1f} after"
    )
    tls_runs = [r for r in runs if r["tls"]]
    plain_runs = [r for r in runs if not r["tls"]]
    for name, key in (
        ("submit reports/s", "submit_reports_per_second"),
        ("first shuffler CPU ms per 1000 reports", "cpu_ms_per_1000_reports"),
        ("connections/s (open, STATUS, close)", "connections_per_second"),
    ):
        t = [r[key] for r in tls_runs]
        q = [r[key] for r in plain_runs]
        ratios = [a / b for a, b in zip(t, q, strict=True)]
        print(
            f"{name}: TLS {t} plaintext {q}; TLS/plaintext per pair "
            f"{[round(x, 2) for x in ratios]}, median {statistics.median(ratios):.2f}"
        )
    print("per epoch, medians over all runs (ms unless said):")
    print("  epoch  messages  close->analyzed s  summary compute  summary read  RESULT: summary")
    print("                                                                      / recomputed")
    for e in range(args.epochs):
        rows = [r["epochs"][e] for r in runs]

        def med(key: str) -> float:
            return float(statistics.median(x[key] for x in rows))  # noqa: B023 - used at once

        print(
            f"  {e + 1:>5}  {rows[0]['messages_stored']:>8}  {med('close_to_analyzed_s'):>17.3f}"
            f"  {med('summary_compute_ms'):>15.1f}  {med('summary_read_ms'):>12.3f}"
            f"  {med('result_from_summary_ms'):>7.1f} / {med('result_recomputed_ms'):.1f}"
        )
    print(f"total {time.perf_counter() - t_start:.1f} s")


if __name__ == "__main__":
    main()
