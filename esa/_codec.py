"""How reports look between hops: real onion layers, or the ``ideal`` plaintext stand-in.

The shuffler, encoder and analyzer are written once against :class:`HopCodec`; the codec
decides what a report is:

* :class:`OnionCodec` (default, ``--crypto onion``): each report carries one X25519 +
  ChaCha20-Poly1305 layer per remaining hop (:mod:`crypto`). A batch is a ``(k, L)``
  ``uint8`` matrix, one report per row (every report at one hop has one length): it costs
  its ciphertext bytes, and a permutation is one fancy-indexing step. A hop also accepts
  any sequence of ``bytes`` (what the network delivers); one of the wrong length is invalid.
* :class:`IdealCodec` (``--crypto ideal``): the same logic on plaintext rows
  ``version (1) ‖ report id (8) ‖ crowd id (8) ‖ padded payload`` held in one ``uint8``
  matrix, for statistical sweeps at n = 10^6. It models a perfect anonymous channel: the
  report id stands in for the ephemeral key (replay detection) and is redrawn at every hop
  as a fresh layer would be. It provides no confidentiality and says so in every output.

Both work chunk by chunk on a :class:`concurrent.futures.Executor` (the crypto of a chunk is
a task; :mod:`esa._executor`) and write what a hop forwards through
:class:`esa._store.RecordWriter`, which spills a batch larger than the codec's memory
budget to a temp file: memory stays bounded whatever the number of reports.
"""

from __future__ import annotations

import abc
import os
from collections.abc import Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Final

import numpy as np
import numpy.typing as npt

import crypto

from ._errors import ConfigError, check_integer
from ._executor import local_pool, map_ordered
from ._store import DEFAULT_MEMORY_BUDGET, RecordWriter, chunks, gather, release
from ._tasks import peel_chunk, seal_chunk

__all__ = ["HopCodec", "IdealCodec", "OnionCodec", "Opened", "make_codec"]

Reports = Any  # (k, width) uint8 records; a hop also takes a sequence of bytes


