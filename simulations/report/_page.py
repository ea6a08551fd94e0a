"""The report page: one section per question, the same ids for every kind of result."""

from __future__ import annotations

import csv
import html
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._common import certified_footnote, method_label, starred_bound
from . import _plots
from ._compute import amplification_curve, audit_of_run
from ._values import decode, detect_kind, fmt, num, nums

__all__ = ["SECTIONS", "render_html"]

#: Every report has these sections, in this order (their HTML ids).
SECTIONS: tuple[tuple[str, str], ...] = (
    ("parameters", "Parameters and version"),
    ("estimate", "Estimate against the truth"),
    ("privacy", "Privacy under every collusion scenario"),
    ("amplification", "Amplification curve"),
    ("hops", "Per-hop counters"),
    ("reading", "What to read from this"),
)

_NOTE = (
    "∞: no finite value (the bound proves nothing finite, or the randomizer alone is not "
    "ε-LDP for any finite ε). —: no value in this result (null: not applicable, not "
    "measured, or lost)."
)

_CSS = """
.esa-report{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#1b1f24;
max-width:980px;margin:0 auto;padding:12px 18px}
.esa-report h1{font-size:22px;margin:6px 0 2px}.esa-report h2{font-size:17px;margin:0 0 8px;
border-bottom:1px solid #d0d7de;padding-bottom:3px}
.esa-report section{margin:18px 0 22px}.esa-report .sub{color:#57606a;margin:0 0 10px}
.esa-report table{border-collapse:collapse;margin:6px 0;font-size:13px}
.esa-report th,.esa-report td{border:1px solid #d0d7de;padding:3px 8px;text-align:left;
vertical-align:top}.esa-report th{background:#f6f8fa}
.esa-report td.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
.esa-report .note{color:#57606a;font-size:12px}.esa-report .warn{color:#9a3412;
background:#fff7ed;border-left:3px solid #ea580c;padding:4px 8px}
.esa-report .absent{color:#57606a;font-style:italic}
.esa-report svg.plot{max-width:100%;height:auto;display:block;margin:6px 0}
.esa-report ul.reading li{margin:3px 0}.esa-report details{margin:6px 0}
"""


def _e(text: Any) -> str:
    return html.escape(str(text), quote=True)


@dataclass(slots=True)
class _Page:
    """The sections' HTML as they are built, and the sentences of the reading."""

    kind: str
    body: dict[str, str] = field(default_factory=dict)
    reading: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def _absent(why: str) -> str:
    return f'<p class="absent">{_e(why)}</p>'


def _is_number_cell(v: Any) -> bool:
    if isinstance(v, bool):
        return False
    if isinstance(v, int | float) or v is None:
        return True
    return isinstance(v, str) and v.strip().lower() in ("inf", "-inf", "nan")


def _table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """A table; numbers (and null/"inf") formatted by :func:`fmt`, with the ∞/— note if any."""
    out = ["<table><thead><tr>", *(f"<th>{_e(h)}</th>" for h in headers), "</tr></thead><tbody>"]
    special = False
    for row in rows:
        out.append("<tr>")
        for v in row:
            if _is_number_cell(v):
                text = fmt(v)
                special = special or text in ("∞", "−∞", "—")
                out.append(f'<td class="n">{_e(text)}</td>')
            else:
                out.append(f"<td>{_e(v)}</td>")
        out.append("</tr>")
    out.append("</tbody></table>")
    if special:
        out.append(f'<p class="note">{_e(_NOTE)}</p>')
    return "".join(out)


def _scalar(v: Any) -> bool:
    return v is None or isinstance(v, str | int | float | bool)


def _show(v: Any) -> Any:
    """A value for a parameters table: scalars as they are, lists and objects as text."""
    if _scalar(v):
        return v
    if isinstance(v, Mapping):
        return ", ".join(f"{k}={_show_text(x)}" for k, x in v.items()) or "{}"
    if isinstance(v, list | tuple):
        return " ".join(_show_text(x) for x in v) if v else "[]"
    return str(v)


def _show_text(v: Any) -> str:
    s = _show(v)
    return fmt(s) if _is_number_cell(s) else str(s)


# --- parameters ------------------------------------------------------------------------------

#: the fields each kind states about its configuration, in a readable order
_KIND_FIELDS: dict[str, tuple[str, ...]] = {
    "simulate": (
        "protocol", "n", "domain", "epsilon_requested", "epsilon_central", "epsilon_local",
        "delta", "bound", "shufflers", "fake_reports", "threshold", "crypto", "representation",
        "messages_per_user", "seed", "distribution", "transport", "fakes_source",
    ),
    "audit": (
        "protocol", "family", "k", "n", "delta", "epsilon_requested", "epsilon_local",
        "shufflers", "fake_reports_per_shuffler", "colluding_users", "colluding_shufflers",
        "measured", "trials", "confidence",
    ),
    "amplify": ("direction", "epsilon_local", "epsilon_central", "n", "delta", "domain"),
    "experiments": (
        "category", "quick", "from_csv", "crypto", "protocols", "repeats", "defaults",
        "sweeps", "rows", "skipped", "seconds", "csv", "summary",
    ),
}  # fmt: skip

