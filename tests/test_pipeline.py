"""The roles and the in-process pipeline: hostile reports, replays, thresholds, fakes."""

from __future__ import annotations

import itertools
import os

import numpy as np
import pytest

import crypto
import esa
import protocols

N = 300
M = 2


def _proto(n: int = N, domain: int = 8) -> protocols.HistKR:
    return protocols.HistKR(domain=domain, epsilon_local=3.0, n=n, delta=1e-6)


def _values(n: int = N, domain: int = 8, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, domain, n)


def _flip(report: bytes, i: int) -> bytes:
    b = bytearray(report)
    b[i] ^= 0x01
    return bytes(b)


def test_hostile_reports_dropped_and_counted_rest_goes_through() -> None:
    proto = _proto()
    extra: dict[str, int] = {}

    def attack(batch: np.ndarray) -> np.ndarray:
        reports = list(batch)
        size = len(reports[0])
        stranger = crypto.LayerPrivateKey.generate().public_key
        hostile = [
            _flip(reports[0], size // 2),  # tampered ciphertext
            _flip(reports[1], 5),  # tampered ephemeral key
            reports[2][:-1],  # truncated
            reports[3] + b"\x00",  # wrong length
            # well-formed, right length, but for another key
            crypto.wrap_report(
                bytes(size - 2 * crypto.LAYER_OVERHEAD), [stranger, stranger], epoch=1, first_hop=1
            ),
            os.urandom(size),  # garbage of the right length
            b"",  # empty
            reports[4],  # exact replay
        ]
        extra["hostile"] = len(hostile)
        return np.concatenate([batch, np.array([*hostile, None], dtype=object)[:-1]])

    config = esa.PipelineConfig(shufflers=M, fake_reports=20, crypto="onion", workers=1)
    result = esa.run_pipeline(
        proto, _values(), config, rng=np.random.default_rng(1), interceptors={1: attack}
    )
    hop1 = result.hops[1]
    assert hop1.received == N + 20 + extra["hostile"]
    assert hop1.invalid == 7
    assert hop1.replayed == 1
    assert hop1.forwarded == N + 40
    analyzer = result.hops[-1]
    assert analyzer.invalid == 0
    assert analyzer.forwarded == N + 40
    assert result.analyzer_messages.shape[0] == N + 40


def test_analyzer_drops_reports_with_malformed_payloads() -> None:
    proto = _proto()
    config = esa.PipelineConfig(shufflers=1, crypto="onion", workers=1)
    keys = [crypto.PartyKeys.generate("s1"), crypto.PartyKeys.generate("a")]
    route = [k.layer.public_key for k in keys]

    def inject(batch: np.ndarray) -> np.ndarray:
        # Authentic for the analyzer, but the payload is not a valid message of hist_kr:
        # 0xFF is outside [0, 8), and a wrong length prefix fails unpadding.
        bad_value = crypto.wrap_report(crypto.pad(b"\xff", 1), route[1:], epoch=1, first_hop=1)
        bad_pad = crypto.wrap_report(b"\x00\x02\x01", route[1:], epoch=1, first_hop=1)
        return np.concatenate([batch, np.array([bad_value, bad_pad, b"x"], dtype=object)])

    result = esa.run_pipeline(
        proto, _values(), config, rng=np.random.default_rng(2), interceptors={1: inject}, keys=keys
    )
    assert result.hops[-1].invalid == 3
    assert result.hops[-1].forwarded == N


def test_replay_across_batches_and_epochs() -> None:
    proto = _proto()
    codec = esa.make_codec("onion", message_size=proto.message_size, layers=2)
    keys = [crypto.PartyKeys.generate("s1"), crypto.PartyKeys.generate("a")]
    route = [k.layer.public_key for k in keys]
    enc = esa.Encoder(proto, codec, route)
    shuffler = esa.Shuffler(hop=0, codec=codec, key=keys[0].layer, route=route, protocol=proto)
    batch = enc.encode(_values(50), rng=np.random.default_rng(0), epoch=7)
    _, first = shuffler.process(batch[:30], epoch=7)
    _, second = shuffler.process(batch[20:], epoch=7)  # 10 replays + 20 fresh
    assert (first.forwarded, second.replayed, second.forwarded) == (30, 10, 20)
    # The same reports presented in another epoch fail authentication (AD binds the epoch).
    _, other = shuffler.process(batch[:5], epoch=8)
    assert (other.invalid, other.forwarded) == (5, 0)


def test_replay_protection_switch_lets_replays_through() -> None:
    proto = _proto()

    def replay(batch: np.ndarray) -> np.ndarray:
        return np.concatenate([batch, batch[:10]])

    for protect, expected in [(True, N), (False, N + 10)]:
        config = esa.PipelineConfig(shufflers=M, crypto="ideal", replay_protection=protect)
        result = esa.run_pipeline(
            proto, _values(), config, rng=np.random.default_rng(0), interceptors={0: replay}
        )
        assert result.hops[-1].forwarded == expected
        assert result.hops[0].replayed == (10 if protect else 0)


@pytest.mark.parametrize("mode", ["onion", "ideal"])
def test_crowd_below_threshold_is_held(mode: str) -> None:
    proto = _proto()
    codec = esa.make_codec(mode, message_size=proto.message_size, layers=2)
    keys = [crypto.PartyKeys.generate("s1"), crypto.PartyKeys.generate("a")]
    route = [k.layer.public_key for k in keys]
    enc = esa.Encoder(proto, codec, route)
    rng = np.random.default_rng(0)
    small = enc.encode(_values(5), rng=rng, epoch=1, crowd_id=1)
    big = enc.encode(_values(40), rng=rng, epoch=1, crowd_id=2)
    shuffler = esa.Shuffler(
        hop=0,
        codec=codec,
        key=keys[0].layer if mode == "onion" else None,
        route=route,
        protocol=proto,
        threshold=10,
        fake_reports=3,
    )
    out, counters = shuffler.process(codec.concat([small, big]), epoch=1)
    assert (counters.held, counters.fakes_added, counters.forwarded) == (5, 3, 43)
    assert len(shuffler.held) == 1
    assert codec.count(shuffler.held[0]) == 5
    # everything released belongs to the big crowd
    analyzer = esa.Analyzer(
        hop=1, codec=codec, key=keys[1].layer if mode == "onion" else None, protocol=proto
    )
    assert analyzer.process(out, epoch=1, n_users=40, n_fakes=3).counters.forwarded == 43


def test_onion_and_ideal_give_the_same_estimate_for_a_seed() -> None:
    proto = _proto()
    runs = [
        esa.run_pipeline(
            proto,
            _values(),
            esa.PipelineConfig(shufflers=M, fake_reports=15, crypto=mode, workers=1),
            rng=np.random.default_rng(42),
        )
        for mode in ("onion", "ideal")
    ]
    assert np.array_equal(runs[0].estimate.values, runs[1].estimate.values)
    assert runs[0].to_json()["crypto"] == "onion"
    assert runs[1].to_json()["crypto"] == "ideal"


def test_reports_at_one_hop_have_equal_length() -> None:
    proto = _proto()
    seen: dict[int, set[int]] = {}

    def record(hop: int):
        def fn(batch: np.ndarray) -> np.ndarray:
            seen[hop] = {len(r) for r in batch}
            return batch

        return fn

    esa.run_pipeline(
        proto,
        _values(),
        esa.PipelineConfig(shufflers=3, fake_reports=5, workers=1),
        rng=np.random.default_rng(0),
        interceptors={h: record(h) for h in range(4)},
    )
    sizes = [seen[h] for h in range(4)]
    assert all(len(s) == 1 for s in sizes)
    lengths = [next(iter(s)) for s in sizes]
    assert [a - b for a, b in itertools.pairwise(lengths)] == [crypto.LAYER_OVERHEAD] * 3


def test_estimates_stay_unbiased_with_fakes() -> None:
    # 300 seeded ideal-mode runs with 3 shufflers × 50 fakes: per-bin mean error within
    # 4 standard errors of 0; empirical variance within ±20 % of the closed form including
    # the fakes' multinomial noise (300 repeats: sd of a variance estimate ≈ 8 %).
    n, d, m, r = 2000, 6, 3, 50
    proto = protocols.HistKR(domain=d, epsilon_local=2.0, n=n, delta=1e-6)
    x = _values(n, d, seed=9)
    truth = proto.truth(x)
    rng = np.random.default_rng(123)
    config = esa.PipelineConfig(shufflers=m, fake_reports=r, crypto="ideal")
    errs = np.array([esa.run_pipeline(proto, x, config, rng=rng).error for _ in range(300)])
    var = proto.variance(truth, n=n, n_fakes=m * r)
    assert np.all(np.abs(errs.mean(axis=0)) < 4 * np.sqrt(var / 300))
    ratio = errs.var(axis=0, ddof=1) / var
    assert np.all((ratio > 0.8) & (ratio < 1.2)), ratio


def test_config_validation() -> None:
    for bad in [
        dict(shufflers=0),
        dict(fake_reports=-1),
        dict(threshold=-1),
        dict(crypto="rot13"),
        dict(workers=0),
    ]:
        with pytest.raises(esa.ConfigError):
            esa.PipelineConfig(**bad)  # type: ignore[arg-type]
    with pytest.raises(esa.ConfigError, match="interceptor"):
        esa.run_pipeline(
            _proto(),
            _values(),
            esa.PipelineConfig(shufflers=1, crypto="ideal"),
            rng=np.random.default_rng(0),
            interceptors={5: lambda b: b},
        )


def test_shuffler_output_is_permuted() -> None:
    # The CSPRNG permutation: the first shuffler's output order is not the input order
    # (probability of identity for 300 reports is 1/300!).
    proto = _proto()
    codec = esa.make_codec("ideal", message_size=proto.message_size, layers=2)
    enc = esa.Encoder(proto, codec, [b"", b""])
    batch = enc.encode(np.arange(N) % 8, rng=np.random.default_rng(0), epoch=1)
    out, _ = esa.Shuffler(hop=0, codec=codec, key=None, route=[b"", b""], protocol=proto).process(
        batch, epoch=1
    )
    payload_in = batch[:, 17:].tobytes()
    payload_out = out[:, 17:].tobytes()
    assert payload_in != payload_out
    assert sorted(batch[:, 17:].tolist()) == sorted(out[:, 17:].tolist())


def test_ideal_replay_cache_across_batches_and_within() -> None:
    proto = _proto()
    codec = esa.make_codec("ideal", message_size=proto.message_size, layers=2)
    enc = esa.Encoder(proto, codec, [b"", b""])
    shuffler = esa.Shuffler(hop=0, codec=codec, key=None, route=[b"", b""], protocol=proto)
    batch = enc.encode(_values(50), rng=np.random.default_rng(0), epoch=1)
    _, first = shuffler.process(np.concatenate([batch[:30], batch[:3]]), epoch=1)
    _, second = shuffler.process(batch[20:], epoch=1)
    assert (first.replayed, first.forwarded) == (3, 30)
    assert (second.replayed, second.forwarded) == (10, 20)


def test_ideal_open_with_invalid_rows_and_replays_together() -> None:
    # Malformed rows, in-batch duplicates and replays of an earlier batch in one batch: each
    # dropped and counted once, and exactly the valid first occurrences forwarded (payloads
    # and crowd ids intact, ids redrawn).
    proto = _proto()
    codec = esa.make_codec("ideal", message_size=proto.message_size, layers=2)
    enc = esa.Encoder(proto, codec, [b"", b""])
    earlier = enc.encode(_values(10), rng=np.random.default_rng(1), epoch=1, crowd_id=4)
    fresh = enc.encode(_values(30), rng=np.random.default_rng(2), epoch=1, crowd_id=4)
    seen = codec.new_replay_cache()
    seen.add(codec.open(earlier, key=None, epoch=1, hop=0, seen=None, workers=1).replay_keys)
    bad = fresh[:3].copy()
    bad[:, 0] ^= 0xFF  # wrong version byte
    batch = np.concatenate([bad, fresh, fresh[5:9], earlier[:6]])
    opened = codec.open(batch, key=None, epoch=1, hop=0, seen=seen, workers=1)
    assert (opened.invalid, opened.replayed) == (3, 4 + 6)
    assert codec.count(opened.forward) == 30
    assert sorted(opened.forward[:, 17:].tolist()) == sorted(fresh[:, 17:].tolist())
    assert np.all(opened.crowd_ids == 4)
    assert not np.array_equal(opened.forward[:, 1:9], fresh[:, 1:9])  # fresh ids per hop
    assert opened.replay_keys.shape == (30,)


def test_first_occurrences_keeps_first_in_input_order() -> None:
    from esa._codec import distinct_sorted, first_occurrences

    values = np.array([5, 3, 5, 9, 3, 3, 1], dtype=np.uint64)
    assert first_occurrences(values).tolist() == [True, True, False, True, False, False, True]
    assert distinct_sorted(values).tolist() == [1, 3, 5, 9]
    assert distinct_sorted(np.zeros(4, dtype=np.uint64)).tolist() == [0]
    assert distinct_sorted(np.zeros(0, dtype=np.uint64)).tolist() == []


def test_onion_copies_are_decided_on_whole_rows_not_on_key_prefixes() -> None:
    """Rows whose keys share their first 8 bytes are only suspects: a row is a copy iff it
    repeats an earlier row byte for byte (a prefix tie must never drop an honest row)."""
    from esa._codec import _copies

    rows = np.frombuffer(os.urandom(6 * 60), np.uint8).reshape(6, 60).copy()
    rows[1, 1:9] = rows[0, 1:9]  # same 8-byte prefix, different key: not a copy
    rows[3] = rows[2]  # an exact copy
    rows[5, 1:33] = rows[4, 1:33]  # same key, different ciphertext: not a copy here
    keys = np.ascontiguousarray(rows[:, 1:33]).view("V32").reshape(-1)
    copies, twins = _copies(rows, keys)
    assert copies.tolist() == [False, False, False, True, False, False]
    assert twins
    fresh = np.frombuffer(os.urandom(4 * 60), np.uint8).reshape(4, 60).copy()
    fresh_keys = np.ascontiguousarray(fresh[:, 1:33]).view("V32").reshape(-1)
    assert _copies(fresh, fresh_keys)[0].tolist() == [False] * 4


def test_onion_compact_keeps_the_selected_keys_in_order_in_place() -> None:
    from esa._codec import _compact

    rng = np.random.default_rng(5)
    values = np.frombuffer(rng.bytes(32 * 40_000), "V32").copy()
    keep = rng.random(40_000) < 0.7
    expected = values[keep].copy()
    got = _compact(values, keep)
    assert np.shares_memory(got, values)
    assert got.tobytes() == expected.tobytes()
    every = np.ones(3, dtype=bool)
    small = np.arange(3, dtype=np.uint64)
    assert _compact(small, every) is small


@pytest.mark.parametrize("mode", ["onion", "ideal"])
def test_channels_get_their_own_shuffler_chains(mode: str) -> None:
    # RSum_RM sends each precision through its own chain; every message a chain sees belongs
    # to that chain's channel, and the analyzer receives all of them.
    proto = protocols.build_protocol(
        "rsum_rm", protocols.ProtocolSpec(epsilon=1.0, delta=1e-6, n=3000)
    )
    assert proto.channels > 1
    x = np.random.default_rng(0).random(3000)
    seen: list[np.ndarray] = []

    def record(batch: np.ndarray) -> np.ndarray:
        seen.append(batch)
        return batch

    config = esa.PipelineConfig(shufflers=2, fake_reports=4, crypto=mode, workers=1)
    result = esa.run_pipeline(
        proto, x, config, rng=np.random.default_rng(1), interceptors={0: record}
    )
    shufflers = [h for h in result.hops if h.role == "shuffler"]
    assert [(h.channel, h.hop) for h in shufflers] == [
        (c, i) for c in range(proto.channels) for i in range(2)
    ]
    assert [h.received for h in shufflers if h.hop == 0] == [3000] * proto.channels
    analyzer = result.hops[-1]
    assert analyzer.forwarded == proto.channels * (3000 + 8)
    # Fakes are uniform over the whole message space (what the estimator removes), so a
    # chain's fakes may carry any channel; the users' messages split exactly by channel.
    channel = proto.channel_of(result.analyzer_messages)
    assert np.bincount(channel, minlength=proto.channels).sum() == proto.channels * 3008
    assert np.all(np.abs(np.bincount(channel) - 3008) <= 8 * proto.channels)
    if mode == "ideal":  # the first chain's input holds channel-0 messages only
        payload, ok = crypto.unpad_rows(seen[0][:, 17:], proto.message_size)
        assert ok.all()
        msgs, _ = proto.decode(np.ascontiguousarray(payload))
        assert set(proto.channel_of(msgs).tolist()) == {0}


def test_on_progress_reports_each_stage_up_to_its_total() -> None:
    """``on_progress`` follows every onion stage from 0 to its report count (the encoder's
    messages, each shuffler's batch plus its fakes, the analyzer's batch)."""
    events: list[tuple[str, int, int]] = []
    stage = [""]

    def on_stage(name: str) -> None:
        stage[0] = name

    def on_progress(done: int, total: int) -> None:
        events.append((stage[0], done, total))

    config = esa.PipelineConfig(shufflers=M, fake_reports=5, crypto="onion", workers=1)
    esa.run_pipeline(
        _proto(), _values(), config, rng=np.random.default_rng(0),
        on_stage=on_stage, on_progress=on_progress,
    )  # fmt: skip
    by_stage: dict[str, list[tuple[int, int]]] = {}
    for name, done, total in events:
        by_stage.setdefault(name, []).append((done, total))
    assert list(by_stage) == ["encode", "shuffler 1/2", "shuffler 2/2", "analyze"]
    totals = {name: steps[-1] for name, steps in by_stage.items()}
    assert totals == {
        "encode": (N, N),
        "shuffler 1/2": (N + 5, N + 5),
        "shuffler 2/2": (N + 10, N + 10),
        "analyze": (N + 10, N + 10),
    }
    for steps in by_stage.values():
        assert steps[0][0] == 0
        assert [d for d, _ in steps] == sorted(d for d, _ in steps)


def test_on_progress_total_counts_split_mix_fakes_as_their_shares() -> None:
    """A shuffler's stage total is its batch plus the reports its fakes travel as: each fake
    value of a Split-Mix protocol is ``shares`` reports to wrap. The total used to count one
    per fake value, so it jumped mid-stage (512, then 544 here)."""
    proto = protocols.build_protocol(
        "rsum_dsg", protocols.ProtocolSpec(epsilon=1.0, delta=1e-6, n=30)
    )
    shares = proto.share_spec.shares  # type: ignore[union-attr]
    totals: dict[str, set[int]] = {}
    stage = [""]

    def on_stage(name: str) -> None:
        stage[0] = name

    def on_progress(done: int, total: int) -> None:
        totals.setdefault(stage[0], set()).add(total)

    config = esa.PipelineConfig(shufflers=M, fake_reports=2, crypto="onion", workers=1)
    result = esa.run_pipeline(
        proto, np.random.default_rng(0).random(30), config, rng=np.random.default_rng(0),
        on_stage=on_stage, on_progress=on_progress,
    )  # fmt: skip
    for i, hop in enumerate(result.hops[:-1]):
        assert totals[f"shuffler {i + 1}/{M}"] == {hop.received + 2 * shares}


@pytest.mark.parametrize("name", ["rsum_dsg", "disele"])
def test_a_lost_split_mix_share_loses_the_estimate_visibly(name: str) -> None:
    """One share dropped on the way leaves the Split-Mix sum uniform on Z_q: the analyzer
    reports the estimate as lost (NaN, std ∞, ``complete`` False) instead of a wrong number
    with a small std; with every share there it says ``complete`` True."""
    n = 3000
    proto = protocols.build_protocol(
        name, protocols.ProtocolSpec(epsilon=1.0, delta=1e-6, n=n, domain=8, fake_reports=8)
    )  # DisEle refuses fake values that leave < 1 bin of d = 8 free of them: 8 leave 2.75
    rng = np.random.default_rng(0)
    x = rng.random(n) if name == "rsum_dsg" else rng.integers(0, 8, n)
    config = esa.PipelineConfig(shufflers=2, fake_reports=4, crypto="ideal", workers=1)
    whole = esa.run_pipeline(proto, x, config, rng=np.random.default_rng(1))
    assert whole.estimate.extra["complete"] is True
    assert np.all(np.isfinite(whole.estimate.values))
    expected = whole.estimate.extra["shares_expected"]
    assert whole.estimate.extra["shares_received"] == expected == whole.hops[-1].forwarded
    # The per-hop counters are in reports and add up: a fake value travels as its shares.
    shares = proto.share_spec.shares  # type: ignore[union-attr]
    for h in whole.hops[:-1]:
        assert h.fakes_added == 4 * shares
        assert h.received - h.invalid - h.replayed - h.held + h.fakes_added == h.forwarded
    for hop, drop in ((0, lambda b: b[1:]), (2, lambda b: b[:-3])):
        lost = esa.run_pipeline(
            proto, x, config, rng=np.random.default_rng(1), interceptors={hop: drop}
        )
        assert lost.estimate.extra["complete"] is False
        assert lost.estimate.extra["shares_received"] < expected
        assert np.all(np.isnan(lost.estimate.values))
        assert np.all(np.isinf(lost.estimate.expected_std))


@pytest.mark.parametrize(("representation", "name"), [("reports", "cnt_rr"), ("tally", "cnt_pure")])
def test_a_crowd_held_below_the_threshold_loses_the_estimate(
    representation: str, name: str
) -> None:
    """The pipeline sends one crowd; held below T it never reaches the analyzer, whose
    estimate would otherwise be the fakes-corrected nothing with a small std."""
    proto = protocols.build_protocol(name, protocols.ProtocolSpec(epsilon=1.0, delta=1e-6, n=N))
    x = _values(N, domain=2)
    reports = round(proto.messages_per_user * N)
    for threshold, lost in ((reports + 1, True), (reports, False)):
        config = esa.PipelineConfig(
            shufflers=M,
            threshold=threshold,
            crypto="ideal",
            representation=representation,  # type: ignore[arg-type]
        )
        result = esa.run_pipeline(proto, x, config, rng=np.random.default_rng(0))
        assert result.hops[0].held == (reports if lost else 0)
        assert np.isnan(result.estimate.values).all() == lost
        assert np.isinf(result.estimate.expected_std).all() == lost
        if lost:
            assert result.estimate.extra["reports_held"] == reports
            assert result.estimate.extra["complete"] is False
