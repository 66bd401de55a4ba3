"""Every decoding path agrees on the same bytes: record/ (RecordBatch.validate + records), the
consumer (the fetcher's batch parsing + take_records, and the bulk path's values()), Spark's
ArrowBatchDecoder and ``kafkalite-dump-log --deep-iteration`` either all accept a batch and decode
identical records, or all reject it.

The batches are random valid ones (uncompressed and compressed, uniform bulk shapes, keys,
headers, null values, LogAppendTime) and mutations of them: bit flips with the CRC recomputed
(in the header and in the records, compressed payloads mutated before recompression),
truncations, trailing bytes, wrong record counts, overlong varints, non-UTF-8 and null header
keys.
"""

from __future__ import annotations

import io
import random
import struct
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pyarrow as pa

from kafkalite.client.fetcher import CompletedFetch, Fetcher, PartitionState, take_batches, take_records
from kafkalite.client.types import TopicPartition
from kafkalite.errors import CorruptRecordError, TruncatedBatchError, UnsupportedCodecError
from kafkalite.record.batch import (
    CRC_START,
    HEADER_SIZE,
    BatchBuilder,
    RecordBatch,
    _assemble,
    build_batch,
    crc32c,
    encode_record,
)
from kafkalite.record.codec import Compression, decompress
from kafkalite.spark import ArrowBatchDecoder
from kafkalite.tools.dump_log import dump_log_file

REJECTED = (CorruptRecordError, UnsupportedCodecError)  # the latter: snappy, where no snappy library is installed

TP = TopicPartition("agree", 0)
REJECT = "reject"
CODECS = [Compression.NONE, Compression.NONE, Compression.GZIP, Compression.LZ4, Compression.ZSTD]
BASE_TIMESTAMP = 1_700_000_000_000


# --- the decoding paths, each returning records as comparable tuples or REJECT -----------------


def _timestamp(batch: RecordBatch, timestamp: int) -> int:
    return batch.max_timestamp if batch.timestamp_type else timestamp


def via_record(raw: bytes) -> Any:
    try:
        batch = RecordBatch(raw)
        batch.validate()
        return [(record.offset, _timestamp(batch, record.timestamp), record.key, record.value, tuple(record.headers))
                for record in batch.records()]
    except REJECTED:
        return REJECT


def _consumer_state(raw: bytes) -> PartitionState:
    state = PartitionState(TP)
    state.position = 0
    batches, corrupt, _end = Fetcher._batches(SimpleNamespace(check_crcs=True), raw, 0, -1)  # type: ignore[arg-type]
    if batches or corrupt is not None:
        state.buffered.append(CompletedFetch(batches, 0, -1, state.generation, corrupt))
    return state


def via_consumer(raw: bytes) -> Any:
    try:
        records = take_records(_consumer_state(raw), 1 << 30, None, None)
    except REJECTED:
        return REJECT
    return [(record.offset, record.timestamp, record.key, record.value, tuple(record.headers)) for record in records]


def via_consumer_bulk(raw: bytes) -> Any:
    try:
        return [value for fetched in take_batches(_consumer_state(raw), None, None) for value in fetched.values()]
    except REJECTED:
        return REJECT


def via_spark(raw: bytes) -> Any:
    try:
        batch = RecordBatch(raw)
        batch.validate()  # Spark reads through the consumer, which checks CRCs
        decoded = ArrowBatchDecoder(TP.topic, TP.partition, include_headers=True).decode(batch, 0, 1 << 62)
    except REJECTED:
        return REJECT
    if decoded is None:
        return []
    micros = decoded.column("timestamp").cast(pa.int64()).to_pylist()
    return [(row["offset"], micro, row["key"], row["value"],
             tuple((header["key"], header["value"]) for header in row["headers"] or ()))
            for row, micro in zip(decoded.drop_columns(["timestamp"]).to_pylist(), micros)]


