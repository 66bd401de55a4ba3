"""The HTTP contract shared by brokers and clients: routes, binary frames, JSON bodies, errors.

Pure: no sockets, no event loop. Documented for humans in ``docs/protocol.md``.

Hot paths (produce and fetch) use compact big-endian binary frames so that record batches
travel as raw bytes, untouched, from producer to log to consumer; every other call uses small
JSON bodies. Strings in frames are ``uint16 length + UTF-8``.

Produce request (``POST /v1/produce``, content type :data:`BINARY_CONTENT_TYPE`)::

    int16 acks | int32 timeout_ms | int64 producer_id (-1) | int32 partition count |
    ( string topic | int32 partition | int32 size | size bytes of v2 record batches )*

Produce response::

    int32 count | ( string topic | int32 partition | int16 error_code | int64 base_offset |
                    int64 log_append_time | int64 log_start_offset | string error_message )*

Fetch request (``POST /v1/fetch``)::

    int32 replica_id (-1 = consumer, -2 = debugging consumer, else a follower's broker id) |
    int64 replica_epoch (the follower's broker epoch, else -1) | int32 max_wait_ms | int32 min_bytes | int32 max_bytes |
    int8 isolation_level | int32 count |
    ( string topic | int32 partition | int64 fetch_offset | int32 current_leader_epoch |
      int32 last_fetched_epoch | int64 log_start_offset | int32 partition_max_bytes )*

Fetch response::

    int32 count | ( string topic | int32 partition | int16 error_code | int64 high_watermark |
                    int64 last_stable_offset | int64 log_start_offset | int32 diverging_epoch |
                    int64 diverging_end_offset | int32 leader_id | int32 leader_epoch |
                    string error_message | int32 size | size bytes of record batches )*
    [ int32 count | ( int32 result index | int32 aborted count |
                      ( int64 producer_id | int64 first_offset )* )* ]

The trailing aborted-transactions section is present only when some result carries
``aborted_transactions`` (read_committed fetches): older readers never receive it unless they ask
for read_committed.

Errors of a whole request come back as JSON ``{"error_code", "error", "message"}`` with the HTTP
status of the error class; per-partition errors ride inside a 200 response, as in Kafka.

JSON request bodies are decoded at the boundary by :func:`parse_json` (size, nesting depth and
number length bounded) and read field by field with the typed helpers :func:`require`,
:func:`require_objects` and :func:`require_list_of`: every malformed body becomes an
``INVALID_REQUEST`` (or ``MESSAGE_TOO_LARGE``), never an exception of the handler.
Thread-safety: pure functions and immutable values.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kafkalite import errors
from kafkalite.errors import BrokerResponseError, InvalidRequestError

API_VERSION = 1
PREFIX = f"/v{API_VERSION}"
BINARY_CONTENT_TYPE = "application/vnd.kafkalite.v1+binary"
JSON_CONTENT_TYPE = "application/json"

# Routes (method, path). The broker's route table and the clients both read these.
METADATA = PREFIX + "/metadata"
PRODUCE = PREFIX + "/produce"
FETCH = PREFIX + "/fetch"
LIST_OFFSETS = PREFIX + "/list_offsets"
OFFSETS_FOR_LEADER_EPOCH = PREFIX + "/offsets_for_leader_epoch"
DELETE_RECORDS = PREFIX + "/delete_records"
WRITE_TXN_MARKERS = PREFIX + "/write_txn_markers"
INIT_PRODUCER_ID = PREFIX + "/init_producer_id"
API_VERSIONS = PREFIX + "/api_versions"
CREATE_TOPICS = PREFIX + "/admin/create_topics"
DELETE_TOPICS = PREFIX + "/admin/delete_topics"
CREATE_PARTITIONS = PREFIX + "/admin/create_partitions"
DESCRIBE_CONFIGS = PREFIX + "/admin/describe_configs"
ALTER_CONFIGS = PREFIX + "/admin/alter_configs"
#: The users/clients config entities (SCRAM credentials, quotas): kafkalite-configs.sh --entity-type users|clients.
DESCRIBE_ENTITY_CONFIGS = PREFIX + "/admin/describe_entity_configs"
ALTER_ENTITY_CONFIGS = PREFIX + "/admin/alter_entity_configs"
ELECT_LEADERS = PREFIX + "/admin/elect_leaders"
DESCRIBE_CLUSTER = PREFIX + "/admin/describe_cluster"
CONTROLLED_SHUTDOWN = PREFIX + "/admin/controlled_shutdown"
#: partition states another broker wrote (the controller's decisions, a leader's ISR changes)
PARTITION_STATES = PREFIX + "/admin/partition_states"
ALTER_PARTITION_REASSIGNMENTS = PREFIX + "/admin/alter_partition_reassignments"
LIST_PARTITION_REASSIGNMENTS = PREFIX + "/admin/list_partition_reassignments"
TOPIC_RECORDS = PREFIX + "/topics/{topic}/records"
PARTITION_RECORDS = PREFIX + "/topics/{topic}/partitions/{partition}/records"
FIND_COORDINATOR = PREFIX + "/groups/find_coordinator"
JOIN_GROUP = PREFIX + "/groups/join"
SYNC_GROUP = PREFIX + "/groups/sync"
HEARTBEAT = PREFIX + "/groups/heartbeat"
LEAVE_GROUP = PREFIX + "/groups/leave"
OFFSET_COMMIT = PREFIX + "/groups/offset_commit"
OFFSET_FETCH = PREFIX + "/groups/offset_fetch"
LIST_GROUPS = PREFIX + "/groups/list"
DESCRIBE_GROUPS = PREFIX + "/groups/describe"
DELETE_GROUPS = PREFIX + "/groups/delete"
ADD_PARTITIONS_TO_TXN = PREFIX + "/txn/add_partitions"
ADD_OFFSETS_TO_TXN = PREFIX + "/txn/add_offsets"
END_TXN = PREFIX + "/txn/end"
TXN_OFFSET_COMMIT = PREFIX + "/txn/offset_commit"
DESCRIBE_TRANSACTIONS = PREFIX + "/txn/describe"
LIST_TRANSACTIONS = PREFIX + "/txn/list"
DESCRIBE_PRODUCERS = PREFIX + "/txn/describe_producers"
CREATE_ACLS = PREFIX + "/acls/create"
DESCRIBE_ACLS = PREFIX + "/acls/describe"
DELETE_ACLS = PREFIX + "/acls/delete"
HEALTH = "/health"
READY = "/ready"
METRICS = "/metrics"
OPENAPI = PREFIX + "/openapi.json"  # the OpenAPI description of these routes (docs/openapi.yaml)
# The binary channel: a WebSocket whose binary messages carry produce and fetch frames (see
# kafkalite.transport.PipelinedConnection). A request message is the API key below (uint16)
# and the request frame; an answer message is an HTTP-style status (uint16) and the response
# frame, or a JSON error body as on the HTTP routes.
CHANNEL = PREFIX + "/channel"
CHANNEL_APIS = {PRODUCE: 0, FETCH: 1}

EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
MAX_TIMESTAMP = -3
CONSUMER_REPLICA_ID = -1
#: Kafka's DEBUGGING_CONSUMER_ID: reads up to the log end like a follower without being one
#: (tools and tests that inspect a leader's whole log).
DEBUGGING_REPLICA_ID = -2
NO_BROKER_EPOCH = -1
READ_UNCOMMITTED = 0
READ_COMMITTED = 1
NO_EPOCH = -1

_INT8 = struct.Struct(">b")
_INT16 = struct.Struct(">h")
_UINT16 = struct.Struct(">H")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")
_PRODUCE_HEAD = struct.Struct(">hiq")
_PRODUCE_RESULT = struct.Struct(">ihqqq")
_FETCH_HEAD = struct.Struct(">iqiiib")
_FETCH_PARTITION = struct.Struct(">iqiiqi")
_FETCH_RESULT = struct.Struct(">ihqqqiqii")
_INDEX_AND_COUNT = struct.Struct(">ii")
_ABORTED_TXN = struct.Struct(">qq")
_SESSION_HEAD = struct.Struct(">iii")
_SESSION_ANSWER = struct.Struct(">ih")


# --- frame primitives ---------------------------------------------------------------------------


class FrameReader:
    """Sequential reader of a binary frame; any overrun raises InvalidRequestError."""

    __slots__ = ("data", "position")

    def __init__(self, data: bytes | bytearray | memoryview) -> None:
        self.data = memoryview(data).cast("B")
        self.position = 0

    def _take(self, size: int) -> int:
        start = self.position
        if size < 0 or start + size > len(self.data):
            raise InvalidRequestError(f"frame ends early: wanted {size} bytes at {start} of {len(self.data)}")
        self.position = start + size
        return start

    def unpack(self, layout: struct.Struct) -> tuple[Any, ...]:
        start = self._take(layout.size)
        return layout.unpack_from(self.data, start)

    def string(self) -> str:
        (length,) = self.unpack(_UINT16)
        start = self._take(length)
        try:
            return bytes(self.data[start:start + length]).decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidRequestError("a string in the frame is not UTF-8") from None

    def blob(self, max_size: int | None = None) -> memoryview:
        (length,) = self.unpack(_INT32)
        if max_size is not None and length > max_size:
            raise errors.MessageSizeTooLargeError(f"a {length}-byte payload exceeds the limit of {max_size}")
        start = self._take(length)
        return self.data[start:start + length]

    def count(self, minimum_item_bytes: int) -> int:
        value: int
        (value,) = self.unpack(_INT32)
        remaining = len(self.data) - self.position
        if value < 0 or value * minimum_item_bytes > remaining:
            raise InvalidRequestError(f"frame announces {value} entries but has {remaining} bytes left")
        return value

    def finish(self) -> None:
        if self.position != len(self.data):
            raise InvalidRequestError(f"{len(self.data) - self.position} stray bytes after the frame")


def _string(value: str) -> bytes:
    encoded = value.encode("utf-8")
    if len(encoded) > 0xFFFF:
        raise InvalidRequestError("string longer than 65535 bytes")
    return _UINT16.pack(len(encoded)) + encoded


# --- produce ------------------------------------------------------------------------------------


@dataclass(slots=True)
class ProducePartition:
    topic: str
    partition: int
    records: bytes | bytearray | memoryview


@dataclass(slots=True)
class ProduceRequest:
    acks: int
    timeout_ms: int
    partitions: list[ProducePartition]
    producer_id: int = -1


@dataclass(slots=True)
class ProduceResult:
    topic: str
    partition: int
    error_code: int = 0
    base_offset: int = -1
    log_append_time: int = -1
    log_start_offset: int = -1
    error_message: str = ""


def encode_produce_request(request: ProduceRequest) -> list[bytes | bytearray | memoryview]:
    """The frame as a list of pieces (record batches are not copied)."""
    pieces: list[bytes | bytearray | memoryview] = [
        _PRODUCE_HEAD.pack(request.acks, request.timeout_ms, request.producer_id)
        + _INT32.pack(len(request.partitions))]
    for item in request.partitions:
        pieces.append(_string(item.topic) + _INT32.pack(item.partition) + _INT32.pack(len(item.records)))
        pieces.append(item.records)
    return pieces


def decode_produce_request(data: bytes | bytearray | memoryview,
                           max_partition_bytes: int | None = None) -> ProduceRequest:
    reader = FrameReader(data)
    acks, timeout_ms, producer_id = reader.unpack(_PRODUCE_HEAD)
    count = reader.count(10)
    partitions = []
    for _ in range(count):
        topic = reader.string()
        (partition,) = reader.unpack(_INT32)
        partitions.append(ProducePartition(topic, partition, reader.blob(max_partition_bytes)))
    reader.finish()
    return ProduceRequest(acks, timeout_ms, partitions, producer_id)


def encode_produce_response(results: Iterable[ProduceResult]) -> bytes:
    items = list(results)
    parts = [_INT32.pack(len(items))]
    for item in items:
        parts.append(_string(item.topic))
        parts.append(_PRODUCE_RESULT.pack(item.partition, item.error_code, item.base_offset, item.log_append_time,
                                          item.log_start_offset))
        parts.append(_string(item.error_message))
    return b"".join(parts)


def decode_produce_response(data: bytes | bytearray | memoryview) -> list[ProduceResult]:
    reader = FrameReader(data)
    results = []
    for _ in range(reader.count(2 + _PRODUCE_RESULT.size + 2)):
        topic = reader.string()
        partition, error_code, base_offset, append_time, start_offset = reader.unpack(_PRODUCE_RESULT)
        results.append(ProduceResult(topic, partition, error_code, base_offset, append_time, start_offset,
                                     reader.string()))
    reader.finish()
    return results


# --- fetch --------------------------------------------------------------------------------------


@dataclass(slots=True)
class FetchPartition:
    topic: str
    partition: int
    fetch_offset: int
    partition_max_bytes: int = 1024 * 1024
    current_leader_epoch: int = NO_EPOCH
    last_fetched_epoch: int = NO_EPOCH
    log_start_offset: int = -1


@dataclass(slots=True)
class FetchSessionRequest:
    """A follower's fetch session (Kafka's KIP-227 incremental fetch): ``session_id`` 0 with
    ``epoch`` 0 opens a session with every partition the fetch carries; a later fetch names
    the session and its next epoch, carries only the partitions whose position changed, and
    lists the partitions the follower no longer fetches from this leader in ``forgotten``."""

    session_id: int = 0
    epoch: int = 0
    forgotten: list[tuple[str, int]] = field(default_factory=list)


@dataclass(slots=True)
class FetchRequest:
    partitions: list[FetchPartition]
    replica_id: int = CONSUMER_REPLICA_ID
    max_wait_ms: int = 500
    min_bytes: int = 1
    max_bytes: int = 50 * 1024 * 1024
    isolation_level: int = READ_UNCOMMITTED
    #: A follower's broker epoch (the czxid of its ``/brokers/ids/<id>`` registration); the
    #: leader refuses a follower fetch without the current one.
    replica_epoch: int = NO_BROKER_EPOCH
    #: A follower's fetch session (None: the fetch stands alone and is answered for every partition).
    session: FetchSessionRequest | None = None

    @property
    def is_from_follower(self) -> bool:
        return self.replica_id >= 0


@dataclass(slots=True)
class FetchResult:
    topic: str
    partition: int
    error_code: int = 0
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    records: bytes | bytearray | memoryview = b""
    error_message: str = ""
    diverging_epoch: int = NO_EPOCH
    diverging_end_offset: int = -1
    leader_id: int = -1
    leader_epoch: int = NO_EPOCH
    #: read_committed only: (producer id, first offset) of each aborted transaction that
    #: overlaps the records (None for read_uncommitted and followers).
    aborted_transactions: list[tuple[int, int]] | None = None


def encode_fetch_request(request: FetchRequest) -> bytes:
    parts = [_FETCH_HEAD.pack(request.replica_id, request.replica_epoch, request.max_wait_ms, request.min_bytes,
                              request.max_bytes, request.isolation_level), _INT32.pack(len(request.partitions))]
    for item in request.partitions:
        parts.append(_string(item.topic))
        parts.append(_FETCH_PARTITION.pack(item.partition, item.fetch_offset, item.current_leader_epoch,
                                           item.last_fetched_epoch, item.log_start_offset,
                                           item.partition_max_bytes))
    session = request.session
    if session is not None:  # a trailer: the session, its epoch and the forgotten partitions
        parts.append(_SESSION_HEAD.pack(session.session_id, session.epoch, len(session.forgotten)))
        for topic, number in session.forgotten:
            parts.append(_string(topic) + _INT32.pack(number))
    return b"".join(parts)


def decode_fetch_request(data: bytes | bytearray | memoryview) -> FetchRequest:
    reader = FrameReader(data)
    replica_id, replica_epoch, max_wait_ms, min_bytes, max_bytes, isolation = reader.unpack(_FETCH_HEAD)
    partitions = []
    for _ in range(reader.count(2 + _FETCH_PARTITION.size)):
        topic = reader.string()
        partition, offset, current_epoch, last_epoch, start_offset, partition_max = reader.unpack(_FETCH_PARTITION)
        partitions.append(FetchPartition(topic, partition, offset, partition_max, current_epoch, last_epoch,
                                         start_offset))
    session = None
    if reader.position < len(reader.data):
        session_id, epoch, count = reader.unpack(_SESSION_HEAD)
        if session_id < 0 or epoch < 0 or count < 0 or count * 6 > len(reader.data) - reader.position:
            raise InvalidRequestError("a fetch session's id and epoch are not negative; its forgotten "
                                      "partitions fit the frame")
        session = FetchSessionRequest(session_id, epoch, [(reader.string(), reader.unpack(_INT32)[0])
                                                          for _ in range(count)])
        if replica_id < 0:
            raise InvalidRequestError("only a follower's fetch opens a fetch session")
    reader.finish()
    if max_wait_ms < 0 or min_bytes < 0 or max_bytes < 0 or isolation not in (READ_UNCOMMITTED, READ_COMMITTED):
        raise InvalidRequestError("fetch limits must not be negative; isolation level is 0 or 1")
    if replica_id < DEBUGGING_REPLICA_ID:
        raise InvalidRequestError(f"replica id {replica_id} is neither a consumer (-1, -2) nor a broker id")
    return FetchRequest(partitions, replica_id, max_wait_ms, min_bytes, max_bytes, isolation, replica_epoch, session)


def encode_fetch_response(results: Iterable[FetchResult]) -> list[bytes | bytearray | memoryview]:
    items = list(results)
    pieces: list[bytes | bytearray | memoryview] = [_INT32.pack(len(items))]
    for item in items:
        pieces.append(_string(item.topic) + _FETCH_RESULT.pack(
            item.partition, item.error_code, item.high_watermark, item.last_stable_offset, item.log_start_offset,
            item.diverging_epoch, item.diverging_end_offset, item.leader_id, item.leader_epoch)
            + _string(item.error_message) + _INT32.pack(len(item.records)))
        if item.records:
            pieces.append(item.records)
    aborted = [(index, item.aborted_transactions) for index, item in enumerate(items)
               if item.aborted_transactions is not None]
    if aborted:
        trailer = [_INT32.pack(len(aborted))]
        for index, transactions in aborted:
            trailer.append(_INT32.pack(index) + _INT32.pack(len(transactions)))
            trailer.extend(_ABORTED_TXN.pack(producer_id, first_offset) for producer_id, first_offset in transactions)
        pieces.append(b"".join(trailer))
    return pieces


def encode_session_fetch_response(session_id: int, error_code: int,
                                  results: Iterable[FetchResult]) -> list[bytes | bytearray | memoryview]:
    """The answer to a session fetch: the session's id (0 when none is open) and the error of
    the session as a whole (FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH), then the
    partitions as :func:`encode_fetch_response` writes them."""
    return [_SESSION_ANSWER.pack(session_id, error_code), *encode_fetch_response(results)]


def decode_session_fetch_response(data: bytes | bytearray | memoryview) -> tuple[int, int, list[FetchResult]]:
    """(session id, session error code, results) of :func:`encode_session_fetch_response`."""
    reader = FrameReader(data)
    session_id, error_code = reader.unpack(_SESSION_ANSWER)
    return session_id, error_code, _read_fetch_results(reader)


def decode_fetch_response(data: bytes | bytearray | memoryview) -> list[FetchResult]:
    return _read_fetch_results(FrameReader(data))


def _read_fetch_results(reader: FrameReader) -> list[FetchResult]:
    results = []
    for _ in range(reader.count(2 + _FETCH_RESULT.size + 6)):
        topic = reader.string()
        (partition, error_code, high_watermark, last_stable, start_offset, diverging_epoch, diverging_end,
         leader_id, leader_epoch) = reader.unpack(_FETCH_RESULT)
        message = reader.string()
        records = reader.blob()
        results.append(FetchResult(topic, partition, error_code, high_watermark, last_stable, start_offset,
                                   records, message, diverging_epoch, diverging_end, leader_id, leader_epoch))
    if reader.position < len(reader.data):  # the aborted transactions of a read_committed fetch
        for _ in range(reader.count(8)):
            index, number = reader.unpack(_INDEX_AND_COUNT)
            if not 0 <= index < len(results) or number < 0 \
                    or number * _ABORTED_TXN.size > len(reader.data) - reader.position:
                raise InvalidRequestError(f"aborted transactions of result {index} do not fit the frame")
            results[index].aborted_transactions = [reader.unpack(_ABORTED_TXN) for _ in range(number)]
    reader.finish()
    return results


# --- JSON bodies and errors ---------------------------------------------------------------------


def error_body(error: BrokerResponseError) -> dict[str, Any]:
    """The JSON body of a failed request."""
    return {"error_code": error.errno, "error": error.message, "message": str(error.args[0]) if error.args else
            error.description}


def error_from_body(body: Mapping[str, Any], status: int) -> BrokerResponseError:
    """Rebuild the named error from a failed response's JSON body."""
    code = body.get("error_code")
    cls = errors.for_code(code) if isinstance(code, int) else errors.for_name(str(body.get("error", "")))
    message = str(body.get("message") or body.get("error") or f"HTTP {status}")
    return cls(message)


