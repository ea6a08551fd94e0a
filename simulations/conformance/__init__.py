"""The conformance kit: the known-answer vectors another implementation is checked against.

The vectors are the ones the project's own tests pin (``tests/test_vectors.py``,
``tests/test_wire.py``, ``tests/test_accounting_vectors.py``): the bytes of onion layers,
padding, Split-Mix shares and wire frames, computed by an independent reference (other
libraries for X25519 and ChaCha20-Poly1305), and the privacy accounting of every amplification
bound and every protocol's derived parameters. :func:`export` writes them with a manifest
(``MANIFEST.json``: the kit's format version, the package version, each file's SHA-256 and
what it holds) and the guide, ``docs/conformance.md`` describes the formats, and
``docs/examples/check_amplification.py`` checks an independent plain-numpy implementation
against them.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any

__all__ = ["KIT_VERSION", "VECTOR_FILES", "VectorFile", "export", "vectors_dir"]

#: Version of the kit's layout (the manifest and the files' top-level structure). Bumped when
#: a file's structure changes; a value changing within a structure is a new package version.
KIT_VERSION = 1


@dataclass(frozen=True, slots=True)
class VectorFile:
    """One file of the kit.

    Attributes:
        name: its file name.
        holds: what it pins, in one line.
        format: where its format is described.
    """

    name: str
    holds: str
    format: str


VECTOR_FILES: tuple[VectorFile, ...] = (
    VectorFile(
        "onion.json",
        "onion layers: keys, payloads, headers and the exact report bytes per hop",
        "docs/conformance.md#onion-layers",
    ),
    VectorFile(
        "padding.json",
        "fixed-size padding: payload, size and padded bytes; malformed paddings",
        "docs/conformance.md#padding",
    ),
    VectorFile(
        "splitmix.json",
        "Split-Mix additive shares over Z_q: value, modulus, shares and their sum",
        "docs/conformance.md#split-mix",
    ),
    VectorFile(
        "wire.json",
        "network frames: keys and the exact bytes of every frame kind",
        "docs/conformance.md#wire-frames",
    ),
    VectorFile(
        "accounting.json",
        "every amplification bound forward and inverse on a grid, and every protocol's "
        "derived (epsilon, delta), bound, messages per user and message size",
        "docs/conformance.md#accounting",
    ),
)


def vectors_dir() -> Path:
    """Where the installed package keeps the vectors."""
    return Path(__file__).resolve().parent / "vectors"


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def export(out: str | Path) -> dict[str, Any]:
    """Write the kit to ``out`` (created if needed): the vector files and ``MANIFEST.json``.

    Args:
        out: the directory; files of the same names in it are replaced.

    Returns:
        The manifest written.

    Raises:
        FileNotFoundError: the installed package has lost a vector file.
        OSError: ``out`` cannot be created or written.
    """
    target = Path(out)
    target.mkdir(parents=True, exist_ok=True)
    files = []
    for entry in VECTOR_FILES:
        source = vectors_dir() / entry.name
        shutil.copyfile(source, target / entry.name)
        files.append(
            {
                "name": entry.name,
                "sha256": _sha256(target / entry.name),
                "holds": entry.holds,
                "format": entry.format,
            }
        )
    manifest = {
        "kit_version": KIT_VERSION,
        "package": "esa-shuffle",
        "version": version("esa-shuffle"),
        "files": files,
    }
    (target / "MANIFEST.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest
