"""Storage errors during appends, checkpoints and recovery: nothing torn, nothing lost silently.

The I/O errors are injected by replacing ``os.pwritev`` / ``os.ftruncate`` for the duration of one
call: the first failing write really puts part of the batch on disk (a torn tail, as a full disk
does) and then fails with the chosen errno.
"""

from __future__ import annotations

import errno
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kafkalite.config import LogConfig
from kafkalite.errors import KafkaStorageError, LogDirOfflineError, for_code
from kafkalite.storage import checkpoint, files
from kafkalite.storage.log import PartitionLog
from kafkalite.storage.manager import LogManager
from tests.unit.test_log import FakeClock, open_log, read_all, values_batch

_REAL_PWRITEV = os.pwritev
_REAL_FTRUNCATE = os.ftruncate


class TornWrites:
    """Stands in for ``os.pwritev``: while armed, writes ``partial`` bytes of the call for real
    and returns that short count, then fails the next call with ``error``."""

    def __init__(self, error: int, partial: int = 100) -> None:
        self.error = error
        self.partial = partial
        self.armed = False
        self.failures = 0
        self._wrote_partial = False

    def __call__(self, fd: int, buffers: list[Any], position: int) -> int:
        if not self.armed:
            return _REAL_PWRITEV(fd, buffers, position)
        if not self._wrote_partial:
            self._wrote_partial = True
            first = bytes(memoryview(buffers[0]).cast("B"))[:self.partial]
            return os.pwrite(fd, first, position)
        self._wrote_partial = False
        self.failures += 1
        raise OSError(self.error, os.strerror(self.error))


@pytest.fixture
def torn_writes(monkeypatch: pytest.MonkeyPatch) -> Callable[[int], TornWrites]:
    def install(error: int) -> TornWrites:
        writes = TornWrites(error)
        monkeypatch.setattr(os, "pwritev", writes)
        return writes
    return install


def _file_size(path: Path) -> int:
    return path.stat().st_size


def test_kafka_storage_error_is_retriable_and_refreshes_metadata() -> None:
    assert for_code(56) is KafkaStorageError
    assert KafkaStorageError.message == "KAFKA_STORAGE_ERROR"
    assert KafkaStorageError.retriable and KafkaStorageError.invalid_metadata
    assert issubclass(LogDirOfflineError, KafkaStorageError) and LogDirOfflineError.errno == 56


@pytest.mark.parametrize("error", [errno.ENOSPC, errno.EDQUOT])
def test_full_disk_append_is_rolled_back_and_the_log_stays_online(
        tmp_path: Path, torn_writes: Callable[[int], TornWrites], error: int) -> None:
    partition_log = open_log(tmp_path / "topic-0")
    for start in range(0, 30, 10):
        partition_log.append_as_leader(values_batch(start, 10), leader_epoch=0)
    segment = partition_log.active_segment
    size_before = _file_size(segment.log_path)
    index_bytes_before = _file_size(segment.index.path)
    writes = torn_writes(error)
    writes.armed = True
    with pytest.raises(KafkaStorageError) as raised:
        partition_log.append_as_leader(values_batch(30, 10), leader_epoch=0)
    assert not isinstance(raised.value, LogDirOfflineError)
    assert writes.failures == 1
    # The torn 100 bytes are gone: file, indexes and offsets are as before the failed append.
    assert _file_size(segment.log_path) == segment.size == size_before
    assert _file_size(segment.index.path) == index_bytes_before == len(segment.index) * 8
    assert partition_log.log_end_offset == 30
    assert partition_log.offline_reason is None
    writes.armed = False
    partition_log.append_as_leader(values_batch(30, 10), leader_epoch=0)
    assert read_all(partition_log) == list(range(40))


def test_segment_rolled_after_a_full_disk_keeps_everything_through_a_crash(
        tmp_path: Path, torn_writes: Callable[[int], TornWrites]) -> None:
    """The reported loss: a failed write's bytes stayed past the segment end, the segment rolled
    over them, and recovery cut the log there and deleted every later segment."""
    directory = tmp_path / "topic-0"
    clock = FakeClock()
    partition_log = open_log(directory, clock, segment_ms=3000)
    partition_log.append_as_leader(values_batch(0, 10), leader_epoch=0)
    writes = torn_writes(errno.ENOSPC)
    writes.armed = True
    for _ in range(3):
        with pytest.raises(KafkaStorageError):
            partition_log.append_as_leader(values_batch(10, 10), leader_epoch=0)
    writes.armed = False
    acknowledged = 10
    for _ in range(5):
        clock.advance(3001)  # every append rolls a new segment
        partition_log.append_as_leader(values_batch(acknowledged, 10), leader_epoch=0)
        acknowledged += 10
    assert len(partition_log.segments) == 6
    partition_log.flush()
    # A crash: no close, no clean-shutdown marker; every segment is recovered.
    recovered = PartitionLog(directory, "topic", 0, partition_log.config, clock, clean_shutdown=False)
    assert recovered.log_end_offset == acknowledged
    assert len(recovered.segments) == 6
    assert read_all(recovered) == list(range(acknowledged))


