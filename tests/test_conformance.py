"""The conformance kit: ``esa vectors --out DIR`` and the example independent check."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import subprocess
import sys
from pathlib import Path

from simulations.cli import main
from simulations.conformance import VECTOR_FILES, vectors_dir

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "docs" / "examples" / "check_amplification.py"


def _export(out: Path) -> dict[str, object]:
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        assert main(["vectors", "--out", str(out), "--json"]) == 0
    doc: dict[str, object] = json.loads(buffer.getvalue())
    return doc


def test_the_kit_is_the_pinned_vectors_with_their_digests(tmp_path: Path) -> None:
    doc = _export(tmp_path / "kit")
    manifest = json.loads((tmp_path / "kit" / "MANIFEST.json").read_text())
    assert manifest["kit_version"] == 1
    assert [f["name"] for f in manifest["files"]] == [v.name for v in VECTOR_FILES]
    for entry in manifest["files"]:
        written = (tmp_path / "kit" / entry["name"]).read_bytes()
        assert hashlib.sha256(written).hexdigest() == entry["sha256"]
        # exactly the files the project's own vector tests read
        assert written == (vectors_dir() / entry["name"]).read_bytes()
    assert doc["files"] == manifest["files"]


def test_the_table_names_every_file(tmp_path: Path) -> None:
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        assert main(["vectors", "--out", str(tmp_path / "kit")]) == 0
    text = buffer.getvalue()
    for entry in VECTOR_FILES:
        assert entry.name in text


def _check(kit: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(EXAMPLE), str(kit)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_example_independent_implementation_agrees(tmp_path: Path) -> None:
    _export(tmp_path / "kit")
    done = _check(tmp_path / "kit")
    assert done.returncode == 0, done.stderr
    assert "padding: 15 cases agree" in done.stdout
    assert "values agree" in done.stdout


def test_the_example_catches_a_changed_value(tmp_path: Path) -> None:
    kit = tmp_path / "kit"
    _export(kit)
    path = kit / "accounting.json"
    doc = json.loads(path.read_text())
    for v in doc["amplification"]:
        if v["bound"] == "thm4_balle" and v["value"] is not None:
            v["value"] *= 1.001  # far beyond the kit's relative tolerance
            break
    path.write_text(json.dumps(doc))
    done = _check(kit)
    assert done.returncode == 1
    assert "amplification: mine" in done.stderr
