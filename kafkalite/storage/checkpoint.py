"""Checkpoint files in Kafka's text format, written atomically.

Format: line 1 the version (``0``), line 2 the entry count, then one entry per line. Offset
checkpoints hold ``topic partition offset``; the leader-epoch checkpoint holds
``epoch startOffset``. A file is written to ``<name>.tmp``, fsynced, renamed over the old one
and the directory fsynced, so a crash leaves either the old or the new content.

A malformed checkpoint raises :class:`~kafkalite.errors.StorageError`; callers decide whether
to fall back (a missing recovery point means "recover everything"). A write that fails raises
the ``OSError`` after removing its temporary file; the previous checkpoint stays intact.
Thread-safety: each function touches one file; callers serialise writers of the same file.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path

from kafkalite.errors import StorageError
from kafkalite.storage.files import fsync_directory

VERSION = 0


def _write_lines(path: Path, lines: Iterable[str]) -> None:
    body = list(lines)
    text = f"{VERSION}\n{len(body)}\n" + "".join(line + "\n" for line in body)
    temporary = path.with_name(path.name + ".tmp")
    try:
        with open(temporary, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except OSError:
        temporary.unlink(missing_ok=True)  # a failed write (disk full) leaves the old file alone
        raise
    fsync_directory(path.parent)


def _read_lines(path: Path, fields: int) -> list[list[str]]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise StorageError(f"cannot read checkpoint {path}: {exc.strerror}") from exc
    lines = text.splitlines()
    if len(lines) < 2 or lines[0].strip() != str(VERSION) or not lines[1].strip().isdigit():
        raise StorageError(f"checkpoint {path} has a malformed header")
    count = int(lines[1])
    entries = [line.split() for line in lines[2:] if line.strip()]
    if len(entries) != count or any(len(entry) != fields for entry in entries):
        raise StorageError(f"checkpoint {path} promises {count} entries of {fields} fields")
    return entries


def write_offsets(path: Path, offsets: Mapping[tuple[str, int], int]) -> None:
    """Write ``{(topic, partition): offset}``."""
    _write_lines(path, (f"{topic} {partition} {offset}" for (topic, partition), offset in sorted(offsets.items())))


def read_offsets(path: Path) -> dict[tuple[str, int], int]:
    """Read ``{(topic, partition): offset}``; a missing file is empty."""
    result: dict[tuple[str, int], int] = {}
    for topic, partition, offset in _read_lines(path, 3):
        try:
            result[(topic, int(partition))] = int(offset)
        except ValueError:
            raise StorageError(f"checkpoint {path} has a non-numeric entry for {topic}") from None
    return result


def write_epochs(path: Path, entries: Iterable[tuple[int, int]]) -> None:
    """Write ``(epoch, start offset)`` pairs."""
    _write_lines(path, (f"{epoch} {start}" for epoch, start in entries))


def read_epochs(path: Path) -> list[tuple[int, int]]:
    result = []
    for epoch, start in _read_lines(path, 2):
        try:
            result.append((int(epoch), int(start)))
        except ValueError:
            raise StorageError(f"checkpoint {path} has a non-numeric entry") from None
    return result
