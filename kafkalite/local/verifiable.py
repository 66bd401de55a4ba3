"""Run the verifiable producer and consumer tools as subprocesses and follow what they report.

:class:`VerifiableProducer` and :class:`VerifiableConsumer` run
``python -m kafkalite.tools.verifiable_{producer,consumer}`` (the interpreter and ``kafkalite``
package of this process) with their standard output on a pipe; a reader thread parses each JSON
line as it arrives, so the caller can wait for events (startup, a number of acknowledgements,
records up to an offset) while the tool keeps running. Standard error goes to a file. Every
started tool is recorded and killed at interpreter exit if its owner forgot to stop it.
:meth:`ToolProcess.program` says what runs; a subclass may run the same tool another way (the
tests run the ``scripts/`` wrappers).

Concurrency: one thread drives a tool object; its reader thread appends events under
``condition``, which :meth:`ToolProcess.wait_for` and :meth:`ToolProcess.snapshot` take too.
"""

from __future__ import annotations

import atexit
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, Self

from kafkalite.local.cluster import PACKAGE_PARENT

_LIVE: set[ToolProcess] = set()
_LIVE_LOCK = threading.Lock()


def _kill_leftovers() -> None:
    with _LIVE_LOCK:
        leftovers = list(_LIVE)
    for tool in leftovers:
        tool.kill()


atexit.register(_kill_leftovers)


