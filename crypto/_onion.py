"""Onion layers: one ephemeral-X25519 + ChaCha20-Poly1305 layer per hop.

Wire format of one layer (all reports at one hop have the same length)::

    version (1) ‖ ephemeral public key (32) ‖ ChaCha20-Poly1305( header ‖ inner ) ‖ tag (16)
    header = header version (1) ‖ crowd id (8, big-endian)

The layer key is BLAKE2b-256(shared ‖ epk ‖ recipient_pk) personalised with
``esa-onion-key-v1`` (the construction of libsodium's ``crypto_kx``), where ``shared`` is the
X25519 product of the ephemeral secret and the hop's public key. A fresh ephemeral key per
layer makes every AEAD key single-use, so the nonce is the constant zero nonce (as in HPKE's
base mode for one message). The associated data binds the version, the epoch id, the hop
index and the ephemeral key, so a layer cannot be replayed into another epoch or peeled at
another hop. Every failure — length, version, point, tag, header — is the same opaque
:class:`InvalidReport`.

Primitives: X25519 from libsodium (pynacl bindings), BLAKE2b from hashlib, ChaCha20-Poly1305
from pyca/cryptography. Nothing here is a home-made primitive.
"""

from __future__ import annotations

import atexit
import contextlib
import contextvars
import hashlib
import os
import struct
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, TypeVar

import numpy as np
import numpy.typing as npt
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305
from nacl import bindings
from nacl.exceptions import CryptoError as _NaclError

from ._errors import CryptoParameterError, InvalidReport
from ._keys import KEY_SIZE, LayerPrivateKey

if TYPE_CHECKING:  # imported where a pool is made: 0.02 s of CPU a command without one skips
    from concurrent.futures import ProcessPoolExecutor

__all__ = [
    "HEADER_SIZE",
    "LAYER_OVERHEAD",
    "REPORT_VERSION",
    "LayerHeader",
    "announce_progress",
    "ephemeral_key_of",
    "keep_freed_memory",
    "peel_batch",
    "peel_records",
    "peel_report",
    "process_pool",
    "report_progress",
    "report_size",
    "shutdown_pool",
    "wrap_batch",
    "wrap_records",
    "wrap_report",
]

REPORT_VERSION: Final = 1
_HEADER: Final = struct.Struct(">BQ")
HEADER_SIZE: Final = _HEADER.size  # 9
_AD: Final = struct.Struct(">BQH")
_TAG_SIZE: Final = 16
_NONCE: Final = bytes(12)
_PERSON: Final = b"esa-onion-key-v1"
_EPK_END: Final = 1 + KEY_SIZE
_VERSION_BYTE: Final = bytes((REPORT_VERSION,))
# The layer KDF with its parameters set, copied for each key: 0.35 µs a key, where a new
# hash object built from keyword arguments takes 0.63 µs. Never updated itself.
_KDF: Final = hashlib.blake2b(digest_size=32, person=_PERSON)
LAYER_OVERHEAD: Final = 1 + KEY_SIZE + _TAG_SIZE + HEADER_SIZE  # 58 bytes per hop
MAX_EPOCH: Final = 2**64 - 1
MAX_HOP: Final = 2**16 - 1
_MIN_PARALLEL: Final = 2048  # below this, a process pool costs more than it saves
_PROGRESS_CHUNK: Final = 16384  # reports per chunk (~1 s of X25519 on one core)
_BLOCK: Final = 1024  # reports whose X25519 products are computed in one tight loop
_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class LayerHeader:
    """What one hop learns from its layer besides the inner ciphertext.

    Attributes:
        crowd_id: the crowd (metric, cohort) the report belongs to, for thresholding.
    """

    crowd_id: int


def report_size(payload_size: int, layers: int) -> int:
    """Length of a report carrying a ``payload_size``-byte payload under ``layers`` layers.

    Args:
        payload_size: bytes of the (padded) payload.
        layers: number of onion layers.

    Returns:
        ``payload_size + layers * LAYER_OVERHEAD``.

    Raises:
        CryptoParameterError: a negative size or layer count.
    """
    _check_int(payload_size, "payload_size", 0, None)
    _check_int(layers, "layers", 0, None)
    return int(payload_size) + int(layers) * LAYER_OVERHEAD


