"""The consumers' shared core: :class:`ConsumerCore`, what KafkaConsumer and AIOKafkaConsumer
(:mod:`kafkalite.client.consumer`) both run.

It owns, per consumer:

* the subscription and the assignment — explicit partitions (``assign``), or topics / a pattern
  (``subscribe``) whose partitions come from :class:`StandaloneMembership` (no group: every
  partition of the matching topics, following metadata changes) or from the group
  (:class:`~kafkalite.client.group.GroupMembership`, which calls :meth:`ConsumerCore.revoke_partitions`
  and :meth:`ConsumerCore.assign_partitions`; the core implements the membership's
  :class:`~kafkalite.client.group.GroupConsumer` protocol);
* the per-partition state (:class:`~kafkalite.client.fetcher.PartitionState`: position, buffered
  data, pause, high watermark), shared with the background fetcher (:mod:`.fetcher`), and the
  positions of newly assigned partitions (committed offsets with a group, else
  ``auto_offset_reset``);
* the poll loop (:meth:`ConsumerCore.poll`, :meth:`ConsumerCore.poll_batches`): a group step,
  pending fetch errors, positions, then prefetched records in rotating partition order, or a
  wait for data until the deadline;
* offset lookups (ListOffsets) and committed offsets (commit, commit in the background with
  callbacks run at the next poll/commit/close, committed), which go through the group.

Concurrency: event-loop only — the core's loop (a KafkaConsumer's private loop thread, the
caller's loop for AIOKafkaConsumer), where the fetcher and the group membership run too, so the
partition states, the subscription and the commit-callback queue are shared without locks. User
callbacks go through the core's :class:`~kafkalite.client.consumer_callbacks.CallbackRunner`,
which for the blocking consumer runs them on the user's thread blocked in the current call.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from kafkalite import protocol
from kafkalite.client.client_metrics import ConsumerMetrics
from kafkalite.client.consumer_callbacks import CallbackRunner
from kafkalite.client.consumer_settings import (
    INTERNAL_TOPIC_PREFIX,
    ConsumerSettings,
    offsets_argument,
    partitions_argument,
)
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
from kafkalite.client.metadata import ClusterView, MetadataManager
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

#: the group calls the consumer's metrics time, by Kafka's metric names
GROUP_CALL_NAMES = {protocol.JOIN_GROUP: "join", protocol.SYNC_GROUP: "sync", protocol.HEARTBEAT: "heartbeat",
                    protocol.OFFSET_COMMIT: "commit"}


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
        self.transport = AsyncTransport(request_timeout_ms=settings.request_timeout_ms, client_id=settings.client_id,
                                        ssl_context=settings.ssl_context)
        if settings.sasl_credentials is not None:
            self.transport.set_credentials(*settings.sasl_credentials)
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
        #: kafka-python's ``metrics()``: the fetcher records each answer, the group link each call
        self.metrics = ConsumerMetrics()
        if settings.group_id is not None:
            self.group = GroupMembership(
                self, group_id=settings.group_id, assignors=settings.assignors,
                session_timeout_ms=settings.session_timeout_ms, heartbeat_interval_ms=settings.heartbeat_interval_ms,
                max_poll_interval_ms=settings.max_poll_interval_ms, rebalance_timeout_ms=settings.rebalance_timeout_ms,
                group_instance_id=settings.group_instance_id, enable_auto_commit=settings.enable_auto_commit,
                auto_commit_interval_ms=settings.auto_commit_interval_ms,
                request_timeout_ms=settings.request_timeout_ms, retry_backoff_ms=settings.retry_backoff_ms,
                client_id=settings.client_id)
            self.group.link.on_answer = self._group_call_answered

    def _group_call_answered(self, path: str, seconds: float) -> None:
        name = GROUP_CALL_NAMES.get(path)
        if name is not None:
            self.metrics.coordinator_call(name, seconds)

    async def start(self) -> None:
        self.fetcher = Fetcher(
            self.metadata, self.transport, self.partitions, fetch_min_bytes=self.settings.fetch_min_bytes,
            fetch_max_bytes=self.settings.fetch_max_bytes, fetch_max_wait_ms=self.settings.fetch_max_wait_ms,
            max_partition_fetch_bytes=self.settings.max_partition_fetch_bytes,
            isolation_level=self.settings.isolation_level, request_timeout_ms=self.settings.request_timeout_ms,
            retry_backoff_ms=self.settings.retry_backoff_ms, check_crcs=self.settings.check_crcs,
            auto_offset_reset=self.settings.auto_offset_reset, metrics=self.metrics)
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
        chosen = partitions_argument(partitions)
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
        chosen = partitions_argument(partitions)
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
        return offsets_argument(offsets)

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
        (chosen,) = partitions_argument([tp])
        answers = await group.committed([chosen], timeout_ms if timeout_ms is not None
                                        else self.settings.request_timeout_ms)
        value = answers.get(chosen)
        return value if value is not None and value.offset >= 0 else None


def _consume_task_error(task: asyncio.Task[Any]) -> None:
    if not task.cancelled():
        task.exception()  # reported through the callback / the caller's future, not as "never retrieved"
