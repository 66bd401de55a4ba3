"""Kafka v2 record batches and their compression codecs: bytes in, objects out, no I/O."""

from kafkalite.record.batch import (
    HEADER_SIZE,
    BatchBuilder,
    Record,
    RecordBatch,
    build_batch,
    crc32c,
    decode_all,
    iter_batches,
    stamp_batch,
)
from kafkalite.record.codec import Compression

__all__ = [
    "HEADER_SIZE",
    "BatchBuilder",
    "Compression",
    "Record",
    "RecordBatch",
    "build_batch",
    "crc32c",
    "decode_all",
    "iter_batches",
    "stamp_batch",
]
