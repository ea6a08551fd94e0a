"""``esa simulate``: synthetic users through the ESA pipeline, with the privacy stated."""

from __future__ import annotations

import argparse
import math
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

import esa
from protocols import ProtocolSpec, ShuffleProtocol, build_protocol, protocol_names

from .._common import (
    UsageError,
    WeakerThanRequested,
    emit_json,
    invocation,
    parse_options,
    print_table,
    progress,
    seed,
    status,
    update_parameters,
    users,
)
from .._common import (
    domain as domain_size,
)
from .._data import DISTRIBUTIONS
from .protocols_list import ProtocolHelp


def add_run_arguments(p: argparse.ArgumentParser, *, n: int, domain: int) -> None:
    """Flags shared by ``simulate`` and ``demo``."""
    p.add_argument(
        "--n", type=users, default=n, help=f"number of users (default {n}, at most 1e10)"
    )
    p.add_argument(
        "--domain",
        type=domain_size,
        default=domain,
        help="domain size d (default %(default)s, as in every esa command; at most 2^20)",
    )
    p.add_argument("--epsilon", type=float, default=1.0, help="target central ε_c (default 1)")
    p.add_argument("--delta", type=float, default=1e-6, help="target δ (default 1e-6)")
    p.add_argument("--shufflers", type=int, default=3, help="shufflers m (default 3)")
    p.add_argument(
        "--fake-reports", type=int, default=0, help="fakes each shuffler adds (default 0)"
    )
    p.add_argument("--threshold", type=int, default=0, help="crowd threshold T (default 0)")
    p.add_argument(
        "--threshold-epsilon",
        type=float,
        default=None,
        metavar="E",
        help="noisy threshold: release a crowd iff count + DLap(e^-E) >= T (needs T >= 1); "
        "the stated epsilon grows by m*k*E (default: the plain threshold)",
    )
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
    p.add_argument(
        "--cluster",
        default=None,
        metavar="ADDRESS",
        help="run the encoding and peeling chunks on the Dask cluster whose scheduler is at "
        "ADDRESS (tcp://host:8786; needs the cluster extra, docs/cluster.md); the estimate "
        "for a seed is the same as a local run's",
    )
    p.add_argument(
        "--allow-weaker",
        action="store_true",
        help="run even if the protocol proves a larger ε_c than --epsilon (exit 0; the "
        "output says weaker_than_requested); without it such a run exits 1 before it starts",
    )
    p.add_argument(
        "--on-mismatch",
        choices=["recompute", "refuse"],
        default="recompute",
        help="when the run differs from the calibration (users lost or held, other fakes): "
        "recompute (default) states the run's own guarantee; refuse: exit 2 and say what "
        "differs",
    )
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")


def register(sub: Any) -> None:
    p = sub.add_parser(
        "simulate",
        help="run synthetic users through encoders, m shufflers and the analyzer",
        description="Generate synthetic data, run it through the ESA pipeline, report the "
        "estimate, its error, per-hop counters and the privacy guarantee.",
        add_help=False,
    )
    p.add_argument("-h", "--help", action=ProtocolHelp)
    p.add_argument("--protocol", required=True, help="protocol name (see `esa protocols`)")
    add_run_arguments(p, n=10_000, domain=16)
    data = p.add_argument_group("the users' own data (instead of synthetic users)")
    data.add_argument(
        "--data",
        metavar="FILE",
        help="CSV file (Parquet with pyarrow installed) with one row per user; --n is its "
        "rows and --domain defaults to its number of named categories",
    )
    data.add_argument("--column", metavar="NAME", help="the column of --data to read")
    data.add_argument(
        "--categories",
        metavar="A,B,...",
        help="the categories in bin order (default: the data's distinct values, sorted)",
    )
    data.add_argument(
        "--range",
        dest="value_range",
        type=value_range,
        metavar="LO:HI",
        help="range of the users' real values, mapped linearly onto the protocol's range",
    )
    data.add_argument(
        "--out-of-range",
        choices=["clip", "refuse"],
        default="clip",
        help="real values outside the range: clip them (default; the output counts them) or "
        "refuse the data",
    )
    # With --data the rows fix n and the categories the domain, unless given explicitly.
    p.set_defaults(n=_Unset(10_000), domain=_Unset(16))
    p.add_argument(
        "--transport",
        choices=["inproc", "tcp"],
        default="inproc",
        help="inproc (default) or tcp: every party its own process on 127.0.0.1",
    )
    add_report_argument(p)
    p.set_defaults(handler=run)


