"""The trap audit is the [auditor]'s alone, and each trap report counts once.

Trap reports are removed from the estimate like fakes, and a trap that never arrives is an
accusation against the shufflers. Before trap frames were signed, anyone who could reach the
analyzer could open a "trap set" listing the analyzer layer of one report it had built K
times (K reports subtracted: n and the estimate skewed, the drop check still ok), or open a
commitment to random bytes (a false accusation). These tests drive an in-process analyzer
over trio's in-memory streams: its upstream batches are signed BATCH chunks and COUNTS
chains built here with the shufflers' keys, and its epochs are processed by calling the
service, so no process is started.

The invariant RESULT holds: the trap reports it removes are distinct reports that reached
the analyzer, opened by the auditor, so ``n`` never drops below the other reports it holds.
"""

from __future__ import annotations

import dataclasses
import json
import sqlite3
from pathlib import Path
from typing import Any, Final

import numpy as np
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

import crypto
import esa
from esa.net import FrameStream, PartyService, TrapSet, make_traps, trap_statement
from esa.net import _wire as w
from esa.net._config import config_from_dict
from protocols import ProtocolSpec, build_protocol
from simulations.cli import main as cli_main
from tests._inmemory import Connect, drive

PROTOCOL = build_protocol("hist_kr", ProtocolSpec(epsilon=1.0, delta=1e-6, n=1000, domain=4))
KEY_EPOCH = 1
HONEST = 200


@pytest.fixture(scope="module")
def keydir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("traps")
    crypto.KeyDirectory.create(root / "keys", shufflers=2)
    return root


def _pub(key: Ed25519PrivateKey) -> str:
    return key.public_key().public_bytes_raw().hex()


def _analyzer(root: Path, state: str, auditor: Ed25519PrivateKey | None) -> PartyService:
    doc: dict[str, Any] = {
        "role": "analyzer",
        "hop": 2,
        "state_dir": state,
        "listen": {"host": "127.0.0.1", "port": 0},
        "tls": {"insecure_plaintext": True},  # TLS is tested in test_net_tls.py
        "keys": {"epochs": {str(KEY_EPOCH): "keys"}},
        "protocol": {"name": "hist_kr", "epsilon": 1.0, "delta": 1e-6, "n": 1000, "domain": 4},
    }
    if auditor is not None:
        doc["auditor"] = {"public_key": _pub(auditor)}
    return PartyService(config_from_dict(doc, base=root, simulation=True), protocol=PROTOCOL)


def _route(root: Path) -> list[bytes]:
    return [p.layer_public for p in crypto.KeyDirectory.load(root / "keys").route()]


def _honest(root: Path, count: int = HONEST) -> list[bytes]:
    """Users' reports as the analyzer receives them (its layer only)."""
    codec = esa.make_codec("onion", message_size=PROTOCOL.message_size, layers=3)
    enc = esa.Encoder(PROTOCOL, codec, _route(root), workers=1)
    msgs = PROTOCOL.randomize(np.arange(count) % 4, rng=np.random.default_rng(0))
    return [bytes(r) for r in enc.seal_messages(msgs, epoch=KEY_EPOCH, crowd_id=0, first_hop=2)]


def _traps(root: Path, count: int) -> TrapSet:
    return make_traps(PROTOCOL, _route(root), count=count, key_epoch=KEY_EPOCH)


def _upstream(root: Path, reports: list[bytes], epoch: int) -> list[bytes]:
    """What honest-looking shufflers 1 and 2 send the analyzer for ``epoch``: one signed
    chunk of ``reports`` and a consistent chain of counts (a shuffler that *replaced*
    reports signs the same counts, which is what traps are for)."""
    kd = crypto.KeyDirectory.load(root / "keys")
    signers = [kd.private(crypto.shuffler_name(h)).signing for h in range(2)]
    bid = bytes([epoch + 1]) * 32
    chunk = w.BatchChunk(1, 2, KEY_EPOCH, epoch, bid, 0, 1, tuple(reports)).sign(signers[1])
    n = len(reports)
    ids = [bytes([0, epoch + 1]) * 16, bid]  # hop 1's batch is the one delivered here
    chain = tuple(
        w.CountStatement(h, KEY_EPOCH, epoch, ids[h], n, 0, 0, 0, 0, n).signed_by(signers[h])
        for h in range(2)
    )
    return [chunk, w.CountsFrame(chain).to_bytes()]


