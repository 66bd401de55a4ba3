"""The Coordinator contract: what the broker may rely on, pinned on ZooKeeper and on the twin.

:class:`CoordinatorContract` is subclassed by ``tests/unit/test_coordinator_contract.py`` (the
in-memory twin, in the fast suite) and ``tests/integration/test_coordinator_contract.py`` (a
real ZooKeeper server); each subclass provides the ``backend`` fixture, a
:class:`CoordinatorBackend`. Every test here must hold on both.

No test sleeps: events are awaited with a deadline, and the absence of an event is shown with a
fence (a change of another znode watched by the same client; both implementations deliver one
client's notifications in the order of the changes, so once the fence's delivery arrived an
earlier event would have arrived too).
"""

from __future__ import annotations

import asyncio

import pytest

from kafkalite.coord.coordinator import Coordinator, SessionState, ZNodeStat
from kafkalite.errors import (
    CoordinationError,
    IllegalStateError,
    ZNodeExistsError,
    ZNodeMissingError,
    ZNodeVersionConflictError,
)
from tests.support.loop import EVENT_TIMEOUT, Recorder, run


class CoordinatorBackend:
    """What the suite needs from an implementation: fresh clients of one (isolated) ensemble and
    a way to make the ensemble expire a client's session."""

    name = "abstract"

    def client(self) -> Coordinator:
        """A new, not yet started client."""
        raise NotImplementedError

    async def expire(self, client: Coordinator) -> None:
        """Make the server expire ``client``'s session (returns once the server has done it)."""
        raise NotImplementedError




class Fence:
    """A data watch on its own znode: :meth:`cross` changes it and waits for the delivery."""

    def __init__(self, client: Coordinator, path: str) -> None:
        self.client = client
        self.path = path
        self.recorder = Recorder()
        self.generation = 0

    @classmethod
    async def install(cls, client: Coordinator, path: str = "/fence") -> Fence:
        fence = cls(client, path)
        await client.create(path, b"0")
        await client.watch_data(path, fence.recorder.record)
        assert await fence.recorder.next() == (b"0", await client.exists(path))
        return fence

    async def cross(self) -> None:
        self.generation += 1
        marker = str(self.generation).encode()
        await self.client.set(self.path, marker)
        while True:
            data, _ = await self.recorder.next()
            if data == marker:
                return


async def wait_for_state(states: Recorder, wanted: SessionState) -> list[SessionState]:
    """Session states delivered until ``wanted`` (included)."""
    seen: list[SessionState] = []
    while not seen or seen[-1] is not wanted:
        (state,) = await states.next()
        seen.append(state)
    return seen


