"""A process that appends to a partition log until it is killed (used by crash tests).

Usage: python -m tests.support.log_writer DIRECTORY BATCH_RECORDS VALUE_BYTES
Each record's value starts with its own offset (decimal, 12 digits) so a reader can check
every offset it sees. After each completed append it prints the new log end offset, so the
parent knows which appends finished before the kill.
"""

from __future__ import annotations

import sys
from pathlib import Path

from kafkalite.config import LogConfig
from kafkalite.record.batch import build_batch
from kafkalite.record.codec import Compression
from kafkalite.storage.manager import LogManager


def main() -> None:
    directory = Path(sys.argv[1])
    batch_records = int(sys.argv[2])
    value_bytes = int(sys.argv[3])
    config = LogConfig().with_overrides({"segment.bytes": str(2 * 1024 * 1024), "index.interval.bytes": "8192"})
    manager = LogManager([directory], config)
    manager.start()
    partition_log = manager.get_or_create("crash", 0)
    padding = b"p" * max(0, value_bytes - 12)
    round_number = 0
    while True:
        start = partition_log.log_end_offset
        values = [b"%012d" % offset + padding for offset in range(start, start + batch_records)]
        codec = Compression.LZ4 if round_number % 3 == 0 else Compression.NONE
        partition_log.append_as_leader(build_batch(values, timestamps=1_700_000_000_000 + start, compression=codec),
                                       leader_epoch=round_number // 50)
        if round_number % 20 == 0:
            manager.checkpoint_all()
        round_number += 1
        sys.stdout.write(f"{partition_log.log_end_offset}\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
