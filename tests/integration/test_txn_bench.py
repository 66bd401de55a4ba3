"""The benchmark suite's transactions scenario (P7): kafkalite's producer in transactions of 100
and of 10,000 records, printed beside the same producer idempotent, on 3 brokers."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cluster import ROOT

pytestmark = pytest.mark.integration


@pytest.mark.slow
def test_benchmark_suite_quick_p7_prints_transactional_beside_idempotent(tmp_path: Path) -> None:
    docs = tmp_path / "performance.md"
    result = subprocess.run([sys.executable, "-m", "kafkalite.bench.suite", "--quick", "--only", "P7", "--docs",
                             str(docs)], cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert "Traceback" not in result.stderr, result.stderr
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert lines[:2] == ["| scenario | figure | target | met/missed |", "| --- | --- | --- | --- |"], result.stdout
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in lines[2:]]
    assert [row[0].split(",")[0] for row in rows] == [
        "P7 idempotent send()", "P7 transactional send()", "P7 transactional send()"], result.stdout
    assert "100 records per transaction" in rows[1][0] and "10,000 records per transaction" in rows[2][0]
    idempotent = re.fullmatch(r"([\d,]+) records/s", rows[0][1])
    assert idempotent is not None and int(idempotent[1].replace(",", "")) > 0, rows[0]
    for row in rows[1:]:  # a rate and its ratio to the idempotent run; the verdict depends on the load
        match = re.fullmatch(r"([\d,]+) records/s \((\d+\.\d\d)x idempotent\)", row[1])
        assert match is not None and int(match[1].replace(",", "")) > 0, row
        assert row[3] in ("met", "missed"), row
    assert rows[2][2] == ">= 0.8x idempotent"
    # every transaction committed: the tool's lines count them (300 k records: 3,000 and 30)
    counts = re.findall(r"txn produce transactional (\d+): (\d+) records in [\d.]+ s, \d+ records/s "
                        r"\((\d+) transactions\)", result.stderr)
    assert [(int(size), -(-int(records) // int(size)) == int(txns)) for size, records, txns in counts] == [
        (100, True), (10000, True)], result.stderr
    assert "P7 transactional send(), 10,000 records per transaction" in docs.read_text()
