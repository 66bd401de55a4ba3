"""Unmodified Kafka clients against real kafkalite brokers, on the same port as the HTTP API.

kafka-python and confluent-kafka (librdkafka) produce and consume (assign + seek; groups come
with the group APIs) over the Kafka wire protocol; kafkalite's own client reads the same
records back over HTTP from the same address; a plain HTTP request still works there.
"""

from __future__ import annotations

import http.client
import json
import time
import uuid
from collections.abc import Iterator

import pytest

from kafkalite import KafkaConsumer as KafkaliteConsumer, TopicPartition as KafkaliteTopicPartition
from tests.support.cluster import BrokerCluster

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, zookeeper) -> Iterator[BrokerCluster]:  # type: ignore[no-untyped-def]
    connect = f"{zookeeper.connect_string}/kafka-protocol-{uuid.uuid4().hex[:8]}"
    brokers = BrokerCluster(tmp_path_factory.mktemp("kafka-protocol"), connect, size=3).start()
    try:
        yield brokers
    finally:
        brokers.stop()


def _topic(cluster: BrokerCluster, partitions: int = 3, replication_factor: int = 3) -> str:
    name = f"kp-{uuid.uuid4().hex[:10]}"
    cluster.create_topic(name, partitions=partitions, replication_factor=replication_factor)
    cluster.wait_for(lambda: all(item["leader"] > 0 for item in cluster.partitions(name)), 30,
                     f"leaders for {name}")
    return name


Record = tuple[int, bytes | None, bytes | None]


def _read_with_kafkalite(cluster: BrokerCluster, topic: str, partitions: int, expected: int) -> list[Record]:
    """(partition, key, value) of every record of ``topic``, read with kafkalite's own client."""
    consumer = KafkaliteConsumer(bootstrap_servers=cluster.bootstrap, consumer_timeout_ms=10_000)
    try:
        assigned = [KafkaliteTopicPartition(topic, number) for number in range(partitions)]
        consumer.assign(assigned)
        consumer.seek_to_beginning(*assigned)
        records: list[Record] = []
        for record in consumer:
            records.append((record.partition, record.key, record.value))
            if len(records) >= expected:
                break
        return records
    finally:
        consumer.close()


def test_kafka_python_producer_and_consumer_on_the_http_port(cluster: BrokerCluster) -> None:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    topic = _topic(cluster)
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all")
    futures = [producer.send(topic, key=f"key-{index % 7}".encode(), value=f"value-{index}".encode())
               for index in range(300)]
    producer.flush(30)
    metadata = [future.get(timeout=30) for future in futures]
    producer.close()
    assert {item.topic for item in metadata} == {topic}
    per_partition: dict[int, list[int]] = {}
    for item in metadata:
        per_partition.setdefault(item.partition, []).append(item.offset)
    for offsets in per_partition.values():  # each partition's offsets are 0..n-1 in send order
        assert offsets == list(range(len(offsets)))

    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap, consumer_timeout_ms=10_000,
                             enable_auto_commit=False)
    partitions = [TopicPartition(topic, number) for number in range(3)]
    consumer.assign(partitions)
    consumer.seek_to_beginning(*partitions)
    seen = []
    for record in consumer:
        seen.append((record.partition, record.key, record.value))
        if len(seen) == 300:
            break
    consumer.close()
    assert sorted(value for _, _, value in seen) == sorted(f"value-{index}".encode() for index in range(300))
    by_key: dict[bytes, set[int]] = {}
    for partition, key, _ in seen:
        by_key.setdefault(key, set()).add(partition)
    assert all(len(partitions_of_key) == 1 for partitions_of_key in by_key.values())

    # the same records through kafkalite's own client, on the same addresses
    mine = _read_with_kafkalite(cluster, topic, 3, 300)
    assert sorted(mine) == sorted(seen)


def test_confluent_idempotent_producer_and_assigned_consumer(cluster: BrokerCluster) -> None:
    confluent_kafka = pytest.importorskip("confluent_kafka")

    topic = _topic(cluster)
    delivered: list[tuple[int, int, bytes]] = []
    errors: list[str] = []

    def on_delivery(error: object, message: object) -> None:
        if error is not None:
            errors.append(str(error))
        else:
            delivered.append((message.partition(), message.offset(), message.value()))  # type: ignore[attr-defined]

    producer = confluent_kafka.Producer({"bootstrap.servers": cluster.bootstrap, "enable.idempotence": True,
                                         "acks": "all", "compression.type": "lz4", "linger.ms": 5})
    for index in range(500):
        producer.produce(topic, key=f"k{index % 11}".encode(), value=f"v{index}".encode(), on_delivery=on_delivery)
        producer.poll(0)
    assert producer.flush(30) == 0
    assert errors == []
    assert len(delivered) == 500

    consumer = confluent_kafka.Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "unused-assign-only",
                                         "enable.auto.commit": False})
    consumer.assign([confluent_kafka.TopicPartition(topic, number, confluent_kafka.OFFSET_BEGINNING)
                     for number in range(3)])
    values = []
    try:
        deadline = time.monotonic() + 30
        while len(values) < 500 and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is None:
                continue
            assert message.error() is None, message.error()
            values.append((message.partition(), message.offset(), message.value()))
    finally:
        consumer.close()
    assert sorted(values) == sorted(delivered)
    mine = _read_with_kafkalite(cluster, topic, 3, 500)
    assert sorted(value for _, _, value in mine) == sorted(value for _, _, value in delivered)


def test_http_still_served_on_the_same_port(cluster: BrokerCluster) -> None:
    broker = cluster.any_live()
    host, port = broker.address.rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        connection.request("GET", "/v1/admin/describe_cluster")
        response = connection.getresponse()
        assert response.status == 200
        body = json.loads(response.read())
    finally:
        connection.close()
    assert len(body["brokers"]) == 3
