"""Admin clients: :class:`KafkaAdminClient` (kafka-python's API, blocking) and
:class:`AIOKafkaAdminClient` (asyncio), both thin front ends over one
:class:`~kafkalite.client.admin_core.AdminCore` (:mod:`.admin_core`, which holds the calls).

Any broker serves admin calls (the broker forwards elections to the controller), so a call
goes to a reachable broker, the next one being tried when a broker cannot be reached.

Results are shaped like kafka-python 3's where practical:

* ``create_topics`` / ``delete_topics`` / ``create_partitions`` → ``{"topics": [{"name",
  "error_code", "error_message", ...}]}``;
* ``list_topics`` → names; ``describe_topics`` → ``[{"name", "error_code", "is_internal",
  "topic_id", "partitions": [{"partition_index", "leader_id", "leader_epoch", "replica_nodes",
  "isr_nodes", "offline_replicas", "error_code"}]}]``;
* ``describe_cluster`` → ``{"cluster_id", "controller_id", "brokers": [{"broker_id", "host",
  "port", "rack"}]}``;
* ``describe_configs`` → ``{"topic"|"broker": {name: {config: {"value", "config_source",
  "is_default", "read_only"}}}}``; ``alter_configs`` → ``{"topic"|"broker": {name: "OK"}}``;
* ``list_offsets({tp: timestamp})`` → ``{tp: OffsetAndTimestamp}``; ``elect_leaders`` →
  ``{TopicPartition: result name}``;
* ``delete_records({tp: offset or RecordsToDelete(offset)}, timeout_ms=None,
  partition_leader_id=None)`` (KIP-107; offset -1: the high watermark) → ``{tp:
  {"partition_index", "low_watermark", "error_code", "error_message", "error"}}``, each
  partition asked of its leader (again after a leader move, until ``timeout_ms``); the low
  watermark is the partition's new log start offset on every replica of the ISR.

Consumer groups (each call goes to the group's coordinator, found with FindCoordinator and
found again when it moves; ListGroups goes to *every* broker, since each answers only for the
groups it coordinates):

* ``list_consumer_groups()`` → ``[(group_id, protocol_type)]`` (kafka-python's shape), sorted;
* ``describe_consumer_groups(group_ids)`` → ``[GroupInformation]`` (kafka-python's fields
  ``error_code, group, state, protocol_type, protocol, members, authorized_operations`` plus
  ``generation_id``, ``leader`` and ``coordinator``); each member is a ``MemberInformation``
  whose ``member_metadata`` / ``member_assignment`` are decoded
  :class:`~kafkalite.client.assignors.Subscription` / ``Assignment`` values for consumer groups.
  A group that does not exist is described with state ``Dead`` and no members, as in Kafka;
* ``list_consumer_group_offsets(group_id, partitions=None)`` → ``{TopicPartition:
  OffsetAndMetadata}`` (every stored offset, or -1 entries for requested partitions without one);
* ``alter_consumer_group_offsets(group_id, offsets)`` commits offsets for an inactive group;
* ``delete_consumer_groups(group_ids)`` → ``[(group_id, None | error)]`` (NON_EMPTY_GROUP,
  GROUP_ID_NOT_FOUND... as instances, never raised);
* ``consumer_group_lag(group_id, partitions=None)`` → ``{TopicPartition: PartitionLag(committed,
  log_end_offset, lag)}`` for every partition with a committed offset plus ``partitions``: log
  end = the high watermark, lag = high watermark − committed (None without a committed offset).

Errors: with ``raise_errors=True`` (the default, as in kafka-python) the first per-item error is
raised as the named kafkalite error — TopicAlreadyExistsError, UnknownTopicOrPartitionError,
InvalidPartitionsError, InvalidReplicationFactorError, InvalidConfigurationError... — after the
whole request was applied for the other items; with ``raise_errors=False`` the codes are
returned in the result.

Concurrency: the core lives on one event loop; KafkaAdminClient hops onto its private loop
thread (:mod:`kafkalite.client._loop`) from the caller's thread, AIOKafkaAdminClient runs on the
caller's loop.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from kafkalite import protocol
from kafkalite.client import admin_acls
from kafkalite.client._loop import LoopThread
from kafkalite.client.admin_core import AdminCore, GroupInformation, MemberInformation, PartitionLag
from kafkalite.client.types import (
    ConfigResource,
    NewPartitions,
    OffsetAndMetadata,
    OffsetAndTimestamp,
    RecordsToDelete,
    TopicPartition,
)
from kafkalite.errors import BrokerResponseError, ConfigError, KafkaliteError
from kafkalite.security.acl import AclBinding, AclBindingFilter

_ISOLATION = {"read_uncommitted": 0, "read_committed": 1, 0: 0, 1: 1}


class KafkaAdminClient:
    """kafka-python's KafkaAdminClient on kafkalite (see the module docstring)."""

    def __init__(self, **options: Any) -> None:
        self.config = dict(options)
        self._loop = LoopThread("kafkalite-admin")
        try:
            self._core = AdminCore(options)
        except BaseException:
            self._loop.stop()
            raise
        self._finalizer = weakref.finalize(self, _stop_loop, self._loop)
        self._closed = False

    def create_topics(self, new_topics: Any, timeout_ms: int | None = None, validate_only: bool = False,
                      raise_errors: bool = True) -> dict[str, Any]:
        return self._loop.run(self._core.create_topics(new_topics, timeout_ms, validate_only, raise_errors))

    def delete_topics(self, topics: Sequence[str], timeout_ms: int | None = None,
                      raise_errors: bool = True) -> dict[str, Any]:
        return self._loop.run(self._core.delete_topics(topics, timeout_ms, raise_errors))

    def create_partitions(self, topic_partitions: dict[str, NewPartitions], timeout_ms: int | None = None,
                          validate_only: bool = False, raise_errors: bool = True) -> dict[str, Any]:
        return self._loop.run(self._core.create_partitions(topic_partitions, timeout_ms, validate_only, raise_errors))

    def list_topics(self) -> list[str]:
        return self._loop.run(self._core.list_topics())

    def describe_topics(self, topics: Sequence[str] | None = None) -> list[dict[str, Any]]:
        return self._loop.run(self._core.describe_topics(topics))

    def describe_cluster(self) -> dict[str, Any]:
        return self._loop.run(self._core.describe_cluster())

    def describe_configs(self, config_resources: Sequence[ConfigResource], raise_errors: bool = True) -> dict[str, Any]:
        return self._loop.run(self._core.describe_configs(config_resources, raise_errors))

    def describe_entity_configs(self) -> list[dict[str, Any]]:
        """Every users/clients config entity: [{entity_path, user, client_id, configs}]."""
        return self._loop.run(self._core.describe_entity_configs())

    def alter_entity_configs(self, user: str | None, client_id: str | None, set_configs: dict[str, str],
                             delete_configs: Sequence[str] = (), validate_only: bool = False) -> dict[str, str]:
        """Set/delete configs of the entity ``user`` and/or ``client_id`` (``<default>`` for the default);
        SCRAM keys take Kafka's stored credential text (see :func:`kafkalite.security.scram.new_credential`)."""
        return self._loop.run(self._core.alter_entity_configs(user, client_id, set_configs, delete_configs,
                                                              validate_only))

    def alter_configs(self, config_resources: Sequence[ConfigResource], validate_only: bool = False,
                      raise_errors: bool = True) -> dict[str, Any]:
        """Set the given configs; dynamic overrides not named are removed (AlterConfigs semantics)."""
        return self._loop.run(self._core.alter_configs(config_resources, validate_only, False, raise_errors))

    def incremental_alter_configs(self, config_resources: Sequence[ConfigResource], validate_only: bool = False,
                                  raise_errors: bool = True) -> dict[str, Any]:
        """Set or delete (value None, or ("DELETE", None)) only the named configs."""
        return self._loop.run(self._core.alter_configs(config_resources, validate_only, True, raise_errors))

    def elect_leaders(self, election_type: Any = "preferred", topic_partitions: Sequence[Any] | None = None,
                      raise_errors: bool = True) -> dict[TopicPartition, str]:
        if str(getattr(election_type, "name", election_type)).lower() not in ("preferred", "0"):
            raise ConfigError("only preferred leader election is supported")
        return self._loop.run(self._core.elect_leaders(topic_partitions, raise_errors))

    perform_leader_election = elect_leaders

    def alter_partition_reassignments(self, targets: dict[tuple[str, int], list[int]]
                                      ) -> dict[tuple[str, int], BrokerResponseError | None]:
        """Move replicas: ``{(topic, partition): [target brokers]}``; per partition None or the
        error that refused it. The controller carries the moves out in the background."""
        return self._loop.run(self._core.alter_partition_reassignments(targets))

    def list_partition_reassignments(self) -> list[dict[str, Any]]:
        """Reassignments in progress: topic, partition, target_replicas, replicas, adding, removing, isr."""
        return self._loop.run(self._core.list_partition_reassignments())

    def list_offsets(self, topic_partition_timestamps: dict[TopicPartition, int], timeout_ms: int | None = None,
                     isolation_level: str | int = "read_uncommitted") -> dict[TopicPartition, OffsetAndTimestamp]:
        """Offsets for timestamps, or for -2 (earliest), -1 (latest), -3 (max timestamp)."""
        return self._loop.run(self._core.list_offsets(topic_partition_timestamps, timeout_ms,
                                                      _ISOLATION[isolation_level]))

    def delete_records(self, records_to_delete: Mapping[TopicPartition, int | RecordsToDelete],
                       timeout_ms: int | None = None, partition_leader_id: int | None = None,
                       raise_errors: bool = True) -> dict[TopicPartition, dict[str, Any]]:
        """Delete each partition's records before its offset (-1: the high watermark); see the
        module docstring for the result."""
        return self._loop.run(self._core.delete_records(records_to_delete, timeout_ms, partition_leader_id,
                                                        raise_errors))

    def end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        answers = self.list_offsets(dict.fromkeys(partitions, protocol.LATEST_TIMESTAMP))
        return {tp: answer.offset for tp, answer in answers.items()}

    def beginning_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        answers = self.list_offsets(dict.fromkeys(partitions, protocol.EARLIEST_TIMESTAMP))
        return {tp: answer.offset for tp, answer in answers.items()}

    # -- consumer groups --
    def list_consumer_groups(self, broker_ids: Sequence[int] | None = None,
                             states: Sequence[str] | None = None) -> list[tuple[str, str]]:
        """``[(group_id, protocol_type)]`` of every group, asked of every broker."""
        return self._loop.run(self._core.list_consumer_groups(broker_ids, states))

    def describe_consumer_groups(self, group_ids: Sequence[str], group_coordinator_id: int | None = None,
                                 include_authorized_operations: bool = False) -> list[GroupInformation]:
        return self._loop.run(self._core.describe_consumer_groups(group_ids))

    def list_consumer_group_offsets(self, group_id: str, group_coordinator_id: int | None = None,
                                    partitions: Sequence[TopicPartition] | None = None
                                    ) -> dict[TopicPartition, OffsetAndMetadata]:
        return self._loop.run(self._core.list_consumer_group_offsets(group_id, partitions))

    def alter_consumer_group_offsets(self, group_id: str, offsets: dict[TopicPartition, Any]) -> None:
        self._loop.run(self._core.alter_consumer_group_offsets(group_id, offsets))

    def delete_consumer_groups(self, group_ids: Sequence[str], group_coordinator_id: int | None = None
                               ) -> list[tuple[str, BrokerResponseError | None]]:
        return self._loop.run(self._core.delete_consumer_groups(group_ids))

    def consumer_group_lag(self, group_id: str, partitions: Sequence[TopicPartition] | None = None,
                           isolation_level: str | int = "read_uncommitted") -> dict[TopicPartition, PartitionLag]:
        """High watermark (read_committed: last stable offset) − committed offset per partition
        (committed ones, plus ``partitions``)."""
        return self._loop.run(self._core.consumer_group_lag(group_id, partitions, _ISOLATION[isolation_level]))

    def create_acls(self, acls: Sequence[AclBinding]) -> dict[str, list[Any]]:
        """Add ACLs → ``{"succeeded": [acl], "failed": [(acl, error)]}`` (see :mod:`.admin_acls`)."""
        return self._loop.run(admin_acls.create_acls(self._core._call, acls))

    def describe_acls(self, acl_filter: AclBindingFilter) -> tuple[list[AclBinding], None]:
        """The ACLs ``acl_filter`` matches → ``([acl], None)``."""
        return self._loop.run(admin_acls.describe_acls(self._core._call, acl_filter))

    def delete_acls(self, acl_filters: Sequence[AclBindingFilter]) -> list[Any]:
        """Remove the ACLs each filter matches → ``[(filter, [(acl, None)], error or None)]``."""
        return self._loop.run(admin_acls.delete_acls(self._core._call, acl_filters))

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._loop.run(self._core.close())
        finally:
            self._finalizer()

    def __enter__(self) -> KafkaAdminClient:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()


