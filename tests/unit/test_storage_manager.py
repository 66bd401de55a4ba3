"""LogManager, checkpoint files and the leader epoch cache."""

from __future__ import annotations

from pathlib import Path

import pytest

from kafkalite.config import LogConfig
from kafkalite.errors import StorageError
from kafkalite.storage import checkpoint, cleaner, files
from kafkalite.storage.epochs import LeaderEpochCache
from kafkalite.storage.log import PartitionLog
from kafkalite.storage.manager import LogManager
from tests.unit.test_log import FakeClock, read_all, values_batch


def test_offsets_checkpoint_round_trip_and_format(tmp_path: Path) -> None:
    path = tmp_path / "recovery-point-offset-checkpoint"
    checkpoint.write_offsets(path, {("orders", 1): 42, ("my-topic", 0): 7})
    assert path.read_text() == "0\n2\nmy-topic 0 7\norders 1 42\n"
    assert checkpoint.read_offsets(path) == {("orders", 1): 42, ("my-topic", 0): 7}
    assert checkpoint.read_offsets(tmp_path / "missing") == {}


@pytest.mark.parametrize("text", ["", "1\n0\n", "0\n2\nt 0 1\n", "0\n1\nt x 1\n", "0\n1\nt 0\n"])
def test_malformed_checkpoint_is_a_storage_error(tmp_path: Path, text: str) -> None:
    path = tmp_path / "checkpoint"
    path.write_text(text)
    with pytest.raises(StorageError):
        checkpoint.read_offsets(path)


def test_epoch_cache_answers_end_offsets_like_kafka(tmp_path: Path) -> None:
    cache = LeaderEpochCache(tmp_path / files.LEADER_EPOCH_CHECKPOINT)
    cache.assign(1, 0)
    cache.assign(2, 100)
    cache.assign(2, 150)  # not newer: ignored
    cache.assign(5, 300)
    assert cache.entries == [(1, 0), (2, 100), (5, 300)]
    assert cache.end_offset_for(5, 420) == (5, 420)
    assert cache.end_offset_for(2, 420) == (2, 300)
    assert cache.end_offset_for(3, 420) == (2, 300)  # largest known epoch <= 3 is 2
    assert cache.end_offset_for(0, 420) == (0, 0)  # below every epoch: where the first starts
    assert cache.end_offset_for(6, 420) == (-1, -1)  # newer than the leader knows: undefined
    assert cache.epoch_for_offset(299) == 2
    reloaded = LeaderEpochCache(tmp_path / files.LEADER_EPOCH_CHECKPOINT)
    assert reloaded.entries == cache.entries
    cache.truncate_from_end(200)
    assert cache.entries == [(1, 0), (2, 100)]
    cache.truncate_from_start(120)
    assert cache.entries == [(2, 120)]


def test_manager_reopens_logs_and_checkpoints(tmp_path: Path) -> None:
    clock = FakeClock()
    manager = LogManager([tmp_path / "a", tmp_path / "b"], LogConfig(), clock=clock)
    manager.start()
    logs = [manager.get_or_create("orders", partition) for partition in range(4)]
    assert {log.directory.parent for log in logs} == {tmp_path / "a", tmp_path / "b"}
    for partition_log in logs:
        partition_log.append_as_leader(values_batch(0, 10), leader_epoch=0)
        partition_log.update_high_watermark(7)
    manager.shutdown()
    assert (tmp_path / "a" / files.CLEAN_SHUTDOWN_MARKER).exists()
    assert checkpoint.read_offsets(tmp_path / "a" / files.REPLICATION_CHECKPOINT)
    again = LogManager([tmp_path / "a", tmp_path / "b"], LogConfig(), clock=clock)
    again.start()
    assert not (tmp_path / "a" / files.CLEAN_SHUTDOWN_MARKER).exists()
    assert sorted(again.logs) == [("orders", partition) for partition in range(4)]
    for partition_log in again.logs.values():
        assert partition_log.log_end_offset == 10
        assert partition_log.high_watermark == 7
        assert partition_log.recovery_point == 10
        assert read_all(partition_log) == list(range(10))


def test_manager_delete_removes_the_directory(tmp_path: Path) -> None:
    manager = LogManager([tmp_path], LogConfig())
    manager.start()
    partition_log = manager.get_or_create("doomed", 0)
    partition_log.append_as_leader(values_batch(0, 1), leader_epoch=0)
    assert manager.delete("doomed", 0)
    assert not any(path.name.startswith("doomed") for path in tmp_path.iterdir())
    assert manager.get("doomed", 0) is None
    assert not manager.delete("doomed", 0)


def test_manager_refuses_illegal_topic_names(tmp_path: Path) -> None:
    manager = LogManager([tmp_path], LogConfig())
    manager.start()
    for name in ("", "..", "a/b", "x" * 250, "spaces here"):
        with pytest.raises(StorageError):
            manager.get_or_create(name, 0)


