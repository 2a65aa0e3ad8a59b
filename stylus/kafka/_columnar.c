/*
 * A batch processor's records in and out of confluent-kafka's clients a batch at a time
 * (stylus/kafka/columnar.py).
 *
 * Producing: confluent-kafka's `produce` parses its arguments and builds its per-message state for every
 * record; for a batch processor's outputs (lists of values, keys and timestamps) that call is most of what
 * producing costs. Here the same librdkafka call is made for each record in C, on the Producer's own librdkafka
 * handle and with the per-message state confluent-kafka's delivery-report callback reads, so delivery reports,
 * flush, poll and transactions behave exactly as for records given to `produce`.
 *
 * Consuming: `Reader` forwards the queues of a Consumer's assigned partitions to a queue of its own (librdkafka's
 * `rd_kafka_queue_forward`, which the consumer then leaves in place when it starts fetching them) and reads it
 * a batch at a time into lists per partition, with no Message object per record. Everything else stays on the
 * consumer's own queue and is served by its `consume`/`poll`: rebalances, commit answers, errors. An event
 * there wakes a `read` waiting on the Reader's queue, so the caller serves it at once.
 *
 * It rests on two layouts private to confluent-kafka's C module, both unchanged since 0.11 and pinned by the
 * exact confluent-kafka version in pyproject.toml: a client object starts with its `rd_kafka_t *` after the
 * Python object header, and a record's opaque is `struct Producer_msgstate { Handle *self; PyObject *dr_cb; }`
 * allocated with calloc and freed with free. columnar.py refuses to load this module for any other
 * confluent-kafka version, or when the process holds more than one librdkafka.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <librdkafka/rdkafka.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    PyObject_HEAD
    rd_kafka_t *rk;
} ClientHead;

struct Producer_msgstate {
    PyObject *self;
    PyObject *dr_cb;
};

static PyObject *producer_type = NULL, *consumer_type = NULL;

/* The loop of produce_many over the items of its three sequences. */
static PyObject *produce_range(rd_kafka_t *rk, PyObject *producer, PyObject *on_delivery, const char *topic,
                               PyObject **values, PyObject **keys, PyObject **stamps, Py_ssize_t start,
                               Py_ssize_t n) {
    PyObject *dr_cb = on_delivery == Py_None ? NULL : on_delivery;
    rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, topic, NULL);
    if (rkt == NULL)
        return Py_BuildValue("(ni)", start, (int)rd_kafka_last_error());
    rd_kafka_resp_err_t err = RD_KAFKA_RESP_ERR_NO_ERROR;
    Py_ssize_t i = start;
    for (; i < n; i++) {
        PyObject *value = values[i], *key = keys[i];
        if ((value != Py_None && !PyBytes_Check(value)) || (key != Py_None && !PyBytes_Check(key))) {
            PyErr_Format(PyExc_TypeError, "record %zd: values and keys must be bytes or None", i);
            break;
        }
        long long timestamp = PyLong_AsLongLong(stamps[i]);
        if (timestamp == -1 && PyErr_Occurred())
            break;
        struct Producer_msgstate *state = calloc(1, sizeof(*state));
        if (state == NULL) {
            PyErr_NoMemory();
            break;
        }
        state->self = producer;
        if (dr_cb != NULL) {
            Py_INCREF(dr_cb);
            state->dr_cb = dr_cb;
        }
        void *value_data = value == Py_None ? NULL : PyBytes_AS_STRING(value);
        size_t value_len = value == Py_None ? 0 : (size_t)PyBytes_GET_SIZE(value);
        const void *key_data = key == Py_None ? NULL : PyBytes_AS_STRING(key);
        size_t key_len = key == Py_None ? 0 : (size_t)PyBytes_GET_SIZE(key);
        err = rd_kafka_producev(rk, RD_KAFKA_V_RKT(rkt), RD_KAFKA_V_PARTITION(RD_KAFKA_PARTITION_UA),
                                RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_VALUE(value_data, value_len),
                                RD_KAFKA_V_KEY(key_data, key_len), RD_KAFKA_V_TIMESTAMP(timestamp),
                                RD_KAFKA_V_OPAQUE(state), RD_KAFKA_V_END);
        if (err) {
            Py_XDECREF(state->dr_cb);
            free(state);
            break;
        }
    }
    rd_kafka_topic_destroy(rkt);
    if (PyErr_Occurred())
        return NULL;
    return Py_BuildValue("(ni)", i, (int)err);
}

