"""Names of the ``users`` and ``clients`` config entities in ZooKeeper, as Kafka writes them.

User principals and client ids may hold any character; Kafka stores them URL-encoded
(``Sanitizer``) so that one name is one znode. ``<default>`` names the default entity of a type.

Concurrency: pure functions.
"""

from __future__ import annotations

import urllib.parse

#: Name of the default entity of every type (``/config/users/<default>``, ``/config/brokers/<default>``).
DEFAULT_ENTITY = "<default>"


def sanitize_entity_name(name: str) -> str:
    """Kafka's ``Sanitizer.sanitize`` for user and client-id znode names: URL encoding where only
    letters, digits, ``.``, ``-`` and ``_`` stay as they are (``User:CN=a,O=b`` → ``User%3ACN%3Da%2CO%3Db``).
    ``<default>`` is kept as it is: it names the default entity."""
    if name == DEFAULT_ENTITY:
        return name
    return "".join(char if (char.isascii() and char.isalnum()) or char in ".-_" else
                   "".join(f"%{byte:02X}" for byte in char.encode("utf-8")) for char in name)


def desanitize_entity_name(name: str) -> str:
    """The inverse of :func:`sanitize_entity_name`."""
    return urllib.parse.unquote(name, errors="strict")


def user_client_entity_path(user: str | None, client_id: str | None) -> str:
    """The path (relative to ``/config``) of a quota / credential entity: ``users/<u>``,
    ``clients/<c>`` or ``users/<u>/clients/<c>``; names are raw (sanitized here), ``<default>``
    for the default entity."""
    if user is None and client_id is None:
        raise ValueError("a users/clients entity needs a user, a client id, or both")
    parts = []
    if user is not None:
        parts.append(f"users/{_entity_name(user)}")
    if client_id is not None:
        parts.append(f"clients/{_entity_name(client_id)}")
    return "/".join(parts)


def _entity_name(name: str) -> str:
    if not isinstance(name, str) or not name:
        raise ValueError("a user or client id must be a non-empty string")
    return sanitize_entity_name(name)
