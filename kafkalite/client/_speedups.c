/* kafkalite.client._speedups: the compiled twin of ProducerCore.send_plain.
 *
 * What it owns: SendLane(core).send(topic, value, key, headers, partition, timestamp_ms), which
 * does what kafkalite.client.producer_core.ProducerCore.send_plain does, with the same result
 * (a RecordFuture, or None when the general path must run): the common record shape (bytes
 * value, bytes or no key, no headers, no explicit partition, no serializers) looked up in the
 * metadata snapshot, partitioned and appended to its partition's open batch under the
 * accumulator's lock. Whatever is not that common case (a transaction, a new batch, a closed
 * producer, a full buffer) is handed to the Python code it mirrors, before anything changed.
 *
 * It reads and writes the slots of RecordAccumulator, ProducerBatch, _PartitionState and
 * RecordFuture at the offsets their member descriptors give (configure() looks them up once),
 * and checks each object's exact type before it does; a subclass or anything unexpected goes to
 * the Python code. A lane keeps what a ProducerCore fixes at its creation (its accumulator, lock,
 * partitioner, settings, whether it is transactional); what changes (the metadata snapshot, closed, the
 * accumulator's memory and state) is read on every send; the topic's partitions are kept from
 * one send to the next while the metadata snapshot (replaced, never changed) stays the same.
 *
 * Concurrency: callable from any thread. It holds the interpreter lock throughout and the
 * accumulator's lock (the same threading.Lock its Python methods take) while it touches the
 * accumulator's state, as RecordAccumulator.append does, or finds that lock free and touches the
 * state without running any Python code or letting go of the interpreter lock, so that no other
 * thread can take the lock or see the state half changed (the futures it returns are allocated
 * before, since allocating may run a collection and with it Python code).
 *
 * send_record(topic, value=None, key=None, headers=None, partition=None, timestamp_ms=None) is
 * KafkaProducer.send itself when the extension is loaded: it parses send()'s arguments, takes
 * the common record, and calls the producer's Python fallback (bind()) for everything else, with the
 * arguments as given, so that other shapes, waits and errors are the Python code's.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <time.h>

#define RECORD_OVERHEAD 12
#define BATCH_OVERHEAD 61

static PyTypeObject *accumulator_type = NULL;
static PyTypeObject *batch_type = NULL;
static PyTypeObject *state_type = NULL;
static PyTypeObject *future_type = NULL;
static PyObject *topic_partition_type = NULL;

typedef struct {
    Py_ssize_t closed, closing, used_memory;
} AccumulatorSlots;

typedef struct {
    Py_ssize_t values, keys, timestamps, headers, size, memory, result, closed, min_timestamp, max_timestamp,
        record_count;
} BatchSlots;

static AccumulatorSlots accumulator_slots;
static BatchSlots batch_slots;
static Py_ssize_t state_batches_slot;

static PyObject *str_acquire, *str_release;
static PyObject *str_view, *str_partitions, *str_available, *str_closed, *str_transaction, *str_partition,
    *str_wakeup, *str_append, *str_get;

#define SLOT(object, offset) (*(PyObject **)((char *)(object) + (offset)))

static inline void
set_slot(PyObject *object, Py_ssize_t offset, PyObject *value)
{
    PyObject *old = SLOT(object, offset);
    SLOT(object, offset) = value;
    Py_XDECREF(old);
}

static int
slot_offset(PyTypeObject *type, const char *name, Py_ssize_t *offset)
{
    PyObject *descriptor = PyDict_GetItemString(type->tp_dict, name);
    if (descriptor == NULL || Py_TYPE(descriptor) != &PyMemberDescr_Type) {
        PyErr_Format(PyExc_TypeError, "%s.%s is not a slot", type->tp_name, name);
        return -1;
    }
    PyMemberDef *member = ((PyMemberDescrObject *)descriptor)->d_member;
    if (member->type != T_OBJECT_EX) {
        PyErr_Format(PyExc_TypeError, "%s.%s is not an object slot", type->tp_name, name);
        return -1;
    }
    *offset = member->offset;
    return 0;
}

static inline int
get_long(PyObject *object, long long *out)
{
    if (object == NULL || !PyLong_CheckExact(object)) {
        return -1;
    }
    int overflow;
    *out = PyLong_AsLongLongAndOverflow(object, &overflow);
    return overflow ? -1 : 0;
}

static inline long long
now_ms(void)
{
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    return (long long)(((double)now.tv_sec + (double)now.tv_nsec * 1e-9) * 1000.0);
}

/* --- RecordFuture's fields -------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    PyObject *batch;  /* the BatchResult */
    long long index;
    long long timestamp_ms;
    long long key_size;
    long long value_size;
    long long header_size;
} FutureFields;

static PyObject *record_metadata_type = NULL;
static PyObject *str_topic_partition, *str_base_offset, *str_log_append_time;

static int
fields_init(FutureFields *self, PyObject *args, PyObject *kwargs)
{
    PyObject *batch;
    long long index, timestamp_ms, key_size, value_size, header_size;
    static char *names[] = {"batch", "index", "timestamp_ms", "key_size", "value_size", "header_size", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OLLLLL:RecordFuture", names, &batch, &index, &timestamp_ms,
                                     &key_size, &value_size, &header_size)) {
        return -1;
    }
    Py_XSETREF(self->batch, Py_NewRef(batch));
    self->index = index;
    self->timestamp_ms = timestamp_ms;
    self->key_size = key_size;
    self->value_size = value_size;
    self->header_size = header_size;
    return 0;
}

static int
fields_traverse(FutureFields *self, visitproc visit, void *arg)
{
    Py_VISIT(self->batch);  /* a subclass's type is visited by CPython's subtype_traverse */
    return 0;
}

static int
fields_clear(FutureFields *self)
{
    Py_CLEAR(self->batch);
    return 0;
}

