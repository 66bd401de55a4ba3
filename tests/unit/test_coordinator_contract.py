"""The Coordinator contract (tests/contract/coordinator_suite.py) on the in-memory twin."""

from __future__ import annotations

import itertools

import pytest

from kafkalite.coord.coordinator import Coordinator
from kafkalite.coord.memory import InMemoryCoordinator, InMemoryZooKeeper
from tests.contract.coordinator_suite import CoordinatorBackend, CoordinatorContract


class TwinBackend(CoordinatorBackend):
    """One fresh in-memory ensemble whose clock advances one millisecond per reading."""

    name = "twin"

    def __init__(self) -> None:
        ticks = itertools.count(1_700_000_000_000)
        self.ensemble = InMemoryZooKeeper(clock=lambda: next(ticks))

    def client(self) -> Coordinator:
        return self.ensemble.client(session_timeout=6.0)

    async def expire(self, client: Coordinator) -> None:
        assert isinstance(client, InMemoryCoordinator)
        client.expire_session()


class TestCoordinatorContractOnTheTwin(CoordinatorContract):
    @pytest.fixture
    def backend(self) -> CoordinatorBackend:
        return TwinBackend()
