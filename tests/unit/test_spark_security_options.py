"""The Spark source's and sink's ``kafka.security.protocol``, ``kafka.ssl.*`` and ``kafka.sasl.*``
options: mapped with the tools' mapping to client options that travel (pickled) to the executors;
what the clients cannot honour is an error naming the option. No cluster, no Spark session."""

from __future__ import annotations

import pickle

import pytest

pytest.importorskip("pyspark", reason="the spark extra (pyspark, pyarrow) is not installed")

from kafkalite.security import certs
from kafkalite.spark import SinkOptions, SourceOptions, SparkOptionError

BASE = {"kafka.bootstrap.servers": "127.0.0.1:1", "subscribe": "orders"}


@pytest.fixture(scope="module")
def ca_file(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(certs.make_ca(tmp_path_factory.mktemp("pki")).certificate_path)


def test_security_options_reach_the_source_settings(ca_file: str) -> None:
    parsed = SourceOptions.parse({**BASE, "kafka.security.protocol": "SSL", "kafka.ssl.ca.location": ca_file,
                                  "kafka.ssl.endpoint.identification.algorithm": ""}, streaming=False)
    assert dict(parsed.settings.security) == {"security_protocol": "SSL", "ssl_cafile": ca_file,
                                              "ssl_check_hostname": False}
    assert pickle.loads(pickle.dumps(parsed.settings)).security == parsed.settings.security
    assert SourceOptions.parse(BASE, streaming=True).settings.security == ()


def test_security_options_reach_the_sink(ca_file: str) -> None:
    parsed = SinkOptions.parse({"kafka.bootstrap.servers": "h:1", "topic": "t", "kafka.security.protocol": "SSL",
                                "kafka.ssl.truststore.location": ca_file}, streaming=False)
    assert dict(parsed.security) == {"security_protocol": "SSL", "ssl_cafile": ca_file}


@pytest.mark.parametrize(("options", "named"), [
    ({"kafka.security.protocol": "TLS"}, "kafka.security.protocol"),
    ({"kafka.ssl.keystore.type": "PKCS12"}, "kafka.ssl.keystore.type"),
    ({"kafka.security.protocol": "SSL", "kafka.ssl.ca.location": "/no/such/ca.pem"}, "kafka.ssl.ca.location"),
    ({"kafka.ssl.ca.location": "/no/such/ca.pem"}, "kafka.ssl.ca.location"),
    ({"kafka.ssl.crl.location": "/crl.pem"}, "kafka.ssl.crl.location"),
])
def test_what_the_clients_cannot_honour_is_named(options: dict[str, str], named: str) -> None:
    with pytest.raises(SparkOptionError) as caught:
        SourceOptions.parse({**BASE, **options}, streaming=False)
    assert caught.value.option == named, caught.value
