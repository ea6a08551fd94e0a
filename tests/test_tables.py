"""Tables read at 80 columns: no line wider, no docstring markup."""

from __future__ import annotations

import pytest

from simulations.cli import main


@pytest.fixture
def narrow(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")


def _check(out: str) -> None:
    assert out.strip()
    assert max(len(line) for line in out.splitlines()) <= 80
    assert "``" not in out


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
