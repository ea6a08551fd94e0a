"""Party configuration files for ``esa serve`` (TOML, read with stdlib :mod:`tomllib`), and
the protocol a config's ``[protocol]`` table names (:func:`load_protocol`).

One file per party. Relative paths are relative to the file's directory. Example (the first
of two shufflers)::

    role = "shuffler"            # or "analyzer"
    hop = 0                      # 0-based position in its chain; the analyzer's hop is m
    channels = 1                 # shuffler chains of the deployment (optional, default 1)
    channel = 0                  # shufflers only: which chain this one belongs to
    state_dir = "state/shuffler-1"
    crypto = "onion"             # the only format a deployed party takes
    manifest = "manifest.json"   # the operator-signed deployment manifest (esa keygen)

    [listen]
    host = "0.0.0.0"
    port = 7101

    [next]                       # shufflers only: the next hop
    host = "shuffler2.example.org"
    port = 7102

    [keys.epochs]                # key epoch -> key directory (``esa keygen``); one per rotation
    0 = "keys/epoch-0"
    1 = "keys/epoch-1"

    [operator]                   # who signed the manifest and may send CONTROL frames
    public_key = "9f0c…"         # 32-byte Ed25519 verify key, hex

    [auditor]                    # analyzer only, optional: who may commit to and open trap
    public_key = "51d7…"         # reports (TRAP_COMMIT / TRAP_OPEN); without it, no trap audit

    [epoch]                      # the first shuffler's batch rule: whichever comes first
    max_reports = 10000
    deadline_seconds = 60.0

    [shuffle]
    threshold = 0
    # threshold_epsilon = 1.0    # noisy threshold: release iff count + DLap(e^-eps) >= threshold
                                 # (threshold >= 1; the analyzer states the same value)
    fake_reports = 0
    workers = 1                  # processes peeling/wrapping an epoch (0: every core)

    [limits]
    max_frame_bytes = 4194304
    read_timeout_seconds = 10.0
    max_connections = 256
    max_connections_per_peer = 64  # per client IPv4 address or IPv6 /64
    chunk_reports = 2000
    evict_idle_above = 0.75      # past this share of max_connections, the longest idle goes

    [admission]                  # the first shuffler's intake of client reports (optional)
    max_pending_reports = 1000000    # stored but unprocessed, closed epochs included
    retry_after_seconds = 1.0        # the hint in a back-pressure REJECT
    reports_per_epoch_per_peer = 0   # per client address group and epoch; 0: no quota
    frames_per_second_per_peer = 0.0        # 0: no rate limit
    frames_per_second_per_connection = 0.0  # 0: no rate limit
    invalid_reports_per_second_per_peer = 100.0  # reports that do not open; 0: no bound
    peel_frames_per_peer = 8         # frames of one address group peeled at once
    require_client_token = false     # true: refuse SUBMITs without an operator's token
    # deployment_id = "example-1"    # tokens are bound to the manifest's deployment id; this
                                     # free string only for a party without a manifest

    [protocol]                   # every party runs the same configured protocol
    name = "hist_kr"
    epsilon = 1.0
    delta = 1e-6
    n = 100000
    domain = 16

    [tls]                        # required: the files `esa keygen` writes under DIR/tls
    ca = "keys/tls/ca.crt"       # the deployment CA, the only trust anchor
    cert = "keys/tls/shuffler-1.crt"
    key = "keys/tls/shuffler-1.key"   # mode 0600, refused if group/world-readable
    # insecure_plaintext = true  # instead of the three above: no TLS (esa serve
                                 # --local-simulation only; a deployed config refuses it)

    [query]                      # optional: the query listener (STATUS, RESULT, trap audit)
    host = "127.0.0.1"           # default; bind it to a private interface
    port = 7201                  # default: the [listen] port + 100 (0 if that is 0)

    [budget]                     # analyzer only, optional: refuse releases past this total
    epsilon_total = 4.0          # composed epsilon over every released epoch, at most
    delta_total = 1e-5           # the delta at which it is composed

A deployed config (the default of :func:`load_config`) refuses ``crypto = "ideal"``, a
``[simulation]`` table and ``[tls] insecure_plaintext = true``: those exist only for the
local simulation harness (``esa simulate --transport tcp``, ``esa serve
--local-simulation``), which opts in with ``simulation=True``. In every mode the ``[protocol]``
table names the protocol and its parameters, and the party builds it with
:func:`protocols.build_protocol`; no other key (no serialized object) is taken. With
``manifest`` the party refuses to start unless the manifest verifies under its
``[operator]`` key and states the config's protocol, crypto, channels and public keys, and
(where the manifest states the shufflers' crowd rule) a shuffler's ``[shuffle] threshold``
and ``threshold_epsilon``, the analyzer's ``threshold_epsilon``.
"""

