"""Users' real data for a protocol: a column of a CSV or Parquet file, or an array from Python.

A protocol takes values of one :class:`~protocols.InputKind`: 0-based category indices, bits,
reals in [0, 1] or [-1, 1], or membership rows. Real data rarely comes that way, so
:func:`prepare_values` maps it, and says what it did in a :class:`PreparedData`:

* **categories** (``CATEGORICAL``) are labels: each distinct label is a bin, in sorted order
  (numerically when every label is a number), or in the order the caller gives; the mapping is
  part of the result, so an estimate's bin ``j`` can be read back as its label;
* **bits** (``BINARY``) are ``0``/``1``, ``true``/``false`` or ``yes``/``no`` (any case);
* **reals** (``REAL01``, ``REAL_PM1``) are numbers; with ``value_range=(lo, hi)`` they are first
  mapped linearly from ``[lo, hi]`` onto the protocol's range. A value outside the range is
  clipped (``out_of_range="clip"``, counted in ``clipped``) or refused (``"refuse"``);
* **sets** (``SET``) are lists of labels separated by ``;`` (``"a;c"``), one row per user;
* a **missing** value (an empty cell, ``NA``, ``None``, NaN) is an error that names its row.

Clipping is what a bounded-sensitivity mechanism needs anyway: the privacy guarantee is for
the clipped values, and the result states how many were clipped so the estimate is read for
what it is. Nothing here draws randomness; the same file gives the same values.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from protocols import InputKind, RNGLike, ShuffleProtocol, as_generator

from ._errors import DataError

__all__ = [
    "DISTRIBUTIONS",
    "PreparedData",
    "as_column",
    "prepare_values",
    "read_column",
    "synthetic_values",
]

OutOfRange = Literal["clip", "refuse"]

#: Cell texts read as a missing value.
_MISSING = frozenset({"", "na", "n/a", "nan", "null", "none"})
_TRUE = frozenset({"1", "true", "yes"})
_FALSE = frozenset({"0", "false", "no"})


@dataclass(frozen=True, slots=True)
class PreparedData:
    """Values ready for a protocol, and what was done to get them.

    Attributes:
        values: the protocol's input (``validate_values`` accepts it).
        kind: the input kind they were prepared for.
        rows: users (rows of the column).
        categories: for ``CATEGORICAL`` and ``SET``, the label of each bin (bin ``j`` is
            ``categories[j]``); ``None`` otherwise.
        clipped: real values moved onto the range's end (``out_of_range="clip"``).
        value_range: the ``(lo, hi)`` mapped onto the protocol's range, if any.
        source: where the values came from (``"FILE:COLUMN"`` or ``"array"``).
    """

    values: npt.NDArray[Any]
    kind: InputKind
    rows: int
    categories: tuple[str, ...] | None = None
    clipped: int = 0
    value_range: tuple[float, float] | None = None
    source: str = "array"
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def domain(self) -> int | None:
        """Bins the categories need (``None`` for bits and reals)."""
        return None if self.categories is None else len(self.categories)

    def sum_in_data_units(
        self, estimate: npt.ArrayLike, truth: npt.ArrayLike, expected_std: npt.ArrayLike
    ) -> dict[str, Any] | None:
        """A real column's sum in the column's own units, or ``None`` when there is no such
        reading (categories, bits, or reals given on the protocol's own scale).

        The real-valued protocols estimate the sum of the users' values on their own scale
        ([0, 1] or [−1, 1]); ``value_range=(a, b)`` mapped each value x onto it as
        lo + (x − a)·(hi − lo)/(b − a). The affine map back, Σx = (S − n·lo)·(b − a)/(hi − lo)
        + n·a, applies to the estimate and the truth alike (the truth of the column after
        clipping, :attr:`clipped`) and scales the std by (b − a)/(hi − lo). It is stated only
        when ``truth`` is that sum of the mapped values (checked), so no reading is offered
        for a statistic that is not one.

        Args:
            estimate: the protocol's estimate, on its own scale.
            truth: the statistic the estimate targets, on the protocol's scale.
            expected_std: the estimate's stated std, on the protocol's scale.

        Returns:
            ``{"statistic": "sum", "estimate", "truth", "expected_std", "scale", "offset"}``
            (lists of floats; the map is x ↦ scale·x + offset), or ``None``.
        """
        if self.value_range is None or self.kind not in (InputKind.REAL01, InputKind.REAL_PM1):
            return None
        a, b = self.value_range
        lo, hi = (0.0, 1.0) if self.kind is InputKind.REAL01 else (-1.0, 1.0)
        t = np.atleast_1d(np.asarray(truth, dtype=np.float64))
        mapped_sum = float(np.sum(np.asarray(self.values, dtype=np.float64)))
        if t.shape != (1,) or not np.isclose(t[0], mapped_sum, rtol=1e-9, atol=1e-9):
            return None
        scale = (b - a) / (hi - lo)
        offset = self.rows * a - self.rows * lo * scale

        def units(x: npt.ArrayLike) -> list[float]:
            mapped = np.atleast_1d(np.asarray(x, dtype=np.float64)) * scale + offset
            return [float(v) for v in mapped]

        std = np.atleast_1d(np.asarray(expected_std, dtype=np.float64))
        return {
            "statistic": "sum",
            "estimate": units(estimate),
            "truth": units(t),
            "expected_std": [float(v) for v in std * scale],
            "scale": scale,
            "offset": offset,
        }

    def to_json(self) -> dict[str, Any]:
        """What the output of a run on this data states about it.

        Returns:
            Its source, rows, kind, categories, clipping and value range, as a JSON object.
        """
        return {
            "source": self.source,
            "rows": self.rows,
            "kind": self.kind.value,
            "categories": list(self.categories) if self.categories is not None else None,
            "clipped": self.clipped,
            "value_range": list(self.value_range) if self.value_range is not None else None,
        }


def read_column(path: str | Path, column: str) -> npt.NDArray[np.object_]:
    """One column of a CSV file (header row first) or, with pyarrow installed, a Parquet file.

    Args:
        path: the file; ``.parquet`` / ``.pq`` are read as Parquet, anything else as CSV.
        column: the column's name in the header.

    Returns:
        The cells as Python objects (strings for CSV), one per data row, in file order.

    Raises:
        DataError: no such column, an empty file, a row with too few cells, or a Parquet file
            without pyarrow.
        OSError: the file cannot be read (the caller reports the path).
    """
    path = Path(path)
    if path.suffix.lower() in (".parquet", ".pq"):
        return _read_parquet(path, column)
    with path.open(newline="", encoding="utf-8-sig") as f:
        reader = csv.reader(f)
        try:
            header = next(reader)
        except StopIteration:
            raise DataError(f"{path}: empty file, expected a header row") from None
        names = [h.strip() for h in header]
        if column not in names:
            raise DataError(f"{path}: no column {column!r}; the header has: {', '.join(names)}")
        at = names.index(column)
        cells: list[str] = []
        for line, row in enumerate(reader, start=2):
            if not row:
                row = [""] * len(names)  # a blank line is a user whose every cell is missing
            if at >= len(row):
                raise DataError(f"{path}: line {line} has {len(row)} cells, no {column!r}")
            cells.append(row[at])
    return np.array(cells, dtype=object)


def _read_parquet(path: Path, column: str) -> npt.NDArray[np.object_]:
    try:
        import pyarrow.parquet as pq  # optional: only for Parquet files
    except ImportError:
        raise DataError(f"{path}: reading Parquet needs pyarrow (pip install pyarrow)") from None
    table = pq.read_table(path)
    if column not in table.column_names:
        names = ", ".join(table.column_names)
        raise DataError(f"{path}: no column {column!r}; the file has: {names}")
    return np.array(table.column(column).to_pylist(), dtype=object)


def as_column(data: Any) -> npt.NDArray[Any]:
    """A 1-D array (or 2-D boolean rows) from a list, numpy array, pandas Series or pyarrow array.

    Args:
        data: the values; pandas and pyarrow objects are recognized by their conversion
            methods, so neither library is needed to use this function.

    Returns:
        The values as a numpy array (objects where the input mixes types).

    Raises:
        DataError: a scalar, or an array of more than two dimensions.
    """
    if hasattr(data, "to_numpy") and not isinstance(data, np.ndarray):
        try:  # pyarrow arrays need zero_copy_only=False where nulls are present
            data = data.to_numpy(zero_copy_only=False)
        except TypeError:
            data = data.to_numpy()
    elif hasattr(data, "to_pylist"):
        data = data.to_pylist()
    arr = np.asarray(data, dtype=None if isinstance(data, np.ndarray) else object)
    if arr.dtype == object and arr.size:
        arr = _narrow(arr)
    if arr.ndim not in (1, 2):
        raise DataError(f"data must be one value per user (1-D), got shape {arr.shape}")
    return arr


def _narrow(arr: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """An object array of plain numbers or bools as a numeric array; others unchanged."""
    flat = arr.ravel()
    if all(isinstance(v, bool | np.bool_) for v in flat):
        return arr.astype(bool)
    if all(isinstance(v, int | np.integer) and not isinstance(v, bool) for v in flat):
        return arr.astype(np.int64)
    return arr


def _missing(value: Any) -> bool:
    if value is None:
        return True
    if isinstance(value, float | np.floating):
        return math.isnan(value)
    return isinstance(value, str) and value.strip().lower() in _MISSING


def _row(index: int, source: str) -> str:
    """How an error names a value: the line of a CSV (header is line 1), else the index."""
    if source == "array":
        return f"index {index}"
    return f"row {index + 1} (line {index + 2})"


def prepare_values(
    data: Any,
    kind: InputKind,
    *,
    domain: int | None = None,
    categories: Sequence[str] | None = None,
    value_range: tuple[float, float] | None = None,
    out_of_range: OutOfRange = "clip",
    source: str = "array",
) -> PreparedData:
    """Map users' raw values onto what a protocol of input kind ``kind`` takes.

    Args:
        data: one value per user: a column from :func:`read_column`, a list, a numpy array,
            a pandas Series or a pyarrow array.
        kind: the protocol's :class:`~protocols.InputKind`.
        domain: for ``CATEGORICAL``/``SET``, the protocol's number of bins: the data's
            categories must fit (bins past the data's last category stay empty).
        categories: for ``CATEGORICAL``/``SET``, the labels in bin order; a value not among them
            is an error. Default: the data's distinct labels, sorted.
        value_range: for the real kinds, ``(lo, hi)`` mapped linearly onto the protocol's range.
        out_of_range: ``"clip"`` (default; counted) or ``"refuse"`` a real value outside the
            range.
        source: how errors name the data (``"FILE:COLUMN"``; ``"array"`` names indices).

    Returns:
        The prepared values and what was done to them.

    Raises:
        DataError: a missing value (naming its row), a value that is not of the kind (naming its
            row), more categories than ``domain``, a value outside ``categories``, a value outside
            the range with ``out_of_range="refuse"``, or a bad ``value_range``.
    """
    if out_of_range not in ("clip", "refuse"):
        raise DataError(f"out_of_range must be 'clip' or 'refuse', got {out_of_range!r}")
    arr = as_column(data)
    if kind is not InputKind.SET and arr.ndim != 1:
        raise DataError(f"{kind.value} data must be one value per user, got shape {arr.shape}")
    if arr.ndim == 1 and (arr.dtype == object or arr.dtype.kind == "f"):
        for i, v in enumerate(arr.tolist()):
            if _missing(v):
                raise DataError(f"{source}: missing value at {_row(i, source)}")
    if kind is InputKind.CATEGORICAL:
        return _categorical(arr, domain, categories, source)
    if kind is InputKind.BINARY:
        return _binary(arr, source)
    if kind in (InputKind.REAL01, InputKind.REAL_PM1):
        return _real(arr, kind, value_range, out_of_range, source)
    if kind is InputKind.SET:
        return _sets(arr, domain, categories, source)
    raise DataError(f"no data preparation for input kind {kind.value}")  # pragma: no cover


def _label(value: Any) -> str:
    if isinstance(value, float | np.floating) and float(value).is_integer():
        return str(int(value))
    return str(value).strip()


def _sorted_labels(labels: set[str]) -> list[str]:
    try:
        return sorted(labels, key=float)
    except ValueError:
        return sorted(labels)


def _bins(
    labels: list[str], domain: int | None, categories: Sequence[str] | None, source: str
) -> tuple[dict[str, int], tuple[str, ...]]:
    if categories is not None:
        order = [str(c) for c in categories]
        if len(set(order)) != len(order):
            raise DataError("categories must be distinct")
    else:
        order = _sorted_labels(set(labels))
    if domain is not None and len(order) > domain:
        raise DataError(
            f"{source}: {len(order)} categories do not fit the protocol's domain of {domain} "
            "bins (raise --domain, or merge categories)"
        )
    return {c: j for j, c in enumerate(order)}, tuple(order)


def _categorical(
    arr: npt.NDArray[Any], domain: int | None, categories: Sequence[str] | None, source: str
) -> PreparedData:
    labels = [_label(v) for v in arr.tolist()]
    index, order = _bins(labels, domain, categories, source)
    out = np.empty(len(labels), dtype=np.int64)
    for i, label in enumerate(labels):
        j = index.get(label)
        if j is None:
            raise DataError(f"{source}: {label!r} at {_row(i, source)} is not a known category")
        out[i] = j
    return PreparedData(out, InputKind.CATEGORICAL, len(out), categories=order, source=source)


def _binary(arr: npt.NDArray[Any], source: str) -> PreparedData:
    out = np.empty(arr.shape[0], dtype=np.int64)
    for i, v in enumerate(arr.tolist()):
        text = _label(v).lower()
        if text in _TRUE:
            out[i] = 1
        elif text in _FALSE:
            out[i] = 0
        else:
            raise DataError(
                f"{source}: {v!r} at {_row(i, source)} is not a bit (0/1, true/false, yes/no)"
            )
    return PreparedData(out, InputKind.BINARY, len(out), source=source)


def _real(
    arr: npt.NDArray[Any],
    kind: InputKind,
    value_range: tuple[float, float] | None,
    out_of_range: OutOfRange,
    source: str,
) -> PreparedData:
    values = np.empty(arr.shape[0], dtype=np.float64)
    for i, v in enumerate(arr.tolist()):
        try:
            x = float(v)
        except (TypeError, ValueError):
            raise DataError(f"{source}: {v!r} at {_row(i, source)} is not a number") from None
        if not math.isfinite(x):
            raise DataError(f"{source}: {v!r} at {_row(i, source)} is not a finite number")
        values[i] = x
    lo, hi = (0.0, 1.0) if kind is InputKind.REAL01 else (-1.0, 1.0)
    if value_range is not None:
        a, b = (float(value_range[0]), float(value_range[1]))
        if not (math.isfinite(a) and math.isfinite(b) and a < b):
            raise DataError(f"value range must be two finite numbers lo < hi, got {value_range!r}")
        values = lo + (values - a) * ((hi - lo) / (b - a))
    outside = np.flatnonzero((values < lo) | (values > hi))
    if outside.size and out_of_range == "refuse":
        i = int(outside[0])
        bounds = [lo, hi] if value_range is None else [float(value_range[0]), float(value_range[1])]
        raise DataError(
            f"{source}: {arr.tolist()[i]!r} at {_row(i, source)} lies outside the range "
            f"{bounds} ({outside.size} of {len(values)} values do; clip them with "
            "out_of_range='clip')"
        )
    values = np.clip(values, lo, hi)
    return PreparedData(
        values,
        kind,
        len(values),
        clipped=int(outside.size),
        value_range=None if value_range is None else (float(value_range[0]), float(value_range[1])),
        source=source,
    )


def _sets(
    arr: npt.NDArray[Any], domain: int | None, categories: Sequence[str] | None, source: str
) -> PreparedData:
    if arr.ndim == 2:  # already membership rows
        if arr.dtype.kind not in "biu":
            raise DataError(f"set rows must be booleans or 0/1, got {arr.dtype}")
        rows = arr.astype(bool)
        order = (
            tuple(categories) if categories is not None else tuple(map(str, range(rows.shape[1])))
        )
        return PreparedData(rows, InputKind.SET, rows.shape[0], categories=order, source=source)
    members = [[m.strip() for m in str(v).split(";") if m.strip()] for v in arr.tolist()]
    index, order = _bins([m for ms in members for m in ms], domain, categories, source)
    width = domain if domain is not None else len(order)
    rows = np.zeros((len(members), width), dtype=bool)
    for i, ms in enumerate(members):
        for m in ms:
            j = index.get(m)
            if j is None:
                raise DataError(f"{source}: {m!r} at {_row(i, source)} is not a known category")
            rows[i, j] = True
    return PreparedData(rows, InputKind.SET, len(members), categories=order, source=source)


#: Synthetic data: distribution name → what it means, per input kind.
DISTRIBUTIONS: dict[str, str] = {
    "zipf": "Zipf-like: P(j) ∝ 1/(j+1)^1.1 over the domain (categorical); skewed for others",
    "uniform": "every value equally likely",
    "gaussian": "a discretized normal centred in the domain (sd = domain/6)",
}


def _categorical_draw(name: str, d: int, n: int, rng: np.random.Generator) -> npt.NDArray[np.int64]:
    j = np.arange(d, dtype=np.float64)
    if name == "zipf":
        w = 1.0 / (j + 1.0) ** 1.1
    elif name == "uniform":
        w = np.ones(d)
    else:
        w = np.exp(-0.5 * ((j - (d - 1) / 2) / max(d / 6, 1e-9)) ** 2)
    return rng.choice(d, size=n, p=w / w.sum())


def compact_values(protocol: ShuffleProtocol, values: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """Users' binary or categorical values in the narrowest unsigned dtype that holds them.

    A run keeps its users' values from start to end (the truth is computed from them): as
    ``int64`` they are a word per user, 0.8 GB at 10^8 users, where hist_kr's 16 bins fit
    a byte. :func:`esa.run_pipeline` hands protocols ``int64`` chunks of them, so every
    randomizer sees what it saw before.

    Args:
        protocol: the configured protocol (its input kind and domain).
        values: values ``protocol.validate_values`` accepts.

    Returns:
        The same values, narrowed (a new array); any other kind of values, unchanged.
    """
    kind = protocol.input_kind
    x = np.asarray(values)
    if kind not in (InputKind.BINARY, InputKind.CATEGORICAL) or x.dtype.kind not in "iu":
        return values
    hi = 1 if kind is InputKind.BINARY else max(protocol.domain - 1, 0)
    narrow = np.min_scalar_type(hi)
    if narrow.itemsize >= x.dtype.itemsize:
        return values
    x = protocol.validate_values(x)  # a value outside [0, hi] must fail, not wrap
    return x.astype(narrow)


def synthetic_values(
    protocol: ShuffleProtocol, n: int, distribution: str, *, rng: RNGLike
) -> npt.NDArray[Any]:
    """``n`` synthetic users' values of the kind ``protocol`` takes, drawn from ``distribution``.

    Args:
        protocol: the configured protocol (its input kind and domain).
        n: users.
        distribution: a name of :data:`DISTRIBUTIONS`.
        rng: the generator of the data, or a seed (:data:`~protocols.RNGLike`).

    Returns:
        Values ``protocol.validate_values`` accepts.

    Raises:
        DataError: an unknown distribution.
        ParameterError: an ``rng`` that is not :data:`~protocols.RNGLike`.
    """
    rng = as_generator(rng)
    if distribution not in DISTRIBUTIONS:
        raise DataError(
            f"unknown distribution {distribution!r}; choose one of: {', '.join(DISTRIBUTIONS)}"
        )
    kind = protocol.input_kind
    d = protocol.domain
    if kind is InputKind.CATEGORICAL:
        return _categorical_draw(distribution, d, n, rng)
    if kind is InputKind.BINARY:
        p = {"zipf": 0.1, "uniform": 0.5, "gaussian": 0.3}[distribution]
        return (rng.random(n) < p).astype(np.int64)
    if kind in (InputKind.REAL01, InputKind.REAL_PM1):
        draw: Callable[[], npt.NDArray[np.float64]] = {
            "zipf": lambda: rng.beta(0.5, 3.0, n),
            "uniform": lambda: rng.random(n),
            "gaussian": lambda: np.clip(rng.normal(0.5, 1 / 6, n), 0.0, 1.0),
        }[distribution]
        x = draw()
        return x if kind is InputKind.REAL01 else 2.0 * x - 1.0
    if kind is InputKind.SET:
        # Each user holds one element (a one-hot row); distinct elements = support size.
        items = _categorical_draw(distribution, d, n, rng)
        rows = np.zeros((n, d), dtype=bool)
        rows[np.arange(n), items] = True
        return rows
    raise DataError(f"no data generator for input kind {kind.value}")  # pragma: no cover
