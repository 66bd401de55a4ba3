"""A throwaway ZooKeeper and broker cluster for the benchmarks that need one.

The cluster comes from the test support code (real ZooKeeper from the system package, real
broker processes on free loopback ports), so a benchmark runs from a checkout of the
repository. Concurrency: call from the benchmark's main thread; stop both when done.
"""

from __future__ import annotations

import sys
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def start_cluster(directory: Path, size: int) -> tuple[Any, Any]:
    """(zookeeper, cluster): ZooKeeper and ``size`` brokers under ``directory``, started.

    Retention checks are spaced out (every 5 minutes) so they do not run during a measurement.
    """
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from tests.support.cluster import BrokerCluster
    from tests.support.zookeeper import ZooKeeperServer, ensure_zookeeper_installed

    ensure_zookeeper_installed()
    zookeeper = ZooKeeperServer(directory / "zookeeper", tick_time=500)
    zookeeper.start()
    try:
        cluster = BrokerCluster(directory / "brokers", f"{zookeeper.connect_string}/bench-{uuid.uuid4().hex[:6]}",
                                size=size, extra_properties={"log.retention.check.interval.ms": "300000"}).start()
    except BaseException:
        zookeeper.stop()
        raise
    return zookeeper, cluster
