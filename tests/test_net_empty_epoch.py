"""Closing an epoch nobody submitted to: an empty batch flows down the chain.

An operator's CLOSE_EPOCH on a first shuffler with no open report records an empty closed
epoch; the shuffler forwards an empty signed batch (counters all zero, no fakes: fakes are
added per released crowd and there is none), and the analyzer records the epoch — with
several chains it counts that chain as delivered and estimates over the others.

Every party runs as a :class:`PartyService` in the test's own trio loop, speaking real TCP
on 127.0.0.1 (no child processes); a crash is the service's task dying at a chosen point,
which leaves the inbox exactly as a SIGKILL would (every step is one committed SQLite
transaction). One child process is SIGKILLed right after the empty epoch's commit, to
show that the commit itself survives.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import trio
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

import crypto
import esa
from esa.net import PartyService, query, request, submit_reports
from esa.net import _wire as w
from esa.net._client import _control_time_ms
from esa.net._config import Address, config_from_dict
from esa.net._inbox import EpochAhead, Inbox
from protocols import ProtocolSpec, RSumRM, ShuffleProtocol, build_protocol

KEY_EPOCH = 1
M = 2  # shufflers per chain
N_R = 2  # fakes per released crowd, per shuffler
OPERATOR = Ed25519PrivateKey.generate()
HIST = build_protocol("hist_kr", ProtocolSpec(epsilon=1.0, delta=1e-6, n=1000, domain=4))


def _rm() -> RSumRM:
    p = RSumRM(epsilon=1.0, delta=1e-6, n=3000, messages=2)
    assert p.channels == 2
    return p


@pytest.fixture(scope="module")
def keydir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("empty-epoch")
    crypto.KeyDirectory.create(root / "keys1", shufflers=M)  # one chain
    crypto.KeyDirectory.create(root / "keys2", shufflers=2 * M)  # two chains
    return root


def _config(
    root: Path, state: Path, *, hop: int, channels: int, channel: int = 0, next_port: int = 0
) -> Any:
    role = "analyzer" if hop == M else "shuffler"
    doc: dict[str, Any] = {
        "role": role,
        "hop": hop,
        "channels": channels,
        "state_dir": str(state / (f"{role}-{channel}-{hop}" if role == "shuffler" else role)),
        "listen": {"host": "127.0.0.1", "port": 0},
        "tls": {"insecure_plaintext": True},  # TLS is tested in test_net_tls.py
        "keys": {"epochs": {str(KEY_EPOCH): f"keys{channels}"}},
        "protocol": {"name": "unused-here", "epsilon": 1.0, "delta": 1e-6, "n": 1},
        "limits": {"read_timeout_seconds": 10.0},
    }
    if role == "shuffler":
        doc["channel"] = channel
        doc["next"] = {"host": "127.0.0.1", "port": next_port}
        doc["shuffle"] = {"fake_reports": N_R}
        if hop == 0:
            doc["operator"] = {"public_key": OPERATOR.public_key().public_bytes_raw().hex()}
    return config_from_dict(doc, base=root, simulation=True)


def _party(root: Path, state: Path, protocol: ShuffleProtocol, **kwargs: Any) -> PartyService:
    return PartyService(_config(root, state, **kwargs), protocol=protocol)


def _close_frame(target: str) -> bytes:
    # The client's strictly increasing stamps; the frame names the party it is for.
    return w.ControlFrame(w.ControlCommand.CLOSE_EPOCH, _control_time_ms(), target=target).sign(
        OPERATOR
    )


async def _close(svc: PartyService) -> w.Ack:
    assert svc.port is not None
    (resp,) = await request(
        Address("127.0.0.1", svc.port), [_close_frame(svc.party_name)], timeout=10
    )
    return w.parse_ack(resp)


async def _status(svc: PartyService, *, forwarded: int) -> dict[str, Any]:
    """A shuffler's STATUS once ``forwarded`` epochs are marked forwarded."""
    with trio.fail_after(20):
        while True:
            st = await query(_qaddr(svc), w.QueryKind.STATUS)
            if st["epochs"]["forwarded"] >= forwarded:
                return st
            await trio.sleep(0.02)


