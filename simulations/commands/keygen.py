"""``esa keygen``: a key directory for m shufflers (per chain) and an analyzer; the
operator's key (``--make-operator-key``); the signed deployment manifest (``--manifest``)."""

from __future__ import annotations

import argparse
import os
import tomllib
from pathlib import Path
from typing import TYPE_CHECKING, Any

import crypto

from .._common import UsageError, emit_json, print_table

if TYPE_CHECKING:  # pyca/cryptography loads when a key is made or read, not at start
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey


def register(sub: Any) -> None:
    p = sub.add_parser(
        "keygen",
        help="create X25519 + Ed25519 keys for m shufflers and an analyzer",
        description="Write DIR/public.json (every party's public keys) and one private key "
        "file per party (mode 0600).",
    )
    p.add_argument("--out", help="directory to create (the key directory)")
    p.add_argument(
        "--make-operator-key",
        metavar="FILE",
        default=None,
        help="instead: write a new operator key (mode 0600) and print its public key, for "
        "every party's [operator] table and every client's --operator-key",
    )
    p.add_argument(
        "--manifest",
        metavar="OUT",
        default=None,
        help="instead: write the deployment manifest, signed with --operator-key, from "
        "--config (its [protocol], crypto, channels, [shuffle] threshold and "
        "threshold_epsilon) and the keys of --key-epoch",
    )
    p.add_argument("--config", metavar="TOML", help="with --manifest: a shuffler's config")
    p.add_argument(
        "--operator-key", metavar="FILE", help="with --manifest: the operator's key file"
    )
    p.add_argument(
        "--key-epoch",
        type=int,
        default=None,
        help="with --manifest: the key epoch clients encode for (default: the config's "
        "highest in [keys.epochs])",
    )
    p.add_argument("--shufflers", type=int, default=3, help="shufflers per chain (default 3)")
    p.add_argument(
        "--channels",
        type=int,
        default=1,
        help="shuffler chains ending at the one analyzer, e.g. one per precision for "
        "rsum_rm (default 1); chain c's hop i is shuffler-{c*m+i+1}",
    )
    p.add_argument(
        "--host",
        action="append",
        default=[],
        metavar="PARTY=HOST[,HOST]",
        help="the DNS names / IP addresses a party is reached at, for its TLS certificate "
        "(repeat per party; default localhost,127.0.0.1)",
    )
    p.add_argument(
        "--client",
        action="append",
        default=[],
        metavar="NAME",
        help="also issue a TLS client certificate NAME (query access: RESULT, STATUS on the "
        "query listener); repeatable",
    )
    p.add_argument(
        "--no-tls",
        action="store_true",
        help="write no TLS material (DIR/tls: the deployment CA, each party's certificate "
        "and key, the client certificates)",
    )
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    p.set_defaults(handler=run)


def _tls_hosts(args: argparse.Namespace, names: list[str]) -> dict[str, list[str]]:
    """``--host`` values per party (the default for the others)."""
    hosts = {name: ["localhost", "127.0.0.1"] for name in names}
    for item in args.host:
        name, sep, value = item.partition("=")
        if not sep or name not in hosts or not value.strip():
            raise UsageError(
                f"--host must be PARTY=HOST[,HOST] with PARTY one of {names}, got {item!r}"
            )
        hosts[name] = [h.strip() for h in value.split(",") if h.strip()]
    return hosts


def run(args: argparse.Namespace) -> int:
    from esa.net import write_tls_material

    if args.make_operator_key and args.manifest:
        raise UsageError("give --make-operator-key or --manifest, not both")
    if args.make_operator_key:
        return _make_operator_key(args.make_operator_key, as_json=args.json)
    if args.manifest:
        return _write_manifest(args)
    if args.out is None:
        raise UsageError("--out DIR is required (or --make-operator-key FILE, --manifest OUT)")
    # A party's config takes hop <= 254 (the analyzer's hop is m) and channels <= 255.
    if not 1 <= args.shufflers <= 254 or not 1 <= args.channels <= 255:
        raise UsageError(
            f"--shufflers must lie in [1, 254] and --channels in [1, 255], got "
            f"{args.shufflers}, {args.channels}"
        )
    if not args.out.strip():  # Path("") is the current directory
        raise UsageError("--out must name a directory, got an empty string")
    m = args.shufflers
    names = [crypto.shuffler_name(i) for i in range(m * args.channels)] + [crypto.analyzer_name()]
    hosts = _tls_hosts(args, names)
    if args.no_tls and args.client:
        raise UsageError("--client issues a TLS certificate: not with --no-tls")
    # One directory for every chain: each chain's shufflers get their own keys, all chains
    # share the analyzer (esa.chain_route reads chain c back as shuffler-{c*m+1..c*m+m}).
    try:
        keys = crypto.KeyDirectory.create(args.out, shufflers=m * args.channels)
    except OSError as exc:  # --out is a file, or not writable
        raise UsageError(f"cannot write keys to {args.out}: {exc.strerror or exc}") from None
    tls: dict[str, dict[str, str]] = {}
    if not args.no_tls:
        try:
            tls = write_tls_material(keys.path / "tls", hosts, clients=args.client)
        except (OSError, crypto.CryptoError) as exc:
            raise UsageError(f"cannot write TLS material: {exc}") from None
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
        emit_json({"directory": str(keys.path), "parties": parties, "tls": tls})
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
        if tls:
            print_table(
                f"TLS material in {keys.path / 'tls'} (keys mode 0600)",
                ["name", "certificate", "key"],
                [(name, Path(f["cert"]).name, Path(f["key"]).name) for name, f in tls.items()],
            )
    return 0


