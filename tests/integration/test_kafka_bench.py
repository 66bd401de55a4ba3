"""The benchmark suite's Kafka-protocol scenario (P6): confluent-kafka against a kafkalite broker
and against librdkafka's mock cluster, in one run, printed side by side."""

from __future__ import annotations

from pathlib import Path

import pytest

from kafkalite.bench.kafka_clients import CONSUMER_SETTINGS
from tests.support.bench import run_quick_scenario

pytestmark = pytest.mark.integration


@pytest.mark.slow
def test_benchmark_suite_quick_p6_prints_kafkalite_beside_the_mock_cluster(tmp_path: Path) -> None:
    result = run_quick_scenario("P6", tmp_path)
    rows = result.rows
    assert [row[0].split(" ")[:3] for row in rows] == [["P6", "confluent-kafka", "Producer,"],
                                                       ["P6", "confluent-kafka", "Consumer,"]], result.stdout
    for row in rows:  # both figures of one run, and a verdict (the rates depend on the machine's load)
        assert "records/s vs mock cluster" in row[1] and row[1].endswith("x)"), row
        assert row[3] in ("met", "missed"), row
    # both runs used the same consumer settings, and they are printed and written down
    settings = " ".join(f"{key}={value}" for key, value in CONSUMER_SETTINGS.items())
    assert result.stderr.count(settings) >= 3, result.stderr
    assert settings in result.docs
