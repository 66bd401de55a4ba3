"""An in-memory twin of ZooKeeper for unit tests: :class:`InMemoryZooKeeper` and its clients.

:class:`InMemoryZooKeeper` plays the ensemble: the znode tree, the zxid counter, the sessions
with their ephemerals and their one-shot server-side watches. :class:`InMemoryCoordinator` is a
client bound to it that implements :class:`~kafkalite.coord.coordinator.Coordinator` with
ZooKeeper's semantics (the contract suite in ``tests/contract`` pins them on both this twin and
a real server):

* data versions and the parent's cversion; czxid, mzxid and pzxid from one zxid counter (a
  transaction is one zxid); ctime and mtime from the injected ``clock`` (epoch milliseconds);
* sequential names carry a 10-digit suffix counting the children ever created under the
  parent (what ZooKeeper 3.8 does: its cversion counts creations and deletions, the sequence
  only creations);
* NodeExists / NoNode / BadVersion / NotEmpty map to the kafkalite errors and messages
  :mod:`kafkalite.coord.zk` uses; a transaction applies all of its operations or none and
  names the operation that failed;
* ephemerals are owned by a session and vanish when it is closed or expires;
* server-side watches are one-shot (a get/exists arms a data watch, a get_children a child
  watch; the first change fires and disarms them); the persistent watches of the protocol are
  recipes on top that re-read and re-arm when a watch fires, exactly like kazoo's DataWatch and
  ChildrenWatch, so changes made before the re-read are coalesced the same way.

Test controls (on the client, or by session id on the ensemble): :meth:`InMemoryCoordinator.
expire_session` (the session's ephemerals go at once; the client then sees LOST and CONNECTED
with a new session id), :meth:`~InMemoryCoordinator.disconnect` / :meth:`~InMemoryCoordinator.
reconnect` (SUSPENDED meanwhile; requests fail with a retriable CoordinationError; the session
and its ephemerals stay), :meth:`~InMemoryCoordinator.fail_next_request` (the next matching
request fails, optionally after it was applied, like a write whose answer was lost), and
:meth:`InMemoryZooKeeper.settle` to let every pending notification and callback run.

Nothing here sleeps or reads real time: requests yield to the loop once (so a caller that
loops on requests never starves it) and apply at once; notifications travel by
``loop.call_soon``. The time stamps in stats come from ``clock``.

Concurrency: one event loop. An ensemble may serve any number of clients on that loop; every
method is called on the loop thread.
"""

from __future__ import annotations

import asyncio
import logging
import posixpath
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar

from kafkalite.coord.coordinator import (
    ANY_VERSION,
    ChildrenCallback,
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
    transaction_operation_where,
    version_conflict_error,
)
from kafkalite.coord.watch import SerialDispatcher, Watch
from kafkalite.errors import CoordinationError, IllegalStateError, KafkaliteError

if TYPE_CHECKING:
    from kafkalite.coord.coordinator import Coordinator

logger = logging.getLogger(__name__)

_Result = TypeVar("_Result")

#: Request names :meth:`InMemoryCoordinator.fail_next_request` matches.
OPERATIONS = frozenset({"get", "get_children", "exists", "create", "set", "delete", "ensure_path",
                        "transaction", "watch_data", "watch_children"})


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


def _validate_path(path: str) -> None:
    if not isinstance(path, str):
        raise TypeError(f"znode path must be a str, got {type(path).__name__}")
    if path == "/":
        return
    if not path.startswith("/") or path.endswith("/") or "//" in path:
        raise ValueError(f"invalid znode path {path!r}")
    if any(part in (".", "..") for part in path.split("/")):
        raise ValueError(f"invalid znode path {path!r} ('.' and '..' are not allowed)")


def _parent(path: str) -> str:
    return posixpath.dirname(path) or "/"


def _join(parent: str, name: str) -> str:
    return f"/{name}" if parent == "/" else f"{parent}/{name}"


