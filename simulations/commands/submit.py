"""``esa submit --to HOST:PORT ...``: encode synthetic users and submit their reports.

A load generator and reference client: it encodes ``--n`` users' values with the protocol
and the public keys of the deployment's signed manifest (``--manifest``), then submits the
reports to the first shuffler over ``--connections`` concurrent connections, resending a
frame on any failure. Every report is counted acknowledged at most once (when its frame's
ACK arrives); a resend is harmless because the shuffler's inbox stores a report at most once.

The protocol, ε, δ, n, domain and report format are never taken from a party's STATUS on
its own word: STATUS is unsigned, so a hostile first shuffler could ask for plaintext or
for ε = 30. Without ``--manifest`` the command refuses, unless ``--local-simulation`` says
the parties are a local test's (``esa simulate --transport tcp``, the test suite), whose
STATUS and ``--keys`` directory it then trusts.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

import crypto
import esa
from protocols import ProtocolSpec, build_protocol

from .._common import UsageError, emit_json, parse_options, print_table, seed
from .._data import generate_values
from .keygen import read_operator_key, write_key

if TYPE_CHECKING:
    import ssl

    from esa.net import Manifest


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
    p.add_argument(
        "--manifest",
        metavar="FILE",
        default=None,
        help="the deployment's signed manifest (esa keygen --manifest): the protocol, its "
        "parameters, the report format and the parties' keys are taken from it, never from "
        "the parties' unsigned STATUS, which must agree with it (needs --operator-key)",
    )
    p.add_argument(
        "--operator-key",
        metavar="PUB",
        default=None,
        help="with --manifest: the operator's Ed25519 public key (64 hex digits) the "
        "manifest must verify under",
    )
    p.add_argument(
        "--local-simulation",
        action="store_true",
        help="parties of a local simulation or test only: without --manifest, encode for "
        "the protocol, parameters and report format their unsigned STATUS states (or the "
        "flags), with the keys of --keys; never for a deployment",
    )
    p.add_argument(
        "--keys",
        help="with --local-simulation: key directory (public.json is enough)",
    )
    p.add_argument(
        "--key-epoch",
        type=int,
        default=None,
        help="key epoch (default: the manifest's, else 1)",
    )
    p.add_argument(
        "--protocol",
        help="protocol name (default: the manifest's; with --local-simulation, the one the "
        "first shuffler's STATUS states)",
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
    p.add_argument(
        "--distribution",
        default="zipf",
        help="distribution of the synthetic users' values (default zipf; as for esa simulate)",
    )
    p.add_argument(
        "--seed",
        type=seed,
        default=0,
        help="seed of the synthetic values and of the users' randomizers (default 0)",
    )
    p.add_argument(
        "--crypto",
        choices=["onion", "ideal"],
        default=None,
        help="report format (default: the first shuffler's, from its STATUS; else onion)",
    )
    p.add_argument(
        "--connections",
        type=int,
        default=50,
        help="concurrent connections to the first shuffler (default 50)",
    )
    p.add_argument(
        "--frame-reports", type=int, default=100, help="reports per SUBMIT frame (default 100)"
    )
    p.add_argument(
        "--retries",
        type=int,
        default=20,
        help="resends of an unacknowledged frame before giving up (default 20)",
    )
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
        help="instead of submitting: ask the party's query listener at --to (with "
        "--tls-cert/--tls-key) for its full status, or the analyzer's for its result "
        "(with --n users)",
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
    p.add_argument(
        "--tls-ca",
        metavar="FILE",
        default=None,
        help="the deployment CA certificate (esa keygen writes DIR/tls/ca.crt): connect with "
        "TLS trusting this CA only (default: DIR/tls/ca.crt of --keys, if it exists)",
    )
    p.add_argument(
        "--tls-cert",
        metavar="FILE",
        default=None,
        help="a client certificate from the deployment CA (esa keygen --client NAME), "
        "required by a party's query listener (--query result)",
    )
    p.add_argument("--tls-key", metavar="FILE", default=None, help="the --tls-cert's key")
    p.add_argument(
        "--insecure-plaintext",
        action="store_true",
        help="no TLS: for parties configured with [tls] insecure_plaintext = true only",
    )
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    p.set_defaults(handler=run)


def _make_key(path: str) -> int:
    """Write a new Ed25519 key (hex seed, mode 0600) and print its public key: an operator
    key or a trap auditor key, which differ only in which table holds the public key."""
    print(write_key(path))
    return 0


#: What a submit encodes with when neither the parties nor the flags say.
_DEFAULTS = {"epsilon": 1.0, "delta": 1e-6, "domain": 16, "n": 10_000}


def _deployment(addresses: list[esa.Address]) -> tuple[dict[str, Any] | None, str | None]:
    """The ``[protocol]`` and the report format (``crypto``) the chains' first shufflers
    serve, from their unsigned STATUS (``--local-simulation`` only); None for what they do
    not state. Every chain must agree."""
    import trio

    from esa.net import QueryKind, query

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


def _signed_manifest(args: argparse.Namespace, addresses: list[esa.Address]) -> Manifest:
    """The verified manifest, after checking every chain's first shuffler's STATUS
    against it (a party that announces other parameters is refused before any report
    is encoded or sent)."""
    import trio

    from esa.net import ManifestError, QueryKind, load_manifest, query

    if args.keys:
        raise UsageError("give --manifest or --keys, not both (the manifest holds the keys)")
    if not args.operator_key:
        raise UsageError("--manifest needs --operator-key PUB (the operator's public key)")
    try:
        pub = bytes.fromhex(args.operator_key.strip())
    except ValueError:
        pub = b""
    if len(pub) != 32:
        raise UsageError(f"--operator-key must be 64 hex digits, got {args.operator_key!r}")
    try:
        manifest = load_manifest(args.manifest, pub)
    except ManifestError as exc:
        raise UsageError(f"manifest refused: {exc}") from None
    if args.key_epoch != manifest.key_epoch:
        if args.key_epoch_given:
            raise UsageError(
                f"the manifest is for key epoch {manifest.key_epoch}, not {args.key_epoch}"
            )
        args.key_epoch = manifest.key_epoch
    if len(addresses) != manifest.channels:
        raise UsageError(
            f"the manifest's deployment has {manifest.channels} chain(s): give --to with "
            f"the first shuffler of each, got {len(addresses)}"
        )
    for address, party in zip(addresses, manifest.first_shufflers(), strict=True):
        try:
            status = trio.run(query, address, QueryKind.STATUS)
        except (OSError, trio.TooSlowError, esa.ESAError) as exc:
            raise UsageError(f"cannot read the status of {address}: {exc}") from None
        try:
            manifest.check_status(status, party=party)
        except ManifestError as exc:
            raise UsageError(f"{address} refused, nothing sent: {exc}") from None
    return manifest


def _tls_context(args: argparse.Namespace) -> ssl.SSLContext | None:
    """The TLS context every connection is made with (None: ``--insecure-plaintext``)."""
    from esa.net import tls_client_context

    if args.insecure_plaintext:
        if args.tls_ca or args.tls_cert or args.tls_key:
            raise UsageError("--insecure-plaintext takes no --tls-ca, --tls-cert or --tls-key")
        return None
    ca = args.tls_ca
    if ca is None and args.keys and (Path(args.keys) / "tls" / "ca.crt").is_file():
        ca = str(Path(args.keys) / "tls" / "ca.crt")
    if ca is None:
        raise UsageError(
            "give --tls-ca FILE, the deployment CA (esa keygen writes DIR/tls/ca.crt), or "
            "--insecure-plaintext for parties that run without TLS"
        )
    cert = Path(args.tls_cert) if args.tls_cert else None
    key = Path(args.tls_key) if args.tls_key else None
    try:
        return tls_client_context(Path(ca), cert=cert, key=key)
    except esa.ESAError as exc:
        raise UsageError(str(exc)) from None


def run(args: argparse.Namespace) -> int:
    import trio

    from esa import PeerRejected
    from esa.net import (
        QueryKind,
        SubmitStats,
        close_epochs_together,
        parse_address,
        query,
        submit_reports,
    )

    if args.make_operator_key and args.make_auditor_key:
        raise UsageError("give --make-operator-key or --make-auditor-key, not both")
    if args.make_operator_key or args.make_auditor_key:
        return _make_key(args.make_operator_key or args.make_auditor_key)
    if not args.to:
        raise UsageError("--to HOST:PORT is required")
    tls = _tls_context(args)
    addresses = [dataclasses.replace(parse_address(a.strip()), tls=tls) for a in args.to.split(",")]
    address = addresses[0]
    if args.n is not None and args.n < 1:
        raise UsageError(f"--n must be >= 1, got {args.n}")
    if args.query:
        if len(addresses) != 1:
            raise UsageError("--query asks one party: give one --to HOST:PORT")
        what = QueryKind.STATUS if args.query == "status" else QueryKind.RESULT
        # The full STATUS: a batch port answers only the public view and refuses this.
        params: dict[str, Any] = {"view": "full"} if args.query == "status" else {}
        if args.query == "result" and args.n is not None:
            params["n"] = args.n
        try:
            emit_json(trio.run(query, address, what, params))
        except PeerRejected as exc:
            if exc.reason != "unexpected_kind":
                raise
            raise UsageError(
                f"{address} refused the {args.query} query: {exc.detail} (give --to the "
                "query listener, its port is in STATE_DIR/query_port, with --tls-cert and "
                "--tls-key)"
            ) from None
        except (OSError, trio.TooSlowError) as exc:
            raise UsageError(f"cannot query {address}: {exc}") from None
        return 0
    if args.manifest and args.local_simulation:
        raise UsageError("give --manifest (a deployment) or --local-simulation (a test), not both")
    if not args.manifest and not args.local_simulation:
        # STATUS is unsigned: its protocol, ε, δ, n, domain and crypto are nobody's word.
        raise UsageError(
            "submitting needs --manifest FILE --operator-key PUB: without it the protocol, "
            "epsilon, delta, n, domain and crypto would come from the parties' unsigned STATUS "
            "(--local-simulation --keys DIR: a local test's parties only)"
        )
    if not args.manifest and not args.keys:
        raise UsageError("--local-simulation needs --keys DIR (the parties' public keys)")
    args.key_epoch_given = args.key_epoch is not None
    if args.key_epoch is None:
        args.key_epoch = 1
    if args.connections < 1 or args.frame_reports < 1 or args.retries < 0:
        raise UsageError("--connections and --frame-reports must be >= 1, --retries >= 0")
    if not 0 <= args.key_epoch < 2**32:
        raise UsageError(f"--key-epoch must lie in [0, 2**32), got {args.key_epoch}")
    operator = read_operator_key(args.close_epoch) if args.close_epoch else None
    manifest = _signed_manifest(args, addresses) if args.manifest else None
    if manifest is not None:
        deployment: dict[str, Any] | None = dict(manifest.protocol)
        if args.crypto not in (None, manifest.crypto):
            raise UsageError(f"the manifest says crypto = {manifest.crypto}, not {args.crypto}")
        args.crypto = manifest.crypto
        protocol = _protocol(args, deployment)
        chains = [manifest.chain(c) for c in range(manifest.channels)]
    else:
        keydir = crypto.KeyDirectory.load(args.keys)
        deployment, mode = _deployment(addresses)
        if mode is not None and args.crypto not in (None, mode):
            raise UsageError(f"the parties take --crypto {mode} reports, not {args.crypto}")
        if mode == "ideal" and args.crypto != "ideal":
            # An unsigned STATUS must never switch a client to plaintext on its own.
            raise UsageError(
                "the first shuffler asks for plaintext reports (crypto = ideal): refusing; "
                "give --manifest and --operator-key (or --crypto ideal for a local test)"
            )
        args.crypto = args.crypto or mode or "onion"
        protocol = _protocol(args, deployment)
        chains = [
            esa.chain_route(keydir, channels=protocol.channels, channel=c)
            for c in range(protocol.channels)
        ]
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
    routes = [[p.layer_public for p in chain] for chain in chains]
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
                closed = await close_epochs_together(
                    addresses,
                    operator,
                    parties=None if manifest is None else manifest.first_shufflers(),
                    deployment=None if manifest is None else manifest.deployment_bytes,
                    retries=args.retries,
                )
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
