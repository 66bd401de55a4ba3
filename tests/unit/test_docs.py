"""The documentation stays true to the repository: README.md and docs/*.md link only to files (and
headings) that exist, show only flags their tools accept, name only broker settings
kafkalite/config.py knows, and README.md stays an entry point of at most 250 lines.

No process is started except ``bash scripts/kafkalite-cluster.sh --help`` (prints its usage).
"""

from __future__ import annotations

import argparse
import functools
import importlib
import re
import subprocess
from pathlib import Path

import pytest

from kafkalite import config
from tests.support.docs import ROOT, documentation_pages

README_MAX_LINES = 250

_LINK = re.compile(r"(?<!\!)\[[^\]]*\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)")
_FENCE = re.compile(r"^```.*?^```", re.S | re.M)
_CODE_SPAN = re.compile(r"`([^`\n]+)`")
_TOOL = re.compile(r"(?:scripts/)?(kafkalite-[a-z0-9-]+\.sh|zookeeper-shell\.sh)|python -m (kafkalite(?:\.\w+)+)")
_FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9.-]*[a-z0-9]")
# What ends a command inside a line: a pipe, a list operator, a comment.
_COMMAND_END = re.compile(r"\s(?:\||\|\||&&|;|#)\s|\$\(|\)")
_CONFIG_NAME = re.compile(r"^[a-z][a-z0-9]*(?:\.[a-z0-9<>_-]+)+$")


def _pages() -> list[Path]:
    return documentation_pages()


# -- (a) links ------------------------------------------------------------------------------------------------------


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*]|\[([^\]]*)\]\([^)]*\)", lambda match: match.group(1) or "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = _FENCE.sub("", page.read_text(encoding="utf-8"))
    found: set[str] = set()
    for heading in re.findall(r"^#{1,6}\s+(.+?)\s*$", text, re.M):
        slug = _slug(heading)
        number, candidate = 0, slug
        while candidate in found:
            number += 1
            candidate = f"{slug}-{number}"
        found.add(candidate)
    return found


def broken_links(page: Path, text: str | None = None) -> list[str]:
    """The relative links of ``page`` (its text, or ``text``) whose file or heading is missing."""
    body = _FENCE.sub("", page.read_text(encoding="utf-8") if text is None else text)
    problems = []
    for match in _LINK.finditer(body):
        target = match.group(1) or match.group(2)
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        path_part, _, anchor = target.partition("#")
        destination = (page.parent / path_part).resolve() if path_part else page
        if not destination.exists():
            problems.append(f"{target}: no such file")
        elif anchor and destination.suffix == ".md" and anchor not in anchors(destination):
            problems.append(f"{target}: no heading #{anchor} in {destination.relative_to(ROOT)}")
    return problems


@pytest.mark.parametrize("page", _pages(), ids=lambda page: str(page.relative_to(ROOT)))
def test_relative_links_point_to_existing_files_and_headings(page: Path) -> None:
    assert broken_links(page) == []


def test_a_broken_link_is_detected() -> None:
    page = ROOT / "docs" / "clients.md"
    assert broken_links(page, "[x](security.md#acls) [y](nowhere.md) [z](security.md#no-such-heading)") == [
        "nowhere.md: no such file", "security.md#no-such-heading: no heading #no-such-heading in docs/security.md"]


# -- (b) tool flags -------------------------------------------------------------------------------------------------


def _script_module(script: str) -> str | None:
    """The Python module a scripts/*.sh tool runs (``kafkalite_tool MODULE``), None for a bash tool."""
    path = ROOT / "scripts" / script
    if not path.exists():
        return None
    found = re.search(r"kafkalite_tool\s+(kafkalite[\w.]*)", path.read_text(encoding="utf-8"))
    return found.group(1) if found else None


def _parser_flags(parser: argparse.ArgumentParser) -> set[str]:
    flags: set[str] = set()
    for action in parser._actions:
        flags.update(option for option in action.option_strings if option.startswith("--"))
        if isinstance(action, argparse._SubParsersAction):
            for subparser in action.choices.values():
                flags |= _parser_flags(subparser)
    return flags


def _help_flags(command: list[str]) -> set[str]:
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return set(_FLAG.findall(result.stdout))


@functools.cache
def tool_flags(tool: str) -> frozenset[str]:
    """Every ``--flag`` the tool accepts: from its argparse parser when it has ``build_parser()``,
    otherwise from its ``--help`` (bash scripts)."""
    module = tool if tool.startswith("kafkalite.") else _script_module(tool)
    if tool == "kafkalite-server-start.sh":  # bash wrapper of kafkalite.broker: its own usage names its flags
        return frozenset(_help_flags(["bash", str(ROOT / "scripts" / tool), "--help"]))
    if module is not None:
        imported = importlib.import_module(module)
        build = getattr(imported, "build_parser", None)
        if callable(build):
            return frozenset(_parser_flags(build()))
        return frozenset(_help_flags([str(ROOT / ".venv" / "bin" / "python"), "-m", module, "--help"]))
    script = ROOT / "scripts" / tool
    assert script.exists(), f"no tool {tool} in scripts/"
    return frozenset(_help_flags(["bash", str(script), "--help"]))


def _commands(text: str) -> list[str]:
    """Shell commands and code spans of a page, continuation lines joined; a table row whose
    first cell names a tool is one command."""
    pieces: list[str] = []
    for block in re.findall(r"^```(?:bash|sh|shell|console)?\n(.*?)^```", text, re.S | re.M):
        pieces.extend(block.replace("\\\n", " ").splitlines())
    prose = _FENCE.sub("", text)
    for line in prose.splitlines():
        cells = [cell for cell in re.split(r"(?<!\\)\|", line) if cell.strip()]
        if line.startswith("|") and cells and _TOOL.search(cells[0]):
            pieces.append(" ".join(_CODE_SPAN.findall(line)).replace("\\|", " "))
        else:
            pieces.extend(span.replace("\\|", " ") for span in _CODE_SPAN.findall(line))
    return pieces


