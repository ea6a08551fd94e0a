"""Party keys and the key directory: redaction, 0600 files, typed refusals."""

from __future__ import annotations

import json
import os
import pickle
import stat
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from nacl import bindings

from crypto import (
    KEY_SIZE,
    CryptoParameterError,
    InvalidKey,
    KeyDirectory,
    LayerPrivateKey,
    PartyKeys,
    PartyPublic,
    analyzer_name,
    pad,
    peel_batch,
    peel_report,
    shuffler_name,
    unpad,
    wrap_report,
)

from ._weak_keys import LOW_ORDER_X25519, SMALL_ORDER_ED25519

SECRET = bytes(range(1, 33))


def _secret_fragments(secret: bytes) -> list[str]:
    """Hex (both cases) and repr forms of the secret and of 8-byte windows of it."""
    out = [secret.hex(), secret.hex().upper(), repr(secret), str(list(secret))]
    out += [secret[i : i + 8].hex() for i in range(0, len(secret) - 7, 4)]
    return out


def _assert_redacted(obj: object, secrets: list[bytes]) -> None:
    for text in (repr(obj), str(obj), f"{obj}", f"{obj!r}", repr([obj]), repr({"k": obj})):
        assert "REDACTED" in text
        for secret in secrets:
            for fragment in _secret_fragments(secret):
                assert fragment not in text, f"secret leaks through {text!r}"


# --------------------------------------------------------------------------- key objects


def test_layer_private_key_is_redacted_and_has_no_bytes() -> None:
    key = LayerPrivateKey(SECRET)
    _assert_redacted(key, [SECRET])
    assert not hasattr(key, "__bytes__")
    with pytest.raises(TypeError):
        bytes(key)  # type: ignore[call-overload]
    assert key.private_bytes_raw() == SECRET  # the one explicit export


def test_party_keys_are_redacted_and_have_no_bytes() -> None:
    keys = PartyKeys("shuffler-1", LayerPrivateKey(SECRET), Ed25519PrivateKey.generate())
    signing_secret = keys.signing.private_bytes_raw()
    _assert_redacted(keys, [SECRET, signing_secret])
    assert "shuffler-1" in repr(keys)
    assert not hasattr(keys, "__bytes__")
    with pytest.raises(TypeError):
        bytes(keys)  # type: ignore[call-overload]


def test_layer_public_key_is_x25519_base_multiple() -> None:
    key = LayerPrivateKey(SECRET)
    assert key.public_key == bindings.crypto_scalarmult_base(SECRET)
    assert len(key.public_key) == KEY_SIZE


def test_layer_private_key_equality_is_constant_time(monkeypatch: pytest.MonkeyPatch) -> None:
    import hmac

    calls: list[tuple[bytes, bytes]] = []
    real = hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        calls.append((a, b))
        return real(a, b)

    # crypto._keys calls hmac.compare_digest through the module, so patching it there
    # observes every comparison
    monkeypatch.setattr(hmac, "compare_digest", spy)
    other = bytes(32 - 1) + b"\x09"
    assert LayerPrivateKey(SECRET) == LayerPrivateKey(SECRET)
    assert LayerPrivateKey(SECRET) != LayerPrivateKey(other)
    assert len(calls) == 2
    assert LayerPrivateKey(SECRET) != SECRET  # never equal to raw bytes


@pytest.mark.parametrize("bad", [b"", bytes(31), bytes(33), bytearray(32), "a" * 32, None])
def test_layer_private_key_refuses_malformed_secret(bad: object) -> None:
    with pytest.raises(InvalidKey, match="32 bytes"):
        LayerPrivateKey(bad)  # type: ignore[arg-type]


def test_layer_private_key_pickles_for_worker_processes() -> None:
    key = LayerPrivateKey(SECRET)
    clone = pickle.loads(pickle.dumps(key))
    assert clone == key
    assert clone.public_key == key.public_key


def test_generated_keys_differ() -> None:
    a, b = LayerPrivateKey.generate(), LayerPrivateKey.generate()
    assert a != b
    assert a.public_key != b.public_key


