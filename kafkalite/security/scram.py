"""SCRAM-SHA-256 / SCRAM-SHA-512 (RFC 5802, RFC 7677) and PLAIN (RFC 4616), as Kafka does them.

What this module owns:

* :class:`ScramCredential`: what the broker keeps of a password (salt, stored key, server key,
  iterations), in Kafka's stored text form ``salt=<b64>,stored_key=<b64>,server_key=<b64>,iterations=<n>``
  (the value of the ``SCRAM-SHA-256`` / ``SCRAM-SHA-512`` key of ``/config/users/<user>``).
  :func:`new_credential` makes one from a password with a random salt; the password itself is
  never kept.
* :class:`ScramServer`: the broker's side of one exchange (client-first → server-first →
  client-final → server-final), with the nonce checks, channel binding ``n,,`` only (``biws``
  in the client-final message: no channel binding, as Kafka) and constant-time comparisons.
* :class:`ScramClient`: the client's side, for kafkalite's own clients and tools.
* :func:`parse_plain` / :func:`verify_password`: PLAIN. kafkalite keeps no plain-text password
  anywhere, so PLAIN (and HTTP Basic) is verified against the user's SCRAM credential: the
  salted password is recomputed with that credential's salt and iterations and its stored key
  compared with the credential's (constant time). A user with credentials for both mechanisms
  is checked against SCRAM-SHA-512 first. Kafka's PLAIN instead reads passwords from the JAAS
  file; kafkalite's choice means one set of credentials, managed with ``kafkalite-configs.sh``,
  serves every mechanism.

Concurrency: pure functions and per-exchange objects; an exchange object belongs to one
connection and is not shared between threads. Key derivation (PBKDF2, 4096+ iterations) costs a
few milliseconds: callers on the event loop run it in a worker thread.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import re
from dataclasses import dataclass

from kafkalite.errors import IllegalSaslStateError, InvalidConfigurationError, SaslAuthenticationFailedError

#: Kafka's SCRAM mechanisms and the hash function of each.
SCRAM_MECHANISMS: dict[str, str] = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
PLAIN = "PLAIN"
#: Kafka's minimum (and default) iteration count; its maximum is 16384.
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384
DEFAULT_ITERATIONS = 4096
_SALT_BYTES = 24
#: Keys the made-up salt of an unknown user, so asking twice shows the same salt (as for a real user).
_UNKNOWN_USER_KEY = os.urandom(32)


def _hash_name(mechanism: str) -> str:
    try:
        return SCRAM_MECHANISMS[mechanism]
    except KeyError:
        raise InvalidConfigurationError(
            f"unknown SCRAM mechanism {mechanism!r} (expected {' or '.join(SCRAM_MECHANISMS)})") from None


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: str, what: str) -> bytes:
    try:
        return base64.b64decode(text.encode("ascii"), validate=True)
    except (ValueError, UnicodeEncodeError):
        raise SaslAuthenticationFailedError(f"invalid base64 in {what}") from None


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    """RFC 5802's ``Hi(Normalize(password), salt, i)`` (PBKDF2-HMAC; passwords are used as UTF-8,
    like Kafka, without SASLprep)."""
    return hashlib.pbkdf2_hmac(_hash_name(mechanism), password.encode("utf-8"), salt, iterations)


def _hmac(mechanism: str, key: bytes, message: bytes) -> bytes:
    return hmac.new(key, message, _hash_name(mechanism)).digest()


def _hash(mechanism: str, data: bytes) -> bytes:
    return hashlib.new(_hash_name(mechanism), data).digest()


def _xor(left: bytes, right: bytes) -> bytes:
    return bytes(a ^ b for a, b in zip(left, right, strict=True))


@dataclass(frozen=True)
class ScramCredential:
    """A user's SCRAM credential for one mechanism: no password, only what verifies one."""

    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def to_text(self) -> str:
        """Kafka's stored form: ``salt=<b64>,stored_key=<b64>,server_key=<b64>,iterations=<n>``."""
        return (f"salt={_b64(self.salt)},stored_key={_b64(self.stored_key)},"
                f"server_key={_b64(self.server_key)},iterations={self.iterations}")

    @classmethod
    def from_text(cls, text: str) -> ScramCredential:
        """Parse Kafka's stored form (InvalidConfigurationError when malformed)."""
        fields: dict[str, str] = {}
        for part in text.split(","):
            key, separator, value = part.partition("=")
            if not separator:
                raise InvalidConfigurationError(f"malformed SCRAM credential field {part!r}")
            fields[key.strip()] = value.strip()
        try:
            return cls(base64.b64decode(fields["salt"], validate=True),
                       base64.b64decode(fields["stored_key"], validate=True),
                       base64.b64decode(fields["server_key"], validate=True),
                       int(fields["iterations"]))
        except (KeyError, ValueError) as exc:
            raise InvalidConfigurationError(f"malformed SCRAM credential ({exc})") from None


