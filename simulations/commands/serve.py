"""``esa serve shuffler|analyzer --config FILE``: run one party as a TCP service."""

from __future__ import annotations

import argparse
from typing import Any

from esa import load_config, serve

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
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    if config.role != args.role:
        raise UsageError(f"{args.config} configures a {config.role}, not a {args.role}")
    return serve(config)