class _Recipe:
    """A persistent watch on one path, built on the ensemble's one-shot watches (base class)."""

    def __init__(self, client: InMemoryCoordinator, path: str, watch: Watch,
                 dispatcher: SerialDispatcher) -> None:
        self.client = client
        self.path = path
        self.watch = watch
        self.dispatcher = dispatcher
        self.stopped = False

    @property
    def live(self) -> bool:
        return self.watch.active and not self.stopped and not self.client._stopping

    def on_trigger(self) -> None:
        """A server-side watch fired: re-read (re-arming the watch) and deliver."""
        self.refresh()

    def on_disconnected(self) -> None:
        """SUSPENDED or LOST was delivered."""

    def on_connected(self) -> None:
        """CONNECTED was delivered (after a reconnect or on a new session)."""
        self.refresh()

    def refresh(self) -> bool:
        raise NotImplementedError


class _DataRecipe(_Recipe):
    """kazoo's DataWatch: deliver when the mzxid differs from the last one seen (or first)."""

    def __init__(self, client: InMemoryCoordinator, path: str, watch: Watch,
                 dispatcher: SerialDispatcher) -> None:
        super().__init__(client, path, watch, dispatcher)
        self._version: int | None = None
        self._ever_called = False

    def refresh(self) -> bool:
        session = self.client._connected_session()
        if not self.live or session is None:
            return False
        node = self.client._ensemble._read_and_arm(session, self.path, self, children=False)
        version = node.mzxid if node is not None else None
        if self._ever_called and version == self._version:
            return True
        self._ever_called = True
        self._version = version
        if node is None:
            self.dispatcher.push((None, None))
        else:
            self.dispatcher.push((node.data, node.stat()))
        return True


class _ChildrenRecipe(_Recipe):
    """kazoo's ChildrenWatch: deliver on every notification; after a reconnect only if changed;
    end silently when the znode is gone."""

    def __init__(self, client: InMemoryCoordinator, path: str, watch: Watch,
                 dispatcher: SerialDispatcher) -> None:
        super().__init__(client, path, watch, dispatcher)
        self._established = False
        self._prior: list[str] | None = None

    def on_disconnected(self) -> None:
        self._established = False

    def on_connected(self) -> None:
        if not self._established:
            self.refresh()

    def refresh(self) -> bool:
        session = self.client._connected_session()
        if not self.live or session is None:
            return False
        node = self.client._ensemble._read_and_arm(session, self.path, self, children=True)
        if node is None:
            self.stopped = True
            return False
        children = sorted(node.children)
        if not self._established:
            self._established = True
            if self._prior is not None and self._prior == children:
                return True
        self._prior = children
        self.dispatcher.push((children,))
        return True


@dataclass(eq=False)
class _Node:
    data: bytes
    czxid: int
    ctime_ms: int
    ephemeral_owner: int = 0
    version: int = 0
    cversion: int = 0
    mzxid: int = 0
    pzxid: int = 0
    mtime_ms: int = 0
    creations: int = 0  # children ever created: the next sequential child's number
    children: set[str] = field(default_factory=set)

    def stat(self) -> ZNodeStat:
        return ZNodeStat(version=self.version, czxid=self.czxid, mzxid=self.mzxid,
                         ephemeral_owner=self.ephemeral_owner, cversion=self.cversion,
                         num_children=len(self.children), data_length=len(self.data),
                         ctime_ms=self.ctime_ms, mtime_ms=self.mtime_ms, pzxid=self.pzxid)


@dataclass(eq=False)
class _Session:
    session_id: int
    client: InMemoryCoordinator
    ephemerals: set[str] = field(default_factory=set)
    data_watches: dict[str, set[_Recipe]] = field(default_factory=dict)
    child_watches: dict[str, set[_Recipe]] = field(default_factory=dict)
    closed: bool = False


@dataclass(frozen=True)
class _InjectedFailure:
    operation: str | None
    error: KafkaliteError
    applied: bool


