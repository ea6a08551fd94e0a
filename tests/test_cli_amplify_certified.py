"""Where ``binary_rr_exact`` prints a certified upper bound instead of the exact ε, every
output says so: ``AmplificationBound.method_at``, ``esa amplify`` (table and JSON),
``esa audit`` (table and JSON) and the HTML report.

The exact search takes at most 2^28 other users (n = 2^28 + 1 with the victim); the first n
past it, 2^28 + 2, at ε_l = 8 costs about a second of CPU per certified search (a loaded
2-core machine), so the CLI runs here stay at that n.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from protocols import BOUNDS, ParameterError, binary_rr_epsilon
from simulations.cli import main
from simulations.report import render_html

#: The largest n (victim included) whose binary_rr_exact value is exact, and the first past it.
EXACT_N = (1 << 28) + 1
CERTIFIED_N = EXACT_N + 1
#: binary_rr_exact's relative tolerance past EXACT_N (protocols/accounting/_binary_rr.py).
TOLERANCE = 1e-3
SCHEMAS = Path(__file__).resolve().parents[1] / "docs" / "schema"


def _json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    assert main([*argv, "--json"]) == 0
    doc: dict[str, Any] = json.loads(capsys.readouterr().out)
    schema = json.loads((SCHEMAS / f"{argv[0]}.schema.json").read_text())
    jsonschema.Draft202012Validator(schema).validate(doc)
    return doc


def _table(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(list(argv)) == 0
    return capsys.readouterr().out


def _line(text: str, first: str) -> str:
    """The table's row whose first cell starts with ``first``."""
    (line,) = [ln for ln in text.splitlines() if ln.startswith(f"│ {first}")]
    return line


def test_method_at_switches_past_the_exact_search() -> None:
    binary = BOUNDS["binary_rr_exact"]
    assert binary.method_at(1) == ("exact", 0.0)
    assert binary.method_at(EXACT_N) == ("exact", 0.0)
    assert binary.method_at(CERTIFIED_N) == ("certified", TOLERANCE)
    assert binary.method_at(10**10) == ("certified", TOLERANCE)
    # Every theorem is a proven bound and claims nothing about its slack.
    for name in ("local_dp", "thm2_fmt_closed_form", "fmt21_numerical", "krr_blanket_numerical"):
        assert BOUNDS[name].method_at(1000) == ("bound", None), name
    with pytest.raises(ParameterError):
        binary.method_at(0)


def test_amplify_below_two_to_the_28_says_exact(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ("amplify", "--epsilon-local", "2", "--n", "1000", "--domain", "2")
    doc = _json(capsys, *argv)
    by = {r["bound"]: r for r in doc["bounds"]}
    assert (by["binary_rr_exact"]["method"], by["binary_rr_exact"]["tolerance"]) == ("exact", 0.0)
    assert (by["fmt21_numerical"]["method"], by["fmt21_numerical"]["tolerance"]) == ("bound", None)
    # A bound that gives no value states no method.
    blanket = by["krr_blanket_numerical"]
    assert (blanket["value"], blanket["method"], blanket["tolerance"]) == (None, None, None)
    assert doc["tightest"]["krr"] == {
        "bound": "binary_rr_exact",
        "value": by["binary_rr_exact"]["value"],
        "method": "exact",
        "tolerance": 0.0,
    }
    text = _table(capsys, *argv)
    assert "exact" in _line(text, "binary_rr_exact").split("│")[4]
    assert "certified" not in text.split("tightest")[0]


def test_amplify_past_two_to_the_28_says_certified(capsys: pytest.CaptureFixture[str]) -> None:
    argv = (
        "amplify", "--epsilon-local", "8", "--n", str(CERTIFIED_N), "--domain", "2",
        "--bound", "binary_rr_exact",
    )  # fmt: skip
    doc = _json(capsys, *argv)
    (row,) = doc["bounds"]
    assert (row["method"], row["tolerance"]) == ("certified", TOLERANCE)
    assert row["value"] == binary_rr_epsilon(8.0, CERTIFIED_N - 1, 1e-6)
    assert doc["tightest"]["krr"]["method"] == "certified"
    text = _table(capsys, *argv)  # the same question: answered from the cache
    assert "certified ≤ +0.1 %" in _line(text, "binary_rr_exact")
    caption = " ".join(text.split("tightest")[1].split())  # as wrapped at 80 columns
    assert f"krr: binary_rr_exact ({row['value']:.6g}, certified ≤ +0.1 %)" in caption
    assert "certified ≤ +x %: a proven upper bound at most x % above it" in caption
    assert all(len(line) <= 80 for line in text.splitlines())
    # The HTML report of the same result labels the row and the reading alike.
    page = render_html(doc, compute=False)
    assert page.count("certified ≤ +0.1 %") == 2


def test_audit_past_two_to_the_28_stars_the_certified_rows(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # cnt_rr at ε_c = 1 runs binary RR at ε_l ≈ 16: a cheap certified search.
    argv = ("audit", "--protocol", "cnt_rr", "--n", str(CERTIFIED_N), "--epsilon", "1")
    doc = _json(capsys, *argv)
    claim = doc["protocol_claim"]
    assert (claim["bound"], claim["bound_method"]) == ("binary_rr_exact", "certified")
    assert claim["bound_tolerance"] == TOLERANCE
    by = {r["scenario"]: r for r in doc["scenarios"]}
    assert by["none"]["honest_users"] == CERTIFIED_N - 1
    assert (by["none"]["bound"], by["none"]["bound_method"]) == ("binary_rr_exact", "certified")
    # Hidden among no other user, the same accountant is exact.
    alone = by["m-1 shufflers + all other users"]
    assert (alone["honest_users"], alone["bound_method"]) == (0, "exact")
    assert by["all shufflers"]["bound_method"] == "bound"  # local_dp
    text = _table(capsys, *argv)
    assert "binary_rr_exact*" in _line(text, "none ")
    assert "binary_rr_exact*" not in _line(text, "m-1 shufflers")
    caption = " ".join(text.split())  # as wrapped at 80 columns
    assert "by binary_rr_exact* *: certified, a proven upper bound at most 0.1 % above" in caption
    page = render_html(doc, compute=False)
    assert "binary_rr_exact*" in page
    assert "certified, a proven upper bound" in page


def test_audit_below_two_to_the_28_stars_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ("audit", "--protocol", "cnt_rr", "--n", "2000", "--epsilon", "1")
    doc = _json(capsys, *argv)
    assert doc["protocol_claim"]["bound_method"] == "exact"
    assert {r["bound_method"] for r in doc["scenarios"]} <= {"exact", "bound"}
    assert "*" not in _table(capsys, *argv)
