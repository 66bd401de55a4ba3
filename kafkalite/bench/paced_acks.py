"""Acknowledgement latency of a paced confluent-kafka producer: keyed against unkeyed records.

``python -m kafkalite.bench.paced_acks [--bootstrap HOST:PORT,...] [--rates 5000,50000]
[--seconds S] [--partitions N] [--acks all] [--kinds keyed,unkeyed] [--repeat N] [--linger-ms MS]
[--client confluent-kafka|kafkalite] [--assigned-consumer | --group-members N]`` produces 100-byte records
at each rate for ``S`` seconds into a topic of ``N`` partitions (RF=3, min.insync.replicas=2),
with a confluent-kafka ``Producer`` (librdkafka's defaults for durability: acks=all,
linger.ms=5), once with keys spread over every partition (so one ProduceRequest carries several
partitions) and once without keys (librdkafka's sticky partitioner: one partition per batch),
and prints one line per run::

    paced confluent-kafka acks=all keyed over 12 partitions 5000/s: sent 50000 acked 50000 in 10.0 s;
        ack ms p50 2.1 p99 6.3 max 9.0

``--client kafkalite`` runs kafkalite's own ``KafkaProducer`` instead (its binary channel).

Each record's value starts with its send time (``time.perf_counter_ns``), so its latency is from
just before ``produce()`` to the delivery report; the driver sends a millisecond's records at a
time and serves delivery reports while it waits for the next. With ``--assigned-consumer`` a
confluent-kafka consumer assigned to every partition long-polls the topic (no group) during the
run, and each row is run without and then with it; with ``--group-members N`` every run has N
confluent-kafka consumers subscribed to the topic as one group (each in a process of its own;
the run starts once every member holds partitions). The line then adds the records' latency
from send to the consumer (``end to end ms``, within 1%: :class:`LatencyHistogram`) and the
records the consumers read. Before such runs the brokers create ``__consumer_offsets``
(a consumer's first coordinator look-up asks for it) and every partition of it is in sync, so
that the creation's burst of work is not measured as the consumer's. Without ``--bootstrap`` it starts its own
three brokers and ZooKeeper (:mod:`kafkalite.bench.local_cluster`) and stops them at the end.

Exit status 0; 1 when a record failed or was not acknowledged within the drain time.

Concurrency: single-threaded driver (plus one consumer process with ``--assigned-consumer``);
librdkafka runs its own threads.
"""

from __future__ import annotations

import argparse
import array
import importlib
import math
import multiprocessing
import os
import signal
import statistics
import struct
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

VALUE_SIZE = 100
_STAMP = struct.Struct(">q")
DRAIN_SECONDS = 60.0
PRODUCER_SETTINGS: dict[str, Any] = {
    "acks": "all", "linger.ms": 5, "enable.idempotence": False, "compression.type": "none",
    "queue.buffering.max.messages": 2_000_000,
}


@dataclass
class PacedRun:
    """What one paced run measured."""

    label: str
    rate: int
    seconds: float
    sent: int = 0
    latencies_ms: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    #: send to consumer, of the records the consumers read (None without consumers)
    end_to_end: LatencyHistogram | None = None

    def percentile(self, fraction: float, values: list[float] | None = None) -> float:
        values = self.latencies_ms if values is None else values
        if not values:
            return float("nan")
        ordered = sorted(values)
        return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]

    def line(self) -> str:
        acked = len(self.latencies_ms)
        worst = max(self.latencies_ms, default=float("nan"))
        median = statistics.median(self.latencies_ms) if self.latencies_ms else float("nan")
        text = (f"paced {self.label} {self.rate}/s: sent {self.sent} acked {acked} in {self.seconds:.1f} s; "
                f"ack ms p50 {median:.1f} p99 {self.percentile(0.99):.1f} max {worst:.1f}")
        if self.end_to_end is not None:
            text += (f"; end to end ms p50 {self.end_to_end.percentile(0.5):.1f} "
                     f"p99 {self.end_to_end.percentile(0.99):.1f} ({self.end_to_end.count} read)")
        if self.errors:
            text += f"; {len(self.errors)} failed (first: {self.errors[0]})"
        return text


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    """``topic`` with ``partitions`` partitions, RF=3, min.insync.replicas=2, all led and in sync."""
    admin_api: Any = importlib.import_module("confluent_kafka.admin")
    admin = admin_api.AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([admin_api.NewTopic(topic, num_partitions=partitions, replication_factor=3,
                                            config={"min.insync.replicas": "2"})], operation_timeout=30)
    futures[topic].result(timeout=60)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        described = admin.list_topics(topic, timeout=10).topics[topic].partitions
        if len(described) == partitions and all(item.leader >= 0 and len(item.isrs) == 3
                                                for item in described.values()):
            return
        time.sleep(0.05)
    raise RuntimeError(f"{topic}: not every partition led with a full ISR within 60 s")


