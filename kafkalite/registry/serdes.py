"""Avro and JSON Schema serializers in Confluent's wire format, for kafkalite's clients.

A serialized value is byte 0 = magic 0, bytes 1-4 = the schema id (int32 big-endian), then the
Avro binary encoding (or the UTF-8 JSON document), so confluent-kafka's serdes and kafkalite's
read each other's records. The serializers are plain callables of one value, as kafkalite's
``value_serializer``/``key_serializer`` expect (give ``topic=`` for the topic name strategies,
or call :meth:`serialize` with the topic); the deserializers are callables of the bytes.

Options (Confluent's names in brackets):

- ``subject_name_strategy`` [subject.name.strategy]: :func:`topic_name_strategy` (default,
  ``<topic>-value``/``<topic>-key``), :func:`record_name_strategy` (the record's full name) or
  :func:`topic_record_name_strategy` (``<topic>-<record full name>``);
- ``auto_register`` [auto.register.schemas]: register the schema when new (default); when off,
  the schema must already be registered under the subject (looked up);
- ``use_latest_version`` [use.latest.version]: serialize with the subject's latest schema.

Thread-safety: the serdes hold a :class:`~kafkalite.registry.client.RegistryClient` and caches
guarded by it; safe to share between threads.
"""

from __future__ import annotations

import io
import json
import struct
import threading
from collections.abc import Callable
from typing import Any

from kafkalite.errors import KafkaliteError
from kafkalite.registry.client import RegistryClient
from kafkalite.registry.schemas import AVRO, JSON, ParsedSchema, json_validator, parse_schema

MAGIC = 0
_HEADER = struct.Struct(">bI")

SubjectNameStrategy = Callable[[str | None, str | None, bool], str]


class SerializationError(KafkaliteError):
    """A value that cannot be (de)serialized: not framed, unknown schema, not matching it."""


def topic_name_strategy(topic: str | None, record_name: str | None, is_key: bool) -> str:
    if not topic:
        raise SerializationError("the topic name strategy needs the topic: give topic= or call serialize(value, topic)")
    return f"{topic}-{'key' if is_key else 'value'}"


def record_name_strategy(topic: str | None, record_name: str | None, is_key: bool) -> str:
    if not record_name:
        raise SerializationError("the record name strategy needs a named record schema")
    return record_name


def topic_record_name_strategy(topic: str | None, record_name: str | None, is_key: bool) -> str:
    if not topic:
        raise SerializationError("the topic record name strategy needs the topic")
    return f"{topic}-{record_name_strategy(topic, record_name, is_key)}"


STRATEGIES: dict[str, SubjectNameStrategy] = {
    "TopicNameStrategy": topic_name_strategy, "RecordNameStrategy": record_name_strategy,
    "TopicRecordNameStrategy": topic_record_name_strategy}


def frame(schema_id: int, payload: bytes) -> bytes:
    return _HEADER.pack(MAGIC, schema_id) + payload


def unframe(data: bytes | bytearray | memoryview) -> tuple[int, memoryview]:
    """(schema id, payload) of a framed value; SerializationError when it is not one."""
    view = memoryview(data)
    if len(view) < _HEADER.size:
        raise SerializationError(f"a framed value has at least {_HEADER.size} bytes, got {len(view)}")
    magic, schema_id = _HEADER.unpack_from(view)
    if magic != MAGIC:
        raise SerializationError(f"unknown magic byte {magic}: not in Confluent's wire format")
    return schema_id, view[_HEADER.size:]


def _client(registry: RegistryClient | str) -> RegistryClient:
    return registry if isinstance(registry, RegistryClient) else RegistryClient(registry)


