"""The broker's wake-up grid (broker/wake_grid.py): periodic timers and long-poll deadlines end
on shared grid points, never stretch a wait, and keep a periodic job's period."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, strategies as st

from kafkalite.broker.wake_grid import GRID_SECONDS, deadline_on_grid, delay_to_grid

moments = st.floats(min_value=0.0, max_value=1e7, allow_nan=False)


def on_grid(moment: float) -> bool:
    steps = moment / GRID_SECONDS
    return math.isclose(steps, round(steps), abs_tol=1e-6)


@given(moments, st.sampled_from([0.5, 1.0, 3.0, 5.0, 15.0, 300.0]))
def test_a_periodic_timer_ends_on_the_grid_within_half_a_step_of_its_period(now: float, period: float) -> None:
    delay = delay_to_grid(now, period)
    assert on_grid(now + delay)
    assert period - GRID_SECONDS / 2 - 1e-6 <= delay <= period + GRID_SECONDS / 2 + 1e-6


@given(moments, st.floats(min_value=0.001, max_value=GRID_SECONDS * 0.999))
def test_a_timer_shorter_than_a_step_is_left_alone(now: float, period: float) -> None:
    assert delay_to_grid(now, period) == period


def test_a_job_woken_late_or_early_keeps_its_rhythm() -> None:
    for woken in (10.0, 10.002, 9.9995, 10.2):
        assert delay_to_grid(woken, 1.0) + woken == 11.0
    assert 10.0 + delay_to_grid(10.0, 0.5) == 10.5


@given(moments, st.floats(min_value=0.001, max_value=30.0))
def test_a_long_poll_never_waits_longer_and_at_least_half_its_wait(now: float, wait: float) -> None:
    deadline = deadline_on_grid(now, wait)
    assert now + wait / 2 - 1e-6 <= deadline <= now + wait + 1e-6
    if wait >= GRID_SECONDS * 2:
        assert on_grid(deadline)  # a grid point always lies in the second half of such a wait


def test_a_long_poll_started_just_after_a_grid_point_ends_on_the_next_ones() -> None:
    assert deadline_on_grid(100.001, 0.5) == 100.5  # replica.fetch.wait.max.ms=500: every session in step
    assert deadline_on_grid(100.3, 0.5) == pytest.approx(100.8)  # too far from a grid point: the wait as asked
    assert deadline_on_grid(100.001, 0.2) == pytest.approx(100.201)
