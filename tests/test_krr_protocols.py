"""Hist_KR and Cnt_RR: unbiased with fakes, variance as stated, codec, refusals."""

from __future__ import annotations

import numpy as np
import pytest

import protocols


def _hist(domain: int = 8, eps_l: float = 2.0, n: int = 4000) -> protocols.HistKR:
    return protocols.HistKR(domain=domain, epsilon_local=eps_l, n=n, delta=1e-6)


def test_unbiased_and_variance_with_fakes() -> None:
    # 600 seeded repeats: mean error within 4 standard errors of 0 per bin, and the empirical
    # variance within ±15 % of the closed form (with 600 repeats the sampling sd of a
    # variance estimate is ≈ √(2/600) ≈ 5.8 %, so 15 % is > 2.5 sd per bin).
    proto = _hist()
    rng = np.random.default_rng(11)
    n, n_fakes, d = 4000, 300, 8
    x = rng.choice(d, size=n, p=np.arange(1, d + 1) / np.arange(1, d + 1).sum())
    truth = proto.truth(x)
    errs = np.empty((600, d))
    for r in range(600):
        msgs = np.concatenate([proto.randomize(x, rng=rng), proto.sample_fakes(n_fakes, rng=rng)])
        errs[r] = proto.estimate(msgs, n=n, n_fakes=n_fakes).values - truth
    var = proto.variance(truth, n=n, n_fakes=n_fakes)
    se = np.sqrt(var / errs.shape[0])
    assert np.all(np.abs(errs.mean(axis=0)) < 4 * se)
    ratio = errs.var(axis=0, ddof=1) / var
    assert np.all((ratio > 0.85) & (ratio < 1.15)), ratio


def test_cnt_rr_counts_ones() -> None:
    # 300 seeded repeats: mean within 4 standard errors of the true count of ones, and the
    # empirical sd within ±15 % of the closed form.
    n = 5000
    proto = protocols.CntRR(epsilon_local=1.0, n=n, delta=1e-6)
    rng = np.random.default_rng(3)
    x = (rng.random(n) < 0.3).astype(np.int64)
    ones = int(x.sum())
    assert proto.truth(x).tolist() == [ones]
    est = np.array(
        [proto.estimate(proto.randomize(x, rng=rng), n=n, n_fakes=0).values[0] for _ in range(300)]
    )
    sd = float(np.sqrt(proto.variance([n - ones, ones], n=n)[1]))
    assert abs(est.mean() - ones) < 4 * sd / np.sqrt(est.size)
    assert 0.85 < est.std(ddof=1) / sd < 1.15


def test_codec_round_trip_and_garbage() -> None:
    proto = _hist(domain=300)
    assert proto.message_size == 2
    msgs = np.arange(300)
    decoded, ok = proto.decode(proto.encode(msgs))
    assert ok.all()
    assert np.array_equal(decoded, msgs)
    garbage = np.array([[0xFF, 0xFF], [0x01, 0x2C]], dtype=np.uint8)  # 65535 and 300
    _, ok = proto.decode(garbage)
    assert not ok.any()


def test_randomizer_is_krr_exactly() -> None:
    # Empirical transition frequencies match p = e^ε/(e^ε+k−1), q = 1/(e^ε+k−1) within
    # 5 binomial standard errors (n = 200,000 draws per input).
    proto = _hist(domain=4, eps_l=1.5)
    rng = np.random.default_rng(5)
    e = np.exp(1.5)
    p, q = e / (e + 3), 1 / (e + 3)
    out = proto.randomize(np.zeros(200_000, dtype=np.int64), rng=rng)
    freq = np.bincount(out, minlength=4) / out.size
    se = np.sqrt(np.array([p, q, q, q]) * (1 - np.array([p, q, q, q])) / out.size)
    assert np.all(np.abs(freq - [p, q, q, q]) < 5 * se)


@pytest.mark.parametrize(
    "bad",
    [
        dict(domain=1, epsilon_local=1.0, n=10, delta=1e-6),
        dict(domain=4, epsilon_local=0.0, n=10, delta=1e-6),
        dict(domain=4, epsilon_local=1.0, n=0, delta=1e-6),
        dict(domain=4, epsilon_local=1.0, n=10, delta=1.0),
    ],
)
def test_bad_parameters_refused(bad: dict) -> None:
    with pytest.raises(protocols.ParameterError):
        protocols.HistKR(**bad)


def test_values_outside_domain_refused() -> None:
    proto = _hist(domain=4)
    with pytest.raises(protocols.ParameterError, match=r"\[0, 4\)"):
        proto.randomize(np.array([0, 4]), rng=np.random.default_rng(0))
    with pytest.raises(protocols.ParameterError, match="0-based"):
        proto.randomize(np.array([-1]), rng=np.random.default_rng(0))


def test_from_central_uses_tightest_bound() -> None:
    spec = protocols.ProtocolSpec(epsilon=1.0, delta=1e-6, n=50_000, domain=16)
    proto = protocols.build_protocol("hist_kr", spec)
    assert proto.privacy.epsilon_central <= 1.0 + 1e-9
    eps_l, name = protocols.largest_local(
        epsilon_central=1.0, n=50_000, delta=1e-6, family="krr", k=16
    )
    assert proto.privacy.bound == name
    assert proto.privacy.epsilon_local == pytest.approx(eps_l)


def test_forced_bound_and_unknown_bound() -> None:
    spec = protocols.ProtocolSpec(epsilon=0.5, delta=1e-6, n=50_000, domain=2, bound="thm3_cheu")
    assert protocols.build_protocol("cnt_rr", spec).privacy.bound == "thm3_cheu"
    with pytest.raises(protocols.ParameterError, match="unknown bound"):
        protocols.build_protocol(
            "cnt_rr", protocols.ProtocolSpec(epsilon=0.5, delta=1e-6, n=100, bound="x")
        )


def test_unknown_protocol_lists_names() -> None:
    with pytest.raises(protocols.ParameterError, match="hist_kr"):
        protocols.build_protocol("nope", protocols.ProtocolSpec(epsilon=1, delta=1e-6, n=10))
