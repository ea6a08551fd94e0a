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


class InvalidMessage(ProtocolError, ValueError):
    """Decoded message bytes do not form a valid message of the protocol."""