/* produce_many(producer, on_delivery, topic, values, keys, timestamps, start) -> (next, error)
 *
 * Produces the records start.. of the three sequences (values and keys: bytes or None; timestamps: int, 0 for
 * the producer's clock) to `topic`, partitioned by the producer's partitioner. Returns the index of the first
 * record not produced and librdkafka's error for it: (len, 0) when all were, (i, -184) when the queue is full
 * (poll, then call again from i), (i, code) when librdkafka refused record i. */
static PyObject *produce_many(PyObject *module, PyObject *args) {
    PyObject *producer, *on_delivery, *values_in, *keys_in, *stamps_in;
    const char *topic;
    Py_ssize_t start;
    if (!PyArg_ParseTuple(args, "OOsOOOn", &producer, &on_delivery, &topic, &values_in, &keys_in, &stamps_in,
                          &start))
        return NULL;
    int is_producer = PyObject_IsInstance(producer, producer_type);
    if (is_producer <= 0) {
        if (is_producer == 0)
            PyErr_SetString(PyExc_TypeError, "produce_many needs a confluent_kafka.Producer");
        return NULL;
    }
    rd_kafka_t *rk = ((ClientHead *)producer)->rk;
    if (rk == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "Producer has been closed");
        return NULL;
    }
    /* lists and tuples as they are; other sequences copied once */
    PyObject *values = PySequence_Fast(values_in, "values must be a sequence");
    PyObject *keys = values ? PySequence_Fast(keys_in, "keys must be a sequence") : NULL;
    PyObject *stamps = keys ? PySequence_Fast(stamps_in, "timestamps must be a sequence") : NULL;
    PyObject *result = NULL;
    if (stamps == NULL)
        goto done;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(values);
    if (PySequence_Fast_GET_SIZE(keys) != n || PySequence_Fast_GET_SIZE(stamps) != n) {
        PyErr_SetString(PyExc_ValueError, "values, keys and timestamps differ in length");
        goto done;
    }
    if (start < 0 || start > n) {
        PyErr_SetString(PyExc_IndexError, "start is not an index of the records");
        goto done;
    }
    result = produce_range(rk, producer, on_delivery, topic, PySequence_Fast_ITEMS(values),
                           PySequence_Fast_ITEMS(keys), PySequence_Fast_ITEMS(stamps), start, n);
done:
    Py_XDECREF(values);
    Py_XDECREF(keys);
    Py_XDECREF(stamps);
    return result;
}


/* ------------------------------------------------------------------------------------------- Reader */

typedef struct {
    PyObject_HEAD
    PyObject *consumer; /* kept alive while the Reader is */
    rd_kafka_t *rk;
    rd_kafka_queue_t *queue;       /* the partitions' records */
    rd_kafka_queue_t *events;      /* the consumer's own queue: an event there wakes `read` */
    rd_kafka_message_t **msgs;
    Py_ssize_t capacity;
} Reader;

/* librdkafka calls this from its own threads when the consumer's queue gets an event: a `read` waiting on the
 * Reader's queue returns at once (or the next one does), and the caller serves the consumer. */
static void wake_reader(rd_kafka_t *rk, void *queue) {
    rd_kafka_queue_yield((rd_kafka_queue_t *)queue);
}

static int Reader_init(Reader *self, PyObject *args, PyObject *kwargs) {
    PyObject *consumer;
    if (!PyArg_ParseTuple(args, "O", &consumer))
        return -1;
    int is_consumer = PyObject_IsInstance(consumer, consumer_type);
    if (is_consumer <= 0) {
        if (is_consumer == 0)
            PyErr_SetString(PyExc_TypeError, "Reader needs a confluent_kafka.Consumer");
        return -1;
    }
    rd_kafka_t *rk = ((ClientHead *)consumer)->rk;
    if (rk == NULL || rd_kafka_type(rk) != RD_KAFKA_CONSUMER) {
        PyErr_SetString(PyExc_RuntimeError, "Consumer has been closed");
        return -1;
    }
    if (self->queue != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "Reader already initialised");
        return -1;
    }
    Py_INCREF(consumer);
    self->consumer = consumer;
    self->rk = rk;
    self->queue = rd_kafka_queue_new(rk);
    self->events = rd_kafka_queue_get_consumer(rk);
    if (self->events != NULL)
        rd_kafka_queue_cb_event_enable(self->events, wake_reader, self->queue);
    return 0;
}

