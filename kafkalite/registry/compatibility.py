"""Compatibility levels: which earlier versions a new schema is checked against, and how.

Confluent's seven levels: ``BACKWARD`` (the new schema reads data written with the latest
version), ``FORWARD`` (the latest version reads data written with the new one), ``FULL`` (both),
each against the latest version only or, ``_TRANSITIVE``, against every version still
registered; ``NONE`` checks nothing. Reading is decided by :mod:`kafkalite.registry.avro_compat`
for Avro and :mod:`kafkalite.registry.json_compat` for JSON Schema; schemas of different types
never read each other.

Thread-safety: pure functions.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kafkalite.registry.avro_compat import avro_read_problems
from kafkalite.registry.errors import InvalidCompatibilityLevelError
from kafkalite.registry.json_compat import json_read_problems
from kafkalite.registry.schemas import AVRO, ParsedSchema

NONE = "NONE"
BACKWARD = "BACKWARD"
BACKWARD_TRANSITIVE = "BACKWARD_TRANSITIVE"
FORWARD = "FORWARD"
FORWARD_TRANSITIVE = "FORWARD_TRANSITIVE"
FULL = "FULL"
FULL_TRANSITIVE = "FULL_TRANSITIVE"
LEVELS = (NONE, BACKWARD, BACKWARD_TRANSITIVE, FORWARD, FORWARD_TRANSITIVE, FULL, FULL_TRANSITIVE)
#: The registry's default level (Confluent's).
DEFAULT_LEVEL = BACKWARD


def normalize_level(value: Any) -> str:
    """The level a request names (case-insensitive); 42203 for anything else."""
    if isinstance(value, str) and value.upper() in LEVELS:
        return value.upper()
    raise InvalidCompatibilityLevelError(
        f"Invalid compatibility level. Valid values are none, backward, forward, full, backward_transitive, "
        f"forward_transitive, and full_transitive; got {str(value)[:60]!r}")


def read_problems(reader: ParsedSchema, writer: ParsedSchema) -> list[str]:
    """Why ``reader`` cannot read data written with ``writer`` (empty when it can)."""
    if reader.schema_type != writer.schema_type:
        return [f"SCHEMA_TYPE_CHANGED: a {reader.schema_type} schema cannot read {writer.schema_type} data"]
    if reader.schema_type == AVRO:
        return avro_read_problems(reader.parsed, writer.parsed, reader.named, writer.named)
    return json_read_problems(reader.parsed, writer.parsed)


def compatibility_problems(level: str, new: ParsedSchema, previous: Sequence[ParsedSchema]) -> list[str]:
    """Why ``new`` may not follow ``previous`` (registered versions, oldest first) under ``level``."""
    if level == NONE or not previous:
        return []
    against = previous if level.endswith("_TRANSITIVE") else previous[-1:]
    backward = level.startswith((BACKWARD, FULL))
    forward = level.startswith((FORWARD, FULL))
    problems: list[str] = []
    for old in reversed(against):
        if backward:
            problems.extend(f"{message} (the new schema reading data of an earlier one)"
                            for message in read_problems(new, old))
        if forward:
            problems.extend(f"{message} (an earlier schema reading data of the new one)"
                            for message in read_problems(old, new))
    return problems
