"""Integration tests of kafkalite.coord.zk and zk/zookeeper.sh against real ZooKeeper servers."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

import pytest

from kafkalite.coord import zk as zk_module, znodes
from kafkalite.coord.zk import SessionState, ZNodeStat, ZooKeeperClient, parse_connect_string
from kafkalite.errors import (
    CoordinationError,
    IllegalStateError,
    ZNodeExistsError,
    ZNodeMissingError,
    ZNodeVersionConflictError,
)
from tests.support.loop import Recorder, run
from tests.support.zookeeper import (
    LAUNCHER_SCRIPT,
    ZooKeeperEnsemble,
    ZooKeeperServer,
    four_letter_word,
    free_ports,
)

pytestmark = pytest.mark.integration

_Result = TypeVar("_Result")


async def retry_coordination(action: Callable[[], Awaitable[_Result]],
                             within: float = 15.0) -> _Result:
    """Retry ``action`` while it fails with a retriable CoordinationError."""
    deadline = time.monotonic() + within
    while True:
        try:
            return await action()
        except CoordinationError as exc:
            if not exc.retriable or time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)


def test_create_get_set_delete_with_versions(zookeeper_connect: str,
                                             zookeeper: ZooKeeperServer) -> None:
    async def scenario() -> None:
        async with ZooKeeperClient(zookeeper_connect, session_timeout=6.0) as zk:
            assert zk.session_id
            assert await zk.create("/a", b"one") == "/a"
            data, stat = await zk.get("/a")
            assert (data, stat.version, stat.is_ephemeral) == (b"one", 0, False)
            assert (await zk.set("/a", b"two", version=0)).version == 1
            with pytest.raises(ZNodeVersionConflictError) as conflict:
                await zk.set("/a", b"three", version=0)
            assert type(conflict.value.__cause__).__name__ == "BadVersionError"
            assert (await zk.get("/a"))[0] == b"two"
            with pytest.raises(ZNodeExistsError):
                await zk.create("/a")
            with pytest.raises(ZNodeMissingError):
                await zk.get("/missing")
            with pytest.raises(ZNodeMissingError):
                await zk.create("/no/parent")
            assert await zk.exists("/missing") is None
            exists = await zk.exists("/a")
            assert isinstance(exists, ZNodeStat) and exists.version == 1

            assert await zk.create("/deep/er/node", b"x", makepath=True) == "/deep/er/node"
            first = await zk.create("/seq/item-", sequence=True, makepath=True)
            second = await zk.create("/seq/item-", sequence=True)
            assert [znodes.sequence_number(p.rsplit("/", 1)[1], "item-")
                    for p in (first, second)] == [0, 1]
            assert await zk.get_children("/seq") == ["item-0000000000", "item-0000000001"]

            with pytest.raises(ZNodeVersionConflictError):
                await zk.delete("/a", version=0)
            await zk.delete("/a", version=1)
            with pytest.raises(ZNodeMissingError):
                await zk.delete("/a")
            with pytest.raises(CoordinationError, match="children"):
                await zk.delete("/deep")
            await zk.delete("/deep", recursive=True)
            assert await zk.exists("/deep") is None

            await zk.ensure_paths(znodes.PERSISTENT_PATHS)
            await zk.ensure_paths(znodes.PERSISTENT_PATHS)
            for path in znodes.PERSISTENT_PATHS:
                assert await zk.exists(path) is not None
            with pytest.raises(TypeError):
                await zk.create("/text", "not bytes")  # type: ignore[arg-type]
        with pytest.raises(IllegalStateError):
            await zk.get("/seq")

        # The chroot was created by start() and every path above lives under it.
        _, chroot = parse_connect_string(zookeeper_connect)
        async with ZooKeeperClient(zookeeper.connect_string, session_timeout=6.0) as root:
            assert await root.get_children(chroot + "/seq") == ["item-0000000000",
                                                                "item-0000000001"]

    run(scenario)


def test_ephemeral_node_disappears_when_its_client_stops(zookeeper_connect: str) -> None:
    async def scenario() -> None:
        async with ZooKeeperClient(zookeeper_connect, session_timeout=6.0) as observer:
            owner = ZooKeeperClient(zookeeper_connect, session_timeout=6.0)
            await owner.start()
            await owner.ensure_path(znodes.BROKER_IDS_PATH)
            registration = znodes.BrokerRegistration.for_http("127.0.0.1", 9092)
            path = znodes.broker_path(1)
            await owner.create(path, registration.to_bytes(), ephemeral=True)
            data, stat = await observer.get(path)
            assert znodes.BrokerRegistration.from_bytes(data, path) == registration
            assert stat.is_ephemeral and stat.ephemeral_owner == owner.session_id
            await owner.stop()
            assert owner.session_id is None
            assert await observer.exists(path) is None

    run(scenario)


def test_transaction_is_all_or_nothing(zookeeper_connect: str) -> None:
    async def scenario() -> None:
        async with ZooKeeperClient(zookeeper_connect, session_timeout=6.0) as zk:
            await zk.create("/t", b"original")
            failing = (zk.transaction()
                       .create("/created-by-failed-transaction", b"x")
                       .set_data("/t", b"changed")
                       .check("/t", version=5))
            with pytest.raises(ZNodeVersionConflictError, match="check /t version 5"):
                await failing.commit()
            assert await zk.exists("/created-by-failed-transaction") is None
            data, stat = await zk.get("/t")
            assert (data, stat.version) == (b"original", 0)
            with pytest.raises(IllegalStateError):
                await failing.commit()

            results = await (zk.transaction()
                             .check("/t", version=0)
                             .create("/t/child", b"c")
                             .set_data("/t", b"changed", version=0)
                             .commit())
            assert results[0] is True and results[1] == "/t/child"
            assert isinstance(results[2], ZNodeStat) and results[2].version == 1
            with pytest.raises(ZNodeMissingError):
                await zk.transaction().check("/absent", version=0).create("/other").commit()
            assert await zk.exists("/other") is None

            # Controller election as one multi: ephemeral /controller + conditional epoch bump.
            await zk.create(znodes.CONTROLLER_EPOCH_PATH, znodes.ControllerEpoch(0).to_bytes())
            _, epoch_stat = await zk.get(znodes.CONTROLLER_EPOCH_PATH)
            elect = (zk.transaction()
                     .create(znodes.CONTROLLER_PATH, znodes.ControllerInfo(1).to_bytes(),
                             ephemeral=True)
                     .set_data(znodes.CONTROLLER_EPOCH_PATH, znodes.ControllerEpoch(1).to_bytes(),
                               version=epoch_stat.version))
            await elect.commit()
            rival = (zk.transaction()
                     .create(znodes.CONTROLLER_PATH, znodes.ControllerInfo(2).to_bytes(),
                             ephemeral=True)
                     .set_data(znodes.CONTROLLER_EPOCH_PATH, znodes.ControllerEpoch(2).to_bytes(),
                               version=epoch_stat.version))
            with pytest.raises(ZNodeExistsError):
                await rival.commit()
            data, _ = await zk.get(znodes.CONTROLLER_EPOCH_PATH)
            assert znodes.ControllerEpoch.from_bytes(data).epoch == 1

    run(scenario)


def test_data_watch_runs_on_the_loop_thread(zookeeper_connect: str) -> None:
    async def scenario() -> None:
        recorder = Recorder()
        async with ZooKeeperClient(zookeeper_connect, session_timeout=6.0) as zk:
            watch = await zk.watch_data("/w", recorder.record_async)
            assert await recorder.next() == (None, None)
            await zk.create("/w", b"v1")
            data, stat = await recorder.next()
            assert (data, stat.version) == (b"v1", 0)
            await zk.set("/w", b"v2")
            data, stat = await recorder.next()
            assert (data, stat.version) == (b"v2", 1)
            await zk.delete("/w")
            assert await recorder.next() == (None, None)
            watch.cancel()
            assert not watch.active
            await zk.create("/w", b"after cancel")
            assert await recorder.nothing_within(0.5)
        recorder.assert_all_on_loop_thread()

    run(scenario)


def test_a_thousand_data_watches_changed_at_once_each_deliver_the_last_version(zookeeper_connect: str) -> None:
    """A thousand watches whose znodes change at once: every watch delivers each znode's last
    version, after its creation, after two rounds of writes, and after its deletion."""
    count = 1000

    async def scenario() -> None:
        latest: dict[int, int | None] = {}
        changes = asyncio.Event()

        def recorder(number: int) -> Callable[[bytes | None, ZNodeStat | None], None]:
            def record(data: bytes | None, stat: ZNodeStat | None) -> None:
                latest[number] = None if stat is None else stat.version
                changes.set()
            return record

        async def settled(expected: int | None) -> None:
            deadline = time.monotonic() + 60
            while any(latest.get(number, "unset") != expected for number in range(count)):
                assert time.monotonic() < deadline, (
                    f"{sum(latest.get(n, 'unset') != expected for n in range(count))} watches short of {expected}")
                changes.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(changes.wait(), 1)

        async with ZooKeeperClient(zookeeper_connect, session_timeout=6.0) as zk:
            await zk.ensure_path("/many")
            await asyncio.gather(*(zk.watch_data(f"/many/{number}", recorder(number)) for number in range(count)))
            await settled(None)
            await asyncio.gather(*(zk.create(f"/many/{number}", b"0") for number in range(count)))
            await settled(0)
            for version in (1, 2):
                await asyncio.gather(*(zk.set(f"/many/{number}", b"%d" % version) for number in range(count)))
                await settled(version)
            await asyncio.gather(*(zk.delete(f"/many/{number}") for number in range(count)))
            await settled(None)

    run(scenario)


def test_children_watch_runs_on_the_loop_thread(zookeeper_connect: str) -> None:
    async def scenario() -> None:
        recorder = Recorder()
        async with ZooKeeperClient(zookeeper_connect, session_timeout=6.0) as zk:
            with pytest.raises(ZNodeMissingError):
                await zk.watch_children("/not-there", recorder.record)
            await zk.ensure_path("/c")
            await zk.watch_children("/c", recorder.record)
            assert await recorder.next() == ([],)
            await zk.create("/c/b")
            assert await recorder.next() == (["b"],)
            await zk.create("/c/a")
            assert await recorder.next() == (["a", "b"],)
            await zk.delete("/c/b")
            assert await recorder.next() == (["a"],)
        recorder.assert_all_on_loop_thread()

    run(scenario)


class PartitionableProxy:
    """A loopback TCP proxy in front of one ZooKeeper server that can cut the network.

    While partitioned, established connections are reset and new ones are accepted but never
    forwarded (a black hole), so the client hears nothing while the server, which keeps
    running, sees its client gone and expires the session on its own clock.
    Runs on the test's event loop.
    """

    def __init__(self, target_port: int) -> None:
        self._target_port = target_port
        self._server: asyncio.AbstractServer | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self.partitioned = False
        self.port = 0

    async def start(self) -> None:
        server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self._server = server
        self.port = server.sockets[0].getsockname()[1]

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        if self.partitioned:
            return
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(
                "127.0.0.1", self._target_port)
        except OSError:
            writer.transport.abort()
            return
        self._writers.add(upstream_writer)
        for source, sink in ((reader, upstream_writer), (upstream_reader, writer)):
            task = asyncio.create_task(self._pump(source, sink))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _pump(self, source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        try:
            while data := await source.read(65536):
                sink.write(data)
                await sink.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            sink.transport.abort()

    def _reset_all(self) -> None:
        for writer in list(self._writers):
            writer.transport.abort()
        self._writers.clear()

    def partition(self) -> None:
        self.partitioned = True
        self._reset_all()

    def heal(self) -> None:
        """Forward again; the black-holed connection attempts are reset so clients retry."""
        self.partitioned = False
        self._reset_all()

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        self._reset_all()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


def test_session_survives_a_short_partition_and_expires_in_a_long_one(
        zookeeper: ZooKeeperServer) -> None:
    """A partition shorter than the session: SUSPENDED → CONNECTED on the same session.
    Longer: the running server expires the session; on healing the client sees
    SUSPENDED → LOST → CONNECTED on a new session, its ephemeral is gone and its watches
    work again."""

    async def scenario() -> None:
        proxy = PartitionableProxy(zookeeper.port)
        await proxy.start()
        connect = f"127.0.0.1:{proxy.port}/partition-{os.getpid()}-{time.monotonic_ns()}"
        try:
            states = Recorder()
            async with ZooKeeperClient(connect, session_timeout=6.0) as patient:
                patient.add_session_listener(states.record)
                session = patient.session_id
                await patient.create("/kept", b"", ephemeral=True)
                proxy.partition()
                assert await states.next(timeout=5.0) == (SessionState.SUSPENDED,)
                await asyncio.sleep(0.5)  # the behaviour: a cut much shorter than the 6 s session
                proxy.heal()
                assert await states.next(timeout=10.0) == (SessionState.CONNECTED,)
                assert patient.session_id == session
                assert await patient.exists("/kept") is not None
            states.assert_all_on_loop_thread()

            states = Recorder()
            data_events = Recorder()
            zk = ZooKeeperClient(connect, session_timeout=2.0)
            zk.add_session_listener(states.record_async)
            await zk.start()
            try:
                assert await states.next() == (SessionState.CONNECTED,)
                first_session = zk.session_id
                await zk.create("/ephemeral", b"", ephemeral=True)
                await zk.create("/watched", b"before")
                await zk.watch_data("/watched", data_events.record)
                assert (await data_events.next())[0] == b"before"

                proxy.partition()
                assert await states.next(timeout=5.0) == (SessionState.SUSPENDED,)
                await asyncio.sleep(3.5)  # the server expires the 2 s session meanwhile
                proxy.heal()
                assert await states.next(timeout=15.0) == (SessionState.LOST,)
                assert await states.next(timeout=15.0) == (SessionState.CONNECTED,)
                assert zk.state is SessionState.CONNECTED
                assert zk.session_id not in (None, first_session)
                assert await zk.exists("/ephemeral") is None

                await zk.set("/watched", b"after")
                assert (await data_events.next())[0] == b"after"
            finally:
                await zk.stop()
            states.assert_all_on_loop_thread()
            data_events.assert_all_on_loop_thread()
        finally:
            await proxy.close()

    run(scenario)


def test_connection_cut_while_watch_reads_wait_loses_no_change_and_stops_cleanly(
        zookeeper: ZooKeeperServer) -> None:
    """A thousand watched znodes change at once and the connection is cut while most of their
    re-reads are still to come: after the reconnect every watch delivers the last version, and
    the client stops promptly."""
    count = 1000

    async def scenario() -> None:
        proxy = PartitionableProxy(zookeeper.port)
        await proxy.start()
        chroot = f"/cut-{os.getpid()}-{time.monotonic_ns()}"
        latest: dict[int, int | None] = {}

        def recorder(number: int) -> Callable[[bytes | None, ZNodeStat | None], None]:
            def record(data: bytes | None, stat: ZNodeStat | None) -> None:
                latest[number] = None if stat is None else stat.version
            return record

        try:
            async with ZooKeeperClient(f"127.0.0.1:{zookeeper.port}{chroot}", session_timeout=6.0) as writer:
                await writer.ensure_path("/many")
                await asyncio.gather(*(writer.create(f"/many/{number}", b"0") for number in range(count)))
                watcher = ZooKeeperClient(f"127.0.0.1:{proxy.port}{chroot}", session_timeout=6.0)
                await watcher.start()
                try:
                    await asyncio.gather(*(watcher.watch_data(f"/many/{number}", recorder(number))
                                           for number in range(count)))
                    assert set(latest.values()) == {0}
                    transaction = writer.transaction()
                    for number in range(count):
                        transaction.set_data(f"/many/{number}", b"1")
                    await transaction.commit()  # a thousand notifications at once
                    deadline = time.monotonic() + 30
                    while 1 not in latest.values():
                        assert time.monotonic() < deadline, "no notification reached the watcher"
                        await asyncio.sleep(0)
                    proxy.partition()  # the first re-reads are answered; most are still to come
                    await asyncio.sleep(0.5)  # the behaviour: a cut much shorter than the 6 s session
                    proxy.heal()
                    deadline = time.monotonic() + 60
                    while set(latest.values()) != {1}:
                        assert time.monotonic() < deadline, f"{sum(v != 1 for v in latest.values())} watches behind"
                        await asyncio.sleep(0.05)
                finally:
                    await asyncio.wait_for(watcher.stop(), 30)
        finally:
            await proxy.close()

    run(scenario)


def test_a_thousand_requests_made_while_the_connection_is_down_leave_the_loop_running(
        zookeeper: ZooKeeperServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """kazoo writes a wake-up byte for every request to a socket that its connection thread reads
    only while connected, blocking once the socket is full (278 bytes' worth at Linux's default
    buffer, which this test sets): a thousand requests made during a cut wait on the loop, which
    keeps running, and each is answered or fails retriably once the cut heals."""
    count = 1000
    monkeypatch.setattr(zk_module, "WAKE_UP_BUFFER_BYTES", 212992 // 2)  # the kernel doubles it

    async def scenario() -> None:
        proxy = PartitionableProxy(zookeeper.port)
        await proxy.start()
        try:
            async with ZooKeeperClient(f"127.0.0.1:{proxy.port}", session_timeout=6.0) as zk:
                await zk.ensure_path("/burst")
                proxy.partition()
                deadline = time.monotonic() + 10
                while zk.state is not SessionState.SUSPENDED:
                    assert time.monotonic() < deadline, "the cut was not noticed"
                    await asyncio.sleep(0.01)
                requests = [asyncio.ensure_future(zk.exists("/burst")) for _ in range(count)]
                began = time.monotonic()
                await asyncio.sleep(0.3)  # the requests start; the loop must come back to this
                assert time.monotonic() - began < 2.0, "the loop was blocked while the connection was down"
                proxy.heal()
                outcomes = await asyncio.wait_for(asyncio.gather(*requests, return_exceptions=True), 60)
                failures = [outcome for outcome in outcomes if isinstance(outcome, BaseException)]
                assert all(isinstance(failure, CoordinationError) and failure.retriable for failure in failures), \
                    failures[:3]
                assert await retry_coordination(lambda: zk.exists("/burst")) is not None
        finally:
            await proxy.close()

    run(scenario)


def test_stop_while_a_thousand_watch_reads_wait_returns_promptly(zookeeper_connect: str) -> None:
    """A broker stops its session while a thousand watch re-reads are still to come (its
    controlled shutdown moved every leader a moment before): stop() returns promptly. A watch
    that sent its re-read from kazoo's connection thread while that thread failed the queued
    requests made this hang."""
    count = 1000

    async def scenario() -> None:
        delivered: list[int] = []
        async with ZooKeeperClient(zookeeper_connect, session_timeout=6.0) as writer:
            root = f"/stopping-{os.getpid()}-{time.monotonic_ns()}"
            await writer.ensure_path(root)
            await asyncio.gather(*(writer.create(f"{root}/{number}", b"0") for number in range(count)))
            watcher = ZooKeeperClient(zookeeper_connect, session_timeout=6.0)
            await watcher.start()
            try:
                def record(data: bytes | None, stat: ZNodeStat | None) -> None:
                    delivered.append(stat.version if stat is not None else -1)

                await asyncio.gather(*(watcher.watch_data(f"{root}/{number}", record) for number in range(count)))
                transaction = writer.transaction()
                for number in range(count):
                    transaction.set_data(f"{root}/{number}", b"1")
                await transaction.commit()
                deadline = time.monotonic() + 30
                while 1 not in delivered:
                    assert time.monotonic() < deadline, "no notification reached the watcher"
                    await asyncio.sleep(0)
            finally:
                began = time.monotonic()
                await asyncio.wait_for(watcher.stop(), 30)
            assert delivered.count(1) < count, "every read was answered before the stop: nothing was waiting"
            assert time.monotonic() - began < 15

    run(scenario)


def test_launcher_script_start_status_stop_round_trip(tmp_path: Path) -> None:
    data_dir = tmp_path / "scripted"
    port = free_ports(1)[0]

    def launcher(*arguments: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["bash", str(LAUNCHER_SCRIPT), *arguments, "--data-dir",
                               str(data_dir)], capture_output=True, text=True, timeout=60)

    started = launcher("start", "--port", str(port), "--tick-time", "500")
    try:
        assert started.returncode == 0, started.stdout + started.stderr
        pid = int((data_dir / "zookeeper.pid").read_text())
        assert four_letter_word(port, "ruok") == "imok"
        again = launcher("start", "--port", str(port), "--tick-time", "500")
        assert again.returncode == 0 and "already running" in again.stdout
        status = launcher("status")
        assert status.returncode == 0 and "mode standalone" in status.stdout

        async def scenario() -> None:
            async with ZooKeeperClient(f"127.0.0.1:{port}/scripted", session_timeout=6.0) as zk:
                await zk.create("/hello", b"world")
                assert (await zk.get("/hello"))[0] == b"world"

        run(scenario)
    finally:
        stopped = launcher("stop")
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    assert "stopped" in stopped.stdout
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert not (data_dir / "zookeeper.pid").exists()
    status = launcher("status")
    assert status.returncode == 3 and "not running" in status.stdout
    assert launcher("stop").returncode == 0


def test_ensemble_client_survives_the_loss_of_the_leader(
        zookeeper_ensemble: ZooKeeperEnsemble) -> None:
    leader = zookeeper_ensemble.leader_index()
    assert leader is not None

    async def scenario() -> None:
        states = Recorder()
        zk = ZooKeeperClient(f"{zookeeper_ensemble.connect_string}/ensemble", session_timeout=6.0)
        zk.add_session_listener(states.record)
        await zk.start()
        try:
            session = zk.session_id
            await zk.create("/registration", b"", ephemeral=True)
            await zk.create("/counter", b"0")

            await asyncio.to_thread(zookeeper_ensemble.kill_node, leader)
            stat = await retry_coordination(lambda: zk.set("/counter", b"1"))
            assert stat.version == 1
            assert await zk.exists("/registration") is not None
            assert zk.session_id == session
            assert (await zk.get("/counter"))[0] == b"1"
            seen = [arguments[0] for arguments in states.drain()]
            assert SessionState.LOST not in seen, seen
        finally:
            await zk.stop()

    try:
        run(scenario)
    finally:
        zookeeper_ensemble.start_node(leader)
    assert all(node.mode() in ("leader", "follower") for node in zookeeper_ensemble.nodes)
