"""``esa serve shuffler|analyzer --config FILE``: run one party as a TCP service."""

from __future__ import annotations

import argparse
from typing import Any

from .._common import UsageError


def register(sub: Any) -> None:
    p = sub.add_parser(
        "serve",
        help="run a shuffler or the analyzer as a TCP service",
        description="Run one ESA party as a trio TCP service with a durable SQLite inbox. "
        "The config (TOML) names its keys, listen address, next hop, epoch rule and "
        "protocol; see docs/network.md. Stops cleanly on SIGTERM or Ctrl-C.",
    )
    p.add_argument("role", choices=["shuffler", "analyzer"], help="which party this is")
    p.add_argument("--config", required=True, help="the party's TOML config file")
    p.add_argument(
        "--local-simulation",
        action="store_true",
        help="a party of a local simulation (esa simulate --transport tcp) only: accept "
        'crypto = "ideal" (plaintext), [simulation] (seeded fakes) and [tls] '
        "insecure_plaintext = true (no TLS); never for a deployment",
    )
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from esa.net import load_config, serve

    config = load_config(args.config, simulation=args.local_simulation)
    if config.role != args.role:
        raise UsageError(f"{args.config} configures a {config.role}, not a {args.role}")
    return serve(config)