def _stop_loop(loop: LoopThread) -> None:
    loop.stop()


class AIOKafkaAdminClient:
    """The same admin calls as coroutines (for code that already runs an event loop)."""

    def __init__(self, **options: Any) -> None:
        self._core = AdminCore(options)

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        await self._core.close()

    async def create_topics(self, new_topics: Any, timeout_ms: int | None = None, validate_only: bool = False,
                            raise_errors: bool = True) -> dict[str, Any]:
        return await self._core.create_topics(new_topics, timeout_ms, validate_only, raise_errors)

    async def delete_topics(self, topics: Sequence[str], timeout_ms: int | None = None,
                            raise_errors: bool = True) -> dict[str, Any]:
        return await self._core.delete_topics(topics, timeout_ms, raise_errors)

    async def create_partitions(self, topic_partitions: dict[str, NewPartitions], timeout_ms: int | None = None,
                                validate_only: bool = False, raise_errors: bool = True) -> dict[str, Any]:
        return await self._core.create_partitions(topic_partitions, timeout_ms, validate_only, raise_errors)

    async def list_topics(self) -> list[str]:
        return await self._core.list_topics()

    async def describe_topics(self, topics: Sequence[str] | None = None) -> list[dict[str, Any]]:
        return await self._core.describe_topics(topics)

    async def describe_cluster(self) -> dict[str, Any]:
        return await self._core.describe_cluster()

    async def describe_configs(self, config_resources: Sequence[ConfigResource],
                               raise_errors: bool = True) -> dict[str, Any]:
        return await self._core.describe_configs(config_resources, raise_errors)

    async def describe_entity_configs(self) -> list[dict[str, Any]]:
        return await self._core.describe_entity_configs()

    async def alter_entity_configs(self, user: str | None, client_id: str | None, set_configs: dict[str, str],
                                   delete_configs: Sequence[str] = (), validate_only: bool = False) -> dict[str, str]:
        return await self._core.alter_entity_configs(user, client_id, set_configs, delete_configs, validate_only)

    async def alter_configs(self, config_resources: Sequence[ConfigResource], validate_only: bool = False,
                            raise_errors: bool = True) -> dict[str, Any]:
        return await self._core.alter_configs(config_resources, validate_only, False, raise_errors)

    async def incremental_alter_configs(self, config_resources: Sequence[ConfigResource], validate_only: bool = False,
                                        raise_errors: bool = True) -> dict[str, Any]:
        return await self._core.alter_configs(config_resources, validate_only, True, raise_errors)

    async def elect_leaders(self, election_type: Any = "preferred", topic_partitions: Sequence[Any] | None = None,
                            raise_errors: bool = True) -> dict[TopicPartition, str]:
        return await self._core.elect_leaders(topic_partitions, raise_errors)

    async def alter_partition_reassignments(self, targets: dict[tuple[str, int], list[int]]
                                            ) -> dict[tuple[str, int], BrokerResponseError | None]:
        return await self._core.alter_partition_reassignments(targets)

    async def list_partition_reassignments(self) -> list[dict[str, Any]]:
        return await self._core.list_partition_reassignments()

    async def list_offsets(self, topic_partition_timestamps: dict[TopicPartition, int], timeout_ms: int | None = None,
                           isolation_level: str | int = "read_uncommitted") -> dict[TopicPartition, OffsetAndTimestamp]:
        return await self._core.list_offsets(topic_partition_timestamps, timeout_ms, _ISOLATION[isolation_level])

    async def delete_records(self, records_to_delete: Mapping[TopicPartition, int | RecordsToDelete],
                             timeout_ms: int | None = None, partition_leader_id: int | None = None,
                             raise_errors: bool = True) -> dict[TopicPartition, dict[str, Any]]:
        return await self._core.delete_records(records_to_delete, timeout_ms, partition_leader_id, raise_errors)

    async def list_consumer_groups(self, broker_ids: Sequence[int] | None = None,
                                   states: Sequence[str] | None = None) -> list[tuple[str, str]]:
        return await self._core.list_consumer_groups(broker_ids, states)

    async def describe_consumer_groups(self, group_ids: Sequence[str], group_coordinator_id: int | None = None,
                                       include_authorized_operations: bool = False) -> list[GroupInformation]:
        return await self._core.describe_consumer_groups(group_ids)

    async def list_consumer_group_offsets(self, group_id: str, group_coordinator_id: int | None = None,
                                          partitions: Sequence[TopicPartition] | None = None
                                          ) -> dict[TopicPartition, OffsetAndMetadata]:
        return await self._core.list_consumer_group_offsets(group_id, partitions)

    async def alter_consumer_group_offsets(self, group_id: str, offsets: dict[TopicPartition, Any]) -> None:
        await self._core.alter_consumer_group_offsets(group_id, offsets)

    async def delete_consumer_groups(self, group_ids: Sequence[str], group_coordinator_id: int | None = None
                                     ) -> list[tuple[str, BrokerResponseError | None]]:
        return await self._core.delete_consumer_groups(group_ids)

    async def consumer_group_lag(self, group_id: str, partitions: Sequence[TopicPartition] | None = None,
                                 isolation_level: str | int = "read_uncommitted") -> dict[TopicPartition, PartitionLag]:
        return await self._core.consumer_group_lag(group_id, partitions, _ISOLATION[isolation_level])

    async def create_acls(self, acls: Sequence[AclBinding]) -> dict[str, list[Any]]:
        return await admin_acls.create_acls(self._core._call, acls)

    async def describe_acls(self, acl_filter: AclBindingFilter) -> tuple[list[AclBinding], None]:
        return await admin_acls.describe_acls(self._core._call, acl_filter)

    async def delete_acls(self, acl_filters: Sequence[AclBindingFilter]) -> list[Any]:
        return await admin_acls.delete_acls(self._core._call, acl_filters)


__all__ = ["AIOKafkaAdminClient", "AdminCore", "GroupInformation", "KafkaAdminClient", "KafkaliteError",
           "MemberInformation", "PartitionLag"]
