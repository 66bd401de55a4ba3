"""The HTTP boundary of a real broker: calls only brokers make need the caller's current broker
epoch; malformed input of every kind is a named 4xx in the documented JSON shape (never a 5xx,
never an ERROR in the log); snappy batches in Kafka's framing are accepted; duplicate header
keys survive the JSON records route."""

from __future__ import annotations

import json
import socket
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kafkalite import protocol
from kafkalite.record.batch import build_batch, decode_all
from kafkalite.record.codec import Compression
from tests.support.cluster import BrokerCluster, BrokerProcess, HttpError, http

pytestmark = pytest.mark.integration

#: Every JSON route that takes a POST body (the group routes included).
JSON_POST_ROUTES = [
    protocol.METADATA, protocol.LIST_OFFSETS, protocol.OFFSETS_FOR_LEADER_EPOCH, protocol.INIT_PRODUCER_ID,
    protocol.DELETE_RECORDS,
    protocol.CREATE_TOPICS, protocol.DELETE_TOPICS, protocol.CREATE_PARTITIONS, protocol.DESCRIBE_CONFIGS,
    protocol.ALTER_CONFIGS, protocol.ELECT_LEADERS, protocol.CONTROLLED_SHUTDOWN, protocol.PARTITION_STATES,
    protocol.ALTER_PARTITION_REASSIGNMENTS, protocol.LIST_PARTITION_REASSIGNMENTS,
    protocol.TOPIC_RECORDS.format(topic="boundary"), protocol.FIND_COORDINATOR, protocol.JOIN_GROUP,
    protocol.SYNC_GROUP, protocol.HEARTBEAT, protocol.LEAVE_GROUP, protocol.OFFSET_COMMIT, protocol.OFFSET_FETCH,
    protocol.LIST_GROUPS, protocol.DESCRIBE_GROUPS, protocol.DELETE_GROUPS,
]


def log_problems(broker: BrokerProcess) -> list[str]:
    """ERROR lines and tracebacks in a broker's log."""
    text = broker.log_path.read_text(errors="replace")
    return [line for line in text.splitlines() if "] ERROR " in line or line.startswith("Traceback")]


def raw_exchange(address: str, payload: bytes, timeout: float = 10.0) -> tuple[int, dict[str, str], bytes]:
    """Send bytes as they are on a fresh connection; the (status, headers, body) of the answer."""
    host, port = address.split(":")
    with socket.create_connection((host, int(port)), timeout=timeout) as connection:
        connection.sendall(payload)
        received = b""
        while True:
            chunk = connection.recv(65536)
            if not chunk:
                break
            received += chunk
            head, separator, rest = received.partition(b"\r\n\r\n")
            if separator:
                lines = head.decode("latin-1").split("\r\n")
                headers = {name.strip().lower(): value.strip()
                           for name, _, value in (line.partition(":") for line in lines[1:])}
                length = int(headers.get("content-length", "-1"))
                if 0 <= length <= len(rest):
                    return int(lines[0].split()[1]), headers, rest[:length]
    head, _, rest = received.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {name.strip().lower(): value.strip() for name, _, value in (line.partition(":") for line in lines[1:])}
    return int(lines[0].split()[1]), headers, rest


def post(address: str, path: str, raw: bytes) -> tuple[int, Any]:
    """POST raw bytes; (status, parsed JSON answer) whatever the status."""
    try:
        return 200, http(address, "POST", path, raw=raw)
    except HttpError as exc:
        return exc.status, exc.body


def assert_named_client_error(status: int, body: Any, *names: str) -> None:
    assert 400 <= status < 500, (status, body)
    assert isinstance(body, dict) and body.get("error") in names, (status, body)
    assert body["error_code"] == {"INVALID_REQUEST": 42, "MESSAGE_TOO_LARGE": 10, "INVALID_TOPIC_EXCEPTION": 17,
                                  "INVALID_REQUIRED_ACKS": 21, "STALE_BROKER_EPOCH": 77,
                                  "INVALID_PARTITIONS": 37}[body["error"]], body


# -- point 5: calls only brokers make carry the caller's broker epoch -----------------------------

@pytest.fixture
def pair(tmp_path: Path, zookeeper) -> Iterator[BrokerCluster]:  # type: ignore[no-untyped-def]
    brokers = BrokerCluster(tmp_path, f"{zookeeper.connect_string}/epoch-{uuid.uuid4().hex[:8]}", size=2).start()
    try:
        yield brokers
    finally:
        brokers.stop()


