"""The Confluent Schema Registry REST API on aiohttp.

:func:`build_registry_app` builds the application; the broker mounts it under ``/registry`` on
its listener and, with ``schema.registry.listeners``, serves it at the root of its own port.
Reads are answered from the broker's view (synced first, see
:class:`~kafkalite.registry.store.SchemaStore`); writes run on the leader of ``_schemas``-0
— another broker forwards the request there unchanged and, before answering, waits until its
own view holds the records written (read-your-write on every broker).

Requests may carry ``application/vnd.schemaregistry.v1+json``, ``application/vnd.schemaregistry+json``,
``application/json`` or ``application/octet-stream`` bodies (the body is read as JSON whatever
the type says, as Confluent does); answers are ``application/vnd.schemaregistry.v1+json``. Every
failure is Confluent's error body ``{"error_code", "message"}``: malformed JSON 400, a body of
the wrong shape 422, an unknown path 404, a wrong method 405, the registry's own codes
(40401, 42201, 409, ...) with their statuses; an unexpected exception is logged once and
answered 50001, never a traceback in the body.

Concurrency: handlers run on the event loop.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import unquote

import aiohttp
from aiohttp import web

from kafkalite.errors import KafkaliteError
from kafkalite.registry import writes
from kafkalite.registry.compatibility import compatibility_problems, normalize_level
from kafkalite.registry.errors import (
    BadRequestError,
    ForwardingError,
    MethodNotAllowedError,
    SchemaNotFoundError,
    SchemaRegistryError,
    StoreError,
    UnknownLeaderError,
    UnknownPathError,
    UnprocessableEntityError,
)
from kafkalite.registry.schemas import SCHEMA_TYPES, Reference, normalize_type, parse_schema
from kafkalite.registry.store import SchemaStore
from kafkalite.registry.view import LATEST, RegistryView, parse_version

log = logging.getLogger(__name__)

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
FORWARDED_HEADER = "X-Kafkalite-Registry-Forwarded"
OFFSET_HEADER = "X-Kafkalite-Registry-Offset"
MAX_BODY_BYTES = 16 * 1024 * 1024
_STORE_KEY = web.AppKey("registry_store", SchemaStore)
_SESSION_KEY = web.AppKey("registry_session", aiohttp.ClientSession)
_PREFIX_KEY = web.AppKey("registry_prefix", str)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def answer(body: Any, status: int = 200, offset: int | None = None) -> web.Response:
    response = web.Response(body=json.dumps(body, ensure_ascii=False).encode("utf-8"), status=status,
                            content_type=CONTENT_TYPE)
    if offset is not None and offset >= 0:
        response.headers[OFFSET_HEADER] = str(offset)
    return response


def error_answer(error: SchemaRegistryError) -> web.Response:
    return answer(error.body(), status=error.http_status)


@web.middleware
async def registry_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every failure as Confluent's error body (see the module docstring)."""
    try:
        return await handler(request)
    except SchemaRegistryError as exc:
        if exc.http_status >= 500:
            log.warning("schema registry: %s %s failed: %s", request.method, request.path, exc)
        return error_answer(exc)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        if exc.status == 404:
            return error_answer(UnknownPathError("HTTP 404 Not Found"))
        if exc.status == 405:
            response = error_answer(MethodNotAllowedError("HTTP 405 Method Not Allowed"))
            if "Allow" in exc.headers:
                response.headers["Allow"] = exc.headers["Allow"]
            return response
        if exc.status == 413:
            return answer({"error_code": 413, "message": "the request body is too large"}, status=413)
        error = SchemaRegistryError(exc.reason)
        error.error_code = exc.status  # type: ignore[misc]
        return error_answer(error)
    except KafkaliteError as exc:
        log.warning("schema registry: %s %s failed: %s", request.method, request.path, exc)
        return error_answer(StoreError(f"Error in the backend data store: {exc}"))
    except ConnectionError as exc:
        log.debug("schema registry client %s went away: %s", request.remote, exc)
        raise
    except Exception:
        log.exception("unexpected failure serving %s %s", request.method, request.path)
        return error_answer(StoreError("unexpected server error; see the broker log"))


