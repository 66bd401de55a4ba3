"""Idempotent-producer state of one partition: per producer id, its epoch and last 5 batches.

Kafka's rules (reference §7.4), checked on the leader before a client batch is appended:

* producer epoch below the stored one → INVALID_PRODUCER_EPOCH;
* a newer epoch must start at sequence 0 → else OUT_OF_ORDER_SEQUENCE_NUMBER;
* same epoch, and (first, last) sequence equal to one of the 5 cached batches → a duplicate
  (a retry whose first attempt was written): nothing is appended, the original offsets answer;
* same epoch otherwise → the first sequence must follow the last one (wrapping after
  INT32_MAX) → else OUT_OF_ORDER_SEQUENCE_NUMBER;
* no state for the producer (new, or expired) → any sequence is accepted.

Transactions (KIP-98): the first transactional batch of a producer opens its transaction
(its first offset is kept); the producer's commit or abort marker, written by the transaction
coordinator through the partition's leader, closes it. A marker is refused when its producer
epoch is older than the stored one (INVALID_PRODUCER_EPOCH) or its coordinator epoch older
than the last marker's (TRANSACTION_COORDINATOR_FENCED). The partition's first unstable offset
is the first offset of its earliest open transaction, or of a completed one whose marker is
not yet below the high watermark; the last stable offset (LSO) is the high watermark capped by
it. Every aborted transaction becomes an :class:`~kafkalite.storage.txnindex.AbortedTxn` entry
(with the LSO right after its marker) for the segment's ``.txnindex``.

The state is rebuilt from batch headers when a log is opened and kept current on followers
from the replicated batches, so it survives a leader failover.

Concurrency: event-loop only (the owning Partition serialises access).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Protocol

from kafkalite.errors import (
    InvalidProducerEpochError,
    InvalidRecordError,
    InvalidTxnStateError,
    OutOfOrderSequenceNumberError,
    TransactionCoordinatorFencedError,
)
from kafkalite.record.control import ControlMarker
from kafkalite.storage.txnindex import AbortedTxn


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

    @property
    def is_transactional(self) -> bool: ...

    @property
    def is_control(self) -> bool: ...


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
    #: The epoch of the coordinator that wrote this producer's last marker (-1: none yet).
    coordinator_epoch: int = -1
    #: First offset of the producer's open transaction in this partition (-1: none open).
    current_txn_first_offset: int = -1

    @property
    def last_sequence(self) -> int:
        return self.batches[-1].last_sequence if self.batches else -1


@dataclass(frozen=True)
class CompletedTxn:
    """A transaction a marker closed: its first offset and the marker's offset."""

    producer_id: int
    first_offset: int
    last_offset: int
    aborted: bool


def _next_sequence(sequence: int) -> int:
    return 0 if sequence == INT32_MAX else sequence + 1


MarkerReader = Callable[[BatchFacts], "ControlMarker | None"]
"""Reads the marker of a stored control batch (a rebuild sees headers only)."""


