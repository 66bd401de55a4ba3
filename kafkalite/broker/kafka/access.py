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
from kafkalite.broker.authorizer import Authorizer
from kafkalite.broker.kafka.context import NO_RESPONSE, Handler, KafkaAnswer, KafkaRequestContext
from kafkalite.errors import BrokerResponseError
from kafkalite.security.acl import CLUSTER_NAME, Operation, ResourceType
from kafkalite.security.principal import KafkaPrincipal

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


def _produce(caller: Caller, request: Any) -> Iterator[Need]:
    transactional_id = getattr(request, "transactional_id", None)
    if transactional_id:
        yield WRITE, TXN, transactional_id
    yield from topics_need(WRITE, (topic.name for topic in request.topic_data))


def _fetch(caller: Caller, request: Any) -> Iterator[Need]:
    replica_id = getattr(request, "replica_id", -1)
    if replica_id is not None and replica_id >= 0:
        yield CLUSTER_ACTION, CLUSTER, CLUSTER_NAME
        return
    for topic in request.topics:
        name = getattr(topic, "topic", None)
        if name is not None:
            yield READ, TOPIC, name


def _offset_fetch(caller: Caller, request: Any) -> Iterator[Need]:
    groups = getattr(request, "groups", None)
    if groups:
        for group in groups:
            yield DESCRIBE, GROUP, group.group_id
            yield from topics_need(DESCRIBE, (topic.name for topic in group.topics or ()))
        return
    yield DESCRIBE, GROUP, request.group_id
    yield from topics_need(DESCRIBE, (topic.name for topic in request.topics or ()))


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

#: What each Kafka API needs, by API key (APIs not listed need nothing: ApiVersions, Metadata
#: and ListGroups filter instead, DescribeCluster and the SASL handshake are open to all).
KAFKA_NEEDS: dict[int, NeedsOf] = {
    0: _produce,
    1: _fetch,
    2: lambda caller, request: topics_need(DESCRIBE, (topic.name for topic in request.topics)),
    8: lambda caller, request: [(READ, GROUP, request.group_id),
                                *topics_need(READ, (topic.name for topic in request.topics))],
    9: _offset_fetch,
    10: _find_coordinator,
    11: lambda caller, request: [(READ, GROUP, request.group_id)],
    12: lambda caller, request: [(READ, GROUP, request.group_id)],
    13: lambda caller, request: [(READ, GROUP, request.group_id)],
    14: lambda caller, request: [(READ, GROUP, request.group_id)],
    15: lambda caller, request: ((DESCRIBE, GROUP, group) for group in request.groups),
    19: _create_topics,
    20: lambda caller, request: topics_need(DELETE, [topic.name for topic in getattr(request, "topics", None) or ()
                                                if topic.name] or list(getattr(request, "topic_names", ()))),
    21: lambda caller, request: topics_need(DELETE, (topic.name for topic in request.topics)),
    22: _init_producer_id,
    23: lambda caller, request: topics_need(DESCRIBE, (topic.topic for topic in request.topics)),
    24: _add_partitions_to_txn,
    25: _txn(READ, GROUP, "group_id"),
    26: _txn(READ, GROUP, ""),
    27: lambda caller, request: [(CLUSTER_ACTION, CLUSTER, CLUSTER_NAME)],
    28: _txn(READ, GROUP, "group_id"),
    29: lambda caller, request: [(DESCRIBE, CLUSTER, CLUSTER_NAME)],
    30: lambda caller, request: [(ALTER, CLUSTER, CLUSTER_NAME)],
    31: lambda caller, request: [(ALTER, CLUSTER, CLUSTER_NAME)],
    32: lambda caller, request: _config_needs(request.resources, DESCRIBE_CONFIGS),
    33: lambda caller, request: _config_needs(request.resources, ALTER_CONFIGS),
    37: lambda caller, request: topics_need(ALTER, (topic.name for topic in request.topics)),
    42: lambda caller, request: ((DELETE, GROUP, group) for group in request.groups_names),
    43: lambda caller, request: [(ALTER, CLUSTER, CLUSTER_NAME)],
    44: lambda caller, request: _config_needs(request.resources, ALTER_CONFIGS),
    47: lambda caller, request: [(DELETE, GROUP, request.group_id),
                                 *topics_need(READ, (topic.name for topic in request.topics))],
    61: lambda caller, request: topics_need(READ, (topic.name for topic in request.topics)),
    65: lambda caller, request: ((DESCRIBE, TXN, name) for name in request.transactional_ids),
}

METADATA_KEY, LIST_GROUPS_KEY, LIST_TRANSACTIONS_KEY = 3, 16, 66


def check_kafka(authorizer: Authorizer, principal: KafkaPrincipal, host: str, api_key: int,
                request: Any) -> KafkaAccess:
    """Authorize one Kafka-protocol request (see the module docstring)."""
    caller = Caller(authorizer, principal, host)
    needs = KAFKA_NEEDS.get(api_key)
    if needs is not None:
        caller.require(needs(caller, request))
        return KafkaAccess(request)
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
    """Authorize ``request`` (:func:`check_kafka`), then serve it with ``handle`` and filter the
    answer. A denied acks=0 Produce gets no response, like any acks=0 Produce."""
    try:
        access = check_kafka(authorizer, context.principal, context.client_host, context.api_key, request)
    except BrokerResponseError:
        if context.api_key == 0 and getattr(request, "acks", 1) == 0:
            return NO_RESPONSE
        raise
    answer = await handle(context, access.request)
    if access.filter_answer is None or answer is NO_RESPONSE:
        return answer
    return access.filter_answer(answer)


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
    changes: dict[str, Any] = {"topics": allowed_items}
    if auto_create and hasattr(request, "allow_auto_topic_creation") and not all(
            caller.may_create_topic(getattr(item, "name", None) or "") for item in allowed_items):
        changes["allow_auto_topic_creation"] = False  # (v0-v3 always auto-create: Describe is needed)
    if not allowed_items:  # an empty list would mean "every topic" to the handler
        return KafkaAccess(request, lambda answer: {**answer, "topics": _denied_topics(denied)})
    narrowed = dataclasses.replace(request, **changes)
    return KafkaAccess(narrowed, lambda answer: {**answer, "topics": [
        *answer.get("topics", ()), *_denied_topics(denied)]} if denied else answer)


def _denied_topics(names: list[str]) -> list[dict[str, Any]]:
    return [{"error_code": TOPIC_AUTHORIZATION_FAILED, "name": name, "topic_id": None, "is_internal": False,
             "partitions": []} for name in names]


