"""Connection limits, shutdown during processing, and accept overload at a party service.

* A peer must not hold every connection slot: junk answered with REJECTs gives its slot up
  when a newcomer needs one, and one address holds at most ``max_connections_per_peer``.
* SIGTERM/SIGINT while an epoch is being processed stops the party at once; nothing of the
  epoch is committed, and after a restart it is processed exactly once.
* Running out of descriptors in ``accept`` is counted and logged once a minute, not as a
  traceback ten times a second.
"""

from __future__ import annotations

import errno
import functools
import logging
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import trio
import trio.testing

import crypto
import esa
from esa.net import (
    ACCEPT_RETRY_SECONDS,
    FrameStream,
    PartyService,
    _party,
    _processing,
    close_epoch,
    query,
    serve_listeners,
)
from esa.net import _wire as w
from esa.net._admission import address_group as _address_group
from esa.net._config import Limits, config_from_dict
from esa.net._inbox import Inbox
from protocols import ProtocolSpec, build_protocol
from simulations._tcp_run import running_chain, wait_processed
from tests._inmemory import Connect, drive

SOURCE = ("hist_kr", ProtocolSpec(epsilon=1.0, delta=1e-6, n=1000, domain=4))
PROTOCOL = build_protocol(*SOURCE)
KEY_EPOCH = 1
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def keydir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("limits")
    crypto.KeyDirectory.create(root / "keys", shufflers=1)
    return root


def _service_at(root: Path, state_dir: str, **limits: Any) -> PartyService:
    doc = {
        "role": "shuffler",
        "hop": 0,
        "state_dir": state_dir,
        "listen": {"host": "127.0.0.1", "port": 0},
        "tls": {"insecure_plaintext": True},  # TLS is tested in test_net_tls.py
        "next": {"host": "127.0.0.1", "port": 9},
        "keys": {"epochs": {str(KEY_EPOCH): "keys"}},
        "protocol": {"name": "hist_kr", "epsilon": 1.0, "delta": 1e-6, "n": 1000, "domain": 4},
        "limits": {"read_timeout_seconds": 5.0, "max_frame_bytes": 65536, **limits},
    }
    return PartyService(config_from_dict(doc, base=root, simulation=True), protocol=PROTOCOL)


def _reports(root: Path, count: int) -> list[bytes]:
    kd = crypto.KeyDirectory.load(root / "keys")
    codec = esa.make_codec("onion", message_size=PROTOCOL.message_size, layers=2)
    enc = esa.Encoder(PROTOCOL, codec, [p.layer_public for p in kd.route()], workers=1)
    msgs = PROTOCOL.randomize(np.arange(count) % 4, rng=np.random.default_rng(0))
    return list(enc.seal_messages(msgs, epoch=KEY_EPOCH, crowd_id=0, first_hop=0))


def _reason(payload: bytes) -> str:
    assert w.peek_kind(payload) is w.FrameKind.REJECT, payload
    return w.parse_reject(payload).reason.name.lower()


STATUS = w.Query(w.QueryKind.STATUS).to_bytes()
JUNK = b"\x01\x77"  # well framed, unknown kind: a REJECT, and the connection stays open


# ---------------------------------------------------------------------------- F2: slots


def test_junk_connections_give_their_slots_to_new_clients(keydir: Path) -> None:
    """Every slot held by a connection that sends junk (QA F2: a REJECT kept it open for
    good, and a real client got ``busy`` for as long as the junk went on)."""
    svc = _service_at(keydir, "state-junk", max_connections=4)
    good = _reports(keydir, 3)

    async def script(connect: Connect) -> None:
        junk = [await connect() for _ in range(4)]
        for i, fs in enumerate(junk):
            await fs.send(JUNK)
            assert _reason(await fs.receive()) == "unknown_kind"
            if i == 3:  # one is already sending its next frame: still the first to go
                await fs.stream.send_all(b"\x00\x00\x00\x10\x01")
        await trio.testing.wait_all_tasks_blocked()
        for _ in range(4):  # a new client each time, each served
            fs = await connect()
            await fs.send(w.SubmitFrame(KEY_EPOCH, tuple(good)).to_bytes())
            assert w.peek_kind(await fs.receive()) is w.FrameKind.ACK
        for fs in junk:  # every junk connection was closed for them, without a word
            assert await fs.stream.receive_some(10) == b""

    drive(svc, script, max_frame=2**20, read_timeout=10.0)
    assert svc.counters["connections_closed_for_room"] == 4
    assert svc.rejected["busy"] == 0


