"""Two listeners per broker, INTERNAL and EXTERNAL, with Kafka's meaning: every broker binds both,
replicates over ``inter.broker.listener.name``, and a Metadata or FindCoordinator answer carries
the addresses advertised for the listener the client connected to (the setup of a bridged Docker
network: containers use INTERNAL, the host uses EXTERNAL)."""

from __future__ import annotations

import socket
import struct
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from kafkalite.errors import CoordinatorNotAvailableError
from tests.support import kafka_wire as wire
from tests.support.cluster import BrokerCluster, free_port

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, zookeeper) -> Iterator[tuple[BrokerCluster, dict[int, int]]]:  # type: ignore[no-untyped-def]
    connect = f"{zookeeper.connect_string}/kafka-listeners-{uuid.uuid4().hex[:8]}"
    brokers = BrokerCluster(tmp_path_factory.mktemp("kafka-listeners"), connect, size=3)
    external = {broker_id: free_port() for broker_id in brokers.brokers}
    for broker_id, broker in brokers.brokers.items():
        brokers.per_broker_properties[broker_id] = {
            "listeners": f"INTERNAL://127.0.0.1:{broker.port},EXTERNAL://0.0.0.0:{external[broker_id]}",
            "advertised.listeners": f"INTERNAL://127.0.0.1:{broker.port},EXTERNAL://localhost:{external[broker_id]}",
            "listener.security.protocol.map": "INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT",
            "inter.broker.listener.name": "INTERNAL"}
    brokers.start()
    try:
        yield brokers, external
    finally:
        brokers.stop()
    assert brokers.error_lines() == []


def _ask(port: int, api_key: int, version: int, body: Any) -> Any:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as connection:
        connection.sendall(wire.request_frame(api_key, version, 1, body))
        received = b""
        while len(received) < 4 or len(received) < 4 + struct.unpack_from(">i", received)[0]:
            chunk = connection.recv(65536)
            assert chunk, "the broker closed the connection"
            received += chunk
    return wire.read_response(received, api_key, version)[1]


def _find_coordinator(port: int, timeout: float = 30.0) -> Any:
    """FindCoordinator, asked again while it answers COORDINATOR_NOT_AVAILABLE, as Kafka's clients
    do: the first look-up creates __consumer_offsets, whose leaders may take a while on a busy machine."""
    deadline = time.monotonic() + timeout
    while True:
        answer = _ask(port, 10, 3, wire.request(10, 3, {"key": "some-group", "key_type": 0}))
        if answer.error_code != CoordinatorNotAvailableError.errno or time.monotonic() > deadline:
            return answer
        time.sleep(0.1)  # the client's retry backoff


def test_metadata_carries_the_advertised_addresses_of_the_connected_listener(
        cluster: tuple[BrokerCluster, dict[int, int]]) -> None:
    brokers, external = cluster
    internal = {broker_id: broker.port for broker_id, broker in brokers.brokers.items()}
    for broker_id in brokers.brokers:
        inside = _ask(internal[broker_id], 3, 12, wire.metadata_request(12, None))
        outside = _ask(external[broker_id], 3, 12, wire.metadata_request(12, None))
        assert {(item.node_id, item.host, item.port) for item in inside.brokers} == {
            (number, "127.0.0.1", port) for number, port in internal.items()}
        assert {(item.node_id, item.host, item.port) for item in outside.brokers} == {
            (number, "localhost", port) for number, port in external.items()}
        coordinator = _find_coordinator(external[broker_id])
        assert coordinator.error_code == 0
        assert (coordinator.host, coordinator.port) == ("localhost", external[coordinator.node_id])


def test_a_client_outside_works_through_external_while_brokers_replicate_over_internal(
        cluster: tuple[BrokerCluster, dict[int, int]]) -> None:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    brokers, external = cluster
    topic = f"kl-{uuid.uuid4().hex[:8]}"
    brokers.create_topic(topic, partitions=2, replication_factor=3, configs={"min.insync.replicas": "2"})
    brokers.wait_in_sync(topic, timeout=60)
    bootstrap = ",".join(f"localhost:{port}" for port in external.values())
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    for index in range(100):
        producer.send(topic, value=f"e{index}".encode(), partition=index % 2)
    producer.flush(30)
    producer.close()
    # acks=all succeeded with min.insync.replicas=2: the followers replicated over INTERNAL
    assert all(sorted(item["isr"]) == sorted(item["replicas"]) for item in brokers.wait_in_sync(topic, 60))
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, consumer_timeout_ms=10_000, enable_auto_commit=False)
    partitions = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
    consumer.assign(partitions)
    consumer.seek_to_beginning(*partitions)
    values = []
    for record in consumer:
        values.append(record.value)
        if len(values) == 100:
            break
    consumer.close()
    assert sorted(values) == sorted(f"e{index}".encode() for index in range(100))
