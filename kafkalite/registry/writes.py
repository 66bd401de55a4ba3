"""What each write of the REST API appends to ``_schemas``, decided on an up-to-date view.

Every function takes the writer's :class:`~kafkalite.registry.view.RegistryView` (caught up by
:meth:`kafkalite.registry.store.SchemaStore.write`) and returns the records to append and the
answer for the client, or raises the Confluent error that refuses the request. Registering a
schema the subject already has appends nothing and answers its id; a schema another subject
already has gets that schema's id; a new one gets the highest id ever seen plus one.

Thread-safety: pure functions of the view.
"""

from __future__ import annotations

from typing import Any

from kafkalite.registry.compatibility import compatibility_problems, normalize_level
from kafkalite.registry.errors import (
    IdDoesNotMatchError,
    IncompatibleSchemaError,
    InvalidModeError,
    InvalidSubjectError,
    OperationNotPermittedError,
    ReferenceExistsError,
    SubjectCompatibilityNotConfiguredError,
    SubjectModeNotConfiguredError,
    SubjectNotFoundError,
    SubjectNotSoftDeletedError,
    SubjectSoftDeletedError,
    VersionNotFoundError,
    VersionNotSoftDeletedError,
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
    encode_json,
)
from kafkalite.registry.schemas import ParsedSchema, Reference, parse_schema
from kafkalite.registry.view import IMPORT, LATEST, MODES, READONLY, RegistryView

KeyedRecord = tuple[bytes, bytes | None]
MAX_SUBJECT_CHARS = 4096


def validate_subject(subject: str) -> None:
    """42208 for a subject name Confluent refuses (empty, control characters, too long)."""
    if not subject or len(subject) > MAX_SUBJECT_CHARS or any(ord(char) < 0x20 or ord(char) == 0x7F
                                                                  for char in subject):
        raise InvalidSubjectError(f"Invalid subject {subject[:60]!r}: a subject is 1 to {MAX_SUBJECT_CHARS} "
                                  f"characters without control characters")
    if subject in ("__GLOBAL", "__EMPTY"):
        raise InvalidSubjectError(f"Invalid subject {subject!r}: the name is reserved")


def _writable(view: RegistryView, subject: str | None) -> str:
    mode = view.mode(subject)
    if mode == READONLY:
        target = f"Subject {subject}" if subject else "The registry"
        raise OperationNotPermittedError(f"{target} is in read-only mode")
    return mode


def register(view: RegistryView, subject: str, schema_type: str, text: str, references: tuple[Reference, ...],
             schema_id: int | None = None, version: int | None = None) -> tuple[list[KeyedRecord], dict[str, Any]]:
    """Register a schema under ``subject`` (``schema_id``/``version`` only in IMPORT mode)."""
    validate_subject(subject)
    mode = _writable(view, subject)
    if (schema_id is not None or version is not None) and mode != IMPORT:
        raise OperationNotPermittedError("Overriding the schema id or version is only allowed in IMPORT mode")
    parsed = parse_schema(schema_type, text, view.resolve_references(references))
    existing = view.find_in_subject(subject, parsed)
    if existing is not None and schema_id in (None, existing.schema_id):
        return [], {"id": existing.schema_id}
    if mode != IMPORT:
        check_compatible(view, subject, parsed)
    known = view.find_id(parsed)
    if schema_id is not None:
        try:
            registered = view.parsed(schema_id)
        except Exception:  # no schema with that id yet: import it under the given id
            registered = None
        if registered is not None and registered.identity != parsed.identity:
            raise IdDoesNotMatchError(f"Schema {schema_id} is already registered with a different schema")
    else:
        schema_id = known if known is not None else view.max_id + 1
    number = version if version is not None else view.next_version(subject)
    value = SchemaValue(subject, number, schema_id, parsed.canonical, parsed.schema_type, parsed.references)
    return [(RecordKey(SCHEMA, subject, number).encode(), value.encode())], {"id": schema_id}


def check_compatible(view: RegistryView, subject: str, parsed: ParsedSchema) -> None:
    """409 unless ``parsed`` may follow the subject's live versions under its level."""
    subject_entry = view.subjects.get(subject)
    live = subject_entry.live() if subject_entry else []
    previous = [view.parsed(value.schema_id) for value in live]
    level = view.compatibility(subject)
    problems = compatibility_problems(level, parsed, previous)
    if problems:
        raise IncompatibleSchemaError(
            f"Schema being registered is incompatible with an earlier schema for subject \"{subject}\" "
            f"(compatibility {level}), details: {problems}")


