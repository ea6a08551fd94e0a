"""Real-sum protocols RSum_RR, RSum_KR, RSum_RM, RSum_DSG, and the counting protocols end to
end through the esa pipeline.

Thresholds: unbiased = mean error within 4 standard errors (exact variance from the
protocol's closed form for these inputs); variance within ±20 % of the closed form over
≥ 600 seeded repeats (standard error of a variance estimate ≈ √(2/R) ≈ 6 %).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import esa
from protocols import (
    ParameterError,
    ProtocolSpec,
    RSumDSG,
    RSumKR,
    RSumPURE,
    RSumRM,
    RSumRR,
    build_protocol,
)
from protocols._messages import randomized_round
from protocols._rsum import KRRLevels, advanced_composition_epsilon

REPEATS = 600


def _data(n: int, seed: int = 0) -> np.ndarray:
    x = np.random.default_rng(seed).beta(2.0, 5.0, size=n)
    x[:3] = [0.0, 1.0, 0.5]  # the ends of [0, 1] must round-trip too
    return x


def _split(values: np.ndarray, q: int, m: int, rng: np.random.Generator) -> np.ndarray:
    """Split-Mix the way the esa encoder does: m−1 uniform shares, last = value − sum."""
    shares = rng.integers(0, q, size=(values.size, m - 1), dtype=np.int64)
    last = (values - shares.sum(axis=1)) % q
    return np.concatenate([shares, last[:, None]], axis=1).reshape(-1)


def _messages(p, x, rng, n_fakes=0):
    msgs = p.randomize(x, rng=rng)
    if n_fakes:
        msgs = np.concatenate([msgs, p.sample_fakes(n_fakes, rng=rng)])
    if p.share_spec is not None:
        msgs = _split(msgs, p.share_spec.modulus, p.share_spec.shares, rng)
    return msgs


def _estimate(p, x, rng, n_fakes=0):
    msgs = _messages(p, x, rng, n_fakes)
    dec, ok = p.decode(p.encode(msgs))
    assert ok.all()
    return p.estimate(dec, n=x.size, n_fakes=n_fakes).values[0]


# Forcing the closed-form Thm 4 bound keeps construction instant (the tightest registered
# bounds are numerical and take seconds); the estimators do not depend on which bound set λ.
B4 = "thm4_balle"
PROTOCOLS = {
    "rsum_rr": lambda n: RSumRR(epsilon=1.0, delta=1e-6, n=n, bound=B4),
    "rsum_kr": lambda n: RSumKR(epsilon=1.0, delta=1e-6, n=n, bound=B4),
    "rsum_rm": lambda n: RSumRM(epsilon=1.0, delta=1e-6, n=n, bound=B4),
    "rsum_dsg": lambda n: RSumDSG(epsilon=1.0, delta=1e-6, n=n),
}


# --- building blocks -------------------------------------------------------------------


def test_randomized_round_is_unbiased_and_in_range():
    rng = np.random.default_rng(0)
    x = np.array([0.0, 0.123, 0.5, 0.999, 1.0])
    draws = np.stack([randomized_round(x, 7, rng=rng) for _ in range(4000)])
    assert draws.min() >= 0
    assert draws.max() <= 7
    f = x * 7 - np.floor(x * 7)
    se = np.sqrt(np.maximum(f * (1 - f), 1e-12) / 4000)
    assert np.all(np.abs(draws.mean(axis=0) - x * 7) <= 4 * se + 1e-12)


@pytest.mark.parametrize("rounds", [1, 2, 10, 50])
def test_advanced_composition_split_is_valid_and_tight(rounds):
    eps, slack = 1.0, 5e-7
    e = advanced_composition_epsilon(eps, slack, rounds)
    adv = math.sqrt(2 * rounds * math.log(1 / slack)) * e + rounds * e * math.expm1(e)
    assert rounds * e <= eps + 1e-12 or adv <= eps + 1e-9  # one of the two theorems holds
    assert e >= eps / rounds  # never worse than basic composition


# --- unbiasedness and variance ---------------------------------------------------------


@pytest.mark.parametrize("name", sorted(PROTOCOLS))
def test_unbiased_with_closed_form_variance(name):
    n = 5_000 if name == "rsum_dsg" else 20_000  # Pólya draws dominate the DSG run time
    p = PROTOCOLS[name](n)
    x = _data(n)
    rng = np.random.default_rng(1)
    err = np.array([_estimate(p, x, rng) - x.sum() for _ in range(REPEATS)])
    var = p.variance(x)
    assert abs(err.mean()) < 4 * math.sqrt(var / REPEATS)
    assert 0.8 < err.var() / var < 1.2
    # The estimate's own std: the exact noise variance (RSum_RR; a plug-in of it for KR and
    # RM, within ±5 % of it here) plus the rounding's bound, which the exact total's rounding
    # term never exceeds.
    est = p.estimate(
        p.randomize(x, rng=rng) if p.share_spec is None else _messages(p, x, rng), n=n, n_fakes=0
    )
    assert est.expected_std[0] ** 2 >= var * 0.95
    if "rounding_variance_bound" in est.extra:
        assert est.expected_std[0] ** 2 <= var * 1.05 + est.extra["rounding_variance_bound"]


@pytest.mark.parametrize("name", sorted(PROTOCOLS))
def test_fakes_uniform_and_removed(name):
    n, fakes = (5_000 if name == "rsum_dsg" else 20_000), 3_000
    p = PROTOCOLS[name](n)
    x = _data(n, seed=2)
    rng = np.random.default_rng(3)
    err = np.array([_estimate(p, x, rng, n_fakes=fakes) - x.sum() for _ in range(200)])
    var = p.variance(x, n_fakes=fakes // max(1, getattr(p, "channels", 1)))
    assert abs(err.mean()) < 4 * math.sqrt(var / 200)


def test_krr_fakes_are_uniform_over_the_levels():
    p = RSumKR(epsilon=1.0, delta=1e-6, n=20_000, bound=B4)
    f = p.sample_fakes(60_000, rng=np.random.default_rng(4))
    counts = np.bincount(f, minlength=p.k + 1)
    expected = f.size / (p.k + 1)
    assert counts.size == p.k + 1
    assert np.all(np.abs(counts - expected) < 4 * math.sqrt(expected))


def test_rm_fakes_uniform_within_each_precision():
    p = RSumRM(epsilon=1.0, delta=1e-6, n=10**6, bound=B4)
    f = p.sample_fakes(90_000, rng=np.random.default_rng(5))
    for j, levels in enumerate(p.levels):
        v = f[f[:, 0] == j, 1]
        assert abs(v.size - f.shape[0] / p.channels) < 4 * math.sqrt(f.shape[0] / p.channels)
        counts = np.bincount(v, minlength=levels)
        assert counts.size == levels
        exp = v.size / levels
        assert np.all(np.abs(counts - exp) < 4.5 * math.sqrt(exp))


def test_dsg_fakes_are_uniform_shares_of_zero():
    p = RSumDSG(epsilon=1.0, delta=1e-6, n=20_000)
    rng = np.random.default_rng(6)
    f = p.sample_fakes(50_000, rng=rng)
    assert int(np.sum(f % p.q, dtype=object) % p.q) == 0
    # Marginally uniform on Z_q: 16 equal-width bins of the top bits.
    counts = np.bincount((f * 16) // p.q, minlength=16)
    assert np.all(np.abs(counts - f.size / 16) < 4 * math.sqrt(f.size / 16))


def test_dsg_wrap_around_correction_keeps_zero_sums_unbiased():
    # All-zero inputs: the noisy sum is negative about half the time and wraps mod q.
    n = 5_000
    p = RSumDSG(epsilon=1.0, delta=1e-6, n=n)
    rng = np.random.default_rng(7)
    x = np.zeros(n)
    wrapped, est = 0, []
    for _ in range(300):
        msgs = _messages(p, x, rng)
        e = p.estimate(msgs, n=n, n_fakes=0)
        wrapped += e.extra["wrapped"]
        est.append(e.values[0])
    assert 50 < wrapped < 250
    assert abs(np.mean(est)) < 4 * math.sqrt(p.variance(x) / 300)


# --- parameters and messages -----------------------------------------------------------


def test_messages_per_user_as_stated():
    n = 20_000
    x = _data(n)
    rng = np.random.default_rng(8)
    for name, make in PROTOCOLS.items():
        p = make(n)
        msgs = _messages(p, x, rng)
        assert msgs.shape[0] == n * p.messages_per_user, name
    assert PROTOCOLS["rsum_kr"](n).messages_per_user == 1
    dsg = PROTOCOLS["rsum_dsg"](n)
    assert dsg.messages_per_user == dsg.share_spec.shares


def test_rm_precisions_follow_the_recursive_formula_and_carry_their_index():
    n, eps, delta = 10**6, 1.0, 1e-6
    p = RSumRM(epsilon=eps, delta=delta, n=n, bound=B4)
    m = round(math.log(math.log2(n), 3))
    assert p.channels == m == 3
    eps_j = eps / m
    p_max = math.floor((n - 1) * eps_j / max(14 * math.log(2 * m / delta) / eps_j, 27)) - 1
    a = ((3**m - 1) * n * eps**2 / m**3) ** (3.0 ** (-m - 1))
    assert p.precisions == tuple(min(math.ceil(a ** (3**j)), p_max) for j in range(1, m + 1))
    assert p.levels[-1] == p.precisions[-1] + 1
    msgs = p.randomize(_data(1000), rng=np.random.default_rng(9))
    ch = p.channel_of(msgs)
    assert np.all(np.bincount(ch, minlength=m) == 1000)
    for j, levels in enumerate(p.levels):
        assert msgs[ch == j, 1].max() < levels


def test_rm_digits_encode_x_exactly_in_expectation():
    p = RSumRM(epsilon=1.0, delta=1e-6, n=10**6, bound=B4)
    x = np.array([0.0, 0.23456, 0.999999, 1.0])
    rng = np.random.default_rng(10)
    acc = np.zeros(x.size)
    for _ in range(3000):
        d = p._digits(x, rng=rng)
        acc += (d / np.asarray(p.q, dtype=np.float64)).sum(axis=1)
    assert np.allclose(acc / 3000, x, atol=4 * 0.5 / p.q[-1] / math.sqrt(3000) + 1e-12)


def test_kr_precision_default_minimizes_the_mse_bound():
    n = 20_000
    p = RSumKR(epsilon=1.0, delta=1e-6, n=n, bound=B4)

    def mse(k):
        g = KRRLevels.for_search(levels=k + 1, epsilon=1.0, delta=1e-6, n=n)
        return n / (4 * k * k) + g.worst_variance(n=n) / k**2

    assert mse(p.k) <= min(mse(p.k - 1), mse(p.k + 1))


def test_dsg_parameters():
    n = 10**6
    p = RSumDSG(epsilon=1.0, delta=1e-6, n=n)
    assert p.p == 1000  # ⌈√n⌉
    assert p.q >= 2 * (n * p.p + 1)
    assert p.alpha == pytest.approx(math.exp(-1.0 / 1000))
    sigma = math.log2((1 + math.e) / 1e-6)
    assert p.m == max(
        2, math.ceil((2 * sigma + math.log2(p.q)) / (math.log2(n) - math.log2(math.e)) + 1)
    )
    assert math.isinf(p.privacy.epsilon_local)


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: RSumKR(epsilon=1.0, delta=1e-6, n=1000, precision=0), "precision"),
        (lambda: RSumKR(epsilon=1.0, delta=1e-6, n=100, precision=50, bound=B4), "rsum_kr"),
        (lambda: RSumKR(epsilon=1.0, delta=1e-6, n=10**4, bound="nope"), "unknown bound"),
        (lambda: RSumRR(epsilon=1.0, delta=1e-6, n=100, precision=1 << 25), "precision"),
        (lambda: RSumRM(epsilon=1.0, delta=1e-6, n=200), "too small"),
        (lambda: RSumRM(epsilon=1.0, delta=1e-6, n=10**6, precisions=(1, 5), bound=B4), ">= 2"),
        (lambda: RSumDSG(epsilon=1.0, delta=1e-6, n=2), "n must be"),
        (lambda: RSumDSG(epsilon=1.0, delta=1e-6, n=100, shares=1), "shares"),
        (lambda: RSumDSG(epsilon=0.0, delta=1e-6, n=100), "epsilon"),
        (lambda: RSumRR(epsilon=1.0, delta=2.0, n=100), "delta"),
    ],
)
def test_refuses_invalid_parameters(make, match):
    with pytest.raises(ParameterError, match=match):
        make()


def test_values_outside_unit_interval_refused():
    p = RSumKR(epsilon=1.0, delta=1e-6, n=20_000, bound=B4)
    with pytest.raises(ParameterError, match=r"\[0.0, 1\]"):
        p.randomize(np.array([0.5, 1.5]), rng=np.random.default_rng(0))


@pytest.mark.parametrize("name", sorted(PROTOCOLS))
def test_codec_round_trip_and_garbage(name):
    p = PROTOCOLS[name](20_000)
    rng = np.random.default_rng(11)
    msgs = _messages(p, _data(2000), rng)
    dec, ok = p.decode(p.encode(msgs))
    assert ok.all()
    np.testing.assert_array_equal(dec, msgs)
    garbage = np.full((4, p.message_size), 0xFF, dtype=np.uint8)
    _, ok = p.decode(garbage)
    assert not ok.any()


# --- end to end through esa --------------------------------------------------------------

MINE = ["cnt_2m", "cnt_bn", "cnt_pure", "cnt_sgm", "rsum_dsg", "rsum_kr", "rsum_pure"]
MINE += ["rsum_rm", "rsum_rr"]


def _values(p, n, seed):
    rng = np.random.default_rng(seed)
    if p.input_kind.value == "binary":
        return (rng.random(n) < 0.3).astype(np.int64)
    return rng.random(n)


@pytest.mark.parametrize("name", MINE)
def test_pipeline_ideal_matches_expected_error(name):
    n = 20_000
    # The pure protocols send τ (and p·τ) messages per user: keep τ and p small here.
    opts: dict[str, float] = {"messages": 3} if name.endswith("_pure") else {}
    if name == "rsum_pure":
        opts["precision"] = 4
    p = build_protocol(name, ProtocolSpec(1.0, 1e-6, n, options=opts))
    x = _values(p, n, 12)
    cfg = esa.PipelineConfig(shufflers=2, fake_reports=50, crypto="ideal", workers=1)
    res = esa.run_pipeline(p, x, cfg, rng=np.random.default_rng(13))
    err = abs(res.estimate.values[0] - res.truth[0])
    slack = p.error_bound(1e-6) if name == "cnt_2m" else 5 * res.estimate.expected_std[0]
    assert err <= slack
    assert res.to_json()["messages_per_user"] == p.messages_per_user


@pytest.mark.parametrize("name", MINE)
def test_pipeline_onion_small(name):
    n = 300 if name != "cnt_2m" else 800  # cnt_2m needs n >= 100 ln(2/δ)/ε² = 760
    opts: dict[str, float] = {"messages": 3} if name.endswith("_pure") else {}
    if name in ("rsum_rr", "rsum_kr", "rsum_pure"):
        opts["precision"] = 4
    spec = ProtocolSpec(1.0 if name != "rsum_rm" else 4.0, 1e-3, n, options=opts)
    if name == "rsum_rm":
        p = RSumRM(epsilon=4.0, delta=1e-3, n=n, precisions=(2, 3))
    else:
        p = build_protocol(name, spec)
    x = _values(p, n, 14)
    cfg = esa.PipelineConfig(shufflers=2, fake_reports=5, crypto="onion", workers=1)
    res = esa.run_pipeline(p, x, cfg, rng=np.random.default_rng(15))
    assert all(h.invalid == 0 for h in res.hops)
    err = abs(res.estimate.values[0] - res.truth[0])
    slack = p.error_bound(1e-6) if name == "cnt_2m" else 5 * res.estimate.expected_std[0]
    assert err <= slack


@pytest.mark.slow
@pytest.mark.parametrize("name", ["cnt_2m", "cnt_sgm", "rsum_kr", "rsum_dsg"])
def test_pipeline_ideal_one_million_users(name):
    # The other protocols at n = 10^6: benchmarks/bench_count_sum_protocols.py (docs).
    n = 10**6
    p = build_protocol(name, ProtocolSpec(1.0, 1e-6, n))
    x = _values(p, n, 16)
    res = esa.run_pipeline(
        p, x, esa.PipelineConfig(shufflers=1, crypto="ideal"), rng=np.random.default_rng(17)
    )
    err = abs(res.estimate.values[0] - res.truth[0])
    assert err <= (p.error_bound(1e-6) if name == "cnt_2m" else 5 * res.estimate.expected_std[0])
    if name == "cnt_2m":  # messages_per_user is that of a user holding 1: x + Ber(p)
        assert res.hops[-1].received <= n * p.messages_per_user
    else:
        assert res.hops[-1].received == pytest.approx(n * p.messages_per_user, rel=0.01)


# --- RSum_PURE -------------------------------------------------------------------------


def test_rsum_pure_digits_and_parameters():
    assert RSumPURE(epsilon=1.0, n=1000).allocation == "optimal"  # the default
    p = RSumPURE(epsilon=1.0, n=1000, allocation="even")
    assert p.bits == math.ceil(math.log2(1000) / 2) + 1  # 2^p − 1 ≥ √n: rounding std ≤ ½
    assert p.bit.epsilon == pytest.approx(1.0 / p.bits)
    assert p.bit.tau == 2 * math.ceil(math.log2(1000) * p.bits) + 1  # O_{ε/p}(log n) per digit
    assert p.messages_per_user == p.bits * p.bit.tau
    assert p.privacy.delta == 0.0
    q = RSumPURE(epsilon=1.0, n=1000, precision=5, messages=3)
    d = q._digits(np.array([0.0, 1.0]), rng=np.random.default_rng(0))
    np.testing.assert_array_equal(d, [[0] * 5, [1] * 5])
    msgs = q.randomize(_data(100), rng=np.random.default_rng(1))
    assert np.all(np.bincount(msgs[:, 0], minlength=5) == 100 * 3)


def test_rsum_pure_unbiased_with_closed_form_variance():
    n = 500
    p = RSumPURE(epsilon=4.0, n=n, precision=5, messages=3)
    x = _data(n, seed=22)
    rng = np.random.default_rng(23)
    err = np.array([_estimate(p, x, rng) - x.sum() for _ in range(REPEATS)])
    var = p.variance(x)
    assert abs(err.mean()) < 4 * math.sqrt(var / REPEATS)
    assert 0.8 < err.var() / var < 1.2
    err = np.array([_estimate(p, x, rng, n_fakes=200) - x.sum() for _ in range(200)])
    assert abs(err.mean()) < 4 * math.sqrt(p.variance(x, n_fakes=40) / 200)


def test_rsum_pure_refuses_too_many_digits():
    with pytest.raises(ParameterError, match="<= 48"):
        RSumPURE(epsilon=1.0, n=1000, precision=60)


@pytest.mark.parametrize("name", ["rsum_kr", "rsum_rr"])
def test_small_crowds_tune_precision_on_the_numerical_bounds(name):
    # At n = 40 no closed-form amplification bound applies at ε = 1, so tuning the precision
    # used to refuse ("no precision has an applicable bound") although the numerical bounds
    # prove it; the search now falls back on them. Unbiased over 600 seeded runs (4 SE).
    n = 40
    p = build_protocol(name, ProtocolSpec(epsilon=1.0, delta=1e-6, n=n))
    assert p.privacy.epsilon_central <= 1.0 + 1e-9
    x = _data(n, seed=5)
    rng = np.random.default_rng(6)
    err = np.array([_estimate(p, x, rng) - x.sum() for _ in range(REPEATS)])
    assert abs(err.mean()) < 4 * math.sqrt(p.variance(x) / REPEATS)


def test_precision_search_names_the_run_when_nothing_applies():
    from protocols import BoundNotApplicable
    from protocols._rsum import _argmin_int

    def never(k: int) -> float:
        raise BoundNotApplicable(f"nothing at {k}")

    with pytest.raises(
        BoundNotApplicable,
        match=r"rsum_kr at n=3: no precision in \[1, 4\].*at precision 1: nothing at 1",
    ):
        _argmin_int(never, 1, 4, what="rsum_kr at n=3")
    # ... and any ε_c is reachable at any n now that the numerical bounds back the search
    tiny = build_protocol("rsum_kr", ProtocolSpec(epsilon=0.05, delta=1e-6, n=3))
    assert tiny.privacy.epsilon_central <= 0.05 + 1e-9


# --- RSum_RR: messages per user and stated std ----------------------------------------------


def _chi2_interval(var: np.ndarray | float, repeats: int, alpha: float = 1e-6) -> tuple:
    """Two-sided interval a sample variance of ``repeats`` normal draws with variance ``var``
    leaves with probability 1 − alpha."""
    from scipy import stats

    lo, hi = stats.chi2.ppf([alpha / 2, 1 - alpha / 2], repeats - 1)
    return var * lo / (repeats - 1), var * hi / (repeats - 1)


def test_rsum_rr_message_count_follows_the_model_and_caps():
    # r grows like √n (the model's minimizer; class docstring); the cap binds past it.
    rs = [RSumRR.model_precision(epsilon=1.0, delta=1e-6, n=n, cap=256) for n in (10**4, 10**5)]
    assert rs == [7, 14]
    assert RSumRR.model_precision(epsilon=1.0, delta=1e-6, n=10**6, cap=256) == 119
    assert RSumRR.model_precision(epsilon=1.0, delta=1e-6, n=10**8, cap=256) == 256
    p = build_protocol(
        "rsum_rr", ProtocolSpec(1.0, 1e-6, 20_000, options={"max_precision": 5}, bound=B4)
    )
    assert p.r == 5
    assert p.messages_per_user == 5.0
    with pytest.raises(ParameterError, match="max_precision"):
        RSumRR(epsilon=1.0, delta=1e-6, n=100, max_precision=0)


def test_rsum_rr_default_error_is_o1_and_its_stated_std_as_measured():
    """n = 10^5, ε = 1, δ = 10⁻⁶ with the default r (14 one-bit messages per user, tightest
    bound): the sample variance of 3 000 seeded tally runs lies in the chi-square interval
    (false alarm 10⁻⁶) of the exact variance for these values, the mean error within 5 SE of
    0, the measured std below 21 (it was 33.2 with r = 5, rounding-dominated), and the
    stated std between the exact std and √(exact + rounding bound − exact rounding)."""
    n, reps = 10**5, 3000
    p = RSumRR(epsilon=1.0, delta=1e-6, n=n)
    assert p.r == 14
    assert p.messages_per_user == 14.0
    x = np.random.default_rng(31).random(n)
    rng = np.random.default_rng(32)
    err = np.empty(reps)
    for i in range(reps):
        est = p.estimate_tally(p.tally_users(x, rng=rng), n=n, n_fakes=0)
        err[i] = est.values[0] - x.sum()
    exact = p.variance(x)
    lo, hi = _chi2_interval(exact, reps)
    assert lo < err.var(ddof=1) < hi, (err.var(ddof=1), exact)
    assert abs(err.mean()) < 5 * math.sqrt(exact / reps)
    assert err.std() < 21.0
    stated = est.expected_std[0] ** 2
    assert stated == pytest.approx(
        est.extra["noise_variance"] + est.extra["rounding_variance_bound"]
    )
    assert exact <= stated <= exact + n / (4 * p.r**2) * (1 + 1e-12)


def test_rsum_rr_tally_matches_the_messages():
    # The tally sampler and the estimate from messages agree in law: same mean and variance
    # (two-sample, 600 runs each, 5 SE) at n = 2 000 with fakes.
    n = 2000
    p = RSumRR(epsilon=1.0, delta=1e-6, n=n, bound=B4)
    x = _data(n, seed=33)
    rng = np.random.default_rng(34)
    a = np.array([_estimate(p, x, rng, n_fakes=300) for _ in range(REPEATS)])
    b = np.array(
        [
            p.estimate_tally(
                p.tally_users(x, rng=rng) + p.tally_fakes(300, rng=rng), n=n, n_fakes=300
            ).values[0]
            for _ in range(REPEATS)
        ]
    )
    var = p.variance(x, n_fakes=300)
    assert abs(a.mean() - b.mean()) < 5 * math.sqrt(2 * var / REPEATS)
    assert 0.75 < a.var() / b.var() < 1.33


def test_rsum_kr_states_the_exact_noise_variance_by_plug_in():
    """RSum_KR's stated noise variance is a plug-in of the exact one (Σv, Σv² estimated from
    the messages): its mean over 1 000 seeded runs within 1 % of the exact noise variance
    for these values, and the stated total within the exact total and the exact total plus
    the rounding's slack (bound n/(4k²) − exact Σf(1−f)/k²), up to 3 %. The measured error
    variance lies in the chi-square interval (false alarm 10⁻⁶) of the exact variance."""
    from protocols._rsum import rounding_variance

    n, reps = 20_000, 1000
    p = RSumKR(epsilon=1.0, delta=1e-6, n=n, bound=B4)
    x = _data(n, seed=41)
    rng = np.random.default_rng(42)
    err, noise, stated = np.empty(reps), np.empty(reps), np.empty(reps)
    for i in range(reps):
        msgs = p.randomize(x, rng=rng)
        est = p.estimate(msgs, n=n, n_fakes=0)
        err[i] = est.values[0] - x.sum()
        noise[i] = est.extra["noise_variance"]
        stated[i] = est.expected_std[0] ** 2
    exact = p.variance(x)
    rounding = rounding_variance(x, p.k) / p.k**2
    assert noise.mean() == pytest.approx(exact - rounding, rel=0.01)
    slack = n / (4 * p.k**2) - rounding
    assert exact * 0.97 < stated.mean() < (exact + slack) * 1.03
    lo, hi = _chi2_interval(exact, reps)
    assert lo < err.var(ddof=1) < hi, (err.var(ddof=1), exact)
    assert abs(err.mean()) < 5 * math.sqrt(exact / reps)


def test_rsum_rm_states_the_exact_noise_variance_by_plug_in():
    """RSum_RM (its two default precisions at n = 2·10⁴, fakes in the one chain): the stated
    noise variance averages to the exact noise variance within 2 % over 800 seeded runs,
    and the measured variance lies in the chi-square interval (false alarm 10⁻⁶) of the
    exact total."""
    from protocols._rsum import rounding_variance

    n, reps, fakes = 20_000, 800, 400
    p = RSumRM(epsilon=1.0, delta=1e-6, n=n, bound=B4)
    assert len(p.precisions) == 2
    x = _data(n, seed=51)
    rng = np.random.default_rng(52)
    err, noise = np.empty(reps), np.empty(reps)
    for i in range(reps):
        msgs = _messages(p, x, rng, n_fakes=fakes)
        est = p.estimate(msgs, n=n, n_fakes=fakes)
        err[i] = est.values[0] - x.sum()
        noise[i] = est.extra["noise_variance"]
    # The chain's fakes split multinomially over the precisions: about fakes/2 each.
    exact = p.variance(x, n_fakes=fakes // 2)
    p1 = p.precisions[0]
    rem = x * p1 - np.minimum(np.floor(x * p1), p1 - 1)  # the last digit's input
    rounding = rounding_variance(rem, p.precisions[-1]) / p.q[-1] ** 2
    assert noise.mean() == pytest.approx(exact - rounding, rel=0.02)
    lo, hi = _chi2_interval(exact, reps)
    assert lo < err.var(ddof=1) < hi, (err.var(ddof=1), exact)
