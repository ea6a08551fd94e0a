"""Processing and forwarding: a closed epoch through the role objects, then down the chain.

The service is transport and durability around the role objects of :mod:`esa`'s core: it
never peels, thresholds, fakes, permutes or estimates itself, it calls
:class:`~esa.Shuffler` / :class:`~esa.Analyzer` on the reports its inbox holds.

1. A fresh :class:`~esa.Shuffler` processes a closed epoch in a worker thread
   (:func:`compute`); its output is cut into chunks signed with this party's Ed25519 key,
   and a signed :class:`~esa.net.CountStatement` is appended to the upstream chain; all of
   it commits in one transaction.
2. The chunks and the chain are sent to hop ``h+1`` until each is acknowledged (resends are
   byte-identical and idempotent at the receiver).

The analyzer does 1 with :class:`~esa.Analyzer`, checks the chain of counts (drop
detection, :func:`~esa.net.check_chain`) and stores the decoded messages. With several
chains it files chain c's epoch e under inbox epoch ``e·C + c`` and analyzes epoch e only
when every chain has delivered it (:meth:`Processing._process_group`).
"""

from __future__ import annotations

import math
import sqlite3
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import trio

import crypto
from protocols import ShuffleProtocol

from .._codec import OnionCodec
from .._errors import ESAError, InboxDamaged, PeerRejected, WireError, _Abandoned
from .._guarantee import RunFacts, RunGuarantee, run_guarantee
from .._roles import Analyzer, Shuffler, reports_per_fake
from . import _ledger
from ._chain import (
    COUNTS,
    batch_id_for,
    chains_of,
    check_chain,
    check_thresholds,
    statement_json,
)
from ._frames import FrameStream, expect_ack, open_stream
from ._inbox import EpochRecord
from ._party import PartyBase, T, event, log
from ._wire import MAX_FRAME_SIZE, BatchChunk, CountsFrame, CountStatement, verify_counts

__all__ = ["Processing", "analyzer_guarantee", "compute"]


