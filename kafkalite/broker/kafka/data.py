"""The data-plane and cluster APIs over the Kafka protocol: Metadata, Produce, Fetch, ListOffsets,
OffsetForLeaderEpoch, InitProducerId and DescribeCluster (SASL: kafka/sasl.py). Fetch and ListOffsets
honour ``isolation_level``: read_committed reads below the last stable offset and gets the
aborted transactions of the records it receives.

Each handler reads the kio request, calls one service of
:class:`~kafkalite.broker.services.BrokerServices` with its typed request and answers with kio
field names (see :mod:`kafkalite.broker.kafka.context`). Record batches pass through as bytes:
the replica service validates Kafka's v2 batches, compression and idempotence, as it does for
the HTTP front end.

Concurrency: event-loop only, like every handler.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from datetime import timedelta
from typing import Any

from kafkalite import protocol
from kafkalite.broker.kafka import codec
from kafkalite.broker.kafka.context import NO_RESPONSE, ApiHandler, EncodedAnswer, KafkaAnswer, KafkaRequestContext
from kafkalite.broker.services import EpochQuery, OffsetQuery
from kafkalite.errors import FetchSessionIdNotFoundError, InvalidRequestError, UnsupportedVersionError

#: Kafka's error codes that kafkalite's error tree does not name (yet).
UNKNOWN_TOPIC_ID = 100

METADATA, PRODUCE, FETCH, LIST_OFFSETS, OFFSET_FOR_LEADER_EPOCH = 3, 0, 1, 2, 23
INIT_PRODUCER_ID, DESCRIBE_CLUSTER = 22, 60


def _milliseconds(value: Any) -> int:
    return int(value.total_seconds() * 1000) if isinstance(value, timedelta) else int(value)


def _topic_id(hex_id: str) -> uuid.UUID | None:
    return uuid.UUID(hex=hex_id) if hex_id else None


def _brokers(context: KafkaRequestContext, metadata: protocol.ClusterMetadata) -> list[dict[str, Any]]:
    """The brokers at the addresses advertised for the listener the request came in on (a broker
    without that listener is left out, as Kafka does)."""
    answer = []
    for broker in metadata.brokers:
        address = context.advertised_address(broker.broker_id)
        if address is not None:
            answer.append({"node_id": broker.broker_id, "broker_id": broker.broker_id, "host": address[0],
                           "port": address[1], "rack": broker.rack})
    return answer


# -- Metadata -------------------------------------------------------------------------------------
async def metadata(context: KafkaRequestContext, request: Any) -> KafkaAnswer:
    """Brokers at their advertised addresses, topics with ids, leaders and leader epochs. v0 asks
    for every topic with an empty list, later versions with null; v0–v3 always auto-create."""
    services = context.services
    requested = request.topics
    names: list[str] | None
    unknown_ids: list[uuid.UUID] = []
    if requested is None or (context.api_version == 0 and not requested):
        names = None
    else:
        names = []
        by_id = {info.topic_id: name for name, info in services.metadata.cache.topics.items()} \
            if any(getattr(item, "topic_id", None) for item in requested) else {}
        for item in requested:
            name = getattr(item, "name", None)
            topic_id = getattr(item, "topic_id", None)
            if name is None and topic_id is not None:
                name = by_id.get(topic_id.hex)
                if name is None:
                    unknown_ids.append(topic_id)
                    continue
            if name is not None:
                names.append(name)
    # The answer for every topic is kept, encoded, per version and listener until the cache
    # changes; it is the same for every caller unless ACLs filter it or quotas throttle it.
    kept_key: tuple[str, int, str] | None = None
    generation = services.metadata.cache.generation
    if names is None and services.authorizer is None and not services.quotas.enabled:
        kept_key = ("kafka-metadata", context.api_version, context.listener_name)
        kept = services.metadata.kept_answers.get(kept_key)
        if kept is not None and kept[0] == generation:
            return EncodedAnswer(kept[1])
    allow = getattr(request, "allow_auto_topic_creation", True)
    result = await services.metadata.cluster_metadata(names, allow) if names is None or names else \
        services.metadata.describe_cluster()
    answer = {"throttle_time": 0, "brokers": _brokers(context, result), "cluster_id": result.cluster_id,
              "controller_id": result.controller_id, "topics": [],
              "cluster_authorized_operations": -2147483648}
    if kept_key is None:
        topics = [_metadata_topic(topic) for topic in result.topics]
        topics += [{"error_code": UNKNOWN_TOPIC_ID, "name": None, "topic_id": topic_id, "partitions": []}
                   for topic_id in unknown_ids]
        answer["topics"] = topics
        return answer
    body = _encode_all_topics(services, context.api_version, answer, result.topics)
    if services.metadata.cache.generation == generation:
        services.metadata.kept_answers[kept_key] = (generation, body)
    return EncodedAnswer(body)


def _metadata_topic(topic: protocol.TopicMetadata) -> dict[str, Any]:
    return {
        "error_code": topic.error_code, "name": topic.name, "topic_id": _topic_id(topic.topic_id),
        "is_internal": topic.is_internal, "topic_authorized_operations": -2147483648,
        "partitions": [{"error_code": partition.error_code, "partition_index": partition.partition,
                        "leader_id": partition.leader, "leader_epoch": partition.leader_epoch,
                        "replica_nodes": partition.replicas, "isr_nodes": partition.isr,
                        "offline_replicas": partition.offline_replicas} for partition in topic.partitions]}


def _metadata_tail_size(version: int) -> int:
    """Bytes of a Metadata response after its topics array: cluster_authorized_operations
    (v8-v10) and the tagged-fields count of flexible versions (v9+)."""
    return (4 if 8 <= version <= 10 else 0) + (1 if version >= 9 else 0)


def _encode_all_topics(services: Any, version: int, answer: dict[str, Any],
                       topics: list[protocol.TopicMetadata]) -> bytes:
    """The encoded Metadata body of ``answer`` with ``topics`` as its topics array. Each topic's
    encoding is kept beside the cache's TopicMetadata it was built from (the cache answers the
    same object while the topic is unchanged), so only changed topics are encoded again; and a
    changed topic joins its partitions' kept encodings, so only its changed partitions are."""
    item_class = codec.item_class(METADATA, version, "topics")
    kept = services.metadata.kept_topics.get(version, {})
    kept_partitions = services.metadata.kept_partitions.get(version, {})
    fresh: dict[str, tuple[protocol.TopicMetadata, bytes]] = {}
    fresh_partitions: dict[tuple[str, int], tuple[protocol.PartitionMetadata, bytes]] = {}
    parts: list[bytes] = []
    for topic in topics:
        entry = kept.get(topic.name)
        if entry is None or entry[0] is not topic:
            entry = (topic, _encode_topic(item_class, version, topic, kept_partitions, fresh_partitions))
        else:
            for partition in topic.partitions:
                key = (topic.name, partition.partition)
                kept_partition = kept_partitions.get(key)
                if kept_partition is not None:
                    fresh_partitions[key] = kept_partition
        fresh[topic.name] = entry
        parts.append(entry[1])
    services.metadata.kept_topics[version] = fresh
    services.metadata.kept_partitions[version] = fresh_partitions
    return _splice_array(codec.encode_response_body(METADATA, version, answer), parts, version >= 9,
                         _metadata_tail_size(version))


