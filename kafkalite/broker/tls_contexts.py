"""The broker's TLS contexts, built from its configuration at start.

:func:`listener_contexts` gives every SSL listener its server context and
:func:`inter_broker_context` the context this broker calls other brokers with (its follower
fetches, forwarded requests, the console's scrapes) when the inter-broker listener is SSL. Both
raise :class:`~kafkalite.errors.ConfigError` naming the setting when the ``ssl.*`` settings
cannot be honoured, so a broker whose TLS is misconfigured never starts (no silent plaintext).

Concurrency: pure functions; the contexts are shared read-only by the event loop's transports.
"""

from __future__ import annotations

import ssl

from kafkalite.config import BrokerConfig
from kafkalite.security import tls

#: The security protocols whose connections are wrapped in TLS.
TLS_PROTOCOLS = frozenset({"SSL", "SASL_SSL"})


def listener_contexts(config: BrokerConfig) -> dict[str, ssl.SSLContext]:
    """Listener name → server context, for every listener whose security protocol uses TLS."""
    properties = dict(config.ssl_properties)
    return {listener.name: tls.server_context(tls.listener_ssl_settings(properties, listener.name), listener.name)
            for listener in config.listener_list() if config.security_protocol(listener.name) in TLS_PROTOCOLS}


def inter_broker_context(config: BrokerConfig) -> ssl.SSLContext | None:
    """The client context for calls to other brokers when the inter-broker listener uses TLS
    (its ``ssl.*`` settings: truststore, keystore as the client certificate, endpoint
    identification), else None (plain TCP)."""
    listener = config.inter_broker_listener()
    if config.security_protocol(listener.name) not in TLS_PROTOCOLS:
        return None
    return tls.broker_client_context(tls.listener_ssl_settings(dict(config.ssl_properties), listener.name),
                                     listener.name)
