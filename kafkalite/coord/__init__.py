"""Coordination through ZooKeeper: the znode tree (:mod:`.znodes`) and the client (:mod:`.zk`).

``znodes`` is pure (paths and payloads); ``zk`` is the only module of kafkalite that imports
kazoo. Importing this package imports neither eagerly: ``from kafkalite.coord.zk import
ZooKeeperClient`` loads kazoo only where a ZooKeeper session is actually needed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kafkalite.coord.zk import SessionState, Watch, ZNodeStat, ZooKeeperClient

__all__ = ["SessionState", "Watch", "ZNodeStat", "ZooKeeperClient"]


def __getattr__(name: str) -> Any:
    """Lazy re-exports of the client types, so importing ``znodes`` never pulls in kazoo."""
    if name in __all__:
        from kafkalite.coord import zk

        return getattr(zk, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
