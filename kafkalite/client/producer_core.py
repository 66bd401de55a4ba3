"""The producers' shared core: :class:`ProducerCore` (record path, bulk path, flush, close).

Record path: :meth:`ProducerCore.send_plain` (the common shape in one pass) or
:meth:`ProducerCore.prepare` + :meth:`ProducerCore.place` serialize a record, look its topic up
in the metadata snapshot, pick the partition (explicit, key → murmur2, keyless → sticky, see
:mod:`kafkalite.client.partitioner`; or the user's partitioner) and append it to the
accumulator (:mod:`.accumulator`), which answers with a :class:`~kafkalite.client.futures.RecordFuture`,
:data:`NEEDS_METADATA` (the topic is not known yet) or None (no room in ``buffer_memory``); the
front ends (:mod:`kafkalite.client.producer`) then wait as their flavour does and try again.
Bulk path: :meth:`ProducerCore.prepare_bulk`, :meth:`ProducerCore.plan_bulk` (chunks of up to
``max_request_size`` per partition) and :meth:`ProducerCore.place_chunk`. The core owns the
transport, the metadata manager, the partitioner, the accumulator and the sender
(:mod:`.sender`), which it starts and stops.

Concurrency: the record and bulk paths run on any thread (a KafkaProducer's users call them
directly; the accumulator is thread-safe and the metadata view is an immutable snapshot);
:meth:`ProducerCore.start`, :meth:`ProducerCore.flush`, :meth:`ProducerCore.close` and the
sender run on the core's event loop (a KafkaProducer's private loop thread, the caller's loop
for AIOKafkaProducer). :meth:`ProducerCore._wake` is how any thread pokes the sender: directly on
the loop thread, through ``call_soon_threadsafe`` from others.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from kafkalite.client.accumulator import (
    BATCH_OVERHEAD,
    RECORD_OVERHEAD,
    ProducerBatch,
    RecordAccumulator,
    _PartitionState,
    chunk_bounds,
)
from kafkalite.client.client_metrics import ProducerMetrics
from kafkalite.client.futures import BatchResult, RecordFuture
from kafkalite.client.metadata import MetadataManager
from kafkalite.client.partitioner import DefaultPartitioner, murmur2, to_positive
from kafkalite.client.producer_settings import ProducerSettings
from kafkalite.client.sender import Sender
from kafkalite.client.transactions import TransactionManager, TxnState
from kafkalite.client.types import TopicPartition
from kafkalite.errors import (
    ConfigError,
    IllegalStateError,
    KafkaTimeoutError,
    MessageSizeTooLargeError,
    UnknownTopicOrPartitionError,
)
from kafkalite.record.speedups import load_extension
from kafkalite.transport import AsyncTransport

_IN_TRANSACTION = TxnState.IN_TRANSACTION

log = logging.getLogger(__name__)


class _CallablePartitioner:
    """Adapts kafka-python's ``partitioner(key_bytes, all_partitions, available)`` callables."""

    def __init__(self, function: Callable[..., int], default: DefaultPartitioner) -> None:
        self.function = function
        self.default = default

    def partition(self, topic: str, key_bytes: bytes | None, all_partitions: Sequence[int],
                  available_partitions: Sequence[int], record_size: int, *,
                  explicit_partition: int | None = None) -> int:
        if explicit_partition is not None:
            return self.default.partition(topic, key_bytes, all_partitions, available_partitions, record_size,
                                          explicit_partition=explicit_partition)
        return int(self.function(key_bytes, list(all_partitions), list(available_partitions)))

    def on_new_batch(self, topic: str, previous_partition: int) -> None:
        return None


# place()'s answer when the topic is not in the metadata yet: the caller waits for it, then retries
NEEDS_METADATA = object()


class _Prepared:
    """One serialized record waiting for its partition and a place in the accumulator."""

    __slots__ = ("topic", "key", "value", "headers", "partition", "timestamp", "size")

    def __init__(self, topic: str, key: bytes | None, value: bytes | None,
                 headers: list[tuple[str, bytes | None]] | None, partition: int | None, timestamp: int,
                 size: int) -> None:
        self.topic = topic
        self.key = key
        self.value = value
        self.headers = headers
        self.partition = partition
        self.timestamp = timestamp
        self.size = size


