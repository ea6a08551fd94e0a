"""Where a batch of fixed-width records lives: in memory, or spilled to a temp file.

A run's batches are ``(k, width)`` ``uint8`` matrices, one report per row. A hop builds its
output chunk by chunk with a :class:`RecordWriter`: while the batch fits the memory budget
it stays in RAM; past it, the writer moves it into a memory-mapped file in a temp directory
(deleted as soon as it is created, so nothing is left behind, even after a crash) and the
batch the hop returns is a view of that file. :func:`release` drops the pages a hop has
touched from the process (the data stay in the file and the page cache), so resident memory
is about one chunk, whatever the batch size: a long run is limited by time and disk, not
memory.
"""

from __future__ import annotations

import mmap
import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from ._errors import ConfigError

__all__ = ["DEFAULT_MEMORY_BUDGET", "RecordWriter", "chunks", "gather", "release"]

#: Bytes one batch may occupy in RAM before it spills to disk (``PipelineConfig``).
DEFAULT_MEMORY_BUDGET = 64 * 2**20
#: Rows a hop handles at a time: a few MB of reports, ~1 s of X25519 on one core.
CHUNK_ROWS = 16384
#: Bytes of a spilled batch that :func:`gather` reads at random at a time (then drops).
WINDOW_BYTES = 64 * 2**20
#: Bytes of output :func:`gather` builds per pass over a spilled batch's windows.
BLOCK_BYTES = 16 * 2**20


def chunks(rows: int, size: int = CHUNK_ROWS) -> Iterator[slice]:
    """``range(rows)`` as consecutive slices of ``size`` rows (none for 0 rows).

    Args:
        rows: the number of rows.
        size: rows per slice.

    Yields:
        The slices, in order.
    """
    for start in range(0, rows, size):
        yield slice(start, min(start + size, rows))


def _mapping(array: npt.NDArray[Any]) -> mmap.mmap | None:
    """The mmap under ``array`` (a view of a spilled batch), or None (a batch in RAM)."""
    base: Any = array
    while base is not None:
        if isinstance(base, mmap.mmap):
            return base
        base = getattr(base, "base", None) if not isinstance(base, memoryview) else base.obj
    return None


def release(array: npt.NDArray[Any]) -> None:
    """Drop the pages of a spilled batch from this process (no-op for a batch in RAM).

    The file keeps the data (a shared mapping's pages go back to the page cache), and the
    next access faults them in again: what a hop touched chunk by chunk stops counting in
    its resident memory.

    Args:
        array: a batch, or a view of one.
    """
    mapping = _mapping(array)
    if mapping is not None and not mapping.closed:
        mapping.madvise(mmap.MADV_DONTNEED)


class RecordWriter:
    """Appends ``(k, width)`` uint8 chunks into one batch, spilling past ``budget`` bytes.

    Args:
        width: bytes per record.
        budget: bytes the batch may hold in RAM; a larger one goes to a temp file.
        directory: where spilled batches go (default: the system's temp directory).
        expected_rows: rows the batch will have, if known: the writer then spills at once
            when they exceed the budget, and checks the disk has room.

    Raises:
        ConfigError: the disk of ``directory`` has less free space than the batch needs.
    """

    def __init__(
        self,
        width: int,
        *,
        budget: int = DEFAULT_MEMORY_BUDGET,
        directory: str | Path | None = None,
        expected_rows: int | None = None,
    ) -> None:
        self.width = int(width)
        self.budget = int(budget)
        self.directory = directory
        self.rows = 0
        self._parts: list[npt.NDArray[np.uint8]] = []
        self._file: Any = None
        self._spilled = False
        if expected_rows is not None and expected_rows * self.width > self.budget:
            self._spill(expected_rows * self.width)

    @property
    def spilled(self) -> bool:
        """Whether the batch went (or goes) to disk."""
        return self._spilled

    def append(self, rows: npt.NDArray[np.uint8]) -> None:
        """Add records at the end of the batch.

        Args:
            rows: ``(k, width)`` uint8 records.
        """
        rows = np.asarray(rows, dtype=np.uint8).reshape(-1, self.width)
        if not rows.shape[0]:
            return
        size = (self.rows + rows.shape[0]) * self.width
        if self._file is None and size > self.budget:
            self._spill(size)
        if self._file is None:
            self._parts.append(np.array(rows, copy=True))
        else:
            self._file.write(np.ascontiguousarray(rows).data)
        self.rows += rows.shape[0]

    def _spill(self, need: int) -> None:
        where = tempfile.gettempdir() if self.directory is None else str(self.directory)
        free = shutil.disk_usage(where).free
        if need > free:
            raise ConfigError(
                f"a batch of {need / 1e9:.3g} GB must spill to {where}, which has "
                f"{free / 1e9:.3g} GB free; free space there, give another directory "
                "(spill_dir) or a larger memory budget"
            )
        fd, path = tempfile.mkstemp(prefix="esa-batch-", suffix=".records", dir=where)
        os.unlink(path)  # the open file keeps it; nothing is left behind, even after a crash
        self._file = os.fdopen(fd, "w+b", buffering=8 * 2**20)
        self._spilled = True
        for part in self._parts:
            self._file.write(part.data)
        self._parts = []

    def finish(self) -> npt.NDArray[np.uint8]:
        """The batch: a matrix in RAM, or a view of the spilled file.

        Returns:
            The ``(rows, width)`` records, in the order appended.
        """
        if self._file is None:
            if len(self._parts) == 1:
                return self._parts[0]
            if not self._parts:
                return np.zeros((0, self.width), dtype=np.uint8)
            return np.concatenate(self._parts)
        file, self._file = self._file, None
        with file:  # a mapping keeps the (unlinked) file alive after it is closed
            file.flush()
            if not self.rows:
                return np.zeros((0, self.width), dtype=np.uint8)
            mapping = mmap.mmap(file.fileno(), self.rows * self.width)
        return np.frombuffer(mapping, dtype=np.uint8).reshape(self.rows, self.width)


