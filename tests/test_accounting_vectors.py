"""Pinned accounting (simulations/conformance/vectors/accounting.json, written by
tests/vectors/generate_accounting.py): every amplification bound and every protocol's derived
privacy and parameters are recomputed and compared with the committed values."""

from __future__ import annotations

import importlib.util
import json
import math
import re
from pathlib import Path
from typing import Any

import pytest

from protocols import BOUNDS, protocol_names

VECTORS = Path(__file__).parent.parent / "simulations" / "conformance" / "vectors"
_SPEC = importlib.util.spec_from_file_location(
    "_accounting_generator", Path(__file__).parent / "vectors" / "generate_accounting.py"
)
assert _SPEC is not None
assert _SPEC.loader is not None
gen = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(gen)

DATA: dict[str, Any] = json.loads((VECTORS / "accounting.json").read_text(encoding="utf-8"))
REL = float(DATA["rel_tol"])


def _same(got: Any, want: Any) -> bool:
    if isinstance(want, float) and isinstance(got, float):
        return math.isclose(got, want, rel_tol=REL, abs_tol=1e-300)
    return bool(got == want)


def _masked(bound: str) -> str:
    return re.sub(r"\d+(\.\d+)?(e[-+]?\d+)?", "#", bound)


def test_the_file_covers_every_bound_and_protocol() -> None:
    assert {r["bound"] for r in DATA["amplification"]} == set(BOUNDS)
    assert {r["protocol"] for r in DATA["protocols"]} == set(protocol_names())
    assert {r["direction"] for r in DATA["amplification"]} == {"forward", "inverse"}
    assert sum(r["value"] is not None for r in DATA["amplification"]) > 100
    assert [r["protocol"] for r in DATA["protocols"] if "error" in r] == ["pucm"]  # n < 45 778


def test_amplification_bounds_match_the_pinned_values() -> None:
    fresh = gen.amplification()
    assert len(fresh) == len(DATA["amplification"])
    for got, want in zip(fresh, DATA["amplification"], strict=True):
        key = {k: want[k] for k in ("bound", "direction", "epsilon", "n", "delta", "k")}
        assert {k: got[k] for k in key} == key
        if want["value"] is None:
            assert got["value"] is None, key
            assert got["reason"] == want["reason"]
        else:
            assert _same(got["value"], want["value"]), (key, got["value"], want["value"])


@pytest.mark.parametrize(
    "row", DATA["protocols"], ids=lambda r: f"{r['protocol']}-{r['n']}-{r['options']}"
)
def test_protocol_parameters_match_the_pinned_values(row: dict[str, Any]) -> None:
    spec_keys = ("protocol", "epsilon", "delta", "n", "domain", "fake_reports", "options")
    got = gen.derive({k: row[k] for k in spec_keys})
    want = {k: v for k, v in row.items() if k not in spec_keys}
    assert got.keys() == want.keys()
    for key, value in want.items():
        if key == "bound":
            assert _masked(got[key]) == _masked(value)
        else:
            assert _same(got[key], value), (key, got[key], value)