def build_registry_app(store: SchemaStore, prefix: str = "") -> web.Application:
    """The REST API over ``store``; ``prefix`` is where it is mounted (``/registry`` or empty)."""
    app = web.Application(middlewares=[registry_errors], client_max_size=MAX_BODY_BYTES)
    app[_STORE_KEY] = store
    app[_PREFIX_KEY] = prefix
    app.cleanup_ctx.append(_client_session)
    api = RegistryApi()
    app.add_routes([
        web.get("/", api.root),
        web.get("/subjects", api.subjects),
        web.get("/subjects/{subject}/versions", api.versions),
        web.post("/subjects/{subject}/versions", api.register),
        web.get("/subjects/{subject}/versions/{version}", api.version),
        web.get("/subjects/{subject}/versions/{version}/schema", api.version_schema),
        web.get("/subjects/{subject}/versions/{version}/referencedby", api.referenced_by),
        web.delete("/subjects/{subject}/versions/{version}", api.delete_version),
        web.post("/subjects/{subject}", api.lookup),
        web.delete("/subjects/{subject}", api.delete_subject),
        web.get("/schemas/types", api.types),
        web.get("/schemas/ids/{id}", api.schema_by_id),
        web.get("/schemas/ids/{id}/schema", api.raw_schema_by_id),
        web.get("/schemas/ids/{id}/subjects", api.subjects_by_id),
        web.get("/schemas/ids/{id}/versions", api.versions_by_id),
        web.post("/compatibility/subjects/{subject}/versions/{version}", api.compatibility),
        web.post("/compatibility/subjects/{subject}/versions", api.compatibility),
        web.get("/config", api.get_config),
        web.put("/config", api.put_config),
        web.delete("/config", api.delete_config),
        web.get("/config/{subject}", api.get_config),
        web.put("/config/{subject}", api.put_config),
        web.delete("/config/{subject}", api.delete_config),
        web.get("/mode", api.get_mode),
        web.put("/mode", api.put_mode),
        web.get("/mode/{subject}", api.get_mode),
        web.put("/mode/{subject}", api.put_mode),
        web.delete("/mode/{subject}", api.delete_mode),
    ])
    return app


async def _client_session(app: web.Application) -> Any:
    session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=app[_STORE_KEY].timeout_ms / 1000))
    app[_SESSION_KEY] = session
    yield
    await session.close()


# -- request helpers -------------------------------------------------------------------------
async def _body(request: web.Request) -> dict[str, Any]:
    raw = await request.read()
    if not raw.strip():
        return {}
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise BadRequestError(f"Unexpected character in the JSON body: {str(exc)[:200]}") from None
    if not isinstance(body, dict):
        raise UnprocessableEntityError("the request body must be a JSON object")
    return body


def _subject(request: web.Request) -> str:
    subject = unquote(request.match_info["subject"])
    writes.validate_subject(subject)
    return subject


def _flag(request: web.Request, name: str) -> bool:
    value = request.query.get(name, "false").lower()
    if value not in ("true", "false"):
        raise UnprocessableEntityError(f"query parameter {name} must be true or false, got {value[:20]!r}")
    return value == "true"


def _schema_id(request: web.Request) -> int:
    text = request.match_info["id"]
    if not text.isdigit() or len(text) > 10 or not 0 < int(text) < (1 << 31):
        raise UnprocessableEntityError(f"a schema id is a positive integer, got {text[:40]!r}")
    return int(text)


def _references(body: dict[str, Any]) -> tuple[Reference, ...]:
    raw = body.get("references") or []
    if not isinstance(raw, list):
        raise UnprocessableEntityError("references must be a list")
    references = []
    for item in raw:
        if not isinstance(item, dict) or not isinstance(item.get("name"), str) or \
                not isinstance(item.get("subject"), str) or not isinstance(item.get("version"), int) or \
                isinstance(item.get("version"), bool):
            raise UnprocessableEntityError("a reference is {\"name\": string, \"subject\": string, \"version\": int}")
        references.append(Reference(item["name"], item["subject"], item["version"]))
    return tuple(references)


def _schema_fields(body: dict[str, Any]) -> tuple[str, str, tuple[Reference, ...]]:
    schema = body.get("schema")
    if not isinstance(schema, str):
        raise UnprocessableEntityError("the body needs \"schema\": the schema as a string")
    return normalize_type(body.get("schemaType")), schema, _references(body)


def _version_body(value: Any, with_schema: bool = True) -> dict[str, Any]:
    body: dict[str, Any] = {"subject": value.subject, "version": value.version, "id": value.schema_id}
    if value.schema_type != "AVRO":
        body["schemaType"] = value.schema_type
    if value.references:
        body["references"] = [reference.to_json() for reference in value.references]
    if with_schema:
        body["schema"] = value.schema
    return body