def error_for(code: int, message: str = "") -> BrokerResponseError:
    """An error instance for a per-partition or per-topic code (code must not be 0)."""
    cls = errors.for_code(code)
    return cls(message or cls.description)


#: Largest JSON body of the small JSON calls (the records route allows socket.request.max.bytes).
MAX_JSON_BODY_BYTES = 8 * 1024 * 1024
#: Deepest nesting of arrays and objects a JSON body may have (the API needs 4).
MAX_JSON_DEPTH = 32
#: Longest number literal: an int64 has at most 19 digits and a sign; a double needs ~25 characters.
MAX_JSON_NUMBER_CHARS = 32
INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1
INT32_MIN = -(1 << 31)
INT32_MAX = (1 << 31) - 1
#: Longest string Kafka's protocol can carry (int16 length), e.g. in group and offset records.
MAX_STRING_BYTES = 32767


def _json_int(text: str) -> int:
    if len(text) > MAX_JSON_NUMBER_CHARS:
        raise InvalidRequestError(f"a number of {len(text)} characters is too long for any field")
    return int(text)


def _json_float(text: str) -> float:
    if len(text) > MAX_JSON_NUMBER_CHARS:
        raise InvalidRequestError(f"a number of {len(text)} characters is too long for any field")
    value = float(text)
    if not math.isfinite(value):
        raise InvalidRequestError(f"the number {text} is out of range")
    return value


