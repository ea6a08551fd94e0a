"""Protocols with several shuffler chains (RSum_RM: one per precision): each chain's fakes
look like that chain's traffic, so no chain carries another precision's messages."""

from __future__ import annotations

import math

import numpy as np
import pytest

import esa
from protocols import ParameterError, ProtocolSpec, RSumRM, build_protocol


def _rm(n: int) -> RSumRM:
    return RSumRM(epsilon=1.0, delta=1e-6, n=n, messages=2)


def test_channel_fakes_carry_their_precision_and_are_uniform() -> None:
    p = _rm(10**6)
    rng = np.random.default_rng(3)
    for j, levels in enumerate(p.levels):
        f = p.sample_channel_fakes(40_000, channel=j, rng=rng)
        assert f.shape == (40_000, 2)
        assert np.all(f[:, 0] == j)
        counts = np.bincount(f[:, 1], minlength=levels)
        assert counts.size == levels  # nothing outside the precision's levels
        exp = 40_000 / levels
        assert np.all(np.abs(counts - exp) < 4.5 * math.sqrt(exp))  # 4.5 σ per level
    for bad in (-1, p.channels):
        with pytest.raises(ParameterError, match="channel must lie"):
            p.sample_channel_fakes(1, channel=bad, rng=rng)


def test_single_chain_protocols_refuse_other_channels() -> None:
    p = build_protocol("hist_kr", ProtocolSpec(epsilon=1.0, delta=1e-6, n=1000, domain=4))
    f = p.sample_channel_fakes(5, channel=0, rng=np.random.default_rng(0))
    assert f.shape[0] == 5
    with pytest.raises(ParameterError, match="channel must lie"):
        p.sample_channel_fakes(5, channel=1, rng=np.random.default_rng(0))


@pytest.mark.parametrize("crypto", ["ideal", "onion"])
def test_each_precision_chain_adds_only_its_own_fakes(crypto: str) -> None:
    n, m, per = 3000, 2, 25  # n ≥ 2550 for two precisions at ε = 1
    p = _rm(n)
    x = np.random.default_rng(1).random(n)
    config = esa.PipelineConfig(shufflers=m, fake_reports=per, crypto=crypto, workers=1)
    r = esa.run_pipeline(p, x, config, rng=np.random.default_rng(2))
    # Every precision receives its n users' messages plus the m·n_r fakes of its own chain.
    msgs = r.analyzer_messages
    for j in range(p.channels):
        assert int((msgs[:, 0] == j).sum()) == n + m * per
    assert r.estimate.extra["messages_per_precision"] == [n + m * per] * p.channels
    shufflers = [h for h in r.hops if h.role == "shuffler"]
    assert sorted({h.channel for h in shufflers}) == list(range(p.channels))
    assert all(h.fakes_added == per for h in shufflers)
    # Fakes are removed: the estimate stays within 5 stated std of the truth.
    assert abs(r.estimate.values[0] - r.truth[0]) < 5 * r.estimate.expected_std[0]


@pytest.mark.slow
def test_tcp_transport_runs_one_chain_per_channel(capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from simulations.cli import main

    argv = ["simulate", "--protocol", "rsum_rm", "--transport", "tcp", "--n", "3000"]
    assert main([*argv, "--shufflers", "2", "--fake-reports", "2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["transport"] == "tcp"
    assert out["drop_check"] == {"ok": True, "problems": []}
    hops = [(h["role"], h["channel"], h["hop"]) for h in out["hops"]]
    # Both precisions' chains of 2 shufflers, then the one analyzer (run_pipeline's order).
    assert hops == [
        ("shuffler", 0, 0),
        ("shuffler", 0, 1),
        ("shuffler", 1, 0),
        ("shuffler", 1, 1),
        ("analyzer", 0, 2),
    ]
    assert [h["received"] for h in out["hops"]] == [3000, 3002, 3000, 3002, 6008]
