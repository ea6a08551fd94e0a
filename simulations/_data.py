"""Synthetic users' data for simulations, by named distribution (esa's generator).

The generator lives in :mod:`esa` (``esa.synthetic_values``) so that ``esa.simulate`` and the
command line draw the same values for the same seed; an unknown distribution is a usage error
here, as every bad argument of a command is.
"""

from __future__ import annotations

from typing import Any

import numpy.typing as npt

import esa
from protocols import ShuffleProtocol

from ._common import UsageError

__all__ = ["DISTRIBUTIONS", "generate_values"]

DISTRIBUTIONS = esa.DISTRIBUTIONS


def generate_values(
    protocol: ShuffleProtocol, n: int, distribution: str, *, rng: esa.RNGLike
) -> npt.NDArray[Any]:
    """``n`` users' values of the kind ``protocol`` takes, drawn from ``distribution``
    (``rng``: a generator or a seed, :data:`protocols.RNGLike`)."""
    try:
        return esa.synthetic_values(protocol, n, distribution, rng=rng)
    except esa.DataError as exc:
        raise UsageError(str(exc)) from None