#: fields shown in their own sections, never in "other fields"
_BULKY = {
    "estimate", "truth", "expected_std", "hops", "scenarios", "bounds", "seconds", "plots",
    "parameters", "version", "schema_version", "command", "estimator_details", "tightest",
    "drop_check", "protocol_claim", "note", "privacy_warning", "measure_note", "violations",
}  # fmt: skip


def _parameters(page: _Page, result: Mapping[str, Any]) -> None:
    meta = [
        ("kind", f"esa {page.kind} result"),
        ("version", result.get("version", "not recorded")),
        ("schema_version", result.get("schema_version", "not recorded")),
    ]
    if "command" in result:
        meta.append(("command", _show(result["command"])))
    parts = [_table(["field", "value"], meta)]
    params = result.get("parameters")
    if isinstance(params, Mapping) and params:
        parts.append("<h3>Parameters of the run</h3>")
        parts.append(_table(["parameter", "value"], [(k, _show(v)) for k, v in params.items()]))
    fields = _KIND_FIELDS[page.kind]
    stated = [(k, _show(result[k])) for k in fields if k in result]
    if page.kind == "experiments" and isinstance(result.get("seconds"), int | float):
        stated = [(k, v) for k, v in stated if k != "seconds"] + [("seconds", result["seconds"])]
    parts.append("<h3>As the result states them</h3>")
    parts.append(_table(["field", "value"], stated))
    others = [
        (k, _show(v))
        for k, v in result.items()
        if k not in fields and k not in _BULKY and (_scalar(v) or isinstance(v, list | dict))
    ]
    if page.kind == "simulate" and isinstance(result.get("seconds"), Mapping):
        others.extend((f"seconds: {k}", v) for k, v in result["seconds"].items())
    if others:
        parts.append(
            f"<details><summary>Other fields ({len(others)})</summary>"
            + _table(["field", "value"], others)
            + "</details>"
        )
    page.body["parameters"] = "".join(parts)


# --- estimate --------------------------------------------------------------------------------


def _lost_reason(result: Mapping[str, Any]) -> str:
    details = result.get("estimator_details") or {}
    if details.get("reports_held"):
        return (
            f"{details['reports_held']} reports were held below the threshold "
            f"T = {result.get('threshold')}"
        )
    if details.get("complete") is False:
        return (
            f"{details.get('shares_received')} of {details.get('shares_expected')} Split-Mix "
            "shares reached the analyzer, so their sum is lost"
        )
    return "the estimator returned no value"


def _estimate_simulate(page: _Page, result: Mapping[str, Any]) -> None:
    est, truth, std = (
        nums(result.get("estimate")),
        nums(result.get("truth")),
        nums(result.get("expected_std")),
    )
    d = len(est)
    if not d:
        page.body["estimate"] = _absent("not in this result: the estimate is empty")
        return
    if len(truth) != d or len(std) != d:
        truth = (truth + [math.nan] * d)[:d]
        std = (std + [math.nan] * d)[:d]
    lost = not any(math.isfinite(v) for v in est)
    parts = []
    if lost:
        why = _lost_reason(result)
        parts.append(f'<p class="warn">The estimate is lost: {_e(why)}. It is shown as —.</p>')
        page.reading.append(f"The estimate is lost ({why}): there is no error to judge.")
    else:
        parts.append(_plots.estimate_svg(est, truth, std))
        parts.append(
            '<p class="note">Dots: the analyzer\'s estimate with error bars ±2 expected std; '
            "crosses: the truth.</p>"
        )
    errors = [e - t for e, t in zip(est, truth, strict=True)]
    fin = [(e, s) for e, s in zip(errors, std, strict=True) if math.isfinite(e)]
    rms_std = (
        math.sqrt(sum(s * s for _, s in fin) / len(fin))
        if fin and all(math.isfinite(s) for _, s in fin)
        else math.nan
    )
    within = sum(1 for e, s in fin if math.isfinite(s) and abs(e) <= 2 * s)
    summary = [
        ("RMSE", result.get("rmse")),
        ("max |error|", result.get("max_abs_error")),
        ("expected std (RMS over the entries)", rms_std),
        ("RMSE / expected std", num(result.get("rmse")) / rms_std if rms_std > 0 else math.nan),
        ("entries within ±2 std", f"{within} of {len(fin)}" if fin else "—"),
    ]
    parts.append(_table(["quantity", "value"], summary))
    if d <= 64:
        parts.append(
            _table(
                ["entry", "estimate", "truth", "error", "expected std", "error / std"],
                [
                    (i, e, t, e - t, s, (e - t) / s if s > 0 and math.isfinite(s) else math.nan)
                    for i, (e, t, s) in enumerate(zip(est, truth, std, strict=True))
                ],
            )
        )
    else:
        parts.append(f'<p class="note">{d} entries: the per-entry table is left out.</p>')
    details = result.get("estimator_details")
    if isinstance(details, Mapping) and details:
        parts.append("<h3>Estimator details</h3>")
        parts.append(_table(["quantity", "value"], [(k, _show(v)) for k, v in details.items()]))
    page.body["estimate"] = "".join(parts)
    if not lost and fin:
        ratio = num(result.get("rmse")) / rms_std if rms_std > 0 else math.nan
        verdict = (
            "consistent with the stated error"
            if ratio <= 1.5
            else "larger than the stated error: the stated std understates it"
        )
        page.reading.append(
            f"Accuracy: the RMSE is {fmt(result.get('rmse'))} against an expected std of "
            f"{fmt(rms_std)} ({fmt(ratio, 3)}×), and {within} of {len(fin)} entries lie "
            f"within ±2 std (about 95 % are expected when the std is right): {verdict}."
        )


