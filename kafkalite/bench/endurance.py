"""Endurance at a steady rate: memory, CPU, lag and latency minute by minute.

``python -m kafkalite.bench.endurance [--minutes 30] [--rate 20000] [--partitions 12]
[--members 3] [--warm-up-minutes 5] [--directory DIR]`` starts ZooKeeper and three brokers
(:mod:`kafkalite.bench.local_cluster`), creates a topic (RF=3, ``min.insync.replicas=2``) and
has a confluent-kafka ``Producer`` (acks=all, ``linger.ms=5``, keyed records of 100 bytes over
1,000 keys) write ``--rate`` records/s into it for ``--minutes`` while a group of ``--members``
confluent-kafka consumers, each in a process of its own, reads it
(:class:`kafkalite.bench.paced_acks.ConsumerProcesses`). Every minute it prints a line::

    endurance minute 7: sent 1200000 acked 1200000; ack ms p50 6.1 p99 12.9; lag 812 records;
        RSS MB 80.1/79.8/80.4, ZooKeeper 120.3; CPU % 45.2/44.9/46.1

*lag*: records acknowledged and not yet read by the group at the sample (0 when the group has
read records whose acknowledgements the driver has not served yet); *RSS* from
``/proc``; *CPU*: each broker's user and system CPU over the minute, as a share of one core.
At the end it prints the end-to-end latency (send to the consumer's poll) of each minute and
one summary line::

    endurance 30 min at 20000/s (keyed, 12 partitions, RF=3, 3-member group): RSS slope MB per 10 min
        after minute 5 0.2/0.1/0.3 (ZooKeeper 0.0); lag max 2210 records, last 640; ack p99 first
        minute 12.9 ms, last 13.4 ms (1.04x); end to end p99 first minute 14.0 ms, last 14.6 ms
        (1.04x); sent 36000000 acked 36000000 read 36000000

*RSS slope*: the least-squares slope of each broker's RSS over the samples after the warm-up,
per 10 minutes. Exit status 0; 1 when a record failed, was not acknowledged within the drain
time or was not read by the group.

Concurrency: single-threaded driver (librdkafka runs its own threads; the consumers are
processes of their own). The run is bounded: ``--minutes`` of sending, then at most
:data:`kafkalite.bench.paced_acks.DRAIN_SECONDS` to drain.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import struct
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kafkalite.bench.paced_acks import (
    DRAIN_SECONDS,
    PRODUCER_SETTINGS,
    VALUE_SIZE,
    ConsumerProcesses,
    LatencyHistogram,
    create_topic,
    ensure_offsets_topic,
)
from kafkalite.bench.procfs import cpu_seconds, rss_mb

_STAMP = struct.Struct(">q")
MINUTE_NS = 60_000_000_000
KEYS = 1000


def slope_per_ten_minutes(samples: list[tuple[float, float]]) -> float:
    """The least-squares slope of ``(minute, value)`` samples, per 10 minutes (nan under two)."""
    if len(samples) < 2:
        return float("nan")
    count = len(samples)
    mean_x = sum(x for x, _ in samples) / count
    mean_y = sum(y for _, y in samples) / count
    spread = sum((x - mean_x) ** 2 for x, _ in samples)
    if spread == 0:
        return float("nan")
    return 10 * sum((x - mean_x) * (y - mean_y) for x, y in samples) / spread


@dataclass
class Minute:
    """What one minute's sample saw."""

    index: int
    sent: int
    acked: int
    lag: int
    rss_mb: dict[int, float]
    zookeeper_rss_mb: float
    cpu_percent: dict[int, float]
    acks: LatencyHistogram = field(default_factory=LatencyHistogram)

    def line(self) -> str:
        return (f"endurance minute {self.index}: sent {self.sent} acked {self.acked}; ack ms p50 "
                f"{self.acks.percentile(0.5):.1f} p99 {self.acks.percentile(0.99):.1f}; lag {self.lag} records; "
                f"RSS MB {'/'.join(f'{value:.1f}' for value in self.rss_mb.values())}, ZooKeeper "
                f"{self.zookeeper_rss_mb:.1f}; CPU % {'/'.join(f'{value:.1f}' for value in self.cpu_percent.values())}")


