"""The one exception tree of kafkalite, and the registry of wire error codes.

Every error kafkalite raises is a :class:`KafkaliteError`. Errors that a broker reports over
the wire subclass :class:`BrokerResponseError` and carry Kafka's numeric code and symbolic
name, so that a client sees the same names a Kafka user knows::

    KafkaliteError                       root; flags: retriable, invalid_metadata
    ├── BrokerResponseError              carries .errno / .message (Kafka's code and name)
    │   ├── OffsetOutOfRangeError        OFFSET_OUT_OF_RANGE (1)
    │   ├── CorruptRecordError           CORRUPT_MESSAGE (2) — CRC, size, magic, varint damage
    │   │   └── TruncatedBatchError      a batch cut short (torn tail of a log)
    │   ├── UnknownTopicOrPartitionError UNKNOWN_TOPIC_OR_PARTITION (3)
    │   ├── NotLeaderForPartitionError   NOT_LEADER_OR_FOLLOWER (6)
    │   ├── KafkaStorageError            KAFKA_STORAGE_ERROR (56) — a write failed and was undone
    │   │   └── LogDirOfflineError       the partition's log directory is offline
    │   └── ...                          one class per code in the table below
    ├── KafkaConnectionError             transport failures (retriable)
    ├── KafkaTimeoutError                a client-side wait ran out
    ├── StorageError                     local log damage or misuse (KAFKA_STORAGE_ERROR)
    ├── CoordinationError                ZooKeeper session or data problems
    ├── ConfigError                      bad configuration value or file
    └── IllegalStateError                API misuse (closed producer, unassigned partition...)

Two class-level flags drive retries everywhere (one place, not lists of classes):

* ``retriable`` — the same request may succeed if tried again after a backoff;
* ``invalid_metadata`` — the client's view of leaders is stale; refresh metadata first.

Codes exist only on the wire: inside Python, errors are raised, never returned.
Thread-safety: the module is immutable after import.
"""

from __future__ import annotations

from typing import Any, ClassVar


class KafkaliteError(Exception):
    """Root of every kafkalite error."""

    retriable: ClassVar[bool] = False
    invalid_metadata: ClassVar[bool] = False

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)


class BrokerResponseError(KafkaliteError):
    """An error that has a Kafka wire code; ``errno`` and ``message`` name it."""

    errno: ClassVar[int] = -1
    message: ClassVar[str] = "UNKNOWN_SERVER_ERROR"
    description: ClassVar[str] = "The server experienced an unexpected error."
    http_status: ClassVar[int] = 500

    def __str__(self) -> str:
        detail = super().__str__()
        return f"[Error {self.errno}] {self.message}: {detail}" if detail else (
            f"[Error {self.errno}] {self.message}: {self.description}"
        )


class UnknownServerError(BrokerResponseError):
    errno = -1
    message = "UNKNOWN_SERVER_ERROR"
    description = "The server experienced an unexpected error when processing the request."
    http_status = 500


class OffsetOutOfRangeError(BrokerResponseError):
    errno = 1
    message = "OFFSET_OUT_OF_RANGE"
    description = "The requested offset is not within the range of offsets maintained by the server."
    http_status = 416


class CorruptRecordError(BrokerResponseError):
    """A record batch failed validation: CRC, size, magic, varint or layout damage.

    ``position`` (when known) is the byte position of the damaged batch in its file or buffer.
    """

    errno = 2
    message = "CORRUPT_MESSAGE"
    description = "The message contents does not match the message CRC or the message is otherwise corrupt."
    http_status = 400
    retriable = True

    def __init__(self, detail: str = "", position: int | None = None) -> None:
        self.detail = detail
        self.position = position
        text = detail if position is None else f"{detail} (at byte position {position})"
        super().__init__(text)


class TruncatedBatchError(CorruptRecordError):
    """A batch runs past the end of the available bytes (a torn write at a log's tail)."""


