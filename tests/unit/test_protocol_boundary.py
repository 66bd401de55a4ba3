"""The JSON boundary of kafkalite.protocol (bounded parsing, typed fields) and the fetch frame's
broker epoch."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings, strategies as st

from kafkalite import protocol
from kafkalite.errors import InvalidRequestError, InvalidRequiredAcksError, MessageSizeTooLargeError


@pytest.mark.parametrize("body", [
    b'{"a":' + b"[" * 100_000 + b"]" * 100_000 + b"}",
    b'{"a":' + b"[" * (protocol.MAX_JSON_DEPTH + 1) + b"]" * (protocol.MAX_JSON_DEPTH + 1) + b"}",
    b'{"a":' + b"9" * 5000 + b"}",
    b'{"a":-' + b"1" * 40 + b"}",
    b'{"a":1e999}',
    b'{"a":NaN}',
    b'{"a":-Infinity}',
    b"[]",
    b"null",
    b"\xff",
    b'{"a":1',
])
def test_malformed_or_absurd_bodies_are_invalid_requests(body: bytes) -> None:
    with pytest.raises(InvalidRequestError):
        protocol.parse_json(body)


def test_body_size_and_depth_limits() -> None:
    with pytest.raises(MessageSizeTooLargeError):
        protocol.parse_json(b"{}" + b" " * 100, max_bytes=50)
    depth = protocol.MAX_JSON_DEPTH - 1
    nested = b'{"a":' + b"[" * depth + b"]" * depth + b"}"
    assert protocol.parse_json(nested)["a"] == json.loads(nested)["a"]
    assert protocol.parse_json(b"") == {}
    assert protocol.parse_json(b'{"n":-9223372036854775808,"f":1.5e10}') == {"n": -2 ** 63, "f": 1.5e10}


@pytest.mark.parametrize("value", [None, 1, 1.5, "x", [1], True])
def test_require_wants_an_object(value: Any) -> None:
    with pytest.raises(InvalidRequestError):
        protocol.require(value, "partition", int)


@pytest.mark.parametrize("value", [1.5, True, "0", [0], {"p": 0}, 2 ** 63, -2 ** 63 - 1])
def test_require_int_refuses_other_types_and_out_of_range(value: Any) -> None:
    with pytest.raises(InvalidRequestError):
        protocol.require({"partition": value}, "partition", int)


def test_require_defaults_and_typed_lists() -> None:
    assert protocol.require({}, "a", int, 7) == 7
    assert protocol.require({"a": None}, "a", int, 7) == 7
    with pytest.raises(InvalidRequestError):
        protocol.require({}, "a", int)
    assert protocol.require_objects({"p": [{"x": 1}]}, "p") == [{"x": 1}]
    assert protocol.require_objects({}, "p", None) is None
    for bad in ([None], [1], ["x"], [[]], "x"):
        with pytest.raises(InvalidRequestError):
            protocol.require_objects({"p": bad}, "p")
    assert protocol.require_list_of({"p": [1, 2]}, "p", int) == [1, 2]
    for bad in ([1.0], [True], ["1"], [None]):
        with pytest.raises(InvalidRequestError):
            protocol.require_list_of({"p": bad}, "p", int)


@pytest.mark.parametrize("value", [1.0, True, None, [1], "2", "x" * 5000, "9" * 5000])
def test_acks_must_be_kafka_values(value: Any) -> None:
    with pytest.raises(InvalidRequiredAcksError):
        protocol.parse_acks(value)


@settings(max_examples=300, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
                    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=5), children,
                                                                                          max_size=4),
                    max_leaves=30))
def test_any_json_value_parses_or_is_an_invalid_request(value: Any) -> None:
    try:
        body = json.dumps({"v": value}).encode()
    except ValueError:
        return
    try:
        protocol.parse_json(body)
    except InvalidRequestError:
        pass


def test_fetch_frame_carries_the_replica_epoch() -> None:
    request = protocol.FetchRequest([protocol.FetchPartition("t", 0, 5)], replica_id=3, replica_epoch=4242)
    decoded = protocol.decode_fetch_request(protocol.encode_fetch_request(request))
    assert decoded.replica_id == 3 and decoded.replica_epoch == 4242 and decoded.is_from_follower
    consumer = protocol.decode_fetch_request(protocol.encode_fetch_request(
        protocol.FetchRequest([protocol.FetchPartition("t", 0, 5)])))
    assert consumer.replica_epoch == protocol.NO_BROKER_EPOCH and not consumer.is_from_follower
    debugging = protocol.FetchRequest([], replica_id=protocol.DEBUGGING_REPLICA_ID)
    assert not protocol.decode_fetch_request(protocol.encode_fetch_request(debugging)).is_from_follower
    with pytest.raises(InvalidRequestError):
        protocol.decode_fetch_request(protocol.encode_fetch_request(protocol.FetchRequest([], replica_id=-7)))
