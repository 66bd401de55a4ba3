/* kafkalite.record._speedups: the compiled twin of the record codec's hot loops.
 *
 * What it owns: decoding and validating the records section of a Kafka v2 record batch
 * (decode_records, validate_records, consumer_records, record_values) and encoding one
 * (encode_records). Every function accepts and rejects exactly what its pure-Python twin in
 * kafkalite/record/decoder.py and kafkalite/record/batch.py accepts and rejects, and returns
 * equal results; tests/unit/test_speedups_contract.py holds the two to that on random and
 * damaged input. Damage raises the CorruptRecordError class handed to configure(); rule
 * violations of producer batches the InvalidRecordError class.
 *
 * Concurrency: the functions are pure and hold the interpreter lock throughout; the input
 * buffer is held (PyObject_GetBuffer) for the duration of one call.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

static PyObject *corrupt_error = NULL;
static PyObject *invalid_error = NULL;

#define INT64_LOW ((__int128)INT64_MIN)
#define INT64_HIGH ((__int128)INT64_MAX)
#define MAX_OFFSET_DELTA 2147483647LL

static int
fail_corrupt(const char *message)
{
    PyErr_SetString(corrupt_error != NULL ? corrupt_error : PyExc_ValueError, message);
    return -1;
}

/* --- decoding ---------------------------------------------------------------------------- */

typedef struct {
    const unsigned char *data;
    Py_ssize_t end;
    Py_ssize_t position;
    int64_t base_timestamp;
    int64_t highest_delta;
    int64_t previous_delta;
} Walker;

typedef struct {
    int64_t offset_delta;
    int64_t timestamp;
    Py_ssize_t key_at;
    Py_ssize_t key_length; /* -1: null */
    Py_ssize_t value_at;
    Py_ssize_t value_length; /* -1: null */
    Py_ssize_t headers_at;   /* the first header's position */
    int64_t header_count;
    Py_ssize_t header_size; /* -1 without headers */
} RecordView;

/* A zigzag varint of at most five bytes (Kafka's varint; 35 bits at most, as the Python twin). */
static inline int
read_varint(Walker *walker, int64_t *out)
{
    uint64_t result = 0;
    int shift = 0;
    for (int index = 0; index < 5; index++) {
        if (walker->position >= walker->end) {
            return fail_corrupt("varint runs past the end of the buffer");
        }
        unsigned int byte = walker->data[walker->position++];
        result |= (uint64_t)(byte & 0x7F) << shift;
        if (byte < 0x80) {
            *out = (int64_t)(result >> 1) ^ -(int64_t)(result & 1);
            return 0;
        }
        shift += 7;
    }
    return fail_corrupt("varint longer than 5 bytes");
}

/* A zigzag varlong of at most ten bytes: 70 bits, kept whole as the Python twin keeps them. */
static inline int
read_varlong(Walker *walker, __int128 *out)
{
    unsigned __int128 result = 0;
    int shift = 0;
    for (int index = 0; index < 10; index++) {
        if (walker->position >= walker->end) {
            return fail_corrupt("varint runs past the end of the buffer");
        }
        unsigned int byte = walker->data[walker->position++];
        result |= (unsigned __int128)(byte & 0x7F) << shift;
        if (byte < 0x80) {
            *out = (__int128)(result >> 1) ^ -(__int128)(result & 1);
            return 0;
        }
        shift += 7;
    }
    return fail_corrupt("varint longer than 10 bytes");
}

/* The header section of one record (from its count on): checked; a tuple of (str, bytes | None)
 * pairs in *headers when headers is not NULL. */
