"""The package's public names: loaded lazily at run time, and the same names visible to type checkers."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import kafkalite

INIT = Path(kafkalite.__file__)


def _type_checking_names() -> set[str]:
    """Names bound by the ``if TYPE_CHECKING:`` block of kafkalite/__init__.py."""
    tree = ast.parse(INIT.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            for statement in node.body:
                assert isinstance(statement, ast.ImportFrom)
                for alias in statement.names:
                    assert alias.asname == alias.name, f"{alias.name} must be re-exported as itself"
                    names.add(alias.name)
    return names


def test_type_checkers_see_every_public_name() -> None:
    assert _type_checking_names() == set(kafkalite.__all__) - {"__version__"}


def test_every_public_name_resolves_to_its_object() -> None:
    from kafkalite import client, errors

    for name in kafkalite.__all__:
        value = getattr(kafkalite, name)
        if name == "errors":
            assert value is errors
        elif name != "__version__":
            assert value is getattr(client, name)


def test_importing_the_package_does_not_load_the_clients() -> None:
    code = "import sys, kafkalite; print('kafkalite.client' in sys.modules)"
    answer = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                            cwd=INIT.parent.parent)
    assert answer.stdout.strip() == "False"
