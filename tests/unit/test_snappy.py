"""Snappy as Kafka writes it: snappy-java's xerial framing (Java clients) and raw blocks."""

from __future__ import annotations

import os
import struct

import cramjam
import pytest

from kafkalite.errors import CorruptRecordError
from kafkalite.record.batch import build_batch, decode_all
from kafkalite.record.codec import Compression, compress, decompress, has_codec


def xerial_blocks(payload: bytes) -> list[bytes]:
    assert payload[:16] == b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
    blocks, position = [], 16
    while position < len(payload):
        (size,) = struct.unpack_from(">i", payload, position)
        blocks.append(payload[position + 4:position + 4 + size])
        position += 4 + size
    assert position == len(payload)
    return blocks


def test_encodes_like_the_java_client_in_32_kib_blocks() -> None:
    assert has_codec(Compression.SNAPPY)
    data = os.urandom(70_000)
    blocks = xerial_blocks(compress(Compression.SNAPPY, data))
    inflated = [bytes(cramjam.snappy.decompress_raw(block)) for block in blocks]
    assert [len(block) for block in inflated] == [32 * 1024, 32 * 1024, 70_000 - 64 * 1024]
    assert b"".join(inflated) == data


def test_decodes_xerial_framing_and_raw_blocks() -> None:
    data = b"kafka " * 20_000
    assert decompress(Compression.SNAPPY, compress(Compression.SNAPPY, data)) == data
    assert decompress(Compression.SNAPPY, bytes(cramjam.snappy.compress_raw(data))) == data
    # A producer that writes one big xerial block (other block sizes) decodes too.
    single = bytes(cramjam.snappy.compress_raw(data))
    framed = b"\x82SNAPPY\x00" + struct.pack(">iii", 1, 1, len(single)) + single
    assert decompress(Compression.SNAPPY, framed) == data


@pytest.mark.parametrize("damage", ["truncated", "overrun", "garbage", "header"])
def test_damaged_snappy_is_a_corrupt_record(damage: str) -> None:
    payload = compress(Compression.SNAPPY, b"x" * 100_000)
    broken = {"truncated": payload[:-3], "overrun": payload[:16] + struct.pack(">i", 10 ** 6) + payload[20:],
              "garbage": b"\x00\xff" * 40, "header": payload[:12]}[damage]
    with pytest.raises(CorruptRecordError):
        decompress(Compression.SNAPPY, broken)


def test_decompression_is_bounded_before_inflating() -> None:
    payload = compress(Compression.SNAPPY, b"\0" * 1_000_000)
    with pytest.raises(CorruptRecordError, match="beyond"):
        decompress(Compression.SNAPPY, payload, max_output=100_000)
    with pytest.raises(CorruptRecordError, match="beyond"):
        decompress(Compression.SNAPPY, bytes(cramjam.snappy.compress_raw(b"\0" * 1_000_000)), max_output=100_000)


def test_snappy_batches_round_trip() -> None:
    values = [b"value-%d" % n for n in range(500)]
    batch = build_batch(values, keys=[b"k"] * 500, compression=Compression.SNAPPY,
                        headers=[[("h", b"1"), ("h", b"2")]] * 500)
    records = decode_all(bytes(batch))
    assert [record.value for record in records] == values
    assert tuple(records[0].headers) == (("h", b"1"), ("h", b"2"))


@pytest.mark.parametrize("codec", [5, 6, 7])
def test_codec_ids_that_name_no_codec_are_corrupt_records(codec: int) -> None:
    with pytest.raises(CorruptRecordError, match="unknown compression codec"):
        decompress(codec, b"payload")