static int
walk_headers(Walker *walker, RecordView *view, Py_ssize_t record_end, PyObject **headers)
{
    int64_t count;
    if (read_varint(walker, &count) < 0) {
        return -1;
    }
    if (count < 0 || 2 * count > (int64_t)(record_end - walker->position)) {
        return fail_corrupt("header count is impossible");
    }
    view->header_count = count;
    view->headers_at = walker->position;
    view->header_size = count ? 0 : -1;
    PyObject *items = NULL;
    if (headers != NULL) {
        items = PyTuple_New((Py_ssize_t)count);
        if (items == NULL) {
            return -1;
        }
    }
    for (int64_t index = 0; index < count; index++) {
        int64_t key_length, value_length;
        if (read_varint(walker, &key_length) < 0) {
            goto error;
        }
        if (key_length < 0 || walker->position + key_length > record_end) {
            fail_corrupt("header key length does not fit its record");
            goto error;
        }
        PyObject *name = PyUnicode_DecodeUTF8((const char *)walker->data + walker->position,
                                              (Py_ssize_t)key_length, "strict");
        if (name == NULL) {
            if (PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {
                PyErr_Clear();
                fail_corrupt("header key is not UTF-8");
            }
            goto error;
        }
        walker->position += key_length;
        if (read_varint(walker, &value_length) < 0) {
            Py_DECREF(name);
            goto error;
        }
        PyObject *value;
        if (value_length == -1) {
            value = Py_NewRef(Py_None);
        } else {
            if (value_length < 0 || walker->position + value_length > record_end) {
                Py_DECREF(name);
                fail_corrupt("header value length does not fit its record");
                goto error;
            }
            value = items == NULL ? NULL
                : PyBytes_FromStringAndSize((const char *)walker->data + walker->position, (Py_ssize_t)value_length);
            if (items != NULL && value == NULL) {
                Py_DECREF(name);
                goto error;
            }
            walker->position += value_length;
            view->header_size += (Py_ssize_t)value_length;
        }
        view->header_size += (Py_ssize_t)key_length;
        if (items == NULL) {
            Py_DECREF(name);
            Py_XDECREF(value);
            continue;
        }
        PyObject *pair = PyTuple_Pack(2, name, value);
        Py_DECREF(name);
        Py_DECREF(value);
        if (pair == NULL) {
            goto error;
        }
        PyTuple_SET_ITEM(items, (Py_ssize_t)index, pair);
    }
    if (headers != NULL) {
        *headers = items;
    }
    return 0;
error:
    Py_XDECREF(items);
    return -1;
}

/* One record: checked as decode_records checks it; its fields in *view, its headers (a tuple,
 * or NULL when it has none) in *headers when headers is not NULL. */
static int
walk_record(Walker *walker, RecordView *view, PyObject **headers)
{
    const unsigned char *data = walker->data;
    Py_ssize_t end = walker->end;
    int64_t length;
    if (headers != NULL) {
        *headers = NULL;
    }
    if (read_varint(walker, &length) < 0) {
        return -1;
    }
    Py_ssize_t record_end = walker->position + (Py_ssize_t)length;
    if (length < 6 || length > end || record_end > end) {
        return fail_corrupt("record length does not fit the batch");
    }
    if (data[walker->position]) {
        return fail_corrupt("record attributes are not 0");
    }
    walker->position++;
    if (walker->position >= end) {
        return fail_corrupt("record runs past the end of its batch");
    }
    unsigned int byte = data[walker->position];
    if (byte < 0x80) {
        view->timestamp = walker->base_timestamp + ((int64_t)(byte >> 1) ^ -(int64_t)(byte & 1));
        walker->position++;
    } else {
        __int128 delta;
        if (read_varlong(walker, &delta) < 0) {
            return -1;
        }
        __int128 timestamp = (__int128)walker->base_timestamp + delta;
        if (timestamp < INT64_LOW || timestamp > INT64_HIGH) {
            return fail_corrupt("timestamp delta is out of range");
        }
        view->timestamp = (int64_t)timestamp;
    }
    int64_t offset_delta;
    if (read_varint(walker, &offset_delta) < 0) {
        return -1;
    }
    if (offset_delta <= walker->previous_delta || offset_delta > walker->highest_delta) {
        return fail_corrupt("offset delta out of order or past lastOffsetDelta");
    }
    walker->previous_delta = offset_delta;
    view->offset_delta = offset_delta;
    if (walker->position >= end) {
        return fail_corrupt("record runs past the end of its batch");
    }
    if (data[walker->position] == 1) {
        view->key_length = -1;
        view->key_at = walker->position;
        walker->position++;
    } else {
        int64_t key_length;
        if (read_varint(walker, &key_length) < 0) {
            return -1;
        }
        if (key_length < 0 || walker->position + key_length > record_end) {
            return fail_corrupt("key length does not fit its record");
        }
        view->key_at = walker->position;
        view->key_length = (Py_ssize_t)key_length;
        walker->position += key_length;
    }
    if (walker->position >= end) {
        return fail_corrupt("record runs past the end of its batch");
    }
    if (data[walker->position] == 1) {
        view->value_length = -1;
        view->value_at = walker->position;
        walker->position++;
    } else {
        int64_t value_length;
        if (read_varint(walker, &value_length) < 0) {
            return -1;
        }
        if (value_length < 0 || walker->position + value_length >= record_end) {
            return fail_corrupt("value length does not fit its record");
        }
        view->value_at = walker->position;
        view->value_length = (Py_ssize_t)value_length;
        walker->position += value_length;
    }
    if (walker->position >= record_end) {
        return fail_corrupt("a record ends before its header count");
    }
    if (data[walker->position] == 0) {
        walker->position++;
        view->header_count = 0;
        view->header_size = -1;
    } else if (walk_headers(walker, view, record_end, headers) < 0) {
        return -1;
    }
    if (walker->position != record_end) {
        if (headers != NULL) {
            Py_CLEAR(*headers);
        }
        return fail_corrupt("record length does not match its fields");
    }
    return 0;
}

typedef struct {
    Py_buffer buffer;
    Walker walker;
    Py_ssize_t count;
} Decode;

static int
start_decode(Decode *decode, PyObject *data, Py_ssize_t count, long long base_timestamp, PyObject *last_offset_delta)
{
    if (PyObject_GetBuffer(data, &decode->buffer, PyBUF_SIMPLE) < 0) {
        return -1;
    }
    int64_t highest = MAX_OFFSET_DELTA;
    if (last_offset_delta != Py_None) {
        long long value = PyLong_AsLongLong(last_offset_delta);
        if (value == -1 && PyErr_Occurred()) {
            PyBuffer_Release(&decode->buffer);
            return -1;
        }
        highest = value;
    }
    if (base_timestamp < INT64_MIN + 64 || base_timestamp > INT64_MAX - 64) {
        PyBuffer_Release(&decode->buffer);
        return fail_corrupt("base timestamp is out of range");
    }
    decode->walker.data = (const unsigned char *)decode->buffer.buf;
    decode->walker.end = decode->buffer.len;
    decode->walker.position = 0;
    decode->walker.base_timestamp = base_timestamp;
    decode->walker.highest_delta = highest;
    decode->walker.previous_delta = -1;
    decode->count = count;
    return 0;
}

static int
finish_decode(Decode *decode)
{
    int stray = decode->walker.position != decode->walker.end;
    PyBuffer_Release(&decode->buffer);
    if (stray) {
        return fail_corrupt("stray bytes after the last record");
    }
    return 0;
}

static inline PyObject *
slice_bytes(const unsigned char *data, Py_ssize_t at, Py_ssize_t length)
{
    if (length < 0) {
        return Py_NewRef(Py_None);
    }
    return PyBytes_FromStringAndSize((const char *)data + at, length);
}

static PyObject *
int_sum(long long base, int64_t delta)
{
    long long sum;
    if (!__builtin_add_overflow(base, (long long)delta, &sum)) {
        return PyLong_FromLongLong(sum);
    }
    PyObject *left = PyLong_FromLongLong(base);
    PyObject *right = PyLong_FromLongLong(delta);
    PyObject *result = left != NULL && right != NULL ? PyNumber_Add(left, right) : NULL;
    Py_XDECREF(left);
    Py_XDECREF(right);
    return result;
}

/* An instance of a tuple subclass (a NamedTuple class) with ``size`` empty slots. */
static PyObject *
new_row(PyTypeObject *cls, Py_ssize_t size)
{
    return cls->tp_alloc(cls, size);
}

static PyObject *empty_tuple = NULL;

PyDoc_STRVAR(decode_records_doc,
"decode_records(data, count, base_offset, base_timestamp, last_offset_delta, record_class) -> list\n\n"
"Records of a records section as record_class(offset, timestamp, key, value, headers) rows.");

static PyObject *
speedups_decode_records(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "decode_records takes 6 arguments");
        return NULL;
    }
    Py_ssize_t count = PyLong_AsSsize_t(args[1]);
    long long base_offset = PyLong_AsLongLong(args[2]);
    long long base_timestamp = PyLong_AsLongLong(args[3]);
    if (PyErr_Occurred()) {
        return NULL;
    }
    if (!PyType_Check(args[5])) {
        PyErr_SetString(PyExc_TypeError, "record_class must be a type");
        return NULL;
    }
    PyTypeObject *cls = (PyTypeObject *)args[5];
    Decode decode;
    if (start_decode(&decode, args[0], count, base_timestamp, args[4]) < 0) {
        return NULL;
    }
    PyObject *out = PyList_New(0);
    if (out == NULL) {
        PyBuffer_Release(&decode.buffer);
        return NULL;
    }
    const unsigned char *data = decode.walker.data;
    for (Py_ssize_t index = 0; index < count; index++) {
        RecordView view;
        PyObject *headers;
        if (walk_record(&decode.walker, &view, &headers) < 0) {
            goto error;
        }
        PyObject *row = new_row(cls, 5);
        if (row == NULL) {
            Py_XDECREF(headers);
            goto error;
        }
        PyObject *offset = int_sum(base_offset, view.offset_delta);
        PyObject *timestamp = PyLong_FromLongLong(view.timestamp);
        PyObject *key = slice_bytes(data, view.key_at, view.key_length);
        PyObject *value = slice_bytes(data, view.value_at, view.value_length);
        PyTuple_SET_ITEM(row, 0, offset);
        PyTuple_SET_ITEM(row, 1, timestamp);
        PyTuple_SET_ITEM(row, 2, key);
        PyTuple_SET_ITEM(row, 3, value);
        PyTuple_SET_ITEM(row, 4, headers != NULL ? headers : Py_NewRef(empty_tuple));
        if (offset == NULL || timestamp == NULL || key == NULL || value == NULL || PyList_Append(out, row) < 0) {
            Py_DECREF(row);
            goto error;
        }
        Py_DECREF(row);
    }
    if (finish_decode(&decode) < 0) {
        Py_DECREF(out);
        return NULL;
    }
    return out;
