"""Hostile input and faults against the party services.

Most tests drive a service's connection handler over trio's in-memory streams (a mock clock
where timing matters); the crash test runs real processes on 127.0.0.1 and SIGKILLs one.
Each hostile frame must be answered with a REJECT naming its reason, counted under that
reason, and the service must go on serving the next client.
"""

from __future__ import annotations

import json
import socket
import sqlite3
import struct
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import trio
import trio.testing
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

import crypto
import esa
from esa.net import FrameStream, PartyService, batch_id_for, check_chain, query, submit_reports
from esa.net import _wire as w
from esa.net._config import config_from_dict, load_config, parse_address
from protocols import ProtocolSpec, build_protocol
from simulations._tcp_run import running_chain, wait_processed
from tests._inmemory import Connect

SOURCE = ("hist_kr", ProtocolSpec(epsilon=1.0, delta=1e-6, n=1000, domain=4))
PROTOCOL = build_protocol(*SOURCE)
KEY_EPOCH = 1


def _doc(hop: int, shufflers: int = 2, **extra: Any) -> dict[str, Any]:
    role = "analyzer" if hop == shufflers else "shuffler"
    doc: dict[str, Any] = {
        "role": role,
        "hop": hop,
        "state_dir": f"state-{hop}",
        "listen": {"host": "127.0.0.1", "port": 0},
        "tls": {"insecure_plaintext": True},  # TLS is tested in test_net_tls.py
        "keys": {"epochs": {str(KEY_EPOCH): "keys"}},
        "protocol": {"name": "hist_kr", "epsilon": 1.0, "delta": 1e-6, "n": 1000, "domain": 4},
        "limits": {"read_timeout_seconds": 5.0, "max_connections": 4, "max_frame_bytes": 65536},
        **extra,
    }
    if role == "shuffler":
        doc["next"] = {"host": "127.0.0.1", "port": 9}
    return doc


@pytest.fixture(scope="module")
def keydir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("deploy")
    crypto.KeyDirectory.create(root / "keys", shufflers=2)
    crypto.KeyDirectory.create(root / "keys2", shufflers=2)  # the next key epoch
    return root


def _service(root: Path, hop: int, **extra: Any) -> PartyService:
    return PartyService(
        config_from_dict(_doc(hop, **extra), base=root, simulation=True), protocol=PROTOCOL
    )


def _reports(
    root: Path, count: int, *, first_hop: int = 0, keys: str = "keys", key_epoch: int = KEY_EPOCH
) -> list[bytes]:
    kd = crypto.KeyDirectory.load(root / keys)
    codec = esa.make_codec("onion", message_size=PROTOCOL.message_size, layers=3)
    enc = esa.Encoder(PROTOCOL, codec, [p.layer_public for p in kd.route()], workers=1)
    values = np.arange(count) % 4
    msgs = PROTOCOL.randomize(values, rng=np.random.default_rng(0))
    return list(enc.seal_messages(msgs, epoch=key_epoch, crowd_id=0, first_hop=first_hop))


Client = Connect  # connect(query=True): the query listener


def _drive(
    svc: PartyService,
    script: Callable[[Client], Awaitable[None]],
    *,
    clock: trio.abc.Clock | None = None,
    background: tuple[Callable[[], Awaitable[None]], ...] = (),
) -> None:
    """Run ``script`` with a factory of in-memory connections served by ``svc.handle``
    (and the service's group-commit writer)."""

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(svc._writer_loop)
            for task in background:
                nursery.start_soon(task)

            async def connect(*, query: bool = False) -> FrameStream:
                # query: the query listener (RESULT is answered there only)
                client, server = trio.testing.memory_stream_pair()
                nursery.start_soon(svc.handle_query if query else svc.handle, server)
                return FrameStream(client, max_frame=2**24, read_timeout=60.0)

            await script(connect)
            nursery.cancel_scope.cancel()

    try:
        trio.run(main, clock=clock)
    finally:
        svc.close()


def _reason(payload: bytes) -> str:
    assert w.peek_kind(payload) is w.FrameKind.REJECT, payload
    return w.parse_reject(payload).reason.name.lower()


