"""``esa report``: one self-contained HTML page for the JSON result of another command."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from .._common import emit_json

__all__ = ["register", "run"]


def register(sub: Any) -> None:
    """Add the ``report`` subcommand.

    Args:
        sub: the ``esa`` subparsers.
    """
    p = sub.add_parser(
        "report",
        help="an HTML report (one self-contained file) of a simulate/audit/amplify/"
        "experiments JSON result",
        description="Write one HTML file, viewable offline (inline CSS and SVG plots, no "
        "script), for the JSON that esa simulate --json, audit --json, amplify --json or "
        "experiments --json printed: parameters and version, the estimate against the truth, "
        "the privacy under every collusion scenario, the amplification curve, the per-hop "
        "counters and a reading of the numbers.",
    )
    p.add_argument("result", help="the JSON result file, or - for standard input")
    p.add_argument("--out", required=True, type=Path, help="the HTML file to write")
    p.add_argument(
        "--no-compute",
        action="store_true",
        help="show only what the result holds: no collusion audit of a simulated run and no "
        "amplification curve (those take up to some seconds at large n)",
    )
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Read the result, write the report, say where.

    Args:
        args: the parsed arguments.

    Returns:
        0.

    Raises:
        ReportError: the input is not a result of a known kind (the CLI prints one line).
    """
    from ..report import ReportError, detect_kind, load_result, write_report

    if args.result == "-":
        try:
            result = json.loads(sys.stdin.read())
        except json.JSONDecodeError as exc:
            raise ReportError(f"standard input: not JSON ({exc})") from None
        base = Path.cwd()
    else:
        result = load_result(args.result)
        base = Path(args.result).resolve().parent
    kind = detect_kind(result)
    write_report(result, args.out, compute=not args.no_compute, base=base)
    if args.json:
        emit_json({"kind": kind, "out": str(args.out)})
    else:
        print(f"esa report: wrote {args.out} (esa {kind} result)")
    return 0
