"""Admin operations any broker can serve: topics, partitions, configs, elections, producer ids.

They write ZooKeeper the way Kafka's admin path does — topic assignment znodes, config znodes
with change notifications, deletion markers, preferred-election requests, producer id blocks —
and, where Kafka's API does, wait until the cluster has acted on the change (leaders elected,
topic gone) or the request's timeout passes.

Concurrency: event-loop only.
"""

from __future__ import annotations

import asyncio
import logging
import random
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kafkalite import assignment
from kafkalite.broker.metadata import INTERNAL_TOPICS, MetadataCache
from kafkalite.config import BrokerConfig, LogConfig, topic_config_names
from kafkalite.coord import znodes
from kafkalite.coord.config_entities import alter_config_entity
from kafkalite.coord.coordinator import Coordinator
from kafkalite.errors import (
    ConfigError,
    InvalidConfigurationError,
    InvalidPartitionsError,
    InvalidReplicaAssignmentError,
    InvalidReplicationFactorError,
    InvalidRequestError,
    InvalidTopicError,
    KafkaliteError,
    RequestTimedOutError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
    ZNodeExistsError,
    ZNodeMissingError,
    ZNodeVersionConflictError,
)
from kafkalite.topics import validate_topic_name as _validate_topic_name

log = logging.getLogger(__name__)

_BROKER_DYNAMIC_CONFIGS = {"log.retention.ms", "log.retention.bytes", "log.segment.bytes", "log.cleanup.policy",
                           "min.insync.replicas", "unclean.leader.election.enable", "message.max.bytes",
                           "compression.type", "log.flush.interval.messages", "log.flush.interval.ms",
                           "follower.replication.throttled.rate", "leader.replication.throttled.rate"}


#: Most partitions one topic may have. Kafka sets no hard limit, but its assignment znode must
#: stay below ZooKeeper's 1 MB; a request for more is INVALID_PARTITIONS, not an allocation storm.
MAX_PARTITIONS = 100_000


def check_partition_count(count: int) -> None:
    if count > MAX_PARTITIONS:
        raise InvalidPartitionsError(f"a topic has at most {MAX_PARTITIONS} partitions, not {count}")


@dataclass(frozen=True)
class NewTopic:
    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    replica_assignment: dict[int, list[int]] | None = None
    configs: dict[str, str] | None = None


def validate_topic_name(name: str) -> None:
    """Raise InvalidTopicError (INVALID_TOPIC_EXCEPTION) unless ``name`` is legal (:mod:`kafkalite.topics`)."""
    _validate_topic_name(name)


def validate_topic_configs(configs: dict[str, str]) -> None:
    try:
        LogConfig().with_overrides(configs)
    except ConfigError as exc:
        raise InvalidConfigurationError(str(exc)) from None


