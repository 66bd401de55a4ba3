"""Failover under an unmodified Kafka client: kill -9 a partition leader while confluent-kafka
(librdkafka) produces with ``enable.idempotence=true`` and ``acks=all`` to a replication-factor-3
topic, restart it, and read everything back.

What must hold: every record the producer's delivery callback acknowledged is in the log at the
offset it was acknowledged with, no value is written twice (the idempotent producer's retries
across the leader change are deduplicated), and each partition's records are in the order they
were sent. The producer must not get stuck: it finishes within a deadline, and no record fails
(two of three replicas stay up, ``min.insync.replicas=2``).

The phases are gated on conditions, not on time: the leader is killed once a third of the stream
is acknowledged, the surviving brokers' Metadata answers (over the Kafka protocol) must name a new
leader before the broker comes back, and it is restarted while the producer's queue still holds
records.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.support.cluster import BrokerCluster, running_cluster

pytestmark = pytest.mark.integration

PARTITIONS = 3
RECORDS = 24_000
KEYS = 97
#: The partition whose leader is killed.
VICTIM_PARTITION = 0


@pytest.fixture
def cluster(tmp_path_factory: pytest.TempPathFactory, zookeeper) -> Iterator[BrokerCluster]:  # type: ignore[no-untyped-def]
    with running_cluster(tmp_path_factory, zookeeper, "kafka-failover") as brokers:
        yield brokers


def _poll_until(producer: Any, predicate: Callable[[], bool], timeout: float, what: str) -> None:
    """Serve ``producer``'s delivery callbacks until ``predicate`` holds (AssertionError at the deadline)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        producer.poll(0.05)


def _leader(client: Any, topic: str, partition: int) -> int:
    """The leader of ``topic``/``partition`` in a Kafka Metadata answer (-1 when none or unknown)."""
    try:
        metadata = client.list_topics(topic, timeout=5)
    except Exception:
        return -1
    partitions = metadata.topics[topic].partitions
    return int(partitions[partition].leader) if partition in partitions else -1


def test_kill_9_partition_leader_under_idempotent_acks_all_producer(cluster: BrokerCluster) -> None:
    confluent_kafka = pytest.importorskip("confluent_kafka")

    topic = f"kf-{uuid.uuid4().hex[:10]}"
    cluster.create_topic(topic, partitions=PARTITIONS, replication_factor=3, configs={"min.insync.replicas": "2"})
    cluster.wait_in_sync(topic, timeout=60)

    acked: dict[int, tuple[int, int]] = {}  # value -> (partition, offset)
    failures: list[str] = []

    def on_delivery(error: Any, message: Any) -> None:
        if error is not None:
            failures.append(f"{message.value()!r}: {error}")
        else:
            acked[int(message.value())] = (message.partition(), message.offset())

    producer = confluent_kafka.Producer({
        "bootstrap.servers": cluster.bootstrap, "enable.idempotence": True, "acks": "all",
        "linger.ms": 5, "delivery.timeout.ms": 120_000, "request.timeout.ms": 10_000,
        "retry.backoff.ms": 100, "topic.metadata.refresh.interval.ms": 1000})
    sent = 0

    def send(until: int) -> None:
        nonlocal sent
        while sent < until:
            try:
                producer.produce(topic, key=f"key-{sent % KEYS}".encode(), value=str(sent).encode(),
                                 on_delivery=on_delivery)
                sent += 1
            except BufferError:  # the local queue is full: serve callbacks until there is room
                producer.poll(0.05)
            producer.poll(0)

    try:
        victim = _leader(producer, topic, VICTIM_PARTITION)
        assert victim in cluster.brokers, victim

        # 1: a third of the stream, acknowledged, with every broker up
        send(RECORDS // 3)
        _poll_until(producer, lambda: len(acked) + len(failures) >= RECORDS // 4, 60, "the first acks")

        # 2: kill -9 the leader with records in flight; keep producing through the leader change
        send(RECORDS // 3 + 2000)
        cluster.brokers[victim].kill()
        send(2 * RECORDS // 3)
        survivor = cluster.brokers[next(broker_id for broker_id in cluster.brokers if broker_id != victim)]
        observer = confluent_kafka.admin.AdminClient({"bootstrap.servers": survivor.address})
        _poll_until(producer, lambda: _leader(observer, topic, VICTIM_PARTITION) not in (-1, victim), 60,
                    f"a new leader of partition {VICTIM_PARTITION} in the survivors' Metadata")
        acked_before_restart = len(acked)
        _poll_until(producer, lambda: len(acked) > acked_before_restart + 1000 or len(acked) + len(failures) >= sent,
                    60, "acks after the leader change")

        # 3: restart the killed broker while the rest of the stream is produced
        cluster.brokers[victim].start()
        send(RECORDS)
        cluster.brokers[victim].wait_ready(60)
        remaining = producer.flush(120)
        assert remaining == 0, f"{remaining} records still queued: the producer is stuck"
    finally:
        producer.flush(5)

    assert failures == []
    assert len(acked) == RECORDS
    cluster.wait_in_sync(topic, timeout=60)  # the restarted broker caught up

    # read everything back from the beginning
    consumer = confluent_kafka.Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": f"unused-{topic}",
                                         "enable.auto.commit": False, "enable.partition.eof": True})
    ends = {partition: consumer.get_watermark_offsets(confluent_kafka.TopicPartition(topic, partition),
                                                       timeout=10)[1] for partition in range(PARTITIONS)}
    log: dict[int, list[tuple[int, int]]] = {partition: [] for partition in range(PARTITIONS)}  # (offset, value)
    try:
        consumer.assign([confluent_kafka.TopicPartition(topic, partition, confluent_kafka.OFFSET_BEGINNING)
                         for partition in range(PARTITIONS)])
        finished: set[int] = set()
        deadline = time.monotonic() + 60
        while len(finished) < PARTITIONS:
            assert time.monotonic() < deadline, f"read back only {sum(map(len, log.values()))} records"
            message = consumer.poll(0.2)
            if message is None:
                continue
            if message.error() is not None:
                assert message.error().code() == confluent_kafka.KafkaError._PARTITION_EOF, message.error()
                if message.offset() >= ends[message.partition()]:
                    finished.add(message.partition())
                continue
            log[message.partition()].append((message.offset(), int(message.value())))
    finally:
        consumer.close()

    values = [value for records in log.values() for _, value in records]
    assert len(values) == len(set(values)), "a value was written twice"
    assert sum(ends.values()) == RECORDS
    where = {value: (partition, offset) for partition, records in log.items() for offset, value in records}
    missing = [value for value in acked if value not in where]
    assert missing == [], f"{len(missing)} acknowledged records are not in the log, e.g. {missing[:5]}"
    moved = [value for value, place in acked.items() if where[value] != place]
    assert moved == [], f"{len(moved)} records are not at their acknowledged offset, e.g. {moved[:5]}"
    for partition, records in log.items():
        in_log_order = [value for _, value in records]
        assert in_log_order == sorted(in_log_order), f"partition {partition} is out of send order"
        assert [offset for offset, _ in records] == list(range(len(records)))
