"""The signed deployment manifest: a client and every party take the deployment's
protocol, parameters, report format and keys from it, never from an unsigned reply.

The downgrade test runs a real hostile first shuffler on 127.0.0.1 (plaintext reports,
ε = 30) and the real ``esa submit`` against it.
"""

from __future__ import annotations

import dataclasses
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
import esa
from esa.net import ManifestError, PartyService, load_manifest, make_manifest, parse_manifest
from esa.net._config import config_from_dict
from simulations.cli import main

OPERATOR = Ed25519PrivateKey.from_private_bytes(bytes(range(32)))
PUB = OPERATOR.public_key().public_bytes_raw()
PROTO = {"name": "hist_kr", "epsilon": 1.0, "delta": 1e-6, "n": 1000, "domain": 4}


def _doc(**extra: Any) -> dict[str, Any]:
    return {
        "role": "shuffler",
        "hop": 0,
        "state_dir": "state",
        "listen": {"host": "127.0.0.1", "port": 0},
        "next": {"host": "127.0.0.1", "port": 9},
        "tls": {"insecure_plaintext": True},
        "keys": {"epochs": {"1": "keys"}},
        "operator": {"public_key": PUB.hex()},
        "protocol": dict(PROTO),
        **extra,
    }


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("manifest")
    crypto.KeyDirectory.create(base / "keys", shufflers=1)
    (base / "operator.key").write_text(OPERATOR.private_bytes_raw().hex() + "\n")
    doc = _doc()
    lines = [
        'role = "shuffler"',
        "hop = 0",
        'state_dir = "state"',
        "[keys.epochs]",
        '1 = "keys"',
        "[protocol]",
        *(f"{k} = {json.dumps(v)}" for k, v in PROTO.items()),
    ]
    assert doc["role"] == "shuffler"
    (base / "party.toml").write_text("\n".join(lines) + "\n")
    argv = ["keygen", "--manifest", str(base / "manifest.json"), "--config"]
    argv += [str(base / "party.toml"), "--operator-key", str(base / "operator.key")]
    assert main(argv) == 0
    return base


def test_keygen_makes_an_operator_key_as_documented(tmp_path: Path, capsys: Any) -> None:
    assert main(["keygen", "--make-operator-key", str(tmp_path / "op.key")]) == 0
    public = capsys.readouterr().out.strip()
    seed = bytes.fromhex((tmp_path / "op.key").read_text().strip())
    key = Ed25519PrivateKey.from_private_bytes(seed)
    assert key.public_key().public_bytes_raw().hex() == public
    assert (tmp_path / "op.key").stat().st_mode & 0o077 == 0


def test_the_manifest_verifies_and_a_party_serves_it(root: Path) -> None:
    manifest = load_manifest(root / "manifest.json", PUB)
    assert manifest.protocol["epsilon"] == 1.0
    assert manifest.crypto == "onion"
    assert manifest.route == tuple(crypto.KeyDirectory.load(root / "keys").route())
    config = config_from_dict(_doc(manifest="manifest.json"), base=root, simulation=True)
    assert config.manifest == manifest
    assert config.deployment_id == bytes.fromhex(manifest.deployment_id)


def test_an_altered_or_forged_manifest_is_refused(root: Path) -> None:
    data = (root / "manifest.json").read_bytes()
    doc = json.loads(data)
    doc["manifest"]["protocol"]["epsilon"] = 30.0
    with pytest.raises(ManifestError, match="does not verify"):
        parse_manifest(json.dumps(doc).encode(), PUB)
    other = Ed25519PrivateKey.generate()
    with pytest.raises(ManifestError, match="does not verify"):  # wrong operator key
        parse_manifest(data, other.public_key().public_bytes_raw())
    # Re-signed by someone else, with their key written in: still not our operator's.
    forged = load_manifest(root / "manifest.json", PUB)
    import dataclasses

    forged = dataclasses.replace(forged, operator_key=other.public_key().public_bytes_raw())
    with pytest.raises(ManifestError, match="does not verify"):
        parse_manifest(forged.sign(other), PUB)
    with pytest.raises(ManifestError, match="not a manifest"):
        parse_manifest(b"\xff", PUB)