def _addr(svc: PartyService) -> Address:
    assert svc.port is not None
    return Address("127.0.0.1", svc.port)


def _qaddr(svc: PartyService) -> Address:
    """The party's query listener (RESULT is served there only)."""
    assert svc.query_port is not None
    return Address("127.0.0.1", svc.query_port)


async def _processed(svc: PartyService, count: int) -> None:
    """Wait until the analyzer has analyzed ``count`` epochs (every chain's batch of each)."""
    with trio.fail_after(20):
        while True:
            done = [e for e in await svc._db(svc.inbox.epochs, "processed")]
            if len([e for e in done if "merged_into" not in e.stats]) >= count:
                return
            await trio.sleep(0.02)


def _sealed(
    root: Path, protocol: ShuffleProtocol, values: Any, *, channels: int
) -> list[list[bytes]]:
    """Users' reports for each chain's first shuffler (each channel's own messages)."""
    kd = crypto.KeyDirectory.load(root / f"keys{channels}")
    codec = esa.make_codec("onion", message_size=protocol.message_size, layers=M + 1)
    msgs = esa.Encoder(protocol, codec, []).messages(values, rng=np.random.default_rng(3))
    out = []
    for c in range(channels):
        route = [p.layer_public for p in esa.chain_route(kd, channels=channels, channel=c)]
        part = msgs if channels == 1 else msgs[protocol.channel_of(msgs) == c]
        enc = esa.Encoder(protocol, codec, route, workers=1)
        out.append(
            [bytes(r) for r in enc.seal_messages(part, epoch=KEY_EPOCH, crowd_id=0, first_hop=0)]
        )
    return out


async def _deploy(
    nursery: trio.Nursery, root: Path, state: Path, protocol: ShuffleProtocol, channels: int
) -> tuple[PartyService, list[list[PartyService]]]:
    """Start the analyzer, then every chain's shufflers from the last hop back."""
    analyzer = _party(root, state, protocol, hop=M, channels=channels)
    port = await nursery.start(analyzer.run)
    chains = []
    for c in range(channels):
        chain: list[PartyService] = []
        nxt = port
        for hop in reversed(range(M)):
            svc = _party(
                root, state, protocol, hop=hop, channels=channels, channel=c, next_port=nxt
            )
            nxt = await nursery.start(svc.run)
            chain.insert(0, svc)
        chains.append(chain)
    return analyzer, chains


def _run(main: Callable[[trio.Nursery], Awaitable[None]], parties: list[PartyService]) -> None:
    async def outer() -> None:
        async with trio.open_nursery() as nursery:
            with trio.fail_after(30):
                await main(nursery)
            nursery.cancel_scope.cancel()

    try:
        trio.run(outer)
    finally:
        for p in parties:
            p.close()


