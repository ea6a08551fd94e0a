"""The package's version and the version of the JSON documents it writes."""

from __future__ import annotations

from importlib import metadata

__all__ = ["SCHEMA_VERSION", "__version__"]

#: Version of the layout of every JSON document the ``esa`` commands and
#: :meth:`esa.RunResult.to_json` write (``docs/schema/``): raised when a field is removed,
#: renamed or changes type, so a reader can tell which layout it holds.
SCHEMA_VERSION = 1

try:
    __version__: str = metadata.version("esa-shuffle")
except metadata.PackageNotFoundError:  # pragma: no cover - run from a bare source tree
    __version__ = "0+unknown"
