"""Named pause points for crash tests: a party sleeps there so that a SIGKILL lands there.

Off unless the environment says otherwise, and then only in the process it is set for:
``ESA_TEST_PAUSE_AT`` lists point names (comma-separated), ``ESA_TEST_PAUSE_MARKER``
names a file the party writes the point's name to on arrival, and the party then sleeps
``ESA_TEST_PAUSE_SECONDS`` (default 3600) before going on. The points:

* ``commit_reports`` — inside the transaction storing a group of clients' reports, before
  its COMMIT (nothing acknowledged yet);
* ``commit_chunk`` — inside the transaction storing an upstream batch chunk, before COMMIT;
* ``before_commit_processed`` — an epoch processed in memory, nothing of it committed;
* ``commit_processed`` — inside the transaction recording an epoch's processing and
  dropping its input, before COMMIT.

Each point pauses once per process (the first time it is reached).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Final

__all__ = ["PAUSE_POINTS", "pause_point"]

PAUSE_POINTS: Final = frozenset(
    {"commit_reports", "commit_chunk", "before_commit_processed", "commit_processed"}
)
_done: set[str] = set()


def pause_point(name: str) -> None:
    """Pause at ``name`` if ``ESA_TEST_PAUSE_AT`` lists it (see the module docstring)."""
    wanted = os.environ.get("ESA_TEST_PAUSE_AT")
    if not wanted or name in _done or name not in wanted.split(","):
        return
    _done.add(name)
    marker = os.environ.get("ESA_TEST_PAUSE_MARKER")
    if marker:
        tmp = Path(marker + ".tmp")
        tmp.write_text(name)
        os.replace(tmp, marker)
    time.sleep(float(os.environ.get("ESA_TEST_PAUSE_SECONDS", "3600")))
