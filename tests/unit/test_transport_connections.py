"""The client transport's channels: one never leaves a socket behind (a channel whose opening is
cancelled, or that opens after the transport was closed, is closed and the broker side sees its
end), and its buffered reader delivers every answer whole and in order however the socket cuts
the stream (handshake, small and large frames, fragments, control frames), refusing what a
broker must not send."""

from __future__ import annotations

import asyncio
import base64
import hashlib
from collections.abc import Callable, Iterable

import pytest
from hypothesis import given, settings, strategies as st

from kafkalite import protocol
from kafkalite.errors import KafkaConnectionError, MessageSizeTooLargeError, SaslAuthenticationFailedError
from kafkalite.transport import PIECE_BYTES, PIECED_MESSAGE_BYTES, AsyncTransport, PipelinedConnection, write_message


class SilentBroker:
    """Accepts connections, reads what comes and never answers (a WebSocket upgrade hangs)."""

    def __init__(self) -> None:
        self.accepted = asyncio.Event()
        self.ended = asyncio.Event()
        self.server: asyncio.Server | None = None

    async def __aenter__(self) -> str:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return f"127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted.set()
        while await reader.read(65536):
            pass
        self.ended.set()  # the client closed its socket
        writer.close()


@pytest.mark.parametrize("interruption", ["cancelled", "transport closed"])
def test_a_channel_opening_that_is_interrupted_closes_its_socket(interruption: str) -> None:
    async def scenario() -> None:
        broker = SilentBroker()
        async with broker as address:
            transport = AsyncTransport(connect_timeout_ms=30_000 if interruption == "cancelled" else 200)
            opening = asyncio.ensure_future(transport.connection(address))
            await asyncio.wait_for(broker.accepted.wait(), 10)
            if interruption == "cancelled":
                opening.cancel()
            else:
                await transport.close()
            with pytest.raises(asyncio.CancelledError if interruption == "cancelled" else KafkaConnectionError):
                await opening
            await asyncio.wait_for(broker.ended.wait(), 10)
            await transport.close()

    asyncio.run(scenario())


# -- reading answers: the buffered parser of PipelinedConnection -----------------------------------

class RecordingTransport(asyncio.Transport):
    """Keeps what the connection writes; never sends anything."""

    def __init__(self) -> None:
        super().__init__()
        self.written: list[bytes] = []
        self.closing = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.written.append(bytes(data))

    def writelines(self, pieces: Iterable[bytes | bytearray | memoryview]) -> None:
        self.written.append(b"".join(bytes(piece) for piece in pieces))

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        self.closing = True


def _server_frame(opcode: int, payload: bytes, final: bool = True) -> bytes:
    first = (0x80 if final else 0) | opcode
    if len(payload) < 126:
        head = bytes([first, len(payload)])
    elif len(payload) < 65536:
        head = bytes([first, 126]) + len(payload).to_bytes(2, "big")
    else:
        head = bytes([first, 127]) + len(payload).to_bytes(8, "big")
    return head + payload


def _answer(status: int, body: bytes) -> bytes:
    return _server_frame(0x2, status.to_bytes(2, "big") + body)


