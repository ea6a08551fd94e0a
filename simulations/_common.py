"""Helpers every ``esa`` subcommand shares: errors, JSON output, tables, progress."""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import re
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, NoReturn

import numpy as np

import esa
from crypto import CryptoError
from esa import ESAError, json_document
from esa._document import json_safe
from protocols import ProtocolError

__all__ = [
    "ERROR_ROOTS",
    "MAX_DOMAIN",
    "MAX_USERS",
    "UsageError",
    "WeakerThanRequested",
    "certified_footnote",
    "domain",
    "emit_json",
    "error_exit",
    "invocation",
    "is_misuse",
    "json_metadata",
    "method_label",
    "parameter_errors",
    "parse_options",
    "plain_text",
    "print_table",
    "progress",
    "seed",
    "set_invocation",
    "starred_bound",
    "to_jsonable",
    "users",
]


class UsageError(Exception):
    """Bad command-line input: printed as one line, exit code 2."""


#: A run proves a larger ε than the user requested (and ``--allow-weaker`` is not given):
#: printed as one line, exit code 1 (esa's error, so ``esa.simulate`` and the commands agree).
WeakerThanRequested = esa.WeakerThanRequested


def seed(text: str) -> int:
    """argparse type of ``--seed``: an integer >= 0 (numpy's generators take no negatives)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid seed {text!r}: not an integer") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"invalid seed {value}: must be >= 0")
    return value


#: Most users an ``esa`` command takes: more than the world's population (8·10^9), and where
#: the numerical accountants step aside (their binomial laws leave double precision and
#: grow to millions of points); above it a run only allocates and computes for minutes.
MAX_USERS = 10**10


def _at_most(text: str, maximum: int, what: str) -> int:
    """``text`` as an integer of at most ``maximum`` (an argparse type error otherwise)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid int value: {text!r}") from None
    if value > maximum:
        raise argparse.ArgumentTypeError(f"invalid value {value}: at most {what}")
    return value


def users(text: str) -> int:
    """argparse type of ``--n``: an integer of at most :data:`MAX_USERS` (the commands
    check the lower bound, which differs between them)."""
    return _at_most(
        text,
        MAX_USERS,
        f"{MAX_USERS:.0e} users (more than the world's population; the numerical "
        "accountants step aside above it)",
    )


#: Largest domain ``esa simulate`` and ``esa demo`` take, as DisEle's ``MAX_DOMAIN``: the
#: histogram estimators, the truth and the per-entry tables hold several d-sized arrays
#: (hist_kr at d = 10^6 takes 45 s; at 10^8, minutes and over 4 GB for 200 users).
MAX_DOMAIN = 1 << 20


def domain(text: str) -> int:
    """argparse type of ``--domain``: an integer of at most :data:`MAX_DOMAIN` (each
    protocol checks its own lower bound)."""
    return _at_most(
        text, MAX_DOMAIN, f"{MAX_DOMAIN} (2^20) values (the estimators hold several d-sized arrays)"
    )


def error_exit(prog: str, message: str) -> NoReturn:
    """Print ``PROG: error: MESSAGE`` as one line on stderr and exit with code 2."""
    one_line = " ".join(str(message).split())
    print(f"{prog}: error: {one_line}", file=sys.stderr)
    raise SystemExit(2)


#: The root of each of our error hierarchies: crypto and protocols import nothing of ours,
#: so each layer has its own (``esa`` re-exports the lower layers' errors).
ERROR_ROOTS: tuple[type[Exception], ...] = (CryptoError, ProtocolError, ESAError, UsageError)


def is_misuse(exc: BaseException) -> bool:
    """Whether ``exc`` is a *misuse* error of ours: a ValueError that is also an instance of
    one of :data:`ERROR_ROOTS` (a bad parameter, a malformed key or config).

    The type decides, not the module that defines it: a ValueError raised by numpy or the
    standard library on our behalf is no misuse of ours, but a bug to be shown in full.
    """
    return isinstance(exc, ValueError) and isinstance(exc, ERROR_ROOTS)


@contextlib.contextmanager
def parameter_errors() -> Iterator[None]:
    """Turn the errors a user's input causes into a :class:`UsageError` (one line, exit 2).

    Those are the misuse errors of :func:`is_misuse`, and every :class:`esa.ESAError`: the
    roles' failures at run time (a peer that closed, a damaged inbox) are the outcome of the
    configuration and peers the user gave, not bugs. Anything else keeps its traceback.

    Raises:
        UsageError: from the error it replaces (its ``__cause__``).
    """
    try:
        yield
    except (UsageError, WeakerThanRequested):
        raise
    except ESAError as exc:
        raise UsageError(str(exc)) from exc
    except ValueError as exc:
        if is_misuse(exc):
            raise UsageError(str(exc)) from exc
        raise