def _encode_topic(item_class: type[Any], version: int, topic: protocol.TopicMetadata,
                  kept: dict[tuple[str, int], tuple[protocol.PartitionMetadata, bytes]],
                  fresh: dict[tuple[str, int], tuple[protocol.PartitionMetadata, bytes]]) -> bytes:
    """One topic of a Metadata answer: its fields encoded with no partitions, its partitions'
    encodings (kept beside the cache's PartitionMetadata objects) spliced in."""
    fields = _metadata_topic(topic)
    partition_fields = fields["partitions"]
    fields["partitions"] = []
    partition_class = codec.nested_item_class(item_class, "partitions")
    parts: list[bytes] = []
    for partition, item in zip(topic.partitions, partition_fields):
        key = (topic.name, partition.partition)
        entry = kept.get(key)
        if entry is None or entry[0] is not partition:
            entry = (partition, codec.encode_item(partition_class, item))
        fresh[key] = entry
        parts.append(entry[1])
    # after a topic's partitions: topic_authorized_operations (v8+), tagged fields (v9+)
    return _splice_array(codec.encode_item(item_class, fields), parts, version >= 9,
                         (4 if version >= 8 else 0) + (1 if version >= 9 else 0))


def _splice_array(empty: bytes, parts: list[bytes], flexible: bool, tail_size: int) -> bytes:
    """``empty`` (an encoding whose last array, followed by ``tail_size`` bytes, is empty) with
    ``parts`` as that array's items."""
    head = empty[:len(empty) - tail_size - len(codec.encode_array_length(0, flexible))]
    return b"".join([head, codec.encode_array_length(len(parts), flexible), *parts,
                     empty[len(empty) - tail_size:]])


