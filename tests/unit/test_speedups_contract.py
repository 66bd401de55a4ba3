"""The compiled record codec (kafkalite.record._speedups) against its pure-Python twin.

For the same input both must give equal results, or both raise the same error class: encoding
(equal bytes), decoding into Records, validation (with the producer rules), the consumer's
ConsumerRecords (offset windows, deserializers, LogAppendTime) and values-only decoding. Inputs
are random record sets (hypothesis) and damaged records sections: byte flips, truncations,
insertions, wrong counts, overlong and extreme varints. The tests import the extension directly,
so they also run when ``KAFKALITE_NO_EXTENSIONS=1`` makes the rest of the suite use Python.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from kafkalite.client import fetcher
from kafkalite.client.types import ConsumerRecord
from kafkalite.errors import CorruptRecordError, InvalidRecordError
from kafkalite.record import decoder
from kafkalite.record.batch import RecordBatch, _assemble, build_batch, py_encode_records
from kafkalite.record.speedups import EXTENSION
from kafkalite.record.varint import encode_varint

try:
    from kafkalite.record import _speedups as compiled
except ImportError:  # pragma: no cover - a machine without a compiler
    pytest.skip("the compiled extension is not built (no C compiler at install time)", allow_module_level=True)

compiled.configure(CorruptRecordError, InvalidRecordError)
BASE_TIMESTAMP = 1_700_000_000_000
INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1


def outcome(call: Callable[[], Any]) -> Any:
    """The call's result, or the class of the kafkalite error it raised."""
    try:
        return call()
    except (CorruptRecordError, InvalidRecordError) as exc:
        return type(exc)


# --- the random record sets --------------------------------------------------------------------

