"""pytest fixtures that provide real ZooKeeper servers (import them from conftest.py).

* ``zookeeper`` — one standalone server for the whole test session (tickTime 500 ms).
  Tests must not stop, kill or freeze it; tests that need to do that start their own
  :class:`~tests.support.zookeeper.ZooKeeperServer`.
* ``zookeeper_connect`` — a connect string to ``zookeeper`` with a fresh chroot per test, so
  tests never see each other's znodes.
* ``zookeeper_ensemble`` — a 3-node loopback ensemble per test module. A test that kills a
  member restarts it before it ends (``start_node``), or the next test sees fewer members.

If ZooKeeper is not installed the fixtures install it (``zk/zookeeper.sh install``) and fail
loudly when that is impossible; they never skip.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from tests.support.zookeeper import (
    ZooKeeperEnsemble,
    ZooKeeperServer,
    ensure_zookeeper_installed,
)


@pytest.fixture(scope="session")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    ensure_zookeeper_installed()
    server = ZooKeeperServer(tmp_path_factory.mktemp("zookeeper"), tick_time=500)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def zookeeper_connect(zookeeper: ZooKeeperServer) -> str:
    return f"{zookeeper.connect_string}/test-{uuid.uuid4().hex[:12]}"


@pytest.fixture(scope="module")
def zookeeper_ensemble(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperEnsemble]:
    ensure_zookeeper_installed()
    ensemble = ZooKeeperEnsemble(tmp_path_factory.mktemp("zookeeper-ensemble"), size=3,
                                 tick_time=500)
    ensemble.start()
    try:
        yield ensemble
    finally:
        ensemble.stop()
