"""What thousands of partitions cost an idle cluster: creation, CPU, memory, files, Metadata, scrape.

``python -m kafkalite.bench.scale [--steps 1000,3000] [--replication-factor 3]
[--topic-partitions 100] [--idle-seconds 20]`` starts ZooKeeper and three brokers
(:mod:`kafkalite.bench.local_cluster`), then for each step creates topics of
``--topic-partitions`` partitions in one CreateTopics request (confluent-kafka's AdminClient) until
the cluster holds that many partitions, and prints one line per step::

    scale 1000 partitions (RF=3, 3 brokers): created and in sync in 14.1 s; idle CPU % 9.7/10.2/10.3;
        RSS MB 87/88/86, ZooKeeper 160; open files 3024/3021/3019; Metadata all topics median 0.4 ms
        (first 21.3 ms, 42 kB); /metrics 95 ms, 210 kB

*created and in sync*: from the CreateTopics request to every partition of the step led with a
full ISR (as Metadata answers); *idle CPU*: each broker's user and system CPU over
``--idle-seconds`` with no client connected, as a share of one core, from the moment the step is
in sync; *RSS* and *open files* from ``/proc``; *Metadata*: a confluent-kafka ``list_topics()`` of
every topic, 30 times after the idle window (median), and once right after the step (first);
*/metrics*: one scrape of broker 1. Everything it started is stopped at the end.

Exit status 0; 1 when a step did not get in sync within ``--sync-timeout``; 143 after SIGTERM, once
the cluster it started is stopped.

Concurrency: single-threaded driver; the brokers and ZooKeeper are processes of their own.
"""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import statistics
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

from kafkalite.bench.local_cluster import start_cluster

METADATA_ROUNDS = 30


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _open_files(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def _in_sync(admin: Any, names: set[str]) -> bool:
    topics = admin.list_topics(timeout=30).topics
    return all(name in topics and topics[name].error is None and topics[name].partitions and all(
        item.leader >= 0 and len(item.isrs) == len(item.replicas) for item in topics[name].partitions.values())
        for name in names)


def create_step(admin_api: Any, admin: Any, names: list[str], partitions: int, factor: int,
                timeout: float) -> float | None:
    """Seconds from one CreateTopics request of ``names`` to all of them led with full ISRs."""
    began = time.monotonic()
    futures = admin.create_topics([admin_api.NewTopic(name, num_partitions=partitions, replication_factor=factor)
                                   for name in names], operation_timeout=timeout)
    for future in futures.values():
        try:
            future.result(timeout=timeout)
        except Exception:  # REQUEST_TIMED_OUT: created, not led yet; the wait below decides
            pass
    wanted = set(names)
    while time.monotonic() - began < timeout:
        if _in_sync(admin, wanted):
            return time.monotonic() - began
        time.sleep(0.2)
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kafkalite.bench.scale", description=__doc__.split("\n")[0])
    parser.add_argument("--steps", default="1000,3000", help="partition counts to reach, comma-separated")
    parser.add_argument("--replication-factor", type=int, default=3)
    parser.add_argument("--topic-partitions", type=int, default=100, help="partitions of each topic (default 100)")
    parser.add_argument("--idle-seconds", type=float, default=20.0, help="idle CPU sampling time (default 20)")
    parser.add_argument("--sync-timeout", type=float, default=600.0, help="seconds a step may take (default 600)")
    options = parser.parse_args(argv)
    try:
        steps = [int(item) for item in options.steps.split(",") if item]
    except ValueError:
        parser.error(f"--steps {options.steps}: expected whole numbers separated by commas")
    if not steps or steps != sorted(steps) or steps[0] <= 0 or options.topic_partitions <= 0:
        parser.error("--steps must be increasing positive partition counts; --topic-partitions positive")
    admin_api: Any = importlib.import_module("confluent_kafka.admin")
    # SIGTERM (a runner's time limit) ends the run through the cleanup below: the cluster stops.
    signal.signal(signal.SIGTERM, lambda _number, _frame: sys.exit(143))
    failed = False
    with tempfile.TemporaryDirectory(prefix="kafkalite-scale-") as directory:
        zookeeper, cluster = start_cluster(Path(directory), 3)
        try:
            bootstrap = cluster.bootstrap
            admin = admin_api.AdminClient({"bootstrap.servers": bootstrap})
            pids = {broker_id: broker.process.pid for broker_id, broker in cluster.brokers.items()
                    if broker.process is not None}
            total = 0
            for step in steps:
                count = -(-(step - total) // options.topic_partitions)
                names = [f"scale-{uuid.uuid4().hex[:8]}" for _ in range(count)]
                seconds = create_step(admin_api, admin, names, options.topic_partitions,
                                      options.replication_factor, options.sync_timeout)
                total += count * options.topic_partitions
                if seconds is None:
                    print(f"scale {total} partitions: not in sync within {options.sync_timeout:.0f} s", flush=True)
                    failed = True
                    break
                began = time.perf_counter()
                first = admin.list_topics(timeout=30)
                first_ms = (time.perf_counter() - began) * 1000
                before = {broker_id: _cpu_seconds(pid) for broker_id, pid in pids.items()}
                time.sleep(options.idle_seconds)  # the idle window is the measurement itself
                after = {broker_id: _cpu_seconds(pid) for broker_id, pid in pids.items()}
                times = []
                for _ in range(METADATA_ROUNDS):
                    began = time.perf_counter()
                    admin.list_topics(timeout=30)
                    times.append((time.perf_counter() - began) * 1000)
                began = time.perf_counter()
                with urllib.request.urlopen(f"http://{cluster.brokers[1].address}/metrics", timeout=60) as answer:
                    scraped = answer.read()
                scrape_ms = (time.perf_counter() - began) * 1000
                cpu = "/".join(f"{100 * (after[key] - before[key]) / options.idle_seconds:.1f}" for key in pids)
                rss = "/".join(f"{_rss_mb(pid):.0f}" for pid in pids.values())
                files = "/".join(str(_open_files(pid)) for pid in pids.values())
                zookeeper_rss = _rss_mb(zookeeper.pid) if zookeeper.pid is not None else float("nan")
                print(f"scale {total} partitions (RF={options.replication_factor}, 3 brokers, "
                      f"{len(first.topics)} topics): created and in sync in {seconds:.1f} s; idle CPU % {cpu}; "
                      f"RSS MB {rss}, ZooKeeper {zookeeper_rss:.0f}; open files {files}; Metadata all topics "
                      f"median {statistics.median(times):.1f} ms (first {first_ms:.1f} ms); /metrics "
                      f"{scrape_ms:.0f} ms, {len(scraped) / 1000:.0f} kB", flush=True)
        finally:
            try:
                cluster.stop()
            finally:
                zookeeper.stop()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
