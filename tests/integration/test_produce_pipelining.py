"""Produce requests pipelined on one connection are appended as they come, on both front ends.

An acks=all request waiting for replication must not hold back the requests behind it on the
same connection (Kafka's clients pipeline several ProduceRequests per broker): they are appended
at once, and the answers still come back in request order. The follower is frozen (SIGSTOP, its
ISR membership kept by a long replica.lag.time.max.ms), so the acks=all request can only end by
its timeout; the acks=1 request behind it carries its LogAppendTime, which says when it was
appended. Appended one after the other, it would be stamped after the first request's timeout.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from kafkalite import KafkaProducer, protocol
from kafkalite.errors import RequestTimedOutError
from kafkalite.record.batch import build_batch
from kafkalite.transport import AsyncTransport, check_answer
from tests.support import kafka_wire as wire
from tests.support.cluster import BrokerCluster, running_cluster

pytestmark = [pytest.mark.integration]

WAIT_TIMEOUT_MS = 3000
#: the acks=1 request must be stamped well before the acks=all one's timeout ends
APPENDED_WITHIN_MS = WAIT_TIMEOUT_MS // 2


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, zookeeper: Any) -> Iterator[BrokerCluster]:
    with running_cluster(tmp_path_factory, zookeeper, "pipelining", size=2,
                         extra_properties={"replica.lag.time.max.ms": "60000"}) as brokers:
        yield brokers


def _topic_with_a_frozen_follower(cluster: BrokerCluster) -> tuple[str, int, int]:
    """(topic, leader, follower) of a new RF=2 topic stamped with LogAppendTime, follower frozen."""
    topic = f"pipelined-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(topic, partitions=1, replication_factor=2,
                         configs={"message.timestamp.type": "LogAppendTime", "min.insync.replicas": "1"})
    [partition] = cluster.wait_in_sync(topic)
    leader = partition["leader"]
    follower = next(broker for broker in partition["replicas"] if broker != leader)
    # The metadata can say "in sync" before the leader's partition has taken office: one record
    # replicated (offset 0, a producer that retries) shows both serve it.
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all")
    try:
        producer.send(topic, b"ready", partition=0).get(30)
    finally:
        producer.close()
    assert cluster.partitions(topic)[0]["leader"] == leader
    cluster.brokers[follower].freeze()
    return topic, leader, follower


def _read_frames(connection: socket.socket, count: int) -> list[bytes]:
    received = bytearray()
    frames: list[bytes] = []
    while len(frames) < count:
        chunk = connection.recv(65536)
        assert chunk, "the broker closed the connection"
        received += chunk
        while len(received) >= 4 and len(received) >= 4 + struct.unpack_from(">i", received)[0]:
            size = struct.unpack_from(">i", received)[0]
            frames.append(bytes(received[:4 + size]))
            del received[:4 + size]
    return frames


def test_kafka_protocol_appends_the_next_request_while_an_acks_all_one_waits(cluster: BrokerCluster) -> None:
    topic, leader, follower = _topic_with_a_frozen_follower(cluster)
    try:
        def produce(correlation_id: int, acks: int, value: bytes) -> bytes:
            return wire.request_frame(0, 9, correlation_id, wire.request(0, 9, {
                "acks": acks, "timeout": WAIT_TIMEOUT_MS, "topic_data": [
                    {"name": topic, "partition_data": [{"index": 0, "records": build_batch([value])}]}]}))

        host, port = cluster.brokers[leader].address.rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=WAIT_TIMEOUT_MS / 1000 + 10) as connection:
            sent_ms = time.time() * 1000
            connection.sendall(produce(1, -1, b"waits") + produce(2, 1, b"behind it"))
            answers = [wire.read_response(frame, 0, 9) for frame in _read_frames(connection, 2)]
        assert [correlation_id for correlation_id, _ in answers] == [1, 2]  # in request order
        first = answers[0][1].responses[0].partition_responses[0]
        second = answers[1][1].responses[0].partition_responses[0]
        assert (first.error_code, first.base_offset) == (RequestTimedOutError.errno, 1)
        assert (second.error_code, second.base_offset) == (0, 2)
        appended_ms = second.log_append_time.timestamp() * 1000  # kio reads it as a datetime
        assert appended_ms - sent_ms < APPENDED_WITHIN_MS, appended_ms - sent_ms
    finally:
        cluster.brokers[follower].thaw()


def test_binary_channel_appends_the_next_request_while_an_acks_all_one_waits(cluster: BrokerCluster) -> None:
    topic, leader, follower = _topic_with_a_frozen_follower(cluster)

    async def exchange() -> tuple[float, list[tuple[int, Any]]]:
        transport = AsyncTransport(request_timeout_ms=WAIT_TIMEOUT_MS + 10_000)
        try:
            connection = await transport.connection(cluster.brokers[leader].address)
            requests = [protocol.ProduceRequest(acks, WAIT_TIMEOUT_MS, [
                protocol.ProducePartition(topic, 0, build_batch([value]))])
                for acks, value in ((-1, b"waits"), (1, b"behind it"))]
            sent_ms = time.time() * 1000
            # The channel pairs answers with requests in order: swapped answers would give the
            # first request the second one's offset.
            futures = [connection.submit(protocol.PRODUCE, protocol.encode_produce_request(request))
                       for request in requests]
            return sent_ms, [await future for future in futures]
        finally:
            await transport.close()

    try:
        sent_ms, answers = asyncio.run(exchange())
    finally:
        cluster.brokers[follower].thaw()
    [first], [second] = (protocol.decode_produce_response(check_answer(status, body)) for status, body in answers)
    assert (first.error_code, first.base_offset) == (RequestTimedOutError.errno, 1)
    assert (second.error_code, second.base_offset) == (0, 2)
    assert second.log_append_time - sent_ms < APPENDED_WITHIN_MS, second.log_append_time - sent_ms