class ProducerStateManager:
    """Per-partition producer id → epoch, recent batches and open transaction."""

    def __init__(self, expiration_ms: int = 86_400_000) -> None:
        self.producers: dict[int, ProducerEntry] = {}
        self.expiration_ms = expiration_ms
        #: Producer id → first offset of its open transaction, oldest first.
        self.ongoing: dict[int, int] = {}
        #: Completed transactions whose marker may still be above the high watermark.
        self.unreplicated: list[CompletedTxn] = []
        #: Set once any transactional batch or marker was seen (truncation then rebuilds).
        self.has_transactions = False

    def check(self, batch: BatchFacts) -> BatchEntry | None:
        """Validate a client batch; returns the cached entry when it is a duplicate."""
        producer_id = batch.producer_id
        if batch.is_transactional and (producer_id < 0 or batch.base_sequence < 0):
            raise InvalidRecordError("a transactional batch needs a producer id and a sequence")
        if producer_id < 0 or batch.base_sequence < 0:
            return None
        entry = self.producers.get(producer_id)
        if entry is None:
            return None
        if batch.producer_epoch < entry.epoch:
            raise InvalidProducerEpochError(
                f"producer {producer_id} epoch {batch.producer_epoch} is older than {entry.epoch}")
        if not batch.is_transactional and entry.current_txn_first_offset >= 0 \
                and batch.producer_epoch == entry.epoch:
            raise InvalidTxnStateError(
                f"producer {producer_id} has a transaction open since offset {entry.current_txn_first_offset} "
                f"and wrote a non-transactional batch")
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
        """Record an appended data batch (leader after append; follower on replication;
        recovery). A transactional batch opens its producer's transaction if none is open."""
        producer_id = batch.producer_id
        if producer_id < 0:
            return
        entry = self.producers.get(producer_id)
        if entry is None or batch.producer_epoch > entry.epoch:
            previous = entry
            entry = self.producers[producer_id] = ProducerEntry(batch.producer_epoch)
            if previous is not None:
                entry.coordinator_epoch = previous.coordinator_epoch
                entry.current_txn_first_offset = previous.current_txn_first_offset
        elif batch.producer_epoch < entry.epoch:
            return
        if batch.base_sequence >= 0:
            entry.batches.append(BatchEntry(batch.base_sequence, batch.last_sequence, first_offset, last_offset,
                                            batch.max_timestamp))
        entry.last_timestamp = max(entry.last_timestamp, batch.max_timestamp)
        if batch.is_transactional:
            self.has_transactions = True
            if entry.current_txn_first_offset < 0:
                entry.current_txn_first_offset = first_offset
                self.ongoing[producer_id] = first_offset

    def check_marker(self, producer_id: int, producer_epoch: int, coordinator_epoch: int) -> None:
        """Refuse a marker of an older producer epoch (INVALID_PRODUCER_EPOCH) or from an older
        coordinator (TRANSACTION_COORDINATOR_FENCED), as Kafka's leader does."""
        entry = self.producers.get(producer_id)
        if entry is None:
            return
        if producer_epoch < entry.epoch:
            raise InvalidProducerEpochError(
                f"marker of producer {producer_id} at epoch {producer_epoch} is older than epoch {entry.epoch}")
        if coordinator_epoch < entry.coordinator_epoch:
            raise TransactionCoordinatorFencedError(
                f"marker of producer {producer_id} from coordinator epoch {coordinator_epoch}, older than "
                f"{entry.coordinator_epoch}")

    def complete(self, producer_id: int, producer_epoch: int, marker: ControlMarker, offset: int,
                 timestamp: int = -1) -> CompletedTxn:
        """Record an appended marker at ``offset``: close the producer's transaction (a marker
        of a partition the producer wrote nothing to closes an empty one at the marker)."""
        self.has_transactions = True
        entry = self.producers.get(producer_id)
        if entry is None or producer_epoch > entry.epoch:
            previous = entry
            entry = self.producers[producer_id] = ProducerEntry(producer_epoch)
            if previous is not None:
                entry.current_txn_first_offset = previous.current_txn_first_offset
                entry.last_timestamp = previous.last_timestamp
        first_offset = entry.current_txn_first_offset if entry.current_txn_first_offset >= 0 else offset
        entry.current_txn_first_offset = -1
        entry.coordinator_epoch = max(entry.coordinator_epoch, marker.coordinator_epoch)
        entry.last_timestamp = max(entry.last_timestamp, timestamp)
        self.ongoing.pop(producer_id, None)
        completed = CompletedTxn(producer_id, first_offset, offset, not marker.committed)
        self.unreplicated.append(completed)
        return completed

    def aborted_entry(self, completed: CompletedTxn) -> AbortedTxn:
        """The ``.txnindex`` entry of an aborted transaction just completed: its LSO is the
        first offset of the earliest transaction still open, else the offset after its marker."""
        stable = min(self.ongoing.values(), default=completed.last_offset + 1)
        return AbortedTxn(completed.producer_id, completed.first_offset, completed.last_offset, stable)

    def first_unstable_offset(self, high_watermark: int) -> int | None:
        """The first offset of the earliest open transaction, or of a completed one whose
        marker is not below ``high_watermark`` yet; None when every transaction is decided."""
        if self.unreplicated:
            self.unreplicated = [txn for txn in self.unreplicated if txn.last_offset >= high_watermark]
        candidates = [txn.first_offset for txn in self.unreplicated]
        if self.ongoing:
            candidates.append(min(self.ongoing.values()))
        return min(candidates) if candidates else None

    def last_stable_offset(self, high_watermark: int, log_start_offset: int = 0) -> int:
        """min(high watermark, first unstable offset), never below the log start offset."""
        unstable = self.first_unstable_offset(high_watermark)
        if unstable is None:
            return high_watermark
        return min(high_watermark, max(unstable, log_start_offset))

    def rebuild(self, batches: Iterable[BatchFacts], read_marker: MarkerReader | None = None,
                on_abort: Callable[[AbortedTxn], None] | None = None) -> None:
        """Replay a log's batch headers (oldest first). ``read_marker`` reads the marker of a
        control batch; ``on_abort`` receives each aborted transaction's ``.txnindex`` entry."""
        self.producers.clear()
        self.ongoing.clear()
        self.unreplicated.clear()
        self.has_transactions = False
        for batch in batches:
            if batch.producer_id < 0:
                continue
            if batch.is_control:
                marker = read_marker(batch) if read_marker is not None else None
                if marker is None:
                    continue
                completed = self.complete(batch.producer_id, batch.producer_epoch, marker, batch.base_offset,
                                          batch.max_timestamp)
                if completed.aborted and on_abort is not None:
                    on_abort(self.aborted_entry(completed))
            else:
                self.update(batch, batch.base_offset, batch.last_offset)

    def truncate_to(self, offset: int) -> None:
        """Forget batches at or above ``offset`` (the log was truncated). Transaction state
        cannot be undone from here: a caller with :attr:`has_transactions` set rebuilds."""
        for producer_id in list(self.producers):
            entry = self.producers[producer_id]
            if entry.current_txn_first_offset >= offset:
                entry.current_txn_first_offset = -1
                self.ongoing.pop(producer_id, None)
            kept = [cached for cached in entry.batches if cached.last_offset < offset]
            if len(kept) != len(entry.batches):
                if kept:
                    entry.batches = deque(kept, maxlen=CACHED_BATCHES)
                elif entry.current_txn_first_offset < 0:
                    del self.producers[producer_id]
                else:
                    entry.batches.clear()
        self.unreplicated = [txn for txn in self.unreplicated if txn.last_offset < offset]

    def expire(self, now_ms: int) -> int:
        """Forget producers idle for ``expiration_ms`` (never one with an open transaction)."""
        doomed = [producer_id for producer_id, entry in self.producers.items()
                  if entry.last_timestamp >= 0 and now_ms - entry.last_timestamp > self.expiration_ms
                  and entry.current_txn_first_offset < 0]
        for producer_id in doomed:
            del self.producers[producer_id]
        return len(doomed)
