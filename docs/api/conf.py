"""Sphinx configuration of the API reference, built from the docstrings.

``sphinx-build -W --keep-going -b html docs/api build/api`` (warnings are errors) and
``sphinx-build -W -b doctest docs/api build/doctest`` (the ``>>>`` examples of the
docstrings, which import what they use: no global setup).
"""

from __future__ import annotations

import importlib.metadata

project = "esa-shuffle"
release = importlib.metadata.version("esa-shuffle")
version = release
extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",  # Google-style Args / Returns / Raises
    "sphinx.ext.doctest",
    "sphinx.ext.viewcode",
]
napoleon_google_docstring = True
napoleon_numpy_docstring = False
autodoc_default_options = {"members": True, "imported-members": True, "show-inheritance": True}
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_preserve_defaults = True
# An override without a docstring shows the one of the method it overrides (the default,
# stated: tests/test_docstrings.py checks the sections of the docstring shown).
autodoc_inherit_docstrings = True
# The packages re-export names from private modules: document each name where it is public.
add_module_names = False
html_theme = "alabaster"
html_static_path: list[str] = []
exclude_patterns = ["_build"]
nitpicky = False
