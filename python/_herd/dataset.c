/* _herd.Dataset: a handle on a herd_dataset (herd.Dataset wraps it). */
#include "pyherd.h"

static void dataset_dealloc(pyherd_dataset *self)
{
    herd_dataset_free(self->ds);
    pyherd_free_instance((PyObject *)self);
}

static PyObject *wrap(herd_dataset *ds)
{
    pyherd_dataset *o = PyObject_New(pyherd_dataset, pyherd_dataset_type);
    if (!o) {
        herd_dataset_free(ds);
        return NULL;
    }
    o->ds = ds;
    return (PyObject *)o;
}

PyObject *pyherd_dataset_open(PyObject *self, PyObject *args)
{
    (void)self;
    const char *spec;
    int test;
    if (!PyArg_ParseTuple(args, "sp", &spec, &test))
        return NULL;
    herd_dataset *ds = NULL;
    herd_status st;
    Py_BEGIN_ALLOW_THREADS
    st = herd_dataset_open(spec, test ? HERD_SPLIT_TEST : HERD_SPLIT_TRAIN, &ds);
    Py_END_ALLOW_THREADS
    return st == HERD_OK ? wrap(ds) : pyherd_raise(st, test ? "cannot open the test data"
                                                            : "cannot open the training data");
}

/* A C-contiguous buffer of n items of itemsize bytes of the format's kind. */
static int get_buffer(PyObject *obj, Py_buffer *view, Py_ssize_t itemsize, char kind,
                      const char *what)
{
    if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
        return -1;
    const char *f = view->format ? view->format : "B";
    if (*f == '<' || *f == '=' || *f == '@')
        f++;
    bool ok = view->itemsize == itemsize &&
              (kind == 'u' ? (*f == 'B') : (*f == 'i' || *f == 'l' || *f == 'q'));
    if (!ok) {
        PyErr_Format(pyherd_invalid_argument, "%s must be %s, got items of format '%s' (%zd bytes)",
                     what, kind == 'u' ? "uint8 pixels (0..255)" : "int32 labels", view->format,
                     view->itemsize);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

/* [mean per channel] or None into out (c values); 1 if given, 0 if None, -1 on error. */
static int get_floats(PyObject *seq, int c, float *out, const char *what)
{
    if (seq == Py_None)
        return 0;
    PyObject *fast = PySequence_Check(seq) ? PySequence_List(seq) : NULL;
    if (!fast) {
        if (!PyErr_Occurred())
            PyErr_Format(PyExc_TypeError, "%s is a sequence of floats, one per channel", what);
        return -1;
    }
    if (PyList_Size(fast) != c) {
        PyErr_Format(pyherd_invalid_argument, "%s has %zd values for %d channels", what,
                     PyList_Size(fast), c);
        Py_DECREF(fast);
        return -1;
    }
    for (int i = 0; i < c; i++) {
        double v = PyFloat_AsDouble(PyList_GetItem(fast, i));
        if (v == -1.0 && PyErr_Occurred()) {
            Py_DECREF(fast);
            return -1;
        }
        out[i] = (float)v;
    }
    Py_DECREF(fast);
    return 1;
}

PyObject *pyherd_dataset_from_memory(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *images_obj, *labels_obj, *mean_obj, *std_obj;
    Py_ssize_t n;
    int c, h, w, classes;
    if (!PyArg_ParseTuple(args, "OOniiiiOO", &images_obj, &labels_obj, &n, &c, &h, &w, &classes,
                          &mean_obj, &std_obj))
        return NULL;
    /* Channels outside 1..3: herd_dataset_from_memory names them. */
    bool channels_ok = c >= 1 && c <= 3;
    float mean[3], std[3];
    int has_mean = channels_ok ? get_floats(mean_obj, c, mean, "mean") : 0;
    int has_std = has_mean >= 0 && channels_ok ? get_floats(std_obj, c, std, "std") : 0;
    if (has_mean < 0 || has_std < 0)
        return NULL;
    Py_buffer images, labels;
    if (get_buffer(images_obj, &images, 1, 'u', "images") < 0)
        return NULL;
    if (get_buffer(labels_obj, &labels, 4, 'i', "labels") < 0) {
        PyBuffer_Release(&images);
        return NULL;
    }
    PyObject *result = NULL;
    if (n < 0 || images.len != n * (Py_ssize_t)c * h * w || labels.len != n * 4) {
        PyErr_Format(pyherd_invalid_argument, "%zd images of %d x %d x %d need %zd pixels and %zd "
                     "labels; got %zd pixels and %zd labels", n, c, h, w, n * (Py_ssize_t)c * h * w,
                     n, images.len, labels.len / 4);
    } else {
        herd_dataset *ds = NULL;
        herd_status st = herd_dataset_from_memory(images.buf, labels.buf, (size_t)n, c, h, w, classes,
                                                  has_mean ? mean : NULL, has_std ? std : NULL, &ds);
        result = st == HERD_OK ? wrap(ds) : pyherd_raise(st, NULL);
    }
    PyBuffer_Release(&images);
    PyBuffer_Release(&labels);
    return result;
}

static PyObject *dataset_size(pyherd_dataset *self, PyObject *unused)
{
    (void)unused;
    return PyLong_FromSize_t(herd_dataset_size(self->ds));
}

/* (c, h, w, classes) */
static PyObject *dataset_shape(pyherd_dataset *self, PyObject *unused)
{
    (void)unused;
    int c, h, w, classes;
    herd_dataset_shape(self->ds, &c, &h, &w, &classes);
    return Py_BuildValue("(iiii)", c, h, w, classes);
}

/* ((mean per channel), (std per channel)) */
static PyObject *dataset_normalization(pyherd_dataset *self, PyObject *unused)
{
    (void)unused;
    float mean[3], std[3];
    int c, h, w, classes;
    herd_dataset_shape(self->ds, &c, &h, &w, &classes);
    herd_dataset_normalization(self->ds, mean, std);
    PyObject *m = PyTuple_New(c > 3 ? 3 : c), *s = PyTuple_New(c > 3 ? 3 : c);
    for (int i = 0; m && s && i < c && i < 3; i++) {
        PyTuple_SetItem(m, i, PyFloat_FromDouble(mean[i]));
        PyTuple_SetItem(s, i, PyFloat_FromDouble(std[i]));
    }
    PyObject *r = m && s ? PyTuple_Pack(2, m, s) : NULL;
    Py_XDECREF(m);
    Py_XDECREF(s);
    return r;
}

static PyObject *dataset_truncate(pyherd_dataset *self, PyObject *args)
{
    Py_ssize_t n;
    if (!PyArg_ParseTuple(args, "n", &n))
        return NULL;
    if (n < 1)
        return PyErr_Format(pyherd_invalid_argument, "keep at least one sample, got %zd", n);
    herd_status st = herd_dataset_truncate(self->ds, (size_t)n);
    return st == HERD_OK ? Py_NewRef(Py_None) : pyherd_raise(st, NULL);
}

static PyObject *dataset_set_seq_len(pyherd_dataset *self, PyObject *args)
{
    int t;
    if (!PyArg_ParseTuple(args, "i", &t))
        return NULL;
    herd_status st = herd_dataset_set_seq_len(self->ds, t);
    return st == HERD_OK ? Py_NewRef(Py_None) : pyherd_raise(st, NULL);
}

/* (T, token data?) */
static PyObject *dataset_seq_len(pyherd_dataset *self, PyObject *unused)
{
    (void)unused;
    bool tokens = false;
    int t = herd_dataset_seq_len(self->ds, &tokens);
    return Py_BuildValue("(iO)", t, tokens ? Py_True : Py_False);
}

/* Token data for a model: its context as the sequence length, or seq_len when > 0. */
static PyObject *dataset_fit_seq_len(pyherd_dataset *self, PyObject *args)
{
    const char *model;
    int t;
    if (!PyArg_ParseTuple(args, "si", &model, &t))
        return NULL;
    herd_status st = herd_dataset_fit_seq_len(self->ds, model, t);
    return st == HERD_OK ? Py_NewRef(Py_None) : pyherd_raise(st, NULL);
}

static PyMethodDef dataset_methods[] = {
    {"fit_seq_len", (PyCFunction)dataset_fit_seq_len, METH_VARARGS, NULL},
    {"size", (PyCFunction)dataset_size, METH_NOARGS, NULL},
    {"shape", (PyCFunction)dataset_shape, METH_NOARGS, NULL},
    {"normalization", (PyCFunction)dataset_normalization, METH_NOARGS, NULL},
    {"truncate", (PyCFunction)dataset_truncate, METH_VARARGS, NULL},
    {"set_seq_len", (PyCFunction)dataset_set_seq_len, METH_VARARGS, NULL},
    {"seq_len", (PyCFunction)dataset_seq_len, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot dataset_slots[] = {
    {Py_tp_dealloc, (void *)dataset_dealloc},
    {Py_tp_doc, (void *)"A herd data set (use herd.Dataset)"},
    {Py_tp_methods, dataset_methods},
    {0, NULL},
};

PyType_Spec pyherd_dataset_spec = {
    .name = "_herd.Dataset",
    .basicsize = sizeof(pyherd_dataset),
    .flags = Py_TPFLAGS_DEFAULT,
    .slots = dataset_slots,
};
