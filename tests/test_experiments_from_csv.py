"""``esa experiments --from-csv``: a saved CSV rebuilds the same rows and summary; bad CSVs
and run-only options are one-line usage errors."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest

from simulations import experiments
from simulations.cli import main
from simulations.experiments import ExperimentPlan, ExperimentResult, Row

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

#: The tiny grid: hist_mm is refused at ε_c = 0.5, n = 8000 (a skipped row with its reason)
#: and runs as a tally elsewhere (its d + 1 messages per user exceed the budget); hist_kr
#: runs as reports; the baselines leave representation empty. Two sweeps keep the
#: plotting, which dominates the time, to three PNGs per build.
TINY = ExperimentPlan(
    category="histogram",
    defaults={"n": 8000, "epsilon": 1.0, "delta": 1e-6, "domain": 4, "skew": 6.0},
    sweeps={"epsilon": (0.5, 1.0), "n": (8000.0, 16000.0)},
    repeats=2,
    max_messages=20_000,
    quick=True,
)
WALL_TIME = "- wall time: "
REBUILT = "- rows read from `histogram.csv` by `--from-csv`"


def _named_plots(rows: list[Row], plan: ExperimentPlan, out_dir: Path) -> list[Path]:
    """The paths plot_category writes, without drawing (plotting dominates a tiny run)."""
    return [out_dir / f"{plan.category}_{s}.png" for s in [*plan.sweeps, "overview"]]


@pytest.fixture(scope="module")
def original(tmp_path_factory: pytest.TempPathFactory) -> ExperimentResult:
    """One run of the tiny grid; its CSV is what every test reads. Its plots are only
    named (plotting dominates a tiny run); the rebuild test draws them."""
    out = tmp_path_factory.mktemp("run")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(experiments.run, "plot_category", _named_plots)
        return experiments.run_experiments(
            "histogram", out_dir=out, plan=TINY, only=["hist_kr", "hist_mm"], seed=5
        )


def _as_written(row: Row) -> Row:
    """``row`` with its floats at the CSV's six significant digits (NaN stays math.nan)."""
    return dataclasses.replace(
        row,
        **{
            f.name: float(f"{v:.6g}")
            for f in dataclasses.fields(row)
            if isinstance(v := getattr(row, f.name), float) and not math.isnan(v)
        },
    )


def _same_but_provenance(run_summary: str, rebuilt_summary: str) -> None:
    """The two summaries differ only in the line saying where the rows came from."""
    run_lines, rebuilt_lines = run_summary.splitlines(), rebuilt_summary.splitlines()
    assert len(run_lines) == len(rebuilt_lines)
    differ = [(a, b) for a, b in zip(run_lines, rebuilt_lines, strict=True) if a != b]
    assert len(differ) == 1
    assert differ[0][0].startswith(WALL_TIME)
    assert differ[0][1].startswith(REBUILT)


def test_the_grid_covers_every_kind_of_cell(original: ExperimentResult) -> None:
    # What the round trip must carry: skipped rows with a reason and NaN numbers, both
    # representations and the empty one, ints and floats.
    assert {r.status for r in original.rows} == {"ok", "skipped"}
    assert any(r.status == "skipped" and "," in r.reason for r in original.rows)
    assert {r.representation for r in original.rows} == {"", "reports", "tally"}
    assert any(math.isnan(r.rmse) for r in original.rows)


def test_rebuild_gives_back_the_rows_and_the_summary(
    original: ExperimentResult, tmp_path: Path
) -> None:
    csv_bytes = original.csv_path.read_bytes()
    rebuilt = experiments.rebuild_experiments(
        "histogram", csv_path=original.csv_path, out_dir=tmp_path, plan=TINY
    )
    assert rebuilt.rows == [_as_written(r) for r in original.rows]
    for row in rebuilt.rows:
        for f in dataclasses.fields(row):
            assert type(getattr(row, f.name)).__name__ == f.type, (f.name, row)
    _same_but_provenance(original.summary_path.read_text(), rebuilt.summary_path.read_text())
    assert rebuilt.from_csv
    assert not original.from_csv
    assert (rebuilt.protocols, rebuilt.crypto, rebuilt.skipped) == (
        original.protocols,
        original.crypto,
        original.skipped,
    )
    assert [p.name for p in rebuilt.plots] == [p.name for p in original.plots]
    assert all(p.read_bytes()[:8] == PNG_MAGIC for p in rebuilt.plots)
    # Written back, the rows are the same file; the CSV read is left alone and not copied.
    experiments.write_csv(rebuilt.rows, tmp_path / "again.csv")
    assert (tmp_path / "again.csv").read_bytes() == csv_bytes
    assert original.csv_path.read_bytes() == csv_bytes
    assert not (tmp_path / "histogram.csv").exists()


