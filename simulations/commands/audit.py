"""``esa audit``: the ε a user keeps under every collusion scenario: proven upper bounds,
and lower bounds at the same δ (the protocol's own exact ones, or measured with --measure).

The audit itself is :func:`simulations._audit.audit` (imported when the command runs: it
needs the attacks' statistics, which ``esa --help`` does not)."""

from __future__ import annotations

import math
import sys
from typing import Any

from esa import json_document

from .._common import (
    UsageError,
    certified_footnote,
    emit_json,
    invocation,
    parse_options,
    print_table,
    progress,
    seed,
    starred_bound,
    status,
    task_workers,
    users,
)
from .simulate import add_report_argument, check_report, write_report_option

__all__ = ["register"]


def register(sub: Any) -> None:
    p = sub.add_parser(
        "audit",
        help="ε per collusion scenario: proven upper bounds and lower bounds at the same δ",
        description="For a protocol configuration, report for each collusion scenario "
        "(none; all shufflers; m-1 shufflers; k users; combinations) the proven ε upper "
        "bound with its accountant, what still protects the user, the protocol's own ε "
        "lower bound at the same δ where it has one, and with --measure an ε lower bound "
        "from a distinguishing attack on real pipeline runs (--crypto ideal).",
    )
    p.add_argument("--protocol", required=True, help="protocol name (see `esa protocols`)")
    p.add_argument("--n", type=users, required=True, help="number of users (at most 1e10)")
    p.add_argument("--epsilon", type=float, required=True, help="target central ε_c")
    p.add_argument("--delta", type=float, default=1e-6, help="δ (default 1e-6)")
    p.add_argument(
        "--domain",
        type=int,
        default=16,
        help="domain size d (default 16, as in every esa command; counting protocols take 2)",
    )
    p.add_argument("--shufflers", type=int, default=3, help="shufflers m (default 3)")
    p.add_argument(
        "--fake-reports", type=int, default=0, help="fakes each shuffler adds (default 0)"
    )
    p.add_argument(
        "--colluding-users",
        type=float,
        default=0,
        help="colluding users: a count K >= 1 or a fraction in [0, 1) of the others",
    )
    p.add_argument(
        "--colluding-shufflers", type=int, default=0, help="colluding shufflers C (default 0)"
    )
    p.add_argument("--measure", action="store_true", help="run the distinguishing attacks")
    p.add_argument(
        "--trials", type=int, default=None, help="runs per hypothesis (--measure; default 1000)"
    )
    p.add_argument("--seed", type=seed, default=0, help="seed of the attack runs")
    p.add_argument(
        "--confidence",
        type=float,
        default=None,
        help="probability that every measured lower bound holds, jointly over the scenarios "
        "(--measure; default 0.95)",
    )
    p.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="protocol-specific parameter (repeatable), as for esa simulate, e.g. "
        "--option counter=cnt_pure (put)",
    )
    p.add_argument(
        "--epochs",
        type=int,
        default=None,
        help="also each scenario's ε after T epochs (composed, at δ_total = 2·T·δ)",
    )
    p.add_argument(
        "--workers",
        type=int,
        default=None,
        metavar="N",
        help="run --measure's trials on N local processes (default: every core); the "
        "result is the same for the same --seed",
    )
    p.add_argument(
        "--cluster",
        default=None,
        metavar="ADDRESS",
        help="run --measure's trials on the Dask cluster whose scheduler is at ADDRESS "
        "(tcp://host:8786; needs the cluster extra, docs/cluster.md)",
    )
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    add_report_argument(p)
    p.set_defaults(handler=run)


def _fmt(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v:.4g}" if math.isfinite(v) else "inf"


