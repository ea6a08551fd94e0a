"""Drop detection: the chain of signed per-epoch count statements, and batch ids.

Each hop signs a :class:`~esa.net.CountStatement` of what it did in an epoch and appends it
to the chain it received; the analyzer checks the whole chain against the batch it got
(:func:`check_chain`), and the crowd rule each hop signed against the deployment's
(:func:`check_thresholds`). The helpers here read the statements an analyzed epoch recorded.
"""

from __future__ import annotations

import hashlib
import itertools
from dataclasses import asdict
from typing import Any, Final

from ._inbox import EpochRecord
from ._wire import CountStatement

__all__ = [
    "COUNTS",
    "batch_id_for",
    "chains_of",
    "check_chain",
    "check_thresholds",
    "counts_of",
    "is_empty",
    "statement_json",
]

#: The counters of a count statement (and of a hop's line in a RESULT).
COUNTS: Final = ("received", "invalid", "replayed", "held", "fakes_added", "forwarded")


def batch_id_for(verify_public: bytes, key_epoch: int, epoch: int) -> bytes:
    """The id of the batch a party forwards for an epoch: a function of who and when only,
    so a resend after a crash carries the same id and the receiver takes it once.

    Args:
        verify_public: the sender's Ed25519 verify key (raw bytes).
        key_epoch: the key epoch of the batch.
        epoch: the sender's epoch id.

    Returns:
        The 32-byte batch id.
    """
    data = b"esa/batch-id/v1\x00" + verify_public + key_epoch.to_bytes(4, "big")
    return hashlib.sha256(data + epoch.to_bytes(8, "big")).digest()


def check_chain(
    chain: tuple[CountStatement, ...], *, hops: int, epoch: int, received: int
) -> list[str]:
    """Drop detection: the problems in a chain of count statements (empty = consistent).

    Every shuffler must appear once, in order, for this epoch; each hop's own counts must
    add up; each hop must have received what the previous one forwarded; the analyzer must
    have received what the last shuffler forwarded.

    Args:
        chain: the verified statements, in hop order.
        hops: the chain's number of shufflers.
        epoch: the epoch the statements must name.
        received: how many reports the analyzer received (duplicates included).

    Returns:
        One line per problem found.
    """
    problems = []
    if [s.hop for s in chain] != list(range(hops)):
        problems.append(f"chain lists hops {[s.hop for s in chain]}, expected 0..{hops - 1}")
    for s in chain:
        if s.epoch != epoch:
            problems.append(f"hop {s.hop} signed epoch {s.epoch}, not {epoch}")
        if s.key_epoch != chain[0].key_epoch:
            problems.append(f"hop {s.hop} signed key epoch {s.key_epoch}")
        if not s.consistent:
            problems.append(f"hop {s.hop} counts do not add up: {statement_json(s)}")
    for a, b in itertools.pairwise(chain):
        if b.received != a.forwarded:
            problems.append(
                f"hop {b.hop} received {b.received} but hop {a.hop} forwarded {a.forwarded}"
            )
    if chain and chain[-1].forwarded != received:
        problems.append(
            f"analyzer received {received} but hop {chain[-1].hop} forwarded {chain[-1].forwarded}"
        )
    return problems


def check_thresholds(
    chain: tuple[CountStatement, ...],
    *,
    threshold_epsilon: float | None,
    threshold: int | None = None,
) -> list[str]:
    """The hops whose signed crowd rule is not the deployment's (empty = all agree).

    The run's privacy statement adds m·k·ε_t for a noisy threshold, so the analyzer states
    it from the ε_t the shufflers signed; a hop that signed another ε_t than the deployment
    states (or none where one is stated) makes that statement unprovable.

    Args:
        chain: the verified statements, in hop order.
        threshold_epsilon: the ε_t the deployment states (the analyzer's ``[shuffle]
            threshold_epsilon``; None: a plain threshold or none).
        threshold: the crowd threshold T the signed manifest states (None: not stated,
            not checked).

    Returns:
        One line per hop that disagrees.
    """
    problems = []
    for s in chain:
        if s.threshold_epsilon != threshold_epsilon:
            problems.append(
                f"hop {s.hop} signed threshold_epsilon = {s.threshold_epsilon}, but the "
                f"deployment states {threshold_epsilon}"
            )
        if threshold is not None and s.threshold != threshold:
            problems.append(
                f"hop {s.hop} signed threshold = {s.threshold}, but the signed manifest "
                f"states {threshold}"
            )
    return problems


def statement_json(s: CountStatement) -> dict[str, Any]:
    """A statement as JSON: the batch id in hex, without the signature."""
    d = asdict(s)
    d["batch_id"] = s.batch_id.hex()
    d.pop("signature")
    return d


def is_empty(rec: EpochRecord) -> bool:
    """Whether an epoch had no report on any chain: none reached the analyzer, and none
    reached a first shuffler either (a crowd held there is not an empty epoch)."""
    if rec.stats.get("analyzer", {}).get("received", 0):
        return False
    return not any(chain and int(chain[0]["received"]) for chain in chains_of(rec))


def chains_of(rec: EpochRecord) -> list[list[dict[str, Any]]]:
    """An analyzed epoch's count statements, one list per chain (one chain keeps the
    ``chain`` key of earlier inboxes)."""
    return rec.stats["chains"] if "chains" in rec.stats else [rec.stats.get("chain", [])]


def counts_of(s: dict[str, Any]) -> dict[str, int]:
    """The :data:`COUNTS` of a statement's JSON (:func:`statement_json`)."""
    return {k: int(s[k]) for k in COUNTS}
