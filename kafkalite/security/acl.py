"""Kafka's ACL model and its authorizer's decision rules, with no I/O.

An ACL (Kafka's ``AclBinding``) says: principal P is Allowed/Denied operation O from host H on
the resources a :class:`ResourcePattern` names. A pattern is LITERAL (one name, or ``*`` for
every resource of its type) or PREFIXED (every name starting with it). :class:`AclRules` holds
the ACLs a broker knows and decides like Kafka's ``AclAuthorizer``:

1. a super user is allowed everything;
2. when no ACL at all matches the resource, the answer is ``allow.everyone.if.no.acl.found``;
3. an ACL denying the operation (or All) to the principal (or ``User:*``) from the host (or
   ``*``) wins over everything else;
4. otherwise an ACL allowing the operation is needed, where Read, Write, Delete and Alter imply
   Describe, AlterConfigs implies DescribeConfigs, and All allows every operation.

This module also holds Kafka's ZooKeeper formats: the ACL list of one resource
(``{"version":1,"acls":[...]}``) and the change notifications, and the filters DescribeAcls and
DeleteAcls match ACLs with (``ANY``/``MATCH`` patterns, ``None`` for any name, principal or host).

Concurrency: values are immutable; an :class:`AclRules` is owned by one thread (the broker's
event loop) and changed only by :meth:`AclRules.set_acls`.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kafkalite.errors import InvalidRequestError
from kafkalite.security.principal import WILDCARD_PRINCIPAL, KafkaPrincipal

#: The name of the one Cluster resource.
CLUSTER_NAME = "kafka-cluster"
#: A LITERAL pattern with this name matches every resource of its type.
WILDCARD_RESOURCE = "*"
#: An ACL host matching every host.
WILDCARD_HOST = "*"


class _Named(enum.Enum):
    """An enum with Kafka's wire code and Kafka's name (``Topic``, ``Read``), parsed leniently."""

    def __new__(cls, code: int, kafka_name: str) -> _Named:
        member = object.__new__(cls)
        member._value_ = code
        member.kafka_name = kafka_name
        return member

    kafka_name: str

    @property
    def code(self) -> int:
        return int(self.value)

    def __str__(self) -> str:
        return self.kafka_name

    @classmethod
    def parse(cls, text: str) -> Any:
        """The member named ``text`` in Kafka's spelling, any case, ``_`` optional
        (``Read``, ``READ``, ``cluster_action``); INVALID_REQUEST otherwise."""
        wanted = text.replace("_", "").replace("-", "").lower()
        for member in cls:
            if member.kafka_name.lower() == wanted and member.kafka_name not in ("Unknown",):
                return member
        names = ", ".join(m.kafka_name for m in cls if m.kafka_name != "Unknown")
        raise InvalidRequestError(f"unknown {cls.__name__} {text!r}; expected one of {names}")

    @classmethod
    def from_code(cls, code: int) -> Any:
        try:
            member = cls(code)  # type: ignore[call-arg]
        except ValueError:
            raise InvalidRequestError(f"unknown {cls.__name__} code {code}") from None
        if member.kafka_name == "Unknown":
            raise InvalidRequestError(f"unknown {cls.__name__} code {code}")
        return member


class ResourceType(_Named):
    UNKNOWN = (0, "Unknown")
    ANY = (1, "Any")
    TOPIC = (2, "Topic")
    GROUP = (3, "Group")
    CLUSTER = (4, "Cluster")
    TRANSACTIONAL_ID = (5, "TransactionalId")


class PatternType(_Named):
    UNKNOWN = (0, "Unknown")
    ANY = (1, "Any")
    MATCH = (2, "Match")
    LITERAL = (3, "Literal")
    PREFIXED = (4, "Prefixed")


class Operation(_Named):
    UNKNOWN = (0, "Unknown")
    ANY = (1, "Any")
    ALL = (2, "All")
    READ = (3, "Read")
    WRITE = (4, "Write")
    CREATE = (5, "Create")
    DELETE = (6, "Delete")
    ALTER = (7, "Alter")
    DESCRIBE = (8, "Describe")
    CLUSTER_ACTION = (9, "ClusterAction")
    DESCRIBE_CONFIGS = (10, "DescribeConfigs")
    ALTER_CONFIGS = (11, "AlterConfigs")
    IDEMPOTENT_WRITE = (12, "IdempotentWrite")


class Permission(_Named):
    UNKNOWN = (0, "Unknown")
    ANY = (1, "Any")
    DENY = (2, "Deny")
    ALLOW = (3, "Allow")


#: The resource types an ACL may name, and the pattern types it may use.
CONCRETE_RESOURCE_TYPES = (ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER,
                           ResourceType.TRANSACTIONAL_ID)
CONCRETE_PATTERN_TYPES = (PatternType.LITERAL, PatternType.PREFIXED)

#: The operations an ALLOW of the key grants besides itself (Kafka's implied operations).
_IMPLIED_BY: dict[Operation, frozenset[Operation]] = {
    Operation.DESCRIBE: frozenset({Operation.DESCRIBE, Operation.READ, Operation.WRITE, Operation.DELETE,
                                   Operation.ALTER, Operation.ALL}),
    Operation.DESCRIBE_CONFIGS: frozenset({Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS, Operation.ALL}),
}


def allowing_operations(operation: Operation) -> frozenset[Operation]:
    """The ACL operations whose ALLOW grants ``operation``."""
    return _IMPLIED_BY.get(operation, frozenset({operation, Operation.ALL}))


@dataclass(frozen=True, slots=True)
class ResourcePattern:
    """Which resources an ACL covers: a type, a name (or ``*``) and LITERAL or PREFIXED."""

    resource_type: ResourceType
    name: str
    pattern_type: PatternType = PatternType.LITERAL

    def __post_init__(self) -> None:
        if self.resource_type not in CONCRETE_RESOURCE_TYPES:
            raise InvalidRequestError(f"an ACL needs a concrete resource type, not {self.resource_type}")
        if self.pattern_type not in CONCRETE_PATTERN_TYPES:
            raise InvalidRequestError(f"an ACL's pattern type is Literal or Prefixed, not {self.pattern_type}")
        if not self.name:
            raise InvalidRequestError("an ACL's resource name must not be empty")
        if self.resource_type is ResourceType.CLUSTER and self.name != CLUSTER_NAME:
            raise InvalidRequestError(f"the Cluster resource is named {CLUSTER_NAME!r}, not {self.name!r}")
        if "/" in self.name or self.name in (".", ".."):  # it names a znode
            raise InvalidRequestError(f"invalid resource name {self.name!r}")

    def matches(self, resource_type: ResourceType, name: str) -> bool:
        """Whether this pattern covers resource ``name`` of ``resource_type``."""
        if resource_type is not self.resource_type:
            return False
        if self.pattern_type is PatternType.PREFIXED:
            return name.startswith(self.name)
        return self.name == name or self.name == WILDCARD_RESOURCE

    def __str__(self) -> str:
        return f"ResourcePattern(resourceType={self.resource_type}, name={self.name}, " \
               f"patternType={str(self.pattern_type).upper()})"


@dataclass(frozen=True, slots=True)
class AccessControlEntry:
    """Who may (or may not) do what from where: ``User:alice`` Allow Read from ``*``."""

    principal: str
    host: str
    operation: Operation
    permission: Permission

    def __post_init__(self) -> None:
        KafkaPrincipal.parse(self.principal)
        if not self.host:
            raise InvalidRequestError("an ACL's host must be an address or *")
        if self.operation in (Operation.ANY, Operation.UNKNOWN):
            raise InvalidRequestError(f"an ACL needs a concrete operation, not {self.operation}")
        if self.permission not in (Permission.ALLOW, Permission.DENY):
            raise InvalidRequestError(f"an ACL's permission is Allow or Deny, not {self.permission}")

    def to_json(self) -> dict[str, str]:
        return {"principal": self.principal, "permissionType": str(self.permission),
                "operation": str(self.operation), "host": self.host}

    @classmethod
    def from_json(cls, document: Mapping[str, Any]) -> AccessControlEntry:
        try:
            return cls(str(document["principal"]), str(document["host"]),
                       Operation.parse(str(document["operation"])),
                       Permission.parse(str(document["permissionType"])))
        except KeyError as exc:
            raise InvalidRequestError(f"an ACL entry lacks {exc.args[0]!r}: {dict(document)}") from None


@dataclass(frozen=True, slots=True)
class AclBinding:
    """One ACL: a resource pattern and an entry."""

    pattern: ResourcePattern
    entry: AccessControlEntry

    def __str__(self) -> str:
        entry = self.entry
        return f"(principal={entry.principal}, host={entry.host}, operation={entry.operation}, " \
               f"permissionType={entry.permission}) on {self.pattern}"


# --- ZooKeeper formats ----------------------------------------------------------------------------

def encode_acls(entries: Iterable[AccessControlEntry]) -> bytes:
    """Kafka's znode value of one resource's ACLs (sorted, so equal sets encode alike)."""
    documents = sorted((entry.to_json() for entry in set(entries)),
                       key=lambda d: (d["principal"], d["permissionType"], d["operation"], d["host"]))
    return json.dumps({"version": 1, "acls": documents}, separators=(",", ":")).encode()


def decode_acls(data: bytes | None) -> frozenset[AccessControlEntry]:
    """The ACLs of a resource znode's value (empty for no data); INVALID_REQUEST when malformed."""
    if not data:
        return frozenset()
    try:
        document = json.loads(data)
        entries = document["acls"]
        if not isinstance(entries, list):
            raise TypeError("acls is not a list")
        return frozenset(AccessControlEntry.from_json(entry) for entry in entries)
    except (ValueError, KeyError, TypeError) as exc:
        raise InvalidRequestError(f"malformed ACL znode value: {exc}") from None