class AdminService:
    """Topic and config administration through ZooKeeper. See the module docstring."""

    def __init__(self, config: BrokerConfig, zookeeper: Coordinator, metadata: MetadataCache,
                 clock: Callable[[], int]) -> None:
        self.config = config
        self.zookeeper = zookeeper
        self.metadata = metadata
        self.clock = clock
        self._producer_ids: list[int] = []
        #: producer ids this broker handed out (idempotent and transactional producers), for ``GET /metrics``
        self.producer_ids_handed_out = 0

    # -- topics -------------------------------------------------------------------------------
    async def create_topic(self, topic: NewTopic, *, validate_only: bool = False, wait_ms: int = 30_000,
                           internal: bool = False) -> dict[int, list[int]]:
        validate_topic_name(topic.name)
        if topic.name in INTERNAL_TOPICS and not internal:
            raise InvalidTopicError(f"{topic.name} is an internal topic")
        if topic.name in self.metadata.topics or topic.name in self.metadata.topics_being_deleted:
            raise TopicAlreadyExistsError(f"topic '{topic.name}' already exists")
        configs = dict(topic.configs or {})
        validate_topic_configs(configs)
        live = sorted(self.metadata.brokers)
        racks = {broker_id: broker.registration.rack for broker_id, broker in self.metadata.brokers.items()}
        if topic.replica_assignment:
            if topic.num_partitions not in (-1, len(topic.replica_assignment)) or topic.replication_factor != -1:
                raise InvalidRequestError("give either a replica assignment or partitions and replication factor")
            assignment.validate_assignment(topic.replica_assignment, live)
            replicas = {int(partition): list(brokers) for partition, brokers in topic.replica_assignment.items()}
        else:
            partitions = self.config.num_partitions if topic.num_partitions == -1 else topic.num_partitions
            factor = self.config.default_replication_factor if topic.replication_factor == -1 \
                else topic.replication_factor
            if partitions <= 0:
                raise InvalidPartitionsError(f"number of partitions must be larger than 0, got {partitions}")
            check_partition_count(partitions)
            if factor <= 0:
                raise InvalidReplicationFactorError(f"replication factor must be larger than 0, got {factor}")
            replicas = assignment.assign_replicas(live, partitions, factor, racks=racks)
        if validate_only:
            return replicas
        topic_id = uuid.uuid4().hex
        payload = znodes.TopicAssignment(partitions=replicas, topic_id=topic_id)
        transaction = self.zookeeper.transaction()
        if configs:
            transaction.create(znodes.topic_config_path(topic.name), znodes.ConfigEntity(configs).to_bytes())
        transaction.create(znodes.topic_path(topic.name), payload.to_bytes())
        try:
            await transaction.commit()
        except ZNodeExistsError:
            raise TopicAlreadyExistsError(f"topic '{topic.name}' already exists") from None
        log.info("created topic %s with assignment %s", topic.name, replicas)
        if wait_ms > 0:
            await self._wait_for_leaders(topic.name, len(replicas), wait_ms)
        return replicas

    async def wait_for_leaders(self, partitions: dict[str, int], wait_ms: int) -> set[str]:
        """Wait until every topic of ``partitions`` has at least that many partitions, each with a
        leader, or ``wait_ms`` has passed; returns the topics still short of it."""
        def late() -> set[str]:
            short = set()
            for topic, count in partitions.items():
                info = self.metadata.topics.get(topic)
                if info is None or len(info.partitions) < count or any(
                        entry.leader < 0 for entry in info.partitions.values()):
                    short.add(topic)
            return short
        await self.metadata.wait_for(lambda: not late(), wait_ms / 1000)
        return late()

    async def wait_for_deletion(self, topics: list[str], wait_ms: int) -> set[str]:
        """Wait until none of ``topics`` exists any more, or ``wait_ms`` has passed; returns
        those still there."""
        await self.metadata.wait_for(lambda: not any(topic in self.metadata.topics for topic in topics),
                                     wait_ms / 1000)
        return {topic for topic in topics if topic in self.metadata.topics}

    async def _wait_for_leaders(self, topic: str, partitions: int, wait_ms: int) -> None:
        def ready() -> bool:
            info = self.metadata.topics.get(topic)
            return info is not None and len(info.partitions) >= partitions and all(
                entry.leader >= 0 for entry in info.partitions.values())
        if not await self.metadata.wait_for(ready, wait_ms / 1000):
            raise RequestTimedOutError(f"topic {topic} was created, but not every partition has a leader yet")

    async def delete_topic(self, topic: str, wait_ms: int = 30_000) -> None:
        validate_topic_name(topic)
        if topic not in self.metadata.topics:
            raise UnknownTopicOrPartitionError(f"topic '{topic}' does not exist")
        if topic in INTERNAL_TOPICS:
            raise InvalidTopicError(f"{topic} is an internal topic and cannot be deleted")
        if not self.config.delete_topic_enable:
            raise InvalidRequestError("topic deletion is disabled (delete.topic.enable=false)")
        try:
            await self.zookeeper.create(znodes.delete_topic_path(topic))
        except ZNodeExistsError:
            pass
        if wait_ms > 0 and not await self.metadata.wait_for(lambda: topic not in self.metadata.topics, wait_ms / 1000):
            raise RequestTimedOutError(f"topic {topic} is marked for deletion but not yet deleted")

    async def create_partitions(self, topic: str, total: int, new_assignment: list[list[int]] | None = None,
                                wait_ms: int = 30_000) -> dict[int, list[int]]:
        validate_topic_name(topic)
        check_partition_count(total)
        for _ in range(5):
            try:
                data, stat = await self.zookeeper.get(znodes.topic_path(topic))
            except ZNodeMissingError:
                raise UnknownTopicOrPartitionError(f"topic '{topic}' does not exist") from None
            current = znodes.TopicAssignment.from_bytes(data, znodes.topic_path(topic))
            if total <= len(current.partitions):
                raise InvalidPartitionsError(
                    f"topic currently has {len(current.partitions)} partitions, {total} would not be an increase")
            live = sorted(self.metadata.brokers)
            if new_assignment is not None:
                if len(new_assignment) != total - len(current.partitions):
                    raise InvalidReplicaAssignmentError("the assignment must list exactly the new partitions")
                added = {len(current.partitions) + index: list(replicas)
                         for index, replicas in enumerate(new_assignment)}
                assignment.validate_assignment(added, live, first_partition=len(current.partitions))
            else:
                factor = len(current.partitions[0])
                if factor > len(live):
                    raise InvalidReplicationFactorError(
                        f"replication factor {factor} is larger than the {len(live)} live brokers")
                racks = {broker_id: broker.registration.rack for broker_id, broker in self.metadata.brokers.items()}
                added = assignment.assignment_for_increase(current.partitions, live, total, racks=racks)
            merged = dict(current.partitions)
            merged.update(added)
            payload = znodes.TopicAssignment(partitions=merged, topic_id=current.topic_id)
            try:
                await self.zookeeper.set(znodes.topic_path(topic), payload.to_bytes(), version=stat.version)
            except ZNodeVersionConflictError:
                continue
            if wait_ms > 0:
                await self._wait_for_leaders(topic, total, wait_ms)
            return added
        raise RequestTimedOutError(f"topic {topic} kept changing while adding partitions")

    # -- configs ------------------------------------------------------------------------------
    def describe_topic_configs(self, topic: str) -> list[dict[str, Any]]:
        info = self.metadata.topics.get(topic)
        if info is None:
            raise UnknownTopicOrPartitionError(f"topic '{topic}' does not exist")
        defaults = self.config.log.to_topic_configs()
        entries = []
        for name in topic_config_names():
            if name in info.configs:
                entries.append({"name": name, "value": info.configs[name], "source": "DYNAMIC_TOPIC_CONFIG",
                                "is_default": False, "read_only": False})
            else:
                entries.append({"name": name, "value": defaults[name], "source": "DEFAULT_CONFIG",
                                "is_default": True, "read_only": False})
        return entries

    async def describe_broker_configs(self, broker_id: int) -> list[dict[str, Any]]:
        dynamic = await self._read_config(znodes.broker_config_path(broker_id))
        default_dynamic = await self._read_config(znodes.broker_config_path(None))
        entries = []
        static = self._static_broker_configs()
        for name in list(dynamic) + list(default_dynamic):
            static.setdefault(name, "")  # dynamic-only settings show up too
        for name, value in sorted(static.items()):
            source = "STATIC_BROKER_CONFIG"
            if name in dynamic:
                value, source = dynamic[name], "DYNAMIC_BROKER_CONFIG"
            elif name in default_dynamic:
                value, source = default_dynamic[name], "DYNAMIC_DEFAULT_BROKER_CONFIG"
            entries.append({"name": name, "value": value, "source": source, "is_default": False,
                            "read_only": name not in _BROKER_DYNAMIC_CONFIGS})
        return entries

    def _static_broker_configs(self) -> dict[str, str]:
        config = self.config
        values = {
            "broker.id": str(config.broker_id), "listeners": config.listeners,
            "log.dirs": ",".join(config.log_dirs), "zookeeper.connect": config.zookeeper_connect,
            "num.partitions": str(config.num_partitions),
            "default.replication.factor": str(config.default_replication_factor),
            "auto.create.topics.enable": str(config.auto_create_topics_enable).lower(),
            "delete.topic.enable": str(config.delete_topic_enable).lower(),
            "zookeeper.session.timeout.ms": str(config.zookeeper_session_timeout_ms),
            "replica.lag.time.max.ms": str(config.replica_lag_time_max_ms),
            "offsets.topic.num.partitions": str(config.offsets_topic_num_partitions),
            "offsets.topic.replication.factor": str(config.offsets_topic_replication_factor),
        }
        topic_values = config.log.to_topic_configs()
        for broker_name, topic_name in {"log.retention.ms": "retention.ms", "log.retention.bytes": "retention.bytes",
                                        "log.segment.bytes": "segment.bytes", "log.cleanup.policy": "cleanup.policy",
                                        "min.insync.replicas": "min.insync.replicas",
                                        "message.max.bytes": "max.message.bytes",
                                        "unclean.leader.election.enable": "unclean.leader.election.enable",
                                        "compression.type": "compression.type"}.items():
            values[broker_name] = topic_values[topic_name]
        if config.broker_rack:
            values["broker.rack"] = config.broker_rack
        return values

    async def _read_config(self, path: str) -> dict[str, str]:
        try:
            data, _ = await self.zookeeper.get(path)
        except ZNodeMissingError:
            return {}
        return dict(znodes.ConfigEntity.from_bytes(data, path).config)

    async def alter_topic_configs(self, topic: str, set_configs: dict[str, str], delete_configs: list[str],
                                  validate_only: bool = False) -> dict[str, str]:
        if topic not in self.metadata.topics:
            raise UnknownTopicOrPartitionError(f"topic '{topic}' does not exist")
        unknown = [name for name in list(set_configs) + list(delete_configs) if name not in topic_config_names()]
        if unknown:
            raise InvalidConfigurationError(f"unknown topic config(s): {', '.join(sorted(unknown))}")

        def merge(current: dict[str, str]) -> dict[str, str]:
            updated = {name: value for name, value in current.items() if name not in delete_configs}
            updated.update({name: str(value) for name, value in set_configs.items()})
            validate_topic_configs(updated)
            return updated

        updated = await alter_config_entity(self.zookeeper, f"topics/{topic}", merge, validate_only)
        if not validate_only:
            await self.metadata.refresh_topic_configs(topic)  # other brokers follow the notification
        return updated

    async def alter_broker_configs(self, broker_id: int | None, set_configs: dict[str, str],
                                   delete_configs: list[str], validate_only: bool = False) -> dict[str, str]:
        unknown = [name for name in list(set_configs) + list(delete_configs) if name not in _BROKER_DYNAMIC_CONFIGS]
        if unknown:
            raise InvalidConfigurationError(
                f"cannot change broker config(s) {', '.join(sorted(unknown))} dynamically; "
                f"supported: {', '.join(sorted(_BROKER_DYNAMIC_CONFIGS))}")
        path = znodes.broker_config_path(broker_id)
        current = await self._read_config(path)
        updated = {name: value for name, value in current.items() if name not in delete_configs}
        updated.update({name: str(value) for name, value in set_configs.items()})
        try:
            from kafkalite.config import BROKER_TO_TOPIC_NAMES

            LogConfig().with_overrides({BROKER_TO_TOPIC_NAMES.get(name, name): value for name, value in updated.items()
                                        if name in BROKER_TO_TOPIC_NAMES})
        except ConfigError as exc:
            raise InvalidConfigurationError(str(exc)) from None
        if validate_only:
            return updated
        await self.zookeeper.ensure_path(znodes.CONFIG_BROKERS_PATH)
        try:
            await self.zookeeper.set(path, znodes.ConfigEntity(updated).to_bytes())
        except ZNodeMissingError:
            await self.zookeeper.create(path, znodes.ConfigEntity(updated).to_bytes(), makepath=True)
        await self.zookeeper.create(znodes.config_change_prefix_path(),
                                    znodes.ConfigChangeNotification.for_broker(broker_id).to_bytes(), sequence=True)
        return updated

    # -- elections ----------------------------------------------------------------------------
    async def request_preferred_election(self, partitions: list[tuple[str, int]]) -> None:
        request = znodes.PreferredElectionRequest([znodes.PartitionRef(topic, number) for topic, number in partitions])
        try:
            await self.zookeeper.create(znodes.PREFERRED_REPLICA_ELECTION_PATH, request.to_bytes())
        except ZNodeExistsError:
            raise InvalidRequestError("a preferred replica election is already in progress") from None

    # -- reassignment -------------------------------------------------------------------------
    async def alter_reassignments(self, targets: dict[tuple[str, int], list[int]]) -> dict[tuple[str, int], Any]:
        """Validate and record target replica lists in ``/admin/reassign_partitions`` (merged
        with reassignments already in progress); the controller carries them out."""
        results: dict[tuple[str, int], Any] = {}
        live = set(self.metadata.brokers)
        accepted: dict[tuple[str, int], list[int]] = {}
        for (topic, number), replicas in targets.items():
            try:
                if self.metadata.partition(topic, number) is None:
                    raise UnknownTopicOrPartitionError(f"{topic}-{number} does not exist")
                if not replicas or len(set(replicas)) != len(replicas):
                    raise InvalidReplicaAssignmentError(f"{topic}-{number}: replicas must be distinct, got {replicas}")
                unknown = [broker for broker in replicas if broker not in live]
                if unknown:
                    raise InvalidReplicaAssignmentError(f"{topic}-{number}: brokers {unknown} are not alive")
                accepted[(topic, number)] = list(replicas)
                results[(topic, number)] = None
            except KafkaliteError as exc:
                results[(topic, number)] = exc
        if not accepted:
            return results
        path = znodes.REASSIGN_PARTITIONS_PATH
        for _ in range(10):
            try:
                data, stat = await self.zookeeper.get(path)
                current = {(entry.topic, entry.partition): list(entry.replicas)
                           for entry in znodes.ReassignmentRequest.from_bytes(data, path).partitions}
                version = stat.version
            except ZNodeMissingError:
                current, version = {}, -1
            current.update(accepted)
            payload = znodes.ReassignmentRequest([znodes.PartitionReassignment(topic, number, replicas)
                                                  for (topic, number), replicas in sorted(current.items())])
            try:
                if version < 0:
                    await self.zookeeper.create(path, payload.to_bytes(), makepath=True)
                else:
                    await self.zookeeper.set(path, payload.to_bytes(), version=version)
                return results
            except (ZNodeVersionConflictError, ZNodeExistsError, ZNodeMissingError):
                await asyncio.sleep(random.uniform(0.005, 0.05))
        raise RequestTimedOutError("the reassignment request kept changing under us")

    async def list_reassignments(self) -> list[dict[str, Any]]:
        try:
            data, _ = await self.zookeeper.get(znodes.REASSIGN_PARTITIONS_PATH)
            entries = znodes.ReassignmentRequest.from_bytes(data).partitions
        except ZNodeMissingError:
            entries = []
        result = []
        for entry in entries:
            info = self.metadata.partition(entry.topic, entry.partition)
            result.append({"topic": entry.topic, "partition": entry.partition, "target_replicas": entry.replicas,
                           "replicas": info.replicas if info else [], "adding": info.adding if info else [],
                           "removing": info.removing if info else [], "isr": info.isr if info else []})
        return result

    # -- producer ids -------------------------------------------------------------------------
    async def next_producer_id(self) -> int:
        """A cluster-unique producer id, from blocks of 1000 reserved in ZooKeeper."""
        if not self._producer_ids:
            await self._reserve_producer_id_block()
        self.producer_ids_handed_out += 1
        return self._producer_ids.pop(0)

    async def _reserve_producer_id_block(self) -> None:
        path = znodes.LATEST_PRODUCER_ID_BLOCK_PATH
        for _ in range(20):
            try:
                data, stat = await self.zookeeper.get(path)
            except ZNodeMissingError:
                await self.zookeeper.ensure_path(path)
                continue
            if data:
                block = znodes.ProducerIdBlock.from_bytes(data, path).next_for(self.config.broker_id)
            else:
                block = znodes.ProducerIdBlock.first(self.config.broker_id)
            try:
                await self.zookeeper.set(path, block.to_bytes(), version=stat.version)
            except ZNodeVersionConflictError:
                await asyncio.sleep(random.uniform(0.001, 0.02))
                continue
            self._producer_ids = list(range(block.block_start, block.block_end + 1))
            return
        raise RequestTimedOutError("could not reserve a producer id block")
