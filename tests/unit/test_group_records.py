"""__consumer_offsets record schemas and the group state machine's allowed moves."""

from __future__ import annotations

import pytest

from kafkalite.broker.group import TRANSITIONS, Group, GroupState
from kafkalite.broker.group_records import (
    GroupKey,
    GroupValue,
    MemberRecord,
    OffsetKey,
    OffsetValue,
    decode_group_value,
    decode_key,
    decode_offset_value,
)
from kafkalite.errors import CorruptRecordError, IllegalStateError


def test_offset_key_layout_matches_kafka() -> None:
    encoded = OffsetKey("g", "t", 3).encode()
    assert encoded == bytes.fromhex("0001" "0001") + b"g" + bytes.fromhex("0001") + b"t" + bytes.fromhex("00000003")
    assert decode_key(encoded) == OffsetKey("g", "t", 3)
    assert decode_key(GroupKey("my-group").encode()) == GroupKey("my-group")


def test_offset_value_v3_round_trip_and_layout() -> None:
    value = OffsetValue(42, 5, "meta", 1700000000000)
    encoded = value.encode()
    assert encoded[:2] == b"\x00\x03" and encoded[2:10] == (42).to_bytes(8, "big")
    assert decode_offset_value(encoded) == value


def test_group_value_round_trip() -> None:
    value = GroupValue("consumer", 7, "range", "m-1", 123, [
        MemberRecord("m-1", None, "client", "/127.0.0.1", 30000, 10000, b"sub", b"assign"),
        MemberRecord("m-2", "static-2", "client", "/127.0.0.1", 30000, 10000, b"", b"")])
    assert decode_group_value(value.encode()) == value


@pytest.mark.parametrize("data", [b"", b"\x00", b"\x00\x09abc", b"\x00\x01\x00\x05ab"])
def test_malformed_records_are_corrupt(data: bytes) -> None:
    with pytest.raises(CorruptRecordError):
        decode_key(data)


def test_group_state_machine_refuses_illegal_moves() -> None:
    group = Group("g", 0)
    group.transition_to(GroupState.PREPARING_REBALANCE, 1)
    group.transition_to(GroupState.COMPLETING_REBALANCE, 2)
    with pytest.raises(IllegalStateError):
        group.transition_to(GroupState.EMPTY, 3)
    group.transition_to(GroupState.STABLE, 3)
    with pytest.raises(IllegalStateError):
        group.transition_to(GroupState.COMPLETING_REBALANCE, 4)
    group.transition_to(GroupState.DEAD, 5)
    assert TRANSITIONS[GroupState.DEAD] == set()
    with pytest.raises(IllegalStateError):
        group.transition_to(GroupState.EMPTY, 6)
