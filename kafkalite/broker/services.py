"""The broker's services with typed requests and answers, bundled for the front ends.

A front end (the HTTP API in :mod:`kafkalite.broker.http`; the Kafka wire-protocol listener
later) only decodes a request, calls one service of :class:`BrokerServices` and encodes the
answer. Every behaviour — a validation rule, an error code, forwarding to the controller or to
a partition's leader, the broker-epoch check of calls only brokers make — lives here or in the
service modules below, once, so both front ends behave the same. Nothing here knows aiohttp.

The services:

- :class:`MetadataService` — cluster metadata (with auto topic creation), health.
- :class:`ReplicaService` — produce, fetch, list offsets, offsets for a leader epoch, delete
  records.
- :class:`RecordsService` — the human-friendly records surface: produce JSON records to a
  topic (partitioned like the default partitioner) and read decoded records of a partition.
- :class:`ControllerService` — controlled shutdown, preferred elections, broker-epoch checks.
- :class:`AdminRequests` — topics, partitions, configs and reassignments, item by item.
- :class:`~kafkalite.broker.group_coordinator.GroupCoordinator` — groups and committed offsets.
- :class:`ProducerIdService` — producer ids for idempotent producers.
- :class:`~kafkalite.broker.txn_coordinator.TransactionCoordinator` — transactions.

An item of a batch request (a topic to create, a config resource) that a front end could not
decode is passed on as :class:`Rejected`, and answered with its error in its place.

Concurrency: event-loop only.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Hashable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from kafkalite import protocol
from kafkalite.broker.admin import AdminService, NewTopic, validate_topic_name
from kafkalite.broker.authorizer import Authorizer
from kafkalite.broker.controller import Controller
from kafkalite.broker.entity_configs import EntityConfigs
from kafkalite.broker.group_coordinator import GroupCoordinator
from kafkalite.broker.group_lag import ConsumerLag
from kafkalite.broker.metadata import INTERNAL_TOPICS, MetadataCache
from kafkalite.broker.partition import Partition
from kafkalite.broker.quotas import BrokerQuotas
from kafkalite.broker.replica import ReplicaManager
from kafkalite.broker.stats import BrokerStats
from kafkalite.broker.txn_coordinator import TransactionCoordinator
from kafkalite.config import BrokerConfig
from kafkalite.coord import znodes
from kafkalite.coord.coordinator import Coordinator
from kafkalite.errors import (
    BrokerResponseError,
    InvalidRequestError,
    KafkaliteError,
    KafkaStorageError,
    LeaderNotAvailableError,
    NotControllerError,
    RequestTimedOutError,
    StaleBrokerEpochError,
    StorageError,
    TopicAlreadyExistsError,
    UnknownServerError,
    UnknownTopicOrPartitionError,
)
from kafkalite.record.batch import build_batch, iter_batches
from kafkalite.registry.store import SchemaStore
from kafkalite.security.principal import FORWARDED_PRINCIPAL_HEADER, served_principal
from kafkalite.storage.manager import LogManager
from kafkalite.topics import partition_for_key
from kafkalite.transport import AsyncTransport

log = logging.getLogger(__name__)

T = TypeVar("T")


def as_response_error(exc: KafkaliteError) -> BrokerResponseError:
    """The named error an item answers with (an internal failure is UNKNOWN_SERVER_ERROR)."""
    return exc if isinstance(exc, BrokerResponseError) else UnknownServerError(str(exc))


# -- typed requests and answers -----------------------------------------------------------------
@dataclass(frozen=True)
class Rejected:
    """An item of a batch request that could not be decoded, answered with ``error``."""

    name: str
    error: BrokerResponseError


@dataclass(frozen=True)
class BrokerHealth:
    broker_id: int
    controller_id: int
    is_controller: bool
    cluster_id: str
    #: (path, reason) of every log dir taken offline.
    offline_log_dirs: list[tuple[str, str]]


@dataclass(frozen=True)
class OffsetQuery:
    topic: str
    partition: int
    timestamp: int = protocol.LATEST_TIMESTAMP
    current_leader_epoch: int = -1


@dataclass(frozen=True)
class OffsetAnswer:
    topic: str
    partition: int
    error: BrokerResponseError | None
    offset: int = -1
    timestamp: int = -1
    leader_epoch: int = -1


@dataclass(frozen=True)
class EpochQuery:
    topic: str
    partition: int
    leader_epoch: int


@dataclass(frozen=True)
class EpochAnswer:
    topic: str
    partition: int
    error: BrokerResponseError | None
    leader_epoch: int = -1
    end_offset: int = -1


@dataclass(frozen=True)
class ActiveProducer:
    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    #: The epoch of the transaction coordinator that wrote the producer's last marker (-1: none).
    coordinator_epoch: int = -1
    #: First offset of the producer's open transaction (-1: none open).
    current_txn_start_offset: int = -1


@dataclass(frozen=True)
class ProducersAnswer:
    """The idempotent producers a partition's leader keeps state for (DescribeProducers)."""

    topic: str
    partition: int
    error: BrokerResponseError | None
    producers: list[ActiveProducer] = field(default_factory=list)