error:
    PyBuffer_Release(&decode.buffer);
    Py_DECREF(out);
    return NULL;
}

PyDoc_STRVAR(validate_records_doc,
"validate_records(data, count, last_offset_delta, base_timestamp, require_keys, contiguous) -> None\n\n"
"Check a records section as decode_records does, keeping nothing.");

static PyObject *
speedups_validate_records(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "validate_records takes 6 arguments");
        return NULL;
    }
    Py_ssize_t count = PyLong_AsSsize_t(args[1]);
    long long base_timestamp = PyLong_AsLongLong(args[3]);
    if (PyErr_Occurred()) {
        return NULL;
    }
    int require_keys = PyObject_IsTrue(args[4]);
    int contiguous = PyObject_IsTrue(args[5]);
    if (require_keys < 0 || contiguous < 0) {
        return NULL;
    }
    Decode decode;
    if (start_decode(&decode, args[0], count, base_timestamp, args[2]) < 0) {
        return NULL;
    }
    int keyless = 0;
    RecordView view;
    view.offset_delta = -1;
    for (Py_ssize_t index = 0; index < count; index++) {
        if (walk_record(&decode.walker, &view, NULL) < 0) {
            PyBuffer_Release(&decode.buffer);
            return NULL;
        }
        keyless |= view.key_length < 0;
    }
    if (finish_decode(&decode) < 0) {
        return NULL;
    }
    if (contiguous && count > 0 && view.offset_delta != count - 1) {
        PyErr_Format(invalid_error, "offset deltas of the %zd records are not 0 to %zd", count, count - 1);
        return NULL;
    }
    if (require_keys && keyless) {
        PyErr_SetString(invalid_error, "a compacted topic needs a key on every record");
        return NULL;
    }
    Py_RETURN_NONE;
}

