"""A simulation's chunk tasks on a real Dask cluster (two worker processes) give the
in-process estimate.

Skipped when ``distributed`` is not installed, unless ``CI`` is set: CI installs the test
extra, which has it, and must run this.
"""

from __future__ import annotations

import json
import os
from collections import Counter

import numpy as np
import pytest

import esa
from simulations.cli import main

if os.environ.get("CI"):
    import distributed
else:
    distributed = pytest.importorskip("distributed")


@pytest.mark.slow
def test_a_simulation_on_a_local_dask_cluster_gives_the_in_process_estimate(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # ideal: 40 000 users are 3 encoding chunks; onion: every hop's peeling is a task.
    runs = {"ideal": 40_000, "onion": 3_000}
    common = {"epsilon": 1.0, "domain": 8, "shufflers": 2, "fake_reports": 4, "rng": 9}
    local = {
        mode: esa.simulate("hist_kr", n=n, crypto=mode, workers=1, **common)  # type: ignore[arg-type]
        for mode, n in runs.items()
    }
    with (
        distributed.LocalCluster(
            n_workers=2, processes=True, threads_per_worker=1, dashboard_address=None
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        with distributed.get_task_stream(client) as stream:
            on_cluster = {
                "ideal": esa.simulate(
                    "hist_kr", n=runs["ideal"], crypto="ideal", cluster=client, **common
                ),
                "onion": esa.simulate(
                    "hist_kr",
                    n=runs["onion"],
                    crypto="onion",
                    cluster=cluster.scheduler_address,
                    **common,
                ),
            }
        workers = set(client.scheduler_info()["workers"])
        # the command line: esa simulate --cluster ADDRESS, the same estimate
        argv = ["simulate", "--protocol", "hist_kr", "--n", str(runs["ideal"]), "--domain", "8"]
        argv += ["--crypto", "ideal", "--shufflers", "2", "--fake-reports", "4", "--seed", "9"]
        assert main([*argv, "--cluster", cluster.scheduler_address, "--json"]) == 0
        by_command = json.loads(capsys.readouterr().out)
        assert main([*argv, "--workers", "1", "--json"]) == 0
        by_command_locally = json.loads(capsys.readouterr().out)
    assert by_command["estimate"] == by_command_locally["estimate"]
    for mode, result in on_cluster.items():
        assert np.array_equal(result.estimate.values, local[mode].estimate.values), mode
        assert [h.forwarded for h in result.hops] == [h.forwarded for h in local[mode].hops]
    tasks = Counter(t["key"].split("-")[0] for t in stream.data)
    assert tasks["encode_chunk"] == 3 + 1  # ideal: 3 chunks; onion: 1
    assert tasks["peel_chunk"] >= 3  # onion: 2 shufflers + the analyzer, a chunk each
    assert len(workers) == 2
    assert {t["worker"] for t in stream.data} == workers
    # another seed is another estimate: the comparison above can fail
    other = esa.simulate(
        "hist_kr", n=runs["ideal"], crypto="ideal", workers=1, **{**common, "rng": 10}
    )  # type: ignore[arg-type]
    assert not np.array_equal(other.estimate.values, local["ideal"].estimate.values)