/* Stops waking and forgets the queues; the partitions' queues must no longer forward to ours (Python side).
 * Once the consumer is closed its librdkafka handle is gone, and the queues with it: nothing is released then. */
static void Reader_release(Reader *self) {
    if (self->consumer != NULL && ((ClientHead *)self->consumer)->rk != self->rk) {
        self->events = NULL;
        self->queue = NULL;
        return;
    }
    if (self->events != NULL) {
        rd_kafka_queue_cb_event_enable(self->events, NULL, NULL);
        rd_kafka_queue_destroy(self->events);
        self->events = NULL;
    }
    if (self->queue != NULL) {
        rd_kafka_queue_destroy(self->queue);
        self->queue = NULL;
    }
}

static void Reader_dealloc(Reader *self) {
    Reader_release(self);
    free(self->msgs);
    Py_XDECREF(self->consumer);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int Reader_open(Reader *self) {
    if (self->queue == NULL || ((ClientHead *)self->consumer)->rk != self->rk) {
        PyErr_SetString(PyExc_RuntimeError, "the Reader is closed, or its consumer is");
        return 0;
    }
    return 1;
}

/* forward(topic, partition, on): the partition's records to this Reader (on) or nowhere (off: before close) */
static PyObject *Reader_forward(Reader *self, PyObject *args) {
    const char *topic;
    int partition, on;
    if (!PyArg_ParseTuple(args, "sip", &topic, &partition, &on))
        return NULL;
    if (!Reader_open(self))
        return NULL;
    rd_kafka_queue_t *partition_queue = rd_kafka_queue_get_partition(self->rk, topic, partition);
    if (partition_queue == NULL) {
        PyErr_Format(PyExc_KeyError, "%s[%d]: no such partition", topic, partition);
        return NULL;
    }
    rd_kafka_queue_forward(partition_queue, on ? self->queue : NULL);
    rd_kafka_queue_destroy(partition_queue);
    Py_RETURN_NONE;
}

static PyObject *Reader_close(Reader *self, PyObject *unused) {
    Reader_release(self);
    Py_RETURN_NONE;
}

/* One partition's records of a read, gathered in its lists. */
typedef struct {
    rd_kafka_topic_t *rkt;
    int32_t partition;
    Py_ssize_t count, filled;
    int64_t first, last;
    int contiguous;
    PyObject *offsets, *keys, *values, *stamps, *headers;
} Run;

static PyObject *bytes_or_none(const void *data, size_t len) {
    if (data == NULL)
        Py_RETURN_NONE;
    return PyBytes_FromStringAndSize(data, (Py_ssize_t)len);
}

/* The record's headers as confluent-kafka's Message.headers() gives them, or None. */
static PyObject *headers_of(rd_kafka_message_t *m) {
    rd_kafka_headers_t *headers;
    if (rd_kafka_message_headers(m, &headers) != RD_KAFKA_RESP_ERR_NO_ERROR)
        Py_RETURN_NONE;
    size_t count = rd_kafka_header_cnt(headers);
    PyObject *list = PyList_New((Py_ssize_t)count);
    if (list == NULL)
        return NULL;
    const char *name;
    const void *value;
    size_t size;
    for (size_t i = 0; i < count && !rd_kafka_header_get_all(headers, i, &name, &value, &size); i++) {
        PyObject *pair = Py_BuildValue("(NN)", PyUnicode_DecodeUTF8(name, strlen(name), "surrogateescape"),
                                       bytes_or_none(value, size));
        if (pair == NULL) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, (Py_ssize_t)i, pair);
    }
    return list;
}

static void runs_clear(Run *runs, Py_ssize_t n) {
    for (Py_ssize_t r = 0; r < n; r++) {
        Py_XDECREF(runs[r].offsets);
        Py_XDECREF(runs[r].keys);
        Py_XDECREF(runs[r].values);
        Py_XDECREF(runs[r].stamps);
        Py_XDECREF(runs[r].headers);
    }
}