def summary(minutes: list[Minute], end_to_end: dict[int, LatencyHistogram], warm_up: int, rate: int,
            partitions: int, members: int, acked: int, read: int, failed: int) -> str:
    """The closing line: RSS slopes after the warm-up, lag, first and last minute's p99s (of
    the minutes sampled; a record sent after the last sample is counted, not timed)."""
    after = [minute for minute in minutes if minute.index > warm_up]
    brokers = list(minutes[0].rss_mb) if minutes else []
    slopes = "/".join(f"{slope_per_ten_minutes([(m.index, m.rss_mb[key]) for m in after]):.1f}" for key in brokers)
    zookeeper = slope_per_ten_minutes([(m.index, m.zookeeper_rss_mb) for m in after])
    lags = [minute.lag for minute in minutes]
    first, last = (minutes[0], minutes[-1]) if minutes else (None, None)

    def ratio_text(name: str, first_p99: float, last_p99: float) -> str:
        return (f"{name} p99 first minute {first_p99:.1f} ms, last {last_p99:.1f} ms "
                f"({last_p99 / first_p99 if first_p99 > 0 else float('nan'):.2f}x)")

    ack_text = ratio_text("ack", first.acks.percentile(0.99) if first else float("nan"),
                          last.acks.percentile(0.99) if last else float("nan"))
    buckets = sorted(bucket for bucket in end_to_end if bucket < len(minutes))
    e2e_text = ratio_text("end to end", end_to_end[buckets[0]].percentile(0.99) if buckets else float("nan"),
                          end_to_end[buckets[-1]].percentile(0.99) if buckets else float("nan"))
    sent = minutes[-1].sent if minutes else 0
    return (f"endurance {len(minutes)} min at {rate}/s (keyed, {partitions} partitions, RF=3, {members}-member "
            f"group): RSS slope MB per 10 min after minute {warm_up} {slopes} (ZooKeeper {zookeeper:.1f}); lag max "
            f"{max(lags, default=0)} records, last {lags[-1] if lags else 0}; {ack_text}; {e2e_text}; sent {sent} "
            f"acked {acked} read {read}" + (f"; {failed} failed" if failed else ""))