def test_controlled_shutdown_and_follower_fetch_need_the_current_broker_epoch(pair: BrokerCluster) -> None:
    controller = pair.controller_id()
    victim = next(broker_id for broker_id in pair.brokers if broker_id != controller)
    epoch = pair.broker_epoch(victim)
    pair.create_topic("guarded", partitions=4, replication_factor=2)
    before = pair.wait_in_sync("guarded")
    assert any(item["leader"] == victim for item in before)
    address = pair.brokers[controller].address
    refused = [
        ({"broker_id": victim, "broker_epoch": None}, "INVALID_REQUEST"),
        ({"broker_id": victim}, "INVALID_REQUEST"),
        ({"broker_id": victim, "broker_epoch": -1}, "INVALID_REQUEST"),
        ({"broker_id": victim, "broker_epoch": "1"}, "INVALID_REQUEST"),
        ({"broker_id": victim, "broker_epoch": epoch + 1}, "STALE_BROKER_EPOCH"),
        ({"broker_id": victim, "broker_epoch": epoch - 1}, "STALE_BROKER_EPOCH"),
        ({"broker_id": 77, "broker_epoch": epoch}, "STALE_BROKER_EPOCH"),
    ]
    for body, name in refused:
        status, answer = post(address, protocol.CONTROLLED_SHUTDOWN, json.dumps(body).encode())
        assert_named_client_error(status, answer, name)
    # Nothing moved, and the controller still elects the victim: a new partition it prefers gets it.
    after = pair.partitions("guarded")
    assert [(item["leader"], item["isr"]) for item in after] == [(item["leader"], item["isr"]) for item in before]
    answer = pair.call("POST", protocol.CREATE_TOPICS, {"topics": [{
        "name": "fresh", "replica_assignment": {"0": [victim, controller]}}], "timeout_ms": 30000})
    assert answer["topics"][0]["error_code"] == 0, answer
    assert pair.wait_for(lambda: pair.partitions("fresh")[0]["leader"] == victim, 15, "the victim leads 'fresh'")
    warnings = [line for line in pair.brokers[controller].log_path.read_text().splitlines()
                if " WARNING " in line and "refused a controlled shutdown" in line]
    typed = [body for body, _ in refused if not isinstance(body.get("broker_epoch"), str)]
    assert len(warnings) == len(typed), warnings  # a wrong-typed epoch is refused before the check

    # A follower fetch (replica id >= 0) without the broker's current epoch is refused too.
    leader_of_guarded = next(item["leader"] for item in after if item["partition"] == 0)
    for replica_id, replica_epoch, name in [(victim, -1, "INVALID_REQUEST"),
                                            (victim, epoch + 1, "STALE_BROKER_EPOCH"),
                                            (42, 12345, "STALE_BROKER_EPOCH")]:
        request = protocol.FetchRequest([protocol.FetchPartition("guarded", 0, 0)], replica_id=replica_id,
                                        replica_epoch=replica_epoch, max_wait_ms=0)
        status, answer = post(pair.brokers[leader_of_guarded].address, protocol.FETCH,
                              protocol.encode_fetch_request(request))
        assert_named_client_error(status, answer, name)

    # The brokers' own calls carry their epochs: replication keeps working, acks=all succeeds,
    # and a graceful stop still moves leadership away before the process exits.
    produced = pair.call("POST", protocol.TOPIC_RECORDS.format(topic="guarded"),
                         {"records": [{"value": f"v{i}", "partition": i % 4} for i in range(8)], "acks": "all"})
    assert all(entry["error_code"] == 0 for entry in produced["offsets"]), produced
    assert pair.brokers[victim].stop(timeout=60) == 0
    moved = pair.partitions("guarded", broker_id=controller)
    assert all(item["leader"] == controller for item in moved), moved
    assert "controlled shutdown succeeded" in pair.brokers[victim].log_path.read_text()
    for broker in pair.brokers.values():
        assert log_problems(broker) == []


# -- points 6 and 7: bad input, snappy, headers -------------------------------------------------

