"""Delivery of coordination callbacks on the event loop: :class:`SerialDispatcher`, :class:`Watch`
and :class:`SessionListeners`.

Shared by both :class:`~kafkalite.coord.coordinator.Coordinator` implementations (kazoo-free).
A :class:`SerialDispatcher` delivers one registration's events (a watch, a session listener) in
order and one at a time; a :class:`Watch` is the handle a caller holds to cancel a watch.

Concurrency: a dispatcher is pushed to and closed on its loop's thread only. ``Watch.active``
may be read from any thread (kazoo's threads check it); ``Watch.cancel`` runs on the loop.
"""

from __future__ import annotations

import asyncio
import collections
import inspect
import logging
import threading
from collections.abc import Callable
from typing import Any

logger = logging.getLogger(__name__)


class SerialDispatcher:
    """Delivers one registration's events on the loop, in order, one at a time.

    ``push`` must be called on the loop thread. Plain callbacks run inline; a coroutine result
    is awaited in a task before the next queued event is delivered. A callback that raises is
    logged and the next event is delivered as usual.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, callback: Callable[..., Any],
                 description: str) -> None:
        self._loop = loop
        self._callback = callback
        self._description = description
        self._pending: collections.deque[tuple[Any, ...]] = collections.deque()
        self._draining = False
        self._closed = False
        self._task: asyncio.Future[Any] | None = None

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def busy(self) -> bool:
        """True while an event is queued or a callback is still running."""
        return not self._closed and (self._draining or bool(self._pending))

    def push(self, arguments: tuple[Any, ...]) -> None:
        if self._closed:
            return
        self._pending.append(arguments)
        if not self._draining:
            self._draining = True
            self._drain()

    def _drain(self) -> None:
        while self._pending and not self._closed:
            arguments = self._pending.popleft()
            try:
                result = self._callback(*arguments)
            except Exception:
                logger.exception("coordination callback for %s failed", self._description)
                continue
            if inspect.isawaitable(result):
                # The awaitable runs as its own task (so cancelling it before it started closes
                # the coroutine properly); the next event waits for it to finish.
                task = asyncio.ensure_future(result, loop=self._loop)
                self._task = task
                task.add_done_callback(self._after_callback)
                return
        self._draining = False

    def _after_callback(self, task: asyncio.Future[Any]) -> None:
        self._task = None
        if task.cancelled():
            self._draining = False
            return
        error = task.exception()
        if error is not None:
            logger.error("coordination callback for %s failed", self._description, exc_info=error)
        self._drain()

    def close(self) -> None:
        """Drop queued events and cancel a running callback (unless it is the caller)."""
        self._closed = True
        self._pending.clear()
        task = self._task
        try:
            current = asyncio.current_task()
        except RuntimeError:  # not on a running loop
            current = None
        if task is not None and not task.done() and task is not current:
            task.cancel()


class Watch:
    """Handle of a data or children watch registered with a coordinator.

    :meth:`cancel` stops delivery at once (call it on the loop thread); the implementation
    forgets the underlying watch at its next event.
    """

    def __init__(self, kind: str, path: str, dispatcher: SerialDispatcher) -> None:
        self.kind = kind
        self.path = path
        self._dispatcher = dispatcher
        self._cancelled = threading.Event()

    @property
    def active(self) -> bool:
        return not self._cancelled.is_set()

    @property
    def busy(self) -> bool:
        """True while a delivery is queued or its callback still runs."""
        return self.active and self._dispatcher.busy

    def cancel(self) -> None:
        self._cancelled.set()
        self._dispatcher.close()

    def _mark_cancelled(self) -> None:
        """Stop delivery without touching the dispatcher (safe from any thread)."""
        self._cancelled.set()

    def __repr__(self) -> str:
        state = "active" if self.active else "cancelled"
        return f"<Watch {self.kind} {self.path} {state}>"


class SessionListeners:
    """The session-state listeners of one coordinator client, each behind its own
    :class:`SerialDispatcher` (so one slow listener never delays another).

    Concurrency: loop thread only; the loop is the one the client runs on, or the running loop
    when a listener is added before the client starts.
    """

    def __init__(self) -> None:
        self._dispatchers: dict[Callable[..., Any], SerialDispatcher] = {}

    def add(self, loop: asyncio.AbstractEventLoop, listener: Callable[..., Any]) -> None:
        """Deliver every later state to ``listener`` (adding it twice changes nothing)."""
        if listener not in self._dispatchers:
            self._dispatchers[listener] = SerialDispatcher(loop, listener, "session listener")

    def remove(self, listener: Callable[..., Any]) -> None:
        dispatcher = self._dispatchers.pop(listener, None)
        if dispatcher is not None:
            dispatcher.close()

    def deliver(self, state: object) -> None:
        """Queue ``state`` for every listener."""
        for dispatcher in list(self._dispatchers.values()):
            dispatcher.push((state,))

    @property
    def busy(self) -> bool:
        """True while a delivery is queued or a listener still runs."""
        return any(dispatcher.busy for dispatcher in self._dispatchers.values())

    def close(self) -> None:
        """Stop every delivery (the client is stopping)."""
        for dispatcher in self._dispatchers.values():
            dispatcher.close()


__all__ = ["SerialDispatcher", "SessionListeners", "Watch"]