def test_a_party_whose_config_disagrees_with_its_manifest_refuses_to_start(root: Path) -> None:
    with pytest.raises(ManifestError, match="epsilon"):
        config_from_dict(
            _doc(manifest="manifest.json", protocol={**PROTO, "epsilon": 30.0}),
            base=root,
            simulation=True,
        )
    other = root / "other-keys"
    crypto.KeyDirectory.create(other, shufflers=1)
    with pytest.raises(ManifestError, match="not the manifest's"):
        config_from_dict(
            _doc(manifest="manifest.json", keys={"epochs": {"1": "other-keys"}}),
            base=root,
            simulation=True,
        )
    with pytest.raises(esa.ConfigError, match=r"\[operator\]"):
        config_from_dict(
            {**_doc(manifest="manifest.json"), "operator": {}}, base=root, simulation=True
        )


def test_the_manifest_states_the_crowd_rule_and_parties_must_serve_it(root: Path) -> None:
    """keygen --manifest signs the shuffler config's [shuffle] threshold and ε_t (here the
    defaults: no threshold); a shuffler configured with another rule, or an analyzer with
    another ε_t, refuses to start; a manifest that states no rule checks none."""
    manifest = load_manifest(root / "manifest.json", PUB)
    assert manifest.shuffle == {"threshold": 0, "threshold_epsilon": None}
    assert (manifest.threshold, manifest.threshold_epsilon) == (0, None)
    noisy = {"threshold": 5, "threshold_epsilon": 0.5}
    with pytest.raises(ManifestError, match=r"\[shuffle\] threshold is 5"):
        config_from_dict(_doc(manifest="manifest.json", shuffle=noisy), base=root, simulation=True)
    analyzer = {**_doc(manifest="manifest.json"), "role": "analyzer", "hop": 1}
    del analyzer["next"]
    with pytest.raises(ManifestError, match=r"threshold_epsilon is 0.5, but the signed"):
        config_from_dict(
            {**analyzer, "shuffle": {"threshold_epsilon": 0.5}}, base=root, simulation=True
        )
    assert config_from_dict(analyzer, base=root, simulation=True).manifest == manifest
    # Signed with the rule, the same parties start; without one (a manifest made before
    # manifests stated it), nothing is checked.
    for rule in (noisy, None):
        signed = make_manifest(
            protocol=manifest.protocol,
            keys=crypto.KeyDirectory.load(root / "keys"),
            key_epoch=1,
            channels=1,
            operator_key=PUB,
            shuffle=rule,
        )
        (root / "rule.json").write_bytes(signed.sign(OPERATOR))
        assert ("shuffle" in json.loads((root / "rule.json").read_bytes())["manifest"]) == bool(
            rule
        )
        config = config_from_dict(
            _doc(manifest="rule.json", shuffle=noisy), base=root, simulation=True
        )
        assert config.manifest == signed
        # The same threshold with another ε_t: refused where the manifest states the rule.
        other_eps = {"threshold": 5, "threshold_epsilon": 0.25}
        doc = _doc(manifest="rule.json", shuffle=other_eps)
        if rule is None:
            assert config_from_dict(doc, base=root, simulation=True).threshold_epsilon == 0.25
        else:
            with pytest.raises(ManifestError, match=r"threshold_epsilon is 0.25, but the signed"):
                config_from_dict(doc, base=root, simulation=True)
    with pytest.raises(ManifestError, match="threshold_epsilon needs a threshold >= 1"):
        dataclasses.replace(signed, shuffle={"threshold": 0, "threshold_epsilon": 0.5})
    with pytest.raises(ManifestError, match="shuffle must be a table"):
        dataclasses.replace(signed, shuffle={"threshold": 0})


#: A deployed party's [tls] table (the files are read when the party starts, not here).
_TLS = {"ca": "tls/ca.crt", "cert": "tls/shuffler-1.crt", "key": "tls/shuffler-1.key"}


@pytest.mark.parametrize(
    ("extra", "match"),
    [
        ({"crypto": "ideal"}, "plaintext"),
        ({"simulation": {"fake_rng_state": "{}"}}, r"\[simulation\]"),
        ({"tls": {"insecure_plaintext": True}}, r"insecure_plaintext = true .* without TLS"),
        ({"protocol": {"pickle": "p.pickle"}}, "pickle"),
    ],
)
def test_deployed_configs_refuse_simulation_settings(
    root: Path, extra: dict[str, Any], match: str
) -> None:
    with pytest.raises(esa.ConfigError, match=match):
        config_from_dict(_doc(**{"tls": _TLS, **extra}), base=root)
    if "protocol" not in extra:  # the local simulation harness opts in explicitly
        config_from_dict(_doc(**extra), base=root, simulation=True)


