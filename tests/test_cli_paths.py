"""Bad paths and out-of-range ids on the command line: one line, exit code 2, nothing written.

Found by a fuzz of every subcommand: an over-long path component (ENAMETOOLONG), a key file
in a missing directory, an empty --out, and an epoch beyond SQLite's integers each ended in
a traceback (or, for the empty --out, wrote keys into the current directory).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests._cli import usage_error

LONG = "x" * 300  # one path component over NAME_MAX (255)


def _one_line_usage_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    err = usage_error(argv, capsys).strip()
    assert err.startswith(f"esa {argv[0]}: error: ")
    return err


@pytest.mark.parametrize(
    "argv",
    [
        ["inbox", "check", LONG],
        ["inbox", "set-aside", LONG, "--epoch", "1"],
        ["experiments", "counting", "--quick", "--out", f"/tmp/{LONG}"],
    ],
)
def test_an_over_long_path_is_a_usage_error(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert "File name too long" in _one_line_usage_error(argv, capsys)


@pytest.mark.parametrize("flag", ["--make-operator-key", "--make-auditor-key"])
def test_a_key_file_in_a_missing_directory_is_a_usage_error(
    flag: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "missing" / "k"
    err = _one_line_usage_error(["submit", flag, str(target)], capsys)
    assert "No such file or directory" in err
    assert not target.parent.exists()


def test_keygen_refuses_an_empty_out_instead_of_writing_here(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert "empty" in _one_line_usage_error(["keygen", "--out", ""], capsys)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("epoch", ["-1", str(2**63)])
def test_set_aside_refuses_an_epoch_sqlite_cannot_hold(
    epoch: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    err = _one_line_usage_error(["inbox", "set-aside", str(tmp_path), "--epoch", epoch], capsys)
    assert "--epoch must lie in" in err


def test_a_protocol_without_options_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["simulate", "--protocol", "prrq", "--n", "50", "--crypto", "ideal"]
    err = _one_line_usage_error([*argv, "--option", "x=1"], capsys)
    assert err.endswith("prrq takes no options")


def test_an_option_given_twice_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["simulate", "--protocol", "cnt_bn", "--n", "50", "--crypto", "ideal"]
    err = _one_line_usage_error([*argv, "--option", "gamma=0.5", "--option", "gamma=0.9"], capsys)
    assert err.endswith("--option gamma given twice")