@pytest.mark.parametrize("field", ["layer_public", "verify_public"])
@pytest.mark.parametrize("bad", [b"", bytes(31), bytes(33), "00" * 32])
def test_party_public_refuses_malformed_keys(field: str, bad: object) -> None:
    real = PartyKeys.generate("x").public()
    good = {"layer_public": real.layer_public, "verify_public": real.verify_public}
    with pytest.raises(InvalidKey, match=field):
        PartyPublic(name="x", **{**good, field: bad})  # type: ignore[arg-type]


def test_party_names() -> None:
    assert [shuffler_name(i) for i in range(3)] == ["shuffler-1", "shuffler-2", "shuffler-3"]
    assert analyzer_name() == "analyzer"


# --------------------------------------------------------------------------- key directory


@pytest.fixture
def keydir(tmp_path: Path) -> KeyDirectory:
    return KeyDirectory.create(tmp_path / "keys", shufflers=3)


NAMES = ["shuffler-1", "shuffler-2", "shuffler-3", "analyzer"]


def test_create_writes_public_json_and_0600_private_files(keydir: KeyDirectory) -> None:
    root = keydir.path
    assert sorted(p.name for p in root.iterdir()) == sorted(
        ["public.json", *(f"{n}.key" for n in NAMES)]
    )
    for name in NAMES:
        mode = stat.S_IMODE((root / f"{name}.key").stat().st_mode)
        assert mode == 0o600, f"{name}.key has mode {mode:04o}"
    doc = json.loads((root / "public.json").read_text())
    assert [p["name"] for p in doc["parties"]] == NAMES
    # public.json carries no private material
    text = (root / "public.json").read_text()
    for name in NAMES:
        keys = keydir.private(name)
        assert keys.layer.private_bytes_raw().hex() not in text
        assert keys.signing.private_bytes_raw().hex() not in text


def test_create_load_private_round_trip(keydir: KeyDirectory) -> None:
    loaded = KeyDirectory.load(keydir.path)
    assert loaded.shufflers == keydir.shufflers == 3
    assert [p.name for p in loaded.route()] == NAMES
    assert loaded.route() == keydir.route()
    for name in NAMES:
        keys = loaded.private(name)
        assert keys.name == name
        assert keys.public() == loaded.public(name)
        # the signing key verifies under the published verify key
        loaded.public(name).verify_key().verify(keys.signing.sign(b"batch"), b"batch")


def test_loaded_keys_peel_a_report_wrapped_for_the_route(keydir: KeyDirectory) -> None:
    loaded = KeyDirectory.load(keydir.path)
    payload = pad(b"value", 8)
    report = wrap_report(payload, [p.layer_public for p in loaded.route()], epoch=3)
    for hop, name in enumerate(NAMES):
        _, report = peel_report(report, loaded.private(name).layer, epoch=3, hop=hop)
    assert report == payload


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o660, 0o601, 0o610])
def test_private_file_readable_by_others_is_refused(keydir: KeyDirectory, mode: int) -> None:
    path = keydir.path / "shuffler-2.key"
    os.chmod(path, mode)
    with pytest.raises(InvalidKey, match=f"{mode:04o}"):
        keydir.private("shuffler-2")
    with pytest.raises(InvalidKey):
        KeyDirectory.load(keydir.path).private("shuffler-2")
    os.chmod(path, 0o600)
    keydir.private("shuffler-2")  # and accepted again once fixed


def test_a_fifo_or_directory_at_a_key_path_is_refused_without_blocking(
    keydir: KeyDirectory,
) -> None:
    # The file is opened once and checked as opened: a FIFO put at the path (mode 0600,
    # so the old stat-then-read passed its check) blocked the read forever.
    import threading

    path = keydir.path / "shuffler-1.key"
    path.unlink()
    os.mkfifo(path, 0o600)
    outcome: list[BaseException | None] = []

    def load() -> None:
        try:
            keydir.private("shuffler-1")
            outcome.append(None)
        except BaseException as exc:  # reported below
            outcome.append(exc)

    worker = threading.Thread(target=load, daemon=True)
    worker.start()
    worker.join(timeout=30)
    assert outcome, "reading a FIFO key path blocked"
    assert isinstance(outcome[0], InvalidKey)
    assert "not a regular file" in str(outcome[0])
    path.unlink()
    path.mkdir(mode=0o700)
    with pytest.raises(InvalidKey):
        keydir.private("shuffler-1")