class UnknownTopicOrPartitionError(BrokerResponseError):
    errno = 3
    message = "UNKNOWN_TOPIC_OR_PARTITION"
    description = "This server does not host this topic-partition."
    http_status = 404
    retriable = True
    invalid_metadata = True


class InvalidFetchSizeError(BrokerResponseError):
    errno = 4
    message = "INVALID_FETCH_SIZE"
    description = "The requested fetch size is invalid."
    http_status = 400


class LeaderNotAvailableError(BrokerResponseError):
    errno = 5
    message = "LEADER_NOT_AVAILABLE"
    description = "There is no leader for this topic-partition as we are in the middle of a leadership election."
    http_status = 503
    retriable = True
    invalid_metadata = True


class NotLeaderForPartitionError(BrokerResponseError):
    errno = 6
    message = "NOT_LEADER_OR_FOLLOWER"
    description = "This server is not the leader for that topic-partition."
    http_status = 421
    retriable = True
    invalid_metadata = True


class RequestTimedOutError(BrokerResponseError):
    errno = 7
    message = "REQUEST_TIMED_OUT"
    description = "The request timed out."
    http_status = 504
    retriable = True


class BrokerNotAvailableError(BrokerResponseError):
    errno = 8
    message = "BROKER_NOT_AVAILABLE"
    description = "The broker is not available."
    http_status = 503
    retriable = True
    invalid_metadata = True


class ReplicaNotAvailableError(BrokerResponseError):
    errno = 9
    message = "REPLICA_NOT_AVAILABLE"
    description = "The replica is not available for the requested topic-partition."
    http_status = 503
    retriable = True
    invalid_metadata = True


class MessageSizeTooLargeError(BrokerResponseError):
    errno = 10
    message = "MESSAGE_TOO_LARGE"
    description = "The request included a message larger than the max message size the server will accept."
    http_status = 413


class StaleControllerEpochError(BrokerResponseError):
    errno = 11
    message = "STALE_CONTROLLER_EPOCH"
    description = "The controller moved to another broker."
    http_status = 409


class OffsetMetadataTooLargeError(BrokerResponseError):
    errno = 12
    message = "OFFSET_METADATA_TOO_LARGE"
    description = "The metadata field of the offset request was too large."
    http_status = 400


class CoordinatorLoadInProgressError(BrokerResponseError):
    errno = 14
    message = "COORDINATOR_LOAD_IN_PROGRESS"
    description = "The coordinator is loading and hence can't process requests."
    http_status = 503
    retriable = True


class CoordinatorNotAvailableError(BrokerResponseError):
    errno = 15
    message = "COORDINATOR_NOT_AVAILABLE"
    description = "The coordinator is not available."
    http_status = 503
    retriable = True
    invalid_metadata = True


class NotCoordinatorError(BrokerResponseError):
    errno = 16
    message = "NOT_COORDINATOR"
    description = "This is not the correct coordinator."
    http_status = 421
    retriable = True
    invalid_metadata = True


class InvalidTopicError(BrokerResponseError):
    errno = 17
    message = "INVALID_TOPIC_EXCEPTION"
    description = "The request attempted to perform an operation on an invalid topic."
    http_status = 400


class RecordListTooLargeError(BrokerResponseError):
    errno = 18
    message = "RECORD_LIST_TOO_LARGE"
    description = "The request included message batch larger than the configured segment size on the server."
    http_status = 413


class NotEnoughReplicasError(BrokerResponseError):
    errno = 19
    message = "NOT_ENOUGH_REPLICAS"
    description = "Messages are rejected since there are fewer in-sync replicas than required."
    http_status = 503
    retriable = True


class NotEnoughReplicasAfterAppendError(BrokerResponseError):
    errno = 20
    message = "NOT_ENOUGH_REPLICAS_AFTER_APPEND"
    description = "Messages are written to the log, but to fewer in-sync replicas than required."
    http_status = 503
    retriable = True


