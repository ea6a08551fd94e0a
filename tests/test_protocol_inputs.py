"""Inputs at and past the edges of every protocol's range: refused with a ParameterError that
names the value, or, when valid, handled without overflow, NaN or a raw Python error."""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from protocols import (
    BLH,
    HR,
    KRR,
    OLH,
    THE,
    DisEle,
    InputKind,
    MessageTally,
    ParameterError,
    ProtocolSpec,
    ShuffleProtocol,
    build_protocol,
    lh_hash,
    protocol_names,
)
from protocols._registry import MAX_MESSAGES

#: A spec each registered protocol accepts and builds quickly (the small cases of
#: tests/test_every_protocol.py).
SPECS: dict[str, dict[str, Any]] = {
    "aut": {"n": 1000, "domain": 16},
    "put": {"n": 1000, "domain": 16},
    "cnt_2m": {"n": 3000, "delta": 1e-3},
    "cnt_bn": {"n": 2000},
    "cnt_pure": {"n": 500},
    "cnt_rr": {"n": 2000},
    "cnt_sgm": {"n": 2000},
    "disele": {"n": 200, "domain": 8},
    "hist_kr": {"n": 2000},
    "hist_kr_frag": {"n": 2000},
    "hist_mm": {"n": 700, "domain": 4, "epsilon": 2.0, "delta": 1e-2},
    "hist_rr_attr": {"n": 500},
    "murs": {"n": 2000, "fake_reports": 10},
    "prhr": {"n": 16, "domain": 8, "delta": 0.1},
    "prrq": {"n": 8, "domain": 2, "delta": 0.5},
    "pucm": {"n": 150, "domain": 2, "delta": 0.9},  # λ ≤ 1/2 needs n ≥ 144
    "rsum_dsg": {"n": 1000},
    "rsum_kr": {"n": 2000},
    "rsum_pure": {"n": 50, "options": {"precision": 4}},
    "rsum_rm": {"n": 3000},
    "rsum_rr": {"n": 2000},
    "slh": {"n": 2000},
}

_BUILT: dict[str, ShuffleProtocol] = {}


def built(name: str) -> ShuffleProtocol:
    if name not in _BUILT:
        kw: dict[str, Any] = {"epsilon": 1.0, "delta": 1e-6, **SPECS[name]}
        _BUILT[name] = build_protocol(name, ProtocolSpec(**kw))
    return _BUILT[name]


def test_every_registered_protocol_has_a_spec() -> None:
    assert set(SPECS) == set(protocol_names())


# --- 1. k-ary randomized response at large ε -----------------------------------------------


@pytest.mark.parametrize("epsilon", [44.0, 60.0, 700.0])
def test_krr_reports_stay_in_the_domain_at_large_epsilon(epsilon: float) -> None:
    # k/λ = e^ε + k − 1 exceeds 2^63 above ε = 43.7; it used to be cast to int64.
    x = np.tile(np.arange(4), 2500)
    y = KRR(d=4, epsilon=epsilon).randomize(x, rng=np.random.default_rng(1))
    assert y.dtype == np.int64
    np.testing.assert_array_equal(y, x)  # P(any of 10^4 reports moves) < 10^4 · 4e-19


def test_local_hashing_reports_stay_in_range_at_large_epsilon() -> None:
    rng = np.random.default_rng(2)
    x = np.tile(np.arange(8), 100)
    blh = BLH(d=8, epsilon=44.0)
    rep = blh.randomize(x, rng=rng)
    np.testing.assert_array_equal(rep[:, 1], lh_hash(rep[:, 0], x, 2))
    # OLH's default g = round(e^ε + 1) is capped at the hash family's 2^32 − 1.
    olh = OLH(d=8, epsilon=700.0)
    assert olh.g == 2**32 - 1
    rep = olh.randomize(x, rng=rng)
    np.testing.assert_array_equal(rep[:, 1], lh_hash(rep[:, 0], x, olh.g))


def test_krr_report_law_is_exact() -> None:
    # 3·10^5 seeded reports of x = 0 at d = 3, ε = 1: each report frequency within 5 binomial
    # standard deviations of output_distribution()'s row 0.
    n = 300_000
    oracle = KRR(d=3, epsilon=1.0)
    y = oracle.randomize(np.zeros(n, dtype=np.int64), rng=np.random.default_rng(3))
    law = oracle.output_distribution()[0]
    freq = np.bincount(y, minlength=3)
    assert np.all(np.abs(freq - n * law) < 5 * np.sqrt(n * law * (1 - law)))


# --- 2. users' values --------------------------------------------------------------------

REAL = ["rsum_dsg", "rsum_kr", "rsum_pure", "rsum_rm", "rsum_rr"]


