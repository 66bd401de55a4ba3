"""The schema registry's view and write decisions over ``_schemas`` records (pure functions), the
record format, the serdes' wire format and the ``schema.registry.listeners`` option."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from kafkalite.config import BrokerConfig
from kafkalite.errors import ConfigError, LeaderNotAvailableError, UnknownTopicOrPartitionError
from kafkalite.registry import writes
from kafkalite.registry.errors import (
    IncompatibleSchemaError,
    InvalidSubjectError,
    InvalidVersionError,
    OperationNotPermittedError,
    ReferenceExistsError,
    SchemaNotFoundError,
    StoreError,
    SubjectNotFoundError,
    SubjectNotSoftDeletedError,
    VersionNotFoundError,
    VersionNotSoftDeletedError,
    error_from_body,
)
from kafkalite.registry.records import RecordKey, SchemaValue
from kafkalite.registry.schemas import AVRO, Reference
from kafkalite.registry.serdes import (
    SerializationError,
    frame,
    record_name_strategy,
    topic_name_strategy,
    topic_record_name_strategy,
    unframe,
)
from kafkalite.registry.store import SchemaStore, TopicRead
from kafkalite.registry.view import LATEST, RegistryView, parse_version


def schema(name: str, *fields: tuple[str, Any]) -> str:
    return json.dumps({"type": "record", "name": name, "fields": [{"name": field, "type": kind}
                                                                   for field, kind in fields]})


class Log:
    """A ``_schemas`` partition in a list: what the writer appends, the view reads back."""

    def __init__(self) -> None:
        self.records: list[tuple[bytes, bytes | None]] = []
        self.view = RegistryView()

    def write(self, decision: tuple[list[tuple[bytes, bytes | None]], Any]) -> Any:
        records, answer = decision
        for key, value in records:
            self.view.apply(len(self.records), key, value)
            self.records.append((key, value))
        return answer

    def replay(self) -> RegistryView:
        """A fresh view from the log, as compaction would leave it (latest value per key)."""
        latest: dict[bytes, tuple[int, bytes | None]] = {}
        for offset, (key, value) in enumerate(self.records):
            latest[key] = (offset, value)
        view = RegistryView()
        for key, (offset, value) in sorted(latest.items(), key=lambda item: item[1][0]):
            if value is not None:
                view.apply(offset, key, value)
        return view


def test_registration_assigns_ids_and_versions_and_reuses_ids() -> None:
    log = Log()
    first = log.write(writes.register(log.view, "a-value", AVRO, schema("A", ("x", "int")), ()))
    assert first == {"id": 1}
    again = log.write(writes.register(log.view, "a-value", AVRO, schema("A", ("x", "int")), ()))
    assert again == {"id": 1} and len(log.records) == 1  # nothing appended for a known schema
    shared = log.write(writes.register(log.view, "b-value", AVRO, schema("A", ("x", "int")), ()))
    assert shared == {"id": 1}
    evolved = log.write(writes.register(log.view, "a-value", AVRO,
                                        json.dumps({"type": "record", "name": "A", "fields": [
                                            {"name": "x", "type": "int"}, {"name": "y", "type": "int",
                                                                           "default": 0}]}), ()))
    assert evolved == {"id": 2} and log.view.versions("a-value") == [1, 2]
    with pytest.raises(IncompatibleSchemaError):
        writes.register(log.view, "a-value", AVRO, schema("A", ("x", "int"), ("z", "string")), ())
    assert log.view.version("a-value", LATEST).schema_id == 2


def test_soft_and_permanent_deletes_keep_ids_unique_after_compaction() -> None:
    log = Log()
    log.write(writes.register(log.view, "s", AVRO, schema("One", ("x", "int")), ()))
    log.write(writes.set_compatibility(log.view, "s", "NONE"))
    two = log.write(writes.register(log.view, "s", AVRO, schema("Two", ("x", "int")), ()))["id"]
    with pytest.raises(VersionNotSoftDeletedError):
        writes.delete_version(log.view, "s", 2, permanent=True)
    assert log.write(writes.delete_version(log.view, "s", LATEST, permanent=False)) == 2
    assert log.view.versions("s") == [1] and log.view.versions("s", deleted=True) == [1, 2]
    assert log.write(writes.delete_version(log.view, "s", 2, permanent=True)) == 2
    with pytest.raises(SchemaNotFoundError):
        log.view.by_id(two)
    with pytest.raises(SubjectNotSoftDeletedError):
        writes.delete_subject(log.view, "s", permanent=True)
    assert log.write(writes.delete_subject(log.view, "s", permanent=False)) == [1]
    with pytest.raises(SubjectNotFoundError):
        log.view.versions("s")
    assert log.write(writes.delete_subject(log.view, "s", permanent=True)) == [1]
    compacted = log.replay()
    assert compacted.subject_names(deleted=True) == [] and compacted.max_id == two
    assert log.write(writes.register(compacted, "t", AVRO, schema("Three", ("x", "int")), ())) == {"id": two + 1}


def test_references_resolve_and_protect_their_target() -> None:
    log = Log()
    log.write(writes.register(log.view, "item", AVRO, schema("Item", ("sku", "string")), ()))
    reference = Reference("Item", "item", 1)
    order = log.write(writes.register(log.view, "order", AVRO, schema("Order", ("item", "Item")), (reference,)))
    assert log.view.parsed(order["id"]).references == (reference,)
    with pytest.raises(ReferenceExistsError):
        writes.delete_version(log.view, "item", 1, permanent=False)
    assert log.view.referenced_by("item", 1) == [order["id"]]


def test_modes_and_subject_names() -> None:
    log = Log()
    log.write(writes.set_mode(log.view, None, "readonly"))
    with pytest.raises(OperationNotPermittedError):
        writes.register(log.view, "s", AVRO, '"string"', ())
    log.write(writes.set_mode(log.view, None, "IMPORT"))
    imported = log.write(writes.register(log.view, "s", AVRO, '"string"', (), schema_id=42, version=7))
    assert imported == {"id": 42} and log.view.versions("s") == [7]
    for bad in ("", "a\nb", "x" * 5000, "__GLOBAL"):
        with pytest.raises(InvalidSubjectError):
            writes.validate_subject(bad)


def test_versions_parse_like_confluent() -> None:
    assert parse_version("latest") == LATEST == parse_version("-1")
    assert parse_version("12") == 12
    for bad in ("0", "-2", "abc", "2147483648", "1.5", ""):
        with pytest.raises(InvalidVersionError):
            parse_version(bad)
    log = Log()
    log.write(writes.register(log.view, "s", AVRO, '"string"', ()))
    with pytest.raises(VersionNotFoundError):
        log.view.version("s", 2)
    with pytest.raises(SubjectNotFoundError):
        log.view.version("t", 1)


def test_records_use_confluents_keys_and_values() -> None:
    assert json.loads(RecordKey("SCHEMA", "orders-value", 3).encode()) == {
        "keytype": "SCHEMA", "subject": "orders-value", "version": 3, "magic": 1}
    assert json.loads(RecordKey("CONFIG", None).encode()) == {"keytype": "CONFIG", "subject": None, "magic": 0}
    assert json.loads(RecordKey("NOOP").encode()) == {"keytype": "NOOP", "magic": 0}
    value = SchemaValue("s", 1, 5, '"string"', "JSON", (Reference("r", "t", 2),))
    assert json.loads(value.encode()) == {"subject": "s", "version": 1, "id": 5, "schemaType": "JSON",
                                          "references": [{"name": "r", "subject": "t", "version": 2}],
                                          "schema": '"string"', "deleted": False}
    assert SchemaValue.decode(value.encode()) == value
    view = RegistryView()
    view.apply(0, b"not json", b"{}")  # skipped with a warning
    assert view.next_offset == 1 and view.subjects == {}


def test_wire_format_and_subject_strategies() -> None:
    framed = frame(258, b"body")
    assert framed == b"\x00\x00\x00\x01\x02body"
    schema_id, payload = unframe(framed)
    assert (schema_id, bytes(payload)) == (258, b"body")
    for bad in (b"", b"\x00\x00", b"\x01\x00\x00\x00\x01x"):
        with pytest.raises(SerializationError):
            unframe(bad)
    assert topic_name_strategy("orders", "shop.Order", False) == "orders-value"
    assert topic_name_strategy("orders", None, True) == "orders-key"
    assert record_name_strategy("orders", "shop.Order", False) == "shop.Order"
    assert topic_record_name_strategy("orders", "shop.Order", False) == "orders-shop.Order"


def test_error_bodies_map_back_to_errors() -> None:
    error = error_from_body(404, {"error_code": 40401, "message": "Subject 'x' not found."})
    assert isinstance(error, SubjectNotFoundError) and error.http_status == 404
    assert error_from_body(500, "oops").error_code == 500


def test_schema_registry_listeners_option() -> None:
    config = BrokerConfig.from_properties({"schema.registry.listeners": "http://0.0.0.0:8081"})
    assert config.schema_registry_address() == ("0.0.0.0", 8081) and config.unknown == ()
    assert BrokerConfig.from_properties({}).schema_registry_address() is None
    for bad in ("https://h:1", "http://h:1,http://h:2", "http://h:port", "h:8081"):
        with pytest.raises(ConfigError, match=r"schema\.registry\.listeners"):
            BrokerConfig.from_properties({"schema.registry.listeners": bad})


class MemoryTopic:
    """``_schemas``-0 in a list (an in-memory twin of the broker's partition); ``fail_reads``
    makes the next reads fail as while its leader moves."""

    def __init__(self) -> None:
        self.records: list[tuple[bytes, bytes | None]] = []
        self.fail_reads = 0
        self.present = True
        self.replica_loaded = True

    async def read(self, offset: int, timeout_ms: int) -> TopicRead:
        if not self.present or not self.replica_loaded:
            raise UnknownTopicOrPartitionError("unknown topic-partition _schemas-0")
        if self.fail_reads:
            self.fail_reads -= 1
            raise LeaderNotAvailableError("the leader is moving")
        chosen = [(number, key, value) for number, (key, value) in enumerate(self.records) if number >= offset]
        return TopicRead(chosen[:2], chosen[1][0] + 1 if len(chosen) > 1 else len(self.records),
                         len(self.records), 0)

    async def append(self, records: list[tuple[bytes, bytes | None]]) -> int:
        self.records.extend(records)
        return len(self.records) - 1

    async def ensure_topic(self) -> None:
        return None

    def leader_url(self) -> str | None:
        return None

    def has_leader(self) -> bool:
        return True

    def exists(self) -> bool:
        return self.present


def test_the_writer_catches_up_before_it_hands_out_an_id() -> None:
    async def scenario() -> None:
        topic = MemoryTopic()
        store = SchemaStore(topic, timeout_ms=5000)
        first, _ = await store.write(lambda view: writes.register(view, "a", AVRO, schema("A", ("x", "int")), ()))
        # another writer (an earlier leader) appended ids the store's view has not read yet
        foreign = SchemaValue("b", 1, 41, schema("B", ("x", "int")))
        topic.records.append((RecordKey("SCHEMA", "b", 1).encode(), foreign.encode()))
        topic.fail_reads = 3  # and the topic is briefly unreadable: the barrier's read retries
        answer, offset = await store.write(lambda view: writes.register(view, "c", AVRO, schema("C", ("x", "int")),
                                                                        ()))
        assert first == {"id": 1} and answer == {"id": 42}
        assert store.view.next_offset == offset + 1 == len(topic.records)
        view = await store.read_view()
        assert view.by_id(41).subject == "b" and view.versions("c") == [1]

    asyncio.run(scenario())


def test_a_view_that_never_reached_the_high_watermark_refuses_reads_instead_of_answering_empty() -> None:
    async def scenario() -> None:
        topic = MemoryTopic()
        value = SchemaValue("a", 1, 1, schema("A", ("x", "int")))
        topic.records.append((RecordKey("SCHEMA", "a", 1).encode(), value.encode()))
        store = SchemaStore(topic, timeout_ms=5000)
        topic.fail_reads = 1  # a broker just started: _schemas has no leader yet
        with pytest.raises(StoreError) as caught:
            await store.read_view()
        assert caught.value.retriable and caught.value.http_status == 500
        topic.fail_reads, topic.replica_loaded = 0, False  # the topic exists, its replica is not loaded yet
        with pytest.raises(StoreError):
            await store.read_view()
        topic.replica_loaded = True
        assert (await store.read_view()).versions("a") == [1]
        topic.fail_reads = 1  # once caught up, a leader that moves serves the view as it is
        assert (await store.read_view()).versions("a") == [1]

    asyncio.run(scenario())


def test_a_topic_the_cluster_does_not_have_is_an_empty_registry() -> None:
    async def scenario() -> None:
        topic = MemoryTopic()
        topic.present = False
        store = SchemaStore(topic, timeout_ms=5000)
        view = await store.read_view()
        assert view.subject_names() == [] and store.caught_up

    asyncio.run(scenario())