@pytest.fixture(scope="module")
def single(tmp_path_factory: pytest.TempPathFactory, zookeeper) -> Iterator[BrokerCluster]:  # type: ignore[no-untyped-def]
    connect = f"{zookeeper.connect_string}/boundary-{uuid.uuid4().hex[:8]}"
    brokers = BrokerCluster(tmp_path_factory.mktemp("boundary"), connect, size=1,
                            extra_properties={"socket.request.max.bytes": str(1024 * 1024)}).start()
    try:
        brokers.create_topic("boundary", partitions=1, replication_factor=1)
        brokers.wait_in_sync("boundary")
        yield brokers
    finally:
        brokers.stop()


def test_malformed_json_is_a_named_client_error_on_every_route(single: BrokerCluster) -> None:
    address = single.brokers[1].address
    deep = b'{"partitions":' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    moderately_deep = b'{"topics":' + b"[" * 40 + b"]" * 40 + b"}"
    huge_number = b'{"partitions":' + b"9" * 5000 + b"}"
    huge_float = b'{"timeout_ms":1' + b"0" * 400 + b'.5}'
    for path in JSON_POST_ROUTES:
        for body in (deep, moderately_deep, huge_number, huge_float, b"[1,2]", b'{"a":NaN}', b"\xff\xfe{",
                     b'{"unterminated'):
            status, answer = post(address, path, body)
            assert_named_client_error(status, answer, "INVALID_REQUEST")
    items: list[tuple[str, dict[str, Any]]] = [
        (protocol.OFFSETS_FOR_LEADER_EPOCH, {"partitions": [None]}),
        (protocol.LIST_OFFSETS, {"partitions": [None]}),
        (protocol.CREATE_TOPICS, {"topics": [None]}),
        (protocol.TOPIC_RECORDS.format(topic="boundary"), {"records": [None]}),
        (protocol.OFFSETS_FOR_LEADER_EPOCH,
         {"partitions": [{"topic": "boundary", "partition": 0, "leader_epoch": 1.5}]}),
        (protocol.ELECT_LEADERS, {"partitions": [None]}),
        (protocol.ELECT_LEADERS, {"partitions": [7]}),
        (protocol.LIST_OFFSETS, {"partitions": [{"topic": "boundary", "partition": True}]}),
        (protocol.LIST_OFFSETS, {"partitions": [{"topic": "boundary", "partition": 2 ** 70}]}),
        (protocol.ALTER_PARTITION_REASSIGNMENTS, {"partitions": [{"topic": "boundary", "partition": 0,
                                                                  "replicas": [1.0]}]}),
        (protocol.DELETE_TOPICS, {"topics": [1]}),
        (protocol.DELETE_RECORDS, {"partitions": [None]}),
        (protocol.DELETE_RECORDS, {"partitions": [{"topic": "boundary", "partition": 0, "offset": 1.5}]}),
        (protocol.DELETE_RECORDS, {"partitions": [{"topic": "boundary", "partition": 0, "offset": 2 ** 70}]}),
        (protocol.METADATA, {"topics": ["boundary", None]}),
        # values the group records cannot hold (Kafka's int32 fields and int16-length strings)
        (protocol.OFFSET_COMMIT, {"group_id": "g", "topics": [
            {"name": "boundary", "partitions": [{"partition": 2 ** 40, "offset": 1}]}]}),
        (protocol.OFFSET_COMMIT, {"group_id": "g", "topics": [
            {"name": "boundary", "partitions": [{"partition": 0, "offset": 1, "leader_epoch": -2 ** 40}]}]}),
        (protocol.JOIN_GROUP, {"group_id": "g", "session_timeout_ms": 6000, "rebalance_timeout_ms": 2 ** 40,
                               "protocols": [{"name": "range"}]}),
        (protocol.OFFSET_FETCH, {"group_id": "g" * 40_000}),
    ]
    for value in (1.5, True, "0", None, [0], {"p": 0}):
        items.append((protocol.OFFSET_COMMIT, {"group_id": "g", "topics": [
            {"name": "boundary", "partitions": [{"partition": value, "offset": 1}]}]}))
        items.append((protocol.OFFSET_COMMIT, {"group_id": "g", "topics": [
            {"name": "boundary", "partitions": [value]}]}))
        items.append((protocol.OFFSET_FETCH,
                      {"group_id": "g", "topics": [{"name": "boundary", "partitions": [value]}]}))
        items.append((protocol.OFFSET_FETCH, {"group_id": "g", "topics": [value]}))
    for path, body in items:
        status, answer = post(address, path, json.dumps(body).encode())
        assert_named_client_error(status, answer, "INVALID_REQUEST")
    status, answer = post(address, protocol.TOPIC_RECORDS.format(topic="boundary"),
                          json.dumps({"records": [{"value": "x"}], "acks": 1.0}).encode())
    assert_named_client_error(status, answer, "INVALID_REQUIRED_ACKS")
    assert log_problems(single.brokers[1]) == []


