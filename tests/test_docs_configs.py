"""The party configs shown in the README and docs/network.md are ones `esa serve` accepts."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from esa import load_protocol
from esa.net import protocol_table
from esa.net._config import config_from_dict

ROOT = Path(__file__).resolve().parent.parent
DOCS = ["README.md", "docs/network.md"]


def _toml_blocks() -> list[tuple[str, str]]:
    blocks = []
    for name in DOCS:
        text = (ROOT / name).read_text(encoding="utf-8")
        blocks += [(name, b) for b in re.findall(r"```toml\n(.*?)```", text, re.S)]
    return blocks


def test_the_docs_show_configs() -> None:
    assert {name for name, _ in _toml_blocks()} == set(DOCS)


@pytest.mark.parametrize(("source", "block"), _toml_blocks())
def test_a_documented_config_is_accepted_as_written(source: str, block: str) -> None:
    # Keys shown elided ("ed3aef9e…") stand for a real key (a made-up one is refused).
    real = Ed25519PrivateKey.generate().public_key().public_bytes_raw().hex()
    doc = tomllib.loads(re.sub(r'"[0-9a-f]+…"', f'"{real}"', block))
    config = config_from_dict(doc, base=ROOT)
    assert config.role in {"shuffler", "analyzer"}
    table = protocol_table(doc["protocol"])
    assert load_protocol(table).name == doc["protocol"]["name"]
