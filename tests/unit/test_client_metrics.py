"""Client metrics: Kafka's sampled statistics and the kafka-python names the clients report."""

from __future__ import annotations

import math

from kafkalite.client.client_metrics import (
    SAMPLES,
    WINDOW_SECONDS,
    ClientMetrics,
    ConsumerMetrics,
    ProducerMetrics,
    Sensor,
)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_sensor_reports_rates_over_at_least_one_window_and_nan_when_empty() -> None:
    sensor = Sensor(0.0)
    assert math.isnan(sensor.average(1.0)) and math.isnan(sensor.maximum(1.0))
    assert sensor.rate(1.0) == 0.0
    for second in range(10):
        sensor.record(100, float(second))
    # 1,000 over 10 s, but a young sensor divides by a whole window, as Kafka's Rate does
    assert sensor.rate(10.0) == 1000 / WINDOW_SECONDS
    assert sensor.count_rate(10.0) == 10 / WINDOW_SECONDS
    assert (sensor.average(10.0), sensor.maximum(10.0)) == (100.0, 100.0)
    assert (sensor.total_count, sensor.total_sum) == (10, 1000.0)


def test_old_samples_age_out_and_totals_stay() -> None:
    sensor = Sensor(0.0)
    sensor.record(500, 0.0)
    later = WINDOW_SECONDS * (SAMPLES + 1)
    sensor.record(7, later)
    assert sensor.maximum(later) == 7.0  # the 500 belongs to a window that has passed
    assert sensor.total_sum == 507.0
    assert math.isnan(sensor.maximum(later + WINDOW_SECONDS * SAMPLES * 2))


def test_producer_metrics_carry_kafka_python_names_per_client_topic_and_node() -> None:
    metrics = ProducerMetrics(lambda: 1000.0, lambda: 250.0)
    clock = Clock()
    metrics.metrics.clock = clock
    metrics.request_sent(1, 600, [("orders", 10, 300), ("payments", 5, 200)])
    clock.now += 0.5
    metrics.response_received(1, 0.004, 80)
    metrics.records_retried("orders", 10)
    snapshot = metrics.snapshot()
    client = snapshot["producer-metrics"]
    assert client["record-send-total"] == 15 and client["request-total"] == 1
    assert client["outgoing-byte-total"] == 600 and client["records-per-request-avg"] == 15
    assert client["batch-size-avg"] == 250 and client["batch-size-max"] == 300
    assert client["request-latency-avg"] == 4.0 and client["incoming-byte-total"] == 80
    assert client["record-retry-total"] == 10 and client["buffer-available-bytes"] == 750
    assert snapshot["producer-topic-metrics.orders"]["record-send-total"] == 10
    assert snapshot["producer-topic-metrics.orders"]["byte-total"] == 300
    assert snapshot["producer-node-metrics.node-1"]["request-latency-max"] == 4.0


def test_consumer_metrics_report_fetches_lag_and_group_calls() -> None:
    metrics = ConsumerMetrics()
    metrics.fetch_completed(0.01, 1200, [("orders", 0, 40, 900, 60), ("orders", 1, 0, 0, 3)])
    metrics.fetch_completed(0.03, 500, [("orders", 0, 60, 400, 0)])
    metrics.coordinator_call("commit", 0.002)
    metrics.coordinator_call("heartbeat", 0.001)
    snapshot = metrics.snapshot()
    fetch = snapshot["consumer-fetch-manager-metrics"]
    assert fetch["records-consumed-total"] == 100 and fetch["bytes-consumed-total"] == 1300
    assert fetch["fetch-total"] == 2 and fetch["fetch-latency-max"] == 30.0 and fetch["fetch-size-max"] == 1200
    assert fetch["records-lag-max"] == 60
    assert snapshot["consumer-fetch-manager-metrics.orders-0"]["records-lag"] == 0  # the latest fetch
    assert snapshot["consumer-fetch-manager-metrics.orders-1"]["records-lag"] == 3
    assert snapshot["consumer-fetch-manager-metrics.orders"]["records-consumed-total"] == 100
    coordinator = snapshot["consumer-coordinator-metrics"]
    assert coordinator["commit-total"] == 1 and coordinator["commit-latency-avg"] == 2.0
    assert coordinator["heartbeat-response-time-max"] == 1.0


def test_gauges_are_read_when_asked() -> None:
    metrics = ClientMetrics()
    level = [1.0]
    metrics.gauge("g", "level", lambda: level[0])
    level[0] = 5.0
    assert metrics.snapshot(lambda group, name, sensor, now: {}) == {"g": {"level": 5.0}}
