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
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import trio
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

import crypto
import esa
from esa import SubmitStats, close_epochs_together, parse_address, query, submit_reports
from esa.net import QueryKind
from protocols import ProtocolSpec, build_protocol

from .._common import UsageError, emit_json, parse_options, print_table, seed
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
    p.add_argument(
        "--protocol",
        help="protocol name (default: the one the first shuffler serves, from its STATUS)",
    )
    p.add_argument(
        "--n",
        type=int,
        default=None,
        help="users to submit (default: the deployment's n, else 10000); with --query "
        "result, the users to estimate for (default: inferred from the messages)",
    )
    # The parties' [protocol] values win; these flags may only repeat them.
    p.add_argument(
        "--domain", type=int, default=None, help="domain size (default: the parties', else 16)"
    )
    p.add_argument(
        "--epsilon", type=float, default=None, help="central ε (default: the parties', else 1)"
    )
    p.add_argument("--delta", type=float, default=None, help="δ (default: the parties', else 1e-6)")
    p.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a protocol option (as for esa simulate), when the parties do not state theirs",
    )
    p.add_argument("--distribution", default="zipf", help="synthetic data (default zipf)")
    p.add_argument("--seed", type=seed, default=0, help="seed of the statistics")
    p.add_argument(
        "--crypto",
        choices=["onion", "ideal"],
        default=None,
        help="report format (default: the first shuffler's, from its STATUS; else onion)",
    )
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
    p.add_argument(
        "--make-auditor-key",
        metavar="FILE",
        default=None,
        help="instead of submitting: write a new trap auditor key (mode 0600) and print the "
        "public key to put in the analyzer's [auditor] table (it signs esa.commit_traps "
        "and esa.open_traps)",
    )
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    p.set_defaults(handler=run)


def _make_key(path: str) -> int:
    """Write a new Ed25519 key (hex seed, mode 0600) and print its public key: an operator
    key or a trap auditor key, which differ only in which table holds the public key."""
    key = Ed25519PrivateKey.generate()
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise UsageError(f"{path} exists; not overwriting a key") from None
    except OSError as exc:  # no such directory, not writable, name too long
        raise UsageError(f"cannot write a key to {path}: {exc.strerror or exc}") from None
    with os.fdopen(fd, "w") as fh:
        fh.write(key.private_bytes_raw().hex() + "\n")
    print(key.public_key().public_bytes_raw().hex())
    return 0


#: What a submit encodes with when neither the parties nor the flags say.
_DEFAULTS = {"epsilon": 1.0, "delta": 1e-6, "domain": 16, "n": 10_000}


def _deployment(addresses: list[esa.Address]) -> tuple[dict[str, Any] | None, str | None]:
    """The ``[protocol]`` and the report format (``crypto``) the chains' first shufflers
    serve, from their STATUS; None for what they do not state (a simulation's pickled
    protocol). Every chain must agree."""
    states = []
    for address in addresses:
        try:
            status = trio.run(query, address, QueryKind.STATUS)
        except (OSError, trio.TooSlowError, esa.ESAError) as exc:
            raise UsageError(f"cannot read the status of {address}: {exc}") from None
        states.append((status.get("protocol"), status.get("crypto")))
    if any(st != states[0] for st in states):
        raise UsageError(f"the chains' first shufflers serve different protocols: {states}")
    table, mode = states[0]
    return (table if isinstance(table, dict) and "epsilon" in table else None), mode


def _protocol(args: argparse.Namespace, deployment: dict[str, Any] | None) -> Any:
    """The protocol to encode with: the deployment's, which the flags may only repeat;
    else the flags' (``--protocol`` required)."""
    options = parse_options(args.option)
    if deployment is not None:
        given = {
            "name": args.protocol,
            "epsilon": args.epsilon,
            "delta": args.delta,
            "domain": args.domain,
        }
        for key, value in given.items():
            if value is not None and value != deployment[key]:
                raise UsageError(
                    f"the parties serve {deployment['name']} with {key} = {deployment[key]!r}, "
                    f"not {value!r}: drop the flag (reports must be encoded for what the "
                    "parties estimate)"
                )
        if options and options != deployment.get("options", {}):
            raise UsageError(
                f"the parties serve options {deployment.get('options', {})}, not {options}"
            )
        return esa.load_protocol(deployment)  # as the parties build it from their config
    if not args.protocol:
        raise UsageError("the parties do not state their protocol: give --protocol NAME")
    spec = ProtocolSpec(
        epsilon=_DEFAULTS["epsilon"] if args.epsilon is None else args.epsilon,
        delta=_DEFAULTS["delta"] if args.delta is None else args.delta,
        n=args.n or int(_DEFAULTS["n"]),
        domain=int(_DEFAULTS["domain"] if args.domain is None else args.domain),
        options=options,
    )
    return build_protocol(args.protocol, spec)


