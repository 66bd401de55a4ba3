"""The clients' TLS layer (kafkalite.security.tls_stream) against asyncio's own TLS server.

Every test runs with both record readers: the compiled one (kafkalite.security._tls_records,
the interpreter lock released once per read) and the pure-Python one over SSLObject.read();
they must deliver the same bytes in the same order and end connections the same way. The
peers are real sockets on loopback: asyncio's TLS server, or a TCP server that speaks TLS
through its own SSLObject when a test needs to send what a TLS server never would.
"""

from __future__ import annotations

import asyncio
import os
import ssl
from collections.abc import Awaitable, Callable, Iterator
from typing import ClassVar

import pytest

from kafkalite.record import speedups
from kafkalite.security import certs, tls_stream

READERS = ["compiled", "pure-python"]


@pytest.fixture(params=READERS)
def reader(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    if request.param == "compiled":
        if tls_stream._COMPILED is None:
            pytest.skip("kafkalite.security._tls_records is not built")
        monkeypatch.setattr(tls_stream, "_read_records", tls_stream._compiled_read_records)
    else:
        monkeypatch.setattr(tls_stream, "_read_records", tls_stream._python_read_records)
    yield request.param


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    directory = tmp_path_factory.mktemp("pki")
    ca = certs.make_ca(directory)
    server = certs.make_server_certificate(ca, directory)
    other_directory = tmp_path_factory.mktemp("other-pki")
    other_ca = certs.make_ca(other_directory)
    return {"ca": str(ca.certificate_path), "server": str(server.keystore_path),
            "other_ca": str(other_ca.certificate_path)}


def server_context(pki: dict[str, str]) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(pki["server"])
    return context


def client_context(cafile: str) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.load_verify_locations(cafile)
    return context


class Collector(asyncio.BufferedProtocol):
    """An application protocol that keeps what it receives, through buffers of ``buffer_bytes``."""

    def __init__(self, buffer_bytes: int) -> None:
        self.buffer = bytearray(buffer_bytes)
        self.received = bytearray()
        self.transport: asyncio.Transport | None = None
        self.lost: asyncio.Future[Exception | None] = asyncio.get_running_loop().create_future()
        self.wanted = 0
        self.enough: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def get_buffer(self, sizehint: int) -> memoryview:
        return memoryview(self.buffer)

    def buffer_updated(self, nbytes: int) -> None:
        self.received += self.buffer[:nbytes]
        if self.wanted and len(self.received) >= self.wanted and not self.enough.done():
            self.enough.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.lost.done():
            self.lost.set_result(exc)


class EchoServer(asyncio.Protocol):
    """asyncio's TLS server side: keeps what it receives; answers the line b"send N" with N random
    bytes and b"close" by closing the session."""

    instances: ClassVar[list[EchoServer]] = []

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.received = bytearray()
        self.unparsed = bytearray()
        self.sent = bytearray()
        EchoServer.instances.append(self)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.received += data
        self.unparsed += data
        assert self.transport is not None
        while b"\n" in self.unparsed:
            line, _, rest = bytes(self.unparsed).partition(b"\n")
            self.unparsed = bytearray(rest)
            if line.startswith(b"send "):
                payload = os.urandom(int(line[5:]))
                self.sent += payload
                self.transport.write(payload)
            elif line == b"close":
                self.transport.close()


async def connect(pki: dict[str, str], port: int, buffer_bytes: int = 4096
                  ) -> tuple[tls_stream.TLSTransport, Collector]:
    """A client TLS connection to the test's server on ``port``, verified against the test CA."""
    return await tls_stream.open_tls_connection(lambda: Collector(buffer_bytes), "127.0.0.1", port,
                                                context=client_context(pki["ca"]), server_hostname="localhost")


def run(test: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(test(), 30))


async def started_server(pki: dict[str, str]) -> tuple[asyncio.Server, int]:
    EchoServer.instances.clear()
    server = await asyncio.get_running_loop().create_server(EchoServer, "127.0.0.1", 0, ssl=server_context(pki))
    return server, server.sockets[0].getsockname()[1]


@pytest.mark.parametrize("buffer_bytes", [700, 64 * 1024, 1 << 20])
def test_what_the_server_sends_arrives_whole_and_in_order(pki: dict[str, str], reader: str,
                                                          buffer_bytes: int) -> None:
    async def test() -> None:
        server, port = await started_server(pki)
        async with server:
            transport, application = await connect(pki, port, buffer_bytes)
            sizes = [1, 16 * 1024, 16 * 1024 + 1, 3 * 1024 * 1024 + 17, 5]
            application.wanted = sum(sizes)
            transport.writelines([f"send {size}\n".encode() for size in sizes])
            await application.enough
            assert bytes(application.received) == bytes(EchoServer.instances[0].sent)
            assert transport.get_extra_info("ssl_object").version() in ("TLSv1.2", "TLSv1.3")
            assert transport.get_extra_info("peername")[0] == "127.0.0.1"
            transport.close()
            assert await application.lost is None

    run(test)


def test_what_the_client_writes_arrives_whole(pki: dict[str, str], reader: str) -> None:
    async def test() -> None:
        server, port = await started_server(pki)
        async with server:
            transport, application = await connect(pki, port)
            payload = os.urandom(2 * 1024 * 1024).replace(b"\n", b"x")
            transport.write(b"head:")
            for start in range(0, len(payload), 256 * 1024):
                transport.write(memoryview(payload)[start:start + 256 * 1024])
            transport.writelines([b":tail", bytearray(b"\nsend 3\n")])
            application.wanted = 3
            await application.enough  # the server answers once it has read up to the request
            assert bytes(EchoServer.instances[0].received) == b"head:" + payload + b":tail\nsend 3\n"
            transport.close()
            await application.lost

    run(test)


def test_the_server_closing_the_session_ends_the_connection_cleanly(pki: dict[str, str], reader: str) -> None:
    async def test() -> None:
        server, port = await started_server(pki)
        async with server:
            transport, application = await connect(pki, port)
            transport.write(b"send 10\nclose\n")
            assert await application.lost is None
            assert len(application.received) == 10
            assert transport.is_closing()

    run(test)


@pytest.mark.parametrize("cafile, hostname", [("other_ca", "localhost"), ("ca", "not-this-host.example")])
def test_a_certificate_that_does_not_verify_fails_the_opening(pki: dict[str, str], reader: str,
                                                              cafile: str, hostname: str) -> None:
    async def test() -> None:
        server, port = await started_server(pki)
        async with server:
            with pytest.raises(ssl.SSLCertVerificationError):
                await tls_stream.open_tls_connection(lambda: Collector(4096), "127.0.0.1", port,
                                                     context=client_context(pki[cafile]), server_hostname=hostname)

    run(test)


def test_a_plaintext_server_fails_the_opening(pki: dict[str, str], reader: str) -> None:
    async def test() -> None:
        async def answer(reader_stream: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader_stream.read(100)
            writer.write(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
            await writer.drain()
            writer.close()

        server = await asyncio.start_server(answer, "127.0.0.1", 0)
        async with server:
            port = server.sockets[0].getsockname()[1]
            with pytest.raises((ssl.SSLError, ConnectionError)):
                await tls_stream.open_tls_connection(lambda: Collector(4096), "127.0.0.1", port,
                                                     context=client_context(pki["ca"]), server_hostname="localhost")

    run(test)


AfterHandshake = Callable[[ssl.SSLObject, ssl.MemoryBIO, asyncio.StreamWriter], bytes]


async def tls_by_hand(pki: dict[str, str], after_handshake: AfterHandshake) -> asyncio.Server:
    """A TCP server that runs TLS through its own SSLObject, then writes what ``after_handshake`` returns."""
    context = server_context(pki)

    async def serve(stream: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        tls = context.wrap_bio(incoming, outgoing, server_side=True)
        while True:
            try:
                tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                writer.write(outgoing.read())
                incoming.write(await stream.read(65536))
        writer.write(outgoing.read())
        writer.write(after_handshake(tls, outgoing, writer))
        await writer.drain()
        await stream.read(65536)  # until the client hangs up
        writer.close()

    return await asyncio.start_server(serve, "127.0.0.1", 0)


def test_a_damaged_record_ends_the_connection_with_the_tls_error(pki: dict[str, str], reader: str) -> None:
    def damaged(tls: ssl.SSLObject, outgoing: ssl.MemoryBIO, writer: asyncio.StreamWriter) -> bytes:
        tls.write(b"a" * 40_000)
        records = bytearray(outgoing.read())
        records[20_000] ^= 0x55  # inside the second record's ciphertext
        return bytes(records)

    async def test() -> None:
        async with await tls_by_hand(pki, damaged) as server:
            transport, application = await tls_stream.open_tls_connection(
                lambda: Collector(4096), "127.0.0.1", server.sockets[0].getsockname()[1],
                context=client_context(pki["ca"]), server_hostname="localhost")
            error = await application.lost
            assert isinstance(error, ssl.SSLError)
            assert bytes(application.received) == b"a" * len(application.received)
            assert len(application.received) < 40_000  # nothing from the damaged record or after it
            assert transport.is_closing()

    run(test)


def test_a_close_without_close_notify_is_an_error(pki: dict[str, str], reader: str) -> None:
    def truncated(tls: ssl.SSLObject, outgoing: ssl.MemoryBIO, writer: asyncio.StreamWriter) -> bytes:
        tls.write(b"b" * 100)
        records = outgoing.read()
        writer.write(records)
        writer.write_eof()  # TCP FIN with no close_notify
        return b""

    async def test() -> None:
        async with await tls_by_hand(pki, truncated) as server:
            _, application = await tls_stream.open_tls_connection(
                lambda: Collector(4096), "127.0.0.1", server.sockets[0].getsockname()[1],
                context=client_context(pki["ca"]), server_hostname="localhost")
            error = await application.lost
            assert isinstance(error, ssl.SSLError)
            assert bytes(application.received) == b"b" * 100

    run(test)


def test_the_compiled_reader_refuses_what_is_not_an_ssl_object() -> None:
    if tls_stream._COMPILED is None:
        pytest.skip("kafkalite.security._tls_records is not built")
    for thing in (None, object(), ssl.MemoryBIO()):
        with pytest.raises(TypeError):
            tls_stream._COMPILED.check(thing)
        with pytest.raises(TypeError):
            tls_stream._COMPILED.read_records(thing, bytearray(10))


def test_the_compiled_reader_is_used_wherever_the_extensions_are() -> None:
    """Built with the other extensions, it must also pass its layout probe on this Python."""
    if speedups.EXTENSION is None:
        pytest.skip("the C extensions are not in use (not built, or KAFKALITE_NO_EXTENSIONS=1)")
    assert tls_stream.records_reader_name() == "compiled"
