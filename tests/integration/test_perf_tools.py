"""The performance tools against a live broker: each runs briefly and its output is parsed in
Kafka's formats (the producer's final and 5-second lines, the consumer's header and row, the
end-to-end latency lines); bad flags exit 2 with ``Error:`` and no traceback; and the benchmark
suite completes a quick P1 run and prints its table."""

from __future__ import annotations

import re
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.cluster import ROOT, BrokerCluster

pytestmark = pytest.mark.integration
SCRIPTS = ROOT / "scripts"

# Kafka's ProducerPerformance formats: printTotal ("%d records sent, %f records/sec (%.2f MB/sec), %.2f ms avg
# latency, %.2f ms max latency, %d ms 50th, %d ms 95th, %d ms 99th, %d ms 99.9th.") and printWindow.
PRODUCER_TOTAL = re.compile(
    r"^(?P<records>\d+) records sent, (?P<rate>\d+\.\d{6}) records/sec \((?P<megabytes>\d+\.\d{2}) MB/sec\), "
    r"(?P<average>\d+\.\d{2}) ms avg latency, (?P<maximum>\d+\.\d{2}) ms max latency, (?P<p50>\d+) ms 50th, "
    r"(?P<p95>\d+) ms 95th, (?P<p99>\d+) ms 99th, (?P<p999>\d+) ms 99\.9th\.$")
PRODUCER_WINDOW = re.compile(
    r"^\d+ records sent, \d+\.\d records/sec \(\d+\.\d{2} MB/sec\), \d+\.\d ms avg latency, \d+\.\d ms max latency\.$")
CONSUMER_HEADER = ("start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, "
                   "rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec")
DETAILED_HEADER = ("time, threadId, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, "
                   "rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec")
KAFKA_TIME = re.compile(r"^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}:\d{3}$")
FOUR_DECIMALS = re.compile(r"^\d+\.\d{4}$")
AVERAGE_LATENCY = re.compile(r"^Avg latency: (\d+\.\d{4}) ms$")
PERCENTILES = re.compile(r"^Percentiles: 50th = ([\d.]+), 99th = ([\d.]+), 99\.9th = ([\d.]+)$")
RATE_SUMMARY = re.compile(r"^Sent (\d+) records in [\d.]+ s \(([\d.]+) records/s\); "
                          r"received (\d+), lost (\d+), duplicated (\d+)\.$")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, zookeeper) -> Iterator[BrokerCluster]:  # type: ignore[no-untyped-def]
    """One broker for the module's tests."""
    brokers = BrokerCluster(tmp_path_factory.mktemp("perf-tools"),
                            f"{zookeeper.connect_string}/perf-tools-{uuid.uuid4().hex[:8]}", size=1).start()
    try:
        yield brokers
    finally:
        brokers.stop()


