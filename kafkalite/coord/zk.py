"""Asyncio access to ZooKeeper: the only kafkalite module that imports kazoo.

:class:`ZooKeeperClient` owns one kazoo session and exposes it as coroutines, callbacks on the
event loop and kafkalite errors. Nothing outside this module sees a kazoo type.

Concurrency contract
--------------------
* A client belongs to the event loop that awaits :meth:`ZooKeeperClient.start`. Every public
  coroutine must be awaited on that loop; none of them blocks it.
* Requests go through kazoo's asynchronous API: the loop thread only enqueues the request (a
  deque append and a one-byte wake-up write); kazoo's threads complete it and the result is
  handed to the loop with ``loop.call_soon_threadsafe``. Calls that only exist in blocking
  form (connect, close, setting up a watch recipe) run on a small private thread pool, never on
  the loop and never on the loop's default executor.
* Watch callbacks and session listeners run **on the loop thread**. Each registration receives
  its events one at a time, in the order kazoo produced them; a coroutine callback is awaited
  before the next event of the same registration is delivered. Different registrations do not
  wait for each other. A callback that raises is logged; its registration stays active.
* Requests are never retried here. A connection problem surfaces as a (retriable)
  :class:`~kafkalite.errors.CoordinationError`; the outcome of a write that failed that way is
  unknown, so callers re-read before retrying. A request that has no answer after
  ``request_timeout`` seconds fails the same way.
* Watches are kazoo recipes: they are re-armed after a reconnect and after a session expiry, and
  deliver the current state again when it changed while they were blind.
* After :meth:`ZooKeeperClient.stop` starts, no callback or listener is invoked any more.

Error mapping (always chained with ``raise ... from``): NodeExistsError → ZNodeExistsError,
NoNodeError → ZNodeMissingError, BadVersionError → ZNodeVersionConflictError, everything else
kazoo raises (connection loss, session expiry, closed client, timeouts, not-empty, ...) →
CoordinationError.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import enum
import functools
import inspect
import logging
import posixpath
import threading
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (
    BadVersionError,
    KazooException,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    RolledBackError,
    RuntimeInconsistency,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import ZnodeStat
from kazoo.recipe.watchers import ChildrenWatch, DataWatch
from kazoo.retry import KazooRetry

from kafkalite.errors import (
    CoordinationError,
    IllegalStateError,
    KafkaliteError,
    ZNodeExistsError,
    ZNodeMissingError,
    ZNodeVersionConflictError,
)

logger = logging.getLogger(__name__)

_Result = TypeVar("_Result")

#: Version value meaning "any version" for set/delete.
ANY_VERSION = -1


class SessionState(str, enum.Enum):
    """Session states delivered to session listeners (they compare equal to their names)."""

    CONNECTED = "CONNECTED"  #: connected, with a session (a new one if the previous was LOST)
    SUSPENDED = "SUSPENDED"  #: connection lost; the session may still be alive
    LOST = "LOST"  #: the session expired: its ephemerals are gone, its watches were dropped

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True, slots=True)
class ZNodeStat:
    """The metadata ZooKeeper keeps for a znode (times in epoch milliseconds)."""

    version: int
    czxid: int
    mzxid: int
    ephemeral_owner: int
    cversion: int
    num_children: int
    data_length: int
    ctime_ms: int
    mtime_ms: int
    pzxid: int

    @property
    def is_ephemeral(self) -> bool:
        return self.ephemeral_owner != 0


DataCallback = Callable[[bytes | None, ZNodeStat | None], Awaitable[None] | None]
"""Called with (data, stat), or (None, None) while the znode does not exist."""
ChildrenCallback = Callable[[list[str]], Awaitable[None] | None]
"""Called with the sorted child names."""
SessionListener = Callable[[SessionState], Awaitable[None] | None]
"""Called with each session state change."""


def _convert_stat(stat: ZnodeStat) -> ZNodeStat:
    return ZNodeStat(version=stat.version, czxid=stat.czxid, mzxid=stat.mzxid,
                     ephemeral_owner=stat.ephemeralOwner, cversion=stat.cversion,
                     num_children=stat.numChildren, data_length=stat.dataLength,
                     ctime_ms=stat.ctime, mtime_ms=stat.mtime, pzxid=stat.pzxid)


def parse_connect_string(connect_string: str) -> tuple[str, str]:
    """Split ``host:port[,host:port...][/chroot]`` into (hosts, chroot).

    The chroot is normalised (``""`` when absent or ``/``). Raises ValueError when malformed.
    """
    if not isinstance(connect_string, str) or not connect_string.strip():
        raise ValueError("empty ZooKeeper connect string")
    hosts, slash, chroot = connect_string.strip().partition("/")
    for host in hosts.split(","):
        name, colon, port = host.strip().rpartition(":")
        if not host.strip() or (colon and (not name or not port.isdigit())):
            raise ValueError(f"malformed host {host!r} in ZooKeeper connect string "
                             f"{connect_string!r}")
    if not slash:
        return hosts, ""
    normalised = posixpath.normpath("/" + chroot)
    if normalised.startswith("//"):
        normalised = normalised[1:]
    if "." in normalised.split("/") or ".." in normalised.split("/"):
        raise ValueError(f"chroot {chroot!r} must not contain '.' or '..'")
    return hosts, "" if normalised == "/" else normalised


def _bytes(data: bytes | bytearray | memoryview) -> bytes:
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(f"znode data must be bytes, got {type(data).__name__}")
    return bytes(data)


def _translate(exc: BaseException, operation: str, path: str | None) -> KafkaliteError:
    """The kafkalite error for a kazoo (or timeout) exception raised by ``operation``."""
    where = f"{operation} {path}" if path else operation
    if isinstance(exc, NodeExistsError):
        return ZNodeExistsError(f"{where}: znode already exists")
    if isinstance(exc, NoNodeError):
        return ZNodeMissingError(f"{where}: znode (or its parent) does not exist")
    if isinstance(exc, BadVersionError):
        return ZNodeVersionConflictError(f"{where}: znode version does not match")
    if isinstance(exc, NotEmptyError):
        return CoordinationError(f"{where}: znode has children")
    if isinstance(exc, (KazooTimeoutError, asyncio.TimeoutError, TimeoutError)):
        return CoordinationError(f"{where}: ZooKeeper did not answer in time (outcome unknown)")
    name = type(exc).__name__
    detail = str(exc)
    return CoordinationError(f"{where}: {name}{': ' + detail if detail else ''}")


@contextlib.contextmanager
def _translated(operation: str, path: str | None = None) -> Iterator[None]:
    """Re-raise kazoo exceptions (and timeouts) inside the block as kafkalite errors."""
    try:
        yield
    except (TimeoutError, KazooException, KazooTimeoutError) as exc:
        raise _translate(exc, operation, path) from exc


class _SerialDispatcher:
    """Delivers one registration's events on the loop, in order, one at a time.

    ``push`` must be called on the loop thread. Plain callbacks run inline; a coroutine result
    is awaited in a task before the next queued event is delivered.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, callback: Callable[..., Any],
                 description: str) -> None:
        self._loop = loop
        self._callback = callback
        self._description = description
        self._pending: collections.deque[tuple[Any, ...]] = collections.deque()
        self._draining = False
        self._closed = False
        self._task: asyncio.Task[None] | None = None

    @property
    def closed(self) -> bool:
        return self._closed

    def push(self, arguments: tuple[Any, ...]) -> None:
        if self._closed:
            return
        self._pending.append(arguments)
        if not self._draining:
            self._draining = True
            self._drain()

    def _drain(self) -> None:
        while self._pending and not self._closed:
            arguments = self._pending.popleft()
            try:
                result = self._callback(*arguments)
            except Exception:
                logger.exception("ZooKeeper callback for %s failed", self._description)
                continue
            if inspect.isawaitable(result):
                self._task = self._loop.create_task(self._await_then_drain(result))
                return
        self._draining = False

    async def _await_then_drain(self, awaitable: Awaitable[Any]) -> None:
        try:
            await awaitable
        except asyncio.CancelledError:
            self._draining = False
            raise
        except Exception:
            logger.exception("ZooKeeper callback for %s failed", self._description)
        self._task = None
        self._drain()

    def close(self) -> None:
        """Drop queued events and cancel a running callback (unless it is the caller)."""
        self._closed = True
        self._pending.clear()
        task = self._task
        try:
            current = asyncio.current_task()
        except RuntimeError:  # not on a running loop
            current = None
        if task is not None and not task.done() and task is not current:
            task.cancel()