def test_an_oversized_private_key_file_is_refused(keydir: KeyDirectory) -> None:
    path = keydir.path / "analyzer.key"
    path.write_bytes(b" " * (1 << 20) + path.read_bytes())
    with pytest.raises(InvalidKey, match="not a private key file"):
        keydir.private("analyzer")


def test_stricter_mode_is_accepted(keydir: KeyDirectory) -> None:
    os.chmod(keydir.path / "analyzer.key", 0o400)
    assert keydir.private("analyzer").name == "analyzer"


def test_mismatched_private_key_is_refused(keydir: KeyDirectory, tmp_path: Path) -> None:
    root = keydir.path
    # another party's file under this party's name (mode stays 0600)
    (root / "shuffler-1.key").write_bytes((root / "shuffler-2.key").read_bytes())
    with pytest.raises(InvalidKey, match="does not match"):
        keydir.private("shuffler-1")
    # a key from another deployment
    other = KeyDirectory.create(tmp_path / "other", shufflers=1)
    (root / "analyzer.key").write_bytes((other.path / "analyzer.key").read_bytes())
    with pytest.raises(InvalidKey, match="does not match"):
        keydir.private("analyzer")


def test_unknown_party_is_refused(keydir: KeyDirectory) -> None:
    with pytest.raises(InvalidKey, match="shuffler-9"):
        keydir.private("shuffler-9")
    with pytest.raises(InvalidKey, match="shuffler-9"):
        keydir.public("shuffler-9")


def test_missing_private_file_is_refused(keydir: KeyDirectory) -> None:
    (keydir.path / "shuffler-3.key").unlink()
    with pytest.raises(InvalidKey):
        keydir.private("shuffler-3")


# A genuine verify key: each malformed document below must fail for its own reason, not
# because "22" * 32 is no Ed25519 point (PartyPublic refuses such keys).
_VERIFY_HEX = Ed25519PrivateKey.from_private_bytes(SECRET).public_key().public_bytes_raw().hex()


def _party(name: str, x: str = "11" * 32, e: str = _VERIFY_HEX) -> dict[str, str]:
    return {"name": name, "x25519": x, "ed25519": e}


MALFORMED_PUBLIC = {
    "not-json": "{not json",
    "empty": "",
    "wrong-version": json.dumps({"version": 2, "parties": [_party("s"), _party("analyzer")]}),
    "no-version": json.dumps({"parties": [_party("s"), _party("analyzer")]}),
    "no-parties": json.dumps({"version": 1}),
    "parties-not-list": json.dumps({"version": 1, "parties": 5}),
    "party-not-object": json.dumps({"version": 1, "parties": ["x", "y"]}),
    "missing-field": json.dumps(
        {"version": 1, "parties": [{"name": "s", "x25519": "11" * 32}, _party("analyzer")]}
    ),
    "bad-hex": json.dumps(
        {"version": 1, "parties": [_party("s", x="zz" * 32), _party("analyzer")]}
    ),
    "short-key": json.dumps(
        {"version": 1, "parties": [_party("s", x="11" * 31), _party("analyzer")]}
    ),
    "hex-not-string": json.dumps(
        {
            "version": 1,
            "parties": [_party("s"), {"name": "analyzer", "x25519": 5, "ed25519": "22" * 32}],
        }
    ),
    "analyzer-only": json.dumps({"version": 1, "parties": [_party("analyzer")]}),
    "analyzer-not-last": json.dumps({"version": 1, "parties": [_party("analyzer"), _party("s")]}),
}


@pytest.mark.parametrize("content", MALFORMED_PUBLIC.values(), ids=MALFORMED_PUBLIC.keys())
def test_malformed_public_json_is_refused(tmp_path: Path, content: str) -> None:
    (tmp_path / "public.json").write_text(content)
    with pytest.raises(InvalidKey):
        KeyDirectory.load(tmp_path)


