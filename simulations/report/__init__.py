"""HTML reports of ``esa`` results: one self-contained page per JSON result.

A report is made for what ``esa simulate --json``, ``esa audit --json``, ``esa amplify
--json`` or ``esa experiments --json`` prints; the kind is read from the fields. The page
states the parameters and version, the estimate against the truth (±2 expected std), the
privacy under every collusion scenario, the amplification curve around the chosen point, the
per-hop counters, and a short reading of the numbers. It needs nothing to display: inline
CSS, inline SVG plots drawn with matplotlib, no script, no font, no network.

Example:
    >>> from simulations.report import write_report
    >>> write_report(result, "run.html")  # doctest: +SKIP
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ._page import SECTIONS, render_html
from ._values import KINDS, ReportError, detect_kind

__all__ = [
    "KINDS",
    "SECTIONS",
    "ReportError",
    "detect_kind",
    "load_result",
    "register_jupyter",
    "render_html",
    "write_report",
]


def load_result(path: str | os.PathLike[str]) -> dict[str, Any]:
    """A JSON result file, parsed (``NaN``/``Infinity`` literals accepted).

    Args:
        path: the file.

    Returns:
        The object.

    Raises:
        ReportError: the file is not JSON, or not a JSON object.
        OSError: the file cannot be read.
    """
    text = Path(path).read_text(encoding="utf-8")
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ReportError(f"{path}: not JSON ({exc})") from None
    if not isinstance(obj, dict):
        raise ReportError(f"{path}: a result is a JSON object, got {type(obj).__name__}")
    return obj


def write_report(
    result: Mapping[str, Any],
    path: str | os.PathLike[str],
    *,
    compute: bool = True,
    base: str | os.PathLike[str] | None = None,
) -> None:
    """Write the standalone HTML report of ``result`` to ``path``.

    This is what a command's ``--report FILE.html`` calls with the object it prints.

    Args:
        result: an ``esa`` JSON result (as printed, or the object before printing: numpy
            values and float inf/NaN are read too).
        path: the HTML file to write (replaced if it exists).
        compute: compute a simulated run's collusion scenarios and the amplification
            curves (see :func:`render_html`).
        base: the directory the result's relative paths are relative to (default: the
            current directory).

    Raises:
        ReportError: ``result`` is of no known kind.
        OSError: ``path`` cannot be written.
    """
    page = render_html(result, inline=False, compute=compute, base=base)
    target = Path(path)
    tmp = target.with_name(f".{target.name}.tmp")
    tmp.write_text(page, encoding="utf-8")
    tmp.replace(target)


def register_jupyter(classes: tuple[type, ...] | None = None) -> bool:
    """Show results as reports in Jupyter/IPython, for classes without ``_repr_html_``.

    The formatter calls ``to_json()`` and :func:`render_html`. By default it registers
    :class:`esa.RunResult` (``esa`` cannot import this package, so it cannot call the report
    itself).

    Args:
        classes: the classes to register (each with a ``to_json()``); default
            ``(esa.RunResult,)``.

    Returns:
        True if registered, False when no IPython shell is running.
    """
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    if shell is None:
        return False
    if classes is None:
        import esa

        classes = (esa.RunResult,)
    formatter = shell.display_formatter.formatters["text/html"]
    for cls in classes:
        formatter.for_type(cls, lambda obj: render_html(obj.to_json()))
    return True