#: Options whose value is a name, not a number (e.g. put's --option counter=cnt_pure).
NAME_OPTIONS = frozenset({"counter", "encoding", "allocation"})


def parse_options(items: list[str]) -> dict[str, float | str]:
    """``--option KEY=VALUE`` flags as a protocol's options (numbers, or names for
    :data:`NAME_OPTIONS`); a malformed one is a usage error."""
    out: dict[str, float | str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"--option expects KEY=VALUE, got {item!r}")
        if key in out:  # the last would silently win
            raise UsageError(f"--option {key} given twice")
        if key in NAME_OPTIONS:
            out[key] = value
            continue
        try:
            out[key] = float(value)
        except ValueError:
            raise UsageError(f"--option {key}: {value!r} is not a number") from None
    return out


def to_jsonable(obj: Any) -> Any:
    """Convert numpy scalars/arrays to Python values and non-finite floats to ``None`` (a
    document records where in its ``non_finite``: :func:`esa.json_document`)."""
    return json_safe(obj, {})


#: The invocation :func:`emit_json` describes: set by :func:`set_invocation` (the CLI's
#: ``main``) before a command runs.
_INVOCATION: dict[str, Any] = {}


def set_invocation(argv: Sequence[str], args: argparse.Namespace) -> None:
    """Record the command line and its parsed arguments for :func:`invocation`."""
    params = {k: v for k, v in vars(args).items() if k not in ("handler", "command")}
    seed_value = params.get("seed")
    _INVOCATION.clear()
    _INVOCATION.update(
        command=["esa", *argv],
        parameters=json_safe(params, {}),
        seed=seed_value if isinstance(seed_value, int) else None,
    )


def update_parameters(**values: Any) -> None:
    """Record values a command resolved itself (e.g. ``n`` from the rows of ``--data``) in the
    parameters :func:`invocation` reports."""
    parameters = dict(_INVOCATION.get("parameters", {}))
    parameters.update(json_safe(values, {}))
    _INVOCATION["parameters"] = parameters


def invocation(**overrides: Any) -> dict[str, Any]:
    """The metadata of the running command (``command``, ``parameters``, ``seed``) for
    :func:`esa.json_document`; ``overrides`` replace fields, e.g. the seed a command
    applies when ``--seed`` is not given."""
    return {**_INVOCATION, **overrides}


def json_metadata(path: Any, **overrides: Any) -> None:
    """Write the metadata document of an output file (e.g. a CSV) at ``path``."""
    doc = json_document({}, invocation(**overrides))
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(doc, fh, indent=2, allow_nan=False)
        fh.write("\n")


def emit_json(obj: Mapping[str, Any], **overrides: Any) -> None:
    """Print ``obj`` as one JSON document on stdout: the metadata of the running command
    first (:func:`invocation`; ``overrides`` replace its fields), every non-finite number as
    ``null`` with its place in ``non_finite`` (:func:`esa.json_document`)."""
    doc = json_document(obj, invocation(**overrides))
    json.dump(doc, sys.stdout, indent=2, allow_nan=False)
    sys.stdout.write("\n")


#: A column at most this wide is kept on one line; wider ones may wrap (by word, or folded).
_NARROW = 20

#: The least width a wrapping column is given before it moves below the table instead.
_MIN_WRAP = 18

_ROLE = re.compile(r":[\w:.-]+:`~?([^`]*)`")
_LITERAL = re.compile(r"``(.*?)``")
_BACKTICK = re.compile(r"(?<![\w`])`([^`\n]+)`(?![\w`])")
_STRONG = re.compile(r"(?<!\*)\*\*([^*\n]+)\*\*(?!\*)")


def plain_text(text: str) -> str:
    """``text`` without reStructuredText or Markdown markup: ````x````, ``:func:`x```,
    `` `x` `` and ``**x**`` become x (a table shows docstring-derived text as it reads)."""
    text = _ROLE.sub(r"\1", text)
    text = _LITERAL.sub(r"\1", text)
    text = _BACKTICK.sub(r"\1", text)
    return _STRONG.sub(r"\1", text)