class InMemoryZooKeeper:
    """The ensemble of the twin: znode tree, zxid counter and sessions (see the module docstring).

    ``clock`` gives the ctime/mtime of znodes in epoch milliseconds (default: wall clock).
    """

    def __init__(self, *, clock: Callable[[], int] = wall_clock_ms) -> None:
        self._clock = clock
        self._zxid = 0
        self._nodes: dict[str, _Node] = {"/": _Node(b"", czxid=0, ctime_ms=0)}
        self._sessions: dict[int, _Session] = {}
        self._next_session = 0x0100_0000_0000_0000
        self._clients: list[InMemoryCoordinator] = []

    # --- clients and test controls ------------------------------------------------------------

    def client(self, *, session_timeout: float = 18.0) -> InMemoryCoordinator:
        """A new (not yet started) client of this ensemble."""
        return InMemoryCoordinator(self, session_timeout=session_timeout)

    @property
    def zxid(self) -> int:
        """The zxid of the last committed write."""
        return self._zxid

    @property
    def session_ids(self) -> list[int]:
        """The ids of the open sessions, oldest first."""
        return list(self._sessions)

    def expire_session(self, session_id: int) -> None:
        """Expire a session now (its ephemerals go at once); its client sees LOST, then CONNECTED
        on a new session (at once if connected, else when it reconnects)."""
        session = self._sessions.get(session_id)
        if session is None:
            raise IllegalStateError(f"no open session {session_id:#x}")
        session.client._on_session_expired(session)

    def read(self, path: str) -> tuple[bytes, ZNodeStat] | None:
        """(data, stat) of ``path`` as the ensemble has it, or None (no request, no watch)."""
        node = self._nodes.get(path)
        return (node.data, node.stat()) if node is not None else None

    def children(self, path: str) -> list[str] | None:
        """The sorted child names of ``path``, or None when it does not exist."""
        node = self._nodes.get(path)
        return sorted(node.children) if node is not None else None

    def paths(self) -> list[str]:
        """Every znode path, sorted (the root included)."""
        return sorted(self._nodes)

    def busy(self) -> bool:
        """True while a notification or a callback of any client is still pending."""
        return any(client._busy() for client in self._clients)

    async def settle(self, *, max_rounds: int = 10_000) -> None:
        """Let the loop run until no notification or callback of any client is pending.

        Raises IllegalStateError when callbacks are still busy after ``max_rounds`` loop
        iterations (a callback waiting for something that never comes).
        """
        for _ in range(max_rounds):
            if not self.busy():
                await asyncio.sleep(0)
                if not self.busy():
                    return
            await asyncio.sleep(0)
        raise IllegalStateError(f"the in-memory ZooKeeper did not settle within {max_rounds} loop iterations")

    # --- sessions (called by clients) ---------------------------------------------------------

    def _open_session(self, client: InMemoryCoordinator) -> _Session:
        self._next_session += 1
        session = _Session(self._next_session, client)
        self._sessions[session.session_id] = session
        if client not in self._clients:
            self._clients.append(client)
        return session

    def _close_session(self, session: _Session) -> None:
        """Close or expire ``session``: drop its watches, then delete its ephemerals (one zxid)."""
        if session.closed:
            return
        session.closed = True
        self._sessions.pop(session.session_id, None)
        session.data_watches.clear()
        session.child_watches.clear()
        if not session.ephemerals:
            return
        zxid = self._zxid + 1
        fired: list[tuple[str, str]] = []
        for path in sorted(session.ephemerals, reverse=True):
            node = self._nodes.get(path)
            if node is None:
                continue
            del self._nodes[path]
            parent = self._nodes[_parent(path)]
            parent.children.discard(posixpath.basename(path))
            parent.cversion += 1
            parent.pzxid = zxid
            fired += [("data", path), ("children", path), ("children", _parent(path))]
        session.ephemerals.clear()
        self._zxid = zxid
        self._fire(fired)

    # --- reads ----------------------------------------------------------------------------------

    def _read_and_arm(self, session: _Session, path: str, recipe: _Recipe, *, children: bool) -> _Node | None:
        """The node at ``path`` (None when absent), arming a one-shot watch for ``recipe``.

        A data watch is armed whether or not the znode exists (get or exists); a child watch
        only when it exists (get_children fails on a missing znode).
        """
        node = self._nodes.get(path)
        if children:
            if node is not None:
                session.child_watches.setdefault(path, set()).add(recipe)
        else:
            session.data_watches.setdefault(path, set()).add(recipe)
        return node

    def _get(self, path: str, where: str) -> _Node:
        node = self._nodes.get(path)
        if node is None:
            raise node_missing_error(where)
        return node

    # --- writes -----------------------------------------------------------------------------------

    def _apply(self, session: _Session, operations: Sequence[TransactionOperation],
               where: Callable[[int, TransactionOperation], str]) -> list[TransactionResult]:
        """Apply ``operations`` as one transaction (one zxid): all of them, or none.

        The first failing operation's error is raised (its message from ``where``); nothing is
        changed and no watch fires then.
        """
        zxid = self._zxid + 1
        now = self._clock()
        undo: list[Callable[[], None]] = []
        fired: list[tuple[str, str]] = []
        results: list[TransactionResult] = []
        try:
            for index, operation in enumerate(operations):
                _validate_path(operation.path)
                results.append(self._apply_one(session, operation, where(index, operation), zxid, now,
                                               undo, fired))
        except BaseException:
            for action in reversed(undo):
                action()
            raise
        self._zxid = zxid
        self._fire(fired)
        return results

    def _apply_one(self, session: _Session, operation: TransactionOperation, where: str, zxid: int, now: int,
                   undo: list[Callable[[], None]], fired: list[tuple[str, str]]) -> TransactionResult:
        path = operation.path
        if operation.kind == "create":
            if path == "/":
                raise node_exists_error(where)
            parent_path = _parent(path)
            directory = self._nodes.get(parent_path)
            if directory is None:
                raise node_missing_error(where)
            if directory.ephemeral_owner:
                raise CoordinationError(f"{where}: NoChildrenForEphemeralsError: ephemeral znodes have no children")
            name = f"{path}{directory.creations:010d}" if operation.sequence else path
            if name in self._nodes:
                raise node_exists_error(where)
            creator = session.session_id if operation.ephemeral else 0
            created = _Node(operation.data, czxid=zxid, ctime_ms=now, ephemeral_owner=creator, mzxid=zxid,
                            pzxid=zxid, mtime_ms=now)
            self._nodes[name] = created
            base = posixpath.basename(name)
            directory.children.add(base)
            previous_cversion, previous_pzxid = directory.cversion, directory.pzxid
            directory.cversion += 1
            directory.creations += 1
            directory.pzxid = zxid
            if creator:
                session.ephemerals.add(name)

            def undo_create() -> None:
                del self._nodes[name]
                directory.children.discard(base)
                directory.cversion, directory.pzxid = previous_cversion, previous_pzxid
                directory.creations -= 1
                session.ephemerals.discard(name)

            undo.append(undo_create)
            fired += [("data", name), ("children", parent_path)]
            return name
        node = self._nodes.get(path)
        if node is None:
            raise node_missing_error(where)
        if operation.version != ANY_VERSION and operation.version != node.version:
            raise version_conflict_error(where)
        if operation.kind == "check":
            return True
        if operation.kind == "set_data":
            previous = (node.data, node.version, node.mzxid, node.mtime_ms)
            node.data, node.version, node.mzxid, node.mtime_ms = operation.data, node.version + 1, zxid, now

            def undo_set() -> None:
                node.data, node.version, node.mzxid, node.mtime_ms = previous

            undo.append(undo_set)
            fired.append(("data", path))
            return node.stat()
        if operation.kind != "delete":
            raise ValueError(f"unknown transaction operation {operation.kind!r}")
        if path == "/":
            raise CoordinationError(f"{where}: BadArgumentsError: the root cannot be deleted")
        if node.children:
            raise not_empty_error(where)
        parent_path = _parent(path)
        parent = self._nodes[parent_path]
        del self._nodes[path]
        base = posixpath.basename(path)
        parent.children.discard(base)
        previous_cversion, previous_pzxid = parent.cversion, parent.pzxid
        parent.cversion += 1
        parent.pzxid = zxid
        owner = self._sessions.get(node.ephemeral_owner) if node.ephemeral_owner else None
        if owner is not None:
            owner.ephemerals.discard(path)

        def undo_delete() -> None:
            self._nodes[path] = node
            parent.children.add(base)
            parent.cversion, parent.pzxid = previous_cversion, previous_pzxid
            if owner is not None:
                owner.ephemerals.add(path)

        undo.append(undo_delete)
        fired += [("data", path), ("children", path), ("children", parent_path)]
        return True

    def _fire(self, fired: list[tuple[str, str]]) -> None:
        """Trigger (and disarm) the one-shot watches of every session, in event order."""
        for kind, path in fired:
            for session in list(self._sessions.values()):
                registry = session.data_watches if kind == "data" else session.child_watches
                recipes = registry.pop(path, None)
                for recipe in recipes or ():
                    session.client._notify(recipe)


