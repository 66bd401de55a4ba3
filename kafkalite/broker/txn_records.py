"""Transactions as the coordinator keeps them: states, metadata, and the records of the internal
compacted ``__transaction_state`` topic in Kafka's ``TransactionLog`` schemas.

Key and value each start with an int16 version. Key v0: ``transactional_id string``. Value v0
(classic encoding: string = int16 length + UTF-8, array = int32 count)::

    producer_id int64, producer_epoch int16, transaction_timeout_ms int32, state int8,
    partitions nullable array of {topic string, partition_ids array of int32},
    last_update_timestamp_ms int64, start_timestamp_ms int64

Value v1 is the same fields in the flexible encoding (compact strings and arrays, tagged
fields); it is read, v0 is written. A null value is a tombstone (an expired transactional id).

:class:`TxnMetadata` is one transactional id's state in memory; :class:`TxnState` carries
Kafka's state bytes and names (the names DescribeTransactions and ListTransactions answer with).

Pure functions and plain values; malformed bytes raise CorruptRecordError.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass, field

from kafkalite.errors import CorruptRecordError

TRANSACTION_STATE_TOPIC = "__transaction_state"
KEY_VERSION = 0
VALUE_VERSION = 0
#: Kafka bumps to a new producer id instead of past this epoch.
MAX_PRODUCER_EPOCH = 32766

_INT8 = struct.Struct(">b")
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")


class TxnState(enum.Enum):
    """A transaction's state: (Kafka's state byte, Kafka's name)."""

    EMPTY = (0, "Empty")
    ONGOING = (1, "Ongoing")
    PREPARE_COMMIT = (2, "PrepareCommit")
    PREPARE_ABORT = (3, "PrepareAbort")
    COMPLETE_COMMIT = (4, "CompleteCommit")
    COMPLETE_ABORT = (5, "CompleteAbort")
    DEAD = (6, "Dead")
    PREPARE_EPOCH_FENCE = (7, "PrepareEpochFence")

    @property
    def byte(self) -> int:
        return self.value[0]

    @property
    def display(self) -> str:
        return self.value[1]

    @classmethod
    def from_byte(cls, value: int) -> TxnState:
        for state in cls:
            if state.byte == value:
                return state
        raise CorruptRecordError(f"unknown transaction state {value}")

    @classmethod
    def from_name(cls, name: str) -> TxnState | None:
        for state in cls:
            if state.display == name:
                return state
        return None

    @property
    def is_complete(self) -> bool:
        return self in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)

    @property
    def is_prepared(self) -> bool:
        return self in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)


#: The transitions Kafka's TransactionMetadata allows (target → allowed previous states).
VALID_PREVIOUS: dict[TxnState, frozenset[TxnState]] = {
    TxnState.EMPTY: frozenset({TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT}),
    TxnState.ONGOING: frozenset({TxnState.ONGOING, TxnState.EMPTY, TxnState.COMPLETE_COMMIT,
                                 TxnState.COMPLETE_ABORT}),
    TxnState.PREPARE_COMMIT: frozenset({TxnState.ONGOING}),
    TxnState.PREPARE_ABORT: frozenset({TxnState.ONGOING, TxnState.PREPARE_EPOCH_FENCE}),
    TxnState.COMPLETE_COMMIT: frozenset({TxnState.PREPARE_COMMIT}),
    TxnState.COMPLETE_ABORT: frozenset({TxnState.PREPARE_ABORT}),
    TxnState.DEAD: frozenset({TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT}),
    TxnState.PREPARE_EPOCH_FENCE: frozenset({TxnState.ONGOING}),
}


@dataclass
class TxnMetadata:
    """One transactional id's transaction as its coordinator holds it.

    ``pending`` is the state of a transition being written to the log (None: none in flight);
    while it is set, other requests for this id answer CONCURRENT_TRANSACTIONS.
    """

    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState = TxnState.EMPTY
    partitions: set[tuple[str, int]] = field(default_factory=set)
    start_ms: int = -1
    last_update_ms: int = -1
    #: The epoch before the last bump (-1: none), so a retried InitProducerId can be recognised.
    last_producer_epoch: int = -1
    pending: TxnState | None = None

    def to_value(self) -> TxnValue:
        return TxnValue(self.producer_id, self.producer_epoch, self.timeout_ms, self.state,
                        sorted(self.partitions), self.last_update_ms, self.start_ms)

    def copy_with(self, **changes: object) -> TxnMetadata:
        values = {name: getattr(self, name) for name in self.__dataclass_fields__}
        values["partitions"] = set(self.partitions)
        values.update(changes)
        return TxnMetadata(**values)


