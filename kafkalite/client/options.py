"""Option checks every client shares: kafka-python options accepted and ignored, TLS options
turned into a context, security settings that cannot be honoured refused, unknown names refused.

:func:`check_common_options` runs first in the producer's, the consumer's and the admin
client's option parsing (:mod:`.producer_settings`, :mod:`.consumer_settings`, :mod:`.admin_core`).

Concurrency: pure functions and constants.
"""

from __future__ import annotations

import ssl
from typing import Any

from kafkalite.errors import ConfigError, UnrecognizedClientOptionError
from kafkalite.security import tls

# kafka-python options about its own socket layer, metrics or SASL/SSL defaults: accepted, no effect.
IGNORED_OPTIONS = frozenset({
    "api_version", "api_version_auto_timeout_ms", "bootstrap_timeout_ms", "client_dns_lookup",
    "connections_max_idle_ms", "kafka_client", "metric_group_prefix", "metric_reporters", "metrics_enabled",
    "metrics_num_samples", "metrics_sample_window_ms", "receive_buffer_bytes", "receive_message_max_bytes",
    "reconnect_backoff_max_ms", "reconnect_backoff_ms", "selector", "send_buffer_bytes", "socket_options",
    "transaction_timeout_ms", "loop", "sasl_kerberos_service_name", "proxy_url",
    "socks5_proxy", "wakeup_timeout_ms",
})
#: The security protocols clients can use (``security_protocol``); others are refused.
SUPPORTED_SECURITY_PROTOCOLS = frozenset({"PLAINTEXT", "SSL"})
#: kafka-python's TLS options, honoured with ``security_protocol='SSL'`` (see :func:`tls.client_context`).
SSL_OPTIONS = ("ssl_context", "ssl_cafile", "ssl_certfile", "ssl_keyfile", "ssl_password", "ssl_check_hostname",
               "ssl_ciphers")
_UNSUPPORTED_SECURITY_OPTIONS = ("ssl_crlfile", "sasl_mechanism", "sasl_plain_username", "sasl_plain_password",
                                 "sasl_kerberos_name", "sasl_kerberos_domain_name", "sasl_oauth_token_provider")


def check_common_options(options: dict[str, Any], known: set[str]) -> ssl.SSLContext | None:
    """Refuse unknown options and security settings this installation cannot honour; the TLS
    context of ``security_protocol='SSL'`` (None for PLAINTEXT). TLS options without SSL are
    refused too: a client never falls back to plaintext silently."""
    protocol_name = str(options.pop("security_protocol", "PLAINTEXT") or "PLAINTEXT").upper()
    if protocol_name not in SUPPORTED_SECURITY_PROTOCOLS:
        raise ConfigError(f"security_protocol {protocol_name!r} is not supported "
                          "(only PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL)")
    for name in _UNSUPPORTED_SECURITY_OPTIONS:
        if options.pop(name, None) is not None:
            raise ConfigError(f"{name} is not supported with security_protocol {protocol_name!r}")
    given = {name: options.pop(name) for name in SSL_OPTIONS if options.get(name) is not None}
    unknown = set(options) - known - IGNORED_OPTIONS
    if unknown:
        raise UnrecognizedClientOptionError(f"unrecognized options: {sorted(unknown)}")
    if protocol_name == "PLAINTEXT":
        given.pop("ssl_check_hostname", None)  # kafka-python's default is True: harmless without TLS
        if given:
            raise ConfigError(f"{', '.join(sorted(given))} need security_protocol='SSL' "
                              "(the client would otherwise connect in plaintext)")
        return None
    ciphers = given.pop("ssl_ciphers", None)
    context = tls.client_context(**given)
    if ciphers is not None:
        if "ssl_context" in given:
            raise ConfigError("ssl_ciphers cannot be combined with ssl_context (set them on the context)")
        try:
            context.set_ciphers(str(ciphers))
        except ssl.SSLError:
            raise ConfigError(f"ssl_ciphers {ciphers!r}: no cipher can be selected") from None
    return context