class Watch:
    """Handle of a data or children watch registered with a :class:`ZooKeeperClient`.

    :meth:`cancel` stops delivery at once (call it on the loop thread); kazoo forgets the
    recipe at its next event.
    """

    def __init__(self, kind: str, path: str, dispatcher: _SerialDispatcher) -> None:
        self.kind = kind
        self.path = path
        self._dispatcher = dispatcher
        self._cancelled = threading.Event()

    @property
    def active(self) -> bool:
        return not self._cancelled.is_set()

    def cancel(self) -> None:
        self._cancelled.set()
        self._dispatcher.close()

    def __repr__(self) -> str:
        state = "active" if self.active else "cancelled"
        return f"<Watch {self.kind} {self.path} {state}>"


@dataclass(frozen=True, slots=True)
class _TransactionOperation:
    kind: str  # "check" | "create" | "set_data" | "delete"
    path: str
    data: bytes = b""
    version: int = ANY_VERSION
    ephemeral: bool = False
    sequence: bool = False

    def describe(self) -> str:
        version = "" if self.version == ANY_VERSION else f" version {self.version}"
        return f"{self.kind} {self.path}{version}"


TransactionResult = str | ZNodeStat | bool
"""create → created path; set_data → new stat; check and delete → True."""


class ZooKeeperTransaction:
    """An all-or-nothing ZooKeeper ``multi``, built with chained calls and committed once.

    Owned by the coroutine that builds it; not thread-safe. If any operation fails, none is
    applied and :meth:`commit` raises the error of the first failing operation (a failed
    ``check`` raises ZNodeVersionConflictError, or ZNodeMissingError when the znode is gone).
    """

    def __init__(self, client: ZooKeeperClient) -> None:
        self._client = client
        self._operations: list[_TransactionOperation] = []
        self._committed = False

    def _add(self, operation: _TransactionOperation) -> ZooKeeperTransaction:
        if self._committed:
            raise IllegalStateError("transaction already committed")
        self._operations.append(operation)
        return self

    def check(self, path: str, version: int) -> ZooKeeperTransaction:
        """Require ``path`` to exist with exactly ``version``."""
        return self._add(_TransactionOperation("check", path, version=version))

    def create(self, path: str, data: bytes = b"", *, ephemeral: bool = False,
               sequence: bool = False) -> ZooKeeperTransaction:
        """Create ``path`` (its parent must exist, or be created earlier in this transaction)."""
        return self._add(_TransactionOperation("create", path, data=_bytes(data),
                                               ephemeral=ephemeral, sequence=sequence))

    def set_data(self, path: str, data: bytes, version: int = ANY_VERSION) -> ZooKeeperTransaction:
        """Replace the data of ``path``, conditioned on ``version`` unless it is -1."""
        return self._add(_TransactionOperation("set_data", path, data=_bytes(data),
                                               version=version))

    def delete(self, path: str, version: int = ANY_VERSION) -> ZooKeeperTransaction:
        """Delete ``path`` (no children allowed), conditioned on ``version`` unless it is -1."""
        return self._add(_TransactionOperation("delete", path, version=version))

    @property
    def operations(self) -> int:
        return len(self._operations)

    async def commit(self) -> list[TransactionResult]:
        """Apply every operation or none; returns one result per operation, in order."""
        if self._committed:
            raise IllegalStateError("transaction already committed")
        self._committed = True
        return await self._client._commit(list(self._operations))


