"""The consumer's fetcher: per-partition fetch state, background prefetch, record decoding.

:class:`PartitionState` holds what the consumer knows of one assigned partition: the position
(next offset to hand to the application; None until reset), paused flag, the last high
watermark / log start offset seen, and up to :data:`MAX_BUFFERED_FETCHES` completed fetches not
yet handed out. :class:`Fetcher` runs one background task that keeps *one fetch per leader* in
flight for every fetchable partition (assigned, not paused, position known, buffer not full),
continuing from where the buffered data ends, so the next records are on their way while the
application processes the current ones. Fetches travel on a pipelined "fetch" connection per
leader (:mod:`kafkalite.transport`).

Answers: whole v2 batches, possibly starting before the requested offset (records below it are
skipped) and never past the high watermark (records at or above it are skipped too, should a
broker send them). Control batches (transaction markers) are never handed out. With
``isolation_level`` read_committed, the broker answers up to the last stable offset with the
aborted transactions among the records, and the transactional batches of those are dropped.
NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION, LEADER_NOT_AVAILABLE,
epoch errors and connection failures refresh metadata and retry after ``retry_backoff_ms``;
OFFSET_OUT_OF_RANGE applies the reset policy (or is raised from the next poll with policy
``none``). A seek bumps the partition's generation, so answers to fetches sent before it are
dropped.

Damaged data (a batch whose header or CRC is bad — CRCs are checked with ``check_crcs`` — or
whose records do not decode) is handled as Kafka's consumer handles it: every record before
the damaged batch is handed out, then each poll raises CorruptRecordError naming the partition
and offset, and the position stays at the damaged batch until the application seeks past it;
nothing after it is fetched meanwhile.

Decoding (:func:`decode_records`, :func:`decode_values`) is record/'s: the bulk shape checked
by :func:`~kafkalite.record.batch.uniform_runs` is cut straight into ConsumerRecord tuples (or a
plain list of values for the bulk path); any other batch goes through
:meth:`~kafkalite.record.batch.RecordBatch.records`. Both accept exactly the same bytes.

:func:`list_offsets` answers ListOffsets for many partitions, grouped by leader, retrying while
leaders move; the consumer and the admin client share it.

Concurrency: event-loop only.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

from kafkalite import protocol
from kafkalite.client.client_metrics import ConsumerMetrics
from kafkalite.client.metadata import ClusterView, MetadataManager
from kafkalite.client.types import ConsumerRecord, TopicPartition
from kafkalite.errors import (
    BrokerResponseError,
    CorruptRecordError,
    KafkaConnectionError,
    KafkaliteError,
    KafkaTimeoutError,
    OffsetOutOfRangeError,
    TruncatedBatchError,
)
from kafkalite.record.batch import (
    ATTR_CONTROL,
    ATTR_TIMESTAMP_TYPE,
    ATTR_TRANSACTIONAL,
    HEADER_SIZE,
    RecordBatch,
    UniformRun,
    run_slices,
    run_timestamp_deltas,
)
from kafkalite.record.control import batch_marker
from kafkalite.record.speedups import EXTENSION as _EXTENSION
from kafkalite.transport import AsyncTransport, check_answer

log = logging.getLogger(__name__)

FETCH_CHANNEL = "fetch"
MAX_BUFFERED_FETCHES = 2
Deserializer = Callable[[bytes], Any] | None


# --- decoding ---------------------------------------------------------------------------------


def _payload(batch: RecordBatch) -> bytes:
    data = batch.payload()
    return data if isinstance(data, bytes) else data.tobytes()


def decode_records(batch: RecordBatch, topic: str, partition: int, min_offset: int, max_offset: int,
                   key_deserializer: Deserializer = None,
                   value_deserializer: Deserializer = None) -> list[ConsumerRecord]:
    """The batch's records with ``min_offset <= offset < max_offset`` as ConsumerRecords, every
    record of the batch checked; damage raises CorruptRecordError naming the batch. The compiled
    extension builds them straight from the payload when it is loaded; otherwise
    :func:`py_decode_records` (the same records, the same errors)."""
    if _EXTENSION is None:
        return py_decode_records(batch, topic, partition, min_offset, max_offset, key_deserializer,
                                 value_deserializer)
    data = batch.payload()
    try:
        records: list[ConsumerRecord] = _EXTENSION.consumer_records(
            data, batch.record_count, batch.base_offset, batch.base_timestamp, batch.last_offset_delta, ConsumerRecord,
            topic, partition, batch.partition_leader_epoch, 1 if batch.attributes & ATTR_TIMESTAMP_TYPE else 0,
            batch.max_timestamp, min_offset, max_offset, key_deserializer, value_deserializer)
    except CorruptRecordError as exc:
        raise CorruptRecordError(f"batch at offset {batch.base_offset}: {exc.detail}", batch.position) from exc
    return records


def _uniform_runs(batch: RecordBatch, data: bytes) -> list[UniformRun] | None:
    """The batch's uniform runs, when they also keep within its lastOffsetDelta (runs hold offset
    deltas 0 .. count - 1; a header that says less is left to the general decoder to refuse)."""
    if batch.record_count - 1 > batch.last_offset_delta:
        return None
    return batch.uniform_runs(data)


def py_decode_records(batch: RecordBatch, topic: str, partition: int, min_offset: int, max_offset: int,
                      key_deserializer: Deserializer = None,
                      value_deserializer: Deserializer = None) -> list[ConsumerRecord]:
    """:func:`decode_records` in Python.

    Validation and decoding are record/'s: the bulk shape (:func:`uniform_runs`) is cut out of
    the payload at the positions it checked, anything else goes through
    :meth:`RecordBatch.records`. Damage raises CorruptRecordError.
    """
    data = _payload(batch)
    runs = _uniform_runs(batch, data)
    leader_epoch = batch.partition_leader_epoch
    timestamp_type = 1 if batch.attributes & ATTR_TIMESTAMP_TYPE else 0
    new = tuple.__new__
    cls = ConsumerRecord
    out: list[ConsumerRecord] = []
    if runs is not None:
        for run in runs:
            first_offset = batch.base_offset + run.first_delta
            low = max(0, min_offset - first_offset)
            high = min(run.record_count, max_offset - first_offset)
            if low >= high:
                continue
            # the raw fields, then (with a deserializer) what it makes of them
            keys: list[Any] = run_slices(data, run, run.key_at, run.key_length, low, high)
            values: list[Any] = run_slices(data, run, run.value_at, run.value_length, low, high)
            if key_deserializer is not None and run.key_length >= 0:
                keys = [key_deserializer(key) for key in keys]
            if value_deserializer is not None and run.value_length >= 0:
                values = [value_deserializer(value) for value in values]
            key_size = run.key_length
            value_size = run.value_length
            if timestamp_type or not run.timestamp_columns:
                timestamp = batch.max_timestamp if timestamp_type else batch.base_timestamp + run.timestamp_delta
                out.extend([new(cls, (topic, partition, leader_epoch, offset, timestamp, timestamp_type, key, value,
                                      [], None, key_size, value_size, -1))
                            for offset, key, value in zip(range(first_offset + low, first_offset + high), keys,
                                                          values)])
                continue
            base_timestamp = batch.base_timestamp
            out.extend([new(cls, (topic, partition, leader_epoch, offset, base_timestamp + delta, 0, key, value, [],
                                  None, key_size, value_size, -1))
                        for offset, delta, key, value in zip(range(first_offset + low, first_offset + high),
                                                             run_timestamp_deltas(run, low, high), keys, values)])
        return out
    for record in batch.records():
        offset = record.offset
        if offset < min_offset or offset >= max_offset:
            continue
        key = record.key
        value = record.value
        key_size = -1 if key is None else len(key)
        value_size = -1 if value is None else len(value)
        if key_deserializer is not None and key is not None:
            key = key_deserializer(key)
        if value_deserializer is not None and value is not None:
            value = value_deserializer(value)
        header_size = -1
        headers: list[tuple[str, bytes | None]] = []
        if record.headers:
            headers = list(record.headers)
            header_size = sum(len(name.encode("utf-8")) + (0 if header is None else len(header))
                              for name, header in headers)
        out.append(new(cls, (topic, partition, leader_epoch, offset,
                             batch.max_timestamp if timestamp_type else record.timestamp, timestamp_type,
                             key, value, headers, None, key_size, value_size, header_size)))
    return out


def decode_values(batch: RecordBatch) -> list[bytes | None]:
    """Every record's value, in order (the bulk path: no offsets, keys or headers kept), every
    record checked; the compiled extension's when it is loaded, else :func:`py_decode_values`."""
    if _EXTENSION is None:
        return py_decode_values(batch)
    data = batch.payload()
    try:
        values: list[bytes | None] = _EXTENSION.record_values(data, batch.record_count, batch.base_timestamp,
                                                               batch.last_offset_delta)
    except CorruptRecordError as exc:
        raise CorruptRecordError(f"batch at offset {batch.base_offset}: {exc.detail}", batch.position) from exc
    return values


