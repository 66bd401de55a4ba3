"""Consumers: :class:`KafkaConsumer` (kafka-python's API, blocking) and :class:`AIOKafkaConsumer`
(aiokafka's shape, asyncio), both thin front-ends over one
:class:`~kafkalite.client.consumer_core.ConsumerCore`.

Modules of the consumer, top to bottom: this one (the two front ends and the options they take);
:mod:`.consumer_core` (subscription and assignment, positions, the poll loop, offsets);
:mod:`.consumer_settings` (option and argument validation); :mod:`.consumer_callbacks` (which
thread runs user callbacks); :mod:`.group` with :mod:`.group_heartbeat`, :mod:`.group_assignment`
and :mod:`.coordinator_link` (group membership); :mod:`.fetcher` (background prefetching).

Assignment: ``assign()`` takes explicit partitions. ``subscribe(topics | pattern, listener=)``
without a ``group_id`` assigns *every* partition of the matching topics and follows topics and
partitions as they appear (:class:`~kafkalite.client.consumer_core.StandaloneMembership`);
with a ``group_id`` the consumer joins the consumer group and the group's leader decides
(:class:`~kafkalite.client.group.GroupMembership`: join/sync inside ``poll()``, background
heartbeats, rebalance listener, commits). Positions of newly assigned partitions start from the
group's committed offsets when there is a ``group_id`` (also with ``assign()``), else from
``auto_offset_reset``.

Options are kafka-python's (defaults: ``auto_offset_reset='latest'``, ``fetch_min_bytes=1``,
``fetch_max_wait_ms=500``, ``fetch_max_bytes=52428800``, ``max_partition_fetch_bytes=1048576``,
``max_poll_records=500``, ``check_crcs=True``, ``isolation_level='read_uncommitted'``,
``consumer_timeout_ms`` = forever for iteration). Deserializers are not called for ``None``.
Group options, with current Kafka's defaults: ``session_timeout_ms=45000`` (kafka-python still
says 10000, Kafka's default before 3.0), ``heartbeat_interval_ms=3000`` (must be below the
session timeout), ``max_poll_interval_ms=300000`` (sent as the rebalance timeout unless
``rebalance_timeout_ms`` is given; a member that does not poll within it leaves the group),
``partition_assignment_strategy=[RangeAssignor, CooperativeStickyAssignor]`` (classes,
instances or names; the rebalance protocol is cooperative only when every strategy is),
``group_instance_id=None`` (static membership: no LeaveGroup on close, a restart within the
session timeout gets its partitions back without a rebalance), ``enable_auto_commit=True`` with
``auto_commit_interval_ms=5000`` (committed at poll time, before partitions are revoked and on
close), ``default_offset_commit_callback``.

Reading: :meth:`KafkaConsumer.poll` returns ``{TopicPartition: [ConsumerRecord]}`` (at most
``max_records``) from data the background fetcher (:mod:`kafkalite.client.fetcher`) already
prefetched, waiting up to ``timeout_ms`` when there is none; iteration yields records one by
one. The bulk path :meth:`KafkaConsumer.poll_batches` hands out whole record batches
(:class:`~kafkalite.client.fetcher.FetchedBatch`: ``values()`` decodes only the values, fast).

Offsets: ``commit(offsets=None)`` (default: every assigned partition's position) waits;
``commit_async(offsets, callback)`` does not (the callback runs at the next poll, commit or
close); ``committed(tp)``. ILLEGAL_GENERATION / UNKNOWN_MEMBER_ID raise CommitFailedError (the
group rebalanced without this member; the next poll rejoins). Without a ``group_id`` these
calls raise GroupCoordinatorUnsupportedError.

Concurrency: the core lives on one event loop (a KafkaConsumer's private loop thread, the
caller's loop for AIOKafkaConsumer); KafkaConsumer methods hop onto it. User callbacks
(rebalance listener, commit callbacks) go through a
:class:`~kafkalite.client.consumer_callbacks.CallbackRunner`: on the loop for AIOKafkaConsumer
(coroutine methods are awaited), on the thread blocked in ``poll()`` / ``close()`` for
KafkaConsumer (:class:`~kafkalite.client.consumer_callbacks.CallerThreadCallbacks`), so a
listener may call the consumer. Like kafka-python's, a consumer is meant for one thread.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from kafkalite import protocol
from kafkalite.client._loop import LoopThread
from kafkalite.client.consumer_callbacks import CallbackRunner, CallerThreadCallbacks
from kafkalite.client.consumer_core import ConsumerCore
from kafkalite.client.consumer_settings import ConsumerSettings
from kafkalite.client.fetcher import FetchedBatch
from kafkalite.client.types import (
    ConsumerGroupMetadata,
    ConsumerRecord,
    OffsetAndMetadata,
    OffsetAndTimestamp,
    TopicPartition,
)
from kafkalite.errors import IllegalStateError

# commit_async's callback: (the offsets, the error or None)
CommitCallback = Callable[[dict[TopicPartition, OffsetAndMetadata], BaseException | None], Any]


# --- the blocking consumer ----------------------------------------------------------------------


def group_metadata_of_core(core: ConsumerCore) -> ConsumerGroupMetadata:
    group = core.group
    if group is None:
        raise IllegalStateError("the consumer has no group_id")
    return ConsumerGroupMetadata(group.group_id, group.generation, group.member_id, group.group_instance_id)


class KafkaConsumer:
    """kafka-python's KafkaConsumer on kafkalite (see the module docstring)."""

    def __init__(self, *topics: str, **options: Any) -> None:
        self.config = dict(options)
        self._settings = ConsumerSettings.from_options(options)
        self._loop = LoopThread(f"kafkalite-consumer-{self._settings.client_id}")
        self._callbacks = CallerThreadCallbacks(self._loop)
        try:
            self._core = ConsumerCore(self._settings, self._callbacks)
            self._loop.run(self._core.start())
        except BaseException:
            self._loop.stop()
            raise
        self._finalizer = weakref.finalize(self, _stop_loop, self._loop)
        self._iterator_buffer: list[ConsumerRecord] = []
        self._iterator_index = 0
        self._closed = False
        if topics:
            self.subscribe(list(topics))

    # -- assignment --
    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        self._loop.call(self._core.assign, list(partitions))

    def assignment(self) -> set[TopicPartition]:
        return self._loop.call(self._core.assignment)

    def subscribe(self, topics: Sequence[str] = (), pattern: str | None = None, listener: Any = None) -> None:
        self._loop.call(self._core.subscribe, topics, pattern, listener)

    def subscription(self) -> set[str] | None:
        return self._loop.call(self._core.subscription)

    def unsubscribe(self) -> None:
        self._call(self._core.unsubscribe())
        self._iterator_buffer = []

    def _call(self, coroutine: Any) -> Any:
        """Run a core coroutine; rebalance listener and commit callbacks run on this thread."""
        if self._closed:
            coroutine.close()
            raise IllegalStateError("the consumer is closed")
        return self._callbacks.call(coroutine)

    # -- reading --
    def poll(self, timeout_ms: float = 0, max_records: int | None = None,
             update_offsets: bool = True) -> dict[TopicPartition, list[ConsumerRecord]]:
        """Records fetched so far (up to ``max_records``), waiting up to ``timeout_ms`` for some.

        With a ``group_id`` and a subscription, poll also joins the group and runs rebalances
        (the listener is called from here, on this thread)."""
        records: dict[TopicPartition, list[ConsumerRecord]] = self._call(self._core.poll(timeout_ms, max_records))
        return records

    def poll_batches(self, timeout_ms: float = 0) -> list[FetchedBatch]:
        """The bulk path: whole prefetched record batches (``.values()`` / ``.records()``)."""
        batches: list[FetchedBatch] = self._call(self._core.poll_batches(timeout_ms))
        return batches

    def __iter__(self) -> Iterator[ConsumerRecord]:
        return self

    def __next__(self) -> ConsumerRecord:
        if self._iterator_index < len(self._iterator_buffer):
            record = self._iterator_buffer[self._iterator_index]
            self._iterator_index += 1
            return record
        timeout = self._settings.consumer_timeout_ms
        deadline = None if timeout == float("inf") else time.monotonic() + timeout / 1000
        while True:
            wait_ms = 1000.0 if deadline is None else max(0.0, (deadline - time.monotonic()) * 1000)
            batch = self.poll(timeout_ms=min(wait_ms, 1000.0))
            if batch:
                records = [record for items in batch.values() for record in items]
                self._iterator_buffer = records
                self._iterator_index = 1
                return records[0]
            if deadline is not None and time.monotonic() >= deadline:
                raise StopIteration

    # -- positions --
    def position(self, partition: TopicPartition, timeout_ms: float | None = None) -> int:
        return self._loop.run(self._core.position(partition, timeout_ms))

    def seek(self, partition: TopicPartition, offset: int) -> None:
        self._loop.call(self._core.seek, partition, offset)
        self._iterator_buffer = []

    def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        self._loop.call(self._core.seek_to, partitions, "earliest")
        self._iterator_buffer = []

    def seek_to_end(self, *partitions: TopicPartition) -> None:
        self._loop.call(self._core.seek_to, partitions, "latest")
        self._iterator_buffer = []

    def pause(self, *partitions: TopicPartition) -> None:
        self._loop.call(self._core.pause, partitions)

    def resume(self, *partitions: TopicPartition) -> None:
        self._loop.call(self._core.resume, partitions)

    def paused(self) -> set[TopicPartition]:
        return self._loop.call(self._core.paused)

    def highwater(self, partition: TopicPartition) -> int | None:
        return self._loop.call(self._core.highwater, partition)

    # -- offsets and metadata --
    def offsets_for_times(self, timestamps: dict[TopicPartition, int],
                          timeout_ms: float | None = None) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        return self._loop.run(self._core.offsets_for_times(timestamps, timeout_ms))

    def beginning_offsets(self, partitions: Iterable[TopicPartition],
                          timeout_ms: float | None = None) -> dict[TopicPartition, int]:
        return self._loop.run(self._core.offsets_at(partitions, protocol.EARLIEST_TIMESTAMP, timeout_ms))

    def end_offsets(self, partitions: Iterable[TopicPartition],
                    timeout_ms: float | None = None) -> dict[TopicPartition, int]:
        return self._loop.run(self._core.offsets_at(partitions, protocol.LATEST_TIMESTAMP, timeout_ms))

    def topics(self) -> set[str]:
        return self._loop.run(self._core.topics())

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        return self._loop.run(self._core.partitions_for_topic(topic))

    # -- committed offsets --
    def commit(self, offsets: dict[TopicPartition, Any] | None = None, timeout_ms: float | None = None) -> None:
        """Commit ``offsets`` ({TopicPartition: OffsetAndMetadata | int}; default: the positions of
        every assigned partition) and wait. CommitFailedError when the group rebalanced meanwhile."""
        self._call(self._core.commit(offsets, timeout_ms))

    def commit_async(self, offsets: dict[TopicPartition, Any] | None = None,
                     callback: CommitCallback | None = None
                     ) -> concurrent.futures.Future[dict[TopicPartition, OffsetAndMetadata]]:
        """Start a commit without waiting. ``callback(offsets, exception_or_None)`` runs on this
        thread at the next poll(), commit() or close(); the returned future resolves to the offsets."""
        if self._closed:
            raise IllegalStateError("the consumer is closed")

        async def start() -> asyncio.Task[dict[TopicPartition, OffsetAndMetadata]]:
            return self._core.commit_in_background(offsets, callback)

        task = self._loop.run(start())
        result: concurrent.futures.Future[dict[TopicPartition, OffsetAndMetadata]] = concurrent.futures.Future()

        def relay(done: asyncio.Task[dict[TopicPartition, OffsetAndMetadata]]) -> None:
            if done.cancelled():
                result.cancel()
            elif done.exception() is not None:
                result.set_exception(done.exception())
            else:
                result.set_result(done.result())

        self._loop.call_soon(task.add_done_callback, relay)
        return result

    def committed(self, partition: TopicPartition, metadata: bool = False, timeout_ms: float | None = None) -> Any:
        """The committed offset of ``partition`` (an OffsetAndMetadata with ``metadata=True``), or None."""
        value = self._call(self._core.committed(partition, timeout_ms))
        if value is None:
            return None
        return value if metadata else value.offset

    # -- lifecycle --
    def close(self, autocommit: bool = True, timeout_ms: float | None = None) -> None:
        """Commit (auto-commit on and ``autocommit``), call the listener, leave the group, stop."""
        if self._closed:
            return
        try:
            self._callbacks.call(self._core.close(autocommit))
        finally:
            self._closed = True
            self._finalizer()

    def group_metadata(self) -> ConsumerGroupMetadata:
        """The consumer's group, generation and member id, for a transactional producer's
        ``send_offsets_to_transaction`` (IllegalStateError without a ``group_id``)."""
        return self._loop.call(group_metadata_of_core, self._core)

    def bootstrap_connected(self) -> bool:
        return bool(self._core.metadata.view.brokers)

    def metrics(self, raw: bool = False) -> dict[str, Any]:
        """kafka-python's metrics: ``{group: {name: value}}`` (see
        :mod:`kafkalite.client.client_metrics`); ``raw`` is accepted and gives the same."""
        return self._core.metrics.snapshot()

    def __enter__(self) -> KafkaConsumer:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()


