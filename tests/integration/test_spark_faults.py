"""Spark driver crashes at every point of the source's and the exactly-once sink's protocol.

A streaming query copies a 3-partition topic to a 3-partition topic (``kafkalite`` source and
sink, checkpointed) while a producer writes 30,000 numbered records. The driver runs in a
process of its own (:class:`tests.support.spark.SparkDriverProcess`); the test-only pause of
:func:`kafkalite.spark.pause_for_tests` stops it at a named point, the test kills it there
(Python, JVM and Python workers, kill -9), and the next driver starts the query again from the
checkpoint: that driver was started held while the killed one ran, with its JVM up and the query
defined, and is released once the killed one is gone. The points:
a micro-batch's offsets planned but not committed (``source-planned``), a write task's attempt
recorded as started (``task-started``), a write task half-way (``mid-write``), a task recorded
as done before the batch commit (``task-done``) and the driver's commit between the sink
journal's commit record and Spark's commit log (``commit``). After the kills an availableNow
run drains the source, and the output must hold every value exactly once.

The kills come in rounds of one at every point (``KAFKALITE_SPARK_FAULT_ROUNDS``, 1 unless set;
``scripts/soak.sh`` runs 3). Over the whole run, one of the three brokers is killed (-9) after
the first third of the kills and restarted after the second, so the middle kills happen with a
broker down and the last ones while it comes back and catches up. (One query run with successive
kills: every driver run costs 20-35 s on two cores, so a separate broker-fault run would cost
minutes.)
"""

from __future__ import annotations

import dataclasses
import os
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark", reason="the spark extra (pyspark, pyarrow) is not installed")

from kafkalite import KafkaAdminClient, KafkaConsumer, KafkaProducer, NewTopic, TopicPartition
from kafkalite.spark import PAUSE_DIRECTORY_ENV, PAUSE_POINT_ENV, PAUSE_POINTS
from tests.support.cluster import BrokerCluster
from tests.support.spark import SparkDriverProcess

pytestmark = [pytest.mark.integration, pytest.mark.slow]

RECORDS = 30_000
#: rounds of one kill at every point; the soak (scripts/soak.sh) sets 3
ROUNDS_VARIABLE = "KAFKALITE_SPARK_FAULT_ROUNDS"


def _rounds() -> int:
    text = os.environ.get(ROUNDS_VARIABLE, "1")
    if not text.isdigit() or int(text) < 1:
        raise pytest.UsageError(f"{ROUNDS_VARIABLE}={text!r}: expected a whole number of rounds, 1 or more")
    return int(text)


ROUNDS = _rounds()
MAX_OFFSETS_PER_TRIGGER = 1000
# the arrival at which each point pauses: the second micro-batch a run plans or commits, or a
# write task after the three of the first one, so every run also completes a batch
PAUSE_ARRIVAL = {"source-planned": 2, "task-started": 4, "mid-write": 4, "task-done": 4, "commit": 2}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, zookeeper: Any) -> Iterator[BrokerCluster]:
    connect = f"{zookeeper.connect_string}/spark-faults-{uuid.uuid4().hex[:8]}"
    brokers = BrokerCluster(tmp_path_factory.mktemp("spark-faults"), connect, size=3).start()
    try:
        yield brokers
    finally:
        brokers.stop()


def new_topic(bootstrap: str, prefix: str) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(name, 3, 2)])
    finally:
        admin.close()
    return name


