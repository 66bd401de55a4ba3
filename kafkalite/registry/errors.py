"""The schema registry's errors: Confluent Schema Registry's error codes and HTTP statuses.

A :class:`SchemaRegistryError` is a :class:`~kafkalite.errors.KafkaliteError` carrying
Confluent's ``error_code`` (e.g. 40401) and the HTTP status it is answered with (the code's
first three digits; 409 is its own code). The REST API answers every one of them as
``{"error_code": ..., "message": ...}``; the registry client raises them again from such a body.

Thread-safety: immutable after import.
"""

from __future__ import annotations

from typing import Any, ClassVar

from kafkalite.errors import KafkaliteError


class SchemaRegistryError(KafkaliteError):
    """An error answered with Confluent's ``error_code`` and ``message``."""

    error_code: ClassVar[int] = 50001
    retriable: ClassVar[bool] = False

    def __init__(self, message: str, *args: Any) -> None:
        super().__init__(message, *args)
        self.detail = message

    @property
    def http_status(self) -> int:
        code = self.error_code
        return code if code < 1000 else code // 100

    def body(self) -> dict[str, Any]:
        return {"error_code": self.error_code, "message": self.detail}

    def __str__(self) -> str:
        return f"[{self.error_code}] {self.detail}"


class BadRequestError(SchemaRegistryError):
    """A request the server cannot read (malformed JSON, a body of the wrong shape)."""

    error_code = 400


class UnknownPathError(SchemaRegistryError):
    error_code = 404


class MethodNotAllowedError(SchemaRegistryError):
    error_code = 405


class UnsupportedMediaTypeError(SchemaRegistryError):
    error_code = 415


class UnprocessableEntityError(SchemaRegistryError):
    """A body field of the wrong type or an unknown field (Jersey's 422)."""

    error_code = 422


class SubjectNotFoundError(SchemaRegistryError):
    error_code = 40401


class VersionNotFoundError(SchemaRegistryError):
    error_code = 40402


class SchemaNotFoundError(SchemaRegistryError):
    error_code = 40403


class SubjectSoftDeletedError(SchemaRegistryError):
    error_code = 40404


class SubjectNotSoftDeletedError(SchemaRegistryError):
    error_code = 40405


class VersionSoftDeletedError(SchemaRegistryError):
    error_code = 40406


class VersionNotSoftDeletedError(SchemaRegistryError):
    error_code = 40407


class SubjectCompatibilityNotConfiguredError(SchemaRegistryError):
    error_code = 40408


class SubjectModeNotConfiguredError(SchemaRegistryError):
    error_code = 40409


class IncompatibleSchemaError(SchemaRegistryError):
    error_code = 409


class InvalidSchemaError(SchemaRegistryError):
    error_code = 42201


class InvalidVersionError(SchemaRegistryError):
    error_code = 42202


class InvalidCompatibilityLevelError(SchemaRegistryError):
    error_code = 42203


class InvalidModeError(SchemaRegistryError):
    error_code = 42204


class OperationNotPermittedError(SchemaRegistryError):
    error_code = 42205


class ReferenceExistsError(SchemaRegistryError):
    error_code = 42206


class IdDoesNotMatchError(SchemaRegistryError):
    error_code = 42207


class InvalidSubjectError(SchemaRegistryError):
    error_code = 42208


class StoreError(SchemaRegistryError):
    retriable = True
    error_code = 50001


class OperationTimeoutError(SchemaRegistryError):
    retriable = True
    error_code = 50002


class ForwardingError(SchemaRegistryError):
    retriable = True
    error_code = 50003


class UnknownLeaderError(SchemaRegistryError):
    retriable = True
    error_code = 50004


_BY_CODE: dict[int, type[SchemaRegistryError]] = {
    cls.error_code: cls for cls in (
        BadRequestError, UnknownPathError, MethodNotAllowedError, UnsupportedMediaTypeError,
        UnprocessableEntityError, SubjectNotFoundError, VersionNotFoundError, SchemaNotFoundError,
        SubjectSoftDeletedError, SubjectNotSoftDeletedError, VersionSoftDeletedError, VersionNotSoftDeletedError,
        SubjectCompatibilityNotConfiguredError, SubjectModeNotConfiguredError, IncompatibleSchemaError,
        InvalidSchemaError, InvalidVersionError, InvalidCompatibilityLevelError, InvalidModeError,
        OperationNotPermittedError, ReferenceExistsError, IdDoesNotMatchError, InvalidSubjectError, StoreError,
        OperationTimeoutError, ForwardingError, UnknownLeaderError)}


def error_from_body(status: int, body: Any) -> SchemaRegistryError:
    """The error an error body (``{"error_code", "message"}``) of an answer with ``status`` names."""
    code = body.get("error_code") if isinstance(body, dict) else None
    message = str(body.get("message", "")) if isinstance(body, dict) else str(body)[:200]
    if not isinstance(code, int):
        code = status
    cls = _BY_CODE.get(code, SchemaRegistryError)
    error = cls(message or f"HTTP {status}")
    if cls is SchemaRegistryError:
        error.error_code = code  # type: ignore[misc]
    return error
