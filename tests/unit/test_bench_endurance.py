"""P11 (kafkalite/bench/endurance.py) and P12's end-to-end row: the latency histogram against
exact percentiles, the RSS slope, and the suite's rows judged from the lines the tools print
(each target fed lines that meet it and lines that miss it)."""

from __future__ import annotations

import random
from types import SimpleNamespace
from typing import Any

import pytest

from kafkalite.bench import suite
from kafkalite.bench.endurance import Minute, slope_per_ten_minutes, summary
from kafkalite.bench.paced_acks import LatencyHistogram, PacedRun


def test_histogram_percentiles_are_within_one_percent_of_the_exact_ones() -> None:
    generator = random.Random(7)
    values = [generator.lognormvariate(1.5, 0.8) for _ in range(20_000)] + [0.001, 250_000.0]
    histogram = LatencyHistogram()
    for value in values:
        histogram.add(value)
    ordered = sorted(values)
    for fraction in (0.5, 0.9, 0.99, 0.999):
        exact = ordered[int(fraction * len(ordered))]
        assert exact <= histogram.percentile(fraction) <= exact * 1.0101, fraction
    assert histogram.count == len(values)
    assert LatencyHistogram().percentile(0.5) != LatencyHistogram().percentile(0.5)  # nan when empty


def test_histograms_merge_and_travel_as_bytes() -> None:
    first, second = LatencyHistogram(), LatencyHistogram()
    for value in (1.0, 2.0, 3.0):
        first.add(value)
    for value in (100.0, 200.0):
        second.add(value)
    merged = LatencyHistogram.from_bytes(first.to_bytes())
    merged.merge(LatencyHistogram.from_bytes(second.to_bytes()))
    assert merged.count == 5
    assert 200.0 <= merged.percentile(0.99) <= 202.1
    assert 2.0 <= merged.percentile(0.3) <= 2.03


def test_slope_is_per_ten_minutes_and_needs_two_samples() -> None:
    assert slope_per_ten_minutes([(6, 100.0), (7, 100.1), (8, 100.2)]) == pytest.approx(1.0)
    assert slope_per_ten_minutes([(6, 100.0), (8, 99.0)]) == pytest.approx(-5.0)
    assert slope_per_ten_minutes([(6, 100.0)]) != slope_per_ten_minutes([(6, 100.0)])


def _histogram(*values: float) -> LatencyHistogram:
    histogram = LatencyHistogram()
    for value in values:
        histogram.add(value)
    return histogram


def _endurance_line(rss_growth_per_minute: float = 0.02, lag: int = 900, last_p99: float = 12.0,
                    read: int | None = None, failed: int = 0) -> str:
    minutes = []
    for index in range(1, 11):
        minute = Minute(index, index * 1_200_000, index * 1_200_000, lag if index == 5 else 300,
                        {broker: 80 + broker + index * rss_growth_per_minute for broker in (1, 2, 3)}, 120.0,
                        {1: 45.0, 2: 46.0, 3: 44.0})
        minute.acks = _histogram(*([5.0] * 98 + [last_p99 if index == 10 else 10.0] * 2))
        minutes.append(minute)
    end_to_end = {bucket: _histogram(*([6.0] * 98 + [11.0] * 2)) for bucket in range(10)}
    acked = 12_000_000
    return summary(minutes, end_to_end, 5, 20_000, 12, 3, acked, acked if read is None else read, failed)


def _endurance_rows(lines: list[str]) -> dict[str, str]:
    rows: list[suite.Row] = []
    runner = SimpleNamespace(deadline=0.0, reserve=0.0, run=lambda *args, **kwargs: SimpleNamespace(
        lines=lines, failure=lambda: None, skipped=False))
    suite.run_endurance(runner, suite.Sizes.for_mode(False), rows)
    assert len(rows) == 1 and rows[0].scenario.startswith("P11 endurance, 30 min")
    return {"verdict": rows[0].verdict, "figure": rows[0].figure}


def test_p11_row_is_met_by_a_flat_steady_run() -> None:
    row = _endurance_rows(["endurance minute 1: ...", _endurance_line()])
    assert row["verdict"] == "met", row
    assert "RSS slope 0.2/0.2/0.2 MB per 10 min after minute 5" in row["figure"]
    assert "lag max 900 records" in row["figure"]


@pytest.mark.parametrize("line", [
    _endurance_line(rss_growth_per_minute=0.15),  # 1.5 MB per 10 minutes
    _endurance_line(lag=25_000),  # more than a second of records behind
    _endurance_line(last_p99=16.0),  # the last minute's p99 1.6x the first's
    _endurance_line(read=11_000_000),  # records the group never read
    _endurance_line(failed=3),
])
def test_p11_row_is_missed_by_each_broken_target(line: str) -> None:
    assert suite.ENDURANCE_LINE.match(line), line
    assert _endurance_rows([line])["verdict"] == "missed"


def test_p11_without_its_line_is_missed() -> None:
    assert _endurance_rows(["endurance minute 1: sent 1 acked 1"])["verdict"] == "missed"


def _paced_line(partitions: int, members: int, p50: float, p99: float, unread: int = 0) -> str:
    run = PacedRun(f"confluent-kafka acks=all keyed over {partitions} partitions with a {members}-member group",
                   20_000, 10.0, sent=200_000, latencies_ms=[4.0] * 200_000)
    read = 200_000 - unread
    run.end_to_end = _histogram(*([p50] * (read - read // 50) + [p99] * (read // 50)))
    return run.line()


def _group_row(group_line: str, single_line: str) -> Any:
    outputs = iter([[group_line], [single_line]])
    runner = SimpleNamespace(run=lambda *args, **kwargs: SimpleNamespace(
        lines=next(outputs), failure=lambda: None, skipped=False))
    return suite.group_end_to_end_row(runner, "127.0.0.1:9092", "10")


def test_p12_group_row_reads_the_end_to_end_figures() -> None:
    row = _group_row(_paced_line(12, 3, 4.0, 20.0), _paced_line(1, 1, 3.0, 8.0))
    assert row.verdict == "met", row.figure
    assert row.figure.startswith("p50 4.0 ms, p99 20.0 ms"), row.figure
    assert "one partition, a 1-member group" in row.figure


@pytest.mark.parametrize("group_line", [
    _paced_line(12, 3, 4.0, 30.0),  # p99 over 25 ms
    _paced_line(12, 3, 4.0, 20.0, unread=500),  # records the group did not read
    "paced confluent-kafka acks=all keyed over 12 partitions 20000/s: sent 1 acked 1 in 10.0 s; ack ms p50 "
    "1.0 p99 2.0 max 3.0",  # no end-to-end figures
])
def test_p12_group_row_is_missed_by_each_broken_target(group_line: str) -> None:
    assert _group_row(group_line, _paced_line(1, 1, 3.0, 8.0)).verdict == "missed"
