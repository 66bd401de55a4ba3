"""Availability across a network partition, with ZooKeeper, brokers and clients on hosts of their own.

The test builds its own private network (:mod:`tests.support.netns`: a bridge, one network
namespace per host, addresses that exist only there) and runs ZooKeeper, three brokers and the
verifiable producer and consumer each in its own namespace. The topic has three partitions,
replication factor 3, ``min.insync.replicas=2`` and unclean election off; the producer writes
with acks=all throughout.

* *A leader cut off from ZooKeeper and from the other brokers* (iptables DROP both ways; the
  clients still reach it): an acks=all produce it accepted after the cut and a consumer's long
  poll parked there are answered NOT_LEADER_OR_FOLLOWER as soon as it fences itself, long
  before their timeouts; every partition is writable again (acks=all, asked of the leader the
  reachable brokers name) within ZooKeeper's session timeout + 5 s of the cut, and the
  producer (keyed records, so that every partition gets some all the time) acknowledges
  records on every partition again within the same bound, while the victim is still cut off.
* *ZooKeeper cut off from every broker past the session timeout* (every session expires, every
  broker re-registers, a new controller is elected): the new controller never writes a leader
  of -1 nor an ISR without a replica that is registered and was in sync, and every partition is
  writable again soon after the heal.

After the heal every acknowledged record is read back, exactly once, at its acknowledged offset.
Skipped with the reason when namespaces cannot be built here (not root, no ip or iptables).
"""

from __future__ import annotations

import concurrent.futures
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient

from kafkalite import protocol
from kafkalite.coord import znodes
from kafkalite.record.batch import build_batch
from tests.support.cluster import BrokerCluster, HttpError, http
from tests.support.netns import NamespacedZooKeeper, NetworkLab, place_cluster, unavailable_reason
from tests.support.verifiable import VerifiableConsumer, VerifiableProducer, check_delivery, end_offsets
from tests.support.zookeeper import ensure_zookeeper_installed

pytestmark = pytest.mark.integration

SESSION_TIMEOUT_MS = 6000
REQUEST_TIMEOUT_MS = 30_000
TOPIC = "split"
PARTITIONS = 3
BROKERS = {1: "broker1", 2: "broker2", 3: "broker3"}
#: Keyed records (key i % KEYS) reach every partition all the time; keyless ones follow the sticky
#: partitioner, which may leave a partition without records for seconds.
KEYS = 30


@pytest.fixture(scope="module")
def lab() -> Iterator[NetworkLab]:
    reason = unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    ensure_zookeeper_installed()
    with NetworkLab() as network:
        for name in ("zookeeper", *BROKERS.values(), "client"):
            network.add_host(name)
        yield network


@pytest.fixture
def cluster(lab: NetworkLab, tmp_path: Path) -> Iterator[BrokerCluster]:
    zookeeper = NamespacedZooKeeper(lab, "zookeeper", tmp_path / "zookeeper")
    zookeeper.start()
    brokers = BrokerCluster(tmp_path, f"{zookeeper.connect_string}/split-{uuid.uuid4().hex[:8]}", size=3,
                            session_timeout_ms=SESSION_TIMEOUT_MS,
                            extra_properties={"unclean.leader.election.enable": "false",
                                              "min.insync.replicas": "2"})
    place_cluster(brokers, lab, BROKERS)
    try:
        brokers.start(timeout=60)
        yield brokers
    finally:
        lab.heal_all()
        brokers.kill_all()
        if zookeeper.process is not None and zookeeper.process.poll() is None:
            zookeeper.process.kill()
            zookeeper.process.wait(10)