class InvalidRequiredAcksError(BrokerResponseError):
    errno = 21
    message = "INVALID_REQUIRED_ACKS"
    description = "Produce request specified an invalid value for required acks."
    http_status = 400


class IllegalGenerationError(BrokerResponseError):
    errno = 22
    message = "ILLEGAL_GENERATION"
    description = "Specified group generation id is not valid."
    http_status = 409


class InconsistentGroupProtocolError(BrokerResponseError):
    errno = 23
    message = "INCONSISTENT_GROUP_PROTOCOL"
    description = "The group member's supported protocols are incompatible with those of existing members."
    http_status = 409


class InvalidGroupIdError(BrokerResponseError):
    errno = 24
    message = "INVALID_GROUP_ID"
    description = "The configured groupId is invalid."
    http_status = 400


class UnknownMemberIdError(BrokerResponseError):
    errno = 25
    message = "UNKNOWN_MEMBER_ID"
    description = "The coordinator is not aware of this member."
    http_status = 409


class InvalidSessionTimeoutError(BrokerResponseError):
    errno = 26
    message = "INVALID_SESSION_TIMEOUT"
    description = "The session timeout is not within the range allowed by the broker."
    http_status = 400


class RebalanceInProgressError(BrokerResponseError):
    errno = 27
    message = "REBALANCE_IN_PROGRESS"
    description = "The group is rebalancing, so a rejoin is needed."
    http_status = 409


class InvalidCommitOffsetSizeError(BrokerResponseError):
    errno = 28
    message = "INVALID_COMMIT_OFFSET_SIZE"
    description = "The committing offset data size is not valid."
    http_status = 400


class TopicAuthorizationFailedError(BrokerResponseError):
    errno = 29
    message = "TOPIC_AUTHORIZATION_FAILED"
    description = "Topic authorization failed."
    http_status = 403


class GroupAuthorizationFailedError(BrokerResponseError):
    errno = 30
    message = "GROUP_AUTHORIZATION_FAILED"
    description = "Group authorization failed."
    http_status = 403


class ClusterAuthorizationFailedError(BrokerResponseError):
    errno = 31
    message = "CLUSTER_AUTHORIZATION_FAILED"
    description = "Cluster authorization failed."
    http_status = 403


class InvalidTimestampError(BrokerResponseError):
    errno = 32
    message = "INVALID_TIMESTAMP"
    description = "The timestamp of the message is out of acceptable range."
    http_status = 400


class UnsupportedVersionError(BrokerResponseError):
    errno = 35
    message = "UNSUPPORTED_VERSION"
    description = "The version of API is not supported."
    http_status = 400


class TopicAlreadyExistsError(BrokerResponseError):
    errno = 36
    message = "TOPIC_ALREADY_EXISTS"
    description = "Topic with this name already exists."
    http_status = 409


class InvalidPartitionsError(BrokerResponseError):
    errno = 37
    message = "INVALID_PARTITIONS"
    description = "Number of partitions is invalid."
    http_status = 400


class InvalidReplicationFactorError(BrokerResponseError):
    errno = 38
    message = "INVALID_REPLICATION_FACTOR"
    description = "Replication factor is below 1 or larger than the number of available brokers."
    http_status = 400


class InvalidReplicaAssignmentError(BrokerResponseError):
    errno = 39
    message = "INVALID_REPLICA_ASSIGNMENT"
    description = "Replica assignment is invalid."
    http_status = 400


class InvalidConfigurationError(BrokerResponseError):
    errno = 40
    message = "INVALID_CONFIG"
    description = "Configuration is invalid."
    http_status = 400


class NotControllerError(BrokerResponseError):
    errno = 41
    message = "NOT_CONTROLLER"
    description = "This is not the correct controller for this cluster."
    http_status = 421
    retriable = True
    invalid_metadata = True


