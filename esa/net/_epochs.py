"""When epochs close: the first shuffler's size/deadline rule, and the operator's command.

At hop 0 the open reports close into an epoch at ``max_reports``, ``deadline_seconds``
after the first open report, or on an operator's signed CLOSE_EPOCH / CLOSE_EPOCH_AT —
which closes an epoch even when no report is open, so an empty batch (zero reports, counts
all zero, no fakes) goes down the chain and the analyzer records the epoch. Later hops
close an epoch when its upstream batch is complete (the inbox does that on receipt).
"""

from __future__ import annotations

import math
import sqlite3
import time
from typing import Final

import trio

from .._errors import EpochAhead, FrameRefused
from ._party import PartyBase
from ._wire import Ack, ControlCommand, RejectReason, verify_control

__all__ = ["EpochControl"]

_CONTROL_WINDOW_MS: Final = 5 * 60 * 1000  # an operator's clock may be this far off


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
        if self.operator_key is None:
            raise FrameRefused(RejectReason.BAD_SIGNATURE, "no operator key configured")
        frame = verify_control(payload, self.operator_key)
        # Signed commands are replayable by anyone who saw one on the wire: accept each
        # only once (strictly increasing time stamps) and only while fresh.
        now_ms = int(time.time() * 1000)
        if abs(now_ms - frame.issued_at_ms) > _CONTROL_WINDOW_MS or (
            frame.issued_at_ms <= self._last_control_ms
        ):
            raise FrameRefused(
                RejectReason.STALE_CONTROL,
                f"control frame issued at {frame.issued_at_ms} ms is stale or replayed",
            )
        self._last_control_ms = frame.issued_at_ms
        await self._db(self.inbox.set_meta, "last_control_ms", str(frame.issued_at_ms))
        if frame.command in (ControlCommand.CLOSE_EPOCH, ControlCommand.CLOSE_EPOCH_AT):
            if not self.is_first:
                raise FrameRefused(RejectReason.WRONG_HOP, "only the first shuffler closes epochs")
            at = frame.epoch if frame.command is ControlCommand.CLOSE_EPOCH_AT else None
            try:
                closed = await self._close_open_epochs(operator=True, at=at)
            except EpochAhead as exc:
                raise FrameRefused(RejectReason.EPOCH_AHEAD, str(exc)) from None
            return Ack(closed, 0).to_bytes()
        raise FrameRefused(RejectReason.UNEXPECTED_KIND, f"command {frame.command}")