def test_a_failing_index_write_is_rolled_back_with_the_batch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    partition_log = open_log(tmp_path / "topic-0", index_interval_bytes=1)
    for start in range(0, 30, 10):
        partition_log.append_as_leader(values_batch(start, 10), leader_epoch=0)
    segment = partition_log.active_segment
    entries = len(segment.index)
    size = segment.size
    real_pwrite = os.pwrite

    def failing_pwrite(fd: int, data: bytes, position: int) -> int:
        real_pwrite(fd, data[:3], position)  # half an index entry reaches the file
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "pwrite", failing_pwrite)
    with pytest.raises(KafkaStorageError):
        partition_log.append_as_leader(values_batch(30, 10), leader_epoch=0)
    monkeypatch.setattr(os, "pwrite", real_pwrite)
    assert len(segment.index) == entries and _file_size(segment.index.path) == entries * 8
    assert _file_size(segment.log_path) == segment.size == size
    partition_log.append_as_leader(values_batch(30, 10), leader_epoch=0)
    assert read_all(partition_log) == list(range(40))


def test_a_new_epoch_that_cannot_be_persisted_writes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    partition_log = open_log(tmp_path / "topic-0")
    partition_log.append_as_leader(values_batch(0, 10), leader_epoch=1)

    def full_disk(path: Path, entries: Any) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(checkpoint, "write_epochs", full_disk)
    with pytest.raises(KafkaStorageError):
        partition_log.append_as_leader(values_batch(10, 10), leader_epoch=2)
    assert partition_log.epoch_cache.entries == [(1, 0)]
    assert partition_log.log_end_offset == 10
    monkeypatch.undo()
    partition_log.append_as_leader(values_batch(10, 10), leader_epoch=2)
    assert partition_log.epoch_cache.entries == [(1, 0), (2, 10)]


def test_an_io_error_takes_the_log_directory_offline(
        tmp_path: Path, torn_writes: Callable[[int], TornWrites], caplog: pytest.LogCaptureFixture) -> None:
    manager = LogManager([tmp_path / "data"], LogConfig(), clock=FakeClock())
    manager.start()
    failing = manager.get_or_create("topic", 0)
    neighbour = manager.get_or_create("other", 0)
    failing.append_as_leader(values_batch(0, 10), leader_epoch=0)
    neighbour.append_as_leader(values_batch(0, 10), leader_epoch=0)
    size = failing.active_segment.size
    writes = torn_writes(errno.EIO)
    writes.armed = True
    with caplog.at_level(logging.ERROR, logger="kafkalite.storage"):
        with pytest.raises(LogDirOfflineError):
            failing.append_as_leader(values_batch(10, 10), leader_epoch=0)
        writes.armed = False
        # The whole directory is offline: no appends, no reads, for every log in it.
        for partition_log in (failing, neighbour):
            with pytest.raises(LogDirOfflineError):
                partition_log.append_as_leader(values_batch(10, 10), leader_epoch=0)
            with pytest.raises(LogDirOfflineError):
                partition_log.read(0, 1024)
    assert _file_size(failing.active_segment.log_path) == size  # rolled back all the same
    assert list(manager.offline_dirs) == [tmp_path / "data"]
    errors = [record for record in caplog.records if record.levelno >= logging.ERROR]
    assert len(errors) == 1 and "offline" in errors[0].getMessage() and errors[0].exc_info is None
    with pytest.raises(LogDirOfflineError):
        manager.get_or_create("third", 0)  # no online directory left for a new log
    assert manager.checkpoint_all() is False
    manager.shutdown()
    assert not (tmp_path / "data" / files.CLEAN_SHUTDOWN_MARKER).exists()  # recovered on the next start
    reopened = LogManager([tmp_path / "data"], LogConfig(), clock=FakeClock())
    reopened.start()
    for name in ("topic", "other"):
        reopened_log = reopened.get(name, 0)
        assert reopened_log is not None and read_all(reopened_log) == list(range(10))
    reopened.shutdown()


