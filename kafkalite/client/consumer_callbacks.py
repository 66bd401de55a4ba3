"""Where a consumer's user callbacks run: :class:`CallbackRunner` (the asyncio consumer's way:
on the core's event loop, coroutine results awaited) and :class:`CallerThreadCallbacks` (the
blocking consumer's way: on the user's thread that is blocked in a consumer call).

The rebalance listener and the commit callbacks are called by the consumer core
(:mod:`.consumer_core`) and the group membership (:mod:`.group`) from the core's event loop,
always through ``await runner.run(function, *args)``; the runner decides which thread executes
the function.

Concurrency: :meth:`CallbackRunner.run` is awaited on the core's loop.
:class:`CallerThreadCallbacks` is thread-safe: :meth:`CallerThreadCallbacks.call` runs on the
user's thread (never the loop thread) and serves the callback requests the loop's coroutines
queue meanwhile; a lock guards the stack of waiting user threads.
"""

from __future__ import annotations

import asyncio
import inspect
import queue
import threading
from collections.abc import Callable
from typing import Any

from kafkalite.client._loop import LoopThread
from kafkalite.errors import IllegalStateError


class CallbackRunner:
    """Where user callbacks (rebalance listener, commit callbacks) run: here, on the core's event
    loop, awaiting a coroutine result — the asyncio consumer's way."""

    async def run(self, function: Callable[..., Any], *args: Any) -> Any:
        result = function(*args)
        if inspect.isawaitable(result):
            result = await result
        return result


class CallerThreadCallbacks(CallbackRunner):
    """The sync consumer's way: a callback runs on the user's thread that is blocked in a consumer
    call (``poll()``, ``close()``, ``commit()``...), as Kafka's Java client runs the rebalance
    listener inside ``poll()``; the listener may therefore call the consumer again.

    :meth:`call` is used by that thread: it runs the core coroutine on the loop and serves the
    callback requests the coroutine makes meanwhile. Nested calls (a listener calling
    ``commit()``) stack. A request made while no user thread waits runs on the loop.
    Thread-safe.
    """

    def __init__(self, loop_thread: LoopThread) -> None:
        self.loop_thread = loop_thread
        self._inboxes: list[queue.SimpleQueue[Any]] = []
        self._lock = threading.Lock()

    async def run(self, function: Callable[..., Any], *args: Any) -> Any:
        with self._lock:
            inbox = self._inboxes[-1] if self._inboxes else None
        if inbox is None:
            return await super().run(function, *args)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        inbox.put((function, args, future))
        return await future

    def call(self, coroutine: Any) -> Any:
        if self.loop_thread.in_loop_thread:
            coroutine.close()
            raise IllegalStateError("a blocking consumer call was made from the consumer's own I/O thread; "
                                    "call it from another thread")
        loop = self.loop_thread.loop
        inbox: queue.SimpleQueue[Any] = queue.SimpleQueue()
        with self._lock:
            self._inboxes.append(inbox)
        try:
            done = asyncio.run_coroutine_threadsafe(coroutine, loop)
            done.add_done_callback(lambda _: inbox.put(None))
            try:
                while True:
                    item = inbox.get()
                    if item is None:
                        break
                    self._serve(loop, item)
            except BaseException:
                done.cancel()
                raise
            return done.result()
        finally:
            with self._lock:
                self._inboxes.remove(inbox)
            while True:  # requests that raced the end of the call
                try:
                    item = inbox.get_nowait()
                except queue.Empty:
                    break
                if item is not None:
                    self._serve(loop, item)

    @staticmethod
    def _serve(loop: asyncio.AbstractEventLoop, item: tuple[Callable[..., Any], tuple[Any, ...], Any]) -> None:
        function, args, future = item
        try:
            result = function(*args)
        except BaseException as exc:  # handed back to the coroutine that asked
            loop.call_soon_threadsafe(_settle, future, None, exc)
        else:
            loop.call_soon_threadsafe(_settle, future, result, None)


def _settle(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.done():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)
