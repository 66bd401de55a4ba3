"""The aborted-transaction index of one segment (``<base>.txnindex``), Kafka's format.

One 34-byte entry per transaction aborted by a marker in the segment, in marker order, all
integers big-endian::

    int16 version (0) | int64 producer_id | int64 first_offset | int64 last_offset |
    int64 last_stable_offset

``first_offset`` is the transaction's first offset in the partition (it may lie in an earlier
segment), ``last_offset`` the abort marker's offset, ``last_stable_offset`` the partition's LSO
right after the marker was written. A read_committed fetch from offset ``f`` up to ``u`` needs
every entry with ``last_offset >= f`` and ``first_offset < u``: those are in the segments from
the one holding ``f`` onwards (a marker follows its data), so :meth:`TransactionIndex.collect`
is asked segment by segment.

Like the other indexes it is derived data: emptied and rebuilt from the markers when its segment
is recovered, truncated with its segment and renamed and deleted with it.

Thread-safety: not thread-safe; the owning segment's caller serialises access.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path

from kafkalite.errors import CorruptRecordError

TXN_INDEX_VERSION = 0
_ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = _ENTRY.size  # 34


@dataclass(frozen=True)
class AbortedTxn:
    """One aborted transaction: who, from where to its abort marker, and the LSO after it."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int

    def encode(self) -> bytes:
        return _ENTRY.pack(TXN_INDEX_VERSION, self.producer_id, self.first_offset, self.last_offset,
                           self.last_stable_offset)

    @classmethod
    def decode(cls, data: bytes | bytearray | memoryview, position: int = 0) -> AbortedTxn:
        version, producer_id, first_offset, last_offset, last_stable = _ENTRY.unpack_from(data, position)
        if version != TXN_INDEX_VERSION:
            raise CorruptRecordError(f"transaction index entry version {version} is not {TXN_INDEX_VERSION}",
                                     position)
        return cls(producer_id, first_offset, last_offset, last_stable)


def decode_entries(data: bytes | bytearray | memoryview) -> list[AbortedTxn]:
    """Every entry of a ``.txnindex`` file's bytes; damage raises CorruptRecordError."""
    if len(data) % ENTRY_SIZE:
        raise CorruptRecordError(f"transaction index of {len(data)} bytes is not a multiple of {ENTRY_SIZE}")
    return [AbortedTxn.decode(data, position) for position in range(0, len(data), ENTRY_SIZE)]


class TransactionIndex:
    """The entries of one ``.txnindex`` file, kept in memory and appended to the file.

    The file is created on the first entry (most segments have none)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.entries: list[AbortedTxn] = []
        self._fd = -1
        #: True when the entries may miss some (the segment was recovered): the producer-state
        #: rebuild then writes them again.
        self.stale = False

    def __len__(self) -> int:
        return len(self.entries)

    def load(self) -> bool:
        """Read the file; False (and an empty, stale index) when it is damaged."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return True
        try:
            self.entries = decode_entries(data)
        except CorruptRecordError:
            self.reset()
            return False
        return True

    def _open(self) -> int:
        if self._fd < 0:
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        return self._fd

    def append(self, entry: AbortedTxn) -> None:
        if self.entries and entry.last_offset <= self.entries[-1].last_offset:
            raise CorruptRecordError(f"aborted transaction ending at {entry.last_offset} does not follow "
                                     f"{self.entries[-1].last_offset} in {self.path}")
        os.write(self._open(), entry.encode())
        self.entries.append(entry)

    def collect(self, fetch_offset: int, upper_bound: int) -> list[AbortedTxn]:
        """Entries of transactions that overlap [``fetch_offset``, ``upper_bound``)."""
        return [entry for entry in self.entries
                if entry.last_offset >= fetch_offset and entry.first_offset < upper_bound]

    def truncate_to(self, offset: int) -> None:
        """Drop the entries of markers at or above ``offset``."""
        kept = [entry for entry in self.entries if entry.last_offset < offset]
        if len(kept) == len(self.entries):
            return
        self.entries = kept
        if self.path.exists():
            os.truncate(self.path, len(kept) * ENTRY_SIZE)

    def reset(self) -> None:
        """Empty the index (recovery writes it again) and mark it stale."""
        self.entries = []
        self.stale = True
        if self.path.exists():
            os.truncate(self.path, 0)

    def flush(self) -> None:
        if self._fd >= 0:
            os.fsync(self._fd)

    def rename(self, path: Path) -> None:
        if self.path.exists():
            os.replace(self.path, path)
        self.path = path

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def delete(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)
