"""Fuzz of record/'s decoder and validator (hypothesis, bounded): random bytes and mutated valid
batches never raise anything but the named Kafka errors — CorruptRecordError (CORRUPT_MESSAGE)
for damage, InvalidRecordError (INVALID_RECORD) for rule violations — and whatever the
validator accepts, the decoder decodes."""

from __future__ import annotations

import struct

from hypothesis import HealthCheck, given, settings, strategies as st

from kafkalite.errors import CorruptRecordError, InvalidRecordError, UnsupportedCodecError
from kafkalite.record.batch import CRC_START, HEADER_SIZE, build_batch, crc32c, iter_batches
from kafkalite.record.codec import Compression, has_codec

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def exercise(data: bytes) -> None:
    """Every entry point of record/ on ``data``; only the named errors may come out."""
    try:
        for batch in iter_batches(data):
            try:
                batch.is_valid()
                records = batch.records()
                runs = batch.uniform_runs(batch.payload())
                if runs is not None:
                    assert sum(run.record_count for run in runs) == len(records)
                for require_keys in (False, True):
                    for contiguous in (False, True):
                        try:
                            batch.check_records(require_keys=require_keys, contiguous=contiguous)
                        except InvalidRecordError:
                            pass
            except UnsupportedCodecError:
                assert batch.compression == Compression.SNAPPY and not has_codec(Compression.SNAPPY)
            except CorruptRecordError:
                try:
                    batch.check_records()
                except UnsupportedCodecError:
                    pass
                except CorruptRecordError:
                    pass
                else:
                    raise AssertionError("the validator accepted what the decoder rejects")
    except CorruptRecordError:
        pass


def _restamp(data: bytearray) -> bytes:
    if len(data) >= HEADER_SIZE:
        struct.pack_into(">i", data, 8, len(data) - 12)
        struct.pack_into(">I", data, 17, crc32c(bytes(data[CRC_START:])))
    return bytes(data)


@FUZZ
@given(st.binary(max_size=400))
def test_random_bytes(data: bytes) -> None:
    exercise(data)


@FUZZ
@given(st.binary(min_size=HEADER_SIZE - 12, max_size=400))
def test_random_records_behind_a_valid_header(body: bytes) -> None:
    """Random bytes as the records section of a batch whose header and CRC are right."""
    exercise(_restamp(bytearray(build_batch([b"x"], timestamps=1)[:HEADER_SIZE]) + body[HEADER_SIZE - 12:]))


batches = st.builds(
    lambda values, keyed, compression, stamps: build_batch(
        values, keys=[value[:3] for value in values] if keyed else None,
        timestamps=stamps if stamps is None else [stamps + index for index in range(len(values))],
        compression=compression),
    st.lists(st.binary(max_size=80), min_size=1, max_size=70), st.booleans(),
    st.sampled_from([Compression.NONE, Compression.NONE, Compression.GZIP, Compression.LZ4, Compression.ZSTD]),
    st.one_of(st.none(), st.integers(0, 1 << 40)))


@FUZZ
@given(batches, st.lists(st.tuples(st.integers(0, 1 << 20), st.integers(0, 255)), min_size=1, max_size=4),
       st.booleans())
def test_mutated_valid_batches(raw: bytes, edits: list[tuple[int, int]], fix_crc: bool) -> None:
    data = bytearray(raw)
    for position, value in edits:
        data[position % len(data)] = value
    exercise(_restamp(data) if fix_crc else bytes(data))


@FUZZ
@given(batches, st.integers(0, 1 << 20), st.binary(max_size=12))
def test_cut_and_extended_batches(raw: bytes, cut: int, extra: bytes) -> None:
    data = bytearray(raw[:HEADER_SIZE + cut % (len(raw) - HEADER_SIZE + 1)] + extra)
    exercise(_restamp(data))
    exercise(bytes(data))