async def _ask(fs: FrameStream, what: w.QueryKind, params: dict[str, Any]) -> dict[str, Any]:
    """A QUERY's JSON reply; a REJECT becomes ``{"rejected": reason, "detail": …}``."""
    await fs.send(w.Query(what, json.dumps(params).encode()).to_bytes())
    payload = await fs.receive()
    if w.peek_kind(payload) is w.FrameKind.REJECT:
        rej = w.parse_reject(payload)
        return {"rejected": rej.reason.name.lower(), "detail": rej.detail}
    result: dict[str, Any] = json.loads(w.parse_reply(payload).body)
    return result


def _commit(traps: TrapSet, key: Ed25519PrivateKey) -> dict[str, Any]:
    return {
        "commitment": traps.commitment.hex(),
        "key_epoch": traps.key_epoch,
        "signature": traps.signature("commit", key).hex(),
    }


def _opening(traps: TrapSet, key: Ed25519PrivateKey) -> dict[str, Any]:
    return {
        "commitment": traps.commitment.hex(),
        "key_epoch": traps.key_epoch,
        "nonce": traps.nonce.hex(),
        "reports": [r.hex() for r in traps.analyzer_layers],
        "signature": traps.signature("open", key).hex(),
    }


async def _deliver_and_process(
    svc: PartyService, fs: FrameStream, root: Path, reports: list[bytes], epoch: int
) -> None:
    for payload in _upstream(root, reports, epoch):
        await fs.send(payload)
        assert w.peek_kind(await fs.receive()) is w.FrameKind.ACK
    for rec in await svc._db(svc.inbox.epochs, "closed"):
        await svc._process(rec)


async def _result(connect: Connect) -> dict[str, Any]:
    """RESULT, asked on the analyzer's query listener (the batch port refuses it)."""
    return await _ask(await connect(query=True), w.QueryKind.RESULT, {})


def _same_result(a: dict[str, Any], b: dict[str, Any]) -> None:
    for key in ("n", "n_fakes", "estimate", "expected_std", "drop_check", "traps"):
        assert a[key] == b[key], key


def test_an_analyzer_without_an_auditor_refuses_every_trap_frame(keydir: Path) -> None:
    """No [auditor] key: no trap audit. Even a well-signed frame is refused, and says how
    to enable the audit."""
    svc = _analyzer(keydir, "state-no-auditor", None)
    key = Ed25519PrivateKey.generate()
    traps = _traps(keydir, 2)

    async def script(connect: Connect) -> None:
        fs = await connect()
        for what, params in [
            (w.QueryKind.TRAP_COMMIT, _commit(traps, key)),
            (w.QueryKind.TRAP_OPEN, _opening(traps, key)),
            (w.QueryKind.TRAP_COMMIT, {"commitment": "00" * 32}),
        ]:
            got = await _ask(fs, what, params)
            assert got["rejected"] == "bad_signature"
            assert "no [auditor] public_key" in got["detail"]
        assert (await _result(connect))["traps"]["unopened_commitments"] == 0

    drive(svc, script)
    assert svc.rejected == {"bad_signature": 3}