def _read_rows(result: Mapping[str, Any], base: Path | None) -> tuple[list[dict[str, Any]], str]:
    """The experiments CSV's rows (numbers parsed), or why they could not be read."""
    raw = result.get("csv")
    if not raw:
        return [], "the result names no CSV"
    candidates = [Path(str(raw))]
    if base is not None:
        candidates += [base / str(raw), base / Path(str(raw)).name]
    for path in candidates:
        if path.is_file():
            break
    else:
        return [], f"its CSV {raw} is not found next to it"
    rows: list[dict[str, Any]] = []
    with path.open(newline="") as f:
        for rec in csv.DictReader(f):
            row: dict[str, Any] = dict(rec)
            for key, text in rec.items():
                if key in ("category", "sweep", "method", "family", "status", "reason"):
                    continue
                try:
                    row[key] = float(text) if text not in (None, "") else math.nan
                except ValueError:
                    row[key] = text
            rows.append(row)
    return rows, ""


def _default_rows(rows: Sequence[Mapping[str, Any]], result: Mapping[str, Any]) -> list[Any]:
    """One row per method at the default point (the first sweep that passes through it)."""
    defaults = result.get("defaults") or {}
    seen: dict[str, Mapping[str, Any]] = {}
    for r in rows:
        sweep = r.get("sweep")
        if sweep in defaults and math.isclose(num(r.get("value")), num(defaults[sweep])):
            seen.setdefault(str(r.get("method")), r)
    return list(seen.values())


def _se(row: Mapping[str, Any]) -> float:
    """The error bar of an experiments row's RMSE: its per-run spread over √runs (NaN if the
    CSV has none)."""
    runs = num(row.get("repeats"))
    return num(row.get("rmse_sd")) / math.sqrt(runs) if runs > 0 else math.nan


def _proves_weaker(row: Mapping[str, Any]) -> bool:
    """Whether an experiments row's protocol proves a larger ε_c than the point requested."""
    proven, asked = num(row.get("epsilon_central")), num(row.get("epsilon"))
    return math.isfinite(proven) and proven > asked * (1.0 + 1e-9)