def test_an_empty_chain_counts_as_delivered(keydir: Path, tmp_path: Path) -> None:
    """Two-chain rsum_rm: in epoch 0 users' messages reach chain 1 only, in epoch 1 chain 2
    only. Closing the epoch on the chain with no report forwards an empty batch, and the
    analyzer estimates over the other chain's messages; the chains' epoch numbers stay
    aligned (before the fix, the empty chain closed nothing and the analyzer waited)."""
    protocol = _rm()
    n = 150
    values = np.linspace(0, 1, n)
    reports = _sealed(keydir, protocol, values, channels=2)
    parties: list[PartyService] = []
    out: dict[str, Any] = {}

    async def main(nursery: trio.Nursery) -> None:
        analyzer, chains = await _deploy(nursery, keydir, tmp_path, protocol, 2)
        parties.extend([analyzer, *chains[0], *chains[1]])
        for full in (0, 1):
            stats = await submit_reports(_addr(chains[full][0]), reports[full], key_epoch=KEY_EPOCH)
            assert stats.acknowledged == stats.stored == n
            # One epoch per chain and close; the empty chain's is empty.
            assert [await _close(chain[0]) for chain in chains] == [w.Ack(1, 0)] * 2
            await _processed(analyzer, full + 1)
            out[f"epoch{full}"] = await query(_qaddr(analyzer), w.QueryKind.RESULT, {"n": n})
        out["status"] = [await _status(chain[0], forwarded=2) for chain in chains]

    _run(main, parties)
    res = out["epoch0"]
    assert res["epochs"] == 1
    assert res["empty_epochs"] == []  # chain 1 delivered messages
    assert res["drop_check"] == {"ok": True, "problems": []}
    assert res["estimate_extra"]["messages_per_precision"] == [n + M * N_R, 0]
    assert res["n_fakes"] == M * N_R  # none added to the empty batch
    assert [(h["role"], h["channel"], h["received"], h["fakes_added"]) for h in res["hops"]] == [
        ("shuffler", 0, n, N_R),
        ("shuffler", 0, n + N_R, N_R),
        ("shuffler", 1, 0, 0),
        ("shuffler", 1, 0, 0),
        ("analyzer", 0, n + M * N_R, 0),
    ]
    assert all(h["forwarded"] == 0 for h in res["hops"][2:4])
    # The protocol's estimate over precision 1's messages alone: finite, near the sum.
    assert abs(res["estimate"][0] - values.sum()) < 6 * res["expected_std"][0]
    res = out["epoch1"]
    assert res["epochs"] == 2
    assert res["empty_epochs"] == []
    assert res["drop_check"] == {"ok": True, "problems": []}
    assert res["estimate_extra"]["messages_per_precision"] == [n + M * N_R] * 2
    assert [h["received"] for h in res["hops"]] == [n, n + N_R, n, n + N_R, 2 * (n + M * N_R)]
    assert [st["counters"]["empty_epochs_closed"] for st in out["status"]] == [1, 1]


def test_single_chain_empty_epoch_is_recorded_as_empty(keydir: Path, tmp_path: Path) -> None:
    """One chain: a close with nothing submitted is acknowledged as one epoch closed, and
    the analyzer records it as an empty epoch (zero counts, no fakes, no drop problem)
    instead of never hearing of it; the next epoch carries on normally."""
    n = 30
    (reports,) = _sealed(keydir, HIST, np.arange(n) % 4, channels=1)
    parties: list[PartyService] = []
    out: dict[str, Any] = {}

    async def main(nursery: trio.Nursery) -> None:
        analyzer, ((first, second),) = await _deploy(nursery, keydir, tmp_path, HIST, 1)
        parties.extend([analyzer, first, second])
        assert await _close(first) == w.Ack(1, 0)
        await _processed(analyzer, 1)
        out["empty"] = await query(_qaddr(analyzer), w.QueryKind.RESULT)
        out["second"] = await _status(second, forwarded=1)
        await submit_reports(_addr(first), reports, key_epoch=KEY_EPOCH)
        assert await _close(first) == w.Ack(1, 0)
        await _processed(analyzer, 2)
        out["both"] = await query(_qaddr(analyzer), w.QueryKind.RESULT, {"n": n})
        out["first"] = await _status(first, forwarded=2)

    _run(main, parties)
    res = out["empty"]
    assert res["epochs"] == 1
    assert res["empty_epochs"] == [0]
    assert res["drop_check"] == {"ok": True, "problems": []}
    assert res["messages_used"] == 0
    assert res["n_fakes"] == 0  # fake_reports = 2, but there is no crowd to add them to
    assert [h["hop"] for h in res["hops"]] == [0, 1, M]
    for h in res["hops"]:
        assert [h[k] for k in ("received", "invalid", "replayed", "held", "forwarded")] == [0] * 5
        assert h["fakes_added"] == 0
    assert out["second"]["counters"]["epochs_processed"] == 1
    assert out["second"]["counters"]["chunks_received"] == 1  # one empty chunk
    res = out["both"]
    assert res["epochs"] == 2
    assert res["empty_epochs"] == [0]
    assert res["drop_check"] == {"ok": True, "problems": []}
    assert [h["received"] for h in res["hops"]] == [n, n + N_R, n + 2 * N_R]
    assert res["messages_used"] == n + 2 * N_R
    assert out["first"]["counters"]["epochs_closed"] == 2
    assert out["first"]["counters"]["empty_epochs_closed"] == 1