PyDoc_STRVAR(record_values_doc,
"record_values(data, count, base_timestamp, last_offset_delta) -> list\n\n"
"Every record's value (bytes or None), in order, the records checked as decode_records checks them.");

static PyObject *
speedups_record_values(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "record_values takes 4 arguments");
        return NULL;
    }
    Py_ssize_t count = PyLong_AsSsize_t(args[1]);
    long long base_timestamp = PyLong_AsLongLong(args[2]);
    if (PyErr_Occurred()) {
        return NULL;
    }
    Decode decode;
    if (start_decode(&decode, args[0], count, base_timestamp, args[3]) < 0) {
        return NULL;
    }
    PyObject *out = PyList_New(count > 0 && count < (1 << 24) ? count : 0);
    if (out == NULL) {
        PyBuffer_Release(&decode.buffer);
        return NULL;
    }
    int preallocated = PyList_GET_SIZE(out) == count;
    for (Py_ssize_t index = 0; index < count; index++) {
        RecordView view;
        PyObject *headers;
        if (walk_record(&decode.walker, &view, &headers) < 0) {
            goto error;
        }
        Py_XDECREF(headers);
        PyObject *value = slice_bytes(decode.walker.data, view.value_at, view.value_length);
        if (value == NULL) {
            goto error;
        }
        if (preallocated) {
            PyList_SET_ITEM(out, index, value);
        } else {
            int failed = PyList_Append(out, value);
            Py_DECREF(value);
            if (failed) {
                goto error;
            }
        }
    }
    if (finish_decode(&decode) < 0) {
        Py_DECREF(out);
        return NULL;
    }
    return out;
error:
    PyBuffer_Release(&decode.buffer);
    Py_DECREF(out);
    return NULL;
}

PyDoc_STRVAR(consumer_records_doc,
"consumer_records(data, count, base_offset, base_timestamp, last_offset_delta, record_class, topic,\n"
"                 partition, leader_epoch, timestamp_type, max_timestamp, min_offset, max_offset,\n"
"                 key_deserializer, value_deserializer) -> list\n\n"
"The records with min_offset <= offset < max_offset as 13-field record_class rows (kafka-python's\n"
"ConsumerRecord); every record of the section is checked.");