def _operator_key(path: str) -> Ed25519PrivateKey:
    try:
        return Ed25519PrivateKey.from_private_bytes(bytes.fromhex(Path(path).read_text().strip()))
    except OSError as exc:
        raise UsageError(f"cannot read operator key {path}: {exc.strerror or exc}") from None
    except ValueError:
        raise UsageError(
            f"{path} is not an operator key (64 hex digits, as --make-operator-key writes)"
        ) from None


def run(args: argparse.Namespace) -> int:
    if args.make_operator_key and args.make_auditor_key:
        raise UsageError("give --make-operator-key or --make-auditor-key, not both")
    if args.make_operator_key or args.make_auditor_key:
        return _make_key(args.make_operator_key or args.make_auditor_key)
    if not args.to:
        raise UsageError("--to HOST:PORT is required")
    addresses = [parse_address(a.strip()) for a in args.to.split(",")]
    address = addresses[0]
    if args.n is not None and args.n < 1:
        raise UsageError(f"--n must be >= 1, got {args.n}")
    if args.query:
        if len(addresses) != 1:
            raise UsageError("--query asks one party: give one --to HOST:PORT")
        what = QueryKind.STATUS if args.query == "status" else QueryKind.RESULT
        params = {"n": args.n} if args.query == "result" and args.n is not None else {}
        try:
            emit_json(trio.run(query, address, what, params))
        except (OSError, trio.TooSlowError) as exc:
            raise UsageError(f"cannot query {address}: {exc}") from None
        return 0
    if not args.keys:
        raise UsageError("submitting needs --keys DIR")
    if args.connections < 1 or args.frame_reports < 1 or args.retries < 0:
        raise UsageError("--connections and --frame-reports must be >= 1, --retries >= 0")
    if not 0 <= args.key_epoch < 2**32:
        raise UsageError(f"--key-epoch must lie in [0, 2**32), got {args.key_epoch}")
    operator = _operator_key(args.close_epoch) if args.close_epoch else None
    keydir = crypto.KeyDirectory.load(args.keys)
    deployment, mode = _deployment(addresses)
    if mode is not None and args.crypto not in (None, mode):
        raise UsageError(f"the parties take --crypto {mode} reports, not {args.crypto}")
    args.crypto = args.crypto or mode or "onion"
    protocol = _protocol(args, deployment)
    users = args.n or int((deployment or _DEFAULTS)["n"])
    data_rng, stats_rng = np.random.default_rng(args.seed).spawn(2)
    values = generate_values(protocol, users, args.distribution, rng=data_rng)
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

    async def main() -> dict[str, Any]:
        t0 = time.perf_counter()
        parts = [
            await submit_reports(
                to,
                reports,
                key_epoch=args.key_epoch,
                connections=args.connections,
                frame_reports=args.frame_reports,
                retries=args.retries,
            )
            for to, reports in zip(addresses, per_chain, strict=True)
        ]
        out = SubmitStats.merged(parts, seconds=time.perf_counter() - t0).to_json()
        if operator is not None and not out["acknowledged"]:
            out["close_error"] = "nothing was acknowledged, so no epoch was closed"
        elif operator is not None:
            # Idempotent, chain-aligned closes (CLOSE_EPOCH_AT): safe to resend after a
            # lost reply, and a chain an earlier partial close left behind catches up.
            try:
                closed = await close_epochs_together(addresses, operator, retries=args.retries)
                out["epochs_closed"] = sum(closed)
            except (OSError, trio.TooSlowError, esa.ESAError) as exc:
                out["close_error"] = str(exc)  # after the submit's own figures, not instead
        return out

    out = trio.run(main)
    if args.json:
        emit_json(out)
    else:
        rows = [(k, _cell(v)) for k, v in out.items()]
        print_table("esa submit", ["quantity", "value"], rows)
    problems = []
    if out["failed_frames"]:
        reasons = ", ".join(f"{k} ×{v}" for k, v in out["failure_reasons"].items())
        problems.append(f"{out['failed_frames']} frames were not acknowledged ({reasons})")
    if "close_error" in out:
        problems.append(f"closing the epoch failed: {out['close_error']}")
    if problems:
        print(f"esa submit: {'; '.join(problems)}", file=sys.stderr)
    return 1 if problems else 0


def _cell(value: Any) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k}: {v}" for k, v in value.items()) or "–"
    return str(value)