class _Crash(BaseException):
    """Stands in for SIGKILL at a chosen point (a BaseException: no handler of the party
    catches it, as none survives a kill): the party's task dies there, and its inbox
    holds exactly the transactions committed before it."""


def _crash(*args: Any, **kwargs: Any) -> None:
    raise _Crash


async def _acrash(*args: Any, **kwargs: Any) -> bool:
    raise _Crash


async def _life(svc: PartyService, action: Callable[[PartyService], Awaitable[None]]) -> bool:
    """Run ``svc`` until ``action`` returns (then stop it) or it crashes; True if it crashed."""
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(svc.run)
            await action(svc)
            nursery.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        _, rest = group.split(_Crash)
        if rest is not None:
            raise
        return True
    finally:
        svc.close()
    return False


def _states(path: Path, party: str) -> list[tuple[int, str, int]]:
    with Inbox(path, party=party) as inbox:
        return [(e.epoch, e.state, inbox.epoch_size(e.epoch)) for e in inbox.epochs()]


def test_crashes_around_the_empty_epoch_forward_it_exactly_once(
    keydir: Path, tmp_path: Path
) -> None:
    """The first shuffler dies after acknowledging the close (before processing), after
    committing the empty batch (before sending it), after the next hop acknowledged its
    chunk (before marking it) and after the next hop acknowledged the counts (before
    marking the epoch forwarded). Each restart resumes from the inbox; the next hop takes
    the resent chunk and counts as no-ops, and the analyzer records the epoch once."""
    parties: list[PartyService] = []
    out: dict[str, Any] = {}

    def first(next_port: int) -> PartyService:
        return _party(keydir, tmp_path, HIST, hop=0, channels=1, next_port=next_port)

    async def main(nursery: trio.Nursery) -> None:
        analyzer = _party(keydir, tmp_path, HIST, hop=M, channels=1)
        second = _party(
            keydir, tmp_path, HIST, hop=1, channels=1, next_port=await nursery.start(analyzer.run)
        )
        parties.extend([analyzer, second])
        port = await nursery.start(second.run)
        db = tmp_path / "shuffler-0-0" / "inbox.db"

        async def close(svc: PartyService) -> None:
            assert await _close(svc) == w.Ack(1, 0)

        # 1. Acknowledged, then killed before processing: the empty epoch is on disk.
        s0 = first(port)
        s0._work_loop = trio.sleep_forever  # type: ignore[method-assign]
        assert not await _life(s0, close)
        assert _states(db, "shuffler-1") == [(0, "closed", 0)]
        # 2. Dies after committing the processed (empty) batch, before any send.
        s0 = first(port)
        s0._forward = _acrash  # type: ignore[method-assign]
        assert await _life(s0, lambda s: trio.sleep_forever())
        assert _states(db, "shuffler-1") == [(0, "processed", 0)]
        with Inbox(db, party="shuffler-1") as inbox:
            (entry,) = inbox.pending_outbox(0)
        chunk = w._parse_unverified_batch(entry.payload)
        assert (chunk.epoch, chunk.chunk_index, chunk.chunk_count, chunk.reports) == (0, 0, 1, ())
        assert await second._db(second.inbox.epochs) == []
        # 3. The next hop acknowledged the chunk; dies before recording that.
        s0 = first(port)
        s0.inbox.mark_acked = _crash  # type: ignore[method-assign]
        assert await _life(s0, lambda s: trio.sleep_forever())
        # 4. Resends the chunk (a no-op there) and the counts; dies before marking.
        s0 = first(port)
        s0.inbox.mark_forwarded = _crash  # type: ignore[method-assign]
        assert await _life(s0, lambda s: trio.sleep_forever())
        assert _states(db, "shuffler-1") == [(0, "processed", 0)]
        await _processed(analyzer, 1)
        # 5. Resends the counts (a no-op there) and marks the epoch forwarded.
        s0 = first(port)

        async def until_forwarded(svc: PartyService) -> None:
            await _status(svc, forwarded=1)
            out["res"] = await query(_qaddr(analyzer), w.QueryKind.RESULT)

        assert not await _life(s0, until_forwarded)
        assert _states(db, "shuffler-1") == [(0, "forwarded", 0)]
        # A later close is epoch 1, not epoch 0 again.
        s0 = first(port)

        async def close_again(svc: PartyService) -> None:
            await close(svc)
            await _status(svc, forwarded=2)
            await _processed(analyzer, 2)
            out["again"] = await query(_qaddr(analyzer), w.QueryKind.RESULT)

        assert not await _life(s0, close_again)
        out["second"] = (dict(second.counters), dict(second.rejected))

    _run(main, parties)
    res = out["res"]
    assert res["epochs"] == 1
    assert res["empty_epochs"] == [0]
    assert res["drop_check"] == {"ok": True, "problems": []}
    assert [h["received"] for h in res["hops"]] == [0, 0, 0]
    counters, rejected = out["second"]
    # Hop 1 took the empty chunk once (the resend in 4 and the counts' in 5 were no-ops)
    # and processed each epoch once.
    assert rejected == {}  # resends are no failures ...
    assert counters["duplicate_frames"] == 2  # ... but counted
    assert counters["chunks_received"] == 2
    assert counters["epochs_processed"] == 2
    assert out["again"]["epochs"] == 2
    assert out["again"]["empty_epochs"] == [0, 1]
    assert _states(tmp_path / "shuffler-0-1" / "inbox.db", "shuffler-2") == [
        (0, "forwarded", 0),
        (1, "forwarded", 0),
    ]
    assert [s for _, s, _ in _states(tmp_path / "analyzer" / "inbox.db", "analyzer")] == [
        "processed",
        "processed",
    ]


