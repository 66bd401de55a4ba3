"""A broker-logic test harness: real broker units on the in-memory ZooKeeper twin and a fake clock.

:class:`BrokerCluster` runs, on one event loop, any number of broker "nodes", each with its own
:class:`~kafkalite.coord.memory.InMemoryCoordinator` session on one shared
:class:`~kafkalite.coord.memory.InMemoryZooKeeper` ensemble, its own
:class:`~kafkalite.broker.metadata.MetadataCache` and :class:`~kafkalite.broker.controller.Controller`
and, when asked, a :class:`~kafkalite.broker.replica.ReplicaManager` over a real
:class:`~kafkalite.storage.manager.LogManager` in a temporary directory. Nothing listens on a
socket and no ZooKeeper or broker process runs: only coordination and time are twins.

Follower brokers are played by the tests themselves (follower fetch requests sent straight to
the leader's ReplicaManager), so no replica fetcher ever starts.

Time: the broker units read the :class:`FakeClock`, and the controllers' delays (coalescing
notifications, retrying a lost race) go through :func:`no_delay`, which only yields to the loop,
so no scenario waits on real time. Waiting is :meth:`BrokerCluster.wait_until`: a condition
polled, after the twin's callbacks have settled, until a (real-time) deadline that only bounds a
broken scenario.

Concurrency: everything runs on the loop of :func:`run_scenario`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

from kafkalite.broker.controller import Controller
from kafkalite.broker.metadata import MetadataCache, PartitionInfo
from kafkalite.broker.replica import ReplicaManager
from kafkalite.config import BrokerConfig, LogConfig
from kafkalite.coord import znodes
from kafkalite.coord.coordinator import ZNodeStat
from kafkalite.coord.memory import InMemoryCoordinator, InMemoryZooKeeper
from kafkalite.record.batch import build_batch
from kafkalite.storage.manager import LogManager

_Result = TypeVar("_Result")

#: Bound of one whole scenario (real seconds): a hung scenario fails instead of hanging the suite.
SCENARIO_TIMEOUT = 20.0
#: Bound of one wait_until (real seconds).
WAIT_TIMEOUT = 5.0


async def no_delay(seconds: float) -> None:
    """The controllers' ``sleep``: whatever the delay, only let the other tasks run once."""
    await asyncio.sleep(0)


