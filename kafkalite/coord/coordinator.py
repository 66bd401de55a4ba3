"""The coordination seam: what the broker and the tools ask of ZooKeeper, with no kazoo in sight.

:class:`Coordinator` is the typing Protocol of exactly the operations kafkalite uses: a session
(start/stop, state, id, timeout), reads and writes of znodes with versions, ephemeral and
sequential znodes, all-or-nothing multi-op transactions (built with a
:class:`CoordinatorTransaction`), persistent data and children watches, and session-state
listeners. Two implementations exist: :class:`kafkalite.coord.zk.ZooKeeperClient` on a real
ZooKeeper (through kazoo) and :class:`kafkalite.coord.memory.InMemoryCoordinator`, an in-memory
twin for unit tests. One contract suite (``tests/contract``) runs against both.

This module also holds the value types both share: :class:`SessionState`, :class:`ZNodeStat`,
:data:`ANY_VERSION`, the callback aliases, :data:`TransactionResult`, the recorded
:class:`TransactionOperation` with its :class:`TransactionBuilder`, and the error constructors
that give both implementations the same kafkalite errors and messages.

Semantics every implementation keeps
------------------------------------
* Paths are absolute (``/a/b``). Data is bytes. Versions count data changes from 0;
  :data:`ANY_VERSION` (-1) makes a set or delete unconditional.
* Errors: a znode that must not exist but does → ZNodeExistsError; a znode (or the parent of
  one being created) that must exist but does not → ZNodeMissingError; a version that does not
  match → ZNodeVersionConflictError; deleting a znode with children, and any connection or
  session problem → CoordinationError (retriable: the outcome of a write is then unknown, so
  re-read before retrying). Calls before ``start`` or after ``stop`` → IllegalStateError.
* A transaction applies every operation or none; when one fails, ``commit`` raises the error of
  that operation, with ``transaction operation #<index> (<operation>)`` in its message.
* Sequential znodes get a 10-digit suffix counting the children ever created under the parent
  (ZooKeeper's cversion also counts deletions; the sequence does not). Ephemeral znodes belong
  to the session that created them and vanish when it is closed (``stop``) or expires.
* Watches are persistent recipes over ZooKeeper's one-shot watches: a data watch delivers
  ``(data, stat)`` (``(None, None)`` while the znode is absent) at registration and after every
  change of the data's mzxid; a children watch delivers the sorted child names at registration
  and after every change notification, and ends silently when its znode is deleted. Changes
  that happen close together may be coalesced into one delivery of the latest state, never
  delivered out of order. Watches are re-armed after a reconnect and after a session expiry and
  then deliver the current state if it changed while they were blind.
* Callbacks (watches and session listeners) run on the event loop, one at a time per
  registration; a coroutine callback is awaited before the next event of the same registration
  is delivered. A callback that raises is logged and its registration stays active. After
  ``stop`` no callback is invoked any more.

Concurrency: implementations belong to the event loop that started them; every coroutine is
awaited on that loop and none blocks it. The value types are immutable and safe anywhere.
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from kafkalite.coord.watch import Watch
from kafkalite.errors import (
    CoordinationError,
    IllegalStateError,
    ZNodeExistsError,
    ZNodeMissingError,
    ZNodeVersionConflictError,
)

#: Version value meaning "any version" for set/delete/check.
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

TransactionResult = str | ZNodeStat | bool
"""create → created path; set_data → new stat; check and delete → True."""


def as_bytes(data: bytes | bytearray | memoryview) -> bytes:
    """``data`` as bytes; TypeError for anything else (a str is a caller bug, not data)."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(f"znode data must be bytes, got {type(data).__name__}")
    return bytes(data)


# --- the errors both implementations raise, with the same messages ------------------------------

def node_exists_error(where: str) -> ZNodeExistsError:
    return ZNodeExistsError(f"{where}: znode already exists")


def node_missing_error(where: str) -> ZNodeMissingError:
    return ZNodeMissingError(f"{where}: znode (or its parent) does not exist")


