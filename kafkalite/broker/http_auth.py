"""HTTP authentication on SASL listeners: HTTP Basic against the users' SCRAM credentials.

A request that arrives on a SASL_PLAINTEXT (or SASL_SSL) listener must carry
``Authorization: Basic base64(user:password)``; the password is checked as PLAIN is on the
Kafka protocol, against the user's SCRAM credential in ``/config/users/<user>`` (see
:func:`kafkalite.security.scram.find_user_credential`). Without valid credentials the answer is
401 with ``WWW-Authenticate: Basic`` and Kafka's error name in the JSON body
(``{"error_code":58,"error":"SASL_AUTHENTICATION_FAILED",...}``) and nothing is served; with
them the request's principal (``request[PRINCIPAL_KEY]``) is ``User:<name>``. The binary
channel's WebSocket is authenticated by its upgrade request, once for the channel's life.
``/health`` and ``/ready`` are served to anyone. Requests on other listeners pass untouched.
Basic sends the password with every request: over SASL_PLAINTEXT anyone on the path can read it,
as with Kafka's PLAIN; use SASL_SSL where that matters.

A request's listener is told by the local port it arrived on. (The HTTP API's Metadata and
FindCoordinator answers carry the addresses advertised for that listener, as on the Kafka
protocol, so a client that bootstraps on a SASL listener stays on SASL listeners: see
:mod:`kafkalite.broker.http`.)

Cost: the key derivation (PBKDF2, thousands of iterations) runs in a worker thread, and a
successful check is remembered (keyed by the user and a keyed hash of the password, bound to the
credential it matched), so a client's following requests cost a dictionary look-up; a changed
or removed credential invalidates it.

Concurrency: event-loop only; the derivation runs in worker threads.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import hmac
import logging
import os
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from kafkalite import protocol
from kafkalite.broker.services import BrokerServices
from kafkalite.errors import SaslAuthenticationFailedError
from kafkalite.security import scram
from kafkalite.security.principal import KafkaPrincipal

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
#: Paths served without credentials.
OPEN_PATHS = frozenset({protocol.HEALTH, protocol.READY})
_CACHE_SIZE = 4096
_NEEDS_BASIC = "this listener needs HTTP Basic authentication (Authorization: Basic ...)"


def sasl_ports(services: BrokerServices) -> frozenset[int]:
    """The local ports of the broker's SASL listeners."""
    config = services.config
    return frozenset(listener.port for listener in config.listener_list() if config.is_sasl_listener(listener.name))


def parse_basic(header: str) -> tuple[str, str]:
    """``Basic base64(user:password)`` → (user, password); SASL_AUTHENTICATION_FAILED when malformed."""
    scheme, _, value = header.strip().partition(" ")
    if scheme.lower() != "basic" or not value.strip():
        raise SaslAuthenticationFailedError(_NEEDS_BASIC)
    try:
        text = base64.b64decode(value.strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        raise SaslAuthenticationFailedError("malformed Authorization: Basic credentials") from None
    user, separator, password = text.partition(":")
    if not separator or not user or not password:
        raise SaslAuthenticationFailedError("malformed Authorization: Basic credentials (expected user:password)")
    return user, password


class BasicAuthenticator:
    """Checks Basic credentials against the broker's users, remembering recent successes."""

    def __init__(self, services: BrokerServices) -> None:
        self.services = services
        self._key = os.urandom(32)
        #: (user, keyed hash of the password) → (mechanism, the credential text it matched)
        self._verified: OrderedDict[tuple[str, bytes], tuple[str, str]] = OrderedDict()

    async def authenticate(self, header: str | None) -> KafkaPrincipal:
        """The principal of valid credentials; SaslAuthenticationFailedError otherwise."""
        if not header:
            raise SaslAuthenticationFailedError(_NEEDS_BASIC)
        user, password = parse_basic(header)
        entity_configs = self.services.entity_configs
        configs = entity_configs.user_configs(user) if entity_configs is not None else {}
        fingerprint = (user, hmac.new(self._key, password.encode("utf-8"), hashlib.sha256).digest())
        remembered = self._verified.get(fingerprint)
        if remembered is not None and configs.get(remembered[0]) == remembered[1]:
            self._verified.move_to_end(fingerprint)
            return KafkaPrincipal.user(user)
        mechanism = await asyncio.to_thread(scram.find_user_credential, configs, password)
        if mechanism is None:
            self._verified.pop(fingerprint, None)
            raise SaslAuthenticationFailedError("Authentication failed: Invalid username or password")
        self._verified[fingerprint] = (mechanism, configs[mechanism])
        while len(self._verified) > _CACHE_SIZE:
            self._verified.popitem(last=False)
        return KafkaPrincipal.user(user)


def basic_auth_middleware(services: BrokerServices, principal_key: web.RequestKey[KafkaPrincipal]) -> Any | None:
    """The middleware authenticating requests on SASL listeners (None when the broker has none)."""
    ports = sasl_ports(services)
    if not ports:
        return None
    authenticator = BasicAuthenticator(services)

    @web.middleware
    async def authenticate(request: web.Request, handler: Handler) -> web.StreamResponse:
        transport = request.transport
        sockname = transport.get_extra_info("sockname") if transport is not None else None
        port = sockname[1] if isinstance(sockname, tuple) and len(sockname) >= 2 else None
        if port not in ports or request.path in OPEN_PATHS:
            return await handler(request)
        try:
            principal = await authenticator.authenticate(request.headers.get("Authorization"))
        except SaslAuthenticationFailedError as exc:
            log.info("HTTP authentication from %s failed on %s %s: %s", request.remote, request.method,
                     request.path, exc)
            return web.Response(body=protocol.dumps(protocol.error_body(exc)), status=401,
                                content_type="application/json",
                                headers={"WWW-Authenticate": 'Basic realm="kafkalite", charset="UTF-8"'})
        request[principal_key] = principal
        return await handler(request)

    return authenticate
