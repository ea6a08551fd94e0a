"""``esa compose`` and ``esa audit --epochs``: JSON contract, table, usage errors."""

from __future__ import annotations

import json
from typing import Any

import pytest

from simulations.cli import main

from ._cli import usage_error


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    assert main([*argv, "--json"]) == 0
    out: dict[str, Any] = json.loads(capsys.readouterr().out)
    return out


def test_compose_one_metric(capsys: pytest.CaptureFixture[str]) -> None:
    out = run_json(
        capsys, "compose", "--protocol", "cnt_rr", "--epsilon", "1", "--n", "10000",
        "--epochs", "50", "--total-delta", "1e-4",
    )  # fmt: skip
    assert out["epochs"] == 50
    assert out["delta_total"] == 1e-4
    assert out["method"] == "pld"
    assert out["metrics"][0]["profile"] == "pair"
    assert out["epsilon_total"] < out["epsilon_naive"]
    assert out["epsilon_total"] < out["epsilon_advanced"]


def test_compose_several_metrics_and_table(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["compose", "--metric", "hist_kr:1:20", "--metric", "cnt_bn:0.5:10",
            "--n", "10000", "--domain", "8"]  # fmt: skip
    out = run_json(capsys, *argv)
    assert [m["protocol"] for m in out["metrics"]] == ["hist_kr", "cnt_bn"]
    assert out["epochs"] == 30
    assert out["delta_total"] == pytest.approx(2 * 30 * 1e-6)
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "ε_total" in text
    assert "naive" in text
    assert max(len(line) for line in text.splitlines()) <= 80


def test_compose_budget_inverse(capsys: pytest.CaptureFixture[str]) -> None:
    out = run_json(
        capsys, "compose", "--protocol", "cnt_rr", "--budget", "5", "--epochs", "50",
        "--n", "10000", "--total-delta", "1e-4",
    )  # fmt: skip
    assert out["epsilon_total"] <= 5.0
    eps = out["epsilon_per_epoch"]
    fwd = run_json(
        capsys, "compose", "--protocol", "cnt_rr", "--epsilon", f"{eps * 1.02}",
        "--epochs", "50", "--n", "10000", "--total-delta", "1e-4",
    )  # fmt: skip
    assert fwd["epsilon_total"] > 5.0 * 0.98


def test_compose_arrived_fraction(capsys: pytest.CaptureFixture[str]) -> None:
    base = ["compose", "--protocol", "cnt_bn", "--epsilon", "1", "--n", "10000",
            "--epochs", "10"]  # fmt: skip
    full = run_json(capsys, *base)
    half = run_json(capsys, *base, "--arrived-fraction", "0.5")
    assert half["arrived_users"] == 5000
    assert half["epsilon_total"] > full["epsilon_total"]


@pytest.mark.parametrize(
    "argv",
    [
        ["compose", "--n", "100"],
        ["compose", "--protocol", "cnt_rr", "--n", "100", "--epochs", "3"],
        ["compose", "--protocol", "nope", "--epsilon", "1", "--n", "100", "--epochs", "3"],
        ["compose", "--metric", "cnt_rr:1", "--n", "100"],
        ["compose", "--metric", "cnt_rr:x:3", "--n", "100"],
        ["compose", "--metric", "cnt_rr:1:0", "--n", "100"],
        ["compose", "--budget", "3", "--metric", "cnt_rr:1:3", "--n", "100"],
        ["compose", "--protocol", "cnt_rr", "--epsilon", "1", "--n", "100", "--epochs", "3",
         "--arrived-fraction", "0"],
        ["compose", "--protocol", "hist_mm", "--epsilon", "1", "--n", "10000", "--epochs",
         "3", "--domain", "8", "--arrived-fraction", "0.5"],
    ],
)  # fmt: skip
def test_compose_usage_errors(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    err = usage_error(argv, capsys)
    assert err.startswith("esa compose: error:")


def test_audit_epochs_columns(capsys: pytest.CaptureFixture[str]) -> None:
    out = run_json(
        capsys, "audit", "--protocol", "cnt_rr", "--n", "2000", "--epsilon", "1",
        "--epochs", "10", "--fake-reports", "5",
    )  # fmt: skip
    assert out["epochs"] == 10
    by = {r["scenario"]: r for r in out["scenarios"]}
    for r in by.values():
        assert r["epsilon_upper_epochs"] is not None
        assert r["epsilon_upper_epochs"] >= r["epsilon_upper"] - 1e-9
    # Traced chain: the local pair composed, below 10 · ε_l.
    traced = by["all shufflers"]
    assert traced["epsilon_upper_epochs"] < 10 * out["epsilon_local"]
    # Fakes only still protects over time, and no better than one epoch.
    assert "m-1 shufflers + all other users" in by


def test_audit_epochs_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    usage_error(
        ["audit", "--protocol", "cnt_rr", "--n", "100", "--epsilon", "1", "--epochs", "0"],
        capsys,
    )