def test_trap_frames_must_be_signed_by_the_auditor_for_this_analyzer(keydir: Path) -> None:
    auditor, operator = Ed25519PrivateKey.generate(), Ed25519PrivateKey.generate()
    svc = _analyzer(keydir, "state-signed", auditor)
    traps = _traps(keydir, 3)
    # The same commitment signed for another analyzer (another layer key): not good here.
    elsewhere = dataclasses.replace(traps, analyzer_key=bytes(32))

    async def script(connect: Connect) -> None:
        fs = await connect()
        unsigned = {k: v for k, v in _commit(traps, auditor).items() if k != "signature"}
        commit_as_open = {
            **_opening(traps, auditor),
            "signature": _commit(traps, auditor)["signature"],
        }
        flipped = bytearray(traps.signature("commit", auditor))
        flipped[5] ^= 1
        for what, params in [
            (w.QueryKind.TRAP_COMMIT, unsigned),
            (w.QueryKind.TRAP_COMMIT, {**unsigned, "signature": "zz"}),
            (w.QueryKind.TRAP_COMMIT, {**unsigned, "signature": flipped.hex()}),
            # The operator is not the auditor.
            (w.QueryKind.TRAP_COMMIT, _commit(traps, operator)),
            # Signed for another analyzer.
            (
                w.QueryKind.TRAP_COMMIT,
                {**unsigned, "signature": _commit(elsewhere, auditor)["signature"]},
            ),
            # A commit's signature is no opening's.
            (w.QueryKind.TRAP_OPEN, commit_as_open),
        ]:
            got = await _ask(fs, what, params)
            assert got["rejected"] == "bad_signature", params
            assert "[auditor]" in got["detail"]
        # Malformed fields and an unserved key epoch are refused before the signature.
        signed = _commit(traps, auditor)
        for params, reason in [
            ({"key_epoch": KEY_EPOCH, "signature": "00"}, "bad_trap_opening"),
            ({**signed, "commitment": "00" * 31}, "bad_trap_opening"),
            ({**signed, "key_epoch": 1.5}, "bad_trap_opening"),
            ({**signed, "key_epoch": 2**32}, "bad_trap_opening"),
            ({**signed, "key_epoch": 7}, "unknown_key_epoch"),
        ]:
            assert (await _ask(fs, w.QueryKind.TRAP_COMMIT, params))["rejected"] == reason
        assert (await _result(connect))["traps"]["unopened_commitments"] == 0  # nothing recorded
        got = await _ask(fs, w.QueryKind.TRAP_COMMIT, _commit(traps, auditor))
        assert got == {"commitment": traps.commitment.hex(), "covers_epochs_after": -1}
        # A refused opening records nothing either.
        assert (await _ask(fs, w.QueryKind.TRAP_OPEN, _opening(traps, operator)))["rejected"] == (
            "bad_signature"
        )
        assert (await _result(connect))["traps"] == {
            "opened": 0,
            "arrived": 0,
            "unopened_commitments": 1,
        }

    drive(svc, script)
    assert svc.rejected == {"bad_signature": 7, "bad_trap_opening": 4, "unknown_key_epoch": 1}


def test_the_qa_inflation_attack_changes_neither_n_nor_the_estimate(keydir: Path) -> None:
    """The QA reproduction: 200 users plus one report the attacker built with make_traps
    (so it knows its analyzer layer). Its trap set lists that layer 500 times; it commits
    and opens, and opens a commitment to random bytes. Nothing of it is taken: RESULT is the
    same before and after, with the attacker's report counted as the user it posed as."""
    auditor, attacker = Ed25519PrivateKey.generate(), Ed25519PrivateKey.generate()
    svc = _analyzer(keydir, "state-qa", auditor)
    mine = _traps(keydir, 1)
    evil = dataclasses.replace(mine, analyzer_layers=mine.analyzer_layers * 500)
    junk = dataclasses.replace(mine, analyzer_layers=(bytes(100),), nonce=bytes(range(32)))

    async def script(connect: Connect) -> None:
        fs = await connect()
        reports = _honest(keydir) + list(mine.analyzer_layers)
        await _deliver_and_process(svc, fs, keydir, reports, epoch=0)
        before = await _result(connect)
        assert (before["n"], before["n_fakes"], before["drop_check"]["ok"]) == (HONEST + 1, 0, True)
        for traps in (evil, junk):
            for what, params in [
                (w.QueryKind.TRAP_COMMIT, _commit(traps, attacker)),
                (w.QueryKind.TRAP_OPEN, _opening(traps, attacker)),
            ]:
                assert (await _ask(fs, what, params))["rejected"] == "bad_signature"
            # The frames as the repro sent them (no signature at all).
            unsigned = {k: v for k, v in _opening(traps, attacker).items() if k != "signature"}
            for what, params in [
                (w.QueryKind.TRAP_COMMIT, {"commitment": traps.commitment.hex()}),
                (
                    w.QueryKind.TRAP_OPEN,
                    {k: unsigned[k] for k in ("nonce", "key_epoch", "reports")},
                ),
                (w.QueryKind.TRAP_OPEN, unsigned),
            ]:
                got = await _ask(fs, what, params)
                assert got["rejected"] == "bad_signature"
                assert got["detail"].startswith("unsigned trap")
        await _deliver_and_process(svc, fs, keydir, [], epoch=1)  # "any later epoch"
        after = await _result(connect)
        _same_result(before, after)

    drive(svc, script)


