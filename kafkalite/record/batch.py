"""Kafka v2 record batches (magic 2): layout, builder, reader, validation. Pure: no I/O.

Batch header, 61 bytes, all integers big-endian::

    offset size field
         0    8 baseOffset            producer writes 0; the leader overwrites it in place
         8    4 batchLength           bytes after this field (= total size - 12)
        12    4 partitionLeaderEpoch  producer writes -1; the leader stamps its epoch in place
        16    1 magic                 2
        17    4 crc                   CRC-32C (Castagnoli) of bytes [21, end of batch)
        21    2 attributes            bits 0-2 codec, 3 timestamp type, 4 transactional,
                                      5 control, 6 delete horizon
        23    4 lastOffsetDelta       recordCount - 1 (may be larger after compaction)
        27    8 baseTimestamp         first record's timestamp
        35    8 maxTimestamp          largest record timestamp (or broker time: LogAppendTime)
        43    8 producerId            -1 when not idempotent
        51    2 producerEpoch         -1 when none
        53    4 baseSequence          -1 when none
        57    4 recordCount           never compressed
        61    - records               back to back, or one compressed blob of them

Record, inside ``records`` (varint = zigzag LEB128, 5 bytes max; varlong 10 bytes max)::

    length varint | attributes int8 | timestampDelta varlong | offsetDelta varint |
    keyLength varint (-1 = null) | key | valueLength varint (-1 = null: tombstone) | value |
    headerCount varint | (headerKeyLength varint | headerKey | headerValueLength varint | value)*

The CRC does not cover baseOffset, batchLength, partitionLeaderEpoch or magic, so a broker
assigns offsets and stamps its leader epoch by overwriting bytes 0-7 and 12-15 without
recomputing the CRC and without decompressing (:func:`stamp_batch`).

The one record decoder and validator lives in :mod:`kafkalite.record.decoder` (re-exported
here): :func:`decode_records` (strict: see its docstring for the rules) and its fast half
:func:`uniform_runs`, which recognises the record layouts producers write with C-level strided
compares and accepts exactly what :func:`decode_records` accepts; varints are in
:mod:`kafkalite.record.varint`. The broker validates every produced batch with
:meth:`RecordBatch.check_records`; the consumer, the Spark reader and the dump tool decode with
:meth:`RecordBatch.records` or cut fields at the positions :func:`uniform_runs` checked.

Every decoding path raises :class:`~kafkalite.errors.CorruptRecordError` (or its subclass
:class:`~kafkalite.errors.TruncatedBatchError` for a batch cut short) with the byte position of
the damaged batch; lengths are checked against the bytes actually present before anything is
allocated, and decompression is bounded. Producer-only rules (keys on compacted topics, offset
deltas 0..n-1) raise :class:`~kafkalite.errors.InvalidRecordError` (INVALID_RECORD).

Thread-safety: functions are pure (the decoder's lookup tables are replaced whole when they
grow, never edited in place); :class:`BatchBuilder` is a single-owner object.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Iterable, Iterator, Sequence
from typing import TypeGuard

import crc32c as _crc32c

from kafkalite.errors import CorruptRecordError, TruncatedBatchError
from kafkalite.record.codec import (
    COMPRESSION_MASK,
    DEFAULT_MAX_DECOMPRESSED_BYTES,
    Compression,
    compress,
    decompress,
)

# The decoder's names are re-exported: this module stays the one place to import the format from.
from kafkalite.record.decoder import (
    Header as Header,
    Record as Record,
    UniformRun as UniformRun,
    decode_records as decode_records,
    decode_uniform_values as decode_uniform_values,
    run_slices as run_slices,
    run_timestamp_deltas as run_timestamp_deltas,
    uniform_runs as uniform_runs,
    validate_records as validate_records,
)
from kafkalite.record.speedups import EXTENSION as _EXTENSION
from kafkalite.record.varint import (
    SMALL_VARINT_LIMIT,
    VARINTS,
    decode_varint as decode_varint,
    encode_varint as encode_varint,
    varint as _varint,
)

MAGIC = 2
HEADER_SIZE = 61
LOG_OVERHEAD = 12  # baseOffset + batchLength
MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD  # 49: a batch with no records
CRC_START = 21
MAX_BATCH_SIZE = 1 << 30  # no single batch may claim more than a segment's largest size

ATTR_TIMESTAMP_TYPE = 0x08
ATTR_TRANSACTIONAL = 0x10
ATTR_CONTROL = 0x20
ATTR_DELETE_HORIZON = 0x40

TIMESTAMP_CREATE_TIME = 0
TIMESTAMP_LOG_APPEND_TIME = 1

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1

_HEADER = struct.Struct(">qiibIhiqqqhii")
_OFFSET_AND_LENGTH = struct.Struct(">qi")
_INT64 = struct.Struct(">q")
_INT32 = struct.Struct(">i")
_UINT32 = struct.Struct(">I")
_INT16 = struct.Struct(">h")



def crc32c(data: bytes | bytearray | memoryview) -> int:
    """CRC-32C (Castagnoli) of ``data``; CRC-32C(b"123456789") == 0xE3069283."""
    return _crc32c.crc32c(data)


# --- records ------------------------------------------------------------------------------------


def _encode_headers(headers: Sequence[Header]) -> bytes:
    parts = [_varint(len(headers))]
    for name, value in headers:
        name_bytes = name.encode("utf-8")
        parts.append(_varint(len(name_bytes)))
        parts.append(name_bytes)
        if value is None:
            parts.append(b"\x01")
        else:
            parts.append(_varint(len(value)))
            parts.append(value)
    return b"".join(parts)


def encode_record(offset_delta: int, timestamp_delta: int, key: bytes | None, value: bytes | None,
                  headers: Sequence[Header] = ()) -> bytes:
    """Encode one record (with its length prefix)."""
    body = b"".join((
        b"\x00",
        _varint(timestamp_delta),
        _varint(offset_delta),
        b"\x01" if key is None else _varint(len(key)) + key,
        b"\x01" if value is None else _varint(len(value)) + value,
        _encode_headers(headers) if headers else b"\x00",
    ))
    return _varint(len(body)) + body


# Record prefixes for keyless, header-less records of one value length with timestampDelta 0:
# prefix i = length | attributes | timestampDelta | offsetDelta i | keyLength -1 | valueLength.
# Record i is prefix i + value + b"\x00" (no headers). The cache stores, for i >= 1, the
# previous record's header-count byte in front of prefix i, so that a batch is one C-level
# join of [prefix 0, value 0, prefix 1, value 1, ..., b"\x00"]. Cached per value length.
_UNIFORM_PREFIXES: dict[int, list[bytes]] = {}
_UNIFORM_CACHE_LIMIT = 64


def _uniform_prefixes(value_length: int, count: int) -> list[bytes]:
    prefixes = _UNIFORM_PREFIXES.get(value_length)
    if prefixes is None:
        if len(_UNIFORM_PREFIXES) >= _UNIFORM_CACHE_LIMIT:
            _UNIFORM_PREFIXES.clear()
        prefixes = _UNIFORM_PREFIXES[value_length] = []
    length_varint = _varint(value_length)
    for offset_delta in range(len(prefixes), count):
        delta = _varint(offset_delta)
        body_length = 4 + len(delta) + len(length_varint) + value_length
        prefix = _varint(body_length) + b"\x00\x00" + delta + b"\x01" + length_varint
        prefixes.append(prefix if offset_delta == 0 else b"\x00" + prefix)
    return prefixes


def _join_uniform(prefixes: list[bytes], values: Sequence[bytes], count: int) -> bytes:
    parts: list[bytes] = [b""] * (2 * count + 1)
    parts[0:2 * count:2] = prefixes[:count]
    parts[1:2 * count:2] = values
    parts[2 * count] = b"\x00"
    return b"".join(parts)


def _no_nulls(values: Sequence[bytes | None]) -> TypeGuard[Sequence[bytes]]:
    return None not in values


def _encode_plain_values(values: Sequence[bytes | None], keys: Sequence[bytes | None] | None) -> bytes:
    """Fast path: records with timestampDelta 0 and no headers, offsets 0..n-1."""
    if keys is None and values and _no_nulls(values):
        lengths = set(map(len, values))
        if len(lengths) == 1:
            return _join_uniform(_uniform_prefixes(lengths.pop(), len(values)), values, len(values))
    varints = VARINTS
    parts: list[bytes] = []
    append = parts.append
    if keys is None:
        for offset_delta, value in enumerate(values):
            if value is None:
                delta = varints[offset_delta] if offset_delta < SMALL_VARINT_LIMIT else encode_varint(offset_delta)
                body = b"\x00\x00" + delta + b"\x01\x01\x00"
                append(_varint(len(body)) + body)
                continue
            value_length = len(value)
            delta = varints[offset_delta] if offset_delta < SMALL_VARINT_LIMIT else encode_varint(offset_delta)
            length_prefix = varints[value_length] if value_length < SMALL_VARINT_LIMIT else encode_varint(value_length)
            body_length = 4 + len(delta) + len(length_prefix) + value_length
            head = varints[body_length] if body_length < SMALL_VARINT_LIMIT else encode_varint(body_length)
            append(head + b"\x00\x00" + delta + b"\x01" + length_prefix)
            append(value)
            append(b"\x00")
        return b"".join(parts)
    for offset_delta, (key, value) in enumerate(zip(keys, values)):
        append(encode_record(offset_delta, 0, key, value))
    return b"".join(parts)


def _encode_timestamped(values: Sequence[bytes | None], keys: Sequence[bytes | None] | None,
                        deltas: Sequence[int]) -> bytes:
    """Header-less records with their own timestamp deltas (the per-record ``send()`` shape),
    offsets 0..n-1: each record's head built from cached varints, values joined uncopied."""
    varints = VARINTS
    limit = SMALL_VARINT_LIMIT
    parts: list[bytes] = []
    append = parts.append
    for offset_delta, value in enumerate(values):
        delta = deltas[offset_delta]
        head = b"\x00" + (varints[delta] if 0 <= delta < limit else encode_varint(delta)) \
            + (varints[offset_delta] if offset_delta < limit else encode_varint(offset_delta))
        key = keys[offset_delta] if keys is not None else None
        if key is not None:
            key_length = len(key)
            head += (varints[key_length] if key_length < limit else encode_varint(key_length)) + key
        else:
            head += b"\x01"
        if value is None:
            body = head + b"\x01\x00"
            append(_varint(len(body)) + body)
            continue
        value_length = len(value)
        length_prefix = varints[value_length] if value_length < limit else encode_varint(value_length)
        body_length = len(head) + len(length_prefix) + value_length + 1
        append((varints[body_length] if body_length < limit else encode_varint(body_length)) + head + length_prefix)
        append(value)
        append(b"\x00")
    return b"".join(parts)


