"""TLS on the wire: a shuffler and the analyzer with certificates from `esa keygen`.

Real TLS 1.3 over real sockets on 127.0.0.1, in one process (two PartyService objects):
clients submit trusting the deployment CA only; the shuffler forwards to the analyzer over
mutual TLS (its party certificate); the query listener requires a client certificate from
the deployment CA; plain TCP, another CA and a missing client certificate are refused.
Also: the config's [tls] table, and the `esa keygen` / `esa submit` flags.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import trio

import crypto
import esa
from esa.net import PartyService, query, submit_reports, tls_client_context, write_tls_material
from esa.net import _wire as w
from esa.net._config import config_from_dict
from esa.net._frames import request
from protocols import ProtocolSpec, build_protocol
from simulations.cli import main as cli_main

PROTOCOL = build_protocol("hist_kr", ProtocolSpec(epsilon=1.0, delta=1e-6, n=200, domain=4))
PROTOCOL_TABLE = {"name": "hist_kr", "epsilon": 1.0, "delta": 1e-6, "n": 200, "domain": 4}
HOST = "127.0.0.1"


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """What `esa keygen --out keys --shufflers 1 --host ...=127.0.0.1 --client ops` writes."""
    path = tmp_path_factory.mktemp("tls")
    argv = ["keygen", "--out", str(path / "keys"), "--shufflers", "1", "--json"]
    argv += ["--host", "shuffler-1=127.0.0.1", "--host", "analyzer=127.0.0.1"]
    assert cli_main([*argv, "--client", "ops"]) == 0
    return path


def _tls(name: str) -> dict[str, str]:
    return {"ca": "keys/tls/ca.crt", "cert": f"keys/tls/{name}.crt", "key": f"keys/tls/{name}.key"}


def _docs(state: str) -> tuple[dict[str, Any], dict[str, Any]]:
    common = {"keys": {"epochs": {"1": "keys"}}, "protocol": PROTOCOL_TABLE}
    analyzer = {
        "role": "analyzer",
        "hop": 1,
        "state_dir": f"{state}/a",
        "listen": {"host": HOST, "port": 0},
        "tls": _tls("analyzer"),
        **common,
    }
    shuffler = {
        "role": "shuffler",
        "hop": 0,
        "state_dir": f"{state}/s",
        "listen": {"host": HOST, "port": 0},
        "next": {"host": HOST, "port": 0},  # set once the analyzer listens
        "tls": _tls("shuffler-1"),
        **common,
    }
    return analyzer, shuffler


def _reports(root: Path, n: int) -> list[bytes]:
    kd = crypto.KeyDirectory.load(root / "keys")
    codec = esa.make_codec("onion", message_size=PROTOCOL.message_size, layers=2)
    enc = esa.Encoder(PROTOCOL, codec, [p.layer_public for p in kd.route()], workers=1)
    values = np.arange(n) % 4
    return [bytes(r) for r in enc.encode(values, rng=np.random.default_rng(0), epoch=1)]


Script = Callable[[PartyService, PartyService], Awaitable[None]]


def _run(root: Path, state: str, script: Script) -> None:
    """Start the analyzer, then the shuffler pointed at it, run ``script``, stop both."""
    a_doc, s_doc = _docs(state)
    analyzer = PartyService(config_from_dict(a_doc, base=root), protocol=PROTOCOL)
    shuffler: PartyService | None = None

    async def main() -> None:
        nonlocal shuffler
        async with trio.open_nursery() as nursery:
            port = await nursery.start(analyzer.run)
            s_doc["next"] = {"host": HOST, "port": port}
            shuffler = PartyService(config_from_dict(s_doc, base=root), protocol=PROTOCOL)
            await nursery.start(shuffler.run)
            with trio.fail_after(60):
                await script(shuffler, analyzer)
            nursery.cancel_scope.cancel()

    try:
        trio.run(main)
    finally:
        analyzer.close()
        if shuffler is not None:
            shuffler.close()


def test_keygen_writes_the_ca_party_and_client_certificates(root: Path) -> None:
    tls = root / "keys" / "tls"
    names = {p.name for p in tls.iterdir()}
    assert names == {
        f"{n}.{ext}" for n in ("ca", "shuffler-1", "analyzer", "ops") for ext in ("crt", "key")
    }
    for key in tls.glob("*.key"):
        assert stat.S_IMODE(key.stat().st_mode) == 0o600, key.name
    assert stat.S_IMODE(tls.stat().st_mode) == 0o700
    ca = crypto.load_certificate(tls / "ca.crt")
    crypto.check_certificate(crypto.load_certificate(tls / "analyzer.crt"), ca)


def test_submit_forward_and_query_over_tls(root: Path) -> None:
    reports = _reports(root, 60)
    ca = root / "keys" / "tls" / "ca.crt"
    client = tls_client_context(ca)
    ops = tls_client_context(ca, cert=root / "keys/tls/ops.crt", key=root / "keys/tls/ops.key")

    async def script(shuffler: PartyService, analyzer: PartyService) -> None:
        assert shuffler.port is not None
        assert analyzer.query_port is not None
        first = esa.Address(HOST, shuffler.port, tls=client)
        stats = await submit_reports(first, reports, key_epoch=1, connections=4)
        assert stats.acknowledged == stats.stored == 60
        await shuffler._close_open_epochs(operator=True)
        results = esa.Address(HOST, analyzer.query_port, tls=ops)
        # The shuffler forwards over mutual TLS with its party certificate.
        while (await query(results, w.QueryKind.RESULT))["epochs"] < 1:
            await trio.sleep(0.05)
        res = await query(results, w.QueryKind.RESULT)
        assert res["n"] == 60
        assert res["hops"][0]["forwarded"] == 60

        # Without a client certificate the query listener refuses the connection (in
        # TLS 1.3 the refusal shows on the first read).
        anonymous = esa.Address(HOST, analyzer.query_port, tls=client)
        with pytest.raises((OSError, trio.BrokenResourceError, esa.ESAError)):
            await query(anonymous, w.QueryKind.STATUS, timeout=10)
        # Plain TCP to a TLS port: no frame is ever answered.
        with pytest.raises((OSError, trio.BrokenResourceError, esa.ESAError, trio.TooSlowError)):
            await query(esa.Address(HOST, shuffler.port), w.QueryKind.STATUS, timeout=5)
        # A client trusting another CA refuses the party's certificate.
        other = tmp_ca(root)
        with pytest.raises(OSError, match="TLS handshake"):
            await query(esa.Address(HOST, shuffler.port, tls=other), w.QueryKind.STATUS)
        # The public STATUS on the batch port needs no client certificate; the full one
        # and RESULT are refused there.
        status = await query(first, w.QueryKind.STATUS)
        assert (status["party"], status["view"]) == ("shuffler-1", "public")
        assert "counters" not in status
        with pytest.raises(esa.PeerRejected, match="unexpected_kind"):
            await query(first, w.QueryKind.STATUS, {"view": "full"})
        # The full STATUS needs the client certificate (refused without it above).
        assert shuffler.query_port is not None
        full = await query(esa.Address(HOST, shuffler.query_port, tls=ops), w.QueryKind.STATUS)
        assert full["view"] == "full"
        assert full["counters"]["reports_acknowledged"] == 60
        assert analyzer.port is not None
        (resp,) = await request(
            esa.Address(HOST, analyzer.port, tls=client),
            [w.Query(w.QueryKind.RESULT, b"{}").to_bytes()],
        )
        assert w.parse_reject(resp).reason is w.RejectReason.UNEXPECTED_KIND
        for _ in range(100):  # the refused handshakes are counted
            if {"tls_handshake"} <= set(analyzer.rejected) | set(shuffler.rejected):
                break
            await trio.sleep(0.05)
        assert analyzer.rejected["tls_handshake"] + analyzer.rejected["broken_connection"] >= 1
        assert shuffler.rejected["tls_handshake"] >= 1

    _run(root, "run-e2e", script)


def tmp_ca(root: Path) -> Any:
    """A client context trusting a CA other than the deployment's."""
    other = root / "other-ca"
    if not other.exists():
        write_tls_material(other, {}, deployment="someone else")
    return tls_client_context(other / "ca.crt")


