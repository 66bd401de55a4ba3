"""Kafka's framing, request and response headers, and the response builder, over kio.

A frame is an int32 big-endian size and that many bytes. A request frame starts with the request
header: ``api_key int16, api_version int16, correlation_id int32`` (v0), ``client_id`` as a
nullable int16-length string (v1), then a tagged-field section when the API version is flexible
(v2). The body is parsed by kio's reader of the request class of that API version (generated from
Kafka's own message schemas). A response frame starts with the correlation id (header v0), plus
an empty tagged-field section when the API version is flexible (v1), except ApiVersions, which
always answers with header v0 so that a client of any version can read the versions it may use.

:func:`build_response` turns a handler's answer (a mapping of kio field names, see
:mod:`kafkalite.broker.kafka.context`) into the kio response dataclass of the negotiated version:
nested entities recursively, fields the version lacks dropped, missing fields filled with the
schema's default (or the zero of their type), and plain Python values converted to kio's types
(an int error code to ``ErrorCode``, milliseconds to ``timedelta``, a hex topic id to ``UUID``).

Concurrency: pure functions and caches filled on first use; event-loop only.
"""

from __future__ import annotations

import dataclasses
import datetime
import io
import logging
import struct
import types
import typing
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

from kio.index import UnknownAPIKey, UnknownEntity, load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer
from kio.serial.writers import write_compact_array_length, write_legacy_array_length
from kio.static.primitive import i32

from kafkalite.errors import InvalidRequestError

log = logging.getLogger(__name__)

_HEADER = struct.Struct(">hhi")
_INT32 = struct.Struct(">i")
_INT16 = struct.Struct(">h")

#: ApiVersions: answered with response header v0 whatever its version (KIP-511).
API_VERSIONS_KEY = 18


@dataclass(frozen=True, slots=True)
class RequestHeader:
    """A request's header; ``body_offset`` is where the body starts in the frame."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body_offset: int


def read_header_prefix(frame: bytes | memoryview) -> tuple[int, int, int]:
    """``(api_key, api_version, correlation_id)``: the part every header version shares."""
    if len(frame) < _HEADER.size:
        raise InvalidRequestError(f"a request of {len(frame)} bytes is shorter than a request header")
    api_key, api_version, correlation_id = _HEADER.unpack_from(frame)
    return api_key, api_version, correlation_id


def _read_unsigned_varint(frame: bytes | memoryview, offset: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if offset >= len(frame):
            raise InvalidRequestError("a varint runs past the end of the request")
        byte = frame[offset]
        offset += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, offset
        shift += 7
        if shift > 28:
            raise InvalidRequestError("a varint is longer than five bytes")


def read_request_header(frame: bytes | memoryview, flexible: bool) -> RequestHeader:
    """The header of a request frame: v1 for a non-flexible API version, v2 for a flexible one
    (whose tagged fields are skipped: Kafka defines none a broker must read)."""
    api_key, api_version, correlation_id = read_header_prefix(frame)
    offset = _HEADER.size
    if offset + 2 > len(frame):
        raise InvalidRequestError("the request header ends before its client id")
    (length,) = _INT16.unpack_from(frame, offset)
    offset += 2
    client_id: str | None = None
    if length >= 0:
        if offset + length > len(frame):
            raise InvalidRequestError("the client id runs past the end of the request")
        try:
            client_id = bytes(frame[offset:offset + length]).decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidRequestError("the client id is not UTF-8") from None
        offset += length
    if flexible:
        count, offset = _read_unsigned_varint(frame, offset)
        for _ in range(count):
            _tag, offset = _read_unsigned_varint(frame, offset)
            size, offset = _read_unsigned_varint(frame, offset)
            offset += size
            if offset > len(frame):
                raise InvalidRequestError("a tagged field of the request header runs past its end")
    return RequestHeader(api_key, api_version, correlation_id, client_id, offset)


@cache
def request_class(api_key: int, api_version: int) -> type[Any] | None:
    """kio's request class of an API version, None when kio has none."""
    try:
        return load_request_schema(api_key, api_version)
    except (UnknownAPIKey, UnknownEntity):
        return None


@cache
def response_class(api_key: int, api_version: int) -> type[Any]:
    return load_response_schema(api_key, api_version)


def is_flexible(api_key: int, api_version: int) -> bool:
    cls = request_class(api_key, api_version)
    return bool(cls is not None and cls.__flexible__)


def parse_request(frame: bytes | memoryview, header: RequestHeader, cls: type[Any]) -> Any:
    """The request body as an instance of ``cls``; a malformed or truncated body is INVALID_REQUEST.

    Bytes after the body are ignored, as Kafka's brokers ignore them: librdkafka's all-topics
    Metadata request (v9 and later) writes the null topic array as four bytes where one belongs,
    and clients built on it must work here as they do against Kafka.
    """
    try:
        request, size = entity_reader(cls)(frame, header.body_offset)
    except Exception as exc:  # kio raises a variety of errors for bytes that do not parse
        raise InvalidRequestError(f"malformed {cls.__name__} v{header.api_version}: {exc}") from None
    extra = len(frame) - header.body_offset - size
    if extra:
        log.debug("ignored %d bytes after the %s v%d body", extra, cls.__name__, header.api_version)
    return request


