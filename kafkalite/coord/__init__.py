"""Coordination through ZooKeeper: the seam, the znode tree and the clients.

* :mod:`.coordinator` — the :class:`Coordinator` protocol and the value types every
  implementation shares (kazoo-free);
* :mod:`.zk` — :class:`ZooKeeperClient`, the implementation on a real ZooKeeper and the only
  module of kafkalite that imports kazoo;
* :mod:`.memory` — :class:`InMemoryZooKeeper` and :class:`InMemoryCoordinator`, the in-memory
  twin for unit tests (its server side in :mod:`.memory_tree`);
* :mod:`.watch` — :class:`Watch` and the dispatcher that runs callbacks on the loop;
* :mod:`.znodes` — the znode paths and their payload types (pure), on the JSON codec of
  :mod:`.znode_json`.

Importing this package does not import kazoo: ``ZooKeeperClient`` is loaded lazily, on first
use, where a ZooKeeper session is actually needed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kafkalite.coord.coordinator import (
    ANY_VERSION,
    Coordinator,
    CoordinatorTransaction,
    SessionState,
    TransactionResult,
    ZNodeStat,
)
from kafkalite.coord.watch import Watch

if TYPE_CHECKING:
    from kafkalite.coord.zk import ZooKeeperClient

__all__ = [
    "ANY_VERSION", "Coordinator", "CoordinatorTransaction", "SessionState", "TransactionResult", "Watch",
    "ZNodeStat", "ZooKeeperClient",
]


def __getattr__(name: str) -> Any:
    """Lazy re-export of the kazoo client, so importing the seam never pulls in kazoo."""
    if name == "ZooKeeperClient":
        from kafkalite.coord import zk

        return zk.ZooKeeperClient
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
