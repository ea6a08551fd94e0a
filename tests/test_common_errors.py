"""``parameter_errors``: our misuse errors become one-line usage errors, by their type; a
foreign ValueError (numpy's, the standard library's) is a bug and keeps its traceback."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from crypto import CryptoError, CryptoParameterError
from esa import ConfigError, ESAError, ThresholdNotMet
from protocols import ParameterError, ProtocolError
from simulations._common import ERROR_ROOTS, UsageError, is_misuse, parameter_errors
from simulations.cli import main
from simulations.commands import protocols_list
from simulations.experiments import ExperimentsCSVError


class _ForeignError(ValueError):
    """A ValueError of no hierarchy of ours."""


class _DisguisedError(ValueError):
    """Claims to come from protocols/: the module name no longer decides."""


_DisguisedError.__module__ = "protocols._fake"


class _NewMisuse(ProtocolError, ValueError):
    """A misuse error of ours defined outside our packages (here: a test module)."""


def test_foreign_value_error_keeps_its_traceback() -> None:
    with pytest.raises(ValueError, match="must be non-negative") as info, parameter_errors():
        np.linspace(0.0, 1.0, num=-1)
    assert type(info.value) is ValueError
    assert not isinstance(info.value, UsageError)
    assert info.value.__cause__ is None
    # The traceback still reaches into numpy, where the error was raised.
    assert "numpy" in str(info.traceback[-1].path)


@pytest.mark.parametrize("error", [_ForeignError("x"), _DisguisedError("x")])
def test_value_errors_outside_our_roots_are_not_misuse(error: ValueError) -> None:
    assert not is_misuse(error)
    with pytest.raises(type(error)) as info, parameter_errors():
        raise error
    assert info.value is error


@pytest.mark.parametrize(
    "error",
    [
        ParameterError("epsilon must be > 0, got -1"),
        CryptoParameterError("bad key length"),
        ConfigError("threshold must be an integer >= 0, got -1"),
        ExperimentsCSVError("x.csv is empty"),
        _NewMisuse("a protocol refused this"),
    ],
)
def test_our_misuse_errors_become_usage_errors(error: Exception) -> None:
    assert is_misuse(error)
    with pytest.raises(UsageError) as info, parameter_errors():
        raise error
    assert str(info.value) == str(error)
    assert info.value.__cause__ is error


def test_every_esa_error_is_a_usage_error_and_other_roots_need_value_error() -> None:
    # The roles' run-time failures are one line too (as before the type-based check) ...
    with pytest.raises(UsageError), parameter_errors():
        raise ThresholdNotMet("crowd of 3 below the threshold 10")
    # ... but an error of the lower layers' roots that is no ValueError is no misuse.
    for error in (ProtocolError("internal"), CryptoError("internal")):
        assert not is_misuse(error)
        with pytest.raises(type(error)) as info, parameter_errors():
            raise error
        assert info.value is error
    assert {ESAError, ProtocolError, CryptoError, UsageError} <= set(ERROR_ROOTS)


def _raising(error: Exception) -> Callable[[object], int]:
    def handler(_args: object) -> int:
        raise error

    return handler


def test_cli_prints_one_line_for_ours_and_a_traceback_for_foreign(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(protocols_list, "run", _raising(ParameterError("domain must be >= 2")))
    with pytest.raises(SystemExit) as exc:
        main(["protocols"])
    assert exc.value.code == 2
    assert capsys.readouterr().err.strip() == "esa protocols: error: domain must be >= 2"
    foreign = _ForeignError("numpy said no")
    monkeypatch.setattr(protocols_list, "run", _raising(foreign))
    with pytest.raises(_ForeignError) as info:
        main(["protocols"])
    assert info.value is foreign