static PyObject *
speedups_consumer_records(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 15) {
        PyErr_SetString(PyExc_TypeError, "consumer_records takes 15 arguments");
        return NULL;
    }
    Py_ssize_t count = PyLong_AsSsize_t(args[1]);
    long long base_offset = PyLong_AsLongLong(args[2]);
    long long base_timestamp = PyLong_AsLongLong(args[3]);
    long long timestamp_type = PyLong_AsLongLong(args[9]);
    long long max_timestamp = PyLong_AsLongLong(args[10]);
    long long min_offset = PyLong_AsLongLong(args[11]);
    long long max_offset = PyLong_AsLongLong(args[12]);
    if (PyErr_Occurred()) {
        return NULL;
    }
    if (!PyType_Check(args[5])) {
        PyErr_SetString(PyExc_TypeError, "record_class must be a type");
        return NULL;
    }
    PyTypeObject *cls = (PyTypeObject *)args[5];
    PyObject *topic = args[6], *partition = args[7], *leader_epoch = args[8];
    PyObject *key_deserializer = args[13] == Py_None ? NULL : args[13];
    PyObject *value_deserializer = args[14] == Py_None ? NULL : args[14];
    PyObject *type_object = PyLong_FromLongLong(timestamp_type);
    PyObject *minus_one = PyLong_FromLong(-1);
    PyObject *log_append_time = timestamp_type ? PyLong_FromLongLong(max_timestamp) : NULL;
    Decode decode;
    PyObject *out = NULL, *last_timestamp = NULL;
    long long last_timestamp_value = 0;
    if (type_object == NULL || minus_one == NULL || (timestamp_type && log_append_time == NULL)) {
        goto cleanup;
    }
    if (start_decode(&decode, args[0], count, base_timestamp, args[4]) < 0) {
        goto cleanup;
    }
    out = PyList_New(0);
    if (out == NULL) {
        PyBuffer_Release(&decode.buffer);
        goto cleanup;
    }
    const unsigned char *data = decode.walker.data;
    for (Py_ssize_t index = 0; index < count; index++) {
        RecordView view;
        PyObject *headers;
        if (walk_record(&decode.walker, &view, &headers) < 0) {
            goto error;
        }
        long long offset_value;
        int overflow = __builtin_add_overflow(base_offset, (long long)view.offset_delta, &offset_value);
        if (overflow || offset_value < min_offset || offset_value >= max_offset) {
            /* an offset past int64 is past every max_offset too */
            Py_XDECREF(headers);
            continue;
        }
        PyObject *row = new_row(cls, 13);
        if (row == NULL) {
            Py_XDECREF(headers);
            goto error;
        }
        PyObject *header_list = headers != NULL ? PySequence_List(headers) : PyList_New(0);
        Py_XDECREF(headers);
        PyObject *key = slice_bytes(data, view.key_at, view.key_length);
        PyObject *value = slice_bytes(data, view.value_at, view.value_length);
        if (key_deserializer != NULL && key != NULL && key != Py_None) {
            Py_SETREF(key, PyObject_CallOneArg(key_deserializer, key));
        }
        if (value_deserializer != NULL && value != NULL && value != Py_None) {
            Py_SETREF(value, PyObject_CallOneArg(value_deserializer, value));
        }
        PyObject *offset = PyLong_FromLongLong(offset_value);
        PyObject *timestamp;
        if (timestamp_type) {
            timestamp = Py_NewRef(log_append_time);
        } else if (last_timestamp != NULL && view.timestamp == last_timestamp_value) {
            timestamp = Py_NewRef(last_timestamp);  /* records of one batch mostly share their timestamp */
        } else {
            timestamp = PyLong_FromLongLong(view.timestamp);
            if (timestamp != NULL) {
                Py_XSETREF(last_timestamp, Py_NewRef(timestamp));
                last_timestamp_value = view.timestamp;
            }
        }
        PyObject *key_size = view.key_length < 0 ? Py_NewRef(minus_one) : PyLong_FromSsize_t(view.key_length);
        PyObject *value_size = view.value_length < 0 ? Py_NewRef(minus_one) : PyLong_FromSsize_t(view.value_length);
        PyObject *header_size = view.header_size < 0 ? Py_NewRef(minus_one) : PyLong_FromSsize_t(view.header_size);
        PyTuple_SET_ITEM(row, 0, Py_NewRef(topic));
        PyTuple_SET_ITEM(row, 1, Py_NewRef(partition));
        PyTuple_SET_ITEM(row, 2, Py_NewRef(leader_epoch));
        PyTuple_SET_ITEM(row, 3, offset);
        PyTuple_SET_ITEM(row, 4, timestamp);
        PyTuple_SET_ITEM(row, 5, Py_NewRef(type_object));
        PyTuple_SET_ITEM(row, 6, key);
        PyTuple_SET_ITEM(row, 7, value);
        PyTuple_SET_ITEM(row, 8, header_list);
        PyTuple_SET_ITEM(row, 9, Py_NewRef(Py_None));
        PyTuple_SET_ITEM(row, 10, key_size);
        PyTuple_SET_ITEM(row, 11, value_size);
        PyTuple_SET_ITEM(row, 12, header_size);
        if (header_list == NULL || key == NULL || value == NULL || offset == NULL || timestamp == NULL
                || key_size == NULL || value_size == NULL || header_size == NULL || PyList_Append(out, row) < 0) {
            Py_DECREF(row);
            goto error;
        }
        /* Nothing a record or its headers list holds when they are made can lead back to them, so
         * the cyclic collector need not visit them: CPython untracks such tuples itself, but only
         * after they survived a collection, and a poll of 10,000 records otherwise costs dozens of
         * collections that visit every record alive. (A list the application later makes part of
         * a reference cycle is then left to reference counting.) */
        PyObject_GC_UnTrack(row);
        PyObject_GC_UnTrack(header_list);
        Py_DECREF(row);
    }
    if (finish_decode(&decode) < 0) {
        Py_CLEAR(out);
    }
    goto cleanup;
error:
    PyBuffer_Release(&decode.buffer);
    Py_CLEAR(out);
cleanup:
    Py_XDECREF(last_timestamp);
    Py_XDECREF(type_object);
    Py_XDECREF(minus_one);
    Py_XDECREF(log_append_time);
    return out;
}

/* --- encoding ---------------------------------------------------------------------------- */