class InMemoryCoordinator:
    """A client of an :class:`InMemoryZooKeeper`; implements the Coordinator protocol.

    Start it once (``start`` opens a session); after ``stop`` make a new one. See the module
    docstring for the semantics and the test controls.
    """

    def __init__(self, ensemble: InMemoryZooKeeper, *, session_timeout: float = 18.0) -> None:
        if session_timeout <= 0:
            raise ValueError("session_timeout must be positive")
        self._ensemble = ensemble
        self._session_timeout = float(session_timeout)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._session: _Session | None = None
        self._connected = False
        self._expired_while_disconnected = False
        self._state = SessionState.LOST
        self._listeners: dict[SessionListener, SerialDispatcher] = {}
        self._recipes: set[_Recipe] = set()
        self._failures: list[_InjectedFailure] = []
        self._scheduled = 0
        self._used = False
        self._started = False
        self._stopping = False

    @property
    def ensemble(self) -> InMemoryZooKeeper:
        return self._ensemble

    # --- lifecycle ------------------------------------------------------------------------------

    @property
    def started(self) -> bool:
        return self._started and not self._stopping

    @property
    def state(self) -> SessionState:
        """The last session state delivered on the loop (LOST before start and after stop)."""
        return self._state

    @property
    def session_id(self) -> int | None:
        """The current session id; None while disconnected or without a session."""
        session = self._session
        if session is None or not self._connected or session.closed:
            return None
        return session.session_id

    @property
    def session_timeout(self) -> float:
        return self._session_timeout

    @property
    def connected(self) -> bool:
        """False between :meth:`disconnect` and :meth:`reconnect` (and before start, after stop)."""
        return self.started and self._connected

    async def start(self) -> None:
        """Open a session; listeners registered before see CONNECTED (delivered via the loop)."""
        if self._used:
            raise IllegalStateError("a coordinator can be started only once")
        self._used = True
        self._loop = asyncio.get_running_loop()
        await asyncio.sleep(0)
        self._session = self._ensemble._open_session(self)
        self._started = True
        self._connected = True
        self._state = SessionState.CONNECTED
        self._schedule(self._deliver_listeners, SessionState.CONNECTED)

    async def stop(self) -> None:
        """Close the session (its ephemerals vanish at once); no callback runs afterwards."""
        if not self.started:
            return
        self._stopping = True
        for recipe in list(self._recipes):
            recipe.watch.cancel()
        self._recipes.clear()
        for dispatcher in self._listeners.values():
            dispatcher.close()
        session, self._session = self._session, None
        if session is not None:
            self._ensemble._close_session(session)
        self._connected = False
        self._state = SessionState.LOST
        await asyncio.sleep(0)

    async def __aenter__(self) -> InMemoryCoordinator:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    # --- test controls --------------------------------------------------------------------------

    def expire_session(self) -> None:
        """Expire this client's session now: its ephemerals and server-side watches go at once;
        the client then sees LOST and CONNECTED on a new session (when it reconnects, if it is
        disconnected). Watches re-arm and deliver what changed."""
        session = self._require_session("expire_session")
        self._on_session_expired(session)

    def disconnect(self) -> None:
        """Lose the connection (the session stays alive, with its ephemerals): SUSPENDED is
        delivered and requests fail with a retriable CoordinationError until :meth:`reconnect`."""
        self._require_session("disconnect")
        if not self._connected:
            return
        self._connected = False
        self._schedule(self._deliver_state, SessionState.SUSPENDED)

    def reconnect(self) -> None:
        """Reconnect after :meth:`disconnect`: CONNECTED on the same session (or LOST, then
        CONNECTED on a new one, if the session expired meanwhile); watches re-read and deliver
        what changed while disconnected."""
        if not self.started:
            raise IllegalStateError("the coordinator is not started")
        if self._connected:
            return
        self._connected = True
        if self._expired_while_disconnected:
            self._expired_while_disconnected = False
            self._schedule(self._deliver_state, SessionState.LOST)
            self._schedule(self._new_session)
        else:
            self._schedule(self._deliver_state, SessionState.CONNECTED)

    def fail_next_request(self, operation: str | None = None, *, error: KafkaliteError | None = None,
                          applied: bool = False) -> None:
        """Make the next request named ``operation`` (any request when None) fail with ``error``
        (default: a retriable CoordinationError, as when the connection drops). With ``applied``
        the request takes effect before it fails (a write whose answer was lost). Calls queue up
        in order."""
        if operation is not None and operation not in OPERATIONS:
            raise ValueError(f"unknown operation {operation!r} (one of {sorted(OPERATIONS)})")
        failure = error if error is not None else CoordinationError(
            f"{operation or 'request'}: ConnectionLoss (injected by the in-memory ZooKeeper)")
        self._failures.append(_InjectedFailure(operation, failure, applied))

    # --- plumbing -------------------------------------------------------------------------------

    def _require_session(self, what: str) -> _Session:
        session = self._session
        if not self.started or session is None:
            raise IllegalStateError(f"{what}: the coordinator has no open session")
        return session

    def _connected_session(self) -> _Session | None:
        session = self._session
        if self._stopping or not self._connected or session is None or session.closed:
            return None
        return session

    def _require_started(self) -> None:
        if not self.started:
            raise IllegalStateError("the coordinator is not started")

    def _schedule(self, function: Callable[..., None], *arguments: object) -> None:
        loop = self._loop
        assert loop is not None
        self._scheduled += 1

        def run() -> None:
            self._scheduled -= 1
            if not self._stopping:
                function(*arguments)

        loop.call_soon(run)

    def _busy(self) -> bool:
        if self._stopping:
            return False
        return (self._scheduled > 0 or any(recipe.watch.busy for recipe in self._recipes)
                or any(dispatcher.busy for dispatcher in self._listeners.values()))

    def _notify(self, recipe: _Recipe) -> None:
        """(ensemble) A one-shot watch of ``recipe`` fired. Lost while disconnected: the recipe
        re-reads on reconnect anyway."""
        if self._connected_session() is not None:
            self._schedule(self._run_trigger, recipe)

    def _run_trigger(self, recipe: _Recipe) -> None:
        if recipe not in self._recipes:
            return
        if recipe.live:
            recipe.on_trigger()
        if not recipe.live:
            self._recipes.discard(recipe)

    def _on_session_expired(self, session: _Session) -> None:
        self._ensemble._close_session(session)
        if self._connected:
            self._schedule(self._deliver_state, SessionState.LOST)
            self._schedule(self._new_session)
        else:
            self._expired_while_disconnected = True

    def _new_session(self) -> None:
        self._session = self._ensemble._open_session(self)
        self._deliver_state(SessionState.CONNECTED)

    def _deliver_state(self, state: SessionState) -> None:
        if self._stopping:
            return
        self._state = state
        for recipe in list(self._recipes):
            if not recipe.live:
                self._recipes.discard(recipe)
            elif state is SessionState.CONNECTED:
                recipe.on_connected()
            else:
                recipe.on_disconnected()
        self._deliver_listeners(state)

    def _deliver_listeners(self, state: SessionState) -> None:
        for dispatcher in list(self._listeners.values()):
            dispatcher.push((state,))

    async def _perform(self, operation: str, path: str | None, action: Callable[[_Session, str], _Result]) -> _Result:
        """Run one request: yield to the loop once, then apply ``action`` at once."""
        self._require_started()
        if path is not None:
            _validate_path(path)
        await asyncio.sleep(0)
        where = f"{operation} {path}" if path else operation
        if self._stopping:
            raise CoordinationError(f"{where}: ConnectionClosedError: the coordinator stopped")
        failure = next((failure for failure in self._failures
                        if failure.operation is None or failure.operation == operation), None)
        if failure is not None:
            self._failures.remove(failure)
            if not failure.applied:
                raise failure.error
        session = self._connected_session()
        if session is None:
            if not self._connected:
                raise CoordinationError(f"{where}: ConnectionLoss: not connected to ZooKeeper")
            raise CoordinationError(f"{where}: SessionExpiredError: the session expired")
        result = action(session, where)
        if failure is not None:
            raise failure.error
        return result

    def _write(self, session: _Session, where: str, *operations: TransactionOperation) -> list[TransactionResult]:
        return self._ensemble._apply(session, operations, lambda index, operation: where)

    # --- data operations ------------------------------------------------------------------------

    async def get(self, path: str) -> tuple[bytes, ZNodeStat]:
        """The data and stat of ``path`` (ZNodeMissingError when absent)."""
        def action(session: _Session, where: str) -> tuple[bytes, ZNodeStat]:
            node = self._ensemble._get(path, where)
            return node.data, node.stat()
        return await self._perform("get", path, action)

    async def get_children(self, path: str) -> list[str]:
        """The sorted child names of ``path`` (ZNodeMissingError when absent)."""
        return await self._perform("get_children", path,
                                   lambda session, where: sorted(self._ensemble._get(path, where).children))

    async def exists(self, path: str) -> ZNodeStat | None:
        """The stat of ``path``, or None when it does not exist."""
        def action(session: _Session, where: str) -> ZNodeStat | None:
            node = self._ensemble._nodes.get(path)
            return node.stat() if node is not None else None
        return await self._perform("exists", path, action)

    async def create(self, path: str, data: bytes = b"", *, ephemeral: bool = False,
                     sequence: bool = False, makepath: bool = False) -> str:
        """Create ``path`` and return the created path (with its sequence suffix, if any)."""
        payload = as_bytes(data)

        def action(session: _Session, where: str) -> str:
            if makepath:
                self._ensure(session, _parent(path), where)
            result = self._write(session, where, TransactionOperation(
                "create", path, data=payload, ephemeral=ephemeral, sequence=sequence))
            return str(result[0])
        return await self._perform("create", path, action)

    async def set(self, path: str, data: bytes, version: int = ANY_VERSION) -> ZNodeStat:
        """Replace the data of ``path``; with ``version`` >= 0 only if it still has that version."""
        payload = as_bytes(data)

        def action(session: _Session, where: str) -> ZNodeStat:
            result = self._write(session, where, TransactionOperation("set_data", path, data=payload,
                                                                      version=version))
            assert isinstance(result[0], ZNodeStat)
            return result[0]
        return await self._perform("set", path, action)

    async def delete(self, path: str, version: int = ANY_VERSION, *, recursive: bool = False) -> None:
        """Delete ``path`` (conditioned on ``version`` unless -1; children first if ``recursive``)."""
        def action(session: _Session, where: str) -> None:
            if recursive and path in self._ensemble._nodes:
                for child in self._descendants(path):
                    self._write(session, f"delete {child}", TransactionOperation("delete", child))
            self._write(session, where, TransactionOperation("delete", path, version=version))
        await self._perform("delete", path, action)

    def _descendants(self, path: str) -> list[str]:
        """Every znode below ``path``, deepest first."""
        found: list[str] = []
        for child in sorted(self._ensemble._nodes[path].children):
            child_path = _join(path, child)
            found += self._descendants(child_path)
            found.append(child_path)
        return found

    def _ensure(self, session: _Session, path: str, where: str) -> None:
        missing: list[str] = []
        current = path
        while current not in self._ensemble._nodes:
            missing.append(current)
            current = _parent(current)
        for component in reversed(missing):
            self._write(session, where, TransactionOperation("create", component))

    async def ensure_path(self, path: str) -> None:
        """Create ``path`` and its missing parents (persistent, empty); no error if present."""
        await self._perform("ensure_path", path, lambda session, where: self._ensure(session, path, where))

    async def ensure_paths(self, paths: Sequence[str]) -> None:
        """:meth:`ensure_path` for each path, in order."""
        for path in paths:
            await self.ensure_path(path)

    def transaction(self) -> TransactionBuilder:
        """A new all-or-nothing transaction builder; nothing is applied before ``commit()``."""
        self._require_started()
        return TransactionBuilder(self._commit)

    async def _commit(self, operations: list[TransactionOperation]) -> list[TransactionResult]:
        return await self._perform("transaction", None, lambda session, where: self._ensemble._apply(
            session, operations, transaction_operation_where))

    # --- watches --------------------------------------------------------------------------------

    async def watch_data(self, path: str, callback: DataCallback) -> Watch:
        """Call ``callback(data, stat)`` now and after every change of ``path`` (which need not exist)."""
        return await self._watch("watch_data", path, callback, _DataRecipe)

    async def watch_children(self, path: str, callback: ChildrenCallback) -> Watch:
        """Call ``callback(children)`` now and after every change; ZNodeMissingError if ``path`` is absent."""
        return await self._watch("watch_children", path, callback, _ChildrenRecipe)

    async def _watch(self, operation: str, path: str, callback: DataCallback | ChildrenCallback,
                     recipe_type: type[_Recipe]) -> Watch:
        loop = self._loop
        assert loop is not None
        kind = "data" if recipe_type is _DataRecipe else "children"

        def action(session: _Session, where: str) -> Watch:
            dispatcher = SerialDispatcher(loop, callback, f"{kind} watch on {path}")
            watch = Watch(kind, path, dispatcher)
            recipe = recipe_type(self, path, watch, dispatcher)
            if not recipe.refresh():
                watch.cancel()
                raise node_missing_error(where)
            self._recipes.add(recipe)
            return watch
        return await self._perform(operation, path, action)

    # --- session state --------------------------------------------------------------------------

    def add_session_listener(self, listener: SessionListener) -> None:
        """Deliver every later session state change to ``listener`` on the loop.

        May be called before :meth:`start`; the listener then also sees the first CONNECTED.
        """
        loop = self._loop
        if loop is None:
            loop = asyncio.get_running_loop()
            self._loop = loop
        if listener not in self._listeners:
            self._listeners[listener] = SerialDispatcher(loop, listener, "session listener")

    def remove_session_listener(self, listener: SessionListener) -> None:
        dispatcher = self._listeners.pop(listener, None)
        if dispatcher is not None:
            dispatcher.close()


if TYPE_CHECKING:
    def _is_a_coordinator(client: InMemoryCoordinator) -> Coordinator:
        return client


__all__ = ["OPERATIONS", "InMemoryCoordinator", "InMemoryZooKeeper", "wall_clock_ms"]
