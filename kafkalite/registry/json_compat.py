"""JSON Schema compatibility: does every document a writer schema accepts satisfy a reader schema?

Confluent's JSON Schema rules are large; this checker covers the part that decides everyday
evolutions, walking reader and writer together and reporting, in Confluent's terms:

- ``TYPE_CHANGED`` / ``TYPE_NARROWED``: the reader's ``type`` must accept every type the
  writer's does (``number`` accepts ``integer``; no ``type`` accepts anything);
- ``REQUIRED_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL`` / ``REQUIRED_ATTRIBUTE_ADDED``: a property
  the reader requires must be required by the writer too;
- ``PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL``: a property the reader declares that the writer does
  not, while the writer is open (``additionalProperties`` not false: the writer's documents may
  carry that name with any value);
- ``PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL``: a writer property the reader drops while the
  reader is closed (``additionalProperties: false``);
- ``ADDITIONAL_PROPERTIES_NARROWED``: the reader closed where the writer was open;
- ``ENUM_ARRAY_NARROWED``: the reader's ``enum`` lacks a value of the writer's;
- ``MAX_LENGTH_ADDED``/``MINIMUM_INCREASED`` style bounds are checked for ``maxLength``,
  ``minLength``, ``maximum`` and ``minimum``;
- properties present in both, ``items`` of arrays and ``additionalProperties`` schemas are
  compared recursively.

``$ref``, ``allOf``/``anyOf``/``oneOf``, ``patternProperties`` and conditionals are compared
only for equality (a change to them is reported as ``COMBINED_TYPE_CHANGED``).

Thread-safety: pure functions.
"""

from __future__ import annotations

from typing import Any

_COMBINERS = ("$ref", "allOf", "anyOf", "oneOf", "not", "if", "then", "else", "patternProperties")
_ALL_TYPES = frozenset({"null", "boolean", "object", "array", "number", "integer", "string"})


def json_read_problems(reader: Any, writer: Any) -> list[str]:
    """Why some document valid under ``writer`` may be invalid under ``reader`` (empty: none found)."""
    problems: list[str] = []
    _check(reader, writer, "#", problems)
    return problems


def _types(schema: dict[str, Any]) -> frozenset[str]:
    kind = schema.get("type")
    if kind is None:
        return _ALL_TYPES
    if isinstance(kind, str):
        kinds = {kind}
    else:
        kinds = {item for item in kind if isinstance(item, str)}
    if "number" in kinds:
        kinds.add("integer")
    return frozenset(kinds)


def _closed(schema: dict[str, Any]) -> bool:
    return schema.get("additionalProperties") is False


def _check(reader: Any, writer: Any, path: str, problems: list[str]) -> None:
    if reader is True or reader == {}:
        return
    if writer is False:
        return
    if reader is False:
        problems.append(f"TYPE_NARROWED: the reader accepts nothing at {path}")
        return
    if writer is True:
        writer = {}
    if not isinstance(reader, dict) or not isinstance(writer, dict):
        return
    for key in _COMBINERS:
        if reader.get(key) != writer.get(key):
            problems.append(f"COMBINED_TYPE_CHANGED: {key} differs at {path}")
    reader_types, writer_types = _types(reader), _types(writer)
    if not writer_types <= reader_types:
        problems.append(f"TYPE_NARROWED: the reader's types {sorted(reader_types)} do not cover the writer's "
                        f"{sorted(writer_types - reader_types)} at {path}")
    if "enum" in reader:
        writer_values = writer.get("enum")
        if not isinstance(writer_values, list) or any(value not in reader["enum"] for value in writer_values):
            problems.append(f"ENUM_ARRAY_NARROWED: the reader's enum lacks values the writer allows at {path}")
    _bounds(reader, writer, path, problems)
    if "object" in reader_types and "object" in writer_types:
        _objects(reader, writer, path, problems)
    if "array" in reader_types and "array" in writer_types and ("items" in reader or "items" in writer):
        _check(reader.get("items", True), writer.get("items", True), f"{path}/items", problems)


def _bounds(reader: dict[str, Any], writer: dict[str, Any], path: str, problems: list[str]) -> None:
    for key, tighter in (("maxLength", min), ("maximum", min), ("maxItems", min),
                         ("minLength", max), ("minimum", max), ("minItems", max)):
        if key not in reader:
            continue
        bound = reader[key]
        if key not in writer or tighter(bound, writer[key]) != writer[key]:
            name = "ADDED" if key not in writer else ("DECREASED" if key.startswith("max") else "INCREASED")
            problems.append(f"{key.upper()}_{name}: the reader's {key} {bound} rejects values the writer allows "
                            f"at {path}")


def _objects(reader: dict[str, Any], writer: dict[str, Any], path: str, problems: list[str]) -> None:
    reader_properties = reader.get("properties") or {}
    writer_properties = writer.get("properties") or {}
    if not isinstance(reader_properties, dict) or not isinstance(writer_properties, dict):
        return
    reader_required = set(reader.get("required") or [])
    writer_required = set(writer.get("required") or [])
    for name in sorted(reader_required - writer_required):
        kind = "REQUIRED_ATTRIBUTE_ADDED" if name in writer_properties else \
            "REQUIRED_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL"
        problems.append(f"{kind}: the reader requires {name!r}, which the writer does not at {path}/required")
    for name, schema in reader_properties.items():
        where = f"{path}/properties/{name}"
        if name in writer_properties:
            _check(schema, writer_properties[name], where, problems)
        elif not _closed(writer):
            extra = writer.get("additionalProperties", True)
            if extra is True or extra == {}:
                if schema not in (True, {}):
                    problems.append(f"PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL: the reader declares {name!r}, which the "
                                    f"open writer may carry with any value at {where}")
            else:
                _check(schema, extra, where, problems)
    for name, schema in writer_properties.items():
        if name in reader_properties:
            continue
        if _closed(reader):
            problems.append(f"PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL: the closed reader drops {name!r} at "
                            f"{path}/properties/{name}")
        elif isinstance(reader.get("additionalProperties"), dict):
            _check(reader["additionalProperties"], schema, f"{path}/properties/{name}", problems)
    if _closed(reader) and not _closed(writer):
        problems.append(f"ADDITIONAL_PROPERTIES_NARROWED: the reader is closed where the writer is open at {path}")
    elif isinstance(reader.get("additionalProperties"), dict) and isinstance(writer.get("additionalProperties"), dict):
        _check(reader["additionalProperties"], writer["additionalProperties"], f"{path}/additionalProperties",
               problems)
