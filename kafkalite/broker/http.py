"""The broker's HTTP API on aiohttp: the only module that imports ``aiohttp.web``.

Handlers are thin: decode the request (binary frame, see :mod:`kafkalite.protocol`, or JSON, see
:mod:`kafkalite.broker.http_codec`), call one of the broker's services
(:class:`kafkalite.broker.services.BrokerServices`), encode the answer. The error middleware turns every kafkalite error
into Kafka's code and name in a JSON body with a fitting HTTP status, and every aiohttp-level
problem (unknown route, wrong method, oversize body) into the same shape; :class:`BrokerAppRunner`
does the same for what aiohttp answers before any handler runs (a malformed request line or
header, a broken chunked body), so no bad input ever yields a bare 500, a text/plain body or a
stack trace. JSON bodies are decoded by :func:`kafkalite.protocol.parse_json` (bounded size,
depth and numbers) and read with its typed helpers. Client disconnects and malformed HTTP are
logged at DEBUG/INFO; only a genuinely unexpected exception is logged at ERROR, once, with its
traceback, and answered ``UNKNOWN_SERVER_ERROR``. Calls only brokers make (follower fetches,
controlled shutdown) must carry the caller's current broker epoch (see
:meth:`kafkalite.broker.services.ControllerService.verify_broker_epoch`). The OpenAPI description of every
route (docs/openapi.yaml) is served at ``GET /v1/openapi.json``. Produce and fetch are also served on the binary channel
(``GET /v1/channel``, a WebSocket; see :class:`kafkalite.transport.PipelinedConnection` and
docs/protocol.md): one binary message per request, answered in order with the same frames
and error bodies.

Concurrency: handlers run on the event loop; a channel serves its messages one at a time.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import json
import logging
import re
import struct
import time
from collections.abc import Awaitable, Callable, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

from aiohttp import WSCloseCode, WSMsgType, web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.web_protocol import RequestHandler, RequestPayloadError
from prometheus_client import CONTENT_TYPE_LATEST as PROMETHEUS_CONTENT_TYPE

from kafkalite import protocol
from kafkalite.broker import access, acl_http, console, entity_config_http, http_auth, http_codec as codec, txn_http
from kafkalite.broker.metrics import BrokerMetrics
from kafkalite.broker.services import BrokerServices
from kafkalite.broker.state_push import decode_states
from kafkalite.broker.stats import CHANNEL, HTTP, RequestStats
from kafkalite.config import BrokerConfig
from kafkalite.errors import (
    BrokerResponseError,
    ConfigError,
    FetchSessionIdNotFoundError,
    InvalidFetchSessionEpochError,
    InvalidRequestError,
    KafkaliteError,
    MessageSizeTooLargeError,
    RequestTimedOutError,
    TopicAuthorizationFailedError,
    UnknownServerError,
)
from kafkalite.registry.api import build_registry_app
from kafkalite.security import tls
from kafkalite.security.acl import Operation
from kafkalite.security.principal import ANONYMOUS, KafkaPrincipal
from kafkalite.transport import PIECED_MESSAGE_BYTES, write_message
from kafkalite.version import __version__

log = logging.getLogger(__name__)
request_log = logging.getLogger("kafkalite.broker.requests")  # one line per request at DEBUG

#: Where a request's authenticated principal is kept (``request[PRINCIPAL_KEY]``), set by the
#: authentication step of a listener that authenticates; read it with :func:`request_principal`.
PRINCIPAL_KEY = web.RequestKey("kafkalite.principal", KafkaPrincipal)  # a str key warns (NotAppKeyWarning)


def request_principal(request: web.BaseRequest) -> KafkaPrincipal:
    """Who ``request`` comes from: the principal its listener authenticated, else ANONYMOUS."""
    principal = request.get(PRINCIPAL_KEY)
    return principal if isinstance(principal, KafkaPrincipal) else ANONYMOUS


# -- TLS client certificates ----------------------------------------------------------------
@web.middleware
async def certificate_principal_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """On a TLS connection whose client presented a certificate (``ssl.client.auth``), the
    request's principal is ``User:<the certificate's RFC 2253 subject>``, as on the Kafka protocol."""
    principal = tls.transport_principal(request.transport)
    if principal is not None:
        request[PRINCIPAL_KEY] = principal
    return await handler(request)


def _uses_tls(config: BrokerConfig) -> bool:
    return any(config.security_protocol(listener.name) in ("SSL", "SASL_SSL") for listener in config.listener_list())


# -- listeners: addresses as advertised on the listener a request came in on -------------------------
#: Bound port → listener name (``PLAINTEXT``, ``SSL``, ...), filled in by
#: :mod:`kafkalite.broker.listener` once its sockets are bound (:meth:`HttpListener.name_port`).
LISTENER_PORTS_KEY = web.AppKey("kafkalite_listener_ports", dict)


def request_listener(request: web.Request) -> str | None:
    """The name of the listener ``request`` came in on; None when unknown (a bare HTTP listener)."""
    transport = request.transport
    sockname = transport.get_extra_info("sockname") if transport is not None else None
    ports: dict[int, str] = request.app.get(LISTENER_PORTS_KEY, {})
    return ports.get(sockname[1]) if isinstance(sockname, tuple) and len(sockname) >= 2 else None


def brokers_on_listener(services: BrokerServices, request: web.Request,
                        brokers: list[protocol.BrokerEndpoint]) -> list[protocol.BrokerEndpoint]:
    """``brokers`` (registered with the inter-broker listener's addresses) as advertised on the
    listener ``request`` came in on, as Kafka's Metadata answers: a client on the SSL listener is
    told SSL addresses, one on PLAINTEXT plaintext ones. Brokers without that listener are left out."""
    name = request_listener(request)
    if name is None or name == services.config.inter_broker_listener().name:
        return brokers
    registered = services.metadata.cache.brokers
    found = []
    for broker in brokers:
        live = registered.get(broker.broker_id)
        endpoint = live.listener_endpoint(name) if live is not None else None
        if endpoint is not None:
            found.append(endpoint)
    return found


async def _find_coordinator_on_listener(services: BrokerServices, body: dict[str, Any],
                                        request: web.Request) -> Any:
    answer = await txn_http.find_coordinator(services, codec.decode_find_coordinator(body))
    if answer.error is None and answer.node_id >= 0:
        moved = brokers_on_listener(services, request, [protocol.BrokerEndpoint(answer.node_id, answer.host,
                                                                                 answer.port)])
        if moved and (moved[0].host, moved[0].port) != (answer.host, answer.port):
            answer = dataclasses.replace(answer, host=moved[0].host, port=moved[0].port)
    return answer

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

_UINT16 = struct.Struct(">H")
_CHANNEL_PRODUCE = protocol.CHANNEL_APIS[protocol.PRODUCE]
_CHANNEL_FETCH = protocol.CHANNEL_APIS[protocol.FETCH]
_CHANNEL_SLACK = 64 * 1024  # room for the frame around a request of socket.request.max.bytes
#: Channel messages started and not yet answered (produces waiting for replication) before the
#: channel starts no more until the oldest is answered.
MAX_WAITING_CHANNEL_ANSWERS = 32


def _json_response(body: Any, status: int = 200) -> web.Response:
    return web.Response(body=protocol.dumps(body), status=status, content_type="application/json")


def _error_response(error: BrokerResponseError) -> web.Response:
    return _json_response(protocol.error_body(error), status=error.http_status)


def _as_broker_error(exc: Exception, what: str) -> BrokerResponseError:
    """The named error a failure of ``what`` answers with (unexpected ones are logged)."""
    if isinstance(exc, BrokerResponseError):
        return exc
    if isinstance(exc, KafkaliteError):
        log.warning("%s failed: %s", what, exc)
        return UnknownServerError(str(exc))
    log.error("unexpected failure serving %s", what, exc_info=exc)
    return UnknownServerError("unexpected server error; see the broker log")


def _http_error_response(status: int, reason: str, what: str) -> web.Response:
    """The documented JSON error for an HTTP-level failure (no route, wrong method, bad framing)."""
    error: BrokerResponseError
    if status == 413:
        error = MessageSizeTooLargeError(f"{what}: request body exceeds socket.request.max.bytes")
    elif status == 504:
        error = RequestTimedOutError(f"{what}: {reason}")
    elif status >= 500:
        error = UnknownServerError(f"{what}: {reason}")
    else:
        error = InvalidRequestError(f"{what}: {reason}")
    return _json_response(protocol.error_body(error), status=status)


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every failure of a handler as the documented JSON error body (see the module docstring)."""
    what = f"{request.method} {request.path}"
    try:
        return await handler(request)
    except KafkaliteError as exc:
        return _error_response(_as_broker_error(exc, what))
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        response = _http_error_response(exc.status, exc.reason, what)
        if "Allow" in exc.headers:  # 405 names the methods the route has
            response.headers["Allow"] = exc.headers["Allow"]
        return response
    except (HttpProcessingError, RequestPayloadError) as exc:  # a broken body: chunked framing, content encoding
        reason = str(exc).replace("\n", " ").strip() or "malformed request body"
        log.info("malformed HTTP body from %s on %s: %s", request.remote, what, reason)
        response = _http_error_response(400, reason, what)
        response.force_close()
        return response
    except ConnectionError as exc:  # the client went away while we read or wrote: nobody reads this
        log.debug("client %s disconnected during %s: %s", request.remote, what, exc)
        response = _http_error_response(400, "the client disconnected", what)
        response.force_close()
        return response
    except Exception as exc:
        return _error_response(_as_broker_error(exc, what))


def stats_middleware(stats: RequestStats) -> Any:
    """Counts and times every HTTP request by its route (the binary channel's messages are
    counted one by one instead: its WebSocket request lasts as long as the channel)."""

    @web.middleware
    async def count(request: web.Request, handler: Handler) -> web.StreamResponse:
        resource = request.match_info.route.resource
        route = resource.canonical if resource is not None else "unmatched"
        if route == protocol.CHANNEL:
            return await handler(request)
        started = time.perf_counter()
        failed = True
        try:
            response = await handler(request)
            failed = response.status >= 400
            return response
        finally:
            elapsed = time.perf_counter() - started
            stats.observe(HTTP, f"{request.method} {route}", elapsed, failed)
            if request_log.isEnabledFor(logging.DEBUG):
                request_log.debug("http %s %s from %s: %s in %.1f ms", request.method, request.path, request.remote,
                                  "failed" if failed else "answered", elapsed * 1000)

    return count


class _JsonErrorRequestHandler(RequestHandler):
    """aiohttp's connection handler, answering what fails before any handler runs (a request it
    cannot parse) with the documented JSON error instead of text/plain, logged at INFO."""

    def handle_error(self, request: Any, status: int = 500, exc: BaseException | None = None,
                     message: str | None = None) -> web.StreamResponse:
        if isinstance(exc, ConnectionError):
            log.debug("client %s disconnected: %s", request.remote, exc)
        elif status >= 500 and status != 504:
            log.error("unexpected failure handling a request from %s", request.remote, exc_info=exc)
        else:
            log.info("malformed HTTP request from %s: %s", request.remote, message or exc)
        if request.writer.output_size > 0:
            raise ConnectionError("the response has started; the connection is closed instead")
        reason = message or (exc.message if isinstance(exc, HttpProcessingError) else "") or "malformed request"
        response = _http_error_response(status, reason, "request")
        response.force_close()
        return response

    def log_exception(self, *args: Any, **kw: Any) -> None:
        """aiohttp reports a broken or abandoned body again when it drains it after the answer:
        that is the client's doing, logged at INFO; anything else stays an ERROR."""
        exc = kw.get("exc_info")
        if isinstance(exc, (HttpProcessingError, RequestPayloadError, ConnectionError)):
            log.info("dropped a malformed or abandoned HTTP request: %s", str(exc).replace("\n", " ").strip())
            return
        super().log_exception(*args, **kw)


class _JsonErrorServer(web.Server):
    def __call__(self) -> RequestHandler:
        return _JsonErrorRequestHandler(self, loop=self._loop, **self._kwargs)


class BrokerAppRunner(web.AppRunner):
    """An AppRunner whose connections answer HTTP-level errors in the documented JSON shape."""

    async def _make_server(self) -> web.Server:
        # The same server AppRunner builds (aiohttp 3.x, pinned <4 in setup.cfg), with our
        # connection handler class; aiohttp offers no public hook for its error answers.
        server = await super()._make_server()
        return _JsonErrorServer(server.request_handler, request_factory=server.request_factory,
                                handler_cancellation=server.handler_cancellation, loop=server._loop,
                                **server._kwargs)


class HttpListener:
    """The HTTP front end listening on one address: :meth:`start` binds it, :meth:`stop` closes
    every connection and channel."""

    def __init__(self, runner: web.AppRunner) -> None:
        self._runner = runner

    @classmethod
    async def start(cls, services: BrokerServices, host: str, port: int) -> HttpListener:
        """Serve ``services`` on ``host:port``; a port that cannot be bound is a ConfigError."""
        runner = BrokerAppRunner(build_app(services), access_log=None, handle_signals=False)
        await runner.setup()
        site = web.TCPSite(runner, host, port, reuse_address=True, backlog=1024)
        try:
            await site.start()
        except OSError as exc:
            await runner.cleanup()
            raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror}") from exc
        return cls(runner)

    @classmethod
    async def serve_app(cls, app: web.Application, host: str, port: int) -> HttpListener:
        """Serve another application (the schema registry's own port) on ``host:port`` with the
        same connection handling; a port that cannot be bound is a ConfigError."""
        runner = BrokerAppRunner(app, access_log=None, handle_signals=False)
        await runner.setup()
        site = web.TCPSite(runner, host, port, reuse_address=True, backlog=1024)
        try:
            await site.start()
        except OSError as exc:
            await runner.cleanup()
            raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror}") from exc
        return cls(runner)

    @classmethod
    async def prepare(cls, services: BrokerServices) -> HttpListener:
        """The HTTP front end without a socket of its own: another listener hands it connections
        through :meth:`protocol_factory` (see :mod:`kafkalite.broker.listener`)."""
        runner = BrokerAppRunner(build_app(services), access_log=None, handle_signals=False)
        await runner.setup()
        return cls(runner)

    def name_port(self, port: int, listener_name: str) -> None:
        """Requests arriving on bound ``port`` came in on listener ``listener_name``."""
        self._runner.app[LISTENER_PORTS_KEY][port] = listener_name

    def protocol_factory(self) -> Callable[[], asyncio.Protocol]:
        """aiohttp's connection protocol factory (valid after :meth:`prepare` or :meth:`start`)."""
        server = self._runner.server
        assert server is not None, "the runner is set up"
        return server

    async def stop(self) -> None:
        await self._runner.cleanup()