@dataclass(frozen=True)
class DeleteRecordsQuery:
    """Delete the records of a partition before ``offset`` (-1: the high watermark)."""

    topic: str
    partition: int
    offset: int


@dataclass(frozen=True)
class DeleteRecordsAnswer:
    topic: str
    partition: int
    error: BrokerResponseError | None
    #: The partition's new low watermark (smallest log start offset over the ISR); -1 on error.
    low_watermark: int = -1


@dataclass(frozen=True)
class TxnMarkerRequest:
    """One transaction's end to write, by the transaction coordinator, into ``partitions``
    (WriteTxnMarkers): a commit or abort marker of ``producer_id`` at ``producer_epoch``."""

    producer_id: int
    producer_epoch: int
    committed: bool
    coordinator_epoch: int
    partitions: list[tuple[str, int]]


@dataclass(frozen=True)
class TxnMarkerResult:
    """Per partition Kafka error code of one marker request (0: written and replicated)."""

    producer_id: int
    errors: dict[tuple[str, int], int]


@dataclass(frozen=True)
class RecordToProduce:
    key: bytes | None
    value: bytes | None
    partition: int | None = None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)


@dataclass(frozen=True)
class ProducedRecord:
    partition: int
    offset: int
    error: BrokerResponseError | None
    #: The message the partition's leader gave with the error.
    error_message: str = ""


@dataclass(frozen=True)
class FetchedRecord:
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]


@dataclass(frozen=True)
class FetchedRecords:
    topic: str
    partition: int
    records: list[FetchedRecord]
    next_offset: int
    high_watermark: int
    log_start_offset: int


@dataclass(frozen=True)
class ItemOutcome(Generic[T]):
    """One item's answer in a batch admin request: ``result`` on success, else ``error``."""

    name: str
    error: BrokerResponseError | None
    result: T | None = None


@dataclass(frozen=True)
class NewPartitions:
    topic: str
    count: int
    assignment: list[list[int]] | None = None


@dataclass(frozen=True)
class ConfigResource:
    type: str
    name: str


@dataclass(frozen=True)
class ConfigChange:
    type: str
    name: str
    set: dict[str, str]
    delete: list[str]


@dataclass(frozen=True)
class ProducerIdAnswer:
    producer_id: int
    producer_epoch: int = 0