def test_cli_rebuild_json(
    original: ExperimentResult, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    # The CLI takes the grid from make_plan with the CSV's repeats: here the tiny one.
    monkeypatch.setattr(experiments.run, "make_plan", lambda category, *, quick, repeats: TINY)
    monkeypatch.setattr(experiments.run, "plot_category", _named_plots)
    argv = ["experiments", "histogram", "--out", str(tmp_path), "--from-csv"]
    assert main([*argv, str(original.csv_path), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["from_csv"] is True
    assert report["csv"] == str(original.csv_path)
    assert report["rows"] == len(original.rows)
    assert report["protocols"] == original.protocols
    assert report["skipped"] == original.skipped
    assert (report["crypto"], report["repeats"]) == ("ideal", TINY.repeats)
    _same_but_provenance(
        original.summary_path.read_text(), (tmp_path / "histogram_summary.md").read_text()
    )


def test_cli_rebuild_table_says_nothing_ran(
    original: ExperimentResult, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    monkeypatch.setattr(experiments.run, "make_plan", lambda category, *, quick, repeats: TINY)
    monkeypatch.setattr(experiments.run, "plot_category", _named_plots)
    argv = ["experiments", "histogram", "--out", str(tmp_path), "--from-csv"]
    assert main([*argv, str(original.csv_path)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "rows read from" in out
    assert "(nothing run)" in out
    assert "| hist_kr | shuffle |" in (tmp_path / "histogram_summary.md").read_text()


def _error(argv: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert err.startswith("esa experiments: error: ")
    return err


def _edited(original: ExperimentResult, tmp_path: Path, edit) -> Path:
    """A copy of the run's CSV with ``edit(lines) -> lines`` applied."""
    lines = original.csv_path.read_text().splitlines(keepends=True)
    path = tmp_path / "edited.csv"
    path.write_text("".join(edit(lines)))
    return path


def _set_cell(column: str, value: str):
    """An edit that puts ``value`` into ``column`` of the first data row."""

    def edit(lines: list[str]) -> list[str]:
        header = lines[0].rstrip("\r\n").split(",")
        cells = lines[1].rstrip("\r\n").split(",")
        assert len(cells) == len(header)  # no quoted comma in it (hist_kr @ ε_c = 0.5 ran)
        cells[header.index(column)] = value
        return [lines[0], ",".join(cells) + "\r\n", *lines[2:]]

    return edit


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (lambda lines: lines[:1], "no rows for epsilon=0.5"),
        (lambda lines: [], "is empty: expected the header"),
        (lambda lines: [lines[0].replace("rmse,", "rms,", 1), *lines[1:]], "missing rmse"),
        (lambda lines: [lines[0].replace(",reason", ""), *lines[1:]], "missing reason"),
        (lambda lines: [*lines, "histogram,epsilon\r\n"], "2 cells, expected 24"),
        (_set_cell("n", "8000.0"), "column n: '8000.0' is not an integer"),
        (_set_cell("rmse", "abc"), "column rmse: 'abc' is not a number"),
        (_set_cell("status", "maybe"), "column status: 'maybe' is not one of"),
        (_set_cell("category", "sum"), "line 2: a sum row, not histogram"),
        (_set_cell("skew", "5"), "has skew=5 (grid: 6)"),
        (_set_cell("value", "0.7"), "epsilon=0.7 is not a point of the quick histogram grid"),
        (_set_cell("repeats", "3"), "rows that ran have repeats 2, 3"),
        (lambda lines: [*lines, lines[1]], "two rows for hist_kr @ epsilon=0.5"),
        (lambda lines: [*lines[:2], *lines[3:]], "differ from those at epsilon=0.5"),
        (_set_cell("crypto", "onion"), "the shuffle rows ran with crypto ideal, onion"),
    ],
)
def test_bad_csv_is_one_line_exit_2(
    original: ExperimentResult,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys,
    edit,
    expected: str,
) -> None:
    monkeypatch.setattr(experiments.run, "make_plan", lambda category, *, quick, repeats: TINY)
    path = _edited(original, tmp_path, edit)
    argv = ["experiments", "histogram", "--out", str(tmp_path / "o"), "--from-csv", str(path)]
    assert expected in _error(argv, capsys)


def test_unreadable_or_misfiled_csv_is_one_line_exit_2(
    original: ExperimentResult, tmp_path: Path, capsys
) -> None:
    out = ["--out", str(tmp_path / "o")]
    missing = str(tmp_path / "nope.csv")
    err = _error(["experiments", "histogram", *out, "--from-csv", missing], capsys)
    assert f"cannot read {missing}: No such file or directory" in err
    _error(["experiments", "histogram", *out, "--from-csv", str(tmp_path)], capsys)
    binary = tmp_path / "binary.csv"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    assert "not a CSV of esa experiments" in _error(
        ["experiments", "histogram", *out, "--from-csv", str(binary)], capsys
    )
    csv_path = str(original.csv_path)
    assert "a histogram row, not counting" in _error(
        ["experiments", "counting", *out, "--from-csv", csv_path], capsys
    )


def test_grid_must_match_the_plan_quick_or_full(
    original: ExperimentResult, tmp_path: Path, capsys
) -> None:
    # The tiny grid is neither the quick nor the full one: whichever --quick says is refused,
    # with a hint at the other.
    argv = [
        "experiments",
        "histogram",
        "--out",
        str(tmp_path),
        "--from-csv",
        str(original.csv_path),
    ]
    err = _error([*argv, "--quick"], capsys)
    assert "is not a point of the quick histogram grid" in err
    assert "was it written without --quick?" in err
    err = _error(argv, capsys)  # its ε_c values are full-grid ones, its n is not
    assert "has n=8000 (grid: 1e+06), domain=4 (grid: 16), unlike the full histogram grid" in err
    assert "was it written with --quick?" in err


@pytest.mark.parametrize(
    "extra", [["--seed", "1"], ["--repeats", "2"], ["--crypto", "ideal"], ["--protocols", "slh"]]
)
def test_run_only_options_are_refused(
    original: ExperimentResult, tmp_path: Path, capsys, extra: list[str]
) -> None:
    argv = [
        "experiments",
        "histogram",
        "--out",
        str(tmp_path),
        "--from-csv",
        str(original.csv_path),
    ]
    err = _error([*argv, *extra], capsys)
    assert f"--from-csv runs nothing: {extra[0]} cannot be combined with it" in err
    assert not any(tmp_path.iterdir())  # refused before anything is written