def test_connections_that_only_sent_valid_frames_keep_their_slots(keydir: Path) -> None:
    svc = _service_at(keydir, "state-valid", max_connections=2)

    async def script(connect: Connect) -> None:
        held = [await connect() for _ in range(2)]
        for fs in held:
            await fs.send(STATUS)
            assert w.peek_kind(await fs.receive()) is w.FrameKind.REPLY
        await trio.testing.wait_all_tasks_blocked()
        extra = await connect()
        assert _reason(await extra.receive()) == "busy"
        for fs in held:  # still served
            await fs.send(STATUS)
            assert w.peek_kind(await fs.receive()) is w.FrameKind.REPLY
        # The oldest refused connection goes first, among those refused most.
        await held[0].send(JUNK)
        await held[1].send(JUNK)
        await held[1].receive()
        await held[1].send(JUNK)
        await held[0].receive()
        await held[1].receive()
        await trio.testing.wait_all_tasks_blocked()
        newcomer = await connect()
        await newcomer.send(STATUS)
        assert w.peek_kind(await newcomer.receive()) is w.FrameKind.REPLY
        assert await held[1].stream.receive_some(10) == b""
        await held[0].send(STATUS)
        assert w.peek_kind(await held[0].receive()) is w.FrameKind.REPLY

    drive(svc, script, max_frame=2**20, read_timeout=10.0)
    assert svc.rejected["busy"] == 1
    assert svc.counters["connections_closed_for_room"] == 1


def test_one_address_holds_at_most_max_connections_per_peer(keydir: Path) -> None:
    """Valid frames from one address fill only its share of the slots (real sockets: the
    peer address is the kernel's)."""
    svc = _service_at(keydir, "state-peer", max_connections=8, max_connections_per_peer=2)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(svc._writer_loop)
            serve = functools.partial(trio.serve_tcp, svc.handle, 0, host="127.0.0.1")
            (listener,) = await nursery.start(serve)
            port = listener.socket.getsockname()[1]

            opened: list[trio.SocketStream] = []

            async def connect(source: str) -> FrameStream:
                stream = await trio.open_tcp_stream("127.0.0.1", port, local_address=source)
                opened.append(stream)
                return FrameStream(stream, max_frame=2**20, read_timeout=10.0)

            held = [await connect("127.0.0.2") for _ in range(2)]
            for fs in held:
                await fs.send(STATUS)
                assert w.peek_kind(await fs.receive()) is w.FrameKind.REPLY
            third = await connect("127.0.0.2")
            rej = w.parse_reject(await third.receive())
            assert rej.reason is w.RejectReason.BUSY
            assert "from your address" in rej.detail
            other = await connect("127.0.0.1")  # another address is served
            await other.send(STATUS)
            assert w.peek_kind(await other.receive()) is w.FrameKind.REPLY
            assert svc.admission.active == 3  # (the batch port's STATUS does not say)
            await held[0].stream.aclose()
            with trio.fail_after(5):  # its slot comes back once the party sees the close
                while True:
                    fs = await connect("127.0.0.2")
                    await fs.send(STATUS)
                    if w.peek_kind(await fs.receive()) is w.FrameKind.REPLY:
                        break
                    await trio.sleep(0.01)
            for stream in opened:
                await stream.aclose()
            nursery.cancel_scope.cancel()

    try:
        trio.run(main)
    finally:
        svc.close()
    assert svc.rejected["busy"] >= 1


