"""The ``esa`` exit codes, through :func:`simulations.cli.main`: 0 success, 1 a result that
does not meet the request (a weaker ε than asked, an LDP violation), 2 a usage error."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from simulations.cli import main

SMALL = ["--n", "300", "--crypto", "ideal"]


def test_a_weaker_proof_than_requested_exits_1_with_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Cnt_SGM's unary encoding proves ε_c ≈ 4.7 against the requested 1: refused.
    argv = ["simulate", "--protocol", "cnt_sgm", "--option", "encoding=unary", *SMALL]
    assert main(argv) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("esa simulate: error: cnt_sgm proves ε_c = ")
    assert "not the requested 1" in lines[0]
    assert "--allow-weaker" in lines[0]


def test_allow_weaker_runs_and_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["simulate", "--protocol", "cnt_sgm", "--option", "encoding=unary", *SMALL]
    assert main([*argv, "--allow-weaker", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["weaker_than_requested"] is True
    assert out["epsilon_requested"] == 1.0
    assert out["epsilon_central"] > 1.0
    assert main([*argv, "--allow-weaker"]) == 0
    assert "WEAKER than requested" in capsys.readouterr().out


@pytest.mark.parametrize("protocol", ["put", "cnt_sgm"])
def test_default_put_and_cnt_sgm_meet_the_request(
    protocol: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # Their defaults (Split-Mix Cnt_SGM counters) prove the target: exit 0, not weaker.
    assert main(["simulate", "--protocol", protocol, *SMALL, "--domain", "16", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["weaker_than_requested"] is False
    assert out["privacy_warning"] is None
    assert out["epsilon_central"] <= 1.0


def test_demo_meets_the_request_and_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    # demo runs simulate's check (the same execute): its default hist_kr run proves it.
    assert main(["demo", "--n", "2000", "--crypto", "ideal", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["weaker_than_requested"] is False
    assert out["epsilon_central"] <= out["epsilon_requested"] * (1 + 1e-9)


def test_audit_ldp_violation_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["audit-ldp", "--mechanism", "dct", "--epsilon", "1", "--json"]) == 1
    captured = capsys.readouterr()
    assert json.loads(captured.out)["holds"] is False
    assert captured.err.strip() == "esa audit-ldp: dct NOT 1-LDP (measured ε above the claim)"
    assert main(["audit-ldp", "--mechanism", "krr", "--epsilon", "1"]) == 0


def test_usage_error_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["simulate", "--protocol", "hist_kr", "--n", "x"])
    assert info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert err[0].startswith("esa simulate: error: ")


def test_version_flag(capsys: pytest.CaptureFixture[str]) -> None:
    import esa

    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out.strip() == f"esa {esa.__version__}"


@pytest.mark.parametrize(
    "argv",
    [
        ["simulate", "--protocol", "hist_kr"],
        ["demo"],
        ["audit", "--protocol", "hist_kr", "--n", "10", "--epsilon", "1"],
        ["amplify", "--epsilon-local", "1", "--n", "10"],
    ],
)
def test_one_default_domain_stated_in_each_help(argv: list[str]) -> None:
    from simulations.cli import build_parser

    parser = build_parser()
    assert parser.parse_args(argv).domain == 16
    sub = parser._subparsers._group_actions[0].choices[argv[0]]  # type: ignore[union-attr,index]
    (text,) = [str(a.help) for a in sub._actions if a.dest == "domain"]
    assert "default 16" in text.replace("%(default)s", "16")


def _force_unary_cnt_sgm(monkeypatch: pytest.MonkeyPatch) -> None:
    """Build every cnt_sgm with its unary encoding, which proves only its local ε_c (≈ 4.7
    at ε = 1) — a grid point that cannot meet its target."""
    import dataclasses

    from protocols import _registry

    _registry.protocol_names()  # the built-in protocols load when the registry is consulted
    splitmix = _registry._PROTOCOLS["cnt_sgm"]

    def unary(spec: _registry.ProtocolSpec) -> Any:
        return splitmix(dataclasses.replace(spec, options={**spec.options, "encoding": "unary"}))

    monkeypatch.setitem(_registry._PROTOCOLS, "cnt_sgm", unary)


def _experiments_argv(out: Path) -> list[str]:
    return [
        "experiments", "counting", "--quick", "--out", str(out), "--protocols", "cnt_sgm",
        "--repeats", "1", "--seed", "3",
    ]  # fmt: skip


def test_experiments_with_weaker_points_exit_1_after_writing_everything(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import csv

    _force_unary_cnt_sgm(monkeypatch)
    out = tmp_path / "exp"
    assert main([*_experiments_argv(out), "--json"]) == 1
    captured = capsys.readouterr()
    doc = json.loads(captured.out)  # printed in full before the exit code
    weaker = doc["weaker_than_requested"]
    assert weaker
    assert {w["method"] for w in weaker} == {"cnt_sgm"}
    assert all(w["epsilon_central"] > w["epsilon"] for w in weaker)
    assert doc["allow_weaker"] is False
    lines = [line for line in captured.err.splitlines() if "error:" in line]  # not progress
    assert len(lines) == 1
    assert lines[-1].startswith("esa experiments: error: ")
    assert "Traceback" not in captured.err
    assert "--allow-weaker" in lines[-1]
    # The CSV marks each such point: its epsilon_central above its epsilon.
    with (out / "counting.csv").open(newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["method"] == "cnt_sgm" and r["status"] == "ok"]
    marked = [r for r in rows if float(r["epsilon_central"]) > float(r["epsilon"])]
    assert len(marked) == len(weaker)
    # A rebuild from that CSV reads the same points and keeps the exit code.
    rebuild = ["experiments", "counting", "--quick", "--out", str(tmp_path / "again")]
    assert main([*rebuild, "--from-csv", str(out / "counting.csv"), "--json"]) == 1
    again = json.loads(capsys.readouterr().out)["weaker_than_requested"]
    assert [(w["method"], w["sweep"], w["value"]) for w in again] == [
        (w["method"], w["sweep"], w["value"]) for w in weaker
    ]  # the CSV keeps six significant digits of each ε


def test_experiments_allow_weaker_exits_0_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _force_unary_cnt_sgm(monkeypatch)
    assert main([*_experiments_argv(tmp_path / "exp"), "--allow-weaker"]) == 0
    out = capsys.readouterr().out
    assert "WEAKER ε_c than requested" in " ".join(out.split())
    assert "--allow-weaker" in out


def test_audit_ldp_defaults_to_domain_16_but_where_the_mechanism_cannot(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from simulations.commands.audit_ldp import DEFAULT_DOMAIN, DOMAIN_LIMITS

    assert DEFAULT_DOMAIN == 16
    assert main(["audit-ldp", "--mechanism", "krr", "--epsilon", "1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["domain"] == 16
    assert main(["audit-ldp", "--mechanism", "she", "--epsilon", "1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["domain"] == 3
    assert main(["audit-ldp", "--mechanism", "all", "--epsilon", "1", "--json"]) == 1  # dct
    out = json.loads(capsys.readouterr().out)
    domains = {r["mechanism"]: r["domain"] for r in out["results"]}
    assert out["skipped"] == []
    assert domains["krr"] == domains["olh"] == domains["hr"] == 16
    assert {m: domains[m] for m in DOMAIN_LIMITS} == DOMAIN_LIMITS
    with pytest.raises(SystemExit):
        main(["audit-ldp", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "default 16" in text
    assert "SHE 3" in text