def _stop_loop(loop: LoopThread) -> None:
    loop.stop()


# --- the asyncio consumer -----------------------------------------------------------------------


class AIOKafkaConsumer:
    """aiokafka-shaped asyncio consumer on the same core: ``await start()``, ``await getone()``,
    ``await getmany(timeout_ms=, max_records=)``, ``async for``, ``await getbatches()`` (bulk),
    ``seek``, ``await seek_to_beginning()``, ``await position()``, ``await stop()``..."""

    def __init__(self, *topics: str, **options: Any) -> None:
        self._settings = ConsumerSettings.from_options(options)
        self._core = ConsumerCore(self._settings, CallbackRunner())
        self._topics = list(topics)
        self._started = False
        self._buffer: list[ConsumerRecord] = []
        self._index = 0

    async def start(self) -> None:
        if self._started:
            return
        self._started = True
        await self._core.start()
        if self._topics:
            self._core.subscribe(self._topics)

    async def stop(self, autocommit: bool = True) -> None:
        """Commit (auto-commit), call the listener, leave the group, stop."""
        await self._core.close(autocommit)

    close = stop

    def group_metadata(self) -> ConsumerGroupMetadata:
        """The consumer's group, generation and member id (see KafkaConsumer.group_metadata)."""
        return group_metadata_of_core(self._core)

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        self._core.assign(list(partitions))

    def assignment(self) -> set[TopicPartition]:
        return self._core.assignment()

    def subscribe(self, topics: Sequence[str] = (), pattern: str | None = None, listener: Any = None) -> None:
        self._core.subscribe(topics, pattern, listener)

    def subscription(self) -> set[str] | None:
        return self._core.subscription()

    def unsubscribe(self) -> asyncio.Future[None]:
        """Drop the subscription; a group member revokes, commits and leaves in the background
        (the returned task; the next poll or stop waits for it)."""
        self._buffer = []
        return self._core.unsubscribe_in_background()

    async def getmany(self, *partitions: TopicPartition, timeout_ms: float = 0,
                      max_records: int | None = None) -> dict[TopicPartition, list[ConsumerRecord]]:
        return await self._core.poll(timeout_ms, max_records, partitions or None)

    poll = getmany

    async def getbatches(self, timeout_ms: float = 0) -> list[FetchedBatch]:
        """The bulk path (see KafkaConsumer.poll_batches)."""
        return await self._core.poll_batches(timeout_ms)

    poll_batches = getbatches

    async def getone(self, *partitions: TopicPartition) -> ConsumerRecord:
        while True:
            if self._index < len(self._buffer):
                record = self._buffer[self._index]
                self._index += 1
                if not partitions or TopicPartition(record.topic, record.partition) in partitions:
                    return record
                continue
            batch = await self._core.poll(1000, None, partitions or None)
            self._buffer = [record for items in batch.values() for record in items]
            self._index = 0

    def __aiter__(self) -> AIOKafkaConsumer:
        return self

    async def __anext__(self) -> ConsumerRecord:
        if self._core.closed:
            raise StopAsyncIteration
        try:
            return await self.getone()
        except IllegalStateError:
            if self._core.closed:
                raise StopAsyncIteration from None
            raise

    async def position(self, partition: TopicPartition, timeout_ms: float | None = None) -> int:
        return await self._core.position(partition, timeout_ms)

    def seek(self, partition: TopicPartition, offset: int) -> None:
        self._core.seek(partition, offset)
        self._buffer = []

    async def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        self._core.seek_to(partitions, "earliest")
        self._buffer = []

    async def seek_to_end(self, *partitions: TopicPartition) -> None:
        self._core.seek_to(partitions, "latest")
        self._buffer = []

    def pause(self, *partitions: TopicPartition) -> None:
        self._core.pause(partitions)

    def resume(self, *partitions: TopicPartition) -> None:
        self._core.resume(partitions)

    def paused(self) -> set[TopicPartition]:
        return self._core.paused()

    def highwater(self, partition: TopicPartition) -> int | None:
        return self._core.highwater(partition)

    async def offsets_for_times(self, timestamps: dict[TopicPartition, int],
                                timeout_ms: float | None = None) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        return await self._core.offsets_for_times(timestamps, timeout_ms)

    async def beginning_offsets(self, partitions: Iterable[TopicPartition],
                                timeout_ms: float | None = None) -> dict[TopicPartition, int]:
        return await self._core.offsets_at(partitions, protocol.EARLIEST_TIMESTAMP, timeout_ms)

    async def end_offsets(self, partitions: Iterable[TopicPartition],
                          timeout_ms: float | None = None) -> dict[TopicPartition, int]:
        return await self._core.offsets_at(partitions, protocol.LATEST_TIMESTAMP, timeout_ms)

    async def topics(self) -> set[str]:
        return await self._core.topics()

    async def partitions_for_topic(self, topic: str) -> set[int] | None:
        return await self._core.partitions_for_topic(topic)

    async def commit(self, offsets: dict[TopicPartition, Any] | None = None, timeout_ms: float | None = None) -> None:
        """Commit ``offsets`` (default: the positions of every assigned partition) and wait."""
        await self._core.commit(offsets, timeout_ms)

    def commit_async(self, offsets: dict[TopicPartition, Any] | None = None,
                     callback: CommitCallback | None = None
                     ) -> asyncio.Task[dict[TopicPartition, OffsetAndMetadata]]:
        """Start a commit; ``callback`` runs at the next getmany()/commit()/stop()."""
        return self._core.commit_in_background(offsets, callback)

    async def committed(self, partition: TopicPartition, metadata: bool = False,
                        timeout_ms: float | None = None) -> Any:
        """The committed offset of ``partition`` (an OffsetAndMetadata with ``metadata=True``), or None."""
        value = await self._core.committed(partition, timeout_ms)
        if value is None:
            return None
        return value if metadata else value.offset

    async def __aenter__(self) -> AIOKafkaConsumer:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self.stop()


# ConsumerSettings is the options' validated form, which tests and tools build on their own.
__all__ = ["AIOKafkaConsumer", "CommitCallback", "ConsumerSettings", "KafkaConsumer"]
