"""Producers: :class:`KafkaProducer` (kafka-python's API, blocking) and :class:`AIOKafkaProducer`
(aiokafka's shape, asyncio), both thin front-ends over one
:class:`~kafkalite.client.producer_core.ProducerCore`.

Modules of the producer, top to bottom: this one (the two front ends and the options they
take); :mod:`.producer_core` (record and bulk paths, flush, close); :mod:`.producer_settings`
(option validation); :mod:`.sender` (the task that sends batches); :mod:`.accumulator`
(per-partition batches, memory budget); :mod:`.futures` (what ``send()`` returns).

Options and defaults are kafka-python's names with *current Kafka* defaults where kafka-python
is older: ``acks='all'``, ``enable_idempotence=True``, ``linger_ms=0``, ``retries`` unbounded
(limited by ``delivery_timeout_ms`` = 120 s), ``batch_size=16384``, ``buffer_memory=32 MiB``,
``max_request_size=1 MiB``, ``max_block_ms=60 s``, ``max_in_flight_requests_per_connection=5``,
``compression_type=None`` (or ``'gzip'``, ``'lz4'``, ``'zstd'``), ``request_timeout_ms=30 s``,
``socket_connection_setup_timeout_ms=10 s`` (connect and channel handshake, Kafka's name) and
``metadata_request_timeout_ms=3 s`` (how long one metadata request may take before the next
broker is asked; capped by ``request_timeout_ms``). As in Kafka, idempotence is
switched off silently when it was left at its default and ``acks`` is not ``all``, and a
conflicting explicit ``enable_idempotence=True`` is a ConfigError. Without idempotence and with
retries, one batch per partition is in flight, so retries never reorder. Serializers are not
called for ``None`` (a None value stays a tombstone). Options of kafka-python that concern its
socket layer (``api_version``, ``socket_options``, ``reconnect_backoff_ms``, metrics...) are
accepted and ignored; security options other than PLAINTEXT are refused.

Transactions (KIP-98, :mod:`kafkalite.client.transactions`): with ``transactional_id`` (which
implies idempotence and ``acks='all'``; ``transaction_timeout_ms``, default 60 s, at most the
brokers' ``transaction.max.timeout.ms``) the producer sends only inside a transaction:
``init_transactions()`` once, then ``begin_transaction()``, sends,
``send_offsets_to_transaction(offsets, consumer.group_metadata())`` and
``commit_transaction()`` or ``abort_transaction()``, kafka-python's names.

Record path: ``send()`` serializes, looks the topic up in the metadata snapshot (waiting up to
``max_block_ms`` for an unknown topic), picks the partition (explicit, key → murmur2, keyless →
sticky, see :mod:`kafkalite.client.partitioner`), and appends to the accumulator's lists
(:mod:`kafkalite.client.producer_core`) — encoding happens once per batch in the sender
(:mod:`kafkalite.client.sender`). The bulk API :meth:`KafkaProducer.send_batch` takes lists
of values (and keys) and turns them directly into whole batches of up to ``max_request_size``
bytes, with one future for all of them.

Concurrency: the core's state lives on one event loop — the private loop thread of a
KafkaProducer (:mod:`kafkalite.client._loop`), the caller's loop for AIOKafkaProducer — except
the accumulator append, which ``KafkaProducer.send`` calls from the user's threads (it is
thread-safe). A KafkaProducer may be shared by threads; callbacks run on its I/O thread.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Mapping, Sequence
from typing import Any

from kafkalite.client._loop import LoopThread
from kafkalite.client.futures import BulkFuture, RecordFuture
from kafkalite.client.producer_core import NEEDS_METADATA, ProducerCore
from kafkalite.client.producer_settings import ProducerSettings
from kafkalite.client.transactions import group_metadata_of
from kafkalite.client.types import TopicPartition
from kafkalite.errors import IllegalStateError, KafkaTimeoutError

# --- the blocking producer ----------------------------------------------------------------------


class KafkaProducer:
    """kafka-python's KafkaProducer on kafkalite (see the module docstring).

    ``send(topic, value=None, key=None, headers=None, partition=None, timestamp_ms=None)``
    returns a future (``get(timeout)``, ``add_callback``, ``add_errback``, ``is_done``);
    ``send_batch(topic, values, keys=None, partition=None, timestamp_ms=None, headers=None)`` is
    the bulk path; ``flush(timeout)``, ``close(timeout)``, ``partitions_for(topic)``.
    """

    def __init__(self, **options: Any) -> None:
        self.config = dict(options)
        self._settings = ProducerSettings.from_options(options)
        self._loop = LoopThread(f"kafkalite-producer-{self._settings.client_id}")
        try:
            self._core = ProducerCore(self._settings)
            self._loop.run(self._core.start())
        except BaseException:
            self._loop.stop()
            raise
        self._closed = False
        self._finalizer = weakref.finalize(self, _stop_loop, self._loop)
        lane = self._core.lane
        if lane is not None and type(self).send is KafkaProducer.send:
            # send() enters the compiled lane directly, which calls _send_general for whatever
            # it does not take (other record shapes, waits, errors), with the arguments as given
            lane.bind(self, KafkaProducer._send_general)
            vars(self)["send"] = lane.send_record

    def send(self, topic: str, value: Any = None, key: Any = None, headers: Any = None,
             partition: int | None = None, timestamp_ms: int | None = None) -> RecordFuture:
        """Queue one record; its future resolves when the broker acknowledged it."""
        future = self._core.send_common(topic, value, key, headers, partition, timestamp_ms)
        if future is not None:
            return future
        return self._send_general(topic, value, key, headers, partition, timestamp_ms)

    def _send_general(self, topic: str, value: Any = None, key: Any = None, headers: Any = None,
                      partition: int | None = None, timestamp_ms: int | None = None) -> RecordFuture:
        """``send()`` past its common case: serializers, headers, explicit partitions, waits for
        metadata or memory, and their errors (also the compiled lane's fallback)."""
        core = self._core
        record = core.prepare(topic, value, key, headers, partition, timestamp_ms)
        result = core.place(record)
        if type(result) is RecordFuture:
            return result
        deadline = time.monotonic() + self._settings.max_block_ms / 1000
        while True:
            if result is NEEDS_METADATA:
                remaining = (deadline - time.monotonic()) * 1000
                if remaining <= 0:
                    raise KafkaTimeoutError(f"topic {topic!r} not in metadata after {self._settings.max_block_ms} ms")
                self._loop.run(core.wait_for_topic(topic, remaining))
            elif result is None:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not core.accumulator.wait_for_memory(record.size, remaining):
                    raise KafkaTimeoutError(
                        f"buffer_memory full: no room for the record after {self._settings.max_block_ms} ms")
            else:
                placed: RecordFuture = result
                return placed
            result = core.place(record)

    def send_batch(self, topic: str, values: Sequence[Any], keys: Sequence[Any] | None = None,
                   partition: int | None = None, timestamp_ms: int | None = None,
                   headers: Sequence[Any] | None = None) -> BulkFuture:
        """Bulk path: many records as whole batches (one timestamp for all); one future whose
        ``get()`` gives a :class:`~kafkalite.client.types.BatchMetadata` per batch written.

        Keys (optional, same length) pick partitions by murmur2 like ``send``; without keys
        and partition the batches follow the sticky partitioner, one partition per batch.
        """
        core = self._core
        value_list, key_list, header_list, timestamp = core.prepare_bulk(topic, values, keys, partition,
                                                                         timestamp_ms, headers)
        future = BulkFuture(topic)
        if not value_list:
            return future
        deadline = time.monotonic() + self._settings.max_block_ms / 1000
        chunks = core.plan_bulk(topic, value_list, key_list, header_list, partition)
        if chunks is None:
            self._loop.run(core.wait_for_topic(topic, self._settings.max_block_ms))
            chunks = core.plan_bulk(topic, value_list, key_list, header_list, partition)
            assert chunks is not None
        for chunk in chunks:
            while True:
                result = core.place_chunk(topic, chunk, timestamp)
                if result is not None:
                    future._add(result, len(chunk[1]), timestamp)
                    break
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not core.accumulator.wait_for_memory(chunk[4], remaining):
                    raise KafkaTimeoutError(f"buffer_memory full after {self._settings.max_block_ms} ms")
        return future

    def flush(self, timeout: float | None = None) -> None:
        """Send everything buffered now and wait for the answers (KafkaTimeoutError on timeout)."""
        self._loop.run(self._core.flush(timeout))

    def close(self, timeout: float | None = None) -> None:
        """Flush (waiting at most ``timeout`` seconds; None = as long as it takes, which is
        bounded by ``delivery_timeout_ms`` plus one request timeout), then release the
        connections and the I/O thread. Records not acknowledged by then — queued or in flight
        — fail with IllegalStateError, and close returns promptly."""
        if self._closed:
            return
        self._closed = True
        try:
            self._loop.run(self._core.close(timeout))
        finally:
            self._finalizer()

    # -- transactions (kafka-python's names; a producer with ``transactional_id``) ---------------
    def init_transactions(self) -> None:
        """Register the transactional id (fencing older producers with the same id, and waiting
        for their open transaction to be aborted); call once before the first transaction."""
        self._loop.run(self._core.transactions().init_transactions())

    def begin_transaction(self) -> None:
        self._core.transactions().begin_transaction()

    def send_offsets_to_transaction(self, offsets: Mapping[TopicPartition, Any], group_metadata: Any) -> None:
        """Commit a consumer's offsets as part of the transaction (``group_metadata``: the
        consumer's ``group_metadata()``, or a group id)."""
        self._loop.run(self._core.transactions().send_offsets_to_transaction(offsets,
                                                                             group_metadata_of(group_metadata)))

    def commit_transaction(self) -> None:
        """Flush, then commit: every record of the transaction becomes visible to read_committed
        consumers at once. A record that failed makes this raise; then abort_transaction()."""
        self._loop.run(self._core.commit_transaction())

    def abort_transaction(self) -> None:
        """Abort: the transaction's records are never visible to read_committed consumers."""
        self._loop.run(self._core.abort_transaction())

    def partitions_for(self, topic: str) -> set[int]:
        """The partition ids of ``topic`` (waits for metadata up to ``max_block_ms``)."""
        return self._loop.run(self._core.partitions_for(topic, self._settings.max_block_ms))

    def bootstrap_connected(self) -> bool:
        return bool(self._core.metadata.view.brokers)

    def metrics(self, raw: bool = False) -> dict[str, Any]:
        """kafka-python's metrics: ``{group: {name: value}}`` (see
        :mod:`kafkalite.client.client_metrics`); ``raw`` is accepted and gives the same."""
        return self._core.metrics.snapshot()

    def __enter__(self) -> KafkaProducer:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()


def _stop_loop(loop: LoopThread) -> None:
    loop.stop()


# --- the asyncio producer -----------------------------------------------------------------------


class AIOKafkaProducer:
    """aiokafka-shaped asyncio producer on the same core: ``await start()``, ``await send(...)``
    (returns an awaitable future), ``await send_and_wait(...)``, ``await send_batch(...)``,
    ``await flush()``, ``await stop()``, ``await partitions_for(topic)``. Accepts the same
    options as KafkaProducer (and aiokafka's ``max_batch_size``)."""

    def __init__(self, **options: Any) -> None:
        self._settings = ProducerSettings.from_options(options)
        self._core = ProducerCore(self._settings)
        self._started = False

    async def start(self) -> None:
        if not self._started:
            self._started = True
            await self._core.start()

    async def send(self, topic: str, value: Any = None, key: Any = None, partition: int | None = None,
                   timestamp_ms: int | None = None, headers: Any = None) -> RecordFuture:
        """Queue one record (waiting for metadata or buffer space when needed); returns its future."""
        if not self._started:
            raise IllegalStateError("call await producer.start() first")
        core = self._core
        future = core.send_common(topic, value, key, headers, partition, timestamp_ms)
        if future is not None:
            return future
        record = core.prepare(topic, value, key, headers, partition, timestamp_ms)
        result = core.place(record)
        if type(result) is RecordFuture:
            return result
        deadline = time.monotonic() + self._settings.max_block_ms / 1000
        while True:
            if result is NEEDS_METADATA:
                remaining = (deadline - time.monotonic()) * 1000
                if remaining <= 0:
                    raise KafkaTimeoutError(f"topic {topic!r} not in metadata after {self._settings.max_block_ms} ms")
                await core.wait_for_topic(topic, remaining)
            elif result is None:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not await core.accumulator.wait_for_memory_async(record.size, remaining):
                    raise KafkaTimeoutError(
                        f"buffer_memory full: no room for the record after {self._settings.max_block_ms} ms")
            else:
                placed: RecordFuture = result
                return placed
            result = core.place(record)

    async def send_and_wait(self, topic: str, value: Any = None, key: Any = None, partition: int | None = None,
                            timestamp_ms: int | None = None, headers: Any = None) -> Any:
        future = await self.send(topic, value, key, partition, timestamp_ms, headers)
        return await future

    async def send_batch(self, topic: str, values: Sequence[Any], keys: Sequence[Any] | None = None,
                         partition: int | None = None, timestamp_ms: int | None = None,
                         headers: Sequence[Any] | None = None) -> BulkFuture:
        """The bulk path (see KafkaProducer.send_batch); ``await`` the returned future."""
        if not self._started:
            raise IllegalStateError("call await producer.start() first")
        core = self._core
        value_list, key_list, header_list, timestamp = core.prepare_bulk(topic, values, keys, partition,
                                                                         timestamp_ms, headers)
        future = BulkFuture(topic)
        if not value_list:
            return future
        deadline = time.monotonic() + self._settings.max_block_ms / 1000
        chunks = core.plan_bulk(topic, value_list, key_list, header_list, partition)
        if chunks is None:
            await core.wait_for_topic(topic, self._settings.max_block_ms)
            chunks = core.plan_bulk(topic, value_list, key_list, header_list, partition)
            assert chunks is not None
        for chunk in chunks:
            while True:
                result = core.place_chunk(topic, chunk, timestamp)
                if result is not None:
                    future._add(result, len(chunk[1]), timestamp)
                    break
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not await core.accumulator.wait_for_memory_async(chunk[4], remaining):
                    raise KafkaTimeoutError(f"buffer_memory full after {self._settings.max_block_ms} ms")
        return future

    async def flush(self, timeout: float | None = None) -> None:
        await self._core.flush(timeout)

    async def stop(self, timeout: float | None = None) -> None:
        await self._core.close(timeout)

    close = stop

    async def partitions_for(self, topic: str) -> set[int]:
        return await self._core.partitions_for(topic, self._settings.max_block_ms)

    async def init_transactions(self) -> None:
        await self._core.transactions().init_transactions()

    def begin_transaction(self) -> None:
        self._core.transactions().begin_transaction()

    async def send_offsets_to_transaction(self, offsets: Mapping[TopicPartition, Any], group_metadata: Any) -> None:
        await self._core.transactions().send_offsets_to_transaction(offsets, group_metadata_of(group_metadata))

    async def commit_transaction(self) -> None:
        await self._core.commit_transaction()

    async def abort_transaction(self) -> None:
        await self._core.abort_transaction()

    async def __aenter__(self) -> AIOKafkaProducer:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self.stop()


# ProducerSettings is the options' validated form, which tests and tools build on their own.
__all__ = ["AIOKafkaProducer", "KafkaProducer", "ProducerSettings"]
