"""The registry's in-memory view of the ``_schemas`` topic, and every read the REST API serves.

:class:`RegistryView` applies the topic's records in offset order (latest value per key wins,
tombstones remove) and answers the lookups: subjects, their versions, schemas by id, the
configured compatibility levels and modes. Parsed schemas are cached by id. The view decides
nothing about writes except what the next id and version would be.

Concurrency: owned by one :class:`~kafkalite.registry.store.SchemaStore` on the event loop; its
methods never block or await.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field

from kafkalite.registry import compatibility
from kafkalite.registry.errors import (
    InvalidSchemaError,
    InvalidVersionError,
    SchemaNotFoundError,
    SubjectCompatibilityNotConfiguredError,
    SubjectModeNotConfiguredError,
    SubjectNotFoundError,
    VersionNotFoundError,
    VersionSoftDeletedError,
)
from kafkalite.registry.records import (
    CONFIG,
    DELETE_SUBJECT,
    MODE,
    NOOP,
    SCHEMA,
    WATERMARK_SUBJECT,
    RecordKey,
    SchemaValue,
)
from kafkalite.registry.schemas import ParsedSchema, Reference, ResolvedReference, parse_schema

log = logging.getLogger(__name__)

READWRITE = "READWRITE"
READONLY = "READONLY"
IMPORT = "IMPORT"
MODES = (READWRITE, READONLY, IMPORT)
LATEST = -1
_INT32_MAX = (1 << 31) - 1


@dataclass
class Subject:
    """A subject's versions (soft-deleted ones included) by number."""

    name: str
    versions: dict[int, SchemaValue] = field(default_factory=dict)

    def live(self) -> list[SchemaValue]:
        return [value for _, value in sorted(self.versions.items()) if not value.deleted]


def parse_version(text: str) -> int:
    """A version path segment: ``latest``, ``-1`` (latest) or 1..2^31-1; 42202 otherwise."""
    if text == "latest":
        return LATEST
    if text.lstrip("-").isdigit() and len(text) <= 11:
        value = int(text)
        if value == LATEST or 1 <= value <= _INT32_MAX:
            return value
    raise InvalidVersionError(f"The specified version '{text[:40]}' is not a valid version id. Allowed values are "
                              f"between [1, 2^31-1] and the string \"latest\"")


