"""Protocols from other installed packages, found through their entry points.

A package that ships its own protocol declares, in its ``pyproject.toml``::

    [project.entry-points."esa_shuffle.protocols"]
    my_protocol = "my_package.my_module"

where ``my_package.my_module`` is a module that registers its protocol on import (with
:func:`~protocols.register_protocol`, or :func:`~protocols.register_matrix_oracle`).
:func:`load_plugins` imports every such module once; the ``esa`` command line calls it at start,
so an installed plugin is a protocol like the built-in ones. Nothing is unpickled: a plugin is
code the user installed, run by the import system as any installed package is.
"""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points

from ._errors import ParameterError

__all__ = ["PLUGIN_GROUP", "load_plugins"]

#: The entry-point group protocol plugins declare.
PLUGIN_GROUP = "esa_shuffle.protocols"

_loaded: set[str] = set()


def load_plugins(group: str = PLUGIN_GROUP) -> list[str]:
    """Import every module the installed packages declare in ``group`` (once each).

    Args:
        group: the entry-point group (default :data:`PLUGIN_GROUP`).

    Returns:
        The entry points' names, in the order they were loaded (already loaded ones too).

    Raises:
        ParameterError: an entry point whose module fails to import; the message names it and
            its error, so a broken plugin is one clear line, not a traceback.
    """
    names = []
    for ep in sorted(entry_points(group=group), key=lambda e: e.name):
        if ep.value not in _loaded:
            try:
                importlib.import_module(ep.module)
            except Exception as exc:
                raise ParameterError(
                    f"protocol plugin {ep.name!r} ({ep.value}) failed to load: "
                    f"{type(exc).__name__}: {exc}"
                ) from exc
            _loaded.add(ep.value)
        names.append(ep.name)
    return names
