"""TLS contexts from Kafka's ssl.* settings and kafka-python's ssl_* options, checked with real
handshakes over memory buffers (no sockets) between certificates made by kafkalite.security.certs."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest

from kafkalite.errors import ConfigError
from kafkalite.security import certs, tls


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    directory = tmp_path_factory.mktemp("pki")
    ca = certs.make_ca(directory)
    other_ca = certs.make_ca(directory, common_name="other-ca", name="other-ca")
    server = certs.make_server_certificate(ca, directory)
    wrong_name = certs.make_server_certificate(ca, directory, name="wrong-name", hostnames=["elsewhere.example"])
    encrypted = certs.make_server_certificate(ca, directory, name="encrypted", password="s3cret")
    alice = certs.make_client_certificate(ca, directory, "alice", organization="example")
    stranger = certs.make_client_certificate(other_ca, directory, "mallory")
    return {"ca": ca.certificate_path, "other_ca": other_ca.certificate_path, "server": server.keystore_path,
            "server_key": server.key_path, "server_cert": server.certificate_path,
            "wrong_name": wrong_name.keystore_path, "encrypted": encrypted.keystore_path,
            "alice_cert": alice.certificate_path, "alice_key": alice.key_path,
            "mallory_cert": stranger.certificate_path, "mallory_key": stranger.key_path}


def handshake(server: ssl.SSLContext, client: ssl.SSLContext, hostname: str = "localhost") -> str | None:
    """Run a TLS handshake in memory; the subject the server saw of the client's certificate."""
    server_in, server_out, client_in, client_out = (ssl.MemoryBIO() for _ in range(4))
    server_side = server.wrap_bio(server_in, server_out, server_side=True)
    client_side = client.wrap_bio(client_in, client_out, server_hostname=hostname)
    done = {"client": False, "server": False}
    for _ in range(20):
        for name, side in (("client", client_side), ("server", server_side)):
            if not done[name]:
                try:
                    side.do_handshake()
                    done[name] = True
                except ssl.SSLWantReadError:
                    pass
        client_in.write(server_out.read())
        server_in.write(client_out.read())
        if all(done.values()):
            # TLS 1.3: the server verifies the client's certificate when it reads its first data
            client_side.write(b"ping")
            server_in.write(client_out.read())
            assert server_side.read(4) == b"ping"
            return tls.peer_subject(server_side)
    raise AssertionError("handshake did not finish")


def test_server_and_client_contexts_handshake(pki: dict[str, Path]) -> None:
    server = tls.server_context({"ssl.keystore.type": "PEM", "ssl.keystore.location": str(pki["server"])})
    assert handshake(server, tls.client_context(ssl_cafile=str(pki["ca"]))) is None


def test_client_certificate_gives_rfc2253_subject(pki: dict[str, Path]) -> None:
    server = tls.server_context({"ssl.keystore.location": str(pki["server"]), "ssl.client.auth": "required",
                                 "ssl.truststore.location": str(pki["ca"])})
    client = tls.client_context(ssl_cafile=str(pki["ca"]), ssl_certfile=str(pki["alice_cert"]),
                                ssl_keyfile=str(pki["alice_key"]))
    assert handshake(server, client) == "CN=alice,O=example"


def test_required_client_auth_refuses_missing_and_foreign_certificates(pki: dict[str, Path]) -> None:
    server = tls.server_context({"ssl.keystore.location": str(pki["server"]), "ssl.client.auth": "required",
                                 "ssl.truststore.location": str(pki["ca"])})
    with pytest.raises(ssl.SSLError):
        handshake(server, tls.client_context(ssl_cafile=str(pki["ca"])))
    foreign = tls.client_context(ssl_cafile=str(pki["ca"]), ssl_certfile=str(pki["mallory_cert"]),
                                 ssl_keyfile=str(pki["mallory_key"]))
    with pytest.raises(ssl.SSLError):
        handshake(server, foreign)


def test_requested_client_auth_accepts_clients_without_certificates(pki: dict[str, Path]) -> None:
    server = tls.server_context({"ssl.keystore.location": str(pki["server"]), "ssl.client.auth": "requested",
                                 "ssl.truststore.location": str(pki["ca"])})
    assert handshake(server, tls.client_context(ssl_cafile=str(pki["ca"]))) is None


def test_wrong_ca_and_wrong_hostname_are_refused(pki: dict[str, Path]) -> None:
    server = tls.server_context({"ssl.keystore.location": str(pki["server"])})
    with pytest.raises(ssl.SSLCertVerificationError):
        handshake(server, tls.client_context(ssl_cafile=str(pki["other_ca"])))
    misnamed = tls.server_context({"ssl.keystore.location": str(pki["wrong_name"])})
    with pytest.raises(ssl.SSLCertVerificationError):
        handshake(misnamed, tls.client_context(ssl_cafile=str(pki["ca"])))
    unchecked = tls.client_context(ssl_cafile=str(pki["ca"]), ssl_check_hostname=False)
    assert handshake(misnamed, unchecked) is None


