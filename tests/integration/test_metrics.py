"""``GET /metrics``: every broker's Prometheus metrics, parsed with ``prometheus_client``'s own
parser, follow the cluster's state. Real ZooKeeper and broker processes."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from kafkalite import KafkaConsumer, KafkaProducer, OffsetAndMetadata, TopicPartition, protocol
from kafkalite.record.batch import build_batch
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


def value_or_zero(cluster: BrokerCluster, broker_id: int, name: str, **labels: str) -> float:
    """A counter that has no series yet (nothing counted) reads as 0."""
    return samples(cluster, broker_id).get((name, tuple(sorted(labels.items()))), 0.0)


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
    expands = value(cluster, leader, "kafkalite_server_replica_manager_isr_expands_total")
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
    # the leader took the follower back into the ISR itself (the controller removed it)
    assert value(cluster, leader, "kafkalite_server_replica_manager_isr_expands_total") > expands
    # ... and each state change is one INFO line an operator can grep
    leader_log = cluster.brokers[leader].log_path.read_text(errors="replace")
    assert f"INFO {topic}-0: leader at epoch 0, isr " in leader_log
    assert re.search(rf"INFO {re.escape(topic)}-0: ISR is now \[[0-9, ]+\]", leader_log)
    follower_log = cluster.brokers[follower].log_path.read_text(errors="replace")
    assert f"INFO {topic}-0: follower of {leader} at epoch 0" in follower_log


def test_offline_partitions_count_a_partition_whose_replicas_are_all_down(cluster: BrokerCluster) -> None:
    topic = f"metrics-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(topic, partitions=1, replication_factor=1)
    cluster.wait_in_sync(topic)
    replica = leader_of(cluster, topic)
    name = "kafkalite_controller_offline_partitions_count"
    assert total(cluster, name) == 0
    elections = "kafkalite_controller_leader_elections_total"
    controller_before = cluster.controller_id()
    elections_before = value(cluster, controller_before, elections)
    cluster.brokers[replica].stop()
    try:
        cluster.wait_for(lambda: total(cluster, name) == 1 and total(
            cluster, "kafkalite_controller_active_controller_count") == 1, 60, "one offline partition")
    finally:
        cluster.brokers[replica].start()
        cluster.brokers[replica].wait_ready()
    cluster.wait_in_sync(topic, timeout=60)
    cluster.wait_for(lambda: total(cluster, name) == 0, 30, "no offline partition")
    # the partition's leader came back through an election of the (possibly new) controller
    controller = cluster.controller_id()
    assert value(cluster, controller, elections) > (elections_before if controller == controller_before else 0)
    assert total(cluster, "kafkalite_controller_unclean_leader_elections_total") == 0


def test_event_loop_lag_and_transaction_states_are_reported(cluster: BrokerCluster) -> None:
    allocated = "kafkalite_server_producer_ids_allocated_total"
    before = total(cluster, allocated)
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, enable_idempotence=True, acks="all")
    try:
        producer.send("metrics-idempotent", value=b"x").get(30)
    finally:
        producer.close()
    assert total(cluster, allocated) == before + 1  # one producer id for the idempotent producer
    for broker_id in cluster.brokers:
        metrics = samples(cluster, broker_id)
        assert 0 <= metrics[("kafkalite_server_event_loop_lag_seconds", ())] < 5
        assert metrics[("kafkalite_server_event_loop_lag_max_seconds", ())] >= \
            metrics[("kafkalite_server_event_loop_lag_seconds", ())]
        assert ("kafkalite_transaction_coordinator_transactions", (("state", "Ongoing"),)) in metrics
        assert ("kafkalite_group_coordinator_rebalances_total", ()) in metrics
        # every broker has read its registration, topics and partition states from ZooKeeper
        requests = metrics[("kafkalite_zookeeper_request_latency_seconds_count", ())]
        assert requests > 5 and 0 < metrics[("kafkalite_zookeeper_request_latency_seconds_sum", ())] < requests * 5


TOPIC_METRIC = "kafkalite_server_broker_topic_metrics_"


def produce_batch(cluster: BrokerCluster, leader: int, topic: str, batch: bytes) -> protocol.ProduceResult:
    request = protocol.ProduceRequest(-1, 10_000, [protocol.ProducePartition(topic, 0, batch)])
    body = b"".join(bytes(piece) for piece in protocol.encode_produce_request(request))
    answer = http(cluster.brokers[leader].address, "POST", protocol.PRODUCE, raw=body,
                  content_type=protocol.BINARY_CONTENT_TYPE)
    return protocol.decode_produce_response(answer)[0]


def test_bytes_and_messages_in_and_out_grow_by_what_is_produced_and_fetched(cluster: BrokerCluster) -> None:
    topic = f"metrics-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(topic, partitions=1, replication_factor=3)
    cluster.wait_in_sync(topic)
    leader = leader_of(cluster, topic)
    followers = [broker_id for broker_id in cluster.brokers if broker_id != leader]
    before = {broker_id: samples(cluster, broker_id) for broker_id in cluster.brokers}
    requests = ("kafkalite_network_requests_total", (("listener", "http"), ("request", "POST " + protocol.PRODUCE)))

    batch = build_batch([b"value-%d" % index for index in range(40)], [b"key-%d" % index for index in range(40)])
    assert produce_batch(cluster, leader, topic, batch).error_code == 0  # acks=all: the followers have it

    assert value(cluster, leader, TOPIC_METRIC + "bytes_in_total", topic=topic) == len(batch)
    assert value(cluster, leader, TOPIC_METRIC + "messages_in_total", topic=topic) == 40
    assert value(cluster, leader, TOPIC_METRIC + "total_produce_requests_total", topic=topic) == 1
    assert value(cluster, leader, TOPIC_METRIC + "failed_produce_requests_total", topic=topic) == 0
    after = samples(cluster, leader)
    assert after[requests] == before[leader].get(requests, 0) + 1
    histogram_count = ("kafkalite_network_request_total_time_seconds_count", requests[1])
    assert after[histogram_count] == after[requests]
    for follower in followers:  # replication: in on every follower, out of the leader
        assert value(cluster, follower, TOPIC_METRIC + "replication_bytes_in_total", topic=topic) == len(batch)
        assert value_or_zero(cluster, follower, TOPIC_METRIC + "bytes_in_total", topic=topic) == 0
    assert value(cluster, leader, TOPIC_METRIC + "replication_bytes_out_total", topic=topic) >= 2 * len(batch)

    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap, enable_auto_commit=False)
    try:
        consumer.assign([TopicPartition(topic, 0)])
        consumer.seek(TopicPartition(topic, 0), 0)
        got = []
        while len(got) < 40:
            for records in consumer.poll(timeout_ms=1000).values():
                got.extend(records)
    finally:
        consumer.close()
    # what the consumer fetched: the one batch (a fetch that found nothing adds nothing)
    assert value(cluster, leader, TOPIC_METRIC + "bytes_out_total", topic=topic) == len(batch)


def test_kafka_protocol_requests_are_counted_per_api(cluster: BrokerCluster) -> None:
    from confluent_kafka.admin import AdminClient

    name = "kafkalite_network_requests_total"
    before = sum(value_or_zero(cluster, broker_id, name, listener="kafka", request="Metadata")
                 for broker_id in cluster.brokers)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.list_topics(timeout=30)
    after = sum(value_or_zero(cluster, broker_id, name, listener="kafka", request="Metadata")
                for broker_id in cluster.brokers)
    assert after >= before + 1
    versions = sum(value_or_zero(cluster, broker_id, name, listener="kafka", request="ApiVersions")
                   for broker_id in cluster.brokers)
    assert versions >= 1


def test_consumer_lag_is_the_high_watermark_minus_the_committed_offset(cluster: BrokerCluster) -> None:
    topic, group = f"metrics-{uuid.uuid4().hex[:8]}", f"metrics-group-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(topic, partitions=3, replication_factor=3)
    cluster.wait_in_sync(topic)
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all")
    try:
        for index in range(300):
            producer.send(topic, value=b"value-%d" % index, partition=index % 3)
        producer.flush(30)
    finally:
        producer.close()
    committed = {0: 10, 1: 55, 2: 100}
    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap, group_id=group, enable_auto_commit=False)
    try:
        consumer.commit({TopicPartition(topic, number): OffsetAndMetadata(offset, "")
                         for number, offset in committed.items()})
    finally:
        consumer.close()
    coordinator = cluster.call("POST", protocol.FIND_COORDINATOR, {"key": group})["node_id"]
    leaders = {item["partition"]: item["leader"] for item in cluster.partitions(topic)}
    assert any(leader != coordinator for leader in leaders.values()), "some high watermark is asked of a leader"
    metrics = samples(cluster, coordinator)
    for number, offset in committed.items():
        labels = (("group", group), ("partition", str(number)), ("topic", topic))
        assert metrics[("kafkalite_group_coordinator_committed_offset", labels)] == offset
        assert metrics[("kafkalite_group_coordinator_consumer_lag", labels)] == 100 - offset
    assert metrics[("kafkalite_group_coordinator_groups", (("state", "Empty"),))] >= 1
    for broker_id in cluster.brokers:  # only the coordinator reports the group
        if broker_id != coordinator:
            assert not any(key[0] == "kafkalite_group_coordinator_consumer_lag" and ("group", group) in key[1]
                           for key in samples(cluster, broker_id))


MONITORING = Path(__file__).resolve().parents[2] / "compose" / "monitoring"


def test_the_grafana_dashboard_and_prometheus_config_name_only_metrics_the_brokers_serve(
        cluster: BrokerCluster) -> None:
    served: set[str] = set()
    for broker_id in cluster.brokers:
        text = http(cluster.brokers[broker_id].address, "GET", "/metrics", timeout=10)
        for family in text_string_to_metric_families(text.decode() if isinstance(text, bytes) else text):
            served.add(family.name)
            served.update(sample.name for sample in family.samples)
    dashboard = json.loads((MONITORING / "grafana" / "dashboards" / "kafkalite.json").read_text())
    expressions = [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]
    named = {name for expression in expressions for name in re.findall(r"\b(?:kafkalite|process)_[a-z_]+", expression)}
    assert len(named) >= 15
    assert sorted(name for name in named if name not in served and re.sub(r"_(total|bucket)$", "", name)
                  not in served) == []
    provisioned = yaml.safe_load((MONITORING / "grafana" / "provisioning" / "datasources" / "prometheus.yml")
                                 .read_text())["datasources"][0]
    assert all(panel["datasource"]["uid"] == provisioned["uid"] for panel in dashboard["panels"])
    scrape = yaml.safe_load((MONITORING / "prometheus.yml").read_text())["scrape_configs"][0]
    assert scrape["metrics_path"] == "/metrics"
    assert scrape["static_configs"][0]["targets"] == ["127.0.0.1:9092", "127.0.0.1:9093", "127.0.0.1:9094"]


def test_per_partition_series_can_be_turned_off(tmp_path_factory: pytest.TempPathFactory, zookeeper: Any) -> None:
    with running_cluster(tmp_path_factory, zookeeper, "metrics-lean", size=1,
                         extra_properties={"metrics.partition.series.enable": "false"}) as lean:
        lean.create_topic("quiet", partitions=3)
        lean.wait_in_sync("quiet")
        lean.wait_for(lambda: value(lean, 1, "kafkalite_server_replica_manager_partition_count") == 3, 30,
                      "the broker hosts the three partitions")
        names = {name for name, _ in samples(lean, 1)}
        assert not names & {"kafkalite_log_log_start_offset", "kafkalite_log_log_end_offset", "kafkalite_log_size"}
        assert value(lean, 1, "kafkalite_server_replica_manager_leader_count") == 3  # the broker-level gauges stay
