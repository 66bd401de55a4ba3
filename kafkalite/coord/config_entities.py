"""Changing a config entity in ZooKeeper the way Kafka does: compare-and-set, then announce.

:func:`alter_config_entity` is the one write path of ``/config/<type>/<name>`` (topics, users,
clients): read the entity and its znode version, compute the new configs (the caller's merge,
which validates and may raise), create or set the znode with that version, and on success write
the sequential change notification under ``/config/changes`` that every broker follows. A write
that loses a race with another writer is tried again with what that writer left, a few times.

Concurrency: coroutines on the caller's event loop; safe against other writers anywhere in the
cluster through the znode version.
"""

from __future__ import annotations

from collections.abc import Callable

from kafkalite.coord import znodes
from kafkalite.coord.coordinator import Coordinator
from kafkalite.errors import RequestTimedOutError, ZNodeExistsError, ZNodeMissingError, ZNodeVersionConflictError

#: Tries of a compare-and-set that keeps losing to other writers before giving up.
ATTEMPTS = 5

Merge = Callable[[dict[str, str]], dict[str, str]]
"""The new configs of an entity from its current ones (raises to refuse the change)."""


async def alter_config_entity(coordinator: Coordinator, entity_path: str, merge: Merge,
                              validate_only: bool = False) -> dict[str, str]:
    """Set ``/config/<entity_path>`` to ``merge(current)`` and announce it; the new configs
    (not written when ``validate_only``). REQUEST_TIMED_OUT when other writers kept winning."""
    path = f"{znodes.CONFIG_PATH}/{entity_path}"
    for _ in range(ATTEMPTS):
        try:
            data, stat = await coordinator.get(path)
            current = dict(znodes.ConfigEntity.from_bytes(data, path).config)
            version = stat.version
        except ZNodeMissingError:
            current, version = {}, -1
        updated = merge(current)
        if validate_only:
            return updated
        try:
            if version < 0:
                await coordinator.create(path, znodes.ConfigEntity(updated).to_bytes(), makepath=True)
            else:
                await coordinator.set(path, znodes.ConfigEntity(updated).to_bytes(), version=version)
        except (ZNodeVersionConflictError, ZNodeExistsError):
            continue
        await coordinator.create(znodes.config_change_prefix_path(),
                                 znodes.ConfigChangeNotification(entity_path).to_bytes(), sequence=True)
        return updated
    raise RequestTimedOutError(f"configs of {entity_path} kept changing")