def _estimate_experiments(
    page: _Page, result: Mapping[str, Any], rows: Sequence[Mapping[str, Any]], why: str
) -> None:
    if not rows:
        page.body["estimate"] = _absent(f"not in this result: {why}.")
        return
    ran = [r for r in rows if r.get("status") == "ok"]
    spread = any(math.isfinite(num(r.get("rmse_sd"))) for r in ran)
    bars = (
        "error bars: ±1 standard error over the runs (the standard deviation of the per-run "
        "RMSEs, CSV column rmse_sd, over √runs)"
        if spread
        else "no error bars: "
        + (
            "one run per point"
            if all(num(r.get("repeats")) <= 1 for r in ran)
            else "this CSV has no per-run spread (column rmse_sd, written by later versions)"
        )
    )
    parts = [
        '<p class="sub">An experiment has no single truth: each point\'s RMSE over its runs '
        f"(solid; {bars}) against the RMSE the estimators state (dashed). A point ringed red "
        "proves a larger ε_c than requested.</p>"
    ]
    for sweep in result.get("sweeps") or {}:
        methods: dict[str, dict[str, list[float]]] = {}
        for r in ran:
            if r.get("sweep") != sweep:
                continue
            s = methods.setdefault(
                str(r["method"]), {"x": [], "rmse": [], "expected": [], "se": [], "weaker": []}
            )
            s["x"].append(num(r.get("value")))
            s["rmse"].append(num(r.get("rmse")))
            s["expected"].append(num(r.get("expected_rmse")))
            s["se"].append(_se(r))
            s["weaker"].append(1.0 if _proves_weaker(r) else 0.0)
        if methods:
            parts.append(f"<h3>Sweep over {_e(sweep)}</h3>")
            parts.append(_plots.sweep_svg(str(sweep), methods))
    at_default = _default_rows(rows, result)
    parts.append("<h3>At the default point</h3>")
    cpu = any(math.isfinite(num(r.get("analyzer_cpu_seconds"))) for r in ran)
    timed = "analyzer_cpu_seconds" if cpu else "analyzer_seconds"
    parts.append(
        _table(
            [
                "method",
                "family",
                "RMSE",
                "± s.e.",
                "expected RMSE",
                "analyzer CPU s" if cpu else "analyzer wall s",
                "messages/user",
                "ε_c proven",
                "status",
            ],
            [
                (
                    r.get("method"),
                    r.get("family"),
                    r.get("rmse"),
                    _se(r),
                    r.get("expected_rmse"),
                    r.get(timed),
                    r.get("messages_per_user"),
                    r.get("epsilon_central"),
                    (
                        ("ok" if not _proves_weaker(r) else "ok, weaker ε_c than requested")
                        if r.get("status") == "ok"
                        else f"skipped: {r.get('reason')}"
                    ),
                )
                for r in at_default
            ],
        )
    )
    page.body["estimate"] = "".join(parts)
    ok = [r for r in at_default if r.get("status") == "ok" and math.isfinite(num(r.get("rmse")))]
    if ok:
        best = min(ok, key=lambda r: num(r.get("rmse")))
        page.reading.append(
            f"At the default point the smallest RMSE is {best['method']}'s "
            f"({fmt(best.get('rmse'))}, family {best.get('family')})."
        )
        for fam in ("ldp", "cdp"):
            base = [r for r in ok if r.get("family") == fam]
            if not base:
                continue
            ref = min(base, key=lambda r: num(r.get("rmse")))
            for r in ok:
                if r.get("family") == "shuffle" and num(ref.get("rmse")) > 0:
                    page.reading.append(
                        f"{r['method']}: {fmt(num(r.get('rmse')) / num(ref.get('rmse')), 3)}× "
                        f"the RMSE of the {fam.upper()} baseline {ref['method']}."
                    )
    off = [
        r
        for r in rows
        if r.get("status") == "ok"
        and num(r.get("expected_rmse")) > 0
        and num(r.get("rmse")) > 2 * num(r.get("expected_rmse"))
    ]
    if off:
        names = sorted({str(r["method"]) for r in off})
        page.reading.append(
            f"{len(off)} point(s) have an RMSE over twice the expected one ({', '.join(names)})"
            f"; with {fmt(result.get('repeats'))} run(s) per point that can be chance."
        )
    skipped = [r for r in rows if r.get("status") != "ok"]
    if skipped:
        page.reading.append(f"{len(skipped)} (point, method) pairs were skipped (see the CSV).")


# --- privacy ---------------------------------------------------------------------------------