async def _read_body(request: web.Request) -> bytes:
    return await access.read_body(request)


async def _json_body(request: web.Request, max_bytes: int = protocol.MAX_JSON_BODY_BYTES) -> dict[str, Any]:
    return protocol.parse_json(await _read_body(request), max_bytes)


#: Where every broker serves the schema registry's REST API.
REGISTRY_PREFIX = "/registry"

OPENAPI_PATH = Path(__file__).resolve().parents[2] / "docs" / "openapi.yaml"


@lru_cache(maxsize=1)
def openapi_document() -> bytes:
    """docs/openapi.yaml as JSON (read once); a placeholder naming the problem when unavailable."""
    try:
        import yaml

        document = yaml.safe_load(OPENAPI_PATH.read_text(encoding="utf-8"))
    except Exception as exc:  # no file, no PyYAML, or a YAML error: the broker still serves
        log.warning("the OpenAPI description is not available: %s", exc)
        document = {"openapi": "3.0.3", "info": {"title": "kafkalite broker API", "version": "1",
                                                 "description": f"unavailable: {exc}"}, "paths": {}}
    return json.dumps(document, separators=(",", ":")).encode("utf-8")


def build_app(services: BrokerServices) -> web.Application:
    """The aiohttp application serving the broker's API over ``services``."""
    config = services.config
    # Middlewares, outermost first: who the request comes from (a TLS client certificate, then
    # HTTP Basic on SASL listeners, which wins), the request counts, the error shape, then what
    # the principal may do (ACLs) and how fast (quotas).
    middlewares: list[Any] = [certificate_principal_middleware] if _uses_tls(config) else []
    authentication = http_auth.basic_auth_middleware(services, PRINCIPAL_KEY)  # SASL listeners: HTTP Basic
    middlewares += [stats_middleware(services.stats.requests), error_middleware]
    if authentication is not None:
        middlewares.append(authentication)
    if services.authorizer is not None:
        middlewares.append(access.http_middleware(services.authorizer, request_principal))
    middlewares.append(services.quotas.http_middleware(request_principal))  # client quotas
    app = web.Application(middlewares=middlewares, client_max_size=config.socket_request_max_bytes)
    openapi_document()  # read docs/openapi.yaml at startup, not on the first request
    app[LISTENER_PORTS_KEY] = {}
    api = BrokerApi(services)
    groups = services.groups
    routes = [
        web.get(protocol.HEALTH, api.health),
        web.get(protocol.READY, api.ready),
        web.get(protocol.METRICS, api.metrics),
        web.get(protocol.API_VERSIONS, api.api_versions),
        web.get(protocol.METADATA, api.metadata),
        web.post(protocol.METADATA, api.metadata),
        web.post(protocol.PRODUCE, api.produce),
        web.post(protocol.FETCH, api.fetch),
        web.get(protocol.CHANNEL, api.channel),
        web.post(protocol.LIST_OFFSETS, api.list_offsets),
        web.post(protocol.OFFSETS_FOR_LEADER_EPOCH, api.offsets_for_leader_epoch),
        web.post(protocol.DELETE_RECORDS, api.delete_records),
        web.post(protocol.INIT_PRODUCER_ID, txn_http.init_producer_id_route(services)),
        web.post(protocol.WRITE_TXN_MARKERS, api.write_txn_markers),
        web.post(protocol.CREATE_TOPICS, api.create_topics),
        web.post(protocol.DELETE_TOPICS, api.delete_topics),
        web.post(protocol.CREATE_PARTITIONS, api.create_partitions),
        web.post(protocol.DESCRIBE_CONFIGS, api.describe_configs),
        web.post(protocol.ALTER_CONFIGS, api.alter_configs),
        web.post(protocol.ELECT_LEADERS, api.elect_leaders),
        web.get(protocol.DESCRIBE_CLUSTER, api.describe_cluster),
        web.post(protocol.CONTROLLED_SHUTDOWN, api.controlled_shutdown),
        web.post(protocol.PARTITION_STATES, api.partition_states),
        web.post(protocol.ALTER_PARTITION_REASSIGNMENTS, api.alter_reassignments),
        web.post(protocol.LIST_PARTITION_REASSIGNMENTS, api.list_reassignments),
        web.post(protocol.TOPIC_RECORDS, api.produce_json),
        web.get(protocol.PARTITION_RECORDS, api.fetch_json),
        web.get(protocol.OPENAPI, api.openapi),
        # The group protocol: a named error other than INVALID_REQUEST is a 200 answer carrying it.
        web.post(protocol.FIND_COORDINATOR, _group_call(lambda body, request: _find_coordinator_on_listener(
            services, body, request), codec.encode_find_coordinator)),
        web.post(protocol.JOIN_GROUP, _group_call(lambda body, request: groups.join_group(
            codec.decode_join_group(body, request.remote or "")), codec.encode_join_group)),
        web.post(protocol.SYNC_GROUP, _group_call(lambda body, request: groups.sync_group(
            codec.decode_sync_group(body)), codec.encode_sync_group)),
        web.post(protocol.HEARTBEAT, _group_call(lambda body, request: groups.heartbeat(
            codec.decode_heartbeat(body)), lambda _: codec.ok())),
        web.post(protocol.LEAVE_GROUP, _group_call(lambda body, request: groups.leave_group(
            codec.decode_leave_group(body)), codec.encode_leave_group)),
        web.post(protocol.OFFSET_COMMIT, _group_call(lambda body, request: groups.offset_commit(
            codec.decode_offset_commit(body)), codec.encode_offset_commit)),
        web.post(protocol.OFFSET_FETCH, _group_call(lambda body, request: groups.offset_fetch(
            codec.decode_offset_fetch(body)), codec.encode_offset_fetch)),
        web.post(protocol.LIST_GROUPS, _group_call(lambda body, request: groups.list_groups(
            codec.decode_group_states(body)), codec.encode_list_groups)),
        web.post(protocol.DESCRIBE_GROUPS, _group_call(lambda body, request: groups.describe_groups(
            codec.decode_group_ids(body)), codec.encode_describe_groups)),
        web.post(protocol.DELETE_GROUPS, _group_call(lambda body, request: groups.delete_groups(
            codec.decode_group_ids(body)), codec.encode_delete_groups)),
    ]
    routes += txn_http.routes(services)
    routes += entity_config_http.routes(services)
    routes += acl_http.routes(services)
    app.add_routes(routes)
    app.add_routes(console.routes(services, _json_response))
    if services.registry is not None:
        app.add_subapp(REGISTRY_PREFIX, build_registry_app(services.registry, REGISTRY_PREFIX))
    app.on_shutdown.append(api.close_channels)
    return app


