"""``esa keygen``: a key directory for m shufflers (per chain) and an analyzer."""

from __future__ import annotations

import argparse
from typing import Any

from crypto import KeyDirectory

from .._common import UsageError, emit_json, print_table


def register(sub: Any) -> None:
    p = sub.add_parser(
        "keygen",
        help="create X25519 + Ed25519 keys for m shufflers and an analyzer",
        description="Write DIR/public.json (every party's public keys) and one private key "
        "file per party (mode 0600).",
    )
    p.add_argument("--out", required=True, help="directory to create")
    p.add_argument("--shufflers", type=int, default=3, help="shufflers per chain (default 3)")
    p.add_argument(
        "--channels",
        type=int,
        default=1,
        help="shuffler chains ending at the one analyzer, e.g. one per precision for "
        "rsum_rm (default 1); chain c's hop i is shuffler-{c*m+i+1}",
    )
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    # A party's config takes hop <= 254 (the analyzer's hop is m) and channels <= 255.
    if not 1 <= args.shufflers <= 254 or not 1 <= args.channels <= 255:
        raise UsageError(
            f"--shufflers must lie in [1, 254] and --channels in [1, 255], got "
            f"{args.shufflers}, {args.channels}"
        )
    if not args.out.strip():  # Path("") is the current directory
        raise UsageError("--out must name a directory, got an empty string")
    m = args.shufflers
    # One directory for every chain: each chain's shufflers get their own keys, all chains
    # share the analyzer (esa.chain_route reads chain c back as shuffler-{c*m+1..c*m+m}).
    try:
        keys = KeyDirectory.create(args.out, shufflers=m * args.channels)
    except OSError as exc:  # --out is a file, or not writable
        raise UsageError(f"cannot write keys to {args.out}: {exc.strerror or exc}") from None
    parties = [
        {
            "name": p.name,
            "channel": i // m if i < keys.shufflers else None,
            "hop": i % m if i < keys.shufflers else m,
            "x25519": p.layer_public.hex(),
            "ed25519": p.verify_public.hex(),
            "private_key_file": str(keys.path / f"{p.name}.key"),
        }
        for i, p in enumerate(keys.route())
    ]
    if args.json:
        emit_json({"directory": str(keys.path), "parties": parties})
    else:
        print_table(
            f"keys written to {keys.path}",
            ["party", "chain", "hop", "x25519 public", "ed25519 public", "private key file (0600)"],
            [
                (
                    p["name"],
                    "all" if p["channel"] is None else str(p["channel"]),
                    str(p["hop"]),
                    p["x25519"][:16] + "…",
                    p["ed25519"][:16] + "…",
                    p["private_key_file"],
                )
                for p in parties
            ],
        )
    return 0
