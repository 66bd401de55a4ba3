"""The hang guard (tests/support/hang_guard.py) ends a test process whose test outlives its
timeout, or which does not exit, with every thread's stack printed; and leaves alone one that
keeps to its timeout. Each case runs pytest on a small test file in a process of its own."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from tests.support.hang_guard import HUNG_EXIT_STATUS

REPOSITORY = Path(__file__).resolve().parents[2]

CONFTEST = """
from tests.support import hang_guard
from tests.support.hang_guard import pytest_configure, pytest_runtest_protocol, pytest_unconfigure  # noqa: F401

hang_guard.GRACE_SECONDS = 1.0
hang_guard.EXIT_SECONDS = 1.0
"""


def _run_pytest(tmp_path: Path, test_source: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_case.py").write_text(textwrap.dedent(test_source))
    environment = {**os.environ, "PYTHONPATH": str(REPOSITORY)}
    environment.pop("PYTEST_XDIST_WORKER", None)
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
                           "--rootdir", str(tmp_path), str(tmp_path / "test_case.py")],
                          cwd=tmp_path, env=environment, capture_output=True, text=True, timeout=120)


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_a_teardown_that_hangs_after_the_timeout_ends_its_process_and_the_processes_it_started(
        tmp_path: Path) -> None:
    child_file = tmp_path / "child.pid"
    finished = _run_pytest(tmp_path, f"""
        import subprocess
        import threading

        import pytest

        @pytest.fixture
        def stuck_teardown():
            child = subprocess.Popen(["sleep", "300"])
            open({str(child_file)!r}, "w").write(str(child.pid))
            yield
            threading.Event().wait()  # what hung the test holds its teardown too

        @pytest.mark.timeout(1)
        def test_hangs(stuck_teardown):
            threading.Event().wait()
    """)
    assert finished.returncode == HUNG_EXIT_STATUS, finished.stdout + finished.stderr
    assert "hang guard: test_case.py::test_hangs is still running 2 s after it started (its timeout is 1 s)" \
        in finished.stderr
    assert "stuck_teardown" in finished.stderr  # the stack shows where it hung
    child = int(child_file.read_text())
    deadline = time.monotonic() + 10
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(child)


def test_a_process_that_does_not_exit_after_its_tests_is_ended(tmp_path: Path) -> None:
    finished = _run_pytest(tmp_path, """
        import threading

        def test_leaves_a_thread_behind():
            threading.Thread(target=threading.Event().wait, name="left-behind").start()
    """)
    assert finished.returncode == HUNG_EXIT_STATUS, finished.stdout + finished.stderr
    assert "1 passed" in finished.stdout
    assert "has not exited 1 s after its tests ended" in finished.stderr
    assert "Thread 0x" in finished.stderr and "in wait" in finished.stderr


def test_tests_within_their_timeout_are_left_alone(tmp_path: Path) -> None:
    """Three tests of 0.8 s, each within its 1 s timeout: together they outlast one timeout plus
    the grace, and each has a watchdog of its own."""
    finished = _run_pytest(tmp_path, """
        import time

        import pytest

        @pytest.mark.timeout(1)
        @pytest.mark.parametrize("number", [1, 2, 3])
        def test_quick(number):
            time.sleep(0.8)
    """)
    assert finished.returncode == 0, finished.stdout + finished.stderr
    assert "3 passed" in finished.stdout
    assert "hang guard" not in finished.stderr
