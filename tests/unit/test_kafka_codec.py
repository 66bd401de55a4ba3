"""The Kafka listener's pieces without a broker: headers, parsing, the response builder, sniffing
and one connection's framing, ordering, refusals and back-pressure (on a recording transport)."""

from __future__ import annotations

import asyncio
import datetime
import logging
import struct
import uuid
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, cast

import pytest
from kio.index import load_request_schema
from kio.schema.errors import ErrorCode

from kafkalite.broker.kafka import codec
from kafkalite.broker.kafka.connection import MAX_QUEUED_REQUESTS, MAX_WAITING_ANSWERS, KafkaConnection
from kafkalite.broker.kafka.context import NO_RESPONSE, ApiHandler, KafkaAnswer, KafkaRequestContext
from kafkalite.broker.kafka.registry import ApiRegistry
from kafkalite.broker.listener import is_http
from kafkalite.broker.quotas import BrokerQuotas
from kafkalite.broker.services import BrokerServices
from kafkalite.broker.stats import BrokerStats
from kafkalite.config import BrokerConfig
from kafkalite.errors import InvalidRequestError, NotLeaderForPartitionError
from tests.support.kafka_wire import metadata_request, read_response, request_frame


# -- headers and parsing ------------------------------------------------------------------------
@pytest.mark.parametrize("version", [0, 4, 9, 12])
def test_request_header_and_body_round_trip_through_kio(version: int) -> None:
    frame = request_frame(3, version, 77, metadata_request(version, ["a", "b"]), client_id="cli",
                          tagged_header=b"\x01\x05\x02xy")  # one unknown tagged field, skipped
    body = frame[4:]
    flexible = codec.is_flexible(3, version)
    if not flexible:
        body = request_frame(3, version, 77, metadata_request(version, ["a", "b"]), client_id="cli")[4:]
    header = codec.read_request_header(body, flexible)
    assert (header.api_key, header.api_version, header.correlation_id, header.client_id) == (3, version, 77, "cli")
    request = codec.parse_request(body, header, codec.request_class(3, version))  # type: ignore[arg-type]
    assert [topic.name for topic in request.topics] == ["a", "b"]


def test_null_client_id_is_read_as_none() -> None:
    body = request_frame(3, 1, 1, metadata_request(1, None), client_id=None)[4:]
    header = codec.read_request_header(body, False)
    assert header.client_id is None


@pytest.mark.parametrize("cut", [3, 7, 9, 12, 15])
def test_truncated_requests_are_invalid_request(cut: int) -> None:
    body = request_frame(3, 12, 5, metadata_request(12, ["topic-a"]))[4:]
    with pytest.raises(InvalidRequestError):
        header = codec.read_request_header(body[:cut], True)
        codec.parse_request(body[:cut], header, codec.request_class(3, 12))  # type: ignore[arg-type]


def test_bytes_after_the_body_are_ignored_as_kafka_ignores_them() -> None:
    exact = request_frame(3, 12, 5, metadata_request(12, ["topic-a"]))[4:]
    header = codec.read_request_header(exact, True)
    expected = codec.parse_request(exact, header, codec.request_class(3, 12))  # type: ignore[arg-type]
    padded = exact + b"\x01\0\0"
    assert codec.parse_request(padded, header, codec.request_class(3, 12)) == expected  # type: ignore[arg-type]
    assert [topic.name for topic in expected.topics] == ["topic-a"]


def test_librdkafkas_all_topics_metadata_request_is_read_as_kafka_reads_it() -> None:
    # librdkafka 2.x's all-topics Metadata v12: the null topic array written as four bytes
    frame = bytes.fromhex("0003000c00000004000772646b61666b610000000000010000")
    header = codec.read_request_header(frame, True)
    request = codec.parse_request(frame, header, codec.request_class(3, 12))  # type: ignore[arg-type]
    assert request.topics is None


# -- the response builder -----------------------------------------------------------------------
def test_builder_converts_plain_values_and_fills_defaults_recursively() -> None:
    topic_id = uuid.uuid4()
    answer = {"brokers": [{"node_id": 1, "host": "h", "port": 9092, "rack": None}], "cluster_id": "c",
              "controller_id": 1, "throttle_time_ms": 25, "not_a_field": 1,
              "topics": [{"error_code": 0, "name": "t", "topic_id": topic_id.hex, "partitions": [
                  {"error_code": 6, "partition_index": 0, "leader_id": 2, "replica_nodes": [2, 3], "isr_nodes": [2]}]}]}
    response = codec.build_response(3, 12, answer)
    assert response.throttle_time == datetime.timedelta(milliseconds=25)
    topic = response.topics[0]
    assert topic.topic_id == topic_id and topic.is_internal is False
    partition = topic.partitions[0]
    assert partition.error_code is ErrorCode.not_leader_or_follower
    assert partition.leader_epoch == -1  # the schema's default
    assert partition.replica_nodes == (2, 3) and partition.offline_replicas == ()
    frame = codec.encode_response(3, 12, 9, response)
    assert read_response(frame, 3, 12) == (9, response)


