"""The ``kafkalite`` entry point: every command resolves to a tool, usage errors exit 2."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

from kafkalite.cli import COMMANDS, main
from tests.support.cluster import ROOT


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_command_has_a_main(command: str) -> None:
    module = importlib.import_module(COMMANDS[command])
    assert callable(module.main)


def test_unknown_command_and_usage(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["no-such-command"]) == 2
    assert "unknown command" in capsys.readouterr().err
    assert main([]) == 2
    assert main(["--help"]) == 0 and "topics" in capsys.readouterr().out


def test_python_dash_m_runs_a_tool() -> None:
    result = subprocess.run([sys.executable, "-m", "kafkalite", "topics", "--help"], cwd=ROOT, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0 and "--bootstrap-server" in result.stdout
    result = subprocess.run([sys.executable, "-m", "kafkalite", "dump-log"], cwd=ROOT, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 2 and "--files" in result.stderr and "Traceback" not in result.stderr
