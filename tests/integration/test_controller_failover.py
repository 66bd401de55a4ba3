"""A newly elected controller decides on what ZooKeeper says, not on a cache that lags behind.

After a long ZooKeeper outage every broker re-registers at once and the watch notifications
that carry the registrations to each broker's cache arrive one by one. A controller elected
meanwhile must read the live brokers from ZooKeeper before its first decision: it must not
elect away from a live leader nor take live, in-sync replicas out of an ISR because its cache
has not heard of them yet. The controller and its metadata cache run in the test process
against a real ZooKeeper; the brokers are registrations made by sessions of their own, and the
cache is made stale by stopping its broker watches (the state a lagging notification leaves).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from kafkalite.broker.controller import Controller
from kafkalite.broker.metadata import MetadataCache
from kafkalite.config import BrokerConfig
from kafkalite.coord import znodes
from kafkalite.coord.zk import ZooKeeperClient

pytestmark = pytest.mark.integration

TOPIC = "ledger"


async def wait_until(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


async def scenario(connect: str) -> tuple[znodes.PartitionState, set[int]]:
    setup = ZooKeeperClient(connect, session_timeout=6)
    others = ZooKeeperClient(connect, session_timeout=6)  # the session that registers brokers 2 and 3
    zookeeper = ZooKeeperClient(connect, session_timeout=6)  # the controller-to-be's own session
    await setup.start()
    await others.start()
    await zookeeper.start()
    metadata = MetadataCache(zookeeper, 3)
    config = BrokerConfig.from_properties({"broker.id": "3", "zookeeper.connect": connect, "log.dirs": "/nonexistent",
                                           "auto.leader.rebalance.enable": "false"})
    controller = Controller(config, zookeeper, metadata, lambda topic: {}, lambda: 0)
    try:
        await setup.ensure_paths(znodes.PERSISTENT_PATHS)
        await setup.create(znodes.CLUSTER_ID_PATH, znodes.ClusterId("failover-test").to_bytes(), makepath=True)
        await zookeeper.create(znodes.broker_path(3), znodes.BrokerRegistration.for_http("127.0.0.1", 3).to_bytes(),
                               ephemeral=True)
        assignment = znodes.TopicAssignment(partitions={0: [2, 1, 3]}, topic_id="AAAAAAAAAAAAAAAAAAAAAA")
        await setup.create(znodes.topic_path(TOPIC), assignment.to_bytes())
        await setup.ensure_path(znodes.partition_path(TOPIC, 0))
        state = znodes.PartitionState(leader=2, leader_epoch=4, isr=[2, 1, 3], controller_epoch=0)
        await setup.create(znodes.partition_state_path(TOPIC, 0), state.to_bytes())
        await metadata.start()
        def cache_ready() -> bool:
            info = metadata.partition(TOPIC, 0)
            return info is not None and info.state is not None and set(metadata.brokers) == {3}
        await wait_until(cache_ready, 10, "the cache to see broker 3 and the topic")
        # The cache stops hearing about brokers: broker 2 re-registers now (after the outage)
        # but its notification has not arrived when the controller is elected. Broker 1 never
        # comes back.
        for watch in list(metadata._broker_watches.values()):
            watch.cancel()
        metadata._watches[0].cancel()  # /brokers/ids
        await others.create(znodes.broker_path(2), znodes.BrokerRegistration.for_http("127.0.0.1", 2).to_bytes(),
                            ephemeral=True)
        assert set(metadata.brokers) == {3}

        controller.enabled = True
        assert await controller.try_elect()
        await wait_until(lambda: controller.passes >= 1, 10, "the controller's first pass")
        data, _ = await setup.get(znodes.partition_state_path(TOPIC, 0))
        return znodes.PartitionState.from_bytes(data), set(metadata.brokers)
    finally:
        await controller.stop()
        metadata.stop()
        for client in (zookeeper, others, setup):
            await client.stop()


def test_new_controller_reads_live_brokers_before_deciding(zookeeper_connect: str) -> None:
    state, live = asyncio.run(scenario(zookeeper_connect))
    # Broker 2 is live and leads: it stays leader; only broker 1, really gone, leaves the ISR.
    assert (state.leader, state.isr) == (2, [2, 3]), state
    assert live == {2, 3}  # read from ZooKeeper, not the stale cache
