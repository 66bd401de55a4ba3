"""Losing one ZooKeeper member under load costs no acknowledged write and no failed send.

A 3-node ZooKeeper ensemble and three brokers connected to all of its members (connect string
with every member and a chroot). The verifiable producer (acks=all, idempotence, unbounded
retries) writes at a bounded rate to a topic with replication factor 3 and
``min.insync.replicas=2`` while the verifiable consumer reads; one ZooKeeper member — the
quorum leader in one test, a follower in the other — is killed with SIGKILL, stays down for
longer than a session timeout while writes go on, and is restarted. The producer must report no send error at all, every
acknowledged value must be read back exactly once in order, no broker may lose its session
(the registrations still belong to the original processes) and every ISR must be complete.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient

from kafkalite import protocol
from tests.support.cluster import BrokerCluster
from tests.support.verifiable import (
    VerifiableConsumer,
    VerifiableProducer,
    check_delivery,
    end_offsets,
    longest_ack_gap,
)
from tests.support.zookeeper import ZooKeeperEnsemble

pytestmark = pytest.mark.integration

SESSION_TIMEOUT_MS = 6000
THROUGHPUT = 500
ACKS_PER_PHASE = 500
MAX_MESSAGES = 20_000


@pytest.fixture(scope="module")
def chroot_connect(zookeeper_ensemble: ZooKeeperEnsemble) -> str:
    return f"{zookeeper_ensemble.connect_string}/zk-faults-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, chroot_connect: str) -> Iterator[BrokerCluster]:
    brokers = BrokerCluster(tmp_path_factory.mktemp("zookeeper-faults"), chroot_connect, size=3,
                            session_timeout_ms=SESSION_TIMEOUT_MS,
                            extra_properties={"unclean.leader.election.enable": "false"}).start()
    try:
        yield brokers
    finally:
        brokers.stop()


def registration_epochs(connect: str, broker_ids: list[int]) -> dict[int, int | None]:
    """The czxid of each broker's registration znode (changes when a session is lost)."""
    client = KazooClient(hosts=connect, timeout=10.0)
    client.start(timeout=20)
    try:
        epochs: dict[int, int | None] = {}
        for broker_id in broker_ids:
            stat = client.exists(f"/brokers/ids/{broker_id}")
            epochs[broker_id] = None if stat is None else int(stat.czxid)
        return epochs
    finally:
        client.stop()
        client.close()


def session_events(cluster: BrokerCluster) -> list[str]:
    """Broker log lines about ZooKeeper connection trouble (for the failure message and report)."""
    lines = []
    for broker in cluster.brokers.values():
        for line in broker.log_tail(400).splitlines():
            lowered = line.lower()
            if "zookeeper" in lowered and any(word in lowered for word in ("suspend", "lost", "expired", "reconnect")):
                lines.append(f"broker {broker.broker_id}: {line}")
    return lines


