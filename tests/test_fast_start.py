"""Start-up cost: the CLI registers every command without the party services, scipy.optimize,
pyca/cryptography's X.509 and ssl (TLS only), randomgen (the CSPRNG generator only) or
multiprocessing (a process pool only).

Each check runs in a fresh interpreter (``sys.modules`` of this one is already full) and
asserts on ``sys.modules`` after the call returns.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

from ._fresh import fresh_json

HEAVY = (
    "trio",
    "esa.net",
    "scipy.optimize",
    "cryptography.x509",
    "randomgen",
    "multiprocessing",
    "ssl",
)


def _loaded_after(call: str) -> dict[str, bool]:
    code = textwrap.dedent(
        f"""
        import contextlib, io, json, sys
        import simulations.cli as cli
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            try:
                {call}
            except SystemExit:
                pass
        print(json.dumps({{m: m in sys.modules for m in {HEAVY!r}}}))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=300
    )
    loaded: dict[str, bool] = json.loads(out.stdout.strip().splitlines()[-1])
    return loaded


def test_help_imports_no_services_nor_optimizer() -> None:
    loaded = _loaded_after('cli.main(["--help"])')
    assert loaded == dict.fromkeys(HEAVY, False)


def test_building_the_parser_imports_no_services_nor_optimizer() -> None:
    loaded = _loaded_after("cli.build_parser()")
    assert loaded == dict.fromkeys(HEAVY, False)


def test_amplify_imports_no_services() -> None:
    """``esa amplify`` never talks to a party: trio and esa.net stay out. (Its numerical
    bounds solve with scipy.optimize.brentq, so the optimizer is loaded by the computation
    itself, not by start-up; the two tests above pin that.)"""
    loaded = _loaded_after('cli.main(["amplify", "--epsilon-local", "1", "--n", "100000"])')
    assert not loaded["trio"]
    assert not loaded["esa.net"]
    assert not loaded["cryptography.x509"]
    assert not loaded["randomgen"]
    assert not loaded["multiprocessing"]


def test_lazy_net_names_still_import() -> None:
    """``from esa import serve`` (a name of esa.net) still works, loading esa.net then."""
    code = (
        "import sys, esa; assert 'esa.net' not in sys.modules; "
        "from esa import serve, parse_address; import esa.net; "
        "assert serve is esa.net.serve and esa.parse_address is esa.net.parse_address"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_lazy_tls_names_still_import() -> None:
    """``crypto.load_certificate`` and ``from crypto import server_ssl_context`` (names of
    crypto._tls) still work, loading X.509 then; ``dir(crypto)`` lists them
    (the API reference is built from it); an unknown name is an AttributeError."""
    code = (
        "import sys, crypto; assert 'cryptography.x509' not in sys.modules; "
        "assert {'load_certificate', 'server_ssl_context'} <= set(dir(crypto)); "
        "from crypto import server_ssl_context; import crypto._tls as t; "
        "assert crypto.load_certificate is t.load_certificate; "
        "assert server_ssl_context is t.server_ssl_context; "
        "assert 'cryptography.x509' in sys.modules; "
        "assert not hasattr(crypto, 'no_such_name')"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_packages_load_their_names_on_first_use() -> None:
    """``import protocols, esa, crypto`` (and the experiments package) import none of their
    modules, nor numpy: each name loads its module when first asked for
    (``__init__.pyi`` + lazy_loader)."""
    loaded = fresh_json(
        "import json, sys, protocols, esa, crypto, simulations.experiments; "
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('protocols', 'esa', 'crypto', 'simulations', 'numpy'))))"
    )
    assert loaded == ["crypto", "esa", "protocols", "simulations", "simulations.experiments"]


def test_every_declared_name_loads() -> None:
    """With lazy_loader's ``EAGER_IMPORT``, importing each package resolves every name its
    ``__init__.pyi`` declares at once: a stale line (a name moved or removed) fails here."""
    code = "import protocols, esa, crypto, simulations.experiments"
    env = {**os.environ, "EAGER_IMPORT": "1"}
    subprocess.run([sys.executable, "-c", code], check=True, timeout=300, env=env)


def test_start_loads_no_key_crypto_nor_protocol_family() -> None:
    """Registering every command loads neither pyca/cryptography nor libsodium (only the key
    and network commands use them, in their handlers), no shuffle protocol module (the
    registry loads them when first consulted), nor the experiment runs."""
    loaded = fresh_json(
        """
        import json, sys
        import simulations.cli as cli
        cli.build_parser()
        cli._load_protocols([])
        from protocols import _registry
        heavy = ["cryptography", "nacl", "simulations.experiments.run", "protocols.ldp"]
        heavy += _registry.BUILTIN_MODULES
        print(json.dumps([m for m in heavy if m in sys.modules]))
        """
    )
    assert loaded == []


def test_computed_help_is_still_printed() -> None:
    """``esa audit-ldp --help`` computes its description (the auditable ranges) when the help
    is printed, not when the parser is built."""
    out = subprocess.run(
        [sys.executable, "-c", "from simulations.cli import main; main()", "audit-ldp", "--help"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    text = " ".join(out.stdout.split())
    assert "auditable epsilon range" in text
    assert "from 1e-06 up to 700" in text
    assert "<function" not in text
