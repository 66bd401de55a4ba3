"""``kafkalite-avro-console-producer.sh``: the console producer for Avro values (and keys) in
Confluent's wire format, like Confluent's ``kafka-avro-console-producer``.

Every line is one record in Avro's JSON encoding (unions written ``{"string": "x"}``), checked
against the schema and written as magic byte 0, the schema id and the Avro binary body. The
``--property`` names are Confluent's: ``schema.registry.url`` (required), ``value.schema`` /
``value.schema.file`` / ``value.schema.id``, ``key.schema`` / ``key.schema.file`` /
``key.schema.id`` (with ``parse.key=true``), ``auto.register.schemas`` (default true),
``use.latest.version``, ``value.subject.name.strategy`` / ``key.subject.name.strategy``
(``TopicNameStrategy``, ``RecordNameStrategy``, ``TopicRecordNameStrategy``); the plain
producer's ``parse.key``, ``key.separator``, ``ignore.error`` and ``file`` work as there. An
unknown property is a usage error; a line that is not a datum of the schema ends the tool with
exit code 1, naming the line.
"""

from __future__ import annotations

import io
import sys
from pathlib import Path
from typing import Any, TextIO

from kafkalite.registry.errors import SchemaRegistryError
from kafkalite.registry.schemas import AVRO, parse_schema
from kafkalite.registry.serdes import STRATEGIES, AvroSerializer, SerializationError
from kafkalite.tools import console_producer
from kafkalite.tools.common import UsageError, parse_bool_property, registry_client_from, run_cli

PROG = "kafkalite-avro-console-producer.sh"
DESCRIPTION = ("Read Avro records as JSON lines from standard input and publish them in Confluent's wire format. "
               "--property schema.registry.url=URL is required; value.schema=SCHEMA (or value.schema.file, "
               "value.schema.id), key.schema with parse.key=true, auto.register.schemas, use.latest.version, "
               "value.subject.name.strategy.")
PROPERTIES = frozenset({
    "schema.registry.url", "value.schema", "value.schema.file", "value.schema.id", "key.schema", "key.schema.file",
    "key.schema.id", "auto.register.schemas", "use.latest.version", "value.subject.name.strategy",
    "key.subject.name.strategy", "parse.key", "key.separator", "ignore.error", "file"})


def _schema_text(properties: dict[str, str], side: str) -> str | None:
    if f"{side}.schema.file" in properties:
        try:
            return Path(properties[f"{side}.schema.file"]).read_text(encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"cannot read {side}.schema.file: {exc.strerror}") from None
    return properties.get(f"{side}.schema")


def _schema_id(properties: dict[str, str], side: str) -> int | None:
    text = properties.get(f"{side}.schema.id")
    if text is None:
        return None
    if not text.isdigit():
        raise UsageError(f"{side}.schema.id must be a schema id, got {text!r}")
    return int(text)


def _line_codec(serializer: AvroSerializer, side: str) -> console_producer.LineCodec:
    """Parse a line as a datum in Avro's JSON encoding, for ``serializer`` to write."""
    from fastavro import json_reader

    assert serializer.schema is not None
    parsed = serializer.schema.parsed

    def decode(text: str) -> Any:
        try:
            return next(iter(json_reader(io.StringIO(text), parsed)))
        except StopIteration:
            raise SerializationError(f"an empty {side}") from None
        except Exception as exc:  # fastavro raises ValueError, KeyError, AttributeError... for bad data
            raise SerializationError(f"the {side} {text[:80]!r} is not a datum of the schema: "
                                     f"{type(exc).__name__}: {exc}") from None

    return decode


def codecs(topic: str) -> console_producer.CodecFactory:
    def build(properties: dict[str, str], options: dict[str, Any]) -> tuple[console_producer.LineCodec,
                                                                            console_producer.LineCodec]:
        client = registry_client_from(properties, PROPERTIES)
        auto_register = parse_bool_property(properties, "auto.register.schemas", True)
        latest = parse_bool_property(properties, "use.latest.version")
        codecs: dict[str, console_producer.LineCodec] = {}
        for side in ("key", "value"):
            text, schema_id = _schema_text(properties, side), _schema_id(properties, side)
            if text is None and schema_id is None and not (latest and side == "value"):
                if side == "value":
                    raise UsageError("give --property value.schema=<schema> (or value.schema.file, value.schema.id)")
                continue
            strategy = properties.get(f"{side}.subject.name.strategy", "TopicNameStrategy").rpartition(".")[2]
            if strategy not in STRATEGIES:
                raise UsageError(f"unknown {side}.subject.name.strategy {strategy!r}; known: {', '.join(STRATEGIES)}")
            if text is not None:
                parse_schema(AVRO, text)  # a bad schema is named before anything is sent
            serializer = AvroSerializer(client, text, topic, is_key=side == "key", auto_register=auto_register,
                                        use_latest_version=latest and text is None and schema_id is None,
                                        subject_name_strategy=strategy, schema_id=schema_id)
            if serializer.schema is None:
                serializer.schema = serializer._schema_for(topic)[1]
            codecs[side] = _line_codec(serializer, side)
            options[f"{side}_serializer"] = serializer
        if parse_bool_property(properties, "parse.key") and "key" not in codecs:
            raise UsageError("parse.key=true needs key.schema (or key.schema.file, key.schema.id)")
        return codecs.get("key", console_producer._utf8), codecs["value"]

    return build


def main(argv: list[str] | None = None, stdin: TextIO | None = None) -> int:
    parser = console_producer.build_parser()
    parser.prog, parser.description = PROG, DESCRIPTION
    arguments = parser.parse_known_args(argv)[0]  # the topic, for the topic name strategy (and --help)
    try:
        return console_producer.main(argv, stdin, prog=PROG,
                                     description=DESCRIPTION, codecs=codecs(arguments.topic))
    except (SerializationError, SchemaRegistryError) as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(run_cli(main))
