"""``esa report`` and :mod:`simulations.report` without a browser: kinds, non-finite values,
sections, the standalone page and the command's errors."""

from __future__ import annotations

import contextlib
import io
import json
import math
import re
from pathlib import Path
from typing import Any

import pytest

from protocols import ProtocolSpec, build_protocol
from simulations import cli
from simulations.report import SECTIONS, ReportError, detect_kind, render_html, write_report
from simulations.report._values import decode, fmt, num, nums

SIMULATE: dict[str, Any] = {
    "protocol": "hist_kr",
    "n": 2000,
    "domain": 4,
    "epsilon_central": 1.0,
    "epsilon_local": 3.2,
    "delta": 1e-6,
    "bound": "krr_blanket_numerical",
    "shufflers": 2,
    "fake_reports": 0,
    "threshold": 0,
    "crypto": "ideal",
    "representation": "reports",
    "messages_per_user": 1.0,
    "estimate": [1010.0, 495.0, 300.0, 195.0],
    "truth": [1000.0, 500.0, 300.0, 200.0],
    "max_abs_error": 10.0,
    "rmse": 6.12,
    "expected_std": [8.0, 7.0, 6.5, 6.0],
    "estimator_details": {},
    "hops": [
        {
            "hop": h,
            "role": r,
            "channel": 0,
            "received": 2000,
            "invalid": 0,
            "replayed": 0,
            "held": 0,
            "fakes_added": 0,
            "forwarded": 2000,
        }
        for h, r in enumerate(["shuffler", "shuffler", "analyzer"])
    ],
    "seconds": {"total": 0.1},
    "drop_check": {"ok": True, "problems": []},
    "epsilon_requested": 1.0,
    "privacy_warning": None,
}

# The privacy hist_kr states at these parameters: a report audits the run again and checks it.
_PRIVACY = build_protocol(
    "hist_kr", ProtocolSpec(epsilon=1.0, delta=1e-6, n=2000, domain=4, fake_reports=0)
).privacy
SIMULATE.update(epsilon_central=_PRIVACY.epsilon_central, epsilon_local=_PRIVACY.epsilon_local)

AUDIT: dict[str, Any] = {
    "protocol": "hist_kr",
    "family": "krr",
    "k": 4,
    "n": 2000,
    "delta": 1e-6,
    "epsilon_local": 3.2,
    "shufflers": 2,
    "protocol_claim": {"epsilon_central": 1.0, "bound": "krr_blanket_numerical"},
    "epsilon_requested": 1.0,
    "measured": False,
    "violations": [],
    "scenarios": [
        {
            "scenario": "none",
            "epsilon_upper": 1.0,
            "bound": "krr_blanket_numerical",
            "epsilon_lower": 0.5,
            "explanation": "hidden among the others",
        },
        {
            "scenario": "all shufflers",
            "epsilon_upper": "inf",
            "bound": "local_dp",
            "epsilon_lower": None,
            "explanation": "only the local randomizer",
        },
    ],
}

AMPLIFY: dict[str, Any] = {
    "direction": "epsilon_local -> epsilon_central",
    "epsilon_local": 2.0,
    "epsilon_central": None,
    "n": 5000,
    "delta": 1e-6,
    "domain": 2,
    "bounds": [
        {"bound": "local_dp", "families": ["generic"], "value": 2.0, "reason": None},
        {"bound": "thm1_erlingsson", "families": ["generic"], "value": None, "reason": "no"},
    ],
    "tightest": {"generic": {"bound": "local_dp", "value": 2.0}, "krr": None},
}

EXPERIMENTS: dict[str, Any] = {
    "category": "counting",
    "quick": True,
    "crypto": "ideal",
    "protocols": ["cnt_rr"],
    "repeats": 1,
    "defaults": {"n": 10000.0, "epsilon": 0.9},
    "sweeps": {"epsilon": [0.3, 0.9]},
    "csv": "counting.csv",
    "rows": 4,
    "skipped": [],
    "seconds": 1.0,
}

