"""``esa simulate``: synthetic users through the ESA pipeline, with the privacy stated."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

import numpy as np

import esa
from protocols import ProtocolSpec, ShuffleProtocol, build_protocol, protocol_names

from .._common import (
    UsageError,
    emit_json,
    parse_options,
    print_table,
    privacy_shortfall,
    progress,
    seed,
    status,
    users,
)
from .._common import (
    domain as domain_size,
)
from .._data import DISTRIBUTIONS, generate_values


def add_run_arguments(p: argparse.ArgumentParser, *, n: int, domain: int) -> None:
    """Flags shared by ``simulate`` and ``demo``."""
    p.add_argument(
        "--n", type=users, default=n, help=f"number of users (default {n}, at most 1e10)"
    )
    p.add_argument(
        "--domain",
        type=domain_size,
        default=domain,
        help="domain size d (default %(default)s, at most 2^20)",
    )
    p.add_argument("--epsilon", type=float, default=1.0, help="target central ε_c (default 1)")
    p.add_argument("--delta", type=float, default=1e-6, help="target δ (default 1e-6)")
    p.add_argument("--shufflers", type=int, default=3, help="shufflers m (default 3)")
    p.add_argument(
        "--fake-reports", type=int, default=0, help="fakes each shuffler adds (default 0)"
    )
    p.add_argument("--threshold", type=int, default=0, help="crowd threshold T (default 0)")
    p.add_argument("--seed", type=seed, default=0, help="seed of the statistics (default 0)")
    p.add_argument(
        "--crypto",
        choices=["onion", "ideal"],
        default="onion",
        help="onion: real encryption (default); ideal: plaintext stand-in for big sweeps",
    )
    p.add_argument(
        "--representation",
        choices=["auto", "reports", "tally"],
        default="auto",
        help="reports: one report per message; tally (--crypto ideal): hops carry the "
        "estimator's summary of the message multiset, for PRHR/PUCM/PRRQ at n = 10^6; auto "
        "(default): reports, or a tally above 5e6 reports when the protocol has one",
    )
    p.add_argument(
        "--distribution",
        default="zipf",
        help=f"synthetic data: {', '.join(DISTRIBUTIONS)} (default zipf)",
    )
    p.add_argument("--bound", default=None, help="force an amplification bound by name")
    p.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="protocol-specific parameter (repeatable), e.g. --option gamma=0.9 or "
        "--option counter=cnt_pure (put)",
    )
    p.add_argument("--workers", type=int, default=None, help="crypto processes (default: all)")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")


def register(sub: Any) -> None:
    p = sub.add_parser(
        "simulate",
        help="run synthetic users through encoders, m shufflers and the analyzer",
        description="Generate synthetic data, run it through the ESA pipeline, report the "
        "estimate, its error, per-hop counters and the privacy guarantee.",
    )
    p.add_argument("--protocol", required=True, help="protocol name (see `esa protocols`)")
    add_run_arguments(p, n=10_000, domain=16)
    p.add_argument(
        "--transport",
        choices=["inproc", "tcp"],
        default="inproc",
        help="inproc (default) or tcp: every party its own process on 127.0.0.1",
    )
    p.set_defaults(handler=run)


#: Reports one in-process run may create: rows of about 135 bytes each in the ideal codec
#: (6.3 GB at 4.7·10^7), and about 60 µs of X25519 per report per hop with real encryption.
MAX_REPORTS = {"ideal": 50_000_000, "onion": 5_000_000}

#: Above this many reports ``--representation auto`` runs a protocol that can be tallied as a
#: tally: the same estimate (tests/test_tally.py), without gigabytes of rows (RSum_PURE at
#: n = 20 000 creates 4.7·10^7 reports: 189 s and 6.3 GB as rows, 6 s and 0.2 GB tallied).
AUTO_TALLY_ABOVE = 5_000_000


def choose_representation(protocol: ShuffleProtocol, args: argparse.Namespace) -> str:
    """``reports`` or ``tally`` for this run, refusing a run that fits neither."""
    asked = getattr(args, "representation", "auto")
    # Every chain's shufflers add their fakes, and a Split-Mix fake value is its shares.
    fakes = args.shufflers * args.fake_reports * protocol.channels * esa.reports_per_fake(protocol)
    total = protocol.messages_per_user * args.n + fakes
    limit = MAX_REPORTS[args.crypto]
    tally_ok = args.crypto == "ideal" and protocol.supports_tally
    if asked == "tally":
        if args.crypto != "ideal":
            raise UsageError("--representation tally needs --crypto ideal (there are no reports)")
        if not protocol.supports_tally:
            raise UsageError(
                f"{protocol.name} cannot run as a tally (its estimator reads messages); "
                "use --representation reports"
            )
        return "tally"
    if asked == "auto" and tally_ok and total > AUTO_TALLY_ABOVE:
        return "tally"
    if total <= limit:
        return "reports"
    # The first way out that certainly works: a smaller n may be below what the protocol
    # accepts (pucm needs n >= ~25 000, which is always over the onion budget).
    if args.crypto == "onion":
        fix = "use --crypto ideal (the same shuffler logic on plaintext rows)"
    elif protocol.supports_tally:
        fix = "use --representation tally"
    else:
        fix = "lower --n"
    raise UsageError(
        f"this run would create {total:.3g} reports ({protocol.messages_per_user:.4g} per "
        f"user), over the {limit:.0e} a --crypto {args.crypto} run allows; {fix}"
    )


def execute(args: argparse.Namespace, protocol_name: str) -> esa.RunResult:
    """Build the protocol and the pipeline from ``args`` and run it."""
    if protocol_name not in protocol_names():
        raise UsageError(
            f"unknown protocol {protocol_name!r}; choose one of: {', '.join(protocol_names())}"
        )
    if args.n < 1:
        raise UsageError(f"--n must be >= 1, got {args.n}")
    if args.fake_reports < 0:  # checked here: the spec gets the total over the shufflers
        raise UsageError(f"--fake-reports must be >= 0, got {args.fake_reports}")
    spec = ProtocolSpec(
        epsilon=args.epsilon,
        delta=args.delta,
        n=args.n,
        domain=args.domain,
        bound=args.bound,
        fake_reports=args.shufflers * args.fake_reports,
        options=parse_options(args.option),
    )
    t0 = time.perf_counter()
    with status(not getattr(args, "json", True), f"deriving {protocol_name}'s parameters"):
        protocol = build_protocol(protocol_name, spec)
        _ = protocol.privacy  # derive every parameter now (Cnt_PURE calibrates lazily)
    representation = choose_representation(protocol, args)
    transport = getattr(args, "transport", "inproc")
    if transport == "tcp" and representation == "tally":
        raise UsageError("--transport tcp sends reports; it cannot run a tally")
    config = esa.PipelineConfig(
        shufflers=args.shufflers,
        fake_reports=args.fake_reports,
        threshold=args.threshold,
        crypto=args.crypto,
        workers=args.workers,
        representation="tally" if representation == "tally" else "reports",
    )
    root = np.random.default_rng(args.seed)
    data_rng, run_rng = root.spawn(2)
    values = generate_values(protocol, args.n, args.distribution, rng=data_rng)
    setup = time.perf_counter() - t0
    if transport == "tcp":
        try:
            from .._tcp_run import run_tcp
        except ImportError:
            raise UsageError("--transport tcp is not available in this build") from None
        result: esa.RunResult = run_tcp(protocol, values, config, rng=run_rng)
    else:
        stages = 2 + protocol.channels * config.shufflers
        with progress(not args.json) as bar:
            # one bar per stage: its reports encrypted or peeled so far (onion runs)
            task = bar.add_task("pipeline", total=None)
            started = 0

            def on_stage(name: str) -> None:
                nonlocal started
                started += 1
                bar.reset(task, total=None, description=f"{started}/{stages} {name}")

            def on_progress(done: int, total: int) -> None:
                bar.update(task, completed=done, total=total)

            result = esa.run_pipeline(
                protocol, values, config, rng=run_rng, on_stage=on_stage, on_progress=on_progress
            )
    result.seconds["setup"] = setup
    result.extra.update(
        {
            "seed": args.seed,
            "distribution": args.distribution,
            "transport": transport,
            "fakes_source": "seeded (simulation)" if config.seeded_fakes else "csprng",
            "epsilon_requested": spec.epsilon,
            "privacy_warning": privacy_shortfall(
                protocol_name, spec.epsilon, protocol.privacy.epsilon_central
            ),
        }
    )
    return result


def run(args: argparse.Namespace) -> int:
    result = execute(args, args.protocol)
    j = result.to_json()
    if args.json:
        emit_json(j)
    else:
        show(j)
    warn(j)  # on stderr with --json too: stdout stays one JSON object
    return 0


def warn(j: dict[str, Any]) -> None:
    """One ``warning:`` line on stderr per thing the numbers alone do not say."""
    if j.get("privacy_warning"):
        print(f"warning: {j['privacy_warning']}", file=sys.stderr)
    details = j["estimator_details"]
    if details.get("reports_held"):
        print(
            f"warning: {details['reports_held']} reports were held below the threshold "
            f"T = {j['threshold']}: the estimate is lost",
            file=sys.stderr,
        )
    elif details.get("complete") is False:
        print(
            f"warning: {details['shares_received']} of {details['shares_expected']} Split-Mix "
            "shares reached the analyzer: their sum is lost, so is the estimate",
            file=sys.stderr,
        )


def show(j: dict[str, Any]) -> None:
    """Readable tables of a run's JSON (``RunResult.to_json``): the run, the hops, and the
    estimate."""
    crypto_note = (
        "real onion encryption (X25519 + ChaCha20-Poly1305)"
        if j["crypto"] == "onion"
        else "IDEAL plaintext stand-in (no encryption)"
    )
    rows = [
        ("protocol", j["protocol"]),
        ("users n", j["n"]),
        ("domain d", j["domain"]),
        ("ε requested", j.get("epsilon_requested", "")),
        ("ε central (analyzer alone)", j["epsilon_central"]),
        ("ε local (if every shuffler colludes)", j["epsilon_local"]),
        ("δ", j["delta"]),
        ("bound used", j["bound"]),
        ("shufflers m", j["shufflers"]),
        ("fakes per shuffler", j["fake_reports"]),
        ("crypto", crypto_note),
        (
            "representation",
            "one report per message"
            if j["representation"] == "reports"
            else "tally of the message multiset (ideal shuffle, no per-message reports)",
        ),
        ("messages per user", j["messages_per_user"]),
        ("max |error|", j["max_abs_error"]),
        ("RMSE", j["rmse"]),
        ("expected std (mean over entries)", float(np.mean(j["expected_std"]))),
        ("seconds (total)", j["seconds"].get("total", 0.0)),
    ]
    print_table("esa simulate", ["quantity", "value"], rows)
    if j["estimator_details"]:  # what the estimator reports beyond its values, e.g. a decision
        print_table(
            "estimator details", ["quantity", "value"], list(j["estimator_details"].items())
        )
    # Several chains (rsum_rm: one per precision) repeat the hop numbers: name the chain.
    chains = {h.get("channel") for h in j["hops"]} - {None}
    hop_cols = [
        *(["channel"] if len(chains) > 1 else []),
        "hop",
        "role",
        "received",
        "invalid",
        "replayed",
        "held",
        "fakes_added",
        "forwarded",
    ]
    headers = ["chain" if c == "channel" else c for c in hop_cols]
    hop_rows = [
        ["all" if c == "channel" and h["role"] == "analyzer" else h[c] for c in hop_cols]
        for h in j["hops"]
    ]  # the analyzer ends every chain
    print_table("per-hop counters", headers, hop_rows)
    est, truth, std = j["estimate"], j["truth"], j["expected_std"]
    if len(est) <= 32:
        print_table(
            "estimate vs truth",
            ["entry", "estimate", "truth", "error", "expected std"],
            [(i, e, t, e - t, s) for i, (e, t, s) in enumerate(zip(est, truth, std, strict=True))],
        )
