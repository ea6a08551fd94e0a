"""End to end over TCP: every party its own OS process on 127.0.0.1.

Every process a test starts is ended by it (``running_chain`` / ``run_tcp`` tear the
process groups down in ``finally``); loopback only; each run bounded by a timeout.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import trio

import crypto
import esa
from esa.net import (
    PeerRejected,
    close_epoch,
    commit_traps,
    make_traps,
    open_traps,
    query,
    submit_reports,
)
from esa.net import _wire as w
from protocols import ProtocolSpec, build_protocol
from simulations._tcp_run import run_tcp, running_chain, start_chain, wait_processed


@pytest.mark.slow
def test_same_seed_same_estimate_over_tcp_as_in_process() -> None:
    n = 1500
    source = ("hist_kr", ProtocolSpec(epsilon=1.0, delta=1e-6, n=n, domain=6))
    protocol = build_protocol(*source)
    values = np.random.default_rng(7).integers(0, 6, n)
    config = esa.PipelineConfig(shufflers=2, fake_reports=4, workers=1)
    tcp = run_tcp(source, values, config, rng=np.random.default_rng(11), timeout=120)
    inproc = esa.run_pipeline(protocol, values, config, rng=np.random.default_rng(11))
    # Bit-identical: the same randomizer draws and the same fakes, shuffled differently.
    np.testing.assert_array_equal(tcp.estimate.values, inproc.estimate.values)
    np.testing.assert_array_equal(tcp.estimate.expected_std, inproc.estimate.expected_std)
    assert [h.to_json() for h in tcp.hops] == [h.to_json() for h in inproc.hops]
    assert np.array_equal(np.sort(tcp.analyzer_messages), np.sort(inproc.analyzer_messages))
    j_tcp, j_in = tcp.to_json(), inproc.to_json()
    assert set(j_in) <= set(j_tcp)
    assert j_tcp["transport"] == "tcp"
    assert j_tcp["drop_check"] == {"ok": True, "problems": []}
    assert j_tcp["submit"]["acknowledged"] == n
    # A different seed gives a different estimate (the test can fail).
    other = esa.run_pipeline(protocol, values, config, rng=np.random.default_rng(12))
    assert not np.array_equal(other.estimate.values, tcp.estimate.values)


@pytest.mark.slow
def test_load_epochs_by_size_and_hostile_client_over_tcp(tmp_path: Path) -> None:
    """20 concurrent clients, 2000 reports in frames of 10 (200 frames), epochs closing at
    500 reports, a garbage-sending client in the middle: zero loss, every epoch processed."""
    n = 2000
    source = ("cnt_rr", ProtocolSpec(epsilon=1.0, delta=1e-6, n=n))
    protocol = build_protocol(*source)
    values = (np.arange(n) % 3 == 0).astype(np.int64)
    with running_chain(
        tmp_path,
        source,
        shufflers=2,
        crypto_mode="ideal",
        key_epoch=1,
        epoch_max_reports=500,
        fake_reports=1,
        chunk_reports=300,
    ) as chain:
        kd = crypto.KeyDirectory.load(tmp_path / "keys")
        codec = esa.make_codec("ideal", message_size=protocol.message_size, layers=3)
        enc = esa.Encoder(protocol, codec, [p.layer_public for p in kd.route()], workers=1)
        reports = [r.tobytes() for r in enc.encode(values, rng=np.random.default_rng(0), epoch=1)]

        def hostile() -> bytes:
            # Over TLS, as every client of the chain: the garbage is inside the channel.
            tls = chain.first.address.tls
            assert tls is not None
            with (
                socket.create_connection(
                    (chain.first.address.host, chain.first.address.port), timeout=10
                ) as raw,
                tls.wrap_socket(raw, server_hostname=chain.first.address.host) as s,
            ):
                s.sendall(w.encode_frame(b"\x01\x01garbage-garbage"))
                return s.recv(4096)

        async def main() -> tuple[Any, dict[str, Any], dict[str, Any]]:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(trio.to_thread.run_sync, hostile)
                stats = await submit_reports(
                    chain.first.address,
                    reports,
                    key_epoch=1,
                    connections=20,
                    frame_reports=10,
                )
            await close_epoch(chain.first.address, chain.operator)
            await wait_processed(chain, timeout=60)
            first = await query(chain.first.query_address, esa.net.QueryKind.STATUS)
            res = await query(chain.analyzer.query_address, esa.net.QueryKind.RESULT, {"n": n})
            return stats, first, res

        stats, first, res = trio.run(main)
    assert stats.failed_frames == 0
    assert stats.acknowledged == stats.stored == n
    assert first["rejected"] == {"malformed_frame": 1}
    # Size-closed epochs hold >= 500 reports (frames race in), plus the closing remainder.
    assert res["epochs"] == first["counters"]["epochs_closed"] >= 2
    assert res["drop_check"]["ok"], res["drop_check"]
    # One fake per shuffler per epoch with reports; if the size rule took every report, the
    # operator's close adds an empty epoch, which gets no fakes.
    epochs = res["epochs"] - len(res["empty_epochs"])
    assert res["empty_epochs"] in ([], [res["epochs"] - 1])
    assert [h["received"] for h in res["hops"]] == [n, n + epochs, n + 2 * epochs]
    assert res["messages_used"] == n + 2 * epochs
    # The estimate is a real count of ones (n/3 of the users), within 5 expected std.
    assert abs(res["estimate"][0] - (n + 2) // 3) < 5 * res["expected_std"][0]


def test_cli_serve_rejects_bad_config_with_one_line(tmp_path: Path) -> None:
    cfg = tmp_path / "bad.toml"
    cfg.write_text('role = "shuffler"\nhop = 0\n')
    proc = subprocess.run(
        [sys.executable, "-m", "simulations.cli", "serve", "shuffler", "--config", str(cfg)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1
    assert "state_dir" in lines[0]


@pytest.mark.slow
def test_trap_reports_reveal_dropped_reports(tmp_path: Path) -> None:
    """An auditor commits to trap reports before an epoch and opens them after: all arrive
    on an honest path; traps that never reach the analyzer are reported as missing."""
    n = 200
    source = ("hist_kr", ProtocolSpec(epsilon=1.0, delta=1e-6, n=n, domain=4))
    protocol = build_protocol(*source)
    with running_chain(tmp_path, source, shufflers=2, key_epoch=1) as chain:
        kd = crypto.KeyDirectory.load(tmp_path / "keys")
        route = [p.layer_public for p in kd.route()]
        codec = esa.make_codec("onion", message_size=protocol.message_size, layers=3)
        enc = esa.Encoder(protocol, codec, route, workers=1)
        users = list(enc.encode(np.arange(n) % 4, rng=np.random.default_rng(0), epoch=1))
        honest = make_traps(protocol, route, count=12, key_epoch=1)
        lossy = make_traps(protocol, route, count=10, key_epoch=1)
        first, analyzer = chain.first.address, chain.analyzer.address

        async def epoch(traps: Any, reports: list[bytes]) -> dict[str, Any]:
            await commit_traps(analyzer, traps, auditor=chain.auditor)
            with pytest.raises(PeerRejected, match="bad_trap_opening"):
                # nothing processed since the commitment
                await open_traps(analyzer, traps, auditor=chain.auditor)
            await submit_reports(first, reports, key_epoch=1, connections=4)
            await close_epoch(first, chain.operator)
            await wait_processed(chain, timeout=60)
            return await open_traps(analyzer, traps, auditor=chain.auditor)

        async def main() -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
            ok = await epoch(honest, users[:100] + list(honest.reports))
            # Half of the second set of traps is "dropped on the path" (never delivered).
            bad = await epoch(lossy, users[100:] + list(lossy.reports[:5]))
            forged = dataclasses.replace(lossy, analyzer_layers=lossy.analyzer_layers[:5])
            with pytest.raises(PeerRejected, match="bad_trap_opening"):
                # an opening must match a commitment
                await open_traps(analyzer, forged, auditor=chain.auditor)
            res = await query(chain.analyzer.query_address, esa.net.QueryKind.RESULT, {"n": n})
            return ok, bad, res

        ok, bad, res = trio.run(main)
    assert ok == {"traps": 12, "repeated": 0, "arrived": 12, "missing": 0, "ok": True}
    assert bad == {"traps": 10, "repeated": 0, "arrived": 5, "missing": 5, "ok": False}
    assert res["traps"] == {"opened": 22, "arrived": 17, "unopened_commitments": 0}
    assert not res["drop_check"]["ok"]
    # The accusation names the commitment and the auditor it rests on.
    problem = res["drop_check"]["problems"][-1]
    assert f"trap commitment {lossy.commitment.hex()[:16]}" in problem
    assert chain.auditor.public_key().public_bytes_raw().hex()[:16] in problem
    assert "5 of its 10 trap reports never reached the analyzer" in problem
    assert res["n_fakes"] == 17  # arrived traps are removed like fakes


def test_split_mix_trap_values_count_once_among_the_fakes(tmp_path: Path) -> None:
    """A DisEle trap is one fake value sent as `shares` reports: the RESULT removes it as
    one fake (its Horvitz-Thompson weight depends on the number of fake values), while the
    audit counts trap reports."""
    n, d, count = 200, 4, 3
    source = ("disele", ProtocolSpec(epsilon=1.0, delta=1e-6, n=n, domain=d))
    protocol = build_protocol(*source)
    assert protocol.share_spec is not None
    shares = protocol.share_spec.shares
    with running_chain(tmp_path, source, shufflers=1, key_epoch=1) as chain:
        route = [p.layer_public for p in crypto.KeyDirectory.load(tmp_path / "keys").route()]
        codec = esa.make_codec("onion", message_size=protocol.message_size, layers=2)
        enc = esa.Encoder(protocol, codec, route, workers=1)
        users = list(enc.encode(np.arange(n) % d, rng=np.random.default_rng(0), epoch=1))
        traps = make_traps(protocol, route, count=count, key_epoch=1)
        assert len(traps.reports) == count * shares

        async def main() -> tuple[dict[str, Any], dict[str, Any]]:
            await commit_traps(chain.analyzer.address, traps, auditor=chain.auditor)
            await submit_reports(chain.first.address, users + list(traps.reports), key_epoch=1)
            await close_epoch(chain.first.address, chain.operator)
            await wait_processed(chain, timeout=60)
            opened = await open_traps(chain.analyzer.address, traps, auditor=chain.auditor)
            res = await query(chain.analyzer.query_address, esa.net.QueryKind.RESULT, {"n": n})
            return opened, res

        opened, res = trio.run(main)
    assert opened["arrived"] == count * shares
    assert res["n_fakes"] == count
    assert res["estimate_extra"]["complete"] is True
    assert res["estimate_extra"]["shares_expected"] == shares * (d * n + count)


@pytest.mark.slow
def test_split_mix_fakes_keep_the_signed_counts_consistent() -> None:
    """A shuffler's fake DisEle value travels as `shares` reports; its signed statement
    counts reports, so the analyzer's drop check finds every hop consistent (it used to flag
    each hop whose fakes were counted as values), and the estimate removes 2 fake values
    per shuffler, exactly as in process."""
    n = 300
    source = ("disele", ProtocolSpec(epsilon=1.0, delta=1e-6, n=n, domain=8))
    protocol = build_protocol(*source)
    values = np.random.default_rng(5).integers(0, 8, n)
    config = esa.PipelineConfig(shufflers=2, fake_reports=2, crypto="ideal", workers=1)
    tcp = run_tcp(source, values, config, rng=np.random.default_rng(1), timeout=120)
    inproc = esa.run_pipeline(protocol, values, config, rng=np.random.default_rng(1))
    assert tcp.to_json()["drop_check"] == {"ok": True, "problems": []}
    assert tcp.estimate.extra["complete"] is True
    np.testing.assert_array_equal(tcp.estimate.values, inproc.estimate.values)
    assert [h.fakes_added for h in tcp.hops] == [h.fakes_added for h in inproc.hops]


_ORPHANING_PARENT = """
import os, sys
from pathlib import Path
from protocols import ProtocolSpec
from simulations._tcp_run import start_chain
source = ("cnt_rr", ProtocolSpec(epsilon=1.0, delta=1e-6, n=100))
chain = start_chain(Path(sys.argv[1]), source, shufflers=1)
print(" ".join(str(q.popen.pid) for q in chain.parties), flush=True)
os._exit(0)  # die without tearing the chain down
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as fh:
            return not any(line.startswith("State:\tZ") for line in fh)
    except FileNotFoundError:
        return False