/* The messages' records as one tuple per partition (topic, partition, offsets, keys, values, timestamps,
 * headers) in the order first seen, the events (end of partition, errors) as (topic, partition, offset, code,
 * reason), and the records' bytes (keys and values). Destroys the messages. */
static PyObject *gather(rd_kafka_message_t **msgs, Py_ssize_t got) {
    Run *runs = NULL;
    Py_ssize_t nruns = 0, bytes = 0;
    Py_ssize_t *run_of = malloc(sizeof(Py_ssize_t) * (got ? got : 1));
    PyObject *result = NULL, *tuples = NULL, *events = PyList_New(0);
    if (run_of == NULL || events == NULL)
        goto done;
    for (Py_ssize_t i = 0; i < got; i++) { /* count each partition's records */
        rd_kafka_message_t *m = msgs[i];
        run_of[i] = -1;
        if (m->err)
            continue;
        Py_ssize_t r = nruns - 1;
        if (r < 0 || runs[r].rkt != m->rkt || runs[r].partition != m->partition)
            for (r = 0; r < nruns && (runs[r].rkt != m->rkt || runs[r].partition != m->partition); r++)
                ;
        if (r == nruns) {
            Run *more = realloc(runs, sizeof(Run) * (nruns + 1));
            if (more == NULL) {
                PyErr_NoMemory();
                goto done;
            }
            runs = more;
            memset(&runs[r], 0, sizeof(Run));
            runs[r].rkt = m->rkt;
            runs[r].partition = m->partition;
            runs[r].first = m->offset;
            runs[r].contiguous = 1;
            nruns++;
        } else if (m->offset != runs[r].last + 1) {
            runs[r].contiguous = 0;
        }
        runs[r].last = m->offset;
        runs[r].count++;
        run_of[i] = r;
    }
    for (Py_ssize_t r = 0; r < nruns; r++) {
        Py_ssize_t n = runs[r].count;
        runs[r].keys = PyList_New(n);
        runs[r].values = PyList_New(n);
        runs[r].stamps = PyList_New(n);
        runs[r].headers = PyList_New(n);
        runs[r].offsets = runs[r].contiguous
                              ? PyObject_CallFunction((PyObject *)&PyRange_Type, "LL", (long long)runs[r].first,
                                                      (long long)runs[r].last + 1)
                              : PyList_New(n);
        if (!runs[r].keys || !runs[r].values || !runs[r].stamps || !runs[r].headers || !runs[r].offsets)
            goto done;
    }
    for (Py_ssize_t i = 0; i < got; i++) {
        rd_kafka_message_t *m = msgs[i];
        if (m->err) {
            PyObject *event = Py_BuildValue(
                "(NiLis)", m->rkt ? PyUnicode_FromString(rd_kafka_topic_name(m->rkt)) : (Py_INCREF(Py_None), Py_None),
                (int)m->partition, (long long)m->offset, (int)m->err, rd_kafka_message_errstr(m));
            if (event == NULL || PyList_Append(events, event) < 0) {
                Py_XDECREF(event);
                goto done;
            }
            Py_DECREF(event);
            continue;
        }
        Run *run = &runs[run_of[i]];
        Py_ssize_t at = run->filled++;
        rd_kafka_timestamp_type_t type;
        PyObject *key = bytes_or_none(m->key, m->key_len), *value = bytes_or_none(m->payload, m->len);
        PyObject *stamp = PyLong_FromLongLong(rd_kafka_message_timestamp(m, &type)), *headers = headers_of(m);
        PyList_SET_ITEM(run->keys, at, key);
        PyList_SET_ITEM(run->values, at, value);
        PyList_SET_ITEM(run->stamps, at, stamp);
        PyList_SET_ITEM(run->headers, at, headers);
        if (!run->contiguous)
            PyList_SET_ITEM(run->offsets, at, PyLong_FromLongLong(m->offset));
        if (!key || !value || !stamp || !headers || PyErr_Occurred())
            goto done;
        bytes += (Py_ssize_t)(m->len + m->key_len);
    }
    tuples = PyList_New(nruns);
    if (tuples == NULL)
        goto done;
    for (Py_ssize_t r = 0; r < nruns; r++) {
        PyObject *one = Py_BuildValue("(siOOOOO)", rd_kafka_topic_name(runs[r].rkt), (int)runs[r].partition,
                                      runs[r].offsets, runs[r].keys, runs[r].values, runs[r].stamps,
                                      runs[r].headers);
        if (one == NULL)
            goto done;
        PyList_SET_ITEM(tuples, r, one);
    }
    result = Py_BuildValue("(OOn)", tuples, events, bytes);
done:
    for (Py_ssize_t i = 0; i < got; i++)
        rd_kafka_message_destroy(msgs[i]);
    runs_clear(runs, nruns);
    free(runs);
    free(run_of);
    Py_XDECREF(tuples);
    Py_XDECREF(events);
    return result;
}

