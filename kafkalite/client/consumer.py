"""Consumers: :class:`KafkaConsumer` (kafka-python's API, blocking) and :class:`AIOKafkaConsumer`
(aiokafka's shape, asyncio), both thin front-ends over one :class:`ConsumerCore`.

Assignment: ``assign()`` takes explicit partitions. ``subscribe(topics | pattern, listener=)``
without a ``group_id`` assigns *every* partition of the matching topics and follows topics and
partitions as they appear (:class:`StandaloneMembership`); with a ``group_id`` the consumer joins
the consumer group and the group's leader decides (:class:`~kafkalite.client.group.GroupMembership`:
join/sync inside ``poll()``, background heartbeats, rebalance listener, commits). Positions of
newly assigned partitions start from the group's committed offsets when there is a ``group_id``
(also with ``assign()``), else from ``auto_offset_reset``.

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
(rebalance listener, commit callbacks) go through a :class:`CallbackRunner`: on the loop for
AIOKafkaConsumer (coroutine methods are awaited), on the thread blocked in ``poll()`` /
``close()`` for KafkaConsumer (:class:`CallerThreadCallbacks`), so a listener may call the
consumer. Like kafka-python's, a consumer is meant for one thread.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import logging
import queue
import re
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from kafkalite import protocol
from kafkalite.client._loop import LoopThread
from kafkalite.client.assignors import Assignor
from kafkalite.client.fetcher import (
    FetchedBatch,
    Fetcher,
    PartitionState,
    list_offsets,
    pending_errors,
    take_batches,
    take_records,
)
from kafkalite.client.group import GroupMembership
from kafkalite.client.group_assignment import resolve_assignors
from kafkalite.client.metadata import ClusterView, MetadataManager, parse_bootstrap
from kafkalite.client.options import check_common_options
from kafkalite.client.types import ConsumerRecord, OffsetAndMetadata, OffsetAndTimestamp, TopicPartition
from kafkalite.errors import (
    ConfigError,
    CorruptRecordError,
    GroupCoordinatorUnsupportedError,
    IllegalStateError,
    KafkaliteError,
    NoOffsetForPartitionError,
)
from kafkalite.transport import AsyncTransport

log = logging.getLogger(__name__)

INTERNAL_TOPIC_PREFIX = "__"

# commit_async's callback: (the offsets, the error or None)
CommitCallback = Callable[[dict[TopicPartition, OffsetAndMetadata], BaseException | None], Any]


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
    session_timeout_ms: int = 45_000
    heartbeat_interval_ms: int = 3000
    max_poll_interval_ms: int = 300_000
    rebalance_timeout_ms: int = 300_000
    auto_commit_interval_ms: int = 5000
    assignors: list[Assignor] = field(default_factory=lambda: resolve_assignors(None))
    group_instance_id: str | None = None
    default_offset_commit_callback: Callable[[Any, Any], Any] | None = None

    KNOWN: ClassVar[set[str]] = {
        "bootstrap_servers", "client_id", "group_id", "key_deserializer", "value_deserializer", "fetch_max_wait_ms",
        "fetch_min_bytes", "fetch_max_bytes", "max_partition_fetch_bytes", "request_timeout_ms", "retry_backoff_ms",
        "auto_offset_reset", "enable_auto_commit", "auto_commit_interval_ms", "default_offset_commit_callback",
        "check_crcs", "isolation_level", "allow_auto_create_topics", "metadata_max_age_ms",
        "partition_assignment_strategy", "max_poll_records", "max_poll_interval_ms", "session_timeout_ms",
        "heartbeat_interval_ms", "consumer_timeout_ms", "exclude_internal_topics", "group_instance_id", "client_rack",
        "enable_incremental_fetch_sessions", "rebalance_timeout_ms"
    }

    @classmethod
    def from_options(cls, options: dict[str, Any]) -> ConsumerSettings:
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
            session_timeout_ms=_int_option(options, "session_timeout_ms", 45_000, 1),
            heartbeat_interval_ms=_int_option(options, "heartbeat_interval_ms", 3000, 1),
            max_poll_interval_ms=_int_option(options, "max_poll_interval_ms", 300_000, 1),
            auto_commit_interval_ms=_int_option(options, "auto_commit_interval_ms", 5000, 1),
            assignors=resolve_assignors(options.get("partition_assignment_strategy")),
            group_instance_id=options.get("group_instance_id") or None,
            default_offset_commit_callback=options.get("default_offset_commit_callback"),
        )
        settings.rebalance_timeout_ms = _int_option(options, "rebalance_timeout_ms", settings.max_poll_interval_ms, 1)
        if settings.group_id is not None and (not isinstance(settings.group_id, str) or not settings.group_id):
            raise ConfigError(f"group_id must be a non-empty string, got {settings.group_id!r}")
        if settings.group_instance_id is not None and not isinstance(settings.group_instance_id, str):
            raise ConfigError(f"group_instance_id must be a string, got {settings.group_instance_id!r}")
        if settings.heartbeat_interval_ms >= settings.session_timeout_ms:
            raise ConfigError(f"heartbeat_interval_ms ({settings.heartbeat_interval_ms}) must be lower than "
                              f"session_timeout_ms ({settings.session_timeout_ms})")
        callback = settings.default_offset_commit_callback
        if callback is not None and not callable(callback):
            raise ConfigError("default_offset_commit_callback must be callable")
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
        function: Callable[[bytes], Any] = value
        return function
    if hasattr(value, "deserialize"):
        deserializer = value

        def deserialize(data: bytes) -> Any:
            return deserializer.deserialize(None, data)

        return deserialize
    raise ConfigError(f"{name} must be callable")


def _partitions_arg(partitions: Iterable[Any]) -> list[TopicPartition]:
    result = []
    for item in partitions:
        if not (isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str) and isinstance(item[1], int)):
            raise ConfigError(f"expected TopicPartition(topic, partition), got {item!r}")
        result.append(TopicPartition(item[0], item[1]))
    return result


def _offsets_arg(offsets: Any) -> dict[TopicPartition, OffsetAndMetadata]:
    """``{tp: OffsetAndMetadata | int}`` → ``{TopicPartition: OffsetAndMetadata}``."""
    if not isinstance(offsets, dict):
        raise ConfigError(f"offsets must be a dict of TopicPartition → OffsetAndMetadata, got {offsets!r}")
    result: dict[TopicPartition, OffsetAndMetadata] = {}
    for tp, value in offsets.items():
        (chosen,) = _partitions_arg([tp])
        if isinstance(value, OffsetAndMetadata):
            entry = value
        elif isinstance(value, int) and not isinstance(value, bool):
            entry = OffsetAndMetadata(value)
        elif isinstance(value, tuple) and value and isinstance(value[0], int):
            entry = OffsetAndMetadata(*value)
        else:
            raise ConfigError(f"the offset of {tp} must be an OffsetAndMetadata or an int, got {value!r}")
        if entry.offset < 0:
            raise ConfigError(f"the offset of {tp} must not be negative, got {entry.offset}")
        result[chosen] = OffsetAndMetadata(int(entry.offset), str(entry.metadata or ""), int(entry.leader_epoch))
    return result


class CallbackRunner:
    """Where user callbacks (rebalance listener, commit callbacks) run: here, on the core's event
    loop, awaiting a coroutine result — the asyncio consumer's way."""

    async def run(self, function: Callable[..., Any], *args: Any) -> Any:
        result = function(*args)
        if inspect.isawaitable(result):
            result = await result
        return result


