"""When epochs close: the first shuffler's size/deadline rule, and the operator's command.

At hop 0 the open reports close into an epoch at ``max_reports``, ``deadline_seconds``
after the first open report, or on an operator's signed CLOSE_EPOCH / CLOSE_EPOCH_AT —
which closes an epoch even when no report is open, so an empty batch (zero reports, counts
all zero, no fakes) goes down the chain and the analyzer records the epoch. Later hops
close an epoch when its upstream batch is complete (the inbox does that on receipt).
"""

from __future__ import annotations

import json
import math
import sqlite3
import time
from typing import Final

import trio

from .._errors import EpochAhead, FrameRefused, InboxDamaged
from ._inbox import Inbox
from ._party import PartyBase
from ._wire import Ack, ControlCommand, RejectReason, verify_control

__all__ = ["CONTROL_MAX_SKEW_MS", "CONTROL_WINDOW_MS", "EpochControl"]

#: How old an operator's command may be when it arrives (its nonce is kept this long).
CONTROL_WINDOW_MS: Final = 5 * 60 * 1000
#: How far ahead of the party's clock a command's time stamp may be (the operator's
#: clock may run fast by this much); a command stamped further ahead is refused.
CONTROL_MAX_SKEW_MS: Final = 30 * 1000
_NONCES_KEY: Final = "control_nonces"