# --- batches ------------------------------------------------------------------------------------


def build_batch(
    values: Sequence[bytes | None],
    keys: Sequence[bytes | None] | None = None,
    timestamps: Sequence[int] | int | None = None,
    headers: Sequence[Sequence[Header]] | None = None,
    *,
    compression: int = Compression.NONE,
    base_offset: int = 0,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    timestamp_type: int = TIMESTAMP_CREATE_TIME,
    transactional: bool = False,
) -> bytes:
    """Encode a whole v2 batch of ``len(values)`` records in one go.

    ``timestamps`` is one int for every record (the fast path), a sequence, or None (now).
    This is the bulk encoding path used by producers; it precomputes varints and joins once.
    """
    count = len(values)
    if count == 0:
        raise ValueError("a record batch needs at least one record")
    if keys is not None and len(keys) != count:
        raise ValueError("keys and values differ in length")
    if headers is not None and len(headers) != count:
        raise ValueError("headers and values differ in length")
    if timestamps is None:
        timestamps = int(time.time() * 1000)
    timestamp_list: Sequence[int] | None = None
    if isinstance(timestamps, int):
        base_timestamp = max_timestamp = timestamps
    else:
        if len(timestamps) != count:
            raise ValueError("timestamps and values differ in length")
        timestamp_list = timestamps
        base_timestamp = timestamps[0]
        max_timestamp = max(timestamps)
    records = encode_records(values, keys, timestamp_list, headers, base_timestamp)
    return _assemble(records, count, count - 1, base_timestamp, max_timestamp, compression, base_offset,
                     partition_leader_epoch, producer_id, producer_epoch, base_sequence, timestamp_type,
                     transactional)