def ephemeral_key_of(report: bytes) -> bytes:
    """The outer layer's ephemeral public key (unauthenticated; for replay caches only).

    Args:
        report: an onion report, as received.

    Returns:
        The 32-byte X25519 ephemeral public key of its outer layer.

    Raises:
        InvalidReport: not a report (too short, or not ``bytes``), as in :func:`peel_report`.
    """
    if not isinstance(report, bytes) or len(report) < LAYER_OVERHEAD:
        raise InvalidReport
    return report[1:_EPK_END]


def _check_int(value: object, name: str, low: int, high: int | None) -> None:
    """Programmer misuse as a typed error quoting the value and the bound (a float or a
    negative number would otherwise surface as a bare ``struct.error``)."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int | np.integer)
        or value < low
        or (high is not None and value > high)
    ):
        bound = f"[{low}, {high}]" if high is not None else f">= {low}"
        raise CryptoParameterError(f"{name} must be an integer {bound}, got {value!r}")


def _check_route(epoch: int, hop: int) -> None:
    """``epoch`` and ``hop`` fit the associated data (u64, u16)."""
    _check_int(epoch, "epoch", 0, MAX_EPOCH)
    _check_int(hop, "hop", 0, MAX_HOP)


def _checked_route(route: Sequence[bytes]) -> list[bytes]:
    """``route`` as a list, every key 32 bytes (a programmer's error otherwise)."""
    if not route:
        # No layer would leave the payload in the clear, and at another length.
        raise CryptoParameterError("a route holds at least one hop's key")
    for j, recipient in enumerate(route):
        if not isinstance(recipient, bytes) or len(recipient) != KEY_SIZE:
            raise CryptoParameterError(f"route key {j} must be {KEY_SIZE} bytes")
    return list(route)


def _seal(
    payloads: Sequence[bytes],
    route: Sequence[bytes],
    ads: Sequence[bytes],
    headers: Sequence[bytes],
    secrets: bytes,
) -> list[bytes]:
    """The layers of many reports: the one place a layer is built.

    ``ads[j]`` is layer j's associated data without its ephemeral key, ``headers[i]`` report
    i's packed layer header and ``secrets`` the ephemeral secrets end to end, report by
    report and layer by layer (32 bytes each, checked by the caller). The X25519 products of
    all the reports come first, one tight loop per layer and kind (each loop keeps its own
    code and tables in cache), then the layers' AEAD, innermost first. A low-order route
    key raises ``RuntimeError`` or nacl's ``CryptoError``.
    """
    base, mult = bindings.crypto_scalarmult_base, bindings.crypto_scalarmult
    kdf, aead = _KDF.copy, ChaCha20Poly1305
    starts = range(0, len(secrets), KEY_SIZE * len(route))
    out = list(payloads)
    for j in range(len(route) - 1, -1, -1):
        recipient, ad, at = route[j], ads[j], j * KEY_SIZE
        esks = [secrets[i + at : i + at + KEY_SIZE] for i in starts]
        epks = list(map(base, esks))
        shared = [mult(esk, recipient) for esk in esks]
        sealed = []
        for epk, product, header, inner in zip(epks, shared, headers, out, strict=True):
            h = kdf()
            h.update(product)
            h.update(epk)
            h.update(recipient)
            body = aead(h.digest()).encrypt(_NONCE, header + inner, ad + epk)
            sealed.append(_VERSION_BYTE + epk + body)
        out = sealed
    return out


def _wrap_from_parts(
    payload: bytes,
    route: Sequence[bytes],
    *,
    epoch: int,
    crowd_id: int,
    first_hop: int,
    ephemeral_secrets: Sequence[bytes],
) -> bytes:
    """Deterministic core of :func:`wrap_report`, with the ephemeral secrets pinned.

    Only for known-answer tests; reusing an ephemeral secret breaks the scheme.
    """
    route = _checked_route(route)
    if len(ephemeral_secrets) != len(route):
        raise CryptoParameterError("one ephemeral secret per layer is required")
    _check_int(crowd_id, "crowd_id", 0, 2**64 - 1)
    _check_int(first_hop, "first_hop", 0, MAX_HOP)
    _check_route(epoch, first_hop + len(route) - 1)
    ads = [_AD.pack(REPORT_VERSION, epoch, first_hop + j) for j in range(len(route))]
    header = _HEADER.pack(REPORT_VERSION, crowd_id)
    if any(len(esk) != KEY_SIZE for esk in ephemeral_secrets):
        raise CryptoParameterError(f"every ephemeral secret must be {KEY_SIZE} bytes")
    try:
        return _seal([payload], route, ads, [header], b"".join(ephemeral_secrets))[0]
    except (_NaclError, RuntimeError) as exc:
        raise _bad_route_key(route) from exc


def _bad_route_key(route: Sequence[bytes]) -> CryptoParameterError:
    """The error for a route with a low-order key (X25519 with it gives the zero point)."""
    probe = os.urandom(KEY_SIZE)
    for j, recipient in enumerate(route):
        try:
            bindings.crypto_scalarmult(probe, recipient)
        except (_NaclError, RuntimeError):
            return CryptoParameterError(f"route key {j} is not a valid X25519 key")
    return CryptoParameterError("a route key is not a valid X25519 key")  # pragma: no cover


def wrap_report(
    payload: bytes,
    route: Sequence[bytes],
    *,
    epoch: int,
    crowd_id: int = 0,
    first_hop: int = 0,
) -> bytes:
    """Onion-encrypt ``payload`` for the X25519 public keys in ``route``, outermost first.

    Args:
        payload: the (already padded) innermost plaintext.
        route: public keys of hops ``first_hop``, ``first_hop+1``, …, last = analyzer.
        epoch: epoch id bound into every layer.
        crowd_id: crowd id written into every layer's header.
        first_hop: global index of ``route[0]`` (a shuffler injecting fakes wraps them for
            the hops after itself).

    Returns:
        The report: one layer per key of ``route``, outermost (``route[0]``'s) first.

    Raises:
        CryptoParameterError: an empty route, or an epoch, hop or crowd id out of range.
    """
    secrets = [os.urandom(KEY_SIZE) for _ in route]
    return _wrap_from_parts(
        payload,
        route,
        epoch=epoch,
        crowd_id=crowd_id,
        first_hop=first_hop,
        ephemeral_secrets=secrets,
    )


def peel_report(
    report: bytes,
    key: LayerPrivateKey,
    *,
    epoch: int,
    hop: int,
    expected_size: int | None = None,
) -> tuple[LayerHeader, bytes]:
    """Remove one layer.

    Args:
        report: the onion report, as received.
        key: this hop's layer private key.
        epoch: epoch id the layer must be bound to.
        hop: global index of this hop.
        expected_size: if given, the exact length the report must have.

    Returns:
        ``(header, inner)``: the layer's header and the remaining bytes (the next hop's report,
        or the padded payload at the last hop).

    Raises:
        InvalidReport: wrong length or version, invalid point, failed authentication
            (tampering, wrong key, wrong epoch or hop) or malformed header — always the same
            opaque error.
        CryptoParameterError: ``epoch`` or ``hop`` out of range (misuse, not an invalid
            report).
    """
    _check_route(epoch, hop)  # programmer misuse, not an invalid report
    if not isinstance(report, bytes):  # e.g. None from a batch: invalid, not a TypeError
        raise InvalidReport
    if expected_size is not None and len(report) != expected_size:
        raise InvalidReport
    if len(report) < LAYER_OVERHEAD:
        raise InvalidReport
    [plain] = _open(
        [report], key.private_bytes_raw(), key.public_key, _AD.pack(REPORT_VERSION, epoch, hop)
    )
    if plain is None:
        raise InvalidReport
    return LayerHeader(_HEADER.unpack_from(plain)[1]), plain[HEADER_SIZE:]


def _open(reports: Sequence[bytes], secret: bytes, public: bytes, ad: bytes) -> list[bytes | None]:
    """Each report's layer plaintext, ``header ‖ inner``, or None for an invalid one: the
    one place a layer is opened.

    Every report is at least :data:`LAYER_OVERHEAD` bytes (checked by the caller); ``ad``
    is the associated data without the ephemeral key. Invalid: a wrong version (outer or
    header), a low-order ephemeral key or a failed tag. The X25519 products come first, in
    one tight loop, then the AEAD.
    """
    mult = bindings.crypto_scalarmult
    epks = [report[1:_EPK_END] for report in reports]
    shared: list[bytes | None] = []
    for report, epk in zip(reports, epks, strict=True):
        if report[0] != REPORT_VERSION:
            shared.append(None)
            continue
        try:
            shared.append(mult(secret, epk))
        except (_NaclError, RuntimeError):  # low-order point: all-zero shared secret
            shared.append(None)
    kdf, aead = _KDF.copy, ChaCha20Poly1305
    out: list[bytes | None] = []
    for report, epk, product in zip(reports, epks, shared, strict=True):
        if product is None:
            out.append(None)
            continue
        h = kdf()
        h.update(product)
        h.update(epk)
        h.update(public)
        try:
            plain = aead(h.digest()).decrypt(_NONCE, report[_EPK_END:], ad + epk)
        except InvalidTag:
            out.append(None)
            continue
        out.append(plain if plain[0] == REPORT_VERSION else None)
    return out


# --- batches, on all cores ---------------------------------------------------------------


def _peel_chunk(
    reports: Sequence[bytes], key: LayerPrivateKey, epoch: int, hop: int, expected: int | None
) -> list[tuple[int, bytes] | None]:
    out: list[tuple[int, bytes] | None] = []
    for report in reports:
        try:
            header, inner = peel_report(report, key, epoch=epoch, hop=hop, expected_size=expected)
        except InvalidReport:
            out.append(None)
        else:
            out.append((header.crowd_id, inner))
    return out


def _wrap_chunk(
    payloads: Sequence[bytes],
    crowd_ids: Sequence[int],
    route: Sequence[bytes],
    epoch: int,
    first_hop: int,
) -> list[bytes]:
    return [
        wrap_report(p, route, epoch=epoch, crowd_id=c, first_hop=first_hop)
        for p, c in zip(payloads, crowd_ids, strict=True)
    ]


def _workers(workers: int | None) -> int:
    if workers is None:
        return max(1, len(os.sched_getaffinity(0)))
    if workers < 1:
        raise CryptoParameterError(f"workers must be >= 1, got {workers}")
    return workers


def _chunks(n: int, parts: int) -> list[slice]:
    """``range(n)`` cut into at most ``parts`` near-equal slices (none for n = 0)."""
    if n <= 0:
        return []
    size = -(-n // max(parts, 1))
    return [slice(i, min(i + size, n)) for i in range(0, n, size)]


_POOLS: dict[int, ProcessPoolExecutor] = {}
_POOLS_LOCK = threading.Lock()


def _forget_pools_in_child() -> None:
    # A forked child owns neither its parent's worker processes nor, if another thread held
    # it at the fork, the lock: start afresh.
    global _POOLS_LOCK
    _POOLS.clear()
    _POOLS_LOCK = threading.Lock()


os.register_at_fork(after_in_child=_forget_pools_in_child)


def shutdown_pool(pool: ProcessPoolExecutor, *, cancel_futures: bool = False) -> None:
    """Shut ``pool`` down and wait for its workers, even if its start was interrupted.

    :meth:`ProcessPoolExecutor.shutdown` leaves stopping the workers to the pool's manager
    thread, which the pool starts at its first submission, after it has started its worker
    processes. An exception raised in between, a ``KeyboardInterrupt`` above all (a Ctrl-C
    that arrives while the workers start is raised when the start returns), leaves workers
    that wait for work with no thread to stop them. ``multiprocessing`` then waits for them
    at the interpreter's exit, which never ends. Such workers are terminated here (read from
    the pool's ``_processes``, CPython's own record of them).

    Args:
        pool: a process pool, of :func:`process_pool` or any other.
        cancel_futures: drop the tasks that have not started, as ``shutdown`` does.
    """
    stranded = []
    if getattr(pool, "_executor_manager_thread", None) is None:
        stranded = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=True, cancel_futures=cancel_futures)
    for process in stranded:
        process.terminate()
    for process in stranded:
        process.join()


def _stop_pools_at_exit() -> None:
    # Registered once a pool exists, after multiprocessing registered its own exit handler,
    # so it runs before that one, which waits for every worker process still alive. By then
    # concurrent.futures has stopped the workers of every pool that started; a pool whose
    # start was interrupted has its workers terminated (shutdown_pool). The pools are also
    # let go while the interpreter is whole: left to the modules' teardown, a pool is
    # collected after concurrent.futures.process's globals are cleared, and its collection
    # callback fails ("Exception ignored in ... weakref_cb").
    with _POOLS_LOCK:
        pools = list(_POOLS.values())
        _POOLS.clear()
    for pool in pools:
        shutdown_pool(pool, cancel_futures=True)


_exit_handler_registered = False  # _stop_pools_at_exit, by the first process_pool call


_KEPT_FREED_MEMORY: Final = 256 * 2**20
_M_TRIM_THRESHOLD: Final = -1  # glibc's malloc.h
_M_MMAP_THRESHOLD: Final = -3


def keep_freed_memory() -> None:
    """Let this process's allocator keep up to 256 MiB of the memory it frees, for reuse.

    The initializer of every worker of :func:`process_pool` (and of ``esa``'s other local
    pools). glibc's malloc takes every block below 256 MiB from the process's heap instead
    of mapping it afresh, and gives the heap's free top back to the OS only beyond 256 MiB.
    Its defaults start both thresholds at 128 KiB (the mmap one rising with the blocks
    freed, to 32 MiB at most): a task's arrays are unmapped or trimmed when freed and the
    next task's page-faulted in again, about 10⁵ faults and 0.5–1 s of system time in
    a task of 1.5 s of user time (``cnt_pure`` at n = 5·10⁴ in the counting grid), and
    more with two workers faulting at once (``benchmarks/bench_parallel.py``). The grids'
    workers peak about 5 % higher; between tasks a worker keeps up to 256 MiB it no
    longer uses.

    glibc only; elsewhere, or where the C library refuses a value, the allocator stays as
    it was. Only speed depends on it, never a result.
    """
    import ctypes  # here: a worker's start needs it, no caller of the crypto does
    import sys

    if not sys.platform.startswith("linux"):  # pragma: no cover - macOS, Windows
        return
    mallopt = getattr(ctypes.CDLL(None), "mallopt", None)  # glibc's (musl's ignores it)
    # The trim threshold only with the mmap one: setting either freezes glibc's dynamic
    # mmap threshold, and frozen at its 128 KiB start it would fault more, not less.
    if mallopt is not None and mallopt(_M_MMAP_THRESHOLD, _KEPT_FREED_MEMORY):
        mallopt(_M_TRIM_THRESHOLD, _KEPT_FREED_MEMORY)


def process_pool(
    workers: int, *, preload: Sequence[str] = (), replace_broken: bool = False
) -> ProcessPoolExecutor:
    """The process's pool of ``workers`` worker processes, created on first use and reused.

    One registry for every caller (this module's batch functions and the layers above,
    which hand it their own task modules to preload), so a process never starts two pools
    of the same size. forkserver, not fork: forking a process that runs threads (trio,
    rich) can deadlock. Reused, because every new forkserver worker imports the parent's
    ``__main__`` again (for the ``esa`` CLI: the whole package, numpy and scipy): a fresh
    pool per batch cost seconds on a loaded 2-core machine, more than the batch itself, so
    workers=2 ran slower than workers=1 (``benchmarks/bench_crypto.py``,
    docs/benchmarks.md). The fork server preloads this module and ``preload`` (the modules
    named by whichever caller starts it first), sparing each worker the imports. This
    module's batches fail loudly on a pool whose worker died and then drop it, so the next
    batch gets a new one; ``replace_broken`` replaces such a pool at once instead. Idle
    workers only wait; ``concurrent.futures`` shuts them down when the interpreter exits
    (and :func:`shutdown_pool` those of a pool whose start was interrupted).
    Every worker keeps the memory it frees for its next task (:func:`keep_freed_memory`).

    Args:
        workers: processes, at least 2 (one worker is better run in process).
        preload: further modules the fork server imports before forking workers.
        replace_broken: hand out a new pool in place of one whose worker died.

    Returns:
        The pool; the caller must not shut it down.

    Raises:
        ValueError: ``workers`` < 1.
    """
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    global _exit_handler_registered
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    with _POOLS_LOCK:
        pool = _POOLS.get(workers)
        if pool is None or (replace_broken and getattr(pool, "_broken", False)):
            if not _exit_handler_registered:  # after the imports above: runs first
                atexit.register(_stop_pools_at_exit)
                _exit_handler_registered = True
            context = multiprocessing.get_context("forkserver")
            context.set_forkserver_preload([__name__, *preload])
            pool = _POOLS[workers] = ProcessPoolExecutor(
                workers, mp_context=context, initializer=keep_freed_memory
            )
        return pool


_PROGRESS: contextvars.ContextVar[Callable[[int], None] | None] = contextvars.ContextVar(
    "crypto_report_progress", default=None
)


@contextlib.contextmanager
def report_progress(callback: Callable[[int], None]) -> Iterator[None]:
    """Within the block, :func:`wrap_batch` and :func:`peel_batch` call ``callback(k)`` each
    time k more reports of the batch are done (every ~16 384 reports, in batch order).

    For a progress display of long batches: 5·10^6 reports take minutes per hop.

    Args:
        callback: called with the number of reports just completed.

    Yields:
        Nothing; the callback is in force inside the ``with`` block (this thread or task only).
    """
    token = _PROGRESS.set(callback)
    try:
        yield
    finally:
        _PROGRESS.reset(token)


def announce_progress(k: int) -> None:
    """Tell the :func:`report_progress` hook in force (if any) that k more reports are done.

    For callers that cut a batch of records into chunks and run them where they like
    (:func:`wrap_records`, :func:`peel_records`): their progress reaches the same hook as
    :func:`wrap_batch` and :func:`peel_batch` do, and may stop the batch the same way (the
    hook raising).

    Args:
        k: reports just finished.
    """
    done = _PROGRESS.get()
    if done is not None:
        done(k)


def _run_chunks(
    workers: int,
    fn: Callable[..., list[_T]],
    columns: tuple[Sequence[object], ...],
    rest: tuple[object, ...],
) -> list[_T]:
    """``fn(*columns, *rest)``, the equal-length ``columns`` cut into slices, in process or
    on the shared pool, results concatenated in order; each finished slice is announced to
    the progress hook (in process and without one, the batch goes through uncut)."""
    items = len(columns[0])
    done = _PROGRESS.get()

    def job(s: slice) -> tuple[object, ...]:
        return (*(list(c[s]) for c in columns), *rest)

    if workers == 1 or items < _MIN_PARALLEL:
        if done is None:
            return fn(*columns, *rest)
        out: list[_T] = []
        for s in _chunks(items, -(-items // _PROGRESS_CHUNK)):
            out += fn(*job(s))
            done(s.stop - s.start)
        return out
    parts = max(workers * 4, -(-items // _PROGRESS_CHUNK))
    return _run_on_pool(workers, fn, [job(s) for s in _chunks(items, parts)], done)


def _run_on_pool(
    workers: int,
    fn: Callable[..., list[_T]],
    jobs: Sequence[tuple[object, ...]],
    done: Callable[[int], None] | None = None,
) -> list[_T]:
    """``fn(*job)`` for every job on the shared pool, results concatenated in job order."""
    from concurrent.futures.process import BrokenProcessPool

    pool = process_pool(workers)
    futures = []
    try:
        futures = [pool.submit(fn, *job) for job in jobs]
        out: list[_T] = []
        for f in futures:
            part = f.result()
            out += part
            if done is not None:
                done(len(part))  # may raise to stop the batch (a service shutting down)
        return out
    except BrokenProcessPool:
        # a worker died (killed, out of memory): the next batch gets a fresh pool
        with _POOLS_LOCK:
            if _POOLS.get(workers) is pool:
                del _POOLS[workers]
        raise
    finally:
        # Stopped early (an error, or the progress hook raising): slices still queued are
        # dropped, so neither this batch nor the interpreter's exit waits for them.
        for f in futures:
            f.cancel()


def peel_batch(
    reports: Sequence[bytes],
    key: LayerPrivateKey,
    *,
    epoch: int,
    hop: int,
    expected_size: int | None = None,
    workers: int | None = 1,
) -> list[tuple[int, bytes] | None]:
    """Peel every report; ``None`` marks an invalid one. Uses ``workers`` processes.

    ``workers=None`` uses every available core; small batches always run in-process.

    Args:
        reports: the reports, as received.
        key: this hop's layer private key.
        epoch: epoch id every layer must be bound to.
        hop: global index of this hop.
        expected_size: if given, the exact length every report must have.
        workers: number of processes (``None``: every available core).

    Returns:
        One entry per report, in order: ``(crowd_id, inner)`` as :func:`peel_report` gives
        (header's crowd id and the next layer), or ``None`` for an invalid report.

    Raises:
        CryptoParameterError: ``epoch`` or ``hop`` out of range (misuse, not invalid reports).
    """
    _check_route(epoch, hop)
    return _run_chunks(_workers(workers), _peel_chunk, (reports,), (key, epoch, hop, expected_size))


def wrap_batch(
    payloads: Sequence[bytes],
    route: Sequence[bytes],
    *,
    epoch: int,
    crowd_ids: Sequence[int],
    first_hop: int = 0,
    workers: int | None = 1,
) -> list[bytes]:
    """:func:`wrap_report` for many payloads, on ``workers`` processes.

    Args:
        payloads: the (already padded) innermost plaintexts.
        route: public keys of hops ``first_hop``, ``first_hop+1``, …, last = analyzer.
        epoch: epoch id bound into every layer.
        crowd_ids: one crowd id per payload, written into every layer's header.
        first_hop: global index of ``route[0]``.
        workers: number of processes (``None``: every available core).

    Returns:
        The reports, in the order of ``payloads``.

    Raises:
        CryptoParameterError: not one crowd id per payload, an empty route, or an epoch or hop
            out of range.
    """
    if len(crowd_ids) != len(payloads):
        raise CryptoParameterError("one crowd id per payload is required")
    if not route:
        raise CryptoParameterError("a route holds at least one hop's key")
    # also checked per report, but an empty batch must not accept what one report refuses
    _check_int(first_hop, "first_hop", 0, MAX_HOP)
    _check_route(epoch, first_hop + len(route) - 1)
    return _run_chunks(
        _workers(workers), _wrap_chunk, (payloads, crowd_ids), (list(route), epoch, first_hop)
    )


# --- fixed-width records: one report per row of a uint8 matrix ---------------------------


def wrap_records(
    payloads: npt.NDArray[np.uint8],
    route: Sequence[bytes],
    *,
    epoch: int,
    crowd_ids: npt.NDArray[np.uint64],
    first_hop: int = 0,
) -> npt.NDArray[np.uint8]:
    """:func:`wrap_report` for every row of ``payloads``, in this process, as records.

    A batch of reports held as one ``(k, report_size)`` ``uint8`` matrix costs its
    ciphertext bytes and nothing more (a ``bytes`` object per report costs its header, and
    a list or array of them a pointer each); the bytes of row i are the wire report
    :func:`wrap_report` would return. Callers cut large batches into chunks and run them
    where they like (a process pool, a cluster).

    Args:
        payloads: ``(k, P)`` padded payloads, one per row.
        route: public keys of hops ``first_hop``, ``first_hop+1``, …, last = analyzer.
        epoch: epoch id bound into every layer.
        crowd_ids: ``k`` crowd ids, written into every layer's header.
        first_hop: global index of ``route[0]``.

    Returns:
        The ``(k, report_size(P, len(route)))`` records, in the order of ``payloads``.

    Raises:
        CryptoParameterError: payloads not a 2-D array, not one crowd id per row, an empty
            route, or an epoch, hop or crowd id out of range.
    """
    rows = np.asarray(payloads, dtype=np.uint8)
    crowds = np.asarray(crowd_ids).reshape(-1)
    if rows.ndim != 2:
        raise CryptoParameterError(f"payloads must be a 2-D array, got shape {rows.shape}")
    if crowds.shape[0] != rows.shape[0]:
        raise CryptoParameterError("one crowd id per payload is required")
    if not route:
        raise CryptoParameterError("a route holds at least one hop's key")
    _check_int(first_hop, "first_hop", 0, MAX_HOP)
    _check_route(epoch, first_hop + len(route) - 1)
    keys = _checked_route(route)
    k, width = rows.shape
    size = report_size(width, len(keys))
    ads = [_AD.pack(REPORT_VERSION, epoch, first_hop + j) for j in range(len(keys))]
    data = np.ascontiguousarray(rows).tobytes()
    # One header per distinct crowd (usually one), checked once.
    cache: dict[int, bytes] = {}
    headers = []
    for crowd in crowds.tolist():
        header = cache.get(crowd)
        if header is None:
            _check_int(crowd, "crowd_id", 0, 2**64 - 1)
            header = cache[crowd] = _HEADER.pack(REPORT_VERSION, crowd)
        headers.append(header)
    sealed = bytearray(k * size)
    try:
        for start in range(0, k, _BLOCK):
            stop = min(start + _BLOCK, k)
            block = [data[i * width : (i + 1) * width] for i in range(start, stop)]
            secrets = os.urandom(KEY_SIZE * len(keys) * (stop - start))
            reports = _seal(block, keys, ads, headers[start:stop], secrets)
            sealed[start * size : stop * size] = b"".join(reports)
    except (_NaclError, RuntimeError) as exc:
        raise _bad_route_key(keys) from exc
    return np.frombuffer(sealed, dtype=np.uint8).reshape(k, size)


def peel_records(
    records: npt.NDArray[np.uint8], key: LayerPrivateKey, *, epoch: int, hop: int
) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.uint8], npt.NDArray[np.bool_]]:
    """:func:`peel_report` for every row of ``records``, in this process.

    Args:
        records: ``(k, L)`` reports, one per row (every report at one hop has one length).
        key: this hop's layer private key.
        epoch: epoch id every layer must be bound to.
        hop: global index of this hop.

    Returns:
        ``(crowd_ids, inner, ok)``: per row, its header's crowd id, the ``(k, L −
        LAYER_OVERHEAD)`` inner records (the next hop's reports, or padded payloads at the
        last hop) and whether it opened; a row that did not (any :class:`InvalidReport`)
        has crowd id 0, zero bytes and ``ok`` False.

    Raises:
        CryptoParameterError: records not a 2-D array of at least ``LAYER_OVERHEAD``
            columns, or ``epoch`` or ``hop`` out of range (misuse, not invalid reports).
    """
    _check_route(epoch, hop)
    rows = np.asarray(records, dtype=np.uint8)
    if rows.ndim != 2 or rows.shape[1] < LAYER_OVERHEAD:
        raise CryptoParameterError(
            f"records must be (k, L >= {LAYER_OVERHEAD}) uint8, got shape {rows.shape}"
        )
    k, width = rows.shape
    plain_size = width - LAYER_OVERHEAD + HEADER_SIZE  # header ‖ inner
    data = np.ascontiguousarray(rows).tobytes()
    secret, public, ad = (
        key.private_bytes_raw(),
        key.public_key,
        _AD.pack(REPORT_VERSION, epoch, hop),
    )
    # Each plaintext goes whole into its row, and the headers are read as one column
    # afterwards: per report, one copy and no parsing in Python.
    plains = bytearray(k * plain_size)  # an invalid row stays zero
    view = memoryview(plains)
    opened: list[int] = []
    for start in range(0, k, _BLOCK):
        stop = min(start + _BLOCK, k)
        block = [data[i * width : (i + 1) * width] for i in range(start, stop)]
        for i, plain in enumerate(_open(block, secret, public, ad), start):
            if plain is not None:
                view[i * plain_size : (i + 1) * plain_size] = plain
                opened.append(i)
    table = np.frombuffer(plains, dtype=np.uint8).reshape(k, plain_size)
    ok = np.zeros(k, dtype=bool)
    ok[opened] = True
    crowds = table[:, 1:HEADER_SIZE].copy().view(">u8").reshape(k).astype(np.uint64)
    return crowds, np.ascontiguousarray(table[:, HEADER_SIZE:]), ok
