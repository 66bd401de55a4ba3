"""The benchmark suite's P10 rows (kafkalite/bench/suite.py) from the lines
``kafkalite.bench.scale`` prints: figures parsed, targets judged, a missing line reported."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from kafkalite.bench import suite

STEP = ("scale 10000 partitions (RF=3, 3 brokers, 100 topics): created and in sync in {created} s; idle CPU % "
        "1.9/2.0/1.8 (20 s after); RSS MB 214/205/205, ZooKeeper 264; open files 10023/10022/10022; Metadata all "
        "topics median 11.7 ms (first 45.2 ms); /metrics 65 ms, 2180 kB")
FAULTS = ("scale faults at 10000 partitions: SIGTERM of broker 2 leading 3332: exited in {exited} s, longest time a "
          "partition had no live leader {leaderless} ms (423 Metadata samples, every 100 ms); restarted, back in every "
          "ISR in {back}; kill -9 of the controller (broker 1, leading 4987): every partition led again in 8.7 s "
          "(zookeeper.session.timeout.ms 6000), then restarted; cluster stopped in 15.5 s")


class Runner:
    deadline = 0.0
    reserve = 0.0

    def __init__(self, lines: list[str]) -> None:
        self.lines = lines
        self.arguments: list[str] = []

    def run(self, module: str, arguments: list[str], label: str, timeout: float | None = None) -> Any:
        self.arguments = arguments
        return SimpleNamespace(lines=self.lines, failure=lambda: None, skipped=False)


def rows_for(lines: list[str]) -> dict[str, str]:
    rows: list[suite.Row] = []
    suite.run_scale(Runner(lines), suite.Sizes.for_mode(False), rows)  # type: ignore[arg-type]
    return {row.scenario: row.verdict for row in rows}


@pytest.mark.parametrize(("created", "exited", "leaderless", "back", "step", "faults"), [
    ("43.6", "8.2", "0", "25.0 s", "met", "met"),
    ("43.6", "8.2", "0", "38.8 s", "met", "missed"),  # back in every ISR after more than 30 s
    ("43.6", "12.0", "0", "25.0 s", "met", "missed"),  # a slow exit
    ("43.6", "8.2", "300", "25.0 s", "met", "missed"),  # a partition without a leader for a while
    ("43.6", "8.2", "0", "not within the limit", "met", "missed"),
    ("60.0", "8.2", "0", "25.0 s", "missed", "met"),  # 6 s per 1,000 partitions
])
def test_p10_rows_judge_every_target(created: str, exited: str, leaderless: str, back: str, step: str,
                                     faults: str) -> None:
    verdicts = rows_for([STEP.format(created=created), FAULTS.format(exited=exited, leaderless=leaderless,
                                                                     back=back)])
    assert verdicts == {"P10 10,000 partitions, 3 brokers, RF=3, idle": step,
                        "P10 faults at 10000 partitions": faults}


def test_p10_without_its_lines_is_missed_not_skipped() -> None:
    assert rows_for(["something else"]) == {"P10 partitions on an idle cluster": "missed"}
    assert rows_for([STEP.format(created="43.6")]) == {"P10 10,000 partitions, 3 brokers, RF=3, idle": "met",
                                                       "P10 faults": "missed"}