class RegistryApi:
    """Request handlers: decode, read the view or write through the store, encode."""

    @staticmethod
    async def _view(request: web.Request) -> RegistryView:
        return await request.app[_STORE_KEY].read_view()

    async def _write(self, request: web.Request, decide: Callable[[RegistryView], tuple[list[Any], Any]]
                     ) -> web.Response:
        """Run a write on the ``_schemas`` leader: here, or forwarded to it."""
        store = request.app[_STORE_KEY]
        forwarded = FORWARDED_HEADER in request.headers
        for attempt in range(2):
            leader_url = store.topic.leader_url() if store.topic.has_leader() else None
            if leader_url is not None and not forwarded:
                return await self._forward(request, leader_url)
            try:
                result, offset = await store.write(decide)
                return answer(result, offset=offset)
            except UnknownLeaderError:
                if forwarded or attempt:
                    raise
                await store.topic.ensure_topic()
        raise UnknownLeaderError("no broker leads _schemas")

    async def _forward(self, request: web.Request, leader_url: str) -> web.Response:
        app = request.app
        query = request.rel_url.raw_query_string
        url = leader_url + request.rel_url.raw_path[len(app[_PREFIX_KEY]):] + (f"?{query}" if query else "")
        body = await request.read()
        try:
            async with app[_SESSION_KEY].request(request.method, url, data=body, headers={
                    FORWARDED_HEADER: "1", "Content-Type": CONTENT_TYPE}) as response:
                payload = await response.read()
                status = response.status
                offset_text = response.headers.get(OFFSET_HEADER)
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise ForwardingError(f"Error while forwarding the request to the leader at {leader_url}: {exc}") \
                from None
        try:
            result = json.loads(payload) if payload else None
        except ValueError:
            raise ForwardingError(f"the leader at {leader_url} answered {status} without JSON") from None
        if offset_text is not None and offset_text.isdigit():
            await app[_STORE_KEY].wait_for_offset(int(offset_text))
        return answer(result, status=status)

    # -- subjects -----------------------------------------------------------------------------
    async def root(self, request: web.Request) -> web.Response:
        return answer({})

    async def subjects(self, request: web.Request) -> web.Response:
        view = await self._view(request)
        prefix = request.query.get("subjectPrefix", "")
        return answer(view.subject_names(_flag(request, "deleted"), prefix))

    async def versions(self, request: web.Request) -> web.Response:
        subject = _subject(request)
        view = await self._view(request)
        return answer(view.versions(subject, _flag(request, "deleted")))

    async def version(self, request: web.Request) -> web.Response:
        subject = _subject(request)
        version = parse_version(request.match_info["version"])
        view = await self._view(request)
        return answer(_version_body(view.version(subject, version, _flag(request, "deleted"))))

    async def version_schema(self, request: web.Request) -> web.Response:
        subject = _subject(request)
        version = parse_version(request.match_info["version"])
        view = await self._view(request)
        return web.Response(text=view.version(subject, version, _flag(request, "deleted")).schema,
                            content_type=CONTENT_TYPE)

    async def referenced_by(self, request: web.Request) -> web.Response:
        subject = _subject(request)
        version = parse_version(request.match_info["version"])
        view = await self._view(request)
        return answer(view.referenced_by(subject, view.version(subject, version).version))

    async def register(self, request: web.Request) -> web.Response:
        subject = _subject(request)
        body = await _body(request)
        schema_type, text, references = _schema_fields(body)
        schema_id, version = body.get("id"), body.get("version")
        for name, value in (("id", schema_id), ("version", version)):
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
                raise UnprocessableEntityError(f"{name} must be a non-negative integer")
        if schema_id in (0, -1):
            schema_id = None
        if version in (0, -1):
            version = None
        # Refuse what is already decidable here (bad schema, known duplicate) before forwarding.
        view = await self._view(request)
        parsed = await asyncio.to_thread(parse_schema, schema_type, text, view.resolve_references(references))
        existing = view.find_in_subject(subject, parsed)
        if existing is not None and schema_id in (None, existing.schema_id) and view.mode(subject) != "READONLY":
            return answer({"id": existing.schema_id})
        return await self._write(request, lambda current: writes.register(
            current, subject, schema_type, text, references, schema_id, version))

    async def lookup(self, request: web.Request) -> web.Response:
        subject = _subject(request)
        body = await _body(request)
        schema_type, text, references = _schema_fields(body)
        deleted = _flag(request, "deleted")
        view = await self._view(request)
        view.subject(subject, deleted)
        parsed = await asyncio.to_thread(parse_schema, schema_type, text, view.resolve_references(references))
        found = view.find_in_subject(subject, parsed, deleted)
        if found is None:
            raise SchemaNotFoundError("Schema not found")
        return answer(_version_body(found))

    async def delete_version(self, request: web.Request) -> web.Response:
        subject = _subject(request)
        version = parse_version(request.match_info["version"])
        permanent = _flag(request, "permanent")
        await self._view(request)
        return await self._write(request, lambda view: writes.delete_version(view, subject, version, permanent))

    async def delete_subject(self, request: web.Request) -> web.Response:
        subject = _subject(request)
        permanent = _flag(request, "permanent")
        await self._view(request)
        return await self._write(request, lambda view: writes.delete_subject(view, subject, permanent))

    # -- schemas by id ------------------------------------------------------------------------
    async def types(self, request: web.Request) -> web.Response:
        return answer(list(SCHEMA_TYPES))

    async def schema_by_id(self, request: web.Request) -> web.Response:
        schema_id = _schema_id(request)
        value = (await self._view(request)).by_id(schema_id)
        body: dict[str, Any] = {}
        if value.schema_type != "AVRO":
            body["schemaType"] = value.schema_type
        if value.references:
            body["references"] = [reference.to_json() for reference in value.references]
        body["schema"] = value.schema
        return answer(body)

    async def raw_schema_by_id(self, request: web.Request) -> web.Response:
        schema_id = _schema_id(request)
        value = (await self._view(request)).by_id(schema_id)
        return web.Response(text=value.schema, content_type=CONTENT_TYPE)

    async def subjects_by_id(self, request: web.Request) -> web.Response:
        schema_id = _schema_id(request)
        uses = (await self._view(request)).uses_of(schema_id, _flag(request, "deleted"))
        return answer(sorted({value.subject for value in uses}))

    async def versions_by_id(self, request: web.Request) -> web.Response:
        schema_id = _schema_id(request)
        uses = (await self._view(request)).uses_of(schema_id, _flag(request, "deleted"))
        return answer([{"subject": value.subject, "version": value.version} for value in uses])

    # -- compatibility ------------------------------------------------------------------------
    async def compatibility(self, request: web.Request) -> web.Response:
        subject = _subject(request)
        text_version = request.match_info.get("version")
        version = parse_version(text_version) if text_version is not None else None
        body = await _body(request)
        schema_type, text, references = _schema_fields(body)
        view = await self._view(request)
        parsed = await asyncio.to_thread(parse_schema, schema_type, text, view.resolve_references(references))
        level = view.compatibility(subject)
        if version is None or version == LATEST:
            entry = view.subjects.get(subject)
            live = entry.live() if entry else []
            if version == LATEST and not live and entry is None:
                previous = []
            else:
                previous = [view.parsed(value.schema_id) for value in live]
        else:
            previous = [view.parsed(view.version(subject, version).schema_id)]
            level = level.replace("_TRANSITIVE", "")
        problems = compatibility_problems(level, parsed, previous)
        result: dict[str, Any] = {"is_compatible": not problems}
        if _flag(request, "verbose"):
            result["messages"] = problems
        return answer(result)

    # -- config and mode ----------------------------------------------------------------------
    async def get_config(self, request: web.Request) -> web.Response:
        subject = _subject(request) if "subject" in request.match_info else None
        view = await self._view(request)
        level = view.compatibility(subject, _flag(request, "defaultToGlobal") or subject is None)
        return answer({"compatibilityLevel": level})

    async def put_config(self, request: web.Request) -> web.Response:
        subject = _subject(request) if "subject" in request.match_info else None
        level = (await _body(request)).get("compatibility")
        normalize_level(level)
        return await self._write(request, lambda view: writes.set_compatibility(view, subject, level))

    async def delete_config(self, request: web.Request) -> web.Response:
        subject = _subject(request) if "subject" in request.match_info else None
        await self._view(request)
        return await self._write(request, lambda view: writes.delete_compatibility(view, subject))

    async def get_mode(self, request: web.Request) -> web.Response:
        subject = _subject(request) if "subject" in request.match_info else None
        view = await self._view(request)
        return answer({"mode": view.mode(subject, _flag(request, "defaultToGlobal") or subject is None)})

    async def put_mode(self, request: web.Request) -> web.Response:
        subject = _subject(request) if "subject" in request.match_info else None
        mode = (await _body(request)).get("mode")
        return await self._write(request, lambda view: writes.set_mode(view, subject, mode))

    async def delete_mode(self, request: web.Request) -> web.Response:
        subject = _subject(request)
        return await self._write(request, lambda view: writes.delete_mode(view, subject))
