"""Peak memory and the whole-run X25519 floor of ``esa.simulate`` runs of hist_kr.

Usage (from the repository root)::

    python benchmarks/bench_memory.py                          # the default cases, a table
    python benchmarks/bench_memory.py --case onion:1e5 --case ideal:1e7 --json
    python benchmarks/bench_memory.py --case onion:1e6 --workers 2
    python benchmarks/bench_memory.py --case onion:1e5 --before /tmp/old-checkout
    python benchmarks/bench_memory.py --layers --before /tmp/old-checkout

``--before DIR`` runs every case on the checkout in DIR too (its packages first on the
path), alternating with this one, so the two are compared side by side in one run.

``--layers`` times instead, in this process, the CPU per report that
``crypto.wrap_records`` (4 layers) and ``crypto.peel_records`` (one layer) spend besides
their X25519 (the multiplications replaced by look-ups of their results: the KDF, the
AEAD and the Python around them), best and median of 16 rounds of 16 384 reports; with
``--before DIR``, DIR's ``crypto/_onion.py`` too, round by round in turn.

Each case runs in a fresh Python process (so one case's peak is not another's), which
reports:

* ``peak_rss_mb``: the run's process peak resident set (``VmHWM``), and
  ``worker_peak_rss_mb`` the largest peak of its pool workers;
* ``stage_peak_rss_mb``: the largest resident set sampled (every 0.1 s) in each stage of
  the run (``encode``, ``shuffler 1/3``, …, ``analyze``), to show where the peak is;
* ``cpu_s``: CPU seconds of the run's process and its workers together (the machine is
  shared: CPU time, not wall time, is what a ratio can rely on); ``cpu_by_process_s``
  splits it into the run's process (``main``), the pool's ``forkserver`` (its start-up
  imports), its ``worker`` processes and the ``resource_tracker``, and ``stage_cpu_s``
  into the stages (``setup`` is the protocol's calibration and the users' data);
* ``x25519_floor_over_actual`` (onion): the CPU the run's X25519 operations alone need —
  one variable-base multiplication per layer peeled, one base and one variable-base per
  layer wrapped (users' reports and fakes), each timed as raw libsodium calls in the same
  process, best of 5 rounds before and 5 after the run — over the run's CPU. 1.0 would be
  a run that does nothing but its scalar multiplications; on a loaded machine the CPU clock
  of every process is inflated alike, and the ratio drifts by several percent.
  ``stage_floor_over_actual`` is the same ratio per stage (the stages' CPU includes a
  probe's, below: 100 calls of each kind a second, about 0.6 % of a core), and
  ``x25519_pool_floor_over_actual`` the ratio with the raw calls timed on every pool worker
  at once after the run (``x25519_pool_var_us``, ``x25519_pool_base_us``: the slowest
  worker's best), i.e. with every core busy, as during the run;
  ``x25519_during_run_floor_over_actual`` the ratio at the median cost of the same raw
  calls timed by a thread of the run's process, 100 of each kind every second, during
  the run (``x25519_during_run_var_us``, ``x25519_during_run_base_us``; the probe's CPU
  is left out of ``cpu_s``): a run that only multiplied would be at 1.0 by it, whatever
  else the machine ran.

The defaults: onion hist_kr at 10^5 and 10^6 users and ideal hist_kr at 10^7 and 10^8
reports, 3 shufflers, no fakes, ε = 1, domain 16 (``esa simulate --protocol hist_kr``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Self

DEFAULT_CASES = ("onion:1e5", "onion:1e6", "ideal:1e7", "ideal:1e8")
SHUFFLERS = 3


def _peak_kb(pid: int | str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0


def _rss_kb() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


class _Periodic:
    """A thread that calls ``_tick`` every ``period`` seconds while the ``with`` block
    runs, and ``_final`` once on leaving it (after the thread has stopped)."""

    def __init__(self, period: float) -> None:
        self._period = period
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.wait(self._period):
            self._tick()

    def _tick(self) -> None:
        raise NotImplementedError

    def _final(self) -> None:
        pass

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._final()


class _StagePeaks(_Periodic):
    """The largest resident set seen in each stage of a run, sampled on a thread, and the
    CPU seconds each stage took (this process and its pool, read at the stage's bounds)."""

    def __init__(self, cpu: Callable[[], float]) -> None:
        super().__init__(0.1)
        self.stage = "setup"
        self.peaks: dict[str, int] = {}
        self.cpu: dict[str, float] = {}
        self._read_cpu = cpu
        self._cpu_at = cpu()

    def enter(self, name: str) -> None:
        self._note()
        self._close_cpu()
        self.stage = name
        self._note()

    def _close_cpu(self) -> None:
        now = self._read_cpu()
        self.cpu[self.stage] = self.cpu.get(self.stage, 0.0) + now - self._cpu_at
        self._cpu_at = now

    def _note(self) -> None:
        self.peaks[self.stage] = max(self.peaks.get(self.stage, 0), _rss_kb())

    def _tick(self) -> None:
        self._note()

    def _final(self) -> None:
        self._note()
        self._close_cpu()


def _raw_x25519_seconds(rounds: int = 5, samples: int = 2000) -> tuple[float, float]:
    """CPU seconds of one variable-base and one base X25519 multiplication (libsodium):
    the best of ``rounds`` rounds, so that load on a shared machine does not inflate the
    floor (the caller measures before and after the run and keeps the lower)."""
    from nacl import bindings

    secrets = [os.urandom(32) for _ in range(samples)]
    points = [bindings.crypto_scalarmult_base(s) for s in secrets]
    sk = os.urandom(32)
    var = base = float("inf")
    for _ in range(rounds):
        t = time.process_time()
        for p in points:
            bindings.crypto_scalarmult(sk, p)
        var = min(var, (time.process_time() - t) / samples)
        t = time.process_time()
        for s in secrets:
            bindings.crypto_scalarmult_base(s)
        base = min(base, (time.process_time() - t) / samples)
    return var, base


class _CpuClock:
    """CPU seconds of this process and every process under it (the pool's fork server
    and workers), each child's last reading kept should it exit."""

    def __init__(self) -> None:
        import psutil

        self._psutil = psutil
        self._me = psutil.Process()
        self._children: dict[int, tuple[str, float]] = {}

    def _own(self) -> float:
        t = self._me.cpu_times()
        return float(t.user + t.system)

    def read(self) -> float:
        for c in self._me.children(recursive=True):
            try:
                t = c.cpu_times()
                role = self._children.get(c.pid, ("", 0.0))[0] or _role(c)
                self._children[c.pid] = (role, float(t.user + t.system))
            except self._psutil.Error:
                pass
        return self._own() + sum(cpu for _, cpu in self._children.values())

    def children_peak_kb(self) -> int:
        """The largest peak resident set (``VmHWM``) of the children still running."""
        peak = 0
        for c in self._me.children(recursive=True):
            with contextlib.suppress(OSError):
                peak = max(peak, _peak_kb(c.pid))
        return peak

    def by_role(self) -> dict[str, float]:
        out: dict[str, float] = {"main": self._own()}
        for role, cpu in self._children.values():
            out[role] = out.get(role, 0.0) + cpu
        return out


def _role(proc: Any) -> str:
    """``worker`` for a pool worker (a child of the fork server, whose command line it
    shares), else what the child is (``forkserver``, ``resource_tracker``)."""
    if proc.ppid() != os.getpid():
        return "worker"
    text = " ".join(proc.cmdline())
    if "forkserver" in text:
        return "forkserver"
    if "resource_tracker" in text:
        return "resource_tracker"
    return "worker"


class _X25519Probe(_Periodic):
    """Times a few raw X25519 calls on a thread of this process every ``period`` seconds
    while the run goes on: what a multiplication costs under the run's own conditions
    (every core busy with its workers, whatever else the machine runs), by the thread's
    CPU clock. Its own CPU is counted, for the caller to take out of the run's."""

    def __init__(self, period: float = 1.0, calls: int = 100) -> None:
        from nacl import bindings

        super().__init__(period)
        self._mult, self._base = bindings.crypto_scalarmult, bindings.crypto_scalarmult_base
        self._calls = calls
        self._secrets = [os.urandom(32) for _ in range(calls)]
        self._points = [self._base(s) for s in self._secrets]
        self.var: list[float] = []
        self.base: list[float] = []
        self.cpu = 0.0

    def _tick(self) -> None:
        mult, base = self._mult, self._base
        t0 = time.thread_time()
        for p in self._points:
            mult(self._secrets[0], p)
        t1 = time.thread_time()
        for s in self._secrets:
            base(s)
        t2 = time.thread_time()
        self.var.append((t1 - t0) / self._calls)
        self.base.append((t2 - t1) / self._calls)
        self.cpu += time.thread_time() - t0


def _pool_x25519_seconds(workers: int | None) -> tuple[float, float] | None:
    """:func:`_raw_x25519_seconds` on every worker of the run's pool at once (every core
    busy), the slowest worker's figures; None when the run had no pool."""
    from esa._executor import available_cores, local_pool

    count = available_cores() if workers is None else workers
    if count < 2:
        return None
    pool = local_pool(count)
    futures = [pool.submit(_raw_x25519_seconds) for _ in range(count)]
    results = [f.result() for f in futures]
    return max(r[0] for r in results), max(r[1] for r in results)


def run_one(crypto: str, n: int, workers: int | None) -> dict[str, Any]:
    """One case, in this process (the child's side)."""
    import esa

    var, base = _raw_x25519_seconds()
    clock = _CpuClock()
    cpu0 = clock.read()
    main0 = clock.by_role()["main"]
    wall = time.perf_counter()
    with _StagePeaks(clock.read) as stages, _X25519Probe() as probe:
        result = esa.simulate(
            "hist_kr",
            n=n,
            epsilon=1.0,
            domain=16,
            shufflers=SHUFFLERS,
            crypto=crypto,  # type: ignore[arg-type]
            representation="reports",
            workers=workers,
            rng=0,
            on_stage=stages.enter,
        )
    wall = time.perf_counter() - wall
    cpu = clock.read() - cpu0 - probe.cpu
    roles = clock.by_role()
    roles["main"] -= main0 + probe.cpu
    var_after, base_after = _raw_x25519_seconds()
    var, base = min(var, var_after), min(base, base_after)
    child_peak = clock.children_peak_kb()
    out: dict[str, Any] = {
        "crypto": crypto,
        "n": n,
        "reports": result.hops[0].received,
        "peak_rss_mb": _peak_kb("self") / 1024,
        "worker_peak_rss_mb": child_peak / 1024,
        "stage_peak_rss_mb": {k: round(v / 1024, 1) for k, v in stages.peaks.items()},
        "cpu_s": cpu,
        "cpu_main_s": roles["main"],
        "cpu_by_process_s": {k: round(v, 2) for k, v in roles.items()},
        "stage_cpu_s": {k: round(v, 2) for k, v in stages.cpu.items()},
        "wall_s": wall,
        "seconds": result.seconds,
        "max_abs_error": result.max_abs_error,
    }
    if crypto == "onion":
        layers = SHUFFLERS + 1
        sent = result.hops[0].received
        # X25519 operations of each stage: (variable-base, base) multiplications.
        ops = {"encode": (sent * layers, sent * layers)}
        for h in result.hops:
            wrapped = h.fakes_added * (layers - 1 - h.hop) if h.role == "shuffler" else 0
            name = f"shuffler {h.hop + 1}/{SHUFFLERS}" if h.role == "shuffler" else "analyze"
            ops[name] = (h.received + wrapped, wrapped)
        floors = {k: v * var + b * base for k, (v, b) in ops.items()}
        floor = sum(floors.values())
        out["x25519_var_us"], out["x25519_base_us"] = var * 1e6, base * 1e6
        out["x25519_floor_s"] = floor
        out["x25519_floor_over_actual"] = floor / cpu
        out["stage_floor_over_actual"] = {
            k: round(floors[k] / stages.cpu[k], 3) for k in floors if stages.cpu.get(k)
        }
        if probe.var:
            # The floor at the median cost of the multiplications timed during the run.
            mvar, mbase = statistics.median(probe.var), statistics.median(probe.base)
            out["x25519_during_run_var_us"] = mvar * 1e6
            out["x25519_during_run_base_us"] = mbase * 1e6
            out["x25519_during_run_probes"] = len(probe.var)
            out["x25519_during_run_floor_over_actual"] = (
                sum(v * mvar + b * mbase for v, b in ops.values()) / cpu
            )
        pool = _pool_x25519_seconds(workers)
        if pool is not None:
            # The same raw calls on every pool worker at once: what a multiplication costs
            # with every core busy, as in the run (the floor above has one core busy).
            pvar, pbase = pool
            pfloor = sum(v * pvar + b * pbase for v, b in ops.values())
            out["x25519_pool_var_us"], out["x25519_pool_base_us"] = pvar * 1e6, pbase * 1e6
            out["x25519_pool_floor_over_actual"] = pfloor / cpu
    return out


def _count(text: str) -> int:
    return int(float(text))


def layer_overhead(before: str | None, rounds: int = 16, k: int = 16384) -> dict[str, Any]:
    """CPU per report of ``wrap_records`` (4 layers) and ``peel_records`` (one layer)
    besides their X25519: the scalar multiplications are replaced by look-ups of their
    results, so what is timed is the KDF, the AEAD and the Python around them. With
    ``before``, that checkout's ``crypto/_onion.py`` runs too, interleaved round by round.
    """
    import importlib.util
    import statistics
    import types

    import numpy as np
    from nacl import bindings

    import crypto
    from crypto import _onion

    modules = {"after": _onion}
    if before is not None:
        spec = importlib.util.spec_from_file_location(
            "crypto._onion_before", Path(before) / "crypto" / "_onion.py"
        )
        assert spec is not None
        assert spec.loader is not None
        old = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = old
        spec.loader.exec_module(old)
        modules = {"before": old, **modules}
    keys = [crypto.LayerPrivateKey.generate() for _ in range(SHUFFLERS + 1)]
    route = [key.public_key for key in keys]
    rng = np.random.default_rng(0)
    payloads = rng.integers(0, 256, size=(k, 3), dtype=np.uint8)
    crowds = np.zeros(k, dtype=np.uint64)
    records = _onion.wrap_records(payloads, route, epoch=1, crowd_ids=crowds)
    secret = keys[0].private_bytes_raw()
    products = {row[1:33].tobytes(): b"" for row in records}
    for epk in products:
        products[epk] = bindings.crypto_scalarmult(secret, epk)
    point = bindings.crypto_scalarmult_base(os.urandom(32))
    stub = types.SimpleNamespace(
        crypto_scalarmult_base=lambda s: point,
        crypto_scalarmult=lambda s, p: products.get(p, point),
    )
    for module in modules.values():
        module.bindings = stub  # type: ignore[attr-defined]
    try:
        times: dict[str, list[float]] = {
            f"{m} {op}": [] for m in modules for op in ("wrap", "peel")
        }
        order = list(modules.items())
        for r in range(rounds):
            for name, module in order if r % 2 == 0 else order[::-1]:
                t = time.process_time()
                module.wrap_records(payloads, route, epoch=1, crowd_ids=crowds)
                times[f"{name} wrap"].append((time.process_time() - t) / k)
                t = time.process_time()
                _, _, ok = module.peel_records(records, keys[0], epoch=1, hop=0)
                times[f"{name} peel"].append((time.process_time() - t) / k)
                assert ok.all()
    finally:
        for module in modules.values():
            module.bindings = bindings  # type: ignore[attr-defined]
    return {
        key: {"best_us": min(v) * 1e6, "median_us": statistics.median(v) * 1e6}
        for key, v in times.items()
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--case",
        action="append",
        default=None,
        help=f"CRYPTO:N, e.g. onion:1e6 (repeatable; default: {', '.join(DEFAULT_CASES)})",
    )
    parser.add_argument("--workers", type=int, default=None, help="pool processes (default: all)")
    parser.add_argument(
        "--before", default=None, metavar="DIR", help="also run each case on the checkout in DIR"
    )
    parser.add_argument("--json", action="store_true", help="one JSON object")
    parser.add_argument(
        "--layers",
        action="store_true",
        help="time the layers' CPU besides X25519 instead (with --before: side by side)",
    )
    parser.add_argument("--one", nargs=2, metavar=("CRYPTO", "N"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.layers:
        found = layer_overhead(args.before)
        if args.json:
            print(json.dumps({"layers": found, "loadavg": os.getloadavg()}, indent=2))
        else:
            for key, v in found.items():
                print(f"{key:>12}: best {v['best_us']:6.2f} µs, median {v['median_us']:6.2f} µs")
        return 0
    if args.one:
        print(json.dumps(run_one(args.one[0], _count(args.one[1]), args.workers)))
        return 0
    rows = []
    here = str(Path(__file__).resolve().parent.parent)
    trees = [("after", here)] if args.before is None else [("before", args.before), ("after", here)]
    for case in args.case or DEFAULT_CASES:
        crypto, _, n = case.partition(":")
        for label, tree in trees:
            cmd = [sys.executable, __file__, "--one", crypto, str(_count(n))]
            if args.workers is not None:
                cmd += ["--workers", str(args.workers)]
            env = {**os.environ, "PYTHONPATH": tree}
            done = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env)
            if done.returncode:
                row = {"crypto": crypto, "n": _count(n), "error": done.stderr.strip()[-500:]}
            else:
                row = json.loads(done.stdout.strip().splitlines()[-1])
            rows.append({"code": label, **row})
    load = os.getloadavg()
    if args.json:
        print(json.dumps({"cases": rows, "loadavg": load, "cores": os.cpu_count()}, indent=2))
        return 0
    print(f"{'case':>21} {'RSS MB':>8} {'worker MB':>9} {'CPU s':>8} {'wall s':>8} {'floor':>6}")
    for r in rows:
        name = f"{r['crypto']}:{r['n']:.0e} {r['code']}"
        if "error" in r:
            print(f"{name:>21} failed: {r['error']}")
            continue
        ratio = r.get("x25519_floor_over_actual")
        print(
            f"{name:>21} {r['peak_rss_mb']:8.0f} {r['worker_peak_rss_mb']:9.0f} "
            f"{r['cpu_s']:8.1f} {r['wall_s']:8.1f} {'' if ratio is None else f'{ratio:6.2f}'}"
        )
    print(f"load average at the end: {load[0]:.1f} on {os.cpu_count()} cores")
    return 0


if __name__ == "__main__":
    sys.exit(main())
