"""The public functions' docstrings: Google-style sections, and the examples that run.

The public surface is every function re-exported by :mod:`crypto`, :mod:`protocols`,
:mod:`protocols.ldp`, :mod:`protocols.accounting`, :mod:`esa` and :mod:`esa.net` (what the API
reference of ``docs/api`` shows). Each one's docstring has

* an ``Args:`` section when it takes parameters,
* a ``Returns:`` (or, for a generator, ``Yields:``) section when its return annotation is not
  ``None``,
* a ``Raises:`` section when its body raises an exception itself (a ``raise X`` statement
  outside nested functions; a bare re-raising ``raise`` does not count).

The same rule holds for the public methods (static and class methods included) that the
exported classes define, with the docstring autodoc shows: an override without a docstring of
its own is documented by the method it overrides.

The ``>>>`` examples of the main entry points run here too (and in
``sphinx-build -b doctest docs/api``).
"""

from __future__ import annotations

import ast
import doctest
import importlib
import inspect
import re
import textwrap
from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest

PUBLIC_MODULES = ("crypto", "protocols", "protocols.ldp", "protocols.accounting", "esa", "esa.net")

# The modules whose docstrings carry the runnable examples, and how many examples each has
# at least (so that an example cannot silently disappear).
EXAMPLE_MODULES = {
    "crypto._padding": 2,
    "protocols._registry": 1,
    "protocols.accounting._amplification": 1,
    "esa._pipeline": 1,
}

# Functions exempt from one section, with the reason: "module.qualname" -> {section: reason}.
ALLOWED_MISSING: dict[str, dict[str, str]] = {
    "protocols.ldp._freq_oracles.SHE.output_distribution": {
        "Returns": "always raises: SHE's reports are continuous (the interface returns)",
    },
}

_SECTION = re.compile(r"^(Args|Returns|Yields|Raises):\s*$", re.MULTILINE)


_OUR_PACKAGES = {name.split(".")[0] for name in PUBLIC_MODULES}


def _public_functions() -> dict[str, tuple[Callable[..., Any], str]]:
    """Every function the public packages re-export, and every public method of the classes
    they re-export, by ``module.qualname`` (once each), with the docstring autodoc shows."""
    found: dict[str, tuple[Callable[..., Any], str]] = {}
    for modname in PUBLIC_MODULES:
        module: ModuleType = importlib.import_module(modname)
        for name in dir(module):  # not vars(): a package's names load on first use
            if name.startswith("_"):
                continue
            obj = getattr(module, name)
            if inspect.isfunction(obj):
                key = f"{obj.__module__}.{obj.__qualname__}"
                found.setdefault(key, (obj, inspect.getdoc(obj) or ""))
            elif inspect.isclass(obj) and obj.__module__.split(".")[0] in _OUR_PACKAGES:
                for attr, raw in vars(obj).items():
                    function = raw.__func__ if isinstance(raw, (staticmethod, classmethod)) else raw
                    if attr.startswith("_") or not inspect.isfunction(function):
                        continue
                    key = f"{obj.__module__}.{obj.__qualname__}.{attr}"
                    found.setdefault(key, (function, inspect.getdoc(getattr(obj, attr)) or ""))
    return found


def _raises_directly(function: Callable[..., Any]) -> bool:
    """Whether the body of ``function`` has a ``raise X`` (nested functions not counted)."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
    top = tree.body[0]
    assert isinstance(top, (ast.FunctionDef, ast.AsyncFunctionDef))

    def walk(node: ast.AST) -> bool:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                continue
            if isinstance(child, ast.ClassDef):
                continue
            if isinstance(child, ast.Raise) and child.exc is not None:
                return True
            if walk(child):
                return True
        return False

    return walk(top)


def _required_sections(function: Callable[..., Any]) -> set[str]:
    """The sections the rule asks of ``function``'s docstring."""
    signature = inspect.signature(function)
    required = set()
    if any(name not in ("self", "cls") for name in signature.parameters):
        required.add("Args")
    returned = signature.return_annotation
    if returned not in (inspect.Signature.empty, None, "None", "NoReturn", "typing.NoReturn"):
        generator = inspect.isgeneratorfunction(function) or inspect.isasyncgenfunction(function)
        required.add("Yields" if generator else "Returns")
    if _raises_directly(function):
        required.add("Raises")
    return required


def _missing_sections(qualname: str, function: Callable[..., Any], doc: str) -> set[str]:
    present = set(_SECTION.findall(doc))
    missing = _required_sections(inspect.unwrap(function)) - present
    if "Returns" in missing and "Yields" in present:
        missing.discard("Returns")
    return missing - set(ALLOWED_MISSING.get(qualname, {}))


_FUNCTIONS = _public_functions()


def test_the_public_surface_is_found() -> None:
    assert len(_FUNCTIONS) > 500
    assert "crypto._padding.pad" in _FUNCTIONS
    assert "protocols._base.ShuffleProtocol.estimate" in _FUNCTIONS


@pytest.mark.parametrize("qualname", sorted(_FUNCTIONS))
def test_public_function_has_its_sections(qualname: str) -> None:
    missing = _missing_sections(qualname, *_FUNCTIONS[qualname])
    assert not missing, f"{qualname}: docstring lacks {', '.join(sorted(missing))}"


def test_allow_list_is_current() -> None:
    for qualname, sections in ALLOWED_MISSING.items():
        assert qualname in _FUNCTIONS, f"{qualname} is no longer public"
        needed = _required_sections(inspect.unwrap(_FUNCTIONS[qualname][0]))
        for section, reason in sections.items():
            assert reason, f"{qualname}: no reason given for {section}"
            assert section in needed, f"{qualname}: {section} is no longer required"


@pytest.mark.parametrize("modname", sorted(EXAMPLE_MODULES))
def test_docstring_examples_run(modname: str) -> None:
    module = importlib.import_module(modname)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS, verbose=False)
    assert result.failed == 0
    assert result.attempted >= EXAMPLE_MODULES[modname], f"{modname}: examples missing"
