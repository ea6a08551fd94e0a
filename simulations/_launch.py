"""The ``esa`` executable: settles how many threads BLAS starts and how the process exits,
then runs the command line (:func:`simulations.cli.main`).

numpy and scipy each ship an OpenBLAS that, when it loads, starts a thread per core which
spins before it sleeps: about 0.1 CPU-s per library, at every start of every command (a
quarter of the CPU of ``esa amplify`` at n = 10^6; docs/benchmarks.md). esa has no use for
them: its numerical work is element-wise or products of small matrices, and its parallelism
is its process pool, whose workers would each start their own. So, unless the environment
already says how many threads BLAS may use, the ``esa`` process and the workers it starts run
BLAS on one thread, as Dask's workers do by default. Export ``OPENBLAS_NUM_THREADS`` (or one
of :data:`BLAS_THREAD_VARIABLES`) to choose otherwise. Only the executable does this:
importing :mod:`simulations.cli` from Python changes no variable.

At exit, CPython runs a full garbage collection over every object still alive, only to free
memory that the OS takes back anyway: with numpy, scipy and matplotlib loaded, 0.1–0.2 s of
CPU, more than a tenth of a short command, and time that a parallel run pays serially after
its workers are done. The executable leaves those objects out of it
(:func:`skip_exit_collection`).
"""

from __future__ import annotations

import atexit
import gc
import os

__all__ = ["BLAS_THREAD_VARIABLES", "main", "one_blas_thread", "skip_exit_collection"]

#: The variables the BLAS libraries numpy and scipy may be built with read (OpenBLAS, MKL,
#: an OpenMP build); a caller who set any of them has chosen, and keeps the choice.
BLAS_THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "OMP_NUM_THREADS")


def one_blas_thread() -> None:
    """Set every :data:`BLAS_THREAD_VARIABLES` to 1, unless one is set already.

    Effective only before numpy loads (BLAS reads them once, when it loads); inherited by
    the processes started after it.
    """
    if not any(name in os.environ for name in BLAS_THREAD_VARIABLES):
        os.environ.update(dict.fromkeys(BLAS_THREAD_VARIABLES, "1"))


def skip_exit_collection() -> None:
    """Leave the objects alive at exit out of the interpreter's last garbage collection.

    Registers :func:`gc.freeze` with :mod:`atexit`: once the process exits, after every
    handler registered later has run, it moves every object into the collector's permanent
    generation, which the collections of the interpreter's shutdown skip. Nothing else about
    the exit changes: the atexit handlers run, the standard streams are flushed, and module
    teardown releases objects by reference count, closing what they hold. Only an object in
    a reference cycle is not finalized, so a file left open in one would not be flushed.
    Nothing the project writes waits for the exit: its commands close their output files
    before they return, and its parties lose nothing even under SIGKILL, which skips the
    whole exit (``tests/test_sigkill_harness.py``, ``tests/test_net_faults.py``).
    """
    atexit.register(gc.freeze)


def main() -> int:
    """The ``esa`` console script: :func:`one_blas_thread` and :func:`skip_exit_collection`,
    then the command line."""
    one_blas_thread()
    skip_exit_collection()
    from .cli import main as cli_main  # numpy loads here, after the variables are set

    return cli_main()
