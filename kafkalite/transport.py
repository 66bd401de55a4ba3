"""HTTP transport to brokers: the only module that uses aiohttp's client half.

Two ways to talk to a broker, both returning response bytes for 2xx answers and raising
kafkalite errors otherwise (a JSON error body becomes the named broker error, e.g.
``NOT_LEADER_OR_FOLLOWER`` → NotLeaderForPartitionError; connection and protocol failures
become KafkaConnectionError; a timeout KafkaTimeoutError). No aiohttp exception leaves this
module.

* :meth:`AsyncTransport.request` / :meth:`AsyncTransport.request_json` — one pooled aiohttp
  session (keep-alive connections, several requests in flight per broker) for the JSON calls:
  metadata, offsets, admin.
* :class:`PipelinedConnection` (from :meth:`AsyncTransport.connection`) — the hot paths,
  produce and fetch. One keep-alive HTTP/1.1 connection per (broker, channel) on which
  requests are *pipelined*: written back to back without waiting, answers matched in order.
  The broker serves the requests of one connection one after another, in the order written —
  the property Kafka's producer relies on to keep up to five batches of a partition in flight
  without reordering. Writing is synchronous (:meth:`PipelinedConnection.submit`), so the
  order of ``submit`` calls is the order on the wire. A request that times out closes the
  connection (every request still on it fails with KafkaConnectionError), as Kafka's clients
  disconnect on a request timeout; the next request opens a new connection.

Concurrency: one AsyncTransport per event loop; coroutines and callbacks on that loop only.
"""

from __future__ import annotations

import asyncio
import json
from collections import deque
from typing import Any, Sequence

import aiohttp

from kafkalite import protocol
from kafkalite.errors import (
    BrokerResponseError,
    KafkaConnectionError,
    KafkaTimeoutError,
    UnknownServerError,
)

Piece = bytes | bytearray | memoryview

_MAX_HEADER_BYTES = 64 * 1024
_AWAIT_HEAD = 0
_AWAIT_BODY = 1
_AWAIT_CHUNK_SIZE = 2
_AWAIT_CHUNK_DATA = 3
_AWAIT_CLOSE = 4