def encode_records(values: Sequence[bytes | None], keys: Sequence[bytes | None] | None,
                   timestamps: Sequence[int] | None, headers: Sequence[Sequence[Header]] | None,
                   base_timestamp: int = 0) -> bytes:
    """The records section of ``values[i]`` with offset delta ``i`` and timestamp delta
    ``timestamps[i] - base_timestamp`` (keys, timestamps and headers: one per value, or None for
    null keys, delta 0 and no headers), with the compiled extension when it is loaded
    (:func:`py_encode_records` otherwise; both give equal bytes)."""
    if _EXTENSION is not None:
        section: bytes = _EXTENSION.encode_records(values, keys, timestamps, headers, base_timestamp)
        return section
    return py_encode_records(values, keys, timestamps, headers, base_timestamp)


def py_encode_records(values: Sequence[bytes | None], keys: Sequence[bytes | None] | None,
                      timestamps: Sequence[int] | None, headers: Sequence[Sequence[Header]] | None,
                      base_timestamp: int = 0) -> bytes:
    """:func:`encode_records` in Python: cached varints and one join per section."""
    timestamp_deltas = timestamps
    if timestamps is not None and base_timestamp:
        timestamp_deltas = [timestamp - base_timestamp for timestamp in timestamps]
    count = len(values)
    if (keys is not None and len(keys) != count) or (timestamp_deltas is not None and len(timestamp_deltas) != count) \
            or (headers is not None and len(headers) != count):
        raise ValueError("keys, timestamp deltas, headers and values differ in length")
    if headers is None:
        if timestamp_deltas is None:
            return _encode_plain_values(values, keys)
        return _encode_timestamped(values, keys, timestamp_deltas)
    key_list = keys if keys is not None else [None] * count
    delta_list = timestamp_deltas if timestamp_deltas is not None else [0] * count
    return b"".join(encode_record(index, delta_list[index], key_list[index], values[index], headers[index])
                    for index in range(count))