class ZooKeeperClient:
    """One ZooKeeper session for one event loop (see the module docstring for the contract).

    ``connect_string`` is ``host:port[,host:port...][/chroot]``; every path given to the client
    is relative to the chroot, which :meth:`start` creates when missing.
    ``session_timeout`` (seconds) is requested from the server, which clamps it to its
    min/maxSessionTimeout. ``connect_timeout`` bounds :meth:`start`; ``request_timeout`` bounds
    every request.
    """

    def __init__(self, connect_string: str, *, session_timeout: float = 18.0,
                 connect_timeout: float = 15.0, request_timeout: float = 30.0) -> None:
        self._hosts, self._chroot = parse_connect_string(connect_string)
        self._connect_string = connect_string.strip()
        if session_timeout <= 0 or connect_timeout <= 0 or request_timeout <= 0:
            raise ValueError("timeouts must be positive")
        self._session_timeout = float(session_timeout)
        self._connect_timeout = float(connect_timeout)
        self._request_timeout = float(request_timeout)
        self._client: KazooClient | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._listeners: dict[SessionListener, _SerialDispatcher] = {}
        self._watches: set[Watch] = set()
        self._state = SessionState.LOST
        self._stopping = False
        self._used = False

    # --- lifecycle ------------------------------------------------------------------------

    @property
    def connect_string(self) -> str:
        return self._connect_string

    @property
    def chroot(self) -> str:
        """The chroot every path is relative to (``""`` when none)."""
        return self._chroot

    @property
    def started(self) -> bool:
        return self._client is not None and not self._stopping

    @property
    def state(self) -> SessionState:
        """The last session state delivered on the loop (LOST before start and after stop)."""
        return self._state

    @property
    def session_id(self) -> int | None:
        """The current session id; None while not connected (not started, SUSPENDED, or LOST
        and not yet re-established)."""
        client = self._client
        if client is None:
            return None
        client_id = client.client_id
        return int(client_id[0]) if client_id else None

    @property
    def session_timeout(self) -> float:
        """The requested session timeout in seconds."""
        return self._session_timeout

    async def start(self) -> None:
        """Connect (creating the chroot if missing); CoordinationError when that fails in time.

        A client is started once; after :meth:`stop` (or a failed start) make a new one.
        """
        if self._used:
            raise IllegalStateError("a ZooKeeper client can be started only once")
        self._used = True
        self._loop = asyncio.get_running_loop()
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=4, thread_name_prefix="kafkalite-zk")
        try:
            if self._chroot:
                with _translated("create chroot", self._chroot):
                    await self._blocking(self._create_chroot)
            client = self._new_kazoo_client(self._hosts + self._chroot)
            client.add_listener(self._on_kazoo_state)
            self._client = client
            with _translated("connect to", self._connect_string):
                await self._blocking(self._start_session, client)
        except BaseException:
            client_to_close = self._client
            self._client = None
            if client_to_close is not None:
                client_to_close.remove_listener(self._on_kazoo_state)
                await self._blocking_quietly(client_to_close.stop)
                await self._blocking_quietly(client_to_close.close)
            self._executor.shutdown(wait=False)
            self._executor = None
            raise
        self._state = SessionState.CONNECTED

    async def stop(self) -> None:
        """Close the session (its ephemerals vanish at once) and release every thread."""
        client = self._client
        if client is None or self._stopping:
            return
        self._stopping = True
        for watch in list(self._watches):
            watch.cancel()
        self._watches.clear()
        for dispatcher in self._listeners.values():
            dispatcher.close()
        client.remove_listener(self._on_kazoo_state)
        await self._blocking_quietly(client.stop)
        await self._blocking_quietly(client.close)
        self._client = None
        self._state = SessionState.LOST
        if self._executor is not None:
            self._executor.shutdown(wait=False)
            self._executor = None

    async def __aenter__(self) -> ZooKeeperClient:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    def _new_kazoo_client(self, hosts: str) -> KazooClient:
        return KazooClient(
            hosts=hosts,
            timeout=self._session_timeout,
            connection_retry=KazooRetry(max_tries=-1, delay=0.1, backoff=2, max_delay=1.0),
            command_retry=KazooRetry(max_tries=3, delay=0.1, backoff=2, max_delay=1.0),
        )

    def _start_session(self, client: KazooClient) -> None:
        """(worker thread) Connect ``client``; CoordinationError when no session in time."""
        try:
            client.start(self._connect_timeout)
        except KazooTimeoutError as exc:
            raise CoordinationError(
                f"connect to {self._hosts}: no ZooKeeper session within "
                f"{self._connect_timeout:g}s") from exc

    def _create_chroot(self) -> None:
        """(worker thread) Create the chroot through a short-lived session without chroot."""
        bootstrap = self._new_kazoo_client(self._hosts)
        try:
            self._start_session(bootstrap)
            bootstrap.ensure_path(self._chroot)
        finally:
            with contextlib.suppress(Exception):
                bootstrap.stop()
            with contextlib.suppress(Exception):
                bootstrap.close()

    # --- plumbing -------------------------------------------------------------------------

    def _require_client(self) -> KazooClient:
        client = self._client
        if client is None or self._stopping:
            raise IllegalStateError("ZooKeeper client is not started")
        return client

    async def _blocking(self, function: Callable[..., _Result], *arguments: Any) -> _Result:
        """Run a blocking kazoo call on the private pool."""
        assert self._loop is not None and self._executor is not None
        return await self._loop.run_in_executor(self._executor,
                                                functools.partial(function, *arguments))

    async def _blocking_quietly(self, function: Callable[[], Any]) -> None:
        try:
            await self._blocking(function)
        except Exception:
            logger.debug("ignored error while closing a ZooKeeper client", exc_info=True)

    async def _completion(self, async_result: Any) -> Any:
        """Await a kazoo IAsyncResult: its completion is handed to the loop thread.

        Kazoo exceptions are re-raised unchanged (callers translate them); no answer within
        ``request_timeout`` raises asyncio.TimeoutError.
        """
        loop = self._loop
        assert loop is not None
        future: asyncio.Future[Any] = loop.create_future()

        def settle_on_loop(result: Any) -> None:
            if future.done():
                return
            if result.successful():
                future.set_result(result.value)
            else:
                future.set_exception(result.exception)

        def on_complete(result: Any) -> None:  # kazoo thread
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits
                loop.call_soon_threadsafe(settle_on_loop, result)

        async_result.rawlink(on_complete)
        return await asyncio.wait_for(future, self._request_timeout)

    # --- data operations ------------------------------------------------------------------

    async def get(self, path: str) -> tuple[bytes, ZNodeStat]:
        """The data and stat of ``path`` (ZNodeMissingError when absent)."""
        client = self._require_client()
        with _translated("get", path):
            data, stat = await self._completion(client.get_async(path))
        return data if data is not None else b"", _convert_stat(stat)

    async def get_children(self, path: str) -> list[str]:
        """The sorted child names of ``path`` (ZNodeMissingError when absent)."""
        client = self._require_client()
        with _translated("get_children", path):
            children = await self._completion(client.get_children_async(path))
        return sorted(children)

    async def exists(self, path: str) -> ZNodeStat | None:
        """The stat of ``path``, or None when it does not exist."""
        client = self._require_client()
        with _translated("exists", path):
            stat = await self._completion(client.exists_async(path))
        return _convert_stat(stat) if stat is not None else None

    async def create(self, path: str, data: bytes = b"", *, ephemeral: bool = False,
                     sequence: bool = False, makepath: bool = False) -> str:
        """Create ``path`` and return the created path (with its sequence suffix, if any).

        ``makepath`` creates missing parents (persistent, empty). ZNodeExistsError when the
        znode exists; ZNodeMissingError when the parent is missing and ``makepath`` is False.
        """
        client = self._require_client()
        payload = _bytes(data)
        with _translated("create", path):
            return str(await self._completion(client.create_async(
                path, payload, ephemeral=ephemeral, sequence=sequence, makepath=makepath)))

    async def set(self, path: str, data: bytes, version: int = ANY_VERSION) -> ZNodeStat:
        """Replace the data of ``path``; with ``version`` >= 0 only if it still has that version.

        ZNodeVersionConflictError when the version moved on; ZNodeMissingError when absent.
        """
        client = self._require_client()
        payload = _bytes(data)
        with _translated("set", path):
            stat = await self._completion(client.set_async(path, payload, version))
        return _convert_stat(stat)

    async def delete(self, path: str, version: int = ANY_VERSION, *,
                     recursive: bool = False) -> None:
        """Delete ``path`` (conditioned on ``version`` unless -1).

        With ``recursive`` the children are deleted first (depth first, unconditionally) and
        the version check applies to ``path`` itself; children created concurrently make the
        call retry a few times before it gives up with CoordinationError.
        """
        client = self._require_client()
        if recursive:
            for _ in range(5):
                for child in await self._children_or_empty(path):
                    await self._delete_tree(posixpath.join(path, child))
                try:
                    with _translated("delete", path):
                        await self._completion(client.delete_async(path, version))
                    return
                except CoordinationError as exc:
                    if not isinstance(exc.__cause__, NotEmptyError):
                        raise
            raise CoordinationError(f"delete {path}: children keep appearing")
        with _translated("delete", path):
            await self._completion(client.delete_async(path, version))

    async def _children_or_empty(self, path: str) -> list[str]:
        try:
            return await self.get_children(path)
        except ZNodeMissingError:
            return []

    async def _delete_tree(self, path: str) -> None:
        for child in await self._children_or_empty(path):
            await self._delete_tree(posixpath.join(path, child))
        with contextlib.suppress(ZNodeMissingError):
            await self.delete(path)

    async def ensure_path(self, path: str) -> None:
        """Create ``path`` and its missing parents (persistent, empty); no error if present."""
        client = self._require_client()
        with _translated("ensure_path", path):
            await self._completion(client.ensure_path_async(path))

    async def ensure_paths(self, paths: Sequence[str]) -> None:
        """:meth:`ensure_path` for each path, in order."""
        for path in paths:
            await self.ensure_path(path)

    def transaction(self) -> ZooKeeperTransaction:
        """A new all-or-nothing transaction builder; nothing is sent before ``commit()``."""
        self._require_client()
        return ZooKeeperTransaction(self)

    async def _commit(self, operations: list[_TransactionOperation]) -> list[TransactionResult]:
        client = self._require_client()
        request = client.transaction()
        for operation in operations:
            if operation.kind == "check":
                request.check(operation.path, operation.version)
            elif operation.kind == "create":
                request.create(operation.path, operation.data, ephemeral=operation.ephemeral,
                               sequence=operation.sequence)
            elif operation.kind == "set_data":
                request.set_data(operation.path, operation.data, operation.version)
            else:
                request.delete(operation.path, operation.version)
        with _translated("transaction"):
            raw_results = await self._completion(request.commit_async())
        failures = [
            (index, result) for index, result in enumerate(raw_results)
            if isinstance(result, Exception)
        ]
        if failures:
            index, cause = next(
                ((index, result) for index, result in failures
                 if not isinstance(result, (RolledBackError, RuntimeInconsistency))),
                failures[0],
            )
            operation = operations[index]
            raise _translate(cause, f"transaction operation #{index} ({operation.describe()})",
                             None) from cause
        results: list[TransactionResult] = []
        for result in raw_results:
            if isinstance(result, ZnodeStat):
                results.append(_convert_stat(result))
            elif isinstance(result, str):
                results.append(result)
            else:
                results.append(True)
        return results

    # --- watches --------------------------------------------------------------------------

    async def watch_data(self, path: str, callback: DataCallback) -> Watch:
        """Call ``callback(data, stat)`` on the loop now and after every change of ``path``.

        The znode need not exist: while it is absent the callback gets (None, None). The watch
        lasts until cancelled or the client stops, across reconnects and session expiry.
        """
        client = self._require_client()
        loop = self._loop
        assert loop is not None
        dispatcher = _SerialDispatcher(loop, callback, f"data watch on {path}")
        watch = Watch("data", path, dispatcher)

        def on_data(data: bytes | None, stat: ZnodeStat | None, event: object = None) -> bool | None:
            # kazoo thread; returning False tells the recipe to stop.
            if not watch.active:
                return False
            converted = _convert_stat(stat) if stat is not None else None
            payload = (data if data is not None else b"") if converted is not None else None
            try:
                loop.call_soon_threadsafe(dispatcher.push, (payload, converted))
            except RuntimeError:  # the loop is closed
                watch._cancelled.set()
                return False
            return None

        self._watches.add(watch)
        try:
            with _translated("watch_data", path):
                await self._blocking(DataWatch, client, path, on_data)
        except BaseException:
            watch.cancel()
            self._watches.discard(watch)
            raise
        return watch

    async def watch_children(self, path: str, callback: ChildrenCallback) -> Watch:
        """Call ``callback(children)`` on the loop now and after every change of the children.

        ``path`` must exist (ZNodeMissingError otherwise). The watch lasts until cancelled, the
        client stops, or ``path`` is deleted (kazoo's recipe ends silently then).
        """
        client = self._require_client()
        loop = self._loop
        assert loop is not None
        dispatcher = _SerialDispatcher(loop, callback, f"children watch on {path}")
        watch = Watch("children", path, dispatcher)
        delivered_initial = threading.Event()

        def on_children(children: list[str]) -> bool | None:
            # kazoo thread; returning False tells the recipe to stop.
            delivered_initial.set()
            if not watch.active:
                return False
            try:
                loop.call_soon_threadsafe(dispatcher.push, (sorted(children),))
            except RuntimeError:  # the loop is closed
                watch._cancelled.set()
                return False
            return None

        self._watches.add(watch)
        try:
            with _translated("watch_children", path):
                await self._blocking(ChildrenWatch, client, path, on_children)
            if not delivered_initial.is_set():
                raise ZNodeMissingError(f"watch_children {path}: znode does not exist")
        except BaseException:
            watch.cancel()
            self._watches.discard(watch)
            raise
        return watch

    # --- session state --------------------------------------------------------------------

    def add_session_listener(self, listener: SessionListener) -> None:
        """Deliver every later session state change to ``listener`` on the loop thread.

        May be called before :meth:`start`; the listener then also sees the first CONNECTED.
        """
        loop = self._loop
        if loop is None:
            loop = asyncio.get_running_loop()
            self._loop = loop
        if listener not in self._listeners:
            self._listeners[listener] = _SerialDispatcher(loop, listener, "session listener")

    def remove_session_listener(self, listener: SessionListener) -> None:
        dispatcher = self._listeners.pop(listener, None)
        if dispatcher is not None:
            dispatcher.close()

    def _on_kazoo_state(self, state: str) -> None:
        """(kazoo connection thread) Hand a state change to the loop; must not block."""
        loop = self._loop
        if loop is None:
            return
        try:
            session_state = SessionState(str(state))
        except ValueError:
            logger.warning("unknown kazoo session state %r", state)
            return
        with contextlib.suppress(RuntimeError):  # the loop is closed
            loop.call_soon_threadsafe(self._deliver_state, session_state)

    def _deliver_state(self, state: SessionState) -> None:
        if self._stopping:
            return
        if state is SessionState.LOST:
            logger.warning("ZooKeeper session lost (%s)", self._connect_string)
        elif state is SessionState.SUSPENDED:
            logger.info("ZooKeeper connection suspended (%s)", self._connect_string)
        self._state = state
        for dispatcher in list(self._listeners.values()):
            dispatcher.push((state,))


# KazooState values are the names SessionState uses; keep them in step.
assert {state.value for state in SessionState} == {
    KazooState.CONNECTED, KazooState.SUSPENDED, KazooState.LOST}

__all__ = [
    "ANY_VERSION", "ChildrenCallback", "DataCallback", "SessionListener", "SessionState",
    "TransactionResult", "Watch", "ZNodeStat", "ZooKeeperClient", "ZooKeeperTransaction",
    "parse_connect_string",
]