def _privacy_scenarios(page: _Page, audit: Mapping[str, Any], intro: str) -> None:
    scenarios = [s for s in audit.get("scenarios") or [] if isinstance(s, Mapping)]
    if not scenarios:
        page.body["privacy"] = _absent("not in this result: the audit lists no scenarios")
        return
    rows: list[dict[str, Any]] = [
        {
            "scenario": s.get("scenario"),
            "upper": num(s.get("epsilon_upper")),
            "lower": num(s.get("epsilon_lower")),
        }
        for s in scenarios
    ]
    parts = [f'<p class="sub">{_e(intro)}</p>', _plots.privacy_svg(rows)]
    parts.append(
        _table(
            [
                "scenario",
                "ε upper",
                "bound",
                "ε lower",
                "exact lower",
                "measured lower",
                "honest users",
                "honest fakes",
                "what protects the user",
            ],
            [
                (
                    s.get("scenario"),
                    s.get("epsilon_upper"),
                    starred_bound(s.get("bound"), s.get("bound_method")),
                    s.get("epsilon_lower"),
                    s.get("epsilon_lower_exact"),
                    s.get("epsilon_lower_measured"),
                    s.get("honest_users"),
                    s.get("honest_fakes"),
                    s.get("explanation", ""),
                )
                for s in scenarios
            ],
        )
    )
    certified = [s for s in scenarios if s.get("bound_method") == "certified"]
    if certified:
        footnote = certified_footnote(num(certified[0].get("bound_tolerance")))
        parts.append(f'<p class="note">{footnote}.</p>')
    if audit.get("measured"):
        parts.append(
            f'<p class="note">Measured lower bounds: {fmt(audit.get("trials"))} runs per '
            f"dataset, holding jointly with {fmt(100 * num(audit.get('confidence')))} % "
            "confidence over the scenarios.</p>"
        )
    else:
        parts.append(
            '<p class="note">No measured lower bounds: the audit ran without --measure; '
            "the lower column holds the protocol's own exact lower bounds where it has any.</p>"
        )
    for key in ("note", "measure_note"):
        if audit.get(key):
            parts.append(f'<p class="note">{_e(audit[key])}</p>')
    if audit.get("violations"):
        parts.append(
            '<p class="warn">A lower bound is above the proven upper bound in: '
            f"{_e(', '.join(map(str, audit['violations'])))}: a bug in a bound.</p>"
        )
    page.body["privacy"] = "".join(parts)
    weakest = max(rows, key=lambda r: (r["upper"], str(r["scenario"])))
    strongest = min(rows, key=lambda r: r["upper"])
    bound_of = {str(s.get("scenario")): s.get("bound") for s in scenarios}
    page.reading.append(
        f"Collusion: the weakest scenario is “{weakest['scenario']}”, where a user keeps only "
        f"ε ≤ {fmt(weakest['upper'])} ({bound_of.get(str(weakest['scenario']))}); the "
        f"strongest is “{strongest['scenario']}” at ε ≤ {fmt(strongest['upper'])}."
    )
    gaps = [r for r in rows if math.isfinite(r["lower"]) and r["lower"] > 0]
    if gaps:
        worst = max(gaps, key=lambda r: r["upper"] / r["lower"])
        page.reading.append(
            f"Where a lower bound exists the upper bound is within "
            f"{fmt(worst['upper'] / worst['lower'], 3)}× of it at worst "
            f"(“{worst['scenario']}”)."
        )
    if audit.get("violations"):
        page.warnings.append(
            "A lower bound exceeds its proven upper bound: "
            + ", ".join(map(str, audit["violations"]))
        )


def _requested(page: _Page, requested: Any, stated: Any, bound: Any, warning: Any) -> None:
    req, got = num(requested), num(stated)
    if math.isnan(req):
        return
    if got <= req * (1 + 1e-9):
        page.reading.append(
            f"The request is met: the protocol states ε_c = {fmt(got)} by {bound}, at most "
            f"the requested {fmt(req)}."
        )
    else:
        text = str(warning) if warning else f"the protocol proves ε_c = {fmt(got)}"
        page.reading.append(f"The request is NOT met: {text} (requested ε_c = {fmt(req)}).")
        page.warnings.append(f"The stated ε_c ({fmt(got)}) is above the requested {fmt(req)}.")


def _privacy_experiments(page: _Page, rows: Sequence[Mapping[str, Any]], why: str) -> None:
    if not rows:
        page.body["privacy"] = _absent(f"not in this result: {why}.")
        return
    by: dict[str, list[Mapping[str, Any]]] = {}
    for r in rows:
        if r.get("family") == "shuffle":
            by.setdefault(str(r.get("method")), []).append(r)
    table = []
    unmet: list[str] = []
    for method, rs in by.items():
        ok = [r for r in rs if r.get("status") == "ok"]
        ratios = [num(r.get("epsilon_central")) / num(r.get("epsilon")) for r in ok]
        over = sum(1 for x in ratios if x > 1 + 1e-9)
        worst = max(ratios) if ratios else math.nan
        if over:
            unmet.append(method)
        table.append((method, len(ok), len(rs) - len(ok), over, worst))
    page.body["privacy"] = (
        '<p class="sub">Not in this result: an experiment states each point\'s ε_c but audits '
        "no collusion (run esa audit for a point). Stated against requested ε per protocol:</p>"
        + _table(
            ["protocol", "points run", "points skipped", "ε_c above request", "max ε_c / ε"],
            table,
        )
    )
    if unmet:
        page.reading.append(
            f"At some points the stated ε_c is above the requested ε: {', '.join(unmet)}."
        )
        page.warnings.append(f"Stated ε_c above the request: {', '.join(unmet)}.")
    elif table:
        page.reading.append("Every shuffle protocol states an ε_c at most the requested one.")


# --- amplification ---------------------------------------------------------------------------


