"""Tables read at 80 columns: no line wider, no docstring markup."""

from __future__ import annotations

import pytest

from simulations.cli import main


@pytest.fixture
def narrow(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")


_LEFT = "┏┃┡│└┣├┗"
_RIGHT = "┓┃┩│┘┫┤┛"


def _check(out: str) -> None:
    assert out.strip()
    assert max(len(line) for line in out.splitlines()) <= 80
    assert "``" not in out
    # A table wider than the console is cropped at 80 columns, which the length check alone
    # would pass: every line that opens a table's border must close it too.
    for line in out.splitlines():
        if line[:1] in _LEFT:
            assert line.rstrip()[-1:] in _RIGHT, f"cropped table line: {line!r}"


def test_protocols_table_reads_at_80_columns(
    capsys: pytest.CaptureFixture[str], narrow: None
) -> None:
    assert main(["protocols"]) == 0
    out = capsys.readouterr().out
    _check(out)
    assert "murs — summary: MURS:" in out  # the long column moved below the table


def test_audit_table_reads_at_80_columns(capsys: pytest.CaptureFixture[str], narrow: None) -> None:
    assert main(["audit", "--protocol", "cnt_bn", "--n", "10000", "--epsilon", "1"]) == 0
    _check(capsys.readouterr().out)


def test_plain_text_strips_markup() -> None:
    from simulations._common import plain_text

    assert plain_text("``Cnt_BN`` by :func:`~a.b` and `x` **y**") == "Cnt_BN by a.b and x y"


def test_print_table_keeps_narrow_columns_whole(
    capsys: pytest.CaptureFixture[str], narrow: None
) -> None:
    from simulations._common import print_table

    print_table("t", ["name", "text"], [("abc", "word " * 60)])
    out = capsys.readouterr().out
    _check(out)
    assert sum("abc" in line for line in out.splitlines()) == 1


@pytest.mark.parametrize("protocol", ["hist_kr", "rsum_rm"])  # rsum_rm: two chains
def test_simulate_tables_read_at_80_columns(
    capsys: pytest.CaptureFixture[str], narrow: None, protocol: str
) -> None:
    """The per-hop counters have up to eight columns of short numbers under long names: the
    names fold onto two lines rather than the table losing its last column."""
    argv = ["simulate", "--protocol", protocol, "--n", "200000", "--crypto", "ideal"]
    assert main([*argv, "--seed", "1"]) == 0
    out = capsys.readouterr().out
    _check(out)
    assert "forwarded" in out
    assert "200000" in out.split("per-hop counters")[1]
