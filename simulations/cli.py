"""The ``esa`` command line.

Every job is a subcommand living in its own module under :mod:`simulations.commands`; a
module there defines ``register(subparsers)`` which adds its parser and sets
``handler=func(args) -> int``. Modules are discovered, so adding a command touches no other
file.

Conventions every command follows:
    * a readable table by default, one JSON object on stdout with ``--json``;
    * usage errors and bad parameters print one line ``esa: error: ...`` on stderr and exit 2,
      never a traceback;
    * a run that would prove less privacy than requested (a larger ε) prints one line and
      exits 1, unless ``--allow-weaker`` is given; an audit whose verdict is a violation
      exits 1 too;
    * every JSON object starts with ``schema_version``, ``version``, ``command``,
      ``parameters`` and ``seed``, and ends with ``non_finite`` (:func:`esa.json_document`).

Exit codes: 0 success; 1 the result does not meet what was asked (weaker privacy than
requested, an LDP audit that finds a violation); 2 usage error or bad parameter; 130
interrupted; 141 the reader of stdout went away.
"""

from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import sys
from collections.abc import Sequence

from esa import __version__

from . import commands
from ._common import (
    UsageError,
    WeakerThanRequested,
    error_exit,
    parameter_errors,
    set_invocation,
)

__all__ = ["build_parser", "main"]


class _Parser(argparse.ArgumentParser):
    """argparse that prints a single-line error (exit code 2) instead of the usage block,
    and whose ``description`` may be a callable returning it, called when the help is
    printed: a command whose description is computed costs nothing to the others."""

    def error(self, message: str) -> None:  # type: ignore[override]
        error_exit(self.prog, message)

    def format_help(self) -> str:
        if callable(self.description):
            self.description = self.description()
        return super().format_help()


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="esa",
        description="Encode-Shuffle-Analyze: shuffle-model differential privacy, end to end.",
    )
    parser.add_argument("--version", action="version", version=f"esa {__version__}")
    parser.add_argument(
        "--protocol-file",
        action="append",
        default=[],
        metavar="FILE",
        help="register the protocols a TOML file declares (a frequency oracle by its "
        "probability matrix; docs/custom-protocols.md) before the command runs; repeatable, "
        "given before the command: esa --protocol-file my.toml simulate --protocol my_rr ...",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{commands.__name__}.{info.name}")
        module.register(sub)
    return parser


def _load_protocols(files: Sequence[str]) -> None:
    """Register the protocols of ``--protocol-file`` and of installed plugins (entry points of
    :data:`protocols.PLUGIN_GROUP`); a bad file or a broken plugin is one line, exit 2."""
    import protocols  # the registry (its protocol modules load when it is consulted)

    try:
        for path in files:
            protocols.load_protocol_file(path)
        protocols.load_plugins()
    except protocols.ProtocolError as exc:
        error_exit("esa", str(exc))
    except OSError as exc:
        error_exit("esa", f"{exc.filename or ''}: {exc.strerror or exc}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    args, extra = parser.parse_known_args(argv)
    if extra:  # named by the subcommand that did not take them, as its own errors are
        prog = f"esa {args.command}" if getattr(args, "command", None) else "esa"
        error_exit(prog, f"unrecognized arguments: {' '.join(extra)}")
    if getattr(args, "handler", None) is None:
        parser.print_help(sys.stderr)
        return 2
    _load_protocols(args.protocol_file)
    set_invocation(argv, args)
    try:
        with parameter_errors():
            return int(args.handler(args))
    except UsageError as exc:
        error_exit(f"esa {args.command}", str(exc))
    except WeakerThanRequested as exc:
        print(f"esa {args.command}: error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("esa: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (`esa ... --json | head`): stop quietly, as Unix tools do.
        # Point stdout at /dev/null so the interpreter's final flush cannot fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, what a shell reports for a tool killed by it
    except OSError as exc:
        # A path the user gave that the system refuses (no such directory, name too long,
        # permission): one line, as for any bad argument. Anything else is a bug.
        if exc.filename is None:
            raise
        error_exit(f"esa {args.command}", f"{exc.filename}: {exc.strerror or exc}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