def write_key(path: str) -> str:
    """Write a new Ed25519 key to ``path`` (hex seed, mode 0600; never over a file) and
    return its public key in hex: an operator key, or (``esa submit``) a trap auditor key."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    key = Ed25519PrivateKey.generate()
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise UsageError(f"{path} exists; not overwriting a key") from None
    except OSError as exc:  # no such directory, not writable, name too long
        raise UsageError(f"cannot write a key to {path}: {exc.strerror or exc}") from None
    with os.fdopen(fd, "w") as fh:
        fh.write(key.private_bytes_raw().hex() + "\n")
    return key.public_key().public_bytes_raw().hex()


def _make_operator_key(path: str, *, as_json: bool) -> int:
    """Write a new Ed25519 operator key (hex seed, mode 0600), print its public key."""
    public = write_key(path)
    if as_json:
        emit_json({"operator_key_file": path, "public_key": public})
    else:
        print(public)
    return 0


def read_operator_key(path: str) -> Ed25519PrivateKey:
    """The operator's private key from a file ``--make-operator-key`` wrote."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    try:
        return Ed25519PrivateKey.from_private_bytes(bytes.fromhex(Path(path).read_text().strip()))
    except OSError as exc:
        raise UsageError(f"cannot read operator key {path}: {exc.strerror or exc}") from None
    except ValueError:
        raise UsageError(
            f"{path} is not an operator key (64 hex digits, as --make-operator-key writes)"
        ) from None


def _crowd_rule(config: Path, doc: dict[str, Any]) -> dict[str, Any]:
    """The shufflers' crowd rule a shuffler's config states, for the manifest (every
    shuffler must then serve it, and the analyzer states the run's privacy with its ε_t)."""
    if doc.get("role") != "shuffler":
        raise UsageError(
            f"{config}: give a shuffler's config (its [shuffle] threshold and "
            "threshold_epsilon are the deployment's crowd rule)"
        )
    shuffle = doc.get("shuffle") or {}
    threshold = shuffle.get("threshold", 0)
    eps_t = shuffle.get("threshold_epsilon")
    if isinstance(threshold, bool) or not isinstance(threshold, int) or threshold < 0:
        raise UsageError(f"{config}: [shuffle] threshold must be an integer >= 0")
    if eps_t is not None:
        if isinstance(eps_t, bool) or not isinstance(eps_t, int | float):
            raise UsageError(f"{config}: [shuffle] threshold_epsilon must be a number")
        eps_t = float(eps_t)  # as a party reads it: 1 and 1.0 are the same ε_t
    return {"threshold": threshold, "threshold_epsilon": eps_t}


def _write_manifest(args: argparse.Namespace) -> int:
    from esa.net import make_manifest, protocol_table

    if not args.config or not args.operator_key:
        raise UsageError("--manifest needs --config TOML and --operator-key FILE")
    operator = read_operator_key(args.operator_key)
    config = Path(args.config)
    try:
        doc = tomllib.loads(config.read_text())
    except OSError as exc:
        raise UsageError(f"cannot read {config}: {exc.strerror or exc}") from None
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise UsageError(f"{config}: invalid TOML: {exc}") from None
    if doc.get("crypto", "onion") != "onion":
        raise UsageError(f'{config}: a deployment uses crypto = "onion"')
    proto = doc.get("protocol")
    if not isinstance(proto, dict) or "name" not in proto:
        raise UsageError(f"{config}: [protocol] must name the protocol and its parameters")
    epochs = (doc.get("keys") or {}).get("epochs") or {}
    if not isinstance(epochs, dict) or not epochs:
        raise UsageError(f"{config}: [keys.epochs] names no key directory")
    try:
        served = {int(k): v for k, v in epochs.items()}
    except ValueError:
        raise UsageError(f"{config}: [keys.epochs] keys must be integers") from None
    key_epoch = max(served) if args.key_epoch is None else args.key_epoch
    if key_epoch not in served:
        raise UsageError(f"{config}: [keys.epochs] has no key epoch {key_epoch}")
    keys = crypto.KeyDirectory.load(config.resolve().parent / str(served[key_epoch]))
    manifest = make_manifest(
        protocol=protocol_table(proto),
        keys=keys,
        key_epoch=key_epoch,
        channels=int(doc.get("channels", 1)),
        operator_key=operator.public_key().public_bytes_raw(),
        shuffle=_crowd_rule(config, doc),
    )
    data = manifest.sign(operator)
    try:
        fd = os.open(args.manifest, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        raise UsageError(f"{args.manifest} exists; not overwriting a manifest") from None
    except OSError as exc:
        raise UsageError(f"cannot write {args.manifest}: {exc.strerror or exc}") from None
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    out = {
        "manifest": args.manifest,
        "deployment_id": manifest.deployment_id,
        "key_epoch": manifest.key_epoch,
        "protocol": manifest.protocol["name"],
        "epsilon": manifest.protocol["epsilon"],
        "delta": manifest.protocol["delta"],
        "operator_key": manifest.operator_key.hex(),
        "threshold": manifest.threshold,
        "threshold_epsilon": manifest.threshold_epsilon,
    }
    if args.json:
        emit_json(out)
    else:
        print_table(
            f"signed manifest written to {args.manifest}",
            ["field", "value"],
            [(k, str(v)) for k, v in out.items() if k != "manifest"],
        )
    return 0
