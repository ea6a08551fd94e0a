"""Errors raised by the crypto layer.

``crypto/`` may import nothing else of ours (the layers of docs/design.md), so it has its own root,
:class:`CryptoError`; ``esa.ESAError`` is the root the roles and the CLI catch, and
``esa`` re-exports these leaves.
"""

from __future__ import annotations


class CryptoError(Exception):
    """Root of every error raised by :mod:`crypto`."""


class InvalidReport(CryptoError):
    """A report failed to parse, unpad, authenticate or decrypt.

    Deliberately opaque (like Fernet's ``InvalidToken``): the reason is never revealed, so
    a party cannot be used as an oracle on the bytes it rejects.
    """


class InvalidKey(CryptoError, ValueError):
    """Key material is malformed (wrong length, unreadable file, bad permissions)."""


class CryptoParameterError(CryptoError, ValueError):
    """A crypto function was called with a bad parameter (programmer misuse)."""


class TLSConfigError(CryptoError, ValueError):
    """TLS material is unusable: a certificate missing, malformed, expired or not yet
    valid, not issued by the deployment CA, not valid for its role, or not matching its key."""
