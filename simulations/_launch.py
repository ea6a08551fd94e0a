"""The ``esa`` executable: settles how many threads BLAS starts, then runs the command line
(:func:`simulations.cli.main`).

numpy and scipy each ship an OpenBLAS that, when it loads, starts a thread per core which
spins before it sleeps: about 0.1 CPU-s per library, at every start of every command (a
quarter of the CPU of ``esa amplify`` at n = 10^6; docs/benchmarks.md). esa has no use for
them: its numerical work is element-wise or products of small matrices, and its parallelism
is its process pool, whose workers would each start their own. So, unless the environment
already says how many threads BLAS may use, the ``esa`` process and the workers it starts run
BLAS on one thread, as Dask's workers do by default. Export ``OPENBLAS_NUM_THREADS`` (or one
of :data:`BLAS_THREAD_VARIABLES`) to choose otherwise. Only the executable does this:
importing :mod:`simulations.cli` from Python changes no variable.
"""

from __future__ import annotations

import os

__all__ = ["BLAS_THREAD_VARIABLES", "main", "one_blas_thread"]

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


def main() -> int:
    """The ``esa`` console script: :func:`one_blas_thread`, then the command line."""
    one_blas_thread()
    from .cli import main as cli_main  # numpy loads here, after the variables are set

    return cli_main()
