"""δ = 0 (pure DP): accepted wherever the guarantee is pure, refused by name elsewhere.

The pure protocols (Cnt_PURE, RSum_PURE, Cnt_SGM's unary encoding, PUT over a pure counter)
build at δ = 0 and state δ = 0; every protocol and amplification bound that needs δ > 0
refuses δ = 0 with one :class:`NeedsPositiveDelta` naming itself; ``esa amplify``,
``esa simulate`` and ``esa audit`` take ``--delta 0``.
"""

from __future__ import annotations

import json

import pytest

from protocols import (
    BOUNDS,
    NeedsPositiveDelta,
    ParameterError,
    ProtocolSpec,
    build_protocol,
    protocol_names,
)
from protocols._base import check_delta
from simulations.cli import main
from tests._cli import usage_error

#: Protocols (with options) whose guarantee is proven at δ = 0.
PURE = [
    ("cnt_pure", {}),
    ("rsum_pure", {}),
    ("cnt_sgm", {"encoding": "unary"}),
    ("put", {"encoding": "unary"}),
    ("put", {"counter": "cnt_pure"}),
]
PURE_DEFAULTS = {name for name, options in PURE if not options}


def _spec(delta: float, options: dict[str, float | str] | None = None) -> ProtocolSpec:
    return ProtocolSpec(epsilon=1.0, delta=delta, n=1000, domain=16, options=options or {})


def test_check_delta_accepts_zero_only_when_pure() -> None:
    assert check_delta(0.0, pure=True) == 0.0
    assert check_delta(0, pure=True) == 0.0
    with pytest.raises(NeedsPositiveDelta, match=r"^hist_kr needs delta > 0: why$"):
        check_delta(0.0, who="hist_kr", why="why")
    with pytest.raises(NeedsPositiveDelta, match="pure DP"):
        check_delta(0.0)
    for bad in (-1e-9, 1.0, float("nan")):
        with pytest.raises(ParameterError, match=r"must lie in \[0, 1\)"):
            check_delta(bad, pure=True)
        with pytest.raises(ParameterError, match=r"must lie in \(0, 1\)"):
            check_delta(bad)


def test_protocol_spec_accepts_delta_zero() -> None:
    assert _spec(0.0).delta == 0.0
    with pytest.raises(ParameterError):
        _spec(-0.1)


@pytest.mark.parametrize(("name", "options"), PURE, ids=[f"{n}{o}" for n, o in PURE])
def test_pure_protocols_build_at_delta_zero_and_state_it(
    name: str, options: dict[str, float | str]
) -> None:
    protocol = build_protocol(name, _spec(0.0, options))
    assert protocol.privacy.delta == 0.0
    if options.get("encoding") != "unary":  # the unary ±1 messages prove only their local ε
        assert protocol.privacy.epsilon_central <= 1.0 + 1e-9


@pytest.mark.parametrize("name", sorted(set(protocol_names()) - PURE_DEFAULTS))
def test_approximate_protocols_refuse_delta_zero_by_name(name: str) -> None:
    with pytest.raises(NeedsPositiveDelta) as exc:
        build_protocol(name, _spec(0.0))
    message = str(exc.value)
    assert message.startswith(f"{name} needs delta > 0: ")
    assert "\n" not in message


def test_hist_kr_names_its_amplification_bounds() -> None:
    with pytest.raises(NeedsPositiveDelta) as exc:
        build_protocol("hist_kr", _spec(0.0))
    assert str(exc.value) == "hist_kr needs delta > 0: its amplification bounds are approximate DP"


def test_cnt_sgm_splitmix_points_at_the_pure_encoding() -> None:
    with pytest.raises(NeedsPositiveDelta, match="encoding=unary"):
        build_protocol("cnt_sgm", _spec(0.0))


def test_only_local_dp_is_a_pure_bound() -> None:
    assert [b.name for b in BOUNDS.values() if b.pure] == ["local_dp"]
    assert BOUNDS["local_dp"].epsilon_central(epsilon_local=1.0, n=10**4, delta=0.0) == 1.0
    assert BOUNDS["local_dp"].epsilon_local(epsilon_central=1.0, n=10**4, delta=0.0) == 1.0
    for b in BOUNDS.values():
        if not b.pure:
            with pytest.raises(NeedsPositiveDelta, match=f"^{b.name} needs delta > 0: "):
                b.epsilon_central(epsilon_local=1.0, n=10**4, delta=0.0)


def test_amplify_at_delta_zero(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["amplify", "--epsilon-local", "1", "--n", "10000", "--delta", "0", "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["delta"] == 0.0
    rows = {r["bound"]: r for r in out["bounds"]}
    assert rows["local_dp"]["value"] == 1.0
    assert rows["local_dp"]["reason"] is None
    for name, row in rows.items():
        if name != "local_dp":
            assert row["value"] is None
            assert row["reason"] == f"{name} needs delta > 0: it is an approximate-DP bound"
    assert out["tightest"]["generic"] == {
        "bound": "local_dp",
        "value": 1.0,
        "method": "bound",
        "tolerance": None,
    }


def test_simulate_refuses_delta_zero_for_hist_kr(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["simulate", "--protocol", "hist_kr", "--delta", "0", "--n", "300"]
    err = usage_error([*argv, "--crypto", "ideal"], capsys)
    assert "hist_kr needs delta > 0: its amplification bounds are approximate DP" in err


def test_simulate_cnt_pure_at_delta_zero(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["simulate", "--protocol", "cnt_pure", "--delta", "0", "--n", "300"]
    assert main([*argv, "--crypto", "ideal", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["parameters"]["delta"] == 0.0


def test_audit_cnt_pure_at_delta_zero(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["audit", "--protocol", "cnt_pure", "--epsilon", "1", "--delta", "0", "--n", "200"]
    assert main([*argv, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["delta"] == 0.0
    assert out["violations"] == []
    none = next(r for r in out["scenarios"] if r["scenario"] == "none")
    assert none["epsilon_upper"] <= 1.0
    assert none["bound"].startswith("cnt_pure_exact_central")
    assert none["epsilon_lower"] is not None
    assert none["epsilon_lower"] <= none["epsilon_upper"]
    # Without an honest crowd only the pure local guarantee is left (no amplification at δ = 0).
    assert all(r["bound"] == "local_dp" for r in out["scenarios"] if r["scenario"] != "none")
    assert all(r["murs_formula"] is None for r in out["scenarios"])


def test_audit_refuses_delta_zero_for_hist_kr(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["audit", "--protocol", "hist_kr", "--epsilon", "1", "--delta", "0", "--n", "200"]
    err = usage_error(argv, capsys)
    assert "hist_kr needs delta > 0" in err
