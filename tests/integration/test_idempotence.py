"""Idempotent produce against real brokers: duplicates answered with the original offsets,
gaps and stale epochs refused, and the state carried over a leader failover."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from kafkalite import protocol
from kafkalite.record.batch import build_batch, decode_all
from tests.integration.test_cluster import fetch
from tests.support.cluster import BrokerCluster, http

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, zookeeper) -> Iterator[BrokerCluster]:  # type: ignore[no-untyped-def]
    brokers = BrokerCluster(tmp_path_factory.mktemp("idempotence"),
                            f"{zookeeper.connect_string}/idem-{uuid.uuid4().hex[:8]}", size=3).start()
    try:
        yield brokers
    finally:
        brokers.stop()


def send(cluster: BrokerCluster, broker_id: int, topic: str, producer_id: int, epoch: int, sequence: int,
         values: list[bytes]) -> protocol.ProduceResult:
    data = build_batch(values, producer_id=producer_id, producer_epoch=epoch, base_sequence=sequence)
    request = protocol.ProduceRequest(-1, 10_000, [protocol.ProducePartition(topic, 0, data)], producer_id)
    raw = b"".join(bytes(piece) for piece in protocol.encode_produce_request(request))
    answer = http(cluster.brokers[broker_id].address, "POST", protocol.PRODUCE, raw=raw,
                  content_type=protocol.BINARY_CONTENT_TYPE)
    return protocol.decode_produce_response(answer)[0]


def test_duplicates_gaps_epochs_and_failover(cluster: BrokerCluster) -> None:
    cluster.create_topic("idem", partitions=1, replication_factor=3)
    leader = cluster.wait_in_sync("idem")[0]["leader"]
    producer_id = cluster.call("POST", protocol.INIT_PRODUCER_ID, {})["producer_id"]
    other_id = cluster.call("POST", protocol.INIT_PRODUCER_ID, {}, broker_id=leader)["producer_id"]
    assert producer_id >= 0 and other_id != producer_id

    first = cluster.wait_for(lambda: (lambda result: result if result.error_code == 0 else None)(
        send(cluster, leader, "idem", producer_id, 0, 0, [b"a", b"b"])), 10, "first idempotent batch")
    assert first.base_offset == 0
    second = send(cluster, leader, "idem", producer_id, 0, 2, [b"c"])
    assert (second.error_code, second.base_offset) == (0, 2)
    retry = send(cluster, leader, "idem", producer_id, 0, 0, [b"a", b"b"])  # a retry of the first batch
    assert (retry.error_code, retry.base_offset) == (0, 0)
    gap = send(cluster, leader, "idem", producer_id, 0, 9, [b"z"])
    assert protocol.error_for(gap.error_code).message == "OUT_OF_ORDER_SEQUENCE_NUMBER"
    assert send(cluster, leader, "idem", other_id, 0, 0, [b"x"]).base_offset == 3
    # The leader fails; the new leader rebuilt the state from replicated batches.
    cluster.brokers[leader].kill()
    survivors = [broker_id for broker_id in cluster.brokers if broker_id != leader]
    new_leader = cluster.wait_for(lambda: (lambda item: item["leader"] if item["leader"] in survivors else None)(
        cluster.partitions("idem", survivors[0])[0]), 30, "a new leader")
    again = cluster.wait_for(lambda: (lambda result: result if result.error_code != 6 else None)(
        send(cluster, new_leader, "idem", producer_id, 0, 2, [b"c"])), 10, "new leader serving")
    assert (again.error_code, again.base_offset) == (0, 2)  # still recognised as a duplicate
    stale = send(cluster, new_leader, "idem", producer_id, 0, 5, [b"q"])
    assert protocol.error_for(stale.error_code).message == "OUT_OF_ORDER_SEQUENCE_NUMBER"
    # A new leader's high watermark catches up with the next follower fetch.
    cluster.wait_for(lambda: fetch(cluster, "idem", 0, 0, new_leader).high_watermark == 4, 10, "high watermark")
    values = [record.value for record in decode_all(bytes(fetch(cluster, "idem", 0, 0, new_leader).records))]
    assert values == [b"a", b"b", b"c", b"x"]
    cluster.brokers[leader].start()
    cluster.brokers[leader].wait_ready()
    cluster.wait_in_sync("idem", timeout=40)