class InvalidRequestError(BrokerResponseError):
    errno = 42
    message = "INVALID_REQUEST"
    description = "The request is malformed or violates the API's rules."
    http_status = 400


class PolicyViolationError(BrokerResponseError):
    errno = 44
    message = "POLICY_VIOLATION"
    description = "Request parameters do not satisfy the configured policy."
    http_status = 400


class OutOfOrderSequenceNumberError(BrokerResponseError):
    errno = 45
    message = "OUT_OF_ORDER_SEQUENCE_NUMBER"
    description = "The broker received an out of order sequence number."
    http_status = 409


class DuplicateSequenceNumberError(BrokerResponseError):
    errno = 46
    message = "DUPLICATE_SEQUENCE_NUMBER"
    description = "The broker received a duplicate sequence number."
    http_status = 409


class InvalidProducerEpochError(BrokerResponseError):
    errno = 47
    message = "INVALID_PRODUCER_EPOCH"
    description = "Producer attempted to produce with an old epoch."
    http_status = 409


class InvalidProducerIdMappingError(BrokerResponseError):
    errno = 49
    message = "INVALID_PRODUCER_ID_MAPPING"
    description = ("The producer attempted to use a producer id which is not currently assigned to its "
                   "transactional id.")
    http_status = 409


class InvalidTransactionTimeoutError(BrokerResponseError):
    errno = 50
    message = "INVALID_TRANSACTION_TIMEOUT"
    description = ("The transaction timeout is larger than the maximum value allowed by the broker (as "
                   "configured by transaction.max.timeout.ms).")
    http_status = 400


class ConcurrentTransactionsError(BrokerResponseError):
    errno = 51
    message = "CONCURRENT_TRANSACTIONS"
    description = ("The producer attempted to update a transaction while another concurrent operation on the "
                   "same transaction was ongoing.")
    http_status = 409
    retriable = True


class OperationNotAttemptedError(BrokerResponseError):
    errno = 55
    message = "OPERATION_NOT_ATTEMPTED"
    description = "The broker did not attempt to execute this operation."
    http_status = 409


class UnstableOffsetCommitError(BrokerResponseError):
    errno = 88
    message = "UNSTABLE_OFFSET_COMMIT"
    description = "There are unstable offsets that need to be cleared."
    http_status = 409
    retriable = True


class TransactionalIdNotFoundError(BrokerResponseError):
    errno = 105
    message = "TRANSACTIONAL_ID_NOT_FOUND"
    description = "The transactionalId could not be found."
    http_status = 404


class KafkaStorageError(BrokerResponseError):
    errno = 56
    message = "KAFKA_STORAGE_ERROR"
    description = "Disk error when trying to access log file on the disk."
    http_status = 503
    retriable = True
    invalid_metadata = True


class LogDirOfflineError(KafkaStorageError):
    """The log directory holding the partition is offline after an I/O error that could not be
    undone (EIO, EROFS, a failed rollback): nothing in it is written or read until a restart."""


class UnsupportedSaslMechanismError(BrokerResponseError):
    errno = 33
    message = "UNSUPPORTED_SASL_MECHANISM"
    description = "The broker does not support the requested SASL mechanism."
    http_status = 401


class IllegalSaslStateError(BrokerResponseError):
    errno = 34
    message = "ILLEGAL_SASL_STATE"
    description = "Request is not valid given the current SASL state."
    http_status = 401


class TransactionalIdAuthorizationFailedError(BrokerResponseError):
    errno = 53
    message = "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"
    description = "Transactional Id authorization failed."
    http_status = 403


class SecurityDisabledError(BrokerResponseError):
    errno = 54
    message = "SECURITY_DISABLED"
    description = "Security features are disabled."
    http_status = 400


class SaslAuthenticationFailedError(BrokerResponseError):
    errno = 58
    message = "SASL_AUTHENTICATION_FAILED"
    description = "SASL Authentication failed."
    http_status = 401


