"""Shared pytest fixtures: real ZooKeeper servers (tests/support/fixtures.py) and brokers; and,
at the end of a run, the modules that took longest (setup, call and teardown of their tests,
module fixtures included), so the suite's time can be followed module by module, and the tests
that came closest to their timeout (pytest-timeout's, which covers setup, call and teardown),
with the share of it they used: a test should use at most half of it at rest. A test that outlives
its timeout by far, or a test process that does not exit, is ended with every thread's stack
printed (tests/support/hang_guard.py).

Under pytest-xdist (``scripts/test.sh`` runs ``-n 2 --dist loadfile``), each worker picks its
loopback ports from a range of its own (KAFKALITE_PORT_RANGE, inherited by every broker, tool and
script the worker starts), and the modules are handed out longest first (LONGEST_MODULES), so
that the run does not end on one long module started late."""

from __future__ import annotations

import os
from collections import defaultdict

import pytest

from kafkalite.local.zookeeper import PORT_RANGE_VARIABLE, port_range
from tests.support.fixtures import zookeeper, zookeeper_connect, zookeeper_ensemble  # noqa: F401
from tests.support.hang_guard import pytest_configure, pytest_runtest_protocol, pytest_unconfigure, timeout_of  # noqa: F401

SLOWEST_MODULES = 15
CLOSEST_TO_TIMEOUT = 10
#: the share of its timeout a test may use at rest; the margin table marks those above it
TIMEOUT_SHARE_AT_REST = 0.5
_TIMEOUT_PROPERTY = "timeout_s"
#: The modules that take longest, longest first, as the summary below measured them; the rest
#: follow in collection order, so the other Spark modules start late in the run, mostly after
#: the Spark fault test rather than beside it.
LONGEST_MODULES = (
    "tests/integration/test_spark_faults.py",
    "tests/integration/test_fault_matrix.py",
    "tests/integration/test_openapi.py",
    "tests/integration/test_transactions.py",
    "tests/integration/test_compose.py",
)
_module_seconds: defaultdict[str, float] = defaultdict(float)
_test_seconds: defaultdict[str, float] = defaultdict(float)
_test_timeouts: dict[str, float] = {}


def _split_port_range_between_workers() -> None:
    worker, count = os.environ.get("PYTEST_XDIST_WORKER"), os.environ.get("PYTEST_XDIST_WORKER_COUNT")
    if not worker or not count:
        return
    index, workers = int(worker.removeprefix("gw")), int(count)
    low, high = port_range()  # what free_ports picks from: already cut at the ephemeral range
    width = (high - low) // workers
    os.environ[PORT_RANGE_VARIABLE] = f"{low + index * width}-{low + (index + 1) * width}"


_split_port_range_between_workers()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:  # carried by every report, to the xdist controller too
        item.user_properties.append((_TIMEOUT_PROPERTY, timeout_of(item)))
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    rank = {module: position for position, module in enumerate(LONGEST_MODULES)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _module_seconds[report.nodeid.split("::", 1)[0]] += report.duration
    _test_seconds[report.nodeid] += report.duration
    for name, value in report.user_properties:
        if name == _TIMEOUT_PROPERTY:
            _test_timeouts[report.nodeid] = float(value)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    _write_timeout_margins(terminalreporter)
    if len(_module_seconds) < 2:
        return
    total = sum(_module_seconds.values())
    shown = sorted(_module_seconds.items(), key=lambda item: -item[1])[:SLOWEST_MODULES]
    terminalreporter.write_sep("=", f"slowest {len(shown)} of {len(_module_seconds)} modules ({total:.0f} s in tests)")
    for module, seconds in shown:
        terminalreporter.write_line(f"{seconds:8.1f}s {100 * seconds / total:5.1f}%  {module}")


def _write_timeout_margins(terminalreporter: pytest.TerminalReporter) -> None:
    shares = sorted(((seconds / _test_timeouts[nodeid], seconds, nodeid) for nodeid, seconds in _test_seconds.items()
                     if _test_timeouts.get(nodeid)), reverse=True)
    if not shares:
        return
    over = sum(1 for share, _, _ in shares if share > TIMEOUT_SHARE_AT_REST)
    terminalreporter.write_sep("=", f"timeout margins: the {min(CLOSEST_TO_TIMEOUT, len(shares))} tests closest to "
                                    f"their timeout; {over} of {len(shares)} used more than "
                                    f"{TIMEOUT_SHARE_AT_REST:.0%} of it")
    terminalreporter.write_line(f"{'seconds':>8} {'timeout':>8} {'used':>5} {'margin':>7}  test")
    for share, seconds, nodeid in shares[:CLOSEST_TO_TIMEOUT]:
        timeout = _test_timeouts[nodeid]
        mark = "  <- over half" if share > TIMEOUT_SHARE_AT_REST else ""
        terminalreporter.write_line(f"{seconds:8.1f} {timeout:8.0f} {share:5.0%} {timeout - seconds:6.0f}s  "
                                    f"{nodeid}{mark}")
