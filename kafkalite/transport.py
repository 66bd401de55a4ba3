"""Transport to brokers: the only module that uses aiohttp's client half.

Two ways to talk to a broker, both returning response bytes for 2xx answers and raising
kafkalite errors otherwise (a JSON error body becomes the named broker error, e.g.
``NOT_LEADER_OR_FOLLOWER`` → NotLeaderForPartitionError; connection and protocol failures
become KafkaConnectionError; a timeout KafkaTimeoutError). No aiohttp exception leaves this
module.

* :meth:`AsyncTransport.request` / :meth:`AsyncTransport.request_json` — one pooled aiohttp
  session (keep-alive connections, several requests in flight per broker) for the JSON calls:
  metadata, offsets, admin.
* :class:`PipelinedConnection` (from :meth:`AsyncTransport.connection`) — the hot paths,
  produce and fetch (clients and follower replicas). One binary channel per (broker, channel
  name): a WebSocket on ``/v1/channel`` carrying one binary message per request and one per
  answer, so a request costs the broker a frame instead of an HTTP request (parsing, routing,
  response headers). Requests are *pipelined*: written back to back without waiting, answers
  matched in order. The broker serves the requests of one channel one after another, in the
  order written — the property Kafka's producer relies on to keep up to five batches of a
  partition in flight without reordering. Writing is synchronous
  (:meth:`PipelinedConnection.submit`), so the order of ``submit`` calls is the order on the
  wire. A request that times out closes the connection (every request still on it fails with
  KafkaConnectionError), as Kafka's clients disconnect on a request timeout; the next request
  opens a new connection.

Per broker address the transport also keeps what a client needs to pick a broker and to avoid
waiting on a dead one, as Kafka's NetworkClient does: whether a pipelined connection is open,
how many requests are in flight (:meth:`AsyncTransport.in_flight`), and when the address last
failed (a refused or timed-out connect, a request timeout, a lost connection; cleared by the
next answer) — :meth:`AsyncTransport.failed_at`. :meth:`AsyncTransport.ready` returns an open
connection without waiting, or starts opening one in the background and returns None, so a
caller that serves several brokers (the producer's sender) never blocks on one that does not
answer.

With an ``ssl_context`` every connection is TLS: ``https://`` for the JSON calls and the
channel's WebSocket over TLS (``wss://``, through :mod:`kafkalite.security.tls_stream`, which
decrypts what arrives straight into the channel's buffers), with the context's certificate and
host-name checks; a failed handshake is a KafkaConnectionError, never a fallback to plain TCP.

Concurrency: one AsyncTransport per event loop; coroutines and callbacks on that loop only.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import logging
import os
import ssl
import struct
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, cast

import aiohttp

from kafkalite import protocol
from kafkalite.errors import (
    BrokerResponseError,
    KafkaConnectionError,
    KafkaliteError,
    KafkaTimeoutError,
    MessageSizeTooLargeError,
    SaslAuthenticationFailedError,
    UnknownServerError,
)
from kafkalite.security.tls_stream import open_tls_connection

log = logging.getLogger(__name__)

Piece = bytes | bytearray | memoryview
#: An answer's body: bytes, or a read-only view of a large answer's own buffer.
Body = bytes | memoryview

_MAX_HEADER_BYTES = 64 * 1024
#: The buffer the socket reads into while no large payload is being read (holds a whole
#: response head of _MAX_HEADER_BYTES and any frame smaller than _DIRECT_PAYLOAD_BYTES).
_SCRATCH_BYTES = 256 * 1024
#: A frame payload at least this large that has not fully arrived is read into its own buffer.
_DIRECT_PAYLOAD_BYTES = 64 * 1024
_WEBSOCKET_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
_ZERO_MASK = b"\x00\x00\x00\x00"
_OPCODE_CONTINUATION = 0x0
_OPCODE_BINARY = 0x2
_OPCODE_CLOSE = 0x8
_OPCODE_PING = 0x9
_OPCODE_PONG = 0xA
_CLOSE_MESSAGE_TOO_BIG = 1009
_U16 = struct.Struct(">H")
#: Messages at least this long are written in slices of PIECE_BYTES (see write_message).
PIECED_MESSAGE_BYTES = 64 * 1024
PIECE_BYTES = 256 * 1024
_U64 = struct.Struct(">Q")
_HEAD_SHORT = struct.Struct(">BB")
_HEAD_MEDIUM = struct.Struct(">BBH")
_HEAD_LONG = struct.Struct(">BBQ")
_MAX_FRAME_BYTES = 1 << 31
_RECONNECT_BACKOFF_S = 0.05
_RECONNECT_BACKOFF_MAX_S = 1.0
#: How long closing the transport waits for its sockets to close.
_CLOSE_WAIT_S = 2.0


def basic_authorization(user: str, password: str) -> str:
    """The ``Authorization`` header value of HTTP Basic credentials."""
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode("ascii")


class PipelinedConnection(asyncio.BufferedProtocol):
    """One binary channel (a WebSocket on ``/v1/channel``) with pipelined requests.

    A request is one binary message: the channel API key (``protocol.CHANNEL_APIS``, uint16)
    and the request frame; its answer is one binary message: an HTTP-style status (uint16) and
    the response frame (or a JSON error body). The broker answers a channel's requests one by
    one in the order written, so answers are matched to requests in order.

    Frames sent are masked with the all-zero key: a conforming frame whose payload goes on the
    wire unchanged, so request pieces (record batches) are written without a copy. The masking
    rule guards HTTP intermediaries against scripts in browsers; this client talks to brokers
    directly.

    Reading is buffered (:class:`asyncio.BufferedProtocol`): the socket (or the TLS layer's
    decryption) writes into a scratch buffer where small frames are parsed, and the rest of a
    payload of ``_DIRECT_PAYLOAD_BYTES`` or more (a fetch answer) is read straight into a
    buffer of its own, so a large answer is never copied between its arrival and the caller.
    Such an answer's body is a memoryview of that buffer; small answers' bodies are bytes.
    """

    def __init__(self, address: str, request_timeout_ms: int, client_id: str,
                 on_timeout: Callable[[str], None] | None = None, authorization: str | None = None) -> None:
        self.address = address
        #: The ``Authorization`` header of the channel's opening (HTTP Basic on SASL listeners).
        self._authorization = authorization
        self.request_timeout_ms = request_timeout_ms
        self._client_id = client_id
        self._on_request_timeout = on_timeout
        self._key = base64.b64encode(os.urandom(16))
        self._transport: asyncio.Transport | None = None
        # (answer future, timeout handle, monotonic time the request was written)
        self._pending: deque[tuple[asyncio.Future[tuple[int, Body]], asyncio.TimerHandle | None, float]] = deque()
        self.last_received = time.monotonic()
        # unparsed bytes at the front of the scratch buffer (see the class docstring)
        self._scratch = bytearray(_SCRATCH_BYTES)
        self._filled = 0
        self._upgraded = False
        self._handshake: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        #: Done once the socket is gone (``connection_lost``).
        self.lost: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        # a large payload read straight into its own buffer: the buffer, the bytes in it so far
        # and the first byte of its frame
        self._payload: memoryview | None = None
        self._payload_filled = 0
        self._payload_first = 0
        self._fragments: list[bytes] = []
        self._write_paused = False
        self._drain_waiters: list[asyncio.Future[None]] = []
        self.closed = False
        self.close_reason = ""

    # -- asyncio.Protocol ---------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = stream = cast(asyncio.Transport, transport)  # a stream connection's transport
        authorization = f"Authorization: {self._authorization}\r\n" if self._authorization else ""
        stream.write((
            f"GET {protocol.CHANNEL} HTTP/1.1\r\nHost: {self.address}\r\nUser-Agent: kafkalite/{self._client_id}\r\n"
            f"Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n{authorization}"
            f"Sec-WebSocket-Key: {self._key.decode('ascii')}\r\n\r\n").encode("latin-1"))

    def connection_lost(self, exc: Exception | None) -> None:
        reason = f"connection to {self.address} lost" + (f": {exc}" if exc else "")
        self._shut(self.close_reason or reason)
        if not self.lost.done():
            self.lost.set_result(None)

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        waiters, self._drain_waiters = self._drain_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._payload is not None:
            return self._payload[self._payload_filled:]
        return memoryview(self._scratch)[self._filled:]

    def buffer_updated(self, nbytes: int) -> None:
        self.last_received = time.monotonic()
        try:
            if self._payload is not None:
                self._payload_filled += nbytes
                if self._payload_filled == len(self._payload):
                    self._finish_payload()
                return
            self._filled += nbytes
            self._parse()
        except KafkaConnectionError as exc:
            self.close(str(exc))

    def eof_received(self) -> bool | None:
        return None

    async def wait_ready(self, timeout: float) -> None:
        """Wait for the broker to accept the channel (the WebSocket handshake)."""
        try:
            await asyncio.wait_for(asyncio.shield(self._handshake), timeout)
        except TimeoutError:
            self.close(f"{self.address} did not open a channel within {timeout:.1f} s")
            raise KafkaConnectionError(f"connecting to {self.address} timed out") from None
        except BaseException:  # cancelled (the client is closing) or refused: the socket goes too
            self.close(f"the channel to {self.address} was not opened")
            raise

    # -- requests -----------------------------------------------------------------------------
    def submit(self, path: str, pieces: Sequence[Piece], *,
               timeout_ms: int | None = None) -> asyncio.Future[tuple[int, Body]]:
        """Write one request now; the future gets (status, body) when its answer arrives."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[tuple[int, Body]] = loop.create_future()
        transport = self._transport
        if self.closed or transport is None or transport.is_closing() or not self._upgraded:
            future.set_exception(KafkaConnectionError(f"connection to {self.address} is closed"))
            return future
        api = protocol.CHANNEL_APIS.get(path)
        if api is None:
            future.set_exception(KafkaConnectionError(f"{path} is not served on the binary channel"))
            return future
        length = 2
        for piece in pieces:
            length += len(piece)
        timeout = (timeout_ms if timeout_ms is not None else self.request_timeout_ms) / 1000
        handle = loop.call_later(timeout, self._on_timeout, future, timeout) if timeout > 0 else None
        self._pending.append((future, handle, time.monotonic()))
        write_message(transport, _frame_head(_OPCODE_BINARY, length) + _U16.pack(api), pieces, length)
        return future

    async def request(self, path: str, pieces: Sequence[Piece], *, timeout_ms: int | None = None) -> Body:
        """Submit and wait; a 2xx answer's body, else the named error."""
        status, body = await self.submit(path, pieces, timeout_ms=timeout_ms)
        if 200 <= status < 300:
            return body
        raise _error_from(status, body)

    async def drain(self) -> None:
        """Wait while the socket's write buffer is above its high-water mark."""
        if self._write_paused and not self.closed:
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._drain_waiters.append(waiter)
            await waiter

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    def silent_for(self, now: float) -> float:
        """Seconds the broker has sent nothing while a request was waiting for its answer
        (0 when nothing is in flight): how long a broker that may be frozen has been quiet."""
        if not self._pending:
            return 0.0
        return max(0.0, now - max(self.last_received, self._pending[0][2]))

    @property
    def usable(self) -> bool:
        return not self.closed and self._upgraded and self._transport is not None \
            and not self._transport.is_closing()

    def close(self, reason: str = "closed by the client") -> None:
        if not self.close_reason:
            self.close_reason = reason
        if self._transport is not None and not self._transport.is_closing():
            self._transport.close()
        self._shut(reason)

    def abort(self) -> None:
        """Drop the socket at once if it is still open (no TLS goodbye)."""
        if self._transport is not None and not self.lost.done():
            self._transport.abort()

    # -- internals ----------------------------------------------------------------------------
    def _shut(self, reason: str, first_error: KafkaliteError | None = None) -> None:
        self.closed = True
        if not self._handshake.done():
            self._handshake.set_exception(KafkaConnectionError(reason))
            self._handshake.exception()  # retrieved: wait_ready re-raises it
        pending, self._pending = self._pending, deque()
        for future, handle, _ in pending:
            if handle is not None:
                handle.cancel()
            if not future.done():
                future.set_exception(first_error or KafkaConnectionError(reason))
            first_error = None
        self.resume_writing()

    def _on_timeout(self, future: asyncio.Future[tuple[int, Body]], timeout: float) -> None:
        if not future.done():
            future.set_exception(KafkaTimeoutError(f"request to {self.address} timed out after {timeout:.1f} s"))
            self.close(f"a request to {self.address} timed out after {timeout:.1f} s")
            if self._on_request_timeout is not None:
                self._on_request_timeout(self.address)

    def _deliver(self, status: int, body: Body) -> None:
        if not self._pending:
            raise KafkaConnectionError(f"{self.address} sent an answer nobody asked for")
        future, handle, _ = self._pending.popleft()
        if handle is not None:
            handle.cancel()
        if not future.done():
            future.set_result((status, body))

    def _parse(self) -> None:
        """Parse what the scratch buffer holds: the handshake's answer, then whole frames; the
        start of a large payload moves to a buffer of its own, an incomplete small frame stays
        at the front of the scratch buffer until the rest arrives."""
        data, size = self._scratch, self._filled
        view = memoryview(data)
        position = 0
        if not self._upgraded:
            end = data.find(b"\r\n\r\n", 0, size)
            if end < 0:
                if size > _MAX_HEADER_BYTES:
                    raise KafkaConnectionError(f"{self.address} sent an oversized response head")
                return
            self._check_handshake(bytes(view[:end]))
            position = end + 4
        while size - position >= 2:
            first, second = data[position], data[position + 1]
            if second & 0x80:
                raise KafkaConnectionError(f"{self.address} sent a masked frame")
            length = second & 0x7F
            start = position + 2
            if length == 126:
                if size - position < 4:
                    break
                length = _U16.unpack_from(data, start)[0]
                start += 2
            elif length == 127:
                if size - position < 10:
                    break
                length = _U64.unpack_from(data, start)[0]
                start += 8
                if length > _MAX_FRAME_BYTES:
                    raise KafkaConnectionError(f"{self.address} announced a frame of {length} bytes")
            end = start + length
            if end > size:
                if length >= _DIRECT_PAYLOAD_BYTES:
                    payload = memoryview(bytearray(length))
                    payload[:size - start] = view[start:size]
                    self._payload, self._payload_filled, self._payload_first = payload, size - start, first
                    position = size
                break
            if first == 0x80 | _OPCODE_BINARY and length >= 2 and not self._fragments:
                self._deliver(_U16.unpack_from(data, start)[0], bytes(view[start + 2:end]))
            else:
                self._frame(first, bytes(view[start:end]))
            position = end
        rest = size - position
        if rest and position:
            data[:rest] = data[position:size]
        self._filled = rest

    def _check_handshake(self, head: bytes) -> None:
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ", 2)
        if len(parts) >= 2 and parts[1] == "401":  # a SASL listener refused the credentials: not worth a retry
            failure = SaslAuthenticationFailedError(f"{self.address} refused the binary channel's credentials "
                                                    "(HTTP Basic: sasl_plain_username / sasl_plain_password)")
            if not self._handshake.done():
                self._handshake.set_exception(failure)
                self._handshake.exception()  # retrieved: wait_ready re-raises it
            raise KafkaConnectionError(str(failure))
        if len(parts) < 2 or parts[1] != "101":
            raise KafkaConnectionError(f"{self.address} refused the binary channel: {lines[0]!r}")
        accept = ""
        for line in lines[1:]:
            name, _, value = line.partition(":")
            if name.strip().lower() == "sec-websocket-accept":
                accept = value.strip()
        expected = base64.b64encode(hashlib.sha1(self._key + _WEBSOCKET_GUID).digest()).decode("ascii")
        if accept != expected:
            raise KafkaConnectionError(f"{self.address} answered the channel handshake with a wrong accept key")
        self._upgraded = True
        if not self._handshake.done():
            self._handshake.set_result(None)

    def _finish_payload(self) -> None:
        """The large payload being read is complete: deliver it (a whole binary message's body
        without a copy) and go back to the scratch buffer."""
        payload, first = self._payload, self._payload_first
        assert payload is not None
        self._payload, self._payload_filled = None, 0
        if first == 0x80 | _OPCODE_BINARY and not self._fragments:
            self._deliver(_U16.unpack_from(payload)[0], payload[2:])
        else:
            self._frame(first, payload.tobytes())

    def _frame(self, first: int, payload: bytes) -> None:
        """Every frame but a whole binary message: fragments, control frames, text."""
        opcode = first & 0x0F
        final = bool(first & 0x80)
        if opcode == _OPCODE_CLOSE:
            code = _U16.unpack_from(payload)[0] if len(payload) >= 2 else 1005
            text = payload[2:].decode("utf-8", "replace")
            reason = f"{self.address} closed the channel (code {code}{': ' + text if text else ''})"
            too_big = MessageSizeTooLargeError(
                f"{self.address} refused a request larger than its socket.request.max.bytes") \
                if code == _CLOSE_MESSAGE_TOO_BIG else None
            if self._transport is not None and not self._transport.is_closing():
                self._transport.close()
            self.close_reason = reason
            self._shut(reason, too_big)
            return
        if opcode == _OPCODE_PING:
            if self._transport is not None and not self._transport.is_closing():
                self._transport.writelines([_frame_head(_OPCODE_PONG, len(payload)), payload])
            return
        if opcode == _OPCODE_PONG:
            return
        if opcode == _OPCODE_BINARY or (opcode == _OPCODE_CONTINUATION and self._fragments):
            self._fragments.append(payload)
            if final:
                message = b"".join(self._fragments)
                self._fragments = []
                if len(message) < 2:
                    raise KafkaConnectionError(f"{self.address} sent an answer without a status")
                self._deliver(_U16.unpack_from(message)[0], message[2:])
            return
        raise KafkaConnectionError(f"{self.address} sent an unexpected frame (opcode {opcode})")