def encode_change(pattern: ResourcePattern) -> bytes:
    """The data of a change notification: Kafka's ``Topic:name`` for a literal pattern (under
    ``/kafka-acl-changes``), its JSON for a prefixed one (under ``/kafka-acl-extended-changes``)."""
    if pattern.pattern_type is PatternType.LITERAL:
        return f"{pattern.resource_type}:{pattern.name}".encode()
    return json.dumps({"version": 1, "resourceType": str(pattern.resource_type), "name": pattern.name,
                       "patternType": str(pattern.pattern_type).upper()}, separators=(",", ":")).encode()


def decode_change(data: bytes) -> ResourcePattern:
    """The resource pattern a change notification names (either format); INVALID_REQUEST otherwise."""
    text = data.decode("utf-8", "replace")
    if text.startswith("{"):
        try:
            document = json.loads(text)
            return ResourcePattern(ResourceType.parse(str(document["resourceType"])), str(document["name"]),
                                   PatternType.parse(str(document["patternType"])))
        except (ValueError, KeyError) as exc:
            raise InvalidRequestError(f"malformed ACL change notification {text!r}: {exc}") from None
    resource_type, separator, name = text.partition(":")
    if not separator:
        raise InvalidRequestError(f"malformed ACL change notification {text!r}")
    return ResourcePattern(ResourceType.parse(resource_type), name, PatternType.LITERAL)


