"""Several shuffler chains into one analyzer over TCP (RSum_RM: one chain per precision).

The process tests start real parties on 127.0.0.1 and end every one of them (``run_tcp`` /
``running_chain`` tear the process groups down in ``finally``); the analyzer's join of the
chains' epochs and its crash recovery are driven in memory over its connection handler.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import trio
import trio.testing
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

import crypto
import esa
from esa.net import FrameStream, PartyService, batch_id_for, close_epoch, query, submit_reports
from esa.net import _wire as w
from esa.net._config import config_from_dict
from protocols import ProtocolSpec, RSumRM, build_protocol
from simulations._tcp_run import run_tcp, running_chain, wait_processed
from tests._inmemory import Connect, drive

KEY_EPOCH = 1
M = 2  # shufflers per chain


def _source(n: int = 3000) -> tuple[str, ProtocolSpec]:
    """RSum_RM with 2 messages, as the parties are configured with it (name and spec)."""
    return ("rsum_rm", ProtocolSpec(epsilon=1.0, delta=1e-6, n=n, options={"messages": 2}))


def _rm(n: int = 3000) -> RSumRM:
    p = build_protocol(*_source(n))
    assert isinstance(p, RSumRM)
    assert p.channels == 2
    return p


@pytest.mark.slow
def test_same_seed_same_estimate_and_counters_as_in_process() -> None:
    n, n_r = 3000, 3
    source = _source(n)
    protocol = _rm(n)
    values = np.random.default_rng(7).random(n)
    config = esa.PipelineConfig(shufflers=M, fake_reports=n_r, workers=1)
    tcp = run_tcp(source, values, config, rng=np.random.default_rng(11), timeout=120)
    inproc = esa.run_pipeline(protocol, values, config, rng=np.random.default_rng(11))
    # Bit-identical: the same randomizer draws and the same per-chain fakes.
    np.testing.assert_array_equal(tcp.estimate.values, inproc.estimate.values)
    np.testing.assert_array_equal(tcp.estimate.expected_std, inproc.estimate.expected_std)
    # Every chain's shufflers (channel field set, fakes counted), then the analyzer.
    assert [h.to_json() for h in tcp.hops] == [h.to_json() for h in inproc.hops]
    assert [(h.role, h.channel, h.hop) for h in tcp.hops] == [
        ("shuffler", 0, 0),
        ("shuffler", 0, 1),
        ("shuffler", 1, 0),
        ("shuffler", 1, 1),
        ("analyzer", 0, M),
    ]
    assert all(h.fakes_added == n_r for h in tcp.hops[:-1])
    # Each precision's chain carries its own precision only: n users + m·n_r fakes each.
    per_precision = np.bincount(protocol.channel_of(tcp.analyzer_messages), minlength=2)
    assert per_precision.tolist() == [n + M * n_r] * 2
    assert tcp.estimate.extra["messages_per_precision"] == [n + M * n_r] * 2
    assert np.array_equal(
        np.sort(tcp.analyzer_messages, axis=0), np.sort(inproc.analyzer_messages, axis=0)
    )
    j = tcp.to_json()
    assert j["drop_check"] == {"ok": True, "problems": []}
    assert j["submit"]["acknowledged"] == 2 * n
    assert j["epochs"] == 1
    # A different seed gives a different estimate (the comparison can fail).
    other = esa.run_pipeline(protocol, values, config, rng=np.random.default_rng(12))
    assert not np.array_equal(other.estimate.values, tcp.estimate.values)


@pytest.mark.slow
def test_analyzer_sigkilled_between_chains_counts_everything_once(tmp_path: Path) -> None:
    """Chain 1 delivers epoch 0, the analyzer is SIGKILLed and restarted, then chain 2
    delivers: the analyzer waits for both chains and counts every report exactly once."""
    n = 400
    source = _source(3000)
    protocol = _rm(3000)
    with running_chain(
        tmp_path, source, shufflers=M, channels=2, crypto_mode="ideal", key_epoch=KEY_EPOCH
    ) as chain:
        kd = crypto.KeyDirectory.load(tmp_path / "keys")
        codec = esa.make_codec("ideal", message_size=protocol.message_size, layers=M + 1)
        msgs = esa.Encoder(protocol, codec, []).messages(
            np.linspace(0, 1, n), rng=np.random.default_rng(0)
        )
        reports = []
        for c in range(2):
            route = [p.layer_public for p in esa.chain_route(kd, channels=2, channel=c)]
            enc = esa.Encoder(protocol, codec, route, workers=1)
            part = msgs[protocol.channel_of(msgs) == c]
            reports.append(list(enc.seal_messages(part, epoch=KEY_EPOCH, crowd_id=0, first_hop=0)))
        reports = [[bytes(r) for r in part] for part in reports]

        async def deliver(c: int) -> None:
            stats = await submit_reports(
                chain.firsts[c].address, reports[c], key_epoch=KEY_EPOCH, connections=4
            )
            assert stats.acknowledged == n
            assert stats.failed_frames == 0
            await close_epoch(chain.firsts[c].address, chain.operator)

        async def first_half() -> dict[str, Any]:
            await deliver(0)
            with trio.fail_after(60):  # chain 1's batch is at the analyzer, waiting
                while True:
                    st = await query(chain.analyzer.query_address, esa.net.QueryKind.STATUS)
                    if st["epochs"]["closed"] == 1:
                        return st
                    await trio.sleep(0.05)

        st = trio.run(first_half)
        assert st["epochs"]["processed"] == 0
        assert st["channels"] == 2
        chain.analyzer.kill()
        chain.restart(len(chain.parties) - 1)

        async def second_half() -> dict[str, Any]:
            await deliver(1)
            await wait_processed(chain, timeout=60)
            return await query(chain.analyzer.query_address, esa.net.QueryKind.RESULT, {"n": n})

        res = trio.run(second_half)
    assert res["drop_check"] == {"ok": True, "problems": []}
    assert res["epochs"] == 1
    assert res["estimate_extra"]["messages_per_precision"] == [n, n]
    assert [h["received"] for h in res["hops"]] == [n, n, n, n, 2 * n]
    assert [h["channel"] for h in res["hops"]] == [0, 0, 1, 1, 0]


# ---------------------------------------------------------------------------- in memory


@pytest.fixture(scope="module")
def keydir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("channels")
    crypto.KeyDirectory.create(root / "keys", shufflers=2 * M)
    return root


def _doc(role: str, hop: int, **extra: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "role": role,
        "hop": hop,
        "channels": 2,
        "state_dir": f"state-{role}-{hop}",
        "listen": {"host": "127.0.0.1", "port": 0},
        "tls": {"insecure_plaintext": True},  # TLS is tested in test_net_tls.py
        "keys": {"epochs": {str(KEY_EPOCH): "keys"}},
        "protocol": {"name": "rsum_rm", "epsilon": 1.0, "delta": 1e-6, "n": 3000},
        **extra,
    }
    if role == "shuffler":
        doc["next"] = {"host": "127.0.0.1", "port": 9}
    return doc


def _analyzer(root: Path, state: str) -> PartyService:
    doc = _doc("analyzer", M, state_dir=state)
    return PartyService(config_from_dict(doc, base=root, simulation=True), protocol=_rm())


def _delivery(root: Path, channel: int, count: int, *, epoch: int = 0) -> tuple[bytes, bytes]:
    """What chain ``channel``'s last shuffler sends the analyzer for ``epoch``: one signed
    chunk of ``count`` reports of its precision, and the signed chain of counts."""
    protocol = _rm()
    kd = crypto.KeyDirectory.load(root / "keys")
    parties = esa.chain_route(kd, channels=2, channel=channel)
    codec = esa.make_codec("onion", message_size=protocol.message_size, layers=M + 1)
    enc = esa.Encoder(protocol, codec, [p.layer_public for p in parties], workers=1)
    msgs = protocol.sample_channel_fakes(count, channel=channel, rng=np.random.default_rng(5))
    reports = tuple(enc.seal_messages(msgs, epoch=KEY_EPOCH, crowd_id=0, first_hop=M))
    keys = [kd.private(p.name) for p in parties[:M]]
    bid = batch_id_for(keys[-1].public().verify_public, KEY_EPOCH, epoch)
    chunk = w.BatchChunk(M - 1, M, KEY_EPOCH, epoch, bid, 0, 1, reports).sign(keys[-1].signing)
    statements = tuple(
        w.CountStatement(h, KEY_EPOCH, epoch, bid, count, 0, 0, 0, 0, count).signed_by(k.signing)
        for h, k in enumerate(keys)
    )
    return chunk, w.CountsFrame(statements).to_bytes()


async def _ack(fs: FrameStream, payload: bytes) -> w.Ack:
    await fs.send(payload)
    return w.parse_ack(await fs.receive())


async def _result(fs: FrameStream) -> dict[str, Any]:
    await fs.send(w.Query(w.QueryKind.RESULT, json.dumps({"n": 50}).encode()).to_bytes())
    body: dict[str, Any] = json.loads(w.parse_reply(await fs.receive()).body)
    return body


def test_analyzer_joins_the_chains_and_tells_them_apart_by_signature(keydir: Path) -> None:
    svc = _analyzer(keydir, "state-join")
    chunk0, counts0 = _delivery(keydir, 0, 50)
    chunk1, counts1 = _delivery(keydir, 1, 40)
    kd = crypto.KeyDirectory.load(keydir / "keys")
    res: dict[str, Any] = {}

    async def script(connect: Connect) -> None:
        fs = await connect()
        assert await _ack(fs, chunk0) == w.Ack(50, 0)
        assert await _ack(fs, counts0) == w.Ack(0, 0)
        # Chain 1's epoch 0 is complete, chain 2's is not: nothing is analyzed yet.
        await trio.sleep(0.3)
        assert svc.counters["epochs_processed"] == 0
        assert [(e.epoch, e.state) for e in svc.inbox.epochs()] == [(0, "closed")]
        # Frames must be signed by the LAST shuffler of some chain.
        body = w._parse_unverified_batch(chunk1)
        hop0 = kd.private(crypto.shuffler_name(M)).signing  # chain 2, hop 0
        for signer in (hop0, Ed25519PrivateKey.generate()):
            await fs.send(body.sign(signer))
            reply = await fs.receive()
            assert w.parse_reject(reply).reason is w.RejectReason.BAD_SIGNATURE
        assert await _ack(fs, chunk1) == w.Ack(40, 0)
        assert await _ack(fs, counts1) == w.Ack(0, 0)
        while svc.counters["epochs_processed"] < 1:
            await trio.sleep(0.02)
        res.update(await _result(await connect(query=True)))  # the query listener

    drive(svc, script, work_loop=True)
    assert res["epochs"] == 1
    assert res["drop_check"] == {"ok": True, "problems": []}
    assert res["estimate_extra"]["messages_per_precision"] == [50, 40]
    assert [(h["role"], h["channel"], h["received"]) for h in res["hops"]] == [
        ("shuffler", 0, 50),
        ("shuffler", 0, 50),
        ("shuffler", 1, 40),
        ("shuffler", 1, 40),
        ("analyzer", 0, 90),
    ]
    assert svc.rejected["bad_signature"] == 2


def test_crash_between_the_chains_commits_counts_each_report_once(keydir: Path) -> None:
    """The lead (chain 1's id) commits the whole epoch's output; a crash before the other
    chains' ids are marked leaves them closed. The restarted analyzer only marks them."""
    svc = _analyzer(keydir, "state-crash")
    deliveries = [_delivery(keydir, c, count) for c, count in ((0, 30), (1, 20))]

    async def deliver(connect: Connect) -> None:
        fs = await connect()
        for chunk, counts in deliveries:
            await _ack(fs, chunk)
            await _ack(fs, counts)

    # Store both chains' batches without the work loop, then commit only the lead, as a
    # SIGKILL between the two commits would leave the inbox.
    svc._work_loop = trio.sleep_forever  # type: ignore[method-assign]
    drive(svc, deliver, work_loop=True)
    svc = _analyzer(keydir, "state-crash")
    members = svc.inbox.epochs("closed")
    assert [e.epoch for e in members] == [0, 1]
    reports = [svc.inbox.epoch_reports(e.epoch) for e in members]
    commit = svc._analyze_epoch(members, reports, [0, 0])
    svc.inbox.commit_processed(0, **commit)
    svc.close()

    svc = _analyzer(keydir, "state-crash")
    res: dict[str, Any] = {}

    async def recover(connect: Connect) -> None:
        while svc.inbox.epochs("closed"):
            await trio.sleep(0.02)
        res.update(await _result(await connect(query=True)))

    drive(svc, recover, work_loop=True)
    assert svc.counters["epochs_processed"] == 0  # nothing analyzed twice
    assert res["epochs"] == 1
    assert res["estimate_extra"]["messages_per_precision"] == [30, 20]
    assert res["hops"][-1]["received"] == 50
    with esa.net._inbox.Inbox(keydir / "state-crash" / "inbox.db", party="analyzer") as inbox:
        assert [e.state for e in inbox.epochs()] == ["processed", "processed"]
        assert inbox.epoch_reports(1) == []  # the member's input is gone too


@pytest.mark.parametrize(
    ("role", "hop", "change", "message"),
    [
        ("shuffler", 0, {"channel": 2}, r"channel must be <= 1"),
        ("analyzer", M, {"channel": 0}, "takes no channel"),
        ("shuffler", 0, {"channels": 0}, "channels must be an integer >= 1"),
    ],
)
def test_channel_config_errors(
    keydir: Path, role: str, hop: int, change: dict[str, Any], message: str
) -> None:
    with pytest.raises(esa.ConfigError, match=message):
        config_from_dict({**_doc(role, hop), **change}, base=keydir, simulation=True)


def test_services_refuse_a_chain_count_the_protocol_does_not_use(keydir: Path) -> None:
    hist = build_protocol("hist_kr", ProtocolSpec(epsilon=1.0, delta=1e-6, n=1000, domain=4))
    doc = _doc("analyzer", M, state_dir="state-mismatch")
    with pytest.raises(esa.ConfigError, match=r"hist_kr .* 1 shuffler chain.*channels = 2"):
        PartyService(config_from_dict(doc, base=keydir, simulation=True), protocol=hist)
    one = {**_doc("shuffler", 0, state_dir="state-mismatch-2"), "channels": 1}
    with pytest.raises(esa.ConfigError, match=r"rsum_rm .* 2 shuffler chain.*channels = 1"):
        PartyService(config_from_dict(one, base=keydir, simulation=True), protocol=_rm())


def test_chain_routes_and_keygen_names(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from simulations.cli import main

    assert (
        main(["keygen", "--out", str(tmp_path / "k"), "--shufflers", "2", "--channels", "3"]) == 0
    )
    capsys.readouterr()
    kd = crypto.KeyDirectory.load(tmp_path / "k")
    names = [[p.name for p in esa.chain_route(kd, channels=3, channel=c)] for c in range(3)]
    assert names == [
        ["shuffler-1", "shuffler-2", "analyzer"],
        ["shuffler-3", "shuffler-4", "analyzer"],
        ["shuffler-5", "shuffler-6", "analyzer"],
    ]
    # One chain keeps the single-chain names; a count that does not divide is refused.
    assert [p.name for p in esa.chain_route(kd, channels=1, channel=0)][:2] == [
        "shuffler-1",
        "shuffler-2",
    ]
    with pytest.raises(esa.ConfigError, match="not a multiple of channels=4"):
        esa.chain_route(kd, channels=4, channel=0)
    assert main(["keygen", "--out", str(tmp_path / "j"), "--channels", "2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [(p["name"], p["channel"], p["hop"]) for p in out["parties"]][2:5] == [
        ("shuffler-3", 0, 2),
        ("shuffler-4", 1, 0),
        ("shuffler-5", 1, 1),
    ]


def test_submit_needs_the_first_shuffler_of_every_chain(
    keydir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from simulations.cli import main
    from simulations.commands import submit

    # Parties that state no [protocol]: the flags decide (a local simulation's client).
    monkeypatch.setattr(submit, "_deployment", lambda addresses: (None, None))
    argv = ["submit", "--local-simulation", "--keys", str(keydir / "keys"), "--protocol", "rsum_rm"]
    argv += ["--n", "3000", "--insecure-plaintext"]
    with pytest.raises(SystemExit) as exc:
        main([*argv, "--to", "127.0.0.1:9"])
    assert exc.value.code == 2
    assert "2 shuffler chain(s)" in capsys.readouterr().err


def test_trap_reports_of_a_chain_are_that_chains_fakes(keydir: Path) -> None:
    protocol = _rm()
    kd = crypto.KeyDirectory.load(keydir / "keys")
    route = [p.layer_public for p in esa.chain_route(kd, channels=2, channel=1)]
    traps = esa.make_traps(protocol, route, count=40, key_epoch=KEY_EPOCH, channel=1)
    codec = esa.make_codec("onion", message_size=protocol.message_size, layers=M + 1)
    analyzer = esa.Analyzer(hop=M, codec=codec, key=kd.private("analyzer").layer, protocol=protocol)
    layers = np.empty(len(traps.analyzer_layers), dtype=object)
    layers[:] = traps.analyzer_layers
    out = analyzer.process(layers, epoch=KEY_EPOCH, n_users=1, n_fakes=0)
    assert out.counters.forwarded == 40
    # Precision 2's chain carries precision 2's messages only, traps included.
    assert protocol.channel_of(out.messages).tolist() == [1] * 40
    assert {len(r) for r in traps.reports} == {codec.expected_size(0)}  # type: ignore[attr-defined]
