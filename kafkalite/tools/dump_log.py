"""``kafkalite-dump-log.sh``: print the batches (and records) of segment files, like Kafka's
``kafka-dump-log.sh``.

Reads ``.log`` files batch by batch, checking each CRC, and ``.index`` / ``.timeindex`` /
``.txnindex`` files entry by entry. Transactional batches say ``isTransactional: true``; the
record of a control batch is printed as its marker (``endTxnMarker: COMMIT coordinatorEpoch: 3``).
Damage is reported with its byte position and a Kafka error name, the tool
keeps going where the batch length still makes sense, never crashes on bad bytes, and exits 1
when it found any damage (2 for bad arguments).
"""

from __future__ import annotations

import argparse
import os
import struct
import sys
from pathlib import Path
from typing import TextIO

from kafkalite.errors import CorruptRecordError, TruncatedBatchError, UnsupportedCodecError
from kafkalite.record.batch import LOG_OVERHEAD, MAX_BATCH_SIZE, MIN_BATCH_LENGTH, RecordBatch
from kafkalite.record.codec import Compression
from kafkalite.record.control import read_marker
from kafkalite.storage import files
from kafkalite.storage.txnindex import ENTRY_SIZE, TXN_INDEX_VERSION, AbortedTxn
from kafkalite.tools.common import ToolArgumentParser, run_tool

_CHUNK = 1 << 20


def _codec_name(codec: int) -> str:
    try:
        return Compression(codec).name.lower()
    except ValueError:
        return f"unknown({codec})"


def _render(data: bytes | None) -> str:
    if data is None:
        return "null"
    return data.decode("utf-8", errors="backslashreplace")


def dump_log_file(path: Path, out: TextIO, print_data: bool, deep: bool) -> int:
    """Print every batch of a ``.log`` file; returns the number of damaged places found."""
    damage = 0
    size = path.stat().st_size
    parsed = files.parse_segment_file(path.name)
    out.write(f"Dumping {path}\n")
    if parsed is not None:
        out.write(f"Log starting offset: {parsed[0]}\n")
    with open(path, "rb") as handle:
        fd = handle.fileno()
        position = 0
        while position < size:
            head = os.pread(fd, LOG_OVERHEAD, position)
            if len(head) < LOG_OVERHEAD:
                out.write(f"Found damaged batch at position {position}: TRUNCATED "
                          f"({size - position} trailing bytes, less than a batch header)\n")
                return damage + 1
            batch_length = struct.unpack_from(">i", head, 8)[0]
            if batch_length < MIN_BATCH_LENGTH or batch_length > MAX_BATCH_SIZE:
                out.write(f"Found damaged batch at position {position}: CORRUPT_MESSAGE "
                          f"(batch length {batch_length} is out of range; cannot continue)\n")
                return damage + 1
            buffer = os.pread(fd, batch_length + LOG_OVERHEAD, position)
            try:
                batch = RecordBatch(buffer, 0)
            except TruncatedBatchError as exc:
                out.write(f"Found damaged batch at position {position}: TRUNCATED ({exc.detail})\n")
                return damage + 1
            except CorruptRecordError as exc:
                out.write(f"Found damaged batch at position {position}: CORRUPT_MESSAGE ({exc.detail})\n")
                damage += 1
                position += batch_length + LOG_OVERHEAD
                continue
            crc_valid = batch.is_valid()
            if not crc_valid:
                damage += 1
            timestamp_name = "LogAppendTime" if batch.timestamp_type else "CreateTime"
            out.write(
                f"baseOffset: {batch.base_offset} lastOffset: {batch.last_offset} count: {batch.record_count} "
                f"baseSequence: {batch.base_sequence} lastSequence: {batch.last_sequence} "
                f"producerId: {batch.producer_id} producerEpoch: {batch.producer_epoch} "
                f"partitionLeaderEpoch: {batch.partition_leader_epoch} "
                f"isTransactional: {str(batch.is_transactional).lower()} "
                f"isControl: {str(batch.is_control).lower()} position: {position} "
                f"{timestamp_name}: {batch.max_timestamp} size: {batch.size} magic: {batch.magic} "
                f"compresscodec: {_codec_name(batch.compression)} crc: {batch.crc} "
                f"isvalid: {str(crc_valid).lower()}\n")
            if not crc_valid:
                out.write(f"Found damaged batch at position {position}: CORRUPT_MESSAGE "
                          f"(stored CRC {batch.crc:#010x} != computed {batch.compute_crc():#010x})\n")
            if (deep or print_data) and crc_valid:
                try:
                    records = batch.records()
                except CorruptRecordError as exc:
                    out.write(f"Found damaged records in batch at position {position}: CORRUPT_MESSAGE "
                              f"({exc.detail})\n")
                    damage += 1
                    records = []
                except UnsupportedCodecError as exc:
                    out.write(f"Cannot read the records of the batch at position {position}: {exc}\n")
                    damage += 1
                    records = []
                for index, record in enumerate(records):
                    sequence = (-1 if batch.base_sequence < 0
                                else batch.base_sequence + (record.offset - batch.base_offset))
                    line = (f"| offset: {record.offset} {timestamp_name}: {record.timestamp} "
                            f"keySize: {-1 if record.key is None else len(record.key)} "
                            f"valueSize: {-1 if record.value is None else len(record.value)} "
                            f"sequence: {sequence} headerKeys: [{','.join(name for name, _ in record.headers)}]")
                    if batch.is_control:
                        line += " " + _control_text(record.key, record.value)
                    elif print_data:
                        line += f" key: {_render(record.key)} payload: {_render(record.value)}"
                        if record.headers:
                            rendered = ",".join(f"{name}:{_render(value)}" for name, value in record.headers)
                            line += f" headers: {rendered}"
                    out.write(line + "\n")
                    del index
            position += batch.size
    return damage


