"""The broker's HTTP API on aiohttp: the only module that imports ``aiohttp.web``.

Handlers are thin: decode the request (binary frame or JSON, see :mod:`kafkalite.protocol`),
call the broker's services, encode the answer. The error middleware turns every kafkalite error
into Kafka's code and name in a JSON body with a fitting HTTP status, and every aiohttp-level
problem (unknown route, wrong method, oversize body) into the same shape, so no bad input ever
yields a bare 500 or a stack trace. Produce and fetch are also served on the binary channel
(``GET /v1/channel``, a WebSocket; see :class:`kafkalite.transport.PipelinedConnection` and
docs/protocol.md): one binary message per request, answered in order with the same frames
and error bodies.

Concurrency: handlers run on the event loop; a channel serves its messages one at a time.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import struct
from typing import TYPE_CHECKING, Any, Awaitable, Callable

from aiohttp import WSCloseCode, WSMsgType, web

from kafkalite import protocol
from kafkalite.errors import (
    BrokerResponseError,
    InvalidRequestError,
    KafkaliteError,
    MessageSizeTooLargeError,
    UnknownServerError,
)

if TYPE_CHECKING:
    from kafkalite.broker.server import Broker

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

_UINT16 = struct.Struct(">H")
_CHANNEL_PRODUCE = protocol.CHANNEL_APIS[protocol.PRODUCE]
_CHANNEL_FETCH = protocol.CHANNEL_APIS[protocol.FETCH]
_CHANNEL_SLACK = 64 * 1024  # room for the frame around a request of socket.request.max.bytes


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


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except KafkaliteError as exc:
        return _error_response(_as_broker_error(exc, f"{request.method} {request.path}"))
    except web.HTTPRequestEntityTooLarge as exc:
        return _error_response(MessageSizeTooLargeError(f"request body exceeds socket.request.max.bytes: {exc.text}"))
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return _json_response({"error_code": InvalidRequestError.errno, "error": InvalidRequestError.message,
                               "message": f"{request.method} {request.path}: {exc.reason}"}, status=exc.status)
    except Exception as exc:
        return _error_response(_as_broker_error(exc, f"{request.method} {request.path}"))


async def _read_body(request: web.Request) -> bytes:
    return await request.read()


async def _json_body(request: web.Request) -> dict[str, Any]:
    return protocol.parse_json(await _read_body(request))


def build_app(broker: "Broker") -> web.Application:
    """The aiohttp application serving ``broker``'s API."""
    app = web.Application(middlewares=[error_middleware], client_max_size=broker.config.socket_request_max_bytes)
    api = BrokerApi(broker)
    routes = [
        web.get(protocol.HEALTH, api.health),
        web.get(protocol.API_VERSIONS, api.api_versions),
        web.get(protocol.METADATA, api.metadata),
        web.post(protocol.METADATA, api.metadata),
        web.post(protocol.PRODUCE, api.produce),
        web.post(protocol.FETCH, api.fetch),
        web.get(protocol.CHANNEL, api.channel),
        web.post(protocol.LIST_OFFSETS, api.list_offsets),
        web.post(protocol.OFFSETS_FOR_LEADER_EPOCH, api.offsets_for_leader_epoch),
        web.post(protocol.INIT_PRODUCER_ID, api.init_producer_id),
        web.post(protocol.CREATE_TOPICS, api.create_topics),
        web.post(protocol.DELETE_TOPICS, api.delete_topics),
        web.post(protocol.CREATE_PARTITIONS, api.create_partitions),
        web.post(protocol.DESCRIBE_CONFIGS, api.describe_configs),
        web.post(protocol.ALTER_CONFIGS, api.alter_configs),
        web.post(protocol.ELECT_LEADERS, api.elect_leaders),
        web.get(protocol.DESCRIBE_CLUSTER, api.describe_cluster),
        web.post(protocol.CONTROLLED_SHUTDOWN, api.controlled_shutdown),
        web.post(protocol.ALTER_PARTITION_REASSIGNMENTS, api.alter_reassignments),
        web.post(protocol.LIST_PARTITION_REASSIGNMENTS, api.list_reassignments),
        web.post(protocol.TOPIC_RECORDS, api.produce_json),
        web.get(protocol.PARTITION_RECORDS, api.fetch_json),
    ]
    for route in broker.extra_routes():
        routes.append(route)
    app.add_routes(routes)
    app.on_shutdown.append(api.close_channels)
    return app


