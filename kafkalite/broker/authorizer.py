"""The broker's ACL authorizer: Kafka's ACLs kept in ZooKeeper, cached, and checked per request.

:class:`Authorizer` owns this broker's copy of every ACL (an :class:`~kafkalite.security.acl.AclRules`),
the ZooKeeper side of Kafka's ``AclAuthorizer``, and the checks the front ends call:

* literal ACLs live in ``/kafka-acl/<ResourceType>/<name>``, prefixed ones in
  ``/kafka-acl-extended/prefixed/<ResourceType>/<prefix>``, each znode holding Kafka's
  ``{"version":1,"acls":[...]}``;
* every change is announced by a sequential ``acl_changes_<seq>`` under ``/kafka-acl-changes``
  (literal, data ``Topic:name``) or ``/kafka-acl-extended-changes`` (prefixed, Kafka's JSON); every
  broker watches both and re-reads the named resource, so all caches follow;
* writes are conditional on the znode's version and retried on a conflict, like Kafka's.

:meth:`Authorizer.check` raises the Kafka error of the resource type (TOPIC_AUTHORIZATION_FAILED,
GROUP_AUTHORIZATION_FAILED, CLUSTER_AUTHORIZATION_FAILED, TRANSACTIONAL_ID_AUTHORIZATION_FAILED);
the front ends call it (or :meth:`Authorizer.authorize` to filter) only when
``BrokerServices.authorizer`` is set, so a broker without ``authorizer.class.name`` does no work.

Concurrency: owned by the broker's event loop. ZooKeeper watch callbacks run on that loop (the
Coordinator contract), so the cache is only ever touched from it; decisions never await.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from kafkalite.coord import znodes
from kafkalite.coord.coordinator import ChildrenCallback, Coordinator
from kafkalite.coord.watch import Watch
from kafkalite.errors import (
    BrokerResponseError,
    ClusterAuthorizationFailedError,
    CoordinationError,
    GroupAuthorizationFailedError,
    KafkaliteError,
    TopicAuthorizationFailedError,
    TransactionalIdAuthorizationFailedError,
    ZNodeExistsError,
    ZNodeMissingError,
    ZNodeVersionConflictError,
)
from kafkalite.security.acl import (
    CLUSTER_NAME,
    CONCRETE_PATTERN_TYPES,
    CONCRETE_RESOURCE_TYPES,
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclRules,
    Operation,
    PatternType,
    ResourcePattern,
    ResourceType,
    decode_acls,
    decode_change,
    encode_acls,
    encode_change,
)
from kafkalite.security.principal import KafkaPrincipal

log = logging.getLogger(__name__)

#: The error a denied operation on a resource of each type answers with.
DENIED_ERRORS: dict[ResourceType, type[BrokerResponseError]] = {
    ResourceType.TOPIC: TopicAuthorizationFailedError,
    ResourceType.GROUP: GroupAuthorizationFailedError,
    ResourceType.CLUSTER: ClusterAuthorizationFailedError,
    ResourceType.TRANSACTIONAL_ID: TransactionalIdAuthorizationFailedError,
}

AclChange = Callable[[frozenset[AccessControlEntry]], frozenset[AccessControlEntry]]
"""Computes a resource's new ACLs from its current ones."""

#: How often a conditional ACL write is retried after losing a race (Kafka retries until it wins).
MAX_WRITE_ATTEMPTS = 20


def denied_error(operation: Operation, resource_type: ResourceType, name: str) -> BrokerResponseError:
    """The Kafka error for ``operation`` on the resource being denied."""
    what = "the cluster" if resource_type is ResourceType.CLUSTER else f"{resource_type} {name!r}"
    return DENIED_ERRORS[resource_type](f"not authorized to {operation} {what}")


