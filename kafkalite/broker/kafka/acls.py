"""CreateAcls, DescribeAcls and DeleteAcls over the Kafka protocol, served by the broker's
:class:`~kafkalite.broker.authorizer.Authorizer` (who may call them is checked before, like any
request: Alter on the Cluster to create or delete, Describe to list).

A broker without an authorizer answers SECURITY_DISABLED (54), as Kafka does. A creation or a
filter that names an unknown or ANY type where a concrete one is needed is answered
INVALID_REQUEST on its own item; the others still apply.

Concurrency: event-loop only, like every handler.
"""

from __future__ import annotations

from typing import Any

from kafkalite.broker.authorizer import Authorizer
from kafkalite.broker.kafka.context import ApiHandler, KafkaAnswer, KafkaRequestContext
from kafkalite.errors import BrokerResponseError, SecurityDisabledError
from kafkalite.security.acl import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    Operation,
    PatternType,
    Permission,
    ResourcePattern,
    ResourceType,
)

DESCRIBE_ACLS, CREATE_ACLS, DELETE_ACLS = 29, 30, 31


def _authorizer(context: KafkaRequestContext) -> Authorizer:
    authorizer = context.services.authorizer
    if authorizer is None:
        raise SecurityDisabledError("no authorizer is configured on this broker (authorizer.class.name)")
    return authorizer


def binding_of(item: Any) -> AclBinding:
    """The ACL of a CreateAcls creation (INVALID_REQUEST when a code is not a concrete one)."""
    return AclBinding(
        ResourcePattern(ResourceType.from_code(int(item.resource_type)), item.resource_name,
                        PatternType.from_code(int(item.resource_pattern_type))),
        AccessControlEntry(item.principal, item.host, Operation.from_code(int(item.operation)),
                           Permission.from_code(int(item.permission_type))))


def filter_of(item: Any) -> AclBindingFilter:
    """The filter of a DescribeAcls request or a DeleteAcls filter."""
    return AclBindingFilter(ResourceType.from_code(int(item.resource_type_filter)), item.resource_name_filter,
                            PatternType.from_code(int(item.pattern_type_filter)), item.principal_filter,
                            item.host_filter, Operation.from_code(int(item.operation)),
                            Permission.from_code(int(item.permission_type)))


def _error(exc: BrokerResponseError) -> dict[str, Any]:
    return {"error_code": exc.errno, "error_message": str(exc)}


async def create_acls(context: KafkaRequestContext, request: Any) -> KafkaAnswer:
    authorizer = _authorizer(context)
    results: list[dict[str, Any]] = []
    for item in request.creations:
        try:
            await authorizer.create_acls([binding_of(item)])
            results.append({"error_code": 0, "error_message": None})
        except BrokerResponseError as exc:
            results.append(_error(exc))
    return {"throttle_time": 0, "results": results}


async def describe_acls(context: KafkaRequestContext, request: Any) -> KafkaAnswer:
    bindings = _authorizer(context).describe_acls(filter_of(request))
    resources: dict[ResourcePattern, list[dict[str, Any]]] = {}
    for binding in bindings:
        resources.setdefault(binding.pattern, []).append({
            "principal": binding.entry.principal, "host": binding.entry.host,
            "operation": binding.entry.operation.code, "permission_type": binding.entry.permission.code})
    return {"throttle_time": 0, "error_code": 0, "error_message": None, "resources": [
        {"resource_type": pattern.resource_type.code, "resource_name": pattern.name,
         "pattern_type": pattern.pattern_type.code, "acls": acls} for pattern, acls in resources.items()]}


async def delete_acls(context: KafkaRequestContext, request: Any) -> KafkaAnswer:
    authorizer = _authorizer(context)
    results: list[dict[str, Any]] = []
    for item in request.filters:
        try:
            deleted = await authorizer.delete_acls(filter_of(item))
        except BrokerResponseError as exc:
            results.append({**_error(exc), "matching_acls": []})
            continue
        results.append({"error_code": 0, "error_message": None, "matching_acls": [{
            "error_code": 0, "error_message": None, "resource_type": binding.pattern.resource_type.code,
            "resource_name": binding.pattern.name, "pattern_type": binding.pattern.pattern_type.code,
            "principal": binding.entry.principal, "host": binding.entry.host,
            "operation": binding.entry.operation.code, "permission_type": binding.entry.permission.code}
            for binding in deleted]})
    return {"throttle_time": 0, "filter_results": results}


HANDLERS: tuple[ApiHandler, ...] = (
    ApiHandler(DESCRIBE_ACLS, 1, 3, describe_acls),
    ApiHandler(CREATE_ACLS, 1, 3, create_acls),
    ApiHandler(DELETE_ACLS, 1, 3, delete_acls),
)
