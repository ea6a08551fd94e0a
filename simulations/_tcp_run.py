"""``esa simulate --transport tcp``: every party its own OS process on 127.0.0.1.

:func:`run_tcp` writes a key directory and one TOML config per party into a temporary
directory, starts every party (each on a port picked free just before), encodes the users'
reports in this process, submits them to the first shuffler over concurrent connections,
closes the epoch as the operator, waits for the analyzer to process it and asks for the
result. A protocol with several channels (RSum_RM: one per precision) gets one chain of m
shufflers per channel, all ending at the one analyzer, as in :func:`esa.run_pipeline`: each
channel's messages are sealed for its chain and submitted to its first shuffler, and the
epoch is closed on every chain. Every child runs in its own
session (process group) and is terminated — SIGTERM, then SIGKILL — on success, failure or
Ctrl-C.

The statistics follow :func:`esa.run_pipeline` exactly (same ``rng.spawn`` order for the
randomizers and for each shuffler's fakes: chain c's hop i takes child ``1 + c·m + i``), so
the same seed gives the same estimate over TCP as in process; the permutation is from the
CSPRNG in both and estimates do not depend on it.

The children get the protocol as a deployed party does: the declarative ``[protocol]`` table
of its name and :class:`~protocols.ProtocolSpec`, built in the child with
:func:`~protocols.build_protocol`. No protocol object crosses a process boundary, so a
protocol object alone, without the parameters it was built from, is refused.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
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
from esa import (
    Address,
    HopCounters,
    SubmitStats,
    close_epochs_together,
    query,
    submit_reports,
)
from esa.net import QueryKind
from protocols import Estimate, ProtocolSpec, ShuffleProtocol, build_protocol

__all__ = ["Chain", "PartyProcess", "ProtocolSource", "protocol_doc", "run_tcp", "start_chain"]

#: A protocol as the parties are configured with it: its registered name and parameters.
ProtocolSource = tuple[str, ProtocolSpec]


@dataclass
class PartyProcess:
    """A running party: its process, config file, log and listening address."""

    name: str
    config: Path
    log: Path
    popen: subprocess.Popen[bytes]
    address: Address
    #: The query listener (STATUS, RESULT, trap audit), dialled with the query client's
    #: certificate when the chain runs TLS.
    query_address: Address = field(default_factory=lambda: Address("127.0.0.1", 0))
    #: TLS contexts to dial the batch port and the query listener with (None: plaintext).
    tls: tuple[ssl.SSLContext, ssl.SSLContext] | None = None

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
    """A deployment running as local processes: ``channels`` chains of m shufflers each,
    all ending at one analyzer. ``parties`` lists chain 0's shufflers in hop order, then
    chain 1's, …, then the analyzer."""

    root: Path
    parties: list[PartyProcess]
    operator: Ed25519PrivateKey
    key_epoch: int
    configs: list[dict[str, Any]] = field(default_factory=list)
    channels: int = 1
    #: The analyzer's [auditor] key: signs trap commitments and openings.
    auditor: Ed25519PrivateKey = field(default_factory=Ed25519PrivateKey.generate)

    @property
    def shufflers(self) -> int:
        """Shufflers per chain (m)."""
        return (len(self.parties) - 1) // self.channels

    @property
    def first(self) -> PartyProcess:
        return self.parties[0]

    @property
    def firsts(self) -> list[PartyProcess]:
        """The first shuffler of every chain, in channel order (where clients submit)."""
        return [self.parties[c * self.shufflers] for c in range(self.channels)]

    @property
    def analyzer(self) -> PartyProcess:
        return self.parties[-1]

    def restart(
        self, index: int, *, timeout: float = 30.0, env: dict[str, str] | None = None
    ) -> PartyProcess:
        """Start party ``index`` again from its config (same state directory and port);
        ``env`` adds environment variables (crash tests' pause points:
        :mod:`esa.net._testhooks`)."""
        old = self.parties[index]
        if old.popen.poll() is None:
            old.kill()
        self.parties[index] = _spawn(
            old.name, old.config, old.log, timeout=timeout, tls=old.tls, env=env
        )
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