def _assemble(records: bytes, count: int, last_offset_delta: int, base_timestamp: int, max_timestamp: int,
              compression: int, base_offset: int, partition_leader_epoch: int, producer_id: int,
              producer_epoch: int, base_sequence: int, timestamp_type: int, transactional: bool,
              extra_attributes: int = 0) -> bytes:
    payload = compress(compression, records) if compression else records
    attributes = (compression & COMPRESSION_MASK) | extra_attributes
    if timestamp_type == TIMESTAMP_LOG_APPEND_TIME:
        attributes |= ATTR_TIMESTAMP_TYPE
    if transactional:
        attributes |= ATTR_TRANSACTIONAL
    header = bytearray(_HEADER.pack(
        base_offset, MIN_BATCH_LENGTH + len(payload), partition_leader_epoch, MAGIC, 0, attributes,
        last_offset_delta, base_timestamp, max_timestamp, producer_id, producer_epoch, base_sequence, count,
    ))
    crc = _crc32c.crc32c(payload, _crc32c.crc32c(memoryview(header)[CRC_START:]))
    _UINT32.pack_into(header, 17, crc)
    return bytes(header) + payload


class BatchBuilder:
    """Accumulates records one by one and encodes them into a single v2 batch.

    Single owner; not thread-safe. ``estimated_size`` is exact for uncompressed batches.
    """

    def __init__(
        self,
        *,
        compression: int = Compression.NONE,
        base_offset: int = 0,
        partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
        producer_id: int = NO_PRODUCER_ID,
        producer_epoch: int = NO_PRODUCER_EPOCH,
        base_sequence: int = NO_SEQUENCE,
        timestamp_type: int = TIMESTAMP_CREATE_TIME,
        transactional: bool = False,
    ) -> None:
        self.compression = compression
        self.base_offset = base_offset
        self.partition_leader_epoch = partition_leader_epoch
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.base_sequence = base_sequence
        self.timestamp_type = timestamp_type
        self.transactional = transactional
        self._parts: list[bytes] = []
        self._base_timestamp: int | None = None
        self._max_timestamp = -1
        self._last_offset_delta = -1
        self._size = HEADER_SIZE

    def __len__(self) -> int:
        return len(self._parts)

    @property
    def estimated_size(self) -> int:
        """Bytes the batch takes so far (before compression)."""
        return self._size

    def append(self, timestamp: int | None, key: bytes | None, value: bytes | None,
               headers: Sequence[Header] = (), offset_delta: int | None = None) -> int:
        """Add a record; returns its offset delta. ``timestamp`` None means now."""
        if timestamp is None:
            timestamp = int(time.time() * 1000)
        if self._base_timestamp is None:
            self._base_timestamp = timestamp
        if offset_delta is None:
            offset_delta = self._last_offset_delta + 1
        elif offset_delta <= self._last_offset_delta:
            raise ValueError("offset deltas must increase")
        encoded = encode_record(offset_delta, timestamp - self._base_timestamp, key, value, headers)
        self._parts.append(encoded)
        self._size += len(encoded)
        self._last_offset_delta = offset_delta
        if timestamp > self._max_timestamp:
            self._max_timestamp = timestamp
        return offset_delta

    def build(self, last_offset_delta: int | None = None) -> bytes:
        """Encode the batch. ``last_offset_delta`` may be raised (compaction keeps a batch's span)."""
        if not self._parts:
            raise ValueError("a record batch needs at least one record")
        span = self._last_offset_delta if last_offset_delta is None else max(last_offset_delta, self._last_offset_delta)
        assert self._base_timestamp is not None
        return _assemble(b"".join(self._parts), len(self._parts), span, self._base_timestamp,
                         self._max_timestamp, self.compression, self.base_offset, self.partition_leader_epoch,
                         self.producer_id, self.producer_epoch, self.base_sequence, self.timestamp_type,
                         self.transactional)


