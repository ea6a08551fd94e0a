"""``esa submit`` against a running deployment: a shuffler and the analyzer, configured from
a ``[protocol]`` table like docs/network.md's, served on 127.0.0.1 from a background thread.

The client must encode for the protocol the parties estimate with — the one the deployment's
signed manifest states, which every party serves and STATUS must repeat — and a result query
without ``--n`` lets the analyzer infer n from the messages. Without ``--manifest`` it refuses
(the unsigned STATUS is nobody's word), unless ``--local-simulation`` says the parties are a
local test's.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

import crypto
from esa.net import PartyService, make_manifest, protocol_table
from esa.net._config import config_from_dict
from simulations.cli import main

PROTOCOL = {"name": "hist_kr", "epsilon": 1.0, "delta": 1e-6, "n": 300, "domain": 4}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    root = tmp_path_factory.mktemp("submit")
    crypto.KeyDirectory.create(root / "keys", shufflers=1)
    operator = Ed25519PrivateKey.generate()
    (root / "operator.key").write_text(operator.private_bytes_raw().hex() + "\n")
    public = operator.public_key().public_bytes_raw()
    manifest = make_manifest(
        protocol=protocol_table(PROTOCOL),
        keys=crypto.KeyDirectory.load(root / "keys"),
        key_epoch=1,
        channels=1,
        operator_key=public,
    )
    (root / "manifest.json").write_bytes(manifest.sign(operator))
    ports = [_free_port(), _free_port(), _free_port(), _free_port()]
    common = {
        "keys": {"epochs": {"1": "keys"}},
        "protocol": PROTOCOL,
        "manifest": "manifest.json",
        "operator": {"public_key": public.hex()},
        "tls": {"insecure_plaintext": True},  # TLS is tested in test_tls.py
    }
    shuffler = {
        "role": "shuffler",
        "hop": 0,
        "state_dir": "s1",
        "listen": {"host": "127.0.0.1", "port": ports[0]},
        "next": {"host": "127.0.0.1", "port": ports[1]},
        "query": {"host": "127.0.0.1", "port": ports[3]},  # the full STATUS is answered there
        "epoch": {"max_reports": 10**6, "deadline_seconds": 3600.0},
        **common,
    }
    analyzer = {
        "role": "analyzer",
        "hop": 1,
        "state_dir": "a",
        "listen": {"host": "127.0.0.1", "port": ports[1]},
        "query": {"host": "127.0.0.1", "port": ports[2]},  # RESULT is answered there
        **common,
    }
    services = [
        PartyService(config_from_dict(d, base=root, simulation=True)) for d in (analyzer, shuffler)
    ]
    started = threading.Event()
    holder: dict[str, Any] = {}

    async def serve() -> None:
        async with trio.open_nursery() as nursery:
            holder["token"] = trio.lowlevel.current_trio_token()
            holder["scope"] = nursery.cancel_scope
            for svc in services:
                await nursery.start(svc.run)
            started.set()

    thread = threading.Thread(target=trio.run, args=(serve,), daemon=True)
    thread.start()
    assert started.wait(30)
    try:
        yield {
            "root": root,
            "shuffler": f"127.0.0.1:{ports[0]}",
            "shuffler_query": f"127.0.0.1:{ports[3]}",
            "analyzer": f"127.0.0.1:{ports[2]}",
            "manifest": [
                "--manifest",
                str(root / "manifest.json"),
                "--operator-key",
                public.hex(),
                "--insecure-plaintext",
            ],
        }
    finally:
        trio.from_thread.run_sync(holder["scope"].cancel, trio_token=holder["token"])
        thread.join(30)
        for svc in services:
            svc.close()


def _json(capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(capsys.readouterr().out)
    return out


def test_submit_encodes_for_the_deployment_and_the_result_infers_n(
    deployment: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    root = deployment["root"]
    status_argv = ["submit", "--to", deployment["shuffler_query"], "--query", "status", "--json"]
    status_argv.append("--insecure-plaintext")
    assert main(status_argv) == 0
    status = _json(capsys)
    assert status["crypto"] == "onion"
    assert status["protocol"] == {
        **PROTOCOL,
        "bound": None,
        "fake_reports": 0,
        "options": {},
    }
    # No --protocol, --epsilon or --n: the signed manifest's, n = 300 users.
    argv = ["submit", "--to", deployment["shuffler"], *deployment["manifest"], "--json"]
    assert main([*argv, "--close-epoch", str(root / "operator.key")]) == 0
    out = _json(capsys)
    assert out["acknowledged"] == 300
    assert out["failed_frames"] == 0
    assert out["epochs_closed"] == 1
    result: dict[str, Any] = {}
    for _ in range(600):  # the analyzer processes the epoch in the background
        query = ["submit", "--to", deployment["analyzer"], "--query", "result"]
        assert main([*query, "--insecure-plaintext"]) == 0
        result = _json(capsys)
        if result["epochs"]:
            break
        threading.Event().wait(0.05)
    # Inferred from the messages (one per user), not a default of 10 000.
    assert result["n"] == 300
    assert (
        abs(sum(result["estimate"]) - 300) < 6 * sum(s * s for s in result["expected_std"]) ** 0.5
    )


_LOCAL = ["--local-simulation", "--insecure-plaintext"]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--epsilon", "2"], "the parties serve hist_kr with epsilon = 1.0, not 2.0"),
        (["--crypto", "ideal"], "the manifest says crypto = onion, not ideal"),
        (["--protocol", "cnt_rr"], "with name = 'hist_kr', not 'cnt_rr'"),
        (["--close-epoch", "/nonexistent/op.key"], "cannot read operator key"),
        (["--retries", "-1"], "--retries >= 0"),
        (["--key-epoch", "-1"], "--key-epoch must lie in"),
        (["--n", "0"], "--n must be >= 1"),
        # A local simulation's client reads the unsigned STATUS; the flags may only repeat it.
        (["LOCAL", "--epsilon", "2"], "the parties serve hist_kr with epsilon = 1.0, not 2.0"),
        (["LOCAL", "--crypto", "ideal"], "the parties take --crypto onion reports, not ideal"),
        # Without a manifest nothing is taken from STATUS, unless it is a local test.
        (["NONE"], "without it the protocol, epsilon, delta, n, domain and crypto would come"),
        (["NONE", "--keys", "KEYS"], "from the parties' unsigned STATUS"),
        (["--local-simulation"], "not both"),
        (["NONE", "--local-simulation"], "--local-simulation needs --keys DIR"),
    ],
)
def test_submit_usage_errors_are_one_line(
    deployment: dict[str, Any],
    extra: list[str],
    message: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    keys = str(deployment["root"] / "keys")
    how = deployment["manifest"]
    if extra[:1] == ["LOCAL"]:
        how, extra = [*_LOCAL, "--keys", keys], extra[1:]
    elif extra[:1] == ["NONE"]:
        how, extra = ["--insecure-plaintext"], [keys if e == "KEYS" else e for e in extra[1:]]
    argv = ["submit", "--to", deployment["shuffler"], *how]
    with pytest.raises(SystemExit) as exc:
        main([*argv, *extra])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    assert message in err


def test_submit_to_nobody_is_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    crypto.KeyDirectory.create(tmp_path / "keys", shufflers=1)
    dead = f"127.0.0.1:{_free_port()}"
    for argv in (
        ["submit", "--to", dead, *_LOCAL, "--keys", str(tmp_path / "keys")],
        ["submit", "--to", dead, "--query", "status", "--insecure-plaintext"],
    ):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1
        assert err.startswith("esa submit: error:")
        assert dead in err