from __future__ import annotations

import math
import ssl
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal

import crypto
from crypto import KeyDirectory, PartyPublic, is_weak_verify_key
from protocols import ProtocolSpec, ShuffleProtocol, build_protocol

from .._errors import ConfigError
from ._ledger import Budget, parse_budget
from ._manifest import Manifest, ManifestError, load_manifest
from ._statedir import INBOX_FILE
from ._wire import MAX_FRAME_SIZE, MAX_TOKEN_ID_SIZE

__all__ = [
    "QUERY_PORT_OFFSET",
    "Address",
    "AdmissionRule",
    "EpochRule",
    "Limits",
    "PartyConfig",
    "TlsSettings",
    "chain_route",
    "config_from_dict",
    "load_config",
    "load_protocol",
    "parse_address",
    "protocol_table",
]

_ROLES: Final = ("shuffler", "analyzer")
_TOP_KEYS: Final = {
    "role",
    "hop",
    "channel",
    "channels",
    "state_dir",
    "crypto",
    "listen",
    "next",
    "keys",
    "operator",
    "auditor",
    "epoch",
    "shuffle",
    "limits",
    "admission",
    "protocol",
    "simulation",
    "tls",
    "query",
    "manifest",
    "budget",
}

#: The query listener's default port: the batch port plus this (0 stays 0).
QUERY_PORT_OFFSET: Final = 100


@dataclass(frozen=True, slots=True)
class Address:
    """A TCP endpoint. ``port = 0`` asks the OS for a free port (written to ``state_dir``).

    ``tls``, when set, is the client context a connection to this endpoint is made with
    (:func:`crypto.client_ssl_context`: the deployment CA only, host name checked against
    ``host``); None dials plain TCP.
    """

    host: str
    port: int
    tls: ssl.SSLContext | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if not self.host:
            raise ConfigError("address host must not be empty")
        if isinstance(self.port, bool) or not isinstance(self.port, int):
            raise ConfigError(f"port must be an integer, got {self.port!r}")
        if not 0 <= self.port <= 65535:
            raise ConfigError(f"port must lie in [0, 65535], got {self.port}")

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


def parse_address(text: str) -> Address:
    """``HOST:PORT`` → :class:`Address` (``[v6]:port`` accepted).

    Args:
        text: ``HOST:PORT`` or ``[v6]:PORT``.

    Returns:
        The address (plain TCP).

    Raises:
        ConfigError: not of that form.
    """
    host, sep, port = text.rpartition(":")
    if not sep or not (port.isascii() and port.isdigit()):
        raise ConfigError(f"address must look like HOST:PORT, got {text!r}")
    return Address(host.strip("[]"), int(port))


@dataclass(frozen=True, slots=True)
class EpochRule:
    """Close the first shuffler's open batch at ``max_reports`` or ``deadline_seconds``
    after its first report, whichever comes first (or on an operator CLOSE_EPOCH).

    ``max_reports`` is a trigger, not a cap: frames committed while the close is under way
    join the epoch, so under load an epoch can hold a few group commits more."""

    max_reports: int = 10_000
    deadline_seconds: float = 60.0


@dataclass(frozen=True, slots=True)
class Limits:
    """Per-connection bounds: frame size (memory), read timeout, connection count.

    ``max_connections_per_peer`` caps the connections one client address holds (an IPv6
    client's whole /64), so that one host cannot take every one of ``max_connections``;
    a value above ``max_connections`` leaves only the global cap.
    """

    max_frame_bytes: int = 4 * 1024 * 1024
    read_timeout_seconds: float = 10.0
    max_connections: int = 256
    # A quarter of the default max_connections, and above the 50 connections `esa submit`
    # and the local simulation open from one address.
    max_connections_per_peer: int = 64
    chunk_reports: int = 2000
    #: Once this share of ``max_connections`` is taken, each newcomer closes the
    #: connection that has waited longest for its next frame (:class:`~esa.net.Admission`).
    evict_idle_above: float = 0.75


