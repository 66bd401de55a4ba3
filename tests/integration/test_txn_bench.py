"""The benchmark suite's transactions scenario (P7): kafkalite's producer in transactions of 100
and of 10,000 records, printed beside the same producer idempotent, on 3 brokers."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support.bench import run_quick_scenario

pytestmark = pytest.mark.integration


@pytest.mark.slow
def test_benchmark_suite_quick_p7_prints_transactional_beside_idempotent(tmp_path: Path) -> None:
    result = run_quick_scenario("P7", tmp_path)
    rows = result.rows
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
    assert "P7 transactional send(), 10,000 records per transaction" in result.docs