_CSV = """category,sweep,value,method,family,n,domain,epsilon,delta,skew,repeats,rmse,\
expected_rmse,analyzer_seconds,total_seconds,messages_per_user,epsilon_central,status,reason,\
crypto,representation
counting,epsilon,0.3,cnt_rr,shuffle,10000,2,0.3,1e-06,0.5,1,40,30,0.1,0.2,1,0.3,ok,,ideal,reports
counting,epsilon,0.3,ldp_rr,ldp,10000,2,0.3,1e-06,0.5,1,400,300,0,0,1,0.3,ok,,none,
counting,epsilon,0.9,cnt_rr,shuffle,10000,2,0.9,1e-06,0.5,1,10,9,0.1,0.2,1,0.95,ok,,ideal,reports
counting,epsilon,0.9,ldp_rr,ldp,10000,2,0.9,1e-06,0.5,1,150,100,0,0,1,0.9,ok,,none,
"""


def _sections(page: str) -> list[str]:
    return re.findall(r'<section id="([a-z]+)"', page)


def test_detect_kind_from_fields_and_command() -> None:
    assert detect_kind(SIMULATE) == "simulate"
    assert detect_kind(AUDIT) == "audit"
    assert detect_kind(AMPLIFY) == "amplify"
    assert detect_kind(EXPERIMENTS) == "experiments"
    # metadata and extra fields are tolerated; ``command`` breaks a tie of fields
    both = {**SIMULATE, **AUDIT, "command": ["esa", "audit", "--json"], "schema_version": 2}
    assert detect_kind(both) == "audit"
    with pytest.raises(ReportError, match="several kinds"):
        detect_kind({**SIMULATE, **AUDIT})
    with pytest.raises(ReportError, match="none of their fields"):
        detect_kind({"protocol": "x"})
    with pytest.raises(ReportError, match="JSON object"):
        detect_kind([1, 2])


def test_non_finite_values() -> None:
    assert num("inf") == math.inf
    assert num("-inf") == -math.inf
    assert math.isnan(num(None))
    assert math.isnan(num(True))
    assert fmt("inf") == "∞"
    assert fmt(math.inf) == "∞"
    assert fmt(None) == "—"
    assert fmt(float("nan")) == "—"
    assert fmt(0.123456) == "0.1235"
    assert fmt(20000) == "20,000"


@pytest.mark.parametrize("kind", ["simulate", "audit", "amplify", "experiments"])
def test_every_section_in_every_kind(kind: str, tmp_path: Path) -> None:
    result = {"simulate": SIMULATE, "audit": AUDIT, "amplify": AMPLIFY}.get(kind, EXPERIMENTS)
    (tmp_path / "counting.csv").write_text(_CSV)
    page = render_html(result, inline=False, compute=False, base=tmp_path)
    assert _sections(page) == [sid for sid, _ in SECTIONS]
    assert page.startswith("<!DOCTYPE html>")
    assert "<script" not in page
    fragment = render_html(result, compute=False, base=tmp_path)
    assert fragment.startswith('<div class="esa-report"')
    assert "<html" not in fragment


def test_simulate_reading_and_computed_audit() -> None:
    page = render_html(SIMULATE)
    assert page.count("<svg") == 3  # estimate, collusion scenarios, amplification curve
    assert "entries lie within ±2 std" in page
    assert "consistent with the stated error" in page
    assert "The request is met" in page
    assert "weakest scenario is “all shufflers”" in page
    assert "computed as esa audit does" in page


def test_simulate_whose_options_are_not_recorded_says_so() -> None:
    # ε_c that hist_kr at these parameters does not state: the rebuilt protocol differs.
    page = render_html({**SIMULATE, "epsilon_central": 0.7, "epsilon_requested": 0.7})
    assert "options are not all recorded" in page


def test_lost_estimate_and_infinite_epsilon() -> None:
    lost = {
        **SIMULATE,
        "estimate": [None],
        "truth": [266.0],
        "expected_std": ["inf"],
        "rmse": None,
        "max_abs_error": None,
        "epsilon_local": "inf",
        "estimator_details": {"complete": False, "shares_received": 7, "shares_expected": 8},
    }
    page = render_html(lost, compute=False)
    assert "The estimate is lost: 7 of 8 Split-Mix shares" in page
    assert "∞" in page
    assert "—" in page
    assert "no finite value" in page
    page = render_html({**lost, "protocol": "rsum_dsg"})
    assert "not an amplification of an ε_l-LDP randomizer" in page


