"""TLS contexts from Kafka's settings: the broker's listeners and outgoing calls, and the clients.

Broker side (:func:`listener_ssl_settings`, :func:`server_context`, :func:`broker_client_context`):
Kafka's ``ssl.*`` settings with PEM keys and certificates only:

- ``ssl.keystore.type=PEM`` with ``ssl.keystore.location`` (one PEM file holding the private key
  and the certificate chain) or inline ``ssl.keystore.key`` + ``ssl.keystore.certificate.chain``;
  ``ssl.key.password`` decrypts an encrypted key;
- ``ssl.truststore.type=PEM`` with ``ssl.truststore.location`` (a file of CA certificates) or
  inline ``ssl.truststore.certificates``;
- ``ssl.client.auth`` (``none``, ``requested``, ``required``), ``ssl.enabled.protocols``
  (``TLSv1.2,TLSv1.3``), ``ssl.cipher.suites`` (IANA or OpenSSL names of TLS 1.2 suites; TLS 1.3
  suites are always on), ``ssl.endpoint.identification.algorithm`` (``https``, the default,
  verifies the host name of the brokers this broker calls; empty turns it off);
- ``listener.name.<listener in lower case>.ssl.*`` overrides the plain ``ssl.*`` for one listener.

Anything the broker cannot honour (a JKS or PKCS12 keystore, a missing file, a key that does not
load or match, an unknown protocol) is a :class:`~kafkalite.errors.ConfigError` naming the
setting, raised when the context is built, i.e. at broker start: never a silent plaintext listener.

Client side (:func:`client_context`): kafka-python's option names (``ssl_cafile``,
``ssl_certfile``, ``ssl_keyfile``, ``ssl_password``, ``ssl_check_hostname``, ``ssl_context``).

Concurrency: pure functions; the contexts they return are safe to share between threads and
event loops once built (Python's ``ssl.SSLContext`` is not modified afterwards).
"""

from __future__ import annotations

import asyncio
import functools
import os
import re
import ssl
import tempfile
from collections.abc import Mapping

from kafkalite.errors import ConfigError
from kafkalite.security.principal import KafkaPrincipal

#: Kafka's keystore and truststore type this module reads; JKS and PKCS12 are refused.
PEM_TYPE = "PEM"
#: ``ssl.client.auth`` values and what they ask of the client's certificate.
CLIENT_AUTH_MODES: dict[str, ssl.VerifyMode] = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL,
                                                 "required": ssl.CERT_REQUIRED}
#: ``ssl.enabled.protocols`` names.
_PROTOCOL_VERSIONS: dict[str, ssl.TLSVersion] = {"TLSv1.2": ssl.TLSVersion.TLSv1_2,
                                                  "TLSv1.3": ssl.TLSVersion.TLSv1_3}
#: IANA names (Kafka's, Java's) of common TLS 1.2 suites → OpenSSL's names.
_IANA_CIPHERS: dict[str, str] = {
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_DHE_RSA_WITH_AES_128_GCM_SHA256": "DHE-RSA-AES128-GCM-SHA256",
    "TLS_DHE_RSA_WITH_AES_256_GCM_SHA384": "DHE-RSA-AES256-GCM-SHA384",
    "TLS_RSA_WITH_AES_128_GCM_SHA256": "AES128-GCM-SHA256",
    "TLS_RSA_WITH_AES_256_GCM_SHA384": "AES256-GCM-SHA384",
}
_TLS13_CIPHERS = frozenset({"TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256",
                            "TLS_AES_128_CCM_SHA256", "TLS_AES_128_CCM_8_SHA256"})
_PEM_BLOCK = re.compile(r"-----BEGIN ([A-Z0-9 ]+)-----(.*?)-----END \1-----", re.DOTALL)


def listener_ssl_settings(properties: Mapping[str, str], listener_name: str) -> dict[str, str]:
    """The ``ssl.*`` settings of one listener: the plain ``ssl.*`` ones, overridden by
    ``listener.name.<listener_name lower case>.ssl.*`` (Kafka's per-listener prefix)."""
    settings = {name: value for name, value in properties.items() if name.startswith("ssl.")}
    prefix = f"listener.name.{listener_name.lower()}."
    settings.update({name[len(prefix):]: value for name, value in properties.items()
                     if name.startswith(prefix + "ssl.")})
    return settings


def server_context(settings: Mapping[str, str], listener_name: str = "SSL") -> ssl.SSLContext:
    """The context a TLS listener serves with (``settings`` as from :func:`listener_ssl_settings`);
    a ConfigError naming the setting when they cannot be honoured (a keystore is required)."""
    where = _where(listener_name)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _apply_protocols_and_ciphers(context, settings, where)
    if not _load_keystore(context, settings, where):
        raise ConfigError(f"{where}ssl.keystore.location (or ssl.keystore.key and ssl.keystore.certificate.chain) "
                          "must be set: a TLS listener needs a private key and certificate")
    mode_name = settings.get("ssl.client.auth", "none").strip().lower() or "none"
    mode = CLIENT_AUTH_MODES.get(mode_name)
    if mode is None:
        raise ConfigError(f"{where}ssl.client.auth must be one of {', '.join(CLIENT_AUTH_MODES)}, got {mode_name!r}")
    trusted = _load_truststore(context, settings, where)
    if mode != ssl.CERT_NONE and not trusted:
        raise ConfigError(f"{where}ssl.client.auth={mode_name} needs ssl.truststore.location or "
                          "ssl.truststore.certificates (the CAs that sign client certificates)")
    context.verify_mode = mode
    return context


