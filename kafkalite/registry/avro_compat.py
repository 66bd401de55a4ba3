"""Avro schema resolution: can a reader schema read data written with a writer schema?

:func:`avro_read_problems` walks a reader and a writer schema (fastavro's parsed forms, named
types by full name) with Avro's resolution rules and returns what stops the reader, in Avro's
``SchemaCompatibility`` terms (empty: the reader can read every datum of the writer):

- the same primitive type, or a promotion: int to long, float or double; long to float or
  double; float to double; string to bytes and bytes to string (``TYPE_MISMATCH`` otherwise);
- records with the same full name (or the writer's among the reader's aliases): every reader
  field is either a writer field (by name or by one of the reader field's aliases) whose types
  resolve, or has a default (``READER_FIELD_MISSING_DEFAULT_VALUE``); writer fields the reader
  lacks are skipped;
- enums with the same name: every writer symbol is a reader symbol, unless the reader has a
  default symbol (``MISSING_ENUM_SYMBOLS``);
- fixed types with the same name and size (``FIXED_SIZE_MISMATCH``, ``NAME_MISMATCH``);
- arrays by their items, maps by their values;
- a writer union: every branch must be readable; a reader union (writer not a union): some
  branch must read the writer's type (``MISSING_UNION_BRANCH``).

Recursive types are followed once per (reader, writer) pair of names.

Thread-safety: pure functions.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})
#: (writer type, reader type) pairs Avro promotes.
PROMOTIONS = frozenset({("int", "long"), ("int", "float"), ("int", "double"), ("long", "float"),
                        ("long", "double"), ("float", "double"), ("string", "bytes"), ("bytes", "string")})


def avro_read_problems(reader: Any, writer: Any, reader_named: Mapping[str, Any] | None = None,
                       writer_named: Mapping[str, Any] | None = None) -> list[str]:
    """Why ``reader`` cannot read what ``writer`` wrote (empty when it can)."""
    return _Resolver(reader_named or {}, writer_named or {}).check(reader, writer, "/")


def _kind(node: Any) -> str:
    if isinstance(node, list):
        return "union"
    if isinstance(node, dict):
        kind = node.get("type")
        if isinstance(kind, (dict, list)):
            return _kind(kind)
        return str(kind)
    return str(node)


def _describe(node: Any) -> str:
    kind = _kind(node)
    if isinstance(node, dict) and isinstance(node.get("name"), str):
        return f"{kind} {node['name']}"
    return kind


def _full_aliases(node: dict[str, Any]) -> set[str]:
    name = str(node.get("name", ""))
    namespace = name.rpartition(".")[0]
    return {alias if "." in alias or not namespace else f"{namespace}.{alias}"
            for alias in node.get("aliases", []) if isinstance(alias, str)}


class _Resolver:
    def __init__(self, reader_named: Mapping[str, Any], writer_named: Mapping[str, Any]) -> None:
        self.reader_named = reader_named
        self.writer_named = writer_named
        self.in_progress: set[tuple[str, str]] = set()

    @staticmethod
    def _resolve(node: Any, named: Mapping[str, Any]) -> Any:
        while True:
            if isinstance(node, str) and node not in PRIMITIVES:
                if node not in named:
                    return node  # an unknown name: compared by name
                node = named[node]
            elif isinstance(node, dict) and isinstance(node.get("type"), (dict, list)):
                node = node["type"]
            elif isinstance(node, dict) and node.get("type") in PRIMITIVES:
                return node["type"]  # a primitive with a logical type resolves like the primitive
            else:
                return node

    def check(self, reader: Any, writer: Any, path: str) -> list[str]:
        reader = self._resolve(reader, self.reader_named)
        writer = self._resolve(writer, self.writer_named)
        reader_kind, writer_kind = _kind(reader), _kind(writer)
        if writer_kind == "union":
            problems: list[str] = []
            for index, branch in enumerate(writer):
                problems.extend(self.check(reader, branch, f"{path}{index}/"))
            return problems
        if reader_kind == "union":
            if any(not self.check(branch, writer, path) for branch in reader):
                return []
            return [f"MISSING_UNION_BRANCH: the reader's union has no branch for the writer's "
                    f"{_describe(writer)} at {path}"]
        if reader_kind == writer_kind:
            if reader_kind in PRIMITIVES:
                return []
            return self._same_kind(reader_kind, reader, writer, path)
        if (writer_kind, reader_kind) in PROMOTIONS:
            return []
        return [f"TYPE_MISMATCH: the reader's type {_describe(reader)} does not match the writer's "
                f"{_describe(writer)} at {path}"]

    def _same_kind(self, kind: str, reader: Any, writer: Any, path: str) -> list[str]:
        if kind == "array":
            return self.check(reader.get("items"), writer.get("items"), f"{path}items/")
        if kind == "map":
            return self.check(reader.get("values"), writer.get("values"), f"{path}values/")
        if not isinstance(reader, dict) or not isinstance(writer, dict):
            return [] if reader == writer else [f"NAME_MISMATCH: {reader} against {writer} at {path}"]
        reader_name, writer_name = str(reader.get("name")), str(writer.get("name"))
        if reader_name != writer_name and writer_name not in _full_aliases(reader):
            return [f"NAME_MISMATCH: the reader's name {reader_name} does not match the writer's {writer_name} "
                    f"at {path}name"]
        if kind == "fixed":
            if reader.get("size") != writer.get("size"):
                return [f"FIXED_SIZE_MISMATCH: the reader's size {reader.get('size')} does not match the writer's "
                        f"{writer.get('size')} at {path}size"]
            return []
        if kind == "enum":
            missing = [symbol for symbol in writer.get("symbols", []) if symbol not in reader.get("symbols", [])]
            if missing and "default" not in reader:
                return [f"MISSING_ENUM_SYMBOLS: the reader's enum lacks {missing} at {path}symbols"]
            return []
        if kind == "record":
            pair = (reader_name, writer_name)
            if pair in self.in_progress:
                return []
            self.in_progress.add(pair)
            try:
                return self._record(reader, writer, path)
            finally:
                self.in_progress.discard(pair)
        return []

    def _record(self, reader: dict[str, Any], writer: dict[str, Any], path: str) -> list[str]:
        writer_fields = {field["name"]: field for field in writer.get("fields", [])}
        problems: list[str] = []
        for index, field in enumerate(reader.get("fields", [])):
            name = field["name"]
            match = writer_fields.get(name)
            if match is None:
                match = next((writer_fields[alias] for alias in field.get("aliases", []) if alias in writer_fields),
                             None)
            if match is None:
                if "default" not in field:
                    problems.append(f"READER_FIELD_MISSING_DEFAULT_VALUE: the reader's field {name} has no default "
                                    f"and the writer has no such field at {path}fields/{index}")
                continue
            problems.extend(self.check(field["type"], match["type"], f"{path}fields/{index}/type/"))
        return problems
