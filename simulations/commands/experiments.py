"""``esa experiments``: survey §5 sweeps (RMSE, analyzer time, messages per user) with plots."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from esa import json_document

from .. import experiments
from .._common import (
    UsageError,
    WeakerThanRequested,
    emit_json,
    invocation,
    print_table,
    progress,
    seed,
    task_workers,
)
from ..experiments.csv import meta_path, write_meta
from ..experiments.plan import CATEGORIES, ExperimentResult, analyzer_time, default_rows
from .simulate import add_report_argument, check_report, write_report_option

#: options that choose what a run does; a rebuild runs nothing, so it refuses them
_RUN_ONLY = ("seed", "repeats", "crypto", "protocols", "workers", "cluster")


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
    p.add_argument(
        "--allow-weaker",
        action="store_true",
        help="exit 0 even if grid points prove a larger ε_c than their ε (the CSV's "
        "epsilon_central against epsilon; the output lists them in weaker_than_requested); "
        "without it such a run writes everything, then exits 1",
    )
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    p.add_argument(
        "--workers",
        type=int,
        default=None,
        metavar="N",
        help="run the grid's (point, method) tasks and draw its plots on N local "
        "processes (default: every core; with --crypto onion, one task after the other, each "
        "run's crypto on every core); the CSV is the same for the same --seed",
    )
    p.add_argument(
        "--cluster",
        default=None,
        metavar="ADDRESS",
        help="run the tasks on the Dask cluster whose scheduler is at ADDRESS "
        "(tcp://host:8786; needs the cluster extra, docs/cluster.md)",
    )
    add_report_argument(p)
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    if args.from_csv is not None:
        given = [f"--{name}" for name in _RUN_ONLY if getattr(args, name) is not None]
        if given:
            raise UsageError(
                f"--from-csv runs nothing: {', '.join(given)} cannot be combined with it "
                "(the CSV's rows fix them)"
            )
    if args.workers is not None and args.workers < 1:
        raise UsageError(f"--workers must be >= 1, got {args.workers}")
    if args.repeats is not None and args.repeats < 1:
        raise UsageError(f"--repeats must be >= 1, got {args.repeats}")
    if args.out.exists() and not args.out.is_dir():
        raise UsageError(f"--out {str(args.out)!r} exists and is not a directory")
    try:  # before the run, not after minutes of it
        args.out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"--out {str(args.out)!r}: {exc.strerror or exc}") from None
    check_report(args)  # after --out is made: the report may go into it
    if args.from_csv is not None:
        result = experiments.rebuild_experiments(
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

    root_seed = args.seed if args.seed is not None else 0
    with progress(True, name="esa experiments", unit="points") as bar:
        result = experiments.run_experiments(
            args.category,
            out_dir=args.out,
            quick=args.quick,
            crypto=args.crypto if args.crypto is not None else "ideal",
            seed=root_seed,
            repeats=args.repeats,
            only=only,
            progress=bar,
            log=log,
            workers=task_workers(args.workers, args.cluster, in_process=args.crypto == "onion"),
            cluster=args.cluster,
        )
    body = result.to_json()
    write_meta(
        result.csv_path,
        invocation(seed=root_seed),
        {k: body[k] for k in ("category", "quick", "crypto", "protocols", "repeats", "rows")},
    )
    return _report(args, result, seed=root_seed)


def weaker_points(result: ExperimentResult) -> list[dict[str, Any]]:
    """The grid points that ran and prove a larger ε_c than their requested ε (the CSV's
    ``epsilon_central`` above ``epsilon``, beyond a relative 1e-9 of rounding), one object
    each: method, sweep, value, epsilon, epsilon_central."""
    return [
        {
            "method": r.method,
            "sweep": r.sweep,
            "value": r.value,
            "epsilon": r.epsilon,
            "epsilon_central": r.epsilon_central,
        }
        for r in result.rows
        if r.status == "ok" and r.epsilon_central > r.epsilon * (1.0 + 1e-9)
    ]


def _report(args: argparse.Namespace, result: ExperimentResult, seed: int | None = None) -> int:
    """The JSON object or the default-point table of a run or a rebuild (``seed``: the root
    seed a run used; a rebuild runs nothing; a run's CSV has the sidecar ``meta``); with
    ``--report``, the HTML report of that JSON object too.

    Returns 0; exits 1 (:class:`WeakerThanRequested`, after writing and printing everything)
    where a grid point proves a weaker ε than requested and ``--allow-weaker`` is not given.
    """
    weaker = weaker_points(result)
    allow = bool(getattr(args, "allow_weaker", False))
    body = {
        **result.to_json(),
        "meta": str(meta_path(result.csv_path)),
        "weaker_than_requested": weaker,
        "allow_weaker": allow,
    }
    write_report_option(args, json_document(body, invocation(seed=seed)))
    if args.json:
        emit_json(body, seed=seed)
        return _weaker_exit(weaker, allow)
    source = (
        f"rows read from {result.csv_path} (nothing run)"
        if result.from_csv
        else f"CSV {result.csv_path}"
    )
    timed, unit = analyzer_time(result.rows)
    print_table(
        f"{args.category} at the default point",
        ["method", "family", "RMSE", f"analyzer {unit}", "messages/user"],
        [
            [r.method, r.family, r.rmse, getattr(r, timed), r.messages_per_user]
            if r.status == "ok"
            else [r.method, r.family, "skipped", "", ""]
            for r in default_rows(result.rows, result.plan)
        ],
        caption=f"{source}; summary {result.summary_path}; "
        f"{len(result.plots)} plots; {result.seconds:.1f} s",
    )
    if weaker and allow:
        print(
            f"esa experiments: {len(weaker)} grid points prove a WEAKER ε_c than requested "
            "(accepted by --allow-weaker; the CSV's epsilon_central column has each)"
        )
    return _weaker_exit(weaker, allow)


def _weaker_exit(weaker: list[dict[str, Any]], allow: bool) -> int:
    """0, or :class:`WeakerThanRequested` (one line, exit 1) naming the first weaker point."""
    if not weaker or allow:
        return 0
    first = weaker[0]
    methods = sorted({w["method"] for w in weaker})
    raise WeakerThanRequested(
        f"{len(weaker)} grid points prove a larger ε_c than requested "
        f"({', '.join(methods)}; e.g. {first['method']} at {first['sweep']}={first['value']:g} "
        f"proves ε_c = {first['epsilon_central']:.4g}, not {first['epsilon']:g}); the CSV's "
        "epsilon_central column has each; --allow-weaker accepts them (exit 0)"
    )
