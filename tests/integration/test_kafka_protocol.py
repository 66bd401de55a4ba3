"""Unmodified Kafka clients against real kafkalite brokers, on the same port as the HTTP API.

kafka-python and confluent-kafka (librdkafka) produce and consume (assign + seek; groups come
with the group APIs) over the Kafka wire protocol; kafkalite's own client reads the same
records back over HTTP from the same address; a plain HTTP request still works there.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import random
import socket
import struct
import time
import uuid
from collections.abc import Iterator

import pytest

from kafkalite import KafkaConsumer as KafkaliteConsumer, TopicPartition as KafkaliteTopicPartition
from tests.support import kafka_wire as wire
from tests.support.cluster import BrokerCluster, running_cluster
from tests.support.docs import marked_block

pytestmark = pytest.mark.integration


#: socket.request.max.bytes of the test brokers (small, so the fuzz can cross it cheaply).
MAX_REQUEST_BYTES = 4 * 1024 * 1024


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, zookeeper) -> Iterator[BrokerCluster]:  # type: ignore[no-untyped-def]
    with running_cluster(tmp_path_factory, zookeeper, "kafka-protocol",
                         extra_properties={"socket.request.max.bytes": str(MAX_REQUEST_BYTES)}) as brokers:
        yield brokers



def _topic(cluster: BrokerCluster, partitions: int = 3, replication_factor: int = 3) -> str:
    name = f"kp-{uuid.uuid4().hex[:10]}"
    cluster.create_topic(name, partitions=partitions, replication_factor=replication_factor)
    cluster.wait_for(lambda: all(item["leader"] > 0 for item in cluster.partitions(name)), 30,
                     f"leaders for {name}")
    return name


Record = tuple[int, bytes | None, bytes | None]


def _read_with_kafkalite(cluster: BrokerCluster, topic: str, partitions: int, expected: int) -> list[Record]:
    """(partition, key, value) of every record of ``topic``, read with kafkalite's own client."""
    consumer = KafkaliteConsumer(bootstrap_servers=cluster.bootstrap, consumer_timeout_ms=10_000)
    try:
        assigned = [KafkaliteTopicPartition(topic, number) for number in range(partitions)]
        consumer.assign(assigned)
        consumer.seek_to_beginning(*assigned)
        records: list[Record] = []
        for record in consumer:
            records.append((record.partition, record.key, record.value))
            if len(records) >= expected:
                break
        return records
    finally:
        consumer.close()


def test_kafka_python_producer_and_consumer_on_the_http_port(cluster: BrokerCluster) -> None:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    topic = _topic(cluster)
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all")
    futures = [producer.send(topic, key=f"key-{index % 7}".encode(), value=f"value-{index}".encode())
               for index in range(300)]
    producer.flush(30)
    metadata = [future.get(timeout=30) for future in futures]
    producer.close()
    assert {item.topic for item in metadata} == {topic}
    per_partition: dict[int, list[int]] = {}
    for item in metadata:
        per_partition.setdefault(item.partition, []).append(item.offset)
    for offsets in per_partition.values():  # each partition's offsets are 0..n-1 in send order
        assert offsets == list(range(len(offsets)))

    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap, consumer_timeout_ms=10_000,
                             enable_auto_commit=False)
    partitions = [TopicPartition(topic, number) for number in range(3)]
    consumer.assign(partitions)
    consumer.seek_to_beginning(*partitions)
    seen = []
    for record in consumer:
        seen.append((record.partition, record.key, record.value))
        if len(seen) == 300:
            break
    consumer.close()
    assert sorted(value for _, _, value in seen) == sorted(f"value-{index}".encode() for index in range(300))
    by_key: dict[bytes, set[int]] = {}
    for partition, key, _ in seen:
        by_key.setdefault(key, set()).add(partition)
    assert all(len(partitions_of_key) == 1 for partitions_of_key in by_key.values())

    # the same records through kafkalite's own client, on the same addresses
    mine = _read_with_kafkalite(cluster, topic, 3, 300)
    assert sorted(mine) == sorted(seen)