def _curve_section(
    page: _Page,
    *,
    center: float,
    n: int,
    delta: float,
    k: int,
    family: str | None,
    points: list[tuple[str, float, float]],
    intro: str,
    target: float | None = None,
    lo: float | None = None,
    hi: float | None = None,
) -> None:
    curve = amplification_curve(center=center, n=n, delta=delta, k=k, family=family, lo=lo, hi=hi)
    if not curve.grid:
        page.body["amplification"] = _absent(
            f"not in this result: {curve.notes[0] if curve.notes else 'no ε_l'}."
        )
        return
    live = {name: ys for name, ys in curve.series.items() if any(math.isfinite(y) for y in ys)}
    parts = [f'<p class="sub">{_e(intro)}</p>']
    parts.append(_plots.curve_svg(curve.grid, live, points, target=target))
    dead = sorted(set(curve.series) - set(live))
    if dead:
        parts.append(
            '<p class="note">Not applicable anywhere on this range: ' + _e(", ".join(dead)) + "</p>"
        )
    for note in curve.notes:
        parts.append(f'<p class="note">{_e(note)}</p>')
    idx = min(range(len(curve.grid)), key=lambda i: abs(curve.grid[i] - center))
    parts.append(
        _table(
            ["bound", "families", f"ε_c at ε_l = {fmt(center)}"],
            [
                (name, ", ".join(curve.families.get(name, [])), ys[idx])
                for name, ys in curve.series.items()
            ],
        )
    )
    page.body["amplification"] = "".join(parts)


def _amplification_simulate(
    page: _Page, result: Mapping[str, Any], family: str | None, k: int
) -> None:
    eps_l = num(result.get("epsilon_local"))
    eps_c = num(result.get("epsilon_central"))
    bound = str(result.get("bound"))
    if not math.isfinite(eps_l):
        page.body["amplification"] = _absent(
            f"not in this result: ε_l = {fmt(eps_l)}: a single message is not ε-LDP for any "
            f"finite ε, so ε_c = {fmt(eps_c)} ({bound}) is not an amplification of an "
            "ε_l-LDP randomizer."
        )
        return
    from protocols import BOUNDS

    on_curve = bound in BOUNDS
    _curve_section(
        page,
        center=eps_l,
        n=int(num(result.get("n"))),
        delta=num(result.get("delta")),
        k=k,
        family=family,
        points=[(f"this run: {bound}", eps_l, eps_c)],
        intro=f"ε_c against ε_l under the bounds that hold for this protocol's randomizer "
        f"({family or 'every family'}, k = {k}) at n = {fmt(result.get('n'))}, "
        f"δ = {fmt(result.get('delta'))}; the star is the run's (ε_l, ε_c)"
        + ("." if on_curve else f"; its bound {bound} is the protocol's own, not on a curve."),
    )


# --- hops ------------------------------------------------------------------------------------

_HOP_COLUMNS = (
    "channel", "hop", "role", "received", "invalid", "replayed", "held", "fakes_added",
    "forwarded",
)  # fmt: skip


def _hops(page: _Page, result: Mapping[str, Any]) -> None:
    hops = [h for h in result.get("hops") or [] if isinstance(h, Mapping)]
    if not hops:
        page.body["hops"] = _absent("not in this result: this kind of result has no hops.")
        return
    cols = [c for c in _HOP_COLUMNS if any(c in h for h in hops)]
    cols += sorted({k for h in hops for k in h} - set(cols))
    parts = [_table(cols, [[h.get(c) for c in cols] for h in hops])]
    drop = result.get("drop_check")
    if isinstance(drop, Mapping):
        if drop.get("ok"):
            parts.append('<p class="note">Drop check: every hop\'s counters add up.</p>')
        else:
            problems = "; ".join(map(str, drop.get("problems") or []))
            parts.append(f'<p class="warn">Drop check failed: {_e(problems)}</p>')
            page.warnings.append(f"Drop check failed: {problems}")
    page.body["hops"] = "".join(parts)
    totals = {c: sum(int(num(h.get(c)) or 0) for h in hops if math.isfinite(num(h.get(c)))) for c in
              ("invalid", "replayed", "held", "fakes_added")}  # fmt: skip
    bad = [f"{v} {c}" for c, v in totals.items() if c != "fakes_added" and v]
    page.reading.append(
        "Hops: "
        + (", ".join(bad) + " report(s) dropped or held" if bad else "no report was dropped")
        + f"; the shufflers added {totals['fakes_added']} fakes in all."
    )


# --- per kind --------------------------------------------------------------------------------


def _simulate(page: _Page, result: Mapping[str, Any], compute: bool) -> None:
    _estimate_simulate(page, result)
    _requested(
        page,
        result.get("epsilon_requested"),
        result.get("epsilon_central"),
        result.get("bound"),
        result.get("privacy_warning"),
    )
    family: str | None = None
    k = int(num(result.get("domain")) if math.isfinite(num(result.get("domain"))) else 2)
    if compute:
        audit, why = audit_of_run(result)
    else:
        audit, why = None, "not in this result: the report was made without computing it"
    if audit is not None:
        family, k = audit.get("family"), int(num(audit.get("k")))
        _privacy_scenarios(
            page,
            audit,
            "Not stored in a simulate result: computed as esa audit does (no --measure) at "
            "the run's parameters. Upper bounds are proven; lower bounds are the protocol's "
            "own exact ones at δ, where it has any.",
        )
    else:
        page.body["privacy"] = _absent(why) + _table(
            ["scenario", "ε", "what protects the user"],
            [
                ("none", result.get("epsilon_central"), "the shuffle (the run's statement)"),
                ("all shufflers", result.get("epsilon_local"), "the local randomizer alone"),
            ],
        )
        page.reading.append(f"Collusion scenarios: {why}.")
    if compute:
        _amplification_simulate(page, result, family, k)
    else:
        page.body["amplification"] = _absent(
            "not in this result: the report was made without computing it"
        )
    _hops(page, result)
    if result.get("crypto") == "ideal":
        page.reading.append(
            "crypto = ideal: a plaintext stand-in ran the same shuffler logic; no encryption "
            "was exercised."
        )


