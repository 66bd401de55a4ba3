"""The ACL routes of the HTTP API: ``POST /v1/acls/create``, ``/v1/acls/describe`` and
``/v1/acls/delete``, served by the broker's :class:`~kafkalite.broker.authorizer.Authorizer`
(who may call them is checked by the authorization middleware: Alter on the Cluster to create or
delete, Describe to list). Bodies use :func:`kafkalite.security.acl.binding_to_json`'s shape:

* create ``{"creations": [acl, ...]}`` → ``{"results": [{"error_code", "error", "message"}]}``,
  one per creation, in order (a malformed one is INVALID_REQUEST in its place);
* describe ``filter`` (absent fields match anything) → ``{"acls": [acl, ...]}``;
* delete ``{"filters": [filter, ...]}`` → ``{"filter_results": [{"error_code", "matching_acls":
  [acl, ...]}]}``.

Without an authorizer every call is SECURITY_DISABLED (54), as in Kafka.

Concurrency: event-loop only, like every route.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from kafkalite import protocol
from kafkalite.broker.authorizer import Authorizer
from kafkalite.broker.services import BrokerServices
from kafkalite.errors import BrokerResponseError, SecurityDisabledError
from kafkalite.security.acl import binding_from_json, binding_to_json, filter_from_json

CREATE_ACLS, DESCRIBE_ACLS, DELETE_ACLS = protocol.CREATE_ACLS, protocol.DESCRIBE_ACLS, protocol.DELETE_ACLS


def _authorizer(services: BrokerServices) -> Authorizer:
    if services.authorizer is None:
        raise SecurityDisabledError("no authorizer is configured on this broker (authorizer.class.name)")
    return services.authorizer


def _json(body: Any) -> web.Response:
    return web.Response(body=protocol.dumps(body), content_type="application/json")


def _outcome(error: BrokerResponseError | None) -> dict[str, Any]:
    if error is None:
        return {"error_code": 0}
    return protocol.error_body(error)


def routes(services: BrokerServices) -> list[web.RouteDef]:
    async def create(request: web.Request) -> web.Response:
        authorizer = _authorizer(services)
        document = protocol.parse_json(await request.read(), protocol.MAX_JSON_BODY_BYTES)
        results = []
        for item in protocol.require_objects(document, "creations"):
            try:
                await authorizer.create_acls([binding_from_json(item)])
                results.append(_outcome(None))
            except BrokerResponseError as exc:
                results.append(_outcome(exc))
        return _json({"results": results})

    async def describe(request: web.Request) -> web.Response:
        authorizer = _authorizer(services)
        body = await request.read()
        document = protocol.parse_json(body, protocol.MAX_JSON_BODY_BYTES) if body.strip() else {}
        return _json({"acls": [binding_to_json(binding)
                               for binding in authorizer.describe_acls(filter_from_json(document))]})

    async def delete(request: web.Request) -> web.Response:
        authorizer = _authorizer(services)
        document = protocol.parse_json(await request.read(), protocol.MAX_JSON_BODY_BYTES)
        results = []
        for item in protocol.require_objects(document, "filters"):
            try:
                deleted = await authorizer.delete_acls(filter_from_json(item))
                results.append({**_outcome(None), "matching_acls": [binding_to_json(b) for b in deleted]})
            except BrokerResponseError as exc:
                results.append({**_outcome(exc), "matching_acls": []})
        return _json({"filter_results": results})

    return [web.post(CREATE_ACLS, create), web.post(DESCRIBE_ACLS, describe), web.post(DELETE_ACLS, delete)]