def test_topic_overrides_apply_to_logs(tmp_path: Path) -> None:
    overrides = {"compacted": {"cleanup.policy": "compact", "segment.bytes": "1024"}}
    manager = LogManager([tmp_path], LogConfig(), topic_configs=lambda topic: overrides.get(topic, {}))
    manager.start()
    assert manager.get_or_create("compacted", 0).config.compact
    assert not manager.get_or_create("plain", 0).config.compact
    overrides["plain"] = {"retention.ms": "5"}
    manager.update_config("plain")
    assert manager.get("plain", 0).config.retention_ms == 5  # type: ignore[union-attr]


def test_manager_retention_and_cleaner_jobs(tmp_path: Path) -> None:
    clock = FakeClock()
    overrides = {"short": {"retention.ms": "1000", "segment.bytes": "1024", "file.delete.delay.ms": "0"},
                 "keyed": {"cleanup.policy": "compact", "segment.bytes": "1024"}}
    manager = LogManager([tmp_path], LogConfig(), topic_configs=lambda topic: overrides.get(topic, {}), clock=clock)
    manager.start()
    short = manager.get_or_create("short", 0)
    for start in range(0, 100, 10):
        short.append_as_leader(values_batch(start, 10, timestamp=clock.now), leader_epoch=0)
    short.update_high_watermark(short.log_end_offset)
    clock.advance(5_000)
    assert manager.run_retention() > 0
    assert short.log_start_offset > 0
    from kafkalite.record.batch import build_batch
    keyed = manager.get_or_create("keyed", 0)
    for index in range(40):
        keyed.append_as_leader(build_batch([b"v%d" % index], keys=[b"k%d" % (index % 3)], timestamps=1), leader_epoch=0)
    keyed.update_high_watermark(keyed.log_end_offset)
    results = manager.run_cleaner()
    assert [key for key, _ in results] == [("keyed", 0)]
    assert checkpoint.read_offsets(tmp_path / files.CLEANER_CHECKPOINT)[("keyed", 0)] > 0