def py_decode_values(batch: RecordBatch) -> list[bytes | None]:
    """:func:`decode_values` in Python."""
    data = _payload(batch)
    runs = _uniform_runs(batch, data)
    if runs is None:
        return [record.value for record in batch.records()]
    if len(runs) == 1:
        run = runs[0]
        return run_slices(data, run, run.value_at, run.value_length)
    values: list[bytes | None] = []
    for run in runs:
        values.extend(run_slices(data, run, run.value_at, run.value_length))
    return values


class FetchedBatch:
    """One record batch handed out by the bulk path (``poll_batches``), decoded lazily.

    ``values()`` is the fast values-only decode; ``records()`` gives ConsumerRecords. Only
    records in ``[first_offset, next_offset)`` are included (a fetched batch may start before the
    consumer's position).
    """

    __slots__ = ("topic", "partition", "batch", "first_offset", "next_offset", "_key_deserializer",
                 "_value_deserializer")

    def __init__(self, topic: str, partition: int, batch: RecordBatch, first_offset: int, next_offset: int,
                 key_deserializer: Deserializer, value_deserializer: Deserializer) -> None:
        self.topic = topic
        self.partition = partition
        self.batch = batch
        self.first_offset = first_offset
        self.next_offset = next_offset
        self._key_deserializer = key_deserializer
        self._value_deserializer = value_deserializer

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)

    def __len__(self) -> int:
        batch = self.batch
        if self.first_offset <= batch.base_offset and self.next_offset >= batch.next_offset:
            return batch.record_count
        return len(self.records())

    def values(self) -> list[Any]:
        batch = self.batch
        whole = self.first_offset <= batch.base_offset and self.next_offset >= batch.next_offset \
            and batch.record_count == batch.last_offset_delta + 1
        if whole:
            values = decode_values(batch)
            if self._value_deserializer is not None:
                deserialize = self._value_deserializer
                return [None if value is None else deserialize(value) for value in values]
            return values
        return [record.value for record in self.records()]

    def records(self) -> list[ConsumerRecord]:
        return decode_records(self.batch, self.topic, self.partition, self.first_offset, self.next_offset,
                              self._key_deserializer, self._value_deserializer)

    def __repr__(self) -> str:
        return f"FetchedBatch({self.topic}-{self.partition}, [{self.first_offset}, {self.next_offset}))"


