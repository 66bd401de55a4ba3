"""kafkalite-dump-log: batches, records, damage reports and exit codes."""

from __future__ import annotations

import io
import subprocess
from pathlib import Path

from kafkalite.record.batch import build_batch
from kafkalite.record.codec import Compression
from kafkalite.tools import dump_log
from tests.unit.test_log import open_log

ROOT = Path(__file__).resolve().parents[2]


def _segment(tmp_path: Path) -> Path:
    partition_log = open_log(tmp_path / "dump-0", index_interval_bytes=10)
    partition_log.append_as_leader(build_batch([b"hello", b"world"], keys=[b"k1", None], timestamps=[5, 6],
                                               headers=[[("trace", b"abc")], []]), leader_epoch=3)
    partition_log.append_as_leader(build_batch([b"z" * 50] * 3, timestamps=7, compression=Compression.LZ4),
                                   leader_epoch=3)
    partition_log.close()
    return tmp_path / "dump-0" / "00000000000000000000.log"


def run(argv: list[str]) -> tuple[int, str]:
    out = io.StringIO()
    code = dump_log.main(argv, out)
    return code, out.getvalue()


def test_prints_batches_and_records(tmp_path: Path) -> None:
    segment = _segment(tmp_path)
    code, text = run(["--files", str(segment)])
    assert code == 0
    assert "baseOffset: 0 lastOffset: 1 count: 2" in text
    assert "baseOffset: 2 lastOffset: 4 count: 3" in text and "compresscodec: lz4" in text
    assert "partitionLeaderEpoch: 3" in text and "position: 0" in text and "isvalid: true" in text
    assert "| offset" not in text
    code, text = run(["--files", str(segment), "--print-data-log"])
    assert "| offset: 0 CreateTime: 5 keySize: 2 valueSize: 5" in text
    assert "key: k1 payload: hello headers: trace:abc" in text
    assert ("| offset: 1 CreateTime: 6 keySize: -1 valueSize: 5 sequence: -1 headerKeys: [] key: null "
            "payload: world") in text
    assert text.count("| offset:") == 5


def test_reports_damage_with_position_and_exits_non_zero(tmp_path: Path) -> None:
    segment = _segment(tmp_path)
    data = bytearray(segment.read_bytes())
    first_size = int.from_bytes(data[8:12], "big") + 12
    data[30] ^= 0xFF  # inside the first batch's CRC range
    segment.write_bytes(bytes(data) + b"\x00\x00\x00")
    code, text = run(["--files", str(segment), "--deep-iteration"])
    assert code == 1
    assert "Found damaged batch at position 0: CORRUPT_MESSAGE" in text
    assert "baseOffset: 2 lastOffset: 4 count: 3" in text  # it kept going past the bad CRC
    assert f"position: {first_size}" in text
    assert "TRUNCATED" in text


def test_garbage_file_never_crashes(tmp_path: Path) -> None:
    junk = tmp_path / "00000000000000000000.log"
    junk.write_bytes(bytes(range(256)) * 3)
    code, text = run(["--files", str(junk)])
    assert code == 1 and "Found damaged batch at position 0" in text


def test_index_files_are_dumped(tmp_path: Path) -> None:
    _segment(tmp_path)
    code, text = run(["--files", str(tmp_path / "dump-0" / "00000000000000000000.index")])
    assert code == 0 and "offset: 2 position:" in text


def test_script_usage_errors(tmp_path: Path) -> None:
    script = ROOT / "scripts" / "kafkalite-dump-log.sh"
    result = subprocess.run([str(script)], capture_output=True, text=True)
    assert result.returncode == 2 and "Error: the following arguments are required: --files" in result.stderr
    assert "Traceback" not in result.stderr
    result = subprocess.run([str(script), "--files", str(tmp_path / "missing.log")], capture_output=True, text=True)
    assert result.returncode == 1 and "is not a readable file" in result.stderr
    segment = _segment(tmp_path)
    result = subprocess.run([str(script), "--files", str(segment), "--print-data-log"], capture_output=True, text=True)
    assert result.returncode == 0 and "payload: hello" in result.stdout
    help_text = subprocess.run([str(script), "--help"], capture_output=True, text=True).stdout
    assert "--print-data-log" in help_text and "--deep-iteration" in help_text
