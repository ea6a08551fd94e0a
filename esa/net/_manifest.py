"""The signed deployment manifest: what a deployment runs, signed by its operator.

A client must never take privacy parameters from an unsigned reply: a hostile first
shuffler could announce plaintext reports or ε = 30 in its STATUS. The manifest states,
as declarative values, everything an encoder needs and every party must agree on — the
protocol and its parameters, the report format (``crypto``), the number of shuffler
chains, the key epoch, the shufflers' crowd rule (``shuffle``: the threshold T and the ε_t
of a noisy threshold, which the run's privacy statement depends on) and every party's
public keys (X25519 layer key and Ed25519 verify key) in route order — with the
deployment's random id and its creation time, and the
operator signs it with the Ed25519 key whose public half every party already has in its
``[operator]`` table. ``esa keygen --manifest`` writes it; ``esa submit --manifest FILE
--operator-key PUB`` verifies it, encodes for it and refuses a first shuffler whose STATUS
disagrees; a party whose config names ``manifest = FILE`` refuses to start unless the
manifest verifies under its ``[operator]`` key and its own config matches it.

File format (UTF-8 JSON)::

    {"manifest": {...}, "signature": "<128 hex digits>"}

The signature is over ``b"esa/manifest/v1\\x00"`` followed by the manifest's canonical
encoding: JSON with sorted keys, no whitespace, ASCII only, no NaN or infinity; numbers
are written as Python writes them (an integer as digits, a float by its shortest
round-trip ``repr``, so ``1.0`` and ``1`` differ), and a verifier re-encodes what it
parsed, so only the values count, never the file's layout.
"""

from __future__ import annotations

import json
import math
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)

import crypto
from crypto import KeyDirectory, PartyPublic
from protocols import ProtocolSpec, ShuffleProtocol, build_protocol

from .._errors import ConfigError
from ._wire import DEPLOYMENT_ID_SIZE

__all__ = [
    "MANIFEST_FORMAT",
    "Manifest",
    "ManifestError",
    "canonical_json",
    "load_manifest",
    "make_manifest",
    "parse_manifest",
]

MANIFEST_FORMAT: Final = "esa-manifest/1"
_CONTEXT: Final = b"esa/manifest/v1\x00"
_MAX_FILE: Final = 1 << 20
_FIELDS: Final = {
    "format",
    "deployment_id",
    "created_at",
    "key_epoch",
    "crypto",
    "channels",
    "protocol",
    "route",
    "operator_key",
}
#: Fields a manifest may leave out (one made before they existed): ``shuffle``.
_OPTIONAL: Final = {"shuffle"}
_SHUFFLE_KEYS: Final = {"threshold", "threshold_epsilon"}


class ManifestError(ConfigError):
    """A manifest that does not verify, is malformed, or disagrees with what it is
    checked against (a party's config, a party's STATUS)."""


def canonical_json(value: Any) -> bytes:
    """The canonical encoding that is signed (see the module docstring).

    Raises:
        ManifestError: ``value`` holds NaN, an infinity or a non-JSON type.
    """
    try:
        text = json.dumps(
            value, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False
        )
    except (TypeError, ValueError) as exc:
        raise ManifestError(f"a manifest holds JSON values only: {exc}") from None
    return text.encode("ascii")


def _hex_key(value: Any, what: str) -> bytes:
    try:
        key = bytes.fromhex(value) if isinstance(value, str) else b""
    except ValueError:
        key = b""
    if len(key) != 32:
        raise ManifestError(f"{what} must be 64 hex digits, got {value!r:.80}")
    return key