def encode_response(api_key: int, api_version: int, correlation_id: int, response: Any) -> bytes:
    """The whole response frame (size included) of a kio response object."""
    buffer = io.BytesIO()
    buffer.write(b"\0\0\0\0")
    buffer.write(_INT32.pack(correlation_id))
    if response.__flexible__ and api_key != API_VERSIONS_KEY:
        buffer.write(b"\0")  # response header v1: no tagged fields
    entity_writer(type(response))(buffer, response)
    frame = buffer.getbuffer()
    _INT32.pack_into(frame, 0, len(frame) - 4)
    del frame
    return buffer.getvalue()


def encode_response_body(api_key: int, api_version: int, answer: Mapping[str, Any]) -> bytes:
    """The body of a response (no size, no header) for a handler's answer."""
    response: Any = build_response(api_key, api_version, answer)
    buffer = io.BytesIO()
    entity_writer(type(response))(buffer, response)
    return buffer.getvalue()


def item_class(api_key: int, api_version: int, field_name: str) -> type[Any]:
    """The kio class of the items of the response's top-level array ``field_name``."""
    for spec in _fields(response_class(api_key, api_version)):
        if spec.name == field_name and spec.kind == _ENTITIES and spec.nested is not None:
            return spec.nested
    raise KeyError(f"{field_name} is not an array of entities in response {api_key} v{api_version}")


def nested_item_class(cls: type[Any], field_name: str) -> type[Any]:
    """The kio class of the items of the array ``field_name`` of the entity class ``cls``."""
    for spec in _fields(cls):
        if spec.name == field_name and spec.kind == _ENTITIES and spec.nested is not None:
            return spec.nested
    raise KeyError(f"{field_name} is not an array of entities in {cls.__name__}")


def encode_item(cls: type[Any], item: Mapping[str, Any]) -> bytes:
    """One array item (a kio entity of ``cls``, built from ``item``) encoded as it appears
    inside its response; items joined after :func:`encode_array_length` make the array."""
    buffer = io.BytesIO()
    entity_writer(cls)(buffer, build_entity(cls, item))
    return buffer.getvalue()


def encode_array_length(count: int, flexible: bool) -> bytes:
    """The length prefix of a non-null array as kio writes it: compact (an unsigned varint of
    count + 1) in flexible versions, an int32 otherwise."""
    buffer = io.BytesIO()
    if flexible:
        write_compact_array_length(buffer, count)
    else:
        write_legacy_array_length(buffer, i32(count))
    return buffer.getvalue()


def frame_response_body(api_key: int, api_version: int, correlation_id: int, body: bytes) -> bytes:
    """The whole response frame around a body of :func:`encode_response_body`."""
    flexible = response_class(api_key, api_version).__flexible__ and api_key != API_VERSIONS_KEY
    header = _INT32.pack(correlation_id) + (b"\0" if flexible else b"")
    return _INT32.pack(len(header) + len(body)) + header + body


def frame_response(correlation_id: int, body: bytes) -> bytes:
    """A response frame with header v0 around an already encoded body."""
    return _INT32.pack(len(body) + 4) + _INT32.pack(correlation_id) + body


# -- the response builder --------------------------------------------------------------------------
_ENTITY, _ENTITIES, _VALUE = 0, 1, 2


@dataclass(frozen=True, slots=True)
class _Field:
    name: str
    kind: int
    kafka_type: str
    nested: type[Any] | None
    default: Any
    optional: bool
    is_array: bool


def _strip_optional(hint: Any) -> tuple[Any, bool]:
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = [arg for arg in typing.get_args(hint) if arg is not type(None)]
        return args[0], len(args) != len(typing.get_args(hint))
    return hint, False


_FIELDS: dict[type[Any], tuple[_Field, ...]] = {}


def _fields(cls: type[Any]) -> tuple[_Field, ...]:
    known = _FIELDS.get(cls)
    if known is None:
        known = _FIELDS[cls] = _inspect_fields(cls)
    return known


def _inspect_fields(cls: type[Any]) -> tuple[_Field, ...]:
    hints = typing.get_type_hints(cls)
    result = []
    for item in dataclasses.fields(cls):
        hint, optional = _strip_optional(hints[item.name])
        kafka_type = item.metadata.get("kafka_type", "")
        nested: type[Any] | None = None
        kind = _VALUE
        is_array = typing.get_origin(hint) is tuple
        if not kafka_type:
            if is_array:
                element = typing.get_args(hint)[0]
                if dataclasses.is_dataclass(element):
                    kind, nested = _ENTITIES, typing.cast(type[Any], element)
            elif dataclasses.is_dataclass(hint):
                kind, nested = _ENTITY, typing.cast(type[Any], hint)
        if item.default is not dataclasses.MISSING:
            default = item.default
        elif item.default_factory is not dataclasses.MISSING:
            default = item.default_factory()
        else:
            default = dataclasses.MISSING
        result.append(_Field(item.name, kind, kafka_type, nested, default, optional, is_array))
    return tuple(result)


