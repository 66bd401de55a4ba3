"""What each request needs from the authorizer, with Kafka's rules (its ``KafkaApis``), for both
front ends.

The Kafka front end (:mod:`kafkalite.broker.kafka.access`) authorizes each request before its
handler, only when ``BrokerServices.authorizer`` is set (so a broker without
``authorizer.class.name`` pays one attribute test per request). What a request needs as a whole
(its group, its transactional id, the cluster) fails the request with its AUTHORIZATION_FAILED
error when denied (the connection answers it on every item); the resources a request names item
by item (topics, config resources, groups, transactional ids, coordinator keys) are split as
Kafka splits them: the denied items carry their AUTHORIZATION_FAILED code and the others are
served (AddPartitionsToTxn serves none then: the others are OPERATION_NOT_ATTEMPTED). Metadata,
ListGroups, ListTransactions and an OffsetFetch of every committed offset are filtered instead,
as Kafka filters them (topics one may not Describe are left out of a full listing, answered
TOPIC_AUTHORIZATION_FAILED when named, and auto-created only with Create on the Cluster or the
topic).

The HTTP front end calls :func:`check_http` from a middleware installed only with an authorizer:
it reads the route's body (aiohttp keeps it for the handler) and asks the same questions.

Rules (resource, operation): Produce: Topic Write (and TransactionalId Write when transactional);
Fetch: Topic Read, a follower's fetch Cluster ClusterAction; ListOffsets, OffsetForLeaderEpoch:
Topic Describe; OffsetCommit: Group Read + Topic Read; OffsetFetch: Group Describe + Topic
Describe; FindCoordinator: Group / TransactionalId Describe; Join/Sync/Heartbeat/LeaveGroup: Group
Read; DescribeGroups: Group Describe; DeleteGroups: Group Delete; OffsetDelete: Group Delete +
Topic Read; CreateTopics: Cluster or Topic Create; DeleteTopics, DeleteRecords: Topic Delete;
CreatePartitions: Topic Alter; DescribeConfigs / AlterConfigs / IncrementalAlterConfigs:
DescribeConfigs / AlterConfigs on the Topic or the Cluster (broker resources); ElectLeaders,
partition reassignments: Cluster Alter (listing them: Cluster Describe); InitProducerId:
TransactionalId Write, or without one Cluster IdempotentWrite or Write on some topic;
AddPartitionsToTxn: TransactionalId Write + Topic Write; AddOffsetsToTxn: TransactionalId Write + Group Read;
TxnOffsetCommit: TransactionalId Write + Group Read + Topic Read; EndTxn: TransactionalId Write; DescribeTransactions:
TransactionalId Describe; DescribeProducers: Topic Read; WriteTxnMarkers, controlled shutdown:
Cluster ClusterAction; CreateAcls / DeleteAcls: Cluster Alter; DescribeAcls: Cluster Describe.

Concurrency: pure functions over one request, run on the event loop.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from aiohttp import web

from kafkalite import protocol
from kafkalite.broker import acl_http, http_codec
from kafkalite.broker.authorizer import Authorizer, denied_error
from kafkalite.errors import InvalidRequestError
from kafkalite.security.acl import CLUSTER_NAME, Operation, ResourceType
from kafkalite.security.principal import FORWARDED_PRINCIPAL_HEADER, KafkaPrincipal, served_principal

TOPIC, GROUP, CLUSTER, TXN = (ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER,
                              ResourceType.TRANSACTIONAL_ID)
READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE = (Operation.READ, Operation.WRITE, Operation.CREATE, Operation.DELETE,
                                                Operation.ALTER, Operation.DESCRIBE)
CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE = (
    Operation.CLUSTER_ACTION, Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS, Operation.IDEMPOTENT_WRITE)

Need = tuple[Operation, ResourceType, str]
"""One thing a request needs: an operation on a resource."""

#: A topic-authorization failure a Metadata answer carries for a named topic one may not Describe.
TOPIC_AUTHORIZATION_FAILED = 29


@dataclass(frozen=True)
class Caller:
    """Who asks (principal and host) and the authorizer that decides."""

    authorizer: Authorizer
    principal: KafkaPrincipal
    host: str
    #: The name of a topic id (Kafka requests may name topics by id); None when unknown.
    topic_name_of: Callable[[Any], str | None] = lambda topic_id: None

    def allowed(self, operation: Operation, resource_type: ResourceType, name: str = CLUSTER_NAME) -> bool:
        return self.authorizer.authorize(self.principal, self.host, operation, resource_type, name)

    def require(self, needs: Iterable[Need]) -> None:
        """Raise the AUTHORIZATION_FAILED error of the first need that is denied."""
        checked: set[Need] = set()
        for need in needs:
            if need not in checked:
                checked.add(need)
                if not self.allowed(*need):
                    raise denied_error(*need)

    def may_create_topic(self, topic: str) -> bool:
        return self.allowed(CREATE, CLUSTER) or self.allowed(CREATE, TOPIC, topic)

    def may_init_producer_id(self, transactional_id: str | None) -> Need | None:
        """None when allowed; else the need that failed (Kafka's InitProducerId rule)."""
        if transactional_id:
            return None if self.allowed(WRITE, TXN, transactional_id) else (WRITE, TXN, transactional_id)
        if self.allowed(IDEMPOTENT_WRITE, CLUSTER) or \
                self.authorizer.authorize_any(self.principal, self.host, WRITE, TOPIC):
            return None
        return IDEMPOTENT_WRITE, CLUSTER, CLUSTER_NAME


def topics_need(needed: Operation, names: Iterable[str]) -> Iterator[Need]:
    return ((needed, TOPIC, name) for name in names)


# --- HTTP ------------------------------------------------------------------------------------------
# The bodies are read with the handlers' own decoders, so a body they accept names exactly the
# resources checked here; one they refuse is passed on for them to answer INVALID_REQUEST.

HttpNeeds = Callable[[Caller, bytes, Mapping[str, str]], Iterable[Need]]


def _json(body: bytes) -> dict[str, Any]:
    return protocol.parse_json(body, protocol.MAX_JSON_BODY_BYTES)


def _http_configs(operation: Operation) -> HttpNeeds:
    def needs(caller: Caller, body: bytes, path: Mapping[str, str]) -> Iterator[Need]:
        for resource in http_codec.decode_config_resources(_json(body)):
            if resource.type.lower() == "topic":
                yield operation, TOPIC, resource.name
            else:
                yield operation, CLUSTER, CLUSTER_NAME
    return needs


def _http_create_topics(caller: Caller, body: bytes, path: Mapping[str, str]) -> Iterator[Need]:
    for topic in http_codec.decode_new_topics(_json(body)):
        if not caller.may_create_topic(topic.name):
            yield CREATE, TOPIC, topic.name


def _http_group(operation: Operation, decode: Callable[[dict[str, Any]], Any]) -> HttpNeeds:
    return lambda caller, body, path: [(operation, GROUP, decode(_json(body)).group_id)]


def _http_offset_commit(caller: Caller, body: bytes, path: Mapping[str, str]) -> Iterator[Need]:
    request = http_codec.decode_offset_commit(_json(body))
    yield READ, GROUP, request.group_id
    yield from topics_need(READ, {partition.topic for partition in request.partitions})


def _http_offset_fetch(caller: Caller, body: bytes, path: Mapping[str, str]) -> Iterator[Need]:
    request = http_codec.decode_offset_fetch(_json(body))
    yield DESCRIBE, GROUP, request.group_id
    yield from topics_need(DESCRIBE, (topic for topic, _ in request.topics or ()))


def _http_txn(extra: Callable[[dict[str, Any]], Iterable[Need]] | None = None) -> HttpNeeds:
    def needs(caller: Caller, body: bytes, path: Mapping[str, str]) -> Iterator[Need]:
        document = _json(body)
        yield WRITE, TXN, protocol.require(document, "transactional_id", str)
        if extra is not None:
            yield from extra(document)
    return needs


def _txn_topics(body: dict[str, Any]) -> Iterator[Need]:
    return topics_need(WRITE, (protocol.require(topic, "name", str)
                               for topic in protocol.require_objects(body, "topics")))


def _txn_group(body: dict[str, Any]) -> list[Need]:
    return [(READ, GROUP, protocol.require(body, "group_id", str))]


def _txn_offsets(body: dict[str, Any]) -> list[Need]:
    """TxnOffsetCommit: Read on the group and on every topic whose offsets it commits."""
    return [*_txn_group(body), *topics_need(READ, {protocol.require(topic, "name", str)
                                                   for topic in protocol.require_objects(body, "topics")})]


def _http_init_producer_id(caller: Caller, body: bytes, path: Mapping[str, str]) -> list[Need]:
    transactional_id = protocol.require(_json(body), "transactional_id", str, None) if body.strip() else None
    failed = caller.may_init_producer_id(transactional_id)
    return [] if failed is None else [failed]


def _cluster(operation: Operation) -> HttpNeeds:
    return lambda caller, body, path: [(operation, CLUSTER, CLUSTER_NAME)]


def _partition_topics(operation: Operation) -> HttpNeeds:
    return lambda caller, body, path: topics_need(operation, {
        protocol.require(item, "topic", str) for item in protocol.require_objects(_json(body), "partitions")})


#: What each HTTP route needs, by its canonical path (routes not listed need nothing).
HTTP_NEEDS: dict[str, HttpNeeds] = {
    protocol.TOPIC_RECORDS: lambda caller, body, path: [(WRITE, TOPIC, path.get("topic", ""))],
    protocol.PARTITION_RECORDS: lambda caller, body, path: [(READ, TOPIC, path.get("topic", ""))],
    protocol.LIST_OFFSETS: _partition_topics(DESCRIBE),
    protocol.OFFSETS_FOR_LEADER_EPOCH: _partition_topics(DESCRIBE),
    protocol.DELETE_RECORDS: _partition_topics(DELETE),
    protocol.DESCRIBE_PRODUCERS: _partition_topics(READ),
    protocol.INIT_PRODUCER_ID: _http_init_producer_id,
    protocol.WRITE_TXN_MARKERS: _cluster(CLUSTER_ACTION),
    # users/clients config entities (SCRAM credentials, quotas): Kafka's DescribeConfigs /
    # AlterConfigs on the cluster, as for its client-quota and SCRAM-credential APIs
    protocol.DESCRIBE_ENTITY_CONFIGS: _cluster(DESCRIBE_CONFIGS),
    protocol.ALTER_ENTITY_CONFIGS: _cluster(ALTER_CONFIGS),
    protocol.CREATE_TOPICS: _http_create_topics,
    protocol.DELETE_TOPICS: lambda caller, body, path: topics_need(
        DELETE, protocol.require_list_of(_json(body), "topics", str)),
    protocol.CREATE_PARTITIONS: lambda caller, body, path: topics_need(
        ALTER, (item.topic if hasattr(item, "topic") else item.name
                for item in http_codec.decode_new_partitions(_json(body)))),
    protocol.DESCRIBE_CONFIGS: _http_configs(DESCRIBE_CONFIGS),
    protocol.ALTER_CONFIGS: _http_configs(ALTER_CONFIGS),
    protocol.ELECT_LEADERS: _cluster(ALTER),
    protocol.CONTROLLED_SHUTDOWN: _cluster(CLUSTER_ACTION),
    protocol.ALTER_PARTITION_REASSIGNMENTS: _cluster(ALTER),
    protocol.LIST_PARTITION_REASSIGNMENTS: _cluster(DESCRIBE),
    protocol.FIND_COORDINATOR: lambda caller, body, path: [
        (DESCRIBE, TXN if request.key_type == 1 else GROUP, request.key)
        for request in [http_codec.decode_find_coordinator(_json(body))]],
    protocol.JOIN_GROUP: _http_group(READ, lambda body: http_codec.decode_join_group(body, "")),
    protocol.SYNC_GROUP: _http_group(READ, http_codec.decode_sync_group),
    protocol.HEARTBEAT: _http_group(READ, http_codec.decode_heartbeat),
    protocol.LEAVE_GROUP: _http_group(READ, http_codec.decode_leave_group),
    protocol.OFFSET_COMMIT: _http_offset_commit,
    protocol.OFFSET_FETCH: _http_offset_fetch,
    protocol.DESCRIBE_GROUPS: lambda caller, body, path: (
        (DESCRIBE, GROUP, group) for group in http_codec.decode_group_ids(_json(body))),
    protocol.DELETE_GROUPS: lambda caller, body, path: (
        (DELETE, GROUP, group) for group in http_codec.decode_group_ids(_json(body))),
    protocol.ADD_PARTITIONS_TO_TXN: _http_txn(_txn_topics),
    protocol.ADD_OFFSETS_TO_TXN: _http_txn(_txn_group),
    protocol.END_TXN: _http_txn(),
    protocol.TXN_OFFSET_COMMIT: _http_txn(_txn_offsets),
    acl_http.CREATE_ACLS: _cluster(ALTER),
    acl_http.DELETE_ACLS: _cluster(ALTER),
    acl_http.DESCRIBE_ACLS: _cluster(DESCRIBE),
    protocol.DESCRIBE_TRANSACTIONS: lambda caller, body, path: (
        (DESCRIBE, TXN, name) for name in protocol.require_list_of(_json(body), "transactional_ids", str)),
}


def check_http(caller: Caller, route: str, body: bytes, path: Mapping[str, str]) -> None:
    """Authorize one HTTP request on ``route`` (its canonical path) with ``body``; a body the
    route's decoder refuses is passed on for the handler to answer INVALID_REQUEST."""
    needs = HTTP_NEEDS.get(route)
    if needs is None:
        return
    try:
        wanted = list(needs(caller, body, path))
    except InvalidRequestError:
        return
    caller.require(wanted)


def _filtered_answer(caller: Caller, route: str, response: web.StreamResponse) -> web.StreamResponse:
    """Metadata and ListGroups answers without what the caller may not Describe."""
    if route not in (protocol.METADATA, protocol.LIST_GROUPS) or not isinstance(response, web.Response) \
            or response.status != 200 or not isinstance(response.body, bytes):
        return response
    document = json.loads(response.body)
    if route == protocol.METADATA:
        document["topics"] = [topic for topic in document.get("topics", ())
                              if caller.allowed(DESCRIBE, TOPIC, str(topic.get("name", "")))]
    else:
        document["groups"] = [group for group in document.get("groups", ())
                              if caller.allowed(DESCRIBE, GROUP, str(group.get("group_id", "")))]
    return web.Response(body=protocol.dumps(document), status=200, content_type="application/json")


def _metadata_creates(caller: Caller, request: web.Request, body: bytes) -> Iterator[Need]:
    """Auto-creation through the HTTP Metadata route needs Create on the Cluster or the topic."""
    if request.method == "GET":
        names = [name for name in request.query.get("topics", "").split(",") if name]
        allow = request.query.get("allow_auto_topic_creation", "false").lower() == "true"
    else:
        document = _json(body)
        names = protocol.require_list_of(document, "topics", str, None) or []
        allow = protocol.require(document, "allow_auto_topic_creation", bool, False)
    if allow:
        for name in names:
            if not caller.may_create_topic(name) and not caller.allowed(DESCRIBE, TOPIC, name):
                yield CREATE, TOPIC, name


def http_middleware(authorizer: Authorizer, principal_of: Callable[[web.Request], KafkaPrincipal]) -> Any:
    """The aiohttp middleware authorizing every request (installed only with an authorizer)."""

    @web.middleware
    async def authorize(request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
                        ) -> web.StreamResponse:
        resource = request.match_info.route.resource
        route = resource.canonical if resource is not None else ""
        caller = Caller(authorizer, principal_of(request), request.remote or "")
        forwarded = request.headers.get(FORWARDED_PRINCIPAL_HEADER)
        if forwarded is not None:  # another broker asks on a client's behalf: only brokers may
            caller.require([(CLUSTER_ACTION, CLUSTER, CLUSTER_NAME)])
            caller = Caller(authorizer, KafkaPrincipal.parse(forwarded), caller.host)
        request[CALLER_KEY] = caller
        token = served_principal.set(caller.principal)
        try:
            if route == protocol.CHANNEL:
                return await handler(request)
            if route in HTTP_NEEDS:
                check_http(caller, route, await request.read() if request.body_exists else b"", request.match_info)
            elif route == protocol.METADATA:
                try:
                    caller.require(_metadata_creates(caller, request, await request.read() if request.body_exists
                                                     else b""))
                except InvalidRequestError:
                    pass  # the handler names the problem
            return _filtered_answer(caller, route, await handler(request))
        finally:
            served_principal.reset(token)

    return authorize


#: Where the middleware leaves the request's :class:`Caller` for the binary produce and fetch
#: handlers, which authorize partition by partition (:func:`authorized_partitions`).
CALLER_KEY = "kafkalite.access.caller"

Part = TypeVar("Part", protocol.ProducePartition, protocol.FetchPartition)


def authorized_partitions(request: web.Request, operation: Operation, partitions: list[Part],
                          replica_id: int = -1) -> tuple[list[Part], list[Part]]:
    """(allowed, denied) partitions of a binary produce (Write) or fetch (Read) as Kafka splits
    them: the denied ones are answered TOPIC_AUTHORIZATION_FAILED, the others served. A
    follower's fetch needs ClusterAction on the Cluster for all. Without an authorizer, all
    are allowed."""
    caller: Caller | None = request.get(CALLER_KEY)
    if caller is None:
        return partitions, []
    if replica_id >= 0:
        caller.require([(CLUSTER_ACTION, CLUSTER, CLUSTER_NAME)])
        return partitions, []
    verdicts: dict[str, bool] = {}
    allowed: list[Part] = []
    denied: list[Part] = []
    for partition in partitions:
        verdict = verdicts.get(partition.topic)
        if verdict is None:
            verdict = verdicts[partition.topic] = caller.allowed(operation, TOPIC, partition.topic)
        (allowed if verdict else denied).append(partition)
    return allowed, denied
