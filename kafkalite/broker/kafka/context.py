"""What a Kafka-protocol API handler receives and returns.

A handler decodes nothing and encodes nothing: the listener parses the request into the kio
dataclass of the negotiated version, calls the handler with a :class:`KafkaRequestContext`, and
turns the handler's :data:`KafkaAnswer` into the kio response dataclass of that same version.

An answer is a mapping of kio field names (snake case, as in the kio response classes) to values;
a nested entity is a mapping of its own field names, a list of entities is a sequence of such
mappings. The handler writes the fields of the newest version it supports; the response builder
drops the fields the negotiated version does not have and fills fields it lacks that have a
default in the schema (``throttle_time_ms`` is 0 unless a handler sets it).

Request objects differ by version: a handler reads a field that not every version has with
``getattr(request, name, default)``.

Concurrency: handlers run on the broker's event loop, one request of a connection at a time in
order of arrival; several connections' handlers interleave at their awaits like HTTP handlers do.
A handler may let its connection's next request start before it answers, once what must happen
in arrival order is done (:meth:`KafkaRequestContext.release_next_request`: Produce does so after
its appends, so acks=all requests of one connection wait for replication together); answers are
still written in arrival order.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from kafkalite.broker.kafka.sasl_session import SaslSession
from kafkalite.security.principal import ANONYMOUS, KafkaPrincipal

if TYPE_CHECKING:
    from kafkalite.broker.services import BrokerServices

KafkaAnswer = Mapping[str, Any]
"""A response's field values by kio field name (see the module docstring)."""

NO_RESPONSE: KafkaAnswer = MappingProxyType({})
"""Returned (this very object) by a handler whose request gets no response (Produce with acks=0)."""


class EncodedAnswer(Mapping[str, Any]):
    """An answer already encoded (the response body, without its header): a handler that keeps
    an answer it serves unchanged to many requests returns it this way. As a mapping it is
    empty (no throttle time)."""

    __slots__ = ("body",)

    def __init__(self, body: bytes) -> None:
        self.body = body

    def __getitem__(self, key: str) -> Any:
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0


class ServingOrder:
    """The point in one request's handling after which its connection may start the next request.

    Released by the handler (:meth:`release`) or, at the latest, by the connection when the
    request has been answered. Concurrency: event-loop only."""

    __slots__ = ("_released",)

    def __init__(self, released: asyncio.Future[None]) -> None:
        self._released = released

    def release(self) -> None:
        if not self._released.done():
            self._released.set_result(None)


@dataclass(frozen=True, slots=True)
class KafkaRequestContext:
    """One request's envelope: who sent it, which API version it speaks, and the broker's services."""

    services: BrokerServices
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    client_host: str
    #: The name of the listener the request came in on (Metadata answers with its advertised addresses).
    listener_name: str = "PLAINTEXT"
    #: Who the connection authenticated as (:data:`~kafkalite.security.principal.ANONYMOUS` when
    #: its listener authenticates nobody).
    principal: KafkaPrincipal = ANONYMOUS
    #: The listener's security protocol: PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL.
    security_protocol: str = "PLAINTEXT"
    #: The connection's SASL state on a SASL listener (None elsewhere); SaslHandshake and
    #: SaslAuthenticate advance it.
    sasl: SaslSession | None = None
    #: Lets the connection start its next request early (None: it waits for this one's answer).
    order: ServingOrder | None = None

    def release_next_request(self) -> None:
        """What had to happen in arrival order is done: the connection may start its next request
        while this one still waits (its answer is still written before the next one's)."""
        if self.order is not None:
            self.order.release()

    def advertised_address(self, broker_id: int) -> tuple[str, int] | None:
        """``(host, port)`` of live broker ``broker_id`` on this request's listener; None when the
        broker is not live or has no listener of that name (Kafka leaves such brokers out)."""
        registered = self.services.metadata.cache.brokers.get(broker_id)
        endpoint = registered.listener_endpoint(self.listener_name) if registered is not None else None
        return (endpoint.host, endpoint.port) if endpoint is not None else None


Handler = Callable[[KafkaRequestContext, Any], Awaitable[KafkaAnswer]]
"""Handles one parsed request (a kio request dataclass) and answers with a :data:`KafkaAnswer`."""


@dataclass(frozen=True, slots=True)
class ApiHandler:
    """One API served over the Kafka protocol: its key, the versions offered in ApiVersions, its handler."""

    api_key: int
    min_version: int
    max_version: int
    handle: Handler
