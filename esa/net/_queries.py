"""Queries: a party's STATUS, and the analyzer's RESULT (the estimate over every epoch).

QUERY frames carry a JSON object and are answered with a JSON REPLY. STATUS comes in two
views. The batch port, which anyone may reach, answers the public one
(:meth:`Queries.public_status`): only what a submitting client or the operator's
``esa close-epoch`` needs — the party, the deployment id, the protocol and report format
it serves (which a client checks against the signed manifest, never takes from here) and a
first shuffler's next epoch id — and nothing about counters, connections, epochs, the
budget or failures. The full view (:meth:`Queries.status`), which operators read, is served
on the query listener only; asking the batch port for it (``{"view": "full"}``) is refused
as ``unexpected_kind``. RESULT is the protocol's estimate over every processed epoch, with
the drop check and the trap audit's counts; TRAP_COMMIT and TRAP_OPEN go to the trap audit
(:class:`~esa.net.TrapAudit`).

RESULT is served on the query listener only. It reads the result summary the analyzer
stores in the transaction that analyzes an epoch (or records a trap commitment or
opening; :meth:`Inbox.summary`), one row, so that any number of queries costs intake
nothing. A RESULT with another ``n`` than the inferred one, or with ``messages``, is
computed afresh from a read-only snapshot of the inbox, one at a time, outside the lock
that serializes the party's commits.
"""

from __future__ import annotations

import collections
import json
from typing import Any

import numpy as np
import trio

from protocols import ShuffleProtocol

from .._document import json_safe
from .._errors import FrameRefused
from .._roles import check_shares, lost_estimate, reports_per_fake
from . import _ledger
from ._chain import COUNTS, chains_of, counts_of, is_empty
from ._inbox import Inbox
from ._processing import analyzer_guarantee
from ._traps import TrapAudit
from ._wire import QueryKind, RejectReason, Reply, parse_query

__all__ = ["Queries", "compute_result"]

#: Decoded message bytes per RESULT reply page (hex doubles it).
_MESSAGE_PAGE_BYTES = 1 << 20


