"""``esa fidelity``: print the fidelity ledger (the source of ``docs/fidelity.md``)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from protocols import protocol_names
from protocols._fidelity import render_markdown


def register(sub: Any) -> None:
    p = sub.add_parser("fidelity", help="print the fidelity ledger (docs/fidelity.md)")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    sys.stdout.write(render_markdown(protocol_names()))
    return 0
