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
    # a mechanism found NOT ε-LDP exits 1; its infinite ε is null, flagged in non_finite
    assert main(["audit-ldp", "--mechanism", "DCT", "--epsilon", "1", "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["holds"] is False
    assert out["epsilon_measured"] is None
    assert out["non_finite"]["epsilon_measured"] == "inf"


def test_cli_table_and_all(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["audit-ldp", "--mechanism", "all", "--epsilon", "1"]) == 1  # DCT is not LDP
    text = capsys.readouterr().out
    for name in AUDITABLE:
        assert name in text
    assert "| NO " in text.replace("│", "|")  # DCT's verdict row
    assert "dct:" in text  # and its reason in the caption
    assert main(["audit-ldp", "--mechanism", "all", "--epsilon", "1", "--json"]) == 1
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
        # outside the range where the measurement is backed (epsilon_range)
        (
            ["--mechanism", "olh", "--epsilon", "15", "--domain", "8"],
            "at epsilon=15 it would need 12.5 GiB",
        ),
        (["--mechanism", "duchi", "--epsilon", "37"], "duchi can be audited for epsilon in"),
        (["--mechanism", "pm", "--epsilon", "40"], "pm can be audited for epsilon in"),
        (["--mechanism", "all", "--epsilon", "1e-9"], "no mechanism can be audited here"),
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


# --- the auditable range: a verdict is never an artefact of rounding, the grid or memory ------
def _limits() -> dict[str, float]:
    from protocols.ldp._audit import epsilon_range

    return {name: epsilon_range(name)[1] for name in AUDITABLE}


#: mechanisms whose exact ε* is the configured ε (up to rounding) over their whole range
_TIGHT = {"krr", "de", "blh", "hr", "duchi", "harmony", "pm", "laplace", "she"}


@pytest.mark.parametrize("name", [n for n in AUDITABLE if n != "olh"])
def test_verdicts_at_both_ends_of_the_auditable_range(name: str) -> None:
    from protocols.ldp._audit import EPS_MIN

    for eps in (EPS_MIN, _limits()[name]):
        res = audit_mechanism(name, eps)
        if name == "dct":  # its support moves with the input at every ε
            assert not res.holds
            assert math.isinf(res.epsilon_measured)
            continue
        assert res.holds, (name, eps, res.epsilon_measured)
        if name in _TIGHT:
            assert res.epsilon_measured == pytest.approx(eps, rel=1e-9, abs=1e-12)


def test_the_documented_limits_follow_from_their_derivations() -> None:
    from protocols import SUE

    u, limits = 2.0**-53, _limits()
    assert limits["duchi"] == limits["harmony"] == 17.0
    assert limits["pm"] == 30.0
    assert limits["sue"] == 73.0
    assert limits["olh"] == 10.39
    assert {n for n, hi in limits.items() if hi != 700.0} == {
        "duchi",
        "harmony",
        "pm",
        "sue",
        "olh",
    }
    # two-point: P[-B | +1] = 1/(e^ε + 1) carries ~3u absolute error, ε about 6u(e^ε + 1)
    assert 6 * u * (math.exp(17.0) + 1) <= 1e-9 * 17.0 < 6 * u * (math.exp(17.1) + 1)
    # PM: its centre piece's length is off by up to 2^-52 (e^{ε/2} − 1) relative
    assert 2 * u * (math.exp(30.0 / 2) - 1) <= 1e-9 < 2 * u * (math.exp(31.0 / 2) - 1)
    # SUE: p = e^{ε/2}/(e^{ε/2}+1) stays below 1 in double precision up to ε ≈ 73.47
    assert SUE(d=2, epsilon=73.0).p_nominal < 1.0 == SUE(d=2, epsilon=73.5).p_nominal
    # OLH: its d·S·g law fits 2^24 entries at 10.39 (domain 8, 64 seeds), not at 10.40
    assert 8 * 64 * round(math.exp(10.39) + 1) <= 1 << 24 < 8 * 64 * round(math.exp(10.40) + 1)


@pytest.mark.parametrize(
    ("name", "eps", "fragment"),
    [
        ("duchi", 37.0, r"epsilon in \[1e-06, 17\], got 37: above 17 the 2\^-53 granularity"),
        ("harmony", 22.0, r"epsilon in \[1e-06, 17\]"),
        ("pm", 31.0, r"epsilon in \[1e-06, 30\]"),
        ("sue", 74.0, r"epsilon in \[1e-06, 73\]"),
        ("olh", 20.0, r"olh can be audited for epsilon in \[1e-06, 10.39\].*1.85e\+03 GiB"),
        ("olh", 30.0, r"10.39\].*2\^24 entries"),
        ("dct", 1e-9, r"\[1e-06, 700\], got 1e-09: below 1e-06"),
        ("krr", 701.0, r"epsilon <= 700"),
    ],
)
def test_out_of_range_epsilon_is_refused_with_the_range_and_why(
    name: str, eps: float, fragment: str
) -> None:
    # duchi at 37 measured inf ("NO"), harmony at 22 measured 22.0000002 ("NO"), olh at 20
    # tried to allocate 231 GiB and at 30 failed on an internal "hash range g"
    with pytest.raises(ParameterError, match=fragment):
        audit_mechanism(name, eps)


def test_olh_range_shrinks_with_the_domain_and_the_oracle_guards_its_own_law() -> None:
    from protocols import OLH
    from protocols.ldp._audit import epsilon_range

    assert epsilon_range("olh", 256)[1] == 6.93
    assert epsilon_range("olh", 2)[1] == 11.78
    with pytest.raises(ParameterError, match=r"at domain 256"):
        audit_mechanism("olh", 7.0, 256)
    # called directly, the oracle refuses instead of allocating d*S*g float64s
    with pytest.raises(ParameterError, match=r"d\*S\*g <= 2\^24 entries, got 8\*64\*"):
        OLH(d=8, epsilon=20.0).output_distribution()


@pytest.mark.parametrize("eps", [20.0, 25.0, 30.0])
def test_pm_grid_hits_the_centre_piece_however_short(eps: float) -> None:
    # the centre piece is 2/(e^{ε/2} − 1) long: 9e-5 at ε = 20, below the uniform grid's step
    res = audit_mechanism("pm", eps)
    assert res.holds
    assert res.epsilon_measured == pytest.approx(eps, rel=1e-12)


def test_dct_fails_at_small_epsilon_where_its_window_is_huge() -> None:
    # d ≈ 4e5 at ε = 1e-6: the support ends t ± d lie between the uniform grid's points
    res = audit_mechanism("dct", 1e-6)
    assert not res.holds
    assert math.isinf(res.epsilon_measured)


def test_unary_thresholds_that_cut_epsilon_carry_a_caveat() -> None:
    res = audit_mechanism("oue", 40.0)
    assert res.holds
    assert res.method == "exact"
    # p* = 1/2, q* = 2^-32: ε* = ln(2^32 − 1) whatever larger ε is configured
    assert res.epsilon_measured == pytest.approx(math.log(2**32 - 1), rel=1e-12)
    assert res.caveat is not None
    assert "q* = 2^-32 is the smallest" in res.caveat
    assert "22.1807" in res.caveat
    assert "more private and less accurate" in res.caveat
    assert res.to_dict()["caveat"] == res.caveat
    assert audit_mechanism("oue", 1.0).caveat is None
    assert audit_mechanism("the", 1.0).caveat is None  # THE's ε* < ε is its design, not rounding


def test_cli_all_lists_what_it_cannot_audit_as_skipped(capsys: pytest.CaptureFixture[str]) -> None:
    # At domain 8 (the default is 16): OLH's range is 10.39 there.
    assert (
        main(["audit-ldp", "--mechanism", "all", "--epsilon", "25", "--domain", "8", "--json"]) == 1
    )
    out = json.loads(capsys.readouterr().out)
    skipped = {s["mechanism"]: s for s in out["skipped"]}
    assert set(skipped) == {"duchi", "harmony", "olh"}
    assert "GiB" in skipped["olh"]["reason"]
    results = {r["mechanism"]: r for r in out["results"]}
    assert set(results) == set(AUDITABLE) - set(skipped)
    assert results["pm"]["epsilon_measured"] == pytest.approx(25.0)
    assert results["oue"]["caveat"] is not None
    assert [n for n, r in results.items() if not r["holds"]] == ["dct"]

    assert main(["audit-ldp", "--mechanism", "all", "--epsilon", "25", "--domain", "8"]) == 1
    text = capsys.readouterr().out.replace("│", "|")
    assert "| skipped " in text
    assert "olh skipped: olh can be audited for epsilon in [1e-06, 10.39]" in " ".join(text.split())
    assert "oue: the 32-bit thresholds" in text


def test_cli_all_skips_oracles_whose_domain_is_too_large(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["audit-ldp", "--mechanism", "all", "--epsilon", "1", "--domain", "64", "--json"]
    assert main(argv) == 1  # DCT, among all, is not ε-LDP
    out = json.loads(capsys.readouterr().out)
    assert {s["mechanism"] for s in out["skipped"]} == {"oue", "sue", "the"}
    assert all("d <= 12" in s["reason"] and s["domain"] == 64 for s in out["skipped"])
