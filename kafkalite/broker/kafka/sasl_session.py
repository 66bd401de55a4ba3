"""One Kafka connection's SASL state (see :mod:`kafkalite.broker.kafka.sasl` for the handlers).

Concurrency: event-loop only; a session belongs to one connection.
"""

from __future__ import annotations

from kafkalite.security.principal import ANONYMOUS, KafkaPrincipal
from kafkalite.security.scram import ScramServer

#: What an unauthenticated connection on a SASL listener may ask (ApiVersions is 18).
PRE_AUTHENTICATION_APIS = frozenset({18, 17, 36})


class SaslSession:
    """One connection's SASL state: the mechanism chosen, the exchange under way, the outcome."""

    def __init__(self, enabled_mechanisms: tuple[str, ...]) -> None:
        self.enabled_mechanisms = enabled_mechanisms
        self.mechanism: str | None = None
        self.authenticated = False
        self.principal: KafkaPrincipal = ANONYMOUS
        #: Why the connection must be closed once the current answer is written (None: keep it).
        self.close_reason: str | None = None
        #: The SCRAM exchange under way (None before the first token, or for PLAIN).
        self.exchange: ScramServer | None = None

    def fail(self, reason: str) -> None:
        self.close_reason = reason