def _group_call(call: Callable[[dict[str, Any], web.Request], Awaitable[Any]],
                encode: Callable[[Any], dict[str, Any]]) -> Handler:
    """A group-protocol handler: decode and call (``call``), then ``encode`` the answer. Group
    requests carry Kafka's int16-length strings; a named error the service raises is answered
    with status 200 like one it returns, except INVALID_REQUEST (400, by the middleware)."""

    async def handle(request: web.Request) -> web.Response:
        body = protocol.parse_json(await access.read_body(request))
        protocol.check_string_lengths(body)
        try:
            answer = encode(await call(body, request))
        except BrokerResponseError as exc:
            if isinstance(exc, InvalidRequestError):
                raise
            answer = codec.error(exc)
        return _json_response(answer)

    return handle


class BrokerApi:
    """Request handlers (decode → service → encode)."""

    def __init__(self, services: BrokerServices) -> None:
        self.services = services
        self.config = services.config
        self._channels: set[asyncio.Task[Any]] = set()
        self._metrics = BrokerMetrics(services)

    async def health(self, request: web.Request) -> web.Response:
        return _json_response(codec.encode_health(self.services.metadata.health()))

    async def metrics(self, request: web.Request) -> web.Response:
        """Prometheus text format (:mod:`kafkalite.broker.metrics`), rendered on the loop."""
        return web.Response(body=await self._metrics.render(),
                            headers={"Content-Type": PROMETHEUS_CONTENT_TYPE})

    async def ready(self, request: web.Request) -> web.Response:
        """Readiness: 200 while the broker serves (registered in ZooKeeper with a live session,
        its metadata loaded, no log dir offline), else 503 with the reasons."""
        services = self.services
        reasons = []
        fenced = services.replicas.not_serving_reason()
        if fenced is not None:
            reasons.append(f"not serving partitions: {fenced}")
        if not services.metadata.cache.started:
            reasons.append("the metadata cache has not loaded the cluster from ZooKeeper yet")
        health = services.metadata.health()
        reasons += [f"log dir {path} is offline: {reason}" for path, reason in health.offline_log_dirs]
        return _json_response({"ready": not reasons, "broker_id": health.broker_id, "reasons": reasons},
                              status=200 if not reasons else 503)

    async def api_versions(self, request: web.Request) -> web.Response:
        routes = sorted({path for path in (info.get("path", "") or info.get("formatter", "")
                                            for info in (route.resource.get_info()
                                                         for route in request.app.router.routes()
                                                         if route.resource is not None))
                         if path and not path.startswith(REGISTRY_PREFIX + "/")})  # the registry is Confluent's API
        return _json_response({"broker_id": self.config.broker_id, "version": __version__,
                               "api_version": protocol.API_VERSION, "apis": routes})

    async def metadata(self, request: web.Request) -> web.Response:
        if request.method == "GET":
            names = request.query.get("topics")
            topics = [name for name in names.split(",") if name] if names else None
            allow = request.query.get("allow_auto_topic_creation", "false").lower() == "true"
        else:
            body = await _json_body(request)
            topics = protocol.require_list_of(body, "topics", str, None)
            allow = protocol.require(body, "allow_auto_topic_creation", bool, False)
        result = await self.services.metadata.cluster_metadata(topics, allow)
        result = dataclasses.replace(result, brokers=brokers_on_listener(self.services, request, result.brokers))
        return _json_response(result.to_json())

    async def produce(self, request: web.Request) -> web.Response:
        status, pieces = await self._produce(await _read_body(request), request)
        if status == 204:
            return web.Response(status=204)
        return web.Response(body=b"".join(pieces), content_type=protocol.BINARY_CONTENT_TYPE)

    async def fetch(self, request: web.Request) -> web.Response:
        _, pieces = await self._fetch(await _read_body(request), request)
        return web.Response(body=b"".join(pieces), content_type=protocol.BINARY_CONTENT_TYPE)

    async def _produce(self, body: bytes | memoryview, request: web.Request,
                       released: asyncio.Future[None] | None = None) -> tuple[int, list[bytes | memoryview]]:
        """Produce; ``released`` (a channel's) is completed once the batches are appended."""
        produce_request = protocol.decode_produce_request(body)
        produce_request.partitions, denied = access.authorized_partitions(request, Operation.WRITE,
                                                                          produce_request.partitions)
        appended = None if released is None else _releaser(released)
        results = await self.services.replicas.produce(produce_request, appended) \
            if produce_request.partitions else []
        await self.services.quotas.hold_http_produce(produce_request)
        results += [protocol.ProduceResult(item.topic, item.partition, TopicAuthorizationFailedError.errno)
                    for item in denied]
        if produce_request.acks == 0:
            return 204, []
        return 200, [protocol.encode_produce_response(results)]

    async def _fetch(self, body: bytes | memoryview, request: web.Request
                     ) -> tuple[int, list[bytes | bytearray | memoryview]]:
        fetch_request = protocol.decode_fetch_request(body)
        fetch_request.partitions, denied = access.authorized_partitions(request, Operation.READ,
                                                                        fetch_request.partitions,
                                                                        fetch_request.replica_id)
        if fetch_request.session is not None:
            return 200, await self._fetch_in_session(fetch_request, denied)
        results = await self.services.replicas.fetch(fetch_request) if fetch_request.partitions or not denied else []
        results = await self.services.quotas.hold_http_fetch(fetch_request, results)
        results += [protocol.FetchResult(item.topic, item.partition, TopicAuthorizationFailedError.errno)
                    for item in denied]
        return 200, protocol.encode_fetch_response(results)

    async def _fetch_in_session(self, fetch_request: protocol.FetchRequest,
                                denied: list[protocol.FetchPartition]) -> list[bytes | bytearray | memoryview]:
        """A follower's session fetch; one with partitions it may not read opens no session and is
        answered for those partitions only."""
        if denied:
            return protocol.encode_session_fetch_response(0, 0, [
                protocol.FetchResult(item.topic, item.partition, TopicAuthorizationFailedError.errno)
                for item in denied])
        try:
            session_id, results = await self.services.replicas.fetch_in_session(fetch_request)
        except (FetchSessionIdNotFoundError, InvalidFetchSessionEpochError) as exc:
            return protocol.encode_session_fetch_response(0, exc.errno, [])
        results = await self.services.quotas.hold_http_fetch(fetch_request, results)  # replication is exempt
        return protocol.encode_session_fetch_response(session_id, 0, results)

    # -- the binary channel (see kafkalite.transport.PipelinedConnection) ---------------------
    async def channel(self, request: web.Request) -> web.StreamResponse:
        """Serve produce and fetch messages on one WebSocket in order: each message starts once the
        one before it has been answered or, for a produce, once its batches are appended (the
        acks=all produces of one channel wait for replication together, at most
        :data:`MAX_WAITING_CHANNEL_ANSWERS` at a time); a writer task sends the answers in order."""
        limit = self.config.socket_request_max_bytes
        socket = web.WebSocketResponse(max_msg_size=limit + _CHANNEL_SLACK, compress=False, autoping=True)
        await socket.prepare(request)
        task = asyncio.current_task()
        if task is not None:
            self._channels.add(task)
        loop = asyncio.get_running_loop()
        answers: collections.deque[asyncio.Task[list[bytes | bytearray | memoryview]]] = collections.deque()
        answer_ready, answer_written = asyncio.Event(), asyncio.Event()
        writer = loop.create_task(_write_channel_answers(socket, request, answers, answer_ready, answer_written))
        try:
            while not writer.done():
                message = await socket.receive()
                if message.type is WSMsgType.BINARY:
                    while len(answers) >= MAX_WAITING_CHANNEL_ANSWERS and not writer.done():
                        answer_written.clear()
                        await answer_written.wait()
                    released: asyncio.Future[None] = loop.create_future()
                    call = loop.create_task(self.services.quotas.serve_timed(
                        self._channel_call(message.data, limit, request, released)))
                    call.add_done_callback(_releaser(released))
                    answers.append(call)
                    answer_ready.set()
                    await released
                elif message.type is WSMsgType.TEXT:
                    await socket.close(code=WSCloseCode.UNSUPPORTED_DATA, message=b"binary messages only")
                    break
                else:  # close, closing, closed or a protocol error (aiohttp answers it)
                    break
        except ConnectionError as exc:
            log.debug("channel client %s went away: %s", request.remote, exc)
        finally:
            pending = [writer, *answers]
            for item in pending:
                item.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
            if task is not None:
                self._channels.discard(task)
        return socket

    async def _channel_call(self, data: bytes, limit: int, request: web.Request,
                            released: asyncio.Future[None] | None = None) -> list[bytes | bytearray | memoryview]:
        started = time.perf_counter()
        name = "unknown"
        status = 500
        try:
            if len(data) < 2:
                raise InvalidRequestError("a channel message starts with a two-byte API key")
            if len(data) - 2 > limit:
                raise MessageSizeTooLargeError(f"request of {len(data) - 2} bytes exceeds "
                                               f"socket.request.max.bytes={limit}")
            api = _UINT16.unpack_from(data)[0]
            body = memoryview(data)[2:]
            pieces: Sequence[bytes | bytearray | memoryview]
            if api == _CHANNEL_PRODUCE:
                name = "produce"
                status, pieces = await self._produce(body, request, released)
            elif api == _CHANNEL_FETCH:
                name = "fetch"
                status, pieces = await self._fetch(body, request)
            else:
                raise InvalidRequestError(f"unknown channel API key {api}")
        except Exception as exc:  # every failure is answered with its named error
            error = _as_broker_error(exc, "a channel request")
            status, pieces = error.http_status, [protocol.dumps(protocol.error_body(error))]
        elapsed = time.perf_counter() - started
        self.services.stats.requests.observe(CHANNEL, name, elapsed, status >= 400)
        if request_log.isEnabledFor(logging.DEBUG):
            request_log.debug("channel %s: status %d in %.1f ms", name, status, elapsed * 1000)
        return [_UINT16.pack(status), *pieces]

    async def close_channels(self, app: web.Application) -> None:
        """On shutdown: end every channel (their clients reconnect elsewhere)."""
        tasks = list(self._channels)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def list_offsets(self, request: web.Request) -> web.Response:
        body = await _json_body(request)
        isolation = protocol.require(body, "isolation_level", int, 0)
        answers = self.services.replicas.list_offsets(codec.decode_offset_queries(body), isolation)
        return _json_response(codec.encode_offset_answers(answers))

    async def offsets_for_leader_epoch(self, request: web.Request) -> web.Response:
        body = await _json_body(request)
        answers = self.services.replicas.offsets_for_leader_epoch(codec.decode_epoch_queries(body))
        return _json_response(codec.encode_epoch_answers(answers))

    async def delete_records(self, request: web.Request) -> web.Response:
        queries, timeout_ms = codec.decode_delete_records(await _json_body(request), self.config.request_timeout_ms)
        answers = await self.services.replicas.delete_records(queries, timeout_ms)
        return _json_response(codec.encode_delete_records(answers))

    async def write_txn_markers(self, request: web.Request) -> web.Response:
        markers, timeout_ms = codec.decode_txn_markers(await _json_body(request), self.config.request_timeout_ms)
        results = await self.services.replicas.write_txn_markers(markers, timeout_ms)
        return _json_response(codec.encode_txn_markers(markers, results))

    async def create_topics(self, request: web.Request) -> web.Response:
        body = await _json_body(request)
        timeout_ms = protocol.require(body, "timeout_ms", int, self.config.request_timeout_ms)
        validate_only = protocol.require(body, "validate_only", bool, False)
        topics = codec.decode_new_topics(body)
        answers = await self.services.admin.create_topics(topics, timeout_ms, validate_only)
        return _json_response(codec.encode_created_topics(answers))

    async def delete_topics(self, request: web.Request) -> web.Response:
        body = await _json_body(request)
        names = protocol.require_list_of(body, "topics", str)
        timeout_ms = protocol.require(body, "timeout_ms", int, self.config.request_timeout_ms)
        answers = await self.services.admin.delete_topics(names, timeout_ms)
        return _json_response(codec.encode_deleted_topics(answers))

    async def create_partitions(self, request: web.Request) -> web.Response:
        body = await _json_body(request)
        timeout_ms = protocol.require(body, "timeout_ms", int, self.config.request_timeout_ms)
        answers = await self.services.admin.create_partitions(codec.decode_new_partitions(body), timeout_ms)
        return _json_response(codec.encode_created_partitions(answers))

    async def describe_configs(self, request: web.Request) -> web.Response:
        resources = codec.decode_config_resources(await _json_body(request))
        answers = await self.services.admin.describe_configs(resources)
        return _json_response(codec.encode_described_configs(resources, answers))

    async def alter_configs(self, request: web.Request) -> web.Response:
        body = await _json_body(request)
        validate_only = protocol.require(body, "validate_only", bool, False)
        resources, changes = codec.decode_config_changes(body)
        answers = await self.services.admin.alter_configs(changes, validate_only)
        return _json_response(codec.encode_altered_configs(resources, answers))

    async def elect_leaders(self, request: web.Request) -> web.Response:
        partitions = codec.decode_election(await _json_body(request))
        outcome = await self.services.controller.elect_preferred_leaders(partitions)
        return _json_response(codec.encode_election(outcome))

    async def describe_cluster(self, request: web.Request) -> web.Response:
        metadata = self.services.metadata.describe_cluster()
        brokers = brokers_on_listener(self.services, request, metadata.brokers)
        return _json_response({"cluster_id": metadata.cluster_id, "controller_id": metadata.controller_id,
                               "brokers": [broker.to_json() for broker in brokers]})

    async def controlled_shutdown(self, request: web.Request) -> web.Response:
        body = await _json_body(request)
        broker_id = protocol.require(body, "broker_id", int)
        broker_epoch = protocol.require(body, "broker_epoch", int, None)
        remaining = await self.services.controller.controlled_shutdown(broker_id, broker_epoch)
        return _json_response({"error_code": 0, "remaining_partitions": [
            {"topic": topic, "partition": partition} for topic, partition in remaining]})

    async def partition_states(self, request: web.Request) -> web.Response:
        """States another broker wrote to ZooKeeper and sends ahead of this broker's watches."""
        states = decode_states(await _json_body(request))
        return _json_response({"error_code": 0, "adopted": self.services.metadata.cache.adopt_states(states)})

    async def alter_reassignments(self, request: web.Request) -> web.Response:
        targets = codec.decode_reassignments(await _json_body(request))
        results = await self.services.admin.alter_reassignments(targets)
        return _json_response(codec.encode_reassignments(results))

    async def list_reassignments(self, request: web.Request) -> web.Response:
        await _json_body(request)
        return _json_response({"partitions": await self.services.admin.list_reassignments()})

    # -- human-friendly JSON surface ----------------------------------------------------------
    async def produce_json(self, request: web.Request) -> web.Response:
        topic = request.match_info["topic"]
        records, acks = codec.decode_records(await _json_body(request, self.config.socket_request_max_bytes))
        answers = await self.services.records.produce(topic, records, acks)
        await self.services.quotas.hold_http_record_bytes(True, sum(
            _record_size(record.key, record.value, record.headers) for record in records))
        return _json_response(codec.encode_produced(answers))

    async def fetch_json(self, request: web.Request) -> web.Response:
        topic = request.match_info["topic"]
        partition = _integer(request.match_info["partition"], "partition", 0, _INT32_MAX)
        offset = _integer(request.query.get("offset", "0"), "offset", 0, protocol.INT64_MAX)
        max_bytes = _integer(request.query.get("max_bytes", str(1024 * 1024)), "max_bytes", 0, _INT32_MAX)
        timeout_ms = _integer(request.query.get("timeout_ms", "0"), "timeout_ms", 0, MAX_JSON_FETCH_WAIT_MS)
        fetched = await self.services.records.fetch(topic, partition, offset, max_bytes, timeout_ms)
        await self.services.quotas.hold_http_record_bytes(False, sum(
            _record_size(record.key, record.value, record.headers) for record in fetched.records))
        return _json_response(codec.encode_fetched(fetched))

    async def openapi(self, request: web.Request) -> web.Response:
        return web.Response(body=openapi_document(), content_type="application/json")


