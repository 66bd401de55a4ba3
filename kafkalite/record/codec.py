"""Compression codecs of the Kafka v2 record batch: none, gzip, snappy, lz4 (Kafka's frame), zstd.

This module owns the codec ids (attribute bits 0–2) and is the only importer of ``lz4``,
``cramjam`` and ``zstandard``. Every decompression is bounded by ``max_output`` bytes so that a hostile or
damaged batch can never make us allocate without limit; exceeding it raises
:class:`~kafkalite.errors.CorruptRecordError`.

LZ4 is written exactly as Kafka's Java client writes it: an LZ4 frame with FLG=0x60
(version 01, independent blocks, no block or content checksum, no content size) and BD=0x40
(64 KiB blocks).

Snappy is written as Kafka's Java client writes it (snappy-java's ``SnappyOutputStream``): the
xerial framing — the 8-byte magic ``\x82SNAPPY\x00``, version 1, compatible version 1, then
blocks of at most 32 KiB of input, each a big-endian int32 length and a raw snappy block.
Decoding accepts that framing and a bare raw snappy block (what some non-Java producers
write), and reads each block's declared length before inflating it.

Thread-safety: pure functions, safe from any thread.
"""

from __future__ import annotations

import struct
import zlib
from enum import IntEnum

import cramjam
import lz4.frame

from kafkalite.errors import CorruptRecordError, UnsupportedCodecError

try:  # zstd support is optional: present when the `zstandard` package is installed
    import zstandard
    _HAVE_ZSTD = True
except ImportError:  # pragma: no cover - exercised only on installs without zstandard
    _HAVE_ZSTD = False


