"""The client transport never leaves a socket behind: a channel whose opening is cancelled, or
that opens after the transport was closed, is closed (the broker side sees its end)."""

from __future__ import annotations

import asyncio

import pytest

from kafkalite.errors import KafkaConnectionError
from kafkalite.transport import AsyncTransport


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
