"""Intake: the reports a party takes in, committed before they are acknowledged.

Clients SUBMIT reports to the first shuffler; every later hop takes signed BATCH chunks and
the COUNTS chain from the hop before it (the analyzer: from the last shuffler of every
chain, :meth:`Intake._verify_upstream`). A frame is acknowledged only after the
transaction that stores it has committed; concurrent SUBMIT frames share one transaction
(group commit, :meth:`Intake._writer_loop`).

Admission of client reports (the first shuffler's ``[admission]``, :meth:`Intake._on_submit`).
A SUBMIT is checked cheapest first, and refused at the first bound it breaks, each refusal a
REJECT counted under its reason (STATUS ``rejected``; the finer cause under ``counters``).
Every check up to the quota reads the frame's header and token only: the payload is split
into reports (``submit_frames_parsed``) only once the frame is admitted, so a refusal costs
the frame's bytes and no more. A ``retry_later`` or ``quota_exceeded`` refusal also stops the
party reading from the connection — from the whole address group when the group's rate or
quota was broken — until its hint has passed (:meth:`~esa.net.Admission.throttle`); a frame
sent meanwhile is refused the same way unparsed (``refused_while_throttled``), and the third
such frame closes the connection (``throttled_connections_closed``,
:data:`~esa.net._admission.THROTTLE_STRIKES`).

1. ``unauthenticated`` — no client token while ``require_client_token`` is set (free: the
   frame's length tells);
2. ``retry_later`` — the connection's or the address group's SUBMIT rate is spent
   (``frames_per_second_per_*``), or the reports stored but not yet processed, closed
   epochs waiting for processing included, would pass ``max_pending_reports``
   (back-pressure); the REJECT says when to retry, and :func:`~esa.net.submit_reports`
   waits that long (bounded) before resending;
3. ``unauthenticated`` — a token that does not verify under the ``[operator]`` key, names
   another deployment or key epoch, or has expired;
4. ``retry_later`` — checked once it is the frame's turn to be peeled (a few frames of an
   address group at a time, :meth:`~esa.net.Admission.peel_turn`: the group's fair share
   of the peel): the group's junk budget is in debt — the reports of its earlier frames
   that did not open were charged to it (``invalid_reports_per_second_per_peer``) and it
   has not been repaid yet (``refused_for_junk``); the group is throttled;
5. ``quota_exceeded`` — the client's reports this epoch would pass its quota: its token's,
   or else its address group's ``reports_per_epoch_per_peer``. The counts are kept on disk
   (:mod:`esa.net._quotas`), written before the commit that stores the frame's reports;
6. ``invalid_report`` — no report of the frame opens under this shuffler's layer key: they
   are peeled (X25519 + AEAD) here, at intake, and the frame refused. A frame that mixes
   reports that open with ones that do not has the latter dropped and counted
   (``invalid_reports_dropped``) and the former stored and acknowledged: a malformed report
   never takes the rest of the frame with it.

Why peel at intake rather than count only verified reports toward ``[epoch] max_reports``:
an onion report of the right size cannot be told from junk without its X25519 + AEAD
check, and that check is due anyway when the epoch is processed. Checked here, junk is never
stored, so it cannot fill the inbox or the backlog cap, close an epoch early
(``max_reports``) or start an epoch's deadline, and no epoch carries junk to be processed
later; a count of verified reports would still store the junk and need the same check
before the count means anything. The cost is one more peel of each honest report (the epoch
is peeled again when processed, its output being what is signed and forwarded). What a
keyless flooder can make the party peel is bounded twice: its junk is charged to its
address group's junk budget, so that it gets ``invalid_reports_per_second_per_peer`` peels
a second on average and is refused from the frame's header the rest of the time; and the
quota is charged before the peel, so it gets at most its quota of peels per epoch. With
``crypto = "ideal"`` (the plaintext stand-in) there is nothing to authenticate and no peel.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import trio
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from .._codec import OnionCodec
from .._errors import (
    BadSignature,
    ConflictingBatch,
    ESAError,
    FrameRefused,
    InboxError,
    WireError,
)
from ._admission import Connection
from ._party import PartyBase, Pending, T
from ._quotas import QUOTAS_FILE, QuotaStore
from ._wire import (
    _PREFIX,
    _SUBMIT,
    _TOKEN_LENGTH,
    Ack,
    ClientToken,
    RejectReason,
    SubmitFrame,
    parse_submit,
    parse_token,
    reports_header,
    unverified_key_epoch,
    verify_batch,
    verify_counts,
)

#: How long a count of the stored-but-unprocessed reports is reused (it only overstates:
#: processing lowers it, and the frames stored since are added).
_BACKLOG_REFRESH_SECONDS = 0.5

__all__ = ["Intake"]


def _submit_head(payload: bytes) -> tuple[int, int, bytes]:
    """(key_epoch, report count, client token) of a SUBMIT payload, read from its header
    and its tail: nothing is split into reports.

    Raises:
        WireError: not a well-formed SUBMIT (:func:`~esa.net._wire.reports_header`).
    """
    count, size = reports_header(payload)
    key_epoch = _SUBMIT.unpack_from(payload, _PREFIX.size)[0]
    end = _PREFIX.size + _SUBMIT.size + count * size
    token = payload[end + _TOKEN_LENGTH.size :] if len(payload) > end else b""
    return int(key_epoch), count, token


class Intake(PartyBase):
    """SUBMIT, BATCH and COUNTS frames: checked, committed, acknowledged."""

    # The backlog count and when it was read (trio's clock), the epochs_closed counter the
    # quotas were last rolled at, the quota window (esa.net._quotas) and the store; class
    # defaults, set per instance once used.
    _backlog: int = 0
    _backlog_at: float = -math.inf
    _quota_epochs: int = -1
    _quota_window: int | None = None
    _quota_store: QuotaStore | None = None
    # Keys charged since the quota counts were last written (quotas of 0 are not kept).
    _quota_dirty: frozenset[str] = frozenset()

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

    async def _on_submit(self, payload: bytes, conn: Connection | None = None) -> bytes:
        """Admit, check, commit and acknowledge a client's SUBMIT (the module docstring
        gives the order of the checks); ``conn`` is the connection it came on (None: no
        per-connection or per-address bound applies).

        Every bound is checked on the frame's header alone (:func:`_submit_head`); the
        payload is split into reports (``submit_frames_parsed``) only once the frame is
        admitted and its reports charged. A ``retry_later`` or ``quota_exceeded`` refusal
        also throttles the connection, or its whole address group when the group's own
        bound was broken (:meth:`~esa.net.Admission.throttle`)."""
        if not self.is_first:
            raise FrameRefused(RejectReason.WRONG_HOP, f"hop {self.hop} takes no client reports")
        rule = self.config.admission
        self._check_declared_size(payload)
        key_epoch, count, token = _submit_head(payload)
        if rule.require_client_token and not token:
            self.counters["refused_keyless"] += 1
            raise FrameRefused(
                RejectReason.UNAUTHENTICATED, "this party takes reports with a client token only"
            )
        conn = conn if conn is not None else Connection(None)
        if conn.sent_early:
            # Sent while throttled: refused from its header, as the refusal that throttled
            # it was (a frame sent at once on a fresh connection of a throttled group:
            # retry_later), and throttled again.
            self.counters["refused_while_throttled"] += 1
            code = RejectReason(conn.throttle_code or RejectReason.RETRY_LATER)
            if code is RejectReason.QUOTA_EXCEEDED:
                wait = self.config.epoch.deadline_seconds
            else:
                wait = rule.retry_after_seconds
            self.admission.throttle(conn, wait)
            raise FrameRefused(code, "sent before the retry hint had passed", retry_after=wait)
        wait = self.admission.frame_wait(
            conn,
            per_connection=rule.frames_per_second_per_connection,
            per_peer=rule.frames_per_second_per_peer,
        )
        if wait:
            self.counters["refused_rate_limited"] += 1
            conn.throttle_code = RejectReason.RETRY_LATER
            raise FrameRefused(RejectReason.RETRY_LATER, "SUBMIT rate limit", retry_after=wait)
        backlog = await self._backlog_count()
        if backlog + count > rule.max_pending_reports:
            self.counters["refused_backlog_full"] += 1
            self.admission.throttle(conn, rule.retry_after_seconds)
            conn.throttle_code = RejectReason.RETRY_LATER
            raise FrameRefused(
                RejectReason.RETRY_LATER,
                f"{backlog} reports wait to be processed (cap {rule.max_pending_reports})",
                retry_after=rule.retry_after_seconds,
            )
        self._check_key_epoch(key_epoch)
        key, quota = self._quota_of(token, key_epoch, conn)
        junk_rate = rule.invalid_reports_per_second_per_peer
        # A few frames of an address group peeled at a time: the group's fair share.
        async with self.admission.peel_turn(conn.peer, rule.peel_frames_per_peer):
            wait = self.admission.junk_wait(conn, junk_rate)
            if wait:
                self.counters["refused_for_junk"] += 1
                self.admission.throttle(conn, wait, group=True)
                conn.throttle_code = RejectReason.RETRY_LATER
                raise FrameRefused(
                    RejectReason.RETRY_LATER,
                    "reports from your address did not open; the party peels no more of them "
                    f"for {wait:.1f} s",
                    retry_after=wait,
                )
            await self._roll_quotas()
            used = self.admission.used(key)
            if quota and used + count > quota:
                self.counters["refused_over_quota"] += 1
                hint = self.config.epoch.deadline_seconds
                # An address group's quota holds for all its connections; a token's for itself.
                self.admission.throttle(conn, hint, group=key.startswith("peer:"))
                conn.throttle_code = RejectReason.QUOTA_EXCEEDED
                raise FrameRefused(
                    RejectReason.QUOTA_EXCEEDED,
                    f"{used} of this epoch's {quota} reports used; {count} more refused",
                    retry_after=hint,
                )
            # Charged before the peel: junk uses the quota up as well as reports that open.
            self._charge(key, count, quota)
            frame = parse_submit(payload)
            self.counters["submit_frames_parsed"] += 1
            reports = frame.reports
            invalid = await self._invalid_reports(frame)
            debt = self.admission.charge_junk(conn, invalid, junk_rate)
            if invalid == count:  # nothing of the frame opens: refused whole, nothing is lost
                self.counters["invalid_reports_refused"] += invalid
                if debt:
                    # Its next frames would be refused unparsed: read none of them meanwhile.
                    self.admission.throttle(conn, debt, group=True)
                    conn.throttle_code = RejectReason.RETRY_LATER
                raise FrameRefused(
                    RejectReason.INVALID_REPORT, f"{invalid} of the {count} reports do not open"
                )
            if invalid:  # a malformed report never takes the rest of the frame with it
                reports = await self._opening_reports(frame)
                self.counters["invalid_reports_dropped"] += count - len(reports)
        stored, dups = await self._store_reports(frame.key_epoch, reports)
        self._backlog += stored
        self.counters["reports_acknowledged"] += len(reports)
        self.counters["duplicate_reports"] += dups
        self._wake_epoch.set()
        return Ack(stored, dups).to_bytes()

    async def _backlog_count(self) -> int:
        """Reports stored but not processed: the open ones and those of closed epochs."""
        now = trio.current_time()
        if now - self._backlog_at >= _BACKLOG_REFRESH_SECONDS:

            def count() -> int:
                closed = self.inbox.epochs("closed")
                open_reports = sum(self.inbox.open_count().values())
                return open_reports + sum(self.inbox.epoch_size(e.epoch) for e in closed)

            self._backlog = await self._db(count)
            self._backlog_at = trio.current_time()
        return self._backlog

    @property
    def _quotas(self) -> QuotaStore:
        if self._quota_store is None:
            self._quota_store = QuotaStore(self.config.state_dir / QUOTAS_FILE)
        return self._quota_store

    async def _roll_quotas(self) -> None:
        """Load the quota counts on first use, and start every quota afresh once an epoch
        has closed since (its window, :mod:`esa.net._quotas`, has moved on).

        Every await comes before any change, so frames rolling at once change it once."""
        closed = self.counters["epochs_closed"]
        if closed == self._quota_epochs:
            return
        window = await self._db(self.inbox.next_epoch)
        loaded = await self._db(self._quotas.load, window) if self._quota_window is None else {}
        if window != self._quota_window:
            self._quota_window = window
            self.admission.new_epoch()
            self._quota_dirty = frozenset()
            for key, used in loaded.items():
                self.admission.charge(key, used)
        self._quota_epochs = closed

    def _charge(self, key: str, reports: int, quota: int) -> None:
        """Charge ``reports`` to ``key``; a quota's count is written with the next commit."""
        self.admission.charge(key, reports)
        if quota:
            self._quota_dirty |= {key}

    async def _commit_reports(self, store: Callable[..., T], *args: object) -> T:
        """Run ``store(*args)`` (an inbox write) after writing the quota counts charged so
        far, in the same worker call: whatever it commits is acknowledged after the counts
        are on disk. If either fails the counts stay due for the next commit."""
        dirty, self._quota_dirty = self._quota_dirty, frozenset()
        window = self._quota_window
        counts = {key: self.admission.used(key) for key in dirty}

        def run() -> T:
            if counts and window is not None:
                self._quotas.save(window, counts)
            return store(*args)

        try:
            return await self._db(run)
        except BaseException:
            self._quota_dirty |= dirty
            raise

    def close(self) -> None:
        """Close the quota store, then the party's inbox and state_dir lock."""
        if self._quota_store is not None:
            self._quota_store.close()
        super().close()

    def _quota_of(self, raw: bytes, key_epoch: int, conn: Connection) -> tuple[str, int]:
        """Whom a frame's reports are charged to, and their quota per epoch (0: none).

        Args:
            raw: the frame's client token (empty: none).
            key_epoch: the key epoch the frame's reports are wrapped for.
            conn: the connection it came on.
        """
        if raw:
            token = self._verify_token(raw, key_epoch)
            return f"client:{token.client_id}", token.quota
        return f"peer:{conn.peer}", self.config.admission.reports_per_epoch_per_peer

    def _verify_token(self, raw: bytes, key_epoch: int) -> ClientToken:
        """The token of a SUBMIT, verified and checked against this deployment, the frame's
        key epoch and the clock.

        Raises:
            FrameRefused: ``unauthenticated``, with the counter ``token_<why>`` moved.
        """
        deployment = self.config.admission.deployment_id
        why, detail = "", ""
        if self.operator_key is None or not deployment:
            why, detail = "not_taken", "this party takes no client tokens"
        else:
            try:
                token = parse_token(raw, self.operator_key)
            except WireError:
                why, detail = "invalid", "client token does not verify"
            else:
                if token.deployment != deployment:
                    why, detail = "other_deployment", "client token is for another deployment"
                elif token.key_epoch != key_epoch:
                    why = "other_epoch"
                    detail = f"client token is for key epoch {token.key_epoch}, not {key_epoch}"
                elif time.time() >= token.expires_at:
                    why, detail = "expired", "client token has expired"
                else:
                    return token
        self.counters[f"token_{why}"] += 1
        raise FrameRefused(RejectReason.UNAUTHENTICATED, detail)

    async def _invalid_reports(self, frame: SubmitFrame) -> int:
        """How many of the frame's reports fail to open under this hop's layer key (peeled
        in a worker thread; 0 with the ideal codec, which has nothing to check)."""
        if not isinstance(self.codec, OnionCodec):
            return 0
        codec, key = self.codec, self.keys[frame.key_epoch].layer
        opened = await trio.to_thread.run_sync(
            lambda: codec.open(
                list(frame.reports),
                key=key,
                epoch=frame.key_epoch,
                hop=self.hop,
                seen=None,
                workers=1,
            )
        )
        return int(opened.invalid)

    async def _opening_reports(self, frame: SubmitFrame) -> tuple[bytes, ...]:
        """The frame's reports that open under this hop's layer key, one peel each (only for a
        frame that mixes reports that open with ones that do not)."""
        codec, key = self.codec, self.keys[frame.key_epoch].layer

        def opens(report: bytes) -> bool:
            opened = codec.open(
                [report], key=key, epoch=frame.key_epoch, hop=self.hop, seen=None, workers=1
            )
            return int(opened.invalid) == 0

        return await trio.to_thread.run_sync(lambda: tuple(r for r in frame.reports if opens(r)))

    async def _store_reports(self, key_epoch: int, reports: tuple[bytes, ...]) -> tuple[int, int]:
        """Commit a frame's reports, sharing the transaction with concurrent frames."""
        if not self._writer_running:
            return await self._commit_reports(self.inbox.add_reports, key_epoch, reports)
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
                    results = await self._commit_reports(self.inbox.add_report_groups, groups)
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
