"""All partition logs of one broker, across its log directories (``log.dirs``).

:class:`LogManager` opens every partition directory at start (recovering those that were not
shut down cleanly, per the recovery-point checkpoint and the clean-shutdown marker), creates
and deletes logs, and offers the periodic jobs as plain synchronous methods — retention,
flushing, checkpointing, compaction — that the broker schedules on worker threads. It writes
the per-directory checkpoints: ``recovery-point-offset-checkpoint``,
``replication-offset-checkpoint`` (high watermarks), ``log-start-offset-checkpoint`` and
``cleaner-offset-checkpoint``.

A deleted log's directory is first renamed ``<topic>-<partition>.<uuid>-delete`` (so it can
never be reopened as a live log) and then removed.

Concurrency: the table of logs is guarded by a lock; each PartitionLog guards itself. Every
method may block on disk and belongs on a worker thread except :meth:`get`.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import uuid
from pathlib import Path
from typing import Callable, Mapping

from kafkalite.config import LogConfig
from kafkalite.errors import StorageError
from kafkalite.storage import checkpoint, cleaner, files
from kafkalite.storage.log import Clock, PartitionLog, wall_clock_ms

log = logging.getLogger(__name__)

TopicPartitionKey = tuple[str, int]


class LogManager:
    """Owns every PartitionLog of a broker. See the module docstring."""

    def __init__(self, log_dirs: list[Path], default_config: LogConfig,
                 topic_configs: Callable[[str], Mapping[str, str]] | None = None,
                 clock: Clock = wall_clock_ms) -> None:
        if not log_dirs:
            raise StorageError("at least one log directory is needed")
        self.log_dirs = [Path(directory) for directory in log_dirs]
        self.default_config = default_config
        self._topic_configs = topic_configs or (lambda topic: {})
        self.clock = clock
        self._lock = threading.RLock()
        self.logs: dict[TopicPartitionKey, PartitionLog] = {}
        self._cleaner_checkpoints: dict[TopicPartitionKey, int] = {}
        self.started = False

    # -- start and stop -----------------------------------------------------------------------
    def start(self) -> None:
        """Open every log found in the log directories (blocking; recovery may read a lot)."""
        for directory in self.log_dirs:
            directory.mkdir(parents=True, exist_ok=True)
            marker = directory / files.CLEAN_SHUTDOWN_MARKER
            clean_shutdown = marker.exists()
            recovery_points = self._read_checkpoint(directory / files.RECOVERY_POINT_CHECKPOINT)
            high_watermarks = self._read_checkpoint(directory / files.REPLICATION_CHECKPOINT)
            start_offsets = self._read_checkpoint(directory / files.LOG_START_CHECKPOINT)
            self._cleaner_checkpoints.update(self._read_checkpoint(directory / files.CLEANER_CHECKPOINT))
            for entry in sorted(os.listdir(directory)):
                path = directory / entry
                if not path.is_dir():
                    continue
                if entry.endswith(files.DELETE_DIR_SUFFIX):
                    shutil.rmtree(path, ignore_errors=True)
                    continue
                parsed = files.parse_partition_dir(entry)
                if parsed is None:
                    continue
                topic, partition = parsed
                self.logs[parsed] = PartitionLog(
                    path, topic, partition, self.config_for(topic), self.clock,
                    recovery_point=recovery_points.get(parsed, 0),
                    log_start_offset=start_offsets.get(parsed, 0),
                    high_watermark=high_watermarks.get(parsed, 0),
                    clean_shutdown=clean_shutdown,
                )
            marker.unlink(missing_ok=True)
            files.fsync_directory(directory)
        self.started = True
        log.info("loaded %d partition logs from %s", len(self.logs), ", ".join(map(str, self.log_dirs)))

    def shutdown(self) -> None:
        """Flush and close every log, write checkpoints and the clean-shutdown markers."""
        with self._lock:
            logs = list(self.logs.values())
        for partition_log in logs:
            partition_log.close()
        self.checkpoint_all()
        for directory in self.log_dirs:
            (directory / files.CLEAN_SHUTDOWN_MARKER).touch()
            files.fsync_directory(directory)
        self.started = False

    @staticmethod
    def _read_checkpoint(path: Path) -> dict[TopicPartitionKey, int]:
        try:
            return checkpoint.read_offsets(path)
        except StorageError as exc:
            log.warning("ignoring damaged checkpoint: %s", exc)
            return {}

    # -- logs ---------------------------------------------------------------------------------
    def config_for(self, topic: str) -> LogConfig:
        return self.default_config.with_overrides(self._topic_configs(topic))

    def get(self, topic: str, partition: int) -> PartitionLog | None:
        return self.logs.get((topic, partition))

    def get_or_create(self, topic: str, partition: int, config: LogConfig | None = None) -> PartitionLog:
        key = (topic, partition)
        with self._lock:
            existing = self.logs.get(key)
            if existing is not None:
                return existing
            problem = files.topic_name_problem(topic)
            if problem:
                raise StorageError(problem)
            directory = self._least_loaded_dir() / files.partition_dir_name(topic, partition)
            partition_log = PartitionLog(directory, topic, partition, config or self.config_for(topic), self.clock,
                                         clean_shutdown=True)
            self.logs[key] = partition_log
            return partition_log

    def _least_loaded_dir(self) -> Path:
        counts = {directory: 0 for directory in self.log_dirs}
        for partition_log in self.logs.values():
            parent = partition_log.directory.parent
            if parent in counts:
                counts[parent] += 1
        return min(self.log_dirs, key=lambda directory: counts[directory])

    def update_config(self, topic: str) -> None:
        """Re-read a topic's overrides and apply them to its open logs."""
        config = self.config_for(topic)
        with self._lock:
            for (log_topic, _partition), partition_log in self.logs.items():
                if log_topic == topic:
                    partition_log.config = config

    def delete(self, topic: str, partition: int) -> bool:
        """Remove a partition's log for good; returns False when there was none."""
        key = (topic, partition)
        with self._lock:
            partition_log = self.logs.pop(key, None)
            self._cleaner_checkpoints.pop(key, None)
        if partition_log is None:
            return False
        with partition_log.lock:
            for segment in partition_log.segments:
                segment.close()
            partition_log.closed = True
        doomed = partition_log.directory.with_name(
            f"{partition_log.directory.name}.{uuid.uuid4().hex}{files.DELETE_DIR_SUFFIX}")
        os.replace(partition_log.directory, doomed)
        files.fsync_directory(doomed.parent)
        shutil.rmtree(doomed, ignore_errors=True)
        return True

    # -- periodic jobs ------------------------------------------------------------------------
    def run_retention(self) -> int:
        """Apply retention to every log and unlink expired ``.deleted`` files; returns segments removed."""
        removed = 0
        for partition_log in list(self.logs.values()):
            if partition_log.closed:
                continue
            removed += partition_log.delete_old_segments()
            partition_log.delete_expired_files()
        return removed

    def flush_due_logs(self) -> int:
        flushed = 0
        for partition_log in list(self.logs.values()):
            if not partition_log.closed and partition_log.flush_due():
                partition_log.flush()
                flushed += 1
        return flushed

    def run_cleaner(self, force: bool = False) -> list[tuple[TopicPartitionKey, cleaner.CleanResult]]:
        """One compaction pass over every compacted log that qualifies."""
        results = []
        for key, partition_log in list(self.logs.items()):
            if partition_log.closed or not partition_log.config.compact:
                continue
            result = cleaner.clean(partition_log, self._cleaner_checkpoints.get(key, 0), force=force)
            if result.cleaned:
                self._cleaner_checkpoints[key] = result.new_checkpoint
                results.append((key, result))
        if results:
            self.checkpoint_all()
        return results

    def checkpoint_all(self) -> None:
        """Write every per-directory checkpoint file."""
        with self._lock:
            logs = dict(self.logs)
        for directory in self.log_dirs:
            mine = {key: partition_log for key, partition_log in logs.items()
                    if partition_log.directory.parent == directory}
            checkpoint.write_offsets(directory / files.RECOVERY_POINT_CHECKPOINT,
                                     {key: plog.recovery_point for key, plog in mine.items()})
            checkpoint.write_offsets(directory / files.REPLICATION_CHECKPOINT,
                                     {key: plog.high_watermark for key, plog in mine.items()})
            checkpoint.write_offsets(directory / files.LOG_START_CHECKPOINT,
                                     {key: plog.log_start_offset for key, plog in mine.items()})
            checkpoint.write_offsets(directory / files.CLEANER_CHECKPOINT,
                                     {key: offset for key, offset in self._cleaner_checkpoints.items()
                                      if key in mine})