def console(*, stderr: bool = False) -> Any:
    """The rich Console the commands print through: the terminal's width, or ``COLUMNS``
    (80 when neither says) when the output is a file or a pipe."""
    from rich.console import Console

    return Console(stderr=stderr)


def _cell_width(text: str) -> int:
    from rich.cells import cell_len

    return max((cell_len(line) for line in text.splitlines()), default=0)


def _table_layout(
    headers: Sequence[str], cells: Sequence[Sequence[str]], width: int
) -> tuple[list[int], list[int]]:
    """Which columns go in the table and which below it, for a console ``width`` wide.

    Narrow columns keep their width; wide ones wrap. When even that leaves a wide column
    less than :data:`_MIN_WRAP` characters, the widest one moves out of the table (shown
    below it, row by row), until the rest fits; the first column (the row's name) stays."""
    natural = [
        max([_cell_width(h), *(_cell_width(row[i]) for row in cells)])
        for i, h in enumerate(headers)
    ]
    keep = list(range(len(headers)))
    below: list[int] = []

    def needed(cols: list[int]) -> int:
        inner = sum(
            natural[i] if natural[i] <= _NARROW else min(natural[i], _MIN_WRAP) for i in cols
        )
        return inner + 3 * len(cols) + 1  # one space of padding each side, and the rules

    while needed(keep) > width:
        wide = [i for i in keep[1:] if natural[i] > _NARROW]
        if not wide:
            break
        widest = max(wide, key=lambda i: natural[i])
        keep.remove(widest)
        below.append(widest)
    return keep, sorted(below)


def _header_words(header: str) -> list[str]:
    return header.replace("_", " ").split() or [header]


def _fold_headers(
    headers: list[str], cells: Sequence[Sequence[str]], keep: list[int], width: int
) -> list[str]:
    """Headers of narrow columns folded onto several lines when the table is still wider
    than ``width``: a column of short numbers under a long name (``fakes_added``) then takes
    the width of its cells or of its longest word, not of its name, and nothing is cropped."""
    natural = {
        i: max([_cell_width(headers[i]), *(_cell_width(row[i]) for row in cells)]) for i in keep
    }
    if sum(natural.values()) + 3 * len(keep) + 1 <= width:
        return headers
    import textwrap

    folded = list(headers)
    for i in keep:
        body = max((_cell_width(row[i]) for row in cells), default=0)
        words = _header_words(headers[i])
        column = max(body, *(_cell_width(w) for w in words))
        if natural[i] <= _NARROW and column < natural[i]:
            folded[i] = "\n".join(textwrap.wrap(" ".join(words), width=column))
    return folded


def print_table(
    title: str,
    columns: Sequence[str],
    rows: Sequence[Sequence[Any]],
    caption: str | None = None,
) -> None:
    """A table on stdout that reads at the console's width (80 columns included).

    Narrow columns stay on one line; wide ones wrap by word (a long word is folded); when
    the console is too narrow even for that, the widest columns are printed below the table,
    one paragraph per row (``NAME — COLUMN: text``). Docstring markup (````x````) is shown
    as plain text; plain text (no colour, no control codes) when stdout is not a terminal.
    """
    import textwrap

    from rich.markup import escape
    from rich.table import Table

    out = console()
    headers = [plain_text(str(c)) for c in columns]
    cells = [[_fmt(v) for v in row] for row in rows]
    keep, below = _table_layout(headers, cells, out.width)
    headers = _fold_headers(headers, cells, keep, out.width)
    table = Table(
        title=escape(plain_text(title)),
        caption=escape(plain_text(caption)) if caption else None,
        caption_justify="left",
    )
    for i in keep:
        natural = max([_cell_width(headers[i]), *(_cell_width(row[i]) for row in cells)])
        if natural <= _NARROW:
            table.add_column(escape(headers[i]), no_wrap=True, min_width=natural)
        else:
            table.add_column(escape(headers[i]), overflow="fold", ratio=1, min_width=_MIN_WRAP)
    for row in cells:
        table.add_row(*(escape(row[i]) for i in keep))
    out.print(table)
    for i in below:
        for row in cells:
            if not row[i].strip():
                continue
            text = textwrap.fill(
                f"{row[0]} — {headers[i]}: {' '.join(row[i].split())}",
                width=max(out.width - 1, 20),
                subsequent_indent="    ",
                break_on_hyphens=False,
            )
            out.print(text, markup=False, highlight=False, soft_wrap=True)