def test_builder_drops_fields_an_old_version_lacks() -> None:
    answer = {"brokers": [{"node_id": 1, "host": "h", "port": 1, "rack": "r"}], "cluster_id": "c",
              "controller_id": 1, "topics": []}
    old = codec.build_response(3, 0, answer)
    assert not hasattr(old, "cluster_id") and not hasattr(old.brokers[0], "rack")
    assert read_response(codec.encode_response(3, 0, 1, old), 3, 0)[1] == old


def test_api_versions_always_answers_with_response_header_v0() -> None:
    response = codec.build_response(18, 3, {"error_code": 0, "api_keys": [
        {"api_key": 18, "min_version": 0, "max_version": 3}]})
    frame = codec.encode_response(18, 3, 4, response)
    assert read_response(frame, 18, 3) == (4, response)  # no tagged-field byte after the correlation id
    flexible = codec.encode_response(3, 9, 4, codec.build_response(3, 9, {"topics": []}))
    assert flexible[8] == 0  # response header v1: an empty tagged-field section


def test_error_answer_names_every_item_of_the_request() -> None:
    request = codec.build_entity(load_request_schema(0, 9), {"acks": -1, "timeout": 1000, "topic_data": [
        {"name": "a", "partition_data": [{"index": 0, "records": b""}, {"index": 2, "records": b""}]}]})
    answer = codec.error_answer(0, 9, request, 7, "timed out")
    response = codec.build_response(0, 9, answer)
    items = [(topic.name, partition.index, partition.error_code) for topic in response.responses
             for partition in topic.partition_responses]
    assert items == [("a", 0, ErrorCode.request_timed_out), ("a", 2, ErrorCode.request_timed_out)]
    fetch = codec.build_response(1, 4, codec.error_answer(1, 4, codec.build_entity(load_request_schema(1, 4), {
        "topics": [{"topic": "t", "partitions": [{"partition": 1, "fetch_offset": 5}]}]}), 6, None))
    assert fetch.responses[0].partitions[0].partition_index == 1
    assert fetch.responses[0].partitions[0].error_code is ErrorCode.not_leader_or_follower


# -- sniffing -----------------------------------------------------------------------------------
def test_sniffing_tells_http_methods_from_kafka_sizes() -> None:
    for method in (b"GET /", b"POST /", b"PUT", b"DELETE", b"HEAD", b"OPTIONS", b"PATCH"):
        assert is_http(method)
    for kafka in (struct.pack(">i", 20), b"\x00", b"\x16\x03\x01", b"\xff"):
        assert not is_http(kafka)


# -- one connection -----------------------------------------------------------------------------
@dataclass
class RecordingTransport:
    written: list[bytes] = field(default_factory=list)
    closed: bool = False
    paused: bool = False
    pauses: int = 0

    def write(self, data: bytes) -> None:
        self.written.append(bytes(data))

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def pause_reading(self) -> None:
        self.paused = True
        self.pauses += 1

    def resume_reading(self) -> None:
        self.paused = False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 5555) if name == "peername" else default


SLOW_FIRST = asyncio.Event()
#: Requests for a topic named "held-..." release their connection, then wait for this.
HELD = asyncio.Event()
#: The topics whose requests the handler started, in order.
STARTED: list[str] = []


async def _metadata_handler(context: KafkaRequestContext, request: Any) -> KafkaAnswer:
    STARTED.extend(topic.name for topic in request.topics or ())
    if request.topics and request.topics[0].name.startswith("held"):
        context.release_next_request()  # like Produce after its appends
        await HELD.wait()
    if request.topics and request.topics[0].name == "slow":
        await SLOW_FIRST.wait()  # the first request finishes after the second one arrived
    if request.topics and request.topics[0].name == "fails":
        raise NotLeaderForPartitionError("not here")
    if request.topics and request.topics[0].name == "quiet":
        return NO_RESPONSE
    return {"brokers": [], "cluster_id": "c", "controller_id": 1,
            "topics": [{"name": topic.name, "error_code": 0, "partitions": []} for topic in request.topics or ()]}


