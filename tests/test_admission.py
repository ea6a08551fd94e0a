"""Admission control at the first shuffler, with real parties on 127.0.0.0/8.

* Junk of the right size is peeled at intake and refused: it neither closes an epoch nor
  fills the store; the flooder's address runs out of quota while another address submits.
* Stored-but-unprocessed reports are capped; the refusal is ``retry_later`` with a hint,
  and :func:`esa.net.submit_reports` waits and resends until the backlog drains.
* 500 idle sockets do not lock STATUS or an honest client out.
* ``require_client_token``: keyless, foreign, stale and forged tokens are refused; a valid
  one is taken within its quota.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import sqlite3
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import trio
import trio.testing
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

import crypto
import esa
from esa.net import (
    Address,
    FrameStream,
    PartyService,
    _admission,
    mint_token,
    query,
    submit_reports,
)
from esa.net import _wire as w
from esa.net._admission import THROTTLE_STRIKES, TokenBucket
from esa.net._config import AdmissionRule, Limits, config_from_dict
from esa.net._quotas import QUOTAS_FILE
from protocols import ProtocolSpec, build_protocol
from tests._cli import usage_error

PROTOCOL = build_protocol("hist_kr", ProtocolSpec(epsilon=1.0, delta=1e-6, n=1000, domain=4))
KEY_EPOCH = 1
#: The default ``[admission] peel_frames_per_peer``.
PEEL_FRAMES = 8
OPERATOR = Ed25519PrivateKey.from_private_bytes(bytes(range(32)))
DEPLOYMENT = "test-deployment"
STATUS = w.Query(w.QueryKind.STATUS).to_bytes()


@pytest.fixture(scope="module")
def keydir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("admission")
    crypto.KeyDirectory.create(root / "keys", shufflers=1)
    return root


def _service(root: Path, state: str, **tables: dict[str, Any]) -> PartyService:
    doc = {
        "role": "shuffler",
        "hop": 0,
        "state_dir": state,
        "listen": {"host": "127.0.0.1", "port": 0},
        "next": {"host": "127.0.0.1", "port": 9},
        "keys": {"epochs": {str(KEY_EPOCH): "keys"}},
        "operator": {"public_key": OPERATOR.public_key().public_bytes_raw().hex()},
        "tls": {"insecure_plaintext": True},
        "protocol": {"name": "hist_kr", "epsilon": 1.0, "delta": 1e-6, "n": 1000, "domain": 4},
        **tables,
    }
    return PartyService(config_from_dict(doc, base=root, simulation=True), protocol=PROTOCOL)


def _reports(root: Path, count: int, seed: int = 0) -> list[bytes]:
    kd = crypto.KeyDirectory.load(root / "keys")
    codec = esa.make_codec("onion", message_size=PROTOCOL.message_size, layers=2)
    enc = esa.Encoder(PROTOCOL, codec, [p.layer_public for p in kd.route()], workers=1)
    msgs = PROTOCOL.randomize(np.arange(count) % 4, rng=np.random.default_rng(seed))
    return list(enc.seal_messages(msgs, epoch=KEY_EPOCH, crowd_id=0, first_hop=0))


@contextlib.asynccontextmanager
async def _running(svc: PartyService) -> AsyncIterator[int]:
    try:
        async with trio.open_nursery() as nursery:
            port = await nursery.start(svc.run)
            yield int(port)
            nursery.cancel_scope.cancel()
    finally:
        svc.close()


async def _connect(port: int, source: str) -> FrameStream:
    stream = await trio.open_tcp_stream("127.0.0.1", port, local_address=source)
    return FrameStream(stream, max_frame=2**22, read_timeout=10.0)


async def _ask(fs: FrameStream, payload: bytes) -> bytes:
    await fs.send(payload)
    return await fs.receive()


def _reason(payload: bytes) -> str:
    if w.peek_kind(payload) is w.FrameKind.ACK:
        return "ack"
    return w.parse_reject(payload).reason.name.lower()


async def _status(svc: PartyService, source: str = "127.0.0.2") -> dict[str, Any]:
    """The party's full STATUS, from its query listener (the batch port answers only the
    public view)."""
    assert svc.query_port is not None
    fs = await _connect(svc.query_port, source)
    reply = await _ask(fs, STATUS)
    await fs.stream.aclose()
    result: dict[str, Any] = json.loads(w.parse_reply(reply).body)
    return result


# ---------------------------------------------------------------------------- wire, config


def test_token_and_retry_hint_round_trip_on_the_wire() -> None:
    token = mint_token(
        OPERATOR, deployment="d", key_epoch=3, client_id="alice", expires_at=10**9, quota=7
    )
    frame = w.SubmitFrame(3, (b"ab", b"cd"), token)
    parsed = w.parse_submit(frame.to_bytes())
    assert parsed == frame
    assert w.parse_token(parsed.token, OPERATOR.public_key()) == w.ClientToken(
        "d", 3, "alice", 10**9, 7
    )
    assert w.parse_submit(w.SubmitFrame(3, (b"ab",)).to_bytes()).token == b""
    with pytest.raises(w.BadSignature):
        w.parse_token(token[:-1] + bytes([token[-1] ^ 1]), OPERATOR.public_key())
    with pytest.raises(w.MalformedFrame):  # a token length that does not fill the frame
        w.parse_submit(frame.to_bytes()[:-1])
    rej = w.Reject(w.RejectReason.RETRY_LATER, "later", 1500)
    assert w.parse_reject(rej.to_bytes()) == rej
    with pytest.raises(crypto.CryptoParameterError):
        w.Reject(w.RejectReason.BUSY, "x", 5)


def test_token_bucket_refills_at_its_rate() -> None:
    async def main() -> None:
        bucket = TokenBucket(10.0, 2.0)
        for _ in range(2):
            assert bucket.wait() == 0
            bucket.take()
        assert 0 < bucket.wait() <= 0.1
        await trio.sleep(0.11)
        assert bucket.wait() == 0

    trio.run(main)


@pytest.mark.parametrize(
    ("tables", "message"),
    [
        ({"admission": {"require_client_token": True}}, "and a deployment_id"),
        ({"admission": {"max_pending_reports": 0}}, "max_pending_reports"),
        ({"admission": {"frames_per_second_per_peer": -1}}, "frames_per_second_per_peer"),
        (
            {"admission": {"invalid_reports_per_second_per_peer": -5}},
            "invalid_reports_per_second_per_peer",
        ),
        ({"admission": {"peel_frames_per_peer": 0}}, "peel_frames_per_peer"),
        ({"admission": {"bogus": 1}}, "unknown keys"),
        ({"limits": {"evict_idle_above": 1.5}}, "evict_idle_above"),
    ],
)
def test_admission_settings_are_validated(
    keydir: Path, tables: dict[str, Any], message: str
) -> None:
    with pytest.raises(esa.ConfigError, match=message):
        _service(keydir, "state-bad", **tables)


# ---------------------------------------------------------------------------- junk flood


def test_a_junk_flood_closes_no_epoch_fills_nothing_and_others_still_submit(
    keydir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One address floods junk reports of the right size, ignoring every REJECT; another
    submits honestly. Past its quota the flooder is throttled (briefer here than the
    quota's hint), and closed after sending while throttled THROTTLE_STRIKES times."""
    monkeypatch.setattr(_admission, "MAX_THROTTLE_SECONDS", 0.2)
    svc = _service(
        keydir,
        "state-flood",
        epoch={"max_reports": 50, "deadline_seconds": 600},
        # The quota alone: no bound on the junk rate (see the test after the next).
        admission={
            "reports_per_epoch_per_peer": 200,
            "max_pending_reports": 100,
            "invalid_reports_per_second_per_peer": 0,
        },
    )
    size = svc.expected_size()
    rng = np.random.default_rng(1)
    honest = _reports(keydir, 40)

    async def main() -> tuple[dict[str, int], dict[str, Any], Any]:
        async with _running(svc) as port:
            seen: dict[str, int] = {}

            async def flood() -> None:
                fs = await _connect(port, "127.0.0.3")
                for _ in range(40):  # 800 junk reports, 4x the flooder's quota
                    junk = tuple(rng.bytes(size) for _ in range(20))
                    try:
                        r = _reason(await _ask(fs, w.SubmitFrame(KEY_EPOCH, junk).to_bytes()))
                    except (trio.BrokenResourceError, esa.ESAError):
                        seen["closed"] = seen.get("closed", 0) + 1
                        break
                    seen[r] = seen.get(r, 0) + 1
                await fs.stream.aclose()

            async with trio.open_nursery() as nursery:
                nursery.start_soon(flood)
                stats = await submit_reports(
                    Address("127.0.0.1", port), honest, key_epoch=KEY_EPOCH, frame_reports=10
                )
            return seen, await _status(svc), stats

    seen, status, stats = trio.run(main)
    # The first 200 junk reports are peeled and refused; the rest do not get that far:
    # one quota refusal, then THROTTLE_STRIKES frames sent while throttled, then closed.
    assert THROTTLE_STRIKES == 3
    assert seen == {"invalid_report": 10, "quota_exceeded": 4, "closed": 1}
    assert stats.acknowledged == 40
    assert stats.failed_frames == 0
    assert status["open_reports"] == 40  # only the honest ones are stored
    assert status["counters"].get("epochs_closed", 0) == 0  # 40 < max_reports = 50
    assert status["counters"]["invalid_reports_refused"] == 200
    assert status["rejected"]["invalid_report"] == 10
    assert status["rejected"]["quota_exceeded"] == 4
    assert status["counters"]["submit_frames_parsed"] == 10 + 4  # 4 honest frames
    assert status["counters"]["refused_while_throttled"] == 3
    assert status["counters"]["throttled_connections_closed"] == 1


