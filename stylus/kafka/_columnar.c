/*
 * Produce many records in one call on a confluent-kafka Producer (stylus/kafka/columnar.py).
 *
 * confluent-kafka's `produce` parses its arguments and builds its per-message state for every record; for a
 * batch processor's outputs (lists of values, keys and timestamps) that call is most of what producing costs.
 * Here the same librdkafka call is made for each record in C, on the Producer's own librdkafka handle and with
 * the per-message state confluent-kafka's delivery-report callback reads, so delivery reports, flush, poll and
 * transactions behave exactly as for records given to `produce`.
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

typedef struct {
    PyObject_HEAD
    rd_kafka_t *rk;
} ClientHead;

struct Producer_msgstate {
    PyObject *self;
    PyObject *dr_cb;
};

static PyObject *producer_type = NULL;

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

static PyObject *libversion(PyObject *module, PyObject *unused) {
    return PyLong_FromLong(rd_kafka_version());
}

static PyMethodDef methods[] = {
    {"produce_many", produce_many, METH_VARARGS, "Produce records start.. of lists of values, keys, timestamps."},
    {"libversion", libversion, METH_NOARGS, "The librdkafka version this module calls (rd_kafka_version())."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_columnar", NULL, -1, methods};

PyMODINIT_FUNC PyInit__columnar(void) {
    PyObject *cimpl = PyImport_ImportModule("confluent_kafka.cimpl");
    if (cimpl == NULL)
        return NULL;
    producer_type = PyObject_GetAttrString(cimpl, "Producer");
    Py_DECREF(cimpl);
    if (producer_type == NULL)
        return NULL;
    PyObject *module = PyModule_Create(&module_def);
    if (module == NULL)
        return NULL;
    if (PyModule_AddStringConstant(module, "built_for", CONFLUENT_KAFKA_VERSION) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
