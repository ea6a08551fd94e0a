"""Party key pairs and the on-disk key directory.

Every party has an X25519 key pair for its onion layer and an Ed25519 key pair for signing
the batches it forwards. Private keys redact themselves in ``repr``/``str``, have no
``__bytes__``, export only through :meth:`LayerPrivateKey.private_bytes_raw`, and compare in
constant time.

Key directory layout (``esa keygen``)::

    DIR/public.json          every party's public keys (world-readable)
    DIR/<party>.key          one party's private keys, created with mode 0600
"""

from __future__ import annotations

import hmac
import json
import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)
from nacl import bindings
from nacl.exceptions import CryptoError as _NaclError

from ._errors import CryptoParameterError, InvalidKey

__all__ = [
    "KEY_SIZE",
    "KeyDirectory",
    "LayerPrivateKey",
    "PartyKeys",
    "PartyPublic",
    "analyzer_name",
    "is_weak_verify_key",
    "shuffler_name",
]

KEY_SIZE: Final = 32
# Any fixed scalar works for the low-order test (is_weak_layer_key); this one is public.
_PROBE_SCALAR: Final = bytes(range(1, KEY_SIZE + 1))
_DIR_VERSION: Final = 1
_PUBLIC_FILE: Final = "public.json"


class LayerPrivateKey:
    """An X25519 private key for peeling one onion layer. Never printed."""

    __slots__ = ("_public", "_secret")

    def __init__(self, secret: bytes) -> None:
        if not isinstance(secret, bytes) or len(secret) != KEY_SIZE:
            raise InvalidKey(f"an X25519 private key is {KEY_SIZE} bytes")
        self._secret = secret
        self._public = bindings.crypto_scalarmult_base(secret)

    @classmethod
    def generate(cls) -> LayerPrivateKey:
        """A fresh key from the OS CSPRNG.

        Returns:
            The new private key.
        """
        return cls(os.urandom(KEY_SIZE))

    @property
    def public_key(self) -> bytes:
        """The 32-byte X25519 public key."""
        return self._public

    def private_bytes_raw(self) -> bytes:
        """Explicit export of the 32 secret bytes (for storage and worker processes).

        Returns:
            The raw X25519 private key.
        """
        return self._secret

    def __repr__(self) -> str:
        return f"<LayerPrivateKey public={self._public.hex()[:16]}… secret=REDACTED>"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, LayerPrivateKey):
            return NotImplemented
        return hmac.compare_digest(self._secret, other._secret)

    def __hash__(self) -> int:
        return hash(self._public)

    def __reduce__(self) -> Any:
        # Pickling is how batches reach worker processes; it is an explicit export.
        return (LayerPrivateKey, (self._secret,))


def is_weak_layer_key(public: bytes) -> bool:
    """Whether an X25519 public key is a point of small order (u = 0, u = 1, the points of
    order 8, their non-canonical encodings u + p, each also with the ignored top bit set).

    Every clamped scalar is a multiple of the cofactor 8, so its product with such a point
    is all-zero whatever the scalar, which libsodium reports as an error: one product with
    any fixed scalar detects exactly these points.
    """
    try:
        bindings.crypto_scalarmult(_PROBE_SCALAR, public)
    except (_NaclError, RuntimeError):
        return True
    return False


def is_weak_verify_key(public: bytes) -> bool:
    """Whether an Ed25519 verify key is not a canonical point of the prime-order subgroup.

    OpenSSL (hence pyca/cryptography) accepts a small-order verify key A, and then the
    signature (R, S = 0) with R a small-order point verifies for most messages — always
    when A is the identity ``01 00…00``: anyone can forge. libsodium refuses such keys;
    ``crypto_core_ed25519_is_valid_point`` is its check (canonical, on the curve, not of
    small order, in the main subgroup). Every honestly generated key passes it.

    Args:
        public: The 32-byte raw Ed25519 verify key.

    Returns:
        True if libsodium refuses the key (forgeable signatures), False for a sound key.
    """
    return not bindings.crypto_core_ed25519_is_valid_point(public)


