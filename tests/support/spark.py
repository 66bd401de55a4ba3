"""One shared local[2] SparkSession for the whole test run.

:func:`shared_spark_session` starts the session on first use (a JVM of about half a GiB that
takes 10–30 s to start, so every Spark test shares it) and registers the ``kafkalite`` data
source; the session-scoped ``spark`` fixture hands it out and stops it when the test run ends.
Python workers run this interpreter (PYSPARK_PYTHON) with the repository on PYTHONPATH, so
they import this checkout's ``kafkalite`` and the ``pyspark_kafkalite`` shim.

:class:`SparkDriverProcess` runs a Spark driver program (``tests/support/spark_copy_driver.py``)
in a process of its own, with its own JVM, so a fault test can kill the whole driver (Python,
JVM and Python workers) with -9 and start it again from its checkpoint.

Concurrency: the session lives in the test process; tests use it one at a time.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
_SESSION: Any = None


def _prepare_environment() -> None:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    paths = [str(ROOT)] + [item for item in os.environ.get("PYTHONPATH", "").split(os.pathsep) if item]
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))


def session_builder(app_name: str) -> Any:
    """A local[2] SparkSession builder with the tests' settings (loopback only, no UI)."""
    _prepare_environment()
    from pyspark.sql import SparkSession

    return (SparkSession.builder.master("local[2]").appName(app_name)
            .config("spark.ui.enabled", "false")
            .config("spark.driver.host", "127.0.0.1")
            .config("spark.driver.bindAddress", "127.0.0.1")
            .config("spark.driver.memory", "1g")
            .config("spark.sql.shuffle.partitions", "2")
            .config("spark.sql.streaming.forceDeleteTempCheckpointLocation", "true")
            .config("spark.sql.adaptive.enabled", "false"))


def shared_spark_session() -> Any:
    """The test run's SparkSession, started on first call."""
    global _SESSION
    if _SESSION is None:
        _prepare_environment()
        from kafkalite.spark import register

        session = session_builder("kafkalite-tests").getOrCreate()
        session.sparkContext.setLogLevel("ERROR")
        register(session)
        _SESSION = session
    return _SESSION


def stop_shared_spark_session() -> None:
    global _SESSION
    if _SESSION is not None:
        for query in _SESSION.streams.active:
            query.stop()
        _SESSION.stop()
        _SESSION = None


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """The shared SparkSession (started lazily, stopped at the end of the test run)."""
    try:
        yield shared_spark_session()
    finally:
        stop_shared_spark_session()


def _session_members(session_id: int) -> list[int]:
    """Ids of the live processes of a session (the driver, its JVM, the JVM's Python workers:
    PySpark's worker daemon moves to its own process group but stays in the session)."""
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        # after the command name: state, ppid, pgrp, session; zombies are gone already
        if int(fields[3]) == session_id and fields[0] != "Z":
            members.append(int(entry))
    return members


class SparkDriverProcess:
    """A Spark driver program in a session of its own (see the module docstring).

    ``environment`` is added to this process's environment (PYSPARK_PYTHON, PYTHONPATH and the
    test-only pause variables reach the JVM's Python workers through it). Output goes to
    ``log_path``. Concurrency: used by one test thread.
    """

    def __init__(self, module: str, arguments: list[str], log_path: Path,
                 environment: Mapping[str, str] | None = None, *, held: bool = False) -> None:
        _prepare_environment()
        self.log_path = log_path
        with open(log_path, "ab") as log_file:
            self.process = subprocess.Popen([sys.executable, "-m", module, *arguments], cwd=ROOT,
                                            env={**os.environ, **(environment or {})}, stdout=log_file,
                                            stderr=subprocess.STDOUT, start_new_session=True,
                                            stdin=subprocess.PIPE if held else subprocess.DEVNULL)

    def release(self) -> None:
        """Tell a program that holds until a line on its standard input (``held=True``) to go on."""
        assert self.process.stdin is not None, "the driver was not started held"
        try:
            self.process.stdin.write(b"go\n")
            self.process.stdin.close()
        except BrokenPipeError:  # it exited already: wait_for_file or wait reports that
            pass

    def wait_for_file(self, directory: Path, prefix: str, timeout: float) -> Path:
        """The first file of ``directory`` named ``prefix...``; fails if the driver exits first."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = sorted(path for path in directory.iterdir() if path.name.startswith(prefix))
            if found:
                return found[0]
            if self.process.poll() is not None:
                raise AssertionError(f"the driver exited with {self.process.returncode} before {prefix}:\n"
                                     + self.log_tail())
            time.sleep(0.05)
        raise AssertionError(f"no {prefix} file in {directory} after {timeout} s:\n" + self.log_tail())

    def kill(self, timeout: float = 30.0) -> None:
        """kill -9 the driver, its JVM and every Python worker, and wait until all are gone."""
        session = self.process.pid
        deadline = time.monotonic() + timeout
        while True:
            members = _session_members(session)
            if self.process.poll() is None and session not in members:
                members.append(session)
            if not members:
                break
            for pid in members:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            self.process.poll()  # reap the driver
            if time.monotonic() > deadline:
                raise AssertionError(f"driver processes {members} outlived kill -9")
            time.sleep(0.05)
        self.process.wait()
        if self.process.stdin is not None:
            self.process.stdin.close()

    def wait(self, timeout: float) -> int:
        """Wait for the driver to exit by itself (killing it all if it does not)."""
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"the driver did not finish within {timeout} s:\n" + self.log_tail()) from None
        finally:
            for pid in _session_members(self.process.pid):  # workers left behind by a finished driver
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass

    def log_tail(self, lines: int = 60) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"
