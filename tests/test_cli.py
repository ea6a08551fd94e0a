"""The ``esa`` CLI: JSON contract, one-line usage errors with exit code 2, keygen, demo."""

from __future__ import annotations

import json
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from simulations.cli import main
from tests._cli import usage_error

SIMULATE_FIELDS = {
    "protocol", "n", "domain", "epsilon_central", "epsilon_local", "delta", "bound",
    "shufflers", "fake_reports", "crypto", "estimate", "truth", "max_abs_error", "rmse",
    "expected_std", "hops", "seconds", "messages_per_user",
}  # fmt: skip


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("mode", ["onion", "ideal"])
def test_simulate_json_contract(capsys: pytest.CaptureFixture[str], mode: str) -> None:
    out = run_json(
        capsys, "simulate", "--protocol", "hist_kr", "--n", "1500", "--domain", "8",
        "--epsilon", "1", "--delta", "1e-6", "--shufflers", "2", "--fake-reports", "30",
        "--seed", "3", "--crypto", mode, "--workers", "1",
    )  # fmt: skip
    assert out.keys() >= SIMULATE_FIELDS
    assert out["crypto"] == mode
    assert len(out["hops"]) == 3
    assert out["hops"][0]["fakes_added"] == 30
    assert out["hops"][-1]["forwarded"] == 1500 + 60
    assert len(out["estimate"]) == len(out["truth"]) == len(out["expected_std"]) == 8
    assert {"encode", "shuffler_1", "shuffler_2", "analyze", "total"} <= out["seconds"].keys()


def test_simulate_same_seed_same_estimate(capsys: pytest.CaptureFixture[str]) -> None:
    args = ("simulate", "--protocol", "cnt_rr", "--n", "3000", "--seed", "5", "--crypto", "ideal")
    a, b = run_json(capsys, *args), run_json(capsys, *args)
    assert a["estimate"] == b["estimate"]
    assert a["truth"] == b["truth"]


def test_simulate_table_says_which_crypto_ran(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "--protocol", "hist_kr", "--n", "500", "--crypto", "ideal"]) == 0
    assert "IDEAL plaintext" in capsys.readouterr().out


