"""ProcessClock (kafkalite.broker.process_clock) tells a stopped process from a busy or blocked
event loop: the first may have lost its ZooKeeper session, the second has not."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

from kafkalite.broker.process_clock import TICK_SECONDS, ProcessClock

CLOCK_PROCESS = textwrap.dedent("""
    import sys
    from kafkalite.broker.process_clock import ProcessClock

    clock = ProcessClock()
    clock.start()
    clock.stopped_for()
    print("ready", flush=True)
    sys.stdin.readline()
    print(f"{clock.stopped_for():.3f}", flush=True)
""")


def test_a_blocked_or_busy_caller_is_not_a_stopped_process() -> None:
    clock = ProcessClock()
    clock.start()
    try:
        clock.stopped_for()
        time.sleep(0.6)  # the caller (the event loop) blocked: the process goes on
        assert clock.stopped_for() < 0.2
        busy_until = time.monotonic() + 0.6
        while time.monotonic() < busy_until:  # the caller busy on the CPU, holding the GIL in turns
            sum(range(1000))
        assert clock.stopped_for() < 0.2
    finally:
        clock.stop()


def test_a_stopped_process_is_seen_after_it_goes_on() -> None:
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    with subprocess.Popen([sys.executable, "-c", CLOCK_PROCESS], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                          text=True, env=environment) as process:
        try:
            assert process.stdout is not None and process.stdin is not None
            assert process.stdout.readline().strip() == "ready"
            process.send_signal(signal.SIGSTOP)
            time.sleep(2.0)  # the stop being measured, not a wait for something to happen
            process.send_signal(signal.SIGCONT)
            process.stdin.write("go\n")
            process.stdin.flush()
            stopped = float(process.stdout.readline())
            # A stop is measured from the tick due within it: to within one and a half ticks.
            assert 2.0 - 1.5 * TICK_SECONDS - 0.05 <= stopped < 6.0, stopped
        finally:
            process.kill()
