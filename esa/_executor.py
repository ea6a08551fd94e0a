"""Where parallel work runs: one :class:`concurrent.futures.Executor` for every parallel stage.

:func:`resolve_executor` turns the user's ``workers`` / ``cluster`` choice into a context
manager that yields an executor and shuts down what it started:

* ``cluster=None``: a local :class:`~concurrent.futures.ProcessPoolExecutor` of ``workers``
  processes (default: the cores this process may use);
* ``cluster="tcp://host:port"`` (a Dask scheduler's address) or a ``distributed.Client``:
  the client's :meth:`~distributed.Client.get_executor`, so the tasks run on the cluster's
  workers (``pip install "esa-shuffle[cluster]"``);
* ``cluster`` an :class:`~concurrent.futures.Executor` already: used as is, not shut down.

A task submitted to any of them must be a picklable module-level function whose result
depends on its arguments only (no global state), so that where it runs never changes what
it returns. A local pool's workers keep the memory they free for their next task
(:func:`crypto.keep_freed_memory`) instead of page-faulting it in again, and their garbage
collector leaves alone the objects they inherit from this process (frozen while the pool
runs), so it neither traverses them nor copies the pages that hold them.
"""

from __future__ import annotations

import collections
import contextlib
import gc
import importlib
import os
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Executor, Future
from typing import Any, TypeVar

import crypto
import protocols

from ._errors import ConfigError

__all__ = [
    "InlineExecutor",
    "available_cores",
    "local_pool",
    "map_ordered",
    "resolve_executor",
]

_T = TypeVar("_T")


def available_cores() -> int:
    """The cores this process may run on (its CPU affinity where the OS tells it).

    Returns:
        The number of cores, at least 1.
    """
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - macOS, Windows
        return max(1, os.cpu_count() or 1)


@contextlib.contextmanager
def resolve_executor(
    workers: int | None = None, cluster: str | Executor | Any | None = None
) -> Iterator[Executor]:
    """The executor for ``workers`` local processes or a Dask ``cluster``.

    Args:
        workers: local worker processes (default: :func:`available_cores`), each keeping
            the memory it frees for its next task; with a ``cluster`` it is ignored (the
            cluster's workers decide).
        cluster: None (local processes), a Dask scheduler address such as
            ``"tcp://10.0.0.5:8786"``, a ``distributed.Client``, or any
            :class:`~concurrent.futures.Executor` (used as given, left running).

    Yields:
        The executor; on exit, what this call started (pool, client) is shut down.

    Raises:
        ConfigError: ``workers`` < 1, or a cluster address while ``distributed`` is not
            installed.
    """
    if workers is not None and workers < 1:
        raise ConfigError(f"workers must be >= 1, got {workers}")
    if isinstance(cluster, Executor):
        yield cluster
        return
    if cluster is None:
        from concurrent.futures import ProcessPoolExecutor  # here: it imports multiprocessing

        count = workers or available_cores()
        with _frozen_heap():
            pool = ProcessPoolExecutor(count, initializer=crypto.keep_freed_memory)
            finished = False
            try:
                yield pool
                finished = True
            finally:  # its workers stopped even if an interrupt cut its start short
                crypto.shutdown_pool(pool, cancel_futures=not finished)
        return
    try:  # untyped: the calls below are Any
        distributed: Any = importlib.import_module("distributed")
    except ImportError as exc:
        raise ConfigError(
            'a Dask cluster needs the distributed package: pip install "esa-shuffle[cluster]"'
        ) from exc
    if isinstance(cluster, str):
        with distributed.Client(cluster) as client:
            executor = client.get_executor()
            try:
                yield executor
            finally:
                executor.shutdown(wait=True)
        return
    if isinstance(cluster, distributed.Client):
        executor = cluster.get_executor()
        try:
            yield executor
        finally:
            executor.shutdown(wait=True)
        return
    raise ConfigError(
        f"cluster must be a scheduler address, a distributed.Client or an Executor, "
        f"got {type(cluster).__name__}"
    )


@contextlib.contextmanager
def _frozen_heap() -> Iterator[None]:
    """This process's objects left out of the garbage collector while a forked pool runs
    (:func:`gc.freeze`, then :func:`gc.unfreeze`).

    A pool worker forked from this process shares its pages copy-on-write. Its collector
    would otherwise traverse every object it inherited (the modules of numpy, scipy and
    matplotlib: hundreds of thousands) at each full collection, spending the time and
    writing their headers, so copying every page that holds one."""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


class InlineExecutor(Executor):
    """Runs every task at once, in the calling process: ``workers=1``, and small batches."""

    def submit(self, fn: Callable[..., _T], /, *args: Any, **kwargs: Any) -> Future[_T]:
        """Run ``fn(*args, **kwargs)`` now.

        Args:
            fn: the task.
            *args: its positional arguments.
            **kwargs: its keyword arguments.

        Returns:
            A finished future holding the result or the exception.
        """
        future: Future[_T] = Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as exc:  # delivered through the future, as any executor does
            future.set_exception(exc)
        return future


def local_pool(workers: int | None = None) -> Executor:
    """The machine's executor for ``workers`` processes, created on first use and reused.

    ``workers=1`` is an :class:`InlineExecutor` (no process at all). Otherwise a forkserver
    :class:`~concurrent.futures.ProcessPoolExecutor` (forking a process that runs threads
    can deadlock), kept for the life of the interpreter: every new worker imports the
    parent's ``__main__`` again, which costs seconds on a loaded machine, more than many
    batches. It is :func:`crypto.process_pool` (one registry per process, shared with the
    crypto's own batch functions); the fork server preloads the crypto, every built-in
    protocol module (:data:`protocols.BUILTIN_MODULES`) and the chunk tasks, so workers start
    warm, and each keeps the memory it frees.

    Args:
        workers: processes (default: :func:`available_cores`).

    Returns:
        The executor; the caller must not shut it down.

    Raises:
        ConfigError: ``workers`` < 1.
    """
    count = available_cores() if workers is None else workers
    if count < 1:
        raise ConfigError(f"workers must be >= 1, got {count}")
    if count == 1:
        return InlineExecutor()
    preload = (*protocols.BUILTIN_MODULES, "esa._tasks")
    return crypto.process_pool(count, preload=preload, replace_broken=True)


def map_ordered(
    executor: Executor,
    fn: Callable[..., _T],
    jobs: Iterable[tuple[Any, ...]],
    *,
    ahead: int = 8,
) -> Iterator[_T]:
    """``fn(*job)`` for every job on ``executor``, results in job order.

    At most ``ahead`` jobs are in flight, so a long batch cut into chunks never has more
    than a few chunks' inputs and outputs in memory at once. Stopped early (an error, or the
    consumer stops), the jobs still queued are cancelled.

    Args:
        executor: where the jobs run.
        fn: a picklable module-level function (the executor may be another process or
            machine).
        jobs: each job's positional arguments, consumed lazily.
        ahead: jobs submitted before the first result is awaited.

    Yields:
        Each job's result, in order.
    """
    pending: collections.deque[Future[_T]] = collections.deque()
    source = iter(jobs)
    try:
        for job in source:
            pending.append(executor.submit(fn, *job))
            if len(pending) >= ahead:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
    finally:
        for future in pending:
            future.cancel()
