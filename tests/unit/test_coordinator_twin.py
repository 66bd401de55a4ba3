"""Unit tests of the in-memory ZooKeeper twin's own controls (kafkalite.coord.memory).

What the twin shares with ZooKeeper is pinned by the contract suite
(tests/unit/test_coordinator_contract.py); these tests cover what only the twin offers: lost
connections, session expiry on demand, injected request failures, ``settle`` and the clock.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest

from kafkalite.coord.coordinator import SessionState, ZNodeStat
from kafkalite.coord.memory import InMemoryCoordinator, InMemoryZooKeeper
from kafkalite.errors import (
    CoordinationError,
    IllegalStateError,
    ZNodeExistsError,
    ZNodeVersionConflictError,
)

_Result = TypeVar("_Result")


def run(scenario: Callable[[], Awaitable[_Result]]) -> _Result:
    async def bounded() -> _Result:
        return await asyncio.wait_for(scenario(), 10.0)

    return asyncio.run(bounded())


async def started(ensemble: InMemoryZooKeeper, states: list[SessionState] | None = None) -> InMemoryCoordinator:
    client = ensemble.client(session_timeout=6.0)
    if states is not None:
        client.add_session_listener(states.append)
    await client.start()
    return client


def test_disconnect_suspends_requests_and_reconnect_delivers_what_changed_meanwhile() -> None:
    async def scenario() -> None:
        ensemble = InMemoryZooKeeper()
        states: list[SessionState] = []
        client = await started(ensemble, states)
        other = await started(ensemble)
        session = client.session_id
        await client.create("/broker", b"me", ephemeral=True)
        await client.create("/config", b"v0")
        await client.ensure_path("/ids")
        data_seen: list[bytes | None] = []
        children_seen: list[list[str]] = []
        await client.watch_data("/config", lambda data, stat: data_seen.append(data))
        await client.watch_children("/ids", children_seen.append)
        await ensemble.settle()
        assert states == [SessionState.CONNECTED]

        client.disconnect()
        assert not client.connected and client.session_id is None
        with pytest.raises(CoordinationError, match="ConnectionLoss") as lost:
            await client.get("/config")
        assert lost.value.retriable
        await ensemble.settle()
        assert states[-1] is SessionState.SUSPENDED and client.state is SessionState.SUSPENDED
        for version in range(1, 4):
            await other.set("/config", f"v{version}".encode())
        await other.create("/ids/7")
        await other.delete("/ids/7")  # the children are as before: nothing to deliver
        await ensemble.settle()
        assert data_seen == [b"v0"] and children_seen == [[]]
        assert ensemble.read("/broker") is not None  # the session and its ephemeral live on

        client.reconnect()
        await ensemble.settle()
        assert states == [SessionState.CONNECTED, SessionState.SUSPENDED, SessionState.CONNECTED]
        assert client.session_id == session
        assert data_seen == [b"v0", b"v3"]  # the missed changes arrive as one delivery
        assert children_seen == [[]]
        await other.create("/ids/8")
        await ensemble.settle()
        assert children_seen == [[], ["8"]]  # the watch is armed again
        await client.stop()
        await other.stop()

    run(scenario)


def test_expiry_while_disconnected_shows_when_the_client_reconnects() -> None:
    async def scenario() -> None:
        ensemble = InMemoryZooKeeper()
        states: list[SessionState] = []
        client = await started(ensemble, states)
        observer = await started(ensemble)
        await client.create("/controller", b"1", ephemeral=True)
        first = client.session_id
        assert first is not None and ensemble.session_ids == [first, observer.session_id]
        client.disconnect()
        ensemble.expire_session(first)
        assert await observer.exists("/controller") is None  # gone at once
        await ensemble.settle()
        assert states == [SessionState.CONNECTED, SessionState.SUSPENDED]
        client.reconnect()
        await ensemble.settle()
        assert states[2:] == [SessionState.LOST, SessionState.CONNECTED]
        assert client.session_id not in (None, first)
        assert ensemble.session_ids == [observer.session_id, client.session_id]
        with pytest.raises(IllegalStateError):
            ensemble.expire_session(first)

    run(scenario)


def test_expiry_while_connected_gives_lost_then_a_new_session() -> None:
    async def scenario() -> None:
        ensemble = InMemoryZooKeeper()
        states: list[SessionState] = []
        client = await started(ensemble, states)
        await client.create("/e", ephemeral=True)
        first = client.session_id
        client.expire_session()
        assert client.session_id is None and ensemble.read("/e") is None
        assert ensemble.session_ids == []
        await ensemble.settle()
        assert states == [SessionState.CONNECTED, SessionState.LOST, SessionState.CONNECTED]
        assert client.session_id not in (None, first) and ensemble.session_ids == [client.session_id]
        assert (await client.get("/"))[0] == b""

    run(scenario)


def test_injected_failures_hit_the_named_request_once() -> None:
    async def scenario() -> None:
        ensemble = InMemoryZooKeeper()
        client = await started(ensemble)
        client.fail_next_request("set")
        await client.create("/a", b"0")  # not a set: unaffected
        with pytest.raises(CoordinationError, match="injected") as failed:
            await client.set("/a", b"1")
        assert failed.value.retriable
        assert (await client.get("/a"))[0] == b"0"  # not applied
        assert (await client.set("/a", b"1")).version == 1  # only once

        # A write whose answer was lost: applied, and yet it failed.
        client.fail_next_request("create", applied=True)
        with pytest.raises(CoordinationError):
            await client.create("/b", b"x")
        with pytest.raises(ZNodeExistsError):
            await client.create("/b", b"x")

        client.fail_next_request("transaction", error=ZNodeVersionConflictError("raced"))
        with pytest.raises(ZNodeVersionConflictError, match="raced"):
            await client.transaction().set_data("/a", b"2").commit()
        assert (await client.get("/a"))[0] == b"1"

        client.fail_next_request()
        with pytest.raises(CoordinationError):
            await client.exists("/a")

        failing_start = ensemble.client()
        failing_start.fail_next_request("start")
        with pytest.raises(CoordinationError, match="start: ConnectionLoss"):
            await failing_start.start()
        assert not failing_start.started and failing_start.session_id is None
        assert ensemble.session_ids == [client.session_id]
        with pytest.raises(IllegalStateError):
            await failing_start.start()
        with pytest.raises(ValueError, match="unknown operation"):
            client.fail_next_request("sett")

    run(scenario)


def test_gathered_writes_are_coalesced_like_a_slow_network() -> None:
    async def scenario() -> None:
        ensemble = InMemoryZooKeeper()
        client = await started(ensemble)
        writer = await started(ensemble)
        await client.create("/w", b"0")
        seen: list[tuple[bytes | None, int | None]] = []

        def record(data: bytes | None, stat: ZNodeStat | None) -> None:
            seen.append((data, stat.version if stat else None))

        await client.watch_data("/w", record)
        # Both writes apply before the watch's re-read: one delivery, of the latest data.
        await asyncio.gather(writer.set("/w", b"1"), writer.set("/w", b"2"))
        await ensemble.settle()
        assert seen == [(b"0", 0), (b"2", 2)]
        await writer.set("/w", b"3")
        await ensemble.settle()
        assert seen[-1] == (b"3", 3)

    run(scenario)


def test_stats_take_their_times_from_the_injected_clock() -> None:
    async def scenario() -> None:
        ticks = itertools.count(5_000, 10)
        ensemble = InMemoryZooKeeper(clock=lambda: next(ticks))
        client = await started(ensemble)
        zxid = ensemble.zxid
        created = await client.exists(await client.create("/t", b"x"))
        changed = await client.set("/t", b"y")
        assert created is not None and (created.ctime_ms, created.mtime_ms) == (5_000, 5_000)
        assert (changed.ctime_ms, changed.mtime_ms) == (5_000, 5_010)
        assert (created.czxid, changed.mzxid) == (zxid + 1, zxid + 2) == (zxid + 1, ensemble.zxid)
        assert ensemble.read("/t") == (b"y", changed)
        assert ensemble.children("/") == ["t"] and ensemble.children("/none") is None
        assert ensemble.paths() == ["/", "/t"]

    run(scenario)


def test_settle_reports_a_callback_that_never_finishes() -> None:
    async def scenario() -> None:
        ensemble = InMemoryZooKeeper()
        client = await started(ensemble)
        never = asyncio.Event()

        async def stuck(data: bytes | None, stat: Any) -> None:
            await never.wait()

        await client.watch_data("/x", stuck)
        with pytest.raises(IllegalStateError, match="did not settle"):
            await ensemble.settle(max_rounds=50)
        await client.stop()  # cancels the stuck callback
        await ensemble.settle()

    run(scenario)


def test_stop_silences_every_callback() -> None:
    async def scenario() -> None:
        ensemble = InMemoryZooKeeper()
        states: list[SessionState] = []
        client = await started(ensemble, states)
        other = await started(ensemble)
        seen: list[bytes | None] = []
        await client.watch_data("/q", lambda data, stat: seen.append(data))
        await other.create("/q", b"1")  # its notification is still on its way
        await client.stop()
        await ensemble.settle()
        assert seen == [None]
        assert states == [SessionState.CONNECTED]  # no LOST: nothing is delivered after stop
        with pytest.raises(IllegalStateError):
            client.disconnect()
        with pytest.raises(IllegalStateError):
            client.expire_session()

    run(scenario)
