"""The analyzer's privacy budget: a durable ledger of every epoch released, and the
``[budget]`` that bounds it.

Every epoch the analyzer releases (analyzes and stores, so that RESULT counts it) gets one
row in the ``ledger`` table of the analyzer's inbox, written by the SAME transaction that
releases it (:meth:`Inbox.commit_processed`'s ``also`` callback): a crash leaves the epoch
released and recorded, or neither. A row holds the deployment id (the manifest's, if the
config names one), the epoch, the protocol, the (ε, δ) the analyzer states for that epoch
(:func:`esa.net.analyzer_guarantee` over the epoch alone: the run's own guarantee, which
is the calibrated one when the epoch matches the calibration), the users it counted and
when it was released.

What has been spent is the composition of the rows' (ε, δ) points
(:func:`protocols.accounting.compose` of :meth:`PrivacyProfile.from_point`: the exact
optimal composition when every point is the same, the PLD of the canonical pairs
otherwise) at the budget's ``delta_total``, or, with no ``[budget]``, at twice the
released epochs' summed δ (at least 1e-9, at most 0.5). It is computed in the release's
transaction and stored with it, so STATUS reads one row.

With a ``[budget]`` a release that would take the composed ε above ``epsilon_total`` is
refused inside that transaction, which then rolls back: the epoch stays closed, its
reports stay stored, and the refusal is recorded (table ``budget_refusals``, STATUS
counter ``budget_refusals``, one ``budget_refused`` event, RESULT's ``budget.refused``).
A restart with a larger budget releases it.
"""

from __future__ import annotations

import json
import math
import os
import signal
import sqlite3
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from protocols.accounting import PrivacyProfile, compose

from .._errors import ConfigError, ESAError
from ._inbox import Inbox

__all__ = [
    "Budget",
    "BudgetExceeded",
    "LedgerEntry",
    "ledger_entries",
    "parse_budget",
    "record_refusal",
    "record_release",
    "refusals",
    "spent",
    "spent_view",
]

