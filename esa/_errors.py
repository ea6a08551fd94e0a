"""Errors of the roles layer.

:class:`ESAError` is the root the roles and the CLI catch. The lower layers cannot import it
(they import nothing of ours), so they have their own roots; their leaves are re-exported
from :mod:`esa` so callers have one place to import every error from.
"""

from __future__ import annotations


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
