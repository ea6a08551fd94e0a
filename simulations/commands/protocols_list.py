"""``esa protocols``: every registered protocol and amplification bound."""

from __future__ import annotations

import argparse
import inspect
from typing import Any

from protocols import BOUNDS, ProtocolSpec, RecordedOptions, build_protocol, protocol_names

from .._common import emit_json, print_table


def register(sub: Any) -> None:
    p = sub.add_parser("protocols", help="list the protocols and amplification bounds")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    p.set_defaults(handler=run)


def _describe(name: str) -> dict[str, Any]:
    read = RecordedOptions({})
    spec = ProtocolSpec(epsilon=1.0, delta=1e-6, n=100_000, domain=16, options=read)
    try:
        proto = build_protocol(name, spec)
    except ValueError as exc:
        return {"name": name, "summary": f"(needs other parameters: {exc})"}
    doc = inspect.getdoc(type(proto)) or ""
    return {
        "name": name,
        "input": proto.input_kind.value,
        "messages_per_user": proto.messages_per_user,
        "tally": proto.supports_tally,
        # what --option KEY=VALUE sets (report_fragments applies to single-message ones)
        "options": sorted(read.asked - {"report_fragments"}),
        "summary": doc.splitlines()[0] if doc else "",
    }


def run(args: argparse.Namespace) -> int:
    protos = [_describe(n) for n in protocol_names()]
    bounds = [
        {"name": b.name, "families": sorted(b.families), "citation": b.citation}
        for b in BOUNDS.values()
    ]
    if args.json:
        emit_json({"protocols": protos, "bounds": bounds})
        return 0
    print_table(
        "protocols (esa simulate --protocol NAME); messages/user at ε=1, n=1e5, d=16; "
        "tally: can run with --representation tally; options: --option KEY=VALUE",
        ["name", "input", "messages/user", "tally", "options", "summary"],
        [
            (
                p["name"],
                p.get("input", ""),
                p.get("messages_per_user", ""),
                "yes" if p.get("tally") else "",
                ", ".join(p.get("options", [])),
                p["summary"],
            )
            for p in protos
        ],
    )
    print_table(
        "amplification bounds (--bound NAME)",
        ["name", "covers", "source"],
        [(b["name"], ", ".join(b["families"]), b["citation"]) for b in bounds],
    )
    return 0
