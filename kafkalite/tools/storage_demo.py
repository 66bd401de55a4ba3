"""A short demonstration of the storage engine on a demo log (used by the quick start).

Writes three batches (uncompressed, lz4, gzip) into ``<dir>/demo-0``, reads them back through
the offset index, looks one up by timestamp, and prints the segment as the dump tool does.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

from kafkalite.config import LogConfig
from kafkalite.record.batch import build_batch, decode_all
from kafkalite.record.codec import Compression
from kafkalite.storage.manager import LogManager
from kafkalite.tools import dump_log


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="kafkalite-storage-demo")
    parser.add_argument("--dir", default="var/demo-logs", help="log directory for the demo (recreated)")
    arguments = parser.parse_args(argv)
    directory = Path(arguments.dir)
    shutil.rmtree(directory, ignore_errors=True)
    manager = LogManager([directory], LogConfig())
    manager.start()
    partition_log = manager.get_or_create("demo", 0)
    now = int(time.time() * 1000)
    for number, codec in enumerate((Compression.NONE, Compression.LZ4, Compression.GZIP)):
        values = [f"order {number * 3 + index}: {index + 1} x widget".encode() for index in range(3)]
        keys = [f"customer-{index}".encode() for index in range(3)]
        info = partition_log.append_as_leader(
            build_batch(values, keys=keys, timestamps=now + number * 1000, compression=codec), leader_epoch=0)
        print(f"appended {info.record_count} records ({codec.name.lower()}) at offsets "
              f"{info.first_offset}..{info.last_offset}")
    partition_log.update_high_watermark(partition_log.log_end_offset)
    print(f"log start {partition_log.log_start_offset}, log end {partition_log.log_end_offset}")
    for record in decode_all(partition_log.read(4, 1 << 20).records):
        if record.offset >= 4:
            print(f"read offset {record.offset}: key={record.key!r} value={record.value!r}")
    found = partition_log.offset_for_timestamp(now + 2000)
    print(f"first offset at or after the third batch's timestamp: {found[0] if found else None}")
    manager.shutdown()
    segment = directory / "demo-0" / "00000000000000000000.log"
    print(f"\n$ scripts/kafkalite-dump-log.sh --files {segment} --print-data-log")
    return dump_log.main(["--files", str(segment), "--print-data-log"])


if __name__ == "__main__":
    sys.exit(main())