def test_a_trap_set_listing_a_report_twice_is_refused_even_from_the_auditor(
    keydir: Path,
) -> None:
    auditor = Ed25519PrivateKey.generate()
    svc = _analyzer(keydir, "state-dups", auditor)
    traps = _traps(keydir, 2)
    doubled = dataclasses.replace(traps, analyzer_layers=traps.analyzer_layers * 3)

    async def script(connect: Connect) -> None:
        fs = await connect()
        assert "commitment" in await _ask(fs, w.QueryKind.TRAP_COMMIT, _commit(doubled, auditor))
        await _deliver_and_process(
            svc, fs, keydir, _honest(keydir) + list(traps.analyzer_layers), 0
        )
        got = await _ask(fs, w.QueryKind.TRAP_OPEN, _opening(doubled, auditor))
        assert got["rejected"] == "bad_trap_opening"
        assert "twice" in got["detail"]
        res = await _result(connect)
        assert res["traps"] == {"opened": 0, "arrived": 0, "unopened_commitments": 1}
        assert (res["n"], res["n_fakes"]) == (HONEST + 2, 0)

    drive(svc, script)


def test_a_trap_report_counts_once_across_commitments_and_replays(keydir: Path) -> None:
    """The auditor opens trap T under commitment A, then T again (with a new trap U) under
    commitment B: T is one report, counted once. Replaying either signed opening — also
    after a restart — answers the same and counts nothing again."""
    auditor = Ed25519PrivateKey.generate()
    two = _traps(keydir, 2)
    first = dataclasses.replace(two, analyzer_layers=two.analyzer_layers[:1])
    both = dataclasses.replace(two, nonce=bytes(range(32)))  # T and U, another commitment
    replies: list[dict[str, Any]] = []
    results: list[dict[str, Any]] = []

    async def script(connect: Connect) -> None:
        fs = await connect()
        for traps in (first, both):
            await _ask(fs, w.QueryKind.TRAP_COMMIT, _commit(traps, auditor))
        await _deliver_and_process(svc, fs, keydir, _honest(keydir) + list(two.analyzer_layers), 0)
        replies.append(await _ask(fs, w.QueryKind.TRAP_OPEN, _opening(first, auditor)))
        replies.append(await _ask(fs, w.QueryKind.TRAP_OPEN, _opening(both, auditor)))
        results.append(await _result(connect))
        replies.append(await _ask(fs, w.QueryKind.TRAP_OPEN, _opening(both, auditor)))  # replay
        replies.append(await _ask(fs, w.QueryKind.TRAP_COMMIT, _commit(first, auditor)))
        results.append(await _result(connect))

    async def after_restart(connect: Connect) -> None:
        fs = await connect()
        replies.append(await _ask(fs, w.QueryKind.TRAP_OPEN, _opening(first, auditor)))
        results.append(await _result(connect))

    svc = _analyzer(keydir, "state-once", auditor)
    drive(svc, script)
    svc = _analyzer(keydir, "state-once", auditor)
    drive(svc, after_restart)
    assert replies[0] == {"traps": 1, "repeated": 0, "arrived": 1, "missing": 0, "ok": True}
    assert replies[1] == {"traps": 2, "repeated": 1, "arrived": 1, "missing": 0, "ok": True}
    assert replies[2] == replies[1]
    assert replies[3] == {"commitment": first.commitment.hex(), "covers_epochs_after": -1}
    assert replies[4] == replies[0]
    res = results[0]
    assert res["traps"] == {"opened": 2, "arrived": 2, "unopened_commitments": 0}
    # The invariant: the reports removed are the distinct arrived traps, and n is exactly
    # the other reports.
    assert res["n_fakes"] == res["traps"]["arrived"] == 2
    assert res["n"] == HONEST
    assert res["drop_check"] == {"ok": True, "problems": []}
    for later in results[1:]:
        _same_result(res, later)