class FakeClock:
    """A millisecond wall clock that moves only when told to."""

    def __init__(self, now: int = 1_700_000_000_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now

    def advance(self, milliseconds: int) -> None:
        self.now += milliseconds


@dataclasses.dataclass
class BrokerNode:
    """One broker's units (no HTTP listener, no fetchers)."""

    broker_id: int
    config: BrokerConfig
    session: InMemoryCoordinator
    metadata: MetadataCache
    controller: Controller
    log_manager: LogManager | None = None
    replicas: ReplicaManager | None = None

    @property
    def replica_manager(self) -> ReplicaManager:
        assert self.replicas is not None, f"broker {self.broker_id} was started without a ReplicaManager"
        return self.replicas


class BrokerCluster:
    """The brokers of one scenario on one twin ensemble (see the module docstring)."""

    def __init__(self, directory: Path, clock: FakeClock) -> None:
        self.directory = directory
        self.clock = clock
        self.ensemble = InMemoryZooKeeper(clock=clock)
        self.admin = self.ensemble.client(session_timeout=6.0)
        self.nodes: dict[int, BrokerNode] = {}
        #: Topic config overrides, as the controllers' ``topic_configs`` callables see them.
        self.topic_configs: dict[str, dict[str, str]] = {}
        self._topic_ids = itertools.count(1)
        self._detached: list[LogManager] = []

    # -- lifecycle ----------------------------------------------------------------------------
    async def start(self) -> None:
        await self.admin.start()
        await self.admin.ensure_paths(znodes.PERSISTENT_PATHS)
        await self.admin.create(znodes.CLUSTER_ID_PATH, znodes.ClusterId("twin-cluster").to_bytes(), makepath=True)

    async def stop(self) -> None:
        nodes = list(self.nodes.values())
        for node in nodes:
            await node.controller.stop()
            if node.replicas is not None:
                await node.replicas.stop()
        # Let pending watch callbacks finish before their watches are cancelled: on this
        # branch's twin a callback coroutine cancelled before it starts is never awaited.
        await self.ensemble.settle()
        # Every watch goes before any session closes: a closing session's ephemerals would
        # otherwise notify the other brokers' watches in the middle of their shutdown.
        for node in nodes:
            node.metadata.stop()
        for node in nodes:
            await node.session.stop()
            if node.log_manager is not None:
                node.log_manager.shutdown()
        for log_manager in self._detached:
            log_manager.shutdown()
        await self.admin.stop()

    async def add_broker(self, broker_id: int, *, replicas: bool = False, candidate: bool = True,
                         log: LogConfig | None = None, **settings: object) -> BrokerNode:
        """Start broker ``broker_id``: session, metadata cache, registration, and (with
        ``candidate``) a controller that takes part in elections; with ``replicas`` also a
        ReplicaManager over logs in the scenario's directory. ``settings`` override BrokerConfig
        fields (replication tests pass ``replica_lag_time_max_ms``)."""
        config = BrokerConfig(broker_id=broker_id, log_dirs=(str(self.directory / f"broker-{broker_id}"),),
                              auto_leader_rebalance_enable=False, log=log or LogConfig())
        if settings:
            config = dataclasses.replace(config, **settings)  # type: ignore[arg-type]
        session = self.ensemble.client(session_timeout=6.0)
        await session.start()
        metadata = MetadataCache(session, broker_id)
        controller = Controller(config, session, metadata, self._configs_of, self.clock, sleep=no_delay)
        node = BrokerNode(broker_id, config, session, metadata, controller)
        if replicas:
            node.log_manager = LogManager([Path(directory) for directory in config.log_dirs], config.log,
                                          clock=self.clock)
            node.log_manager.start()
            node.replicas = ReplicaManager(config, node.log_manager, metadata, session, self.clock)
        self.nodes[broker_id] = node
        await metadata.start()
        await self.register(broker_id)
        if candidate:
            controller.enabled = True
            await controller.try_elect()
        await self.ensemble.settle()
        return node

    def detached_replica_manager(self, broker_id: int) -> ReplicaManager:
        """A ReplicaManager over its own logs whose metadata cache is never started: no watch
        makes it lead, follow or fetch; a test drives it by hand (a follower's apply path)."""
        config = BrokerConfig(broker_id=broker_id, log_dirs=(str(self.directory / f"detached-{broker_id}"),))
        log_manager = LogManager([Path(directory) for directory in config.log_dirs], config.log, clock=self.clock)
        log_manager.start()
        self._detached.append(log_manager)
        return ReplicaManager(config, log_manager, MetadataCache(self.admin, broker_id), self.admin, self.clock)

    async def register(self, broker_id: int) -> None:
        """Create the broker's ephemeral registration with its own session (as the server does)."""
        registration = znodes.BrokerRegistration.for_http("127.0.0.1", 19_000 + broker_id, timestamp_ms=self.clock())
        await self.nodes[broker_id].session.create(znodes.broker_path(broker_id), registration.to_bytes(),
                                                   ephemeral=True)

    def _configs_of(self, topic: str) -> dict[str, str]:
        return dict(self.topic_configs.get(topic, {}))

    # -- cluster state ------------------------------------------------------------------------
    async def create_topic(self, topic: str, partitions: dict[int, list[int]]) -> None:
        """Write the topic's assignment znode (as the admin service does); the controller elects."""
        assignment = znodes.TopicAssignment(partitions=partitions, topic_id=f"topic-id-{next(self._topic_ids)}")
        await self.admin.create(znodes.topic_path(topic), assignment.to_bytes())

    async def write_state(self, topic: str, partition: int, state: znodes.PartitionState) -> ZNodeStat:
        """Create or overwrite a partition state znode directly (a scenario without a controller)."""
        path = znodes.partition_state_path(topic, partition)
        if await self.admin.exists(path) is None:
            await self.admin.ensure_path(znodes.partition_path(topic, partition))
            await self.admin.create(path, state.to_bytes())
            stat = await self.admin.exists(path)
            assert stat is not None
            return stat
        return await self.admin.set(path, state.to_bytes())

    def state(self, topic: str, partition: int) -> tuple[znodes.PartitionState, ZNodeStat] | None:
        """The partition state znode as the ensemble holds it (no request, no watch)."""
        found = self.ensemble.read(znodes.partition_state_path(topic, partition))
        if found is None:
            return None
        data, stat = found
        return znodes.PartitionState.from_bytes(data), stat

    def assignment(self, topic: str) -> znodes.TopicAssignment:
        found = self.ensemble.read(znodes.topic_path(topic))
        assert found is not None, f"topic {topic} has no assignment znode"
        return znodes.TopicAssignment.from_bytes(found[0])

    def controller_epoch(self) -> tuple[int, int]:
        """(epoch, znode version) of /controller_epoch."""
        found = self.ensemble.read(znodes.CONTROLLER_EPOCH_PATH)
        assert found is not None
        return znodes.ControllerEpoch.from_bytes(found[0]).epoch, found[1].version

    def controller_id(self) -> int:
        found = self.ensemble.read(znodes.CONTROLLER_PATH)
        return -1 if found is None else znodes.ControllerInfo.from_bytes(found[0]).broker_id

    def active_controllers(self) -> list[int]:
        return sorted(broker_id for broker_id, node in self.nodes.items() if node.controller.active)

    def expire(self, broker_id: int) -> None:
        """Expire the broker's session: its registration (and /controller, if it holds it) go."""
        self.nodes[broker_id].session.expire_session()

    def partition_info(self, broker_id: int, topic: str, partition: int) -> PartitionInfo | None:
        return self.nodes[broker_id].metadata.partition(topic, partition)

    # -- waiting ------------------------------------------------------------------------------
    async def wait_until(self, condition: Callable[[], bool], what: str, timeout: float = WAIT_TIMEOUT) -> None:
        """Poll ``condition`` after the twin settles, until it holds or ``timeout`` passes."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            await self.ensemble.settle()
            if condition():
                return
            if loop.time() > deadline:
                raise AssertionError(f"timed out waiting until {what}")
            await asyncio.sleep(0.001)  # a poll interval: log creation runs in worker threads

    async def wait_for_passes(self, broker_id: int, passes: int = 2) -> None:
        """Wake the controller on ``broker_id`` and wait until it completed ``passes`` more
        reconciliation passes, so "nothing happened" means it looked and decided nothing."""
        controller = self.nodes[broker_id].controller
        for _ in range(passes):
            target = controller.passes + 1

            def passed(target: int = target) -> bool:
                return controller.passes >= target

            controller._full_pass = True  # a pass over every partition on demand, as a broker change causes
            controller._wake.set()
            await self.wait_until(passed, f"controller {broker_id} ran a pass")


def records(count: int, start: int = 0) -> bytes:
    """One batch of ``count`` records with distinct values."""
    return build_batch([f"value-{index}".encode() for index in range(start, start + count)], timestamps=0)


def run_scenario(directory: Path, clock: FakeClock,
                 scenario: Callable[[BrokerCluster], Awaitable[_Result]]) -> _Result:
    """Run ``scenario`` on a started cluster in a fresh loop; the cluster is stopped afterwards."""
    async def whole() -> _Result:
        cluster = BrokerCluster(directory, clock)
        await cluster.start()
        try:
            return await scenario(cluster)
        finally:
            await cluster.stop()

    async def bounded() -> _Result:
        return await asyncio.wait_for(whole(), SCENARIO_TIMEOUT)

    return asyncio.run(bounded())
