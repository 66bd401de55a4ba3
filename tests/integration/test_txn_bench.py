"""The benchmark suite's transactions scenario (P7): kafkalite's producer in transactions of 100
and of 10,000 records, printed beside the same producer idempotent, on 3 brokers, in alternating
rounds whose median ratio is the row's."""

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
    # three alternating rounds, every transaction committed: the tool's lines count them (a third
    # of 30 k and of 300 k records per round: 100 and 10 transactions)
    counts = re.findall(r"txn round (\d)/3: transactional (\d+): (\d+) records in [\d.]+ s, \d+ records/s "
                        r"\((\d+) transactions\), (\d+\.\d\d)x the round's idempotent", result.stderr)
    assert [(int(number), int(size), -(-int(records) // int(size)) == int(txns))
            for number, size, records, txns, _ in counts] == [
        (1, 100, True), (1, 10000, True), (2, 100, True), (2, 10000, True), (3, 100, True), (3, 10000, True)], \
        result.stderr
    # the row's ratio is the median of the rounds' ratios at 10,000 records per transaction
    round_ratios = sorted(ratio for _, size, _, _, ratio in counts if size == "10000")
    assert rows[2][1].endswith(f"({round_ratios[1]}x idempotent)"), (rows[2], round_ratios)
    assert "P7 transactional send(), 10,000 records per transaction" in result.docs