def test_the_auditor_still_catches_a_shuffler_that_replaces_reports(keydir: Path) -> None:
    """Hop 1 swaps 5 of the 10 traps for reports of its own and signs consistent counts:
    only the traps show it, and the accusation names the commitment and the auditor."""
    auditor = Ed25519PrivateKey.generate()
    svc = _analyzer(keydir, "state-replace", auditor)
    traps = _traps(keydir, 10)
    swapped = _honest(keydir, 5)  # what the shuffler put in their place

    async def script(connect: Connect) -> None:
        fs = await connect()
        await _ask(fs, w.QueryKind.TRAP_COMMIT, _commit(traps, auditor))
        delivered = _honest(keydir)[5:] + list(traps.analyzer_layers[5:]) + swapped
        await _deliver_and_process(svc, fs, keydir, delivered, 0)
        got = await _ask(fs, w.QueryKind.TRAP_OPEN, _opening(traps, auditor))
        assert got == {"traps": 10, "repeated": 0, "arrived": 5, "missing": 5, "ok": False}
        res = await _result(connect)
        assert res["traps"] == {"opened": 10, "arrived": 5, "unopened_commitments": 0}
        assert res["n_fakes"] == 5
        assert res["n"] == HONEST  # 195 users + the 5 substitutes
        assert not res["drop_check"]["ok"]
        (problem,) = res["drop_check"]["problems"]
        assert problem.startswith(f"trap commitment {traps.commitment.hex()[:16]}")
        assert f"auditor {_pub(auditor)[:16]}" in problem
        assert "5 of its 10 trap reports never reached the analyzer" in problem

    drive(svc, script)


def test_traps_waiting_in_an_unprocessed_epoch_are_not_opened_yet(keydir: Path) -> None:
    """Counted before their epoch is processed, arrived traps would be removed from an
    estimate that does not hold them: the opening is refused, nothing recorded, and goes
    through once the epoch is processed."""
    auditor = Ed25519PrivateKey.generate()
    svc = _analyzer(keydir, "state-waiting", auditor)
    traps = _traps(keydir, 4)

    async def script(connect: Connect) -> None:
        fs = await connect()
        await _ask(fs, w.QueryKind.TRAP_COMMIT, _commit(traps, auditor))
        await _deliver_and_process(svc, fs, keydir, _honest(keydir, 20), 0)
        # Epoch 1 holds the traps and is complete, but not processed yet.
        for payload in _upstream(keydir, list(traps.analyzer_layers), 1):
            await fs.send(payload)
            assert w.peek_kind(await fs.receive()) is w.FrameKind.ACK
        got = await _ask(fs, w.QueryKind.TRAP_OPEN, _opening(traps, auditor))
        assert got["rejected"] == "bad_trap_opening"
        assert "not processed yet" in got["detail"]
        assert (await _result(connect))["traps"]["unopened_commitments"] == 1
        for rec in await svc._db(svc.inbox.epochs, "closed"):
            await svc._process(rec)
        got = await _ask(fs, w.QueryKind.TRAP_OPEN, _opening(traps, auditor))
        assert got == {"traps": 4, "repeated": 0, "arrived": 4, "missing": 0, "ok": True}
        res = await _result(connect)
        assert (res["n"], res["n_fakes"]) == (20, 4)

    drive(svc, script)