def broker_client_context(settings: Mapping[str, str], listener_name: str = "SSL") -> ssl.SSLContext:
    """The context a broker calls other brokers' TLS listener with: trusts ``ssl.truststore.*``
    (the system CAs when unset), presents its keystore when it has one, and verifies host names
    unless ``ssl.endpoint.identification.algorithm`` is empty."""
    where = _where(listener_name)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    _apply_protocols_and_ciphers(context, settings, where)
    _load_keystore(context, settings, where)
    if not _load_truststore(context, settings, where):
        context.load_default_certs()
    algorithm = settings.get("ssl.endpoint.identification.algorithm", "https").strip().lower()
    if algorithm not in ("", "https"):
        raise ConfigError(f"{where}ssl.endpoint.identification.algorithm must be https or empty, got {algorithm!r}")
    context.check_hostname = algorithm == "https"
    context.verify_mode = ssl.CERT_REQUIRED
    return context


def client_context(ssl_cafile: str | None = None, ssl_certfile: str | None = None, ssl_keyfile: str | None = None,
                   ssl_password: str | None = None, ssl_check_hostname: bool = True,
                   ssl_context: ssl.SSLContext | None = None) -> ssl.SSLContext:
    """A client's context from kafka-python's options: ``ssl_context`` as given when set (the
    other options are then ignored, as kafka-python does), else one that trusts ``ssl_cafile``
    (the system CAs when unset), presents ``ssl_certfile``/``ssl_keyfile`` (the key may sit in the
    certificate file; ``ssl_password`` decrypts it) and checks host names unless
    ``ssl_check_hostname`` is false. Files that cannot be read are a ConfigError naming the option."""
    if ssl_context is not None:
        if not isinstance(ssl_context, ssl.SSLContext):
            raise ConfigError(f"ssl_context must be an ssl.SSLContext, got {type(ssl_context).__name__}")
        return ssl_context
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if ssl_cafile:
        _require_file(ssl_cafile, "ssl_cafile")
        try:
            context.load_verify_locations(cafile=ssl_cafile)
        except (ssl.SSLError, OSError, ValueError) as exc:
            raise ConfigError(f"ssl_cafile {ssl_cafile}: no CA certificate could be read ({exc})") from None
    else:
        context.load_default_certs()
    if ssl_keyfile and not ssl_certfile:
        raise ConfigError("ssl_keyfile needs ssl_certfile (the client certificate)")
    if ssl_certfile:
        _require_file(ssl_certfile, "ssl_certfile")
        if ssl_keyfile:
            _require_file(ssl_keyfile, "ssl_keyfile")
        try:
            context.load_cert_chain(ssl_certfile, ssl_keyfile or None, ssl_password)
        except (ssl.SSLError, OSError, ValueError) as exc:
            raise ConfigError(f"ssl_certfile {ssl_certfile} / ssl_keyfile {ssl_keyfile}: the certificate and key "
                              "could not be loaded (wrong ssl_password, or a key that does not match?) "
                              f"({exc})") from None
    context.check_hostname = bool(ssl_check_hostname)
    context.verify_mode = ssl.CERT_REQUIRED
    return context


def normalize_pem(text: str) -> str:
    """PEM blocks re-wrapped in 64-column lines: inline values in a properties file lose their
    line breaks (a continued line is joined without them), as Kafka tolerates too."""
    if "\n" in text.strip():
        return text if text.endswith("\n") else text + "\n"
    blocks = []
    for label, body in _PEM_BLOCK.findall(text):
        data = "".join(body.split())
        lines = [data[index:index + 64] for index in range(0, len(data), 64)]
        blocks.append(f"-----BEGIN {label}-----\n" + "\n".join(lines) + f"\n-----END {label}-----\n")
    return "".join(blocks)


def _where(listener_name: str) -> str:
    return f"listener {listener_name}: " if listener_name else ""


def _require_file(path: str, setting: str) -> None:
    if not os.path.isfile(path):
        raise ConfigError(f"{setting}: no such file {path}")
    if not os.access(path, os.R_OK):
        raise ConfigError(f"{setting}: {path} is not readable")


def _check_type(settings: Mapping[str, str], setting: str, where: str) -> None:
    value = settings.get(setting, PEM_TYPE).strip().upper() or PEM_TYPE
    if value != PEM_TYPE:
        raise ConfigError(f"{where}{setting}={value} is not supported: keys and certificates must be PEM "
                          f"({setting}=PEM)")