@pytest.mark.slow
def test_parties_exit_when_the_simulation_dies(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", _ORPHANING_PARENT, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    pids = [int(p) for p in proc.stdout.split()]
    assert len(pids) == 2, proc.stderr
    try:
        deadline = time.monotonic() + 30
        while any(_alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(_alive(p) for p in pids)
    finally:
        for pid in pids:  # never leave a process behind, even if the test fails
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)


_INTERRUPTED_RUN = """
import faulthandler, signal
# Ctrl-C at a terminal meets Python's default SIGINT handler; a test process started in the
# background by a non-interactive shell (as `cmd &` does) inherits SIGINT *ignored*, and so
# would this run, which then never sees the signal.
signal.signal(signal.SIGINT, signal.default_int_handler)
faulthandler.register(signal.SIGUSR1)  # the test asks for every thread's stack if it hangs
import numpy as np
import esa
from protocols import ProtocolSpec
from simulations._tcp_run import run_tcp
source = ("hist_kr", ProtocolSpec(epsilon=1.0, delta=1e-6, n=200000, domain=4))
values = np.zeros(200000, dtype=np.int64)
run_tcp(source, values, esa.PipelineConfig(shufflers=1, workers=1), rng=np.random.default_rng(0))
"""


def _children(pid: int) -> list[int]:
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(stat.parent.name))
    return out