def test_simulate_warns_when_the_proven_epsilon_exceeds_the_request(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # PUT on unary Cnt_SGM proves only the counter's local bound (the survey's claim fails):
    # such a run is refused (exit 1, tests/test_exit_codes.py); with --allow-weaker it runs
    # and says so, on stderr under the table and in the JSON, and names the fix.
    argv = [
        "simulate", "--protocol", "put", "--n", "2000", "--crypto", "ideal",
        "--option", "encoding=unary", "--allow-weaker",
    ]  # fmt: skip
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert "ε requested" in captured.out
    warning = captured.err.strip().splitlines()[-1]
    assert warning.startswith("warning: put proves ε_c = ")
    assert "not the requested 1" in warning
    assert "counter=cnt_pure" in warning
    out = run_json(capsys, *argv)
    assert out["epsilon_requested"] == 1.0
    assert out["epsilon_central"] > 1.0
    assert out["privacy_warning"] == warning.removeprefix("warning: ")
    # a protocol that proves its target stays quiet
    fine = run_json(capsys, *argv[:2], "cnt_rr", *argv[3:7])
    assert fine["privacy_warning"] is None
    assert fine["epsilon_central"] <= 1.0


BAD = [
    (["simulate", "--protocol", "hist_kr", "--epsilon", "0"], "epsilon"),
    (["simulate", "--protocol", "hist_kr", "--epsilon", "-2"], "epsilon"),
    (["simulate", "--protocol", "hist_kr", "--delta", "0"], "delta"),
    (["simulate", "--protocol", "hist_kr", "--delta", "1"], "delta"),
    (["simulate", "--protocol", "hist_kr", "--n", "0"], "--n"),
    (["simulate", "--protocol", "hist_kr", "--domain", "1"], "domain"),
    (["simulate", "--protocol", "no_such"], "unknown protocol"),
    (["simulate", "--protocol", "hist_kr", "--shufflers", "0"], "shufflers"),
    # the flag and the value typed, not the total over the 3 shufflers
    (
        ["simulate", "--protocol", "hist_kr", "--fake-reports", "-1"],
        "--fake-reports must be >= 0, got -1",
    ),
    (["simulate", "--protocol", "hist_kr", "--distribution", "cauchy"], "distribution"),
    (["simulate", "--protocol", "hist_kr", "--option", "gamma"], "KEY=VALUE"),
    (["simulate", "--protocol", "put", "--option", "groups=1"], "k=16], got 1\n"),
    (["simulate", "--protocol", "hist_kr", "--n", "ten"], "invalid int"),
    # numpy refuses negative seeds: a usage error, not its traceback
    (["simulate", "--protocol", "hist_kr", "--seed", "-1"], "invalid seed -1: must be >= 0"),
    (["audit", "--protocol", "cnt_rr", "--n", "99", "--epsilon", "1", "--seed", "x"], "seed"),
    (["experiments", "sum", "--quick", "--out", "o", "--seed", "-3"], "must be >= 0"),
    (["simulate", "--protocol", "cnt_rr", "--option", "gama=0.5"], "unknown option gama"),
    (["simulate"], "--protocol"),
    (["keygen", "--shufflers", "2"], "--out"),
    # a forced bound that the protocol's accountant would not use is refused, not ignored
    (
        ["simulate", "--protocol", "cnt_bn", "--crypto", "ideal", "--bound", "thm4_balle"],
        "cnt_bn is not accounted by an amplification bound",
    ),
    (
        ["simulate", "--protocol", "hist_rr_attr", "--n", "20000", "--bound", "thm4_balle"],
        "bound='thm4_balle' does not apply",
    ),
    # counts and seeds are refused as typed, not truncated (3.5 ran as 3) or crashed on (-1)
    (
        ["simulate", "--protocol", "disele", "--crypto", "ideal", "--option", "shares=3.5"],
        "option shares must be an integer >= 1, got 3.5",
    ),
    (
        ["simulate", "--protocol", "pucm", "--crypto", "ideal", "--option", "seed=-1"],
        "option seed must be an integer >= 0, got -1",
    ),
    (
        ["simulate", "--protocol", "cnt_pure", "--crypto", "ideal", "--option", "messages=2.5"],
        "option messages must be an integer >= 1, got 2.5",
    ),
    (
        ["experiments", "counting", "--quick", "--out", "/etc/passwd/sub"],
        "--out '/etc/passwd/sub': Not a directory",
    ),
    # e^ε − 1 is 0 below 1.1e-16 (a ZeroDivisionError in hist_kr at 1e-300)
    (["simulate", "--protocol", "hist_kr", "--epsilon", "1e-300"], "epsilon must be >= 1e-06"),
    # e^ε overflows past 709.78: one line, not an OverflowError from deep in an accountant
    (["simulate", "--protocol", "hist_kr", "--epsilon", "1000"], "epsilon must be <= 700"),
    (["audit", "--protocol", "cnt_rr", "--n", "99", "--epsilon", "1000"], "must be <= 700"),
    (["amplify", "--n", "100", "--epsilon-local", "1000"], "epsilon_local must be <= 700"),
    (["keygen", "--out", "k", "--shufflers", "300"], "--shufflers must lie in [1, 254]"),
    (
        ["keygen", "--out", "/proc/no/such/dir"],
        "cannot create key directory /proc/no/such/dir: No such file",
    ),
    (["keygen", "--out", "/etc/passwd"], "cannot create key directory /etc/passwd: File exists"),
    (["no-such-command"], "invalid choice"),
    (
        ["audit", "--protocol", "cnt_rr", "--n", "99", "--epsilon", "1", "--trials", "0"],
        "add --measure",
    ),
    (["simulate", "--protocol", "cnt_rr", "--unknown"], "esa simulate: error: unrecognized"),
]


@pytest.mark.parametrize(("argv", "needle"), BAD)
def test_usage_errors_one_line_exit_2(
    capsys: pytest.CaptureFixture[str], argv: list[str], needle: str
) -> None:
    assert needle in usage_error(argv, capsys)


def test_keygen_writes_private_files_0600(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = run_json(capsys, "keygen", "--out", str(tmp_path / "keys"), "--shufflers", "2")
    assert [p["name"] for p in out["parties"]] == ["shuffler-1", "shuffler-2", "analyzer"]
    for party in out["parties"]:
        mode = stat.S_IMODE(Path(party["private_key_file"]).stat().st_mode)
        assert mode == 0o600
    # refusing to overwrite is a usage error, not a traceback
    with pytest.raises(SystemExit) as exc:
        main(["keygen", "--out", str(tmp_path / "keys")])
    assert exc.value.code == 2


def test_demo_compares_with_local_dp(capsys: pytest.CaptureFixture[str]) -> None:
    out = run_json(capsys, "demo", "--n", "3000", "--crypto", "ideal")
    assert out["protocol"] == "hist_kr"
    assert out["shufflers"] == 3
    assert out["fake_reports"] > 0
    assert out["local_dp_only"]["epsilon_local"] == 1.0
    assert out["epsilon_central"] == pytest.approx(1.0)
    # shuffling buys a much larger local ε for the same ε against the analyzer
    assert out["epsilon_local"] > 2.0


def test_demo_explains_itself(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--n", "2000", "--crypto", "ideal"]) == 0
    text = capsys.readouterr().out
    assert "What you are looking at" in text
    assert "local DP alone" in text


def test_protocols_lists_registered(capsys: pytest.CaptureFixture[str]) -> None:
    out = run_json(capsys, "protocols")
    names = {p["name"] for p in out["protocols"]}
    assert {"hist_kr", "cnt_rr"} <= names
    tally = {p["name"] for p in out["protocols"] if p.get("tally")}
    assert {"prhr", "pucm", "prrq", "hist_mm"} <= tally
    assert "hist_kr" not in tally
    assert {"thm1_erlingsson", "thm2_fmt_closed_form", "thm3_cheu", "thm4_balle"} <= {
        b["name"] for b in out["bounds"]
    }
    # each protocol's --option keys, as its factory reads them
    options = {p["name"]: p.get("options") for p in out["protocols"]}
    assert options["cnt_sgm"] == ["encoding", "gamma"]
    assert options["cnt_rr"] == ["report_fragments"]
    assert "encoding" in options["put"]
    assert "encoding" not in options["aut"]


def test_console_script_entry_point() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "simulations.cli", "simulate", "--protocol", "hist_kr",
         "--epsilon", "0"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1


def test_reader_closing_the_pipe_stops_quietly() -> None:
    # `esa ... --json | head`: the JSON (~0.5 MB here) outgrows the pipe, the reader leaves,
    # and the command stops with SIGPIPE's status instead of a traceback.
    with subprocess.Popen(
        [sys.executable, "-m", "simulations.cli", "simulate", "--protocol", "hist_kr",
         "--n", "500", "--domain", "20000", "--crypto", "ideal", "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    ) as proc:  # fmt: skip
        assert proc.stdout is not None
        assert proc.stderr is not None
        assert proc.stdout.read(64).startswith(b"{")
        proc.stdout.close()
        err = proc.stderr.read().decode()
        assert proc.wait(timeout=120) == 141
    assert "Traceback" not in err
    assert err == ""


@pytest.mark.slow
def test_issue_example_run_real_encryption(capsys: pytest.CaptureFixture[str]) -> None:
    # The foundation issue's example: n = 50,000, d = 16, real encryption, 3 shufflers,
    # 500 fakes each. Its error must be consistent with expected_std: the standardized
    # errors over 16 bins have a chi-square(16) distribution; 48 is its 0.99995 quantile.
    out = run_json(
        capsys, "simulate", "--protocol", "hist_kr", "--n", "50000", "--domain", "16",
        "--epsilon", "1", "--delta", "1e-6", "--shufflers", "3", "--fake-reports", "500",
        "--seed", "1",
    )  # fmt: skip
    assert out["crypto"] == "onion"
    z = (np.array(out["estimate"]) - np.array(out["truth"])) / np.array(out["expected_std"])
    assert float(np.sum(z**2)) < 48.0
    assert out["hops"][-1]["forwarded"] == 50_000 + 1500


def test_line_progress_writes_a_heartbeat_at_most_every_interval() -> None:
    # A job logged to a file (stderr not a TTY) gets plain progress lines; a fake clock
    # makes the throttle deterministic.
    import io

    from simulations._common import LineProgress

    now = [0.0]
    out = io.StringIO()
    bar = LineProgress(interval=30.0, stream=out, clock=lambda: now[0])
    task = bar.add_task("sum experiments", total=45)
    for _ in range(10):  # 10 points in 20 s: quicker than the interval, silent
        now[0] += 2.0
        bar.advance(task)
    assert out.getvalue() == ""
    now[0] = 31.0
    bar.advance(task)
    now[0] = 40.0
    bar.advance(task)  # 9 s after the last line: throttled
    now[0] = 3725.0
    bar.reset(task, total=None, description="2/5 shuffler 1")
    assert out.getvalue().splitlines() == [
        "sum experiments: 11/45 (0:31 elapsed)",
        "2/5 shuffler 1: 0 (1:02:05 elapsed)",
    ]


def test_progress_is_plain_lines_off_a_terminal_and_silent_with_json() -> None:
    # pytest's captured stderr is not a TTY.
    from simulations._common import LineProgress, _NoProgress, progress

    with progress(True) as bar:
        assert isinstance(bar, LineProgress)
    with progress(False) as bar:
        assert isinstance(bar, _NoProgress)


def test_misspelt_option_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    from protocols import ParameterError, ProtocolSpec, build_protocol

    with pytest.raises(ParameterError, match="unknown option gama; cnt_sgm reads: "):
        build_protocol(
            "cnt_sgm", ProtocolSpec(epsilon=1.0, delta=1e-6, n=100, options={"gama": 0.5})
        )
    argv = ["simulate", "--protocol", "cnt_rr", "--n", "100", "--option", "gama=0.5"]
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "unknown option gama" in err
    # options a protocol reads, and report fragmenting on top of them, still pass
    frag = build_protocol(
        "hist_kr",
        ProtocolSpec(epsilon=1.0, delta=1e-6, n=2_000, options={"report_fragments": 2}),
    )
    assert frag.name.startswith("hist_kr")


@pytest.mark.parametrize(
    "route",
    [["--crypto", "ideal"], ["--crypto", "onion"], ["--crypto", "ideal", "--transport", "tcp"]],
    ids=["ideal", "onion", "tcp"],
)
def test_lost_estimate_warns_on_stderr_in_both_modes(
    route: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    # A crowd held below the threshold reaches no analyzer: the run says so in a warning
    # line, with --json too (stdout stays one JSON object whose estimate is null). With
    # real encryption the next hop gets an empty batch (it crashed on it once); over TCP
    # the held count comes back in the analyzer's signed statements.
    # Nothing of the shuffle is left, so the run proves only ε_l: accepted with --allow-weaker.
    argv = [
        "simulate", "--protocol", "cnt_rr", "--n", "200", *route, "--threshold", "1000",
        "--allow-weaker",
    ]  # fmt: skip
    for extra in ([], ["--json"]) if route[1] == "ideal" and len(route) == 2 else (["--json"],):
        assert main([*argv, *extra]) == 0
        captured = capsys.readouterr()
        warning = captured.err.strip().splitlines()[-1]
        assert warning == (
            "warning: 200 reports were held below the threshold T = 1000: the estimate is lost"
        )
    out = json.loads(captured.out)
    assert out["estimate"] == [None]
    assert out["estimator_details"]["reports_held"] == 200


def test_per_hop_table_names_the_chain_when_there_are_several(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # rsum_rm sends each precision through its own chain: hops 0..m-1 appear once per chain.
    assert main(["simulate", "--protocol", "rsum_rm", "--n", "20000", "--crypto", "ideal"]) == 0
    caption = "Hops 0–2 are the shufflers, hop 3 the analyzer."
    out = capsys.readouterr().out
    assert caption in out
    table = out.split("per-hop counters")[1].split(caption)[0]
    cells = [[c.strip() for c in line.split("│")[1:-1]] for line in table.splitlines()]
    firsts = [row[:2] for row in cells if len(row) > 2]  # (chain, hop) of each row
    assert firsts == [[c, h] for c in "01" for h in "012"] + [["all", "3"]]
