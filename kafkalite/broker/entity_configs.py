"""The ``users`` and ``clients`` config entities: SCRAM credentials and quota settings.

Kafka keeps them in ZooKeeper under ``/config/users/<user>``, ``/config/clients/<client-id>``
and ``/config/users/<user>/clients/<client-id>`` (names URL-encoded, ``<default>`` for the
default entity), each ``{"version":1,"config":{...}}``; a change is announced with a sequential
``/config/changes/config_change_<seq>`` holding ``{"version":2,"entity_path":"users/alice"}``.

:class:`EntityConfigs` is every broker's cache of those entities: it reads them all at start,
then follows the change notifications (its own watch on ``/config/changes``, independent of the
metadata cache's), so every broker sees a new credential or quota within one notification.
:meth:`EntityConfigs.alter` writes an entity and its notification (the broker that takes an
AlterConfigs-style request does this). Readers: SASL authentication
(:meth:`EntityConfigs.scram_credential`, :meth:`EntityConfigs.user_configs`) and quotas
(:meth:`EntityConfigs.configs`, listeners told the entity path that changed).

Keys: users may carry ``SCRAM-SHA-256`` / ``SCRAM-SHA-512`` (Kafka's stored credential text:
the password itself never reaches the broker or ZooKeeper) and the quota keys; clients and
user/client pairs the quota keys only. :meth:`EntityConfigs.describe` never returns a
credential's salt or keys, only its mechanism and iterations, as ``kafka-configs.sh --describe``.

Concurrency: event-loop only (watch callbacks are delivered on the loop).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from kafkalite.coord import znodes
from kafkalite.coord.config_entities import alter_config_entity
from kafkalite.coord.coordinator import Coordinator
from kafkalite.coord.watch import Watch
from kafkalite.errors import (
    CoordinationError,
    InvalidConfigurationError,
    InvalidRequestError,
    KafkaliteError,
    ZNodeMissingError,
)
from kafkalite.security.scram import SCRAM_MECHANISMS, ScramCredential

log = logging.getLogger(__name__)

#: Kafka's quota keys of users and clients (numbers; request_percentage may be fractional).
QUOTA_KEYS: tuple[str, ...] = ("producer_byte_rate", "consumer_byte_rate", "request_percentage",
                               "controller_mutation_rate")
#: The credential keys of users (values in Kafka's stored SCRAM form).
SCRAM_KEYS: tuple[str, ...] = tuple(SCRAM_MECHANISMS)

EntityListener = Callable[[str], None]


def entity_path_of(user: str | None, client_id: str | None) -> str:
    """``users/<u>``, ``clients/<c>`` or ``users/<u>/clients/<c>`` (raw names; INVALID_REQUEST when neither)."""
    try:
        return znodes.user_client_entity_path(user, client_id)
    except ValueError as exc:
        raise InvalidRequestError(str(exc)) from None


def split_entity_path(entity_path: str) -> tuple[str | None, str | None]:
    """(user, client id), raw (desanitized), of a users/clients entity path."""
    parts = entity_path.split("/")
    user = client_id = None
    for index in range(0, len(parts) - 1, 2):
        name = znodes.desanitize_entity_name(parts[index + 1])
        if parts[index] == "users":
            user = name
        elif parts[index] == "clients":
            client_id = name
    return user, client_id


def validate_entity_configs(entity_path: str, configs: dict[str, str]) -> None:
    """INVALID_CONFIG for a key the entity cannot hold or a malformed value."""
    user, client_id = split_entity_path(entity_path)
    allowed = set(QUOTA_KEYS) | (set(SCRAM_KEYS) if client_id is None and user is not None else set())
    unknown = sorted(set(configs) - allowed)
    if unknown:
        raise InvalidConfigurationError(
            f"invalid config(s) for {entity_path}: {', '.join(unknown)} (allowed: {', '.join(sorted(allowed))})")
    for key, value in configs.items():
        if key in SCRAM_KEYS:
            if user == znodes.DEFAULT_ENTITY:
                raise InvalidConfigurationError("SCRAM credentials cannot be set for the default user")
            ScramCredential.from_text(value)
            continue
        try:
            number = float(value)
        except ValueError:
            raise InvalidConfigurationError(f"{key} must be a number, got {value!r}") from None
        if not number > 0 or (key != "request_percentage" and not number.is_integer()):
            kind = "number" if key == "request_percentage" else "integer"
            raise InvalidConfigurationError(f"{key} must be a positive {kind}, got {value!r}")


def describe_value(key: str, value: str) -> str:
    """What ``--describe`` shows of a config: a credential's iterations only, anything else as is."""
    if key in SCRAM_KEYS:
        try:
            return f"iterations={ScramCredential.from_text(value).iterations}"
        except InvalidConfigurationError:
            return "iterations=?"
    return value


