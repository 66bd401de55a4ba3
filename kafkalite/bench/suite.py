"""The benchmark suite: the project's performance targets, measured in one command.

``scripts/bench.sh`` → ``python -m kafkalite.bench.suite [--quick] [--only P1,P3] [--docs PATH |
--no-docs] [--dir DIR]``. Scenarios (100-byte values throughout):

* **P1** one producer, 1 broker, replication factor 1, acks=1: ``send()`` and the bulk
  ``send_batch()`` (target ≥ 1,000,000 records/s);
* **P2** one producer, 3 brokers, replication factor 3, acks=all, ``min.insync.replicas=2``:
  ``send()`` and ``send_batch()`` (target ≥ 400,000 records/s);
* **P3** one consumer reading 10 M records (``--quick``: 1 M) with ``poll_batches()``, and
  fewer with ``poll()`` (target ≥ 1,000,000 records/s, the ``fetch.nMsg.sec`` column);
* **P4** end-to-end latency at 10,000 records/s, acks=all, replication factor 3 (targets p50
  ≤ 2 ms, p99 ≤ 5 ms, p99.9 ≤ 14 ms), printed beside its floor: the same messages between five
  minimal processes with no broker work (:mod:`kafkalite.bench.latency_floor`);
* **P5** storage append and sequential fetch rate on a 5 GB log against a 5 MB log (target ≥
  0.9×; ``--quick``: a 1 GB log), with the functions of :mod:`kafkalite.bench.storage`.
* **P6** confluent-kafka (librdkafka) over Kafka's wire protocol, 1 broker, acks=1: producer and
  consumer against the kafkalite broker, printed beside the same runs against librdkafka's
  built-in mock cluster (``test.mock.num.brokers=1``), with :mod:`kafkalite.bench.kafka_clients`
  (targets: produce ≥ 1,000,000 records/s and ≥ 0.8× the mock; consume ≥ 1,500,000 records/s).
* **P7** transactional producers, 3 brokers, replication factor 3, acks=all,
  ``min.insync.replicas=2``: ``send()`` in transactions of 100 and of 10,000 records, printed
  beside the same producer idempotent without transactions, in three alternating rounds (each
  transactional run compared with its round's idempotent run; the median ratio is reported), with
  :mod:`kafkalite.bench.transactions` (target at 10,000 records per transaction ≥ 0.8× idempotent).
* **P8** TLS: the bulk producer (``send_batch()``, acks=1) and consumer (``poll_batches()``) on the
  1-broker cluster's SSL listener, printed beside the same runs on its PLAINTEXT listener
  (target ≥ 0.8× plaintext), with the tools' ``--producer.config`` / ``--consumer.config``
  (``security.protocol=SSL``, ``ssl.ca.location``) and certificates from :mod:`kafkalite.security.certs`.
* **P9** the per-record ``send()`` loop without callbacks, with :mod:`kafkalite.bench.send_path`: 1 broker,
  acks=1, the compiled send path and then the pure-Python one (``KAFKALITE_NO_EXTENSIONS=1``), each printed
  beside confluent-kafka's ``produce()`` on librdkafka's mock cluster in the same program, in alternating
  rounds (target ≥ 1,000,000 records/s and ≥ 0.9× the mock); and 3 brokers, RF=3, acks=all (target ≥
  600,000 records/s).
* **P10** what partitions cost an idle cluster, with :mod:`kafkalite.bench.scale` on a cluster of its own
  (3 brokers, RF=3, topics of 100 partitions): 1,000, 3,000 then 10,000 partitions (``--quick``: 1,000),
  each step created in one CreateTopics request; creation until in sync, idle CPU (20 s after the sync),
  RSS and open files per broker,
  Metadata for every topic, one ``/metrics`` scrape (targets from 10,000 partitions: 1,000 created and in
  sync ≤ 5 s, idle CPU ≤ 2% of a core per broker, RSS ≤ 500 MB, Metadata median ≤ 50 ms, scrape ≤ 200 ms);
  then at 10,000 (not with ``--quick``) SIGTERM of a broker (exit ≤ 10 s, no partition ever without a live
  leader in samples every 100 ms), its restart (back in every ISR ≤ 30 s), kill -9 of the controller
  (every partition led ≤ the ZooKeeper session timeout + 3 s) and the cluster's stop;
* **P11** endurance, with :mod:`kafkalite.bench.endurance` on a cluster of its own: keyed records at
  20,000 records/s for 30 minutes (``--quick``: 3) into 12 partitions, RF=3, acks=all, read by a 3-member
  group of confluent-kafka consumers; RSS, CPU, lag and latency sampled each minute (targets: RSS slope
  ≤ 1 MB per 10 minutes per broker after 5 minutes, lag never above one second of records, the last
  minute's p99 ≤ 1.5× the first's);
* **P12** confluent-kafka acknowledgements at a paced rate, 3 brokers, RF=3, acks=all,
  ``min.insync.replicas=2``, linger.ms=5, with :mod:`kafkalite.bench.paced_acks`: keyed records over 12
  partitions (several partitions per ProduceRequest) beside unkeyed ones at 5,000 and 50,000
  records/s (target: keyed p99 ≤ 2× unkeyed); one partition at 5,000 records/s with and without a
  confluent-kafka consumer assigned to it, in 10 alternating runs (target: every run with the consumer
  ≤ 1.5× the run before it without); and end-to-end latency at 20,000 records/s, keyed over 12
  partitions, read by a 3-member group, beside one partition and one member (target: p50 ≤ 5 ms,
  p99 ≤ 25 ms).

P1–P4 (and P6 and P7, with their own programs) run the command-line tools (``kafkalite.tools.producer_perf_test``,
``consumer_perf_test``, ``e2e_latency``) as child processes against clusters the suite starts
itself: one ZooKeeper, then 1 broker (P1, P3), then 3 brokers (P2, P4), all on free loopback
ports under a temporary directory. Each tool run reports its wall time and the CPU seconds of
the tool and of the brokers, so that a figure can be told client-bound or broker-bound.

Output: progress on standard error, then ONE markdown table on standard output (scenario,
figure, target, met/missed). A full run (every scenario, no ``--quick``) also writes the table,
the date and the machine (nproc, CPU model, Python version) into ``docs/performance.md``
between the markers of its "Benchmark suite" section (appending the section when missing);
``--docs PATH`` writes any run to PATH, ``--no-docs`` writes nothing.

Bounds: a time budget of 14 minutes (``--quick``: 170 s) of which P5's share is kept back
while P1–P4 run; each tool run is also limited (4 minutes, ``--quick`` 1), and a run cut short,
or not started for want of time, is reported as such in the table. P10 and P11 have time limits
of their own beyond the budget (30 minutes; P11's minutes and 5 more), so a full run takes about
an hour on the project's 2-core machine; without them (``--only`` the others) about 8 minutes,
``--quick`` about 1 plus P10's and P11's few minutes. P5 first checks the
free space of ``--dir`` and is skipped, with the reason in the table, when it is short.
Everything written is deleted at the end, and every process started is stopped — also on
Ctrl-C or SIGTERM.

Figures depend on the machine and on what else runs on it: compare runs of one machine only.
"""

from __future__ import annotations

import datetime
import os
import platform
import re
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from kafkalite.bench.procfs import cpu_seconds
from kafkalite.local.cluster import PACKAGE_PARENT, BrokerCluster
from kafkalite.local.zookeeper import ZooKeeperServer, ensure_zookeeper_installed
from kafkalite.tools.common import ToolArgumentParser

ROOT = Path(__file__).resolve().parents[2]
DOCS_PATH = ROOT / "docs" / "performance.md"
RESULTS_START = "<!-- benchmark-suite-results:start -->"
RESULTS_END = "<!-- benchmark-suite-results:end -->"
#: Seconds a tool has, after SIGTERM at its time limit, to stop what it started before SIGKILL.
STOP_GRACE_SECONDS = 90.0
#: P10's own time limit: it starts and stops a cluster of thousands of partitions.
P10_TIMEOUT_SECONDS = 1800.0
#: P11's time limit beyond its minutes of sending: the cluster's start, the group's join, the drain.
P11_EXTRA_SECONDS = 300.0
SCENARIOS = ("P1", "P2", "P3", "P4", "P5", "P6", "P7", "P8", "P9", "P10", "P11", "P12")
RECORD_SIZE = 100
MiB = 1024 * 1024
MB = 1000 * 1000
P5_ROUNDS = 5

PRODUCER_TOTAL = re.compile(
    r"^(?P<records>\d+) records sent, (?P<rate>[\d.]+|inf) records/sec \((?P<megabytes>[\d.]+|inf) MB/sec\), "
    r"(?P<average>[\d.]+) ms avg latency, (?P<maximum>[\d.]+) ms max latency, (?P<p50>\d+) ms 50th, "
    r"(?P<p95>\d+) ms 95th, (?P<p99>\d+) ms 99th, (?P<p999>\d+) ms 99\.9th\.$")
