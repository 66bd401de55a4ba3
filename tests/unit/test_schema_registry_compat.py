"""Schema compatibility: Avro's resolution rules under every level, with Confluent's verdicts.

Each row is an evolution from an old to a new schema and whether the new schema reads old data
(backward) and the old schema reads new data (forward), as Avro's SchemaCompatibility (which
Confluent's registry uses) decides; every level's verdict follows from those two.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from kafkalite.registry import compatibility
from kafkalite.registry.errors import InvalidCompatibilityLevelError, InvalidSchemaError
from kafkalite.registry.schemas import AVRO, JSON, parse_schema


def record(*fields: dict[str, Any], name: str = "Order", **extra: Any) -> dict[str, Any]:
    return {"type": "record", "name": name, "namespace": "shop", "fields": list(fields), **extra}


def field(name: str, kind: Any, **extra: Any) -> dict[str, Any]:
    return {"name": name, "type": kind, **extra}


ID = field("id", "int")
COLOR = {"type": "enum", "name": "Color", "symbols": ["RED", "GREEN"]}
COLOR_MORE = {"type": "enum", "name": "Color", "symbols": ["RED", "GREEN", "BLUE"]}
COLOR_DEFAULT = {"type": "enum", "name": "Color", "symbols": ["RED", "GREEN"], "default": "RED"}
ITEM = {"type": "record", "name": "Item", "fields": [field("sku", "string")]}
ITEM_QTY = {"type": "record", "name": "Item", "fields": [field("sku", "string"), field("qty", "int")]}

#: (case, old schema, new schema, new reads old (backward), old reads new (forward))
EVOLUTIONS: list[tuple[str, Any, Any, bool, bool]] = [
    ("add field with default", record(ID), record(ID, field("note", "string", default="")), True, True),
    ("add field without default", record(ID), record(ID, field("note", "string")), False, True),
    ("remove field with default", record(ID, field("note", "string", default="")), record(ID), True, True),
    ("remove field without default", record(ID, field("note", "string")), record(ID), True, False),
    ("promote int to long", record(field("n", "int")), record(field("n", "long")), True, False),
    ("promote int to double", record(field("n", "int")), record(field("n", "double")), True, False),
    ("promote long to float", record(field("n", "long")), record(field("n", "float")), True, False),
    ("promote float to double", record(field("n", "float")), record(field("n", "double")), True, False),
    ("narrow long to int", record(field("n", "long")), record(field("n", "int")), False, True),
    ("string to bytes", record(field("s", "string")), record(field("s", "bytes")), True, True),
    ("int to string", record(field("n", "int")), record(field("n", "string")), False, False),
    ("add enum symbol", record(field("c", COLOR)), record(field("c", COLOR_MORE)), True, False),
    ("remove enum symbol", record(field("c", COLOR_MORE)), record(field("c", COLOR)), False, True),
    ("add enum symbol, old enum has a default", record(field("c", COLOR_DEFAULT)),
     record(field("c", {**COLOR_MORE, "default": "RED"})), True, True),
    ("widen to a union", record(field("s", "string")), record(field("s", ["null", "string"])), True, False),
    ("narrow a union", record(field("s", ["null", "string"])), record(field("s", "string")), False, True),
    ("add a union branch", record(field("s", ["null", "string"])), record(field("s", ["null", "string", "int"])),
     True, False),
    ("union branch promoted", record(field("s", ["null", "int"])), record(field("s", ["null", "long"])),
     True, False),
    ("nested record: field without default", record(field("item", ITEM)), record(field("item", ITEM_QTY)),
     False, True),
    ("array items promoted", record(field("a", {"type": "array", "items": "int"})),
     record(field("a", {"type": "array", "items": "long"})), True, False),
    ("map values changed", record(field("m", {"type": "map", "values": "string"})),
     record(field("m", {"type": "map", "values": "int"})), False, False),
    ("fixed size changed", record(field("f", {"type": "fixed", "name": "F", "size": 4})),
     record(field("f", {"type": "fixed", "name": "F", "size": 8})), False, False),
    ("record renamed", record(ID), record(ID, name="Purchase"), False, False),
    ("record renamed with an alias", record(ID), record(ID, name="Purchase", aliases=["Order"]), True, False),
    ("field renamed with an alias", record(field("n", "int")), record(field("count", "int", aliases=["n"])),
     True, False),
    ("same schema", record(ID), record(ID), True, True),
    ("primitive to record", "string", record(ID), False, False),
]


def verdict(level: str, backward: bool, forward: bool) -> bool:
    if level == compatibility.NONE:
        return True
    if level.startswith("BACKWARD"):
        return backward
    if level.startswith("FORWARD"):
        return forward
    return backward and forward


def avro(document: Any) -> Any:
    return parse_schema(AVRO, json.dumps(document))


@pytest.mark.parametrize("level", compatibility.LEVELS)
@pytest.mark.parametrize(("case", "old", "new", "backward", "forward"), EVOLUTIONS,
                         ids=[row[0] for row in EVOLUTIONS])
def test_avro_evolution_verdict(level: str, case: str, old: Any, new: Any, backward: bool, forward: bool) -> None:
    problems = compatibility.compatibility_problems(level, avro(new), [avro(old)])
    assert (not problems) == verdict(level, backward, forward), problems


def test_transitive_levels_check_every_earlier_version() -> None:
    v1 = avro(record(ID))
    v2 = avro(record(ID, field("note", "string", default="")))
    v3 = avro(record(ID, field("note", "string")))  # reads v2 data, not v1 data
    verdicts = {level: not compatibility.compatibility_problems(level, v3, [v1, v2]) for level in compatibility.LEVELS}
    assert verdicts == {"NONE": True, "BACKWARD": True, "BACKWARD_TRANSITIVE": False, "FORWARD": True,
                        "FORWARD_TRANSITIVE": True, "FULL": True, "FULL_TRANSITIVE": False}


def test_problems_name_avros_incompatibility_types() -> None:
    problems = compatibility.compatibility_problems(
        compatibility.FULL, avro(record(field("n", "long"), field("x", "int"))), [avro(record(field("n", "int")))])
    assert any(message.startswith("READER_FIELD_MISSING_DEFAULT_VALUE") for message in problems)
    assert any(message.startswith("TYPE_MISMATCH") for message in problems)


def test_recursive_records_resolve() -> None:
    node = record(field("value", "int"), field("next", ["null", "shop.Order"]))
    grown = record(field("value", "long"), field("next", ["null", "shop.Order"]))
    assert compatibility.compatibility_problems(compatibility.BACKWARD, avro(grown), [avro(node)]) == []
    assert compatibility.compatibility_problems(compatibility.FORWARD, avro(grown), [avro(node)]) != []


def json_schema(document: Any) -> Any:
    return parse_schema(JSON, json.dumps(document))


OPEN = {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]}
CLOSED = {**OPEN, "additionalProperties": False}

#: (case, old, new, backward, forward) for the JSON Schema subset the registry checks
JSON_EVOLUTIONS: list[tuple[str, Any, Any, bool, bool]] = [
    ("same", OPEN, OPEN, True, True),
    ("optional property added to a closed model", CLOSED,
     {**CLOSED, "properties": {"id": {"type": "integer"}, "note": {"type": "string"}}}, True, False),
    ("optional property added to an open model", OPEN,
     {**OPEN, "properties": {"id": {"type": "integer"}, "note": {"type": "string"}}}, False, True),
    ("required property added", CLOSED, {**CLOSED, "properties": {"id": {"type": "integer"}, "n": {"type": "string"}},
                                         "required": ["id", "n"]}, False, False),
    ("integer widened to number", OPEN, {**OPEN, "properties": {"id": {"type": "number"}}}, True, False),
    ("type changed", OPEN, {**OPEN, "properties": {"id": {"type": "string"}}}, False, False),
    ("enum value added", {"enum": ["a", "b"]}, {"enum": ["a", "b", "c"]}, True, False),
    ("model closed", OPEN, CLOSED, False, True),
]


@pytest.mark.parametrize(("case", "old", "new", "backward", "forward"), JSON_EVOLUTIONS,
                         ids=[row[0] for row in JSON_EVOLUTIONS])
def test_json_schema_evolution(case: str, old: Any, new: Any, backward: bool, forward: bool) -> None:
    assert (not compatibility.compatibility_problems("BACKWARD", json_schema(new), [json_schema(old)])) == backward
    assert (not compatibility.compatibility_problems("FORWARD", json_schema(new), [json_schema(old)])) == forward


def test_schema_types_never_read_each_other() -> None:
    assert compatibility.compatibility_problems("BACKWARD", json_schema(OPEN), [avro(record(ID))])


def test_levels_are_named() -> None:
    assert compatibility.normalize_level("full_transitive") == "FULL_TRANSITIVE"
    with pytest.raises(InvalidCompatibilityLevelError) as caught:
        compatibility.normalize_level("SIDEWAYS")
    assert caught.value.error_code == 42203 and caught.value.http_status == 422


@pytest.mark.parametrize("text", ['{"type":"record","name":"R"}', '{"type":"record","name":"R","fields":'
                                  '[{"name":"a","type":"Missing"}]}', '{"type": "int", "default": 1', "[]x",
                                  '{"type":"record","name":"R","fields":[{"name":"a","type":"int","default":"x"}]}'])
def test_invalid_avro_schemas_are_42201(text: str) -> None:
    with pytest.raises(InvalidSchemaError) as caught:
        parse_schema(AVRO, text)
    assert caught.value.error_code == 42201


def test_canonical_form_ignores_spacing_and_key_order() -> None:
    one = parse_schema(AVRO, '{"type": "record", "name": "R", "fields": [{"name": "a", "type": "int"}]}')
    two = parse_schema(AVRO, '{"fields":[{"type":"int","name":"a"}],"name":"R","type":"record"}')
    assert one.canonical == two.canonical == '{"type":"record","name":"R","fields":[{"name":"a","type":"int"}]}'
