"""A topic with ``flush.messages=1`` under concurrent idempotent producers.

With ``flush.messages`` set the broker fsyncs on a worker thread and validates compressed or
big produce requests on worker threads too, while the producer state stays on the event loop
and the appends of one partition keep their arrival order. Four idempotent producers (five
requests in flight each; gzip, lz4 and uncompressed; small batches and batches big enough to
be validated in a worker) write to the same two partitions at once. Every send must be
acknowledged without OUT_OF_ORDER_SEQUENCE_NUMBER or DUPLICATE errors, and after every broker
is killed with SIGKILL and restarted, each acknowledged record is in the log exactly once, in
the order its producer sent it.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from kafkalite import KafkaConsumer, KafkaProducer, TopicPartition
from kafkalite.broker.partition import VALIDATE_INLINE_RECORDS
from kafkalite.broker.replica import READ_INLINE_BYTES
from kafkalite.record.batch import iter_batches
from tests.integration.test_cluster import fetch
from tests.support.cluster import BrokerCluster

pytestmark = pytest.mark.integration

TOPIC = "flushed"
PARTITIONS = 2
RECORDS_PER_PRODUCER = 2000
VALUE_BYTES = 200  # the plain records alone make a partition bigger than a fetch reads on the loop
PRODUCERS: dict[str, dict[str, Any]] = {
    # name: producer options. "big" producers linger past their last send, so that each batch
    # closes at the flush holding all 1,000 of the producer's records for its partition (200 KB,
    # under batch_size), more than the 500 the broker validates on the loop when uncompressed:
    # with a short linger, how many records a batch got would depend on the machine's speed.
    "gzip-small": {"compression_type": "gzip", "linger_ms": 0},
    "lz4-big": {"compression_type": "lz4", "linger_ms": 60_000, "batch_size": 256 * 1024},
    "plain-small": {"linger_ms": 0},
    "plain-big": {"linger_ms": 60_000, "batch_size": 256 * 1024},
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, zookeeper) -> Iterator[BrokerCluster]:  # type: ignore[no-untyped-def]
    brokers = BrokerCluster(tmp_path_factory.mktemp("flush"),
                            f"{zookeeper.connect_string}/flush-{uuid.uuid4().hex[:8]}", size=3).start()
    try:
        yield brokers
    finally:
        brokers.stop()


def value(name: str, index: int) -> bytes:
    return f"{name}-{index:06d}-".encode().ljust(VALUE_BYTES, b".")


def produce_all(cluster: BrokerCluster, name: str, options: dict[str, Any], acked: dict[str, list[tuple[int, int]]],
                failures: list[str]) -> None:
    """Send this producer's records (value ``name-i`` to partition ``i % PARTITIONS``) and record
    each acknowledgement as (partition, offset) in send order."""
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all", enable_idempotence=True,
                             max_in_flight_requests_per_connection=5, retries=2**31 - 1, **options)
    try:
        futures = [producer.send(TOPIC, value(name, index), partition=index % PARTITIONS)
                   for index in range(RECORDS_PER_PRODUCER)]
        producer.flush(120)
        for index, future in enumerate(futures):
            try:
                metadata = future.get(0)
            except Exception as exc:  # every failure is reported, none is expected
                failures.append(f"{name}-{index:06d}: {type(exc).__name__}: {exc}")
                continue
            acked[name].append((metadata.partition, metadata.offset))
    finally:
        producer.close()


def read_everything(cluster: BrokerCluster, acknowledged_ends: dict[int, int]) -> dict[int, list[tuple[int, bytes]]]:
    """Every record of the topic as (offset, value), per partition, up to the end offsets.

    After a restart a leader's high watermark starts from its checkpoint and moves up as the
    followers fetch again, so the read waits until every partition's end offset covers the
    acknowledged records (``acknowledged_ends``: partition -> highest acknowledged offset + 1);
    an end that never gets there means acknowledged records were lost.
    """
    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap, enable_auto_commit=False,
                             max_partition_fetch_bytes=1024 * 1024)
    try:
        partitions = [TopicPartition(TOPIC, number) for number in range(PARTITIONS)]
        consumer.assign(partitions)
        consumer.seek_to_beginning(*partitions)
        deadline = time.monotonic() + 60
        ends = consumer.end_offsets(partitions)
        while any(ends[tp] < acknowledged_ends.get(tp.partition, 0) for tp in partitions):
            assert time.monotonic() < deadline, f"end offsets {ends} stay below the acknowledged {acknowledged_ends}"
            time.sleep(0.1)  # polling interval of the end-offset condition above
            ends = consumer.end_offsets(partitions)
        records: dict[int, list[tuple[int, bytes]]] = {number: [] for number in range(PARTITIONS)}
        while any(consumer.position(tp) < ends[tp] for tp in partitions):
            assert time.monotonic() < deadline, f"read only up to {[consumer.position(tp) for tp in partitions]}"
            for tp, batch in consumer.poll(timeout_ms=500).items():
                records[tp.partition].extend((record.offset, record.value) for record in batch)
        return records
    finally:
        consumer.close()


def test_acknowledged_records_are_fsynced_once_and_in_order(cluster: BrokerCluster) -> None:
    cluster.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=3,
                         configs={"flush.messages": "1", "min.insync.replicas": "2"})
    cluster.wait_in_sync(TOPIC)
    acked: dict[str, list[tuple[int, int]]] = {name: [] for name in PRODUCERS}
    failures: list[str] = []
    writers = [threading.Thread(target=produce_all, args=(cluster, name, options, acked, failures), daemon=True)
               for name, options in PRODUCERS.items()]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join(300)
    assert not any(writer.is_alive() for writer in writers), "a producer did not finish"
    assert failures == [], failures[:10]
    assert all(len(offsets) == RECORDS_PER_PRODUCER for offsets in acked.values())
    for broker in cluster.brokers.values():
        text = broker.log_path.read_text(errors="replace")
        for bad in ("OUT_OF_ORDER_SEQUENCE", "DUPLICATE_SEQUENCE", "Traceback", "off its event loop thread"):
            assert bad not in text, f"broker {broker.broker_id} logged {bad}"

    # The mix reached the broker: compressed and plain batches, some validated in a worker for
    # their size alone, and more data than a fetch reads on the event loop.
    leader = cluster.partitions(TOPIC)[0]["leader"]
    stored_batches = list(iter_batches(bytes(fetch(cluster, TOPIC, 0, 0, leader).records)))
    assert {batch.compression for batch in stored_batches} >= {0, 1, 3}  # none, gzip, lz4
    assert any(batch.compression == 0 and batch.record_count > VALIDATE_INLINE_RECORDS for batch in stored_batches)
    assert sum(batch.size for batch in stored_batches) > READ_INLINE_BYTES

    # Every broker dies at once, without a chance to flush, then comes back.
    cluster.kill_all()
    for broker in cluster.brokers.values():
        broker.start()
    for broker in cluster.brokers.values():
        broker.wait_ready(60)
    cluster.wait_in_sync(TOPIC, timeout=60)

    acknowledged_ends = dict.fromkeys(range(PARTITIONS), 0)
    for offsets in acked.values():
        for number, offset in offsets:
            acknowledged_ends[number] = max(acknowledged_ends[number], offset + 1)
    records = read_everything(cluster, acknowledged_ends)
    by_offset = {number: dict(items) for number, items in records.items()}
    for number, items in records.items():
        offsets = [offset for offset, _ in items]
        assert offsets == sorted(set(offsets)), f"partition {number}: offsets repeat or go backwards"
    for name, offsets in acked.items():
        for partition in range(PARTITIONS):
            expected = [value(name, index) for index in range(partition, RECORDS_PER_PRODUCER, PARTITIONS)]
            # Acknowledged offsets grow in send order, and each holds the record sent.
            mine = [offset for number, offset in offsets if number == partition]
            assert mine == sorted(mine), f"{name}: acknowledged offsets of partition {partition} go backwards"
            assert [by_offset[partition].get(offset) for offset in mine] == expected, f"{name} p{partition}"
            # Nothing of this producer's is in the log twice or out of order.
            stored = [value for _, value in records[partition] if value.startswith(f"{name}-".encode())]
            assert stored == expected, f"{name} p{partition}: {len(stored)} stored, {len(expected)} sent"