static void
fields_dealloc(FutureFields *self)
{
    /* a subclass's type reference is released by CPython's subtype_dealloc */
    PyObject_GC_UnTrack(self);
    fields_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static long long
attribute_or(PyObject *object, PyObject *name, long long fallback, int *failed)
{
    PyObject *attribute = PyObject_GetAttr(object, name);
    if (attribute == NULL) {
        *failed = 1;
        return fallback;
    }
    long long value = PyLong_AsLongLong(attribute);
    Py_DECREF(attribute);
    if (value == -1 && PyErr_Occurred()) {
        *failed = 1;
    }
    return value;
}

PyDoc_STRVAR(fields_metadata_doc, "_metadata() -> RecordMetadata\n\nWhere the record was written, from its batch.");

static PyObject *
fields_metadata(FutureFields *self, PyObject *unused)
{
    if (record_metadata_type == NULL || self->batch == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "the record future is not configured");
        return NULL;
    }
    int failed = 0;
    long long base_offset = attribute_or(self->batch, str_base_offset, -1, &failed);
    long long log_append_time = attribute_or(self->batch, str_log_append_time, -1, &failed);
    if (failed) {
        return NULL;
    }
    PyObject *topic_partition = PyObject_GetAttr(self->batch, str_topic_partition);
    if (topic_partition == NULL) {
        return NULL;
    }
    if (!PyTuple_Check(topic_partition) || PyTuple_GET_SIZE(topic_partition) != 2) {
        Py_DECREF(topic_partition);
        PyErr_SetString(PyExc_TypeError, "topic_partition is not a (topic, partition) pair");
        return NULL;
    }
    PyTypeObject *type = (PyTypeObject *)record_metadata_type;
    PyObject *row = type->tp_alloc(type, 9);
    if (row == NULL) {
        Py_DECREF(topic_partition);
        return NULL;
    }
    PyObject *offset = PyLong_FromLongLong(base_offset >= 0 ? base_offset + self->index : -1);
    PyObject *timestamp = PyLong_FromLongLong(log_append_time >= 0 ? log_append_time : self->timestamp_ms);
    PyObject *key_size = PyLong_FromLongLong(self->key_size);
    PyObject *value_size = PyLong_FromLongLong(self->value_size);
    PyObject *header_size = PyLong_FromLongLong(self->header_size);
    PyTuple_SET_ITEM(row, 0, Py_NewRef(PyTuple_GET_ITEM(topic_partition, 0)));
    PyTuple_SET_ITEM(row, 1, Py_NewRef(PyTuple_GET_ITEM(topic_partition, 1)));
    PyTuple_SET_ITEM(row, 2, topic_partition);
    PyTuple_SET_ITEM(row, 3, offset);
    PyTuple_SET_ITEM(row, 4, timestamp);
    PyTuple_SET_ITEM(row, 5, Py_NewRef(Py_None));
    PyTuple_SET_ITEM(row, 6, key_size);
    PyTuple_SET_ITEM(row, 7, value_size);
    PyTuple_SET_ITEM(row, 8, header_size);
    if (offset == NULL || timestamp == NULL || key_size == NULL || value_size == NULL || header_size == NULL) {
        Py_DECREF(row);
        return NULL;
    }
    return row;
}

static PyMemberDef fields_members[] = {
    {"_batch", T_OBJECT_EX, offsetof(FutureFields, batch), READONLY, NULL},
    {"_index", T_LONGLONG, offsetof(FutureFields, index), READONLY, NULL},
    {"timestamp_ms", T_LONGLONG, offsetof(FutureFields, timestamp_ms), READONLY, NULL},
    {"_key_size", T_LONGLONG, offsetof(FutureFields, key_size), READONLY, NULL},
    {"_value_size", T_LONGLONG, offsetof(FutureFields, value_size), READONLY, NULL},
    {"_header_size", T_LONGLONG, offsetof(FutureFields, header_size), READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyObject *fields_add_callback(FutureFields *self, PyObject *const *args, size_t nargsf, PyObject *kwnames);
static PyObject *fields_add_errback(FutureFields *self, PyObject *const *args, size_t nargsf, PyObject *kwnames);
PyDoc_STRVAR(fields_add_callback_doc,
"add_callback(function, *args, **kwargs) -> self\n\nCall function(*args, metadata, **kwargs) once the record is "
"acknowledged (at once when it already is).");
PyDoc_STRVAR(fields_add_errback_doc,
"add_errback(function, *args, **kwargs) -> self\n\nCall function(*args, exception, **kwargs) if the send fails "
"(at once when it already has).");

static PyMethodDef fields_methods[] = {
    {"_metadata", (PyCFunction)fields_metadata, METH_NOARGS, fields_metadata_doc},
    {"add_callback", (PyCFunction)(void (*)(void))fields_add_callback, METH_FASTCALL | METH_KEYWORDS,
     fields_add_callback_doc},
    {"add_errback", (PyCFunction)(void (*)(void))fields_add_errback, METH_FASTCALL | METH_KEYWORDS,
     fields_add_errback_doc},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject FutureFieldsType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kafkalite.client._speedups.FutureFields",
    .tp_doc = PyDoc_STR("FutureFields(batch, index, timestamp_ms, key_size, value_size, header_size): what a "
                        "RecordFuture keeps, and its RecordMetadata."),
    .tp_basicsize = sizeof(FutureFields),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)fields_init,
    .tp_dealloc = (destructor)fields_dealloc,
    .tp_traverse = (traverseproc)fields_traverse,
    .tp_clear = (inquiry)fields_clear,
    .tp_members = fields_members,
    .tp_methods = fields_methods,
};

/* --- callbacks ----------------------------------------------------------------------------- */

static PyObject *partial_type = NULL;
static Py_ssize_t result_lock_slot, result_done_slot, result_error_slot, result_callbacks_slot;
static PyTypeObject *result_type = NULL;

/* ``function`` bound to ``args[1:]`` and ``kwargs`` (functools.partial), or ``function`` itself. */
static PyObject *
bind_call(PyObject *const *args, size_t nargsf, PyObject *kwnames, const char *name)
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (nargs < 1) {
        PyErr_Format(PyExc_TypeError, "%s() needs a function", name);
        return NULL;
    }
    if (nargs == 1 && (kwnames == NULL || PyTuple_GET_SIZE(kwnames) == 0)) {
        return Py_NewRef(args[0]);
    }
    return PyObject_Vectorcall(partial_type, args, nargs, kwnames);
}

/* Keep (future, call, on_success) for the batch's completion: 1, or 0 when the batch is already
 * complete (the caller then calls at once), -1 on error. As BatchResult._register does. */