# -- services -----------------------------------------------------------------------------------
class MetadataService:
    """Cluster metadata as a client sees it. See the module docstring."""

    #: How long a Metadata request waits for the leaders of a topic it created (or found just
    #: created by another broker) before it answers what the cache has.
    new_topic_wait_seconds = 3.0

    def __init__(self, config: BrokerConfig, metadata: MetadataCache, admin: AdminService, controller: Controller,
                 log_manager: LogManager) -> None:
        self.config = config
        self.cache = metadata
        self.admin = admin
        self.controller = controller
        self.log_manager = log_manager
        #: Answers a front end built from the cache and serves again while the cache's
        #: generation is the one they were built at: key → (generation, encoded answer).
        self.kept_answers: dict[Hashable, tuple[tuple[int, int], bytes]] = {}
        #: Per Metadata version, each topic's encoding beside the cache's TopicMetadata it was
        #: built from: topic name → (TopicMetadata, encoded topic).
        self.kept_topics: dict[int, dict[str, tuple[protocol.TopicMetadata, bytes]]] = {}
        #: Likewise each partition's: (topic, partition) → (PartitionMetadata, encoded partition).
        self.kept_partitions: dict[int, dict[tuple[str, int], tuple[protocol.PartitionMetadata, bytes]]] = {}

    def health(self) -> BrokerHealth:
        return BrokerHealth(self.config.broker_id, self.cache.controller_id, self.controller.active,
                            self.cache.cluster_id, [(str(path), reason) for path, reason
                                                    in sorted(self.log_manager.offline_dirs.items())])

    def describe_cluster(self) -> protocol.ClusterMetadata:
        return self.cache.cluster_metadata([])

    async def cluster_metadata(self, topics: list[str] | None, allow_auto_create: bool) -> protocol.ClusterMetadata:
        """Metadata of ``topics`` (all when None); unknown ones are created when allowed and
        ``auto.create.topics.enable`` is set; an invalid name answers INVALID_TOPIC_EXCEPTION.

        A topic created here, or found already in ZooKeeper though this broker's cache has not
        loaded it yet (another broker just created it), is waited for until it has leaders (up
        to :attr:`new_topic_wait_seconds`): a client asking several brokers then does not see a
        new topic's partitions appear, vanish and appear again (a group leader that assigned
        while they were gone could keep an assignment without them)."""
        cache, config = self.cache, self.config
        if topics:
            created = []
            for topic in topics:
                if topic in cache.topics or topic in cache.topics_being_deleted:
                    continue
                if allow_auto_create and config.auto_create_topics_enable and topic not in INTERNAL_TOPICS:
                    try:
                        validate_topic_name(topic)
                        factor = min(config.default_replication_factor, max(1, len(cache.brokers)))
                        await self.admin.create_topic(NewTopic(topic, config.num_partitions, factor), wait_ms=0)
                        created.append(topic)
                    except TopicAlreadyExistsError:
                        created.append(topic)
                    except BrokerResponseError:
                        pass
            if created:
                await cache.wait_for(lambda: all(
                    topic in cache.topics and cache.topics[topic].partitions and all(
                        entry.leader >= 0 for entry in cache.topics[topic].partitions.values())
                    for topic in created), self.new_topic_wait_seconds)
        metadata = cache.cluster_metadata(topics)
        invalid = []
        for topic_metadata in metadata.topics:
            if topic_metadata.error_code == UnknownTopicOrPartitionError.errno:
                try:
                    validate_topic_name(topic_metadata.name)
                except BrokerResponseError as exc:
                    invalid.append((topic_metadata.name, exc.errno))
        if invalid:
            codes = dict(invalid)
            metadata = protocol.ClusterMetadata(metadata.cluster_id, metadata.controller_id, metadata.brokers, [
                protocol.TopicMetadata(item.name, item.partitions, codes.get(item.name, item.error_code),
                                       item.is_internal, item.topic_id) for item in metadata.topics])
        return metadata


class ControllerService:
    """Calls that concern the controller, and the broker-epoch check of calls only brokers make."""

    def __init__(self, config: BrokerConfig, zookeeper: Coordinator, metadata: MetadataCache,
                 controller: Controller, transport: AsyncTransport) -> None:
        self.config = config
        self.zookeeper = zookeeper
        self.metadata = metadata
        self.controller = controller
        self.transport = transport

    async def verify_broker_epoch(self, broker_id: int, broker_epoch: int | None, what: str,
                                  authoritative: bool = False) -> None:
        """Check that a call only brokers make comes from broker ``broker_id``'s current
        registration: ``broker_epoch`` must be the czxid of ``/brokers/ids/<broker_id>`` (Kafka's
        broker epoch). Missing or negative → INVALID_REQUEST; any other → STALE_BROKER_EPOCH.
        Refusals are logged at WARN.

        The metadata cache answers the common case; a mismatch (the cache may trail a fresh
        registration), and every ``authoritative`` check, reads the registration from ZooKeeper.
        """
        if broker_epoch is None or broker_epoch < 0:
            log.warning("refused %s for broker %d: no broker epoch given", what, broker_id)
            raise InvalidRequestError(f"{what} for broker {broker_id} must carry that broker's epoch "
                                      f"(the czxid of its registration)")
        if not authoritative:
            known = self.metadata.brokers.get(broker_id)
            if known is not None and known.epoch == broker_epoch:
                return
        stat = await self.zookeeper.exists(znodes.broker_path(broker_id)) if broker_id >= 0 else None
        if stat is not None and stat.czxid == broker_epoch:
            return
        current = "not registered" if stat is None else f"registered with epoch {stat.czxid}"
        log.warning("refused %s for broker %d with epoch %d: the broker is %s", what, broker_id, broker_epoch,
                    current)
        raise StaleBrokerEpochError(f"broker {broker_id} epoch {broker_epoch} is stale: the broker is {current}")

    async def controlled_shutdown(self, broker_id: int, broker_epoch: int | None) -> list[tuple[str, int]]:
        """Serve another broker's controlled shutdown: only that broker, with its current epoch,
        may ask (Kafka's rule); returns the partitions it still leads."""
        await self.verify_broker_epoch(broker_id, broker_epoch, "a controlled shutdown", authoritative=True)
        assert broker_epoch is not None  # verify_broker_epoch refuses a missing one
        return await self.controller.controlled_shutdown(broker_id, broker_epoch)

    async def elect_preferred_leaders(self, partitions: list[tuple[str, int]] | None) -> dict[tuple[str, int], str]:
        """Preferred leader election (every partition when None), by the controller: forwarded
        when this broker is not it. The result per partition is the controller's word for it."""
        if self.controller.active:
            return await self.controller.elect_preferred(partitions)
        endpoint = self.metadata.endpoint(self.metadata.controller_id)
        if endpoint is None:
            raise NotControllerError("no controller is known right now")
        body: dict[str, Any] = {"election_type": "preferred"}
        if partitions is not None:
            body["partitions"] = [{"topic": topic, "partition": number} for topic, number in partitions]
        answer = await self.transport.request_json(endpoint.address, "POST", protocol.ELECT_LEADERS, body)
        return {(protocol.require(item, "topic", str), protocol.require(item, "partition", int)):
                protocol.require(item, "result", str) for item in protocol.require_objects(answer, "partitions")}