def run(args: Any) -> int:
    if args.shufflers < 1:
        raise UsageError(f"--shufflers must be >= 1, got {args.shufflers}")
    if args.fake_reports < 0:
        raise UsageError(f"--fake-reports must be >= 0, got {args.fake_reports}")
    if args.trials is not None and not args.measure:
        raise UsageError("--trials sets the runs of --measure; add --measure")
    if args.trials is None:
        args.trials = 1000
    if args.confidence is not None and not args.measure:
        raise UsageError("--confidence is that of --measure's bounds; add --measure")
    if args.confidence is None:
        args.confidence = 0.95
    if not 0.0 < args.confidence < 1.0:  # false for nan
        raise UsageError(f"--confidence must lie in (0, 1), got {args.confidence!r}")
    if args.trials < 30:
        raise UsageError(f"--trials must be >= 30, got {args.trials}")
    if (args.workers is not None or args.cluster is not None) and not args.measure:
        raise UsageError("--workers and --cluster run --measure's trials; add --measure")
    if args.workers is not None and args.workers < 1:
        raise UsageError(f"--workers must be >= 1, got {args.workers}")
    if args.epochs is not None and args.epochs < 1:
        raise UsageError(f"--epochs must be >= 1, got {args.epochs}")
    check_report(args)
    from .._audit import audit  # the attacks' statistics load with it (scipy)

    with (
        progress(args.measure, name="esa audit", unit="attacks") as bar,
        status(
            not args.measure,
            f"deriving {args.protocol}'s parameters and each scenario's bounds",
            name="esa audit",
        ),
    ):
        task = bar.add_task("attacks", total=None)

        def step(name: str, total: int) -> None:
            # Duplicate scenarios are dropped, so only audit() knows how many attacks run.
            bar.update(task, total=total, description=f"attack: {name}")
            bar.advance(task)

        out = audit(
            protocol_name=args.protocol,
            n=args.n,
            epsilon=args.epsilon,
            delta=args.delta,
            domain=args.domain,
            shufflers=args.shufflers,
            fake_reports=args.fake_reports,
            colluding_users=args.colluding_users,
            colluding_shufflers=args.colluding_shufflers,
            measure=args.measure,
            trials=args.trials,
            seed=args.seed,
            on_scenario=step,
            options=parse_options(args.option),
            confidence=args.confidence,
            epochs=args.epochs,
            workers=task_workers(args.workers, args.cluster),  # used by --measure only
            cluster=args.cluster,
        )
    if args.json:
        emit_json(out)
    else:
        rows = [
            [
                r["scenario"],
                _fmt(r["epsilon_upper"]),
                starred_bound(r["bound"], r["bound_method"]),
                _fmt(r["epsilon_lower"]),
                _fmt(r["murs_formula"]),
                *([_fmt(r["epsilon_upper_epochs"])] if args.epochs is not None else []),
                r["explanation"],
            ]
            for r in out["scenarios"]
        ]
        claim = out["protocol_claim"]
        caption = (
            f"ε_l={_fmt(out['epsilon_local'])} ({out['family']}, k={out['k']}); protocol's own "
            f"claim ε_c={_fmt(claim['epsilon_central'])} by "
            f"{starred_bound(claim['bound'], claim['bound_method'])}"
        )
        certified = [r for r in [claim, *out["scenarios"]] if r["bound_method"] == "certified"]
        if certified:
            caption += "\n" + certified_footnote(certified[0]["bound_tolerance"])
        if out["note"]:
            caption += f"\n{out['note']}"
        caption += "\nε lower: the protocol's own exact lower bound at δ where it has one" + (
            f"; or measured ({out['trials']} runs per dataset), whichever is larger: the "
            f"measured ones hold with {100 * out['confidence']:g}% confidence jointly over the "
            "scenarios (Clopper–Pearson, Bonferroni)"
            if out["measured"]
            else ""
        )
        if out["measure_note"]:
            caption += f"\n{out['measure_note']}"
        print_table(
            f"collusion audit: {args.protocol}, n={args.n}, δ={args.delta:g}, "
            f"m={args.shufflers}, n_r={args.fake_reports}/shuffler",
            [
                "scenario",
                "ε upper",
                "bound",
                "ε lower",
                "MURS formula",
                *([f"ε after {args.epochs}"] if args.epochs is not None else []),
                "what protects the user",
            ],
            rows,
            caption=caption,
        )
    if out["privacy_warning"]:
        print(f"warning: {out['privacy_warning']}", file=sys.stderr)
    write_report_option(args, json_document(out, invocation()))
    if out["violations"]:
        kind = (
            f"lower bound (exact, or measured at {100 * out['confidence']:g}% joint confidence)"
            if out["measured"]
            else "lower bound"
        )
        print(
            f"esa audit: BUG: {kind} above the proven upper bound at δ={out['delta']:g} in: "
            + ", ".join(out["violations"]),
            file=sys.stderr,
        )
        return 1
    return 0