@dataclass(frozen=True, slots=True)
class AdmissionRule:
    """The first shuffler's admission of client reports (the ``[admission]`` table).

    Every bound is checked on a SUBMIT before anything costly is done for it; a refusal is a
    REJECT counted under its reason (STATUS ``rejected``). See :mod:`esa.net._intake`.

    Attributes:
        max_pending_reports: reports stored but not yet processed — the open ones and those
            of closed epochs waiting to be processed — beyond which a SUBMIT is refused
            ``retry_later`` (back-pressure).
        retry_after_seconds: the wait a ``retry_later`` REJECT asks for.
        reports_per_epoch_per_peer: reports one client address group (an IPv4 address, an
            IPv6 /64) may have checked per epoch, valid or not; 0: no quota. A client that
            shows a token is held to its token's quota instead.
        frames_per_second_per_peer: SUBMIT frames per second one address group may send
            (a token bucket holding one second's worth); 0: no limit.
        frames_per_second_per_connection: the same for one connection; 0: no limit.
        invalid_reports_per_second_per_peer: reports that do not open (junk) one address
            group may have peeled per second, on average (a token bucket holding one
            second's worth that junk may overdraw): while the group is in debt its SUBMITs
            are refused ``retry_later`` unparsed. Honest clients send no junk, so they never
            meet it; 0: no bound.
        peel_frames_per_peer: frames of one address group peeled at once (one once it
            has sent junk lately): what clients behind one address share, and at most how
            many frames of a flood are peeled before the first is known to be junk.
        require_client_token: refuse a SUBMIT without a valid operator-signed token
            (``unauthenticated``); needs ``[operator] public_key`` and ``deployment_id``.
        deployment_id: the deployment a token must name: the manifest's deployment id
            (hex) when the party has a manifest, else the free ``[admission]
            deployment_id``; empty: tokens are refused.
    """

    max_pending_reports: int = 1_000_000
    retry_after_seconds: float = 1.0
    reports_per_epoch_per_peer: int = 0
    frames_per_second_per_peer: float = 0.0
    frames_per_second_per_connection: float = 0.0
    invalid_reports_per_second_per_peer: float = 100.0
    peel_frames_per_peer: int = 8
    require_client_token: bool = False
    deployment_id: str = ""


@dataclass(frozen=True, slots=True)
class TlsSettings:
    """A party's TLS material (the ``[tls]`` table), or the explicit plaintext mode.

    With TLS the party listens with its certificate on the batch port (a client
    certificate is optional there: users have none) and on the query port (a client
    certificate from the deployment CA is required), and connects to its next hop
    presenting its certificate. ``insecure_plaintext`` switches TLS off; it exists for the
    local test harness only (a deployed config refuses it, :func:`config_from_dict`).
    """

    ca: Path | None = None
    cert: Path | None = None
    key: Path | None = None
    insecure_plaintext: bool = False

    def __post_init__(self) -> None:
        files = (self.ca, self.cert, self.key)
        if self.insecure_plaintext and any(f is not None for f in files):
            raise ConfigError("[tls] insecure_plaintext = true takes no ca, cert or key")
        if not self.insecure_plaintext and any(f is None for f in files):
            raise ConfigError(
                "[tls] needs ca, cert and key (written by `esa keygen` under DIR/tls), or "
                "insecure_plaintext = true (local test harness only)"
            )

    def contexts(self) -> tuple[ssl.SSLContext, ssl.SSLContext, ssl.SSLContext] | None:
        """The party's three contexts — batch listener, query listener, next hop — built
        once at start-up; None in plaintext mode.

        Returns:
            The ``(batch listener, query listener, next hop)`` contexts, or None.

        Raises:
            ConfigError: a file is missing, unreadable, readable by others (the key),
                expired, or not from the CA.
        """
        if self.insecure_plaintext:
            return None
        assert self.ca is not None
        assert self.cert is not None
        assert self.key is not None
        try:
            ca = crypto.load_certificate(self.ca)
            cert = crypto.load_certificate(self.cert)
            key = crypto.load_private_key(self.key)
            batch = crypto.server_ssl_context(cert, key, ca, require_client_cert=False)
            query = crypto.server_ssl_context(cert, key, ca, require_client_cert=True)
            nxt = crypto.client_ssl_context(ca, cert=cert, key=key)
        except (OSError, crypto.CryptoError) as exc:
            raise ConfigError(f"[tls]: {exc}") from None
        return batch, query, nxt