class ReplicaService:
    """Produce, fetch and offset lookups on the partitions this broker hosts."""

    def __init__(self, replica_manager: ReplicaManager, controller: ControllerService) -> None:
        self.replica_manager = replica_manager
        self.controller = controller

    def not_serving_reason(self) -> str | None:
        """Why this broker serves no partition now (not registered yet, ZooKeeper session
        suspended or expired and not confirmed since), or None while it serves."""
        return self.replica_manager.fenced_reason

    async def produce(self, request: protocol.ProduceRequest,
                      appended: Callable[[], None] | None = None) -> list[protocol.ProduceResult]:
        """Append every partition's batches in order, then wait for what ``acks`` asks for, every
        partition at once; ``appended`` is called between the two (see :meth:`ReplicaManager.produce`)."""
        return await self.replica_manager.produce(request, appended=appended)

    async def fetch(self, request: protocol.FetchRequest) -> list[protocol.FetchResult]:
        if request.is_from_follower:  # only a broker, with its current epoch, fetches as a replica
            await self.controller.verify_broker_epoch(request.replica_id, request.replica_epoch, "a follower fetch")
        return await self.replica_manager.fetch(request)

    async def fetch_in_session(self, request: protocol.FetchRequest) -> tuple[int, list[protocol.FetchResult]]:
        """A follower's session fetch: (session id, the partitions with news for it); see
        :meth:`kafkalite.broker.replica.ReplicaManager.fetch_in_session`."""
        await self.controller.verify_broker_epoch(request.replica_id, request.replica_epoch, "a follower fetch")
        return await self.replica_manager.fetch_in_session(request)

    def list_offsets(self, queries: list[OffsetQuery], isolation_level: int) -> list[OffsetAnswer]:
        answers = []
        for query in queries:
            try:
                offset, timestamp, epoch = self.replica_manager.list_offset(
                    query.topic, query.partition, query.timestamp, isolation_level, query.current_leader_epoch)
                answers.append(OffsetAnswer(query.topic, query.partition, None, offset, timestamp, epoch))
            except BrokerResponseError as exc:
                answers.append(OffsetAnswer(query.topic, query.partition, exc))
        return answers

    def offsets_for_leader_epoch(self, queries: list[EpochQuery]) -> list[EpochAnswer]:
        answers = []
        for query in queries:
            try:
                epoch, end_offset = self.replica_manager.end_offset_for_epoch(query.topic, query.partition,
                                                                              query.leader_epoch)
                answers.append(EpochAnswer(query.topic, query.partition, None, epoch, end_offset))
            except BrokerResponseError as exc:
                answers.append(EpochAnswer(query.topic, query.partition, exc))
        return answers

    def describe_producers(self, partitions: list[tuple[str, int]]) -> list[ProducersAnswer]:
        """The producer state of partitions this broker leads (NOT_LEADER_OR_FOLLOWER elsewhere),
        with each producer's open transaction (DescribeProducers, the transactions tool)."""
        answers = []
        for topic, number in partitions:
            try:
                producers = [ActiveProducer(producer_id, entry.epoch, entry.last_sequence, entry.last_timestamp,
                                            entry.coordinator_epoch, entry.current_txn_first_offset)
                             for producer_id, entry in sorted(self.replica_manager.producers(topic, number).items())]
                answers.append(ProducersAnswer(topic, number, None, producers))
            except BrokerResponseError as exc:
                answers.append(ProducersAnswer(topic, number, exc))
        return answers

    async def delete_records(self, queries: list[DeleteRecordsQuery], timeout_ms: int) -> list[DeleteRecordsAnswer]:
        """DeleteRecords (Kafka's KIP-107) on the partitions this broker leads, answered in the
        order asked. Each partition's log start offset moves to its offset (-1: the high
        watermark), the segments below it are deleted and the move checkpointed; the answer
        waits, for every partition at once and up to ``timeout_ms`` in all, until the followers
        in the ISR have adopted it, and carries the new low watermark. Per partition errors:
        OFFSET_OUT_OF_RANGE (beyond the high watermark, or below -1), NOT_LEADER_OR_FOLLOWER,
        UNKNOWN_TOPIC_OR_PARTITION, INVALID_TOPIC_EXCEPTION (internal topics),
        REQUEST_TIMED_OUT (the leader moved its log start, the ISR did not follow in time)."""

        async def delete(query: DeleteRecordsQuery) -> DeleteRecordsAnswer:
            try:
                low = await self.replica_manager.delete_records(query.topic, query.partition, query.offset,
                                                                timeout_ms)
                return DeleteRecordsAnswer(query.topic, query.partition, None, low)
            except BrokerResponseError as exc:
                return DeleteRecordsAnswer(query.topic, query.partition, exc)
            except (StorageError, OSError) as exc:  # a segment or checkpoint file that could not be written
                log.warning("delete records of %s-%d failed: %s", query.topic, query.partition, exc)
                return DeleteRecordsAnswer(query.topic, query.partition, KafkaStorageError(str(exc)))
            except KafkaliteError as exc:
                return DeleteRecordsAnswer(query.topic, query.partition, as_response_error(exc))

        return list(await asyncio.gather(*(delete(query) for query in queries)))


    async def write_txn_markers(self, markers: list[TxnMarkerRequest], timeout_ms: int) -> list[TxnMarkerResult]:
        """WriteTxnMarkers on the partitions this broker leads, answered in the order asked:
        each marker is appended by the partition's leader and waited for as acks=all (until it
        is below the high watermark, at most ``timeout_ms`` for the whole request). Per
        partition errors: NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION,
        INVALID_PRODUCER_EPOCH (the producer's epoch moved past the marker's),
        TRANSACTION_COORDINATOR_FENCED (an older coordinator epoch), NOT_ENOUGH_REPLICAS,
        REQUEST_TIMED_OUT, KAFKA_STORAGE_ERROR."""
        replica_manager = self.replica_manager
        errors: list[dict[tuple[str, int], int]] = [{} for _ in markers]
        waits: list[tuple[int, tuple[str, int], Partition, int]] = []  # (marker index, partition, Partition, offset)
        for index, marker in enumerate(markers):
            for topic, number in marker.partitions:
                try:
                    partition, required = replica_manager.append_txn_marker(
                        topic, number, marker.producer_id, marker.producer_epoch, marker.committed,
                        marker.coordinator_epoch)
                    waits.append((index, (topic, number), partition, required))
                    errors[index][(topic, number)] = 0
                except Exception as exc:  # every failure becomes a per-partition error code
                    code = replica_manager.error_code_of(exc)[0]
                    if code == UnknownServerError.errno:
                        log.exception("transaction marker for %s-%d failed", topic, number)
                    errors[index][(topic, number)] = code
        if waits:
            timeout = max(0, timeout_ms) / 1000
            outcomes = await asyncio.gather(*(partition.wait_for_replication(required, timeout)
                                              for _, _, partition, required in waits), return_exceptions=True)
            for (index, key, _partition, _required), outcome in zip(waits, outcomes):
                if isinstance(outcome, BaseException):
                    errors[index][key] = replica_manager.error_code_of(outcome)[0]
        return [TxnMarkerResult(marker.producer_id, errors[index]) for index, marker in enumerate(markers)]


