"""``esa keygen``: a key directory for m shufflers and an analyzer."""

from __future__ import annotations

import argparse
from typing import Any

from crypto import KeyDirectory

from .._common import emit_json, print_table


def register(sub: Any) -> None:
    p = sub.add_parser(
        "keygen",
        help="create X25519 + Ed25519 keys for m shufflers and an analyzer",
        description="Write DIR/public.json (every party's public keys) and one private key "
        "file per party (mode 0600).",
    )
    p.add_argument("--out", required=True, help="directory to create")
    p.add_argument("--shufflers", type=int, default=3, help="number of shufflers (default 3)")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    keys = KeyDirectory.create(args.out, shufflers=args.shufflers)
    parties = [
        {
            "name": p.name,
            "x25519": p.layer_public.hex(),
            "ed25519": p.verify_public.hex(),
            "private_key_file": str(keys.path / f"{p.name}.key"),
        }
        for p in keys.route()
    ]
    if args.json:
        emit_json({"directory": str(keys.path), "parties": parties})
    else:
        print_table(
            f"keys written to {keys.path}",
            ["party", "x25519 public", "ed25519 public", "private key file (0600)"],
            [
                (p["name"], p["x25519"][:16] + "…", p["ed25519"][:16] + "…", p["private_key_file"])
                for p in parties
            ],
        )
    return 0
