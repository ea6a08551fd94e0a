"""Generate the known-answer vectors of simulations/conformance/vectors/ (onion, padding,
Split-Mix).

Run once, from the repository root, and commit the JSON it writes::

    python tests/vectors/generate.py            # (re)write onion.json, padding.json, splitmix.json
    python tests/vectors/generate.py --check    # exit 1 if the committed files differ

Every input is derived from a fixed label with SHA-256 (no randomness), so the files are
reproducible byte for byte. The vectors are computed by an *independent* reference
implementation of the formats as documented in ``crypto/_onion.py``, ``crypto/_padding.py``
and ``crypto/_splitmix.py`` — X25519 from pyca/cryptography (OpenSSL) and ChaCha20-Poly1305
from libsodium, i.e. the other library for each primitive than the one ``crypto`` uses — and
the script refuses to write unless ``crypto`` produces the same bytes. A format change is
therefore a deliberate act: change the documented format, this reference, and regenerate.

Onion layer (one per hop, outermost first)::

    report   = 0x01 ‖ epk (32) ‖ ChaCha20-Poly1305(key, nonce = 0^12, header ‖ inner, ad)
    header   = 0x01 ‖ crowd_id (u64 big-endian)
    ad       = 0x01 ‖ epoch (u64 BE) ‖ hop (u16 BE) ‖ epk
    shared   = X25519(ephemeral secret, recipient public key)
    key      = BLAKE2b-256(shared ‖ epk ‖ recipient public key, person = "esa-onion-key-v1")

Large integers in splitmix.json are decimal strings (JSON numbers lose precision above 2^53
in many readers).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import struct
import sys
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from nacl import bindings

HERE = Path(__file__).resolve().parents[2] / "simulations" / "conformance" / "vectors"
_PERSON = b"esa-onion-key-v1"


def _derive(label: str, size: int = 32) -> bytes:
    """Deterministic bytes for ``label`` (SHA-256 in counter mode)."""
    out = b""
    counter = 0
    while len(out) < size:
        out += hashlib.sha256(f"esa-vectors/{label}/{counter}".encode()).digest()
        counter += 1
    return out[:size]


def _derive_int(label: str, modulus: int) -> int:
    # 64 extra bits make the modular bias negligible; irrelevant for a test vector anyway.
    return int.from_bytes(_derive(label, 16), "big") % modulus


# --------------------------------------------------------------------------- onion


def _public(secret: bytes) -> bytes:
    return X25519PrivateKey.from_private_bytes(secret).public_key().public_bytes_raw()


def _reference_layer(
    inner: bytes, recipient: bytes, esk: bytes, *, epoch: int, hop: int, crowd_id: int
) -> dict[str, str | bytes]:
    epk = _public(esk)
    shared = X25519PrivateKey.from_private_bytes(esk).exchange(
        X25519PublicKey.from_public_bytes(recipient)
    )
    key = hashlib.blake2b(shared + epk + recipient, digest_size=32, person=_PERSON).digest()
    ad = struct.pack(">BQH", 1, epoch, hop) + epk
    plain = struct.pack(">BQ", 1, crowd_id) + inner
    body = bindings.crypto_aead_chacha20poly1305_ietf_encrypt(plain, ad, bytes(12), key)
    return {
        "ephemeral_public": epk.hex(),
        "shared_secret": shared.hex(),
        "layer_key": key.hex(),
        "associated_data": ad.hex(),
        "report": b"\x01" + epk + body,
    }


_ONION_CASES: list[dict[str, Any]] = [
    # name, parties (indices into a 5-party key set), epoch, crowd id, first hop, payload
    {"name": "analyzer-only", "parties": [4], "epoch": 0, "crowd_id": 0, "first_hop": 0},
    {"name": "one-shuffler", "parties": [0, 4], "epoch": 1, "crowd_id": 1, "first_hop": 0},
    {"name": "two-shufflers", "parties": [0, 1, 4], "epoch": 2**32 + 5, "crowd_id": 42},
    {
        "name": "three-shufflers-max-fields",
        "parties": [0, 1, 2, 4],
        "epoch": 2**64 - 1,
        "crowd_id": 2**64 - 1,
    },
    {
        # A fake injected by shuffler-2 (hop 1) is wrapped for hops 2.. only.
        "name": "fake-from-hop-2",
        "parties": [2, 4],
        "epoch": 7,
        "crowd_id": 3,
        "first_hop": 2,
    },
    {"name": "empty-payload", "parties": [0, 1, 2, 3, 4], "epoch": 9, "crowd_id": 0},
]

_ONION_PAYLOADS = {
    "analyzer-only": bytes(2 + 8),  # pad(b"", 8)
    "one-shuffler": b"\x00\x05hello" + bytes(11),  # pad(b"hello", 16)
    "two-shufflers": _derive("payload/two-shufflers", 32),
    "three-shufflers-max-fields": b"\x00\x14" + bytes(range(20)) + bytes(4),
    "fake-from-hop-2": _derive("payload/fake", 12),
    "empty-payload": b"",
}


def onion_vectors() -> dict[str, Any]:
    party_secrets = [_derive(f"party/{i}") for i in range(5)]
    cases = []
    for spec in _ONION_CASES:
        name = spec["name"]
        parties = spec["parties"]
        first_hop = spec.get("first_hop", 0)
        payload = _ONION_PAYLOADS[name]
        route = [_public(party_secrets[p]) for p in parties]
        esks = [_derive(f"ephemeral/{name}/{j}") for j in range(len(route))]
        layers: list[dict[str, Any]] = []
        inner = payload
        for j in range(len(route) - 1, -1, -1):
            layer = _reference_layer(
                inner,
                route[j],
                esks[j],
                epoch=spec["epoch"],
                hop=first_hop + j,
                crowd_id=spec["crowd_id"],
            )
            inner = layer.pop("report")  # type: ignore[assignment]
            layers.insert(0, {"hop": first_hop + j, **layer, "report_at_hop": inner.hex()})
        cases.append(
            {
                "name": name,
                "private_keys": [party_secrets[p].hex() for p in parties],
                "route": [pk.hex() for pk in route],
                "ephemeral_secrets": [e.hex() for e in esks],
                "epoch": spec["epoch"],
                "crowd_id": spec["crowd_id"],
                "first_hop": first_hop,
                "payload": payload.hex(),
                "report": inner.hex(),
                "layers": layers,
            }
        )
    return {
        "description": (
            "Onion reports: X25519 + BLAKE2b-256 + ChaCha20-Poly1305 per layer, outermost "
            "first. Inputs: private_keys[j] is hop first_hop+j's X25519 secret, route[j] its "
            "public key, ephemeral_secrets[j] the pinned ephemeral secret of layer j. "
            "layers[j].report_at_hop is what hop first_hop+j receives; peeling the last one "
            "yields payload. Generated by tests/vectors/generate.py."
        ),
        "cases": cases,
    }


# --------------------------------------------------------------------------- padding


def _reference_pad(payload: bytes, size: int) -> bytes:
    return len(payload).to_bytes(2, "big") + payload + b"\x00" * (size - len(payload))


def padding_vectors() -> dict[str, Any]:
    valid = []
    for size, payload in [
        (0, b""),
        (1, b""),
        (1, b"\xff"),
        (8, b"abc"),
        (16, b"\x00" * 16),
        (300, _derive("padding/258", 258)),  # length prefix 0x0102: checks byte order
    ]:
        valid.append(
            {
                "size": size,
                "payload": payload.hex(),
                "padded": _reference_pad(payload, size).hex(),
            }
        )
    invalid = [
        {"size": 4, "padded": "0005" + "0102030405", "why": "length 5 > size 4, wrong total"},
        {"size": 4, "padded": "000501020304", "why": "length prefix 5 exceeds size 4"},
        {"size": 4, "padded": "000201020300", "why": "non-zero padding byte"},
        {"size": 4, "padded": "000201020001", "why": "non-zero last padding byte"},
        {"size": 4, "padded": "0002010200", "why": "one byte short"},
        {"size": 4, "padded": "00020102000000", "why": "one byte long"},
        {"size": 4, "padded": "", "why": "empty"},
        {"size": 0, "padded": "0001", "why": "length 1 with size 0"},
        {"size": 4, "padded": "ff0001020304", "why": "huge length prefix"},
    ]
    return {
        "description": (
            "Padding: u16 big-endian length ‖ payload ‖ zero bytes, 2 + size bytes in all. "
            "invalid[] must raise InvalidReport from unpad(padded, size)."
        ),
        "valid": valid,
        "invalid": invalid,
    }


# --------------------------------------------------------------------------- Split-Mix


def splitmix_vectors() -> dict[str, Any]:
    split = []
    for q, m, k in [
        (2, 2, 4),
        (7, 3, 5),
        (2**31 - 1, 4, 3),
        (2**31, 3, 3),
        (2**62 - 57, 5, 3),
        (2**62, 3, 4),
    ]:
        values = [_derive_int(f"splitmix/{q}/{m}/value/{i}", q) for i in range(k - 1)] + [q - 1]
        head = [
            [_derive_int(f"splitmix/{q}/{m}/head/{i}/{j}", q) for j in range(m - 1)]
            for i in range(k)
        ]
        rows = [[*h, (x - sum(h)) % q] for x, h in zip(values, head, strict=True)]
        split.append(
            {
                "modulus": str(q),
                "shares": m,
                "values": [str(v) for v in values],
                "head": [[str(v) for v in h] for h in head],
                "expected": [[str(v) for v in r] for r in rows],
            }
        )
    combine = []
    for q, items in [
        (2, [1, 1, 1]),
        (97, [_derive_int(f"combine/97/{i}", 97) for i in range(50)]),
        (2**31, [2**31 - 1] * 40),
        (2**62, [2**62 - 1] * 64),  # a naive int64 sum overflows after 2 terms
        (2**62 - 57, [_derive_int(f"combine/big/{i}", 2**62 - 57) for i in range(100)]),
    ]:
        combine.append(
            {"modulus": str(q), "shares": [str(v) for v in items], "sum": str(sum(items) % q)}
        )
    return {
        "description": (
            "Split-Mix over Z_q: split[].expected[i] = head[i] ‖ (values[i] − Σ head[i]) mod q "
            "(the first m−1 shares are the uniform draws, the last completes the sum); "
            "combine[].sum = Σ shares mod q. Integers are decimal strings."
        ),
        "split": split,
        "combine": combine,
    }


# --------------------------------------------------------------------------- cross-check


def _cross_check(onion: dict[str, Any], padding: dict[str, Any], split: dict[str, Any]) -> None:
    """Refuse to write vectors the implementation under test does not reproduce."""
    import numpy as np

    from crypto import combine_shares, pad
    from crypto._onion import _wrap_from_parts

    for case in onion["cases"]:
        got = _wrap_from_parts(
            bytes.fromhex(case["payload"]),
            [bytes.fromhex(k) for k in case["route"]],
            epoch=case["epoch"],
            crowd_id=case["crowd_id"],
            first_hop=case["first_hop"],
            ephemeral_secrets=[bytes.fromhex(e) for e in case["ephemeral_secrets"]],
        )
        if got.hex() != case["report"]:
            raise SystemExit(f"crypto disagrees with the reference on onion case {case['name']}")
    for v in padding["valid"]:
        if pad(bytes.fromhex(v["payload"]), v["size"]).hex() != v["padded"]:
            raise SystemExit(f"crypto.pad disagrees with the reference: {v}")
    for c in split["combine"]:
        got_sum = combine_shares(np.array([int(s) for s in c["shares"]]), modulus=int(c["modulus"]))
        if str(got_sum) != c["sum"]:
            raise SystemExit(f"crypto.combine_shares disagrees with the reference: {c['modulus']}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare, do not write")
    args = parser.parse_args(argv)
    docs = {
        "onion.json": onion_vectors(),
        "padding.json": padding_vectors(),
        "splitmix.json": splitmix_vectors(),
    }
    _cross_check(docs["onion.json"], docs["padding.json"], docs["splitmix.json"])
    stale = []
    for name, doc in docs.items():
        text = json.dumps(doc, indent=1) + "\n"
        path = HERE / name
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(name)
        else:
            path.write_text(text)
            print(f"wrote {path}")
    if stale:
        print(f"stale vectors: {', '.join(stale)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
