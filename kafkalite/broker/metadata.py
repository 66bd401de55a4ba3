"""The broker's view of the cluster, kept current by ZooKeeper watches.

:class:`MetadataCache` mirrors what ZooKeeper says about live brokers (``/brokers/ids``),
topics and their replica assignments (``/brokers/topics/<t>``), each partition's state
(leader, leader epoch, ISR; ``.../partitions/<p>/state``), the controller (``/controller``),
topics being deleted and topic config overrides. Every broker keeps its own cache from its own
watches: leadership changes reach brokers straight from ZooKeeper, promptly (one watch
notification), with no controller-to-broker request in between. Client metadata requests are
answered from this cache, so any broker can bootstrap a client.

Listeners registered with :meth:`MetadataCache.add_listener` are told about partition
changes, topic removals, broker membership and controller changes; they run on the event loop
(the ZooKeeper client delivers watch callbacks there).

Time: :meth:`MetadataCache.wait_for` bounds its wait with the injected ``sleep`` coroutine
function (``asyncio.sleep`` by default), so tests on the in-memory coordinator can run it on a
fake clock.

Concurrency: event-loop only.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

from kafkalite.coord import znodes
from kafkalite.coord.coordinator import Coordinator, ZNodeStat
from kafkalite.coord.watch import Watch
from kafkalite.errors import (
    CoordinationError,
    KafkaliteError,
    LeaderNotAvailableError,
    UnknownTopicOrPartitionError,
    ZNodeMissingError,
)
from kafkalite.protocol import BrokerEndpoint, ClusterMetadata, PartitionMetadata, TopicMetadata

log = logging.getLogger(__name__)

INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})


@dataclass
class LiveBroker:
    broker_id: int
    registration: znodes.BrokerRegistration
    epoch: int  # czxid of the registration znode (Kafka's broker epoch)

    @property
    def endpoint(self) -> BrokerEndpoint:
        return BrokerEndpoint(self.broker_id, self.registration.host, self.registration.port,
                              self.registration.rack)

    def listener_endpoint(self, listener_name: str) -> BrokerEndpoint | None:
        """The broker as advertised on listener ``listener_name`` (one of the registration's
        ``NAME://host:port`` endpoints; ``http://`` is PLAINTEXT), None when it has no such listener."""
        for endpoint in self.registration.endpoints:
            name, separator, address = endpoint.rpartition("://")
            host, _, port = address.rpartition(":")
            name = "PLAINTEXT" if not separator or name.lower() == "http" else name.upper()
            if name == listener_name and port.isdigit():
                return BrokerEndpoint(self.broker_id, host.strip("[]"), int(port), self.registration.rack)
        return None


#: A partition state as written to ZooKeeper: (topic, partition, state, znode version).
PublishedState = tuple[str, int, znodes.PartitionState, int]


def publish_nowhere(states: list[PublishedState]) -> None:
    """The writers' default for publishing the states they wrote: the watches alone carry them."""


@dataclass
class PartitionInfo:
    """Assignment plus current state of one partition (state None until the controller set it)."""

    topic: str
    partition: int
    replicas: list[int]
    state: znodes.PartitionState | None = None
    state_version: int = -1
    adding: list[int] = field(default_factory=list)
    removing: list[int] = field(default_factory=list)
    #: The topic this partition belongs to, whose :attr:`TopicInfo.changes` an adopted state counts in.
    owner: TopicInfo | None = field(default=None, repr=False, compare=False)
    #: This partition's last metadata answer and what it was built from (state, replicas, live
    #: brokers): while those are the same objects, the answer is the same object too.
    answer: tuple[object, object, frozenset[int], PartitionMetadata] | None = field(
        default=None, repr=False, compare=False)
    #: The newest znode version the cache's listeners were told of (a sent state and the watch
    #: then deliver the same version: the listeners hear of it once).
    notified_version: int = field(default=-1, repr=False, compare=False)

    @property
    def leader(self) -> int:
        return self.state.leader if self.state else -1

    @property
    def leader_epoch(self) -> int:
        return self.state.leader_epoch if self.state else -1

    @property
    def isr(self) -> list[int]:
        return list(self.state.isr) if self.state else []

    #: States adopted by any PartitionInfo of this process: part of every cache's generation,
    #: since a state may be adopted outside the cache (after a controller's or leader's write).
    adopted: ClassVar[int] = 0

    def adopt_state(self, state: znodes.PartitionState, version: int) -> bool:
        """Take ``state`` at znode ``version`` unless a newer version is held already; whether it
        was taken. The znode's watch and the answer to a read or write of it reach the loop from
        different ZooKeeper client threads, in either order, so an older one may come last."""
        if self.state is not None and version < self.state_version:
            return False
        self.state = state
        self.state_version = version
        PartitionInfo.adopted += 1
        if self.owner is not None:
            self.owner.changes += 1
        return True


@dataclass
class TopicInfo:
    name: str
    topic_id: str
    partitions: dict[int, PartitionInfo] = field(default_factory=dict)
    configs: dict[str, str] = field(default_factory=dict)
    version: int = -1
    #: Counts every change of what the topic's metadata answers (its partitions, replicas,
    #: leaders, ISRs): an answer built at the same count, for the same live brokers, is equal.
    changes: int = 0


class MetadataListener(Protocol):
    def on_partition_changed(self, info: PartitionInfo) -> None: ...

    def on_topic_removed(self, topic: str, partitions: list[int]) -> None: ...

    def on_brokers_changed(self, live: dict[int, LiveBroker]) -> None: ...

    def on_controller_changed(self, controller_id: int) -> None: ...

    def on_topic_config_changed(self, topic: str, configs: dict[str, str]) -> None: ...


class MetadataCache:
    """ZooKeeper-fed cluster view of one broker. See the module docstring."""

    def __init__(self, zookeeper: Coordinator, broker_id: int, *,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        self.zookeeper = zookeeper
        self.sleep = sleep
        self.broker_id = broker_id
        self.cluster_id = ""
        self.controller_id = -1
        self.brokers: dict[int, LiveBroker] = {}
        self.topics: dict[str, TopicInfo] = {}
        self.topics_being_deleted: set[str] = set()
        self._listeners: list[MetadataListener] = []
        self._topic_watches: dict[str, list[Watch]] = {}
        self._broker_watches: dict[int, Watch] = {}
        self._watches: list[Watch] = []
        self._changed = asyncio.Event()
        self._last_config_change = -1
        self.broker_configs: dict[str, str] = {}
        self.started = False
        self._changes = 0
        self._all_topics: tuple[tuple[int, int], ClusterMetadata] | None = None
        #: topic → (its TopicInfo, its change count, the live brokers, the answer built then)
        self._topic_answers: dict[str, tuple[TopicInfo, int, frozenset[int], TopicMetadata]] = {}

    def add_listener(self, listener: MetadataListener) -> None:
        self._listeners.append(listener)

    # -- start / stop -------------------------------------------------------------------------
    async def start(self) -> None:
        data, _ = await self.zookeeper.get(znodes.CLUSTER_ID_PATH)
        self.cluster_id = znodes.ClusterId.from_bytes(data, znodes.CLUSTER_ID_PATH).cluster_id
        self._watches.append(await self.zookeeper.watch_children(znodes.BROKER_IDS_PATH, self._on_broker_ids))
        self._watches.append(await self.zookeeper.watch_children(znodes.BROKER_TOPICS_PATH, self._on_topics))
        self._watches.append(await self.zookeeper.watch_children(znodes.DELETE_TOPICS_PATH, self._on_deletions))
        self._watches.append(await self.zookeeper.watch_data(znodes.CONTROLLER_PATH, self._on_controller))
        await self.refresh_broker_configs()
        self._watches.append(await self.zookeeper.watch_children(znodes.CONFIG_CHANGES_PATH, self._on_config_changes))
        self.started = True

    def stop(self) -> None:
        for watch in self._watches:
            watch.cancel()
        for watches in self._topic_watches.values():
            for watch in watches:
                watch.cancel()
        for watch in self._broker_watches.values():
            watch.cancel()
        self._watches.clear()
        self._topic_watches.clear()
        self._broker_watches.clear()
        self.started = False

    # -- waiting ------------------------------------------------------------------------------
    async def wait_for(self, predicate: Callable[[], bool], timeout: float) -> bool:
        """Wait until ``predicate()`` holds after some metadata change, or ``timeout`` seconds
        (measured by ``sleep``) have passed; returns whether it holds."""
        if predicate():
            return True
        if timeout <= 0:
            return False
        timer = asyncio.ensure_future(self.sleep(timeout))
        changed: asyncio.Task[bool] | None = None
        try:
            while not predicate():
                if timer.done():
                    return predicate()
                self._changed.clear()
                changed = asyncio.ensure_future(self._changed.wait())
                await asyncio.wait((changed, timer), return_when=asyncio.FIRST_COMPLETED)
                changed.cancel()
            return True
        finally:
            timer.cancel()
            if changed is not None:
                changed.cancel()

    @property
    def generation(self) -> tuple[int, int]:
        """Changes with every change of what :meth:`cluster_metadata` answers (brokers, the
        controller, topics and their partitions, leaders, ISRs): equal generations, equal
        answers, so an answer built from the cache may be kept and served again."""
        return self._changes, PartitionInfo.adopted

    def _changed_now(self) -> None:
        self._changes += 1

    def _signal(self) -> None:
        self._changes += 1
        self._changed.set()

    def _notify(self, method: str, *arguments: Any) -> None:
        for listener in self._listeners:
            try:
                getattr(listener, method)(*arguments)
            except Exception:  # a listener bug must not stop metadata updates
                log.exception("metadata listener %s.%s failed", type(listener).__name__, method)
        self._signal()

    # -- brokers ------------------------------------------------------------------------------
    async def _on_broker_ids(self, children: list[str], notify_unchanged: bool = True) -> None:
        before = dict(self.brokers)
        present: set[int] = set()
        for child in children:
            try:
                present.add(znodes.broker_id_from_child(child))
            except KafkaliteError:
                continue
        for broker_id in list(self.brokers):
            if broker_id not in present:
                del self.brokers[broker_id]
                self._changed_now()
                watch = self._broker_watches.pop(broker_id, None)
                if watch:
                    watch.cancel()
        for broker_id in sorted(present):
            await self._refresh_broker(broker_id)
            if broker_id not in self._broker_watches:
                watch = await self.zookeeper.watch_data(znodes.broker_path(broker_id),
                                                        self._broker_data_callback(broker_id))
                if broker_id in self._broker_watches:  # set meanwhile by a concurrent refresh
                    watch.cancel()
                else:
                    self._broker_watches[broker_id] = watch
        if notify_unchanged or self.brokers != before:
            self._notify("on_brokers_changed", dict(self.brokers))

    def _broker_data_callback(self, broker_id: int) -> Callable[[bytes | None, ZNodeStat | None], Awaitable[None]]:
        async def on_data(data: bytes | None, stat: ZNodeStat | None) -> None:
            if data is None or stat is None:
                return
            try:
                registration = znodes.BrokerRegistration.from_bytes(data, znodes.broker_path(broker_id))
            except KafkaliteError as exc:
                log.warning("ignoring broker %d: %s", broker_id, exc)
                return
            previous = self.brokers.get(broker_id)
            self.brokers[broker_id] = LiveBroker(broker_id, registration, stat.czxid)
            self._changed_now()
            if previous is None or previous.epoch != stat.czxid or previous.registration != registration:
                self._notify("on_brokers_changed", dict(self.brokers))
        return on_data

    async def _refresh_broker(self, broker_id: int) -> None:
        try:
            data, stat = await self.zookeeper.get(znodes.broker_path(broker_id))
        except ZNodeMissingError:
            self.brokers.pop(broker_id, None)
            self._changed_now()
            return
        try:
            registration = znodes.BrokerRegistration.from_bytes(data, znodes.broker_path(broker_id))
        except KafkaliteError as exc:
            log.warning("ignoring broker %d: %s", broker_id, exc)
            return
        self.brokers[broker_id] = LiveBroker(broker_id, registration, stat.czxid)
        self._changed_now()

    async def refresh_brokers(self) -> dict[int, LiveBroker]:
        """Re-read the live brokers from ZooKeeper now (children of ``/brokers/ids`` and each
        registration with its epoch), apply them like a watch notification, and return them.

        The watch keeps the cache current, but its notifications may still be on their way
        (after a reconnect or a session expiry, re-registrations arrive one by one): a decision
        that takes a replica out of service must not rest on that. Raises a KafkaliteError
        when ZooKeeper cannot be read.
        """
        children = await self.zookeeper.get_children(znodes.BROKER_IDS_PATH)
        await self._on_broker_ids(children, notify_unchanged=False)
        return dict(self.brokers)

    # -- controller ---------------------------------------------------------------------------
    def _on_controller(self, data: bytes | None, stat: ZNodeStat | None) -> None:
        controller = -1
        if data:
            try:
                controller = znodes.ControllerInfo.from_bytes(data, znodes.CONTROLLER_PATH).broker_id
            except KafkaliteError as exc:
                log.warning("unreadable controller znode: %s", exc)
        if controller != self.controller_id:
            self.controller_id = controller
            self._notify("on_controller_changed", controller)

    # -- topics -------------------------------------------------------------------------------
    async def _on_topics(self, children: list[str]) -> None:
        present = set(children)
        for topic in list(self.topics):
            if topic not in present:
                self._remove_topic(topic)
        # New topics are read together (their reads share the session's pipeline and windows):
        # one after another, a broker starting among thousands of partitions waited a round trip
        # or three per topic, each behind its partitions' state reads.
        await asyncio.gather(*(self._add_topic(topic) for topic in sorted(present - set(self.topics))))

    async def _add_topic(self, topic: str) -> None:
        self.topics[topic] = TopicInfo(topic, "")
        self._changed_now()
        await self._refresh_topic_configs(topic)
        watch = await self.zookeeper.watch_data(znodes.topic_path(topic), self._topic_data_callback(topic))
        self._topic_watches.setdefault(topic, []).append(watch)

    def _remove_topic(self, topic: str) -> None:
        info = self.topics.pop(topic, None)
        self._topic_answers.pop(topic, None)
        self._changed_now()
        for watch in self._topic_watches.pop(topic, []):
            watch.cancel()
        self.topics_being_deleted.discard(topic)
        if info is not None:
            self._notify("on_topic_removed", topic, sorted(info.partitions))

    def _topic_data_callback(self, topic: str) -> Callable[[bytes | None, ZNodeStat | None], Awaitable[None]]:
        async def on_data(data: bytes | None, stat: ZNodeStat | None) -> None:
            info = self.topics.get(topic)
            if info is None or data is None or stat is None:
                return
            try:
                assignment = znodes.TopicAssignment.from_bytes(data, znodes.topic_path(topic))
            except KafkaliteError as exc:
                log.warning("ignoring topic %s: %s", topic, exc)
                return
            if info.topic_id and info.topic_id != assignment.topic_id:
                # Deleted and re-created between two notifications: treat as remove + add.
                self._notify("on_topic_removed", topic, sorted(info.partitions))
                info.partitions.clear()
            info.topic_id = assignment.topic_id
            info.version = stat.version
            info.changes += 1
            self._changed_now()
            # Every partition of the assignment is entered before the first await below, so that
            # no reader sees part of a topic (the offsets topic's partition count places groups).
            added: list[PartitionInfo] = []
            for partition, replicas in sorted(assignment.partitions.items()):
                existing = info.partitions.get(partition)
                adding = list(assignment.adding_replicas.get(partition, []))
                removing = list(assignment.removing_replicas.get(partition, []))
                if existing is None:
                    entry = info.partitions[partition] = PartitionInfo(topic, partition, list(replicas),
                                                                       adding=adding, removing=removing,
                                                                       owner=info)
                    added.append(entry)
                elif existing.replicas != list(replicas) or existing.adding != adding or existing.removing != removing:
                    existing.replicas = list(replicas)
                    existing.adding = adding
                    existing.removing = removing
                    self._notify("on_partition_changed", existing)
            # The new partitions' state watches are set together (ZooKeeper answers them in one
            # pipeline); each is notified once its watch is set.
            await asyncio.gather(*(self._watch_state(info, entry) for entry in added))
            self._signal()
        return on_data

    async def _watch_state(self, info: TopicInfo, entry: PartitionInfo) -> None:
        topic = info.name
        if self.topics.get(topic) is not info or info.partitions.get(entry.partition) is not entry:
            return  # removed (or re-created) before its watch was set
        watch = await self.zookeeper.watch_data(znodes.partition_state_path(topic, entry.partition),
                                                self._state_callback(topic, entry.partition))
        if self.topics.get(topic) is not info:
            watch.cancel()  # removed while it was being set
            return
        self._topic_watches.setdefault(topic, []).append(watch)
        if entry.state is None:  # a new partition: the controller must elect its leader
            self._notify("on_partition_changed", entry)

    def _state_callback(self, topic: str, partition: int,
                        reread: bool = False) -> Callable[[bytes | None, ZNodeStat | None], None]:
        """The watch's callback (``reread``: of an explicit read, which applies even a version
        the listeners were told of)."""
        path = znodes.partition_state_path(topic, partition)

        def on_state(data: bytes | None, stat: ZNodeStat | None) -> None:
            info = self.topics.get(topic)
            if info is None or partition not in info.partitions:
                return
            entry = info.partitions[partition]
            if data is None or stat is None:
                if entry.state is not None:
                    entry.state = None
                    entry.state_version = -1
                    info.changes += 1
                    self._changed_now()
                    self._notify("on_partition_changed", entry)
                return
            if not reread and stat.version == entry.state_version and stat.version <= entry.notified_version:
                return  # sent by the broker that wrote it, and told already
            try:
                state = znodes.PartitionState.from_bytes(data, path)
            except KafkaliteError as exc:
                log.warning("ignoring partition state: %s", exc)
                return
            if entry.adopt_state(state, stat.version):
                entry.notified_version = max(entry.notified_version, stat.version)
                self._notify("on_partition_changed", entry)
        return on_state

    def adopt_states(self, states: list[PublishedState]) -> int:
        """Take states written to ZooKeeper ahead of the watches: by another broker, which sent
        them (the controller's decisions, a leader's ISR changes), or by this one (already in the
        cache, its listeners not told yet). A state older than the one held, or of a partition not
        in the cache yet, is left to the watch. Listeners are told of each version once. Returns
        how many were told."""
        told = 0
        for topic, number, state, version in states:
            entry = self.partition(topic, number)
            if entry is None or version <= entry.notified_version:
                continue
            if entry.state is not None and version < entry.state_version:
                continue
            if entry.state is None or version > entry.state_version:
                entry.adopt_state(state, version)  # else this broker's own write, held already
            entry.notified_version = version
            told += 1
            self._notify("on_partition_changed", entry)
        if told:
            self._signal()
        return told

    def _on_deletions(self, children: list[str]) -> None:
        self.topics_being_deleted = set(children)
        self._signal()

    async def reload_partition_state(self, topic: str, partition: int) -> None:
        """Re-read one state znode (after a conditional write found the cached version stale)."""
        path = znodes.partition_state_path(topic, partition)
        try:
            data, stat = await self.zookeeper.get(path)
        except ZNodeMissingError:
            data, stat = None, None
        entry = self.partition(topic, partition)
        if entry is None:
            return
        if stat is not None and stat.version != entry.state_version:
            log.warning("%s-%d: cached state version %d was stale (ZooKeeper has %d)", topic, partition,
                        entry.state_version, stat.version)
        self._state_callback(topic, partition, reread=True)(data, stat)

    async def reload_partition_states(self, keys: list[tuple[str, int]], in_flight: int = 500) -> None:
        """Re-read many state znodes, ``in_flight`` reads at a time (ZooKeeper answers them in
        one pipeline): a broker that fenced itself confirms every partition's state this way."""
        for start in range(0, len(keys), in_flight):
            await asyncio.gather(*(self.reload_partition_state(topic, number)
                                   for topic, number in keys[start:start + in_flight]))

    # -- configs ------------------------------------------------------------------------------
    async def refresh_topic_configs(self, topic: str) -> None:
        """Re-read a topic's config overrides from ZooKeeper."""
        await self._refresh_topic_configs(topic)

    async def _refresh_topic_configs(self, topic: str) -> None:
        try:
            data, _ = await self.zookeeper.get(znodes.topic_config_path(topic))
            configs = dict(znodes.ConfigEntity.from_bytes(data, znodes.topic_config_path(topic)).config)
        except ZNodeMissingError:
            configs = {}
        except KafkaliteError as exc:
            log.warning("ignoring configs of topic %s: %s", topic, exc)
            configs = {}
        info = self.topics.get(topic)
        if info is not None and info.configs != configs:
            info.configs = configs
            self._notify("on_topic_config_changed", topic, dict(configs))

    async def _on_config_changes(self, children: list[str]) -> None:
        for child in children:
            try:
                number = znodes.sequence_number(child, znodes.CONFIG_CHANGE_PREFIX)
            except KafkaliteError:
                continue
            if number <= self._last_config_change:
                continue
            self._last_config_change = number
            try:
                data, _ = await self.zookeeper.get(f"{znodes.CONFIG_CHANGES_PATH}/{child}")
                notification = znodes.ConfigChangeNotification.from_bytes(data)
            except (ZNodeMissingError, CoordinationError):
                continue
            entity_type, _, name = notification.entity_path.partition("/")
            if entity_type == "topics" and name in self.topics:
                await self._refresh_topic_configs(name)
            elif entity_type == "brokers" and name in (str(self.broker_id), znodes.DEFAULT_BROKER_ENTITY):
                await self.refresh_broker_configs()

    async def refresh_broker_configs(self) -> None:
        """Re-read this broker's dynamic configs (its own entity over the cluster default)."""
        merged: dict[str, str] = {}
        for path in (znodes.broker_config_path(None), znodes.broker_config_path(self.broker_id)):
            try:
                data, _ = await self.zookeeper.get(path)
                merged.update(znodes.ConfigEntity.from_bytes(data, path).config)
            except ZNodeMissingError:
                continue
            except KafkaliteError as exc:
                log.warning("ignoring broker configs at %s: %s", path, exc)
        if merged != self.broker_configs:
            log.info("dynamic broker configs: %s", merged or "(none)")
        self.broker_configs = merged
        self._signal()

    # -- queries ------------------------------------------------------------------------------
    def partition(self, topic: str, partition: int) -> PartitionInfo | None:
        info = self.topics.get(topic)
        return info.partitions.get(partition) if info else None

    def live_broker_ids(self) -> set[int]:
        return set(self.brokers)

    def endpoint(self, broker_id: int) -> BrokerEndpoint | None:
        broker = self.brokers.get(broker_id)
        return broker.endpoint if broker else None

    def topic_metadata(self, topic: str, live: frozenset[int] | None = None) -> TopicMetadata:
        """One topic's metadata (leaders not among ``live``, default the live brokers, answer
        -1). Kept per topic and answered again, the same object, until the topic changes or the
        live brokers do: an unchanged topic costs nothing to answer, and a front end may keep
        its encoding beside it."""
        info = self.topics.get(topic)
        if info is None or topic in self.topics_being_deleted:
            return TopicMetadata(topic, [], UnknownTopicOrPartitionError.errno, topic in INTERNAL_TOPICS)
        if live is None:
            live = frozenset(self.brokers)
        kept = self._topic_answers.get(topic)
        if kept is not None and kept[0] is info and kept[1] == info.changes and kept[2] == live:
            return kept[3]
        partitions = []
        for number, entry in sorted(info.partitions.items()):
            # Under a burst of leader changes every topic changes between two requests, but few
            # of its partitions do: each unchanged partition answers its previous object.
            previous = entry.answer
            if previous is not None and previous[0] is entry.state and previous[1] is entry.replicas \
                    and (previous[2] is live or previous[2] == live):
                partitions.append(previous[3])
                continue
            leader = entry.leader if entry.leader in live else -1
            answered = PartitionMetadata(
                number, leader, entry.leader_epoch, list(entry.replicas), entry.isr,
                [replica for replica in entry.replicas if replica not in live],
                0 if leader >= 0 else LeaderNotAvailableError.errno)
            entry.answer = (entry.state, entry.replicas, live, answered)
            partitions.append(answered)
        answer = TopicMetadata(topic, partitions, 0, topic in INTERNAL_TOPICS, info.topic_id)
        self._topic_answers[topic] = (info, info.changes, live, answer)
        return answer

    def cluster_metadata(self, topics: list[str] | None) -> ClusterMetadata:
        """The cluster and ``topics`` (every topic not being deleted when None; that answer is
        kept until the :attr:`generation` changes)."""
        generation = self.generation
        if topics is None and self._all_topics is not None and self._all_topics[0] == generation:
            return self._all_topics[1]
        names = sorted(name for name in self.topics if name not in self.topics_being_deleted) \
            if topics is None else topics
        live = frozenset(self.brokers)
        answer = ClusterMetadata(self.cluster_id, self.controller_id,
                                 [broker.endpoint for _, broker in sorted(self.brokers.items())],
                                 [self.topic_metadata(name, live) for name in names])
        if topics is None:
            self._all_topics = (generation, answer)
        return answer