def credential_from_salted(mechanism: str, salted: bytes, salt: bytes, iterations: int) -> ScramCredential:
    """The stored and server keys derived from a salted password."""
    client_key = _hmac(mechanism, salted, b"Client Key")
    return ScramCredential(salt, _hash(mechanism, client_key), _hmac(mechanism, salted, b"Server Key"), iterations)


def new_credential(mechanism: str, password: str, iterations: int = DEFAULT_ITERATIONS,
                   salt: bytes | None = None) -> ScramCredential:
    """A credential for ``password`` with a random salt (InvalidConfigurationError for an
    iteration count outside Kafka's 4096..16384 or an empty password)."""
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise InvalidConfigurationError(
            f"{mechanism} iterations must be between {MIN_ITERATIONS} and {MAX_ITERATIONS}, got {iterations}")
    if not password:
        raise InvalidConfigurationError(f"{mechanism} needs a non-empty password")
    salt = os.urandom(_SALT_BYTES) if salt is None else salt
    return credential_from_salted(mechanism, salted_password(mechanism, password, salt, iterations), salt, iterations)


def verify_password(mechanism: str, credential: ScramCredential, password: str) -> bool:
    """Whether ``password`` is the one ``credential`` was made from (constant-time compare)."""
    salted = salted_password(mechanism, password, credential.salt, credential.iterations)
    candidate = credential_from_salted(mechanism, salted, credential.salt, credential.iterations)
    return hmac.compare_digest(candidate.stored_key, credential.stored_key)


def parse_plain(token: bytes) -> tuple[str, str]:
    """A PLAIN message ``[authzid] \\0 user \\0 password`` → (user, password). An authorization id
    other than empty or the user itself is refused, as Kafka does."""
    try:
        text = token.decode("utf-8")
    except UnicodeDecodeError:
        raise SaslAuthenticationFailedError("PLAIN message is not UTF-8") from None
    parts = text.split("\0")
    if len(parts) != 3 or not parts[1] or not parts[2]:
        raise SaslAuthenticationFailedError("invalid PLAIN message: expected authzid\\0user\\0password")
    authorization_id, user, password = parts
    if authorization_id and authorization_id != user:
        raise SaslAuthenticationFailedError("PLAIN authorization id is not the authenticated user")
    return user, password


def plain_token(user: str, password: str) -> bytes:
    """The PLAIN message a client sends."""
    return f"\0{user}\0{password}".encode()


# --- the exchange ---------------------------------------------------------------------------------

_ATTRIBUTE = re.compile(r"^([A-Za-z])=(.*)$", re.DOTALL)


def _attributes(message: str, what: str) -> list[tuple[str, str]]:
    pairs = []
    for part in message.split(","):
        match = _ATTRIBUTE.match(part)
        if match is None:
            raise SaslAuthenticationFailedError(f"invalid SCRAM {what}: {message[:100]!r}")
        pairs.append((match.group(1), match.group(2)))
    return pairs


def _decode_name(name: str) -> str:
    """RFC 5802's ``saslname``: ``=2C`` is a comma and ``=3D`` an equals sign."""
    if re.search(r"=(?!2C|3D)", name):
        raise SaslAuthenticationFailedError("invalid SCRAM user name encoding")
    return name.replace("=2C", ",").replace("=3D", "=")


def _encode_name(name: str) -> str:
    return name.replace("=", "=3D").replace(",", "=2C")


