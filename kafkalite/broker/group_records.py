"""Record schemas of the internal ``__consumer_offsets`` topic, as Kafka writes them.

Key and value each start with an int16 version; classic (non-flexible) encoding: string =
int16 length + UTF-8, nullable string length -1 = null, bytes = int32 length, array = int32
count. Key version 0/1 is an offset commit keyed (group, topic, partition); key version 2 is a
group's metadata keyed (group). A null value is a tombstone; compaction keeps the latest
record per key.

=====================  =====================================================================
offset key v1          group string, topic string, partition int32
group key v2           group string
offset value v3        offset int64, leader_epoch int32, metadata string, commit_timestamp int64
offset value v1        offset int64, metadata string, commit_timestamp int64, expire_timestamp int64
group value v3         protocol_type string, generation int32, protocol nullable string,
                       leader nullable string, current_state_timestamp int64, members array of
                       {member_id string, group_instance_id nullable string, client_id string,
                       client_host string, rebalance_timeout int32, session_timeout int32,
                       subscription bytes, assignment bytes}
=====================  =====================================================================

Pure functions; malformed bytes raise CorruptRecordError.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from kafkalite.errors import CorruptRecordError

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")

OFFSET_KEY_VERSION = 1
GROUP_KEY_VERSION = 2
OFFSET_VALUE_VERSION = 3
GROUP_VALUE_VERSION = 3


class _Writer:
    def __init__(self) -> None:
        self.parts: list[bytes] = []

    def int16(self, value: int) -> _Writer:
        self.parts.append(_INT16.pack(value))
        return self

    def int32(self, value: int) -> _Writer:
        self.parts.append(_INT32.pack(value))
        return self

    def int64(self, value: int) -> _Writer:
        self.parts.append(_INT64.pack(value))
        return self

    def string(self, value: str | None) -> _Writer:
        if value is None:
            self.parts.append(_INT16.pack(-1))
        else:
            encoded = value.encode("utf-8")
            self.parts.append(_INT16.pack(len(encoded)) + encoded)
        return self

    def blob(self, value: bytes) -> _Writer:
        self.parts.append(_INT32.pack(len(value)) + value)
        return self

    def done(self) -> bytes:
        return b"".join(self.parts)


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.position = 0

    def _take(self, size: int) -> int:
        start = self.position
        if size < 0 or start + size > len(self.data):
            raise CorruptRecordError("__consumer_offsets record ends early")
        self.position += size
        return start

    def int16(self) -> int:
        return int(_INT16.unpack_from(self.data, self._take(2))[0])

    def int32(self) -> int:
        return int(_INT32.unpack_from(self.data, self._take(4))[0])

    def int64(self) -> int:
        return int(_INT64.unpack_from(self.data, self._take(8))[0])

    def string(self) -> str | None:
        length = self.int16()
        if length == -1:
            return None
        start = self._take(length)
        try:
            return self.data[start:start + length].decode("utf-8")
        except UnicodeDecodeError:
            raise CorruptRecordError("__consumer_offsets string is not UTF-8") from None

    def required_string(self) -> str:
        value = self.string()
        if value is None:
            raise CorruptRecordError("unexpected null string in a __consumer_offsets record")
        return value

    def blob(self) -> bytes:
        length = self.int32()
        start = self._take(length)
        return self.data[start:start + length]


@dataclass(frozen=True)
class OffsetKey:
    group: str
    topic: str
    partition: int

    def encode(self) -> bytes:
        return _Writer().int16(OFFSET_KEY_VERSION).string(self.group).string(self.topic).int32(self.partition).done()


@dataclass(frozen=True)
class GroupKey:
    group: str

    def encode(self) -> bytes:
        return _Writer().int16(GROUP_KEY_VERSION).string(self.group).done()


@dataclass(frozen=True)
class OffsetValue:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp: int
    expire_timestamp: int = -1

    def encode(self) -> bytes:
        return (_Writer().int16(OFFSET_VALUE_VERSION).int64(self.offset).int32(self.leader_epoch)
                .string(self.metadata).int64(self.commit_timestamp).done())


@dataclass(frozen=True)
class MemberRecord:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout: int
    session_timeout: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True)
class GroupValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int
    members: list[MemberRecord] = field(default_factory=list)

    def encode(self) -> bytes:
        writer = (_Writer().int16(GROUP_VALUE_VERSION).string(self.protocol_type).int32(self.generation)
                  .string(self.protocol).string(self.leader).int64(self.current_state_timestamp)
                  .int32(len(self.members)))
        for member in self.members:
            (writer.string(member.member_id).string(member.group_instance_id).string(member.client_id)
             .string(member.client_host).int32(member.rebalance_timeout).int32(member.session_timeout)
             .blob(member.subscription).blob(member.assignment))
        return writer.done()


def decode_key(data: bytes) -> OffsetKey | GroupKey:
    reader = _Reader(data)
    version = reader.int16()
    if version in (0, 1):
        return OffsetKey(reader.required_string(), reader.required_string(), reader.int32())
    if version == 2:
        return GroupKey(reader.required_string())
    raise CorruptRecordError(f"unknown __consumer_offsets key version {version}")


def decode_offset_value(data: bytes) -> OffsetValue:
    reader = _Reader(data)
    version = reader.int16()
    if version == 0:
        return OffsetValue(reader.int64(), -1, reader.string() or "", reader.int64())
    if version in (1,):
        offset = reader.int64()
        metadata = reader.string() or ""
        commit = reader.int64()
        return OffsetValue(offset, -1, metadata, commit, reader.int64())
    if version in (2, 3):
        offset = reader.int64()
        epoch = reader.int32() if version == 3 else -1
        return OffsetValue(offset, epoch, reader.string() or "", reader.int64())
    raise CorruptRecordError(f"unknown offset value version {version}")


def decode_group_value(data: bytes) -> GroupValue:
    reader = _Reader(data)
    version = reader.int16()
    if version not in (0, 1, 2, 3):
        raise CorruptRecordError(f"unknown group value version {version}")
    protocol_type = reader.required_string()
    generation = reader.int32()
    protocol = reader.string()
    leader = reader.string()
    timestamp = reader.int64() if version >= 2 else -1
    members = []
    for _ in range(reader.int32()):
        member_id = reader.required_string()
        instance = reader.string() if version >= 3 else None
        client_id = reader.required_string()
        client_host = reader.required_string()
        rebalance_timeout = reader.int32() if version >= 1 else 0
        session_timeout = reader.int32()
        members.append(MemberRecord(member_id, instance, client_id, client_host, rebalance_timeout, session_timeout,
                                    reader.blob(), reader.blob()))
    return GroupValue(protocol_type, generation, protocol, leader, timestamp, members)
