"""The documentation's tested blocks: a fenced block right after ``<!-- readme-test: NAME -->``,
in README.md or any docs/*.md page (each name marks one block in all of them)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def documentation_pages() -> list[Path]:
    """README.md and every Markdown page under docs/."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def marked_block(name: str, language: str = r"\w+") -> str:
    """The body of the fenced block marked ``readme-test: name`` (its language matching
    ``language``, a regular expression), wherever the documentation keeps it."""
    pattern = re.compile(rf"<!-- readme-test: {re.escape(name)} -->\s*```{language}\n(.*?)```", re.S)
    found = [(page, match.group(1)) for page in documentation_pages()
             for match in pattern.finditer(page.read_text(encoding="utf-8"))]
    assert found, f"no page of the documentation has a block marked readme-test: {name}"
    assert len(found) == 1, f"readme-test: {name} marks {len(found)} blocks: {[str(page) for page, _ in found]}"
    return found[0][1]
