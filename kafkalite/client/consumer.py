"""Consumers: :class:`KafkaConsumer` (kafka-python's API, blocking) and :class:`AIOKafkaConsumer`
(aiokafka's shape, asyncio), both thin front-ends over one :class:`ConsumerCore`.

Standalone for now: ``assign()`` takes explicit partitions; ``subscribe(topics | pattern)``
assigns *every* partition of the matching topics, like a group with one member, and follows
topics and partitions as they appear (:class:`StandaloneMembership`). That class is the seam
where consumer-group membership (the next issue) plugs in: a membership decides the assignment
and calls the rebalance listener. With a ``group_id`` everything that needs no coordinator works
(positions then start from ``auto_offset_reset``); what does need it — ``commit()``,
``commit_async()``, ``committed()`` — raises GroupCoordinatorUnsupportedError, and auto-commit
is not done (a warning says so once).

Options are kafka-python's (defaults: ``auto_offset_reset='latest'``, ``fetch_min_bytes=1``,
``fetch_max_wait_ms=500``, ``fetch_max_bytes=52428800``, ``max_partition_fetch_bytes=1048576``,
``max_poll_records=500``, ``check_crcs=True``, ``isolation_level='read_uncommitted'``,
``consumer_timeout_ms`` = forever for iteration). Deserializers are not called for ``None``.

Reading: :meth:`KafkaConsumer.poll` returns ``{TopicPartition: [ConsumerRecord]}`` (at most
``max_records``) from data the background fetcher (:mod:`kafkalite.client.fetcher`) already
prefetched, waiting up to ``timeout_ms`` when there is none; iteration yields records one by
one. The bulk path :meth:`KafkaConsumer.poll_batches` hands out whole record batches
(:class:`~kafkalite.client.fetcher.FetchedBatch`: ``values()`` decodes only the values, fast).

Concurrency: the core lives on one event loop (a KafkaConsumer's private loop thread, the
caller's loop for AIOKafkaConsumer); KafkaConsumer methods hop onto it. Like kafka-python's,
a consumer is meant for one thread.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
import weakref
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Sequence

from kafkalite import protocol
from kafkalite.client._loop import LoopThread
from kafkalite.client.fetcher import (
    FetchedBatch,
    Fetcher,
    PartitionState,
    list_offsets,
    pending_errors,
    take_batches,
    take_records,
)
from kafkalite.client.metadata import ClusterView, MetadataManager, parse_bootstrap
from kafkalite.client.producer import check_common_options
from kafkalite.client.types import ConsumerRecord, OffsetAndTimestamp, TopicPartition
from kafkalite.errors import (
    ConfigError,
    GroupCoordinatorUnsupportedError,
    IllegalStateError,
    NoOffsetForPartitionError,
)
from kafkalite.transport import AsyncTransport

log = logging.getLogger(__name__)

INTERNAL_TOPIC_PREFIX = "__"


@dataclass
class ConsumerSettings:
    """Validated consumer options (kafka-python names; see the module docstring)."""

    bootstrap_servers: list[str]
    client_id: str = "kafkalite-consumer"
    group_id: str | None = None
    key_deserializer: Callable[[bytes], Any] | None = None
    value_deserializer: Callable[[bytes], Any] | None = None
    fetch_max_wait_ms: int = 500
    fetch_min_bytes: int = 1
    fetch_max_bytes: int = 52_428_800
    max_partition_fetch_bytes: int = 1_048_576
    request_timeout_ms: int = 30_000
    retry_backoff_ms: int = 100
    auto_offset_reset: str = "latest"
    enable_auto_commit: bool = True
    check_crcs: bool = True
    isolation_level: int = protocol.READ_UNCOMMITTED
    allow_auto_create_topics: bool = True
    metadata_max_age_ms: int = 300_000
    max_poll_records: int = 500
    consumer_timeout_ms: float = float("inf")
    exclude_internal_topics: bool = True

    KNOWN = {"bootstrap_servers", "client_id", "group_id", "key_deserializer", "value_deserializer",
             "fetch_max_wait_ms", "fetch_min_bytes", "fetch_max_bytes", "max_partition_fetch_bytes",
             "request_timeout_ms", "retry_backoff_ms", "auto_offset_reset", "enable_auto_commit",
             "auto_commit_interval_ms", "default_offset_commit_callback", "check_crcs", "isolation_level",
             "allow_auto_create_topics", "metadata_max_age_ms", "partition_assignment_strategy",
             "max_poll_records", "max_poll_interval_ms", "session_timeout_ms", "heartbeat_interval_ms",
             "consumer_timeout_ms", "exclude_internal_topics", "group_instance_id", "client_rack",
             "enable_incremental_fetch_sessions", "rebalance_timeout_ms"}

    @classmethod
    def from_options(cls, options: dict[str, Any]) -> "ConsumerSettings":
        options = dict(options)
        check_common_options(options, cls.KNOWN)
        reset = str(options.get("auto_offset_reset", "latest")).lower()
        reset = {"smallest": "earliest", "largest": "latest"}.get(reset, reset)
        if reset not in ("earliest", "latest", "none"):
            raise ConfigError(f"auto_offset_reset must be earliest, latest or none, got {reset!r}")
        isolation = options.get("isolation_level", "read_uncommitted")
        if isolation not in ("read_uncommitted", "read_committed", 0, 1):
            raise ConfigError(f"isolation_level must be read_uncommitted or read_committed, got {isolation!r}")
        settings = cls(
            bootstrap_servers=parse_bootstrap(options.get("bootstrap_servers", "localhost:9092")),
            client_id=str(options.get("client_id") or "kafkalite-consumer"),
            group_id=options.get("group_id"),
            key_deserializer=_as_function(options.get("key_deserializer"), "key_deserializer"),
            value_deserializer=_as_function(options.get("value_deserializer"), "value_deserializer"),
            fetch_max_wait_ms=_int_option(options, "fetch_max_wait_ms", 500, 0),
            fetch_min_bytes=_int_option(options, "fetch_min_bytes", 1, 0),
            fetch_max_bytes=_int_option(options, "fetch_max_bytes", 52_428_800, 1),
            max_partition_fetch_bytes=_int_option(options, "max_partition_fetch_bytes", 1_048_576, 1),
            request_timeout_ms=_int_option(options, "request_timeout_ms", 30_000, 1),
            retry_backoff_ms=_int_option(options, "retry_backoff_ms", 100, 0),
            auto_offset_reset=reset,
            enable_auto_commit=bool(options.get("enable_auto_commit", True)),
            check_crcs=bool(options.get("check_crcs", True)),
            isolation_level=1 if isolation in ("read_committed", 1) else 0,
            allow_auto_create_topics=bool(options.get("allow_auto_create_topics", True)),
            metadata_max_age_ms=_int_option(options, "metadata_max_age_ms", 300_000, 0),
            max_poll_records=_int_option(options, "max_poll_records", 500, 1),
            consumer_timeout_ms=float(options.get("consumer_timeout_ms", float("inf"))),
            exclude_internal_topics=bool(options.get("exclude_internal_topics", True)),
        )
        return settings


def _int_option(options: dict[str, Any], name: str, default: int, minimum: int) -> int:
    value = options.get(name, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or int(value) != value or value < minimum:
        raise ConfigError(f"{name} must be an integer ≥ {minimum}, got {value!r}")
    return int(value)


def _as_function(value: Any, name: str) -> Callable[[bytes], Any] | None:
    if value is None:
        return None
    if callable(value):
        return value  # type: ignore[no-any-return]
    if hasattr(value, "deserialize"):
        return lambda data, deserializer=value: deserializer.deserialize(None, data)
    raise ConfigError(f"{name} must be callable")


def _partitions_arg(partitions: Iterable[Any]) -> list[TopicPartition]:
    result = []
    for item in partitions:
        if not (isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str) and isinstance(item[1], int)):
            raise ConfigError(f"expected TopicPartition(topic, partition), got {item!r}")
        result.append(TopicPartition(item[0], item[1]))
    return result


class StandaloneMembership:
    """Assignment for a subscription without a group: every partition of every matching topic.

    The seam for consumer groups: a group membership will compute the assignment through the
    coordinator instead; the core only calls :meth:`assignment`.
    """

    def assignment(self, view: ClusterView, topics: set[str], pattern: re.Pattern[str] | None,
                   exclude_internal: bool) -> set[TopicPartition]:
        chosen: set[TopicPartition] = set()
        for topic, partitions in view.partitions.items():
            if pattern is not None:
                if not pattern.match(topic):
                    continue
                if exclude_internal and topic.startswith(INTERNAL_TOPIC_PREFIX):
                    continue
            elif topic not in topics:
                continue
            chosen.update(TopicPartition(topic, number) for number in partitions)
        return chosen


class ConsumerCore:
    """What both consumers share (see the module docstring). Event-loop only."""

    def __init__(self, settings: ConsumerSettings) -> None:
        self.settings = settings
        self.transport = AsyncTransport(request_timeout_ms=settings.request_timeout_ms, client_id=settings.client_id)
        self.metadata = MetadataManager(self.transport, settings.bootstrap_servers,
                                        request_timeout_ms=settings.request_timeout_ms,
                                        retry_backoff_ms=settings.retry_backoff_ms,
                                        metadata_max_age_ms=settings.metadata_max_age_ms,
                                        allow_auto_create_topics=settings.allow_auto_create_topics)
        self.partitions: dict[TopicPartition, PartitionState] = {}
        self.fetcher: Fetcher | None = None
        self.membership = StandaloneMembership()
        self.subscribed_topics: set[str] = set()
        self.subscribed_pattern: re.Pattern[str] | None = None
        self.listener: Any = None
        self.user_assigned = False
        self.closed = False
        self._group_warning_given = False
        self._rotation = 0

    async def start(self) -> None:
        self.fetcher = Fetcher(
            self.metadata, self.transport, self.partitions, fetch_min_bytes=self.settings.fetch_min_bytes,
            fetch_max_bytes=self.settings.fetch_max_bytes, fetch_max_wait_ms=self.settings.fetch_max_wait_ms,
            max_partition_fetch_bytes=self.settings.max_partition_fetch_bytes,
            isolation_level=self.settings.isolation_level, request_timeout_ms=self.settings.request_timeout_ms,
            retry_backoff_ms=self.settings.retry_backoff_ms, check_crcs=self.settings.check_crcs,
            auto_offset_reset=self.settings.auto_offset_reset)
        self.metadata.add_listener(self._on_metadata)
        self.metadata.start()
        self.fetcher.start()
        if self.settings.group_id is not None and self.settings.enable_auto_commit:
            log.warning("group_id=%r: consumer groups are not available yet; offsets are not committed "
                        "and positions start from auto_offset_reset=%r", self.settings.group_id,
                        self.settings.auto_offset_reset)

    async def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self.fetcher is not None:
            await self.fetcher.stop()
        await self.metadata.close()
        await self.transport.close()

    def _check_open(self) -> None:
        if self.closed:
            raise IllegalStateError("the consumer is closed")

    # -- assignment ---------------------------------------------------------------------------
    def assign(self, partitions: Iterable[Any]) -> None:
        self._check_open()
        chosen = _partitions_arg(partitions)
        if self.subscribed_topics or self.subscribed_pattern is not None:
            raise IllegalStateError("subscribe() and assign() cannot be mixed; call unsubscribe() first")
        self.user_assigned = bool(chosen)
        self._apply_assignment(set(chosen))
        self.metadata.set_topics({tp.topic for tp in chosen})

    def subscribe(self, topics: Sequence[str] = (), pattern: str | None = None, listener: Any = None) -> None:
        self._check_open()
        if self.user_assigned:
            raise IllegalStateError("subscribe() and assign() cannot be mixed; call unsubscribe() first")
        if isinstance(topics, str):
            topics = [topics]
        if pattern is not None and topics:
            raise IllegalStateError("give topics or a pattern, not both")
        if pattern is None and not topics:
            raise IllegalStateError("subscribe() needs topics or a pattern")
        self.listener = listener
        if pattern is not None:
            self.subscribed_pattern = re.compile(pattern)
            self.subscribed_topics = set()
            self.metadata.all_topics = True
            self.metadata.request_update()
        else:
            self.subscribed_pattern = None
            self.subscribed_topics = set(topics)
            self.metadata.all_topics = False
            self.metadata.set_topics(self.subscribed_topics)
        self._on_metadata(self.metadata.view)

    def unsubscribe(self) -> None:
        self.subscribed_topics = set()
        self.subscribed_pattern = None
        self.user_assigned = False
        self.metadata.all_topics = False
        self._apply_assignment(set())

    def subscription(self) -> set[str] | None:
        if self.subscribed_pattern is not None:
            return {topic for topic in self.metadata.view.partitions if self.subscribed_pattern.match(topic)}
        return set(self.subscribed_topics) if self.subscribed_topics else None

    def assignment(self) -> set[TopicPartition]:
        return set(self.partitions)

    def _on_metadata(self, view: ClusterView) -> None:
        if not self.subscribed_topics and self.subscribed_pattern is None:
            return
        wanted = self.membership.assignment(view, self.subscribed_topics, self.subscribed_pattern,
                                            self.settings.exclude_internal_topics)
        if wanted != set(self.partitions):
            self._apply_assignment(wanted)

    def _apply_assignment(self, wanted: set[TopicPartition]) -> None:
        current = set(self.partitions)
        revoked = current - wanted
        added = wanted - current
        if revoked and self.listener is not None and hasattr(self.listener, "on_partitions_revoked"):
            self._call_listener("on_partitions_revoked", revoked)
        for tp in revoked:
            del self.partitions[tp]
        for tp in sorted(added):
            self.partitions[tp] = PartitionState(tp)
        if added and self.listener is not None and hasattr(self.listener, "on_partitions_assigned"):
            self._call_listener("on_partitions_assigned", added)
        if self.fetcher is not None:
            self.fetcher.wake()

    def _call_listener(self, name: str, partitions: set[TopicPartition]) -> None:
        try:
            getattr(self.listener, name)(partitions)
        except Exception:
            log.exception("rebalance listener %s failed", name)

    def _state(self, tp: Any) -> PartitionState:
        state = self.partitions.get(TopicPartition(*tp)) if isinstance(tp, tuple) else None
        if state is None:
            raise IllegalStateError(f"{tp} is not assigned to this consumer")
        return state

    # -- positions ----------------------------------------------------------------------------
    async def _resolve_positions(self, timeout_ms: float | None = None) -> None:
        missing = [state for state in self.partitions.values() if state.position is None]
        if not missing:
            return
        by_strategy: dict[int, list[PartitionState]] = {}
        for state in missing:
            strategy = state.reset_strategy or self.settings.auto_offset_reset
            if strategy == "none":
                raise NoOffsetForPartitionError(
                    f"{state.tp.topic}-{state.tp.partition} has no position and auto_offset_reset is 'none'")
            timestamp = protocol.EARLIEST_TIMESTAMP if strategy == "earliest" else protocol.LATEST_TIMESTAMP
            by_strategy.setdefault(timestamp, []).append(state)
        for timestamp, states in by_strategy.items():
            generations = {state.tp: state.generation for state in states}
            answers = await list_offsets(self.metadata, self.transport, {state.tp: timestamp for state in states},
                                         isolation_level=self.settings.isolation_level,
                                         timeout_ms=timeout_ms if timeout_ms is not None else self.settings.request_timeout_ms,
                                         retry_backoff_ms=self.settings.retry_backoff_ms)
            for tp, (offset, _, _) in answers.items():
                state = self.partitions.get(tp)
                if state is not None and state.position is None and state.generation == generations[tp]:
                    state.seek(offset)
        if self.fetcher is not None:
            self.fetcher.wake()

    async def position(self, tp: Any, timeout_ms: float | None = None) -> int:
        self._check_open()
        state = self._state(tp)
        if state.position is None:
            await self._resolve_positions(timeout_ms)
        assert state.position is not None
        return state.position

    def seek(self, tp: Any, offset: int) -> None:
        self._check_open()
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise ConfigError(f"offset must be a non-negative integer, got {offset!r}")
        self._state(tp).seek(offset)
        if self.fetcher is not None:
            self.fetcher.wake()

    def seek_to(self, partitions: Sequence[Any], strategy: str) -> None:
        self._check_open()
        chosen = [self._state(tp) for tp in partitions] if partitions else list(self.partitions.values())
        for state in chosen:
            state.seek(None)
            state.reset_strategy = strategy

    def pause(self, partitions: Sequence[Any]) -> None:
        for tp in partitions:
            state = self._state(tp)
            state.paused = True

    def resume(self, partitions: Sequence[Any]) -> None:
        for tp in partitions:
            self._state(tp).paused = False
        if self.fetcher is not None:
            self.fetcher.wake()

    def paused(self) -> set[TopicPartition]:
        return {tp for tp, state in self.partitions.items() if state.paused}

    def highwater(self, tp: Any) -> int | None:
        state = self._state(tp)
        return state.high_watermark if state.high_watermark >= 0 else None

    # -- reading ------------------------------------------------------------------------------
    async def poll(self, timeout_ms: float, max_records: int | None,
                   partitions: Sequence[TopicPartition] | None = None) -> dict[TopicPartition, list[ConsumerRecord]]:
        self._check_open()
        if not self.partitions and not self.subscribed_topics and self.subscribed_pattern is None:
            raise IllegalStateError("the consumer is not subscribed to any topic nor assigned any partition")
        limit = max_records if max_records is not None else self.settings.max_poll_records
        if limit <= 0:
            raise ConfigError("max_records must be positive")
        deadline = time.monotonic() + max(0.0, timeout_ms) / 1000
        assert self.fetcher is not None
        while True:
            error = pending_errors(self.partitions.values())
            if error is not None:
                raise error
            await self._resolve_positions()
            records = self._take(limit, partitions)
            if records:
                self.fetcher.wake()
                return records
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return {}
            self.fetcher.data_ready.clear()
            self.fetcher.wake()
            try:
                await asyncio.wait_for(self.fetcher.data_ready.wait(), timeout=remaining)
            except asyncio.TimeoutError:
                pass

    def _take(self, limit: int, only: Sequence[TopicPartition] | None) -> dict[TopicPartition, list[ConsumerRecord]]:
        out: dict[TopicPartition, list[ConsumerRecord]] = {}
        states = [state for state in self.partitions.values() if state.buffered and not state.paused
                  and state.position is not None]
        if only:
            allowed = set(only)
            states = [state for state in states if state.tp in allowed]
        if not states:
            return out
        self._rotation = (self._rotation + 1) % len(states)
        states = states[self._rotation:] + states[:self._rotation]
        settings = self.settings
        for state in states:
            if limit <= 0:
                break
            records = take_records(state, limit, settings.key_deserializer, settings.value_deserializer)
            if records:
                out[state.tp] = records
                limit -= len(records)
        return out

    async def poll_batches(self, timeout_ms: float) -> list[FetchedBatch]:
        """The bulk path: every prefetched batch, positions moved past them."""
        self._check_open()
        deadline = time.monotonic() + max(0.0, timeout_ms) / 1000
        assert self.fetcher is not None
        settings = self.settings
        while True:
            error = pending_errors(self.partitions.values())
            if error is not None:
                raise error
            await self._resolve_positions()
            out: list[FetchedBatch] = []
            for state in self.partitions.values():
                if state.buffered and not state.paused and state.position is not None:
                    out.extend(take_batches(state, settings.key_deserializer, settings.value_deserializer))
            if out:
                self.fetcher.wake()
                return out
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return out
            self.fetcher.data_ready.clear()
            self.fetcher.wake()
            try:
                await asyncio.wait_for(self.fetcher.data_ready.wait(), timeout=remaining)
            except asyncio.TimeoutError:
                pass

    # -- offsets ------------------------------------------------------------------------------
    async def offsets_for_times(self, timestamps: dict[Any, int],
                                timeout_ms: float | None) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        self._check_open()
        query = {}
        for tp, timestamp in timestamps.items():
            if isinstance(timestamp, bool) or not isinstance(timestamp, int) or timestamp < 0:
                raise ConfigError(f"timestamps must be non-negative integers (ms), got {timestamp!r}")
            query[TopicPartition(*tp)] = timestamp
        answers = await list_offsets(self.metadata, self.transport, query,
                                     isolation_level=self.settings.isolation_level,
                                     timeout_ms=timeout_ms if timeout_ms is not None else self.settings.request_timeout_ms)
        return {tp: (OffsetAndTimestamp(offset, timestamp, epoch) if offset >= 0 else None)
                for tp, (offset, timestamp, epoch) in answers.items()}

    async def offsets_at(self, partitions: Iterable[Any], which: int, timeout_ms: float | None) -> dict[TopicPartition, int]:
        self._check_open()
        chosen = _partitions_arg(partitions)
        answers = await list_offsets(self.metadata, self.transport, {tp: which for tp in chosen},
                                     isolation_level=self.settings.isolation_level,
                                     timeout_ms=timeout_ms if timeout_ms is not None else self.settings.request_timeout_ms)
        return {tp: offset for tp, (offset, _, _) in answers.items()}

    async def topics(self) -> set[str]:
        view = await self.metadata.refresh(None, all_topics=True, allow_auto_create=False)
        return {topic for topic in view.partitions
                if not (self.settings.exclude_internal_topics and topic.startswith(INTERNAL_TOPIC_PREFIX))}

    async def partitions_for_topic(self, topic: str) -> set[int] | None:
        view = self.metadata.view
        if topic not in view.partitions:
            view = await self.metadata.refresh([topic], allow_auto_create=False)
        return view.partitions_for(topic)

    def group_operation(self, name: str) -> GroupCoordinatorUnsupportedError:
        if self.settings.group_id is None:
            return GroupCoordinatorUnsupportedError(f"{name}() needs a group_id (and consumer groups, coming next)")
        return GroupCoordinatorUnsupportedError(
            f"{name}() needs the group coordinator of group {self.settings.group_id!r}; consumer groups are "
            "not available yet")


# --- the blocking consumer ----------------------------------------------------------------------


class KafkaConsumer:
    """kafka-python's KafkaConsumer on kafkalite (see the module docstring)."""

    def __init__(self, *topics: str, **options: Any) -> None:
        self.config = dict(options)
        self._settings = ConsumerSettings.from_options(options)
        self._loop = LoopThread(f"kafkalite-consumer-{self._settings.client_id}")
        try:
            self._core = ConsumerCore(self._settings)
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
        self._loop.call(self._core.unsubscribe)
        self._iterator_buffer = []

    # -- reading --
    def poll(self, timeout_ms: float = 0, max_records: int | None = None,
             update_offsets: bool = True) -> dict[TopicPartition, list[ConsumerRecord]]:
        """Records fetched so far (up to ``max_records``), waiting up to ``timeout_ms`` for some."""
        return self._loop.run(self._core.poll(timeout_ms, max_records))

    def poll_batches(self, timeout_ms: float = 0) -> list[FetchedBatch]:
        """The bulk path: whole prefetched record batches (``.values()`` / ``.records()``)."""
        return self._loop.run(self._core.poll_batches(timeout_ms))

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

    # -- group operations (next issue) --
    def commit(self, offsets: Any = None, timeout_ms: float | None = None) -> None:
        raise self._core.group_operation("commit")

    def commit_async(self, offsets: Any = None, callback: Any = None) -> None:
        raise self._core.group_operation("commit_async")

    def committed(self, partition: TopicPartition, metadata: bool = False, timeout_ms: float | None = None) -> Any:
        raise self._core.group_operation("committed")

    # -- lifecycle --
    def close(self, autocommit: bool = True, timeout_ms: float | None = None) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._loop.run(self._core.close())
        finally:
            self._finalizer()

    def bootstrap_connected(self) -> bool:
        return bool(self._core.metadata.view.brokers)

    def metrics(self, raw: bool = False) -> dict[str, Any]:
        return {}

    def __enter__(self) -> "KafkaConsumer":
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
        self._core = ConsumerCore(self._settings)
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

    async def stop(self) -> None:
        await self._core.close()

    close = stop

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        self._core.assign(list(partitions))

    def assignment(self) -> set[TopicPartition]:
        return self._core.assignment()

    def subscribe(self, topics: Sequence[str] = (), pattern: str | None = None, listener: Any = None) -> None:
        self._core.subscribe(topics, pattern, listener)

    def subscription(self) -> set[str] | None:
        return self._core.subscription()

    def unsubscribe(self) -> None:
        self._core.unsubscribe()
        self._buffer = []

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

    def __aiter__(self) -> "AIOKafkaConsumer":
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

    async def commit(self, offsets: Any = None) -> None:
        raise self._core.group_operation("commit")

    async def committed(self, partition: TopicPartition) -> Any:
        raise self._core.group_operation("committed")

    async def __aenter__(self) -> "AIOKafkaConsumer":
        await self.start()
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self.stop()
