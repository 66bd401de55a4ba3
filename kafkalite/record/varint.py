"""Kafka's varints (zigzag + LEB128), used by the record format for varint and varlong fields.

Concurrency: pure functions over a table computed at import; safe from any thread.
"""

from __future__ import annotations

from kafkalite.errors import CorruptRecordError

__all__ = ["SMALL_VARINT_LIMIT", "VARINTS", "decode_varint", "encode_varint", "varint"]


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


SMALL_VARINT_LIMIT = 1 << 16
# Zigzag encodings of 0 .. 65535 (non-negative values only), computed once.
VARINTS: tuple[bytes, ...] = tuple(encode_varint(i) for i in range(SMALL_VARINT_LIMIT))


def varint(value: int) -> bytes:
    """:func:`encode_varint` of ``value``, from a table for 0 .. 65535 (the common sizes and deltas)."""
    if 0 <= value < SMALL_VARINT_LIMIT:
        return VARINTS[value]
    return encode_varint(value)
