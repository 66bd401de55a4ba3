"""A throwaway ZooKeeper and broker cluster for the benchmarks that need one.

The cluster comes from :mod:`kafkalite.local` (real ZooKeeper from the system package, real
broker processes on free loopback ports), so a benchmark runs from a checkout or from an
installed package alike. Concurrency: call from the benchmark's main thread; stop both when done.
"""

from __future__ import annotations

import uuid
from pathlib import Path

from kafkalite.local.cluster import BrokerCluster
from kafkalite.local.zookeeper import ZooKeeperServer, ensure_zookeeper_installed


def start_cluster(directory: Path, size: int) -> tuple[ZooKeeperServer, BrokerCluster]:
    """(zookeeper, cluster): ZooKeeper and ``size`` brokers under ``directory``, started.

    Retention checks are spaced out (every 5 minutes) so they do not run during a measurement,
    and followers long-poll their leaders for up to ``replica.fetch.wait.max.ms`` = 500 ms, the
    broker's and Kafka's default (the local development cluster answers them after 200 ms).
    """
    ensure_zookeeper_installed()
    zookeeper = ZooKeeperServer(directory / "zookeeper", tick_time=500)
    zookeeper.start()
    try:
        cluster = BrokerCluster(directory / "brokers", f"{zookeeper.connect_string}/bench-{uuid.uuid4().hex[:6]}",
                                size=size, extra_properties={"log.retention.check.interval.ms": "300000",
                                                  "replica.fetch.wait.max.ms": "500"}).start()
    except BaseException:
        zookeeper.stop()
        raise
    return zookeeper, cluster
