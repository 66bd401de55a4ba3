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
* Watches are re-armed after a reconnect and after a session expiry, and deliver the current
  state again when it changed while they were blind: children watches are kazoo's recipe, data
  watches :class:`_WindowedDataWatch`, whose reads (at the start and after each change) share
  one window per session of :data:`WATCH_READS_IN_FLIGHT` asynchronous reads in flight, none
  sent while the connection is down.
* At most :data:`REQUESTS_IN_FLIGHT` requests of one session are unanswered; more wait on the
  loop. kazoo writes a wake-up byte per request to a socket its connection thread reads only
  while connected: a caller that outran that socket would block, the loop with it.
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
import selectors
import socket
import threading
import types
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (
    BadVersionError,
    ConnectionLoss,
    KazooException,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    RolledBackError,
    RuntimeInconsistency,
    SessionExpiredError,
)
from kazoo.handlers.threading import KazooTimeoutError, SequentialThreadingHandler
from kazoo.handlers.utils import selector_select
from kazoo.protocol.states import ZnodeStat
from kazoo.recipe.watchers import ChildrenWatch
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


#: The selector module kazoo's connection thread waits with: poll(2), whose set of two
#: descriptors costs one call per wait; kazoo's default makes, fills and closes an epoll
#: instance for every wait, a third of that thread's time when thousands of watches fire.
_POLL_SELECTORS = types.SimpleNamespace(EVENT_READ=selectors.EVENT_READ, EVENT_WRITE=selectors.EVENT_WRITE,
                                        DefaultSelector=selectors.PollSelector)


class _PollingHandler(SequentialThreadingHandler):  # type: ignore[misc]
    """kazoo's threading handler, waiting with poll(2) instead of a fresh epoll instance (no
    limit on descriptor numbers either, unlike select(2): a broker holds thousands of files)."""

    def select(self, *args: Any, **kwargs: Any) -> Any:
        return selector_select(*args, selectors_module=_POLL_SELECTORS, **kwargs)

    def create_socket_pair(self) -> tuple[socket.socket, socket.socket]:
        """kazoo's wake-up pair, with room for :data:`WAKE_UP_BUFFER_BYTES`: every request
        writes one byte to it, blocking, and only the connection thread's connected loop reads
        them, so with the default buffer (278 bytes' worth) the 279th request made while the
        connection is down blocks its caller until the connection is back."""
        pair: tuple[socket.socket, socket.socket] = super().create_socket_pair()
        for end in pair:
            with contextlib.suppress(OSError):
                end.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, WAKE_UP_BUFFER_BYTES)
        return pair


class ZooKeeperTransaction(TransactionBuilder):
    """An all-or-nothing ZooKeeper ``multi`` (see :class:`~kafkalite.coord.coordinator.TransactionBuilder`)."""

    def __init__(self, client: ZooKeeperClient) -> None:
        super().__init__(client._commit)


#: The send buffer asked for kazoo's wake-up socket (the kernel doubles it and caps it at
#: net.core.wmem_max): room for about 10,000 requests waiting for a connection, against 278 at
#: Linux's default.
WAKE_UP_BUFFER_BYTES = 4 * 1024 * 1024

#: Requests one session's callers (not its data watches, which send nothing while the connection
#: is down) keep unanswered at most: well below the 278 wake-up bytes kazoo's socket pair holds at
#: Linux's default buffer size, so no burst blocks the loop while the connection is down.
REQUESTS_IN_FLIGHT = 128

#: Data-watch reads one session keeps in flight at most. kazoo's own recipe reads one at a time,
#: a round trip each in its single callback thread, so thousands of state znodes changing at once
#: (a broker back in every ISR) reached the loop one round trip after another, and every other
#: watch of the session (the registrations under /brokers/ids among them) waited behind them:
#: a controller saw a broker leave and come back as one "bounce", tens of seconds late. With no
#: limit at all the reads of three brokers flood the one ZooKeeper server.
WATCH_READS_IN_FLIGHT = 256


