"""Errors raised by the protocols layer.

``protocols/`` imports nothing else of ours (its layer is below ``esa``), so it has its own root.
"""

from __future__ import annotations


class ProtocolError(Exception):
    """Root of every error raised by :mod:`protocols`."""


class ParameterError(ProtocolError, ValueError):
    """A mechanism or bound was configured with parameters outside its valid range.

    The message quotes the bad value and the bound it violates.
    """


class BoundNotApplicable(ParameterError):
    """An amplification bound was asked for outside the range where its theorem holds."""


class NeedsPositiveDelta(BoundNotApplicable):
    """δ = 0 (pure DP) was asked of a protocol or bound whose guarantee is approximate DP.

    The message names the protocol or bound and says why it needs δ > 0. A subclass of
    :class:`BoundNotApplicable` (so a bound refusing δ = 0 is skipped like one out of its
    range) and so of :class:`ParameterError`.

    Attributes:
        why: the reason, without the name (``"its amplification bounds are approximate DP"``).
    """

    def __init__(self, message: str, why: str = "") -> None:
        super().__init__(message)
        self.why = why


class InvalidMessage(ProtocolError, ValueError):
    """Decoded message bytes do not form a valid message of the protocol."""
