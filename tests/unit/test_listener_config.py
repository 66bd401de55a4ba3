"""``listeners``, ``advertised.listeners``, ``listener.security.protocol.map`` and
``inter.broker.listener.name`` with Kafka's meaning, and the named errors of bad values."""

from __future__ import annotations

import pytest

from kafkalite.config import BrokerConfig, Listener
from kafkalite.errors import ConfigError


def config(**settings: str) -> BrokerConfig:
    properties = {"broker.id": "1", "zookeeper.connect": "127.0.0.1:2181"}
    properties.update({key.replace("_", "."): value for key, value in settings.items()})
    return BrokerConfig.from_properties(properties)


def test_one_plaintext_listener_advertises_itself_with_a_wildcard_as_loopback() -> None:
    plain = config(listeners="PLAINTEXT://0.0.0.0:9092")
    assert plain.listener_list() == (Listener("PLAINTEXT", "0.0.0.0", 9092),)
    assert plain.advertised_listener_list() == (Listener("PLAINTEXT", "127.0.0.1", 9092),)
    assert plain.advertised_address() == ("127.0.0.1", 9092)
    assert config(listeners="http://127.0.0.1:9093").inter_broker_listener() == Listener("PLAINTEXT", "127.0.0.1",
                                                                                           9093)


def test_internal_and_external_listeners() -> None:
    two = config(listeners="INTERNAL://0.0.0.0:9092,EXTERNAL://0.0.0.0:19092",
                 advertised_listeners="INTERNAL://broker-1:9092,EXTERNAL://localhost:19092",
                 listener_security_protocol_map="INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT",
                 inter_broker_listener_name="INTERNAL")
    assert [listener.name for listener in two.listener_list()] == ["INTERNAL", "EXTERNAL"]
    assert [listener.endpoint for listener in two.advertised_listener_list()] == [
        "INTERNAL://broker-1:9092", "EXTERNAL://localhost:19092"]
    # other brokers (replica fetches) and kafkalite's HTTP metadata use the inter-broker listener
    assert two.advertised_address() == ("broker-1", 9092)
    # without inter.broker.listener.name and without a PLAINTEXT listener: the first listener
    first = config(listeners="A://127.0.0.1:1,B://127.0.0.1:2",
                   listener_security_protocol_map="A:PLAINTEXT,B:PLAINTEXT")
    assert first.inter_broker_listener().name == "A"
    # a listener left out of advertised.listeners advertises its own address
    partial = config(listeners="A://10.0.0.5:1,B://0.0.0.0:2", advertised_listeners="A://a.example:1",
                     listener_security_protocol_map="A:PLAINTEXT,B:PLAINTEXT")
    assert [listener.endpoint for listener in partial.advertised_listener_list()] == [
        "A://a.example:1", "B://127.0.0.1:2"]


@pytest.mark.parametrize(("settings", "message"), [
    ({"listeners": "INTERNAL://0.0.0.0:9092"}, "INTERNAL has no security protocol"),
    ({"listeners": "A://0.0.0.0:1", "listener_security_protocol_map": "A:TLS"}, "A uses TLS: only"),
    ({"listeners": "SSL://0.0.0.0:1", "security_inter_broker_protocol": "SSL", "inter_broker_listener_name": "SSL"},
     "only one of"),
    ({"listeners": "PLAINTEXT://0.0.0.0:1,PLAINTEXT://0.0.0.0:2"}, "twice"),
    ({"listeners": "PLAINTEXT://0.0.0.0:1", "advertised_listeners": "EXTERNAL://h:1"}, "not one of the listeners"),
    ({"listeners": "PLAINTEXT://0.0.0.0:1", "advertised_listeners": "PLAINTEXT://0.0.0.0:1"}, "must name a host"),
    ({"listeners": "PLAINTEXT://0.0.0.0:1", "inter_broker_listener_name": "INTERNAL"}, "not one of the listeners"),
    ({"listeners": "PLAINTEXT://0.0.0.0:99999"}, "NAME://host:port"),
    ({"listeners": "A://0.0.0.0:1", "listener_security_protocol_map": "A"}, "NAME:PROTOCOL"),
])
def test_bad_listener_settings_are_named_config_errors(settings: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        config(**settings)


def test_ssl_listeners_and_their_settings_are_known() -> None:
    secure = config(listeners="PLAINTEXT://127.0.0.1:9092,SSL://127.0.0.1:9093",
                    security_inter_broker_protocol="SSL")
    assert [listener.name for listener in secure.listener_list()] == ["PLAINTEXT", "SSL"]
    assert secure.security_protocol("SSL") == "SSL" and secure.security_protocol("PLAINTEXT") == "PLAINTEXT"
    assert secure.inter_broker_listener().name == "SSL"
    properties = {"broker.id": "1", "zookeeper.connect": "127.0.0.1:2181",
                  "listeners": "INTERNAL://127.0.0.1:9093", "listener.security.protocol.map": "INTERNAL:SSL",
                  "ssl.keystore.location": "/k.pem", "listener.name.internal.ssl.client.auth": "required",
                  "ssl.no.such.thing": "x", "sasl.mechanism": "PLAIN"}
    loaded = BrokerConfig.from_properties(properties)
    assert loaded.security_protocol("INTERNAL") == "SSL"
    assert dict(loaded.ssl_properties) == {"ssl.keystore.location": "/k.pem", "ssl.no.such.thing": "x",
                                           "listener.name.internal.ssl.client.auth": "required"}
    assert loaded.unknown == ("sasl.mechanism",)
