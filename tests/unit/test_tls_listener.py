"""The listener's first-byte sniffing behind TLS, on asyncio's and uvloop's SSL transports: the
protocol chosen after the handshake reads the decrypted bytes and sees the client certificate's
principal; a plaintext client on the TLS port is served nothing."""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, cast

import pytest
import uvloop

from kafkalite.broker.listener import _ProtocolSniffer
from kafkalite.security import certs, tls
from kafkalite.security.principal import KafkaPrincipal


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    directory = tmp_path_factory.mktemp("pki")
    ca = certs.make_ca(directory)
    server = certs.make_server_certificate(ca, directory)
    alice = certs.make_client_certificate(ca, directory, "alice", organization="example")
    return {"ca": ca.certificate_path, "server": server.keystore_path, "alice_cert": alice.certificate_path,
            "alice_key": alice.key_path}


class _Echo(asyncio.Protocol):
    """Answers ``<kind>:<principal>:<bytes>`` to the first bytes it gets."""

    def __init__(self, kind: str, principal: KafkaPrincipal | None = None) -> None:
        self.kind = kind
        self.principal = principal
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        assert self.transport is not None
        self.transport.write(f"{self.kind}:{self.principal}:".encode() + data)


async def _serve_and_ask(pki: dict[str, Path], first_bytes: bytes, client: ssl.SSLContext | None) -> bytes:
    server_context = tls.server_context({"ssl.keystore.location": str(pki["server"]), "ssl.client.auth": "requested",
                                         "ssl.truststore.location": str(pki["ca"])})

    def kafka(transport: asyncio.Transport) -> Any:
        return _Echo("kafka", tls.transport_principal(transport))

    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: _ProtocolSniffer(lambda: _Echo("http"), kafka), "127.0.0.1", 0,
                                      ssl=server_context)
    port = server.sockets[0].getsockname()[1]
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client,
                                                       server_hostname="localhost" if client else None)
        writer.write(first_bytes)
        await writer.drain()
        try:
            answer = await asyncio.wait_for(reader.read(1000), 10)
        except (ConnectionError, ssl.SSLError):
            answer = b""
        writer.close()
        return answer
    finally:
        server.close()


def _run(loop_name: str, coroutine: Callable[[], Coroutine[Any, Any, bytes]]) -> bytes:
    if loop_name == "uvloop":
        return uvloop.run(coroutine())
    return asyncio.run(coroutine())


@pytest.mark.parametrize("loop_name", ["asyncio", "uvloop"])
def test_sniffing_works_behind_tls_with_the_certificate_principal(pki: dict[str, Path], loop_name: str) -> None:
    anonymous = tls.client_context(ssl_cafile=str(pki["ca"]))
    assert _run(loop_name, lambda: _serve_and_ask(pki, b"GET / HTTP/1.1", anonymous)) == b"http:None:GET / HTTP/1.1"
    alice = tls.client_context(ssl_cafile=str(pki["ca"]), ssl_certfile=str(pki["alice_cert"]),
                               ssl_keyfile=str(pki["alice_key"]))
    assert _run(loop_name, lambda: _serve_and_ask(pki, b"\x00\x00\x00\x10", alice)) == \
        b"kafka:User:CN=alice,O=example:\x00\x00\x00\x10"


@pytest.mark.parametrize("loop_name", ["asyncio", "uvloop"])
def test_a_plaintext_client_on_the_tls_port_gets_nothing(pki: dict[str, Path], loop_name: str) -> None:
    for first_bytes in (b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n", b"\x00\x00\x00\x0a\x00\x12\x00\x03"):
        answer = _run(loop_name, lambda first_bytes=first_bytes: _serve_and_ask(pki, first_bytes, None))
        assert b"http:" not in answer and b"kafka:" not in answer
        assert b"HTTP/1.1" not in answer


def test_plain_socket_sees_the_connection_closed(pki: dict[str, Path]) -> None:
    async def scenario() -> bytes:
        server_context = tls.server_context({"ssl.keystore.location": str(pki["server"])})
        loop = asyncio.get_running_loop()
        server = await loop.create_server(lambda: _ProtocolSniffer(lambda: _Echo("http"), lambda _t: _Echo("k")),
                                          "127.0.0.1", 0, ssl=server_context)
        port = server.sockets[0].getsockname()[1]

        def ask() -> bytes:
            with socket.create_connection(("127.0.0.1", port), timeout=10) as connection:
                connection.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
                received = b""
                while chunk := connection.recv(4096):
                    received += chunk
                return received
        try:
            return await asyncio.to_thread(ask)
        finally:
            server.close()
    answer = asyncio.run(scenario())
    assert b"HTTP" not in answer  # at most a TLS alert, then the connection is closed


def test_http_requests_carry_the_client_certificate_principal(pki: dict[str, Path]) -> None:
    import aiohttp
    from aiohttp import web

    from kafkalite.broker.http import certificate_principal_middleware, request_principal

    async def whoami(request: web.Request) -> web.Response:
        return web.Response(text=str(request_principal(request)))

    async def scenario() -> list[str]:
        app = web.Application(middlewares=[certificate_principal_middleware])
        app.router.add_get("/whoami", whoami)
        runner = web.AppRunner(app)
        await runner.setup()
        server_context = tls.server_context({"ssl.keystore.location": str(pki["server"]),
                                             "ssl.client.auth": "requested",
                                             "ssl.truststore.location": str(pki["ca"])})
        site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=server_context)
        await site.start()
        port = runner.addresses[0][1]
        answers = []
        try:
            for client in (tls.client_context(ssl_cafile=str(pki["ca"]), ssl_certfile=str(pki["alice_cert"]),
                                              ssl_keyfile=str(pki["alice_key"])),
                           tls.client_context(ssl_cafile=str(pki["ca"]))):
                async with aiohttp.ClientSession() as session, \
                        session.get(f"https://localhost:{port}/whoami", ssl=client) as answer:
                    answers.append(await answer.text())
        finally:
            await runner.cleanup()
        return answers

    assert asyncio.run(scenario()) == ["User:CN=alice,O=example", "User:ANONYMOUS"]