# --- filters (DescribeAcls, DeleteAcls) ------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """Which ACLs DescribeAcls lists and DeleteAcls removes (Kafka's ``AclBindingFilter``).

    ``None`` for a name, principal or host matches any; ResourceType/Operation/Permission ANY
    match any; PatternType ANY matches both pattern types with the name taken literally, MATCH
    matches every pattern that would apply to the named resource (the literal name, the ``*``
    wildcard, and prefixes of it).
    """

    resource_type: ResourceType = ResourceType.ANY
    name: str | None = None
    pattern_type: PatternType = PatternType.LITERAL
    principal: str | None = None
    host: str | None = None
    operation: Operation = Operation.ANY
    permission: Permission = Permission.ANY

    def __post_init__(self) -> None:
        for value, what in ((self.resource_type, "resource type"), (self.pattern_type, "pattern type"),
                            (self.operation, "operation"), (self.permission, "permission")):
            if value.name == "UNKNOWN":
                raise InvalidRequestError(f"an ACL filter's {what} must not be Unknown")

    def matches(self, binding: AclBinding) -> bool:
        pattern, entry = binding.pattern, binding.entry
        if self.resource_type is not ResourceType.ANY and self.resource_type is not pattern.resource_type:
            return False
        if self.pattern_type is PatternType.MATCH:
            if self.name is not None and not pattern.matches(pattern.resource_type, self.name):
                return False
        else:
            if self.pattern_type is not PatternType.ANY and self.pattern_type is not pattern.pattern_type:
                return False
            if self.name is not None and self.name != pattern.name:
                return False
        return ((self.principal is None or self.principal == entry.principal)
                and (self.host is None or self.host == entry.host)
                and (self.operation is Operation.ANY or self.operation is entry.operation)
                and (self.permission is Permission.ANY or self.permission is entry.permission))


# --- the decision --------------------------------------------------------------------------------

class AclRules:
    """The ACLs a broker knows, by resource pattern, and Kafka's authorization decision over them."""

    def __init__(self, super_users: Iterable[str] = (), allow_everyone_if_no_acl_found: bool = False) -> None:
        self.super_users = frozenset(str(KafkaPrincipal.parse(user)) for user in super_users)
        self.allow_everyone_if_no_acl_found = allow_everyone_if_no_acl_found
        self._acls: dict[ResourcePattern, frozenset[AccessControlEntry]] = {}
        #: LITERAL and PREFIXED patterns by resource type (the prefixed ones scanned per decision)
        self._literal: dict[tuple[ResourceType, str], frozenset[AccessControlEntry]] = {}
        self._prefixed: dict[ResourceType, dict[str, frozenset[AccessControlEntry]]] = {}

    def set_acls(self, pattern: ResourcePattern, entries: Iterable[AccessControlEntry]) -> None:
        """Replace the ACLs of ``pattern`` (none removes it)."""
        frozen = frozenset(entries)
        if frozen:
            self._acls[pattern] = frozen
        else:
            self._acls.pop(pattern, None)
        if pattern.pattern_type is PatternType.LITERAL:
            key = (pattern.resource_type, pattern.name)
            if frozen:
                self._literal[key] = frozen
            else:
                self._literal.pop(key, None)
        else:
            by_prefix = self._prefixed.setdefault(pattern.resource_type, {})
            if frozen:
                by_prefix[pattern.name] = frozen
            else:
                by_prefix.pop(pattern.name, None)

    def acls(self, pattern: ResourcePattern) -> frozenset[AccessControlEntry]:
        return self._acls.get(pattern, frozenset())

    def patterns(self) -> list[ResourcePattern]:
        return list(self._acls)

    def bindings(self, binding_filter: AclBindingFilter | None = None) -> list[AclBinding]:
        """Every ACL (that ``binding_filter`` matches), in a stable order."""
        found = [AclBinding(pattern, entry) for pattern, entries in self._acls.items() for entry in entries]
        if binding_filter is not None:
            found = [binding for binding in found if binding_filter.matches(binding)]
        return sorted(found, key=lambda b: (b.pattern.resource_type.code, b.pattern.pattern_type.code,
                                            b.pattern.name, b.entry.principal, b.entry.host,
                                            b.entry.operation.code, b.entry.permission.code))

    def matching_entries(self, resource_type: ResourceType, name: str) -> list[AccessControlEntry]:
        """Every ACL entry whose pattern covers the resource."""
        found: list[AccessControlEntry] = []
        found.extend(self._literal.get((resource_type, name), ()))
        if name != WILDCARD_RESOURCE:
            found.extend(self._literal.get((resource_type, WILDCARD_RESOURCE), ()))
        for prefix, entries in self._prefixed.get(resource_type, {}).items():
            if name.startswith(prefix):
                found.extend(entries)
        return found

    def is_super_user(self, principal: KafkaPrincipal | str) -> bool:
        return str(principal) in self.super_users

    def authorize(self, principal: KafkaPrincipal | str, host: str, operation: Operation,
                  resource_type: ResourceType, name: str) -> bool:
        """Kafka's decision: may ``principal`` connecting from ``host`` do ``operation`` on the resource?"""
        principal_text = str(principal)
        if principal_text in self.super_users:
            return True
        entries = self.matching_entries(resource_type, name)
        if not entries:
            return self.allow_everyone_if_no_acl_found
        principals = (principal_text, str(WILDCARD_PRINCIPAL))
        hosts = (host, WILDCARD_HOST)
        applicable = [entry for entry in entries if entry.principal in principals and entry.host in hosts]
        for entry in applicable:
            if entry.permission is Permission.DENY and entry.operation in (operation, Operation.ALL):
                return False
        allowing = allowing_operations(operation)
        return any(entry.permission is Permission.ALLOW and entry.operation in allowing for entry in applicable)

    def authorize_any(self, principal: KafkaPrincipal | str, host: str, operation: Operation,
                      resource_type: ResourceType) -> bool:
        """Whether the principal may do ``operation`` on at least one resource of the type (Kafka's
        ``authorizeByResourceType``, used for IdempotentWrite implied by Write on some topic): an
        ALLOW for it on some pattern that no DENY of the principal on the ``*`` literal or on a
        covering prefix takes back."""
        principal_text = str(principal)
        if principal_text in self.super_users:
            return True
        principals = (principal_text, str(WILDCARD_PRINCIPAL))
        hosts = (host, WILDCARD_HOST)
        allowing = allowing_operations(operation)
        denied: list[ResourcePattern] = []
        allowed: list[ResourcePattern] = []
        for pattern, entries in self._acls.items():
            if pattern.resource_type is not resource_type:
                continue
            for entry in entries:
                if entry.principal not in principals or entry.host not in hosts:
                    continue
                if entry.permission is Permission.DENY and entry.operation in (operation, Operation.ALL):
                    denied.append(pattern)
                elif entry.permission is Permission.ALLOW and entry.operation in allowing:
                    allowed.append(pattern)
        return any(not any(deny.matches(resource_type, pattern.name) for deny in denied) for pattern in allowed)