def test_a_throttled_flooder_is_not_read_nor_parsed_and_is_closed_when_it_ignores_hints(
    keydir: Path,
) -> None:
    """Past its address group's rate, a flooder's connections are not read until the hint
    has passed — a second connection of the group included — and the frames they sent
    meanwhile are refused without being split into reports; the connection that keeps
    sending is closed after THROTTLE_STRIKES of them, and another address still submits."""
    svc = _service(
        keydir,
        "state-throttle",
        admission={"frames_per_second_per_peer": 2.0, "retry_after_seconds": 0.3},
    )
    size = svc.expected_size()
    rng = np.random.default_rng(2)

    def junk() -> bytes:
        return w.SubmitFrame(KEY_EPOCH, tuple(rng.bytes(size) for _ in range(5))).to_bytes()

    async def main() -> tuple[list[str], list[str], float, dict[str, Any], Any]:
        async with _running(svc) as port:
            a_seen: list[str] = []
            b_seen: list[str] = []
            a = await _connect(port, "127.0.0.3")
            for _ in range(3):  # the bucket holds 2: the third is over the group's rate
                a_seen.append(_reason(await _ask(a, junk())))
            refused_at = trio.current_time()
            waited = 0.0

            async def other_connection() -> None:
                b = await _connect(port, "127.0.0.3")
                b_seen.append(_reason(await _ask(b, junk())))
                await b.stream.aclose()

            async with trio.open_nursery() as nursery:
                nursery.start_soon(other_connection)
                for i in range(THROTTLE_STRIKES + 1):  # ignoring every hint
                    try:
                        a_seen.append(_reason(await _ask(a, junk())))
                    except (trio.BrokenResourceError, esa.ESAError):
                        a_seen.append("closed")
                        break
                    if i == 0:
                        waited = trio.current_time() - refused_at
            await a.stream.aclose()
            stats = await submit_reports(
                Address("127.0.0.1", port), _reports(keydir, 10), key_epoch=KEY_EPOCH
            )
            return a_seen, b_seen, waited, await _status(svc), stats

    a_seen, b_seen, waited, status, stats = trio.run(main)
    assert a_seen == ["invalid_report"] * 2 + ["retry_later"] * (THROTTLE_STRIKES + 1) + ["closed"]
    assert b_seen == ["retry_later"]  # the group's throttle holds for a new connection too
    assert waited >= 0.3  # not read until the rate limit's hint (0.5 s less the RTTs)
    counters = status["counters"]
    assert counters["submit_frames_parsed"] == 2 + 1  # the flooder's two, the honest one
    assert counters["refused_rate_limited"] == 1
    assert counters["refused_while_throttled"] == THROTTLE_STRIKES + 1
    assert counters["throttled_connections_closed"] == 1
    assert counters["invalid_reports_refused"] == 10
    assert stats.acknowledged == 10
    assert status["open_reports"] == 10