class _Serializer:
    schema_type = AVRO

    def __init__(self, registry: RegistryClient | str, schema: str | None, topic: str | None = None, *,
                 is_key: bool = False, auto_register: bool = True, use_latest_version: bool = False,
                 subject_name_strategy: SubjectNameStrategy | str = topic_name_strategy,
                 to_dict: Callable[[Any], Any] | None = None, schema_id: int | None = None) -> None:
        """``schema_id`` [use.schema.id]: serialize with this registered schema, without looking
        up or registering a subject."""
        if schema is None and not use_latest_version and schema_id is None:
            raise SerializationError("give a schema, a schema_id, or use_latest_version=True")
        if isinstance(subject_name_strategy, str) and subject_name_strategy not in STRATEGIES:
            raise SerializationError(f"unknown subject name strategy {subject_name_strategy!r}; known: "
                                     f"{', '.join(STRATEGIES)}")
        self.client = _client(registry)
        self.schema = parse_schema(self.schema_type, schema) if schema is not None else None
        self.topic = topic
        self.is_key = is_key
        self.auto_register = auto_register
        self.use_latest_version = use_latest_version
        self.strategy = STRATEGIES[subject_name_strategy] if isinstance(subject_name_strategy, str) \
            else subject_name_strategy
        self.to_dict = to_dict
        self._lock = threading.Lock()
        self._by_subject: dict[str, tuple[int, ParsedSchema]] = {}
        self._fixed: tuple[int, ParsedSchema] | None = None
        if schema_id is not None:
            fixed = self.client.parsed(schema_id)
            if fixed.schema_type != self.schema_type:
                raise SerializationError(f"schema {schema_id} is a {fixed.schema_type} schema, not {self.schema_type}")
            self._fixed = schema_id, fixed
            self.schema = fixed

    def __call__(self, value: Any) -> bytes:
        return self.serialize(value, self.topic)

    def serialize(self, value: Any, topic: str | None = None) -> bytes:
        schema_id, schema = self._schema_for(topic or self.topic)
        if self.to_dict is not None:
            value = self.to_dict(value)
        return frame(schema_id, self._encode(schema, value))

    def _schema_for(self, topic: str | None) -> tuple[int, ParsedSchema]:
        if self._fixed is not None:
            return self._fixed
        record_name = self.schema.record_name() if self.schema is not None else None
        if record_name is None and self.use_latest_version and self.strategy is not topic_name_strategy:
            raise SerializationError("use_latest_version with a record name strategy needs the schema")
        subject = self.strategy(topic, record_name, self.is_key)
        with self._lock:
            known = self._by_subject.get(subject)
        if known is not None:
            return known
        if self.use_latest_version:
            latest = self.client.version(subject, "latest")
            known = latest.schema_id, self.client.parse(latest)
        else:
            assert self.schema is not None
            if self.auto_register:
                schema_id = self.client.register(subject, self.schema.canonical, self.schema_type)
            else:
                schema_id = self.client.lookup(subject, self.schema.canonical, self.schema_type).schema_id
            known = schema_id, self.schema
        with self._lock:
            self._by_subject[subject] = known
        return known

    def _encode(self, schema: ParsedSchema, value: Any) -> bytes:
        raise NotImplementedError


class AvroSerializer(_Serializer):
    """Avro binary values in Confluent's wire format (see the module docstring)."""

    schema_type = AVRO

    def _encode(self, schema: ParsedSchema, value: Any) -> bytes:
        from fastavro import schemaless_writer

        out = io.BytesIO()
        try:
            schemaless_writer(out, schema.parsed, value)
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise SerializationError(f"the value does not match the Avro schema: {exc}") from None
        return out.getvalue()


class JSONSchemaSerializer(_Serializer):
    """JSON documents, validated against their JSON Schema, in Confluent's wire format."""

    schema_type = JSON

    def __init__(self, *args: Any, validate: bool = True, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.validate = validate

    def _encode(self, schema: ParsedSchema, value: Any) -> bytes:
        if self.validate:
            _validate(schema, value)
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def _validate(schema: ParsedSchema, value: Any) -> None:
    error = next(iter(json_validator(schema).iter_errors(value)), None)
    if error is not None:
        raise SerializationError(f"the value does not match the JSON schema: {error.message}")


class _Deserializer:
    def __init__(self, registry: RegistryClient | str, schema: str | None = None,
                 from_dict: Callable[[Any], Any] | None = None) -> None:
        self.client = _client(registry)
        self.reader = parse_schema(self._type, schema) if schema is not None else None
        self.from_dict = from_dict

    _type = AVRO

    def __call__(self, data: bytes | bytearray | memoryview | None) -> Any:
        if data is None:
            return None
        schema_id, payload = unframe(data)
        try:
            writer = self.client.parsed(schema_id)
        except KafkaliteError as exc:
            raise SerializationError(f"schema {schema_id} of a value: {exc}") from exc
        if writer.schema_type != self._type:
            raise SerializationError(f"schema {schema_id} is a {writer.schema_type} schema, not {self._type}")
        value = self._decode(writer, payload)
        return self.from_dict(value) if self.from_dict is not None else value

    def _decode(self, writer: ParsedSchema, payload: memoryview) -> Any:
        raise NotImplementedError


class AvroDeserializer(_Deserializer):
    """Values in Confluent's wire format decoded with their writer schema (from the registry),
    resolved to ``schema`` (the reader schema) when given."""

    _type = AVRO

    def _decode(self, writer: ParsedSchema, payload: memoryview) -> Any:
        from fastavro import schemaless_reader

        try:
            return schemaless_reader(io.BytesIO(payload), writer.parsed,
                                     self.reader.parsed if self.reader is not None else None)
        except (ValueError, TypeError, KeyError, IndexError, EOFError, UnicodeDecodeError) as exc:
            raise SerializationError(f"cannot decode an Avro value: {exc}") from None
        except Exception as exc:  # fastavro's SchemaResolutionError and friends
            raise SerializationError(f"cannot decode an Avro value: {type(exc).__name__}: {exc}") from None


class JSONSchemaDeserializer(_Deserializer):
    """JSON values in Confluent's wire format, validated against their schema (``validate``)."""

    _type = JSON

    def __init__(self, registry: RegistryClient | str, schema: str | None = None,
                 from_dict: Callable[[Any], Any] | None = None, validate: bool = True) -> None:
        super().__init__(registry, schema, from_dict)
        self.validate = validate

    def _decode(self, writer: ParsedSchema, payload: memoryview) -> Any:
        try:
            value = json.loads(bytes(payload))
        except ValueError as exc:
            raise SerializationError(f"not a JSON value: {exc}") from None
        if self.validate:
            _validate(self.reader or writer, value)
        return value