class CallerThreadCallbacks(CallbackRunner):
    """The sync consumer's way: a callback runs on the user's thread that is blocked in a consumer
    call (``poll()``, ``close()``, ``commit()``...), as Kafka's Java client runs the rebalance
    listener inside ``poll()``; the listener may therefore call the consumer again.

    :meth:`call` is used by that thread: it runs the core coroutine on the loop and serves the
    callback requests the coroutine makes meanwhile. Nested calls (a listener calling
    ``commit()``) stack. A request made while no user thread waits runs on the loop.
    Thread-safe.
    """

    def __init__(self, loop_thread: LoopThread) -> None:
        self.loop_thread = loop_thread
        self._inboxes: list[queue.SimpleQueue[Any]] = []
        self._lock = threading.Lock()

    async def run(self, function: Callable[..., Any], *args: Any) -> Any:
        with self._lock:
            inbox = self._inboxes[-1] if self._inboxes else None
        if inbox is None:
            return await super().run(function, *args)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        inbox.put((function, args, future))
        return await future

    def call(self, coroutine: Any) -> Any:
        if self.loop_thread.in_loop_thread:
            coroutine.close()
            raise IllegalStateError("a blocking consumer call was made from the consumer's own I/O thread; "
                                    "call it from another thread")
        loop = self.loop_thread.loop
        inbox: queue.SimpleQueue[Any] = queue.SimpleQueue()
        with self._lock:
            self._inboxes.append(inbox)
        try:
            done = asyncio.run_coroutine_threadsafe(coroutine, loop)
            done.add_done_callback(lambda _: inbox.put(None))
            try:
                while True:
                    item = inbox.get()
                    if item is None:
                        break
                    self._serve(loop, item)
            except BaseException:
                done.cancel()
                raise
            return done.result()
        finally:
            with self._lock:
                self._inboxes.remove(inbox)
            while True:  # requests that raced the end of the call
                try:
                    item = inbox.get_nowait()
                except queue.Empty:
                    break
                if item is not None:
                    self._serve(loop, item)

    @staticmethod
    def _serve(loop: asyncio.AbstractEventLoop, item: tuple[Callable[..., Any], tuple[Any, ...], Any]) -> None:
        function, args, future = item
        try:
            result = function(*args)
        except BaseException as exc:  # handed back to the coroutine that asked
            loop.call_soon_threadsafe(_settle, future, None, exc)
        else:
            loop.call_soon_threadsafe(_settle, future, result, None)


