"""The bridge that lets the synchronous clients run the asyncio core: a private loop thread.

Each synchronous client (KafkaProducer, KafkaConsumer, KafkaAdminClient) owns one
:class:`LoopThread`: a daemon thread running its own event loop (uvloop when installed). The
client's async core lives on that loop; the user's thread calls into it with :meth:`run`
(await a coroutine there and wait for its result) or :meth:`call` (run a plain function
there). Nothing else crosses threads, except what the core documents as thread-safe (the
producer's accumulator append and its wake-up).

A call made *from* the loop thread itself (a producer callback that calls ``flush()``, say)
would wait for itself forever, so it raises IllegalStateError instead.

Concurrency: :meth:`run`, :meth:`call`, :meth:`call_soon` and :meth:`stop` may be called from
any thread; :meth:`stop` is idempotent.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from kafkalite.errors import IllegalStateError, KafkaTimeoutError

T = TypeVar("T")


def new_event_loop() -> asyncio.AbstractEventLoop:
    """uvloop's loop when the package is installed (faster sockets), else asyncio's."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is an optional extra
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


class LoopThread:
    """A daemon thread running one event loop for a synchronous client."""

    def __init__(self, name: str) -> None:
        self.loop = new_event_loop()
        self._started = threading.Event()
        self._stopped = False
        self._lock = threading.Lock()
        self.thread = threading.Thread(target=self._main, name=name, daemon=True)
        self.thread.start()
        self._started.wait()

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(self._started.set)
        try:
            self.loop.run_forever()
        finally:
            try:
                pending = [task for task in asyncio.all_tasks(self.loop) if not task.done()]
                for task in pending:
                    task.cancel()
                if pending:
                    self.loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
                self.loop.run_until_complete(self.loop.shutdown_asyncgens())
            finally:
                self.loop.close()

    @property
    def in_loop_thread(self) -> bool:
        return threading.current_thread() is self.thread

    def run(self, awaitable: Awaitable[T], timeout: float | None = None) -> T:
        """Run ``awaitable`` on the loop and wait for its result (its exception is re-raised).

        ``timeout`` (seconds) cancels it and raises KafkaTimeoutError.
        """
        if self.in_loop_thread:
            if asyncio.iscoroutine(awaitable):
                awaitable.close()
            raise IllegalStateError("a blocking client call was made from the client's own I/O thread "
                                    "(inside a callback); call it from another thread")
        if self._stopped:
            if asyncio.iscoroutine(awaitable):
                awaitable.close()
            raise IllegalStateError("the client is closed")
        future = asyncio.run_coroutine_threadsafe(_as_coroutine(awaitable), self.loop)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise KafkaTimeoutError(f"the call did not finish within {timeout:.3f} s") from None
        except BaseException:
            if not future.done():
                future.cancel()
            raise

    def call(self, function: Callable[..., T], *args: Any) -> T:
        """Run a plain function on the loop thread and return its result."""
        if self.in_loop_thread:
            return function(*args)

        async def invoke() -> T:
            return function(*args)

        return self.run(invoke())

    def call_soon(self, function: Callable[..., Any], *args: Any) -> None:
        """Schedule ``function`` on the loop without waiting (thread-safe); ignored once stopped."""
        if self._stopped:
            return
        try:
            self.loop.call_soon_threadsafe(function, *args)
        except RuntimeError:  # the loop closed meanwhile
            pass

    def stop(self) -> None:
        """Stop the loop (cancelling what still runs on it) and join the thread."""
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
        try:
            self.loop.call_soon_threadsafe(self.loop.stop)
        except RuntimeError:
            return
        if not self.in_loop_thread:
            self.thread.join(30)


async def _as_coroutine(awaitable: Awaitable[T]) -> T:
    return await awaitable