@dataclass(frozen=True, slots=True)
class Manifest:
    """A verified deployment manifest (build one with :func:`make_manifest`, read one
    with :func:`load_manifest`; the constructor checks shapes, not the signature).

    Attributes:
        deployment_id: 32 hex digits, random per deployment; CONTROL frames carry it.
        created_at: Unix seconds when the operator made it.
        key_epoch: the key epoch whose keys :attr:`route` lists.
        crypto: the report format; always ``"onion"`` (deployments never run plaintext).
        channels: shuffler chains ending at the one analyzer.
        protocol: the ``[protocol]`` table, defaults filled in (``esa.protocol_table``).
        route: every party's public keys in key-directory order (all chains' shufflers,
            then the analyzer).
        operator_key: the operator's Ed25519 verify key, which signed the manifest.
        shuffle: the shufflers' crowd rule, ``{"threshold": T, "threshold_epsilon": ε_t}``
            (ε_t None: the plain threshold); every shuffler must be configured with it and
            the analyzer with its ε_t. None: a manifest that does not state it.
    """

    deployment_id: str
    created_at: int
    key_epoch: int
    crypto: str
    channels: int
    protocol: Mapping[str, Any]
    route: tuple[PartyPublic, ...]
    operator_key: bytes
    shuffle: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        try:
            raw = bytes.fromhex(self.deployment_id)
        except (TypeError, ValueError):
            raw = b""
        if len(raw) != DEPLOYMENT_ID_SIZE or self.deployment_id != raw.hex():
            raise ManifestError(
                f"deployment_id must be {2 * DEPLOYMENT_ID_SIZE} lower-case hex digits, "
                f"got {self.deployment_id!r:.80}"
            )
        for name, bound in (("created_at", 2**63), ("key_epoch", 2**32), ("channels", 256)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < bound:
                raise ManifestError(f"{name} must be an integer in [0, {bound}), got {value!r}")
        if self.channels < 1:
            raise ManifestError("channels must be >= 1")
        if self.crypto != "onion":
            raise ManifestError(
                f"crypto must be 'onion' (a deployment never takes plaintext reports), "
                f"got {self.crypto!r}"
            )
        if not isinstance(self.protocol, Mapping) or not isinstance(self.protocol.get("name"), str):
            raise ManifestError("protocol must be a table naming the protocol")
        for key in ("epsilon", "delta"):
            value = self.protocol.get(key)
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not math.isfinite(value)
            ):
                raise ManifestError(f"protocol {key} must be a finite number, got {value!r}")
        shufflers = len(self.route) - 1
        if shufflers < 1 or shufflers % self.channels:
            raise ManifestError(
                f"route must list the shufflers of {self.channels} chain(s) and the analyzer, "
                f"got {len(self.route)} parties"
            )
        names = [crypto.shuffler_name(i) for i in range(shufflers)] + [crypto.analyzer_name()]
        if [p.name for p in self.route] != names:
            raise ManifestError(f"route must name the parties {names} in order")
        if crypto.is_weak_verify_key(self.operator_key):
            raise ManifestError("operator_key is not a valid Ed25519 key")
        if self.shuffle is not None:
            _check_shuffle(self.shuffle)

    @property
    def threshold(self) -> int | None:
        """The shufflers' crowd threshold T (None: the manifest states no crowd rule)."""
        return None if self.shuffle is None else int(self.shuffle["threshold"])

    @property
    def threshold_epsilon(self) -> float | None:
        """ε_t of the shufflers' noisy threshold (None: a plain threshold, or not stated)."""
        eps_t = None if self.shuffle is None else self.shuffle["threshold_epsilon"]
        return None if eps_t is None else float(eps_t)

    @property
    def deployment_bytes(self) -> bytes:
        """:attr:`deployment_id` as CONTROL frames carry it."""
        return bytes.fromhex(self.deployment_id)

    @property
    def shufflers_per_chain(self) -> int:
        return (len(self.route) - 1) // self.channels

    def chain(self, channel: int) -> list[PartyPublic]:
        """Chain ``channel``'s shufflers then the analyzer (as :func:`esa.chain_route`).

        Args:
            channel: the chain, in [0, channels).

        Returns:
            The chain's public keys in report order.

        Raises:
            ManifestError: ``channel`` out of range.
        """
        if not 0 <= channel < self.channels:
            raise ManifestError(f"channel must lie in [0, {self.channels}), got {channel!r}")
        m = self.shufflers_per_chain
        return [*self.route[channel * m : (channel + 1) * m], self.route[-1]]

    def first_shufflers(self) -> list[str]:
        """The key names of every chain's first shuffler, in chain order.

        Returns:
            The key names.
        """
        return [self.chain(c)[0].name for c in range(self.channels)]

    def build_protocol(self) -> ShuffleProtocol:
        """The protocol the manifest names, built from its declarative parameters.

        Returns:
            The configured protocol.

        Raises:
            ManifestError: the protocol cannot be built from those parameters.
        """
        fields = {k: v for k, v in self.protocol.items() if k != "name"}
        try:
            return build_protocol(str(self.protocol["name"]), ProtocolSpec(**fields))
        except TypeError as exc:
            raise ManifestError(f"protocol: {exc}") from None

    def body(self) -> dict[str, Any]:
        """The manifest as the JSON object that is signed.

        Returns:
            The JSON object.
        """
        return {
            "format": MANIFEST_FORMAT,
            "deployment_id": self.deployment_id,
            "created_at": self.created_at,
            "key_epoch": self.key_epoch,
            "crypto": self.crypto,
            "channels": self.channels,
            "protocol": dict(self.protocol),
            "route": [
                {"name": p.name, "x25519": p.layer_public.hex(), "ed25519": p.verify_public.hex()}
                for p in self.route
            ],
            "operator_key": self.operator_key.hex(),
            **({"shuffle": dict(self.shuffle)} if self.shuffle is not None else {}),
        }

    def signed_message(self) -> bytes:
        """The bytes the operator's signature covers.

        Returns:
            The context string, then the canonical JSON of :meth:`body`.
        """
        return _CONTEXT + canonical_json(self.body())

    def sign(self, operator: Ed25519PrivateKey) -> bytes:
        """The manifest file's bytes, signed by ``operator``.

        Args:
            operator: the operator's Ed25519 private key.

        Returns:
            The manifest file's bytes (UTF-8 JSON).

        Raises:
            ManifestError: ``operator`` is not the key :attr:`operator_key` names.
        """
        if operator.public_key().public_bytes_raw() != self.operator_key:
            raise ManifestError("the signing key is not the manifest's operator_key")
        signature = crypto.sign(operator, self.signed_message())
        doc = {"manifest": self.body(), "signature": signature.hex()}
        return (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode()

    def check_route(self, key_epoch: int, keys: KeyDirectory) -> None:
        """Raise :class:`ManifestError` unless ``keys`` hold the manifest's public keys.

        Args:
            key_epoch: the key epoch of ``keys``.
            keys: a key directory.

        Raises:
            ManifestError: another key epoch, or any public key differs.
        """
        if key_epoch != self.key_epoch:
            raise ManifestError(f"the manifest is for key epoch {self.key_epoch}, not {key_epoch}")
        if tuple(keys.route()) != self.route:
            raise ManifestError(
                f"the keys in {keys.path} are not the manifest's (another key directory?)"
            )

    def check_status(self, status: Mapping[str, Any], *, party: str) -> None:
        """Compare a party's (unsigned) STATUS reply with the manifest.

        Args:
            status: the party's STATUS reply.
            party: the party's key name.

        Raises:
            ManifestError: the party says it serves another deployment, party, protocol,
                parameter or report format than the manifest states.
        """
        said = {
            "deployment": status.get("deployment"),
            "party": status.get("party"),
            "crypto": status.get("crypto"),
            "protocol": status.get("protocol"),
        }
        signed = {
            "deployment": self.deployment_id,
            "party": party,
            "crypto": self.crypto,
            "protocol": dict(self.protocol),
        }
        for key, value in signed.items():
            if said[key] != value:
                raise ManifestError(
                    f"the party serves {key} = {said[key]!r}, but the signed manifest says "
                    f"{value!r}"
                )


def make_manifest(
    *,
    protocol: Mapping[str, Any],
    keys: KeyDirectory,
    key_epoch: int,
    channels: int,
    operator_key: bytes,
    deployment_id: str | None = None,
    created_at: int | None = None,
    shuffle: Mapping[str, Any] | None = None,
) -> Manifest:
    """A new manifest for a deployment (sign it with :meth:`Manifest.sign`).

    Args:
        protocol: the ``[protocol]`` table with its defaults (``esa.protocol_table``).
        keys: the key directory of ``key_epoch`` (its public keys are what is signed).
        key_epoch: the key epoch clients encode for.
        channels: shuffler chains.
        operator_key: the operator's Ed25519 verify key (32 bytes).
        deployment_id: 32 hex digits (default: fresh random).
        created_at: Unix seconds (default: now).
        shuffle: the shufflers' crowd rule, ``{"threshold": T, "threshold_epsilon": ε_t
            or None}`` (None: not stated).

    Returns:
        The manifest; the protocol is built once to check its parameters.

    Raises:
        ManifestError: a value out of range, or a protocol its parameters cannot build.
    """
    manifest = Manifest(
        deployment_id=deployment_id or secrets.token_hex(DEPLOYMENT_ID_SIZE),
        created_at=int(time.time()) if created_at is None else created_at,
        key_epoch=key_epoch,
        crypto="onion",
        channels=channels,
        protocol=dict(protocol),
        route=tuple(keys.route()),
        operator_key=operator_key,
        shuffle=None if shuffle is None else dict(shuffle),
    )
    manifest.build_protocol()
    return manifest


def _check_shuffle(shuffle: Any) -> None:
    """Raise :class:`ManifestError` unless ``shuffle`` is a valid crowd rule."""
    if not isinstance(shuffle, Mapping) or set(shuffle) != _SHUFFLE_KEYS:
        raise ManifestError(f"shuffle must be a table of exactly {sorted(_SHUFFLE_KEYS)}")
    t, eps_t = shuffle["threshold"], shuffle["threshold_epsilon"]
    if isinstance(t, bool) or not isinstance(t, int) or not 0 <= t < 2**63:
        raise ManifestError(f"shuffle threshold must be an integer >= 0, got {t!r}")
    if eps_t is not None:
        if (
            isinstance(eps_t, bool)
            or not isinstance(eps_t, int | float)
            or not (math.isfinite(eps_t) and eps_t > 0)
        ):
            raise ManifestError(
                f"shuffle threshold_epsilon must be null or a finite number > 0, got {eps_t!r}"
            )
        if t < 1:
            raise ManifestError("shuffle threshold_epsilon needs a threshold >= 1")


def _parse(body: Mapping[str, Any]) -> Manifest:
    unknown, missing = set(body) - _FIELDS - _OPTIONAL, _FIELDS - set(body)
    if unknown or missing:
        raise ManifestError(
            f"manifest fields: unknown {sorted(unknown)}, missing {sorted(missing)}"
        )
    if body["format"] != MANIFEST_FORMAT:
        raise ManifestError(f"manifest format {body['format']!r}, expected {MANIFEST_FORMAT!r}")
    route = body["route"]
    if not isinstance(route, list) or not all(isinstance(p, dict) for p in route):
        raise ManifestError("route must be a list of parties")
    try:
        parties = tuple(
            PartyPublic(
                str(p.get("name")),
                _hex_key(p.get("x25519"), "x25519"),
                _hex_key(p.get("ed25519"), "ed25519"),
            )
            for p in route
        )
    except crypto.CryptoError as exc:
        raise ManifestError(f"route: {exc}") from None
    protocol = body["protocol"]
    if not isinstance(protocol, dict):
        raise ManifestError("protocol must be a table")
    return Manifest(
        deployment_id=body["deployment_id"],
        created_at=body["created_at"],
        key_epoch=body["key_epoch"],
        crypto=body["crypto"],
        channels=body["channels"],
        protocol=protocol,
        route=parties,
        operator_key=_hex_key(body["operator_key"], "operator_key"),
        shuffle=body.get("shuffle"),
    )


def parse_manifest(data: bytes, operator_key: bytes) -> Manifest:
    """Verify a manifest file's bytes under ``operator_key`` and parse them.

    Args:
        data: the manifest file's bytes.
        operator_key: the operator's 32-byte Ed25519 verify key.

    Returns:
        The verified manifest.

    Raises:
        ManifestError: not a manifest, signed by another key, or altered after signing.
    """
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise ManifestError("not a manifest file (UTF-8 JSON)") from None
    if not isinstance(doc, dict) or set(doc) != {"manifest", "signature"}:
        raise ManifestError("a manifest file holds 'manifest' and 'signature'")
    body, signature = doc["manifest"], doc["signature"]
    if not isinstance(body, dict) or not isinstance(signature, str):
        raise ManifestError("a manifest file holds 'manifest' and 'signature'")
    if crypto.is_weak_verify_key(operator_key):
        raise ManifestError("the operator key is not a valid Ed25519 key")
    try:
        sig = bytes.fromhex(signature)
    except ValueError:
        sig = b""
    verify = Ed25519PublicKey.from_public_bytes(operator_key)
    if body.get("operator_key") != operator_key.hex() or not crypto.is_valid_signature(
        verify, _CONTEXT + canonical_json(body), sig
    ):
        raise ManifestError(
            "the manifest's signature does not verify under the operator key "
            f"{operator_key.hex()[:16]}…: altered, or signed by another operator"
        )
    return _parse(body)


def load_manifest(path: str | Path, operator_key: bytes) -> Manifest:
    """Read and verify a manifest file (see :func:`parse_manifest`).

    Args:
        path: the manifest file.
        operator_key: the operator's 32-byte Ed25519 verify key.

    Returns:
        The verified manifest.

    Raises:
        ManifestError: unreadable, not a manifest, or it does not verify.
    """
    p = Path(path)
    try:
        with p.open("rb") as fh:
            data = fh.read(_MAX_FILE + 1)
    except OSError as exc:
        raise ManifestError(f"cannot read manifest {p}: {exc.strerror or exc}") from None
    if len(data) > _MAX_FILE:
        raise ManifestError(f"{p}: larger than {_MAX_FILE} bytes, not a manifest")
    try:
        return parse_manifest(data, operator_key)
    except ManifestError as exc:
        raise ManifestError(f"{p}: {exc}") from None
