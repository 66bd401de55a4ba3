"""Control batches: the transaction markers (commit / abort) a coordinator writes into a partition.

A control batch is a v2 batch with the *transactional* (bit 4) and *control* (bit 5)
attributes, the producer id and epoch of the transaction it ends, no sequence, and exactly one
record, Kafka's ``EndTransactionMarker``::

    key   = int16 version (0) | int16 type (0 = ABORT, 1 = COMMIT)
    value = int16 version (0) | int32 coordinator_epoch

Control records never reach applications: consumers skip control batches (and, under
``read_committed``, use them to drop aborted records). Kafka writes the value's version 0 and
reads any later version by its prefix, so :func:`read_marker` accepts longer values.

Thread-safety: pure functions and immutable values.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from kafkalite.errors import CorruptRecordError
from kafkalite.record.batch import ATTR_CONTROL, NO_SEQUENCE, RecordBatch, _assemble, encode_record
from kafkalite.record.codec import Compression

CONTROL_TYPE_ABORT = 0
CONTROL_TYPE_COMMIT = 1
CONTROL_KEY_VERSION = 0
MARKER_VALUE_VERSION = 0

_KEY = struct.Struct(">hh")
_VALUE = struct.Struct(">hi")


@dataclass(frozen=True)
class ControlMarker:
    """A transaction's end: ``committed`` (else aborted), written by coordinator ``coordinator_epoch``."""

    committed: bool
    coordinator_epoch: int

    @property
    def name(self) -> str:
        return "COMMIT" if self.committed else "ABORT"


def marker_key(committed: bool) -> bytes:
    return _KEY.pack(CONTROL_KEY_VERSION, CONTROL_TYPE_COMMIT if committed else CONTROL_TYPE_ABORT)


def marker_value(coordinator_epoch: int) -> bytes:
    return _VALUE.pack(MARKER_VALUE_VERSION, coordinator_epoch)


def build_marker_batch(producer_id: int, producer_epoch: int, marker: ControlMarker, timestamp_ms: int,
                       partition_leader_epoch: int = -1) -> bytes:
    """One control batch holding ``marker`` for producer ``producer_id`` at ``producer_epoch``
    (base offset 0: the leader assigns it)."""
    record = encode_record(0, 0, marker_key(marker.committed), marker_value(marker.coordinator_epoch))
    return _assemble(record, 1, 0, timestamp_ms, timestamp_ms, Compression.NONE, 0, partition_leader_epoch,
                     producer_id, producer_epoch, NO_SEQUENCE, 0, True, extra_attributes=ATTR_CONTROL)


def control_type(record_key: bytes | None) -> int:
    """The control record type of ``record_key`` (0 abort, 1 commit; others are reserved)."""
    if record_key is None or len(record_key) < _KEY.size:
        raise CorruptRecordError(f"a control record key needs {_KEY.size} bytes, got "
                                 f"{'null' if record_key is None else len(record_key)}")
    version, kind = _KEY.unpack_from(record_key)
    if version < 0:
        raise CorruptRecordError(f"control record key version {version} is invalid")
    return int(kind)


def read_marker(record_key: bytes, record_value: bytes | None) -> ControlMarker:
    """The transaction marker of one control record; anything else raises CorruptRecordError."""
    kind = control_type(record_key)
    if kind not in (CONTROL_TYPE_ABORT, CONTROL_TYPE_COMMIT):
        raise CorruptRecordError(f"control record type {kind} is not a transaction marker")
    if record_value is None or len(record_value) < _VALUE.size:
        raise CorruptRecordError(f"a transaction marker value needs {_VALUE.size} bytes, got "
                                 f"{'null' if record_value is None else len(record_value)}")
    version, coordinator_epoch = _VALUE.unpack_from(record_value)
    if version < 0:
        raise CorruptRecordError(f"transaction marker version {version} is invalid")
    return ControlMarker(kind == CONTROL_TYPE_COMMIT, coordinator_epoch)


def batch_marker(batch: RecordBatch) -> ControlMarker | None:
    """The marker a control batch holds (None for an empty control batch, which compaction
    may leave); CorruptRecordError when ``batch`` is not a control batch of a marker."""
    if not batch.is_control:
        raise CorruptRecordError(f"batch at offset {batch.base_offset} is not a control batch", batch.position)
    records = batch.records()
    if not records:
        return None
    first = records[0]
    if first.key is None:
        raise CorruptRecordError(f"control batch at offset {batch.base_offset} has a record without key",
                                 batch.position)
    return read_marker(first.key, first.value)
