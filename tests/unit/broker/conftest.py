"""Fixtures of the broker-logic unit tests: a fake clock and a scenario runner on the twin.

Every test here runs real broker units (controller, metadata cache, replica manager, partition,
logs in ``tmp_path``) against the in-memory ZooKeeper twin with a fake clock; see
:mod:`tests.unit.broker.harness`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from tests.unit.broker.harness import BrokerCluster, FakeClock, run_scenario


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def run(tmp_path: Path, clock: FakeClock) -> Callable[[Callable[[BrokerCluster], Awaitable[object]]], object]:
    """``run(scenario)``: run ``async def scenario(cluster)`` on a fresh twin cluster."""
    def runner(scenario: Callable[[BrokerCluster], Awaitable[object]]) -> object:
        return run_scenario(tmp_path, clock, scenario)
    return runner
