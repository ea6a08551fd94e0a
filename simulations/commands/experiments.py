"""``esa experiments``: survey §5 sweeps (RMSE, analyzer time, messages per user) with plots."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from .._common import UsageError, emit_json, print_table, progress, seed
from ..experiments import (
    CATEGORIES,
    ExperimentResult,
    default_rows,
    rebuild_experiments,
    run_experiments,
)

#: options that choose what a run does; a rebuild runs nothing, so it refuses them
_RUN_ONLY = ("seed", "repeats", "crypto", "protocols")


def register(sub: Any) -> None:
    p = sub.add_parser(
        "experiments",
        help="reproduce the survey's §5 comparisons (CSV, PNG plots, Markdown summary)",
        description="Run every registered protocol of a category over the survey's grid "
        "(ε_c, n, d, data skew) through the pipeline, against an LDP and a central-DP "
        "baseline; write <category>.csv, PNG plots and <category>_summary.md into --out. "
        "With --from-csv, run nothing: write the plots and the summary again from the CSV "
        "of an earlier run.",
    )
    p.add_argument("category", choices=CATEGORIES, help="which problem of survey §5")
    p.add_argument("--out", required=True, type=Path, help="output directory (created)")
    p.add_argument(
        "--quick", action="store_true", help="scaled-down grid that runs in a few minutes"
    )
    p.add_argument(
        "--from-csv",
        type=Path,
        default=None,
        metavar="CSV",
        help="run nothing: rebuild the plots and summary in --out from the <category>.csv "
        "of an earlier run (the CSV is not rewritten); give --quick if that run had it; "
        "refuses --crypto, --seed, --repeats, --protocols, which the CSV's rows fix",
    )
    # --crypto and --seed default to None so that a rebuild can tell them given; run()
    # applies the defaults stated here.
    p.add_argument(
        "--crypto",
        choices=["ideal", "onion"],
        default=None,
        help="pipeline codec for the shuffle protocols (default ideal; onion is slow)",
    )
    p.add_argument("--seed", type=seed, default=None, help="root seed (default 0)")
    p.add_argument("--repeats", type=int, default=None, help="runs per grid point")
    p.add_argument(
        "--protocols",
        default=None,
        help="comma-separated subset of the category's protocols (default: all registered)",
    )
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    if args.from_csv is not None:
        given = [f"--{name}" for name in _RUN_ONLY if getattr(args, name) is not None]
        if given:
            raise UsageError(
                f"--from-csv runs nothing: {', '.join(given)} cannot be combined with it "
                "(the CSV's rows fix them)"
            )
    if args.repeats is not None and args.repeats < 1:
        raise UsageError(f"--repeats must be >= 1, got {args.repeats}")
    if args.out.exists() and not args.out.is_dir():
        raise UsageError(f"--out {str(args.out)!r} exists and is not a directory")
    try:  # before the run, not after minutes of it
        args.out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"--out {str(args.out)!r}: {exc.strerror or exc}") from None
    if args.from_csv is not None:
        result = rebuild_experiments(
            args.category, csv_path=args.from_csv, out_dir=args.out, quick=args.quick
        )
        return _report(args, result)
    only = None
    if args.protocols is not None:
        only = [s.strip() for s in args.protocols.split(",") if s.strip()]
        if not only:
            raise UsageError("--protocols is empty")

    def log(line: str) -> None:
        if not args.json:
            print(f"esa experiments: {line}", file=sys.stderr)

    with progress(not args.json) as bar:
        result = run_experiments(
            args.category,
            out_dir=args.out,
            quick=args.quick,
            crypto=args.crypto if args.crypto is not None else "ideal",
            seed=args.seed if args.seed is not None else 0,
            repeats=args.repeats,
            only=only,
            progress=bar,
            log=log,
        )
    return _report(args, result)


def _report(args: argparse.Namespace, result: ExperimentResult) -> int:
    """The JSON object or the default-point table of a run or a rebuild."""
    if args.json:
        emit_json(result.to_json())
        return 0
    source = (
        f"rows read from {result.csv_path} (nothing run)"
        if result.from_csv
        else f"CSV {result.csv_path}"
    )
    print_table(
        f"{args.category} at the default point",
        ["method", "family", "RMSE", "analyzer s", "messages/user"],
        [
            [r.method, r.family, r.rmse, r.analyzer_seconds, r.messages_per_user]
            if r.status == "ok"
            else [r.method, r.family, "skipped", "", ""]
            for r in default_rows(result.rows, result.plan)
        ],
        caption=f"{source}; summary {result.summary_path}; "
        f"{len(result.plots)} plots; {result.seconds:.1f} s",
    )
    return 0
