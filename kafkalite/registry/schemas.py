"""Schema types, parsing and canonical forms.

A schema reaches the registry as text plus a type (``AVRO`` when absent, ``JSON``) and a list of
references (``{"name", "subject", "version"}``: another registered schema the text uses by
name). :func:`parse_schema` turns it into a :class:`ParsedSchema`: the text checked by the
type's library (fastavro for Avro, jsonschema for JSON Schema) and its canonical form — the
compact JSON rendering with a fixed key order — so the same schema written with other spacing
or key order is the same schema and gets the same id. Protobuf is not supported (its schemas
are refused as an unknown type, 42201).

Thread-safety: pure functions over immutable values (the parse cache has a lock).
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kafkalite.registry.errors import InvalidSchemaError

AVRO = "AVRO"
JSON = "JSON"
PROTOBUF = "PROTOBUF"
#: The schema types the registry accepts (``GET /schemas/types``).
SCHEMA_TYPES = (JSON, AVRO)

#: Avro's attribute order in a rendered schema (Avro's Schema.toString order); others follow sorted.
_AVRO_KEY_ORDER = {name: rank for rank, name in enumerate(
    ("type", "name", "namespace", "doc", "fields", "symbols", "items", "values", "size", "default", "order",
     "aliases", "logicalType", "precision", "scale"))}
_AVRO_FIELD_KEY_ORDER = {name: rank for rank, name in enumerate(("name", "type", "doc", "default", "order", "aliases"))}
#: Longest schema text accepted (Confluent has no documented cap; this bounds parsing work).
MAX_SCHEMA_CHARS = 1024 * 1024


@dataclass(frozen=True)
class Reference:
    """A reference of a schema to another registered schema: ``name`` as the text uses it."""

    name: str
    subject: str
    version: int

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "subject": self.subject, "version": self.version}


@dataclass(frozen=True)
class ResolvedReference:
    """A reference with the referenced schema's own text, type and references resolved."""

    reference: Reference
    schema: ParsedSchema


@dataclass(frozen=True)
class ParsedSchema:
    """A checked schema: its type, canonical text, references and the parsed form."""

    schema_type: str
    canonical: str
    references: tuple[Reference, ...] = ()
    #: Avro: fastavro's parsed schema; JSON: the schema document.
    parsed: Any = None
    #: Avro: every named type the schema and its references define, by full name.
    named: Mapping[str, Any] = field(default_factory=dict)
    #: JSON: referenced documents by reference name.
    documents: Mapping[str, Any] = field(default_factory=dict)

    @property
    def identity(self) -> tuple[str, str, tuple[Reference, ...]]:
        """What makes two registrations the same schema (and so the same id)."""
        return self.schema_type, self.canonical, self.references

    def record_name(self) -> str | None:
        """The full name of an Avro record (or a JSON schema's ``title``): the record name strategy's subject."""
        if self.schema_type == AVRO:
            parsed = self.parsed
            if isinstance(parsed, dict) and isinstance(parsed.get("name"), str):
                return str(parsed["name"])
            return None
        if isinstance(self.parsed, dict) and isinstance(self.parsed.get("title"), str):
            return str(self.parsed["title"])
        return None


def normalize_type(schema_type: Any) -> str:
    """The schema type named by a request (absent means AVRO); 42201 for an unknown one."""
    if schema_type is None or schema_type == "":
        return AVRO
    if not isinstance(schema_type, str):
        raise InvalidSchemaError(f"schemaType must be a string, got {type(schema_type).__name__}")
    upper = schema_type.upper()
    if upper == PROTOBUF:
        raise InvalidSchemaError("PROTOBUF schemas are not supported by this registry; use AVRO or JSON")
    if upper not in SCHEMA_TYPES:
        raise InvalidSchemaError(f"Invalid schema type {schema_type!r}; expected one of {', '.join(SCHEMA_TYPES)}")
    return upper


_CACHE_SIZE = 512
_cache: OrderedDict[tuple[Any, ...], ParsedSchema] = OrderedDict()
_cache_lock = threading.Lock()


def parse_schema(schema_type: str, text: str, references: Sequence[ResolvedReference] = ()) -> ParsedSchema:
    """Check ``text`` as a schema of ``schema_type`` using ``references``; 42201 when it is not one.
    Recent results are cached (the REST API parses a request's schema on a worker thread, then
    its writer finds it here on the event loop)."""
    key = (schema_type, text, tuple((item.reference, item.schema.identity) for item in references))
    with _cache_lock:
        cached = _cache.get(key)
        if cached is not None:
            _cache.move_to_end(key)
            return cached
    parsed = _parse(schema_type, text, references)
    with _cache_lock:
        _cache[key] = parsed
        while len(_cache) > _CACHE_SIZE:
            _cache.popitem(last=False)
    return parsed


