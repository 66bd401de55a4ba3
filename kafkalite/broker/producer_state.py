"""Idempotent-producer state of one partition: per producer id, its epoch and last 5 batches.

Kafka's rules (reference §7.4), checked on the leader before a client batch is appended:

* producer epoch below the stored one → INVALID_PRODUCER_EPOCH;
* a newer epoch must start at sequence 0 → else OUT_OF_ORDER_SEQUENCE_NUMBER;
* same epoch, and (first, last) sequence equal to one of the 5 cached batches → a duplicate
  (a retry whose first attempt was written): nothing is appended, the original offsets answer;
* same epoch otherwise → the first sequence must follow the last one (wrapping after
  INT32_MAX) → else OUT_OF_ORDER_SEQUENCE_NUMBER;
* no state for the producer (new, or expired) → any sequence is accepted.

The state is rebuilt from batch headers when a log is opened and kept current on followers
from the replicated batches, so it survives a leader failover.

Concurrency: event-loop only (the owning Partition serialises access).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol

from kafkalite.errors import InvalidProducerEpochError, OutOfOrderSequenceNumberError


class BatchFacts(Protocol):
    """What the state needs of a batch (a RecordBatch or a stored BatchHeader)."""

    @property
    def producer_id(self) -> int: ...

    @property
    def producer_epoch(self) -> int: ...

    @property
    def base_sequence(self) -> int: ...

    @property
    def last_sequence(self) -> int: ...

    @property
    def max_timestamp(self) -> int: ...

    @property
    def base_offset(self) -> int: ...

    @property
    def last_offset(self) -> int: ...

CACHED_BATCHES = 5
INT32_MAX = (1 << 31) - 1


@dataclass(frozen=True)
class BatchEntry:
    first_sequence: int
    last_sequence: int
    first_offset: int
    last_offset: int
    timestamp: int


@dataclass
class ProducerEntry:
    epoch: int
    batches: deque[BatchEntry] = field(default_factory=lambda: deque(maxlen=CACHED_BATCHES))
    last_timestamp: int = -1

    @property
    def last_sequence(self) -> int:
        return self.batches[-1].last_sequence if self.batches else -1


def _next_sequence(sequence: int) -> int:
    return 0 if sequence == INT32_MAX else sequence + 1


class ProducerStateManager:
    """Per-partition producer id → epoch and recent batches."""

    def __init__(self, expiration_ms: int = 86_400_000) -> None:
        self.producers: dict[int, ProducerEntry] = {}
        self.expiration_ms = expiration_ms

    def check(self, batch: BatchFacts) -> BatchEntry | None:
        """Validate a client batch; returns the cached entry when it is a duplicate."""
        producer_id = batch.producer_id
        if producer_id < 0 or batch.base_sequence < 0:
            return None
        entry = self.producers.get(producer_id)
        if entry is None:
            return None
        if batch.producer_epoch < entry.epoch:
            raise InvalidProducerEpochError(
                f"producer {producer_id} epoch {batch.producer_epoch} is older than {entry.epoch}")
        first, last = batch.base_sequence, batch.last_sequence
        if batch.producer_epoch > entry.epoch:
            if first != 0:
                raise OutOfOrderSequenceNumberError(
                    f"producer {producer_id} new epoch {batch.producer_epoch} must start at sequence 0, not {first}")
            return None
        for cached in entry.batches:
            if cached.first_sequence == first and cached.last_sequence == last:
                return cached
        expected = _next_sequence(entry.last_sequence)
        if entry.batches and first != expected:
            raise OutOfOrderSequenceNumberError(
                f"producer {producer_id}: sequence {first} does not follow {entry.last_sequence}")
        return None

    def update(self, batch: BatchFacts, first_offset: int, last_offset: int) -> None:
        """Record an appended batch (leader after append; follower on replication; recovery)."""
        producer_id = batch.producer_id
        if producer_id < 0:
            return
        entry = self.producers.get(producer_id)
        if entry is None or batch.producer_epoch > entry.epoch:
            entry = self.producers[producer_id] = ProducerEntry(batch.producer_epoch)
        elif batch.producer_epoch < entry.epoch:
            return
        if batch.base_sequence >= 0:
            entry.batches.append(BatchEntry(batch.base_sequence, batch.last_sequence, first_offset, last_offset,
                                            batch.max_timestamp))
        entry.last_timestamp = max(entry.last_timestamp, batch.max_timestamp)

    def rebuild(self, batches: Iterable[BatchFacts]) -> None:
        self.producers.clear()
        for batch in batches:
            if batch.producer_id >= 0:
                self.update(batch, batch.base_offset, batch.last_offset)

    def truncate_to(self, offset: int) -> None:
        """Forget batches at or above ``offset`` (the log was truncated)."""
        for producer_id in list(self.producers):
            entry = self.producers[producer_id]
            kept = [cached for cached in entry.batches if cached.last_offset < offset]
            if len(kept) != len(entry.batches):
                if kept:
                    entry.batches = deque(kept, maxlen=CACHED_BATCHES)
                else:
                    del self.producers[producer_id]

    def expire(self, now_ms: int) -> int:
        doomed = [producer_id for producer_id, entry in self.producers.items()
                  if entry.last_timestamp >= 0 and now_ms - entry.last_timestamp > self.expiration_ms]
        for producer_id in doomed:
            del self.producers[producer_id]
        return len(doomed)
