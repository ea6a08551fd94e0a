"""A user's own frequency oracle from its probability matrix (protocols/_matrix.py), and
protocols from other packages' entry points (protocols/_plugins.py)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import esa
from protocols import (
    HistKR,
    MatrixOracle,
    ParameterError,
    audit_discrete,
    load_protocol_file,
    matrix_epsilon,
)

#: 3 inputs, 4 outputs: no k-RR, full row rank
SKEWED = [
    [0.55, 0.15, 0.15, 0.15],
    [0.15, 0.55, 0.15, 0.15],
    [0.20, 0.20, 0.40, 0.20],
]


def _krr(k: int, eps: float) -> np.ndarray:
    p = math.exp(eps) / (math.exp(eps) + k - 1)
    q = 1.0 / (math.exp(eps) + k - 1)
    return np.where(np.eye(k, dtype=bool), p, q)


def test_epsilon_is_the_worst_ratio_with_the_sampling_slack() -> None:
    eps = matrix_epsilon(SKEWED)
    exact = max(math.log(0.55 / 0.15), math.log(0.40 / 0.15))
    assert exact < eps < exact + 1e-13
    # the exact audit of the same matrix agrees that the stated ε holds
    assert audit_discrete("skewed", SKEWED, eps).holds


def test_a_krr_matrix_is_accounted_as_krr_like_hist_kr() -> None:
    eps_l = 2.0
    oracle = MatrixOracle(_krr(4, eps_l), n=20_000, delta=1e-6)
    assert oracle.randomizer_family().kind == "krr"
    built_in = HistKR(domain=4, epsilon_local=eps_l, n=20_000, delta=1e-6)
    # the slack makes the matrix's ε_l larger by < 1e-13, never smaller
    assert oracle.privacy.epsilon_local >= eps_l
    assert math.isclose(
        oracle.privacy.epsilon_central, built_in.privacy.epsilon_central, rel_tol=1e-6
    )
    generic = MatrixOracle(SKEWED, n=20_000, delta=1e-6)
    assert generic.randomizer_family().kind == "generic"
    assert generic.privacy.epsilon_central < generic.privacy.epsilon_local


def test_reports_follow_the_matrix() -> None:
    """Seeded: each input's report frequencies within 5 binomial std of its row."""
    oracle = MatrixOracle(SKEWED, n=10, delta=1e-6)
    rng = np.random.default_rng(7)
    for x in range(3):
        y = oracle.randomize(np.full(40_000, x), rng=rng)
        freq = np.bincount(y, minlength=4) / y.size
        row = np.asarray(SKEWED[x])
        assert np.all(np.abs(freq - row) <= 5 * np.sqrt(row * (1 - row) / y.size))


def test_the_estimate_is_unbiased_and_its_stated_std_is_right() -> None:
    """Seeded, 200 runs of 3,000 users and 300 fakes: the mean error of every bin within 4
    standard errors of 0, the measured std within 15 % of the stated one."""
    n, fakes = 3000, 300
    oracle = MatrixOracle(SKEWED, n=n, delta=1e-6)
    rng = np.random.default_rng(11)
    x = rng.choice(3, size=n, p=[0.5, 0.3, 0.2])
    truth = oracle.truth(x)
    errors, stds = [], []
    for _ in range(200):
        messages = np.concatenate(
            [oracle.randomize(x, rng=rng), oracle.sample_fakes(fakes, rng=rng)]
        )
        est = oracle.estimate(messages, n=n, n_fakes=fakes)
        errors.append(est.values - truth)
        stds.append(est.expected_std)
    err = np.asarray(errors)
    measured = err.std(axis=0, ddof=1)
    assert np.all(np.abs(err.mean(axis=0)) <= 4 * measured / math.sqrt(len(err)))
    assert np.all(np.abs(measured / np.mean(stds, axis=0) - 1) <= 0.15)


def test_codec_round_trip_and_malformed_messages() -> None:
    oracle = MatrixOracle(SKEWED, n=10, delta=1e-6)
    y = np.array([0, 3, 2, 1])
    decoded, ok = oracle.decode(oracle.encode(y))
    assert decoded.tolist() == y.tolist()
    assert ok.all()
    _, ok = oracle.decode(np.array([[4], [255]], dtype=np.uint8))
    assert not ok.any()


@pytest.mark.parametrize(
    ("matrix", "message"),
    [
        ([[0.5, 0.4], [0.5, 0.5]], "row 0 of the matrix sums to"),
        ([[1.0, 0.0], [0.5, 0.5]], "never reports output 1"),
        ([[0.5, 0.5], [0.5, 0.5]], "full row rank"),
        ([[1 - 1e-13, 1e-13], [0.5, 0.5]], "at least 2\\^-40"),
        ([[0.5, 0.5]], "at least 2 rows"),
        ([[0.5, -0.5, 1.0], [0.2, 0.3, 0.5]], "probabilities >= 0"),
        ("not a matrix", "list of rows of numbers"),
    ],
)
def test_bad_matrices_are_refused(matrix: object, message: str) -> None:
    with pytest.raises(ParameterError, match=message):
        MatrixOracle(matrix, n=10, delta=1e-6)  # type: ignore[arg-type]


