"""The broker's SASL settings, with Kafka's names.

* ``sasl.enabled.mechanisms`` (Kafka's default: GSSAPI) and its per-listener form
  ``listener.name.<listener>.sasl.enabled.mechanisms``: kafkalite serves PLAIN, SCRAM-SHA-256 and
  SCRAM-SHA-512. GSSAPI (Kerberos) and OAUTHBEARER stop the broker at start with an error naming
  the setting, so a SASL listener left at Kafka's default must name its mechanisms.
* ``sasl.mechanism.inter.broker.protocol`` (Kafka's default: GSSAPI): the mechanism brokers use
  to call each other when the inter-broker listener is SASL.
* The broker's own credentials, Kafka's JAAS setting: ``listener.name.<listener>.<mechanism in
  lower case>.sasl.jaas.config`` or ``sasl.jaas.config``, e.g.
  ``org.apache.kafka.common.security.scram.ScramLoginModule required username="admin" password="...";``.
  Only ``username`` and ``password`` are read; PlainLoginModule's ``user_<name>="..."`` entries
  are not a user database in kafkalite (PLAIN is verified against the SCRAM credentials in
  ``/config/users``, see :mod:`kafkalite.security.scram`) and are refused by name.

Concurrency: immutable values and pure functions.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from kafkalite.errors import ConfigError

#: The mechanisms kafkalite serves.
SUPPORTED_MECHANISMS: tuple[str, ...] = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
#: Kafka's default for ``sasl.enabled.mechanisms`` and ``sasl.mechanism.inter.broker.protocol``.
KAFKA_DEFAULT_MECHANISM = "GSSAPI"
_REFUSED = {"GSSAPI": "GSSAPI (Kerberos) is not supported", "OAUTHBEARER": "OAUTHBEARER is not supported"}
_LOGIN_MODULES = {"org.apache.kafka.common.security.scram.ScramLoginModule",
                  "org.apache.kafka.common.security.plain.PlainLoginModule"}

_SASL_PROPERTY = re.compile(
    r"^(listener\.name\.[a-z0-9_-]+\.)?(sasl\.enabled\.mechanisms|sasl\.jaas\.config|"
    r"(plain|scram-sha-256|scram-sha-512|gssapi|oauthbearer)\.sasl\.jaas\.config)$|"
    r"^sasl\.mechanism\.inter\.broker\.protocol$")
_JAAS = re.compile(r'^\s*([A-Za-z0-9_.$]+)\s+(required|requisite|sufficient|optional)\s*(.*?)\s*;\s*$', re.DOTALL)
_JAAS_OPTION = re.compile(r'\s*([A-Za-z0-9_.-]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s";]+))')


def is_sasl_property(name: str) -> bool:
    """Whether ``name`` is one of the SASL settings read here."""
    return _SASL_PROPERTY.match(name) is not None


def parse_mechanisms(text: str, setting: str) -> tuple[str, ...]:
    """A comma-separated mechanism list; ConfigError naming ``setting`` for one kafkalite cannot serve."""
    mechanisms = tuple(dict.fromkeys(part.strip().upper() for part in text.split(",") if part.strip()))
    if not mechanisms:
        raise ConfigError(f"{setting} must name at least one of {', '.join(SUPPORTED_MECHANISMS)}")
    for mechanism in mechanisms:
        if mechanism in _REFUSED:
            raise ConfigError(f"{setting}: {_REFUSED[mechanism]} by kafkalite "
                              f"(use {', '.join(SUPPORTED_MECHANISMS)})")
        if mechanism not in SUPPORTED_MECHANISMS:
            raise ConfigError(f"{setting}: unknown SASL mechanism {mechanism} "
                              f"(supported: {', '.join(SUPPORTED_MECHANISMS)})")
    return mechanisms


@dataclass(frozen=True)
class JaasCredentials:
    """The ``username``/``password`` of a JAAS login module entry."""

    login_module: str
    username: str
    password: str

    def __repr__(self) -> str:  # never print the password
        return f"JaasCredentials({self.login_module!r}, {self.username!r}, password=***)"


def parse_jaas_config(text: str, setting: str) -> JaasCredentials:
    """``<LoginModule> required username="admin" password="...";`` → credentials (ConfigError naming
    ``setting`` when malformed, for another login module, or without a username and password)."""
    match = _JAAS.match(text)
    if match is None:
        raise ConfigError(f"{setting} must look like '<LoginModule> required username=\"...\" password=\"...\";'")
    module, _, rest = match.groups()
    if module not in _LOGIN_MODULES:
        raise ConfigError(f"{setting}: login module {module} is not supported (use ScramLoginModule or "
                          "PlainLoginModule)")
    options: dict[str, str] = {}
    position = 0
    while position < len(rest):
        option = _JAAS_OPTION.match(rest, position)
        if option is None:
            if rest[position:].strip():
                raise ConfigError(f"{setting}: cannot parse the options of {module}")
            break
        quoted, bare = option.group(2), option.group(3)
        options[option.group(1)] = re.sub(r"\\(.)", r"\1", quoted) if quoted is not None else bare
        position = option.end()
    users = sorted(name for name in options if name.startswith("user_"))
    if users:
        raise ConfigError(f"{setting}: {', '.join(users)}: kafkalite keeps no PLAIN passwords in JAAS settings; "
                          "create SCRAM credentials with kafkalite-configs.sh (PLAIN is checked against them)")
    if not options.get("username") or not options.get("password"):
        raise ConfigError(f"{setting} needs username=\"...\" and password=\"...\"")
    return JaasCredentials(module, options["username"], options["password"])


@dataclass(frozen=True)
class SaslSettings:
    """The SASL settings of a broker, looked up per listener as Kafka does."""

    properties: dict[str, str]

    def enabled_mechanisms(self, listener: str) -> tuple[str, ...]:
        """``listener.name.<l>.sasl.enabled.mechanisms``, else ``sasl.enabled.mechanisms``, else
        Kafka's default GSSAPI, which is refused (ConfigError naming the setting)."""
        prefixed = f"listener.name.{listener.lower()}.sasl.enabled.mechanisms"
        for setting in (prefixed, "sasl.enabled.mechanisms"):
            if setting in self.properties:
                return parse_mechanisms(self.properties[setting], setting)
        raise ConfigError(f"listener {listener.upper()} uses SASL but sasl.enabled.mechanisms is unset, and Kafka's "
                          f"default GSSAPI (Kerberos) is not supported: set sasl.enabled.mechanisms (or {prefixed}) "
                          f"to some of {', '.join(SUPPORTED_MECHANISMS)}")

    def inter_broker_mechanism(self) -> str:
        """``sasl.mechanism.inter.broker.protocol`` (Kafka's default GSSAPI is refused)."""
        setting = "sasl.mechanism.inter.broker.protocol"
        if setting not in self.properties:
            raise ConfigError(f"the inter-broker listener uses SASL but {setting} is unset, and Kafka's default "
                              f"GSSAPI (Kerberos) is not supported: set it to one of {', '.join(SUPPORTED_MECHANISMS)}")
        mechanisms = parse_mechanisms(self.properties[setting], setting)
        if len(mechanisms) != 1:
            raise ConfigError(f"{setting} must name one mechanism, got {self.properties[setting]!r}")
        return mechanisms[0]

    def credentials(self, listener: str, mechanism: str) -> JaasCredentials | None:
        """The broker's own credentials for ``mechanism`` on ``listener``:
        ``listener.name.<l>.<mechanism>.sasl.jaas.config``, else ``sasl.jaas.config``."""
        for setting in (f"listener.name.{listener.lower()}.{mechanism.lower()}.sasl.jaas.config", "sasl.jaas.config"):
            if setting in self.properties:
                return parse_jaas_config(self.properties[setting], setting)
        return None