class CoordinatorContract:
    """The contract tests; subclasses provide the ``backend`` fixture."""

    # --- reads, writes, versions and errors -----------------------------------------------------

    def test_create_get_set_delete_with_versions(self, backend: CoordinatorBackend) -> None:
        async def scenario() -> None:
            client = backend.client()
            await client.start()
            assert client.started and client.state is SessionState.CONNECTED and client.session_id
            assert await client.create("/a", b"one") == "/a"
            data, stat = await client.get("/a")
            assert (data, stat.version, stat.is_ephemeral, stat.data_length, stat.num_children) == (
                b"one", 0, False, 3, 0)
            assert (await client.set("/a", b"two", version=0)).version == 1
            with pytest.raises(ZNodeVersionConflictError, match="set /a"):
                await client.set("/a", b"three", version=0)
            assert (await client.get("/a"))[0] == b"two"
            assert (await client.set("/a", b"four")).version == 2  # ANY_VERSION
            with pytest.raises(ZNodeExistsError, match="create /a"):
                await client.create("/a")
            with pytest.raises(ZNodeMissingError, match="get /missing"):
                await client.get("/missing")
            with pytest.raises(ZNodeMissingError):
                await client.get_children("/missing")
            with pytest.raises(ZNodeMissingError):
                await client.set("/missing", b"")
            with pytest.raises(ZNodeMissingError):
                await client.create("/no/parent")
            assert await client.exists("/missing") is None
            exists = await client.exists("/a")
            assert isinstance(exists, ZNodeStat) and exists.version == 2

            assert await client.create("/deep/er/node", b"x", makepath=True) == "/deep/er/node"
            assert await client.get_children("/deep") == ["er"]
            with pytest.raises(ZNodeVersionConflictError):
                await client.delete("/a", version=0)
            await client.delete("/a", version=2)
            with pytest.raises(ZNodeMissingError):
                await client.delete("/a")
            with pytest.raises(CoordinationError, match="children") as not_empty:
                await client.delete("/deep")
            assert type(not_empty.value) is CoordinationError
            with pytest.raises(ZNodeVersionConflictError):  # the version is checked first
                await client.delete("/deep", version=7)
            await client.delete("/deep", recursive=True)
            assert await client.exists("/deep") is None

            paths = ["/brokers/ids", "/brokers/topics", "/admin/delete_topics"]
            await client.ensure_paths(paths)
            await client.ensure_paths(paths)
            await client.ensure_path("/brokers")
            assert await client.get_children("/brokers") == ["ids", "topics"]
            assert (await client.get("/brokers/ids"))[0] == b""
            with pytest.raises(TypeError):
                await client.create("/text", "not bytes")  # type: ignore[arg-type]
            await client.stop()
            assert not client.started and client.state is SessionState.LOST
            assert client.session_id is None

        run(scenario)

    def test_stat_counters_follow_zookeeper(self, backend: CoordinatorBackend) -> None:
        async def scenario() -> None:
            async with backend.client() as client:
                await client.create("/p", b"parent")
                parent = await client.exists("/p")
                assert parent is not None
                assert parent.czxid == parent.mzxid == parent.pzxid
                assert parent.ctime_ms == parent.mtime_ms and parent.ctime_ms > 0
                assert (parent.cversion, parent.num_children) == (0, 0)

                await client.create("/p/c", b"child")
                child = await client.exists("/p/c")
                after_create = await client.exists("/p")
                assert child is not None and after_create is not None
                assert child.czxid > parent.czxid
                assert (after_create.cversion, after_create.num_children) == (1, 1)
                assert after_create.pzxid == child.czxid
                assert after_create.mzxid == parent.mzxid and after_create.version == 0

                changed = await client.set("/p", b"parent, changed")
                assert changed.version == 1 and changed.mzxid > child.czxid
                assert changed.czxid == parent.czxid and changed.mtime_ms >= changed.ctime_ms
                assert changed.cversion == 1 and changed.data_length == len(b"parent, changed")

                await client.delete("/p/c")
                after_delete = await client.exists("/p")
                assert after_delete is not None
                assert (after_delete.cversion, after_delete.num_children) == (2, 0)
                assert after_delete.pzxid > changed.mzxid
                assert after_delete.version == 1  # children never change the data version

        run(scenario)

    def test_sequential_names_count_the_children_created(self, backend: CoordinatorBackend) -> None:
        async def scenario() -> None:
            async with backend.client() as client:
                first = await client.create("/seq/item-", b"", sequence=True, makepath=True)
                second = await client.create("/seq/item-", sequence=True)
                assert (first, second) == ("/seq/item-0000000000", "/seq/item-0000000001")
                await client.create("/seq/plain")
                await client.delete("/seq/plain")
                parent = await client.exists("/seq")
                assert parent is not None and parent.cversion == 4
                # The suffix counts creations only (the cversion also counts the deletion).
                third = await client.create("/seq/item-", sequence=True, ephemeral=True)
                assert third == "/seq/item-0000000003", third
                assert await client.get_children("/seq") == [
                    "item-0000000000", "item-0000000001", "item-0000000003"]

        run(scenario)

    def test_requests_need_a_started_client(self, backend: CoordinatorBackend) -> None:
        async def scenario() -> None:
            client = backend.client()
            assert not client.started and client.state is SessionState.LOST
            assert client.session_id is None and client.session_timeout == 6.0
            with pytest.raises(IllegalStateError):
                await client.get("/")
            await client.start()
            with pytest.raises(IllegalStateError):
                await client.start()
            await client.stop()
            await client.stop()  # stopping twice is harmless
            with pytest.raises(IllegalStateError):
                await client.exists("/")
            with pytest.raises(IllegalStateError):
                client.transaction()

        run(scenario)

    # --- ephemerals and sessions ------------------------------------------------------------------

    def test_ephemeral_vanishes_when_its_client_stops(self, backend: CoordinatorBackend) -> None:
        async def scenario() -> None:
            async with backend.client() as observer:
                owner = backend.client()
                await owner.start()
                await owner.ensure_path("/brokers/ids")
                await owner.create("/brokers/ids/1", b"registration", ephemeral=True)
                _, stat = await observer.get("/brokers/ids/1")
                assert stat.is_ephemeral and stat.ephemeral_owner == owner.session_id
                assert stat.ephemeral_owner != observer.session_id
                with pytest.raises(CoordinationError) as no_children:
                    await owner.create("/brokers/ids/1/child")
                assert type(no_children.value) is CoordinationError
                children = Recorder()
                await observer.watch_children("/brokers/ids", children.record)
                assert await children.next() == (["1"],)
                await owner.stop()
                assert await children.next() == ([],)
                assert await observer.exists("/brokers/ids/1") is None

        run(scenario)

    def test_session_expiry_removes_ephemerals_and_starts_a_new_session(
            self, backend: CoordinatorBackend) -> None:
        async def scenario() -> None:
            async with backend.client() as observer:
                owner = backend.client()
                states = Recorder()
                owner.add_session_listener(states.record)
                await owner.start()
                assert await wait_for_state(states, SessionState.CONNECTED) == [SessionState.CONNECTED]
                first_session = owner.session_id
                assert first_session
                await owner.create("/controller", b"1", ephemeral=True)
                await owner.create("/config", b"v0")
                seen = Recorder()
                await owner.watch_data("/config", seen.record)
                assert (await seen.next())[0] == b"v0"
                gone = Recorder()
                await observer.watch_data("/controller", gone.record)
                assert (await gone.next())[0] == b"1"

                await backend.expire(owner)
                assert await gone.next() == (None, None)
                before_lost = await wait_for_state(states, SessionState.LOST)
                assert set(before_lost[:-1]) <= {SessionState.SUSPENDED}
                assert await wait_for_state(states, SessionState.CONNECTED) == [SessionState.CONNECTED]
                assert owner.state is SessionState.CONNECTED
                assert owner.session_id not in (None, first_session)
                assert await observer.exists("/controller") is None

                # The watch is re-armed on the new session: it sees later changes.
                await observer.set("/config", b"v1")
                while (await seen.next())[0] != b"v1":
                    pass
                await owner.create("/controller", b"1", ephemeral=True)
                _, stat = await observer.get("/controller")
                assert stat.ephemeral_owner == owner.session_id
                await owner.stop()
                assert await observer.exists("/controller") is None

        run(scenario)

    def test_session_listeners(self, backend: CoordinatorBackend) -> None:
        async def scenario() -> None:
            client = backend.client()
            states = Recorder()
            removed = Recorder()
            client.add_session_listener(states.record_async)
            client.add_session_listener(removed.record)
            client.remove_session_listener(removed.record)
            await client.start()
            assert await states.next() == (SessionState.CONNECTED,)
            await client.stop()
            await client.stop()
            assert states.drain() == []
            assert removed.drain() == []
            states.assert_all_on_loop_thread()

        run(scenario)

    # --- transactions -------------------------------------------------------------------------------

    def test_transaction_is_all_or_nothing_and_names_the_failing_operation(
            self, backend: CoordinatorBackend) -> None:
        async def scenario() -> None:
            async with backend.client() as client:
                await client.create("/t", b"original")
                failing = (client.transaction()
                           .create("/created-by-failed-transaction", b"x")
                           .set_data("/t", b"changed")
                           .check("/t", version=5))
                assert failing.operations == 3
                with pytest.raises(ZNodeVersionConflictError, match=r"transaction operation #2 \(check /t version 5\)"):
                    await failing.commit()
                assert await client.exists("/created-by-failed-transaction") is None
                data, stat = await client.get("/t")
                assert (data, stat.version) == (b"original", 0)
                with pytest.raises(IllegalStateError):
                    await failing.commit()
                with pytest.raises(IllegalStateError):
                    failing.check("/t", 0)

                with pytest.raises(ZNodeExistsError, match=r"operation #1 \(create /t\)"):
                    await client.transaction().create("/u").create("/t").commit()
                with pytest.raises(ZNodeMissingError, match=r"operation #0 \(check /absent version 0\)"):
                    await client.transaction().check("/absent", version=0).create("/other").commit()
                with pytest.raises(ZNodeMissingError, match=r"operation #1 \(create /v/w\)"):
                    await client.transaction().create("/u").create("/v/w").commit()
                with pytest.raises(CoordinationError, match=r"operation #1 \(delete /t\)"):
                    await client.transaction().create("/t/c").delete("/t").commit()
                for path in ("/u", "/other", "/t/c"):
                    assert await client.exists(path) is None

                results = await (client.transaction()
                                 .check("/t", version=0)
                                 .create("/t/child", b"c")
                                 .create("/t/child/grandchild")  # created earlier in this transaction
                                 .create("/t/seq-", sequence=True)
                                 .create("/t/owned", ephemeral=True)
                                 .set_data("/t", b"changed", version=0)
                                 .delete("/t/child/grandchild")
                                 .commit())
                assert results[:5] == [True, "/t/child", "/t/child/grandchild", "/t/seq-0000000001",
                                       "/t/owned"]
                assert isinstance(results[5], ZNodeStat) and results[5].version == 1
                assert results[6] is True
                assert await client.get_children("/t") == ["child", "owned", "seq-0000000001"]
                child = await client.exists("/t/child")
                owned = await client.exists("/t/owned")
                assert child is not None and owned is not None
                assert child.czxid == owned.czxid == results[5].mzxid  # one transaction, one zxid
                assert owned.ephemeral_owner == client.session_id

                # Controller election as one multi: ephemeral /controller + conditional epoch bump.
                await client.create("/controller_epoch", b"0")
                elect = (client.transaction()
                         .create("/controller", b"1", ephemeral=True)
                         .set_data("/controller_epoch", b"1", version=0))
                await elect.commit()
                rival = (client.transaction()
                         .create("/controller", b"2", ephemeral=True)
                         .set_data("/controller_epoch", b"2", version=0))
                with pytest.raises(ZNodeExistsError):
                    await rival.commit()
                assert (await client.get("/controller_epoch"))[0] == b"1"

        run(scenario)

    # --- watches ----------------------------------------------------------------------------------

    def test_data_watch_delivers_the_current_state_then_every_change(self, backend: CoordinatorBackend) -> None:
        async def scenario() -> None:
            recorder = Recorder()
            async with backend.client() as client:
                fence = await Fence.install(client)
                watch = await client.watch_data("/w", recorder.record)
                assert await recorder.next() == (None, None)
                await client.create("/w", b"v1")
                data, stat = await recorder.next()
                assert (data, stat.version) == (b"v1", 0)
                await client.set("/w", b"v2")
                data, stat = await recorder.next()
                assert (data, stat.version) == (b"v2", 1)
                await client.create("/w/child")  # children do not change the data
                await fence.cross()
                assert recorder.drain() == []
                await client.delete("/w/child")
                await client.delete("/w")
                assert await recorder.next() == (None, None)
                assert watch.active and watch.path == "/w" and watch.kind == "data"
                watch.cancel()
                assert not watch.active
                await client.create("/w", b"after cancel")
                await fence.cross()
                assert recorder.drain() == []
            recorder.assert_all_on_loop_thread()

        run(scenario)

    def test_data_watch_coalesces_but_never_reorders(self, backend: CoordinatorBackend) -> None:
        async def scenario() -> None:
            recorder = Recorder()
            async with backend.client() as client:
                await client.create("/burst", b"0")
                await client.watch_data("/burst", recorder.record)
                assert (await recorder.next())[0] == b"0"
                writer = backend.client()
                await writer.start()
                for version in range(1, 21):
                    await writer.set("/burst", str(version).encode())
                await writer.stop()
                versions: list[int] = []
                while not versions or versions[-1] != 20:
                    data, stat = await recorder.next()
                    assert data == str(stat.version).encode()
                    versions.append(stat.version)
                assert versions == sorted(set(versions)), versions  # increasing, no repeats

        run(scenario)

    def test_children_watch_delivers_sorted_names_and_ends_with_its_znode(
            self, backend: CoordinatorBackend) -> None:
        async def scenario() -> None:
            recorder = Recorder()
            async with backend.client() as client:
                fence = await Fence.install(client)
                with pytest.raises(ZNodeMissingError):
                    await client.watch_children("/not-there", recorder.record)
                await client.ensure_path("/c")
                watch = await client.watch_children("/c", recorder.record)
                assert watch.kind == "children"
                assert await recorder.next() == ([],)
                await client.create("/c/b")
                assert await recorder.next() == (["b"],)
                await client.create("/c/a")
                assert await recorder.next() == (["a", "b"],)
                await client.set("/c/a", b"data of a child is not a children change")
                await client.set("/c", b"nor is the data of the znode")
                await fence.cross()
                assert recorder.drain() == []
                await client.delete("/c/b")
                assert await recorder.next() == (["a"],)
                await client.delete("/c", recursive=True)
                await fence.cross()
                assert all(names == ([],) for names in recorder.drain())
                await client.ensure_path("/c/again")  # the watch ended with /c
                await fence.cross()
                assert recorder.drain() == []
            recorder.assert_all_on_loop_thread()

        run(scenario)

    def test_coroutine_callbacks_run_one_at_a_time_per_registration(self, backend: CoordinatorBackend) -> None:
        async def scenario() -> None:
            release = asyncio.Event()
            second_call = asyncio.Event()
            saw_last = asyncio.Event()
            slow_calls: list[bytes | None] = []
            fast = Recorder()

            async def slow(data: bytes | None, stat: ZNodeStat | None) -> None:
                slow_calls.append(data)
                if data == b"2":
                    saw_last.set()
                if len(slow_calls) == 2:
                    second_call.set()
                    await release.wait()

            async with backend.client() as client:
                fence = await Fence.install(client)
                await client.create("/s", b"0")
                await client.watch_data("/s", slow)
                await client.watch_data("/s", fast.record)
                assert (await fast.next())[0] == b"0"
                await client.set("/s", b"1")
                await asyncio.wait_for(second_call.wait(), EVENT_TIMEOUT)
                if slow_calls[-1] != b"2":
                    await client.set("/s", b"2")
                    while (await fast.next())[0] != b"2":  # the other registration is not held up
                        pass
                    await fence.cross()
                    assert len(slow_calls) == 2  # the next call waits for the running one
                release.set()
                await asyncio.wait_for(saw_last.wait(), EVENT_TIMEOUT)
                assert slow_calls[0] == b"0" and slow_calls[-1] == b"2" and len(slow_calls) <= 3
                assert slow_calls == sorted(slow_calls)  # type: ignore[type-var]

        run(scenario)

    def test_a_failing_callback_keeps_its_registration(self, backend: CoordinatorBackend,
                                                       caplog: pytest.LogCaptureFixture) -> None:
        async def scenario() -> None:
            seen: list[bytes | None] = []

            def flaky(data: bytes | None, stat: ZNodeStat | None) -> None:
                seen.append(data)
                if data == b"boom":
                    raise RuntimeError("callback bug")

            async with backend.client() as client:
                fence = await Fence.install(client)
                await client.create("/f", b"boom")
                await client.watch_data("/f", flaky)
                await client.set("/f", b"fine")
                await fence.cross()
                assert seen == [b"boom", b"fine"]

        with caplog.at_level("ERROR"):
            run(scenario)
        assert "callback bug" in caplog.text
