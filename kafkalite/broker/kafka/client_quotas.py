"""DescribeClientQuotas and AlterClientQuotas over the Kafka protocol (KIP-546), on the broker's
``users``/``clients`` entity cache (:mod:`kafkalite.broker.entity_configs`).

Entities are Kafka's: components of type ``user`` and ``client-id``, a null name for the
default entity. Describe filters with Kafka's match types (EXACT name or default, DEFAULT,
SPECIFIED) and ``strict`` (the entity has no other component types) and answers only quota keys
(never a SCRAM credential). Alter sets and removes quota keys per entity; each entity is answered
with its own error (INVALID_REQUEST for a malformed entity or an unknown key, INVALID_CONFIG for a
bad value). Removing a key the entity does not have is not an error, as in Kafka.

Concurrency: event-loop only, like every handler.
"""

from __future__ import annotations

from typing import Any

from kafkalite.broker.entity_configs import QUOTA_KEYS, EntityConfigs, split_entity_path
from kafkalite.broker.kafka.context import ApiHandler, KafkaAnswer, KafkaRequestContext
from kafkalite.errors import BrokerResponseError, InvalidRequestError, SecurityDisabledError
from kafkalite.security.quota import DEFAULT_ENTITY

DESCRIBE_CLIENT_QUOTAS, ALTER_CLIENT_QUOTAS = 48, 49
USER, CLIENT_ID = "user", "client-id"
MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2


def _cache(context: KafkaRequestContext) -> EntityConfigs:
    cache = context.services.entity_configs
    if cache is None:
        raise SecurityDisabledError("this broker keeps no users/clients config entities")
    return cache


def _entity_components(entity_path: str) -> dict[str, str | None]:
    """``{"user": name or None (default), "client-id": ...}`` for the types the entity has."""
    user, client_id = split_entity_path(entity_path)
    components: dict[str, str | None] = {}
    if user is not None:
        components[USER] = None if user == DEFAULT_ENTITY else user
    if client_id is not None:
        components[CLIENT_ID] = None if client_id == DEFAULT_ENTITY else client_id
    return components


def _matches(components: dict[str, str | None], filters: Any, strict: bool) -> bool:
    for component in filters:
        if component.entity_type not in components:
            return False
        name = components[component.entity_type]
        if component.match_type == MATCH_EXACT and name != component.match:
            return False
        if component.match_type == MATCH_DEFAULT and name is not None:
            return False
        if component.match_type == MATCH_SPECIFIED and name is None:
            return False
    return not strict or set(components) == {component.entity_type for component in filters}


def _validate_filters(filters: Any) -> None:
    seen: set[str] = set()
    for component in filters:
        if component.entity_type not in (USER, CLIENT_ID):
            raise InvalidRequestError(f"unknown quota entity type {component.entity_type!r}")
        if component.entity_type in seen:
            raise InvalidRequestError(f"entity type {component.entity_type} is filtered twice")
        seen.add(component.entity_type)
        if component.match_type not in (MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED):
            raise InvalidRequestError(f"unknown match type {component.match_type}")
        if component.match_type != MATCH_EXACT and component.match is not None:
            raise InvalidRequestError("only an EXACT match names an entity")


async def describe_client_quotas(context: KafkaRequestContext, request: Any) -> KafkaAnswer:
    try:
        _validate_filters(request.components)
        cache = _cache(context)
    except BrokerResponseError as exc:
        return {"error_code": exc.errno, "error_message": str(exc), "entries": None}
    entries = []
    for entity_path, configs in cache.entities().items():
        values = [{"key": key, "value": float(value)} for key, value in sorted(configs.items())
                  if key in QUOTA_KEYS and _is_number(value)]
        components = _entity_components(entity_path)
        if values and _matches(components, request.components, request.strict):
            entries.append({"entity": [{"entity_type": entity_type, "entity_name": name}
                                       for entity_type, name in components.items()], "values": values})
    return {"error_code": 0, "error_message": None, "entries": entries}


def _is_number(value: str) -> bool:
    try:
        float(value)
    except ValueError:
        return False
    return True


def _entity_of(entity: Any) -> tuple[str | None, str | None]:
    """(user, client id) of a request entity, ``<default>`` for a null name."""
    names: dict[str, str] = {}
    for component in entity:
        if component.entity_type not in (USER, CLIENT_ID):
            raise InvalidRequestError(f"unknown quota entity type {component.entity_type!r}")
        if component.entity_type in names:
            raise InvalidRequestError(f"entity type {component.entity_type} appears twice")
        names[component.entity_type] = DEFAULT_ENTITY if component.entity_name is None else component.entity_name
    if not names:
        raise InvalidRequestError("a quota entity needs a user, a client id, or both")
    return names.get(USER), names.get(CLIENT_ID)


def _text(value: float) -> str:
    """A quota value as the entity stores it (the cache refuses a value its key cannot take)."""
    return str(int(value)) if float(value).is_integer() else repr(float(value))


async def alter_client_quotas(context: KafkaRequestContext, request: Any) -> KafkaAnswer:
    results = []
    for entry in request.entries:
        outcome: dict[str, Any] = {"error_code": 0, "error_message": None}
        try:
            cache = _cache(context)
            user, client_id = _entity_of(entry.entity)
            unknown = sorted({op.key for op in entry.ops} - set(QUOTA_KEYS))
            if unknown:
                raise InvalidRequestError(f"unknown quota key(s) {', '.join(unknown)}")
            current = cache.entity_configs(user, client_id)
            set_configs = {op.key: _text(op.value) for op in entry.ops if not op.remove}
            delete = [op.key for op in entry.ops if op.remove and op.key in current]
            await cache.alter(user, client_id, set_configs, delete, validate_only=request.validate_only)
        except BrokerResponseError as exc:
            outcome = {"error_code": exc.errno, "error_message": str(exc)}
        results.append({**outcome, "entity": [{"entity_type": component.entity_type,
                                               "entity_name": component.entity_name} for component in entry.entity]})
    return {"entries": results}


HANDLERS: tuple[ApiHandler, ...] = (
    ApiHandler(DESCRIBE_CLIENT_QUOTAS, 0, 1, describe_client_quotas),
    ApiHandler(ALTER_CLIENT_QUOTAS, 0, 1, alter_client_quotas),
)