def _connection(max_bytes: int = 1 << 20) -> tuple[KafkaConnection, RecordingTransport]:
    config = BrokerConfig(socket_request_max_bytes=max_bytes)
    services = cast(BrokerServices, SimpleNamespace(config=config, stats=BrokerStats(), authorizer=None,
                                                    quotas=BrokerQuotas(config)))
    registry = ApiRegistry([ApiHandler(3, 0, 12, _metadata_handler)])
    connection = KafkaConnection(services, registry, set())
    transport = RecordingTransport()
    connection.connection_made(cast(asyncio.Transport, transport))
    return connection, transport


async def _until(predicate: Any) -> None:
    for _ in range(1000):
        if predicate():
            return
        await asyncio.sleep(0)
    raise AssertionError("condition not reached")


def run(coroutine: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coroutine, 10))


def test_pipelined_requests_are_answered_in_order_even_split_across_reads() -> None:
    async def scenario() -> None:
        global SLOW_FIRST
        SLOW_FIRST = asyncio.Event()  # bound to this test's loop
        connection, transport = _connection()
        first = request_frame(3, 12, 1, metadata_request(12, ["slow"]))
        second = request_frame(3, 1, 2, metadata_request(1, ["fast"]))
        stream = first + second
        for index in range(0, len(stream), 3):  # three bytes at a time
            connection.data_received(stream[index:index + 3])
        await asyncio.sleep(0.01)
        assert transport.written == []  # the second waits for the first
        SLOW_FIRST.set()
        await _until(lambda: len(transport.written) == 2)
        assert read_response(transport.written[0], 3, 12)[0] == 1
        correlation_id, response = read_response(transport.written[1], 3, 1)
        assert correlation_id == 2 and response.topics[0].name == "fast"
        await connection.stop()

    run(scenario())


def test_a_request_that_does_not_release_its_connection_holds_the_next_one_back() -> None:
    async def scenario() -> None:
        global SLOW_FIRST
        SLOW_FIRST = asyncio.Event()  # bound to this test's loop
        STARTED.clear()
        connection, transport = _connection()
        connection.data_received(request_frame(3, 12, 1, metadata_request(12, ["slow"]))
                                 + request_frame(3, 12, 2, metadata_request(12, ["fast"])))
        await _until(lambda: STARTED == ["slow"])
        for _ in range(20):
            await asyncio.sleep(0)
        assert STARTED == ["slow"] and transport.written == []
        SLOW_FIRST.set()
        await _until(lambda: len(transport.written) == 2)
        assert STARTED == ["slow", "fast"]
        await connection.stop()

    run(scenario())


def test_a_released_request_lets_the_next_one_run_and_the_answers_keep_their_order() -> None:
    async def scenario() -> None:
        global HELD
        HELD = asyncio.Event()  # bound to this test's loop
        STARTED.clear()
        connection, transport = _connection()
        connection.data_received(request_frame(3, 12, 1, metadata_request(12, ["held-1"]))
                                 + request_frame(3, 12, 2, metadata_request(12, ["held-2"]))
                                 + request_frame(3, 12, 3, metadata_request(12, ["fast"])))
        await _until(lambda: STARTED == ["held-1", "held-2", "fast"])  # all three run together
        for _ in range(20):
            await asyncio.sleep(0)
        assert transport.written == []  # "fast" is done, but its answer waits for the two before it
        HELD.set()
        await _until(lambda: len(transport.written) == 3)
        assert [read_response(frame, 3, 12)[0] for frame in transport.written] == [1, 2, 3]
        await connection.stop()

    run(scenario())


def test_released_requests_waiting_for_their_answers_are_bounded_per_connection() -> None:
    async def scenario() -> None:
        global HELD
        HELD = asyncio.Event()  # bound to this test's loop
        STARTED.clear()
        connection, transport = _connection()
        count = MAX_WAITING_ANSWERS + 5
        connection.data_received(b"".join(request_frame(3, 12, number, metadata_request(12, [f"held-{number}"]))
                                          for number in range(count)))
        await _until(lambda: len(STARTED) == MAX_WAITING_ANSWERS)
        for _ in range(20):
            await asyncio.sleep(0)
        assert len(STARTED) == MAX_WAITING_ANSWERS  # the rest wait for the oldest answers
        HELD.set()
        await _until(lambda: len(transport.written) == count)
        assert [read_response(frame, 3, 12)[0] for frame in transport.written] == list(range(count))
        await connection.stop()

    run(scenario())


def test_oversize_frame_closes_the_connection() -> None:
    async def scenario() -> None:
        connection, transport = _connection(max_bytes=100)
        connection.data_received(struct.pack(">i", 101) + b"\0" * 10)
        assert transport.closed
        connection, transport = _connection(max_bytes=100)
        connection.data_received(struct.pack(">i", -5))
        assert transport.closed
        await connection.stop()

    run(scenario())


