"""The roles under hostile input and misuse (docs/design.md, "The report path").

Each malformed report is dropped and counted at the first hop that can tell, and the rest
of its batch goes on; every hop's counters add up; the threshold counts valid, distinct
reports; fakes follow the protocol's law and are shuffled in with the users' reports; the
permutation is uniform; configuration mistakes are typed errors raised before any work.
"""

from __future__ import annotations

import itertools
import json
import os
from collections import Counter
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from scipy import stats

import crypto
import esa
import protocols

N = 40
M = 2
R = 3  # fakes per shuffler


def _proto(n: int = N) -> protocols.HistKR:
    return protocols.HistKR(domain=8, epsilon_local=3.0, n=n, delta=1e-6)


def _values(n: int = N) -> np.ndarray:
    return np.random.default_rng(0).integers(0, 8, n)


def _flip(report: bytes, i: int) -> bytes:
    b = bytearray(report)
    b[i] ^= 0x01
    return bytes(b)


def _objects(items: list[bytes]) -> np.ndarray:
    arr = np.empty(len(items), dtype=object)
    arr[:] = items
    return arr


def _payload(value: int) -> bytes:
    return crypto.pad(bytes([value]), 1)


_KINDS = ("flip", "epoch", "hop")


def _broken_at(route: list[bytes], layer: int, kind: str) -> bytes:
    """A report for hop 0 whose every layer before ``layer`` is authentic and whose layer
    ``layer`` is broken: a bit flipped, bound to another epoch, or bound to another hop."""
    if kind == "flip":
        inner = crypto.wrap_report(_payload(3), route[layer:], epoch=1, first_hop=layer)
        inner = _flip(inner, len(inner) // 2)
    elif kind == "epoch":
        inner = crypto.wrap_report(_payload(3), route[layer:], epoch=2, first_hop=layer)
    else:  # the right key, but the associated data names the next hop
        inner = crypto.wrap_report(_payload(3), route[layer:], epoch=1, first_hop=layer + 1)
    if layer == 0:
        return inner
    return crypto.wrap_report(inner, route[:layer], epoch=1, first_hop=0)


def test_each_malformed_report_is_dropped_at_its_hop_and_the_rest_goes_through() -> None:
    """One run with every kind of bad report: each dropped and counted once, at the first
    hop able to tell, while the honest reports and every fake reach the estimator."""
    proto = _proto()
    keys = [crypto.PartyKeys.generate(f"s{i}") for i in range(M)] + [crypto.PartyKeys.generate("a")]
    route = [k.layer.public_key for k in keys]
    layers = M + 1

    def at_hop_0(batch: np.ndarray) -> np.ndarray:
        honest = list(batch)
        bad = [_broken_at(route, k, kind) for k in range(layers) for kind in _KINDS]
        # Authentic at every layer, but no hist_kr(d=8) message: the value 8 (a report of
        # hist_kr with d = 16) and a wrong length prefix. Only the analyzer can tell.
        bad.append(crypto.wrap_report(_payload(8), route, epoch=1))
        bad.append(crypto.wrap_report(b"\x00\x02\x01", route, epoch=1))
        bad.append(honest[0][:-1])  # wrong size
        bad.append(honest[1])  # a replay within the batch
        # One inner report under two outer layers: distinct at hop 0, a replay at hop 1.
        inner = crypto.wrap_report(_payload(5), route[1:], epoch=1, first_hop=1)
        bad += [crypto.wrap_report(inner, route[:1], epoch=1) for _ in range(2)]
        return _objects(honest + bad)

    def replay_and_truncate(batch: np.ndarray) -> np.ndarray:
        items = list(batch)
        return _objects([*items, items[0], items[1][:-1]])

    config = esa.PipelineConfig(shufflers=M, fake_reports=R, crypto="onion", workers=1)
    result = esa.run_pipeline(
        proto,
        _values(),
        config,
        rng=np.random.default_rng(1),
        keys=keys,
        interceptors={0: at_hop_0, 1: replay_and_truncate, 2: replay_and_truncate},
    )
    hop0, hop1, analyzer = result.hops
    # hop 0: 3 broken layer-0 reports + 1 wrong size; 1 replay.
    assert (hop0.received, hop0.invalid, hop0.replayed) == (N + 9 + 2 + 2 + 2, 4, 1)
    assert (hop0.fakes_added, hop0.forwarded) == (R, N + 6 + 2 + 2 + R)
    # hop 1: 3 broken layer-1 reports + the truncated one; the interceptor's copy and the
    # double-wrapped report's second copy.
    assert (hop1.received, hop1.invalid, hop1.replayed) == (hop0.forwarded + 2, 4, 2)
    assert hop1.forwarded == N + 3 + 2 + 1 + 2 * R
    # analyzer: 3 broken layer-2 reports, the two non-messages, the truncated one; a copy.
    assert (analyzer.received, analyzer.invalid, analyzer.replayed) == (hop1.forwarded + 2, 6, 1)
    assert analyzer.forwarded == N + 1 + 2 * R == result.analyzer_messages.shape[0]
    for h in result.hops[:-1]:
        assert h.received - h.invalid - h.replayed - h.held + h.fakes_added == h.forwarded
    # Reports were added between hops, and the run says where.
    problems = result.extra["drop_check"]["problems"]
    assert problems == [
        f"hop 0 received {hop0.received} but the encoders sent {N}",
        f"hop 1 received {hop1.received} but hop 0 forwarded {hop0.forwarded}",
        f"analyzer received {analyzer.received} but hop 1 forwarded {hop1.forwarded}",
    ]
    assert result.to_json()["drop_check"]["ok"] is False


@pytest.mark.parametrize("mode", ["onion", "ideal"])
def test_drop_check_of_an_honest_run_and_of_a_dropped_report(mode: str) -> None:
    """In process as over TCP, the run reports a drop check: consistent for an honest run;
    a report removed between two hops (the estimate has lost a user or a fake it cannot
    tell apart) is named. Without the check, the estimate was reported as if complete."""
    proto = _proto()
    config = esa.PipelineConfig(shufflers=M, fake_reports=R, crypto=mode, workers=1)
    honest = esa.run_pipeline(proto, _values(), config, rng=np.random.default_rng(0))
    assert honest.to_json()["drop_check"] == {"ok": True, "problems": []}
    dropped = esa.run_pipeline(
        proto, _values(), config, rng=np.random.default_rng(0), interceptors={1: lambda b: b[1:]}
    )
    assert dropped.extra["drop_check"] == {
        "ok": False,
        "problems": [f"hop 1 received {N + R - 1} but hop 0 forwarded {N + R}"],
    }


def test_drop_check_follows_every_chain_and_tallies() -> None:
    from esa._pipeline import check_drops

    proto = protocols.build_protocol(
        "rsum_rm", protocols.ProtocolSpec(epsilon=1.0, delta=1e-6, n=3000)
    )
    x = np.random.default_rng(0).random(3000)
    config = esa.PipelineConfig(shufflers=2, fake_reports=2, crypto="ideal", workers=1)
    result = esa.run_pipeline(proto, x, config, rng=np.random.default_rng(1))
    assert result.extra["drop_check"] == {"ok": True, "problems": []}
    hops = [esa.HopCounters(**h.to_json()) for h in result.hops]
    hops[2].received += 1  # chain 2's first shuffler got a report nobody sent
    hops[2].invalid += 1
    assert check_drops(hops, [3000, 3000]) == [
        "chain 2 hop 0 received 3001 but the encoders sent 3000"
    ]
    hops[-1].forwarded -= 1  # and the analyzer lost one without counting it
    first, second = check_drops(hops, [3000, 3000])
    assert first.startswith("analyzer counts do not add up: {")
    assert second == "chain 2 hop 0 received 3001 but the encoders sent 3000"
    tally = esa.run_pipeline(
        protocols.build_protocol("cnt_pure", protocols.ProtocolSpec(epsilon=1.0, delta=1e-6, n=N)),
        np.arange(N) % 2,
        esa.PipelineConfig(shufflers=M, fake_reports=R, crypto="ideal", representation="tally"),
        rng=np.random.default_rng(0),
    )
    assert tally.extra["drop_check"] == {"ok": True, "problems": []}


@pytest.mark.parametrize("mode", ["onion", "ideal"])
def test_replays_are_caught_after_a_batch_of_another_epoch(mode: str) -> None:
    """Epoch 7, then epoch 6, then epoch 7's batch again: the third is all replays. The
    shuffler used to keep only the latest epoch's replay cache, so it forwarded them twice."""
    proto = _proto()
    codec = esa.make_codec(mode, message_size=proto.message_size, layers=2)
    keys = [crypto.PartyKeys.generate("s1"), crypto.PartyKeys.generate("a")]
    route = [k.layer.public_key for k in keys] if mode == "onion" else [b"", b""]
    enc = esa.Encoder(proto, codec, route)
    key = keys[0].layer if mode == "onion" else None
    shuffler = esa.Shuffler(hop=0, codec=codec, key=key, route=route, protocol=proto)
    b7 = enc.encode(_values(10), rng=np.random.default_rng(0), epoch=7)
    b6 = enc.encode(_values(10), rng=np.random.default_rng(0), epoch=6)
    counts = [shuffler.process(b, epoch=e)[1] for b, e in ((b7, 7), (b6, 6), (b7, 7))]
    assert [(c.replayed, c.forwarded) for c in counts] == [(0, 10), (0, 10), (10, 0)]


@pytest.mark.parametrize("mode", ["onion", "ideal"])
def test_threshold_counts_valid_distinct_reports_of_each_crowd(mode: str) -> None:
    """T = 10: a crowd of exactly 10 is released; a crowd of 9 is held even with a replay
    and a malformed report of it in the batch (neither counts toward T)."""
    proto = _proto()
    codec = esa.make_codec(mode, message_size=proto.message_size, layers=2)
    keys = [crypto.PartyKeys.generate("s1"), crypto.PartyKeys.generate("a")]
    route = [k.layer.public_key for k in keys] if mode == "onion" else [b"", b""]
    enc = esa.Encoder(proto, codec, route)
    rng = np.random.default_rng(0)
    at_t = enc.encode(_values(10), rng=rng, epoch=1, crowd_id=1)
    below = enc.encode(_values(9), rng=rng, epoch=1, crowd_id=2)
    if mode == "onion":
        broken = _objects([_flip(below[0], 40)])
    else:
        broken = below[:1].copy()
        broken[:, 0] ^= 0xFF  # wrong version byte
    batch = codec.concat([at_t, below, below[:1], broken])
    shuffler = esa.Shuffler(
        hop=0,
        codec=codec,
        key=keys[0].layer if mode == "onion" else None,
        route=route,
        protocol=proto,
        threshold=10,
        fake_reports=2,
    )
    _, c = shuffler.process(batch, epoch=1)
    assert (c.received, c.invalid, c.replayed, c.held) == (21, 1, 1, 9)
    assert (c.fakes_added, c.forwarded) == (2, 12)  # fakes only for the released crowd


class _MarkedFakes(protocols.HistKR):
    """hist_kr whose fakes are all the value 7 (users' messages here are 0..3), so a test
    can see where the shuffler puts them."""

    def sample_fakes(self, count: int, *, rng: np.random.Generator) -> npt.NDArray[Any]:
        return np.full(count, 7, dtype=np.int64)


def _seeded_urandom(monkeypatch: pytest.MonkeyPatch, seed: int) -> None:
    """Replace the OS CSPRNG by a seeded stream, so a test of the permutation's law is
    deterministic (what is tested is how the shuffler uses its randomness)."""
    gen = np.random.default_rng(seed)
    monkeypatch.setattr(os, "urandom", lambda k: gen.bytes(k))


def test_permutation_is_uniform_and_fakes_land_anywhere(monkeypatch: pytest.MonkeyPatch) -> None:
    """4 users' reports + 1 fake through one shuffler, 2400 times: the users' relative
    order is uniform over its 24 orders and the fake's position over the 5 slots (χ² tests,
    p > 10⁻⁴; the stream is seeded, so the outcome is fixed). Fakes appended at the end, or
    any order kept from the input, fail both."""
    _seeded_urandom(monkeypatch, 5)
    proto = _MarkedFakes(domain=8, epsilon_local=3.0, n=N, delta=1e-6)
    codec = esa.make_codec("ideal", message_size=proto.message_size, layers=2)
    enc = esa.Encoder(proto, codec, [b"", b""])
    batch = enc.seal_messages(np.arange(4), epoch=1, crowd_id=0, first_hop=0)
    orders: Counter[tuple[int, ...]] = Counter()
    fake_at: Counter[int] = Counter()
    for _ in range(2400):
        shuffler = esa.Shuffler(  # a new one each time: the same batch again is a replay
            hop=0, codec=codec, key=None, route=[b"", b""], protocol=proto, fake_reports=1
        )
        out, _ = shuffler.process(batch, epoch=1)
        values = out[:, -1].tolist()  # the one-byte payload of each row
        fake_at[values.index(7)] += 1
        orders[tuple(v for v in values if v != 7)] += 1
    assert set(orders) == set(itertools.permutations(range(4)))
    assert stats.chisquare([orders[p] for p in sorted(orders)]).pvalue > 1e-4
    assert stats.chisquare([fake_at[i] for i in range(5)]).pvalue > 1e-4


def test_fakes_follow_the_protocols_sampler_per_released_crowd() -> None:
    """A shuffler's fakes are ``protocol.sample_fakes`` drawn from its fake generator: n_r
    per released crowd, and nothing for a held one."""
    proto = _proto()
    codec = esa.make_codec("ideal", message_size=proto.message_size, layers=2)
    enc = esa.Encoder(proto, codec, [b"", b""])
    users = enc.seal_messages(np.array([0, 1, 2]), epoch=1, crowd_id=0, first_hop=0)
    held = enc.seal_messages(np.array([3]), epoch=1, crowd_id=9, first_hop=0)
    shuffler = esa.Shuffler(
        hop=0,
        codec=codec,
        key=None,
        route=[b"", b""],
        protocol=proto,
        threshold=2,
        fake_reports=50,
        fake_rng=np.random.default_rng(11),
    )
    out, c = shuffler.process(codec.concat([users, held]), epoch=1)
    assert (c.held, c.fakes_added, c.forwarded) == (1, 50, 53)
    expected = proto.sample_fakes(50, rng=np.random.default_rng(11))
    got = Counter(out[:, -1].tolist())
    got.subtract([0, 1, 2])
    assert got == Counter(expected.tolist())


class _Spy(protocols.HistKR):
    """hist_kr recording the n_fakes its estimator is given."""

    seen: list[int]

    def estimate(self, messages: npt.NDArray[Any], *, n: int, n_fakes: int) -> protocols.Estimate:
        self.seen.append(n_fakes)
        return super().estimate(messages, n=n, n_fakes=n_fakes)


def test_analyzer_is_told_the_fakes_actually_added() -> None:
    """n_fakes is what the shufflers added: every shuffler's n_r when all release, and only
    the first's when everything is taken away before the second (which then adds none)."""
    proto = _Spy(domain=8, epsilon_local=3.0, n=N, delta=1e-6)
    proto.seen = []
    config = esa.PipelineConfig(shufflers=3, fake_reports=R, crypto="ideal")
    esa.run_pipeline(proto, _values(), config, rng=np.random.default_rng(0))
    esa.run_pipeline(
        proto,
        _values(),
        config,
        rng=np.random.default_rng(0),
        interceptors={1: lambda b: b[:0]},
    )
    assert proto.seen == [3 * R, R]


def test_workers_do_not_change_the_estimate(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the crypto on a pool of 2 processes the run is the same run: for one seed the
    estimate is identical to the in-process one (so its law is too)."""
    import crypto._onion

    monkeypatch.setattr(crypto._onion, "_MIN_PARALLEL", 1)  # use the pool on a small batch
    proto = _proto(200)
    x = np.random.default_rng(3).integers(0, 8, 200)
    runs = [
        esa.run_pipeline(
            proto,
            x,
            esa.PipelineConfig(shufflers=M, fake_reports=R, crypto="onion", workers=w),
            rng=np.random.default_rng(5),
        )
        for w in (1, 2)
    ]
    assert np.array_equal(runs[0].estimate.values, runs[1].estimate.values)
    assert [h.to_json() for h in runs[0].hops] == [h.to_json() for h in runs[1].hops]


@pytest.mark.parametrize("mode", ["onion", "ideal"])
def test_one_user(mode: str) -> None:
    config = esa.PipelineConfig(shufflers=M, fake_reports=R, crypto=mode, workers=1)
    result = esa.run_pipeline(_proto(), np.array([3]), config, rng=np.random.default_rng(0))
    assert [h.forwarded for h in result.hops] == [1 + R, 1 + 2 * R, 1 + 2 * R]
    assert np.all(np.isfinite(result.estimate.values))
    assert result.extra["drop_check"]["ok"]


def test_empty_batches_pass_through_every_role() -> None:
    proto = _proto()
    for mode in ("onion", "ideal"):
        codec = esa.make_codec(mode, message_size=proto.message_size, layers=2)
        keys = [crypto.PartyKeys.generate("s1"), crypto.PartyKeys.generate("a")]
        onion = mode == "onion"
        route = [k.layer.public_key for k in keys] if onion else [b"", b""]
        shuffler = esa.Shuffler(
            hop=0,
            codec=codec,
            key=keys[0].layer if onion else None,
            route=route,
            protocol=proto,
            fake_reports=R,
        )
        out, c = shuffler.process([], epoch=1)
        assert codec.count(out) == 0  # no crowd, so no fakes either
        assert (c.received, c.forwarded, c.fakes_added) == (0, 0, 0)
        analyzer = esa.Analyzer(
            hop=1, codec=codec, key=keys[1].layer if onion else None, protocol=proto
        )
        got = analyzer.process(out, epoch=1, n_users=1, n_fakes=0)
        assert (got.counters.received, got.counters.forwarded) == (0, 0)


# --- configuration mistakes: typed errors before any work --------------------------------


@pytest.mark.parametrize(
    ("field", "value", "needle"),
    [
        ("shufflers", 2.0, "shufflers must be an integer in [1, 65535], got 2.0"),
        ("shufflers", 2**16, "shufflers must be an integer in [1, 65535], got 65536"),
        ("fake_reports", 1.5, "fake_reports must be an integer >= 0, got 1.5"),
        ("fake_reports", True, "fake_reports must be an integer >= 0, got True"),
        ("threshold", 2.5, "threshold must be an integer >= 0, got 2.5"),
        ("threshold", "3", "threshold must be an integer >= 0, got '3'"),
        ("epoch", -1, f"epoch must be an integer in [0, {2**64 - 1}], got -1"),
        ("epoch", 2**64, f"epoch must be an integer in [0, {2**64 - 1}], got {2**64}"),
        ("crowd_id", -1, f"crowd_id must be an integer in [0, {2**64 - 1}], got -1"),
        ("workers", 1.5, "workers must be an integer >= 1, got 1.5"),
        ("workers", True, "workers must be an integer >= 1, got True"),
        ("replay_protection", "no", "replay_protection must be True or False, got 'no'"),
        ("seeded_fakes", None, "seeded_fakes must be True or False, got None"),
    ],
)
def test_pipeline_config_refuses_non_integers_and_out_of_range_ids(
    field: str, value: object, needle: str
) -> None:
    """These used to pass construction and then fail mid-run with a TypeError or an
    OverflowError, or (an ideal run at epoch −1, a threshold of 2.5) to run silently."""
    with pytest.raises(esa.ConfigError) as info:
        esa.PipelineConfig(**{field: value})  # type: ignore[arg-type]
    assert str(info.value) == needle


def test_pipeline_config_takes_numpy_integers_as_ints() -> None:
    config = esa.PipelineConfig(
        shufflers=np.int64(2),  # type: ignore[arg-type]
        fake_reports=np.int32(3),  # type: ignore[arg-type]
        crypto="ideal",
    )
    assert type(config.shufflers) is int
    assert type(config.fake_reports) is int
    result = esa.run_pipeline(_proto(), _values(), config, rng=np.random.default_rng(0))
    json.dumps(result.to_json()["fake_reports"])


def test_roles_refuse_a_hop_or_route_that_would_drop_every_report() -> None:
    """A shuffler at the analyzer's hop (or past it), an analyzer at a shuffler's hop, or a
    route too short for the fakes used to run and drop every honest report as invalid (or
    fail only once fakes were due): each is now refused at construction."""
    proto = _proto()
    codec = esa.make_codec("onion", message_size=proto.message_size, layers=3)
    keys = [crypto.PartyKeys.generate(str(i)) for i in range(3)]
    route = [k.layer.public_key for k in keys]
    for hop in (-1, 2, 5):
        with pytest.raises(esa.ConfigError, match=r"shuffler hop \(of 3 layers\).*\[0, 1\]"):
            esa.Shuffler(hop=hop, codec=codec, key=keys[0].layer, route=route, protocol=proto)
    with pytest.raises(esa.ConfigError, match=r"route must list 3 hops' keys.*got 2"):
        esa.Shuffler(hop=0, codec=codec, key=keys[0].layer, route=route[:2], protocol=proto)
    with pytest.raises(esa.ConfigError, match=r"analyzer hop \(the last of 3 layers\).*got 1"):
        esa.Analyzer(hop=1, codec=codec, key=keys[2].layer, protocol=proto)
    for bad in (dict(threshold=2.5), dict(fake_reports=True), dict(channel=1), dict(workers=0)):
        with pytest.raises(esa.ConfigError):
            esa.Shuffler(
                hop=0,
                codec=codec,
                key=keys[0].layer,
                route=route,
                protocol=proto,
                **bad,
            )
    # The valid configuration is still accepted.
    esa.Shuffler(hop=1, codec=codec, key=keys[1].layer, route=route, protocol=proto)
    esa.Analyzer(hop=2, codec=codec, key=keys[2].layer, protocol=proto)


@pytest.mark.parametrize("layers", [0, -3, 2.0, True, 2**16 + 1])
def test_codec_refuses_a_layer_count_no_route_has(layers: object) -> None:
    """Used to be accepted, and every hop's expected report size was then meaningless."""
    for mode in ("onion", "ideal"):
        with pytest.raises(esa.ConfigError, match=r"layers must be an integer in \[1, 65536\]"):
            esa.make_codec(mode, message_size=1, layers=layers)  # type: ignore[arg-type]
