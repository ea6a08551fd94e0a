"""A party's state directory: the files in it, and the lock a running party holds on it.

A party keeps everything durable in its ``state_dir``: the inbox database
(:data:`INBOX_FILE`), the port it listens on once ready, and :data:`LOCK_FILE`, on which
the running party holds an exclusive ``flock`` for as long as it runs (two instances on
one inbox would each close, process and forward the same epochs). The operator's tool
(``esa inbox``) asks :func:`state_dir_in_use` whether that lock is held.

The directory is private to the party's user: it is made mode 0700 and every file a party
writes in it mode 0600 (:func:`write_private_text`), whatever the umask, and a directory
left more open by an earlier run is closed down when the party starts.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import IO, Final

from .._errors import ConfigError

__all__ = [
    "INBOX_FILE",
    "LOCK_FILE",
    "StateLock",
    "lock_state_dir",
    "state_dir_in_use",
    "write_private_text",
]

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
        state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(state_dir, 0o700)  # mkdir's mode is subject to the umask
        fd = os.open(state_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600)
        os.fchmod(fd, 0o600)
        fh = os.fdopen(fd, "a+")
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


def write_private_text(path: Path, text: str) -> None:
    """Replace ``path`` atomically with ``text``, mode 0600 whatever the umask.

    Args:
        path: the file (in a state_dir).
        text: its new content.

    Raises:
        OSError: the file cannot be written.
    """
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, text.encode())
    finally:
        os.close(fd)
    os.replace(tmp, path)


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
