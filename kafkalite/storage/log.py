"""One partition's log: ordered segments, offsets, append/read, roll, truncation, retention.

:class:`PartitionLog` owns the directory ``<log.dir>/<topic>-<partition>/``: its segments
(ordered by base offset; the last is the active one), the log start offset (first readable
offset), the log end offset (next offset to assign), the high watermark (set by replication),
the recovery point (everything below it is known to be fsynced), and the leader epoch cache.

Appends come in two kinds. :meth:`PartitionLog.append_as_leader` validates producer batches
(:mod:`kafkalite.storage.validation`: structure, CRC, sizes, keys on compacted topics, no
control batches), assigns offsets and stamps the leader epoch in place — without recomputing
CRCs or decompressing — then writes them. :meth:`PartitionLog.append_as_follower` writes
batches whose offsets the leader assigned. A request is validated completely before a single
byte is written: a bad batch never leaves a partial write behind. Each also exists in two
steps (``check_batches`` then ``append_checked_as_*``, fsync left to the caller through
:meth:`PartitionLog.flush_pending`), so a caller can validate and fsync elsewhere.

Storage errors follow Kafka's log-directory failure model. An append that fails with an I/O
error is rolled back by the segment (file cut back to its last whole batch, indexes to their
previous entries) before the error is raised, so the log end offset, the files and the epoch
cache keep agreeing. ENOSPC and EDQUOT are transient: the append raises KafkaStorageError
(retriable) and the log keeps serving, so writes resume when space returns (one WARN when
appends start failing, one INFO when they succeed again). Any other I/O error, a failed
rollback or a failed fsync takes the log offline: :attr:`PartitionLog.offline_reason` is set,
``on_dir_failure`` (set by the LogManager) takes the whole log directory offline, and every
later append or read raises LogDirOfflineError until the broker restarts.

Concurrency: synchronous file I/O; every method takes the log's lock, so any thread may call
it. ``append_checked_as_*`` are short page-cache writes (the broker calls them on its event
loop); ``append_as_*`` may fsync, and :meth:`PartitionLog.flush` snapshots the segments under
the lock and fsyncs outside it, so they belong on a worker thread. :meth:`PartitionLog.read`
preads up to ``max_bytes`` under the lock; :meth:`PartitionLog.bytes_after` (index lookups
only) tells a caller how much a read could return before it decides where to run it.
Time is read from the injected ``clock`` (milliseconds), so roll and retention are testable.
"""

from __future__ import annotations

import logging
import os
import struct
import threading
import time
from bisect import bisect_right
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from kafkalite.config import LogConfig
from kafkalite.errors import (
    CorruptRecordError,
    KafkaStorageError,
    LogDirOfflineError,
    OffsetOutOfRangeError,
    StorageError,
)
from kafkalite.record.batch import (
    RecordBatch,
)
from kafkalite.storage import files
from kafkalite.storage.epochs import LeaderEpochCache
from kafkalite.storage.segment import INT32_MAX, BatchHeader, Segment, last_offset_in_file
from kafkalite.storage.txnindex import AbortedTxn
from kafkalite.storage.validation import CheckedBatches, check_batches, stamp_log_append_time

log = logging.getLogger(__name__)

_BATCH_PREFIX = struct.Struct(">qii")  # baseOffset, batchLength, partitionLeaderEpoch

Clock = Callable[[], int]
DirFailureHandler = Callable[[Path, str], None]


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


@dataclass(slots=True)
class AppendInfo:
    """What an append did: offsets assigned, record count, timestamps."""

    first_offset: int
    last_offset: int
    record_count: int
    batch_count: int
    max_timestamp: int
    log_append_time: int
    size: int


@dataclass(slots=True)
class FetchData:
    """Whole batches read from the log plus the offsets a fetch response reports.

    ``records`` is bytes, or a read-only view of the front of a larger read (no copy is made
    to cut a read at the last whole batch)."""

    records: bytes | memoryview
    high_watermark: int
    log_start_offset: int
    log_end_offset: int


