"""TLS between parties and from clients: real handshakes over loopback sockets with trio.

Every test runs its server and client in one ``trio.run`` on 127.0.0.1, port 0, each bounded
by ``trio.fail_after``; the server task is cancelled when the test's block ends.
"""

from __future__ import annotations

import datetime as dt
import os
import ssl
import stat
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import trio
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from crypto import (
    CryptoParameterError,
    InvalidKey,
    TLSConfigError,
    check_certificate,
    client_ssl_context,
    issue_client_certificate,
    issue_party_certificate,
    load_certificate,
    load_private_key,
    make_deployment_ca,
    peer_common_name,
    save_certificate,
    save_private_key,
    server_ssl_context,
)

TIMEOUT = 10.0
HOST = "127.0.0.1"

Identity = tuple[Ed25519PrivateKey, x509.Certificate]


@dataclass(frozen=True)
class Deployment:
    ca: Identity
    server: Identity  # shuffler-2, reached at 127.0.0.1 and shuffler-2.test
    party: Identity  # shuffler-1, the upstream party (a client of shuffler-2)
    client: Identity  # a submitter

    @property
    def ca_cert(self) -> x509.Certificate:
        return self.ca[1]


def _deployment(name: str) -> Deployment:
    ca_key, ca_cert = make_deployment_ca(name)
    return Deployment(
        ca=(ca_key, ca_cert),
        server=issue_party_certificate(ca_key, ca_cert, "shuffler-2", [HOST, "shuffler-2.test"]),
        party=issue_party_certificate(ca_key, ca_cert, "shuffler-1", ["shuffler-1.test"]),
        client=issue_client_certificate(ca_key, ca_cert, "submitter"),
    )


@pytest.fixture(scope="module")
def dep() -> Deployment:
    return _deployment("test-deployment")


@pytest.fixture(scope="module")
def foreign() -> Deployment:
    return _deployment("other-deployment")


# ---------------------------------------------------------------------- helpers


@dataclass
class Server:
    port: int
    #: One entry per connection: ("ok", peer CN) or ("fail", the handshake's ssl error).
    outcomes: trio.MemoryReceiveChannel[tuple[str, object]]
    served: list[bytes] = field(default_factory=list)


@asynccontextmanager
async def tls_server(ctx: ssl.SSLContext) -> AsyncIterator[Server]:
    """An echo server on 127.0.0.1 speaking TLS with ``ctx``; each connection's outcome goes
    to ``Server.outcomes``. A failed handshake ends that connection only."""
    send, receive = trio.open_memory_channel[tuple[str, object]](100)
    async with trio.open_nursery() as nursery:
        tcp = await trio.open_tcp_listeners(0, host=HOST)
        server = Server(port=int(tcp[0].socket.getsockname()[1]), outcomes=receive)

        async def handler(stream: trio.SSLStream[trio.SocketStream]) -> None:
            try:
                async with stream:
                    await stream.do_handshake()
                    data = await stream.receive_some(1024)
                    server.served.append(bytes(data))
                    await stream.send_all(b"echo:" + data)
                    await send.send(("ok", peer_common_name(stream)))
            except trio.BrokenResourceError as exc:
                await send.send(("fail", exc.__cause__))

        listeners = [trio.SSLListener(t, ctx, https_compatible=False) for t in tcp]
        await nursery.start(trio.serve_listeners, handler, listeners)
        try:
            yield server
        finally:
            nursery.cancel_scope.cancel()


async def round_trip(
    port: int, ctx: ssl.SSLContext, *, hostname: str = HOST, data: bytes = b"hello"
) -> bytes:
    tcp = await trio.open_tcp_stream(HOST, port)
    stream = trio.SSLStream(tcp, ctx, server_hostname=hostname)
    async with stream:
        await stream.do_handshake()
        await stream.send_all(data)
        reply = b""
        while len(reply) < len(b"echo:") + len(data):
            chunk = await stream.receive_some(1024)
            if not chunk:
                break
            reply += chunk
        return reply


def run(main: Callable[[], Awaitable[None]]) -> None:
    async def bounded() -> None:
        with trio.fail_after(TIMEOUT):
            await main()

    trio.run(bounded)


def _server_ctx(dep: Deployment, *, require: bool = False) -> ssl.SSLContext:
    key, cert = dep.server
    return server_ssl_context(cert, key, dep.ca_cert, require_client_cert=require)


def _raw_context(
    protocol: ssl._SSLMethod, identity: Identity, trusted: x509.Certificate, tmp: Path
) -> ssl.SSLContext:
    """A context made without this module's checks (to present a bad certificate)."""
    key, cert = identity
    ctx = ssl.SSLContext(protocol)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    ctx.load_verify_locations(cadata=trusted.public_bytes(serialization.Encoding.PEM).decode())
    if protocol == ssl.PROTOCOL_TLS_CLIENT:
        ctx.check_hostname = False
    path = tmp / "raw-identity.pem"
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        + cert.public_bytes(serialization.Encoding.PEM)
    )
    ctx.load_cert_chain(path)
    return ctx