def test_real_list_is_every_real_protocol() -> None:
    real = {
        name for name in SPECS if built(name).input_kind in (InputKind.REAL01, InputKind.REAL_PM1)
    }
    assert real == set(REAL)


@pytest.mark.parametrize("name", REAL)
@pytest.mark.parametrize(
    ("values", "match"),
    [
        ([0.5, math.nan], "got nan at index 1"),
        ([0.5, math.inf], "got inf at index 1"),
        ([-math.inf], "got -inf at index 0"),
        ([0.5, 1.5], "got 1.5 at index 1"),
        (["0.5"], "array of numbers"),
        ([True, False], "array of numbers"),
        ([[0.5]], "1-D array"),
    ],
)
def test_real_values_outside_the_unit_interval_are_refused(
    name: str, values: list[Any], match: str
) -> None:
    proto = built(name)
    with pytest.raises(ParameterError, match=match):
        proto.randomize(values, rng=np.random.default_rng(0))
    with pytest.raises(ParameterError, match=match):
        proto.truth(values)


@pytest.mark.parametrize("name", ["hist_kr", "cnt_rr", "disele", "prhr"])
@pytest.mark.parametrize("values", [[2.5], [1.0], [True, False], [math.nan], ["1"]])
def test_categorical_values_must_be_integers(name: str, values: list[Any]) -> None:
    with pytest.raises(ParameterError, match="integer array"):
        built(name).randomize(values, rng=np.random.default_rng(0))


@pytest.mark.parametrize(
    ("values", "match"),
    [
        ([[0, 2]], "0 or 1"),
        ([[0.0, math.nan]], "0 or 1"),
        ([["a", "b"]], "boolean array"),
        ([[0, 1, 1]], "boolean array"),
    ],
)
def test_set_values_must_be_membership_bits(values: list[Any], match: str) -> None:
    stub = SimpleNamespace(name="stub", domain=2, input_kind=InputKind.SET)
    with pytest.raises(ParameterError, match=match):
        ShuffleProtocol.validate_values(stub, values)  # type: ignore[arg-type]
    out = ShuffleProtocol.validate_values(stub, [[0, 1], [1, 1]])  # type: ignore[arg-type]
    assert out.dtype == bool


# --- 3. n and n_fakes of every estimator ---------------------------------------------------

BAD_N = [0, -1, 2.5, True, math.nan, math.inf, "10", None]
BAD_FAKES = [-1, 0.5, True, math.nan, "0"]


@pytest.mark.parametrize("name", sorted(SPECS))
def test_every_estimate_checks_n_and_n_fakes(name: str) -> None:
    proto = built(name)
    messages = proto.sample_fakes(0, rng=np.random.default_rng(0))
    for n in BAD_N:
        with pytest.raises(ParameterError, match=r"^n must be an integer >= 1"):
            proto.estimate(messages, n=n, n_fakes=0)  # type: ignore[arg-type]
    for fakes in BAD_FAKES:
        with pytest.raises(ParameterError, match=r"^n_fakes must be an integer >= 0"):
            proto.estimate(messages, n=10, n_fakes=fakes)  # type: ignore[arg-type]
    if proto.supports_tally:
        tally = MessageTally(np.zeros(1, dtype=np.int64), 0)
        with pytest.raises(ParameterError, match=r"^n must be an integer >= 1"):
            proto.estimate_tally(tally, n=0, n_fakes=0)
        with pytest.raises(ParameterError, match=r"^n_fakes must be an integer >= 0"):
            proto.estimate_tally(tally, n=10, n_fakes=-3)


def test_estimate_takes_numpy_integers() -> None:
    proto = built("hist_kr")
    rng = np.random.default_rng(4)
    msgs = proto.randomize(rng.integers(0, 2, size=2000), rng=rng)
    plain = proto.estimate(msgs, n=2000, n_fakes=0)
    numpy = proto.estimate(msgs, n=np.int64(2000), n_fakes=np.int32(0))  # type: ignore[arg-type]
    np.testing.assert_array_equal(plain.values, numpy.values)


def test_frequency_oracle_estimate_checks_n() -> None:
    with pytest.raises(ParameterError, match="n must be an integer >= 0"):
        KRR(d=4, epsilon=1.0).estimate(np.zeros(4), -1)