class PartitionLog:
    """The log of one topic-partition. See the module docstring for the contract."""

    def __init__(self, directory: Path, topic: str, partition: int, config: LogConfig,
                 clock: Clock = wall_clock_ms, recovery_point: int = 0, log_start_offset: int = 0,
                 high_watermark: int = 0, clean_shutdown: bool = False) -> None:
        self.directory = directory
        self.topic = topic
        self.partition = partition
        self.config = config
        self.clock = clock
        self._lock = threading.RLock()
        self.segments: list[Segment] = []
        self._base_offsets: list[int] = []
        #: Called (from the thread making the change) when the recovery point, the high
        #: watermark or the log start offset changes: what the checkpoint files hold. The
        #: LogManager's periodic checkpoint then knows it has something to write.
        self.on_offsets_changed: Callable[[], None] | None = None
        self._recovery_point = recovery_point
        self._high_watermark = 0
        self._log_start_offset = 0
        self._unflushed_messages = 0
        self._last_flush_ms = clock()
        self.closed = False
        # Set once an I/O error could not be undone; the log then serves nothing until restart.
        self.offline_reason: str | None = None
        # Called with (log directory, reason) when this log goes offline (see LogManager).
        self.on_dir_failure: DirFailureHandler | None = None
        self._append_failure: str | None = None  # the transient error appends last failed with
        self._pending_deletes: list[tuple[int, Segment]] = []
        #: The first offset of an undecided transaction (set by the owning partition from its
        #: producer state; None: none). Compaction never cleans at or above it.
        self.first_unstable_offset: int | None = None
        directory.mkdir(parents=True, exist_ok=True)
        #: Called (from the thread recording it) when a leader epoch waits in memory for its
        #: file write; the LogManager then writes it with its next checkpoint.
        self.on_epochs_unsynced: Callable[[PartitionLog], None] | None = None
        self.epoch_cache = LeaderEpochCache(directory / files.LEADER_EPOCH_CHECKPOINT,
                                            on_unsynced=self._epochs_unsynced)
        self._load(clean_shutdown)
        self.log_start_offset = max(log_start_offset, self.segments[0].base_offset)
        if self.log_start_offset > self.log_end_offset:
            self.log_start_offset = self.log_end_offset
        self.high_watermark = min(max(high_watermark, self.log_start_offset), self.log_end_offset)
        self.recovery_point = min(self.recovery_point, self.log_end_offset)

    @property
    def recovery_point(self) -> int:
        """Every offset below it is flushed to disk (recovery starts here after a crash)."""
        return self._recovery_point

    @recovery_point.setter
    def recovery_point(self, offset: int) -> None:
        if offset != self._recovery_point:
            self._recovery_point = offset
            if self.on_offsets_changed is not None:
                self.on_offsets_changed()

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    @high_watermark.setter
    def high_watermark(self, offset: int) -> None:
        if offset != self._high_watermark:
            self._high_watermark = offset
            if self.on_offsets_changed is not None:
                self.on_offsets_changed()

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @log_start_offset.setter
    def log_start_offset(self, offset: int) -> None:
        if offset != self._log_start_offset:
            self._log_start_offset = offset
            if self.on_offsets_changed is not None:
                self.on_offsets_changed()

    def _epochs_unsynced(self, _cache: LeaderEpochCache) -> None:
        if self.on_epochs_unsynced is not None:
            self.on_epochs_unsynced(self)

    def record_leader_epoch(self, leader_epoch: int) -> None:
        """A leader taking office at ``leader_epoch``: its epoch starts at the log end. Kept in
        memory (no file I/O, so a broker taking over thousands of partitions does not write
        thousands of files at once); written before the first batch of that epoch, by
        :meth:`sync_epochs`, or at close."""
        with self._lock:
            self.epoch_cache.assign(leader_epoch, self.log_end_offset, persist=False)

    def sync_epochs(self) -> None:
        """Write the leader epoch checkpoint if an epoch is in memory only (blocking: a worker
        thread's call). An OSError is raised; the epoch stays to be written by a later call."""
        with self._lock:
            if not self.closed:
                self.epoch_cache.sync()

    def __repr__(self) -> str:
        return (f"PartitionLog({self.topic}-{self.partition}, start={self.log_start_offset}, "
                f"end={self.log_end_offset}, hw={self.high_watermark}, segments={len(self.segments)})")

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"

    # -- loading ------------------------------------------------------------------------------
    def _new_segment(self, base_offset: int, suffix: str = "") -> Segment:
        return Segment(self.directory, base_offset,
                       index_interval_bytes=self.config.index_interval_bytes,
                       max_index_entries=self.config.segment_index_bytes // 8,
                       created_ms=self.clock(), suffix=suffix)

    def _load(self, clean_shutdown: bool) -> None:
        """Open the segments on disk, finishing or undoing interrupted renames, and recover
        every segment at or above the recovery point when the shutdown was not clean."""
        live: dict[int, bool] = {}
        swaps: list[int] = []
        swapped: set[int] = set()
        for entry in sorted(os.listdir(self.directory)):
            parsed = files.parse_segment_file(entry)
            if parsed is None:
                if entry.endswith(".tmp"):
                    (self.directory / entry).unlink(missing_ok=True)
                continue
            base_offset, kind, transient = parsed
            path = self.directory / entry
            if transient in (files.DELETED_SUFFIX, files.CLEANED_SUFFIX):
                path.unlink(missing_ok=True)  # a finished delete or an unfinished compaction
            elif transient == files.SWAP_SUFFIX:
                if kind == files.LOG_SUFFIX:
                    swaps.append(base_offset)
                else:
                    path.unlink(missing_ok=True)  # indexes are rebuilt
            elif kind == files.LOG_SUFFIX:
                live[base_offset] = True
            elif not files.segment_path(self.directory, base_offset, files.LOG_SUFFIX).exists():
                path.unlink(missing_ok=True)  # an index without its log
        # A .swap log is compaction output whose swap was interrupted: it replaces every live
        # segment it covers. Its base offset is that of the first segment it replaces.
        for swap_base in swaps:
            swap_segment = Segment(self.directory, swap_base, suffix=files.SWAP_SUFFIX,
                                   index_interval_bytes=self.config.index_interval_bytes,
                                   max_index_entries=self.config.segment_index_bytes // 8)
            swap_segment.recover()
            for base_offset in list(live):
                if swap_base <= base_offset < max(swap_segment.next_offset, swap_base + 1):
                    for suffix in files.SEGMENT_FILE_SUFFIXES:
                        files.segment_path(self.directory, base_offset, suffix).unlink(missing_ok=True)
                    del live[base_offset]
            swap_segment.rename_suffix("")
            swap_segment.close()
            live[swap_base] = True
            swapped.add(swap_base)  # its indexes were dropped: recovered again below, .txnindex included
        bases = sorted(live)
        for position, base_offset in enumerate(bases):
            segment = self._new_segment(base_offset)
            truncated = 0
            if base_offset in swapped or (not clean_shutdown and self._needs_recovery(base_offset, live)):
                truncated = segment.recover()
                if truncated:
                    log.warning("%s: recovered segment %d, cut %d damaged bytes", self.name, base_offset, truncated)
            else:
                segment.load()
            if self.segments and segment.base_offset < self.active_segment.next_offset:
                segment.close()
                self._drop_segments_after_damage(
                    bases[position:], self.active_segment.next_offset,
                    f"segment {base_offset} overlaps its predecessor, which ends at offset "
                    f"{self.active_segment.next_offset}")
                break
            self._append_segment(segment)
            if truncated and position + 1 < len(bases):
                # Damage ends the valid log: everything after it is unreachable.
                self._drop_segments_after_damage(
                    bases[position + 1:], segment.next_offset,
                    f"segment {base_offset} is damaged at offset {segment.next_offset} ({truncated} bytes cut)")
                break
        if not self.segments:
            self._append_segment(self._new_segment(0))
        # Epochs starting at the log end (a leader that took office and appended nothing, or
        # batches lost in a crash) are dropped from memory; the file is left as it is (every
        # load drops them again), so opening thousands of logs writes no file.
        self.epoch_cache.truncate_from_end(self.log_end_offset, persist=False)

    def _drop_segments_after_damage(self, base_offsets: list[int], valid_end: int, cause: str) -> None:
        """Delete segments the valid log no longer reaches, saying at WARN which offsets go."""
        last_offset = last_offset_in_file(files.segment_path(self.directory, base_offsets[-1], files.LOG_SUFFIX))
        lost = f"offsets {valid_end}..{last_offset}" if last_offset >= valid_end else f"offsets from {valid_end}"
        size = sum(files.segment_path(self.directory, base_offset, files.LOG_SUFFIX).stat().st_size
                   for base_offset in base_offsets
                   if files.segment_path(self.directory, base_offset, files.LOG_SUFFIX).exists())
        log.warning("%s: recovery drops %d segment(s) %s (%s, %d bytes) because %s; the log now ends at "
                    "offset %d", self.name, len(base_offsets), ", ".join(map(str, base_offsets)), lost, size,
                    cause, valid_end)
        for base_offset in base_offsets:
            for suffix in files.SEGMENT_FILE_SUFFIXES:
                files.segment_path(self.directory, base_offset, suffix).unlink(missing_ok=True)

    def _needs_recovery(self, base_offset: int, live: dict[int, bool]) -> bool:
        later = [offset for offset in live if offset > base_offset]
        segment_end = min(later) if later else None
        return segment_end is None or segment_end > self.recovery_point

    def _append_segment(self, segment: Segment) -> None:
        self.segments.append(segment)
        self._base_offsets.append(segment.base_offset)

    # -- offsets ------------------------------------------------------------------------------
    @property
    def active_segment(self) -> Segment:
        return self.segments[-1]

    @property
    def log_end_offset(self) -> int:
        return self.segments[-1].next_offset

    @property
    def size_in_bytes(self) -> int:
        return sum(segment.size for segment in self.segments)

    def update_high_watermark(self, offset: int) -> int:
        """Set the high watermark, clamped into [log start, log end]; returns the new value."""
        with self._lock:
            self.high_watermark = min(max(offset, self.log_start_offset), self.log_end_offset)
            return self.high_watermark

    # -- appending ----------------------------------------------------------------------------
    def append_as_leader(self, data: bytes | bytearray | memoryview, leader_epoch: int) -> AppendInfo:
        """Validate producer batches, assign offsets from the log end, stamp ``leader_epoch``,
        write, and fsync when ``flush.messages`` is reached. Raises a named error and writes
        nothing when any batch is bad. (The broker runs these steps apart: see
        :meth:`append_checked_as_leader`.)"""
        info = self.append_checked_as_leader(check_batches(data, self.config, from_client=True), leader_epoch)
        if self.flush_pending():
            self.flush(info.last_offset + 1)
        return info

    def append_checked_as_leader(self, checked: CheckedBatches, leader_epoch: int) -> AppendInfo:
        """Assign offsets from the log end to batches :func:`check_batches` passed (from a
        client), stamp ``leader_epoch`` in place — without recomputing CRCs or decompressing —
        and write them. Never fsyncs: the caller flushes when :meth:`flush_pending` says so."""
        now = self.clock()
        log_append_time = -1
        if self.config.message_timestamp_type == "LogAppendTime":
            log_append_time = now
        with self._lock:
            self._ensure_open()
            next_offset = self.log_end_offset
            first_offset = next_offset
            max_timestamp = -1
            offset_of_max = first_offset
            count = 0
            pieces: list[bytes | bytearray | memoryview] = []
            for batch in checked.batches:
                position = batch.position
                if log_append_time >= 0:
                    rewritten = bytearray(checked.buffer[position:batch.end_position])
                    stamp_log_append_time(rewritten, batch, log_append_time)
                    pieces.append(_BATCH_PREFIX.pack(next_offset, batch.batch_length, leader_epoch))
                    pieces.append(memoryview(rewritten)[16:])
                    batch_max_timestamp = log_append_time
                else:
                    # Offsets and epoch lie outside the CRC: stamp a new 16-byte prefix and
                    # write the rest of the producer's bytes untouched, without copying them.
                    pieces.append(_BATCH_PREFIX.pack(next_offset, batch.batch_length, leader_epoch))
                    pieces.append(checked.buffer[position + 16:batch.end_position])
                    batch_max_timestamp = batch.max_timestamp
                if batch_max_timestamp > max_timestamp:
                    max_timestamp = batch_max_timestamp
                    offset_of_max = next_offset + batch.last_offset_delta
                next_offset += batch.last_offset_delta + 1
                count += batch.record_count
            self._write(pieces, first_offset, next_offset, max_timestamp, offset_of_max, leader_epoch)
            return AppendInfo(first_offset, next_offset - 1, count, len(checked.batches), max_timestamp,
                              log_append_time, len(checked.buffer))

    def append_as_follower(self, data: bytes | bytearray | memoryview) -> AppendInfo:
        """Validate and write batches replicated from the leader (offsets and epochs already
        assigned), and fsync when ``flush.messages`` is reached."""
        info = self.append_checked_as_follower(check_batches(data, self.config, from_client=False))
        if self.flush_pending():
            self.flush(info.last_offset + 1)
        return info

    def append_checked_as_follower(self, checked: CheckedBatches) -> AppendInfo:
        """Write replicated batches :func:`check_batches` passed; never fsyncs (see
        :meth:`flush_pending`)."""
        with self._lock:
            self._ensure_open()
            expected = self.log_end_offset
            first_offset = checked.batches[0].base_offset
            if first_offset < expected:
                raise CorruptRecordError(
                    f"{self.name}: replicated batch starts at {first_offset}, below log end {expected}")
            max_timestamp = -1
            offset_of_max = first_offset
            previous_next = first_offset
            count = 0
            epoch = -1
            for batch in checked.batches:
                if batch.base_offset < previous_next:
                    raise CorruptRecordError(f"{self.name}: replicated batches out of order at {batch.base_offset}")
                previous_next = batch.next_offset
                count += batch.record_count
                if batch.max_timestamp > max_timestamp:
                    max_timestamp = batch.max_timestamp
                    offset_of_max = batch.last_offset
                if batch.partition_leader_epoch > epoch:
                    if batch.partition_leader_epoch > self.epoch_cache.latest_epoch:
                        # Record epoch changes that happen inside the replicated chunk.
                        self.epoch_cache.assign(batch.partition_leader_epoch, batch.base_offset)
                    epoch = batch.partition_leader_epoch
            if first_offset > expected:
                # The leader's log starts later than ours ends (its old segments were deleted).
                self._truncate_fully_locked(first_offset)
            self._write(checked.buffer, first_offset, previous_next, max_timestamp, offset_of_max, -1)
            return AppendInfo(first_offset, previous_next - 1, count, len(checked.batches), max_timestamp, -1,
                              len(checked.buffer))

    def _write(self, data: memoryview | list[bytes | bytearray | memoryview], first_offset: int, next_offset: int,
               max_timestamp: int, offset_of_max: int, leader_epoch: int) -> None:
        size = sum(len(piece) for piece in data) if isinstance(data, list) else len(data)
        try:
            self._maybe_roll(size, next_offset - 1)
            self.epoch_cache.sync(before_append=True)  # every batch's epoch is on disk before the batch
            if leader_epoch >= 0:
                self.epoch_cache.assign(leader_epoch, first_offset)
            self.active_segment.append(data, first_offset, next_offset, max_timestamp, offset_of_max)
        except LogDirOfflineError as exc:
            self._go_offline(str(exc))
            raise
        except OSError as exc:
            raise self._append_failed(exc) from exc
        if self._append_failure is not None:
            log.info("%s: appends succeed again (they failed with: %s)", self.name, self._append_failure)
            self._append_failure = None
        self._unflushed_messages += next_offset - first_offset

    def flush_pending(self) -> bool:
        """True when ``flush.messages`` records were appended since the last flush: the caller
        should :meth:`flush` (on a worker thread) before it acknowledges them."""
        return self._unflushed_messages >= self.config.flush_messages

    def _append_failed(self, exc: OSError) -> KafkaStorageError:
        """The error to raise for an append the segment rolled back; a non-transient cause
        takes the log offline."""
        reason = exc.strerror or str(exc)
        if files.is_transient_io_error(exc):
            if self._append_failure is None:
                log.warning("%s: appends fail and are rolled back (%s); the log stays online and "
                            "writes resume when the disk has room again", self.name, reason)
            self._append_failure = reason
            return KafkaStorageError(f"{self.name}: the write failed and was undone: {reason}")
        detail = f"{self.name}: the write failed and was undone: {reason}"
        self._go_offline(detail)
        return LogDirOfflineError(detail)

    def _go_offline(self, reason: str) -> None:
        if self.offline_reason is not None:
            return
        self.offline_reason = reason
        if self.on_dir_failure is not None:
            self.on_dir_failure(self.directory.parent, reason)
        else:
            log.error("%s: the log is offline: %s", self.name, reason)

    def mark_offline(self, reason: str) -> None:
        """Stop serving this log (its log directory failed); idempotent."""
        if self.offline_reason is None:  # no lock: a failing writer may hold it while it calls us
            self.offline_reason = reason

    def _maybe_roll(self, incoming_bytes: int, last_offset: int) -> None:
        segment = self.active_segment
        if segment.is_empty:
            return
        now = self.clock()
        if (segment.size + incoming_bytes > self.config.segment_bytes
                or now - segment.created_ms > self.config.segment_ms
                or segment.indexes_full
                or last_offset - segment.base_offset > INT32_MAX):
            self._roll_locked()

    def roll(self) -> Segment:
        """Start a new active segment at the log end offset (no-op when the active one is empty)."""
        with self._lock:
            return self._roll_locked()

    def _roll_locked(self) -> Segment:
        if self.active_segment.is_empty:
            return self.active_segment
        self.active_segment.trim_torn_tail()  # a segment never rolls over bytes past its end
        new_segment = self._new_segment(self.log_end_offset)
        self._append_segment(new_segment)
        return new_segment

    # -- reading ------------------------------------------------------------------------------
    def read(self, offset: int, max_bytes: int, *, max_offset: int | None = None,
             min_one_batch: bool = True) -> FetchData:
        """Whole batches from the one holding ``offset``, up to ``max_bytes`` (the first batch
        whole regardless when ``min_one_batch``), none reaching ``max_offset`` (the high
        watermark for consumers; the log end for followers when None).

        ``offset`` outside [log start, log end] raises OffsetOutOfRangeError.
        """
        with self._lock:
            self._ensure_online()
            end = self.log_end_offset
            if offset < self.log_start_offset or offset > end:
                raise OffsetOutOfRangeError(
                    f"{self.name}: offset {offset} is outside [{self.log_start_offset}, {end}]")
            limit = end if max_offset is None else min(max_offset, end)
            records: bytes | memoryview = b""
            if offset < limit:
                index = bisect_right(self._base_offsets, offset) - 1
                while index < len(self.segments):
                    segment = self.segments[index]
                    position = segment.position_of(offset)
                    if position is not None:
                        records = segment.read(position, max_bytes, limit, min_one_batch)
                        break
                    index += 1
            return FetchData(records, self.high_watermark, self.log_start_offset, end)

    def bytes_after(self, offset: int) -> int:
        """About how many bytes of batches lie from ``offset`` to the log end (index lookups
        only, no file access; 0 when ``offset`` is at or past the end)."""
        with self._lock:
            index = bisect_right(self._base_offsets, offset) - 1
            if offset >= self.log_end_offset or index < 0:
                return 0
            segment = self.segments[index]
            position = segment.index.lookup(offset)[1] if offset < segment.next_offset else segment.size
            return segment.size - position + sum(later.size for later in self.segments[index + 1:])

    # -- aborted transactions -----------------------------------------------------------------
    def append_aborted_txn(self, entry: AbortedTxn) -> None:
        """Add an aborted transaction to the ``.txnindex`` of the segment holding its marker."""
        with self._lock:
            self._ensure_open()
            index = bisect_right(self._base_offsets, entry.last_offset) - 1
            if index < 0:
                return  # the marker is below the log's first segment (deleted meanwhile)
            try:
                self.segments[index].txn_index.append(entry)
            except OSError as exc:
                raise self._append_failed(exc) from exc

    def collect_aborted_txns(self, fetch_offset: int, upper_bound: int) -> list[AbortedTxn]:
        """Aborted transactions overlapping [``fetch_offset``, ``upper_bound``), oldest marker
        first: read from the ``.txnindex`` of the segment holding ``fetch_offset`` onwards (a
        marker lies after the data it aborts). Index lookups only."""
        with self._lock:
            index = max(0, bisect_right(self._base_offsets, fetch_offset) - 1)
            found: list[AbortedTxn] = []
            for segment in self.segments[index:]:
                if segment.txn_index.entries:
                    found.extend(segment.txn_index.collect(fetch_offset, upper_bound))
                if any(entry.last_stable_offset >= upper_bound for entry in segment.txn_index.entries):
                    break  # Kafka's shortcut: later markers follow transactions that start later
            return found

    def rewrite_stale_txn_indexes(self, entries: list[AbortedTxn]) -> int:
        """Blocking: write ``entries`` (every aborted transaction of the log, from a rebuild)
        into the ``.txnindex`` files recovery emptied; returns how many were written."""
        written = 0
        with self._lock:
            for segment in self.segments:
                txn_index = segment.txn_index
                if not txn_index.stale:
                    continue
                for entry in entries:
                    if segment.base_offset <= entry.last_offset < segment.next_offset:
                        txn_index.append(entry)
                        written += 1
                txn_index.stale = False
        return written

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with timestamp >= ``timestamp``; None if none."""
        with self._lock:
            for segment in self.segments:
                if segment.max_timestamp < timestamp:
                    continue
                found = segment.first_offset_at_or_after_time(timestamp)
                if found is not None and found[0] >= self.log_start_offset:
                    return found
            return None

    def batches(self, start_offset: int = 0) -> Iterator[RecordBatch]:
        """Yield every batch from ``start_offset`` (for tools, tests and the cleaner)."""
        with self._lock:
            segments = list(self.segments)
        for segment in segments:
            if segment.next_offset <= start_offset:
                continue
            for _position, batch in segment.scan():
                if batch.last_offset >= start_offset:
                    yield batch

    def batch_headers(self) -> Iterator[BatchHeader]:
        """Yield every batch header of the log, oldest first (headers only)."""
        with self._lock:
            segments = list(self.segments)
        for segment in segments:
            yield from segment.batch_headers()

    # -- truncation ---------------------------------------------------------------------------
    def truncate_to(self, offset: int) -> int:
        """Remove every batch holding an offset >= ``offset`` (replication); returns the new end."""
        with self._lock:
            self._ensure_open()
            if offset >= self.log_end_offset:
                # Nothing to cut, but epochs that start at or after the target (a term this
                # replica led without writing) are not in the log: forget them, as Kafka does.
                self.epoch_cache.truncate_from_end(offset)
                return self.log_end_offset
            if offset <= self.log_start_offset and offset < self.segments[0].base_offset:
                self._truncate_fully_locked(offset)
                return self.log_end_offset
            while len(self.segments) > 1 and self.segments[-1].base_offset >= offset:
                doomed = self.segments.pop()
                self._base_offsets.pop()
                doomed.delete_files()
            self.active_segment.truncate_to(offset)
            end = self.log_end_offset
            self.high_watermark = min(self.high_watermark, end)
            self.recovery_point = min(self.recovery_point, end)
            self.epoch_cache.truncate_from_end(end)
            if self.log_start_offset > end:
                self.log_start_offset = end
            return end

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete everything and continue at ``offset`` (a follower far behind its leader)."""
        with self._lock:
            self._truncate_fully_locked(offset)

    def _truncate_fully_locked(self, offset: int) -> None:
        for segment in self.segments:
            segment.delete_files()
        self.segments = []
        self._base_offsets = []
        self._append_segment(self._new_segment(offset))
        self.log_start_offset = offset
        self.high_watermark = offset
        self.recovery_point = offset
        self.epoch_cache.clear()

    # -- durability ---------------------------------------------------------------------------
    def flush(self, up_to: int | None = None) -> None:
        """fsync every segment holding offsets below ``up_to`` (default: the log end) and
        advance the recovery point. Safe to call from a worker thread."""
        with self._lock:
            target = self.log_end_offset if up_to is None else min(up_to, self.log_end_offset)
            if target <= self.recovery_point:
                return
            dirty = [segment for segment in self.segments
                     if segment.next_offset > self.recovery_point and segment.base_offset < target]
            self._unflushed_messages = 0
            self._last_flush_ms = self.clock()
        try:
            for segment in dirty:
                segment.flush()
        except StorageError as exc:
            with self._lock:
                self._go_offline(str(exc))
            raise LogDirOfflineError(str(exc)) from exc
        with self._lock:
            self.recovery_point = max(self.recovery_point, target)

    def _flush_locked(self, target: int) -> None:
        try:
            for segment in self.segments:
                if segment.next_offset > self.recovery_point and segment.base_offset < target:
                    segment.flush()
        except StorageError as exc:
            self._go_offline(str(exc))
            raise LogDirOfflineError(str(exc)) from exc
        self.recovery_point = max(self.recovery_point, target)
        self._unflushed_messages = 0
        self._last_flush_ms = self.clock()

    def flush_due(self) -> bool:
        """True when flush.ms has passed since the last flush and there is unflushed data."""
        with self._lock:
            return (self.log_end_offset > self.recovery_point
                    and self.clock() - self._last_flush_ms >= self.config.flush_ms)

    # -- retention ----------------------------------------------------------------------------
    def delete_old_segments(self) -> int:
        """Apply retention.ms, retention.bytes and the log start offset; returns segments removed.

        Only whole segments entirely below the high watermark are deleted, oldest first,
        stopping at the first that does not qualify. A deleted segment is renamed ``.deleted``
        and unlinked after file.delete.delay.ms (see :meth:`delete_expired_files`).
        """
        with self._lock:
            self._ensure_open()
            now = self.clock()
            config = self.config
            removed = 0
            if config.delete:
                total = self.size_in_bytes
                while self.segments:
                    segment = self.segments[0]
                    if segment.next_offset > self.high_watermark or segment.is_empty:
                        break
                    expired = config.retention_ms >= 0 and now - segment.largest_timestamp() > config.retention_ms
                    oversize = config.retention_bytes >= 0 and total - config.retention_bytes >= segment.size
                    below_start = len(self.segments) > 1 and self.segments[1].base_offset <= self.log_start_offset
                    if not (expired or oversize or below_start):
                        break
                    if len(self.segments) == 1:
                        self._roll_locked()
                    total -= segment.size
                    self._remove_first_segment(now)
                    removed += 1
            return removed

    def delete_records_before(self, offset: int) -> int:
        """Raise the log start offset to ``offset`` (DeleteRecords, or a follower adopting its
        leader's); never lowers it. State only, no file I/O: the caller then runs
        :meth:`delete_segments_below_start` on a worker thread. Above the high watermark →
        OffsetOutOfRangeError. Returns the new log start offset."""
        with self._lock:
            self._ensure_open()
            if offset > self.high_watermark:
                raise OffsetOutOfRangeError(f"{self.name}: cannot delete records before {offset}, beyond the high "
                                            f"watermark {self.high_watermark}")
            self.log_start_offset = max(self.log_start_offset, offset)
            return self.log_start_offset

    def delete_segments_below_start(self) -> int:
        """Blocking: delete every whole segment below the log start offset (rolling first when
        the active one is; renamed ``.deleted``, unlinked after file.delete.delay.ms) and forget
        leader epochs below it. Returns the segments removed."""
        with self._lock:
            self._ensure_open()
            now = self.clock()
            removed = 0
            while not self.segments[0].is_empty and self.segments[0].next_offset <= self.log_start_offset:
                if len(self.segments) == 1:
                    self._roll_locked()
                self._remove_first_segment(now)
                removed += 1
            self.epoch_cache.truncate_from_start(self.log_start_offset)
            return removed

    def _remove_first_segment(self, now: int) -> None:
        segment = self.segments.pop(0)
        self._base_offsets.pop(0)
        segment.rename_suffix(files.DELETED_SUFFIX)
        self._pending_deletes.append((now + self.config.file_delete_delay_ms, segment))
        self.log_start_offset = max(self.log_start_offset, self.segments[0].base_offset)
        self.epoch_cache.truncate_from_start(self.log_start_offset)

    def delete_expired_files(self) -> int:
        """Unlink ``.deleted`` segments whose delay has passed; returns how many."""
        with self._lock:
            now = self.clock()
            due = [segment for deadline, segment in self._pending_deletes if deadline <= now]
            self._pending_deletes = [(deadline, segment) for deadline, segment in self._pending_deletes
                                     if deadline > now]
        for segment in due:
            segment.delete_files()
        return len(due)

    # -- compaction support -------------------------------------------------------------------
    def replace_segments(self, old: list[Segment], new: Segment) -> None:
        """Swap compaction output in: ``new`` (a ``.cleaned`` segment) replaces ``old``.

        Crash-safe order: ``.cleaned`` → ``.swap``; old segments → ``.deleted``; ``.swap`` → live.
        A crash in between is completed on the next open (see ``_load``).
        """
        with self._lock:
            new.flush()
            new.rename_suffix(files.SWAP_SUFFIX)
            files.fsync_directory(self.directory)
            now = self.clock()
            for segment in old:
                index = self.segments.index(segment)
                del self.segments[index]
                del self._base_offsets[index]
                segment.rename_suffix(files.DELETED_SUFFIX)
                self._pending_deletes.append((now + self.config.file_delete_delay_ms, segment))
            new.rename_suffix("")
            files.fsync_directory(self.directory)
            position = bisect_right(self._base_offsets, new.base_offset)
            self.segments.insert(position, new)
            self._base_offsets.insert(position, new.base_offset)

    @property
    def lock(self) -> threading.RLock:
        return self._lock

    # -- lifecycle ----------------------------------------------------------------------------
    def _ensure_open(self) -> None:
        if self.closed:
            raise StorageError(f"log {self.name} is closed")
        self._ensure_online()

    def _ensure_online(self) -> None:
        if self.offline_reason is not None:
            raise LogDirOfflineError(f"{self.name} is offline: {self.offline_reason}")

    def close(self) -> None:
        """Flush everything and close the files."""
        with self._lock:
            if self.closed:
                return
            if self.offline_reason is None:
                self._flush_locked(self.log_end_offset)
                try:
                    self.epoch_cache.sync()
                except OSError as exc:
                    log.warning("%s: leader epoch checkpoint not written at close: %s", self.name,
                                exc.strerror or exc)
            self.closed = True
            for segment in self.segments:
                segment.close()
            for _deadline, segment in self._pending_deletes:
                segment.delete_files()
            self._pending_deletes = []

    def delete(self) -> None:
        """Close and remove the whole partition directory."""
        import shutil

        with self._lock:
            self.closed = True
            for segment in self.segments:
                segment.close()
            for _deadline, segment in self._pending_deletes:
                segment.close()
            shutil.rmtree(self.directory, ignore_errors=True)
