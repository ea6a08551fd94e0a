"""``esa simulate --transport tcp``: every party its own OS process on 127.0.0.1.

:func:`run_tcp` writes a key directory and one TOML config per party into a temporary
directory, starts the analyzer and then the shufflers from last to first (each on a port the
OS picks, so nothing races for a port), encodes the users' reports in this process, submits
them to the first shuffler over concurrent connections, closes the epoch as the operator,
waits for the analyzer to process it and asks for the result. Every child runs in its own
session (process group) and is terminated — SIGTERM, then SIGKILL — on success, failure or
Ctrl-C.

The statistics follow :func:`esa.run_pipeline` exactly (same ``rng.spawn`` order for the
randomizers and for each shuffler's fakes), so the same seed gives the same estimate over
TCP as in process; the permutation is from the CSPRNG in both and estimates do not depend on
it.
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import trio
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

import crypto
import esa
from esa import Address, HopCounters, close_epoch, query, submit_reports
from protocols import Estimate, ShuffleProtocol

__all__ = ["Chain", "PartyProcess", "run_tcp", "start_chain"]


@dataclass
class PartyProcess:
    """A running party: its process, config file, log and listening address."""

    name: str
    config: Path
    log: Path
    popen: subprocess.Popen[bytes]
    address: Address

    def stop(self, *, grace: float = 5.0) -> None:
        """Terminate the party's process group; SIGKILL if it does not exit in ``grace``."""
        if self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, signal.SIGTERM)
            try:
                self.popen.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.popen.pid, signal.SIGKILL)
                self.popen.wait(timeout=grace)

    def kill(self) -> None:
        """SIGKILL the party (a crash, for fault tests)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, signal.SIGKILL)
        self.popen.wait(timeout=10)


@dataclass
class Chain:
    """A deployment of m shufflers + analyzer running as local processes."""

    root: Path
    parties: list[PartyProcess]
    operator: Ed25519PrivateKey
    key_epoch: int
    configs: list[dict[str, Any]] = field(default_factory=list)

    @property
    def first(self) -> PartyProcess:
        return self.parties[0]

    @property
    def analyzer(self) -> PartyProcess:
        return self.parties[-1]

    def restart(self, index: int, *, timeout: float = 30.0) -> PartyProcess:
        """Start party ``index`` again from its config (same state directory and port)."""
        old = self.parties[index]
        if old.popen.poll() is None:
            old.kill()
        self.parties[index] = _spawn(old.name, old.config, old.log, timeout=timeout)
        return self.parties[index]

    def stop(self) -> None:
        for p in self.parties:
            p.stop()


def _write_toml(path: Path, doc: dict[str, Any]) -> None:
    """A tiny TOML writer for our flat config shape (strings, numbers, bools, tables)."""

    def value(v: Any) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, int | float):
            return repr(v)
        return json.dumps(str(v))  # JSON string escapes are valid TOML basic strings

    lines = [f"{k} = {value(v)}" for k, v in doc.items() if not isinstance(v, dict)]

    def table(prefix: str, t: dict[str, Any]) -> None:
        lines.append(f"\n[{prefix}]")
        lines.extend(f'"{k}" = {value(v)}' for k, v in t.items() if not isinstance(v, dict))
        for k, v in t.items():
            if isinstance(v, dict):
                table(f"{prefix}.{k}", v)

    for k, v in doc.items():
        if isinstance(v, dict):
            table(k, v)
    path.write_text("\n".join(lines) + "\n")


def _launch(name: str, config: Path, log: Path) -> PartyProcess:
    role = "analyzer" if name == crypto.analyzer_name() else "shuffler"
    (config.parent / "state" / name / "port").unlink(missing_ok=True)
    with open(log, "ab") as fh:
        popen = subprocess.Popen(
            [sys.executable, "-m", "simulations.cli", "serve", role, "--config", str(config)],
            stdout=fh,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # its own process group: we can always kill all of it
        )
    return PartyProcess(name, config, log, popen, Address("127.0.0.1", 0))


def _await_ready(proc: PartyProcess, *, timeout: float) -> None:
    port_file = proc.config.parent / "state" / proc.name / "port"
    deadline = time.monotonic() + timeout
    while not port_file.exists():
        if proc.popen.poll() is not None:
            raise _StartFailed(
                f"{proc.name} exited with {proc.popen.returncode}: {_tail(proc.log)}"
            )
        if time.monotonic() > deadline:
            raise _StartFailed(f"{proc.name} did not start within {timeout} s: {_tail(proc.log)}")
        time.sleep(0.02)
    proc.address = Address("127.0.0.1", int(port_file.read_text()))


class _StartFailed(esa.ESAError):
    pass


def _spawn(name: str, config: Path, log: Path, *, timeout: float) -> PartyProcess:
    proc = _launch(name, config, log)
    try:
        _await_ready(proc, timeout=timeout)
    except BaseException:
        proc.kill()
        raise
    return proc


def _free_ports(count: int) -> list[int]:
    """Distinct ports free on 127.0.0.1 right now (held open together, then released)."""
    socks = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()


def _tail(log: Path, n: int = 2000) -> str:
    try:
        return log.read_text(errors="replace")[-n:]
    except OSError:
        return "(no log)"


def start_chain(
    root: Path,
    protocol: ShuffleProtocol,
    *,
    shufflers: int,
    crypto_mode: str = "onion",
    key_epoch: int = 1,
    threshold: int = 0,
    fake_reports: int = 0,
    fake_rng_states: list[str | None] | None = None,
    epoch_max_reports: int = 10**9,
    epoch_deadline: float = 3600.0,
    read_timeout: float = 10.0,
    max_frame: int = 4 * 1024 * 1024,
    chunk_reports: int = 2000,
    max_connections: int = 256,
    start_timeout: float = 60.0,
    keydir: Path | None = None,
    workers: int | None = 1,
) -> Chain:
    """Write keys and configs under ``root`` and start every party (analyzer first).

    ``keydir`` reuses an existing key directory (default: a fresh one in ``root/keys``).
    """
    root.mkdir(parents=True, exist_ok=True)
    if keydir is None:
        keydir = root / "keys"
        crypto.KeyDirectory.create(keydir, shufflers=shufflers)
    with open(root / "protocol.pickle", "wb") as fh:
        pickle.dump(protocol, fh)
    operator = Ed25519PrivateKey.generate()
    names = [crypto.shuffler_name(i) for i in range(shufflers)] + [crypto.analyzer_name()]
    configs: list[dict[str, Any]] = [{} for _ in names]
    chain = Chain(root, [], operator, key_epoch, configs)
    # Every party starts at once on ports picked just before; another program could take
    # one in between, so a start that fails on a taken port is retried with fresh ports.
    for attempt in range(3):
        ports = _free_ports(len(names))
        for hop, name in enumerate(names):
            doc: dict[str, Any] = {
                "role": "analyzer" if hop == shufflers else "shuffler",
                "hop": hop,
                "state_dir": f"state/{name}",
                "crypto": crypto_mode,
                "listen": {"host": "127.0.0.1", "port": ports[hop]},
                "keys": {"epochs": {str(key_epoch): str(keydir.resolve())}},
                "operator": {
                    "public_key": operator.public_key().public_bytes_raw().hex(),
                },
                "epoch": {"max_reports": epoch_max_reports, "deadline_seconds": epoch_deadline},
                "shuffle": {
                    "threshold": threshold,
                    "fake_reports": fake_reports,
                    "workers": workers or 0,
                },
                "limits": {
                    "max_frame_bytes": max_frame,
                    "read_timeout_seconds": read_timeout,
                    "max_connections": max_connections,
                    "chunk_reports": chunk_reports,
                },
                "protocol": {"pickle": "protocol.pickle"},
                # Children exit by themselves if this process dies without stopping them.
                "simulation": {"parent_pid": os.getpid()},
            }
            if hop < shufflers:
                doc["next"] = {"host": "127.0.0.1", "port": ports[hop + 1]}
                state = fake_rng_states[hop] if fake_rng_states else None
                if state is not None:
                    doc["simulation"]["fake_rng_state"] = state
            _write_toml(root / f"{name}.toml", doc)
            configs[hop] = doc
        chain.parties = []
        try:
            for name in names:
                chain.parties.append(_launch(name, root / f"{name}.toml", root / f"{name}.log"))
            for proc in chain.parties:
                _await_ready(proc, timeout=start_timeout)
            return chain
        except _StartFailed as exc:
            chain.stop()
            if "already in use" not in str(exc) or attempt == 2:
                raise
        except BaseException:
            chain.stop()
            raise
    raise AssertionError("unreachable")


@contextlib.contextmanager
def running_chain(root: Path, protocol: ShuffleProtocol, **kwargs: Any) -> Iterator[Chain]:
    """:func:`start_chain` that always tears every process down."""
    chain = start_chain(root, protocol, **kwargs)
    try:
        yield chain
    finally:
        chain.stop()


async def wait_processed(chain: Chain, *, timeout: float) -> dict[str, Any]:
    """Wait until the analyzer has processed every epoch the first shuffler closed."""
    with trio.fail_after(timeout):
        while True:
            first = await query(chain.first.address, crypto.QueryKind.STATUS)
            last = await query(chain.analyzer.address, crypto.QueryKind.STATUS)
            closed = sum(first["epochs"].values())  # durable: survives restarts
            done = last["epochs"]["processed"]
            if first["open_reports"] == 0 and closed and done >= closed:
                return last
            await trio.sleep(0.05)


def _report_bytes(batch: Any) -> list[bytes]:
    if isinstance(batch, np.ndarray) and batch.dtype == np.uint8:
        return [r.tobytes() for r in batch]
    return [bytes(r) for r in batch]


def run_tcp(
    protocol: ShuffleProtocol,
    values: npt.ArrayLike,
    config: esa.PipelineConfig,
    *,
    rng: np.random.Generator,
    connections: int = 50,
    timeout: float = 600.0,
) -> esa.RunResult:
    """Run the pipeline with every party as its own process speaking TCP on 127.0.0.1.

    Args:
        protocol: the configured mechanism.
        values: users' raw values.
        config: the deployment (shufflers, fakes, threshold, crypto, epoch id).
        rng: seeded generator of the statistics, used exactly as :func:`esa.run_pipeline`
            uses it.
        connections: concurrent client connections to the first shuffler.
        timeout: bound on the whole run, in seconds.

    Returns:
        The same :class:`esa.RunResult` as the in-process run; ``extra`` adds
        ``transport``, the submitter's counters and the analyzer's drop check.

    Raises:
        esa.ESAError: a party failed to start, or the run did not finish in ``timeout``.
    """
    if protocol.channels != 1:
        # The services run one chain into one analyzer; a protocol that needs one chain per
        # channel (RSum_RM: per precision) would silently lose that separation here.
        raise esa.ConfigError(
            f"{protocol.name} sends its messages through {protocol.channels} shuffler chains; "
            "--transport tcp runs a single chain, use --transport inproc"
        )
    x = protocol.validate_values(values)
    n = int(x.shape[0])
    m = config.shufflers
    stats_rng, *fake_rngs = rng.spawn(m + 1)
    states = [json.dumps(g.bit_generator.state) if config.seeded_fakes else None for g in fake_rngs]
    seconds: dict[str, float] = {}
    t_all = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="esa-tcp-") as tmp:
        root = Path(tmp)
        t = time.perf_counter()
        chain = start_chain(
            root,
            protocol,
            shufflers=m,
            crypto_mode=config.crypto,
            key_epoch=config.epoch,
            threshold=config.threshold,
            fake_reports=config.fake_reports,
            fake_rng_states=states,
            workers=config.workers,
        )
        try:
            seconds["start"] = time.perf_counter() - t
            keydir = crypto.KeyDirectory.load(root / "keys")
            codec = esa.make_codec(config.crypto, message_size=protocol.message_size, layers=m + 1)
            route = [p.layer_public for p in keydir.route()]
            t = time.perf_counter()
            encoder = esa.Encoder(protocol, codec, route, workers=config.workers)
            batch = encoder.encode(x, rng=stats_rng, epoch=config.epoch, crowd_id=config.crowd_id)
            reports = _report_bytes(batch)
            seconds["encode"] = time.perf_counter() - t

            async def drive() -> tuple[Any, dict[str, Any]]:
                with trio.fail_after(timeout):
                    t0 = time.perf_counter()
                    sub = await submit_reports(
                        chain.first.address,
                        reports,
                        key_epoch=config.epoch,
                        connections=connections,
                    )
                    seconds["submit"] = time.perf_counter() - t0
                    if sub.failed_frames:
                        raise esa.ESAError(f"{sub.failed_frames} frames were never acknowledged")
                    t0 = time.perf_counter()
                    await close_epoch(chain.first.address, chain.operator)
                    await wait_processed(chain, timeout=timeout)
                    res = await query(
                        chain.analyzer.address,
                        crypto.QueryKind.RESULT,
                        {"n": n, "messages": True},
                    )
                    pages = [bytes.fromhex(res.pop("messages_hex"))]
                    got = len(pages[0]) // protocol.message_size
                    while got < res["messages_total"]:
                        page = await query(
                            chain.analyzer.address,
                            crypto.QueryKind.RESULT,
                            {"n": n, "messages": True, "messages_offset": got},
                        )
                        pages.append(bytes.fromhex(page["messages_hex"]))
                        got += len(pages[-1]) // protocol.message_size
                    res["messages"] = b"".join(pages)
                    seconds["shuffle_analyze"] = time.perf_counter() - t0
                    return sub, res

            sub, res = trio.run(drive)
        finally:
            chain.stop()
    seconds["total"] = time.perf_counter() - t_all
    rows = res.pop("messages")
    arr = np.frombuffer(rows, dtype=np.uint8).reshape(-1, protocol.message_size)
    messages, valid = protocol.decode(arr)
    estimate = Estimate(
        values=np.asarray(res["estimate"], dtype=np.float64),
        expected_std=np.asarray(res["expected_std"], dtype=np.float64),
        messages_used=int(res["messages_used"]),
        extra=dict(res.get("estimate_extra", {})),
    )
    hops = [HopCounters(**h) for h in res["hops"]]
    return esa.RunResult(
        protocol=protocol,
        config=config,
        n=n,
        estimate=estimate,
        truth=protocol.truth(x),
        hops=hops,
        analyzer_messages=messages[valid],
        seconds=seconds,
        extra={
            "transport": "tcp",
            "submit": sub.to_json(),
            "drop_check": res["drop_check"],
            "epochs": res["epochs"],
        },
    )