# -- Produce --------------------------------------------------------------------------------------
async def produce(context: KafkaRequestContext, request: Any) -> KafkaAnswer:
    """Record batches as bytes to the replica service; acks=0 gets no response. Once the batches
    are appended the connection's next request may start (acks=all requests of one connection
    wait for replication together; answers still go out in order). A transactional
    producer's batches (attribute bit 4, with its producer id) open its transaction on each
    partition's leader; the transactional id itself is the coordinator's business."""
    partitions = [protocol.ProducePartition(topic.name, partition.index,
                                            partition.records if partition.records is not None else b"")
                  for topic in request.topic_data for partition in topic.partition_data]
    results = await context.services.replicas.produce(
        protocol.ProduceRequest(request.acks, _milliseconds(request.timeout), partitions),
        appended=context.release_next_request)
    throttle_ms = context.services.quotas.record_produce(context.principal, context.client_id, partitions)
    if request.acks == 0:
        await context.services.quotas.mute(throttle_ms)  # no answer to carry it: hold the connection
        return NO_RESPONSE
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for result in results:
        by_topic.setdefault(result.topic, []).append({
            "index": result.partition, "error_code": result.error_code, "base_offset": result.base_offset,
            "log_append_time": result.log_append_time, "log_start_offset": result.log_start_offset,
            "error_message": result.error_message or None})
    return {"responses": [{"name": name, "partition_responses": items} for name, items in by_topic.items()],
            "throttle_time": throttle_ms}


# -- Fetch ----------------------------------------------------------------------------------------
async def fetch(context: KafkaRequestContext, request: Any) -> KafkaAnswer:
    """A sessionless fetch (KIP-227's session id 0): every request names all its partitions and
    the answer never opens a session. A consumer's fetch only (a replica id is ignored)."""
    session_id = getattr(request, "session_id", 0)
    if session_id != 0:
        return {"error_code": FetchSessionIdNotFoundError.errno, "session_id": 0, "responses": []}
    services = context.services
    by_id: dict[str, str] = {}
    if context.api_version >= 13:
        by_id = {info.topic_id: name for name, info in services.metadata.cache.topics.items()}
    partitions: list[protocol.FetchPartition] = []
    unknown: list[tuple[Any, Any]] = []  # (topic id, kio partition) of topics this broker does not know
    for topic in request.topics:
        name = getattr(topic, "topic", None)
        if name is None:
            name = by_id.get(topic.topic_id.hex) if topic.topic_id is not None else None
            if name is None:
                unknown.extend((topic.topic_id, partition) for partition in topic.partitions)
                continue
        for partition in topic.partitions:
            partitions.append(protocol.FetchPartition(
                name, partition.partition, partition.fetch_offset, partition.partition_max_bytes,
                getattr(partition, "current_leader_epoch", protocol.NO_EPOCH),
                getattr(partition, "last_fetched_epoch", protocol.NO_EPOCH)))
    results = await services.replicas.fetch(protocol.FetchRequest(
        partitions, max_wait_ms=max(0, _milliseconds(request.max_wait)), min_bytes=request.min_bytes,
        max_bytes=request.max_bytes, isolation_level=_isolation_level(request))) if partitions else []
    results, throttle_ms = services.quotas.record_fetch(context.principal, context.client_id, results)
    names_to_ids = {name: _topic_id(info.topic_id) for name, info in services.metadata.cache.topics.items()} \
        if context.api_version >= 13 else {}
    responses: list[dict[str, Any]] = []
    for result in results:
        if not responses or responses[-1]["topic"] != result.topic:
            responses.append({"topic": result.topic, "topic_id": names_to_ids.get(result.topic), "partitions": []})
        entry: dict[str, Any] = {
            "partition_index": result.partition, "error_code": result.error_code,
            "high_watermark": result.high_watermark, "last_stable_offset": result.last_stable_offset,
            "log_start_offset": result.log_start_offset,
            "aborted_transactions": None if result.aborted_transactions is None else [
                {"producer_id": producer_id, "first_offset": first_offset}
                for producer_id, first_offset in result.aborted_transactions],
            "preferred_read_replica": -1, "records": result.records}
        if result.diverging_end_offset >= 0:
            entry["diverging_epoch"] = {"epoch": result.diverging_epoch, "end_offset": result.diverging_end_offset}
        if result.leader_id >= 0 and result.error_code:
            entry["current_leader"] = {"leader_id": result.leader_id, "leader_epoch": result.leader_epoch}
        responses[-1]["partitions"].append(entry)
    for topic_id, partition in unknown:
        responses.append({"topic_id": topic_id, "partitions": [{
            "partition_index": partition.partition, "error_code": UNKNOWN_TOPIC_ID, "high_watermark": -1,
            "records": b""}]})
    return {"throttle_time": throttle_ms, "error_code": 0, "session_id": 0, "responses": responses}


