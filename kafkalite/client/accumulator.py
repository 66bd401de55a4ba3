"""The producer's record accumulator: per-partition batches, memory budget, futures. No I/O.

``send()`` appends a record to the open batch of its partition — plain Python lists of values,
keys, timestamps and headers, no encoding — and gets a :class:`RecordFuture`. The sender
later takes whole batches (:meth:`RecordAccumulator.ready`, :meth:`RecordAccumulator.drain`)
and encodes each one once with :func:`~kafkalite.record.batch.build_batch`
(:meth:`ProducerBatch.encode`); a retried batch is resent byte for byte, which the broker's
idempotence check relies on. The bulk API appends whole pre-chunked *sealed* batches
(:meth:`RecordAccumulator.append_bulk`) that get one :class:`BatchResult` and no per-record
futures.

Rules, as in Kafka's RecordAccumulator:

* a partition has a deque of batches; records go to the last one while it is open and below
  ``batch_size`` (a single record larger than ``batch_size`` gets a batch of its own);
* a partition's first batch is *ready* when it is full, when another batch waits behind it,
  when ``linger_ms`` has passed since it was opened, when a flush or close is in progress, or
  when a retried batch's backoff has passed — and its leader is known and the partition is not
  *muted* (too many of its batches in flight, or a retry in progress while earlier batches are
  still out);
* a drain takes at most one batch per partition per broker request, in rotating partition
  order, until ``max_request_size``; idempotent batches get their producer id, epoch and base
  sequence at their first drain, per partition in order;
* a retried batch goes back to the front of its deque in creation order, so ordering holds;
* ``buffer_memory`` bounds the bytes of all incomplete records: an append that does not fit
  returns None and the caller waits (:meth:`wait_for_memory` in a thread,
  :meth:`wait_for_memory_async` on the loop) until completions free space.

Concurrency: every method may be called from any thread; one lock guards the state. Batch
completion (:meth:`complete`, :meth:`fail`) happens on the sender's event loop; futures then
run their callbacks there (as kafka-python runs them on its I/O thread). The futures themselves
live in :mod:`kafkalite.client.futures`.
"""

from __future__ import annotations

import asyncio
import bisect
import itertools
import operator
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable

from kafkalite.client.futures import BatchResult, RecordFuture
from kafkalite.client.types import TopicPartition
from kafkalite.errors import IllegalStateError, KafkaliteError, KafkaTimeoutError
from kafkalite.record.batch import NO_PRODUCER_EPOCH, NO_PRODUCER_ID, NO_SEQUENCE, build_batch

RECORD_OVERHEAD = 12  # varints and attribute byte of one record, roughly
BATCH_OVERHEAD = 61
_SEQUENCE_LIMIT = 1 << 31
Headers = list[tuple[str, "bytes | None"]]


# --- batches ----------------------------------------------------------------------------------


class ProducerBatch:
    """Records of one partition that travel together (see the module docstring)."""

    __slots__ = ("tp", "values", "keys", "timestamps", "headers", "size", "created", "result", "attempts",
                 "producer_id", "producer_epoch", "base_sequence", "encoded", "order", "closed", "retry_at",
                 "deadline", "sealed", "min_timestamp", "max_timestamp", "record_count", "memory", "last_error",
                 "transactional")

    def __init__(self, tp: TopicPartition, order: int, created: float, deadline: float) -> None:
        self.tp = tp
        self.values: list[bytes | None] = []
        self.keys: list[bytes | None] | None = None
        self.timestamps: list[int] = []
        self.headers: list[Headers] | None = None
        self.size = BATCH_OVERHEAD
        self.memory = 0
        self.created = created
        self.deadline = deadline
        self.result = BatchResult(tp)
        self.attempts = 0
        self.producer_id = NO_PRODUCER_ID
        self.producer_epoch = NO_PRODUCER_EPOCH
        self.base_sequence = NO_SEQUENCE
        self.encoded: bytes | None = None
        self.order = order
        self.closed = False
        self.sealed = False
        self.retry_at = 0.0
        self.min_timestamp = 0
        self.max_timestamp = 0
        self.record_count = 0
        self.last_error = ""
        self.transactional = False

    def encode(self, compression: int) -> bytes:
        """The batch's bytes, built once (a retry resends exactly these bytes)."""
        if self.encoded is None:
            single = self.min_timestamp == self.max_timestamp
            timestamps: int | list[int] = self.min_timestamp if single else self.timestamps
            self.encoded = build_batch(self.values, keys=self.keys, timestamps=timestamps, headers=self.headers,
                                       compression=compression, producer_id=self.producer_id,
                                       producer_epoch=self.producer_epoch, base_sequence=self.base_sequence,
                                       transactional=self.transactional)
        return self.encoded

    def __repr__(self) -> str:
        return (f"ProducerBatch({self.tp.topic}-{self.tp.partition}, records={self.record_count}, "
                f"size={self.size}, attempts={self.attempts}, sequence={self.base_sequence})")


