"""One Kafka-protocol connection: frames in, requests served strictly in order, frames out.

A :class:`KafkaConnection` is the asyncio protocol of a connection the listener recognised as
Kafka's (see :mod:`kafkalite.broker.listener`). It cuts the byte stream into size-prefixed
frames, refusing a frame larger than ``socket.request.max.bytes`` by closing the connection
(Kafka's behaviour), and serves them in arrival order, so pipelining clients get their answers
in order. A request starts once the one before it has been answered or has released the
connection early (:meth:`~kafkalite.broker.kafka.context.KafkaRequestContext.release_next_request`:
Produce does so once its batches are appended, so the acks=all requests of one connection wait
for replication together instead of one after another, at most :data:`MAX_WAITING_ANSWERS` at a
time); a writer task sends the answers in arrival order. Each request: read the header, look the API up in the
:class:`~kafkalite.broker.kafka.registry.ApiRegistry`, parse the body with kio, call the
handler, build the response of the negotiated version and write it.

Kafka's answers to bad input: an ApiVersions request of a version the broker does not serve is
answered UNSUPPORTED_VERSION in the v0 layout with the supported ranges; any other unknown API
key or version, and a request that does not parse, closes the connection (logged at INFO,
without a traceback). A handler's named error is answered with its code, at the top level when the
response has an ``error_code`` there and on every item the request named (see
:func:`~kafkalite.broker.kafka.codec.error_answer`); an unexpected exception is logged at ERROR once and answered
UNKNOWN_SERVER_ERROR.

Back-pressure: reading pauses while requests wait to be served (more than
:data:`MAX_QUEUED_REQUESTS`, or more than ``socket.request.max.bytes`` of whole requests; the
unfinished frame is bounded by that size on its own and never holds reading paused), and the next
response is written only while the transport's write buffer is under its high-water mark, so a
client that does not read its answers stops being read from instead of growing buffers.

Concurrency: event-loop only; per connection one serving task, which starts each request's task
in turn, and one writer task.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import logging
import struct
import time
from collections.abc import Callable
from typing import Any, cast

from kafkalite.broker.kafka import access, codec
from kafkalite.broker.kafka.context import (
    NO_RESPONSE,
    EncodedAnswer,
    KafkaAnswer,
    KafkaRequestContext,
    ServingOrder,
)
from kafkalite.broker.kafka.registry import ApiRegistry
from kafkalite.broker.kafka.sasl_session import PRE_AUTHENTICATION_APIS, SaslSession
from kafkalite.broker.quotas import LoopTimer
from kafkalite.broker.services import BrokerServices
from kafkalite.broker.stats import KAFKA
from kafkalite.errors import BrokerResponseError, KafkaliteError, UnsupportedVersionError
from kafkalite.security.principal import ANONYMOUS, KafkaPrincipal
from kafkalite.security.sasl_config import sasl_settings

log = logging.getLogger(__name__)
#: one line per request at DEBUG (``--log-level DEBUG``), shared by every front end
request_log = logging.getLogger("kafkalite.broker.requests")

_SIZE = struct.Struct(">i")
#: Requests read ahead of the one being served before reading pauses.
MAX_QUEUED_REQUESTS = 64
#: Requests started and not yet answered (released early, e.g. acks=all produce waiting for
#: replication) before the connection starts no more until the oldest is answered.
MAX_WAITING_ANSWERS = 32


@dataclasses.dataclass(frozen=True, slots=True)
class _Answer:
    """What the writer sends for one request: its response frame (None: no response), the
    throttle time it carries, and the reason to close the connection after it (SASL failures)."""

    frame: bytes | None
    throttle_ms: int = 0
    close_reason: str | None = None


def _releaser(released: asyncio.Future[None]) -> Callable[[asyncio.Task[_Answer]], None]:
    """A done-callback that releases the connection's next request when a request ends."""
    def release(_task: asyncio.Task[_Answer]) -> None:
        if not released.done():
            released.set_result(None)
    return release


