"""The Kafka-protocol half of :mod:`kafkalite.broker.access`: what each API needs, by API key,
and :func:`serve_kafka`, which the connection calls instead of the handler when the broker has an
authorizer (the rules are listed in :mod:`kafkalite.broker.access`).

Concurrency: event-loop only, like every handler.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from kafkalite.broker.access import (
    ALTER,
    ALTER_CONFIGS,
    CLUSTER,
    CLUSTER_ACTION,
    CREATE,
    DELETE,
    DESCRIBE,
    DESCRIBE_CONFIGS,
    GROUP,
    READ,
    TOPIC,
    TOPIC_AUTHORIZATION_FAILED,
    TXN,
    WRITE,
    Caller,
    Need,
    topics_need,
)
from kafkalite.broker.authorizer import Authorizer, denied_error
from kafkalite.broker.kafka import codec
from kafkalite.broker.kafka.context import NO_RESPONSE, Handler, KafkaAnswer, KafkaRequestContext
from kafkalite.errors import BrokerResponseError, OperationNotAttemptedError
from kafkalite.security.acl import CLUSTER_NAME, Operation, ResourceType

#: Kafka's config resource types (DescribeConfigs/AlterConfigs): 2 topic, 4 broker, 8 broker logger.
_CONFIG_TOPIC = 2


@dataclass(frozen=True)
class KafkaAccess:
    """How an allowed request is narrowed, and its answer filtered, for the caller."""

    request: Any
    filter_answer: Callable[[Mapping[str, Any]], Mapping[str, Any]] | None = None


def _config_needs(resources: Iterable[Any], operation: Operation) -> Iterator[Need]:
    for item in resources:
        if int(item.resource_type) == _CONFIG_TOPIC:
            yield operation, TOPIC, item.resource_name
        else:
            yield operation, CLUSTER, CLUSTER_NAME


def _create_topics(caller: Caller, request: Any) -> Iterator[Need]:
    for item in request.topics:
        if not caller.may_create_topic(item.name):
            yield CREATE, TOPIC, item.name


def _offset_fetch(caller: Caller, request: Any) -> Iterator[Need]:
    groups = getattr(request, "groups", None)
    if groups:
        for group in groups:
            yield DESCRIBE, GROUP, group.group_id
            yield from topics_need(DESCRIBE, (topic.name for topic in group.topics or ()))
        return
    yield DESCRIBE, GROUP, request.group_id  # the named topics are split item by item (ITEM_SPLITS)


def _describable_offsets(caller: Caller) -> Callable[[Mapping[str, Any]], Mapping[str, Any]]:
    """An OffsetFetch answer without the topics the caller may not Describe (a fetch of every
    committed offset lists only those, as Kafka's)."""
    def visible(topics: Iterable[Any]) -> list[Any]:
        return [topic for topic in topics if caller.allowed(DESCRIBE, TOPIC, _name_of(topic))]

    def filtered(answer: Mapping[str, Any]) -> Mapping[str, Any]:
        if "groups" in answer:
            return {**answer, "groups": [{**group, "topics": visible(group.get("topics", ()))}
                                         for group in answer["groups"]]}
        return {**answer, "topics": visible(answer.get("topics", ()))}
    return filtered


def _name_of(item: Any) -> str:
    return str(item["name"] if isinstance(item, Mapping) else item.name)


def _find_coordinator(caller: Caller, request: Any) -> Iterator[Need]:
    resource_type = TXN if int(getattr(request, "key_type", 0)) == 1 else GROUP
    keys = getattr(request, "coordinator_keys", None) or [getattr(request, "key", "")]
    return ((DESCRIBE, resource_type, key) for key in keys)


def _init_producer_id(caller: Caller, request: Any) -> Iterator[Need]:
    failed = caller.may_init_producer_id(request.transactional_id)
    if failed is not None:
        yield failed


def _txn(operation: Operation, resource_type: ResourceType, field: str) -> Callable[[Caller, Any], Iterator[Need]]:
    def needs(caller: Caller, request: Any) -> Iterator[Need]:
        yield WRITE, TXN, request.transactional_id
        if field:
            yield operation, resource_type, getattr(request, field)
    return needs


def _add_partitions_to_txn(caller: Caller, request: Any) -> Iterator[Need]:
    yield WRITE, TXN, request.v3_and_below_transactional_id
    yield from topics_need(WRITE, (topic.name for topic in request.v3_and_below_topics))


NeedsOf = Callable[[Caller, Any], Iterable[Need]]

#: What each Kafka API needs as a whole, by API key (APIs not listed need nothing: ApiVersions,
#: Metadata and ListGroups filter instead, DescribeCluster and the SASL handshake are open to all;
#: the resources an API names item by item are in ITEM_SPLITS).
KAFKA_NEEDS: dict[int, NeedsOf] = {
    8: lambda caller, request: [(READ, GROUP, request.group_id)],
    9: _offset_fetch,
    11: lambda caller, request: [(READ, GROUP, request.group_id)],
    12: lambda caller, request: [(READ, GROUP, request.group_id)],
    13: lambda caller, request: [(READ, GROUP, request.group_id)],
    14: lambda caller, request: [(READ, GROUP, request.group_id)],
    22: _init_producer_id,
    24: lambda caller, request: [(WRITE, TXN, request.v3_and_below_transactional_id)],
    25: _txn(READ, GROUP, "group_id"),
    26: _txn(READ, GROUP, ""),
    27: lambda caller, request: [(CLUSTER_ACTION, CLUSTER, CLUSTER_NAME)],
    28: _txn(READ, GROUP, "group_id"),
    29: lambda caller, request: [(DESCRIBE, CLUSTER, CLUSTER_NAME)],
    30: lambda caller, request: [(ALTER, CLUSTER, CLUSTER_NAME)],
    31: lambda caller, request: [(ALTER, CLUSTER, CLUSTER_NAME)],
    43: lambda caller, request: [(ALTER, CLUSTER, CLUSTER_NAME)],
    48: lambda caller, request: [(DESCRIBE_CONFIGS, CLUSTER, CLUSTER_NAME)],  # DescribeClientQuotas
    49: lambda caller, request: [(ALTER_CONFIGS, CLUSTER, CLUSTER_NAME)],  # AlterClientQuotas
    50: lambda caller, request: [(DESCRIBE, CLUSTER, CLUSTER_NAME)],  # DescribeUserScramCredentials
    51: lambda caller, request: [(ALTER, CLUSTER, CLUSTER_NAME)],  # AlterUserScramCredentials
    47: lambda caller, request: [(DELETE, GROUP, request.group_id)],
}


@dataclass(frozen=True)
class ItemSplit:
    """An API whose request names resources item by item, answered as Kafka answers it: the
    items the caller may not use carry their AUTHORIZATION_FAILED code, the others are served.

    ``request_field`` holds the items; ``needs`` says what one item needs; ``answer_field`` is
    the answer's list of per-item results. With ``all_or_nothing`` (AddPartitionsToTxn) nothing
    is served when an item is denied: the allowed items are answered OPERATION_NOT_ATTEMPTED."""

    request_field: str
    needs: Callable[[Caller, Any], Iterable[Need]]
    answer_field: str
    all_or_nothing: bool = False


def _topic_named(operation: Operation, attribute: str = "name") -> Callable[[Caller, Any], Iterable[Need]]:
    return lambda caller, item: [(operation, TOPIC, getattr(item, attribute))]


def _config_resource(operation: Operation) -> Callable[[Caller, Any], Iterable[Need]]:
    return lambda caller, item: _config_needs([item], operation)


def _new_topic(caller: Caller, item: Any) -> Iterable[Need]:
    return [] if caller.may_create_topic(item.name) else [(CREATE, TOPIC, item.name)]


def _deleted_topic(caller: Caller, item: Any) -> Iterable[Need]:
    name = item if isinstance(item, str) else (item.name or caller.topic_name_of(item.topic_id))
    return [(DELETE, TOPIC, name)] if name else []  # an unknown topic id is answered by the handler


def _coordinator_key(request: Any) -> Callable[[Caller, Any], Iterable[Need]]:
    resource_type = TXN if int(getattr(request, "key_type", 0)) == 1 else GROUP
    return lambda caller, key: [(DESCRIBE, resource_type, key)]


#: The APIs answered item by item, by API key (with the version ranges whose item field differs).
ITEM_SPLITS: dict[int, Callable[[Any], ItemSplit | None]] = {
    2: lambda request: ItemSplit("topics", _topic_named(DESCRIBE), "topics"),  # ListOffsets
    8: lambda request: ItemSplit("topics", _topic_named(READ), "topics"),  # OffsetCommit
    9: lambda request: ItemSplit("topics", _topic_named(DESCRIBE), "topics")  # OffsetFetch (one group)
    if getattr(request, "topics", None) else None,
    19: lambda request: ItemSplit("topics", _new_topic, "topics"),  # CreateTopics
    20: lambda request: ItemSplit("topics", _deleted_topic, "responses")  # DeleteTopics v6+ / v0-5
    if getattr(request, "topics", None) else ItemSplit("topic_names", _deleted_topic, "responses"),
    21: lambda request: ItemSplit("topics", _topic_named(DELETE), "topics"),  # DeleteRecords
    23: lambda request: ItemSplit("topics", _topic_named(DESCRIBE, "topic"), "topics"),  # OffsetForLeaderEpoch
    24: lambda request: ItemSplit("v3_and_below_topics", _topic_named(WRITE), "results_by_topic_v3_and_below",
                                  all_or_nothing=True),  # AddPartitionsToTxn
    28: lambda request: ItemSplit("topics", _topic_named(READ), "topics"),  # TxnOffsetCommit
    15: lambda request: ItemSplit("groups", lambda caller, group: [(DESCRIBE, GROUP, group)], "groups"),
    32: lambda request: ItemSplit("resources", _config_resource(DESCRIBE_CONFIGS), "results"),
    33: lambda request: ItemSplit("resources", _config_resource(ALTER_CONFIGS), "responses"),
    37: lambda request: ItemSplit("topics", _topic_named(ALTER), "results"),  # CreatePartitions
    42: lambda request: ItemSplit("groups_names", lambda caller, group: [(DELETE, GROUP, group)], "results"),
    44: lambda request: ItemSplit("resources", _config_resource(ALTER_CONFIGS), "responses"),
    47: lambda request: ItemSplit("topics", _topic_named(READ), "topics"),  # OffsetDelete
    61: lambda request: ItemSplit("topics", _topic_named(READ), "topics"),  # DescribeProducers
    65: lambda request: ItemSplit("transactional_ids", lambda caller, name: [(DESCRIBE, TXN, name)],
                                  "transaction_states"),
    10: lambda request: ItemSplit("coordinator_keys", _coordinator_key(request), "coordinators")
    if getattr(request, "coordinator_keys", None) else None,  # FindCoordinator v4+ (batched)
}

#: FindCoordinator before v4 names one key as a whole.
_SINGLE_KEY_NEEDS: NeedsOf = _find_coordinator

METADATA_KEY, OFFSET_FETCH_KEY, LIST_GROUPS_KEY, LIST_TRANSACTIONS_KEY = 3, 9, 16, 66


def check_kafka(caller: Caller, api_key: int, request: Any) -> KafkaAccess:
    """Authorize what one Kafka-protocol request other than Produce and Fetch needs as a whole
    (see the module docstring); the items of an API in ITEM_SPLITS are :func:`split_items`'s."""
    needs = KAFKA_NEEDS.get(api_key)
    if api_key == FIND_COORDINATOR_KEY and not getattr(request, "coordinator_keys", None):
        needs = _SINGLE_KEY_NEEDS
    if needs is not None:
        caller.require(needs(caller, request))
        return KafkaAccess(request, _describable_offsets(caller) if api_key == OFFSET_FETCH_KEY else None)
    if api_key == METADATA_KEY:
        return _metadata(caller, request)
    if api_key == LIST_GROUPS_KEY:
        return KafkaAccess(request, lambda answer: {**answer, "groups": [
            group for group in answer.get("groups", ()) if caller.allowed(DESCRIBE, GROUP, group["group_id"])]})
    if api_key == LIST_TRANSACTIONS_KEY:
        return KafkaAccess(request, lambda answer: {**answer, "transaction_states": [
            state for state in answer.get("transaction_states", ())
            if caller.allowed(DESCRIBE, TXN, state["transactional_id"])]})
    return KafkaAccess(request)


async def serve_kafka(authorizer: Authorizer, handle: Handler, context: KafkaRequestContext,
                      request: Any) -> KafkaAnswer:
    """Authorize ``request``, then serve it with ``handle`` and filter the answer. Produce and
    Fetch are split as Kafka splits them: the partitions of denied topics are answered
    TOPIC_AUTHORIZATION_FAILED and the others served. A denied acks=0 Produce gets no response."""
    caller = Caller(authorizer, context.principal, context.client_host, lambda topic_id: _topic_name(context, topic_id))
    try:
        if context.api_key == PRODUCE_KEY:
            return await _serve_produce(caller, handle, context, request)
        if context.api_key == FETCH_KEY:
            return await _serve_fetch(caller, handle, context, request)
        access = check_kafka(caller, context.api_key, request)
    except BrokerResponseError as exc:
        if context.api_key == PRODUCE_KEY and getattr(request, "acks", 1) == 0:
            return NO_RESPONSE
        denied = DENIED_ANSWERS.get(context.api_key)
        if denied is None:
            raise  # the connection answers the code on every item of the request
        return denied(request, exc.errno, str(exc))
    make_split = ITEM_SPLITS.get(context.api_key)
    split = make_split(request) if make_split is not None else None
    if split is not None:
        return await _serve_split(caller, handle, context, access, split)
    answer = await handle(context, access.request)
    if access.filter_answer is None or answer is NO_RESPONSE:
        return answer
    return access.filter_answer(answer)


PRODUCE_KEY, FETCH_KEY, FIND_COORDINATOR_KEY = 0, 1, 10


def _first_denied(caller: Caller, needs: Iterable[Need]) -> BrokerResponseError | None:
    for need in needs:
        if not caller.allowed(*need):
            return denied_error(*need)
    return None


async def _serve_split(caller: Caller, handle: Handler, context: KafkaRequestContext, access: KafkaAccess,
                       split: ItemSplit) -> KafkaAnswer:
    """Serve the items the caller may use and answer the others with their AUTHORIZATION_FAILED
    code (Kafka's ``filterByAuthorized``), in the order: served items first, then denied ones."""
    request = access.request
    allowed: list[Any] = []
    denied: list[tuple[Any, BrokerResponseError]] = []
    for item in getattr(request, split.request_field):
        error = _first_denied(caller, split.needs(caller, item))
        if error is None:
            allowed.append(item)
        else:
            denied.append((item, error))
    if not denied:
        answer = await handle(context, request)
        return answer if access.filter_answer is None or answer is NO_RESPONSE else access.filter_answer(answer)
    entries = [_item_answer(context, request, split, item, error.errno, str(error)) for item, error in denied]
    if split.all_or_nothing:
        not_attempted = OperationNotAttemptedError("another item of the request was not authorized")
        entries += [_item_answer(context, request, split, item, not_attempted.errno, str(not_attempted))
                    for item in allowed]
        allowed = []
    if allowed:
        answer = await handle(context, dataclasses.replace(request, **{split.request_field: tuple(allowed)}))
        if access.filter_answer is not None and answer is not NO_RESPONSE:
            answer = access.filter_answer(answer)
    else:  # nothing to serve: the answer's other fields as for an empty request
        answer = codec.error_answer(context.api_key, context.api_version,
                                    dataclasses.replace(request, **{split.request_field: ()}), 0, None)
    return {**answer, split.answer_field: [*answer.get(split.answer_field, ()), *entries]}


def _item_answer(context: KafkaRequestContext, request: Any, split: ItemSplit, item: Any, code: int,
                 message: str) -> Any:
    """The answer's entry for one item carrying ``code`` (the connection's error answer of a
    request naming only that item)."""
    alone = dataclasses.replace(request, **{split.request_field: (item,)})
    denied = DENIED_ANSWERS.get(context.api_key)
    answer = denied(alone, code, message) if denied is not None else \
        codec.error_answer(context.api_key, context.api_version, alone, code, message)
    return answer[split.answer_field][0]


def _topic_name(context: KafkaRequestContext, topic_id: Any) -> str | None:
    if topic_id is None:
        return None
    wanted = topic_id.hex
    for name, info in context.services.metadata.cache.topics.items():
        if info.topic_id == wanted:
            return name
    return None


async def _serve_produce(caller: Caller, handle: Handler, context: KafkaRequestContext, request: Any) -> KafkaAnswer:
    transactional_id = getattr(request, "transactional_id", None)
    if transactional_id:
        caller.require([(WRITE, TXN, transactional_id)])
    allowed = [topic for topic in request.topic_data if caller.allowed(WRITE, TOPIC, topic.name)]
    if len(allowed) == len(request.topic_data):
        return await handle(context, request)
    denied = [{"name": topic.name, "partition_responses": [
        {"index": partition.index, "error_code": TOPIC_AUTHORIZATION_FAILED, "base_offset": -1,
         "log_append_time": -1, "log_start_offset": -1, "error_message": "not authorized to Write the topic"}
        for partition in topic.partition_data]} for topic in request.topic_data if topic not in allowed]
    if not allowed:
        return NO_RESPONSE if request.acks == 0 else {"responses": denied, "throttle_time": 0}
    answer = await handle(context, dataclasses.replace(request, topic_data=tuple(allowed)))
    if answer is NO_RESPONSE:
        return answer
    return {**answer, "responses": [*answer["responses"], *denied]}


async def _serve_fetch(caller: Caller, handle: Handler, context: KafkaRequestContext, request: Any) -> KafkaAnswer:
    replica_id = getattr(request, "replica_id", -1)
    if replica_id is not None and replica_id >= 0:
        caller.require([(CLUSTER_ACTION, CLUSTER, CLUSTER_NAME)])
        return await handle(context, request)
    allowed, denied_topics = [], []
    for topic in request.topics:
        name = getattr(topic, "topic", None) or caller.topic_name_of(getattr(topic, "topic_id", None))
        if name is None or caller.allowed(READ, TOPIC, name):
            allowed.append(topic)  # an unknown topic id is answered UNKNOWN_TOPIC_ID by the handler
        else:
            denied_topics.append((name, topic))
    if not denied_topics:
        return await handle(context, request)
    denied = [{"topic": name, "topic_id": getattr(topic, "topic_id", None), "partitions": [
        {"partition_index": partition.partition, "error_code": TOPIC_AUTHORIZATION_FAILED, "high_watermark": -1,
         "last_stable_offset": -1, "log_start_offset": -1, "aborted_transactions": None,
         "preferred_read_replica": -1, "records": b""} for partition in topic.partitions]}
        for name, topic in denied_topics]
    if not allowed:
        return {"throttle_time": 0, "error_code": 0, "session_id": 0, "responses": denied}
    answer = await handle(context, dataclasses.replace(request, topics=tuple(allowed)))
    return {**answer, "responses": [*answer["responses"], *denied]}


DeniedAnswer = Callable[[Any, int, str], KafkaAnswer]

#: The denial answers of APIs whose items are plain names, which the generic error answer cannot
#: mirror onto the response's items.
def _denied_offset_topics(topics: Any, code: int) -> list[dict[str, Any]]:
    return [{"name": topic.name, "partitions": [
        {"partition_index": number, "committed_offset": -1, "committed_leader_epoch": -1, "metadata": "",
         "error_code": code} for number in topic.partition_indexes]} for topic in topics or ()]


DENIED_ANSWERS: dict[int, DeniedAnswer] = {
    9: lambda request, code, message: {  # OffsetFetch: one group (v0-v7) or several (v8+)
        "groups": [{"group_id": group.group_id, "error_code": code,
                    "topics": _denied_offset_topics(group.topics, code)} for group in request.groups]}
    if getattr(request, "groups", None) is not None else
    {"error_code": code, "topics": _denied_offset_topics(request.topics, code)},
    10: lambda request, code, message: {  # FindCoordinator: one key (v0-v3) or a batch (v4+)
        "error_code": code, "error_message": message, "node_id": -1, "host": "", "port": -1,
        "coordinators": [{"key": key, "node_id": -1, "host": "", "port": -1, "error_code": code,
                          "error_message": message} for key in getattr(request, "coordinator_keys", None) or ()]},
    15: lambda request, code, message: {"groups": [
        {"group_id": group, "error_code": code, "members": []} for group in request.groups]},
    20: lambda request, code, message: {"responses": [
        {"name": topic.name, "topic_id": getattr(topic, "topic_id", None), "error_code": code,
         "error_message": message} for topic in getattr(request, "topics", None) or ()] or [
        {"name": name, "error_code": code, "error_message": message} for name in request.topic_names]},
    24: lambda request, code, message: {"results_by_topic_v3_and_below": [
        {"name": topic.name, "results_by_partition": [{"partition_index": number, "partition_error_code": code}
                                                      for number in topic.partitions]}
        for topic in request.v3_and_below_topics]},
    42: lambda request, code, message: {"results": [
        {"group_id": group, "error_code": code} for group in request.groups_names]},
    65: lambda request, code, message: {"transaction_states": [
        {"error_code": code, "transactional_id": name, "transaction_state": "", "transaction_timeout": 0,
         "transaction_start_time": 0, "producer_id": -1, "producer_epoch": -1, "topics": []}
        for name in request.transactional_ids]},
}


def _metadata(caller: Caller, request: Any) -> KafkaAccess:
    requested = request.topics
    if requested is None or not requested:  # every topic: list only those one may Describe
        return KafkaAccess(request, lambda answer: {**answer, "topics": [
            topic for topic in answer.get("topics", ())
            if topic.get("name") is None or caller.allowed(DESCRIBE, TOPIC, topic["name"])]})
    allowed_items, denied = [], []
    for item in requested:
        name = getattr(item, "name", None)
        if name is not None and not caller.allowed(DESCRIBE, TOPIC, name):
            denied.append(name)
        else:
            allowed_items.append(item)
    auto_create = getattr(request, "allow_auto_topic_creation", True)
    changes: dict[str, Any] = {"topics": tuple(allowed_items)}
    if auto_create and hasattr(request, "allow_auto_topic_creation") and not all(
            caller.may_create_topic(getattr(item, "name", None) or "") for item in allowed_items):
        changes["allow_auto_topic_creation"] = False  # (v0-v3 always auto-create: Describe is needed)
    if not allowed_items:  # an empty list would mean "every topic" to the handler
        return KafkaAccess(request, lambda answer: {**answer, "topics": _denied_topics(denied)})

    def answered(answer: Mapping[str, Any]) -> Mapping[str, Any]:
        topics: list[Any] = []
        refused = list(denied)
        for topic in answer.get("topics", ()):  # a topic asked for by id is checked once named
            name = topic.get("name")
            if name is None or caller.allowed(DESCRIBE, TOPIC, name):
                topics.append(topic)
            else:
                refused.append(name)
        return {**answer, "topics": [*topics, *_denied_topics(refused)]}

    return KafkaAccess(dataclasses.replace(request, **changes), answered)


def _denied_topics(names: list[str]) -> list[dict[str, Any]]:
    return [{"error_code": TOPIC_AUTHORIZATION_FAILED, "name": name, "topic_id": None, "is_internal": False,
             "partitions": []} for name in names]