def test_a_rollback_that_fails_takes_the_log_offline(
        tmp_path: Path, torn_writes: Callable[[int], TornWrites], monkeypatch: pytest.MonkeyPatch) -> None:
    partition_log = open_log(tmp_path / "topic-0")
    partition_log.append_as_leader(values_batch(0, 10), leader_epoch=0)
    writes = torn_writes(errno.ENOSPC)
    writes.armed = True

    def failing_ftruncate(fd: int, length: int) -> None:
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(os, "ftruncate", failing_ftruncate)
    with pytest.raises(LogDirOfflineError):
        partition_log.append_as_leader(values_batch(10, 10), leader_epoch=0)
    monkeypatch.setattr(os, "ftruncate", _REAL_FTRUNCATE)
    writes.armed = False
    assert partition_log.offline_reason is not None and "rollback" in partition_log.offline_reason
    with pytest.raises(LogDirOfflineError):
        partition_log.append_as_leader(values_batch(10, 10), leader_epoch=0)


def test_a_segment_never_rolls_over_bytes_past_its_end(tmp_path: Path) -> None:
    clock = FakeClock()
    partition_log = open_log(tmp_path / "topic-0", clock, segment_ms=1000)
    partition_log.append_as_leader(values_batch(0, 10), leader_epoch=0)
    segment = partition_log.active_segment
    with open(segment.log_path, "ab") as handle:
        handle.write(b"\x00" * 57)  # stray bytes past the logical end
    clock.advance(1001)
    partition_log.append_as_leader(values_batch(10, 10), leader_epoch=0)
    assert len(partition_log.segments) == 2
    assert _file_size(segment.log_path) == segment.size
    recovered = PartitionLog(partition_log.directory, "topic", 0, partition_log.config, clock, clean_shutdown=False)
    assert read_all(recovered) == list(range(20))


def test_failed_checkpoints_keep_the_old_file_and_are_logged_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    directory = tmp_path / "data"
    manager = LogManager([directory], LogConfig(), clock=FakeClock())
    manager.start()
    partition_log = manager.get_or_create("topic", 0)
    partition_log.append_as_leader(values_batch(0, 10), leader_epoch=0)
    partition_log.update_high_watermark(5)
    assert manager.checkpoint_all() is True
    path = directory / files.REPLICATION_CHECKPOINT
    assert checkpoint.read_offsets(path) == {("topic", 0): 5}
    partition_log.update_high_watermark(10)

    real_fsync = os.fsync

    def full_disk_fsync(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full_disk_fsync)
    with caplog.at_level(logging.DEBUG, logger="kafkalite.storage"):
        assert manager.checkpoint_all() is False
        assert manager.checkpoint_all() is False
        monkeypatch.setattr(os, "fsync", real_fsync)
        assert manager.checkpoint_all() is True
    assert checkpoint.read_offsets(path) == {("topic", 0): 10}
    assert not list(directory.glob("*.tmp"))
    warnings = [record for record in caplog.records if record.levelno == logging.WARNING]
    infos = [record for record in caplog.records if record.levelno == logging.INFO and "again" in record.getMessage()]
    assert len(warnings) == 1 and warnings[0].exc_info is None
    assert len(infos) == 1
    manager.shutdown()