def add_report_argument(p: argparse.ArgumentParser) -> None:
    """Add ``--report FILE.html`` (``esa simulate``, ``audit``, ``amplify``, ``experiments``).

    Args:
        p: the command's parser.
    """
    p.add_argument(
        "--report",
        type=Path,
        default=None,
        metavar="FILE.html",
        help="also write the self-contained HTML report of the result (the object --json "
        "prints) to FILE.html; see docs/report.md",
    )


def check_report(args: argparse.Namespace) -> None:
    """Refuse a ``--report`` path that cannot be written, before the run rather than after.

    Args:
        args: the parsed arguments (``args.report`` a path or None).

    Raises:
        UsageError: its directory does not exist, or it is a directory.
    """
    path: Path | None = getattr(args, "report", None)
    if path is None:
        return
    if path.is_dir():
        raise UsageError(f"--report {str(path)!r} is a directory, not a file")
    if not path.resolve().parent.is_dir():
        raise UsageError(f"--report {str(path)!r}: no such directory {str(path.parent)!r}")


def write_report_option(args: argparse.Namespace, doc: dict[str, Any]) -> None:
    """With ``--report FILE.html``, write the HTML report of ``doc`` there and say so on
    stderr (stdout stays the table, or the one JSON object).

    Args:
        args: the parsed arguments (``args.command`` and ``args.report``).
        doc: the JSON document the command prints with ``--json`` (metadata included).
    """
    path: Path | None = getattr(args, "report", None)
    if path is None:
        return
    from ..report import write_report  # matplotlib: only when a report is asked for

    write_report(doc, path)
    print(f"esa {args.command}: wrote the report {path}", file=sys.stderr)


#: Bytes of disk a report needs while its batch is spilled: one batch of the widest reports
#: in and one out per hop (what esa.PipelineConfig.memory_budget leaves in RAM is less).
SPILL_COPIES = 2


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
    # Memory is bounded (batches past the budget spill to disk), so what limits a run of
    # reports is time and the disk its spilled batches need: refuse up front a run that
    # would stop for lack of room half-way.
    codec = esa.make_codec(
        args.crypto, message_size=protocol.message_size, layers=args.shufflers + 1
    )
    width = (
        codec.expected_size(0)  # type: ignore[attr-defined]
        if args.crypto == "onion"
        else codec.row_size  # type: ignore[attr-defined]
    )
    need = SPILL_COPIES * total * width
    if need <= esa.PipelineConfig().memory_budget:
        return "reports"
    where = tempfile.gettempdir()
    free = shutil.disk_usage(where).free
    if need <= free:
        return "reports"
    fix = "use --representation tally" if tally_ok else "lower --n"
    raise UsageError(
        f"this run would create {total:.3g} reports ({protocol.messages_per_user:.4g} per "
        f"user), which spill {need / 1e9:.3g} GB to {where} ({free / 1e9:.3g} GB free); "
        f"free space there, set TMPDIR to a larger disk, or {fix}"
    )


class _Unset(int):
    """The default of ``--n`` or ``--domain`` when the user did not give it: ``--data`` may
    set the value instead (its rows, its named categories)."""


def value_range(text: str) -> tuple[float, float]:
    """argparse type of ``--range LO:HI``: two finite numbers, LO < HI."""
    lo, sep, hi = text.partition(":")
    try:
        pair = (float(lo), float(hi))
    except ValueError:
        pair = (math.nan, math.nan)
    if not sep or not (math.isfinite(pair[0]) and math.isfinite(pair[1]) and pair[0] < pair[1]):
        raise argparse.ArgumentTypeError(f"expected LO:HI with LO < HI, got {text!r}")
    return pair


def _data_options(args: argparse.Namespace) -> dict[str, Any]:
    """How ``--data``'s values are mapped (esa.users_values' keywords)."""
    cats = getattr(args, "categories", None)
    return {
        "categories": None if cats is None else [c.strip() for c in cats.split(",")],
        "value_range": getattr(args, "value_range", None),
        "out_of_range": getattr(args, "out_of_range", "clip"),
    }


def _users(args: argparse.Namespace) -> tuple[Any, str, int, int]:
    """The users' raw data (None: synthetic) and the run's n and domain, written back into
    ``args`` and the output's parameters (``--n`` and ``--domain`` may be left to the data)."""
    data = getattr(args, "data", None)
    if data is None and getattr(args, "column", None) is not None:
        raise UsageError("--column needs --data")
    left_to_data = data is not None
    raw, source, n, domain = esa.resolve_data(
        data,
        column=getattr(args, "column", None),
        n=None if left_to_data and isinstance(args.n, _Unset) else int(args.n),
        domain=None if left_to_data and isinstance(args.domain, _Unset) else int(args.domain),
        categories=_data_options(args)["categories"],
    )
    args.n, args.domain = n, domain
    update_parameters(n=n, domain=domain)
    return raw, source, n, domain