@dataclass(slots=True)
class Opened:
    """One hop's view of a batch after removing its layer.

    Attributes:
        forward: the valid reports to pass on (next layer's reports, or payload carriers).
        crowd_ids: crowd id of each forwarded report.
        replay_keys: the forwarded reports' keys for the replay cache, sorted (not in the
            order of ``forward``).
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


class _SortedKeyCache(ReplayCache):
    """Replay keys kept sorted in one array, for vectorized look-ups: onion ephemeral
    public keys (32-byte ``V32`` items), ideal report ids (``uint64``)."""

    def __init__(self, dtype: npt.DTypeLike) -> None:
        self.keys: npt.NDArray[Any] = np.empty(0, dtype=dtype)

    def add(self, keys: npt.NDArray[Any]) -> None:
        # Kept, not copied (sorted in place: a codec's open returns them sorted already);
        # at 10^8 reports a copy is 0.8 GB.
        keys = np.asarray(keys, dtype=self.keys.dtype).reshape(-1)
        if self.keys.size:
            keys = np.concatenate([self.keys, keys])
        elif not keys.flags.writeable:
            keys = keys.copy()
        keys.sort(kind="stable")
        self.keys = keys

    def seen(self, keys: npt.NDArray[Any]) -> npt.NDArray[np.bool_]:
        if not self.keys.size or not keys.size:
            return np.zeros(keys.shape, dtype=bool)
        at = np.minimum(np.searchsorted(self.keys, keys), self.keys.size - 1)
        return np.asarray(self.keys[at] == keys)

    def __len__(self) -> int:
        return int(self.keys.size)


class HopCodec(abc.ABC):
    """The report format seen by every hop of one pipeline."""

    mode: ClassVar[str]

    def __init__(
        self,
        *,
        message_size: int,
        layers: int,
        memory_budget: int = DEFAULT_MEMORY_BUDGET,
        spill_dir: str | Path | None = None,
    ) -> None:
        # Hops are 0 .. layers − 1 and every onion layer binds its hop in 16 bits.
        self.layers = check_integer(layers, "layers", 1, 2**16)  # shufflers + analyzer
        self.message_size = message_size
        self.payload_size = crypto.padded_size(message_size)
        self.memory_budget = check_integer(memory_budget, "memory_budget", 0)
        self.spill_dir = spill_dir

    def writer(self, width: int, expected_rows: int | None = None) -> RecordWriter:
        """A writer for a batch of ``width``-byte records under this codec's memory budget.

        Args:
            width: bytes per record.
            expected_rows: the batch's rows, if known (spills at once past the budget).

        Returns:
            An empty :class:`~esa._store.RecordWriter`.
        """
        return RecordWriter(
            width, budget=self.memory_budget, directory=self.spill_dir, expected_rows=expected_rows
        )

    def permute(self, parts: Sequence[Reports], order: npt.NDArray[np.integer[Any]]) -> Reports:
        """Rows ``order`` of the parts joined end to end, chunk by chunk (no joined copy).

        Args:
            parts: batches of this codec's records, of one width.
            order: positions in the joined batch (a permutation of them, for a shuffler), of
                any integer dtype (a shuffler's is ``uint32`` when the batch fits).

        Returns:
            The records, in the order of ``order``.
        """
        return gather(
            [np.asarray(p, dtype=np.uint8) for p in parts],
            order,
            budget=self.memory_budget,
            directory=self.spill_dir,
        )

    def wire_view(self, reports: Reports) -> Reports:
        """The batch as an interceptor (a test, an audit) sees it: a copy it may edit freely.

        Args:
            reports: a batch of this codec's reports.

        Returns:
            The onion codec: a 1-D object array of ``bytes``, one wire report each; the ideal
            codec: the rows.
        """
        return reports

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
        executor: Executor | None = None,
    ) -> Reports:
        """Reports for hop ``first_hop`` carrying padded ``payloads``.

        Args:
            payloads: the ``(k, payload_size)`` padded payloads.
            crowd_ids: the crowd id of each payload.
            epoch: the epoch bound into every layer.
            route: public keys of hops ``first_hop``, …, last = analyzer.
            first_hop: global index of ``route[0]``.
            workers: number of processes (``None``: every available core).
            executor: where the chunks run (default: :func:`esa._executor.local_pool` of
                ``workers``).

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
        executor: Executor | None = None,
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
            executor: where the chunks run (default: :func:`esa._executor.local_pool` of
                ``workers``).

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


def _records(reports: Reports, width: int) -> tuple[npt.NDArray[np.uint8], int]:
    """``reports`` as ``(k, width)`` records, and how many items were not one (wrong type or
    length): a records matrix passes through uncopied."""
    if isinstance(reports, np.ndarray) and reports.dtype == np.uint8 and reports.ndim == 2:
        if reports.shape[1] == width:
            return reports, 0
        return np.zeros((0, width), np.uint8), int(reports.shape[0])
    good = [r for r in reports if isinstance(r, bytes) and len(r) == width]
    bad = len(reports) - len(good)
    if not good:
        return np.zeros((0, width), np.uint8), bad
    return np.frombuffer(b"".join(good), np.uint8).reshape(-1, width).copy(), bad


def _executor(executor: Executor | None, workers: int | None, rows: int) -> Executor:
    """The executor a batch of ``rows`` runs on: a small one in this process."""
    if executor is not None:
        return executor
    return local_pool(1 if rows < _MIN_PARALLEL else workers)


#: Below this many reports a batch runs in process: shipping it costs more than it saves.
_MIN_PARALLEL: Final = 2048


def _copies(
    rows: npt.NDArray[np.uint8], keys: npt.NDArray[Any]
) -> tuple[npt.NDArray[np.bool_], bool]:
    """Rows that repeat an earlier row exactly, and whether any two rows may share a key.

    Only rows sharing a key can be copies, and only rows whose keys share their first 8
    bytes can share a key: those few (an honest batch has none, but for a chance tie of
    about n²/2^65) are compared whole. Sorting the 8-byte prefixes, not the 32-byte keys,
    is what keeps this cheap at 10^6 reports.
    """
    tags = keys.view(np.uint64).reshape(-1, keys.dtype.itemsize // 8)[:, 0]
    order = np.argsort(tags, kind="stable")
    ordered = tags[order]
    twin = ordered[1:] == ordered[:-1]
    del ordered
    out = np.zeros(keys.shape[0], dtype=bool)
    if not twin.any():
        return out, False
    suspects = np.unique(np.concatenate([order[1:][twin], order[:-1][twin]]))
    full = np.ascontiguousarray(rows[suspects]).view(f"V{rows.shape[1]}").reshape(-1)
    out[suspects[~first_occurrences(full)]] = True
    return out, True


def _compact(values: npt.NDArray[Any], keep: npt.NDArray[np.bool_]) -> npt.NDArray[Any]:
    """``values[keep]``, written over the front of ``values`` chunk by chunk (no copy of
    the whole array); returns that front, a view."""
    if keep.all():
        return values
    end = 0
    for s in chunks(values.shape[0]):
        part = values[s][keep[s]]  # a chunk's copy; end <= s.start, so nothing unread is hit
        values[end : end + part.shape[0]] = part
        end += part.shape[0]
    return values[:end]


class _Crowds:
    """Crowd ids of a batch built chunk by chunk: one broadcast value (no memory) while
    every chunk has the same single crowd, the usual case; the full array otherwise."""

    def __init__(self) -> None:
        self.parts: list[npt.NDArray[np.uint64]] = []
        self.rows = 0

    def append(self, crowds: npt.NDArray[np.uint64]) -> None:
        if crowds.size and bool(np.all(crowds == crowds[0])):
            crowds = np.broadcast_to(crowds[:1], crowds.shape)
        self.parts.append(crowds)
        self.rows += crowds.size

    def finish(self) -> npt.NDArray[np.uint64]:
        parts = [p for p in self.parts if p.size]
        if not parts:
            return np.zeros(0, dtype=np.uint64)
        uniform = all(p.strides == (0,) or p.size == 1 for p in parts)
        if uniform and len({int(p[0]) for p in parts}) == 1:
            return np.broadcast_to(parts[0][:1], (self.rows,))
        return np.concatenate(parts)


class OnionCodec(HopCodec):
    """Real onion encryption (see :mod:`crypto`), on fixed-width records."""

    mode: ClassVar[str] = "onion"

    def new_replay_cache(self) -> ReplayCache:
        return _SortedKeyCache("V32")

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
        executor: Executor | None = None,
    ) -> Reports:
        rows = np.asarray(payloads, dtype=np.uint8).reshape(-1, self.payload_size)
        crowds = np.asarray(crowd_ids, dtype=np.uint64).reshape(-1)
        width = crypto.report_size(self.payload_size, len(route))
        out = self.writer(width, expected_rows=rows.shape[0])
        pool = _executor(executor, workers, rows.shape[0])
        jobs = (
            (None, rows[s], crowds[s], epoch, list(route), first_hop) for s in chunks(len(rows))
        )
        for part in map_ordered(pool, seal_chunk, jobs):
            out.append(part)
            crypto.announce_progress(part.shape[0])
        return out.finish()

    def open(
        self,
        reports: Reports,
        *,
        key: crypto.LayerPrivateKey | None,
        epoch: int,
        hop: int,
        seen: ReplayCache | None,
        workers: int | None,
        executor: Executor | None = None,
    ) -> Opened:
        """:meth:`HopCodec.open` with onion layers (:func:`crypto.peel_records`).

        Args:
            reports: the batch, as received (records, or ``bytes`` reports).
            key: this hop's layer private key.
            epoch: the epoch every layer must be bound to.
            hop: global index of this hop.
            seen: the epoch's replay cache, or ``None``.
            workers: number of processes (``None``: every available core).
            executor: where the chunks run (default: :func:`esa._executor.local_pool` of
                ``workers``).

        Returns:
            The valid reports to pass on, their crowd ids and replay keys, and the counts of
            invalid and replayed reports.

        Raises:
            ValueError: no layer key.
        """
        if key is None:
            raise ValueError("an onion hop needs its layer key")
        rows, invalid = _records(reports, self.expected_size(hop))
        keys = np.empty(rows.shape[0], dtype="V32")
        for s in chunks(rows.shape[0]):  # a spilled batch is paged in one chunk at a time
            keys[s] = np.ascontiguousarray(rows[s, 1:33]).view("V32").reshape(-1)
            release(rows)
        replayed = 0
        candidates: npt.NDArray[np.int64] | None = None  # None: every row
        twins = False
        if seen is not None:
            assert isinstance(seen, _SortedKeyCache)
            # A report whose key an earlier batch already used, or an exact copy of an earlier
            # one in this batch, is a replay: drop it without spending a scalar mult.
            copies, twins = _copies(rows, keys)
            drop = seen.seen(keys) | copies
            replayed = int(drop.sum())
            if replayed:
                candidates = np.flatnonzero(~drop)
            del copies, drop
        count = rows.shape[0] if candidates is None else int(candidates.size)
        out = self.writer(rows.shape[1] - crypto.LAYER_OVERHEAD, expected_rows=count)
        crowds = _Crowds()
        opened = np.zeros(rows.shape[0], dtype=bool)  # rows forwarded, in batch order
        pool = _executor(executor, workers, count)

        def jobs() -> Any:
            for s in chunks(count):
                part = rows[s] if candidates is None else rows[candidates[s]]
                release(rows)
                yield (part, key, epoch, hop)

        for s, (crowd, inner, ok) in zip(
            chunks(count), map_ordered(pool, peel_chunk, jobs()), strict=True
        ):
            out.append(inner[ok])
            crowds.append(crowd[ok])
            crypto.announce_progress(s.stop - s.start)
            opened[s if candidates is None else candidates[s]] = ok
        forward = out.finish()
        crowd_ids = crowds.finish()
        replay_keys = _compact(keys, opened)  # in place: no second array of keys
        invalid += count - int(replay_keys.size)
        del keys, opened
        if seen is not None and twins:
            # Two authentic reports cannot share an ephemeral key by chance; keep the first.
            first = first_occurrences(replay_keys)
            if not first.all():
                replayed += int((~first).sum())
                forward = self.permute([forward], np.flatnonzero(first))
                crowd_ids, replay_keys = crowd_ids[first], replay_keys[first]
        replay_keys.sort()  # in place
        return Opened(
            forward=forward,
            crowd_ids=crowd_ids,
            replay_keys=replay_keys,
            invalid=invalid,
            replayed=replayed,
        )

    def payload_rows(self, forward: Reports) -> tuple[npt.NDArray[np.uint8], int]:
        rows, bad = _records(forward, self.payload_size)
        return rows, bad

    def wire_view(self, reports: Reports) -> Reports:
        if isinstance(reports, np.ndarray) and reports.dtype == np.uint8 and reports.ndim == 2:
            return _object_array([r.tobytes() for r in reports])
        return _object_array(list(reports))

    @staticmethod
    def take(reports: Reports, index: npt.NDArray[np.int64]) -> Reports:
        if isinstance(reports, np.ndarray) and reports.ndim == 2:
            return reports[index]
        return np.asarray(reports, dtype=object)[index]

    @staticmethod
    def concat(parts: Sequence[Reports]) -> Reports:
        arrays = [np.asarray(p) if isinstance(p, np.ndarray) else _object_array(p) for p in parts]
        records = arrays and all(a.dtype == np.uint8 and a.ndim == 2 for a in arrays)
        if records and len({a.shape[1] for a in arrays}) == 1:
            return arrays[0] if len(arrays) == 1 else np.concatenate(arrays)
        # Mixed batches (e.g. what an interceptor built): one object array of bytes.
        items = [r.tobytes() if isinstance(r, np.ndarray) else r for a in arrays for r in a]
        return _object_array(items)

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
        return _SortedKeyCache(np.uint64)

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
        executor: Executor | None = None,
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
        executor: Executor | None = None,
    ) -> Opened:
        # Plain numpy, chunk by chunk in this process: there is no crypto to farm out, and a
        # chunk at a time keeps a 10^8-row batch (gigabytes) out of memory.
        rows, invalid = self._as_rows(reports)
        ok = np.empty(rows.shape[0], dtype=bool)
        for s in chunks(rows.shape[0]):  # a spilled batch is paged in one chunk at a time
            ok[s] = rows[s, 0] == IDEAL_VERSION
            release(rows)
        bad = int((~ok).sum())
        invalid += bad
        sel = np.flatnonzero(ok) if bad else None  # rows to forward (None: all of them)
        del ok
        # The replay keys are the ids, sorted in place: an honest batch never needs them in
        # arrival order beside a sorted copy (a word per report, 0.8 GB at 10^8). Only a
        # batch with a replay reads them again, in order, to drop it.
        ordered = self._ids(rows, sel)
        keep = None
        if seen is not None:
            assert isinstance(seen, _SortedKeyCache)
            if len(seen):
                keep = ~seen.seen(ordered)
        ordered.sort()
        replayed = 0
        if seen is not None:
            if ordered.size > 1 and bool(np.any(ordered[1:] == ordered[:-1])):
                first = first_occurrences(self._ids(rows, sel))
                keep = first if keep is None else keep & first
            if keep is not None and not keep.all():
                replayed = int((~keep).sum())
                sel = np.flatnonzero(keep) if sel is None else sel[keep]
                ordered = self._ids(rows, sel)
                ordered.sort()
            del keep
        count = rows.shape[0] if sel is None else int(sel.size)
        out = self.writer(self.row_size, expected_rows=count)
        crowds = _Crowds()
        for s in chunks(count):
            part = np.array(rows[s] if sel is None else rows[sel[s]], copy=True)
            release(rows)
            crowds.append(
                np.ascontiguousarray(part[:, _CROWD]).view(">u8").reshape(-1).astype(np.uint64)
            )
            # A fresh id per hop, as a fresh ephemeral key would be: ids never link hops.
            k = part.shape[0]
            part[:, _ID] = np.frombuffer(os.urandom(8 * k), dtype=np.uint8).reshape(k, 8)
            out.append(part)
        return Opened(out.finish(), crowds.finish(), ordered, invalid, replayed)

    @staticmethod
    def _ids(rows: npt.NDArray[np.uint8], sel: npt.NDArray[np.int64] | None) -> Any:
        count = rows.shape[0] if sel is None else sel.size
        ids = np.empty(count, dtype=np.uint64)
        for s in chunks(count):
            part = rows[s, _ID] if sel is None else rows[sel[s]][:, _ID]
            ids[s] = np.ascontiguousarray(part).view("<u8").reshape(-1)
            release(rows)
        return ids

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


def make_codec(
    mode: str,
    *,
    message_size: int,
    layers: int,
    memory_budget: int = DEFAULT_MEMORY_BUDGET,
    spill_dir: str | Path | None = None,
) -> HopCodec:
    """The codec for ``--crypto MODE``.

    Args:
        mode: ``"onion"`` (real onion encryption) or ``"ideal"`` (the same hops, no encryption).
        message_size: bytes of one encoded protocol message (padded to this size).
        layers: hops of the route, the shufflers plus the analyzer (1 to 2^16).
        memory_budget: bytes one batch may hold in RAM; a larger one spills to a temp file.
        spill_dir: where spilled batches go (default: the system's temp directory).

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
    return cls(
        message_size=message_size, layers=layers, memory_budget=memory_budget, spill_dir=spill_dir
    )
