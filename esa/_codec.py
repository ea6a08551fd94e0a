"""How reports look between hops: real onion layers, or the ``ideal`` plaintext stand-in.

The shuffler, encoder and analyzer are written once against :class:`HopCodec`; the codec
decides what a report is:

* :class:`OnionCodec` (default, ``--crypto onion``): each report is ``bytes`` carrying one
  X25519 + ChaCha20-Poly1305 layer per remaining hop (:mod:`crypto`). Batches are numpy
  object arrays of ``bytes`` so a permutation is one fancy-indexing step.
* :class:`IdealCodec` (``--crypto ideal``): the same logic on plaintext rows
  ``version (1) ‖ report id (8) ‖ crowd id (8) ‖ padded payload`` held in one ``uint8``
  matrix, for statistical sweeps at n = 10^6. It models a perfect anonymous channel: the
  report id stands in for the ephemeral key (replay detection) and is redrawn at every hop
  as a fresh layer would be. It provides no confidentiality and says so in every output.
"""

from __future__ import annotations

import abc
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Final

import numpy as np
import numpy.typing as npt

import crypto

from ._errors import ConfigError, check_integer

__all__ = ["HopCodec", "IdealCodec", "OnionCodec", "Opened", "make_codec"]

Reports = Any  # np.ndarray of object (bytes) for onion, (k, w) uint8 for ideal


@dataclass(slots=True)
class Opened:
    """One hop's view of a batch after removing its layer.

    Attributes:
        forward: the valid reports to pass on (next layer's reports, or payload carriers).
        crowd_ids: crowd id of each forwarded report.
        replay_keys: per forwarded report, the key its replay cache records.
        invalid: reports that failed to parse or authenticate.
        replayed: reports dropped as replays before or after opening.
    """

    forward: Reports
    crowd_ids: npt.NDArray[np.uint64]
    replay_keys: npt.NDArray[Any]
    invalid: int
    replayed: int


class ReplayCache(abc.ABC):
    """The replay keys one hop has accepted in the current epoch."""

    @abc.abstractmethod
    def add(self, keys: npt.NDArray[Any]) -> None:
        """Remember the keys of reports just accepted."""

    @abc.abstractmethod
    def __len__(self) -> int: ...


class _KeySetCache(ReplayCache):
    """Ephemeral public keys (bytes) of authentic onion reports."""

    def __init__(self) -> None:
        self.keys: set[bytes] = set()

    def add(self, keys: npt.NDArray[Any]) -> None:
        self.keys.update(keys.tolist())

    def __contains__(self, key: bytes) -> bool:
        return key in self.keys

    def __len__(self) -> int:
        return len(self.keys)


class _IdArrayCache(ReplayCache):
    """Report ids (uint64) of the ideal codec, kept sorted for vectorized look-ups."""

    def __init__(self) -> None:
        self.ids = np.empty(0, dtype=np.uint64)

    def add(self, keys: npt.NDArray[Any]) -> None:
        self.ids = np.sort(np.concatenate([self.ids, np.asarray(keys, dtype=np.uint64)]))

    def seen(self, ids: npt.NDArray[np.uint64]) -> npt.NDArray[np.bool_]:
        if not self.ids.size:
            return np.zeros(ids.shape, dtype=bool)
        at = np.minimum(np.searchsorted(self.ids, ids), self.ids.size - 1)
        return np.asarray(self.ids[at] == ids)

    def __len__(self) -> int:
        return int(self.ids.size)