def test_confluent_idempotent_producer_and_assigned_consumer(cluster: BrokerCluster) -> None:
    confluent_kafka = pytest.importorskip("confluent_kafka")

    topic = _topic(cluster)
    delivered: list[tuple[int, int, bytes]] = []
    errors: list[str] = []

    def on_delivery(error: object, message: object) -> None:
        if error is not None:
            errors.append(str(error))
        else:
            delivered.append((message.partition(), message.offset(), message.value()))  # type: ignore[attr-defined]

    producer = confluent_kafka.Producer({"bootstrap.servers": cluster.bootstrap, "enable.idempotence": True,
                                         "acks": "all", "compression.type": "lz4", "linger.ms": 5})
    for index in range(500):
        producer.produce(topic, key=f"k{index % 11}".encode(), value=f"v{index}".encode(), on_delivery=on_delivery)
        producer.poll(0)
    assert producer.flush(30) == 0
    assert errors == []
    assert len(delivered) == 500

    consumer = confluent_kafka.Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "unused-assign-only",
                                         "enable.auto.commit": False})
    consumer.assign([confluent_kafka.TopicPartition(topic, number, confluent_kafka.OFFSET_BEGINNING)
                     for number in range(3)])
    values = []
    try:
        deadline = time.monotonic() + 30
        while len(values) < 500 and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is None:
                continue
            assert message.error() is None, message.error()
            values.append((message.partition(), message.offset(), message.value()))
    finally:
        consumer.close()
    assert sorted(values) == sorted(delivered)
    mine = _read_with_kafkalite(cluster, topic, 3, 500)
    assert sorted(value for _, _, value in mine) == sorted(value for _, _, value in delivered)


def test_http_still_served_on_the_same_port(cluster: BrokerCluster) -> None:
    broker = cluster.any_live()
    host, port = broker.address.rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        connection.request("GET", "/v1/admin/describe_cluster")
        response = connection.getresponse()
        assert response.status == 200
        body = json.loads(response.read())
    finally:
        connection.close()
    assert len(body["brokers"]) == 3


def test_aiokafka_producer_and_assigned_consumer(cluster: BrokerCluster) -> None:
    aiokafka = pytest.importorskip("aiokafka")
    topic = _topic(cluster, partitions=2)

    async def scenario() -> list[tuple[int, bytes]]:
        producer = aiokafka.AIOKafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all",
                                             enable_idempotence=True, compression_type="gzip")
        await producer.start()
        try:
            for index in range(200):
                await producer.send(topic, value=f"a{index}".encode(), partition=index % 2)
            await producer.flush()
        finally:
            await producer.stop()
        consumer = aiokafka.AIOKafkaConsumer(bootstrap_servers=cluster.bootstrap, enable_auto_commit=False,
                                             auto_offset_reset="earliest")
        await consumer.start()
        seen: list[tuple[int, bytes]] = []
        try:
            consumer.assign([aiokafka.TopicPartition(topic, 0), aiokafka.TopicPartition(topic, 1)])
            await consumer.seek_to_beginning()
            deadline = time.monotonic() + 30
            while len(seen) < 200 and time.monotonic() < deadline:
                batches = await consumer.getmany(timeout_ms=500)
                seen.extend((record.partition, record.value) for records in batches.values() for record in records)
        finally:
            await consumer.stop()
        return seen

    seen = asyncio.run(scenario())
    assert sorted(seen) == sorted((index % 2, f"a{index}".encode()) for index in range(200))
    for partition in (0, 1):  # per-partition send order is kept
        values = [value for number, value in seen if number == partition]
        assert values == [f"a{index}".encode() for index in range(partition, 200, 2)]


def test_acks_zero_and_auto_created_topic(cluster: BrokerCluster) -> None:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    topic = f"kp-auto-{uuid.uuid4().hex[:8]}"  # unknown: the producer's Metadata request creates it
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks=0)
    for index in range(50):
        producer.send(topic, value=f"z{index}".encode(), partition=0)
    producer.flush(30)
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap, consumer_timeout_ms=10_000,
                             enable_auto_commit=False)
    consumer.assign([TopicPartition(topic, 0)])
    consumer.seek_to_beginning()
    values = []
    for record in consumer:
        values.append(record.value)
        if len(values) == 50:
            break
    end = consumer.end_offsets([TopicPartition(topic, 0)])
    consumer.close()
    assert values == [f"z{index}".encode() for index in range(50)]
    assert end == {TopicPartition(topic, 0): 50}