# --- fetch state ------------------------------------------------------------------------------


class CompletedFetch:
    """The batches of one fetch answer for one partition, consumed from the front.

    ``corrupt`` is the damage found right after ``batches`` (a batch whose header or CRC is
    bad): the fetch stays buffered with it, and every take from it raises, until a seek.
    """

    __slots__ = ("batches", "fetch_offset", "high_watermark", "next_offset", "generation", "decoded",
                 "decoded_index", "batch_index", "corrupt")

    def __init__(self, batches: list[RecordBatch], fetch_offset: int, high_watermark: int, generation: int,
                 corrupt: CorruptRecordError | None = None, end_offset: int = -1) -> None:
        self.batches = batches
        self.fetch_offset = fetch_offset
        self.high_watermark = high_watermark
        self.generation = generation
        self.corrupt = corrupt
        # The answer's end: past the batches handed out, and past control batches and aborted
        # transactional batches that were skipped after them.
        last = batches[-1].next_offset if batches else fetch_offset
        if corrupt is None:
            last = max(last, end_offset)
        self.next_offset = max(fetch_offset, min(last, high_watermark) if high_watermark >= 0 else last)
        self.decoded: list[ConsumerRecord] | None = None
        self.decoded_index = 0
        self.batch_index = 0


class PartitionState:
    """What the consumer knows about one assigned partition."""

    __slots__ = ("tp", "position", "paused", "high_watermark", "log_start_offset", "last_stable_offset",
                 "buffered", "generation", "fetching", "reset_strategy", "error", "retry_at", "leader_epoch")

    def __init__(self, tp: TopicPartition) -> None:
        self.tp = tp
        self.position: int | None = None
        self.paused = False
        self.high_watermark = -1
        self.log_start_offset = -1
        self.last_stable_offset = -1
        self.buffered: deque[CompletedFetch] = deque()
        self.generation = 0
        self.fetching = False
        self.reset_strategy: str | None = None
        self.error: BaseException | None = None
        self.retry_at = 0.0
        self.leader_epoch = -1

    def seek(self, offset: int | None) -> None:
        self.position = offset
        self.generation += 1
        self.buffered.clear()
        self.error = None
        self.reset_strategy = None

    @property
    def next_fetch_offset(self) -> int | None:
        if self.buffered:
            return self.buffered[-1].next_offset
        return self.position

    @property
    def blocked(self) -> bool:
        """A buffered fetch ends at damaged data: nothing past it is fetched until a seek."""
        return bool(self.buffered) and self.buffered[-1].corrupt is not None


