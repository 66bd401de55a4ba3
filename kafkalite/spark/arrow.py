"""Executor-side decoding: a record batch straight into a pyarrow RecordBatch.

Concurrency: a decoder belongs to one reading task (one thread); the kernels are pure.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from kafkalite.errors import CorruptRecordError
from kafkalite.record.batch import ATTR_TIMESTAMP_TYPE, Record, RecordBatch, UniformRun, run_timestamp_deltas

_TIMESTAMP_TYPE = pa.timestamp("us", tz="UTC")
_HEADER_STRUCT = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
_HEADERS_TYPE = pa.list_(pa.field("element", _HEADER_STRUCT))


def arrow_schema(include_headers: bool) -> pa.Schema:
    """The Arrow schema Spark expects from read() (Spark's own conversion of the source schema)."""
    fields = [pa.field("key", pa.binary()), pa.field("value", pa.binary()), pa.field("topic", pa.string()),
              pa.field("partition", pa.int32()), pa.field("offset", pa.int64()),
              pa.field("timestamp", _TIMESTAMP_TYPE), pa.field("timestampType", pa.int32())]
    if include_headers:
        fields.append(pa.field("headers", _HEADERS_TYPE))
    return pa.schema(fields)


# --- executor-side decoding ----------------------------------------------------------------------


_INT32 = pa.int32()
_INT64 = pa.int64()


def _scalar(value: int) -> pa.Scalar:
    # typed scalars: handing pyarrow a bare Python int costs an import attempt per call
    return pa.scalar(value, _INT64)


class _Ramp:
    """0, 1, 2, ... (int64), grown on demand and sliced: cheap."""

    def __init__(self) -> None:
        self.size = 0
        self.wide = pa.array([], _INT64)

    def int64(self, count: int) -> pa.Array:
        if count > self.size:
            self.size = max(count, 2 * self.size, 8192)
            self.wide = pa.array(range(self.size), _INT64)
        return self.wide.slice(0, count)


_RAMP = _Ramp()


class ArrowBatchDecoder:
    """Decodes record batches of one topic-partition into pyarrow RecordBatches of the source
    schema. Executor side; one instance per read task.

    Validation is record/'s, so this decoder accepts exactly what the broker, the consumer and
    the dump tool accept: the bulk shape is recognised and checked by
    :meth:`RecordBatch.uniform_runs` and then cut into columns with a few vectorised kernels at
    the positions it checked (no Python object per record); any other batch is decoded by
    :meth:`RecordBatch.records` and its columns built from the records.
    """

    def __init__(self, topic: str, partition: int, include_headers: bool) -> None:
        self.topic = topic
        self.partition = partition
        self.include_headers = include_headers
        self.schema = arrow_schema(include_headers)
        self._constants_size = 0
        self._topic_column = pa.array([], pa.string())
        self._partition_column = pa.array([], _INT32)
        self._type_columns = (pa.array([], _INT32), pa.array([], _INT32))

    def _constants(self, count: int) -> None:
        if count <= self._constants_size:
            return
        size = max(count, 2 * self._constants_size, 8192)
        self._topic_column = pa.array([self.topic] * size, pa.string())
        self._partition_column = pa.array([self.partition] * size, _INT32)
        self._type_columns = (pa.array([0] * size, _INT32), pa.array([1] * size, _INT32))
        self._constants_size = size

    def decode(self, batch: RecordBatch, min_offset: int, max_offset: int) -> pa.RecordBatch | None:
        """The batch's records with ``min_offset <= offset < max_offset``, or None if none.
        Damage raises CorruptRecordError naming the partition and the batch's offset."""
        try:
            payload = batch.payload()
            data = payload if isinstance(payload, bytes) else payload.tobytes()
            runs = batch.uniform_runs(data)
            if runs is not None:
                columns = self._run_columns(data, runs, batch)
            else:
                columns = self._record_columns(batch.records(), batch)
        except CorruptRecordError as exc:
            raise CorruptRecordError(f"{self.topic}-{self.partition}: {exc.detail}", exc.position) from exc
        count = len(columns["offset"])
        self._constants(count)
        log_append = bool(batch.attributes & ATTR_TIMESTAMP_TYPE)
        arrays = [columns["key"], columns["value"], self._topic_column.slice(0, count),
                  self._partition_column.slice(0, count), columns["offset"], columns["timestamp"],
                  self._type_columns[1 if log_append else 0].slice(0, count)]
        if self.include_headers:
            arrays.append(columns["headers"])
        decoded = pa.RecordBatch.from_arrays(arrays, schema=self.schema)
        offsets = columns["offset"]
        if min_offset > batch.base_offset or max_offset <= batch.base_offset + batch.last_offset_delta:
            keep = pc.and_(pc.greater_equal(offsets, _scalar(min_offset)), pc.less(offsets, _scalar(max_offset)))
            decoded = decoded.filter(keep)
        return decoded if decoded.num_rows else None

    @staticmethod
    def _timestamps(millis: pa.Array) -> pa.Array:
        return pc.multiply(millis, _scalar(1000)).cast(_TIMESTAMP_TYPE)

    def _run_columns(self, data: bytes, runs: list[UniformRun], batch: RecordBatch) -> dict[str, pa.Array]:
        """Columns of the bulk shape: each run is a fixed-size binary array over the payload
        buffer, its keys and values cut out with one kernel each."""
        buffer = pa.py_buffer(data)
        keys: list[pa.Array] = []
        values: list[pa.Array] = []
        offsets: list[pa.Array] = []
        millis: list[pa.Array] = []
        log_append = bool(batch.attributes & ATTR_TIMESTAMP_TYPE)
        for run in runs:
            count = run.record_count
            records = pa.Array.from_buffers(pa.binary(run.stride), count,
                                            [None, buffer.slice(run.start, count * run.stride)])
            for at, length, out in ((run.key_at, run.key_length, keys), (run.value_at, run.value_length, values)):
                if length < 0:
                    out.append(pa.nulls(count, pa.binary()))
                else:
                    out.append(pc.binary_slice(records, at, at + length).cast(pa.binary()))
            offsets.append(pc.add(_RAMP.int64(count), _scalar(batch.base_offset + run.first_delta)))
            if log_append or not run.timestamp_columns:
                millis.append(pa.repeat(_scalar(batch.max_timestamp if log_append
                                                else batch.base_timestamp + run.timestamp_delta), count))
            else:
                millis.append(pc.add(pa.array(run_timestamp_deltas(run), _INT64), _scalar(batch.base_timestamp)))
        total = sum(run.record_count for run in runs)
        return {"key": pa.concat_arrays(keys), "value": pa.concat_arrays(values),
                "offset": pa.concat_arrays(offsets), "timestamp": self._timestamps(pa.concat_arrays(millis)),
                "headers": pa.nulls(total, _HEADERS_TYPE)}

    def _record_columns(self, records: list[Record], batch: RecordBatch) -> dict[str, pa.Array]:
        """Columns of records decoded by record/ (batches of any other shape)."""
        if batch.attributes & ATTR_TIMESTAMP_TYPE:
            millis = pa.repeat(_scalar(batch.max_timestamp), len(records))
        else:
            millis = pa.array([record.timestamp for record in records], _INT64)
        columns = {"key": pa.array([record.key for record in records], pa.binary()),
                   "value": pa.array([record.value for record in records], pa.binary()),
                   "offset": pa.array([record.offset for record in records], _INT64),
                   "timestamp": self._timestamps(millis)}
        if self.include_headers:
            columns["headers"] = pa.array(
                [[{"key": name, "value": value} for name, value in record.headers] if record.headers else None
                 for record in records], _HEADERS_TYPE)
        return columns
