"""``esa protocols``: every registered protocol and amplification bound."""

from __future__ import annotations

import argparse
import inspect
import re
import sys
from collections.abc import Mapping
from typing import Any

from protocols import (
    BOUNDS,
    ParameterError,
    ProtocolSpec,
    RecordedOptions,
    ShuffleProtocol,
    build_protocol,
    option_keys,
    protocol_names,
)

from .._common import UsageError, emit_json, plain_text, print_table

#: The configuration every protocol is listed at (the table's title says so).
_EPSILON, _DELTA, _N, _DOMAIN = 1.0, 1e-6, 100_000, 16

#: Fakes (total over the shufflers) for a protocol that needs some to be configured at all
#: (murs): 1 % of n, as in the survey's experiment.
_LISTING_FAKES = _N // 100

#: Abbreviations whose period does not end a sentence.
_ABBREVIATIONS = ("et al.", "e.g.", "i.e.", "cf.", "resp.", "vs.", "approx.", "Fig.", "Sec.")


def register(sub: Any) -> None:
    p = sub.add_parser(
        "protocols",
        help="list the protocols and amplification bounds, or one protocol's options",
        description="Without NAME: every registered protocol and amplification bound. With "
        "NAME: that protocol's --option keys (type, default, valid values), messages per "
        "user, source paper and description.",
    )
    p.add_argument("name", nargs="?", default=None, help="one protocol to describe in full")
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
    if args.name is not None:
        return _run_one(args.name, as_json=args.json)
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


# --- esa protocols NAME --------------------------------------------------------------------

#: A citation in a docstring: a parenthesis naming authors or an arXiv id with a year.
_CITATION = re.compile(r"\(([^()]*(?:et al\.|&|arXiv)[^()]*)\)")

#: A refusal's condition: "option shares must be an integer >= 1, got 0.5" -> its middle.
_MUST = re.compile(r"must (.*?)(?:, got .*)?$")

_NO_DEFAULT = object()


class _DefaultsRecorded(RecordedOptions):
    """Options that also record the default a factory passes to ``get`` for each key."""

    def __init__(self, options: Mapping[str, float | str]) -> None:
        super().__init__(options)
        self.defaults: dict[str, Any] = {}

    def get(self, key: str, default: Any = None) -> Any:
        self.defaults.setdefault(key, default)
        return super().get(key, default)


def _refusal(name: str, fakes: int, key: str, value: float | str) -> str | None:
    """Why ``name`` refuses ``--option key=value`` at the listing configuration, or None."""
    spec = ProtocolSpec(
        epsilon=_EPSILON,
        delta=_DELTA,
        n=_N,
        domain=_DOMAIN,
        fake_reports=fakes,
        options={key: value},
    )
    try:
        build_protocol(name, spec)
    except ParameterError as exc:
        return str(exc)
    return None


def _condition(message: str) -> str:
    found = _MUST.search(message)
    return f"must {found.group(1)}" if found else message


def _option(name: str, fakes: int, key: str, default: Any, doc: str) -> dict[str, Any]:
    """One option's type, default, valid values and the docstring's sentences on it, found
    by building the protocol with probe values (a refusal names the condition)."""
    as_name = _refusal(name, fakes, key, "?")
    valid: list[str] = []
    if as_name is not None and ("one of" in as_name or "must be '" in as_name):
        kind = "name"
        valid.append(_condition(as_name))
    else:
        half = _refusal(name, fakes, key, 0.5)
        kind = "integer" if half is not None and "integer" in half else "number"
        probes: list[float] = [0.5] if kind == "integer" else [-1.0, 0.0, 2.0, 1e9]
        for value in probes:
            why = _refusal(name, fakes, key, value)
            if why is not None and "must be a number" not in why:
                condition = _condition(why)
                if condition not in valid:
                    valid.append(condition)
    sentences = [
        " ".join(s.split())
        for s in re.split(r"(?<=[.;])\s+", doc)
        if re.search(rf"(?<![\w]){re.escape(key)}(?![\w])", s)
    ]
    return {
        "name": key,
        "type": kind,
        "default": None if default is _NO_DEFAULT else default,
        "valid": "; ".join(valid) or None,
        "doc": plain_text(" ".join(sentences[:2])) or None,
    }