def test_openings_recorded_before_signing_are_left_out(keydir: Path) -> None:
    """An inbox from before trap frames were signed: its traps table has no auditor column,
    and its openings may be anyone's. The party adds the columns; RESULT leaves those
    openings out of the estimate and the drop check, and says how many."""
    state = keydir / "state-legacy"
    _analyzer(keydir, "state-legacy", None).close()
    db = sqlite3.connect(state / "inbox.db")
    with db:
        db.execute("DROP TABLE traps")
        db.execute(
            "CREATE TABLE traps (commitment BLOB PRIMARY KEY, after_epoch INTEGER NOT NULL, "
            "total INTEGER, arrived INTEGER)"
        )
        # The QA attack's opening (500 "arrived") and a junk one (1 of 1 missing).
        db.execute("INSERT INTO traps VALUES (?, -1, 500, 500)", (b"\x01" * 32,))
        db.execute("INSERT INTO traps VALUES (?, -1, 1, 0)", (b"\x02" * 32,))
        db.execute("INSERT INTO traps VALUES (?, -1, NULL, NULL)", (b"\x03" * 32,))
    db.close()
    svc = _analyzer(keydir, "state-legacy", Ed25519PrivateKey.generate())

    async def script(connect: Connect) -> None:
        fs = await connect()
        await _deliver_and_process(svc, fs, keydir, _honest(keydir, 30), 0)
        res = await _result(connect)
        assert res["traps"] == {
            "opened": 0,
            "arrived": 0,
            "unopened_commitments": 1,
            "unsigned_openings": 2,
        }
        assert (res["n"], res["n_fakes"], res["drop_check"]["ok"]) == (30, 0, True)

    drive(svc, script)


def test_trap_statement_layout_and_misuse() -> None:
    key, commitment = bytes(range(32)), bytes(range(32, 64))
    commit = trap_statement("commit", analyzer_key=key, key_epoch=258, commitment=commitment)
    assert commit == b"esa/traps/v1/commit\x00" + key + b"\x00\x00\x01\x02" + commitment
    opening = trap_statement("open", analyzer_key=key, key_epoch=258, commitment=commitment)
    assert opening == b"esa/traps/v1/open\x00" + key + b"\x00\x00\x01\x02" + commitment
    with pytest.raises(esa.ParameterError, match="32 bytes"):
        trap_statement("open", analyzer_key=key[:31], key_epoch=1, commitment=commitment)
    with pytest.raises(esa.ParameterError, match="key_epoch"):
        trap_statement("open", analyzer_key=key, key_epoch=2**32, commitment=commitment)
    with pytest.raises(esa.ParameterError, match="action"):
        trap_statement("close", analyzer_key=key, key_epoch=1, commitment=commitment)  # type: ignore[arg-type]
    with pytest.raises(esa.ParameterError, match="nonce"):
        TrapSet(1, (), (), b"short", key)


_SHUFFLER: Final = {"role": "shuffler", "hop": 0, "next": {"host": "h", "port": 1}}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"auditor": {"public_key": "ab"}}, "[auditor] public_key must be 64 hex digits"),
        ({"auditor": {"key": "ab"}}, "[auditor]: unknown keys"),
        (_SHUFFLER, "[auditor] is the analyzer's"),
        # Small-order keys, under which OpenSSL verifies forged signatures (the identity
        # 01 00…00 verifies (R = identity, S = 0) for every message): anyone could sign.
        ({"auditor": {"public_key": "01" + "00" * 31}}, "anyone could sign under it"),
        ({"auditor": {"public_key": "00" * 32}}, "anyone could sign under it"),
        ({"operator": {"public_key": "01" + "00" * 31}}, "[operator] public_key 01"),
    ],
)
def test_auditor_config_errors(change: dict[str, Any], message: str) -> None:
    doc: dict[str, Any] = {
        "role": "analyzer",
        "hop": 2,
        "state_dir": "s",
        "listen": {"host": "127.0.0.1", "port": 0},
        "tls": {"insecure_plaintext": True},  # TLS is tested in test_net_tls.py
        "keys": {"epochs": {"1": "keys"}},
        "protocol": {"name": "hist_kr", "epsilon": 1.0, "delta": 1e-6, "n": 10},
        "auditor": {"public_key": _pub(Ed25519PrivateKey.generate())},
        **change,
    }
    with pytest.raises(esa.ConfigError) as info:
        config_from_dict(doc, base=Path("."), simulation=True)
    assert message in str(info.value)


def test_make_auditor_key_writes_a_key_the_analyzer_takes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "auditor.key"
    assert cli_main(["submit", "--make-auditor-key", str(path)]) == 0
    public = capsys.readouterr().out.strip()
    key = Ed25519PrivateKey.from_private_bytes(bytes.fromhex(path.read_text()))
    assert _pub(key) == public
    assert path.stat().st_mode & 0o777 == 0o600
