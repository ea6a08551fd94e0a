"""TLS between parties and from clients: a deployment CA, party certificates, SSL contexts.

Each deployment has its own certificate authority (:func:`make_deployment_ca`), the only
trust anchor of every context made here: the system store is never loaded, so a
certificate from any other CA — a public one included — is refused. The CA issues

* a party certificate (:func:`issue_party_certificate`) per shuffler or analyzer, valid
  for both ends of a connection (``serverAuth`` and ``clientAuth``): a party listens for
  its upstream and connects to its downstream, and names in its SAN the DNS names and IP
  addresses it is reached at;
* client certificates (:func:`issue_client_certificate`), ``clientAuth`` only, for
  submitters and operators where a party requires one.

Every key is Ed25519, as the parties' signing keys are; OpenSSL 3 accepts Ed25519
certificates in TLS 1.3, the minimum version of every context here. Certificates and keys
are PEM files; private key files are created with mode 0600 and refused on load when group
or others can read them (the checks are those of the party key files of
:mod:`crypto._keys`).
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import secrets
import ssl
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Final, Literal, Protocol

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from ._errors import CryptoParameterError, InvalidKey, TLSConfigError
from ._keys import read_private_file, write_private_file

__all__ = [
    "check_certificate",
    "client_ssl_context",
    "issue_client_certificate",
    "issue_party_certificate",
    "load_certificate",
    "load_private_key",
    "make_deployment_ca",
    "peer_common_name",
    "save_certificate",
    "save_private_key",
    "server_ssl_context",
]

#: Default lifetime of a deployment CA and of the certificates it issues, in days.
CA_VALID_DAYS: Final = 3650
CERT_VALID_DAYS: Final = 365
#: Certificates start this long before their issue time, for clocks slightly behind.
_BACKDATE: Final = dt.timedelta(minutes=5)
#: A PEM certificate or Ed25519 key is well under 2 KiB; anything much larger is not one.
_MAX_PEM_FILE: Final = 1 << 16


# ---------------------------------------------------------------------- issuing


class _HasPeerCert(Protocol):
    """A TLS connection: :class:`ssl.SSLObject`, :class:`ssl.SSLSocket`, ``trio.SSLStream``."""

    def getpeercert(self, binary_form: Literal[True]) -> bytes | None: ...


def make_deployment_ca(
    deployment_id: str, *, valid_days: int = CA_VALID_DAYS, now: dt.datetime | None = None
) -> tuple[Ed25519PrivateKey, x509.Certificate]:
    """A fresh self-signed CA for one deployment.

    Args:
        deployment_id: Names the deployment; it becomes the CA's and every issued
            certificate's organization (O).
        valid_days: Lifetime in days.
        now: Issue time, timezone-aware (default the current time). The certificate is valid from
            five minutes before it.

    Returns:
        The CA's private key and certificate (``CA:TRUE, pathlen:0``: it signs party and
        client certificates only).

    Raises:
        CryptoParameterError: An empty ``deployment_id``, a ``valid_days`` below 1 or a naive
            ``now``.
    """
    _check_name("deployment_id", deployment_id)
    not_before, not_after = _validity(valid_days, now)
    key = Ed25519PrivateKey.generate()
    name = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, deployment_id),
            x509.NameAttribute(NameOID.COMMON_NAME, f"ESA deployment CA {deployment_id}"),
        ]
    )
    public = key.public_key()
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(public)
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=False,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
        .sign(key, algorithm=None)
    )
    return key, cert


def issue_party_certificate(
    ca_key: Ed25519PrivateKey,
    ca_cert: x509.Certificate,
    party_name: str,
    hosts: Sequence[str],
    *,
    valid_days: int = CERT_VALID_DAYS,
    now: dt.datetime | None = None,
) -> tuple[Ed25519PrivateKey, x509.Certificate]:
    """A fresh key and certificate for one party (shuffler or analyzer).

    Args:
        ca_key: The deployment CA's private key.
        ca_cert: The deployment CA's certificate.
        party_name: The party's name (e.g. ``shuffler-1``), the certificate's common name.
        hosts: Every DNS name and IP address the party is reached at; they make up the
            subjectAltName that clients check the host they dialled against.
        valid_days: Lifetime in days.
        now: Issue time, timezone-aware (default the current time).

    Returns:
        The party's new private key and its certificate, valid as a TLS server and client.

    Raises:
        CryptoParameterError: An empty name, no hosts or a malformed one, ``valid_days``
            below 1, a naive ``now``, or a ``ca_key`` that does not belong to ``ca_cert``.
    """
    if isinstance(hosts, str) or not hosts:
        raise CryptoParameterError(
            f"hosts must be a non-empty list of DNS names or IP addresses, got {hosts!r}"
        )
    san = x509.SubjectAlternativeName([_general_name(h) for h in hosts])
    return _issue(
        ca_key,
        ca_cert,
        party_name,
        san,
        [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH],
        valid_days,
        now,
    )


def issue_client_certificate(
    ca_key: Ed25519PrivateKey,
    ca_cert: x509.Certificate,
    client_name: str,
    *,
    valid_days: int = CERT_VALID_DAYS,
    now: dt.datetime | None = None,
) -> tuple[Ed25519PrivateKey, x509.Certificate]:
    """A fresh key and certificate for a client (a submitter or an operator).

    The certificate is valid for TLS client authentication only: it cannot serve.

    Args:
        ca_key: The deployment CA's private key.
        ca_cert: The deployment CA's certificate.
        client_name: The client's name, the certificate's common name.
        valid_days: Lifetime in days.
        now: Issue time, timezone-aware (default the current time).

    Returns:
        The client's new private key and its certificate.

    Raises:
        CryptoParameterError: An empty name, ``valid_days`` below 1, a naive ``now``, or a
            ``ca_key`` that does not belong to ``ca_cert``.
    """
    return _issue(
        ca_key, ca_cert, client_name, None, [ExtendedKeyUsageOID.CLIENT_AUTH], valid_days, now
    )


def _issue(
    ca_key: Ed25519PrivateKey,
    ca_cert: x509.Certificate,
    name: str,
    san: x509.SubjectAlternativeName | None,
    usages: list[x509.ObjectIdentifier],
    valid_days: int,
    now: dt.datetime | None,
) -> tuple[Ed25519PrivateKey, x509.Certificate]:
    _check_name("name", name)
    if not isinstance(ca_key, Ed25519PrivateKey) or not _same_key(
        ca_key.public_key(), ca_cert.public_key()
    ):
        raise CryptoParameterError("ca_key is not the private key of ca_cert")
    not_before, not_after = _validity(valid_days, now)
    key = Ed25519PrivateKey.generate()
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, name)]
    orgs = ca_cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)
    if orgs:
        attrs.insert(0, x509.NameAttribute(NameOID.ORGANIZATION_NAME, str(orgs[0].value)))
    ca_ski = ca_cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name(attrs))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski),
            critical=False,
        )
    )
    if san is not None:
        builder = builder.add_extension(san, critical=False)
    return key, builder.sign(ca_key, algorithm=None)


def _check_name(what: str, value: object) -> None:
    if not isinstance(value, str) or not value.strip():
        raise CryptoParameterError(f"{what} must be a non-empty string, got {value!r}")


def _validity(valid_days: int, now: dt.datetime | None) -> tuple[dt.datetime, dt.datetime]:
    if isinstance(valid_days, bool) or not isinstance(valid_days, int) or valid_days < 1:
        raise CryptoParameterError(f"valid_days must be an integer >= 1, got {valid_days!r}")
    start = _utc(now)
    return start - _BACKDATE, start + dt.timedelta(days=valid_days)


def _utc(now: dt.datetime | None) -> dt.datetime:
    if now is None:
        return dt.datetime.now(dt.UTC)
    if not isinstance(now, dt.datetime) or now.utcoffset() is None:
        raise CryptoParameterError(f"now must be a timezone-aware datetime, got {now!r}")
    return now


def _general_name(host: str) -> x509.GeneralName:
    if not isinstance(host, str) or not host.strip():
        raise CryptoParameterError(f"a host must be a non-empty string, got {host!r}")
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        pass
    try:
        host.encode("ascii")
    except UnicodeEncodeError:
        raise CryptoParameterError(
            f"host {host!r} is not ASCII: give an internationalized name as its A-label (xn--…)"
        ) from None
    if any(c.isspace() or c in "/:@" for c in host):
        raise CryptoParameterError(f"host {host!r} is neither a DNS name nor an IP address")
    return x509.DNSName(host)


def _same_key(a: object, b: object) -> bool:
    return (
        isinstance(a, Ed25519PublicKey)
        and isinstance(b, Ed25519PublicKey)
        and a.public_bytes_raw() == b.public_bytes_raw()
    )


# ---------------------------------------------------------------------- checking


def check_certificate(
    cert: x509.Certificate, ca: x509.Certificate, *, now: dt.datetime | None = None
) -> None:
    """Check that ``cert`` is within its validity period and signed by the CA ``ca``.

    ``cert`` may be ``ca`` itself, which is then checked as a self-signed CA.

    Args:
        cert: The certificate to check.
        ca: The deployment CA's certificate.
        now: The time to check against (UTC; default the current time).

    Raises:
        TLSConfigError: ``cert`` or ``ca`` is expired or not yet valid, ``ca`` is not a CA,
            or ``cert`` was not issued by ``ca`` (a certificate of another deployment).
        CryptoParameterError: ``now`` is not a timezone-aware datetime.
    """
    at = _utc(now)
    for which, c in (("CA certificate", ca), ("certificate", cert)):
        subject = c.subject.rfc4514_string()
        if at > c.not_valid_after_utc:
            raise TLSConfigError(
                f"{which} {subject} expired on {c.not_valid_after_utc:%Y-%m-%d %H:%M} UTC"
            )
        if at < c.not_valid_before_utc:
            raise TLSConfigError(
                f"{which} {subject} is not valid before {c.not_valid_before_utc:%Y-%m-%d %H:%M} UTC"
            )
    try:
        basic = ca.extensions.get_extension_for_class(x509.BasicConstraints).value
    except x509.ExtensionNotFound:
        basic = None
    if basic is None or not basic.ca:
        raise TLSConfigError(f"{ca.subject.rfc4514_string()} is not a CA certificate")
    try:
        ca.verify_directly_issued_by(ca)
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        raise TLSConfigError(
            f"certificate {cert.subject.rfc4514_string()} was not issued by the deployment CA "
            f"{ca.subject.rfc4514_string()}"
        ) from None


def _check_identity(
    cert: x509.Certificate,
    key: Ed25519PrivateKey,
    ca: x509.Certificate,
    usage: x509.ObjectIdentifier,
    role: str,
) -> None:
    check_certificate(cert, ca)
    if not isinstance(key, Ed25519PrivateKey) or not _same_key(key.public_key(), cert.public_key()):
        raise TLSConfigError(
            f"the private key given is not the key of {cert.subject.rfc4514_string()}"
        )
    try:
        usages = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    except x509.ExtensionNotFound:
        usages = x509.ExtendedKeyUsage([])
    if usage not in usages:
        raise TLSConfigError(
            f"certificate {cert.subject.rfc4514_string()} is not valid as a TLS {role}"
        )


# ---------------------------------------------------------------------- files


def save_certificate(path: str | os.PathLike[str], cert: x509.Certificate) -> None:
    """Write ``cert`` as PEM to a new file ``path`` (world-readable; never overwrites).

    Args:
        path: The file to create.
        cert: The certificate to write.

    Raises:
        TLSConfigError: ``path`` exists or cannot be written.
    """
    target = Path(path)
    try:
        with target.open("xb") as fh:
            fh.write(cert.public_bytes(serialization.Encoding.PEM))
    except OSError as exc:
        raise TLSConfigError(f"cannot write certificate {target}: {exc.strerror or exc}") from None


def load_certificate(path: str | os.PathLike[str]) -> x509.Certificate:
    """Read one PEM certificate.

    Args:
        path: The PEM file.

    Returns:
        The certificate.

    Raises:
        TLSConfigError: The file is missing, unreadable or not a PEM certificate.
    """
    target = Path(path)
    try:
        with target.open("rb") as fh:
            data = fh.read(_MAX_PEM_FILE + 1)
    except OSError as exc:
        raise TLSConfigError(f"cannot read certificate {target}: {exc.strerror or exc}") from None
    if len(data) > _MAX_PEM_FILE:
        raise TLSConfigError(f"{target} is over {_MAX_PEM_FILE} bytes: not a certificate")
    try:
        return x509.load_pem_x509_certificate(data)
    except ValueError:
        raise TLSConfigError(f"{target} is not a PEM certificate") from None


def save_private_key(path: str | os.PathLike[str], key: Ed25519PrivateKey) -> None:
    """Write ``key`` as unencrypted PKCS#8 PEM to a new file ``path`` with mode 0600.

    Args:
        path: The file to create.
        key: The Ed25519 private key to write.

    Raises:
        InvalidKey: ``path`` exists or cannot be created.
    """
    target = Path(path)
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    try:
        write_private_file(target, pem)
    except OSError as exc:
        raise InvalidKey(f"cannot write private key {target}: {exc.strerror or exc}") from None


def load_private_key(path: str | os.PathLike[str]) -> Ed25519PrivateKey:
    """Read an Ed25519 PEM private key, refusing a file others can read.

    Args:
        path: The PEM file (mode 0600 or narrower).

    Returns:
        The Ed25519 private key.

    Raises:
        InvalidKey: The file is missing, not a regular file, has a mode wider than 0600,
            or does not hold an unencrypted Ed25519 PEM key.
    """
    target = Path(path)
    data = read_private_file(target, _MAX_PEM_FILE)
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError):  # not PEM, encrypted, unsupported algorithm
        raise InvalidKey(f"{target} is not an unencrypted PEM private key") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise InvalidKey(f"{target} holds a {type(key).__name__}, not an Ed25519 key")
    return key


# ---------------------------------------------------------------------- contexts


def server_ssl_context(
    cert: x509.Certificate,
    key: Ed25519PrivateKey,
    ca: x509.Certificate,
    *,
    require_client_cert: bool,
) -> ssl.SSLContext:
    """A TLS 1.3 server context for a party's listener.

    Args:
        cert: The party's certificate (from :func:`issue_party_certificate`).
        key: Its private key.
        ca: The deployment CA's certificate, the only CA trusted for client certificates.
        require_client_cert: Refuse clients without a certificate from ``ca``. When False a
            client may still present one, and it must then chain to ``ca``.

    Returns:
        A context for :class:`ssl.SSLContext.wrap_socket`, ``trio.SSLStream`` or
        ``trio.SSLListener`` (``server_side``).

    Raises:
        TLSConfigError: ``cert`` or ``ca`` is expired or not yet valid, ``cert`` is not from
            ``ca`` or not valid for serving, or ``key`` is not its key.
    """
    _check_identity(cert, key, ca, ExtendedKeyUsageOID.SERVER_AUTH, "server")
    ctx = _base_context(ssl.PROTOCOL_TLS_SERVER, ca)
    ctx.verify_mode = ssl.CERT_REQUIRED if require_client_cert else ssl.CERT_OPTIONAL
    _load_identity(ctx, cert, key)
    return ctx


def client_ssl_context(
    ca: x509.Certificate,
    *,
    cert: x509.Certificate | None = None,
    key: Ed25519PrivateKey | None = None,
) -> ssl.SSLContext:
    """A TLS 1.3 client context that trusts the deployment CA only and checks host names.

    The server's certificate must chain to ``ca`` and name in its subjectAltName the host
    given as ``server_hostname`` when connecting.

    Args:
        ca: The deployment CA's certificate.
        cert: A certificate to present (a party's own, or a client certificate).
        key: Its private key; given exactly when ``cert`` is.

    Returns:
        A context for ``trio.open_ssl_over_tcp_stream`` or ``trio.SSLStream``.

    Raises:
        CryptoParameterError: Only one of ``cert`` and ``key`` given.
        TLSConfigError: ``ca`` or ``cert`` is expired or not yet valid, ``cert`` is not from
            ``ca`` or not valid for client authentication, or ``key`` is not its key.
    """
    if (cert is None) != (key is None):
        raise CryptoParameterError("give both cert and key, or neither")
    if cert is not None and key is not None:
        _check_identity(cert, key, ca, ExtendedKeyUsageOID.CLIENT_AUTH, "client")
    else:
        check_certificate(ca, ca)
    ctx = _base_context(ssl.PROTOCOL_TLS_CLIENT, ca)
    ctx.check_hostname = True
    ctx.verify_mode = ssl.CERT_REQUIRED
    if cert is not None and key is not None:
        _load_identity(ctx, cert, key)
    return ctx


def peer_common_name(connection: _HasPeerCert) -> str | None:
    """The common name of the verified peer certificate of a TLS connection, if any.

    With a context from this module that is the party or client name the deployment CA
    certified. For a ``trio.SSLStream``, pass the stream itself after its handshake (it
    forwards ``getpeercert``) or its ``ssl_object``.

    Returns:
        The peer certificate's CN, or None if the peer presented no (verified) certificate.

    Args:
        connection: An ``ssl.SSLSocket``, ``ssl.SSLObject`` or anything with ``getpeercert``.
    """
    der = connection.getpeercert(binary_form=True)
    if not der:
        return None
    names = x509.load_der_x509_certificate(der).subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    return str(names[0].value) if names else None


def _base_context(protocol: ssl._SSLMethod, ca: x509.Certificate) -> ssl.SSLContext:
    ctx = ssl.SSLContext(protocol)  # unlike create_default_context: no system store
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    ctx.verify_flags |= ssl.VERIFY_X509_STRICT
    ctx.load_verify_locations(cadata=ca.public_bytes(serialization.Encoding.PEM).decode())
    return ctx


def _load_identity(ctx: ssl.SSLContext, cert: x509.Certificate, key: Ed25519PrivateKey) -> None:
    # ssl loads a certificate chain from a file only. The key crosses it encrypted under a
    # one-time random password that never leaves this process, in a private directory
    # (mode 0700) removed at once.
    password = secrets.token_bytes(32)
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(password),
    ) + cert.public_bytes(serialization.Encoding.PEM)
    with tempfile.TemporaryDirectory(prefix="esa-tls-") as tmp:
        path = Path(tmp) / "identity.pem"
        write_private_file(path, pem)
        try:
            ctx.load_cert_chain(path, password=password)
        except ssl.SSLError as exc:
            raise TLSConfigError(f"OpenSSL refused the certificate and key: {exc}") from None
