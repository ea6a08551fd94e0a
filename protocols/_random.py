"""What every randomized function takes as its ``rng``, and the one place it is coerced.

Every public function or method of this project that draws random numbers takes a
keyword-only ``rng`` of type :data:`RNGLike` (scientific-python SPEC 7) and turns it into a
:class:`numpy.random.Generator` once, on entry, with :func:`as_generator`:

* a :class:`numpy.random.Generator` is used as is, not copied: its state advances, so two
  calls with the same generator draw different numbers;
* an integer >= 0 or a :class:`numpy.random.SeedSequence` seeds a fresh generator,
  exactly ``numpy.random.default_rng(seed)``: the same seed gives the same draws;
* ``None`` seeds a fresh generator from OS entropy (``numpy.random.default_rng()``).

Anything else is refused with :class:`~protocols.ParameterError` quoting it: a ``bool`` (an
``int`` to Python, almost always a slip), a float or a string, a legacy
:class:`numpy.random.RandomState` or a bare :class:`numpy.random.BitGenerator` (wrap it:
``numpy.random.Generator(bit_generator)``), a sequence of integers (say
``numpy.random.SeedSequence(entropy)``).

These generators serve reproducible statistics (randomizers, synthetic data, simulated fakes
and noise). What a live deployment's privacy rests on — the shuffle permutation, key
material, and by default the fakes and the threshold noise — comes from the OS CSPRNG
instead, never from an ``rng`` argument; where a role's generator argument is optional,
``None`` keeps that meaning (the role's docstring says so).
"""

from __future__ import annotations

import numbers
from typing import TypeAlias

import numpy as np

from ._errors import ParameterError

__all__ = ["RNGLike", "as_generator"]

RNGLike: TypeAlias = int | np.random.SeedSequence | np.random.Generator | None
"""What an ``rng`` argument takes: a generator (used in place), a seed (an integer >= 0 or a
:class:`numpy.random.SeedSequence`: a fresh ``numpy.random.default_rng(seed)``), or ``None``
(fresh OS entropy). See :func:`as_generator`."""


def as_generator(rng: RNGLike) -> np.random.Generator:
    """The :class:`numpy.random.Generator` an ``rng`` argument stands for (SPEC 7).

    Args:
        rng: a Generator, returned as is (the caller's own: its state advances as it is
            drawn from); an integer >= 0 (a Python or numpy integer, not a ``bool``) or a
            :class:`numpy.random.SeedSequence`, which seeds a fresh generator exactly as
            ``numpy.random.default_rng(rng)`` does; or ``None``, a fresh generator seeded
            from OS entropy.

    Returns:
        The generator to draw from.

    Raises:
        ParameterError: any other value (quoted): a bool, a negative integer, a float, a
            string, a sequence, a legacy ``RandomState`` or a bare ``BitGenerator``.

    Example:
        >>> import numpy as np
        >>> from protocols import as_generator
        >>> gen = np.random.default_rng(3)
        >>> as_generator(gen) is gen
        True
        >>> int(as_generator(7).integers(1000)) == int(np.random.default_rng(7).integers(1000))
        True
    """
    if isinstance(rng, np.random.Generator):
        return rng
    if rng is None or isinstance(rng, np.random.SeedSequence):
        return np.random.default_rng(rng)
    if isinstance(rng, numbers.Integral) and not isinstance(rng, bool):
        if rng < 0:
            raise ParameterError(f"rng: a seed must be an integer >= 0, got {rng!r}")
        return np.random.default_rng(int(rng))
    hint = ""
    if isinstance(rng, np.random.BitGenerator):
        hint = "; wrap a bit generator: numpy.random.Generator(bit_generator)"
    elif isinstance(rng, np.random.RandomState):
        hint = "; a legacy RandomState is not taken: use numpy.random.default_rng(seed)"
    raise ParameterError(
        "rng must be a numpy.random.Generator, an integer seed >= 0, a "
        f"numpy.random.SeedSequence or None, got {rng!r} ({type(rng).__name__}){hint}"
    )