def _nonce() -> str:
    return base64.b64encode(os.urandom(24)).decode("ascii").replace(",", "-")


class ScramServer:
    """The broker's side of one SCRAM exchange.

    ``receive_client_first`` returns the user name; the caller looks up the credential (None when
    the user is unknown: the exchange then continues with a made-up salt so the answer does not
    tell unknown users from wrong passwords, and fails at the proof) and calls ``server_first``;
    ``receive_client_final`` checks the proof and returns the server-final message.
    Every failure raises SaslAuthenticationFailedError; a call out of order IllegalSaslStateError.
    """

    def __init__(self, mechanism: str, nonce: str | None = None) -> None:
        _hash_name(mechanism)
        self.mechanism = mechanism
        self.user: str | None = None
        self._server_nonce = nonce if nonce is not None else _nonce()
        self._client_first_bare = ""
        self._server_first = ""
        self._nonce = ""
        self._credential: ScramCredential | None = None
        self._known = False
        self._state = "client-first"
        self.complete = False

    def receive_client_first(self, message: bytes) -> str:
        if self._state != "client-first":
            raise IllegalSaslStateError("unexpected SCRAM client-first message")
        text = message.decode("utf-8", errors="replace")
        gs2, separator, bare = text.partition(",")
        authzid, separator2, bare = bare.partition(",")
        if not separator or not separator2:
            raise SaslAuthenticationFailedError("invalid SCRAM client-first message")
        if gs2 != "n":
            raise SaslAuthenticationFailedError("SCRAM channel binding is not supported (expected 'n,,')")
        attributes = _attributes(bare, "client-first message")
        if len(attributes) < 2 or attributes[0][0] != "n" or attributes[1][0] != "r":
            raise SaslAuthenticationFailedError("invalid SCRAM client-first message: expected n=<user>,r=<nonce>")
        if any(key == "m" for key, _ in attributes):
            raise SaslAuthenticationFailedError("SCRAM extensions are not supported")
        user = _decode_name(attributes[0][1])
        if authzid and _decode_name(authzid.removeprefix("a=")) != user:
            raise SaslAuthenticationFailedError("SCRAM authorization id is not the authenticated user")
        client_nonce = attributes[1][1]
        if not user or not client_nonce:
            raise SaslAuthenticationFailedError("SCRAM user name and nonce must not be empty")
        self.user = user
        self._client_first_bare = bare
        self._nonce = client_nonce + self._server_nonce
        self._state = "server-first"
        return user

    def server_first(self, credential: ScramCredential | None) -> bytes:
        if self._state != "server-first":
            raise IllegalSaslStateError("SCRAM server-first message out of order")
        self._known = credential is not None
        if credential is None:  # same shape of answer as for a known user, the same salt every time
            salt = hmac.new(_UNKNOWN_USER_KEY, (self.user or "").encode("utf-8"), "sha256").digest()[:_SALT_BYTES]
            credential = ScramCredential(salt, os.urandom(32), os.urandom(32), DEFAULT_ITERATIONS)
        self._credential = credential
        self._server_first = f"r={self._nonce},s={_b64(credential.salt)},i={credential.iterations}"
        self._state = "client-final"
        return self._server_first.encode()

    def receive_client_final(self, message: bytes) -> bytes:
        if self._state != "client-final" or self._credential is None:
            raise IllegalSaslStateError("unexpected SCRAM client-final message")
        self._state = "failed"
        text = message.decode("utf-8", errors="replace")
        without_proof, separator, proof_text = text.rpartition(",p=")
        if not separator:
            raise SaslAuthenticationFailedError("invalid SCRAM client-final message: no proof")
        attributes = dict(_attributes(without_proof, "client-final message"))
        if attributes.get("c") != "biws":
            raise SaslAuthenticationFailedError("SCRAM channel binding is not supported (expected c=biws)")
        # Kafka's server accepts a final nonce that *ends* with the server-first nonce (some
        # librdkafka releases, kcat's among them, put their client nonce in front once more)
        final_nonce = attributes.get("r", "").encode()
        expected = self._nonce.encode()
        if len(final_nonce) < len(expected) or not hmac.compare_digest(final_nonce[len(final_nonce) - len(expected):],
                                                                       expected):
            raise SaslAuthenticationFailedError("SCRAM nonce mismatch")
        proof = _unb64(proof_text, "SCRAM client proof")
        credential = self._credential
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
        signature = _hmac(self.mechanism, credential.stored_key, auth_message)
        if len(proof) != len(signature):
            raise SaslAuthenticationFailedError(f"Authentication failed during authentication due to invalid "
                                                f"credentials with SASL mechanism {self.mechanism}")
        client_key = _xor(proof, signature)
        if not hmac.compare_digest(_hash(self.mechanism, client_key), credential.stored_key) or not self._known:
            raise SaslAuthenticationFailedError(f"Authentication failed during authentication due to invalid "
                                                f"credentials with SASL mechanism {self.mechanism}")
        self._state = "done"
        self.complete = True
        return f"v={_b64(_hmac(self.mechanism, credential.server_key, auth_message))}".encode()


