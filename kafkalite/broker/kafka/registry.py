"""The APIs the Kafka listener serves: every handler module's ``HANDLERS``, and ApiVersions.

A handler module exports ``HANDLERS: tuple[ApiHandler, ...]``; :data:`HANDLER_MODULES` lists the
modules (add a module there to serve its APIs). ApiVersions is answered here, from the version
ranges of the registered handlers.

Concurrency: built once per listener; read-only afterwards.
"""

from __future__ import annotations

from collections.abc import Iterable
from types import ModuleType
from typing import Any

from kafkalite.broker.kafka import (
    acls,
    admin,
    client_quotas,
    codec,
    data,
    groups,
    markers,
    sasl,
    scram_admin,
    txn,
)
from kafkalite.broker.kafka.context import ApiHandler, KafkaAnswer, KafkaRequestContext

#: The modules whose ``HANDLERS`` the listener serves.
HANDLER_MODULES: tuple[ModuleType, ...] = (data, groups, admin, markers, txn, sasl, scram_admin, client_quotas, acls)

#: The ApiVersions versions served (v3 is the newest current clients send; kio has v4 too).
API_VERSIONS_RANGE = (0, 3)


class ApiRegistry:
    """Handlers by API key, with ApiVersions answered from their version ranges."""

    def __init__(self, handlers: Iterable[ApiHandler]) -> None:
        self.handlers: dict[int, ApiHandler] = {}
        for handler in handlers:
            if handler.api_key in self.handlers or handler.api_key == codec.API_VERSIONS_KEY:
                raise ValueError(f"API key {handler.api_key} is registered twice")
            for version in range(handler.min_version, handler.max_version + 1):
                if codec.request_class(handler.api_key, version) is None:
                    raise ValueError(f"kio has no request class for API {handler.api_key} v{version}")
            self.handlers[handler.api_key] = handler
        self.handlers[codec.API_VERSIONS_KEY] = ApiHandler(codec.API_VERSIONS_KEY, *API_VERSIONS_RANGE,
                                                           self.api_versions)
        #: Kafka's request names ("Produce", "Fetch", ...), as its RequestMetrics label them
        self.names: dict[int, str] = {}
        for key, handler in self.handlers.items():
            request_class = codec.request_class(key, handler.min_version)
            assert request_class is not None  # checked above (ApiVersions: kio has every version)
            self.names[key] = request_class.__name__.removesuffix("Request")

    @classmethod
    def default(cls) -> ApiRegistry:
        return cls(handler for module in HANDLER_MODULES for handler in module.HANDLERS)

    def lookup(self, api_key: int, api_version: int) -> ApiHandler | None:
        """The handler of ``api_key`` when it serves ``api_version``."""
        handler = self.handlers.get(api_key)
        if handler is None or not handler.min_version <= api_version <= handler.max_version:
            return None
        return handler

    def version_ranges(self) -> list[dict[str, int]]:
        return [{"api_key": key, "min_version": handler.min_version, "max_version": handler.max_version}
                for key, handler in sorted(self.handlers.items())]

    async def api_versions(self, context: KafkaRequestContext, request: Any) -> KafkaAnswer:
        return {"error_code": 0, "api_keys": self.version_ranges(), "throttle_time": 0}
