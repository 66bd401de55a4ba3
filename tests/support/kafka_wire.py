"""Raw Kafka-protocol frames for tests: requests built with kio, responses read with kio."""

from __future__ import annotations

import io
import struct
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer

from kafkalite.broker.kafka import codec

API_VERSIONS_KEY = 18


def request(api_key: int, version: int, fields: dict[str, Any]) -> Any:
    """A kio request object of ``api_key`` v``version`` (missing fields get their defaults)."""
    return codec.build_entity(load_request_schema(api_key, version), fields)


def encode(entity: Any) -> bytes:
    buffer = io.BytesIO()
    entity_writer(type(entity))(buffer, entity)
    return buffer.getvalue()


def request_frame(api_key: int, version: int, correlation_id: int, body: Any, client_id: str | None = "test",
                  tagged_header: bytes = b"\0") -> bytes:
    """A request frame (size included) as a client writes it."""
    header = struct.pack(">hhi", api_key, version, correlation_id)
    if client_id is None:
        header += struct.pack(">h", -1)
    else:
        header += struct.pack(">h", len(client_id)) + client_id.encode()
    if load_request_schema(api_key, version).__flexible__:
        header += tagged_header
    payload = header + encode(body)
    return struct.pack(">i", len(payload)) + payload


def read_response(frame: bytes, api_key: int, version: int) -> tuple[int, Any]:
    """(correlation id, kio response) of a whole response frame."""
    (size,) = struct.unpack_from(">i", frame)
    assert size == len(frame) - 4, (size, len(frame))
    (correlation_id,) = struct.unpack_from(">i", frame, 4)
    cls = load_response_schema(api_key, version)
    offset = 8 + (1 if cls.__flexible__ and api_key != API_VERSIONS_KEY else 0)
    response, used = entity_reader(cls)(frame, offset)
    assert offset + used == len(frame)
    return correlation_id, response


def metadata_request(version: int, topics: list[str] | None) -> Any:
    return request(3, version, {"topics": None if topics is None else [{"name": name} for name in topics],
                                "allow_auto_topic_creation": False})