static int
register_callback(FutureFields *future, PyObject *call, PyObject *on_success)
{
    PyObject *batch = future->batch;
    if (batch == NULL || Py_TYPE(batch) != result_type) {
        PyErr_SetString(PyExc_TypeError, "the record future's batch is not a BatchResult");
        return -1;
    }
    PyObject *lock = SLOT(batch, result_lock_slot);
    if (lock == NULL) {
        PyErr_SetString(PyExc_AttributeError, "the batch result has no lock");
        return -1;
    }
    Py_INCREF(lock);
    PyObject *acquired = PyObject_CallMethodNoArgs(lock, str_acquire);
    if (acquired == NULL) {
        Py_DECREF(lock);
        return -1;
    }
    Py_DECREF(acquired);
    int outcome = 0;
    if (SLOT(batch, result_done_slot) != Py_True) {
        PyObject *callbacks = SLOT(batch, result_callbacks_slot);
        if (callbacks == NULL || callbacks == Py_None) {
            callbacks = PyList_New(0);
            if (callbacks == NULL) {
                outcome = -1;
            } else {
                set_slot(batch, result_callbacks_slot, callbacks);
            }
        }
        if (outcome == 0) {
            PyObject *entry = PyTuple_Pack(3, (PyObject *)future, call, on_success);
            outcome = entry == NULL || PyList_Append(callbacks, entry) < 0 ? -1 : 1;
            Py_XDECREF(entry);
        }
    }
    PyObject *error_type, *error_value, *error_traceback;
    PyErr_Fetch(&error_type, &error_value, &error_traceback);
    PyObject *released = PyObject_CallMethodNoArgs(lock, str_release);
    Py_DECREF(lock);
    if (released == NULL) {
        Py_XDECREF(error_type);
        Py_XDECREF(error_value);
        Py_XDECREF(error_traceback);
        return -1;
    }
    Py_DECREF(released);
    PyErr_Restore(error_type, error_value, error_traceback);
    return outcome;
}

static PyObject *fields_metadata(FutureFields *self, PyObject *unused);

static PyObject *
fields_add_callback(FutureFields *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    PyObject *call = bind_call(args, nargsf, kwnames, "add_callback");
    if (call == NULL) {
        return NULL;
    }
    int registered = register_callback(self, call, Py_True);
    if (registered == 0 && SLOT(self->batch, result_error_slot) == Py_None) {
        PyObject *metadata = fields_metadata(self, NULL);
        PyObject *answer = metadata == NULL ? NULL : PyObject_CallOneArg(call, metadata);
        Py_XDECREF(metadata);
        if (answer == NULL) {
            registered = -1;
        }
        Py_XDECREF(answer);
    }
    Py_DECREF(call);
    return registered < 0 ? NULL : Py_NewRef((PyObject *)self);
}

static PyObject *
fields_add_errback(FutureFields *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    PyObject *call = bind_call(args, nargsf, kwnames, "add_errback");
    if (call == NULL) {
        return NULL;
    }
    int registered = register_callback(self, call, Py_False);
    PyObject *error = registered == 0 ? SLOT(self->batch, result_error_slot) : NULL;
    if (error != NULL && error != Py_None) {
        PyObject *answer = PyObject_CallOneArg(call, error);
        if (answer == NULL) {
            registered = -1;
        }
        Py_XDECREF(answer);
    }
    Py_DECREF(call);
    return registered < 0 ? NULL : Py_NewRef((PyObject *)self);
}

PyDoc_STRVAR(run_callbacks_doc,
"run_callbacks(callbacks, result, error, report) -> None\n\n"
"BatchResult._finish's loop: for each (future or None, function, on_success) entry, function(result) when\n"
"the future is None, function(future._metadata()) on success, function(error) on failure; an exception\n"
"a function raises goes to report(exception) and the loop goes on.");

static PyObject *
speedups_run_callbacks(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4 || !PyList_CheckExact(args[0])) {
        PyErr_SetString(PyExc_TypeError, "run_callbacks(callbacks: list, result, error, report)");
        return NULL;
    }
    PyObject *callbacks = args[0], *result = args[1], *error = args[2], *report = args[3];
    for (Py_ssize_t index = 0; index < PyList_GET_SIZE(callbacks); index++) {
        PyObject *entry = PyList_GET_ITEM(callbacks, index);
        if (!PyTuple_CheckExact(entry) || PyTuple_GET_SIZE(entry) != 3) {
            continue;
        }
        Py_INCREF(entry);
        PyObject *record = PyTuple_GET_ITEM(entry, 0), *function = PyTuple_GET_ITEM(entry, 1),
            *on_success = PyTuple_GET_ITEM(entry, 2);
        PyObject *answer = NULL, *argument = NULL;
        int called = 1;
        if (record == Py_None) {
            answer = PyObject_CallOneArg(function, result);
        } else if (error == Py_None) {
            if (on_success == Py_True) {
                argument = PyObject_TypeCheck(record, &FutureFieldsType)
                    ? fields_metadata((FutureFields *)record, NULL) : PyObject_CallMethod(record, "_metadata", NULL);
                answer = argument == NULL ? NULL : PyObject_CallOneArg(function, argument);
            } else {
                called = 0;
            }
        } else if (on_success != Py_True) {
            answer = PyObject_CallOneArg(function, error);
        } else {
            called = 0;
        }
        Py_XDECREF(argument);
        Py_DECREF(entry);
        if (!called) {
            continue;
        }
        if (answer == NULL) {
            if (!PyErr_ExceptionMatches(PyExc_Exception)) {
                return NULL;  /* KeyboardInterrupt, SystemExit: not a callback's bug */
            }
            PyObject *error_type, *error_value, *error_traceback;
            PyErr_Fetch(&error_type, &error_value, &error_traceback);
            PyErr_NormalizeException(&error_type, &error_value, &error_traceback);
            if (error_traceback != NULL && error_value != NULL) {
                PyException_SetTraceback(error_value, error_traceback);
            }
            PyObject *reported = PyObject_CallOneArg(report, error_value != NULL ? error_value : Py_None);
            Py_XDECREF(error_type);
            Py_XDECREF(error_value);
            Py_XDECREF(error_traceback);
            if (reported == NULL) {
                return NULL;
            }
            Py_DECREF(reported);
            continue;
        }
        Py_DECREF(answer);
    }
    Py_RETURN_NONE;
}