def produce_once(address: str, partition: int, value: bytes, timeout_ms: int) -> protocol.ProduceResult:
    request = protocol.ProduceRequest(-1, timeout_ms, [protocol.ProducePartition(TOPIC, partition,
                                                                                 build_batch([value]))])
    body = b"".join(bytes(piece) for piece in protocol.encode_produce_request(request))
    answer = http(address, "POST", protocol.PRODUCE, raw=body, content_type=protocol.BINARY_CONTENT_TYPE,
                  timeout=timeout_ms / 1000 + 10)
    return protocol.decode_produce_response(answer)[0]


def long_poll(address: str, partition: int, offset: int, max_wait_ms: int) -> protocol.FetchResult:
    """A consumer fetch that waits up to ``max_wait_ms`` for a record at ``offset``."""
    request = protocol.FetchRequest([protocol.FetchPartition(TOPIC, partition, offset)], max_wait_ms=max_wait_ms,
                                    min_bytes=1)
    answer = http(address, "POST", protocol.FETCH, raw=protocol.encode_fetch_request(request),
                  content_type=protocol.BINARY_CONTENT_TYPE, timeout=max_wait_ms / 1000 + 10)
    return protocol.decode_fetch_response(answer)[0]


def leader_seen_by(cluster: BrokerCluster, observers: list[int], partition: int) -> int:
    """The leader the first answering observer names (-1 when none knows one)."""
    for observer in observers:
        try:
            for item in cluster.partitions(TOPIC, observer):
                if item["partition"] == partition:
                    return int(item["leader"])
        except (OSError, HttpError):
            continue
    return -1


def time_until_writable(cluster: BrokerCluster, observers: list[int], partition: int, since: float,
                        limit: float) -> float:
    """Seconds from ``since`` to the first acks=all write to ``partition`` that succeeds, asking
    the leader the observers name, one short write at a time."""
    deadline = since + limit
    attempt = 0
    while time.monotonic() < deadline:
        attempt += 1
        leader = leader_seen_by(cluster, observers, partition)
        if leader >= 0:
            try:
                value = b"probe-%d-%d" % (partition, attempt)
                result = produce_once(cluster.brokers[leader].address, partition, value, 2000)
                if result.error_code == 0:
                    return time.monotonic() - since
            except (OSError, HttpError):
                pass
        time.sleep(0.1)
    raise AssertionError(f"{TOPIC}-{partition} not writable within {limit:.0f} s")


def first_ack_after(producer: VerifiableProducer, partition: int, wall_ms: float,
                    locked: bool = False) -> float | None:
    """Seconds from ``wall_ms`` (wall clock, ms) to the producer's first acknowledgement on
    ``partition`` (None if there is none yet); ``locked``: the caller holds the event lock."""
    times = [int(event["time_ms"]) for event in (producer.events if locked else producer.snapshot())
             if event.get("name") == "producer_send_success" and int(event["partition"]) == partition
             and int(event["time_ms"]) > wall_ms]
    return (min(times) - wall_ms) / 1000 if times else None


def start_clients(cluster: BrokerCluster, lab: NetworkLab, tmp_path: Path,
                  prefix: str) -> tuple[VerifiableProducer, VerifiableConsumer]:
    consumer = VerifiableConsumer(cluster.bootstrap, TOPIC, tmp_path / "consumer.stderr")
    producer = VerifiableProducer(cluster.bootstrap, TOPIC, tmp_path / "producer.stderr", max_messages=-1,
                                  throughput=200, value_prefix=prefix, repeating_keys=KEYS,
                                  properties={"request.timeout.ms": str(REQUEST_TIMEOUT_MS)})
    for tool in (consumer, producer):
        tool.command_prefix = lab.prefix("client")
    consumer.start().wait_for_event("startup_complete", 60)
    producer.start().wait_for_event("startup_complete", 60)
    return producer, consumer


