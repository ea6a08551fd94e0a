"""The import graph follows the layers of docs/design.md: simulations → esa → {crypto, protocols}.

Two rules, both over every ``import``/``from … import`` statement wherever it sits (function
bodies, ``if TYPE_CHECKING:`` blocks), relative imports resolved against the importing
module's package:

- forbidden edges: ``crypto`` and ``protocols`` import neither each other nor ``esa`` or
  ``simulations``; ``esa`` never imports ``simulations``;
- no circle: no module reaches itself by following imports, inside a package or across
  packages (a submodule that imports its own package's ``__init__`` closes a circle too,
  since the ``__init__`` imports the submodule).

Dynamic imports (``importlib.import_module("…")``) are not visible to this check.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("crypto", "protocols", "esa", "simulations")

#: package -> packages of ours it must never import
FORBIDDEN: dict[str, frozenset[str]] = {
    "crypto": frozenset({"protocols", "esa", "simulations"}),
    "protocols": frozenset({"crypto", "esa", "simulations"}),
    "esa": frozenset({"simulations"}),
    "simulations": frozenset(),
}


@dataclass(frozen=True)
class Edge:
    source: str  # path relative to the root, e.g. "crypto/_onion.py"
    line: int
    target: str  # fully qualified module imported, e.g. "protocols._base"
    names: tuple[str, ...] = ()  # for `from target import a, b`: the names taken

    def __str__(self) -> str:
        return f"{self.source}:{self.line} imports {self.target}"


def _module_parts(path: Path, root: Path) -> list[str]:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return parts


def _package_parts(path: Path, root: Path) -> list[str]:
    """The package a module's relative imports resolve against."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    return parts[:-1]  # for __init__.py that is the package itself, as Python does


