"""``kafkalite-avro-console-consumer.sh``: the console consumer printing Avro values (and keys)
decoded with their schemas from the registry, like Confluent's ``kafka-avro-console-consumer``.

Values in Confluent's wire format are decoded with the writer schema the registry holds for
their id and printed as JSON documents. ``--property schema.registry.url=<url>`` is required;
``print.schema.ids=true`` appends each value's schema id (after ``schema.id.separator``, a tab
by default); ``key.deserializer`` / ``value.deserializer`` choose ``avro`` (the default for
values), ``json`` (JSON Schema framed values) or ``string`` (raw UTF-8: keys by default). The
plain consumer's formatter properties (``print.key``, ``print.offset``, ...) work as there; an
unknown property is a usage error. A value that is not framed, or whose schema is unknown, ends
the tool with exit code 1 and the reason on standard error.
"""

from __future__ import annotations

import json
import sys
from typing import Any, TextIO

from kafkalite.errors import KafkaliteError
from kafkalite.registry.client import RegistryClient
from kafkalite.registry.serdes import AvroDeserializer, JSONSchemaDeserializer, SerializationError, unframe
from kafkalite.tools import console_consumer
from kafkalite.tools.common import UsageError, parse_bool_property, registry_client_from, run_cli

DESCRIPTION = ("Consume Avro (or JSON Schema) records in Confluent's wire format and print them as JSON. "
               "--property schema.registry.url=URL is required; print.schema.ids=true, schema.id.separator, "
               "key.deserializer and value.deserializer (avro, json, string), and the formatter properties.")
PROPERTIES = frozenset({
    "schema.registry.url", "print.schema.ids", "schema.id.separator", "key.deserializer", "value.deserializer",
    "print.key", "print.value", "print.timestamp", "print.partition", "print.offset", "print.headers",
    "key.separator", "line.separator", "headers.separator"})


class Decoded:
    """A decoded value and its schema id, printed as JSON."""

    __slots__ = ("schema_id", "value")

    def __init__(self, schema_id: int | None, value: Any) -> None:
        self.schema_id = schema_id
        self.value = value

    def __str__(self) -> str:
        return json.dumps(self.value, default=_json_default, ensure_ascii=False)


def _json_default(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("latin-1")  # Avro's JSON encoding of bytes: one char per byte
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return str(value)


def _deserializer(kind: str, client: RegistryClient, side: str) -> Any:
    if kind == "string":
        return None
    inner: Any
    if kind == "avro":
        inner = AvroDeserializer(client)
    elif kind == "json":
        inner = JSONSchemaDeserializer(client)
    else:
        raise UsageError(f"{side}.deserializer must be avro, json or string, got {kind!r}")

    def decode(data: bytes) -> Decoded:
        return Decoded(unframe(data)[0], inner(data))

    return decode


class AvroFormatter(console_consumer.Formatter):
    def __init__(self, properties: dict[str, str]) -> None:
        super().__init__(properties)
        self.print_schema_ids = parse_bool_property(properties, "print.schema.ids")
        self.schema_id_separator = console_consumer._unescape(properties.get("schema.id.separator", "\t"))

    def format(self, record: Any) -> str:
        line = super().format(record)
        if self.print_schema_ids and self.print_value:
            schema_id = record.value.schema_id if isinstance(record.value, Decoded) else None
            body = line[:-len(self.line_separator)] if self.line_separator else line
            line = f"{body}{self.schema_id_separator}{schema_id if schema_id is not None else 'null'}" \
                   f"{self.line_separator}"
        return line


def formatter_factory(properties: dict[str, str], options: dict[str, Any]) -> console_consumer.Formatter:
    client = registry_client_from(properties, PROPERTIES)
    for side, default in (("key", "string"), ("value", "avro")):
        deserializer = _deserializer(properties.get(f"{side}.deserializer", default).lower(), client, side)
        if deserializer is not None:
            options[f"{side}_deserializer"] = deserializer
    return AvroFormatter(properties)


def main(argv: list[str] | None = None, out: TextIO | None = None) -> int:
    try:
        return console_consumer.main(argv, out, prog="kafkalite-avro-console-consumer.sh",
                                     description=DESCRIPTION, formatter_factory=formatter_factory)
    except (SerializationError, KafkaliteError) as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(run_cli(main))
