"""Asyncio access to ZooKeeper: the only kafkalite module that imports kazoo.

:class:`ZooKeeperClient` owns one kazoo session and exposes it as coroutines, callbacks on the
event loop and kafkalite errors. Nothing outside this module sees a kazoo type. It implements
the :class:`~kafkalite.coord.coordinator.Coordinator` protocol, whose value types it shares with
the in-memory twin (:mod:`kafkalite.coord.memory`).

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
import concurrent.futures
import contextlib
import functools
import logging
import posixpath
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

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
from kazoo.security import ACL, CREATOR_ALL_ACL, READ_ACL_UNSAFE

from kafkalite.coord.coordinator import (
    ANY_VERSION,
    ChildrenCallback,
    Coordinator,
    DataCallback,
    SessionListener,
    SessionState,
    TransactionBuilder,
    TransactionOperation,
    TransactionResult,
    ZNodeStat,
    as_bytes,
    node_exists_error,
    node_missing_error,
    not_empty_error,
    timeout_error,
    transaction_operation_where,
    version_conflict_error,
)
from kafkalite.coord.watch import SerialDispatcher, SessionListeners, Watch
from kafkalite.errors import (
    CoordinationError,
    IllegalStateError,
    KafkaliteError,
    ZNodeMissingError,
)

logger = logging.getLogger(__name__)

_Result = TypeVar("_Result")

#: Kafka's sensitive znodes (``ZkData.SensitiveRootPaths``): with secure ACLs nobody but their
#: creator may even read them (SCRAM credentials, broker configs with passwords).
SENSITIVE_ROOT_PATHS = ("/config/users", "/config/brokers", "/delegation_token")


def secure_acl(path: str) -> list[ACL]:
    """Kafka's ACL for a znode a broker creates with ``zookeeper.set.acl=true``: every right for
    the identities the creating session authenticated as, plus read for anyone unless the path
    is sensitive (``ZkData.defaultAcls``)."""
    sensitive = any(path == root or path.startswith(root + "/") for root in SENSITIVE_ROOT_PATHS)
    return list(CREATOR_ALL_ACL) if sensitive else [*CREATOR_ALL_ACL, *READ_ACL_UNSAFE]


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


def _translate(exc: BaseException, operation: str, path: str | None) -> KafkaliteError:
    """The kafkalite error for a kazoo (or timeout) exception raised by ``operation``."""
    where = f"{operation} {path}" if path else operation
    if isinstance(exc, NodeExistsError):
        return node_exists_error(where)
    if isinstance(exc, NoNodeError):
        return node_missing_error(where)
    if isinstance(exc, BadVersionError):
        return version_conflict_error(where)
    if isinstance(exc, NotEmptyError):
        return not_empty_error(where)
    if isinstance(exc, (KazooTimeoutError, asyncio.TimeoutError, TimeoutError)):
        return timeout_error(where)
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


class ZooKeeperTransaction(TransactionBuilder):
    """An all-or-nothing ZooKeeper ``multi`` (see :class:`~kafkalite.coord.coordinator.TransactionBuilder`)."""

    def __init__(self, client: ZooKeeperClient) -> None:
        super().__init__(client._commit)


class ZooKeeperClient:
    """One ZooKeeper session for one event loop (see the module docstring for the contract).

    ``connect_string`` is ``host:port[,host:port...][/chroot]``; every path given to the client
    is relative to the chroot, which :meth:`start` creates when missing.
    ``session_timeout`` (seconds) is requested from the server, which clamps it to its
    min/maxSessionTimeout. ``connect_timeout`` bounds :meth:`start`; ``request_timeout`` bounds
    every request. ``auth_data`` (``[("digest", "user:password")]``) authenticates the session;
    with ``secure_acls`` every znode this client creates gets :func:`secure_acl` of its path
    (the chroot too), which needs ``auth_data``.
    """

    def __init__(self, connect_string: str, *, session_timeout: float = 18.0,
                 connect_timeout: float = 15.0, request_timeout: float = 30.0,
                 auth_data: Sequence[tuple[str, str]] = (), secure_acls: bool = False) -> None:
        if secure_acls and not auth_data:
            raise ValueError("secure ACLs need an authenticated session (auth_data)")
        self._auth_data = [tuple(item) for item in auth_data]
        self._secure_acls = secure_acls
        self._hosts, self._chroot = parse_connect_string(connect_string)
        self._connect_string = connect_string.strip()
        #: requests answered (or failed) and the seconds they took, for ``GET /metrics``
        self.requests_completed = 0
        self.request_seconds = 0.0
        if session_timeout <= 0 or connect_timeout <= 0 or request_timeout <= 0:
            raise ValueError("timeouts must be positive")
        self._session_timeout = float(session_timeout)
        self._connect_timeout = float(connect_timeout)
        self._request_timeout = float(request_timeout)
        self._client: KazooClient | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._listeners = SessionListeners()
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

    def session_credentials_for_testing(self) -> tuple[int, bytes] | None:
        """(session id, session password) of the current session, None when not connected.

        Only for tests that expire a session the standard way: a second connection with the
        same credentials, closed at once, makes the server expire the session.
        """
        client = self._client
        client_id = client.client_id if client is not None else None
        return (int(client_id[0]), bytes(client_id[1])) if client_id else None

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
        self._listeners.close()
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
            auth_data=self._auth_data or None,
        )

    def _acl(self, path: str) -> list[ACL] | None:
        """The ACL a znode created at ``path`` gets (None: ZooKeeper's open default)."""
        return secure_acl(path) if self._secure_acls else None

    async def _ensure_levels(self, path: str) -> None:
        """With secure ACLs: create each missing ancestor level of ``path`` (and ``path``) with
        its own ACL, so a sensitive leaf does not make its parents unreadable."""
        client = self._require_client()
        parts = [part for part in path.split("/") if part]
        for index in range(1, len(parts) + 1):
            level = "/" + "/".join(parts[:index])
            with _translated("ensure_path", level):
                await self._completion(client.ensure_path_async(level, acl=self._acl(level)))

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
            parts = [part for part in self._chroot.split("/") if part]
            for index in range(1, len(parts) + 1):
                level = "/" + "/".join(parts[:index])
                bootstrap.ensure_path(level, acl=self._acl(level))
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
        started = loop.time()
        try:
            return await asyncio.wait_for(future, self._request_timeout)
        finally:
            self.requests_completed += 1
            self.request_seconds += loop.time() - started

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
        payload = as_bytes(data)
        if makepath and self._secure_acls:
            await self._ensure_levels(posixpath.dirname(path))
            makepath = False
        with _translated("create", path):
            return str(await self._completion(client.create_async(
                path, payload, acl=self._acl(path), ephemeral=ephemeral, sequence=sequence, makepath=makepath)))

    async def set(self, path: str, data: bytes, version: int = ANY_VERSION) -> ZNodeStat:
        """Replace the data of ``path``; with ``version`` >= 0 only if it still has that version.

        ZNodeVersionConflictError when the version moved on; ZNodeMissingError when absent.
        """
        client = self._require_client()
        payload = as_bytes(data)
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
        if self._secure_acls:
            await self._ensure_levels(path)
            return
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

    async def _commit(self, operations: list[TransactionOperation]) -> list[TransactionResult]:
        client = self._require_client()
        request = client.transaction()
        for operation in operations:
            if operation.kind == "check":
                request.check(operation.path, operation.version)
            elif operation.kind == "create":
                request.create(operation.path, operation.data, acl=self._acl(operation.path),
                               ephemeral=operation.ephemeral, sequence=operation.sequence)
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
            raise _translate(cause, transaction_operation_where(index, operation), None) from cause
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
        dispatcher = SerialDispatcher(loop, callback, f"data watch on {path}")
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
                watch._mark_cancelled()
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
        dispatcher = SerialDispatcher(loop, callback, f"children watch on {path}")
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
                watch._mark_cancelled()
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
        self._listeners.add(loop, listener)

    def remove_session_listener(self, listener: SessionListener) -> None:
        self._listeners.remove(listener)

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
        self._listeners.deliver(state)


if TYPE_CHECKING:
    def _is_a_coordinator(client: ZooKeeperClient) -> Coordinator:
        return client


# KazooState values are the names SessionState uses; keep them in step.
assert {state.value for state in SessionState} == {
    KazooState.CONNECTED, KazooState.SUSPENDED, KazooState.LOST}

__all__ = [
    "ANY_VERSION", "ChildrenCallback", "DataCallback", "SessionListener", "SessionState",
    "TransactionResult", "Watch", "ZNodeStat", "ZooKeeperClient", "ZooKeeperTransaction",
    "parse_connect_string",
]
