"""``esa amplify``: ε_l → ε_c (or ε_c → ε_l) under every amplification bound, side by side."""

from __future__ import annotations

import math
from typing import Any

from esa import json_document
from protocols import BOUNDS, AmplificationBound, BoundNotApplicable

from .._common import (
    UsageError,
    emit_json,
    invocation,
    method_label,
    print_table,
    status,
    users,
)
from .simulate import add_report_argument, check_report, write_report_option

__all__ = ["all_bounds", "amplify_table", "register"]


def all_bounds() -> list[AmplificationBound]:
    """Every registered bound (the k-RR blanket included, now fast enough to register)."""
    return list(BOUNDS.values())


def amplify_table(
    *,
    epsilon_local: float | None,
    epsilon_central: float | None,
    n: int,
    delta: float,
    domain: int,
    bound: str = "all",
) -> dict[str, Any]:
    """The JSON object ``esa amplify`` prints (one row per bound, ``null`` + reason if none).

    Each row with a value says how it relates to the exact ε of the shuffle
    (:meth:`~protocols.AmplificationBound.method_at`): ``method`` ``"exact"``,
    ``"certified"`` (a proven upper bound at most ``tolerance``, relative, above the exact
    value) or ``"bound"``; both are ``null`` where the bound gives no value.
    """
    if (epsilon_local is None) == (epsilon_central is None):
        raise UsageError("give exactly one of --epsilon-local and --epsilon-central")
    bounds = all_bounds()
    if bound != "all":
        bounds = [b for b in bounds if b.name == bound]
        if not bounds:
            names = ", ".join(b.name for b in all_bounds())
            raise UsageError(f"unknown bound {bound!r}; choose one of: all, {names}")
    forward = epsilon_local is not None
    rows: list[dict[str, Any]] = []
    for b in bounds:
        value: float | None
        reason: str | None = None
        try:
            if forward:
                assert epsilon_local is not None
                value = b.epsilon_central(epsilon_local=epsilon_local, n=n, delta=delta, k=domain)
            else:
                assert epsilon_central is not None
                value = b.epsilon_local(epsilon_central=epsilon_central, n=n, delta=delta, k=domain)
        except BoundNotApplicable as exc:
            value, reason = None, str(exc)
        method, tolerance = b.method_at(n) if value is not None else (None, None)
        rows.append(
            {
                "bound": b.name,
                "families": sorted(b.families),
                "value": value,
                "method": method,
                "tolerance": tolerance,
                "reason": reason,
                "citation": b.citation,
            }
        )
    best: dict[str, Any] = {}
    for family in ("generic", "krr"):
        ok = [
            r
            for r, b in zip(rows, bounds, strict=True)
            if r["value"] is not None and b.applies_to(family)
        ]
        if ok:
            pick = (min if forward else max)(ok, key=lambda r: r["value"])
            best[family] = {k: pick[k] for k in ("bound", "value", "method", "tolerance")}
        else:
            best[family] = None
    return {
        "direction": "epsilon_local -> epsilon_central"
        if forward
        else "epsilon_central -> epsilon_local",
        "epsilon_local": epsilon_local,
        "epsilon_central": epsilon_central,
        "n": n,
        "delta": delta,
        "domain": domain,
        "bounds": rows,
        "tightest": best,
        "note": "krr bounds hold for k-ary randomized response with k = domain; generic "
        "bounds for any epsilon_local-LDP randomizer",
    }


def register(sub: Any) -> None:
    p = sub.add_parser(
        "amplify",
        help="privacy amplification by shuffling: ε_c for ε_l (or ε_l for ε_c) per bound",
        description="Print, for every amplification bound, the central ε_c the shuffle of n "
        "ε_l-LDP reports achieves (or, with --epsilon-central, the largest ε_l for a target "
        "ε_c); null with the reason where a bound does not apply.",
    )
    p.add_argument("--epsilon-local", type=float, default=None, help="local ε_l (forward)")
    p.add_argument("--epsilon-central", type=float, default=None, help="target ε_c (inverse)")
    p.add_argument("--n", type=users, required=True, help="number of users (at most 1e10)")
    p.add_argument("--delta", type=float, default=1e-6, help="δ (default 1e-6)")
    p.add_argument("--bound", default="all", help="one bound by name, or all (default)")
    p.add_argument(
        "--domain",
        type=int,
        default=16,
        help="k of k-ary RR for the krr bounds (default 16, as in every esa command)",
    )
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    add_report_argument(p)
    p.set_defaults(handler=run)


def _fmt(v: float | None) -> str:
    if v is None:
        return "null"
    return f"{v:.6g}" if math.isfinite(v) else str(v)


def _legend(rows: list[dict[str, Any]], *, forward: bool) -> str:
    """What the method labels mean, if any row has one."""
    if not any(method_label(r["method"], r["tolerance"]) for r in rows):
        return ""
    if forward:
        return (
            "\nexact: the shuffle's exact ε_c (worst case over the other users' data); "
            "certified ≤ +x %: a proven upper bound at most x % above it; blank: a theorem's "
            "proven upper bound"
        )
    return (
        "\nexact: the largest ε_l whose exact ε_c (worst case over the other users' data) "
        "meets the target; certified ≤ +x %: an ε_l proven by an upper bound on its ε_c at "
        "most x % above the exact one; blank: the largest ε_l a theorem proves"
    )


def run(args: Any) -> int:
    if args.n < 1:
        raise UsageError(f"--n must be >= 1, got {args.n}")
    if args.domain < 2:
        raise UsageError(f"--domain must be >= 2, got {args.domain}")
    check_report(args)
    # The numerical accountants take seconds at n = 10^8, about a minute at 10^9.
    with status(True, f"computing every bound at n = {args.n:,}", name="esa amplify"):
        out = amplify_table(
            epsilon_local=args.epsilon_local,
            epsilon_central=args.epsilon_central,
            n=args.n,
            delta=args.delta,
            domain=args.domain,
            bound=args.bound,
        )
    write_report_option(args, json_document(out, invocation()))
    if args.json:
        emit_json(out)
        return 0
    col = "ε_c" if args.epsilon_local is not None else "ε_l"
    rows = [
        [
            r["bound"],
            ",".join(r["families"]),
            _fmt(r["value"]),
            r["reason"] or method_label(r["method"], r["tolerance"]),
        ]
        for r in out["bounds"]
    ]
    given = (
        f"ε_l={args.epsilon_local:g}"
        if args.epsilon_local is not None
        else f"ε_c={args.epsilon_central:g}"
    )
    best = "; ".join(
        f"{fam}: {b['bound']} ({_fmt(b['value'])}"
        + (f", {label})" if (label := method_label(b["method"], b["tolerance"])) else ")")
        if b
        else f"{fam}: none"
        for fam, b in out["tightest"].items()
    )
    print_table(
        f"amplification, {given}, n={args.n}, δ={args.delta:g}, k={args.domain}",
        ["bound", "families", col, "method, or why not"],
        rows,
        caption=f"tightest — {best}"
        + _legend(out["bounds"], forward=args.epsilon_local is not None),
    )
    return 0
