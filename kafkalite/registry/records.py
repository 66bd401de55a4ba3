"""The ``_schemas`` topic's records in Confluent Schema Registry's format (its ``KafkaStore``).

Keys and values are JSON. Keys (field order as Confluent writes them):

- ``{"keytype":"SCHEMA","subject":"orders-value","version":1,"magic":1}`` — one version of a
  subject; value ``{"subject","version","id","schemaType"?,"references"?,"schema","deleted"}``
  (``schemaType`` absent for Avro); a null value (tombstone) is a permanent delete;
- ``{"keytype":"CONFIG","subject":null|"s","magic":0}`` — value ``{"compatibilityLevel":"FULL"}``;
  null removes the setting;
- ``{"keytype":"MODE","subject":null|"s","magic":0}`` — value ``{"mode":"READONLY"}``;
- ``{"keytype":"DELETE_SUBJECT","subject":"s","magic":0}`` — value ``{"subject":"s","version":N}``:
  every version up to N is soft-deleted;
- ``{"keytype":"NOOP","magic":0}`` — the writer's barrier (value null; see
  :mod:`kafkalite.registry.store`).

One kafkalite addition: ``{"keytype":"NOOP","subject":"__schema_id_watermark","magic":0}`` with
``{"maxId": N}``, written with permanent deletes so that ids stay unique after compaction
removed the deleted versions' records.

Thread-safety: pure functions over immutable values.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from kafkalite.registry.schemas import AVRO, Reference

SCHEMA = "SCHEMA"
CONFIG = "CONFIG"
MODE = "MODE"
DELETE_SUBJECT = "DELETE_SUBJECT"
NOOP = "NOOP"
WATERMARK_SUBJECT = "__schema_id_watermark"


@dataclass(frozen=True)
class RecordKey:
    """A ``_schemas`` key: ``subject`` is None for the global config and mode and for a NOOP."""

    keytype: str
    subject: str | None = None
    version: int | None = None

    def encode(self) -> bytes:
        body: dict[str, Any] = {"keytype": self.keytype}
        if self.keytype != NOOP or self.subject is not None:
            body["subject"] = self.subject
        if self.keytype == SCHEMA:
            body["version"] = self.version
        body["magic"] = 1 if self.keytype == SCHEMA else 0
        return json.dumps(body, separators=(",", ":")).encode("utf-8")

    @classmethod
    def decode(cls, data: bytes) -> RecordKey:
        body = json.loads(data)
        if not isinstance(body, dict) or not isinstance(body.get("keytype"), str):
            raise ValueError("a _schemas key is an object with a keytype")
        subject = body.get("subject")
        version = body.get("version")
        return cls(body["keytype"], subject if isinstance(subject, str) else None,
                   version if isinstance(version, int) else None)


@dataclass(frozen=True)
class SchemaValue:
    """One version of a subject as the ``_schemas`` topic stores it."""

    subject: str
    version: int
    schema_id: int
    schema: str
    schema_type: str = AVRO
    references: tuple[Reference, ...] = ()
    deleted: bool = False

    def encode(self) -> bytes:
        body: dict[str, Any] = {"subject": self.subject, "version": self.version, "id": self.schema_id}
        if self.schema_type != AVRO:
            body["schemaType"] = self.schema_type
        if self.references:
            body["references"] = [reference.to_json() for reference in self.references]
        body["schema"] = self.schema
        body["deleted"] = self.deleted
        return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode("utf-8")

    @classmethod
    def decode(cls, data: bytes) -> SchemaValue:
        body = json.loads(data)
        references = tuple(Reference(str(item["name"]), str(item["subject"]), int(item["version"]))
                           for item in body.get("references") or [])
        return cls(str(body["subject"]), int(body["version"]), int(body["id"]), str(body["schema"]),
                   str(body.get("schemaType") or AVRO), references, bool(body.get("deleted", False)))


def encode_json(body: dict[str, Any]) -> bytes:
    return json.dumps(body, separators=(",", ":")).encode("utf-8")