def _upgrade(connection: PipelinedConnection) -> bytes:
    key = connection._key  # the key the connection sent in its opening
    accept = base64.b64encode(hashlib.sha1(key + b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11").digest())
    return (b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            b"Sec-WebSocket-Accept: " + accept + b"\r\n\r\n")


def _feed(connection: PipelinedConnection, stream: bytes, cuts: list[int]) -> None:
    """Hand ``stream`` to the connection as a socket would: cut at ``cuts``, each read at most
    as large as the buffer the connection offers."""
    position = 0
    for end in [*sorted({cut for cut in cuts if cut < len(stream)}), len(stream)]:
        while position < end:
            buffer = connection.get_buffer(-1)
            assert len(buffer) > 0, "the connection must always offer room to read into"
            count = min(len(buffer), end - position)
            buffer[:count] = stream[position:position + count]
            connection.buffer_updated(count)
            position += count


async def _open_channel() -> tuple[PipelinedConnection, RecordingTransport]:
    """A connection whose opening the broker accepted, ready for requests."""
    connection = PipelinedConnection("127.0.0.1:1", 10_000, "test")
    transport = RecordingTransport()
    connection.connection_made(transport)
    _feed(connection, _upgrade(connection), [])
    await connection.wait_ready(1)
    return connection, transport


def _answers_in_order(stream_of: Callable[[PipelinedConnection], bytes], bodies: list[bytes],
                      cuts: list[int]) -> list[tuple[int, bytes]]:
    async def scenario() -> list[tuple[int, bytes]]:
        connection = PipelinedConnection("127.0.0.1:1", 10_000, "test")
        transport = RecordingTransport()
        connection.connection_made(transport)
        stream = stream_of(connection)
        handshake_end = len(_upgrade(connection))
        _feed(connection, stream[:handshake_end], [cut for cut in cuts if cut < handshake_end])
        await connection.wait_ready(1)
        futures = [connection.submit(protocol.FETCH, [b"request"]) for _ in bodies]
        _feed(connection, stream[handshake_end:], [cut - handshake_end for cut in cuts if cut > handshake_end])
        results = []
        for future in futures:
            status, body = await future
            results.append((status, bytes(body)))
        assert not connection.closed, connection.close_reason
        connection.close()
        return results

    return asyncio.run(scenario())


BODIES = [b"small", b"", b"x" * 200, bytes(range(256)) * 300, b"y" * 70_000, b"z" * 1_000_000, b"tail"]


def test_answers_split_anywhere_arrive_whole_and_in_order() -> None:
    def stream(connection: PipelinedConnection) -> bytes:
        # a ping and a pong between the answers are answered or ignored, never delivered
        frames = [_answer(200 + index, body) for index, body in enumerate(BODIES)]
        frames.insert(2, _server_frame(0x9, b"ping"))
        frames.insert(5, _server_frame(0xA, b""))
        return _upgrade(connection) + b"".join(frames)

    expected = [(200 + index, body) for index, body in enumerate(BODIES)]
    assert _answers_in_order(stream, BODIES, []) == expected
    assert _answers_in_order(stream, BODIES, list(range(1, 2_000_000, 7_919))) == expected
    assert _answers_in_order(stream, BODIES, list(range(1, 400))) == expected  # the handshake byte by byte


@settings(max_examples=60, deadline=None)
@given(cuts=st.lists(st.integers(min_value=1, max_value=1_400_000), max_size=40))
def test_answers_arrive_whole_wherever_reads_end(cuts: list[int]) -> None:
    bodies = [b"a" * 10, b"b" * 65_535, b"c" * 65_536, b"d" * 300_000, b"e", b"f" * 1_000_000]

    def stream(connection: PipelinedConnection) -> bytes:
        return _upgrade(connection) + b"".join(_answer(200, body) for body in bodies)

    assert _answers_in_order(stream, bodies, cuts) == [(200, body) for body in bodies]


def test_a_large_answer_is_not_copied_after_it_arrives() -> None:
    """A large answer's body is a view of the buffer the socket read into."""
    async def scenario() -> None:
        connection, _ = await _open_channel()
        future = connection.submit(protocol.FETCH, [b"request"])
        _feed(connection, _answer(200, b"r" * 500_000), [1000])
        status, body = await future
        assert status == 200 and isinstance(body, memoryview) and body.nbytes == 500_000
        connection.close()

    asyncio.run(scenario())


def test_a_fragmented_answer_and_a_close_frame() -> None:
    def stream(connection: PipelinedConnection) -> bytes:
        message = (200).to_bytes(2, "big") + b"p" * 100_000
        return (_upgrade(connection) + _server_frame(0x2, message[:70_000], final=False)
                + _server_frame(0x0, message[70_000:]))

    assert _answers_in_order(stream, [b"p" * 100_000], [5, 3000, 80_000]) == [(200, b"p" * 100_000)]

    async def closed() -> None:
        connection, transport = await _open_channel()
        future = connection.submit(protocol.FETCH, [b"request"])
        _feed(connection, _server_frame(0x8, (1009).to_bytes(2, "big") + b"too big"), [])
        with pytest.raises(MessageSizeTooLargeError):
            await future
        assert connection.closed and transport.closing

    asyncio.run(closed())


@pytest.mark.parametrize("head, error", [
    (b"HTTP/1.1 401 Unauthorized\r\n\r\n", "refused the binary channel's credentials"),
    (b"HTTP/1.1 404 Not Found\r\n\r\n", "refused the binary channel"),
    (b"HTTP/1.1 101 Switching Protocols\r\nSec-WebSocket-Accept: wrong\r\n\r\n", "wrong accept key"),
    (b"HTTP/1.1 101 " + b"x" * 70_000, "oversized response head"),
])
def test_a_refused_or_bad_handshake_closes_the_channel(head: bytes, error: str) -> None:
    async def scenario() -> None:
        connection = PipelinedConnection("127.0.0.1:1", 10_000, "test")
        connection.connection_made(RecordingTransport())
        _feed(connection, head, [20])
        assert connection.closed and error in connection.close_reason
        with pytest.raises((KafkaConnectionError, SaslAuthenticationFailedError)):
            await connection.wait_ready(1)

    asyncio.run(scenario())


def test_a_masked_frame_from_the_broker_closes_the_channel() -> None:
    async def scenario() -> None:
        connection, _ = await _open_channel()
        future = connection.submit(protocol.FETCH, [b"request"])
        _feed(connection, bytes([0x82, 0x85]) + b"\0\0\0\0" + b"hello", [])
        with pytest.raises(KafkaConnectionError, match="masked frame"):
            await future

    asyncio.run(scenario())


class _RecordingTransport:
    """Records each write call: ``("write", bytes)`` or ``("writelines", [bytes, ...])``."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, object]] = []

    def write(self, data: object) -> None:
        self.calls.append(("write", bytes(data)))  # type: ignore[call-overload]

    def writelines(self, pieces: list[object]) -> None:
        self.calls.append(("writelines", [bytes(piece) for piece in pieces]))  # type: ignore[call-overload]


def test_a_short_message_is_one_writelines_and_a_long_one_goes_in_slices_in_order() -> None:
    short = _RecordingTransport()
    write_message(short, b"H", [b"ab", b"cd"], 4)  # type: ignore[arg-type]
    assert short.calls == [("writelines", [b"H", b"ab", b"cd"])]

    payload = [bytes(range(256)) * (PIECE_BYTES // 256 + 3), b"tail", bytearray(b"x" * PIECED_MESSAGE_BYTES)]
    length = sum(len(piece) for piece in payload)
    long = _RecordingTransport()
    write_message(long, b"HEAD", payload, length)  # type: ignore[arg-type]
    kinds = {kind for kind, _ in long.calls}
    written = [data for _, data in long.calls]
    assert kinds == {"write"} and written[0] == b"HEAD"
    assert all(0 < len(data) <= PIECE_BYTES for data in written[1:])  # type: ignore[arg-type]
    assert b"".join(written[1:]) == b"".join(payload)  # type: ignore[arg-type]
    assert len(written) == 1 + 2 + 1 + 1  # the first piece in two slices, then the tail, then the last
