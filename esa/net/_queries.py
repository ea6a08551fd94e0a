"""Queries: a party's STATUS, and the analyzer's RESULT (the estimate over every epoch).

QUERY frames carry a JSON object and are answered with a JSON REPLY. STATUS is what
clients (``esa submit``) and operators read; RESULT runs the protocol's estimator over
every processed epoch, with the drop check and the trap audit's counts; TRAP_COMMIT and
TRAP_OPEN go to the trap audit (:class:`~esa.net.TrapAudit`).
"""

from __future__ import annotations

import collections
import json
import math
from typing import Any

import numpy as np

from .._errors import FrameRefused
from .._roles import check_shares, lost_estimate, reports_per_fake
from ._chain import COUNTS, chains_of, counts_of, is_empty
from ._traps import TrapAudit
from ._wire import QueryKind, RejectReason, Reply, parse_query

__all__ = ["Queries"]

#: Decoded message bytes per RESULT reply page (hex doubles it).
_MESSAGE_PAGE_BYTES = 1 << 20


class Queries(TrapAudit):
    """QUERY frames: STATUS at every party; RESULT and the trap audit at the analyzer."""

    async def _on_query(self, payload: bytes) -> bytes:
        q = parse_query(payload)
        try:
            params = json.loads(q.body or b"{}")
            if not isinstance(params, dict):
                raise ValueError
        except (ValueError, RecursionError):  # RecursionError: nesting deeper than json parses
            raise FrameRefused(
                RejectReason.MALFORMED_FRAME, "query body must be a JSON object"
            ) from None
        if q.what is QueryKind.STATUS:
            body = await self.status()
        elif self.config.role != "analyzer":
            raise FrameRefused(RejectReason.UNEXPECTED_KIND, f"{q.what.name} is for the analyzer")
        elif q.what is QueryKind.RESULT:
            body = await self._db(self.result, params)
        elif q.what is QueryKind.TRAP_COMMIT:
            body = await self._trap_commit(params)
        else:
            body = await self._trap_open(params)
        return Reply(json.dumps(_jsonable(body)).encode()).to_bytes()

    async def status(self) -> dict[str, Any]:
        epochs = await self._db(self.inbox.epochs)
        open_count = await self._db(self.inbox.open_count)
        set_aside = await self._db(self.inbox.set_aside_counts)
        by_state = collections.Counter(e.state for e in epochs)
        # The first shuffler's next epoch id is what an operator's CLOSE_EPOCH_AT names.
        first = {"next_epoch": await self._db(self.inbox.next_epoch)} if self.is_first else {}
        return {
            **first,
            "party": self.party_name,
            "hop": self.hop,
            "channel": self.channel,
            "channels": self.channels,
            "counters": dict(self.counters),
            "rejected": dict(self.rejected),
            "epochs": {s: by_state.get(s, 0) for s in ("closed", "processed", "forwarded")},
            "open_reports": sum(open_count.values()),
            "active_connections": self.admission.active,
            "protocol": self.protocol_table,
            "crypto": self.config.crypto,
            **({"last_forward_error": self.last_forward_error} if self.last_forward_error else {}),
            **({"failed_epochs": dict(self._failed_epochs)} if self._failed_epochs else {}),
            **({"set_aside": set_aside} if set_aside else {}),
        }

    def result(self, params: dict[str, Any]) -> dict[str, Any]:
        """The estimate over every processed epoch (runs in a worker thread)."""
        # Records merged into their epoch's lead (the other chains' ids) carry no output.
        outputs = [(r, msgs) for r, msgs in self.inbox.outputs() if "merged_into" not in r.stats]
        rows = [m for _, msgs in outputs for m in msgs]
        size = self.protocol.message_size
        arr = (
            np.frombuffer(b"".join(rows), dtype=np.uint8).reshape(-1, size)
            if rows
            else np.zeros((0, size), np.uint8)
        )
        messages, valid = self.protocol.decode(arr)
        messages = messages[valid]
        # Opened trap reports are uniform fake messages (see make_traps): the estimator
        # removes them like the shufflers' fakes. Only openings the [auditor] signed count,
        # and each trap report once (Inbox.open_traps): the reports removed are distinct
        # reports that reached the analyzer, so n never drops below the other reports.
        openings, trap_pending = self.inbox.trap_openings()
        signed = [o for o in openings if o.auditor is not None]
        unsigned = len(openings) - len(signed)
        trap_total = sum(o.traps for o in signed)
        trap_arrived = sum(o.arrived for o in signed)
        # The estimators count fake values; the shufflers' statements and the trap audit
        # count reports, and a Split-Mix fake value travels as `shares` reports.
        spec = self.protocol.share_spec
        per_value = reports_per_fake(self.protocol)
        fake_reports = sum(int(rec.stats.get("fakes", 0)) for rec, _ in outputs) + trap_arrived
        n_fakes = fake_reports // per_value
        n_param = params.get("n")
        if n_param is not None and (
            isinstance(n_param, bool) or not isinstance(n_param, int) or not 1 <= n_param <= 2**53
        ):
            raise FrameRefused(
                RejectReason.MALFORMED_FRAME, f"n must be an integer in [1, 2**53], got {n_param!r}"
            )
        users_messages = len(messages) - fake_reports
        n = n_param or max(1, round(users_messages / self.protocol.messages_per_user))
        est = self.protocol.estimate(messages, n=n, n_fakes=n_fakes)
        if not outputs:  # nothing processed yet: no estimate, rather than one of no data
            est = lost_estimate(est, no_epoch_processed=True)
        elif spec is not None:  # a lost share loses the sum (see check_shares)
            est = check_shares(self.protocol, est, len(messages), n, n_fakes)
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
            "empty_epochs": [rec.epoch // self.channels for rec, _ in outputs if is_empty(rec)],
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
        if params.get("messages"):
            # Paged, so a reply stays far below the frame limit whatever n is.
            offset = params.get("messages_offset", 0)
            if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
                raise FrameRefused(RejectReason.MALFORMED_FRAME, f"bad messages_offset {offset!r}")
            page = rows[offset : offset + _MESSAGE_PAGE_BYTES // size]
            body["messages_hex"] = b"".join(page).hex()
            body["messages_total"] = len(rows)
        return body


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return _jsonable(obj.tolist())
    if isinstance(obj, np.generic):
        return _jsonable(obj.item())
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj
