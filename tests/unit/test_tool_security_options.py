"""The tools' one mapping from Kafka client security properties (Java's and confluent-kafka's
names) to kafkalite client options, and --command-config files read through it."""

from __future__ import annotations

from pathlib import Path

import pytest

from kafkalite.errors import ConfigError
from kafkalite.tools import producer_perf_test
from kafkalite.tools.common import (
    UsageError,
    command_config_options,
    pop_security_options,
    transport_ssl_context,
)
from kafkalite.tools.topics import build_parser as topics_parser


def test_confluent_names_map_to_client_options() -> None:
    properties = {"security.protocol": "sasl_ssl", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "admin",
                  "sasl.password": "secret", "ssl.ca.location": "/pki/ca.pem", "linger.ms": "5"}
    assert pop_security_options(properties) == {
        "security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512", "sasl_plain_username": "admin",
        "sasl_plain_password": "secret", "ssl_cafile": "/pki/ca.pem"}
    assert properties == {"linger.ms": "5"}  # what is left is the tool's


def test_java_names_and_jaas_config_map_to_client_options() -> None:
    properties = {"security.protocol": "SSL", "ssl.truststore.type": "PEM", "ssl.truststore.location": "/ca.pem",
                  "ssl.keystore.type": "PEM", "ssl.keystore.location": "/me.pem", "ssl.key.password": "pw",
                  "ssl.endpoint.identification.algorithm": "",
                  "sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule required '
                                      'username="alice" password="p\\"w";'}
    assert pop_security_options(properties) == {
        "security_protocol": "SSL", "ssl_cafile": "/ca.pem", "ssl_certfile": "/me.pem", "ssl_password": "pw",
        "ssl_check_hostname": False, "sasl_plain_username": "alice", "sasl_plain_password": 'p"w'}
    assert pop_security_options({"ssl.certificate.location": "/c.pem", "ssl.key.location": "/k.pem",
                                 "ssl.endpoint.identification.algorithm": "https"}) == {
        "ssl_certfile": "/c.pem", "ssl_keyfile": "/k.pem", "ssl_check_hostname": True}


@pytest.mark.parametrize(("properties", "message"), [
    ({"ssl.truststore.type": "JKS"}, "ssl.truststore.type=JKS is not supported"),
    ({"ssl.keystore.type": "PKCS12"}, "ssl.keystore.type=PKCS12 is not supported"),
    ({"ssl.crl.location": "/crl.pem"}, "unsupported security setting 'ssl.crl.location'"),
    ({"sasl.jaas.config": "ScramLoginModule required;"}, "username"),
    ({"ssl.endpoint.identification.algorithm": "ldap"}, "ssl.endpoint.identification.algorithm"),
    ({"ssl.ca.location": "/a.pem", "ssl.truststore.location": "/b.pem"}, "conflicts"),
])
def test_settings_that_cannot_be_honoured_are_usage_errors(properties: dict[str, str], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        pop_security_options(dict(properties))


def test_command_config_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "admin.properties"
    path.write_text("security.protocol=SSL\nssl.ca.location=/pki/ca.pem\nbootstrap.servers=x:1\nretries=3\n")
    assert command_config_options(str(path)) == {"security_protocol": "SSL", "ssl_cafile": "/pki/ca.pem"}
    assert "retries" in capsys.readouterr().err
    assert command_config_options(None) == {}
    arguments = topics_parser().parse_args(["--list", "--bootstrap-server", "x:1", "--command-config", str(path)])
    assert arguments.command_config == str(path)


def test_clients_refuse_what_they_cannot_honour() -> None:
    assert transport_ssl_context({}) is None
    with pytest.raises(ConfigError, match="SASL_SSL"):
        transport_ssl_context(pop_security_options({"security.protocol": "SASL_SSL"}))
    with pytest.raises(ConfigError, match="ssl_cafile"):
        transport_ssl_context(pop_security_options({"security.protocol": "SSL", "ssl.ca.location": "/no/ca.pem"}))
    with pytest.raises(ConfigError, match="need security_protocol='SSL'"):
        transport_ssl_context(pop_security_options({"ssl.ca.location": "/no/ca.pem"}))


def test_perf_tool_properties_keep_security_settings() -> None:
    options = producer_perf_test.client_options({"bootstrap.servers": "h:1", "linger.ms": "5",
                                                 "security.protocol": "SSL", "ssl.ca.location": "/ca.pem"})
    assert options["security_protocol"] == "SSL" and options["ssl_cafile"] == "/ca.pem"
    assert options["linger_ms"] == 5 and "ssl_ca_location" not in options