class Queries(TrapAudit):
    """QUERY frames: STATUS at every party; RESULT and the trap audit at the analyzer."""

    _fresh_results: trio.CapacityLimiter | None = None

    def _install_summary(self) -> None:
        """The analyzer: keep the result summary in the inbox (see the module docstring);
        an inbox without one (analyzed by an earlier version) gets it now."""
        if self.config.role != "analyzer":
            return
        protocol, channels = self.protocol, self.channels
        self.inbox.summarize = lambda inbox: compute_result(inbox, protocol, channels, {})
        if self.inbox.summary() is None:
            self.inbox.refresh_summary()

    async def _on_query(self, payload: bytes, *, query_port: bool = True) -> bytes:
        q = parse_query(payload)
        try:
            params = json.loads(q.body or b"{}")
            if not isinstance(params, dict):
                raise ValueError
        except (ValueError, RecursionError):  # RecursionError: nesting deeper than json parses
            raise FrameRefused(
                RejectReason.MALFORMED_FRAME, "query body must be a JSON object"
            ) from None
        if q.what is QueryKind.STATUS and query_port:
            body = await self.status()
        elif q.what is QueryKind.STATUS:
            if params.get("view", "public") != "public":
                raise FrameRefused(
                    RejectReason.UNEXPECTED_KIND,
                    "the full STATUS is served on the party's query listener (mutual TLS), "
                    "not its batch port, which answers the public view only",
                )
            body = await self.public_status()
        elif self.config.role != "analyzer":
            raise FrameRefused(RejectReason.UNEXPECTED_KIND, f"{q.what.name} is for the analyzer")
        elif q.what is QueryKind.RESULT:
            if not query_port:
                raise FrameRefused(
                    RejectReason.UNEXPECTED_KIND,
                    "RESULT is served on the analyzer's query listener, not its batch port",
                )
            body = await self._result(params)
        elif q.what is QueryKind.TRAP_COMMIT:
            body = await self._trap_commit(params)
        else:
            body = await self._trap_open(params)
        # STATUS and RESULT are documents a user reads: non-finite numbers listed as such;
        # the trap replies are the audit's protocol messages, with no float in them.
        document = (
            _jsonable(body)
            if q.what in (QueryKind.STATUS, QueryKind.RESULT)
            else json_safe(body, {})
        )
        return Reply(json.dumps(document).encode()).to_bytes()

    async def public_status(self) -> dict[str, Any]:
        """STATUS as the batch port answers it, to anyone: what a submitting client and
        the operator's close need, nothing about the party's load, counters or budget.

        Returns:
            ``view`` ("public"), ``party``, ``hop``, ``channel``, ``channels``,
            ``protocol``, ``crypto``, ``deployment`` and, at a first shuffler,
            ``next_epoch``.
        """
        first = {"next_epoch": await self._db(self.inbox.next_epoch)} if self.is_first else {}
        return {"view": "public", **first, **self._identity()}

    def _identity(self) -> dict[str, Any]:
        """Who the party is and what it serves: the public part of STATUS."""
        return {
            "party": self.party_name,
            "hop": self.hop,
            "channel": self.channel,
            "channels": self.channels,
            "protocol": self.protocol_table,
            "crypto": self.config.crypto,
            # The signed manifest's id (esa submit --manifest compares it); None: no manifest.
            "deployment": (
                self.config.manifest.deployment_id if self.config.manifest is not None else None
            ),
        }

    async def status(self) -> dict[str, Any]:
        """STATUS as the query listener answers it (to holders of a client certificate):
        the public view, with the party's counters, epochs, connections, failures and
        (the analyzer) its privacy budget.

        Returns:
            The full STATUS body (``view``: "full").
        """
        epochs = await self._db(self.inbox.epochs)
        open_count = await self._db(self.inbox.open_count)
        set_aside = await self._db(self.inbox.set_aside_counts)
        by_state = collections.Counter(e.state for e in epochs)
        # The first shuffler's next epoch id is what an operator's CLOSE_EPOCH_AT names.
        first = {"next_epoch": await self._db(self.inbox.next_epoch)} if self.is_first else {}
        return {
            "view": "full",
            **first,
            **self._identity(),
            "counters": dict(self.counters),
            "rejected": dict(self.rejected),
            "epochs": {s: by_state.get(s, 0) for s in ("closed", "processed", "forwarded")},
            "open_reports": sum(open_count.values()),
            "active_connections": self.admission.active,
            **({"last_forward_error": self.last_forward_error} if self.last_forward_error else {}),
            **({"failed_epochs": dict(self._failed_epochs)} if self._failed_epochs else {}),
            **({"set_aside": set_aside} if set_aside else {}),
            # What the released epochs spent (esa.net._ledger); the analyzer only.
            **(
                {"budget": await self._db(_ledger.spent_view, self.inbox, self.config.budget)}
                if self.config.role == "analyzer"
                else {}
            ),
        }

    async def _result(self, params: dict[str, Any]) -> dict[str, Any]:
        """RESULT: the stored summary when it answers ``params``, else a fresh computation
        on a read-only snapshot (one at a time, outside the commit lock)."""
        _check_n(params.get("n"))
        if not params.get("messages"):
            summary = await self._db(self.inbox.summary)
            if summary is not None and params.get("n") in (None, summary.get("n")):
                return summary
        if self._fresh_results is None:
            self._fresh_results = trio.CapacityLimiter(1)
        path, protocol, channels = self.config.inbox_path, self.protocol, self.channels

        def fresh() -> dict[str, Any]:
            with Inbox.open_existing(path) as snapshot:
                return compute_result(snapshot, protocol, channels, params)

        async with self._fresh_results:
            return await trio.to_thread.run_sync(fresh)

    def result(self, params: dict[str, Any]) -> dict[str, Any]:
        """The estimate over every processed epoch, computed now from the party's inbox
        (blocking; the service answers RESULT from the stored summary instead)."""
        return compute_result(self.inbox, self.protocol, self.channels, params)


def _check_n(n_param: Any) -> None:
    if n_param is not None and (
        isinstance(n_param, bool) or not isinstance(n_param, int) or not 1 <= n_param <= 2**53
    ):
        raise FrameRefused(
            RejectReason.MALFORMED_FRAME, f"n must be an integer in [1, 2**53], got {n_param!r}"
        )