class CloseConnection(Exception):
    """Kafka's answer to this request is to close the connection (the message says why)."""


class KafkaConnection(asyncio.Protocol):
    """The Kafka protocol on one accepted connection (see the module docstring)."""

    def __init__(self, services: BrokerServices, registry: ApiRegistry,
                 connections: set[KafkaConnection], listener_name: str = "PLAINTEXT") -> None:
        self.services = services
        self.listener_name = listener_name
        self.registry = registry
        self.max_request_bytes = services.config.socket_request_max_bytes
        self._connections = connections
        self._transport: asyncio.Transport | None = None
        self._peer = "?"
        self._buffer = bytearray()
        self._frames: collections.deque[bytes] = collections.deque()
        self._queued_bytes = 0
        self._frame_ready = asyncio.Event()
        self._writable = asyncio.Event()
        self._writable.set()
        self._reading_paused = False
        self._task: asyncio.Task[None] | None = None
        self._writer: asyncio.Task[None] | None = None
        #: The started requests not yet answered, oldest first (the writer takes them in order).
        self._answers: collections.deque[asyncio.Task[_Answer]] = collections.deque()
        self._answer_ready = asyncio.Event()
        self._answer_written = asyncio.Event()
        #: Set while a throttled answer's mute holds the connection (KIP-219): no request starts.
        self._unmuted = asyncio.Event()
        self._unmuted.set()
        #: Who this connection authenticated as; every request's context carries it.
        self.principal: KafkaPrincipal = ANONYMOUS
        #: The security protocol of the listener the connection came in on.
        self.security_protocol = services.config.security_protocol(listener_name)
        #: SASL state on a SASL listener: nothing but ApiVersions and SASL is served before it authenticates.
        self.sasl: SaslSession | None = SaslSession(sasl_settings(services.config.sasl_properties).enabled_mechanisms(
            listener_name)) if self.security_protocol.startswith("SASL_") else None

    # -- asyncio.Protocol ----------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's transports are not subclasses
        peer = transport.get_extra_info("peername")
        self._peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) and len(peer) >= 2 else str(peer)
        self._connections.add(self)
        loop = asyncio.get_running_loop()
        self._task = loop.create_task(self._serve_frames())
        self._writer = loop.create_task(self._write_answers())

    def data_received(self, data: bytes) -> None:
        buffer = self._buffer
        buffer += data
        start = 0
        while len(buffer) - start >= 4:
            (size,) = _SIZE.unpack_from(buffer, start)
            if size < 0 or size > self.max_request_bytes:
                log.info("closing Kafka connection from %s: a request of %d bytes exceeds "
                         "socket.request.max.bytes=%d", self._peer, size, self.max_request_bytes)
                self.close()
                return
            end = start + 4 + size
            if len(buffer) < end:
                break
            self._frames.append(bytes(buffer[start + 4:end]))
            self._queued_bytes += size
            start = end
        if start:
            del buffer[:start]
            self._frame_ready.set()
        if not self._reading_paused and (len(self._frames) > MAX_QUEUED_REQUESTS
                                         or self._queued_bytes > self.max_request_bytes):
            self._reading_paused = True
            if self._transport is not None:
                self._transport.pause_reading()

    def eof_received(self) -> bool | None:
        return None  # close our side too: pipelined requests still queued are abandoned, like Kafka

    def connection_lost(self, exc: Exception | None) -> None:
        self._connections.discard(self)
        self._cancel_tasks()
        self._writable.set()

    def _cancel_tasks(self) -> list[asyncio.Task[Any]]:
        tasks: list[asyncio.Task[Any]] = [task for task in (self._task, self._writer) if task is not None]
        tasks += self._answers
        for task in tasks:
            task.cancel()
        return tasks

    def pause_writing(self) -> None:
        self._writable.clear()

    def resume_writing(self) -> None:
        self._writable.set()

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()

    async def stop(self) -> None:
        """Close the connection and wait for its serving, writing and request tasks to end."""
        self.close()
        await asyncio.gather(*self._cancel_tasks(), return_exceptions=True)

    # -- serving -------------------------------------------------------------------------------
    async def _serve_frames(self) -> None:
        """Start each request in arrival order, the next once the current one released the
        connection (or was answered); the writer sends the answers."""
        transport = self._transport
        assert transport is not None
        loop = asyncio.get_running_loop()
        while not transport.is_closing():
            if not self._frames:
                self._frame_ready.clear()
                await self._frame_ready.wait()
                continue
            if len(self._answers) >= MAX_WAITING_ANSWERS:
                self._answer_written.clear()
                await self._answer_written.wait()
                continue
            if not self._unmuted.is_set():
                await self._unmuted.wait()
                continue
            frame = self._frames.popleft()
            self._queued_bytes -= len(frame)
            if self._reading_paused and len(self._frames) <= MAX_QUEUED_REQUESTS // 2 \
                    and self._queued_bytes <= self.max_request_bytes // 2:
                self._reading_paused = False
                transport.resume_reading()
            released: asyncio.Future[None] = loop.create_future()
            task = loop.create_task(self.serve(frame, ServingOrder(released)))
            task.add_done_callback(_releaser(released))
            self._answers.append(task)
            self._answer_ready.set()
            await released
            if task.done() and not task.cancelled() and task.exception() is not None:
                return  # the writer closes the connection when it reaches this request

    async def _write_answers(self) -> None:
        """Write each started request's answer in arrival order; close the connection on a
        request whose answer is to close it."""
        transport = self._transport
        assert transport is not None
        answers = self._answers
        try:
            while True:
                if not answers:
                    self._answer_ready.clear()
                    await self._answer_ready.wait()
                    continue
                try:
                    answer = await answers[0]
                finally:
                    answers.popleft()
                    self._answer_written.set()
                if answer.frame is not None:
                    await self._writable.wait()
                    if transport.is_closing():
                        return
                    transport.write(answer.frame)
                if answer.close_reason is not None:
                    raise CloseConnection(answer.close_reason)
                if answer.throttle_ms > 0:  # KIP-219: mute the connection after a throttled answer
                    await self._mute(transport, answer.throttle_ms)
        except CloseConnection as exc:
            log.info("closing Kafka connection from %s: %s", self._peer, exc)
            transport.close()
        except asyncio.CancelledError:
            raise
        except Exception:
            log.error("unexpected failure serving Kafka connection from %s", self._peer, exc_info=True)
            transport.close()

    async def _mute(self, transport: asyncio.Transport, throttle_ms: int) -> None:
        """Stop reading for ``throttle_ms`` and start no request meanwhile (Kafka's muted channel)."""
        was_paused = self._reading_paused
        if not was_paused:
            self._reading_paused = True
            transport.pause_reading()
        self._unmuted.clear()
        try:
            await asyncio.sleep(throttle_ms / 1000)
        finally:
            self._unmuted.set()
        if not was_paused and not transport.is_closing():
            self._reading_paused = False
            transport.resume_reading()

    async def serve(self, frame: bytes, order: ServingOrder | None = None) -> _Answer:
        """The answer to one request frame (its frame is None for no response, as for acks=0
        produce); raises :class:`CloseConnection` when Kafka's answer is to close. ``order`` is
        released by a handler that lets the next request start before it answers."""
        try:
            api_key, api_version, correlation_id = codec.read_header_prefix(frame)
        except BrokerResponseError as exc:
            raise CloseConnection(str(exc)) from None
        handler = self.registry.lookup(api_key, api_version)
        if handler is None:
            if api_key == codec.API_VERSIONS_KEY:
                log.info("ApiVersions v%d from %s is not supported: answering with the supported versions",
                         api_version, self._peer)
                return _Answer(self._encode(codec.API_VERSIONS_KEY, 0, correlation_id, {
                    "error_code": UnsupportedVersionError.errno, "api_keys": self.registry.version_ranges()}))
            raise CloseConnection(f"API key {api_key} version {api_version} is not supported")
        if self.sasl is not None and not self.sasl.authenticated and api_key not in PRE_AUTHENTICATION_APIS:
            raise CloseConnection(f"API key {api_key} before SASL authentication")
        request_class = codec.request_class(api_key, api_version)
        assert request_class is not None  # the registry checks every served version has one
        quotas = self.services.quotas
        timed = quotas.enabled and api_key not in PRE_AUTHENTICATION_APIS  # exempt from the request quota
        decoding = time.perf_counter()
        try:
            header = codec.read_request_header(frame, request_class.__flexible__)
            request = codec.parse_request(frame, header, request_class)
        except BrokerResponseError as exc:
            raise CloseConnection(f"API key {api_key} v{api_version}: {exc}") from None
        context = KafkaRequestContext(self.services, api_key, api_version, correlation_id, header.client_id,
                                      self._peer.rsplit(":", 1)[0], self.listener_name, self.principal,
                                      self.security_protocol, self.sasl, order)
        answer: KafkaAnswer
        started = time.perf_counter()
        failed = True
        timer: LoopTimer[KafkaAnswer] | None = None
        try:
            authorizer = self.services.authorizer
            call = (handler.handle(context, request) if authorizer is None else
                    access.serve_kafka(authorizer, handler.handle, context, request))
            if timed:
                timer = LoopTimer(call)
                answer = await timer
            else:
                answer = await call
            failed = False
        except BrokerResponseError as exc:
            log.debug("API key %d v%d from %s answered %s", api_key, api_version, self._peer, exc)
            answer = codec.error_answer(api_key, api_version, request, exc.errno, str(exc))
        except KafkaliteError as exc:
            log.warning("API key %d v%d from %s failed: %s", api_key, api_version, self._peer, exc)
            answer = codec.error_answer(api_key, api_version, request, -1, str(exc))
        except (asyncio.CancelledError, CloseConnection):
            raise
        except Exception:
            log.error("unexpected failure serving API key %d v%d from %s", api_key, api_version, self._peer,
                      exc_info=True)
            answer = codec.error_answer(api_key, api_version, request, -1, None)
        if self.sasl is not None:  # SASL: the principal it authenticated; a failure is answered, then closes
            self.principal = self.sasl.principal
            if self.sasl.close_reason is not None:
                return _Answer(self._encode(api_key, api_version, correlation_id, answer),
                               close_reason=self.sasl.close_reason)
        elapsed = time.perf_counter() - started
        if timer is not None and getattr(request, "replica_id", -1) < 0:  # follower fetches are exempt
            throttle_ms = quotas.record_request_time(self.principal, header.client_id,
                                                     timer.seconds + (started - decoding))
            if throttle_ms > 0:
                if answer is NO_RESPONSE:  # nothing carries it: hold the connection instead
                    await quotas.mute(throttle_ms)
                else:
                    current = int(answer.get("throttle_time") or answer.get("throttle_time_ms") or 0)
                    answer = {**answer, "throttle_time": max(current, throttle_ms)}
        self.services.stats.requests.observe(KAFKA, self.registry.names[api_key], elapsed, failed)
        if request_log.isEnabledFor(logging.DEBUG):
            request_log.debug("kafka %s v%d from %s (client %s): %s in %.1f ms", self.registry.names[api_key],
                              api_version, self._peer, header.client_id, "failed" if failed else "answered",
                              elapsed * 1000)
        if answer is NO_RESPONSE:
            return _Answer(None)
        throttle_ms = int(answer.get("throttle_time") or answer.get("throttle_time_ms") or 0)
        return _Answer(self._encode(api_key, api_version, correlation_id, answer), throttle_ms)

    @staticmethod
    def _encode(api_key: int, api_version: int, correlation_id: int, answer: KafkaAnswer) -> bytes:
        if isinstance(answer, EncodedAnswer):
            return codec.frame_response_body(api_key, api_version, correlation_id, answer.body)
        response: Any = codec.build_response(api_key, api_version, answer)
        return codec.encode_response(api_key, api_version, correlation_id, response)