def _exchange(address: str, payload: bytes, responses: int | None = None, timeout: float = 5.0) -> bytes:
    """Send ``payload`` and read ``responses`` response frames; with None, half-close (the broker
    then closes the connection, as Kafka does) and read until it does."""
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=timeout) as connection:
        connection.sendall(payload)
        if responses is None:
            connection.shutdown(socket.SHUT_WR)
        received = bytearray()
        while responses is None or len(_split_frames(bytes(received), partial=True)) < responses:
            chunk = connection.recv(65536)
            if not chunk:
                break
            received += chunk
        return bytes(received)


def _split_frames(data: bytes, partial: bool = False) -> list[bytes]:
    """The whole frames of ``data`` (which must hold nothing else unless ``partial``)."""
    frames = []
    while len(data) >= 4:
        (size,) = struct.unpack_from(">i", data)
        if len(data) < 4 + size:
            break
        frames.append(data[:4 + size])
        data = data[4 + size:]
    assert partial or data == b""
    return frames


def test_pipelined_requests_are_answered_in_order_and_old_versions_fall_back(cluster: BrokerCluster) -> None:
    address = cluster.brokers[1].address
    payload = b"".join(
        wire.request_frame(18, 3, correlation, wire.request(18, 3, {"client_software_name": "t",
                                                                    "client_software_version": "1"}))
        if correlation % 2 else wire.request_frame(3, 12, correlation, wire.metadata_request(12, None))
        for correlation in range(40))
    frames = _split_frames(_exchange(address, payload, responses=40))
    assert len(frames) == 40
    for correlation, frame in enumerate(frames):
        api_key, version = (18, 3) if correlation % 2 else (3, 12)
        answered, response = wire.read_response(frame, api_key, version)
        assert answered == correlation
        if api_key == 3:
            assert sorted(broker.node_id for broker in response.brokers) == [1, 2, 3]
            assert {f"{broker.host}:{broker.port}" for broker in response.brokers} == set(cluster.bootstrap.split(","))
    # an ApiVersions version from the future: UNSUPPORTED_VERSION in the v0 layout, with the ranges
    future = struct.pack(">hhih", 18, 99, 5, -1) + b"future fields"
    (frame,) = _split_frames(_exchange(address, struct.pack(">i", len(future)) + future, responses=1))
    correlation, response = wire.read_response(frame, 18, 0)
    assert correlation == 5 and response.error_code == 35
    ranges = {item.api_key: (item.min_version, item.max_version) for item in response.api_keys}
    assert ranges[18] == (0, 3) and ranges[0][0] <= 3 <= ranges[0][1]