@dataclass(frozen=True, slots=True)
class PartyPublic:
    """A party's public identity: its name, X25519 layer key and Ed25519 verify key.

    Weak keys are refused at construction (so on :meth:`KeyDirectory.load`): a low-order
    layer key (:func:`is_weak_layer_key`) or a verify key outside the prime-order subgroup
    (:func:`is_weak_verify_key`), under which anyone could sign.
    """

    name: str
    layer_public: bytes
    verify_public: bytes

    def __post_init__(self) -> None:
        for field_name in ("layer_public", "verify_public"):
            value = getattr(self, field_name)
            if not isinstance(value, bytes) or len(value) != KEY_SIZE:
                raise InvalidKey(f"{self.name}: {field_name} must be {KEY_SIZE} bytes")
        # A low-order layer key makes every layer for this hop unencryptable; a weak verify
        # key lets anyone sign as this party (see is_weak_verify_key).
        if is_weak_layer_key(self.layer_public):
            raise InvalidKey(
                f"{self.name}: layer_public {self.layer_public.hex()} is a low-order X25519 point"
            )
        if is_weak_verify_key(self.verify_public):
            raise InvalidKey(
                f"{self.name}: verify_public {self.verify_public.hex()} is not a valid Ed25519 "
                "key (small order, non-canonical or off the prime-order subgroup)"
            )

    def verify_key(self) -> Ed25519PublicKey:
        """The Ed25519 verify key, as a pyca/cryptography key.

        Returns:
            The key of :attr:`verify_public`.
        """
        return Ed25519PublicKey.from_public_bytes(self.verify_public)


@dataclass(frozen=True, slots=True, repr=False)
class PartyKeys:
    """A party's private keys. ``repr`` shows the name and public keys only."""

    name: str
    layer: LayerPrivateKey
    signing: Ed25519PrivateKey

    @classmethod
    def generate(cls, name: str) -> PartyKeys:
        """Fresh layer (X25519) and signing (Ed25519) keys from the OS CSPRNG.

        Args:
            name: the party's name.

        Returns:
            The party's new private keys.
        """
        return cls(name, LayerPrivateKey.generate(), Ed25519PrivateKey.generate())

    def public(self) -> PartyPublic:
        """The public halves of these keys.

        Returns:
            The party's name and its layer and verify public keys.
        """
        return PartyPublic(
            name=self.name,
            layer_public=self.layer.public_key,
            verify_public=self.signing.public_key().public_bytes_raw(),
        )

    def __repr__(self) -> str:
        return f"PartyKeys(name={self.name!r}, layer={self.layer!r}, signing=REDACTED)"

    __str__ = __repr__


def shuffler_name(index: int) -> str:
    """Name of the shuffler at 0-based hop ``index`` (``shuffler-1`` is hop 0).

    Args:
        index: The 0-based hop index.

    Returns:
        ``"shuffler-{index + 1}"``.
    """
    return f"shuffler-{index + 1}"


def analyzer_name() -> str:
    """Name of the analyzer, the last hop of every route.

    Returns:
        ``"analyzer"``.
    """
    return "analyzer"


