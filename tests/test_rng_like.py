"""Every ``rng`` argument takes what SPEC 7 says (:data:`protocols.RNGLike`).

For each public randomized call — every registered protocol's samplers, the LDP
randomizers, the noise samplers, the roles and the data generator — the same four rules:

* an int seed gives exactly the output of ``numpy.random.default_rng(seed)`` (and so does a
  numpy integer or a ``SeedSequence`` of it);
* a Generator is used in place, not copied: its state advances (unless the call draws
  nothing, and then its output is the same for every rng) and the output is the one it would
  give;
* ``None`` runs (fresh OS entropy);
* anything else is refused with :class:`protocols.ParameterError` naming ``rng``.

The outputs are compared exactly (the same seed must give the same draws), so a call that
ignored its seed, reseeded per block or copied the generator fails. Sizes are tiny: this is
an interface test, not a statistical one.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import esa
import protocols
from esa._threshold import NoisyThreshold
from protocols import (
    FREQUENCY_ORACLES,
    KRR,
    MEAN_MECHANISMS,
    FrequencyOracle,
    InputKind,
    MessageTally,
    ParameterError,
    PiecewiseMechanism,
    ProtocolSpec,
    RNGLike,
    SampledAttributes,
    ShuffleProtocol,
    as_generator,
    build_protocol,
    protocol_names,
)

SEED = 20_261_205
#: Values no ``rng`` may take: a bool (an int to Python), a negative seed, a float, a string,
#: a sequence, a legacy RandomState, a bare BitGenerator, an arbitrary object.
BAD: list[Any] = [
    True,
    np.bool_(False),
    -1,
    1.5,
    "7",
    [1, 2],
    np.random.RandomState(0),
    np.random.PCG64(0),
    object(),
]
Call = Callable[[RNGLike], Any]


def _same(a: Any, b: Any) -> bool:
    """Exact equality of two outputs: arrays, tallies, dataclasses, sequences, scalars."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        x, y = np.asarray(a), np.asarray(b)
        return x.shape == y.shape and x.dtype == y.dtype and bool(np.array_equal(x, y))
    if dataclasses.is_dataclass(a) and not isinstance(a, type):
        return type(a) is type(b) and all(
            _same(getattr(a, f.name), getattr(b, f.name)) for f in dataclasses.fields(a)
        )
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def _check_spec7(call: Call) -> None:
    """The four rules of the module docstring, for one call."""
    expected = call(np.random.default_rng(SEED))
    assert _same(call(SEED), expected), "an int seed must give default_rng(seed)'s draws"
    assert _same(call(np.int64(SEED)), expected), "a numpy integer seed is a seed"
    assert _same(call(np.random.SeedSequence(SEED)), expected), "a SeedSequence is a seed"
    gen = np.random.default_rng(SEED)
    before = gen.bit_generator.state
    assert _same(call(gen), expected)
    fresh = call(None)
    if gen.bit_generator.state == before:
        # drew nothing (e.g. Cnt_2M's fakes: one possible message): then no rng matters
        assert _same(fresh, expected), "a call that leaves the generator alone is constant"
    else:
        assert gen.bit_generator.state != before, "a Generator is used in place"
    for bad in BAD:
        with pytest.raises(ParameterError, match="rng"):
            call(bad)


# ------------------------------------------------------------------------- the helper


def test_as_generator_returns_the_same_generator() -> None:
    gen = np.random.default_rng(1)
    assert as_generator(gen) is gen


def test_as_generator_seeds_like_default_rng() -> None:
    for seed in (0, 1, SEED, 2**64 + 3, np.uint8(9), np.random.SeedSequence(5)):
        draws = as_generator(seed).integers(0, 2**62, size=4)
        assert np.array_equal(draws, np.random.default_rng(seed).integers(0, 2**62, size=4))