_ZEROS: dict[str, Any] = {
    "string": "", "bytes": b"", "records": None, "bool": False, "float64": 0.0,
    "uuid": None, "error_code": ErrorCode.none, "timedelta_i32": datetime.timedelta(0),
    "timedelta_i64": datetime.timedelta(0),
}


def _convert(kafka_type: str, value: Any) -> Any:
    if value is None:
        return None
    if kafka_type == "error_code":
        return value if isinstance(value, ErrorCode) else ErrorCode(int(value))
    if kafka_type.startswith("timedelta"):
        return value if isinstance(value, datetime.timedelta) else datetime.timedelta(milliseconds=int(value))
    if kafka_type == "uuid":
        if isinstance(value, uuid.UUID):
            return value
        return uuid.UUID(hex=value) if value else None
    if kafka_type.startswith("datetime"):
        if isinstance(value, datetime.datetime):
            return value
        return datetime.datetime.fromtimestamp(int(value) / 1000, tz=datetime.UTC)
    if kafka_type in ("bytes", "records") and not isinstance(value, bytes):
        return bytes(value)
    if isinstance(value, list):
        return tuple(value)
    return value


def _missing(spec: _Field) -> Any:
    if spec.default is not dataclasses.MISSING:
        return spec.default
    if spec.optional:
        return None
    if spec.is_array:
        return ()
    if spec.kind == _ENTITY:
        assert spec.nested is not None
        return build_entity(spec.nested, {})
    if spec.kafka_type in _ZEROS:
        return _ZEROS[spec.kafka_type]
    return 0  # the integer types


def build_entity(cls: type[Any], answer: Mapping[str, Any]) -> Any:
    """An instance of the kio class ``cls`` from ``answer`` (see the module docstring)."""
    values: dict[str, Any] = {}
    for spec in _fields(cls):
        if spec.name not in answer:
            if spec.name == "throttle_time" and "throttle_time_ms" in answer:
                values[spec.name] = _convert(spec.kafka_type, answer["throttle_time_ms"])
                continue
            values[spec.name] = _missing(spec)
            continue
        value = answer[spec.name]
        if spec.kind == _ENTITY and value is not None:
            values[spec.name] = value if isinstance(value, spec.nested or ()) else build_entity(
                typing.cast(type[Any], spec.nested), value)
        elif spec.kind == _ENTITIES and value is not None:
            nested = typing.cast(type[Any], spec.nested)
            values[spec.name] = tuple(item if isinstance(item, nested) else build_entity(nested, item)
                                      for item in typing.cast(Sequence[Any], value))
        else:
            values[spec.name] = _convert(spec.kafka_type, value)
    return cls(**values)


def build_response(api_key: int, api_version: int, answer: Mapping[str, Any]) -> Any:
    """The kio response object of ``api_key`` at ``api_version`` for a handler's answer."""
    return build_entity(response_class(api_key, api_version), answer)


# -- error answers --------------------------------------------------------------------------------
#: A response item's field, and the request item's fields it is copied from in an error answer.
_MIRRORED = {"name": ("name", "topic"), "topic": ("topic", "name"), "topic_id": ("topic_id",),
             "partition_index": ("partition_index", "partition", "index"),
             "partition": ("partition", "partition_index", "index"),
             "index": ("index", "partition_index", "partition"),
             "resource_type": ("resource_type",), "resource_name": ("resource_name",)}


def _carries_error_code(cls: type[Any]) -> bool:
    return any(spec.name == "error_code" or (spec.nested is not None and _carries_error_code(spec.nested))
               for spec in _fields(cls))


def _mirror(request_item: Any, cls: type[Any], code: int, message: str | None) -> dict[str, Any]:
    """An answer of ``cls`` carrying ``code`` on every item the request named."""
    answer: dict[str, Any] = {}
    arrays = [getattr(request_item, item.name) for item in dataclasses.fields(request_item)
              if isinstance(getattr(request_item, item.name), tuple)
              and any(dataclasses.is_dataclass(element) for element in getattr(request_item, item.name))]
    for spec in _fields(cls):
        if spec.name == "error_code":
            answer[spec.name] = code
        elif spec.name == "error_message":
            answer[spec.name] = message
        elif spec.kind == _VALUE and spec.name in _MIRRORED:
            for source in _MIRRORED[spec.name]:
                if hasattr(request_item, source):
                    answer[spec.name] = getattr(request_item, source)
                    break
        elif spec.kind == _ENTITIES and spec.nested is not None and arrays and _carries_error_code(spec.nested):
            same = getattr(request_item, spec.name, None)
            source_items = same if isinstance(same, tuple) and same in arrays else arrays[0]
            answer[spec.name] = [_mirror(item, spec.nested, code, message) for item in source_items]
    return answer


def error_answer(api_key: int, api_version: int, request: Any, code: int, message: str | None) -> dict[str, Any]:
    """Kafka's error response to ``request``: ``code`` at the top level when the response has an
    error code there, and on every topic, partition or other item the request named."""
    return _mirror(request, response_class(api_key, api_version), code, message)