def describe(name: str) -> dict[str, Any]:
    """Everything ``esa protocols NAME`` shows, as its ``--json`` object.

    Raises:
        UsageError: ``name`` is not a registered protocol.
    """
    if name not in protocol_names():
        raise UsageError(f"unknown protocol {name!r}; choose one of: {', '.join(protocol_names())}")
    row = _describe(name)
    fakes = int(row["listed_with"].get("fake_reports", 0))
    read = _DefaultsRecorded({})
    spec = ProtocolSpec(
        epsilon=_EPSILON, delta=_DELTA, n=_N, domain=_DOMAIN, fake_reports=fakes, options=read
    )
    try:
        proto = build_protocol(name, spec)
    except ParameterError:
        proto = None
    class_doc = inspect.getdoc(type(proto)) or "" if proto is not None else ""
    module = sys.modules.get(type(proto).__module__) if proto is not None else None
    module_doc = (inspect.getdoc(module) or "") if module is not None else ""
    doc = f"{class_doc}\n\n{module_doc}"
    papers: list[str] = []
    for found in _CITATION.finditer(" ".join(doc.split())):
        text = plain_text(found.group(1).strip())
        if text not in papers:
            papers.append(text)
    options = [
        _option(name, fakes, key, read.defaults.get(key, _NO_DEFAULT), doc)
        for key in row["options"]
    ]
    privacy = proto.privacy if proto is not None else None
    return {
        **row,
        "configuration": {"epsilon": _EPSILON, "delta": _DELTA, "n": _N, "domain": _DOMAIN}
        | ({"fake_reports": fakes} if fakes else {}),
        "epsilon_local": None if privacy is None else privacy.epsilon_local,
        "bound": None if privacy is None else privacy.bound,
        "options": options,
        "papers": papers,
        "description": plain_text(class_doc),
    }


def _run_one(name: str, *, as_json: bool) -> int:
    j = describe(name)
    if as_json:
        emit_json(j)
        return 0
    print_one(j)
    return 0


def _shown(value: Any) -> str:
    if value is None:
        return "chosen by the protocol"
    return f"{value:g}" if isinstance(value, float) else str(value)


def print_one(j: Mapping[str, Any]) -> None:
    """The tables and text of ``esa protocols NAME`` for :func:`describe`'s object."""
    import textwrap

    from .._common import console

    conf = j["configuration"]
    at = f"ε={conf['epsilon']:g}, δ={conf['delta']:g}, n={conf['n']:.0e}, d={conf['domain']}"
    rows: list[tuple[str, Any]] = [
        ("input", j["input"] or ""),
        (
            f"messages per user at {at}",
            "" if j["messages_per_user"] is None else j["messages_per_user"],
        ),
        ("ε_l at that configuration", "" if j["epsilon_local"] is None else j["epsilon_local"]),
        ("privacy by", j["bound"] or ""),
        ("--representation tally", "yes" if j["tally"] else "no"),
        ("source", "; ".join(j["papers"]) or "see the description"),
    ]
    if j["listed_with"]:
        rows.append(("listed with", f"{j['listed_with']['fake_reports']:,} fakes in total"))
    print_table(f"esa protocols {j['name']}: {plain_text(j['summary'])}", ["", "value"], rows)
    if j["options"]:
        print_table(
            f"{j['name']}'s options (esa simulate --protocol {j['name']} --option KEY=VALUE)",
            ["option", "type", "default", "valid values"],
            [(o["name"], o["type"], _shown(o["default"]), o["valid"] or "") for o in j["options"]],
        )
        width = max(console().width - 1, 40)
        for o in j["options"]:
            if o["doc"]:
                print(
                    textwrap.fill(f"{o['name']}: {o['doc']}", width=width, subsequent_indent="    ")
                )
    else:
        print(f"{j['name']} takes no --option.")
    if j["description"]:
        width = max(console().width - 1, 40)
        print()
        for paragraph in j["description"].split("\n\n"):
            print(textwrap.fill(" ".join(paragraph.split()), width=width))
            print()


class ProtocolHelp(argparse.Action):
    """``-h``/``--help`` that, after ``--protocol NAME``, also describes that protocol (as
    ``esa protocols NAME``)."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: Any) -> None:
        kwargs.setdefault("help", "show this help (after --protocol NAME: also its options)")
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        parser.print_help()
        name = getattr(namespace, "protocol", None)
        if name in protocol_names():
            print()
            print_one(describe(name))
        parser.exit()