class PipelinedConnection(asyncio.Protocol):
    """One HTTP/1.1 keep-alive connection with pipelined requests (see the module docstring)."""

    def __init__(self, address: str, request_timeout_ms: int, client_id: str) -> None:
        self.address = address
        self.request_timeout_ms = request_timeout_ms
        self._host_header = f"Host: {address}\r\nUser-Agent: kafkalite/{client_id}\r\n".encode("latin-1")
        self._transport: asyncio.Transport | None = None
        self._pending: deque[tuple[asyncio.Future[tuple[int, bytes]], asyncio.TimerHandle | None]] = deque()
        self._buffer = bytearray()
        self._state = _AWAIT_HEAD
        self._status = 0
        self._remaining = 0
        self._chunks: list[bytes] = []
        self._close_after = False
        self._write_paused = False
        self._drain_waiters: list[asyncio.Future[None]] = []
        self.closed = False
        self.close_reason = ""

    # -- asyncio.Protocol ---------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        reason = f"connection to {self.address} lost" + (f": {exc}" if exc else "")
        self._shut(self.close_reason or reason)

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        waiters, self._drain_waiters = self._drain_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        try:
            self._parse()
        except KafkaConnectionError as exc:
            self.close(str(exc))

    def eof_received(self) -> bool | None:
        if self._state == _AWAIT_CLOSE and self._pending:
            self._deliver(self._status, bytes(self._buffer))
            self._buffer.clear()
        return None

    # -- requests -----------------------------------------------------------------------------
    def submit(self, path: str, pieces: Sequence[Piece], *, method: str = "POST",
               content_type: str = protocol.BINARY_CONTENT_TYPE,
               timeout_ms: int | None = None) -> asyncio.Future[tuple[int, bytes]]:
        """Write one request now; the future gets (status, body) when its answer arrives."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[tuple[int, bytes]] = loop.create_future()
        transport = self._transport
        if self.closed or transport is None or transport.is_closing():
            future.set_exception(KafkaConnectionError(f"connection to {self.address} is closed"))
            return future
        length = 0
        for piece in pieces:
            length += len(piece)
        head = (f"{method} {path} HTTP/1.1\r\n".encode("latin-1") + self._host_header
                + f"Content-Type: {content_type}\r\nContent-Length: {length}\r\n\r\n".encode("latin-1"))
        timeout = (timeout_ms if timeout_ms is not None else self.request_timeout_ms) / 1000
        handle = loop.call_later(timeout, self._on_timeout, future, timeout) if timeout > 0 else None
        self._pending.append((future, handle))
        transport.writelines([head, *pieces])
        return future

    async def request(self, path: str, pieces: Sequence[Piece], *, timeout_ms: int | None = None) -> bytes:
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

    @property
    def usable(self) -> bool:
        return not self.closed and self._transport is not None and not self._transport.is_closing() \
            and not self._close_after

    def close(self, reason: str = "closed by the client") -> None:
        if not self.close_reason:
            self.close_reason = reason
        if self._transport is not None and not self._transport.is_closing():
            self._transport.close()
        self._shut(reason)

    # -- internals ----------------------------------------------------------------------------
    def _shut(self, reason: str) -> None:
        self.closed = True
        pending, self._pending = self._pending, deque()
        for future, handle in pending:
            if handle is not None:
                handle.cancel()
            if not future.done():
                future.set_exception(KafkaConnectionError(reason))
        self.resume_writing()

    def _on_timeout(self, future: asyncio.Future[tuple[int, bytes]], timeout: float) -> None:
        if not future.done():
            future.set_exception(KafkaTimeoutError(f"request to {self.address} timed out after {timeout:.1f} s"))
            self.close(f"a request to {self.address} timed out after {timeout:.1f} s")

    def _deliver(self, status: int, body: bytes) -> None:
        if not self._pending:
            raise KafkaConnectionError(f"{self.address} sent an answer nobody asked for")
        future, handle = self._pending.popleft()
        if handle is not None:
            handle.cancel()
        if not future.done():
            future.set_result((status, body))
        if self._close_after:
            self.close(f"{self.address} closed the connection (Connection: close)")

    def _parse(self) -> None:
        buffer = self._buffer
        while buffer:
            state = self._state
            if state == _AWAIT_HEAD:
                end = buffer.find(b"\r\n\r\n")
                if end < 0:
                    if len(buffer) > _MAX_HEADER_BYTES:
                        raise KafkaConnectionError(f"{self.address} sent an oversized response head")
                    return
                head = bytes(buffer[:end]).decode("latin-1")
                del buffer[:end + 4]
                self._start_response(head)
            elif state == _AWAIT_BODY:
                remaining = self._remaining
                if len(buffer) < remaining:
                    return
                body = bytes(buffer[:remaining])
                del buffer[:remaining]
                self._state = _AWAIT_HEAD
                self._deliver(self._status, body)
            elif state == _AWAIT_CHUNK_SIZE:
                end = buffer.find(b"\r\n")
                if end < 0:
                    return
                line = bytes(buffer[:end]).split(b";", 1)[0].strip()
                del buffer[:end + 2]
                try:
                    size = int(line, 16)
                except ValueError:
                    raise KafkaConnectionError(f"{self.address} sent a bad chunk size {line!r}") from None
                if size == 0:
                    trailer_end = buffer.find(b"\r\n")
                    if trailer_end < 0:
                        buffer[:0] = b"0\r\n"  # wait for the (empty) trailer
                        return
                    del buffer[:trailer_end + 2]
                    body = b"".join(self._chunks)
                    self._chunks = []
                    self._state = _AWAIT_HEAD
                    self._deliver(self._status, body)
                else:
                    self._remaining = size
                    self._state = _AWAIT_CHUNK_DATA
            elif state == _AWAIT_CHUNK_DATA:
                if len(buffer) < self._remaining + 2:
                    return
                self._chunks.append(bytes(buffer[:self._remaining]))
                del buffer[:self._remaining + 2]
                self._state = _AWAIT_CHUNK_SIZE
            else:  # _AWAIT_CLOSE: the body runs until the server closes the connection
                return

    def _start_response(self, head: str) -> None:
        lines = head.split("\r\n")
        parts = lines[0].split(" ", 2)
        try:
            status = int(parts[1])
        except (IndexError, ValueError):
            raise KafkaConnectionError(f"{self.address} sent a malformed status line {lines[0]!r}") from None
        length = -1
        chunked = False
        for line in lines[1:]:
            name, _, value = line.partition(":")
            name = name.strip().lower()
            if name == "content-length":
                try:
                    length = int(value.strip())
                except ValueError:
                    raise KafkaConnectionError(f"{self.address} sent a bad Content-Length") from None
            elif name == "transfer-encoding":
                chunked = "chunked" in value.lower()
            elif name == "connection" and value.strip().lower() == "close":
                self._close_after = True
        if 100 <= status < 200:
            return
        self._status = status
        if status in (204, 304) or length == 0:
            self._deliver(status, b"")
        elif chunked:
            self._chunks = []
            self._state = _AWAIT_CHUNK_SIZE
        elif length > 0:
            self._remaining = length
            self._state = _AWAIT_BODY
        else:
            self._state = _AWAIT_CLOSE


class AsyncTransport:
    """Pooled HTTP client for broker APIs (see the module docstring)."""

    def __init__(self, *, request_timeout_ms: int = 30_000, connections_per_host: int = 8,
                 client_id: str = "kafkalite", connect_timeout_ms: int = 10_000) -> None:
        self.request_timeout_ms = request_timeout_ms
        self.connections_per_host = connections_per_host
        self.client_id = client_id
        self.connect_timeout_ms = connect_timeout_ms
        self._session: aiohttp.ClientSession | None = None
        self._connections: dict[tuple[str, str], PipelinedConnection] = {}
        self._connecting: dict[tuple[str, str], asyncio.Future[PipelinedConnection]] = {}
        self._closed = False

    def _ensure_session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(limit=0, limit_per_host=self.connections_per_host,
                                             force_close=False, enable_cleanup_closed=False)
            self._session = aiohttp.ClientSession(
                connector=connector, headers={"User-Agent": f"kafkalite/{self.client_id}"},
                auto_decompress=False, skip_auto_headers=("Accept-Encoding",))
        return self._session

    async def close(self) -> None:
        self._closed = True
        for connection in list(self._connections.values()):
            connection.close("the client is closing")
        self._connections.clear()
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
                self._connecting.pop(key, None)
                if not pending.done():
                    pending.set_exception(exc if isinstance(exc, Exception) else KafkaConnectionError(str(exc)))
                    pending.exception()  # mark retrieved: the waiters (if any) re-raise it
                raise
            self._connecting.pop(key, None)
            self._connections[key] = connection
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
        try:
            _, connection = await asyncio.wait_for(
                loop.create_connection(lambda: PipelinedConnection(address, self.request_timeout_ms, self.client_id),
                                       host.strip("[]") or "127.0.0.1", port),
                self.connect_timeout_ms / 1000)
        except asyncio.TimeoutError:
            raise KafkaConnectionError(f"connecting to {address} timed out") from None
        except OSError as exc:
            raise KafkaConnectionError(f"cannot connect to {address}: {exc.strerror or exc}") from None
        return connection

    async def send_binary(self, address: str, path: str, pieces: Sequence[Piece], *, channel: str = "default",
                          timeout_ms: int | None = None) -> bytes:
        """One binary request on the pipelined connection of (address, channel)."""
        connection = await self.connection(address, channel)
        return await connection.request(path, pieces, timeout_ms=timeout_ms)

    # -- pooled JSON requests -----------------------------------------------------------------
    async def request(self, address: str, method: str, path: str, *, body: bytes | list[Any] | None = None,
                      json_body: Any = None, params: dict[str, str] | None = None,
                      timeout_ms: int | None = None) -> bytes:
        """Send one request; returns the body of a 2xx response, raises a named error otherwise."""
        session = self._ensure_session()
        headers = {}
        data: Any = None
        if json_body is not None:
            data = protocol.dumps(json_body)
            headers["Content-Type"] = protocol.JSON_CONTENT_TYPE
        elif body is not None:
            data = b"".join(bytes(piece) if isinstance(piece, memoryview) else piece for piece in body) \
                if isinstance(body, list) else body
            headers["Content-Type"] = protocol.BINARY_CONTENT_TYPE
        total = (timeout_ms if timeout_ms is not None else self.request_timeout_ms) / 1000
        url = f"http://{address}{path}"
        try:
            async with session.request(method, url, data=data, params=params, headers=headers,
                                       timeout=aiohttp.ClientTimeout(total=total)) as response:
                payload = await response.read()
                if 200 <= response.status < 300:
                    return payload
                raise _error_from(response.status, payload)
        except BrokerResponseError:
            raise
        except asyncio.TimeoutError as exc:
            raise KafkaTimeoutError(f"{method} {url} timed out after {total:.1f} s") from exc
        except (aiohttp.ClientError, OSError) as exc:
            raise KafkaConnectionError(f"{method} {url} failed: {exc}") from exc

    async def request_json(self, address: str, method: str, path: str, json_body: Any = None,
                           params: dict[str, str] | None = None, timeout_ms: int | None = None) -> Any:
        payload = await self.request(address, method, path, json_body=json_body, params=params,
                                     timeout_ms=timeout_ms)
        try:
            return json.loads(payload or b"{}")
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise KafkaConnectionError(f"{address}{path} answered with malformed JSON") from exc


def check_answer(status: int, body: bytes) -> bytes:
    """The body of a 2xx answer; the named error of any other (for :meth:`PipelinedConnection.submit`)."""
    if 200 <= status < 300:
        return body
    raise _error_from(status, body)


def _error_from(status: int, payload: bytes) -> BrokerResponseError:
    try:
        body = json.loads(payload)
        if isinstance(body, dict) and ("error_code" in body or "error" in body):
            return protocol.error_from_body(body, status)
    except (json.JSONDecodeError, UnicodeDecodeError):
        pass
    return UnknownServerError(f"HTTP {status}: {payload[:200]!r}")