_INT32_MAX = (1 << 31) - 1
_DECIMAL = re.compile(r"-?[0-9]+")
#: Longest long poll of the JSON records route (Kafka's fetch.max.wait.ms is bounded by the request timeout).
MAX_JSON_FETCH_WAIT_MS = 300_000


def _record_size(key: bytes | None, value: bytes | None, headers: Sequence[tuple[str, bytes | None]]) -> int:
    """A JSON record's bytes as quotas count them: key, value, header names and values."""
    return (len(key or b"") + len(value or b"")
            + sum(len(name) + len(header_value or b"") for name, header_value in headers))


def _integer(text: str, name: str, minimum: int, maximum: int) -> int:
    """A decimal integer from a path or query parameter, within [minimum, maximum]."""
    if len(text) > protocol.MAX_JSON_NUMBER_CHARS or not _DECIMAL.fullmatch(text):
        raise InvalidRequestError(f"{name} must be an integer, got {text[:40]!r}")
    value = int(text)
    if not minimum <= value <= maximum:
        raise InvalidRequestError(f"{name} must be between {minimum} and {maximum}, got {value}")
    return value


_LONG_BINARY_FRAME = struct.Struct("!BBQ")


def _releaser(released: asyncio.Future[None]) -> Callable[..., None]:
    """Completes ``released`` (once): called by a produce after its appends, or as a task's
    done-callback when a channel message has been answered."""
    def release(*_ignored: object) -> None:
        if not released.done():
            released.set_result(None)
    return release