def delete_version(view: RegistryView, subject: str, version: int,
                   permanent: bool) -> tuple[list[KeyedRecord], int]:
    """Soft-delete one version, or permanently delete a soft-deleted one."""
    _writable(view, subject)
    if not permanent:
        value = view.live_version(subject, version)
        _not_referenced(view, subject, value.version)
        deleted = SchemaValue(value.subject, value.version, value.schema_id, value.schema, value.schema_type,
                              value.references, True)
        return [(RecordKey(SCHEMA, subject, value.version).encode(), deleted.encode())], value.version
    value = view.version(subject, version, deleted=True)
    if not value.deleted:
        raise VersionNotSoftDeletedError(f"Subject '{subject}' Version {value.version} was not deleted first before "
                                         f"being permanently deleted")
    _not_referenced(view, subject, value.version)
    return [(RecordKey(SCHEMA, subject, value.version).encode(), None), _watermark(view)], value.version


def delete_subject(view: RegistryView, subject: str, permanent: bool) -> tuple[list[KeyedRecord], list[int]]:
    """Soft-delete every version of a subject, or permanently delete a soft-deleted subject."""
    _writable(view, subject)
    entry = view.subjects.get(subject)
    if entry is None:
        raise SubjectNotFoundError(f"Subject '{subject}' not found.")
    live = entry.live()
    if not permanent:
        if not live:
            raise SubjectSoftDeletedError(f"Subject '{subject}' was soft deleted. Set permanent=true to delete "
                                          f"permanently")
        for value in live:
            _not_referenced(view, subject, value.version)
        records: list[KeyedRecord] = [
            (RecordKey(SCHEMA, subject, value.version).encode(),
             SchemaValue(value.subject, value.version, value.schema_id, value.schema, value.schema_type,
                         value.references, True).encode()) for value in live]
        records.append((RecordKey(DELETE_SUBJECT, subject).encode(),
                        encode_json({"subject": subject, "version": live[-1].version})))
        return records, [value.version for value in live]
    if live:
        raise SubjectNotSoftDeletedError(f"Subject '{subject}' was not deleted first before being permanently "
                                         f"deleted")
    numbers = sorted(entry.versions)
    records = [(RecordKey(SCHEMA, subject, number).encode(), None) for number in numbers]
    if subject in view.configs:
        records.append((RecordKey(CONFIG, subject).encode(), None))
    if subject in view.modes:
        records.append((RecordKey(MODE, subject).encode(), None))
    records.append(_watermark(view))
    return records, numbers


def _not_referenced(view: RegistryView, subject: str, version: int) -> None:
    users = view.referenced_by(subject, version)
    if users:
        raise ReferenceExistsError(f"One or more references exist to the schema {{subject={subject}, "
                                   f"version={version}}}: schema ids {users}")


def _watermark(view: RegistryView) -> KeyedRecord:
    return RecordKey(NOOP, WATERMARK_SUBJECT).encode(), encode_json({"maxId": view.max_id})


def set_compatibility(view: RegistryView, subject: str | None, level: Any) -> tuple[list[KeyedRecord], dict[str, Any]]:
    if subject is not None:
        validate_subject(subject)
    normalized = normalize_level(level)
    return ([(RecordKey(CONFIG, subject).encode(), encode_json({"compatibilityLevel": normalized}))],
            {"compatibility": normalized})


def delete_compatibility(view: RegistryView, subject: str | None) -> tuple[list[KeyedRecord], dict[str, Any]]:
    """Remove a subject's level (40408 when it has none), or reset the global one."""
    if subject is not None and subject not in view.configs:
        if subject not in view.subjects:
            raise SubjectNotFoundError(f"Subject '{subject}' not found.")
        raise SubjectCompatibilityNotConfiguredError(
            f"Subject '{subject}' does not have subject-level compatibility configured")
    previous = view.compatibility(subject)
    return [(RecordKey(CONFIG, subject).encode(), None)], {"compatibilityLevel": previous}


def set_mode(view: RegistryView, subject: str | None, mode: Any) -> tuple[list[KeyedRecord], dict[str, Any]]:
    if subject is not None:
        validate_subject(subject)
    if not isinstance(mode, str) or mode.upper() not in MODES:
        raise InvalidModeError(f"Invalid mode. Valid values are READWRITE, READONLY and IMPORT; got "
                               f"{str(mode)[:40]!r}")
    normalized = mode.upper()
    if normalized == IMPORT and subject is None and view.subject_names(deleted=True):
        raise OperationNotPermittedError("Cannot import since found existing subjects")
    return [(RecordKey(MODE, subject).encode(), encode_json({"mode": normalized}))], {"mode": normalized}


def delete_mode(view: RegistryView, subject: str) -> tuple[list[KeyedRecord], dict[str, Any]]:
    if subject not in view.modes:
        raise SubjectModeNotConfiguredError(f"Subject '{subject}' does not have subject-level mode configured")
    return [(RecordKey(MODE, subject).encode(), None)], {"mode": view.modes[subject]}


__all__ = ["LATEST", "VersionNotFoundError", "check_compatible", "delete_compatibility", "delete_mode",
           "delete_subject", "delete_version", "register", "set_compatibility", "set_mode", "validate_subject"]
