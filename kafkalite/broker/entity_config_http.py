"""The users/clients config entities on the HTTP front end (``kafkalite-configs.sh --entity-type users|clients``).

=============================================  ==================================================
``POST /v1/admin/describe_entity_configs``     ``{}`` → ``{"error_code":0,"entities":[{entity_path,
                                               user, client_id, configs}]}`` (credentials shown
                                               as ``iterations=<n>`` only)
``POST /v1/admin/alter_entity_configs``        ``{user, client_id, set {k: v}, delete [k],
                                               validate_only}`` → ``{"error_code":0,"configs":{...}}``
=============================================  ==================================================

``user`` and ``client_id`` are raw names (or ``<default>``; null for "not part of the entity").
SCRAM keys are set as Kafka's stored credential text, computed by the tool: the password never
travels. Errors are the usual JSON error bodies (INVALID_CONFIG, INVALID_REQUEST).

Concurrency: event-loop only, like every handler.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from kafkalite import protocol
from kafkalite.broker.entity_configs import EntityConfigs, describe_value
from kafkalite.broker.services import BrokerServices
from kafkalite.errors import InvalidRequestError

Json = dict[str, Any]


def _optional_name(body: Json, key: str) -> str | None:
    value = body.get(key)
    if value is not None and (not isinstance(value, str) or not value):
        raise InvalidRequestError(f"'{key}' must be a non-empty string or null")
    return value


def _cache(services: BrokerServices) -> EntityConfigs:
    if services.entity_configs is None:
        raise InvalidRequestError("this broker keeps no user/client config entities")
    return services.entity_configs


def routes(services: BrokerServices) -> list[web.RouteDef]:
    """The describe and alter routes."""

    async def describe(request: web.Request) -> web.Response:
        protocol.parse_json(await request.read())
        answer = {"error_code": 0, "entities": _cache(services).describe()}
        return web.Response(body=protocol.dumps(answer), content_type="application/json")

    async def alter(request: web.Request) -> web.Response:
        body = protocol.parse_json(await request.read())
        set_configs = body.get("set") or {}
        delete_configs = body.get("delete") or []
        if not isinstance(set_configs, dict) or not all(
                isinstance(key, str) and isinstance(value, str) for key, value in set_configs.items()):
            raise InvalidRequestError("'set' must map config names to string values")
        if not isinstance(delete_configs, list) or not all(isinstance(name, str) for name in delete_configs):
            raise InvalidRequestError("'delete' must be a list of config names")
        validate_only = protocol.require(body, "validate_only", bool, False)
        configs = await _cache(services).alter(_optional_name(body, "user"), _optional_name(body, "client_id"),
                                               set_configs, delete_configs, validate_only)
        answer = {"error_code": 0, "configs": {key: describe_value(key, value) for key, value in configs.items()}}
        return web.Response(body=protocol.dumps(answer), content_type="application/json")

    return [web.post(protocol.DESCRIBE_ENTITY_CONFIGS, describe), web.post(protocol.ALTER_ENTITY_CONFIGS, alter)]
