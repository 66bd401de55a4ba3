"""``GET /metrics``: every broker's Prometheus metrics, parsed with ``prometheus_client``'s own
parser, follow the cluster's state. Real ZooKeeper and broker processes."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from kafkalite import KafkaProducer
from tests.support.cluster import BrokerCluster, http, running_cluster

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, zookeeper: Any) -> Iterator[BrokerCluster]:
    with running_cluster(tmp_path_factory, zookeeper, "metrics") as brokers:
        yield brokers


def samples(cluster: BrokerCluster, broker_id: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """{(sample name, sorted labels): value} of one broker's /metrics."""
    text = http(cluster.brokers[broker_id].address, "GET", "/metrics", timeout=10)
    text = text.decode() if isinstance(text, bytes) else text
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


def value(cluster: BrokerCluster, broker_id: int, name: str, **labels: str) -> float:
    return samples(cluster, broker_id)[(name, tuple(sorted(labels.items())))]


def total(cluster: BrokerCluster, name: str) -> float:
    """``name`` summed over the live brokers."""
    return sum(value(cluster, broker_id, name) for broker_id, broker in cluster.brokers.items() if broker.alive)


def leader_of(cluster: BrokerCluster, topic: str) -> int:
    return int(cluster.wait_for(lambda: next((item["leader"] for item in cluster.partitions(topic)
                                              if item["leader"] > 0), None), 30, f"a leader for {topic}"))


def test_exactly_one_active_controller_and_the_session_state(cluster: BrokerCluster) -> None:
    assert total(cluster, "kafkalite_controller_active_controller_count") == 1
    controller = cluster.controller_id()
    assert value(cluster, controller, "kafkalite_controller_active_controller_count") == 1
    for broker_id in cluster.brokers:
        assert value(cluster, broker_id, "kafkalite_zookeeper_session_state", state="CONNECTED") == 1
        assert value(cluster, broker_id, "kafkalite_zookeeper_session_state", state="SUSPENDED") == 0
        assert value(cluster, broker_id, "kafkalite_server_serving") == 1
        assert value(cluster, broker_id, "process_cpu_seconds_total") > 0


def test_log_end_offset_and_size_follow_what_is_produced(cluster: BrokerCluster) -> None:
    topic = f"metrics-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(topic, partitions=1, replication_factor=3)
    cluster.wait_in_sync(topic)
    leader = leader_of(cluster, topic)
    before = value(cluster, leader, "kafkalite_log_size", topic=topic, partition="0")
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all")
    try:
        for index in range(250):
            producer.send(topic, value=b"value-%d" % index, partition=0)
        producer.flush(30)
    finally:
        producer.close()
    for broker_id in cluster.brokers:  # the followers hold the records once they are acknowledged
        assert value(cluster, broker_id, "kafkalite_log_log_end_offset", topic=topic, partition="0") == 250
        assert value(cluster, broker_id, "kafkalite_log_log_start_offset", topic=topic, partition="0") == 0
    assert value(cluster, leader, "kafkalite_log_size", topic=topic, partition="0") > before + 250 * 7


def under_replicated_in_metadata(cluster: BrokerCluster, leader: int) -> int:
    """Partitions ``leader`` leads whose ISR is smaller than their replicas, as the metadata says."""
    return sum(1 for item in cluster.metadata(broker_id=leader)["topics"] for partition in item["partitions"]
               if partition["leader"] == leader and len(partition["isr"]) < len(partition["replicas"]))


def test_under_replicated_partitions_while_a_follower_is_stopped(cluster: BrokerCluster) -> None:
    topic = f"metrics-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(topic, partitions=1, replication_factor=3)
    for name in [item["name"] for item in cluster.metadata()["topics"]]:
        cluster.wait_in_sync(name, timeout=60)  # the module's earlier topics too
    leader = leader_of(cluster, topic)
    follower = next(broker_id for broker_id in cluster.brokers
                    if broker_id not in (leader, cluster.controller_id()))
    name = "kafkalite_server_replica_manager_under_replicated_partitions"
    assert value(cluster, leader, name) == 0
    cluster.brokers[follower].stop()  # controlled shutdown: it leaves the ISR at once
    try:
        # this topic's partition, and any other the leader leads with a replica on the follower
        cluster.wait_for(lambda: any(item["leader"] == leader and follower not in item["isr"]
                                     for item in cluster.partitions(topic, leader)), 30, "the ISR to shrink")
        cluster.wait_for(lambda: value(cluster, leader, name) == under_replicated_in_metadata(cluster, leader) >= 1,
                         30, "the under-replicated partitions the metadata shows")
    finally:
        cluster.brokers[follower].start()
        cluster.brokers[follower].wait_ready()
    cluster.wait_in_sync(topic, timeout=60)
    cluster.wait_for(lambda: value(cluster, leader, name) == under_replicated_in_metadata(cluster, leader) == 0, 60,
                     "no under-replicated partition")


def test_offline_partitions_count_a_partition_whose_replicas_are_all_down(cluster: BrokerCluster) -> None:
    topic = f"metrics-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(topic, partitions=1, replication_factor=1)
    cluster.wait_in_sync(topic)
    replica = leader_of(cluster, topic)
    name = "kafkalite_controller_offline_partitions_count"
    assert total(cluster, name) == 0
    cluster.brokers[replica].stop()
    try:
        cluster.wait_for(lambda: total(cluster, name) == 1 and total(
            cluster, "kafkalite_controller_active_controller_count") == 1, 60, "one offline partition")
    finally:
        cluster.brokers[replica].start()
        cluster.brokers[replica].wait_ready()
    cluster.wait_in_sync(topic, timeout=60)
    cluster.wait_for(lambda: total(cluster, name) == 0, 30, "no offline partition")