def _launch(
    name: str,
    config: Path,
    log: Path,
    tls: tuple[ssl.SSLContext, ssl.SSLContext] | None = None,
    env: dict[str, str] | None = None,
) -> PartyProcess:
    role = "analyzer" if name == crypto.analyzer_name() else "shuffler"
    (config.parent / "state" / name / "port").unlink(missing_ok=True)
    (config.parent / "state" / name / "query_port").unlink(missing_ok=True)
    with open(log, "ab") as fh:
        popen = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "simulations.cli",
                "serve",
                role,
                "--config",
                str(config),
                "--local-simulation",  # its configs may use plaintext and seeded fakes
            ],
            stdout=fh,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # its own process group: we can always kill all of it
            env={**os.environ, **env} if env else None,
        )
    return PartyProcess(name, config, log, popen, Address("127.0.0.1", 0), tls=tls)


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
    batch_tls, query_tls = proc.tls if proc.tls is not None else (None, None)
    proc.address = Address("127.0.0.1", int(port_file.read_text()), tls=batch_tls)
    # Written before the port file (PartyService.run).
    query_port = int((port_file.parent / "query_port").read_text())
    proc.query_address = Address("127.0.0.1", query_port, tls=query_tls)


class _StartFailed(esa.ESAError):
    pass


def _spawn(
    name: str,
    config: Path,
    log: Path,
    *,
    timeout: float,
    tls: tuple[ssl.SSLContext, ssl.SSLContext] | None = None,
    env: dict[str, str] | None = None,
) -> PartyProcess:
    proc = _launch(name, config, log, tls, env)
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


def protocol_doc(protocol: ProtocolSource) -> dict[str, Any]:
    """The ``[protocol]`` table a child party builds ``protocol`` from (checked as
    :func:`esa.net.protocol_table` reads it).

    Args:
        protocol: the protocol's registered name and its :class:`~protocols.ProtocolSpec`.

    Returns:
        The table: name, epsilon, delta, n, domain, fake_reports, options, and bound and
        shufflers where they differ from their defaults.

    Raises:
        esa.ConfigError: ``protocol`` is not a ``(name, ProtocolSpec)`` pair (a protocol
            object does not say what it was built from), or the table is invalid.
    """
    if not (
        isinstance(protocol, tuple)
        and len(protocol) == 2
        and isinstance(protocol[0], str)
        and isinstance(protocol[1], ProtocolSpec)
    ):
        raise esa.ConfigError(
            f"give the protocol as (name, ProtocolSpec), not {type(protocol).__name__}: the "
            "parties build it from its declarative parameters, no protocol object is handed over"
        )
    name, spec = protocol
    table: dict[str, Any] = {
        "name": name,
        "epsilon": spec.epsilon,
        "delta": spec.delta,
        "n": spec.n,
        "domain": spec.domain,
        "fake_reports": spec.fake_reports,
        "options": dict(spec.options),
    }
    if spec.bound is not None:
        table["bound"] = spec.bound
    if spec.shufflers != 1:
        table["shufflers"] = spec.shufflers
    esa.net.protocol_table(table)
    return table


