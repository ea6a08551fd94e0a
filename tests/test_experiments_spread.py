"""The experiments CSV's spread over seeds (``rmse_sd``) and CPU-time columns: what they
measure, that the plots and summaries use them, and that a CSV written before they existed
is still read, with a visible note instead of error bars and CPU time."""

from __future__ import annotations

import csv
import math
import statistics
import time
from pathlib import Path

import pytest

from simulations import experiments
from simulations.experiments import (
    ADDED_FIELDS,
    CSV_FIELDS,
    ExperimentPlan,
    ExperimentResult,
    Row,
    read_csv,
)

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _plan(repeats: int, category: str = "counting") -> ExperimentPlan:
    """One point (the default) in one sweep."""
    return ExperimentPlan(
        category=category,
        defaults={"n": 2000, "epsilon": 1.0, "delta": 1e-6, "domain": 4, "skew": 0.5},
        sweeps={"epsilon": (1.0,)},
        repeats=repeats,
        max_messages=200_000,
        quick=True,
    )


def _no_plots(rows: list[Row], plan: ExperimentPlan, out_dir: Path) -> list[Path]:
    return []


def _rows(tmp_path: Path, repeats: int, category: str = "counting") -> dict[str, Row]:
    """The rows (by method) of a run of the one-point plan, without drawing."""
    only = ["cnt_rr"] if category == "counting" else ["hist_kr"]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(experiments.run, "plot_category", _no_plots)
        res = experiments.run_experiments(
            category, out_dir=tmp_path / f"r{repeats}", plan=_plan(repeats, category), only=only
        )
    return {r.method: r for r in res.rows}


@pytest.mark.parametrize("category", ["counting", "histogram"])
def test_rmse_sd_is_the_sd_of_the_per_run_rmses(tmp_path: Path, category: str) -> None:
    # Run k of a point draws the same numbers whatever the number of runs (its data and its
    # randomness are the k-th children of the point's streams), so the pooled RMSEs of the
    # first 1, 2, 3 runs give each run's mean squared error on their own:
    # MSE_k = k·RMSE_k² − (k−1)·RMSE_{k−1}². Their square roots' sample sd is rmse_sd.
    runs = [_rows(tmp_path, k, category) for k in (1, 2, 3)]
    for method, row in runs[-1].items():
        assert row.status == "ok", row.reason
        pooled = [r[method].rmse for r in runs]
        mse = [pooled[0] ** 2] + [
            k * pooled[k - 1] ** 2 - (k - 1) * pooled[k - 2] ** 2 for k in (2, 3)
        ]
        per_run = [math.sqrt(max(m, 0.0)) for m in mse]
        assert row.rmse_sd == pytest.approx(statistics.stdev(per_run), rel=1e-7, abs=1e-9)
        assert runs[1][method].rmse_sd == pytest.approx(
            statistics.stdev(per_run[:2]), rel=1e-7, abs=1e-9
        )
        assert math.isnan(runs[0][method].rmse_sd)  # one run: no spread


def test_cpu_columns_time_work_not_waiting(tmp_path: Path, monkeypatch) -> None:
    # The analyzer's CPU span runs from the analyze stage's start to the end of the run: a
    # pipeline that sleeps 0.3 s there adds nothing to it, one that computes for 0.3 s adds
    # at least that. (Thresholds: 0.3 s against the ≈ 10 ms this run takes.)
    real = experiments.run.esa.run_pipeline

    def sleeping(*args, **kwargs):
        res = real(*args, **kwargs)
        time.sleep(0.3)
        return res

    def computing(*args, **kwargs):
        res = real(*args, **kwargs)
        end = time.process_time() + 0.3
        while time.process_time() < end:
            pass
        return res

    monkeypatch.setattr(experiments.run.esa, "run_pipeline", sleeping)
    slept = _rows(tmp_path / "sleep", 1)["cnt_rr"]
    monkeypatch.setattr(experiments.run.esa, "run_pipeline", computing)
    busy = _rows(tmp_path / "busy", 1)["cnt_rr"]
    assert slept.analyzer_cpu_seconds < 0.15
    assert slept.total_cpu_seconds < 0.15
    assert busy.analyzer_cpu_seconds >= 0.3
    assert busy.total_cpu_seconds >= busy.analyzer_cpu_seconds