def via_dump(raw: bytes, directory: Path) -> Any:
    path = directory / "00000000000000000000.log"
    path.write_bytes(raw)
    out = io.StringIO()
    if dump_log_file(path, out, print_data=False, deep=True):
        return REJECT
    return out.getvalue()


def _micros(millis: int) -> int:
    """What Arrow's int64 microseconds hold for ``millis`` (wrapping, as the kernel does)."""
    value = (millis * 1000) & 0xFFFFFFFFFFFFFFFF
    return value - (1 << 64) if value >= 1 << 63 else value


def _dump_lines(raw: bytes, records: list[Any]) -> str:
    batch = RecordBatch(raw)
    name = "LogAppendTime" if batch.timestamp_type else "CreateTime"
    lines = []
    for record in batch.records():
        sequence = -1 if batch.base_sequence < 0 else batch.base_sequence + (record.offset - batch.base_offset)
        lines.append(f"| offset: {record.offset} {name}: {record.timestamp} "
                     f"keySize: {-1 if record.key is None else len(record.key)} "
                     f"valueSize: {-1 if record.value is None else len(record.value)} "
                     f"sequence: {sequence} headerKeys: [{','.join(key for key, _ in record.headers)}]\n")
    return "".join(lines)


def assert_all_agree(raw: bytes, directory: Path) -> bool:
    """All paths accept ``raw`` with the same records, or all reject it; returns accepted."""
    expected = via_record(raw)
    consumer = via_consumer(raw)
    bulk = via_consumer_bulk(raw)
    spark = via_spark(raw)
    dump = via_dump(raw, directory)
    try:
        RecordBatch(raw)
    except TruncatedBatchError:
        # a batch cut short: in a fetch answer that is the partial tail of a size-limited
        # answer, which the consumer leaves for the next fetch; everything else rejects it
        assert (expected, consumer, bulk, spark, dump) == (REJECT, [], [], REJECT, REJECT), raw.hex()
        return False
    except CorruptRecordError:
        pass
    if expected == REJECT:
        assert (consumer, bulk, spark, dump) == (REJECT,) * 4, raw.hex()
        return False
    assert consumer == expected, raw.hex()
    assert bulk == [record[3] for record in expected], raw.hex()
    assert spark == [(offset, _micros(timestamp), key, value, headers)
                     for offset, timestamp, key, value, headers in expected], raw.hex()
    assert dump != REJECT and _dump_lines(raw, expected) in dump, raw.hex()
    return True


# --- batches and mutations ---------------------------------------------------------------------


