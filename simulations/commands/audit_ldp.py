"""``esa audit-ldp``: measure the ε a local randomizer really satisfies.

Discrete randomizers get their exact output law on a small domain; continuous ones a density
ratio on a grid plus a support check (see :func:`protocols.audit_mechanism`). The exit code
is 0 when every audited mechanism is ε-LDP (``holds``), 1 when one is not (the output says
which, and one line on stderr names them); bad names or parameters print one line and exit
2. So does an ε outside the mechanism's auditable range (where
double precision, or the memory an exact law needs, could not back the verdict): the line
states the range and why.

``--mechanism all`` audits every mechanism; one that cannot be audited at these parameters
(ε outside its range, ``--domain`` above its limit) is listed as skipped with the reason —
a table row marked "skipped" and a caption line, or an entry of the JSON ``skipped`` list
(``mechanism``, ``domain``, ``reason``) next to ``results`` — while the others are audited.
Only when none can be audited is it an error (exit 2).
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass
from typing import Any

import protocols
from protocols import ParameterError

from .._common import emit_json, print_table

#: ``--domain`` by default: 16, as in every esa command, where the mechanism's exact audit
#: allows it; :data:`DOMAIN_LIMITS` lists the mechanisms that cannot (their default is their
#: limit).
DEFAULT_DOMAIN = 16

#: The largest domain each mechanism's audit takes, where it is below :data:`DEFAULT_DOMAIN`:
#: unary encodings (an exact law of 2^d outputs) and SHE (a grid over R^d).
DOMAIN_LIMITS: dict[str, int] = {"the": 12, "sue": 12, "oue": 12, "she": 3}


def default_domain(mechanism: str) -> int | None:
    """``--domain`` when not given: None for mean mechanisms (on [-1, 1]), else
    :data:`DEFAULT_DOMAIN` capped at the mechanism's :data:`DOMAIN_LIMITS`."""
    if mechanism in protocols.MEAN_MECHANISMS:
        return None
    return min(DEFAULT_DOMAIN, DOMAIN_LIMITS.get(mechanism, DEFAULT_DOMAIN))


def _ranges() -> str:
    """The auditable ε ranges in words, from :func:`protocols.epsilon_range` itself."""
    lo, cap, _ = protocols.epsilon_range("krr")
    tighter: dict[float, list[str]] = {}
    for mech in protocols.AUDITABLE:
        hi = protocols.epsilon_range(mech, default_domain(mech))[1]
        if hi < cap:
            tighter.setdefault(hi, []).append(mech)
    but = ", ".join(
        f"{hi:g} for {' and '.join(names)}"
        + (f" at domain {DEFAULT_DOMAIN}" if "olh" in names else "")
        for hi, names in tighter.items()
    )
    return f"from {lo:g} up to {cap:g}, but {but}"


def _description() -> str:
    """The command's description; computed when its help is printed (it audits the ranges)."""
    return (
        "Largest log likelihood ratio of the mechanism's outputs over every pair "
        "of inputs: exact for discrete randomizers on a small domain, a density-ratio grid "
        "plus a support check for continuous ones. Each mechanism has an auditable epsilon "
        f"range, where double precision and memory back the verdict: {_ranges()}; outside "
        "it the command says why. Mechanisms: "
        + ", ".join(protocols.AUDITABLE)
        + ", or 'all' (which lists the mechanisms it cannot audit as skipped)."
    )


def register(sub: Any) -> None:
    p = sub.add_parser(
        "audit-ldp",
        help="measure the true epsilon of a local randomizer (exact or on a grid)",
        description=_description,  # a callable: the CLI's parser calls it for --help only
    )
    p.add_argument("--mechanism", required=True, metavar="NAME", help="mechanism name or 'all'")
    p.add_argument("--epsilon", required=True, type=float, help="claimed epsilon (> 0)")
    p.add_argument(
        "--domain",
        type=int,
        default=None,
        help=f"input domain size for frequency oracles (default {DEFAULT_DOMAIN}, as in every "
        "esa command, except where the mechanism's audit cannot take it: "
        + ", ".join(f"{m.upper()} {d}" for m, d in DOMAIN_LIMITS.items())
        + " (unary encodings need an exact law of 2^d outputs, SHE a grid over R^d))",
    )
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    p.set_defaults(handler=run)