def test_broker_client_context_follows_endpoint_identification(pki: dict[str, Path]) -> None:
    misnamed = tls.server_context({"ssl.keystore.location": str(pki["wrong_name"])})
    settings = {"ssl.truststore.location": str(pki["ca"]), "ssl.keystore.location": str(pki["server"])}
    with pytest.raises(ssl.SSLCertVerificationError):
        handshake(misnamed, tls.broker_client_context(settings))
    relaxed = tls.broker_client_context({**settings, "ssl.endpoint.identification.algorithm": ""})
    assert handshake(misnamed, relaxed) is None


def test_inline_keystore_and_truststore_without_line_breaks(pki: dict[str, Path]) -> None:
    def one_line(path: Path) -> str:
        return " ".join(pki_line.strip() for pki_line in path.read_text().splitlines())
    server = tls.server_context({"ssl.keystore.type": "PEM", "ssl.keystore.key": one_line(pki["server_key"]),
                                 "ssl.keystore.certificate.chain": one_line(pki["server_cert"]),
                                 "ssl.client.auth": "required",
                                 "ssl.truststore.certificates": one_line(pki["ca"])})
    client = tls.client_context(ssl_cafile=str(pki["ca"]), ssl_certfile=str(pki["alice_cert"]),
                                ssl_keyfile=str(pki["alice_key"]))
    assert handshake(server, client) == "CN=alice,O=example"


def test_encrypted_key_needs_its_password(pki: dict[str, Path]) -> None:
    tls.server_context({"ssl.keystore.location": str(pki["encrypted"]), "ssl.key.password": "s3cret"})
    with pytest.raises(ConfigError, match=r"ssl\.keystore\.location"):
        tls.server_context({"ssl.keystore.location": str(pki["encrypted"]), "ssl.key.password": "wrong"})


def test_listener_prefix_overrides_plain_settings(pki: dict[str, Path]) -> None:
    properties = {"ssl.keystore.location": "/nowhere.pem", "ssl.client.auth": "required",
                  "listener.name.internal.ssl.keystore.location": str(pki["server"]),
                  "listener.name.internal.ssl.client.auth": "none", "listener.name.other.ssl.client.auth": "x"}
    settings = tls.listener_ssl_settings(properties, "INTERNAL")
    assert settings == {"ssl.keystore.location": str(pki["server"]), "ssl.client.auth": "none"}
    tls.server_context(settings, "INTERNAL")


@pytest.mark.parametrize(("settings", "named"), [
    ({"ssl.keystore.type": "JKS", "ssl.keystore.location": "/k.jks"}, "ssl.keystore.type=JKS"),
    ({"ssl.keystore.type": "PKCS12"}, "ssl.keystore.type=PKCS12"),
    ({"ssl.truststore.type": "JKS"}, "ssl.truststore.type=JKS"),
    ({"ssl.keystore.location": "/no/such/file.pem"}, "ssl.keystore.location: no such file"),
    ({}, "ssl.keystore.location"),
    ({"ssl.client.auth": "always"}, "ssl.client.auth"),
    ({"ssl.enabled.protocols": "TLSv1.1"}, "ssl.enabled.protocols"),
    ({"ssl.cipher.suites": "NO_SUCH_SUITE"}, "ssl.cipher.suites"),
    ({"ssl.truststore.location": "/no/such/ca.pem"}, "ssl.truststore.location"),
])
def test_settings_that_cannot_be_honoured_are_named(pki: dict[str, Path], settings: dict[str, str],
                                                    named: str) -> None:
    full = {"ssl.keystore.location": str(pki["server"]), **settings}
    if not settings:
        full = {}
    with pytest.raises(ConfigError, match=f"listener SSL: {named}"):
        tls.server_context(full, "SSL")


def test_client_auth_needs_a_truststore(pki: dict[str, Path]) -> None:
    with pytest.raises(ConfigError, match=r"ssl\.client\.auth=required needs ssl\.truststore"):
        tls.server_context({"ssl.keystore.location": str(pki["server"]), "ssl.client.auth": "required"})


def test_unreadable_key_is_named(pki: dict[str, Path], tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a key\n")
    with pytest.raises(ConfigError, match=r"ssl\.keystore\.location .*could not be loaded"):
        tls.server_context({"ssl.keystore.location": str(garbage)})


def test_cipher_suites_and_protocols_apply(pki: dict[str, Path]) -> None:
    server = tls.server_context({"ssl.keystore.location": str(pki["server"]), "ssl.enabled.protocols": "TLSv1.2",
                                 "ssl.cipher.suites": "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"})
    assert server.maximum_version == ssl.TLSVersion.TLSv1_2
    assert handshake(server, tls.client_context(ssl_cafile=str(pki["ca"]))) is None


def test_client_options_errors_name_the_option(pki: dict[str, Path]) -> None:
    with pytest.raises(ConfigError, match="ssl_cafile"):
        tls.client_context(ssl_cafile="/no/such/ca.pem")
    with pytest.raises(ConfigError, match="ssl_keyfile needs ssl_certfile"):
        tls.client_context(ssl_keyfile=str(pki["alice_key"]))
    with pytest.raises(ConfigError, match="ssl_certfile"):
        tls.client_context(ssl_certfile=str(pki["alice_cert"]), ssl_keyfile=str(pki["server_key"]))
    given = ssl.create_default_context()
    assert tls.client_context(ssl_cafile="/ignored", ssl_context=given) is given
    assert tls.client_context(ssl_cafile=str(pki["ca"])).check_hostname