PyDoc_STRVAR(configure_futures_doc,
"configure_futures(record_metadata, batch_result, partial) -> None\n\n"
"The RecordMetadata class FutureFields._metadata builds, the BatchResult class (its slots are looked up\n"
"once) and functools.partial.");

static PyObject *
speedups_configure_futures(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3 || !PyType_Check(args[0]) || !PyType_IsSubtype((PyTypeObject *)args[0], &PyTuple_Type)
            || !PyType_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "configure_futures(record_metadata, batch_result, partial)");
        return NULL;
    }
    PyTypeObject *result = (PyTypeObject *)args[1];
    Py_ssize_t lock, done, error, callbacks;
    if (slot_offset(result, "_lock", &lock) < 0 || slot_offset(result, "done", &done) < 0
            || slot_offset(result, "error", &error) < 0 || slot_offset(result, "_callbacks", &callbacks) < 0) {
        return NULL;
    }
    result_lock_slot = lock;
    result_done_slot = done;
    result_error_slot = error;
    result_callbacks_slot = callbacks;
    Py_XSETREF(record_metadata_type, Py_NewRef(args[0]));
    Py_XSETREF(result_type, (PyTypeObject *)Py_NewRef(args[1]));
    Py_XSETREF(partial_type, Py_NewRef(args[2]));
    Py_RETURN_NONE;
}

/* The record future of record ``index`` of the batch whose result is ``result``. */
/* A future with no batch yet: allocated before the accumulator's state is read, as allocating
 * a collected object may run a collection (and with it Python code that lets another thread in). */
static FutureFields *
blank_future(void)
{
    return (FutureFields *)future_type->tp_alloc(future_type, 0);
}

typedef struct {
    PyObject_HEAD
    PyObject *core;
    PyObject *metadata;
    PyObject *accumulator;
    PyObject *acquire;
    PyObject *release;
    PyObject *locked;
    PyObject *partition_states;
    PyObject *partitioner;
    PyObject *topic_partitions;
    long long batch_size;
    long long buffer_memory;
    long long max_request_size;
    long long settings_buffer_memory;
    int plain_sends;
    int default_partitioner;
    int transactional;
    /* the last topic's lookup in the last metadata snapshot (snapshots are replaced, never changed) */
    PyObject *cached_view;
    PyObject *cached_topic;
    PyObject *cached_partitions;
    Py_ssize_t cached_count;
    /* the last TopicPartition used */
    PyObject *cached_partition_topic;
    long long cached_partition_number;
    PyObject *cached_topic_partition;
    /* the last wall-clock millisecond and its int (the records of one millisecond share it) */
    long long now_value;
    PyObject *now_object;
    /* send_record's owner (a weak reference) and the Python send it falls back to */
    PyObject *owner;
    PyObject *fallback;
} SendLane;

/* RecordAccumulator.append for a record that fits its partition's open batch: fills in `future`
 * and returns it, or NotImplemented (nothing changed) when the Python method must decide. Called
 * with the accumulator's lock held, or with the lock free: nothing in here runs Python code or
 * lets go of the interpreter lock, so no other thread can take the accumulator's lock (or change
 * what it guards) before this returns. */
static PyObject *
append_locked(SendLane *lane, PyObject *topic_partition, PyObject *timestamp, long long timestamp_value,
              PyObject *key, PyObject *value, Py_ssize_t size, FutureFields *future, int *wake)
{
    PyObject *accumulator = lane->accumulator;
    long long used, batch_bytes, record_count, memory, lowest, highest;
    if (SLOT(accumulator, accumulator_slots.closed) != Py_False
            || SLOT(accumulator, accumulator_slots.closing) != Py_False
            || get_long(SLOT(accumulator, accumulator_slots.used_memory), &used) < 0) {
        return Py_NewRef(Py_NotImplemented);
    }
    if (used + size > lane->buffer_memory && used > 0) {
        Py_RETURN_NONE;
    }
    PyObject *state = PyDict_GetItemWithError(lane->partition_states, topic_partition);
    if (state == NULL) {
        return PyErr_Occurred() ? NULL : Py_NewRef(Py_NotImplemented);
    }
    if (Py_TYPE(state) != state_type) {
        return Py_NewRef(Py_NotImplemented);
    }
    PyObject *batches = SLOT(state, state_batches_slot);
    Py_ssize_t count = batches == NULL ? 0 : PyObject_Length(batches);
    if (count < 0) {
        return NULL;
    }
    if (count == 0) {
        return Py_NewRef(Py_NotImplemented);
    }
    PyObject *batch = PySequence_GetItem(batches, count - 1);
    if (batch == NULL) {
        return NULL;
    }
    PyObject *result = NULL;
    PyObject *values = SLOT(batch, batch_slots.values), *keys = SLOT(batch, batch_slots.keys),
        *timestamps = SLOT(batch, batch_slots.timestamps), *headers = SLOT(batch, batch_slots.headers),
        *batch_result = SLOT(batch, batch_slots.result);
    if (Py_TYPE(batch) != batch_type || SLOT(batch, batch_slots.closed) != Py_False || values == NULL
            || !PyList_CheckExact(values) || timestamps == NULL || !PyList_CheckExact(timestamps)
            || keys == NULL || (keys != Py_None && !PyList_CheckExact(keys)) || (key != Py_None && keys == Py_None)
            || headers != Py_None || batch_result == NULL
            || get_long(SLOT(batch, batch_slots.size), &batch_bytes) < 0
            || get_long(SLOT(batch, batch_slots.record_count), &record_count) < 0
            || get_long(SLOT(batch, batch_slots.memory), &memory) < 0
            || get_long(SLOT(batch, batch_slots.min_timestamp), &lowest) < 0
            || get_long(SLOT(batch, batch_slots.max_timestamp), &highest) < 0
            || (batch_bytes + size > lane->batch_size && record_count)) {
        result = Py_NewRef(Py_NotImplemented);
        goto done;
    }
    /* From here on the record goes into this batch. */
    PyObject *new_size = PyLong_FromLongLong(batch_bytes + size);
    PyObject *new_count = PyLong_FromLongLong(record_count + 1);
    PyObject *new_memory = PyLong_FromLongLong(memory + size);
    PyObject *new_used = PyLong_FromLongLong(used + size);
    if (new_size == NULL || new_count == NULL || new_memory == NULL || new_used == NULL
            || PyList_Append(values, value) < 0) {
        goto failed;
    }
    if ((keys != Py_None && PyList_Append(keys, key) < 0) || PyList_Append(timestamps, timestamp) < 0) {
        /* out of memory halfway: take back what was appended, so the batch stays whole */
        Py_ssize_t length = PyList_GET_SIZE(values);
        PyList_SetSlice(values, length - 1, length, NULL);
        if (keys != Py_None && PyList_GET_SIZE(keys) == length) {
            PyList_SetSlice(keys, length - 1, length, NULL);
        }
        goto failed;
    }
    if (timestamp_value > highest) {
        set_slot(batch, batch_slots.max_timestamp, Py_NewRef(timestamp));
    } else if (timestamp_value < lowest) {
        set_slot(batch, batch_slots.min_timestamp, Py_NewRef(timestamp));
    }
    set_slot(batch, batch_slots.record_count, new_count);
    set_slot(batch, batch_slots.size, new_size);
    set_slot(batch, batch_slots.memory, new_memory);
    set_slot(accumulator, accumulator_slots.used_memory, new_used);
    if (batch_bytes + size >= lane->batch_size) {
        set_slot(batch, batch_slots.closed, Py_NewRef(Py_True));
        *wake = 1;
    }
    Py_XSETREF(future->batch, Py_NewRef(batch_result));
    future->index = record_count;
    future->timestamp_ms = timestamp_value;
    future->key_size = key == Py_None ? -1 : PyBytes_GET_SIZE(key);
    future->value_size = PyBytes_GET_SIZE(value);
    future->header_size = -1;
    result = Py_NewRef((PyObject *)future);
    goto done;
failed:
    Py_XDECREF(new_size);
    Py_XDECREF(new_count);
    Py_XDECREF(new_memory);
    Py_XDECREF(new_used);
done:
    Py_DECREF(batch);
    return result;
}