static inline Py_ssize_t
varint_size(int64_t value)
{
    uint64_t unsigned_value = ((uint64_t)value << 1) ^ (uint64_t)(value >> 63);
    Py_ssize_t size = 1;
    while (unsigned_value >= 0x80) {
        unsigned_value >>= 7;
        size++;
    }
    return size;
}

static inline unsigned char *
put_varint(unsigned char *out, int64_t value)
{
    uint64_t unsigned_value = ((uint64_t)value << 1) ^ (uint64_t)(value >> 63);
    while (unsigned_value >= 0x80) {
        *out++ = (unsigned char)((unsigned_value & 0x7F) | 0x80);
        unsigned_value >>= 7;
    }
    *out++ = (unsigned char)unsigned_value;
    return out;
}

typedef struct {
    const char *key;    /* NULL: a null key */
    Py_ssize_t key_length;
    const char *value;  /* NULL: a null value */
    Py_ssize_t value_length;
    int64_t timestamp_delta;
    PyObject *header_items; /* a list of (bytes name, buffer-or-None value) in encode order, or NULL */
    Py_ssize_t body_size;
} EncodeItem;

static void
release_items(EncodeItem *items, Py_ssize_t count)
{
    for (Py_ssize_t index = 0; index < count; index++) {
        Py_XDECREF(items[index].header_items);
    }
    PyMem_Free(items);
}

/* A key's or value's bytes: a bytes object's own, or a copy of another buffer's kept in `held`
 * until the section is written; NULL data for None. */
static int
get_field(PyObject *object, const char **data, Py_ssize_t *length, PyObject *held, const char *what)
{
    *data = NULL;
    *length = 0;
    if (object == Py_None) {
        return 0;
    }
    if (!PyBytes_CheckExact(object)) {
        PyObject *copy = PyUnicode_Check(object) || !PyObject_CheckBuffer(object) ? NULL : PyBytes_FromObject(object);
        if (copy == NULL) {
            if (!PyErr_Occurred() || PyErr_ExceptionMatches(PyExc_TypeError)) {
                PyErr_Clear();
                PyErr_Format(PyExc_TypeError, "a record %s must be bytes or None, not %.100s", what,
                             Py_TYPE(object)->tp_name);
            }
            return -1;
        }
        int appended = PyList_Append(held, copy);
        Py_DECREF(copy);  /* held keeps it */
        if (appended < 0) {
            return -1;
        }
        object = copy;
    }
    *data = PyBytes_AS_STRING(object);
    *length = PyBytes_GET_SIZE(object);
    return 0;
}

/* A timestamp as a C integer; the same int object as the one before (the common case: records
 * appended in the same millisecond share it) is not converted again. */
static inline int
get_timestamp(PyObject *object, PyObject **last_object, long long *last_value)
{
    if (object == *last_object) {
        return 0;
    }
    if (!PyLong_Check(object)) {
        PyErr_Format(PyExc_TypeError, "a timestamp must be an int, not %.100s", Py_TYPE(object)->tp_name);
        return -1;
    }
    int overflow;
    long long value = PyLong_AsLongLongAndOverflow(object, &overflow);
    if (overflow) {
        PyErr_SetString(PyExc_OverflowError, "a timestamp does not fit a long long");
        return -1;
    }
    if (value == -1 && PyErr_Occurred()) {
        return -1;
    }
    *last_object = object;
    *last_value = value;
    return 0;
}

/* A record's headers as a list of (encoded name bytes, value) pairs and their encoded size. */
static int
prepare_headers(PyObject *headers, EncodeItem *item, Py_ssize_t *size)
{
    PyObject *sequence = PySequence_Fast(headers, "record headers must be a sequence of (name, value) pairs");
    if (sequence == NULL) {
        return -1;
    }
    Py_ssize_t count = PySequence_Fast_GET_SIZE(sequence);
    PyObject *prepared = PyList_New(count);
    if (prepared == NULL) {
        Py_DECREF(sequence);
        return -1;
    }
    Py_ssize_t total = varint_size(count);
    for (Py_ssize_t index = 0; index < count; index++) {
        PyObject *pair = PySequence_Fast_GET_ITEM(sequence, index);
        PyObject *name, *value;
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) {
            PyObject *as_tuple = PySequence_Tuple(pair);
            if (as_tuple == NULL || PyTuple_GET_SIZE(as_tuple) != 2) {
                Py_XDECREF(as_tuple);
                PyErr_Clear();
                PyErr_SetString(PyExc_TypeError, "a record header must be a (name, value) pair");
                goto error;
            }
            pair = as_tuple;
        } else {
            Py_INCREF(pair);
        }
        name = PyTuple_GET_ITEM(pair, 0);
        value = PyTuple_GET_ITEM(pair, 1);
        if (!PyUnicode_Check(name)) {
            Py_DECREF(pair);
            PyErr_Format(PyExc_TypeError, "a header name must be str, not %.100s", Py_TYPE(name)->tp_name);
            goto error;
        }
        PyObject *encoded = PyUnicode_AsUTF8String(name);
        if (encoded == NULL) {
            Py_DECREF(pair);
            goto error;
        }
        Py_ssize_t name_length = PyBytes_GET_SIZE(encoded);
        total += varint_size(name_length) + name_length;
        PyObject *value_bytes;
        if (value == Py_None) {
            value_bytes = Py_NewRef(Py_None);
            total += 1;
        } else {
            value_bytes = PyObject_CheckBuffer(value) && !PyUnicode_Check(value) ? PyBytes_FromObject(value) : NULL;
            if (value_bytes == NULL) {
                if (!PyErr_Occurred()) {
                    PyErr_Format(PyExc_TypeError, "a header value must be bytes or None, not %.100s",
                                 Py_TYPE(value)->tp_name);
                }
                Py_DECREF(encoded);
                Py_DECREF(pair);
                goto error;
            }
            total += varint_size(PyBytes_GET_SIZE(value_bytes)) + PyBytes_GET_SIZE(value_bytes);
        }
        Py_DECREF(pair);
        PyObject *entry = PyTuple_Pack(2, encoded, value_bytes);
        Py_DECREF(encoded);
        Py_DECREF(value_bytes);
        if (entry == NULL) {
            goto error;
        }
        PyList_SET_ITEM(prepared, index, entry);
    }
    Py_DECREF(sequence);
    item->header_items = prepared;
    *size = total;
    return 0;
