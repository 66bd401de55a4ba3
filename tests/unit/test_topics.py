"""Topic-name rules of kafkalite.topics, and that every layer applies them with the same message."""

from __future__ import annotations

from pathlib import Path

import pytest

from kafkalite.broker import admin
from kafkalite.config import LogConfig
from kafkalite.coord import znodes
from kafkalite.errors import InvalidTopicError, StorageError
from kafkalite.storage import files
from kafkalite.storage.manager import LogManager
from kafkalite.topics import (
    MAX_TOPIC_NAME_LENGTH,
    has_legal_characters,
    topic_name_problem,
    validate_topic_name,
)

LEGAL = ["a", "orders", "A.b_c-9", "x" * MAX_TOPIC_NAME_LENGTH, "...", "__consumer_offsets"]
ILLEGAL = {
    "": "topic name is empty",
    ".": "topic name cannot be '.'",
    "..": "topic name cannot be '..'",
    "x" * (MAX_TOPIC_NAME_LENGTH + 1): "topic name is longer than 249 characters",
    "a/b": "topic name 'a/b' has characters other than ASCII letters, digits, '.', '_' and '-'",
    "with space": "topic name 'with space' has characters other than ASCII letters, digits, '.', '_' and '-'",
    "trailing\n": "topic name 'trailing\\n' has characters other than ASCII letters, digits, '.', '_' and '-'",
    "ü": "topic name 'ü' has characters other than ASCII letters, digits, '.', '_' and '-'",
}


@pytest.mark.parametrize("name", LEGAL)
def test_legal_names_pass_every_layer(name: str, tmp_path: Path) -> None:
    assert topic_name_problem(name) is None
    assert validate_topic_name(name) == name
    assert znodes.validate_topic_name(name) == name
    admin.validate_topic_name(name)
    manager = LogManager([tmp_path], LogConfig())
    manager.start()
    try:
        assert manager.get_or_create(name, 0).topic == name
    finally:
        manager.shutdown()


@pytest.mark.parametrize(("name", "problem"), ILLEGAL.items(), ids=range(len(ILLEGAL)))
def test_illegal_names_get_one_message_with_each_layers_error(name: str, problem: str, tmp_path: Path) -> None:
    assert topic_name_problem(name) == problem
    for validate in (validate_topic_name, znodes.validate_topic_name, admin.validate_topic_name, znodes.topic_path):
        with pytest.raises(InvalidTopicError) as refused:
            validate(name)
        assert str(refused.value).endswith(f"INVALID_TOPIC_EXCEPTION: {problem}")
    manager = LogManager([tmp_path], LogConfig())
    manager.start()
    try:
        with pytest.raises(StorageError) as raised:
            manager.get_or_create(name, 0)
        assert str(raised.value) == problem
    finally:
        manager.shutdown()


def test_a_name_that_is_not_a_string_is_refused() -> None:
    assert topic_name_problem(7) == "topic name must be a string, not int"
    with pytest.raises(InvalidTopicError):
        znodes.validate_topic_name(7)  # type: ignore[arg-type]


def test_partition_directories_parse_with_the_character_rule_only() -> None:
    assert files.parse_partition_dir("orders-3") == ("orders", 3)
    assert files.parse_partition_dir("a-b-c-12") == ("a-b-c", 12)
    assert files.parse_partition_dir("-3") is None
    assert files.parse_partition_dir("bad name-3") is None
    assert files.parse_partition_dir("trailing\n-3") is None
    assert files.parse_partition_dir("orders-3-delete") is None
    assert files.parse_partition_dir("orders-x") is None
    assert has_legal_characters("...") and not has_legal_characters("")