blobs = st.one_of(st.none(), st.binary(max_size=40), st.binary(min_size=120, max_size=300))
header_names = st.text(max_size=6)
headers_of_one = st.lists(st.tuples(header_names, st.one_of(st.none(), st.binary(max_size=8))), max_size=3)
deltas = st.one_of(st.just(0), st.integers(-(1 << 20), 1 << 20), st.integers(INT64_MIN // 4, INT64_MAX // 4))


@st.composite
def record_sets(draw: st.DrawFn) -> tuple[list[bytes | None], list[bytes | None] | None, list[int] | None,
                                          list[list[tuple[str, bytes | None]]] | None]:
    count = draw(st.integers(1, 40))
    values = [draw(blobs) for _ in range(count)]
    keys = [draw(blobs) for _ in range(count)] if draw(st.booleans()) else None
    timestamp_deltas = [draw(deltas) for _ in range(count)] if draw(st.booleans()) else None
    headers = [draw(headers_of_one) for _ in range(count)] if draw(st.booleans()) else None
    return values, keys, timestamp_deltas, headers


FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FAST
@given(record_sets(), st.sampled_from([0, BASE_TIMESTAMP, -5]))
def test_encoding_gives_the_same_bytes(records: Any, base_timestamp: int) -> None:
    values, keys, timestamp_deltas, headers = records
    timestamps = None if timestamp_deltas is None else [base_timestamp + delta for delta in timestamp_deltas]
    assert compiled.encode_records(values, keys, timestamps, headers, base_timestamp) == \
        py_encode_records(values, keys, timestamps, headers, base_timestamp) == \
        py_encode_records(values, keys, timestamp_deltas, headers)


@pytest.mark.parametrize("values", [
    [b"a", bytearray(b"bc"), memoryview(b"def"), None],  # any buffer is a value
    [b"a", "text"],  # text is not
    [b"a", 5],
])
def test_encoding_takes_buffers_and_refuses_other_values_alike(values: list[Any]) -> None:
    keys = [memoryview(b"k"), None, bytearray(b"kk"), b"k"][:len(values)]
    timestamps = [BASE_TIMESTAMP + 1] * len(values)  # one int object for every record
    if all(value is None or not isinstance(value, (str, int)) for value in values):
        assert compiled.encode_records(values, keys, timestamps, None, BASE_TIMESTAMP) == \
            py_encode_records(values, keys, timestamps, None, BASE_TIMESTAMP)
        return
    with pytest.raises(TypeError):
        py_encode_records(values, keys, timestamps, None, BASE_TIMESTAMP)
    with pytest.raises(TypeError, match="must be bytes or None"):
        compiled.encode_records(values, keys, timestamps, None, BASE_TIMESTAMP)


def test_encoding_keeps_the_records_it_reads_while_headers_run_python_code() -> None:
    values = [b"x" * 50 for _ in range(4)]
    timestamps = [BASE_TIMESTAMP + index for index in range(4)]
    expected = py_encode_records(list(values), None, list(timestamps), [[("h", b"1")]] * 4, BASE_TIMESTAMP)

    class Meddling(list[tuple[str, bytes]]):
        """Headers whose truth test empties the caller's lists (and frees what they held)."""

        def __bool__(self) -> bool:
            values.clear()
            timestamps.clear()
            return True

    headers = [Meddling([("h", b"1")]) for _ in range(4)]
    given = (list(values), list(timestamps))
    values[:], timestamps[:] = given
    assert compiled.encode_records(values, None, timestamps, headers, BASE_TIMESTAMP) == expected


def both_decodes(data: bytes, count: int, base_offset: int, base_timestamp: int,
                 last_offset_delta: int | None) -> tuple[Any, Any]:
    python = outcome(lambda: decoder.py_decode_records(data, count, base_offset, base_timestamp, last_offset_delta))
    native = outcome(lambda: compiled.decode_records(data, count, base_offset, base_timestamp, last_offset_delta,
                                                     decoder.Record))
    return python, native


def both_validations(data: bytes, count: int, last_offset_delta: int, base_timestamp: int, require_keys: bool,
                     contiguous: bool) -> tuple[Any, Any]:
    python = outcome(lambda: decoder.py_validate_records(data, count, last_offset_delta, base_timestamp,
                                                         require_keys=require_keys, contiguous=contiguous))
    native = outcome(lambda: compiled.validate_records(data, count, last_offset_delta, base_timestamp, require_keys,
                                                       contiguous))
    return python, native


@FAST
@given(record_sets(), st.integers(0, 1 << 40))
def test_decoding_and_validation_agree_on_valid_sections(records: Any, base_offset: int) -> None:
    values, keys, timestamp_deltas, headers = records
    data = py_encode_records(values, keys, timestamp_deltas, headers)
    count = len(values)
    python, native = both_decodes(data, count, base_offset, BASE_TIMESTAMP, count - 1)
    assert python == native
    if timestamp_deltas is None or all(INT64_MIN <= BASE_TIMESTAMP + delta <= INT64_MAX for delta in timestamp_deltas):
        assert isinstance(native, list) and [record.value for record in native] == values
    for require_keys in (False, True):
        python_check, native_check = both_validations(data, count, count - 1, BASE_TIMESTAMP, require_keys, True)
        assert python_check == native_check


def mutations(data: bytes, generator: random.Random) -> list[bytes]:
    """Damaged copies of a records section: flips, truncations, insertions, deletions."""
    out = []
    for _ in range(12):
        damaged = bytearray(data)
        kind = generator.randrange(5)
        if kind == 0 and damaged:
            damaged[generator.randrange(len(damaged))] ^= 1 << generator.randrange(8)
        elif kind == 1 and damaged:
            damaged[generator.randrange(len(damaged))] = generator.choice((0x00, 0x01, 0x7F, 0x80, 0xFF))
        elif kind == 2:
            del damaged[generator.randrange(len(damaged) + 1):]
        elif kind == 3:
            damaged.insert(generator.randrange(len(damaged) + 1), generator.randrange(256))
        elif damaged:
            del damaged[generator.randrange(len(damaged))]
        out.append(bytes(damaged))
    return out


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(record_sets(), st.integers(0, 2**32))
def test_damaged_sections_are_refused_alike(records: Any, seed: int) -> None:
    values, keys, timestamp_deltas, headers = records
    data = py_encode_records(values, keys, timestamp_deltas, headers)
    generator = random.Random(seed)
    count = len(values)
    for damaged in mutations(data, generator):
        for claimed in (count, count - 1, count + 1):
            python, native = both_decodes(damaged, claimed, 7, BASE_TIMESTAMP, count - 1)
            assert python == native, (damaged.hex(), claimed)
            python_check, native_check = both_validations(damaged, claimed, count - 1, BASE_TIMESTAMP, False, True)
            assert python_check == native_check, (damaged.hex(), claimed)


@pytest.mark.parametrize("data", [
    b"", b"\x00", b"\x01", b"\xff\xff\xff\xff\xff\xff", b"\x0c\x00\x00\x00\x01\x01\x00",
    # timestamp deltas as ten-byte varlongs: 2**63 (fits when the base is far below zero) and past 2**64
    encode_varint(15) + b"\x00" + b"\x80" * 9 + b"\x01" + b"\x00\x01\x01\x00",
    encode_varint(15) + b"\x00" + b"\x80" * 9 + b"\x02" + b"\x00\x01\x01\x00",
    encode_varint(15) + b"\x00" + b"\xff" * 9 + b"\x7f" + b"\x00\x01\x01\x00",
    encode_varint(15) + b"\x00" + b"\x80" * 10 + b"\x00\x01\x01\x00",
    # a header key that is not UTF-8, a header count that cannot fit, a null header key
    b"\x14\x00\x00\x00\x01\x02v\x02\x04\xff\xfe\x02h",
    b"\x0e\x00\x00\x00\x01\x02v\x7e\x00\x00",
    b"\x0e\x00\x00\x00\x01\x02v\x02\x01\x01",
    # non-canonical varints: a five-byte zero length, a two-byte null key
    b"\x80\x80\x80\x80\x00", b"\x10\x00\x00\x00\x81\x00\x02v\x00",
])
@pytest.mark.parametrize("base_timestamp", [BASE_TIMESTAMP, INT64_MIN + 64, INT64_MAX - 64, INT64_MIN + 63])
def test_crafted_sections_agree(data: bytes, base_timestamp: int) -> None:
    for count in (0, 1, 2):
        for last in (None, 0, 5):
            python, native = both_decodes(data, count, (1 << 63) - 2, base_timestamp, last)
            assert python == native, (data.hex(), count, last)


def test_uniform_records_past_their_last_offset_delta_are_refused_by_both() -> None:
    data = py_encode_records([b"v" * 10] * 5, None, None, None)
    python, native = both_validations(data, 5, 3, 0, False, False)
    assert python is native is CorruptRecordError


def test_producer_rules_raise_invalid_record() -> None:
    gapped = py_encode_records([b"a"], None, None, None)  # offset delta 0 of a batch that claims two records' deltas
    assert both_validations(gapped, 1, 1, 0, False, False) == (None, None)
    keyless = py_encode_records([b"a", b"b"], [b"k", None], None, None)
    assert both_validations(keyless, 2, 1, 0, True, True) == (InvalidRecordError, InvalidRecordError)
    assert both_validations(keyless, 2, 1, 0, False, True) == (None, None)


# --- the consumer's records ----------------------------------------------------------------------


def consumer_outcomes(raw: bytes, low: int, high: int, key_deserializer: Any, value_deserializer: Any,
                      monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Any]:
    batch = RecordBatch(raw)
    python = outcome(lambda: fetcher.py_decode_records(batch, "t", 3, low, high, key_deserializer, value_deserializer))
    monkeypatch.setattr(fetcher, "_EXTENSION", compiled)
    native = outcome(lambda: fetcher.decode_records(batch, "t", 3, low, high, key_deserializer, value_deserializer))
    values_python = outcome(lambda: fetcher.py_decode_values(batch))
    values_native = outcome(lambda: fetcher.decode_values(batch))
    monkeypatch.setattr(fetcher, "_EXTENSION", EXTENSION)
    assert values_python == values_native
    return python, native


@FAST
@given(record_sets(), st.integers(0, 50), st.integers(0, 50), st.booleans(), st.booleans())
def test_consumer_records_agree(records: Any, low: int, span: int, log_append_time: bool, deserialize: bool) -> None:
    values, keys, timestamp_deltas, headers = records
    timestamps: Any = BASE_TIMESTAMP if timestamp_deltas is None else [
        BASE_TIMESTAMP + (delta % 100_000) for delta in timestamp_deltas]
    raw = build_batch(values, keys=keys, timestamps=timestamps, headers=headers, base_offset=100,
                      partition_leader_epoch=4, timestamp_type=1 if log_append_time else 0)
    with pytest.MonkeyPatch.context() as monkeypatch:
        python, native = consumer_outcomes(raw, 100 + low, 100 + low + span, bytes.hex if deserialize else None,
                                           len if deserialize else None, monkeypatch)
    assert python == native
    assert isinstance(native, list) and all(type(record) is ConsumerRecord for record in native)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(record_sets(), st.integers(0, 2**32))
def test_consumer_refuses_damage_alike(records: Any, seed: int) -> None:
    values, keys, _deltas, headers = records
    section = py_encode_records(values, keys, None, headers)
    generator = random.Random(seed)
    with pytest.MonkeyPatch.context() as monkeypatch:
        for damaged in mutations(section, generator):
            raw = _assemble(damaged, len(values), len(values) - 1, BASE_TIMESTAMP, BASE_TIMESTAMP, 0, 0, -1, -1, -1,
                            -1, 0, False)
            python, native = consumer_outcomes(raw, 0, 1 << 40, None, None, monkeypatch)
            assert python == native, damaged.hex()


def test_the_suite_runs_the_implementation_the_environment_asks_for() -> None:
    from kafkalite.record.speedups import extensions_disabled

    assert (EXTENSION is None) == extensions_disabled()


def test_a_timestamp_delta_of_two_to_the_63_is_kept_whole() -> None:
    data = encode_varint(15) + b"\x00" + b"\x80" * 9 + b"\x02" + b"\x00\x01\x01\x00"  # varlong 2**64: delta 2**63
    python, native = both_decodes(data, 1, 0, INT64_MIN + 64, None)
    assert python == native == [decoder.Record(0, 64, None, None, ())]