def read_back_everything(cluster: BrokerCluster, producer: VerifiableProducer, consumer: VerifiableConsumer,
                         observer: int) -> None:
    producer.terminate(150)
    assert producer.tool_data() is not None, f"the producer printed no tool_data\n{producer.stderr_tail()}"
    cluster.wait_in_sync(TOPIC, timeout=60, broker_id=observer)
    ends = end_offsets(cluster, TOPIC, observer)
    consumer.wait_until_read(ends, 90)
    consumer.terminate(60)
    report = check_delivery(producer.snapshot(), consumer.snapshot(), ends)
    print(f"delivery: {report.describe()}")
    assert report.acked > 0
    assert report.clean, report.describe()


def test_leader_cut_off_fails_pending_writes_and_every_partition_is_writable_again(
        cluster: BrokerCluster, lab: NetworkLab, tmp_path: Path) -> None:
    cluster.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=3, configs={"min.insync.replicas": "2"})
    cluster.wait_in_sync(TOPIC, timeout=30)
    producer, consumer = start_clients(cluster, lab, tmp_path, "cut")
    try:
        producer.wait_for_acks(300, 60)
        victim = next(item["leader"] for item in cluster.partitions(TOPIC) if item["partition"] == 0)
        observers = [broker_id for broker_id in sorted(cluster.brokers) if broker_id != victim]
        victim_host = BROKERS[victim]

        for other in ("zookeeper", *(BROKERS[broker_id] for broker_id in observers)):
            lab.cut(victim_host, other)
        cut_at, cut_wall_ms = time.monotonic(), time.time() * 1000

        # An acks=all write the victim accepts now cannot be replicated, and a consumer's long
        # poll at its (now frozen) high watermark cannot be served: both must be answered
        # NOT_LEADER_OR_FOLLOWER once the victim fences itself, not at their timeouts.
        address = cluster.brokers[victim].address
        high_watermark = int(http(address, "POST", protocol.LIST_OFFSETS, {"partitions": [
            {"topic": TOPIC, "partition": 0, "timestamp": protocol.LATEST_TIMESTAMP}]})["partitions"][0]["offset"])

        def timed(call: Any) -> tuple[float, Any]:
            started = time.monotonic()
            outcome = call()
            return time.monotonic() - started, outcome

        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            pending_write = pool.submit(timed, lambda: produce_once(address, 0, b"stranded", REQUEST_TIMEOUT_MS))
            pending_read = pool.submit(timed, lambda: long_poll(address, 0, high_watermark, REQUEST_TIMEOUT_MS))
            (write_after, written), (read_after, read) = pending_write.result(), pending_read.result()
        print(f"on the cut-off leader, a pending acks=all write was answered after {write_after:.1f} s "
              f"({protocol.error_for(written.error_code).message}), a long-poll fetch after {read_after:.1f} s "
              f"({protocol.error_for(read.error_code).message})")
        assert protocol.error_for(written.error_code).message == "NOT_LEADER_OR_FOLLOWER", written
        assert protocol.error_for(read.error_code).message == "NOT_LEADER_OR_FOLLOWER", read
        assert write_after < SESSION_TIMEOUT_MS / 1000 and read_after < SESSION_TIMEOUT_MS / 1000

        limit = SESSION_TIMEOUT_MS / 1000 + 5
        with concurrent.futures.ThreadPoolExecutor(PARTITIONS) as pool:
            delays = list(pool.map(lambda partition: time_until_writable(cluster, observers, partition, cut_at,
                                                                         limit + 10), range(PARTITIONS)))
        print("writable again after the cut (s): " + ", ".join(f"p{p}={delay:.1f}" for p, delay in enumerate(delays)))
        assert all(delay <= limit for delay in delays), (delays, limit)
        assert leader_seen_by(cluster, observers, 0) != victim

        # The producer itself, still on the client host, acknowledges records on every partition
        # again within the same bound (metadata refresh around the cut-off broker, leader epochs,
        # leader hints), while the victim is still cut off.
        producer.wait_for(lambda: all(first_ack_after(producer, partition, cut_wall_ms, locked=True) is not None
                                      for partition in range(PARTITIONS)), 60,
                          "an acknowledgement on every partition after the cut")
        first_acks = [first_ack_after(producer, partition, cut_wall_ms) for partition in range(PARTITIONS)]
        print("the producer's first acknowledgement after the cut (s): " + ", ".join(
            f"p{partition}={delay:.1f}" for partition, delay in enumerate(first_acks)))
        assert all(delay is not None and delay <= limit for delay in first_acks), (first_acks, limit)

        with producer.condition:
            acked_at_heal = producer.acked
        lab.heal_all()
        cluster.wait_in_sync(TOPIC, timeout=60, broker_id=observers[0])
        producer.wait_for_acks(acked_at_heal + 300, 90)
        read_back_everything(cluster, producer, consumer, observers[0])
    finally:
        producer.kill()
        consumer.kill()


