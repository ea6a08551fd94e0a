"""A deployment's TLS files: the CA, one certificate and key per party, client identities.

:func:`write_tls_material` is what ``esa keygen`` writes under ``DIR/tls`` (and what the
local simulation writes for its own processes); :func:`tls_client_context` loads the
context a client (``esa submit``, an operator's query) connects with. Every key is written
mode 0600 by :mod:`crypto` and refused on load when group or others can read it.

Layout of the directory::

    ca.crt                 the deployment CA (every party and every client)
    ca.key                 the CA's private key (the operator only; issues client certs)
    <party>.crt, .key      one pair per shuffler and the analyzer
    <client>.crt, .key     one pair per client certificate asked for (query access)
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Final

import crypto

from .._errors import ConfigError

__all__ = ["CA_CERT_FILE", "CA_KEY_FILE", "tls_client_context", "write_tls_material"]

CA_CERT_FILE: Final = "ca.crt"
CA_KEY_FILE: Final = "ca.key"


def write_tls_material(
    directory: Path,
    parties: Mapping[str, Sequence[str]],
    *,
    clients: Sequence[str] = (),
    deployment: str = "esa deployment",
) -> dict[str, dict[str, str]]:
    """Create ``directory`` (0700) with a fresh CA, a certificate per party and per client.

    Args:
        directory: where the files go (created if missing; none of the files may exist
            yet: nothing is overwritten).
        parties: party name -> the DNS names and IP addresses it is reached at.
        clients: names of client certificates to issue (query access, ``clientAuth``).
        deployment: the CA's common name.

    Returns:
        ``{name: {"cert": path, "key": path}}`` for the CA, every party and every client.

    Raises:
        OSError: the directory cannot be written.
        crypto.CryptoParameterError: a malformed name or host.
    """
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    directory.chmod(0o700)
    ca_key, ca_cert = crypto.make_deployment_ca(deployment)
    crypto.save_certificate(directory / CA_CERT_FILE, ca_cert)
    crypto.save_private_key(directory / CA_KEY_FILE, ca_key)
    out = {"ca": {"cert": str(directory / CA_CERT_FILE), "key": str(directory / CA_KEY_FILE)}}
    issued = [
        (name, crypto.issue_party_certificate(ca_key, ca_cert, name, list(hosts)))
        for name, hosts in parties.items()
    ] + [(name, crypto.issue_client_certificate(ca_key, ca_cert, name)) for name in clients]
    for name, (key, cert) in issued:
        crypto.save_certificate(directory / f"{name}.crt", cert)
        crypto.save_private_key(directory / f"{name}.key", key)
        out[name] = {"cert": str(directory / f"{name}.crt"), "key": str(directory / f"{name}.key")}
    return out


def tls_client_context(
    ca: Path, *, cert: Path | None = None, key: Path | None = None
) -> ssl.SSLContext:
    """The TLS context a client dials a party with: only the deployment CA ``ca`` is
    trusted, the host name is checked; ``cert`` and ``key`` (a client certificate) are
    what the query listener requires.

    Args:
        ca: the deployment CA's certificate file.
        cert: the client certificate file, if any.
        key: the client certificate's private key file (mode 0600), with ``cert``.

    Returns:
        The client context.

    Raises:
        ConfigError: a file is missing, unreadable, readable by others (the key), expired,
            or not from the CA; or only one of ``cert`` and ``key`` is given.
    """
    if (cert is None) != (key is None):
        raise ConfigError("give both a client certificate and its key, or neither")
    try:
        ca_cert = crypto.load_certificate(ca)
        if cert is None or key is None:
            return crypto.client_ssl_context(ca_cert)
        return crypto.client_ssl_context(
            ca_cert, cert=crypto.load_certificate(cert), key=crypto.load_private_key(key)
        )
    except (OSError, crypto.CryptoError) as exc:
        raise ConfigError(f"TLS: {exc}") from None