def test_esa_submit_cli_over_tls(root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    keys = str(root / "keys")
    tls_dir = root / "keys" / "tls"
    ops = ["--tls-cert", str(tls_dir / "ops.crt"), "--tls-key", str(tls_dir / "ops.key")]

    async def script(shuffler: PartyService, analyzer: PartyService) -> None:
        to = f"{HOST}:{shuffler.port}"
        # --keys DIR finds DIR/tls/ca.crt: TLS without another flag.
        argv = ["submit", "--to", to, "--local-simulation", "--keys", keys, "--n", "40"]
        code = await trio.to_thread.run_sync(cli_main, [*argv, "--json"])
        assert code == 0
        out = json.loads(capsys.readouterr().out)
        assert out["acknowledged"] == 40
        q = ["submit", "--to", f"{HOST}:{analyzer.query_port}", "--query", "status"]
        code = await trio.to_thread.run_sync(
            cli_main, [*q, "--tls-ca", str(tls_dir / "ca.crt"), *ops]
        )
        assert code == 0
        assert json.loads(capsys.readouterr().out)["party"] == "analyzer"

    _run(root, "run-cli", script)


def test_esa_submit_needs_a_ca_or_the_explicit_plaintext_flag(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        cli_main(["submit", "--to", "127.0.0.1:9", "--query", "status"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("esa submit: error: give --tls-ca FILE")
    assert len(err.strip().splitlines()) == 1
    with pytest.raises(SystemExit):
        cli_main(["submit", "--to", "127.0.0.1:9", "--insecure-plaintext", "--tls-ca", "x"])
    assert "takes no --tls-ca" in capsys.readouterr().err


def test_tls_table_is_required_and_checked(root: Path) -> None:
    a_doc, _ = _docs("cfg")
    no_tls = {k: v for k, v in a_doc.items() if k != "tls"}
    with pytest.raises(esa.ConfigError, match="\\[tls\\] is required"):
        config_from_dict(no_tls, base=root)
    plain = {**a_doc, "tls": {"insecure_plaintext": True}}
    # No TLS is for a local simulation's parties only (esa serve --local-simulation).
    with pytest.raises(esa.ConfigError, match="only a local simulation takes it"):
        config_from_dict(plain, base=root)
    assert config_from_dict(plain, base=root, simulation=True).tls.insecure_plaintext
    with pytest.raises(esa.ConfigError, match="takes no ca, cert or key"):
        config_from_dict(
            {**a_doc, "tls": {**_tls("analyzer"), "insecure_plaintext": True}},
            base=root,
            simulation=True,
        )
    with pytest.raises(esa.ConfigError, match="needs ca, cert and key"):
        config_from_dict({**a_doc, "tls": {"ca": "keys/tls/ca.crt"}}, base=root)
    with pytest.raises(esa.ConfigError, match="unknown keys"):
        config_from_dict({**a_doc, "tls": {**_tls("analyzer"), "verify": False}}, base=root)
    # A party certificate that is not the party's own key: refused at start-up.
    wrong = {**a_doc, "tls": {**_tls("analyzer"), "key": "keys/tls/shuffler-1.key"}}
    with pytest.raises(esa.ConfigError, match="\\[tls\\]"):
        PartyService(config_from_dict(wrong, base=root), protocol=PROTOCOL)
    # A key readable by others is refused (crypto's check), and the state_dir released.
    loose = root / "loose.key"
    loose.write_bytes((root / "keys/tls/analyzer.key").read_bytes())
    os.chmod(loose, 0o644)
    bad = {**a_doc, "tls": {**_tls("analyzer"), "key": "loose.key"}}
    with pytest.raises(esa.ConfigError, match="\\[tls\\]"):
        PartyService(config_from_dict(bad, base=root), protocol=PROTOCOL)
    PartyService(config_from_dict(a_doc, base=root), protocol=PROTOCOL).close()
