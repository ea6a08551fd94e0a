"""Histogram protocols Hist_MM, SLH, MURS, PRHR, PUCM: estimators, parameters, fakes, codecs.

Statistical thresholds are stated in each test: means within 4 standard errors, pooled
variances within ±15 % (thousands of pooled z-scores, so ±15 % is > 5 standard errors of the
variance estimate), error bounds from each module's docstring.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

import esa
import protocols
from protocols import MURS, PRHR, PUCM, SLH, HistMM, ParameterError, ProtocolSpec
from protocols._prhr import hadamard_row_counts, true_tuples, uniform_tuples
from protocols._slh import murs_epsilon_central


def _check_z(z: np.ndarray) -> None:
    """Mean within 4 SE of 0 and variance within ±15 % of 1."""
    se = 1.0 / math.sqrt(z.size)
    assert abs(z.mean()) < 4 * se, f"mean z {z.mean():.4f} beyond 4 SE ({4 * se:.4f})"
    assert 0.85 < z.var() < 1.15, f"var z {z.var():.4f} outside [0.85, 1.15]"


# --- registry, messages per user, refusals ------------------------------------------------


@pytest.mark.parametrize("name", ["hist_mm", "slh", "murs", "prhr", "pucm"])
def test_registered_and_build(name: str) -> None:
    spec = ProtocolSpec(epsilon=1.0, delta=1e-3, n=200_000, domain=16, fake_reports=2000)
    proto = protocols.build_protocol(name, spec)
    assert proto.name == name
    assert proto.privacy.epsilon_central <= 1.0 + 1e-12
    assert proto.privacy.delta == pytest.approx(1e-3)


def test_messages_per_user_as_stated() -> None:
    rng = np.random.default_rng(0)
    slh = SLH(domain=10, epsilon_local=3.0, n=10_000, delta=1e-2)
    assert slh.messages_per_user == 1.0
    assert slh.randomize(rng.integers(0, 10, 10_000), rng=rng).shape[0] == 10_000

    prhr = PRHR(domain=10, epsilon=1.0, n=100, delta=0.1)
    rho = math.ceil(36 * math.log(math.exp(1.0) / (0.1 * 1.0)))  # ρ = ⌈36 ln(1/δ₀)/ε²⌉
    assert prhr.params.rho == rho
    assert prhr.params.tau == math.ceil(math.log2(100))
    assert prhr.messages_per_user == 1 + rho
    assert prhr.randomize(rng.integers(0, 10, 100), rng=rng).shape[0] == 100 * (1 + rho)

    hm = HistMM(domain=6, epsilon=2.0, n=5000, delta=0.1)
    assert hm.max_messages_per_user == 7  # paper §3, histogram theorem (iv): at most d + 1
    # Per user: at most d + 1 messages, own label always present.
    for x in range(6):
        one = hm.randomize(np.array([x]), rng=rng)
        assert one.size <= 7
        assert x in one
    msgs = hm.randomize(rng.integers(0, 6, 5000), rng=rng)
    # Expected 1 + d p; per-user count is 1 + Bin(d, p): SE = sqrt(d p (1-p) / n).
    p = hm.params.p
    se = math.sqrt(6 * p * (1 - p) / 5000)
    assert abs(msgs.size / 5000 - hm.messages_per_user) < 4 * se


@pytest.mark.parametrize(
    ("factory", "match"),
    [
        (lambda: SLH.from_central(domain=8, epsilon_central=1.5, n=10**5, delta=1e-6), "<= 1"),
        (lambda: SLH.from_central(domain=8, epsilon_central=0.1, n=500, delta=1e-6), "too small"),
        (lambda: SLH(domain=1, epsilon_local=1.0, n=100, delta=0.1), "domain"),
        (lambda: SLH(domain=8, epsilon_local=0.5, n=100, delta=0.1), "epsilon_central <= 1"),
        (lambda: MURS(domain=8, epsilon_local=1.0, n=10**6, delta=1e-6), "total_fakes"),
        (lambda: PRHR(domain=8, epsilon=1.5, n=1000, delta=1e-6), "epsilon <= 1"),
        (lambda: PRHR(domain=8, epsilon=0.5, n=1000, delta=1.5), "delta"),
        (lambda: HistMM(domain=8, epsilon=2.5, n=10**6, delta=1e-6), "<= 2"),
        (lambda: HistMM(domain=8, epsilon=1.0, n=1000, delta=1e-6), "n >="),
        (lambda: PUCM(domain=8, epsilon=1.0, n=1000, delta=1e-6, tau=3), "lambda"),
        (lambda: PUCM(domain=8, epsilon=2.0, n=10**6, delta=1e-6, tau=3), "epsilon <= 1"),
    ],
)
def test_invalid_parameters_refused(factory: object, match: str) -> None:
    with pytest.raises(ParameterError, match=match):
        factory()  # type: ignore[operator]


def test_slh_refusal_names_the_users_it_needs() -> None:
    # Thm 4 at ε_c = 1, δ = 1e-6 needs a blanket β = 14 ln(2/δ) ≈ 203 messages per hashed
    # value; as ε_l → 0 β → (n − 1)/2, so n ≈ 408. The refusal says so, and that n works.
    with pytest.raises(ParameterError, match=r"needs about n >= (\d+)") as exc:
        SLH.from_central(domain=8, epsilon_central=1.0, n=200, delta=1e-6)
    need = int(re.search(r"n >= (\d+)", str(exc.value)).group(1))  # type: ignore[union-attr]
    assert SLH.from_central(domain=8, epsilon_central=1.0, n=need, delta=1e-6)
    with pytest.raises(ParameterError, match="too small"):
        SLH.from_central(domain=8, epsilon_central=1.0, n=need - 2, delta=1e-6)
    with pytest.raises(ParameterError, match=r"\(or more fakes\)"):
        MURS.from_central(domain=8, epsilon_central=1.0, n=200, delta=1e-6, total_fakes=10)


# --- SLH / MURS ------------------------------------------------------------------------------


def test_slh_parameters_follow_the_survey() -> None:
    p = SLH.from_central(domain=100, epsilon_central=0.5, n=10**5, delta=1e-6)
    eps_l = p.params.epsilon_local
    assert p.params.g == max(2, round(math.exp(eps_l / 2) + 1))  # d' = ⌊e^{ε_l/2} + 1⌉
    assert p.params.p == pytest.approx(math.exp(eps_l) / (math.exp(eps_l) + p.params.g - 1))
    # The blanket bound by hand: β = (n−1)/(e^ε_l + d' − 1), ε_c = max(√(14 ln(2/δ)/β), 27/β).
    beta = (10**5 - 1) / (math.exp(eps_l) + p.params.g - 1)
    by_hand = max(math.sqrt(14 * math.log(2 / 1e-6) / beta), 27 / beta)
    assert p.privacy.epsilon_central == pytest.approx(by_hand)
    assert 0.49 < p.privacy.epsilon_central <= 0.5  # the largest ε_l meeting the target
    assert p.privacy.epsilon_local == pytest.approx(eps_l)


def test_murs_fakes_buy_local_noise_and_protect_against_colluding_shufflers() -> None:
    n, fakes = 10**5, 3000
    slh = SLH.from_central(domain=50, epsilon_central=0.5, n=n, delta=1e-6)
    murs = MURS.from_central(domain=50, epsilon_central=0.5, n=n, delta=1e-6, total_fakes=fakes)
    assert murs.params.epsilon_local > slh.params.epsilon_local
    # m = 3 shufflers, 2 collude: only one third of the fakes stays hidden.
    partial = murs.epsilon_central_for(honest_users=n, honest_fakes=fakes // 3)
    assert murs.privacy.epsilon_central < partial
    # With every user colluding, the honest shuffler's fakes alone are the blanket.
    alone = murs_epsilon_central(
        epsilon_local=0.5, g=2, n=1, delta=1e-6, n_fakes=10**6
    )  # β = n_r/d'
    assert alone == pytest.approx(math.sqrt(14 * math.log(2e6) / (10**6 / 2)))


def test_slh_hash_collisions_are_uniform() -> None:
    from protocols.ldp._freq_oracles import lh_hash

    rng = np.random.default_rng(3)
    seeds = rng.integers(0, 1 << 64, size=200_000, dtype=np.uint64)
    g = 7
    same = lh_hash(seeds, np.full(seeds.size, 11), g) == lh_hash(seeds, np.full(seeds.size, 4), g)
    se = math.sqrt((1 / g) * (1 - 1 / g) / seeds.size)
    assert abs(same.mean() - 1 / g) < 4 * se


def test_slh_support_counts_match_a_direct_loop() -> None:
    from protocols.ldp._freq_oracles import lh_hash

    rng = np.random.default_rng(4)
    p = SLH(domain=12, epsilon_local=2.0, n=3000, delta=0.1)
    msgs = p.randomize(rng.integers(0, 12, 300), rng=rng)
    seeds, ys = msgs[:, 0], msgs[:, 1].astype(np.int64)
    slow = [int((lh_hash(seeds, np.full(300, v), p.params.g) == ys).sum()) for v in range(12)]
    assert p.support_counts(msgs).tolist() == slow


@pytest.mark.parametrize("fakes", [0, 4000])
def test_slh_murs_unbiased_with_exact_variance(fakes: int) -> None:
    n, d, reps = 20_000, 8, 300
    rng = np.random.default_rng(10 + fakes)
    cls = MURS if fakes else SLH
    proto = cls(domain=d, epsilon_local=4.0, n=n, delta=0.05, total_fakes=fakes)
    x = np.minimum(rng.geometric(0.3, n) - 1, d - 1)
    truth = proto.truth(x)
    var = proto.variance(truth, n=n, n_fakes=fakes)
    z = []
    for _ in range(reps):
        msgs = np.concatenate([proto.randomize(x, rng=rng), proto.sample_fakes(fakes, rng=rng)])
        est = proto.estimate(msgs, n=n, n_fakes=fakes)
        z.append((est.values - truth) / np.sqrt(var))
    _check_z(np.concatenate(z))


def test_murs_estimator_removes_the_fakes() -> None:
    n, d, fakes = 2000, 8, 4000
    rng = np.random.default_rng(5)
    proto = MURS(domain=d, epsilon_local=4.0, n=n, delta=0.05, total_fakes=fakes)
    x = rng.integers(0, d, n)
    msgs = np.concatenate([proto.randomize(x, rng=rng), proto.sample_fakes(fakes, rng=rng)])
    good = proto.estimate(msgs, n=n, n_fakes=fakes).values - proto.truth(x)
    bad = proto.estimate(msgs, n=n, n_fakes=0).values - proto.truth(x)
    g, p = proto.params.g, proto.params.p
    bias = fakes / g / (p - 1 / g)  # what forgetting the fakes adds to every bin
    std = math.sqrt(proto.variance(np.full(d, n / d), n=n, n_fakes=fakes)[0] / d)
    assert abs(good.mean()) < 4 * std
    assert abs(bad.mean() - bias) < 4 * std
    assert bias > 10 * std


def test_slh_fakes_are_uniform_and_decode_marks_garbage() -> None:
    rng = np.random.default_rng(6)
    p = SLH(domain=30, epsilon_local=3.0, n=10**4, delta=0.01)
    g = p.params.g
    f = p.sample_fakes(40_000, rng=rng)
    counts = np.bincount(f[:, 1].astype(np.int64), minlength=g)
    assert counts.size == g
    exp = 40_000 / g
    assert np.all(np.abs(counts - exp) < 5 * math.sqrt(exp))
    rows = p.encode(f[:5])
    back, ok = p.decode(rows)
    assert ok.all()
    assert np.array_equal(back, f[:5])
    garbage = np.full((3, p.message_size), 0xFF, dtype=np.uint8)  # y = 2^k − 1 ≥ d'
    _, ok = p.decode(garbage)
    assert not ok.any()


# --- PRHR ------------------------------------------------------------------------------------


def _tuples(words: np.ndarray, L: int, tau: int) -> np.ndarray:
    """Column form (k, L) → the τ-tuples (k, τ) of indices in [2^L]."""
    a = np.zeros((words.shape[0], tau), dtype=np.int64)
    for k in range(tau):
        for j in range(L):
            a[:, k] |= ((words[:, j].astype(np.int64) >> k) & 1) << j
    return a


def test_prhr_row_counts_match_brute_force_hadamard() -> None:
    rng = np.random.default_rng(7)
    L, tau = 4, 3  # small τ: many low-rank tuples, every nullity gets exercised
    words = np.concatenate(
        [
            uniform_tuples(3000, L, tau, rng=rng),
            true_tuples(rng.integers(1, 16, 500).astype(np.uint32), L, tau, rng=rng),
            np.zeros((5, L), dtype=np.uint32),  # the all-zero tuple: in every C_r
        ]
    )
    a = _tuples(words, L, tau)
    H = np.array([[(-1) ** bin(r & c).count("1") for c in range(16)] for r in range(16)])
    brute = [(H[r][a] == 1).all(axis=1).sum() for r in range(16)]
    fast = hadamard_row_counts(words, L)
    assert fast[1:].tolist() == brute[1:]


def test_prhr_true_tuples_uniform_on_the_row_support() -> None:
    rng = np.random.default_rng(8)
    L, tau, r = 4, 5, 6
    a = _tuples(true_tuples(np.full(20_000, r, dtype=np.uint32), L, tau, rng=rng), L, tau)
    support = [c for c in range(16) if bin(r & c).count("1") % 2 == 0]
    counts = np.bincount(a.reshape(-1), minlength=16)
    assert set(np.flatnonzero(counts)) == set(support)
    exp = a.size / 8
    assert np.all(np.abs(counts[support] - exp) < 5 * math.sqrt(exp))


def test_prhr_unbiased_with_exact_variance_and_fakes() -> None:
    n, d, reps, fakes = 200, 6, 120, 500
    rng = np.random.default_rng(9)
    proto = PRHR(domain=d, epsilon=1.0, n=n, delta=0.1)
    x = np.minimum(rng.geometric(0.4, n) - 1, d - 1)
    truth = proto.truth(x)
    K = n * (1 + proto.params.rho) + fakes
    var = proto.variance(truth, messages=K)
    z = []
    for _ in range(reps):
        msgs = np.concatenate([proto.randomize(x, rng=rng), proto.sample_fakes(fakes, rng=rng)])
        est = proto.estimate(msgs, n=n, n_fakes=fakes)
        assert est.messages_used == K
        z.append((est.values - truth) / np.sqrt(var))
    _check_z(np.concatenate(z))


def test_prhr_error_is_polylog_independent_of_n() -> None:
    # Var = K q/(1 − q) with K = n(1 + ρ), q = 2^−τ ≤ 1/n: std ≤ √((1+ρ)/(1−q)) whatever n is
    # (paper: error O(√log(1/δ)/ε), no n).
    for n in (1000, 4000):
        proto = PRHR(domain=16, epsilon=1.0, n=n, delta=1e-3)
        K = n * (1 + proto.params.rho)
        q = 2.0**-proto.params.tau  # τ = ⌈log2 n⌉, so K q ≤ 1 + ρ
        std = math.sqrt(proto.variance(np.zeros(16), messages=K)[0])
        assert std == pytest.approx(math.sqrt(K * q / (1 - q)), rel=1e-9)
        assert std <= math.sqrt((1 + proto.params.rho) / (1 - q))


def test_prhr_simulate_streams_the_same_estimator() -> None:
    n, d = 3000, 10
    rng = np.random.default_rng(11)
    proto = PRHR(domain=d, epsilon=1.0, n=n, delta=0.1)
    x = rng.integers(0, d, n)
    est = proto.simulate(x, rng=rng, n_fakes=1000)
    assert est.messages_used == n * (1 + proto.params.rho) + 1000
    z = (est.values - proto.truth(x)) / est.expected_std
    assert np.all(np.abs(z) < 5)


def test_prhr_decode_marks_garbage() -> None:
    proto = PRHR(domain=10, epsilon=1.0, n=1000, delta=0.1)  # τ = 10: words < 2^10
    rows = np.full((4, proto.message_size), 0xFF, dtype=np.uint8)
    _, ok = proto.decode(rows)
    assert not ok.any()
    rng = np.random.default_rng(12)
    f = proto.sample_fakes(6, rng=rng)
    back, ok = proto.decode(proto.encode(f))
    assert ok.all()
    assert np.array_equal(back, f)


# --- Hist_MM ---------------------------------------------------------------------------------


def test_hist_mm_zero_bins_exact_and_error_within_bound() -> None:
    n, d, reps = 20_000, 12, 40
    rng = np.random.default_rng(13)
    proto = HistMM(domain=d, epsilon=1.0, n=n, delta=1e-6)
    x = rng.choice([0, 1, 2], size=n, p=[0.6, 0.3, 0.1])  # bins 3.. empty, bin 2 small
    truth = proto.truth(x)
    worst = 0.0
    for _ in range(reps):
        est = proto.estimate(proto.randomize(x, rng=rng), n=n, n_fakes=0).values
        assert np.all(est[3:] == 0.0)  # zero-sum property (paper §3, counting theorem (iii))
        worst = max(worst, float(np.abs(est - truth).max()))
    assert worst <= proto.error_bound  # 2nγ = 400 ln(4/δ)/ε² (module docstring)


def test_hist_mm_unbiased_above_the_threshold() -> None:
    n, d, reps = 20_000, 4, 200
    rng = np.random.default_rng(14)
    proto = HistMM(domain=d, epsilon=2.0, n=n, delta=0.1)  # nγ ≈ 184 ≪ every count
    x = rng.integers(0, d, n)
    truth = proto.truth(x)
    gamma = proto.params.gamma
    z = []
    for _ in range(reps):
        est = proto.estimate(proto.randomize(x, rng=rng), n=n, n_fakes=0)
        assert est.extra["truncated_bins"] == 0
        z.append((est.values - truth) / math.sqrt(n * gamma * (1 - gamma)))
    _check_z(np.concatenate(z))


def test_hist_mm_removes_fakes() -> None:
    n, d, fakes = 20_000, 4, 40_000
    rng = np.random.default_rng(15)
    proto = HistMM(domain=d, epsilon=2.0, n=n, delta=0.1)
    x = rng.integers(0, d, n)
    msgs = np.concatenate([proto.randomize(x, rng=rng), proto.sample_fakes(fakes, rng=rng)])
    est = proto.estimate(msgs, n=n, n_fakes=fakes)
    z = (est.values - proto.truth(x)) / est.expected_std
    assert np.all(np.abs(z) < 5)


def test_hist_mm_stated_std_covers_truncated_bins() -> None:
    # Bins below the threshold nγ are reported 0: their error is the count itself. The
    # stated std must cover it: over 40 runs, the measured RMSE over all bins lies within
    # [0.5, 1.25] × the root mean stated variance (it was 4–33× above before).
    n, d, reps = 20_000, 12, 40
    rng = np.random.default_rng(21)
    proto = HistMM(domain=d, epsilon=1.0, n=n, delta=1e-6)  # nγ ≈ 3 040
    x = rng.choice(d, size=n, p=np.r_[0.5, 0.2, 0.1, np.full(9, 0.2 / 9)])
    truth = proto.truth(x)
    sq, var = 0.0, 0.0
    for _ in range(reps):
        est = proto.estimate(proto.randomize(x, rng=rng), n=n, n_fakes=0)
        assert est.extra["truncated_bins"] >= 9  # the small bins are truncated
        sq += float(np.sum((est.values - truth) ** 2))
        var += float(np.sum(est.expected_std**2))
    ratio = math.sqrt(sq / var)
    assert 0.5 <= ratio <= 1.25


def test_hist_mm_tally_has_the_law_of_its_messages() -> None:
    # tally_users draws c_j + Bin(n, p) per bin directly; tally(randomize) draws n·d
    # Bernoullis. Means agree within 4.5 standard errors over 200 replicates each, and the
    # variance is n p (1 − p) within ±25 %.
    n, d, R = 3000, 5, 200
    rng = np.random.default_rng(22)
    proto = HistMM(domain=d, epsilon=2.0, n=n, delta=0.1)
    x = rng.integers(0, d, n)
    a = np.array([proto.tally_users(x, rng=rng).counts for _ in range(R)], dtype=float)
    b = np.array([proto.tally(proto.randomize(x, rng=rng)).counts for _ in range(R)], dtype=float)
    p = proto.params.p
    se = math.sqrt(2 * n * p * (1 - p) / R)
    assert np.all(np.abs(a.mean(axis=0) - b.mean(axis=0)) < 4.5 * se)
    assert np.all(np.abs(a.var(axis=0) / (n * p * (1 - p)) - 1) < 0.25)


def test_hist_mm_runs_at_a_million_users_and_d_1024_as_a_tally() -> None:
    # 1 + d p ≈ 1 024 messages per user: 10^9 reports, so only the tally representation fits.
    n, d = 10**6, 1024
    proto = HistMM(domain=d, epsilon=1.0, n=n, delta=1e-6)
    x = np.random.default_rng(23).integers(0, d, n)  # ≈ 977 per bin ≪ nγ: all truncated
    config = esa.PipelineConfig(crypto="ideal", representation="tally", shufflers=1)
    r = esa.run_pipeline(proto, x, config, rng=np.random.default_rng(24))
    assert r.hops[0].received == pytest.approx(n * proto.messages_per_user, rel=1e-3)
    assert np.all(np.abs(r.error) <= proto.error_bound)
    assert r.rmse <= 1.25 * float(np.sqrt(np.mean(r.estimate.expected_std**2)))


# --- PUCM ------------------------------------------------------------------------------------


def test_pucm_count_min_stays_within_its_stated_error() -> None:
    n, d = 4000, 64
    rng = np.random.default_rng(16)
    proto = PUCM(domain=d, epsilon=1.0, n=n, delta=0.1, tau=2)
    x = np.minimum(rng.geometric(0.1, n) - 1, d - 1)
    msgs = proto.randomize(x, rng=rng)
    # τ true messages + Bin(τ s, λ) blanket per user: mean τ(1 + sλ).
    lam, s = proto.params.lam, proto.params.s
    se = math.sqrt(2 * s * lam * (1 - lam) / n)
    assert abs(msgs.size / n - proto.messages_per_user) < 4 * se
    est = proto.estimate(msgs, n=n, n_fakes=0)
    err = est.values - proto.truth(x)
    # The min over τ rows of (collisions + centred noise) less its known mean: within a few
    # stated stds below, and above by at most those plus the collisions.
    assert err.min() > -6 * est.expected_std[0]
    assert abs(err).max() < 6 * est.expected_std[0] + n / s * 10


# --- end to end through the pipeline ----------------------------------------------------------


@pytest.mark.parametrize(
    ("proto", "fakes"),
    [
        (SLH(domain=8, epsilon_local=0.5, n=300, delta=0.2), 0),
        (MURS(domain=8, epsilon_local=0.5, n=300, delta=0.2, total_fakes=40), 20),
        (PRHR(domain=4, epsilon=1.0, n=16, delta=0.3), 0),
        (HistMM(domain=3, epsilon=2.0, n=400, delta=0.5), 0),
    ],
    ids=["slh", "murs", "prhr", "hist_mm"],
)
def test_pipeline_onion_small_n(proto: protocols.ShuffleProtocol, fakes: int) -> None:
    n = proto.params.n  # type: ignore[attr-defined]
    x = np.random.default_rng(17).integers(0, proto.domain, n)
    config = esa.PipelineConfig(shufflers=2, fake_reports=fakes, crypto="onion", workers=1)
    result = esa.run_pipeline(proto, x, config, rng=np.random.default_rng(18))
    assert result.hops[-1].invalid == 0
    sent = result.hops[0].received
    assert sent == result.estimate.messages_used - 2 * fakes
    z = (result.estimate.values - result.truth) / result.estimate.expected_std
    assert np.all(np.abs(z) < 5)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["slh", "murs"])
def test_pipeline_ideal_one_million_users(name: str) -> None:
    n, d = 10**6, 64
    # The ideal shufflers dominate the run time (~6 s per hop at 10^6 reports): 1 hop for SLH,
    # 2 for MURS (one honest shuffler's fakes are what protects against the other).
    m = 2 if name == "murs" else 1
    fakes = 3000 if name == "murs" else 0  # per shuffler
    spec = ProtocolSpec(epsilon=0.5, delta=1e-6, n=n, domain=d, shufflers=m, fake_reports=fakes)
    proto = protocols.build_protocol(name, spec)
    x = np.minimum(np.random.default_rng(19).geometric(0.05, n) - 1, d - 1)
    config = esa.PipelineConfig(shufflers=m, fake_reports=fakes, crypto="ideal", workers=1)
    result = esa.run_pipeline(proto, x, config, rng=np.random.default_rng(20))
    assert result.estimate.messages_used == n + m * fakes
    z = (result.estimate.values - result.truth) / result.estimate.expected_std
    assert np.all(np.abs(z) < 5)


# --- privacy sanity: exact computations on the mechanisms' noise ------------------------------


def test_slh_report_is_exactly_epsilon_local_ldp() -> None:
    # For a fixed hash: P(y | x) = p' on y = H(x), (1 − p')/(d' − 1) elsewhere; the worst
    # ratio over two inputs is p'(d' − 1)/(1 − p') = e^{ε_l}.
    p = SLH(domain=50, epsilon_local=4.0, n=10**5, delta=1e-6).params
    ratio = p.p * (p.g - 1) / (1 - p.p)
    assert math.log(ratio) == pytest.approx(p.epsilon_local, rel=1e-12)


@pytest.mark.parametrize(("eps", "delta"), [(1.0, 1e-6), (2.0, 0.1)])
def test_hist_mm_bin_noise_meets_its_epsilon_delta_exactly(eps: float, delta: float) -> None:
    """Each bin's count is c + n − Bin(n, γ): its exact hockey-stick divergence between
    neighbouring counts (shift ±1) at ε_c/2 must not exceed δ/2 (paper §3, per-bin budget)."""
    from scipy.stats import binom

    eb, db = eps / 2, delta / 2
    n = math.ceil(100 * math.log(2 / db) / eb**2)  # the smallest n the paper allows
    gamma = HistMM(domain=4, epsilon=eps, n=n, delta=delta).params.gamma
    k = np.arange(n + 2)
    pmf = binom.pmf(k, n, gamma)
    shifted = np.concatenate([[0.0], pmf[:-1]])  # W + 1: the neighbour's extra one
    for a, b in ((pmf, shifted), (shifted, pmf)):
        hockey = np.maximum(a - math.exp(eb) * b, 0).sum()
        assert hockey <= db, f"exact delta {hockey:.3g} > {db:g}"


def test_slh_claim_is_not_below_the_exact_shuffled_krr_lower_bound() -> None:
    # Given the hash seeds, SLH reports are d'-ary RR on hashed values (the randomizer the
    # Thm 4 claim is about); the exact ε of shuffled d'-RR on one neighbouring pair is a
    # lower bound for that randomizer (protocols.accounting): a claim below it would be a bug.
    from protocols.accounting._krr_exact import krr_exact_epsilon

    n, delta = 5000, 1e-4
    p = SLH.from_central(domain=64, epsilon_central=1.0, n=n, delta=delta)
    lower = krr_exact_epsilon(p.params.epsilon_local, n - 1, delta, k=p.params.g)
    assert 0 < lower <= p.privacy.epsilon_central


@pytest.mark.parametrize("name", ["hist_mm", "slh", "murs", "prhr", "pucm", "prrq"])
def test_foreign_bound_refused_not_ignored(name: str) -> None:
    spec = ProtocolSpec(
        epsilon=1.0, delta=1e-3, n=200_000, domain=16, fake_reports=10, bound="thm4_balle"
    )
    with pytest.raises(ParameterError, match="own theorem"):
        protocols.build_protocol(name, spec)
