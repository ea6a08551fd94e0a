"""``esa token``: mint a client token for a first shuffler that requires one.

The token is bound to the deployment's id: the signed manifest's (``--manifest``, the id
CONTROL frames carry too) for a party with a manifest, else the party's free
``[admission] deployment_id`` (``--deployment``).
"""

from __future__ import annotations

import argparse
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from crypto import CryptoParameterError

from .._common import UsageError, emit_json, print_table

if TYPE_CHECKING:  # pyca/cryptography loads when a key is read, not at start
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey


def register(sub: Any) -> None:
    p = sub.add_parser(
        "token",
        help="mint an operator-signed client token (for [admission] require_client_token)",
        description="Sign a token that lets one client submit reports wrapped for one key "
        "epoch, until it expires, within a quota of reports per epoch. Give it to the client "
        "(esa submit --token HEX). Anyone holding it submits as that client.",
    )
    p.add_argument(
        "--operator-key",
        required=True,
        help="the operator's signing key file (64 hex digits, as esa submit "
        "--make-operator-key writes); the party's [operator] public_key verifies it",
    )
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument(
        "--manifest",
        metavar="FILE",
        help="the deployment's signed manifest (verified under --operator-key): the token is "
        "bound to its deployment id, as a party with a manifest requires",
    )
    which.add_argument(
        "--deployment",
        help="a party without a manifest: its [admission] deployment_id (a free string)",
    )
    p.add_argument("--key-epoch", type=int, required=True, help="the key epoch of the reports")
    p.add_argument("--client", required=True, help="the client's id (quotas are kept under it)")
    p.add_argument(
        "--valid-for",
        type=float,
        default=86400.0,
        help="seconds from now until the token expires (default 86400)",
    )
    p.add_argument(
        "--quota", type=int, default=0, help="reports per epoch the client may submit (0: none)"
    )
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    p.set_defaults(handler=run)


def _operator_key(path: str) -> Ed25519PrivateKey:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    try:
        text = Path(path).read_text().strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(
            f"cannot read operator key {path}: {getattr(exc, 'strerror', exc)}"
        ) from None
    try:
        return Ed25519PrivateKey.from_private_bytes(bytes.fromhex(text))
    except ValueError:
        raise UsageError(
            f"{path} is not an operator key (64 hex digits, as --make-operator-key writes)"
        ) from None


def run(args: argparse.Namespace) -> int:
    from esa.net import ManifestError, load_manifest, mint_token

    if not 0 <= args.key_epoch < 2**32:
        raise UsageError(f"--key-epoch must lie in [0, 2**32), got {args.key_epoch}")
    if not 0 <= args.quota < 2**32:
        raise UsageError(f"--quota must lie in [0, 2**32), got {args.quota}")
    if not 0 < args.valid_for < 10 * 365 * 86400:
        raise UsageError(f"--valid-for must lie in (0, 10 years) seconds, got {args.valid_for}")
    key = _operator_key(args.operator_key)
    if args.manifest is not None:
        try:
            manifest = load_manifest(args.manifest, key.public_key().public_bytes_raw())
        except ManifestError as exc:
            raise UsageError(f"manifest refused: {exc}") from None
        args.deployment = manifest.deployment_id
    expires_at = int(time.time() + args.valid_for)
    try:
        token = mint_token(
            key,
            deployment=args.deployment,
            key_epoch=args.key_epoch,
            client_id=args.client,
            expires_at=expires_at,
            quota=args.quota,
        )
    except CryptoParameterError as exc:
        raise UsageError(f"--deployment and --client must be 1..64 bytes: {exc}") from None
    expires = datetime.fromtimestamp(expires_at, UTC).isoformat(timespec="seconds")
    fields = {
        "token": token.hex(),
        "deployment": args.deployment,
        "key_epoch": args.key_epoch,
        "client": args.client,
        "expires_at": expires_at,
        "expires_at_utc": expires,
        "quota": args.quota,
    }
    if args.json:
        emit_json(fields)
        return 0
    print_table(
        "client token",
        ["field", "value"],
        [
            ("deployment", args.deployment),
            ("key epoch", str(args.key_epoch)),
            ("client", args.client),
            ("expires (UTC)", expires),
            ("quota per epoch", str(args.quota) if args.quota else "none"),
        ],
    )
    print(token.hex())
    return 0