CONSUMER_HEADER = ("start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, "
                   "rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec")
LATENCY_AVERAGE = re.compile(r"^Avg latency: (?P<average>[\d.]+) ms$")
LATENCY_PERCENTILES = re.compile(
    r"^Percentiles: 50th = (?P<p50>[\d.]+), 99th = (?P<p99>[\d.]+), 99\.9th = (?P<p999>[\d.]+)$")
LATENCY_FLOOR = re.compile(
    r"^latency floor: p50 (?P<p50>[\d.]+) ms, p99 (?P<p99>[\d.]+) ms, p99\.9 (?P<p999>[\d.]+) ms, "
    r"avg (?P<average>[\d.]+) ms \((?P<received>\d+) records at (?P<rate>[\d.]+) records/s sent\)$")
LATENCY_RATE = re.compile(
    r"^Sent (?P<sent>\d+) records in (?P<seconds>[\d.]+) s \((?P<rate>[\d.]+) records/s\); "
    r"received (?P<received>\d+), lost (?P<lost>\d+), duplicated (?P<duplicated>\d+)\.$")

# Broker settings of the suite's clusters: Kafka's defaults where the test helper shortens them
# for fast failure detection (those shortened values would add replication churn under load).
BROKER_PROPERTIES = {
    "replica.lag.time.max.ms": "30000",
    "replica.fetch.wait.max.ms": "500",
    "replica.fetch.backoff.ms": "1000",
    "log.retention.check.interval.ms": "300000",
    "group.initial.rebalance.delay.ms": "0",
}


@dataclass
class Sizes:
    """How much each scenario does (full run or ``--quick``)."""

    p1_send: int
    p1_bulk: int
    p2_send: int
    p2_bulk: int
    p3_bulk: int
    p3_poll: int
    p4_records: int
    p5_large_bytes: int
    p5_small_bytes: int
    p5_probe_bytes: int
    p6_records: int
    p7_records: int
    p7_small_records: int
    tool_timeout: float
    p8_records: int
    p9_records: int
    budget_seconds: float
    p5_reserve_seconds: float
    p12_seconds: float = 10.0
    p12_repeat: int = 10
    p12_repeat_seconds: float = 5.0
    p11_minutes: int = 30
    p11_warm_up_minutes: int = 5
    p10_steps: str = "1000,3000,10000"
    p10_faults: bool = True

    @classmethod
    def for_mode(cls, quick: bool) -> Sizes:
        """The sizes of a full run or of ``--quick``."""
        if quick:
            return cls(p1_send=100_000, p1_bulk=1_000_000, p2_send=50_000, p2_bulk=500_000, p3_bulk=1_000_000,
                       p3_poll=200_000, p4_records=50_000, p5_large_bytes=1000 * MB, p5_small_bytes=5 * MB,
                       p5_probe_bytes=128 * MiB, p6_records=1_000_000, p7_records=300_000, p7_small_records=30_000,
                       tool_timeout=60.0, p8_records=1_000_000, p9_records=300_000, budget_seconds=170.0,
                       p5_reserve_seconds=45.0, p12_seconds=3.0, p12_repeat=1, p12_repeat_seconds=3.0,
                       p10_steps="1000", p10_faults=False, p11_minutes=3, p11_warm_up_minutes=1)
        return cls(p1_send=1_000_000, p1_bulk=10_000_000, p2_send=300_000, p2_bulk=3_000_000, p3_bulk=10_000_000,
                   p3_poll=1_000_000, p4_records=300_000, p5_large_bytes=5000 * MB, p5_small_bytes=5 * MB,
                   p5_probe_bytes=256 * MiB, p6_records=3_000_000, p7_records=1_000_000, p7_small_records=100_000,
                   tool_timeout=240.0, p8_records=3_000_000, p9_records=1_500_000, budget_seconds=840.0,
                   p5_reserve_seconds=180.0)


@dataclass
class Row:
    """One line of the results table."""

    scenario: str
    figure: str
    target: str
    verdict: str


@dataclass
class ToolRun:
    """A finished tool process: its output lines and what it cost."""

    lines: list[str]
    returncode: int
    seconds: float
    client_cpu: float
    broker_cpu: float
    timed_out: bool = False
    errors: list[str] = field(default_factory=list)
    skipped: bool = False

    def failure(self) -> str | None:
        """Why the run gave no figure, or None when it completed."""
        if self.skipped:
            return "skipped: the suite's time budget ran out"
        if self.timed_out:
            return f"timed out after {self.seconds:.0f} s"
        if self.returncode != 0:
            detail = self.errors[-1] if self.errors else f"exit code {self.returncode}"
            return f"failed: {detail}"
        return None


def log(message: str) -> None:
    """Progress, on standard error (standard output carries only the table)."""
    print(f"[bench] {message}", file=sys.stderr, flush=True)


def verdict(met: bool) -> str:
    """The met/missed column."""
    return "met" if met else "missed"


# --- processes --------------------------------------------------------------------------------


