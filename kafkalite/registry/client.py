"""A small blocking client of the schema registry's REST API, with caches (for the serdes and tools).

:class:`RegistryClient` speaks Confluent's REST API to one or more registry URLs (a broker's
``http://host:port/registry``, or ``http://localhost:8081``), trying the next URL when one does
not answer. Schemas by id never change and are cached forever; a subject's registration of a
schema is cached too. Error bodies are raised as the matching
:class:`~kafkalite.registry.errors.SchemaRegistryError` (e.g. 40401 SubjectNotFoundError).

Thread-safety: safe to share between threads (the caches are guarded by a lock); calls block.
"""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from kafkalite.registry.errors import ForwardingError, SchemaRegistryError, error_from_body
from kafkalite.registry.schemas import AVRO, ParsedSchema, Reference, ResolvedReference, parse_schema

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"


@dataclass(frozen=True)
class RegisteredSchema:
    """A schema as the registry returns it (``subject``/``version`` when known)."""

    schema_id: int
    schema: str
    schema_type: str = AVRO
    references: tuple[Reference, ...] = ()
    subject: str | None = None
    version: int | None = None


def _registered(body: dict[str, Any], schema_id: int | None = None) -> RegisteredSchema:
    references = tuple(Reference(item["name"], item["subject"], int(item["version"]))
                       for item in body.get("references") or [])
    return RegisteredSchema(int(body.get("id", schema_id or 0)), str(body["schema"]),
                            str(body.get("schemaType") or AVRO), references, body.get("subject"), body.get("version"))


class RegistryClient:
    """Blocking REST client (see the module docstring)."""

    def __init__(self, urls: str | Sequence[str], timeout: float = 30.0) -> None:
        url_list = [part.strip().rstrip("/") for part in urls.split(",")] if isinstance(urls, str) else \
            [url.rstrip("/") for url in urls]
        if not url_list or not all(url.startswith(("http://", "https://")) for url in url_list):
            raise SchemaRegistryError(f"schema.registry.url must be http(s) URLs, got {urls!r}")
        self.urls = url_list
        self.timeout = timeout
        self._lock = threading.Lock()
        self._by_id: dict[int, RegisteredSchema] = {}
        self._parsed: dict[int, ParsedSchema] = {}
        self._ids: dict[tuple[str, str, str], int] = {}

    # -- transport ----------------------------------------------------------------------------
    def request(self, method: str, path: str, body: Any = None) -> Any:
        data = json.dumps(body).encode("utf-8") if body is not None else None
        last: Exception | None = None
        for url in self.urls:
            request = urllib.request.Request(url + path, data=data, method=method, headers={
                "Content-Type": CONTENT_TYPE, "Accept": CONTENT_TYPE})
            try:
                with urllib.request.urlopen(request, timeout=self.timeout) as response:
                    return json.loads(response.read() or b"null")
            except urllib.error.HTTPError as exc:
                with exc:
                    payload = exc.read()
                try:
                    parsed = json.loads(payload)
                except ValueError:
                    parsed = payload.decode("utf-8", "replace")
                error = error_from_body(exc.code, parsed)
                if exc.code >= 500 and error.retriable:
                    last = error
                    continue
                raise error from None
            except (urllib.error.URLError, OSError, ValueError) as exc:
                last = exc
        raise ForwardingError(f"no schema registry answered at {', '.join(self.urls)}: {last}")

    @staticmethod
    def _subject(subject: str) -> str:
        return quote(subject, safe="")

    # -- the API ------------------------------------------------------------------------------
    def register(self, subject: str, schema: str, schema_type: str = AVRO,
                 references: Sequence[Reference] = ()) -> int:
        """The schema's id under ``subject`` (registering it when new)."""
        key = (subject, schema_type, schema)
        with self._lock:
            if key in self._ids and not references:
                return self._ids[key]
        body: dict[str, Any] = {"schema": schema}
        if schema_type != AVRO:
            body["schemaType"] = schema_type
        if references:
            body["references"] = [reference.to_json() for reference in references]
        schema_id = int(self.request("POST", f"/subjects/{self._subject(subject)}/versions", body)["id"])
        with self._lock:
            self._ids[key] = schema_id
        return schema_id

    def lookup(self, subject: str, schema: str, schema_type: str = AVRO) -> RegisteredSchema:
        body: dict[str, Any] = {"schema": schema}
        if schema_type != AVRO:
            body["schemaType"] = schema_type
        return _registered(self.request("POST", f"/subjects/{self._subject(subject)}", body))

    def schema(self, schema_id: int) -> RegisteredSchema:
        with self._lock:
            cached = self._by_id.get(schema_id)
        if cached is None:
            cached = _registered(self.request("GET", f"/schemas/ids/{int(schema_id)}"), schema_id)
            with self._lock:
                self._by_id[schema_id] = cached
        return cached

    def version(self, subject: str, version: int | str = "latest") -> RegisteredSchema:
        return _registered(self.request("GET", f"/subjects/{self._subject(subject)}/versions/{version}"))

    def subjects(self) -> list[str]:
        return list(self.request("GET", "/subjects"))

    def versions(self, subject: str) -> list[int]:
        return list(self.request("GET", f"/subjects/{self._subject(subject)}/versions"))

    def is_compatible(self, subject: str, schema: str, schema_type: str = AVRO, version: int | str = "latest") -> bool:
        body: dict[str, Any] = {"schema": schema}
        if schema_type != AVRO:
            body["schemaType"] = schema_type
        answer = self.request("POST", f"/compatibility/subjects/{self._subject(subject)}/versions/{version}", body)
        return bool(answer["is_compatible"])

    def set_compatibility(self, level: str, subject: str | None = None) -> str:
        path = f"/config/{self._subject(subject)}" if subject else "/config"
        return str(self.request("PUT", path, {"compatibility": level})["compatibility"])

    # -- parsed schemas -----------------------------------------------------------------------
    def parsed(self, schema_id: int) -> ParsedSchema:
        """The schema with this id, parsed with its references resolved (cached)."""
        with self._lock:
            cached = self._parsed.get(schema_id)
        if cached is None:
            cached = self.parse(self.schema(schema_id))
            with self._lock:
                self._parsed[schema_id] = cached
        return cached

    def parse(self, registered: RegisteredSchema, depth: int = 0) -> ParsedSchema:
        """Parse a registered schema, fetching what its references name."""
        resolved = []
        for reference in registered.references:
            if depth > 32:
                raise SchemaRegistryError("schema references nest deeper than 32")
            target = self.version(reference.subject, reference.version)
            resolved.append(ResolvedReference(reference, self.parse(target, depth + 1)))
        return parse_schema(registered.schema_type, registered.schema, resolved)