# --- 4. the spec and its options ------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"n": math.inf}, "n must be an integer"),
        ({"n": math.nan}, "n must be an integer"),
        ({"n": "100"}, "n must be an integer"),
        ({"n": True}, "n must be an integer"),
        ({"domain": math.inf}, "domain must be an integer"),
        ({"fake_reports": math.nan}, "fake_reports must be an integer"),
        ({"epsilon": "1"}, "epsilon must be a number, got '1'"),
        ({"epsilon": None}, "epsilon must be a number"),
        ({"epsilon": math.nan}, "epsilon must be a finite number"),
        ({"delta": "1e-6"}, "delta must be a number"),
        ({"delta": math.nan}, "delta must lie in"),
    ],
)
def test_spec_refuses_non_numbers(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ParameterError, match=match):
        ProtocolSpec(**{"epsilon": 1.0, "delta": 1e-6, "n": 100, **kwargs})


def test_spec_stores_its_values_converted() -> None:
    spec = ProtocolSpec(
        epsilon=np.float32(1.0),  # type: ignore[arg-type]
        delta=1e-6,
        n=100.0,  # type: ignore[arg-type]
        domain=np.int64(4),  # type: ignore[arg-type]
        fake_reports=np.uint8(3),  # type: ignore[arg-type]
    )
    assert [type(v) for v in (spec.epsilon, spec.delta, spec.n, spec.domain)] == [
        float,
        float,
        int,
        int,
    ]
    assert type(spec.fake_reports) is int
    assert (spec.n, spec.domain, spec.fake_reports) == (100, 4, 3)


@pytest.mark.parametrize(
    ("name", "options", "match"),
    [
        ("cnt_pure", {"messages": math.nan}, "option messages must be an integer"),
        ("cnt_pure", {"messages": math.inf}, "option messages must be an integer"),
        ("cnt_pure", {"gamma": math.nan}, "option gamma must be a finite number"),
        ("aut", {"alpha": "x"}, "option alpha must be a number"),
        ("aut", {"beta": math.nan}, "option beta must be a finite number"),
        ("aut", {"partition_seed": 1.5}, "option partition_seed must be an integer"),
        ("aut", {"partition_seed": "x"}, "option partition_seed must be an integer"),
        ("put", {"partition_seed": math.inf}, "option partition_seed must be an integer"),
        ("aut", {"groups": math.nan}, "groups must be an integer"),
        ("hist_kr_frag", {"epsilon_fragment": "x"}, "option epsilon_fragment must be a number"),
        ("hist_kr_frag", {"epsilon_fragment": math.nan}, "epsilon_fragment must be a finite"),
        ("hist_kr", {"report_fragments": math.inf}, "report_fragments must be a finite"),
        ("pucm", {"seed": True}, "option seed must be an integer"),
    ],
)
def test_options_refuse_non_numbers(name: str, options: dict[str, Any], match: str) -> None:
    kw: dict[str, Any] = {"epsilon": 1.0, "delta": 1e-6, **SPECS[name]}
    kw["options"] = {**kw.get("options", {}), **options}
    with pytest.raises(ParameterError, match=match):
        build_protocol(name, ProtocolSpec(**kw))


# --- 5. DisEle with many fakes -----------------------------------------------------------------


def test_disele_refuses_fakes_that_leave_no_clean_bin() -> None:
    spec = ProtocolSpec(epsilon=1.0, delta=1e-6, n=200, domain=8, fake_reports=6000)
    with pytest.raises(ParameterError, match=r"fake values .* expected free of fakes"):
        build_protocol("disele", spec)
    # d·(1 − 1/d)^{n_f} >= 1 at n_f = 15 fake values, not at 16: fake_reports counts the
    # values of a Split-Mix protocol (each sent as m shares), whatever m is (8 is the fewest
    # that δ = 10^-6 allows at n = 200; a forced smaller m is refused).
    for shares in (8, 11):
        opts = {"shares": shares}
        ok = build_protocol(
            "disele", ProtocolSpec(1.0, 1e-6, 200, domain=8, fake_reports=15, options=opts)
        )
        assert isinstance(ok, DisEle)
        with pytest.raises(ParameterError, match="16 fake values"):
            build_protocol(
                "disele", ProtocolSpec(1.0, 1e-6, 200, domain=8, fake_reports=16, options=opts)
            )


def test_disele_estimate_with_more_fakes_than_configured_is_void_not_an_error() -> None:
    proto = DisEle(domain=8, epsilon=0.5, n=200, delta=1e-6)
    rng = np.random.default_rng(5)
    msgs = proto.randomize(rng.integers(0, 8, size=200), rng=rng)
    # (7/8)^6000 underflows to 0.0: the Horvitz–Thompson weight 1/s is beyond a double.
    est = proto.estimate(msgs, n=200, n_fakes=6000)
    assert math.isinf(est.expected_std[0])
    assert not math.isnan(est.values[0])


