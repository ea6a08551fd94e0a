"""``esa vectors``: export the conformance kit (known-answer vectors and their manifest)."""

from __future__ import annotations

import argparse
from typing import Any

from .._common import emit_json, print_table
from ..conformance import export


def register(sub: Any) -> None:
    p = sub.add_parser(
        "vectors",
        help="export the known-answer vectors another implementation is checked against",
        description="Write the conformance kit to a directory: the onion, padding, Split-Mix, "
        "wire-frame and accounting vectors this implementation's tests pin, and MANIFEST.json "
        "(kit format version, package version, SHA-256 of each file). The formats are described "
        "in docs/conformance.md.",
    )
    p.add_argument("--out", required=True, help="directory to write (created if needed)")
    p.add_argument("--json", action="store_true", help="print the manifest as JSON")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    manifest = export(args.out)
    if args.json:
        emit_json(manifest)
        return 0
    print_table(
        f"conformance kit v{manifest['kit_version']} of esa-shuffle {manifest['version']}",
        ["file", "holds"],
        [[f["name"], f["holds"]] for f in manifest["files"]],
    )
    print(f"written to {args.out} (MANIFEST.json lists each file's SHA-256)")
    return 0