def test_checkpoints_are_written_when_an_offset_moved_and_only_then(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    manager = LogManager([tmp_path], LogConfig(), clock=FakeClock())
    manager.start()
    partition_log = manager.get_or_create("orders", 0)
    partition_log.append_as_leader(values_batch(0, 10), leader_epoch=0)
    writes: list[str] = []
    real_write = checkpoint.write_offsets

    def counted(path: Path, offsets: dict[tuple[str, int], int]) -> None:
        writes.append(path.name)
        real_write(path, offsets)

    monkeypatch.setattr(checkpoint, "write_offsets", counted)
    assert manager.checkpoint_all() is True
    assert len(writes) == 4
    assert manager.checkpoint_all() is True  # nothing moved: nothing written
    assert len(writes) == 4
    partition_log.update_high_watermark(6)
    assert manager.checkpoint_all() is True
    assert len(writes) == 8
    assert checkpoint.read_offsets(tmp_path / files.REPLICATION_CHECKPOINT) == {("orders", 0): 6}
    manager.get_or_create("orders", 1)  # a new log is a change too
    assert manager.checkpoint_all() is True
    assert checkpoint.read_offsets(tmp_path / files.REPLICATION_CHECKPOINT) == {("orders", 0): 6, ("orders", 1): 0}
    manager.shutdown()


def test_an_idle_checkpoint_pass_visits_no_log_and_every_kind_of_change_is_written(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = FakeClock()
    overrides = {"short": {"retention.ms": "1000", "segment.bytes": "1024", "file.delete.delay.ms": "0"}}
    manager = LogManager([tmp_path], LogConfig(), topic_configs=lambda topic: overrides.get(topic, {}), clock=clock)
    manager.start()
    orders = manager.get_or_create("orders", 0)
    short = manager.get_or_create("short", 0)
    passes: list[int] = []
    real_pass = manager._write_checkpoints

    def counted(directory: Path, mine: dict[tuple[str, int], PartitionLog]) -> None:
        passes.append(len(mine))
        real_pass(directory, mine)

    monkeypatch.setattr(manager, "_write_checkpoints", counted)

    def written(name: str) -> dict[tuple[str, int], int]:
        assert manager.checkpoint_all() is True
        return checkpoint.read_offsets(tmp_path / name)

    assert written(files.REPLICATION_CHECKPOINT) == {("orders", 0): 0, ("short", 0): 0} and len(passes) == 1
    assert not manager.checkpoint_due()  # the broker does not even hand the job to a worker
    for _ in range(3):
        assert manager.checkpoint_all() is True
    assert len(passes) == 1  # idle: no pass over the logs at all

    orders.append_as_leader(values_batch(0, 10), leader_epoch=0)
    orders.update_high_watermark(7)
    assert manager.checkpoint_due()
    assert written(files.REPLICATION_CHECKPOINT)[("orders", 0)] == 7
    orders.flush()
    assert written(files.RECOVERY_POINT_CHECKPOINT)[("orders", 0)] == 10
    for start in range(0, 100, 10):
        short.append_as_leader(values_batch(start, 10, timestamp=clock.now), leader_epoch=0)
    short.update_high_watermark(short.log_end_offset)
    clock.advance(5_000)
    assert manager.run_retention() > 0
    assert written(files.LOG_START_CHECKPOINT)[("short", 0)] == short.log_start_offset > 0
    manager.delete("short", 0)
    assert ("short", 0) not in written(files.REPLICATION_CHECKPOINT)
    passes.clear()
    assert manager.checkpoint_all() is True and passes == []  # and idle again
    manager.shutdown()


def test_the_cleaner_cleans_the_logs_compacted_now_after_config_changes_and_deletions(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    overrides: dict[str, dict[str, str]] = {}
    manager = LogManager([tmp_path], LogConfig(), topic_configs=lambda topic: overrides.get(topic, {}))
    manager.start()
    for number in range(50):
        manager.get_or_create("plain", number)
    later = manager.get_or_create("later", 0)
    cleaned: list[str] = []
    real_clean = cleaner.clean

    def counted(partition_log: PartitionLog, *args: object, **kwargs: object) -> object:
        cleaned.append(partition_log.name)
        return real_clean(partition_log, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(cleaner, "clean", counted)
    assert manager.run_cleaner() == [] and cleaned == [] and not manager.has_compacted()
    overrides["later"] = {"cleanup.policy": "compact"}  # a dynamic change counts at once
    manager.update_config("later")
    assert manager.has_compacted()
    manager.run_cleaner()
    assert cleaned == [later.name]
    manager.delete("later", 0)
    cleaned.clear()
    assert manager.run_cleaner() == [] and cleaned == []
    manager.shutdown()


def test_the_flush_job_looks_only_at_logs_with_a_flush_ms(tmp_path: Path) -> None:
    clock = FakeClock()
    overrides: dict[str, dict[str, str]] = {"timed": {"flush.ms": "100"}}
    manager = LogManager([tmp_path], LogConfig(), topic_configs=lambda topic: overrides.get(topic, {}), clock=clock)
    manager.start()
    timed = manager.get_or_create("timed", 0)
    plain = manager.get_or_create("plain", 0)
    for partition_log in (timed, plain):
        partition_log.append_as_leader(values_batch(0, 10), leader_epoch=0)
    clock.advance(1_000)
    assert manager.flush_due_logs() == 1
    assert (timed.recovery_point, plain.recovery_point) == (10, 0)
    overrides["plain"] = {"flush.ms": "100"}  # a dynamic change counts at once
    manager.update_config("plain")
    clock.advance(1_000)
    assert manager.flush_due_logs() == 1
    assert plain.recovery_point == 10
    manager.delete("timed", 0)
    timed_again = manager.get_or_create("timed", 0)
    timed_again.append_as_leader(values_batch(0, 5), leader_epoch=0)
    clock.advance(1_000)
    assert manager.flush_due_logs() == 1
    assert timed_again.recovery_point == 5
    manager.shutdown()


def test_new_logs_go_to_the_directory_holding_fewest(tmp_path: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    manager = LogManager([first, second], LogConfig())
    manager.start()
    logs = [manager.get_or_create("orders", number) for number in range(4)]
    assert sorted(partition_log.directory.parent.name for partition_log in logs) == ["a", "a", "b", "b"]
    gone = next(partition_log for partition_log in logs if partition_log.directory.parent == second)
    manager.delete(gone.topic, gone.partition)
    assert manager.get_or_create("orders", 9).directory.parent == second
    manager.shutdown()
    reopened = LogManager([first, second], LogConfig())
    reopened.start()  # the counts are read back from what is on disk: two logs in each
    reopened.delete("orders", 0)  # in a
    assert reopened.get_or_create("orders", 10).directory.parent == first
    assert reopened.get_or_create("orders", 11).directory.parent == first  # tie: the first directory
    assert reopened.get_or_create("orders", 12).directory.parent == second
    reopened.shutdown()


def test_config_parsing_of_broker_properties() -> None:
    from kafkalite.config import parse_properties
    from kafkalite.errors import ConfigError

    properties = parse_properties("# comment\nlog.retention.hours=1\nlog.segment.bytes = 2048\n"
                                  "log.cleanup.policy: compact,delete\nlong.value=a\\\n  b\n")
    config = LogConfig.from_broker_properties(properties)
    assert config.retention_ms == 3_600_000 and config.segment_bytes == 2048
    assert config.compact and config.delete
    assert properties["long.value"] == "ab"
    with pytest.raises(ConfigError):
        parse_properties("no separator here")
    with pytest.raises(ConfigError):
        LogConfig().with_overrides({"segment.bytes": "lots"})
    with pytest.raises(ConfigError):
        LogConfig().with_overrides({"no.such.config": "1"})
    with pytest.raises(ConfigError):
        LogConfig().with_overrides({"cleanup.policy": "shred"})
