"""Every ``--json`` output against its JSON Schema (docs/schema/<command>.schema.json, draft
2020-12), and the metadata every document carries.

The rule for non-finite numbers, in every document: the value is ``null`` and
``non_finite`` maps its place (``expected_std[3]``, ``bounds[2].value``) to ``"inf"``,
``"-inf"`` or ``"nan"``.
"""

from __future__ import annotations

import argparse
import json
import math
import threading
from pathlib import Path
from typing import Any

import jsonschema
import numpy as np
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

import esa
from protocols import protocol_names
from simulations.cli import build_parser, main
from tests.test_cli_inbox import _damaged_inbox
from tests.test_cli_submit import deployment  # noqa: F401  (a fixture: parties on 127.0.0.1)
from tests.test_manifest import honest, root  # noqa: F401  (fixtures: a first shuffler)

SCHEMAS = Path(__file__).resolve().parents[1] / "docs" / "schema"

#: The smallest runs every registered protocol accepts (tests/test_every_protocol.py).
CASES: dict[str, list[str]] = {
    "aut": ["--n", "1000", "--domain", "16"],
    "put": ["--n", "1000", "--domain", "16"],
    "cnt_2m": ["--n", "3000", "--delta", "1e-3"],
    "cnt_bn": ["--n", "2000"],
    "cnt_pure": ["--n", "500"],
    "cnt_rr": ["--n", "2000"],
    "cnt_sgm": ["--n", "2000"],
    "disele": ["--n", "200", "--domain", "8"],
    "hist_kr": ["--n", "2000"],
    "hist_kr_frag": ["--n", "2000"],
    "hist_mm": ["--n", "700", "--domain", "4", "--epsilon", "2", "--delta", "1e-2"],
    "hist_rr_attr": ["--n", "500"],
    "murs": ["--n", "2000", "--fake-reports", "10"],
    "prhr": ["--n", "16", "--domain", "8", "--delta", "0.1"],
    "prrq": ["--n", "8", "--domain", "2", "--delta", "0.5"],
    "pucm": ["--n", "150", "--domain", "2", "--delta", "0.9", "--shufflers", "1"],
    "rsum_dsg": ["--n", "1000"],
    "rsum_kr": ["--n", "2000"],
    "rsum_pure": ["--n", "50", "--option", "precision=4"],
    "rsum_rm": ["--n", "3000"],
    "rsum_rr": ["--n", "2000"],
    "slh": ["--n", "2000"],
}


def schema(command: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((SCHEMAS / f"{command}.schema.json").read_text())
    jsonschema.Draft202012Validator.check_schema(loaded)
    return loaded


def validate(command: str, doc: dict[str, Any], argv: list[str] | None = None) -> None:
    jsonschema.Draft202012Validator(schema(command)).validate(doc)
    assert doc["schema_version"] == esa.SCHEMA_VERSION == 1
    assert doc["version"] == esa.__version__
    assert list(doc)[:5] == ["schema_version", "version", "command", "parameters", "seed"]
    assert list(doc)[-1] == "non_finite"
    if argv is not None:
        assert doc["command"] == ["esa", *argv]
        assert isinstance(doc["parameters"], dict)
        assert "handler" not in doc["parameters"]


def run(capsys: pytest.CaptureFixture[str], argv: list[str], code: int = 0) -> dict[str, Any]:
    assert main(argv) == code
    doc: dict[str, Any] = json.loads(capsys.readouterr().out)
    return doc


def test_every_protocol_has_a_case() -> None:
    assert set(CASES) == set(protocol_names())


def test_schemas_are_strict_at_the_top() -> None:
    for path in SCHEMAS.glob("*.schema.json"):
        s = json.loads(path.read_text())
        assert s["$schema"] == "https://json-schema.org/draft/2020-12/schema", path
        assert s["additionalProperties"] is False, path
        for head in ("schema_version", "version", "command", "parameters", "seed", "non_finite"):
            assert head in s["required"], (path, head)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CASES))