def analyzer_guarantee(protocol: ShuffleProtocol, epochs: list[EpochRecord]) -> RunGuarantee | None:
    """The privacy statement the analyzer makes for its estimate over ``epochs``.

    Each processed epoch is its own shuffle; its facts come from what the analyzer counted
    and what the shufflers' signed count statements say: users that arrived are the
    reports the analyzer kept, less the fakes the statements say were added, less every
    report a statement or the analyzer counts as invalid, replayed or held (as if each
    were another user's), divided by the messages per user (rounded down); fakes are the
    statements' ``fakes_added`` less those lost reports. A user reports in one epoch, so
    the statement over every epoch is the weakest epoch's (the largest ε_c), computed by
    :func:`esa.run_guarantee` with ``on_mismatch="recompute"``. ``None`` before any epoch
    was processed.

    A noisy threshold adds the shufflers' release decisions to the statement
    (:func:`esa.run_guarantee`: ε + m·k·ε_t), with the ε_t the shufflers signed in their
    count statements (the largest, if they differ: m·k·max ε_t bounds the sum over hops).
    An epoch whose statements predate signed thresholds uses the ε_t the analyzer
    recorded from its own ``[shuffle] threshold_epsilon`` then. ``None`` as well when any
    epoch's signed thresholds disagreed with the deployment's (``threshold_mismatch`` in
    its stats, :func:`~esa.net.check_thresholds`): no ε is stated for such a run.
    """
    per_fake = reports_per_fake(protocol)
    worst: RunGuarantee | None = None
    for rec in epochs:
        if rec.stats.get("threshold_mismatch"):
            return None
        analyzer = rec.stats.get("analyzer", {})
        statements = [s for chain in chains_of(rec) for s in chain]
        if all("threshold_epsilon" in s for s in statements):
            signed = [s["threshold_epsilon"] for s in statements]
            eps_t = max((float(e) for e in signed if e is not None), default=None)
        else:  # stored before the shufflers signed their threshold
            eps_t = rec.stats.get("threshold_epsilon")
        lost = sum(int(analyzer.get(k, 0)) for k in ("invalid", "replayed"))
        lost += sum(int(s[k]) for s in statements for k in ("invalid", "replayed", "held"))
        fakes = sum(int(s["fakes_added"]) for s in statements)
        user_reports = max(0, int(analyzer.get("forwarded", 0)) - fakes - lost)
        facts = RunFacts(
            n_users=int(user_reports // protocol.messages_per_user),
            fakes_added=tuple(int(s["fakes_added"]) // per_fake for s in statements),
            fakes_arrived=max(0, fakes - lost) // per_fake,
            shufflers=max([1, *(len(chain) for chain in chains_of(rec))]),
            threshold=0,  # the analyzer sees what a threshold held, not the threshold
            domain=protocol.domain,
            threshold_epsilon=eps_t,
        )
        g = run_guarantee(protocol, facts, on_mismatch="recompute")
        if worst is None or not g.privacy.epsilon_central <= worst.privacy.epsilon_central:
            worst = g
    return worst


class Processing(PartyBase):
    """The work loop: process closed epochs, then forward processed ones (shufflers)."""

    async def _work_loop(self) -> None:
        """Process closed epochs, then forward processed ones (shufflers)."""
        backoff = 0.05
        while True:
            self._wake_work = trio.Event()
            try:
                ok = await self._work_once()
            except Exception as exc:
                # The inbox itself failed (disk full, locked by another process; a bug
                # would land here too). Every write is one transaction, so nothing is
                # half done: retry later, with backoff, and keep serving meanwhile.
                ok = False
                storage = isinstance(exc, sqlite3.Error)
                self.counters["storage_errors" if storage else "work_errors"] += 1
                self._log_once("work", f"processing paused, will retry: {exc!r}")
            if ok:
                backoff = 0.05
                await self._wake_work.wait()
            else:
                backoff = min(2.0, backoff * 2)
                with trio.move_on_after(backoff):
                    await self._wake_work.wait()

    async def _work_once(self) -> bool:
        """Process every closed epoch, then forward every processed one (shufflers);
        False if something is left to retry."""
        for rec in await self._db(self.inbox.epochs, "closed"):
            if rec.epoch in self._failed_epochs:
                continue
            try:
                await self._process(rec)
            except sqlite3.Error:
                raise  # the inbox, not the epoch: retried as a whole
            except Exception as exc:
                # Leave the epoch closed (its reports stay durable) and go on with the
                # others; it is retried after a restart, e.g. with a fixed config or a
                # repaired inbox.
                if isinstance(exc, InboxDamaged):
                    reason = f"not processed: {exc}"
                    self.counters["epochs_damaged"] += 1
                    advice = (
                        "; its reports stay stored. Restore the inbox from a backup, or "
                        "stop the party, set the damaged reports aside (esa inbox set-aside) "
                        "and restart it to process the rest"
                    )
                else:
                    reason, advice = f"failed to process: {exc!r}", ""
                for e in self._epoch_group(rec.epoch):
                    self._failed_epochs[e] = reason
                self.counters["epochs_failed"] += 1
                log(f"epoch {rec.epoch} {reason}{advice}")
        ok = True
        if self.config.role == "shuffler":
            for rec in await self._db(self.inbox.epochs, "processed"):
                ok = await self._forward(rec) and ok
        return ok

    def _epoch_group(self, epoch: int) -> range:
        """The inbox epoch ids processed together with ``epoch``: at the analyzer, every
        chain's batch of one epoch (see :meth:`_inbox_epoch`); elsewhere just ``epoch``."""
        if self.config.role != "analyzer":
            return range(epoch, epoch + 1)
        lead = epoch - epoch % self.channels
        return range(lead, lead + self.channels)

    async def _process(self, rec: EpochRecord) -> None:
        if self.config.role == "analyzer":
            await self._process_group(rec)
            return
        reports = await self._db(self.inbox.epoch_reports, rec.epoch)
        dups = await self._db(self.inbox.upstream_duplicates, rec.epoch)
        commit = await compute(lambda: self._shuffle_epoch(rec, reports, dups))
        # Finished work is kept: a shutdown now waits for this one short transaction.
        with trio.CancelScope(shield=True):
            await self._db(self.inbox.commit_processed, rec.epoch, **commit)
        self.counters["epochs_processed"] += 1

    async def _process_group(self, rec: EpochRecord) -> None:
        """Analyze one epoch once every chain has delivered (closed) its batch of it.

        The whole group's output and statistics commit in ONE transaction, on the first
        chain's epoch id (the lead); the other chains' ids are then marked processed (their
        input dropped) one transaction each. A crash in between leaves the lead processed
        and some others closed: those are only marked on restart, never analyzed again, so
        every report is still counted exactly once. With one chain the group is the epoch.
        """
        group = self._epoch_group(rec.epoch)
        by_id = {r.epoch: r for r in await self._db(self.inbox.epochs)}
        members = [by_id.get(i) for i in group]
        lead = members[0]
        if lead is not None and lead.state != "closed":
            for r in members[1:]:
                if r is not None and r.state == "closed":
                    await self._db(
                        self.inbox.commit_processed, r.epoch, stats={"merged_into": lead.epoch}
                    )
            return
        ready = [r for r in members if r is not None]
        if len(ready) < len(members):
            return  # a chain has not delivered this epoch yet; its batch wakes us up
        if any(r.state != "closed" for r in ready):
            raise ESAError(f"epoch group {list(group)}: a member was processed before its lead")
        reports = [await self._db(self.inbox.epoch_reports, r.epoch) for r in ready]
        dups = [await self._db(self.inbox.upstream_duplicates, r.epoch) for r in ready]
        commit = await compute(lambda: self._analyze_epoch(ready, reports, dups))
        mismatch = commit["stats"].get("threshold_mismatch")
        if mismatch:  # counted whether or not a [budget] then refuses the release
            self.counters["threshold_mismatches"] += 1
            event(
                "threshold_mismatch",
                party=self.party_name,
                epoch=ready[0].epoch // self.channels,
                problems=mismatch,
            )
        # The budget ledger's row commits with the release, or the release is refused.
        entry = await compute(lambda: self._ledger_entry(ready[0], commit["stats"]))
        budget = self.config.budget
        kill = bool(self.config.simulation.get("kill_in_release", False))

        def also(db: sqlite3.Connection) -> object:
            return _ledger.record_release(db, entry, budget=budget, kill_hook=kill)

        with trio.CancelScope(shield=True):  # as in _process
            try:
                await self._db(self.inbox.commit_processed, ready[0].epoch, **commit, also=also)
            except _ledger.BudgetExceeded as refused:
                await self._db(self._refuse_release, group, refused)
                return
            for r in ready[1:]:
                await self._db(
                    self.inbox.commit_processed, r.epoch, stats={"merged_into": ready[0].epoch}
                )
        self.counters["epochs_processed"] += 1

    def _signed_threshold(self) -> int | None:
        """The crowd threshold T the signed manifest states (None: it states none)."""
        manifest = self.config.manifest
        return None if manifest is None or manifest.shuffle is None else manifest.threshold

    def _ledger_entry(self, lead: EpochRecord, stats: dict[str, Any]) -> _ledger.LedgerEntry:
        """The ledger row of the epoch group whose lead is ``lead`` and whose analysis wrote
        ``stats``: the guarantee the analyzer states for that epoch alone
        (:func:`analyzer_guarantee`, the run's own guarantee)."""
        rec = EpochRecord(
            lead.epoch, lead.key_epoch, "processed", lead.upstream_counts, None, stats
        )
        guarantee = analyzer_guarantee(self.protocol, [rec])
        manifest = self.config.manifest
        if guarantee is None:  # signed thresholds that disagree: nothing proven (ε = ∞)
            return _ledger.LedgerEntry(
                epoch=lead.epoch // self.channels,
                inbox_epoch=lead.epoch,
                deployment=None if manifest is None else manifest.deployment_id,
                protocol=self.protocol.name,
                epsilon=math.inf,
                delta=1.0,
                users=0,
                bound="refused: the shufflers' signed thresholds disagree with the deployment",
                released_at=time.time(),
            )
        return _ledger.LedgerEntry(
            epoch=lead.epoch // self.channels,
            inbox_epoch=lead.epoch,
            deployment=None if manifest is None else manifest.deployment_id,
            protocol=self.protocol.name,
            epsilon=float(guarantee.privacy.epsilon_central),
            delta=float(guarantee.privacy.delta),
            users=guarantee.facts.n_users,
            bound=str(guarantee.privacy.bound),
            released_at=time.time(),
        )

    def _refuse_release(self, group: range, refused: _ledger.BudgetExceeded) -> None:
        """After a release was refused for the budget (blocking; call through ``_db``): record
        it durably, count it once (``budget_refusals``), log one ``budget_refused`` event, and
        leave the epoch's inbox ids closed and skipped until a restart."""
        first = refused.epoch not in _ledger.refusals(self.inbox._db)
        if first:
            self.counters["budget_refusals"] += 1  # written by the refusal's transaction
        _ledger.record_refusal(self.inbox, refused)
        for e in group:
            self._failed_epochs[e] = f"refused: {refused.reason}"
        event(
            "budget_refused",
            party=self.party_name,
            epoch=refused.epoch,
            inbox_epochs=list(group),
            reason=refused.reason,
            first_refusal=first,
        )

    def _as_batch(self, reports: list[bytes]) -> Any:
        if isinstance(self.codec, OnionCodec):
            arr = np.empty(len(reports), dtype=object)
            arr[:] = reports
            return arr
        return reports  # the ideal codec parses a list of row bytes itself

    def _upstream(self, rec: EpochRecord, channel: int | None = None) -> tuple[CountStatement, ...]:
        if rec.upstream_counts is None:
            return ()
        # Verified on receipt; checked again (m signatures, cheap) rather than trusted.
        chain = self.channel if channel is None else channel
        keys = self.chain_verify_keys[rec.key_epoch][chain][: self.hop]
        return verify_counts(rec.upstream_counts, keys).statements

    def _shuffle_epoch(self, rec: EpochRecord, reports: list[bytes], dups: int) -> dict[str, Any]:
        keys = self.keys[rec.key_epoch]
        shuffler = Shuffler(
            hop=self.hop,
            codec=self.codec,
            key=keys.layer if isinstance(self.codec, OnionCodec) else None,
            route=self.routes[rec.key_epoch],
            protocol=self.protocol,
            threshold=self.config.threshold,
            threshold_noise=self.config.threshold_epsilon,  # Z from the OS CSPRNG
            fake_reports=self.config.fake_reports,
            fake_rng=self.fake_rng,
            workers=self.config.workers,
            channel=self.channel,  # its fakes look like this chain's traffic
        )
        out, c = shuffler.process(self._as_batch(reports), epoch=rec.key_epoch)
        items = [bytes(r) if isinstance(r, bytes) else r.tobytes() for r in out]
        bid = batch_id_for(keys.public().verify_public, rec.key_epoch, rec.epoch)
        size = self.config.limits.chunk_reports
        parts = [items[i : i + size] for i in range(0, len(items), size)] or [[]]
        outbox = [
            BatchChunk(
                self.hop, self.hop + 1, rec.key_epoch, rec.epoch, bid, i, len(parts), tuple(p)
            ).sign(keys.signing)
            for i, p in enumerate(parts)
        ]
        statement = CountStatement(
            hop=self.hop,
            key_epoch=rec.key_epoch,
            epoch=rec.epoch,
            batch_id=bid,
            received=c.received + dups,
            invalid=c.invalid,
            replayed=c.replayed + dups,
            held=c.held,
            fakes_added=c.fakes_added,
            forwarded=c.forwarded,
            # The crowd rule it applied: the analyzer's privacy statement is computed from it.
            threshold=self.config.threshold,
            threshold_epsilon=self.config.threshold_epsilon,
        ).signed_by(keys.signing)
        chain = CountsFrame((*self._upstream(rec), statement)).to_bytes()
        return {"stats": statement_json(statement), "counts": chain, "outbox": outbox}

    def _analyze_epoch(
        self, members: list[EpochRecord], reports: list[list[bytes]], dups: list[int]
    ) -> dict[str, Any]:
        """Analyze every chain's batch of one epoch (``members[c]`` from chain c).

        Each batch is opened with the analyzer key of its own key epoch; counters add up and
        messages are concatenated, which is what the in-process analyzer computes on the
        concatenated batches (a report repeated across chains never reaches this point: the
        inbox keeps one copy per key epoch and counts the rest as replayed).
        """
        counters: dict[str, Any] = {}
        messages = []
        chains = []
        problems: list[str] = []
        mismatch: list[str] = []
        for c, (rec, batch, dup) in enumerate(zip(members, reports, dups, strict=True)):
            keys = self.keys[rec.key_epoch]
            analyzer = Analyzer(
                hop=self.hop,
                codec=self.codec,
                key=keys.layer if isinstance(self.codec, OnionCodec) else None,
                protocol=self.protocol,
                workers=self.config.workers,
            )
            # The per-epoch estimate is discarded: the RESULT query estimates over all epochs.
            out = analyzer.process(
                self._as_batch(batch), epoch=rec.key_epoch, n_users=max(1, len(batch)), n_fakes=0
            )
            got = out.counters.to_json()
            got["received"] += dup
            got["replayed"] += dup
            if not counters:
                counters = got
            else:
                for k in COUNTS:
                    counters[k] += got[k]
            messages.append(out.messages)
            chain = self._upstream(rec, c)
            chains.append([statement_json(s) for s in chain])
            found = check_chain(
                chain,
                hops=self.shufflers,
                epoch=rec.epoch // self.channels,
                received=len(batch) + dup,
            )
            problems += found if self.channels == 1 else [f"chain {c + 1}: {p}" for p in found]
            rule = check_thresholds(
                chain,
                threshold_epsilon=self.config.threshold_epsilon,
                threshold=self._signed_threshold(),
            )
            mismatch += rule if self.channels == 1 else [f"chain {c + 1}: {p}" for p in rule]
        msgs = np.concatenate(messages) if len(messages) > 1 else messages[0]
        rows = self.protocol.encode(msgs) if len(msgs) else np.zeros((0, 1), np.uint8)
        stats: dict[str, Any] = {
            "analyzer": counters,
            "problems": problems,
            "fakes": sum(int(s["fakes_added"]) for chain in chains for s in chain),
        }
        if mismatch:  # no ε is stated for this epoch (analyzer_guarantee)
            stats["threshold_mismatch"] = mismatch
            stats["problems"] = problems + mismatch
        # One chain keeps the stats format of existing inboxes.
        if self.channels == 1:
            stats["chain"] = chains[0]
        else:
            stats["chains"] = chains
        return {"stats": stats, "output": [r.tobytes() for r in rows]}

    async def _forward(self, rec: EpochRecord) -> bool:
        """Send an epoch's stored chunks and counts to the next hop; False on failure."""
        assert self.config.next is not None
        pending = await self._db(self.inbox.pending_outbox, rec.epoch)
        timeout = self.config.limits.read_timeout_seconds
        try:
            stream = await open_stream(self.next_address, timeout=timeout)
            async with stream:
                fs = FrameStream(stream, max_frame=MAX_FRAME_SIZE, read_timeout=timeout)
                for entry in pending:
                    await fs.send(entry.payload)
                    expect_ack(await fs.receive())
                    await self._db(self.inbox.mark_acked, rec.epoch, entry.chunk_index)
                assert rec.counts is not None
                await fs.send(rec.counts)
                expect_ack(await fs.receive())
        except (OSError, trio.TooSlowError, trio.BrokenResourceError, ESAError, WireError) as exc:
            self.counters["forward_failures"] += 1
            self.last_forward_error = _forward_reason(exc)
            self._log_once(
                "forward",
                f"cannot forward epoch {rec.epoch} to {self.config.next.host}:"
                f"{self.config.next.port}, will retry: {self.last_forward_error}",
            )
            return False
        self.last_forward_error = ""
        await self._db(self.inbox.mark_forwarded, rec.epoch)
        self.counters["epochs_forwarded"] += 1
        return True


async def compute(fn: Callable[[], T]) -> T:
    """``fn()`` — an epoch's CPU work: peel, threshold, fakes, permute, sign or analyze — in
    a worker thread that a shutdown abandons instead of waiting for.

    The work only computes: it writes nothing to the inbox, and its caller commits the
    result in one transaction after it returns. So a SIGTERM during it stops the party at
    once, nothing of the epoch is stored, and after the restart the epoch, still closed,
    is processed again from its stored input: every acknowledged report still counts
    exactly once. The abandoned thread's result is dropped, and the thread itself stops at
    its next progress point (every ~16 k reports, :func:`crypto.report_progress`) rather
    than running on in a process that outlives the service (tests).
    """
    abandoned = threading.Event()

    def work() -> T:
        def checkpoint(done: int) -> None:
            if abandoned.is_set():
                raise _Abandoned("the service stopped; this result would be discarded")

        with crypto.report_progress(checkpoint):
            return fn()

    try:
        return await trio.to_thread.run_sync(work, abandon_on_cancel=True)
    finally:
        abandoned.set()  # a no-op once the work is done


def _forward_reason(exc: BaseException) -> str:
    """Why a forward failed, in words: the next hop's REJECT reason, or the network error."""
    if isinstance(exc, PeerRejected):
        return f"the next hop refused it: {exc.reason} ({exc.detail})"
    if isinstance(exc, trio.TooSlowError):
        return "the next hop did not answer in time"
    return f"{type(exc).__name__}: {exc}"