def test_wrong_size_frames_are_refused_from_their_header_before_any_split(
    keydir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 4 MiB SUBMIT (or unsigned BATCH) of 2-byte reports was split into two million
    objects on the event loop before its size was checked: refused from the header now."""
    hop0, hop1 = _service(keydir, 0), _service(keydir, 1)

    def no_split(*args: Any) -> Any:
        raise AssertionError("reports split before the size check")

    monkeypatch.setattr(w, "_split_reports", no_split)
    tiny = tuple(i.to_bytes(2, "big") for i in range(1_000))

    async def submit(connect: Client) -> None:
        fs = await connect()
        await fs.send(w.SubmitFrame(KEY_EPOCH, tiny).to_bytes())
        assert _reason(await fs.receive()) == "wrong_report_size"

    async def batch(connect: Client) -> None:
        fs = await connect()
        chunk = w.BatchChunk(0, 1, KEY_EPOCH, 0, bytes(32), 0, 1, tiny)
        await fs.send(chunk.signed_bytes() + bytes(64))  # not even signed
        assert _reason(await fs.receive()) == "wrong_report_size"

    _drive(hop0, submit)
    _drive(hop1, batch)
    assert hop0.rejected["wrong_report_size"] == hop1.rejected["wrong_report_size"] == 1


def test_garbage_then_valid_submit_on_same_connection(keydir: Path) -> None:
    svc = _service(keydir, 0)
    good = _reports(keydir, 5)

    async def script(connect: Client) -> None:
        fs = await connect()
        for garbage, reason in [
            (b"\x07\x01hello", "bad_version"),
            (b"\x01\x77", "unknown_kind"),
            (b"\x01\x01\x00", "malformed_frame"),
            (w.SubmitFrame(KEY_EPOCH, (b"short",)).to_bytes(), "wrong_report_size"),
            (w.SubmitFrame(99, tuple(good)).to_bytes(), "unknown_key_epoch"),
            (w.Ack(1, 1).to_bytes(), "unexpected_kind"),
        ]:
            await fs.send(garbage)
            assert _reason(await fs.receive()) == reason
        await fs.send(w.SubmitFrame(KEY_EPOCH, tuple(good)).to_bytes())
        assert w.parse_ack(await fs.receive()) == w.Ack(5, 0)
        await fs.send(w.SubmitFrame(KEY_EPOCH, tuple(good)).to_bytes())  # retry: no double
        assert w.parse_ack(await fs.receive()) == w.Ack(0, 5)

    _drive(svc, script)
    assert dict(svc.rejected) == {
        "bad_version": 1,
        "unknown_kind": 1,
        "malformed_frame": 1,
        "wrong_report_size": 1,
        "unknown_key_epoch": 1,
        "unexpected_kind": 1,
    }
    with esa.net._inbox.Inbox(keydir / "state-0" / "inbox.db", party="shuffler-1") as inbox:
        assert inbox.open_count() == {KEY_EPOCH: 5}


def test_oversized_prefix_and_half_open_close_only_that_connection(keydir: Path) -> None:
    svc = _service(keydir, 0, state_dir="state-0b")
    good = _reports(keydir, 3)

    async def script(connect: Client) -> None:
        fs = await connect()
        await fs.stream.send_all(b"\xff\xff\xff\xf0")  # 4 GB announced: refused unread
        assert _reason(await fs.receive()) == "oversized_frame"
        assert await fs.stream.receive_some(10) == b""  # and the connection is closed
        fs = await connect()
        await fs.stream.send_all(struct.pack(">I", 500) + b"x" * 100)  # half a frame …
        await fs.stream.aclose()  # … then gone
        await trio.testing.wait_all_tasks_blocked()
        fs = await connect()  # the next client is served
        await fs.send(w.SubmitFrame(KEY_EPOCH, tuple(good)).to_bytes())
        assert w.parse_ack(await fs.receive()).stored == 3

    _drive(svc, script)
    assert svc.rejected["oversized_frame"] == 1
    assert svc.rejected["half_open"] == 1


def test_slow_connection_times_out_mock_clock(keydir: Path) -> None:
    svc = _service(keydir, 0, state_dir="state-0c")
    clock = trio.testing.MockClock(autojump_threshold=0)

    async def script(connect: Client) -> None:
        fs = await connect()
        start = trio.current_time()

        # Slow loris: one byte of a frame every 2 s; each read is short, the frame is not.
        async def trickle() -> None:
            for b in struct.pack(">I", 20) + b"\x01\x01" * 10:
                await fs.stream.send_all(bytes([b]))
                await trio.sleep(2.0)

        with pytest.raises(trio.BrokenResourceError):  # the server hangs up on it
            await trickle()
        assert _reason(await fs.receive()) == "timeout"
        assert trio.current_time() - start < 13.0  # cut off at the 5 s deadline, not later
        fs = await connect()  # silent client: nothing at all
        assert _reason(await fs.receive()) == "timeout"

    _drive(svc, script, clock=clock)
    assert svc.rejected["timeout"] == 2


def test_concurrent_frames_share_commits(keydir: Path) -> None:
    svc = _service(keydir, 0, state_dir="state-0h", limits={"max_connections": 64})
    reps = _reports(keydir, 40)

    async def script(connect: Client) -> None:
        conns = [await connect() for _ in range(20)]
        for i, fs in enumerate(conns):  # twenty frames in flight at once
            await fs.send(w.SubmitFrame(KEY_EPOCH, tuple(reps[2 * i : 2 * i + 2])).to_bytes())
        acks = [w.parse_ack(await fs.receive()) for fs in conns]
        assert sum(a.stored for a in acks) == 40

    _drive(svc, script)
    # Each ACK followed its frame's commit, but the frames shared a few commits (fsyncs).
    assert 1 <= svc.counters["commits"] <= 10
    with esa.net._inbox.Inbox(keydir / "state-0h" / "inbox.db", party="shuffler-1") as inbox:
        assert inbox.open_count() == {KEY_EPOCH: 40}


def test_too_many_connections_is_busy(keydir: Path) -> None:
    svc = _service(keydir, 0, state_dir="state-0d")

    async def script(connect: Client) -> None:
        held = [await connect() for _ in range(4)]
        await trio.testing.wait_all_tasks_blocked()
        extra = await connect()
        assert _reason(await extra.receive()) == "busy"
        await held[0].stream.aclose()
        await trio.testing.wait_all_tasks_blocked()
        again = await connect()
        await again.send(w.Query(w.QueryKind.STATUS).to_bytes())
        assert w.peek_kind(await again.receive()) is w.FrameKind.REPLY

    _drive(svc, script)
    assert svc.rejected["busy"] == 1


def _chunk(reports: list[bytes], *, sender: int = 0, receiver: int = 1, epoch: int = 0) -> Any:
    return w.BatchChunk(sender, receiver, KEY_EPOCH, epoch, bytes(32), 0, 1, tuple(reports))


def test_batch_signatures_replays_and_wrong_hops(keydir: Path) -> None:
    svc = _service(keydir, 1)
    kd = crypto.KeyDirectory.load(keydir / "keys")
    hop0 = kd.private(crypto.shuffler_name(0)).signing
    hop1 = kd.private(crypto.shuffler_name(1)).signing
    reps = _reports(keydir, 6, first_hop=1)
    good = _chunk(reps)

    async def script(connect: Client) -> None:
        fs = await connect()
        cases = [
            (good.sign(Ed25519PrivateKey.generate()), "bad_signature"),  # wrong signer
            (good.sign(hop0)[:-64] + bytes(64), "bad_signature"),  # zeroed signature
            (good.signed_bytes(), "malformed_frame"),  # signature missing: 64 bytes short
            (_chunk(reps, receiver=2).sign(hop0), "wrong_hop"),  # addressed to hop 2
            (_chunk(reps, sender=1, receiver=1).sign(hop0), "wrong_hop"),
            (_chunk(reps, sender=0).sign(hop1), "bad_signature"),  # hop 1 posing as hop 0
            (_chunk([r[:-1] for r in reps]).sign(hop0), "wrong_report_size"),
            (w.SubmitFrame(KEY_EPOCH, tuple(reps)).to_bytes(), "wrong_hop"),  # client → hop 1
        ]
        for payload, reason in cases:
            await fs.send(payload)
            assert _reason(await fs.receive()) == reason, reason
        await fs.send(good.sign(hop0))
        assert w.parse_ack(await fs.receive()) == w.Ack(6, 0)
        await fs.send(good.sign(hop0))  # replay of the same signed chunk: a harmless resend
        assert w.parse_ack(await fs.receive()) == w.Ack(0, 6)
        # A second, different batch claiming the same epoch is refused.
        other = w.BatchChunk(0, 1, KEY_EPOCH, 0, b"\x01" * 32, 0, 1, tuple(reps))
        await fs.send(other.sign(hop0))
        assert _reason(await fs.receive()) == "conflicting_batch"
        # So is other content under the stored batch's own ids: what a sender that lost
        # its inbox sends when it numbers its epochs from 0 again.
        fresh = _chunk([bytes([7]) + r[1:] for r in reps])
        assert fresh.batch_id == good.batch_id
        await fs.send(fresh.sign(hop0))
        assert _reason(await fs.receive()) == "conflicting_batch"

    _drive(svc, script)
    assert svc.rejected["bad_signature"] == 3
    assert svc.rejected["malformed_frame"] == 1
    assert svc.rejected["wrong_hop"] == 3
    assert svc.rejected["conflicting_batch"] == 2
    assert "replayed_batch" not in svc.rejected
    assert svc.counters["duplicate_frames"] == 1
    assert svc.counters["reports_acknowledged"] == 6


def test_counts_must_be_one_whole_chain(keydir: Path) -> None:
    """Statements are signed one by one: genuine ones recombined (a hop left out, another
    epoch's mixed in) are refused, so they cannot get ahead of the real chain."""
    svc = _service(keydir, 2, state_dir="state-a7")
    kd = crypto.KeyDirectory.load(keydir / "keys")
    signers = [kd.private(crypto.shuffler_name(h)).signing for h in range(2)]

    def statement(hop: int, epoch: int) -> w.CountStatement:
        bid = bytes([hop, epoch]) * 16
        return w.CountStatement(hop, KEY_EPOCH, epoch, bid, 10, 0, 0, 0, 0, 10).signed_by(
            signers[hop]
        )

    async def script(connect: Client) -> None:
        fs = await connect()
        for chain in [(statement(1, 0),), (statement(0, 5), statement(1, 0))]:
            await fs.send(w.CountsFrame(chain).to_bytes())
            assert w.parse_reject(await fs.receive()).detail.startswith("counts must chain")
        # A whole chain passes that check (and waits for its batch's chunks).
        await fs.send(w.CountsFrame((statement(0, 0), statement(1, 0))).to_bytes())
        assert "no chunk yet" in w.parse_reject(await fs.receive()).detail

    _drive(svc, script)


def test_control_needs_the_operator_key(keydir: Path) -> None:
    op = Ed25519PrivateKey.generate()
    pub = op.public_key().public_bytes_raw().hex()
    svc = _service(keydir, 0, state_dir="state-0e", operator={"public_key": pub})
    now = int(time.time() * 1000)
    frame = w.ControlFrame(w.ControlCommand.CLOSE_EPOCH, now, target="shuffler-1")

    async def script(connect: Client) -> None:
        fs = await connect()
        await fs.send(frame.sign(Ed25519PrivateKey.generate()))
        assert _reason(await fs.receive()) == "bad_signature"
        await fs.send(frame.sign(op))
        # Nothing open: the close still records one (empty) epoch.
        assert w.parse_ack(await fs.receive()) == w.Ack(1, 0)
        await fs.send(frame.sign(op))  # the same signed frame again: a replay
        assert _reason(await fs.receive()) == "stale_control"
        old = w.ControlFrame(w.ControlCommand.CLOSE_EPOCH, now - 3_600_000, target="shuffler-1")
        await fs.send(old.sign(op))  # an hour old
        assert _reason(await fs.receive()) == "stale_control"
        later = w.ControlFrame(w.ControlCommand.CLOSE_EPOCH, now + 1, target="shuffler-1")
        await fs.send(later.sign(op))
        assert w.parse_ack(await fs.receive()) == w.Ack(1, 0)

    _drive(svc, script)
    # After a restart the same captured command is still refused.
    svc = _service(keydir, 0, state_dir="state-0e", operator={"public_key": pub})

    async def replay(connect: Client) -> None:
        fs = await connect()
        await fs.send(frame.sign(op))
        assert _reason(await fs.receive()) == "stale_control"

    _drive(svc, replay)


def test_epoch_rule_size_and_deadline(keydir: Path) -> None:
    svc = _service(
        keydir, 0, state_dir="state-0f", epoch={"max_reports": 8, "deadline_seconds": 2.0}
    )
    reps = _reports(keydir, 12)

    async def script(connect: Client) -> None:
        fs = await connect()
        await fs.send(w.SubmitFrame(KEY_EPOCH, tuple(reps[:8])).to_bytes())  # size reached
        await fs.receive()
        with trio.fail_after(20):
            while svc.counters["epochs_closed"] < 1:
                await trio.sleep(0.01)
        sent = trio.current_time()
        await fs.send(w.SubmitFrame(KEY_EPOCH, tuple(reps[8:])).to_bytes())  # below the size
        await fs.receive()
        with trio.fail_after(20):
            while svc.counters["epochs_closed"] < 2:
                await trio.sleep(0.01)
        assert svc.last_epoch_closed_at is not None
        # Closed by the deadline, which starts when the loop sees the first open report.
        assert svc.last_epoch_closed_at - sent >= 2.0

    _drive(svc, script, background=(svc._epoch_loop,))
    with esa.net._inbox.Inbox(keydir / "state-0f" / "inbox.db", party="shuffler-1") as inbox:
        assert [len(inbox.epoch_reports(e.epoch)) for e in inbox.epochs("closed")] == [8, 4]


def test_key_epochs_rotate_and_retire(keydir: Path) -> None:
    both = {"epochs": {"1": "keys", "2": "keys2"}}
    op = Ed25519PrivateKey.generate()
    extra = {
        "state_dir": "state-rot",
        "operator": {"public_key": op.public_key().public_bytes_raw().hex()},
    }
    old, new = _reports(keydir, 5), _reports(keydir, 4, keys="keys2", key_epoch=2)
    svc = _service(keydir, 0, keys=both, **extra)

    async def script(connect: Client) -> None:
        fs = await connect()
        for batch in (old, new):
            frame = w.SubmitFrame(int(batch is new) + 1, tuple(batch))
            await fs.send(frame.to_bytes())
            assert w.parse_ack(await fs.receive()).stored == len(batch)
        await fs.send(
            w.ControlFrame(
                w.ControlCommand.CLOSE_EPOCH, int(time.time() * 1000), target="shuffler-1"
            ).sign(op)
        )
        assert w.parse_ack(await fs.receive()).stored == 2  # one epoch per key epoch

    _drive(svc, script)
    with pytest.raises(esa.ConfigError, match=r"key epochs \[1\] still have unprocessed"):
        _service(keydir, 0, keys={"epochs": {"2": "keys2"}}, **extra)
    svc = _service(keydir, 0, keys=both, **extra)

    async def process(connect: Client) -> None:
        for rec in await svc._db(svc.inbox.epochs, "closed"):
            await svc._process(rec)
        stats = [e.stats for e in await svc._db(svc.inbox.epochs, "processed")]
        assert [(s["key_epoch"], s["received"], s["forwarded"]) for s in stats] == [
            (1, 5, 5),
            (2, 4, 4),
        ]

    _drive(svc, process)
    svc = _service(keydir, 0, keys={"epochs": {"2": "keys2"}}, **extra)
    assert svc.inbox.key_epochs_seen() == [2]  # epoch 1's replay digests are retired

    async def after(connect: Client) -> None:
        fs = await connect()
        await fs.send(w.SubmitFrame(1, tuple(old)).to_bytes())
        assert _reason(await fs.receive()) == "unknown_key_epoch"

    _drive(svc, after)


def test_internal_errors_are_answered_and_counted(
    keydir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    svc = _service(keydir, 2, state_dir="state-a1")

    async def broken(params: dict[str, Any]) -> dict[str, Any]:
        raise ValueError("estimator exploded")

    async def script(connect: Client) -> None:
        fs = await connect(query=True)
        await fs.send(w.Query(w.QueryKind.RESULT, b'{"n": "many"}').to_bytes())
        assert _reason(await fs.receive()) == "malformed_frame"
        await fs.send(w.Query(w.QueryKind.RESULT, b"[1, 2]").to_bytes())
        assert _reason(await fs.receive()) == "malformed_frame"
        monkeypatch.setattr(svc, "_result", broken)
        await fs.send(w.Query(w.QueryKind.RESULT, b"{}").to_bytes())
        assert _reason(await fs.receive()) == "internal"
        await fs.send(w.Query(w.QueryKind.STATUS).to_bytes())  # still serving
        assert w.peek_kind(await fs.receive()) is w.FrameKind.REPLY

    _drive(svc, script)
    assert svc.rejected == {"malformed_frame": 2, "internal": 1}


def test_deeply_nested_query_body_is_malformed_not_fatal(keydir: Path) -> None:
    """json.loads raises RecursionError, not ValueError, past its nesting limit: one 5 KB
    frame from anyone who can reach the query port must not stop the party."""
    svc = _service(keydir, 2, state_dir="state-a2")

    async def script(connect: Client) -> None:
        fs = await connect()
        await fs.send(w.Query(w.QueryKind.STATUS, b"[" * 5000).to_bytes())
        assert _reason(await fs.receive()) == "malformed_frame"
        await fs.send(w.Query(w.QueryKind.STATUS).to_bytes())  # still serving
        assert w.peek_kind(await fs.receive()) is w.FrameKind.REPLY

    _drive(svc, script)
    assert svc.rejected == {"malformed_frame": 1}


def test_result_queries_out_of_range_or_before_any_epoch(keydir: Path) -> None:
    # An [auditor] key, so that malformed trap openings reach their field checks (without
    # one every trap frame is refused as bad_signature: tests/test_net_traps_auth.py).
    auditor = Ed25519PrivateKey.generate().public_key().public_bytes_raw().hex()
    svc = _service(keydir, 2, state_dir="state-a6", auditor={"public_key": auditor})

    async def script(connect: Client) -> None:
        fs = await connect(query=True)
        await fs.send(w.Query(w.QueryKind.RESULT, b"{}").to_bytes())
        body = json.loads(w.parse_reply(await fs.receive()).body)
        assert body["epochs"] == 0
        assert body["estimate"] == [None] * 4  # no estimate, rather than one of no data
        assert body["estimate_extra"]["no_epoch_processed"] is True
        for bad, reason in [
            (b'{"n": 1180591620717411303424}', "malformed_frame"),  # 2**70
            (b'{"signature": "", "key_epoch": 1099511627776, "reports": []}', "bad_trap_opening"),
            (b'{"signature": "", "key_epoch": Infinity, "reports": []}', "bad_trap_opening"),
            (b'{"signature": "", "key_epoch": 1.5, "reports": []}', "bad_trap_opening"),
        ]:
            what = w.QueryKind.RESULT if b"reports" not in bad else w.QueryKind.TRAP_OPEN
            await fs.send(w.Query(what, bad).to_bytes())
            assert _reason(await fs.receive()) == reason

    _drive(svc, script)
    assert svc.rejected == {"malformed_frame": 1, "bad_trap_opening": 3}


def test_an_epoch_held_at_hop_0_is_not_empty() -> None:
    def record(first_received: int) -> esa.net._inbox.EpochRecord:
        first = {"hop": 0, "received": first_received, "held": first_received}
        stats = {"analyzer": {"received": 0}, "chain": [first, {"hop": 1, "received": 0}]}
        return esa.net._inbox.EpochRecord(0, 1, "processed", None, None, stats)

    assert esa.net._chain.is_empty(record(0))
    assert not esa.net._chain.is_empty(record(10))  # ten reports, all held below the threshold


def test_storage_failures_are_refused_for_a_resend_and_lose_nothing(
    keydir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A locked or full inbox refuses the frame (``busy`` / ``internal``, both resent by
    clients) and keeps serving; nothing is acknowledged that was not stored."""
    svc = _service(keydir, 0, state_dir="state-0s")
    good = _reports(keydir, 6)
    real = svc.inbox.add_report_groups
    failures = [
        sqlite3.OperationalError("database is locked"),
        sqlite3.OperationalError("database or disk is full"),
    ]

    def flaky(groups: Any) -> Any:
        if failures:
            raise failures.pop(0)
        return real(groups)

    monkeypatch.setattr(svc.inbox, "add_report_groups", flaky)

    async def script(connect: Client) -> None:
        fs = await connect()
        frame = w.SubmitFrame(KEY_EPOCH, tuple(good)).to_bytes()
        await fs.send(frame)
        assert _reason(await fs.receive()) == "busy"
        await fs.send(frame)
        assert _reason(await fs.receive()) == "internal"
        await fs.send(frame)  # the client's resend, once the disk has room again
        assert w.parse_ack(await fs.receive()) == w.Ack(6, 0)

    _drive(svc, script)
    assert svc.rejected == {"busy": 1, "internal": 1}
    with esa.net._inbox.Inbox(keydir / "state-0s" / "inbox.db", party="shuffler-1") as inbox:
        assert inbox.open_count() == {KEY_EPOCH: 6}


def test_work_loop_survives_a_failing_inbox(
    keydir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    svc = _service(keydir, 2, state_dir="state-a3")
    calls = []

    def broken(*args: Any) -> Any:
        calls.append(args)
        raise sqlite3.OperationalError("database or disk is full")

    async def inline(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)  # no worker thread, so the mock clock jumps only on sleeps

    monkeypatch.setattr(svc.inbox, "epochs", broken)
    monkeypatch.setattr(svc, "_db", inline)

    async def main() -> None:
        with trio.move_on_after(5.0):  # mock clock: 5 s of retries, instantly
            await svc._work_loop()

    try:
        trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    finally:
        svc.close()
    assert len(calls) > 3  # retried with backoff, not crashed
    assert svc.counters["storage_errors"] == len(calls)
    logged = capsys.readouterr().err
    assert logged.count("processing paused, will retry") == 1  # told once, not every retry


def test_forward_failure_is_logged_once_and_shown_in_status(
    keydir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    svc = _service(keydir, 0, state_dir="state-0w")  # its next hop, port 9, is not there
    reps = _reports(keydir, 4)

    async def main() -> None:
        await svc._store_reports(KEY_EPOCH, tuple(reps))
        await svc._close_open_epochs(operator=True)
        assert await svc._work_once() is False
        assert await svc._work_once() is False
        status = await svc.status()
        assert status["counters"]["forward_failures"] == 2
        assert "connect to 127.0.0.1:9 failed" in status["last_forward_error"]

    try:
        trio.run(main)
    finally:
        svc.close()
    logged = capsys.readouterr().err
    assert logged.count("cannot forward epoch 0 to 127.0.0.1:9, will retry") == 1


def test_state_dir_takes_one_party_at_a_time(keydir: Path) -> None:
    first = _service(keydir, 2, state_dir="state-a4")
    try:
        with pytest.raises(esa.ConfigError, match="in use by another running party"):
            _service(keydir, 2, state_dir="state-a4")
    finally:
        first.close()
    _service(keydir, 2, state_dir="state-a4").close()  # released on close


def test_unusable_state_dir_or_inbox_is_a_config_error(keydir: Path) -> None:
    (keydir / "a-file").write_text("not a directory")
    with pytest.raises(esa.ConfigError, match="cannot use state_dir"):
        _service(keydir, 2, state_dir="a-file")
    (keydir / "state-bad").mkdir()
    (keydir / "state-bad" / "inbox.db").write_bytes(b"garbage" * 200)
    with pytest.raises(esa.ConfigError, match="cannot open the inbox"):
        _service(keydir, 2, state_dir="state-bad")
    _service(keydir, 2, state_dir="state-bad2").close()  # and the lock was released
    (keydir / "state-bad" / "inbox.db").unlink()
    _service(keydir, 2, state_dir="state-bad").close()


def test_port_in_use_is_one_config_error(keydir: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        doc = _doc(2, state_dir="state-a5", listen={"host": "127.0.0.1", "port": port})
        doc["protocol"] = {"name": "hist_kr", "epsilon": 1.0, "delta": 1e-6, "n": 1000}
        config = config_from_dict(doc, base=keydir, simulation=True)
        with pytest.raises(esa.ConfigError, match=f"cannot listen on 127.0.0.1:{port}"):
            esa.net._service.serve(config)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"epsilon": "abc"}, "epsilon must be a number"),
        ({"domain": "x"}, "domain must be a number"),
        ({"options": 5}, r"\[protocol.options\] must be a table"),
        ({"bound": 3}, "bound must be a bound's name"),
        ({"n": None}, "needs 'n'"),
    ],
)
def test_protocol_table_errors(change: dict[str, Any], message: str) -> None:
    spec: dict[str, Any] = {"name": "hist_kr", "epsilon": 1.0, "delta": 1e-6, "n": 100}
    spec.update(change)
    spec = {k: v for k, v in spec.items() if v is not None}
    with pytest.raises(esa.ConfigError, match=message):
        esa.net.load_protocol(spec)


def test_reports_layered_for_another_hop_are_counted_invalid(keydir: Path) -> None:
    """Right size, wrong hop: a report whose outer layer is for shuffler 2 cannot be peeled
    by shuffler 1. The first shuffler peels at intake, so it drops and counts those reports
    there, and stores and acknowledges the rest of the frame, which goes on."""
    op = Ed25519PrivateKey.generate()
    svc = _service(
        keydir,
        0,
        state_dir="state-0g",
        operator={"public_key": op.public_key().public_bytes_raw().hex()},
    )
    kd = crypto.KeyDirectory.load(keydir / "keys")
    route = [p.layer_public for p in kd.route()]
    codec = esa.make_codec("onion", message_size=PROTOCOL.message_size, layers=3)
    swapped = esa.Encoder(PROTOCOL, codec, [route[1], route[0], route[2]], workers=1)
    msgs = PROTOCOL.randomize(np.arange(4) % 4, rng=np.random.default_rng(0))
    wrong = list(swapped.seal_messages(msgs, epoch=KEY_EPOCH, crowd_id=0, first_hop=0))
    good = _reports(keydir, 6)

    async def script(connect: Client) -> None:
        fs = await connect()
        await fs.send(w.SubmitFrame(KEY_EPOCH, tuple(good + wrong)).to_bytes())
        assert w.parse_ack(await fs.receive()) == w.Ack(6, 0)  # the 4 that do not open dropped
        await fs.send(
            w.ControlFrame(
                w.ControlCommand.CLOSE_EPOCH, int(time.time() * 1000), target="shuffler-1"
            ).sign(op)
        )
        await fs.receive()
        (rec,) = await svc._db(svc.inbox.epochs, "closed")
        await svc._process(rec)
        (done,) = await svc._db(svc.inbox.epochs, "processed")
        assert (done.stats["received"], done.stats["invalid"], done.stats["forwarded"]) == (
            6,
            0,
            6,
        )
        assert svc.counters["invalid_reports_dropped"] == 4

    _drive(svc, script)


def test_result_messages_come_in_pages(keydir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import esa.net._queries as service_module

    svc = _service(keydir, 2, state_dir="state-a2")
    rows = [bytes([i % 4]) for i in range(10)]
    svc.inbox.add_chunk(
        batch_id=bytes(32), epoch=0, key_epoch=KEY_EPOCH, chunk_index=0, chunk_count=1, reports=[]
    )
    svc.inbox.add_counts(batch_id=bytes(32), counts=b"unused")
    counters = {"hop": 2, "role": "analyzer", "received": 10, "invalid": 0, "replayed": 0}
    counters |= {"held": 0, "fakes_added": 0, "forwarded": 10}
    stats = {"analyzer": counters, "chain": [], "problems": [], "fakes": 0}
    svc.inbox.commit_processed(0, stats=stats, output=rows)
    monkeypatch.setattr(service_module, "_MESSAGE_PAGE_BYTES", 4)
    got: list[bytes] = []

    async def script(connect: Client) -> None:
        fs = await connect(query=True)
        while True:
            params = {"n": 10, "messages": True, "messages_offset": len(got)}
            await fs.send(w.Query(w.QueryKind.RESULT, json.dumps(params).encode()).to_bytes())
            reply = json.loads(w.parse_reply(await fs.receive()).body)
            assert reply["messages_total"] == 10
            page = bytes.fromhex(reply["messages_hex"])
            assert len(page) <= 4
            if not page:
                break
            got.extend(page[i : i + 1] for i in range(len(page)))

    _drive(svc, script)
    assert got == rows


def test_check_chain_detects_drops_and_lies() -> None:
    def st(hop: int, received: int, forwarded: int, fakes: int = 0) -> w.CountStatement:
        invalid = received + fakes - forwarded
        return w.CountStatement(hop, 1, 0, bytes(32), received, invalid, 0, 0, fakes, forwarded)

    honest = (st(0, 100, 102, 2), st(1, 102, 104, 2))
    assert check_chain(honest, hops=2, epoch=0, received=104) == []
    # hop 1 silently dropped 10 after signing what it forwarded: the analyzer sees fewer.
    assert "analyzer received 94" in check_chain(honest, hops=2, epoch=0, received=94)[0]
    # hop 1 claims to have received less than hop 0 forwarded.
    bad = (st(0, 100, 102, 2), st(1, 90, 92, 2))
    assert any("hop 1 received 90" in p for p in check_chain(bad, hops=2, epoch=0, received=92))
    lie = (
        st(0, 100, 102, 2),
        w.CountStatement(1, 1, 0, bytes(32), 102, 0, 0, 0, 2, 90),  # does not add up
    )
    assert any("do not add up" in p for p in check_chain(lie, hops=2, epoch=0, received=90))
    assert check_chain(honest[:1], hops=2, epoch=0, received=102)  # a missing hop


def test_batch_ids_are_idempotent() -> None:
    assert batch_id_for(b"k" * 32, 1, 5) == batch_id_for(b"k" * 32, 1, 5)
    assert len({batch_id_for(b"k" * 32, 1, e) for e in range(50)}) == 50
    assert batch_id_for(b"k" * 32, 1, 5) != batch_id_for(b"j" * 32, 1, 5)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"role": "mixer"}, "role must be one of"),
        ({"hop": -1}, "hop must be an integer >= 0"),
        ({"listen": {"host": "127.0.0.1", "port": 70000}}, "port must be <= 65535"),
        ({"keys": {"epochs": {}}}, r"\[keys.epochs\]"),
        ({"keys": {"epochs": {"x": "keys"}}}, "key epoch must be an integer"),
        ({"limits": {"max_frame_bytes": 2**40}}, "max_frame_bytes must be <="),
        ({"limits": {"read_timeout_seconds": 0}}, "read_timeout_seconds must be a finite"),
        ({"limits": {"read_timeout_seconds": float("inf")}}, "must be a finite number > 0"),
        ({"keys": {"epochs": {"\u0661": "keys"}}}, "key epoch must be an integer"),
        ({"limits": {"bogus": 1}}, "unknown keys"),
        ({"operator": {"public_key": "abc"}}, "64 hex digits"),
        ({"next": None}, "needs \\[next\\]"),
        ({"surprise": 1}, "unknown top-level keys"),
        ({"crypto": "rot13"}, "crypto must be"),
    ],
)
def test_config_errors_quote_the_value(change: dict[str, Any], message: str) -> None:
    doc = _doc(0)
    doc.update(change)
    if change.get("next", 1) is None:
        del doc["next"]
    with pytest.raises(esa.ConfigError, match=message):
        config_from_dict(doc, base=Path("/tmp"), simulation=True)


def test_load_config_file_errors(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("role = [unclosed")
    with pytest.raises(esa.ConfigError, match="invalid TOML"):
        load_config(bad)
    with pytest.raises(esa.ConfigError, match="cannot read"):
        load_config(tmp_path / "missing.toml")
    binary = tmp_path / "binary.toml"
    binary.write_bytes(b"\xff\xfe")
    with pytest.raises(esa.ConfigError, match="not a UTF-8 text file"):
        load_config(binary)
    with pytest.raises(esa.ConfigError, match="HOST:PORT"):
        parse_address("localhost")
    assert parse_address("[::1]:80").port == 80


# ---------------------------------------------------------------------------- processes


@pytest.mark.slow
def test_sigkill_mid_epoch_loses_nothing_and_doubles_nothing(tmp_path: Path) -> None:
    """Kill hop 0 with reports acknowledged but the epoch open, and hop 1 before the batch
    reaches it; restart both. The analyzer must count exactly the acknowledged reports."""
    with running_chain(
        tmp_path, SOURCE, shufflers=2, key_epoch=KEY_EPOCH, read_timeout=5.0, chunk_reports=100
    ) as chain:
        kd = crypto.KeyDirectory.load(tmp_path / "keys")
        codec = esa.make_codec("onion", message_size=PROTOCOL.message_size, layers=3)
        enc = esa.Encoder(PROTOCOL, codec, [p.layer_public for p in kd.route()], workers=1)
        batch = list(enc.encode(np.arange(600) % 4, rng=np.random.default_rng(3), epoch=KEY_EPOCH))

        async def phase(reports: list[bytes]) -> int:
            stats = await submit_reports(
                chain.first.address, reports, key_epoch=KEY_EPOCH, connections=8, frame_reports=25
            )
            assert stats.failed_frames == 0
            return stats.stored

        stored = trio.run(phase, batch[:300])
        chain.first.kill()  # SIGKILL: 300 acknowledged, epoch still open
        chain.restart(0)
        # Clients retry part of what they sent (their ACKs "lost"): must not double.
        stored += trio.run(phase, batch[250:])
        assert stored == 600
        chain.parties[1].kill()  # the next hop is down when the epoch closes

        async def close_and_wait() -> dict[str, Any]:
            from esa.net import close_epoch

            await close_epoch(chain.first.address, chain.operator)
            # Hop 0 processes the epoch, then fails to forward it and keeps retrying.
            with trio.fail_after(60):
                while True:
                    status = await query(chain.first.query_address, esa.net.QueryKind.STATUS)
                    if status["counters"].get("forward_failures", 0) >= 1:
                        return status
                    await trio.sleep(0.05)

        trio.run(close_and_wait)
        chain.restart(1)

        async def finish() -> dict[str, Any]:
            await wait_processed(chain, timeout=60)
            return await query(chain.analyzer.query_address, esa.net.QueryKind.RESULT, {"n": 600})

        res = trio.run(finish)
    assert res["drop_check"] == {"ok": True, "problems": []}
    assert [h["received"] for h in res["hops"]] == [600, 600, 600]
    assert res["messages_used"] == 600