def parse_super_users(text: str) -> list[str]:
    """``User:a;User:b`` → ``["User:a", "User:b"]`` (INVALID_REQUEST for a malformed principal)."""
    users = [part.strip() for part in text.split(";") if part.strip()]
    return [str(KafkaPrincipal.parse(user)) for user in users]


# --- JSON (the HTTP API's ACL bodies, shared by the broker and the admin client) ------------------

def binding_to_json(binding: AclBinding) -> dict[str, str]:
    """``{"resource_type": "Topic", "resource_name", "pattern_type": "Literal", "principal",
    "host", "operation": "Read", "permission_type": "Allow"}``."""
    return {"resource_type": str(binding.pattern.resource_type), "resource_name": binding.pattern.name,
            "pattern_type": str(binding.pattern.pattern_type), "principal": binding.entry.principal,
            "host": binding.entry.host, "operation": str(binding.entry.operation),
            "permission_type": str(binding.entry.permission)}


def _field(document: Mapping[str, Any], name: str, default: str | None = None) -> str | None:
    value = document.get(name, default)
    if value is not None and not isinstance(value, str):
        raise InvalidRequestError(f"{name} must be a string, got {value!r}")
    return value


def _required(document: Mapping[str, Any], name: str, default: str | None = None) -> str:
    value = _field(document, name, default)
    if value is None:
        raise InvalidRequestError(f"an ACL needs {name}")
    return value