/* read(max_records, timeout_ms) -> (runs, events, bytes): see gather. Waits up to timeout_ms for the first
 * record, or less when the consumer's queue gets an event; returns with what was there. */
static PyObject *Reader_read(Reader *self, PyObject *args) {
    Py_ssize_t max;
    int timeout_ms;
    if (!PyArg_ParseTuple(args, "ni", &max, &timeout_ms))
        return NULL;
    if (!Reader_open(self))
        return NULL;
    if (max < 1) {
        PyErr_SetString(PyExc_ValueError, "max_records must be positive");
        return NULL;
    }
    if (max > self->capacity) {
        rd_kafka_message_t **more = realloc(self->msgs, sizeof(*more) * (size_t)max);
        if (more == NULL)
            return PyErr_NoMemory();
        self->msgs = more;
        self->capacity = max;
    }
    ssize_t got;
    Py_BEGIN_ALLOW_THREADS
    got = rd_kafka_consume_batch_queue(self->queue, timeout_ms, self->msgs, (size_t)max);
    Py_END_ALLOW_THREADS
    if (got < 0)
        return PyErr_Format(PyExc_RuntimeError, "reading the partitions' queue failed: %s",
                            rd_kafka_err2str(rd_kafka_last_error()));
    return gather(self->msgs, (Py_ssize_t)got);
}

static PyMethodDef Reader_methods[] = {
    {"forward", (PyCFunction)Reader_forward, METH_VARARGS,
     "forward(topic, partition, on): the partition's records to this Reader, or (off) nowhere."},
    {"read", (PyCFunction)Reader_read, METH_VARARGS,
     "read(max_records, timeout_ms) -> (runs, events, bytes): the records read, per partition."},
    {"close", (PyCFunction)Reader_close, METH_NOARGS, "Release the queues (after forwarding every partition off)."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject ReaderType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "stylus.kafka._columnar.Reader",
    .tp_basicsize = sizeof(Reader),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Reader(consumer): a consumer's partitions read a batch at a time into lists per partition.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Reader_init,
    .tp_dealloc = (destructor)Reader_dealloc,
    .tp_methods = Reader_methods,
};

/* ------------------------------------------------------------------------------------------- module */

static PyObject *libversion(PyObject *module, PyObject *unused) {
    return PyLong_FromLong(rd_kafka_version());
}

static PyMethodDef methods[] = {
    {"produce_many", produce_many, METH_VARARGS, "Produce records start.. of lists of values, keys, timestamps."},
    {"libversion", libversion, METH_NOARGS, "The librdkafka version this module calls (rd_kafka_version())."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_columnar", NULL, -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__columnar(void) {
    PyObject *cimpl = PyImport_ImportModule("confluent_kafka.cimpl");
    if (cimpl == NULL)
        return NULL;
    producer_type = PyObject_GetAttrString(cimpl, "Producer");
    consumer_type = PyObject_GetAttrString(cimpl, "Consumer");
    Py_DECREF(cimpl);
    if (producer_type == NULL || consumer_type == NULL || PyType_Ready(&ReaderType) < 0)
        return NULL;
    PyObject *module = PyModule_Create(&module_def);
    if (module == NULL)
        return NULL;
    Py_INCREF(&ReaderType);
    if (PyModule_AddObject(module, "Reader", (PyObject *)&ReaderType) < 0 ||
        PyModule_AddStringConstant(module, "built_for", CONFLUENT_KAFKA_VERSION) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
