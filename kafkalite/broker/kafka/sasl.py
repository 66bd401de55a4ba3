"""SASL on the Kafka protocol: SaslHandshake (v0, v1) and SaslAuthenticate (v0-v2).

On a SASL_PLAINTEXT (or SASL_SSL) listener every connection holds a :class:`SaslSession`. Until
it has authenticated, only ApiVersions, SaslHandshake and SaslAuthenticate are served; any other
request closes the connection, as Kafka does (see :mod:`kafkalite.broker.kafka.connection`).

* SaslHandshake names the mechanism: one of the listener's ``sasl.enabled.mechanisms``, else the
  answer is UNSUPPORTED_SASL_MECHANISM (33) with the enabled list and the connection is closed.
  A second handshake is ILLEGAL_SASL_STATE (34). Version 0's unframed tokens are not served:
  the tokens must come in SaslAuthenticate requests (what current clients send after v1).
* SaslAuthenticate carries the mechanism's tokens: PLAIN's one message, checked against the
  user's SCRAM credential (:func:`kafkalite.security.scram.find_user_credential`; the key
  derivation runs in a worker thread), or SCRAM's client-first and client-final messages
  (:class:`kafkalite.security.scram.ScramServer`, credentials from the broker's
  :class:`~kafkalite.broker.entity_configs.EntityConfigs`). Success makes the connection's
  principal ``User:<name>``; a failure is answered SASL_AUTHENTICATION_FAILED (58) with a message
  (the same for an unknown user and a wrong password) and the connection is closed.

On a listener without SASL, SaslHandshake answers UNSUPPORTED_SASL_MECHANISM with no mechanisms
and SaslAuthenticate ILLEGAL_SASL_STATE. Re-authentication (KIP-368) is not offered: the session
lifetime is 0 (the connection stays authenticated until it closes).

Concurrency: event-loop only; a session belongs to one connection, whose requests are served
one at a time.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from kafkalite.broker.kafka.context import ApiHandler, KafkaAnswer, KafkaRequestContext
from kafkalite.broker.kafka.sasl_session import SaslSession
from kafkalite.errors import IllegalSaslStateError, SaslAuthenticationFailedError, UnsupportedSaslMechanismError
from kafkalite.security import scram
from kafkalite.security.principal import KafkaPrincipal

log = logging.getLogger(__name__)

SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36


async def sasl_handshake(context: KafkaRequestContext, request: Any) -> KafkaAnswer:
    session = context.sasl
    if session is None:
        return {"error_code": UnsupportedSaslMechanismError.errno, "mechanisms": []}
    enabled = list(session.enabled_mechanisms)
    if session.mechanism is not None or session.authenticated:
        session.fail("a second SaslHandshake")
        return {"error_code": IllegalSaslStateError.errno, "mechanisms": enabled}
    mechanism = str(request.mechanism)
    if mechanism not in session.enabled_mechanisms:
        session.fail(f"SASL mechanism {mechanism!r} is not enabled")
        return {"error_code": UnsupportedSaslMechanismError.errno, "mechanisms": enabled}
    session.mechanism = mechanism
    return {"error_code": 0, "mechanisms": enabled}


def _answer(error: Exception | None, token: bytes = b"") -> KafkaAnswer:
    if error is None:
        return {"error_code": 0, "error_message": None, "auth_bytes": token, "session_lifetime": 0}
    code = error.errno if isinstance(error, (SaslAuthenticationFailedError, IllegalSaslStateError)) \
        else SaslAuthenticationFailedError.errno
    return {"error_code": code, "error_message": str(error), "auth_bytes": b"", "session_lifetime": 0}


async def sasl_authenticate(context: KafkaRequestContext, request: Any) -> KafkaAnswer:
    session = context.sasl
    if session is None or session.mechanism is None or session.authenticated:
        if session is not None:
            session.fail("SaslAuthenticate out of order")
        return _answer(IllegalSaslStateError("SaslAuthenticate without a SaslHandshake first"
                                             if session is None or session.mechanism is None
                                             else "the connection has authenticated already"))
    token = bytes(request.auth_bytes)
    entity_configs = context.services.entity_configs
    try:
        if entity_configs is None:
            raise SaslAuthenticationFailedError("this broker keeps no credentials")
        if session.mechanism == scram.PLAIN:
            user, password = scram.parse_plain(token)
            configs = entity_configs.user_configs(user)
            if await asyncio.to_thread(scram.find_user_credential, configs, password) is None:
                raise SaslAuthenticationFailedError("Authentication failed: Invalid username or password")
            return _success(session, user, b"")
        if session.exchange is None:
            session.exchange = scram.ScramServer(session.mechanism)
            user = session.exchange.receive_client_first(token)
            return _answer(None, session.exchange.server_first(entity_configs.scram_credential(user,
                                                                                             session.mechanism)))
        final = session.exchange.receive_client_final(token)
        assert session.exchange.user is not None
        return _success(session, session.exchange.user, final)
    except (SaslAuthenticationFailedError, IllegalSaslStateError) as exc:
        log.info("SASL %s authentication from %s failed: %s", session.mechanism, context.client_host, exc)
        session.fail(f"SASL authentication failed: {exc}")
        return _answer(exc)


def _success(session: SaslSession, user: str, token: bytes) -> KafkaAnswer:
    session.authenticated = True
    session.principal = KafkaPrincipal.user(user)
    return _answer(None, token)


HANDLERS: tuple[ApiHandler, ...] = (
    ApiHandler(SASL_HANDSHAKE, 0, 1, sasl_handshake),
    ApiHandler(SASL_AUTHENTICATE, 0, 2, sasl_authenticate),
)
