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

This module is the one record decoder and validator: :func:`decode_records` (strict: see its
docstring for the rules) and its fast half :func:`uniform_runs`, which recognises the record
layouts producers write with C-level strided compares and accepts exactly what
:func:`decode_records` accepts. The broker validates every produced batch with
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
from typing import NamedTuple, TypeGuard, cast

import crc32c as _crc32c

from kafkalite.errors import CorruptRecordError, InvalidRecordError, TruncatedBatchError
from kafkalite.record.codec import (
    COMPRESSION_MASK,
    DEFAULT_MAX_DECOMPRESSED_BYTES,
    Compression,
    compress,
    decompress,
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

Header = tuple[str, "bytes | None"]


def crc32c(data: bytes | bytearray | memoryview) -> int:
    """CRC-32C (Castagnoli) of ``data``; CRC-32C(b"123456789") == 0xE3069283."""
    return _crc32c.crc32c(data)


# --- varints ------------------------------------------------------------------------------------


def encode_varint(value: int) -> bytes:
    """Zigzag + LEB128 encoding of a signed 64-bit integer (Kafka's varint and varlong)."""
    unsigned = ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF
    out = bytearray()
    while unsigned >= 0x80:
        out.append((unsigned & 0x7F) | 0x80)
        unsigned >>= 7
    out.append(unsigned)
    return bytes(out)


def decode_varint(data: bytes | bytearray | memoryview, position: int, max_bytes: int = 10) -> tuple[int, int]:
    """Decode one zigzag varint at ``position``; returns (value, next position).

    Raises CorruptRecordError when the varint runs past ``max_bytes`` or the buffer.
    """
    shift = 0
    result = 0
    end = len(data)
    for _ in range(max_bytes):
        if position >= end:
            raise CorruptRecordError("varint runs past the end of the buffer")
        byte = data[position]
        position += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return (result >> 1) ^ -(result & 1), position
        shift += 7
    raise CorruptRecordError(f"varint longer than {max_bytes} bytes")


_SMALL_VARINT_LIMIT = 1 << 16
# Zigzag encodings of 0 .. 65535 (non-negative values only), computed once.
_VARINTS: tuple[bytes, ...] = tuple(encode_varint(i) for i in range(_SMALL_VARINT_LIMIT))


def _varint(value: int) -> bytes:
    if 0 <= value < _SMALL_VARINT_LIMIT:
        return _VARINTS[value]
    return encode_varint(value)


# --- records ------------------------------------------------------------------------------------


class Record(NamedTuple):
    """One decoded record with its absolute offset and timestamp."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()


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
    varints = _VARINTS
    parts: list[bytes] = []
    append = parts.append
    if keys is None:
        for offset_delta, value in enumerate(values):
            if value is None:
                delta = varints[offset_delta] if offset_delta < _SMALL_VARINT_LIMIT else encode_varint(offset_delta)
                body = b"\x00\x00" + delta + b"\x01\x01\x00"
                append(_varint(len(body)) + body)
                continue
            value_length = len(value)
            delta = varints[offset_delta] if offset_delta < _SMALL_VARINT_LIMIT else encode_varint(offset_delta)
            length_prefix = varints[value_length] if value_length < _SMALL_VARINT_LIMIT else encode_varint(value_length)
            body_length = 4 + len(delta) + len(length_prefix) + value_length
            head = varints[body_length] if body_length < _SMALL_VARINT_LIMIT else encode_varint(body_length)
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
    varints = _VARINTS
    limit = _SMALL_VARINT_LIMIT
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
    if isinstance(timestamps, int) and headers is None:
        base_timestamp = max_timestamp = timestamps
        records = _encode_plain_values(values, keys)
    else:
        if isinstance(timestamps, int):
            timestamp_list: Sequence[int] = [timestamps] * count
        else:
            timestamp_list = timestamps
            if len(timestamp_list) != count:
                raise ValueError("timestamps and values differ in length")
        base_timestamp = timestamp_list[0]
        max_timestamp = max(timestamp_list)
        if headers is None:
            records = _encode_timestamped(values, keys, [timestamp - base_timestamp for timestamp in timestamp_list])
            return _assemble(records, count, count - 1, base_timestamp, max_timestamp, compression, base_offset,
                             partition_leader_epoch, producer_id, producer_epoch, base_sequence, timestamp_type,
                             transactional)
        key_list = keys if keys is not None else [None] * count
        header_list: Sequence[Sequence[Header]] = headers if headers is not None else [()] * count
        records = b"".join(
            encode_record(index, timestamp_list[index] - base_timestamp, key_list[index], values[index],
                          header_list[index])
            for index in range(count)
        )
    return _assemble(records, count, count - 1, base_timestamp, max_timestamp, compression, base_offset,
                     partition_leader_epoch, producer_id, producer_epoch, base_sequence, timestamp_type,
                     transactional)


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


_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1
_MAX_OFFSET_DELTA = (1 << 31) - 1


def decode_records(data: bytes | bytearray | memoryview, count: int, base_offset: int,
                   base_timestamp: int, last_offset_delta: int | None = None) -> list[Record]:
    """Decode and validate ``count`` records packed back to back in ``data``: the one record
    decoder every reader uses (broker, consumer, Spark reader, dump tool).

    Strict: every record's length must match its fields, the records must fill ``data``
    exactly, record attributes must be 0, key and value lengths must be -1 (null) or fit their
    record, header counts and header key/value lengths must fit, header keys must be non-null
    UTF-8, timestamps must stay within int64, and offset deltas must increase strictly from at
    least 0 up to at most ``last_offset_delta`` (when given). Damage raises
    CorruptRecordError.

    The loop is written for speed: single-byte varints (the common case) take one comparison.
    Every length is checked against the remaining bytes before anything is cut out.
    """
    if isinstance(data, memoryview):
        data = data.tobytes()
    end = len(data)
    if not _INT64_MIN + 64 <= base_timestamp <= _INT64_MAX - 64:
        raise CorruptRecordError(f"base timestamp {base_timestamp} is out of range")
    highest_delta = _MAX_OFFSET_DELTA if last_offset_delta is None else last_offset_delta
    previous_delta = -1
    position = 0
    records: list[Record] = []
    append = records.append
    new_tuple = tuple.__new__
    try:
        for _ in range(count):
            byte = data[position]
            if byte < 0x80:
                length = (byte >> 1) ^ -(byte & 1)
                position += 1
            elif data[position + 1] < 0x80:
                length = (byte & 0x7F) | (data[position + 1] << 7)
                length = (length >> 1) ^ -(length & 1)
                position += 2
            else:
                length, position = decode_varint(data, position, 5)
            record_end = position + length
            if length < 6 or record_end > end:
                raise CorruptRecordError(f"record length {length} does not fit the batch")
            if data[position]:
                raise CorruptRecordError(f"record attributes {data[position]} are not 0")
            position += 1
            byte = data[position]
            if byte < 0x80:
                timestamp = base_timestamp + ((byte >> 1) ^ -(byte & 1))
                position += 1
            else:
                timestamp_delta, position = decode_varint(data, position, 10)
                timestamp = base_timestamp + timestamp_delta
                if not _INT64_MIN <= timestamp <= _INT64_MAX:
                    raise CorruptRecordError(f"timestamp delta {timestamp_delta} is out of range")
            byte = data[position]
            if byte < 0x80:
                offset_delta = (byte >> 1) ^ -(byte & 1)
                position += 1
            else:
                offset_delta, position = decode_varint(data, position, 5)
            if offset_delta <= previous_delta or offset_delta > highest_delta:
                raise CorruptRecordError(
                    f"offset delta {offset_delta} after {previous_delta} (lastOffsetDelta {highest_delta})")
            previous_delta = offset_delta
            byte = data[position]
            if byte == 1:
                key = None
                position += 1
            else:
                if byte < 0x80:
                    key_length = (byte >> 1) ^ -(byte & 1)
                    position += 1
                else:
                    key_length, position = decode_varint(data, position, 5)
                if key_length < 0 or position + key_length > record_end:
                    raise CorruptRecordError(f"key length {key_length} does not fit its record")
                key = data[position:position + key_length]
                position += key_length
            byte = data[position]
            if byte == 1:
                value = None
                position += 1
            else:
                if byte < 0x80:
                    value_length = (byte >> 1) ^ -(byte & 1)
                    position += 1
                elif data[position + 1] < 0x80:
                    value_length = (byte & 0x7F) | (data[position + 1] << 7)
                    value_length = (value_length >> 1) ^ -(value_length & 1)
                    position += 2
                else:
                    value_length, position = decode_varint(data, position, 5)
                if value_length < 0 or position + value_length >= record_end:
                    raise CorruptRecordError(f"value length {value_length} does not fit its record")
                value = data[position:position + value_length]
                position += value_length
            if position >= record_end:
                raise CorruptRecordError("a record ends before its header count")
            if data[position] == 0:
                position += 1
                append(new_tuple(Record, (base_offset + offset_delta, timestamp, key, value, ())))
            else:
                header_count, position = decode_varint(data, position, 5)
                headers, position = _decode_headers(data, position, header_count, record_end)
                append(new_tuple(Record, (base_offset + offset_delta, timestamp, key, value, headers)))
            if position != record_end:
                raise CorruptRecordError(
                    f"record is {length} bytes long but its fields take {length + position - record_end}")
    except IndexError:
        raise CorruptRecordError("record runs past the end of its batch") from None
    if position != end:
        raise CorruptRecordError(f"{end - position} stray bytes after the last record")
    return records


def _decode_headers(data: bytes | bytearray, position: int, count: int,
                    record_end: int) -> tuple[tuple[Header, ...], int]:
    if count < 0 or 2 * count > record_end - position:
        raise CorruptRecordError(f"header count {count} is impossible")
    headers: list[Header] = []
    for _ in range(count):
        key_length, position = decode_varint(data, position, 5)
        if key_length < 0 or position + key_length > record_end:
            raise CorruptRecordError(f"header key length {key_length} does not fit its record")
        try:
            name = bytes(data[position:position + key_length]).decode("utf-8")
        except UnicodeDecodeError:
            raise CorruptRecordError("header key is not UTF-8") from None
        position += key_length
        value_length, position = decode_varint(data, position, 5)
        if value_length == -1:
            headers.append((name, None))
        else:
            if value_length < 0 or position + value_length > record_end:
                raise CorruptRecordError(f"header value length {value_length} does not fit its record")
            headers.append((name, bytes(data[position:position + value_length])))
            position += value_length
    return tuple(headers), position


# --- the bulk shape: runs of identically laid out records ---------------------------------------


class UniformRun(NamedTuple):
    """``record_count`` records laid out identically from ``start`` of a records section, ``stride``
    bytes apart, with offset deltas ``first_delta``, ``first_delta + 1``, ... Positions
    (``key_at``, ``value_at``) are from a record's start; lengths are -1 for null. No headers.

    Timestamp deltas are all ``timestamp_delta`` when ``timestamp_columns`` is empty; else they
    are varints of one size whose bytes are ``timestamp_columns`` (column i = byte i of every
    record), read with :func:`run_timestamp_deltas`.
    """

    start: int
    record_count: int  # not ``count``, which would hide tuple.count
    first_delta: int
    stride: int
    key_at: int
    key_length: int
    value_at: int
    value_length: int
    timestamp_delta: int
    timestamp_columns: tuple[bytes, ...] = ()


# Byte ``i`` of the canonical varint of offset delta k, for k below their length, per i; grown
# by replacing the whole tuple (never edited in place), so threads may share it.
_DELTA_COLUMNS: tuple[bytes, bytes, bytes] = (b"", b"", b"")
_DELTA_SIZE_LIMITS = (64, 8192, 1 << 20)  # canonical offset-delta varints of 1, 2, 3 bytes end here
_MAX_UNIFORM_COUNT = _DELTA_SIZE_LIMITS[-1]
_MAX_RUNS = 16
_MAX_VARYING_TIMESTAMP_BYTES = 3  # per-record timestamp deltas below 2**20 ms in magnitude
_TIMESTAMP_MARGIN = 1 << 21
_SINGLE_BYTES = tuple(bytes((value,)) for value in range(256))
_HIGH_BIT_FLAGS = bytes(1 if value & 0x80 else 0 for value in range(256))  # a translate() table
_ZIGZAG_BYTE = tuple((value >> 1) ^ -(value & 1) for value in range(128))


def _delta_column(byte_index: int, first: int, count: int) -> bytes:
    global _DELTA_COLUMNS
    columns = _DELTA_COLUMNS
    if first + count > len(columns[0]):
        size = min(max(first + count, 2 * len(columns[0]), 1024), _MAX_UNIFORM_COUNT)
        encoded = [_varint(delta) for delta in range(size)]
        columns = _DELTA_COLUMNS = (bytes(value[0] for value in encoded),
                                    bytes(value[1] if len(value) > 1 else 0 for value in encoded),
                                    bytes(value[2] if len(value) > 2 else 0 for value in encoded))
    return columns[byte_index][first:first + count]


def _leading_equal(column: bytes, value: int) -> int:
    """How many bytes at the start of ``column`` equal ``value``."""
    size = len(column)
    if column.count(value) == size:  # the common answer, and count() is faster than lstrip()
        return size
    return size - len(column.lstrip(_SINGLE_BYTES[value]))


def _leading_high(column: bytes, high: bool) -> int:
    """How many bytes at the start of ``column`` have the high bit set (``high``) or clear."""
    stop = column.translate(_HIGH_BIT_FLAGS).find(0 if high else 1)
    return len(column) if stop < 0 else stop


def _leading_same(column: bytes, expected: bytes | bytearray) -> int:
    """How many bytes at the start of ``column`` equal ``expected``'s (C-level compares)."""
    if column == expected:
        return len(column)
    low, high = 0, len(column)  # column[:low] matches, column[:high] does not
    while high - low > 1:
        middle = (low + high) // 2
        if column[:middle] == expected[:middle]:
            low = middle
        else:
            high = middle
    return low


def uniform_runs(data: bytes | bytearray | memoryview, count: int, base_timestamp: int = 0) -> list[UniformRun] | None:
    """The layout of ``count`` records in ``data`` when they are the shape producers write — a
    few runs of records that differ only in their offset deltas (0, 1, 2, ... in canonical
    varints), in the bytes of their keys and values, and possibly in their timestamp deltas
    (varints of one size per run); no headers — or None.

    This is the fast half of the validator: the first record of each run is decoded and checked
    in full, then every other byte of every record that is not key or value content is
    compared with it (or, for timestamp deltas, checked for the varint's shape), one C-level
    strided slice per byte position; a run ends at the first record that differs. Records
    accepted here are exactly records :func:`decode_records` accepts, decoded the same way;
    None never means damage, only "not this shape" (the general decoder then decides).
    """
    if count <= 0 or count > _MAX_UNIFORM_COUNT or not _INT64_MIN + 64 <= base_timestamp <= _INT64_MAX - 64:
        return None
    if not isinstance(data, bytes):
        data = bytes(data)  # one copy: strided slices of bytes are several times faster than of views
    end = len(data)
    runs: list[UniformRun] = []
    position = 0
    index = 0
    try:
        while index < count:
            if len(runs) >= _MAX_RUNS:
                return None
            length, attributes_at = decode_varint(data, position, 5)
            record_end = attributes_at + length
            if length < 6 or record_end > end or data[attributes_at]:
                return None
            timestamp_at = attributes_at + 1
            timestamp_delta, delta_at = decode_varint(data, timestamp_at, 10)
            if not _INT64_MIN <= base_timestamp + timestamp_delta <= _INT64_MAX:
                return None
            delta, key_length_at = decode_varint(data, delta_at, 5)
            delta_size = key_length_at - delta_at
            if delta != index or delta_size != len(_varint(index)):
                return None
            key_length, key_at = decode_varint(data, key_length_at, 5)
            if key_length < -1:
                return None
            value_length_at = key_at + max(key_length, 0)
            value_length, value_at = decode_varint(data, value_length_at, 5)
            if value_length < -1:
                return None
            header_at = value_at + max(value_length, 0)
            if header_at != record_end - 1 or data[header_at]:
                return None
            stride = record_end - position
            boundary = next(limit for limit in _DELTA_SIZE_LIMITS if index < limit)
            number = min(count - index, boundary - index, (end - position) // stride)
            timestamp_size = delta_at - timestamp_at
            varying = timestamp_size <= _MAX_VARYING_TIMESTAMP_BYTES \
                and _INT64_MIN + _TIMESTAMP_MARGIN <= base_timestamp <= _INT64_MAX - _TIMESTAMP_MARGIN
            constant = [*range(timestamp_at - position), *range(key_length_at - position, key_at - position),
                        *range(value_length_at - position, value_at - position), stride - 1]
            if not varying:
                constant.extend(range(timestamp_at - position, delta_at - position))
            for offset in constant:
                number = _leading_equal(data[position + offset:position + number * stride:stride],
                                        data[position + offset])
            for byte_index in range(delta_size):
                number = _leading_same(data[delta_at + byte_index:position + number * stride:stride],
                                       _delta_column(byte_index, index, number))
            columns: tuple[bytes, ...] = ()
            if varying:
                stop = position + number * stride
                columns = tuple(data[timestamp_at + byte_index:stop:stride] for byte_index in range(timestamp_size))
                if any(_leading_equal(column, data[timestamp_at + byte_index]) < number
                       for byte_index, column in enumerate(columns)):
                    for byte_index, column in enumerate(columns):
                        number = min(number, _leading_high(column, byte_index < timestamp_size - 1))
                    columns = tuple(column[:number] for column in columns)
                else:
                    columns = ()
            runs.append(UniformRun(position, number, index, stride, key_at - position, key_length,
                                   value_at - position, value_length, timestamp_delta, columns))
            index += number
            position += number * stride
    except (CorruptRecordError, IndexError):
        return None
    if position != end:
        return None
    return runs


def run_timestamp_deltas(run: UniformRun, low: int = 0, high: int | None = None) -> list[int]:
    """The timestamp deltas of records ``low`` to ``high`` (exclusive; default all) of ``run``."""
    stop = run.record_count if high is None else high
    columns = run.timestamp_columns
    if not columns:
        return [run.timestamp_delta] * (stop - low)
    if len(columns) == 1:
        return list(map(_ZIGZAG_BYTE.__getitem__, columns[0][low:stop]))
    raw = [0] * (stop - low)
    for byte_index, column in enumerate(columns):
        shift = 7 * byte_index
        raw = [value | ((byte & 0x7F) << shift) for value, byte in zip(raw, column[low:stop])]
    return [(value >> 1) ^ -(value & 1) for value in raw]


def run_slices(data: bytes, run: UniformRun, at: int, length: int, low: int = 0,
               high: int | None = None) -> list[bytes | None]:
    """The ``length`` bytes at ``at`` of records ``low`` to ``high`` (exclusive; default all) of
    ``run`` — one field of a run that :func:`uniform_runs` checked; None each when length is -1."""
    stop = run.record_count if high is None else high
    if length < 0:
        return [None] * (stop - low)
    stride = run.stride
    first = run.start + at + low * stride
    return [data[offset:offset + length] for offset in range(first, run.start + at + stop * stride, stride)]


def decode_uniform_values(data: bytes | bytearray | memoryview, count: int) -> list[bytes] | None:
    """Values of ``count`` keyless, header-less records of one value length with timestampDelta
    0 — the shape bulk producers write — or None when ``data`` is not exactly that shape."""
    runs = uniform_runs(data, count)
    if runs is None:
        return None
    if any(run.key_length >= 0 or run.value_length < 0 or run.timestamp_delta or run.timestamp_columns
           or run.value_length != runs[0].value_length for run in runs):
        return None
    if not isinstance(data, bytes):
        data = bytes(data)
    values: list[bytes] = []
    for run in runs:
        values.extend(cast("list[bytes]", run_slices(data, run, run.value_at, run.value_length)))  # no null values
    return values


def validate_records(data: bytes | bytearray | memoryview, count: int, last_offset_delta: int,
                     base_timestamp: int = 0, *, require_keys: bool = False, contiguous: bool = False) -> None:
    """Check ``count`` records as :func:`decode_records` does, without keeping them.

    ``contiguous`` (producer batches) also requires offset deltas 0, 1, ..., count - 1;
    ``require_keys`` (compacted topics) a non-null key on every record — violations of these
    rules raise InvalidRecordError; damage raises CorruptRecordError. The bulk shape is
    checked by :func:`uniform_runs` at C speed; anything else is decoded record by record.
    """
    runs = uniform_runs(data, count, base_timestamp)
    if runs is not None:
        if require_keys and any(run.key_length < 0 for run in runs):
            raise InvalidRecordError("a compacted topic needs a key on every record")
        return
    records = decode_records(data, count, 0, base_timestamp, last_offset_delta)
    if contiguous and records and records[-1].offset != count - 1:
        raise InvalidRecordError(f"offset deltas of the {count} records are not 0 to {count - 1}")
    if require_keys and any(record.key is None for record in records):
        raise InvalidRecordError("a compacted topic needs a key on every record")


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
