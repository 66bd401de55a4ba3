"""DeleteRecords in the storage layer: the log start offset moves, whole segments below it go,
and the log-start-offset-checkpoint carries the move over a restart, clean or not."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from kafkalite.config import LogConfig
from kafkalite.errors import OffsetOutOfRangeError
from kafkalite.storage import checkpoint, files
from kafkalite.storage.manager import LogManager
from tests.unit.test_log import FakeClock, open_log, read_all, values_batch


def _segment_logs(directory: Path) -> list[str]:
    return sorted(path.name for path in directory.iterdir() if path.name.endswith(files.LOG_SUFFIX))


def test_log_start_moves_and_whole_segments_below_it_are_deleted(tmp_path: Path) -> None:
    clock = FakeClock()
    partition_log = open_log(tmp_path / "topic-0", clock, segment_bytes=1024)
    for start in range(0, 100, 5):
        partition_log.append_as_leader(values_batch(start, 5), leader_epoch=0)
    partition_log.update_high_watermark(100)
    bases = [segment.base_offset for segment in partition_log.segments]
    assert len(bases) > 3
    target = bases[2] + 2  # inside the third segment

    assert partition_log.delete_records_before(target) == target
    assert partition_log.log_start_offset == target
    with pytest.raises(OffsetOutOfRangeError):
        partition_log.read(target - 1, 1024)
    assert partition_log.delete_segments_below_start() == 2
    assert [segment.base_offset for segment in partition_log.segments] == bases[2:]
    assert partition_log.log_start_offset == target  # a segment boundary below it does not lower it
    clock.advance(partition_log.config.file_delete_delay_ms)
    assert partition_log.delete_expired_files() == 2
    assert _segment_logs(tmp_path / "topic-0") == [f"{base:020d}.log" for base in bases[2:]]
    assert read_all(partition_log, target) == list(range(target, 100))
    assert partition_log.delete_records_before(3) == target  # never moves backwards


def test_delete_records_refuses_offsets_beyond_the_high_watermark(tmp_path: Path) -> None:
    partition_log = open_log(tmp_path / "topic-0")
    partition_log.append_as_leader(values_batch(0, 10), leader_epoch=0)
    partition_log.update_high_watermark(6)
    with pytest.raises(OffsetOutOfRangeError, match="high watermark 6"):
        partition_log.delete_records_before(7)
    assert partition_log.log_start_offset == 0
    assert partition_log.delete_records_before(6) == 6


def test_deleting_everything_rolls_and_the_log_continues_at_the_same_offset(tmp_path: Path) -> None:
    clock = FakeClock()
    partition_log = open_log(tmp_path / "topic-0", clock)
    partition_log.append_as_leader(values_batch(0, 10), leader_epoch=0)
    partition_log.update_high_watermark(10)
    partition_log.delete_records_before(10)
    assert partition_log.delete_segments_below_start() == 1
    assert [segment.base_offset for segment in partition_log.segments] == [10]
    assert partition_log.log_start_offset == partition_log.log_end_offset == 10
    partition_log.append_as_leader(values_batch(10, 1), leader_epoch=1)
    assert read_all(partition_log, 10) == [10]


def test_epochs_below_the_log_start_are_forgotten(tmp_path: Path) -> None:
    partition_log = open_log(tmp_path / "topic-0", segment_bytes=1024)
    for epoch, start in enumerate(range(0, 60, 20)):
        partition_log.epoch_cache.assign(epoch, start)
        for offset in range(start, start + 20, 5):
            partition_log.append_as_leader(values_batch(offset, 5), leader_epoch=epoch)
    partition_log.update_high_watermark(60)
    partition_log.delete_records_before(45)
    partition_log.delete_segments_below_start()
    assert partition_log.epoch_cache.entries == [(2, 45)]


def test_the_checkpoint_keeps_the_log_start_over_a_clean_restart(tmp_path: Path) -> None:
    manager = LogManager([tmp_path / "logs"], LogConfig().with_overrides({"segment.bytes": "1024"}))
    manager.start()
    partition_log = manager.get_or_create("orders", 0)
    for start in range(0, 100, 5):
        partition_log.append_as_leader(values_batch(start, 5), leader_epoch=0)
    partition_log.update_high_watermark(100)
    partition_log.delete_records_before(40)
    partition_log.delete_segments_below_start()
    manager.checkpoint_log_start_offsets(partition_log)
    assert checkpoint.read_offsets(tmp_path / "logs" / files.LOG_START_CHECKPOINT) == {("orders", 0): 40}
    manager.shutdown()

    again = LogManager([tmp_path / "logs"], LogConfig().with_overrides({"segment.bytes": "1024"}))
    again.start()
    reopened = again.get("orders", 0)
    assert reopened is not None
    assert reopened.log_start_offset == 40
    assert reopened.segments[0].base_offset <= 40
    assert read_all(reopened, 40) == list(range(40, 100))
    with pytest.raises(OffsetOutOfRangeError):
        reopened.read(39, 1024)
    again.shutdown()


_CRASHER = """
import os, signal, sys
from pathlib import Path
from kafkalite.config import LogConfig
from kafkalite.storage.manager import LogManager
from tests.unit.test_log import values_batch

manager = LogManager([Path(sys.argv[1])], LogConfig().with_overrides({"segment.bytes": "1024"}))
manager.start()
partition_log = manager.get_or_create("orders", 0)
for start in range(0, 100, 5):
    partition_log.append_as_leader(values_batch(start, 5), leader_epoch=0)
partition_log.flush()
partition_log.update_high_watermark(100)
partition_log.delete_records_before(37)
partition_log.delete_segments_below_start()
manager.checkpoint_log_start_offsets(partition_log)
os.kill(os.getpid(), signal.SIGKILL)  # no shutdown, no clean-shutdown marker, no other checkpoint
"""


def test_the_checkpoint_keeps_the_log_start_over_a_crash(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parents[2]
    process = subprocess.run([sys.executable, "-c", _CRASHER, str(tmp_path / "logs")], cwd=root, timeout=60,
                             env={**os.environ, "PYTHONPATH": str(root)}, capture_output=True)
    assert process.returncode == -signal.SIGKILL, process.stderr.decode()
    assert not (tmp_path / "logs" / files.CLEAN_SHUTDOWN_MARKER).exists()
    manager = LogManager([tmp_path / "logs"], LogConfig().with_overrides({"segment.bytes": "1024"}))
    manager.start()
    reopened = manager.get("orders", 0)
    assert reopened is not None
    assert (reopened.log_start_offset, reopened.log_end_offset) == (37, 100)
    with pytest.raises(OffsetOutOfRangeError):
        reopened.read(36, 1024)
    manager.shutdown()
