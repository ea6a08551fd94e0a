"""``esa audit-ldp``: measure the ε a local randomizer really satisfies.

Discrete randomizers get their exact output law on a small domain; continuous ones a density
ratio on a grid plus a support check (see :mod:`protocols._ldp_audit`). ``--mechanism all``
audits every mechanism. The exit code is 0 whenever the audit ran, whatever its verdict
(``holds`` says it); bad names or parameters print one line and exit 2.
"""

from __future__ import annotations

import argparse
import math
from typing import Any

from protocols import AUDITABLE, ParameterError, audit_mechanism

from .._common import emit_json, print_table


def register(sub: Any) -> None:
    p = sub.add_parser(
        "audit-ldp",
        help="measure the true epsilon of a local randomizer (exact or on a grid)",
        description="Largest log likelihood ratio of the mechanism's outputs over every pair "
        "of inputs: exact for discrete randomizers on a small domain, a density-ratio grid "
        "plus a support check for continuous ones. Mechanisms: "
        + ", ".join(AUDITABLE)
        + ", or 'all'.",
    )
    p.add_argument("--mechanism", required=True, metavar="NAME", help="mechanism name or 'all'")
    p.add_argument("--epsilon", required=True, type=float, help="claimed epsilon (> 0)")
    p.add_argument(
        "--domain",
        type=int,
        default=None,
        help="input domain size for frequency oracles (default 8; SHE 3)",
    )
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    name = str(args.mechanism).lower()
    if not math.isfinite(args.epsilon) or args.epsilon <= 0:
        raise ParameterError(f"--epsilon must be a finite number > 0, got {args.epsilon!r}")
    if args.domain is not None and args.domain < 2:
        raise ParameterError(f"--domain must be an integer >= 2, got {args.domain!r}")
    if name == "all":
        results = []
        for mech in AUDITABLE:
            on_unit = mech in {"duchi", "pm", "harmony", "laplace", "dct"}
            dom = None if on_unit else args.domain
            if mech == "she" and dom is not None:
                dom = min(dom, 3)
            results.append(audit_mechanism(mech, args.epsilon, dom))
    else:
        results = [audit_mechanism(name, args.epsilon, args.domain)]
    if args.json:
        if len(results) == 1:
            emit_json(results[0].to_dict())
        else:
            emit_json({"results": [r.to_dict() for r in results]})
        return 0
    print_table(
        f"LDP audit at epsilon = {args.epsilon:g}",
        ["mechanism", "domain", "epsilon_claimed", "epsilon_measured", "holds", "method"],
        [
            (
                r.mechanism,
                "[-1, 1]" if r.domain is None else r.domain,
                r.epsilon_claimed,
                r.epsilon_measured,
                "yes" if r.holds else "NO",
                r.method,
            )
            for r in results
        ],
        caption="\n".join(f"{r.mechanism}: {r.note}" for r in results if not r.holds) or None,
    )
    return 0