def random_batch(rng: random.Random) -> bytes:
    count = rng.choice([1, 2, 3, 7, 30, 63, 64, 65, 130])
    codec = rng.choice(CODECS)
    shape = rng.choice(["uniform", "uniform-keyed", "stamped", "ragged", "headers", "nulls"])
    size = rng.choice([0, 1, 10, 63, 64, 200])
    values: list[bytes | None] = [rng.randbytes(size) for _ in range(count)]
    keys: list[bytes | None] | None = None
    headers: list[list[tuple[str, bytes | None]]] | None = None
    timestamps: int | list[int] = BASE_TIMESTAMP
    if shape == "uniform-keyed":
        keys = [rng.randbytes(4) for _ in range(count)]
    elif shape == "stamped":  # what send() batches look like: one record shape, timestamps ascending
        spread = rng.choice([3, 63, 64, 300, 10_000, 2_000_000])
        timestamps = sorted(BASE_TIMESTAMP + rng.randrange(-spread // 8, spread) for _ in range(count))
    elif shape == "ragged":
        values = [rng.randbytes(rng.randrange(0, 300)) for _ in range(count)]
        keys = [None if rng.random() < 0.3 else rng.randbytes(rng.randrange(0, 9)) for _ in range(count)]
        timestamps = [BASE_TIMESTAMP + rng.randrange(-100, 100_000) for _ in range(count)]
    elif shape == "headers":
        headers = [[(rng.choice(["a", "trace", "é"]), rng.choice([None, b"", b"v" * rng.randrange(9)]))
                    for _ in range(rng.randrange(3))] for _ in range(count)]
    elif shape == "nulls":
        values = [None if rng.random() < 0.5 else value for value in values]
    return build_batch(values, keys=keys, timestamps=timestamps, headers=headers, compression=codec,
                       base_offset=rng.choice([0, 0, 1000]), timestamp_type=1 if rng.random() < 0.1 else 0)


def _restamp(batch: bytearray) -> bytes:
    """Fix the batch length field and recompute the CRC after an edit."""
    struct.pack_into(">i", batch, 8, len(batch) - 12)
    struct.pack_into(">I", batch, 17, crc32c(bytes(batch[CRC_START:])))
    return bytes(batch)


def _with_records(raw: bytes, edit: Callable[[bytearray], None]) -> bytes:
    """``raw`` with its (decompressed) records section edited, recompressed, length and CRC fixed."""
    batch = RecordBatch(raw)
    records = bytearray(decompress(batch.compression, raw[HEADER_SIZE:]))
    edit(records)
    return _assemble(bytes(records), batch.record_count, batch.last_offset_delta, batch.base_timestamp,
                     batch.max_timestamp, batch.compression, batch.base_offset, batch.partition_leader_epoch,
                     batch.producer_id, batch.producer_epoch, batch.base_sequence, batch.timestamp_type,
                     batch.is_transactional)


def _flip(rng: random.Random, data: bytearray, start: int = 0) -> None:
    if len(data) > start:
        data[rng.randrange(start, len(data))] ^= 1 << rng.randrange(8)


def mutate(rng: random.Random, raw: bytes) -> bytes:
    kind = rng.randrange(9)
    if kind == 0:  # bit flips in the records, CRC recomputed (compressed: before recompression)
        return _with_records(raw, lambda records: [_flip(rng, records) for _ in range(rng.choice([1, 1, 2, 3]))])
    if kind == 1:  # a bit flip in the CRC-covered header (not the control bit: consumers skip those)
        damaged = bytearray(raw)
        position = rng.randrange(CRC_START, HEADER_SIZE)
        damaged[position] ^= 1 << rng.randrange(8)
        if damaged[22] & 0x20:
            damaged[22] &= ~0x20
        return _restamp(damaged)
    if kind == 2:  # records section cut short, length and CRC fixed
        return _with_records(raw, lambda records: records.__delitem__(slice(rng.randrange(len(records) + 1), None)))
    if kind == 3:  # trailing bytes after the last record
        return _with_records(raw, lambda records: records.extend(rng.randbytes(rng.randrange(1, 4))))
    if kind == 4:  # wrong record count (and lastOffsetDelta with it)
        damaged = bytearray(raw)
        count = struct.unpack_from(">i", damaged, 57)[0] + rng.choice([-1, 1])
        struct.pack_into(">i", damaged, 57, count)
        if rng.random() < 0.5:
            struct.pack_into(">i", damaged, 23, count - 1)
        return _restamp(damaged)
    if kind == 5:  # an overlong or unterminated varint at a random place
        def overlong(records: bytearray) -> None:
            position = rng.randrange(len(records) + 1)
            records[position:position] = b"\x80" * rng.randrange(1, 11)
        return _with_records(raw, overlong)
    if kind == 6:  # the raw bytes cut short (a torn write)
        return raw[:rng.randrange(1, len(raw))]
    if kind == 7:  # a bit flip anywhere in the compressed payload, CRC recomputed
        damaged = bytearray(raw)
        _flip(rng, damaged, HEADER_SIZE)
        return _restamp(damaged)
    return bad_header_key(rng)


def bad_header_key(rng: random.Random) -> bytes:
    """A batch whose one header key is not UTF-8, or null (length -1), or a valid one."""
    builder = BatchBuilder(compression=rng.choice(CODECS))
    builder.append(BASE_TIMESTAMP, b"k", b"v", [("ok", b"1")])
    builder.append(BASE_TIMESTAMP, None, b"w", [("hk", b"2"), ("z", None)])
    raw = builder.build()
    choice = rng.randrange(3)

    def edit(records: bytearray) -> None:
        at = records.index(b"\x04hk")
        if choice == 0:
            records[at + 1:at + 3] = b"\xff\xfe"
        elif choice == 1:
            records[at:at + 3] = b"\x01\x00\x00"  # key length -1, two bytes left over
    return _with_records(raw, edit)


def test_every_decoding_path_agrees_on_random_and_mutated_batches(tmp_path: Path) -> None:
    rng = random.Random(1414)
    accepted = rejected = bulk_shape = 0
    for trial in range(1000):
        raw = random_batch(rng)
        if trial % 5:
            raw = mutate(rng, raw)
        else:
            batch = RecordBatch(raw)
            bulk_shape += batch.uniform_runs(batch.payload()) is not None
        if assert_all_agree(raw, tmp_path):
            accepted += 1
        else:
            rejected += 1
    assert accepted >= 250 and rejected >= 250 and bulk_shape >= 80, (accepted, rejected, bulk_shape)


def test_the_named_disagreements_are_gone(tmp_path: Path) -> None:
    good = build_batch([b"a", b"b"], timestamps=BASE_TIMESTAMP)
    trailing = _with_records(good, lambda records: records.extend(b"\x00\x00"))
    def replace(records: bytearray, at: int, new: bytes) -> None:
        position = records.index(b"\x04hk") + at
        records[position:position + len(new)] = new

    non_utf8 = _with_records(_header_batch(), lambda records: replace(records, 1, b"\xff\xfe"))
    header_count = _with_records(_header_batch(), lambda records: replace(records, -1, b"\x2a"))  # 21 headers
    for raw in (trailing, non_utf8, header_count):
        assert via_record(raw) == REJECT
        assert not assert_all_agree(raw, tmp_path)
    assert assert_all_agree(good, tmp_path)
    assert assert_all_agree(_header_batch(), tmp_path)


def _header_batch() -> bytes:
    return build_batch([b"v"], keys=[b"k"], timestamps=BASE_TIMESTAMP, headers=[[("hk", b"x")]])


def test_records_with_non_zero_attributes_or_gaps_are_rejected_everywhere(tmp_path: Path) -> None:
    attributes = _assemble(b"".join([encode_record(0, 0, None, b"a"), encode_record(1, 0, None, b"b")]).replace(
        b"\x00\x00\x02\x01\x02b", b"\x04\x00\x02\x01\x02b"), 2, 1, BASE_TIMESTAMP, BASE_TIMESTAMP, 0, 0, -1, -1, -1,
        -1, 0, False)
    backwards = _assemble(encode_record(1, 0, None, b"a") + encode_record(0, 0, None, b"b"), 2, 1,
                          BASE_TIMESTAMP, BASE_TIMESTAMP, 0, 0, -1, -1, -1, -1, 0, False)
    beyond = _assemble(encode_record(0, 0, None, b"a") + encode_record(5, 0, None, b"b"), 2, 1,
                       BASE_TIMESTAMP, BASE_TIMESTAMP, 0, 0, -1, -1, -1, -1, 0, False)
    for raw in (attributes, backwards, beyond):
        assert not assert_all_agree(raw, tmp_path)
    # a compacted batch keeps its span: gaps in the offset deltas are fine when reading
    gaps = _assemble(encode_record(0, 0, b"k", b"a") + encode_record(5, 0, b"k", b"b"), 2, 7,
                     BASE_TIMESTAMP, BASE_TIMESTAMP, 0, 0, -1, -1, -1, -1, 0, False)
    assert assert_all_agree(gaps, tmp_path)
    assert [record[0] for record in via_record(gaps)] == [0, 5]
