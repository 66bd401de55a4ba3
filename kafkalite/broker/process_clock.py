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

#: How often the clock's thread ticks, on the broker's wake-up grid: a stop is measured from
#: the tick due within it, so to within one and a half ticks (the broker fences after stops of
#: a second or more).
TICK_SECONDS = GRID_SECONDS


class ProcessClock:
    """A daemon thread whose ticks show when the process was not running (see the module)."""

    def __init__(self, tick_seconds: float = TICK_SECONDS) -> None:
        self._tick_seconds = tick_seconds
        self._lock = threading.Lock()
        # When the next tick is due (the thread sets it before each wait), and the latest any
        # tick came since the last stopped_for().
        self._due = time.monotonic() + 2 * tick_seconds
        self._longest_lateness = 0.0
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kafkalite-process-clock", daemon=True)

    def start(self) -> None:
        with self._lock:
            self._due = time.monotonic() + 2 * self._tick_seconds
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()

    def _run(self) -> None:
        while True:
            delay = delay_to_grid(time.monotonic(), self._tick_seconds)
            with self._lock:
                self._due = time.monotonic() + delay
            if self._stopping.wait(delay):
                return
            now = time.monotonic()
            with self._lock:
                self._longest_lateness = max(self._longest_lateness, now - self._due)

    def stopped_for(self) -> float:
        """The longest time, in seconds, the process was not running since the last call: how
        late the latest tick came, or how overdue the next one is when that is longer (the
        thread has not run yet since the process went on)."""
        now = time.monotonic()
        with self._lock:
            longest = max(self._longest_lateness, now - self._due)
            self._longest_lateness = 0.0
        return max(0.0, longest)
