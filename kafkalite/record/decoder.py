"""The one record decoder and validator of Kafka v2 record batches. Pure: no I/O.

:func:`decode_records` decodes the records section of a batch strictly (see its docstring for
the rules); :func:`uniform_runs` is its fast half, which recognises the record layouts
producers write with C-level strided compares and accepts exactly what :func:`decode_records`
accepts; :func:`validate_records` checks records without keeping them (what the broker runs on
every produced batch). The batch layout and the record format are documented in
:mod:`kafkalite.record.batch`, which uses this module for :class:`RecordBatch`'s record access
and re-exports its names.

Every path raises :class:`~kafkalite.errors.CorruptRecordError` for damage; producer-only rules
(keys on compacted topics, offset deltas 0..n-1) raise
:class:`~kafkalite.errors.InvalidRecordError` (INVALID_RECORD).

Thread-safety: functions are pure (the lookup tables are replaced whole when they grow, never
edited in place).
"""

from __future__ import annotations

from typing import NamedTuple, cast

from kafkalite.errors import CorruptRecordError, InvalidRecordError
from kafkalite.record.speedups import EXTENSION as _EXTENSION
from kafkalite.record.varint import decode_varint, varint as _varint

Header = tuple[str, "bytes | None"]


class Record(NamedTuple):
    """One decoded record with its absolute offset and timestamp."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()


_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1
_MAX_OFFSET_DELTA = (1 << 31) - 1


def decode_records(data: bytes | bytearray | memoryview, count: int, base_offset: int,
                   base_timestamp: int, last_offset_delta: int | None = None) -> list[Record]:
    """Decode and validate ``count`` records packed back to back in ``data`` (the rules are
    :func:`py_decode_records`'), with the compiled extension when it is loaded."""
    if _EXTENSION is not None:
        records: list[Record] = _EXTENSION.decode_records(data, count, base_offset, base_timestamp, last_offset_delta,
                                                          Record)
        return records
    return py_decode_records(data, count, base_offset, base_timestamp, last_offset_delta)


def py_decode_records(data: bytes | bytearray | memoryview, count: int, base_offset: int,
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
    """Check ``count`` records as :func:`decode_records` does, without keeping them (the rules
    are :func:`py_validate_records`'), with the compiled extension when it is loaded."""
    if _EXTENSION is not None:
        _EXTENSION.validate_records(data, count, last_offset_delta, base_timestamp, require_keys, contiguous)
        return
    py_validate_records(data, count, last_offset_delta, base_timestamp, require_keys=require_keys,
                        contiguous=contiguous)


def py_validate_records(data: bytes | bytearray | memoryview, count: int, last_offset_delta: int,
                        base_timestamp: int = 0, *, require_keys: bool = False, contiguous: bool = False) -> None:
    """Check ``count`` records as :func:`py_decode_records` does, without keeping them.

    ``contiguous`` (producer batches) also requires offset deltas 0, 1, ..., count - 1;
    ``require_keys`` (compacted topics) a non-null key on every record — violations of these
    rules raise InvalidRecordError; damage raises CorruptRecordError. The bulk shape is
    checked by :func:`uniform_runs` at C speed; anything else is decoded record by record.
    """
    runs = uniform_runs(data, count, base_timestamp)
    if runs is not None and count - 1 <= last_offset_delta:  # uniform runs hold offset deltas 0 .. count - 1
        if require_keys and any(run.key_length < 0 for run in runs):
            raise InvalidRecordError("a compacted topic needs a key on every record")
        return
    records = py_decode_records(data, count, 0, base_timestamp, last_offset_delta)
    if contiguous and records and records[-1].offset != count - 1:
        raise InvalidRecordError(f"offset deltas of the {count} records are not 0 to {count - 1}")
    if require_keys and any(record.key is None for record in records):
        raise InvalidRecordError("a compacted topic needs a key on every record")