def test_topic_names_are_matched_whole(single: BrokerCluster) -> None:
    address = single.brokers[1].address
    for name in ("trailing\n", "x" * 250, ".", "..", "a/b", "bad name", "ü"):
        answer = http(address, "POST", protocol.CREATE_TOPICS, {"topics": [{"name": name, "num_partitions": 1,
                                                                            "replication_factor": 1}]})
        assert answer["topics"][0]["error"] == "INVALID_TOPIC_EXCEPTION", answer
        answer = http(address, "POST", protocol.METADATA, {"topics": [name], "allow_auto_topic_creation": True})
        assert answer["topics"][0]["error_code"] == 17, answer
    for path in ("/v1/topics/trailing%0A/records", "/v1/topics/a%20b/records"):
        status, answer = post(address, path, b'{"records":[{"value":"x"}]}')
        assert_named_client_error(status, answer, "INVALID_TOPIC_EXCEPTION")
    status, answer = post(address, protocol.CREATE_PARTITIONS, json.dumps({"topics": [{"name": "boundary",
                                                                                       "count": 10 ** 12}]}).encode())
    assert status == 200 and answer["topics"][0]["error"] == "INVALID_PARTITIONS", answer
    assert "trailing\n" not in [topic["name"] for topic in http(address, "POST", protocol.METADATA, {})["topics"]]
    assert log_problems(single.brokers[1]) == []


def test_http_level_errors_are_json_and_disconnects_are_quiet(single: BrokerCluster) -> None:
    address = single.brokers[1].address
    host = f"Host: {address}\r\n".encode()
    exchanges = [
        (b"GARBAGE\r\n\r\n", 400),
        (b"GET /health HTTP/1.1\r\n" + host + b"Content-Length: abc\r\n\r\n", 400),
        (b"GET /he\x00alth HTTP/1.1\r\n" + host + b"\r\n", 400),
        (b"POST /v1/metadata HTTP/1.1\r\n" + host + b"Transfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n", 400),
        (b"POST /v1/metadata HTTP/1.1\r\n" + host + b"Content-Encoding: gzip\r\nContent-Length: 4\r\n\r\n{}{}", 400),
        (b"GET /v1/nowhere HTTP/1.1\r\n" + host + b"\r\n", 404),
        (b"DELETE /v1/metadata HTTP/1.1\r\n" + host + b"\r\n", 405),
        (b"GET /v1/channel HTTP/1.1\r\n" + host + b"\r\n", 400),
        (b"POST /v1/metadata HTTP/1.1\r\n" + host + b"Content-Length: 2000000\r\n\r\n" + b" " * 2_000_000, 413),
    ]
    for payload, expected in exchanges:
        status, headers, body = raw_exchange(address, payload)
        assert status == expected, (payload[:60], status, body)
        assert headers.get("content-type", "").startswith("application/json"), (payload[:60], headers)
        answer = json.loads(body)
        assert answer["error"] == ("MESSAGE_TOO_LARGE" if expected == 413 else "INVALID_REQUEST"), answer
        if expected == 405:
            assert "GET" in headers.get("allow", ""), headers
    # Clients that go away mid-request: nothing to answer, nothing to log above INFO.
    end = http(address, "GET", "/v1/topics/boundary/partitions/0/records?offset=0")["high_watermark"]
    for payload in (b"POST /v1/metadata HTTP/1.1\r\n" + host + b"Content-Length: 1000\r\n\r\n{\"top",
                    b"POST /v1/produce HTTP/1.1\r\n" + host + b"Content-Length: 100000\r\n\r\n" + b"\0" * 5000,
                    f"GET /v1/topics/boundary/partitions/0/records?offset={end}&timeout_ms=500 HTTP/1.1\r\n".encode()
                    + host + b"\r\n"):
        host_name, port = address.split(":")
        with socket.create_connection((host_name, int(port)), timeout=5) as connection:
            connection.sendall(payload)
        single.wait_for(lambda: http(address, "GET", "/health")["status"] == "ok", 10, "broker still serving")
    # Our own long poll starts after the abandoned one and outlasts it: when it returns, the
    # abandoned poll has ended too and tried to answer a closed connection.
    started = time.monotonic()
    http(address, "GET", f"/v1/topics/boundary/partitions/0/records?offset={end}&timeout_ms=1000")
    assert time.monotonic() - started >= 0.9
    assert log_problems(single.brokers[1]) == []