def sasl_settings(properties: tuple[tuple[str, str], ...]) -> SaslSettings:
    """Check every SASL setting given (mechanism lists, JAAS entries) and return them."""
    settings = SaslSettings(dict(properties))
    for name, value in properties:
        if name.endswith("sasl.enabled.mechanisms") or name == "sasl.mechanism.inter.broker.protocol":
            parse_mechanisms(value, name)
        elif name.endswith("sasl.jaas.config"):
            parse_jaas_config(value, name)
    return settings


class _Listener(Protocol):
    @property
    def name(self) -> str: ...


class BrokerSecurityView(Protocol):
    """What :func:`check_broker_sasl` reads of a broker's config (``kafkalite.config.BrokerConfig``)."""

    @property
    def sasl_properties(self) -> tuple[tuple[str, str], ...]: ...

    def listener_list(self) -> Sequence[_Listener]: ...

    def inter_broker_listener(self) -> _Listener: ...

    def is_sasl_listener(self, listener_name: str) -> bool: ...


def check_broker_sasl(config: BrokerSecurityView) -> SaslSettings:
    """ConfigError, naming the setting, when a SASL setting cannot be honoured: a malformed entry, a
    SASL listener without a mechanism kafkalite serves, or a SASL inter-broker listener without the
    broker's own credentials for its mechanism. Run at broker start."""
    settings = sasl_settings(config.sasl_properties)
    for listener in config.listener_list():
        if config.is_sasl_listener(listener.name):
            settings.enabled_mechanisms(listener.name)
    inter_broker_sasl(config)
    return settings


def inter_broker_sasl(config: BrokerSecurityView) -> tuple[str, JaasCredentials] | None:
    """(mechanism, the broker's own credentials) when the inter-broker listener is SASL, else None."""
    listener = config.inter_broker_listener()
    if not config.is_sasl_listener(listener.name):
        return None
    settings = sasl_settings(config.sasl_properties)
    mechanism = settings.inter_broker_mechanism()
    if mechanism not in settings.enabled_mechanisms(listener.name):
        raise ConfigError(f"sasl.mechanism.inter.broker.protocol {mechanism} is not enabled on the inter-broker "
                          f"listener {listener.name} (sasl.enabled.mechanisms)")
    credentials = settings.credentials(listener.name, mechanism)
    if credentials is None:
        raise ConfigError(f"the inter-broker listener {listener.name} uses SASL {mechanism} but the broker has "
                          f"no credentials: set listener.name.{listener.name.lower()}.{mechanism.lower()}"
                          ".sasl.jaas.config (or sasl.jaas.config)")
    return mechanism, credentials
