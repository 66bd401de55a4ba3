"""The broker's SASL settings (kafkalite.security.sasl_config with kafkalite.config): Kafka's names,
mechanisms kafkalite cannot serve refused by name, the JAAS entry of the broker's own credentials."""

from __future__ import annotations

import pytest

from kafkalite.broker.tls_contexts import listener_contexts
from kafkalite.config import BrokerConfig
from kafkalite.errors import ConfigError
from kafkalite.security.sasl_config import check_broker_sasl, inter_broker_sasl, parse_jaas_config

SCRAM_JAAS = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="admin" password="a\\"b";'


def broker(**properties: str) -> BrokerConfig:
    return BrokerConfig.from_properties({"broker.id": "1", "log.dirs": "/tmp/x", **properties})


SASL_LISTENERS = {"listeners": "INTERNAL://127.0.0.1:1,EXTERNAL://127.0.0.1:2",
                  "listener.security.protocol.map": "INTERNAL:SASL_PLAINTEXT,EXTERNAL:SASL_PLAINTEXT",
                  "inter.broker.listener.name": "INTERNAL"}


def test_per_listener_mechanisms_and_inter_broker_credentials() -> None:
    config = broker(**SASL_LISTENERS, **{
        "sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "listener.name.external.sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
        "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
        "listener.name.internal.scram-sha-512.sasl.jaas.config": SCRAM_JAAS})
    assert config.unknown == ()
    settings = check_broker_sasl(config)
    assert settings.enabled_mechanisms("INTERNAL") == ("SCRAM-SHA-512",)
    assert settings.enabled_mechanisms("EXTERNAL") == ("PLAIN", "SCRAM-SHA-256")
    found = inter_broker_sasl(config)
    assert found is not None and found[0] == "SCRAM-SHA-512"
    assert (found[1].username, found[1].password) == ("admin", 'a"b')
    assert "a\\\"b" not in repr(found[1]) and "password=***" in repr(found[1])


@pytest.mark.parametrize(("properties", "message"), [
    ({}, "sasl.enabled.mechanisms is unset.*GSSAPI"),
    ({"sasl.enabled.mechanisms": "GSSAPI"}, "sasl.enabled.mechanisms: GSSAPI"),
    ({"sasl.enabled.mechanisms": "OAUTHBEARER"}, "OAUTHBEARER is not supported"),
    ({"sasl.enabled.mechanisms": "SCRAM-SHA-1"}, "unknown SASL mechanism SCRAM-SHA-1"),
    ({"sasl.enabled.mechanisms": "PLAIN"}, "sasl.mechanism.inter.broker.protocol is unset"),
    ({"sasl.enabled.mechanisms": "PLAIN", "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-256"},
     "SCRAM-SHA-256 is not enabled"),
    ({"sasl.enabled.mechanisms": "PLAIN", "sasl.mechanism.inter.broker.protocol": "PLAIN"},
     "no credentials: set listener.name.internal.plain.sasl.jaas.config"),
    ({"sasl.enabled.mechanisms": "PLAIN", "sasl.mechanism.inter.broker.protocol": "PLAIN",
      "sasl.jaas.config": "com.example.Login required username=\"a\" password=\"b\";"}, "login module"),
])
def test_settings_kafkalite_cannot_honour_are_named(properties: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        check_broker_sasl(broker(**SASL_LISTENERS, **properties))


def test_plaintext_listeners_need_no_sasl_settings_and_sasl_ssl_needs_tls_settings() -> None:
    check_broker_sasl(broker(listeners="PLAINTEXT://127.0.0.1:1"))
    # a SASL_SSL listener without a keystore does not start (no silent plaintext)
    with pytest.raises(ConfigError, match=r"ssl\.keystore"):
        listener_contexts(broker(listeners="SASL_SSL://127.0.0.1:1"))


def test_jaas_parsing() -> None:
    plain = parse_jaas_config('org.apache.kafka.common.security.plain.PlainLoginModule required\n'
                              '  username=admin password="s p";', "sasl.jaas.config")
    assert (plain.username, plain.password) == ("admin", "s p")
    with pytest.raises(ConfigError, match="user_alice"):
        parse_jaas_config('org.apache.kafka.common.security.plain.PlainLoginModule required username="a" '
                          'password="b" user_alice="x";', "sasl.jaas.config")
    with pytest.raises(ConfigError, match="needs username"):
        parse_jaas_config('org.apache.kafka.common.security.scram.ScramLoginModule required;', "sasl.jaas.config")
    with pytest.raises(ConfigError, match="must look like"):
        parse_jaas_config('username="a"', "sasl.jaas.config")
