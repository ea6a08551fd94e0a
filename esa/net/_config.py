"""Party configuration files for ``esa serve`` (TOML, read with stdlib :mod:`tomllib`), and
the protocol a config's ``[protocol]`` table names (:func:`load_protocol`).

One file per party. Relative paths are relative to the file's directory. Example (the first
of two shufflers)::

    role = "shuffler"            # or "analyzer"
    hop = 0                      # 0-based position in its chain; the analyzer's hop is m
    channels = 1                 # shuffler chains of the deployment (optional, default 1)
    channel = 0                  # shufflers only: which chain this one belongs to
    state_dir = "state/shuffler-1"
    crypto = "onion"             # or "ideal" (plaintext stand-in, simulations only)

    [listen]
    host = "0.0.0.0"
    port = 7101

    [next]                       # shufflers only: the next hop
    host = "shuffler2.example.org"
    port = 7102

    [keys.epochs]                # key epoch -> key directory (``esa keygen``); one per rotation
    0 = "keys/epoch-0"
    1 = "keys/epoch-1"

    [operator]                   # optional: who may send CONTROL frames (close an epoch now)
    public_key = "9f0c…"         # 32-byte Ed25519 verify key, hex

    [auditor]                    # analyzer only, optional: who may commit to and open trap
    public_key = "51d7…"         # reports (TRAP_COMMIT / TRAP_OPEN); without it, no trap audit

    [epoch]                      # the first shuffler's batch rule: whichever comes first
    max_reports = 10000
    deadline_seconds = 60.0

    [shuffle]
    threshold = 0
    fake_reports = 0
    workers = 1                  # processes peeling/wrapping an epoch (0: every core)

    [limits]
    max_frame_bytes = 4194304
    read_timeout_seconds = 10.0
    max_connections = 256
    max_connections_per_peer = 64  # per client IPv4 address or IPv6 /64
    chunk_reports = 2000

    [protocol]                   # every party runs the same configured protocol
    name = "hist_kr"
    epsilon = 1.0
    delta = 1e-6
    n = 100000
    domain = 16
"""

from __future__ import annotations

import math
import pickle
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal

from crypto import KeyDirectory, PartyPublic, is_weak_verify_key
from protocols import ProtocolSpec, ShuffleProtocol, build_protocol

from .._errors import ConfigError
from ._statedir import INBOX_FILE
from ._wire import MAX_FRAME_SIZE

__all__ = [
    "Address",
    "EpochRule",
    "Limits",
    "PartyConfig",
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
    "protocol",
    "simulation",
}


@dataclass(frozen=True, slots=True)
class Address:
    """A TCP endpoint. ``port = 0`` asks the OS for a free port (written to ``state_dir``)."""

    host: str
    port: int

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
    """``HOST:PORT`` → :class:`Address` (``[v6]:port`` accepted)."""
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
    fake_reports: int = 0
    workers: int | None = 1
    limits: Limits = field(default_factory=Limits)
    simulation: Mapping[str, Any] = field(default_factory=dict)
    channels: int = 1
    channel: int = 0

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


def config_from_dict(doc: Mapping[str, Any], *, base: Path) -> PartyConfig:
    """Validate a parsed TOML document; relative paths resolve against ``base``."""
    unknown = set(doc) - _TOP_KEYS
    if unknown:
        raise ConfigError(f"unknown top-level keys {sorted(unknown)}; allowed {sorted(_TOP_KEYS)}")
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

    ep = _table(doc, "epoch", {"max_reports", "deadline_seconds"})
    rule = EpochRule(
        max_reports=_int(ep.get("max_reports", 10_000), "[epoch] max_reports", 1),
        deadline_seconds=_pos_float(ep.get("deadline_seconds", 60.0), "[epoch] deadline_seconds"),
    )
    sh = _table(doc, "shuffle", {"threshold", "fake_reports", "workers"})
    workers = _int(sh.get("workers", 1), "[shuffle] workers", 0)
    lim = _table(
        doc,
        "limits",
        {
            "max_frame_bytes",
            "read_timeout_seconds",
            "max_connections",
            "max_connections_per_peer",
            "chunk_reports",
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
    )
    proto = doc.get("protocol")
    if not isinstance(proto, dict) or not ("name" in proto or "pickle" in proto):
        raise ConfigError("[protocol] must give the protocol's name and parameters")
    if "pickle" in proto:
        proto = {**proto, "pickle": str(base / str(proto["pickle"]))}
    sim = doc.get("simulation", {})
    if not isinstance(sim, dict):
        raise ConfigError("[simulation] must be a table")
    return PartyConfig(
        role=role,
        hop=hop,
        state_dir=base / doc["state_dir"],
        listen=_address(doc, "listen"),
        key_epochs=key_epochs,
        protocol=dict(proto),
        crypto=crypto_mode,
        next=nxt,
        operator_public_key=op_key,
        auditor_public_key=auditor_key,
        epoch=rule,
        threshold=_int(sh.get("threshold", 0), "[shuffle] threshold", 0),
        fake_reports=_int(sh.get("fake_reports", 0), "[shuffle] fake_reports", 0),
        workers=workers or None,
        limits=limits,
        simulation=dict(sim),
        channels=channels,
        channel=channel,
    )


def load_config(path: str | Path) -> PartyConfig:
    """Read and validate a party's TOML config.

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
    return config_from_dict(doc, base=p.resolve().parent)


def load_protocol(spec: dict[str, Any]) -> ShuffleProtocol:
    """Build the protocol a config's ``[protocol]`` table names.

    ``pickle = FILE`` (written by :func:`simulations._tcp_run.run_tcp` for its own child
    processes) loads a configured protocol object; it is for local simulations only and the
    file must be trusted like the config itself.

    Args:
        spec: the ``[protocol]`` table (``PartyConfig.protocol``).

    Returns:
        The configured protocol.

    Raises:
        ConfigError: the table is invalid, or the pickle holds no protocol.
    """
    if "pickle" in spec:
        with open(spec["pickle"], "rb") as fh:
            proto = pickle.load(fh)
        if not isinstance(proto, ShuffleProtocol):
            raise ConfigError(f"{spec['pickle']} does not hold a protocol")
        return proto
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
        The table with ``domain``, ``bound``, ``fake_reports`` and ``options`` filled in.

    Raises:
        ConfigError: an unknown or missing key, or a value of the wrong type.
    """
    known = {"name", "epsilon", "delta", "n", "domain", "bound", "fake_reports", "options"}
    unknown = set(spec) - known
    if unknown:
        raise ConfigError(f"[protocol]: unknown keys {sorted(unknown)}; allowed {sorted(known)}")
    missing = [k for k in ("name", "epsilon", "delta", "n") if k not in spec]
    if missing:
        raise ConfigError(f"[protocol] needs {', '.join(map(repr, missing))}")
    table = {"domain": 2, "bound": None, "fake_reports": 0, "options": {}, **spec}
    for key in ("epsilon", "delta", "n", "domain", "fake_reports"):
        value = table[key]
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"[protocol] {key} must be a number, got {value!r}")
    if not isinstance(table["bound"], str | None):
        raise ConfigError(f"[protocol] bound must be a bound's name, got {table['bound']!r}")
    if not isinstance(table["options"], dict):
        raise ConfigError(f"[protocol.options] must be a table, got {table['options']!r}")
    return {**table, "name": str(table["name"]), "options": dict(table["options"])}
