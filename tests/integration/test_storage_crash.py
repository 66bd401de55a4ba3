"""Crash safety of the storage engine with a real writer process killed by SIGKILL.

The writer appends large batches as fast as it can; it is killed at random moments, many
times, each time reopening the same directory. After every kill the log must open
consistently (indexes rebuilt, torn tail cut), every append the writer reported complete must
be readable, and nothing invalid may be readable.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kafkalite.config import LogConfig
from kafkalite.record.batch import iter_batches
from kafkalite.storage import files
from kafkalite.storage.manager import LogManager

ROOT = Path(__file__).resolve().parents[2]


def _run_and_kill(directory: Path, delay: float, batch_records: int, value_bytes: int) -> int:
    """Start a writer, SIGKILL it after ``delay`` s; returns the last log end it reported."""
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.support.log_writer", str(directory), str(batch_records), str(value_bytes)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        first = process.stdout.readline()  # the writer is running and has appended once
        assert first, process.stderr.read() if process.stderr else "writer died"
        time.sleep(delay)  # the behaviour: the kill lands at a varying point of the writes
        process.send_signal(signal.SIGKILL)
        output, _ = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    reported = [int(line) for line in (first + output).split("\n") if line.strip().isdigit()]
    return reported[-1]


def _verify(directory: Path) -> int:
    manager = LogManager([directory], LogConfig())
    manager.start()
    partition_log = manager.get("crash", 0)
    assert partition_log is not None
    partition_log.update_high_watermark(partition_log.log_end_offset)
    expected = 0
    for segment in partition_log.segments:
        assert len(segment.index) * 8 == segment.index.path.stat().st_size
        for _position, batch in segment.scan(validate=True):
            assert batch.base_offset == expected
            for record in batch.records():
                assert record.offset == expected
                assert record.value is not None and int(record.value[:12]) == expected
                expected += 1
    assert expected == partition_log.log_end_offset
    # Every offset is reachable through the index path too.
    for probe in random.Random(expected).sample(range(expected), min(50, expected)):
        data = partition_log.read(probe, 1).records
        batch = next(iter_batches(data, validate=True))
        assert batch.base_offset <= probe <= batch.last_offset
    manager.shutdown()
    (directory / files.CLEAN_SHUTDOWN_MARKER).unlink()  # the next writer must recover again
    return expected


@pytest.mark.integration
def test_sigkilled_writer_never_leaves_an_inconsistent_log(tmp_path: Path) -> None:
    directory = tmp_path / "logs"
    generator = random.Random(20261121)
    last_end = 0
    kills = 25
    for kill in range(kills):
        reported = _run_and_kill(directory, generator.uniform(0.05, 0.4), batch_records=generator.choice([50, 2000]),
                                 value_bytes=generator.choice([100, 1000]))
        recovered = _verify(directory)
        assert recovered >= reported, f"kill {kill}: appends up to {reported} were reported, only {recovered} survive"
        assert recovered >= last_end
        last_end = recovered
    assert last_end > 0


@pytest.mark.integration
def test_torn_writes_at_random_positions_are_cut_cleanly(tmp_path: Path) -> None:
    """Simulates power loss: the tail of the active segment is cut or scribbled on."""
    directory = tmp_path / "logs"
    _run_and_kill(directory, 0.3, batch_records=200, value_bytes=100)
    generator = random.Random(7)
    for round_number in range(10):
        partition_dir = directory / "crash-0"
        active = sorted(partition_dir.glob("*.log"))[-1]
        size = active.stat().st_size
        if size < 128:  # earlier rounds cut the tail segment down to (almost) nothing
            break
        with open(active, "r+b") as handle:
            if round_number % 2:
                handle.truncate(generator.randrange(max(1, size // 2), size))
            else:
                position = generator.randrange(max(1, size - 4096), size)
                handle.seek(position)
                handle.write(os.urandom(min(64, size - position)))
        before = size
        recovered_end = _verify(directory)
        assert active.stat().st_size <= before
        assert recovered_end >= 0