class Fetcher:
    """Background prefetch for a consumer's assigned partitions (see the module docstring)."""

    def __init__(self, metadata: MetadataManager, transport: AsyncTransport,
                 partitions: dict[TopicPartition, PartitionState],
                 *, fetch_min_bytes: int, fetch_max_bytes: int, fetch_max_wait_ms: int, max_partition_fetch_bytes: int,
                 isolation_level: int, request_timeout_ms: int, retry_backoff_ms: int, check_crcs: bool,
                 auto_offset_reset: str, metrics: ConsumerMetrics | None = None) -> None:
        self.metadata = metadata
        self.metrics = metrics if metrics is not None else ConsumerMetrics()
        self.transport = transport
        self.partitions = partitions
        self.fetch_min_bytes = fetch_min_bytes
        self.fetch_max_bytes = fetch_max_bytes
        self.fetch_max_wait_ms = fetch_max_wait_ms
        self.max_partition_fetch_bytes = max_partition_fetch_bytes
        self.isolation_level = isolation_level
        self.request_timeout_ms = request_timeout_ms
        self.retry_backoff = retry_backoff_ms / 1000
        self.check_crcs = check_crcs
        self.auto_offset_reset = auto_offset_reset
        self.data_ready = asyncio.Event()
        self._wake = asyncio.Event()
        self._in_flight: set[int] = set()
        self._node_retry_at: dict[int, float] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._task: asyncio.Task[None] | None = None
        self._rotation = 0
        self._running = True

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="kafkalite-fetcher")

    def wake(self) -> None:
        self._wake.set()

    async def stop(self) -> None:
        self._running = False
        tasks = [task for task in [self._task, *self._tasks] if task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _run(self) -> None:
        while self._running:
            delay = self._send_fetches()
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), timeout=delay)
            except TimeoutError:
                pass

    def _send_fetches(self) -> float:
        view = self.metadata.view
        now = time.monotonic()
        delay = 1.0
        by_node: dict[int, list[PartitionState]] = {}
        states = list(self.partitions.values())
        if states:
            self._rotation = (self._rotation + 1) % len(states)
            states = states[self._rotation:] + states[:self._rotation]
        for state in states:
            if state.paused or state.position is None or state.fetching or state.error is not None \
                    or len(state.buffered) >= MAX_BUFFERED_FETCHES or state.blocked:
                continue
            if state.retry_at > now:
                delay = min(delay, state.retry_at - now)
                continue
            leader = view.leader(state.tp)
            if leader < 0 or view.address_of(leader) is None:
                self.metadata.request_update()
                delay = min(delay, self.retry_backoff)
                continue
            if leader in self._in_flight:
                continue
            retry_at = self._node_retry_at.get(leader, 0.0)
            if retry_at > now:
                delay = min(delay, retry_at - now)
                continue
            by_node.setdefault(leader, []).append(state)
        for node, chosen in by_node.items():
            address = view.address_of(node)
            assert address is not None
            self._in_flight.add(node)
            for state in chosen:
                state.fetching = True
            task = asyncio.get_running_loop().create_task(self._fetch(node, address, chosen))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        return delay

    async def _fetch(self, node: int, address: str, states: list[PartitionState]) -> None:
        requested = [(state, state.generation, state.next_fetch_offset) for state in states]
        released = False
        request = protocol.FetchRequest(
            [protocol.FetchPartition(state.tp.topic, state.tp.partition, offset, self.max_partition_fetch_bytes)
             for state, _, offset in requested if offset is not None],
            max_wait_ms=self.fetch_max_wait_ms, min_bytes=self.fetch_min_bytes, max_bytes=self.fetch_max_bytes,
            isolation_level=self.isolation_level)
        try:
            try:
                connection = await self.transport.connection(address, FETCH_CHANNEL)
                started = time.monotonic()
                status, body = await connection.submit(
                    protocol.FETCH, [protocol.encode_fetch_request(request)],
                    timeout_ms=self.request_timeout_ms + self.fetch_max_wait_ms)
                results = protocol.decode_fetch_response(check_answer(status, body))
            except KafkaliteError as exc:
                log.debug("fetch from broker %d failed: %s", node, exc)
                if exc.invalid_metadata or isinstance(exc, (KafkaConnectionError, KafkaTimeoutError)):
                    self.metadata.request_update()
                self._node_retry_at[node] = time.monotonic() + self.retry_backoff
                return
            by_tp = {(result.topic, result.partition): result for result in results}
            got_data = False
            seen: list[tuple[str, int, int, int, int]] = []
            for state, generation, offset in requested:
                result = by_tp.get((state.tp.topic, state.tp.partition))
                if result is None or offset is None or generation != state.generation \
                        or self.partitions.get(state.tp) is not state:
                    continue
                got_data |= self._handle(state, result, offset, seen)
            self.metrics.fetch_completed(time.monotonic() - started, len(body), seen)
            # The next fetch leaves before the application is woken: a consumer thread that
            # takes the interpreter lock to decode these records would otherwise hold it back.
            released = True
            self._release(node, states)
            self._send_fetches()
            if got_data:
                self.data_ready.set()
        finally:
            if not released:
                self._release(node, states)
            self._wake.set()

    def _release(self, node: int, states: list[PartitionState]) -> None:
        self._in_flight.discard(node)
        for state in states:
            state.fetching = False

    def _handle(self, state: PartitionState, result: protocol.FetchResult, offset: int,
                seen: list[tuple[str, int, int, int, int]]) -> bool:
        """Take one partition's answer; ``(topic, partition, records, bytes, lag)`` of an answer
        without error is added to ``seen`` for the metrics."""
        code = result.error_code
        if code == 0:
            state.high_watermark = result.high_watermark
            state.last_stable_offset = result.last_stable_offset
            state.log_start_offset = result.log_start_offset
            if result.leader_epoch >= 0:
                state.leader_epoch = result.leader_epoch
            if not result.records:
                seen.append((state.tp.topic, state.tp.partition, 0, 0, max(0, result.high_watermark - offset)))
                return False
            # read_committed: records up to the last stable offset, minus aborted transactions
            visible = result.high_watermark
            if self.isolation_level == protocol.READ_COMMITTED and result.last_stable_offset >= 0:
                visible = result.last_stable_offset
            batches, corrupt, end_offset = self._batches(result.records, offset, visible,
                                                         result.aborted_transactions)
            seen.append((state.tp.topic, state.tp.partition, sum(batch.record_count for batch in batches),
                         len(result.records), max(0, result.high_watermark - max(end_offset, offset))))
            if not batches and corrupt is None and end_offset <= offset:
                return False
            state.buffered.append(CompletedFetch(batches, offset, visible, state.generation, corrupt, end_offset))
            return True
        error = protocol.error_for(code, result.error_message)
        if isinstance(error, OffsetOutOfRangeError):
            if state.buffered or state.position != offset:
                return False
            if self.auto_offset_reset in ("earliest", "latest"):
                log.info("offset %d out of range for %s (log %d..%d): resetting to %s", offset, state.tp,
                         result.log_start_offset, result.high_watermark, self.auto_offset_reset)
                state.seek(None)
                state.reset_strategy = self.auto_offset_reset
            else:
                state.error = OffsetOutOfRangeError(
                    f"offset {offset} of {state.tp.topic}-{state.tp.partition} is out of range "
                    f"(log start {result.log_start_offset}, high watermark {result.high_watermark}) "
                    f"and auto_offset_reset is 'none'")
            self.data_ready.set()
            return False
        if error.retriable or error.invalid_metadata:
            self.metadata.request_update()
            state.retry_at = time.monotonic() + self.retry_backoff
            return False
        state.error = error
        self.data_ready.set()
        return False

    def _batches(self, records: Any, fetch_offset: int, high_watermark: int,
                 aborted_transactions: list[tuple[int, int]] | None = None,
                 ) -> tuple[list[RecordBatch], CorruptRecordError | None, int]:
        """The whole batches of an answer from ``fetch_offset`` on, the damage that ends them
        early (a bad header or CRC), if any — the batches before it are still handed out — and
        the offset after the last batch read (handed out or skipped).

        Control batches are never handed out. With ``aborted_transactions`` (read_committed),
        the transactional batches of aborted transactions are skipped too, as Kafka's consumer
        does: a producer's transaction starting at or before a batch is aborted until the
        producer's abort marker."""
        buffer = records if isinstance(records, bytes) else bytes(records)
        batches: list[RecordBatch] = []
        position = 0
        limit = len(buffer)
        check = self.check_crcs
        end_offset = -1
        pending = sorted(aborted_transactions or (), key=lambda item: item[1])
        aborting: set[int] = set()
        while position < limit:
            if limit - position < HEADER_SIZE:
                break  # a partial batch at the end of a size-limited answer
            try:
                batch = RecordBatch(buffer, position)
            except TruncatedBatchError:
                break
            except CorruptRecordError as exc:
                return batches, exc, end_offset
            position = batch.end_position
            if batch.next_offset <= fetch_offset:
                continue
            if 0 <= high_watermark <= batch.base_offset:
                break
            if check and not batch.is_valid():
                try:
                    batch.validate()
                except CorruptRecordError as exc:
                    return batches, exc, end_offset
            end_offset = batch.next_offset
            while pending and pending[0][1] <= batch.last_offset:
                aborting.add(pending.pop(0)[0])
            if batch.attributes & ATTR_CONTROL:
                if batch.producer_id in aborting:
                    try:
                        marker = batch_marker(batch)
                    except CorruptRecordError as exc:
                        return batches, exc, end_offset
                    if marker is not None and not marker.committed:
                        aborting.discard(batch.producer_id)
                continue
            if batch.attributes & ATTR_TRANSACTIONAL and batch.producer_id in aborting:
                continue
            batches.append(batch)
        return batches, None, end_offset