def test_junk_overdraws_its_budget_and_the_group_is_refused_until_it_is_repaid() -> None:
    """A group's junk budget: a bucket of ``rate`` a second, holding one second's worth,
    that the reports which do not open may overdraw; the group waits until it is repaid
    (to one report), and other groups are never charged. Timed on trio's mock clock."""

    async def main() -> list[float]:
        adm = _admission.Admission(Limits(), collections.Counter())
        a = _admission.Connection("127.0.0.3")
        b = _admission.Connection("127.0.0.4")
        waits = [adm.junk_wait(a, 10.0)]  # nothing charged yet
        waits.append(adm.charge_junk(a, 25, 10.0))  # 10 - 25 = -15: 1.6 s to one report
        waits.append(adm.junk_wait(a, 10.0))
        waits.append(adm.junk_wait(b, 10.0))  # another group pays nothing for it
        waits.append(adm.charge_junk(a, 5, 0.0))  # rate 0: no bound, nothing charged
        await trio.sleep(1.0)
        waits.append(adm.junk_wait(a, 10.0))
        await trio.sleep(0.6)
        waits.append(adm.junk_wait(a, 10.0))
        return waits

    waits = trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert waits == pytest.approx([0.0, 1.6, 1.6, 0.0, 0.0, 0.6, 0.0], abs=1e-9)