def test_named_error_is_answered_and_no_response_writes_nothing() -> None:
    async def scenario() -> None:
        connection, transport = _connection()
        connection.data_received(request_frame(3, 12, 1, metadata_request(12, ["quiet"])))
        connection.data_received(request_frame(3, 12, 2, metadata_request(12, ["fails"])))
        await _until(lambda: len(transport.written) == 1)
        correlation_id, response = read_response(transport.written[0], 3, 12)
        assert correlation_id == 2  # Metadata has no top-level error code: every topic carries it
        assert [(topic.name, topic.error_code) for topic in response.topics] == [
            ("fails", ErrorCode.not_leader_or_follower)]
        assert not transport.closed
        await connection.stop()

    run(scenario())


def test_every_request_is_counted_timed_and_logged_at_debug(caplog: pytest.LogCaptureFixture) -> None:
    async def scenario() -> BrokerStats:
        connection, transport = _connection()
        connection.data_received(request_frame(3, 12, 1, metadata_request(12, ["a"])))
        connection.data_received(request_frame(3, 12, 2, metadata_request(12, ["fails"])))
        await _until(lambda: len(transport.written) == 2)
        await connection.stop()
        return cast(BrokerStats, connection.services.stats)

    with caplog.at_level(logging.DEBUG, logger="kafkalite.broker.requests"):
        stats = run(scenario())
    counts = stats.requests.requests[("kafka", "Metadata")]
    assert (counts.requests, counts.errors, sum(counts.buckets)) == (2, 1, 2)
    assert counts.seconds_total > 0
    lines = [record.getMessage() for record in caplog.records if record.name == "kafkalite.broker.requests"]
    assert len(lines) == 2 and all(line.startswith("kafka Metadata v12 from ") for line in lines), lines
    assert "answered in" in lines[0] and "failed in" in lines[1]


def test_unsupported_api_versions_version_gets_the_supported_ranges_in_v0() -> None:
    async def scenario() -> None:
        connection, transport = _connection()
        frame = struct.pack(">hhih", 18, 42, 7, -1) + b"whatever a future version carries"
        connection.data_received(struct.pack(">i", len(frame)) + frame)
        await _until(lambda: len(transport.written) == 1)
        correlation_id, response = read_response(transport.written[0], 18, 0)
        assert correlation_id == 7 and response.error_code is ErrorCode.unsupported_version
        assert {(item.api_key, item.min_version, item.max_version) for item in response.api_keys} == {
            (3, 0, 12), (18, 0, 3)}
        assert not transport.closed
        await connection.stop()

    run(scenario())


@pytest.mark.parametrize("frame", [
    struct.pack(">hhih", 3, 13, 1, -1),  # a version beyond the registered range
    struct.pack(">hhih", 999, 0, 1, -1),  # an unknown API key
    struct.pack(">hhih", 3, 12, 1, -1) + b"\x05",  # a body that does not parse
    b"\x00\x03",  # shorter than a header
])
def test_unknown_or_malformed_requests_close_the_connection(frame: bytes) -> None:
    async def scenario() -> None:
        connection, transport = _connection()
        connection.data_received(struct.pack(">i", len(frame)) + frame)
        await _until(lambda: transport.closed)
        assert transport.written == []
        await connection.stop()

    run(scenario())


def test_a_client_that_does_not_read_is_not_read_from() -> None:
    async def scenario() -> None:
        connection, transport = _connection()
        connection.pause_writing()  # the transport's write buffer is over its high-water mark
        frame = request_frame(3, 1, 1, metadata_request(1, ["t"]))
        connection.data_received(frame * (MAX_QUEUED_REQUESTS + 5))
        await asyncio.sleep(0.01)
        assert transport.paused and len(transport.written) == 0
        connection.resume_writing()
        await _until(lambda: len(transport.written) == MAX_QUEUED_REQUESTS + 5)
        assert not transport.paused
        await connection.stop()

    run(scenario())


def test_a_large_unfinished_frame_behind_queued_ones_does_not_stall_reading() -> None:
    async def scenario() -> None:
        names = [f"topic-{index:04d}" for index in range(60)]
        first = request_frame(3, 1, 1, metadata_request(1, names))
        second = request_frame(3, 1, 2, metadata_request(1, names))
        connection, transport = _connection(max_bytes=len(first) + 10)
        connection.data_received(first + second[:-5])  # the second frame is nearly complete
        await _until(lambda: len(transport.written) == 1)
        assert not transport.paused
        connection.data_received(second[-5:])
        await _until(lambda: len(transport.written) == 2)
        assert [read_response(frame, 3, 1)[0] for frame in transport.written] == [1, 2]
        await connection.stop()

    run(scenario())