class RegistryView:
    """Subjects, schemas, configs and modes as the ``_schemas`` records up to :attr:`next_offset` leave them."""

    def __init__(self) -> None:
        self.next_offset = 0
        self.subjects: dict[str, Subject] = {}
        self.configs: dict[str | None, str] = {}
        self.modes: dict[str | None, str] = {}
        self.max_id = 0
        self._by_id: dict[int, SchemaValue] = {}
        self._parsed: dict[int, ParsedSchema] = {}

    # -- applying records ---------------------------------------------------------------------
    def apply(self, offset: int, key_bytes: bytes | None, value_bytes: bytes | None) -> None:
        """Apply the record at ``offset`` (an unreadable record is skipped with a warning)."""
        self.next_offset = max(self.next_offset, offset + 1)
        if key_bytes is None:
            return
        try:
            key = RecordKey.decode(key_bytes)
            value = json.loads(value_bytes) if value_bytes is not None else None
            if key.keytype == SCHEMA and key.subject is not None and key.version is not None:
                self._apply_schema(key.subject, key.version, value_bytes)
            elif key.keytype == CONFIG:
                self._apply_setting(self.configs, key.subject, value, "compatibilityLevel")
            elif key.keytype == MODE:
                self._apply_setting(self.modes, key.subject, value, "mode")
            elif key.keytype == DELETE_SUBJECT and key.subject is not None and isinstance(value, dict):
                subject = self.subjects.get(key.subject)
                for number, entry in list(subject.versions.items()) if subject else []:
                    if number <= int(value.get("version", 0)) and not entry.deleted:
                        subject.versions[number] = _deleted(entry)  # type: ignore[union-attr]
            elif key.keytype == NOOP and key.subject == WATERMARK_SUBJECT and isinstance(value, dict):
                self.max_id = max(self.max_id, int(value.get("maxId", 0)))
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            log.warning("_schemas offset %d: skipping an unreadable record: %s", offset, exc)

    def _apply_schema(self, name: str, version: int, value_bytes: bytes | None) -> None:
        subject = self.subjects.setdefault(name, Subject(name))
        if value_bytes is None:
            removed = subject.versions.pop(version, None)
            if not subject.versions:
                del self.subjects[name]
            if removed is not None and not self._used(removed.schema_id):
                self._by_id.pop(removed.schema_id, None)
                self._parsed.pop(removed.schema_id, None)
            return
        value = SchemaValue.decode(value_bytes)
        subject.versions[version] = value
        self.max_id = max(self.max_id, value.schema_id)
        known = self._by_id.get(value.schema_id)
        if known is None or known.schema != value.schema:
            self._by_id[value.schema_id] = value
            self._parsed.pop(value.schema_id, None)

    @staticmethod
    def _apply_setting(settings: dict[str | None, str], subject: str | None, value: object, name: str) -> None:
        if isinstance(value, dict) and isinstance(value.get(name), str):
            settings[subject] = value[name]
        else:
            settings.pop(subject, None)

    # -- subjects and versions ----------------------------------------------------------------
    def subject_names(self, deleted: bool = False, prefix: str = "") -> list[str]:
        return sorted(name for name, subject in self.subjects.items()
                      if name.startswith(prefix) and (deleted or subject.live()))

    def subject(self, name: str, deleted: bool = False) -> Subject:
        """The subject (40401 when it has no version, or only soft-deleted ones unless ``deleted``)."""
        subject = self.subjects.get(name)
        if subject is None or not (deleted or subject.live()):
            raise SubjectNotFoundError(f"Subject '{name}' not found.")
        return subject

    def versions(self, name: str, deleted: bool = False) -> list[int]:
        subject = self.subject(name, deleted)
        return sorted(number for number, value in subject.versions.items() if deleted or not value.deleted)

    def version(self, name: str, version: int, deleted: bool = False) -> SchemaValue:
        """One version (``LATEST``: the newest live one); 40401 / 40402 when missing."""
        subject = self.subject(name, deleted)
        if version == LATEST:
            candidates = [value for value in subject.versions.values() if deleted or not value.deleted]
            if not candidates:
                raise VersionNotFoundError(f"Version latest not found for subject '{name}'.")
            return max(candidates, key=lambda value: value.version)
        value = subject.versions.get(version)
        if value is None:
            raise VersionNotFoundError(f"Version {version} not found.")
        if value.deleted and not deleted:
            raise VersionNotFoundError(f"Version {version} not found.")
        return value

    def live_version(self, name: str, version: int) -> SchemaValue:
        """A version for a soft delete: 40406 when it is already soft-deleted."""
        subject = self.subject(name)
        if version != LATEST and version in subject.versions and subject.versions[version].deleted:
            raise VersionSoftDeletedError(f"Subject '{name}' Version {version} was soft deleted. Set "
                                          f"permanent=true to delete permanently")
        return self.version(name, version)

    def next_version(self, name: str) -> int:
        subject = self.subjects.get(name)
        return max(subject.versions, default=0) + 1 if subject else 1

    # -- schemas by id ------------------------------------------------------------------------
    def _used(self, schema_id: int) -> bool:
        return any(entry.schema_id == schema_id for subject in self.subjects.values()
                   for entry in subject.versions.values())

    def by_id(self, schema_id: int) -> SchemaValue:
        value = self._by_id.get(schema_id)
        if value is None:
            raise SchemaNotFoundError(f"Schema {schema_id} not found")
        return value

    def parsed(self, schema_id: int) -> ParsedSchema:
        """The schema with this id, parsed (cached)."""
        cached = self._parsed.get(schema_id)
        if cached is None:
            value = self.by_id(schema_id)
            cached = parse_schema(value.schema_type, value.schema, self.resolve_references(value.references))
            self._parsed[schema_id] = cached
        return cached

    def resolve_references(self, references: tuple[Reference, ...], depth: int = 0) -> list[ResolvedReference]:
        """Each reference with its schema (42201 when one names no registered version)."""
        if depth > 32:
            raise InvalidSchemaError("Invalid schema: references nest deeper than 32")
        resolved = []
        for reference in references:
            try:
                value = self.version(reference.subject, reference.version, deleted=True)
            except (SubjectNotFoundError, VersionNotFoundError):
                raise InvalidSchemaError(f"Invalid schema: reference {reference.name} names subject "
                                         f"{reference.subject} version {reference.version}, which does not exist")\
                    from None
            resolved.append(ResolvedReference(reference, self.parsed(value.schema_id)))
        return resolved

    def find_id(self, schema: ParsedSchema) -> int | None:
        """The id the same schema already has (under any subject), if any. Stored schemas are
        in canonical form (the writer stores that), so the text is compared: no parsing."""
        for schema_id, value in sorted(self._by_id.items()):
            if (value.schema_type, value.schema, value.references) == schema.identity:
                return schema_id
        return None

    def find_in_subject(self, name: str, schema: ParsedSchema, deleted: bool = False) -> SchemaValue | None:
        subject = self.subjects.get(name)
        for value in sorted(subject.versions.values(), key=lambda v: v.version) if subject else []:
            if (deleted or not value.deleted) and \
                    (value.schema_type, value.schema, value.references) == schema.identity:
                return value
        return None

    def uses_of(self, schema_id: int, deleted: bool = False) -> list[SchemaValue]:
        """Every (subject, version) registered with this id."""
        self.by_id(schema_id)
        return sorted((value for subject in self.subjects.values() for value in subject.versions.values()
                       if value.schema_id == schema_id and (deleted or not value.deleted)),
                      key=lambda value: (value.subject, value.version))

    def referenced_by(self, name: str, version: int) -> list[int]:
        """Ids of live schemas that reference this version."""
        return sorted({value.schema_id for subject in self.subjects.values() for value in subject.versions.values()
                       if not value.deleted and any(reference.subject == name and reference.version == version
                                                    for reference in value.references)})

    # -- settings -----------------------------------------------------------------------------
    def compatibility(self, subject: str | None, default_to_global: bool = True) -> str:
        if subject is not None and subject in self.configs:
            return self.configs[subject]
        if subject is not None and not default_to_global:
            raise SubjectCompatibilityNotConfiguredError(
                f"Subject '{subject}' does not have subject-level compatibility configured")
        return self.configs.get(None, compatibility.DEFAULT_LEVEL)

    def mode(self, subject: str | None, default_to_global: bool = True) -> str:
        if subject is not None and subject in self.modes:
            return self.modes[subject]
        if subject is not None and not default_to_global:
            raise SubjectModeNotConfiguredError(f"Subject '{subject}' does not have subject-level mode configured")
        return self.modes.get(None, READWRITE)


def _deleted(value: SchemaValue) -> SchemaValue:
    return SchemaValue(value.subject, value.version, value.schema_id, value.schema, value.schema_type,
                       value.references, True)