static PyObject *
lane_append(SendLane *lane, PyObject *topic_partition, PyObject *timestamp, long long timestamp_value,
            PyObject *key, PyObject *value, Py_ssize_t size)
{
    FutureFields *future = blank_future();
    if (future == NULL) {
        return NULL;
    }
    int wake = 0;
    PyObject *result;
    PyObject *locked = PyObject_CallNoArgs(lane->locked);
    if (locked == NULL) {
        Py_DECREF(future);
        return NULL;
    }
    Py_DECREF(locked);
    if (locked == Py_False) {
        /* Nobody is inside the accumulator's lock, and no other thread runs until this returns. */
        result = append_locked(lane, topic_partition, timestamp, timestamp_value, key, value, size, future, &wake);
    } else {
        PyObject *acquired = PyObject_CallNoArgs(lane->acquire);
        if (acquired == NULL) {
            Py_DECREF(future);
            return NULL;
        }
        Py_DECREF(acquired);
        result = append_locked(lane, topic_partition, timestamp, timestamp_value, key, value, size, future, &wake);
        PyObject *error_type, *error_value, *error_traceback;
        PyErr_Fetch(&error_type, &error_value, &error_traceback);
        PyObject *released = PyObject_CallNoArgs(lane->release);
        if (released == NULL) {
            Py_XDECREF(error_type);
            Py_XDECREF(error_value);
            Py_XDECREF(error_traceback);
            Py_XDECREF(result);
            Py_DECREF(future);
            return NULL;
        }
        Py_DECREF(released);
        PyErr_Restore(error_type, error_value, error_traceback);
    }
    Py_DECREF(future);
    if (result == NULL) {
        return NULL;
    }
    if (wake) {
        PyObject *woken = PyObject_CallMethodNoArgs(lane->accumulator, str_wakeup);
        if (woken == NULL) {
            Py_DECREF(result);
            return NULL;
        }
        Py_DECREF(woken);
    }
    if (result == Py_NotImplemented) {
        Py_DECREF(result);
        PyObject *size_object = PyLong_FromSsize_t(size);
        if (size_object == NULL) {
            return NULL;
        }
        PyObject *arguments[] = {lane->accumulator, topic_partition, timestamp, key, value, Py_None, size_object};
        result = PyObject_VectorcallMethod(str_append, arguments, 7, NULL);
        Py_DECREF(size_object);
    }
    return result;
}

/* The partition a keyless or keyed plain record goes to (the partitioner's answer). */
static PyObject *
pick_partition(SendLane *lane, PyObject *view, PyObject *topic, PyObject *key, PyObject *partitions,
               Py_ssize_t partition_count, Py_ssize_t size)
{
    if (partition_count == 1 && lane->default_partitioner) {
        return PySequence_GetItem(partitions, 0);
    }
    PyObject *number = NULL;
    PyObject *available_map = PyObject_GetAttr(view, str_available);
    PyObject *empty = PyTuple_New(0);
    PyObject *available = NULL;
    if (available_map != NULL && empty != NULL) {
        PyObject *get_arguments[] = {available_map, topic, empty};
        available = PyObject_VectorcallMethod(str_get, get_arguments, 3, NULL);
    }
    PyObject *size_object = PyLong_FromSsize_t(size);
    if (available != NULL && size_object != NULL) {
        PyObject *arguments[] = {lane->partitioner, topic, key, partitions, available, size_object};
        number = PyObject_VectorcallMethod(str_partition, arguments, 6, NULL);
    }
    Py_XDECREF(available_map);
    Py_XDECREF(empty);
    Py_XDECREF(available);
    Py_XDECREF(size_object);
    return number;
}

PyDoc_STRVAR(lane_send_doc,
"send(topic, value, key, headers, partition, timestamp_ms) -> RecordFuture | None\n\n"
"ProducerCore.send_plain(topic, value, key, headers, partition, timestamp_ms) of the lane's core.");