def _fmt(v: Any) -> str:
    """A cell's text: floats to 4 significant digits, docstring markup removed."""
    if isinstance(v, float | np.floating):
        return f"{float(v):.4g}"
    return plain_text(str(v))  # escaped for rich where it is printed: "[d]" is text


#: How often a job whose stderr is not a terminal writes a progress line, in seconds.
LINE_INTERVAL = 5.0


def task_workers(
    workers: int | None, cluster: str | None, *, in_process: bool = False
) -> int | None:
    """The local worker processes a command's tasks run on (``--workers``'s default).

    ``workers`` when given; ``None`` with a ``cluster`` (its workers decide); otherwise every
    core this process may use (:func:`esa.available_cores`), or ``None`` (one task after the
    other in this process) on a single core or where ``in_process`` says the tasks already
    use every core themselves (an onion grid's runs, whose crypto has a pool of its own).
    Where the tasks run never changes what they return.
    """
    if workers is not None or cluster is not None:
        return workers
    cores = esa.available_cores()
    return None if in_process or cores == 1 else cores


@contextlib.contextmanager
def progress(enabled: bool, *, name: str | None = None, unit: str | None = None) -> Iterator[Any]:
    """A rich Progress on stderr for a long job on a terminal; plain lines off one.

    Progress never goes to stdout, so ``--json`` output stays one object; a command shows it
    with ``--json`` too. When stderr is not a terminal (a pipe, ``2> log``, CI) a
    :class:`LineProgress` writes a line every :data:`LINE_INTERVAL` seconds while the job
    runs (``esa demo: shuffler 2/3, 41 % (8,200/20,000 reports) (0:10 elapsed)``), so a
    short run prints nothing.

    Args:
        enabled: False for no progress at all.
        name: what the plain lines start with, e.g. ``"esa demo"``.
        unit: what the steps count, e.g. ``"reports"`` (plain lines only).
    """
    if enabled and not sys.stderr.isatty():
        line = LineProgress(interval=LINE_INTERVAL, prefix=name, unit=unit)
        with line.heartbeat():
            yield line
    elif enabled:
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        with Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console(stderr=True),
            transient=True,
        ) as bar:
            yield bar
    else:
        yield _NoProgress()


@contextlib.contextmanager
def status(enabled: bool, message: str, *, name: str | None = None) -> Iterator[None]:
    """A spinner with ``message`` on stderr while a stage without steps runs (e.g. a
    protocol's calibration, up to ~35 s for ``cnt_pure`` at n = 10^6); off a terminal, a
    plain line every :data:`LINE_INTERVAL` seconds (``NAME: MESSAGE (0:05 elapsed)``).
    Never on stdout."""
    if enabled and sys.stderr.isatty():
        from rich.markup import escape

        with console(stderr=True).status(escape(message)):
            yield
    elif enabled:
        line = LineProgress(interval=LINE_INTERVAL, prefix=name or "esa")
        line.add_task(message)
        with line.heartbeat():
            yield
    else:
        yield


def _clock_text(seconds: float) -> str:
    minutes, sec = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{sec:02d}" if hours else f"{minutes}:{sec:02d}"


def _count(value: float) -> str:
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:,.4g}"


