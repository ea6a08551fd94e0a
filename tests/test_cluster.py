"""A grid on a real Dask cluster (two worker processes) writes the in-process run's rows.

Skipped when ``distributed`` is not installed, unless ``CI`` is set: CI installs the test
extra, which has it, and must run this.
"""

from __future__ import annotations

import csv
import io
import os
from pathlib import Path

import pytest

from simulations.experiments import ExperimentPlan, run_experiments

if os.environ.get("CI"):
    import distributed
else:
    distributed = pytest.importorskip("distributed")

WALL_CLOCK = ("analyzer_seconds", "total_seconds", "analyzer_cpu_seconds", "total_cpu_seconds")


def _plan() -> ExperimentPlan:
    return ExperimentPlan(
        category="sum",
        defaults={"n": 2000, "epsilon": 1.0, "delta": 1e-6, "domain": 10, "skew": 6.0},
        sweeps={"epsilon": (0.5, 1.0)},
        repeats=2,
        max_messages=200_000,
        quick=True,
    )


def _rows(path: Path) -> list[dict[str, str]]:
    rows = list(csv.DictReader(io.StringIO(path.read_text())))
    for r in rows:
        for col in WALL_CLOCK:
            r.pop(col)
    return rows


@pytest.mark.slow
def test_local_dask_cluster_gives_the_in_process_rows(tmp_path: Path) -> None:
    only = ["rsum_rr", "rsum_rm"]
    local = run_experiments("sum", out_dir=tmp_path / "local", plan=_plan(), only=only, seed=5)
    with (
        distributed.LocalCluster(
            n_workers=2, processes=True, threads_per_worker=1, dashboard_address=None
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        by_address = run_experiments(
            "sum",
            out_dir=tmp_path / "addr",
            plan=_plan(),
            only=only,
            seed=5,
            cluster=cluster.scheduler_address,
        )
        by_client = run_experiments(
            "sum", out_dir=tmp_path / "client", plan=_plan(), only=only, seed=5, cluster=client
        )
        ran_on = set(client.run(os.getpid).values())
    expected = _rows(local.csv_path)
    assert len(expected) == 2 * (len(only) + 2)
    assert any(r["status"] == "ok" for r in expected)
    assert _rows(by_address.csv_path) == expected
    assert _rows(by_client.csv_path) == expected
    assert os.getpid() not in ran_on
    assert len(ran_on) == 2
