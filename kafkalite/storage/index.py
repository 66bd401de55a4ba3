"""Sparse offset and time indexes of one segment.

Indexes are derived data: they hold no checksum and are rebuilt from the log whenever they
look damaged or the broker did not shut down cleanly. The log (with a CRC per batch) is the
only source of truth.

``.index`` entries are 8 bytes: the batch's base offset relative to the segment's base offset
(int32) and the file position where that batch starts (int32). ``.timeindex`` entries are 12
bytes: a timestamp (int64) and a relative offset (int32); an entry is added only when the
timestamp is larger than the last entry's, so both columns increase.

Each new entry is written to the file at once, through a descriptor opened for that write only:
an index holds no open file, so a broker with thousands of partitions needs one descriptor per
segment (its log), not three. Memory holds a summary (every 32nd entry) and the last 4 blocks of
32 entries, not the whole index: a broker's memory does not grow with the data it keeps (an
index of every entry grew by about 1.3 MB a minute on a broker taking 2.7 MB/s). A lookup is two
binary searches: one in the summary (a few KiB even for a full 1 GiB segment), then one among
the 32 entries of the block it names, read from memory when the block is among the last ones
(where consumers and followers read) and with one ``pread`` from the file otherwise.
Thread-safety: not thread-safe; the owning :class:`~kafkalite.storage.segment.Segment`'s caller
serialises access.
"""

from __future__ import annotations

import os
import struct
from array import array
from bisect import bisect_left, bisect_right
from pathlib import Path

from kafkalite.storage import files

_OFFSET_ENTRY = struct.Struct(">ii")
_STRIDE = 32  # entries per block; the summary holds each block's first entry
_TAIL_BLOCKS = 4  # the last blocks, kept in memory whole
_TIME_ENTRY = struct.Struct(">qi")


