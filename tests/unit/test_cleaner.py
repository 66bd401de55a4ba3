"""Log compaction: latest value per key survives, offsets are kept, tombstones expire."""

from __future__ import annotations

import os
from pathlib import Path

from kafkalite.record.batch import build_batch, decode_all, iter_batches
from kafkalite.record.codec import Compression
from kafkalite.storage import cleaner
from kafkalite.storage.log import PartitionLog
from tests.unit.test_log import FakeClock, open_log


def keyed(partition_log: PartitionLog, pairs: list[tuple[bytes, bytes | None]], timestamp: int,
          compression: int = Compression.NONE) -> None:
    partition_log.append_as_leader(
        build_batch([value for _, value in pairs], keys=[key for key, _ in pairs], timestamps=timestamp,
                    compression=compression), leader_epoch=0)


def contents(partition_log: PartitionLog) -> list[tuple[int, bytes | None, bytes | None]]:
    partition_log.update_high_watermark(partition_log.log_end_offset)
    data = b"".join(batch.raw() for batch in partition_log.batches())
    return [(record.offset, record.key, record.value) for record in decode_all(data)]


def test_compaction_keeps_latest_value_per_key_with_original_offsets(tmp_path: Path) -> None:
    clock = FakeClock()
    partition_log = open_log(tmp_path / "compacted-0", clock, cleanup_policy="compact", segment_bytes=1024)
    expected: dict[bytes, tuple[int, bytes]] = {}
    offset = 0
    for round_number in range(30):
        pairs = [(b"key-%d" % (index % 7), b"value-%d-%d" % (round_number, index)) for index in range(5)]
        keyed(partition_log, pairs, clock.now, compression=Compression.LZ4 if round_number % 2 else Compression.NONE)
        for key, value in pairs:
            expected[key] = (offset, value)
            offset += 1
    partition_log.update_high_watermark(partition_log.log_end_offset)
    before = partition_log.size_in_bytes
    result = cleaner.clean(partition_log, checkpoint=0, force=True)
    assert result.cleaned and result.records_removed > 0
    assert partition_log.size_in_bytes < before
    survivors = contents(partition_log)
    active_base = partition_log.active_segment.base_offset
    cleaned_part = {key: (offset, value) for offset, key, value in survivors if offset < active_base}
    for offset, key, _ in survivors:
        if offset < active_base:
            assert expected[key][0] >= offset
    # In the cleaned part every key appears once, at its latest offset below the active segment.
    keys_in_cleaned = [key for offset, key, _ in survivors if offset < active_base]
    assert len(keys_in_cleaned) == len(set(keys_in_cleaned))
    for key, (offset, _) in cleaned_part.items():
        assert offset == max(o for o, k, _ in survivors if k == key and o < active_base)
    # The latest value of every key is still readable, and offsets only grow.
    latest = {}
    for _, key, value in survivors:
        latest[key] = value
    assert latest == {key: value for key, (_, value) in expected.items()}
    offsets = [offset for offset, _, _ in survivors]
    assert offsets == sorted(offsets)
    for batch in partition_log.batches():
        batch.validate()
    assert not [name for name in os.listdir(partition_log.directory) if name.endswith((".cleaned", ".swap"))]


def test_tombstones_survive_delete_retention_then_go(tmp_path: Path) -> None:
    clock = FakeClock()
    partition_log = open_log(tmp_path / "compacted-0", clock, cleanup_policy="compact", segment_bytes=512,
                             delete_retention_ms=10_000)
    keyed(partition_log, [(b"a", b"1"), (b"b", b"2")], clock.now)
    keyed(partition_log, [(b"a", None)], clock.now)  # delete a
    for index in range(20):
        keyed(partition_log, [(b"filler-%d" % index, b"x" * 40)], clock.now)
    partition_log.update_high_watermark(partition_log.log_end_offset)
    first = cleaner.clean(partition_log, 0, force=True)
    assert first.cleaned
    survivors = contents(partition_log)
    assert (2, b"a", None) in survivors  # the tombstone is kept for consumers to see
    assert all(key != b"a" or value is None for _, key, value in survivors)
    clock.advance(5_000)
    second = cleaner.clean(partition_log, first.new_checkpoint, force=True)
    assert (2, b"a", None) in contents(partition_log)
    del second
    clock.advance(10_000)
    third = cleaner.clean(partition_log, first.new_checkpoint, force=True)
    assert third.tombstones_removed == 1
    assert all(key != b"a" for _, key, _ in contents(partition_log))
    assert (1, b"b", b"2") in contents(partition_log)


def test_cleaner_leaves_active_segment_and_data_above_high_watermark(tmp_path: Path) -> None:
    partition_log = open_log(tmp_path / "compacted-0", cleanup_policy="compact", segment_bytes=300)
    for index in range(20):
        keyed(partition_log, [(b"same", b"v%d" % index)], 1)
    partition_log.update_high_watermark(0)
    assert not cleaner.clean(partition_log, 0, force=True).cleaned
    partition_log.update_high_watermark(partition_log.log_end_offset)
    assert cleaner.clean(partition_log, 0, force=True).cleaned
    survivors = contents(partition_log)
    assert survivors[-1] == (19, b"same", b"v19")


def test_dirty_ratio_gates_cleaning(tmp_path: Path) -> None:
    partition_log = open_log(tmp_path / "compacted-0", cleanup_policy="compact", segment_bytes=300,
                             min_cleanable_dirty_ratio=0.5)
    for index in range(20):
        keyed(partition_log, [(b"k%d" % index, b"v")], 1)
    partition_log.update_high_watermark(partition_log.log_end_offset)
    assert cleaner.dirty_ratio(partition_log, 0) == 1.0
    first = cleaner.clean(partition_log, 0)
    assert first.cleaned
    assert cleaner.dirty_ratio(partition_log, first.new_checkpoint) == 0.0
    assert not cleaner.clean(partition_log, first.new_checkpoint).cleaned


def test_rebuilt_batches_keep_producer_fields_and_span(tmp_path: Path) -> None:
    partition_log = open_log(tmp_path / "compacted-0", cleanup_policy="compact", segment_bytes=300)
    partition_log.append_as_leader(
        build_batch([b"1", b"2", b"3"], keys=[b"x", b"y", b"x"], timestamps=[1, 2, 3], producer_id=42,
                    producer_epoch=2, base_sequence=7), leader_epoch=1)
    for index in range(5):
        keyed(partition_log, [(b"y", b"later-%d" % index)], 4)
    partition_log.update_high_watermark(partition_log.log_end_offset)
    cleaner.clean(partition_log, 0, force=True)
    first = next(iter(iter_batches(next(partition_log.batches()).raw())))
    first.validate()
    assert (first.base_offset, first.last_offset, first.record_count) == (0, 2, 1)
    assert (first.producer_id, first.producer_epoch, first.base_sequence) == (42, 2, 7)
    assert [(record.offset, record.value) for record in first.records()] == [(2, b"3")]
