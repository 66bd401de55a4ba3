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

import dataclasses
import json
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from aiohttp import web

from kafkalite import protocol
from kafkalite.broker import acl_http, http_codec
from kafkalite.broker.authorizer import Authorizer, denied_error
from kafkalite.errors import InvalidRequestError, OperationNotAttemptedError
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


def _http_group(operation: Operation, decode: Callable[[dict[str, Any]], Any]) -> HttpNeeds:
    return lambda caller, body, path: [(operation, GROUP, decode(_json(body)).group_id)]


def _http_offset_commit(caller: Caller, body: bytes, path: Mapping[str, str]) -> Iterator[Need]:
    yield READ, GROUP, http_codec.decode_offset_commit(_json(body)).group_id  # its topics: HTTP_SPLITS


def _http_offset_fetch(caller: Caller, body: bytes, path: Mapping[str, str]) -> Iterator[Need]:
    yield DESCRIBE, GROUP, http_codec.decode_offset_fetch(_json(body)).group_id  # its topics: HTTP_SPLITS


def _http_txn(extra: Callable[[dict[str, Any]], Iterable[Need]] | None = None) -> HttpNeeds:
    def needs(caller: Caller, body: bytes, path: Mapping[str, str]) -> Iterator[Need]:
        document = _json(body)
        yield WRITE, TXN, protocol.require(document, "transactional_id", str)
        if extra is not None:
            yield from extra(document)
    return needs


def _txn_group(body: dict[str, Any]) -> list[Need]:
    return [(READ, GROUP, protocol.require(body, "group_id", str))]


def _http_init_producer_id(caller: Caller, body: bytes, path: Mapping[str, str]) -> list[Need]:
    transactional_id = protocol.require(_json(body), "transactional_id", str, None) if body.strip() else None
    failed = caller.may_init_producer_id(transactional_id)
    return [] if failed is None else [failed]


def _cluster(operation: Operation) -> HttpNeeds:
    return lambda caller, body, path: [(operation, CLUSTER, CLUSTER_NAME)]


#: What each HTTP route needs as a whole, by its canonical path (routes in neither this table nor
#: HTTP_SPLITS need nothing).
HTTP_NEEDS: dict[str, HttpNeeds] = {
    protocol.TOPIC_RECORDS: lambda caller, body, path: [(WRITE, TOPIC, path.get("topic", ""))],
    protocol.PARTITION_RECORDS: lambda caller, body, path: [(READ, TOPIC, path.get("topic", ""))],
    protocol.INIT_PRODUCER_ID: _http_init_producer_id,
    protocol.WRITE_TXN_MARKERS: _cluster(CLUSTER_ACTION),
    # users/clients config entities (SCRAM credentials, quotas): Kafka's DescribeConfigs /
    # AlterConfigs on the cluster, as for its client-quota and SCRAM-credential APIs
    protocol.DESCRIBE_ENTITY_CONFIGS: _cluster(DESCRIBE_CONFIGS),
    protocol.ALTER_ENTITY_CONFIGS: _cluster(ALTER_CONFIGS),
    protocol.ELECT_LEADERS: _cluster(ALTER),
    protocol.CONTROLLED_SHUTDOWN: _cluster(CLUSTER_ACTION),
    protocol.PARTITION_STATES: _cluster(CLUSTER_ACTION),
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
    protocol.ADD_PARTITIONS_TO_TXN: _http_txn(),
    protocol.ADD_OFFSETS_TO_TXN: _http_txn(_txn_group),
    protocol.END_TXN: _http_txn(),
    protocol.TXN_OFFSET_COMMIT: _http_txn(_txn_group),
    acl_http.CREATE_ACLS: _cluster(ALTER),
    acl_http.DELETE_ACLS: _cluster(ALTER),
    acl_http.DESCRIBE_ACLS: _cluster(DESCRIBE),
}


@dataclass(frozen=True)
class HttpSplit:
    """An HTTP route whose body names resources item by item (the items of ``request_field``),
    answered as the Kafka front end answers (see :class:`kafkalite.broker.kafka.access.ItemSplit`):
    the handler serves the items the caller may use, and the answer's ``answer_field`` gets an
    entry for each other item, ``entry`` (its identity fields) with its AUTHORIZATION_FAILED
    outcome. With ``all_or_nothing`` the handler serves none then, the others answered
    OPERATION_NOT_ATTEMPTED. A request whose every item is denied is refused as a whole (403),
    as one naming a single resource is."""

    request_field: str
    needs: Callable[[Caller, Any], Iterable[Need]]
    answer_field: str
    entry: Callable[[Any], dict[str, Any]]
    all_or_nothing: bool = False