def shown_flags(text: str) -> list[tuple[str, str]]:
    """(tool, flag) for every ``--flag`` written after a tool's name in the same command."""
    shown: list[tuple[str, str]] = []
    for piece in _commands(text):
        matches = list(_TOOL.finditer(piece))
        for index, match in enumerate(matches):
            end = matches[index + 1].start() if index + 1 < len(matches) else len(piece)
            segment = piece[match.end():end]
            stop = _COMMAND_END.search(segment)
            segment = segment[:stop.start()] if stop else segment
            segment = re.sub(r"'[^']*'|\"[^\"]*\"", "", segment)  # quoted values
            tool = match.group(1) or match.group(2)
            shown.extend((tool, flag) for flag in _FLAG.findall(segment))
    return shown


def unknown_flags(text: str) -> list[str]:
    return sorted({f"{tool} {flag}" for tool, flag in shown_flags(text) if flag not in tool_flags(tool)})


@pytest.mark.parametrize("page", _pages(), ids=lambda page: str(page.relative_to(ROOT)))
def test_every_flag_shown_after_a_tool_exists_in_its_parser(page: Path) -> None:
    assert unknown_flags(page.read_text(encoding="utf-8")) == []


@pytest.mark.parametrize(("text", "expected"), [
    ("```bash\nscripts/kafkalite-topics.sh --bootstrap-server b --create --topicz orders\n```",
     ["kafkalite-topics.sh --topicz"]),
    ("| `scripts/kafkalite-acls.sh` | `--add`, `--no-such-flag` |", ["kafkalite-acls.sh --no-such-flag"]),
    ("`scripts/kafkalite-cluster.sh start --brokerz 3`", ["kafkalite-cluster.sh --brokerz"]),
    ("`python -m kafkalite.bench.storage --no-such-size`", ["kafkalite.bench.storage --no-such-size"]),
    ("```bash\nprintf 'a\\n' | scripts/kafkalite-console-producer.sh --topic t | grep --count x\n```", []),
])
def test_a_flag_the_tool_lacks_is_detected(text: str, expected: list[str]) -> None:
    assert unknown_flags(text) == expected


# -- (c) broker settings --------------------------------------------------------------------------------------------


def known_broker_setting(name: str) -> bool:
    """Whether kafkalite/config.py reads ``name`` from server.properties (or as a topic config)."""
    return (name in config._BROKER_SETTINGS or name in config._TOPIC_SETTINGS or name in config._LOG_PROPERTY_NAMES
            or bool(config._SSL_PROPERTY.match(name)) or bool(config._SASL_PROPERTY.match(name)))


def config_names(text: str) -> list[str]:
    """Setting names a page shows as configuration: ``properties`` blocks, ``--override k=v``,
    and the first column of tables whose header begins with "setting" or "topic setting"."""
    names: list[str] = []
    for block in re.findall(r"^```properties\n(.*?)^```", text, re.S | re.M):
        names.extend(line.split("=", 1)[0].strip() for line in block.splitlines()
                     if "=" in line and not line.lstrip().startswith("#"))
    names.extend(re.findall(r"--override[ =]([a-z][\w.]*)=", text))
    in_table = False
    for line in _FENCE.sub("", text).splitlines():
        if re.match(r"^\|\s*(setting|topic setting)\s*\|", line):
            in_table = True
            continue
        if not line.startswith("|"):
            in_table = False
            continue
        if in_table:
            cells = line.strip("|").split("|")
            names.extend(name for cell in cells[:2] for name in re.findall(r"`([^`]+)`", cell)
                         if _CONFIG_NAME.match(name))
    return names


def unknown_settings(text: str) -> list[str]:
    return sorted({name for name in config_names(text) if not known_broker_setting(name)})


@pytest.mark.parametrize("name", ["README.md", "docs/configuration.md"])
def test_every_broker_setting_shown_is_one_config_py_knows(name: str) -> None:
    names = config_names((ROOT / name).read_text(encoding="utf-8"))
    assert names or name == "README.md"
    assert unknown_settings((ROOT / name).read_text(encoding="utf-8")) == []


def test_the_configuration_page_shows_every_broker_setting() -> None:
    shown = set(config_names((ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")))
    assert set(config._BROKER_SETTINGS) | set(config._TOPIC_SETTINGS) <= shown


@pytest.mark.parametrize(("text", "expected"), [
    ("```properties\nlisteners=PLAINTEXT://127.0.0.1:9092\nlog.retention.hourz=1\n```", ["log.retention.hourz"]),
    ("| setting | default |\n| --- | --- |\n| `min.insync.replicas` | `1` |\n| `min.insync.replica` | `1` |",
     ["min.insync.replica"]),
    ("scripts/kafkalite-server-start.sh config/server.properties --override broker.idd=2", ["broker.idd"]),
    ("```properties\nssl.keystore.location=/k.pem\nlistener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=x\n```", []),
])
def test_an_unknown_setting_is_detected(text: str, expected: list[str]) -> None:
    assert unknown_settings(text) == expected


# -- (d) README's length --------------------------------------------------------------------------------------------


def too_long(text: str) -> bool:
    return len(text.splitlines()) > README_MAX_LINES


def test_readme_is_an_entry_point_of_at_most_250_lines() -> None:
    assert not too_long((ROOT / "README.md").read_text(encoding="utf-8"))


def test_a_long_readme_is_detected() -> None:
    assert too_long("line\n" * (README_MAX_LINES + 1)) and not too_long("line\n" * README_MAX_LINES)
