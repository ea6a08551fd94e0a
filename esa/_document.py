"""JSON documents: one type per field, and the metadata that lets a result be trusted later.

Every document has, first, ``schema_version`` (:data:`esa._version.SCHEMA_VERSION`),
``version`` (the ``esa-shuffle`` package's), ``command`` (the argv list that made it, or
``null``), ``parameters`` (the parsed arguments, an object) and ``seed`` (an integer, or
``null`` where nothing random ran); then the body; last ``non_finite``.

The rule for non-finite numbers: JSON has none, so every non-finite float (±inf, NaN) is
written as ``null``, and ``non_finite`` maps the place of each such value to ``"inf"``,
``"-inf"`` or ``"nan"`` (an empty object when there is none). A place is the path from the
top: keys joined by ``.``, list indices in brackets, e.g. ``expected_std[3]`` or
``bounds[2].value``. A ``null`` not listed there is a plain absence (no value), never a
number.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from ._version import SCHEMA_VERSION, __version__

__all__ = ["HEAD_FIELDS", "json_document", "json_safe"]

#: The metadata fields every document starts with, in order.
HEAD_FIELDS = ("schema_version", "version", "command", "parameters", "seed")


def json_safe(obj: Any, non_finite: dict[str, str], path: str = "") -> Any:
    """``obj`` with numpy values as Python ones, tuples as lists, paths as text, and every
    non-finite float as ``None``, recorded in ``non_finite`` under its path.

    Args:
        obj: a value made of mappings, lists, tuples, numpy arrays and scalars.
        non_finite: filled with path → ``"inf"``, ``"-inf"`` or ``"nan"``.
        path: the place of ``obj`` in the document (``""`` at the top).

    Returns:
        A value :func:`json.dumps` writes with ``allow_nan=False``.
    """
    if isinstance(obj, Mapping):
        return {
            str(k): json_safe(v, non_finite, f"{path}.{k}" if path else str(k))
            for k, v in obj.items()
        }
    if isinstance(obj, np.ndarray):
        return json_safe(obj.tolist(), non_finite, path)
    if isinstance(obj, list | tuple):
        return [json_safe(v, non_finite, f"{path}[{i}]") for i, v in enumerate(obj)]
    if isinstance(obj, np.generic):
        return json_safe(obj.item(), non_finite, path)
    if isinstance(obj, os.PathLike):
        return os.fspath(obj)
    if isinstance(obj, float) and not math.isfinite(obj):
        non_finite[path] = "nan" if math.isnan(obj) else ("inf" if obj > 0 else "-inf")
        return None
    return obj


def json_document(
    body: Mapping[str, Any], metadata: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """``body`` as a document: the metadata fields, the body's own, then ``non_finite``.

    Idempotent: a document passed again keeps its metadata (unless ``metadata`` gives other
    values) and its ``non_finite`` entries.

    Args:
        body: the command's result.
        metadata: ``command``, ``parameters`` and ``seed`` (each optional).

    Returns:
        A JSON-safe dict (see the module docstring for the rule on non-finite numbers).
    """
    meta = dict(metadata or {})
    found: dict[str, str] = dict(body.get("non_finite") or {})
    head: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "version": __version__,
        "command": meta.get("command", body.get("command")),
        "parameters": meta.get("parameters", body.get("parameters", {})),
        "seed": meta.get("seed", body.get("seed")),
    }
    rest = {k: v for k, v in body.items() if k not in HEAD_FIELDS and k != "non_finite"}
    doc: dict[str, Any] = json_safe({**head, **rest}, found)
    doc["non_finite"] = dict(sorted(found.items()))
    return doc