class RecordBatch:
    """A read-only view of one batch inside a larger buffer (no copy of the records).

    ``position`` is where the batch starts in ``buffer``. The header is parsed and checked for
    structural sanity on construction; the CRC is checked by :meth:`validate` (or
    :meth:`is_valid`), and records are decoded only by :meth:`records`.
    """

    __slots__ = (
        "buffer", "position", "base_offset", "batch_length", "partition_leader_epoch", "magic", "crc",
        "attributes", "last_offset_delta", "base_timestamp", "max_timestamp", "producer_id",
        "producer_epoch", "base_sequence", "record_count",
    )
    buffer: bytes | bytearray | memoryview
    position: int
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    def __init__(self, buffer: bytes | bytearray | memoryview, position: int = 0) -> None:
        available = len(buffer) - position
        if available < LOG_OVERHEAD:
            raise TruncatedBatchError(f"only {available} bytes left, a batch needs {HEADER_SIZE}", position)
        base_offset, batch_length = _OFFSET_AND_LENGTH.unpack_from(buffer, position)
        if batch_length < MIN_BATCH_LENGTH or batch_length > MAX_BATCH_SIZE:
            raise CorruptRecordError(f"batch length {batch_length} is out of range", position)
        if available < HEADER_SIZE:
            raise TruncatedBatchError(f"only {available} bytes left, a batch header needs {HEADER_SIZE}", position)
        (self.base_offset, self.batch_length, self.partition_leader_epoch, self.magic, self.crc,
         self.attributes, self.last_offset_delta, self.base_timestamp, self.max_timestamp, self.producer_id,
         self.producer_epoch, self.base_sequence, self.record_count) = _HEADER.unpack_from(buffer, position)
        if self.magic != MAGIC:
            raise CorruptRecordError(f"unsupported magic {self.magic} (only v2 batches are accepted)", position)
        if available < batch_length + LOG_OVERHEAD:
            raise TruncatedBatchError(
                f"batch claims {batch_length + LOG_OVERHEAD} bytes but only {available} remain", position)
        if self.record_count < 0 or self.last_offset_delta < 0 or self.record_count > self.last_offset_delta + 1:
            raise CorruptRecordError(
                f"record count {self.record_count} does not fit lastOffsetDelta {self.last_offset_delta}", position)
        if base_offset < 0:
            raise CorruptRecordError(f"negative base offset {base_offset}", position)
        self.buffer = buffer
        self.position = position

    # -- header facts --
    @property
    def size(self) -> int:
        """Total bytes of the batch, header included."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def end_position(self) -> int:
        return self.position + self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def timestamp_type(self) -> int:
        return 1 if self.attributes & ATTR_TIMESTAMP_TYPE else 0

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & ATTR_TRANSACTIONAL)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & ATTR_CONTROL)

    @property
    def last_sequence(self) -> int:
        if self.base_sequence < 0:
            return NO_SEQUENCE
        return (self.base_sequence + self.last_offset_delta) & 0x7FFFFFFF

    def raw(self) -> bytes:
        """The batch's bytes, a copy."""
        return bytes(self.buffer[self.position:self.end_position])

    def compute_crc(self) -> int:
        return _crc32c.crc32c(memoryview(self.buffer)[self.position + CRC_START:self.end_position])

    def is_valid(self) -> bool:
        return self.compute_crc() == self.crc

    def validate(self) -> None:
        """Raise CorruptRecordError when the stored CRC does not match the bytes."""
        computed = self.compute_crc()
        if computed != self.crc:
            raise CorruptRecordError(
                f"CRC mismatch for batch at offset {self.base_offset}: stored {self.crc:#010x}, "
                f"computed {computed:#010x}", self.position)

    # -- records --
    def payload(self, max_decompressed: int = DEFAULT_MAX_DECOMPRESSED_BYTES) -> bytes | memoryview:
        """The records section, decompressed when needed (a view into the buffer when not)."""
        start = self.position + HEADER_SIZE
        payload = memoryview(self.buffer)[start:self.end_position]
        codec = self.compression
        if codec:
            if codec > max(Compression):
                raise CorruptRecordError(f"batch at offset {self.base_offset}: unknown compression codec {codec}",
                                         self.position)
            try:
                return decompress(codec, payload, max_decompressed)
            except CorruptRecordError as exc:
                raise CorruptRecordError(f"batch at offset {self.base_offset}: {exc.detail}", self.position) from exc
        return payload

    def records(self, max_decompressed: int = DEFAULT_MAX_DECOMPRESSED_BYTES) -> list[Record]:
        """Decode and validate every record (:func:`decode_records`, decompressing when
        needed). Damage raises CorruptRecordError naming the batch."""
        data = self.payload(max_decompressed)
        try:
            return decode_records(data, self.record_count, self.base_offset, self.base_timestamp,
                                  self.last_offset_delta)
        except CorruptRecordError as exc:
            raise CorruptRecordError(f"batch at offset {self.base_offset}: {exc.detail}", self.position) from exc

    def uniform_runs(self, data: bytes | memoryview) -> list[UniformRun] | None:
        """:func:`uniform_runs` of this batch's records section ``data`` (from :meth:`payload`)."""
        return uniform_runs(data, self.record_count, self.base_timestamp)

    def check_records(self, *, require_keys: bool = False, contiguous: bool = False,
                      max_decompressed: int = DEFAULT_MAX_DECOMPRESSED_BYTES) -> None:
        """Validate every record as :meth:`records` would decode it, without keeping them
        (:func:`validate_records`); what the broker runs on every produced batch."""
        data = self.payload(max_decompressed)
        try:
            validate_records(data, self.record_count, self.last_offset_delta, self.base_timestamp,
                             require_keys=require_keys, contiguous=contiguous)
        except CorruptRecordError as exc:
            raise CorruptRecordError(f"batch at offset {self.base_offset}: {exc.detail}", self.position) from exc

    def __repr__(self) -> str:
        return (f"RecordBatch(base_offset={self.base_offset}, last_offset={self.last_offset}, "
                f"count={self.record_count}, size={self.size}, codec={Compression(self.compression).name})")


