"""The ``<category>.csv`` of a run: writing it, reading it back exactly, and checking that
its rows are what a run of a plan writes."""

from __future__ import annotations

import csv
import dataclasses
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, get_type_hints

from esa import ESAError, json_document
from protocols import ParameterError

from .plan import CATEGORIES, ExperimentPlan, Row, grid_points, ok_rows, runs_text

__all__ = [
    "ADDED_FIELDS",
    "CSV_FIELDS",
    "TIMING_FIELDS",
    "ExperimentsCSVError",
    "check_grid",
    "csv_repeats",
    "meta_path",
    "read_csv",
    "write_csv",
    "write_meta",
]

CSV_FIELDS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(Row))

#: The columns that time a point: the only ones two runs with the same seed may differ in
#: (wall and CPU time depend on the machine and its load).
TIMING_FIELDS: tuple[str, ...] = (
    "analyzer_seconds",
    "total_seconds",
    "analyzer_cpu_seconds",
    "total_cpu_seconds",
)

#: Columns that CSVs of earlier versions lack: :func:`read_csv` reads such a CSV, with NaN
#: in them (no error bars from the per-run spread, wall time in the timing plots).
ADDED_FIELDS: tuple[str, ...] = ("rmse_sd", "analyzer_cpu_seconds", "total_cpu_seconds")

#: The header of a CSV without :data:`ADDED_FIELDS`.
_EARLIER_FIELDS: tuple[str, ...] = tuple(f for f in CSV_FIELDS if f not in ADDED_FIELDS)


def write_csv(rows: Sequence[Row], path: Path) -> None:
    with path.open("w", newline="", encoding="utf-8") as fh:  # reasons quote δ, ε
        w = csv.writer(fh)
        w.writerow(CSV_FIELDS)
        for row in rows:
            w.writerow([_csv_value(getattr(row, f)) for f in CSV_FIELDS])


def meta_path(csv_path: Path) -> Path:
    """The sidecar of a CSV: ``<name>.meta.json`` next to ``<name>.csv``."""
    return csv_path.with_name(f"{csv_path.stem}.meta.json")


def write_meta(
    csv_path: Path, metadata: Mapping[str, Any], body: Mapping[str, Any] | None = None
) -> Path:
    """Write the sidecar of ``csv_path`` (:func:`meta_path`): the JSON document of the run
    that wrote the CSV — ``schema_version``, ``version``, ``command``, ``parameters``,
    ``seed`` (:func:`esa.json_document`) — with ``csv`` (the file's name), ``columns``
    (:data:`CSV_FIELDS`) and ``body``'s fields.

    Args:
        csv_path: the CSV the sidecar describes.
        metadata: ``command``, ``parameters`` and ``seed`` of the run.
        body: more fields (e.g. the category and the plan).

    Returns:
        The sidecar's path.
    """
    path = meta_path(csv_path)
    doc = json_document(
        {"csv": csv_path.name, "columns": list(CSV_FIELDS), **(body or {})}, metadata
    )
    with path.open("w", encoding="utf-8") as fh:
        json.dump(doc, fh, indent=2, allow_nan=False)
        fh.write("\n")
    return path


def _csv_value(v: Any) -> Any:
    if isinstance(v, float):
        return "" if math.isnan(v) else f"{v:.6g}"
    return v


class ExperimentsCSVError(ESAError, ValueError):
    """A CSV given to :func:`read_csv` or :func:`rebuild_experiments` is not one that
    :func:`write_csv` wrote for that category and grid."""


#: column → the type :func:`read_csv` gives it back as (``Row``'s annotations)
_CSV_TYPES: dict[str, Any] = get_type_hints(Row)
#: the values the run writes in its text columns (a skipped point's reason is free text)
_CSV_CHOICES: dict[str, tuple[str, ...]] = {
    "family": ("shuffle", "ldp", "cdp"),
    "status": ("ok", "skipped"),
    "crypto": ("ideal", "onion", "none"),
    "representation": ("", "reports", "tally"),
}


def read_csv(path: Path, *, category: str) -> list[Row]:
    """The rows of a ``<category>.csv`` that :func:`write_csv` wrote: its exact inverse.

    Integer columns come back as ``int``, the other numbers as ``float`` at the CSV's six
    significant digits, an empty number cell as :data:`math.nan`, text (a skipped point's
    reason, an empty ``representation``) as written; ``write_csv`` of the result writes the
    same file again. A CSV of an earlier version, whose header is :data:`CSV_FIELDS`
    without :data:`ADDED_FIELDS`, is read too, with NaN in those columns (``write_csv``
    then writes them as empty cells).

    Args:
        path: the CSV.
        category: the category every row must belong to.

    Returns:
        The rows in the file's order.

    Raises:
        ExperimentsCSVError: the file cannot be read, its header is not :data:`CSV_FIELDS`,
            a row has another number of cells, a cell does not parse as its column's type
            or is not one of the values the run writes there, or a row is of another
            category.
        ParameterError: ``category`` is not one of :data:`CATEGORIES`.
    """
    if category not in CATEGORIES:
        raise ParameterError(f"unknown category {category!r}; choose one of {CATEGORIES}")
    try:
        with path.open(newline="", encoding="utf-8") as fh:
            reader = csv.reader(fh)
            records = [(reader.line_num, record) for record in reader]
    except OSError as exc:
        raise ExperimentsCSVError(f"cannot read {path}: {exc.strerror or exc}") from None
    except (UnicodeDecodeError, csv.Error) as exc:
        raise ExperimentsCSVError(f"{path} is not a CSV of esa experiments: {exc}") from None
    if not records:
        raise ExperimentsCSVError(f"{path} is empty: expected the header {','.join(CSV_FIELDS)}")
    header = tuple(records[0][1])
    if header not in (CSV_FIELDS, _EARLIER_FIELDS):
        # Against the earlier header when the file has none of the added columns.
        fields = CSV_FIELDS if set(ADDED_FIELDS) & set(header) else _EARLIER_FIELDS
        missing = [f for f in fields if f not in header]
        unknown = [f for f in header if f not in fields]
        problems = ([f"missing {', '.join(missing)}"] if missing else []) + (
            [f"unknown {', '.join(unknown)}"] if unknown else []
        )
        raise ExperimentsCSVError(
            f"{path} is not a CSV of esa experiments: header columns "
            + ("; ".join(problems) or f"not in the order {','.join(fields)}")
        )
    rows: list[Row] = []
    for line, record in records[1:]:
        where = f"{path}, line {line}"
        if len(record) != len(header):
            raise ExperimentsCSVError(f"{where}: {len(record)} cells, expected {len(header)}")
        row = Row(
            **{
                name: _parse_cell(name, cell, where)
                for name, cell in zip(header, record, strict=True)
            }
        )
        if row.category != category:
            raise ExperimentsCSVError(f"{where}: a {row.category} row, not {category}")
        rows.append(row)
    return rows


