"""A grid, and a collusion audit's attacks, on a real Dask cluster (two worker processes) give
the in-process run's rows.

Skipped when ``distributed`` is not installed, unless ``CI`` is set: CI installs the test
extra, which has it, and must run this.
"""

from __future__ import annotations

import csv
import io
import os
from pathlib import Path

import pytest

from simulations._audit import audit
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
    only = ["rsum_rr", "rsum_rm", "rsum_pure"]  # rsum_pure's calibrations are tasks too
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


#: A small measured audit: 6 scenarios (users, shufflers, both colluding), 120 trials each
#: per hypothesis, 3 tasks of ≤ 50 trials per hypothesis and scenario.
AUDIT = {
    "protocol_name": "hist_kr",
    "n": 40,
    "epsilon": 1.0,
    "delta": 1e-6,
    "domain": 2,
    "shufflers": 2,
    "fake_reports": 2,
    "colluding_users": 3,
    "colluding_shufflers": 1,
    "measure": True,
    "trials": 120,
    "seed": 7,
}


@pytest.mark.slow
def test_audit_trials_on_processes_and_a_local_dask_cluster_give_the_same_json() -> None:
    serial = audit(**AUDIT)
    assert any(r["epsilon_lower_measured"] for r in serial["scenarios"])  # something measured
    assert audit(**AUDIT, workers=1) == serial
    assert audit(**AUDIT, workers=2) == serial
    with (
        distributed.LocalCluster(
            n_workers=2, processes=True, threads_per_worker=1, dashboard_address=None
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        assert audit(**AUDIT, cluster=cluster.scheduler_address) == serial
        ran_on = set(client.run(os.getpid).values())
    assert os.getpid() not in ran_on
    # A different seed measures different trials: the equality above is not vacuous.
    assert audit(**{**AUDIT, "seed": 8}) != serial