def run(bootstrap: str, broker_pids: dict[int, int], zookeeper_pid: int, minutes: int, rate: int, partitions: int,
        members: int, warm_up: int) -> int:
    """Produce for ``minutes`` with the group reading, sampling each minute; 0, or 1 on loss."""
    from confluent_kafka import Producer

    topic = f"endurance-{uuid.uuid4().hex[:8]}"
    ensure_offsets_topic(bootstrap)
    create_topic(bootstrap, topic, partitions)
    consumers = ConsumerProcesses(bootstrap, topic, partitions, members, bucket_seconds=60)
    acks: dict[int, LatencyHistogram] = {}
    counts = {"acked": 0, "failed": 0}
    errors: list[str] = []
    began = 0

    def delivered(error: Any, message: Any) -> None:
        if error is not None:
            counts["failed"] += 1
            if len(errors) < 10:
                errors.append(str(error))
            return
        sent_ns = _STAMP.unpack_from(message.value())[0]
        if began == 0 or sent_ns < began:
            return  # the warm-up record (acknowledged before the clock starts)
        counts["acked"] += 1
        bucket = (sent_ns - began) // MINUTE_NS
        histogram = acks.get(bucket)
        if histogram is None:
            histogram = acks[bucket] = LatencyHistogram()
        histogram.add((time.perf_counter_ns() - sent_ns) / 1e6)

    producer = Producer({**PRODUCER_SETTINGS, "bootstrap.servers": bootstrap, "on_delivery": delivered})
    samples: list[Minute] = []
    end_to_end: dict[int, LatencyHistogram] = {}
    try:
        consumers.wait_ready(120)
        padding = b"p" * (VALUE_SIZE - _STAMP.size)
        send, poll, now_ns = producer.produce, producer.poll, time.perf_counter_ns
        producer.produce(topic, _STAMP.pack(now_ns()) + padding, key=b"warm-up")
        producer.flush(30)
        total = rate * 60 * minutes
        chunk = max(1, rate // 1000)
        began = now_ns()
        consumers.start_clock(began)
        cpu_before = {broker: cpu_seconds(pid) for broker, pid in broker_pids.items()}
        next_sample = began + MINUTE_NS
        sent = 0
        while sent < total or len(samples) < minutes:
            now = now_ns()
            due = min(total, (now - began) * rate // 1_000_000_000 + 1)
            while sent < due:
                send(topic, _STAMP.pack(now_ns()) + padding, key=b"key-%d" % (sent % KEYS))
                sent += 1
            poll(0)
            if now_ns() >= next_sample:
                cpu_now = {broker: cpu_seconds(pid) for broker, pid in broker_pids.items()}
                lag = max(0, counts["acked"] - consumers.read())  # the group may read before reports are served
                minute = Minute(len(samples) + 1, sent, counts["acked"], lag,
                                {broker: rss_mb(pid) for broker, pid in broker_pids.items()}, rss_mb(zookeeper_pid),
                                {broker: 100 * (cpu_now[broker] - cpu_before[broker]) / 60 for broker in broker_pids})
                minute.acks = acks.get(minute.index - 1, LatencyHistogram())
                print(minute.line(), flush=True)
                samples.append(minute)
                cpu_before = cpu_now
                next_sample += MINUTE_NS
            # serve delivery reports until a millisecond's records are due (poll() waits whole ms)
            wait_ns = min(began + (sent + chunk - 1) * 1_000_000_000 // rate, next_sample) - now_ns()
            if wait_ns >= 1_000_000:
                poll(wait_ns // 1_000_000 / 1e3)
            elif wait_ns > 0:
                time.sleep(wait_ns / 1e9)
        deadline = time.monotonic() + DRAIN_SECONDS
        while counts["acked"] + counts["failed"] < sent and time.monotonic() < deadline:
            poll(0.01)
        while consumers.read() < counts["acked"] and time.monotonic() < deadline:
            poll(0.01)
    finally:
        producer.flush(1)
        read = consumers.read()
        end_to_end = consumers.stop()
    for bucket in sorted(bucket for bucket in end_to_end if bucket < len(samples)):
        histogram = end_to_end[bucket]
        print(f"endurance minute {bucket + 1} end to end ms: p50 {histogram.percentile(0.5):.1f} p99 "
              f"{histogram.percentile(0.99):.1f} ({histogram.count} read)", flush=True)
    print(summary(samples, end_to_end, warm_up, rate, partitions, members, counts["acked"], read, counts["failed"]),
          flush=True)
    if errors:
        print(f"endurance: first failures: {errors}", file=sys.stderr, flush=True)
    lost = counts["failed"] or counts["acked"] < rate * 60 * minutes or read < counts["acked"]
    return 1 if lost else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kafkalite.bench.endurance", description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=int, default=30, help="minutes of sending (default 30)")
    parser.add_argument("--rate", type=int, default=20_000, help="records/s (default 20000)")
    parser.add_argument("--partitions", type=int, default=12, help="partitions of the topic (default 12)")
    parser.add_argument("--members", type=int, default=3, help="consumers in the group (default 3)")
    parser.add_argument("--warm-up-minutes", type=int, default=5,
                        help="minutes left out of the RSS slope (default 5)")
    parser.add_argument("--directory", type=Path, help="where the cluster's files go (default: a temporary one)")
    options = parser.parse_args(argv)
    if options.minutes <= 0 or options.rate <= 0 or options.partitions <= 0:
        parser.error("minutes, rate and partitions must be positive")
    if not 0 < options.members <= options.partitions:
        parser.error("--members: between 1 and the partitions")
    if not 0 <= options.warm_up_minutes < options.minutes - 1:
        parser.error("--warm-up-minutes: at least two samples must follow the warm-up")
    # SIGTERM (the suite's time limit, Ctrl-C's cousin) ends the run through the cleanup below
    signal.signal(signal.SIGTERM, lambda _number, _frame: sys.exit(143))
    from kafkalite.bench.local_cluster import start_cluster

    print("endurance settings: " + " ".join(f"{key}={value}" for key, value in PRODUCER_SETTINGS.items()), flush=True)
    with contextlib.ExitStack() as stack:
        if options.directory is not None:
            options.directory.mkdir(parents=True, exist_ok=True)
            directory = options.directory
        else:
            directory = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="kafkalite-endurance-")))
        zookeeper, cluster = start_cluster(directory, 3)
        try:
            pids = {broker_id: broker.process.pid for broker_id, broker in cluster.brokers.items()
                    if broker.process is not None}
            return run(cluster.bootstrap, pids, zookeeper.pid or os.getpid(), options.minutes, options.rate,
                       options.partitions, options.members, options.warm_up_minutes)
        finally:
            cluster.stop()
            zookeeper.stop()


if __name__ == "__main__":
    sys.exit(main())
