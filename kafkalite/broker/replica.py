"""ReplicaManager: the partitions this broker hosts, and the produce, fetch and offset paths.

It listens to the :class:`~kafkalite.broker.metadata.MetadataCache`: when a partition state
names this broker as leader it becomes leader (the new epoch is recorded at its log end); when
it names another broker it becomes a follower and hands the partition to the
:class:`~kafkalite.broker.fetcher.FetcherManager`; when a topic disappears its logs are deleted.
As leader it serves produce (acks 0/1/all with ``min.insync.replicas``), consumer fetches (up
to the high watermark, long-polling for ``min_bytes``) and follower fetches (up to the log end,
detecting divergent followers by leader epoch), DeleteRecords (moving a log start offset, which
followers adopt from the ``log_start_offset`` of their fetch answers), and it keeps the ISR in
ZooKeeper current:
shrinking followers that lag more than ``replica.lag.time.max.ms`` and expanding those that
caught up, with a conditional write on the state znode's version so concurrent updates never
overwrite each other.

Transactions (KIP-98): as leader it appends the commit/abort markers a transaction coordinator
sends (:meth:`ReplicaManager.append_txn_marker`; the replica service waits for them as
acks=all), serves read_committed fetches below the last stable offset with the aborted
transactions among the records (from the ``.txnindex`` files), and answers ListOffsets latest
with the LSO under read_committed; as follower it replicates markers like any batch. Marker
listeners (:meth:`ReplicaManager.add_marker_listener`) hear of every marker appended here.

While fenced (:meth:`ReplicaManager.fence`: its ZooKeeper session is
suspended or lost, or the process stalled) it serves no partition, and whatever was parked
(acks=all waits, long-poll fetches) is answered NOT_LEADER_OR_FOLLOWER at once.

Concurrency: event-loop only, and so is every Partition and its producer state; only blocking
work is sent to worker threads, its result handed back to the loop: log creation and deletion,
the producer-state rebuild of a partition not yet published, and on the request paths

* produce: validation of big or compressed requests and the fsync ``flush.messages`` asks
  for (see :mod:`kafkalite.broker.partition`, which also keeps appends in arrival order);
  the offset assignment, idempotence check and page-cache write run on the loop. A request's
  partitions are appended one after the other, then their fsyncs are awaited together;
* fetch: a read that may return more than ``READ_INLINE_BYTES`` (a pread under the log's
  lock); smaller reads, the common tail-following case, run on the loop;
* follower append: the CRC check of a replicated chunk over ``FOLLOWER_CHECK_INLINE_BYTES``
  and the fsync; the write, truncation and producer-state update run on the loop. A chunk
  whose partition moved (role, leader, epoch or log end) while it was checked is dropped and
  fetched again;
* follower truncation into transactions: the producer state is replayed from the log on a
  worker and swapped in on the loop before the next replicated chunk is appended;
* delete records: the log start offset moves on the loop; deleting the segments below it
  and writing the log-start-offset-checkpoint run on a worker (on the leader and on each
  follower that adopts the move).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Callable

from kafkalite import protocol
from kafkalite.broker.fetch_session import FetchSession, FetchSessions, SessionPartition
from kafkalite.broker.fetcher import FetcherManager
from kafkalite.broker.metadata import (
    INTERNAL_TOPICS,
    LiveBroker,
    MetadataCache,
    PartitionInfo,
    PublishedState,
    publish_nowhere,
)
from kafkalite.broker.partition import Partition, Role, build_producer_state
from kafkalite.broker.producer_state import ProducerEntry, ProducerStateManager
from kafkalite.broker.stats import BrokerEvents, TopicStats
from kafkalite.broker.wake_grid import deadline_on_grid, delay_to_grid
from kafkalite.config import BrokerConfig
from kafkalite.coord import znodes
from kafkalite.coord.coordinator import Coordinator, ZNodeStat
from kafkalite.errors import (
    BrokerResponseError,
    CorruptRecordError,
    InvalidRequiredAcksError,
    InvalidTopicError,
    KafkaliteError,
    KafkaStorageError,
    NotLeaderForPartitionError,
    OffsetOutOfRangeError,
    StorageError,
    UnknownServerError,
    UnknownTopicOrPartitionError,
    ZNodeMissingError,
    ZNodeVersionConflictError,
)
from kafkalite.protocol import FetchRequest, FetchResult, ProduceRequest, ProduceResult
from kafkalite.record.batch import iter_batches
from kafkalite.record.control import ControlMarker
from kafkalite.storage.log import AppendInfo, PartitionLog
from kafkalite.storage.manager import LogManager
from kafkalite.storage.validation import check_batches

log = logging.getLogger(__name__)

TOPIC_ID_FILE = "partition.metadata"
# Reads that may return more than this are done on a worker thread (a page-cache pread of this
# size takes about as long as the hand-off to a thread).
READ_INLINE_BYTES = 256 * 1024
#: A produce for a partition this broker is becoming the leader of waits this long at most for it.
OFFICE_WAIT_MS = 5_000
#: Partitions named by one ISR change notification at most (a znode stays far below 1 MB).
ISR_NOTIFICATION_MAX_PARTITIONS = 1000
#: ISR changes a leader writes in one ZooKeeper multi-op when many are due at once (a follower
#: rejoining thousands of partitions), and how many such requests are in flight at once.
ISR_WRITES_PER_REQUEST = 500  # as the controller's STATES_PER_REQUEST
ISR_REQUESTS_IN_FLIGHT = 4
#: Logs one worker call opens at most when many partitions appear at once (a broker starting
#: among thousands): one thread hop per log cost more than opening the log.
LOGS_OPENED_PER_CALL = 500
# Replicated chunks above this size are CRC-checked on a worker thread.
FOLLOWER_CHECK_INLINE_BYTES = 1024 * 1024


def _release(waiter: asyncio.Future[None]) -> None:
    """A long poll's deadline: let the fetch answer with what it has."""
    if not waiter.done():
        waiter.set_result(None)


def _next_offset_after(records: bytes | bytearray | memoryview) -> int:
    """The offset after the last whole batch of ``records`` (headers only)."""
    next_offset = -1
    for batch in iter_batches(records):
        next_offset = batch.next_offset
    return next_offset


def _error_code(exc: BaseException) -> tuple[int, str]:
    if isinstance(exc, BrokerResponseError):
        return exc.errno, str(exc.args[0]) if exc.args else exc.description
    if isinstance(exc, StorageError):
        return KafkaStorageError.errno, str(exc)
    return UnknownServerError.errno, f"{type(exc).__name__}: {exc}"