class BrokerApi:
    """Request handlers (decode → service → encode)."""

    def __init__(self, broker: "Broker") -> None:
        self.broker = broker
        self._channels: set[asyncio.Task[Any]] = set()

    async def health(self, request: web.Request) -> web.Response:
        broker = self.broker
        return _json_response({"status": "ok", "broker_id": broker.config.broker_id,
                               "controller_id": broker.metadata.controller_id,
                               "is_controller": broker.controller.active,
                               "cluster_id": broker.metadata.cluster_id,
                               "offline_log_dirs": [{"path": str(path), "reason": reason} for path, reason
                                                    in sorted(broker.log_manager.offline_dirs.items())]})

    async def api_versions(self, request: web.Request) -> web.Response:
        from kafkalite import __version__

        routes = sorted({info.get("path", "") or info.get("formatter", "")
                         for info in (route.resource.get_info() for route in request.app.router.routes()
                                      if route.resource is not None)})
        return _json_response({"broker_id": self.broker.config.broker_id, "version": __version__,
                               "api_version": protocol.API_VERSION, "apis": routes})

    async def metadata(self, request: web.Request) -> web.Response:
        if request.method == "GET":
            names = request.query.get("topics")
            topics = [name for name in names.split(",") if name] if names else None
            allow = request.query.get("allow_auto_topic_creation", "false").lower() == "true"
        else:
            body = await _json_body(request)
            topics = protocol.require(body, "topics", list, None)
            allow = bool(protocol.require(body, "allow_auto_topic_creation", bool, False))
            if topics is not None and not all(isinstance(name, str) for name in topics):
                raise InvalidRequestError("'topics' must be a list of strings")
        result = await self.broker.cluster_metadata(topics, allow)
        return _json_response(result.to_json())

    async def produce(self, request: web.Request) -> web.Response:
        status, pieces = await self._produce(await _read_body(request))
        if status == 204:
            return web.Response(status=204)
        return web.Response(body=b"".join(pieces), content_type=protocol.BINARY_CONTENT_TYPE)

    async def fetch(self, request: web.Request) -> web.Response:
        _, pieces = await self._fetch(await _read_body(request))
        return web.Response(body=b"".join(pieces), content_type=protocol.BINARY_CONTENT_TYPE)

    async def _produce(self, body: bytes | memoryview) -> tuple[int, list[bytes | memoryview]]:
        produce_request = protocol.decode_produce_request(body)
        results = await self.broker.replica_manager.produce(produce_request)
        if produce_request.acks == 0:
            return 204, []
        return 200, [protocol.encode_produce_response(results)]

    async def _fetch(self, body: bytes | memoryview) -> tuple[int, list[bytes | memoryview]]:
        fetch_request = protocol.decode_fetch_request(body)
        results = await self.broker.replica_manager.fetch(fetch_request)
        return 200, protocol.encode_fetch_response(results)

    # -- the binary channel (see kafkalite.transport.PipelinedConnection) ---------------------
    async def channel(self, request: web.Request) -> web.StreamResponse:
        """Serve produce and fetch messages on one WebSocket, one at a time, in order."""
        limit = self.broker.config.socket_request_max_bytes
        socket = web.WebSocketResponse(max_msg_size=limit + _CHANNEL_SLACK, compress=False, autoping=True)
        await socket.prepare(request)
        task = asyncio.current_task()
        if task is not None:
            self._channels.add(task)
        try:
            while True:
                message = await socket.receive()
                if message.type is WSMsgType.BINARY:
                    await socket.send_bytes(await self._channel_call(message.data, limit))
                elif message.type is WSMsgType.TEXT:
                    await socket.close(code=WSCloseCode.UNSUPPORTED_DATA, message=b"binary messages only")
                    break
                else:  # close, closing, closed or a protocol error (aiohttp answers it)
                    break
        except ConnectionError:
            pass
        finally:
            if task is not None:
                self._channels.discard(task)
        return socket

    async def _channel_call(self, data: bytes, limit: int) -> bytes:
        try:
            if len(data) < 2:
                raise InvalidRequestError("a channel message starts with a two-byte API key")
            if len(data) - 2 > limit:
                raise MessageSizeTooLargeError(f"request of {len(data) - 2} bytes exceeds "
                                               f"socket.request.max.bytes={limit}")
            api = _UINT16.unpack_from(data)[0]
            body = memoryview(data)[2:]
            if api == _CHANNEL_PRODUCE:
                status, pieces = await self._produce(body)
            elif api == _CHANNEL_FETCH:
                status, pieces = await self._fetch(body)
            else:
                raise InvalidRequestError(f"unknown channel API key {api}")
        except Exception as exc:  # every failure is answered with its named error
            error = _as_broker_error(exc, "a channel request")
            status, pieces = error.http_status, [protocol.dumps(protocol.error_body(error))]
        return b"".join([_UINT16.pack(status), *pieces])

    async def close_channels(self, app: web.Application) -> None:
        """On shutdown: end every channel (their clients reconnect elsewhere)."""
        tasks = list(self._channels)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def list_offsets(self, request: web.Request) -> web.Response:
        body = await _json_body(request)
        isolation = protocol.require(body, "isolation_level", int, 0)
        answers = []
        for item in protocol.require(body, "partitions", list):
            if not isinstance(item, dict):
                raise InvalidRequestError("each partition must be an object")
            topic = protocol.require(item, "topic", str)
            partition = protocol.require(item, "partition", int)
            timestamp = protocol.require(item, "timestamp", int, protocol.LATEST_TIMESTAMP)
            epoch = protocol.require(item, "current_leader_epoch", int, -1)
            try:
                offset, found_timestamp, leader_epoch = self.broker.replica_manager.list_offset(
                    topic, partition, timestamp, isolation, epoch)
                answers.append({"topic": topic, "partition": partition, "error_code": 0, "offset": offset,
                                "timestamp": found_timestamp, "leader_epoch": leader_epoch})
            except BrokerResponseError as exc:
                answers.append({"topic": topic, "partition": partition, "offset": -1, "timestamp": -1,
                                **protocol.error_body(exc)})
        return _json_response({"partitions": answers})

    async def offsets_for_leader_epoch(self, request: web.Request) -> web.Response:
        body = await _json_body(request)
        answers = []
        for item in protocol.require(body, "partitions", list):
            topic = protocol.require(item, "topic", str)
            partition = protocol.require(item, "partition", int)
            epoch = protocol.require(item, "leader_epoch", int)
            try:
                found_epoch, end_offset = self.broker.replica_manager.end_offset_for_epoch(topic, partition, epoch)
                answers.append({"topic": topic, "partition": partition, "error_code": 0, "leader_epoch": found_epoch,
                                "end_offset": end_offset})
            except BrokerResponseError as exc:
                answers.append({"topic": topic, "partition": partition, "leader_epoch": -1, "end_offset": -1,
                                **protocol.error_body(exc)})
        return _json_response({"partitions": answers})

    async def init_producer_id(self, request: web.Request) -> web.Response:
        await _json_body(request)
        producer_id = await self.broker.admin.next_producer_id()
        return _json_response({"producer_id": producer_id, "producer_epoch": 0})

    async def create_topics(self, request: web.Request) -> web.Response:
        body = await _json_body(request)
        return _json_response(await self.broker.create_topics(body))

    async def delete_topics(self, request: web.Request) -> web.Response:
        body = await _json_body(request)
        return _json_response(await self.broker.delete_topics(body))

    async def create_partitions(self, request: web.Request) -> web.Response:
        body = await _json_body(request)
        return _json_response(await self.broker.create_partitions(body))

    async def describe_configs(self, request: web.Request) -> web.Response:
        body = await _json_body(request)
        return _json_response(await self.broker.describe_configs(body))

    async def alter_configs(self, request: web.Request) -> web.Response:
        body = await _json_body(request)
        return _json_response(await self.broker.alter_configs(body))

    async def elect_leaders(self, request: web.Request) -> web.Response:
        body = await _json_body(request)
        return _json_response(await self.broker.elect_leaders(body))

    async def describe_cluster(self, request: web.Request) -> web.Response:
        metadata = self.broker.metadata.cluster_metadata([])
        return _json_response({"cluster_id": metadata.cluster_id, "controller_id": metadata.controller_id,
                               "brokers": [broker.to_json() for broker in metadata.brokers]})

    async def controlled_shutdown(self, request: web.Request) -> web.Response:
        body = await _json_body(request)
        broker_id = protocol.require(body, "broker_id", int)
        broker_epoch = protocol.require(body, "broker_epoch", int, -1)
        remaining = await self.broker.controller.controlled_shutdown(broker_id, broker_epoch)
        return _json_response({"error_code": 0, "remaining_partitions": [
            {"topic": topic, "partition": partition} for topic, partition in remaining]})

    async def alter_reassignments(self, request: web.Request) -> web.Response:
        body = await _json_body(request)
        targets: dict[tuple[str, int], list[int]] = {}
        for item in protocol.require(body, "partitions", list):
            if not isinstance(item, dict):
                raise InvalidRequestError("each partition must be an object")
            replicas = protocol.require(item, "replicas", list, None)
            if replicas is None:
                raise InvalidRequestError("cancelling a reassignment is not supported; give target replicas")
            if not all(isinstance(broker, int) and not isinstance(broker, bool) for broker in replicas):
                raise InvalidRequestError("replicas must be broker ids")
            targets[(protocol.require(item, "topic", str), protocol.require(item, "partition", int))] = replicas
        results = await self.broker.admin.alter_reassignments(targets)
        answers = []
        for (topic, partition), error in results.items():
            entry: dict[str, Any] = {"topic": topic, "partition": partition, "error_code": 0}
            if isinstance(error, BrokerResponseError):
                entry.update(protocol.error_body(error))
            answers.append(entry)
        return _json_response({"partitions": answers})

    async def list_reassignments(self, request: web.Request) -> web.Response:
        await _json_body(request)
        return _json_response({"partitions": await self.broker.admin.list_reassignments()})

    # -- human-friendly JSON surface ----------------------------------------------------------
    async def produce_json(self, request: web.Request) -> web.Response:
        topic = request.match_info["topic"]
        body = await _json_body(request)
        records = protocol.require(body, "records", list)
        acks = protocol.parse_acks(body.get("acks", "all"))
        decoded = []
        for index, record in enumerate(records):
            if not isinstance(record, dict):
                raise InvalidRequestError(f"record {index} must be an object")
            decoded.append({
                "key": _payload(record, "key", index),
                "value": _payload(record, "value", index),
                "partition": protocol.require(record, "partition", int, None),
                "headers": _headers(record, index),
            })
        offsets = await self.broker.produce_records(topic, decoded, acks)
        return _json_response({"offsets": offsets})

    async def fetch_json(self, request: web.Request) -> web.Response:
        topic = request.match_info["topic"]
        try:
            partition = int(request.match_info["partition"])
            offset = int(request.query.get("offset", "0"))
            max_bytes = int(request.query.get("max_bytes", str(1024 * 1024)))
            timeout_ms = int(request.query.get("timeout_ms", "0"))
        except ValueError:
            raise InvalidRequestError("partition, offset, max_bytes and timeout_ms must be integers") from None
        result = await self.broker.fetch_records(topic, partition, offset, max_bytes, timeout_ms)
        return _json_response(result)


def _payload(record: dict[str, Any], name: str, index: int) -> bytes | None:
    if f"{name}_b64" in record and record[f"{name}_b64"] is not None:
        try:
            return base64.b64decode(str(record[f"{name}_b64"]), validate=True)
        except ValueError:
            raise InvalidRequestError(f"record {index}: {name}_b64 is not valid base64") from None
    value = record.get(name)
    if value is None:
        return None
    if isinstance(value, str):
        return value.encode("utf-8")
    return protocol.dumps(value)


def _headers(record: dict[str, Any], index: int) -> list[tuple[str, bytes | None]]:
    headers = record.get("headers") or {}
    if not isinstance(headers, dict):
        raise InvalidRequestError(f"record {index}: headers must be an object of strings")
    return [(str(name), None if value is None else str(value).encode("utf-8")) for name, value in headers.items()]


def render_payload(data: bytes | None, name: str) -> dict[str, Any]:
    """A key or value for JSON: text when UTF-8, else base64 under ``<name>_b64``."""
    if data is None:
        return {name: None}
    try:
        return {name: data.decode("utf-8")}
    except UnicodeDecodeError:
        return {f"{name}_b64": base64.b64encode(data).decode("ascii")}
