"""Validation of batches before they are appended to a partition's log.

A produce request's batches are checked completely before a single byte is written (structure,
CRC, sizes against ``max.message.bytes`` and ``segment.bytes``, no control batches, offset
deltas, keys on compacted topics, every record decoded from its possibly compressed payload);
replicated batches get the structural and CRC checks only (the leader validated their
records). :func:`stamp_log_append_time` rewrites a copy of one batch for ``LogAppendTime``
topics.

Concurrency: pure functions of their arguments (the bytes and a :class:`LogConfig`); they touch
no log state, so the broker may run them on a worker thread while the log keeps serving, and
hand the :class:`CheckedBatches` to the log's ``append_checked_*`` methods on its event loop.
Checking a compressed batch decompresses it (bounded by the codec's limit); checking an
uncompressed one costs a CRC pass and :func:`~kafkalite.record.batch.uniform_runs`, both at C
speed.
"""

from __future__ import annotations

from dataclasses import dataclass

from kafkalite.config import LogConfig
from kafkalite.errors import (
    CorruptRecordError,
    InvalidRecordError,
    MessageSizeTooLargeError,
    RecordListTooLargeError,
)
from kafkalite.record.batch import ATTR_TIMESTAMP_TYPE, CRC_START, RecordBatch, crc32c, iter_batches


@dataclass(frozen=True)
class CheckedBatches:
    """Batches that passed validation, and the buffer they lie in."""

    buffer: memoryview
    batches: list[RecordBatch]

    @property
    def size(self) -> int:
        return len(self.buffer)


def check_batches(data: bytes | bytearray | memoryview, config: LogConfig, *, from_client: bool) -> CheckedBatches:
    """Validate every batch of ``data``; a bad one raises a named error (CorruptRecordError,
    InvalidRecordError, MessageSizeTooLargeError, RecordListTooLargeError). ``from_client``
    adds the producer rules and decodes every record."""
    buffer = memoryview(data).cast("B")
    if not buffer:
        raise CorruptRecordError("the request carries no record batch")
    batches: list[RecordBatch] = []
    for batch in iter_batches(buffer):
        batch.validate()
        if batch.size > config.max_message_bytes:
            raise MessageSizeTooLargeError(
                f"batch of {batch.size} bytes exceeds max.message.bytes={config.max_message_bytes}")
        if batch.size > config.segment_bytes:
            raise RecordListTooLargeError(
                f"batch of {batch.size} bytes exceeds segment.bytes={config.segment_bytes}")
        if from_client:
            if batch.is_control:
                raise InvalidRecordError("clients may not write control batches")
            if batch.record_count != batch.last_offset_delta + 1 or batch.record_count == 0:
                raise InvalidRecordError(
                    f"batch has {batch.record_count} records but lastOffsetDelta {batch.last_offset_delta}")
            # every record is checked, compressed payloads decompressed (record/ owns the rules)
            batch.check_records(require_keys=config.compact, contiguous=True)
        batches.append(batch)
    return CheckedBatches(buffer, batches)


def stamp_log_append_time(buffer: bytearray, batch: RecordBatch, timestamp: int) -> None:
    """Rewrite a copy of one batch (``buffer`` starts at the batch) for LogAppendTime."""
    end_position = batch.size
    attributes = int.from_bytes(buffer[21:23], "big", signed=True) | ATTR_TIMESTAMP_TYPE
    buffer[21:23] = attributes.to_bytes(2, "big", signed=True)
    buffer[35:43] = timestamp.to_bytes(8, "big", signed=True)
    crc = crc32c(memoryview(buffer)[CRC_START:end_position])
    buffer[17:21] = crc.to_bytes(4, "big")
