"""``esa protocols NAME`` and ``esa simulate --protocol NAME --help``."""

from __future__ import annotations

import json

import pytest

from simulations.cli import main


def test_protocols_name_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["protocols", "cnt_sgm", "--json"]) == 0
    j = json.loads(capsys.readouterr().out)
    options = {o["name"]: o for o in j["options"]}
    assert options["gamma"]["type"] == "number"
    assert options["gamma"]["default"] == 1.0
    assert "(0, 1]" in options["gamma"]["valid"]
    assert options["encoding"]["type"] == "name"
    assert "splitmix" in options["encoding"]["valid"]
    assert any("arXiv" in p for p in j["papers"])
    assert j["messages_per_user"] > 0


def test_protocols_name_table_at_80(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["protocols", "disele"]) == 0
    out = capsys.readouterr().out
    assert "must be an integer >= 1" in out
    assert max(len(line) for line in out.splitlines()) <= 80
    assert "``" not in out


def test_simulate_help_describes_the_protocol(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["simulate", "--protocol", "disele", "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert "--protocol" in out
    assert "disele's options" in out


def test_unknown_protocol_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    from tests._cli import usage_error

    assert "unknown protocol" in usage_error(["protocols", "nope"], capsys)