class ReplicaManager:
    """Hosted partitions and their request paths. See the module docstring."""

    def __init__(self, config: BrokerConfig, log_manager: LogManager, metadata: MetadataCache,
                 zookeeper: Coordinator, clock: Callable[[], int], stats: TopicStats | None = None,
                 events: BrokerEvents | None = None) -> None:
        self.config = config
        #: per-topic traffic, counted once per partition of a produce or fetch
        self.stats = stats if stats is not None else TopicStats()
        #: ISR shrinks and expands this broker wrote as leader
        self.events = events if events is not None else BrokerEvents()
        self.broker_id = config.broker_id
        self.log_manager = log_manager
        self.metadata = metadata
        self.zookeeper = zookeeper
        self.clock = clock
        self.partitions: dict[tuple[str, int], Partition] = {}
        #: The hosted partitions this broker leads (kept by each partition's role changes): what
        #: the leader gauges look at.
        self.leaders: dict[tuple[str, int], Partition] = {}
        #: The partitions the ISR upkeep visits: those that changed (an append, an ISR, replica
        #: or role change) since their ISR was last settled. A settled leader leaves the set, so
        #: an idle broker's upkeep pass costs nothing per partition.
        self._upkeep: set[Partition] = set()
        self.fetchers = FetcherManager(self)
        #: Followers' fetch sessions with this broker as their leader.
        self.fetch_sessions = FetchSessions(clock)
        self._isr_task: asyncio.Task[None] | None = None
        self._isr_writes: set[tuple[str, int]] = set()
        # ISR writes scheduled and not sent yet, and the task sending them.
        self._isr_queue: list[tuple[Partition, list[int]]] = []
        self._isr_writer: asyncio.Task[None] | None = None
        # Partitions whose ISR changed since the last notification, each once, in order.
        self._isr_changes_to_notify: dict[znodes.PartitionRef, None] = {}
        # Produce requests waiting for a partition to take up the leadership the metadata gives it.
        self._office_waiters: list[asyncio.Future[None]] = []
        # Logs to open in the next worker call, each with the future its partition waits on.
        self._logs_to_open: list[tuple[str, int, str, asyncio.Future[tuple[PartitionLog, ProducerStateManager]]]] = []
        self._log_opener: asyncio.Task[None] | None = None
        self._logs_opening: dict[tuple[str, int], asyncio.Future[tuple[PartitionLog, ProducerStateManager]]] = {}
        self._isr_notifying = False
        self.shutting_down = False
        # Set while this broker cannot be sure its view of leadership is current (its ZooKeeper
        # session is suspended or lost, or the process was stalled): it then serves no partition.
        self.fenced_reason: str | None = None
        self.leadership_listeners: list[Callable[[Partition], None]] = []
        #: Called on the loop with the ISR changes this broker wrote as leader (the broker sends
        #: them to the other brokers ahead of their watches).
        self.publish_states: Callable[[list[PublishedState]], None] = publish_nowhere
        #: Called as (topic, partition, producer id, committed) for every transaction marker
        #: appended here, as leader or follower (see :meth:`add_marker_listener`).
        self.marker_listeners: list[Callable[[str, int, int, bool], None]] = []
        metadata.add_listener(self)

    def add_marker_listener(self, callback: Callable[[str, int, int, bool], None]) -> None:
        """Call ``callback(topic, partition, producer_id, committed)`` on the event loop after
        each transaction marker is appended to a partition hosted here, as its leader (right
        after the append, before the ISR has it) or as a follower (after the replicated chunk
        holding it is written). The group coordinator completes transactional offset commits
        of ``__consumer_offsets`` partitions with it. A raising callback is logged, not fatal."""
        self.marker_listeners.append(callback)

    def _notify_marker(self, topic: str, number: int, producer_id: int, committed: bool) -> None:
        for callback in list(self.marker_listeners):
            try:
                callback(topic, number, producer_id, committed)
            except Exception:  # a listener's bug must not fail the marker append
                log.exception("transaction marker listener failed for %s-%d producer %d", topic, number,
                              producer_id)

    # -- lifecycle ----------------------------------------------------------------------------
    async def start(self) -> None:
        interval = max(0.05, self.config.replica_lag_time_max_ms / 2000)
        self._isr_task = asyncio.create_task(self._isr_upkeep_loop(interval), name="isr-upkeep")

    async def stop(self) -> None:
        self.shutting_down = True
        if self._isr_task:
            self._isr_task.cancel()
            await asyncio.gather(self._isr_task, return_exceptions=True)
        if self._log_opener is not None:  # the worker call under way ends before the logs close
            for *_, future in self._logs_to_open:
                future.cancel()
            self._logs_to_open.clear()
            await asyncio.gather(self._log_opener, return_exceptions=True)
        await self.fetchers.stop()
        self.fetch_sessions.close()
        for partition in self.partitions.values():
            partition.stop(NotLeaderForPartitionError(f"broker {self.broker_id} is shutting down"))

    async def remove_stray_logs(self, known_topics: dict[str, str]) -> None:
        """Delete local logs of topics ZooKeeper no longer has (or re-created with a new id),
        all on one worker thread."""
        await asyncio.to_thread(self._remove_stray_logs, known_topics)

    def _remove_stray_logs(self, known_topics: dict[str, str]) -> None:
        """Blocking: what :meth:`remove_stray_logs` does."""
        for (topic, partition), partition_log in list(self.log_manager.logs.items()):
            topic_id = known_topics.get(topic)
            recorded = self._recorded_topic_id(partition_log) if topic_id is not None else ""
            if topic_id is None or (recorded and recorded != topic_id):
                log.info("deleting stray log %s-%d (topic %s in ZooKeeper)", topic, partition,
                         "not" if topic_id is None else "re-created")
                self.log_manager.delete(topic, partition)

    @staticmethod
    def _recorded_topic_id(partition_log: PartitionLog) -> str:
        path = partition_log.directory / TOPIC_ID_FILE
        try:
            for line in path.read_text().splitlines():
                key, _, value = line.partition(":")
                if key.strip() == "topic_id":
                    return value.strip()
        except OSError:
            pass
        return ""

    # -- fencing ------------------------------------------------------------------------------
    def fence(self, reason: str) -> None:
        """Stop serving every partition until ``fenced_reason`` is cleared (by the broker, once
        its ZooKeeper view is confirmed): this broker's view of leadership may be stale (its
        ZooKeeper session is suspended or lost, or the process was stalled).

        Requests parked here are answered at once with NOT_LEADER_OR_FOLLOWER: acks=all produce
        waits fail (their records may still commit under this or a later leader, so the client
        retries, as after any leader change) and long-poll fetches wake and answer the error. A
        client's connection is then free for its next request long before its request timeout,
        and a new leader elsewhere can be used as soon as it exists.
        """
        first = self.fenced_reason is None
        self.fenced_reason = reason
        if not first:
            return
        error = NotLeaderForPartitionError(f"broker {self.broker_id} is not serving: {reason}")
        failed = 0
        for partition in list(self.partitions.values()):
            failed += partition.fail_waiters(error)
        if failed:
            log.info("fenced: answered %d pending acks=all produce waits with NOT_LEADER_OR_FOLLOWER", failed)

    # -- metadata listener --------------------------------------------------------------------
    def on_partition_changed(self, info: PartitionInfo) -> None:
        partition = self.partitions.get((info.topic, info.partition))
        state = info.state
        if (partition is not None and state is not None and partition.role is Role.LEADER
                and state.leader == self.broker_id and state.leader_epoch == partition.leader_epoch
                and self.broker_id in info.replicas):
            # An ISR (or replica set) change of a partition we already lead: apply it at once,
            # so the cache and the partition never disagree.
            partition.update_assignment(info.replicas, info.removing)
            partition.update_isr(state.isr, info.state_version)
            return
        asyncio.get_running_loop().create_task(self._apply(info))

    def on_topic_removed(self, topic: str, partitions: list[int]) -> None:
        asyncio.get_running_loop().create_task(self._remove_topic(topic))

    def on_brokers_changed(self, live: dict[int, LiveBroker]) -> None:
        self.fetchers.on_brokers_changed(live)

    def on_controller_changed(self, controller_id: int) -> None:
        pass

    def on_topic_config_changed(self, topic: str, configs: dict[str, str]) -> None:
        try:
            self.log_manager.update_config(topic)
        except KafkaliteError as exc:
            log.warning("cannot apply new configs of %s: %s", topic, exc)

    async def _apply(self, info: PartitionInfo) -> None:
        try:
            await self._apply_state(info)
        finally:
            if self._office_waiters:
                self._wake_office_waiters()

    async def _apply_state(self, info: PartitionInfo) -> None:
        key = (info.topic, info.partition)
        if self.shutting_down:
            return
        topic_info = self.metadata.topics.get(info.topic)
        if topic_info is None:
            return
        if self.broker_id not in info.replicas:
            if key in self.partitions:
                await self._drop_partition(info.topic, info.partition, delete=True)
            return
        partition = self.partitions.get(key)
        if partition is None:
            partition = await self._create_partition(info.topic, info.partition, topic_info.topic_id)
            if partition is None:
                return
        state = info.state
        if state is None:
            return
        if state.leader == self.broker_id:
            if partition.role is Role.LEADER and partition.leader_epoch == state.leader_epoch:
                partition.update_assignment(info.replicas, info.removing)
                partition.update_isr(state.isr, info.state_version)
            else:
                self.fetchers.remove_partition(partition)
                partition.make_leader(state.leader_epoch, state.isr, info.replicas, info.state_version,
                                      state.controller_epoch)
                partition.update_assignment(info.replicas, info.removing)
                for listener in self.leadership_listeners:
                    listener(partition)
        elif state.leader >= 0:
            was_leader = partition.role is Role.LEADER
            if partition.make_follower(state.leader, state.leader_epoch, state.isr, info.replicas,
                                       info.state_version, state.controller_epoch):
                self.fetchers.add_partition(partition)
                if was_leader:
                    for listener in self.leadership_listeners:
                        listener(partition)
        else:
            was_leader = partition.role is Role.LEADER
            self.fetchers.remove_partition(partition)
            if partition.leader_id != -1 or partition.leader_epoch != state.leader_epoch:
                log.info("%s: offline, no leader (leader epoch %d)", partition.name, state.leader_epoch)
            partition.make_offline(state.leader_epoch, state.isr, info.replicas, info.state_version)
            if was_leader:
                for listener in self.leadership_listeners:
                    listener(partition)

    async def _create_partition(self, topic: str, number: int, topic_id: str) -> Partition | None:
        key = (topic, number)
        try:
            partition_log, producer_state = await self._open_log_soon(topic, number, topic_id)
        except KafkaliteError as exc:
            log.error("cannot create log %s-%d: %s", topic, number, exc)
            return None
        if key in self.partitions:  # created concurrently by another notification
            return self.partitions[key]
        partition = Partition(topic, number, partition_log, self.broker_id, self.clock)
        partition.install_producer_state(producer_state)
        partition.role_listener = self._on_role_change
        partition.upkeep_listener = self._upkeep.add
        self.partitions[key] = partition
        return partition

    def _on_role_change(self, partition: Partition) -> None:
        key = (partition.topic, partition.partition)
        if partition.role is Role.LEADER and self.partitions.get(key) is partition:
            self.leaders[key] = partition
            self._upkeep.add(partition)
        elif self.leaders.get(key) is partition:
            del self.leaders[key]

    def _open_log_soon(self, topic: str, number: int,
                       topic_id: str) -> asyncio.Future[tuple[PartitionLog, ProducerStateManager]]:
        """:meth:`_open_log` in a worker call shared with the other logs asked for before the
        loop next runs its ready callbacks (at most :data:`LOGS_OPENED_PER_CALL` per call); a log
        asked for again while its open is under way shares that open."""
        opening = self._logs_opening.get((topic, number))
        if opening is not None:  # asked for again (its state arrived) while its open is under way
            return opening
        loop = asyncio.get_running_loop()
        future: asyncio.Future[tuple[PartitionLog, ProducerStateManager]] = loop.create_future()
        self._logs_opening[(topic, number)] = future
        future.add_done_callback(lambda _: self._logs_opening.pop((topic, number), None))
        self._logs_to_open.append((topic, number, topic_id, future))
        if self._log_opener is None or self._log_opener.done():
            self._log_opener = loop.create_task(self._open_queued_logs(), name="open-logs")
        return future

    async def _open_queued_logs(self) -> None:
        await asyncio.sleep(0)  # the notifications handled in this pass of the loop join the call
        while self._logs_to_open:
            batch = self._logs_to_open[:LOGS_OPENED_PER_CALL]
            del self._logs_to_open[:LOGS_OPENED_PER_CALL]
            try:
                outcomes: list[tuple[PartitionLog, ProducerStateManager] | BaseException] = list(
                    await asyncio.to_thread(self._open_logs, [(topic, number, topic_id)
                                                              for topic, number, topic_id, _ in batch]))
            except Exception as exc:  # each partition waiting on this call fails as a lone open would
                outcomes = [exc] * len(batch)
            for (_, _, _, future), outcome in zip(batch, outcomes, strict=True):
                if future.done():
                    continue
                if isinstance(outcome, BaseException):
                    future.set_exception(outcome)
                else:
                    future.set_result(outcome)

    def _open_logs(self, requests: list[tuple[str, int, str]]
                   ) -> list[tuple[PartitionLog, ProducerStateManager] | KafkaliteError]:
        """Blocking: :meth:`_open_log` for each request; a request that fails gets its error."""
        outcomes: list[tuple[PartitionLog, ProducerStateManager] | KafkaliteError] = []
        for topic, number, topic_id in requests:
            try:
                outcomes.append(self._open_log(topic, number, topic_id))
            except KafkaliteError as exc:
                outcomes.append(exc)
        return outcomes

    def _open_log(self, topic: str, number: int, topic_id: str) -> tuple[PartitionLog, ProducerStateManager]:
        """Blocking (in :meth:`_open_logs`' worker call): the partition's log, opened or created
        (a local log of an older topic of that name is deleted first), its topic id recorded,
        and the producer state replayed from it."""
        existing_log = self.log_manager.get(topic, number)
        if existing_log is not None and topic_id:
            recorded = self._recorded_topic_id(existing_log)
            if recorded and recorded != topic_id:
                log.info("%s-%d: local log belongs to an older topic of that name; deleting it", topic, number)
                self.log_manager.delete(topic, number)
        partition_log = self.log_manager.get_or_create(topic, number)
        if topic_id:
            marker = partition_log.directory / TOPIC_ID_FILE
            if not marker.exists():
                try:
                    marker.write_text(f"version: 0\ntopic_id: {topic_id}\n")
                except OSError as exc:  # a full disk: written on the next notification instead
                    marker.unlink(missing_ok=True)
                    log.warning("cannot record the topic id of %s-%d: %s", topic, number, exc.strerror or exc)
        return partition_log, build_producer_state(partition_log)

    async def _remove_topic(self, topic: str) -> None:
        self.stats.forget(topic)
        for (name, number) in [key for key in self.partitions if key[0] == topic]:
            await self._drop_partition(name, number, delete=True)
        for (name, number) in [key for key in self.log_manager.logs if key[0] == topic]:
            await asyncio.to_thread(self.log_manager.delete, name, number)

    async def _drop_partition(self, topic: str, number: int, delete: bool) -> None:
        partition = self.partitions.pop((topic, number), None)
        if partition is not None and self.leaders.get((topic, number)) is partition:
            del self.leaders[(topic, number)]
        if partition is not None:
            self.fetchers.remove_partition(partition)
            partition.stop(UnknownTopicOrPartitionError(f"{topic}-{number} is no longer hosted here"))
            for listener in self.leadership_listeners:
                listener(partition)
        if delete:
            await asyncio.to_thread(self.log_manager.delete, topic, number)

    # -- produce ------------------------------------------------------------------------------
    def _taking_office(self, topic: str, number: int) -> bool:
        """The metadata says this broker leads the partition at an epoch its hosted replica has
        not taken up yet (the state change is still being applied)."""
        info = self.metadata.partition(topic, number)
        if info is None or info.state is None or info.leader != self.broker_id or self.fenced_reason is not None:
            return False
        partition = self.partitions.get((topic, number))
        return partition is None or partition.role is not Role.LEADER or partition.leader_epoch < info.leader_epoch

    async def _until_in_office(self, keys: list[tuple[str, int]], timeout: float) -> None:
        """Wait up to ``timeout`` seconds until none of ``keys`` is still :meth:`_taking_office`:
        a client that learned of a new leader from any broker's metadata finds it leading."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while any(self._taking_office(topic, number) for topic, number in keys):
            remaining = deadline - loop.time()
            if remaining <= 0:
                return
            waiter: asyncio.Future[None] = loop.create_future()
            self._office_waiters.append(waiter)
            timer = loop.call_later(remaining, _release, waiter)
            try:
                await waiter
            finally:
                timer.cancel()

    def _wake_office_waiters(self) -> None:
        waiters, self._office_waiters = self._office_waiters, []
        for waiter in waiters:
            _release(waiter)

    def _partition_for(self, topic: str, number: int) -> Partition:
        if self.fenced_reason is not None:
            raise NotLeaderForPartitionError(f"broker {self.broker_id} is not serving: {self.fenced_reason}")
        partition = self.partitions.get((topic, number))
        if partition is None:
            info = self.metadata.partition(topic, number)
            if info is None:
                raise UnknownTopicOrPartitionError(f"this server does not host {topic}-{number}")
            raise NotLeaderForPartitionError(
                f"broker {self.broker_id} is not a replica of {topic}-{number} (leader is {info.leader})")
        return partition

    async def produce(self, request: ProduceRequest, allow_internal: bool = False,
                      appended: Callable[[], None] | None = None) -> list[ProduceResult]:
        """Append each partition's batches in the request's order, then wait for the fsyncs
        ``flush.messages`` asks for and, with acks=all, for the ISR to replicate them, every
        partition's waits at once; each partition is answered with its own error code.
        ``appended`` is called once every append is done, before the waits: a front end then lets
        the connection's next request append while this one waits."""
        if request.acks not in (0, 1, -1):
            raise InvalidRequiredAcksError(f"acks must be 0, 1 or -1, got {request.acks}")
        results: list[ProduceResult] = []
        waits: list[tuple[int, Partition, int]] = []
        flushes: list[tuple[int, Partition, AppendInfo]] = []
        if any(self._taking_office(item.topic, item.partition) for item in request.partitions):
            await self._until_in_office([(item.topic, item.partition) for item in request.partitions],
                                        min(max(0, request.timeout_ms), OFFICE_WAIT_MS) / 1000)
        for item in request.partitions:
            try:
                if item.topic in INTERNAL_TOPICS and not allow_internal:
                    raise InvalidTopicError(f"clients may not write to the internal topic {item.topic}")
                partition = self._partition_for(item.topic, item.partition)
                info = await partition.append_as_leader(item.records, request.acks, wait_for_flush=False)
                self.stats.produced(item.topic, info.last_offset - info.first_offset + 1, len(item.records))
                results.append(ProduceResult(item.topic, item.partition, 0, info.first_offset, info.log_append_time,
                                             partition.log.log_start_offset))
                if partition.needs_flush(info):
                    flushes.append((len(results) - 1, partition, info))
                if request.acks == -1:
                    waits.append((len(results) - 1, partition, info.last_offset + 1))
            except Exception as exc:  # every failure becomes a per-partition error code
                self.stats.produce_failed(item.topic)
                code, message = _error_code(exc)
                if code == UnknownServerError.errno:
                    log.exception("produce to %s-%d failed", item.topic, item.partition)
                results.append(ProduceResult(item.topic, item.partition, code, -1, -1, -1, message))
        if appended is not None:
            appended()
        if flushes:  # the fsyncs flush.messages asks for, every partition's at once
            flushed: list[BaseException | None]
            if len(flushes) == 1:
                _, partition, info = flushes[0]
                try:
                    await partition.flush_through(info.last_offset + 1)
                    flushed = [None]
                except Exception as exc:  # reported per partition below
                    flushed = [exc]
            else:
                flushed = await asyncio.gather(*(partition.flush_through(info.last_offset + 1)
                                                 for _, partition, info in flushes),
                                               return_exceptions=True)
            failed = set()
            for (index, _partition, _info), outcome in zip(flushes, flushed):
                if isinstance(outcome, BaseException):
                    code, message = _error_code(outcome)
                    previous = results[index]
                    results[index] = ProduceResult(previous.topic, previous.partition, code, -1, -1, -1, message)
                    failed.add(index)
            waits = [wait for wait in waits if wait[0] not in failed]
        if waits and self.fenced_reason is not None:
            # Fenced while an append waited for a worker thread: nothing will complete the waits.
            error = NotLeaderForPartitionError(f"broker {self.broker_id} is not serving: {self.fenced_reason}")
            for index, _partition, _required in waits:
                previous = results[index]
                results[index] = ProduceResult(previous.topic, previous.partition, error.errno, previous.base_offset,
                                               previous.log_append_time, previous.log_start_offset, str(error))
            waits = []
        if waits:
            timeout = max(0.0, request.timeout_ms / 1000)
            outcomes: list[BaseException | None]
            if len(waits) == 1:  # the common case, without gather's tasks
                _, partition, required = waits[0]
                try:
                    await partition.wait_for_replication(required, timeout)
                    outcomes = [None]
                except Exception as exc:  # reported per partition below
                    outcomes = [exc]
            else:
                outcomes = await asyncio.gather(*(partition.wait_for_replication(required, timeout)
                                                  for _, partition, required in waits), return_exceptions=True)
            for (index, _partition, _required), outcome in zip(waits, outcomes):
                if isinstance(outcome, BaseException):
                    code, message = _error_code(outcome)
                    previous = results[index]
                    results[index] = ProduceResult(previous.topic, previous.partition, code, previous.base_offset,
                                                   previous.log_append_time, previous.log_start_offset, message)
        return results

    # -- transaction markers --------------------------------------------------------------------
    def append_txn_marker(self, topic: str, number: int, producer_id: int, producer_epoch: int, committed: bool,
                          coordinator_epoch: int) -> tuple[Partition, int]:
        """Append one commit/abort marker as the leader of ``topic-number`` (see
        :meth:`Partition.append_marker` for its refusals); returns the partition and the
        offset its high watermark must reach for the marker to be replicated."""
        partition = self._partition_for(topic, number)
        info = partition.append_marker(producer_id, producer_epoch, ControlMarker(committed, coordinator_epoch))
        self._notify_marker(topic, number, producer_id, committed)
        return partition, info.last_offset + 1

    @staticmethod
    def error_code_of(exc: BaseException) -> tuple[int, str]:
        """The Kafka error code and message an exception answers with."""
        return _error_code(exc)

    # -- fetch --------------------------------------------------------------------------------
    async def fetch(self, request: FetchRequest) -> list[FetchResult]:
        """Serve a consumer or follower fetch, long-polling up to ``max_wait_ms``."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + request.max_wait_ms / 1000
        is_follower = request.replica_id >= 0
        while True:
            results, total, idle = await self._read_once(request, is_follower)
            remaining = deadline - loop.time()
            if total >= request.min_bytes or remaining <= 0 or not idle or request.max_wait_ms == 0 \
                    or any(result.error_code or result.diverging_epoch >= 0 for result in results) \
                    or (is_follower and self._log_start_moved(request)):
                # An error, a diverging follower's truncation point or a log start offset the
                # follower has not adopted yet (DeleteRecords) is answered at once: a follower
                # must not wait out a long poll before it can truncate or delete.
                stats = self.stats
                for result in results:
                    if result.error_code:
                        if not is_follower:
                            stats.fetch_failed(result.topic)
                    else:
                        stats.fetched(result.topic, len(result.records), is_follower)
                return results
            # One future for the whole request, completed by the first partition that moves
            # or by the deadline.
            waiter: asyncio.Future[None] = loop.create_future()
            for partition in idle:
                partition.add_data_waiter(waiter)
            timer = loop.call_later(remaining, _release, waiter)
            try:
                await waiter
            finally:
                timer.cancel()
                if not waiter.done():
                    waiter.cancel()

    def _log_start_moved(self, request: FetchRequest) -> bool:
        """True when a follower's fetch reports a log start offset below this leader's."""
        for item in request.partitions:
            partition = self.partitions.get((item.topic, item.partition))
            if partition is not None and 0 <= item.log_start_offset < partition.log.log_start_offset:
                return True
        return False

    async def _read_once(self, request: FetchRequest,
                   is_follower: bool) -> tuple[list[FetchResult], int, list[Partition]]:
        """One pass over the request's partitions: results, bytes read, and the partitions
        that had nothing to give (a long poll waits on those)."""
        results: list[FetchResult] = []
        total = 0
        budget = request.max_bytes
        idle: list[Partition] = []
        for item in request.partitions:
            try:
                partition = self._partition_for(item.topic, item.partition)
                partition.check_leader(item.current_leader_epoch)
                result = await self._read_partition(partition, item, request, is_follower, budget, total == 0)
            except Exception as exc:
                results.append(self._error_result(item, exc))
                continue
            results.append(result)
            size = len(result.records)
            total += size
            budget = max(0, budget - size)
            if size == 0:
                idle.append(partition)
        return results, total, idle

    def _error_result(self, item: protocol.FetchPartition, exc: Exception) -> FetchResult:
        """The answer for a partition whose read failed with ``exc``."""
        code, message = _error_code(exc)
        if code == UnknownServerError.errno:
            log.exception("fetch of %s-%d failed", item.topic, item.partition)
        info = self.metadata.partition(item.topic, item.partition)
        hosted = self.partitions.get((item.topic, item.partition))
        return FetchResult(
            item.topic, item.partition, code, error_message=message,
            high_watermark=hosted.high_watermark if hosted else -1,
            log_start_offset=hosted.log.log_start_offset if hosted else -1,
            leader_id=info.leader if info else -1, leader_epoch=info.leader_epoch if info else -1)

    async def fetch_in_session(self, request: FetchRequest) -> tuple[int, list[FetchResult]]:
        """Serve a follower's session fetch (see :mod:`kafkalite.broker.fetch_session`): read the
        partitions whose position the fetch moved and those that changed here since, answer the
        ones with news for the follower, long-polling up to ``max_wait_ms`` for the first change.
        Returns the session id and the answered partitions; FETCH_SESSION_ID_NOT_FOUND or
        INVALID_FETCH_SESSION_EPOCH for a session this broker does not have at that epoch."""
        session, keys = self.fetch_sessions.open(request)
        loop = asyncio.get_running_loop()
        # An idle session is answered on the wake-up grid: the sessions of every follower, and
        # the broker's other timers, end together (see kafkalite.broker.wake_grid).
        now = time.monotonic()
        deadline = loop.time() + deadline_on_grid(now, request.max_wait_ms / 1000) - now
        answer: dict[tuple[str, int], FetchResult] = {}
        to_read = set(keys) | session.take_changed()
        session.in_request = True
        try:
            while True:
                total = sum(len(result.records) for result in answer.values())
                urgent = False
                for key in to_read:
                    entry = session.partitions.get(key)
                    if entry is None:
                        continue
                    result, moved = await self._read_in_session(session, entry, request,
                                                                max(0, request.max_bytes - total), total == 0)
                    total += len(result.records)
                    if result.error_code or result.diverging_epoch >= 0 or moved:
                        urgent = True  # an error, a truncation or a log start to adopt: at once
                    if (result.records or result.error_code or result.diverging_epoch >= 0
                            or result.high_watermark != entry.sent_high_watermark
                            or result.log_start_offset != entry.sent_log_start):
                        answer[key] = result
                    else:
                        answer.pop(key, None)
                total = sum(len(result.records) for result in answer.values())
                remaining = deadline - loop.time()
                if urgent or total >= request.min_bytes or remaining <= 0 or request.max_wait_ms == 0 \
                        or not session.partitions:
                    break
                await session.wait_for_change(remaining)
                to_read = session.take_changed()
        finally:
            session.in_request = False
            session.last_request_ms = self.clock()
        stats = self.stats
        for key, result in answer.items():
            entry = session.partitions.get(key)
            if entry is not None:
                entry.sent_high_watermark = result.high_watermark
                entry.sent_log_start = result.log_start_offset
            if not result.error_code:
                stats.fetched(result.topic, len(result.records), True)
        return session.session_id, list(answer.values())

    async def _read_in_session(self, session: FetchSession, entry: SessionPartition, request: FetchRequest,
                               budget: int, first: bool) -> tuple[FetchResult, bool]:
        """Read one partition of a session at the follower's position: the result, and whether the
        follower's log start is behind this leader's (it must adopt it at once)."""
        item = entry.item
        try:
            partition = self._partition_for(item.topic, item.partition)
            session.watch(entry, partition)
            partition.check_leader(item.current_leader_epoch)
            result = await self._read_partition(partition, item, request, True, budget, first)
        except Exception as exc:
            entry.caught_up = False
            return self._error_result(item, exc), False
        entry.caught_up = item.fetch_offset >= partition.log_end_offset
        return result, 0 <= item.log_start_offset < partition.log.log_start_offset

    async def _read_partition(self, partition: Partition, item: protocol.FetchPartition, request: FetchRequest,
                        is_follower: bool, budget: int, first: bool) -> FetchResult:
        partition_log = partition.log
        if is_follower:
            if item.last_fetched_epoch >= 0:
                epoch, end_offset = partition_log.epoch_cache.end_offset_for(item.last_fetched_epoch,
                                                                            partition_log.log_end_offset)
                if epoch >= 0 and (end_offset < item.fetch_offset or epoch < item.last_fetched_epoch):
                    log.debug("%s: follower %d fetching %d at epoch %d diverges (epoch %d ends at %d; cache %s)",
                              partition.name, request.replica_id, item.fetch_offset, item.last_fetched_epoch, epoch,
                              end_offset, partition_log.epoch_cache.entries)
                    return FetchResult(item.topic, item.partition, 0, partition.high_watermark,
                                       partition.high_watermark, partition_log.log_start_offset,
                                       diverging_epoch=epoch, diverging_end_offset=end_offset,
                                       leader_id=partition.leader_id, leader_epoch=partition.leader_epoch)
            partition.record_follower_fetch(request.replica_id, item.fetch_offset, item.log_start_offset)
            if request.replica_id not in partition.isr:  # only a follower outside the ISR can join it
                self._maybe_expand_isr(partition)
            if item.fetch_offset == partition_log.log_end_offset:  # caught up: nothing to read (idle fetches)
                return FetchResult(item.topic, item.partition, 0, partition_log.high_watermark,
                                   partition.last_stable_offset, partition_log.log_start_offset,
                                   leader_id=partition.leader_id, leader_epoch=partition.leader_epoch)
            max_offset = None
        elif request.replica_id == protocol.DEBUGGING_REPLICA_ID:  # Kafka's debugging consumer: to the log end
            max_offset = None
        elif request.isolation_level == protocol.READ_COMMITTED:  # below the last stable offset
            max_offset = partition.last_stable_offset
        else:  # a consumer reads below the high watermark
            max_offset = partition.high_watermark
        last_stable = partition.last_stable_offset
        limit = min(item.partition_max_bytes, budget) if not first else item.partition_max_bytes
        if min(limit, partition_log.bytes_after(item.fetch_offset)) > READ_INLINE_BYTES:
            data = await asyncio.to_thread(partition_log.read, item.fetch_offset, limit, max_offset=max_offset,
                                           min_one_batch=first)
        else:
            data = partition_log.read(item.fetch_offset, limit, max_offset=max_offset, min_one_batch=first)
        aborted: list[tuple[int, int]] | None = None
        if request.isolation_level == protocol.READ_COMMITTED and not is_follower:
            aborted = []
            if data.records:
                upper = _next_offset_after(data.records)
                aborted = [(entry.producer_id, entry.first_offset)
                           for entry in partition.aborted_transactions(item.fetch_offset, upper)]
        return FetchResult(item.topic, item.partition, 0, data.high_watermark, last_stable,
                           data.log_start_offset, data.records, leader_id=partition.leader_id,
                           leader_epoch=partition.leader_epoch, aborted_transactions=aborted)

    # -- offsets ------------------------------------------------------------------------------
    def list_offset(self, topic: str, number: int, timestamp: int, isolation_level: int = 0,
                    current_leader_epoch: int = -1) -> tuple[int, int, int]:
        """(offset, timestamp, leader epoch) for ListOffsets; -1 offset when no record matches."""
        partition = self._partition_for(topic, number)
        partition.check_leader(current_leader_epoch)
        partition_log = partition.log
        if timestamp == protocol.EARLIEST_TIMESTAMP:
            return partition_log.log_start_offset, -1, partition.leader_epoch
        # read_committed sees up to the last stable offset, read_uncommitted up to the high watermark
        fetchable = partition.last_stable_offset if isolation_level == protocol.READ_COMMITTED \
            else partition.high_watermark
        if timestamp == protocol.LATEST_TIMESTAMP:
            return fetchable, -1, partition.leader_epoch
        if timestamp == protocol.MAX_TIMESTAMP:
            best = (-1, -1)
            for segment in partition_log.segments:
                if segment.max_timestamp > best[1] and segment.offset_of_max_timestamp < fetchable:
                    best = (segment.offset_of_max_timestamp, segment.max_timestamp)
            return best[0], best[1], partition.leader_epoch
        if timestamp < 0:
            raise OffsetOutOfRangeError(f"unsupported timestamp {timestamp}")
        found = partition_log.offset_for_timestamp(timestamp)
        if found is None or found[0] >= fetchable:
            return -1, -1, partition.leader_epoch
        return found[0], found[1], partition.leader_epoch

    def producers(self, topic: str, number: int) -> dict[int, ProducerEntry]:
        """The idempotent producers the leader of ``topic-number`` (this broker) keeps state for."""
        partition = self._partition_for(topic, number)
        partition.check_leader()
        return dict(partition.producer_state.producers)

    async def delete_records(self, topic: str, number: int, offset: int, timeout_ms: int) -> int:
        """DeleteRecords on the leader: move the log start offset to ``offset`` (-1: the high
        watermark), delete the whole segments below it and checkpoint it (on a worker thread),
        then wait up to ``timeout_ms`` until every follower in the ISR has adopted it. Returns
        the low watermark. Above the high watermark (or below -1) → OFFSET_OUT_OF_RANGE; off the
        leader → NOT_LEADER_OR_FOLLOWER; the ISR not there in time → REQUEST_TIMED_OUT (the
        leader's log start has moved all the same, and the followers still follow)."""
        if topic in INTERNAL_TOPICS:
            raise InvalidTopicError(f"cannot delete records of the internal topic {topic}")
        partition = self._partition_for(topic, number)
        partition.check_leader()
        target = partition.high_watermark if offset == -1 else offset
        if target < 0:
            raise OffsetOutOfRangeError(f"{partition.name}: cannot delete records before offset {offset}")
        partition_log = partition.log
        before = partition_log.log_start_offset
        if partition_log.delete_records_before(target) > before:
            log.info("%s: log start offset moved %d -> %d (DeleteRecords)", partition.name, before,
                     partition_log.log_start_offset)
            partition.notify_data()  # followers' long polls answer at once, carrying the new log start
            await asyncio.to_thread(self._delete_below_log_start, partition_log)
        await partition.wait_for_low_watermark(target, max(0, timeout_ms) / 1000)
        return partition.low_watermark

    def _delete_below_log_start(self, partition_log: PartitionLog) -> None:
        """Blocking: delete the segments below the log start offset and checkpoint it."""
        partition_log.delete_segments_below_start()
        self.log_manager.checkpoint_log_start_offsets(partition_log)

    def end_offset_for_epoch(self, topic: str, number: int, epoch: int) -> tuple[int, int]:
        partition = self._partition_for(topic, number)
        partition.check_leader()
        return partition.log.epoch_cache.end_offset_for(epoch, partition.log_end_offset)

    # -- ISR upkeep ---------------------------------------------------------------------------
    def _maybe_expand_isr(self, partition: Partition, still_fetching: bool = False) -> None:
        candidates = partition.isr_expansion_candidates()
        if still_fetching:
            within = 2 * self.config.replica_fetch_wait_max_ms + 1000
            candidates = [replica for replica in candidates if self.fetch_sessions.fetching(replica, within)]
        if candidates and partition.pending_isr is None:
            new_isr = sorted(set(partition.isr) | set(candidates),
                             key=lambda replica: partition.replicas.index(replica)
                             if replica in partition.replicas else len(partition.replicas))
            self._schedule_isr_write(partition, new_isr)

    async def _isr_upkeep_loop(self, interval: float) -> None:
        while True:
            await asyncio.sleep(delay_to_grid(time.monotonic(), interval))
            self.shrink_lagging_isrs()

    def shrink_lagging_isrs(self) -> list[Partition]:
        """One ISR upkeep pass: for each led partition that changed since its ISR was last
        settled, with no ISR write in flight, schedule the conditional state-znode write that
        drops followers not caught up for ``replica.lag.time.max.ms`` (by the injected clock).
        Returns the partitions whose write was scheduled; the writes run as tasks on the loop."""
        shrinking: list[Partition] = []
        for partition in list(self._upkeep):
            if not partition.is_leader or self.leaders.get((partition.topic, partition.partition)) is not partition:
                self._upkeep.discard(partition)
                continue
            if partition.pending_isr is not None:
                continue
            if len(partition.isr) < len(partition.replicas):
                # A follower that caught up while its fetch session had nothing new to say joins
                # here, if it is still fetching (a fetch that moves its position joins it at once).
                self._maybe_expand_isr(partition, still_fetching=True)
                if partition.pending_isr is not None:
                    continue
            laggards = partition.isr_shrink_candidates(self.config.replica_lag_time_max_ms)
            if laggards:
                new_isr = [replica for replica in partition.isr if replica not in laggards]
                log.info("%s: shrinking ISR from %s to %s (lagging: %s)", partition.name, partition.isr,
                         new_isr, laggards)
                self._schedule_isr_write(partition, new_isr)
                shrinking.append(partition)
            elif partition.isr_settled():
                self._upkeep.discard(partition)  # an append or an ISR change brings it back
        return shrinking

    def _schedule_isr_write(self, partition: Partition, new_isr: list[int]) -> None:
        key = (partition.topic, partition.partition)
        if key in self._isr_writes:
            return
        self._isr_writes.add(key)
        partition.pending_isr = new_isr
        self._isr_queue.append((partition, new_isr))
        if self._isr_writer is None or self._isr_writer.done():
            self._isr_writer = asyncio.get_running_loop().create_task(self._send_isr_writes(), name="isr-writes")

    async def _send_isr_writes(self) -> None:
        """Send the queued ISR writes: the changes scheduled in one pass go out together, up to
        :data:`ISR_WRITES_PER_REQUEST` per multi-op, :data:`ISR_REQUESTS_IN_FLIGHT` at once."""
        await asyncio.sleep(0)
        in_flight: set[asyncio.Task[None]] = set()
        while self._isr_queue or in_flight:
            if self._isr_queue and len(in_flight) < ISR_REQUESTS_IN_FLIGHT:
                chunk = self._isr_queue[:ISR_WRITES_PER_REQUEST]
                del self._isr_queue[:ISR_WRITES_PER_REQUEST]
                in_flight.add(asyncio.get_running_loop().create_task(self._write_isr_chunk(chunk)))
                continue
            _, in_flight = await asyncio.wait(in_flight, return_when=asyncio.FIRST_COMPLETED)

    async def _write_isr_chunk(self, chunk: list[tuple[Partition, list[int]]]) -> None:
        """One multi-op of conditional ISR writes; when it fails as a whole (one lost a race),
        each is written on its own."""
        if len(chunk) == 1:
            await self._write_isr(*chunk[0])
            return
        transaction = self.zookeeper.transaction()
        written: list[tuple[Partition, list[int], znodes.PartitionState, int]] = []
        for partition, new_isr in chunk:
            state = znodes.PartitionState(leader=self.broker_id, leader_epoch=partition.leader_epoch, isr=new_isr,
                                          controller_epoch=partition.controller_epoch)
            transaction.set_data(znodes.partition_state_path(partition.topic, partition.partition),
                                 state.to_bytes(), partition.state_version)
            written.append((partition, new_isr, state, len(partition.isr)))
        try:
            results = await transaction.commit()
        except (ZNodeVersionConflictError, ZNodeMissingError):
            await asyncio.gather(*(self._write_isr(partition, new_isr) for partition, new_isr in chunk))
            return
        except KafkaliteError as exc:
            log.warning("ISR changes of %d partitions failed: %s", len(chunk), exc)
            for partition, _ in chunk:
                self._isr_write_done(partition)
            return
        published: list[PublishedState] = []
        for (partition, new_isr, state, replaced), result in zip(written, results):
            try:
                version = result.version if isinstance(result, ZNodeStat) else partition.state_version + 1
                self._isr_written(partition, new_isr, state, replaced, version)
                published.append((partition.topic, partition.partition, state, version))
            finally:
                self._isr_write_done(partition)
        self.publish_states(published)
        await self._notify_isr_change(*(partition for partition, _, _, _ in written))

    def _isr_written(self, partition: Partition, new_isr: list[int], state: znodes.PartitionState, replaced: int,
                     version: int) -> None:
        if partition.is_leader and partition.leader_epoch == state.leader_epoch:
            log.info("%s: ISR is now %s", partition.name, new_isr)
            if len(new_isr) < replaced:
                self.events.isr_shrinks += 1
            elif len(new_isr) > replaced:
                self.events.isr_expands += 1
            if version > partition.state_version:  # a later state the watch applied stays
                partition.update_isr(new_isr, version)

    def _isr_write_done(self, partition: Partition) -> None:
        partition.pending_isr = None
        self._isr_writes.discard((partition.topic, partition.partition))
        self._upkeep.add(partition)

    async def _write_isr(self, partition: Partition, new_isr: list[int]) -> None:
        """Conditional write of the state znode (same leader and epoch, new ISR)."""
        path = znodes.partition_state_path(partition.topic, partition.partition)
        # The write is conditional on the version this ISR was read at, so it is the ISR the write
        # replaces. The state znode's watch may apply the new ISR before the write's answer is seen.
        replaced = len(partition.isr)
        try:
            state = znodes.PartitionState(leader=self.broker_id, leader_epoch=partition.leader_epoch, isr=new_isr,
                                          controller_epoch=partition.controller_epoch)
            stat = await self.zookeeper.set(path, state.to_bytes(), version=partition.state_version)
            self._isr_written(partition, new_isr, state, replaced, stat.version)
            self.publish_states([(partition.topic, partition.partition, state, stat.version)])
            await self._notify_isr_change(partition)
        except ZNodeVersionConflictError:
            log.info("%s: ISR write lost a race; re-reading the partition state", partition.name)
            await self._reload_state(partition)
        except (ZNodeMissingError, KafkaliteError) as exc:
            log.warning("%s: ISR change to %s failed: %s", partition.name, new_isr, exc)
        finally:
            self._isr_write_done(partition)

    async def _notify_isr_change(self, *partitions: Partition) -> None:
        """Tell the controller of ISR changes: the changes made while one notification is
        being written go out together in the next (Kafka batches them the same way)."""
        for partition in partitions:
            self._isr_changes_to_notify[znodes.PartitionRef(partition.topic, partition.partition)] = None
        if self._isr_notifying:
            return
        self._isr_notifying = True
        try:
            while self._isr_changes_to_notify:
                refs = list(itertools.islice(self._isr_changes_to_notify, ISR_NOTIFICATION_MAX_PARTITIONS))
                for ref in refs:
                    del self._isr_changes_to_notify[ref]
                notification = znodes.IsrChangeNotification(refs)
                try:
                    await self.zookeeper.create(znodes.isr_change_prefix_path(), notification.to_bytes(),
                                                sequence=True)
                except KafkaliteError as exc:
                    log.debug("ISR change notification not written: %s", exc)
        finally:
            self._isr_notifying = False

    async def _reload_state(self, partition: Partition) -> None:
        """Re-read the state znode after a lost conditional ISR write and apply it to the
        partition; a newer version the watch delivered meanwhile is kept."""
        path = znodes.partition_state_path(partition.topic, partition.partition)
        try:
            data, stat = await self.zookeeper.get(path)
            state = znodes.PartitionState.from_bytes(data, path)
        except KafkaliteError as exc:
            log.info("%s: partition state not re-read: %s", partition.name, exc)
            return
        info = self.metadata.partition(partition.topic, partition.partition)
        if info is not None:
            info.adopt_state(state, stat.version)
            await self._apply(info)

    # -- follower side ------------------------------------------------------------------------
    async def apply_fetched(self, partition: Partition, result: FetchResult) -> int:
        """Append replicated batches and adopt the leader's high watermark; returns bytes
        (0 when the chunk was dropped). Returns once the batches are fsynced when
        ``flush.messages`` asks for it, so the next fetch reports them to the leader only then."""
        partition_log = partition.log
        partition.check_loop_thread()
        if result.diverging_epoch >= 0:
            epoch, own_end = partition_log.epoch_cache.end_offset_for(result.diverging_epoch,
                                                                     partition_log.log_end_offset)
            target = min(result.diverging_end_offset, own_end) if epoch >= 0 else \
                min(result.diverging_end_offset, partition.high_watermark)
            log.info("%s: log diverges from leader %d at epoch %d; truncating %d -> %d", partition.name,
                     partition.leader_id, result.diverging_epoch, partition_log.log_end_offset, target)
            partition_log.truncate_to(max(target, partition_log.log_start_offset))
            partition.producer_state.truncate_to(partition_log.log_end_offset)
            if partition.producer_state.has_transactions:
                partition.producer_state_stale = True
            await self._rebuild_if_stale(partition)
            return 0
        await self._rebuild_if_stale(partition)
        size = len(result.records)
        if not size and result.log_start_offset <= partition_log.log_start_offset \
                and min(result.high_watermark, partition_log.log_end_offset) == partition_log.high_watermark:
            return 0  # an idle answer: nothing to append, no high watermark or log start to follow
        if size:
            try:
                if size > FOLLOWER_CHECK_INLINE_BYTES:
                    before = (partition.role, partition.leader_id, partition.leader_epoch, partition_log.log_end_offset)
                    checked = await asyncio.to_thread(check_batches, result.records, partition_log.config,
                                                      from_client=False)
                    if before != (partition.role, partition.leader_id, partition.leader_epoch,
                                  partition_log.log_end_offset):
                        return 0  # the partition moved meanwhile: the next fetch starts from where it is
                else:
                    checked = check_batches(result.records, partition_log.config, from_client=False)
                partition_log.append_checked_as_follower(checked)
                self.stats.replicated(partition.topic, size)
                completed = partition.record_replicated(result.records)
                for txn in completed:
                    self._notify_marker(partition.topic, partition.partition, txn.producer_id, not txn.aborted)
            except CorruptRecordError as exc:
                log.warning("%s: rejected replicated data: %s", partition.name, exc)
                return 0
            if partition_log.flush_pending():
                await partition.flush_through(partition_log.log_end_offset)
        partition_log.update_high_watermark(min(result.high_watermark, partition_log.log_end_offset))
        if result.log_start_offset > partition_log.log_start_offset:
            # The leader deleted records (DeleteRecords): follow it, up to what this replica
            # knows is committed; the next fetch reports the new start to the leader.
            previous_start = partition_log.log_start_offset
            start = partition_log.delete_records_before(min(result.log_start_offset, partition_log.high_watermark))
            if start > previous_start:
                log.info("%s: log start offset moved %d -> %d, following leader %d", partition.name, previous_start,
                         start, partition.leader_id)
                await asyncio.to_thread(self._delete_below_log_start, partition_log)
        partition.notify_data()
        return size

    async def _rebuild_if_stale(self, partition: Partition) -> None:
        """After a truncation cut into transactions: replay the producer state from the log on
        a worker thread and swap it in on the loop (again if the log moved meanwhile)."""
        while partition.producer_state_stale:
            end = partition.log.log_end_offset
            state = await asyncio.to_thread(build_producer_state, partition.log)
            if partition.log.log_end_offset == end and partition.producer_state_stale:
                partition.install_producer_state(state)

    def handle_out_of_range(self, partition: Partition, leader_start: int, leader_end: int) -> None:
        if partition.producer_state.has_transactions:
            partition.producer_state_stale = True  # the next apply_fetched rebuilds it
        partition_log = partition.log
        if partition_log.log_end_offset > leader_end >= 0:
            log.warning("%s: ahead of leader (%d > %d); truncating", partition.name, partition_log.log_end_offset,
                        leader_end)
            partition_log.truncate_to(leader_end)
        elif partition_log.log_end_offset < leader_start:
            log.warning("%s: behind the leader's log start %d; starting over there", partition.name, leader_start)
            partition_log.truncate_fully_and_start_at(leader_start)