def test_an_address_group_has_at_most_its_share_of_frames_peeled_at_once() -> None:
    """``peel_turn``: 10 frames of one group wait their turn, PEEL_FRAMES at a
    time, while another group's frame goes at once; once the group has sent junk, its
    frames go one at a time until its junk bucket is full again (mock clock)."""

    async def main(junk: bool) -> tuple[int, float, float]:
        adm = _admission.Admission(Limits(), collections.Counter())
        if junk:  # 100 - 150: 1.5 s in debt, 2.5 s until full again
            adm.charge_junk(_admission.Connection("127.0.0.3"), 150, 100.0)
        inside: collections.Counter[str] = collections.Counter()
        most = 0
        other_done = -1.0

        async def frame(peer: str) -> None:
            nonlocal most, other_done
            async with adm.peel_turn(peer, PEEL_FRAMES):
                inside[peer] += 1
                most = max(most, inside["127.0.0.3"])
                await trio.sleep(1.0)
                inside[peer] -= 1
            if peer == "127.0.0.4":
                other_done = trio.current_time()

        async with trio.open_nursery() as nursery:
            for _ in range(10):
                nursery.start_soon(frame, "127.0.0.3")
            await trio.sleep(0.1)
            nursery.start_soon(frame, "127.0.0.4")
        assert not adm._peel_turns  # nothing kept once every frame is through
        return most, other_done, trio.current_time()

    clock = trio.testing.MockClock(autojump_threshold=0)
    most, other_done, end = trio.run(main, False, clock=clock)
    assert AdmissionRule().peel_frames_per_peer == PEEL_FRAMES
    assert most == PEEL_FRAMES
    assert other_done == pytest.approx(1.1)  # not behind the other group's queue
    assert end == pytest.approx(2.0)  # 10 frames, 8 at a time: 2 rounds of 1 s
    most, other_done, end = trio.run(main, True, clock=trio.testing.MockClock(autojump_threshold=0))
    assert most == 1  # every frame arrived while the group's bucket was not full
    assert other_done == pytest.approx(1.1)
    assert end == pytest.approx(10.0)