def _isolation_level(request: Any) -> int:
    """read_committed (1) or read_uncommitted (0); anything else is refused as Kafka does."""
    level = int(getattr(request, "isolation_level", protocol.READ_UNCOMMITTED))
    if level not in (protocol.READ_UNCOMMITTED, protocol.READ_COMMITTED):
        raise InvalidRequestError(f"isolation level {level} is neither 0 (read_uncommitted) nor 1 (read_committed)")
    return level


# -- ListOffsets, OffsetForLeaderEpoch ------------------------------------------------------------
async def list_offsets(context: KafkaRequestContext, request: Any) -> KafkaAnswer:
    queries = [OffsetQuery(topic.name, partition.partition_index, partition.timestamp,
                           getattr(partition, "current_leader_epoch", -1))
               for topic in request.topics for partition in topic.partitions]
    answers = context.services.replicas.list_offsets(queries, _isolation_level(request))
    return {"throttle_time": 0, "topics": _group_by_topic([
        (answer.topic, {"partition_index": answer.partition,
                        "error_code": answer.error.errno if answer.error else 0,
                        "timestamp": answer.timestamp, "offset": answer.offset, "leader_epoch": answer.leader_epoch,
                        "old_style_offsets": [answer.offset] if answer.error is None else []})
        for answer in answers], "name")}


async def offset_for_leader_epoch(context: KafkaRequestContext, request: Any) -> KafkaAnswer:
    queries = [EpochQuery(topic.topic, partition.partition, partition.leader_epoch)
               for topic in request.topics for partition in topic.partitions]
    answers = context.services.replicas.offsets_for_leader_epoch(queries)
    return {"throttle_time": 0, "topics": _group_by_topic([
        (answer.topic, {"partition": answer.partition, "error_code": answer.error.errno if answer.error else 0,
                        "leader_epoch": answer.leader_epoch, "end_offset": answer.end_offset})
        for answer in answers], "topic")}


def _group_by_topic(items: Iterable[tuple[str, dict[str, Any]]], name_field: str) -> list[dict[str, Any]]:
    topics: dict[str, list[dict[str, Any]]] = {}
    for topic, item in items:
        topics.setdefault(topic, []).append(item)
    return [{name_field: topic, "partitions": partitions} for topic, partitions in topics.items()]


# -- InitProducerId, DescribeCluster ----------------------------------------------
async def init_producer_id(context: KafkaRequestContext, request: Any) -> KafkaAnswer:
    """A producer id for an idempotent producer; transactional ids come with transactions."""
    if request.transactional_id is not None:
        raise UnsupportedVersionError("transactional producers are not supported yet")
    answer = await context.services.producer_ids.init_producer_id()
    return {"throttle_time": 0, "error_code": 0, "producer_id": answer.producer_id,
            "producer_epoch": answer.producer_epoch}


async def describe_cluster(context: KafkaRequestContext, request: Any) -> KafkaAnswer:
    if getattr(request, "endpoint_type", 1) != 1:  # 1 = brokers; 2 = controllers (KRaft only)
        return {"error_code": UnsupportedVersionError.errno, "error_message": "only broker endpoints exist here",
                "endpoint_type": request.endpoint_type}
    result = context.services.metadata.describe_cluster()
    return {"throttle_time": 0, "error_code": 0, "error_message": None, "endpoint_type": 1,
            "cluster_id": result.cluster_id, "controller_id": result.controller_id,
            "brokers": _brokers(context, result),
            "cluster_authorized_operations": -2147483648}


HANDLERS: tuple[ApiHandler, ...] = (
    ApiHandler(PRODUCE, 3, 11, produce),
    ApiHandler(FETCH, 4, 13, fetch),
    ApiHandler(LIST_OFFSETS, 1, 7, list_offsets),
    ApiHandler(METADATA, 0, 12, metadata),
    ApiHandler(OFFSET_FOR_LEADER_EPOCH, 2, 4, offset_for_leader_epoch),
    ApiHandler(DESCRIBE_CLUSTER, 0, 1, describe_cluster),
)