def _frame_head(opcode: int, length: int) -> bytes:
    """The head of one final, client-masked (all-zero key) frame of ``length`` payload bytes."""
    first = 0x80 | opcode
    if length < 126:
        return _HEAD_SHORT.pack(first, 0x80 | length) + _ZERO_MASK
    if length < 65536:
        return _HEAD_MEDIUM.pack(first, 0x80 | 126, length) + _ZERO_MASK
    return _HEAD_LONG.pack(first, 0x80 | 127, length) + _ZERO_MASK


class AsyncTransport:
    """Pooled HTTP client for broker APIs (see the module docstring)."""

    def __init__(self, *, request_timeout_ms: int = 30_000, connections_per_host: int = 8,
                 client_id: str = "kafkalite", connect_timeout_ms: int = 10_000,
                 ssl_context: ssl.SSLContext | None = None) -> None:
        self.request_timeout_ms = request_timeout_ms
        #: TLS for every connection (https and the channel's WebSocket over TLS) when set.
        self.ssl_context = ssl_context
        self._scheme = "https" if ssl_context is not None else "http"
        self.connections_per_host = connections_per_host
        self.client_id = client_id
        self.connect_timeout_ms = connect_timeout_ms
        self._session: aiohttp.ClientSession | None = None
        self._connections: dict[tuple[str, str], PipelinedConnection] = {}
        self._connecting: dict[tuple[str, str], asyncio.Future[PipelinedConnection]] = {}
        self._background: set[asyncio.Task[None]] = set()
        self._json_in_flight: dict[str, int] = {}
        self._failed_at: dict[str, float] = {}
        self._failures_in_row: dict[str, int] = {}
        self._closed = False
        #: ``Basic ...`` sent with every request and channel opening (see :meth:`set_credentials`).
        self.authorization: str | None = None

    def set_credentials(self, user: str, password: str) -> None:
        """Authenticate every later request and channel with HTTP Basic as ``user`` (SASL listeners)."""
        self.authorization = basic_authorization(user, password)

    # -- per-broker state ---------------------------------------------------------------------
    def note_failure(self, address: str) -> None:
        """``address`` failed now (connect refused or timed out, a request timed out)."""
        self._failed_at[address] = time.monotonic()
        self._failures_in_row[address] = self._failures_in_row.get(address, 0) + 1

    def note_success(self, address: str) -> None:
        """``address`` answered: it no longer counts as failed."""
        self._failed_at.pop(address, None)
        self._failures_in_row.pop(address, None)

    def reconnect_backoff(self, address: str) -> float:
        """Seconds until a new connection to ``address`` may be tried (0: now). After a failure,
        50 ms doubling per failure in a row up to 1 s, as Kafka's reconnect.backoff.ms /
        reconnect.backoff.max.ms defaults."""
        failed = self._failed_at.get(address)
        if failed is None:
            return 0.0
        doublings = min(self._failures_in_row.get(address, 1) - 1, 32)  # 2.0 ** 1024 would overflow
        backoff = min(_RECONNECT_BACKOFF_S * 2.0 ** doublings, _RECONNECT_BACKOFF_MAX_S)
        return max(0.0, failed + backoff - time.monotonic())

    def failed_at(self, address: str) -> float | None:
        """When ``address`` last failed (monotonic seconds), None if it answered since."""
        return self._failed_at.get(address)

    def connected(self, address: str) -> bool:
        """Whether a pipelined connection to ``address`` is open."""
        return any(connection.usable for (known, _), connection in self._connections.items() if known == address)

    def stalled(self, address: str, now: float, after_s: float) -> bool:
        """Whether a connection to ``address`` has had requests waiting ``after_s`` seconds or
        more without receiving a byte (a frozen or cut-off broker looks like this)."""
        return any(connection.silent_for(now) >= after_s
                   for (known, _), connection in self._connections.items() if known == address)

    def in_flight(self, address: str) -> int:
        """Requests sent to ``address`` and not answered yet (every channel and the JSON pool)."""
        count = self._json_in_flight.get(address, 0)
        for (known, _), connection in self._connections.items():
            if known == address:
                count += connection.in_flight
        return count

    def existing(self, address: str, channel: str = "default") -> PipelinedConnection | None:
        """The open connection for (address, channel), if any; never connects."""
        connection = self._connections.get((address, channel))
        return connection if connection is not None and connection.usable else None

    def ready(self, address: str, channel: str = "default",
              on_done: Callable[[], None] | None = None) -> PipelinedConnection | None:
        """The open connection for (address, channel) without waiting; otherwise start opening
        one in the background (``on_done`` is called when that attempt ends either way) and
        return None, as Kafka's ``NetworkClient.ready``. A failed attempt marks the address
        failed (:meth:`failed_at`)."""
        connection = self.existing(address, channel)
        if connection is not None or self._closed:
            return connection
        if (address, channel) in self._connecting or self.reconnect_backoff(address) > 0:
            return None

        async def connect() -> None:
            try:
                await self.connection(address, channel)
            except KafkaliteError as exc:
                log.debug("connecting to %s failed: %s", address, exc)
            finally:
                if on_done is not None:
                    on_done()

        task = asyncio.get_running_loop().create_task(connect(), name=f"kafkalite-connect-{address}")
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return None

    def _ensure_session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(limit=0, limit_per_host=self.connections_per_host,
                                             force_close=False, enable_cleanup_closed=False,
                                             ssl=self.ssl_context if self.ssl_context is not None else True)
            self._session = aiohttp.ClientSession(
                connector=connector, headers={"User-Agent": f"kafkalite/{self.client_id}"},
                auto_decompress=False, skip_auto_headers=("Accept-Encoding",))
        return self._session

    async def close(self) -> None:
        """Close every connection and wait (at most _CLOSE_WAIT_S) until their sockets are gone:
        a TLS connection says goodbye (close_notify) before its socket closes, and a loop
        stopped meanwhile would leave the socket open."""
        self._closed = True
        for task in list(self._background):
            task.cancel()
        connections = list(self._connections.values())
        for connection in connections:
            connection.close("the client is closing")
        self._connections.clear()
        lost = [connection.lost for connection in connections if not connection.lost.done()]
        if lost:
            await asyncio.wait(lost, timeout=_CLOSE_WAIT_S)
        for connection in connections:
            connection.abort()  # a socket still open after the wait is dropped without goodbye
        if self._session is not None and not self._session.closed:
            await self._session.close()
        self._session = None

    # -- pipelined connections ----------------------------------------------------------------
    async def connection(self, address: str, channel: str = "default") -> PipelinedConnection:
        """The live pipelined connection to ``address`` for ``channel``, opened when needed."""
        key = (address, channel)
        existing = self._connections.get(key)
        if existing is not None and existing.usable:
            return existing
        if self._closed:
            raise KafkaConnectionError("the transport is closed")
        pending = self._connecting.get(key)
        if pending is None:
            pending = asyncio.get_running_loop().create_future()
            self._connecting[key] = pending
            try:
                connection = await self._open(address)
            except BaseException as exc:
                if isinstance(exc, KafkaliteError):
                    self.note_failure(address)
                self._connecting.pop(key, None)
                if not pending.done():
                    pending.set_exception(exc if isinstance(exc, Exception) else KafkaConnectionError(str(exc)))
                    pending.exception()  # mark retrieved: the waiters (if any) re-raise it
                raise
            self._connecting.pop(key, None)
            if self._closed:  # closed while this connection was being opened: it is not kept
                connection.close("the client is closing")
                error = KafkaConnectionError("the transport is closed")
                if not pending.done():
                    pending.set_exception(error)
                    pending.exception()
                raise error
            self._connections[key] = connection
            self.note_success(address)
            pending.set_result(connection)
            return connection
        return await asyncio.shield(pending)

    async def _open(self, address: str) -> PipelinedConnection:
        host, _, port_text = address.rpartition(":")
        try:
            port = int(port_text)
        except ValueError:
            raise KafkaConnectionError(f"bad broker address {address!r}") from None
        loop = asyncio.get_running_loop()
        hostname = host.strip("[]") or "127.0.0.1"

        def channel() -> PipelinedConnection:
            return PipelinedConnection(address, self.request_timeout_ms, self.client_id, self.note_failure,
                                       self.authorization)

        opening: Awaitable[tuple[asyncio.BaseTransport, PipelinedConnection]]
        if self.ssl_context is not None:
            opening = open_tls_connection(channel, hostname, port, context=self.ssl_context,
                                          server_hostname=hostname)
        else:
            opening = loop.create_connection(channel, hostname, port)
        try:
            _, connection = await asyncio.wait_for(opening, self.connect_timeout_ms / 1000)
        except TimeoutError:
            raise KafkaConnectionError(f"connecting to {address} timed out") from None
        except ssl.SSLError as exc:
            raise KafkaConnectionError(f"TLS handshake with {address} failed: {exc}") from None
        except OSError as exc:
            raise KafkaConnectionError(f"cannot connect to {address}: {exc.strerror or exc}") from None
        await connection.wait_ready(self.connect_timeout_ms / 1000)
        return connection

    # -- pooled JSON requests -----------------------------------------------------------------
    async def request(self, address: str, method: str, path: str, *, body: bytes | list[Any] | None = None,
                      json_body: Any = None, params: dict[str, str] | None = None,
                      timeout_ms: int | None = None, headers: Mapping[str, str] | None = None) -> bytes:
        """Send one request (with ``headers`` added); returns the body of a 2xx response, raises a
        named error otherwise."""
        session = self._ensure_session()
        headers = {**(headers or {}), **({"Authorization": self.authorization} if self.authorization else {})}
        data: Any = None
        if json_body is not None:
            data = protocol.dumps(json_body)
            headers["Content-Type"] = protocol.JSON_CONTENT_TYPE
        elif body is not None:
            data = b"".join(bytes(piece) if isinstance(piece, memoryview) else piece for piece in body) \
                if isinstance(body, list) else body
            headers["Content-Type"] = protocol.BINARY_CONTENT_TYPE
        total = (timeout_ms if timeout_ms is not None else self.request_timeout_ms) / 1000
        url = f"{self._scheme}://{address}{path}"
        self._json_in_flight[address] = self._json_in_flight.get(address, 0) + 1
        try:
            async with session.request(method, url, data=data, params=params, headers=headers,
                                       timeout=aiohttp.ClientTimeout(total=total)) as response:
                payload = await response.read()
                self.note_success(address)
                if 200 <= response.status < 300:
                    return payload
                raise _error_from(response.status, payload)
        except BrokerResponseError:
            raise
        except TimeoutError as exc:
            self.note_failure(address)
            raise KafkaTimeoutError(f"{method} {url} timed out after {total:.1f} s") from exc
        except (aiohttp.ClientError, OSError) as exc:
            self.note_failure(address)
            raise KafkaConnectionError(f"{method} {url} failed: {exc}") from exc
        finally:
            left = self._json_in_flight.get(address, 1) - 1
            if left > 0:
                self._json_in_flight[address] = left
            else:
                self._json_in_flight.pop(address, None)

    async def request_json(self, address: str, method: str, path: str, json_body: Any = None,
                           params: dict[str, str] | None = None, timeout_ms: int | None = None) -> Any:
        payload = await self.request(address, method, path, json_body=json_body, params=params,
                                     timeout_ms=timeout_ms)
        try:
            return json.loads(payload or b"{}")
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise KafkaConnectionError(f"{address}{path} answered with malformed JSON") from exc


