"""The local-cluster launcher lives in the package: nothing in kafkalite reaches into tests/."""

from __future__ import annotations

import ast
import subprocess
import sys
from importlib import resources
from pathlib import Path

import kafkalite
from kafkalite.local.zookeeper import ENSEMBLE_TEMPLATE, STANDALONE_TEMPLATE, render_config

PACKAGE = Path(kafkalite.__file__).parent


def test_no_package_module_imports_tests_or_edits_sys_path() -> None:
    offenders: list[str] = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            elif isinstance(node, ast.Attribute) and node.attr == "path" and isinstance(node.value, ast.Name) \
                    and node.value.id == "sys":
                names = ["sys.path"]
            else:
                continue
            offenders += [f"{path.relative_to(PACKAGE)}:{node.lineno} {name}" for name in names
                          if name == "sys.path" or name == "tests" or name.startswith("tests.")]
    assert offenders == []


def test_benchmarks_import_from_outside_a_checkout(tmp_path: Path) -> None:
    """Run from a directory without tests/: the launcher and the benchmarks import, and no
    module of a ``tests`` package is loaded on the way."""
    script = ("import sys, kafkalite.bench.suite, kafkalite.bench.failover, kafkalite.bench.local_cluster, "
              "kafkalite.local.verifiable; "
              "print(sorted(name for name in sys.modules if name == 'tests' or name.startswith('tests.')))")
    result = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True,
                            env={"PYTHONPATH": str(PACKAGE.parent), "PATH": "/usr/bin:/bin"}, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_zookeeper_templates_are_package_data(tmp_path: Path) -> None:
    shipped = resources.files("kafkalite.local")
    assert shipped.joinpath("zoo.cfg.template").read_text() == STANDALONE_TEMPLATE.read_text()
    assert shipped.joinpath("zoo-ensemble.cfg.template").read_text() == ENSEMBLE_TEMPLATE.read_text()
    setup = (PACKAGE.parent / "setup.cfg").read_text()
    assert "local/*.template" in setup
    config = tmp_path / "zoo.cfg"
    render_config(ENSEMBLE_TEMPLATE, config, data_dir=tmp_path / "data", client_port=21811, tick_time=500,
                  server_lines=["server.1=127.0.0.1:1:2"])
    text = config.read_text()
    assert f"dataDir={tmp_path / 'data'}\n" in text and "clientPort=21811\n" in text
    assert "server.1=127.0.0.1:1:2\n" in text
    assert [line for line in text.splitlines() if "@" in line and not line.startswith("#")] == []