def children_cpu_seconds() -> float:
    """CPU seconds of the waited-for child processes so far (the tool runs)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


class Runner:
    """Runs the tools as child processes against the current cluster and measures them."""

    def __init__(self, timeout: float, deadline: float, notes: list[str]) -> None:
        self.timeout = timeout
        self.deadline = deadline
        self.reserve = 0.0  # seconds kept back for what comes after the tools (P5)
        self.notes = notes
        self.broker_pids: list[int] = []
        self.environment = dict(os.environ,
                                PYTHONPATH=str(PACKAGE_PARENT) + os.pathsep + os.environ.get("PYTHONPATH", ""))

    def run(self, module: str, arguments: Sequence[str], label: str,
            environment: dict[str, str] | None = None, timeout: float | None = None) -> ToolRun:
        """Run ``python -m module arguments`` (with ``environment`` added to the suite's),
        echoing its output as progress; bounded in time by the tool limit (or ``timeout``) and by
        what is left of the suite's budget. At the limit the tool gets SIGTERM, so that it stops
        what it started, and SIGKILL only if it is still running :data:`STOP_GRACE_SECONDS` later."""
        command = [sys.executable, "-m", module, *arguments]
        limit = min(self.timeout if timeout is None else timeout, self.deadline - time.monotonic() - self.reserve)
        if limit < 5:
            log(f"{label}: skipped, the time budget ran out")
            return ToolRun([], 0, 0.0, 0.0, 0.0, skipped=True)
        log(f"{label}: {' '.join(command[2:])}")
        brokers_before = sum(cpu_seconds(pid) for pid in self.broker_pids)
        children_before = children_cpu_seconds()
        started = time.monotonic()
        process = subprocess.Popen(command, cwd=ROOT, env=dict(self.environment, **(environment or {})),
                                   stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True)
        timed_out = threading.Event()

        def expire() -> None:
            timed_out.set()
            process.terminate()
            killer = threading.Timer(STOP_GRACE_SECONDS, process.kill)
            killer.daemon = True
            killer.start()

        watchdog = threading.Timer(limit, expire)
        watchdog.daemon = True
        watchdog.start()
        errors: list[str] = []
        reader = threading.Thread(target=lambda: errors.extend(line.rstrip("\n") for line in process.stderr or ()),
                                  daemon=True)
        reader.start()
        lines: list[str] = []
        try:
            for line in process.stdout or ():
                line = line.rstrip("\n")
                lines.append(line)
                if line:
                    log(f"  {line}")
            process.wait()
        except BaseException:  # the suite is interrupted: the tool stops what it started, as at its limit
            process.terminate()
            try:
                process.wait(STOP_GRACE_SECONDS)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            raise
        finally:
            watchdog.cancel()
            reader.join(5)
        seconds = time.monotonic() - started
        for line in errors:
            log(f"  stderr: {line}")
        result = ToolRun(lines, process.returncode, seconds, children_cpu_seconds() - children_before,
                         sum(cpu_seconds(pid) for pid in self.broker_pids) - brokers_before,
                         timed_out.is_set(), errors)
        log(f"  wall {seconds:.1f} s, tool CPU {result.client_cpu:.1f} s, broker CPU {result.broker_cpu:.1f} s")
        self.notes.append(f"{label}: wall {seconds:.1f} s, tool {result.client_cpu:.1f} s, "
                          f"brokers {result.broker_cpu:.1f} s")
        return result


class Environment:
    """ZooKeeper and the current broker cluster, started on demand, stopped in :meth:`close`."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.zookeeper: ZooKeeperServer | None = None
        self.cluster: BrokerCluster | None = None
        #: the current cluster once every broker of it is up (what the metrics scraper scrapes)
        self.running: BrokerCluster | None = None
        self.cluster_number = 0
        #: With ``start_cluster(tls=True)``: the brokers' SSL listener addresses and the client
        #: properties file (``security.protocol=SSL``, ``ssl.ca.location``) that reaches them.
        self.tls_bootstrap = ""
        self.tls_client_properties: Path | None = None

    def start_cluster(self, size: int, tls: bool = False) -> BrokerCluster:
        """Stop the current cluster (deleting its data) and start one of ``size`` brokers (each
        with an SSL listener beside its PLAINTEXT one when ``tls``)."""
        self.stop_cluster()
        if self.zookeeper is None:
            ensure_zookeeper_installed()
            self.zookeeper = ZooKeeperServer(self.directory / "zookeeper", tick_time=500)
            self.zookeeper.start()
        self.cluster_number += 1
        directory = self.directory / f"cluster-{self.cluster_number}"
        chroot = f"{self.zookeeper.connect_string}/bench-{uuid.uuid4().hex[:8]}"
        log(f"starting {size} broker(s)")
        cluster = self.cluster = BrokerCluster(directory, chroot, size=size, extra_properties=BROKER_PROPERTIES)
        if tls:
            self._add_tls_listeners(cluster, directory / "pki")
        try:
            cluster.start()
        except BaseException:
            self.stop_cluster()
            raise
        log(f"brokers at {cluster.bootstrap}")
        self.running = cluster
        return cluster

    def _add_tls_listeners(self, cluster: BrokerCluster, pki: Path) -> None:
        from kafkalite.local.cluster import free_port
        from kafkalite.security import certs

        ca = certs.make_ca(pki)
        server = certs.make_server_certificate(ca, pki)
        cluster.extra_properties.update({"ssl.keystore.type": "PEM",
                                         "ssl.keystore.location": str(server.keystore_path)})
        addresses = []
        for broker_id, broker in cluster.brokers.items():
            port = free_port()
            addresses.append(f"localhost:{port}")
            cluster.per_broker_properties[broker_id] = {
                "listeners": f"PLAINTEXT://127.0.0.1:{broker.port},SSL://127.0.0.1:{port}",
                "advertised.listeners": f"PLAINTEXT://127.0.0.1:{broker.port},SSL://localhost:{port}"}
        self.tls_bootstrap = ",".join(addresses)
        self.tls_client_properties = pki / "client.properties"
        self.tls_client_properties.write_text(f"security.protocol=SSL\nssl.ca.location={ca.certificate_path}\n")

    def broker_pids(self) -> list[int]:
        """Process ids of the current cluster's brokers."""
        if self.cluster is None:
            return []
        return [broker.process.pid for broker in self.cluster.brokers.values() if broker.process is not None]

    def stop_cluster(self) -> None:
        """Stop the current cluster and delete its data."""
        self.running = None
        if self.cluster is not None:
            cluster, self.cluster = self.cluster, None
            cluster.stop()
            shutil.rmtree(cluster.directory, ignore_errors=True)

    def close(self) -> None:
        """Stop the cluster and ZooKeeper."""
        try:
            self.stop_cluster()
        finally:
            if self.zookeeper is not None:
                zookeeper, self.zookeeper = self.zookeeper, None
                zookeeper.stop()


class MetricsScraper:
    """Scrapes ``GET /metrics`` of every live broker of the environment's current cluster every
    ``interval`` seconds while the scenarios run (``--scrape-metrics``), as Prometheus would, so
    the figures show what scraping costs. A thread of its own; stopped by :meth:`stop`."""

    def __init__(self, environment: Environment, interval: float) -> None:
        self.environment, self.interval = environment, interval
        self.scrapes = self.failures = 0
        self.seconds = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="metrics-scraper", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        import urllib.request

        while not self._stop.wait(self.interval):
            cluster = self.environment.running
            if cluster is None:
                continue
            for broker in list(cluster.brokers.values()):
                began = time.monotonic()
                try:
                    with urllib.request.urlopen(f"http://{broker.address}/metrics", timeout=5) as answer:
                        answer.read()
                    self.scrapes += 1
                    self.seconds += time.monotonic() - began
                except OSError:  # a broker being replaced between scenarios
                    self.failures += 1

    def stop(self) -> str:
        """Stop scraping; one line describing what was scraped."""
        self._stop.set()
        self._thread.join(10)
        mean = self.seconds / self.scrapes * 1000 if self.scrapes else 0.0
        return (f"/metrics scraped every {self.interval:g} s: {self.scrapes} scrapes (mean {mean:.1f} ms), "
                f"{self.failures} failed")


# --- parsing the tools' output ----------------------------------------------------------------


def producer_figures(run: ToolRun) -> dict[str, float] | None:
    """The numbers of the producer tool's final line, or None."""
    for line in reversed(run.lines):
        match = PRODUCER_TOTAL.match(line)
        if match:
            return {name: float(value) for name, value in match.groupdict().items()}
    return None


def consumer_figures(run: ToolRun) -> dict[str, float] | None:
    """The numbers of the consumer tool's row (by column name), or None."""
    columns = CONSUMER_HEADER.split(", ")
    for position, line in enumerate(run.lines):
        if line == CONSUMER_HEADER and position + 1 < len(run.lines):
            values = run.lines[position + 1].split(", ")
            if len(values) == len(columns):
                return {name: float(value) for name, value in zip(columns[2:], values[2:])}
    return None


def latency_figures(run: ToolRun) -> dict[str, float] | None:
    """The numbers of the end-to-end latency tool's result lines, or None."""
    figures: dict[str, float] = {}
    for line in run.lines:
        for pattern in (LATENCY_AVERAGE, LATENCY_PERCENTILES, LATENCY_RATE):
            match = pattern.match(line)
            if match:
                figures.update({name: float(value) for name, value in match.groupdict().items()})
    return figures if "p50" in figures else None


# --- scenarios ---------------------------------------------------------------------------------


def producer_arguments(topic: str, records: int, bootstrap: str, acks: str, batch_size: int,
                       bulk: bool) -> list[str]:
    """The producer tool's command line for one scenario."""
    arguments = ["--topic", topic, "--num-records", str(records), "--record-size", str(RECORD_SIZE),
                 "--throughput", "-1", "--producer-props", f"bootstrap.servers={bootstrap}", f"acks={acks}",
                 "linger.ms=5", f"batch.size={batch_size}"]
    return arguments + (["--bulk"] if bulk else [])


def produce_row(runner: Runner, label: str, target_rate: float, arguments: list[str]) -> tuple[Row, ToolRun]:
    """Run the producer tool and turn its final line into a table row."""
    run = runner.run("kafkalite.tools.producer_perf_test", arguments, label)
    figures = producer_figures(run)
    target = f">= {target_rate:,.0f} records/s"
    problem = run.failure()
    if problem or figures is None:
        return Row(label, problem or "no result line", target, "skipped" if run.skipped else "missed"), run
    figure = (f"{figures['rate']:,.0f} records/s ({figures['megabytes']:.1f} MB/s); latency p50 "
              f"{figures['p50']:.0f} ms, p99 {figures['p99']:.0f} ms")
    return Row(label, figure, target, verdict(figures["rate"] >= target_rate)), run


def consume_row(runner: Runner, label: str, bootstrap: str, topic: str, messages: int, bulk: bool,
                config: Path) -> Row:
    """Run the consumer tool and turn its row into a table row."""
    arguments = ["--bootstrap-server", bootstrap, "--topic", topic, "--messages", str(messages),
                 "--timeout", "20000", "--fetch-size", str(4 * MiB), "--consumer.config", str(config),
                 "--group", f"bench-{uuid.uuid4().hex[:8]}"]
    run = runner.run("kafkalite.tools.consumer_perf_test", arguments + (["--bulk"] if bulk else []), label)
    figures = consumer_figures(run)
    target = ">= 1,000,000 records/s"
    problem = run.failure()
    if problem or figures is None:
        return Row(label, problem or "no result row", target, "skipped" if run.skipped else "missed")
    consumed = int(figures["data.consumed.in.nMsg"])
    rate = figures["fetch.nMsg.sec"]
    figure = (f"{rate:,.0f} records/s ({figures['fetch.MB.sec']:.1f} MB/s) over {consumed:,} records; "
              f"{figures['nMsg.sec']:,.0f}/s with the {figures['rebalance.time.ms']:.0f} ms group join")
    return Row(label, figure, target, verdict(rate >= 1_000_000 and consumed >= messages))


def run_single_broker(environment: Environment, runner: Runner, sizes: Sizes, wanted: set[str],
                      rows: list[Row]) -> None:
    """P1, P3, P6, P8 and P9 (acks=1) on a 1-broker cluster (P3 writes its records itself without P1)."""
    cluster = environment.start_cluster(1, tls="P8" in wanted)
    runner.broker_pids = environment.broker_pids()
    bootstrap = cluster.bootstrap
    send_topic, bulk_topic = "p1-send", "p1-bulk"
    cluster.create_topic(send_topic, partitions=1, replication_factor=1)
    cluster.create_topic(bulk_topic, partitions=1, replication_factor=1)
    bulk_records = max(sizes.p1_bulk, sizes.p3_bulk if "P3" in wanted else 0)
    if "P1" in wanted:
        row, _ = produce_row(runner, "P1 send(), 1 broker, RF=1, acks=1", 1_000_000,
                             producer_arguments(send_topic, sizes.p1_send, bootstrap, "1", 256 * 1024, False))
        rows.append(row)
        row, _ = produce_row(runner, "P1 send_batch() (--bulk), 1 broker, RF=1, acks=1", 1_000_000,
                                    producer_arguments(bulk_topic, bulk_records, bootstrap, "1", MiB, True))
        rows.append(row)
    if "P3" in wanted:
        run_consumers(environment, runner, sizes, "P1" in wanted, bulk_topic, bulk_records, rows)
    if "P6" in wanted:
        run_kafka_protocol(cluster, runner, sizes, rows)
    if "P8" in wanted:
        run_tls(environment, runner, sizes, rows)
    if "P9" in wanted:
        run_send_path(cluster, runner, sizes, rows, "1")


def run_tls(environment: Environment, runner: Runner, sizes: Sizes, rows: list[Row]) -> None:
    """P8: the bulk producer and consumer over the SSL listener beside the PLAINTEXT one."""
    cluster, client_properties = environment.cluster, environment.tls_client_properties
    assert cluster is not None and client_properties is not None, "the cluster has an SSL listener"
    consumer_tuning = "max.poll.records=10000\nfetch.max.wait.ms=100\n"
    plain_config = environment.directory / "p8-plain-consumer.properties"
    plain_config.write_text(consumer_tuning)
    tls_config = environment.directory / "p8-tls-consumer.properties"
    tls_config.write_text(client_properties.read_text() + consumer_tuning)
    produced: dict[str, float | None] = {}
    consumed: dict[str, float | None] = {}
    problems: list[str] = []
    for kind, bootstrap, extra, config in (("plaintext", cluster.bootstrap, [], plain_config),
                                           ("TLS", environment.tls_bootstrap,
                                            ["--producer.config", str(client_properties)], tls_config)):
        topic = f"p8-{kind.lower()}"
        cluster.create_topic(topic, partitions=1, replication_factor=1)
        run = runner.run("kafkalite.tools.producer_perf_test",
                         producer_arguments(topic, sizes.p8_records, bootstrap, "1", MiB, True) + extra,
                         f"P8 send_batch() over {kind}")
        figures = producer_figures(run)
        produced[kind] = figures["rate"] if figures and not run.failure() else None
        if run.failure():
            problems.append(f"{kind} producer {run.failure()}")
        arguments = ["--bootstrap-server", bootstrap, "--topic", topic, "--messages", str(sizes.p8_records),
                     "--timeout", "20000", "--fetch-size", str(4 * MiB), "--consumer.config", str(config),
                     "--group", f"bench-{uuid.uuid4().hex[:8]}", "--bulk"]
        run = runner.run("kafkalite.tools.consumer_perf_test", arguments, f"P8 poll_batches() over {kind}")
        read = consumer_figures(run)
        consumed[kind] = read["fetch.nMsg.sec"] if read and not run.failure() else None
        if run.failure():
            problems.append(f"{kind} consumer {run.failure()}")
    for label, rates in ((f"P8 send_batch() (--bulk) over TLS vs plaintext, 1 broker, acks=1, "
                          f"{sizes.p8_records / 1e6:g} M records", produced),
                         (f"P8 poll_batches() (--bulk) over TLS vs plaintext, {sizes.p8_records / 1e6:g} M records",
                          consumed)):
        tls_rate, plain_rate = rates.get("TLS"), rates.get("plaintext")
        if tls_rate is None or not plain_rate:
            rows.append(Row(label, "; ".join(problems) or "no result line", ">= 0.8x plaintext", "missed"))
            continue
        ratio = tls_rate / plain_rate
        rows.append(Row(label, f"TLS {tls_rate:,.0f} records/s vs plaintext {plain_rate:,.0f} ({ratio:.2f}x)",
                        ">= 0.8x plaintext", verdict(ratio >= 0.8)))


def run_consumers(environment: Environment, runner: Runner, sizes: Sizes, filled: bool, bulk_topic: str,
                  bulk_records: int, rows: list[Row]) -> None:
    """P3 on the current 1-broker cluster (writing the records first unless P1 did: ``filled``)."""
    bootstrap = environment.cluster.bootstrap if environment.cluster is not None else ""
    if not filled:
        fill = runner.run("kafkalite.tools.producer_perf_test",
                          producer_arguments(bulk_topic, bulk_records, bootstrap, "1", MiB, True),
                          "P3 preparation: writing the records")
        if fill.failure():
            rows.append(Row("P3 consumer", f"could not write the records: {fill.failure()}",
                            ">= 1,000,000 records/s", "missed"))
            return
    config = environment.directory / "consumer.properties"
    config.write_text("max.poll.records=10000\nfetch.max.wait.ms=100\n")
    rows.append(consume_row(runner, f"P3 poll_batches() (--bulk), {sizes.p3_bulk / 1e6:g} M records",
                            bootstrap, bulk_topic, sizes.p3_bulk, True, config))
    rows.append(consume_row(runner, f"P3 poll(), {sizes.p3_poll / 1e6:g} M records", bootstrap, bulk_topic,
                            sizes.p3_poll, False, config))


KAFKA_LINE = re.compile(r"^kafka (?P<kind>produce|consume) (?P<target>mock|kafkalite): (?P<records>\d+) records in "
                        r"(?P<seconds>[\d.]+) s, (?P<rate>[\d.]+|inf) records/s, (?P<megabytes>[\d.]+|inf) MB/s$")


def kafka_figures(run: ToolRun) -> dict[tuple[str, str], float]:
    """records/s by (produce|consume, mock|kafkalite) from :mod:`kafkalite.bench.kafka_clients`' lines."""
    figures: dict[tuple[str, str], float] = {}
    for line in run.lines:
        match = KAFKA_LINE.match(line)
        if match:
            figures[(match["kind"], match["target"])] = float(match["rate"])
    return figures


def run_kafka_protocol(cluster: BrokerCluster, runner: Runner, sizes: Sizes, rows: list[Row]) -> None:
    """P6: confluent-kafka against the kafkalite broker and against librdkafka's mock cluster."""
    records = str(sizes.p6_records)
    mock = runner.run("kafkalite.bench.kafka_clients", ["--mock", "--records", records],
                      "P6 confluent-kafka vs librdkafka's mock cluster")
    ours = runner.run("kafkalite.bench.kafka_clients", ["--bootstrap", cluster.bootstrap, "--records", records],
                      "P6 confluent-kafka vs the kafkalite broker")
    figures = {**kafka_figures(mock), **kafka_figures(ours)}
    settings = next((line for line in ours.lines if line.startswith("kafka settings: ")), "")
    if settings:
        log(f"P6 client settings (both runs): {settings.removeprefix('kafka settings: ')}")
        runner.notes.append(f"P6 client settings, the same for both runs: {settings.removeprefix('kafka settings: ')}")
    problem = ours.failure() or mock.failure()
    for kind, target_rate, label in (
            ("produce", 1_000_000, "P6 confluent-kafka Producer, Kafka protocol, 1 broker, acks=1"),
            ("consume", 1_500_000, "P6 confluent-kafka Consumer, Kafka protocol, 1 broker")):
        rate, reference = figures.get((kind, "kafkalite")), figures.get((kind, "mock"))
        target = f">= {target_rate:,.0f} records/s" + (" and >= 0.8x the mock" if kind == "produce" else "")
        if rate is None:
            rows.append(Row(label, problem or "no result line", target, "skipped" if ours.skipped else "missed"))
            continue
        ratio = rate / reference if reference else 0.0
        figure = (f"{rate:,.0f} records/s vs mock cluster {reference:,.0f} ({ratio:.2f}x)" if reference
                  else f"{rate:,.0f} records/s (mock cluster: {mock.failure() or 'no figure'})")
        met = rate >= target_rate and (kind != "produce" or ratio >= 0.8)
        rows.append(Row(label, figure, target, verdict(met)))


SEND_PATH_LINE = re.compile(r"^send-path (?P<implementation>[\w-]+): send\(\) (?P<rate>\d+) records/s"
                            r"(, produce\(\) on the mock (?P<peer>\d+) records/s, ratio (?P<ratio>[\d.]+))?$")


def run_send_path(cluster: BrokerCluster, runner: Runner, sizes: Sizes, rows: list[Row], acks: str) -> None:
    """P9: the per-record send() loop (no callbacks), compiled and pure Python, beside
    confluent-kafka's produce() on librdkafka's mock cluster (acks=1), or alone (acks=all, RF=3)."""
    topic = "p9-send"  # the 3-broker caller created it with RF=3
    runs: list[tuple[str, dict[str, str], bool]] = [("compiled", {}, False)]
    if acks == "1":
        cluster.create_topic(topic, partitions=1, replication_factor=1)
        runs = [("compiled", {}, True), ("pure-python", {"KAFKALITE_NO_EXTENSIONS": "1"}, True)]
    for name, extra, peer in runs:
        arguments = ["--bootstrap", cluster.bootstrap, "--topic", topic, "--records", str(sizes.p9_records),
                     "--acks", acks] + ([] if peer else ["--no-peer"])
        setting = "1 broker, RF=1, acks=1" if acks == "1" else "3 brokers, RF=3, acks=all, min.insync.replicas=2"
        label = f"P9 send() per record, no callbacks ({name}), {setting}"
        if acks == "1" and name == "compiled":
            target = ">= 1,000,000 records/s and >= 0.9x confluent-kafka produce() on the mock"
        elif acks == "1":
            target = "reference (the pure-Python twin)"
        else:
            target = ">= 600,000 records/s"
        run = runner.run("kafkalite.bench.send_path", arguments, label, extra)
        match = next((found for line in run.lines if (found := SEND_PATH_LINE.match(line))), None)
        problem = run.failure()
        if problem or match is None:
            rows.append(Row(label, problem or "no result line", target, "skipped" if run.skipped else "missed"))
            continue
        rate = float(match["rate"])
        if match["implementation"] != name:
            rows.append(Row(label, f"ran the {match['implementation']} send path", target, "missed"))
            continue
        figure = f"{rate:,.0f} records/s"
        if match["peer"]:
            figure += (f" vs confluent-kafka produce() on the mock {float(match['peer']):,.0f} records/s "
                       f"(median round ratio {float(match['ratio']):.2f}x)")
        if target.startswith("reference"):
            rows.append(Row(label, figure, target, "reference"))
        elif acks == "1":
            rows.append(Row(label, figure, target, verdict(rate >= 1_000_000 and float(match["ratio"] or 0) >= 0.9)))
        else:
            rows.append(Row(label, figure, target, verdict(rate >= 600_000)))


def run_three_brokers(environment: Environment, runner: Runner, sizes: Sizes, wanted: set[str],
                      rows: list[Row]) -> None:
    """P2, P4, P7, P9 (acks=all) and P12 on a 3-broker cluster."""
    cluster = environment.start_cluster(3)
    runner.broker_pids = environment.broker_pids()
    bootstrap = cluster.bootstrap
    topic_configs = {"min.insync.replicas": "2"}
    if "P2" in wanted:
        for topic in ("p2-send", "p2-bulk"):
            cluster.create_topic(topic, partitions=1, replication_factor=3, configs=topic_configs)
            cluster.wait_in_sync(topic, timeout=60)
        row, _ = produce_row(runner, "P2 send(), 3 brokers, RF=3, acks=all, min.insync.replicas=2", 400_000,
                             producer_arguments("p2-send", sizes.p2_send, bootstrap, "all", 256 * 1024, False))
        rows.append(row)
        row, _ = produce_row(runner, "P2 send_batch() (--bulk), 3 brokers, RF=3, acks=all, min.insync.replicas=2",
                             400_000, producer_arguments("p2-bulk", sizes.p2_bulk, bootstrap, "all", MiB, True))
        rows.append(row)
    if "P4" in wanted:
        rows.append(run_latency(cluster, runner, sizes, topic_configs))
        rows.append(run_latency_floor(runner, sizes))
    if "P7" in wanted:
        run_transactions(cluster, runner, sizes, topic_configs, rows)
    if "P9" in wanted:
        cluster.create_topic("p9-send", partitions=1, replication_factor=3, configs=topic_configs)
        cluster.wait_in_sync("p9-send", timeout=60)
        run_send_path(cluster, runner, sizes, rows, "all")
    if "P12" in wanted:
        run_paced_acks(cluster, runner, sizes, rows)


SCALE_LINE = re.compile(
    r"^scale (?P<partitions>\d+) partitions .*created and in sync in (?P<seconds>[\d.]+) s; "
    r"idle CPU % (?P<cpu>[\d./]+)(?: \([^)]*\))?; RSS MB (?P<rss>[\d/]+), ZooKeeper (?P<zookeeper>\d+|nan); "
    r"open files (?P<files>[\d/]+); Metadata all topics median (?P<metadata>[\d.]+) ms .*; "
    r"/metrics (?P<scrape>\d+) ms, (?P<scrape_kb>\d+) kB$")


def run_scale(runner: Runner, sizes: Sizes, rows: list[Row]) -> None:
    """P10: what partitions cost an idle 3-broker cluster (:mod:`kafkalite.bench.scale`). It has
    a time limit of its own (:data:`P10_TIMEOUT_SECONDS`), beyond the suite's budget."""
    runner.deadline = max(runner.deadline, time.monotonic() + runner.reserve + P10_TIMEOUT_SECONDS)
    run = runner.run("kafkalite.bench.scale", ["--steps", sizes.p10_steps, *(["--faults"] if sizes.p10_faults else [])],
                     "P10 partitions on an idle cluster", timeout=P10_TIMEOUT_SECONDS)
    target = ("1,000 created and in sync <= 5 s; idle CPU <= 2% per broker; RSS <= 500 MB; Metadata median "
              "<= 50 ms; scrape <= 200 ms (the issue's figures at 10,000 partitions)")
    found = [match for line in run.lines if (match := SCALE_LINE.match(line))]
    if not found:
        rows.append(Row("P10 partitions on an idle cluster", run.failure() or "no result line", target,
                        "skipped" if run.skipped else "missed"))
        return
    previous = 0
    for match in found:
        partitions = int(match["partitions"])
        created = partitions - previous
        previous = partitions
        cpu = [float(value) for value in match["cpu"].split("/")]
        rss = [float(value) for value in match["rss"].split("/")]
        per_thousand = float(match["seconds"]) * 1000 / created
        figure = (f"{created:,} created and in sync in {float(match['seconds']):.1f} s ({per_thousand:.1f} s per "
                  f"1,000); idle CPU {match['cpu']} %; RSS {match['rss']} MB (ZooKeeper {match['zookeeper']}); "
                  f"open files {match['files']}; Metadata median {match['metadata']} ms; /metrics "
                  f"{match['scrape']} ms, {match['scrape_kb']} kB")
        met = (per_thousand <= 5 and max(cpu) <= 2 and max(rss) <= 500 and float(match["metadata"]) <= 50
               and int(match["scrape"]) <= 200)
        rows.append(Row(f"P10 {partitions:,} partitions, 3 brokers, RF=3, idle", figure, target, verdict(met)))
    if not sizes.p10_faults:
        return
    fault_target = ("SIGTERM: exit <= 10 s, no leaderless sample; restart: back in every ISR <= 30 s; kill -9 of "
                    "the controller: all led <= session timeout + 3 s")
    faults = next((match for line in run.lines if (match := FAULT_LINE.match(line))), None)
    if faults is None:
        rows.append(Row("P10 faults", run.failure() or "no fault line", fault_target, "missed"))
        return
    failover = faults["failover"]
    met = (float(faults["exited"]) <= 10 and int(faults["leaderless"]) == 0 and faults["back"] is not None
           and float(faults["back"]) <= 30 and failover is not None
           and float(failover) <= int(faults["session"]) / 1000 + 3)
    figure = (f"SIGTERM of a broker leading {faults['led']}: exited in {faults['exited']} s, longest leaderless "
              f"{faults['leaderless']} ms; back in every ISR in {faults['back'] or 'not within the limit'} s; "
              f"kill -9 of the controller: all led in {failover or 'not within the limit'} s (session "
              f"{faults['session']} ms); cluster stopped in {faults['stopped']} s")
    rows.append(Row(f"P10 faults at {faults['partitions']} partitions", figure, fault_target, verdict(met)))


FAULT_LINE = re.compile(
    r"^scale faults at (?P<partitions>\d+) partitions: SIGTERM of broker \d+ leading (?P<led>\d+): exited in "
    r"(?P<exited>[\d.]+) s, longest time a partition had no live leader (?P<leaderless>\d+) ms .*; restarted, "
    r"back in every ISR in (?:(?P<back>[\d.]+) s|not within the limit); kill -9 of the controller .*: every "
    r"partition led again in (?:(?P<failover>[\d.]+) s|not within the limit) \(zookeeper.session.timeout.ms "
    r"(?P<session>\d+)\), then restarted; cluster stopped in (?P<stopped>[\d.]+) s")


PACED_LINE = re.compile(
    r"^paced (?P<client>\S+) acks=(?P<acks>\S+) (?P<kind>keyed|unkeyed) over (?P<partitions>\d+) partitions"
    r"(?P<consumer> with an assigned consumer| with a (?P<members>\d+)-member group)? (?P<rate>\d+)/s: "
    r"sent (?P<sent>\d+) acked (?P<acked>\d+) in [\d.]+ s; ack ms p50 (?P<p50>[\d.]+|nan) p99 (?P<p99>[\d.]+|nan)"
    r" max (?:[\d.]+|nan)(?:; end to end ms p50 (?P<e2e_p50>[\d.]+|nan) p99 (?P<e2e_p99>[\d.]+|nan) "
    r"\((?P<read>\d+) read\))?")


def run_paced_acks(cluster: BrokerCluster, runner: Runner, sizes: Sizes, rows: list[Row]) -> None:
    """P12: keyed against unkeyed acknowledgement latency, and one partition with and without an
    assigned consumer (:mod:`kafkalite.bench.paced_acks`)."""
    seconds = str(sizes.p12_seconds)
    run = runner.run("kafkalite.bench.paced_acks", ["--bootstrap", cluster.bootstrap, "--rates", "5000,50000",
                                                    "--seconds", seconds], "P12 keyed vs unkeyed acks=all")
    found = [match for line in run.lines if (match := PACED_LINE.match(line))]
    by_kind = {(match["kind"], int(match["rate"])): match for match in found}
    for rate in (5000, 50_000):
        label = (f"P12 confluent-kafka keyed records over 12 partitions at {rate:,} records/s, 3 brokers, RF=3, "
                 "acks=all, min.insync.replicas=2")
        target = "ack p99 <= 2x the same producer with unkeyed records"
        keyed, unkeyed = by_kind.get(("keyed", rate)), by_kind.get(("unkeyed", rate))
        if keyed is None or unkeyed is None:
            rows.append(Row(label, run.failure() or "no result line", target, "skipped" if run.skipped else "missed"))
            continue
        ratio = float(keyed["p99"]) / float(unkeyed["p99"])
        complete = all(match["sent"] == match["acked"] for match in (keyed, unkeyed))
        figure = (f"keyed p50 {keyed['p50']} / p99 {keyed['p99']} ms, unkeyed p50 {unkeyed['p50']} / "
                  f"p99 {unkeyed['p99']} ms ({ratio:.2f}x)" + ("" if complete else "; records unacknowledged"))
        rows.append(Row(label, figure, target, verdict(complete and ratio <= 2)))
    label = ("P12 one partition at 5,000 records/s, acks=all, RF=3, with a confluent-kafka consumer assigned "
             f"to it, {sizes.p12_repeat} alternating runs")
    target = "every run's ack p99 <= 1.5x the run without the consumer before it"
    run = runner.run("kafkalite.bench.paced_acks", [
        "--bootstrap", cluster.bootstrap, "--rates", "5000", "--partitions", "1", "--kinds", "unkeyed",
        "--assigned-consumer", "--repeat", str(sizes.p12_repeat), "--seconds", str(sizes.p12_repeat_seconds)], label)
    found = [match for line in run.lines if (match := PACED_LINE.match(line))]
    pairs = list(zip(found[0::2], found[1::2], strict=False))
    if len(pairs) < sizes.p12_repeat:
        rows.append(Row(label, run.failure() or "no result lines", target, "skipped" if run.skipped else "missed"))
        return
    ratios = [float(with_consumer["p99"]) / float(without["p99"]) for without, with_consumer in pairs]
    complete = all(match["sent"] == match["acked"] for match in found)
    figure = "; ".join(f"p99 {without['p99']} -> {with_consumer['p99']} ms ({ratio:.2f}x)"
                       for (without, with_consumer), ratio in zip(pairs, ratios, strict=True))
    rows.append(Row(label, figure, target, verdict(complete and max(ratios) <= 1.5)))
    rows.append(group_end_to_end_row(runner, cluster.bootstrap, seconds))


def group_end_to_end_row(runner: Any, bootstrap: str, seconds: str) -> Row:
    """P12's end-to-end row: keyed records at 20,000 records/s over 12 partitions read by a
    3-member group, beside one partition read by a 1-member group (the same producer and rate)."""
    label = ("P12 end-to-end latency at 20,000 records/s, keyed over 12 partitions, acks=all, RF=3, "
             "min.insync.replicas=2, a 3-member group (confluent-kafka)")
    target = "p50 <= 5 ms, p99 <= 25 ms"
    runs = [runner.run("kafkalite.bench.paced_acks", [
        "--bootstrap", bootstrap, "--rates", "20000", "--partitions", partitions, "--kinds", kind,
        "--group-members", members, "--seconds", seconds], f"{label} ({partitions} partitions)")
        for partitions, kind, members in (("12", "keyed", "3"), ("1", "unkeyed", "1"))]
    found = [next((match for line in run.lines if (match := PACED_LINE.match(line)) and match["e2e_p50"]), None)
             for run in runs]
    group, single = found
    if group is None:
        return Row(label, runs[0].failure() or "no result line", target, "skipped" if runs[0].skipped else "missed")
    complete = group["sent"] == group["acked"] == group["read"]
    figure = (f"p50 {group['e2e_p50']} ms, p99 {group['e2e_p99']} ms (acks p50 {group['p50']} / p99 {group['p99']} "
              f"ms; {int(group['read']):,} of {int(group['sent']):,} read)")
    if single is not None:
        figure += f"; one partition, a 1-member group: p50 {single['e2e_p50']} ms, p99 {single['e2e_p99']} ms"
    if not complete:
        figure += "; records unacknowledged or unread"
    met = complete and float(group["e2e_p50"]) <= 5 and float(group["e2e_p99"]) <= 25
    return Row(label, figure, target, verdict(met))


ENDURANCE_LINE = re.compile(
    r"^endurance (?P<minutes>\d+) min at (?P<rate>\d+)/s \((?P<shape>[^)]*)\): RSS slope MB per 10 min after "
    r"minute (?P<warm_up>\d+) (?P<slopes>[-\d./na]+) \(ZooKeeper (?P<zookeeper>[-\d.na]+)\); lag max "
    r"(?P<lag_max>\d+) records, last (?P<lag_last>-?\d+); ack p99 first minute (?P<ack_first>[\d.na]+) ms, last "
    r"(?P<ack_last>[\d.na]+) ms \((?P<ack_ratio>[\d.na]+)x\); end to end p99 first minute (?P<e2e_first>[\d.na]+) "
    r"ms, last (?P<e2e_last>[\d.na]+) ms \((?P<e2e_ratio>[\d.na]+)x\); sent (?P<sent>\d+) acked (?P<acked>\d+) "
    r"read (?P<read>\d+)(?P<failed>; \d+ failed)?$")


def run_endurance(runner: Any, sizes: Sizes, rows: list[Row]) -> None:
    """P11: a steady 20,000 records/s for ``sizes.p11_minutes`` (:mod:`kafkalite.bench.endurance`),
    with a time limit of its own beyond the suite's budget."""
    timeout = sizes.p11_minutes * 60 + P11_EXTRA_SECONDS
    runner.deadline = max(runner.deadline, time.monotonic() + runner.reserve + timeout)
    label = (f"P11 endurance, {sizes.p11_minutes} min at 20,000 records/s, keyed over 12 partitions, acks=all, "
             "RF=3, min.insync.replicas=2, a 3-member group (confluent-kafka)")
    target = ("RSS slope <= 1 MB per 10 min per broker after the warm-up; lag never above 1 s of records; the last "
              "minute's ack and end-to-end p99 <= 1.5x the first minute's")
    run = runner.run("kafkalite.bench.endurance", ["--minutes", str(sizes.p11_minutes), "--warm-up-minutes",
                                                   str(sizes.p11_warm_up_minutes)], label, timeout=timeout)
    match = next((found for line in run.lines if (found := ENDURANCE_LINE.match(line))), None)
    if match is None:
        rows.append(Row(label, run.failure() or "no result line", target, "skipped" if run.skipped else "missed"))
        return
    slopes = [float(value) for value in match["slopes"].split("/")]
    complete = match["failed"] is None and match["sent"] == match["acked"] and int(match["read"]) >= int(match["acked"])
    figure = (f"RSS slope {match['slopes']} MB per 10 min after minute {match['warm_up']} (ZooKeeper "
              f"{match['zookeeper']}); lag max {int(match['lag_max']):,} records (last {int(match['lag_last']):,}); "
              f"ack p99 {match['ack_first']} -> {match['ack_last']} ms ({match['ack_ratio']}x); end-to-end p99 "
              f"{match['e2e_first']} -> {match['e2e_last']} ms ({match['e2e_ratio']}x); {int(match['sent']):,} sent, "
              f"{int(match['read']):,} read" + ("" if complete else "; records lost or unread"))
    met = (complete and all(slope <= 1 for slope in slopes) and int(match["lag_max"]) <= int(match["rate"])
           and float(match["ack_ratio"]) <= 1.5 and float(match["e2e_ratio"]) <= 1.5)
    rows.append(Row(label, figure, target, verdict(met)))


def run_latency(cluster: BrokerCluster, runner: Runner, sizes: Sizes, topic_configs: dict[str, str]) -> Row:
    """P4: end-to-end latency at a fixed rate with ``kafkalite.tools.e2e_latency``."""
    cluster.create_topic("p4-latency", partitions=1, replication_factor=3, configs=topic_configs)
    cluster.wait_in_sync("p4-latency", timeout=60)
    label = "P4 end-to-end latency at 10,000 records/s, acks=all, RF=3"
    target = "p50 <= 2 ms, p99 <= 5 ms, p99.9 <= 14 ms"
    arguments = [cluster.bootstrap, "p4-latency", str(sizes.p4_records), "all", str(RECORD_SIZE), "--rate", "10000"]
    run = runner.run("kafkalite.tools.e2e_latency", arguments, label)
    figures = latency_figures(run)
    problem = run.failure()
    if figures is None:
        return Row(label, problem or "no result lines", target, "skipped" if run.skipped else "missed")
    figure = (f"p50 {figures['p50']:.2f} ms, p99 {figures['p99']:.2f} ms, p99.9 {figures['p999']:.2f} ms "
              f"(avg {figures.get('average', float('nan')):.2f} ms; {figures.get('rate', 0):,.0f} records/s sent, "
              f"{int(figures.get('lost', 0))} lost)")
    met = (problem is None and figures["p50"] <= 2 and figures["p99"] <= 5 and figures["p999"] <= 14)
    return Row(label, figure, target, verdict(met))


def run_latency_floor(runner: Runner, sizes: Sizes) -> Row:
    """P4's floor: its messages between five minimal processes (:mod:`kafkalite.bench.latency_floor`)."""
    label = ("P4 floor: the same messages at 10,000 records/s between five minimal Python processes "
             "(no broker work)")
    target = "reference: what P4 can reach at best on this machine"
    run = runner.run("kafkalite.bench.latency_floor", ["--records", str(sizes.p4_records), "--rate", "10000",
                                                       "--record-size", str(RECORD_SIZE)], label)
    match = next((found for line in run.lines if (found := LATENCY_FLOOR.match(line))), None)
    problem = run.failure()
    if match is None or problem:
        return Row(label, problem or "no result line", target, "skipped" if run.skipped else "missed")
    figure = (f"p50 {float(match['p50']):.2f} ms, p99 {float(match['p99']):.2f} ms, "
              f"p99.9 {float(match['p999']):.2f} ms (avg {float(match['average']):.2f} ms)")
    return Row(label, figure, target, "reference")


TXN_LINE = re.compile(r"^txn produce (?P<label>idempotent|transactional (?P<size>\d+)): (?P<records>\d+) records in "
                      r"(?P<seconds>[\d.]+) s, (?P<rate>[\d.]+|inf) records/s"
                      r"(?:.*median ratio to idempotent over (?P<rounds>\d+) rounds: (?P<ratio>[\d.]+)x)?")


def run_transactions(cluster: BrokerCluster, runner: Runner, sizes: Sizes, topic_configs: dict[str, str],
                     rows: list[Row]) -> None:
    """P7: transactional against idempotent throughput with :mod:`kafkalite.bench.transactions`."""
    topic = "p7-transactions"
    cluster.create_topic(topic, partitions=1, replication_factor=3, configs=topic_configs)
    cluster.wait_in_sync(topic, timeout=60)
    run = runner.run("kafkalite.bench.transactions",
                     ["--bootstrap", cluster.bootstrap, "--topic", topic, "--records", str(sizes.p7_records),
                      "--small-transaction-records", str(sizes.p7_small_records),
                      "--transaction-records", "100,10000"],
                     "P7 transactional vs idempotent producer")
    figures: dict[str, float] = {}
    ratios: dict[str, float] = {}
    rounds = ""
    for line in run.lines:
        match = TXN_LINE.match(line)
        if match:
            figures[match["size"] or "idempotent"] = float(match["rate"])
            if match["ratio"] is not None:
                ratios[match["size"]] = float(match["ratio"])
                rounds = match["rounds"]
    problem = run.failure()
    setting = "3 brokers, RF=3, acks=all, min.insync.replicas=2"
    if rounds:
        setting += f", {rounds} alternating rounds (ratio: median of the rounds')"
    idempotent = figures.get("idempotent")
    if idempotent is None:
        rows.append(Row(f"P7 idempotent send(), {setting}", problem or "no result line", "reference",
                        "skipped" if run.skipped else "missed"))
    else:
        rows.append(Row(f"P7 idempotent send(), {setting}", f"{idempotent:,.0f} records/s", "reference", "met"))
    for size, target in (("100", "reported beside idempotent"), ("10000", ">= 0.8x idempotent")):
        label = f"P7 transactional send(), {int(size):,} records per transaction, {setting}"
        rate = figures.get(size)
        if rate is None:
            rows.append(Row(label, problem or "no result line", target, "skipped" if run.skipped else "missed"))
            continue
        ratio = ratios.get(size, rate / idempotent if idempotent else 0.0)
        figure = f"{rate:,.0f} records/s ({ratio:.2f}x idempotent)"
        met = problem is None and (size == "100" or ratio >= 0.8)
        rows.append(Row(label, figure, target, verdict(met)))


def run_storage(directory: Path, sizes: Sizes, rows: list[Row], deadline: float) -> None:
    """P5 with :mod:`kafkalite.bench.storage`: append and read rates on a large and a small log
    (skipped when less than its reserve is left of the time budget; rounds stop at the deadline)."""
    from kafkalite.bench import storage

    large_label = f"{sizes.p5_large_bytes / 1e9:g} GB"
    small_label = f"{sizes.p5_small_bytes / 1e6:g} MB"
    append_label = f"P5 append rate at {large_label} of log vs {small_label}"
    fetch_label = f"P5 fetch (sequential read) rate at {large_label} of log vs {small_label}"
    target = ">= 0.9x the small log's"
    needed = sizes.p5_large_bytes + sizes.p5_small_bytes + 2 * P5_ROUNDS * sizes.p5_probe_bytes + 100 * MB
    free = shutil.disk_usage(directory).free
    reason = None
    if free < needed * 1.2:
        reason = (f"skipped: {directory} has {free / 1e9:.1f} GB free, P5 needs {needed * 1.2 / 1e9:.1f} GB "
                  "(use --dir to point elsewhere)")
    elif deadline - time.monotonic() < sizes.p5_reserve_seconds * 0.5:
        reason = "skipped: the suite's time budget ran out"
    if reason is not None:
        log(f"P5 {reason}")
        rows.append(Row(append_label, reason, target, "skipped"))
        rows.append(Row(fetch_label, reason, target, "skipped"))
        return
    root = Path(tempfile.mkdtemp(prefix="storage-", dir=directory))
    small: Any = None
    large: Any = None
    try:
        log(f"P5: writing the {small_label} and the {large_label} log")
        _, _, small = storage.append_rate(root / "small", 16 * 1024, sizes.p5_small_bytes)
        began = time.monotonic()
        _, _, large = storage.append_rate(root / "large", 16 * 1024, sizes.p5_large_bytes)
        log(f"P5: the large log took {time.monotonic() - began:.1f} s")
        batch, _ = storage._batch_of(16 * 1024)
        appends: dict[str, list[float]] = {"small": [], "large": []}
        reads: dict[str, list[float]] = {"small": [], "large": []}
        # Interleaved rounds and medians: the page cache's speed drifts and other processes
        # interrupt, in both directions.
        for round_number in range(P5_ROUNDS):
            if round_number and time.monotonic() > deadline:
                log("P5: the time budget ran out; the rounds done so far count")
                break
            for name, partition_log in (("small", small), ("large", large)):
                appends[name].append(append_onto(partition_log, batch, sizes.p5_probe_bytes))
                reads[name].append(storage.sequential_read_rate(partition_log, limit_bytes=sizes.p5_probe_bytes))
            log(f"P5 round {round_number + 1}: append MB/s small {appends['small'][-1]:,.0f} large "
                f"{appends['large'][-1]:,.0f}; read MB/s small {reads['small'][-1]:,.0f} "
                f"large {reads['large'][-1]:,.0f}")
        for label, measured in ((append_label, appends), (fetch_label, reads)):
            small_rate, large_rate = statistics.median(measured["small"]), statistics.median(measured["large"])
            ratio = large_rate / small_rate if small_rate > 0 else 0.0
            rows.append(Row(label, f"{large_rate:,.0f} MiB/s vs {small_rate:,.0f} MiB/s ({ratio:.2f}x)", target,
                            verdict(ratio >= 0.9)))
    finally:
        for opened in (small, large):
            if opened is not None:
                opened.delete()
        shutil.rmtree(root, ignore_errors=True)


def append_onto(partition_log: Any, batch: bytes, total_bytes: int) -> float:
    """MiB/s of appending ``batch`` repeatedly (``total_bytes`` in all) at the end of an existing log."""
    appends = max(1, total_bytes // len(batch))
    started = time.perf_counter()
    for _ in range(appends):
        partition_log.append_as_leader(batch, leader_epoch=0)
    elapsed = time.perf_counter() - started
    return appends * len(batch) / MiB / elapsed


# --- the report --------------------------------------------------------------------------------


def table(rows: list[Row]) -> str:
    """The markdown table of ``rows``."""
    lines = ["| scenario | figure | target | met/missed |", "| --- | --- | --- | --- |"]
    lines += [f"| {row.scenario} | {row.figure} | {row.target} | {row.verdict} |" for row in rows]
    return "\n".join(lines)


def machine_description() -> str:
    """CPU count, nproc, CPU model and Python version."""
    model = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{os.cpu_count()} CPUs (nproc {len(os.sched_getaffinity(0))}), {model}, Python {platform.python_version()}"


def results_block(rows: list[Row], mode: str, started: datetime.datetime, seconds: float,
                  cpu_notes: list[str]) -> str:
    """The block written into the docs: date, machine, load, table and CPU notes."""
    load = ", ".join(f"{value:.2f}" for value in os.getloadavg())
    lines = [RESULTS_START, "",
             f"Run of {started:%Y-%m-%d %H:%M} ({mode}, {seconds / 60:.1f} min) on {machine_description()}; "
             f"load average at the end {load}.", "", table(rows), ""]
    if cpu_notes:
        lines += ["CPU seconds per tool run (tool process, brokers) and wall time:", ""]
        lines += [f"- {note}" for note in cpu_notes]
        lines.append("")
    lines.append(RESULTS_END)
    return "\n".join(lines)


def write_docs(path: Path, block: str) -> None:
    """Replace the results between the markers of ``path``; append a section when they are missing."""
    text = path.read_text(encoding="utf-8") if path.exists() else "# Performance\n"
    start, end = text.find(RESULTS_START), text.find(RESULTS_END)
    if start >= 0 and end > start:
        text = text[:start] + block + text[end + len(RESULTS_END):]
    else:
        text = text.rstrip("\n") + "\n\n## Benchmark suite: latest results\n\n" + block + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


# --- main --------------------------------------------------------------------------------------


def parse_only(text: str | None, parser: ToolArgumentParser) -> list[str]:
    """The scenarios of ``--only`` in suite order (all without it)."""
    if not text:
        return list(SCENARIOS)
    chosen = [item.strip().upper() for item in text.split(",") if item.strip()]
    unknown = [item for item in chosen if item not in SCENARIOS]
    if unknown or not chosen:
        parser.error(f"--only takes a comma-separated list of {', '.join(SCENARIOS)}; got {text!r}")
    return [item for item in SCENARIOS if item in chosen]


def _raise_interrupt(signal_number: int, frame: FrameType | None) -> None:
    """Signal handler: end the run through the KeyboardInterrupt cleanup."""
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    """Run the chosen scenarios, print the table, write the docs; 0, 1 on failure, 130 interrupted."""
    parser = ToolArgumentParser(prog="bench.sh", description="Run the benchmark suite (P1-P12) and print "
                                     "one markdown table of the figures against the targets.")
    parser.add_argument("--quick", action="store_true",
                        help="fewer records, a 1 GB log, 1,000 partitions, 3 minutes of P11 (about 7 minutes)")
    parser.add_argument("--only", metavar="P1,P3", help="run only these scenarios (comma-separated)")
    parser.add_argument("--dir", default=tempfile.gettempdir(),
                        help="where the temporary clusters and logs go (default: the system temp directory)")
    parser.add_argument("--scrape-metrics", type=float, metavar="SECONDS",
                        help="scrape every broker's GET /metrics this often while the scenarios run "
                             "(shows what a Prometheus scrape costs; the results are not written to the docs)")
    written = parser.add_mutually_exclusive_group()
    written.add_argument("--docs", type=Path, metavar="PATH",
                         help="write the results into PATH (default: docs/performance.md, full runs only)")
    written.add_argument("--no-docs", action="store_true", help="do not write the results anywhere")
    arguments = parser.parse_args(argv)
    wanted = parse_only(arguments.only, parser)
    if arguments.scrape_metrics is not None and not 0.1 <= arguments.scrape_metrics <= 60:
        parser.error("--scrape-metrics must be between 0.1 and 60 seconds")
    if not Path(arguments.dir).is_dir():
        parser.error(f"--dir {arguments.dir} is not a directory")
    sizes = Sizes.for_mode(arguments.quick)
    mode = ("quick" if arguments.quick else "full") + ("" if arguments.only is None else f", only {','.join(wanted)}")
    if arguments.scrape_metrics is not None:
        mode += f", /metrics scraped every {arguments.scrape_metrics:g} s"
    if arguments.no_docs or (arguments.scrape_metrics is not None and arguments.docs is None):
        docs_path = None
    elif arguments.docs is not None:
        docs_path = arguments.docs
    else:
        docs_path = DOCS_PATH if not arguments.quick and wanted == list(SCENARIOS) else None

    # Ctrl-C and SIGTERM both end the run through the cleanup below (SIGINT explicitly too: a
    # shell without job control starts background commands with SIGINT ignored).
    previous_handlers = {number: signal.signal(number, _raise_interrupt) for number in (signal.SIGINT, signal.SIGTERM)}
    started_at = datetime.datetime.now()
    began = time.monotonic()
    rows: list[Row] = []
    cpu_notes: list[str] = []
    directory = Path(tempfile.mkdtemp(prefix="kafkalite-suite-", dir=arguments.dir))
    environment: Environment | None = None
    try:
        log(f"mode {mode}; working directory {directory}")
        deadline = began + sizes.budget_seconds
        runner = Runner(sizes.tool_timeout, deadline, cpu_notes)
        if "P5" in wanted:
            runner.reserve = sizes.p5_reserve_seconds
        if {"P1", "P2", "P3", "P4", "P6", "P7", "P8", "P9", "P12"} & set(wanted):
            environment = Environment(directory)
            scraper = MetricsScraper(environment, arguments.scrape_metrics) if arguments.scrape_metrics else None
            if scraper is not None:
                scraper.start()
            try:
                if {"P1", "P3", "P6", "P8", "P9"} & set(wanted):
                    run_single_broker(environment, runner, sizes, set(wanted), rows)
                if {"P2", "P4", "P7", "P9", "P12"} & set(wanted):
                    run_three_brokers(environment, runner, sizes, set(wanted), rows)
            finally:
                if scraper is not None:
                    cpu_notes.append(scraper.stop())
                    log(cpu_notes[-1])
            environment.close()
            environment = None
        if "P10" in wanted:
            run_scale(runner, sizes, rows)
        if "P11" in wanted:
            run_endurance(runner, sizes, rows)
        if "P5" in wanted:
            run_storage(directory, sizes, rows, deadline)
    except KeyboardInterrupt:
        log("interrupted: stopping the processes and deleting the temporary files")
        if rows:
            print(table(rows), flush=True)  # what was measured before the interruption
        return 130
    except Exception as exc:  # a cluster that would not start, say: report, clean up, exit 1
        log(f"failed: {type(exc).__name__}: {exc}")
        traceback.print_exc(file=sys.stderr)
        if rows:
            print(table(rows), flush=True)
        return 1
    finally:
        try:
            if environment is not None:
                environment.close()
        finally:
            shutil.rmtree(directory, ignore_errors=True)
            for number, handler in previous_handlers.items():
                signal.signal(number, handler)
    seconds = time.monotonic() - began
    print(table(rows), flush=True)
    if docs_path is not None:
        write_docs(docs_path, results_block(rows, mode, started_at, seconds, cpu_notes))
        log(f"results written to {docs_path}")
    log(f"done in {seconds / 60:.1f} min (figures measured on a shared machine vary from run to run)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