def test_recovery_says_which_offsets_it_drops_after_a_damaged_segment(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    directory = tmp_path / "topic-0"
    partition_log = open_log(directory, segment_bytes=2048)
    for start in range(0, 600, 10):
        partition_log.append_as_leader(values_batch(start, 10), leader_epoch=0)
    second = partition_log.segments[1]
    later = [segment.base_offset for segment in partition_log.segments[2:]]
    corrupt_at = second.position_of(second.base_offset + 25)
    assert corrupt_at is not None and later
    partition_log.close()
    with open(second.log_path, "r+b") as handle:
        handle.seek(corrupt_at + 70)
        byte = handle.read(1)
        handle.seek(corrupt_at + 70)
        handle.write(bytes([byte[0] ^ 0xFF]))
    with caplog.at_level(logging.WARNING, logger="kafkalite.storage"):
        reopened = open_log(directory, clean=False, segment_bytes=2048)
    valid_end = second.base_offset + 20
    assert reopened.log_end_offset == valid_end
    drops = [record.getMessage() for record in caplog.records if "drops" in record.getMessage()]
    assert len(drops) == 1
    assert f"offsets {valid_end}..599" in drops[0]
    assert f"{len(later)} segment(s) {', '.join(map(str, later))}" in drops[0]


def test_a_log_that_cannot_be_created_is_a_storage_error_and_can_be_retried(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    manager = LogManager([tmp_path / "data"], LogConfig(), clock=FakeClock())
    manager.start()
    real_open = os.open
    calls = 0

    def full_disk_open(path: Any, flags: int, mode: int = 0o777, **kwargs: Any) -> int:
        nonlocal calls
        calls += 1
        if calls == 2:  # the log file was created, its index cannot be
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_open(path, flags, mode, **kwargs)

    monkeypatch.setattr(os, "open", full_disk_open)
    with pytest.raises(KafkaStorageError):
        manager.get_or_create("topic", 0)
    monkeypatch.undo()
    assert manager.get("topic", 0) is None
    created = manager.get_or_create("topic", 0)
    created.append_as_leader(values_batch(0, 10), leader_epoch=0)
    assert read_all(created) == list(range(10))
    manager.shutdown()


@pytest.mark.parametrize("error", [errno.EMFILE, errno.ENFILE])
def test_a_roll_at_the_open_files_limit_is_undone_and_the_log_stays_online(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, error: int) -> None:
    partition_log = open_log(tmp_path / "topic-0", segment_bytes=1024)
    batch_size = len(values_batch(0, 10))
    while partition_log.active_segment.size + batch_size <= 1024:  # the next append must roll
        partition_log.append_as_leader(values_batch(partition_log.log_end_offset, 10), leader_epoch=0)
    end, segments = partition_log.log_end_offset, len(partition_log.segments)
    real_open = os.open

    def open_at_the_limit(path: Any, flags: int, *args: Any) -> int:
        if str(path).endswith(files.LOG_SUFFIX):  # a new segment's log file: no descriptor left
            raise OSError(error, os.strerror(error), str(path))
        return real_open(path, flags, *args)

    monkeypatch.setattr(os, "open", open_at_the_limit)
    with pytest.raises(KafkaStorageError, match=os.strerror(error)) as raised:
        partition_log.append_as_leader(values_batch(end, 10), leader_epoch=0)
    assert not isinstance(raised.value, LogDirOfflineError)
    assert partition_log.offline_reason is None
    assert (partition_log.log_end_offset, len(partition_log.segments)) == (end, segments)
    monkeypatch.setattr(os, "open", real_open)  # descriptors were closed: the roll and the append go through
    partition_log.append_as_leader(values_batch(end, 10), leader_epoch=0)
    assert len(partition_log.segments) == segments + 1
    assert read_all(partition_log) == list(range(end + 10))
    partition_log.close()


def test_an_index_write_at_the_open_files_limit_is_undone_and_the_log_stays_online(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    partition_log = open_log(tmp_path / "topic-0", index_interval_bytes=100)
    for start in range(0, 30, 10):
        partition_log.append_as_leader(values_batch(start, 10), leader_epoch=0)
    segment = partition_log.active_segment
    entries = len(segment.index)
    assert entries > 0 and _file_size(segment.index.path) == entries * 8
    real_open = os.open

    def open_at_the_limit(path: Any, flags: int, *args: Any) -> int:
        if str(path).endswith(files.INDEX_SUFFIX):  # the index entry's write: no descriptor left
            raise OSError(errno.EMFILE, os.strerror(errno.EMFILE), str(path))
        return real_open(path, flags, *args)

    monkeypatch.setattr(os, "open", open_at_the_limit)
    with pytest.raises(KafkaStorageError, match=os.strerror(errno.EMFILE)) as raised:
        partition_log.append_as_leader(values_batch(30, 10), leader_epoch=0)
    assert not isinstance(raised.value, LogDirOfflineError)
    assert partition_log.offline_reason is None and partition_log.log_end_offset == 30
    assert len(segment.index) == entries and _file_size(segment.index.path) == entries * 8
    monkeypatch.setattr(os, "open", real_open)
    partition_log.append_as_leader(values_batch(30, 10), leader_epoch=0)
    assert read_all(partition_log) == list(range(40))
    partition_log.close()


def test_indexes_hold_no_open_descriptor(tmp_path: Path) -> None:
    partition_log = open_log(tmp_path / "topic-0", index_interval_bytes=100)
    for start in range(0, 100, 10):
        partition_log.append_as_leader(values_batch(start, 10), leader_epoch=0)
    held = {os.readlink(f"/proc/self/fd/{fd}") for fd in os.listdir("/proc/self/fd")
            if os.path.exists(f"/proc/self/fd/{fd}")}
    segment = partition_log.active_segment
    assert str(segment.log_path) in held
    assert str(segment.index.path) not in held and str(segment.time_index.path) not in held
    partition_log.close()


WRITE_EPOCHS = checkpoint.write_epochs


def counted_epoch_writes(monkeypatch: pytest.MonkeyPatch) -> list[list[tuple[int, int]]]:
    """Every leader-epoch file write from now on, by its entries (the writes still happen)."""
    writes: list[list[tuple[int, int]]] = []

    def counted(path: Path, entries: Any) -> None:
        writes.append(list(entries))
        WRITE_EPOCHS(path, entries)

    monkeypatch.setattr(checkpoint, "write_epochs", counted)
    return writes


def test_an_epoch_taken_in_office_is_written_before_its_first_batch_not_when_taken(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    partition_log = open_log(tmp_path / "topic-0")
    partition_log.append_as_leader(values_batch(0, 10), leader_epoch=1)
    epochs_file = tmp_path / "topic-0" / files.LEADER_EPOCH_CHECKPOINT
    writes = counted_epoch_writes(monkeypatch)
    partition_log.record_leader_epoch(2)  # a leader taking office: memory only
    assert partition_log.epoch_cache.entries == [(1, 0), (2, 10)] and writes == []
    assert checkpoint.read_epochs(epochs_file) == [(1, 0)]

    def full_disk(path: Path, entries: Any) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(checkpoint, "write_epochs", full_disk)
    with pytest.raises(KafkaStorageError):  # the batch of epoch 2 may not land before its epoch
        partition_log.append_as_leader(values_batch(10, 5), leader_epoch=2)
    assert partition_log.log_end_offset == 10 and partition_log.epoch_cache.unsynced
    writes = counted_epoch_writes(monkeypatch)
    partition_log.append_as_leader(values_batch(10, 5), leader_epoch=2)
    assert writes == [[(1, 0), (2, 10)]]
    assert checkpoint.read_epochs(epochs_file) == [(1, 0), (2, 10)] and not partition_log.epoch_cache.unsynced


def test_the_checkpoint_job_writes_epochs_taken_in_office_and_retries_a_failed_write(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    manager = LogManager([tmp_path / "data"], LogConfig(), clock=FakeClock())
    manager.start()
    logs = [manager.get_or_create("topic", number) for number in range(3)]
    for partition_log in logs[:2]:
        partition_log.record_leader_epoch(4)
    failing = {logs[0].directory / files.LEADER_EPOCH_CHECKPOINT}

    def sometimes_full(path: Path, entries: Any) -> None:
        if path in failing:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        WRITE_EPOCHS(path, entries)

    monkeypatch.setattr(checkpoint, "write_epochs", sometimes_full)
    manager.checkpoint_all()
    assert checkpoint.read_epochs(logs[1].directory / files.LEADER_EPOCH_CHECKPOINT) == [(4, 0)]
    assert not (logs[0].directory / files.LEADER_EPOCH_CHECKPOINT).exists()
    assert not (logs[2].directory / files.LEADER_EPOCH_CHECKPOINT).exists()  # nothing in memory only
    failing.clear()
    manager.checkpoint_all()
    assert checkpoint.read_epochs(logs[0].directory / files.LEADER_EPOCH_CHECKPOINT) == [(4, 0)]
    logs[2].record_leader_epoch(1)
    manager.shutdown()  # closing writes what is left
    assert checkpoint.read_epochs(logs[2].directory / files.LEADER_EPOCH_CHECKPOINT) == [(1, 0)]


def test_opening_a_log_writes_no_epoch_file_and_its_first_batch_drops_stale_entries(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    partition_log = open_log(tmp_path / "topic-0")
    partition_log.append_as_leader(values_batch(0, 10), leader_epoch=1)
    partition_log.record_leader_epoch(2)  # took office at offset 10, appended nothing
    partition_log.close()
    epochs_file = tmp_path / "topic-0" / files.LEADER_EPOCH_CHECKPOINT
    assert checkpoint.read_epochs(epochs_file) == [(1, 0), (2, 10)]
    writes = counted_epoch_writes(monkeypatch)
    reopened = open_log(tmp_path / "topic-0")
    assert reopened.epoch_cache.entries == [(1, 0)] and writes == []  # dropped in memory only
    reopened.close()
    assert writes == [] and checkpoint.read_epochs(epochs_file) == [(1, 0), (2, 10)]

    again = open_log(tmp_path / "topic-0")
    again.append_as_leader(values_batch(10, 5), leader_epoch=1)  # the log grows past offset 10
    assert writes == [[(1, 0)]]  # the file was written before the batch: epoch 2 never began at 10
    assert checkpoint.read_epochs(epochs_file) == [(1, 0)]
