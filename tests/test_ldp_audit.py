"""The LDP audit: exact ε on hand-made laws, every named mechanism, and ``esa audit-ldp``."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from protocols import (
    AUDITABLE,
    KRR,
    ParameterError,
    audit_discrete,
    audit_mechanism,
    measured_epsilon_discrete,
    measured_epsilon_log_density,
)
from simulations.cli import main


def test_measured_epsilon_of_hand_made_laws() -> None:
    assert measured_epsilon_discrete([[0.5, 0.5], [0.25, 0.75]]) == pytest.approx(math.log(2))
    # an output impossible under one input: unbounded ratio
    assert math.isinf(measured_epsilon_discrete([[0.5, 0.5], [0.0, 1.0]]))
    # an output impossible under every input is irrelevant
    assert measured_epsilon_discrete([[0.5, 0.5, 0.0], [0.5, 0.5, 0.0]]) == 0.0
    ld = np.log([[0.2, 0.8], [0.4, 0.6]])
    assert measured_epsilon_log_density(ld) == pytest.approx(math.log(2))
    assert math.isinf(measured_epsilon_log_density([[0.0, -np.inf], [0.0, 0.0]]))


@pytest.mark.parametrize(
    ("matrix", "match"),
    [
        ([[1.0, 0.0]], "inputs >= 2"),
        ([[0.5, 0.6], [0.5, 0.5]], "sum to 1"),
        ([[-0.5, 1.5], [0.5, 0.5]], "probability matrix"),
    ],
)
def test_malformed_laws_raise(matrix: list[list[float]], match: str) -> None:
    with pytest.raises(ParameterError, match=match):
        measured_epsilon_discrete(matrix)


def test_audit_catches_a_randomizer_that_overstates_its_privacy() -> None:
    # kRR at ε = 2 claimed as ε = 1
    res = audit_discrete("krr", KRR(d=5, epsilon=2.0).output_distribution(), 1.0)
    assert not res.holds
    assert res.epsilon_measured == pytest.approx(2.0)


@pytest.mark.parametrize("name", AUDITABLE)
def test_every_mechanism_audits_and_only_dct_fails(name: str) -> None:
    res = audit_mechanism(name, 1.0)
    assert res.mechanism == name
    assert res.epsilon_claimed == 1.0
    if name == "dct":
        assert not res.holds
        assert math.isinf(res.epsilon_measured)
    else:
        assert res.holds
        assert res.epsilon_measured <= 1.0 + 1e-9


def test_domain_controls_the_audited_domain() -> None:
    assert audit_mechanism("oue", 1.0, 4).domain == 4
    with pytest.raises(ParameterError, match="d <= 12"):
        audit_mechanism("sue", 1.0, 20)
    with pytest.raises(ParameterError, match="does not apply"):
        audit_mechanism("pm", 1.0, 4)
    with pytest.raises(ParameterError, match="unknown mechanism"):
        audit_mechanism("rappor2", 1.0)


def test_cli_json_fields(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["audit-ldp", "--mechanism", "olh", "--epsilon", "2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {"mechanism", "epsilon_claimed", "epsilon_measured", "holds"} <= set(out)
    assert out["mechanism"] == "olh"
    assert out["holds"] is True
    assert out["epsilon_measured"] == pytest.approx(2.0)


def test_cli_dct_verdict_in_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["audit-ldp", "--mechanism", "DCT", "--epsilon", "1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["holds"] is False
    assert out["epsilon_measured"] == "inf"


def test_cli_table_and_all(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["audit-ldp", "--mechanism", "all", "--epsilon", "1"]) == 0
    text = capsys.readouterr().out
    for name in AUDITABLE:
        assert name in text
    assert "| NO " in text.replace("│", "|")  # DCT's verdict row
    assert "dct:" in text  # and its reason in the caption
    assert main(["audit-ldp", "--mechanism", "all", "--epsilon", "1", "--json"]) == 0
    results = json.loads(capsys.readouterr().out)["results"]
    assert {r["mechanism"] for r in results} == set(AUDITABLE)


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["--mechanism", "nope", "--epsilon", "1"], "unknown mechanism 'nope'"),
        (["--mechanism", "krr", "--epsilon", "-1"], "--epsilon must be"),
        (["--mechanism", "krr", "--epsilon", "nan"], "--epsilon must be"),
        (["--mechanism", "krr", "--epsilon", "1", "--domain", "1"], "--domain must be"),
        (["--mechanism", "oue", "--epsilon", "1", "--domain", "64"], "d <= 12"),
        (["--mechanism", "krr"], "required"),
    ],
)
def test_cli_bad_input_is_one_line_and_exit_2(
    argv: list[str], fragment: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["audit-ldp", *argv])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert fragment in err
    assert len(err.strip().splitlines()) == 1
