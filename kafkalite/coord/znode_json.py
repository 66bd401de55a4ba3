"""How a znode payload is encoded and validated: the JSON codec under :mod:`kafkalite.coord.znodes`.

:mod:`~kafkalite.coord.znodes` defines the tree (paths) and the concrete payload types; this
module holds what they share: the :class:`ZNodePayload` base (JSON framing, the version field,
error reporting), :class:`Fields` (typed access to a decoded object) and the validators of ids
and integer lists. It imports nothing of kafkalite but the errors.

Payload rules
-------------
* Every payload is a JSON object, UTF-8, compact, with an integer ``"version"`` field holding
  the *kafkalite* schema version of that payload (not Kafka's).
* Evolution is additive: a newer version may only add fields. Readers therefore accept any
  version >= 1 and ignore fields they do not know; a breaking change needs a new path.
* Numbers are written as JSON integers. Where Kafka writes decimal strings (timestamps,
  producer id blocks) readers accept those strings too.
* ``to_bytes()`` serialises; ``from_bytes(data, path)`` parses and validates and raises
  :class:`~kafkalite.errors.CoordinationError` naming the path and what was wrong. Constructing
  a payload with bad values raises :class:`ValueError` (or :class:`TypeError`).

Thread-safety: the module is immutable after import.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, TypeVar

from kafkalite.errors import InvalidTopicError, ZNodeDataError


def validate_broker_id(broker_id: int) -> int:
    if not is_int(broker_id) or broker_id < 0:
        raise ValueError(f"broker id must be a non-negative integer, got {broker_id!r}")
    return broker_id


def validate_partition(partition: int) -> int:
    if not is_int(partition) or partition < 0:
        raise ValueError(f"partition must be a non-negative integer, got {partition!r}")
    return partition


def now_ms() -> int:
    """Wall-clock milliseconds, the unit of every timestamp in the znode tree."""
    return time.time_ns() // 1_000_000


def is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _reject_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise ValueError(f"duplicate key {key!r}")
        result[key] = value
    return result


def _reject_constant(name: str) -> Any:
    raise ValueError(f"non-finite number {name}")


def dump_json(document: dict[str, Any]) -> bytes:
    return json.dumps(document, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False).encode("utf-8")


class Fields:
    """Typed access to one decoded JSON object; every failure is a ValueError naming the field."""

    def __init__(self, document: Mapping[str, Any]) -> None:
        self._document = document

    def has(self, key: str) -> bool:
        return key in self._document

    def raw(self, key: str) -> Any:
        if key not in self._document:
            raise ValueError(f"missing field {key!r}")
        return self._document[key]

    def integer(self, key: str, *, allow_string: bool = False) -> int:
        value = self.raw(key)
        if is_int(value):
            return int(value)
        if allow_string and isinstance(value, str) and re.fullmatch(r"-?[0-9]+", value):
            return int(value)
        raise ValueError(f"field {key!r} must be an integer, got {value!r}")

    def string(self, key: str) -> str:
        value = self.raw(key)
        if not isinstance(value, str):
            raise ValueError(f"field {key!r} must be a string, got {value!r}")
        return value

    def optional_string(self, key: str) -> str | None:
        if key not in self._document or self._document[key] is None:
            return None
        return self.string(key)

    def integer_list(self, key: str) -> list[int]:
        value = self.raw(key)
        return integer_list(value, f"field {key!r}")

    def string_list(self, key: str) -> list[str]:
        value = self.raw(key)
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            raise ValueError(f"field {key!r} must be a list of strings, got {value!r}")
        return list(value)

    def object(self, key: str) -> dict[str, Any]:
        value = self.raw(key)
        if not isinstance(value, dict):
            raise ValueError(f"field {key!r} must be an object, got {value!r}")
        return value

    def object_list(self, key: str) -> list[Fields]:
        value = self.raw(key)
        if not isinstance(value, list) or not all(isinstance(item, dict) for item in value):
            raise ValueError(f"field {key!r} must be a list of objects, got {value!r}")
        return [Fields(item) for item in value]


def integer_list(value: object, what: str) -> list[int]:
    if not isinstance(value, (list, tuple)) or not all(is_int(item) for item in value):
        raise ValueError(f"{what} must be a list of integers, got {value!r}")
    return [int(item) for item in value]


def distinct_ids(value: Sequence[int], what: str) -> list[int]:
    ids = integer_list(value, what)
    if any(item < 0 for item in ids):
        raise ValueError(f"{what} must hold non-negative ids, got {ids!r}")
    if len(set(ids)) != len(ids):
        raise ValueError(f"{what} has duplicate ids: {ids!r}")
    return ids


def non_negative(value: object, what: str, minimum: int = 0) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ValueError(f"{what} must be an integer >= {minimum}, got {value!r}")
    return value


_Payload = TypeVar("_Payload", bound="ZNodePayload")


class ZNodePayload:
    """Base of every payload: JSON framing, the version field and error reporting.

    Subclasses are frozen dataclasses that define ``VERSION``, ``WHAT`` (a human name used in
    errors), ``_document()`` and ``_parse(fields)``.
    """

    VERSION: ClassVar[int] = 1
    WHAT: ClassVar[str] = "payload"

    def _document(self) -> dict[str, Any]:
        raise NotImplementedError

    @classmethod
    def _parse(cls: type[_Payload], fields: Fields) -> _Payload:
        raise NotImplementedError

    def to_bytes(self) -> bytes:
        """Serialise to compact UTF-8 JSON with ``"version"`` first."""
        document: dict[str, Any] = {"version": self.VERSION}
        document.update(self._document())
        return dump_json(document)

    @classmethod
    def from_bytes(cls: type[_Payload], data: bytes, path: str | None = None) -> _Payload:
        """Parse and validate; CoordinationError (naming ``path``) when the data is malformed."""
        where = path or f"<{cls.WHAT}>"
        if data is None or len(data) == 0:
            raise ZNodeDataError(f"{where}: empty data where a {cls.WHAT} was expected")
        try:
            text = bytes(data).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ZNodeDataError(f"{where}: {cls.WHAT} is not UTF-8 ({exc})") from exc
        try:
            document = json.loads(text, object_pairs_hook=_reject_duplicate_keys,
                                  parse_constant=_reject_constant)
        except ValueError as exc:
            raise ZNodeDataError(f"{where}: {cls.WHAT} is not valid JSON ({exc})") from exc
        if not isinstance(document, dict):
            raise ZNodeDataError(
                f"{where}: {cls.WHAT} must be a JSON object, got {type(document).__name__}"
            )
        fields = Fields(document)
        try:
            version = fields.integer("version", allow_string=True)
            if version < 1:
                raise ValueError(f"field 'version' must be >= 1, got {version}")
            return cls._parse(fields)
        except (ValueError, TypeError, InvalidTopicError) as exc:
            raise ZNodeDataError(f"{where}: malformed {cls.WHAT}: {exc}") from exc


__all__ = [
    "Fields", "ZNodePayload", "distinct_ids", "dump_json", "integer_list", "is_int", "non_negative", "now_ms",
    "validate_broker_id", "validate_partition",
]
