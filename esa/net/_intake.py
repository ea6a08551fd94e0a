"""Intake: the reports a party takes in, committed before they are acknowledged.

Clients SUBMIT reports to the first shuffler; every later hop takes signed BATCH chunks and
the COUNTS chain from the hop before it (the analyzer: from the last shuffler of every
chain, :meth:`Intake._verify_upstream`). A frame is acknowledged only after the
transaction that stores it has committed; concurrent SUBMIT frames share one transaction
(group commit, :meth:`Intake._writer_loop`).
"""

from __future__ import annotations

from collections.abc import Callable

import trio
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from .._errors import (
    BadSignature,
    ConflictingBatch,
    ESAError,
    FrameRefused,
    InboxError,
    WireError,
)
from ._party import PartyBase, Pending, T
from ._wire import (
    Ack,
    RejectReason,
    parse_submit,
    reports_header,
    unverified_key_epoch,
    verify_batch,
    verify_counts,
)

__all__ = ["Intake"]


class Intake(PartyBase):
    """SUBMIT, BATCH and COUNTS frames: checked, committed, acknowledged."""

    def _check_sizes(self, reports: tuple[bytes, ...]) -> None:
        if reports:
            self._check_size(len(reports[0]))

    def _check_size(self, size: int) -> None:
        expected = self.expected_size()
        if size != expected:
            raise FrameRefused(
                RejectReason.WRONG_REPORT_SIZE,
                f"reports for hop {self.hop} are {expected} bytes, got {size}",
            )

    def _check_declared_size(self, payload: bytes) -> None:
        """Refuse a SUBMIT or BATCH whose header declares the wrong report size before it
        is split into reports or its signature checked: a 4 MiB frame of 2-byte reports
        would otherwise become two million objects on the event loop, unauthenticated."""
        count, size = reports_header(payload)
        if count:
            self._check_size(size)

    async def _on_submit(self, payload: bytes) -> bytes:
        if not self.is_first:
            raise FrameRefused(RejectReason.WRONG_HOP, f"hop {self.hop} takes no client reports")
        self._check_declared_size(payload)
        frame = parse_submit(payload)
        self._check_key_epoch(frame.key_epoch)
        self._check_sizes(frame.reports)
        stored, dups = await self._store_reports(frame.key_epoch, frame.reports)
        self.counters["reports_acknowledged"] += len(frame.reports)
        self.counters["duplicate_reports"] += dups
        self._wake_epoch.set()
        return Ack(stored, dups).to_bytes()

    async def _store_reports(self, key_epoch: int, reports: tuple[bytes, ...]) -> tuple[int, int]:
        """Commit a frame's reports, sharing the transaction with concurrent frames."""
        if not self._writer_running:
            return await self._db(self.inbox.add_reports, key_epoch, reports)
        slot = Pending(key_epoch, reports)
        self._pending.append(slot)
        self._pending_wake.set()
        # Shielded: once queued, the frame is committed whether or not this connection
        # lives to see the ACK (a client that retries then finds it stored once).
        with trio.CancelScope(shield=True):
            await slot.done.wait()
        if slot.error is not None:
            raise slot.error
        assert slot.result is not None
        return slot.result

    async def _writer_loop(self) -> None:
        """Group commit: every frame queued while a commit runs goes into the next one."""
        self._writer_running = True
        try:
            while True:
                await self._pending_wake.wait()
                self._pending_wake = trio.Event()
                batch, self._pending = self._pending, []
                if not batch:
                    continue
                groups = [(p.key_epoch, p.reports) for p in batch]
                try:
                    results = await self._db(self.inbox.add_report_groups, groups)
                    self.counters["commits"] += 1
                    for p, r in zip(batch, results, strict=True):
                        p.result = r
                except Exception as exc:  # e.g. disk full: every frame of it fails
                    for p in batch:
                        p.error = exc
                finally:
                    # Even when cancelled mid-commit, no handler is left waiting.
                    for p in batch:
                        if p.result is None and p.error is None:
                            p.error = ESAError("service stopping")
                        p.done.set()
        finally:
            self._writer_running = False
            for p in self._pending:
                p.error = ESAError("service stopping")
                p.done.set()

    async def _on_batch(self, payload: bytes) -> bytes:
        if self.is_first:
            raise FrameRefused(RejectReason.WRONG_HOP, "hop 0 takes reports from clients only")
        # The header only chooses which key to verify with; nothing is used before that.
        self._check_declared_size(payload)
        key_epoch = unverified_key_epoch(payload)
        self._check_key_epoch(key_epoch)
        channel, chunk = self._verify_upstream(
            payload, key_epoch, lambda keys: verify_batch(payload, keys[self.hop - 1])
        )
        if chunk.receiver_hop != self.hop or chunk.sender_hop != self.hop - 1:
            raise FrameRefused(
                RejectReason.WRONG_HOP,
                f"batch from hop {chunk.sender_hop} to hop {chunk.receiver_hop}; "
                f"this is hop {self.hop}",
            )
        self._check_sizes(chunk.reports)
        try:
            stored, dups, new = await self._db(
                self.inbox.add_chunk,
                batch_id=chunk.batch_id,
                epoch=self._inbox_epoch(chunk.epoch, channel),
                key_epoch=chunk.key_epoch,
                chunk_index=chunk.chunk_index,
                chunk_count=chunk.chunk_count,
                reports=chunk.reports,
            )
        except ConflictingBatch as exc:
            self._log_conflict(exc)
            raise FrameRefused(RejectReason.CONFLICTING_BATCH, str(exc)) from None
        if not new:
            # A resend after a lost ACK (what a crash recovery sends) or a replay of it:
            # either way it is taken only once, and it is no failure.
            self.counters["duplicate_frames"] += 1
            return Ack(0, len(chunk.reports)).to_bytes()
        self.counters["chunks_received"] += 1
        self.counters["reports_acknowledged"] += len(chunk.reports)
        self._kick()
        return Ack(stored, dups).to_bytes()

    def _verify_upstream(
        self, payload: bytes, key_epoch: int, verify: Callable[[list[Ed25519PublicKey]], T]
    ) -> tuple[int, T]:
        """Verify an upstream frame with its chain's keys; returns ``(channel, frame)``.

        A shuffler takes frames from its own chain only. The analyzer ends every chain, and
        the signature says which chain a frame comes from: each chain's shufflers have their
        own keys, so it verifies under at most one chain's keys (tried in turn).
        """
        if self.config.role == "shuffler" or self.channels == 1:
            return self.channel, verify(self.verify_keys[key_epoch])
        error: WireError | None = None
        for channel, keys in enumerate(self.chain_verify_keys[key_epoch]):
            try:
                return channel, verify(keys)
            except BadSignature as exc:
                error = exc
        assert error is not None
        raise error

    def _inbox_epoch(self, epoch: int, channel: int) -> int:
        """Where the analyzer files chain ``channel``'s batch of ``epoch``: its inbox holds
        one upstream batch per epoch id, so chain c's epoch e is ``e·C + c`` (the identity
        for one chain). The chains' batches of epoch e are joined by :meth:`_process`."""
        return epoch * self.channels + channel if self.config.role == "analyzer" else epoch

    async def _on_counts(self, payload: bytes) -> bytes:
        if self.is_first:
            raise FrameRefused(RejectReason.WRONG_HOP, "hop 0 takes reports from clients only")
        key_epoch = unverified_key_epoch(payload)
        self._check_key_epoch(key_epoch)
        _, frame = self._verify_upstream(
            payload, key_epoch, lambda keys: verify_counts(payload, keys[: self.hop])
        )
        last = frame.statements[-1]
        if last.hop != self.hop - 1:
            raise FrameRefused(RejectReason.WRONG_HOP, f"counts end at hop {last.hop}")
        # Each statement is signed on its own, so genuine ones replayed from the wire could
        # be recombined (a hop left out, another epoch's mixed in) and sent ahead of the real
        # chain, which would then be dropped as a replay: take only a whole chain.
        hops = [st.hop for st in frame.statements]
        if (
            hops != list(range(self.hop))
            or len({(st.epoch, st.key_epoch) for st in frame.statements}) != 1
        ):
            raise FrameRefused(
                RejectReason.MALFORMED_FRAME,
                f"counts must chain hops 0..{self.hop - 1} of one epoch, got hops {hops}",
            )
        try:
            new = await self._db(self.inbox.add_counts, batch_id=last.batch_id, counts=payload)
        except ConflictingBatch as exc:
            self._log_conflict(exc)
            raise FrameRefused(RejectReason.CONFLICTING_BATCH, str(exc)) from None
        except InboxError as exc:
            raise FrameRefused(RejectReason.MALFORMED_FRAME, str(exc)) from None
        if not new:
            self.counters["duplicate_frames"] += 1
        self._kick()
        return Ack(0, 0).to_bytes()

    def _log_conflict(self, exc: ConflictingBatch) -> None:
        """A conflicting upstream frame needs an operator: the sender's epochs collide with
        ones stored here, and it will resend until they stop colliding."""
        self._log_once(
            "conflicting_batch", f"refused an upstream frame: {exc}; the sender keeps its reports"
        )
