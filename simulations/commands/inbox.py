"""``esa inbox check|set-aside PATH``: check a party's inbox, set its damaged reports aside.

A stored report whose bytes no longer match the digest recorded when it was acknowledged
stops its epoch (docs/network.md, "Damaged storage is an error, not an answer"). ``check``
finds every such report, read-only and safe next to a running party; ``set-aside`` moves a
closed epoch's damaged reports out of its way, so that the restarted party processes the
epoch without them. The data-level work is :class:`esa.net.Inbox`'s, and whether a party
holds the state_dir is :func:`esa.net.state_dir_in_use`; this is their shell.

Exit codes: 0 clean (``check``) or done (``set-aside``); 1 ``check`` found damage; 2 a usage
error, or an inbox that cannot be opened, or a ``set-aside`` refused (nothing changed).
"""

from __future__ import annotations

import argparse
import sqlite3
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from esa import InboxDamaged, InboxError

from .._common import UsageError, emit_json, print_table

if TYPE_CHECKING:
    from esa.net import InboxCheck, StoredEpoch

#: Seconds ``set-aside`` waits for another connection to let go of the file before it
#: refuses. A running party never does (it keeps its connection open), so this only
#: rides out another ``esa inbox`` finishing.
LOCK_WAIT: Final = 2.0

#: Damaged row ids shown per epoch in the table (``--json`` lists them all).
_ROWS_SHOWN: Final = 10


def register(sub: Any) -> None:
    p = sub.add_parser(
        "inbox",
        help="check a party's inbox for damaged reports, or set them aside",
        description="Check a party's SQLite inbox (SQLite's integrity check, and every "
        "stored report against the digest recorded when it was acknowledged), or move a "
        "closed epoch's damaged reports into the inbox's set_aside table so that the "
        "restarted party processes the epoch without them. PATH is the party's config "
        "(.toml), its state_dir, or the inbox.db file. Exit codes: 0 clean or done, 1 "
        "check found damage, 2 usage error, unopenable inbox or refused set-aside.",
    )
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    check = actions.add_parser(
        "check",
        help="report every epoch's stored and damaged reports (read-only)",
        description="Read-only, from one snapshot; safe while the party runs. Exit code 0 "
        "when the inbox is clean, 1 when damage is found.",
    )
    check.add_argument("path", metavar="PATH", help="party config (.toml), state_dir or inbox.db")
    check.add_argument("--json", action="store_true", help="one JSON object on stdout")
    check.set_defaults(handler=run_check)
    aside = actions.add_parser(
        "set-aside",
        help="move a closed epoch's damaged reports out of its way (party stopped)",
        description="Move the reports of a closed epoch that fail the digest check from "
        "the reports table to the set_aside table, in one transaction; nothing is deleted. "
        "The party must be stopped: the command takes the inbox for itself and refuses "
        "while any other process has it open. Restart the party afterwards: it processes "
        "the epoch from the reports left.",
    )
    aside.add_argument("path", metavar="PATH", help="party config (.toml), state_dir or inbox.db")
    aside.add_argument(
        "--epoch", type=int, required=True, help="the epoch whose processing stopped"
    )
    aside.add_argument("--json", action="store_true", help="one JSON object on stdout")
    aside.set_defaults(handler=run_set_aside)


def inbox_file(path: str) -> Path:
    """The inbox database PATH names: a party config (``.toml``, read as ``esa serve
    --local-simulation`` reads it: only its state_dir is used, so a local simulation's
    config is taken too), a state_dir, or the database file itself."""
    from esa.net import INBOX_FILE, load_config

    p = Path(path)
    if p.is_dir():
        return p / INBOX_FILE
    if p.suffix == ".toml":
        return load_config(p, simulation=True).inbox_path
    return p


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _epoch_json(e: StoredEpoch) -> dict[str, Any]:
    return {
        "epoch": e.epoch,
        "state": e.state,
        "reports": e.reports,
        "damaged": len(e.damaged),
        "damaged_rows": list(e.damaged),
        "set_aside": e.set_aside,
    }


def _listed(e: StoredEpoch) -> bool:
    """Whether the table shows an epoch: a processed one without anything of note is
    only counted (a long-running party has thousands)."""
    return e.state not in ("processed", "forwarded") or bool(e.reports or e.damaged or e.set_aside)


