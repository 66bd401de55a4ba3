"""Typed values: Confluent-framed Avro or JSON Schema values as a struct column, and back.

With ``option("valueFormat", "avro")`` (or ``"json"``) and ``option("schema.registry.url", ...)``
the source's ``value`` column is a struct typed from a schema in the registry — the subject's
version named by ``valueSubject`` (default ``<topic>-value`` of the one subscribed topic) and
``valueSchemaVersion`` (default ``latest``) — instead of binary. Each value is decoded with its
own writer schema (the id in its frame) and resolved to that reader schema, so records written
with older compatible versions read fine; a null value (a tombstone) is a null struct; a value
that is not in Confluent's wire format, or cannot be resolved, fails the read naming the
partition and offset (Spark's FAILFAST). The sink takes the same options: a struct ``value``
column is encoded with the subject's chosen version (registered schemas only: the sink never
registers) and framed with its id.

Avro to Spark: boolean, int, long (bigint), float, double, string, bytes and fixed (binary),
enum (string), records (struct), arrays, maps (map<string, _>), unions of null and one type
(that type, nullable), other unions (string: the JSON of the value), logical types date,
timestamp-millis/-micros (timestamp) and decimal. JSON Schema to Spark: object (struct of its
properties), integer (bigint), number (double), boolean, string, array; anything else is a
string holding the JSON of the value.

Concurrency: the driver resolves the schema once (:func:`resolve`); executors decode and
encode with registry clients cached per process (schemas by id never change).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import pyarrow as pa

from kafkalite.errors import KafkaliteError
from kafkalite.registry.client import RegistryClient
from kafkalite.registry.schemas import AVRO, ParsedSchema
from kafkalite.registry.serdes import AvroDeserializer, AvroSerializer, JSONSchemaDeserializer, JSONSchemaSerializer
from kafkalite.spark.options import SourceOptions, SparkOptionError, ValueFormat

_TIMESTAMP = pa.timestamp("us", tz="UTC")
Convert = Callable[[Any], Any]


_CLIENTS: dict[str, RegistryClient] = {}
_CLIENTS_LOCK = threading.Lock()


def registry_client(url: str) -> RegistryClient:
    """One client (and so one schema cache) per registry URL in this process."""
    with _CLIENTS_LOCK:
        client = _CLIENTS.get(url)
        if client is None:
            client = _CLIENTS[url] = RegistryClient(url)
        return client


def resolve(value_format: ValueFormat) -> ValueFormat:
    """Fetch the chosen schema from the registry (driver side)."""
    if value_format.schema_id >= 0:
        return value_format
    try:
        registered = registry_client(value_format.registry_url).version(value_format.subject, value_format.version)
    except KafkaliteError as exc:
        raise SparkOptionError("valueSubject", f"cannot get version {value_format.version} of subject "
                                               f"{value_format.subject!r} from {value_format.registry_url}: {exc}") \
            from None
    if registered.schema_type != value_format.schema_type:
        raise SparkOptionError("valueFormat", f"subject {value_format.subject} holds a {registered.schema_type} "
                                              f"schema, not {value_format.schema_type}")
    return replace(value_format, schema_id=registered.schema_id, schema=registered.schema)


def parsed_schema(value_format: ValueFormat) -> ParsedSchema:
    return registry_client(value_format.registry_url).parsed(value_format.schema_id)


# --- types -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Typed:
    ddl: str
    arrow: pa.DataType
    convert: Convert | None = None  # Python value → what pa.array takes for this type


def _quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _struct(fields: list[tuple[str, _Typed]]) -> _Typed:
    if not fields:
        return _as_json()
    ddl = "struct<" + ", ".join(f"{_quote(name)}: {typed.ddl}" for name, typed in fields) + ">"
    arrow = pa.struct([pa.field(name, typed.arrow) for name, typed in fields])
    converters = [(name, typed.convert) for name, typed in fields if typed.convert is not None]
    if not converters:
        return _Typed(ddl, arrow)

    def convert(value: Any) -> Any:
        if value is None:
            return None
        out = dict(value)
        for name, function in converters:
            if out.get(name) is not None:
                out[name] = function(out[name])
        return out

    return _Typed(ddl, arrow, convert)


def _array(items: _Typed) -> _Typed:
    function = items.convert
    return _Typed(f"array<{items.ddl}>", pa.list_(pa.field("element", items.arrow)),
                  (lambda value: None if value is None else [function(item) if item is not None else None
                                                             for item in value]) if function else None)


def _map(values: _Typed) -> _Typed:
    function = values.convert

    def convert(value: Any) -> Any:
        if value is None:
            return None
        return [(key, function(item) if function and item is not None else item) for key, item in value.items()]

    return _Typed(f"map<string, {values.ddl}>", pa.map_(pa.string(), values.arrow), convert)


def _as_json() -> _Typed:
    return _Typed("string", pa.string(), lambda value: value if isinstance(value, str) else
                  json.dumps(value, default=str, ensure_ascii=False))


_AVRO_PRIMITIVES = {"boolean": _Typed("boolean", pa.bool_()), "int": _Typed("int", pa.int32()),
                    "long": _Typed("bigint", pa.int64()), "float": _Typed("float", pa.float32()),
                    "double": _Typed("double", pa.float64()), "string": _Typed("string", pa.string()),
                    "bytes": _Typed("binary", pa.binary())}


def _avro_type(node: Any, named: Mapping[str, Any], seen: tuple[str, ...]) -> _Typed:
    if isinstance(node, str):
        if node in _AVRO_PRIMITIVES:
            return _AVRO_PRIMITIVES[node]
        if node == "null":
            return _Typed("string", pa.string())
        if node in seen:
            raise SparkOptionError("valueFormat", f"the recursive type {node} has no Spark type")
        return _avro_type(named[node], named, seen)
    if isinstance(node, list):
        branches = [branch for branch in node if branch != "null"]
        if len(branches) == 1:
            return _avro_type(branches[0], named, seen)
        return _as_json()
    kind = node.get("type")
    logical = node.get("logicalType")
    if isinstance(kind, (dict, list)):
        return _avro_type(kind, named, seen)
    if logical == "date" and kind == "int":
        return _Typed("date", pa.date32())
    if logical in ("timestamp-millis", "timestamp-micros") and kind == "long":
        return _Typed("timestamp", _TIMESTAMP)
    if logical == "decimal" and kind in ("bytes", "fixed"):
        precision, scale = int(node.get("precision", 38)), int(node.get("scale", 0))
        return _Typed(f"decimal({precision},{scale})", pa.decimal128(precision, scale))
    if kind == "record" or kind == "error":
        name = str(node.get("name"))
        return _struct([(field["name"], _avro_type(field["type"], named, (*seen, name)))
                        for field in node.get("fields", [])])
    if kind == "enum":
        return _Typed("string", pa.string())
    if kind == "fixed":
        return _Typed("binary", pa.binary())
    if kind == "array":
        return _array(_avro_type(node["items"], named, seen))
    if kind == "map":
        return _map(_avro_type(node["values"], named, seen))
    return _avro_type(kind, named, seen)


_JSON_PRIMITIVES = {"integer": _Typed("bigint", pa.int64()), "number": _Typed("double", pa.float64()),
                    "boolean": _Typed("boolean", pa.bool_()), "string": _Typed("string", pa.string())}


def _json_type(node: Any) -> _Typed:
    if not isinstance(node, dict):
        return _as_json()
    kind = node.get("type")
    if isinstance(kind, list):
        kinds = [item for item in kind if item != "null"]
        kind = kinds[0] if len(kinds) == 1 else None
    if kind == "object" and isinstance(node.get("properties"), dict):
        return _struct([(name, _json_type(schema)) for name, schema in node["properties"].items()])
    if kind == "array" and isinstance(node.get("items"), dict):
        return _array(_json_type(node["items"]))
    if isinstance(kind, str) and kind in _JSON_PRIMITIVES:
        return _JSON_PRIMITIVES[kind]
    return _as_json()


def value_type(schema: ParsedSchema) -> _Typed:
    """The Spark (DDL) and Arrow types of values of ``schema``, and the conversion to them."""
    if schema.schema_type == AVRO:
        return _avro_type(schema.parsed, schema.named, ())
    return _json_type(schema.parsed)


def value_ddl(value_format: ValueFormat) -> str:
    return value_type(parsed_schema(value_format)).ddl


# --- executors ---------------------------------------------------------------------------------------


def _deserializer(value_format: ValueFormat) -> Callable[[bytes], Any]:
    client = registry_client(value_format.registry_url)
    if value_format.schema_type == AVRO:
        return AvroDeserializer(client, value_format.schema)
    return JSONSchemaDeserializer(client)


def decode_column(column: pa.Array, value_format: ValueFormat, where: Callable[[int], str]) -> pa.Array:
    """Binary framed values → the typed struct (or other) column; ``where(row)`` names a bad row."""
    typed = value_type(parsed_schema(value_format))
    deserialize = _deserializer(value_format)
    values: list[Any] = []
    for row, data in enumerate(column.to_pylist()):
        if data is None:
            values.append(None)
            continue
        try:
            value = deserialize(data)
        except KafkaliteError as exc:
            raise KafkaliteError(f"cannot decode the value at {where(row)}: {exc}") from None
        values.append(typed.convert(value) if typed.convert is not None and value is not None else value)
    return pa.array(values, type=typed.arrow)


def _from_arrow(value: Any) -> Any:
    """Spark's rows as the serializers take them (maps arrive as lists of pairs)."""
    if isinstance(value, dict):
        return {key: _from_arrow(item) for key, item in value.items()}
    if isinstance(value, list):
        if value and all(isinstance(item, tuple) and len(item) == 2 for item in value):
            return {key: _from_arrow(item) for key, item in value}
        return [_from_arrow(item) for item in value]
    return value


