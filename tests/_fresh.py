"""Run code in a fresh interpreter: for what a test process (every module already loaded, the
environment set) cannot show, such as what an import loads or what a variable changes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterable
from typing import Any


def fresh_json(code: str, *, unset: Iterable[str] = (), **env: str) -> Any:
    """Run ``code`` (dedented) in a fresh interpreter, with the variables ``unset`` removed
    from this environment and ``env`` added; it prints one JSON value last, returned."""
    removed = set(unset)
    environ = {k: v for k, v in os.environ.items() if k not in removed}
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
        env={**environ, **env},
    )
    return json.loads(out.stdout.strip().splitlines()[-1])