@pytest.mark.parametrize("member", ["leader", "follower"])
def test_losing_one_zookeeper_member_under_load(cluster: BrokerCluster, zookeeper_ensemble: ZooKeeperEnsemble,
                                                chroot_connect: str, tmp_path: Path, member: str) -> None:
    topic = f"zk-member-{member}"
    cluster.create_topic(topic, partitions=2, replication_factor=3, configs={"min.insync.replicas": "2"})
    cluster.wait_in_sync(topic, timeout=30)
    broker_ids = sorted(cluster.brokers)
    registered = registration_epochs(chroot_connect, broker_ids)
    leader_index = zookeeper_ensemble.leader_index()
    assert leader_index is not None, "the ensemble has no leader"
    victim_index = leader_index if member == "leader" else next(
        index for index in range(len(zookeeper_ensemble.nodes)) if index != leader_index)

    consumer = VerifiableConsumer(cluster.bootstrap, topic, tmp_path / "consumer.stderr")
    producer = VerifiableProducer(cluster.bootstrap, topic, tmp_path / "producer.stderr", max_messages=MAX_MESSAGES,
                                  throughput=THROUGHPUT, value_prefix=f"zk-{member}")
    restarted = False
    try:
        consumer.start().wait_for_event("startup_complete", 30)
        producer.start().wait_for_event("startup_complete", 30)
        producer.wait_for_acks(ACKS_PER_PHASE, 60)

        zookeeper_ensemble.kill_node(victim_index)
        killed_at = time.monotonic()
        with producer.condition:
            acked_at_kill = producer.acked
        producer.wait_for_acks(acked_at_kill + ACKS_PER_PHASE, 60)  # brokers keep serving
        # Stay down longer than a session lasts: a broker whose connection was on the lost member
        # must have moved its session to another member by then.
        time.sleep(max(0.0, killed_at + SESSION_TIMEOUT_MS / 1000 + 2 - time.monotonic()))
        with producer.condition:
            acked_later = producer.acked
        producer.wait_for_acks(acked_later + ACKS_PER_PHASE, 30)
        # A member down is no reason for a broker to lose its session or for the ISR to shrink.
        survivors_connect = ",".join(node.connect_string for index, node in enumerate(zookeeper_ensemble.nodes)
                                     if index != victim_index) + "/" + chroot_connect.split("/", 1)[1]
        assert registration_epochs(survivors_connect, broker_ids) == registered, session_events(cluster)
        cluster.wait_in_sync(topic, timeout=30)
        down_for = time.monotonic() - killed_at

        zookeeper_ensemble.start_node(victim_index)
        restarted = True
        with producer.condition:
            acked_at_restart = producer.acked
        producer.wait_for_acks(acked_at_restart + ACKS_PER_PHASE, 60)

        producer.terminate(150)
        tool_data = producer.tool_data()
        assert tool_data is not None, producer.stderr_tail()
        cluster.wait_in_sync(topic, timeout=30)
        ends = end_offsets(cluster, topic, broker_ids[0])
        consumer.wait_until_read(ends, 60)
        consumer.terminate(60)
        report = check_delivery(producer.snapshot(), consumer.snapshot(), ends)
        gap = longest_ack_gap(producer)
        print(f"ZooKeeper {member} (node {victim_index + 1}) down {down_for:.1f} s: {report.describe()} "
              f"longest_ack_gap={gap}")

        assert report.errors == 0, f"send errors with one ZooKeeper member down: {report.error_kinds}\n" \
                                   f"{producer.stderr_tail()}\n" + "\n".join(session_events(cluster))
        assert report.clean, report.describe()
        assert tool_data["acked"] == tool_data["sent"] == report.acked, tool_data
        assert registration_epochs(chroot_connect, broker_ids) == registered, session_events(cluster)
        assert all(broker.alive for broker in cluster.brokers.values())
        metadata = cluster.metadata([topic])
        assert metadata["controller_id"] in broker_ids
        assert all(item["error_code"] == 0 for item in metadata["topics"][0]["partitions"])
    finally:
        for tool in (producer, consumer):
            tool.kill()
        if not restarted:
            zookeeper_ensemble.start_node(victim_index)


def test_brokers_are_connected_to_every_member(cluster: BrokerCluster, zookeeper_ensemble: ZooKeeperEnsemble,
                                               chroot_connect: str) -> None:
    """The brokers' connect string names all members and the chroot, and their state lives there."""
    for broker in cluster.brokers.values():
        config = dict(line.split("=", 1) for line in broker.config_path.read_text().splitlines() if "=" in line)
        assert config["zookeeper.connect"] == chroot_connect
    for node in zookeeper_ensemble.nodes:
        client = KazooClient(hosts=f"{node.connect_string}/{chroot_connect.split('/', 1)[1]}", timeout=10.0)
        client.start(timeout=20)
        try:
            assert sorted(int(child) for child in client.get_children("/brokers/ids")) == sorted(cluster.brokers)
        finally:
            client.stop()
            client.close()
    answer: Any = cluster.call("POST", protocol.METADATA, {"topics": None})
    assert len(answer["brokers"]) == 3
