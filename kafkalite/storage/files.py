"""All file naming of the log: segment files, transient suffixes, partition directories.

Segment files share a name, the segment's base offset zero-padded to 20 digits:
``00000000000000000000.log`` (batches back to back), ``.index`` (sparse offset index) and
``.timeindex`` (sparse time index), and ``.txnindex`` (aborted transactions, only when the
segment holds an abort marker). Multi-step changes are made crash-safe by renames through
suffixes appended to those names: ``.cleaned`` (compaction output being written), ``.swap``
(compaction output ready to replace its sources) and ``.deleted`` (awaiting unlink).

Thread-safety: pure functions, safe from any thread.
"""

from __future__ import annotations

import errno
import os
import re
from pathlib import Path

from kafkalite.topics import has_legal_characters

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
TXN_INDEX_SUFFIX = ".txnindex"
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
DELETED_SUFFIX = ".deleted"
DELETE_DIR_SUFFIX = "-delete"

LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
REPLICATION_CHECKPOINT = "replication-offset-checkpoint"
LOG_START_CHECKPOINT = "log-start-offset-checkpoint"
CLEANER_CHECKPOINT = "cleaner-offset-checkpoint"
CLEAN_SHUTDOWN_MARKER = ".kafkalite_cleanshutdown"
META_PROPERTIES = "meta.properties"

SEGMENT_FILE_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)

# I/O errors that pass by themselves (space comes back, files are closed): the log directory stays
# online. EMFILE and ENFILE are the process's or the system's open-files limit at a segment roll,
# not a fault of the disk.
TRANSIENT_IO_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EMFILE, errno.ENFILE})

_SEGMENT_NAME = re.compile(r"^(\d{20})(\.log|\.index|\.timeindex|\.txnindex)((?:\.cleaned|\.swap|\.deleted)?)$")


def offset_file_stem(base_offset: int) -> str:
    """The 20-digit zero-padded file stem of a segment."""
    return f"{base_offset:020d}"


def segment_path(directory: Path, base_offset: int, suffix: str, transient: str = "") -> Path:
    return directory / f"{offset_file_stem(base_offset)}{suffix}{transient}"


def parse_segment_file(name: str) -> tuple[int, str, str] | None:
    """(base offset, kind suffix, transient suffix) of a segment file name, or None."""
    match = _SEGMENT_NAME.match(name)
    if match is None:
        return None
    return int(match.group(1)), match.group(2), match.group(3)


def partition_dir_name(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"


def parse_partition_dir(name: str) -> tuple[str, int] | None:
    """(topic, partition) of a partition directory name, or None for anything else."""
    if name.endswith(DELETE_DIR_SUFFIX) or "-" not in name:
        return None
    topic, _, partition_text = name.rpartition("-")
    if not partition_text.isdigit() or not has_legal_characters(topic):
        return None
    return topic, int(partition_text)


def fsync_path(path: Path) -> None:
    """fsync a file or directory through a descriptor opened for it alone."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_directory(directory: Path) -> None:
    """Make renames and creations inside ``directory`` durable."""
    fsync_path(directory)


def is_transient_io_error(exc: OSError) -> bool:
    """True for a full disk or quota, or the open-files limit (the write may succeed later);
    False for EIO, EROFS and every other I/O error, which take a log directory offline."""
    return exc.errno in TRANSIENT_IO_ERRNOS