def _expired(dep: Deployment, *, client: bool) -> Identity:
    ca_key, ca_cert = dep.ca
    then = dt.datetime.now(dt.UTC) - dt.timedelta(days=30)
    if client:
        return issue_client_certificate(ca_key, ca_cert, "old-submitter", valid_days=1, now=then)
    return issue_party_certificate(ca_key, ca_cert, "shuffler-2", [HOST], valid_days=1, now=then)


# ---------------------------------------------------------------------- handshakes


def test_round_trip_with_certificates_from_one_ca(dep: Deployment) -> None:
    async def main() -> None:
        async with tls_server(_server_ctx(dep)) as server:
            reply = await round_trip(server.port, client_ssl_context(dep.ca_cert))
            assert reply == b"echo:hello"
            assert await server.outcomes.receive() == ("ok", None)

    run(main)


def test_round_trip_by_dns_name(dep: Deployment) -> None:
    async def main() -> None:
        async with tls_server(_server_ctx(dep)) as server:
            ctx = client_ssl_context(dep.ca_cert)
            assert await round_trip(server.port, ctx, hostname="shuffler-2.test") == b"echo:hello"

    run(main)


@pytest.mark.parametrize("who", ["party", "client"])
def test_mutual_tls_names_the_peer(dep: Deployment, who: str) -> None:
    key, cert = dep.party if who == "party" else dep.client

    async def main() -> None:
        async with tls_server(_server_ctx(dep, require=True)) as server:
            ctx = client_ssl_context(dep.ca_cert, cert=cert, key=key)
            assert (
                await round_trip(server.port, ctx, data=b"\x00\x01frame") == b"echo:\x00\x01frame"
            )
            want = "shuffler-1" if who == "party" else "submitter"
            assert await server.outcomes.receive() == ("ok", want)

    run(main)


def test_only_tls13_is_spoken(dep: Deployment) -> None:
    for ctx in (_server_ctx(dep), client_ssl_context(dep.ca_cert)):
        assert ctx.minimum_version is ssl.TLSVersion.TLSv1_3
        # The deployment CA is the only trust anchor: no system store.
        assert len(ctx.get_ca_certs()) == 1


def test_server_from_another_ca_is_refused(dep: Deployment, foreign: Deployment) -> None:
    async def main() -> None:
        async with tls_server(_server_ctx(foreign)) as server:
            with pytest.raises(trio.BrokenResourceError) as info:
                await round_trip(server.port, client_ssl_context(dep.ca_cert))
            assert isinstance(info.value.__cause__, ssl.SSLCertVerificationError)
            assert server.served == []

    run(main)


def test_client_from_another_ca_is_refused(dep: Deployment, foreign: Deployment) -> None:
    key, cert = foreign.party

    async def main() -> None:
        async with tls_server(_server_ctx(dep, require=True)) as server:
            # The foreign client trusts our CA, so only its own certificate is wrong.
            ctx = client_ssl_context(foreign.ca_cert, cert=cert, key=key)
            ctx.load_verify_locations(
                cadata=dep.ca_cert.public_bytes(serialization.Encoding.PEM).decode()
            )
            with pytest.raises(trio.BrokenResourceError):
                await round_trip(server.port, ctx)
            kind, error = await server.outcomes.receive()
            assert kind == "fail"
            assert isinstance(error, ssl.SSLCertVerificationError)
            assert server.served == []

    run(main)


def test_wrong_hostname_is_refused(dep: Deployment) -> None:
    async def main() -> None:
        async with tls_server(_server_ctx(dep)) as server:
            with pytest.raises(trio.BrokenResourceError) as info:
                await round_trip(server.port, client_ssl_context(dep.ca_cert), hostname="evil.test")
            assert isinstance(info.value.__cause__, ssl.SSLCertVerificationError)
            assert "Hostname mismatch" in str(info.value.__cause__)
            # A certificate of another party of the same deployment does not pass either.
            with pytest.raises(trio.BrokenResourceError):
                await round_trip(
                    server.port, client_ssl_context(dep.ca_cert), hostname="shuffler-1.test"
                )

    run(main)


