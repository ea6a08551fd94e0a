"""``esa close-epoch``: the operator closes a first shuffler's epoch now, no users needed.

The command is a CONTROL frame signed by the operator's key and bound to the deployment
and the party the signed manifest names, so no other deployment or party takes it; with
``--at`` it is a CLOSE_EPOCH_AT, safe to resend (docs/network.md).
"""

from __future__ import annotations

import argparse
from typing import Any

import esa

from .._common import UsageError, emit_json, print_table
from .keygen import read_operator_key


def register(sub: Any) -> None:
    p = sub.add_parser(
        "close-epoch",
        help="as the operator, close a first shuffler's open epoch now",
        description="Send an operator-signed CLOSE_EPOCH (or CLOSE_EPOCH_AT with --at) to "
        "a first shuffler, bound to the manifest's deployment and the named party.",
    )
    p.add_argument("--to", required=True, metavar="HOST:PORT", help="the first shuffler")
    p.add_argument("--operator-key", required=True, metavar="FILE", help="the operator's key file")
    p.add_argument(
        "--manifest",
        required=True,
        metavar="FILE",
        help="the deployment's signed manifest (verified under the operator's key)",
    )
    p.add_argument(
        "--channel",
        type=int,
        default=0,
        help="which chain's first shuffler --to is (default 0)",
    )
    p.add_argument(
        "--at",
        type=int,
        default=None,
        metavar="EPOCH",
        help="close only if the party's next epoch id is EPOCH (idempotent resend)",
    )
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    import trio

    from esa.net import ManifestError, close_epoch, load_manifest, parse_address

    address = parse_address(args.to)
    operator = read_operator_key(args.operator_key)
    try:
        manifest = load_manifest(args.manifest, operator.public_key().public_bytes_raw())
        party = manifest.chain(args.channel)[0].name
    except ManifestError as exc:
        raise UsageError(f"manifest refused: {exc}") from None
    if args.at is not None and not 0 <= args.at < 2**64:
        raise UsageError(f"--at must lie in [0, 2**64), got {args.at}")
    try:
        ack = trio.run(
            lambda: close_epoch(
                address,
                operator,
                at=args.at,
                party=party,
                deployment=manifest.deployment_bytes,
            )
        )
    except (OSError, trio.TooSlowError, esa.ESAError) as exc:
        raise UsageError(f"{address} did not close an epoch: {exc}") from None
    out = {"party": party, "deployment_id": manifest.deployment_id, "epochs_closed": ack.stored}
    if args.json:
        emit_json(out)
    else:
        print_table("esa close-epoch", ["quantity", "value"], [(k, str(v)) for k, v in out.items()])
    return 0