class Producer(threading.Thread):
    """Writes the numbered records in chunks while the query runs (acks=all, idempotent)."""

    def __init__(self, bootstrap: str, topic: str, chunk: int = 1000, pause_s: float = 0.3) -> None:
        super().__init__(name="spark-fault-producer", daemon=True)
        self.bootstrap, self.topic, self.chunk, self.pause_s = bootstrap, topic, chunk, pause_s
        self.error: BaseException | None = None

    def run(self) -> None:
        producer = KafkaProducer(bootstrap_servers=self.bootstrap, acks="all", enable_idempotence=True, linger_ms=5)
        try:
            for first in range(0, RECORDS, self.chunk):
                futures = [producer.send(self.topic, value=b"%05d" % index, key=b"k%d" % (index % 97),
                                         partition=index % 3) for index in range(first, first + self.chunk)]
                for future in futures:
                    future.get(120)
                time.sleep(self.pause_s)  # pacing: records keep arriving over several driver runs
        except BaseException as exc:  # reported by the test
            self.error = exc
        finally:
            producer.close()


def read_values(bootstrap: str, topic: str) -> list[bytes]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False)
    try:
        tps = [TopicPartition(topic, number) for number in sorted(consumer.partitions_for_topic(topic) or ())]
        consumer.assign(tps)
        ends = consumer.end_offsets(tps)
        for tp in tps:
            consumer.seek(tp, 0)
        values: list[bytes] = []
        deadline = time.monotonic() + 60
        while any(consumer.position(tp) < ends[tp] for tp in tps):
            assert time.monotonic() < deadline, "reading the output back took too long"
            for records in consumer.poll(timeout_ms=500).values():
                values.extend(record.value for record in records)
        return values
    finally:
        consumer.close()


def _last_batch(directory: Path) -> int:
    numbers = [int(path.name) for path in directory.iterdir() if path.name.isdigit()] if directory.exists() else []
    return max(numbers, default=-1)


@dataclasses.dataclass
class DriverRun:
    """One driver run: its process (started held), what it is for, and its pause folder."""

    number: int
    point: str | None  # the pause point it is killed at; None for the draining run
    driver: SparkDriverProcess
    pauses: Path


class CopyJob:
    """The copy query's driver runs, kills and checkpoint for one test.

    Each run is started held (:class:`tests.support.spark_copy_driver` with ``--hold``): its
    JVM and the query's definition are set up while the run before it is still going, and it
    starts the query, the first thing that reads the checkpoint, only when :meth:`kill_at` or
    :meth:`drain` releases it, after the run before it is dead."""

    def __init__(self, bootstrap: str, source: str, sink: str, directory: Path) -> None:
        self.bootstrap, self.source, self.sink, self.directory = bootstrap, source, sink, directory
        self.checkpoint = directory / "checkpoint"
        self.runs = 0
        self.kills: list[str] = []
        self.seconds: list[float] = []  # per driver run: release to kill, or to the end of the drain
        self.copied_before_drain = 0

    def launch(self, point: str | None) -> DriverRun:
        """Start the next run, held: killed at ``point``, or (None) the draining availableNow run
        (no pause; bigger micro-batches)."""
        self.runs += 1
        local_dir = self.directory / f"local-{self.runs}"
        local_dir.mkdir()
        pauses = self.directory / f"pauses-{self.runs}"
        pauses.mkdir()
        if point is None:
            extra = ["--available-now", "--max-offsets-per-trigger", str(5 * MAX_OFFSETS_PER_TRIGGER)]
            environment = None
        else:
            extra = ["--max-offsets-per-trigger", str(MAX_OFFSETS_PER_TRIGGER)]
            environment = {PAUSE_POINT_ENV: f"{point}:{PAUSE_ARRIVAL[point]}", PAUSE_DIRECTORY_ENV: str(pauses)}
        driver = SparkDriverProcess("tests.support.spark_copy_driver", [
            self.bootstrap, self.source, self.sink, str(self.checkpoint), str(local_dir), *extra, "--hold"],
            self.directory / f"driver-{self.runs}.log", environment, held=True)
        return DriverRun(self.runs, point, driver, pauses)

    def kill_at(self, run: DriverRun) -> None:
        """Release the run, let it go until it pauses at its point, then kill the driver there."""
        assert run.point is not None
        began = time.monotonic()
        run.driver.release()
        try:
            run.driver.wait_for_file(run.pauses, f"paused-{run.point}-", timeout=240)
            if run.point == "source-planned":  # Spark logged the batch's offsets and did not commit it
                assert _last_batch(self.checkpoint / "offsets") > _last_batch(self.checkpoint / "commits")
        finally:
            run.driver.kill()
        self.kills.append(run.point)
        self.seconds.append(time.monotonic() - began)

    def drain(self, run: DriverRun) -> None:
        """Release the draining run and wait until it has copied what is left."""
        assert run.point is None
        consumer = KafkaConsumer(bootstrap_servers=self.bootstrap, enable_auto_commit=False)
        try:
            self.copied_before_drain = sum(consumer.end_offsets(
                [TopicPartition(self.sink, number) for number in range(3)]).values())
        finally:
            consumer.close()
        began = time.monotonic()
        run.driver.release()
        code = run.driver.wait(timeout=300)
        assert code == 0, f"the draining run failed:\n{run.driver.log_tail()}"
        self.seconds.append(time.monotonic() - began)