def run(script: str, *arguments: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run a script; no traceback may appear."""
    result = subprocess.run([str(SCRIPTS / script), *arguments], capture_output=True, text=True, timeout=timeout)
    assert "Traceback" not in result.stderr, result.stderr
    return result


def produce(bootstrap: str, topic: str, records: int, *extra: str) -> subprocess.CompletedProcess[str]:
    """Write ``records`` 100-byte records with the producer perf tool."""
    return run("kafkalite-producer-perf-test.sh", "--topic", topic, "--num-records", str(records),
               "--record-size", "100", "--producer-props", f"bootstrap.servers={bootstrap}", "acks=1",
               "linger.ms=5", "batch.size=65536", *extra)


def test_producer_perf_test_prints_kafkas_final_line(cluster: BrokerCluster) -> None:
    topic = f"perf-{uuid.uuid4().hex[:6]}"
    cluster.create_topic(topic, partitions=2, replication_factor=1)
    for mode in ([], ["--bulk"]):
        result = produce(cluster.bootstrap, topic, 20_000, "--throughput", "-1", *mode)
        assert result.returncode == 0, result.stderr
        match = PRODUCER_TOTAL.match(result.stdout.strip().splitlines()[-1])
        assert match is not None, result.stdout
        assert int(match["records"]) == 20_000
        assert float(match["rate"]) > 0 and float(match["megabytes"]) > 0
        percentiles = [int(match[name]) for name in ("p50", "p95", "p99", "p999")]
        assert percentiles == sorted(percentiles)
        assert float(match["maximum"]) >= float(match["average"]) > 0
        assert percentiles[-1] <= float(match["maximum"]) + 1
    metrics = produce(cluster.bootstrap, topic, 1000, "--throughput", "-1", "--print-metrics")
    assert metrics.returncode == 0, metrics.stderr
    assert re.search(r"^perf-test:record-send-total\s*: 1000$", metrics.stdout, re.MULTILINE), metrics.stdout
    # the producer's own metrics, with Kafka's group:name
    assert re.search(r"^producer-metrics:record-send-total\s*: 1000\.000$", metrics.stdout, re.MULTILINE), \
        metrics.stdout
    assert re.search(r"^producer-metrics:request-latency-avg\s*: \d+\.\d{3}$", metrics.stdout, re.MULTILINE)


def test_producer_perf_test_throttles_and_reports_every_five_seconds(cluster: BrokerCluster) -> None:
    result = produce(cluster.bootstrap, f"perf-{uuid.uuid4().hex[:6]}", 6000, "--throughput", "1000")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert len(lines) >= 2 and all(PRODUCER_WINDOW.match(line) for line in lines[:-1]), result.stdout
    match = PRODUCER_TOTAL.match(lines[-1])
    assert match is not None and int(match["records"]) == 6000
    assert float(match["rate"]) <= 1050  # Kafka's throttler: never above the target on average


def test_consumer_perf_test_prints_kafkas_header_and_row(cluster: BrokerCluster) -> None:
    topic = f"consume-{uuid.uuid4().hex[:6]}"
    cluster.create_topic(topic, partitions=2, replication_factor=1)
    assert produce(cluster.bootstrap, topic, 30_000, "--throughput", "-1", "--bulk").returncode == 0
    for mode in ([], ["--bulk"]):
        result = run("kafkalite-consumer-perf-test.sh", "--bootstrap-server", cluster.bootstrap, "--topic", topic,
                     "--messages", "30000", "--timeout", "20000", *mode)
        assert result.returncode == 0, result.stderr
        header, row = result.stdout.strip().splitlines()
        assert header == CONSUMER_HEADER
        columns = row.split(", ")
        assert len(columns) == len(header.split(", ")) == 10
        assert KAFKA_TIME.match(columns[0]) and KAFKA_TIME.match(columns[1]) and columns[0] <= columns[1]
        assert all(FOUR_DECIMALS.match(columns[index]) for index in (2, 3, 5, 8, 9)), row
        assert int(columns[4]) == 30_000
        assert float(columns[2]) == pytest.approx(30_000 * 100 / (1024 * 1024), abs=1e-4)
        rebalance_ms, fetch_ms = int(columns[6]), int(columns[7])
        assert rebalance_ms >= 0 and fetch_ms >= 0
    result = run("kafkalite-consumer-perf-test.sh", "--bootstrap-server", cluster.bootstrap, "--topic", topic,
                 "--messages", "30000", "--timeout", "20000", "--print-metrics")
    assert result.returncode == 0, result.stderr
    assert re.search(r"^consumer-fetch-manager-metrics:records-consumed-total\s*: 30000\.000$", result.stdout,
                     re.MULTILINE), result.stdout
    assert re.search(r"^consumer-fetch-manager-metrics:fetch-latency-avg\s*: \d+\.\d{3}$", result.stdout, re.MULTILINE)


def test_consumer_perf_test_warns_on_timeout_and_has_detailed_header(cluster: BrokerCluster) -> None:
    topic = f"short-{uuid.uuid4().hex[:6]}"
    assert produce(cluster.bootstrap, topic, 100, "--throughput", "-1").returncode == 0
    result = run("kafkalite-consumer-perf-test.sh", "--bootstrap-server", cluster.bootstrap, "--topic", topic,
                 "--messages", "1000", "--timeout", "1500")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert lines[0] == CONSUMER_HEADER
    assert lines[1].startswith("WARNING: Exiting before consuming the expected number of messages: timeout (1500 ms)")
    assert lines[2].split(", ")[4] == "100"
    detailed = run("kafkalite-consumer-perf-test.sh", "--bootstrap-server", cluster.bootstrap, "--topic", topic,
                   "--messages", "100", "--show-detailed-stats", "--timeout", "10000")
    assert detailed.returncode == 0, detailed.stderr
    assert detailed.stdout.splitlines()[0] == DETAILED_HEADER


def test_end_to_end_latency_one_record_at_a_time(cluster: BrokerCluster, tmp_path: Path) -> None:
    topic = f"e2e-{uuid.uuid4().hex[:6]}"
    properties = tmp_path / "clients.properties"  # one file for both clients, each takes its own settings
    properties.write_text("linger.ms=1\nfetch.max.wait.ms=200\n")
    result = run("kafkalite-e2e-latency.sh", cluster.bootstrap, topic, "50", "all", "100", str(properties))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    progress = lines[0].split("\t")
    assert progress[0] == "0" and float(progress[1]) > 0
    average = AVERAGE_LATENCY.match(lines[-3])
    percentiles = PERCENTILES.match(lines[-1])
    assert average is not None and lines[-2] == "" and percentiles is not None, result.stdout
    p50, p99, p999 = (float(value) for value in percentiles.groups())
    assert 0 < p50 <= p99 <= p999 and float(average.group(1)) > 0


def test_end_to_end_latency_at_a_rate(cluster: BrokerCluster) -> None:
    topic = f"e2e-rate-{uuid.uuid4().hex[:6]}"
    began = time.monotonic()
    result = run("kafkalite-e2e-latency.sh", cluster.bootstrap, topic, "2000", "1", "100", "--rate", "1000")
    assert result.returncode == 0, result.stderr
    assert time.monotonic() - began >= 1.9  # 2000 records at 1000/s
    lines = result.stdout.strip().splitlines()
    summary = RATE_SUMMARY.match(lines[0])
    assert summary is not None, result.stdout
    sent, rate, received, lost, duplicated = summary.groups()
    assert (sent, received, lost, duplicated) == ("2000", "2000", "0", "0")
    assert float(rate) <= 1050
    assert AVERAGE_LATENCY.match(lines[1]) and PERCENTILES.match(lines[3]), result.stdout


@pytest.mark.parametrize("script, arguments, message", [
    ("kafkalite-producer-perf-test.sh", ["--num-records", "10", "--record-size", "100", "--throughput", "-1",
                                         "--producer-props", "bootstrap.servers=127.0.0.1:1"], "--topic"),
    ("kafkalite-producer-perf-test.sh", ["--topic", "t", "--num-records", "ten", "--record-size", "100",
                                         "--throughput", "-1", "--producer-props", "bootstrap.servers=127.0.0.1:1"],
     "invalid int value"),
    ("kafkalite-producer-perf-test.sh", ["--topic", "t", "--num-records", "10", "--record-size", "100",
                                         "--producer-props", "bootstrap.servers=127.0.0.1:1"], "--throughput"),
    ("kafkalite-producer-perf-test.sh", ["--topic", "t", "--num-records", "10", "--throughput", "-1",
                                         "--producer-props", "bootstrap.servers=127.0.0.1:1"], "--record-size"),
    ("kafkalite-producer-perf-test.sh", ["--topic", "t", "--num-records", "10", "--record-size", "100",
                                         "--throughput", "-1", "--producer-props", "acks"], "expects key=value"),
    ("kafkalite-producer-perf-test.sh", ["--topic", "t", "--num-records", "10", "--record-size", "100",
                                         "--throughput", "-1", "--producer-props", "acks=1"], "bootstrap.servers"),
    ("kafkalite-producer-perf-test.sh", ["--topic", "t", "--num-records", "10", "--record-size", "100",
                                         "--throughput", "-1", "--producer-props", "bootstrap.servers=127.0.0.1:1",
                                         "no.such.setting=1"], "no_such_setting"),
    ("kafkalite-consumer-perf-test.sh", ["--bootstrap-server", "127.0.0.1:1", "--topic", "t"], "--messages"),
    ("kafkalite-consumer-perf-test.sh", ["--bootstrap-server", "127.0.0.1:1", "--topic", "t", "--messages", "5",
                                         "--fetch-size", "0"], "--fetch-size"),
    ("kafkalite-consumer-perf-test.sh", ["--bootstrap-server", "127.0.0.1:1", "--topic", "t", "--messages", "5",
                                         "--bogus"], "unrecognized arguments"),
    ("kafkalite-e2e-latency.sh", ["127.0.0.1:1", "t", "10", "0", "100"], "ACKS must be 1 or all"),
    ("kafkalite-e2e-latency.sh", ["127.0.0.1:1", "t", "10"], "the following arguments are required"),
    ("kafkalite-e2e-latency.sh", ["127.0.0.1:1", "t", "10", "all", "100", "--rate", "0"], "--rate"),
    ("kafkalite-e2e-latency.sh", ["127.0.0.1:1", "t", "10", "all", "8", "--rate", "100"], "at least 16 bytes"),
    ("kafkalite-e2e-latency.sh", ["127.0.0.1:1", "t", "10", "all", "100", "/no/such/file.properties"],
     "cannot read properties file"),
    ("bench.sh", ["--only", "P99"], "--only"),  # no such scenario: refused before anything starts
    ("bench.sh", ["--bogus"], "unrecognized arguments"),
    ("bench.sh", ["--scrape-metrics", "0"], "--scrape-metrics"),
])
def test_usage_errors(script: str, arguments: list[str], message: str) -> None:
    result = run(script, *arguments)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert "Error:" in result.stderr and message in result.stderr, result.stderr


LATENCY_FLOOR = re.compile(r"^latency floor: p50 ([\d.]+) ms, p99 ([\d.]+) ms, p99\.9 ([\d.]+) ms, avg ([\d.]+) ms "
                           r"\((\d+) records at ([\d.]+) records/s sent\)$")


def test_latency_floor_times_every_record_of_its_five_processes() -> None:
    result = subprocess.run([sys.executable, "-m", "kafkalite.bench.latency_floor", "--records", "3000", "--rate",
                             "5000"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    match = LATENCY_FLOOR.match(result.stdout.strip())
    assert match, result.stdout
    p50, p99, p999, average = (float(value) for value in match.groups()[:4])
    assert 0 < p50 <= p99 <= p999 and average > 0
    assert int(match.group(5)) == 3000
    assert 1000 < float(match.group(6)) < 6000  # paced at the rate asked for


@pytest.mark.parametrize("arguments", [["--rate", "0"], ["--records", "0"], ["--record-size", "8"], ["--bogus"]])
def test_latency_floor_refuses_bad_flags(arguments: list[str]) -> None:
    result = subprocess.run([sys.executable, "-m", "kafkalite.bench.latency_floor", *arguments], cwd=ROOT,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2, result.stderr
    assert "Error:" in result.stderr and "Traceback" not in result.stderr, result.stderr


@pytest.mark.slow
def test_benchmark_suite_quick_p1_prints_a_table(tmp_path: Path) -> None:
    docs = tmp_path / "performance.md"
    began = time.monotonic()
    # with every broker's /metrics scraped twice a second, as a Prometheus would (less often)
    result = subprocess.run([sys.executable, "-m", "kafkalite.bench.suite", "--quick", "--only", "P1", "--docs",
                             str(docs), "--scrape-metrics", "0.5"], cwd=ROOT, capture_output=True, text=True,
                            timeout=180)
    elapsed = time.monotonic() - began
    assert "Traceback" not in result.stderr, result.stderr
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert lines[:2] == ["| scenario | figure | target | met/missed |", "| --- | --- | --- | --- |"], result.stdout
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in lines[2:]]
    assert len(rows) == 2 and all(row[0].startswith("P1 ") and len(row) == 4 for row in rows), result.stdout
    assert all(row[3] in ("met", "missed") and "records/s" in row[1] for row in rows), result.stdout
    written = docs.read_text()
    assert "| P1 send()" in written and "Python " in written and "nproc" in written
    scraped = re.search(r"/metrics scraped every 0.5 s: (\d+) scrapes \(mean [\d.]+ ms\), (\d+) failed", written)
    assert scraped and int(scraped.group(1)) > 0 and scraped.group(2) == "0", written
    assert elapsed < 60, f"the quick P1 run took {elapsed:.0f} s"