@pytest.mark.parametrize("content", ["[]", "5", "null", '"text"'])
def test_public_json_that_is_not_an_object_is_refused(tmp_path: Path, content: str) -> None:
    (tmp_path / "public.json").write_text(content)
    with pytest.raises(InvalidKey):
        KeyDirectory.load(tmp_path)


def test_missing_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidKey):
        KeyDirectory.load(tmp_path / "nowhere")


@pytest.mark.parametrize(
    "content",
    [
        "not json",
        json.dumps({"x25519": "11" * 31, "ed25519": "22" * 32}),
        json.dumps({"x25519": "11" * 32}),
        json.dumps({"x25519": "11" * 32, "ed25519": "22" * 31}),
    ],
    ids=["not-json", "short-x25519", "no-ed25519", "short-ed25519"],
)
def test_malformed_private_file_is_refused_without_echoing_it(
    keydir: KeyDirectory, content: str
) -> None:
    path = keydir.path / "shuffler-1.key"
    path.write_text(content)
    with pytest.raises(InvalidKey) as info:
        keydir.private("shuffler-1")
    assert "11" * 16 not in str(info.value)  # the file's (secret) contents are not echoed


def test_create_refuses_to_overwrite(keydir: KeyDirectory) -> None:
    root = keydir.path
    before = {p.name: p.read_bytes() for p in root.iterdir()}
    with pytest.raises(CryptoParameterError, match="not overwriting"):
        KeyDirectory.create(root, shufflers=3)
    with pytest.raises(CryptoParameterError, match="not overwriting"):
        KeyDirectory.create(root, shufflers=1)
    assert {p.name: p.read_bytes() for p in root.iterdir()} == before


def test_create_over_stale_private_file_is_a_typed_error(tmp_path: Path) -> None:
    root = tmp_path / "keys"
    root.mkdir()
    (root / "shuffler-1.key").write_text("stale")
    with pytest.raises(CryptoParameterError):
        KeyDirectory.create(root, shufflers=1)


@pytest.mark.parametrize("m", [0, -1, True, 1.5, "3", None])
def test_create_refuses_bad_shuffler_count(tmp_path: Path, m: object) -> None:
    with pytest.raises(CryptoParameterError, match="shufflers"):
        KeyDirectory.create(tmp_path / "k", shufflers=m)  # type: ignore[arg-type]
    assert not (tmp_path / "k").exists()


def test_create_one_shuffler(tmp_path: Path) -> None:
    d = KeyDirectory.create(tmp_path / "k1", shufflers=1)
    assert [p.name for p in d.route()] == ["shuffler-1", "analyzer"]
    assert d.shufflers == 1


def test_generated_directories_are_independent(tmp_path: Path) -> None:
    a = KeyDirectory.create(tmp_path / "a", shufflers=2)
    b = KeyDirectory.create(tmp_path / "b", shufflers=2)
    pubs = {p.layer_public for p in a.route()} | {p.layer_public for p in b.route()}
    assert len(pubs) == 6


def test_malformed_key_directories_are_invalid_key_errors(keydir: KeyDirectory) -> None:
    root = keydir.path
    doc = json.loads((root / "public.json").read_text())

    def load_with(changed: object) -> None:
        (root / "public.json").write_text(json.dumps(changed))
        KeyDirectory.load(root)

    # One party named twice routed two hops through one key.
    twice = {**doc, "parties": [doc["parties"][0], *doc["parties"][:1], *doc["parties"][2:]]}
    with pytest.raises(InvalidKey, match="shuffler-1, shuffler-1"):
        load_with(twice)
    for version in (True, 1.0, "1"):
        with pytest.raises(InvalidKey, match="unsupported version"):
            load_with({**doc, "version": version})
    (root / "public.json").write_text("[" * 100_000)  # RecursionError in json.loads
    with pytest.raises(InvalidKey):
        KeyDirectory.load(root)
    (root / "public.json").write_text(json.dumps(doc))
    key = root / "shuffler-1.key"
    key.write_text("[" * 100_000)
    with pytest.raises(InvalidKey):
        KeyDirectory.load(root).private("shuffler-1")


