"""``esa demo`` says what its run did, and ``esa protocols`` lists every protocol alike."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from simulations.cli import main

SMALL = ("--n", "2000", "--crypto", "ideal")


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    assert main([*argv, "--json"]) == 0
    out: dict[str, Any] = json.loads(capsys.readouterr().out)
    return out


def explanation(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """The demo's closing text (after its tables), on one line per paragraph."""
    assert main(["demo", *argv]) == 0
    out = capsys.readouterr().out
    assert "What you are looking at" in out
    return " ".join(out.split("What you are looking at", 1)[1].split())


@pytest.fixture
def wide(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tables as wide as their rows, so cells are not folded mid-word."""
    monkeypatch.setenv("COLUMNS", "400")


# --- esa demo ------------------------------------------------------------------------------


def test_demo_with_a_lost_estimate_says_so_instead_of_comparing(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # every report is held below the threshold: the RMSE is NaN, which is truthy. Nothing of
    # the shuffle is left, so the run proves only ε_l: accepted with --allow-weaker.
    text = explanation(capsys, *SMALL, "--threshold", "5000", "--allow-weaker")
    assert "nan" not in text.lower()
    assert "×" not in text
    assert "estimate is lost" in text
    assert "holds a crowd of fewer than 5,000 reports" in text
    out = run_json(capsys, "demo", *SMALL, "--threshold", "5000", "--allow-weaker")
    assert out["rmse"] is None
    assert out["rmse_ratio_local_over_shuffled"] is None


def test_demo_help_states_the_default_it_uses(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["demo", "--help"])
    assert exc.value.code == 0
    help_text = " ".join(capsys.readouterr().out.split())
    stated = re.search(
        r"--fake-reports FAKE_REPORTS fakes each shuffler adds \(default (\d+)\)", help_text
    )
    assert stated is not None, help_text
    used = run_json(capsys, "demo", *SMALL)["fake_reports"]
    assert int(stated.group(1)) == used == 200


def test_demo_explanation_follows_the_flags(capsys: pytest.CaptureFixture[str]) -> None:
    text = explanation(
        capsys, *SMALL, "--distribution", "uniform", "--shufflers", "2", "--fake-reports", "0"
    )
    assert "Zipf" not in text
    assert "uniformly at random" in text
    assert "onion" not in text  # --crypto ideal encrypts nothing
    assert "plaintext" in text
    assert "2 shufflers" in text
    assert "fakes" not in text  # none were added
    assert "× smaller" in text


def test_demo_explanation_counts_the_onion_layers(capsys: pytest.CaptureFixture[str]) -> None:
    text = explanation(capsys, "--n", "300", "--shufflers", "2", "--workers", "1")
    assert "3 onion layers" in text
    assert "4 onion layers" not in text
    assert "2 shufflers" in text
    assert "adds 200 uniform fakes" in text
    assert "Zipf-like" in text


def test_demo_compares_at_the_epsilon_the_forced_bound_proves(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Erlingsson et al.'s bound proves less than the requested ε = 1 with these parameters:
    # the local-DP-only run must be at that ε, not at the request, to be "the same privacy"
    out = run_json(capsys, "demo", *SMALL, "--bound", "thm1_erlingsson")
    assert out["epsilon_central"] < 0.9
    assert out["local_dp_only"]["epsilon_local"] == pytest.approx(out["epsilon_central"])
    text = explanation(capsys, *SMALL, "--bound", "thm1_erlingsson")
    eps = f"{out['epsilon_central']:.2f}"
    assert f"for the same ε = {eps} against the analyzer" in text
    assert "--bound thm1_erlingsson" in text


def test_demo_explanation_states_the_options_of_the_shuffled_run(
    capsys: pytest.CaptureFixture[str],
) -> None:
    text = explanation(capsys, *SMALL, "--option", "report_fragments=4")
    assert "sends 4 messages" in text
    assert "--option report_fragments=4" in text
    assert "no options" in text  # the local-DP-only run is plain k-RR


# --- esa protocols -------------------------------------------------------------------------


def test_protocols_lists_every_protocol_with_the_same_keys(
    capsys: pytest.CaptureFixture[str],
) -> None:
    protos = {p["name"]: p for p in run_json(capsys, "protocols")["protocols"]}
    keys = {frozenset(p) for p in protos.values()}
    assert len(keys) == 1, keys
    assert {"input", "messages_per_user", "options", "tally", "summary"} <= set(next(iter(keys)))
    murs = protos["murs"]
    assert murs["input"] == "categorical"
    assert murs["messages_per_user"] == 1
    assert murs["options"] == ["report_fragments"]  # single-message: fragmenting applies
    assert murs["listed_with"]["fake_reports"] >= 1
    assert murs["summary"].startswith("``MURS``")
    assert protos["slh"]["listed_with"] == {}
    assert not any("needs other parameters" in p["summary"] for p in protos.values())


def test_protocols_lists_exactly_the_option_keys_a_protocol_takes(
    capsys: pytest.CaptureFixture[str],
) -> None:
    protos = {p["name"]: p for p in run_json(capsys, "protocols")["protocols"]}
    assert protos["hist_kr"]["options"] == ["report_fragments"]
    assert protos["disele"]["options"] == ["shares"]  # multi-message: no report fragmenting
    with pytest.raises(SystemExit) as exc:
        main(["simulate", "--protocol", "disele", "--option", "foo=1", "--n", "100"])
    assert exc.value.code == 2
    assert capsys.readouterr().err.strip().endswith("disele reads: shares")


def test_protocols_summaries_are_whole_sentences(capsys: pytest.CaptureFixture[str]) -> None:
    protos = {p["name"]: p for p in run_json(capsys, "protocols")["protocols"]}
    for name, p in protos.items():
        s = p["summary"]
        assert s.endswith("."), (name, s)
        assert s.count("(") == s.count(")"), (name, s)
        assert s.count("``") % 2 == 0, (name, s)
    assert protos["cnt_sgm"]["summary"].endswith("Split-Mix shares instead).")
    assert protos["put"]["summary"].endswith("per user and group.")


def test_protocols_table_shows_murs_and_no_placeholder_citation(
    capsys: pytest.CaptureFixture[str], wide: None
) -> None:
    assert main(["protocols"]) == 0
    out = capsys.readouterr().out
    murs = next(line for line in out.splitlines() if "│ murs " in line)
    assert "categorical" in murs
    assert "needs other parameters" not in murs
    assert "listed with 1,000 fakes in total" in murs
    assert "or on │" not in out  # put's summary no longer stops mid-clause
    cheu = next(line for line in out.splitlines() if "thm3_cheu" in line)
    assert "?" not in cheu
    assert "1808.01394" in cheu


def test_protocols_bound_citations_have_no_placeholders(
    capsys: pytest.CaptureFixture[str],
) -> None:
    bounds = run_json(capsys, "protocols")["bounds"]
    assert all("?" not in b["citation"] for b in bounds), bounds


@pytest.mark.parametrize(
    ("doc", "sentence"),
    [
        ("One line.\n\nMore.", "One line."),
        ("Wrapped over\ntwo lines (see a; b). Then more.", "Wrapped over two lines (see a; b)."),
        ("Counting (Cheu et al.). Next.", "Counting (Cheu et al.)."),
        ("By Wang et al. at VLDB. Next.", "By Wang et al. at VLDB."),
        ("A ``x. y`` literal. Next.", "A ``x. y`` literal."),
        ("No period at all\n\nSecond paragraph.", "No period at all"),
        ("", ""),
    ],
)
def test_first_sentence(doc: str, sentence: str) -> None:
    from simulations.commands.protocols_list import first_sentence

    assert first_sentence(doc) == sentence