error:
    Py_DECREF(sequence);
    Py_DECREF(prepared);
    return -1;
}

PyDoc_STRVAR(encode_records_doc,
"encode_records(values, keys, timestamps, headers, base_timestamp=0) -> bytes\n\n"
"The records section of values[i] with offset delta i and timestamp delta timestamps[i] - base_timestamp:\n"
"keys, timestamps and headers are\n"
"sequences of the same length, or None (null keys, delta 0, no headers).");

static PyObject *
speedups_encode_records(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4 && nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "encode_records takes 4 or 5 arguments");
        return NULL;
    }
    long long base_timestamp = 0;
    if (nargs == 5) {
        base_timestamp = PyLong_AsLongLong(args[4]);
        if (base_timestamp == -1 && PyErr_Occurred()) {
            return NULL;
        }
    }
    PyObject *values = PySequence_Fast(args[0], "values must be a sequence");
    if (values == NULL) {
        return NULL;
    }
    PyObject *keys = NULL, *deltas = NULL, *headers = NULL, *result = NULL, *held = NULL;
    Py_ssize_t count = PySequence_Fast_GET_SIZE(values), filled = 0;
    EncodeItem *items = NULL;
    if (args[1] != Py_None && (keys = PySequence_Fast(args[1], "keys must be a sequence")) == NULL) {
        goto done;
    }
    if (args[2] != Py_None && (deltas = PySequence_Fast(args[2], "timestamp deltas must be a sequence")) == NULL) {
        goto done;
    }
    if (args[3] != Py_None && (headers = PySequence_Fast(args[3], "headers must be a sequence")) == NULL) {
        goto done;
    }
    if (headers != NULL) {
        /* Headers may run Python code (a sequence of the caller's): the values and keys are read
         * from snapshots that keep every item alive (and its address its own) meanwhile. */
        if (PyList_CheckExact(values)) {
            Py_SETREF(values, PyList_AsTuple(values));
            if (values == NULL) {
                goto done;
            }
        }
        if (keys != NULL && PyList_CheckExact(keys)) {
            Py_SETREF(keys, PyList_AsTuple(keys));
            if (keys == NULL) {
                goto done;
            }
        }
        if (deltas != NULL && PyList_CheckExact(deltas)) {
            Py_SETREF(deltas, PyList_AsTuple(deltas));
            if (deltas == NULL) {
                goto done;
            }
        }
    }
    if ((keys != NULL && PySequence_Fast_GET_SIZE(keys) != count)
            || (deltas != NULL && PySequence_Fast_GET_SIZE(deltas) != count)
            || (headers != NULL && PySequence_Fast_GET_SIZE(headers) != count)) {
        PyErr_SetString(PyExc_ValueError, "keys, timestamp deltas, headers and values differ in length");
        goto done;
    }
    items = PyMem_New(EncodeItem, count > 0 ? (size_t)count : 1);
    if (items == NULL || (held = PyList_New(0)) == NULL) {
        if (items == NULL) {
            PyErr_NoMemory();
        }
        goto done;
    }
    Py_ssize_t total = 0;
    PyObject *last_timestamp = NULL;
    long long timestamp = 0;
    for (Py_ssize_t index = 0; index < count; index++) {
        EncodeItem *item = &items[index];
        item->header_items = NULL;
        item->timestamp_delta = 0;
        filled = index + 1;
        if (get_field(PySequence_Fast_GET_ITEM(values, index), &item->value, &item->value_length, held,
                      "value") < 0) {
            goto done;
        }
        if (keys == NULL) {
            item->key = NULL;
            item->key_length = 0;
        } else if (get_field(PySequence_Fast_GET_ITEM(keys, index), &item->key, &item->key_length, held, "key") < 0) {
            goto done;
        }
        if (deltas != NULL) {
            if (get_timestamp(PySequence_Fast_GET_ITEM(deltas, index), &last_timestamp, &timestamp) < 0) {
                goto done;
            }
            if (__builtin_sub_overflow(timestamp, base_timestamp, &item->timestamp_delta)) {
                PyErr_SetString(PyExc_OverflowError, "a timestamp delta does not fit a varlong");
                goto done;
            }
        }
        Py_ssize_t header_size = 1;
        if (headers != NULL) {
            PyObject *record_headers = PySequence_Fast_GET_ITEM(headers, index);
            int truthy = PyObject_IsTrue(record_headers);
            if (truthy < 0 || (truthy && prepare_headers(record_headers, item, &header_size) < 0)) {
                goto done;
            }
        }
        Py_ssize_t body = 1 + varint_size(item->timestamp_delta) + varint_size(index)
            + (item->key != NULL ? varint_size(item->key_length) + item->key_length : 1)
            + (item->value != NULL ? varint_size(item->value_length) + item->value_length : 1)
            + header_size;
        item->body_size = body;
        total += varint_size(body) + body;
    }
    result = PyBytes_FromStringAndSize(NULL, total);
    if (result == NULL) {
        goto done;
    }
    unsigned char *out = (unsigned char *)PyBytes_AS_STRING(result);
    for (Py_ssize_t index = 0; index < count; index++) {
        EncodeItem *item = &items[index];
        out = put_varint(out, item->body_size);
        *out++ = 0;
        out = put_varint(out, item->timestamp_delta);
        out = put_varint(out, index);
        if (item->key != NULL) {
            out = put_varint(out, item->key_length);
            memcpy(out, item->key, (size_t)item->key_length);
            out += item->key_length;
        } else {
            *out++ = 1;
        }
        if (item->value != NULL) {
            out = put_varint(out, item->value_length);
            memcpy(out, item->value, (size_t)item->value_length);
            out += item->value_length;
        } else {
            *out++ = 1;
        }
        if (item->header_items == NULL) {
            *out++ = 0;
            continue;
        }
        Py_ssize_t header_count = PyList_GET_SIZE(item->header_items);
        out = put_varint(out, header_count);
        for (Py_ssize_t header = 0; header < header_count; header++) {
            PyObject *entry = PyList_GET_ITEM(item->header_items, header);
            PyObject *name = PyTuple_GET_ITEM(entry, 0), *value = PyTuple_GET_ITEM(entry, 1);
            out = put_varint(out, PyBytes_GET_SIZE(name));
            memcpy(out, PyBytes_AS_STRING(name), (size_t)PyBytes_GET_SIZE(name));
            out += PyBytes_GET_SIZE(name);
            if (value == Py_None) {
                *out++ = 1;
            } else {
                out = put_varint(out, PyBytes_GET_SIZE(value));
                memcpy(out, PyBytes_AS_STRING(value), (size_t)PyBytes_GET_SIZE(value));
                out += PyBytes_GET_SIZE(value);
            }
        }
    }
