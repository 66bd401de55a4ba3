"""Batch admin requests finish what they accept, whatever happens to the client that sent them.

A client sends one CreateTopics request for many topics over Kafka's protocol and is gone at
once (its connection reset, as when the process is killed): every topic of the request is
still created and led. CreatePartitions and DeleteTopics of many topics likewise. And an
unmodified confluent-kafka ``AdminClient`` asking for 3,000 partitions in one request is killed
(SIGKILL) while the broker is still creating them: every topic of the request is created and led.
"""

from __future__ import annotations

import signal
import socket
import struct
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support import kafka_wire as wire
from tests.support.cluster import ROOT, BrokerCluster, running_cluster

pytestmark = [pytest.mark.integration]

TOPICS = 20
PARTITIONS = 10
#: the killed AdminClient's request: 30 topics of 100 partitions
LARGE_TOPICS = 30
LARGE_PARTITIONS = 100

#: an AdminClient that sends one CreateTopics request and then waits on it (until it is killed)
CREATE_SCRIPT = """
import sys
from confluent_kafka.admin import AdminClient, NewTopic
bootstrap, prefix, topics, partitions = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
admin = AdminClient({"bootstrap.servers": bootstrap})
futures = admin.create_topics([NewTopic(f"{prefix}-{number}", num_partitions=partitions, replication_factor=1)
                               for number in range(topics)], operation_timeout=120, request_timeout=180)
for future in futures.values():
    future.result(timeout=180)
"""


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


def test_create_topics_of_3000_partitions_from_a_killed_admin_client_creates_every_topic(
        cluster: BrokerCluster) -> None:
    prefix = f"killed-{uuid.uuid4().hex[:6]}"
    names = [f"{prefix}-{number}" for number in range(LARGE_TOPICS)]
    client = subprocess.Popen([sys.executable, "-c", CREATE_SCRIPT, cluster.bootstrap, prefix, str(LARGE_TOPICS),
                               str(LARGE_PARTITIONS)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        # kill -9 the client as soon as the broker has accepted the request (a topic of it exists),
        # while the broker is still creating the partitions
        deadline = time.monotonic() + 60
        accepted: list[str] = []
        all_led_at_kill = True
        while time.monotonic() < deadline and client.poll() is None:
            topics = cluster.metadata(names)["topics"]
            accepted = [topic["name"] for topic in topics if topic["error_code"] == 0]
            if accepted:
                all_led_at_kill = _all_led(cluster, names, LARGE_PARTITIONS)
                break
        assert client.poll() is None, f"the client ended before it was killed: {client.communicate()[0]!r}"
        assert accepted, "no topic of the request appeared within 60 s"
        client.send_signal(signal.SIGKILL)
        assert client.wait(10) == -signal.SIGKILL
    finally:
        if client.poll() is None:
            client.kill()
        client.communicate(timeout=10)  # reaps it and closes its pipe
    assert not all_led_at_kill, "every topic was already led when the client was killed: nothing was cut short"
    cluster.wait_for(lambda: _all_led(cluster, names, LARGE_PARTITIONS), 120,
                     f"all {LARGE_TOPICS} topics of {LARGE_PARTITIONS} partitions created and led")
    assert cluster.error_lines() == []
