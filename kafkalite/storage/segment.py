"""One log segment: a ``.log`` file of batches back to back, its two sparse indexes and its
aborted-transaction index (``.txnindex``, :mod:`kafkalite.storage.txnindex`).

A segment owns the byte range of the log from its base offset up to (not including) the next
segment's base offset. It appends whole batches whose offsets are already assigned, reads whole
batches by position, translates an offset into the position of the batch holding it (index
lookup, then a bounded header scan), truncates, recovers after an unclean shutdown (validate
every batch, rebuild the indexes, cut a torn or corrupt tail), and flushes.

An append that fails with an I/O error (ENOSPC, EIO...) is rolled back before the error leaves
:meth:`Segment.append`: the file is cut back to the end of its last whole batch and the indexes
to their previous entries, so the segment's bytes always end where its logical size says.

File I/O goes through raw descriptors with ``pread``/``pwrite``, so a flush (fsync) may run on a
worker thread while the owner keeps appending. Otherwise not thread-safe: the owning
:class:`~kafkalite.storage.log.PartitionLog` serialises every other call.
"""

from __future__ import annotations

import errno
import logging
import os
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

from kafkalite.errors import CorruptRecordError, LogDirOfflineError, StorageError, TruncatedBatchError
from kafkalite.record.batch import (
    ATTR_CONTROL,
    ATTR_TRANSACTIONAL,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAX_BATCH_SIZE,
    MIN_BATCH_LENGTH,
    RecordBatch,
)
from kafkalite.storage import files
from kafkalite.storage.index import OffsetIndex, TimeIndex
from kafkalite.storage.txnindex import TransactionIndex

log = logging.getLogger(__name__)

_BATCH_PREFIX = struct.Struct(">qi")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")
_LAST_OFFSET_DELTA_AT = 23
_MAX_TIMESTAMP_AT = 35
_HEADER_PROBE = 43  # bytes of a header needed to know offsets and max timestamp
_FULL_HEADER = struct.Struct(">qiibIhiqqqhii")
SCAN_CHUNK_BYTES = 1 << 20
LOOKUP_FIRST_CHUNK_BYTES = 1024  # header walks read little at first and grow while they go on
LOOKUP_MAX_CHUNK_BYTES = 64 * 1024
INT32_MAX = (1 << 31) - 1


class BatchHeader(NamedTuple):
    """The header fields of one stored batch (read without its records)."""

    base_offset: int
    last_offset: int
    partition_leader_epoch: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    last_sequence: int
    attributes: int = 0

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & ATTR_TRANSACTIONAL)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & ATTR_CONTROL)


