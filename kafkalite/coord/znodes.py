"""The kafkalite znode tree: paths and typed payloads.

This module owns the *shape* of everything kafkalite keeps in ZooKeeper (see ``zk/ZNODES.md``
for who writes and who watches each node). It is pure: no kazoo, no I/O, no clocks except where
a caller asks for "now". Every path below is relative to the cluster's chroot (for example
``localhost:2181/kafkalite``); the ZooKeeper client applies the chroot.

The JSON rules every payload follows (versions, evolution, errors) are in
:mod:`kafkalite.coord.znode_json`, which also holds the payload base class.

Thread-safety: the module is immutable after import; payload objects are frozen dataclasses.
Their list and dict fields are normalised copies and must be treated as read-only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from kafkalite import topics
from kafkalite.coord.entity_names import (
    DEFAULT_ENTITY,
    desanitize_entity_name,
    sanitize_entity_name,
    user_client_entity_path,
)
from kafkalite.coord.znode_json import (
    Fields,
    ZNodePayload,
    distinct_ids,
    integer_list,
    is_int,
    non_negative,
    now_ms,
    validate_broker_id,
    validate_partition,
)
from kafkalite.errors import ZNodeDataError

# --- paths ------------------------------------------------------------------------------------

CLUSTER_PATH = "/cluster"
CLUSTER_ID_PATH = "/cluster/id"
BROKERS_PATH = "/brokers"
BROKER_IDS_PATH = "/brokers/ids"
BROKER_TOPICS_PATH = "/brokers/topics"
CONTROLLER_PATH = "/controller"
CONTROLLER_EPOCH_PATH = "/controller_epoch"
ADMIN_PATH = "/admin"
DELETE_TOPICS_PATH = "/admin/delete_topics"
PREFERRED_REPLICA_ELECTION_PATH = "/admin/preferred_replica_election"
REASSIGN_PARTITIONS_PATH = "/admin/reassign_partitions"
CONFIG_PATH = "/config"
CONFIG_TOPICS_PATH = "/config/topics"
CONFIG_BROKERS_PATH = "/config/brokers"
CONFIG_CHANGES_PATH = "/config/changes"
CONFIG_USERS_PATH = "/config/users"
CONFIG_CLIENTS_PATH = "/config/clients"
CONFIG_CHANGE_PREFIX = "config_change_"
ISR_CHANGE_NOTIFICATION_PATH = "/isr_change_notification"
ISR_CHANGE_PREFIX = "isr_change_"
LATEST_PRODUCER_ID_BLOCK_PATH = "/latest_producer_id_block"
#: ACLs (Kafka's layout): literal patterns, prefixed patterns, and their change notifications.
ACL_PATH = "/kafka-acl"
ACL_PREFIXED_PATH = "/kafka-acl-extended/prefixed"
ACL_CHANGES_PATH = "/kafka-acl-changes"
ACL_EXTENDED_CHANGES_PATH = "/kafka-acl-extended-changes"
ACL_CHANGE_PREFIX = "acl_changes_"

#: Config entity types kafkalite stores under ``/config/<type>``.
CONFIG_ENTITY_TYPES: tuple[str, ...] = ("topics", "brokers", "users", "clients")
#: Name of the cluster-wide default broker config entity (``/config/brokers/<default>``).
DEFAULT_BROKER_ENTITY = DEFAULT_ENTITY

#: Persistent container znodes every broker creates (empty data) at start if missing, parents
#: first. ``/latest_producer_id_block`` starts empty: empty data means "no block handed out yet".
PERSISTENT_PATHS: tuple[str, ...] = (
    BROKER_IDS_PATH,
    BROKER_TOPICS_PATH,
    CONFIG_CHANGES_PATH,
    CONFIG_TOPICS_PATH,
    CONFIG_BROKERS_PATH,
    CONFIG_USERS_PATH,
    CONFIG_CLIENTS_PATH,
    DELETE_TOPICS_PATH,
    ISR_CHANGE_NOTIFICATION_PATH,
    LATEST_PRODUCER_ID_BLOCK_PATH,
)

#: Size of a producer id block handed to one broker (Kafka's value).
PRODUCER_ID_BLOCK_SIZE = 1000

_SEQUENCE_DIGITS = 10


def validate_topic_name(topic: str) -> str:
    """Return ``topic`` if it is a legal topic name (Kafka's rules), else raise InvalidTopicError.

    Legal: 1–249 characters from ``[A-Za-z0-9._-]``, and not ``.`` or ``..`` (the rules and
    messages of :mod:`kafkalite.topics`).
    """
    return topics.validate_topic_name(topic)


def broker_path(broker_id: int) -> str:
    """``/brokers/ids/<id>``: the broker's ephemeral registration."""
    return f"{BROKER_IDS_PATH}/{validate_broker_id(broker_id)}"


def topic_path(topic: str) -> str:
    """``/brokers/topics/<t>``: the topic's replica assignment."""
    return f"{BROKER_TOPICS_PATH}/{validate_topic_name(topic)}"


def topic_partitions_path(topic: str) -> str:
    """``/brokers/topics/<t>/partitions``: parent of the per-partition znodes."""
    return f"{topic_path(topic)}/partitions"


def partition_path(topic: str, partition: int) -> str:
    """``/brokers/topics/<t>/partitions/<p>``: parent of the partition's ``state`` znode."""
    return f"{topic_partitions_path(topic)}/{validate_partition(partition)}"


def partition_state_path(topic: str, partition: int) -> str:
    """``/brokers/topics/<t>/partitions/<p>/state``: leader, epoch and ISR of one partition."""
    return f"{partition_path(topic, partition)}/state"


def delete_topic_path(topic: str) -> str:
    """``/admin/delete_topics/<t>``: the (empty) marker asking the controller to delete ``t``."""
    return f"{DELETE_TOPICS_PATH}/{validate_topic_name(topic)}"


def topic_config_path(topic: str) -> str:
    """``/config/topics/<t>``: per-topic config overrides."""
    return f"{CONFIG_TOPICS_PATH}/{validate_topic_name(topic)}"


def broker_config_path(broker_id: int | None) -> str:
    """``/config/brokers/<id>``, or ``/config/brokers/<default>`` when ``broker_id`` is None."""
    name = DEFAULT_BROKER_ENTITY if broker_id is None else str(validate_broker_id(broker_id))
    return f"{CONFIG_BROKERS_PATH}/{name}"


def config_entity_path(entity_type: str, entity_name: str) -> str:
    """``/config/<type>/<name>`` of topics, brokers, users or clients (validated; names sanitized as Kafka)."""
    return f"{CONFIG_PATH}/{_validate_entity(entity_type, entity_name)}"


def validate_entity_path(entity_path: str) -> str:
    """Check a config entity path relative to ``/config``: ``topics/<t>``, ``brokers/<id>``,
    ``users/<u>``, ``clients/<c>`` or ``users/<u>/clients/<c>`` (names sanitized); returned as is."""
    parts = entity_path.split("/") if isinstance(entity_path, str) else []
    if len(parts) not in (2, 4) or (len(parts) == 4 and parts[0::2] != ["users", "clients"]):
        raise ValueError(f"entity_path must be '<type>/<name>' or 'users/<u>/clients/<c>', got {entity_path!r}")
    for entity_type, entity_name in zip(parts[0::2], parts[1::2], strict=True):
        _validate_entity(entity_type, entity_name)
    return entity_path


def config_change_prefix_path() -> str:
    """Path to pass to a *sequential* create of a config change notification."""
    return f"{CONFIG_CHANGES_PATH}/{CONFIG_CHANGE_PREFIX}"


def isr_change_prefix_path() -> str:
    """Path to pass to a *sequential* create of an ISR change notification."""
    return f"{ISR_CHANGE_NOTIFICATION_PATH}/{ISR_CHANGE_PREFIX}"


def acl_path(resource_type: str, name: str, prefixed: bool) -> str:
    """``/kafka-acl/<ResourceType>/<name>``, or ``/kafka-acl-extended/prefixed/...`` for a prefix."""
    if not name or "/" in name or name in (".", ".."):
        raise ZNodeDataError(f"invalid ACL resource name {name!r}")
    return f"{ACL_PREFIXED_PATH if prefixed else ACL_PATH}/{resource_type}/{name}"


def sequence_number(child_name: str, prefix: str) -> int:
    """The sequence number of a sequential child such as ``config_change_0000000007`` → 7.

    Raises CoordinationError when the name does not have the form ``<prefix><digits>``.
    """
    if not child_name.startswith(prefix) or not child_name[len(prefix):].isdigit():
        raise ZNodeDataError(
            f"znode name {child_name!r} is not a sequential node with prefix {prefix!r}"
        )
    return int(child_name[len(prefix):])


def sequence_child_name(prefix: str, number: int) -> str:
    """The child name ZooKeeper gives the ``number``-th sequential node (10 digits, padded)."""
    return f"{prefix}{number:0{_SEQUENCE_DIGITS}d}"


def broker_id_from_child(child_name: str) -> int:
    """Parse a child name of ``/brokers/ids`` into a broker id (CoordinationError if not one)."""
    if not child_name.isdigit():
        raise ZNodeDataError(f"{BROKER_IDS_PATH}/{child_name}: not a broker id")
    return int(child_name)


def _validate_entity(entity_type: str, entity_name: str) -> str:
    if entity_type == "topics":
        validate_topic_name(entity_name)
    elif entity_type == "brokers":
        if entity_name != DEFAULT_BROKER_ENTITY and not (
            entity_name.isdigit() and entity_name.isascii()
        ):
            raise ValueError(f"broker config entity must be an id or <default>, got {entity_name!r}")
    elif entity_type in ("users", "clients"):
        if not entity_name or sanitize_entity_name(desanitize_entity_name(entity_name)) != entity_name:
            raise ValueError(f"{entity_type} config entity name must be sanitized (URL-encoded) and non-empty, "
                             f"got {entity_name!r}")
    else:
        raise ValueError(f"unknown config entity type {entity_type!r} (expected one of "
                         f"{', '.join(CONFIG_ENTITY_TYPES)})")
    return f"{entity_type}/{entity_name}"


# --- payloads ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class ClusterId(ZNodePayload):
    """``/cluster/id``: the cluster's identity, written once by the first broker."""

    WHAT: ClassVar[str] = "cluster id"

    cluster_id: str

    def __post_init__(self) -> None:
        if not isinstance(self.cluster_id, str) or not self.cluster_id:
            raise ValueError(f"cluster id must be a non-empty string, got {self.cluster_id!r}")

    def _document(self) -> dict[str, Any]:
        return {"id": self.cluster_id}

    @classmethod
    def _parse(cls, fields: Fields) -> ClusterId:
        return cls(cluster_id=fields.string("id"))


@dataclass(frozen=True)
class BrokerRegistration(ZNodePayload):
    """``/brokers/ids/<id>`` (ephemeral): how to reach a live broker.

    The broker id is the znode's name, not part of the payload. The registration znode's
    ``czxid`` is the broker epoch.
    """

    WHAT: ClassVar[str] = "broker registration"

    host: str
    port: int
    endpoints: list[str]
    rack: str | None = None
    timestamp_ms: int = field(default_factory=now_ms)

    def __post_init__(self) -> None:
        if not isinstance(self.host, str) or not self.host:
            raise ValueError(f"host must be a non-empty string, got {self.host!r}")
        if not is_int(self.port) or not 0 < self.port < 65536:
            raise ValueError(f"port must be an integer in 1..65535, got {self.port!r}")
        if isinstance(self.endpoints, str) or not all(
            isinstance(endpoint, str) and endpoint for endpoint in self.endpoints
        ):
            raise ValueError(f"endpoints must be a list of non-empty strings, got {self.endpoints!r}")
        object.__setattr__(self, "endpoints", list(self.endpoints))
        if self.rack is not None and (not isinstance(self.rack, str) or not self.rack):
            raise ValueError(f"rack must be a non-empty string or None, got {self.rack!r}")
        non_negative(self.timestamp_ms, "timestamp")

    @classmethod
    def for_http(cls, host: str, port: int, rack: str | None = None,
                 timestamp_ms: int | None = None) -> BrokerRegistration:
        """A registration whose only endpoint is ``http://host:port``."""
        return cls(host=host, port=port, endpoints=[f"http://{host}:{port}"], rack=rack,
                   timestamp_ms=now_ms() if timestamp_ms is None else timestamp_ms)

    def _document(self) -> dict[str, Any]:
        document: dict[str, Any] = {"host": self.host, "port": self.port,
                                    "endpoints": list(self.endpoints)}
        if self.rack is not None:
            document["rack"] = self.rack
        document["timestamp"] = self.timestamp_ms
        return document

    @classmethod
    def _parse(cls, fields: Fields) -> BrokerRegistration:
        return cls(host=fields.string("host"), port=fields.integer("port"),
                   endpoints=fields.string_list("endpoints"),
                   rack=fields.optional_string("rack"),
                   timestamp_ms=fields.integer("timestamp", allow_string=True))


@dataclass(frozen=True)
class TopicAssignment(ZNodePayload):
    """``/brokers/topics/<t>``: partition → replica list, and the topic's id.

    Replica order matters: element 0 is the preferred leader. Partition ids are exactly
    ``0..n-1`` (n >= 1); a replica list is non-empty and has no duplicate broker.
    """

    WHAT: ClassVar[str] = "topic assignment"

    partitions: dict[int, list[int]]
    topic_id: str
    adding_replicas: dict[int, list[int]] = field(default_factory=dict)
    removing_replicas: dict[int, list[int]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("adding_replicas", "removing_replicas"):
            moving = getattr(self, name)
            if not isinstance(moving, Mapping):
                raise ValueError(f"{name} must be a mapping")
            object.__setattr__(self, name, {int(partition): distinct_ids(brokers, f"{name} of {partition}")
                                            for partition, brokers in sorted(moving.items()) if brokers})
        if not isinstance(self.partitions, Mapping) or not self.partitions:
            raise ValueError(f"partitions must be a non-empty mapping, got {self.partitions!r}")
        normalised: dict[int, list[int]] = {}
        for partition in sorted(self.partitions):
            validate_partition(partition)
            replicas = distinct_ids(self.partitions[partition], f"replicas of partition {partition}")
            if not replicas:
                raise ValueError(f"replicas of partition {partition} must not be empty")
            normalised[partition] = replicas
        if list(normalised) != list(range(len(normalised))):
            raise ValueError(f"partition ids must be 0..{len(normalised) - 1}, got {list(normalised)}")
        object.__setattr__(self, "partitions", normalised)
        if not isinstance(self.topic_id, str) or not self.topic_id:
            raise ValueError(f"topic_id must be a non-empty string, got {self.topic_id!r}")

    @property
    def partition_count(self) -> int:
        return len(self.partitions)

    def _document(self) -> dict[str, Any]:
        return {"partitions": {str(p): list(r) for p, r in self.partitions.items()},
                "adding_replicas": {str(p): list(r) for p, r in self.adding_replicas.items()},
                "removing_replicas": {str(p): list(r) for p, r in self.removing_replicas.items()},
                "topic_id": self.topic_id}

    @classmethod
    def _parse(cls, fields: Fields) -> TopicAssignment:
        def partition_map(name: str) -> dict[int, list[int]]:
            result: dict[int, list[int]] = {}
            for key, replicas in fields.object(name).items():
                if not (key.isascii() and key.isdigit()):
                    raise ValueError(f"partition key {key!r} is not a partition id")
                result[int(key)] = integer_list(replicas, f"{name} of partition {key}")
            return result
        return cls(partitions=partition_map("partitions"), topic_id=fields.string("topic_id"),
                   adding_replicas=partition_map("adding_replicas") if fields.has("adding_replicas") else {},
                   removing_replicas=partition_map("removing_replicas") if fields.has("removing_replicas") else {})


@dataclass(frozen=True)
class PartitionState(ZNodePayload):
    """``/brokers/topics/<t>/partitions/<p>/state``: leader, leader epoch, ISR.

    ``leader`` is -1 when the partition has no leader. The znode's zkVersion is the partition
    epoch every conditional update is checked against.
    """

    WHAT: ClassVar[str] = "partition state"
    NO_LEADER: ClassVar[int] = -1

    leader: int
    leader_epoch: int
    isr: list[int]
    controller_epoch: int

    def __post_init__(self) -> None:
        non_negative(self.leader, "leader", minimum=-1)
        non_negative(self.leader_epoch, "leader_epoch")
        object.__setattr__(self, "isr", distinct_ids(self.isr, "isr"))
        non_negative(self.controller_epoch, "controller_epoch")

    @property
    def has_leader(self) -> bool:
        return self.leader != self.NO_LEADER

    def _document(self) -> dict[str, Any]:
        return {"leader": self.leader, "leader_epoch": self.leader_epoch,
                "isr": list(self.isr), "controller_epoch": self.controller_epoch}

    @classmethod
    def _parse(cls, fields: Fields) -> PartitionState:
        return cls(leader=fields.integer("leader"), leader_epoch=fields.integer("leader_epoch"),
                   isr=fields.integer_list("isr"),
                   controller_epoch=fields.integer("controller_epoch"))


@dataclass(frozen=True)
class ControllerInfo(ZNodePayload):
    """``/controller`` (ephemeral): which broker is the active controller."""

    WHAT: ClassVar[str] = "controller registration"

    broker_id: int
    timestamp_ms: int = field(default_factory=now_ms)

    def __post_init__(self) -> None:
        validate_broker_id(self.broker_id)
        non_negative(self.timestamp_ms, "timestamp")

    def _document(self) -> dict[str, Any]:
        return {"brokerid": self.broker_id, "timestamp": self.timestamp_ms}

    @classmethod
    def _parse(cls, fields: Fields) -> ControllerInfo:
        return cls(broker_id=fields.integer("brokerid"),
                   timestamp_ms=fields.integer("timestamp", allow_string=True))


@dataclass(frozen=True)
class ControllerEpoch(ZNodePayload):
    """``/controller_epoch``: the epoch of the latest elected controller.

    Kafka stores a bare decimal here; kafkalite wraps it in a versioned JSON object like every
    other payload (readers also accept Kafka's bare decimal). Created with epoch 0, so the
    first controller has epoch 1; its zkVersion is the fencing token of controller writes.
    """

    WHAT: ClassVar[str] = "controller epoch"

    epoch: int

    def __post_init__(self) -> None:
        non_negative(self.epoch, "epoch")

    def _document(self) -> dict[str, Any]:
        return {"epoch": self.epoch}

    @classmethod
    def _parse(cls, fields: Fields) -> ControllerEpoch:
        return cls(epoch=fields.integer("epoch"))

    @classmethod
    def from_bytes(cls, data: bytes, path: str | None = None) -> ControllerEpoch:
        stripped = bytes(data or b"").strip()
        if stripped.isdigit():
            return cls(epoch=int(stripped))
        return super().from_bytes(data, path)


@dataclass(frozen=True)
class ConfigEntity(ZNodePayload):
    """``/config/topics/<t>`` and ``/config/brokers/<id|<default>>``: config overrides.

    Only overrides are stored; values are strings (as Kafka does).
    """

    WHAT: ClassVar[str] = "config entity"

    config: dict[str, str]

    def __post_init__(self) -> None:
        if not isinstance(self.config, Mapping) or not all(
            isinstance(key, str) and key and isinstance(value, str)
            for key, value in self.config.items()
        ):
            raise ValueError(f"config must map non-empty strings to strings, got {self.config!r}")
        object.__setattr__(self, "config", dict(sorted(self.config.items())))

    def _document(self) -> dict[str, Any]:
        return {"config": dict(self.config)}

    @classmethod
    def _parse(cls, fields: Fields) -> ConfigEntity:
        return cls(config=fields.object("config"))


@dataclass(frozen=True)
class ConfigChangeNotification(ZNodePayload):
    """``/config/changes/config_change_<seq>`` (sequential): "re-read this config entity".

    ``entity_path`` is ``topics/<t>``, ``brokers/<id|<default>>``, ``users/<u>``, ``clients/<c>``
    or ``users/<u>/clients/<c>``, relative to ``/config``; written as Kafka's version 2
    (``{"version":2,"entity_path":"users/alice"}``).
    """

    VERSION: ClassVar[int] = 2
    WHAT: ClassVar[str] = "config change notification"

    entity_path: str

    def __post_init__(self) -> None:
        validate_entity_path(self.entity_path)

    @classmethod
    def for_topic(cls, topic: str) -> ConfigChangeNotification:
        return cls(entity_path=f"topics/{validate_topic_name(topic)}")

    @classmethod
    def for_broker(cls, broker_id: int | None) -> ConfigChangeNotification:
        name = DEFAULT_BROKER_ENTITY if broker_id is None else str(validate_broker_id(broker_id))
        return cls(entity_path=f"brokers/{name}")

    @property
    def entity_type(self) -> str:
        return self.entity_path.split("/")[0]

    @property
    def entity_name(self) -> str:
        return self.entity_path.split("/")[1]

    @property
    def config_path(self) -> str:
        """The absolute path of the entity whose config changed."""
        return f"{CONFIG_PATH}/{self.entity_path}"

    def _document(self) -> dict[str, Any]:
        return {"entity_path": self.entity_path}

    @classmethod
    def _parse(cls, fields: Fields) -> ConfigChangeNotification:
        return cls(entity_path=fields.string("entity_path"))


@dataclass(frozen=True, order=True)
class PartitionRef:
    """A (topic, partition) pair as it appears inside admin and notification payloads."""

    topic: str
    partition: int

    def __post_init__(self) -> None:
        validate_topic_name(self.topic)
        validate_partition(self.partition)

    def _document(self) -> dict[str, Any]:
        return {"topic": self.topic, "partition": self.partition}

    @classmethod
    def _parse(cls, fields: Fields) -> PartitionRef:
        return cls(topic=fields.string("topic"), partition=fields.integer("partition"))


def _partition_refs(value: Sequence[PartitionRef], what: str) -> list[PartitionRef]:
    if isinstance(value, (str, bytes)) or not all(isinstance(item, PartitionRef) for item in value):
        raise TypeError(f"{what} must be a sequence of PartitionRef, got {value!r}")
    refs = list(value)
    if len(set(refs)) != len(refs):
        raise ValueError(f"{what} lists a partition twice")
    return refs


def _parse_partition_refs(fields: Fields) -> list[PartitionRef]:
    return [PartitionRef._parse(entry) for entry in fields.object_list("partitions")]


@dataclass(frozen=True)
class IsrChangeNotification(ZNodePayload):
    """``/isr_change_notification/isr_change_<seq>`` (sequential): partitions whose ISR moved."""

    WHAT: ClassVar[str] = "ISR change notification"

    partitions: list[PartitionRef]

    def __post_init__(self) -> None:
        object.__setattr__(self, "partitions", _partition_refs(self.partitions, "partitions"))

    def _document(self) -> dict[str, Any]:
        return {"partitions": [ref._document() for ref in self.partitions]}

    @classmethod
    def _parse(cls, fields: Fields) -> IsrChangeNotification:
        return cls(partitions=_parse_partition_refs(fields))


@dataclass(frozen=True)
class PreferredElectionRequest(ZNodePayload):
    """``/admin/preferred_replica_election``: move leadership back to the preferred replicas."""

    WHAT: ClassVar[str] = "preferred replica election request"

    partitions: list[PartitionRef]

    def __post_init__(self) -> None:
        object.__setattr__(self, "partitions", _partition_refs(self.partitions, "partitions"))

    def _document(self) -> dict[str, Any]:
        return {"partitions": [ref._document() for ref in self.partitions]}

    @classmethod
    def _parse(cls, fields: Fields) -> PreferredElectionRequest:
        return cls(partitions=_parse_partition_refs(fields))


@dataclass(frozen=True)
class PartitionReassignment:
    """One entry of a reassignment request: the target replica list of one partition."""

    topic: str
    partition: int
    replicas: list[int]

    def __post_init__(self) -> None:
        validate_topic_name(self.topic)
        validate_partition(self.partition)
        replicas = distinct_ids(self.replicas, f"replicas of {self.topic}-{self.partition}")
        if not replicas:
            raise ValueError(f"replicas of {self.topic}-{self.partition} must not be empty")
        object.__setattr__(self, "replicas", replicas)

    @property
    def ref(self) -> PartitionRef:
        return PartitionRef(self.topic, self.partition)


@dataclass(frozen=True)
class ReassignmentRequest(ZNodePayload):
    """``/admin/reassign_partitions``: target replica lists the controller should move to."""

    WHAT: ClassVar[str] = "partition reassignment request"

    partitions: list[PartitionReassignment]

    def __post_init__(self) -> None:
        entries = self.partitions
        if isinstance(entries, (str, bytes)) or not all(
            isinstance(entry, PartitionReassignment) for entry in entries
        ):
            raise TypeError(f"partitions must be a sequence of PartitionReassignment, got {entries!r}")
        entries = list(entries)
        refs = [entry.ref for entry in entries]
        if len(set(refs)) != len(refs):
            raise ValueError("reassignment lists a partition twice")
        object.__setattr__(self, "partitions", entries)

    def _document(self) -> dict[str, Any]:
        return {"partitions": [
            {"topic": entry.topic, "partition": entry.partition, "replicas": list(entry.replicas)}
            for entry in self.partitions
        ]}

    @classmethod
    def _parse(cls, fields: Fields) -> ReassignmentRequest:
        entries: list[PartitionReassignment] = []
        for entry in fields.object_list("partitions"):
            entries.append(PartitionReassignment(topic=entry.string("topic"),
                                                 partition=entry.integer("partition"),
                                                 replicas=entry.integer_list("replicas")))
        return cls(partitions=entries)


@dataclass(frozen=True)
class ProducerIdBlock(ZNodePayload):
    """``/latest_producer_id_block``: the last block of producer ids handed to a broker.

    Blocks are inclusive ranges ``[block_start, block_end]`` of PRODUCER_ID_BLOCK_SIZE ids. The
    znode starts empty (no block yet); a broker takes the next block with a write conditioned on
    the zkVersion it read, retrying on conflict.
    """

    WHAT: ClassVar[str] = "producer id block"

    broker_id: int
    block_start: int
    block_end: int

    def __post_init__(self) -> None:
        validate_broker_id(self.broker_id)
        non_negative(self.block_start, "block_start")
        non_negative(self.block_end, "block_end", minimum=self.block_start
                      if is_int(self.block_start) else 0)

    @property
    def size(self) -> int:
        return self.block_end - self.block_start + 1

    @classmethod
    def first(cls, broker_id: int, size: int = PRODUCER_ID_BLOCK_SIZE) -> ProducerIdBlock:
        """The block to write when the znode is empty."""
        return cls(broker_id=broker_id, block_start=0, block_end=size - 1)

    def next_for(self, broker_id: int, size: int = PRODUCER_ID_BLOCK_SIZE) -> ProducerIdBlock:
        """The block that follows this one, handed to ``broker_id``."""
        return ProducerIdBlock(broker_id=broker_id, block_start=self.block_end + 1,
                               block_end=self.block_end + size)

    def _document(self) -> dict[str, Any]:
        return {"broker": self.broker_id, "block_start": self.block_start,
                "block_end": self.block_end}

    @classmethod
    def _parse(cls, fields: Fields) -> ProducerIdBlock:
        return cls(broker_id=fields.integer("broker"),
                   block_start=fields.integer("block_start", allow_string=True),
                   block_end=fields.integer("block_end", allow_string=True))


__all__ = [
    "ADMIN_PATH", "BROKERS_PATH", "BROKER_IDS_PATH", "BROKER_TOPICS_PATH", "CLUSTER_ID_PATH",
    "CLUSTER_PATH", "CONFIG_BROKERS_PATH", "CONFIG_CHANGES_PATH", "CONFIG_CHANGE_PREFIX",
    "CONFIG_CLIENTS_PATH", "CONFIG_USERS_PATH", "DEFAULT_ENTITY",
    "CONFIG_ENTITY_TYPES", "CONFIG_PATH", "CONFIG_TOPICS_PATH", "CONTROLLER_EPOCH_PATH",
    "CONTROLLER_PATH", "DEFAULT_BROKER_ENTITY", "DELETE_TOPICS_PATH", "ISR_CHANGE_NOTIFICATION_PATH",
    "ISR_CHANGE_PREFIX", "LATEST_PRODUCER_ID_BLOCK_PATH", "PERSISTENT_PATHS",
    "ACL_PATH", "ACL_PREFIXED_PATH", "ACL_CHANGES_PATH", "ACL_EXTENDED_CHANGES_PATH", "ACL_CHANGE_PREFIX", "acl_path",
    "PREFERRED_REPLICA_ELECTION_PATH", "PRODUCER_ID_BLOCK_SIZE", "REASSIGN_PARTITIONS_PATH",
    "BrokerRegistration", "ClusterId", "ConfigChangeNotification", "ConfigEntity",
    "ControllerEpoch", "ControllerInfo", "IsrChangeNotification", "PartitionReassignment",
    "PartitionRef", "PartitionState", "PreferredElectionRequest", "ProducerIdBlock",
    "ReassignmentRequest", "TopicAssignment", "ZNodePayload",
    "broker_config_path", "broker_id_from_child", "broker_path", "config_change_prefix_path",
    "config_entity_path", "delete_topic_path", "isr_change_prefix_path", "now_ms",
    "partition_path", "partition_state_path", "sequence_child_name", "sequence_number",
    "topic_config_path", "topic_partitions_path", "topic_path", "validate_topic_name",
    "desanitize_entity_name", "sanitize_entity_name", "user_client_entity_path", "validate_entity_path",
]