def test_repaid_junk_buckets_of_groups_gone_are_swept() -> None:
    """Junk buckets do not pile up: once there are ``_junk_sweep_at`` of them, those of
    groups with no connection that are repaid in full are dropped (mock clock)."""

    async def main() -> tuple[set[str], set[str]]:
        adm = _admission.Admission(Limits(), collections.Counter())
        adm._junk_sweep_at = 3
        for i in range(3):
            adm.charge_junk(_admission.Connection(f"127.0.0.{i + 1}"), 5, 10.0)
        before = set(adm._junk)
        await trio.sleep(10.0)  # every bucket refilled
        adm.charge_junk(_admission.Connection("127.0.0.9"), 5, 10.0)  # sweeps first
        return before, set(adm._junk)

    before, after = trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert before == {"127.0.0.1", "127.0.0.2", "127.0.0.3"}
    assert after == {"127.0.0.9"}


def test_by_default_a_junk_flood_costs_at_most_its_budget_of_peels(
    keydir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the default ``[admission]`` (no quota, no rate limit), one address floods junk
    over 4 connections at once, ignoring every REJECT, while another submits honestly. The
    flooder's frames are peeled one at a time, and once its junk overdraws the default
    budget (100 a second, one second's worth held) its frames are refused ``retry_later``
    unparsed: the party peels at most the budget plus the frames in flight (at most
    PEEL_FRAMES of one address at once), and the honest client's reports are
    all taken."""
    monkeypatch.setattr(_admission, "MAX_THROTTLE_SECONDS", 0.2)
    svc = _service(keydir, "state-junk", epoch={"max_reports": 1000, "deadline_seconds": 600})
    assert svc.config.admission.invalid_reports_per_second_per_peer == 100.0
    size = svc.expected_size()
    rng = np.random.default_rng(5)
    frames = [
        w.SubmitFrame(KEY_EPOCH, tuple(rng.bytes(size) for _ in range(60))).to_bytes()
        for _ in range(4)
    ]
    honest = _reports(keydir, 40, seed=5)

    async def main() -> tuple[dict[str, int], dict[str, Any], Any, float]:
        async with _running(svc) as port:
            seen: dict[str, int] = {}

            async def flood(index: int) -> None:
                fs = await _connect(port, "127.0.0.3")
                for _ in range(12):
                    try:
                        r = _reason(await _ask(fs, frames[index]))
                    except (trio.BrokenResourceError, esa.ESAError):
                        await trio.aclose_forcefully(fs.stream)
                        fs = await _connect(port, "127.0.0.3")  # closed: reconnect
                        r = "closed"
                    seen[r] = seen.get(r, 0) + 1
                await fs.stream.aclose()

            t0 = trio.current_time()
            async with trio.open_nursery() as nursery:
                for i in range(4):
                    nursery.start_soon(flood, i)
                stats = await submit_reports(
                    Address("127.0.0.1", port), honest, key_epoch=KEY_EPOCH, frame_reports=10
                )
            return seen, await _status(svc), stats, trio.current_time() - t0

    seen, status, stats, elapsed = trio.run(main)
    counters = status["counters"]
    peeled = counters["invalid_reports_refused"]
    # Threshold: the bucket's second's worth, its refill over the run, the frames in flight.
    assert 60 <= peeled <= 100 + 100 * elapsed + PEEL_FRAMES * 60, (peeled, elapsed)
    assert peeled < 48 * 60 / 2  # far fewer than the 2880 junk reports sent
    assert counters["refused_for_junk"] >= 1
    assert seen.get("retry_later", 0) >= 1
    assert counters["submit_frames_parsed"] == peeled // 60 + 4  # + the 4 honest frames
    assert stats.acknowledged == 40
    assert stats.failed_frames == 0
    assert status["open_reports"] == 40


def test_the_backlog_cap_answers_retry_later_and_the_client_waits_it_out(
    keydir: Path,
) -> None:
    """Valid reports past ``max_pending_reports`` (closed epochs included) are refused
    ``retry_later`` with the configured hint; the client resends once processing drains
    the backlog."""
    svc = _service(
        keydir,
        "state-backlog",
        epoch={"max_reports": 1000, "deadline_seconds": 600},
        admission={"max_pending_reports": 30, "retry_after_seconds": 0.2},
    )
    first, more = _reports(keydir, 30, seed=1), _reports(keydir, 10, seed=2)

    async def main() -> tuple[w.Reject, Any, dict[str, Any]]:
        async with _running(svc) as port:
            address = Address("127.0.0.1", port)
            stats = await submit_reports(address, first, key_epoch=KEY_EPOCH, frame_reports=10)
            assert stats.acknowledged == 30
            fs = await _connect(port, "127.0.0.2")
            reply = await _ask(fs, w.SubmitFrame(KEY_EPOCH, tuple(more)).to_bytes())
            rej = w.parse_reject(reply)
            await fs.stream.aclose()
            async with trio.open_nursery() as nursery:

                async def close_later() -> None:
                    await trio.sleep(0.5)
                    await esa.net.close_epoch(address, OPERATOR)

                nursery.start_soon(close_later)
                late = await submit_reports(
                    address, more, key_epoch=KEY_EPOCH, frame_reports=10, retries=100
                )
            return rej, late, await _status(svc)

    rej, late, status = trio.run(main)
    assert rej.reason is w.RejectReason.RETRY_LATER
    assert rej.retry_after_ms == 200
    assert late.acknowledged == 10
    assert late.failed_frames == 0
    assert late.retries >= 1
    assert status["counters"]["refused_backlog_full"] >= 2
    assert status["rejected"]["retry_later"] >= 2


# ---------------------------------------------------------------------------- idle sockets


def test_500_idle_sockets_lock_out_neither_status_nor_an_honest_submit(keydir: Path) -> None:
    svc = _service(keydir, "state-idle", limits={"read_timeout_seconds": 60.0})
    honest = _reports(keydir, 20, seed=3)

    async def main() -> tuple[int, Any, dict[str, Any]]:
        async with _running(svc) as port:
            idle: list[trio.SocketStream] = []
            for i in range(500):  # 50 from each of 10 addresses: under the per-peer cap
                idle.append(
                    await trio.open_tcp_stream("127.0.0.1", port, local_address=f"127.0.1.{i % 10}")
                )
            await trio.sleep(1.2)  # idle longer than the grace
            tries = 0
            while True:  # STATUS within a few tries
                tries += 1
                fs = await _connect(port, "127.0.0.2")
                with contextlib.suppress(trio.BrokenResourceError, esa.PeerClosed):
                    if w.peek_kind(await _ask(fs, STATUS)) is w.FrameKind.REPLY:
                        await fs.stream.aclose()
                        break
                await fs.stream.aclose()
                assert tries < 3
            stats = await submit_reports(
                Address("127.0.0.1", port), honest, key_epoch=KEY_EPOCH, retries=3
            )
            status = await _status(svc)
            for s in idle:
                await s.aclose()
            return tries, stats, status

    tries, stats, status = trio.run(main)
    assert tries == 1
    assert stats.acknowledged == 20
    assert stats.failed_frames == 0
    assert status["counters"]["idle_connections_closed"] >= 1


# ---------------------------------------------------------------------------- tokens


def test_required_tokens_refuse_keyless_foreign_stale_and_forged(keydir: Path) -> None:
    svc = _service(
        keydir,
        "state-token",
        admission={"require_client_token": True, "deployment_id": DEPLOYMENT},
    )
    reports = _reports(keydir, 8, seed=4)
    soon = int(time.time()) + 600

    def token(**over: Any) -> bytes:
        fields: dict[str, Any] = {
            "deployment": DEPLOYMENT,
            "key_epoch": KEY_EPOCH,
            "client_id": "alice",
            "expires_at": soon,
            "quota": 5,
        }
        key = over.pop("key", OPERATOR)
        return mint_token(key, **{**fields, **over})

    cases = {
        "keyless": b"",
        "other_epoch": token(key_epoch=KEY_EPOCH + 1),
        "other_deployment": token(deployment="elsewhere"),
        "expired": token(expires_at=int(time.time()) - 1),
        "invalid": token(key=Ed25519PrivateKey.generate()),
    }

    async def main() -> tuple[dict[str, str], list[str], Any, dict[str, Any]]:
        async with _running(svc) as port:
            fs = await _connect(port, "127.0.0.2")
            got = {
                name: _reason(await _ask(fs, w.SubmitFrame(KEY_EPOCH, (reports[0],), t).to_bytes()))
                for name, t in cases.items()
            }
            good = token()
            quota = [
                _reason(await _ask(fs, w.SubmitFrame(KEY_EPOCH, tuple(part), good).to_bytes()))
                for part in (reports[:3], reports[3:5], reports[5:8])
            ]
            await fs.stream.aclose()
            keyless = await submit_reports(
                Address("127.0.0.1", port), reports[:1], key_epoch=KEY_EPOCH, retries=2
            )
            return got, quota, keyless, await _status(svc)

    got, quota, keyless, status = trio.run(main)
    assert got == dict.fromkeys(cases, "unauthenticated")
    assert quota == ["ack", "ack", "quota_exceeded"]  # 5 reports per epoch
    assert keyless.failed_frames == 1
    assert keyless.failure_reasons == {"unauthenticated": 1}
    assert keyless.retries == 0  # a definite refusal is not resent
    counters = status["counters"]
    assert counters["refused_keyless"] == 2
    for why in ("other_epoch", "other_deployment", "expired", "invalid"):
        assert counters[f"token_{why}"] == 1
    assert status["rejected"]["unauthenticated"] == 6
    assert status["open_reports"] == 5


def test_esa_token_mints_a_token_the_party_takes(
    keydir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from simulations.cli import main

    key_file = tmp_path / "operator.key"
    key_file.write_text(OPERATOR.private_bytes_raw().hex())
    os.chmod(key_file, 0o600)
    argv = ["token", "--operator-key", str(key_file), "--deployment", DEPLOYMENT]
    argv += ["--key-epoch", str(KEY_EPOCH), "--client", "bob", "--quota", "9", "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    parsed = w.parse_token(bytes.fromhex(out["token"]), OPERATOR.public_key())
    assert (parsed.client_id, parsed.quota, parsed.deployment) == ("bob", 9, DEPLOYMENT)
    assert parsed.expires_at > time.time() + 3600
    err = usage_error([*argv[:-1], "--client", "x" * 65], capsys)
    assert err.startswith("esa token: error:")


# ---------------------------------------------------------------------------- quotas on disk


def _token(client: str, quota: int) -> bytes:
    return mint_token(
        OPERATOR,
        deployment=DEPLOYMENT,
        key_epoch=KEY_EPOCH,
        client_id=client,
        expires_at=int(time.time()) + 600,
        quota=quota,
    )


async def _submit_parts(port: int, parts: list[list[bytes]], token: bytes) -> list[str]:
    """Each part as one SUBMIT with ``token``, each on a connection of its own (a quota
    refusal throttles its connection): the replies' kinds."""
    got = []
    for part in parts:
        fs = await _connect(port, "127.0.0.2")
        try:
            got.append(
                _reason(await _ask(fs, w.SubmitFrame(KEY_EPOCH, tuple(part), token).to_bytes()))
            )
        finally:
            await fs.stream.aclose()
    return got


def _stored_quotas(state: Path) -> dict[str, tuple[int, int]]:
    """quotas.db read directly: key -> (window, reports charged)."""
    db = sqlite3.connect(state / QUOTAS_FILE)
    try:
        rows = db.execute("SELECT key, quota_window, used FROM quota_used").fetchall()
    finally:
        db.close()
    return {str(k): (int(win), int(n)) for k, win, n in rows}


def test_a_token_quota_survives_a_restart_and_restarts_with_the_next_epoch(keydir: Path) -> None:
    """A client's per-epoch quota is on disk: a party stopped and started again on the same
    state_dir still refuses what would pass it; once an epoch closes it starts afresh."""
    admission = {"require_client_token": True, "deployment_id": DEPLOYMENT}
    epoch = {"max_reports": 1000, "deadline_seconds": 600}
    reports = _reports(keydir, 60, seed=6)
    bob, carol = _token("bob", 25), _token("carol", 0)  # carol: no quota, nothing kept

    async def run(parts: list[list[bytes]], close: bool = False) -> list[str]:
        svc = _service(keydir, "state-quota-restart", admission=admission, epoch=epoch)
        async with _running(svc) as port:
            got = await _submit_parts(port, parts, bob)
            got += await _submit_parts(port, [reports[55:57]], carol)
            if close:
                await svc._close_open_epochs(operator=True)
            return got

    first = trio.run(run, [reports[:10], reports[10:20]])
    state = keydir / "state-quota-restart"
    assert _stored_quotas(state) == {"client:bob": (0, 20)}
    assert (state / QUOTAS_FILE).stat().st_mode & 0o777 == 0o600
    second = trio.run(run, [reports[20:30], reports[30:35]], True)  # then closes an epoch
    third = trio.run(run, [reports[35:45]])
    assert first == ["ack", "ack", "ack"]
    # 20 of bob's 25 were used before the restart: 10 more pass it, 5 do not.
    assert second == ["quota_exceeded", "ack", "ack"]
    assert third == ["ack", "ack"]  # an epoch closed since: a fresh quota
    assert _stored_quotas(state) == {"client:bob": (1, 10)}  # epoch 0's count dropped


def test_a_token_quota_survives_sigkill_even_mid_commit(keydir: Path, tmp_path: Path) -> None:
    """A real party process, SIGKILLed: after an acknowledged frame, and again inside the
    transaction storing the next frame's reports (``commit_reports``, nothing acknowledged).
    Restarted, it holds the client to every report charged: the count is committed before
    the reports it pays for, so a crash can over-count the frames in flight, never forget
    an acknowledged one."""
    from simulations._tcp_run import _spawn, _write_toml

    doc: dict[str, Any] = {
        "role": "shuffler",
        "hop": 0,
        "state_dir": "state/shuffler-1",
        "listen": {"host": "127.0.0.1", "port": 0},
        "query": {"host": "127.0.0.1", "port": 0},
        "next": {"host": "127.0.0.1", "port": 9},
        "keys": {"epochs": {str(KEY_EPOCH): str(keydir / "keys")}},
        "operator": {"public_key": OPERATOR.public_key().public_bytes_raw().hex()},
        "tls": {"insecure_plaintext": True},
        "epoch": {"max_reports": 1000, "deadline_seconds": 600},
        "admission": {"require_client_token": True, "deployment_id": DEPLOYMENT},
        "protocol": {"name": "hist_kr", "epsilon": 1.0, "delta": 1e-6, "n": 1000, "domain": 4},
    }
    config = tmp_path / "shuffler-1.toml"
    _write_toml(config, doc)
    log = tmp_path / "shuffler-1.log"
    state = tmp_path / "state" / "shuffler-1"
    marker = tmp_path / "paused"
    reports = _reports(keydir, 40, seed=7)
    dave = _token("dave", 25)
    got: list[list[str]] = []

    party = _spawn("shuffler-1", config, log, timeout=60.0)
    try:
        got.append(trio.run(_submit_parts, party.address.port, [reports[:20]], dave))
        party.kill()  # SIGKILL after the ACK
        env = {"ESA_TEST_PAUSE_AT": "commit_reports", "ESA_TEST_PAUSE_MARKER": str(marker)}
        party = _spawn("shuffler-1", config, log, timeout=60.0, env=env)

        async def mid_commit() -> None:
            fs = await _connect(party.address.port, "127.0.0.2")
            await fs.send(w.SubmitFrame(KEY_EPOCH, tuple(reports[20:24]), dave).to_bytes())
            with trio.fail_after(30):
                while not marker.exists():
                    await trio.sleep(0.02)
            await trio.aclose_forcefully(fs.stream)

        trio.run(mid_commit)
        assert marker.read_text() == "commit_reports"
        party.kill()  # SIGKILL inside the reports' transaction
        at_kill = _stored_quotas(state)
        party = _spawn("shuffler-1", config, log, timeout=60.0)
        got.append(
            trio.run(_submit_parts, party.address.port, [reports[24:26], reports[26:27]], dave)
        )
        status = trio.run(query, party.query_address, w.QueryKind.STATUS)
    finally:
        party.kill()
    assert got[0] == ["ack"]
    assert at_kill == {"client:dave": (0, 24)}  # the paused frame's 4 charged, not stored
    # 24 of 25 charged: 2 more would pass it, 1 does not.
    assert got[1] == ["quota_exceeded", "ack"]
    assert status["open_reports"] == 21  # the paused frame was never committed
