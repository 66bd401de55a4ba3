"""Controller election, failover and epoch fencing on the twin (broker/controller.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from kafkalite.coord import znodes
from tests.unit.broker.harness import BrokerCluster

Run = Callable[[Callable[[BrokerCluster], Awaitable[None]]], object]


def test_one_candidate_wins_and_expiring_its_session_elects_another_with_a_higher_epoch(run: Run) -> None:
    async def scenario(cluster: BrokerCluster) -> None:
        for broker_id in (1, 2, 3):
            await cluster.add_broker(broker_id)
        assert cluster.active_controllers() == [1]
        assert cluster.controller_id() == 1
        epoch, version = cluster.controller_epoch()
        assert epoch == 1 and cluster.nodes[1].controller.epoch == 1
        assert cluster.nodes[1].controller.epoch_version == version
        assert all(cluster.nodes[b].metadata.controller_id == 1 for b in (1, 2, 3))

        cluster.expire(1)
        await cluster.wait_until(lambda: cluster.controller_id() in (2, 3) and cluster.active_controllers()
                                 == [cluster.controller_id()], "another broker is the only controller")
        winner = cluster.controller_id()
        assert cluster.controller_epoch()[0] == 2
        assert cluster.nodes[winner].controller.epoch == 2
        assert not cluster.nodes[1].controller.active  # the expired one resigned
        assert all(cluster.nodes[b].metadata.controller_id == winner for b in (1, 2, 3))

        cluster.expire(winner)
        await cluster.wait_until(lambda: cluster.controller_id() not in (-1, winner)
                                 and len(cluster.active_controllers()) == 1, "a third election")
        assert cluster.controller_epoch()[0] == 3
        assert cluster.active_controllers() == [cluster.controller_id()]

    run(scenario)


def test_a_broker_that_is_not_enabled_never_becomes_controller(run: Run) -> None:
    async def scenario(cluster: BrokerCluster) -> None:
        await cluster.add_broker(1, candidate=False)
        assert not await cluster.nodes[1].controller.try_elect()
        assert cluster.controller_id() == -1
        await cluster.add_broker(2)
        assert cluster.active_controllers() == [2] and cluster.controller_epoch()[0] == 1

    run(scenario)


def test_a_deposed_controller_that_has_not_noticed_yet_cannot_write(run: Run) -> None:
    """A controller paused (its watches blind) while its session expires and another is elected
    still believes it is active; its writes carry the old /controller_epoch version and fail."""
    async def scenario(cluster: BrokerCluster) -> None:
        for broker_id in (1, 2, 3):
            await cluster.add_broker(broker_id)
        await cluster.create_topic("orders", {0: [2, 3]})
        await cluster.wait_until(lambda: cluster.state("orders", 0) is not None, "the partition is elected")
        state, stat_before = cluster.state("orders", 0) or (None, None)
        assert state is not None and stat_before is not None
        assert (state.leader, state.isr, state.controller_epoch) == (2, [2, 3], 1)

        zombie = cluster.nodes[1]
        await cluster.ensemble.settle()
        zombie.metadata.stop()  # paused: no notification reaches this controller any more
        cluster.expire(1)
        await cluster.wait_until(lambda: cluster.controller_id() in (2, 3), "a new controller")
        await cluster.wait_until(lambda: cluster.controller_epoch()[0] == 2, "epoch 2")
        assert zombie.controller.active  # it has not noticed

        # Its cached state version is still current: only the epoch check can stop this write.
        info = zombie.metadata.partition("orders", 0)
        assert info is not None and info.state_version == stat_before.version
        remaining = await zombie.controller.controlled_shutdown(3, -1)
        assert remaining == []  # it does not lead the partition: only an ISR removal is tried, by the next pass
        # the failed fenced write makes it look and resign
        await cluster.wait_until(lambda: not zombie.controller.active, "the zombie resigns")
        await cluster.ensemble.settle()

        state_after, stat_after = cluster.state("orders", 0) or (None, None)
        assert state_after == state and stat_after is not None and stat_after.version == stat_before.version

    run(scenario)


def test_two_candidates_racing_make_one_controller_and_one_epoch_bump(run: Run) -> None:
    """Two candidates start their election together: one transaction commits, the other changes
    nothing and its candidate stays inactive."""
    async def scenario(cluster: BrokerCluster) -> None:
        await cluster.add_broker(1, candidate=False)
        await cluster.add_broker(2, candidate=False)
        first, second = cluster.nodes[1].controller, cluster.nodes[2].controller
        first.enabled = second.enabled = True
        results = await asyncio.gather(first.try_elect(), second.try_elect())
        assert sorted(results) == [False, True]
        assert cluster.controller_epoch()[0] == 1
        winner = cluster.nodes[cluster.controller_id()].controller
        assert winner.active and winner.epoch == 1
        assert cluster.active_controllers() == [cluster.controller_id()]
        # The loser's transaction left no trace: the epoch znode was written once, by the winner.
        data = cluster.ensemble.read(znodes.CONTROLLER_EPOCH_PATH)
        assert data is not None and data[1].version == winner.epoch_version == 1

    run(scenario)


def test_an_election_in_flight_when_the_controller_stops_ends_without_taking_office(run: Run) -> None:
    """Broker 2 starts an election when the controller's session expires, and its controller is
    stopped (the broker shuts down) before that election finished: it must not take office after
    stopping (watches and a reconcile task set up on a ZooKeeper client about to close), and
    nothing is left for the loop to report as a task exception never retrieved."""
    async def scenario(cluster: BrokerCluster) -> None:
        await cluster.add_broker(1)
        await cluster.add_broker(2)
        assert cluster.active_controllers() == [1]
        second = cluster.nodes[2].controller
        loop = asyncio.get_running_loop()
        unhandled: list[dict[str, object]] = []
        loop.set_exception_handler(lambda _, context: unhandled.append(context))
        cluster.expire(1)
        for _ in range(10_000):  # yield until broker 2's election is under way (past its first check)
            if second._elections and second._election_lock.locked():
                break
            await asyncio.sleep(0)
        elections = set(second._elections)
        assert elections and second._election_lock.locked(), "broker 2 started no election"
        await second.stop()
        await cluster.ensemble.settle()
        assert all(election.done() for election in elections)
        assert not second.active and second._task is None
        assert unhandled == []

    run(scenario)
