"""The ``esa`` executable runs BLAS on one thread unless the environment chose otherwise
(``simulations/_launch.py``), and nothing else changes the environment; it leaves the objects
alive at exit out of the interpreter's last garbage collection.

Each check runs in a fresh interpreter, so that numpy loads after the launcher has run.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from simulations._launch import BLAS_THREAD_VARIABLES

from ._fresh import fresh_json

#: Threads of this process after numpy loads (Linux: one directory per thread).
THREADS = "len(__import__('os').listdir('/proc/self/task'))"


def _run(code: str, **env: str) -> Any:
    """``code``'s JSON in a fresh interpreter without the BLAS variables, plus ``env``."""
    return fresh_json(code, unset=BLAS_THREAD_VARIABLES, **env)


LAUNCHED = f"""
import json, os
import simulations._launch as launch
launch.one_blas_thread()
import numpy
print(json.dumps({{
    "threads": {THREADS},
    "env": {{k: os.environ.get(k) for k in launch.BLAS_THREAD_VARIABLES}},
}}))
"""


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs Linux's /proc")
def test_launcher_starts_no_blas_thread() -> None:
    launched = _run(LAUNCHED)
    assert launched["env"] == dict.fromkeys(BLAS_THREAD_VARIABLES, "1")
    assert launched["threads"] == 1
    # The control: without the launcher, OpenBLAS starts a thread per core (on a machine
    # with more than one), which is what the launcher saves.
    bare = _run(f"import json, numpy; print(json.dumps({{'threads': {THREADS}}}))")
    if (os.cpu_count() or 1) > 1:
        assert bare["threads"] == os.cpu_count()


def test_launcher_keeps_a_choice_made_in_the_environment() -> None:
    """A caller who set any of the variables keeps it, and no other is set for them."""
    launched = _run(LAUNCHED, OMP_NUM_THREADS="2")
    assert launched["env"] == {
        "OPENBLAS_NUM_THREADS": None,
        "MKL_NUM_THREADS": None,
        "OMP_NUM_THREADS": "2",
    }


def test_importing_the_command_line_changes_no_variable() -> None:
    """Only the executable sets the variables: a program importing the CLI keeps its own."""
    result = _run(
        """
        import json, os
        import simulations.cli
        from simulations._launch import BLAS_THREAD_VARIABLES
        print(json.dumps({k: os.environ.get(k) for k in BLAS_THREAD_VARIABLES}))
        """
    )
    assert result == dict.fromkeys(BLAS_THREAD_VARIABLES)


def test_the_esa_script_is_the_launcher() -> None:
    (script,) = importlib.metadata.entry_points(group="console_scripts", name="esa")
    assert script.value == "simulations._launch:main"


def test_the_launcher_runs_the_command_line() -> None:
    code = "import sys, simulations._launch as launch; sys.exit(launch.main())"
    argv = ["amplify", "--epsilon-local", "1", "--n", "1000", "--json"]
    out = subprocess.run(
        [sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["command"][1:3] == ["amplify", "--epsilon-local"]


#: At exit, after the launcher's handler (registered before it, so it runs after it): the
#: objects the collector's permanent generation holds.
FROZEN_AT_EXIT = """
import atexit, gc, json, sys
atexit.register(lambda: print(json.dumps(gc.get_freeze_count())))
"""


def test_the_launcher_freezes_the_heap_at_exit_only() -> None:
    """The command runs with the collector as it was; at exit the heap is frozen."""
    code = (
        FROZEN_AT_EXIT
        + """
import simulations._launch as launch
launch.skip_exit_collection()
print(json.dumps(gc.get_freeze_count()))  # while the command runs: nothing frozen
"""
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    running, at_exit = (json.loads(line) for line in out.stdout.split())
    assert running == 0
    assert at_exit > 1_000  # every object still alive: the modules' functions, classes, ...
    # The control: without the launcher's handler, nothing is frozen at exit.
    bare = subprocess.run(
        [sys.executable, "-c", FROZEN_AT_EXIT + "import simulations._launch"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert json.loads(bare.stdout) == 0


def test_the_esa_script_skips_the_exit_collection_and_still_writes_its_output(
    tmp_path: Path,
) -> None:
    """Through the console script's entry point, a command's files and output are whole."""
    code = FROZEN_AT_EXIT + "import simulations._launch as launch; sys.exit(launch.main())"
    keys = tmp_path / "keys"
    out = subprocess.run(
        [sys.executable, "-c", code, "keygen", "--out", str(keys), "--shufflers", "2", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    *document, frozen = out.stdout.strip().splitlines()
    assert json.loads(frozen) > 10_000  # numpy's, the CLI's and the command's objects
    assert json.loads("\n".join(document))
    assert json.loads((keys / "public.json").read_text())
    private = sorted(p.name for p in keys.glob("*.key"))
    assert private == ["analyzer.key", "shuffler-1.key", "shuffler-2.key"]
    assert all((keys / name).stat().st_size > 0 for name in private)