def _parse(schema_type: str, text: str, references: Sequence[ResolvedReference]) -> ParsedSchema:
    if not isinstance(text, str):
        raise InvalidSchemaError("schema must be a string")
    if len(text) > MAX_SCHEMA_CHARS:
        raise InvalidSchemaError(f"schema is longer than {MAX_SCHEMA_CHARS} characters")
    try:
        document = json.loads(text)
    except (ValueError, RecursionError) as exc:
        if schema_type == AVRO and text.strip() and not text.lstrip().startswith(("{", "[", '"')):
            document = text.strip()  # a bare primitive name, e.g. string
        else:
            raise InvalidSchemaError(f"Invalid schema: the schema is not JSON: {exc}") from None
    refs = tuple(item.reference for item in references)
    if schema_type == AVRO:
        return _parse_avro(document, refs, references)
    return _parse_json_schema(document, refs, references)


def _parse_avro(document: Any, refs: tuple[Reference, ...], references: Sequence[ResolvedReference]) -> ParsedSchema:
    from fastavro.schema import parse_schema as fastavro_parse

    named: dict[str, Any] = {}
    for item in references:
        if item.schema.schema_type != AVRO:
            raise InvalidSchemaError(f"reference {item.reference.name} is a {item.schema.schema_type} schema")
        named.update(item.schema.named)
    try:
        _check_avro_shape(document)
        parsed = fastavro_parse(document, named_schemas=named, _write_hint=False)
    except InvalidSchemaError:
        raise
    except RecursionError:
        raise InvalidSchemaError("Invalid schema: nested too deeply") from None
    except Exception as exc:  # fastavro raises SchemaParseException, UnknownType, ValueError, TypeError...
        raise InvalidSchemaError(f"Invalid schema: {type(exc).__name__}: {exc}") from None
    return ParsedSchema(AVRO, _compact(_avro_ordered(document)), refs, parsed, dict(named))


_AVRO_REQUIRED = {"record": ("fields", list), "error": ("fields", list), "enum": ("symbols", list),
                  "fixed": ("size", int), "array": ("items", object), "map": ("values", object)}


def _check_avro_shape(node: Any) -> None:
    """What Avro's parser requires and fastavro lets pass (a record without ``fields``, ...)."""
    if isinstance(node, list):
        for item in node:
            _check_avro_shape(item)
    elif isinstance(node, dict):
        kind = node.get("type")
        required = _AVRO_REQUIRED.get(kind) if isinstance(kind, str) else None
        if required is not None:
            name, expected = required
            if not isinstance(node.get(name), expected) or isinstance(node.get(name), bool):
                raise InvalidSchemaError(f"Invalid schema: a {kind} needs {name!r} ({expected.__name__})")
        if isinstance(kind, (dict, list)):
            _check_avro_shape(kind)
        for item in node.get("fields", []) if isinstance(node.get("fields"), list) else []:
            if not isinstance(item, dict):
                raise InvalidSchemaError("Invalid schema: a record field is an object")
            _check_avro_shape(item.get("type"))
        for key in ("items", "values"):
            if key in node and kind in ("array", "map"):
                _check_avro_shape(node[key])


def _parse_json_schema(document: Any, refs: tuple[Reference, ...],
                       references: Sequence[ResolvedReference]) -> ParsedSchema:
    import jsonschema
    from jsonschema.exceptions import SchemaError

    if not isinstance(document, (dict, bool)):
        raise InvalidSchemaError("Invalid schema: a JSON schema is an object or a boolean")
    try:
        validator = jsonschema.validators.validator_for(document, default=jsonschema.Draft7Validator)
        validator.check_schema(document)
    except SchemaError as exc:
        raise InvalidSchemaError(f"Invalid schema: {exc.message}") from None
    except RecursionError:
        raise InvalidSchemaError("Invalid schema: nested too deeply") from None
    documents: dict[str, Any] = {}
    for item in references:
        if item.schema.schema_type != JSON:
            raise InvalidSchemaError(f"reference {item.reference.name} is a {item.schema.schema_type} schema")
        documents.update(item.schema.documents)
        documents[item.reference.name] = item.schema.parsed
    return ParsedSchema(JSON, json.dumps(document, separators=(",", ":"), sort_keys=True, ensure_ascii=False),
                        refs, document, {}, documents)


def _avro_ordered(node: Any, is_field: bool = False) -> Any:
    if isinstance(node, list):
        return [_avro_ordered(item) for item in node]
    if isinstance(node, dict):
        order = _AVRO_FIELD_KEY_ORDER if is_field else _AVRO_KEY_ORDER
        keys = sorted(node, key=lambda key: (order.get(key, len(order)), key))
        return {key: node[key] if key == "default" else
                [_avro_ordered(item, True) for item in node[key]] if key == "fields" and isinstance(node[key], list)
                else _avro_ordered(node[key]) for key in keys}
    return node


def _compact(document: Any) -> str:
    return json.dumps(document, separators=(",", ":"), ensure_ascii=False)


def json_validator(schema: ParsedSchema) -> Any:
    """A jsonschema validator for a JSON schema (references resolved by their names)."""
    import jsonschema
    from referencing import Registry, Resource
    from referencing.jsonschema import DRAFT7

    resources = [(name, Resource.from_contents(document, default_specification=DRAFT7))
                 for name, document in schema.documents.items()]
    registry: Registry[Any] = Registry().with_resources(resources)
    validator_class = jsonschema.validators.validator_for(schema.parsed, default=jsonschema.Draft7Validator)
    return validator_class(schema.parsed, registry=registry)