def encode_column(column: pa.Array, value_format: ValueFormat) -> list[bytes | None]:
    """A struct (or other typed) column → framed values with the format's schema id."""
    client = registry_client(value_format.registry_url)
    serializer_class = AvroSerializer if value_format.schema_type == AVRO else JSONSchemaSerializer
    serializer = serializer_class(client, None, schema_id=value_format.schema_id)
    out: list[bytes | None] = []
    for value in column.to_pylist():
        out.append(None if value is None else serializer(_from_arrow(value)))
    return out


def typed_batch(batch: pa.RecordBatch, value_format: ValueFormat, topic: str, partition: int) -> pa.RecordBatch:
    """A source batch with its binary value column decoded (executor side)."""
    index = batch.schema.get_field_index("value")
    offsets = batch.column(batch.schema.get_field_index("offset"))
    column = decode_column(batch.column(index), value_format,
                           lambda row: f"{topic}-{partition} offset {offsets[row].as_py()}")
    return batch.set_column(index, pa.field("value", column.type), column)


def resolve_source(options: SourceOptions) -> SourceOptions:
    """Source options with the value format's schema fetched (driver side)."""
    value_format = options.settings.value_format
    if value_format is None:
        return options
    return replace(options, settings=replace(options.settings, value_format=resolve(value_format)))
