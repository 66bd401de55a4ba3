"""The broker's running counts behind GET /metrics: per-topic traffic, request histograms and
the event loop's lag."""

from __future__ import annotations

from kafkalite.broker.stats import LATENCY_BUCKETS, LoopLag, RequestStats, TopicStats


def test_request_latencies_fall_in_prometheus_le_buckets() -> None:
    stats = RequestStats()
    stats.observe("kafka", "Produce", 0.001, failed=False)  # exactly a bound: counted in its bucket
    stats.observe("kafka", "Produce", 0.0011, failed=True)
    stats.observe("kafka", "Produce", 99.0, failed=False)  # above every bound: +Inf
    counts = stats.requests[("kafka", "Produce")]
    assert (counts.requests, counts.errors) == (3, 1)
    assert counts.buckets[LATENCY_BUCKETS.index(0.001)] == 1
    assert counts.buckets[LATENCY_BUCKETS.index(0.0025)] == 1
    assert counts.buckets[-1] == 1 and sum(counts.buckets) == 3
    assert abs(counts.seconds_total - 99.0021) < 1e-9


def test_topic_counts_keep_followers_apart_and_forget_deleted_topics() -> None:
    stats = TopicStats()
    stats.produced("orders", 10, 1000)
    stats.produce_failed("orders")
    stats.fetched("orders", 400, by_follower=False)
    stats.fetched("orders", 1000, by_follower=True)
    stats.fetch_failed("orders")
    counts = stats.topics["orders"]
    assert (counts.messages_in, counts.bytes_in, counts.produce_requests, counts.failed_produce_requests) == \
        (10, 1000, 2, 1)
    assert (counts.bytes_out, counts.fetch_requests, counts.failed_fetch_requests) == (400, 2, 1)
    assert counts.replication_bytes_out == 1000
    stats.forget("orders")
    assert "orders" not in stats.topics


def test_loop_lag_keeps_the_largest_of_the_last_two_windows() -> None:
    lag = LoopLag()
    lag.record(0.5, now=0.0)
    lag.record(0.01, now=5.0)
    assert (lag.last, lag.recent_max) == (0.01, 0.5)
    lag.record(0.02, now=12.0)  # a new window: the previous one still counts
    assert lag.recent_max == 0.5
    lag.record(0.03, now=25.0)  # two windows on: the 0.5 is gone
    assert (lag.last, lag.recent_max) == (0.03, 0.03)