class ToolProcess:
    """One verifiable tool subprocess and the JSON events it printed so far (thread-safe)."""

    #: The tool's module, run as ``python -m MODULE`` by :meth:`program`.
    MODULE = ""

    def __init__(self, arguments: list[str], stderr_path: Path) -> None:
        self.name = self.MODULE.rpartition(".")[2] or type(self).__name__
        self.arguments = list(arguments)
        self.stderr_path = stderr_path
        self.events: list[dict[str, Any]] = []
        self.unparsed: list[str] = []
        self.condition = threading.Condition()
        self.process: subprocess.Popen[str] | None = None
        self.reader: threading.Thread | None = None
        self.finished = False
        # Run the tool through this prefix (e.g. ``ip netns exec NS`` for a client on a host of its own).
        self.command_prefix: list[str] = []

    def program(self) -> list[str]:
        """The command line that starts the tool, before its arguments."""
        return [sys.executable, "-m", self.MODULE]

    def start(self) -> Self:
        environment = dict(os.environ, PYTHONPATH=str(PACKAGE_PARENT), PYTHONUNBUFFERED="1")
        self.stderr_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.stderr_path, "ab") as stderr:
            self.process = subprocess.Popen([*self.command_prefix, *self.program(), *self.arguments],
                                            cwd=self.stderr_path.parent,
                                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=stderr,
                                            text=True, bufsize=1, env=environment)
        with _LIVE_LOCK:
            _LIVE.add(self)
        self.reader = threading.Thread(target=self._read, name=f"reader-{self.name}", daemon=True)
        self.reader.start()
        return self

    def _read(self) -> None:
        assert self.process is not None and self.process.stdout is not None
        stream: IO[str] = self.process.stdout
        for line in stream:
            text = line.strip()
            if not text:
                continue
            try:
                event = json.loads(text)
            except ValueError:
                with self.condition:
                    self.unparsed.append(text)
                continue
            with self.condition:
                self.on_event(event)
                self.events.append(event)
                self.condition.notify_all()
        with self.condition:
            self.finished = True
            self.condition.notify_all()

    def on_event(self, event: dict[str, Any]) -> None:
        """Hook for subclasses to keep running tallies (reader thread, under the event lock)."""

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def snapshot(self) -> list[dict[str, Any]]:
        with self.condition:
            return list(self.events)

    def wait_for(self, predicate: Callable[[], bool], timeout: float, what: str) -> None:
        """Wait until ``predicate()`` (evaluated under the event lock) holds; TimeoutError if not."""
        deadline = time.monotonic() + timeout
        with self.condition:
            while not predicate():
                remaining = deadline - time.monotonic()
                if remaining <= 0 or (self.finished and not predicate()):
                    state = "exited" if self.finished else "still running"
                    raise TimeoutError(f"{self.name} ({state}): timed out waiting for {what}\n"
                                       f"stderr tail:\n{self.stderr_tail()}")
                self.condition.wait(min(remaining, 0.5))

    def wait_for_event(self, name: str, timeout: float = 60.0) -> dict[str, Any]:
        self.wait_for(lambda: any(event.get("name") == name for event in self.events), timeout, name)
        return next(event for event in self.snapshot() if event.get("name") == name)

    def terminate(self, timeout: float = 120.0) -> int:
        """SIGTERM (the tool finishes cleanly), wait for its exit and for its last line."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        return self.wait(timeout)

    def wait(self, timeout: float = 120.0) -> int:
        """Wait for the process to exit on its own; return its exit code (kill on timeout)."""
        assert self.process is not None
        try:
            code = self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise
        self._finish()
        return code

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self._finish()

    def _finish(self) -> None:
        if self.reader is not None:
            self.reader.join(10)
        if self.process is not None and self.process.stdout is not None:
            self.process.stdout.close()
        with _LIVE_LOCK:
            _LIVE.discard(self)

    def stderr_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.stderr_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no stderr)"


class VerifiableProducer(ToolProcess):
    """The verifiable producer with running counts of acknowledgements and errors."""

    MODULE = "kafkalite.tools.verifiable_producer"

    def __init__(self, bootstrap: str, topic: str, stderr_path: Path, *, max_messages: int,
                 throughput: float = -1, acks: str = "all", value_prefix: str | None = None,
                 repeating_keys: int | None = None, properties: dict[str, str] | None = None) -> None:
        arguments = ["--bootstrap-server", bootstrap, "--topic", topic, "--max-messages", str(max_messages),
                     "--throughput", str(throughput), "--acks", acks]
        if value_prefix is not None:
            arguments += ["--value-prefix", value_prefix]
        if repeating_keys is not None:
            arguments += ["--repeating-keys", str(repeating_keys)]
        for name, value in (properties or {}).items():
            arguments += ["--producer-property", f"{name}={value}"]
        super().__init__(arguments, stderr_path)
        self.acked = 0
        self.errors = 0

    def on_event(self, event: dict[str, Any]) -> None:
        if event.get("name") == "producer_send_success":
            self.acked += 1
        elif event.get("name") == "producer_send_error":
            self.errors += 1

    def wait_for_acks(self, count: int, timeout: float = 60.0) -> None:
        self.wait_for(lambda: self.acked >= count, timeout, f"{count} acknowledgements")

    def tool_data(self) -> dict[str, Any] | None:
        return next((event for event in self.snapshot() if event.get("name") == "tool_data"), None)


class VerifiableConsumer(ToolProcess):
    """The verifiable consumer with the highest offset read per partition."""

    MODULE = "kafkalite.tools.verifiable_consumer"

    def __init__(self, bootstrap: str, topic: str, stderr_path: Path, *, group_id: str | None = None,
                 max_messages: int = -1, timeout_ms: int | None = None, reset_policy: str = "earliest",
                 properties: dict[str, str] | None = None) -> None:
        arguments = ["--bootstrap-server", bootstrap, "--topic", topic, "--max-messages", str(max_messages),
                     "--reset-policy", reset_policy]
        if group_id is not None:
            arguments += ["--group-id", group_id]
        if timeout_ms is not None:
            arguments += ["--timeout-ms", str(timeout_ms)]
        for name, value in (properties or {}).items():
            arguments += ["--consumer-property", f"{name}={value}"]
        super().__init__(arguments, stderr_path)
        self.next_offsets: dict[int, int] = {}
        self.consumed = 0

    def on_event(self, event: dict[str, Any]) -> None:
        if event.get("name") == "records_consumed":
            self.consumed += int(event.get("count", 0))
            for summary in event.get("partitions", []):
                partition = int(summary["partition"])
                self.next_offsets[partition] = max(self.next_offsets.get(partition, 0), int(summary["maxOffset"]) + 1)

    def wait_until_read(self, end_offsets: dict[int, int], timeout: float = 60.0) -> None:
        """Wait until every partition has been read up to (excluding) its end offset."""
        def done() -> bool:
            return all(self.next_offsets.get(partition, 0) >= end for partition, end in end_offsets.items())
        self.wait_for(done, timeout, f"records up to end offsets {end_offsets} (read so far: {self.next_offsets})")


__all__ = ["ToolProcess", "VerifiableConsumer", "VerifiableProducer"]