def _json_constant(name: str) -> Any:
    raise InvalidRequestError(f"{name} is not a JSON value")


def _json_depth_problem(value: Any) -> str | None:
    """Why ``value`` nests too deeply (iteratively: no recursion on hostile input), or None."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > MAX_JSON_DEPTH:
            return f"the JSON body nests deeper than {MAX_JSON_DEPTH} levels"
        if isinstance(item, dict):
            stack.extend((child, depth + 1) for child in item.values() if isinstance(child, (dict, list)))
        elif isinstance(item, list):
            stack.extend((child, depth + 1) for child in item if isinstance(child, (dict, list)))
    return None


def parse_json(data: bytes | bytearray | memoryview, max_bytes: int = MAX_JSON_BODY_BYTES) -> dict[str, Any]:
    """Decode a JSON request body that must be an object, bounded in size, depth and number length.

    An empty body is ``{}``. Malformed, too deep, absurd numbers (beyond
    :data:`MAX_JSON_NUMBER_CHARS` characters, NaN, infinities) → InvalidRequestError; larger
    than ``max_bytes`` → MessageSizeTooLargeError.
    """
    if len(data) > max_bytes:
        raise errors.MessageSizeTooLargeError(f"a JSON body of {len(data)} bytes exceeds the limit of {max_bytes}")
    try:
        value = json.loads(bytes(data) or b"{}", parse_int=_json_int, parse_float=_json_float,
                           parse_constant=_json_constant)
    except RecursionError:
        raise InvalidRequestError(f"the JSON body nests deeper than {MAX_JSON_DEPTH} levels") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InvalidRequestError(f"malformed JSON body: {exc}") from None
    if not isinstance(value, dict):
        raise InvalidRequestError("the JSON body must be an object")
    problem = _json_depth_problem(value)
    if problem:
        raise InvalidRequestError(problem)
    return value


def dumps(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode("utf-8")


def _kind_names(kinds: tuple[type, ...]) -> str:
    names = {int: "an integer", str: "a string", bool: "a boolean", list: "an array", dict: "an object",
             float: "a number"}
    return " or ".join(names.get(kind, kind.__name__) for kind in kinds)


def _typed(value: Any, kinds: tuple[type, ...], what: str) -> Any:
    """``value`` when it is one of ``kinds`` (bool is not an int; ints are int64), else InvalidRequestError."""
    if isinstance(value, bool) and bool not in kinds:
        raise InvalidRequestError(f"{what} must be {_kind_names(kinds)}, not a boolean")
    if not isinstance(value, kinds):
        raise InvalidRequestError(f"{what} must be {_kind_names(kinds)}, not {type(value).__name__}")
    if isinstance(value, int) and not isinstance(value, bool) and not INT64_MIN <= value <= INT64_MAX:
        raise InvalidRequestError(f"{what} is out of the 64-bit integer range")
    return value


def require(body: Any, name: str, kind: type | tuple[type, ...], default: Any = ..., *,
            minimum: int | None = None, maximum: int | None = None) -> Any:
    """Field ``name`` of a JSON object, type-checked (bool is not an int; ints fit in 64 bits,
    and in [minimum, maximum] when given, e.g. :data:`INT32_MAX` for a Kafka int32 field).

    ``body`` itself must be an object: an item of a list that is ``null``, a number or a string
    is an INVALID_REQUEST, not a crash. A missing or ``null`` field is ``default`` when given,
    else an INVALID_REQUEST.
    """
    if not isinstance(body, Mapping):
        raise InvalidRequestError(f"expected an object with field {name!r}, got {_json_type(body)}")
    if name not in body or body[name] is None:
        if default is ...:
            raise InvalidRequestError(f"missing field {name!r}")
        return default
    value = _typed(body[name], kind if isinstance(kind, tuple) else (kind,), f"field {name!r}")
    if isinstance(value, int) and not isinstance(value, bool) and (
            (minimum is not None and value < minimum) or (maximum is not None and value > maximum)):
        raise InvalidRequestError(f"field {name!r} must be in [{minimum}, {maximum}], got {value}")
    return value


def check_string_lengths(body: Any, max_bytes: int = MAX_STRING_BYTES) -> None:
    """Every string (and object key) in ``body`` fits in ``max_bytes`` UTF-8 bytes (Kafka's
    int16-length strings), else INVALID_REQUEST."""
    stack = [body]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if len(item) > max_bytes // 4 and len(item.encode("utf-8")) > max_bytes:
                raise InvalidRequestError(f"a string of {len(item.encode('utf-8'))} bytes exceeds {max_bytes}")
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def require_objects(body: Any, name: str, default: Any = ...) -> Any:
    """Field ``name``: an array whose every item is an object (or ``default`` when absent)."""
    items = require(body, name, list, default)
    if items is default and default is not ...:
        return default
    for index, item in enumerate(items):
        if not isinstance(item, dict):
            raise InvalidRequestError(f"item {index} of {name!r} must be an object, got {_json_type(item)}")
    return items


def require_list_of(body: Any, name: str, kind: type | tuple[type, ...], default: Any = ...) -> Any:
    """Field ``name``: an array whose every item is of ``kind`` (or ``default`` when absent)."""
    items = require(body, name, list, default)
    if items is default and default is not ...:
        return default
    kinds = kind if isinstance(kind, tuple) else (kind,)
    for index, item in enumerate(items):
        _typed(item, kinds, f"item {index} of {name!r}")
    return items


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    return {bool: "a boolean", int: "a number", float: "a number", str: "a string", list: "an array",
            dict: "an object"}.get(type(value), type(value).__name__)


def parse_acks(value: Any) -> int:
    """Kafka's acks values: 0, 1, -1 / "all" (as an integer or a string)."""
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise errors.InvalidRequiredAcksError(f"acks must be 0, 1, -1 or all, got {value!r}")
    if isinstance(value, str):
        if value.strip().lower() == "all":
            return -1
        try:
            value = int(value)
        except ValueError:
            raise errors.InvalidRequiredAcksError(f"acks must be 0, 1, -1 or all, got {value!r}") from None
    if value not in (0, 1, -1):
        raise errors.InvalidRequiredAcksError(f"acks must be 0, 1, -1 or all, got {value!r}")
    return int(value)


