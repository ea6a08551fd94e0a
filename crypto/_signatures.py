"""Ed25519 signatures (pyca/cryptography) over messages of the caller's choosing.

The parties sign their frames and count statements, the operator its commands and an
auditor its trap statements; what is signed (and under which context string) is the
caller's format. Here is only the primitive, with one rule added to it: a verify key of
small order is refused, because OpenSSL verifies under such a key and (R, S = 0) then
forges every message.
"""

from __future__ import annotations

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)

from ._keys import is_weak_verify_key

__all__ = ["is_valid_signature", "sign"]


def sign(key: Ed25519PrivateKey, message: bytes) -> bytes:
    """The 64-byte Ed25519 signature of ``message`` under ``key`` (deterministic, RFC 8032).

    Args:
        key: the signer's private key.
        message: the bytes to sign, context string included.

    Returns:
        The signature.
    """
    return key.sign(message)


def is_valid_signature(key: Ed25519PublicKey, message: bytes, signature: bytes) -> bool:
    """Whether ``signature`` is ``key``'s Ed25519 signature of ``message``.

    A verify key of small order (:func:`is_weak_verify_key`) never validates anything.

    Args:
        key: the signer's verify key.
        message: the bytes that were signed, context string included.
        signature: the signature to check (of any length: a wrong one is invalid).

    Returns:
        True only for a valid signature under a sound key.
    """
    if is_weak_verify_key(key.public_bytes_raw()):
        return False
    try:
        key.verify(signature, message)
    except InvalidSignature:
        return False
    return True