def test_peers_are_grouped_by_ipv4_address_or_ipv6_slash_64() -> None:
    assert _address_group("192.0.2.7") == "192.0.2.7"
    assert _address_group("::ffff:192.0.2.7") == "192.0.2.7"  # dual-stack listener
    same = {_address_group("2001:db8:1:2::1"), _address_group("2001:db8:1:2:ffff::9")}
    assert same == {"2001:db8:1:2::/64"}
    assert _address_group("2001:db8:1:3::1") == "2001:db8:1:3::/64"
    assert _address_group("fe80::1%eth0") == "fe80::/64"
    assert _address_group("not an address") is None


@pytest.mark.parametrize(
    ("value", "message"),
    [(0, "0"), (True, "True"), ("8", "'8'")],
)
def test_max_connections_per_peer_is_validated(keydir: Path, value: Any, message: str) -> None:
    expected = rf"\[limits\] max_connections_per_peer must be an integer >= 1, got {message}"
    with pytest.raises(esa.ConfigError, match=expected):
        _service_at(keydir, "state-bad", max_connections_per_peer=value)
    assert Limits().max_connections_per_peer == 64


# ---------------------------------------------------------------------------- F3: shutdown


def test_cancelled_processing_stops_at_once_and_commits_nothing(keydir: Path) -> None:
    """The worker thread processing an epoch cannot be interrupted: a shutdown used to wait
    for it to finish and then drop its result anyway (QA F3). Now it is abandoned, nothing
    is committed, and the restarted party processes the epoch exactly once."""
    svc = _service_at(keydir, "state-stop")
    reports = _reports(keydir, 20)
    started, release, ended = threading.Event(), threading.Event(), threading.Event()
    outcome: list[BaseException] = []
    shuffle = svc._shuffle_epoch

    def slow_shuffle(*args: Any) -> dict[str, Any]:
        started.set()
        release.wait(timeout=10.0)  # stands for minutes of peeling
        try:
            return shuffle(*args)
        except BaseException as exc:
            outcome.append(exc)
            raise
        finally:
            ended.set()

    svc._shuffle_epoch = slow_shuffle  # type: ignore[method-assign]

    async def main() -> float:
        await svc._store_reports(KEY_EPOCH, tuple(reports))
        await svc._close_open_epochs(operator=True)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(svc._work_once)
            while not started.is_set():
                await trio.sleep(0.01)
            t0 = time.monotonic()
            nursery.cancel_scope.cancel()
        return time.monotonic() - t0

    try:
        stopped_after = trio.run(main)
    finally:
        svc.close()
    assert stopped_after < 2.0  # not the 10 s the "processing" takes
    release.set()
    assert ended.wait(timeout=30.0)
    # The abandoned thread stopped at its first progress point, inside the peeling ...
    assert [type(e).__name__ for e in outcome] == ["_Abandoned"]
    with Inbox(keydir / "state-stop" / "inbox.db", party="shuffler-1") as inbox:
        assert [e.epoch for e in inbox.epochs("closed")] == [0]  # ... and nothing was stored
        assert inbox.epochs("processed") == []

    again = _service_at(keydir, "state-stop")
    try:
        assert trio.run(again._work_once) is False  # processed; forwarding has no next hop
        (rec,) = again.inbox.epochs("processed")
        assert rec.stats["received"] == 20
        assert again.counters["epochs_processed"] == 1
    finally:
        again.close()


def _wait_until(done: Callable[[], bool], timeout: float = 30.0) -> None:
    """Wait in real time until ``done()`` (a worker thread, another process)."""
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, f"not done within {timeout} s"
        time.sleep(0.01)


def test_an_abandoned_worker_thread_stops_at_its_next_progress_point(keydir: Path) -> None:
    """The abandoned thread does not peel on for minutes in a process that lives on."""
    key = crypto.KeyDirectory.load(keydir / "keys").private("shuffler-1").layer
    running, stopped = threading.Event(), threading.Event()
    outcome: list[BaseException] = []

    def long_peeling() -> None:
        end = time.monotonic() + 10.0  # minutes, in a deployment
        try:
            while time.monotonic() < end:  # each call passes one progress point
                crypto.peel_batch([b"x" * 8], key, epoch=KEY_EPOCH, hop=0)
                running.set()
        except BaseException as exc:
            outcome.append(exc)
            raise
        finally:
            stopped.set()

    async def main() -> float:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_processing.compute, long_peeling)
            while not running.is_set():
                await trio.sleep(0.01)
            t0 = time.monotonic()
            nursery.cancel_scope.cancel()
        return time.monotonic() - t0

    assert trio.run(main) < 2.0
    assert stopped.wait(timeout=2.0)
    assert [type(e).__name__ for e in outcome] == ["_Abandoned"]