def corrupt_at(tp: TopicPartition, offset: int, cause: CorruptRecordError) -> CorruptRecordError:
    """The error a poll raises at damaged data: names the partition and the offset the
    consumer stays at (Kafka's consumer says the same: seek past it to go on)."""
    error = CorruptRecordError(f"{tp.topic}-{tp.partition} at offset {offset}: {cause.detail}; "
                               f"the position stays at {offset} until the application seeks past the damaged batch")
    error.__cause__ = cause
    return error


def take_records(state: PartitionState, max_records: int, key_deserializer: Deserializer,
                 value_deserializer: Deserializer) -> list[ConsumerRecord]:
    """Up to ``max_records`` buffered records from ``state.position`` on; advances the position.

    At damaged data (a batch that does not decode, or a fetch that ended at a bad header or
    CRC) it stops: the records before it are returned, and the position stays at the damaged
    batch; when there is nothing before it in this call, CorruptRecordError is raised (again on
    every call) naming the partition and offset, until a seek clears the buffer.
    """
    out: list[ConsumerRecord] = []
    tp = state.tp
    while state.buffered and len(out) < max_records:
        fetch = state.buffered[0]
        position = state.position if state.position is not None else fetch.fetch_offset
        if fetch.decoded is not None and fetch.decoded_index < len(fetch.decoded):
            decoded = fetch.decoded
            start = fetch.decoded_index
            wanted = max_records - len(out)
            chunk = decoded[start:start + wanted]
            fetch.decoded_index = start + len(chunk)
            out.extend(chunk)
            if chunk:
                state.position = chunk[-1].offset + 1
            continue
        if fetch.batch_index >= len(fetch.batches):
            if fetch.corrupt is not None:
                if out:
                    return out
                raise corrupt_at(tp, position, fetch.corrupt)
            state.buffered.popleft()
            if state.position is not None and state.position < fetch.next_offset:
                state.position = fetch.next_offset
            continue
        batch = fetch.batches[fetch.batch_index]
        upper = fetch.high_watermark if fetch.high_watermark >= 0 else batch.next_offset
        try:
            records = decode_records(batch, tp.topic, tp.partition, position, upper, key_deserializer,
                                     value_deserializer)
        except CorruptRecordError as exc:
            if out:
                return out
            raise corrupt_at(tp, position, exc) from exc
        fetch.batch_index += 1
        wanted = max_records - len(out)
        if len(records) <= wanted:
            out.extend(records)
            state.position = max(position, min(batch.next_offset, upper))
        else:
            out.extend(records[:wanted])
            fetch.decoded = records
            fetch.decoded_index = wanted
            state.position = records[wanted - 1].offset + 1
    return out


