"""Bounded memory and reproducible sharding of the in-process pipeline.

* crypto's record helpers seal and open exactly what the per-report functions do;
* a batch past the memory budget spills to a temp file and nothing else changes: a
  shuffler's output is a permutation of its input, and a run's estimate is the one of a
  run held in RAM;
* the estimate of a seed does not depend on where the chunk tasks ran (in process, a local
  pool), nor on how many there were.
"""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

import crypto
import esa
from esa._executor import InlineExecutor, local_pool
from esa._store import RecordWriter, gather
from protocols import ProtocolSpec, build_protocol

EPOCH = 3


def _keys(count: int) -> list[crypto.LayerPrivateKey]:
    return [crypto.LayerPrivateKey.generate() for _ in range(count)]


def test_records_are_the_reports_of_the_per_report_functions() -> None:
    keys = _keys(2)
    route = [k.public_key for k in keys]
    payloads = np.arange(5 * 7, dtype=np.uint8).reshape(5, 7)
    crowds = np.array([0, 1, 2**64 - 1, 7, 7], dtype=np.uint64)
    records = crypto.wrap_records(payloads, route, epoch=EPOCH, crowd_ids=crowds)
    assert records.shape == (5, crypto.report_size(7, 2))
    for row, payload, crowd in zip(records, payloads, crowds, strict=True):
        header, inner = crypto.peel_report(row.tobytes(), keys[0], epoch=EPOCH, hop=0)
        assert header.crowd_id == crowd
        header, last = crypto.peel_report(inner, keys[1], epoch=EPOCH, hop=1)
        assert last == payload.tobytes()
    tampered = records.copy()
    tampered[2, 40] ^= 1
    got_crowds, inner, ok = crypto.peel_records(tampered, keys[0], epoch=EPOCH, hop=0)
    assert ok.tolist() == [True, True, False, True, True]
    assert got_crowds.tolist() == [0, 1, 0, 7, 7]
    assert not inner[2].any()
    _, payload_rows, ok = crypto.peel_records(inner[ok], keys[1], epoch=EPOCH, hop=1)
    assert ok.all()
    assert np.array_equal(payload_rows, payloads[[0, 1, 3, 4]])
    # the same key, the wrong hop: every row fails, opaquely
    assert not crypto.peel_records(records, keys[0], epoch=EPOCH, hop=1)[2].any()
    with pytest.raises(crypto.CryptoParameterError):
        crypto.peel_records(records[:, :10], keys[0], epoch=EPOCH, hop=0)
    with pytest.raises(crypto.CryptoParameterError):
        crypto.wrap_records(payloads, route, epoch=EPOCH, crowd_ids=crowds[:4])


def test_records_across_blocks_open_as_the_per_report_function_does() -> None:
    # 2100 rows: three of peel_records' 1024-row blocks; tampered rows on both sides of
    # each block boundary, crowd ids that use all 64 bits.
    keys = _keys(1)
    rng = np.random.default_rng(5)
    payloads = rng.integers(0, 256, size=(2100, 4), dtype=np.uint8)
    crowds = rng.integers(0, 2**64, size=2100, dtype=np.uint64)
    records = crypto.wrap_records(payloads, [keys[0].public_key], epoch=EPOCH, crowd_ids=crowds)
    bad = [0, 1023, 1024, 2047, 2048, 2099]
    records[bad, 60] ^= 0x80
    records[5, 0] = 2  # a wrong version byte: invalid before any X25519
    got_crowds, inner, ok = crypto.peel_records(records, keys[0], epoch=EPOCH, hop=0)
    assert inner.shape == (2100, 4)
    assert inner.flags.c_contiguous
    assert got_crowds.dtype == np.uint64
    for i, row in enumerate(records):
        try:
            header, payload = crypto.peel_report(row.tobytes(), keys[0], epoch=EPOCH, hop=0)
        except crypto.InvalidReport:
            assert not ok[i]
            assert got_crowds[i] == 0
            assert not inner[i].any()
        else:
            assert ok[i]
            assert got_crowds[i] == header.crowd_id == crowds[i]
            assert inner[i].tobytes() == payload == payloads[i].tobytes()
    assert np.flatnonzero(~ok).tolist() == sorted([*bad, 5])
    empty = crypto.peel_records(records[:0], keys[0], epoch=EPOCH, hop=0)
    assert [a.shape for a in empty] == [(0,), (0, 4), (0,)]


def test_a_writer_past_its_budget_spills_to_an_unlinked_file(tmp_path: Path) -> None:
    rows = np.random.default_rng(0).integers(0, 256, (1000, 33), dtype=np.uint8)
    in_ram = RecordWriter(33, budget=10**6, directory=tmp_path)
    spilled = RecordWriter(33, budget=100, directory=tmp_path)
    for writer in (in_ram, spilled):
        for start in range(0, 1000, 300):
            writer.append(rows[start : start + 300])
    assert not in_ram.spilled
    assert spilled.spilled
    on_disk = spilled.finish()
    assert np.array_equal(in_ram.finish(), rows)
    assert np.array_equal(on_disk, rows)
    assert list(tmp_path.iterdir()) == []  # deleted on creation: nothing left behind
    order = np.random.default_rng(1).permutation(1300)
    joined = np.concatenate([rows, rows[:300]])
    assert np.array_equal(gather([on_disk, rows[:300]], order, budget=0), joined[order])


