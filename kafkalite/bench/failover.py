"""Failover benchmark: how long a partition is unavailable when its leader fails.

Starts one ZooKeeper and three brokers on loopback (broker defaults for replication and
controlled shutdown, a short ZooKeeper session timeout that the output states) and a topic
with one partition, replication factor 3, ``min.insync.replicas=2``. Two measurements, each
over a few rounds (the victim is restarted and the ISR completed between rounds):

1. **kill -9 of the leader** — time from the SIGKILL until a produce with acks=all succeeds
   again (one record sent right after the kill and waited for; the client retries). Target:
   at most the session timeout + 1 s, since the controller only learns of the death when
   the session expires.
2. **controlled shutdown of the leader** — SIGTERM while the verifiable producer (acks=all,
   idempotence, unbounded retries) sends continuously; reports failed sends (target: none) and
   the longest stall, the longest time between two acknowledgements from the SIGTERM until the
   producer stops.

It prints figures; it is not a timed test. Run:
``python -m kafkalite.bench.failover [--rounds N] [--session-timeout-ms MS] [--throughput R]``.

Concurrency: single-threaded driver; the producer client runs its own I/O thread and the
verifiable producer is a subprocess.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import uuid
from itertools import pairwise
from pathlib import Path
from typing import Any

from kafkalite.local.cluster import BrokerCluster
from kafkalite.local.verifiable import VerifiableProducer
from kafkalite.local.zookeeper import ZooKeeperServer, ensure_zookeeper_installed

TOPIC = "failover-bench"
# Broker defaults (kafkalite.config) for what matters to failover, written out explicitly so
# that the test cluster helper's shortened values do not apply.
BROKER_DEFAULTS = {
    "replica.lag.time.max.ms": "30000",
    "replica.fetch.wait.max.ms": "500",
    "replica.fetch.backoff.ms": "1000",
    "controlled.shutdown.enable": "true",
    "controlled.shutdown.max.retries": "3",
    "controlled.shutdown.retry.backoff.ms": "5000",
    "unclean.leader.election.enable": "false",
}


def _leader(cluster: BrokerCluster, observer: int | None = None) -> int:
    return int(cluster.partitions(TOPIC, observer)[0]["leader"])


def _restore(cluster: BrokerCluster, victim: int, observer: int) -> None:
    broker = cluster.brokers[victim]
    if not broker.alive:
        broker.start()
    broker.wait_ready(60)
    cluster.wait_in_sync(TOPIC, timeout=120, broker_id=observer)


def measure_kill(cluster: BrokerCluster, session_timeout_ms: int) -> tuple[float, float]:
    """(seconds until a new leader is in the metadata, seconds until an acks=all produce succeeded)."""
    from kafkalite import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all", linger_ms=0,
                             client_id="failover-probe")
    try:
        producer.send(TOPIC, b"warm-up").get(30)
        victim = _leader(cluster)
        observer = next(broker_id for broker_id in sorted(cluster.brokers) if broker_id != victim)
        killed_at = time.monotonic()
        cluster.brokers[victim].kill()
        future = producer.send(TOPIC, b"after-kill")
        def new_leader() -> int | None:
            leader = _leader(cluster, observer)
            return leader if leader not in (victim, -1) else None

        elected = cluster.wait_for(new_leader, session_timeout_ms / 1000 + 60, "a new leader")
        elected_after = time.monotonic() - killed_at
        future.get(session_timeout_ms / 1000 + 120)
        available_after = time.monotonic() - killed_at
        assert elected in cluster.brokers
    finally:
        producer.close()
    _restore(cluster, victim, observer)
    return elected_after, available_after


def measure_controlled_shutdown(cluster: BrokerCluster, directory: Path,
                                throughput: float) -> tuple[int, int, float, float, float]:
    """(sent, send errors, longest stall after SIGTERM, longest stall overall, shutdown seconds)."""
    victim = _leader(cluster)
    observer = next(broker_id for broker_id in sorted(cluster.brokers) if broker_id != victim)
    producer = VerifiableProducer(cluster.bootstrap, TOPIC,
                                             directory / f"producer-{uuid.uuid4().hex[:6]}.err",
                                             max_messages=1_000_000, throughput=throughput,
                                             value_prefix=f"cs-{uuid.uuid4().hex[:6]}")
    try:
        producer.start().wait_for_event("startup_complete", 60)
        producer.wait_for_acks(int(throughput), 60)
        terminated_ms = time.time() * 1000
        started = time.monotonic()
        cluster.brokers[victim].stop(timeout=120)
        shutdown_seconds = time.monotonic() - started
        with producer.condition:
            acked = producer.acked
        producer.wait_for_acks(acked + int(throughput * 2), 120)
        producer.terminate(180)
        events = producer.snapshot()
    finally:
        producer.kill()
    times = sorted(int(event["time_ms"]) for event in events if event.get("name") == "producer_send_success")
    after = [stamp for stamp in times if stamp >= terminated_ms]
    window = [terminated_ms, *after]
    stall_after = max((later - earlier for earlier, later in pairwise(window)), default=0.0) / 1000
    stall_overall = max((later - earlier for earlier, later in pairwise(times)), default=0.0) / 1000
    tool_data: dict[str, Any] = next((event for event in events if event.get("name") == "tool_data"), {})
    errors = sum(1 for event in events if event.get("name") == "producer_send_error")
    _restore(cluster, victim, observer)
    return int(tool_data.get("sent", len(times) + errors)), errors, stall_after, stall_overall, shutdown_seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="rounds of each measurement (default 3)")
    parser.add_argument("--session-timeout-ms", type=int, default=6000,
                        help="zookeeper.session.timeout.ms of the brokers (default 6000)")
    parser.add_argument("--throughput", type=float, default=500.0,
                        help="records/s of the producer during controlled shutdown (default 500)")
    arguments = parser.parse_args(argv)
    ensure_zookeeper_installed()
    with tempfile.TemporaryDirectory(prefix="kafkalite-failover-") as temporary:
        directory = Path(temporary)
        zookeeper = ZooKeeperServer(directory / "zookeeper", tick_time=500)
        zookeeper.start()
        cluster = None
        try:
            cluster = BrokerCluster(
                directory / "brokers", f"{zookeeper.connect_string}/failover-{uuid.uuid4().hex[:6]}", size=3,
                session_timeout_ms=arguments.session_timeout_ms, extra_properties=BROKER_DEFAULTS).start()
            cluster.create_topic(TOPIC, partitions=1, replication_factor=3, configs={"min.insync.replicas": "2"})
            cluster.wait_in_sync(TOPIC, timeout=60)
            settings = {"zookeeper.session.timeout.ms": str(arguments.session_timeout_ms), **BROKER_DEFAULTS,
                        "topic": "1 partition, replication factor 3, min.insync.replicas=2",
                        "producer": "acks=all, idempotence, unbounded retries (delivery.timeout.ms 120000)"}
            print("Settings:")
            for name, value in settings.items():
                print(f"  {name} = {value}")
            target = arguments.session_timeout_ms / 1000 + 1
            print(f"\nkill -9 of the partition leader (target: available again within {target:.1f} s)")
            unavailable: list[float] = []
            for round_number in range(1, arguments.rounds + 1):
                elected, available = measure_kill(cluster, arguments.session_timeout_ms)
                unavailable.append(available)
                print(f"  round {round_number}: new leader in metadata after {elected:5.2f} s, "
                      f"acks=all produce succeeded after {available:5.2f} s "
                      f"({'within' if available <= target else 'OVER'} target)", flush=True)
            print(f"  median {statistics.median(unavailable):.2f} s, worst {max(unavailable):.2f} s")
            print(f"\ncontrolled shutdown (SIGTERM) of the partition leader under {arguments.throughput:.0f} "
                  "records/s (target: no failed send)")
            stalls: list[float] = []
            failures = 0
            for round_number in range(1, arguments.rounds + 1):
                sent, errors, stall_after, stall_overall, shutdown = measure_controlled_shutdown(
                    cluster, directory, arguments.throughput)
                failures += errors
                stalls.append(stall_after)
                print(f"  round {round_number}: {sent} sent, {errors} failed, longest stall after SIGTERM "
                      f"{stall_after * 1000:.0f} ms (overall {stall_overall * 1000:.0f} ms), broker exited "
                      f"after {shutdown:.2f} s", flush=True)
            print(f"  failed sends in all rounds: {failures}; longest stall {max(stalls) * 1000:.0f} ms")
        finally:
            if cluster is not None:
                cluster.stop()
            zookeeper.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