class _SparseColumns:
    """The entries of one index file: two non-decreasing integer columns, an entry being
    ``entry.pack(first, second)`` at ``number * entry.size``.

    In memory: the summary (each block's first entry) and the entries from ``_tail_start`` (the
    start of one of the last :data:`_TAIL_BLOCKS` blocks) to the end. Other blocks are read from
    the file when a search lands in them.
    """

    def __init__(self, path: Path, entry: struct.Struct) -> None:
        self.path = path
        self._entry = entry
        self.count = 0
        self._summary: tuple[array[int], array[int]] = (array("q"), array("q"))
        self._tail_start = 0
        self._tail: tuple[array[int], array[int]] = (array("q"), array("q"))

    def last(self) -> tuple[int, int]:
        """The last entry (the index must not be empty)."""
        return self._tail[0][-1], self._tail[1][-1]

    def append(self, first: int, second: int) -> None:
        _write_at(self.path, self._entry.pack(first, second), self.count * self._entry.size)
        self._add(first, second)

    def _add(self, first: int, second: int) -> None:
        if self.count % _STRIDE == 0:
            self._summary[0].append(first)
            self._summary[1].append(second)
        self._tail[0].append(first)
        self._tail[1].append(second)
        self.count += 1
        if len(self._tail[0]) > _TAIL_BLOCKS * _STRIDE:
            del self._tail[0][:_STRIDE]
            del self._tail[1][:_STRIDE]
            self._tail_start += _STRIDE

    def _block(self, number: int) -> tuple[array[int], array[int]]:
        """The entries of block ``number`` (from memory, or read from the file)."""
        start = number * _STRIDE
        if start >= self._tail_start:
            end = min(start + _STRIDE, self.count)
            offset = start - self._tail_start
            return (self._tail[0][offset:end - self._tail_start], self._tail[1][offset:end - self._tail_start])
        return self._read(start, start + _STRIDE)

    def _read(self, start: int, end: int) -> tuple[array[int], array[int]]:
        size = self._entry.size
        fd = os.open(self.path, os.O_RDONLY)
        try:
            data = os.pread(fd, (end - start) * size, start * size)
        finally:
            os.close(fd)
        firsts: array[int] = array("q")
        seconds: array[int] = array("q")
        for first, second in self._entry.iter_unpack(data[:len(data) - len(data) % size]):
            firsts.append(first)
            seconds.append(second)
        return firsts, seconds

    def last_at_or_below(self, column: int, value: int) -> int:
        """The number of the last entry whose ``column`` is <= ``value`` (-1 when none)."""
        block = bisect_right(self._summary[column], value) - 1
        if block < 0:
            return -1
        return block * _STRIDE + bisect_right(self._block(block)[column], value) - 1

    def first_at_or_above(self, column: int, value: int) -> int:
        """The number of the first entry whose ``column`` is >= ``value`` (``count`` when none)."""
        block = bisect_left(self._summary[column], value) - 1
        if block < 0:
            return 0
        return block * _STRIDE + bisect_left(self._block(block)[column], value)

    def entry(self, number: int) -> tuple[int, int]:
        firsts, seconds = self._block(number // _STRIDE)
        return firsts[number % _STRIDE], seconds[number % _STRIDE]

    def truncate(self, keep: int) -> None:
        """Keep the first ``keep`` entries, in memory and in the file (a file longer than the
        entries in memory, after a partly written entry, is cut as well)."""
        if keep < self.count:
            del self._summary[0][(keep + _STRIDE - 1) // _STRIDE:]
            del self._summary[1][(keep + _STRIDE - 1) // _STRIDE:]
            if keep >= self._tail_start:
                del self._tail[0][keep - self._tail_start:]
                del self._tail[1][keep - self._tail_start:]
            else:
                start = max(0, ((keep - 1) // _STRIDE - _TAIL_BLOCKS + 1) * _STRIDE) if keep else 0
                self._tail = self._read(start, keep) if keep else (array("q"), array("q"))
                self._tail_start = start
            self.count = keep
        os.truncate(self.path, keep * self._entry.size)

    def reset(self) -> None:
        self.count = 0
        self._summary = (array("q"), array("q"))
        self._tail_start = 0
        self._tail = (array("q"), array("q"))
        os.truncate(self.path, 0)

    def replace(self, entries: list[tuple[int, int]]) -> None:
        """Take ``entries`` (already in the file) as the index's content."""
        self.count = 0
        self._summary = (array("q"), array("q"))
        self._tail_start = 0
        self._tail = (array("q"), array("q"))
        for first, second in entries:
            self._add(first, second)


class OffsetIndex:
    """Relative offset → file position, sparse, sorted by offset."""

    entry_size = _OFFSET_ENTRY.size

    def __init__(self, path: Path, base_offset: int, max_entries: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self.max_entries = max(1, max_entries)
        self._entries = _SparseColumns(path, _OFFSET_ENTRY)
        _create(path)

    def __len__(self) -> int:
        return self._entries.count

    @property
    def is_full(self) -> bool:
        return self._entries.count >= self.max_entries

    @property
    def last_position(self) -> int:
        """The file position of the last entry (0 when empty)."""
        return self._entries.last()[1] if self._entries.count else 0

    def load(self, log_size: int) -> bool:
        """Read the file; returns False (and empties the index) when its content is not sane."""
        data = self.path.read_bytes()
        if len(data) % self.entry_size:
            self.reset()
            return False
        entries = []
        previous_offset = -1
        previous_position = -1
        for relative_offset, position in _OFFSET_ENTRY.iter_unpack(data):
            if relative_offset <= previous_offset or position <= previous_position or position >= log_size \
                    or relative_offset < 0:
                self.reset()
                return False
            entries.append((relative_offset, position))
            previous_offset, previous_position = relative_offset, position
        self._entries.replace(entries)
        return True

    def append(self, offset: int, position: int) -> None:
        relative = offset - self.base_offset
        if self._entries.count:
            last_relative, last_position = self._entries.last()
            if relative <= last_relative or position <= last_position:
                return
        self._entries.append(relative, position)

    def lookup(self, offset: int) -> tuple[int, int]:
        """(offset, position) of the last entry at or before ``offset``; (base, 0) when none."""
        number = self._entries.last_at_or_below(0, offset - self.base_offset)
        if number < 0:
            return self.base_offset, 0
        relative, position = self._entries.entry(number)
        return self.base_offset + relative, position

    def truncate_to_offset(self, offset: int) -> None:
        """Drop entries for offsets at or above ``offset``."""
        keep = self._entries.first_at_or_above(0, offset - self.base_offset)
        if keep < self._entries.count:
            self._entries.truncate(keep)

    def truncate_to_position(self, position: int) -> None:
        """Drop entries pointing at or beyond ``position``."""
        keep = self._entries.first_at_or_above(1, position)
        if keep < self._entries.count:
            self._entries.truncate(keep)

    def reset(self) -> None:
        self._entries.reset()

    def restore_length(self, entries: int) -> None:
        """Keep the first ``entries`` entries and cut the file to exactly them (undoes a failed
        append, including a partly written entry past the in-memory ones)."""
        self._entries.truncate(min(entries, self._entries.count))

    def flush(self) -> None:
        files.fsync_path(self.path)

    def close(self) -> None:
        """Nothing to release: the index holds no open file."""


class TimeIndex:
    """Timestamp → relative offset, sparse, both columns increasing."""

    entry_size = _TIME_ENTRY.size

    def __init__(self, path: Path, base_offset: int, max_entries: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self.max_entries = max(1, max_entries)
        self._entries = _SparseColumns(path, _TIME_ENTRY)
        _create(path)

    def __len__(self) -> int:
        return self._entries.count

    @property
    def is_full(self) -> bool:
        return self._entries.count >= self.max_entries

    @property
    def last_timestamp(self) -> int:
        return self._entries.last()[0] if self._entries.count else -1

    @property
    def last_relative_offset(self) -> int:
        """The relative offset of the last entry (0 when empty)."""
        return self._entries.last()[1] if self._entries.count else 0

    def load(self, max_relative_offset: int) -> bool:
        data = self.path.read_bytes()
        if len(data) % self.entry_size:
            self.reset()
            return False
        entries: list[tuple[int, int]] = []
        for timestamp, relative_offset in _TIME_ENTRY.iter_unpack(data):
            if (entries and (timestamp <= entries[-1][0] or relative_offset < entries[-1][1])) \
                    or relative_offset < 0 or relative_offset > max_relative_offset:
                self.reset()
                return False
            entries.append((timestamp, relative_offset))
        self._entries.replace(entries)
        return True

    def maybe_append(self, timestamp: int, offset: int) -> None:
        """Add an entry when ``timestamp`` is newer than the last one."""
        if timestamp <= self.last_timestamp:
            return
        relative = offset - self.base_offset
        if self._entries.count and relative < self._entries.last()[1]:
            return
        self._entries.append(timestamp, relative)

    def lookup_before(self, timestamp: int) -> int:
        """Offset of the last entry whose timestamp is strictly below ``timestamp``.

        Every record before that offset has a timestamp below ``timestamp``, so a scan for the
        first record at or after ``timestamp`` may start at the returned offset's batch.
        """
        number = self._entries.first_at_or_above(0, timestamp) - 1
        if number < 0:
            return self.base_offset
        return self.base_offset + self._entries.entry(number)[1]

    def truncate_to_offset(self, offset: int) -> None:
        keep = self._entries.first_at_or_above(1, offset - self.base_offset)
        if keep < self._entries.count:
            self._entries.truncate(keep)

    def reset(self) -> None:
        self._entries.reset()

    def restore_length(self, entries: int) -> None:
        """Keep the first ``entries`` entries and cut the file to exactly them."""
        self._entries.truncate(min(entries, self._entries.count))

    def flush(self) -> None:
        files.fsync_path(self.path)

    def close(self) -> None:
        """Nothing to release: the index holds no open file."""


def _create(path: Path) -> None:
    os.close(os.open(path, os.O_RDWR | os.O_CREAT, 0o644))


def _write_at(path: Path, data: bytes, position: int) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.pwrite(fd, data, position)
    finally:
        os.close(fd)