def execute(args: argparse.Namespace, protocol_name: str) -> esa.RunResult:
    """Build the protocol and the pipeline from ``args`` and run it."""
    if protocol_name not in protocol_names():
        raise UsageError(
            f"unknown protocol {protocol_name!r}; choose one of: {', '.join(protocol_names())}"
        )
    raw, source, n, domain = _users(args)
    if n < 1:
        raise UsageError(f"--n must be >= 1, got {n}")
    if args.fake_reports < 0:
        raise UsageError(f"--fake-reports must be >= 0, got {args.fake_reports}")
    spec = ProtocolSpec(
        epsilon=args.epsilon,
        delta=args.delta,
        n=n,
        domain=domain,
        bound=args.bound,
        fake_reports=args.fake_reports,
        shufflers=args.shufflers,
        options=parse_options(args.option),
    )
    t0 = time.perf_counter()
    command = f"esa {getattr(args, 'command', None) or 'simulate'}"
    # progress is on stderr, with --json too: stdout stays one JSON object
    with status(True, f"deriving {protocol_name}'s parameters", name=command):
        protocol = build_protocol(protocol_name, spec)
        _ = protocol.privacy  # derive every parameter now (Cnt_PURE calibrates lazily)
    shortfall = esa.privacy_shortfall(protocol_name, spec.epsilon, protocol.privacy.epsilon_central)
    if shortfall and not getattr(args, "allow_weaker", False):
        raise WeakerThanRequested(f"{shortfall}; --allow-weaker runs it anyway")
    representation = choose_representation(protocol, args)
    transport = getattr(args, "transport", "inproc")
    if transport == "tcp" and getattr(args, "cluster", None) is not None:
        raise UsageError("--cluster runs the in-process pipeline's chunks (no --transport tcp)")
    if transport == "tcp" and representation == "tally":
        raise UsageError("--transport tcp sends reports; it cannot run a tally")
    if transport == "tcp" and getattr(args, "threshold_epsilon", None) is not None:
        raise UsageError("--threshold-epsilon runs in process only (no --transport tcp yet)")
    config = esa.PipelineConfig(
        shufflers=args.shufflers,
        fake_reports=args.fake_reports,
        threshold=args.threshold,
        crypto=args.crypto,
        workers=args.workers,
        representation="tally" if representation == "tally" else "reports",
        threshold_noise=getattr(args, "threshold_epsilon", None),
    )
    setup = time.perf_counter() - t0
    if transport == "tcp":
        root = np.random.default_rng(args.seed)
        data_rng, run_rng = root.spawn(2)
        values, prepared = esa.users_values(
            protocol, raw, n=n, rng=data_rng, source=source, **_data_options(args)
        )
        try:
            from .._tcp_run import run_tcp
        except ImportError:
            raise UsageError("--transport tcp is not available in this build") from None
        # The parties build the protocol from its name and parameters, as deployed ones do.
        result: esa.RunResult = run_tcp(
            (protocol_name, spec), values, config, rng=run_rng, protocol=protocol
        )
        if getattr(args, "on_mismatch", "recompute") == "refuse" and result.mismatch:
            raise esa.GuaranteeMismatch(list(result.mismatch))
    else:
        stages = 2 + protocol.channels * config.shufflers
        with progress(True, name=command, unit="reports") as bar:
            # one bar per stage: its reports encrypted or peeled so far (onion runs)
            task = bar.add_task("pipeline", total=None)
            started = 0

            def on_stage(name: str) -> None:
                nonlocal started
                started += 1
                bar.reset(task, total=None, description=f"{name} (stage {started}/{stages})")

            def on_progress(done: int, total: int) -> None:
                bar.update(task, completed=done, total=total)

            # esa.simulate is the library's entry point: the same data, run and statement
            result = esa.simulate(
                protocol,
                raw,
                epsilon=spec.epsilon,
                n=n,
                shufflers=args.shufflers,
                fake_reports=args.fake_reports,
                threshold=args.threshold,
                threshold_epsilon=config.threshold_noise,
                crypto=args.crypto,
                representation=config.representation,
                distribution=args.distribution,
                rng=args.seed,
                allow_weaker=getattr(args, "allow_weaker", False),
                on_mismatch=getattr(args, "on_mismatch", "recompute"),
                workers=args.workers,
                cluster=getattr(args, "cluster", None),
                on_stage=on_stage,
                on_progress=on_progress,
                source=source,
                **_data_options(args),
            )
        result.seconds["setup"] = setup
        return result
    result.seconds["setup"] = setup
    run_shortfall = esa.privacy_shortfall(
        protocol_name, spec.epsilon, result.privacy.epsilon_central
    )
    described = None
    if prepared is not None:
        described = prepared.to_json()
        described["in_data_units"] = prepared.sum_in_data_units(
            result.estimate.values, result.truth, result.estimate.expected_std
        )
    result.extra.update(
        {
            "seed": args.seed,
            "distribution": args.distribution if prepared is None else None,
            "data": described,
            "transport": transport,
            "fakes_source": "seeded (simulation)" if config.seeded_fakes else "csprng",
            "epsilon_requested": spec.epsilon,
            "weaker_than_requested": run_shortfall is not None,
            "privacy_warning": run_shortfall,
        }
    )
    if run_shortfall and not getattr(args, "allow_weaker", False):
        raise WeakerThanRequested(
            f"the run that happened {run_shortfall.split(' ', 1)[1]}; --allow-weaker accepts it",
            result,
        )
    return result


