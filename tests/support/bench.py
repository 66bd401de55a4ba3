"""Running one scenario of the benchmark suite (``kafkalite.bench.suite --quick --only P<n>``)
the way the bench tests do, and reading back the table it prints."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tests.support.cluster import ROOT

TABLE_HEADER = ["| scenario | figure | target | met/missed |", "| --- | --- | --- | --- |"]


@dataclass(frozen=True)
class SuiteRun:
    """What one quick suite run printed: its table's rows (cells stripped), its stderr (the
    tools' own lines) and the performance document it wrote."""

    rows: list[list[str]]
    stdout: str
    stderr: str
    docs: str


def run_quick_scenario(scenario: str, tmp_path: Path, timeout: float = 240) -> SuiteRun:
    """Run ``scenario`` of the suite in quick mode; fail on a traceback, a non-zero exit or a
    table without the suite's header."""
    docs = tmp_path / "performance.md"
    result = subprocess.run([sys.executable, "-m", "kafkalite.bench.suite", "--quick", "--only", scenario,
                             "--docs", str(docs)], cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    assert "Traceback" not in result.stderr, result.stderr
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert lines[:2] == TABLE_HEADER, result.stdout
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in lines[2:]]
    return SuiteRun(rows, result.stdout, result.stderr, docs.read_text())
