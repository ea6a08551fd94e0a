"""One executor for the parallel stages, and experiment rows that do not depend on where or
with what else a grid point runs (esa.resolve_executor, plan.point_seed)."""

from __future__ import annotations

import csv
import gc
import io
import multiprocessing
import resource
import subprocess
import sys
import textwrap
from concurrent.futures import Executor, ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

import crypto
import esa
from esa._executor import local_pool
from simulations.experiments import ExperimentPlan, run_experiments
from simulations.experiments.plan import point_seed

#: the CSV columns that time a point (wall and CPU): the only ones a run may change
WALL_CLOCK = ("analyzer_seconds", "total_seconds", "analyzer_cpu_seconds", "total_cpu_seconds")


def _plan(category: str = "counting") -> ExperimentPlan:
    return ExperimentPlan(
        category=category,
        defaults={"n": 2000, "epsilon": 1.0, "delta": 1e-6, "domain": 8, "skew": 0.5},
        sweeps={"epsilon": (0.5, 1.0), "n": (1000.0, 2000.0)},
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


def _square(x: int) -> int:
    return x * x


def test_local_pool_by_default_sized_to_the_cores() -> None:
    with esa.resolve_executor() as ex:
        assert isinstance(ex, ProcessPoolExecutor)
        assert ex._max_workers == esa.available_cores()  # type: ignore[attr-defined]
        assert list(ex.map(_square, range(4))) == [0, 1, 4, 9]
    with esa.resolve_executor(workers=2) as ex:
        assert ex._max_workers == 2  # type: ignore[attr-defined]


def _refaults(mib: int) -> int:
    """Minor page faults of filling a ``mib``-MiB array just after freeing one alike."""
    np.ones(mib * 2**17)  # 8-byte floats: allocated, filled and freed at once
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    np.ones(mib * 2**17)
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc tuning")
def test_local_pool_workers_reuse_the_memory_they_free() -> None:
    # glibc maps a block above 32 MiB afresh each time by default: filling 128 MiB faults at
    # least once per 2 MiB huge page (64 times; 32 768 times in 4 KiB pages). A worker of
    # ours takes it from the heap its last array left: a handful of faults at most.
    fresh_mapping = 128 // 2
    with ProcessPoolExecutor(1) as plain:  # the default allocator, for contrast
        assert plain.submit(_refaults, 128).result() >= fresh_mapping
    with esa.resolve_executor(workers=2) as ex:
        assert ex.submit(_refaults, 128).result() < fresh_mapping / 4
    assert local_pool(2).submit(_refaults, 128).result() < fresh_mapping / 4  # forkserver
    with ProcessPoolExecutor(1, initializer=crypto.keep_freed_memory) as mine:
        assert mine.submit(_refaults, 128).result() < fresh_mapping / 4


def _collection_faults() -> tuple[int, int]:
    """(minor page faults of a full garbage collection, objects frozen) in this process."""
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    gc.collect()
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before, gc.get_freeze_count()


@pytest.mark.skipif(
    multiprocessing.get_start_method() != "fork", reason="workers share the parent's pages"
)
def test_local_pool_workers_collect_without_copying_the_parents_heap() -> None:
    # This process holds 10^5 objects or more (pytest, numpy, scipy...). A worker forked
    # from it writes the header of each it traverses in a full collection, so copies every
    # page that holds one: thousands of faults (6 189 for a bare script with scipy.stats,
    # 8·10^4 objects). Ours were frozen before the fork: the collector leaves them alone
    # (140 faults there), and they are the collector's again once the pool is done.
    # Run alone, this file's process holds fewer: 6·10^4 tracked objects of its own make the
    # heap as large whatever else the session imported.
    ballast = [[] for _ in range(60_000)]
    assert len(gc.get_objects()) > 50_000
    with ProcessPoolExecutor(1) as plain:
        copied, frozen = plain.submit(_collection_faults).result()
    assert frozen == 0
    assert copied > 1_000
    with esa.resolve_executor(workers=2) as ex:
        faults, frozen = ex.submit(_collection_faults).result()
    assert frozen > 50_000
    assert faults < copied / 5
    assert gc.get_freeze_count() == 0
    del ballast


def test_a_given_executor_is_used_and_left_running() -> None:
    with ThreadPoolExecutor(1) as mine:
        with esa.resolve_executor(cluster=mine) as ex:
            assert ex is mine
        assert mine.submit(_square, 3).result() == 9  # not shut down


def test_bad_workers_and_cluster_are_config_errors() -> None:
    with pytest.raises(esa.ConfigError, match="workers"), esa.resolve_executor(workers=0):
        pass
    with pytest.raises(esa.ConfigError, match="cluster"), esa.resolve_executor(cluster=3.5):
        pass


def test_point_seed_is_the_tasks_identity() -> None:
    point = {"n": 2000.0, "epsilon": 1.0, "delta": 1e-6, "domain": 8.0, "skew": 0.5}
    a = point_seed(7, "counting", "cnt_rr", point)
    same = point_seed(7, "counting", "cnt_rr", dict(reversed(point.items())))
    assert a.spawn_key == same.spawn_key
    assert a.entropy == 7
    draws = {
        np.random.default_rng(s).integers(2**62)
        for s in (
            a,
            point_seed(8, "counting", "cnt_rr", point),
            point_seed(7, "counting", "ldp_rr", point),
            point_seed(7, "sum", "cnt_rr", point),
            point_seed(7, "counting", "cnt_rr", {**point, "epsilon": 0.5}),
        )
    }
    assert len(draws) == 5
    assert np.random.default_rng(a).integers(2**62) == np.random.default_rng(same).integers(2**62)


def test_a_protocols_rows_do_not_depend_on_the_others(tmp_path: Path) -> None:
    one = run_experiments("counting", out_dir=tmp_path / "a", plan=_plan(), only=["cnt_rr"])
    two = run_experiments(
        "counting", out_dir=tmp_path / "ab", plan=_plan(), only=["cnt_rr", "cnt_pure"]
    )
    rows_one = _rows(one.csv_path)
    rows_two = [r for r in _rows(two.csv_path) if r["method"] != "cnt_pure"]
    assert rows_one == rows_two
    assert any(r["status"] == "ok" and r["method"] == "cnt_rr" for r in rows_one)


def test_parallel_run_equals_serial_run(tmp_path: Path) -> None:
    serial = run_experiments("counting", out_dir=tmp_path / "s", plan=_plan(), only=["cnt_rr"])
    parallel = run_experiments(
        "counting", out_dir=tmp_path / "p", plan=_plan(), only=["cnt_rr"], workers=2
    )
    assert _rows(serial.csv_path) == _rows(parallel.csv_path)
    assert len(_rows(serial.csv_path)) == 4 * 3


def test_any_executor_gives_the_same_rows(tmp_path: Path) -> None:
    serial = run_experiments("counting", out_dir=tmp_path / "s", plan=_plan(), seed=3)
    with ThreadPoolExecutor(2) as ex:
        threaded = run_experiments(
            "counting", out_dir=tmp_path / "t", plan=_plan(), seed=3, cluster=ex
        )
    assert isinstance(ex, Executor)
    assert _rows(serial.csv_path) == _rows(threaded.csv_path)


def test_a_process_that_used_a_pool_exits_without_a_word() -> None:
    """The pools are let go at exit while the interpreter is whole: left to the modules'
    teardown, a pool's collection callback failed on every exit of a command that used one
    (``Exception ignored in ... weakref_cb``, on stderr)."""
    code = textwrap.dedent(
        """
        import numpy as np
        import esa, protocols
        spec = protocols.ProtocolSpec(epsilon=1.0, delta=1e-6, n=2000, domain=4)
        protocol = protocols.build_protocol("hist_kr", spec)
        config = esa.PipelineConfig(workers=2)
        esa.run_pipeline(protocol, np.zeros(2000, dtype=np.int64), config=config, rng=1)
        print("ran")
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ran"
    assert out.stderr == ""


#: A pool whose start a Ctrl-C cuts short: the KeyboardInterrupt raised as the pool starts its
#: manager thread, its first worker already started (where CPython raises a Ctrl-C that
#: arrived while the worker started). Then, once that worker waits for work (blocked in a
#: system call: a read of the call queue's pipe, or a wait on its lock), the process exits.
#: argv: ``registry`` (crypto.process_pool, forkserver) or ``resolve`` (esa.resolve_executor).
_INTERRUPTED_START = """
import multiprocessing, sys, time
import concurrent.futures.process as cfp
import crypto, esa

def interrupted(self, executor):
    raise KeyboardInterrupt

def wait_until_idle(deadline=60.0):
    end, calm = time.monotonic() + deadline, 0
    while time.monotonic() < end and calm < 5:
        kids = multiprocessing.active_children()
        states = [open(f"/proc/{k.pid}/syscall").read().split()[0] for k in kids]
        calm = calm + 1 if kids and "running" not in states else 0
        time.sleep(0.1)
    print("idle" if calm >= 5 else "never idle", flush=True)

cfp._ExecutorManagerThread.__init__ = interrupted
try:
    if sys.argv[1] == "registry":
        crypto.process_pool(2).submit(int)
    else:
        with esa.resolve_executor(2) as pool:
            try:
                pool.submit(int)
            finally:
                wait_until_idle()
except KeyboardInterrupt:
    if sys.argv[1] == "registry":
        wait_until_idle()
    print("interrupted", flush=True)
"""


@pytest.mark.skipif(not Path("/proc/self/syscall").exists(), reason="needs Linux's /proc")
@pytest.mark.parametrize("pool", ["registry", "resolve"])
def test_a_pool_whose_start_was_interrupted_does_not_hold_the_exit(pool: str) -> None:
    """Its workers were started and no thread was left to stop them: without
    crypto.shutdown_pool, multiprocessing waited for them at exit, forever (a Ctrl-C during
    a TCP run's first chunk once hung the run). Now the process exits at once."""
    try:
        out = subprocess.run(
            [sys.executable, "-c", _INTERRUPTED_START, pool],
            capture_output=True,
            text=True,
            timeout=90,
        )
    except subprocess.TimeoutExpired as hung:
        pytest.fail(f"the process never exited; it printed {hung.stdout!r}")
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["idle", "interrupted"]
