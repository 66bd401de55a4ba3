"""Record batch v2 codec: golden bytes, round trips, and rejection of every kind of damage."""

from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from kafkalite.errors import CorruptRecordError, TruncatedBatchError
from kafkalite.record.batch import (
    CRC_START,
    HEADER_SIZE,
    BatchBuilder,
    Record,
    RecordBatch,
    build_batch,
    crc32c,
    decode_all,
    decode_varint,
    encode_record,
    encode_varint,
    iter_batches,
    stamp_batch,
    whole_batches_length,
)
from kafkalite.record.codec import Compression, compress, decompress

GOLDEN = bytes.fromhex(
    "0000000000000000" "0000003a" "00000000" "02" "bbcc4115" "0000" "00000000"
    "0000018bcfe56800" "0000018bcfe56800" "ffffffffffffffff" "ffff" "ffffffff" "00000001"
    "100000000104686900")


def test_crc32c_check_value() -> None:
    assert crc32c(b"123456789") == 0xE3069283


@pytest.mark.parametrize("value, encoded", [
    (0, "00"), (-1, "01"), (1, "02"), (63, "7e"), (64, "8001"), (-64, "7f"), (-65, "8101"), (300, "d804"),
])
def test_varint_examples(value: int, encoded: str) -> None:
    assert encode_varint(value).hex() == encoded
    assert decode_varint(bytes.fromhex(encoded), 0) == (value, len(encoded) // 2)


@given(st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1))
def test_varint_round_trip(value: int) -> None:
    encoded = encode_varint(value)
    assert len(encoded) <= 10
    assert decode_varint(encoded, 0) == (value, len(encoded))


def test_overlong_varint_is_rejected() -> None:
    with pytest.raises(CorruptRecordError):
        decode_varint(b"\xff" * 11, 0)
    with pytest.raises(CorruptRecordError):
        decode_varint(b"\x80\x80", 0)


def test_golden_batch_bytes() -> None:
    built = build_batch([b"hi"], timestamps=1700000000000, partition_leader_epoch=0)
    assert built == GOLDEN
    batch = RecordBatch(GOLDEN)
    assert batch.size == 70 and batch.batch_length == 58 and batch.crc == 0xBBCC4115
    batch.validate()
    assert batch.records() == [Record(0, 1700000000000, None, b"hi", ())]


def test_builder_matches_bulk_encoder() -> None:
    values = [b"value-%d" % index for index in range(50)]
    builder = BatchBuilder()
    for value in values:
        builder.append(1234, None, value)
    assert builder.build() == build_batch(values, timestamps=1234)
    assert builder.estimated_size == len(build_batch(values, timestamps=1234))


def test_stamping_offsets_and_epoch_keeps_crc_valid() -> None:
    buffer = bytearray(build_batch([b"a", b"b", b"c"], timestamps=5))
    stamp_batch(buffer, 0, 1_000_000, 42)
    batch = RecordBatch(buffer)
    batch.validate()
    assert (batch.base_offset, batch.last_offset, batch.partition_leader_epoch) == (1_000_000, 1_000_002, 42)
    assert [record.offset for record in batch.records()] == [1_000_000, 1_000_001, 1_000_002]


def test_lz4_frame_is_written_as_kafka_writes_it() -> None:
    frame = compress(Compression.LZ4, b"x" * 1000)
    assert frame[:6] == bytes.fromhex("04224d186040")
    assert decompress(Compression.LZ4, frame) == b"x" * 1000


@pytest.mark.parametrize("codec", [Compression.GZIP, Compression.LZ4, Compression.ZSTD])
def test_decompression_is_bounded(codec: Compression) -> None:
    bomb = compress(codec, b"\x00" * (4 << 20))
    with pytest.raises(CorruptRecordError):
        decompress(codec, bomb, max_output=1 << 20)


def test_compression_name_lookup() -> None:
    assert Compression.from_name("lz4") is Compression.LZ4
    assert Compression.from_name(None) is Compression.NONE
    from kafkalite.errors import UnsupportedCodecError
    with pytest.raises(UnsupportedCodecError):
        Compression.from_name("brotli")