def compute_result(
    inbox: Inbox, protocol: ShuffleProtocol, channels: int, params: dict[str, Any]
) -> dict[str, Any]:
    """The analyzer's result over every processed epoch stored in ``inbox``.

    Args:
        inbox: the analyzer's inbox (or a read-only snapshot of it).
        protocol: the configured protocol.
        channels: the deployment's shuffler chains.
        params: the RESULT query's parameters (``n``, ``messages``, ``messages_offset``).

    Returns:
        The RESULT reply's body, JSON-ready (non-finite floats become None).

    Raises:
        FrameRefused: a malformed parameter.
    """
    # Records merged into their epoch's lead (the other chains' ids) carry no output.
    outputs = [(r, msgs) for r, msgs in inbox.outputs() if "merged_into" not in r.stats]
    rows = [m for _, msgs in outputs for m in msgs]
    size = protocol.message_size
    arr = (
        np.frombuffer(b"".join(rows), dtype=np.uint8).reshape(-1, size)
        if rows
        else np.zeros((0, size), np.uint8)
    )
    messages, valid = protocol.decode(arr)
    messages = messages[valid]
    # Opened trap reports are uniform fake messages (see make_traps): the estimator
    # removes them like the shufflers' fakes. Only openings the [auditor] signed count,
    # and each trap report once (Inbox.open_traps): the reports removed are distinct
    # reports that reached the analyzer, so n never drops below the other reports.
    openings, trap_pending = inbox.trap_openings()
    signed = [o for o in openings if o.auditor is not None]
    unsigned = len(openings) - len(signed)
    trap_total = sum(o.traps for o in signed)
    trap_arrived = sum(o.arrived for o in signed)
    # The estimators count fake values; the shufflers' statements and the trap audit
    # count reports, and a Split-Mix fake value travels as `shares` reports.
    spec = protocol.share_spec
    per_value = reports_per_fake(protocol)
    fake_reports = sum(int(rec.stats.get("fakes", 0)) for rec, _ in outputs) + trap_arrived
    n_fakes = fake_reports // per_value
    n_param = params.get("n")
    _check_n(n_param)
    users_messages = len(messages) - fake_reports
    n = n_param or max(1, round(users_messages / protocol.messages_per_user))
    est = protocol.estimate(messages, n=n, n_fakes=n_fakes)
    if not outputs:  # nothing processed yet: no estimate, rather than one of no data
        est = lost_estimate(est, no_epoch_processed=True)
    elif spec is not None:  # a lost share loses the sum (see check_shares)
        est = check_shares(protocol, est, len(messages), n, n_fakes)
    hops: list[dict[str, Any]] = []
    problems: list[str] = []
    for rec, _ in outputs:
        problems += [f"epoch {rec.epoch}: {p}" for p in rec.stats.get("problems", [])]
        # Every chain's shufflers in chain order, then the analyzer (run_pipeline's order).
        chains = chains_of(rec)
        per_hop = [
            {"hop": s["hop"], "role": "shuffler", "channel": c, **counts_of(s)}
            for c, chain in enumerate(chains)
            for s in chain
        ] + [rec.stats["analyzer"]]
        if not hops:
            hops = [dict(h) for h in per_hop]
        else:
            for acc, h in zip(hops, per_hop, strict=False):
                for k in COUNTS:
                    acc[k] += h[k]
    body: dict[str, Any] = {
        "estimate": est.values,
        "expected_std": est.expected_std,
        "messages_used": est.messages_used,
        "estimate_extra": est.extra,
        "n": n,
        "n_fakes": n_fakes,
        "epochs": len(outputs),
        # Epochs closed with no report on any chain (an operator's close of an epoch
        # nobody submitted to): recorded, so the operator sees the close went through.
        "empty_epochs": [rec.epoch // channels for rec, _ in outputs if is_empty(rec)],
        "hops": hops,
        "drop_check": {"ok": False, "problems": problems},
        "traps": {
            "opened": trap_total,
            "arrived": trap_arrived,
            "unopened_commitments": trap_pending,
            # Openings recorded before openings were signed may be anyone's: left out.
            **({"unsigned_openings": unsigned} if unsigned else {}),
        },
    }
    for o in signed:
        if o.missing:
            assert o.auditor is not None
            problems.append(
                f"trap commitment {o.commitment.hex()[:16]}… opened by auditor "
                f"{o.auditor.hex()[:16]}…: {o.missing} of its {o.traps} trap reports never "
                "reached the analyzer: a hop dropped or replaced reports (unless the "
                "auditor did not submit them before the epoch closed)"
            )
    body["drop_check"]["ok"] = not problems
    # The statement for the run that happened (esa.net._processing.analyzer_guarantee).
    guarantee = analyzer_guarantee(protocol, [rec for rec, _ in outputs])
    body["privacy"] = None if guarantee is None else guarantee.to_json()
    # A shuffler signed another crowd rule than the deployment's: no ε is stated, and why.
    refused = [
        f"epoch {rec.epoch // channels}: {p}"
        for rec, _ in outputs
        for p in rec.stats.get("threshold_mismatch", [])
    ]
    if refused:
        body["privacy_refused"] = refused
    # Epochs the [budget] refused to release: not in this result, and why.
    body["budget"] = {"refused": _ledger.refusals(inbox._db)}
    if params.get("messages"):
        # Paged, so a reply stays far below the frame limit whatever n is.
        offset = params.get("messages_offset", 0)
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise FrameRefused(RejectReason.MALFORMED_FRAME, f"bad messages_offset {offset!r}")
        page = rows[offset : offset + _MESSAGE_PAGE_BYTES // size]
        body["messages_hex"] = b"".join(page).hex()
        body["messages_total"] = len(rows)
    return dict(_jsonable(body))


def _jsonable(obj: Any) -> Any:
    """A reply's body as JSON, by the rule of every document of the project: each non-finite
    number is ``null`` and its place listed in ``non_finite`` (kept from a stored summary that
    already lists some), so a lost estimate is never read as an absent value."""
    if not isinstance(obj, dict):
        return json_safe(obj, {})
    places: dict[str, str] = dict(obj.get("non_finite") or {})
    body = json_safe({k: v for k, v in obj.items() if k != "non_finite"}, places)
    body["non_finite"] = places
    return body