class KeyDirectory:
    """Keys of one deployment: m shufflers and an analyzer, on disk.

    Use :meth:`create` to generate a new directory and :meth:`load` to read one.
    """

    def __init__(self, path: Path, publics: Sequence[PartyPublic]) -> None:
        self._path = path
        self._publics = {p.name: p for p in publics}
        self._order = [p.name for p in publics]

    @property
    def path(self) -> Path:
        return self._path

    @property
    def shufflers(self) -> int:
        return len(self._order) - 1

    @classmethod
    def create(cls, path: str | os.PathLike[str], *, shufflers: int) -> KeyDirectory:
        """Generate keys for ``shufflers`` shufflers and one analyzer under ``path``.

        Args:
            path: the directory (created if missing).
            shufflers: the number of shufflers, at least 1.

        Returns:
            The new key directory.

        Raises:
            CryptoParameterError: ``shufflers`` < 1, ``path`` is empty, is not a directory
                that can be created, or already holds keys.
        """
        if isinstance(shufflers, bool) or not isinstance(shufflers, int) or shufflers < 1:
            raise CryptoParameterError(f"shufflers must be an integer >= 1, got {shufflers!r}")
        if not os.fspath(path):
            # Path("") is ".": private keys would land wherever the process happens to run.
            raise CryptoParameterError("a key directory path is required, got ''")
        root = Path(path)
        if (root / _PUBLIC_FILE).exists():
            raise CryptoParameterError(f"{root} already holds a key directory; not overwriting")
        names = [shuffler_name(i) for i in range(shufflers)] + [analyzer_name()]
        stale = [n for n in names if (root / f"{n}.key").exists()]
        if stale:
            # e.g. an interrupted keygen: never overwrite or mix private keys.
            raise CryptoParameterError(
                f"{root} already holds private key files {stale}; remove them or use a new "
                "directory"
            )
        try:
            root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:  # a file in the way, a read-only parent …
            raise CryptoParameterError(
                f"cannot create key directory {root}: {exc.strerror or exc}"
            ) from None
        publics = []
        for name in names:
            keys = PartyKeys.generate(name)
            _write_private(root / f"{name}.key", keys)
            publics.append(keys.public())
        doc = {
            "version": _DIR_VERSION,
            "parties": [
                {
                    "name": p.name,
                    "x25519": p.layer_public.hex(),
                    "ed25519": p.verify_public.hex(),
                }
                for p in publics
            ],
        }
        tmp = root / (_PUBLIC_FILE + ".tmp")
        tmp.write_text(json.dumps(doc, indent=2) + "\n")
        os.replace(tmp, root / _PUBLIC_FILE)
        return cls(root, publics)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> KeyDirectory:
        """Read the public keys of a key directory (private keys load on demand).

        Args:
            path: the key directory.

        Returns:
            The key directory, with its parties' public keys.

        Raises:
            InvalidKey: missing or malformed ``public.json``.
        """
        root = Path(path)
        try:
            doc = json.loads((root / _PUBLIC_FILE).read_text())
            if not isinstance(doc, dict):
                raise InvalidKey(f"{root / _PUBLIC_FILE}: expected a JSON object")
            version = doc.get("version")
            if type(version) is not int or version != _DIR_VERSION:  # not True, not 1.0
                raise InvalidKey(f"{root / _PUBLIC_FILE}: unsupported version {version!r}")
            publics = [
                PartyPublic(
                    name=str(p["name"]),
                    layer_public=bytes.fromhex(p["x25519"]),
                    verify_public=bytes.fromhex(p["ed25519"]),
                )
                for p in doc["parties"]
            ]
        except (OSError, ValueError, KeyError, TypeError, RecursionError) as exc:
            raise InvalidKey(f"cannot read key directory {root}: {exc}") from None
        names = [p.name for p in publics]
        want = [shuffler_name(i) for i in range(len(publics) - 1)] + [analyzer_name()]
        if len(publics) < 2 or names != want:
            # A repeated name would route two hops through one key.
            raise InvalidKey(
                f"{root}: a key directory lists shuffler-1 … shuffler-m, then the analyzer; "
                f"got {', '.join(names)}"
            )
        for field_name in ("layer_public", "verify_public"):
            # So would a repeated key under two names: its holder peels (or signs for) two
            # hops, and the chain has one honest party fewer than its length says.
            holder: dict[bytes, str] = {}
            for p in publics:
                key = getattr(p, field_name)
                if key in holder:
                    raise InvalidKey(
                        f"{root}: {holder[key]} and {p.name} share the {field_name} key "
                        f"{key.hex()}; every party needs its own"
                    )
                holder[key] = p.name
        return cls(root, publics)

    def public(self, name: str) -> PartyPublic:
        """One party's public keys.

        Args:
            name: the party's name (:func:`shuffler_name` or :func:`analyzer_name`).

        Returns:
            The party's public keys, as in ``public.json``.

        Raises:
            InvalidKey: no party of that name in the directory.
        """
        try:
            return self._publics[name]
        except KeyError:
            raise InvalidKey(f"no party named {name!r} in {self._path}") from None

    def route(self) -> list[PartyPublic]:
        """Public keys in report order: shuffler-1 … shuffler-m, analyzer.

        Returns:
            One entry per hop, the analyzer last.
        """
        return [self._publics[n] for n in self._order]

    def private(self, name: str) -> PartyKeys:
        """Load one party's private keys, refusing a file others can read.

        Args:
            name: the party's name (:func:`shuffler_name` or :func:`analyzer_name`).

        Returns:
            The party's private keys.

        Raises:
            InvalidKey: missing/malformed file, permissions wider than 0600, or keys that do
                not match ``public.json``.
        """
        self.public(name)
        keys = _read_private(self._path / f"{name}.key", name)
        if keys.public() != self._publics[name]:
            raise InvalidKey(f"{name}: private key does not match public.json")
        return keys