class Segment:
    """A ``<base>.log`` file with its ``.index`` and ``.timeindex``.

    Concurrency: single writer; :meth:`flush` may run concurrently with :meth:`append` from a
    worker thread. See the module docstring.
    """

    def __init__(self, directory: Path, base_offset: int, *, index_interval_bytes: int = 4096,
                 max_index_entries: int = 10 * 1024 * 1024 // 8, created_ms: int = 0, suffix: str = "") -> None:
        self.directory = directory
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.suffix = suffix
        self.log_path = files.segment_path(directory, base_offset, files.LOG_SUFFIX, suffix)
        self._fd = os.open(self.log_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            self.size = os.fstat(self._fd).st_size
            self.index = OffsetIndex(files.segment_path(directory, base_offset, files.INDEX_SUFFIX, suffix),
                                     base_offset, max_index_entries)
            try:
                self.time_index = TimeIndex(
                    files.segment_path(directory, base_offset, files.TIME_INDEX_SUFFIX, suffix),
                    base_offset, max_index_entries)
            except BaseException:
                self.index.close()
                raise
            self.txn_index = TransactionIndex(files.segment_path(directory, base_offset, files.TXN_INDEX_SUFFIX,
                                                                 suffix))
        except BaseException:
            os.close(self._fd)  # a failed open (e.g. no inode left) leaks no descriptor
            raise
        self.next_offset = base_offset
        self.max_timestamp = -1
        self.offset_of_max_timestamp = base_offset
        self.created_ms = created_ms
        self._bytes_since_index_entry = 0
        self.closed = False

    # -- facts --------------------------------------------------------------------------------
    def __repr__(self) -> str:
        return f"Segment(base_offset={self.base_offset}, next_offset={self.next_offset}, size={self.size})"

    @property
    def is_empty(self) -> bool:
        return self.size == 0

    @property
    def indexes_full(self) -> bool:
        return self.index.is_full or self.time_index.is_full

    def largest_timestamp(self) -> int:
        """The largest record timestamp, or the file's modification time when it has none."""
        if self.max_timestamp >= 0:
            return self.max_timestamp
        return int(os.fstat(self._fd).st_mtime * 1000)

    # -- writing ------------------------------------------------------------------------------
    def append(self, data: bytes | bytearray | memoryview | list[bytes | bytearray | memoryview],
               first_offset: int, next_offset: int, max_timestamp: int, offset_of_max_timestamp: int) -> int:
        """Append whole batches (offsets assigned) at the end; returns the start position.

        ``data`` may be one buffer or a list of buffers written in order with one vectored
        write (so callers can stamp headers without copying the batches)."""
        if next_offset - 1 - self.base_offset > INT32_MAX:
            raise StorageError(f"offset {next_offset - 1} does not fit segment {self.base_offset}")
        position = self.size
        buffers = data if isinstance(data, list) else [data]
        index_entries = len(self.index)
        time_index_entries = len(self.time_index)
        try:
            length = _write_all(self._fd, buffers, position)
            if self._bytes_since_index_entry > self.index_interval_bytes:
                self.index.append(first_offset, position)
                self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
                self._bytes_since_index_entry = 0
        except OSError as exc:
            self._roll_back(exc, position, index_entries, time_index_entries)
            raise
        self._bytes_since_index_entry += length
        self.size = position + length
        self.next_offset = next_offset
        if max_timestamp > self.max_timestamp:
            self.max_timestamp = max_timestamp
            self.offset_of_max_timestamp = offset_of_max_timestamp
        return position

    def _roll_back(self, cause: OSError, position: int, index_entries: int, time_index_entries: int) -> None:
        """Undo a failed append: cut the file back to ``position`` (the end of the last whole
        batch) and both indexes back to their previous entries, so no torn bytes stay behind
        the segment's logical end. A rollback that fails itself raises LogDirOfflineError."""
        try:
            os.ftruncate(self._fd, position)
            self.index.restore_length(index_entries)
            self.time_index.restore_length(time_index_entries)
            actual = os.fstat(self._fd).st_size
        except OSError as exc:
            raise LogDirOfflineError(
                f"append to {self.log_path} failed ({cause.strerror or cause}) and the rollback to byte "
                f"{position} failed too ({exc.strerror or exc})") from cause
        if actual != position:
            raise LogDirOfflineError(
                f"append to {self.log_path} failed ({cause.strerror or cause}) and the file is {actual} bytes "
                f"after the rollback to byte {position}") from cause

    def trim_torn_tail(self) -> int:
        """Cut any bytes past the segment's logical end (left by a write whose rollback could
        not be confirmed); returns how many. Called before a segment stops being active, so a
        segment never rolls over a torn tail."""
        actual = os.fstat(self._fd).st_size
        if actual <= self.size:
            return 0
        os.ftruncate(self._fd, self.size)
        log.warning("cut %d bytes past the logical end (byte %d) of %s", actual - self.size, self.size,
                    self.log_path)
        return actual - self.size

    def flush(self) -> None:
        """fsync the log and its indexes (may run on a worker thread)."""
        if self.closed:
            return
        try:
            os.fsync(self._fd)
            self.index.flush()
            self.time_index.flush()
            self.txn_index.flush()
        except OSError as exc:
            if not self.closed:
                raise StorageError(f"fsync of {self.log_path} failed: {exc.strerror}") from exc

    def truncate_to(self, offset: int) -> int:
        """Remove every batch that holds an offset at or above ``offset``; returns bytes removed."""
        position = self.position_of(offset)
        if position is None:
            return 0
        removed = self.size - position
        os.ftruncate(self._fd, position)
        self.size = position
        self.index.truncate_to_position(position)
        self.time_index.truncate_to_offset(offset)
        self.txn_index.truncate_to(offset)
        self._reload_tail()
        return removed

    # -- reading ------------------------------------------------------------------------------
    def read_bytes(self, position: int, size: int) -> bytes:
        return os.pread(self._fd, size, position)

    def position_of(self, offset: int) -> int | None:
        """Position of the first batch whose last offset is >= ``offset``; None if no such batch."""
        if offset >= self.next_offset:
            return None
        _, position = self.index.lookup(offset)
        # Usually the indexed batch holds the offset: one short header read, no walk.
        header = os.pread(self._fd, _HEADER_PROBE, position)
        if len(header) == _HEADER_PROBE:
            _base, batch_length = _BATCH_PREFIX.unpack_from(header)
            if batch_length >= MIN_BATCH_LENGTH \
                    and _base + _INT32.unpack_from(header, _LAST_OFFSET_DELTA_AT)[0] >= offset:
                return position
        for batch_position, _base, last_offset, _ts in self._walk_headers(position):
            if last_offset >= offset:
                return batch_position
        return None

    def read(self, position: int, max_bytes: int, max_offset: int, min_one_batch: bool) -> bytes | memoryview:
        """Whole batches from ``position``: at most ``max_bytes`` (but the first batch whole when
        ``min_one_batch``), none holding an offset at or above ``max_offset``.

        A read cut short of what was read from the file (the next batch does not fit) is a
        read-only view of the front of that read: a fetch answer's megabytes are not copied
        again to drop the part of a batch that will not be sent."""
        available = self.size - position
        if available <= 0:
            return b""
        buffer = os.pread(self._fd, min(max(max_bytes, _HEADER_PROBE), available), position)
        cursor = 0
        limit = min(len(buffer), max_bytes)
        while limit - cursor >= _HEADER_PROBE:
            base_offset, batch_length = _BATCH_PREFIX.unpack_from(buffer, cursor)
            last_offset = base_offset + _INT32.unpack_from(buffer, cursor + _LAST_OFFSET_DELTA_AT)[0]
            if last_offset >= max_offset or cursor + LOG_OVERHEAD + batch_length > limit:
                break
            cursor += LOG_OVERHEAD + batch_length
        if cursor == 0 and min_one_batch and len(buffer) >= _HEADER_PROBE:
            base_offset, batch_length = _BATCH_PREFIX.unpack_from(buffer, 0)
            last_offset = base_offset + _INT32.unpack_from(buffer, _LAST_OFFSET_DELTA_AT)[0]
            size = LOG_OVERHEAD + batch_length
            if last_offset < max_offset and size <= available and batch_length >= MIN_BATCH_LENGTH:
                return os.pread(self._fd, size, position)
        return memoryview(buffer)[:cursor] if cursor < len(buffer) else buffer

    def first_offset_at_or_after_time(self, timestamp: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with timestamp >= ``timestamp``, or None."""
        if self.max_timestamp < timestamp:
            return None
        start_offset = self.time_index.lookup_before(timestamp)
        start_position = self.position_of(start_offset)
        if start_position is None:
            return None
        for _, batch in self.scan(start_position):
            if batch.max_timestamp < timestamp:
                continue
            for record in batch.records():
                if record.timestamp >= timestamp:
                    return record.offset, record.timestamp
        return None

    def scan(self, position: int = 0, end: int | None = None, *, validate: bool = False,
             chunk_bytes: int = SCAN_CHUNK_BYTES) -> Iterator[tuple[int, RecordBatch]]:
        """Yield (file position, batch) from ``position``; damage raises with its file position."""
        end = self.size if end is None else end
        fd = self._fd
        while position < end:
            buffer = os.pread(fd, min(chunk_bytes, end - position), position)
            if len(buffer) < LOG_OVERHEAD:
                raise TruncatedBatchError(f"{len(buffer)} stray bytes at the end of the segment", position)
            batch_length = _BATCH_PREFIX.unpack_from(buffer, 0)[1]
            needed = batch_length + LOG_OVERHEAD
            if MIN_BATCH_LENGTH <= batch_length <= MAX_BATCH_SIZE and len(buffer) < needed <= end - position:
                buffer = os.pread(fd, needed, position)
            cursor = 0
            limit = len(buffer)
            while cursor < limit:
                try:
                    batch = RecordBatch(buffer, cursor)
                except TruncatedBatchError as exc:
                    if cursor > 0:
                        break  # the batch continues in the next chunk
                    raise TruncatedBatchError(exc.detail, position + cursor) from None
                except CorruptRecordError as exc:
                    raise CorruptRecordError(exc.detail, position + cursor) from None
                if validate and not batch.is_valid():
                    raise CorruptRecordError(
                        f"CRC mismatch for batch at offset {batch.base_offset}", position + cursor)
                yield position + cursor, batch
                cursor = batch.end_position
            position += cursor

    def _walk_headers(self, position: int) -> Iterator[tuple[int, int, int, int]]:
        """Yield (position, base offset, last offset, max timestamp) reading headers only."""
        end = self.size
        fd = self._fd
        chunk = LOOKUP_FIRST_CHUNK_BYTES
        while position < end:
            buffer = os.pread(fd, min(chunk, end - position), position)
            chunk = min(chunk * 2, LOOKUP_MAX_CHUNK_BYTES)
            cursor = 0
            limit = len(buffer)
            while limit - cursor >= _HEADER_PROBE:
                base_offset, batch_length = _BATCH_PREFIX.unpack_from(buffer, cursor)
                if batch_length < MIN_BATCH_LENGTH:
                    raise CorruptRecordError(f"batch length {batch_length} is out of range", position + cursor)
                last_offset = base_offset + _INT32.unpack_from(buffer, cursor + _LAST_OFFSET_DELTA_AT)[0]
                max_timestamp = _INT64.unpack_from(buffer, cursor + _MAX_TIMESTAMP_AT)[0]
                yield position + cursor, base_offset, last_offset, max_timestamp
                cursor += LOG_OVERHEAD + batch_length
            if cursor == 0:
                raise TruncatedBatchError("batch header cut short", position)
            position += cursor

    def batch_headers(self) -> Iterator[BatchHeader]:
        """Every batch's header, reading headers only (cheap even for large segments)."""
        end = self.size
        position = 0
        fd = self._fd
        while position < end:
            buffer = os.pread(fd, min(LOOKUP_MAX_CHUNK_BYTES, end - position), position)
            cursor = 0
            while len(buffer) - cursor >= HEADER_SIZE:
                (base_offset, batch_length, leader_epoch, _magic, _crc, attributes, last_delta, _base_timestamp,
                 max_timestamp, producer_id, producer_epoch, base_sequence, _count) = _FULL_HEADER.unpack_from(
                    buffer, cursor)
                if batch_length < MIN_BATCH_LENGTH:
                    raise CorruptRecordError(f"batch length {batch_length} is out of range", position + cursor)
                last_sequence = -1 if base_sequence < 0 else (base_sequence + last_delta) & 0x7FFFFFFF
                yield BatchHeader(base_offset, base_offset + last_delta, leader_epoch, max_timestamp, producer_id,
                                  producer_epoch, base_sequence, last_sequence, attributes)
                cursor += LOG_OVERHEAD + batch_length
            if cursor == 0:
                raise TruncatedBatchError("batch header cut short", position)
            position += cursor

    # -- opening and recovery -----------------------------------------------------------------
    def load(self) -> None:
        """Open after a clean shutdown: trust the indexes when sane, else rebuild them."""
        index_ok = self.index.load(self.size)
        time_ok = self.time_index.load(INT32_MAX)
        txn_ok = self.txn_index.load()
        if not (index_ok and time_ok and txn_ok):
            log.info("rebuilding damaged or missing indexes of %s", self.log_path)
            self.recover()
            return
        try:
            self._reload_tail()
        except CorruptRecordError:
            log.warning("segment %s has a damaged tail; recovering it", self.log_path)
            self.recover()
            return
        self._init_created_ms()

    def recover(self, max_batch_bytes: int = MAX_BATCH_SIZE) -> int:
        """Validate every batch, rebuild both indexes, and cut the file at the first damaged or
        torn batch. Returns the number of bytes truncated. The ``.txnindex`` is emptied and
        marked stale: the producer-state rebuild, which knows where transactions start, writes
        it again."""
        self.index.reset()
        self.time_index.reset()
        self.txn_index.reset()
        self.next_offset = self.base_offset
        self.max_timestamp = -1
        self.offset_of_max_timestamp = self.base_offset
        self._bytes_since_index_entry = 0
        valid_end = 0
        previous_next = self.base_offset
        try:
            for position, batch in self.scan(0, validate=True):
                if batch.base_offset < previous_next or batch.last_offset - self.base_offset > INT32_MAX \
                        or batch.size > max_batch_bytes:
                    raise CorruptRecordError(
                        f"batch offsets {batch.base_offset}..{batch.last_offset} do not follow {previous_next - 1}",
                        position)
                if self._bytes_since_index_entry > self.index_interval_bytes:
                    self.index.append(batch.base_offset, position)
                    self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
                    self._bytes_since_index_entry = 0
                self._bytes_since_index_entry += batch.size
                if batch.max_timestamp > self.max_timestamp:
                    self.max_timestamp = batch.max_timestamp
                    self.offset_of_max_timestamp = batch.last_offset
                previous_next = batch.next_offset
                valid_end = position + batch.size
        except CorruptRecordError as exc:
            log.warning("truncating %s at byte %d: %s", self.log_path, valid_end, exc)
        truncated = self.size - valid_end
        if truncated:
            os.ftruncate(self._fd, valid_end)
            self.size = valid_end
        self.next_offset = previous_next
        self._init_created_ms()
        return truncated

    def _reload_tail(self) -> None:
        """Recompute next offset and max timestamp from the last index entry to the end."""
        start_position = self.index.last_position
        next_offset = self.base_offset
        max_timestamp = self.time_index.last_timestamp
        offset_of_max = self.base_offset + self.time_index.last_relative_offset
        bytes_since = 0
        for position, _base, last_offset, batch_max_timestamp in self._walk_headers(start_position):
            next_offset = last_offset + 1
            if batch_max_timestamp > max_timestamp:
                max_timestamp = batch_max_timestamp
                offset_of_max = last_offset
            bytes_since = self.size - position
        if start_position < self.size and next_offset == self.base_offset:
            raise CorruptRecordError("no batch found after the last index entry", start_position)
        self.next_offset = next_offset if self.size else self.base_offset
        self.max_timestamp = max_timestamp
        self.offset_of_max_timestamp = offset_of_max
        self._bytes_since_index_entry = bytes_since

    def _init_created_ms(self) -> None:
        if not self.created_ms:
            self.created_ms = int(os.fstat(self._fd).st_mtime * 1000)

    # -- lifecycle ----------------------------------------------------------------------------
    def rename_suffix(self, suffix: str) -> None:
        """Rename all three files to carry ``suffix`` ("" for the live names)."""
        for kind, index in ((files.LOG_SUFFIX, None), (files.INDEX_SUFFIX, self.index),
                            (files.TIME_INDEX_SUFFIX, self.time_index)):
            source = files.segment_path(self.directory, self.base_offset, kind, self.suffix)
            target = files.segment_path(self.directory, self.base_offset, kind, suffix)
            if source.exists():
                os.replace(source, target)
            if index is None:  # the log file itself
                self.log_path = target
            else:
                index.path = target
        self.txn_index.rename(files.segment_path(self.directory, self.base_offset, files.TXN_INDEX_SUFFIX, suffix))
        self.suffix = suffix

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        os.close(self._fd)
        self._fd = -1
        self.index.close()
        self.time_index.close()
        self.txn_index.close()

    def delete_files(self) -> None:
        """Close and unlink the files (the ``.txnindex`` too)."""
        self.close()
        self.txn_index.delete()
        for path in (self.log_path, self.index.path, self.time_index.path):
            try:
                path.unlink()
            except FileNotFoundError:
                pass


_IOV_MAX = 512


def _write_all(fd: int, buffers: list[bytes | bytearray | memoryview], position: int) -> int:
    """Write ``buffers`` back to back at ``position`` (vectored, resuming after short writes)."""
    views = [memoryview(buffer).cast("B") for buffer in buffers]
    total = sum(len(view) for view in views)
    start = position
    while views:
        group = views[:_IOV_MAX]
        written = os.pwritev(fd, group, position)
        if written == 0:
            raise OSError(errno.EIO, "write made no progress")
        position += written
        consumed = 0
        while consumed < len(group) and written >= len(group[consumed]):
            written -= len(group[consumed])
            consumed += 1
        views = views[consumed:]
        if written and views:
            views[0] = views[0][written:]
    if position - start != total:
        raise StorageError(f"short write: {position - start} of {total} bytes")
    return total


def last_offset_in_file(path: Path) -> int:
    """The last offset of the last whole batch header in a segment file, reading headers only
    (-1 when none can be read). Recovery uses it to report what it drops."""
    last = -1
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return last
    try:
        size = os.fstat(fd).st_size
        position = 0
        while position + _HEADER_PROBE <= size:
            header = os.pread(fd, _HEADER_PROBE, position)
            if len(header) < _HEADER_PROBE:
                break
            batch_base, batch_length = _BATCH_PREFIX.unpack_from(header)
            if batch_length < MIN_BATCH_LENGTH or position + LOG_OVERHEAD + batch_length > size:
                break
            last = batch_base + _INT32.unpack_from(header, _LAST_OFFSET_DELTA_AT)[0]
            position += LOG_OVERHEAD + batch_length
    except OSError:
        pass
    finally:
        os.close(fd)
    return last
