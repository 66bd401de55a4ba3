"""PartitionLog: append, read, indexes, roll, truncation, recovery, retention, epochs."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest

from kafkalite.config import LogConfig
from kafkalite.errors import (
    CorruptRecordError,
    InvalidRecordError,
    MessageSizeTooLargeError,
    OffsetOutOfRangeError,
    RecordListTooLargeError,
)
from kafkalite.record.batch import RecordBatch, build_batch, decode_all, iter_batches
from kafkalite.record.codec import Compression
from kafkalite.storage import files
from kafkalite.storage.log import PartitionLog


class FakeClock:
    """A millisecond clock that only moves when told to."""

    def __init__(self, now: int = 1_700_000_000_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now

    def advance(self, milliseconds: int) -> None:
        self.now += milliseconds


def open_log(directory: Path, clock: FakeClock | None = None, clean: bool = True, **overrides: object) -> PartitionLog:
    config = LogConfig().with_overrides({key.replace("_", "."): value for key, value in overrides.items()})
    return PartitionLog(directory, "topic", 0, config, clock or FakeClock(), clean_shutdown=clean)


def values_batch(start: int, count: int, size: int = 20, timestamp: int = 1_700_000_000_000, **kwargs: object) -> bytes:
    return build_batch([f"{index:0{size}d}".encode() for index in range(start, start + count)],
                       timestamps=timestamp, **kwargs)  # type: ignore[arg-type]


def read_all(partition_log: PartitionLog, start: int = 0) -> list[int]:
    partition_log.update_high_watermark(partition_log.log_end_offset)
    offsets = []
    offset = start
    while offset < partition_log.log_end_offset:
        data = partition_log.read(offset, 64 * 1024).records
        records = [record for record in decode_all(data) if record.offset >= offset]
        assert records, f"no progress at offset {offset}"
        for record in records:
            assert int(record.value) == record.offset  # type: ignore[arg-type]
            offsets.append(record.offset)
        offset = records[-1].offset + 1
    return offsets


def test_append_assigns_offsets_and_read_returns_whole_batches(tmp_path: Path) -> None:
    partition_log = open_log(tmp_path / "topic-0")
    for start in range(0, 1000, 10):
        info = partition_log.append_as_leader(values_batch(start, 10), leader_epoch=0)
        assert (info.first_offset, info.last_offset, info.record_count) == (start, start + 9, 10)
    assert partition_log.log_end_offset == 1000
    partition_log.update_high_watermark(1000)
    fetched = partition_log.read(455, 1000)
    batches = list(iter_batches(fetched.records, validate=True))
    assert batches[0].base_offset == 450  # the batch holding the offset, not a later one
    assert sum(batch.size for batch in batches) <= 1000
    assert read_all(partition_log) == list(range(1000))


def test_read_stops_at_high_watermark_and_raises_out_of_range(tmp_path: Path) -> None:
    partition_log = open_log(tmp_path / "topic-0")
    for start in range(0, 100, 10):
        partition_log.append_as_leader(values_batch(start, 10), leader_epoch=0)
    partition_log.update_high_watermark(50)
    data = partition_log.read(0, 1 << 20, max_offset=partition_log.high_watermark).records
    assert decode_all(data)[-1].offset == 49
    assert partition_log.read(50, 1 << 20, max_offset=50).records == b""
    assert decode_all(partition_log.read(50, 1 << 20).records)[-1].offset == 99  # a follower reads to the end
    with pytest.raises(OffsetOutOfRangeError):
        partition_log.read(101, 100)
    assert partition_log.read(100, 100).records == b""


def test_a_read_cut_at_the_last_whole_batch_is_a_read_only_view_of_exact_batches(tmp_path: Path) -> None:
    partition_log = open_log(tmp_path / "topic-0")
    batches = [values_batch(start, 10) for start in range(0, 100, 10)]
    for batch in batches:
        partition_log.append_as_leader(batch, leader_epoch=0)
    partition_log.update_high_watermark(100)
    size = len(batches[0])
    records = partition_log.read(0, 3 * size + size // 2).records  # three and a half batches' room
    assert isinstance(records, memoryview) and records.readonly
    assert bytes(records) == b"".join(partition_log.read(offset, size).records for offset in (0, 10, 20))
    assert [batch.base_offset for batch in iter_batches(records, validate=True)] == [0, 10, 20]
    stored = b"".join(bytes(partition_log.read(offset, size).records) for offset in range(0, 100, 10))
    assert bytes(partition_log.read(0, 1 << 20).records) == stored  # a read of everything is not cut


def test_first_batch_is_returned_whole_even_past_max_bytes(tmp_path: Path) -> None:
    partition_log = open_log(tmp_path / "topic-0")
    partition_log.append_as_leader(values_batch(0, 100, size=100), leader_epoch=0)
    partition_log.update_high_watermark(100)
    data = partition_log.read(0, 10).records
    assert RecordBatch(data).record_count == 100
    assert partition_log.read(0, 10, min_one_batch=False).records == b""


def test_segments_roll_by_size_and_lookup_stays_correct(tmp_path: Path) -> None:
    partition_log = open_log(tmp_path / "topic-0", segment_bytes=4096, index_interval_bytes=256)
    for start in range(0, 2000, 20):
        partition_log.append_as_leader(values_batch(start, 20), leader_epoch=0)
    assert len(partition_log.segments) > 5
    names = sorted(path.name for path in (tmp_path / "topic-0").iterdir() if path.suffix == ".log")
    assert names[0] == "00000000000000000000.log"
    assert all(len(name) == len("00000000000000000000.log") for name in names)
    for segment in partition_log.segments:
        assert segment.size <= 4096
    for offset in (0, 19, 20, 777, 1999):
        data = partition_log.read(offset, 1, max_offset=2000).records
        batch = RecordBatch(data)
        assert batch.base_offset <= offset <= batch.last_offset
    assert read_all(partition_log) == list(range(2000))


def test_segments_roll_by_age_with_injected_clock(tmp_path: Path) -> None:
    clock = FakeClock()
    partition_log = open_log(tmp_path / "topic-0", clock, segment_ms=1000)
    partition_log.append_as_leader(values_batch(0, 1), leader_epoch=0)
    clock.advance(500)
    partition_log.append_as_leader(values_batch(1, 1), leader_epoch=0)
    assert len(partition_log.segments) == 1
    clock.advance(600)
    partition_log.append_as_leader(values_batch(2, 1), leader_epoch=0)
    assert [segment.base_offset for segment in partition_log.segments] == [0, 2]


def test_offset_for_timestamp(tmp_path: Path) -> None:
    partition_log = open_log(tmp_path / "topic-0", segment_bytes=2048, index_interval_bytes=100)
    for start in range(0, 500, 5):
        timestamps = [1000 + offset * 10 for offset in range(start, start + 5)]
        partition_log.append_as_leader(
            build_batch([b"%d" % offset for offset in range(start, start + 5)], timestamps=timestamps), leader_epoch=0)
    assert partition_log.offset_for_timestamp(0) == (0, 1000)
    assert partition_log.offset_for_timestamp(1000 + 123 * 10) == (123, 1000 + 1230)
    assert partition_log.offset_for_timestamp(1000 + 123 * 10 + 1) == (124, 1000 + 1240)
    assert partition_log.offset_for_timestamp(10 ** 9) is None


def test_validation_rejects_bad_batches_and_writes_nothing(tmp_path: Path) -> None:
    partition_log = open_log(tmp_path / "topic-0", max_message_bytes=2000)
    partition_log.append_as_leader(values_batch(0, 5), leader_epoch=0)
    size_before = partition_log.size_in_bytes
    good = values_batch(5, 5)
    corrupt = bytearray(values_batch(10, 5))
    corrupt[-3] ^= 0xFF
    with pytest.raises(CorruptRecordError):
        partition_log.append_as_leader(good + bytes(corrupt), leader_epoch=0)  # the good one must not land
    with pytest.raises(CorruptRecordError):
        partition_log.append_as_leader(good + good[:30], leader_epoch=0)
    with pytest.raises(CorruptRecordError):
        partition_log.append_as_leader(b"", leader_epoch=0)
    with pytest.raises(MessageSizeTooLargeError):
        partition_log.append_as_leader(values_batch(0, 100, size=100), leader_epoch=0)
    assert partition_log.size_in_bytes == size_before
    assert partition_log.log_end_offset == 5


def test_record_list_larger_than_segment_is_rejected(tmp_path: Path) -> None:
    partition_log = open_log(tmp_path / "topic-0", segment_bytes=1024)
    with pytest.raises(RecordListTooLargeError):
        partition_log.append_as_leader(values_batch(0, 100, size=50), leader_epoch=0)


def test_compacted_topic_requires_keys(tmp_path: Path) -> None:
    partition_log = open_log(tmp_path / "topic-0", cleanup_policy="compact")
    with pytest.raises(InvalidRecordError):
        partition_log.append_as_leader(build_batch([b"v"], keys=[None], timestamps=1), leader_epoch=0)
    partition_log.append_as_leader(build_batch([b"v"], keys=[b"k"], timestamps=1), leader_epoch=0)


def test_log_append_time_rewrites_timestamp_and_crc(tmp_path: Path) -> None:
    clock = FakeClock(5_000)
    partition_log = open_log(tmp_path / "topic-0", clock, message_timestamp_type="LogAppendTime")
    info = partition_log.append_as_leader(values_batch(0, 3, timestamp=1), leader_epoch=0)
    assert info.log_append_time == 5_000
    batch = RecordBatch(partition_log.read(0, 1 << 20).records)
    batch.validate()
    assert batch.timestamp_type == 1 and batch.max_timestamp == 5_000


def test_compressed_batches_are_stored_without_recompression(tmp_path: Path) -> None:
    partition_log = open_log(tmp_path / "topic-0")
    produced = values_batch(0, 50, compression=Compression.LZ4)
    partition_log.append_as_leader(produced, leader_epoch=7)
    stored = partition_log.read(0, 1 << 20).records
    assert stored[16:] == produced[16:]  # only base offset and leader epoch were stamped
    assert RecordBatch(stored).partition_leader_epoch == 7


def test_truncate_to_removes_whole_batches_and_later_segments(tmp_path: Path) -> None:
    partition_log = open_log(tmp_path / "topic-0", segment_bytes=2048)
    for start in range(0, 600, 10):
        partition_log.append_as_leader(values_batch(start, 10), leader_epoch=start // 200)
    segments_before = len(partition_log.segments)
    assert partition_log.truncate_to(355) == 350
    assert partition_log.log_end_offset == 350
    assert len(partition_log.segments) < segments_before
    assert partition_log.epoch_cache.entries == [(0, 0), (1, 200)]
    partition_log.append_as_leader(values_batch(350, 10), leader_epoch=5)
    assert read_all(partition_log) == list(range(360))
    assert partition_log.epoch_cache.entries == [(0, 0), (1, 200), (5, 350)]


def test_follower_append_keeps_leader_offsets_and_epochs(tmp_path: Path) -> None:
    leader = open_log(tmp_path / "leader-0")
    follower = open_log(tmp_path / "follower-0")
    for start in range(0, 100, 10):
        leader.append_as_leader(values_batch(start, 10), leader_epoch=3 if start < 50 else 4)
    data = leader.read(0, 1 << 20).records
    info = follower.append_as_follower(data)
    assert (info.first_offset, info.last_offset) == (0, 99)
    assert follower.read(0, 1 << 20).records == data
    assert follower.epoch_cache.entries == [(3, 0), (4, 50)]
    with pytest.raises(CorruptRecordError):
        follower.append_as_follower(leader.read(10, 100).records)  # below the follower's end


def test_reopen_after_clean_close_restores_offsets(tmp_path: Path) -> None:
    directory = tmp_path / "topic-0"
    partition_log = open_log(directory, segment_bytes=4096, index_interval_bytes=200)
    for start in range(0, 1000, 10):
        partition_log.append_as_leader(values_batch(start, 10), leader_epoch=0)
    max_timestamp = partition_log.active_segment.max_timestamp
    partition_log.close()
    reopened = open_log(directory, segment_bytes=4096, index_interval_bytes=200)
    assert reopened.log_end_offset == 1000
    assert reopened.active_segment.max_timestamp == max_timestamp
    assert read_all(reopened) == list(range(1000))


def test_recovery_truncates_a_torn_tail(tmp_path: Path) -> None:
    directory = tmp_path / "topic-0"
    partition_log = open_log(directory)
    for start in range(0, 100, 10):
        partition_log.append_as_leader(values_batch(start, 10), leader_epoch=0)
    partition_log.close()
    log_file = directory / "00000000000000000000.log"
    size = log_file.stat().st_size
    with open(log_file, "r+b") as handle:
        handle.truncate(size - 17)
    reopened = open_log(directory, clean=False)
    assert reopened.log_end_offset == 90
    assert read_all(reopened) == list(range(90))
    reopened.append_as_leader(values_batch(90, 10), leader_epoch=0)
    assert read_all(reopened) == list(range(100))


def test_recovery_cuts_at_first_corrupt_batch_and_drops_later_segments(tmp_path: Path) -> None:
    directory = tmp_path / "topic-0"
    partition_log = open_log(directory, segment_bytes=2048)
    for start in range(0, 600, 10):
        partition_log.append_as_leader(values_batch(start, 10), leader_epoch=0)
    second = partition_log.segments[1]
    corrupt_at = second.position_of(second.base_offset + 25)
    assert corrupt_at is not None
    partition_log.close()
    with open(second.log_path, "r+b") as handle:
        handle.seek(corrupt_at + 70)
        byte = handle.read(1)
        handle.seek(corrupt_at + 70)
        handle.write(bytes([byte[0] ^ 0xFF]))
    reopened = open_log(directory, clean=False, segment_bytes=2048)
    assert reopened.log_end_offset == second.base_offset + 20
    assert len(reopened.segments) == 2
    assert read_all(reopened) == list(range(second.base_offset + 20))


def test_damaged_index_is_rebuilt(tmp_path: Path) -> None:
    directory = tmp_path / "topic-0"
    partition_log = open_log(directory, index_interval_bytes=100)
    for start in range(0, 500, 5):
        partition_log.append_as_leader(values_batch(start, 5), leader_epoch=0)
    entries = len(partition_log.active_segment.index)
    assert entries > 10
    partition_log.close()
    index_file = directory / "00000000000000000000.index"
    with open(index_file, "r+b") as handle:
        handle.seek(8 * 5)
        handle.write(struct.pack(">ii", 1, 10 ** 8))  # offset goes backwards, position past the end
    reopened = open_log(directory, index_interval_bytes=100)
    assert len(reopened.active_segment.index) == entries
    assert read_all(reopened) == list(range(500))
    reopened.close()
    (directory / "00000000000000000000.timeindex").unlink()
    again = open_log(directory, index_interval_bytes=100)
    assert again.offset_for_timestamp(0) == (0, 1_700_000_000_000)


def test_time_retention_deletes_whole_old_segments_below_high_watermark(tmp_path: Path) -> None:
    clock = FakeClock()
    partition_log = open_log(tmp_path / "topic-0", clock, segment_bytes=2048, retention_ms=10_000,
                             file_delete_delay_ms=1000)
    for start in range(0, 300, 10):
        partition_log.append_as_leader(values_batch(start, 10, timestamp=clock.now), leader_epoch=0)
    segment_count = len(partition_log.segments)
    clock.advance(5_000)
    for start in range(300, 400, 10):
        partition_log.append_as_leader(values_batch(start, 10, timestamp=clock.now), leader_epoch=0)
    clock.advance(6_000)  # the first batches are now 11 s old, the later ones 6 s
    partition_log.update_high_watermark(100)
    removed_low_hw = partition_log.delete_old_segments()
    assert all(segment.next_offset > 100 for segment in partition_log.segments[:1])
    partition_log.update_high_watermark(partition_log.log_end_offset)
    removed = removed_low_hw + partition_log.delete_old_segments()
    assert partition_log.segments[0].base_offset == 300  # the old batches filled whole segments
    assert removed == segment_count  # every old segment went, no newer one did
    assert partition_log.log_start_offset == 300
    deleted_files = [path for path in (tmp_path / "topic-0").iterdir() if path.name.endswith(".deleted")]
    assert deleted_files
    with pytest.raises(OffsetOutOfRangeError):
        partition_log.read(0, 100)
    clock.advance(1_000)
    assert partition_log.delete_expired_files() == removed
    assert not [path for path in (tmp_path / "topic-0").iterdir() if path.name.endswith(".deleted")]
    assert read_all(partition_log, partition_log.log_start_offset)[-1] == 399


def test_size_retention_keeps_at_most_retention_bytes(tmp_path: Path) -> None:
    partition_log = open_log(tmp_path / "topic-0", segment_bytes=2048, retention_bytes=5000)
    for start in range(0, 1000, 10):
        partition_log.append_as_leader(values_batch(start, 10), leader_epoch=0)
    partition_log.update_high_watermark(partition_log.log_end_offset)
    assert partition_log.delete_old_segments() > 0
    assert partition_log.size_in_bytes - partition_log.segments[0].size < 5000
    assert partition_log.size_in_bytes >= 5000 - 2048
    assert read_all(partition_log, partition_log.log_start_offset)[-1] == 999


def test_retention_that_takes_everything_rolls_a_fresh_segment(tmp_path: Path) -> None:
    clock = FakeClock()
    partition_log = open_log(tmp_path / "topic-0", clock, retention_ms=100)
    partition_log.append_as_leader(values_batch(0, 10, timestamp=clock.now), leader_epoch=0)
    partition_log.update_high_watermark(10)
    clock.advance(1000)
    assert partition_log.delete_old_segments() == 1
    assert partition_log.log_start_offset == partition_log.log_end_offset == 10
    partition_log.append_as_leader(values_batch(10, 1, timestamp=clock.now), leader_epoch=0)
    assert read_all(partition_log, 10) == [10]


def test_flush_messages_forces_fsync_and_recovery_point(tmp_path: Path) -> None:
    partition_log = open_log(tmp_path / "topic-0", flush_messages=1)
    partition_log.append_as_leader(values_batch(0, 3), leader_epoch=0)
    assert partition_log.recovery_point == 3
    relaxed = open_log(tmp_path / "other-0")
    relaxed.append_as_leader(values_batch(0, 3), leader_epoch=0)
    assert relaxed.recovery_point == 0
    relaxed.flush()
    assert relaxed.recovery_point == 3


def test_interrupted_compaction_swap_is_completed_on_open(tmp_path: Path) -> None:
    directory = tmp_path / "topic-0"
    partition_log = open_log(directory, segment_bytes=1024)
    for start in range(0, 200, 10):
        partition_log.append_as_leader(values_batch(start, 10), leader_epoch=0)
    first = partition_log.segments[0]
    partition_log.close()
    # A complete .swap copy of the first segment and a half-written .cleaned one.
    for suffix in (files.LOG_SUFFIX,):
        data = (directory / f"{first.base_offset:020d}{suffix}").read_bytes()
        (directory / f"{first.base_offset:020d}{suffix}{files.SWAP_SUFFIX}").write_bytes(data)
    (directory / f"{first.base_offset:020d}.log{files.CLEANED_SUFFIX}").write_bytes(b"partial")
    reopened = open_log(directory, segment_bytes=1024)
    leftovers = [name for name in os.listdir(directory) if name.endswith((".swap", ".cleaned"))]
    assert leftovers == []
    assert read_all(reopened) == list(range(200))


def test_offset_index_lookup_matches_binary_search_on_skewed_offsets(tmp_path: Path) -> None:
    import random
    from bisect import bisect_right

    from kafkalite.storage.index import OffsetIndex

    index = OffsetIndex(tmp_path / "x.index", 1000, 100_000)
    generator = random.Random(5)
    relative = 0
    position = 0
    entries = []
    for step in range(3000):
        relative += 1 if step < 2500 else generator.randrange(1, 5000)  # dense, then sparse (compaction)
        position += generator.randrange(1, 100)
        index.append(1000 + relative, position)
        entries.append((relative, position))
    offsets = [entry[0] for entry in entries]
    for target in [0, 1, 2, 999, 1000, 2500, 2501, offsets[-1], offsets[-1] + 10] + \
            [generator.randrange(offsets[-1] + 5) for _ in range(2000)]:
        expected_index = bisect_right(offsets, target) - 1
        expected = (1000, 0) if expected_index < 0 else (1000 + offsets[expected_index], entries[expected_index][1])
        assert index.lookup(1000 + target) == expected, target


def test_truncating_at_the_log_end_forgets_epochs_that_start_there(tmp_path: Path) -> None:
    partition_log = open_log(tmp_path / "topic-0")
    partition_log.append_as_leader(values_batch(0, 5), leader_epoch=0)
    partition_log.epoch_cache.assign(3, partition_log.log_end_offset)  # led epoch 3 without writing
    assert partition_log.truncate_to(5) == 5
    assert partition_log.epoch_cache.entries == [(0, 0)]
