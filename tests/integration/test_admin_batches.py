"""Batch admin requests finish what they accept, whatever happens to the client that sent them.

A client sends one CreateTopics request for many topics over Kafka's protocol and is gone at
once (its connection reset, as when the process is killed): every topic of the request is
still created and led. CreatePartitions and DeleteTopics of many topics likewise.
"""

from __future__ import annotations

import socket
import struct
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support import kafka_wire as wire
from tests.support.cluster import BrokerCluster, running_cluster

pytestmark = [pytest.mark.integration]

TOPICS = 20
PARTITIONS = 10


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, zookeeper: Any) -> Iterator[BrokerCluster]:
    with running_cluster(tmp_path_factory, zookeeper, "admin-batches", size=1) as brokers:
        yield brokers


def _send_and_vanish(cluster: BrokerCluster, frame: bytes) -> None:
    """Write one request and reset the connection at once (SO_LINGER 0), like a killed client."""
    host, port = cluster.brokers[1].address.rsplit(":", 1)
    connection = socket.create_connection((host, int(port)), timeout=10)
    connection.sendall(frame)
    connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    connection.close()


def _all_led(cluster: BrokerCluster, names: list[str], partitions: int) -> bool:
    topics = {topic["name"]: topic for topic in cluster.metadata(names)["topics"]}
    return all(name in topics and topics[name]["error_code"] == 0 and len(topics[name]["partitions"]) == partitions
               and all(partition["leader"] >= 0 for partition in topics[name]["partitions"]) for name in names)


def test_create_topics_from_a_client_gone_mid_request_creates_every_topic(cluster: BrokerCluster) -> None:
    prefix = f"vanish-{uuid.uuid4().hex[:6]}"
    names = [f"{prefix}-{number}" for number in range(TOPICS)]
    _send_and_vanish(cluster, wire.request_frame(19, 7, 1, wire.request(19, 7, {
        "topics": [{"name": name, "num_partitions": PARTITIONS, "replication_factor": 1, "assignments": [],
                    "configs": []} for name in names], "timeout": 30_000, "validate_only": False})))
    cluster.wait_for(lambda: _all_led(cluster, names, PARTITIONS), 60, f"all {TOPICS} topics created and led")

    # More partitions for every topic, and then their deletion, from clients gone as fast.
    _send_and_vanish(cluster, wire.request_frame(37, 3, 2, wire.request(37, 3, {
        "topics": [{"name": name, "count": PARTITIONS + 2, "assignments": None} for name in names],
        "timeout": 30_000, "validate_only": False})))
    cluster.wait_for(lambda: _all_led(cluster, names, PARTITIONS + 2), 60, "every topic grown and led")
    _send_and_vanish(cluster, wire.request_frame(20, 6, 3, wire.request(20, 6, {
        "topics": [{"name": name, "topic_id": None} for name in names], "timeout": 30_000})))
    cluster.wait_for(lambda: not {topic["name"] for topic in cluster.metadata()["topics"]} & set(names), 60,
                     "every topic deleted")
    assert cluster.error_lines() == []
