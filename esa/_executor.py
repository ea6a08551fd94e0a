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
it returns.
"""

from __future__ import annotations

import contextlib
import importlib
import os
from collections.abc import Iterator
from concurrent.futures import Executor, ProcessPoolExecutor
from typing import Any

from ._errors import ConfigError

__all__ = ["available_cores", "resolve_executor"]


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
        workers: local worker processes (default: :func:`available_cores`); with a
            ``cluster`` it is ignored (the cluster's workers decide).
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
        with ProcessPoolExecutor(max_workers=workers or available_cores()) as pool:
            yield pool
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