def _write_private(path: Path, keys: PartyKeys) -> None:
    doc = {
        "version": _DIR_VERSION,
        "name": keys.name,
        "x25519": keys.layer.private_bytes_raw().hex(),
        "ed25519": keys.signing.private_bytes_raw().hex(),
    }
    write_private_file(path, (json.dumps(doc) + "\n").encode())


#: A private key file is ~200 bytes of JSON; anything much larger is not one.
_MAX_PRIVATE_FILE = 1 << 16


def write_private_file(path: Path, data: bytes) -> None:
    """Create ``path`` with mode 0600 (never replacing a file) and write ``data`` to it.

    Shared by every private key file of the package (party keys here, TLS keys in
    :mod:`crypto._tls`).

    Raises:
        OSError: ``path`` already exists or cannot be created.
    """
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)


def read_private_file(path: Path, limit: int = _MAX_PRIVATE_FILE) -> bytes:
    """The bytes of a private key file, refusing one that others can read.

    Raises:
        InvalidKey: ``path`` is missing or unreadable, is not a regular file, has a mode
            wider than 0600, or is over ``limit`` bytes.
    """
    try:
        # One open, then every check on that open file: a stat of the path followed by a
        # read of it could check one file and read another (a swap in between), and a FIFO
        # put at the path would block the read. O_NONBLOCK only matters for such a FIFO.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(f.fileno())
            if not stat.S_ISREG(st.st_mode):
                raise InvalidKey(f"{path} is not a regular file")
            mode = stat.S_IMODE(st.st_mode)
            if mode & 0o077:
                raise InvalidKey(f"{path} has mode {mode:04o}; private keys must be 0600")
            text = f.read(limit + 1)
    except OSError as exc:
        raise InvalidKey(f"cannot read private key {path}: {type(exc).__name__}") from None
    if len(text) > limit:
        raise InvalidKey(f"{path} is over {limit} bytes: not a private key file")
    return text


def _read_private(path: Path, name: str) -> PartyKeys:
    try:
        doc = json.loads(read_private_file(path))
        return PartyKeys(
            name=name,
            layer=LayerPrivateKey(bytes.fromhex(doc["x25519"])),
            signing=Ed25519PrivateKey.from_private_bytes(bytes.fromhex(doc["ed25519"])),
        )
    except InvalidKey:
        raise
    except (OSError, ValueError, KeyError, TypeError, RecursionError) as exc:
        raise InvalidKey(f"cannot read private key {path}: {type(exc).__name__}") from None