def _settle(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.done():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


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

    def __init__(self, settings: ConsumerSettings, callbacks: CallbackRunner | None = None) -> None:
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
        self._closing = False
        self._rotation = 0
        self.callbacks = callbacks or CallbackRunner()
        self.commit_callbacks: deque[tuple[Callable[..., Any], dict[TopicPartition, OffsetAndMetadata],
                                           BaseException | None]] = deque()
        self.unsubscribing: asyncio.Task[None] | None = None
        self.group: GroupMembership | None = None
        if settings.group_id is not None:
            self.group = GroupMembership(
                self, group_id=settings.group_id, assignors=settings.assignors,
                session_timeout_ms=settings.session_timeout_ms, heartbeat_interval_ms=settings.heartbeat_interval_ms,
                max_poll_interval_ms=settings.max_poll_interval_ms, rebalance_timeout_ms=settings.rebalance_timeout_ms,
                group_instance_id=settings.group_instance_id, enable_auto_commit=settings.enable_auto_commit,
                auto_commit_interval_ms=settings.auto_commit_interval_ms,
                request_timeout_ms=settings.request_timeout_ms, retry_backoff_ms=settings.retry_backoff_ms,
                client_id=settings.client_id)

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
        if self.group is not None:
            self.group.start()

    async def close(self, autocommit: bool = True) -> None:
        """Commit (auto-commit), revoke and leave the group, then stop everything."""
        if self.closed or self._closing:
            return
        self._closing = True
        try:
            await self._await_unsubscribe()
            if self.group is not None:
                try:
                    await self.group.close(autocommit)
                except KafkaliteError as exc:
                    log.warning("leaving group %s on close: %s", self.settings.group_id, exc)
            await self.run_commit_callbacks()
        finally:
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
        if self.unsubscribing is not None and not self.unsubscribing.done():
            raise IllegalStateError("unsubscribe() is still in progress: await it before subscribing again")
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
        if self.group is not None:
            self.group.subscription_changed()
            return
        self._on_metadata(self.metadata.view)

    async def unsubscribe(self) -> None:
        """Drop the subscription or assignment; a group member revokes (listener), commits
        (auto-commit) and leaves the group first."""
        self._check_open()
        if self.group is not None and self.group.managed:
            await self.group.unsubscribe()
        self._clear_subscription()

    def _clear_subscription(self) -> None:
        self.subscribed_topics = set()
        self.subscribed_pattern = None
        self.user_assigned = False
        self.metadata.all_topics = False
        self._apply_assignment(set())

    def unsubscribe_in_background(self) -> asyncio.Future[None]:
        """:meth:`unsubscribe` as a task (the asyncio consumer's non-blocking ``unsubscribe()``);
        without a group to leave it is done at once."""
        self._check_open()
        if self.group is None or not self.group.managed:
            self._clear_subscription()
            done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            done.set_result(None)
            return done
        if self.unsubscribing is None or self.unsubscribing.done():
            self.unsubscribing = asyncio.get_running_loop().create_task(self.unsubscribe())
        return self.unsubscribing

    async def _await_unsubscribe(self) -> None:
        task = self.unsubscribing
        if task is not None:
            self.unsubscribing = None
            await asyncio.gather(task, return_exceptions=True)

    def subscription(self) -> set[str] | None:
        if self.subscribed_pattern is not None:
            return {topic for topic in self.metadata.view.partitions if self.subscribed_pattern.match(topic)}
        return set(self.subscribed_topics) if self.subscribed_topics else None

    def assignment(self) -> set[TopicPartition]:
        return set(self.partitions)

    def _on_metadata(self, view: ClusterView) -> None:
        if not self.subscribed_topics and self.subscribed_pattern is None:
            return
        if self.group is not None:
            self.group.on_metadata()
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

    # -- the group's hooks (GroupMembership calls these) --------------------------------------
    async def _invoke_listener(self, name: str, partitions: set[TopicPartition]) -> None:
        listener = self.listener
        if listener is None:
            return
        method = getattr(listener, name, None)
        if method is None and name == "on_partitions_lost":
            method = getattr(listener, "on_partitions_revoked", None)
        if method is None:
            return
        try:
            await self.callbacks.run(method, set(partitions))
        except Exception:
            log.exception("rebalance listener %s failed", name)

    async def revoke_partitions(self, partitions: set[TopicPartition], lost: bool) -> None:
        """The listener hears of it while the partitions are still assigned; then they go."""
        await self._invoke_listener("on_partitions_lost" if lost else "on_partitions_revoked", partitions)
        for tp in partitions:
            self.partitions.pop(tp, None)
        if self.fetcher is not None:
            self.fetcher.wake()

    async def assign_partitions(self, partitions: set[TopicPartition]) -> None:
        """New partitions start from their committed offsets (else ``auto_offset_reset``)."""
        for tp in sorted(partitions):
            if tp not in self.partitions:
                self.partitions[tp] = PartitionState(tp)
        await self._invoke_listener("on_partitions_assigned", partitions)
        if self.fetcher is not None:
            self.fetcher.wake()

    def positions(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, OffsetAndMetadata]:
        """The positions (next offsets to read) of ``partitions`` that have one, as commit offsets."""
        result = {}
        for tp in partitions:
            state = self.partitions.get(tp)
            if state is not None and state.position is not None:
                result[tp] = OffsetAndMetadata(state.position, "", state.leader_epoch)
        return result

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
        if self.group is not None:
            fresh = [state for state in missing if state.reset_strategy is None]
            if fresh:
                await self._positions_from_committed(fresh, timeout_ms)
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
                                         timeout_ms=(timeout_ms if timeout_ms is not None
                                                     else self.settings.request_timeout_ms),
                                         retry_backoff_ms=self.settings.retry_backoff_ms)
            for tp, (offset, _, _) in answers.items():
                current = self.partitions.get(tp)
                if current is not None and current.position is None and current.generation == generations[tp]:
                    current.seek(offset)
        if self.fetcher is not None:
            self.fetcher.wake()

    async def _positions_from_committed(self, states: list[PartitionState], timeout_ms: float | None) -> None:
        assert self.group is not None
        generations = {state.tp: state.generation for state in states}
        committed = await self.group.committed(
            [state.tp for state in states],
            timeout_ms if timeout_ms is not None else self.settings.request_timeout_ms)
        for tp, value in committed.items():
            state = self.partitions.get(tp)
            if state is None or state.position is not None or state.generation != generations.get(tp):
                continue
            if value.offset >= 0:
                state.seek(value.offset)
            else:
                state.reset_strategy = self.settings.auto_offset_reset

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
        await self._poll_started()
        try:
            while True:
                await self._group_step(deadline)
                error = pending_errors(self.partitions.values())
                if error is not None:
                    raise error
                await self._resolve_positions()
                records = self._take(limit, partitions)
                if records:
                    self.fetcher.wake()
                    return records
                if not await self._wait_for_data(deadline):
                    return {}
        finally:
            self._poll_finished()

    async def _poll_started(self) -> None:
        await self._await_unsubscribe()
        if self.group is not None:
            self.group.poll_started()
        await self.run_commit_callbacks()

    def _poll_finished(self) -> None:
        if self.group is not None:
            self.group.poll_finished()

    async def _group_step(self, deadline: float) -> None:
        if self.group is not None:
            await self.group.poll(deadline)

    async def _wait_for_data(self, deadline: float) -> bool:
        """Wait until data (or group news) may be there; False once ``deadline`` passed."""
        assert self.fetcher is not None
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        self.fetcher.data_ready.clear()
        if self.group is not None and self.group.has_news():
            return True
        self.fetcher.wake()
        try:
            await asyncio.wait_for(self.fetcher.data_ready.wait(), timeout=remaining)
        except TimeoutError:
            pass
        return True

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
            try:
                records = take_records(state, limit, settings.key_deserializer, settings.value_deserializer)
            except CorruptRecordError:
                if out:  # hand out what was taken; the damaged partition raises on the next poll
                    return out
                raise
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
        await self._poll_started()
        try:
            while True:
                await self._group_step(deadline)
                error = pending_errors(self.partitions.values())
                if error is not None:
                    raise error
                await self._resolve_positions()
                out: list[FetchedBatch] = []
                for state in self.partitions.values():
                    if state.buffered and not state.paused and state.position is not None:
                        try:
                            out.extend(take_batches(state, settings.key_deserializer, settings.value_deserializer))
                        except CorruptRecordError:
                            if out:  # the damaged partition raises on the next poll
                                break
                            raise
                if out:
                    self.fetcher.wake()
                    return out
                if not await self._wait_for_data(deadline):
                    return out
        finally:
            self._poll_finished()

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
                                     timeout_ms=(timeout_ms if timeout_ms is not None
                                                 else self.settings.request_timeout_ms))
        return {tp: (OffsetAndTimestamp(offset, timestamp, epoch) if offset >= 0 else None)
                for tp, (offset, timestamp, epoch) in answers.items()}

    async def offsets_at(self, partitions: Iterable[Any], which: int,
                         timeout_ms: float | None) -> dict[TopicPartition, int]:
        self._check_open()
        chosen = _partitions_arg(partitions)
        answers = await list_offsets(self.metadata, self.transport, dict.fromkeys(chosen, which),
                                     isolation_level=self.settings.isolation_level,
                                     timeout_ms=(timeout_ms if timeout_ms is not None
                                                 else self.settings.request_timeout_ms))
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

    # -- committed offsets ---------------------------------------------------------------------
    def _require_group(self, name: str) -> GroupMembership:
        self._check_open()
        if self.group is None:
            raise GroupCoordinatorUnsupportedError(f"{name}() needs a group_id: a consumer without one has no "
                                                   "group coordinator to store offsets")
        return self.group

    def _commit_offsets(self, offsets: Any) -> dict[TopicPartition, OffsetAndMetadata]:
        if offsets is None:
            return self.positions(set(self.partitions))
        return _offsets_arg(offsets)

    async def commit(self, offsets: Any, timeout_ms: float | None) -> None:
        """Commit ``offsets`` (default: the positions of every assigned partition) and wait."""
        group = self._require_group("commit")
        chosen = self._commit_offsets(offsets)
        await self.run_commit_callbacks()
        await group.commit(chosen, timeout_ms if timeout_ms is not None else self.settings.request_timeout_ms)

    def commit_in_background(self, offsets: Any, callback: Callable[..., Any] | None
                             ) -> asyncio.Task[dict[TopicPartition, OffsetAndMetadata]]:
        """Start a commit; ``callback(offsets, error_or_None)`` runs at the next poll/commit/close."""
        group = self._require_group("commit_async")
        chosen = self._commit_offsets(offsets)
        callback = callback or self.settings.default_offset_commit_callback

        async def commit() -> dict[TopicPartition, OffsetAndMetadata]:
            try:
                await group.commit(chosen, self.settings.request_timeout_ms)
            except BaseException as exc:
                if callback is not None and isinstance(exc, Exception):
                    self.commit_callbacks.append((callback, chosen, exc))
                raise
            if callback is not None:
                self.commit_callbacks.append((callback, chosen, None))
            return chosen

        task = asyncio.get_running_loop().create_task(commit())
        task.add_done_callback(_consume_task_error)
        return task

    async def run_commit_callbacks(self) -> None:
        while self.commit_callbacks:
            callback, offsets, error = self.commit_callbacks.popleft()
            try:
                await self.callbacks.run(callback, offsets, error)
            except Exception:
                log.exception("offset commit callback failed")

    async def committed(self, tp: Any, timeout_ms: float | None) -> OffsetAndMetadata | None:
        group = self._require_group("committed")
        (chosen,) = _partitions_arg([tp])
        answers = await group.committed([chosen], timeout_ms if timeout_ms is not None
                                        else self.settings.request_timeout_ms)
        value = answers.get(chosen)
        return value if value is not None and value.offset >= 0 else None


# --- the blocking consumer ----------------------------------------------------------------------


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

    def bootstrap_connected(self) -> bool:
        return bool(self._core.metadata.view.brokers)

    def metrics(self, raw: bool = False) -> dict[str, Any]:
        return {}

    def __enter__(self) -> KafkaConsumer:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()


def _stop_loop(loop: LoopThread) -> None:
    loop.stop()


def _consume_task_error(task: asyncio.Task[Any]) -> None:
    if not task.cancelled():
        task.exception()  # reported through the callback / the caller's future, not as "never retrieved"


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