def _forwarded_for() -> dict[str, str]:
    """The header naming the principal a forwarded request is served for (none where requests
    are not authorized): the leader authorizes that principal, not the forwarding broker."""
    principal = served_principal.get()
    return {} if principal is None else {FORWARDED_PRINCIPAL_HEADER: str(principal)}


class RecordsService:
    """Records by topic for humans and scripts, served by any broker (forwarded to leaders, on
    behalf of the client's principal: see :data:`~kafkalite.security.principal.FORWARDED_PRINCIPAL_HEADER`)."""

    def __init__(self, config: BrokerConfig, metadata: MetadataService, replicas: ReplicaService,
                 transport: AsyncTransport, wall_ms: Callable[[], int]) -> None:
        self.config = config
        self.metadata = metadata
        self.replicas = replicas
        self.transport = transport
        self.wall_ms = wall_ms

    async def produce(self, topic: str, records: list[RecordToProduce], acks: int) -> list[ProducedRecord]:
        """Partition records like the default partitioner (murmur2 of the key, else round robin),
        then produce each partition's batch on its leader."""
        validate_topic_name(topic)
        metadata = await self.metadata.cluster_metadata([topic], True)
        topic_metadata = metadata.topics[0]
        if topic_metadata.error_code:
            raise protocol.error_for(topic_metadata.error_code, f"topic {topic}")
        count = len(topic_metadata.partitions)
        if count == 0:
            raise LeaderNotAvailableError(f"topic {topic} has no partitions yet")
        by_partition: dict[int, list[int]] = {}
        round_robin = 0
        for index, record in enumerate(records):
            partition = record.partition
            if partition is None:
                if record.key is not None:
                    partition = partition_for_key(record.key, count)
                else:
                    partition = round_robin % count
                    round_robin += 1
            if not 0 <= partition < count:
                raise UnknownTopicOrPartitionError(f"topic {topic} has no partition {partition}")
            by_partition.setdefault(partition, []).append(index)
        now = self.wall_ms()
        answers: list[ProducedRecord | None] = [None] * len(records)
        for number, indexes in sorted(by_partition.items()):
            batch = build_batch([records[i].value for i in indexes], keys=[records[i].key for i in indexes],
                                timestamps=now, headers=[records[i].headers for i in indexes])
            single = protocol.ProduceRequest(acks, self.config.request_timeout_ms,
                                             [protocol.ProducePartition(topic, number, batch)])
            leader = next(item.leader for item in topic_metadata.partitions if item.partition == number)
            if leader == self.config.broker_id:
                results = await self.replicas.produce(single)
            else:
                endpoint = self.metadata.cache.endpoint(leader)
                if endpoint is None:
                    raise LeaderNotAvailableError(f"{topic}-{number} has no leader")
                payload = await self.transport.request(endpoint.address, "POST", protocol.PRODUCE,
                                                       body=protocol.encode_produce_request(single),
                                                       headers=_forwarded_for())
                results = protocol.decode_produce_response(payload) if payload else []
            result = results[0] if results else protocol.ProduceResult(topic, number)
            for position, index in enumerate(indexes):
                if result.error_code:
                    answers[index] = ProducedRecord(result.partition, -1, protocol.error_for(result.error_code),
                                                    result.error_message)
                else:
                    answers[index] = ProducedRecord(
                        result.partition, result.base_offset + position if result.base_offset >= 0 else -1, None)
        return [answer for answer in answers if answer is not None]

    async def fetch(self, topic: str, partition: int, offset: int, max_bytes: int, timeout_ms: int) -> FetchedRecords:
        """Decoded records of one partition from ``offset`` (long-polling up to ``timeout_ms``)."""
        validate_topic_name(topic)
        request = protocol.FetchRequest([protocol.FetchPartition(topic, partition, offset, max_bytes)],
                                        max_wait_ms=max(0, timeout_ms), min_bytes=1, max_bytes=max_bytes)
        info = self.metadata.cache.partition(topic, partition)
        if info is None:
            raise UnknownTopicOrPartitionError(f"unknown topic-partition {topic}-{partition}")
        if info.leader == self.config.broker_id:
            results = await self.replicas.fetch(request)
        else:
            endpoint = self.metadata.cache.endpoint(info.leader)
            if endpoint is None:
                raise LeaderNotAvailableError(f"{topic}-{partition} has no leader")
            payload = await self.transport.request(endpoint.address, "POST", protocol.FETCH,
                                                   body=protocol.encode_fetch_request(request),
                                                   timeout_ms=timeout_ms + self.config.request_timeout_ms,
                                                   headers=_forwarded_for())
            results = protocol.decode_fetch_response(payload)
        result = results[0]
        if result.error_code:
            raise protocol.error_for(result.error_code, result.error_message)
        records = []
        next_offset = offset
        for batch in iter_batches(bytes(result.records), validate=True):
            if batch.is_control:  # a transaction marker: never shown, but read past
                next_offset = max(next_offset, batch.next_offset)
                continue
            for record in batch.records():
                if record.offset < offset:
                    continue
                records.append(FetchedRecord(record.offset, record.timestamp, record.key, record.value,
                                             list(record.headers)))
                next_offset = record.offset + 1
        return FetchedRecords(topic, partition, records, next_offset, result.high_watermark, result.log_start_offset)