@pytest.mark.parametrize(("distinct", "n_fakes"), [(0.0, 0), (3.0, 0), (5.0, 40), (8.0, 90)])
def test_disele_variance_matches_its_closed_form(distinct: float, n_fakes: int) -> None:
    d = 8
    proto = DisEle(domain=d, epsilon=0.5, n=200, delta=1e-6)
    r = math.exp(-0.5) / 2
    s = (1 - 1 / d) ** n_fakes
    eu2_occ = 0.25 / (0.5 - r) ** 2 + 1
    eu2_empty = r * (1 - r) / (0.5 - r) ** 2
    # Var[D̂] = Σ_j (s E[u_j²] − s² o_j²) / s² (module docstring).
    want = (distinct * (s * eu2_occ - s * s) + (d - distinct) * s * eu2_empty) / (s * s)
    assert proto.variance(distinct, n_fakes) == pytest.approx(want, rel=1e-12)


# --- 6. configurations no machine can run ----------------------------------------------------


@pytest.mark.parametrize(
    ("name", "spec", "match"),
    [
        ("prhr", {"epsilon": 1e-6, "n": 2, "domain": 8}, "messages, over the"),
        ("prrq", {"epsilon": 1e-6, "n": 2, "domain": 8}, "messages, over the"),
        ("hist_kr", {"n": 1000, "options": {"report_fragments": 1e12}}, "messages, over the"),
        ("hist_kr", {"n": 1000, "fake_reports": MAX_MESSAGES}, "messages, over the"),
        ("disele", {"n": 200, "domain": 8, "options": {"shares": 1e300}}, "option shares"),
        ("disele", {"n": 200, "domain": 8, "options": {"shares": 1e6}}, "shares=1000000 exceeds"),
        ("rsum_dsg", {"n": 1000, "options": {"shares": 1e300}}, "option shares"),
        ("rsum_dsg", {"n": 1000, "options": {"shares": 1e12}}, "messages, over the"),
        ("pucm", {"n": 150, "domain": 2, "delta": 0.9, "options": {"tau": 1e300}}, "option tau"),
    ],
)
def test_huge_configurations_are_refused_at_build(
    name: str, spec: dict[str, Any], match: str
) -> None:
    with pytest.raises(ParameterError, match=match):
        build_protocol(name, ProtocolSpec(**{"epsilon": 1.0, "delta": 1e-6, **spec}))


def test_the_largest_tally_the_experiments_run_is_still_built() -> None:
    # docs/experiments/full/histogram.csv tallies PUCM at d = 1024, n = 10^6, ε = 0.9:
    # 3.7·10^12 messages, drawn in closed form; the cap must not refuse it.
    proto = build_protocol("pucm", ProtocolSpec(epsilon=0.9, delta=1e-6, n=1_000_000, domain=1024))
    assert 3e12 < proto.messages_per_user * 1_000_000 < MAX_MESSAGES


# --- 7. frequency oracles' parameters ---------------------------------------------------------


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: KRR(d=4, epsilon=1e-7), "epsilon must be >= 1e-06"),
        (lambda: KRR(d=4, epsilon="1"), "epsilon must be a number"),  # type: ignore[arg-type]
        (lambda: KRR(d=math.nan, epsilon=1.0), "domain d must be an integer"),  # type: ignore[arg-type]
        (lambda: KRR(d=math.inf, epsilon=1.0), "domain d must be an integer"),  # type: ignore[arg-type]
        (lambda: HR(d=True, epsilon=1.0), "domain d must be an integer"),
        (lambda: OLH(d=4, epsilon=1.0, g=math.nan), "g must be an integer"),  # type: ignore[arg-type]
        (lambda: OLH(d=4, epsilon=1.0, g=2**32), "g must be an integer"),
        (lambda: THE(d=4, epsilon=1.0, theta="0.7"), "theta must lie in"),  # type: ignore[arg-type]
        (lambda: lh_hash(np.zeros(1, np.uint64), np.zeros(1), math.inf), "g must be"),  # type: ignore[arg-type]
    ],
)
def test_frequency_oracle_parameters_refused(make: Any, match: str) -> None:
    with pytest.raises(ParameterError, match=match):
        make()


def test_frequency_oracles_store_converted_parameters() -> None:
    hr = HR(d=4.0, epsilon=1)  # type: ignore[arg-type]
    assert (type(hr.d), type(hr.epsilon), hr.K) == (int, float, 8)
    assert KRR(d=np.int64(4), epsilon=np.float32(1.0)) == KRR(d=4, epsilon=1.0)  # type: ignore[arg-type]
    assert OLH(d=4, epsilon=1.0, g=8.0).g == 8  # type: ignore[arg-type]
