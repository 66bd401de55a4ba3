"""Kafka client security properties → kafkalite client options: the one mapping the tools
(``--command-config``, ``--producer.config``, ``--consumer.config``) and the Spark source and
sink (``kafka.security.protocol``, ``kafka.ssl.*``, ``kafka.sasl.*``) share.

The property names are those of the Java clients and of confluent-kafka / librdkafka alike, so
one ``admin.properties`` serves both: ``security.protocol``, ``ssl.ca.location`` /
``ssl.truststore.location`` (PEM), ``ssl.certificate.location`` / ``ssl.keystore.location`` (PEM),
``ssl.key.location``, ``ssl.key.password``, ``ssl.endpoint.identification.algorithm``,
``sasl.mechanism``, ``sasl.username``, ``sasl.password`` and ``sasl.jaas.config``
(``username="..." password="..."``).

Concurrency: pure functions and constants.
"""

from __future__ import annotations

import re
from typing import Any

from kafkalite.errors import ConfigError

#: Kafka client properties (Java's and confluent-kafka's names) → kafkalite client options.
_SECURITY_PROPERTY_OPTIONS = {
    "security.protocol": "security_protocol",
    "ssl.ca.location": "ssl_cafile",              # confluent-kafka / librdkafka
    "ssl.truststore.location": "ssl_cafile",      # Java clients, with ssl.truststore.type=PEM
    "ssl.certificate.location": "ssl_certfile",   # confluent-kafka / librdkafka
    "ssl.keystore.location": "ssl_certfile",      # Java clients, PEM: key and certificate chain in one file
    "ssl.key.location": "ssl_keyfile",
    "ssl.key.password": "ssl_password",
    "sasl.mechanism": "sasl_mechanism",
    "sasl.mechanisms": "sasl_mechanism",          # librdkafka's spelling
    "sasl.username": "sasl_plain_username",
    "sasl.password": "sasl_plain_password",
}
#: Every client property :func:`pop_security_options` consumes.
SECURITY_PROPERTIES = frozenset({*_SECURITY_PROPERTY_OPTIONS, "ssl.truststore.type", "ssl.keystore.type",
                                 "ssl.endpoint.identification.algorithm", "sasl.jaas.config"})
#: The kafkalite client options :func:`pop_security_options` produces.
SECURITY_OPTIONS = frozenset({*_SECURITY_PROPERTY_OPTIONS.values(), "ssl_check_hostname"})
_JAAS_OPTION = re.compile(r'(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"')


def option_name(property_name: str) -> str:
    """The client option a security property maps to (``ssl.ca.location`` → ``ssl_cafile``)."""
    if property_name == "ssl.endpoint.identification.algorithm":
        return "ssl_check_hostname"
    return _SECURITY_PROPERTY_OPTIONS.get(property_name, property_name)


def pop_security_options(properties: dict[str, str]) -> dict[str, Any]:
    """Remove the security settings from Kafka client ``properties`` (``security.protocol``,
    ``ssl.*``, ``sasl.*``, with the names both the Java clients and confluent-kafka use) and
    return them as kafkalite client options (``security_protocol``, ``ssl_cafile``,
    ``ssl_certfile``, ``ssl_keyfile``, ``ssl_password``, ``ssl_check_hostname``,
    ``sasl_mechanism``, ``sasl_plain_username``, ``sasl_plain_password``). Settings that cannot
    be honoured (a JKS or PKCS12 store, another ``ssl.*`` or ``sasl.*`` setting) are a ConfigError:
    a security setting is never dropped silently."""
    options: dict[str, Any] = {}
    for name in ("ssl.truststore.type", "ssl.keystore.type"):
        store_type = properties.pop(name, "PEM").strip().upper()
        if store_type != "PEM":
            raise ConfigError(f"{name}={store_type} is not supported: use PEM files ({name}=PEM)")
    for name, option in _SECURITY_PROPERTY_OPTIONS.items():
        value = properties.pop(name, None)
        if value is None:
            continue
        if option in options and options[option] != value:
            raise ConfigError(f"{name} conflicts with another setting of {option}")
        options[option] = value
    algorithm = properties.pop("ssl.endpoint.identification.algorithm", None)
    if algorithm is not None:
        if algorithm.strip().lower() not in ("", "none", "https"):
            raise ConfigError(f"ssl.endpoint.identification.algorithm must be https, none or empty, got {algorithm!r}")
        options["ssl_check_hostname"] = algorithm.strip().lower() == "https"
    jaas = properties.pop("sasl.jaas.config", None)
    if jaas is not None:
        fields = {key: value.replace('\\"', '"') for key, value in _JAAS_OPTION.findall(jaas)}
        if "username" not in fields or "password" not in fields:
            raise ConfigError('sasl.jaas.config must carry username="..." and password="..."')
        options.setdefault("sasl_plain_username", fields["username"])
        options.setdefault("sasl_plain_password", fields["password"])
    left = sorted(name for name in properties if name.startswith(("ssl.", "sasl.")))
    if left:
        raise ConfigError(f"unsupported security setting {left[0]!r}; "
                         f"supported: {', '.join(sorted(SECURITY_PROPERTIES))}")
    if "security_protocol" in options:
        options["security_protocol"] = str(options["security_protocol"]).strip().upper()
    return options