async def _write_channel_answers(socket: web.WebSocketResponse, request: web.Request,
                                 answers: collections.deque[asyncio.Task[list[bytes | bytearray | memoryview]]],
                                 answer_ready: asyncio.Event, answer_written: asyncio.Event) -> None:
    """Send each started channel message's answer, in the order the messages came."""
    try:
        while True:
            if not answers:
                answer_ready.clear()
                await answer_ready.wait()
                continue
            try:
                pieces = await answers[0]
            finally:
                answers.popleft()
                answer_written.set()
            await _send_binary(socket, request, pieces)
    except ConnectionError as exc:
        log.debug("channel client %s went away: %s", request.remote, exc)
    finally:
        answer_written.set()


async def _send_binary(socket: web.WebSocketResponse, request: web.Request,
                       pieces: list[bytes | bytearray | memoryview]) -> None:
    """Send one binary WebSocket message made of ``pieces``.

    A short answer is joined and sent by aiohttp. A long one (a fetch answer of segment data) is
    framed here and written by :func:`~kafkalite.transport.write_message`, in pieces and without
    a copy. Then, as aiohttp's writer does, the sender waits while the transport's buffer is
    over its limit."""
    length = sum(len(piece) for piece in pieces)
    transport = request.transport
    if length < PIECED_MESSAGE_BYTES or transport is None:
        await socket.send_bytes(b"".join(pieces))
        return
    if transport.is_closing():
        raise ConnectionResetError("the channel's connection is closing")
    write_message(transport, _LONG_BINARY_FRAME.pack(0x80 | WSMsgType.BINARY, 127, length), pieces, length)
    protocol = request.protocol
    if protocol.writing_paused:
        await protocol._drain_helper()
