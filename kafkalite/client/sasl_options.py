"""kafka-python's SASL options on kafkalite's clients.

``security_protocol='SASL_PLAINTEXT'`` (or ``'SASL_SSL'``, TLS plus SASL) with ``sasl_mechanism``
(``PLAIN`` by default, as kafka-python; ``SCRAM-SHA-256`` and ``SCRAM-SHA-512`` too) and
``sasl_plain_username`` / ``sasl_plain_password``. kafkalite's clients speak HTTP, so whatever
the mechanism the credentials travel as HTTP Basic on every request and on the binary channel's
opening; the broker checks them against the user's SCRAM credential (see
:mod:`kafkalite.broker.http_auth`). GSSAPI and OAUTHBEARER are refused by name.

:func:`take_sasl_options` runs before :func:`kafkalite.client.options.check_common_options`: it
takes the SASL options out and leaves the transport part of the protocol (``PLAINTEXT`` or
``SSL``) for the common checks, which refuse ``sasl_*`` options given without a SASL protocol.

Concurrency: pure functions.
"""

from __future__ import annotations

from typing import Any

from kafkalite.errors import ConfigError

#: The mechanisms a client may name (any of them is sent as HTTP Basic).
CLIENT_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


def take_sasl_options(options: dict[str, Any]) -> tuple[str, str] | None:
    """(user, password) when ``security_protocol`` is SASL_PLAINTEXT or SASL_SSL (the SASL options
    are removed from ``options`` and the protocol becomes PLAINTEXT or SSL), else None."""
    protocol_name = str(options.get("security_protocol") or "PLAINTEXT").upper()
    if protocol_name not in ("SASL_PLAINTEXT", "SASL_SSL"):
        return None
    options["security_protocol"] = "PLAINTEXT" if protocol_name == "SASL_PLAINTEXT" else "SSL"
    mechanism = str(options.pop("sasl_mechanism", None) or "PLAIN").upper()
    if mechanism not in CLIENT_MECHANISMS:
        raise ConfigError(f"sasl_mechanism {mechanism!r} is not supported (use {', '.join(CLIENT_MECHANISMS)})")
    for name in ("sasl_kerberos_name", "sasl_kerberos_domain_name", "sasl_oauth_token_provider"):
        if options.pop(name, None) is not None:
            raise ConfigError(f"{name} is not supported (kafkalite's SASL mechanisms: {', '.join(CLIENT_MECHANISMS)})")
    user = options.pop("sasl_plain_username", None)
    password = options.pop("sasl_plain_password", None)
    if not isinstance(user, str) or not user or not isinstance(password, str) or not password:
        raise ConfigError(f"security_protocol {protocol_name} needs sasl_plain_username and sasl_plain_password")
    if ":" in user:
        raise ConfigError("sasl_plain_username must not contain ':' (it travels as HTTP Basic)")
    return user, password
