"""The transaction APIs on the HTTP front end (kafkalite's own clients).

Routes (JSON bodies; every answer carries ``error_code``, a named error other than
INVALID_REQUEST is a 200 answer carrying it, like the group routes):

=========================================  ==================================================
``POST /v1/init_producer_id``              ``transactional_id``, ``transaction_timeout_ms``,
                                           ``producer_id``/``producer_epoch`` (optional)
``POST /v1/txn/add_partitions``            ``transactional_id, producer_id, producer_epoch,
                                           topics [{name, partitions [int]}]``
``POST /v1/txn/add_offsets``               ``transactional_id, producer_id, producer_epoch, group_id``
``POST /v1/txn/end``                       ``transactional_id, producer_id, producer_epoch, committed``
``POST /v1/txn/offset_commit``             ``transactional_id, group_id, producer_id, producer_epoch,
                                           generation_id, member_id, topics [{name, partitions
                                           [{partition, offset, leader_epoch, metadata}]}]``
``POST /v1/txn/describe``                  ``transactional_ids [str]``
``POST /v1/txn/list``                      ``states [str], producer_ids [int]``
``POST /v1/txn/describe_producers``        ``partitions [{topic, partition}]`` (led here)
=========================================  ==================================================

:func:`find_coordinator` answers FindCoordinator for both key types (0 group, 1 transaction).

Concurrency: event-loop only, like every handler.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from kafkalite import protocol
from kafkalite.broker import access
from kafkalite.broker.group_api import (
    CommitPartition,
    FindCoordinatorAnswer,
    FindCoordinatorRequest,
    TxnOffsetCommitRequest,
)
from kafkalite.broker.http_codec import error, ok, outcome
from kafkalite.broker.services import BrokerServices
from kafkalite.errors import BrokerResponseError, InvalidRequestError

Json = dict[str, Any]

TRANSACTION_KEY = 1


async def find_coordinator(services: BrokerServices, request: FindCoordinatorRequest) -> FindCoordinatorAnswer:
    """A group's (key type 0) or a transactional id's (key type 1) coordinator."""
    if request.key_type != TRANSACTION_KEY:
        return await services.groups.find_coordinator(request)
    try:
        node_id, host, port = await services.transactions.find_coordinator(request.key)
        return FindCoordinatorAnswer(None, node_id, host, port, services.transactions.partition_for(request.key))
    except BrokerResponseError as exc:
        if isinstance(exc, InvalidRequestError):
            raise
        return FindCoordinatorAnswer(exc)


async def init_producer_id(services: BrokerServices, body: Json) -> Json:
    """A producer id: fresh for an idempotent producer, the transactional id's own (epoch bumped)."""
    transactional_id = protocol.require(body, "transactional_id", str, None)
    if transactional_id is None:
        answer = await services.producer_ids.init_producer_id()
        return {"producer_id": answer.producer_id, "producer_epoch": answer.producer_epoch}
    try:
        producer_id, epoch = await services.transactions.init_producer_id(
            transactional_id, protocol.require(body, "transaction_timeout_ms", int, 60_000),
            protocol.require(body, "producer_id", int, -1), protocol.require(body, "producer_epoch", int, -1))
    except BrokerResponseError as exc:
        if isinstance(exc, InvalidRequestError):
            raise
        return error(exc, producer_id=-1, producer_epoch=-1)
    return ok(producer_id=producer_id, producer_epoch=epoch)


def _producer(body: Json) -> tuple[str, int, int]:
    return (protocol.require(body, "transactional_id", str), protocol.require(body, "producer_id", int),
            protocol.require(body, "producer_epoch", int, minimum=-1, maximum=32767))


async def _add_partitions(services: BrokerServices, body: Json) -> Json:
    transactional_id, producer_id, epoch = _producer(body)
    partitions = [(protocol.require(topic, "name", str), number)
                  for topic in protocol.require_objects(body, "topics")
                  for number in protocol.require_list_of(topic, "partitions", int)]
    outcomes = await services.transactions.add_partitions(transactional_id, producer_id, epoch, partitions)
    by_topic: dict[str, list[Json]] = {}
    for (topic, number), problem in outcomes.items():
        by_topic.setdefault(topic, []).append({"partition": number, **outcome(problem)})
    return ok(topics=[{"name": name, "partitions": items} for name, items in by_topic.items()])


async def _add_offsets(services: BrokerServices, body: Json) -> Json:
    transactional_id, producer_id, epoch = _producer(body)
    await services.transactions.add_offsets(transactional_id, producer_id, epoch,
                                            protocol.require(body, "group_id", str))
    return ok()


async def _end(services: BrokerServices, body: Json) -> Json:
    transactional_id, producer_id, epoch = _producer(body)
    await services.transactions.end_txn(transactional_id, producer_id, epoch,
                                        protocol.require(body, "committed", bool))
    return ok()


