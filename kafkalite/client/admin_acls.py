"""The admin client's ACL calls (kafka-python's ``create_acls``, ``describe_acls`` and
``delete_acls``) over the broker's ``/v1/acls/*`` routes.

ACLs are :class:`~kafkalite.security.acl.AclBinding` values and filters
:class:`~kafkalite.security.acl.AclBindingFilter` (re-exported here). Results follow
kafka-python's shapes:

* ``create_acls(acls)`` → ``{"succeeded": [acl, ...], "failed": [(acl, error), ...]}``;
* ``describe_acls(acl_filter)`` → ``([acl, ...], None)`` (a refusal, e.g.
  CLUSTER_AUTHORIZATION_FAILED or SECURITY_DISABLED, is raised as the named error);
* ``delete_acls(acl_filters)`` → ``[(acl_filter, [(acl, None), ...], error or None), ...]``.

Concurrency: coroutines on the admin core's loop.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from kafkalite import protocol
from kafkalite.errors import BrokerResponseError
from kafkalite.security.acl import (
    AclBinding,
    AclBindingFilter,
    binding_from_json,
    binding_to_json,
    filter_to_json,
)

Call = Callable[[str, str, Any], Awaitable[Any]]
"""The admin core's ``_call(method, path, body)``."""


def _error(item: dict[str, Any]) -> BrokerResponseError | None:
    if not item.get("error_code"):
        return None
    return protocol.error_from_body(item, 200)


async def create_acls(call: Call, acls: Sequence[AclBinding]) -> dict[str, list[Any]]:
    answer = await call("POST", protocol.CREATE_ACLS, {"creations": [binding_to_json(acl) for acl in acls]})
    result: dict[str, list[Any]] = {"succeeded": [], "failed": []}
    for acl, item in zip(acls, answer["results"], strict=True):
        error = _error(item)
        if error is None:
            result["succeeded"].append(acl)
        else:
            result["failed"].append((acl, error))
    return result


async def describe_acls(call: Call, acl_filter: AclBindingFilter) -> tuple[list[AclBinding], None]:
    answer = await call("POST", protocol.DESCRIBE_ACLS, filter_to_json(acl_filter))
    return [binding_from_json(item) for item in answer["acls"]], None


async def delete_acls(call: Call, acl_filters: Sequence[AclBindingFilter]
                      ) -> list[tuple[AclBindingFilter, list[tuple[AclBinding, None]], BrokerResponseError | None]]:
    answer = await call("POST", protocol.DELETE_ACLS, {"filters": [filter_to_json(item) for item in acl_filters]})
    return [(acl_filter, [(binding_from_json(acl), None) for acl in item["matching_acls"]], _error(item))
            for acl_filter, item in zip(acl_filters, answer["filter_results"], strict=True)]


__all__ = ["AclBinding", "AclBindingFilter", "create_acls", "delete_acls", "describe_acls"]