@dataclass(frozen=True)
class BrokerEndpoint:
    """A broker as metadata reports it."""

    broker_id: int
    host: str
    port: int
    rack: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"id": self.broker_id, "host": self.host, "port": self.port, "rack": self.rack}

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> BrokerEndpoint:
        return cls(int(body["id"]), str(body["host"]), int(body["port"]), body.get("rack"))

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True)
class PartitionMetadata:
    partition: int
    leader: int
    leader_epoch: int
    replicas: list[int]
    isr: list[int]
    offline_replicas: list[int] = field(default_factory=list)
    error_code: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"partition": self.partition, "leader": self.leader, "leader_epoch": self.leader_epoch,
                "replicas": self.replicas, "isr": self.isr, "offline_replicas": self.offline_replicas,
                "error_code": self.error_code}

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> PartitionMetadata:
        return cls(int(body["partition"]), int(body["leader"]), int(body.get("leader_epoch", -1)),
                   [int(x) for x in body.get("replicas", [])], [int(x) for x in body.get("isr", [])],
                   [int(x) for x in body.get("offline_replicas", [])], int(body.get("error_code", 0)))


@dataclass(frozen=True)
class TopicMetadata:
    name: str
    partitions: list[PartitionMetadata]
    error_code: int = 0
    is_internal: bool = False
    topic_id: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "error_code": self.error_code, "is_internal": self.is_internal,
                "topic_id": self.topic_id, "partitions": [partition.to_json() for partition in self.partitions]}

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> TopicMetadata:
        return cls(str(body["name"]), [PartitionMetadata.from_json(item) for item in body.get("partitions", [])],
                   int(body.get("error_code", 0)), bool(body.get("is_internal", False)), str(body.get("topic_id", "")))


