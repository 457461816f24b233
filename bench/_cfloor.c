/* The thinnest *compiled* drop-in producer: bench/callgrind_budget.py --empty-wrapper compiled.
 *
 * Issue 39 asks whether a compiled step would get the positional form to 0.95 of raw where pure Python cannot
 * (docs/benchmarks.md, "Call forms"). This is the floor of any compiled wrapper that, like ykafka's disaster
 * recovery, must see every send and every delivery report: `produce` is one C call (vectorcall) that swaps the
 * user's callback for a C-level forwarder and calls librdkafka's produce positionally; the forwarder is one C
 * call a report that hands a success to the user's callback. Nothing else: no topic state, no order, no
 * failure handling. Built by the benchmark with the interpreter's headers; not part of the package.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>

typedef struct {
    PyObject_HEAD
    PyObject *user;
    vectorcallfunc vectorcall;
} Forward;

static PyObject *forward_call(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    if (PyVectorcall_NARGS(nargsf) != 2 || kwnames != NULL) {
        PyErr_SetString(PyExc_TypeError, "forward(err, msg)");
        return NULL;
    }
    /* a failure (args[0] is not None) would be re-routed here; a success goes to the user */
    return PyObject_Vectorcall(((Forward *)self)->user, args, 2, NULL);
}

static void forward_dealloc(PyObject *self) {
    Py_XDECREF(((Forward *)self)->user);
    Py_TYPE(self)->tp_free(self);
}

static PyTypeObject ForwardType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "_cfloor.Forward",
    .tp_basicsize = sizeof(Forward),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_vectorcall_offset = offsetof(Forward, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_dealloc = forward_dealloc,
};

typedef struct {
    PyObject_HEAD
    PyObject *produce;   /* librdkafka's bound produce */
    PyObject *forwards;  /* user callback -> its Forward */
    int reports;
    vectorcallfunc vectorcall;
} Fast;

static const char *const NAMES[] = {"topic", "value", "key", "partition", "on_delivery", "callback", "timestamp",
                                    "headers"};

static PyObject *fast_call(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    Fast *f = (Fast *)self;
    PyObject *a[8] = {NULL, Py_None, Py_None, NULL, Py_None, Py_None, NULL, Py_None};
    Py_ssize_t n = PyVectorcall_NARGS(nargsf), i, j, nk = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    PyObject *out[8], *cb, *result, *minus1 = NULL, *zero = NULL;
    if (n > 8) {
        PyErr_SetString(PyExc_TypeError, "produce() takes at most 8 arguments");
        return NULL;
    }
    for (i = 0; i < n; i++)
        a[i] = args[i];
    for (j = 0; j < nk; j++) {
        PyObject *name = PyTuple_GET_ITEM(kwnames, j);
        for (i = 0; i < 8; i++)
            if (PyUnicode_CompareWithASCIIString(name, NAMES[i]) == 0)
                break;
        if (i == 8) {
            PyErr_SetString(PyExc_TypeError, "produce(): unexpected keyword");
            return NULL;
        }
        a[i] = args[n + j];
    }
    cb = a[4] != Py_None ? a[4] : a[5];
    if (f->reports && cb != Py_None) {
        PyObject *fw = PyDict_GetItemWithError(f->forwards, cb);  /* borrowed */
        if (fw == NULL) {
            if (PyErr_Occurred())
                return NULL;
            Forward *nf = PyObject_New(Forward, &ForwardType);
            if (nf == NULL)
                return NULL;
            Py_INCREF(cb);
            nf->user = cb;
            nf->vectorcall = forward_call;
            if (PyDict_SetItem(f->forwards, cb, (PyObject *)nf) < 0) {
                Py_DECREF(nf);
                return NULL;
            }
            Py_DECREF(nf);
            fw = (PyObject *)nf;
        }
        cb = fw;
    }
    out[0] = a[0];
    out[1] = a[1];
    out[2] = a[2];
    out[3] = a[3] ? a[3] : (minus1 = PyLong_FromLong(-1));
    out[4] = cb;
    out[5] = Py_None;
    out[6] = a[6] ? a[6] : (zero = PyLong_FromLong(0));
    out[7] = a[7];
    result = PyObject_Vectorcall(f->produce, out, 8, NULL);
    Py_XDECREF(minus1);
    Py_XDECREF(zero);
    return result;
}

static void fast_dealloc(PyObject *self) {
    Py_XDECREF(((Fast *)self)->produce);
    Py_XDECREF(((Fast *)self)->forwards);
    Py_TYPE(self)->tp_free(self);
}

static PyObject *fast_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    PyObject *produce;
    int reports = 1;
    if (!PyArg_ParseTuple(args, "O|p", &produce, &reports))
        return NULL;
    Fast *f = (Fast *)type->tp_alloc(type, 0);
    if (f == NULL)
        return NULL;
    Py_INCREF(produce);
    f->produce = produce;
    f->forwards = PyDict_New();
    f->reports = reports;
    f->vectorcall = fast_call;
    if (f->forwards == NULL) {
        Py_DECREF(f);
        return NULL;
    }
    return (PyObject *)f;
}

static PyTypeObject FastType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "_cfloor.Fast",
    .tp_basicsize = sizeof(Fast),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_vectorcall_offset = offsetof(Fast, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_new = fast_new,
    .tp_dealloc = fast_dealloc,
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_cfloor", NULL, -1, NULL};

PyMODINIT_FUNC PyInit__cfloor(void) {
    PyObject *m;
    if (PyType_Ready(&ForwardType) < 0 || PyType_Ready(&FastType) < 0)
        return NULL;
    m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&FastType);
    if (PyModule_AddObject(m, "Fast", (PyObject *)&FastType) < 0) {
        Py_DECREF(&FastType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