def test_cpu_columns_are_measured_in_the_worker(tmp_path: Path) -> None:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(experiments.run, "plot_category", _no_plots)
        res = experiments.run_experiments(
            "counting", out_dir=tmp_path, plan=_plan(2), only=["cnt_rr"], workers=2
        )
    for r in res.rows:
        assert r.status == "ok"
        assert 0 < r.analyzer_cpu_seconds <= r.total_cpu_seconds, r
        assert math.isfinite(r.rmse_sd)


def _earlier_csv(rows_csv: Path, out: Path) -> Path:
    """The CSV as a version without the added columns wrote it."""
    with rows_csv.open(newline="") as f:
        records = list(csv.DictReader(f))
    fields = [c for c in CSV_FIELDS if c not in ADDED_FIELDS]
    with out.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        w.writeheader()
        w.writerows(records)
    return out


@pytest.fixture(scope="module")
def two_sweeps(tmp_path_factory: pytest.TempPathFactory) -> ExperimentResult:
    out = tmp_path_factory.mktemp("run")
    plan = ExperimentPlan(
        category="counting",
        defaults={"n": 2000, "epsilon": 1.0, "delta": 1e-6, "domain": 2, "skew": 0.5},
        sweeps={"epsilon": (0.5, 1.0), "n": (2000.0, 4000.0)},
        repeats=2,
        max_messages=200_000,
        quick=True,
    )
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(experiments.run, "plot_category", _no_plots)
        return experiments.run_experiments(
            "counting", out_dir=out, plan=plan, only=["cnt_rr", "cnt_2m"], seed=3
        )


def test_summary_states_the_error_bars_and_cpu_time(two_sweeps: ExperimentResult) -> None:
    summary = two_sweeps.summary_path.read_text()
    assert "one standard error over the runs" in summary
    assert "analyzer time: CPU seconds per run" in summary
    assert "| method | family | RMSE ± s.e. | expected RMSE | analyzer CPU s |" in summary
    assert " ± " in summary.split("## At the default point")[1].split("##")[0]


def test_an_earlier_csv_is_read_and_drawn_with_a_note(
    two_sweeps: ExperimentResult, tmp_path: Path
) -> None:
    old = _earlier_csv(two_sweeps.csv_path, tmp_path / "counting.csv")
    rows = read_csv(old, category="counting")
    current = read_csv(two_sweeps.csv_path, category="counting")
    assert len(rows) == len(current)
    for r, c in zip(rows, current, strict=True):
        for name in CSV_FIELDS:
            if name in ADDED_FIELDS:
                assert math.isnan(getattr(r, name))
            else:
                a, b = getattr(r, name), getattr(c, name)
                assert a == b or (a != a and b != b), name  # NaN == NaN here
    res = experiments.rebuild_experiments(
        "counting", csv_path=old, out_dir=tmp_path / "out", plan=two_sweeps.plan
    )
    summary = res.summary_path.read_text()
    assert "the CSV has no per-run spread (column `rmse_sd`" in summary
    assert "analyzer time: wall seconds per run" in summary
    assert "| analyzer wall s |" in summary
    assert [p.name for p in res.plots] == [
        "counting_epsilon.png",
        "counting_n.png",
        "counting_overview.png",
    ]
    for p in res.plots:
        assert p.read_bytes()[:8] == PNG_MAGIC


def test_an_earlier_header_with_a_column_missing_names_only_that_column(
    two_sweeps: ExperimentResult, tmp_path: Path
) -> None:
    old = _earlier_csv(two_sweeps.csv_path, tmp_path / "old.csv")
    lines = old.read_text().splitlines(keepends=True)
    broken = tmp_path / "broken.csv"
    broken.write_text("".join([lines[0].replace(",reason", ""), *lines[1:]]))
    with pytest.raises(experiments.ExperimentsCSVError, match=r"header columns missing reason$"):
        read_csv(broken, category="counting")


def test_plots_mark_weaker_and_refused_points_without_failing(
    two_sweeps: ExperimentResult, tmp_path: Path
) -> None:
    # Every branch of the drawing: a refused method at the default point, a point that
    # proves a larger ε_c than requested, rows with and without spread.
    import dataclasses

    rows = []
    for r in two_sweeps.rows:
        if r.method == "cnt_2m" and r.sweep == "epsilon":
            r = dataclasses.replace(r, status="skipped", rmse=math.nan, reason="refused")
        if r.method == "cnt_rr":
            r = dataclasses.replace(r, epsilon_central=8.06)
        rows.append(r)
    paths = experiments.plot_category(rows, two_sweeps.plan, tmp_path)
    assert len(paths) == 3
    for p in paths:
        assert p.read_bytes()[:8] == PNG_MAGIC