class UnknownProducerIdError(BrokerResponseError):
    errno = 59
    message = "UNKNOWN_PRODUCER_ID"
    description = "The broker could not locate the producer metadata associated with the producer id."
    http_status = 409


class NonEmptyGroupError(BrokerResponseError):
    errno = 68
    message = "NON_EMPTY_GROUP"
    description = "The group is not empty."
    http_status = 409


class GroupIdNotFoundError(BrokerResponseError):
    errno = 69
    message = "GROUP_ID_NOT_FOUND"
    description = "The group id does not exist."
    http_status = 404


class FetchSessionIdNotFoundError(BrokerResponseError):
    errno = 70
    message = "FETCH_SESSION_ID_NOT_FOUND"
    description = "The fetch session ID was not found."
    http_status = 409
    retriable = True


class InvalidFetchSessionEpochError(BrokerResponseError):
    errno = 71
    message = "INVALID_FETCH_SESSION_EPOCH"
    description = "The fetch session epoch is invalid."
    http_status = 409
    retriable = True


class GroupSubscribedToTopicError(BrokerResponseError):
    errno = 86
    message = "GROUP_SUBSCRIBED_TO_TOPIC"
    description = "The consumer group is actively subscribed to the topic."
    http_status = 409


class FencedLeaderEpochError(BrokerResponseError):
    errno = 74
    message = "FENCED_LEADER_EPOCH"
    description = "The leader epoch in the request is older than the epoch on the broker."
    http_status = 409
    retriable = True
    invalid_metadata = True


class UnknownLeaderEpochError(BrokerResponseError):
    errno = 75
    message = "UNKNOWN_LEADER_EPOCH"
    description = "The leader epoch in the request is newer than the epoch on the broker."
    http_status = 409
    retriable = True


class StaleBrokerEpochError(BrokerResponseError):
    errno = 77
    message = "STALE_BROKER_EPOCH"
    description = "Broker epoch has changed."
    http_status = 409


class OffsetNotAvailableError(BrokerResponseError):
    errno = 78
    message = "OFFSET_NOT_AVAILABLE"
    description = "The leader high watermark has not caught up from a recent leader election."
    http_status = 503
    retriable = True


class MemberIdRequiredError(BrokerResponseError):
    errno = 79
    message = "MEMBER_ID_REQUIRED"
    description = "The group member needs to have a valid member id before actually entering a consumer group."
    http_status = 409


class GroupMaxSizeReachedError(BrokerResponseError):
    errno = 81
    message = "GROUP_MAX_SIZE_REACHED"
    description = "The consumer group has reached its max size."
    http_status = 409


class FencedInstanceIdError(BrokerResponseError):
    errno = 82
    message = "FENCED_INSTANCE_ID"
    description = ("The broker rejected this static consumer since another consumer with the same "
                   "group.instance.id has registered.")
    http_status = 409


class PreferredLeaderNotAvailableError(BrokerResponseError):
    errno = 80
    message = "PREFERRED_LEADER_NOT_AVAILABLE"
    description = "The preferred leader was not available."
    http_status = 503
    retriable = True


class EligibleLeadersNotAvailableError(BrokerResponseError):
    errno = 83
    message = "ELIGIBLE_LEADERS_NOT_AVAILABLE"
    description = "Eligible topic partition leaders are not available."
    http_status = 503
    retriable = True


class ElectionNotNeededError(BrokerResponseError):
    errno = 84
    message = "ELECTION_NOT_NEEDED"
    description = "Leader election not needed for topic partition."
    http_status = 409


class InvalidRecordError(BrokerResponseError):
    errno = 87
    message = "INVALID_RECORD"
    description = "This record has failed the validation on broker and hence will be rejected."
    http_status = 400


class InvalidTxnStateError(BrokerResponseError):
    errno = 48
    message = "INVALID_TXN_STATE"
    description = "The producer attempted a transactional operation in an invalid state."
    http_status = 409