async def _offset_commit(services: BrokerServices, body: Json) -> Json:
    transactional_id, producer_id, epoch = _producer(body)
    partitions = []
    for topic in protocol.require_objects(body, "topics"):
        name = protocol.require(topic, "name", str)
        for item in protocol.require_objects(topic, "partitions"):
            partitions.append(CommitPartition(
                name, protocol.require(item, "partition", int, minimum=0, maximum=protocol.INT32_MAX),
                protocol.require(item, "offset", int),
                protocol.require(item, "leader_epoch", int, -1, minimum=protocol.INT32_MIN, maximum=protocol.INT32_MAX),
                protocol.require(item, "metadata", str, "") or ""))
    request = TxnOffsetCommitRequest(transactional_id, protocol.require(body, "group_id", str), producer_id, epoch,
                                     protocol.require(body, "generation_id", int, -1),
                                     protocol.require(body, "member_id", str, ""),
                                     protocol.require(body, "group_instance_id", str, None), partitions)
    answer = await services.groups.txn_offset_commit(request)
    by_topic: dict[str, list[Json]] = {}
    for item in answer.partitions:
        by_topic.setdefault(item.topic, []).append({"partition": item.partition, **outcome(item.error)})
    return ok(topics=[{"name": name, "partitions": entries} for name, entries in by_topic.items()])


async def _describe(services: BrokerServices, body: Json) -> Json:
    answers = services.transactions.describe(protocol.require_list_of(body, "transactional_ids", str))
    return ok(transactions=[{
        "transactional_id": item.transactional_id, **outcome(item.error), "state": item.state,
        "transaction_timeout_ms": item.timeout_ms, "start_ms": item.start_ms, "producer_id": item.producer_id,
        "producer_epoch": item.producer_epoch,
        "partitions": [{"topic": topic, "partition": number} for topic, number in item.partitions]}
        for item in answers])


async def _list(services: BrokerServices, body: Json) -> Json:
    answer = services.transactions.list_transactions(protocol.require_list_of(body, "states", str, []),
                                                     protocol.require_list_of(body, "producer_ids", int, []))
    fields = {"unknown_states": answer.unknown_states, "transactions": [
        {"transactional_id": item.transactional_id, "producer_id": item.producer_id, "state": item.state}
        for item in answer.transactions]}
    return error(answer.error, **fields) if answer.error is not None else ok(**fields)


async def _describe_producers(services: BrokerServices, body: Json) -> Json:
    """The producer state of partitions this broker leads (the transactions tool's view)."""
    wanted = [(protocol.require(item, "topic", str), protocol.require(item, "partition", int, minimum=0))
              for item in protocol.require_objects(body, "partitions")]
    return ok(partitions=[{
        "topic": answer.topic, "partition": answer.partition, **outcome(answer.error),
        "producers": [{"producer_id": producer.producer_id, "producer_epoch": producer.producer_epoch,
                       "last_sequence": producer.last_sequence, "last_timestamp": producer.last_timestamp,
                       "coordinator_epoch": producer.coordinator_epoch,
                       "current_txn_start_offset": producer.current_txn_start_offset}
                      for producer in answer.producers]}
        for answer in services.replicas.describe_producers(wanted)])


def _route(services: BrokerServices, call: Callable[[BrokerServices, Json], Awaitable[Json]]
           ) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def handle(request: web.Request) -> web.Response:
        body = protocol.parse_json(await access.read_body(request))
        protocol.check_string_lengths(body)
        try:
            answer = await call(services, body)
        except BrokerResponseError as exc:
            if isinstance(exc, InvalidRequestError):
                raise
            answer = error(exc)
        return web.Response(body=protocol.dumps(answer), content_type="application/json")
    return handle


def routes(services: BrokerServices) -> list[web.RouteDef]:
    """The transaction routes (InitProducerId is the existing route, served by :func:`init_producer_id`)."""
    table: list[tuple[str, Callable[[BrokerServices, Json], Awaitable[Json]]]] = [
        (protocol.ADD_PARTITIONS_TO_TXN, _add_partitions), (protocol.ADD_OFFSETS_TO_TXN, _add_offsets),
        (protocol.END_TXN, _end), (protocol.TXN_OFFSET_COMMIT, _offset_commit),
        (protocol.DESCRIBE_TRANSACTIONS, _describe), (protocol.LIST_TRANSACTIONS, _list),
        (protocol.DESCRIBE_PRODUCERS, _describe_producers)]
    return [web.post(path, _route(services, call)) for path, call in table]

def init_producer_id_route(services: BrokerServices) -> Callable[[web.Request], Awaitable[web.Response]]:
    return _route(services, init_producer_id)