def test_missing_client_certificate_is_refused_when_required(dep: Deployment) -> None:
    async def main() -> None:
        async with tls_server(_server_ctx(dep, require=True)) as server:
            # In TLS 1.3 the client's handshake ends before the server checks its (absent)
            # certificate: the refusal (an alert, or just the close) comes on the first read.
            # (or a reset: the server closes with the client's data unread)
            with pytest.raises(trio.BrokenResourceError):
                await round_trip(server.port, client_ssl_context(dep.ca_cert))
            kind, error = await server.outcomes.receive()
            assert kind == "fail"
            assert isinstance(error, ssl.SSLError)
            assert "PEER_DID_NOT_RETURN_A_CERTIFICATE" in str(error)
            assert server.served == []

    run(main)


def test_plaintext_client_fails_and_the_server_keeps_serving(dep: Deployment) -> None:
    async def main() -> None:
        async with tls_server(_server_ctx(dep)) as server:
            plain = await trio.open_tcp_stream(HOST, server.port)
            async with plain:
                await plain.send_all(len(b"hello").to_bytes(4, "big") + b"hello")
                received = b""
                try:
                    while chunk := await plain.receive_some(1024):
                        received += chunk
                except trio.BrokenResourceError:
                    pass  # a reset after the alert
            assert b"echo" not in received  # at most a TLS alert, then the connection closes
            kind, error = await server.outcomes.receive()
            assert kind == "fail"
            assert isinstance(error, ssl.SSLError)
            reply = await round_trip(server.port, client_ssl_context(dep.ca_cert))
            assert reply == b"echo:hello"
            assert server.served == [b"hello"]

    run(main)


def test_expired_server_certificate_is_refused(dep: Deployment, tmp_path: Path) -> None:
    raw = _raw_context(ssl.PROTOCOL_TLS_SERVER, _expired(dep, client=False), dep.ca_cert, tmp_path)

    async def main() -> None:
        async with tls_server(raw) as server:
            with pytest.raises(trio.BrokenResourceError) as info:
                await round_trip(server.port, client_ssl_context(dep.ca_cert))
            assert isinstance(info.value.__cause__, ssl.SSLCertVerificationError)
            assert "expired" in str(info.value.__cause__)

    run(main)


def test_expired_client_certificate_is_refused(dep: Deployment, tmp_path: Path) -> None:
    raw = _raw_context(ssl.PROTOCOL_TLS_CLIENT, _expired(dep, client=True), dep.ca_cert, tmp_path)

    async def main() -> None:
        async with tls_server(_server_ctx(dep, require=True)) as server:
            with pytest.raises(trio.BrokenResourceError):
                await round_trip(server.port, raw)
            kind, error = await server.outcomes.receive()
            assert kind == "fail"
            assert isinstance(error, ssl.SSLCertVerificationError)
            assert "expired" in str(error)

    run(main)


# ---------------------------------------------------------------------- contexts refuse


def test_contexts_refuse_expired_certificates(dep: Deployment) -> None:
    key, cert = _expired(dep, client=False)
    with pytest.raises(TLSConfigError, match="expired"):
        server_ssl_context(cert, key, dep.ca_cert, require_client_cert=False)
    key, cert = _expired(dep, client=True)
    with pytest.raises(TLSConfigError, match="expired"):
        client_ssl_context(dep.ca_cert, cert=cert, key=key)
    _, ca_cert = make_deployment_ca(
        "old", valid_days=1, now=dt.datetime.now(dt.UTC) - dt.timedelta(days=30)
    )
    with pytest.raises(TLSConfigError, match=r"CA certificate .* expired"):
        client_ssl_context(ca_cert)


def test_not_yet_valid_certificate_is_refused(dep: Deployment) -> None:
    ca_key, ca_cert = dep.ca
    later = dt.datetime.now(dt.UTC) + dt.timedelta(days=2)
    key, cert = issue_party_certificate(ca_key, ca_cert, "shuffler-2", [HOST], now=later)
    with pytest.raises(TLSConfigError, match="not valid before"):
        server_ssl_context(cert, key, ca_cert, require_client_cert=False)


def test_contexts_refuse_foreign_certificates(dep: Deployment, foreign: Deployment) -> None:
    key, cert = foreign.server
    with pytest.raises(TLSConfigError, match="not issued by the deployment CA"):
        server_ssl_context(cert, key, dep.ca_cert, require_client_cert=True)
    key, cert = foreign.client
    with pytest.raises(TLSConfigError, match="not issued by the deployment CA"):
        client_ssl_context(dep.ca_cert, cert=cert, key=key)
    with pytest.raises(TLSConfigError, match="not issued"):
        check_certificate(foreign.ca_cert, dep.ca_cert)


def test_contexts_refuse_a_key_of_another_certificate(dep: Deployment) -> None:
    with pytest.raises(TLSConfigError, match="not the key"):
        server_ssl_context(dep.server[1], dep.party[0], dep.ca_cert, require_client_cert=False)
    with pytest.raises(CryptoParameterError):
        client_ssl_context(dep.ca_cert, cert=dep.client[1])


