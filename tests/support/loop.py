"""Running async test scenarios and recording the callbacks they receive.

Shared by the coordination contract suite and the real-ZooKeeper client tests.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

_Result = TypeVar("_Result")

#: How long a test waits for one expected callback before it fails.
EVENT_TIMEOUT = 20.0


def run(scenario: Callable[[], Awaitable[_Result]], timeout: float = 90.0) -> _Result:
    """Run one async scenario on a fresh event loop, bounded in time."""

    async def bounded() -> _Result:
        return await asyncio.wait_for(scenario(), timeout)

    return asyncio.run(bounded())


class Recorder:
    """Collects callback arguments on the loop, with the thread each call ran on."""

    def __init__(self) -> None:
        self.loop_thread = threading.current_thread()
        self.queue: asyncio.Queue[tuple[Any, ...]] = asyncio.Queue()
        self.threads: list[threading.Thread] = []

    def record(self, *arguments: Any) -> None:
        self.threads.append(threading.current_thread())
        self.queue.put_nowait(arguments)

    async def record_async(self, *arguments: Any) -> None:
        await asyncio.sleep(0)
        self.record(*arguments)

    async def next(self, timeout: float = EVENT_TIMEOUT) -> tuple[Any, ...]:
        return await asyncio.wait_for(self.queue.get(), timeout)

    def drain(self) -> list[tuple[Any, ...]]:
        """Everything recorded and not yet consumed, without waiting."""
        drained: list[tuple[Any, ...]] = []
        while not self.queue.empty():
            drained.append(self.queue.get_nowait())
        return drained

    async def nothing_within(self, seconds: float) -> bool:
        """True when nothing is recorded within ``seconds`` (the absence under test)."""
        try:
            await asyncio.wait_for(self.queue.get(), seconds)
        except TimeoutError:
            return True
        return False

    def assert_all_on_loop_thread(self) -> None:
        assert self.threads, "no callback ran"
        assert all(thread is self.loop_thread for thread in self.threads), self.threads
