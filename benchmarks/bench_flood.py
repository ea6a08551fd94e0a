"""Honest throughput into a first shuffler with and without a keyless junk flood.

Starts a real first shuffler (its own process on 127.0.0.1, plaintext, onion reports) for
every run. Honest clients submit ``--n`` reports over ``--connections`` connections, each
from its own loopback address (127.0.1.1, 127.0.1.2, ...: many users, none of them
special), in SUBMIT frames of ``--frame-reports``, resending after the wait a
``retry_later`` REJECT asks for. In the "with" runs a second process floods junk reports of
the right size from 127.0.0.3 over ``--flood-connections`` connections, ``--junk-reports``
per frame, ignoring every REJECT (the worst a keyless client can do; it reconnects, bounded,
when the party closes a connection that keeps sending while throttled). Runs alternate
without, with, without, with, ... (``--pairs`` pairs); each pair's ratio with/without and
the median ratio are printed, with the party's CPU seconds (utime + stime from
/proc/PID/stat) and the flooder's replies by kind.

    python benchmarks/bench_flood.py --pairs 5 --n 8000 --flood-connections 16 \
        --junk-reports 1000 --reports-per-epoch-per-peer 1000 --frames-per-second-per-peer 20

``--reports-per-epoch-per-peer``, ``--frames-per-second-per-peer`` and
``--invalid-reports-per-second-per-peer`` set the party's ``[admission]`` table; left out,
the code's defaults hold (no quota, no rate limit, a junk budget of 100 reports a second
per address). Besides the wall-clock ratio, each pair's CPU ratio is printed: the party's
CPU seconds per honest report without the flood over those with it (1: the flood cost the
party nothing), which the host's load moves far less. Not a test: run on demand; figures
go in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import trio

import crypto
import esa
from esa.net import Address, FrameStream, query
from esa.net import _wire as w
from protocols import ProtocolSpec, build_protocol
from simulations._tcp_run import PartyProcess, _spawn, _write_toml

KEY_EPOCH = 1
PROTOCOL_TABLE: dict[str, Any] = {
    "name": "hist_kr",
    "epsilon": 1.0,
    "delta": 1e-6,
    "n": 100_000,
    "domain": 16,
}
FLOOD_SOURCE = "127.0.0.3"


def _cpu_seconds(pid: int) -> float:
    """utime + stime of ``pid`` (all its threads), in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _start_party(root: Path, args: argparse.Namespace) -> PartyProcess:
    """The first shuffler every run submits to (no epoch closes, so quotas last the
    benchmark: each run's honest clients come from addresses of their own)."""
    root.mkdir(parents=True)
    admission: dict[str, Any] = {}
    if args.reports_per_epoch_per_peer:
        admission["reports_per_epoch_per_peer"] = args.reports_per_epoch_per_peer
    if args.frames_per_second_per_peer:
        admission["frames_per_second_per_peer"] = args.frames_per_second_per_peer
    if args.invalid_reports_per_second_per_peer is not None:
        admission["invalid_reports_per_second_per_peer"] = args.invalid_reports_per_second_per_peer
    doc: dict[str, Any] = {
        "role": "shuffler",
        "hop": 0,
        "state_dir": "state/shuffler-1",
        "listen": {"host": "127.0.0.1", "port": 0},
        "query": {"host": "127.0.0.1", "port": 0},
        "next": {"host": "127.0.0.1", "port": 9},  # never used: no epoch closes
        "tls": {"insecure_plaintext": True},
        "keys": {"epochs": {str(KEY_EPOCH): str(args.keydir)}},
        "epoch": {"max_reports": 10**9, "deadline_seconds": 3600.0},
        "limits": {"max_connections": 256},
        "protocol": PROTOCOL_TABLE,
    }
    if admission:
        doc["admission"] = admission
    config = root / "shuffler-1.toml"
    _write_toml(config, doc)
    return _spawn("shuffler-1", config, root / "shuffler-1.log", timeout=60.0)