class ProducerCore:
    """What both producers share: settings, metadata, partitioner, accumulator and sender.

    ``prepare``/``place`` are the record path (any thread); the coroutines run on the core's
    loop. See the module docstring and :mod:`kafkalite.client.producer` for the options.
    """

    def __init__(self, settings: ProducerSettings) -> None:
        self.settings = settings
        self.transport = AsyncTransport(request_timeout_ms=settings.request_timeout_ms, client_id=settings.client_id,
                                        connect_timeout_ms=settings.socket_connection_setup_timeout_ms,
                                        ssl_context=settings.ssl_context)
        if settings.sasl_credentials is not None:
            self.transport.set_credentials(*settings.sasl_credentials)
        self.metadata = MetadataManager(self.transport, settings.bootstrap_servers,
                                        request_timeout_ms=settings.request_timeout_ms,
                                        retry_backoff_ms=settings.retry_backoff_ms,
                                        metadata_max_age_ms=settings.metadata_max_age_ms,
                                        allow_auto_create_topics=settings.allow_auto_create_topics,
                                        metadata_request_timeout_ms=settings.metadata_request_timeout_ms)
        default = DefaultPartitioner(settings.batch_size)
        chosen = settings.partitioner
        self._default_partitioner = chosen is None
        self._topic_partitions: dict[tuple[str, int], TopicPartition] = {}
        self.plain_sends = settings.key_serializer is None and settings.value_serializer is None
        if chosen is None:
            self.partitioner: Any = default
        elif hasattr(chosen, "partition") and hasattr(chosen, "on_new_batch"):
            self.partitioner = chosen
        elif callable(chosen):
            self.partitioner = _CallablePartitioner(chosen, default)
        else:
            raise ConfigError("partitioner must be a Partitioner or a callable(key, all, available)")
        self.accumulator = RecordAccumulator(
            batch_size=settings.batch_size, buffer_memory=settings.buffer_memory, linger_ms=settings.linger_ms,
            max_request_size=settings.max_request_size, delivery_timeout_ms=settings.delivery_timeout_ms,
            max_in_flight_per_partition=settings.in_flight_per_partition, idempotent=settings.enable_idempotence)
        self.transaction: TransactionManager | None = None
        if settings.transactional_id is not None:
            self.transaction = TransactionManager(
                settings.transactional_id, settings.transaction_timeout_ms, self.accumulator, self.metadata,
                self.transport, request_timeout_ms=settings.request_timeout_ms,
                retry_backoff_ms=settings.retry_backoff_ms, max_block_ms=settings.max_block_ms)
        self.sender: Sender | None = None
        accumulator = self.accumulator
        #: kafka-python's ``metrics()``, recorded by the sender once per request
        self.metrics = ProducerMetrics(lambda: accumulator.buffer_memory, lambda: accumulator.used_memory)
        self.loop: asyncio.AbstractEventLoop | None = None
        self.loop_thread: threading.Thread | None = None
        self.closed = False
        #: The compiled ``SendLane`` of this core, or None (pure Python)
        self.lane: Any = _LANE_CLASS(self) if _LANE_CLASS is not None else None
        #: ``send_common(topic, value, key, headers, partition, timestamp_ms)``: :meth:`send_plain`,
        #: compiled when the extension is loaded (the same results); what ``send()`` tries first.
        self.send_common: Callable[[str, Any, Any, Any, int | None, int | None], RecordFuture | None] = \
            self.lane.send if self.lane is not None else self.send_plain

    async def start(self) -> None:
        """Start the metadata refresher and the sender on the running loop."""
        self.loop = asyncio.get_running_loop()
        self.loop_thread = threading.current_thread()
        if self.transaction is not None:
            self.transaction.loop_ident = threading.get_ident()
        self.sender = Sender(self.settings, self.accumulator, self.metadata, self.transport, self.transaction,
                             self.metrics)
        self.accumulator.wakeup = self._wake
        self.metadata.add_listener(lambda view: self._wake())
        self.metadata.start()
        self.sender.start()

    def _wake(self) -> None:
        sender = self.sender
        if sender is None or self.loop is None:
            return
        sender.poked = True  # before reading ``idle``: the sender sets ``idle`` before reading this
        if threading.current_thread() is self.loop_thread:
            sender.wake()
        elif sender.idle:
            try:
                self.loop.call_soon_threadsafe(sender.wake)
            except RuntimeError:
                pass

    # -- record path (any thread) -------------------------------------------------------------
    def prepare(self, topic: str, value: Any, key: Any, headers: Any, partition: int | None,
                timestamp_ms: int | None) -> _Prepared:
        if self.closed:
            raise IllegalStateError("the producer is closed")
        if not isinstance(topic, str) or not topic:
            raise ConfigError(f"topic must be a non-empty string, got {topic!r}")
        if value is None and key is None:
            raise ConfigError("need at least one of key and value")
        settings = self.settings
        if key is not None and settings.key_serializer is not None:
            key = settings.key_serializer(key)
        if value is not None and settings.value_serializer is not None:
            value = settings.value_serializer(value)
        if key is not None and not isinstance(key, (bytes, bytearray, memoryview)):
            raise ConfigError(f"key must be bytes (or set key_serializer), got {type(key).__name__}")
        if value is not None and not isinstance(value, (bytes, bytearray, memoryview)):
            raise ConfigError(f"value must be bytes (or set value_serializer), got {type(value).__name__}")
        if key is not None and type(key) is not bytes:
            key = bytes(key)
        if value is not None and type(value) is not bytes:
            value = bytes(value)
        size = RECORD_OVERHEAD + (len(key) if key is not None else 0) + (len(value) if value is not None else 0)
        header_list = None
        if headers:
            header_list = []
            for item in headers:
                name, data = item
                if not isinstance(name, str):
                    raise ConfigError(f"header names must be str, got {type(name).__name__}")
                if data is not None and not isinstance(data, bytes):
                    if isinstance(data, (bytearray, memoryview)):
                        data = bytes(data)
                    else:
                        raise ConfigError(f"header values must be bytes or None, got {type(data).__name__}")
                header_list.append((name, data))
                size += len(name) + (len(data) if data is not None else 0) + 2
        if size + BATCH_OVERHEAD > settings.max_request_size:
            raise MessageSizeTooLargeError(
                f"the record is {size} bytes when serialized, more than max_request_size={settings.max_request_size}")
        if size > settings.buffer_memory:
            raise MessageSizeTooLargeError(
                f"the record is {size} bytes when serialized, more than buffer_memory={settings.buffer_memory}")
        if timestamp_ms is None:
            timestamp = int(time.time() * 1000)
        else:
            timestamp = int(timestamp_ms)
        if partition is not None and (isinstance(partition, bool) or not isinstance(partition, int) or partition < 0):
            raise ConfigError(f"partition must be a non-negative integer, got {partition!r}")
        return _Prepared(topic, key, value, header_list, partition, timestamp, size)

    def send_plain(self, topic: str, value: Any, key: Any, headers: Any, partition: int | None,
                   timestamp_ms: int | None) -> RecordFuture | None:
        """The common ``send()`` in one pass: bytes value, bytes or no key, no headers, no
        explicit partition, no serializers. None when the general path (``prepare`` and
        ``place``) must run: another shape, producer closed, topic not in the metadata, record
        too large, or no room in ``buffer_memory`` — that path raises or waits as appropriate."""
        if headers is not None or partition is not None or type(value) is not bytes or not self.plain_sends \
                or (key is not None and type(key) is not bytes):
            return None
        partitions = self.metadata.view.partitions.get(topic)
        if not partitions or self.closed:
            return None
        size = RECORD_OVERHEAD + len(value) + (len(key) if key is not None else 0)
        settings = self.settings
        if size + BATCH_OVERHEAD > settings.max_request_size or size > settings.buffer_memory:
            return None
        if timestamp_ms is None:
            timestamp = int(time.time() * 1000)
        else:
            timestamp = int(timestamp_ms)
        if len(partitions) == 1 and self._default_partitioner:
            number = partitions[0]
        else:
            number = self.partitioner.partition(topic, key, partitions, self.metadata.view.available.get(topic, ()),
                                                size)
        tp = self._topic_partitions.get((topic, number))
        if tp is None:
            tp = self._topic_partitions[(topic, number)] = TopicPartition(topic, number)
        transaction = self.transaction
        if transaction is not None and (transaction.state is not _IN_TRANSACTION or tp not in transaction.added):
            transaction.before_append(tp)  # the common case (a partition already in the transaction) skips the call
        return self.accumulator.append(tp, timestamp, key, value, None, size)

    def place(self, record: _Prepared) -> Any:
        """The record's future; ``NEEDS_METADATA`` or None (no memory) when the caller must wait."""
        view = self.metadata.view
        topic = record.topic
        partitions = view.partitions.get(topic)
        if not partitions:
            return NEEDS_METADATA
        if record.partition is not None and record.partition >= len(partitions):
            raise UnknownTopicOrPartitionError(
                f"partition {record.partition} of topic {topic!r} is not in [0, {len(partitions)})")
        number = self.partitioner.partition(topic, record.key, partitions, view.available.get(topic, ()),
                                            record.size, explicit_partition=record.partition)
        tp = self._topic_partitions.get((topic, number))
        if tp is None:
            tp = self._topic_partitions[(topic, number)] = TopicPartition(topic, number)
        transaction = self.transaction
        if transaction is not None and (transaction.state is not _IN_TRANSACTION or tp not in transaction.added):
            transaction.before_append(tp)
        return self.accumulator.append(tp, record.timestamp, record.key, record.value, record.headers, record.size)

    # -- bulk path ----------------------------------------------------------------------------
    def prepare_bulk(self, topic: str, values: Sequence[Any], keys: Sequence[Any] | None,
                     partition: int | None, timestamp_ms: int | None,
                     headers: Sequence[Any] | None) -> tuple[list[Any], list[Any] | None, list[Any] | None, int]:
        if self.closed:
            raise IllegalStateError("the producer is closed")
        settings = self.settings
        value_list = list(values)
        if settings.value_serializer is not None:
            serialize = settings.value_serializer
            value_list = [None if value is None else serialize(value) for value in value_list]
        key_list = None
        if keys is not None:
            key_list = list(keys)
            if len(key_list) != len(value_list):
                raise ConfigError("keys and values differ in length")
            if settings.key_serializer is not None:
                serialize_key = settings.key_serializer
                key_list = [None if key is None else serialize_key(key) for key in key_list]
        header_list = None
        if headers is not None:
            header_list = [list(item or []) for item in headers]
            if len(header_list) != len(value_list):
                raise ConfigError("headers and values differ in length")
        timestamp = int(time.time() * 1000) if timestamp_ms is None else int(timestamp_ms)
        return value_list, key_list, header_list, timestamp

    def plan_bulk(self, topic: str, values: list[Any], keys: list[Any] | None, headers: list[Any] | None,
                  partition: int | None) -> list[tuple[int, list[Any], list[Any] | None, list[Any] | None, int]] | None:
        """Split a bulk send into (partition, values, keys, headers, bytes) chunks; None when the
        topic's metadata is not known yet."""
        view = self.metadata.view
        partitions = view.partitions.get(topic)
        if not partitions:
            return None
        limit = self.settings.max_request_size - BATCH_OVERHEAD - 512
        try:
            sizes = list(map(len, values))
        except TypeError:
            sizes = [0 if value is None else len(value) for value in values]
        if keys is not None:
            sizes = [size + (0 if key is None else len(key)) for size, key in zip(sizes, keys)]
        if headers is not None:
            sizes = [size + sum(len(name) + len(data or b"") for name, data in item)
                     for size, item in zip(sizes, headers)]
        if partition is not None and partition >= len(partitions):
            raise UnknownTopicOrPartitionError(
                f"partition {partition} of topic {topic!r} is not in [0, {len(partitions)})")
        groups: list[tuple[int | None, list[int] | None]]
        if partition is not None:
            groups = [(partition, None)]
        elif keys is not None and any(key is not None for key in keys):
            by_partition: dict[int, list[int]] = {}
            count = len(partitions)
            for index, key in enumerate(keys):
                number = to_positive(murmur2(key)) % count if key is not None else self.partitioner.partition(
                    topic, None, partitions, view.available.get(topic, ()), sizes[index] + RECORD_OVERHEAD)
                by_partition.setdefault(number, []).append(index)
            groups = list(by_partition.items())
        else:
            groups = [(None, None)]
        chunks: list[tuple[int, list[Any], list[Any] | None, list[Any] | None, int]] = []
        for number, indexes in groups:
            if indexes is None:
                group_values, group_keys, group_headers, group_sizes = values, keys, headers, sizes
            else:
                group_values = [values[i] for i in indexes]
                group_keys = [keys[i] for i in indexes] if keys is not None else None
                group_headers = [headers[i] for i in indexes] if headers is not None else None
                group_sizes = [sizes[i] for i in indexes]
            for start, end in chunk_bounds(group_sizes, limit):
                chunk_bytes = sum(group_sizes[start:end]) + RECORD_OVERHEAD * (end - start)
                if chunk_bytes + BATCH_OVERHEAD > self.settings.max_request_size:
                    raise MessageSizeTooLargeError(
                        f"a record of {chunk_bytes} bytes exceeds max_request_size={self.settings.max_request_size}")
                target = number if number is not None else self.partitioner.partition(
                    topic, None, partitions, view.available.get(topic, ()), max(chunk_bytes, self.settings.batch_size))
                chunks.append((target, group_values[start:end],
                               group_keys[start:end] if group_keys is not None else None,
                               group_headers[start:end] if group_headers is not None else None, chunk_bytes))
        return chunks

    def place_chunk(self, topic: str, chunk: tuple[int, list[Any], list[Any] | None, list[Any] | None, int],
                    timestamp: int) -> BatchResult | None:
        number, values, keys, headers, size = chunk
        tp = TopicPartition(topic, number)
        if self.transaction is not None:
            self.transaction.before_append(tp)
        return self.accumulator.append_bulk(tp, values, keys, timestamp, headers, size)

    # -- loop side ----------------------------------------------------------------------------
    async def wait_for_topic(self, topic: str, timeout_ms: float) -> tuple[int, ...]:
        return await self.metadata.wait_for_topic(topic, timeout_ms)

    async def partitions_for(self, topic: str, timeout_ms: float) -> set[int]:
        return set(await self.metadata.wait_for_topic(topic, timeout_ms))

    async def flush(self, timeout: float | None) -> None:
        pending = self.accumulator.begin_flush()
        try:
            if pending:
                waiters = [result.future() for result in pending]
                _, not_done = await asyncio.wait(waiters, timeout=timeout)
                if not_done:
                    raise KafkaTimeoutError(f"flush did not finish within {timeout} s "
                                            f"({len(not_done)} batch(es) still pending)")
        finally:
            self.accumulator.end_flush()

    # -- transactions (loop side) -------------------------------------------------------------
    def transactions(self) -> TransactionManager:
        if self.transaction is None:
            raise IllegalStateError("the producer has no transactional_id")
        return self.transaction

    async def _flush_errors(self) -> list[BaseException]:
        """Send everything queued and wait for it; the errors of the batches that failed."""
        pending = self.accumulator.begin_flush()
        try:
            waiters = [result.future() for result in pending]
            if waiters:
                await asyncio.wait(waiters)
            return [result.error for result in pending if result.error is not None]
        finally:
            self.accumulator.end_flush()

    async def commit_transaction(self) -> None:
        transaction = self.transactions()
        transaction._check(*[state for state in TxnState if state is not TxnState.FATAL_ERROR])
        await transaction.end_transaction(True, await self._flush_errors())

    async def abort_transaction(self) -> None:
        transaction = self.transactions()
        transaction.fail_unadded()
        await self._flush_errors()
        await transaction.end_transaction(False, [])

    async def close(self, timeout: float | None) -> None:
        """Send what is buffered (up to ``timeout`` seconds), then stop and release everything."""
        if self.closed:
            return
        self.closed = True
        self.accumulator.begin_close()
        sender = self.sender
        if sender is not None:
            try:
                if timeout is None or timeout > 0:
                    pending = [result.future() for result in self.accumulator.pending_results()]
                    if pending:
                        _, not_done = await asyncio.wait(pending, timeout=timeout)
                        if not_done:
                            log.warning("closing the producer: %d batch(es) still unacknowledged after %s s fail now:"
                                        "\n  %s", len(not_done), timeout,
                                        "\n  ".join(self.accumulator.describe_pending(time.monotonic())))
            finally:
                self.accumulator.abort(IllegalStateError("the producer was closed before the record was sent"))
                await sender.stop(force=True)
        await self.metadata.close()
        await self.transport.close()



def _load_lane_class() -> Any:
    """``kafkalite.client._speedups.SendLane`` (configured), or None when the extension is
    missing or ``KAFKALITE_NO_EXTENSIONS`` asks for Python."""
    extension = load_extension("kafkalite.client._speedups")
    if extension is None:
        return None
    extension.configure(RecordAccumulator, ProducerBatch, _PartitionState, RecordFuture, TopicPartition)
    return extension.SendLane


_LANE_CLASS = _load_lane_class()
#: Which send path producers use: "compiled" or "pure-python".
SEND_IMPLEMENTATION = "compiled" if _LANE_CLASS is not None else "pure-python"