static PyObject *
lane_send(SendLane *lane, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "send takes 6 arguments");
        return NULL;
    }
    PyObject *topic = args[0], *value = args[1], *key = args[2], *timestamp_ms = args[5];
    if (args[3] != Py_None || args[4] != Py_None || !PyBytes_CheckExact(value) || !lane->plain_sends
            || lane->transactional || (key != Py_None && !PyBytes_CheckExact(key))
            || (timestamp_ms != Py_None && !PyLong_CheckExact(timestamp_ms))) {
        Py_RETURN_NONE;
    }
    PyObject *result = NULL, *view = NULL, *closed = NULL, *timestamp = NULL, *number = NULL, *lookup = NULL,
        *topic_partition = NULL;
    if ((view = PyObject_GetAttr(lane->metadata, str_view)) == NULL) {
        return NULL;
    }
    if (view != lane->cached_view || topic != lane->cached_topic) {
        PyObject *partition_map = PyObject_GetAttr(view, str_partitions);
        if (partition_map == NULL) {
            goto done;
        }
        PyObject *partitions = PyDict_CheckExact(partition_map) ? PyDict_GetItemWithError(partition_map, topic) : NULL;
        Py_XINCREF(partitions);
        Py_DECREF(partition_map);
        if (partitions == NULL) {
            if (!PyErr_Occurred()) {
                result = Py_NewRef(Py_None);  /* not known (or not a plain dict): the general path decides */
            }
            goto done;
        }
        Py_ssize_t count = PyObject_Length(partitions);
        if (count < 0) {
            Py_DECREF(partitions);
            goto done;
        }
        Py_XSETREF(lane->cached_view, Py_NewRef(view));
        Py_XSETREF(lane->cached_topic, Py_NewRef(topic));
        Py_XSETREF(lane->cached_partitions, partitions);
        lane->cached_count = count;
    }
    PyObject *partitions = lane->cached_partitions;
    Py_ssize_t partition_count = lane->cached_count;
    if ((closed = PyObject_GetAttr(lane->core, str_closed)) == NULL) {
        goto done;
    }
    Py_ssize_t size = RECORD_OVERHEAD + PyBytes_GET_SIZE(value) + (key != Py_None ? PyBytes_GET_SIZE(key) : 0);
    if (partition_count == 0 || closed != Py_False
            || size + BATCH_OVERHEAD > lane->max_request_size || size > lane->settings_buffer_memory) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    long long timestamp_value;
    if (timestamp_ms == Py_None) {
        timestamp_value = now_ms();
        if (lane->now_object == NULL || timestamp_value != lane->now_value) {
            Py_XSETREF(lane->now_object, PyLong_FromLongLong(timestamp_value));
            lane->now_value = timestamp_value;
        }
        timestamp = Py_XNewRef(lane->now_object);
    } else if (get_long(timestamp_ms, &timestamp_value) == 0) {
        timestamp = Py_NewRef(timestamp_ms);
    } else {
        result = Py_NewRef(Py_None);
        goto done;
    }
    long long number_value;
    if (timestamp == NULL
            || (number = pick_partition(lane, view, topic, key, partitions, partition_count, size)) == NULL) {
        goto done;
    }
    if (get_long(number, &number_value) < 0) {
        PyErr_SetString(PyExc_TypeError, "the partitioner did not give an int");
        goto done;
    }
    if (topic == lane->cached_partition_topic && number_value == lane->cached_partition_number) {
        topic_partition = Py_NewRef(lane->cached_topic_partition);
    } else {
        if ((lookup = PyTuple_Pack(2, topic, number)) == NULL) {
            goto done;
        }
        topic_partition = PyDict_GetItemWithError(lane->topic_partitions, lookup);
        Py_XINCREF(topic_partition);
        if (topic_partition == NULL) {
            if (PyErr_Occurred()) {
                goto done;
            }
            PyObject *arguments[] = {topic, number};
            topic_partition = PyObject_Vectorcall(topic_partition_type, arguments, 2, NULL);
            if (topic_partition == NULL || PyDict_SetItem(lane->topic_partitions, lookup, topic_partition) < 0) {
                goto done;
            }
        }
        Py_XSETREF(lane->cached_partition_topic, Py_NewRef(topic));
        Py_XSETREF(lane->cached_topic_partition, Py_NewRef(topic_partition));
        lane->cached_partition_number = number_value;
    }
    result = lane_append(lane, topic_partition, timestamp, timestamp_value, key, value, size);
done:
    Py_XDECREF(view);
    Py_XDECREF(closed);
    Py_XDECREF(timestamp);
    Py_XDECREF(number);
    Py_XDECREF(lookup);
    Py_XDECREF(topic_partition);
    return result;
}

static const char *const send_record_names[] = {"topic", "value", "key", "headers", "partition", "timestamp_ms"};

/* The owner's Python send(*args, **kwargs), for every call the lane does not take. */
static PyObject *
call_fallback(SendLane *lane, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    if (lane->owner == NULL || lane->fallback == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "the send lane is not bound to a producer");
        return NULL;
    }
    PyObject *owner = PyWeakref_GetObject(lane->owner);
    if (owner == NULL) {
        return NULL;
    }
    if (owner == Py_None) {
        PyErr_SetString(PyExc_ReferenceError, "the producer of this send() is gone");
        return NULL;
    }
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    Py_ssize_t total = nargs + (kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames));
    PyObject *small[16];
    PyObject **arguments = total < 16 ? small : PyMem_New(PyObject *, total + 1);
    if (arguments == NULL) {
        return PyErr_NoMemory();
    }
    Py_INCREF(owner);
    arguments[0] = owner;
    for (Py_ssize_t index = 0; index < total; index++) {
        arguments[index + 1] = args[index];
    }
    PyObject *result = PyObject_Vectorcall(lane->fallback, arguments, nargs + 1, kwnames);
    Py_DECREF(owner);
    if (arguments != small) {
        PyMem_Free(arguments);
    }
    return result;
}

PyDoc_STRVAR(lane_send_record_doc,
"send_record($self, /, topic, value=None, key=None, headers=None, partition=None, timestamp_ms=None)\n--\n\n"
"KafkaProducer.send of the producer this lane is bound to: the common record in one call, and\n"
"anything else (and every error) through the producer's Python send.");

static PyObject *
lane_send_record(SendLane *lane, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    PyObject *fields[6] = {NULL, Py_None, Py_None, Py_None, Py_None, Py_None};
    if (nargs < 1 || nargs > 6) {
        return call_fallback(lane, args, nargsf, kwnames);
    }
    for (Py_ssize_t index = 0; index < nargs; index++) {
        fields[index] = args[index];
    }
    if (kwnames != NULL) {
        Py_ssize_t keywords = PyTuple_GET_SIZE(kwnames);
        for (Py_ssize_t index = 0; index < keywords; index++) {
            PyObject *name = PyTuple_GET_ITEM(kwnames, index);
            Py_ssize_t field = -1;
            for (Py_ssize_t candidate = 1; candidate < 6; candidate++) {
                if (PyUnicode_CompareWithASCIIString(name, send_record_names[candidate]) == 0) {
                    field = candidate;
                    break;
                }
            }
            if (field < nargs) {  /* unknown, positional-only or given twice: Python says which */
                return call_fallback(lane, args, nargsf, kwnames);
            }
            fields[field] = args[nargs + index];
        }
    }
    PyObject *future = lane_send(lane, fields, 6);
    if (future != Py_None) {
        return future;
    }
    Py_DECREF(future);
    return call_fallback(lane, fields, 6, NULL);
}