async def _honest(
    address: Address, reports: list[bytes], run: int, args: argparse.Namespace
) -> float:
    """Submit ``reports`` from ``args.connections`` addresses of 127.1.RUN.0/24; returns the
    seconds taken."""
    per = -(-len(reports) // args.connections)
    shares = [reports[i : i + per] for i in range(0, len(reports), per)]
    acked = 0

    async def client(index: int, share: list[bytes]) -> None:
        nonlocal acked
        fs = FrameStream(
            await trio.open_tcp_stream(
                address.host, address.port, local_address=f"127.1.{run}.{index + 1}"
            ),
            max_frame=2**22,
            read_timeout=30.0,
        )
        for i in range(0, len(share), args.frame_reports):
            frame = w.SubmitFrame(KEY_EPOCH, tuple(share[i : i + args.frame_reports])).to_bytes()
            for _ in range(200):  # bounded resends after retry_later
                await fs.send(frame)
                reply = await fs.receive()
                if w.peek_kind(reply) is w.FrameKind.ACK:
                    acked += len(share[i : i + args.frame_reports])
                    break
                rej = w.parse_reject(reply)
                if rej.reason is not w.RejectReason.RETRY_LATER:
                    raise esa.ESAError(f"honest frame refused: {rej.reason.name} {rej.detail}")
                await trio.sleep(min(5.0, rej.retry_after_ms / 1000))
            else:
                raise esa.ESAError("honest frame still refused after 200 tries")
        await fs.stream.aclose()

    t0 = time.perf_counter()
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            for index, share in enumerate(shares):
                nursery.start_soon(client, index, share)
    seconds = time.perf_counter() - t0
    assert acked == len(reports), (acked, len(reports))
    return seconds


def _flood_child(port: int, size: int, args: argparse.Namespace) -> None:
    """The flooder process: junk SUBMITs from 127.0.0.3 until ``--flood-seconds`` pass or
    its stdin closes; prints its replies by kind as JSON."""
    rng = np.random.default_rng(7)
    frames = [
        w.SubmitFrame(
            KEY_EPOCH, tuple(rng.bytes(size) for _ in range(args.junk_reports))
        ).to_bytes()
        for _ in range(8)
    ]
    seen: dict[str, int] = {}
    ready = trio.Event()

    async def main() -> None:
        async def conn(index: int) -> None:
            for _ in range(1000):  # reconnects, bounded
                try:
                    stream = await trio.open_tcp_stream(
                        "127.0.0.1", port, local_address=FLOOD_SOURCE
                    )
                    fs = FrameStream(stream, max_frame=2**22, read_timeout=30.0)
                    for k in range(10**7):
                        await fs.send(frames[(index + k) % len(frames)])
                        reply = await fs.receive()
                        kind = (
                            "ack"
                            if w.peek_kind(reply) is w.FrameKind.ACK
                            else w.parse_reject(reply).reason.name.lower()
                        )
                        seen[kind] = seen.get(kind, 0) + 1
                        if not ready.is_set():
                            ready.set()
                            print("ready", flush=True)  # the party is answering the flood
                except (OSError, trio.BrokenResourceError, esa.ESAError, w.WireError):
                    seen["closed"] = seen.get("closed", 0) + 1
                    await trio.sleep(0.01)

        async def stop_on_stdin(cancel: trio.CancelScope) -> None:
            await trio.to_thread.run_sync(sys.stdin.buffer.read, abandon_on_cancel=True)
            cancel.cancel()

        with trio.move_on_after(args.flood_seconds):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(stop_on_stdin, nursery.cancel_scope)
                for i in range(args.flood_connections):
                    nursery.start_soon(conn, i)

    trio.run(main)
    print(json.dumps(seen), flush=True)


def one_run(
    party: PartyProcess, index: int, flood: bool, reports: list[bytes], args: argparse.Namespace
) -> dict[str, Any]:
    size = len(reports[0])
    before = trio.run(query, party.query_address, w.QueryKind.STATUS)["counters"]
    flooder: subprocess.Popen[bytes] | None = None
    try:
        if flood:
            flooder = subprocess.Popen(
                [
                    sys.executable,
                    __file__,
                    *sys.argv[1:],
                    "--_flood",
                    f"{party.address.port}:{size}",
                ],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
            )
            assert flooder.stdout is not None
            line = flooder.stdout.readline()  # its first reply: the flood is on
            if line.strip() != b"ready":
                raise esa.ESAError(f"the flooder did not start: {line!r}")
            time.sleep(args.flood_warmup)
        cpu0 = _cpu_seconds(party.popen.pid)
        seconds = trio.run(_honest, party.address, reports, index, args)
        cpu = _cpu_seconds(party.popen.pid) - cpu0
        flood_replies: dict[str, int] = {}
        if flooder is not None:
            out, _ = flooder.communicate(b"", timeout=30)  # closing stdin stops it
            flood_replies = json.loads(out.decode().strip().splitlines()[-1])
            flooder = None
        status = trio.run(query, party.query_address, w.QueryKind.STATUS)
        counters = status["counters"]
        peeled = counters.get("invalid_reports_refused", 0) - before.get(
            "invalid_reports_refused", 0
        )
        return {
            "flood": flood,
            "honest_reports": len(reports),
            "seconds": round(seconds, 3),
            "reports_per_second": round(len(reports) / seconds),
            "party_cpu_seconds": round(cpu, 3),
            "stored_so_far": status["open_reports"],
            "junk_peeled": peeled,
            "flood_replies": flood_replies,
        }
    finally:
        if flooder is not None:
            flooder.kill()
            flooder.wait(timeout=10)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pairs", type=int, default=3, help="without/with pairs (1..200)")
    ap.add_argument("--n", type=int, default=4000, help="honest reports per run")
    ap.add_argument("--connections", type=int, default=20, help="honest addresses")
    ap.add_argument("--frame-reports", type=int, default=20)
    ap.add_argument("--flood-connections", type=int, default=4)
    ap.add_argument("--junk-reports", type=int, default=100, help="junk reports per frame")
    ap.add_argument("--flood-seconds", type=float, default=30.0, help="flood bound per run")
    ap.add_argument("--flood-warmup", type=float, default=0.5)
    ap.add_argument("--reports-per-epoch-per-peer", type=int, default=0)
    ap.add_argument("--frames-per-second-per-peer", type=float, default=0.0)
    ap.add_argument(
        "--invalid-reports-per-second-per-peer",
        type=float,
        default=None,
        help="the junk budget (left out: the code's default; 0: none)",
    )
    ap.add_argument("--json", action="store_true", help="print every run as JSON")
    ap.add_argument("--_flood", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args._flood:
        port, size = map(int, args._flood.split(":"))
        _flood_child(port, size, args)
        return
    if not 1 <= args.pairs <= 200 or not 1 <= args.connections <= 250 or args.n < args.connections:
        ap.error("--pairs must lie in [1, 200], --connections in [1, 250], --n >= --connections")
    protocol = build_protocol(
        PROTOCOL_TABLE["name"],
        ProtocolSpec(epsilon=1.0, delta=1e-6, n=100_000, domain=16),
    )
    t_start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="esa-flood-") as tmp:
        args.work = tmp
        args.keydir = Path(tmp) / "keys"
        kd = crypto.KeyDirectory.create(args.keydir, shufflers=1)
        codec = esa.make_codec("onion", message_size=protocol.message_size, layers=2)
        enc = esa.Encoder(protocol, codec, [p.layer_public for p in kd.route()], workers=1)
        runs = 2 * args.pairs
        values = np.arange(runs * args.n) % 16
        msgs = protocol.randomize(values, rng=np.random.default_rng(0))
        sealed = list(enc.seal_messages(msgs, epoch=KEY_EPOCH, crowd_id=0, first_hop=0))
        results = []
        party = _start_party(Path(tmp) / "party", args)
        try:
            for i in range(runs):
                res = one_run(party, i, i % 2 == 1, sealed[i * args.n : (i + 1) * args.n], args)
                results.append(res)
                if args.json:
                    print(json.dumps(res), flush=True)
            status = trio.run(query, party.query_address, w.QueryKind.STATUS)
        finally:
            party.stop()
        assert status["open_reports"] == runs * args.n, "junk stored or honest reports lost"
    ratios, cpu_ratios = [], []
    junk_budget = args.invalid_reports_per_second_per_peer
    print(
        f"honest n={args.n} over {args.connections} addresses, {args.frame_reports}/frame; "
        f"flood {args.flood_connections} conns x {args.junk_reports} junk/frame from "
        f"{FLOOD_SOURCE}; reports_per_epoch_per_peer={args.reports_per_epoch_per_peer} "
        f"frames_per_second_per_peer={args.frames_per_second_per_peer} "
        f"invalid_reports_per_second_per_peer="
        f"{'default' if junk_budget is None else junk_budget}; "
        f"load average before {os.getloadavg()[0]:.1f}"
    )
    for p in range(args.pairs):
        without, with_ = results[2 * p], results[2 * p + 1]
        ratio = with_["reports_per_second"] / without["reports_per_second"]
        ratios.append(ratio)
        cpu_ratio = without["party_cpu_seconds"] / max(with_["party_cpu_seconds"], 1e-3)
        cpu_ratios.append(cpu_ratio)
        print(
            f"pair {p + 1}: without {without['reports_per_second']:>6} rep/s "
            f"(cpu {without['party_cpu_seconds']:.2f} s)  with {with_['reports_per_second']:>6} "
            f"rep/s (cpu {with_['party_cpu_seconds']:.2f} s, junk peeled "
            f"{with_['junk_peeled']}, flood replies {with_['flood_replies']})  "
            f"ratio {ratio:.2f} (cpu {cpu_ratio:.2f})"
        )
    print(
        f"median ratio with/without: {statistics.median(ratios):.2f} (target >= 0.8), "
        f"CPU ratio {statistics.median(cpu_ratios):.2f}; "
        f"total {time.perf_counter() - t_start:.1f} s; load average after "
        f"{os.getloadavg()[0]:.1f}"
    )


if __name__ == "__main__":
    main()
