"""The trap audit, both ends: an auditor's trap reports, its signed commitment and
opening, and the analyzer's checks of them.

An auditor builds trap reports (:func:`make_traps`) that look like a chain's honest traffic,
commits to them at the analyzer before an epoch (:func:`commit_traps`), submits them with
the real reports, and opens the commitment after the epoch (:func:`open_traps`): the
analyzer answers how many traps arrived, so a shuffler that drops or replaces reports is
caught with the probability its share of traps gives. Both requests are signed by the
analyzer's ``[auditor]`` key over :func:`trap_statement`; the commitment is
:func:`trap_commitment`. :class:`TrapAudit` is the analyzer's side of the two requests.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

import crypto
from protocols import ParameterError

from .._errors import FrameRefused, TrapsNotProcessed
from .._roles import split_messages
from ._client import query
from ._config import Address
from ._party import PartyBase
from ._wire import QueryKind, RejectReason

__all__ = [
    "TRAP_COMMITMENT_SIZE",
    "TRAP_KEY_SIZE",
    "TRAP_NONCE_SIZE",
    "TrapAudit",
    "TrapSet",
    "commit_traps",
    "make_traps",
    "open_traps",
    "trap_commitment",
    "trap_statement",
]


def trap_commitment(nonce: bytes, key_epoch: int, analyzer_layers: list[bytes]) -> bytes:
    """An auditor's commitment to trap reports: SHA-256 over a 32-byte random nonce, the key
    epoch, and the sorted analyzer-layer ciphertexts the traps must deliver. Hiding (the
    nonce and the ciphertexts are unpredictable) and binding (collision resistance).

    Args:
        nonce: 32 random bytes (:attr:`TrapSet.nonce`).
        key_epoch: the key epoch the traps are wrapped for.
        analyzer_layers: the bytes each trap must deliver to the analyzer.

    Returns:
        The 32-byte commitment.
    """
    h = hashlib.sha256(b"esa/traps/v1\x00" + nonce + key_epoch.to_bytes(4, "big"))
    for r in sorted(analyzer_layers):
        h.update(len(r).to_bytes(4, "big") + r)
    return h.digest()


#: Sizes in a trap statement (:func:`trap_statement`).
TRAP_KEY_SIZE: Final = 32
TRAP_COMMITMENT_SIZE: Final = 32
TRAP_NONCE_SIZE: Final = 32
_TRAP_CONTEXTS: Final = {
    "commit": b"esa/traps/v1/commit\x00",
    "open": b"esa/traps/v1/open\x00",
}


def trap_statement(
    action: Literal["commit", "open"], *, analyzer_key: bytes, key_epoch: int, commitment: bytes
) -> bytes:
    """The bytes an auditor signs (Ed25519, the key in the analyzer's ``[auditor]`` table)
    to commit to a trap set, or to open it::

        context ‖ B[32] analyzer_key ‖ u32 key_epoch ‖ B[32] commitment

    ``context`` is ``esa/traps/v1/commit\\0`` or ``esa/traps/v1/open\\0``, so a commit's
    signature never passes for an opening. ``analyzer_key`` is the analyzer's layer public
    key of ``key_epoch`` (the key the traps' innermost layer is sealed for): it names the
    analyzer and key epoch a signature is good for, so a captured statement cannot be
    replayed at another analyzer or under another key epoch. At one analyzer both are
    idempotent — a commitment is recorded once and opened once — so a replayed statement
    counts nothing again. The opening's content (nonce, trap layers) is bound through the
    commitment (:func:`trap_commitment`).

    Args:
        action: ``"commit"`` or ``"open"``.
        analyzer_key: the analyzer's 32-byte layer public key of ``key_epoch``.
        key_epoch: the key epoch, in [0, 2**32).
        commitment: the trap set's 32-byte commitment.

    Returns:
        The statement's bytes.

    Raises:
        ParameterError: a field of the wrong size or range (programmer misuse).
    """
    if action not in _TRAP_CONTEXTS:
        raise ParameterError(f"action must be 'commit' or 'open', got {action!r}")
    if len(analyzer_key) != TRAP_KEY_SIZE or len(commitment) != TRAP_COMMITMENT_SIZE:
        raise ParameterError(
            f"analyzer_key and commitment are {TRAP_KEY_SIZE} bytes each, got "
            f"{len(analyzer_key)} and {len(commitment)}"
        )
    if isinstance(key_epoch, bool) or not isinstance(key_epoch, int) or not 0 <= key_epoch < 2**32:
        raise ParameterError(f"key_epoch must be an integer in [0, 2**32), got {key_epoch!r}")
    return _TRAP_CONTEXTS[action] + analyzer_key + key_epoch.to_bytes(4, "big") + commitment


@dataclass(frozen=True, slots=True)
class TrapSet:
    """An auditor's trap reports for one key epoch (see :func:`make_traps`).

    Attributes:
        key_epoch: the key epoch the traps are wrapped for.
        reports: what to submit to the first shuffler, mixed with real reports.
        analyzer_layers: the exact bytes each trap must deliver to the analyzer; distinct
            (an opening that lists one twice is refused).
        nonce: 32 random bytes that hide the commitment until it is opened.
        analyzer_key: the analyzer's layer public key the traps are sealed for (the last
            key of the route); the auditor's signatures name it (:func:`trap_statement`).
    """

    key_epoch: int
    reports: tuple[bytes, ...]
    analyzer_layers: tuple[bytes, ...]
    nonce: bytes
    analyzer_key: bytes

    def __post_init__(self) -> None:
        if len(self.nonce) != TRAP_NONCE_SIZE or len(self.analyzer_key) != TRAP_KEY_SIZE:
            raise ParameterError(
                f"nonce and analyzer_key are {TRAP_NONCE_SIZE} bytes each, got "
                f"{len(self.nonce)} and {len(self.analyzer_key)}"
            )

    @property
    def commitment(self) -> bytes:
        """The auditor's commitment to this set (:func:`trap_commitment`)."""
        return trap_commitment(self.nonce, self.key_epoch, list(self.analyzer_layers))

    def signature(self, action: Literal["commit", "open"], auditor: Ed25519PrivateKey) -> bytes:
        """The auditor's signature of this set's commitment (``commit``) or opening.

        Args:
            action: ``"commit"`` or ``"open"``.
            auditor: the auditor's Ed25519 private key.

        Returns:
            The 64-byte signature of :func:`trap_statement`.
        """
        statement = trap_statement(
            action,
            analyzer_key=self.analyzer_key,
            key_epoch=self.key_epoch,
            commitment=self.commitment,
        )
        return crypto.sign(auditor, statement)


def make_traps(
    protocol: Any,
    route: Sequence[bytes],
    *,
    count: int,
    key_epoch: int,
    crowd_id: int = 0,
    channel: int = 0,
) -> TrapSet:
    """Build ``count`` trap reports an auditor commits to before an epoch.

    A trap is an ordinary report carrying a uniform fake message (the MURS fake sampler),
    wrapped in two steps: first the analyzer's layer alone, whose bytes the auditor keeps,
    then the shufflers' layers around it. Every shuffler peels its layer honestly and sees
    a report indistinguishable from a user's, so a shuffler that drops or replaces a
    fraction f of its reports loses each trap with probability f; after the epoch the
    auditor opens the commitment and the analyzer checks that each kept ciphertext arrived.
    Values come from the OS CSPRNG: traps are part of a live audit, not of the statistics.
    In a deployment of several chains, ``route`` is chain ``channel``'s route
    (:func:`esa.chain_route`) and the traps are that chain's fakes
    (``sample_channel_fakes``), so they look like the chain's honest traffic.

    Args:
        protocol: the configured protocol.
        route: the chain's layer public keys in report order, the analyzer last.
        count: the number of traps.
        key_epoch: the key epoch the route's keys belong to.
        crowd_id: the crowd id of every trap.
        channel: the chain the traps go through.

    Returns:
        The traps (to submit), the analyzer layers the auditor keeps, and the commitment to
        them.
    """
    fakes = protocol.sample_channel_fakes(count, channel=channel, rng=crypto.csprng_generator())
    msgs = split_messages(protocol, fakes)
    payloads = crypto.pad_rows(protocol.encode(msgs), protocol.message_size)
    m = len(route) - 1
    crowds = [crowd_id] * len(payloads)
    inner = crypto.wrap_batch(
        [p.tobytes() for p in payloads],
        [route[m]],
        epoch=key_epoch,
        crowd_ids=crowds,
        first_hop=m,
        workers=1,
    )
    outer = crypto.wrap_batch(
        list(inner), list(route[:m]), epoch=key_epoch, crowd_ids=crowds, first_hop=0, workers=1
    )
    return TrapSet(
        key_epoch, tuple(outer), tuple(inner), os.urandom(TRAP_NONCE_SIZE), bytes(route[m])
    )


async def commit_traps(
    analyzer: Address, traps: TrapSet, *, auditor: Ed25519PrivateKey
) -> dict[str, Any]:
    """Send the commitment to the analyzer (before the epoch closes), signed with the
    ``auditor`` key whose public half is in the analyzer's ``[auditor]`` table.

    Resending is safe: the analyzer records a commitment once.

    Args:
        analyzer: the analyzer's query address.
        traps: the trap set (:func:`make_traps`).
        auditor: the auditor's Ed25519 private key.

    Returns:
        The analyzer's JSON reply.

    Raises:
        PeerRejected: ``bad_signature`` if the analyzer has no ``[auditor]`` key or another
            one; ``unknown_key_epoch`` if it does not serve the traps' key epoch.
    """
    params = {
        "commitment": traps.commitment.hex(),
        "key_epoch": traps.key_epoch,
        "signature": traps.signature("commit", auditor).hex(),
    }
    return await query(analyzer, QueryKind.TRAP_COMMIT, params)


async def open_traps(
    analyzer: Address, traps: TrapSet, *, auditor: Ed25519PrivateKey
) -> dict[str, Any]:
    """Open the commitment after the epoch, signed like :func:`commit_traps`: how many
    traps reached the analyzer.

    The reply: ``traps`` (listed), ``repeated`` (opened before under another commitment,
    not counted again), ``arrived`` and ``missing`` (of the others), ``ok``. Resending is
    safe: a commitment is opened once, and the same opening again gets the same reply.

    Args:
        analyzer: the analyzer's query address.
        traps: the trap set committed to with :func:`commit_traps`.
        auditor: the auditor's Ed25519 private key.

    Returns:
        The analyzer's JSON reply, as above.

    Raises:
        PeerRejected: ``bad_signature`` as for :func:`commit_traps`; ``bad_trap_opening`` if
            the opening matches no commitment, lists a trap twice, comes before any epoch
            was processed since the commitment, or some trap that arrived is still waiting
            in an unprocessed epoch (open again once it is processed).
    """
    params = {
        "commitment": traps.commitment.hex(),
        "key_epoch": traps.key_epoch,
        "nonce": traps.nonce.hex(),
        "reports": [r.hex() for r in traps.analyzer_layers],
        "signature": traps.signature("open", auditor).hex(),
    }
    return await query(analyzer, QueryKind.TRAP_OPEN, params)


class TrapAudit(PartyBase):
    """The analyzer's side of the trap audit: TRAP_COMMIT and TRAP_OPEN queries.

    Part of :class:`esa.net.PartyService`; answers the queries its query handler passes on.
    """

    def _trap_signer(
        self, action: Literal["commit", "open"], params: dict[str, Any]
    ) -> tuple[bytes, int, bytes]:
        """Authenticate a trap commit or opening before anything else of it is used:
        returns ``(commitment, key_epoch, the auditor's public key)``.

        The ``signature`` must verify under the ``[auditor]`` key over
        :func:`trap_statement` for this analyzer's layer key of ``key_epoch``.

        Raises:
            FrameRefused: ``bad_signature`` without an ``[auditor]`` key, or for a missing or
                wrong signature; ``bad_trap_opening`` for malformed fields;
                ``unknown_key_epoch`` for a key epoch not served.
        """
        if self.auditor_key is None:
            raise FrameRefused(
                RejectReason.BAD_SIGNATURE,
                "trap audit is off: this analyzer has no [auditor] public_key",
            )
        if "signature" not in params:  # e.g. a client from before trap frames were signed
            raise FrameRefused(
                RejectReason.BAD_SIGNATURE,
                f"unsigned trap {action}: sign it with the analyzer's [auditor] key",
            )
        try:
            commitment = bytes.fromhex(params["commitment"])
            key_epoch = params["key_epoch"]
            if isinstance(key_epoch, bool) or not isinstance(key_epoch, int):
                raise TypeError
            if len(commitment) != TRAP_COMMITMENT_SIZE or not 0 <= key_epoch < 2**32:
                raise ValueError
        except (KeyError, ValueError, TypeError):
            raise FrameRefused(
                RejectReason.BAD_TRAP_OPENING,
                "trap frames need commitment (32 bytes hex) and key_epoch (u32)",
            ) from None
        self._check_key_epoch(key_epoch)
        try:
            signature = bytes.fromhex(params["signature"])
        except (KeyError, ValueError, TypeError):
            signature = b""
        statement = trap_statement(
            action,
            analyzer_key=self.routes[key_epoch][-1],
            key_epoch=key_epoch,
            commitment=commitment,
        )
        if not crypto.is_valid_signature(self.auditor_key, statement, signature):
            raise FrameRefused(
                RejectReason.BAD_SIGNATURE,
                f"trap {action} not signed by this analyzer's [auditor] key",
            )
        return commitment, key_epoch, self.auditor_key.public_bytes_raw()

    async def _trap_commit(self, params: dict[str, Any]) -> dict[str, Any]:
        # Idempotent: a resent (or replayed) commit keeps the epochs the first one covers.
        commitment, _, _ = self._trap_signer("commit", params)
        after = await self._db(self.inbox.add_trap_commitment, commitment)
        self.counters["trap_commitments"] += 1
        return {"commitment": commitment.hex(), "covers_epochs_after": after}

    async def _trap_open(self, params: dict[str, Any]) -> dict[str, Any]:
        """Open a signed commitment: count its traps, each trap report once ever.

        A trap set that lists a report twice is malformed (each trap is one report); one
        listed by an earlier opening is answered as ``repeated`` and not counted again
        (:meth:`Inbox.open_traps`). A commitment is opened once: the same opening again
        (a resend, or a replay of the signed one) gets the first answer.
        """
        commitment, key_epoch, auditor = self._trap_signer("open", params)
        try:
            nonce = bytes.fromhex(params["nonce"])
            listed = params["reports"]
            if not isinstance(listed, list):
                raise TypeError
            reports = [bytes.fromhex(r) for r in listed]
        except (KeyError, ValueError, TypeError):
            raise FrameRefused(
                RejectReason.BAD_TRAP_OPENING, "opening needs nonce and reports (hex strings)"
            ) from None
        if trap_commitment(nonce, key_epoch, reports) != commitment:
            raise FrameRefused(
                RejectReason.BAD_TRAP_OPENING, "opening does not match its commitment"
            )
        if len(set(reports)) != len(reports):
            raise FrameRefused(
                RejectReason.BAD_TRAP_OPENING,
                "the opening lists a trap report twice: each trap is one report",
            )
        known = await self._db(self.inbox.trap, commitment)
        if known is None:
            raise FrameRefused(RejectReason.BAD_TRAP_OPENING, "opening matches no commitment")
        after, opening = known
        if opening is None:
            epochs = await self._db(self.inbox.epochs, "processed")
            if not any(e.epoch > after for e in epochs):
                raise FrameRefused(
                    RejectReason.BAD_TRAP_OPENING, "no epoch processed since the commitment"
                )
            try:
                opening = await self._db(
                    self.inbox.open_traps, commitment, key_epoch, reports, auditor=auditor
                )
            except TrapsNotProcessed as exc:
                raise FrameRefused(RejectReason.BAD_TRAP_OPENING, str(exc)) from None
            self.counters["trap_openings"] += 1
        return {
            "traps": opening.traps + opening.repeated,
            "repeated": opening.repeated,
            "arrived": opening.arrived,
            "missing": opening.missing,
            "ok": not opening.missing,
        }
