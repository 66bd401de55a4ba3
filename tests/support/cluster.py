"""Real broker processes for integration tests: kafkalite.local.cluster plus test-only helpers.

:class:`BrokerCluster` is the package's launcher with :meth:`BrokerCluster.broker_epoch`, which
reads ZooKeeper directly (tests check broker-only calls with it). ``ROOT`` is the checkout the
tests run from.
"""

from __future__ import annotations

from pathlib import Path

from kafkalite.local import cluster as _local
from kafkalite.local.cluster import BrokerProcess, HttpError, free_port, http

ROOT = Path(__file__).resolve().parents[2]


class BrokerCluster(_local.BrokerCluster):
    """N broker processes against one ZooKeeper connect string (with its own chroot)."""

    def broker_epoch(self, broker_id: int) -> int:
        """The czxid of ``/brokers/ids/<broker_id>``: the broker's epoch, as Kafka defines it
        (broker-only calls such as follower fetches must carry it)."""
        from kazoo.client import KazooClient

        client = KazooClient(hosts=self.zookeeper_connect)
        client.start(timeout=10)
        try:
            stat = client.exists(f"/brokers/ids/{broker_id}")
            assert stat is not None, f"broker {broker_id} is not registered"
            return int(stat.czxid)
        finally:
            client.stop()
            client.close()


__all__ = ["ROOT", "BrokerCluster", "BrokerProcess", "HttpError", "free_port", "http"]
