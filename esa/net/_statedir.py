"""A party's state directory: the files in it, and the lock a running party holds on it.

A party keeps everything durable in its ``state_dir``: the inbox database
(:data:`INBOX_FILE`), the port it listens on once ready, and :data:`LOCK_FILE`, on which
the running party holds an exclusive ``flock`` for as long as it runs (two instances on
one inbox would each close, process and forward the same epochs). The operator's tool
(``esa inbox``) asks :func:`state_dir_in_use` whether that lock is held.
"""

from __future__ import annotations

import fcntl
from pathlib import Path
from typing import IO, Final

from .._errors import ConfigError

__all__ = ["INBOX_FILE", "LOCK_FILE", "StateLock", "lock_state_dir", "state_dir_in_use"]

#: The inbox database's file name in a state_dir.
INBOX_FILE: Final = "inbox.db"
#: The file a running party holds locked in its state_dir.
LOCK_FILE: Final = "lock"


class StateLock:
    """The exclusive lock a party holds on its state_dir (:func:`lock_state_dir`).

    Args:
        handle: the open lock file, already locked.
    """

    def __init__(self, handle: IO[str]) -> None:
        self._handle = handle

    def close(self) -> None:
        """Release the lock (the next instance may take the state_dir)."""
        self._handle.close()


def lock_state_dir(state_dir: Path) -> StateLock:
    """Create ``state_dir`` and take its exclusive lock, held until :meth:`StateLock.close`.

    Args:
        state_dir: the party's state directory.

    Returns:
        The held lock.

    Raises:
        ConfigError: the directory cannot be created or is in use by another party.
    """
    try:
        state_dir.mkdir(parents=True, exist_ok=True)
        fh = open(state_dir / LOCK_FILE, "a+")  # noqa: SIM115 - held until close()
    except OSError as exc:
        raise ConfigError(f"cannot use state_dir {state_dir}: {exc.strerror or exc}") from None
    try:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        fh.close()
        raise ConfigError(
            f"state_dir {state_dir} is in use by another running party; give each party "
            "its own state_dir"
        ) from None
    return StateLock(fh)


def state_dir_in_use(state_dir: Path) -> bool:
    """Whether a running party holds ``state_dir``'s lock (:func:`lock_state_dir`).

    Only probes: a shared lock is taken and released at once, never held.

    Args:
        state_dir: the party's state directory.

    Returns:
        False also when the directory has no lock file (no party ever ran there).
    """
    try:
        fh = open(state_dir / LOCK_FILE, "rb")  # noqa: SIM115 - closed below
    except OSError:
        return False
    with fh:
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError:
            return True
        fcntl.flock(fh.fileno(), fcntl.LOCK_UN)
    return False
