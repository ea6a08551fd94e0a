"""The public surface of each package (as trio's test_exports does).

``crypto`` is pinned exactly: adding or removing a public name is a deliberate API change
and must update ``CRYPTO_PUBLIC`` below. ``protocols`` and ``esa`` are being extended by
several people at once, so for them the test only asserts that a fixed core is present and
that every public name is a real re-export (importable, declared in ``__init__.pyi``, the
list ``lazy_loader`` loads each package's names from on first use).
"""

from __future__ import annotations

import ast
import importlib
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

CRYPTO_PUBLIC = [
    "CryptoError",
    "CryptoParameterError",
    "HEADER_SIZE",
    "InvalidKey",
    "InvalidReport",
    "KEY_SIZE",
    "KeyDirectory",
    "LAYER_OVERHEAD",
    "LayerHeader",
    "LayerPrivateKey",
    "PartyKeys",
    "PartyPublic",
    "REPORT_VERSION",
    "TLSConfigError",
    "analyzer_name",
    "check_certificate",
    "client_ssl_context",
    "issue_client_certificate",
    "issue_party_certificate",
    "load_certificate",
    "load_private_key",
    "make_deployment_ca",
    "peer_common_name",
    "save_certificate",
    "save_private_key",
    "server_ssl_context",
    "announce_progress",
    "combine_shares",
    "csprng_generator",
    "ephemeral_key_of",
    "is_weak_verify_key",
    "keep_freed_memory",
    "is_valid_signature",
    "pad",
    "pad_rows",
    "padded_size",
    "peel_batch",
    "peel_records",
    "peel_report",
    "report_progress",
    "report_size",
    "secure_permutation",
    "secure_uniform_ints",
    "shuffler_name",
    "sign",
    "split_mix",
    "unpad",
    "unpad_rows",
    "wrap_batch",
    "process_pool",
    "shutdown_pool",
    "wrap_records",
    "wrap_report",
]

# Core names only (see the module docstring): other names may be added freely.
PROTOCOLS_CORE = [
    "AmplificationBound",
    "BOUNDS",
    "BoundMethod",
    "BoundNotApplicable",
    "CntRR",
    "Estimate",
    "HistKR",
    "InputKind",
    "InvalidMessage",
    "ParameterError",
    "PrivacyGuarantee",
    "ProtocolError",
    "ProtocolSpec",
    "ShareSpec",
    "ShuffleProtocol",
    "build_protocol",
    "krr_lambda",
    "largest_local",
    "register_bound",
    "register_protocol",
    "tightest_central",
]

ESA_CORE = [
    "Analyzer",
    "ConfigError",
    "CryptoError",
    "ESAError",
    "Encoder",
    "InvalidReport",
    "ParameterError",
    "PipelineConfig",
    "ProtocolError",
    "ReplayedReport",
    "RunResult",
    "Shuffler",
    "ThresholdNotMet",
    "run_pipeline",
]


def _public(package: types.ModuleType) -> list[str]:
    return sorted(n for n in dir(package) if not n.startswith("_"))


def _reexport_lines(name: str) -> list[ast.ImportFrom]:
    """The ``from X import N as N`` lines of ``name``'s ``__init__.pyi`` (what the type
    checker reads and what ``lazy_loader.attach_stub`` loads the names from)."""
    tree = ast.parse((ROOT / name.replace(".", "/") / "__init__.pyi").read_text())
    return [n for n in tree.body if isinstance(n, ast.ImportFrom) and n.module != "__future__"]


def _declared_reexports(name: str) -> dict[str, str]:
    """``{public name: source module}`` of the ``from X import N as N`` lines of __init__."""
    out: dict[str, str] = {}
    for node in _reexport_lines(name):
        source = "." * node.level + (node.module or "")
        for alias in node.names:
            out[alias.asname or alias.name] = source
    return out


def test_crypto_public_surface_is_pinned() -> None:
    import crypto

    assert _public(crypto) == sorted(CRYPTO_PUBLIC)


@pytest.mark.parametrize("name", ["crypto", "protocols", "esa", "simulations.experiments"])
def test_public_names_are_explicit_reexports(name: str) -> None:
    """Every public name is an ``X as X`` re-export in ``__init__.pyi`` (docs/design.md), or a
    subpackage/submodule of the package itself — no stray ``import numpy`` leaking out."""
    package = importlib.import_module(name)
    declared = _declared_reexports(name)
    for node in _reexport_lines(name):
        for alias in node.names:
            assert alias.asname == alias.name, (
                f"{name}/__init__.pyi: write `from {node.module} import {alias.name} "
                f"as {alias.name}` so the re-export is explicit"
            )
    for public in _public(package):
        obj = getattr(package, public)
        if isinstance(obj, types.ModuleType):
            assert obj.__name__.startswith(name + "."), f"{name}.{public} is a foreign module"
            continue
        assert public in declared, f"{name}.{public} is public but not re-exported explicitly"


@pytest.mark.parametrize("name", ["crypto", "protocols", "esa", "simulations.experiments"])
def test_every_public_name_is_importable(name: str) -> None:
    package = importlib.import_module(name)
    for public in _public(package):
        namespace: dict[str, object] = {}
        exec(f"from {name} import {public}", namespace)
        assert namespace[public] is getattr(package, public)


def test_crypto_exports_are_defined_in_crypto() -> None:
    """No third-party object is re-exported under our name."""
    import crypto

    for public in CRYPTO_PUBLIC:
        obj = getattr(crypto, public)
        module = getattr(obj, "__module__", None)
        if module is not None and not isinstance(obj, int):
            assert module.startswith("crypto."), f"crypto.{public} comes from {module}"


@pytest.mark.parametrize(
    ("name", "core"), [("protocols", PROTOCOLS_CORE), ("esa", ESA_CORE)], ids=["protocols", "esa"]
)
def test_core_names_present(name: str, core: list[str]) -> None:
    package = importlib.import_module(name)
    missing = sorted(set(core) - set(_public(package)))
    assert not missing, f"{name} lost core names: {missing}"


def test_esa_reexports_the_crypto_and_protocol_errors_it_catches() -> None:
    import crypto
    import esa
    import protocols

    assert esa.InvalidReport is crypto.InvalidReport
    assert esa.CryptoError is crypto.CryptoError
    assert esa.ParameterError is protocols.ParameterError