def write_message(transport: asyncio.WriteTransport, head: bytes, pieces: Sequence[Piece], length: int) -> None:
    """Write one WebSocket message: its frame ``head``, then its payload ``pieces`` (``length``
    bytes in all), in one go, so that no other frame can come between them; nothing is joined.

    A payload of :data:`PIECED_MESSAGE_BYTES` or more goes in slices of :data:`PIECE_BYTES`: over
    TLS each slice is encrypted and on the wire before the next is encrypted, so the receiver
    decrypts one while the sender encrypts the next. Both the client's requests and the
    broker's long channel answers are written here."""
    if length < PIECED_MESSAGE_BYTES:
        transport.writelines([head, *pieces])
        return
    transport.write(head)
    for piece in pieces:
        view = memoryview(piece)
        for start in range(0, len(view), PIECE_BYTES):
            transport.write(view[start:start + PIECE_BYTES])


def check_answer(status: int, body: Body) -> Body:
    """The body of a 2xx answer; the named error of any other (for :meth:`PipelinedConnection.submit`)."""
    if 200 <= status < 300:
        return body
    raise _error_from(status, body)


def _error_from(status: int, payload: Body) -> BrokerResponseError:
    if isinstance(payload, memoryview):
        payload = payload.tobytes()
    try:
        body = json.loads(payload)
        if isinstance(body, dict) and ("error_code" in body or "error" in body):
            return protocol.error_from_body(body, status)
    except (json.JSONDecodeError, UnicodeDecodeError):
        pass
    return UnknownServerError(f"HTTP {status}: {payload[:200]!r}")
