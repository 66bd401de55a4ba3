"""Real broker processes for integration tests: kafkalite.local.cluster plus test-only helpers.

:class:`BrokerCluster` is the package's launcher with :meth:`BrokerCluster.broker_epoch`, which
reads ZooKeeper directly (tests check broker-only calls with it). ``ROOT`` is the checkout the
tests run from.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

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

    def error_lines(self) -> list[str]:
        """Every line any broker logged at ERROR, and every traceback start (a broker must log
        neither for bad input or an expected fault)."""
        return [line for broker in self.brokers.values() if broker.log_path.exists()
                for line in broker.log_path.read_text(errors="replace").splitlines()
                if "] ERROR " in line or line.startswith("Traceback")]


@contextmanager
def running_cluster(tmp_path_factory: pytest.TempPathFactory, zookeeper: Any, name: str, size: int = 3,
                    **options: Any) -> Iterator[BrokerCluster]:
    """``size`` brokers in a fresh chroot of the session's ZooKeeper, stopped afterwards; the
    test fails if any broker logged an ERROR line or a traceback meanwhile."""
    connect = f"{zookeeper.connect_string}/{name}-{uuid.uuid4().hex[:8]}"
    brokers = BrokerCluster(tmp_path_factory.mktemp(name), connect, size=size, **options).start()
    try:
        yield brokers
    finally:
        brokers.stop()
    errors = brokers.error_lines()
    assert errors == [], "a broker logged at ERROR:\n" + "\n".join(errors)


__all__ = ["ROOT", "BrokerCluster", "BrokerProcess", "HttpError", "free_port", "http", "running_cluster"]
