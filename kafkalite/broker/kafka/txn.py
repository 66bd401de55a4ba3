"""The transaction APIs over the Kafka protocol: InitProducerId (with and without a transactional
id), AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, TxnOffsetCommit, DescribeTransactions and
ListTransactions.

Each handler reads the kio request and calls the
:class:`~kafkalite.broker.txn_coordinator.TransactionCoordinator` (TxnOffsetCommit: the
:class:`~kafkalite.broker.group_coordinator.GroupCoordinator`), answering with kio field names
(see :mod:`kafkalite.broker.kafka.context`). The versions offered are those current clients
negotiate (librdkafka 2.x, the Java client, kafka-python, kafkajs) before KIP-890's
"transactions v2": InitProducerId 0–5, AddPartitionsToTxn 0–3, AddOffsetsToTxn 0–3, EndTxn 0–3,
TxnOffsetCommit 0–3, DescribeTransactions 0, ListTransactions 0–1.

PRODUCER_FENCED (90) is answered as INVALID_PRODUCER_EPOCH (47) to the versions that predate it
(InitProducerId < 4, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn and TxnOffsetCommit < 2), as
Kafka does.

Concurrency: event-loop only, like every handler.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from kafkalite.broker.group_api import CommitPartition, TxnOffsetCommitRequest
from kafkalite.broker.kafka.context import ApiHandler, KafkaAnswer, KafkaRequestContext
from kafkalite.errors import BrokerResponseError, InvalidProducerEpochError, ProducerFencedError

INIT_PRODUCER_ID, ADD_PARTITIONS_TO_TXN, ADD_OFFSETS_TO_TXN, END_TXN = 22, 24, 25, 26
TXN_OFFSET_COMMIT, DESCRIBE_TRANSACTIONS, LIST_TRANSACTIONS = 28, 65, 66


def _milliseconds(value: Any) -> int:
    return int(value.total_seconds() * 1000) if isinstance(value, timedelta) else int(value)


def _code(error: BrokerResponseError | None, context: KafkaRequestContext, fenced_since: int) -> int:
    """Kafka's code of ``error`` for this request's version (0 when None)."""
    if error is None:
        return 0
    if isinstance(error, ProducerFencedError) and context.api_version < fenced_since:
        return InvalidProducerEpochError.errno
    return error.errno


async def init_producer_id(context: KafkaRequestContext, request: Any) -> KafkaAnswer:
    """A producer id: a fresh one for an idempotent producer, the transactional id's own with its
    epoch bumped for a transactional one."""
    services = context.services
    transactional_id = request.transactional_id
    if transactional_id is None:
        answer = await services.producer_ids.init_producer_id()
        return {"error_code": 0, "producer_id": answer.producer_id, "producer_epoch": answer.producer_epoch}
    try:
        producer_id, epoch = await services.transactions.init_producer_id(
            transactional_id, _milliseconds(request.transaction_timeout), int(getattr(request, "producer_id", -1)),
            int(getattr(request, "producer_epoch", -1)))
    except BrokerResponseError as exc:
        return {"error_code": _code(exc, context, 4), "producer_id": -1, "producer_epoch": -1}
    return {"error_code": 0, "producer_id": producer_id, "producer_epoch": epoch}


async def add_partitions_to_txn(context: KafkaRequestContext, request: Any) -> KafkaAnswer:
    partitions = [(topic.name, int(number)) for topic in request.v3_and_below_topics for number in topic.partitions]
    outcomes = await context.services.transactions.add_partitions(
        request.v3_and_below_transactional_id, request.v3_and_below_producer_id,
        request.v3_and_below_producer_epoch, partitions)
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for (topic, number), error in outcomes.items():
        by_topic.setdefault(topic, []).append({"partition_index": number,
                                               "partition_error_code": _code(error, context, 2)})
    return {"results_by_topic_v3_and_below": [{"name": name, "results_by_partition": items}
                                              for name, items in by_topic.items()]}


async def add_offsets_to_txn(context: KafkaRequestContext, request: Any) -> KafkaAnswer:
    try:
        await context.services.transactions.add_offsets(request.transactional_id, request.producer_id,
                                                        request.producer_epoch, request.group_id)
    except BrokerResponseError as exc:
        return {"error_code": _code(exc, context, 2)}
    return {"error_code": 0}


async def end_txn(context: KafkaRequestContext, request: Any) -> KafkaAnswer:
    try:
        await context.services.transactions.end_txn(request.transactional_id, request.producer_id,
                                                    request.producer_epoch, bool(request.committed))
    except BrokerResponseError as exc:
        return {"error_code": _code(exc, context, 2)}
    return {"error_code": 0}


async def txn_offset_commit(context: KafkaRequestContext, request: Any) -> KafkaAnswer:
    partitions = [CommitPartition(topic.name, item.partition_index, item.committed_offset,
                                  getattr(item, "committed_leader_epoch", -1), item.committed_metadata or "")
                  for topic in request.topics for item in topic.partitions]
    typed = TxnOffsetCommitRequest(request.transactional_id, request.group_id, request.producer_id,
                                   request.producer_epoch, int(getattr(request, "generation_id", -1)),
                                   getattr(request, "member_id", "") or "",
                                   getattr(request, "group_instance_id", None), partitions)
    answer = await context.services.groups.txn_offset_commit(typed)
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for outcome in answer.partitions:
        by_topic.setdefault(outcome.topic, []).append({"partition_index": outcome.partition,
                                                       "error_code": _code(outcome.error, context, 2)})
    return {"topics": [{"name": name, "partitions": items} for name, items in by_topic.items()]}


async def describe_transactions(context: KafkaRequestContext, request: Any) -> KafkaAnswer:
    states = []
    for item in context.services.transactions.describe(list(request.transactional_ids)):
        topics: dict[str, list[int]] = {}
        for topic, number in item.partitions:
            topics.setdefault(topic, []).append(number)
        states.append({"error_code": _code(item.error, context, 0), "transactional_id": item.transactional_id,
                       "transaction_state": item.state, "transaction_timeout": item.timeout_ms,
                       "transaction_start_time": item.start_ms, "producer_id": item.producer_id,
                       "producer_epoch": item.producer_epoch,
                       "topics": [{"topic": name, "partitions": numbers} for name, numbers in topics.items()]})
    return {"transaction_states": states}


async def list_transactions(context: KafkaRequestContext, request: Any) -> KafkaAnswer:
    answer = context.services.transactions.list_transactions(
        list(request.state_filters), [int(item) for item in request.producer_id_filters],
        int(getattr(request, "duration_filter", -1)))
    return {"error_code": _code(answer.error, context, 0), "unknown_state_filters": answer.unknown_states,
            "transaction_states": [{"transactional_id": item.transactional_id, "producer_id": item.producer_id,
                                    "transaction_state": item.state} for item in answer.transactions]}


HANDLERS: tuple[ApiHandler, ...] = (
    ApiHandler(INIT_PRODUCER_ID, 0, 5, init_producer_id),
    ApiHandler(ADD_PARTITIONS_TO_TXN, 0, 3, add_partitions_to_txn),
    ApiHandler(ADD_OFFSETS_TO_TXN, 0, 3, add_offsets_to_txn),
    ApiHandler(END_TXN, 0, 3, end_txn),
    ApiHandler(TXN_OFFSET_COMMIT, 0, 3, txn_offset_commit),
    ApiHandler(DESCRIBE_TRANSACTIONS, 0, 0, describe_transactions),
    ApiHandler(LIST_TRANSACTIONS, 0, 1, list_transactions),
)
