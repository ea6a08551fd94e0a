"""``esa compose``: the ε one user keeps after T epochs of one or several metrics.

Each metric is a protocol configured as ``esa simulate`` configures it (target ε_c per
epoch, δ, n, domain, options), run for some epochs. Its one-epoch privacy profile (a
dominating pair where the protocol has one, else its (ε_c, δ) point; see
:func:`protocols.accounting.protocol_profile`) is composed over every epoch of every metric
with the privacy loss distribution; naive (Σε) and advanced composition are printed beside
it for comparison.

Metrics: ``--protocol NAME --epsilon E --epochs T`` for one, or ``--metric NAME:E:T``
repeated for several (the other flags are shared). ``--budget TOTAL`` instead finds the
largest per-epoch ε_c (the same for every metric; ``--metric NAME:T``) whose composition
stays within TOTAL. ``--arrived-fraction F`` states the guarantee when only a fraction F of
the n users arrive in each epoch.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
from typing import Any

from protocols import ProtocolSpec, build_protocol, protocol_names
from protocols.accounting import (
    ComposedGuarantee,
    PrivacyProfile,
    compose_protocols,
    fit_budget,
    protocol_profile,
)

from .._common import UsageError, emit_json, parse_options, print_table, users
from .._common import domain as domain_size

__all__ = ["register"]

#: Smallest per-epoch ε_c ``--budget`` searches.
BUDGET_LOWER = 0.01


def register(sub: Any) -> None:
    p = sub.add_parser(
        "compose",
        help="ε after T epochs of one or several metrics (PLD composition)",
        description="Compose the per-epoch privacy of one or several protocols over their "
        "epochs: ε_total at the total δ by privacy loss distributions, with naive (Tε) and "
        "advanced composition for comparison; or, with --budget, the per-epoch ε_c that "
        "fits a total budget.",
    )
    p.add_argument("--protocol", help="protocol name of the one metric (see `esa protocols`)")
    p.add_argument("--epsilon", type=float, help="target central ε_c per epoch (one metric)")
    p.add_argument("--epochs", type=int, help="epochs T of the one metric")
    p.add_argument(
        "--metric",
        action="append",
        default=[],
        metavar="NAME:EPS:EPOCHS",
        help="one metric per user (repeatable): protocol, per-epoch ε_c, epochs; "
        "NAME:EPOCHS with --budget",
    )
    p.add_argument("--delta", type=float, default=1e-6, help="δ of each epoch (default 1e-6)")
    p.add_argument(
        "--total-delta",
        type=float,
        default=None,
        help="δ of the composition (default 2·T·δ, at most 0.5)",
    )
    p.add_argument("--n", type=users, required=True, help="users per epoch (at most 1e10)")
    p.add_argument("--domain", type=domain_size, default=2, help="domain size d (default 2)")
    p.add_argument(
        "--fake-reports", type=int, default=0, help="total fakes the shufflers add (default 0)"
    )
    p.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="protocol-specific parameter (repeatable), given to every metric",
    )
    p.add_argument(
        "--budget", type=float, default=None, help="total ε: find the per-epoch ε_c that fits"
    )
    p.add_argument(
        "--arrived-fraction",
        type=float,
        default=1.0,
        help="fraction of the n users that arrive in each epoch (default 1)",
    )
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    p.set_defaults(handler=run)


@dataclasses.dataclass(frozen=True, slots=True)
class _Metric:
    protocol: str
    epsilon: float | None
    epochs: int


def _number(text: str, what: str, item: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise UsageError(f"--metric {item!r}: {what} {text!r} is not a number") from None
    return value


def _epochs(value: float | int, where: str) -> int:
    if not (isinstance(value, int) or float(value).is_integer()) or value < 1:
        raise UsageError(f"{where}: epochs must be an integer >= 1, got {value!r}")
    return int(value)


def _metrics(args: argparse.Namespace) -> list[_Metric]:
    budget = args.budget is not None
    out: list[_Metric] = []
    if args.protocol is not None or args.epochs is not None or args.epsilon is not None:
        if args.metric:
            raise UsageError("give --protocol/--epsilon/--epochs or --metric, not both")
        if args.protocol is None or args.epochs is None:
            raise UsageError("--protocol and --epochs are both needed")
        if budget and args.epsilon is not None:
            raise UsageError("--budget finds the per-epoch ε_c: drop --epsilon")
        if not budget and args.epsilon is None:
            raise UsageError("--epsilon is needed (or --budget)")
        out.append(_Metric(args.protocol, args.epsilon, _epochs(args.epochs, "--epochs")))
    for item in args.metric:
        parts = item.split(":")
        if budget and len(parts) == 2:
            out.append(_Metric(parts[0], None, _epochs(_number(parts[1], "epochs", item), item)))
        elif not budget and len(parts) == 3:
            eps = _number(parts[1], "ε", item)
            out.append(_Metric(parts[0], eps, _epochs(_number(parts[2], "epochs", item), item)))
        else:
            form = "NAME:EPOCHS (with --budget)" if budget else "NAME:EPS:EPOCHS"
            raise UsageError(f"--metric expects {form}, got {item!r}")
    if not out:
        raise UsageError("no metric: give --protocol NAME --epsilon E --epochs T, or --metric")
    for m in out:
        if m.protocol not in protocol_names():
            raise UsageError(
                f"unknown protocol {m.protocol!r}; choose one of: {', '.join(protocol_names())}"
            )
    return out


def _guarantee_json(g: ComposedGuarantee) -> dict[str, Any]:
    return {
        "epsilon_total": g.epsilon_total,
        "delta_total": g.delta,
        "epochs": g.epochs,
        "method": g.method,
        "epsilon_naive": g.epsilon_naive,
        "epsilon_advanced": g.epsilon_advanced,
        "epsilon_rdp": g.epsilon_rdp,
        "discretization_interval": g.discretization_interval,
    }


def compose_command(args: argparse.Namespace) -> dict[str, Any]:
    """What ``esa compose`` prints as JSON (see the module docstring)."""
    metrics = _metrics(args)
    if args.fake_reports < 0:
        raise UsageError(f"--fake-reports must be >= 0, got {args.fake_reports}")
    if not 0.0 < args.arrived_fraction <= 1.0:
        raise UsageError(f"--arrived-fraction must lie in (0, 1], got {args.arrived_fraction!r}")
    total_epochs = sum(m.epochs for m in metrics)
    total_delta = (
        args.total_delta
        if args.total_delta is not None
        else min(0.5, 2.0 * total_epochs * args.delta)
    )
    options = parse_options(args.option)

    def spec(eps: float) -> ProtocolSpec:
        return ProtocolSpec(
            epsilon=eps,
            delta=args.delta,
            n=args.n,
            domain=args.domain,
            fake_reports=args.fake_reports,
            options=options,
        )

    out: dict[str, Any] = {
        "n": args.n,
        "domain": args.domain,
        "delta_epoch": args.delta,
        "arrived_fraction": args.arrived_fraction,
        "arrived_users": max(1, math.floor(args.arrived_fraction * args.n + 1e-9)),
    }
    if args.budget is not None:

        def make(eps: float) -> list[tuple[PrivacyProfile, int]]:
            return [
                (
                    protocol_profile(
                        build_protocol(m.protocol, spec(eps)),
                        arrived_fraction=args.arrived_fraction,
                    ),
                    m.epochs,
                )
                for m in metrics
            ]

        eps_c, got = fit_budget(
            make, args.budget, total_delta, lower=BUDGET_LOWER, upper=float(args.budget)
        )
        out.update(
            budget=args.budget,
            epsilon_per_epoch=eps_c,
            metrics=[{"protocol": m.protocol, "epochs": m.epochs} for m in metrics],
            **_guarantee_json(got),
        )
        return out
    built = [(build_protocol(m.protocol, spec(float(m.epsilon or 0.0))), m.epochs) for m in metrics]
    res = compose_protocols(built, delta=total_delta, arrived_fraction=args.arrived_fraction)
    out.update(
        metrics=[
            {
                "protocol": mp.protocol,
                "epsilon": m.epsilon,
                "epochs": mp.epochs,
                "profile": mp.kind,
                "profile_source": mp.description,
                "epsilon_epoch": mp.epsilon_epoch,
            }
            for m, mp in zip(metrics, res.metrics, strict=True)
        ],
        **_guarantee_json(res.guarantee),
    )
    return out


def _fmt(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v:.4g}" if math.isfinite(v) else "inf"


def run(args: argparse.Namespace) -> int:
    out = compose_command(args)
    if args.json:
        emit_json(out)
        return 0
    rows: list[list[str]] = []
    if "budget" in out:
        title = (
            f"budget ε = {out['budget']:g} over {out['epochs']} epochs, δ = {out['delta_total']:g}"
        )
        rows.append(["per-epoch ε_c that fits", _fmt(out["epsilon_per_epoch"])])
    else:
        title = f"{out['epochs']} epochs composed, δ = {out['delta_total']:g}"
        for m in out["metrics"]:
            rows.append(
                [
                    f"{m['protocol']} × {m['epochs']} ({m['profile']})",
                    _fmt(m["epsilon_epoch"]) + " / epoch",
                ]
            )
    rows += [
        [f"ε_total ({out['method']})", _fmt(out["epsilon_total"])],
        ["naive (Σε)", _fmt(out["epsilon_naive"])],
        ["advanced composition", _fmt(out["epsilon_advanced"])],
        ["Rényi DP", _fmt(out["epsilon_rdp"])],
    ]
    caption = None
    if "metrics" in out and out["metrics"] and "profile_source" in out["metrics"][0]:
        caption = "\n".join(f"{m['profile_source']}" for m in out["metrics"])
    if out["arrived_fraction"] < 1.0:
        extra = f"{out['arrived_users']} of {out['n']} users arrive in each epoch"
        caption = f"{caption}\n{extra}" if caption else extra
    print_table(title, ["", "ε"], rows, caption=caption)
    return 0
