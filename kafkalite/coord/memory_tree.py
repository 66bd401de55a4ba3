"""The state of the in-memory ZooKeeper twin: znode tree, zxid counter, sessions, one-shot watches.

:class:`ZNodeTree` is the server side of :class:`kafkalite.coord.memory.InMemoryZooKeeper`
(which adds the clients): it applies writes as ZooKeeper does (one zxid per transaction, all or
nothing, versions, cversion and the sequence counter, czxid/mzxid/pzxid, ctime/mtime from the
clock), owns each session's ephemerals and fires and disarms the sessions' one-shot watches.
The clients (:class:`SessionOwner`) decide how a fired watch reaches their callbacks.

Concurrency: one event loop; every method is called on the loop thread.
"""

from __future__ import annotations

import asyncio
import posixpath
import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from kafkalite.coord.coordinator import (
    ANY_VERSION,
    TransactionOperation,
    TransactionResult,
    ZNodeStat,
    node_exists_error,
    node_missing_error,
    not_empty_error,
    version_conflict_error,
)
from kafkalite.errors import CoordinationError, IllegalStateError


def wall_clock_ms() -> int:
    """Wall-clock milliseconds (the default clock of the twin's time stamps)."""
    return int(time.time() * 1000)


def validate_path(path: str) -> None:
    """TypeError unless ``path`` is a str; ValueError unless it is an absolute znode path."""
    if not isinstance(path, str):
        raise TypeError(f"znode path must be a str, got {type(path).__name__}")
    if path == "/":
        return
    if not path.startswith("/") or path.endswith("/") or "//" in path:
        raise ValueError(f"invalid znode path {path!r}")
    if any(part in (".", "..") for part in path.split("/")):
        raise ValueError(f"invalid znode path {path!r} ('.' and '..' are not allowed)")


def parent_of(path: str) -> str:
    return posixpath.dirname(path) or "/"


def join_path(parent: str, name: str) -> str:
    return f"/{name}" if parent == "/" else f"{parent}/{name}"


class SessionOwner(Protocol):
    """The client a session belongs to, as the tree sees it."""

    def _notify(self, watcher: Hashable) -> None:
        """A one-shot watch armed by ``watcher`` fired (and is disarmed)."""

    def _on_session_expired(self, session: TreeSession) -> None:
        """The tree is asked to expire ``session`` (the owner closes it and tells its callbacks)."""

    def _busy(self) -> bool:
        """True while a notification or callback of the owner is pending."""


@dataclass(eq=False)
class TreeNode:
    """One znode."""

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
class TreeSession:
    """One session: its owner, its ephemerals and its armed one-shot watches."""

    session_id: int
    client: SessionOwner
    ephemerals: set[str] = field(default_factory=set)
    data_watches: dict[str, set[Hashable]] = field(default_factory=dict)
    child_watches: dict[str, set[Hashable]] = field(default_factory=dict)
    closed: bool = False


class ZNodeTree:
    """The server side of the twin: znode tree, zxid counter and sessions (module docstring).

    ``clock`` gives the ctime/mtime of znodes in epoch milliseconds (default: wall clock).
    """

    def __init__(self, *, clock: Callable[[], int] = wall_clock_ms) -> None:
        self._clock = clock
        self._zxid = 0
        self._nodes: dict[str, TreeNode] = {"/": TreeNode(b"", czxid=0, ctime_ms=0)}
        self._sessions: dict[int, TreeSession] = {}
        self._next_session = 0x0100_0000_0000_0000
        self._clients: list[SessionOwner] = []

    # --- test controls and inspection ----------------------------------------------------------

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

    def _open_session(self, client: SessionOwner) -> TreeSession:
        self._next_session += 1
        session = TreeSession(self._next_session, client)
        self._sessions[session.session_id] = session
        if client not in self._clients:
            self._clients.append(client)
        return session

    def _close_session(self, session: TreeSession) -> None:
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
            parent = self._nodes[parent_of(path)]
            parent.children.discard(posixpath.basename(path))
            parent.cversion += 1
            parent.pzxid = zxid
            fired += [("data", path), ("children", path), ("children", parent_of(path))]
        session.ephemerals.clear()
        self._zxid = zxid
        self._fire(fired)

    # --- reads ----------------------------------------------------------------------------------

    def _read_and_arm(self, session: TreeSession, path: str, watcher: Hashable, *, children: bool) -> TreeNode | None:
        """The node at ``path`` (None when absent), arming a one-shot watch for ``watcher``.

        A data watch is armed whether or not the znode exists (get or exists); a child watch
        only when it exists (get_children fails on a missing znode).
        """
        node = self._nodes.get(path)
        if children:
            if node is not None:
                session.child_watches.setdefault(path, set()).add(watcher)
        else:
            session.data_watches.setdefault(path, set()).add(watcher)
        return node

    def _get(self, path: str, where: str) -> TreeNode:
        node = self._nodes.get(path)
        if node is None:
            raise node_missing_error(where)
        return node

    # --- writes -----------------------------------------------------------------------------------

    def _apply(self, session: TreeSession, operations: Sequence[TransactionOperation],
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
                validate_path(operation.path)
                results.append(self._apply_one(session, operation, where(index, operation), zxid, now,
                                               undo, fired))
        except BaseException:
            for action in reversed(undo):
                action()
            raise
        self._zxid = zxid
        self._fire(fired)
        return results

    def _apply_one(self, session: TreeSession, operation: TransactionOperation, where: str, zxid: int, now: int,
                   undo: list[Callable[[], None]], fired: list[tuple[str, str]]) -> TransactionResult:
        path = operation.path
        if operation.kind == "create":
            if path == "/":
                raise node_exists_error(where)
            parent_path = parent_of(path)
            directory = self._nodes.get(parent_path)
            if directory is None:
                raise node_missing_error(where)
            if directory.ephemeral_owner:
                raise CoordinationError(f"{where}: NoChildrenForEphemeralsError: ephemeral znodes have no children")
            name = f"{path}{directory.creations:010d}" if operation.sequence else path
            if name in self._nodes:
                raise node_exists_error(where)
            creator = session.session_id if operation.ephemeral else 0
            created = TreeNode(operation.data, czxid=zxid, ctime_ms=now, ephemeral_owner=creator, mzxid=zxid,
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
        parent_path = parent_of(path)
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


__all__ = ["SessionOwner", "TreeNode", "TreeSession", "ZNodeTree", "join_path", "parent_of", "validate_path",
           "wall_clock_ms"]
