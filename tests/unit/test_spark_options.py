"""The Spark source's ``kafka.isolation.level`` option: parsing, its default, its errors, and its
way to the executors (inside every planned input partition). No cluster, no Spark session."""

from __future__ import annotations

import pickle

import pytest

pytest.importorskip("pyspark", reason="the spark extra (pyspark, pyarrow) is not installed")

from kafkalite.client.types import TopicPartition
from kafkalite.spark import (
    ClusterClient,
    ReadSettings,
    SinkOptions,
    SourceOptions,
    SparkOptionError,
    plan_partitions,
)

BASE = {"kafka.bootstrap.servers": "127.0.0.1:1", "subscribe": "orders"}


@pytest.mark.parametrize("streaming", [False, True, None])
def test_the_default_is_read_committed(streaming: bool | None) -> None:
    assert SourceOptions.parse(BASE, streaming=streaming).settings.isolation_level == "read_committed"
    assert ReadSettings("127.0.0.1:1").isolation_level == "read_committed"


@pytest.mark.parametrize("key", ["kafka.isolation.level", "kafkalite.isolation.level", "Kafka.Isolation.Level"])
@pytest.mark.parametrize("value", ["read_uncommitted", "READ_UNCOMMITTED", " read_uncommitted "])
def test_read_uncommitted_is_accepted_under_either_prefix_in_any_case(key: str, value: str) -> None:
    for streaming in (False, True, None):
        parsed = SourceOptions.parse({**BASE, key: value}, streaming=streaming)
        assert parsed.settings.isolation_level == "read_uncommitted"


def test_read_committed_can_be_asked_for_explicitly() -> None:
    parsed = SourceOptions.parse({**BASE, "kafka.isolation.level": "read_committed"}, streaming=True)
    assert parsed.settings.isolation_level == "read_committed"


@pytest.mark.parametrize("value", ["serializable", "", "committed", "read-committed", "1"])
def test_any_other_value_is_refused_naming_the_option_and_the_allowed_values(value: str) -> None:
    for streaming in (False, True, None):
        with pytest.raises(SparkOptionError) as caught:
            SourceOptions.parse({**BASE, "kafka.isolation.level": value}, streaming=streaming)
        assert caught.value.option == "kafka.isolation.level"
        message = str(caught.value)
        assert message.startswith("kafkalite option 'kafka.isolation.level': ")
        assert "read_committed" in message and "read_uncommitted" in message and repr(value) in message
    with pytest.raises(SparkOptionError) as caught:
        SourceOptions.parse({**BASE, "kafkalite.isolation.level": value}, streaming=False)
    assert caught.value.option == "kafkalite.isolation.level"


def test_the_sink_does_not_take_an_isolation_level() -> None:
    # the sink writes with its own producer; a consumer setting there is a mistake, named as such
    with pytest.raises(SparkOptionError) as caught:
        SinkOptions.parse({"kafka.bootstrap.servers": "127.0.0.1:1", "topic": "t",
                           "kafka.isolation.level": "read_committed"}, streaming=True)
    assert caught.value.option == "kafka.isolation.level" and "unknown option" in str(caught.value)


def test_other_client_settings_are_refused_with_the_ones_the_source_takes() -> None:
    with pytest.raises(SparkOptionError) as caught:
        SourceOptions.parse({**BASE, "kafka.max.poll.records": "5"}, streaming=False)
    assert caught.value.option == "kafka.max.poll.records"
    assert "kafka.bootstrap.servers, kafka.isolation.level" in str(caught.value)


def test_the_driver_client_refuses_an_unknown_level_before_connecting() -> None:
    with pytest.raises(SparkOptionError) as caught:
        ClusterClient("127.0.0.1:1", "snapshot")
    assert caught.value.option == "kafka.isolation.level"


def test_the_level_travels_to_the_executors_in_every_input_partition() -> None:
    settings = SourceOptions.parse({**BASE, "kafka.isolation.level": "read_uncommitted"}, streaming=False).settings
    tp = TopicPartition("orders", 0)
    parts = plan_partitions({tp: 0}, {tp: 100}, settings, min_partitions=4, max_records_per_partition=None)
    assert len(parts) == 4
    for part in parts:
        assert pickle.loads(pickle.dumps(part)).settings.isolation_level == "read_uncommitted"