class LineProgress:
    """The subset of rich's Progress the commands use, written as plain lines.

    A line is written when ``interval`` seconds have passed since the previous one (or
    since the start), never more often, so runs shorter than ``interval`` stay silent.
    Without ``prefix`` it reads ``DESCRIPTION: DONE/TOTAL (M:SS elapsed)``; with one,
    ``PREFIX: DESCRIPTION, P % (DONE/TOTAL UNIT) (M:SS elapsed)``. Inside
    :meth:`heartbeat` a line is also written when nothing advances for ``interval`` seconds
    (a stage that reports no steps), so a log never goes quiet for longer.
    """

    def __init__(
        self,
        *,
        interval: float = LINE_INTERVAL,
        stream: Any = None,
        clock: Callable[[], float] = time.monotonic,
        prefix: str | None = None,
        unit: str | None = None,
    ) -> None:
        self._interval = interval
        self._stream = stream
        self._clock = clock
        self._prefix = prefix
        self._unit = unit
        self._start = clock()
        self._last = self._start
        self._tasks: dict[int, dict[str, Any]] = {}
        self._current: int | None = None
        self._lock = threading.Lock()

    def add_task(self, description: str, *, total: float | None = None, **_: Any) -> int:
        with self._lock:
            task = len(self._tasks)
            self._tasks[task] = {"description": description, "total": total, "completed": 0.0}
            self._current = task
            return task

    def update(
        self,
        task: int,
        *,
        description: str | None = None,
        total: float | None = None,
        completed: float | None = None,
        advance: float | None = None,
        **_: Any,
    ) -> None:
        with self._lock:
            t = self._tasks[task]
            if description is not None:
                t["description"] = description
            if total is not None:
                t["total"] = total
            if completed is not None:
                t["completed"] = completed
            if advance is not None:
                t["completed"] += advance
            self._current = task
            self._maybe_write(t)

    def advance(self, task: int, advance: float = 1) -> None:
        self.update(task, advance=advance)

    def reset(
        self, task: int, *, total: float | None = None, description: str | None = None, **_: Any
    ) -> None:
        with self._lock:
            t = self._tasks[task]
            t["total"] = total
            t["completed"] = 0.0
            if description is not None:
                t["description"] = description
            self._current = task
            self._maybe_write(t)

    @contextlib.contextmanager
    def heartbeat(self) -> Iterator[None]:
        """Write the current task's line every ``interval`` seconds, steps or not, while
        the block runs (a daemon thread; stopped on exit)."""
        stop = threading.Event()

        def beat() -> None:
            while not stop.wait(min(self._interval, 1.0)):
                with self._lock:
                    if self._current is not None:
                        self._maybe_write(self._tasks[self._current])

        thread = threading.Thread(target=beat, name="esa-progress", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()

    def line(self, t: Mapping[str, Any], elapsed: float) -> str:
        """The line of task ``t`` after ``elapsed`` seconds."""
        clock = f"({_clock_text(elapsed)} elapsed)"
        if self._prefix is None:
            done = f"{t['completed']:g}" + (f"/{t['total']:g}" if t["total"] is not None else "")
            return f"{t['description']}: {done} {clock}"
        unit = f" {self._unit}" if self._unit else ""
        total, completed = t["total"], t["completed"]
        if total:
            percent = 100.0 * completed / total
            amount = f", {percent:.0f} % ({_count(completed)}/{_count(total)}{unit})"
        elif completed:
            amount = f", {_count(completed)}{unit}"
        else:
            amount = ""
        return f"{self._prefix}: {t['description']}{amount} {clock}"

    def _maybe_write(self, t: Mapping[str, Any]) -> None:
        now = self._clock()
        if now - self._last < self._interval:
            return
        self._last = now
        stream = self._stream if self._stream is not None else sys.stderr
        print(self.line(t, now - self._start), file=stream, flush=True)


class _NoProgress:
    def add_task(self, *_: Any, **__: Any) -> int:
        return 0

    def update(self, *_: Any, **__: Any) -> None:
        pass

    def advance(self, *_: Any, **__: Any) -> None:
        pass

    def reset(self, *_: Any, **__: Any) -> None:
        pass


def method_label(method: str | None, tolerance: float | None) -> str:
    """What a table says of how a bound's value relates to the exact ε (``esa amplify``'s
    method column, and the report's).

    Args:
        method: the row's ``method`` (:meth:`~protocols.AmplificationBound.method_at`).
        tolerance: the row's ``tolerance``; None or NaN if unknown.

    Returns:
        ``"exact"``; ``"certified ≤ +0.1 %"`` for a proven upper bound at most that far
        above the exact value (``"certified"`` if the tolerance is unknown); ``""`` for a
        theorem's bound or no value.
    """
    if method == "exact":
        return "exact"
    if method == "certified":
        if tolerance is None or not math.isfinite(tolerance):
            return "certified"
        return f"certified ≤ +{100 * tolerance:g} %"
    return ""


def starred_bound(bound: Any, method: str | None) -> Any:
    """A bound's name as an audit table shows it: starred where its value is a certified
    upper bound rather than the exact ε (:func:`certified_footnote` explains the star).

    Args:
        bound: the scenario's ``bound``.
        method: its ``bound_method``.

    Returns:
        ``"<bound>*"`` if ``method`` is ``"certified"``, else ``bound`` unchanged.
    """
    return f"{bound}*" if method == "certified" else bound


def certified_footnote(tolerance: float) -> str:
    """The line under an audit table that explains :func:`starred_bound`'s star.

    Args:
        tolerance: the certified bounds' relative tolerance (``bound_tolerance``).

    Returns:
        The footnote, without a trailing newline.
    """
    return (
        f"*: certified, a proven upper bound at most {100 * tolerance:g} % above the exact ε "
        "(more honest users than the exact search takes)"
    )