def test_audit_with_violation_and_unmet_request() -> None:
    bad = {
        **AUDIT,
        "protocol_claim": {"epsilon_central": 1.3, "bound": "x"},
        "violations": ["none"],
        "privacy_warning": "hist_kr proves ε_c = 1.3, not the requested 1",
    }
    page = render_html(bad, compute=False)
    assert "The request is NOT met" in page
    assert "a bug in a bound" in page
    assert "within 2× of it" in page  # upper 1.0 against lower 0.5


def test_experiments_reads_its_csv(tmp_path: Path) -> None:
    (tmp_path / "counting.csv").write_text(_CSV)
    page = render_html(EXPERIMENTS, base=tmp_path)
    assert page.count("<svg") == 1
    assert "stated ε_c is above the requested ε: cnt_rr" in page
    assert "0.0667× the RMSE of the LDP baseline ldp_rr" in page
    missing = render_html(EXPERIMENTS, base=tmp_path / "elsewhere")
    assert "not found next to it" in missing


_CSV_SPREAD = """category,sweep,value,method,family,n,domain,epsilon,delta,skew,repeats,rmse,\
rmse_sd,expected_rmse,analyzer_seconds,total_seconds,analyzer_cpu_seconds,total_cpu_seconds,\
messages_per_user,epsilon_central,status,reason,crypto,representation
counting,epsilon,0.3,cnt_rr,shuffle,10000,2,0.3,1e-06,0.5,2,40,4,30,0.1,0.2,0.05,0.1,1,0.3,ok,,\
ideal,reports
counting,epsilon,0.3,ldp_rr,ldp,10000,2,0.3,1e-06,0.5,2,400,20,300,0,0,0,0,1,0.3,ok,,none,
counting,epsilon,0.9,cnt_rr,shuffle,10000,2,0.9,1e-06,0.5,2,10,1,9,0.1,0.2,0.0123,0.1,1,0.95,ok,,\
ideal,reports
counting,epsilon,0.9,ldp_rr,ldp,10000,2,0.9,1e-06,0.5,2,150,10,100,0,0,0,0,1,0.9,ok,,none,
"""


def test_experiments_error_bars_and_cpu_time(tmp_path: Path) -> None:
    # A CSV with the per-run spread and CPU time: the page says what its error bars are,
    # states each s.e. (rmse_sd / √runs: 1 / √2 = 0.7071 for cnt_rr at the default point)
    # and the analyzer's CPU time, and names the weaker point.
    (tmp_path / "counting.csv").write_text(_CSV_SPREAD)
    page = render_html({**EXPERIMENTS, "repeats": 2}, base=tmp_path)
    assert "error bars: ±1 standard error over the runs" in page
    assert "<th>analyzer CPU s</th>" in page
    assert '<td class="n">0.7071</td>' in page
    assert '<td class="n">0.0123</td>' in page
    assert "ok, weaker ε_c than requested" in page
    # A CSV without those columns (one run per point): no error bars, wall time, said so.
    (tmp_path / "counting.csv").write_text(_CSV)
    page = render_html(EXPERIMENTS, base=tmp_path)
    assert "no error bars: one run per point" in page
    assert "<th>analyzer wall s</th>" in page


