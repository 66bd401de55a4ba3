"""The Coordinator contract (tests/contract/coordinator_suite.py) on a real ZooKeeper server.

Sessions are expired the standard way: a second connection made with the session's id and
password, closed at once, makes the server expire the session.
"""

from __future__ import annotations

import asyncio

import pytest
from kazoo.client import KazooClient

from kafkalite.coord.coordinator import Coordinator
from kafkalite.coord.zk import ZooKeeperClient, parse_connect_string
from tests.contract.coordinator_suite import CoordinatorBackend, CoordinatorContract

pytestmark = pytest.mark.integration


class ZooKeeperBackend(CoordinatorBackend):
    """Clients of the test ZooKeeper server, all in one fresh chroot."""

    name = "zookeeper"

    def __init__(self, connect_string: str) -> None:
        self.connect_string = connect_string

    def client(self) -> Coordinator:
        return ZooKeeperClient(self.connect_string, session_timeout=6.0, connect_timeout=15.0,
                               request_timeout=15.0)

    async def expire(self, client: Coordinator) -> None:
        assert isinstance(client, ZooKeeperClient)
        credentials = client.session_credentials_for_testing()
        assert credentials is not None, "the client has no session to expire"
        hosts, _ = parse_connect_string(self.connect_string)

        def connect_and_close() -> None:
            twin = KazooClient(hosts=hosts, client_id=credentials, timeout=6.0)
            twin.start(15.0)
            twin.stop()
            twin.close()

        await asyncio.to_thread(connect_and_close)


class TestCoordinatorContractOnZooKeeper(CoordinatorContract):
    @pytest.fixture
    def backend(self, zookeeper_connect: str) -> CoordinatorBackend:
        return ZooKeeperBackend(zookeeper_connect)
