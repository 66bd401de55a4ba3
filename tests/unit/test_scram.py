"""SCRAM-SHA-256/512 and PLAIN (kafkalite.security.scram): RFC 7677's test vector, Kafka's stored
credential form, the server's checks, and PLAIN verified against a SCRAM credential."""

from __future__ import annotations

import base64

import pytest

from kafkalite.errors import IllegalSaslStateError, InvalidConfigurationError, SaslAuthenticationFailedError
from kafkalite.security import scram

RFC_CLIENT_NONCE = "rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
RFC_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
RFC_SERVER_FIRST = (b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                    b"s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
RFC_CLIENT_FINAL = (b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                    b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
RFC_SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def test_rfc7677_vector_client_side() -> None:
    client = scram.ScramClient("SCRAM-SHA-256", "user", "pencil", nonce=RFC_CLIENT_NONCE)
    assert client.client_first() == b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
    assert client.client_final(RFC_SERVER_FIRST) == RFC_CLIENT_FINAL
    client.verify_server_final(RFC_SERVER_FINAL)
    with pytest.raises(SaslAuthenticationFailedError):
        client.verify_server_final(b"v=" + base64.b64encode(b"x" * 32))


def test_rfc7677_vector_server_side() -> None:
    credential = scram.new_credential("SCRAM-SHA-256", "pencil", 4096, salt=RFC_SALT)
    server = scram.ScramServer("SCRAM-SHA-256", nonce=RFC_SERVER_NONCE)
    assert server.receive_client_first(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO") == "user"
    assert server.server_first(credential) == RFC_SERVER_FIRST
    assert server.receive_client_final(RFC_CLIENT_FINAL) == RFC_SERVER_FINAL
    assert server.complete


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_round_trip_and_stored_form(mechanism: str) -> None:
    credential = scram.new_credential(mechanism, "s3cret", 8192)
    text = credential.to_text()
    assert text.startswith("salt=") and ",stored_key=" in text and ",server_key=" in text
    assert text.endswith(",iterations=8192") and "s3cret" not in text
    assert scram.ScramCredential.from_text(text) == credential
    client = scram.ScramClient(mechanism, "alice", "s3cret")
    server = scram.ScramServer(mechanism)
    assert server.receive_client_first(client.client_first()) == "alice"
    final = server.receive_client_final(client.client_final(server.server_first(credential)))
    client.verify_server_final(final)


def test_wrong_password_and_unknown_user_fail_alike() -> None:
    credential = scram.new_credential("SCRAM-SHA-512", "right")
    for password, known in (("wrong", credential), ("right", None)):
        client = scram.ScramClient("SCRAM-SHA-512", "alice", password)
        server = scram.ScramServer("SCRAM-SHA-512")
        server.receive_client_first(client.client_first())
        first = server.server_first(known)
        with pytest.raises(SaslAuthenticationFailedError, match="invalid credentials"):
            server.receive_client_final(client.client_final(first))
        assert not server.complete


def test_server_refuses_channel_binding_bad_nonce_and_order() -> None:
    with pytest.raises(SaslAuthenticationFailedError, match="channel binding"):
        scram.ScramServer("SCRAM-SHA-256").receive_client_first(b"p=tls-unique,,n=user,r=abc")
    with pytest.raises(SaslAuthenticationFailedError):
        scram.ScramServer("SCRAM-SHA-256").receive_client_first(b"garbage")
    credential = scram.new_credential("SCRAM-SHA-256", "pencil")
    server = scram.ScramServer("SCRAM-SHA-256")
    server.receive_client_first(b"n,,n=user,r=abc")
    server.server_first(credential)
    with pytest.raises(SaslAuthenticationFailedError, match="nonce"):
        server.receive_client_final(b"c=biws,r=other,p=AAAA")
    with pytest.raises(IllegalSaslStateError):
        server.receive_client_final(b"c=biws,r=other,p=AAAA")
    fresh = scram.ScramServer("SCRAM-SHA-256")
    with pytest.raises(IllegalSaslStateError):
        fresh.server_first(credential)


def test_credential_limits_and_malformed_text() -> None:
    with pytest.raises(InvalidConfigurationError, match="iterations"):
        scram.new_credential("SCRAM-SHA-256", "pw", 1000)
    with pytest.raises(InvalidConfigurationError, match="unknown SCRAM mechanism"):
        scram.new_credential("SCRAM-SHA-1", "pw")
    with pytest.raises(InvalidConfigurationError):
        scram.ScramCredential.from_text("salt=AAAA,iterations=4096")


def test_plain_parsing_and_verification_against_scram() -> None:
    assert scram.parse_plain(b"\0alice\0pw") == ("alice", "pw")
    assert scram.parse_plain(b"alice\0alice\0pw") == ("alice", "pw")
    for bad in (b"alice", b"\0alice\0", b"bob\0alice\0pw", b"\xff\0a\0b"):
        with pytest.raises(SaslAuthenticationFailedError):
            scram.parse_plain(bad)
    credentials = {"SCRAM-SHA-256": scram.new_credential("SCRAM-SHA-256", "pw").to_text()}
    assert scram.find_user_credential(credentials, "pw") == "SCRAM-SHA-256"
    assert scram.find_user_credential(credentials, "nope") is None
    assert scram.find_user_credential({}, "pw") is None


def test_an_unknown_user_gets_the_same_made_up_salt_each_time() -> None:
    answers = []
    for _ in range(2):
        server = scram.ScramServer("SCRAM-SHA-256")
        server.receive_client_first(b"n,,n=ghost,r=abc")
        answers.append(server.server_first(None).split(b",")[1])
    assert answers[0] == answers[1] and answers[0].startswith(b"s=")


def test_a_final_nonce_with_the_client_nonce_in_front_once_more_is_accepted_as_kafka_does() -> None:
    """Debian's kcat (librdkafka 2.0) sends r=<client nonce><server-first nonce>; Kafka's server
    checks only that the final nonce ends with the server-first one, and so does ours."""
    import base64
    import hashlib
    import hmac

    credential = scram.new_credential("SCRAM-SHA-256", "pencil")
    server = scram.ScramServer("SCRAM-SHA-256")
    server.receive_client_first(b"n,,n=user,r=cnonce")
    first = server.server_first(credential).decode()
    nonce = first.split(",")[0][2:]
    without_proof = f"c=biws,r=cnonce{nonce}"
    salted = scram.salted_password("SCRAM-SHA-256", "pencil", credential.salt, credential.iterations)
    client_key = hmac.new(salted, b"Client Key", hashlib.sha256).digest()
    auth_message = f"n=user,r=cnonce,{first},{without_proof}".encode()
    signature = hmac.new(hashlib.sha256(client_key).digest(), auth_message, hashlib.sha256).digest()
    proof = base64.b64encode(bytes(a ^ b for a, b in zip(client_key, signature, strict=True))).decode()
    server.receive_client_final(f"{without_proof},p={proof}".encode())
    assert server.complete