_SLOW_PARTY = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from esa.net import _service
    from esa.net._config import load_config

    shuffle = _service.PartyService._shuffle_epoch

    def slow(self, *args):
        Path(sys.argv[2]).touch()
        time.sleep(float(sys.argv[3]))  # processing that takes this long
        return shuffle(self, *args)

    _service.PartyService._shuffle_epoch = slow
    sys.exit(_service.serve(load_config(sys.argv[1], simulation=True)))
    """
)


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["TERM", "INT"])
def test_a_signal_during_processing_stops_the_party_and_loses_nothing(
    tmp_path: Path, signum: signal.Signals
) -> None:
    """``esa serve`` processes, is signalled midway, exits promptly with status 0; once
    restarted it processes the epoch again and the analyzer counts every acknowledged
    report exactly once."""
    processing = 30.0  # seconds the first shuffler's processing takes in this run
    with running_chain(tmp_path, SOURCE, shufflers=1, key_epoch=KEY_EPOCH) as chain:
        reports = _reports(tmp_path, 200)
        first = chain.first
        first.stop()
        (tmp_path / "state" / first.name / "port").unlink(missing_ok=True)
        marker = tmp_path / "processing"
        with open(first.log, "ab") as log:
            slow = subprocess.Popen(
                [sys.executable, "-c", _SLOW_PARTY, str(first.config), str(marker), "30"],
                cwd=ROOT,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        try:
            _wait_until((tmp_path / "state" / first.name / "port").exists)

            async def submit_and_close() -> int:
                stats = await esa.submit_reports(first.address, reports, key_epoch=KEY_EPOCH)
                await close_epoch(first.address, chain.operator)
                return stats.acknowledged

            assert trio.run(submit_and_close) == 200
            _wait_until(marker.exists)
            t0 = time.monotonic()
            os.kill(slow.pid, signum)
            rc = slow.wait(timeout=processing + 30)
            stopped_after = time.monotonic() - t0
        finally:
            if slow.poll() is None:
                os.killpg(slow.pid, signal.SIGKILL)
                slow.wait()
        assert rc == 0
        assert stopped_after < processing / 6, stopped_after
        with Inbox(tmp_path / "state" / first.name / "inbox.db", party=first.name) as inbox:
            assert len(inbox.epochs("closed")) == 1  # nothing of it was committed

        chain.restart(0)

        async def finish() -> tuple[dict[str, Any], dict[str, Any]]:
            await wait_processed(chain, timeout=60)
            status = await query(chain.first.query_address, w.QueryKind.STATUS)
            return status, await query(chain.analyzer.query_address, w.QueryKind.RESULT)

        status, result = trio.run(finish)
    assert status["counters"]["epochs_processed"] == 1  # processed again after the restart
    assert result["drop_check"] == {"ok": True, "problems": []}
    assert [h["received"] for h in result["hops"]] == [200, 200]
    assert result["messages_used"] == 200


# ---------------------------------------------------------------------------- F4: accept


class _Exhausted(trio.abc.Listener[trio.SocketStream]):
    """A listener whose first ``failures`` accepts fail as if descriptors had run out."""

    def __init__(self, inner: trio.SocketListener, failures: int) -> None:
        self.inner = inner
        self.socket = inner.socket
        self.failures = failures

    async def accept(self) -> trio.SocketStream:
        if self.failures:
            self.failures -= 1
            await trio.lowlevel.checkpoint()
            raise OSError(errno.EMFILE, os.strerror(errno.EMFILE))
        return await self.inner.accept()

    async def aclose(self) -> None:
        await self.inner.aclose()


def test_running_out_of_descriptors_is_counted_and_logged_once(
    keydir: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """QA F4: trio's accept loop logged a full traceback ten times a second while the
    party was out of descriptors. The party's own loop counts, logs one line, retries."""
    svc = _service_at(keydir, "state-emfile")
    real = trio.open_tcp_listeners

    async def exhausted(*args: Any, **kwargs: Any) -> list[_Exhausted]:
        return [_Exhausted(listener, 5) for listener in await real(*args, **kwargs)]

    monkeypatch.setattr(trio, "open_tcp_listeners", exhausted)

    async def main() -> dict[str, Any]:
        async with trio.open_nursery() as nursery:
            port = await nursery.start(svc.run)
            # The kernel queues the connections; the party accepts them after the failures
            # (the batch port answers the public STATUS, the query listener the full one).
            await query(esa.Address("127.0.0.1", port), w.QueryKind.STATUS)
            assert svc.query_port is not None
            status = await query(esa.Address("127.0.0.1", svc.query_port), w.QueryKind.STATUS)
            nursery.cancel_scope.cancel()
        return status

    caplog.set_level(logging.DEBUG)
    try:
        status = trio.run(main)
    finally:
        svc.close()
    # Five failures on each listener the party opens: its batch port and its query port.
    assert status["counters"]["accept_errors"] == 10
    err = capsys.readouterr().err
    assert err.count("cannot accept connections (EMFILE: Too many open files)") == 1
    assert "Traceback" not in err
    assert not [r for r in caplog.records if r.name.startswith("trio")]