def _partition_item(operation: Operation) -> HttpSplit:
    """Items ``{"topic": ..., "partition": ...}`` answered in ``partitions``."""
    return HttpSplit("partitions", lambda caller, item: [(operation, TOPIC, protocol.require(item, "topic", str))],
                     "partitions", lambda item: {"topic": item["topic"], "partition": item.get("partition")})


def _topic_with_partitions(operation: Operation, **extra: Any) -> HttpSplit:
    """Items ``{"name": ..., "partitions": [...]}`` (objects with ``partition``, or numbers)."""
    def entry(item: Any) -> dict[str, Any]:
        numbers = [part.get("partition") if isinstance(part, dict) else part for part in item.get("partitions") or ()]
        return {"name": item["name"], "partitions": [{"partition": number, **extra} for number in numbers]}
    return HttpSplit("topics", lambda caller, item: [(operation, TOPIC, protocol.require(item, "name", str))],
                     "topics", entry)


def _config_item(operation: Operation) -> HttpSplit:
    def needs(caller: Caller, item: Any) -> list[Need]:
        kind = str(item.get("type", "")) if isinstance(item, dict) else ""
        return [(operation, TOPIC, str(item.get("name", "")))] if kind.lower() == "topic" \
            else [(operation, CLUSTER, CLUSTER_NAME)]
    return HttpSplit("resources", needs, "resources",
                     lambda item: {"type": str(item.get("type", "")), "name": str(item.get("name", "")),
                                   **({"configs": []} if operation is DESCRIBE_CONFIGS else {})})


def _named(operation: Operation, resource_type: ResourceType, field: str, answer_field: str,
           key: str) -> HttpSplit:
    """Items that are plain names (``field``), answered in ``answer_field`` under ``key``."""
    return HttpSplit(field, lambda caller, name: [(operation, resource_type, str(name))], answer_field,
                     lambda name: {key: name})


def _new_topic_item(caller: Caller, item: Any) -> list[Need]:
    name = protocol.require(item, "name", str)
    return [] if caller.may_create_topic(name) else [(CREATE, TOPIC, name)]


#: The HTTP routes answered item by item, by canonical path.
HTTP_SPLITS: dict[str, HttpSplit] = {
    protocol.LIST_OFFSETS: _partition_item(DESCRIBE),
    protocol.OFFSETS_FOR_LEADER_EPOCH: _partition_item(DESCRIBE),
    protocol.DELETE_RECORDS: _partition_item(DELETE),
    protocol.DESCRIBE_PRODUCERS: _partition_item(READ),
    protocol.CREATE_TOPICS: HttpSplit("topics", _new_topic_item, "topics", lambda item: {"name": item["name"]}),
    protocol.DELETE_TOPICS: _named(DELETE, TOPIC, "topics", "topics", "name"),
    protocol.CREATE_PARTITIONS: HttpSplit(
        "topics", lambda caller, item: [(ALTER, TOPIC, protocol.require(item, "name", str))], "topics",
        lambda item: {"name": item["name"]}),
    protocol.DESCRIBE_CONFIGS: _config_item(DESCRIBE_CONFIGS),
    protocol.ALTER_CONFIGS: _config_item(ALTER_CONFIGS),
    protocol.OFFSET_COMMIT: _topic_with_partitions(READ),
    protocol.OFFSET_FETCH: _topic_with_partitions(DESCRIBE, offset=-1, leader_epoch=-1, metadata=""),
    protocol.TXN_OFFSET_COMMIT: _topic_with_partitions(READ),
    protocol.ADD_PARTITIONS_TO_TXN: dataclasses.replace(_topic_with_partitions(WRITE), all_or_nothing=True),
    protocol.DESCRIBE_GROUPS: _named(DESCRIBE, GROUP, "groups", "groups", "group_id"),
    protocol.DELETE_GROUPS: _named(DELETE, GROUP, "groups", "groups", "group_id"),
    protocol.DESCRIBE_TRANSACTIONS: _named(DESCRIBE, TXN, "transactional_ids", "transactions", "transactional_id"),
}