def take_batches(state: PartitionState, key_deserializer: Deserializer,
                 value_deserializer: Deserializer) -> list[FetchedBatch]:
    """Every buffered batch from ``state.position`` on (the bulk path); advances the position.

    A fetch that ended at a bad header or CRC stops it as in :func:`take_records`; records are
    decoded (and validated) lazily by :class:`FetchedBatch`.
    """
    out: list[FetchedBatch] = []
    tp = state.tp
    while state.buffered:
        fetch = state.buffered[0]
        position = state.position if state.position is not None else fetch.fetch_offset
        if fetch.corrupt is not None and fetch.batch_index >= len(fetch.batches) and fetch.decoded is None:
            if out:
                return out
            raise corrupt_at(tp, position, fetch.corrupt)
        upper = fetch.high_watermark if fetch.high_watermark >= 0 else fetch.next_offset
        if fetch.decoded is not None and fetch.decoded_index < len(fetch.decoded):
            position = fetch.decoded[fetch.decoded_index].offset
        for batch in fetch.batches[fetch.batch_index:]:
            if batch.next_offset <= position:
                continue
            end = min(batch.next_offset, upper)
            if end <= position:
                continue
            out.append(FetchedBatch(tp.topic, tp.partition, batch, position, end, key_deserializer,
                                    value_deserializer))
            position = end
        if fetch.corrupt is not None:
            fetch.batch_index = len(fetch.batches)
            fetch.decoded = None
            state.position = max(position, state.position if state.position is not None else position)
            return out
        state.buffered.popleft()
        state.position = max(position, fetch.next_offset)
    return out