def test_as_generator_none_is_fresh_entropy() -> None:
    # two fresh OS-seeded generators agree on 4 draws of 62 bits with probability 2^-248
    a, b = as_generator(None), as_generator(None)
    assert isinstance(a, np.random.Generator)
    assert a is not b
    assert not np.array_equal(a.integers(0, 2**62, size=4), b.integers(0, 2**62, size=4))


@pytest.mark.parametrize("bad", BAD, ids=lambda v: type(v).__name__)
def test_as_generator_refuses_and_quotes(bad: Any) -> None:
    with pytest.raises(ParameterError) as info:
        as_generator(bad)
    assert repr(bad)[:20] in str(info.value)


def test_as_generator_hints_for_bit_generators_and_random_state() -> None:
    with pytest.raises(ParameterError, match=r"numpy\.random\.Generator\(bit_generator\)"):
        as_generator(np.random.PCG64(0))
    with pytest.raises(ParameterError, match="RandomState"):
        as_generator(np.random.RandomState(0))


def test_rnglike_is_exported_from_both_layers() -> None:
    assert protocols.RNGLike is esa.RNGLike
    assert protocols.as_generator is esa.as_generator


# ---------------------------------------------------------------- registered protocols

#: As tests/test_protocol_contract.py builds them (its reasons for the departures hold).
DEFAULTS: dict[str, Any] = {"epsilon": 1.0, "delta": 1e-6, "n": 20_000, "domain": 8}
OVERRIDES: dict[str, dict[str, Any]] = {
    "murs": {"fake_reports": 200},
    "pucm": {"n": 40_000},
    # their calibration takes seconds per 10^4 users; what an rng does does not depend on n
    "cnt_pure": {"n": 500},
    "rsum_pure": {"n": 500},
}
VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    "cnt_sgm/splitmix": ("cnt_sgm", {"options": {"encoding": "splitmix"}}),
}
CASES = [*protocol_names(), *VARIANTS]
MESSAGE_BUDGET = 20_000


@functools.cache
def _build(name: str) -> ShuffleProtocol:
    base, extra = VARIANTS.get(name, (name, {}))
    return build_protocol(base, ProtocolSpec(**{**DEFAULTS, **OVERRIDES.get(name, {}), **extra}))