keys = st.one_of(st.none(), st.binary(max_size=40))
values = st.one_of(st.none(), st.binary(max_size=300))
headers = st.lists(st.tuples(st.text(max_size=10), st.one_of(st.none(), st.binary(max_size=20))), max_size=3)
records = st.lists(st.tuples(keys, values, headers, st.integers(min_value=0, max_value=10 ** 13)),
                   min_size=1, max_size=40)


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(records, st.sampled_from(list(Compression.__members__.values())),
       st.integers(min_value=0, max_value=1 << 40), st.integers(min_value=-1, max_value=1 << 20))
def test_random_batches_round_trip(rows: list, codec: Compression, base_offset: int, epoch: int) -> None:
    built = build_batch([row[1] for row in rows], keys=[row[0] for row in rows],
                        timestamps=[row[3] for row in rows], headers=[row[2] for row in rows],
                        compression=codec, base_offset=base_offset, partition_leader_epoch=epoch)
    batch = RecordBatch(built)
    batch.validate()
    assert batch.compression == codec
    assert batch.record_count == len(rows)
    assert batch.max_timestamp == max(row[3] for row in rows)
    decoded = batch.records()
    expected = [Record(base_offset + index, row[3], row[0], row[1], tuple(row[2]))
                for index, row in enumerate(rows)]
    assert decoded == expected


def test_every_single_byte_flip_in_crc_range_is_detected() -> None:
    original = build_batch([b"alpha", b"beta", None], keys=[b"k1", None, b"k3"], timestamps=[10, 20, 30],
                           headers=[[("h", b"1")], [], [("x", None)]])
    for position in range(CRC_START, len(original)):
        for flip in (0x01, 0x80, 0xFF):
            damaged = bytearray(original)
            damaged[position] ^= flip
            try:
                batch = RecordBatch(damaged)
            except CorruptRecordError:
                continue  # structural check caught it first
            assert not batch.is_valid(), f"flip {flip:#x} at {position} went unnoticed"
            with pytest.raises(CorruptRecordError):
                batch.validate()


def test_flips_in_stored_crc_are_detected() -> None:
    original = build_batch([b"value"], timestamps=1)
    for position in range(17, 21):
        damaged = bytearray(original)
        damaged[position] ^= 0x10
        assert not RecordBatch(damaged).is_valid()


def test_truncated_batch_is_named_with_position() -> None:
    good = build_batch([b"one"], timestamps=1)
    buffer = good + good[:-5]
    batches = iter_batches(buffer)
    assert next(batches).base_offset == 0
    with pytest.raises(TruncatedBatchError) as caught:
        next(batches)
    assert caught.value.position == len(good)
    assert whole_batches_length(buffer) == len(good)


def test_wrong_magic_is_rejected() -> None:
    damaged = bytearray(build_batch([b"v"], timestamps=1))
    damaged[16] = 1
    with pytest.raises(CorruptRecordError, match="magic"):
        RecordBatch(damaged)


@pytest.mark.parametrize("length", [-1, 0, 48, 1 << 31 - 1])
def test_absurd_batch_length_is_rejected_without_allocation(length: int) -> None:
    damaged = bytearray(build_batch([b"v"], timestamps=1))
    struct.pack_into(">i", damaged, 8, length)
    with pytest.raises(CorruptRecordError):
        RecordBatch(damaged)


def test_record_count_larger_than_span_is_rejected() -> None:
    damaged = bytearray(build_batch([b"v", b"w"], timestamps=1))
    struct.pack_into(">i", damaged, 57, 7)
    with pytest.raises(CorruptRecordError):
        RecordBatch(damaged)


def _batch_with_records_section(section: bytes, count: int) -> bytes:
    header = bytearray(struct.pack(">qiibIhiqqqhii", 0, 49 + len(section), -1, 2, 0, 0, count - 1, 0, 0, -1, -1, -1,
                                   count))
    crc = crc32c(bytes(header[CRC_START:]) + section)
    struct.pack_into(">I", header, 17, crc)
    return bytes(header) + section