class StateRecorder:
    """Every version of every partition state znode of the topic, seen from the test process."""

    def __init__(self, connect_string: str) -> None:
        self.client = KazooClient(hosts=connect_string, timeout=10)
        self.client.start(timeout=15)
        self.lock = threading.Lock()
        self.states: list[tuple[float, int, znodes.PartitionState]] = []
        for partition in range(PARTITIONS):
            self.client.DataWatch(znodes.partition_state_path(TOPIC, partition), self._callback(partition))

    def _callback(self, partition: int) -> Any:
        def on_data(data: bytes | None, stat: Any) -> None:
            if data:
                with self.lock:
                    self.states.append((time.monotonic(), partition, znodes.PartitionState.from_bytes(data)))
        return on_data

    def since(self, moment: float) -> list[tuple[int, znodes.PartitionState]]:
        with self.lock:
            return [(partition, state) for seen, partition, state in self.states if seen >= moment]

    def close(self) -> None:
        self.client.stop()
        self.client.close()


def test_controller_after_a_zookeeper_outage_keeps_live_replicas_and_leaders(
        cluster: BrokerCluster, lab: NetworkLab, tmp_path: Path) -> None:
    cluster.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=3, configs={"min.insync.replicas": "2"})
    cluster.wait_in_sync(TOPIC, timeout=30)
    recorder = StateRecorder(cluster.zookeeper_connect)  # the test process reaches ZooKeeper over the bridge
    producer, consumer = start_clients(cluster, lab, tmp_path, "outage")
    try:
        producer.wait_for_acks(300, 60)
        for host in BROKERS.values():
            lab.cut("zookeeper", host)
        # Long enough for ZooKeeper to expire every broker's session.
        outage_over = time.monotonic() + SESSION_TIMEOUT_MS / 1000 + 4
        cluster.wait_for(lambda: time.monotonic() >= outage_over, 30, "the outage to outlast the session timeout")
        healed_at = time.monotonic()
        lab.heal_all()

        observers = sorted(cluster.brokers)
        with concurrent.futures.ThreadPoolExecutor(PARTITIONS) as pool:
            delays = list(pool.map(lambda partition: time_until_writable(cluster, observers, partition, healed_at,
                                                                         SESSION_TIMEOUT_MS / 1000 + 30),
                                   range(PARTITIONS)))
        print("writable again after the ZooKeeper outage (s): "
              + ", ".join(f"p{p}={delay:.1f}" for p, delay in enumerate(delays)))
        cluster.wait_in_sync(TOPIC, timeout=60, broker_id=observers[0])
        written = recorder.since(healed_at)
        print(f"partition states written after the heal: {[(p, s.leader, s.isr) for p, s in written]}")
        leaderless = [(partition, state.isr) for partition, state in written if state.leader < 0]
        assert not leaderless, f"the controller wrote leader -1 after the outage: {leaderless}"

        with producer.condition:
            acked_after = producer.acked
        producer.wait_for_acks(acked_after + 300, 90)
        read_back_everything(cluster, producer, consumer, observers[0])
    finally:
        producer.kill()
        consumer.kill()
        recorder.close()
