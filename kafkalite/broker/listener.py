"""One address for both front ends: HTTP and Kafka's wire protocol, told apart by the first byte.

The :class:`BrokerListener` binds the broker's listener address. Each accepted connection starts
with a :class:`_ProtocolSniffer`, which waits for the connection's first bytes: an ASCII letter
(an HTTP method: ``GET``, ``POST``, ...) hands the connection to aiohttp's request handler (the
HTTP front end of :mod:`kafkalite.broker.http`, with its WebSocket channel); anything else to a
:class:`~kafkalite.broker.kafka.connection.KafkaConnection` (a Kafka request starts with a
4-byte big-endian size, whose first byte is 0 below 16 MiB; a larger size, e.g. a TLS
handshake's 0x16, is refused there as an oversize frame by closing the connection).

A broker binds one socket per entry of ``listeners`` (Kafka's listener names: PLAINTEXT,
INTERNAL, EXTERNAL, ...); every socket serves both protocols, and a Kafka connection knows the
name of the listener it came in on, so that Metadata answers carry the addresses advertised for
that listener (Kafka's meaning of ``advertised.listeners``).

An SSL listener (``listener.security.protocol.map``) wraps each connection in TLS first (the
context from :mod:`kafkalite.broker.tls_contexts`); the sniffing then reads the decrypted bytes.
A Kafka connection on it has security protocol SSL and, when the client presented a certificate
(``ssl.client.auth=requested|required``), the principal ``User:<the certificate's subject in
RFC 2253 form>`` (Kafka's default SSL principal); HTTP requests get the same principal from the
middleware in :mod:`kafkalite.broker.http`. A client that fails the handshake (a plaintext client,
a certificate from another CA) is dropped before anything is served; asyncio logs that at DEBUG.

Concurrency: event-loop only. :meth:`BrokerListener.stop` stops accepting, closes the Kafka
connections, then shuts the HTTP front end down (its connections and channels).
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Callable
from typing import cast

from kafkalite.broker.http import HttpListener
from kafkalite.broker.kafka.connection import KafkaConnection
from kafkalite.broker.kafka.registry import ApiRegistry
from kafkalite.broker.services import BrokerServices
from kafkalite.config import Listener
from kafkalite.errors import ConfigError
from kafkalite.security import tls

log = logging.getLogger(__name__)

#: First bytes of an HTTP request: the method's letters.
_HTTP_FIRST_BYTES = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")


def is_http(first_bytes: bytes) -> bool:
    """Whether a connection starting with ``first_bytes`` (at least one byte) speaks HTTP."""
    return first_bytes[0] in _HTTP_FIRST_BYTES


class _ProtocolSniffer(asyncio.Protocol):
    """A connection until its first bytes arrive; then it becomes HTTP or Kafka."""

    def __init__(self, http: Callable[[], asyncio.Protocol],
                 kafka: Callable[[asyncio.Transport], KafkaConnection]) -> None:
        self._http = http
        self._kafka = kafka
        self._transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's transports are not subclasses

    def data_received(self, data: bytes) -> None:
        transport = self._transport
        if transport is None or not data:
            return
        protocol: asyncio.Protocol = self._http() if is_http(data) else self._kafka(transport)
        transport.set_protocol(protocol)
        protocol.connection_made(transport)
        protocol.data_received(data)

    def eof_received(self) -> bool | None:
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None


class BrokerListener:
    """The broker's listener: one socket, both protocols (see the module docstring)."""

    def __init__(self, servers: list[asyncio.Server], http: HttpListener, connections: set[KafkaConnection]) -> None:
        self._servers = servers
        self._http = http
        self._connections = connections

    @classmethod
    async def start(cls, services: BrokerServices, host: str, port: int,
                    listeners: tuple[Listener, ...] = (),
                    ssl_contexts: dict[str, ssl.SSLContext] | None = None) -> BrokerListener:
        """Serve ``services`` over HTTP and Kafka on every listener (``host:port`` as PLAINTEXT when
        none are given), in TLS with ``ssl_contexts[name]`` on the listeners it names; an address
        that cannot be bound is a ConfigError."""
        contexts = ssl_contexts or {}
        http = await HttpListener.prepare(services)
        registry = ApiRegistry.default()
        connections: set[KafkaConnection] = set()
        http_factory = http.protocol_factory()
        loop = asyncio.get_running_loop()
        servers: list[asyncio.Server] = []

        def sniffer(name: str) -> Callable[[], asyncio.Protocol]:
            security_protocol = services.config.security_protocol(name) if listeners else "PLAINTEXT"

            def kafka_factory(transport: asyncio.Transport) -> KafkaConnection:
                connection = KafkaConnection(services, registry, connections, name)
                connection.security_protocol = security_protocol
                principal = tls.transport_principal(transport)
                if principal is not None:
                    connection.principal = principal
                return connection
            return lambda: _ProtocolSniffer(http_factory, kafka_factory)

        for listener in listeners or (Listener("PLAINTEXT", host, port),):
            try:
                servers.append(await loop.create_server(sniffer(listener.name), listener.host, listener.port,
                                                        reuse_address=True, backlog=1024,
                                                        ssl=contexts.get(listener.name)))
            except OSError as exc:
                for server in servers:
                    server.close()
                await http.stop()
                raise ConfigError(f"cannot listen on {listener.host}:{listener.port} ({listener.name}): "
                                  f"{exc.strerror}") from exc
        for server, listener in zip(servers, listeners or (Listener("PLAINTEXT", host, port),), strict=True):
            for bound in server.sockets:
                http.name_port(int(bound.getsockname()[1]), listener.name)
        return cls(servers, http, connections)

    @property
    def port(self) -> int:
        """The bound port of the first listener (useful when started on port 0)."""
        return int(self._servers[0].sockets[0].getsockname()[1])

    async def stop(self) -> None:
        for server in self._servers:
            server.close()
        await asyncio.gather(*(connection.stop() for connection in list(self._connections)),
                             return_exceptions=True)
        await self._http.stop()
