"""``esa submit --to HOST:PORT ...``: encode synthetic users and submit their reports.

A load generator and reference client: it encodes ``--n`` users' values with the protocol
and the key directory's public keys, then submits the reports to the first shuffler over
``--connections`` concurrent connections, resending a frame on any failure. Every report is
counted acknowledged at most once (when its frame's ACK arrives); a resend is harmless
because the shuffler's inbox stores a report at most once.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

import numpy as np
import trio
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

import crypto
import esa
from esa import close_epochs_together, parse_address, query, submit_reports
from protocols import ProtocolSpec, build_protocol

from .._common import UsageError, emit_json, print_table, seed
from .._data import generate_values


def register(sub: Any) -> None:
    p = sub.add_parser(
        "submit",
        help="encode synthetic users and submit their reports to the first shuffler",
        description="Load generator: encode users' values, submit over many connections "
        "with retry, print what was acknowledged.",
    )
    p.add_argument(
        "--to",
        metavar="HOST:PORT",
        help="the first shuffler (or a party to --query); for a protocol with several "
        "shuffler chains (rsum_rm), the first shuffler of every chain, comma-separated in "
        "chain order",
    )
    p.add_argument("--keys", help="key directory (public.json is enough)")
    p.add_argument("--key-epoch", type=int, default=1, help="key epoch (default 1)")
    p.add_argument("--protocol", help="protocol name")
    p.add_argument("--n", type=int, default=10_000, help="users (default 10000)")
    p.add_argument("--domain", type=int, default=16, help="domain size (default 16)")
    p.add_argument("--epsilon", type=float, default=1.0, help="central ε (default 1)")
    p.add_argument("--delta", type=float, default=1e-6, help="δ (default 1e-6)")
    p.add_argument("--distribution", default="zipf", help="synthetic data (default zipf)")
    p.add_argument("--seed", type=seed, default=0, help="seed of the statistics")
    p.add_argument("--crypto", choices=["onion", "ideal"], default="onion")
    p.add_argument("--connections", type=int, default=50, help="concurrent connections")
    p.add_argument("--frame-reports", type=int, default=100, help="reports per SUBMIT frame")
    p.add_argument("--retries", type=int, default=20, help="resends per frame before giving up")
    p.add_argument(
        "--close-epoch",
        metavar="OPERATOR_KEY",
        default=None,
        help="after submitting, close the epoch with this operator key file (hex seed)",
    )
    p.add_argument(
        "--query",
        choices=["status", "result"],
        default=None,
        help="instead of submitting: ask the party at --to for its status, or the "
        "analyzer for its result (with --n users)",
    )
    p.add_argument(
        "--make-operator-key",
        metavar="FILE",
        default=None,
        help="instead of submitting: write a new operator key (mode 0600) and print the "
        "public key to put in the first shuffler's [operator] table",
    )
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    p.set_defaults(handler=run)


def _make_operator_key(path: str) -> int:
    key = Ed25519PrivateKey.generate()
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise UsageError(f"{path} exists; not overwriting a key") from None
    with os.fdopen(fd, "w") as fh:
        fh.write(key.private_bytes_raw().hex() + "\n")
    print(key.public_key().public_bytes_raw().hex())
    return 0


def run(args: argparse.Namespace) -> int:
    if args.make_operator_key:
        return _make_operator_key(args.make_operator_key)
    if not args.to:
        raise UsageError("--to HOST:PORT is required")
    addresses = [parse_address(a.strip()) for a in args.to.split(",")]
    address = addresses[0]
    if args.query:
        if len(addresses) != 1:
            raise UsageError("--query asks one party: give one --to HOST:PORT")
        what = crypto.QueryKind.STATUS if args.query == "status" else crypto.QueryKind.RESULT
        params = {"n": args.n} if args.query == "result" else {}
        emit_json(trio.run(query, address, what, params))
        return 0
    if not args.keys or not args.protocol:
        raise UsageError("submitting needs --keys DIR and --protocol NAME")
    if args.connections < 1 or args.frame_reports < 1 or args.n < 1:
        raise UsageError("--n, --connections and --frame-reports must be >= 1")
    keydir = crypto.KeyDirectory.load(args.keys)
    spec = ProtocolSpec(epsilon=args.epsilon, delta=args.delta, n=args.n, domain=args.domain)
    protocol = build_protocol(args.protocol, spec)
    data_rng, stats_rng = np.random.default_rng(args.seed).spawn(2)
    values = generate_values(protocol, args.n, args.distribution, rng=data_rng)
    channels = protocol.channels
    if len(addresses) != channels:
        raise UsageError(
            f"{protocol.name} sends its messages through {channels} shuffler chain(s): give "
            f"--to with the first shuffler of each ({channels} comma-separated HOST:PORT), "
            f"got {len(addresses)}"
        )
    # One chain per channel (docs/network.md): each channel's messages are sealed for its
    # own chain's keys and submitted to that chain's first shuffler.
    routes = [
        [p.layer_public for p in esa.chain_route(keydir, channels=channels, channel=c)]
        for c in range(channels)
    ]
    codec = esa.make_codec(args.crypto, message_size=protocol.message_size, layers=len(routes[0]))
    messages = esa.Encoder(protocol, codec, routes[0]).messages(values, rng=stats_rng)
    channel_of = protocol.channel_of(messages)
    per_chain = []
    for c, route in enumerate(routes):
        batch = esa.Encoder(protocol, codec, route).seal_messages(
            messages[channel_of == c], epoch=args.key_epoch, crowd_id=0, first_hop=0
        )
        per_chain.append(
            [r.tobytes() for r in batch] if args.crypto == "ideal" else [bytes(r) for r in batch]
        )
    operator = None
    if args.close_epoch:
        key_seed = bytes.fromhex(Path(args.close_epoch).read_text().strip())
        operator = Ed25519PrivateKey.from_private_bytes(key_seed)

    async def main() -> dict[str, Any]:
        out: dict[str, Any] = {}
        for to, reports in zip(addresses, per_chain, strict=True):
            stats = await submit_reports(
                to,
                reports,
                key_epoch=args.key_epoch,
                connections=args.connections,
                frame_reports=args.frame_reports,
                retries=args.retries,
            )
            for k, v in stats.to_json().items():
                out[k] = out.get(k, 0) + v
        if len(addresses) > 1:  # per-chain rates do not add up; report the overall one
            out["reports_per_second"] = out["acknowledged"] / out["seconds"]
        if operator is not None:
            # Idempotent, chain-aligned closes (CLOSE_EPOCH_AT): safe to resend after a
            # lost reply, and a chain an earlier partial close left behind catches up.
            closed = await close_epochs_together(addresses, operator, retries=args.retries)
            out["epochs_closed"] = sum(closed)
        return out

    out = trio.run(main)
    if args.json:
        emit_json(out)
    else:
        print_table("esa submit", ["quantity", "value"], list(out.items()))
    return 0 if out["failed_frames"] == 0 else 1
