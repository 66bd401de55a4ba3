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
``--idle-seconds`` with no client connected, as a share of one core, ``--settle-seconds`` after the
step got in sync (the brokers finish opening logs and setting watches); *RSS* and *open files*
from ``/proc``; *Metadata*: a confluent-kafka ``list_topics()`` of every topic, 30 times after the
idle window (median), and once right after the step (first);
*/metrics*: one scrape of broker 1. Everything it started is stopped at the end.

With ``--faults``, after the last step (one line): SIGTERM of a broker that is not the controller
(its controlled shutdown; how long it took to exit, and the longest time any partition had no
live leader, from a thread asking Metadata for every topic every 100 ms), its restart until it is
back in every ISR, kill -9 of the controller until every partition is led again, its restart,
and the time the whole cluster takes to stop.

Exit status 0; 1 when a step did not get in sync within ``--sync-timeout``; 143 after SIGTERM, once
the cluster it started is stopped.

Concurrency: single-threaded driver; the brokers and ZooKeeper are processes of their own.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import signal
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kafkalite.bench.local_cluster import start_cluster
from kafkalite.bench.procfs import cpu_seconds, open_files, rss_mb

METADATA_ROUNDS = 30
#: How often the fault phase's sampler asks for every partition's leader.
SAMPLE_SECONDS = 0.1


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


class LeaderSampler:
    """Asks Metadata for every topic every :data:`SAMPLE_SECONDS` on a thread of its own and keeps,
    per partition, how long it went without a live leader (no leader, or one of the brokers the
    driver has marked down); :meth:`longest` is the longest such stretch seen so far."""

    def __init__(self, admin: Any) -> None:
        self.admin = admin
        self.down: set[int] = set()
        self.samples = 0
        self._since: dict[tuple[str, int], float] = {}
        self._longest = 0.0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="leader-sampler", daemon=True)

    def __enter__(self) -> LeaderSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def longest(self) -> float:
        """Seconds: the longest stretch without a live leader, open stretches included."""
        now = time.monotonic()
        with self._lock:
            return max([self._longest, *(now - since for since in self._since.values())])

    def all_led(self, after: int = 0) -> bool:
        """Whether the latest sample, one taken after sample number ``after``, found every
        partition led by a live broker."""
        with self._lock:
            return self.samples > after and not self._since

    def _run(self) -> None:
        while not self._stop.is_set():
            began = time.monotonic()
            try:
                topics = self.admin.list_topics(timeout=5).topics
            except Exception:  # a broker going away: the next sample asks another
                self._stop.wait(SAMPLE_SECONDS)
                continue
            now = time.monotonic()
            with self._lock:
                for name, topic in topics.items():
                    for number, item in topic.partitions.items():
                        key = (name, number)
                        if item.leader < 0 or item.leader in self.down:
                            self._since.setdefault(key, now)
                        elif key in self._since:
                            self._longest = max(self._longest, now - self._since.pop(key))
                self.samples += 1
            self._stop.wait(max(0.0, SAMPLE_SECONDS - (time.monotonic() - began)))


def _wait(condition: Callable[[], bool], timeout: float) -> float | None:
    """Seconds until ``condition()`` holds (polled every 100 ms), None after ``timeout``."""
    began = time.monotonic()
    while time.monotonic() - began < timeout:
        if condition():
            return time.monotonic() - began
        time.sleep(0.1)
    return None


def _leaders_of(admin: Any, broker_id: int) -> int:
    return sum(1 for topic in admin.list_topics(timeout=30).topics.values()
               for item in topic.partitions.values() if item.leader == broker_id)


def _in_every_isr(admin: Any, broker_id: int) -> bool:
    return all(broker_id in item.isrs for topic in admin.list_topics(timeout=30).topics.values()
               for item in topic.partitions.values() if broker_id in item.replicas)


def _seconds(value: float | None) -> str:
    return "not within the limit" if value is None else f"{value:.1f} s"