class EpochControl(PartyBase):
    """Closing epochs (:meth:`_close_open_epochs`, :meth:`_epoch_loop`) and the
    operator's CONTROL frames that ask for it."""

    async def _close_open_epochs(self, *, operator: bool = False, at: int | None = None) -> int:
        """Close the open reports into one epoch per key epoch; returns how many epochs.

        The size/deadline rule closes only key epochs with open reports. An operator's
        close always produces at least one epoch, empty if nobody submitted: its empty
        batch flows down the chain, so the analyzer records the epoch instead of waiting
        for it. With several chains the analyzer joins the chains' epochs by number, so an
        operator's close then closes one epoch per key epoch in service, open reports or
        not: every chain's numbering advances alike (given the same ``[keys.epochs]``).
        ``at`` (CLOSE_EPOCH_AT) makes the operator's close idempotent: it closes only if
        the next epoch id is ``at`` (:meth:`Inbox.close_epochs`).
        """
        served = sorted(self.keys)
        if not operator:
            closed = await self._db(self.inbox.close_epochs, served)
        elif self.channels > 1:
            closed = await self._db(self.inbox.close_epochs, served, empty=served, at=at)
        else:
            closed = await self._db(self.inbox.close_epochs, served, if_none_open=served[-1], at=at)
        if closed:
            # Stamped before the counter moves: whoever sees the count sees the time too.
            self.last_epoch_closed_at = trio.current_time()
            self.counters["epochs_closed"] += len(closed)
            sizes = [await self._db(self.inbox.epoch_size, e) for e in closed]
            self.counters["empty_epochs_closed"] += sizes.count(0)
            self._kick()
        return len(closed)

    async def _epoch_loop(self) -> None:
        """Hop 0: close the open batch at ``max_reports`` or at its deadline.

        The deadline counts from the commit of the oldest open report, whose wall-clock
        time the inbox keeps (:meth:`Inbox.open_since`), so a restart does not give open
        reports a new deadline: the restarted party closes their epoch at that time +
        ``deadline_seconds``, at once if that is past. Wall-clock time is read once per
        batch of open reports, its elapsed part clamped to ``[0, deadline]``, and the wait
        is then timed on trio's monotonic clock: a clock step while the party runs changes
        nothing; a step while it is down moves the close by the step, but never before the
        restart and never more than one deadline after it.
        """
        rule = self.config.epoch
        # (the open reports' recorded wall-clock time, their deadline on trio's clock)
        due: tuple[float, float] | None = None
        while True:
            # Reset before reading, so a submit committed during the reads still wakes us.
            self._wake_epoch = trio.Event()
            try:
                total = sum((await self._db(self.inbox.open_count)).values())
                since = await self._db(self.inbox.open_since, now=time.time()) if total else None
                if since is None:
                    due = None
                elif due is None or due[0] != since:
                    elapsed = min(max(time.time() - since, 0.0), rule.deadline_seconds)
                    due = (since, trio.current_time() + rule.deadline_seconds - elapsed)
                if due is not None and (total >= rule.max_reports or trio.current_time() >= due[1]):
                    await self._close_open_epochs()
                    continue
            except sqlite3.Error as exc:  # e.g. disk full while closing: retry shortly
                self.counters["storage_errors"] += 1
                self._log_once("epoch", f"cannot close epochs, will retry: {exc!r}")
                await trio.sleep(1.0)
                continue
            wait = due[1] - trio.current_time() if due is not None else math.inf
            with trio.move_on_after(max(wait, 0.0)):
                await self._wake_epoch.wait()

    async def _on_control(self, payload: bytes) -> bytes:
        """An operator's signed command, taken once, only by the party it names, and only
        while fresh.

        Checked in this order, nothing recorded until all pass: the operator's signature;
        the frame's deployment id and target party are this party's (a command for
        another deployment sharing the operator key, or for another party, is refused);
        it was issued at most :data:`CONTROL_WINDOW_MS` ago and at most
        :data:`CONTROL_MAX_SKEW_MS` ahead of this party's clock; its nonce is not one
        this party accepted within the window; the command applies to this party. Then
        the nonce and ``last_control_ms`` are committed to the inbox in one transaction
        — so a restart remembers them — and only then is the command carried out. A
        refused frame changes nothing, so a future-dated frame cannot hold later,
        correctly timed commands off.
        """
        if self.operator_key is None:
            raise FrameRefused(RejectReason.BAD_SIGNATURE, "no operator key configured")
        frame = verify_control(payload, self.operator_key)
        deployment = self.config.deployment_id
        if frame.deployment_id != deployment or frame.target != self.party_name:
            raise FrameRefused(
                RejectReason.WRONG_TARGET,
                f"control frame for party {frame.target!r} of deployment "
                f"{frame.deployment_id.hex()}; this is {self.party_name!r} of deployment "
                f"{deployment.hex()}",
            )
        now_ms = int(time.time() * 1000)
        if frame.issued_at_ms > now_ms + CONTROL_MAX_SKEW_MS:
            raise FrameRefused(
                RejectReason.STALE_CONTROL,
                f"control frame issued at {frame.issued_at_ms} ms, more than "
                f"{CONTROL_MAX_SKEW_MS // 1000} s ahead of this party's clock ({now_ms} ms)",
            )
        if now_ms - frame.issued_at_ms > CONTROL_WINDOW_MS:
            raise FrameRefused(
                RejectReason.STALE_CONTROL,
                f"control frame issued at {frame.issued_at_ms} ms is older than "
                f"{CONTROL_WINDOW_MS // 1000} s",
            )
        seen = await self._db(_control_nonces, self.inbox)
        if frame.nonce.hex() in seen:
            raise FrameRefused(
                RejectReason.STALE_CONTROL, "control frame replayed (its nonce was taken)"
            )
        if frame.command not in (ControlCommand.CLOSE_EPOCH, ControlCommand.CLOSE_EPOCH_AT):
            raise FrameRefused(RejectReason.UNEXPECTED_KIND, f"command {frame.command}")
        if not self.is_first:
            raise FrameRefused(RejectReason.WRONG_HOP, "only the first shuffler closes epochs")
        # Forget nonces whose frames would be refused as stale anyway: the set stays as
        # small as the commands of one window.
        horizon = now_ms - CONTROL_WINDOW_MS - CONTROL_MAX_SKEW_MS
        kept = {n: t for n, t in seen.items() if t >= horizon}
        kept[frame.nonce.hex()] = frame.issued_at_ms
        last = max(self._last_control_ms, frame.issued_at_ms)
        await self._db(_record_control, self.inbox, kept, last)
        self._last_control_ms = last
        at = frame.epoch if frame.command is ControlCommand.CLOSE_EPOCH_AT else None
        try:
            closed = await self._close_open_epochs(operator=True, at=at)
        except EpochAhead as exc:
            raise FrameRefused(RejectReason.EPOCH_AHEAD, str(exc)) from None
        return Ack(closed, 0).to_bytes()


def _control_nonces(inbox: Inbox) -> dict[str, int]:
    """The nonces of accepted operator commands still within the window (hex -> issued
    at, ms), from the inbox.

    Raises:
        InboxDamaged: the stored value is not such a table.
    """
    raw = inbox.get_meta(_NONCES_KEY, "{}")
    try:
        table = json.loads(raw)
    except ValueError:
        table = None
    if not isinstance(table, dict) or not all(
        isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool)
        for k, v in table.items()
    ):
        raise InboxDamaged(f"meta {_NONCES_KEY} is {raw[:80]!r}, not a nonce table")
    return table


def _record_control(inbox: Inbox, nonces: dict[str, int], last_ms: int) -> None:
    """Commit an accepted command's nonce table and time stamp in one transaction."""
    with inbox._txn() as db:
        db.execute(
            "INSERT OR REPLACE INTO meta VALUES (?, ?)",
            (_NONCES_KEY, json.dumps(nonces, sort_keys=True)),
        )
        db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", ("last_control_ms", str(last_ms)))