async def _finish_writes(calls: list[Coroutine[Any, Any, T]]) -> list[T | KafkaliteError]:
    """Run ``calls`` at once and return each one's result or named error, in order. Shielded: if
    the caller is cancelled (the request's client went away), the calls still run to their end,
    so what a request accepted is done. An unexpected exception is raised."""
    gathered = asyncio.gather(*calls, return_exceptions=True)
    outcomes = await asyncio.shield(gathered)
    for outcome in outcomes:
        if isinstance(outcome, BaseException) and not isinstance(outcome, KafkaliteError):
            raise outcome
    return outcomes  # type: ignore[return-value]  # the loop above checked every exception


class AdminRequests:
    """Batch admin requests answered item by item (one item's failure does not fail the rest)."""

    def __init__(self, config: BrokerConfig, admin: AdminService) -> None:
        self.config = config
        self.admin = admin

    async def create_topics(self, topics: list[NewTopic | Rejected], timeout_ms: int,
                            validate_only: bool) -> list[ItemOutcome[dict[int, list[int]]]]:
        """Each topic's replica assignment (partition → brokers) or error.

        Every topic the request accepts is written to ZooKeeper first, all writes in flight at
        once, and they finish even when the request is cancelled (its client gone); then the
        request waits, once for all of them, until their partitions are led or ``timeout_ms``
        has passed: a topic still without leaders is answered REQUEST_TIMED_OUT ("created, not
        led yet"), never one that was not created."""
        accepted = [(index, topic) for index, topic in enumerate(topics) if not isinstance(topic, Rejected)]
        written = await _finish_writes([self.admin.create_topic(topic, validate_only=validate_only, wait_ms=0)
                                        for _, topic in accepted])
        answers: list[ItemOutcome[dict[int, list[int]]]] = [
            ItemOutcome(topic.name, topic.error if isinstance(topic, Rejected) else None) for topic in topics]
        created: dict[str, int] = {}
        for (index, topic), outcome in zip(accepted, written, strict=True):
            if isinstance(outcome, BaseException):
                answers[index] = ItemOutcome(topic.name, as_response_error(outcome))
            else:
                answers[index] = ItemOutcome(topic.name, None, outcome)
                created[topic.name] = len(outcome)
        if created and not validate_only and timeout_ms > 0:
            await self._answer_late_leaders(answers, created, timeout_ms,
                                            "was created, but not every partition has a leader yet")
        return answers

    async def delete_topics(self, names: list[str], timeout_ms: int) -> list[ItemOutcome[None]]:
        """Each topic marked for deletion (all at once, finishing even when the request is
        cancelled), then one wait until they are gone or ``timeout_ms`` has passed."""
        marked = await _finish_writes([self.admin.delete_topic(name, wait_ms=0) for name in names])
        answers: list[ItemOutcome[None]] = [
            ItemOutcome(name, as_response_error(outcome) if isinstance(outcome, BaseException) else None)
            for name, outcome in zip(names, marked, strict=True)]
        deleting = [answer.name for answer in answers if answer.error is None]
        if deleting and timeout_ms > 0:
            late = await self.admin.wait_for_deletion(deleting, timeout_ms)
            answers = [ItemOutcome(answer.name, RequestTimedOutError(
                f"topic {answer.name} is marked for deletion but not yet deleted"))
                if answer.error is None and answer.name in late else answer for answer in answers]
        return answers

    async def create_partitions(self, topics: list[NewPartitions | Rejected],
                                timeout_ms: int) -> list[ItemOutcome[dict[int, list[int]]]]:
        """Each topic's added partitions (partition → brokers) or error: every accepted change
        written at once (finishing even when the request is cancelled), then one wait for leaders."""
        accepted = [(index, item) for index, item in enumerate(topics) if not isinstance(item, Rejected)]
        written = await _finish_writes([self._add_partitions(item) for _, item in accepted])
        answers: list[ItemOutcome[dict[int, list[int]]]] = [
            ItemOutcome(item.name, item.error) if isinstance(item, Rejected) else ItemOutcome(item.topic, None)
            for item in topics]
        totals: dict[str, int] = {}
        for (index, item), outcome in zip(accepted, written, strict=True):
            if isinstance(outcome, BaseException):
                answers[index] = ItemOutcome(item.topic, as_response_error(outcome))
            else:
                answers[index] = ItemOutcome(item.topic, None, outcome)
                totals[item.topic] = item.count
        if totals and timeout_ms > 0:
            await self._answer_late_leaders(answers, totals, timeout_ms,
                                            "has its new partitions, but not every one has a leader yet")
        return answers

    async def _answer_late_leaders(self, answers: list[ItemOutcome[dict[int, list[int]]]],
                                   partitions: dict[str, int], timeout_ms: int, state: str) -> None:
        """One wait for the leaders of ``partitions`` (topic → partition count); each topic still
        short of them at ``timeout_ms`` is answered REQUEST_TIMED_OUT: "topic <name> <state>"."""
        late = await self.admin.wait_for_leaders(partitions, timeout_ms)
        for index, answer in enumerate(answers):
            if answer.error is None and answer.name in late:
                answers[index] = ItemOutcome(answer.name, RequestTimedOutError(f"topic {answer.name} {state}"))

    async def _add_partitions(self, item: NewPartitions) -> dict[int, list[int]]:
        validate_topic_name(item.topic)
        return await self.admin.create_partitions(item.topic, item.count, item.assignment, wait_ms=0)

    async def describe_configs(self, resources: list[ConfigResource]) -> list[ItemOutcome[list[dict[str, Any]]]]:
        """Each resource's config entries; a broker describes only its own configs."""
        answers: list[ItemOutcome[list[dict[str, Any]]]] = []
        for resource in resources:
            try:
                if resource.type == "topic":
                    entries = self.admin.describe_topic_configs(resource.name)
                elif resource.type == "broker":
                    broker_id = self._broker_id(resource.name, self.config.broker_id)
                    if broker_id != self.config.broker_id:
                        raise InvalidRequestError(f"broker {self.config.broker_id} describes only its own configs; "
                                                  f"ask broker {broker_id}")
                    entries = await self.admin.describe_broker_configs(broker_id)
                else:
                    raise InvalidRequestError(f"resource type must be topic or broker, got {resource.type!r}")
                answers.append(ItemOutcome(resource.name, None, entries))
            except KafkaliteError as exc:
                answers.append(ItemOutcome(resource.name, as_response_error(exc)))
        return answers

    async def alter_configs(self, changes: list[ConfigChange | Rejected],
                            validate_only: bool) -> list[ItemOutcome[None]]:
        answers: list[ItemOutcome[None]] = []
        for change in changes:
            if isinstance(change, Rejected):
                answers.append(ItemOutcome(change.name, change.error))
                continue
            try:
                if change.type == "topic":
                    await self.admin.alter_topic_configs(change.name, change.set, change.delete, validate_only)
                elif change.type == "broker":
                    broker_id = self._broker_id(change.name, None)
                    await self.admin.alter_broker_configs(broker_id, change.set, change.delete, validate_only)
                else:
                    raise InvalidRequestError(f"resource type must be topic or broker, got {change.type!r}")
                answers.append(ItemOutcome(change.name, None))
            except KafkaliteError as exc:
                answers.append(ItemOutcome(change.name, as_response_error(exc)))
        return answers

    @staticmethod
    def _broker_id(name: str, default: int | None) -> int | None:
        try:
            return int(name) if name else default
        except ValueError:
            raise InvalidRequestError(f"broker resource names are broker ids, got {name!r}") from None

    async def alter_reassignments(self, targets: dict[tuple[str, int], list[int]]
                                  ) -> dict[tuple[str, int], BrokerResponseError | None]:
        results = await self.admin.alter_reassignments(targets)
        return {key: (as_response_error(error) if isinstance(error, KafkaliteError) else None)
                for key, error in results.items()}

    async def list_reassignments(self) -> list[dict[str, Any]]:
        return await self.admin.list_reassignments()


