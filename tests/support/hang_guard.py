"""A hard stop for a test that outlives its timeout, and for a test process that does not exit.

pytest-timeout's signal method raises in the test once its timeout is up, and then lets the
test's teardown run with no limit: a teardown waiting on what hung the test (a thread, a
session, a process) would hold its worker, and the whole run, for good. So each test also gets
a watchdog thread, armed for its timeout plus :data:`GRACE_SECONDS`: when it fires, the process
prints every thread's stack to its standard error (which pytest-xdist workers share with the
run's output), kills the processes it started, and exits. pytest-xdist reports the test as the
one its worker crashed in and carries on with a new worker, so the run ends, red, with the
stack that shows what hung. The same watchdog guards the end of a test process
(:data:`EXIT_SECONDS` after pytest is done with it), where a thread nobody stopped would keep
it from exiting.

Concurrency: the watchdog runs on a daemon thread of its own; arming and cancelling happen on
the test's thread.
"""

from __future__ import annotations

import faulthandler
import os
import signal
import sys
import threading
from collections.abc import Generator
from pathlib import Path

import pytest

#: How long past its own timeout a test (teardown included) may run before its process is ended.
GRACE_SECONDS = 120.0
#: How long a test process may take to exit once pytest is done with it.
EXIT_SECONDS = 120.0
#: The exit status of a process the watchdog ended.
HUNG_EXIT_STATUS = 70


def _descendants(root: int) -> list[int]:
    """The processes below ``root`` (children first), read from /proc."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        children.setdefault(int(fields[1]), []).append(int(entry.name))
    found: list[int] = []
    pending = [root]
    while pending:
        for child in children.get(pending.pop(), []):
            found.append(child)
            pending.append(child)
    return found


_config: pytest.Config | None = None


def _release_capture() -> None:
    """Give standard error back to the process (pytest captures it around each test)."""
    capture = _config.pluginmanager.getplugin("capturemanager") if _config is not None else None
    if capture is not None:
        try:
            capture.suspend_global_capture(in_=False)
        except Exception:  # the process ends next: its stack is what counts
            pass


def _end_process(what: str) -> None:
    """Print ``what`` and every thread's stack, SIGKILL every descendant, and exit at once."""
    try:
        _release_capture()
        os.write(2, f"\n*** hang guard: {what}; the stack of every thread of process {os.getpid()} "
                    f"follows, then the process and the processes it started are killed\n".encode())
        faulthandler.dump_traceback(file=sys.__stderr__ or sys.stderr, all_threads=True)
        for pid in _descendants(os.getpid()):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                continue
    finally:
        os._exit(HUNG_EXIT_STATUS)


def _arm(seconds: float, what: str) -> threading.Timer:
    timer = threading.Timer(seconds, _end_process, args=(what,))
    timer.daemon = True
    timer.name = "hang-guard"
    timer.start()
    return timer


def timeout_of(item: pytest.Item) -> float:
    """The timeout pytest-timeout applies to ``item`` (0: none)."""
    marker = item.get_closest_marker("timeout")
    if marker is not None and marker.args:
        return float(marker.args[0])
    if marker is not None and "timeout" in marker.kwargs:
        return float(marker.kwargs["timeout"])
    return float(item.config.getini("timeout") or 0)


def pytest_configure(config: pytest.Config) -> None:
    global _config
    _config = config


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, None, None]:
    timeout = timeout_of(item)
    timer = None
    if timeout > 0:
        timer = _arm(timeout + GRACE_SECONDS,
                     f"{item.nodeid} is still running {timeout + GRACE_SECONDS:.0f} s after it started "
                     f"(its timeout is {timeout:.0f} s)")
    try:
        yield
    finally:
        if timer is not None:
            timer.cancel()


def pytest_unconfigure(config: pytest.Config) -> None:
    global _config
    _config = None
    _arm(EXIT_SECONDS, f"the test process has not exited {EXIT_SECONDS:.0f} s after its tests ended")