def _values(p: ShuffleProtocol) -> np.ndarray:
    """A few users' values of the protocol's kind (fixed, so calls differ only by rng)."""
    n = max(2, min(20, int(MESSAGE_BUDGET // max(p.messages_per_user, 1.0))))
    data = np.random.default_rng(1)
    kind = p.input_kind
    if kind is InputKind.BINARY:
        return (data.random(n) < 0.3).astype(np.int64)
    if kind is InputKind.CATEGORICAL:
        return data.integers(0, p.domain, size=n)
    if kind is InputKind.REAL01:
        return data.random(n)
    if kind is InputKind.REAL_PM1:
        return data.uniform(-1.0, 1.0, size=n)
    return data.random((n, p.domain)) < 0.2  # SET


@pytest.mark.parametrize("name", CASES)
def test_protocol_rng_is_spec7(name: str) -> None:
    """randomize, sample_fakes, each chain's sample_channel_fakes and, where the protocol
    has a message tally, tally_users and tally_fakes."""
    p = _build(name)
    x = _values(p)
    _check_spec7(lambda rng: p.randomize(x, rng=rng))
    _check_spec7(lambda rng: p.sample_fakes(5, rng=rng))
    for c in range(p.channels):
        _check_spec7(lambda rng, c=c: p.sample_channel_fakes(5, channel=c, rng=rng))
    if p.supports_tally:
        _check_spec7(lambda rng: p.tally_users(x, rng=rng))
        _check_spec7(lambda rng: p.tally_fakes(5, rng=rng))


def test_tally_of_a_seed_is_one_stream_not_reseeded_per_block(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The default tally_fakes draws block by block: a seed must become ONE generator for the
    # call (reseeding each block would repeat the first block's draws). Blocks of 4 fakes.
    monkeypatch.setattr("protocols._base.TALLY_MESSAGES", 4)
    p = _build("hist_mm")
    assert type(p).tally_fakes is ShuffleProtocol.tally_fakes  # the block-by-block default
    seeded = p.tally_fakes(15, rng=SEED)
    assert isinstance(seeded, MessageTally)
    assert _same(seeded, p.tally_fakes(15, rng=np.random.default_rng(SEED)))
    # what reseeding per block would give differs (so the comparison above can fail)
    reseeded = [p.tally_fakes(k, rng=SEED) for k in (4, 4, 4, 3)]
    total = reseeded[0] + reseeded[1] + reseeded[2] + reseeded[3]
    assert not _same(seeded, total)


# ------------------------------------------------------------------- LDP randomizers


@pytest.mark.parametrize("name", sorted(FREQUENCY_ORACLES))
def test_frequency_oracle_rng_is_spec7(name: str) -> None:
    oracle = FREQUENCY_ORACLES[name](d=8, epsilon=1.0)
    x = np.arange(16) % 8
    counts = np.bincount(x, minlength=8)
    _check_spec7(lambda rng: oracle.randomize(x, rng=rng))
    if type(oracle).sample_support_counts is not FrequencyOracle.sample_support_counts:
        _check_spec7(lambda rng: oracle.sample_support_counts(counts, rng=rng))
    if hasattr(oracle, "sample_report_histogram"):
        _check_spec7(lambda rng: oracle.sample_report_histogram(counts, rng=rng))


@pytest.mark.parametrize("name", sorted(MEAN_MECHANISMS))
def test_mean_mechanism_rng_is_spec7(name: str) -> None:
    mechanism = MEAN_MECHANISMS[name](epsilon=1.0)
    x = np.linspace(-1.0, 1.0, 9)
    _check_spec7(lambda rng: mechanism.randomize(x, rng=rng))


def test_sampled_attributes_rng_is_spec7() -> None:
    sampler = SampledAttributes(k=3, epsilon=1.0, sampled=1)
    data = np.random.default_rng(2)
    reals = data.uniform(-1.0, 1.0, size=(12, 3))
    cats = data.integers(0, 4, size=(12, 3))
    _check_spec7(lambda rng: sampler.sample(12, rng=rng))
    _check_spec7(lambda rng: sampler.randomize_means(PiecewiseMechanism, reals, rng=rng))
    _check_spec7(
        lambda rng: sampler.randomize_frequencies(
            lambda d, e: KRR(d=d, epsilon=e), cats, [4, 4, 4], rng=rng
        )
    )


# --------------------------------------------------------------------- noise samplers

NOISE: dict[str, Call] = {
    "laplace": lambda rng: protocols.laplace(1.0, 5, rng=rng),
    "symmetric_geometric": lambda rng: protocols.symmetric_geometric(0.5, 5, rng=rng),
    "discrete_laplace": lambda rng: protocols.discrete_laplace(1.0, 5, rng=rng),
    "binomial_noise": lambda rng: protocols.binomial_noise(10, 0.5, 5, rng=rng),
    "polya": lambda rng: protocols.polya(0.5, 0.5, 5, rng=rng),
    "distributed_geometric_shares": lambda rng: protocols.distributed_geometric_shares(
        3, 0.5, 2, rng=rng
    ),
}


@pytest.mark.parametrize("name", sorted(NOISE))
def test_noise_sampler_rng_is_spec7(name: str) -> None:
    _check_spec7(NOISE[name])


# ------------------------------------------------------------------- roles and data


def _hist() -> ShuffleProtocol:
    return build_protocol("hist_kr", ProtocolSpec(epsilon=1.0, delta=1e-6, n=1000, domain=4))


def test_encoder_messages_and_encode_take_a_seed() -> None:
    p = _hist()
    codec = esa.make_codec("ideal", message_size=p.message_size, layers=2)
    enc = esa.Encoder(p, codec, [b"", b""])
    x = np.arange(40) % 4
    _check_spec7(lambda rng: enc.messages(x, rng=rng))
    sealed = enc.encode(x, rng=0, epoch=1)
    assert sealed.shape[0] == 40
    with pytest.raises(ParameterError, match="rng"):
        enc.encode(x, rng=True, epoch=1)


def test_shuffler_fake_rng_takes_a_seed_kept_across_batches() -> None:
    p = _build("hist_mm")
    codec = esa.make_codec("ideal", message_size=p.message_size, layers=2)

    def shuffler(fake_rng: RNGLike) -> esa.Shuffler:
        return esa.Shuffler(
            hop=0,
            codec=codec,
            key=None,
            route=[b"", b""],
            protocol=p,
            fake_reports=6,
            fake_rng=fake_rng,
        )

    users = p.tally_users(np.arange(50) % 4, rng=1)
    reference = np.random.default_rng(SEED)
    seeded = shuffler(SEED)
    for _ in range(2):  # one generator for every batch, not reseeded per batch
        out, counters = seeded.process_tally(users)
        assert counters.fakes_added == 6
        assert _same(out, users + p.tally_fakes(6, rng=reference))
    gen = np.random.default_rng(SEED)
    assert shuffler(gen).fake_rng is gen
    assert shuffler(None).fake_rng is None  # None: the OS CSPRNG per batch, as a live party
    for bad in BAD:
        with pytest.raises(ParameterError, match="rng"):
            shuffler(bad)


def test_shuffler_threshold_rng_takes_a_seed() -> None:
    p = _hist()
    codec = esa.make_codec("ideal", message_size=p.message_size, layers=2)
    kw: dict[str, Any] = {"hop": 0, "codec": codec, "key": None, "route": [b"", b""]}
    sh = esa.Shuffler(**kw, protocol=p, threshold=5, threshold_noise=1.0, threshold_rng=3)
    assert isinstance(sh.threshold_rng, np.random.Generator)
    assert esa.Shuffler(**kw, protocol=p, threshold=5, threshold_noise=1.0).threshold_rng is None
    with pytest.raises(ParameterError, match="rng"):
        esa.Shuffler(**kw, protocol=p, threshold=5, threshold_noise=1.0, threshold_rng=1.0)


def test_noisy_threshold_releases_takes_a_seed() -> None:
    noisy = NoisyThreshold(10, 0.5)
    seeded = [noisy.releases(10, rng=s) for s in range(60)]
    assert seeded == [noisy.releases(10, rng=np.random.default_rng(s)) for s in range(60)]
    assert len(set(seeded)) == 2  # Z matters at count = T: both outcomes occur (P ≈ 1 − 2^-59)
    noisy.releases(10, rng=None)
    with pytest.raises(ParameterError, match="rng"):
        noisy.releases(10, rng=True)


def test_synthetic_values_and_users_values_take_a_seed() -> None:
    p = _hist()
    _check_spec7(lambda rng: esa.synthetic_values(p, 30, "zipf", rng=rng))
    _check_spec7(lambda rng: esa.users_values(p, None, n=30, rng=rng)[0])


@pytest.mark.parametrize("bad", [True, 1.5, -3])
def test_simulate_and_run_pipeline_refuse_a_bad_rng(bad: Any) -> None:
    p = _hist()
    x = np.arange(1000) % 4
    with pytest.raises(ParameterError, match="rng"):
        esa.run_pipeline(p, x, esa.PipelineConfig(crypto="ideal"), rng=bad)
    with pytest.raises(ParameterError, match="rng"):
        esa.simulate("hist_kr", x, epsilon=1.0, delta=1e-6, crypto="ideal", rng=bad)


@pytest.mark.parametrize("category", ["counting", "histogram", "sum"])
def test_experiments_data_generator_takes_a_seed(category: str) -> None:
    from simulations.experiments import generate

    _check_spec7(
        lambda rng: generate(category, 50, 8, 4.0 if category != "counting" else 0.3, rng=rng)
    )