class ProducerIdService:
    """Producer ids for idempotent producers, unique in the cluster."""

    def __init__(self, admin: AdminService) -> None:
        self.admin = admin

    async def init_producer_id(self) -> ProducerIdAnswer:
        return ProducerIdAnswer(await self.admin.next_producer_id())


@dataclass(frozen=True)
class BrokerServices:
    """Everything a front end may call, built once by the composition root
    (:class:`kafkalite.broker.server.Broker`) and shared by every front end."""

    config: BrokerConfig
    metadata: MetadataService
    replicas: ReplicaService
    records: RecordsService
    controller: ControllerService
    admin: AdminRequests
    groups: GroupCoordinator
    producer_ids: ProducerIdService
    transactions: TransactionCoordinator
    #: The schema registry's store, served under /registry by the HTTP front end.
    registry: SchemaStore | None = None
    #: The running counts the front ends add their requests to and ``GET /metrics`` reads.
    stats: BrokerStats = field(default_factory=BrokerStats)
    #: Consumer lag of the groups this broker coordinates, for ``GET /metrics``.
    consumer_lag: ConsumerLag | None = None
    #: The users/clients config entities (SCRAM credentials, quotas), followed from ZooKeeper.
    entity_configs: EntityConfigs | None = None
    #: Client quotas (produce and fetch byte rates) both front ends record their requests in.
    quotas: BrokerQuotas = field(default_factory=lambda: BrokerQuotas(BrokerConfig()))
    #: The ACL authorizer when ``authorizer.class.name`` is set; None: every request is allowed.
    authorizer: Authorizer | None = None