def _esa(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli.main(argv)
        except SystemExit as exc:
            code = int(exc.code or 0)
    return code, out.getvalue(), err.getvalue()


def test_command_writes_the_page(tmp_path: Path) -> None:
    src = tmp_path / "amplify.json"
    src.write_text(json.dumps(AMPLIFY))
    out = tmp_path / "amplify.html"
    code, stdout, _ = _esa(["report", str(src), "--out", str(out), "--json", "--no-compute"])
    assert code == 0
    doc = json.loads(stdout)  # a document: metadata first, non_finite last
    assert (doc["kind"], doc["out"], doc["non_finite"]) == ("amplify", str(out), {})
    assert doc["command"][:2] == ["esa", "report"]
    assert _sections(out.read_text()) == [sid for sid, _ in SECTIONS]


@pytest.mark.parametrize(
    ("content", "message"),
    [("not json", "not JSON"), ("[1]", "a result is a JSON object"), ("{}", "none of their")],
)
def test_command_refuses_what_is_no_result(tmp_path: Path, content: str, message: str) -> None:
    src = tmp_path / "r.json"
    src.write_text(content)
    code, _, err = _esa(["report", str(src), "--out", str(tmp_path / "r.html")])
    assert code == 2
    assert message in err
    assert err.count("\n") == 1
    assert not (tmp_path / "r.html").exists()


def test_write_report_replaces_the_file(tmp_path: Path) -> None:
    path = tmp_path / "r.html"
    path.write_text("old")
    write_report(AUDIT, path, compute=False)
    assert path.read_text().startswith("<!DOCTYPE html>")
    assert [p.name for p in tmp_path.iterdir()] == ["r.html"]


def test_metadata_fields_are_shown_and_used() -> None:
    meta = {
        "schema_version": 1,
        "version": "0.1.0",
        "command": ["esa", "simulate", "--protocol", "hist_kr"],
        "parameters": {"epsilon": 1.0, "domain": 4, "options": {}, "future_field": "x"},
        "something_new": 42,
    }
    page = render_html({**SIMULATE, **meta})
    assert "0.1.0" in page
    assert "esa simulate --protocol hist_kr" in page
    assert "future_field" in page
    assert "something_new" in page
    assert "computed as esa audit does" in page  # the parameters rebuilt the same protocol


def test_decode_reads_the_non_finite_map() -> None:
    doc: dict[str, Any] = {
        "a": [1.0, None, None],
        "b": {"c": None, "d": None},
        "e.f": None,
        "non_finite": {"a[1]": "inf", "a[2]": "-inf", "b.c": "nan", "e.f": "inf"},
    }
    out = decode(doc)
    assert out["a"][:2] == [1.0, math.inf]
    assert out["a"][2] == -math.inf
    assert math.isnan(out["b"]["c"])
    assert out["b"]["d"] is None  # not listed: absent, no number
    assert out["e.f"] == math.inf  # a key with a dot in it
    assert doc["a"][1] is None  # the input is not changed
    assert (fmt(out["a"][1]), fmt(out["b"]["c"]), fmt(out["b"]["d"])) == ("∞", "—", "—")
    # Older results: "inf" strings and no non_finite, read as before.
    assert decode({"x": ["inf", None]}) == {"x": ["inf", None]}
    assert nums(decode({"x": ["inf", None]})["x"])[0] == math.inf


def test_a_lost_estimate_from_simulate_shows_infinite_std_and_no_estimate(
    tmp_path: Path,
) -> None:
    # A threshold above n holds every report (tests/test_schemas.py): the estimate is NaN and
    # its std infinite, written as nulls that non_finite lists.
    argv = [
        "simulate", "--protocol", "hist_kr", "--n", "200", "--domain", "4", "--crypto",
        "ideal", "--threshold", "100000", "--allow-weaker", "--json",
    ]  # fmt: skip
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert cli.main(argv) == 0
    doc = json.loads(out.getvalue())
    assert doc["expected_std"] == [None] * 4
    assert doc["estimate"] == [None] * 4
    assert doc["non_finite"]["expected_std[0]"] == "inf"
    assert doc["non_finite"]["estimate[0]"] == "nan"
    decoded = decode(doc)
    assert decoded["expected_std"] == [math.inf] * 4
    assert all(math.isnan(v) for v in decoded["estimate"])
    page = render_html(doc, compute=False)
    rows = re.findall(r"<tr>(.*?)</tr>", page, flags=re.S)
    cells = [re.findall(r"<td[^>]*>(.*?)</td>", r, flags=re.S) for r in rows]
    estimate_rows = [c for c in cells if len(c) >= 3 and "∞" in c and "—" in c]
    assert estimate_rows, "an estimate row with std ∞ and estimate —"
    # Read as NaN before the map was read, the std showed as — too.
    assert "∞" in page
    # The command reads the same file as written.
    (tmp_path / "lost.json").write_text(out.getvalue())
    with contextlib.redirect_stdout(io.StringIO()):
        assert (
            cli.main(
                [
                    "report",
                    str(tmp_path / "lost.json"),
                    "--out",
                    str(tmp_path / "r.html"),
                    "--no-compute",
                ]
            )
            == 0
        )
    assert "∞" in (tmp_path / "r.html").read_text()