def version_conflict_error(where: str) -> ZNodeVersionConflictError:
    return ZNodeVersionConflictError(f"{where}: znode version does not match")


def not_empty_error(where: str) -> CoordinationError:
    return CoordinationError(f"{where}: znode has children")


def timeout_error(where: str) -> CoordinationError:
    return CoordinationError(f"{where}: ZooKeeper did not answer in time (outcome unknown)")


def transaction_operation_where(index: int, operation: TransactionOperation) -> str:
    """The ``where`` part of the error message of a failed transaction operation."""
    return f"transaction operation #{index} ({operation.describe()})"


# --- transactions ---------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class TransactionOperation:
    """One recorded operation of a transaction."""

    kind: str  # "check" | "create" | "set_data" | "delete"
    path: str
    data: bytes = b""
    version: int = ANY_VERSION
    ephemeral: bool = False
    sequence: bool = False

    def describe(self) -> str:
        version = "" if self.version == ANY_VERSION else f" version {self.version}"
        return f"{self.kind} {self.path}{version}"


class CoordinatorTransaction(Protocol):
    """An all-or-nothing multi-op transaction, built with chained calls and committed once.

    If any operation fails, none is applied and :meth:`commit` raises the error of the failing
    operation (a failed ``check`` raises ZNodeVersionConflictError, or ZNodeMissingError when
    the znode is gone). Committing twice raises IllegalStateError.
    """

    def check(self, path: str, version: int) -> CoordinatorTransaction:
        """Require ``path`` to exist with exactly ``version``."""
        ...

    def create(self, path: str, data: bytes = b"", *, ephemeral: bool = False,
               sequence: bool = False) -> CoordinatorTransaction:
        """Create ``path`` (its parent must exist, or be created earlier in this transaction)."""
        ...

    def set_data(self, path: str, data: bytes, version: int = ANY_VERSION) -> CoordinatorTransaction:
        """Replace the data of ``path``, conditioned on ``version`` unless it is -1."""
        ...

    def delete(self, path: str, version: int = ANY_VERSION) -> CoordinatorTransaction:
        """Delete ``path`` (no children allowed), conditioned on ``version`` unless it is -1."""
        ...

    @property
    def operations(self) -> int:
        """How many operations were added so far."""
        ...

    async def commit(self) -> list[TransactionResult]:
        """Apply every operation or none; returns one result per operation, in order."""
        ...


CommitFunction = Callable[[list[TransactionOperation]], Awaitable[list[TransactionResult]]]
"""What a :class:`TransactionBuilder` hands its operations to when committed."""


class TransactionBuilder:
    """Records operations and hands them to ``commit_function`` once (a CoordinatorTransaction).

    Owned by the coroutine that builds it; not thread-safe.
    """

    def __init__(self, commit_function: CommitFunction) -> None:
        self._commit_function = commit_function
        self._operations: list[TransactionOperation] = []
        self._committed = False

    def _add(self, operation: TransactionOperation) -> TransactionBuilder:
        if self._committed:
            raise IllegalStateError("transaction already committed")
        self._operations.append(operation)
        return self

    def check(self, path: str, version: int) -> TransactionBuilder:
        """Require ``path`` to exist with exactly ``version``."""
        return self._add(TransactionOperation("check", path, version=version))

    def create(self, path: str, data: bytes = b"", *, ephemeral: bool = False,
               sequence: bool = False) -> TransactionBuilder:
        """Create ``path`` (its parent must exist, or be created earlier in this transaction)."""
        return self._add(TransactionOperation("create", path, data=as_bytes(data),
                                              ephemeral=ephemeral, sequence=sequence))

    def set_data(self, path: str, data: bytes, version: int = ANY_VERSION) -> TransactionBuilder:
        """Replace the data of ``path``, conditioned on ``version`` unless it is -1."""
        return self._add(TransactionOperation("set_data", path, data=as_bytes(data), version=version))

    def delete(self, path: str, version: int = ANY_VERSION) -> TransactionBuilder:
        """Delete ``path`` (no children allowed), conditioned on ``version`` unless it is -1."""
        return self._add(TransactionOperation("delete", path, version=version))

    @property
    def operations(self) -> int:
        return len(self._operations)

    async def commit(self) -> list[TransactionResult]:
        """Apply every operation or none; returns one result per operation, in order."""
        if self._committed:
            raise IllegalStateError("transaction already committed")
        self._committed = True
        return await self._commit_function(list(self._operations))


