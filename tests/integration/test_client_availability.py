"""A frozen broker stalls only its own partitions, and only until a new leader is elected.

Real ZooKeeper and broker processes; the broker is frozen with SIGSTOP, so it keeps its TCP
connections and listening socket open and never answers — the silent failure a client cannot
tell from a slow broker except by time.

* The verifiable producer (acks=all, idempotence) writes keyed records to three partitions led
  by three different brokers while one leader is frozen for longer than the ZooKeeper session
  timeout: the two other partitions keep being acknowledged without a pause, the frozen leader's
  partition is acknowledged again within the session timeout + 5 s (once the controller elected
  a new leader), and after SIGCONT nothing acknowledged is lost, duplicated or reordered.
  Four brokers, so that the other partitions' replicas do not include the frozen broker: a
  partition whose in-sync follower is frozen waits ``replica.lag.time.max.ms`` before acks=all
  completes, by design (Kafka's too); this test is about what the client does.
* Metadata refresh with a frozen broker among the known ones completes via another broker within
  the per-attempt timeout, and asks the frozen one only once.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest

from kafkalite import protocol
from kafkalite.client.metadata import MetadataManager
from kafkalite.topics import murmur2, to_positive
from kafkalite.transport import AsyncTransport
from tests.support.cluster import BrokerCluster
from tests.support.verifiable import VerifiableConsumer, VerifiableProducer, check_delivery, end_offsets

pytestmark = pytest.mark.integration

SESSION_TIMEOUT_MS = 6000
KEYS = 30
THROUGHPUT = 300
MAX_OTHER_GAP_S = 1.0
TOPIC_CONFIGS = {"min.insync.replicas": "2", "unclean.leader.election.enable": "false"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, zookeeper: Any) -> Iterator[BrokerCluster]:
    directory = tmp_path_factory.mktemp("client-availability")
    brokers = BrokerCluster(directory, f"{zookeeper.connect_string}/client-avail-{uuid.uuid4().hex[:8]}", size=4,
                            session_timeout_ms=SESSION_TIMEOUT_MS,
                            extra_properties={"unclean.leader.election.enable": "false"}).start()
    try:
        yield brokers
    finally:
        for broker in brokers.brokers.values():
            if broker.alive:
                broker.thaw()
        brokers.stop()


def healthy_controller(cluster: BrokerCluster) -> int:
    """Wait until every broker is registered and one controller is known everywhere."""
    def agreed() -> int | None:
        controllers = set()
        for broker_id in cluster.brokers:
            described = cluster.describe(broker_id)
            if len(described["brokers"]) != cluster.size or described["controller_id"] <= 0:
                return None
            controllers.add(described["controller_id"])
        return controllers.pop() if len(controllers) == 1 else None
    return int(cluster.wait_for(agreed, 60, "every broker registered and one controller known everywhere"))


def create_topic(cluster: BrokerCluster, name: str, assignment: dict[str, list[int]]) -> None:
    answer = cluster.call("POST", protocol.CREATE_TOPICS, {"topics": [{
        "name": name, "replica_assignment": assignment, "configs": TOPIC_CONFIGS}], "timeout_ms": 30000})
    assert answer["topics"][0]["error_code"] == 0, answer


def ack_times(producer: VerifiableProducer) -> dict[int, list[float]]:
    """Acknowledgement times (seconds since the epoch) per partition, in order."""
    times: dict[int, list[float]] = {}
    for event in producer.snapshot():
        if event.get("name") == "producer_send_success":
            times.setdefault(int(event["partition"]), []).append(int(event["time_ms"]) / 1000)
    return {partition: sorted(items) for partition, items in times.items()}


def longest_gap(times: list[float], start: float, end: float) -> float:
    """The longest time without an acknowledgement between ``start`` and ``end``."""
    inside = [start, *(moment for moment in times if start < moment < end), end]
    return max(later - earlier for earlier, later in pairwise(inside))


def test_a_frozen_leader_stalls_only_its_own_partition(cluster: BrokerCluster, tmp_path: Path) -> None:
    controller = healthy_controller(cluster)
    victim, first, second = [broker_id for broker_id in sorted(cluster.brokers) if broker_id != controller][:3]
    # the victim leads partition 0; partitions 1 and 2 are led by two other brokers and do not
    # replicate to the victim (see the module docstring)
    assignment = {"0": [victim, first, second], "1": [first, second, controller], "2": [second, controller, first]}
    topic = f"frozen-leader-{uuid.uuid4().hex[:6]}"
    create_topic(cluster, topic, assignment)
    cluster.wait_in_sync(topic, timeout=30, broker_id=controller)
    partitions_of_keys = {to_positive(murmur2(str(key).encode())) % 3 for key in range(KEYS)}
    assert partitions_of_keys == {0, 1, 2}

    consumer = VerifiableConsumer(cluster.bootstrap, topic, tmp_path / "consumer.stderr")
    producer = VerifiableProducer(cluster.bootstrap, topic, tmp_path / "producer.stderr", max_messages=200_000,
                                  throughput=THROUGHPUT, value_prefix="frozen", repeating_keys=KEYS)
    frozen = cluster.brokers[victim]
    thawed = False
    try:
        consumer.start().wait_for_event("startup_complete", 30)
        producer.start().wait_for_event("startup_complete", 30)
        producer.wait_for(lambda: all(len(ack_times(producer).get(partition, [])) >= 50 for partition in range(3)),
                          60, "acknowledgements on every partition")

        frozen_at = time.time()
        frozen.freeze()
        # the frozen leader cannot acknowledge anything once stopped: an acknowledgement of
        # partition 0 a second after the freeze comes from its new leader
        producer.wait_for(lambda: any(moment > frozen_at + 1 for moment in ack_times(producer).get(0, [])),
                          SESSION_TIMEOUT_MS / 1000 + 20, "partition 0 acknowledged by its new leader")
        with producer.condition:
            acked = producer.acked
        # a second more of writes with the victim still frozen, and frozen past the session timeout
        producer.wait_for(lambda: producer.acked >= acked + THROUGHPUT
                          and time.time() > frozen_at + SESSION_TIMEOUT_MS / 1000 + 1, 30,
                          "writes going on while the victim stays frozen past the session timeout")
        thawed_at = time.time()
        frozen.thaw()
        thawed = True

        times = ack_times(producer)
        resumed = min(moment for moment in times[0] if moment > frozen_at + 1)
        assert resumed - frozen_at <= SESSION_TIMEOUT_MS / 1000 + 5, \
            f"partition 0 was acknowledged again {resumed - frozen_at:.1f} s after its leader froze"
        assert thawed_at - frozen_at > SESSION_TIMEOUT_MS / 1000  # frozen past the session timeout
        gaps = {partition: longest_gap(times[partition], frozen_at, thawed_at) for partition in (1, 2)}
        assert all(gap <= MAX_OTHER_GAP_S for gap in gaps.values()), \
            f"partitions led by live brokers paused while broker {victim} was frozen: {gaps}"

        healthy_controller(cluster)
        cluster.wait_in_sync(topic, timeout=60, broker_id=controller)
        with producer.condition:
            acked = producer.acked
        producer.wait_for_acks(acked + THROUGHPUT, 60)
        producer.terminate(60)
        ends = end_offsets(cluster, topic, controller)
        consumer.wait_until_read(ends, 60)
        consumer.terminate(60)
        report = check_delivery(producer.snapshot(), consumer.snapshot(), ends)
        assert report.clean, report.describe()
        assert report.errors == 0, (report.error_kinds, producer.stderr_tail())
        tool_data = producer.tool_data()
        assert tool_data is not None and tool_data["acked"] == tool_data["sent"] == report.acked, tool_data
    finally:
        if not thawed:
            frozen.thaw()
        for tool in (producer, consumer):
            tool.kill()


def test_metadata_refresh_goes_around_a_frozen_broker(cluster: BrokerCluster) -> None:
    controller = healthy_controller(cluster)
    victim = next(broker_id for broker_id in sorted(cluster.brokers) if broker_id != controller)
    topic = f"metadata-frozen-{uuid.uuid4().hex[:6]}"
    cluster.create_topic(topic, partitions=2, replication_factor=3, configs=TOPIC_CONFIGS)
    cluster.wait_in_sync(topic, timeout=30, broker_id=controller)
    per_attempt_s = 3.0  # the default metadata_request_timeout_ms

    async def refreshes() -> list[float]:
        transport = AsyncTransport(request_timeout_ms=30_000)
        manager = MetadataManager(transport, cluster.bootstrap, request_timeout_ms=30_000)
        manager.add_topics([topic])
        try:
            await manager.refresh()  # every broker known, none frozen yet
            cluster.brokers[victim].freeze()
            durations = []
            for _ in range(len(cluster.brokers)):  # the rotation puts the frozen broker first at least once
                started = time.monotonic()
                view = await manager.refresh()
                durations.append(time.monotonic() - started)
                assert sorted(view.partitions[topic]) == [0, 1]
            assert manager._candidates()[-1] == cluster.brokers[victim].address
            return durations
        finally:
            cluster.brokers[victim].thaw()
            await manager.close()
            await transport.close()

    durations = asyncio.run(refreshes())
    assert max(durations) < per_attempt_s + 1.5, durations
    assert sum(durations) < per_attempt_s + 2.5, durations  # the frozen broker was asked once
    healthy_controller(cluster)
