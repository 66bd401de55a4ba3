"""Shared pytest fixtures: real ZooKeeper servers (tests/support/fixtures.py) and brokers; and,
at the end of a run, the modules that took longest (setup, call and teardown of their tests,
module fixtures included), so the suite's time can be followed module by module."""

from __future__ import annotations

from collections import defaultdict

import pytest

from tests.support.fixtures import zookeeper, zookeeper_connect, zookeeper_ensemble  # noqa: F401

SLOWEST_MODULES = 15
_module_seconds: defaultdict[str, float] = defaultdict(float)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _module_seconds[report.nodeid.split("::", 1)[0]] += report.duration


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if len(_module_seconds) < 2:
        return
    total = sum(_module_seconds.values())
    shown = sorted(_module_seconds.items(), key=lambda item: -item[1])[:SLOWEST_MODULES]
    terminalreporter.write_sep("=", f"slowest {len(shown)} of {len(_module_seconds)} modules ({total:.0f} s in tests)")
    for module, seconds in shown:
        terminalreporter.write_line(f"{seconds:8.1f}s {100 * seconds / total:5.1f}%  {module}")