#: The body of a request narrowed to the items its caller may use (set by the middleware for an
#: HTTP_SPLITS route); handlers read bodies with :func:`read_body`.
NARROWED_BODY_KEY = "kafkalite.access.narrowed_body"


async def read_body(request: web.Request) -> bytes:
    """The request's body as its handler must see it: narrowed to the items the caller may use."""
    narrowed: bytes | None = request.get(NARROWED_BODY_KEY)
    return narrowed if narrowed is not None else await request.read()


@dataclass
class _SplitBody:
    narrowed: dict[str, Any]
    served: int
    entries: list[dict[str, Any]]


def _split_http(caller: Caller, split: HttpSplit, body: bytes) -> _SplitBody | None:
    """The body narrowed to the allowed items and the answer entries of the denied ones; None
    when nothing is denied, or the body is not what the route takes (its handler answers that).
    When every item is denied, the request is refused as a whole (403 with the first item's
    error), as a request naming one resource is."""
    try:
        document = _json(body)
        items = document.get(split.request_field)
        if not isinstance(items, list):
            return None
        allowed: list[Any] = []
        entries: list[dict[str, Any]] = []
        first: Need | None = None
        for item in items:
            failed = next((need for need in split.needs(caller, item) if not caller.allowed(*need)), None)
            if failed is None:
                allowed.append(item)
            else:
                first = first or failed
                entries.append({**split.entry(item), **http_codec.outcome(denied_error(*failed))})
    except InvalidRequestError:
        return None  # the route's own decoder refuses the same body
    except (KeyError, TypeError, AttributeError):
        raise InvalidRequestError(f"the {split.request_field} of the request are not what the route takes") from None
    if first is None:
        return None
    if not allowed:
        raise denied_error(*first)
    if split.all_or_nothing:
        not_attempted = OperationNotAttemptedError("another item of the request was not authorized")
        entries += [{**split.entry(item), **http_codec.outcome(not_attempted)} for item in allowed]
        allowed = []
    return _SplitBody({**document, split.request_field: allowed}, len(allowed), entries)


def _mark_denied(entry: dict[str, Any]) -> dict[str, Any]:
    """A topic's entry with partitions carries the outcome on each partition too (the shape of
    those answers)."""
    partitions = entry.get("partitions")
    if not isinstance(partitions, list):
        return entry
    outcome = {key: entry[key] for key in ("error_code", "error", "message") if key in entry}
    return {**entry, "partitions": [{**partition, **outcome} for partition in partitions]}


async def _serve_http_split(caller: Caller, route: str, split: HttpSplit, request: web.Request,
                            handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> web.StreamResponse:
    divided = _split_http(caller, split, await request.read() if request.body_exists else b"")
    if divided is None:
        return _filtered_answer(caller, route, await handler(request))
    entries = [_mark_denied(entry) for entry in divided.entries]
    if not divided.served:
        return web.Response(body=protocol.dumps({"error_code": 0, "error": None, split.answer_field: entries}),
                            status=200, content_type="application/json")
    request[NARROWED_BODY_KEY] = protocol.dumps(divided.narrowed)
    response = await handler(request)
    if not isinstance(response, web.Response) or response.status != 200 or not isinstance(response.body, bytes):
        return response
    document = json.loads(response.body)
    document[split.answer_field] = [*document.get(split.answer_field, ()), *entries]
    return web.Response(body=protocol.dumps(document), status=200, content_type="application/json")


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
    """Metadata, ListGroups and OffsetFetch answers without what the caller may not Describe (an
    OffsetFetch of every committed offset lists only those topics, as Kafka's; named topics it
    may not Describe never reach the handler)."""
    if route not in (protocol.METADATA, protocol.LIST_GROUPS, protocol.OFFSET_FETCH) \
            or not isinstance(response, web.Response) or response.status != 200 \
            or not isinstance(response.body, bytes):
        return response
    document = json.loads(response.body)
    if route in (protocol.METADATA, protocol.OFFSET_FETCH):
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
            split = HTTP_SPLITS.get(route)
            if split is not None:
                return await _serve_http_split(caller, route, split, request, handler)
            if route == protocol.METADATA:
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