@dataclass(frozen=True, slots=True)
class PartyConfig:
    """A validated party configuration (see the module docstring for the file format)."""

    role: Literal["shuffler", "analyzer"]
    hop: int
    state_dir: Path
    listen: Address
    key_epochs: Mapping[int, Path]
    protocol: Mapping[str, Any]
    crypto: Literal["onion", "ideal"] = "onion"
    next: Address | None = None
    operator_public_key: bytes | None = None
    #: The analyzer's ``[auditor]`` key: the only signer of trap commitments and openings.
    auditor_public_key: bytes | None = None
    epoch: EpochRule = field(default_factory=EpochRule)
    threshold: int = 0
    #: ``[shuffle] threshold_epsilon``: ε_t of a noisy threshold (None: the plain one). On a
    #: shuffler it draws the noise (OS CSPRNG); on the analyzer it declares the shufflers'
    #: ε_t, which its privacy statement then adds (:mod:`esa._threshold`).
    threshold_epsilon: float | None = None
    fake_reports: int = 0
    workers: int | None = 1
    limits: Limits = field(default_factory=Limits)
    admission: AdmissionRule = field(default_factory=AdmissionRule)
    simulation: Mapping[str, Any] = field(default_factory=dict)
    channels: int = 1
    channel: int = 0
    tls: TlsSettings = field(default_factory=lambda: TlsSettings(insecure_plaintext=True))
    #: The query listener (STATUS, RESULT, trap audit); default 127.0.0.1, batch port + 100.
    query: Address | None = None
    #: The verified deployment manifest the config names (None: it names none).
    manifest: Manifest | None = None
    #: The analyzer's ``[budget]`` (:mod:`esa.net._ledger`); None: releases are not bounded.
    budget: Budget | None = None

    @property
    def deployment_id(self) -> bytes:
        """The deployment id CONTROL frames must carry (all zero without a manifest)."""
        return self.manifest.deployment_bytes if self.manifest is not None else bytes(16)

    @property
    def query_listen(self) -> Address:
        """Where the query listener binds (``[query]``, or its default)."""
        if self.query is not None:
            return self.query
        port = self.listen.port + QUERY_PORT_OFFSET if self.listen.port else 0
        return Address("127.0.0.1", port if port <= 65535 else 0)

    @property
    def query_port_file(self) -> Path:
        """Where the service writes the query listener's port once it is ready."""
        return self.state_dir / "query_port"

    @property
    def inbox_path(self) -> Path:
        return self.state_dir / INBOX_FILE

    @property
    def port_file(self) -> Path:
        """Where the service writes the port it actually listens on, once it is ready."""
        return self.state_dir / "port"


_DEFAULTS: Final = Limits()


def chain_route(keys: KeyDirectory, *, channels: int, channel: int) -> list[PartyPublic]:
    """The public keys of chain ``channel`` in report order: its m shufflers, then the analyzer.

    A deployment of C chains of m shufflers each (RSum_RM: one chain per precision, all
    ending at one analyzer) uses one key directory of C·m shufflers (``esa keygen
    --shufflers m --channels C``): hop i of chain c is ``shuffler-{c·m + i + 1}``, so every
    chain's shufflers have their own keys and a single chain keeps the names
    ``shuffler-1 … shuffler-m``.

    Args:
        keys: the deployment's key directory.
        channels: the number C of chains, at least 1.
        channel: the chain, in [0, channels).

    Returns:
        The m shufflers' public keys of chain ``channel``, then the analyzer's.

    Raises:
        ConfigError: the directory's shuffler count is not a multiple of ``channels``, or
            ``channel`` is outside [0, channels).
    """
    if isinstance(channels, bool) or not isinstance(channels, int) or channels < 1:
        raise ConfigError(f"channels must be an integer >= 1, got {channels!r}")
    if not 0 <= channel < channels:
        raise ConfigError(f"channel must lie in [0, {channels}), got {channel!r}")
    total = keys.shufflers
    if total % channels:
        raise ConfigError(
            f"{keys.path} holds {total} shufflers, not a multiple of channels={channels}"
        )
    m = total // channels
    route = keys.route()
    return [*route[channel * m : (channel + 1) * m], route[-1]]


def _table(doc: Mapping[str, Any], name: str, allowed: set[str]) -> dict[str, Any]:
    value = doc.get(name, {})
    if not isinstance(value, dict):
        raise ConfigError(f"[{name}] must be a table, got {type(value).__name__}")
    unknown = set(value) - allowed
    if unknown:
        raise ConfigError(f"[{name}]: unknown keys {sorted(unknown)}; allowed {sorted(allowed)}")
    return value


def _int(value: Any, name: str, lo: int, hi: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < lo:
        raise ConfigError(f"{name} must be an integer >= {lo}, got {value!r}")
    if hi is not None and value > hi:
        raise ConfigError(f"{name} must be <= {hi}, got {value!r}")
    return value


def _pos_float(value: Any, name: str) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not 0 < value < math.inf  # inf would switch the limit off
    ):
        raise ConfigError(f"{name} must be a finite number > 0, got {value!r}")
    return float(value)