class ScramClient:
    """The client's side of one SCRAM exchange: ``client_first()``, ``client_final(server_first)``,
    ``verify_server_final(server_final)`` (SaslAuthenticationFailedError when the server does not
    prove it knows the credential)."""

    def __init__(self, mechanism: str, user: str, password: str, nonce: str | None = None) -> None:
        _hash_name(mechanism)
        self.mechanism = mechanism
        self._user = user
        self._password = password
        self._nonce = nonce if nonce is not None else _nonce()
        self._client_first_bare = f"n={_encode_name(user)},r={self._nonce}"
        self._auth_message = b""
        self._server_key = b""

    def client_first(self) -> bytes:
        return f"n,,{self._client_first_bare}".encode()

    def client_final(self, server_first: bytes) -> bytes:
        text = server_first.decode("utf-8", errors="replace")
        attributes = dict(_attributes(text, "server-first message"))
        if "e" in attributes:
            raise SaslAuthenticationFailedError(f"SCRAM server error: {attributes['e']}")
        nonce, salt_text, iterations_text = attributes.get("r", ""), attributes.get("s", ""), attributes.get("i", "")
        if not nonce.startswith(self._nonce) or len(nonce) <= len(self._nonce):
            raise SaslAuthenticationFailedError("SCRAM server nonce does not extend the client nonce")
        if not iterations_text.isdigit() or int(iterations_text) < MIN_ITERATIONS:
            raise SaslAuthenticationFailedError(f"SCRAM iteration count {iterations_text!r} is too low")
        salt = _unb64(salt_text, "SCRAM salt")
        iterations = int(iterations_text)
        salted = salted_password(self.mechanism, self._password, salt, iterations)
        credential = credential_from_salted(self.mechanism, salted, salt, iterations)
        without_proof = f"c=biws,r={nonce}"
        self._auth_message = f"{self._client_first_bare},{text},{without_proof}".encode()
        client_key = _hmac(self.mechanism, salted, b"Client Key")
        signature = _hmac(self.mechanism, credential.stored_key, self._auth_message)
        self._server_key = credential.server_key
        return f"{without_proof},p={_b64(_xor(client_key, signature))}".encode()

    def verify_server_final(self, server_final: bytes) -> None:
        text = server_final.decode("utf-8", errors="replace")
        attributes = dict(_attributes(text, "server-final message"))
        if "e" in attributes:
            raise SaslAuthenticationFailedError(f"SCRAM server error: {attributes['e']}")
        expected = _hmac(self.mechanism, self._server_key, self._auth_message)
        if not hmac.compare_digest(_unb64(attributes.get("v", ""), "SCRAM server signature"), expected):
            raise SaslAuthenticationFailedError("SCRAM server signature is wrong")


def find_user_credential(credentials: dict[str, str], password: str) -> str | None:
    """The mechanism whose stored credential (of ``credentials``, a user's entity config) matches
    ``password`` (SCRAM-SHA-512 first), or None: PLAIN and HTTP Basic verification."""
    for mechanism in ("SCRAM-SHA-512", "SCRAM-SHA-256"):
        text = credentials.get(mechanism)
        if text is None:
            continue
        try:
            credential = ScramCredential.from_text(text)
        except InvalidConfigurationError:
            continue
        if verify_password(mechanism, credential, password):
            return mechanism
    return None