def gather(
    parts: Sequence[npt.NDArray[np.uint8]],
    index: npt.NDArray[np.integer[Any]],
    *,
    budget: int = DEFAULT_MEMORY_BUDGET,
    directory: str | Path | None = None,
) -> npt.NDArray[np.uint8]:
    """Rows ``index`` of the parts joined end to end, without joining them.

    How a shuffler permutes a batch it holds as pieces (the peeled reports and its fakes):
    one chunk of the output at a time, into a :class:`RecordWriter`.

    A spilled part is read one window of :data:`WINDOW_BYTES` at a time: a chunk of rows
    drawn at random from a whole file would map nearly all of it (the kernel maps the pages
    around each fault, and a file's page cache comes in large folios), so the output is
    built in larger blocks whose rows are read window by window, each window's pages
    dropped (:func:`release`) before the next: the file's resident pages stay about one
    window, whatever its size.

    Args:
        parts: ``(k_i, width)`` batches of one width.
        index: positions in the joined batch (e.g. a permutation of all of them).
        budget: bytes the output may hold in RAM before it spills.
        directory: where a spilled output goes.

    Returns:
        The ``(len(index), width)`` records.
    """
    width = parts[0].shape[1]
    starts = np.cumsum([0] + [p.shape[0] for p in parts])
    total = int(starts[-1])
    writer = RecordWriter(
        width, budget=budget, directory=directory, expected_rows=int(index.shape[0])
    )
    spilled = any(_mapping(p) is not None for p in parts)
    window = max(1, WINDOW_BYTES // max(width, 1))  # input rows per window
    if not spilled or total <= window:
        window, block = max(total, 1), CHUNK_ROWS
    else:
        block = max(CHUNK_ROWS, BLOCK_BYTES // max(width, 1))  # output rows per block
    windows = -(-max(total, 1) // window)
    for s in chunks(int(index.shape[0]), block):
        want = np.asarray(index[s], dtype=np.int64)
        out = np.empty((want.shape[0], width), dtype=np.uint8)
        if windows == 1:
            _copy_rows(parts, starts, want, out, np.arange(want.shape[0]))
        else:
            # The block's rows grouped by input window (a stable sort of small integers
            # is numpy's radix sort).
            which = (want // window).astype(np.uint16 if windows <= 2**16 else np.uint32)
            order = np.argsort(which, kind="stable")
            bounds = np.searchsorted(which[order], np.arange(windows + 1))
            del which
            for w in range(windows):
                _copy_rows(parts, starts, want, out, order[bounds[w] : bounds[w + 1]])
        writer.append(out)
    return writer.finish()


def _copy_rows(
    parts: Sequence[npt.NDArray[np.uint8]],
    starts: npt.NDArray[np.int64],
    want: npt.NDArray[np.int64],
    out: npt.NDArray[np.uint8],
    rows: npt.NDArray[np.intp],
) -> None:
    """``out[rows] = joined parts[want[rows]]``, then drop the pages the reads touched."""
    if not rows.size:
        return
    src = want[rows]
    which = np.searchsorted(starts, src, side="right") - 1
    for i, part in enumerate(parts):
        sel = which == i
        if sel.any():
            out[rows[sel]] = part[src[sel] - starts[i]]
            release(part)
