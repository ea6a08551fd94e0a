"""Errors of the roles layer, and the integer check its parameters share.

:class:`ESAError` is the root the roles and the CLI catch. The lower layers cannot import it
(they import nothing of ours), so they have their own roots; their leaves are re-exported
from :mod:`esa` so callers have one place to import every error from.
"""

from __future__ import annotations

import numbers


class ESAError(Exception):
    """Root of every error raised by :mod:`esa`."""


class ConfigError(ESAError, ValueError):
    """A party or pipeline was configured with invalid settings."""


class ReplayedReport(ESAError):
    """A report whose ephemeral key was already seen in this epoch.

    The roles never raise it: a replay is untrusted input, dropped and counted
    (``HopCounters.replayed``) so the rest of the batch goes on. It is the type for a
    caller that handles one report and must refuse it."""


class ThresholdNotMet(ESAError):
    """A crowd has fewer reports than the shuffler's threshold and is held back.

    The roles never raise it: a held crowd is counted (``HopCounters.held``), and a
    simulated run's estimate is marked lost (``esa.check_held``)."""


def check_integer(value: object, name: str, lo: int, hi: int | None = None) -> int:
    """``value`` as an ``int`` in [lo, hi] (no upper bound if ``hi`` is None).

    Counts, hops and ids of the roles are integers: a ``bool``, a float (even 2.0) or a
    string is a caller's mistake, refused here rather than failing later in numpy or the
    crypto, or silently changing a comparison (a threshold of 2.5 acts as 3). numpy
    integers are accepted (sweeps build configs from arrays).

    Raises:
        ConfigError: quoting the value and the bound.
    """
    bound = f">= {lo}" if hi is None else f"in [{lo}, {hi}]"
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ConfigError(f"{name} must be an integer {bound}, got {value!r}")
    v = int(value)
    if v < lo or (hi is not None and v > hi):
        raise ConfigError(f"{name} must be an integer {bound}, got {v}")
    return v


def check_workers(workers: object) -> int | None:
    """``workers``: ``None`` (every core) or an integer >= 1 (see :func:`check_integer`)."""
    return None if workers is None else check_integer(workers, "workers", 1)