_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS ledger (
    epoch INTEGER PRIMARY KEY, inbox_epoch INTEGER NOT NULL, deployment TEXT,
    protocol TEXT NOT NULL, epsilon REAL, delta REAL NOT NULL, users INTEGER NOT NULL,
    bound TEXT NOT NULL, released_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS budget_refusals (
    epoch INTEGER PRIMARY KEY, reason TEXT NOT NULL, refused_at REAL NOT NULL
);
"""

#: Meta key of the stored composition (JSON, :func:`spent`'s result).
_SPENT_META: Final = "ledger_spent"

#: How the spent ε is composed (STATUS says so in ``composed_from``).
COMPOSED_FROM: Final = (
    "the per-epoch stated (epsilon, delta) points, composed as (epsilon, delta)-DP "
    "mechanisms (protocols.accounting.compose of PrivacyProfile.from_point)"
)


class BudgetExceeded(ESAError):
    """Releasing an epoch would take the composed ε above the configured budget.

    Attributes:
        epoch: the epoch refused.
        reason: why, in words (what RESULT and the log say).
    """

    def __init__(self, epoch: int, reason: str) -> None:
        super().__init__(reason)
        self.epoch = epoch
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Budget:
    """A deployment's total privacy budget (``[budget]``).

    Attributes:
        epsilon_total: the most ε the composed released epochs may reach.
        delta_total: the δ at which the composition is evaluated.
    """

    epsilon_total: float
    delta_total: float


def parse_budget(table: object) -> Budget:
    """The ``[budget]`` table of a party config.

    Raises:
        ConfigError: not a table, an unknown or missing key, ``epsilon_total`` not a finite
            number > 0, or ``delta_total`` not a number in (0, 1).
    """
    if not isinstance(table, dict):
        raise ConfigError(f"[budget] must be a table, got {type(table).__name__}")
    allowed = {"epsilon_total", "delta_total"}
    unknown = set(table) - allowed
    if unknown:
        raise ConfigError(f"[budget]: unknown keys {sorted(unknown)}; allowed {sorted(allowed)}")
    missing = allowed - set(table)
    if missing:
        raise ConfigError(f"[budget] needs {sorted(missing)} (both epsilon_total and delta_total)")
    eps, dlt = table["epsilon_total"], table["delta_total"]
    if isinstance(eps, bool) or not isinstance(eps, int | float) or not 0 < eps < math.inf:
        raise ConfigError(f"[budget] epsilon_total must be a finite number > 0, got {eps!r}")
    if isinstance(dlt, bool) or not isinstance(dlt, int | float) or not 0 < dlt < 1:
        raise ConfigError(f"[budget] delta_total must be a number in (0, 1), got {dlt!r}")
    return Budget(float(eps), float(dlt))


@dataclass(frozen=True, slots=True)
class LedgerEntry:
    """One released epoch, as the ledger records it.

    Attributes:
        epoch: the deployment's epoch id (the inbox epoch of its first chain // channels).
        inbox_epoch: the inbox epoch id the release committed on (the group's lead).
        deployment: the manifest's deployment id; None without a manifest.
        protocol: the protocol's name.
        epsilon: the ε the analyzer states for the epoch (``inf``: nothing proven).
        delta: its δ.
        users: the users the analyzer counted in the epoch.
        bound: which bound states ε (the guarantee's own words).
        released_at: when (Unix seconds).
    """

    epoch: int
    inbox_epoch: int
    deployment: str | None
    protocol: str
    epsilon: float
    delta: float
    users: int
    bound: str
    released_at: float

    def to_json(self) -> dict[str, Any]:
        return {
            "epoch": self.epoch,
            "inbox_epoch": self.inbox_epoch,
            "deployment": self.deployment,
            "protocol": self.protocol,
            "epsilon": self.epsilon if math.isfinite(self.epsilon) else None,
            "delta": self.delta,
            "users": self.users,
            "bound": self.bound,
            "released_at": self.released_at,
        }


def _create(db: sqlite3.Connection) -> None:
    """The ledger's tables, inside the caller's transaction (``executescript`` would
    commit it)."""
    for statement in _SCHEMA.split(";"):
        if statement.strip():
            db.execute(statement)


def _has_ledger(db: sqlite3.Connection) -> bool:
    row = db.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'ledger'"
    ).fetchone()
    return row is not None


def _entries(db: sqlite3.Connection) -> list[LedgerEntry]:
    if not _has_ledger(db):
        return []
    rows = db.execute(
        "SELECT epoch, inbox_epoch, deployment, protocol, epsilon, delta, users, bound, "
        "released_at FROM ledger ORDER BY epoch"
    ).fetchall()
    return [
        LedgerEntry(
            int(e),
            int(ie),
            None if d is None else str(d),
            str(p),
            math.inf if eps is None else float(eps),
            float(dl),
            int(u),
            str(b),
            float(t),
        )
        for e, ie, d, p, eps, dl, u, b, t in rows
    ]


def ledger_entries(inbox: Inbox) -> list[LedgerEntry]:
    """Every released epoch the ledger holds, oldest first (empty before the first)."""
    return _entries(inbox._db)


def spent(points: Sequence[tuple[float, float]], *, budget: Budget | None) -> dict[str, Any]:
    """The composition of released epochs' stated (ε, δ) points.

    Args:
        points: one (ε, δ) per released epoch.
        budget: the configured budget (its ``delta_total`` is the δ), or None.

    Returns:
        JSON-ready: ``epochs_released``, ``epsilon_spent`` (None: unbounded), ``delta``,
        ``delta_source``, ``method``, ``composed_from``, and with a budget
        ``epsilon_total`` and ``epsilon_remaining``.
    """
    if budget is not None:
        delta, source = budget.delta_total, "[budget] delta_total"
    else:
        delta = min(0.5, max(1e-9, 2.0 * sum(d for _, d in points)))
        source = "2 x the released epochs' summed delta (no [budget] configured)"
    eps: float
    method: str | None = None
    if not points:
        eps = 0.0
    elif any(not e <= 700.0 or not 0.0 <= d < 1.0 for e, d in points):  # inf / NaN: unbounded
        eps = math.inf
    else:
        grouped = Counter((float(e), float(d)) for e, d in points)
        composed = compose(
            [(PrivacyProfile.from_point(e, d), c) for (e, d), c in sorted(grouped.items())],
            delta=delta,
        )
        eps, method = float(composed.epsilon_total), str(composed.method)
    out: dict[str, Any] = {
        "epochs_released": len(points),
        "epsilon_spent": eps if math.isfinite(eps) else None,
        "delta": delta,
        "delta_source": source,
        "method": method,
        "composed_from": COMPOSED_FROM,
    }
    if budget is not None:
        out["epsilon_total"] = budget.epsilon_total
        out["epsilon_remaining"] = (
            max(0.0, budget.epsilon_total - eps) if math.isfinite(eps) else 0.0
        )
    return out


def record_release(
    db: sqlite3.Connection, entry: LedgerEntry, *, budget: Budget | None, kill_hook: bool = False
) -> dict[str, Any]:
    """Record a release inside the transaction that releases it (the ``also`` callback of
    :meth:`Inbox.commit_processed`), after checking it against the budget.

    Args:
        db: the connection, inside that transaction.
        entry: the epoch being released.
        budget: the configured budget, or None (nothing is refused).
        kill_hook: tests only (``[simulation] kill_in_release``): SIGKILL this process after
            the row is written, before the transaction commits.

    Returns:
        The composition with this epoch (:func:`spent`), also stored for STATUS.

    Raises:
        BudgetExceeded: the composed ε with this epoch would exceed ``epsilon_total``; the
            caller's transaction rolls back, so nothing is released.
        sqlite3.IntegrityError: the epoch is in the ledger already (never released twice).
    """
    _create(db)
    points = [(e.epsilon, e.delta) for e in _entries(db)]
    result = spent([*points, (entry.epsilon, entry.delta)], budget=budget)
    if budget is not None:
        eps = result["epsilon_spent"]
        if eps is None or eps > budget.epsilon_total:
            was = spent(points, budget=budget)["epsilon_spent"]
            raise BudgetExceeded(
                entry.epoch,
                f"releasing epoch {entry.epoch} (stated epsilon {entry.epsilon:g}, delta "
                f"{entry.delta:g}) would take the composed epsilon over {len(points) + 1} "
                f"epochs to {_num(eps)} at delta {budget.delta_total:g}, above the budget "
                f"epsilon_total = {budget.epsilon_total:g} (spent so far: {_num(was)}); "
                "its reports stay stored",
            )
    db.execute(
        "INSERT INTO ledger (epoch, inbox_epoch, deployment, protocol, epsilon, delta, users, "
        "bound, released_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            entry.epoch,
            entry.inbox_epoch,
            entry.deployment,
            entry.protocol,
            entry.epsilon if math.isfinite(entry.epsilon) else None,
            entry.delta,
            entry.users,
            entry.bound,
            entry.released_at,
        ),
    )
    db.execute("DELETE FROM budget_refusals WHERE epoch = ?", (entry.epoch,))
    db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (_SPENT_META, json.dumps(result)))
    if kill_hook:
        os.kill(os.getpid(), signal.SIGKILL)
    return result


def record_refusal(inbox: Inbox, refused: BudgetExceeded) -> bool:
    """Record a refusal (one transaction, which also refreshes RESULT's summary); True if
    the epoch was not refused before (a restart retries a refused epoch and may refuse it
    again: that is counted once)."""
    with inbox._txn(summary=True) as db:
        _create(db)
        cur = db.execute(
            "INSERT OR IGNORE INTO budget_refusals VALUES (?, ?, ?)",
            (refused.epoch, refused.reason, time.time()),
        )
        return bool(cur.rowcount)


def refusals(db: sqlite3.Connection) -> dict[int, str]:
    """Epochs refused for the budget and not released since: ``{epoch: reason}``."""
    exists = db.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'budget_refusals'"
    ).fetchone()
    if exists is None:
        return {}
    rows = db.execute("SELECT epoch, reason FROM budget_refusals ORDER BY epoch").fetchall()
    return {int(e): str(r) for e, r in rows}


def spent_view(inbox: Inbox, budget: Budget | None) -> dict[str, Any]:
    """STATUS's ``budget``: the composition stored by the last release (computed afresh if
    none is stored, e.g. before any release), and the refused epochs."""
    db = inbox._db
    row = db.execute("SELECT value FROM meta WHERE key = ?", (_SPENT_META,)).fetchone()
    stored: Mapping[str, Any] | None = None if row is None else json.loads(row[0])
    points = [(e.epsilon, e.delta) for e in _entries(db)]
    if (
        stored is None
        or stored.get("epochs_released") != len(points)
        or ("epsilon_total" in stored) != (budget is not None)
        or (budget is not None and stored.get("epsilon_total") != budget.epsilon_total)
        or (budget is not None and stored.get("delta") != budget.delta_total)
    ):
        stored = spent(points, budget=budget)  # the budget changed since: recompute
    return {**stored, "refused_epochs": sorted(refusals(db))}


def _num(eps: float | None) -> str:
    return "unbounded (inf)" if eps is None else f"{eps:.6g}"