def test_gather_reads_a_spilled_batch_window_by_window(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With windows of 4 KiB over a 33 kB spilled part (and a part in RAM), every row of a
    random permutation and of an index with repeats lands where it belongs."""
    monkeypatch.setattr(esa._store, "WINDOW_BYTES", 4096)
    rows = np.random.default_rng(2).integers(0, 256, (1000, 33), dtype=np.uint8)
    writer = RecordWriter(33, budget=0, directory=tmp_path)
    writer.append(rows)
    on_disk = writer.finish()
    joined = np.concatenate([rows, rows[:300]])
    order = np.random.default_rng(3).permutation(1300).astype(np.uint32)
    assert np.array_equal(gather([on_disk, rows[:300]], order, budget=0), joined[order])
    repeats = np.random.default_rng(4).integers(0, 1300, 5000)
    assert np.array_equal(gather([on_disk, rows[:300]], repeats, budget=0), joined[repeats])
    assert gather([on_disk], np.zeros(0, np.int64)).shape == (0, 33)


def test_a_spill_without_room_stops_with_a_config_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    usage = shutil.disk_usage(tmp_path)
    monkeypatch.setattr(shutil, "disk_usage", lambda _: usage._replace(free=1000))
    writer = RecordWriter(10, budget=0, directory=tmp_path)
    with pytest.raises(esa.ConfigError, match="must spill"):
        writer.append(np.zeros((101, 10), np.uint8))


def _payload_counts(codec: esa.HopCodec, batch: object) -> Counter[bytes]:
    rows = np.asarray(batch)
    return Counter(r[-codec.payload_size :].tobytes() for r in rows)


@pytest.mark.parametrize("mode", ["ideal", "onion"])
def test_a_spilled_shuffler_forwards_a_permutation_of_its_input(mode: str) -> None:
    proto = build_protocol("hist_kr", ProtocolSpec(epsilon=1.0, delta=1e-6, n=3000, domain=8))
    keys = _keys(2)
    route = [k.public_key for k in keys]
    spilled = esa.make_codec(mode, message_size=proto.message_size, layers=2, memory_budget=0)
    encoder = esa.Encoder(proto, spilled, route)
    batch = encoder.encode(np.arange(3000) % 8, rng=np.random.default_rng(0), epoch=EPOCH)
    shuffler = esa.Shuffler(
        hop=0, codec=spilled, key=keys[0] if mode == "onion" else None, route=route, protocol=proto
    )
    out, counters = shuffler.process(batch, epoch=EPOCH)
    assert counters.forwarded == 3000
    if mode == "onion":  # the analyzer's records: open them to compare the payloads
        opened = spilled.open(out, key=keys[1], epoch=EPOCH, hop=1, seen=None, workers=1)
        assert opened.invalid == 0
        out = opened.forward
        reference = spilled.open(batch, key=keys[0], epoch=EPOCH, hop=0, seen=None, workers=1)
        batch = spilled.open(
            reference.forward, key=keys[1], epoch=EPOCH, hop=1, seen=None, workers=1
        ).forward
    assert _payload_counts(spilled, out) == _payload_counts(spilled, batch)
    assert not np.array_equal(np.asarray(out), np.asarray(batch))  # reordered (p = 1/3000!)


@pytest.mark.parametrize(("mode", "n"), [("ideal", 40_000), ("onion", 600)])
def test_the_estimate_of_a_seed_holds_whatever_the_budget_and_the_executor(
    mode: str, n: int
) -> None:
    proto = build_protocol("hist_kr", ProtocolSpec(epsilon=1.0, delta=1e-6, n=n, domain=8))
    x = np.random.default_rng(4).integers(0, 8, n)

    def run(budget: int, executor: object) -> esa.RunResult:
        config = esa.PipelineConfig(
            shufflers=2, fake_reports=5, crypto=mode, memory_budget=budget, workers=1
        )
        return esa.run_pipeline(proto, x, config, rng=11, executor=executor)  # type: ignore[arg-type]

    reference = run(2**30, InlineExecutor())
    assert reference.n == n
    assert reference.hops[-1].forwarded == n + 10
    for budget, executor in [(0, InlineExecutor()), (2**30, local_pool(2)), (0, local_pool(2))]:
        assert np.array_equal(run(budget, executor).estimate.values, reference.estimate.values)
    # another seed is another estimate (the comparison above can fail)
    other = esa.run_pipeline(
        proto, x, esa.PipelineConfig(shufflers=2, fake_reports=5, crypto=mode, workers=1), rng=12
    )
    assert not np.array_equal(other.estimate.values, reference.estimate.values)