def _check_output(bootstrap: str, sink: str, job: CopyJob, seconds: float) -> None:
    kills = job.kills
    values = read_values(bootstrap, sink)
    counts = Counter(values)
    expected = {b"%05d" % index for index in range(RECORDS)}
    duplicates = sum(count - 1 for count in counts.values() if count > 1)
    missing = len(expected - set(counts))
    unexpected = len(set(counts) - expected)
    print(f"\nkills {len(kills)} at {Counter(kills)}: {RECORDS} in, {len(values)} out, {duplicates} duplicates, "
          f"{missing} missing, {unexpected} unexpected ({job.copied_before_drain} copied before the last run), "
          f"{seconds:.0f} s (driver runs: "
          + ", ".join(f"{item:.0f}" for item in job.seconds) + " s)")
    assert (len(values), duplicates, missing, unexpected) == (RECORDS, 0, 0, 0)
    # every run between the kills completes a micro-batch before it is killed
    assert job.copied_before_drain >= MAX_OFFSETS_PER_TRIGGER * len(kills) // 2, \
        "the runs between the kills should have copied records too"


# About 3 minutes a round on two cores (5 driver runs, then the draining one); the default is 300 s.
@pytest.mark.timeout(300 + 300 * ROUNDS)
def test_driver_killed_at_every_point_while_a_broker_dies_and_returns(cluster: BrokerCluster,
                                                                      tmp_path: Path) -> None:
    began = time.monotonic()
    bootstrap = cluster.bootstrap
    source, sink = new_topic(bootstrap, "faults-in"), new_topic(bootstrap, "faults-out")
    producer = Producer(bootstrap, source)
    producer.start()
    job = CopyJob(bootstrap, source, sink, tmp_path)
    victim = cluster.brokers[max(cluster.brokers)]
    # the rounds of a kill at every point, then the draining run
    points: list[str | None] = [*(list(PAUSE_POINTS) * ROUNDS), None]
    kills = len(points) - 1
    broker_killed_at, broker_restarted_at = max(1, kills // 3), max(2, 2 * kills // 3)
    upcoming = job.launch(points[0])
    try:
        for index in range(len(points)):
            current = upcoming
            if index == broker_killed_at:  # the middle kills run with a broker killed (-9) ...
                victim.kill()
            if index == broker_restarted_at:  # ... and the last ones while it comes back and catches up
                victim.start()
                victim.wait_ready()
            if index + 1 < len(points):  # the next run sets up while this one runs
                upcoming = job.launch(points[index + 1])
            if current.point is not None:
                job.kill_at(current)
            else:
                producer.join(300)
                assert not producer.is_alive() and producer.error is None, producer.error
                job.drain(current)
    finally:
        upcoming.driver.kill()
    assert Counter(job.kills) == Counter(dict.fromkeys(PAUSE_POINTS, ROUNDS))
    _check_output(bootstrap, sink, job, time.monotonic() - began)