def imports_of(path: Path, root: Path) -> list[Edge]:
    """Every module ``path`` imports, relative imports resolved to absolute names.

    A relative import that climbs above the top-level package is reported with the
    target ``"<beyond top level>"`` so the caller can flag it.
    """
    tree = ast.parse(path.read_text(), filename=str(path))
    source = path.relative_to(root).as_posix()
    package = _package_parts(path, root)
    edges: list[Edge] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            edges += [Edge(source, node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                base = node.module or ""
            else:
                if node.level - 1 >= len(package):
                    edges.append(Edge(source, node.lineno, "<beyond top level>"))
                    continue
                anchor = package[: len(package) - (node.level - 1)]
                base = ".".join(anchor + ([node.module] if node.module else []))
            # `from pkg import name` may import the submodule pkg.name: the names are kept so
            # the circle check can tell; the layer check looks at the top-level package.
            names = tuple(alias.name for alias in node.names)
            edges.append(Edge(source, node.lineno, base, names))
    return edges


def violations(root: Path) -> list[str]:
    """Every import edge under ``root`` that goes against the layers."""
    bad: list[str] = []
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            owner = _module_parts(path, root)[0]
            for edge in imports_of(path, root):
                if edge.target == "<beyond top level>":
                    bad.append(f"{edge}: relative import beyond the top-level package")
                    continue
                top = edge.target.split(".")[0]
                if top in FORBIDDEN[owner]:
                    bad.append(f"{edge}: {owner} must not import {top}")
    return bad


def import_graph(root: Path) -> dict[str, set[str]]:
    """Module -> the modules of ours it imports (``from pkg import mod`` names ``pkg.mod``)."""
    paths = {
        ".".join(_module_parts(path, root)): path
        for package in PACKAGES
        for path in sorted((root / package).rglob("*.py"))
    }
    graph: dict[str, set[str]] = {module: set() for module in paths}
    for module, path in paths.items():
        for edge in imports_of(path, root):
            submodules = {f"{edge.target}.{name}" for name in edge.names} & paths.keys()
            graph[module] |= submodules
            # names that are not submodules come from the target module itself
            if edge.target in paths and len(submodules) < max(1, len(edge.names)):
                graph[module].add(edge.target)
        graph[module].discard(module)
    return graph


def circles(root: Path) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    graph = import_graph(root)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for target in sorted(graph[module]):
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in on_stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == module:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return sorted(found)


def test_packages_exist_and_are_walked() -> None:
    for package in PACKAGES:
        files = list((ROOT / package).rglob("*.py"))
        assert (ROOT / package / "__init__.py") in files, package
    # the walk sees the real downward edges, so an empty graph cannot pass silently
    esa_targets = {
        e.target.split(".")[0] for p in (ROOT / "esa").rglob("*.py") for e in imports_of(p, ROOT)
    }
    assert {"crypto", "protocols"} <= esa_targets


def test_no_import_against_the_layers() -> None:
    assert violations(ROOT) == []


def test_no_import_circle() -> None:
    graph = import_graph(ROOT)
    # the graph is the real one: the roles import the codec, the registry is imported
    assert "esa._codec" in graph["esa._roles"]
    assert any("protocols._registry" in targets for targets in graph.values())
    assert circles(ROOT) == []


# --------------------------------------------------------------------------- self-test


def _tree(root: Path, files: dict[str, str]) -> Path:
    for package in PACKAGES:
        (root / package).mkdir(parents=True, exist_ok=True)
        (root / package / "__init__.py").touch()
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


GOOD = {
    "crypto/_a.py": "import os\nfrom ._b import x\nfrom . import _c\n",
    "protocols/_p.py": "import numpy as np\nfrom ._q import y\n",
    "esa/_roles.py": "import crypto\nfrom protocols import HistKR\nfrom crypto._onion import w\n",
    "esa/net/_svc.py": "from .. import _roles\nfrom .._roles import A\n",
    "simulations/cli.py": "from esa import run\nimport protocols\nfrom crypto import pad\n",
}


def test_checker_passes_a_layered_tree(tmp_path: Path) -> None:
    assert violations(_tree(tmp_path, GOOD)) == []


@pytest.mark.parametrize(
    ("name", "text", "expected"),
    [
        ("crypto/_bad.py", "from protocols import ShareSpec\n", "crypto must not import protocols"),
        ("crypto/_bad.py", "import esa.pipeline\n", "crypto must not import esa"),
        # our packages are top level: a relative import can only reach another one by
        # climbing above its own top-level package, which is flagged as such
        ("crypto/sub/_bad.py", "from ...protocols import x\n", "beyond the top-level package"),
        (
            "protocols/_bad.py",
            "from crypto._onion import wrap\n",
            "protocols must not import crypto",
        ),
        (
            "protocols/_bad.py",
            "def f():\n    import simulations.cli\n",
            "protocols must not import simulations",
        ),
        (
            "protocols/_bad.py",
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from esa import Encoder\n",
            "protocols must not import esa",
        ),
        ("esa/_bad.py", "from simulations._common import emit_json\n", "esa must not import"),
        ("esa/sub/_bad.py", "from ... import simulations\n", "beyond the top-level package"),
        ("crypto/_bad.py", "from .. import anything\n", "beyond the top-level package"),
    ],
)
def test_checker_flags_a_synthetic_bad_edge(
    tmp_path: Path, name: str, text: str, expected: str
) -> None:
    found = violations(_tree(tmp_path, {**GOOD, name: text}))
    assert len(found) == 1, found
    assert expected in found[0]
    assert found[0].startswith(name)


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        # two siblings that import each other, one of them inside a function
        (
            {
                "protocols/_a.py": "from ._b import x\n",
                "protocols/_b.py": "def f():\n    from . import _a\n",
            },
            [["protocols._a", "protocols._b"]],
        ),
        # a submodule that takes a name from its own package's __init__, which imports it
        (
            {
                "esa/__init__.py": "from .net import serve\n",
                "esa/net/__init__.py": "from ._svc import serve\n",
                "esa/net/_svc.py": "from esa import Encoder\n",
            },
            [["esa", "esa.net", "esa.net._svc"]],
        ),
        # three modules in a loop across packages' layers
        (
            {
                "esa/_x.py": "import esa._y\n",
                "esa/_y.py": "from esa._z import q\n",
                "esa/_z.py": "from esa import _x\n",
            },
            [["esa._x", "esa._y", "esa._z"]],
        ),
    ],
)
def test_circle_check_finds_a_synthetic_circle(
    tmp_path: Path, files: dict[str, str], expected: list[list[str]]
) -> None:
    assert circles(_tree(tmp_path, GOOD)) == []
    assert circles(_tree(tmp_path, {**GOOD, **files})) == expected


def test_relative_imports_resolve_against_the_package(tmp_path: Path) -> None:
    root = _tree(tmp_path, {"esa/net/_svc.py": "from .._roles import A\nfrom . import _x\n"})
    targets = [e.target for e in imports_of(root / "esa/net/_svc.py", root)]
    assert targets == ["esa._roles", "esa.net"]
    init = _tree(tmp_path, {"esa/net/__init__.py": "from ._svc import S\n"})
    assert [e.target for e in imports_of(init / "esa/net/__init__.py", init)] == ["esa.net._svc"]