def _audit(page: _Page, result: Mapping[str, Any], compute: bool) -> None:
    page.body["estimate"] = _absent(
        "not in this result: an audit runs no estimate (esa simulate does)."
    )
    claim = result.get("protocol_claim") or {}
    _requested(
        page,
        result.get("epsilon_requested"),
        claim.get("epsilon_central"),
        claim.get("bound"),
        result.get("privacy_warning"),
    )
    _privacy_scenarios(
        page,
        result,
        f"{result.get('protocol')}: proven upper bounds per scenario"
        + (", measured lower bounds from distinguishing attacks" if result.get("measured") else "")
        + ", and the protocol's own exact lower bounds at δ where it has any.",
    )
    eps_l = num(result.get("epsilon_local"))
    if not compute:
        page.body["amplification"] = _absent(
            "not in this result: the report was made without computing it"
        )
    elif not math.isfinite(eps_l):
        page.body["amplification"] = _absent(
            f"not in this result: ε_l = {fmt(eps_l)}: the randomizer alone is not ε-LDP for a "
            "finite ε, so its claim is no amplification of an ε_l-LDP randomizer."
        )
    else:
        _curve_section(
            page,
            center=eps_l,
            n=int(num(result.get("n"))),
            delta=num(result.get("delta")),
            k=int(num(result.get("k")) if math.isfinite(num(result.get("k"))) else 2),
            family=str(result.get("family")) if result.get("family") else None,
            points=[(f"claim: {claim.get('bound')}", eps_l, num(claim.get("epsilon_central")))],
            intro=f"ε_c against ε_l under the {result.get('family')} bounds "
            f"(k = {result.get('k')}) at n = {fmt(result.get('n'))}; the star is the "
            "protocol's claim.",
        )
    page.body["hops"] = _absent("not in this result: an audit runs no pipeline.")


def _amplify(page: _Page, result: Mapping[str, Any], compute: bool) -> None:
    page.body["estimate"] = _absent("not in this result: esa amplify runs no estimate.")
    page.body["privacy"] = _absent(
        "not in this result: esa amplify evaluates bounds for no protocol, so there are no "
        "collusion scenarios (esa audit has them). Its values are in the amplification section."
    )
    page.body["hops"] = _absent("not in this result: esa amplify runs no pipeline.")
    bounds = [b for b in result.get("bounds") or [] if isinstance(b, Mapping)]
    forward = result.get("epsilon_local") is not None
    n, delta = int(num(result.get("n"))), num(result.get("delta"))
    k = int(num(result.get("domain")) if math.isfinite(num(result.get("domain"))) else 2)
    table = _table(
        ["bound", "families", "ε_c" if forward else "ε_l", "method, or why not", "citation"],
        [
            (
                b.get("bound"),
                ", ".join(map(str, b.get("families") or [])),
                b.get("value"),
                b.get("reason") or method_label(b.get("method"), num(b.get("tolerance"))),
                b.get("citation") or "",
            )
            for b in bounds
        ],
    )
    if forward:
        center = num(result.get("epsilon_local"))
        points = [
            (str(b.get("bound")), center, num(b.get("value")))
            for b in bounds
            if math.isfinite(num(b.get("value"))) and b.get("bound") != "local_dp"
        ]
        lo = hi = None
        target = None
    else:
        target = num(result.get("epsilon_central"))
        values = [num(b.get("value")) for b in bounds if math.isfinite(num(b.get("value")))]
        points = [
            (str(b.get("bound")), num(b.get("value")), target)
            for b in bounds
            if math.isfinite(num(b.get("value")))
        ]
        center = max(values) if values else math.nan
        lo = min(values) / 3 if values else None
        hi = center * 1.5 if values else None
    if compute:
        _curve_section(
            page,
            center=center,
            n=n,
            delta=delta,
            k=k,
            family=None,
            points=points,
            target=target,
            lo=lo,
            hi=hi,
            intro=f"Every registered bound at n = {fmt(n)}, δ = {fmt(delta)} (krr bounds at "
            f"k = {k}); stars: the values of this result.",
        )
        page.body["amplification"] += table
    else:
        page.body["amplification"] = table
    tight = result.get("tightest") or {}
    for fam, best in tight.items():
        if isinstance(best, Mapping):
            v = num(best.get("value"))
            label = method_label(best.get("method"), num(best.get("tolerance")))
            how = f" ({label})" if label else ""
            if forward:
                page.reading.append(
                    f"{fam} randomizers: the tightest bound is {best.get('bound')}, ε_c = "
                    f"{fmt(v)}{how} from ε_l = {fmt(center)} "
                    f"({fmt(center / v, 3) if v > 0 else '—'}× amplification)."
                )
            else:
                page.reading.append(
                    f"{fam} randomizers: the largest ε_l for ε_c = {fmt(target)} is "
                    f"{fmt(v)} ({best.get('bound')}{', ' + label if label else ''})."
                )
        else:
            page.reading.append(f"{fam} randomizers: no bound applies at these parameters.")
    idle = sum(1 for b in bounds if not math.isfinite(num(b.get("value"))))
    if idle:
        page.reading.append(f"{idle} of {len(bounds)} bounds do not apply here (see why not).")


