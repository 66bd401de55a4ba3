"""Option checks every client shares: kafka-python options accepted and ignored, security
settings refused, unknown names refused.

:func:`check_common_options` runs first in the producer's, the consumer's and the admin
client's option parsing (:mod:`.producer_settings`, :mod:`.consumer_settings`, :mod:`.admin_core`).

Concurrency: pure functions and constants.
"""

from __future__ import annotations

from typing import Any

from kafkalite.errors import ConfigError, UnrecognizedClientOptionError

# kafka-python options about its own socket layer, metrics or SASL/SSL defaults: accepted, no effect.
IGNORED_OPTIONS = frozenset({
    "api_version", "api_version_auto_timeout_ms", "bootstrap_timeout_ms", "client_dns_lookup",
    "connections_max_idle_ms", "kafka_client", "metric_group_prefix", "metric_reporters", "metrics_enabled",
    "metrics_num_samples", "metrics_sample_window_ms", "receive_buffer_bytes", "receive_message_max_bytes",
    "reconnect_backoff_max_ms", "reconnect_backoff_ms", "selector", "send_buffer_bytes", "socket_options",
    "transaction_timeout_ms", "loop", "ssl_check_hostname", "sasl_kerberos_service_name", "proxy_url",
    "socks5_proxy", "wakeup_timeout_ms",
})
_SECURITY_OPTIONS = ("ssl_context", "ssl_cafile", "ssl_certfile", "ssl_keyfile", "ssl_crlfile", "ssl_password",
                     "ssl_ciphers", "sasl_mechanism", "sasl_plain_username", "sasl_plain_password",
                     "sasl_kerberos_name", "sasl_kerberos_domain_name", "sasl_oauth_token_provider")


def check_common_options(options: dict[str, Any], known: set[str]) -> None:
    """Refuse unknown options and security settings this installation cannot honour."""
    protocol_name = str(options.pop("security_protocol", "PLAINTEXT") or "PLAINTEXT").upper()
    if protocol_name != "PLAINTEXT":
        raise ConfigError(f"security_protocol {protocol_name!r} is not supported; brokers speak plain HTTP")
    for name in _SECURITY_OPTIONS:
        if options.pop(name, None) is not None:
            raise ConfigError(f"{name} is not supported; brokers speak plain HTTP without authentication")
    unknown = set(options) - known - IGNORED_OPTIONS
    if unknown:
        raise UnrecognizedClientOptionError(f"unrecognized options: {sorted(unknown)}")

