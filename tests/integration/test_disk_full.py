"""A full disk under a real broker: nothing acknowledged is lost, the producer hears KAFKA_STORAGE_ERROR.

One broker with its log directory on a 96 MB tmpfs of its own, a topic with RF=1 and a short
segment.ms. A filler file leaves ~3 MB free; 8 KB values are produced with acks=all until the
broker answers KAFKA_STORAGE_ERROR, and for longer than segment.ms after that (so the active
segment is due to roll while writes fail: the case that used to roll over a torn tail); then the
space is freed, producing goes on, and the broker is killed with SIGKILL and restarted. Every
acknowledged record must be back at its offset with its value, and the broker log must hold no
traceback. Needs root (mount); skipped with the reason when mounting is not permitted.
"""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from kafkalite import KafkaConsumer, KafkaProducer, TopicPartition, errors
from tests.support.cluster import BrokerCluster, http

pytestmark = pytest.mark.integration

TMPFS_BYTES = 96 * 1024 * 1024
LEFT_FREE = 3 * 1024 * 1024
VALUE_BYTES = 8 * 1024
SEGMENT_MS = 1000
SEGMENT_BYTES = 1024 * 1024
AFTER_FREE_RECORDS = 1000


def _free_bytes(directory: Path) -> int:
    stats = os.statvfs(directory)
    return stats.f_bavail * stats.f_frsize


@pytest.fixture
def tmpfs_cluster(tmp_path: Path, zookeeper_connect: str) -> Iterator[tuple[BrokerCluster, Path]]:
    cluster = BrokerCluster(tmp_path / "cluster", zookeeper_connect, size=1, extra_properties={
        "default.replication.factor": "1",
        "offsets.topic.replication.factor": "1",
        "log.flush.scheduler.interval.ms": "500",
        "replica.high.watermark.checkpoint.interval.ms": "500",
    })
    data = cluster.brokers[1].directory / "data"
    data.mkdir(parents=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={TMPFS_BYTES}", "tmpfs", str(data)],
                             capture_output=True, text=True, timeout=30)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs (needs root): {mounted.stderr.strip()}")
    try:
        cluster.start()
        yield cluster, data
    finally:
        cluster.stop()
        subprocess.run(["umount", "-l", str(data)], capture_output=True, timeout=30)


def _value(sequence: int) -> bytes:
    return f"{sequence:010d}".encode().ljust(VALUE_BYTES, b".")


def test_no_acknowledged_record_is_lost_after_a_full_disk(tmpfs_cluster: tuple[BrokerCluster, Path]) -> None:
    cluster, data = tmpfs_cluster
    broker = cluster.brokers[1]
    topic = f"disk-full-{uuid.uuid4().hex[:6]}"
    cluster.create_topic(topic, partitions=1, replication_factor=1, configs={
        "segment.ms": str(SEGMENT_MS), "segment.bytes": str(SEGMENT_BYTES)})
    cluster.wait_for(lambda: cluster.partitions(topic)[0]["leader"] == 1, 30, "a leader")

    # No retries: every KAFKA_STORAGE_ERROR reaches the test.
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all", enable_idempotence=False, retries=0,
                             request_timeout_ms=10_000, delivery_timeout_ms=20_000)
    # Default retries: a send made while the disk is full is retried until space returns.
    retrying = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all", retry_backoff_ms=100,
                             request_timeout_ms=10_000, delivery_timeout_ms=60_000)
    acknowledged: dict[int, bytes] = {}
    failures: list[BaseException] = []
    sequence = 0

    def send() -> None:
        nonlocal sequence
        value = _value(sequence)
        sequence += 1
        future = producer.send(topic, value, partition=0)
        try:
            acknowledged[future.get(30).offset] = value
        except errors.KafkaliteError as exc:
            failures.append(exc)

    try:
        # A few records land before the disk fills.
        for _ in range(20):
            send()
        assert len(acknowledged) == 20, failures
        filler = data / "filler"
        with open(filler, "wb") as handle:
            os.posix_fallocate(handle.fileno(), 0, _free_bytes(data) - LEFT_FREE)
        assert _free_bytes(data) <= LEFT_FREE + 1024 * 1024

        deadline = time.monotonic() + 60
        while not failures and time.monotonic() < deadline:
            send()
        assert failures, "the disk never filled up"
        before_full = len(acknowledged)
        held_value = _value(10**9)
        held = retrying.send(topic, held_value, partition=0)
        # Keep writing into the full disk for longer than segment.ms: the active segment is due
        # to roll while appends fail.
        full_until = time.monotonic() + 2.5 * SEGMENT_MS / 1000
        while time.monotonic() < full_until:
            send()
        assert len(acknowledged) == before_full, "records were acknowledged while the disk was full"
        assert len(failures) > 1
        for failure in failures:
            assert isinstance(failure, errors.KafkaStorageError), repr(failure)
            assert failure.errno == 56 and failure.retriable
        assert not held.is_done, "a retrying producer gave up on KAFKA_STORAGE_ERROR"
        # A full disk is transient: the log directory stays online.
        assert http(broker.address, "GET", "/health")["offline_log_dirs"] == []

        filler.unlink()
        held_offset = held.get(30).offset
        acknowledged[held_offset] = held_value
        failures.clear()
        after_free = len(acknowledged)
        for _ in range(AFTER_FREE_RECORDS):  # ~8 MB: several more segments (segment.bytes)
            send()
        assert not failures, failures[:3]
        assert len(acknowledged) == after_free + AFTER_FREE_RECORDS
    finally:
        producer.close(10)
        retrying.close(10)

    rolled = [path for path in (data / f"{topic}-0").glob("*.log") if int(path.stem) >= held_offset]
    assert len(rolled) >= 3, "segments did not roll after the disk was freed"
    broker.kill()
    broker.start()
    broker.wait_ready(60)
    cluster.wait_for(lambda: cluster.partitions(topic)[0]["leader"] == 1, 60, "the leader back")

    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap, auto_offset_reset="earliest",
                             enable_auto_commit=False)
    try:
        partition = TopicPartition(topic, 0)
        consumer.assign([partition])
        consumer.seek(partition, 0)
        found: dict[int, bytes] = {}
        last = max(acknowledged)
        deadline = time.monotonic() + 60
        while last not in found and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                for record in records:
                    found[record.offset] = record.value
    finally:
        consumer.close()
    missing = sorted(offset for offset in acknowledged if offset not in found)
    assert not missing, (f"{len(missing)} acknowledged records lost, first {missing[:5]} "
                         f"(log end {max(found, default=-1)})")
    wrong = [offset for offset, value in acknowledged.items() if found[offset] != value]
    assert not wrong, f"acknowledged offsets with another value: {wrong[:5]}"

    broker_log = broker.log_path.read_text(errors="replace")
    assert "Traceback" not in broker_log, broker_log[broker_log.index("Traceback") - 300:][:3000]
    assert "UNKNOWN_SERVER_ERROR" not in broker_log
    assert "appends fail and are rolled back" in broker_log  # one WARN while the disk was full
