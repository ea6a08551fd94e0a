"""Helpers every ``esa`` subcommand shares: errors, JSON output, tables, progress."""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, NoReturn

import numpy as np

from crypto import CryptoError
from esa import ESAError
from protocols import ProtocolError

__all__ = [
    "ERROR_ROOTS",
    "MAX_DOMAIN",
    "MAX_USERS",
    "UsageError",
    "domain",
    "emit_json",
    "error_exit",
    "is_misuse",
    "parameter_errors",
    "parse_options",
    "print_table",
    "privacy_shortfall",
    "progress",
    "seed",
    "to_jsonable",
    "users",
]


class UsageError(Exception):
    """Bad command-line input: printed as one line, exit code 2."""


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
    except UsageError:
        raise
    except ESAError as exc:
        raise UsageError(str(exc)) from exc
    except ValueError as exc:
        if is_misuse(exc):
            raise UsageError(str(exc)) from exc
        raise


#: Options whose value is a name, not a number (e.g. put's --option counter=cnt_pure).
NAME_OPTIONS = frozenset({"counter", "encoding"})


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


#: What proves the requested ε instead, for the protocols whose proven bound can exceed it
#: (a hint, not a registry: any other protocol whose proven ε exceeds the request is warned
#: about all the same, without one).
_PROVEN_ALTERNATIVE = {
    "cnt_sgm": "--option encoding=splitmix proves it with δ (its sum alone is pure), "
    "--protocol cnt_pure proves it purely",
    "put": "--option encoding=splitmix proves it with δ (Split-Mix Cnt_SGM counters), "
    "--option counter=cnt_pure proves it purely",
}


def privacy_shortfall(protocol: str, requested: float, proven: float) -> str | None:
    """One line saying that the protocol proves a larger ε than requested, or None.

    A protocol is configured from the target ε as its paper prescribes, but states only the
    ε it can prove (Cnt_SGM, and PUT on it: the survey's (3ε/γ)-claim fails for the
    randomizer, docs/privacy.md); a run must not let that difference pass unnoticed.
    """
    if not proven > requested * (1.0 + 1e-9):
        return None
    hint = _PROVEN_ALTERNATIVE.get(protocol)
    return (
        f"{protocol} proves ε_c = {proven:.4g}, not the requested {requested:g}"
        + (f"; {hint}" if hint else "")
        + " (docs/privacy.md)"
    )


def to_jsonable(obj: Any) -> Any:
    """Convert numpy scalars/arrays and non-finite floats to JSON-safe values."""
    if isinstance(obj, Mapping):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return to_jsonable(obj.tolist())
    if isinstance(obj, np.generic):
        return to_jsonable(obj.item())
    if isinstance(obj, float) and not math.isfinite(obj):
        return None if math.isnan(obj) else ("inf" if obj > 0 else "-inf")
    return obj


def emit_json(obj: Mapping[str, Any]) -> None:
    json.dump(to_jsonable(obj), sys.stdout, indent=2, allow_nan=False)
    sys.stdout.write("\n")


def print_table(
    title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]], caption: str | None = None
) -> None:
    """A rich table on stdout (plain text when stdout is not a terminal)."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title, caption=caption, caption_justify="left")
    for col in columns:
        table.add_column(col, overflow="fold")
    for row in rows:
        table.add_row(*(_fmt(v) for v in row))
    Console().print(table)


def _fmt(v: Any) -> str:
    from rich.markup import escape

    if isinstance(v, float | np.floating):
        return f"{float(v):.4g}"
    return escape(str(v))  # "[d]" in a docstring is text, not rich markup


@contextlib.contextmanager
def progress(enabled: bool) -> Iterator[Any]:
    """A rich Progress for long stages on a terminal; plain lines when stderr is a file.

    With ``--json`` nothing is shown. When stderr is not a TTY (a job run under ``nohup``,
    CI, ``2> log``) a :class:`LineProgress` writes one line at most every 30 s, so a short
    run prints nothing and a long one leaves a heartbeat in its log.
    """
    if enabled and not sys.stderr.isatty():
        yield LineProgress()
    elif enabled:
        from rich.console import Console
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
            console=Console(stderr=True),
            transient=True,
        ) as bar:
            yield bar
    else:
        yield _NoProgress()


@contextlib.contextmanager
def status(enabled: bool, message: str) -> Iterator[None]:
    """A spinner with ``message`` on stderr while a stage without steps runs (e.g. a
    protocol's calibration, up to ~35 s for ``cnt_pure`` at n = 10^6); same rules as
    :func:`progress`."""
    if enabled and sys.stderr.isatty():
        from rich.console import Console
        from rich.markup import escape

        with Console(stderr=True).status(escape(message)):
            yield
    else:
        yield


def _clock_text(seconds: float) -> str:
    minutes, sec = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{sec:02d}" if hours else f"{minutes}:{sec:02d}"


class LineProgress:
    """The subset of rich's Progress the commands use, written as plain lines.

    A line (``DESCRIPTION: DONE/TOTAL (M:SS elapsed)``) is written when ``interval``
    seconds have passed since the previous one (or since the start), never more often,
    so runs shorter than ``interval`` stay silent.
    """

    def __init__(
        self,
        *,
        interval: float = 30.0,
        stream: Any = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._interval = interval
        self._stream = stream
        self._clock = clock
        self._start = clock()
        self._last = self._start
        self._tasks: dict[int, dict[str, Any]] = {}

    def add_task(self, description: str, *, total: float | None = None, **_: Any) -> int:
        task = len(self._tasks)
        self._tasks[task] = {"description": description, "total": total, "completed": 0.0}
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
        t = self._tasks[task]
        if description is not None:
            t["description"] = description
        if total is not None:
            t["total"] = total
        if completed is not None:
            t["completed"] = completed
        if advance is not None:
            t["completed"] += advance
        self._maybe_write(t)

    def advance(self, task: int, advance: float = 1) -> None:
        self.update(task, advance=advance)

    def reset(
        self, task: int, *, total: float | None = None, description: str | None = None, **_: Any
    ) -> None:
        t = self._tasks[task]
        t["total"] = total
        t["completed"] = 0.0
        if description is not None:
            t["description"] = description
        self._maybe_write(t)

    def _maybe_write(self, t: Mapping[str, Any]) -> None:
        now = self._clock()
        if now - self._last < self._interval:
            return
        self._last = now
        done = f"{t['completed']:g}" + (f"/{t['total']:g}" if t["total"] is not None else "")
        stream = self._stream if self._stream is not None else sys.stderr
        elapsed = _clock_text(now - self._start)
        print(f"{t['description']}: {done} ({elapsed} elapsed)", file=stream, flush=True)


class _NoProgress:
    def add_task(self, *_: Any, **__: Any) -> int:
        return 0

    def update(self, *_: Any, **__: Any) -> None:
        pass

    def advance(self, *_: Any, **__: Any) -> None:
        pass

    def reset(self, *_: Any, **__: Any) -> None:
        pass