done:
    if (items != NULL) {
        release_items(items, filled);
    }
    Py_XDECREF(held);
    Py_XDECREF(values);
    Py_XDECREF(keys);
    Py_XDECREF(deltas);
    Py_XDECREF(headers);
    return result;
}

/* --- module ------------------------------------------------------------------------------ */

PyDoc_STRVAR(configure_doc,
"configure(corrupt_error, invalid_error) -> None\n\nThe exception classes damage and rule violations raise.");

static PyObject *
speedups_configure(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "configure takes 2 arguments");
        return NULL;
    }
    Py_XSETREF(corrupt_error, Py_NewRef(args[0]));
    Py_XSETREF(invalid_error, Py_NewRef(args[1]));
    Py_RETURN_NONE;
}

static PyMethodDef speedups_methods[] = {
    {"configure", (PyCFunction)(void (*)(void))speedups_configure, METH_FASTCALL, configure_doc},
    {"decode_records", (PyCFunction)(void (*)(void))speedups_decode_records, METH_FASTCALL, decode_records_doc},
    {"validate_records", (PyCFunction)(void (*)(void))speedups_validate_records, METH_FASTCALL,
     validate_records_doc},
    {"record_values", (PyCFunction)(void (*)(void))speedups_record_values, METH_FASTCALL, record_values_doc},
    {"consumer_records", (PyCFunction)(void (*)(void))speedups_consumer_records, METH_FASTCALL,
     consumer_records_doc},
    {"encode_records", (PyCFunction)(void (*)(void))speedups_encode_records, METH_FASTCALL, encode_records_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef speedups_module = {
    PyModuleDef_HEAD_INIT, "kafkalite.record._speedups",
    "The compiled twin of the record codec's hot loops (see kafkalite.record.speedups).", -1, speedups_methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__speedups(void)
{
    if (empty_tuple == NULL) {
        empty_tuple = PyTuple_New(0);
        if (empty_tuple == NULL) {
            return NULL;
        }
    }
    return PyModule_Create(&speedups_module);
}