def test_empty_close_survives_sigkill_right_after_its_commit(tmp_path: Path) -> None:
    """A child process closes an empty epoch and is SIGKILLed at once: the epoch is on
    disk, exactly once, and a close of the next epoch numbers it after it."""
    db = tmp_path / "inbox.db"
    code = textwrap.dedent(
        f"""
        import os, signal
        from esa.net._inbox import Inbox
        inbox = Inbox({str(db)!r}, party="shuffler-1")
        assert inbox.close_epochs([1], if_none_open=1) == [0]
        print("committed", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert proc.stdout == "committed\n"
    with Inbox(db, party="shuffler-1") as inbox:
        assert [(e.epoch, e.state, e.key_epoch) for e in inbox.epochs()] == [(0, "closed", 1)]
        assert inbox.epoch_reports(0) == []
        # The size rule never makes an empty epoch; an operator's close does, once per call.
        assert inbox.close_epochs([1]) == []
        assert inbox.close_epochs([1], if_none_open=1) == [1]
        inbox.add_reports(1, [b"x" * 8])
        assert inbox.close_epochs([1, 2], if_none_open=2) == [2]  # 2: nothing else open
        assert inbox.close_epochs([1, 2], empty=[1, 2]) == [3, 4]  # several chains
        assert [inbox.epoch_size(e) for e in range(5)] == [0, 0, 1, 0, 0]


# --- idempotent, chain-aligned operator closes (CLOSE_EPOCH_AT) -------------------------


def test_close_at_closes_only_the_named_epoch(tmp_path: Path) -> None:
    with Inbox(tmp_path / "inbox.db", party="shuffler-1") as inbox:
        assert inbox.next_epoch() == 0
        inbox.add_reports(1, [b"x" * 8])
        assert inbox.close_epochs([1], if_none_open=1, at=0) == [0]
        assert inbox.close_epochs([1], if_none_open=1, at=0) == []  # a resend: no-op
        assert inbox.next_epoch() == 1
        with pytest.raises(EpochAhead, match="asked to close epoch 3, but the next epoch is 1"):
            inbox.close_epochs([1], if_none_open=1, at=3)
        assert inbox.close_epochs([1, 2], empty=[1, 2], at=1) == [1, 2]
        assert inbox.close_epochs([1, 2], empty=[1, 2], at=1) == []
        assert inbox.next_epoch() == 3
        assert [inbox.epoch_size(e) for e in range(3)] == [1, 0, 0]


def _close_at_frame(at: int, target: str) -> bytes:
    # Same stamp sequence as esa.close_epochs_together below; the frame names its party.
    return w.ControlFrame(
        w.ControlCommand.CLOSE_EPOCH_AT, _control_time_ms(), at, target=target
    ).sign(OPERATOR)


async def _close_at(svc: PartyService, at: int) -> bytes:
    (resp,) = await request(_addr(svc), [_close_at_frame(at, svc.party_name)], timeout=10)
    return resp


def test_a_close_that_reached_one_chain_only_is_realigned(keydir: Path, tmp_path: Path) -> None:
    """The operator's close reached chain 1 but its frame to chain 2 was lost, and chain
    1's reply too. Resending CLOSE_EPOCH_AT to chain 1 is a no-op; ``close_epochs_together``
    brings chain 2 to chain 1's epoch and closes the next one on both, so the analyzer
    joins every chain's epoch 0 with the others' epoch 0 (before, a blind resend closed a
    second epoch on chain 1 and shifted the chains' numbering for good)."""
    protocol = _rm()
    n = 120
    reports = _sealed(keydir, protocol, np.linspace(0, 1, n), channels=2)
    parties: list[PartyService] = []
    out: dict[str, Any] = {}

    async def main(nursery: trio.Nursery) -> None:
        analyzer, chains = await _deploy(nursery, keydir, tmp_path, protocol, 2)
        parties.extend([analyzer, *chains[0], *chains[1]])
        for c in (0, 1):
            stats = await submit_reports(_addr(chains[c][0]), reports[c], key_epoch=KEY_EPOCH)
            assert stats.acknowledged == n
        assert w.parse_ack(await _close_at(chains[0][0], 0)) == w.Ack(1, 0)
        assert w.parse_ack(await _close_at(chains[0][0], 0)) == w.Ack(0, 0)  # the resend
        ahead = w.parse_reject(await _close_at(chains[1][0], 5))
        assert ahead.reason is w.RejectReason.EPOCH_AHEAD
        assert "next epoch is 0" in ahead.detail
        firsts = [_addr(chain[0]) for chain in chains]
        out["moved"] = await esa.close_epochs_together(firsts, OPERATOR)
        out["next"] = [(await query(a, w.QueryKind.STATUS))["next_epoch"] for a in firsts]
        await _processed(analyzer, 2)
        out["result"] = await query(_qaddr(analyzer), w.QueryKind.RESULT, {"n": n})

    _run(main, parties)
    assert out["moved"] == [1, 2]  # chain 2 caught up on epoch 0, then both closed epoch 1
    assert out["next"] == [2, 2]
    res = out["result"]
    assert res["drop_check"] == {"ok": True, "problems": []}
    assert res["epochs"] == 2
    # Epoch 0 joined both chains' reports; epoch 1 was empty on both.
    assert res["estimate_extra"]["messages_per_precision"] == [n + M * N_R] * 2


def test_close_epoch_at_frames_round_trip_and_refuse_bad_layouts() -> None:
    frame = w.ControlFrame(w.ControlCommand.CLOSE_EPOCH_AT, 99, 7)
    signed = frame.sign(OPERATOR)
    assert w.verify_control(signed, OPERATOR.public_key()) == frame
    plain = w.ControlFrame(w.ControlCommand.CLOSE_EPOCH, 99).sign(OPERATOR)
    assert len(signed) == len(plain) + 8
    with pytest.raises(w.MalformedFrame):  # the epoch field cut off
        w.verify_control(signed[:-72] + signed[-64:], OPERATOR.public_key())
    with pytest.raises(w.MalformedFrame):  # a plain close with an epoch appended
        w.verify_control(plain[:-64] + bytes(8) + plain[-64:], OPERATOR.public_key())
    with pytest.raises(crypto.CryptoParameterError, match="carries no epoch"):
        w.ControlFrame(w.ControlCommand.CLOSE_EPOCH, 99, 7)