def test_simulate_every_protocol(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["simulate", "--protocol", name, "--crypto", "ideal", "--json", *CASES[name]]
    doc = run(capsys, argv)
    validate("simulate", doc, argv)
    assert doc["seed"] == 0
    assert doc["parameters"]["protocol"] == name


def test_simulate_json_is_run_result_to_json(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The CLI prints what RunResult.to_json returns, exactly (timings included).
    seen: list[dict[str, Any]] = []
    original = esa.RunResult.to_json

    def spy(self: esa.RunResult, metadata: Any = None) -> dict[str, Any]:
        out = original(self, metadata)
        seen.append(out)
        return out

    monkeypatch.setattr(esa.RunResult, "to_json", spy)
    argv = ["simulate", "--protocol", "hist_kr", "--n", "300", "--crypto", "ideal", "--json"]
    doc = run(capsys, argv)
    assert seen == [doc]
    validate("simulate", doc, argv)


def test_a_lost_estimate_writes_null_and_lists_it(capsys: pytest.CaptureFixture[str]) -> None:
    # A threshold above n holds every report: the estimate is NaN, its std infinite. Nothing
    # of the shuffle is left, so the run proves only ε_l: accepted with --allow-weaker.
    argv = [
        "simulate", "--protocol", "hist_kr", "--n", "200", "--domain", "4", "--crypto",
        "ideal", "--threshold", "100000", "--allow-weaker", "--json",
    ]  # fmt: skip
    doc = run(capsys, argv)
    validate("simulate", doc, argv)
    assert doc["estimate"] == [None] * 4
    assert doc["non_finite"]["estimate[0]"] == "nan"
    assert doc["non_finite"]["expected_std[3]"] == "inf"
    assert doc["rmse"] is None
    assert doc["non_finite"]["rmse"] == "nan"


def test_json_document_rule() -> None:
    doc = esa.json_document(
        {"a": [1.0, math.inf, np.float64(-math.inf)], "b": {"c": math.nan}, "d": None}
    )
    assert doc["a"] == [1.0, None, None]
    assert doc["b"] == {"c": None}
    assert doc["non_finite"] == {"a[1]": "inf", "a[2]": "-inf", "b.c": "nan"}
    assert esa.json_document(doc) == doc  # idempotent: the flags survive a second pass
    json.dumps(doc, allow_nan=False)


def test_demo(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["demo", "--n", "2000", "--crypto", "ideal", "--seed", "3", "--json"]
    doc = run(capsys, argv)
    validate("demo", doc, argv)
    assert doc["seed"] == 3


@pytest.mark.parametrize(
    "argv",
    [
        ["amplify", "--epsilon-local", "2", "--n", "1000", "--json"],
        ["amplify", "--epsilon-central", "1", "--n", "1000", "--json"],
    ],
)
def test_amplify(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    validate("amplify", run(capsys, argv), argv)


def test_audit(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["audit", "--protocol", "hist_kr", "--n", "1000", "--epsilon", "1", "--json"]
    validate("audit", run(capsys, argv), argv)


@pytest.mark.parametrize(
    ("argv", "code"),
    [
        (["audit-ldp", "--mechanism", "krr", "--epsilon", "1", "--json"], 0),
        (["audit-ldp", "--mechanism", "dct", "--epsilon", "1", "--json"], 1),
        (["audit-ldp", "--mechanism", "all", "--epsilon", "1", "--json"], 1),
    ],
)
def test_audit_ldp(argv: list[str], code: int, capsys: pytest.CaptureFixture[str]) -> None:
    validate("audit-ldp", run(capsys, argv, code), argv)


def test_protocols(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["protocols", "--json"]
    validate("protocols", run(capsys, argv), argv)


def test_keygen(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["keygen", "--out", str(tmp_path / "keys"), "--json"]
    doc = run(capsys, argv)
    validate("keygen", doc, argv)
    assert doc["parameters"]["out"] == str(tmp_path / "keys")


def test_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    result = tmp_path / "amplify.json"
    result.write_text(
        json.dumps(run(capsys, ["amplify", "--epsilon-local", "2", "--n", "1000", "--json"]))
    )
    argv = ["report", str(result), "--out", str(tmp_path / "r.html"), "--no-compute", "--json"]
    validate("report", run(capsys, argv), argv)


@pytest.mark.slow
def test_experiments_and_its_csv_sidecar(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "exp"
    argv = [
        "experiments", "counting", "--quick", "--out", str(out), "--protocols", "cnt_rr",
        "--repeats", "1", "--seed", "5", "--json",
    ]  # fmt: skip
    doc = run(capsys, argv)
    validate("experiments", doc, argv)
    meta = json.loads((out / "counting.meta.json").read_text())
    validate("experiments-meta", meta, argv)
    assert doc["meta"] == str(out / "counting.meta.json")
    assert meta["seed"] == doc["seed"] == 5
    assert meta["csv"] == "counting.csv"
    assert meta["parameters"] == doc["parameters"]


# ------------------------------------------------------- every command with --json has one


def _json_commands() -> list[str]:
    """Every subcommand that takes ``--json`` (itself or one of its actions, as ``inbox``)."""

    def takes_json(parser: argparse.ArgumentParser) -> bool:
        for action in parser._actions:
            if "--json" in action.option_strings:
                return True
            if isinstance(action, argparse._SubParsersAction) and any(
                takes_json(p) for p in action.choices.values()
            ):
                return True
        return False

    (sub,) = (a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return sorted(name for name, p in sub.choices.items() if takes_json(p))


def test_every_command_with_json_has_a_schema() -> None:
    commands = _json_commands()
    assert {"simulate", "inbox", "submit", "close-epoch"} <= set(commands)
    missing = [c for c in commands if not (SCHEMAS / f"{c}.schema.json").is_file()]
    assert not missing, f"commands with --json but no docs/schema/<command>.schema.json: {missing}"
    for c in commands:
        schema(c)  # a valid draft 2020-12 schema
    # ... and the README's table names every one.
    readme = (SCHEMAS / "README.md").read_text()
    assert all(f"`{c}.schema.json`" in readme for c in commands)


# ------------------------------------------------------------ commands without parties


@pytest.mark.parametrize(
    "argv",
    [
        ["compose", "--protocol", "hist_kr", "--epsilon", "1", "--epochs", "4", "--n", "1000"],
        ["compose", "--metric", "hist_kr:1:4", "--metric", "cnt_rr:0.5:2", "--n", "1000"],
    ],
)
def test_compose(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    argv = [*argv, "--json"]
    doc = run(capsys, argv)
    validate("compose", doc, argv)
    assert doc["epochs"] >= 1


@pytest.mark.slow  # the inverse search: about 20 s
def test_compose_budget(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["compose", "--protocol", "cnt_rr", "--budget", "5", "--epochs", "50", "--n", "1000"]
    argv.append("--json")
    doc = run(capsys, argv)
    validate("compose", doc, argv)
    assert doc["budget"] == 5
    assert doc["metrics"] == [{"protocol": "cnt_rr", "epochs": 50}]


def test_vectors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["vectors", "--out", str(tmp_path / "kit"), "--json"]
    doc = run(capsys, argv)
    validate("vectors", doc, argv)
    assert {f["name"] for f in doc["files"]} <= {p.name for p in (tmp_path / "kit").iterdir()}


def test_token(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    key = tmp_path / "operator.key"
    key.write_text(Ed25519PrivateKey.generate().private_bytes_raw().hex() + "\n")
    argv = ["token", "--operator-key", str(key), "--deployment", "d1", "--key-epoch", "1"]
    argv += ["--client", "c1", "--quota", "5", "--json"]
    doc = run(capsys, argv)
    validate("token", doc, argv)
    assert (doc["deployment"], doc["client"], doc["quota"]) == ("d1", "c1", 5)


def test_inbox_check_and_set_aside(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "inbox.db"
    _damaged_inbox(path)
    argv = ["inbox", "check", str(path), "--json"]
    doc = run(capsys, argv, 1)
    validate("inbox", doc, argv)
    assert doc["epochs"][-1]["epoch"] is None  # the open epoch: a null that is no number
    assert doc["non_finite"] == {}
    argv = ["inbox", "set-aside", str(path), "--epoch", "1", "--json"]
    doc = run(capsys, argv)
    validate("inbox", doc, argv)
    assert doc["set_aside"] == 2
    # A document of one action is not one of the other: the schema tells them apart.
    with pytest.raises(jsonschema.ValidationError):
        validate("inbox", {**doc, "clean": True})


# ----------------------------------------- commands with real parties on 127.0.0.1


def test_close_epoch(
    root: Path,  # noqa: F811  (the imported fixtures)
    honest: tuple[str, Any],  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    address, _svc = honest
    argv = ["close-epoch", "--to", address, "--operator-key", str(root / "operator.key")]
    argv += ["--manifest", str(root / "manifest.json"), "--json"]
    doc = run(capsys, argv)
    validate("close-epoch", doc, argv)
    assert doc["epochs_closed"] == 1


def test_submit_and_its_queries(
    deployment: dict[str, Any],  # noqa: F811  (the imported fixture)
    capsys: pytest.CaptureFixture[str],
) -> None:
    status_argv = ["submit", "--to", deployment["shuffler_query"], "--query", "status"]
    status_argv += ["--insecure-plaintext", "--json"]
    validate("submit", run(capsys, status_argv), status_argv)
    key = str(deployment["root"] / "operator.key")
    argv = ["submit", "--to", deployment["shuffler"], *deployment["manifest"], "--n", "40"]
    argv += ["--close-epoch", key, "--json"]
    doc = run(capsys, argv)
    validate("submit", doc, argv)
    assert (doc["acknowledged"], doc["epochs_closed"]) == (40, 1)
    query = ["submit", "--to", deployment["analyzer"], "--query", "result"]
    query += ["--insecure-plaintext", "--json"]
    result: dict[str, Any] = {}
    for _ in range(600):  # the analyzer processes the epoch in the background
        result = run(capsys, query)
        if result["epochs"]:
            break
        threading.Event().wait(0.05)
    validate("submit", result, query)
    assert result["n"] >= 40
