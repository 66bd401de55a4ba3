"""HTTP transport to brokers: the only module that uses aiohttp's client half.

:class:`AsyncTransport` sends requests to ``host:port`` addresses over one pooled aiohttp
session (keep-alive connections, several requests in flight per broker). It returns response
bytes for 2xx answers and raises kafkalite errors otherwise: a JSON error body becomes the named
broker error (``NOT_LEADER_OR_FOLLOWER`` → NotLeaderForPartitionError, ...), connection and
protocol failures become KafkaConnectionError, a timeout KafkaTimeoutError. No aiohttp
exception leaves this module.

Concurrency: one AsyncTransport per event loop; coroutines only.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp

from kafkalite import protocol
from kafkalite.errors import (
    BrokerResponseError,
    KafkaConnectionError,
    KafkaTimeoutError,
    UnknownServerError,
)


class AsyncTransport:
    """Pooled HTTP client for broker APIs (see the module docstring)."""

    def __init__(self, *, request_timeout_ms: int = 30_000, connections_per_host: int = 8,
                 client_id: str = "kafkalite") -> None:
        self.request_timeout_ms = request_timeout_ms
        self.connections_per_host = connections_per_host
        self.client_id = client_id
        self._session: aiohttp.ClientSession | None = None

    def _ensure_session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(limit=0, limit_per_host=self.connections_per_host,
                                             force_close=False, enable_cleanup_closed=False)
            self._session = aiohttp.ClientSession(
                connector=connector, headers={"User-Agent": f"kafkalite/{self.client_id}"},
                auto_decompress=False, skip_auto_headers=("Accept-Encoding",))
        return self._session

    async def close(self) -> None:
        if self._session is not None and not self._session.closed:
            await self._session.close()
        self._session = None

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


def _error_from(status: int, payload: bytes) -> BrokerResponseError:
    try:
        body = json.loads(payload)
        if isinstance(body, dict) and ("error_code" in body or "error" in body):
            return protocol.error_from_body(body, status)
    except (json.JSONDecodeError, UnicodeDecodeError):
        pass
    return UnknownServerError(f"HTTP {status}: {payload[:200]!r}")