def _parse_cell(name: str, cell: str, where: str) -> Any:
    """One cell back to its column's type (inverse of :func:`_csv_value`)."""
    kind = _CSV_TYPES[name]
    if kind is str:
        choices = _CSV_CHOICES.get(name)
        if choices is not None and cell not in choices:
            raise ExperimentsCSVError(
                f"{where}: column {name}: {cell!r} is not one of {', '.join(map(repr, choices))}"
            )
        return cell
    if kind is float and cell == "":
        return math.nan  # the module's constant: rows compare equal to the run's
    try:
        value = kind(cell)
    except ValueError:
        what = "an integer" if kind is int else "a number"
        raise ExperimentsCSVError(f"{where}: column {name}: {cell!r} is not {what}") from None
    return math.nan if kind is float and math.isnan(value) else value


def _as_written(v: float) -> float:
    """``v`` as a CSV cell gives it back: six significant digits."""
    return float(f"{v:.6g}")


def csv_repeats(rows: Sequence[Row], path: Path) -> int | None:
    """The runs per point of a CSV's rows (None when no point ran)."""
    found = sorted({r.repeats for r in ok_rows(rows)})
    if len(found) > 1 or (found and found[0] < 1):
        raise ExperimentsCSVError(
            f"{path}: rows that ran have repeats {', '.join(map(str, found))}; "
            "a run uses one value >= 1"
        )
    return found[0] if found else None


def check_grid(rows: Sequence[Row], plan: ExperimentPlan, path: Path) -> None:
    """Raise unless ``rows`` are what a run of ``plan`` writes: every point of the plan
    (coordinates as the CSV gives them back), the same methods at each, ``plan.repeats``
    runs wherever a method ran."""
    grid = f"the {'quick' if plan.quick else 'full'} {plan.category} grid"
    hint = f" (was it written {'without' if plan.quick else 'with'} --quick?)"
    expected = {(sweep, _as_written(value)): point for sweep, value, point in grid_points(plan)}
    methods_at: dict[tuple[str, float], list[str]] = {}
    for r in rows:
        at = f"{r.method} @ {r.sweep}={r.value:g}"
        point = expected.get((r.sweep, r.value))
        if point is None:
            values = plan.sweeps.get(r.sweep)
            have = f"{r.sweep} ∈ {[f'{v:g}' for v in values]}" if values else f"no {r.sweep} sweep"
            raise ExperimentsCSVError(f"{path}: {at} is not a point of {grid} ({have}){hint}")
        coords: dict[str, float] = {
            "n": int(point["n"]),
            "domain": int(point["domain"]),
            "epsilon": _as_written(point["epsilon"]),
            "delta": _as_written(point["delta"]),
            "skew": _as_written(point["skew"]),
        }
        wrong = [
            f"{k}={getattr(r, k):g} (grid: {v:g})" for k, v in coords.items() if getattr(r, k) != v
        ]
        if wrong:
            raise ExperimentsCSVError(f"{path}: {at} has {', '.join(wrong)}, unlike {grid}{hint}")
        if r.status == "ok" and r.repeats != plan.repeats:
            raise ExperimentsCSVError(
                f"{path}: {at} ran {runs_text(r.repeats)}, "
                f"the plan {runs_text(plan.repeats)} per point"
            )
        methods = methods_at.setdefault((r.sweep, r.value), [])
        if r.method in methods:
            raise ExperimentsCSVError(f"{path}: two rows for {at}")
        methods.append(r.method)
    missing = [
        f"{sweep}={value:g}" for sweep, value in expected if (sweep, value) not in methods_at
    ]
    if missing:
        raise ExperimentsCSVError(f"{path}: no rows for {', '.join(missing)} of {grid}")
    if not methods_at:  # a plan without points, and no rows
        return
    first, *others = methods_at.items()
    for (sweep, value), methods in others:
        if sorted(methods) != sorted(first[1]):
            raise ExperimentsCSVError(
                f"{path}: methods at {sweep}={value:g} ({', '.join(methods)}) differ from "
                f"those at {first[0][0]}={first[0][1]:g} ({', '.join(first[1])})"
            )