@pytest.mark.parametrize("section", [
    b"\xff\xff\xff\xff\xff\xff",              # length varint never ends
    b"\x7e" + b"\x00" * 10,                  # record length 63 overruns the batch
    b"\x10\x00\x00\x00\x01\x7e\x68\x69\x00",  # value length 63 overruns its record
    b"\x10\x00\x00\x00\x7e\x04\x68\x69\x00",  # key length 63 overruns its record
    b"\x10\x00\x00\x00\x01\x04\x68\x69\x40",  # 32 headers in 0 bytes
    b"\x12\x00\x00\x00\x01\x04\x68\x69\x00\x00",  # record length claims a stray byte
])
def test_bad_records_are_corrupt_not_crashes(section: bytes) -> None:
    batch = RecordBatch(_batch_with_records_section(section, 1))
    batch.validate()  # the CRC is right: the damage is in the layout
    with pytest.raises(CorruptRecordError):
        batch.records()


def test_stray_bytes_after_last_record_are_rejected() -> None:
    section = bytes.fromhex("100000000104686900") + b"\x00"
    with pytest.raises(CorruptRecordError):
        RecordBatch(_batch_with_records_section(section, 1)).records()


@settings(max_examples=300)
@given(st.binary(min_size=0, max_size=200))
def test_random_bytes_only_ever_raise_corrupt_record(data: bytes) -> None:
    try:
        decode_all(data)
    except CorruptRecordError:
        pass


@settings(max_examples=200)
@given(st.binary(min_size=1, max_size=80), st.integers(min_value=0, max_value=200))
def test_garbage_records_in_valid_header_only_raise_corrupt_record(section: bytes, count: int) -> None:
    try:
        RecordBatch(_batch_with_records_section(section, max(count, 1))).records()
    except CorruptRecordError:
        pass


def test_garbage_inside_compressed_payload_is_corrupt() -> None:
    good = build_batch([b"x" * 200] * 10, timestamps=1, compression=Compression.LZ4)
    damaged = bytearray(good)
    for position in range(HEADER_SIZE + 7, len(damaged), 3):
        damaged[position] ^= 0x5A
    crc = crc32c(bytes(damaged[CRC_START:]))
    struct.pack_into(">I", damaged, 17, crc)
    with pytest.raises(CorruptRecordError):
        RecordBatch(damaged).records()


@pytest.mark.parametrize("count", [1, 2, 63, 64, 65, 1000, 8193])
def test_uniform_fast_paths_match_the_general_codec(count: int) -> None:
    from kafkalite.record.batch import decode_uniform_values

    values = [bytes([index % 251]) * 37 for index in range(count)]
    encoded = build_batch(values, timestamps=99)
    general = b"".join(encode_record(index, 0, None, value) for index, value in enumerate(values))
    assert encoded[HEADER_SIZE:] == general  # the uniform encoder writes the same bytes
    assert decode_uniform_values(encoded[HEADER_SIZE:], count) == values
    assert [record.value for record in RecordBatch(encoded).records()] == values


def test_uniform_decoder_declines_other_shapes() -> None:
    from kafkalite.record.batch import decode_uniform_values

    mixed = build_batch([b"a", b"bb", b"c"], timestamps=1)
    keyed = build_batch([b"a", b"b"], keys=[b"k", b"k"], timestamps=1)
    stamped = build_batch([b"a", b"b"], timestamps=[1, 2])
    with_headers = build_batch([b"a", b"b"], timestamps=1, headers=[[("h", b"1")], []])
    for data, count in ((mixed, 3), (keyed, 2), (stamped, 2), (with_headers, 2)):
        assert decode_uniform_values(data[HEADER_SIZE:], count) is None
    assert decode_uniform_values(build_batch([b"a"] * 5, timestamps=1)[HEADER_SIZE:], 4) is None