def _experiments(page: _Page, result: Mapping[str, Any], base: Path | None) -> None:
    rows, why = _read_rows(result, base)
    _estimate_experiments(page, result, rows, why)
    _privacy_experiments(page, rows, why)
    page.body["amplification"] = _absent(
        "not in this result: every point of a sweep has its own ε_l and bound (see the CSV); "
        "esa amplify draws one point's curve."
    )
    page.body["hops"] = _absent("not in this result: an experiment keeps no per-hop counters.")
    if result.get("skipped"):
        page.reading.append(f"Skipped protocols: {_show_text(result['skipped'])}.")


# --- page ------------------------------------------------------------------------------------


def _title(kind: str, result: Mapping[str, Any]) -> str:
    if kind in ("simulate", "audit"):
        return f"esa {kind}: {result.get('protocol')}, n = {fmt(result.get('n'))}"
    if kind == "amplify":
        return f"esa amplify: n = {fmt(result.get('n'))}, {result.get('direction')}"
    return f"esa experiments: {result.get('category')}"


def render_html(
    result: Mapping[str, Any], *, inline: bool = True, compute: bool = True, base: Any = None
) -> str:
    """The report of an ``esa`` JSON result, as HTML that needs nothing else to display.

    Every report has the sections of :data:`SECTIONS` (their ids); one that the result
    cannot fill says so. CSS is inline, plots are inline SVG (matplotlib), there is no
    script and no external resource.

    Args:
        result: what ``esa simulate --json``, ``audit --json``, ``amplify --json`` or
            ``experiments --json`` printed (parsed), or ``RunResult.to_json()``; extra fields
            are shown; a null its ``non_finite`` lists as ``"inf"`` is shown ∞, one listed
            ``"nan"`` (a lost estimate) and an absent value (a null not listed) —; older
            results' ``"inf"`` strings and float inf/NaN are read too.
        inline: True: an HTML fragment (one ``<div>`` with its scoped ``<style>``) to show
            inline in another page, as Jupyter's ``_repr_html_`` does; False: a complete
            standalone document.
        compute: compute what the result does not store (a simulated run's collusion
            scenarios, the amplification curves: up to some seconds at large n); False
            leaves those sections saying so.
        base: the directory that relative paths of the result (an experiment's CSV) are
            relative to, usually the JSON file's.

    Returns:
        The HTML.

    Raises:
        ReportError: ``result`` is of no known kind.
    """
    kind = detect_kind(result)
    result = decode(result)  # the nulls non_finite lists, as the floats they stand for
    page = _Page(kind=kind)
    _parameters(page, result)
    if kind == "simulate":
        _simulate(page, result, compute)
    elif kind == "audit":
        _audit(page, result, compute)
    elif kind == "amplify":
        _amplify(page, result, compute)
    else:
        _experiments(page, result, Path(base) if base is not None else None)
    sentences = "".join(f"<li>{_e(s)}</li>" for s in page.reading)
    page.body["reading"] = (
        f'<ul class="reading">{sentences}</ul>'
        if sentences
        else _absent("nothing in this result to read a conclusion from.")
    )
    title = _title(kind, result)
    parts = [f'<div class="esa-report" data-kind="{_e(kind)}"><style>{_CSS}</style>']
    parts.append(f"<h1>{_e(title)}</h1>")
    for w in page.warnings:
        parts.append(f'<p class="warn">{_e(w)}</p>')
    for sid, heading in SECTIONS:
        body = page.body.get(sid) or _absent("not in this result.")
        parts.append(f'<section id="{sid}"><h2>{_e(heading)}</h2>{body}</section>')
    parts.append("</div>")
    fragment = "".join(parts)
    if inline:
        return fragment
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
        "style-src 'unsafe-inline'; img-src data:\">"
        f"<title>{_e(title)}</title></head><body>{fragment}</body></html>\n"
    )
