"""All partition logs of one broker, across its log directories (``log.dirs``).

:class:`LogManager` opens every partition directory at start (recovering those that were not
shut down cleanly, per the recovery-point checkpoint and the clean-shutdown marker), creates
and deletes logs, and offers the periodic jobs as plain synchronous methods — retention,
flushing, checkpointing, compaction — that the broker schedules on worker threads. It writes
the per-directory checkpoints: ``recovery-point-offset-checkpoint``,
``replication-offset-checkpoint`` (high watermarks), ``log-start-offset-checkpoint`` and
``cleaner-offset-checkpoint``.

Log directory failures follow Kafka's model: when a log reports an I/O error it could not undo
(see :mod:`kafkalite.storage.log`), :meth:`LogManager.fail_dir` takes its whole log directory
offline — logged at ERROR once, listed in :attr:`LogManager.offline_dirs`, every log in it
refuses appends and reads with LogDirOfflineError, the periodic jobs and checkpoints skip it,
new logs go to the remaining directories — until the broker restarts. A checkpoint write that
fails (a full disk) is retried on the next run: one WARN when a directory's checkpoints start
failing, one INFO when they succeed again.

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
from collections.abc import Callable, Mapping
from pathlib import Path

from kafkalite.config import LogConfig
from kafkalite.errors import KafkaStorageError, LogDirOfflineError, StorageError
from kafkalite.storage import checkpoint, cleaner, files
from kafkalite.storage.log import Clock, PartitionLog, wall_clock_ms
from kafkalite.topics import topic_name_problem

#: ``flush.ms`` that never forces a flush (the default, as Kafka's Long.MAX_VALUE).
NEVER_MS = (1 << 63) - 1

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
        # Log directories taken offline by an I/O error, with the reason (until restart).
        self.offline_dirs: dict[Path, str] = {}
        # Directories whose last checkpoint write failed, with the error (WARN once, INFO after).
        self._checkpoint_failures: dict[Path, str] = {}
        # Serialises checkpoint writers (the periodic job, a DeleteRecords' log-start checkpoint).
        self._checkpoint_lock = threading.Lock()
        # What the last checkpoint write of each directory wrote (its four files' offsets).
        self._written_checkpoints: dict[Path, tuple[dict[TopicPartitionKey, int], ...]] = {}
        # How many logs each directory holds (new logs go to the directory with fewest).
        self._logs_per_dir: dict[Path, int] = {}
        # The logs with a flush.ms: the flush job looks at these only.
        self._timed_flush: set[PartitionLog] = set()
        # The compacted logs: the cleaner job looks at these only.
        self._compacted: set[PartitionLog] = set()
        # Logs with a leader epoch in memory only: the checkpoint job writes their epoch files.
        self._unsynced_epochs: set[PartitionLog] = set()
        # Counts the changes of what the checkpoint files hold (a log's offsets, a log opened or
        # deleted); the periodic checkpoint skips its pass while the count is the one it last
        # wrote completely, so an idle broker's checkpoint costs nothing per partition.
        self._offset_changes = 0
        self._checkpointed_changes = -1

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
                partition_log = PartitionLog(
                    path, topic, partition, self.config_for(topic), self.clock,
                    recovery_point=recovery_points.get(parsed, 0),
                    log_start_offset=start_offsets.get(parsed, 0),
                    high_watermark=high_watermarks.get(parsed, 0),
                    clean_shutdown=clean_shutdown,
                )
                partition_log.on_dir_failure = self.fail_dir
                self.logs[parsed] = partition_log
                partition_log.on_epochs_unsynced = self._epochs_unsynced
                partition_log.on_offsets_changed = self._offsets_changed
                self._offsets_changed()
                self._logs_per_dir[directory] = self._logs_per_dir.get(directory, 0) + 1
                self._track_config(partition_log)
            marker.unlink(missing_ok=True)
            files.fsync_directory(directory)
        self.started = True
        log.info("loaded %d partition logs from %s", len(self.logs), ", ".join(map(str, self.log_dirs)))

    def shutdown(self) -> None:
        """Flush and close every log, write checkpoints and the clean-shutdown markers.

        A directory that is offline, or whose logs or checkpoints could not be written, gets
        no clean-shutdown marker: the next start recovers it."""
        with self._lock:
            logs = list(self.logs.values())
        for partition_log in logs:
            try:
                partition_log.close()
            except LogDirOfflineError as exc:
                log.warning("closing %s: %s", partition_log.name, exc)
        self.checkpoint_all()
        for directory in self.log_dirs:
            if directory in self.offline_dirs or directory in self._checkpoint_failures:
                log.warning("%s gets no clean-shutdown marker (its writes failed); it is recovered on the "
                            "next start", directory)
                continue
            try:
                (directory / files.CLEAN_SHUTDOWN_MARKER).touch()
                files.fsync_directory(directory)
            except OSError as exc:
                log.warning("cannot write the clean-shutdown marker of %s: %s", directory, exc.strerror or exc)
        self.started = False

    def fail_dir(self, directory: Path, reason: str) -> None:
        """Take a log directory offline after an I/O error that could not be undone: every log
        in it stops serving until the broker restarts. Idempotent; logs at ERROR once."""
        directory = Path(directory)
        with self._lock:
            if directory in self.offline_dirs:
                return
            self.offline_dirs[directory] = reason
            doomed = [partition_log for partition_log in self.logs.values()
                      if partition_log.directory.parent == directory]
        for partition_log in doomed:
            partition_log.mark_offline(f"log directory {directory} is offline")
        log.error("log directory %s is offline after an I/O error (%s); its %d partition(s) are not served "
                  "until the broker restarts: %s", directory, reason, len(doomed),
                  ", ".join(sorted(partition_log.name for partition_log in doomed)))

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
            problem = topic_name_problem(topic)
            if problem:
                raise StorageError(problem)
            log_dir = self._least_loaded_dir()
            directory = log_dir / files.partition_dir_name(topic, partition)
            try:
                partition_log = PartitionLog(directory, topic, partition, config or self.config_for(topic),
                                             self.clock, clean_shutdown=True)
            except OSError as exc:  # a full disk: the next attempt opens what this one created
                raise KafkaStorageError(f"cannot create the log of {topic}-{partition} in {directory.parent}: "
                                        f"{exc.strerror or exc}") from exc
            partition_log.on_dir_failure = self.fail_dir
            self.logs[key] = partition_log
            partition_log.on_epochs_unsynced = self._epochs_unsynced
            partition_log.on_offsets_changed = self._offsets_changed
            self._offsets_changed()
            self._logs_per_dir[log_dir] = self._logs_per_dir.get(log_dir, 0) + 1
            self._track_config(partition_log)
            return partition_log

    def _least_loaded_dir(self) -> Path:
        online = [directory for directory in self.log_dirs if directory not in self.offline_dirs]
        if not online:
            raise LogDirOfflineError(f"every log directory is offline: {', '.join(map(str, self.log_dirs))}")
        return min(online, key=lambda directory: self._logs_per_dir.get(directory, 0))

    def update_config(self, topic: str) -> None:
        """Re-read a topic's overrides and apply them to its open logs."""
        config = self.config_for(topic)
        with self._lock:
            for (log_topic, _partition), partition_log in self.logs.items():
                if log_topic == topic:
                    partition_log.config = config
                    self._track_config(partition_log)

    def delete(self, topic: str, partition: int) -> bool:
        """Remove a partition's log for good; returns False when there was none."""
        key = (topic, partition)
        with self._lock:
            partition_log = self.logs.pop(key, None)
            self._cleaner_checkpoints.pop(key, None)
            self._offsets_changed()
            if partition_log is not None:
                self._timed_flush.discard(partition_log)
                self._compacted.discard(partition_log)
                self._unsynced_epochs.discard(partition_log)
                parent = partition_log.directory.parent
                self._logs_per_dir[parent] = self._logs_per_dir.get(parent, 1) - 1
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
            if partition_log.closed or partition_log.offline_reason is not None:
                continue
            try:
                removed += partition_log.delete_old_segments()
                partition_log.delete_expired_files()
            except (OSError, LogDirOfflineError) as exc:
                log.warning("retention of %s failed, retrying on the next run: %s", partition_log.name, exc)
        return removed

    def _track_config(self, partition_log: PartitionLog) -> None:
        """Keep the sets of logs whose config has a flush.ms (``flush.ms`` "never" is the
        default) and of compacted logs: the flush and cleaner jobs look at these only."""
        if partition_log.config.flush_ms < NEVER_MS:
            self._timed_flush.add(partition_log)
        else:
            self._timed_flush.discard(partition_log)
        if partition_log.config.compact:
            self._compacted.add(partition_log)
        else:
            self._compacted.discard(partition_log)

    def flush_due_logs(self) -> int:
        """Flush the logs with a ``flush.ms`` whose unflushed data is older than it."""
        flushed = 0
        with self._lock:
            timed = list(self._timed_flush)
        for partition_log in timed:
            if not partition_log.closed and partition_log.offline_reason is None and partition_log.flush_due():
                try:
                    partition_log.flush()
                except LogDirOfflineError:
                    continue  # its directory went offline (logged once by fail_dir)
                flushed += 1
        return flushed

    def run_cleaner(self, force: bool = False) -> list[tuple[TopicPartitionKey, cleaner.CleanResult]]:
        """One compaction pass over every compacted log that qualifies."""
        results = []
        with self._lock:
            compacted = list(self._compacted)
        for partition_log in compacted:
            if partition_log.closed or partition_log.offline_reason is not None or not partition_log.config.compact:
                continue
            key = (partition_log.topic, partition_log.partition)
            try:
                result = cleaner.clean(partition_log, self._cleaner_checkpoints.get(key, 0), force=force)
            except OSError as exc:
                log.warning("compaction of %s failed, retrying on the next run: %s", partition_log.name,
                            exc.strerror or exc)
                continue
            if result.cleaned:
                self._cleaner_checkpoints[key] = result.new_checkpoint
                results.append((key, result))
        if results:
            self._offsets_changed()
            self.checkpoint_all()
        return results

    def _epochs_unsynced(self, partition_log: PartitionLog) -> None:
        with self._lock:
            self._unsynced_epochs.add(partition_log)

    def _sync_epochs(self) -> None:
        """Write the leader epoch files of the logs holding an epoch in memory only; one that
        fails is kept for the next call."""
        with self._lock:
            pending, self._unsynced_epochs = self._unsynced_epochs, set()
        for partition_log in pending:
            try:
                partition_log.sync_epochs()
            except OSError as exc:
                log.debug("%s: leader epoch checkpoint not written: %s", partition_log.name, exc.strerror or exc)
                with self._lock:
                    if not partition_log.closed:
                        self._unsynced_epochs.add(partition_log)

    def checkpoint_all(self) -> bool:
        """Write every per-directory checkpoint file of the online directories, and the leader
        epoch files holding an epoch in memory only; returns True when all checkpoint files
        were written. A directory whose offsets did not change since its last write is
        not written again. A failed write leaves the previous file in place and is retried
        on the next call (one WARN when a directory starts failing, one INFO when it recovers)."""
        self._sync_epochs()
        changes = self._offset_changes
        if changes == self._checkpointed_changes:
            return True
        with self._lock:
            logs = dict(self.logs)
        written = True
        for directory in self.log_dirs:
            if directory in self.offline_dirs:
                written = False
                continue
            mine = logs if len(self.log_dirs) == 1 else {
                key: partition_log for key, partition_log in logs.items()
                if partition_log.directory.parent == directory}
            try:
                with self._checkpoint_lock:
                    self._write_checkpoints(directory, mine)
            except OSError as exc:
                written = False
                reason = exc.strerror or str(exc)
                if directory not in self._checkpoint_failures:
                    log.warning("cannot write the checkpoints of %s (%s); the previous ones stay, retrying on the "
                                "next run", directory, reason)
                else:
                    log.debug("checkpoints of %s still fail: %s", directory, reason)
                self._checkpoint_failures[directory] = reason
                continue
            failed = self._checkpoint_failures.pop(directory, None)
            if failed is not None:
                log.info("checkpoints of %s are written again (they failed with: %s)", directory, failed)
        if written:
            self._checkpointed_changes = changes
        return written

    def _offsets_changed(self) -> None:
        self._offset_changes += 1

    def checkpoint_due(self) -> bool:
        """Whether :meth:`checkpoint_all` has anything to write: an offset changed since its
        last complete pass, or a leader epoch waits in memory (any thread)."""
        return self._offset_changes != self._checkpointed_changes or bool(self._unsynced_epochs)

    def has_timed_flush(self) -> bool:
        """Whether any log has a ``flush.ms`` (what :meth:`flush_due_logs` looks at)."""
        return bool(self._timed_flush)

    def has_compacted(self) -> bool:
        """Whether any log is compacted (what :meth:`run_cleaner` looks at)."""
        return bool(self._compacted)

    def checkpoint_log_start_offsets(self, partition_log: PartitionLog) -> None:
        """Write the ``log-start-offset-checkpoint`` of ``partition_log``'s directory now (after a
        DeleteRecords moved its log start offset, so the move survives a crash). A failed write
        raises KafkaStorageError and leaves the previous file; the periodic checkpoint retries."""
        directory = partition_log.directory.parent
        with self._lock:
            mine = {key: plog.log_start_offset for key, plog in self.logs.items() if plog.directory.parent == directory}
        try:
            with self._checkpoint_lock:
                self._written_checkpoints.pop(directory, None)
                self._checkpointed_changes = -1
                checkpoint.write_offsets(directory / files.LOG_START_CHECKPOINT, mine)
        except OSError as exc:
            raise KafkaStorageError(f"cannot write the log start offsets of {directory}: "
                                    f"{exc.strerror or exc}") from exc

    def _write_checkpoints(self, directory: Path, mine: dict[TopicPartitionKey, PartitionLog]) -> None:
        """Write the four checkpoint files of ``directory`` unless they would say what the last
        write said (the caller holds the checkpoint lock)."""
        offsets = ({key: plog.recovery_point for key, plog in mine.items()},
                   {key: plog.high_watermark for key, plog in mine.items()},
                   {key: plog.log_start_offset for key, plog in mine.items()},
                   {key: offset for key, offset in self._cleaner_checkpoints.items() if key in mine})
        if self._written_checkpoints.get(directory) == offsets:
            return
        self._written_checkpoints.pop(directory, None)
        for name, values in zip((files.RECOVERY_POINT_CHECKPOINT, files.REPLICATION_CHECKPOINT,
                                 files.LOG_START_CHECKPOINT, files.CLEANER_CHECKPOINT), offsets):
            checkpoint.write_offsets(directory / name, values)
        self._written_checkpoints[directory] = offsets
