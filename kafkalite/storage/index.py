"""Sparse offset and time indexes of one segment.

Indexes are derived data: they hold no checksum and are rebuilt from the log whenever they
look damaged or the broker did not shut down cleanly. The log (with a CRC per batch) is the
only source of truth.

``.index`` entries are 8 bytes: the batch's base offset relative to the segment's base offset
(int32) and the file position where that batch starts (int32). ``.timeindex`` entries are 12
bytes: a timestamp (int64) and a relative offset (int32); an entry is added only when the
timestamp is larger than the last entry's, so both columns increase.

The entries are kept in memory (arrays) and each new one is written to the file at once, through
a descriptor opened for that write only: an index holds no open file, so a broker with thousands
of partitions needs one descriptor per segment (its log), not three. An offset lookup is two binary
searches: one in a summary list holding every 32nd entry's offset (a few KiB even for a full
1 GiB segment, searched at C speed), then one among the 32 entries that summary entry
starts — the same work, and nearly the same memory touched, for a small index and a large one.
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
_STRIDE = 32  # one summary entry per this many index entries
_TIME_ENTRY = struct.Struct(">qi")


class OffsetIndex:
    """Relative offset → file position, sparse, sorted by offset."""

    entry_size = _OFFSET_ENTRY.size

    def __init__(self, path: Path, base_offset: int, max_entries: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self.max_entries = max(1, max_entries)
        self.relative_offsets: array[int] = array("q")
        self.positions: array[int] = array("q")
        self._summary: list[int] = []  # relative_offsets[::_STRIDE]
        _create(path)

    def __len__(self) -> int:
        return len(self.positions)

    @property
    def is_full(self) -> bool:
        return len(self.positions) >= self.max_entries

    def load(self, log_size: int) -> bool:
        """Read the file; returns False (and empties the index) when its content is not sane."""
        data = self.path.read_bytes()
        if len(data) % self.entry_size:
            self.reset()
            return False
        offsets: array[int] = array("q")
        positions: array[int] = array("q")
        previous_offset = -1
        previous_position = -1
        for relative_offset, position in _OFFSET_ENTRY.iter_unpack(data):
            if relative_offset <= previous_offset or position <= previous_position or position >= log_size \
                    or relative_offset < 0:
                self.reset()
                return False
            offsets.append(relative_offset)
            positions.append(position)
            previous_offset, previous_position = relative_offset, position
        self.relative_offsets, self.positions = offsets, positions
        self._summary = offsets[::_STRIDE].tolist()
        return True

    def append(self, offset: int, position: int) -> None:
        relative = offset - self.base_offset
        if self.positions and (relative <= self.relative_offsets[-1] or position <= self.positions[-1]):
            return
        count = len(self.positions)
        _write_at(self.path, _OFFSET_ENTRY.pack(relative, position), count * self.entry_size)
        self.relative_offsets.append(relative)
        self.positions.append(position)
        if count % _STRIDE == 0:
            self._summary.append(relative)

    def lookup(self, offset: int) -> tuple[int, int]:
        """(offset, position) of the last entry at or before ``offset``; (base, 0) when none."""
        target = offset - self.base_offset
        block = bisect_right(self._summary, target) - 1
        if block < 0:
            return self.base_offset, 0
        offsets = self.relative_offsets
        low = block * _STRIDE
        index = bisect_right(offsets, target, low, min(low + _STRIDE, len(offsets))) - 1
        return self.base_offset + offsets[index], self.positions[index]

    def truncate_to_offset(self, offset: int) -> None:
        """Drop entries for offsets at or above ``offset``."""
        keep = bisect_left(self.relative_offsets, offset - self.base_offset)
        self._truncate_entries(keep)

    def truncate_to_position(self, position: int) -> None:
        """Drop entries pointing at or beyond ``position``."""
        keep = bisect_left(self.positions, position)
        self._truncate_entries(keep)

    def _truncate_entries(self, keep: int) -> None:
        if keep < len(self.positions):
            del self.relative_offsets[keep:]
            del self.positions[keep:]
            del self._summary[(keep + _STRIDE - 1) // _STRIDE:]
            os.truncate(self.path, keep * self.entry_size)

    def reset(self) -> None:
        self.relative_offsets = array("q")
        self.positions = array("q")
        self._summary = []
        os.truncate(self.path, 0)

    def restore_length(self, entries: int) -> None:
        """Keep the first ``entries`` entries and cut the file to exactly them (undoes a failed
        append, including a partly written entry past the in-memory ones)."""
        if entries < len(self.positions):
            del self.relative_offsets[entries:]
            del self.positions[entries:]
            del self._summary[(entries + _STRIDE - 1) // _STRIDE:]
        os.truncate(self.path, entries * self.entry_size)

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
        self.timestamps: array[int] = array("q")
        self.relative_offsets: array[int] = array("q")
        _create(path)

    def __len__(self) -> int:
        return len(self.timestamps)

    @property
    def is_full(self) -> bool:
        return len(self.timestamps) >= self.max_entries

    @property
    def last_timestamp(self) -> int:
        return self.timestamps[-1] if self.timestamps else -1

    def load(self, max_relative_offset: int) -> bool:
        data = self.path.read_bytes()
        if len(data) % self.entry_size:
            self.reset()
            return False
        timestamps: array[int] = array("q")
        offsets: array[int] = array("q")
        for timestamp, relative_offset in _TIME_ENTRY.iter_unpack(data):
            if (timestamps and (timestamp <= timestamps[-1] or relative_offset < offsets[-1])) \
                    or relative_offset < 0 or relative_offset > max_relative_offset:
                self.reset()
                return False
            timestamps.append(timestamp)
            offsets.append(relative_offset)
        self.timestamps, self.relative_offsets = timestamps, offsets
        return True

    def maybe_append(self, timestamp: int, offset: int) -> None:
        """Add an entry when ``timestamp`` is newer than the last one."""
        if timestamp <= self.last_timestamp:
            return
        relative = offset - self.base_offset
        if self.relative_offsets and relative < self.relative_offsets[-1]:
            return
        _write_at(self.path, _TIME_ENTRY.pack(timestamp, relative), len(self.timestamps) * self.entry_size)
        self.timestamps.append(timestamp)
        self.relative_offsets.append(relative)

    def lookup_before(self, timestamp: int) -> int:
        """Offset of the last entry whose timestamp is strictly below ``timestamp``.

        Every record before that offset has a timestamp below ``timestamp``, so a scan for the
        first record at or after ``timestamp`` may start at the returned offset's batch.
        """
        index = bisect_left(self.timestamps, timestamp) - 1
        if index < 0:
            return self.base_offset
        return self.base_offset + self.relative_offsets[index]

    def truncate_to_offset(self, offset: int) -> None:
        keep = bisect_left(self.relative_offsets, offset - self.base_offset)
        if keep < len(self.timestamps):
            del self.timestamps[keep:]
            del self.relative_offsets[keep:]
            os.truncate(self.path, keep * self.entry_size)

    def reset(self) -> None:
        self.timestamps = array("q")
        self.relative_offsets = array("q")
        os.truncate(self.path, 0)

    def restore_length(self, entries: int) -> None:
        """Keep the first ``entries`` entries and cut the file to exactly them."""
        if entries < len(self.timestamps):
            del self.timestamps[entries:]
            del self.relative_offsets[entries:]
        os.truncate(self.path, entries * self.entry_size)

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
