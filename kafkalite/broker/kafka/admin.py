"""The admin APIs over the Kafka protocol: CreateTopics, DeleteTopics, CreatePartitions,
DescribeConfigs, AlterConfigs, IncrementalAlterConfigs, ElectLeaders, DescribeProducers and
DeleteRecords.

Each handler reads the kio request, builds the typed items of
:class:`~kafkalite.broker.services.AdminRequests` (an item that cannot be built is a
:class:`~kafkalite.broker.services.Rejected` answered in its place), calls that service once and
answers with kio field names (see :mod:`kafkalite.broker.kafka.context`). Topics, partitions and
configs therefore follow the same rules and errors as over HTTP.

Kafka's config resource types map onto kafkalite's: TOPIC (2) is ``topic``, BROKER (4) is
``broker``; any other type is answered INVALID_REQUEST for that resource. AlterConfigs keeps
Kafka's meaning (the given set replaces a topic's dynamic configs, so the ones it leaves out are
deleted); IncrementalAlterConfigs supports SET and DELETE (APPEND / SUBTRACT answer
INVALID_REQUEST: kafkalite has no list-valued topic config worth appending to).

Concurrency: event-loop only, like every handler.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from kafkalite import errors
from kafkalite.broker.admin import NewTopic, check_partition_count
from kafkalite.broker.kafka.context import ApiHandler, KafkaAnswer, KafkaRequestContext
from kafkalite.broker.services import (
    ConfigChange,
    ConfigResource,
    DeleteRecordsQuery,
    ItemOutcome,
    NewPartitions,
    Rejected,
)
from kafkalite.errors import BrokerResponseError, InvalidPartitionsError, InvalidRequestError, KafkaliteError

CREATE_TOPICS, DELETE_TOPICS, DESCRIBE_CONFIGS, ALTER_CONFIGS = 19, 20, 32, 33
CREATE_PARTITIONS, ELECT_LEADERS, INCREMENTAL_ALTER_CONFIGS, DESCRIBE_PRODUCERS, DELETE_RECORDS = 37, 43, 44, 61, 21

#: Kafka's config resource types and kafkalite's names for them.
RESOURCE_TYPES = {2: "topic", 4: "broker"}
#: Kafka's ConfigSource codes by kafkalite's source names.
CONFIG_SOURCES = {"DYNAMIC_TOPIC_CONFIG": 1, "DYNAMIC_BROKER_CONFIG": 2, "DYNAMIC_DEFAULT_BROKER_CONFIG": 3,
                  "STATIC_BROKER_CONFIG": 4, "DEFAULT_CONFIG": 5}
#: IncrementalAlterConfigs operations.
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
#: Kafka's UNKNOWN_TOPIC_ID, which kafkalite's error tree does not name (yet).
UNKNOWN_TOPIC_ID = 100
#: ElectLeaders' election types.
PREFERRED_ELECTION = 0


def _milliseconds(value: Any) -> int:
    return int(value.total_seconds() * 1000) if isinstance(value, timedelta) else int(value)


def error_message(error: BrokerResponseError) -> str:
    """An error's detail for a response's ``error_message`` (Kafka's name is in the code)."""
    return str(error.args[0]) if error.args else error.description


def _outcome(error: BrokerResponseError | None) -> dict[str, Any]:
    return {"error_code": error.errno if error is not None else 0,
            "error_message": error_message(error) if error is not None else None}


def _response_error(exc: KafkaliteError) -> BrokerResponseError:
    return exc if isinstance(exc, BrokerResponseError) else errors.UnknownServerError(str(exc))


def _topic_id(context: KafkaRequestContext, name: str) -> uuid.UUID | None:
    info = context.services.metadata.cache.topics.get(name)
    return uuid.UUID(hex=info.topic_id) if info is not None and info.topic_id else None


# -- topics ---------------------------------------------------------------------------------------
def _new_topic(item: Any) -> NewTopic | Rejected:
    try:
        assignment = None
        if item.assignments:
            assignment = {entry.partition_index: list(entry.broker_ids) for entry in item.assignments}
            check_partition_count(len(assignment))
        configs: dict[str, str] = {}
        for config in item.configs:
            if config.value is None:
                raise errors.InvalidConfigurationError(f"config {config.name} of topic {item.name} has no value")
            configs[config.name] = config.value
        return NewTopic(item.name, item.num_partitions, item.replication_factor, assignment, configs)
    except KafkaliteError as exc:
        return Rejected(item.name, _response_error(exc))


def _config_entries(entries: Sequence[dict[str, Any]], names: Sequence[str] | None = None) -> list[dict[str, Any]]:
    return [{"name": entry["name"], "value": entry["value"], "read_only": entry.get("read_only", False),
             "is_default": entry.get("is_default", False),
             "config_source": CONFIG_SOURCES.get(str(entry.get("source")), 0), "is_sensitive": False,
             "synonyms": [], "config_type": 0, "documentation": None}
            for entry in entries if names is None or entry["name"] in names]


async def create_topics(context: KafkaRequestContext, request: Any) -> KafkaAnswer:
    """Create topics (or validate only); each answered with its partition count, replication
    factor, topic id and configs, or its error (counts -1 then, as in Kafka)."""
    topics = [_new_topic(item) for item in request.topics]
    answers = await context.services.admin.create_topics(topics, _milliseconds(request.timeout),
                                                         bool(getattr(request, "validate_only", False)))
    results = []
    for answer in answers:
        if answer.error is not None or answer.result is None:
            results.append({"name": answer.name, **_outcome(answer.error), "num_partitions": -1,
                            "replication_factor": -1, "configs": None})
            continue
        result: dict[str, Any] = {"name": answer.name, **_outcome(None), "num_partitions": len(answer.result),
                                  "replication_factor": len(next(iter(answer.result.values()), [])),
                                  "topic_id": _topic_id(context, answer.name), "configs": []}
        try:
            result["configs"] = _config_entries(context.services.admin.admin.describe_topic_configs(answer.name))
        except BrokerResponseError:
            pass  # validate_only: the topic does not exist, so its configs are not listed
        results.append(result)
    return {"topics": results}


async def delete_topics(context: KafkaRequestContext, request: Any) -> KafkaAnswer:
    """Delete topics named by name (v1–v5) or by name or topic id (v6; an unknown id is
    answered UNKNOWN_TOPIC_ID in its place)."""
    wanted: list[tuple[str | None, uuid.UUID | None]] = []
    if context.api_version >= 6:
        by_id = {info.topic_id: name for name, info in context.services.metadata.cache.topics.items()}
        for item in request.topics:
            name = item.name
            if name is None and item.topic_id is not None:
                name = by_id.get(item.topic_id.hex)
            wanted.append((name, item.topic_id))
    else:
        wanted = [(name, _topic_id(context, name)) for name in request.topic_names]
    names = [name for name, _ in wanted if name is not None]
    answers = iter(await context.services.admin.delete_topics(names, _milliseconds(request.timeout)))
    responses = []
    for name, topic_id in wanted:
        if name is None:
            responses.append({"name": None, "topic_id": topic_id, "error_code": UNKNOWN_TOPIC_ID,
                              "error_message": f"no topic has id {topic_id}"})
            continue
        answer = next(answers)
        responses.append({"name": answer.name, "topic_id": topic_id or _topic_id(context, name),
                          **_outcome(answer.error)})
    return {"responses": responses}


async def create_partitions(context: KafkaRequestContext, request: Any) -> KafkaAnswer:
    """Add partitions to topics. ``validate_only`` checks the topic and the new count only."""
    items: list[NewPartitions | Rejected] = []
    for item in request.topics:
        assignment = [list(entry.broker_ids) for entry in item.assignments] if item.assignments else None
        items.append(NewPartitions(item.name, item.count, assignment))
    if request.validate_only:
        return {"results": [{"name": item.topic, **_outcome(_validate_partitions(context, item))}
                            for item in items if isinstance(item, NewPartitions)]}
    answers = await context.services.admin.create_partitions(items, _milliseconds(request.timeout))
    return {"results": [{"name": answer.name, **_outcome(answer.error)} for answer in answers]}


def _validate_partitions(context: KafkaRequestContext, item: NewPartitions) -> BrokerResponseError | None:
    info = context.services.metadata.cache.topics.get(item.topic)
    if info is None:
        return errors.UnknownTopicOrPartitionError(f"topic '{item.topic}' does not exist")
    if item.count <= len(info.partitions):
        return InvalidPartitionsError(f"topic {item.topic} has {len(info.partitions)} partitions; "
                                      f"the new count must be larger, not {item.count}")
    try:
        check_partition_count(item.count)
    except BrokerResponseError as exc:
        return exc
    return None


# -- configs --------------------------------------------------------------------------------------
def _resource_type(code: int) -> str:
    """kafkalite's name of a Kafka resource type (an unknown one is passed on as its number, which
    the service answers with INVALID_REQUEST)."""
    return RESOURCE_TYPES.get(code, str(code))


async def describe_configs(context: KafkaRequestContext, request: Any) -> KafkaAnswer:
    resources = [ConfigResource(_resource_type(item.resource_type), item.resource_name) for item in request.resources]
    answers = await context.services.admin.describe_configs(resources)
    return {"results": [{
        "resource_type": item.resource_type, "resource_name": item.resource_name, **_outcome(answer.error),
        "configs": _config_entries(answer.result or [], list(item.configuration_keys)
                                   if item.configuration_keys is not None else None)}
        for item, answer in zip(request.resources, answers, strict=True)]}


def _altered(request: Any, answers: list[ItemOutcome[None]]) -> KafkaAnswer:
    return {"responses": [{"resource_type": item.resource_type, "resource_name": item.resource_name,
                           **_outcome(answer.error)} for item, answer in zip(request.resources, answers, strict=True)]}


async def alter_configs(context: KafkaRequestContext, request: Any) -> KafkaAnswer:
    """Replace resources' dynamic configs: for a topic, the dynamic configs the request leaves
    out are deleted (Kafka's AlterConfigs is not incremental)."""
    changes: list[ConfigChange | Rejected] = []
    topics = context.services.metadata.cache.topics
    for item in request.resources:
        kind = _resource_type(item.resource_type)
        values: dict[str, str] = {}
        delete: list[str] = []
        for config in item.configs:
            if config.value is None:
                delete.append(config.name)
            else:
                values[config.name] = config.value
        if kind == "topic" and item.resource_name in topics:
            delete.extend(name for name in topics[item.resource_name].configs if name not in values)
        changes.append(ConfigChange(kind, item.resource_name, values, delete))
    return _altered(request, await context.services.admin.alter_configs(changes, bool(request.validate_only)))


def _incremental_change(item: Any) -> ConfigChange | Rejected:
    kind = _resource_type(item.resource_type)
    values: dict[str, str] = {}
    delete: list[str] = []
    for config in item.configs:
        if config.config_operation == SET and config.value is not None:
            values[config.name] = config.value
        elif config.config_operation == DELETE:
            delete.append(config.name)
        else:
            return Rejected(item.resource_name, InvalidRequestError(
                f"config {config.name}: operation {config.config_operation} is not supported "
                f"(SET with a value and DELETE are)"))
    return ConfigChange(kind, item.resource_name, values, delete)


async def incremental_alter_configs(context: KafkaRequestContext, request: Any) -> KafkaAnswer:
    changes = [_incremental_change(item) for item in request.resources]
    return _altered(request, await context.services.admin.alter_configs(changes, bool(request.validate_only)))


# -- leaders --------------------------------------------------------------------------------------
async def elect_leaders(context: KafkaRequestContext, request: Any) -> KafkaAnswer:
    """Preferred leader elections (every partition when ``topic_partitions`` is null); unclean
    elections (type 1) are refused with INVALID_REQUEST."""
    if int(getattr(request, "election_type", PREFERRED_ELECTION)) != PREFERRED_ELECTION:
        return {"error_code": InvalidRequestError.errno, "replica_election_results": []}
    partitions = None if request.topic_partitions is None else [
        (item.topic, number) for item in request.topic_partitions for number in item.partitions]
    outcome = await context.services.controller.elect_preferred_leaders(partitions)
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for (topic, number), result in sorted(outcome.items()):
        error = None if result == "NONE" else errors.for_name(result)(f"{topic}-{number}: {result}")
        by_topic.setdefault(topic, []).append({"partition_id": number, **_outcome(error)})
    return {"error_code": 0, "replica_election_results": [{"topic": topic, "partition_result": results}
                                                          for topic, results in by_topic.items()]}


async def describe_producers(context: KafkaRequestContext, request: Any) -> KafkaAnswer:
    """The producers of partitions this broker leads, with the epoch of the coordinator that
    wrote their last marker and the first offset of their open transaction (-1: none)."""
    wanted = [(topic.name, number) for topic in request.topics for number in topic.partition_indexes]
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for answer in context.services.replicas.describe_producers(wanted):
        by_topic.setdefault(answer.topic, []).append({
            "partition_index": answer.partition, **_outcome(answer.error),
            "active_producers": [{"producer_id": producer.producer_id, "producer_epoch": producer.producer_epoch,
                                  "last_sequence": producer.last_sequence,
                                  "last_timestamp": producer.last_timestamp,
                                  "coordinator_epoch": producer.coordinator_epoch,
                                  "current_txn_start_offset": producer.current_txn_start_offset}
                                 for producer in answer.producers]})
    return {"topics": [{"name": name, "partitions": partitions} for name, partitions in by_topic.items()]}


# -- records --------------------------------------------------------------------------------------
async def delete_records(context: KafkaRequestContext, request: Any) -> KafkaAnswer:
    """Move partitions' log start offsets (sent by clients to each partition's leader; -1 means
    the high watermark); each partition answers its new low watermark or its error."""
    queries = [DeleteRecordsQuery(topic.name, item.partition_index, item.offset)
               for topic in request.topics for item in topic.partitions]
    answers = await context.services.replicas.delete_records(queries, _milliseconds(request.timeout))
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for answer in answers:
        by_topic.setdefault(answer.topic, []).append({
            "partition_index": answer.partition, "low_watermark": answer.low_watermark,
            "error_code": answer.error.errno if answer.error is not None else 0})
    return {"topics": [{"name": name, "partitions": partitions} for name, partitions in by_topic.items()]}


HANDLERS: tuple[ApiHandler, ...] = (
    ApiHandler(CREATE_TOPICS, 2, 7, create_topics),
    ApiHandler(DELETE_TOPICS, 1, 6, delete_topics),
    ApiHandler(CREATE_PARTITIONS, 0, 3, create_partitions),
    ApiHandler(DESCRIBE_CONFIGS, 1, 4, describe_configs),
    ApiHandler(ALTER_CONFIGS, 0, 2, alter_configs),
    ApiHandler(INCREMENTAL_ALTER_CONFIGS, 0, 1, incremental_alter_configs),
    ApiHandler(ELECT_LEADERS, 0, 2, elect_leaders),
    ApiHandler(DESCRIBE_PRODUCERS, 0, 0, describe_producers),
    ApiHandler(DELETE_RECORDS, 0, 2, delete_records),
)