def test_a_protocol_file_registers_a_protocol_that_runs(tmp_path: Path) -> None:
    """In a child process: the registration stays out of this session's registry."""
    path = tmp_path / "rr3.toml"
    path.write_text(
        textwrap.dedent(
            """
            [protocol]
            name = "rr3_file"
            description = "3-ary randomized response as a matrix"
            matrix = [[0.6, 0.2, 0.2], [0.2, 0.6, 0.2], [0.2, 0.2, 0.6]]
            """
        )
    )
    code = textwrap.dedent(
        f"""
        import numpy as np, esa, protocols
        assert protocols.load_protocol_file({str(path)!r}) == ["rr3_file"]
        p = protocols.build_protocol("rr3_file", protocols.ProtocolSpec(epsilon=1, delta=1e-6,
                                     n=4000, domain=3))
        x = np.random.default_rng(0).integers(0, 3, size=4000)
        r = esa.run_pipeline(p, x, esa.PipelineConfig(shufflers=2, fake_reports=50,
                             crypto="ideal"), rng=np.random.default_rng(1))
        assert np.all(np.abs(r.estimate.values - r.truth) <= 5 * r.estimate.expected_std)
        try:
            protocols.build_protocol("rr3_file", protocols.ProtocolSpec(epsilon=1, delta=1e-6,
                                     n=4000, domain=4))
        except protocols.ParameterError as exc:
            assert "domain must be 3" in str(exc)
        else:
            raise AssertionError("domain 4 accepted")
        print("ok", p.privacy.epsilon_central)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("ok")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[protocol]\nname = 'x'\n", "needs name and matrix"),
        (
            "[protocol]\nname = 'x'\nmatrix = [[0.5, 0.5], [0.2, 0.8]]\ncode = 'import os'\n",
            "unknown: code",
        ),
        ("[other]\nname = 'x'\n", "expected one \\[protocol\\] table"),
        ("[protocol\n", "not valid TOML"),
        ("[protocol]\nname = 'Bad Name'\nmatrix = [[0.5, 0.5], [0.2, 0.8]]\n", "lower-case"),
        ("[protocol]\nname = 'x'\nmatrix = [[true, 0.5], [0.2, 0.8]]\n", "must be numbers"),
    ],
)
def test_bad_protocol_files_are_one_clear_error(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ParameterError, match=message):
        load_protocol_file(path)


def test_an_installed_plugin_is_loaded_through_its_entry_point(tmp_path: Path) -> None:
    """A real distribution on sys.path (dist-info with entry_points.txt), found by
    importlib.metadata as an installed package would be."""
    (tmp_path / "my_plugin.py").write_text(
        "import protocols\n"
        "protocols.register_matrix_oracle('plugin_rr2', [[0.75, 0.25], [0.25, 0.75]])\n"
    )
    info = tmp_path / "my_plugin-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: my-plugin\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[esa_shuffle.protocols]\nrr2 = my_plugin\n")
    code = textwrap.dedent(
        f"""
        import sys
        sys.path.insert(0, {str(tmp_path)!r})
        import protocols
        assert "plugin_rr2" not in protocols.protocol_names()
        assert protocols.load_plugins() == ["rr2"]
        assert protocols.load_plugins() == ["rr2"]  # once only: no double registration
        assert "plugin_rr2" in protocols.protocol_names()
        print("ok")
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    (tmp_path / "my_plugin.py").write_text("raise RuntimeError('broken')\n")
    code = code.replace('print("ok")', "")
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert "protocol plugin 'rr2' (my_plugin) failed to load: RuntimeError: broken" in done.stderr


def test_pipeline_with_onion_crypto() -> None:
    oracle = MatrixOracle(SKEWED, n=300, delta=1e-3)
    x = np.random.default_rng(3).integers(0, 3, size=300)
    result = esa.run_pipeline(
        oracle, x, esa.PipelineConfig(shufflers=2, workers=1), rng=np.random.default_rng(4)
    )
    assert np.all(np.abs(result.estimate.values - result.truth) <= 5 * result.estimate.expected_std)


def test_the_command_line_takes_a_protocol_file(tmp_path: Path) -> None:
    """``esa --protocol-file F simulate/audit``: the file's protocol is a built-in one there
    (child processes: the registration stays out of this session's registry)."""
    path = tmp_path / "rr3.toml"
    path.write_text(
        "[protocol]\nname = 'rr3_cli'\n"
        "matrix = [[0.6, 0.2, 0.2], [0.2, 0.6, 0.2], [0.2, 0.2, 0.6]]\n"
    )
    esa_cli = [sys.executable, "-m", "simulations.cli", "--protocol-file", str(path)]
    common = ["--protocol", "rr3_cli", "--domain", "3", "--n", "5000", "--json"]
    done = subprocess.run(
        [*esa_cli, "simulate", *common, "--crypto", "ideal"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["protocol"] == "rr3_cli"
    assert doc["epsilon_local"] == pytest.approx(math.log(3), rel=1e-12)
    assert doc["epsilon_central"] < 1.0
    done = subprocess.run(
        [*esa_cli, "audit", *common, "--epsilon", "1"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    rows = {r["scenario"]: r for r in json.loads(done.stdout)["scenarios"]}
    assert rows["all shufflers"]["epsilon_upper"] == pytest.approx(math.log(3), rel=1e-12)
    for claim, code in (("1.1", 0), ("1.0", 1)):  # ε_l = ln 3 ≈ 1.0986, audited exactly
        done = subprocess.run(
            [*esa_cli, "audit-ldp", "--mechanism", "rr3_cli", "--epsilon", claim, "--json"],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert done.returncode == code, done.stderr
        assert json.loads(done.stdout)["method"] == "exact"
    bad = tmp_path / "bad.toml"
    bad.write_text("[protocol]\nname = 'x'\n")
    done = subprocess.run(
        [sys.executable, "-m", "simulations.cli", "--protocol-file", str(bad), "protocols"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1
    assert "needs name and matrix" in done.stderr