# --- buffers of many batches --------------------------------------------------------------------


def iter_batches(buffer: bytes | bytearray | memoryview, position: int = 0, end: int | None = None,
                 *, validate: bool = False) -> Iterator[RecordBatch]:
    """Yield each batch in ``buffer[position:end]``; damage raises with the batch's position.

    A trailing partial batch raises TruncatedBatchError (callers that read a fixed-size window
    of a log can catch it to stop at the last whole batch).
    """
    view = buffer if end is None else memoryview(buffer)[:end]
    limit = len(view)
    while position < limit:
        batch = RecordBatch(view, position)
        if validate:
            batch.validate()
        yield batch
        position = batch.end_position


def whole_batches_length(buffer: bytes | bytearray | memoryview, position: int = 0) -> int:
    """Bytes from ``position`` covered by whole batches (stops before a partial tail)."""
    limit = len(buffer)
    start = position
    while limit - position >= LOG_OVERHEAD:
        batch_length = _INT32.unpack_from(buffer, position + 8)[0]
        if batch_length < MIN_BATCH_LENGTH:
            break
        if position + LOG_OVERHEAD + batch_length > limit:
            break
        position += LOG_OVERHEAD + batch_length
    return position - start


def stamp_batch(buffer: bytearray | memoryview, position: int, base_offset: int, partition_leader_epoch: int) -> None:
    """Assign a batch's base offset and leader epoch in place (outside the CRC's coverage)."""
    _INT64.pack_into(buffer, position, base_offset)
    _INT32.pack_into(buffer, position + 12, partition_leader_epoch)


def decode_all(buffer: bytes | bytearray | memoryview, *, validate: bool = True) -> list[Record]:
    """Every record of every batch in ``buffer`` (convenience for tools and tests)."""
    records: list[Record] = []
    for batch in iter_batches(buffer, validate=validate):
        records.extend(batch.records())
    return records


def records_from(batches: Iterable[RecordBatch]) -> Iterator[Record]:
    for batch in batches:
        yield from batch.records()