def run(args: argparse.Namespace) -> int:
    check_report(args)
    weaker: WeakerThanRequested | None = None
    try:
        result = execute(args, args.protocol)
    except WeakerThanRequested as exc:
        if exc.result is None:
            raise  # refused before running: one line, exit 1
        # The run happened and proves less than asked: print what it proves, then exit 1.
        result, weaker = exc.result, exc
    j = result.to_json(invocation())  # what --json prints, exactly
    if args.json:
        emit_json(j)
    else:
        show(j)
    warn(j)  # on stderr with --json too: stdout stays one JSON object
    write_report_option(args, j)
    if weaker is not None:
        raise weaker
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


def _restored(j: dict[str, Any], key: str) -> Any:
    """The top-level value ``key`` of a run's JSON with its non-finite numbers back: each
    ``null`` listed in ``non_finite`` (a lost estimate's) is that float again (a list's
    entries too), so the tables show ``nan`` where the run has no number."""
    non_finite: dict[str, str] = j.get("non_finite", {})

    def back(value: Any, path: str) -> Any:
        return float(non_finite[path]) if value is None and path in non_finite else value

    value = j[key]
    if isinstance(value, list):
        return [back(v, f"{key}[{i}]") for i, v in enumerate(value)]
    return back(value, key)


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
        *(
            [("WEAKER than requested", "yes (--allow-weaker): see the warning below")]
            if j.get("weaker_than_requested")
            else []
        ),
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
        ("RMSE", _restored(j, "rmse")),
        ("expected std (mean over entries)", float(np.mean(_restored(j, "expected_std")))),
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
    last = max((int(h["hop"]) for h in j["hops"]), default=0)
    print_table(
        "per-hop counters",
        headers,
        hop_rows,
        caption=f"Hops 0–{last - 1} are the shufflers, hop {last} the analyzer."
        if last > 1
        else "Hop 0 is the shuffler, hop 1 the analyzer.",
    )
    est, truth, std = (_restored(j, key) for key in ("estimate", "truth", "expected_std"))
    data = j.get("data") or {}
    labels = list(data.get("categories") or [])
    if data:
        clipped = f", {data['clipped']} values clipped" if data.get("clipped") else ""
        print(f"data: {data['rows']} rows of {data['source']}{clipped}")
    units = data.get("in_data_units")
    if units:
        lo, hi = data["value_range"]
        print_table(
            "the column's sum, in its own units",
            ["estimate", "truth", "error", "expected std"],
            [
                (_fmt_num(e), _fmt_num(t), _fmt_num(e - t), _fmt_num(s))
                for e, t, s in zip(
                    units["estimate"], units["truth"], units["expected_std"], strict=True
                )
            ],
            caption=f"Values in [{lo:g}, {hi:g}]; the table below is on the protocol's scale.",
        )
    if len(est) <= 32:
        # bin j of the users' own data is its category, as the JSON's data.categories say
        names = [labels[i] if i < len(labels) else i for i in range(len(est))]
        print_table(
            "estimate vs truth",
            ["entry", "estimate", "truth", "error", "expected std"],
            [(name, e, t, e - t, s) for name, e, t, s in zip(names, est, truth, std, strict=True)],
        )


def _fmt_num(x: float | None) -> str:
    """A sum in its column's units: every integer digit, one decimal."""
    return "nan" if x is None else f"{x:,.1f}"
