"""Reading an ``esa`` JSON result: its kind, its numbers.

A document written by :func:`esa.json_document` holds every non-finite number as ``null``
and lists its place in ``non_finite`` (``"inf"``, ``"-inf"`` or ``"nan"``); a ``null`` not
listed is an absent value. :func:`decode` puts the listed numbers back as floats, so that
``∞`` shows as ∞ and a lost estimate (NaN) or an absent value as —. Older results, which
wrote ``"inf"`` strings and no ``non_finite``, are read too (:func:`num`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from esa import ESAError

__all__ = ["KINDS", "ReportError", "decode", "detect_kind", "fmt", "num", "nums"]

#: the kinds of result a report is made for, by the command that prints them
KINDS: tuple[str, ...] = ("simulate", "audit", "amplify", "experiments")

#: a ``command`` field's first word → kind (``demo`` prints a simulate result)
_COMMAND_KINDS = {
    "simulate": "simulate",
    "demo": "simulate",
    "audit": "audit",
    "amplify": "amplify",
    "experiments": "experiments",
}


class ReportError(ESAError, ValueError):
    """A result the report cannot be made for: not an object, or of no known kind.

    An :class:`esa.ESAError`, so the ``esa`` command prints it as one line (exit 2)."""


#: ``non_finite``'s words → the floats they stand for
_NON_FINITE = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}


def decode(result: Mapping[str, Any]) -> dict[str, Any]:
    """``result`` with every ``null`` its ``non_finite`` lists as the float it stands for.

    Places are found by walking the document and naming each ``null`` as
    :func:`esa.json_document` does (keys joined by ``.``, list indices in brackets), so a
    key with a dot in it is matched too. A ``null`` not listed stays ``None`` (absent); a
    result without ``non_finite`` (older ones, or a ``to_json()`` object holding floats)
    is returned as it is, copied.

    Args:
        result: a parsed JSON result.

    Returns:
        A new dict; ``result`` is not changed.
    """
    listed = result.get("non_finite")
    flags = (
        {str(k): _NON_FINITE[v] for k, v in listed.items() if v in _NON_FINITE}
        if isinstance(listed, Mapping)
        else {}
    )

    def walk(value: Any, path: str) -> Any:
        if value is None:
            return flags.get(path)
        if isinstance(value, Mapping):
            return {k: walk(v, f"{path}.{k}" if path else str(k)) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [walk(v, f"{path}[{i}]") for i, v in enumerate(value)]
        return value

    return {k: (v if k == "non_finite" else walk(v, str(k))) for k, v in result.items()}


def num(value: Any) -> float:
    """A JSON number as a float: ``"inf"``/``"-inf"``/``"nan"`` their floats; ``null`` (an
    absent value, once :func:`decode` has put back the listed non-finite numbers) is NaN,
    which :func:`fmt` shows as —, as it does a NaN.

    Args:
        value: what the decoded JSON (or ``to_json()``) holds: a number, None, a numpy
            scalar or one of the strings older ``esa`` results wrote for non-finite values.

    Returns:
        The float; NaN for anything that is not a number (a bool, another string, a list).
    """
    if value is None or isinstance(value, bool):
        return math.nan
    if isinstance(value, str):
        text = value.strip().lower()
        if text in ("inf", "+inf", "infinity", "∞"):
            return math.inf
        if text in ("-inf", "-infinity", "−∞", "-∞"):
            return -math.inf
        return math.nan
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def nums(values: Any) -> list[float]:
    """A JSON list of numbers (or one number) as floats, see :func:`num`.

    Args:
        values: a list, a tuple, a numpy array, a single number or None.

    Returns:
        The floats (empty for None).
    """
    if values is None:
        return []
    if hasattr(values, "tolist"):
        values = values.tolist()
    if isinstance(values, list | tuple):
        return [num(v) for v in values]
    return [num(values)]


def fmt(value: Any, digits: int = 4) -> str:
    """A number as the report prints it: ``∞`` for infinity, ``—`` for no value.

    Args:
        value: anything :func:`num` reads; an int is printed exactly.
        digits: significant digits of a float.

    Returns:
        The text.
    """
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}" if abs(value) >= 10_000 else str(value)
    v = num(value)
    if math.isnan(v):
        return "—"
    if math.isinf(v):
        return "∞" if v > 0 else "−∞"
    if v == int(v) and abs(v) < 1e7:
        return fmt(int(v))
    return f"{v:.{digits}g}"


def _command_kind(result: Mapping[str, Any]) -> str | None:
    command = result.get("command")
    if isinstance(command, list | tuple):
        words = [str(w) for w in command]
    elif isinstance(command, str):
        words = command.split()
    else:
        return None
    for word in words:
        base = word.rsplit("/", 1)[-1]
        if base in _COMMAND_KINDS:
            return _COMMAND_KINDS[base]
    return None


def detect_kind(result: Any) -> str:
    """Which command printed ``result``, from its fields (``command`` only breaks ties).

    Args:
        result: a parsed JSON result.

    Returns:
        One of :data:`KINDS`.

    Raises:
        ReportError: ``result`` is not an object, or has none of the fields of a kind.
    """
    if not isinstance(result, Mapping):
        raise ReportError(f"a result is a JSON object, got {type(result).__name__}")
    found = []
    if "estimate" in result and "hops" in result:
        found.append("simulate")
    if "scenarios" in result and "protocol_claim" in result:
        found.append("audit")
    if "bounds" in result and "direction" in result:
        found.append("amplify")
    if "category" in result and "sweeps" in result:
        found.append("experiments")
    if len(found) == 1:
        return found[0]
    by_command = _command_kind(result)
    if by_command is not None and (not found or by_command in found):
        return by_command
    if found:
        raise ReportError(f"the result has the fields of several kinds: {', '.join(found)}")
    raise ReportError(
        "not a result of esa simulate, audit, amplify or experiments: none of their fields "
        "(estimate+hops, scenarios+protocol_claim, bounds+direction, category+sweeps)"
    )