def _fuzz_cases(rng: random.Random, valid: list[bytes]) -> list[bytes]:
    cases: list[bytes] = []
    for _ in range(80):  # random bytes (some start with a letter and reach the HTTP side)
        cases.append(rng.randbytes(rng.randint(1, 300)))
    for size in (-1, -2**31, MAX_REQUEST_BYTES + 1, 2**31 - 1, 0, 1, 3):  # bad and tiny sizes
        cases.append(struct.pack(">i", size) + rng.randbytes(rng.randint(0, 16)))
    cases.append(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03")  # a TLS ClientHello's start
    for _ in range(100):  # a header with random keys and versions, then random bytes
        body = struct.pack(">hhih", rng.choice([rng.randint(-5, 80), 1000, 32767, -32768]), rng.randint(-3, 40),
                           rng.randint(0, 1000), -1) + rng.randbytes(rng.randint(0, 64))
        cases.append(struct.pack(">i", len(body)) + body)
    for _ in range(100):  # valid requests truncated, with a size that matches what is sent
        frame = rng.choice(valid)
        cut = rng.randint(0, len(frame) - 5)
        body = frame[4:4 + cut]
        cases.append(struct.pack(">i", len(body)) + body)
    for _ in range(100):  # valid requests with a few bytes changed
        frame = bytearray(rng.choice(valid))
        for _ in range(rng.randint(1, 4)):
            frame[rng.randrange(4, len(frame))] = rng.randrange(256)
        cases.append(bytes(frame))
    for _ in range(20):  # a size promising more than is sent
        frame = rng.choice(valid)
        cases.append(struct.pack(">i", len(frame) + rng.randint(1, 100)) + frame[4:])
    return cases


def test_listener_fuzz_leaves_the_broker_serving(cluster: BrokerCluster) -> None:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    topic = _topic(cluster, partitions=1, replication_factor=1)
    valid = [
        wire.request_frame(18, 3, 1, wire.request(18, 3, {"client_software_name": "f",
                                                         "client_software_version": "1"})),
        wire.request_frame(18, 0, 1, wire.request(18, 0, {})),
        wire.request_frame(3, 12, 2, wire.metadata_request(12, [topic])),
        wire.request_frame(3, 1, 2, wire.metadata_request(1, [topic])),
        wire.request_frame(1, 12, 3, wire.request(1, 12, {"max_wait": 10, "min_bytes": 1, "max_bytes": 1 << 20,
                                                        "topics": [{"topic": topic, "partitions": [
                                                            {"partition": 0, "fetch_offset": 0,
                                                             "partition_max_bytes": 1 << 20}]}]})),
        wire.request_frame(2, 5, 4, wire.request(2, 5, {"replica_id": -1, "topics": [
            {"name": topic, "partitions": [{"partition_index": 0, "timestamp": -1}]}]})),
        wire.request_frame(0, 9, 5, wire.request(0, 9, {"acks": 1, "timeout": 1000, "topic_data": [
            {"name": topic, "partition_data": [{"index": 0, "records": b"\0" * 61}]}]})),
        wire.request_frame(22, 4, 6, wire.request(22, 4, {"transaction_timeout": 1000, "producer_id": -1,
                                                         "producer_epoch": -1})),
        wire.request_frame(60, 0, 7, wire.request(60, 0, {})),
        wire.request_frame(17, 1, 8, wire.request(17, 1, {"mechanism": "PLAIN"})),
        wire.request_frame(23, 4, 9, wire.request(23, 4, {"replica_id": -1, "topics": [
            {"topic": topic, "partitions": [{"partition": 0, "leader_epoch": 0}]}]})),
    ]
    for frame in valid:  # every valid request gets exactly one answer
        assert len(_split_frames(_exchange(cluster.brokers[1].address, frame, responses=1))) == 1
    cases = _fuzz_cases(random.Random(16), valid)
    assert len(cases) >= 400
    started = time.monotonic()
    for case in cases:
        _exchange(cluster.brokers[1].address, case)
    elapsed = time.monotonic() - started
    assert elapsed < 60, elapsed
    assert cluster.brokers[1].alive
    assert cluster.error_lines() == []
    # a normal client is unaffected
    producer = KafkaProducer(bootstrap_servers=cluster.brokers[1].address, acks=1)
    offset = producer.send(topic, value=b"after the fuzz").get(timeout=30).offset
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap, consumer_timeout_ms=10_000)
    consumer.assign([TopicPartition(topic, 0)])
    consumer.seek(TopicPartition(topic, 0), offset)
    assert next(iter(consumer)).value == b"after the fuzz"
    consumer.close()


def test_readme_kafka_client_blocks_run_as_written(cluster: BrokerCluster, capsys: pytest.CaptureFixture[str]) -> None:
    for name in ("kafka-python", "confluent-kafka"):
        code = marked_block(name, "python").replace("localhost:9092", cluster.bootstrap)
        exec(compile(code, f"docs:{name}", "exec"), {})
    printed = capsys.readouterr().out.splitlines()
    # kafka-python's producer created "orders" and wrote the first record; confluent-kafka the second
    assert printed[0] == "0 0 b'user1' b'login'"
    assert printed[-1] == "0 0 b'user1' b'login'"