def _fraction(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 1:
        raise ConfigError(f"{name} must be a number in (0, 1], got {value!r}")
    return float(value)


def _rate(value: Any, name: str) -> float:
    """A rate limit: 0 (none) or a finite number > 0."""
    if value == 0 and not isinstance(value, bool):
        return 0.0
    return _pos_float(value, name)


_ADMISSION_DEFAULTS: Final = AdmissionRule()


def _admission(
    doc: Mapping[str, Any],
    *,
    role: str,
    hop: int,
    operator_key: bytes | None,
    manifest: Manifest | None,
) -> AdmissionRule:
    """The ``[admission]`` table: the first shuffler's only (it alone takes client reports).

    With a manifest, tokens are bound to the manifest's deployment id (hex): one deployment
    id for CONTROL frames and tokens alike. ``deployment_id`` may then only repeat it; the
    free string is for parties without a manifest.
    """
    d = _ADMISSION_DEFAULTS
    table = _table(
        doc,
        "admission",
        {
            "max_pending_reports",
            "retry_after_seconds",
            "reports_per_epoch_per_peer",
            "frames_per_second_per_peer",
            "frames_per_second_per_connection",
            "invalid_reports_per_second_per_peer",
            "peel_frames_per_peer",
            "require_client_token",
            "deployment_id",
        },
    )
    if table and (role != "shuffler" or hop != 0):
        raise ConfigError("[admission] is the first shuffler's: only it takes client reports")
    require = table.get("require_client_token", d.require_client_token)
    if not isinstance(require, bool):
        raise ConfigError(
            f"[admission] require_client_token must be true or false, got {require!r}"
        )
    deployment = table.get("deployment_id", d.deployment_id)
    if not isinstance(deployment, str) or len(deployment.encode()) > MAX_TOKEN_ID_SIZE:
        raise ConfigError(
            f"[admission] deployment_id must be a string of at most {MAX_TOKEN_ID_SIZE} bytes, "
            f"got {deployment!r:.80}"
        )
    if manifest is not None:
        if deployment and deployment != manifest.deployment_id:
            raise ConfigError(
                f"[admission] deployment_id = {deployment!r:.80} is not the manifest's "
                f"deployment id {manifest.deployment_id}: tokens are bound to the manifest's "
                "id; drop deployment_id (or give that id)"
            )
        deployment = manifest.deployment_id
    if require and (operator_key is None or not deployment):
        raise ConfigError(
            "[admission] require_client_token = true needs [operator] public_key (the token "
            "signer) and a deployment_id (what tokens are bound to)"
        )
    return AdmissionRule(
        max_pending_reports=_int(
            table.get("max_pending_reports", d.max_pending_reports),
            "[admission] max_pending_reports",
            1,
        ),
        retry_after_seconds=_pos_float(
            table.get("retry_after_seconds", d.retry_after_seconds),
            "[admission] retry_after_seconds",
        ),
        reports_per_epoch_per_peer=_int(
            table.get("reports_per_epoch_per_peer", d.reports_per_epoch_per_peer),
            "[admission] reports_per_epoch_per_peer",
            0,
        ),
        frames_per_second_per_peer=_rate(
            table.get("frames_per_second_per_peer", d.frames_per_second_per_peer),
            "[admission] frames_per_second_per_peer",
        ),
        frames_per_second_per_connection=_rate(
            table.get("frames_per_second_per_connection", d.frames_per_second_per_connection),
            "[admission] frames_per_second_per_connection",
        ),
        invalid_reports_per_second_per_peer=_rate(
            table.get("invalid_reports_per_second_per_peer", d.invalid_reports_per_second_per_peer),
            "[admission] invalid_reports_per_second_per_peer",
        ),
        peel_frames_per_peer=_int(
            table.get("peel_frames_per_peer", d.peel_frames_per_peer),
            "[admission] peel_frames_per_peer",
            1,
        ),
        require_client_token=require,
        deployment_id=deployment,
    )


def _address(doc: Mapping[str, Any], name: str) -> Address:
    table = _table(doc, name, {"host", "port"})
    if "host" not in table or "port" not in table:
        raise ConfigError(f"[{name}] needs host and port")
    if not isinstance(table["host"], str):
        raise ConfigError(f"[{name}] host must be a string, got {table['host']!r}")
    return Address(table["host"], _int(table["port"], f"[{name}] port", 0, 65535))


def _public_key(doc: Mapping[str, Any], name: str) -> bytes | None:
    """The Ed25519 verify key of an optional ``[name]`` table (``public_key``, hex)."""
    table = _table(doc, name, {"public_key"})
    if "public_key" not in table:
        return None
    try:
        key = bytes.fromhex(str(table["public_key"]))
    except ValueError:
        key = b""
    if len(key) != 32:
        raise ConfigError(f"[{name}] public_key must be 64 hex digits, got {table['public_key']!r}")
    if is_weak_verify_key(key):
        # OpenSSL accepts small-order keys, under which anyone can forge (crypto._keys).
        raise ConfigError(
            f"[{name}] public_key {key.hex()} is not a valid Ed25519 key (small order, "
            "non-canonical or off the prime-order subgroup): anyone could sign under it"
        )
    return key


def config_from_dict(
    doc: Mapping[str, Any], *, base: Path, simulation: bool = False
) -> PartyConfig:
    """Validate a parsed TOML document; relative paths resolve against ``base``.

    Args:
        doc: the parsed TOML document.
        base: the directory relative paths resolve against.
        simulation: a local simulation's party (``esa simulate --transport tcp``), which
            alone may take plaintext reports (``crypto = "ideal"``), seeded fakes
            (``[simulation]``) and no TLS (``[tls] insecure_plaintext = true``).

    Returns:
        The validated configuration (with its verified manifest, if it names one).

    Raises:
        ConfigError: a value outside its range, a simulation-only setting in a deployed
            config, or a manifest that does not verify or disagrees with the config
            (:class:`~esa.net.ManifestError`).
    """
    unknown = set(doc) - _TOP_KEYS
    if unknown:
        raise ConfigError(f"unknown top-level keys {sorted(unknown)}; allowed {sorted(_TOP_KEYS)}")
    if not simulation:
        _refuse_simulation_settings(doc)
    role = doc.get("role")
    if role not in _ROLES:
        raise ConfigError(f"role must be one of {list(_ROLES)}, got {role!r}")
    hop = _int(doc.get("hop"), "hop", 0, 254)
    channels = _int(doc.get("channels", 1), "channels", 1, 255)
    if role == "analyzer" and "channel" in doc:
        raise ConfigError("the analyzer ends every chain: it takes no channel (give channels)")
    channel = _int(doc.get("channel", 0), "channel", 0, channels - 1)
    crypto_mode = doc.get("crypto", "onion")
    if crypto_mode not in ("onion", "ideal"):
        raise ConfigError(f"crypto must be 'onion' or 'ideal', got {crypto_mode!r}")
    if not isinstance(doc.get("state_dir"), str):
        raise ConfigError(f"state_dir must be a path string, got {doc.get('state_dir')!r}")

    keys = _table(doc, "keys", {"epochs"})
    epochs_raw = keys.get("epochs")
    if not isinstance(epochs_raw, dict) or not epochs_raw:
        raise ConfigError("[keys.epochs] must map at least one key epoch to a key directory")
    key_epochs: dict[int, Path] = {}
    for k, v in epochs_raw.items():
        if not (str(k).isascii() and str(k).isdigit()) or int(k) >= 2**32:
            raise ConfigError(f"key epoch must be an integer in [0, 2**32), got {k!r}")
        if not isinstance(v, str):
            raise ConfigError(f"key directory of key epoch {k} must be a path, got {v!r}")
        key_epochs[int(k)] = base / v

    nxt = None
    if role == "shuffler":
        if "next" not in doc:
            raise ConfigError("a shuffler needs [next] (host, port of the next hop)")
        nxt = _address(doc, "next")
    elif "next" in doc:
        raise ConfigError("the analyzer is the last hop: it takes no [next]")

    op_key = _public_key(doc, "operator")
    if role == "shuffler" and "auditor" in doc:
        # Traps are opened where they must arrive: a shuffler's [auditor] would be ignored.
        raise ConfigError("[auditor] is the analyzer's: trap reports are opened there")
    auditor_key = _public_key(doc, "auditor")
    if role == "shuffler" and "budget" in doc:
        raise ConfigError("[budget] is the analyzer's: it is the analyzer that releases epochs")
    budget = parse_budget(doc["budget"]) if "budget" in doc else None

    ep = _table(doc, "epoch", {"max_reports", "deadline_seconds"})
    rule = EpochRule(
        max_reports=_int(ep.get("max_reports", 10_000), "[epoch] max_reports", 1),
        deadline_seconds=_pos_float(ep.get("deadline_seconds", 60.0), "[epoch] deadline_seconds"),
    )
    sh = _table(doc, "shuffle", {"threshold", "threshold_epsilon", "fake_reports", "workers"})
    workers = _int(sh.get("workers", 1), "[shuffle] workers", 0)
    threshold = _int(sh.get("threshold", 0), "[shuffle] threshold", 0)
    threshold_epsilon = None
    if "threshold_epsilon" in sh:
        threshold_epsilon = _pos_float(sh["threshold_epsilon"], "[shuffle] threshold_epsilon")
        if role == "shuffler" and threshold < 1:
            raise ConfigError("[shuffle] threshold_epsilon needs [shuffle] threshold >= 1")
    lim = _table(
        doc,
        "limits",
        {
            "max_frame_bytes",
            "read_timeout_seconds",
            "max_connections",
            "max_connections_per_peer",
            "chunk_reports",
            "evict_idle_above",
        },
    )
    limits = Limits(
        max_frame_bytes=_int(
            lim.get("max_frame_bytes", _DEFAULTS.max_frame_bytes),
            "[limits] max_frame_bytes",
            64,
            MAX_FRAME_SIZE,
        ),
        read_timeout_seconds=_pos_float(
            lim.get("read_timeout_seconds", _DEFAULTS.read_timeout_seconds),
            "[limits] read_timeout_seconds",
        ),
        max_connections=_int(
            lim.get("max_connections", _DEFAULTS.max_connections), "[limits] max_connections", 1
        ),
        max_connections_per_peer=_int(
            lim.get("max_connections_per_peer", _DEFAULTS.max_connections_per_peer),
            "[limits] max_connections_per_peer",
            1,
        ),
        chunk_reports=_int(
            lim.get("chunk_reports", _DEFAULTS.chunk_reports), "[limits] chunk_reports", 1
        ),
        evict_idle_above=_fraction(
            lim.get("evict_idle_above", _DEFAULTS.evict_idle_above), "[limits] evict_idle_above"
        ),
    )
    proto = doc.get("protocol")
    if not isinstance(proto, dict):
        raise ConfigError("[protocol] must give the protocol's name and parameters")
    # In every mode: declarative parameters only (an unknown key such as a serialized
    # object's file is refused, simulations included).
    protocol_table(proto)
    manifest = _manifest_for(doc, base, op_key, proto, crypto_mode, channels, key_epochs)
    if manifest is not None:
        _check_crowd_rule(manifest, role, threshold, threshold_epsilon)
    admission = _admission(doc, role=role, hop=hop, operator_key=op_key, manifest=manifest)
    sim = doc.get("simulation", {})
    if not isinstance(sim, dict):
        raise ConfigError("[simulation] must be a table")
    listen = _address(doc, "listen")
    query = None
    if "query" in doc:
        qt = _table(doc, "query", {"host", "port"})
        query = _address({"query": {"host": "127.0.0.1", **qt}}, "query")
        if query.port and query.port == listen.port:
            raise ConfigError(
                f"[query] port must differ from the [listen] port, both are {listen.port}"
            )
    return PartyConfig(
        role=role,
        hop=hop,
        state_dir=base / doc["state_dir"],
        listen=listen,
        key_epochs=key_epochs,
        protocol=dict(proto),
        crypto=crypto_mode,
        next=nxt,
        operator_public_key=op_key,
        auditor_public_key=auditor_key,
        epoch=rule,
        threshold=threshold,
        threshold_epsilon=threshold_epsilon,
        fake_reports=_int(sh.get("fake_reports", 0), "[shuffle] fake_reports", 0),
        workers=workers or None,
        limits=limits,
        admission=admission,
        simulation=dict(sim),
        channels=channels,
        channel=channel,
        tls=_tls(doc, base),
        query=query,
        manifest=manifest,
        budget=budget,
    )


def _refuse_simulation_settings(doc: Mapping[str, Any]) -> None:
    """A deployed config takes no plaintext reports, seeded fakes or plaintext transport."""
    if doc.get("crypto", "onion") == "ideal":
        raise ConfigError(
            'crypto = "ideal" sends users\' values in plaintext: only a local simulation '
            'takes it; a deployed party uses crypto = "onion"'
        )
    if "simulation" in doc:
        raise ConfigError(
            "[simulation] (seeded fakes) is for local simulations only; remove it from a "
            "deployed party's config"
        )
    tls = doc.get("tls")
    if isinstance(tls, Mapping) and tls.get("insecure_plaintext") is True:
        raise ConfigError(
            "[tls] insecure_plaintext = true sends reports, batches and results without TLS: "
            "only a local simulation takes it (esa serve --local-simulation); a deployed party "
            "gives [tls] ca, cert and key (esa keygen writes them under DIR/tls)"
        )


def _manifest_for(
    doc: Mapping[str, Any],
    base: Path,
    operator: bytes | None,
    proto: Mapping[str, Any],
    crypto_mode: str,
    channels: int,
    key_epochs: Mapping[int, Path],
) -> Manifest | None:
    """The config's manifest, verified under its [operator] key and checked against the
    config: protocol, crypto, channels, and the public keys of its key epoch."""
    if "manifest" not in doc:
        return None
    path = doc["manifest"]
    if not isinstance(path, str):
        raise ConfigError(f"manifest must be a path string, got {path!r}")
    if operator is None:
        raise ConfigError("a manifest is verified with the [operator] public_key: give it")
    manifest = load_manifest(base / path, operator)
    for what, mine, signed in (
        ("[protocol]", protocol_table(proto), dict(manifest.protocol)),
        ("crypto", crypto_mode, manifest.crypto),
        ("channels", channels, manifest.channels),
    ):
        if mine != signed:
            raise ManifestError(
                f"the config's {what} is {mine!r}, but the signed manifest says {signed!r}"
            )
    ke = manifest.key_epoch
    if ke not in key_epochs:
        raise ManifestError(f"the manifest is for key epoch {ke}, which [keys.epochs] lacks")
    try:
        keys = KeyDirectory.load(key_epochs[ke])
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read the keys of key epoch {ke}: {exc}") from None
    manifest.check_route(ke, keys)
    return manifest


def _check_crowd_rule(
    manifest: Manifest, role: str, threshold: int, threshold_epsilon: float | None
) -> None:
    """A party configured with another crowd rule than the signed manifest states refuses
    to start: a shuffler's threshold and ε_t, the analyzer's ε_t (the one it states the
    run's privacy with, and checks the shufflers' signed statements against)."""
    if manifest.shuffle is None:
        return
    mine: list[tuple[str, Any, Any]] = [
        ("threshold_epsilon", threshold_epsilon, manifest.threshold_epsilon)
    ]
    if role == "shuffler":
        mine.insert(0, ("threshold", threshold, manifest.threshold))
    for what, value, signed in mine:
        if value != signed:
            raise ManifestError(
                f"the config's [shuffle] {what} is {value!r}, but the signed manifest says "
                f"{signed!r}"
            )


def _tls(doc: Mapping[str, Any], base: Path) -> TlsSettings:
    """The ``[tls]`` table: required, so that no deployment runs plaintext by omission."""
    if "tls" not in doc:
        raise ConfigError(
            "[tls] is required: ca, cert and key (written by `esa keygen` under DIR/tls), or "
            "insecure_plaintext = true (local test harness only)"
        )
    table = _table(doc, "tls", {"ca", "cert", "key", "insecure_plaintext"})
    plain = table.get("insecure_plaintext", False)
    if not isinstance(plain, bool):
        raise ConfigError(f"[tls] insecure_plaintext must be true or false, got {plain!r}")
    files: dict[str, Path] = {}
    for name in ("ca", "cert", "key"):
        if name in table:
            if not isinstance(table[name], str):
                raise ConfigError(f"[tls] {name} must be a path string, got {table[name]!r}")
            files[name] = base / table[name]
    return TlsSettings(insecure_plaintext=plain, **files)


def load_config(path: str | Path, *, simulation: bool = False) -> PartyConfig:
    """Read and validate a party's TOML config (``simulation``: a local simulation's
    party, see :func:`config_from_dict`).

    Args:
        path: the TOML file; relative paths in it are relative to its directory.
        simulation: whether the party is a local simulation's.

    Returns:
        The validated config.

    Raises:
        ConfigError: unreadable file, invalid TOML, or a value outside its range (the
            message quotes the value and the bound).
    """
    p = Path(path)
    try:
        doc = tomllib.loads(p.read_text())
    except OSError as exc:
        raise ConfigError(f"cannot read config {p}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{p}: not a UTF-8 text file (a TOML config is UTF-8)") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{p}: invalid TOML: {exc}") from None
    return config_from_dict(doc, base=p.resolve().parent, simulation=simulation)


def load_protocol(spec: dict[str, Any]) -> ShuffleProtocol:
    """Build the protocol a config's ``[protocol]`` table names, with
    :func:`protocols.build_protocol` from its declarative parameters.

    Args:
        spec: the ``[protocol]`` table (``PartyConfig.protocol``).

    Returns:
        The configured protocol.

    Raises:
        ConfigError: the table is invalid.
    """
    table = protocol_table(spec)
    fields = {k: v for k, v in table.items() if k != "name"}
    return build_protocol(table["name"], ProtocolSpec(**fields))


def protocol_table(spec: Mapping[str, Any]) -> dict[str, Any]:
    """A config's ``[protocol]`` table checked, with its defaults filled in: what
    :func:`load_protocol` builds, and what STATUS tells clients (``esa submit`` encodes for
    it).

    Args:
        spec: the ``[protocol]`` table.

    Returns:
        The table with ``domain``, ``bound``, ``fake_reports`` and ``options`` filled in
        (``shufflers``, the m whose fakes the accounting counts, stays as given: absent
        means 1).

    Raises:
        ConfigError: an unknown or missing key, or a value of the wrong type.
    """
    known = {
        "name",
        "epsilon",
        "delta",
        "n",
        "domain",
        "bound",
        "fake_reports",
        "options",
        "shufflers",
    }
    unknown = set(spec) - known
    if unknown:
        raise ConfigError(f"[protocol]: unknown keys {sorted(unknown)}; allowed {sorted(known)}")
    missing = [k for k in ("name", "epsilon", "delta", "n") if k not in spec]
    if missing:
        raise ConfigError(f"[protocol] needs {', '.join(map(repr, missing))}")
    table = {"domain": 2, "bound": None, "fake_reports": 0, "options": {}, **spec}
    for key in ("epsilon", "delta", "n", "domain", "fake_reports", "shufflers"):
        value = table.get(key, 1)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"[protocol] {key} must be a number, got {value!r}")
    if not isinstance(table["bound"], str | None):
        raise ConfigError(f"[protocol] bound must be a bound's name, got {table['bound']!r}")
    if not isinstance(table["options"], dict):
        raise ConfigError(f"[protocol.options] must be a table, got {table['options']!r}")
    return {**table, "name": str(table["name"]), "options": dict(table["options"])}