@dataclass(frozen=True, slots=True)
class _Skipped:
    """A mechanism ``--mechanism all`` could not audit at these parameters, and why."""

    domain: int | None
    reason: str


def run(args: argparse.Namespace) -> int:
    name = str(args.mechanism).lower()
    if not math.isfinite(args.epsilon) or args.epsilon <= 0:
        raise ParameterError(f"--epsilon must be a finite number > 0, got {args.epsilon!r}")
    if args.domain is not None and args.domain < 2:
        raise ParameterError(f"--domain must be an integer >= 2, got {args.domain!r}")
    matrix = protocols.matrix_of(name)
    if matrix is not None:  # a protocol registered from its probability matrix: exact audit
        if args.domain is not None and args.domain != matrix.shape[0]:
            raise ParameterError(f"{name} has {matrix.shape[0]} inputs, not --domain {args.domain}")
        result = protocols.audit_discrete(name, matrix, args.epsilon, domain=matrix.shape[0])
        if args.json:
            emit_json(result.to_dict())
        else:
            _table(args.epsilon, [(name, result)])
        return _verdict(args.epsilon, [result])
    if name != "all":
        dom = args.domain if args.domain is not None else default_domain(name)
        result = protocols.audit_mechanism(name, args.epsilon, dom)
        if args.json:
            emit_json(result.to_dict())
        else:
            _table(args.epsilon, [(name, result)])
        return _verdict(args.epsilon, [result])
    audited: list[tuple[str, protocols.AuditResult | _Skipped]] = []
    for mech in protocols.AUDITABLE:
        if mech in protocols.MEAN_MECHANISMS:
            dom = None
        elif args.domain is None:
            dom = default_domain(mech)
        else:  # SHE's grid only ever takes d <= 3; the others are audited at the domain given
            dom = min(args.domain, DOMAIN_LIMITS["she"]) if mech == "she" else args.domain
        try:
            audited.append((mech, protocols.audit_mechanism(mech, args.epsilon, dom)))
        except ParameterError as exc:  # names and ε > 0 are valid: a limit of this audit
            audited.append((mech, _Skipped(dom, str(exc))))
    if all(isinstance(r, _Skipped) for _, r in audited):
        first = audited[0][1]
        assert isinstance(first, _Skipped)
        raise ParameterError(f"no mechanism can be audited here, e.g. {first.reason}")
    if args.json:
        emit_json(
            {
                "results": [
                    r.to_dict() for _, r in audited if isinstance(r, protocols.AuditResult)
                ],
                "skipped": [
                    {"mechanism": m, "domain": r.domain, "reason": r.reason}
                    for m, r in audited
                    if isinstance(r, _Skipped)
                ],
            }
        )
    else:
        _table(args.epsilon, audited)
    return _verdict(args.epsilon, [r for _, r in audited if isinstance(r, protocols.AuditResult)])


def _verdict(epsilon: float, results: list[protocols.AuditResult]) -> int:
    """The exit code: 1 (with one line on stderr) when a mechanism is not ε-LDP, else 0."""
    failed = [r.mechanism for r in results if not r.holds]
    if not failed:
        return 0
    print(
        f"esa audit-ldp: {', '.join(failed)} NOT {epsilon:g}-LDP (measured ε above the claim)",
        file=sys.stderr,
    )
    return 1


def _table(epsilon: float, audited: list[tuple[str, protocols.AuditResult | _Skipped]]) -> None:
    rows: list[tuple[object, ...]] = []
    caption: list[str] = []
    for mech, r in audited:
        if isinstance(r, _Skipped):
            dom: object = "[-1, 1]" if mech in protocols.MEAN_MECHANISMS else r.domain or "default"
            rows.append((mech, dom, epsilon, "-", "skipped", "-"))
            caption.append(f"{mech} skipped: {r.reason}")
            continue
        rows.append(
            (
                r.mechanism,
                "[-1, 1]" if r.domain is None else r.domain,
                r.epsilon_claimed,
                r.epsilon_measured,
                "yes" if r.holds else "NO",
                r.method,
            )
        )
        if not r.holds:
            caption.append(f"{r.mechanism}: {r.note}")
        if r.caveat:
            caption.append(f"{r.mechanism}: {r.caveat}")
    print_table(
        f"LDP audit at epsilon = {epsilon:g}",
        ["mechanism", "domain", "epsilon_claimed", "epsilon_measured", "holds", "method"],
        rows,
        caption="\n".join(caption) or None,
    )