def test_snappy_batch_in_kafka_framing_is_accepted_and_read_back(single: BrokerCluster) -> None:
    values = [f"snappy-{i}".encode() * 50 for i in range(200)]
    batch = build_batch(values, keys=[b"k"] * len(values), compression=Compression.SNAPPY)
    payload = bytes(batch[61:])  # the records section of a v2 batch starts at byte 61
    assert payload.startswith(b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01"), payload[:16]
    request = protocol.ProduceRequest(-1, 10_000, [protocol.ProducePartition("boundary", 0, batch)])
    answer = http(single.brokers[1].address, "POST", protocol.PRODUCE,
                  raw=b"".join(bytes(piece) for piece in protocol.encode_produce_request(request)),
                  content_type=protocol.BINARY_CONTENT_TYPE)
    result = protocol.decode_produce_response(answer)[0]
    assert result.error_code == 0, result
    fetch = protocol.FetchRequest([protocol.FetchPartition("boundary", 0, result.base_offset)], max_wait_ms=0)
    fetched = protocol.decode_fetch_response(http(single.brokers[1].address, "POST", protocol.FETCH,
                                                  raw=protocol.encode_fetch_request(fetch),
                                                  content_type=protocol.BINARY_CONTENT_TYPE))[0]
    records = [record for record in decode_all(bytes(fetched.records)) if record.offset >= result.base_offset]
    assert [record.value for record in records][:len(values)] == values
    json_view = http(single.brokers[1].address, "GET",
                     f"/v1/topics/boundary/partitions/0/records?offset={result.base_offset}")
    assert [entry["value"] for entry in json_view["records"]][:3] == [value.decode() for value in values[:3]]
    assert log_problems(single.brokers[1]) == []


def test_duplicate_header_keys_survive_the_json_records_route(single: BrokerCluster) -> None:
    address = single.brokers[1].address
    headers = [["a", "1"], ["b", None], ["a", "2"], ["a", "3"]]
    answer = http(address, "POST", "/v1/topics/boundary/records", {"records": [
        {"value": "pairs", "headers": headers},
        {"value": "object", "headers": {"source": "curl", "kind": "old"}}]})
    offsets = [entry["offset"] for entry in answer["offsets"]]
    assert all(entry["error_code"] == 0 for entry in answer["offsets"]), answer
    view = http(address, "GET", f"/v1/topics/boundary/partitions/0/records?offset={offsets[0]}")
    by_value = {entry["value"]: entry for entry in view["records"]}
    assert by_value["pairs"]["headers"] == headers
    assert by_value["object"]["headers"] == [["source", "curl"], ["kind", "old"]]
    # Records produced in binary with repeated keys read back the same way.
    batch = build_batch([b"binary"], headers=[[("x", b"1"), ("x", b"2")]])
    request = protocol.ProduceRequest(-1, 10_000, [protocol.ProducePartition("boundary", 0, batch)])
    result = protocol.decode_produce_response(http(
        address, "POST", protocol.PRODUCE,
        raw=b"".join(bytes(piece) for piece in protocol.encode_produce_request(request)),
        content_type=protocol.BINARY_CONTENT_TYPE))[0]
    view = http(address, "GET", f"/v1/topics/boundary/partitions/0/records?offset={result.base_offset}")
    assert view["records"][0]["headers"] == [["x", "1"], ["x", "2"]]
    for bad in ([["a"]], [["a", 1]], [[1, "a"]], "a=b", [None]):
        status, body = post(address, "/v1/topics/boundary/records",
                            json.dumps({"records": [{"value": "v", "headers": bad}]}).encode())
        assert_named_client_error(status, body, "INVALID_REQUEST")
