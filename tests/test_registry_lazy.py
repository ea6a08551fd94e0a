"""The protocol registry loads the built-in protocol modules on demand.

``import protocols`` imports none of them; the registry imports every module of
``BUILTIN_MODULES`` the first time it is consulted (names, a build, an option list) or extended
from outside. These tests pin that no path sees fewer protocols than before: a module that
registers at import and is missing from the tuple, a user protocol taking a built-in's name
before the built-ins load, a wrapper option not applied, two threads asking at once.

Each check runs in a fresh interpreter (this one has every module loaded already).
"""

from __future__ import annotations

import ast
from pathlib import Path

from protocols import _registry

from ._fresh import fresh_json

ROOT = Path(__file__).resolve().parent.parent
PROTOCOLS_DIR = ROOT / "protocols"


def _registers_on_import(path: Path) -> bool:
    """Whether a module's top level registers a protocol or a wrapper option: a
    ``@register_protocol(...)`` decorator or a ``register_wrapper(...)`` call."""
    tree = ast.parse(path.read_text())
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.ClassDef):
            for deco in node.decorator_list:
                if "register_protocol" in ast.unparse(deco):
                    return True
        elif (
            isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Call)
            and ast.unparse(node.value.func) in ("register_protocol", "register_wrapper")
        ):
            return True
    return False


def test_every_registering_module_is_a_builtin() -> None:
    """A protocols module that registers at import but is missing from BUILTIN_MODULES would
    be unknown to ``build_protocol`` until someone imported it by another path."""
    registering = sorted(p.stem for p in PROTOCOLS_DIR.glob("_*.py") if _registers_on_import(p))
    assert registering, "the scan found no registering module: it is broken"
    assert "_krr" in registering
    assert "_fragmenting" in registering
    assert sorted(_registry.BUILTIN_MODULES) == [f"protocols.{m}" for m in registering]


def test_import_protocols_loads_no_protocol_module() -> None:
    loaded = fresh_json(
        """
        import json, sys, protocols
        from protocols import _registry
        print(json.dumps([m for m in _registry.BUILTIN_MODULES if m in sys.modules]))
        """
    )
    assert loaded == []


def test_first_consultation_sees_every_protocol() -> None:
    """``protocol_names()`` as the first call equals the names once every module of the
    package is imported by hand."""
    first, every = fresh_json(
        """
        import importlib, json, pkgutil, protocols
        first = protocols.protocol_names()
        for info in pkgutil.walk_packages(protocols.__path__, "protocols."):
            importlib.import_module(info.name)
        print(json.dumps([first, protocols.protocol_names()]))
        """
    )
    assert first == every
    assert {"hist_kr", "cnt_sgm", "prhr", "put", "hist_kr_frag"} <= set(first)


def test_a_build_first_applies_the_wrapper_options() -> None:
    """``report_fragments`` is registered by ``_fragmenting``: a first build that asks for it
    must load that module, not refuse the option as unknown."""
    name = fresh_json(
        """
        import json, protocols
        spec = protocols.ProtocolSpec(
            epsilon=1.0, delta=1e-6, n=10_000, domain=4, options={"report_fragments": 2}
        )
        print(json.dumps(protocols.build_protocol("hist_kr", spec).name))
        """
    )
    assert name == "hist_kr+report_fragments"


def test_a_user_protocol_cannot_take_a_builtin_name_first() -> None:
    """Registering ``hist_kr`` from outside before the built-ins load is refused (they load
    first), and the built-in is what builds."""
    result = fresh_json(
        """
        import json, protocols
        try:
            protocols.register_protocol("hist_kr")(lambda spec: None)
            refused = None
        except protocols.ParameterError as exc:
            refused = str(exc)
        spec = protocols.ProtocolSpec(epsilon=1.0, delta=1e-6, n=10_000, domain=4)
        built = type(protocols.build_protocol("hist_kr", spec)).__name__
        print(json.dumps([refused, built]))
        """
    )
    assert result == ["protocol 'hist_kr' is already registered", "HistKR"]


def test_threads_asking_at_once_each_see_every_protocol() -> None:
    """Eight threads that consult the registry together, before anything is loaded, each get
    the whole list (none sees a module half-imported by another)."""
    lists = fresh_json(
        """
        import json, threading, protocols
        barrier = threading.Barrier(8)
        seen = []
        def ask():
            barrier.wait()
            seen.append(protocols.protocol_names())
        threads = [threading.Thread(target=ask) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        print(json.dumps(seen + [protocols.protocol_names()]))
        """
    )
    assert isinstance(lists, list)
    assert len(lists) == 9
    assert all(names == lists[-1] for names in lists)
    assert len(lists[-1]) >= 20