def binding_from_json(document: Mapping[str, Any]) -> AclBinding:
    """The ACL of :func:`binding_to_json`'s shape (pattern type Literal and host ``*`` by default)."""
    if not isinstance(document, Mapping):
        raise InvalidRequestError(f"an ACL must be an object, got {document!r}")
    return AclBinding(
        ResourcePattern(ResourceType.parse(_required(document, "resource_type")),
                        _required(document, "resource_name"),
                        PatternType.parse(_required(document, "pattern_type", "Literal"))),
        AccessControlEntry(_required(document, "principal"), _required(document, "host", WILDCARD_HOST),
                           Operation.parse(_required(document, "operation")),
                           Permission.parse(_required(document, "permission_type"))))


def filter_to_json(binding_filter: AclBindingFilter) -> dict[str, str | None]:
    return {"resource_type": str(binding_filter.resource_type), "resource_name": binding_filter.name,
            "pattern_type": str(binding_filter.pattern_type), "principal": binding_filter.principal,
            "host": binding_filter.host, "operation": str(binding_filter.operation),
            "permission_type": str(binding_filter.permission)}


def filter_from_json(document: Mapping[str, Any]) -> AclBindingFilter:
    """A filter of :func:`filter_to_json`'s shape; absent fields match anything (pattern type ANY)."""
    if not isinstance(document, Mapping):
        raise InvalidRequestError(f"an ACL filter must be an object, got {document!r}")
    return AclBindingFilter(ResourceType.parse(_required(document, "resource_type", "Any")),
                            _field(document, "resource_name"),
                            PatternType.parse(_required(document, "pattern_type", "Any")),
                            _field(document, "principal"), _field(document, "host"),
                            Operation.parse(_required(document, "operation", "Any")),
                            Permission.parse(_required(document, "permission_type", "Any")))