class _ReadWindow:
    """At most ``limit`` reads in flight; the others wait in arrival order. A read is sent by
    handing its ``send`` to ``dispatch``, which must run it on a thread that kazoo does not own:
    kazoo calls back from its connection thread while holding its state (after a connection
    loss it fails every queued request, in a loop, and a request queued from inside that loop
    would be failed in turn, each writing a wake-up byte to a socket only that thread drains).

    Concurrency: called from kazoo's threads (watch events, answers, session changes) and from
    the thread that sets a watch up; one lock guards the count and the queue, and ``dispatch``
    is called outside it.
    """

    def __init__(self, limit: int, dispatch: Callable[[Callable[[], None]], None]) -> None:
        self._limit = limit
        self._dispatch = dispatch
        self._lock = threading.Lock()
        self._in_flight = 0
        self._waiting: deque[Callable[[], None]] = deque()
        self._closed = False

    def close(self) -> None:
        """Send nothing more (the session is being closed): the waiting reads are dropped, and
        the reads that fail as the session closes hand their slots to no one."""
        with self._lock:
            self._closed = True
            self._waiting.clear()

    def submit(self, send: Callable[[], None]) -> None:
        """Send now when the window has room, else when a read in flight ends. ``send`` must
        lead to exactly one :meth:`done` (also when it fails)."""
        with self._lock:
            if self._closed:
                return
            if self._in_flight >= self._limit:
                self._waiting.append(send)
                return
            self._in_flight += 1
        self._dispatch(send)

    def done(self) -> None:
        """A read ended: its slot goes to the oldest waiting read."""
        with self._lock:
            if self._closed or not self._waiting:
                self._in_flight -= 1
                return
            send = self._waiting.popleft()
        self._dispatch(send)


