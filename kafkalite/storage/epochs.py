"""Leader epoch cache of one partition: which leader epoch started at which offset.

Persisted in ``leader-epoch-checkpoint`` inside the partition directory. A new entry is
recorded when a batch with a larger partition leader epoch is appended. Followers use
:meth:`LeaderEpochCache.end_offset_for` answers from the leader to find where their log
diverges (Kafka's KIP-101 / KIP-279 rule) instead of truncating to the high watermark.

An epoch recorded when a leader takes office (no batch carries it yet) may stay in memory
until the next append writes the file (:meth:`sync` before the batch), or the periodic
checkpoint does: a crash loses only an epoch no batch of this log carries, which no
follower can ask about. Every batch's epoch is on disk before the batch is.

Thread-safety: not thread-safe; the owning PartitionLog serialises access.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from kafkalite.storage import checkpoint

UNDEFINED_EPOCH = -1
UNDEFINED_OFFSET = -1


class LeaderEpochCache:
    """Ordered (epoch, start offset) entries with strictly increasing epochs and offsets."""

    def __init__(self, path: Path, on_unsynced: Callable[[LeaderEpochCache], None] | None = None) -> None:
        self.path = path
        self.entries: list[tuple[int, int]] = checkpoint.read_epochs(path) if path.exists() else []
        #: An epoch was recorded in memory only (``assign(..., persist=False)``).
        self.unsynced = False
        #: The file still holds entries memory dropped (``truncate_from_end(..., persist=False)``):
        #: harmless while the log does not grow past them, so it is written before the next batch.
        self.file_stale = False
        self._on_unsynced = on_unsynced

    @property
    def latest_epoch(self) -> int:
        return self.entries[-1][0] if self.entries else UNDEFINED_EPOCH

    def assign(self, epoch: int, start_offset: int, persist: bool = True) -> None:
        """Record that ``epoch`` starts at ``start_offset`` (ignored unless epoch is newer).
        With ``persist`` the file is written now (an OSError undoes the entry and is raised);
        without, the entry waits in memory for :meth:`sync`."""
        if epoch < 0 or (self.entries and epoch <= self.entries[-1][0]):
            return
        previous = list(self.entries)
        while self.entries and self.entries[-1][1] >= start_offset:
            self.entries.pop()
        self.entries.append((epoch, start_offset))
        if persist:
            self._persist(previous)
        elif not self.unsynced:
            self.unsynced = True
            if self._on_unsynced is not None:
                self._on_unsynced(self)

    def sync(self, before_append: bool = False) -> None:
        """Write the entries when one is in memory only (or, ``before_append``, when the file
        holds entries memory dropped); an OSError is raised and the entries stay to be written
        by a later call."""
        if self.unsynced or (before_append and self.file_stale):
            self._persist()

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(epoch, end offset) answering a follower whose last epoch is ``requested_epoch``.

        Kafka's rule: the latest epoch ends at the log end offset; an older epoch ends where the
        next larger known epoch starts, reported under the largest known epoch <= the request;
        an epoch below every known epoch ends where the first known epoch starts; an epoch above
        the latest (or an empty cache) is undefined: (UNDEFINED_EPOCH, UNDEFINED_OFFSET).
        """
        if not self.entries or requested_epoch > self.entries[-1][0]:
            return UNDEFINED_EPOCH, UNDEFINED_OFFSET
        if requested_epoch == self.entries[-1][0]:
            return requested_epoch, log_end_offset
        floor = None
        for index, (epoch, _start) in enumerate(self.entries):
            if epoch <= requested_epoch:
                floor = index
            else:
                higher_start = self.entries[index][1]
                if floor is None:
                    return requested_epoch, higher_start
                return self.entries[floor][0], higher_start
        return UNDEFINED_EPOCH, UNDEFINED_OFFSET  # not reached: the latest epoch is > requested

    def epoch_for_offset(self, offset: int) -> int:
        epoch = UNDEFINED_EPOCH
        for entry_epoch, start in self.entries:
            if start <= offset:
                epoch = entry_epoch
            else:
                break
        return epoch

    def truncate_from_end(self, end_offset: int, persist: bool = True) -> None:
        """Forget epochs that start at or after ``end_offset`` (after a log truncation). Without
        ``persist`` only memory changes: for the truncation every load of the log makes (the
        file keeps entries past the log end until it is next written; the next load drops
        them again)."""
        kept = [entry for entry in self.entries if entry[1] < end_offset]
        if kept != self.entries:
            self.entries = kept
            if persist:
                self._persist()  # the log was cut already: memory follows the log even if this fails
            else:
                self.file_stale = True

    def truncate_from_start(self, start_offset: int) -> None:
        """Forget epochs wholly below ``start_offset`` (after segments were deleted)."""
        kept: list[tuple[int, int]] = []
        for index, (epoch, start) in enumerate(self.entries):
            next_start = self.entries[index + 1][1] if index + 1 < len(self.entries) else None
            if next_start is not None and next_start <= start_offset:
                continue
            kept.append((epoch, max(start, start_offset)))
        if kept != self.entries:
            self.entries = kept
            self._persist()

    def clear(self) -> None:
        self.entries = []
        self._persist()

    def _persist(self, previous: list[tuple[int, int]] | None = None) -> None:
        """Write the entries; when that fails, go back to ``previous`` (memory and file then
        agree) and re-raise the ``OSError``."""
        try:
            checkpoint.write_epochs(self.path, self.entries)
        except OSError:
            if previous is not None:
                self.entries = previous
            raise
        self.unsynced = False
        self.file_stale = False
