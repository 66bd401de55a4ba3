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

The tree itself (nodes, zxids, sessions, one-shot watches) is in :mod:`.memory_tree`; this
module adds the clients and the watch recipes.

Concurrency: one event loop. An ensemble may serve any number of clients on that loop; every
method is called on the loop thread.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
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
    node_missing_error,
    transaction_operation_where,
)
from kafkalite.coord.memory_tree import (
    TreeSession,
    ZNodeTree,
    join_path,
    parent_of,
    validate_path,
    wall_clock_ms,
)
from kafkalite.coord.watch import SerialDispatcher, SessionListeners, Watch
from kafkalite.errors import CoordinationError, IllegalStateError, KafkaliteError

if TYPE_CHECKING:
    from kafkalite.coord.coordinator import Coordinator

logger = logging.getLogger(__name__)

_Result = TypeVar("_Result")

#: Request names :meth:`InMemoryCoordinator.fail_next_request` matches ("start" only when named).
OPERATIONS = frozenset({"get", "get_children", "exists", "create", "set", "delete", "ensure_path",
                        "transaction", "watch_data", "watch_children", "start"})


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


@dataclass(frozen=True)
class _InjectedFailure:
    operation: str | None
    error: KafkaliteError
    applied: bool


class InMemoryZooKeeper(ZNodeTree):
    """The ensemble of the twin: znode tree, zxid counter and sessions (see the module docstring).

    ``clock`` gives the ctime/mtime of znodes in epoch milliseconds (default: wall clock). The
    inspection and test controls (``read``, ``children``, ``paths``, ``zxid``, ``session_ids``,
    ``expire_session``, ``busy``, ``settle``) come from :class:`ZNodeTree`.
    """

    def client(self, *, session_timeout: float = 18.0) -> InMemoryCoordinator:
        """A new (not yet started) client of this ensemble."""
        return InMemoryCoordinator(self, session_timeout=session_timeout)


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
        self._session: TreeSession | None = None
        self._connected = False
        self._expired_while_disconnected = False
        self._state = SessionState.LOST
        self._listeners = SessionListeners()
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
        failure = next((failure for failure in self._failures if failure.operation == "start"), None)
        if failure is not None:  # like a ZooKeeper that cannot be reached: no session, no restart
            self._failures.remove(failure)
            raise failure.error
        self._session = self._ensemble._open_session(self)
        self._started = True
        self._connected = True
        self._state = SessionState.CONNECTED
        self._schedule(self._listeners.deliver, SessionState.CONNECTED)

    async def stop(self) -> None:
        """Close the session (its ephemerals vanish at once); no callback runs afterwards."""
        if not self.started:
            return
        self._stopping = True
        for recipe in list(self._recipes):
            recipe.watch.cancel()
        self._recipes.clear()
        self._listeners.close()
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
        in order. ``"start"`` makes the next :meth:`start` fail (it opens no session, and the
        client cannot be started again, like a ZooKeeperClient whose start failed)."""
        if operation is not None and operation not in OPERATIONS:
            raise ValueError(f"unknown operation {operation!r} (one of {sorted(OPERATIONS)})")
        failure = error if error is not None else CoordinationError(
            f"{operation or 'request'}: ConnectionLoss (injected by the in-memory ZooKeeper)")
        self._failures.append(_InjectedFailure(operation, failure, applied))

    # --- plumbing -------------------------------------------------------------------------------

    def _require_session(self, what: str) -> TreeSession:
        session = self._session
        if not self.started or session is None:
            raise IllegalStateError(f"{what}: the coordinator has no open session")
        return session

    def _connected_session(self) -> TreeSession | None:
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
                or self._listeners.busy)

    def _notify(self, watcher: Hashable) -> None:
        """(tree) A one-shot watch armed by one of our recipes fired. Lost while disconnected:
        the recipe re-reads on reconnect anyway."""
        if isinstance(watcher, _Recipe) and self._connected_session() is not None:
            self._schedule(self._run_trigger, watcher)

    def _run_trigger(self, recipe: _Recipe) -> None:
        if recipe not in self._recipes:
            return
        if recipe.live:
            recipe.on_trigger()
        if not recipe.live:
            self._recipes.discard(recipe)

    def _on_session_expired(self, session: TreeSession) -> None:
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
        self._listeners.deliver(state)

    async def _perform(self, operation: str, path: str | None,
                       action: Callable[[TreeSession, str], _Result]) -> _Result:
        """Run one request: yield to the loop once, then apply ``action`` at once."""
        self._require_started()
        if path is not None:
            validate_path(path)
        await asyncio.sleep(0)
        where = f"{operation} {path}" if path else operation
        if self._stopping:
            raise CoordinationError(f"{where}: ConnectionClosedError: the coordinator stopped")
        failure = next((failure for failure in self._failures
                        if (failure.operation is None and operation != "start") or failure.operation == operation),
                       None)
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

    def _write(self, session: TreeSession, where: str, *operations: TransactionOperation) -> list[TransactionResult]:
        return self._ensemble._apply(session, operations, lambda index, operation: where)

    # --- data operations ------------------------------------------------------------------------

    async def get(self, path: str) -> tuple[bytes, ZNodeStat]:
        """The data and stat of ``path`` (ZNodeMissingError when absent)."""
        def action(session: TreeSession, where: str) -> tuple[bytes, ZNodeStat]:
            node = self._ensemble._get(path, where)
            return node.data, node.stat()
        return await self._perform("get", path, action)

    async def get_children(self, path: str) -> list[str]:
        """The sorted child names of ``path`` (ZNodeMissingError when absent)."""
        return await self._perform("get_children", path,
                                   lambda session, where: sorted(self._ensemble._get(path, where).children))

    async def exists(self, path: str) -> ZNodeStat | None:
        """The stat of ``path``, or None when it does not exist."""
        def action(session: TreeSession, where: str) -> ZNodeStat | None:
            node = self._ensemble._nodes.get(path)
            return node.stat() if node is not None else None
        return await self._perform("exists", path, action)

    async def create(self, path: str, data: bytes = b"", *, ephemeral: bool = False,
                     sequence: bool = False, makepath: bool = False) -> str:
        """Create ``path`` and return the created path (with its sequence suffix, if any)."""
        payload = as_bytes(data)

        def action(session: TreeSession, where: str) -> str:
            if makepath:
                self._ensure(session, parent_of(path), where)
            result = self._write(session, where, TransactionOperation(
                "create", path, data=payload, ephemeral=ephemeral, sequence=sequence))
            return str(result[0])
        return await self._perform("create", path, action)

    async def set(self, path: str, data: bytes, version: int = ANY_VERSION) -> ZNodeStat:
        """Replace the data of ``path``; with ``version`` >= 0 only if it still has that version."""
        payload = as_bytes(data)

        def action(session: TreeSession, where: str) -> ZNodeStat:
            result = self._write(session, where, TransactionOperation("set_data", path, data=payload,
                                                                      version=version))
            assert isinstance(result[0], ZNodeStat)
            return result[0]
        return await self._perform("set", path, action)

    async def delete(self, path: str, version: int = ANY_VERSION, *, recursive: bool = False) -> None:
        """Delete ``path`` (conditioned on ``version`` unless -1; children first if ``recursive``)."""
        def action(session: TreeSession, where: str) -> None:
            if recursive and path in self._ensemble._nodes:
                for child in self._descendants(path):
                    self._write(session, f"delete {child}", TransactionOperation("delete", child))
            self._write(session, where, TransactionOperation("delete", path, version=version))
        await self._perform("delete", path, action)

    def _descendants(self, path: str) -> list[str]:
        """Every znode below ``path``, deepest first."""
        found: list[str] = []
        for child in sorted(self._ensemble._nodes[path].children):
            child_path = join_path(path, child)
            found += self._descendants(child_path)
            found.append(child_path)
        return found

    def _ensure(self, session: TreeSession, path: str, where: str) -> None:
        missing: list[str] = []
        current = path
        while current not in self._ensemble._nodes:
            missing.append(current)
            current = parent_of(current)
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

        def action(session: TreeSession, where: str) -> Watch:
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
        self._listeners.add(loop, listener)

    def remove_session_listener(self, listener: SessionListener) -> None:
        self._listeners.remove(listener)


if TYPE_CHECKING:
    def _is_a_coordinator(client: InMemoryCoordinator) -> Coordinator:
        return client


__all__ = ["OPERATIONS", "InMemoryCoordinator", "InMemoryZooKeeper", "wall_clock_ms"]