def _apply_protocols_and_ciphers(context: ssl.SSLContext, settings: Mapping[str, str], where: str) -> None:
    protocols_text = settings.get("ssl.enabled.protocols", "TLSv1.2,TLSv1.3")
    names = [part.strip() for part in protocols_text.split(",") if part.strip()]
    versions = []
    for name in names:
        version = _PROTOCOL_VERSIONS.get(name)
        if version is None:
            raise ConfigError(f"{where}ssl.enabled.protocols: {name!r} is not supported "
                              f"(only {', '.join(_PROTOCOL_VERSIONS)})")
        versions.append(version)
    if not versions:
        raise ConfigError(f"{where}ssl.enabled.protocols must name at least one protocol")
    context.minimum_version = min(versions)
    context.maximum_version = max(versions)
    suites = [part.strip() for part in settings.get("ssl.cipher.suites", "").split(",") if part.strip()]
    tls12 = [_IANA_CIPHERS.get(suite, suite) for suite in suites if suite not in _TLS13_CIPHERS]
    if tls12:
        try:
            context.set_ciphers(":".join(tls12))
        except ssl.SSLError:
            raise ConfigError(f"{where}ssl.cipher.suites: none of {', '.join(suites)} is available") from None


def _load_keystore(context: ssl.SSLContext, settings: Mapping[str, str], where: str) -> bool:
    """Load the keystore into ``context``; False when none is configured."""
    _check_type(settings, "ssl.keystore.type", where)
    location = settings.get("ssl.keystore.location", "").strip()
    key = settings.get("ssl.keystore.key", "").strip()
    chain = settings.get("ssl.keystore.certificate.chain", "").strip()
    password = settings.get("ssl.key.password") or settings.get("ssl.keystore.password") or None
    if location:
        _require_file(location, f"{where}ssl.keystore.location")
        try:
            context.load_cert_chain(location, None, password)
        except (ssl.SSLError, OSError, ValueError) as exc:
            raise ConfigError(f"{where}ssl.keystore.location {location}: the private key and certificate chain "
                              f"could not be loaded (wrong ssl.key.password, or not a PEM key + chain?) ({exc})"
                              ) from None
        return True
    if key or chain:
        if not (key and chain):
            raise ConfigError(f"{where}ssl.keystore.key and ssl.keystore.certificate.chain must be set together")
        _load_inline_keystore(context, normalize_pem(key), normalize_pem(chain), password, where)
        return True
    return False


def _load_inline_keystore(context: ssl.SSLContext, key: str, chain: str, password: str | None, where: str) -> None:
    # ssl can only read keys from files: a private file, removed as soon as it is read.
    with tempfile.TemporaryDirectory(prefix="kafkalite-tls-") as directory:
        path = os.path.join(directory, "keystore.pem")
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "w") as file:
            file.write(key + chain)
        try:
            context.load_cert_chain(path, None, password)
        except (ssl.SSLError, OSError, ValueError) as exc:
            raise ConfigError(f"{where}ssl.keystore.key / ssl.keystore.certificate.chain could not be loaded "
                              f"(wrong ssl.key.password, or a key that does not match the chain?) ({exc})") from None


def _load_truststore(context: ssl.SSLContext, settings: Mapping[str, str], where: str) -> bool:
    """Load the trusted CAs into ``context``; False when none are configured."""
    _check_type(settings, "ssl.truststore.type", where)
    location = settings.get("ssl.truststore.location", "").strip()
    inline = settings.get("ssl.truststore.certificates", "").strip()
    if location:
        _require_file(location, f"{where}ssl.truststore.location")
        try:
            context.load_verify_locations(cafile=location)
        except (ssl.SSLError, OSError, ValueError) as exc:
            raise ConfigError(f"{where}ssl.truststore.location {location}: no PEM certificate could be read ({exc})"
                              ) from None
        return True
    if inline:
        try:
            context.load_verify_locations(cadata=normalize_pem(inline))
        except (ssl.SSLError, ValueError) as exc:
            raise ConfigError(f"{where}ssl.truststore.certificates: no PEM certificate could be read ({exc})"
                              ) from None
        return True
    return False


@functools.lru_cache(maxsize=256)
def certificate_subject(der_certificate: bytes) -> str:
    """The subject of a DER certificate as an RFC 2253 distinguished name, most specific first
    (``CN=alice,O=example``): the name Kafka's default SSL principal builder gives a client
    certificate (``User:CN=alice,O=example``)."""
    from cryptography import x509

    return x509.load_der_x509_certificate(der_certificate).subject.rfc4514_string()


def peer_subject(ssl_object: ssl.SSLObject | ssl.SSLSocket | None) -> str | None:
    """The RFC 2253 subject of the verified certificate the peer of ``ssl_object`` presented;
    None when it presented none (or the connection is not TLS)."""
    if ssl_object is None:
        return None
    der = ssl_object.getpeercert(binary_form=True)
    return certificate_subject(der) if der else None


def transport_principal(transport: asyncio.BaseTransport | None) -> KafkaPrincipal | None:
    """``User:<subject in RFC 2253 form>`` of the verified client certificate of a TLS
    connection (Kafka's default SSL principal builder), None without one or without TLS."""
    if transport is None:
        return None
    subject = peer_subject(transport.get_extra_info("ssl_object"))
    return KafkaPrincipal.user(subject) if subject is not None else None