def run_check(args: argparse.Namespace) -> int:
    from esa.net import Inbox

    db = inbox_file(args.path)
    with Inbox.open_existing(db) as inbox:
        try:
            found = inbox.check()
        except sqlite3.Error as exc:
            raise UsageError(f"cannot check the inbox {db}: {exc}") from None
    if args.json:
        emit_json(
            {
                "inbox": str(db),
                "party": found.party,
                "clean": found.clean,
                "problems": list(found.problems),
                "damaged_reports": found.damaged,
                "epochs": [_epoch_json(e) for e in found.epochs],
            }
        )
    else:
        _print_check(db, found, args.path)
    return 0 if found.clean else 1


def _print_check(db: Path, found: InboxCheck, path: str) -> None:
    rows = []
    for e in filter(_listed, found.epochs):
        shown = ", ".join(map(str, e.damaged[:_ROWS_SHOWN]))
        rows.append(
            (
                "open" if e.epoch is None else e.epoch,
                e.state,
                e.reports,
                len(e.damaged),
                shown + (", …" if len(e.damaged) > _ROWS_SHOWN else "") or "-",
                e.set_aside,
            )
        )
    lines = [f"integrity check: {'; '.join(found.problems) or 'ok'}"]
    hidden = len(found.epochs) - len(rows)
    if hidden:
        lines.append(f"{_count(hidden, 'processed epoch')} with no reports left (not listed)")
    stopped = [e.epoch for e in found.epochs if e.damaged and e.state == "closed"]
    if stopped:
        lines.append(
            f"damaged reports stop {'epoch' if len(stopped) == 1 else 'epochs'} "
            f"{', '.join(map(str, stopped))}: stop the party, run `esa inbox set-aside {path} "
            f"--epoch {stopped[0] if len(stopped) == 1 else 'N'}`"
            f"{'' if len(stopped) == 1 else ' for each'}, and restart it (or restore the inbox "
            "from a backup)"
        )
    if any(e.damaged for e in found.epochs if e.epoch is None):
        lines.append(
            "damaged open reports will stop their epoch once it closes; set them aside then"
        )
    if found.problems:
        lines.append("the file's structure is damaged: restore the inbox from a backup")
    if found.clean:
        lines.append(
            "clean: every stored report matches the digest recorded when it was acknowledged"
        )
    print_table(
        f"inbox {db} (party {found.party}; read-only snapshot)",
        ["epoch", "state", "reports", "damaged", "damaged row ids", "set aside"],
        rows,
        caption="\n".join(lines),
    )


def run_set_aside(args: argparse.Namespace) -> int:
    from esa.net import LOCK_FILE, Inbox, state_dir_in_use

    if not 0 <= args.epoch < 2**63:  # epochs are SQLite integers
        raise UsageError(f"--epoch must lie in [0, 2^63 - 1], got {args.epoch}")
    db = inbox_file(args.path)
    try:
        inbox = Inbox.open_existing(db, write=True, timeout=LOCK_WAIT)
    except InboxError:
        # Asked only once the inbox was found open, to say by whom.
        if state_dir_in_use(db.parent):
            raise UsageError(
                f"the party using {db.parent} is running (it holds {db.parent / LOCK_FILE}); "
                "stop it first"
            ) from None
        raise
    with inbox:
        try:
            rows = inbox.set_aside(args.epoch)
        except InboxDamaged as exc:
            raise UsageError(
                f"the inbox file itself is damaged ({exc}); setting reports aside cannot "
                "repair that: restore the inbox from a backup"
            ) from None
        except sqlite3.Error as exc:
            raise UsageError(
                f"cannot set aside epoch {args.epoch}'s reports: {exc}; nothing changed"
            ) from None
        left = inbox.epoch_size(args.epoch)
        total = inbox.set_aside_counts()[args.epoch]
        party = inbox.party
    if args.json:
        emit_json(
            {
                "inbox": str(db),
                "party": party,
                "epoch": args.epoch,
                "set_aside_rows": rows,
                "set_aside": len(rows),
                "set_aside_total": total,
                "reports_left": left,
            }
        )
    else:
        print_table(
            f"inbox {db} (party {party}): epoch {args.epoch}",
            ["set aside now", "reports rows", "set aside in all", "reports left"],
            [(len(rows), ", ".join(map(str, rows)), total, left)],
            caption=f"the bytes stay in the inbox's set_aside table; restart the party: it "
            f"processes epoch {args.epoch} from the {left} reports left",
        )
    return 0