# --- the protocol ---------------------------------------------------------------------------------

class Coordinator(Protocol):
    """One coordination session for one event loop (the module docstring states the contract)."""

    @property
    def started(self) -> bool:
        """True between a successful :meth:`start` and :meth:`stop`."""
        ...

    @property
    def state(self) -> SessionState:
        """The last session state delivered on the loop (LOST before start and after stop)."""
        ...

    @property
    def session_id(self) -> int | None:
        """The current session id; None while not connected."""
        ...

    @property
    def session_timeout(self) -> float:
        """The requested session timeout in seconds."""
        ...

    async def start(self) -> None:
        """Open the session; CoordinationError when that fails. A coordinator starts once."""
        ...

    async def stop(self) -> None:
        """Close the session (its ephemerals vanish at once); no callback runs afterwards."""
        ...

    async def __aenter__(self) -> Coordinator:
        """:meth:`start`, then the coordinator itself."""
        ...

    async def __aexit__(self, *exc_info: object) -> None:
        """:meth:`stop`."""
        ...

    async def get(self, path: str) -> tuple[bytes, ZNodeStat]:
        """The data and stat of ``path`` (ZNodeMissingError when absent)."""
        ...

    async def get_children(self, path: str) -> list[str]:
        """The sorted child names of ``path`` (ZNodeMissingError when absent)."""
        ...

    async def exists(self, path: str) -> ZNodeStat | None:
        """The stat of ``path``, or None when it does not exist."""
        ...

    async def create(self, path: str, data: bytes = b"", *, ephemeral: bool = False,
                     sequence: bool = False, makepath: bool = False) -> str:
        """Create ``path`` and return the created path (with its sequence suffix, if any)."""
        ...

    async def set(self, path: str, data: bytes, version: int = ANY_VERSION) -> ZNodeStat:
        """Replace the data of ``path``; with ``version`` >= 0 only if it still has that version."""
        ...

    async def delete(self, path: str, version: int = ANY_VERSION, *, recursive: bool = False) -> None:
        """Delete ``path`` (conditioned on ``version`` unless -1; children first if ``recursive``)."""
        ...

    async def ensure_path(self, path: str) -> None:
        """Create ``path`` and its missing parents (persistent, empty); no error if present."""
        ...

    async def ensure_paths(self, paths: Sequence[str]) -> None:
        """:meth:`ensure_path` for each path, in order."""
        ...

    def transaction(self) -> CoordinatorTransaction:
        """A new all-or-nothing transaction builder; nothing is sent before ``commit()``."""
        ...

    async def watch_data(self, path: str, callback: DataCallback) -> Watch:
        """Call ``callback(data, stat)`` now and after every change of ``path`` (which need not exist)."""
        ...

    async def watch_children(self, path: str, callback: ChildrenCallback) -> Watch:
        """Call ``callback(children)`` now and after every change; ZNodeMissingError if ``path`` is absent."""
        ...

    def add_session_listener(self, listener: SessionListener) -> None:
        """Deliver every later session state change to ``listener`` on the loop."""
        ...

    def remove_session_listener(self, listener: SessionListener) -> None:
        """Stop delivering session state changes to ``listener``."""
        ...


__all__ = [
    "ANY_VERSION", "ChildrenCallback", "CommitFunction", "Coordinator", "CoordinatorTransaction",
    "DataCallback", "SessionListener", "SessionState", "TransactionBuilder", "TransactionOperation",
    "TransactionResult", "Watch", "ZNodeStat",
    "as_bytes", "node_exists_error", "node_missing_error", "not_empty_error", "timeout_error",
    "transaction_operation_where", "version_conflict_error",
]