def test_esa_serve_refuses_plaintext_outside_a_local_simulation(
    root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``esa serve`` on a config with ``[tls] insecure_plaintext = true``: one line, exit 2,
    nothing started; with ``--local-simulation`` the same config is taken."""
    from simulations._tcp_run import _write_toml

    config = tmp_path / "plain.toml"
    _write_toml(config, _doc(keys={"epochs": {"1": str(root / "keys")}}))
    with pytest.raises(SystemExit) as exited:
        main(["serve", "shuffler", "--config", str(config)])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    assert "insecure_plaintext = true" in err
    assert "local simulation" in err
    assert not (tmp_path / "state").exists()  # refused before any state was made
    assert esa.net.load_config(config, simulation=True).tls.insecure_plaintext


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _serving(svc: PartyService, port: int) -> Iterator[tuple[str, PartyService]]:
    started = threading.Event()
    holder: dict[str, Any] = {}

    async def serve() -> None:
        async with trio.open_nursery() as nursery:
            holder["token"] = trio.lowlevel.current_trio_token()
            holder["scope"] = nursery.cancel_scope
            await nursery.start(svc.run)
            started.set()

    thread = threading.Thread(target=trio.run, args=(serve,), daemon=True)
    thread.start()
    assert started.wait(30)
    try:
        yield f"127.0.0.1:{port}", svc
    finally:
        trio.from_thread.run_sync(holder["scope"].cancel, trio_token=holder["token"])
        thread.join(30)
        svc.close()


@pytest.fixture
def hostile(root: Path, tmp_path: Path) -> Iterator[tuple[str, PartyService]]:
    """A first shuffler that serves plaintext reports and ε = 30 (a local-simulation
    config, the only kind that can), listening on 127.0.0.1."""
    port = _free_port()
    doc = _doc(
        crypto="ideal",
        state_dir=str(tmp_path / "hostile"),
        listen={"host": "127.0.0.1", "port": port},
        protocol={**PROTO, "epsilon": 30.0},
    )
    yield from _serving(PartyService(config_from_dict(doc, base=root, simulation=True)), port)


@pytest.fixture
def honest(root: Path, tmp_path: Path) -> Iterator[tuple[str, PartyService]]:
    """A first shuffler serving the manifest, listening on 127.0.0.1."""
    port = _free_port()
    doc = _doc(
        manifest="manifest.json",
        state_dir=str(tmp_path / "honest"),
        listen={"host": "127.0.0.1", "port": port},
    )
    yield from _serving(PartyService(config_from_dict(doc, base=root, simulation=True)), port)


def test_close_epoch_from_the_cli(
    root: Path, honest: tuple[str, PartyService], capsys: Any
) -> None:
    address, svc = honest
    argv = ["close-epoch", "--to", address, "--operator-key", str(root / "operator.key")]
    assert main([*argv, "--manifest", str(root / "manifest.json"), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["epochs_closed"] == 1
    assert out["party"] == "shuffler-1"
    assert svc.counters["epochs_closed"] == 1


def test_submit_refuses_a_downgrading_first_shuffler(
    root: Path, hostile: tuple[str, PartyService], capsys: Any
) -> None:
    address, svc = hostile
    argv = ["submit", "--to", address, "--manifest", str(root / "manifest.json")]
    argv += ["--operator-key", PUB.hex(), "--n", "50", "--insecure-plaintext"]
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert err[0].startswith("esa submit: error: ")
    assert "nothing sent" in err[0]
    assert "signed manifest" in err[0]
    assert svc.counters["reports_stored"] == 0
    assert not svc.rejected
    # Without a manifest nothing is taken from the unsigned STATUS: refused outright.
    local = ["submit", "--to", address, "--keys", str(root / "keys"), "--insecure-plaintext"]
    with pytest.raises(SystemExit) as exc:
        main(local)
    assert exc.value.code == 2
    assert "unsigned STATUS" in capsys.readouterr().err
    # Even a local simulation's client is not switched to plaintext by STATUS alone.
    with pytest.raises(SystemExit) as exc:
        main([*local, "--local-simulation"])
    assert exc.value.code == 2
    assert "plaintext" in capsys.readouterr().err
    assert svc.counters["reports_stored"] == 0


def test_submit_refuses_an_altered_manifest(root: Path, tmp_path: Path, capsys: Any) -> None:
    doc = json.loads((root / "manifest.json").read_text())
    doc["manifest"]["crypto"] = "ideal"
    (tmp_path / "m.json").write_text(json.dumps(doc))
    argv = ["submit", "--to", "127.0.0.1:9", "--manifest", str(tmp_path / "m.json")]
    with pytest.raises(SystemExit) as exc:
        main([*argv, "--operator-key", PUB.hex(), "--insecure-plaintext"])
    assert exc.value.code == 2
    assert "manifest refused" in capsys.readouterr().err


# ------------------------------------------------- declarative protocols, never a pickle


@pytest.mark.parametrize("simulation", [False, True])
@pytest.mark.parametrize("with_manifest", [False, True])
def test_a_protocol_given_as_a_pickle_is_refused_in_every_mode(
    root: Path, simulation: bool, with_manifest: bool
) -> None:
    # The old simulation path ([protocol] pickle = FILE) is gone: refused before any file
    # is opened, the local simulation harness's configs included.
    extra: dict[str, Any] = {"manifest": "manifest.json"} if with_manifest else {}
    if not simulation:  # a deployed config: with TLS
        extra["tls"] = _TLS
    for proto in ({"pickle": "p.pickle"}, {**PROTO, "pickle": "p.pickle"}):
        with pytest.raises(esa.ConfigError, match=r"unknown keys \['pickle'\]"):
            config_from_dict(_doc(protocol=proto, **extra), base=root, simulation=simulation)
    with pytest.raises(esa.ConfigError, match=r"unknown keys \['pickle'\]"):
        esa.net.load_protocol({**PROTO, "pickle": "p.pickle"})


def test_the_tcp_harness_hands_its_parties_a_protocol_table_not_an_object(
    tmp_path: Path,
) -> None:
    from protocols import ProtocolSpec, build_protocol
    from simulations._tcp_run import protocol_doc, start_chain

    spec = ProtocolSpec(epsilon=1.0, delta=1e-6, n=500, domain=4, fake_reports=3, shufflers=2)
    table = protocol_doc(("hist_kr", spec))
    assert table["shufflers"] == 2
    assert "bound" not in table
    # The child builds the very protocol the parent encodes for.
    child = esa.net.load_protocol(table)
    parent = build_protocol("hist_kr", spec)
    assert child.privacy == parent.privacy
    assert child.calibration == parent.calibration
    # A protocol object does not say what it was built from: refused before anything starts.
    with pytest.raises(esa.ConfigError, match=r"\(name, ProtocolSpec\)"):
        start_chain(tmp_path, parent, shufflers=1)  # type: ignore[arg-type]
    assert not any(tmp_path.iterdir())


# ----------------------------------------------------- one deployment id, tokens included


def test_tokens_are_bound_to_the_manifests_deployment_id(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest = load_manifest(root / "manifest.json", PUB)
    tokens = {"require_client_token": True}
    config = config_from_dict(
        _doc(manifest="manifest.json", admission=tokens), base=root, simulation=True
    )
    assert config.admission.deployment_id == manifest.deployment_id
    assert config.deployment_id == bytes.fromhex(config.admission.deployment_id)
    same = {**tokens, "deployment_id": manifest.deployment_id}  # repeating it is fine
    assert config_from_dict(
        _doc(manifest="manifest.json", admission=same), base=root, simulation=True
    )
    other = {**tokens, "deployment_id": "example-1"}
    with pytest.raises(esa.ConfigError, match="not the manifest's deployment id"):
        config_from_dict(
            _doc(manifest="manifest.json", admission=other), base=root, simulation=True
        )
    # Without a manifest the free string is what tokens name.
    assert config_from_dict(
        _doc(admission=other), base=root, simulation=True
    ).admission.deployment_id == ("example-1")
    # esa token --manifest mints for the manifest's id, verified under the operator's key.
    argv = ["token", "--operator-key", str(root / "operator.key"), "--key-epoch", "1"]
    argv += ["--client", "c1", "--json"]
    assert main([*argv, "--manifest", str(root / "manifest.json")]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["deployment"] == manifest.deployment_id
    token = esa.net.parse_token(bytes.fromhex(out["token"]), OPERATOR.public_key())
    assert token.deployment == manifest.deployment_id
    with pytest.raises(SystemExit) as exc:
        main([*argv, "--manifest", str(root / "manifest.json"), "--deployment", "x"])
    assert exc.value.code == 2
    other_key = root / "other-operator.key"
    other_key.write_text(Ed25519PrivateKey.generate().private_bytes_raw().hex() + "\n")
    argv[2] = str(other_key)
    with pytest.raises(SystemExit) as exc:
        main([*argv, "--manifest", str(root / "manifest.json")])
    assert exc.value.code == 2
    assert "manifest refused" in capsys.readouterr().err
