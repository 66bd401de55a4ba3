"""The assignment glue of consumer groups: the rebalance listener, the choice of assignors and
the encoding of the metadata members exchange through the coordinator. No I/O.

* :class:`ConsumerRebalanceListener` — the listener a subscriber may pass: ``on_partitions_revoked``,
  ``on_partitions_assigned`` and ``on_partitions_lost`` (which defaults to revoked, as in Kafka's
  Java client). Methods may be plain functions or coroutines (the asyncio consumer awaits them).
* :func:`resolve_assignors` — ``partition_assignment_strategy`` given as assignor classes,
  instances, names (``range``, ``roundrobin``, ``sticky``, ``cooperative-sticky``), Java class
  names or one comma-separated string; :func:`rebalance_protocol` — COOPERATIVE only when every
  configured assignor is cooperative, else EAGER (Kafka's rule: the default
  ``[range, cooperative-sticky]`` therefore rebalances eagerly, and a group moves to the
  cooperative protocol once ``range`` is dropped from every member).
* Protocol metadata and assignments travel as compact, key-sorted JSON
  (:meth:`Subscription.to_json` / :meth:`Assignment.to_json`), base64 in the request bodies:
  :func:`encode_json`, :func:`decode_subscription`, :func:`decode_assignment`. The same value
  always gives the same bytes, so a restarted static member sends the same metadata as before.

The membership that uses them is :mod:`kafkalite.client.group`; the admin client decodes
described members with the same functions.

Concurrency: pure functions and a stateless listener base class, safe from any thread.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping, Sequence
from typing import Any

from kafkalite.client.assignors import (
    ASSIGNORS,
    COOPERATIVE,
    EAGER,
    Assignment,
    Assignor,
    CooperativeStickyAssignor,
    RangeAssignor,
    Subscription,
    assignor_for,
)
from kafkalite.client.types import TopicPartition
from kafkalite.errors import ConfigError, KafkaliteError

# the protocol type of consumer groups (other kinds of group, e.g. Connect's, name their own)
PROTOCOL_TYPE = "consumer"
DEFAULT_ASSIGNORS: tuple[type[Assignor], ...] = (RangeAssignor, CooperativeStickyAssignor)
_JAVA_NAMES = {
    "org.apache.kafka.clients.consumer.RangeAssignor": "range",
    "org.apache.kafka.clients.consumer.RoundRobinAssignor": "roundrobin",
    "org.apache.kafka.clients.consumer.StickyAssignor": "sticky",
    "org.apache.kafka.clients.consumer.CooperativeStickyAssignor": "cooperative-sticky",
}


# --- the listener ---------------------------------------------------------------------------------


class ConsumerRebalanceListener:
    """Callbacks around a group rebalance (subclass it and override what you need).

    ``on_partitions_revoked(revoked)`` runs before partitions are taken away (commit their
    offsets there); ``on_partitions_assigned(assigned)`` after new ones were added (seek there);
    ``on_partitions_lost(lost)`` when the member found out it is no longer in the generation
    that owned them (another member may already read them; do not commit) — by default it calls
    ``on_partitions_revoked``. Methods may be coroutines with the asyncio consumer.
    """

    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> Any:
        return None

    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> Any:
        return None

    def on_partitions_lost(self, lost: set[TopicPartition]) -> Any:
        return self.on_partitions_revoked(lost)


# --- assignors ------------------------------------------------------------------------------------


def resolve_assignors(strategy: Any) -> list[Assignor]:
    """The assignor instances for ``partition_assignment_strategy`` (see the module docstring)."""
    if strategy is None:
        items: list[Any] = list(DEFAULT_ASSIGNORS)
    elif isinstance(strategy, str):
        items = [part.strip() for part in strategy.split(",") if part.strip()]
    elif isinstance(strategy, (list, tuple)):
        items = []
        for entry in strategy:
            if isinstance(entry, str):
                items.extend(part.strip() for part in entry.split(",") if part.strip())
            else:
                items.append(entry)
    else:
        items = [strategy]
    resolved: list[Assignor] = []
    for item in items:
        if isinstance(item, Assignor):
            assignor = item
        elif isinstance(item, type) and issubclass(item, Assignor):
            assignor = item()
        elif isinstance(item, str):
            assignor = assignor_for(_JAVA_NAMES.get(item, item).lower())
        elif isinstance(name := getattr(item, "name", None), str) and name in ASSIGNORS:
            assignor = assignor_for(name)
        else:
            raise ConfigError(f"partition_assignment_strategy entries are assignor classes, instances or names "
                              f"({', '.join(sorted(ASSIGNORS))}), got {item!r}")
        if any(existing.name == assignor.name for existing in resolved):
            continue
        resolved.append(assignor)
    if not resolved:
        raise ConfigError("partition_assignment_strategy names no assignor")
    return resolved


def rebalance_protocol(assignors: Sequence[Assignor]) -> str:
    """COOPERATIVE when every assignor supports it, else EAGER (Kafka's rule)."""
    return COOPERATIVE if all(assignor.protocol == COOPERATIVE for assignor in assignors) else EAGER


def encode_json(value: Mapping[str, Any]) -> str:
    """Compact, key-sorted JSON, base64: the same value always gives the same bytes."""
    raw = json.dumps(value, separators=(",", ":"), sort_keys=True).encode("utf-8")
    return base64.b64encode(raw).decode("ascii")


def decode_json(value: Any) -> Any:
    """Inverse of :func:`encode_json`; None for empty or unreadable data."""
    if not value:
        return None
    try:
        return json.loads(base64.b64decode(str(value), validate=True))
    except (binascii.Error, ValueError, UnicodeDecodeError):
        return None


def decode_subscription(value: Any) -> Subscription | None:
    data = decode_json(value)
    if data is None:
        return None
    try:
        return Subscription.from_json(data)
    except KafkaliteError:
        return None


def decode_assignment(value: Any) -> Assignment | None:
    data = decode_json(value)
    if data is None:
        return None
    try:
        return Assignment.from_json(data)
    except KafkaliteError:
        return None