def test_a_client_certificate_cannot_serve(dep: Deployment) -> None:
    key, cert = dep.client
    with pytest.raises(TLSConfigError, match="not valid as a TLS server"):
        server_ssl_context(cert, key, dep.ca_cert, require_client_cert=False)


def test_a_party_certificate_is_not_a_ca(dep: Deployment) -> None:
    with pytest.raises(TLSConfigError, match="not a CA"):
        check_certificate(dep.client[1], dep.server[1])
    with pytest.raises(TLSConfigError):
        client_ssl_context(dep.server[1])


def test_issuing_checks_its_arguments(dep: Deployment, foreign: Deployment) -> None:
    ca_key, ca_cert = dep.ca
    with pytest.raises(CryptoParameterError):
        issue_party_certificate(ca_key, ca_cert, "shuffler-1", [])
    with pytest.raises(CryptoParameterError):
        issue_party_certificate(ca_key, ca_cert, "shuffler-1", "localhost")  # a str is no list
    with pytest.raises(CryptoParameterError):
        issue_party_certificate(ca_key, ca_cert, "shuffler-1", ["bad host"])
    with pytest.raises(CryptoParameterError):
        issue_party_certificate(ca_key, ca_cert, "", [HOST])
    with pytest.raises(CryptoParameterError):
        issue_party_certificate(foreign.ca[0], ca_cert, "shuffler-1", [HOST])
    with pytest.raises(CryptoParameterError):
        issue_client_certificate(ca_key, ca_cert, "x", valid_days=0)
    with pytest.raises(CryptoParameterError):
        make_deployment_ca("  ")
    assert issubclass(TLSConfigError, ValueError)


def test_party_certificate_names_its_hosts(dep: Deployment) -> None:
    san = dep.server[1].extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert [str(ip) for ip in san.get_values_for_type(x509.IPAddress)] == [HOST]
    assert san.get_values_for_type(x509.DNSName) == ["shuffler-2.test"]


# ---------------------------------------------------------------------- files


def test_files_round_trip_and_private_keys_are_0600(dep: Deployment, tmp_path: Path) -> None:
    key, cert = dep.server
    save_private_key(tmp_path / "shuffler-2.tls.key", key)
    save_certificate(tmp_path / "shuffler-2.crt", cert)
    save_certificate(tmp_path / "ca.crt", dep.ca_cert)
    assert stat.S_IMODE((tmp_path / "shuffler-2.tls.key").stat().st_mode) == 0o600
    loaded_key = load_private_key(tmp_path / "shuffler-2.tls.key")
    loaded_cert = load_certificate(tmp_path / "shuffler-2.crt")
    assert loaded_cert == cert
    assert loaded_key.public_key().public_bytes_raw() == key.public_key().public_bytes_raw()
    ca = load_certificate(tmp_path / "ca.crt")
    server_ssl_context(loaded_cert, loaded_key, ca, require_client_cert=True)
    # Never overwritten.
    with pytest.raises(InvalidKey):
        save_private_key(tmp_path / "shuffler-2.tls.key", key)
    with pytest.raises(TLSConfigError):
        save_certificate(tmp_path / "ca.crt", dep.ca_cert)


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604])
def test_readable_private_key_file_is_refused(dep: Deployment, tmp_path: Path, mode: int) -> None:
    path = tmp_path / "party.tls.key"
    save_private_key(path, dep.party[0])
    os.chmod(path, mode)
    with pytest.raises(InvalidKey, match=f"{mode:04o}"):
        load_private_key(path)
    os.chmod(path, 0o400)
    load_private_key(path)


def test_bad_files_are_refused(tmp_path: Path) -> None:
    with pytest.raises(TLSConfigError, match="cannot read"):
        load_certificate(tmp_path / "missing.crt")
    (tmp_path / "junk.crt").write_text("not a certificate\n")
    with pytest.raises(TLSConfigError, match="not a PEM"):
        load_certificate(tmp_path / "junk.crt")
    with pytest.raises(InvalidKey):
        load_private_key(tmp_path / "missing.key")
    junk = tmp_path / "junk.key"
    junk.write_text("junk\n")
    junk.chmod(0o600)
    with pytest.raises(InvalidKey, match="not an unencrypted PEM"):
        load_private_key(junk)


def test_naive_times_are_refused(dep: Deployment) -> None:
    naive = dt.datetime(2030, 1, 1)
    with pytest.raises(CryptoParameterError, match="timezone-aware"):
        make_deployment_ca("d", now=naive)
    with pytest.raises(CryptoParameterError, match="timezone-aware"):
        check_certificate(dep.server[1], dep.ca_cert, now=naive)
