"""Who a request comes from: Kafka's ``KafkaPrincipal`` (``User:alice``).

Every request on either front end carries the principal its connection authenticated as
(SASL, an HTTP ``Authorization`` header, or a TLS client certificate), or :data:`ANONYMOUS` on a
listener that authenticates nobody, as Kafka's ``User:ANONYMOUS``. The authorizer, quotas and
logs name principals in Kafka's text form, ``<type>:<name>``.

Concurrency: immutable values, safe to share between threads.
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass

from kafkalite.errors import InvalidRequestError

#: The principal type of users, the only one Kafka's default principal builder produces.
USER_TYPE = "User"


@dataclass(frozen=True, slots=True)
class KafkaPrincipal:
    """A principal: its type (``User``) and its name (``alice``, or a certificate's distinguished name)."""

    principal_type: str
    name: str

    def __str__(self) -> str:
        return f"{self.principal_type}:{self.name}"

    @classmethod
    def parse(cls, text: str) -> KafkaPrincipal:
        """``User:alice`` → ``KafkaPrincipal("User", "alice")``; anything without a type and a
        name is an INVALID_REQUEST (Kafka's ``SecurityUtils.parseKafkaPrincipal``)."""
        principal_type, separator, name = text.partition(":")
        if not separator or not principal_type or not name:
            raise InvalidRequestError(f"a principal must look like <type>:<name> (e.g. User:alice), got {text!r}")
        return cls(principal_type, name)

    @classmethod
    def user(cls, name: str) -> KafkaPrincipal:
        """The principal of user ``name``."""
        return cls(USER_TYPE, name)


#: The principal of an unauthenticated connection (a PLAINTEXT or SSL listener without client certificates).
ANONYMOUS = KafkaPrincipal(USER_TYPE, "ANONYMOUS")
#: Kafka's wildcard principal in ACLs: ``User:*`` matches every user.
WILDCARD_PRINCIPAL = KafkaPrincipal(USER_TYPE, "*")

#: The HTTP header a broker sets when it forwards a client's request to another broker (the JSON
#: records routes forward to partition leaders): the principal the request is served for. The
#: receiving broker trusts it only from a caller allowed ClusterAction on the Cluster, as Kafka
#: trusts the principal in a forwarded request's Envelope (KIP-590).
FORWARDED_PRINCIPAL_HEADER = "Kafkalite-Forwarded-Principal"
#: The principal the current task serves a request for, while a broker authorizes requests (set by
#: its HTTP authorization for the request's life); None elsewhere.
served_principal: ContextVar[KafkaPrincipal | None] = ContextVar("kafkalite_served_principal", default=None)