def ensure_offsets_topic(bootstrap: str) -> None:
    """Have the brokers create ``__consumer_offsets`` (a group's first coordinator look-up does)
    and wait until every partition of it is led with a full ISR: its creation is a burst of work
    on every broker that the consumer rows must not measure."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"paced-warm-up-{uuid.uuid4().hex[:6]}",
                         "enable.auto.commit": False})
    try:
        consumer.committed([TopicPartition("__consumer_offsets", 0)], timeout=60)
    finally:
        consumer.close()
    admin_api: Any = importlib.import_module("confluent_kafka.admin")
    admin = admin_api.AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        topic = admin.list_topics("__consumer_offsets", timeout=10).topics.get("__consumer_offsets")
        partitions = topic.partitions if topic is not None and topic.error is None else {}
        if partitions and all(item.leader >= 0 and len(item.isrs) == len(item.replicas)
                              for item in partitions.values()):
            return
        time.sleep(0.1)
    raise RuntimeError("__consumer_offsets: not every partition led with a full ISR within 60 s")


def paced_kafkalite_run(bootstrap: str, topic: str, rate: int, seconds: float, keyed: bool, acks: str,
                        label: str, consumers: ConsumerProcesses | None = None) -> PacedRun:
    """As :func:`paced_run`, with kafkalite's own ``KafkaProducer`` (its binary channel, not
    Kafka's protocol), linger.ms=5; latency from just before ``send()`` to the future's callback."""
    from kafkalite.client import KafkaProducer

    run = PacedRun(label, rate, seconds)
    latencies = run.latencies_ms
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all" if acks == "all" else 1, linger_ms=5)
    now_ns = time.perf_counter_ns

    def delivered(sent_ns: int, _metadata: Any) -> None:  # add_callback passes its arguments first
        latencies.append((now_ns() - sent_ns) / 1e6)

    def failed(error: BaseException) -> None:
        if len(run.errors) < 10:
            run.errors.append(str(error))

    try:
        producer.send(topic, b"warm-up").get(30)
        value = b"v" * VALUE_SIZE
        total = int(rate * seconds)
        began = now_ns()
        if consumers is not None:
            consumers.start_clock(began)
        sent = 0
        while sent < total:
            due = min(total, int((now_ns() - began) * rate / 1e9) + 1)
            while sent < due:
                key = b"key-%d" % (sent % 1000) if keyed else None
                producer.send(topic, value, key=key).add_callback(delivered, now_ns()).add_errback(failed)
                sent += 1
            lag_ns = began + int(sent * 1e9 / rate) - now_ns()
            if lag_ns > 0:
                time.sleep(min(lag_ns / 1e9, 0.001))
        run.sent = sent
        producer.flush(DRAIN_SECONDS)
    finally:
        producer.close()
    return run


def paced_run(bootstrap: str, topic: str, rate: int, seconds: float, keyed: bool, acks: str,
              label: str, consumers: ConsumerProcesses | None = None) -> PacedRun:
    """Produce at ``rate`` records/s for ``seconds``, then wait for the last acknowledgement;
    ``consumers`` count the records sent from the clock's start."""
    from confluent_kafka import Producer

    run = PacedRun(label, rate, seconds)
    latencies = run.latencies_ms

    def delivered(error: Any, message: Any) -> None:
        if error is not None:
            if len(run.errors) < 10:
                run.errors.append(str(error))
            return
        sent_ns = _STAMP.unpack_from(message.value())[0]
        latencies.append((time.perf_counter_ns() - sent_ns) / 1e6)

    producer = Producer({**PRODUCER_SETTINGS, "acks": acks, "bootstrap.servers": bootstrap,
                         "on_delivery": delivered})
    padding = b"p" * (VALUE_SIZE - _STAMP.size)
    send, poll, now_ns = producer.produce, producer.poll, time.perf_counter_ns
    # one record to open the connections and learn the leaders before the clock starts
    producer.produce(topic, _STAMP.pack(now_ns()) + padding)
    producer.flush(30)
    latencies.clear()
    total = int(rate * seconds)
    chunk = max(1, rate // 1000)
    began = now_ns()
    if consumers is not None:
        consumers.start_clock(began)
    sent = 0
    while sent < total:
        due = min(total, int((now_ns() - began) * rate / 1e9) + 1)
        while sent < due:
            value = _STAMP.pack(now_ns()) + padding
            if keyed:
                send(topic, value, key=b"key-%d" % (sent % 1000))
            else:
                send(topic, value)
            sent += 1
        poll(0)
        # serve delivery reports until a millisecond's records (at least one) are due; poll()
        # waits whole milliseconds (a shorter timeout returns at once), so the rest is a sleep
        wait_ns = began + int((sent + chunk - 1) * 1e9 / rate) - now_ns()
        if wait_ns >= 1_000_000:
            poll(wait_ns // 1_000_000 / 1e3)
            wait_ns = began + int((sent + chunk - 1) * 1e9 / rate) - now_ns()
        if wait_ns > 0:
            time.sleep(wait_ns / 1e9)
    run.sent = sent
    deadline = time.monotonic() + DRAIN_SECONDS
    while len(latencies) + len(run.errors) < sent and time.monotonic() < deadline:
        poll(0.01)
    producer.flush(1)
    return run


class LatencyHistogram:
    """Latencies in milliseconds, counted in buckets 1% wide from 0.01 ms to 10 minutes, so that a
    percentile is known within 1% however many records a run reads (a 30-minute run reads
    tens of millions). Merged by adding counts; sent between processes as bytes."""

    FLOOR_MS = 0.01
    RATIO = 1.01
    BUCKETS = int(math.log(600_000 / FLOOR_MS) / math.log(RATIO)) + 2

    def __init__(self, counts: array.array[int] | None = None) -> None:
        self.counts: array.array[int] = counts if counts is not None else array.array("Q", bytes(8 * self.BUCKETS))

    def add(self, milliseconds: float) -> None:
        if milliseconds <= self.FLOOR_MS:
            self.counts[0] += 1
        else:
            self.counts[min(self.BUCKETS - 1, 1 + int(math.log(milliseconds / self.FLOOR_MS) / _LOG_RATIO))] += 1

    @property
    def count(self) -> int:
        return sum(self.counts)

    def merge(self, other: LatencyHistogram) -> None:
        for index, value in enumerate(other.counts):
            if value:
                self.counts[index] += value

    def percentile(self, fraction: float) -> float:
        """The upper edge of the bucket holding the ``fraction`` quantile (nan when empty)."""
        total = self.count
        if total == 0:
            return float("nan")
        rank = min(total - 1, int(fraction * total))
        seen = 0
        for index, value in enumerate(self.counts):
            seen += value
            if seen > rank:
                return self.FLOOR_MS * self.RATIO ** index
        return self.FLOOR_MS * self.RATIO ** (self.BUCKETS - 1)

    def to_bytes(self) -> bytes:
        return self.counts.tobytes()

    @classmethod
    def from_bytes(cls, data: bytes) -> LatencyHistogram:
        counts = array.array("Q")
        counts.frombytes(data)
        return cls(counts)


_LOG_RATIO = math.log(LatencyHistogram.RATIO)


def _consume_until_stopped(bootstrap: str, topic: str, partitions: int, group: str | None, bucket_seconds: float,
                           began_ns: Any, assigned: Any, read: Any, stopping: Any, results: Any) -> None:
    """A consumer's process: read until ``stopping`` is set, then send its end-to-end latencies
    through ``results`` as ``{bucket: histogram bytes}``, a bucket being ``bucket_seconds`` of
    send time from ``began_ns`` (records sent before it are not counted).

    Without ``group`` it is assigned every partition from its end (no group, no commits); with
    it, it subscribes as a member of ``group`` (from the start of the new topic, auto-committing) and keeps the
    number of partitions it holds in ``assigned``. ``read`` counts the records it read.
    """
    from confluent_kafka import OFFSET_END, Consumer, TopicPartition

    histograms: dict[int, LatencyHistogram] = {}
    settings = {"bootstrap.servers": bootstrap, "group.id": group or f"paced-{uuid.uuid4().hex[:6]}",
                "enable.auto.commit": group is not None, "enable.partition.eof": False,
                "auto.offset.reset": "earliest"}  # a group's topic is new: it reads every record
    consumer = Consumer(settings)
    bucket_ns = int(bucket_seconds * 1e9)
    try:
        if group is None:
            consumer.assign([TopicPartition(topic, number, OFFSET_END) for number in range(partitions)])
            assigned.value = partitions
        else:
            def on_assign(_consumer: Any, held: list[Any]) -> None:
                assigned.value = len(held)

            def on_revoke(_consumer: Any, _held: list[Any]) -> None:
                assigned.value = 0

            consumer.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke)
        unpack, now_ns = _STAMP.unpack_from, time.perf_counter_ns
        parent = os.getppid()
        while not stopping.is_set() and os.getppid() == parent:  # ends with its driver, however it ended
            first = consumer.poll(0.1)  # returns at the first record; consume() would wait its timeout out
            if first is None:
                continue
            messages = [first, *consumer.consume(10_000, 0)]
            received = now_ns()
            start = began_ns.value
            counted = 0
            for message in messages:
                value = message.value()
                if message.error() is not None or value is None or len(value) != VALUE_SIZE:
                    continue
                sent_ns = unpack(value)[0]
                if start == 0 or sent_ns < start:
                    continue
                bucket = (sent_ns - start) // bucket_ns
                histogram = histograms.get(bucket)
                if histogram is None:
                    histogram = histograms[bucket] = LatencyHistogram()
                histogram.add((received - sent_ns) / 1e6)
                counted += 1
            if counted:
                with read.get_lock():
                    read.value += counted
    finally:
        consumer.close()
        results.send({bucket: histogram.to_bytes() for bucket, histogram in histograms.items()})
        results.close()


class ConsumerProcesses:
    """Confluent-kafka consumers of ``topic``, each in a process of its own (spawned: no
    interpreter lock shared with the producer): one assigned to every partition (no group), or
    ``members`` subscribed as one group. Each notes every record's latency from its send time (in
    the value; ``perf_counter_ns`` is the machine's monotonic clock, shared by processes) to the
    ``poll()`` that returned it (or the ``consume()`` right after it that drained what had
    arrived with it), for records sent after :meth:`start_clock`, per ``bucket_seconds`` of
    send time (one bucket by default).

    Concurrency: driven from one thread; the counters are shared memory read at any time.
    """

    def __init__(self, bootstrap: str, topic: str, partitions: int, members: int = 0,
                 bucket_seconds: float = 1e9) -> None:
        context = multiprocessing.get_context("spawn")
        self.partitions = partitions
        self._stopping = context.Event()
        self._began_ns = context.Value("q", 0)
        group = f"paced-group-{uuid.uuid4().hex[:6]}" if members else None
        self._members: list[tuple[Any, Any, Any, Any]] = []
        for _ in range(max(1, members)):
            assigned, read = context.Value("i", 0), context.Value("q", 0)
            results, child_end = context.Pipe(duplex=False)
            process = context.Process(target=_consume_until_stopped, name="paced-acks-consumer", daemon=True,
                                      args=(bootstrap, topic, partitions, group, bucket_seconds, self._began_ns,
                                            assigned, read, self._stopping, child_end))
            process.start()
            child_end.close()
            self._members.append((process, assigned, read, results))

    def wait_ready(self, timeout: float) -> None:
        """Until every partition is held and every member holds some (a group has settled)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            held = [assigned.value for _process, assigned, _read, _results in self._members]
            if sum(held) == self.partitions and min(held) > 0:
                return
            if not all(process.is_alive() for process, *_ in self._members):
                raise RuntimeError("a consumer process ended before it held its partitions")
            time.sleep(0.05)
        raise RuntimeError(f"the consumers did not hold every partition within {timeout:.0f} s")

    def start_clock(self, began_ns: int) -> None:
        """Count records sent from ``began_ns`` (``perf_counter_ns``) on."""
        self._began_ns.value = began_ns

    def read(self) -> int:
        """Records read so far (counted ones: sent after the clock started)."""
        return sum(read.value for _process, _assigned, read, _results in self._members)

    def stop(self, timeout: float = 30.0) -> dict[int, LatencyHistogram]:
        """Stop the consumers; their latencies merged per bucket (empty when they failed)."""
        self._stopping.set()
        merged: dict[int, LatencyHistogram] = {}
        for process, _assigned, _read, results in self._members:
            if results.poll(timeout):
                try:
                    received: dict[int, bytes] = results.recv()
                except EOFError:
                    received = {}
                for bucket, data in received.items():
                    merged.setdefault(bucket, LatencyHistogram()).merge(LatencyHistogram.from_bytes(data))
            process.join(timeout)
            if process.is_alive():
                process.kill()
        return merged


def measure(bootstrap: str, rates: list[int], seconds: float, partitions: int, acks: str,
            with_consumer: bool, client: str = "confluent-kafka", kinds: tuple[str, ...] = ("keyed", "unkeyed"),
            repeat: int = 1, group_members: int = 0) -> list[PacedRun]:
    """Every row: per rate and kind (keyed, unkeyed), ``repeat`` times: without and then with the
    assigned consumer (with ``with_consumer``), or with a group of ``group_members`` consumers,
    each on a topic of its own."""
    runs: list[PacedRun] = []
    if with_consumer or group_members:
        ensure_offsets_topic(bootstrap)
    for rate in rates:
        for keyed in (kind == "keyed" for kind in kinds):
            for consumer_on in ((False, True) * repeat if with_consumer else (False,) * repeat):
                topic = f"paced-{uuid.uuid4().hex[:8]}"
                create_topic(bootstrap, topic, partitions)
                suffix = (" with an assigned consumer" if consumer_on
                          else f" with a {group_members}-member group" if group_members else "")
                label = f"{client} acks={acks} {'keyed' if keyed else 'unkeyed'} over {partitions} partitions{suffix}"
                consumers = (ConsumerProcesses(bootstrap, topic, partitions, 0 if consumer_on else group_members)
                             if suffix else None)
                end_to_end: LatencyHistogram | None = None
                try:
                    if consumers is not None:
                        consumers.wait_ready(60)
                    produce = paced_kafkalite_run if client == "kafkalite" else paced_run
                    run = produce(bootstrap, topic, rate, seconds, keyed, acks, label, consumers)
                    if consumers is not None:  # the last records' way to the consumers
                        deadline = time.monotonic() + 10
                        while consumers.read() < len(run.latencies_ms) and time.monotonic() < deadline:
                            time.sleep(0.01)
                finally:
                    if consumers is not None:
                        end_to_end = LatencyHistogram()
                        for histogram in consumers.stop().values():
                            end_to_end.merge(histogram)
                run.end_to_end = end_to_end
                print(run.line(), flush=True)
                runs.append(run)
    return runs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kafkalite.bench.paced_acks", description=__doc__.split("\n")[0])
    parser.add_argument("--bootstrap", help="brokers to use (default: start three and a ZooKeeper)")
    parser.add_argument("--rates", default="5000,50000", help="records/s, comma-separated (default 5000,50000)")
    parser.add_argument("--seconds", type=float, default=10.0, help="seconds per run (default 10)")
    parser.add_argument("--partitions", type=int, default=12, help="partitions of each run's topic (default 12)")
    parser.add_argument("--acks", default="all", choices=("all", "1"), help="the producer's acks (default all)")
    parser.add_argument("--linger-ms", type=int, default=PRODUCER_SETTINGS["linger.ms"],
                        help=f"the producer's linger.ms (default {PRODUCER_SETTINGS['linger.ms']})")
    parser.add_argument("--client", default="confluent-kafka", choices=("confluent-kafka", "kafkalite"),
                        help="the producer: confluent-kafka over Kafka's protocol (default) or kafkalite's own")
    parser.add_argument("--kinds", default="keyed,unkeyed",
                        help="keyed, unkeyed or both, comma-separated (default keyed,unkeyed)")
    parser.add_argument("--repeat", type=int, default=1, help="runs of each row (default 1)")
    parser.add_argument("--assigned-consumer", action="store_true",
                        help="run each row also with a consumer assigned to the topic")
    parser.add_argument("--group-members", type=int, default=0,
                        help="run each row with a group of this many consumers subscribed to the topic")
    options = parser.parse_args(argv)
    try:
        rates = [int(item) for item in options.rates.split(",") if item]
    except ValueError:
        parser.error(f"--rates {options.rates}: expected whole numbers separated by commas")
    kinds = tuple(item for item in options.kinds.split(",") if item)
    if not kinds or any(kind not in ("keyed", "unkeyed") for kind in kinds):
        parser.error(f"--kinds {options.kinds}: expected keyed, unkeyed or both, comma-separated")
    if not rates or min(rates) <= 0 or options.seconds <= 0 or options.partitions <= 0 or options.repeat <= 0:
        parser.error("rates, seconds, partitions and repeat must be positive")
    if options.group_members < 0 or options.group_members > options.partitions:
        parser.error("--group-members: between 0 and the partitions")
    if options.group_members and options.assigned_consumer:
        parser.error("--group-members and --assigned-consumer: one or the other")
    # SIGTERM (the suite's time limit, Ctrl-C's cousin) ends the run through the cleanup below
    signal.signal(signal.SIGTERM, lambda _number, _frame: sys.exit(143))
    PRODUCER_SETTINGS["linger.ms"] = options.linger_ms
    print("paced settings: " + " ".join(f"{key}={value}" for key, value in PRODUCER_SETTINGS.items()), flush=True)
    if options.bootstrap:
        runs = measure(options.bootstrap, rates, options.seconds, options.partitions, options.acks,
                       options.assigned_consumer, options.client, kinds, options.repeat, options.group_members)
    else:
        from kafkalite.bench.local_cluster import start_cluster

        with tempfile.TemporaryDirectory(prefix="kafkalite-paced-") as directory:
            zookeeper, cluster = start_cluster(Path(directory), 3)
            try:
                runs = measure(cluster.bootstrap, rates, options.seconds, options.partitions, options.acks,
                               options.assigned_consumer, options.client, kinds, options.repeat, options.group_members)
            finally:
                cluster.stop()
                zookeeper.stop()
    failed = any(run.errors or len(run.latencies_ms) < run.sent for run in runs)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
