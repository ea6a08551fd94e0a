"""``esa protocols``: every registered protocol and amplification bound."""

from __future__ import annotations

import argparse
import inspect
from typing import Any

from protocols import (
    BOUNDS,
    ProtocolSpec,
    RecordedOptions,
    ShuffleProtocol,
    build_protocol,
    option_keys,
    protocol_names,
)

from .._common import emit_json, print_table

#: The configuration every protocol is listed at (the table's title says so).
_EPSILON, _DELTA, _N, _DOMAIN = 1.0, 1e-6, 100_000, 16

#: Fakes (total over the shufflers) for a protocol that needs some to be configured at all
#: (murs): 1 % of n, as in the survey's experiment.
_LISTING_FAKES = _N // 100

#: Abbreviations whose period does not end a sentence.
_ABBREVIATIONS = ("et al.", "e.g.", "i.e.", "cf.", "resp.", "vs.", "approx.", "Fig.", "Sec.")


def register(sub: Any) -> None:
    p = sub.add_parser("protocols", help="list the protocols and amplification bounds")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    p.set_defaults(handler=run)


def first_sentence(doc: str) -> str:
    """The first full sentence of a docstring's first paragraph, on one line.

    A sentence ends at a period (or ! / ?) outside parentheses, brackets and ``literals``,
    followed by whitespace or the end, and not closing an abbreviation such as "et al.";
    a first paragraph without one is returned whole."""
    paragraph = " ".join(doc.strip().split("\n\n", 1)[0].split())
    depth, literal = 0, False
    i = 0
    while i < len(paragraph):
        ch = paragraph[i]
        if paragraph.startswith("``", i):
            literal = not literal
            i += 2
            continue
        if not literal:
            if ch in "([{":
                depth += 1
            elif ch in ")]}":
                depth = max(depth - 1, 0)
            elif (
                ch in ".!?"
                and depth == 0
                and (i + 1 == len(paragraph) or paragraph[i + 1].isspace())
                and not paragraph[: i + 1].endswith(_ABBREVIATIONS)
            ):
                return paragraph[: i + 1]
        i += 1
    return paragraph


def _build(name: str, fake_reports: int) -> tuple[ShuffleProtocol, RecordedOptions]:
    read = RecordedOptions({})
    spec = ProtocolSpec(
        epsilon=_EPSILON,
        delta=_DELTA,
        n=_N,
        domain=_DOMAIN,
        fake_reports=fake_reports,
        options=read,
    )
    return build_protocol(name, spec), read


def _describe(name: str) -> dict[str, Any]:
    """One protocol's row; every protocol has the same keys.

    ``listed_with`` names what the listing had to add to the common configuration for the
    protocol to be built at all (murs needs fakes), so its numbers are read accordingly."""
    listed_with: dict[str, Any] = {}
    try:
        proto, read = _build(name, 0)
    except ValueError:
        # e.g. murs refuses to run without fakes: list it as the survey runs it
        listed_with = {"fake_reports": _LISTING_FAKES}
        try:
            proto, read = _build(name, _LISTING_FAKES)
        except ValueError as exc:
            return {
                "name": name,
                "input": None,
                "messages_per_user": None,
                "tally": False,
                "options": [],
                "summary": f"(cannot be configured at ε={_EPSILON:g}, n={_N:g}, d={_DOMAIN}: "
                f"{exc})",
                "listed_with": listed_with,
            }
    return {
        "name": name,
        "input": proto.input_kind.value,
        "messages_per_user": proto.messages_per_user,
        "tally": proto.supports_tally,
        # the keys --option KEY=VALUE sets, as an unknown key's refusal lists them
        "options": option_keys(proto, read),
        "summary": first_sentence(inspect.getdoc(type(proto)) or ""),
        "listed_with": listed_with,
    }


def _listed_with_note(listed_with: dict[str, Any]) -> str:
    if "fake_reports" not in listed_with:
        return ""
    return (
        f" [listed with {listed_with['fake_reports']:,} fakes in total (1 % of n): it does not "
        "run without fakes, so give it --fake-reports >= 1]"
    )


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
        f"protocols (esa simulate --protocol NAME); messages/user at ε={_EPSILON:g}, "
        f"n={_N:.0e}, d={_DOMAIN}; tally: can run with --representation tally; "
        "options: --option KEY=VALUE",
        ["name", "input", "messages/user", "tally", "options", "summary"],
        [
            (
                p["name"],
                p["input"] or "",
                "" if p["messages_per_user"] is None else p["messages_per_user"],
                "yes" if p["tally"] else "",
                ", ".join(p["options"]),
                p["summary"] + _listed_with_note(p["listed_with"]),
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
