"""Compression codecs of the Kafka v2 record batch: none, gzip, lz4 (Kafka's frame), zstd.

This module owns the codec ids (attribute bits 0–2) and is the only importer of ``lz4`` and
``zstandard``. Every decompression is bounded by ``max_output`` bytes so that a hostile or
damaged batch can never make us allocate without limit; exceeding it raises
:class:`~kafkalite.errors.CorruptRecordError`.

LZ4 is written exactly as Kafka's Java client writes it: an LZ4 frame with FLG=0x60
(version 01, independent blocks, no block or content checksum, no content size) and BD=0x40
(64 KiB blocks). Snappy (id 2) is recognised but not supported by this installation.

Thread-safety: pure functions, safe from any thread.
"""

from __future__ import annotations

import zlib
from enum import IntEnum

import lz4.frame

from kafkalite.errors import CorruptRecordError, UnsupportedCodecError

try:  # zstd support is optional: present when the `zstandard` package is installed
    import zstandard
except ImportError:  # pragma: no cover - exercised only on installs without zstandard
    zstandard = None


class Compression(IntEnum):
    """Compression codec ids as stored in attribute bits 0–2."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4

    @classmethod
    def from_name(cls, name: str | None) -> "Compression":
        """Map a Kafka compression.type name (``none``, ``gzip``, ``lz4``, ``zstd``) to its id."""
        if name is None:
            return cls.NONE
        try:
            return cls[name.strip().upper()]
        except KeyError:
            raise UnsupportedCodecError(f"unknown compression type {name!r}") from None


COMPRESSION_MASK = 0x07
DEFAULT_MAX_DECOMPRESSED_BYTES = 256 * 1024 * 1024


def has_codec(codec: int) -> bool:
    """True when this installation can encode and decode ``codec``."""
    if codec == Compression.ZSTD:
        return zstandard is not None
    return codec in (Compression.NONE, Compression.GZIP, Compression.LZ4)


def compress(codec: int, data: bytes) -> bytes:
    """Compress ``data`` with ``codec`` exactly as Kafka producers frame it."""
    if codec == Compression.NONE:
        return data
    if codec == Compression.LZ4:
        return lz4.frame.compress(
            data,
            block_size=lz4.frame.BLOCKSIZE_MAX64KB,
            block_linked=False,
            content_checksum=False,
            store_size=False,
        )
    if codec == Compression.GZIP:
        compressor = zlib.compressobj(6, zlib.DEFLATED, 31)
        return compressor.compress(data) + compressor.flush()
    if codec == Compression.ZSTD and zstandard is not None:
        return zstandard.ZstdCompressor(level=3).compress(data)
    raise UnsupportedCodecError(f"compression codec {codec} is not supported by this installation")


def decompress(codec: int, data: bytes | memoryview, max_output: int = DEFAULT_MAX_DECOMPRESSED_BYTES) -> bytes:
    """Decompress ``data``; damage or output beyond ``max_output`` raises CorruptRecordError."""
    if codec == Compression.NONE:
        return bytes(data)
    try:
        if codec == Compression.LZ4:
            decompressor = lz4.frame.LZ4FrameDecompressor()
            output = decompressor.decompress(bytes(data), max_length=max_output)
            if not decompressor.eof:
                if len(output) >= max_output:
                    raise CorruptRecordError(f"lz4 payload decompresses beyond {max_output} bytes")
                raise CorruptRecordError("lz4 frame is truncated")
            return output
        if codec == Compression.GZIP:
            inflater = zlib.decompressobj(47)
            output = inflater.decompress(bytes(data), max_output)
            if inflater.unconsumed_tail:
                raise CorruptRecordError(f"gzip payload decompresses beyond {max_output} bytes")
            if not inflater.eof:
                raise CorruptRecordError("gzip stream is truncated")
            return output
        if codec == Compression.ZSTD and zstandard is not None:
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