def test_a_route_without_keys_and_bad_batch_entries_are_refused_typed() -> None:
    with pytest.raises(CryptoParameterError, match="at least one hop"):
        wrap_report(pad(b"secret", 8), [], epoch=1, first_hop=3)
    with pytest.raises(CryptoParameterError):
        unpad(b"\x00", -1)
    key = LayerPrivateKey.generate()
    route = [key.public_key]
    good = wrap_report(pad(b"v", 8), route, epoch=1)
    peeled = peel_batch([good, None, b"x"], key, epoch=1, hop=0)  # type: ignore[list-item]
    assert peeled[0] is not None
    assert peeled[1:] == [None, None]


# --------------------------------------------------------------------------- weak public keys


@pytest.mark.parametrize("point", SMALL_ORDER_ED25519, ids=lambda b: b.hex()[:8] + b.hex()[-2:])
def test_party_public_refuses_a_small_order_verify_key(point: bytes) -> None:
    real = PartyKeys.generate("shuffler-1").public()
    with pytest.raises(InvalidKey, match=f"verify_public {point.hex()}"):
        PartyPublic("shuffler-1", real.layer_public, point)


@pytest.mark.parametrize("point", LOW_ORDER_X25519, ids=lambda b: b.hex()[:8] + b.hex()[-2:])
def test_party_public_refuses_a_low_order_layer_key(point: bytes) -> None:
    real = PartyKeys.generate("analyzer").public()
    with pytest.raises(InvalidKey, match=f"layer_public {point.hex()}"):
        PartyPublic("analyzer", point, real.verify_public)


def test_generated_public_keys_are_never_weak() -> None:
    for _ in range(50):
        public = PartyKeys.generate("analyzer").public()
        assert PartyPublic(public.name, public.layer_public, public.verify_public) == public


@pytest.mark.parametrize("field", ["x25519", "ed25519"])
def test_key_directory_with_a_weak_public_key_is_refused(keydir: KeyDirectory, field: str) -> None:
    """An identity verify key in public.json would let anyone sign as that shuffler."""
    path = keydir.path / "public.json"
    doc = json.loads(path.read_text())
    doc["parties"][1][field] = (b"\x01" + bytes(31)).hex()
    path.write_text(json.dumps(doc))
    with pytest.raises(InvalidKey, match="shuffler-2"):
        KeyDirectory.load(keydir.path)


def test_create_refuses_an_empty_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``create("")`` wrote private keys into the current directory."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(CryptoParameterError, match="path is required"):
        KeyDirectory.create("", shufflers=1)
    assert list(tmp_path.iterdir()) == []


def test_create_where_a_file_is_in_the_way_is_a_typed_error(tmp_path: Path) -> None:
    """A file at (or above) the path raised a bare FileExistsError / NotADirectoryError."""
    blocker = tmp_path / "keys"
    blocker.write_text("not a directory")
    for path in (blocker, blocker / "sub"):
        with pytest.raises(CryptoParameterError, match="cannot create key directory"):
            KeyDirectory.create(path, shufflers=1)
    assert blocker.read_text() == "not a directory"


@pytest.mark.parametrize("field", ["x25519", "ed25519"])
@pytest.mark.parametrize(("source", "target"), [(0, 1), (0, 3), (2, 1)])
def test_a_key_shared_by_two_parties_is_refused(
    keydir: KeyDirectory, field: str, source: int, target: int
) -> None:
    """Distinct names were checked but not distinct keys: one layer key listed for two
    shufflers (or a shuffler and the analyzer) lets its holder peel both layers."""
    path = keydir.path / "public.json"
    doc = json.loads(path.read_text())
    doc["parties"][target][field] = doc["parties"][source][field]
    path.write_text(json.dumps(doc))
    with pytest.raises(InvalidKey, match=f"{NAMES[min(source, target)]} and .* share the"):
        KeyDirectory.load(keydir.path)