def start_chain(
    root: Path,
    protocol: ProtocolSource,
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
    channels: int = 1,
    tls: bool = True,
) -> Chain:
    """Write keys and configs under ``root`` and start every party (analyzer first).

    ``protocol`` is the protocol's name and :class:`~protocols.ProtocolSpec`: every config's
    ``[protocol]`` table states them and each party builds the protocol itself.
    ``channels`` chains of ``shufflers`` shufflers each are started, all forwarding to one
    analyzer (one chain per channel of the protocol, as :func:`esa.run_pipeline` runs them);
    chain c's hop i is ``shuffler-{c·m + i + 1}`` (:func:`esa.chain_route`), and
    ``fake_rng_states[c·m + i]`` seeds its fakes. ``keydir`` reuses an existing key
    directory (default: a fresh one in ``root/keys``).

    With ``tls`` (the default) the parties speak TLS, with certificates from a fresh
    deployment CA in ``root/tls``; each :class:`PartyProcess` dials its batch port trusting
    that CA and its query listener with the client certificate ``root/tls/query-client``.
    ``tls=False`` writes ``[tls] insecure_plaintext = true`` (tests of other features).
    """
    proto_table = protocol_doc(protocol)
    root.mkdir(parents=True, exist_ok=True)
    if keydir is None:
        keydir = root / "keys"
        crypto.KeyDirectory.create(keydir, shufflers=shufflers * channels)
    operator = Ed25519PrivateKey.generate()
    total = shufflers * channels
    names = [crypto.shuffler_name(i) for i in range(total)] + [crypto.analyzer_name()]
    configs: list[dict[str, Any]] = [{} for _ in names]
    chain = Chain(root, [], operator, key_epoch, configs, channels)
    tls_table: dict[str, dict[str, Any]] = {}
    contexts: tuple[ssl.SSLContext, ssl.SSLContext] | None = None
    if tls:
        tls_dir = root / "tls"
        files = esa.net.write_tls_material(
            tls_dir, {name: ["127.0.0.1"] for name in names}, clients=["query-client"]
        )
        ca = Path(files["ca"]["cert"])
        tls_table = {
            name: {"ca": str(ca), "cert": files[name]["cert"], "key": files[name]["key"]}
            for name in names
        }
        contexts = (
            esa.net.tls_client_context(ca),
            esa.net.tls_client_context(
                ca,
                cert=Path(files["query-client"]["cert"]),
                key=Path(files["query-client"]["key"]),
            ),
        )
    # Every party starts at once on ports picked just before; another program could take
    # one in between, so a start that fails on a taken port is retried with fresh ports.
    for attempt in range(3):
        ports = _free_ports(2 * len(names))  # batch ports, then query ports
        for index, name in enumerate(names):
            channel, hop = divmod(index, shufflers) if index < total else (0, shufflers)
            doc: dict[str, Any] = {
                "role": "analyzer" if index == total else "shuffler",
                "hop": hop,
                "state_dir": f"state/{name}",
                "crypto": crypto_mode,
                "listen": {"host": "127.0.0.1", "port": ports[index]},
                "query": {"host": "127.0.0.1", "port": ports[len(names) + index]},
                "tls": tls_table.get(name, {"insecure_plaintext": True}),
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
                "protocol": proto_table,
                # Children exit by themselves if this process dies without stopping them.
                "simulation": {"parent_pid": os.getpid()},
            }
            if channels > 1:
                doc["channels"] = channels
                if index < total:
                    doc["channel"] = channel
            if index == total:
                doc["auditor"] = {"public_key": chain.auditor.public_key().public_bytes_raw().hex()}
            if index < total:
                # The last shuffler of every chain forwards to the analyzer.
                nxt = index + 1 if hop + 1 < shufflers else total
                doc["next"] = {"host": "127.0.0.1", "port": ports[nxt]}
                state = fake_rng_states[index] if fake_rng_states else None
                if state is not None:
                    doc["simulation"]["fake_rng_state"] = state
            _write_toml(root / f"{name}.toml", doc)
            configs[index] = doc
        chain.parties = []
        try:
            for name in names:
                chain.parties.append(
                    _launch(name, root / f"{name}.toml", root / f"{name}.log", contexts)
                )
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
def running_chain(root: Path, protocol: ProtocolSource, **kwargs: Any) -> Iterator[Chain]:
    """:func:`start_chain` that always tears every process down."""
    chain = start_chain(root, protocol, **kwargs)
    try:
        yield chain
    finally:
        chain.stop()


async def wait_processed(chain: Chain, *, timeout: float) -> dict[str, Any]:
    """Wait until the analyzer has processed every epoch the first shufflers closed.

    The analyzer files chain c's epoch e under its own id (one per chain and epoch), so it
    is done when its processed ids match the epochs closed over every chain.
    """
    with trio.fail_after(timeout):
        while True:
            # The full STATUS (counters, epochs) is served on the query listeners only.
            firsts = [await query(p.query_address, QueryKind.STATUS) for p in chain.firsts]
            last = await query(chain.analyzer.query_address, QueryKind.STATUS)
            closed = sum(sum(f["epochs"].values()) for f in firsts)  # durable: survives restarts
            done = last["epochs"]["processed"]
            if all(f["open_reports"] == 0 for f in firsts) and closed and done >= closed:
                return last
            await trio.sleep(0.05)


def _report_bytes(batch: Any) -> list[bytes]:
    if isinstance(batch, np.ndarray) and batch.dtype == np.uint8:
        return [r.tobytes() for r in batch]
    return [bytes(r) for r in batch]