PyDoc_STRVAR(lane_bind_doc,
"bind(owner, fallback) -> None\n\n"
"send_record's owner (held weakly) and the function it calls as fallback(owner, ...) for what the\n"
"lane does not take.");

static PyObject *
lane_bind(SendLane *lane, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyCallable_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "bind takes the owner and a callable");
        return NULL;
    }
    PyObject *reference = PyWeakref_NewRef(args[0], NULL);
    if (reference == NULL) {
        return NULL;
    }
    Py_XSETREF(lane->owner, reference);
    Py_XSETREF(lane->fallback, Py_NewRef(args[1]));
    Py_RETURN_NONE;
}

static int
attribute_long(PyObject *object, const char *name, long long *out)
{
    PyObject *attribute = PyObject_GetAttrString(object, name);
    if (attribute == NULL) {
        return -1;
    }
    int failed = get_long(attribute, out);
    Py_DECREF(attribute);
    if (failed) {
        PyErr_Format(PyExc_TypeError, "%s is not an int", name);
    }
    return failed;
}

static int
attribute_true(PyObject *object, const char *name, int *out)
{
    PyObject *attribute = PyObject_GetAttrString(object, name);
    if (attribute == NULL) {
        return -1;
    }
    *out = PyObject_IsTrue(attribute);
    Py_DECREF(attribute);
    return *out < 0 ? -1 : 0;
}

static PyObject *
lane_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    PyObject *core;
    if (accumulator_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "kafkalite.client._speedups is not configured");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "O:SendLane", &core)) {
        return NULL;
    }
    SendLane *lane = (SendLane *)type->tp_alloc(type, 0);
    if (lane == NULL) {
        return NULL;
    }
    lane->core = Py_NewRef(core);
    PyObject *lock = NULL, *settings = NULL, *transaction = NULL;
    if ((lane->metadata = PyObject_GetAttrString(core, "metadata")) == NULL
            || (lane->accumulator = PyObject_GetAttrString(core, "accumulator")) == NULL
            || (lane->partitioner = PyObject_GetAttrString(core, "partitioner")) == NULL
            || (lane->topic_partitions = PyObject_GetAttrString(core, "_topic_partitions")) == NULL
            || (settings = PyObject_GetAttrString(core, "settings")) == NULL) {
        goto error;
    }
    if (Py_TYPE(lane->accumulator) != accumulator_type || !PyDict_CheckExact(lane->topic_partitions)) {
        PyErr_SetString(PyExc_TypeError, "SendLane needs a core with a RecordAccumulator");
        goto error;
    }
    if ((lock = PyObject_GetAttrString(lane->accumulator, "_lock")) == NULL
            || (lane->acquire = PyObject_GetAttrString(lock, "acquire")) == NULL
            || (lane->release = PyObject_GetAttrString(lock, "release")) == NULL
            || (lane->locked = PyObject_GetAttrString(lock, "locked")) == NULL
            || (lane->partition_states = PyObject_GetAttrString(lane->accumulator, "_partitions")) == NULL
            || attribute_long(lane->accumulator, "batch_size", &lane->batch_size) < 0
            || attribute_long(lane->accumulator, "buffer_memory", &lane->buffer_memory) < 0
            || attribute_long(settings, "max_request_size", &lane->max_request_size) < 0
            || attribute_long(settings, "buffer_memory", &lane->settings_buffer_memory) < 0
            || attribute_true(core, "plain_sends", &lane->plain_sends) < 0
            || attribute_true(core, "_default_partitioner", &lane->default_partitioner) < 0
            || (transaction = PyObject_GetAttr(core, str_transaction)) == NULL) {
        goto error;
    }
    lane->transactional = transaction != Py_None;  /* fixed when the core is made */
    if (!PyDict_CheckExact(lane->partition_states)) {
        PyErr_SetString(PyExc_TypeError, "the accumulator's partitions are not a dict");
        goto error;
    }
    Py_DECREF(lock);
    Py_DECREF(settings);
    Py_DECREF(transaction);
    return (PyObject *)lane;
error:
    Py_XDECREF(lock);
    Py_XDECREF(settings);
    Py_XDECREF(transaction);
    Py_DECREF(lane);
    return NULL;
}

static int
lane_traverse(SendLane *lane, visitproc visit, void *arg)
{
    Py_VISIT(lane->core);
    Py_VISIT(lane->metadata);
    Py_VISIT(lane->accumulator);
    Py_VISIT(lane->acquire);
    Py_VISIT(lane->release);
    Py_VISIT(lane->partition_states);
    Py_VISIT(lane->partitioner);
    Py_VISIT(lane->topic_partitions);
    Py_VISIT(lane->locked);
    Py_VISIT(lane->cached_view);
    Py_VISIT(lane->cached_topic);
    Py_VISIT(lane->cached_partitions);
    Py_VISIT(lane->cached_partition_topic);
    Py_VISIT(lane->cached_topic_partition);
    Py_VISIT(lane->now_object);
    Py_VISIT(lane->owner);
    Py_VISIT(lane->fallback);
    return 0;
}

static int
lane_clear(SendLane *lane)
{
    Py_CLEAR(lane->core);
    Py_CLEAR(lane->metadata);
    Py_CLEAR(lane->accumulator);
    Py_CLEAR(lane->acquire);
    Py_CLEAR(lane->release);
    Py_CLEAR(lane->partition_states);
    Py_CLEAR(lane->partitioner);
    Py_CLEAR(lane->topic_partitions);
    Py_CLEAR(lane->locked);
    Py_CLEAR(lane->cached_view);
    Py_CLEAR(lane->cached_topic);
    Py_CLEAR(lane->cached_partitions);
    Py_CLEAR(lane->cached_partition_topic);
    Py_CLEAR(lane->cached_topic_partition);
    Py_CLEAR(lane->now_object);
    Py_CLEAR(lane->owner);
    Py_CLEAR(lane->fallback);
    return 0;
}

