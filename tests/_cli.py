"""What every CLI test of a refused command asserts."""

from __future__ import annotations

import pytest

from simulations.cli import main


def usage_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """Run ``esa ARGV``; assert it refused with exit code 2 and one ``error:`` line on stderr,
    no traceback; return stderr as printed."""
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    assert "error:" in err
    assert "Traceback" not in err
    return err
