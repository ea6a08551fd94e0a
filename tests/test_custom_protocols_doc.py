"""docs/custom-protocols.md: its TOML file and its Python example run as written."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

DOC = Path(__file__).resolve().parent.parent / "docs" / "custom-protocols.md"


def _blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", DOC.read_text(), flags=re.S)


def test_the_toml_file_runs_from_the_command_line(tmp_path: Path) -> None:
    path = tmp_path / "my_mechanism.toml"
    path.write_text(_blocks("toml")[0])
    done = subprocess.run(
        [sys.executable, "-m", "simulations.cli", "--protocol-file", str(path), "simulate",
         "--protocol", "skewed_rr", "--domain", "4", "--n", "20000", "--crypto", "ideal",
         "--json"],
        capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["protocol"] == "skewed_rr"
    assert doc["epsilon_central"] <= 1.0  # the default request, met at n = 20000
    # seeded run: every bin within 5 stated standard deviations of the truth
    for e, t, s in zip(doc["estimate"], doc["truth"], doc["expected_std"], strict=True):
        assert abs(e - t) <= 5 * s


def test_the_python_example_runs() -> None:
    (code,) = _blocks("python")
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=180, check=False
    )
    assert done.returncode == 0, done.stderr
    first = done.stdout.splitlines()[0].split()
    eps_l, eps_c = float(first[0]), float(first[1])
    assert eps_c < eps_l