class TransactionCoordinatorFencedError(BrokerResponseError):
    errno = 52
    message = "TRANSACTION_COORDINATOR_FENCED"
    description = ("Indicates that the transaction coordinator sending a WriteTxnMarker is no longer the "
                   "current coordinator for a given producer.")
    http_status = 409


class ProducerFencedError(BrokerResponseError):
    errno = 90
    message = "PRODUCER_FENCED"
    description = ("There is a newer producer with the same transactionalId which fences the current one.")
    http_status = 409


# --- errors without a wire code ---------------------------------------------------------------


class KafkaConnectionError(KafkaliteError):
    """A broker could not be reached or the connection broke mid-request."""

    retriable = True
    invalid_metadata = True


class KafkaTimeoutError(KafkaliteError):
    """A client-side wait (metadata, buffer space, future.get) ran out."""

    retriable = True


class StorageError(KafkaliteError):
    """Local log misuse or damage that is not a corrupt batch (bad directory, closed log)."""


class CoordinationError(KafkaliteError):
    """ZooKeeper could not be reached, the session was lost, or znode data is malformed."""

    retriable = True


class ZNodeVersionConflictError(CoordinationError):
    """A conditional ZooKeeper write lost a race (the znode version moved on)."""


class ZNodeExistsError(CoordinationError):
    """A znode that had to be created already exists."""

    retriable = False


class ZNodeMissingError(CoordinationError):
    """A znode that had to exist does not."""

    retriable = False


class ZNodeDataError(CoordinationError):
    """A znode holds data that is not the JSON payload its path promises."""

    retriable = False


class ConfigError(KafkaliteError):
    """A configuration value or file is malformed or out of range."""


class IllegalStateError(KafkaliteError):
    """The API was used in a state that does not allow the call."""


class NoOffsetForPartitionError(KafkaliteError):
    """No position and auto_offset_reset='none'."""


class UnsupportedCodecError(KafkaliteError):
    """A compression codec that this installation cannot encode or decode."""


_REGISTRY: dict[int, type[BrokerResponseError]] = {}
_BY_NAME: dict[str, type[BrokerResponseError]] = {}


def _register_all() -> None:
    pending: list[type[BrokerResponseError]] = [BrokerResponseError]
    while pending:
        cls = pending.pop()
        pending.extend(cls.__subclasses__())
        if cls is not BrokerResponseError:
            _REGISTRY.setdefault(cls.errno, cls)
            _BY_NAME.setdefault(cls.message, cls)


_register_all()


def for_code(errno: int) -> type[BrokerResponseError]:
    """Return the error class for a wire code (UnknownServerError when unknown)."""
    return _REGISTRY.get(errno, UnknownServerError)


def for_name(name: str) -> type[BrokerResponseError]:
    """Return the error class for a Kafka error name such as ``NOT_LEADER_OR_FOLLOWER``."""
    return _BY_NAME.get(name, UnknownServerError)


def all_codes() -> dict[int, type[BrokerResponseError]]:
    """A copy of the code → class registry."""
    return dict(_REGISTRY)


# --- client-side errors ---
# Raised by the Python clients (kafkalite.client), never sent over the wire. The aliases give
# kafka-python's and the Java client's names for errors that already exist above.


class NoBrokersAvailable(KafkaConnectionError):
    """None of the bootstrap or known brokers answered a metadata request."""


class GroupCoordinatorUnsupportedError(IllegalStateError):
    """The call needs a consumer-group coordinator (commit, committed offsets), which the
    standalone consumer does not talk to yet."""


class CommitFailedError(KafkaliteError):
    """An offset commit could not be completed."""


class UnrecognizedClientOptionError(ConfigError):
    """A client was given an option name it does not know."""


KafkaError = KafkaliteError
KafkaConfigurationError = ConfigError
RecordTooLargeError = MessageSizeTooLargeError
IllegalArgumentError = ConfigError
NodeNotReadyError = KafkaConnectionError