def _resident_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        lines = status.read().splitlines()
    for line in lines:
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def test_a_client_that_does_not_read_its_answers_gets_back_pressure(cluster: BrokerCluster) -> None:
    """A client pipelining Fetch requests (small requests, 256 KB answers) without reading the
    answers is stopped being read from: its sends block, the broker's memory does not grow with
    the answers it cannot deliver, other clients are served meanwhile, and every answer arrives,
    in order, once it reads."""
    import select

    from kafka import KafkaProducer

    topic = _topic(cluster, partitions=1, replication_factor=1)
    leader = cluster.brokers[cluster.partitions(topic)[0]["leader"]]
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks=1, linger_ms=5)
    for index in range(256):
        producer.send(topic, value=bytes([index % 256]) * 1024, partition=0)
    producer.flush(30)
    producer.close()
    fetch = wire.request(1, 12, {"max_wait": 0, "min_bytes": 1, "max_bytes": 1 << 20, "topics": [
        {"topic": topic, "partitions": [{"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}]}]})
    frames = [wire.request_frame(1, 12, correlation, fetch) for correlation in range(4)]
    assert leader.process is not None
    resident_before = _resident_bytes(leader.process.pid)
    host, port = leader.address.rsplit(":", 1)
    connection = socket.create_connection((host, int(port)), timeout=10)
    connection.setblocking(False)
    sent_requests = 0
    pending = b""
    stalled = False
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:  # write until the broker stops reading (a send blocks for 2 s)
            if not pending:
                pending = frames[sent_requests % len(frames)]
            _, writable, _ = select.select([], [connection], [], 2.0)
            if not writable:
                stalled = True
                break
            written = connection.send(pending)
            pending = pending[written:]
            if not pending:
                sent_requests += 1
        growth = _resident_bytes(leader.process.pid) - resident_before
        assert stalled, f"the broker kept reading: {sent_requests} requests accepted in 20 s"
        # without back-pressure every accepted request's 256 KB answer would sit in the broker
        assert growth < 128 * 1024 * 1024, f"the broker grew by {growth} bytes for {sent_requests} requests"

        # meanwhile other clients are served by the same broker
        producer = KafkaProducer(bootstrap_servers=leader.address, acks=1)
        assert producer.send(topic, value=b"served", partition=0).get(timeout=30).offset == 256
        producer.close()

        # reading the answers resumes the broker: every request is answered, in order
        received = bytearray()
        answered = 0
        deadline = time.monotonic() + 120
        while answered < sent_requests + (1 if pending else 0):
            assert time.monotonic() < deadline, f"{answered} of {sent_requests} answered"
            readable, writable, _ = select.select([connection], [connection] if pending else [], [], 1.0)
            if writable:
                written = connection.send(pending)
                pending = pending[written:]
                if not pending:
                    sent_requests += 1
            if readable:
                chunk = connection.recv(1 << 20)
                assert chunk, "the broker closed the connection"
                received += chunk
                frames_read = _split_frames(bytes(received), partial=True)
                for frame in frames_read:
                    (correlation,) = struct.unpack_from(">i", frame, 4)
                    assert correlation == answered % len(frames)
                    answered += 1
                del received[:sum(len(frame) for frame in frames_read)]
    finally:
        connection.close()
    assert answered >= sent_requests
    assert cluster.error_lines() == []


def test_frames_are_capped_by_socket_request_max_bytes(cluster: BrokerCluster) -> None:
    """A frame announcing more than ``socket.request.max.bytes`` closes the connection before its
    body is read; a request just under the cap is served."""
    address = cluster.brokers[1].address
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as connection:
        connection.sendall(struct.pack(">i", MAX_REQUEST_BYTES + 1) + b"\0" * 1024)
        assert connection.recv(65536) == b""  # closed by the broker, nothing answered
    topic = f"kp-{uuid.uuid4().hex[:10]}"
    cluster.create_topic(topic, partitions=1, replication_factor=1,
                         configs={"max.message.bytes": str(2 * MAX_REQUEST_BYTES)})
    leader = cluster.brokers[cluster.wait_for(lambda: max(cluster.partitions(topic)[0]["leader"], 0), 30, "a leader")]
    from kafka.record.default_records import DefaultRecordBatchBuilder

    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=-1,
                                        producer_epoch=-1, base_sequence=-1, batch_size=MAX_REQUEST_BYTES)
    for index in range(4):
        builder.append(index, timestamp=None, key=None, value=b"x" * (1024 * 1024 - 1024), headers=[])
    batch = bytes(builder.build())
    frame = wire.request_frame(0, 9, 11, wire.request(0, 9, {"acks": 1, "timeout": 10_000, "topic_data": [
        {"name": topic, "partition_data": [{"index": 0, "records": batch}]}]}))
    assert MAX_REQUEST_BYTES - 64 * 1024 < len(frame) - 4 <= MAX_REQUEST_BYTES
    (answer,) = _split_frames(_exchange(leader.address, frame, responses=1, timeout=30))
    correlation, response = wire.read_response(answer, 0, 9)
    assert correlation == 11
    partition = response.responses[0].partition_responses[0]
    assert (partition.error_code, partition.base_offset) == (0, 0)