def test_overload_retries_every_tenth_of_a_second_then_serves() -> None:
    failures: list[OSError] = []
    served: list[Any] = []

    class Flaky(trio.abc.Listener[Any]):
        def __init__(self) -> None:
            self.left = 50

        async def accept(self) -> Any:
            await trio.lowlevel.checkpoint()
            if self.left:
                self.left -= 1
                raise OSError(errno.ENFILE, os.strerror(errno.ENFILE))
            if served:
                await trio.sleep_forever()
            return "stream"

        async def aclose(self) -> None:
            await trio.lowlevel.checkpoint()

    async def handler(stream: Any) -> None:
        served.append((stream, trio.current_time()))

    async def main() -> None:
        start = trio.current_time()
        async with trio.open_nursery() as nursery:
            serve = functools.partial(
                serve_listeners, handler, [Flaky()], on_overload=failures.append
            )
            await nursery.start(serve)
            while not served:
                await trio.sleep(0.01)
            nursery.cancel_scope.cancel()
        assert served[0][1] - start == pytest.approx(50 * ACCEPT_RETRY_SECONDS, abs=0.05)

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert len(failures) == 50
    assert {f.errno for f in failures} == {errno.ENFILE}

    async def other_error() -> None:
        class Broken(Flaky):
            async def accept(self) -> Any:
                await trio.lowlevel.checkpoint()
                raise OSError(errno.EBADF, "closed")

        await serve_listeners(handler, [Broken()], on_overload=failures.append)

    with pytest.raises(BaseExceptionGroup) as info:  # not an overload: the service ends
        trio.run(other_error)
    assert info.group_contains(OSError)


def test_repeated_overload_is_logged_once_a_minute_with_a_count(
    keydir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    svc = _service_at(keydir, "state-logging")
    now = [1000.0]
    monkeypatch.setattr(_party.time, "monotonic", lambda: now[0])
    try:
        for _ in range(960):  # two minutes of failures, eight a second (exact in binary)
            svc._accept_failed(OSError(errno.EMFILE, os.strerror(errno.EMFILE)))
            now[0] += 0.125
    finally:
        svc.close()
    lines = [ln for ln in capsys.readouterr().err.splitlines() if "cannot accept" in ln]
    assert len(lines) == 2  # at 0 s and at 60 s
    assert "more times" not in lines[0]
    assert lines[1].endswith("(479 more times since last logged)")
    assert svc.counters["accept_errors"] == 960