@pytest.mark.slow
def test_ctrl_c_tears_the_chain_down(tmp_path: Path) -> None:
    """SIGINT to a running ``run_tcp`` (as Ctrl-C sends): every party is gone by the time
    the run has exited."""
    # stderr to a file, not a pipe nobody drains: a full pipe would block the run.
    err_path = tmp_path / "stderr.txt"
    with open(err_path, "wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-c", _INTERRUPTED_RUN],
            stdout=subprocess.DEVNULL,
            stderr=err,
            start_new_session=True,
        )
    kids: list[int] = []
    try:
        deadline = time.monotonic() + 60
        while len(kids) < 2 and time.monotonic() < deadline and proc.poll() is None:
            kids = _children(proc.pid)
            time.sleep(0.05)
        assert len(kids) == 2, "the chain's two parties never started"
        time.sleep(1.0)  # parties up (or starting): either way they must be torn down
        os.kill(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:  # say where it hangs, then fail
            os.kill(proc.pid, signal.SIGUSR1)
            time.sleep(2.0)
            pytest.fail(
                "run_tcp still running 60 s after SIGINT; its stacks:\n" + err_path.read_text()
            )
        assert proc.returncode != 0
        assert not any(_alive(k) for k in kids)  # checked at once: no grace period
    finally:
        for pid in [proc.pid, *kids]:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
        proc.wait(timeout=10)


def test_a_party_failing_to_start_leaves_nothing_running(tmp_path: Path) -> None:
    source = ("cnt_rr", ProtocolSpec(epsilon=1.0, delta=1e-6, n=100))
    before = set(_children(os.getpid()))
    # max_frame below the config's minimum: every party exits at once with a usage error.
    with pytest.raises(esa.ESAError, match=r"exited with 2: .*max_frame_bytes"):
        start_chain(tmp_path, source, shufflers=2, max_frame=10)
    assert not [p for p in set(_children(os.getpid())) - before if _alive(p)]


@pytest.mark.slow
def test_result_of_a_split_mix_protocol_says_whether_every_share_arrived(tmp_path: Path) -> None:
    """RSum_DSG over TCP: with every share the RESULT is the sum and says ``complete``; with
    one share never submitted the sum is lost and the RESULT says so (NaN estimate, infinite
    std) instead of reporting a wrong number."""
    n = 400
    source = ("rsum_dsg", ProtocolSpec(epsilon=1.0, delta=1e-6, n=n))
    protocol = build_protocol(*source)
    assert protocol.share_spec is not None
    values = np.random.default_rng(3).random(n)

    def result(state: Path, drop: int) -> dict[str, Any]:
        with running_chain(state, source, shufflers=1, crypto_mode="ideal", key_epoch=1) as chain:
            route = [p.layer_public for p in crypto.KeyDirectory.load(state / "keys").route()]
            codec = esa.make_codec("ideal", message_size=protocol.message_size, layers=2)
            enc = esa.Encoder(protocol, codec, route, workers=1)
            sealed = enc.encode(values, rng=np.random.default_rng(0), epoch=1)
            reports = [r.tobytes() for r in sealed][drop:]

            async def epoch() -> dict[str, Any]:
                await submit_reports(chain.first.address, reports, key_epoch=1)
                await close_epoch(chain.first.address, chain.operator)
                await wait_processed(chain, timeout=60)
                return await query(chain.analyzer.query_address, esa.net.QueryKind.RESULT, {"n": n})

            return trio.run(epoch)

    shares = n * protocol.share_spec.shares
    lost = result(tmp_path / "lost", drop=1)
    assert lost["estimate_extra"]["complete"] is False
    assert lost["estimate_extra"]["shares_received"] == shares - 1
    assert lost["estimate"] == [None]  # NaN in JSON
    whole = result(tmp_path / "whole", drop=0)
    assert whole["estimate_extra"]["complete"] is True
    assert whole["estimate_extra"]["shares_received"] == shares
    assert abs(whole["estimate"][0] - values.sum()) < 5 * whole["expected_std"][0]


@pytest.mark.slow
def test_sigterm_stops_a_tcp_simulation_and_removes_its_keys(tmp_path: Path) -> None:
    """SIGTERM (what a job runner sends) must tear the run down as Ctrl-C does: parties
    stopped, the temporary directory with every party's private key removed."""
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    argv = [sys.executable, "-m", "simulations.cli", "simulate", "--protocol", "hist_kr"]
    argv += ["--n", "50000", "--transport", "tcp"]
    log = tmp_path / "stderr.txt"
    with open(log, "wb") as err:
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=err)
    try:
        deadline = time.monotonic() + 120
        while not any(tmp_path.glob("esa-tcp-*/keys/public.json")):
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline
            time.sleep(0.05)
        time.sleep(1.0)  # the parties are up; the run is encoding or submitting
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 128 + signal.SIGTERM
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert list(tmp_path.glob("esa-tcp-*")) == []