# --- ListOffsets --------------------------------------------------------------------------------


async def list_offsets(metadata: MetadataManager, transport: AsyncTransport, timestamps: dict[TopicPartition, int],
                       *, isolation_level: int = 0, timeout_ms: float = 30_000,
                       retry_backoff_ms: int = 100) -> dict[TopicPartition, tuple[int, int, int]]:
    """(offset, timestamp, leader_epoch) per partition for a timestamp or EARLIEST/LATEST/MAX.

    Asked of each leader; retries on leader moves until ``timeout_ms`` passes.
    """
    deadline = time.monotonic() + timeout_ms / 1000
    remaining = dict(timestamps)
    answers: dict[TopicPartition, tuple[int, int, int]] = {}
    last_error: BaseException | None = None
    metadata.add_topics({tp.topic for tp in remaining})
    checked_unknown = False
    while remaining:
        view = metadata.view
        by_node: dict[int, list[TopicPartition]] = {}
        unknown: list[TopicPartition] = []
        for tp in remaining:
            leader = view.leader(tp)
            if leader < 0 or view.address_of(leader) is None:
                known = view.partitions.get(tp.topic)
                if known and tp.partition >= len(known):
                    unknown.append(tp)
                continue
            by_node.setdefault(leader, []).append(tp)
        if unknown:
            # The partition may have been added after this client's metadata was taken: look
            # once more before calling it unknown.
            if checked_unknown:
                tp = unknown[0]
                raise protocol.error_for(3, f"unknown partition {tp.topic}-{tp.partition}")
            checked_unknown = True
            try:
                await metadata.refresh()
            except KafkaliteError as exc:
                last_error = exc
            continue

        async def ask(view: ClusterView, node: int, tps: list[TopicPartition]) -> None:
            nonlocal last_error
            address = view.address_of(node)
            assert address is not None
            body = {"isolation_level": isolation_level,
                    "partitions": [{"topic": tp.topic, "partition": tp.partition, "timestamp": remaining[tp]}
                                   for tp in tps]}
            try:
                answer = await transport.request_json(address, "POST", protocol.LIST_OFFSETS, body,
                                                      timeout_ms=metadata.request_timeout_ms)
            except KafkaliteError as exc:
                last_error = exc
                metadata.request_update()
                return
            for item in answer.get("partitions", []):
                tp = TopicPartition(str(item["topic"]), int(item["partition"]))
                if tp not in remaining:
                    continue
                code = int(item.get("error_code", 0))
                if code == 0:
                    answers[tp] = (int(item.get("offset", -1)), int(item.get("timestamp", -1)),
                                   int(item.get("leader_epoch", -1)))
                    remaining.pop(tp, None)
                    continue
                error = protocol.error_for(code, str(item.get("message", "")))
                if not (error.retriable or error.invalid_metadata):
                    raise error
                last_error = error
                metadata.request_update()

        await asyncio.gather(*(ask(view, node, tps) for node, tps in by_node.items()))
        if not remaining:
            break
        if time.monotonic() >= deadline:
            raise KafkaTimeoutError(f"no offsets for {sorted(remaining)} within {timeout_ms:.0f} ms "
                                    f"(last error: {last_error})")
        try:
            await metadata.refresh()
        except KafkaliteError as exc:
            last_error = exc
        await asyncio.sleep(retry_backoff_ms / 1000)
    return answers


def pending_errors(states: Iterable[PartitionState]) -> BaseException | None:
    for state in states:
        if state.error is not None:
            error = state.error
            state.error = None
            return error
    return None


__all__ = ["BrokerResponseError", "CompletedFetch", "FetchedBatch", "Fetcher", "PartitionState", "corrupt_at",
           "decode_records", "decode_values", "list_offsets", "py_decode_records", "py_decode_values", "take_batches",
           "take_records"]
