"""Known-answer vectors (simulations/conformance/vectors/*.json, from tests/vectors/generate.py).

The vectors come from an independent reference implementation of the documented formats
(other libraries for X25519 and ChaCha20-Poly1305), so these tests pin both the bytes on the
wire and their agreement with the format description.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from crypto import (
    InvalidReport,
    LayerPrivateKey,
    combine_shares,
    pad,
    pad_rows,
    peel_report,
    report_size,
    split_mix,
    unpad,
)
from crypto._onion import _wrap_from_parts

VECTORS = Path(__file__).parent.parent / "simulations" / "conformance" / "vectors"


def _load(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((VECTORS / name).read_text())
    return doc


ONION = _load("onion.json")["cases"]
PADDING = _load("padding.json")
SPLITMIX = _load("splitmix.json")


def test_vector_files_are_not_empty() -> None:
    assert len(ONION) >= 5
    assert {len(c["route"]) for c in ONION} >= {1, 2, 3, 4}
    assert len(PADDING["valid"]) >= 5
    assert len(PADDING["invalid"]) >= 5
    assert len(SPLITMIX["split"]) >= 5
    assert len(SPLITMIX["combine"]) >= 4


@pytest.mark.parametrize("case", ONION, ids=lambda c: c["name"])
def test_wrap_from_parts_reproduces_vector(case: dict[str, Any]) -> None:
    report = _wrap_from_parts(
        bytes.fromhex(case["payload"]),
        [bytes.fromhex(k) for k in case["route"]],
        epoch=case["epoch"],
        crowd_id=case["crowd_id"],
        first_hop=case["first_hop"],
        ephemeral_secrets=[bytes.fromhex(e) for e in case["ephemeral_secrets"]],
    )
    assert report.hex() == case["report"]
    assert len(report) == report_size(len(case["payload"]) // 2, len(case["route"]))


@pytest.mark.parametrize("case", ONION, ids=lambda c: c["name"])
def test_peeling_vector_gives_layers_then_payload(case: dict[str, Any]) -> None:
    keys = [LayerPrivateKey(bytes.fromhex(k)) for k in case["private_keys"]]
    assert [k.public_key.hex() for k in keys] == case["route"]
    report = bytes.fromhex(case["report"])
    for key, layer in zip(keys, case["layers"], strict=True):
        assert report.hex() == layer["report_at_hop"]
        assert report[1:33].hex() == layer["ephemeral_public"]
        header, report = peel_report(report, key, epoch=case["epoch"], hop=layer["hop"])
        assert header.crowd_id == case["crowd_id"]
    assert report.hex() == case["payload"]


@pytest.mark.parametrize("case", ONION, ids=lambda c: c["name"])
def test_vector_layer_keys_follow_documented_derivation(case: dict[str, Any]) -> None:
    """key = BLAKE2b-256(shared ‖ epk ‖ recipient, person="esa-onion-key-v1")."""
    for recipient, layer in zip(case["route"], case["layers"], strict=True):
        data = bytes.fromhex(layer["shared_secret"] + layer["ephemeral_public"] + recipient)
        key = hashlib.blake2b(data, digest_size=32, person=b"esa-onion-key-v1").hexdigest()
        assert key == layer["layer_key"]


@pytest.mark.parametrize("case", ONION, ids=lambda c: c["name"])
def test_vector_rejected_at_wrong_hop_and_epoch(case: dict[str, Any]) -> None:
    key = LayerPrivateKey(bytes.fromhex(case["private_keys"][0]))
    report = bytes.fromhex(case["report"])
    hop = case["first_hop"]
    with pytest.raises(InvalidReport):
        peel_report(report, key, epoch=case["epoch"], hop=hop + 1)
    with pytest.raises(InvalidReport):
        peel_report(report, key, epoch=(case["epoch"] + 1) % 2**64, hop=hop)


@pytest.mark.parametrize("vec", PADDING["valid"], ids=lambda v: f"{v['size']}-{v['payload'][:8]}")
def test_padding_vectors(vec: dict[str, Any]) -> None:
    payload = bytes.fromhex(vec["payload"])
    padded = bytes.fromhex(vec["padded"])
    assert pad(payload, vec["size"]) == padded
    assert unpad(padded, vec["size"]) == payload
    rows = np.frombuffer(payload, dtype=np.uint8).reshape(1, -1)
    assert pad_rows(rows, vec["size"]).tobytes() == padded


@pytest.mark.parametrize("vec", PADDING["invalid"], ids=lambda v: v["why"])
def test_invalid_padding_vectors(vec: dict[str, Any]) -> None:
    with pytest.raises(InvalidReport):
        unpad(bytes.fromhex(vec["padded"]), vec["size"])


class _PinnedRng:
    """Stands in for a Generator: ``integers`` returns the vector's pinned uniform shares."""

    def __init__(self, head: np.ndarray) -> None:
        self.head = head

    def integers(self, low: int, high: int, *, size: tuple[int, int], dtype: type) -> np.ndarray:
        assert (low, size, dtype) == (0, self.head.shape, np.int64)
        assert int(self.head.max(initial=0)) < high
        return self.head


@pytest.mark.parametrize("vec", SPLITMIX["split"], ids=lambda v: f"q{v['modulus']}-m{v['shares']}")
def test_split_mix_vectors(vec: dict[str, Any]) -> None:
    q, m = int(vec["modulus"]), vec["shares"]
    values = np.array([int(v) for v in vec["values"]], dtype=np.int64)
    head = np.array([[int(v) for v in h] for h in vec["head"]], dtype=np.int64)
    expected = [[int(v) for v in row] for row in vec["expected"]]
    out = split_mix(values, modulus=q, shares=m, rng=_PinnedRng(head))  # type: ignore[arg-type]
    assert out.tolist() == expected
    for x, row in zip(vec["values"], expected, strict=True):
        assert combine_shares(np.array(row), modulus=q) == int(x)


@pytest.mark.parametrize("vec", SPLITMIX["combine"], ids=lambda v: f"q{v['modulus']}")
def test_combine_vectors(vec: dict[str, Any]) -> None:
    shares = np.array([int(s) for s in vec["shares"]], dtype=np.int64)
    assert combine_shares(shares, modulus=int(vec["modulus"])) == int(vec["sum"])


def test_committed_vectors_match_the_independent_reference() -> None:
    """Regenerating (OpenSSL X25519 + libsodium AEAD reference) gives the committed files."""
    spec = importlib.util.spec_from_file_location(
        "_vector_generator", Path(__file__).parent / "vectors" / "generate.py"
    )
    assert spec is not None
    assert spec.loader is not None
    generator = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generator)
    assert generator.main(["--check"]) == 0