class Authorizer:
    """Kafka's AclAuthorizer over a :class:`Coordinator` (see the module docstring)."""

    def __init__(self, zookeeper: Coordinator, super_users: Sequence[str] = (),
                 allow_everyone_if_no_acl_found: bool = False) -> None:
        self.zookeeper = zookeeper
        self.rules = AclRules(super_users, allow_everyone_if_no_acl_found)
        self._watches: list[Watch] = []
        self._last_change: dict[str, int] = {znodes.ACL_CHANGES_PATH: -1, znodes.ACL_EXTENDED_CHANGES_PATH: -1}

    # -- lifecycle ----------------------------------------------------------------------------
    async def start(self) -> None:
        """Load every ACL, then follow the change notifications."""
        await self.zookeeper.ensure_paths([znodes.ACL_PATH, znodes.ACL_PREFIXED_PATH, znodes.ACL_CHANGES_PATH,
                                           znodes.ACL_EXTENDED_CHANGES_PATH])
        for path in self._last_change:  # changes made while loading are re-read afterwards
            self._last_change[path] = self._newest_sequence(await self.zookeeper.get_children(path))
        for resource_type in CONCRETE_RESOURCE_TYPES:
            for pattern_type in CONCRETE_PATTERN_TYPES:
                parent = self._pattern_parent(resource_type, pattern_type)
                try:
                    names = await self.zookeeper.get_children(parent)
                except ZNodeMissingError:
                    continue
                for name in names:
                    try:
                        await self._reload(ResourcePattern(resource_type, name, pattern_type))
                    except KafkaliteError as exc:
                        log.warning("ignoring the ACLs at %s/%s: %s", parent, name, exc)
        for path in self._last_change:
            self._watches.append(await self.zookeeper.watch_children(path, self._changes_callback(path)))
        log.info("ACL authorizer started with %d ACLs; super users: %s", len(self.rules.bindings(
            AclBindingFilter(pattern_type=PatternType.ANY))), ", ".join(sorted(self.rules.super_users)) or "none")

    def stop(self) -> None:
        for watch in self._watches:
            watch.cancel()
        self._watches.clear()

    @staticmethod
    def _pattern_parent(resource_type: ResourceType, pattern_type: PatternType) -> str:
        base = znodes.ACL_PREFIXED_PATH if pattern_type is PatternType.PREFIXED else znodes.ACL_PATH
        return f"{base}/{resource_type}"

    @staticmethod
    def _newest_sequence(children: list[str]) -> int:
        newest = -1
        for child in children:
            try:
                newest = max(newest, znodes.sequence_number(child, znodes.ACL_CHANGE_PREFIX))
            except KafkaliteError:
                continue
        return newest

    def _changes_callback(self, path: str) -> ChildrenCallback:
        async def on_changes(children: list[str]) -> None:
            for child in children:
                try:
                    number = znodes.sequence_number(child, znodes.ACL_CHANGE_PREFIX)
                except KafkaliteError:
                    continue
                if number <= self._last_change[path]:
                    continue
                self._last_change[path] = number
                try:
                    data, _ = await self.zookeeper.get(f"{path}/{child}")
                    await self._reload(decode_change(data))
                except ZNodeMissingError:
                    continue
                except KafkaliteError as exc:
                    log.warning("ignoring ACL change notification %s/%s: %s", path, child, exc)
        return on_changes

    async def _read(self, pattern: ResourcePattern) -> tuple[frozenset[AccessControlEntry], int | None]:
        """The ACLs stored for ``pattern`` and the znode's version (None when absent)."""
        path = znodes.acl_path(str(pattern.resource_type), pattern.name,
                               pattern.pattern_type is PatternType.PREFIXED)
        try:
            data, stat = await self.zookeeper.get(path)
        except ZNodeMissingError:
            return frozenset(), None
        return decode_acls(data), stat.version

    async def _reload(self, pattern: ResourcePattern) -> None:
        entries, _ = await self._read(pattern)
        self.rules.set_acls(pattern, entries)

    # -- decisions ----------------------------------------------------------------------------
    def authorize(self, principal: KafkaPrincipal, host: str, operation: Operation,
                  resource_type: ResourceType, name: str = CLUSTER_NAME) -> bool:
        """Whether ``principal`` from ``host`` may do ``operation`` on the resource."""
        allowed = self.rules.authorize(principal, host, operation, resource_type, name)
        if not allowed:
            log.debug("Principal = %s is Denied Operation = %s from host = %s on resource = %s:%s",
                      principal, operation, host, resource_type, name)
        return allowed

    def check(self, principal: KafkaPrincipal, host: str, operation: Operation,
              resource_type: ResourceType, name: str = CLUSTER_NAME) -> None:
        """:meth:`authorize`, raising the resource type's AUTHORIZATION_FAILED error when denied."""
        if not self.authorize(principal, host, operation, resource_type, name):
            raise denied_error(operation, resource_type, name)

    def authorize_any(self, principal: KafkaPrincipal, host: str, operation: Operation,
                      resource_type: ResourceType) -> bool:
        """Whether the principal may do ``operation`` on some resource of the type."""
        return self.rules.authorize_any(principal, host, operation, resource_type)

    # -- ACL administration -------------------------------------------------------------------
    def describe_acls(self, binding_filter: AclBindingFilter) -> list[AclBinding]:
        """The ACLs ``binding_filter`` matches (from this broker's cache)."""
        return self.rules.bindings(binding_filter)

    async def create_acls(self, bindings: Sequence[AclBinding]) -> None:
        """Add ``bindings`` (already present ones are kept once) and announce the changes."""
        by_pattern: dict[ResourcePattern, set[AccessControlEntry]] = {}
        for binding in bindings:
            by_pattern.setdefault(binding.pattern, set()).add(binding.entry)
        for pattern, entries in by_pattern.items():
            added = frozenset(entries)
            await self._update(pattern, lambda current, added=added: current | added)  # type: ignore[misc]

    async def delete_acls(self, binding_filter: AclBindingFilter) -> list[AclBinding]:
        """Remove every ACL ``binding_filter`` matches (as ZooKeeper holds them, for the patterns
        this broker knows and the one the filter names exactly); returns them."""
        deleted: list[AclBinding] = []
        patterns = {binding.pattern for binding in self.rules.bindings(binding_filter)}
        if binding_filter.resource_type in CONCRETE_RESOURCE_TYPES and binding_filter.name is not None \
                and binding_filter.pattern_type in CONCRETE_PATTERN_TYPES:
            # ZooKeeper decides: this broker may not have seen a change another broker just made
            patterns.add(ResourcePattern(binding_filter.resource_type, binding_filter.name,
                                         binding_filter.pattern_type))
        for pattern in patterns:
            removed: list[AclBinding] = []

            def without(current: frozenset[AccessControlEntry], pattern: ResourcePattern = pattern,
                        removed: list[AclBinding] = removed) -> frozenset[AccessControlEntry]:
                removed.clear()
                removed.extend(AclBinding(pattern, entry) for entry in current
                               if binding_filter.matches(AclBinding(pattern, entry)))
                return current - {binding.entry for binding in removed}

            await self._update(pattern, without)
            deleted.extend(removed)
        return deleted

    async def _update(self, pattern: ResourcePattern, change: AclChange) -> None:
        """Apply ``change(current) -> new`` to the ACLs of ``pattern`` with a conditional write,
        retried on a version conflict; then announce the change and update this cache."""
        prefixed = pattern.pattern_type is PatternType.PREFIXED
        path = znodes.acl_path(str(pattern.resource_type), pattern.name, prefixed)
        for _ in range(MAX_WRITE_ATTEMPTS):
            current, version = await self._read(pattern)
            wanted: frozenset[AccessControlEntry] = change(current)
            if wanted == current:
                self.rules.set_acls(pattern, current)
                return
            try:
                if version is None:
                    await self.zookeeper.create(path, encode_acls(wanted), makepath=True)
                elif wanted:
                    await self.zookeeper.set(path, encode_acls(wanted), version)
                else:
                    await self.zookeeper.delete(path, version)
            except (ZNodeVersionConflictError, ZNodeExistsError, ZNodeMissingError):
                continue  # another writer won the race: re-read and re-apply
            break
        else:
            raise CoordinationError(f"{path}: gave up updating ACLs after {MAX_WRITE_ATTEMPTS} conflicting writes")
        changes = znodes.ACL_EXTENDED_CHANGES_PATH if prefixed else znodes.ACL_CHANGES_PATH
        await self.zookeeper.create(f"{changes}/{znodes.ACL_CHANGE_PREFIX}", encode_change(pattern), sequence=True,
                                    makepath=True)
        self.rules.set_acls(pattern, wanted)
