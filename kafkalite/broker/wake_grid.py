"""Timer wake-ups on a shared grid, so an idle broker's timers fire together.

An idle broker still has periodic work: its stall watchdog, its sweeps and background jobs,
and the long polls of its followers' fetch sessions, which it answers empty at their deadline.
Each wake-up of an idle process costs far more than the work it does (on a virtual machine
about a millisecond of CPU: the halted CPU's exit, cold caches), so the count of separate
wake-ups, not their work, sets an idle broker's CPU. Timers here end on the points of one grid
of :data:`GRID_SECONDS` of the monotonic clock (shared by every process of a machine): the
timers of a broker, and those of the brokers it replicates with, end at the same instants and
share one wake-up, as the kernels' timer coalescing does for the same reason.

Concurrency: pure functions of the time they are given; callable from any thread.
"""

from __future__ import annotations

import math

#: The grid's step: periodic timers of at least this period end on its points.
GRID_SECONDS = 0.5


def delay_to_grid(now: float, period: float, grid: float = GRID_SECONDS) -> float:
    """Seconds from ``now`` to the next timer of a ``period``-long periodic job: the grid point
    nearest to ``now + period`` (the first one at least ``period`` less half a step away, so a
    job woken a little late keeps its period) when ``period`` is a grid step or more, else
    ``period`` itself (a short timer is not stretched)."""
    if period < grid:
        return period
    target = math.ceil((now + period - grid / 2) / grid) * grid
    return target - now


def deadline_on_grid(now: float, wait: float, grid: float = GRID_SECONDS) -> float:
    """The deadline of a wait of at most ``wait`` seconds starting ``now``: the last grid point
    within it when that leaves at least half the wait, else ``now + wait`` (the wait never
    grows, and a wait started just after a grid point ends on the next one)."""
    latest = now + wait
    aligned = math.floor(latest / grid) * grid
    return aligned if aligned >= now + wait / 2 else latest