@dataclass(frozen=True)
class TxnValue:
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: list[tuple[str, int]]
    last_update_ms: int
    start_ms: int

    def encode(self) -> bytes:
        by_topic: dict[str, list[int]] = {}
        for topic, number in sorted(self.partitions):
            by_topic.setdefault(topic, []).append(number)
        parts = [_INT16.pack(VALUE_VERSION), _INT64.pack(self.producer_id), _INT16.pack(self.producer_epoch),
                 _INT32.pack(self.timeout_ms), _INT8.pack(self.state.byte), _INT32.pack(len(by_topic))]
        for topic, numbers in by_topic.items():
            parts.append(_string(topic))
            parts.append(_INT32.pack(len(numbers)))
            parts.extend(_INT32.pack(number) for number in numbers)
        parts += [_INT64.pack(self.last_update_ms), _INT64.pack(self.start_ms)]
        return b"".join(parts)

    def to_metadata(self, transactional_id: str) -> TxnMetadata:
        return TxnMetadata(transactional_id, self.producer_id, self.producer_epoch, self.timeout_ms, self.state,
                           set(self.partitions), self.start_ms, self.last_update_ms)


def _string(value: str) -> bytes:
    encoded = value.encode("utf-8")
    return _INT16.pack(len(encoded)) + encoded


def encode_key(transactional_id: str) -> bytes:
    return _INT16.pack(KEY_VERSION) + _string(transactional_id)


class _Reader:
    def __init__(self, data: bytes, flexible: bool = False) -> None:
        self.data = data
        self.position = 0
        self.flexible = flexible

    def _take(self, size: int) -> int:
        start = self.position
        if size < 0 or start + size > len(self.data):
            raise CorruptRecordError(f"{TRANSACTION_STATE_TOPIC} record ends early")
        self.position += size
        return start

    def fixed(self, shape: struct.Struct) -> int:
        return int(shape.unpack_from(self.data, self._take(shape.size))[0])

    def varint(self) -> int:
        value = shift = 0
        while True:
            byte = self.data[self._take(1)]
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7
            if shift > 35:
                raise CorruptRecordError("a varint is too long")

    def length(self) -> int:
        """An array or string length: int16/int32 in classic encoding, varint+1 in flexible."""
        return self.varint() - 1

    def string(self) -> str:
        size = self.length() if self.flexible else self.fixed(_INT16)
        if size < 0:
            raise CorruptRecordError(f"unexpected null string in a {TRANSACTION_STATE_TOPIC} record")
        start = self._take(size)
        try:
            return self.data[start:start + size].decode("utf-8")
        except UnicodeDecodeError:
            raise CorruptRecordError(f"{TRANSACTION_STATE_TOPIC} string is not UTF-8") from None

    def array_length(self) -> int:
        return self.length() if self.flexible else self.fixed(_INT32)

    def skip_tags(self) -> None:
        if self.flexible:
            for _ in range(self.varint()):
                self.varint()
                self._take(self.varint())


def decode_key(data: bytes) -> str:
    """The transactional id of a key (any key version reads the same way)."""
    reader = _Reader(data)
    version = reader.fixed(_INT16)
    if version < 0:
        raise CorruptRecordError(f"{TRANSACTION_STATE_TOPIC} key version {version} is invalid")
    return reader.string()


def decode_value(data: bytes) -> TxnValue:
    reader = _Reader(data)
    version = reader.fixed(_INT16)
    if version not in (0, 1):
        raise CorruptRecordError(f"unknown {TRANSACTION_STATE_TOPIC} value version {version}")
    reader.flexible = version == 1
    producer_id = reader.fixed(_INT64)
    producer_epoch = reader.fixed(_INT16)
    timeout_ms = reader.fixed(_INT32)
    state = TxnState.from_byte(reader.fixed(_INT8))
    partitions: list[tuple[str, int]] = []
    for _ in range(max(0, reader.array_length())):  # a null array (-1) holds nothing
        topic = reader.string()
        for _ in range(max(0, reader.array_length())):
            partitions.append((topic, reader.fixed(_INT32)))
        reader.skip_tags()
    last_update_ms = reader.fixed(_INT64)
    start_ms = reader.fixed(_INT64)
    reader.skip_tags()
    return TxnValue(producer_id, producer_epoch, timeout_ms, state, partitions, last_update_ms, start_ms)


def replay(records: list[tuple[bytes, bytes | None]]) -> dict[str, TxnMetadata]:
    """The transactions of one ``__transaction_state`` partition as its records leave them
    (latest value per key; a tombstone removes). Unreadable records raise CorruptRecordError."""
    latest: dict[str, TxnValue | None] = {}
    for key, value in records:
        latest[decode_key(key)] = None if value is None else decode_value(value)
    return {txn_id: value.to_metadata(txn_id) for txn_id, value in latest.items() if value is not None}