@dataclass(frozen=True)
class ClusterMetadata:
    """A metadata response: brokers, controller and topics."""

    cluster_id: str
    controller_id: int
    brokers: list[BrokerEndpoint]
    topics: list[TopicMetadata]

    def to_json(self) -> dict[str, Any]:
        return {"cluster_id": self.cluster_id, "controller_id": self.controller_id,
                "brokers": [broker.to_json() for broker in self.brokers],
                "topics": [topic.to_json() for topic in self.topics]}

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> ClusterMetadata:
        return cls(str(body.get("cluster_id", "")), int(body.get("controller_id", -1)),
                   [BrokerEndpoint.from_json(item) for item in body.get("brokers", [])],
                   [TopicMetadata.from_json(item) for item in body.get("topics", [])])


def java_string_hash(value: str) -> int:
    """Java's String.hashCode over UTF-16 code units, as a signed 32-bit int."""
    encoded = value.encode("utf-16-be")
    result = 0
    for index in range(0, len(encoded), 2):
        result = (31 * result + ((encoded[index] << 8) | encoded[index + 1])) & 0xFFFFFFFF
    return result - (1 << 32) if result >= 1 << 31 else result


def group_partition(group_id: str, partitions: int) -> int:
    """The ``__consumer_offsets`` partition that coordinates ``group_id``."""
    hashed = java_string_hash(group_id)
    positive = 0 if hashed == -(1 << 31) else abs(hashed)
    return positive % partitions