@contextlib.contextmanager
def _terminate_cleanly() -> Iterator[None]:
    """Within the block, SIGTERM exits through the ``finally`` clauses, as Ctrl-C does: the
    parties are stopped and the temporary key directory (private keys included) removed,
    instead of the process dying with both left behind."""
    if threading.current_thread() is not threading.main_thread():
        yield  # only the main thread may set signal handlers
        return

    def terminate(signum: int, frame: Any) -> None:
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, terminate)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def run_tcp(
    source: ProtocolSource,
    values: npt.ArrayLike,
    config: esa.PipelineConfig,
    *,
    rng: esa.RNGLike,
    protocol: ShuffleProtocol | None = None,
    connections: int = 50,
    timeout: float = 600.0,
) -> esa.RunResult:
    """Run the pipeline with every party as its own process speaking TCP on 127.0.0.1.

    Args:
        source: the protocol's name and :class:`~protocols.ProtocolSpec`; the parties
            build it from these (:func:`start_chain`).
        values: users' raw values.
        config: the deployment (shufflers, fakes, threshold, crypto, epoch id).
        rng: seeded generator of the statistics, or a seed (:data:`protocols.RNGLike`),
            used exactly as :func:`esa.run_pipeline` uses it.
        protocol: the protocol ``build_protocol(*source)`` already made (default: built
            here); it must be that one, as the parties build exactly that.
        connections: concurrent client connections (shared out among the chains' first
            shufflers).
        timeout: bound on the whole run, in seconds.

    Returns:
        The same :class:`esa.RunResult` as the in-process run; ``extra`` adds
        ``transport``, the submitter's counters and the analyzer's drop check.

    Raises:
        esa.ESAError: a party failed to start, or the run did not finish in ``timeout``.
    """
    rng = esa.as_generator(rng)
    protocol_doc(source)  # refuse anything but (name, ProtocolSpec) before building
    if protocol is None:
        protocol = build_protocol(*source)
    x = protocol.validate_values(values)
    n = int(x.shape[0])
    m = config.shufflers
    channels = protocol.channels
    # run_pipeline's order: the statistics first, then chain c hop i's fakes at c·m + i.
    stats_rng, *fake_rngs = rng.spawn(m * channels + 1)
    states = [json.dumps(g.bit_generator.state) if config.seeded_fakes else None for g in fake_rngs]
    seconds: dict[str, float] = {}
    t_all = time.perf_counter()
    with _terminate_cleanly(), tempfile.TemporaryDirectory(prefix="esa-tcp-") as tmp:
        root = Path(tmp)
        t = time.perf_counter()
        chain = start_chain(
            root,
            source,
            shufflers=m,
            channels=channels,
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
            routes = [
                [p.layer_public for p in esa.chain_route(keydir, channels=channels, channel=c)]
                for c in range(channels)
            ]
            t = time.perf_counter()
            # As run_pipeline (esa.encode_users): the same chunks, the same seeds, the same
            # messages; each channel's sealed for its own chain.
            batches = esa.encode_users(
                protocol,
                codec,
                routes,
                x,
                rng=stats_rng,
                epoch=config.epoch,
                crowd_id=config.crowd_id,
            )
            per_chain: list[list[bytes]] = []
            for c, batch in enumerate(batches):
                if not len(batch):
                    # The analyzer joins the chains' epochs by number: a chain that closes
                    # no epoch would hold every other chain's batch back forever.
                    raise esa.ESAError(f"chain {c + 1} of {protocol.name} carries no messages")
                per_chain.append(_report_bytes(batch))
            seconds["encode"] = time.perf_counter() - t

            async def drive() -> tuple[SubmitStats, dict[str, Any]]:
                with trio.fail_after(timeout):
                    t0 = time.perf_counter()
                    subs: list[SubmitStats] = [SubmitStats() for _ in range(channels)]

                    async def submit(c: int) -> None:
                        subs[c] = await submit_reports(
                            chain.firsts[c].address,
                            per_chain[c],
                            key_epoch=config.epoch,
                            connections=max(1, connections // channels),
                        )

                    async with trio.open_nursery() as nursery:
                        for c in range(channels):
                            nursery.start_soon(submit, c)
                    sub = SubmitStats.merged(subs, seconds=time.perf_counter() - t0)
                    seconds["submit"] = sub.seconds
                    if sub.failed_frames:
                        raise esa.ESAError(f"{sub.failed_frames} frames were never acknowledged")
                    t0 = time.perf_counter()
                    await close_epochs_together([f.address for f in chain.firsts], chain.operator)
                    await wait_processed(chain, timeout=timeout)
                    res = await query(
                        chain.analyzer.query_address,
                        QueryKind.RESULT,
                        {"n": n, "messages": True},
                    )
                    pages = [bytes.fromhex(res.pop("messages_hex"))]
                    got = len(pages[0]) // protocol.message_size
                    while got < res["messages_total"]:
                        page = await query(
                            chain.analyzer.query_address,
                            QueryKind.RESULT,
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
        estimate=esa.check_held(estimate, hops),
        truth=protocol.truth(x),
        hops=hops,
        analyzer_messages=messages[valid],
        seconds=seconds,
        extra={
            "transport": "tcp",
            "submit": sub.to_json(),
            "drop_check": res["drop_check"],
            "epochs": res["epochs"],
            # The analyzer's own statement for the run (RESULT's "privacy").
            "analyzer_privacy": res.get("privacy"),
        },
    )
