"""``GET /ready`` follows whether a broker serves (registered, a live ZooKeeper session,
metadata loaded), while ``GET /health`` stays a liveness answer. Real ZooKeeper and broker
processes; ZooKeeper is frozen with SIGSTOP so the broker's session is suspended."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.cluster import BrokerCluster, HttpError, http, running_cluster

pytestmark = pytest.mark.integration


def readiness(cluster: BrokerCluster) -> tuple[int, Any]:
    """(HTTP status, body) of broker 1's ``/ready``."""
    try:
        return 200, http(cluster.brokers[1].address, "GET", "/ready", timeout=5)
    except HttpError as exc:
        return exc.status, exc.body


def test_ready_is_false_while_the_zookeeper_session_is_suspended_and_true_after_it_recovers(
        tmp_path_factory: pytest.TempPathFactory, zookeeper: Any) -> None:
    with running_cluster(tmp_path_factory, zookeeper, "readiness", size=1) as cluster:
        assert readiness(cluster) == (200, {"ready": True, "broker_id": 1, "reasons": []})
        zookeeper.freeze()
        try:
            _, body = cluster.wait_for(lambda: (answer := readiness(cluster))[0] == 503 and answer, 30,
                                            "the broker to report that it does not serve")
            assert body["ready"] is False and body["broker_id"] == 1
            assert any("ZooKeeper connection is suspended" in reason for reason in body["reasons"]), body
            assert http(cluster.brokers[1].address, "GET", "/health", timeout=5)["status"] == "ok"  # still live
        finally:
            zookeeper.thaw()
        cluster.wait_for(lambda: readiness(cluster)[0] == 200, 30, "the broker to be ready again")
        assert readiness(cluster) == (200, {"ready": True, "broker_id": 1, "reasons": []})
