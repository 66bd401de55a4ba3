"""How long the whole broker process was stopped (SIGSTOP, swapping, a paused VM), told apart
from a busy event loop.

A process that was stopped for a while may have lost its ZooKeeper session, and its leadership
with it, without knowing yet: kazoo's connection thread sent no ping either. An event loop that
was only busy (thousands of partition changes at once on a loaded machine) ran late, but the
process went on, kazoo's thread pinging ZooKeeper, so its session and what it knows still hold;
the loop's own lateness cannot tell the two apart. :class:`ProcessClock` is a daemon thread that
ticks every :data:`TICK_SECONDS` (on :mod:`kafkalite.broker.wake_grid`); a long gap between two
of its ticks, or a tick long overdue, means the process itself was not running.

Concurrency: the clock's thread writes the tick times; :meth:`ProcessClock.stopped_for` is called
from any thread (the broker's event loop), under the clock's lock.
"""

from __future__ import annotations

import threading
import time

from kafkalite.broker.wake_grid import GRID_SECONDS, delay_to_grid

#: How often the clock's thread ticks, on the broker's wake-up grid: a stop is measured to
#: within this (the broker fences after stops of a second or more).
TICK_SECONDS = GRID_SECONDS


class ProcessClock:
    """A daemon thread whose ticks show when the process was not running (see the module)."""

    def __init__(self, tick_seconds: float = TICK_SECONDS) -> None:
        self._tick_seconds = tick_seconds
        self._lock = threading.Lock()
        self._last_tick = time.monotonic()
        self._longest_gap = 0.0
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kafkalite-process-clock", daemon=True)

    def start(self) -> None:
        with self._lock:
            self._last_tick = time.monotonic()
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()

    def _run(self) -> None:
        while not self._stopping.wait(delay_to_grid(time.monotonic(), self._tick_seconds)):
            now = time.monotonic()
            with self._lock:
                self._longest_gap = max(self._longest_gap, now - self._last_tick - self._tick_seconds)
                self._last_tick = now

    def stopped_for(self) -> float:
        """The longest time, in seconds, the process was not running since the last call: the
        longest gap between two ticks beyond the tick interval, or the time since the last tick
        when that is longer (the thread has not run yet since the process went on)."""
        now = time.monotonic()
        with self._lock:
            longest = max(self._longest_gap, now - self._last_tick - self._tick_seconds)
            self._longest_gap = 0.0
        return max(0.0, longest)
