"""RSum_DSG's modulus q leaves room for its noise, so the wrap-around correction is exact
except with probability β = 2^−40 (protocols/_rsum.py, ``RSumDSG``).

Until 2026-11-30 q was the smallest power of two ≥ 2(np + 1) whatever ε: at ε·n ≲ 5 the
noisy sum left the unwrap window in 10–30 % of runs (ε = 0.05, n = 10, all ones: mean error
−4.6, sd 9 against a stated 28.3). Checked here three ways:

* exactly: the law of the decoded estimate from the exact DLap(α) law of the total noise
  (survey Thm 8), its wrap bias within the proven bound (q/p)·w/(1 − α^q) and its variance
  the closed form's to 10⁻⁹ — no sampling;
* by seeded runs of the real randomizer (Pólya shares): mean error within 4 standard errors,
  sample sd / stated sd in [0.9, 1.1] over 4000 repeats (the relative standard error of a
  sample sd of near-Laplace errors is √(5/R)/2 ≈ 1.8 %, so the band is ≈ 5.6 of them);
* end to end through ``esa.run_pipeline`` (Split-Mix shares, ideal crypto): 600 seeds, mean
  within 4 standard errors, sd ratio in [0.8, 1.2] (≈ 4.3 standard errors).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import esa
from protocols import ParameterError, ProtocolSpec, RSumDSG, build_protocol
from protocols._rsum_dsg import DSG_WRAP_PROBABILITY, MAX_DSG_MODULUS, dlap_room, dlap_tail

#: The QA points, with data whose rounding is exact (x·p an integer): (ε, n, x).
QA_POINTS = [
    (0.05, 10, 1.0),
    (0.1, 20, 0.0),
    (0.5, 10, 1.0),
    (0.01, 100, 0.5),  # p = 10
    (0.002, 1000, 0.25),  # p = 32
]


def _dlap_pmf(alpha: float, k: np.ndarray) -> np.ndarray:
    """P[N = k] = (1−α)/(1+α)·α^{|k|}, from ln α (α is close to 1 here)."""
    log_a = math.log(alpha)
    return np.exp(np.abs(k) * log_a) * (-math.expm1(log_a) / (1.0 + alpha))


def _decoded(proto: RSumDSG, sums: np.ndarray, n: int) -> np.ndarray:
    """The analyzer's reading of the noisy level sums S (estimate(): the window
    [np + M + 1 − q, np + M], M = ⌊(q − np)/2⌋)."""
    span = n * proto.p
    z = np.mod(sums, proto.q)
    return np.where(z > span + (proto.q - span) // 2, z - proto.q, z)


# --- the DLap tail and the rule for q ---------------------------------------------------


@pytest.mark.parametrize("alpha", [0.3, 0.9, math.exp(-0.0125), math.exp(-1e-4)])
@pytest.mark.parametrize("t", [0, 1, 7, 400])
def test_dlap_tail_is_the_sum_of_the_pmf_beyond_t(alpha: float, t: int) -> None:
    # Slow reference: 2·Σ_{k>t} pmf(k), summed until the terms vanish.
    k = np.arange(t + 1, t + 1 + math.ceil(60.0 / -math.log(alpha)))
    assert dlap_tail(alpha, t) == pytest.approx(2.0 * math.fsum(_dlap_pmf(alpha, k)), rel=1e-9)


@pytest.mark.parametrize("alpha", [1e-200, 0.3, 0.9, math.exp(-0.0125), math.exp(-1e-6 / 2**24)])
@pytest.mark.parametrize("beta", [DSG_WRAP_PROBABILITY, 1e-3])
def test_dlap_room_is_the_smallest_t_with_tail_at_most_beta(alpha: float, beta: float) -> None:
    t = dlap_room(alpha, beta)
    assert dlap_tail(alpha, t) <= beta
    assert t == 0 or dlap_tail(alpha, t - 1) > beta


@pytest.mark.parametrize(
    ("epsilon", "n", "precision"),
    [(e, n, None) for e, n, _ in QA_POINTS]
    + [(1.0, 3, None), (1.0, 10**6, None), (700.0, 3, 1), (1e-6, 10, 1 << 24), (0.3, 57, 8)],
)
def test_modulus_is_the_smallest_power_of_two_with_room_for_the_noise(
    epsilon: float, n: int, precision: int | None
) -> None:
    proto = RSumDSG(epsilon=epsilon, delta=1e-6, n=n, precision=precision)
    span = n * proto.p
    t = dlap_room(proto.alpha, DSG_WRAP_PROBABILITY)
    need = max(2 * (span + 1), span + 2 * t + 1)
    assert proto.q & (proto.q - 1) == 0
    assert proto.q >= need > proto.q // 2
    room = (proto.q - span - 1) // 2  # the window's tighter side (class docstring)
    assert room >= t
    assert proto.wrap_probability == dlap_tail(proto.alpha, room) <= DSG_WRAP_PROBABILITY
    assert proto.share_spec is not None
    assert proto.share_spec.modulus == proto.q


@pytest.mark.parametrize(
    ("n", "q", "shares", "size"),
    # ε = 1, δ = 10⁻⁶: the old floor 2(np + 1) already left room for the noise, so these
    # keep their q, share count and message size (the accounting vectors pin two).
    [
        (1000, 1 << 16, 8, 2),
        (20_000, 1 << 23, 7, 3),
        (200_000, 1 << 28, 6, 4),
        (10**6, 1 << 31, 6, 4),
    ],
)
def test_configurations_the_old_floor_served_are_unchanged(
    n: int, q: int, shares: int, size: int
) -> None:
    proto = RSumDSG(epsilon=1.0, delta=1e-6, n=n)
    assert (proto.q, proto.m, proto.message_size) == (q, shares, size)


def test_a_modulus_beyond_split_mix_is_refused() -> None:
    with pytest.raises(ParameterError, match=r"rsum_dsg: modulus q = 2\^\d+ .* exceeds 2\^62"):
        RSumDSG(epsilon=1e-6, delta=1e-6, n=1 << 40, precision=1 << 24)
    assert MAX_DSG_MODULUS == 1 << 62


# --- the decoded estimate, exactly ------------------------------------------------------


def test_the_exact_reference_decodes_as_estimate_does() -> None:
    proto = RSumDSG(epsilon=0.05, delta=1e-6, n=10)
    span, q = 10 * proto.p, proto.q
    top = span + (q - span) // 2
    sums = np.array([top, top + 1, top + 1 - q, top - q, 0, -1, span, span + 1, -q - 5, 2 * q])
    want = _decoded(proto, sums, 10)
    got = [proto.estimate(np.array([s % q]), n=10, n_fakes=0).values[0] * proto.p for s in sums]
    np.testing.assert_array_equal(got, want)
    assert want[0] == top  # the window's two ends
    assert want[1] == top + 1 - q


@pytest.mark.parametrize(("epsilon", "n", "x"), QA_POINTS)
def test_decoded_estimate_is_unbiased_up_to_the_wrap_bound_exactly(
    epsilon: float, n: int, x: float
) -> None:
    proto = RSumDSG(epsilon=epsilon, delta=1e-6, n=n)
    p, alpha, q = proto.p, proto.alpha, proto.q
    levels = round(n * x * p)  # Σ R_p(x_i), deterministic for these data
    assert levels == n * x * p
    # Every k with pmf above ~e^{−100}: far beyond the room (~28/ln(1/α)), so every wrap
    # that moves the mean by more than q·e^{−100} is counted.
    reach = math.ceil(100.0 / -math.log(alpha))
    k = np.arange(-reach, reach + 1, dtype=np.int64)
    pmf = _dlap_pmf(alpha, k)
    assert pmf.sum() == pytest.approx(1.0, abs=1e-12)
    decoded = _decoded(proto, levels + k, n)
    # E[estimate] − Σx = E[decoded − S]/p: zero off the wrap event, whose terms are exact.
    off = decoded != levels + k
    bias = math.fsum(pmf[off] * (decoded[off] - (levels + k[off]))) / p
    bound = (q / p) * proto.wrap_probability / -math.expm1(q * math.log(alpha))
    assert abs(bias) <= bound <= (q / p) * 2 * DSG_WRAP_PROBABILITY
    truth = float(proto.truth(np.full(n, x))[0])
    mean = float(np.sum(pmf * decoded)) / p
    assert mean == pytest.approx(truth, abs=1e-9 * max(1.0, truth))
    var = float(np.sum(pmf * (decoded / p - mean) ** 2))
    assert var == pytest.approx(proto.variance(np.full(n, x)), rel=1e-9)


# --- seeded runs ------------------------------------------------------------------------


@pytest.mark.parametrize(("epsilon", "n", "x", "seed"), [(0.05, 10, 1.0, 11), (0.1, 20, 0.0, 12)])
def test_seeded_runs_at_small_eps_n_are_unbiased_with_the_stated_std(
    epsilon: float, n: int, x: float, seed: int
) -> None:
    reps = 4000
    proto = RSumDSG(epsilon=epsilon, delta=1e-6, n=n)
    rng = np.random.default_rng(seed)
    # randomize is vectorized over users and each user's noise is its own Pólya(1/n)
    # pair, so reps·n users drawn at once are reps independent runs of n users.
    values = proto.randomize(np.full(reps * n, x), rng=rng).reshape(reps, n)
    runs = [proto.estimate(v, n=n, n_fakes=0) for v in values]
    errors = np.array([e.values[0] for e in runs]) - n * x
    stated = float(runs[0].expected_std[0])
    assert abs(errors.mean()) < 4 * stated / math.sqrt(reps)
    assert 0.9 < errors.std(ddof=1) / stated < 1.1
    assert max(e.extra["wrap_probability"] for e in runs) <= DSG_WRAP_PROBABILITY


def test_pipeline_at_small_eps_n_is_unbiased() -> None:
    # QA: ε = 0.1, n = 20, all zeros through run_pipeline(crypto="ideal"), 1000 seeds, had a
    # mean error of +4.49 ± 0.39 with the old modulus.
    n, seeds = 20, 600
    proto = build_protocol("rsum_dsg", ProtocolSpec(epsilon=0.1, delta=1e-6, n=n))
    config = esa.PipelineConfig(shufflers=1, crypto="ideal", workers=1)
    x = np.zeros(n)
    runs = [esa.run_pipeline(proto, x, config, rng=np.random.default_rng(s)) for s in range(seeds)]
    errors = np.array([r.estimate.values[0] for r in runs])
    stated = float(runs[0].estimate.expected_std[0])
    assert all(r.estimate.extra["complete"] for r in runs)
    assert abs(errors.mean()) < 4 * stated / math.sqrt(seeds)
    assert 0.8 < errors.std(ddof=1) / stated < 1.2