class Compression(IntEnum):
    """Compression codec ids as stored in attribute bits 0–2."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4

    @classmethod
    def from_name(cls, name: str | None) -> Compression:
        """Map a Kafka compression.type name (``none``, ``gzip``, ``lz4``, ``zstd``) to its id."""
        if name is None:
            return cls.NONE
        try:
            return cls[name.strip().upper()]
        except KeyError:
            raise UnsupportedCodecError(f"unknown compression type {name!r}") from None


_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = struct.Struct(">8sii")
_XERIAL_VERSION = 1
_XERIAL_BLOCK = 32 * 1024  # snappy-java's default block size, as Kafka's producer uses it
_INT32 = struct.Struct(">i")

COMPRESSION_MASK = 0x07
_KNOWN_CODECS = frozenset(int(codec) for codec in Compression)
DEFAULT_MAX_DECOMPRESSED_BYTES = 256 * 1024 * 1024


def has_codec(codec: int) -> bool:
    """True when this installation can encode and decode ``codec``."""
    if codec == Compression.ZSTD:
        return _HAVE_ZSTD
    return codec in (Compression.NONE, Compression.GZIP, Compression.SNAPPY, Compression.LZ4)


def compress(codec: int, data: bytes) -> bytes:
    """Compress ``data`` with ``codec`` exactly as Kafka producers frame it."""
    if codec == Compression.NONE:
        return data
    if codec == Compression.LZ4:
        compressed: bytes = lz4.frame.compress(
            data,
            block_size=lz4.frame.BLOCKSIZE_MAX64KB,
            block_linked=False,
            content_checksum=False,
            store_size=False,
        )
        return compressed
    if codec == Compression.GZIP:
        compressor = zlib.compressobj(6, zlib.DEFLATED, 31)
        return compressor.compress(data) + compressor.flush()
    if codec == Compression.SNAPPY:
        return _snappy_xerial(data)
    if codec == Compression.ZSTD and _HAVE_ZSTD:
        return zstandard.ZstdCompressor(level=3).compress(data)
    raise UnsupportedCodecError(f"compression codec {codec} is not supported by this installation")


def decompress(codec: int, data: bytes | memoryview, max_output: int = DEFAULT_MAX_DECOMPRESSED_BYTES) -> bytes:
    """Decompress ``data``; damage or output beyond ``max_output`` raises CorruptRecordError."""
    if codec == Compression.NONE:
        return bytes(data)
    if codec not in _KNOWN_CODECS:  # ids 5-7 name no codec: the batch is damaged (Kafka: CORRUPT_MESSAGE)
        raise CorruptRecordError(f"unknown compression codec id {codec}")
    try:
        if codec == Compression.LZ4:
            decompressor = lz4.frame.LZ4FrameDecompressor()
            output: bytes = decompressor.decompress(bytes(data), max_length=max_output)
            if not decompressor.eof:
                if len(output) >= max_output:
                    raise CorruptRecordError(f"lz4 payload decompresses beyond {max_output} bytes")
                raise CorruptRecordError("lz4 frame is truncated")
            return output
        if codec == Compression.SNAPPY:
            return _snappy_decompress(bytes(data), max_output)
        if codec == Compression.GZIP:
            inflater = zlib.decompressobj(47)
            output = inflater.decompress(bytes(data), max_output)
            if inflater.unconsumed_tail:
                raise CorruptRecordError(f"gzip payload decompresses beyond {max_output} bytes")
            if not inflater.eof:
                raise CorruptRecordError("gzip stream is truncated")
            return output
        if codec == Compression.ZSTD and _HAVE_ZSTD:
            reader = zstandard.ZstdDecompressor().stream_reader(bytes(data))
            output = reader.read(max_output + 1)
            if len(output) > max_output:
                raise CorruptRecordError(f"zstd payload decompresses beyond {max_output} bytes")
            return output
    except CorruptRecordError:
        raise
    except (RuntimeError, zlib.error, ValueError, OSError) as exc:
        raise CorruptRecordError(f"cannot decompress {Compression(codec).name} payload: {exc}") from exc
    except Exception as exc:  # zstandard.ZstdError and other codec-library errors
        raise CorruptRecordError(f"cannot decompress codec {codec} payload: {exc}") from exc
    raise UnsupportedCodecError(f"compression codec {codec} is not supported by this installation")


def _snappy_xerial(data: bytes) -> bytes:
    """``data`` in snappy-java's stream framing, block by block as ``SnappyOutputStream`` writes."""
    pieces = [_XERIAL_HEADER.pack(_XERIAL_MAGIC, _XERIAL_VERSION, _XERIAL_VERSION)]
    view = memoryview(data)
    for start in range(0, len(data), _XERIAL_BLOCK):
        block = bytes(cramjam.snappy.compress_raw(view[start:start + _XERIAL_BLOCK]))
        pieces.append(_INT32.pack(len(block)))
        pieces.append(block)
    return b"".join(pieces)


def _snappy_block(block: bytes | memoryview, budget: int) -> bytes:
    """One raw snappy block, refused before inflating when it declares more than ``budget`` bytes."""
    declared = cramjam.snappy.decompress_raw_len(block)
    if declared > budget:
        raise CorruptRecordError(f"snappy payload decompresses beyond the limit ({declared} > {budget} bytes left)")
    return bytes(cramjam.snappy.decompress_raw(block))


def _snappy_decompress(data: bytes, max_output: int) -> bytes:
    """A Kafka snappy payload: xerial-framed (Java clients) or one raw snappy block."""
    if not data.startswith(_XERIAL_MAGIC):
        return _snappy_block(data, max_output)
    if len(data) < _XERIAL_HEADER.size:
        raise CorruptRecordError("snappy xerial header is truncated")
    view = memoryview(data)
    position = _XERIAL_HEADER.size
    output: list[bytes] = []
    produced = 0
    while position < len(data):
        if position + _INT32.size > len(data):
            raise CorruptRecordError("snappy xerial block length is truncated")
        (size,) = _INT32.unpack_from(data, position)
        position += _INT32.size
        if size < 0 or position + size > len(data):
            raise CorruptRecordError(f"snappy xerial block of {size} bytes overruns the payload")
        block = _snappy_block(view[position:position + size], max_output - produced)
        position += size
        produced += len(block)
        output.append(block)
    return b"".join(output)