class HopCodec(abc.ABC):
    """The report format seen by every hop of one pipeline."""

    mode: ClassVar[str]

    def __init__(self, *, message_size: int, layers: int) -> None:
        # Hops are 0 .. layers − 1 and every onion layer binds its hop in 16 bits.
        self.layers = check_integer(layers, "layers", 1, 2**16)  # shufflers + analyzer
        self.message_size = message_size
        self.payload_size = crypto.padded_size(message_size)

    @abc.abstractmethod
    def new_replay_cache(self) -> ReplayCache:
        """An empty replay cache for one epoch at one hop.

        Returns:
            A cache that records the replay keys of accepted batches.
        """

    @abc.abstractmethod
    def seal(
        self,
        payloads: npt.NDArray[np.uint8],
        crowd_ids: npt.NDArray[np.uint64],
        *,
        epoch: int,
        route: Sequence[bytes],
        first_hop: int,
        workers: int | None,
    ) -> Reports:
        """Reports for hop ``first_hop`` carrying padded ``payloads``.

        Args:
            payloads: the ``(k, payload_size)`` padded payloads.
            crowd_ids: the crowd id of each payload.
            epoch: the epoch bound into every layer.
            route: public keys of hops ``first_hop``, …, last = analyzer.
            first_hop: global index of ``route[0]``.
            workers: number of processes (``None``: every available core).

        Returns:
            One report per payload, in order.
        """

    @abc.abstractmethod
    def open(
        self,
        reports: Reports,
        *,
        key: crypto.LayerPrivateKey | None,
        epoch: int,
        hop: int,
        seen: ReplayCache | None,
        workers: int | None,
    ) -> Opened:
        """Check, de-duplicate and peel a batch arriving at ``hop``.

        ``seen`` is the replay cache of earlier batches of this epoch (``None`` turns replay
        protection off — a test-only switch); duplicates within the batch are dropped too.
        The caller adds ``Opened.replay_keys`` to the cache once it accepts the batch.

        Args:
            reports: the batch, as received.
            key: this hop's layer private key (``None`` for the ideal codec).
            epoch: the epoch every layer must be bound to.
            hop: global index of this hop.
            seen: the epoch's replay cache, or ``None``.
            workers: number of processes (``None``: every available core).

        Returns:
            The valid reports to pass on, their crowd ids and replay keys, and the counts of
            invalid and replayed reports.
        """

    @abc.abstractmethod
    def payload_rows(self, forward: Reports) -> tuple[npt.NDArray[np.uint8], int]:
        """At the analyzer: the ``(k, payload_size)`` padded payloads, and how many were
        malformed (wrong length).

        Args:
            forward: the reports the analyzer's own hop forwarded (its :meth:`open`'s).

        Returns:
            ``(payloads, malformed)``.
        """

    @staticmethod
    @abc.abstractmethod
    def take(reports: Reports, index: npt.NDArray[np.int64]) -> Reports:
        """Reports at ``index`` (used to permute, filter and split by crowd).

        Args:
            reports: a batch of this codec's reports.
            index: positions in the batch.

        Returns:
            The reports at those positions, in the order of ``index``.
        """

    @staticmethod
    @abc.abstractmethod
    def concat(parts: Sequence[Reports]) -> Reports:
        """Concatenate batches.

        Args:
            parts: batches of this codec's reports.

        Returns:
            One batch, the parts in order.
        """

    @staticmethod
    @abc.abstractmethod
    def count(reports: Reports) -> int:
        """Number of reports in a batch.

        Args:
            reports: a batch of this codec's reports.

        Returns:
            The number of reports.
        """


def first_occurrences(values: npt.NDArray[Any]) -> npt.NDArray[np.bool_]:
    """Mask keeping the first occurrence of every value, in input order (sort-based: numpy's
    hash-based ``unique`` is several times slower on 10^6 uint64 keys)."""
    keep = np.ones(values.shape[0], dtype=bool)
    if values.shape[0] > 1:
        order = np.argsort(values, kind="stable")
        ordered = values[order]
        keep[order[1:][ordered[1:] == ordered[:-1]]] = False
    return keep