class _PartitionState:
    __slots__ = ("batches", "sent", "next_sequence", "retrying")

    def __init__(self) -> None:
        self.batches: deque[ProducerBatch] = deque()
        self.sent: set[ProducerBatch] = set()
        self.next_sequence = 0
        self.retrying = False


class RecordAccumulator:
    """Per-partition batches of a producer (see the module docstring)."""

    __slots__ = ("batch_size", "buffer_memory", "linger", "max_request_size", "delivery_timeout",
                 "max_in_flight_per_partition", "idempotent", "producer_id", "producer_epoch", "transactional",
                 "sendable", "on_failure", "_lock", "_memory_free", "_async_memory_waiters", "_partitions",
                 "_used_memory", "_order", "_incomplete", "_flushes", "_closing", "_closed", "_drain_rotation",
                 "wakeup")

    def __init__(self, *, batch_size: int, buffer_memory: int, linger_ms: int, max_request_size: int,
                 delivery_timeout_ms: int, max_in_flight_per_partition: int, idempotent: bool) -> None:
        self.batch_size = batch_size
        self.buffer_memory = buffer_memory
        self.linger = linger_ms / 1000
        self.max_request_size = max_request_size
        self.delivery_timeout = delivery_timeout_ms / 1000
        self.max_in_flight_per_partition = max_in_flight_per_partition
        self.idempotent = idempotent
        self.producer_id = NO_PRODUCER_ID
        self.producer_epoch = NO_PRODUCER_EPOCH
        #: A transactional producer's: batches carry the transactional bit, and only partitions
        #: ``sendable`` admits (added to the transaction) are drained; ``on_failure`` hears of
        #: every batch that failed for good (the transaction must then abort).
        self.transactional = False
        self.sendable: Callable[[TopicPartition], bool] | None = None
        self.on_failure: Callable[[BaseException], None] | None = None
        self._lock = threading.Lock()
        self._memory_free = threading.Condition(self._lock)
        self._async_memory_waiters: list[asyncio.Future[None]] = []
        self._partitions: dict[TopicPartition, _PartitionState] = {}
        self._used_memory = 0
        self._order = itertools.count()
        self._incomplete: set[BatchResult] = set()
        self._flushes = 0
        self._closing = False
        self._closed = False
        self._drain_rotation = 0
        self.wakeup: Callable[[], None] = lambda: None

    # -- appends (any thread) -----------------------------------------------------------------
    def _state(self, tp: TopicPartition) -> _PartitionState:
        state = self._partitions.get(tp)
        if state is None:
            state = self._partitions[tp] = _PartitionState()
        return state

    def _new_batch(self, tp: TopicPartition, state: _PartitionState, now: float) -> ProducerBatch:
        batch = ProducerBatch(tp, next(self._order), now, now + self.delivery_timeout)
        state.batches.append(batch)
        self._incomplete.add(batch.result)
        return batch

    def append(self, tp: TopicPartition, timestamp: int, key: bytes | None, value: bytes | None,
               headers: Headers | None, size: int) -> RecordFuture | None:
        """Add one record; None when ``buffer_memory`` has no room for it (wait, then retry)."""
        wake = False
        with self._lock:
            if self._closed or self._closing:
                raise IllegalStateError("the producer is closed")
            if self._used_memory + size > self.buffer_memory and self._used_memory > 0:
                return None
            state = self._partitions.get(tp)
            if state is None:
                state = self._partitions[tp] = _PartitionState()
            batches = state.batches
            batch = batches[-1] if batches else None
            if batch is None or batch.closed or (batch.size + size > self.batch_size and batch.record_count):
                if batch is not None and not batch.closed:
                    batch.closed = True
                batch = self._new_batch(tp, state, time.monotonic())
                wake = True
                batch.min_timestamp = batch.max_timestamp = timestamp
            index = batch.record_count
            values = batch.values
            values.append(value)
            if key is not None and batch.keys is None:
                batch.keys = [None] * index
            if batch.keys is not None:
                batch.keys.append(key)
            if headers:
                if batch.headers is None:
                    batch.headers = [[] for _ in range(index)]
                batch.headers.append(headers)
            elif batch.headers is not None:
                batch.headers.append([])
            batch.timestamps.append(timestamp)
            if timestamp > batch.max_timestamp:
                batch.max_timestamp = timestamp
            elif timestamp < batch.min_timestamp:
                batch.min_timestamp = timestamp
            batch.record_count = index + 1
            batch.size += size
            batch.memory += size
            self._used_memory += size
            if batch.size >= self.batch_size:
                batch.closed = True
                wake = True
        if wake:
            self.wakeup()
        header_size = -1
        if headers:
            header_size = sum(len(name) + (len(data) if data is not None else 0) for name, data in headers)
        return RecordFuture(batch.result, index, timestamp, -1 if key is None else len(key),
                            -1 if value is None else len(value), header_size)

    def append_bulk(self, tp: TopicPartition, values: list[bytes | None], keys: list[bytes | None] | None,
                    timestamp: int | list[int], headers: list[Headers] | None, size: int) -> BatchResult | None:
        """Add one sealed batch of many records; None when ``buffer_memory`` has no room."""
        with self._lock:
            if self._closed or self._closing:
                raise IllegalStateError("the producer is closed")
            if self._used_memory + size > self.buffer_memory and self._used_memory > 0:
                return None
            state = self._state(tp)
            if state.batches and not state.batches[-1].closed:
                state.batches[-1].closed = True
            batch = self._new_batch(tp, state, time.monotonic())
            batch.values = values
            batch.keys = keys
            batch.headers = headers
            if isinstance(timestamp, int):
                batch.min_timestamp = batch.max_timestamp = timestamp
                batch.timestamps = []
            else:
                batch.timestamps = timestamp
                batch.min_timestamp = min(timestamp)
                batch.max_timestamp = max(timestamp)
            batch.record_count = len(values)
            batch.size += size
            batch.memory = size
            batch.closed = batch.sealed = True
            self._used_memory += size
        self.wakeup()
        return batch.result

    # -- memory -------------------------------------------------------------------------------
    def wait_for_memory(self, size: int, timeout: float) -> bool:
        """Block this thread until ``size`` bytes could fit (True) or ``timeout`` passes."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while self._used_memory + size > self.buffer_memory and self._used_memory > 0:
                if self._closed or self._closing:
                    raise IllegalStateError("the producer is closed")
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._memory_free.wait(remaining)
            return True

    async def wait_for_memory_async(self, size: int, timeout: float) -> bool:
        """Wait on the loop until ``size`` bytes could fit (True) or ``timeout`` passes."""
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                if self._used_memory + size <= self.buffer_memory or self._used_memory == 0:
                    return True
                if self._closed or self._closing:
                    raise IllegalStateError("the producer is closed")
                waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
                self._async_memory_waiters.append(waiter)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            try:
                await asyncio.wait_for(waiter, remaining)
            except TimeoutError:
                return False

    def _release(self, batch: ProducerBatch) -> None:
        with self._lock:
            self._used_memory -= batch.memory
            batch.memory = 0
            self._incomplete.discard(batch.result)
            self._memory_free.notify_all()
            waiters, self._async_memory_waiters = self._async_memory_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    @property
    def used_memory(self) -> int:
        return self._used_memory

    # -- sender side --------------------------------------------------------------------------
    def ready(self, leaders: dict[TopicPartition, int], now: float) -> tuple[set[int], float, bool]:
        """(broker ids with a sendable batch, seconds until the next batch may become ready,
        whether some partition with data has no known leader)."""
        nodes: set[int] = set()
        next_check = 3600.0
        unknown_leader = False
        with self._lock:
            hurry = self._flushes > 0 or self._closing
            for tp, state in self._partitions.items():
                batches = state.batches
                if not batches:
                    continue
                batch = batches[0]
                leader = leaders.get(tp, -1)
                if leader < 0:
                    unknown_leader = True
                    continue
                if self._muted(state):
                    continue
                if batch.attempts and batch.retry_at > now:
                    next_check = min(next_check, batch.retry_at - now)
                    continue
                if batch.closed or len(batches) > 1 or hurry or now - batch.created >= self.linger:
                    nodes.add(leader)
                else:
                    next_check = min(next_check, batch.created + self.linger - now)
        return nodes, max(0.0, next_check), unknown_leader

    def _muted(self, state: _PartitionState) -> bool:
        if len(state.sent) >= self.max_in_flight_per_partition:
            return True
        return state.retrying and bool(state.sent)

    def drain(self, leaders: dict[TopicPartition, int], nodes: Iterable[int],
              now: float) -> dict[int, list[ProducerBatch]]:
        """Take the sendable batches for ``nodes``: one per partition, ≤ max_request_size each."""
        wanted = set(nodes)
        drained: dict[int, list[ProducerBatch]] = {}
        sizes: dict[int, int] = {}
        with self._lock:
            hurry = self._flushes > 0 or self._closing
            items = list(self._partitions.items())
            if not items:
                return drained
            self._drain_rotation = (self._drain_rotation + 1) % len(items)
            items = items[self._drain_rotation:] + items[:self._drain_rotation]
            for tp, state in items:
                batches = state.batches
                if not batches:
                    continue
                leader = leaders.get(tp, -1)
                if leader not in wanted or self._muted(state):
                    continue
                if self.sendable is not None and not self.sendable(tp):
                    continue
                batch = batches[0]
                if batch.attempts and batch.retry_at > now:
                    continue
                if not (batch.closed or len(batches) > 1 or hurry or now - batch.created >= self.linger):
                    continue
                used = sizes.get(leader, 0)
                if used and used + batch.size > self.max_request_size:
                    continue
                batches.popleft()
                batch.closed = True
                if self.idempotent and batch.base_sequence < 0 and self.producer_id >= 0:
                    batch.producer_id = self.producer_id
                    batch.producer_epoch = self.producer_epoch
                    batch.base_sequence = state.next_sequence
                    batch.transactional = self.transactional
                    state.next_sequence = (state.next_sequence + batch.record_count) % _SEQUENCE_LIMIT
                state.sent.add(batch)
                batch.attempts += 1
                sizes[leader] = used + batch.size
                drained.setdefault(leader, []).append(batch)
        return drained

    def complete(self, batch: ProducerBatch, base_offset: int, log_append_time: int, log_start_offset: int) -> None:
        """The broker acknowledged ``batch``."""
        with self._lock:
            state = self._state(batch.tp)
            state.sent.discard(batch)
            if not state.sent and state.retrying and not any(item.attempts for item in state.batches):
                state.retrying = False
        self._release(batch)
        batch.result.succeed(base_offset, log_append_time, log_start_offset)

    def fail(self, batch: ProducerBatch, error: BaseException, *, in_flight: bool = True) -> None:
        """``batch`` failed for good."""
        with self._lock:
            state = self._state(batch.tp)
            state.sent.discard(batch)
            if not state.sent and not any(item.attempts for item in state.batches):
                state.retrying = False
        self._release(batch)
        batch.result.fail(error)
        if self.on_failure is not None:
            self.on_failure(error)

    def reenqueue(self, batch: ProducerBatch, retry_at: float) -> None:
        """Put a batch that failed retriably back at its place (creation order) for a retry."""
        with self._lock:
            state = self._state(batch.tp)
            state.sent.discard(batch)
            state.retrying = True
            batch.retry_at = retry_at
            batches = state.batches
            position = 0
            while position < len(batches) and batches[position].order < batch.order:
                position += 1
            batches.insert(position, batch)

    def earlier_unacknowledged(self, tp: TopicPartition, before_sequence: int) -> bool:
        """Whether an earlier batch of ``tp`` (a lower sequence) is in flight or waiting for a
        retry — then an OUT_OF_ORDER_SEQUENCE_NUMBER answer is only its consequence."""
        with self._lock:
            state = self._partitions.get(tp)
            if state is None:
                return False
            return any(0 <= item.base_sequence < before_sequence for item in state.sent) or \
                any(0 <= item.base_sequence < before_sequence and item.attempts for item in state.batches)

    def expire(self, now: float) -> list[ProducerBatch]:
        """Remove and return the queued batches whose delivery timeout passed."""
        expired: list[ProducerBatch] = []
        with self._lock:
            for state in self._partitions.values():
                if state.batches and state.batches[0].deadline <= now:
                    keep: deque[ProducerBatch] = deque()
                    for batch in state.batches:
                        (expired if batch.deadline <= now else keep).append(batch)
                    state.batches = keep
        for batch in expired:
            self.fail(batch, KafkaTimeoutError(
                f"{batch.record_count} record(s) for {batch.tp.topic}-{batch.tp.partition} expired: "
                f"{self.delivery_timeout * 1000:.0f} ms passed since the batch was created"), in_flight=False)
        return expired

    def reset_producer(self, producer_id: int, producer_epoch: int) -> None:
        """A new producer id: queued batches are renumbered from sequence 0 at their next drain."""
        with self._lock:
            self.producer_id = producer_id
            self.producer_epoch = producer_epoch
            for state in self._partitions.values():
                state.next_sequence = 0
                for batch in state.batches:
                    batch.base_sequence = NO_SEQUENCE
                    batch.producer_id = NO_PRODUCER_ID
                    batch.producer_epoch = NO_PRODUCER_EPOCH
                    batch.encoded = None

    @property
    def in_flight(self) -> int:
        with self._lock:
            return sum(len(state.sent) for state in self._partitions.values())

    def has_unsent(self) -> bool:
        with self._lock:
            return any(state.batches for state in self._partitions.values())

    def has_incomplete(self) -> bool:
        with self._lock:
            return bool(self._incomplete)

    # -- flush and close ----------------------------------------------------------------------
    def begin_flush(self) -> list[BatchResult]:
        """Make every batch ready now; returns the results to wait for (call end_flush after)."""
        with self._lock:
            self._flushes += 1
            pending = list(self._incomplete)
        self.wakeup()
        return pending

    def end_flush(self) -> None:
        with self._lock:
            self._flushes -= 1

    def begin_close(self) -> None:
        with self._lock:
            self._closing = True
            self._memory_free.notify_all()
        self.wakeup()

    def abort(self, error: KafkaliteError) -> None:
        """Fail every queued batch (close without waiting)."""
        with self._lock:
            self._closed = True
            queued = [batch for state in self._partitions.values() for batch in state.batches]
            for state in self._partitions.values():
                state.batches = deque()
        for batch in queued:
            self.fail(batch, error, in_flight=False)

    def fail_queued(self, partitions: set[TopicPartition], error: KafkaliteError) -> None:
        """Fail the queued (not yet sent) batches of ``partitions`` (an aborted transaction's
        records for partitions that never joined it)."""
        with self._lock:
            queued: list[ProducerBatch] = []
            for tp in partitions:
                state = self._partitions.get(tp)
                if state is not None:
                    queued.extend(state.batches)
                    state.batches = deque()
        for batch in queued:
            self.fail(batch, error, in_flight=False)

    def pending_results(self) -> list[BatchResult]:
        with self._lock:
            return list(self._incomplete)

    @property
    def aborted(self) -> bool:
        """Whether :meth:`abort` ran: a batch coming back for a retry must fail instead."""
        return self._closed

    def describe_pending(self, now: float) -> list[str]:
        """One line per partition with incomplete batches: queued and in-flight counts, the
        first batch's attempts, age and last error (for a tool's diagnostics)."""
        lines = []
        with self._lock:
            for tp, state in sorted(self._partitions.items(), key=lambda item: (item[0].topic, item[0].partition)):
                if not state.batches and not state.sent:
                    continue
                first = min([*state.batches, *state.sent], key=lambda batch: batch.order)
                lines.append(f"{tp.topic}-{tp.partition}: {len(state.batches)} queued, {len(state.sent)} in flight, "
                             f"retrying={state.retrying}; oldest batch: {first.record_count} record(s), "
                             f"sequence {first.base_sequence}, {first.attempts} attempt(s), "
                             f"{now - first.created:.1f} s old, last error: {first.last_error or 'none'}")
        return lines


def chunk_bounds(sizes: Iterable[int], limit: int) -> list[tuple[int, int]]:
    """Split records of ``sizes`` bytes into consecutive [start, end) runs of at most ``limit``
    bytes each, counting RECORD_OVERHEAD per record (a record larger than ``limit`` gets a run of
    its own). Runs in C-speed passes: one cumulative sum, then a bisection per run."""
    cumulative = list(itertools.accumulate(map(operator.add, sizes, itertools.repeat(RECORD_OVERHEAD))))
    bounds: list[tuple[int, int]] = []
    count = len(cumulative)
    start = 0
    base = 0
    while start < count:
        end = bisect.bisect_right(cumulative, base + limit, start)
        if end == start:
            end = start + 1
        bounds.append((start, end))
        base = cumulative[end - 1]
        start = end
    return bounds