static void
lane_dealloc(SendLane *lane)
{
    PyObject_GC_UnTrack(lane);
    lane_clear(lane);
    Py_TYPE(lane)->tp_free((PyObject *)lane);
}

static PyMethodDef lane_methods[] = {
    {"send", (PyCFunction)(void (*)(void))lane_send, METH_FASTCALL, lane_send_doc},
    {"send_record", (PyCFunction)(void (*)(void))lane_send_record, METH_FASTCALL | METH_KEYWORDS,
     lane_send_record_doc},
    {"bind", (PyCFunction)(void (*)(void))lane_bind, METH_FASTCALL, lane_bind_doc},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject SendLaneType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kafkalite.client._speedups.SendLane",
    .tp_doc = PyDoc_STR("SendLane(core): ProducerCore.send_plain of one core, compiled."),
    .tp_basicsize = sizeof(SendLane),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = lane_new,
    .tp_dealloc = (destructor)lane_dealloc,
    .tp_traverse = (traverseproc)lane_traverse,
    .tp_clear = (inquiry)lane_clear,
    .tp_methods = lane_methods,
};

PyDoc_STRVAR(configure_doc,
"configure(record_accumulator, producer_batch, partition_state, record_future, topic_partition) -> None\n\n"
"The classes SendLane works with; their slot offsets are looked up here, once.");

static PyObject *
speedups_configure(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5 || !PyType_Check(args[0]) || !PyType_Check(args[1]) || !PyType_Check(args[2])
            || !PyType_Check(args[3])) {
        PyErr_SetString(PyExc_TypeError, "configure takes four classes and the TopicPartition class");
        return NULL;
    }
    PyTypeObject *accumulator = (PyTypeObject *)args[0], *batch = (PyTypeObject *)args[1],
        *state = (PyTypeObject *)args[2], *future = (PyTypeObject *)args[3];
    AccumulatorSlots accumulator_offsets;
    BatchSlots batch_offsets;
    Py_ssize_t batches_offset;
    if (slot_offset(accumulator, "_closed", &accumulator_offsets.closed) < 0
            || slot_offset(accumulator, "_closing", &accumulator_offsets.closing) < 0
            || slot_offset(accumulator, "_used_memory", &accumulator_offsets.used_memory) < 0
            || slot_offset(batch, "values", &batch_offsets.values) < 0 || slot_offset(batch, "keys", &batch_offsets.keys) < 0
            || slot_offset(batch, "timestamps", &batch_offsets.timestamps) < 0
            || slot_offset(batch, "headers", &batch_offsets.headers) < 0
            || slot_offset(batch, "size", &batch_offsets.size) < 0
            || slot_offset(batch, "memory", &batch_offsets.memory) < 0
            || slot_offset(batch, "result", &batch_offsets.result) < 0
            || slot_offset(batch, "closed", &batch_offsets.closed) < 0
            || slot_offset(batch, "min_timestamp", &batch_offsets.min_timestamp) < 0
            || slot_offset(batch, "max_timestamp", &batch_offsets.max_timestamp) < 0
            || slot_offset(batch, "record_count", &batch_offsets.record_count) < 0
            || slot_offset(state, "batches", &batches_offset) < 0) {
        return NULL;
    }
    if (!PyType_IsSubtype(future, &FutureFieldsType) || future->tp_basicsize != FutureFieldsType.tp_basicsize) {
        PyErr_SetString(PyExc_TypeError, "the record future class must be a slotless FutureFields subclass");
        return NULL;
    }
    accumulator_slots = accumulator_offsets;
    batch_slots = batch_offsets;
    state_batches_slot = batches_offset;
    Py_XSETREF(accumulator_type, (PyTypeObject *)Py_NewRef(accumulator));
    Py_XSETREF(batch_type, (PyTypeObject *)Py_NewRef(batch));
    Py_XSETREF(state_type, (PyTypeObject *)Py_NewRef(state));
    Py_XSETREF(future_type, (PyTypeObject *)Py_NewRef(future));
    Py_XSETREF(topic_partition_type, Py_NewRef(args[4]));
    Py_RETURN_NONE;
}

static PyMethodDef speedups_methods[] = {
    {"configure", (PyCFunction)(void (*)(void))speedups_configure, METH_FASTCALL, configure_doc},
    {"configure_futures", (PyCFunction)(void (*)(void))speedups_configure_futures, METH_FASTCALL,
     configure_futures_doc},
    {"run_callbacks", (PyCFunction)(void (*)(void))speedups_run_callbacks, METH_FASTCALL, run_callbacks_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef speedups_module = {
    PyModuleDef_HEAD_INIT, "kafkalite.client._speedups",
    "The compiled twin of ProducerCore.send_plain (see kafkalite.client.producer_core).", -1, speedups_methods,
    NULL, NULL, NULL, NULL,
};

#define INTERN(variable, text)                          \
    do {                                                \
        variable = PyUnicode_InternFromString(text);    \
        if (variable == NULL) {                         \
            return NULL;                                \
        }                                               \
    } while (0)

PyMODINIT_FUNC
PyInit__speedups(void)
{
    INTERN(str_acquire, "acquire");
    INTERN(str_release, "release");
    INTERN(str_view, "view");
    INTERN(str_partitions, "partitions");
    INTERN(str_available, "available");
    INTERN(str_closed, "closed");
    INTERN(str_transaction, "transaction");
    INTERN(str_partition, "partition");
    INTERN(str_wakeup, "wakeup");
    INTERN(str_append, "append");
    INTERN(str_get, "get");
    INTERN(str_topic_partition, "topic_partition");
    INTERN(str_base_offset, "base_offset");
    INTERN(str_log_append_time, "log_append_time");
    if (PyType_Ready(&SendLaneType) < 0 || PyType_Ready(&FutureFieldsType) < 0) {
        return NULL;
    }
    PyObject *module = PyModule_Create(&speedups_module);
    if (module == NULL) {
        return NULL;
    }
    if (PyModule_AddObjectRef(module, "SendLane", (PyObject *)&SendLaneType) < 0
            || PyModule_AddObjectRef(module, "FutureFields", (PyObject *)&FutureFieldsType) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