def distinct_sorted(values: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """Sorted distinct values (fast path for the common single-crowd batch)."""
    if values.size == 0 or bool(np.all(values == values[0])):
        return values[:1].copy()
    ordered = np.sort(values)
    return ordered[np.r_[True, ordered[1:] != ordered[:-1]]]


def _object_array(items: Sequence[bytes]) -> npt.NDArray[Any]:
    arr = np.empty(len(items), dtype=object)
    arr[:] = list(items)
    return arr


class OnionCodec(HopCodec):
    """Real onion encryption (see :mod:`crypto`)."""

    mode: ClassVar[str] = "onion"

    def new_replay_cache(self) -> ReplayCache:
        return _KeySetCache()

    def expected_size(self, hop: int) -> int:
        """Length of every honest report arriving at ``hop``.

        Args:
            hop: global index of the hop.

        Returns:
            The padded payload size plus one layer's overhead per remaining hop.
        """
        return crypto.report_size(self.payload_size, self.layers - hop)

    def seal(
        self,
        payloads: npt.NDArray[np.uint8],
        crowd_ids: npt.NDArray[np.uint64],
        *,
        epoch: int,
        route: Sequence[bytes],
        first_hop: int,
        workers: int | None,
    ) -> Reports:
        rows = np.asarray(payloads, dtype=np.uint8)
        sealed = crypto.wrap_batch(
            [r.tobytes() for r in rows],
            list(route),
            epoch=epoch,
            crowd_ids=[int(c) for c in crowd_ids],
            first_hop=first_hop,
            workers=workers,
        )
        return _object_array(sealed)

    def open(
        self,
        reports: Reports,
        *,
        key: crypto.LayerPrivateKey | None,
        epoch: int,
        hop: int,
        seen: ReplayCache | None,
        workers: int | None,
    ) -> Opened:
        """:meth:`HopCodec.open` with onion layers (:func:`crypto.peel_batch`).

        Args:
            reports: the batch, as received (``bytes`` reports).
            key: this hop's layer private key.
            epoch: the epoch every layer must be bound to.
            hop: global index of this hop.
            seen: the epoch's replay cache, or ``None``.
            workers: number of processes (``None``: every available core).

        Returns:
            The valid reports to pass on, their crowd ids and replay keys, and the counts of
            invalid and replayed reports.

        Raises:
            ValueError: no layer key.
        """
        if key is None:
            raise ValueError("an onion hop needs its layer key")
        assert seen is None or isinstance(seen, _KeySetCache)
        expected = self.expected_size(hop)
        items = list(reports)
        invalid = 0
        replayed = 0
        candidates: list[bytes] = []
        batch_bytes: set[bytes] = set()
        for r in items:
            if not isinstance(r, bytes) or len(r) != expected:
                invalid += 1
                continue
            if seen is not None:
                # A valid report whose key an earlier batch already used, or an exact copy
                # within this batch, is a replay: drop it without spending a scalar mult.
                if r[1:33] in seen.keys or r in batch_bytes:
                    replayed += 1
                    continue
                batch_bytes.add(r)
            candidates.append(r)
        peeled = crypto.peel_batch(
            candidates, key, epoch=epoch, hop=hop, expected_size=expected, workers=workers
        )
        forward: list[bytes] = []
        crowds: list[int] = []
        keys: list[bytes] = []
        batch_keys: set[bytes] = set()
        for r, result in zip(candidates, peeled, strict=True):
            if result is None:
                invalid += 1
                continue
            epk = r[1:33]
            if seen is not None:
                # Two authentic reports cannot share an ephemeral key by chance; keep the first.
                if epk in batch_keys:
                    replayed += 1
                    continue
                batch_keys.add(epk)
            crowds.append(result[0])
            forward.append(result[1])
            keys.append(epk)
        return Opened(
            forward=_object_array(forward),
            crowd_ids=np.asarray(crowds, dtype=np.uint64),
            replay_keys=_object_array(keys),
            invalid=invalid,
            replayed=replayed,
        )

    def payload_rows(self, forward: Reports) -> tuple[npt.NDArray[np.uint8], int]:
        good = [b for b in forward if len(b) == self.payload_size]
        bad = len(forward) - len(good)
        if not good:
            return np.zeros((0, self.payload_size), dtype=np.uint8), bad
        return np.frombuffer(b"".join(good), dtype=np.uint8).reshape(-1, self.payload_size), bad

    @staticmethod
    def take(reports: Reports, index: npt.NDArray[np.int64]) -> Reports:
        return np.asarray(reports, dtype=object)[index]

    @staticmethod
    def concat(parts: Sequence[Reports]) -> Reports:
        arrays = [np.asarray(p, dtype=object) for p in parts]
        return np.concatenate(arrays) if arrays else np.empty(0, dtype=object)

    @staticmethod
    def count(reports: Reports) -> int:
        return len(reports)


IDEAL_VERSION: Final = 0xE1
_ID: Final = slice(1, 9)
_CROWD: Final = slice(9, 17)
_IDEAL_HEADER: Final = 17


class IdealCodec(HopCodec):
    """Plaintext stand-in for the onion: same shuffler logic, no encryption."""

    mode: ClassVar[str] = "ideal"

    def new_replay_cache(self) -> ReplayCache:
        return _IdArrayCache()

    @property
    def row_size(self) -> int:
        return _IDEAL_HEADER + self.payload_size

    def seal(
        self,
        payloads: npt.NDArray[np.uint8],
        crowd_ids: npt.NDArray[np.uint64],
        *,
        epoch: int,
        route: Sequence[bytes],
        first_hop: int,
        workers: int | None,
    ) -> Reports:
        payloads = np.asarray(payloads, dtype=np.uint8)
        k = payloads.shape[0]
        rows = np.empty((k, self.row_size), dtype=np.uint8)
        rows[:, 0] = IDEAL_VERSION
        rows[:, _ID] = np.frombuffer(os.urandom(8 * k), dtype=np.uint8).reshape(k, 8)
        rows[:, _CROWD] = (
            np.asarray(crowd_ids, dtype=">u8").reshape(-1, 1).view(np.uint8).reshape(k, 8)
        )
        rows[:, _IDEAL_HEADER:] = payloads
        return rows

    def open(
        self,
        reports: Reports,
        *,
        key: crypto.LayerPrivateKey | None,
        epoch: int,
        hop: int,
        seen: ReplayCache | None,
        workers: int | None,
    ) -> Opened:
        rows, invalid = self._as_rows(reports)
        ok = rows[:, 0] == IDEAL_VERSION
        bad = int((~ok).sum())
        invalid += bad
        # Rows to forward, as an index (None: all of them); the batch is copied once, at
        # the end, whatever was dropped (a 10^7-row batch is ~10^8 bytes per copy).
        sel = np.flatnonzero(ok) if bad else None
        raw = np.ascontiguousarray(rows[:, _ID] if sel is None else rows[sel, _ID])
        ids: npt.NDArray[np.uint64] = raw.view("<u8").reshape(-1)
        replayed = 0
        if seen is not None:
            keep = first_occurrences(ids)
            if len(seen):
                assert isinstance(seen, _IdArrayCache)
                keep &= ~seen.seen(ids)
            replayed = int((~keep).sum())
            if replayed:
                sel = np.flatnonzero(keep) if sel is None else sel[keep]
                ids = ids[keep]
        forward = rows.copy() if sel is None else rows[sel]  # a copy: ids are rewritten
        crowds = np.ascontiguousarray(forward[:, _CROWD]).view(">u8").reshape(-1).astype(np.uint64)
        k = forward.shape[0]
        # A fresh id per hop, as a fresh ephemeral key would be: ids never link hops.
        forward[:, _ID] = np.frombuffer(os.urandom(8 * k), dtype=np.uint8).reshape(k, 8)
        return Opened(forward, crowds, ids, invalid, replayed)

    def payload_rows(self, forward: Reports) -> tuple[npt.NDArray[np.uint8], int]:
        rows = np.asarray(forward, dtype=np.uint8)
        return rows[:, _IDEAL_HEADER:], 0

    def _as_rows(self, reports: Reports) -> tuple[npt.NDArray[np.uint8], int]:
        if isinstance(reports, np.ndarray) and reports.dtype == np.uint8:
            if reports.ndim == 2 and reports.shape[1] == self.row_size:
                return reports, 0
            return np.zeros((0, self.row_size), np.uint8), int(reports.shape[0])
        good = [r for r in reports if isinstance(r, bytes) and len(r) == self.row_size]
        bad = len(reports) - len(good)
        if not good:
            return np.zeros((0, self.row_size), np.uint8), bad
        return np.frombuffer(b"".join(good), np.uint8).reshape(-1, self.row_size).copy(), bad

    @staticmethod
    def take(reports: Reports, index: npt.NDArray[np.int64]) -> Reports:
        return np.asarray(reports)[index]

    @staticmethod
    def concat(parts: Sequence[Reports]) -> Reports:
        if len(parts) == 1:  # nothing to join: no copy of a 10^7-row batch
            return np.asarray(parts[0], dtype=np.uint8)
        return np.concatenate([np.asarray(p, dtype=np.uint8) for p in parts])

    @staticmethod
    def count(reports: Reports) -> int:
        return len(reports)


def make_codec(mode: str, *, message_size: int, layers: int) -> HopCodec:
    """The codec for ``--crypto MODE``.

    Args:
        mode: ``"onion"`` (real onion encryption) or ``"ideal"`` (the same hops, no encryption).
        message_size: bytes of one encoded protocol message (padded to this size).
        layers: hops of the route, the shufflers plus the analyzer (1 to 2^16).

    Returns:
        The codec, shared by the encoder and every hop of one run.

    Raises:
        ConfigError: ``mode`` is neither ``"onion"`` nor ``"ideal"``.
    """
    codecs: dict[str, type[HopCodec]] = {"onion": OnionCodec, "ideal": IdealCodec}
    try:
        cls = codecs[mode]
    except KeyError:
        raise ConfigError(f"crypto mode must be 'onion' or 'ideal', got {mode!r}") from None
    return cls(message_size=message_size, layers=layers)
