"""The Python clients against three real brokers (RF=3 where it matters), in both flavours.

Every test that takes the ``api`` fixture runs twice: with the blocking classes
(KafkaProducer, KafkaConsumer, KafkaAdminClient) and with the asyncio ones (AIOKafkaProducer,
AIOKafkaConsumer, AIOKafkaAdminClient) driven through :class:`AsyncClients`, which runs them on
an event loop of its own and exposes the same blocking calls. One suite, one set of
expectations.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kafkalite import (
    AIOKafkaConsumer,
    AIOKafkaProducer,
    ConfigResource,
    ConfigResourceType,
    KafkaAdminClient,
    KafkaConsumer,
    KafkaProducer,
    NewPartitions,
    NewTopic,
    TopicPartition,
    errors,
)
from kafkalite.client.admin import AIOKafkaAdminClient
from tests.support.cluster import BrokerCluster

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, zookeeper) -> Iterator[BrokerCluster]:  # type: ignore[no-untyped-def]
    connect = f"{zookeeper.connect_string}/clients-{uuid.uuid4().hex[:8]}"
    brokers = BrokerCluster(tmp_path_factory.mktemp("clients"), connect, size=3).start()
    try:
        yield brokers
    finally:
        brokers.stop()


# --- the two flavours behind one blocking face ----------------------------------------------------


class SyncClients:
    flavour = "sync"

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.opened: list[Any] = []

    def producer(self, **options: Any) -> Any:
        client = KafkaProducer(**{"bootstrap_servers": self.bootstrap, **options})
        self.opened.append(client)
        return client

    def consumer(self, *topics: str, **options: Any) -> Any:
        client = KafkaConsumer(*topics, bootstrap_servers=self.bootstrap, **options)
        self.opened.append(client)
        return client

    def admin(self, **options: Any) -> Any:
        client = KafkaAdminClient(**{"bootstrap_servers": self.bootstrap, **options})
        self.opened.append(client)
        return client

    def close(self) -> None:
        for client in reversed(self.opened):
            client.close()


class _Proxy:
    """Blocking calls onto an asyncio client living on the AsyncClients loop."""

    def __init__(self, owner: AsyncClients, target: Any) -> None:
        self._owner = owner
        self._target = target

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._target, name)
        if not callable(attribute):
            return attribute

        def call(*args: Any, **kwargs: Any) -> Any:
            async def invoke() -> Any:
                result = attribute(*args, **kwargs)
                if inspect.isawaitable(result) and inspect.iscoroutine(result):
                    result = await result
                return result
            return self._owner.run(invoke())
        return call


class AsyncClients:
    flavour = "async"

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.opened: list[_Proxy] = []

    def run(self, coroutine: Any, timeout: float = 120) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)

    def _make(self, factory: Any) -> _Proxy:
        async def create() -> Any:
            client = factory()
            await client.start()
            return client
        proxy = _Proxy(self, self.run(create()))
        self.opened.append(proxy)
        return proxy

    def producer(self, **options: Any) -> Any:
        return self._make(lambda: AIOKafkaProducer(**{"bootstrap_servers": self.bootstrap, **options}))

    def consumer(self, *topics: str, **options: Any) -> Any:
        return self._make(lambda: AIOKafkaConsumer(*topics, bootstrap_servers=self.bootstrap, **options))

    def admin(self, **options: Any) -> Any:
        return self._make(lambda: AIOKafkaAdminClient(**{"bootstrap_servers": self.bootstrap, **options}))

    def close(self) -> None:
        for proxy in reversed(self.opened):
            proxy.close()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


@pytest.fixture(params=["sync", "async"])
def api(request: pytest.FixtureRequest, cluster: BrokerCluster) -> Iterator[Any]:
    clients = SyncClients(cluster.bootstrap) if request.param == "sync" else AsyncClients(cluster.bootstrap)
    try:
        yield clients
    finally:
        clients.close()


def new_topic(cluster: BrokerCluster, prefix: str, partitions: int = 1, replication_factor: int = 3,
              configs: dict[str, str] | None = None) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(name, partitions, replication_factor, configs)
    cluster.wait_in_sync(name)
    return name


def read_all(consumer: Any, expected: int, timeout: float = 30) -> list[Any]:
    records: list[Any] = []
    deadline = time.monotonic() + timeout
    while len(records) < expected and time.monotonic() < deadline:
        for items in consumer.poll(timeout_ms=500).values():
            records.extend(items)
    return records


# --- producer ---------------------------------------------------------------------------------------


def test_round_trip_with_keys_headers_timestamps_and_serializers(api: Any, cluster: BrokerCluster) -> None:
    topic = new_topic(cluster, "roundtrip", partitions=3)
    producer = api.producer(value_serializer=lambda v: json.dumps(v).encode(),
                            key_serializer=lambda k: k.encode() if k else None)
    base = int(time.time() * 1000) - 60_000  # recent: older records would fall to time-based retention
    futures = [producer.send(topic, {"n": i}, key=f"key-{i % 7}", headers=[("h", b"%d" % i), ("none", None)],
                             timestamp_ms=base + i) for i in range(60)]
    futures.append(producer.send(topic, None, key="tomb"))
    producer.flush(30)
    metadata = [future.get(10) for future in futures]
    assert all(future.is_done and future.succeeded() for future in futures)
    assert {item.partition for item in metadata} <= {0, 1, 2}
    assert metadata[5].timestamp == base + 5 and metadata[5].serialized_key_size == 5
    assert metadata[5].serialized_header_size == len("h") + len(b"5") + len("none")
    assert producer.partitions_for(topic) == {0, 1, 2}
    consumer = api.consumer(topic, auto_offset_reset="earliest", key_deserializer=lambda k: k.decode(),
                            value_deserializer=lambda v: json.loads(v))
    records = read_all(consumer, 61)
    assert len(records) == 61
    by_value = {record.value["n"]: record for record in records if record.value is not None}
    assert sorted(by_value) == list(range(60))
    sample = by_value[12]
    assert sample.key == "key-5" and sample.headers == [("h", b"12"), ("none", None)]
    assert sample.timestamp == base + 12 and sample.timestamp_type == 0
    assert (sample.partition, sample.offset) == (metadata[12].partition, metadata[12].offset)
    tombstone = [record for record in records if record.value is None]
    assert len(tombstone) == 1 and tombstone[0].key == "tomb" and tombstone[0].serialized_value_size == -1
    # per partition, offsets are consecutive and in send order
    for partition in {record.partition for record in records}:
        offsets = [record.offset for record in records if record.partition == partition]
        assert offsets == sorted(offsets)


def test_key_to_partition_matches_the_java_default_partitioner(api: Any, cluster: BrokerCluster) -> None:
    from kafka.partitioner.default import murmur2 as oracle_murmur2

    topic = new_topic(cluster, "keys", partitions=7, replication_factor=1)
    producer = api.producer(acks=1)
    keys = [f"customer-{i}".encode() for i in range(150)] + [b"", b"\x00\xff", "ünïcödé".encode(), b"a" * 1000]
    futures = [(key, producer.send(topic, b"v", key=key)) for key in keys]
    producer.flush(30)
    for key, future in futures:
        expected = (oracle_murmur2(key) & 0x7FFFFFFF) % 7
        assert future.get(10).partition == expected, key


@pytest.mark.parametrize("compression", ["gzip", "lz4", "zstd", None])
def test_compression_round_trip(api: Any, cluster: BrokerCluster, compression: str | None) -> None:
    topic = new_topic(cluster, f"codec-{compression}", replication_factor=1)
    producer = api.producer(compression_type=compression, linger_ms=20)
    values = [b"value-%d-" % i + b"z" * (i % 50) for i in range(500)]
    for value in values:
        producer.send(topic, value)
    producer.flush(30)
    consumer = api.consumer(auto_offset_reset="earliest")
    consumer.assign([TopicPartition(topic, 0)])
    assert [record.value for record in read_all(consumer, 500)] == values


@pytest.mark.parametrize("acks", [0, 1, "all"])
def test_acks(api: Any, cluster: BrokerCluster, acks: Any) -> None:
    topic = new_topic(cluster, f"acks-{acks}")
    producer = api.producer(acks=acks)
    futures = [producer.send(topic, b"m%d" % i) for i in range(50)]
    producer.flush(30)
    offsets = [future.get(10).offset for future in futures]
    if acks == 0:
        assert offsets == [-1] * 50
    else:
        assert offsets == list(range(50))
    consumer = api.consumer(auto_offset_reset="earliest")
    consumer.assign([TopicPartition(topic, 0)])
    assert [record.value for record in read_all(consumer, 50)] == [b"m%d" % i for i in range(50)]


def test_callbacks_and_errbacks(api: Any, cluster: BrokerCluster) -> None:
    topic = new_topic(cluster, "callbacks", replication_factor=1)
    producer = api.producer()
    seen: list[Any] = []
    failures: list[Any] = []
    producer.send(topic, b"x").add_callback(seen.append).add_errback(failures.append)
    producer.flush(30)
    assert len(seen) == 1 and seen[0].topic == topic and not failures
    with pytest.raises(errors.MessageSizeTooLargeError):
        producer.send(topic, b"x" * 2_000_000)
    with pytest.raises(errors.UnknownTopicOrPartitionError):
        producer.send(topic, b"x", partition=5)


def test_bulk_send_and_bulk_poll(api: Any, cluster: BrokerCluster) -> None:
    topic = new_topic(cluster, "bulk", partitions=2, replication_factor=1)
    producer = api.producer(acks=1)
    values = [b"%08d" % i + b"." * 92 for i in range(30_000)]
    result = producer.send_batch(topic, values, partition=1).get(60)
    assert sum(item.record_count for item in result) == 30_000 and len(result) >= 3
    assert [item.base_offset for item in result] == sorted(item.base_offset for item in result)
    keyed = producer.send_batch(topic, [b"k"] * 100, keys=[b"key-%d" % i for i in range(100)]).get(60)
    assert sum(item.record_count for item in keyed) == 100
    consumer = api.consumer(auto_offset_reset="earliest")
    tp = TopicPartition(topic, 1)
    consumer.assign([tp])
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(got) < 30_000 + sum(item.record_count for item in keyed if item.partition == 1) \
            and time.monotonic() < deadline:
        for batch in consumer.poll_batches(timeout_ms=500):
            got.extend(batch.values())
    assert got[:30_000] == values
    assert consumer.position(tp) == len(got)


def test_back_pressure_blocks_then_times_out(api: Any, cluster: BrokerCluster) -> None:
    topic = new_topic(cluster, "pressure", replication_factor=1)
    leader = cluster.partitions(topic)[0]["leader"]
    producer = api.producer(buffer_memory=5000, max_block_ms=500, batch_size=1000, acks=1,
                            request_timeout_ms=20_000)
    producer.send(topic, b"warm").get(10)
    cluster.brokers[leader].freeze()
    try:
        futures = [producer.send(topic, b"y" * 900) for _ in range(4)]
        started = time.monotonic()
        with pytest.raises(errors.KafkaTimeoutError):
            for _ in range(10):
                producer.send(topic, b"y" * 900)
        assert 0.4 <= time.monotonic() - started < 5
    finally:
        cluster.brokers[leader].thaw()
    producer.flush(30)
    assert [future.get(10).offset for future in futures] == sorted(future.get(10).offset for future in futures)


def test_unknown_topic_without_auto_create_times_out(api: Any, cluster: BrokerCluster) -> None:
    producer = api.producer(allow_auto_create_topics=False, max_block_ms=600)
    started = time.monotonic()
    with pytest.raises(errors.KafkaTimeoutError):
        producer.send(f"missing-{uuid.uuid4().hex[:6]}", b"x")
    assert time.monotonic() - started >= 0.5
    with pytest.raises(errors.InvalidTopicError):
        producer.send("bad topic name!", b"x")


def test_idempotent_producer_survives_leader_kill(api: Any, cluster: BrokerCluster) -> None:
    topic = new_topic(cluster, "failover-produce", partitions=2)
    producer = api.producer(acks="all", enable_idempotence=True, linger_ms=5, retry_backoff_ms=100,
                            request_timeout_ms=10_000)
    victim = cluster.partitions(topic)[0]["leader"]
    futures = []
    try:
        for i in range(3000):
            futures.append(producer.send(topic, b"%d" % i, key=b"%d" % (i % 10)))
            if i == 1000:
                cluster.brokers[victim].kill()
            if i % 200 == 0:
                time.sleep(0.02)  # pacing, not synchronisation: sends keep arriving across the kill
        producer.flush(60)
    finally:
        if not cluster.brokers[victim].alive:
            cluster.brokers[victim].start()
            cluster.brokers[victim].wait_ready()
    acked = [future.get(1) for future in futures]
    assert all(item.offset >= 0 for item in acked)
    consumer = api.consumer(auto_offset_reset="earliest")
    consumer.assign([TopicPartition(topic, 0), TopicPartition(topic, 1)])
    records = read_all(consumer, 3000, timeout=60)
    values = [int(record.value) for record in records]
    assert sorted(values) == list(range(3000)), "every acknowledged record is read back exactly once"
    for key in range(10):  # one key, one partition: send order is kept under retries
        same_key = [int(record.value) for record in records if int(record.key) == key]
        assert same_key == sorted(same_key)
    cluster.wait_in_sync(topic, timeout=60)


def test_consumer_survives_leader_kill(api: Any, cluster: BrokerCluster) -> None:
    topic = new_topic(cluster, "failover-consume")
    producer = api.producer(acks="all")
    producer.send_batch(topic, [b"%d" % i for i in range(20_000)], partition=0).get(60)
    consumer = api.consumer(auto_offset_reset="earliest", max_poll_records=500, max_partition_fetch_bytes=32_768)
    consumer.assign([TopicPartition(topic, 0)])
    first = read_all(consumer, 2000)
    victim = cluster.partitions(topic)[0]["leader"]
    cluster.brokers[victim].kill()
    try:
        rest = read_all(consumer, 20_000 - len(first), timeout=60)
    finally:
        cluster.brokers[victim].start()
        cluster.brokers[victim].wait_ready()
    assert [int(record.value) for record in first + rest] == list(range(20_000))
    cluster.wait_in_sync(topic, timeout=60)


# --- consumer ---------------------------------------------------------------------------------------


def test_position_seek_pause_and_offset_lookups(api: Any, cluster: BrokerCluster) -> None:
    topic = new_topic(cluster, "positions", partitions=2, replication_factor=2)
    producer = api.producer()
    base = int(time.time() * 1000) - 60_000
    for i in range(100):
        producer.send(topic, b"%d" % i, partition=i % 2, timestamp_ms=base + i * 10)
    producer.flush(30)
    tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    consumer = api.consumer(auto_offset_reset="latest")
    consumer.assign([tp0, tp1])
    assert consumer.assignment() == {tp0, tp1}
    assert consumer.position(tp0) == 50 and consumer.position(tp1) == 50
    assert consumer.beginning_offsets([tp0, tp1]) == {tp0: 0, tp1: 0}
    assert consumer.end_offsets([tp0, tp1]) == {tp0: 50, tp1: 50}
    found = consumer.offsets_for_times({tp0: base + 400, tp1: base + 10_000})
    assert found[tp0].offset == 20 and found[tp0].timestamp == base + 400 and found[tp1] is None
    consumer.seek(tp0, 45)
    consumer.seek_to_end(tp1)
    assert [record.offset for record in read_all(consumer, 5)] == [45, 46, 47, 48, 49]
    consumer.seek_to_beginning()
    consumer.pause(tp1)
    assert consumer.paused() == {tp1}
    records = read_all(consumer, 50)
    assert {record.partition for record in records} == {0} and len(records) == 50
    assert consumer.poll(timeout_ms=300) == {}
    consumer.resume(tp1)
    assert consumer.paused() == set()
    records = read_all(consumer, 50)
    assert [record.offset for record in records] == list(range(50)) and records[0].partition == 1
    assert consumer.highwater(tp1) == 50
    limited = {}
    consumer.seek(tp0, 0)
    while not limited:
        limited = consumer.poll(timeout_ms=1000, max_records=7)
    assert sum(len(items) for items in limited.values()) == 7


def test_offset_out_of_range_applies_the_reset_policy(api: Any, cluster: BrokerCluster) -> None:
    topic = new_topic(cluster, "range", replication_factor=1)
    producer = api.producer()
    for i in range(10):
        producer.send(topic, b"%d" % i)
    producer.flush(30)
    tp = TopicPartition(topic, 0)
    earliest = api.consumer(auto_offset_reset="earliest")
    earliest.assign([tp])
    earliest.seek(tp, 1000)
    assert [record.offset for record in read_all(earliest, 10)] == list(range(10))
    strict = api.consumer(auto_offset_reset="none")
    strict.assign([tp])
    with pytest.raises(errors.NoOffsetForPartitionError):
        strict.poll(timeout_ms=200)
    strict.seek(tp, 500)
    with pytest.raises(errors.OffsetOutOfRangeError):
        for _ in range(20):
            strict.poll(timeout_ms=200)
    latest = api.consumer(auto_offset_reset="latest")
    latest.assign([tp])
    latest.seek(tp, 77)
    assert latest.poll(timeout_ms=500) == {}
    assert latest.position(tp) == 10


def test_pattern_subscription_in_a_group(api: Any, cluster: BrokerCluster) -> None:
    prefix = f"pat{uuid.uuid4().hex[:6]}"
    first = new_topic(cluster, prefix, partitions=2, replication_factor=1)
    second = new_topic(cluster, prefix, partitions=1, replication_factor=1)
    consumer = api.consumer(group_id="g1", auto_offset_reset="earliest", enable_auto_commit=False)
    consumer.subscribe(pattern=f"^{prefix}-.*")
    deadline = time.monotonic() + 10
    while len(consumer.assignment()) < 3 and time.monotonic() < deadline:
        consumer.poll(timeout_ms=100)
    assert consumer.assignment() == {TopicPartition(first, 0), TopicPartition(first, 1), TopicPartition(second, 0)}
    consumer.commit()  # a pattern subscription in a group commits its positions
    assert consumer.committed(TopicPartition(first, 0)) is not None
    by_name = api.consumer(first, auto_offset_reset="earliest")
    assert by_name.subscription() == {first}
    producer = api.producer()
    producer.send(first, b"hello", partition=1).get(10)
    records = read_all(by_name, 1)
    assert [(record.partition, record.value) for record in records] == [(1, b"hello")]


# --- admin ------------------------------------------------------------------------------------------


def test_admin_topics_partitions_configs_and_errors(api: Any, cluster: BrokerCluster) -> None:
    admin = api.admin()
    name = f"admin-{uuid.uuid4().hex[:6]}"
    created = admin.create_topics([NewTopic(name, 2, 3, topic_configs={"retention.ms": "3600000"})], timeout_ms=20_000)
    assert created["topics"][0]["error_code"] == 0
    with pytest.raises(errors.TopicAlreadyExistsError):
        admin.create_topics([NewTopic(name, 1, 1)])
    with pytest.raises(errors.InvalidReplicationFactorError):
        admin.create_topics([NewTopic(f"{name}-rf", 1, 9)])
    answer = admin.create_topics([NewTopic(f"{name}-dry", 1, 1)], validate_only=True)
    assert answer["topics"][0]["error_code"] == 0 and f"{name}-dry" not in admin.list_topics()
    assert name in admin.list_topics()
    cluster.wait_in_sync(name)
    described = admin.describe_topics([name])[0]
    assert described["name"] == name and len(described["partitions"]) == 2
    assert sorted(described["partitions"][0]["replica_nodes"]) == [1, 2, 3]
    cluster_info = admin.describe_cluster()
    assert sorted(item["broker_id"] for item in cluster_info["brokers"]) == [1, 2, 3]
    assert cluster_info["controller_id"] in (1, 2, 3)
    admin.create_partitions({name: NewPartitions(4)})
    deadline = time.monotonic() + 10
    while len(admin.describe_topics([name])[0]["partitions"]) < 4 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert len(admin.describe_topics([name])[0]["partitions"]) == 4
    with pytest.raises(errors.InvalidPartitionsError):
        admin.create_partitions({name: NewPartitions(2)})
    configs = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, name)])
    assert configs["topic"][name]["retention.ms"]["value"] == "3600000"
    admin.incremental_alter_configs([ConfigResource("topic", name, {"cleanup.policy": "compact"})])
    admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, name, {"retention.ms": "7200000"})])
    deadline = time.monotonic() + 10  # config changes reach every broker through ZooKeeper notifications
    while True:
        configs = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, name,
                                                         ["retention.ms", "cleanup.policy"])])
        if configs["topic"][name]["retention.ms"]["value"] == "7200000" or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert configs["topic"][name]["retention.ms"]["value"] == "7200000"
    assert configs["topic"][name]["cleanup.policy"]["value"] == "delete"  # alter_configs replaces all overrides
    with pytest.raises(errors.InvalidConfigurationError):
        admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, name, {"retention.ms": "soon"})])
    brokers = admin.describe_configs([ConfigResource(ConfigResourceType.BROKER, "1"),
                                      ConfigResource(ConfigResourceType.BROKER, "3")])
    assert brokers["broker"]["1"]["broker.id"]["value"] == "1"
    assert brokers["broker"]["3"]["broker.id"]["value"] == "3"
    offsets = admin.list_offsets({TopicPartition(name, 0): -1})
    assert offsets[TopicPartition(name, 0)].offset == 0
    elected = admin.elect_leaders("preferred", [TopicPartition(name, 0)], raise_errors=False)
    assert elected[TopicPartition(name, 0)] in ("NONE", "ELECTION_NOT_NEEDED")
    admin.delete_topics([name], timeout_ms=20_000)
    with pytest.raises(errors.UnknownTopicOrPartitionError):
        admin.delete_topics([f"{name}-never"])
    missing = admin.delete_topics([f"{name}-never"], raise_errors=False)
    assert missing["topics"][0]["error_code"] == 3


def test_producer_and_consumer_metrics_in_kafka_pythons_shape(cluster: BrokerCluster) -> None:
    topic = new_topic(cluster, "metrics", partitions=2)
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all", linger_ms=5)
    try:
        for index in range(500):
            producer.send(topic, value=b"v%03d" % index, partition=index % 2)
        producer.flush(30)
        produced = producer.metrics()
    finally:
        producer.close()
    client = produced["producer-metrics"]
    assert client["record-send-total"] == 500 and client["record-error-total"] == 0
    assert client["request-total"] >= 1 and client["request-latency-avg"] > 0
    assert client["record-send-rate"] > 0 and client["outgoing-byte-total"] > 500 * 4
    assert produced[f"producer-topic-metrics.{topic}"]["record-send-total"] == 500
    assert any(group.startswith("producer-node-metrics.node-") for group in produced)

    group = f"metrics-group-{uuid.uuid4().hex[:8]}"
    consumer = KafkaConsumer(topic, bootstrap_servers=cluster.bootstrap, group_id=group,
                             auto_offset_reset="earliest", enable_auto_commit=False)
    try:
        assert len(read_all(consumer, 500)) == 500
        consumer.commit()
        consumed = consumer.metrics()
    finally:
        consumer.close()
    fetch = consumed["consumer-fetch-manager-metrics"]
    assert fetch["records-consumed-total"] == 500 and fetch["fetch-total"] >= 1
    assert fetch["bytes-consumed-total"] > 500 * 4 and fetch["fetch-latency-avg"] > 0
    assert fetch["records-lag-max"] >= 0
    for partition in (0, 1):  # everything was read: the last fetch saw no lag
        assert consumed[f"consumer-fetch-manager-metrics.{topic}-{partition}"]["records-lag"] == 0
    coordinator = consumed["consumer-coordinator-metrics"]
    assert coordinator["join-total"] >= 1 and coordinator["sync-total"] >= 1 and coordinator["commit-total"] >= 1


def test_no_reachable_broker(api: Any) -> None:
    producer = api.producer(bootstrap_servers="127.0.0.1:1", max_block_ms=500)
    with pytest.raises(errors.KafkaTimeoutError, match=r"NoBrokersAvailable|no broker"):
        producer.send("t", b"x")
    admin = api.admin(bootstrap_servers="127.0.0.1:1")
    with pytest.raises(errors.NoBrokersAvailable):
        admin.list_topics()


# --- the seeds' Python snippets, with only the import changed ----------------------------------------


SEED_PRODUCER = '''
from kafkalite import KafkaProducer
import json
producer = KafkaProducer( bootstrap_servers=['{bootstrap}'], value_serializer=lambda v: json.dumps(v).encode(), key_serializer=lambda k: k.encode() if k else None, acks='all', # Wait for all replicas
 retries=3, # Retry on failure
 batch_size=16384, # Batch messages (16KB)
 linger_ms=10, # Wait up to 10ms to batch
 compression_type='gzip', enable_idempotence=True # Exactly-once producer
)
# Send a message with a key# Key determines partition: same key → same partition
def publish_order(order):
    future = producer.send( 'orders', key=order['customer_id'], value=order, headers=[ ('source', b'order-service'), ('version', b'1.0') ] )
    # Block until message is sent (or use callback)
    metadata = future.get(timeout=10)
    print( f"Sent to partition {{metadata.partition}} " f"at offset {{metadata.offset}}" )
# Publish orders
publish_order({{ 'order_id': 'ORD-001', 'customer_id': 'CUST-42', 'items': ['widget', 'gadget'], 'total': 149.99}})
# Flush any buffered messages
producer.flush()
producer.close()
'''  # noqa: E501 (the snippet as the seed wrote it)

SEED_CONSUMER = '''
from kafkalite import KafkaConsumer
import json
def process_order(order):
    print(f"Order {{order['order_id']}} processed")
consumer = KafkaConsumer( 'orders', bootstrap_servers=['{bootstrap}'], group_id='order-processing', auto_offset_reset='earliest', enable_auto_commit=False, value_deserializer=lambda m: json.loads( m.decode('utf-8') ), consumer_timeout_ms=5000)
try:
    for message in consumer:
        print( f"Partition: {{message.partition}}, " f"Offset: {{message.offset}}, " f"Key: {{message.key}}" )
        order = message.value
        print(f"Processing order: {{order['order_id']}}")
        # Process the message
        process_order(order)
        # Manual commit after successful processing
        consumer.commit()
except KeyboardInterrupt:
    pass
finally:
    consumer.close()
'''  # noqa: E501 (the snippet as the seed wrote it)


def test_seed_producer_snippet(cluster: BrokerCluster, capsys: pytest.CaptureFixture[str]) -> None:
    exec(compile(SEED_PRODUCER.format(bootstrap=cluster.brokers[1].address), "seed-003-producer", "exec"), {})
    assert "Sent to partition 0 at offset" in capsys.readouterr().out


def test_seed_consumer_snippet(cluster: BrokerCluster, capsys: pytest.CaptureFixture[str]) -> None:
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap,
                             value_serializer=lambda v: json.dumps(v).encode())
    sent = producer.send("orders", {"order_id": "ORD-002"}).get(10)
    producer.close()
    exec(compile(SEED_CONSUMER.format(bootstrap=cluster.brokers[2].address), "seed-003-consumer", "exec"), {})
    output = capsys.readouterr().out
    assert f"Partition: {sent.partition}, Offset: {sent.offset}, Key: None" in output, output
    assert "Processing order: ORD-002" in output and "Order ORD-002 processed" in output, output
    # The snippet commits after each record: the group resumes after the one it processed.
    checker = KafkaConsumer(bootstrap_servers=cluster.bootstrap, group_id="order-processing")
    try:
        committed = checker.committed(TopicPartition("orders", sent.partition))
    finally:
        checker.close()
    assert committed is not None and committed >= sent.offset + 1, committed


def test_seed_consumer_snippet_reads_without_commit(cluster: BrokerCluster, capsys: pytest.CaptureFixture[str]) -> None:
    """The same snippet minus the group commit: the standalone part works today."""
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, value_serializer=lambda v: json.dumps(v).encode())
    producer.send("orders", {"order_id": "ORD-003"}).get(10)
    producer.close()
    source = SEED_CONSUMER.replace("consumer.commit()", "pass")
    exec(compile(source.format(bootstrap=cluster.brokers[3].address), "seed-003-consumer", "exec"), {})
    assert "Processing order: ORD-003" in capsys.readouterr().out


def test_context_managers_close_cleanly(cluster: BrokerCluster, tmp_path: Path) -> None:
    with KafkaProducer(bootstrap_servers=cluster.bootstrap) as producer:
        producer.send("ctx", b"x").get(10)
    with pytest.raises(errors.IllegalStateError):
        producer.send("ctx", b"y")
    with KafkaConsumer(bootstrap_servers=cluster.bootstrap) as consumer:
        assert "ctx" in consumer.topics()


def test_send_by_keyword_and_by_a_subclass_that_overrides_it(cluster: BrokerCluster) -> None:
    topic = new_topic(cluster, "sendforms", partitions=2, replication_factor=1)

    class Counting(KafkaProducer):
        sent = 0

        def send(self, *args: Any, **kwargs: Any) -> Any:
            Counting.sent += 1
            return super().send(*args, **kwargs)

    with Counting(bootstrap_servers=cluster.bootstrap) as counting:
        counting.send(topic, b"a", partition=0).get(10)
        counting.send(topic, value=b"b", partition=1).get(10)
    assert Counting.sent == 2
    with KafkaProducer(bootstrap_servers=cluster.bootstrap) as producer:
        by_name = producer.send(topic, value=b"c", key=b"k", timestamp_ms=1234).get(10)
        by_position = producer.send(topic, b"d", b"k", None, None, 5678).get(10)
        with pytest.raises(TypeError, match="bogus"):
            producer.send(topic, b"e", bogus=1)
        with pytest.raises(TypeError):
            producer.send()  # type: ignore[call-arg]
    assert by_name.partition == by_position.partition
    assert (by_name.timestamp, by_name.serialized_key_size, by_position.timestamp) == (1234, 1, 5678)
    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap, auto_offset_reset="earliest")
    try:
        consumer.assign([TopicPartition(topic, 0), TopicPartition(topic, 1)])
        records = read_all(consumer, 4)
    finally:
        consumer.close()
    assert sorted((record.value, record.key) for record in records) == [
        (b"a", None), (b"b", None), (b"c", b"k"), (b"d", b"k")]


def test_list_offsets_sees_partitions_added_after_its_metadata(api: Any, cluster: BrokerCluster) -> None:
    name = f"grown-{uuid.uuid4().hex[:6]}"
    reader, other = api.admin(), api.admin()
    reader.create_topics([NewTopic(name, 1, 3)], timeout_ms=20_000)
    cluster.wait_in_sync(name)
    assert reader.list_offsets({TopicPartition(name, 0): -1})[TopicPartition(name, 0)].offset == 0  # caches 1 partition
    other.create_partitions({name: NewPartitions(2)})
    cluster.wait_for(lambda: len(cluster.wait_in_sync(name)) == 2, 30, f"{name} grown to 2 partitions in sync")
    producer = api.producer(acks="all")
    for _ in range(3):
        producer.send(name, b"v", partition=1).get(30)
    producer.flush()
    assert reader.list_offsets({TopicPartition(name, 1): -1})[TopicPartition(name, 1)].offset == 3
    with pytest.raises(errors.UnknownTopicOrPartitionError):
        reader.list_offsets({TopicPartition(name, 7): -1})
