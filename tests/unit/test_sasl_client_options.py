"""kafka-python's SASL options on kafkalite's clients, and the HTTP Basic header both sides use."""

from __future__ import annotations

import pytest

from kafkalite.broker.http_auth import parse_basic
from kafkalite.client.consumer_settings import ConsumerSettings
from kafkalite.client.producer_settings import ProducerSettings
from kafkalite.client.sasl_options import take_sasl_options
from kafkalite.errors import ConfigError, SaslAuthenticationFailedError
from kafkalite.transport import basic_authorization


def test_sasl_options_become_credentials_on_every_client() -> None:
    options = {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "SCRAM-SHA-512",
               "sasl_plain_username": "alice", "sasl_plain_password": "p:w"}
    assert ProducerSettings.from_options(options).sasl_credentials == ("alice", "p:w")
    assert ConsumerSettings.from_options(options).sasl_credentials == ("alice", "p:w")
    assert ProducerSettings.from_options({}).sasl_credentials is None
    left = dict(options)
    take_sasl_options(left)
    assert left == {"security_protocol": "PLAINTEXT"}


@pytest.mark.parametrize(("options", "message"), [
    ({"security_protocol": "SASL_PLAINTEXT"}, "needs sasl_plain_username"),
    ({"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "GSSAPI", "sasl_plain_username": "a",
      "sasl_plain_password": "b"}, "GSSAPI"),
    ({"security_protocol": "SASL_PLAINTEXT", "sasl_plain_username": "a:b", "sasl_plain_password": "b"}, "':'"),
    ({"sasl_plain_username": "a", "sasl_plain_password": "b"}, "sasl_plain_username"),  # no silent plaintext
])
def test_sasl_options_that_cannot_be_honoured_are_refused(options: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        ProducerSettings.from_options(options)


def test_basic_header_round_trip_and_malformed_headers() -> None:
    assert parse_basic(basic_authorization("alice", "pa:ss wörd")) == ("alice", "pa:ss wörd")
    for header in ("Bearer x", "Basic !!!", "Basic " + "YWxpY2U=", "Basic"):
        with pytest.raises(SaslAuthenticationFailedError):
            parse_basic(header)
