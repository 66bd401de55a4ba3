"""The transaction APIs over the Kafka protocol (broker/kafka/txn.py), handler by handler.

The handlers run against a real :class:`TransactionCoordinator` whose log, marker channel and
topology are the in-memory seams of the coordinator's state-machine tests; every answer is also
built into the kio response of its version and encoded, as the listener does with it.
"""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import Callable, Coroutine
from types import SimpleNamespace
from typing import Any

from kio.schema.add_offsets_to_txn import v3 as add_offsets_v3
from kio.schema.add_partitions_to_txn import v1 as add_partitions_v1, v3 as add_partitions_v3
from kio.schema.describe_transactions import v0 as describe_v0
from kio.schema.end_txn import v3 as end_txn_v3
from kio.schema.init_producer_id import v4 as init_v4
from kio.schema.list_transactions import v1 as list_v1

from kafkalite.broker.kafka import codec, txn
from kafkalite.broker.kafka.context import KafkaRequestContext
from kafkalite.broker.kafka.registry import ApiRegistry
from kafkalite.broker.txn_coordinator import TransactionCoordinator
from kafkalite.errors import ConcurrentTransactionsError, InvalidProducerEpochError, ProducerFencedError
from tests.unit.broker.test_txn_coordinator import Harness

TXN = "orders-tx"
TIMEOUT = datetime.timedelta(seconds=60)


async def call(coordinator: TransactionCoordinator, handler: Any, version: int, request: Any) -> Any:
    api = next(item for item in txn.HANDLERS if item.handle is handler)
    assert api.min_version <= version <= api.max_version
    services: Any = SimpleNamespace(transactions=coordinator)
    answer = await handler(KafkaRequestContext(services, api.api_key, version, 3, "rdkafka", "127.0.0.1"), request)
    codec.encode_response(api.api_key, version, 1, codec.build_response(api.api_key, version, answer))
    return answer


def run(scenario: Callable[[Harness], Coroutine[Any, Any, None]]) -> None:
    async def main() -> None:
        harness = Harness()
        await harness.coordinator.load(0, 1)
        try:
            await scenario(harness)
        finally:
            await harness.coordinator.stop()
    asyncio.run(main())


def init(producer_id: int = -1, epoch: int = -1) -> Any:
    return init_v4.InitProducerIdRequest(transactional_id=TXN, transaction_timeout=TIMEOUT,
                                         producer_id=producer_id, producer_epoch=epoch)


def add_v3(producer_id: int, epoch: int, *partitions: int) -> Any:
    return add_partitions_v3.AddPartitionsToTxnRequest(
        v3_and_below_transactional_id=TXN, v3_and_below_producer_id=producer_id,
        v3_and_below_producer_epoch=epoch,
        v3_and_below_topics=(add_partitions_v3.request.AddPartitionsToTxnTopic(name="output", partitions=partitions),))


def test_a_transaction_through_the_kafka_handlers() -> None:
    async def scenario(h: Harness) -> None:
        coordinator = h.coordinator
        answer = await call(coordinator, txn.init_producer_id, 4, init())
        assert answer["error_code"] == 0 and answer["producer_epoch"] == 0
        producer_id = answer["producer_id"]
        added = await call(coordinator, txn.add_partitions_to_txn, 3, add_v3(producer_id, 0, 0, 1))
        assert added["results_by_topic_v3_and_below"] == [{"name": "output", "results_by_partition": [
            {"partition_index": 0, "partition_error_code": 0}, {"partition_index": 1, "partition_error_code": 0}]}]
        offsets = await call(coordinator, txn.add_offsets_to_txn, 3, add_offsets_v3.AddOffsetsToTxnRequest(
            transactional_id=TXN, producer_id=producer_id, producer_epoch=0, group_id="group"))
        assert offsets == {"error_code": 0}
        described = await call(coordinator, txn.describe_transactions, 0,
                               describe_v0.DescribeTransactionsRequest(transactional_ids=(TXN, "unknown")))
        states = described["transaction_states"]
        assert (states[0]["transaction_state"], states[0]["topics"]) == (
            "Ongoing", [{"topic": "__consumer_offsets", "partitions": [2]},
                        {"topic": "output", "partitions": [0, 1]}])
        assert states[1]["error_code"] == 105  # TRANSACTIONAL_ID_NOT_FOUND
        listed = await call(coordinator, txn.list_transactions, 1, list_v1.ListTransactionsRequest(
            state_filters=("Ongoing",), producer_id_filters=(), duration_filter=-1))
        assert listed["transaction_states"] == [{"transactional_id": TXN, "producer_id": producer_id,
                                                 "transaction_state": "Ongoing"}]
        h.markers.code = 6  # markers wait for a leader: the EndTxn retried meanwhile is told to retry
        ended = await call(coordinator, txn.end_txn, 3, end_txn_v3.EndTxnRequest(
            transactional_id=TXN, producer_id=producer_id, producer_epoch=0, committed=True))
        assert ended == {"error_code": 0}
        again = await call(coordinator, txn.end_txn, 3, end_txn_v3.EndTxnRequest(
            transactional_id=TXN, producer_id=producer_id, producer_epoch=0, committed=True))
        assert again == {"error_code": ConcurrentTransactionsError.errno}
        h.markers.code = 0
        await h.settle(lambda: h.state(TXN).display == "CompleteCommit")
    run(scenario)


def test_fenced_producers_get_the_code_their_version_knows() -> None:
    async def scenario(h: Harness) -> None:
        coordinator = h.coordinator
        first = await call(coordinator, txn.init_producer_id, 4, init())
        second = await call(coordinator, txn.init_producer_id, 4, init())
        assert second["producer_epoch"] == first["producer_epoch"] + 1
        stale = await call(coordinator, txn.add_partitions_to_txn, 3, add_v3(first["producer_id"], 0, 0))
        assert stale["results_by_topic_v3_and_below"][0]["results_by_partition"][0]["partition_error_code"] == \
            ProducerFencedError.errno
        old = await call(coordinator, txn.add_partitions_to_txn, 1, add_partitions_v1.AddPartitionsToTxnRequest(
            v3_and_below_transactional_id=TXN, v3_and_below_producer_id=first["producer_id"],
            v3_and_below_producer_epoch=0,
            v3_and_below_topics=(add_partitions_v1.request.AddPartitionsToTxnTopic(name="output", partitions=(0,)),)))
        assert old["results_by_topic_v3_and_below"][0]["results_by_partition"][0]["partition_error_code"] == \
            InvalidProducerEpochError.errno
        # KIP-360: naming the epoch just bumped is a retry of that call, answered alike; naming an
        # older one is fenced
        retried = await call(coordinator, txn.init_producer_id, 4, init(first["producer_id"], 0))
        assert (retried["error_code"], retried["producer_epoch"]) == (0, 1)
        await call(coordinator, txn.init_producer_id, 4, init())
        stale_init = await call(coordinator, txn.init_producer_id, 4, init(first["producer_id"], 0))
        assert stale_init["error_code"] == ProducerFencedError.errno
    run(scenario)


def test_the_registry_serves_the_transaction_apis() -> None:
    served = {item["api_key"]: (item["min_version"], item["max_version"])
              for item in ApiRegistry.default().version_ranges()}
    assert served[22] == (0, 5) and served[24] == (0, 3) and served[25] == (0, 3) and served[26] == (0, 3)
    assert served[28] == (0, 3) and served[65] == (0, 0) and served[66] == (0, 1)
