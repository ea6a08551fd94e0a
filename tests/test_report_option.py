"""``--report FILE.html`` on ``esa simulate``, ``audit``, ``amplify`` and ``experiments``: the
HTML report of the object ``--json`` prints, written beside the command's usual output."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from simulations import experiments
from simulations.cli import main
from simulations.experiments import ExperimentPlan
from simulations.report import SECTIONS

SECTION_IDS = ("parameters", "estimate", "privacy", "amplification", "hops", "reading")


def _tiny_plan(category: str, **_: object) -> ExperimentPlan:
    return ExperimentPlan(
        category=category,
        defaults={"n": 2000, "epsilon": 1.0, "delta": 1e-6, "domain": 8, "skew": 0.5},
        sweeps={"epsilon": (0.5, 1.0)},
        repeats=1,
        max_messages=200_000,
        quick=True,
    )


#: Each command at a small size (``{out}``: a directory of the test's own).
COMMANDS: dict[str, list[str]] = {
    "simulate": ["simulate", "--protocol", "hist_kr", "--n", "2000", "--crypto", "ideal"],
    "audit": ["audit", "--protocol", "cnt_rr", "--n", "200", "--epsilon", "1"],
    "amplify": ["amplify", "--epsilon-local", "2", "--n", "1000"],
    "experiments": ["experiments", "counting", "--out", "{out}", "--protocols", "cnt_rr"],
}


def _argv(name: str, tmp_path: Path) -> list[str]:
    return [a.replace("{out}", str(tmp_path / "exp")) for a in COMMANDS[name]]


def _sections(html: str) -> list[str]:
    return [sid for sid in SECTION_IDS if f'<section id="{sid}">' in html]


def test_the_section_ids_are_the_reports() -> None:
    assert tuple(sid for sid, _ in SECTIONS) == SECTION_IDS


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_report_option_writes_a_standalone_page_with_every_section(
    name: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(experiments.run, "make_plan", _tiny_plan)
    page = tmp_path / f"{name}.html"
    assert main([*_argv(name, tmp_path), "--report", str(page)]) == 0
    err = capsys.readouterr().err
    assert f"wrote the report {page}" in err
    html = page.read_text(encoding="utf-8")
    assert html.lstrip().lower().startswith("<!doctype html")
    assert f'data-kind="{name}"' in html
    assert _sections(html) == list(SECTION_IDS)
    assert "<script" not in html.lower()


@pytest.mark.parametrize("name", ["simulate", "amplify"])
def test_report_is_of_the_object_json_prints(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    page = tmp_path / "r.html"
    assert main([*_argv(name, tmp_path), "--json", "--report", str(page)]) == 0
    out = capsys.readouterr().out
    doc = json.loads(out)  # stdout stays one JSON object
    assert doc["command"][-2:] == ["--report", str(page)]
    html = page.read_text(encoding="utf-8")
    assert _sections(html) == list(SECTION_IDS)
    assert doc["version"] in html


def test_report_into_a_missing_directory_is_refused_before_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    page = tmp_path / "no" / "such" / "r.html"
    with pytest.raises(SystemExit) as exc:
        main([*_argv("amplify", tmp_path), "--report", str(page)])
    assert exc.value.code == 2
    assert "--report" in capsys.readouterr().err
    assert not page.exists()