class EntityConfigs:
    """The broker's cache of user and client config entities. See the module docstring."""

    def __init__(self, zookeeper: Coordinator) -> None:
        self.zookeeper = zookeeper
        self._entities: dict[str, dict[str, str]] = {}
        self._last_change = -1
        self._watch: Watch | None = None
        self._listeners: list[EntityListener] = []

    def add_listener(self, listener: EntityListener) -> None:
        """Call ``listener(entity_path)`` after an entity changed (or went away)."""
        self._listeners.append(listener)

    # -- start / stop -------------------------------------------------------------------------
    async def start(self) -> None:
        """Load every entity, then follow the change notifications."""
        await self.zookeeper.ensure_paths([znodes.CONFIG_USERS_PATH, znodes.CONFIG_CLIENTS_PATH])
        children = await self.zookeeper.get_children(znodes.CONFIG_CHANGES_PATH)
        self._last_change = max((self._sequence(child) for child in children), default=-1)
        for user in await self.zookeeper.get_children(znodes.CONFIG_USERS_PATH):
            await self._load(f"users/{user}")
            try:
                clients = await self.zookeeper.get_children(f"{znodes.CONFIG_USERS_PATH}/{user}/clients")
            except ZNodeMissingError:
                clients = []
            for client in clients:
                await self._load(f"users/{user}/clients/{client}")
        for client in await self.zookeeper.get_children(znodes.CONFIG_CLIENTS_PATH):
            await self._load(f"clients/{client}")
        self._watch = await self.zookeeper.watch_children(znodes.CONFIG_CHANGES_PATH, self._on_changes)

    def stop(self) -> None:
        if self._watch is not None:
            self._watch.cancel()
            self._watch = None

    # -- queries ------------------------------------------------------------------------------
    def configs(self, entity_path: str) -> dict[str, str]:
        """The current configs of an entity (``users/alice``, ``users/<default>/clients/c1``, ...)."""
        return dict(self._entities.get(entity_path, {}))

    def entity_configs(self, user: str | None, client_id: str | None) -> dict[str, str]:
        """The current configs of the entity of a raw user name and/or client id."""
        return self.configs(entity_path_of(user, client_id))

    def user_configs(self, user: str) -> dict[str, str]:
        return self.entity_configs(user, None)

    def entities(self) -> dict[str, dict[str, str]]:
        """Every entity with configs: entity path → configs."""
        return {path: dict(configs) for path, configs in sorted(self._entities.items())}

    def scram_credential(self, user: str, mechanism: str) -> ScramCredential | None:
        """The user's credential for a SCRAM mechanism, None when it has none (or it is unreadable)."""
        text = self.user_configs(user).get(mechanism)
        if text is None or user == znodes.DEFAULT_ENTITY:
            return None
        try:
            return ScramCredential.from_text(text)
        except InvalidConfigurationError as exc:
            log.warning("ignoring the %s credential of user %s: %s", mechanism, user, exc)
            return None

    def describe(self) -> list[dict[str, Any]]:
        """Every entity, credentials reduced to their iterations: [{entity_path, user, client_id, configs}]."""
        answer = []
        for path, configs in sorted(self._entities.items()):
            user, client_id = split_entity_path(path)
            answer.append({"entity_path": path, "user": user, "client_id": client_id,
                           "configs": {key: describe_value(key, value) for key, value in sorted(configs.items())}})
        return answer

    # -- changes ------------------------------------------------------------------------------
    async def alter(self, user: str | None, client_id: str | None, set_configs: dict[str, str],
                    delete_configs: list[str], validate_only: bool = False) -> dict[str, str]:
        """Set and delete configs of one entity (compare-and-set on the znode), then announce the
        change. Deleting a config the entity does not have is INVALID_CONFIG, as in Kafka."""
        entity_path = entity_path_of(user, client_id)

        def merge(current: dict[str, str]) -> dict[str, str]:
            missing = sorted(name for name in delete_configs if name not in current)
            if missing:
                raise InvalidConfigurationError(f"Invalid config(s): {', '.join(missing)}")
            updated = {name: value for name, value in current.items() if name not in delete_configs}
            updated.update({name: str(value) for name, value in set_configs.items()})
            validate_entity_configs(entity_path, updated)
            return updated

        updated = await alter_config_entity(self.zookeeper, entity_path, merge, validate_only)
        if not validate_only:
            self._store(entity_path, updated)  # other brokers follow the notification
        return updated

    @staticmethod
    def _sequence(child: str) -> int:
        try:
            return znodes.sequence_number(child, znodes.CONFIG_CHANGE_PREFIX)
        except KafkaliteError:
            return -1

    async def _on_changes(self, children: list[str]) -> None:
        for child in children:
            number = self._sequence(child)
            if number <= self._last_change:
                continue
            self._last_change = number
            try:
                data, _ = await self.zookeeper.get(f"{znodes.CONFIG_CHANGES_PATH}/{child}")
                notification = znodes.ConfigChangeNotification.from_bytes(data)
            except (ZNodeMissingError, CoordinationError):
                continue
            if notification.entity_type in ("users", "clients"):
                await self._load(notification.entity_path)

    async def _load(self, entity_path: str) -> None:
        path = f"{znodes.CONFIG_PATH}/{entity_path}"
        try:
            znodes.validate_entity_path(entity_path)
            data, _ = await self.zookeeper.get(path)
            configs = dict(znodes.ConfigEntity.from_bytes(data, path).config) if data else {}
        except ZNodeMissingError:
            configs = {}
        except (KafkaliteError, ValueError) as exc:
            log.warning("ignoring config entity %s: %s", path, exc)
            configs = {}
        self._store(entity_path, configs)

    def _store(self, entity_path: str, configs: dict[str, str]) -> None:
        if self._entities.get(entity_path, {}) == configs:
            return
        if configs:
            self._entities[entity_path] = dict(configs)
        else:
            self._entities.pop(entity_path, None)
        for listener in list(self._listeners):
            try:
                listener(entity_path)
            except Exception:  # a listener's bug must not stop the cache from following ZooKeeper
                log.exception("entity config listener failed for %s", entity_path)