def fault_phase(admin: Any, cluster: Any, total: int, timeout: float) -> bool:
    """SIGTERM of a broker that is not the controller (exit time, longest leaderless stretch),
    its restart (back in every ISR), kill -9 of the controller (all led again), its restart; one
    line; False when a wait ran out."""
    controller = cluster.controller_id()
    victim = next(broker_id for broker_id in sorted(cluster.brokers) if broker_id != controller)
    with LeaderSampler(admin) as sampler:
        led = _leaders_of(admin, victim)
        began = time.monotonic()
        cluster.brokers[victim].stop(timeout=timeout)
        exited = time.monotonic() - began
        sampler.down.add(victim)
        stopped_at = sampler.samples + 1
        settled = _wait(lambda: sampler.all_led(stopped_at), timeout)  # what stayed with it is led elsewhere
        leaderless = sampler.longest()
        sampler.down.discard(victim)
        cluster.brokers[victim].start()
        began = time.monotonic()
        back = _wait(lambda: _in_every_isr(admin, victim), timeout)
        back = None if back is None else time.monotonic() - began
        killed_leads = _leaders_of(admin, controller)
        began = time.monotonic()
        cluster.brokers[controller].kill()
        sampler.down.add(controller)
        killed_at = sampler.samples + 1  # a sample started before the kill may not see it
        failover = _wait(lambda: sampler.all_led(killed_at), timeout)
        failover = None if failover is None else time.monotonic() - began
        sampler.down.discard(controller)
        cluster.brokers[controller].start()
        samples = sampler.samples
    began = time.monotonic()
    cluster.stop()
    stopped = time.monotonic() - began
    print(f"scale faults at {total} partitions: SIGTERM of broker {victim} leading {led}: exited in {exited:.1f} s, "
          f"longest time a partition had no live leader {leaderless * 1000:.0f} ms ({samples} Metadata samples, every "
          f"{SAMPLE_SECONDS * 1000:.0f} ms); restarted, back in every ISR in {_seconds(back)}; kill -9 of the "
          f"controller (broker {controller}, leading {killed_leads}): every partition led again in "
          f"{_seconds(failover)} (zookeeper.session.timeout.ms {cluster.session_timeout_ms}), then restarted; "
          f"cluster stopped in {stopped:.1f} s", flush=True)
    return None not in (settled, back, failover)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kafkalite.bench.scale", description=__doc__.split("\n")[0])
    parser.add_argument("--steps", default="1000,3000", help="partition counts to reach, comma-separated")
    parser.add_argument("--replication-factor", type=int, default=3)
    parser.add_argument("--topic-partitions", type=int, default=100, help="partitions of each topic (default 100)")
    parser.add_argument("--idle-seconds", type=float, default=20.0, help="idle CPU sampling time (default 20)")
    parser.add_argument("--settle-seconds", type=float, default=20.0,
                        help="wait between a step's sync and the idle window (default 20)")
    parser.add_argument("--sync-timeout", type=float, default=600.0, help="seconds a step may take (default 600)")
    parser.add_argument("--faults", action="store_true",
                        help="after the last step: SIGTERM and restart of a broker, kill -9 and restart of the "
                             "controller, then the cluster's stop, timed")
    parser.add_argument("--directory", type=Path, default=None,
                        help="keep the cluster's data and logs in this new directory (default: a temporary one, "
                             "deleted at the end)")
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
    if options.directory is not None:
        try:
            options.directory.mkdir(parents=True)
        except OSError as exc:
            parser.error(f"--directory {options.directory}: {exc.strerror or exc}")
    with contextlib.ExitStack() as stack:
        directory = options.directory if options.directory is not None else \
            Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="kafkalite-scale-")))
        zookeeper, cluster = start_cluster(directory, 3)
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
                time.sleep(options.settle_seconds)  # the brokers finish what the step started
                before = {broker_id: cpu_seconds(pid) for broker_id, pid in pids.items()}
                time.sleep(options.idle_seconds)  # the idle window is the measurement itself
                after = {broker_id: cpu_seconds(pid) for broker_id, pid in pids.items()}
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
                rss = "/".join(f"{rss_mb(pid):.0f}" for pid in pids.values())
                files = "/".join(str(open_files(pid)) for pid in pids.values())
                zookeeper_rss = rss_mb(zookeeper.pid) if zookeeper.pid is not None else float("nan")
                print(f"scale {total} partitions (RF={options.replication_factor}, 3 brokers, "
                      f"{len(first.topics)} topics): created and in sync in {seconds:.1f} s; idle CPU % {cpu} "
                      f"({options.settle_seconds:.0f} s after); "
                      f"RSS MB {rss}, ZooKeeper {zookeeper_rss:.0f}; open files {files}; Metadata all topics "
                      f"median {statistics.median(times):.1f} ms (first {first_ms:.1f} ms); /metrics "
                      f"{scrape_ms:.0f} ms, {len(scraped) / 1000:.0f} kB", flush=True)
            if options.faults and not failed:
                failed = not fault_phase(admin, cluster, total, options.sync_timeout)
        finally:
            try:
                cluster.stop()
            finally:
                zookeeper.stop()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