def _control_text(key: bytes | None, value: bytes | None) -> str:
    """A control record as Kafka's dump tool prints it (its marker), or what is wrong with it."""
    if key is None:
        return "controlType: unknown (null key)"
    try:
        marker = read_marker(key, value)
    except CorruptRecordError as exc:
        return f"controlType: unknown ({exc.detail})"
    return f"endTxnMarker: {marker.name} coordinatorEpoch: {marker.coordinator_epoch}"


def dump_txn_index_file(path: Path, out: TextIO) -> int:
    """Print the entries of a ``.txnindex`` file (34 bytes each)."""
    data = path.read_bytes()
    out.write(f"Dumping {path}\n")
    whole = len(data) - len(data) % ENTRY_SIZE
    damage = 0
    for position in range(0, whole, ENTRY_SIZE):
        try:
            entry = AbortedTxn.decode(data, position)
        except CorruptRecordError as exc:
            out.write(f"Found damaged entry at position {position}: {exc.detail}\n")
            damage += 1
            continue
        out.write(f"version: {TXN_INDEX_VERSION} producerId: {entry.producer_id} firstOffset: {entry.first_offset} "
                  f"lastOffset: {entry.last_offset} lastStableOffset: {entry.last_stable_offset}\n")
    if whole != len(data):
        out.write(f"Found damaged index: {len(data) - whole} trailing bytes are not a whole entry\n")
        damage += 1
    return damage


def dump_index_file(path: Path, out: TextIO) -> int:
    """Print the entries of a ``.index`` or ``.timeindex`` file."""
    parsed = files.parse_segment_file(path.name)
    base_offset = parsed[0] if parsed else 0
    time_index = path.name.endswith(files.TIME_INDEX_SUFFIX) or files.TIME_INDEX_SUFFIX + "." in path.name
    entry = struct.Struct(">qi" if time_index else ">ii")
    data = path.read_bytes()
    out.write(f"Dumping {path}\n")
    damage = 0
    whole = len(data) - len(data) % entry.size
    for fields in entry.iter_unpack(data[:whole]):
        if time_index:
            out.write(f"timestamp: {fields[0]} offset: {base_offset + fields[1]}\n")
        else:
            out.write(f"offset: {base_offset + fields[0]} position: {fields[1]}\n")
    if whole != len(data):
        out.write(f"Found damaged index: {len(data) - whole} trailing bytes are not a whole entry\n")
        damage += 1
    return damage


def build_parser() -> argparse.ArgumentParser:
    parser = ToolArgumentParser(
        prog="kafkalite-dump-log.sh",
        description="Print the record batches of log segment files (and entries of index files).")
    parser.add_argument("--files", required=True,
                        help="REQUIRED: comma-separated list of .log, .index, .timeindex or .txnindex files to dump")
    parser.add_argument("--print-data-log", action="store_true",
                        help="print each record's key, value and headers (implies --deep-iteration)")
    parser.add_argument("--deep-iteration", action="store_true",
                        help="print every record, not only each batch")
    return parser


def main(argv: list[str] | None = None, out: TextIO | None = None) -> int:
    parser = build_parser()
    arguments = parser.parse_args(argv)
    output = out or sys.stdout
    damage = 0
    for name in [part.strip() for part in arguments.files.split(",") if part.strip()]:
        path = Path(name)
        if not path.is_file():
            print(f"Error: {path} is not a readable file", file=sys.stderr)
            damage += 1
            continue
        if path.name.endswith(files.LOG_SUFFIX) or ".log." in path.name:
            damage += dump_log_file(path, output, arguments.print_data_log, arguments.deep_iteration)
        elif files.TXN_INDEX_SUFFIX in path.name:
            damage += dump_txn_index_file(path, output)
        elif files.INDEX_SUFFIX in path.name or files.TIME_INDEX_SUFFIX in path.name:
            damage += dump_index_file(path, output)
        else:
            print(f"Error: {path} is not a .log, .index, .timeindex or .txnindex file", file=sys.stderr)
            damage += 1
    return 1 if damage else 0


if __name__ == "__main__":
    sys.exit(run_tool(main))