class _WindowedDataWatch:
    """kazoo's DataWatch semantics, its reads asynchronous and windowed: ``func(data, stat)``
    once at the start and after every change of the znode's version (mzxid), (None, None) while
    it is absent; read again after a reconnect or a session expiry; ``func`` returning False
    ends it. ``started(error)`` is called once, after the first delivery or the first failure
    that no reconnect will repair.

    Each read (a get with the watch, or, for an absent znode, an exists with the watch) goes
    through the session's :class:`_ReadWindow`. Answers of one session arrive in the order the
    reads were sent, so a later read never delivers an older version.

    Concurrency: events, answers and session changes arrive on kazoo's threads; a per-watch lock
    serialises deliveries, and a read already waiting for the window is not queued twice.
    """

    def __init__(self, client: KazooClient, window: _ReadWindow, path: str, func: Callable[..., bool | None],
                 started: Callable[[BaseException | None], None]) -> None:
        self._client = client
        self._window = window
        self._path = path
        self._func = func
        self._started: Callable[[BaseException | None], None] | None = started
        self._lock = threading.Lock()
        self._version: int | None = None
        self._ever_called = False
        self._stopped = False
        self._waiting = False
        client.add_listener(self._on_session)
        self._read()

    def _read(self, _event: object = None) -> None:
        with self._lock:
            if self._stopped or self._waiting:
                return
            self._waiting = True
        self._window.submit(self._send)

    def _send(self) -> None:
        with self._lock:
            self._waiting = False
            stopped = self._stopped
        if stopped or not self._client.connected:
            # Not sent while the connection is down (each request would wait in kazoo's queue
            # with a wake-up byte the connection thread reads only once connected): the session
            # listener reads again on the reconnect.
            self._window.done()
            return
        try:
            self._client.get_async(self._path, watch=self._read).rawlink(self._on_get)
        except Exception as exc:  # a closed client
            self._window.done()
            self._fail(exc)

    def _on_get(self, result: Any) -> None:
        try:
            data, stat = result.get_nowait()
        except NoNodeError:
            try:  # the same slot of the window, until the exists answers
                self._client.exists_async(self._path, watch=self._read).rawlink(self._on_exists)
            except Exception as exc:
                self._window.done()
                self._fail(exc)
            return
        except Exception as exc:  # connection loss, expiry: the session listener reads again
            self._window.done()
            self._fail(exc)
            return
        self._window.done()
        self._deliver(data, stat)

    def _on_exists(self, result: Any) -> None:
        self._window.done()
        try:
            stat = result.get_nowait()
        except Exception as exc:
            self._fail(exc)
            return
        if stat is not None:
            self._read()  # created meanwhile: read its data
        else:
            self._deliver(None, None)

    def _deliver(self, data: bytes | None, stat: ZnodeStat | None) -> None:
        with self._lock:
            if self._stopped:
                return
            version = None if stat is None else stat.mzxid
            if self._ever_called and version == self._version:
                return
            self._version = version
            self._ever_called = True
            try:
                keep = self._func(data, stat)
            except Exception:
                logger.exception("data watch on %s failed", self._path)
                keep = None
            if keep is False:
                self._stop_locked()
            started, self._started = self._started, None
        if started is not None:
            started(None)

    def _fail(self, exc: BaseException) -> None:
        logger.debug("data watch on %s: read failed (%s); read again on reconnect", self._path, exc)
        if isinstance(exc, (ConnectionLoss, SessionExpiredError)):
            return  # the read after the reconnect completes the start, as kazoo's retry would
        started, self._started = self._started, None
        if started is not None:
            started(exc)

    def _on_session(self, state: str) -> None:
        if state == KazooState.CONNECTED and not self._stopped:
            self._read()  # only queues the read: the connection thread calling us is not held

    def _stop_locked(self) -> None:
        self._stopped = True
        with contextlib.suppress(Exception):  # already removed, or the client is gone
            self._client.remove_listener(self._on_session)


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
        self._read_window = _ReadWindow(WATCH_READS_IN_FLIGHT, self._dispatch_read)
        self._requests_in_flight = asyncio.Semaphore(REQUESTS_IN_FLIGHT)
        self._state = SessionState.LOST
        self._stopping = False
        self._used = False

    def _dispatch_read(self, send: Callable[[], None]) -> None:
        """Run a data watch's read on the loop (which only enqueues it with kazoo); dropped once
        the loop is closed, when the client is stopped."""
        loop = self._loop
        if loop is not None:
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(send)

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
        self._read_window.close()
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
            handler=_PollingHandler(),
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
                await self._completion(functools.partial(client.ensure_path_async, level, acl=self._acl(level)))

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

    async def _completion(self, send: Callable[[], Any]) -> Any:
        """Send a request (``send`` makes it and returns kazoo's IAsyncResult) once fewer than
        :data:`REQUESTS_IN_FLIGHT` of this client's are unanswered, and await it: its completion
        is handed to the loop thread. kazoo writes a wake-up byte for every request, blocking,
        and reads them only while connected, so the limit keeps a burst made while the
        connection is down from blocking the loop.

        Kazoo exceptions are re-raised unchanged (callers translate them); no answer within
        ``request_timeout`` raises asyncio.TimeoutError.
        """
        loop = self._loop
        assert loop is not None
        async with self._requests_in_flight:
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

            started = loop.time()
            send().rawlink(on_complete)
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
            data, stat = await self._completion(functools.partial(client.get_async, path))
        return data if data is not None else b"", _convert_stat(stat)

    async def get_children(self, path: str) -> list[str]:
        """The sorted child names of ``path`` (ZNodeMissingError when absent)."""
        client = self._require_client()
        with _translated("get_children", path):
            children = await self._completion(functools.partial(client.get_children_async, path))
        return sorted(children)

    async def exists(self, path: str) -> ZNodeStat | None:
        """The stat of ``path``, or None when it does not exist."""
        client = self._require_client()
        with _translated("exists", path):
            stat = await self._completion(functools.partial(client.exists_async, path))
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
            return str(await self._completion(functools.partial(
                client.create_async, path, payload, acl=self._acl(path), ephemeral=ephemeral, sequence=sequence,
                makepath=makepath)))

    async def set(self, path: str, data: bytes, version: int = ANY_VERSION) -> ZNodeStat:
        """Replace the data of ``path``; with ``version`` >= 0 only if it still has that version.

        ZNodeVersionConflictError when the version moved on; ZNodeMissingError when absent.
        """
        client = self._require_client()
        payload = as_bytes(data)
        with _translated("set", path):
            stat = await self._completion(functools.partial(client.set_async, path, payload, version))
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
                        await self._completion(functools.partial(client.delete_async, path, version))
                    return
                except CoordinationError as exc:
                    if not isinstance(exc.__cause__, NotEmptyError):
                        raise
            raise CoordinationError(f"delete {path}: children keep appearing")
        with _translated("delete", path):
            await self._completion(functools.partial(client.delete_async, path, version))

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
            await self._completion(functools.partial(client.ensure_path_async, path))

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
            raw_results = await self._completion(request.commit_async)
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
        first: asyncio.Future[None] = loop.create_future()

        def settle(error: BaseException | None) -> None:
            if not first.done():
                if error is None:
                    first.set_result(None)
                else:
                    first.set_exception(error)

        def started(error: BaseException | None) -> None:  # kazoo thread
            with contextlib.suppress(RuntimeError):  # the loop is closed
                loop.call_soon_threadsafe(settle, error)

        try:
            with _translated("watch_data", path):
                # ends at its first event after the watch is cancelled (on_data returns False)
                _WindowedDataWatch(client, self._read_window, path, on_data, started)
                await first
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
