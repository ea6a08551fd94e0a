"""DisEle as a tally: the counts of its (label, share) messages, drawn without the shares.

DisEle sends d·m shares per user (8·10^7 at n = 10^6, d = 16, m = 5), over the report limit
of a ``--crypto ideal`` run, so at the survey's n it runs as a tally. What must hold for that
to be the same experiment:
* the share-count sampler has the exact law of Split-Mix's shares (exact pmf, chi-square);
* ``tally_users`` / ``tally_fakes`` draw what tallying split randomized values gives
  (two-sample chi-square against the real encoder's ``split_messages``);
* through the pipeline, fakes are counted in reports at the hops and in values at the
  analyzer, as in a report run, and the estimate is unbiased.
Every test is seeded; each chi-square threshold is stated (p > 10^-4: with these seeds the
tests are deterministic, the threshold only says how far from exact a pass can be).
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy import stats

import esa
from esa._roles import split_messages
from protocols import DisEle, ProtocolSpec, build_protocol
from simulations.cli import main

P_MIN = 1e-4


def _exact_share_ones_law(m: int, odd: int, even: int) -> np.ndarray:
    """pmf of the ones among the shares of ``odd`` values 1 and ``even`` values 0, each
    split into m uniform bits of its parity: enumerated with exact binomial weights."""
    one = np.array([math.comb(m, v) if v % 2 == 1 else 0 for v in range(m + 1)], float)
    zero = np.array([math.comb(m, v) if v % 2 == 0 else 0 for v in range(m + 1)], float)
    law = np.array([1.0])
    for _ in range(odd):
        law = np.convolve(law, one / one.sum())
    for _ in range(even):
        law = np.convolve(law, zero / zero.sum())
    return law


def _chi2_p(observed: np.ndarray, expected_pmf: np.ndarray) -> float:
    """Goodness of fit, cells with expected count < 5 pooled into their neighbour."""
    total = observed.sum()
    exp = expected_pmf * total
    obs_cells, exp_cells, o, e = [], [], 0.0, 0.0
    for oi, ei in zip(observed, exp, strict=True):
        o, e = o + oi, e + ei
        if e >= 5:
            obs_cells.append(o)
            exp_cells.append(e)
            o, e = 0.0, 0.0
    obs_cells[-1] += o
    exp_cells[-1] += e
    return float(stats.chisquare(obs_cells, exp_cells).pvalue)


def _protocol(n: int, d: int, delta: float, fakes: int = 0) -> DisEle:
    """DisEle with the share count its δ needs (a forced smaller one is refused)."""
    spec = ProtocolSpec(epsilon=1.0, delta=delta, n=n, domain=d, fake_reports=fakes)
    proto = build_protocol("disele", spec)
    assert isinstance(proto, DisEle)
    return proto


@pytest.mark.parametrize(
    ("n", "delta", "m", "odd", "even"),
    [(12, 0.5, 4, 3, 4), (12, 0.1, 5, 5, 0), (8, 0.1, 6, 0, 6), (12, 1e-3, 8, 2, 7)],
)
def test_share_ones_has_split_mix_law(n: int, delta: float, m: int, odd: int, even: int) -> None:
    proto = _protocol(n, 4, delta)
    assert proto.params.shares == m
    rng = np.random.default_rng(7)
    draws = 20_000
    k_odd = np.full(draws, odd)
    k_even = np.full(draws, even)
    ones = proto._share_ones(k_odd, parity=1, rng=rng) + proto._share_ones(
        k_even, parity=0, rng=rng
    )
    law = _exact_share_ones_law(m, odd, even)
    observed = np.bincount(ones, minlength=law.size)
    assert observed.size == law.size  # nothing outside the support
    assert np.all(observed[law == 0] == 0)  # parity is exact: odd·1 mod 2
    assert _chi2_p(observed, law) > P_MIN


def _two_sample_p(a: np.ndarray, b: np.ndarray) -> float:
    values = np.union1d(a, b)
    table = np.array([[np.sum(a == v) for v in values], [np.sum(b == v) for v in values]])
    keep = table.sum(axis=0) >= 10  # sparse tails pooled away
    rest = table[:, ~keep].sum(axis=1, keepdims=True)
    table = np.hstack([table[:, keep], rest]) if rest.sum() else table[:, keep]
    return float(stats.chi2_contingency(table).pvalue)


def test_tally_users_and_fakes_match_tallying_split_values() -> None:
    n, d, m, trials = 12, 3, 4, 3_000
    proto = _protocol(n, d, 0.5)
    assert proto.params.shares == m
    x = np.array([0] * 7 + [1] * 5)  # label 2 held by nobody
    rng = np.random.default_rng(11)
    direct_users, direct_fakes, split_users, split_fakes = [], [], [], []
    for _ in range(trials):
        direct_users.append(proto.tally_users(x, rng=rng).counts[:, 1])
        direct_fakes.append(proto.tally_fakes(9, rng=rng).counts[:, 1])
        shares = split_messages(proto, proto.randomize(x, rng=rng))
        split_users.append(proto.tally(shares).counts[:, 1])
        split_fakes.append(
            proto.tally(split_messages(proto, proto.sample_fakes(9, rng=rng))).counts[:, 1]
        )
    for direct, split in ((direct_users, split_users), (direct_fakes, split_fakes)):
        a, b = np.array(direct), np.array(split)
        for j in range(d):
            assert _two_sample_p(a[:, j], b[:, j]) > P_MIN
    assert proto.tally_users(x, rng=rng).messages == n * d * m
    assert proto.tally_users(x, rng=rng).counts.sum() == n * d * m
    assert (
        proto.tally_fakes(9, rng=rng).counts.sum()
        == proto.tally_fakes(9, rng=rng).messages
        == 9 * m
    )


def test_tally_counts_are_the_label_share_counts() -> None:
    proto = _protocol(50, 5, 0.1)
    assert proto.params.shares == 5
    rng = np.random.default_rng(3)
    shares = split_messages(proto, proto.randomize(rng.integers(0, 5, 50), rng=rng))
    tally = proto.tally(shares)
    for j in range(5):
        for b in (0, 1):
            assert tally.counts[j, b] == np.sum((shares[:, 0] == j) & (shares[:, 1] == b))
    assert tally.messages == shares.shape[0] == 50 * 5 * 5


def test_pipeline_tally_counts_fakes_as_a_report_run_does_and_is_unbiased() -> None:
    """Hops count a fake value's m shares as m reports; the analyzer divides by m. Over 400
    seeded runs the mean error is within 4 standard errors of 0."""
    n, d = 3000, 8
    proto = build_protocol(
        "disele", ProtocolSpec(epsilon=1.0, delta=1e-6, n=n, domain=d, fake_reports=8)
    )
    assert proto.supports_tally
    assert proto.share_spec is not None
    m = proto.share_spec.shares
    x = np.random.default_rng(0).integers(0, 5, n)
    config = esa.PipelineConfig(shufflers=2, fake_reports=4, crypto="ideal", representation="tally")
    errors = []
    for seed in range(400):
        run = esa.run_pipeline(proto, x, config, rng=np.random.default_rng(seed))
        errors.append(run.estimate.values[0] - 5.0)
    assert [h.fakes_added for h in run.hops[:-1]] == [4 * m, 4 * m]
    for h in run.hops[:-1]:
        assert h.received + h.fakes_added == h.forwarded
    assert run.estimate.extra["complete"] is True
    assert run.estimate.extra["shares_received"] == n * d * m + 8 * m
    std = float(run.estimate.expected_std[0])
    assert abs(np.mean(errors)) < 4 * std / math.sqrt(len(errors))
    assert 0.85 < np.std(errors) / std < 1.15


def test_esa_simulate_runs_disele_at_a_million_users_as_a_tally(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Issue 4: every protocol through `esa simulate --crypto ideal` at n = 10^6. DisEle's
    # 5 shares × 16 labels = 8·10^7 reports exceed the report limit; the tally fits.
    assert (
        main(["simulate", "--protocol", "disele", "--crypto", "ideal", "--n", "1000000", "--json"])
        == 0
    )
    j = json.loads(capsys.readouterr().out)
    assert j["representation"] == "tally"
    assert j["messages_per_user"] == 80.0
    assert j["hops"][0]["received"] == 80_000_000
    assert abs(j["estimate"][0] - j["truth"][0]) < 5 * j["expected_std"][0]


def test_stated_std_does_not_collapse_when_the_estimate_is_zero() -> None:
    """At ε_c = 20 with every user holding one value the estimate is 0 or 2 (error sd 1).
    The plug-in std was taken at the estimate clipped to [0, d]: at 0 it stated 0.038 and
    half the runs erred by more than 6 stated stds. D is at least 1 for n ≥ 1 users."""
    proto = build_protocol("disele", ProtocolSpec(epsilon=20.0, delta=1e-6, n=100, domain=16))
    config = esa.PipelineConfig(shufflers=1, crypto="ideal", representation="tally")
    x = np.zeros(100, dtype=np.int64)
    runs = [esa.run_pipeline(proto, x, config, rng=np.random.default_rng(s)) for s in range(60)]
    errors = np.array([r.error[0] for r in runs])
    stds = np.array([r.estimate.expected_std[0] for r in runs])
    assert np.any([abs(r.estimate.values[0]) < 0.01 for r in runs])  # the case that collapsed
    assert stds.min() >= 1.0
    assert np.all(np.abs(errors) <= 6 * stds)
