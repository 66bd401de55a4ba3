"""Layout rules of the package: nothing reaches into tests/, tools and broker stay off the
layers above them, the shared rules sit at the bottom, and the local-cluster launcher works
from an installed package."""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Callable
from importlib import resources
from pathlib import Path

import kafkalite
from kafkalite.local.zookeeper import ENSEMBLE_TEMPLATE, STANDALONE_TEMPLATE, render_config

PACKAGE = Path(kafkalite.__file__).parent


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, name) of every absolute import in ``path`` (function-level ones too), and
    ``sys.path`` for every use of it."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
            found += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
        elif isinstance(node, ast.Attribute) and node.attr == "path" and isinstance(node.value, ast.Name) \
                and node.value.id == "sys":
            found.append((node.lineno, "sys.path"))
    return found


def _offenders(paths: list[Path], forbidden: Callable[[str], bool]) -> list[str]:
    return [f"{path.relative_to(PACKAGE)}:{line} {name}" for path in paths for line, name in _imports(path)
            if forbidden(name)]


def test_no_package_module_imports_tests_or_edits_sys_path() -> None:
    def forbidden(name: str) -> bool:
        return name in ("sys.path", "tests") or name.startswith("tests.")

    assert _offenders(sorted(PACKAGE.rglob("*.py")), forbidden) == []


def test_tools_do_not_import_the_broker() -> None:
    assert _offenders(sorted((PACKAGE / "tools").rglob("*.py")),
                      lambda name: name == "kafkalite.broker" or name.startswith("kafkalite.broker.")) == []


def test_shared_rules_sit_at_the_bottom() -> None:
    """topics.py and assignment.py import nothing of kafkalite but its errors."""
    for module in ("topics.py", "assignment.py"):
        assert _offenders([PACKAGE / module], lambda name: name.startswith("kafkalite")
                          and not name.startswith("kafkalite.errors")) == []


def test_broker_takes_murmur2_from_the_shared_module() -> None:
    assert _offenders(sorted((PACKAGE / "broker").rglob("*.py")),
                      lambda name: name == "kafkalite.client" or name.startswith("kafkalite.client.")) == []


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
