/* _herd.Model: a handle on a herd_model; _herd.Tensor: one of its tensors in place,
 * through the buffer protocol (numpy.asarray gives a view, no copy, that keeps the
 * model alive). */
#include <string.h>

#include "pyherd.h"

typedef struct {
    PyObject_HEAD
    PyObject *owner; /* the Model */
    float *data;
    int ndim;
    Py_ssize_t shape[4], strides[4];
} pyherd_tensor;

static void model_dealloc(pyherd_model *self)
{
    herd_model_free(self->m);
    pyherd_free_instance((PyObject *)self);
}

PyObject *pyherd_model_create(PyObject *self, PyObject *args, PyObject *kwargs)
{
    (void)self;
    static char *names[] = {"name", "data", "shape", "classes", "device", "plan", NULL};
    const char *name, *device = "cpu";
    PyObject *data = Py_None;
    int c = 0, h = 0, w = 0, classes = 0, plan = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "s|O(iii)isp", names, &name, &data, &c, &h, &w,
                                     &classes, &device, &plan))
        return NULL;
    if (data != Py_None && !PyObject_TypeCheck(data, pyherd_dataset_type))
        return PyErr_Format(PyExc_TypeError, "data must be a herd data set, got %S",
                            (PyObject *)Py_TYPE(data));
    const herd_dataset *ds = data == Py_None ? NULL : ((pyherd_dataset *)data)->ds;
    herd_model *m = NULL;
    herd_status st;
    if (ds)
        st = plan ? herd_model_create_plan(name, ds, device, &m)
                  : herd_model_create_device(name, ds, device, &m);
    else if (strcmp(device, "cpu") != 0)
        return PyErr_Format(pyherd_invalid_argument, "a model on '%s' takes its shape from a data "
                            "set: pass data=", device);
    else
        st = plan ? herd_model_create_shape_plan(name, c, h, w, classes, &m)
                  : herd_model_create_shape(name, c, h, w, classes, &m);
    if (st != HERD_OK)
        return pyherd_raise(st, "cannot build the model");
    pyherd_model *o = PyObject_New(pyherd_model, pyherd_model_type);
    if (!o) {
        herd_model_free(m);
        return NULL;
    }
    o->m = m;
    o->plan = plan;
    return (PyObject *)o;
}

static PyObject *model_init(pyherd_model *self, PyObject *args)
{
    unsigned long long seed;
    if (!PyArg_ParseTuple(args, "K", &seed))
        return NULL;
    herd_status st = herd_model_init_params(self->m, seed);
    return st == HERD_OK ? Py_NewRef(Py_None) : pyherd_raise(st, "cannot initialise the model");
}

static PyObject *model_set_precision(pyherd_model *self, PyObject *args)
{
    const char *name;
    if (!PyArg_ParseTuple(args, "s", &name))
        return NULL;
    herd_precision p;
    herd_status st = herd_precision_parse(name, &p);
    if (st == HERD_OK)
        st = herd_model_set_precision(self->m, p);
    return st == HERD_OK ? Py_NewRef(Py_None) : pyherd_raise(st, "precision");
}

/* {name, device, precision, parameters, flops_per_sample, plan} */
static PyObject *model_info(pyherd_model *self, PyObject *unused)
{
    (void)unused;
    return Py_BuildValue("{s:s,s:s,s:s,s:n,s:d,s:O}", "name", herd_model_name(self->m), "device",
                         herd_model_device(self->m), "precision",
                         herd_precision_name(herd_model_precision(self->m)), "parameters",
                         (Py_ssize_t)herd_model_param_count(self->m), "flops_per_sample",
                         herd_model_flops_per_sample(self->m), "plan", self->plan ? Py_True : Py_False);
}

static PyObject *model_save(pyherd_model *self, PyObject *args)
{
    const char *path;
    if (!PyArg_ParseTuple(args, "s", &path))
        return NULL;
    herd_status st;
    Py_BEGIN_ALLOW_THREADS
    st = herd_model_save(self->m, path);
    Py_END_ALLOW_THREADS
    return st == HERD_OK ? Py_NewRef(Py_None) : pyherd_raise(st, "cannot save the weights");
}

static PyObject *model_load(pyherd_model *self, PyObject *args)
{
    const char *path;
    if (!PyArg_ParseTuple(args, "s", &path))
        return NULL;
    herd_status st;
    Py_BEGIN_ALLOW_THREADS
    st = herd_model_load(self->m, path);
    Py_END_ALLOW_THREADS
    return st == HERD_OK ? Py_NewRef(Py_None) : pyherd_raise(st, "cannot load the weights");
}

/* (loss, accuracy, samples) */
static PyObject *model_evaluate(pyherd_model *self, PyObject *args)
{
    PyObject *data;
    int batch, threads;
    if (!PyArg_ParseTuple(args, "O!ii", pyherd_dataset_type, &data, &batch, &threads))
        return NULL;
    herd_eval_result r = {0};
    herd_status st;
    Py_BEGIN_ALLOW_THREADS
    st = herd_evaluate(self->m, ((pyherd_dataset *)data)->ds, batch, threads, &r);
    Py_END_ALLOW_THREADS
    if (st != HERD_OK)
        return pyherd_raise(st, "evaluation failed");
    return Py_BuildValue("(ddn)", r.loss, r.acc, (Py_ssize_t)r.samples);
}

/* [(name, shape, Tensor)]: parameters, then buffers. Host memory only: a device's
 * tensors are refused (save() copies them out). */
static PyObject *model_tensors(pyherd_model *self, PyObject *unused)
{
    (void)unused;
    if (self->plan)
        return PyErr_Format(pyherd_error, "this model is a plan (pipeline stages): it holds no values");
    if (strcmp(herd_model_device(self->m), "cpu") != 0)
        return PyErr_Format(pyherd_error, "the tensors of a model on '%s' live in device memory, "
                            "which Python cannot view; save() the weights and read the file, or "
                            "train on the cpu", herd_model_device(self->m));
    size_t n = herd_model_tensor_count(self->m);
    PyObject *list = PyList_New((Py_ssize_t)n);
    for (size_t i = 0; list && i < n; i++) {
        const char *name;
        int ndim;
        int64_t shape[4];
        float *data;
        herd_status st = herd_model_tensor_info(self->m, i, &name, &ndim, shape, &data);
        pyherd_tensor *t = st == HERD_OK ? PyObject_New(pyherd_tensor, pyherd_tensor_type) : NULL;
        if (!t) {
            Py_CLEAR(list);
            if (st != HERD_OK)
                pyherd_raise(st, NULL);
            break;
        }
        t->owner = Py_NewRef((PyObject *)self);
        t->data = data;
        t->ndim = ndim;
        Py_ssize_t stride = sizeof(float);
        for (int d = ndim - 1; d >= 0; d--) {
            t->shape[d] = (Py_ssize_t)shape[d];
            t->strides[d] = stride;
            stride *= (Py_ssize_t)shape[d];
        }
        PyObject *dims = PyTuple_New(ndim);
        for (int d = 0; dims && d < ndim; d++)
            PyTuple_SetItem(dims, d, PyLong_FromLongLong(shape[d]));
        PyObject *item = dims ? Py_BuildValue("(sNN)", name, dims, (PyObject *)t) : NULL;
        if (!item) {
            Py_XDECREF(dims);
            Py_DECREF(t);
            Py_CLEAR(list);
            break;
        }
        PyList_SetItem(list, (Py_ssize_t)i, item);
    }
    return list;
}

static PyMethodDef model_methods[] = {
    {"init", (PyCFunction)model_init, METH_VARARGS, NULL},
    {"set_precision", (PyCFunction)model_set_precision, METH_VARARGS, NULL},
    {"info", (PyCFunction)model_info, METH_NOARGS, NULL},
    {"save", (PyCFunction)model_save, METH_VARARGS, NULL},
    {"load", (PyCFunction)model_load, METH_VARARGS, NULL},
    {"evaluate", (PyCFunction)model_evaluate, METH_VARARGS, NULL},
    {"tensors", (PyCFunction)model_tensors, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot model_slots[] = {
    {Py_tp_dealloc, (void *)model_dealloc},
    {Py_tp_doc, (void *)"A herd model (use herd.Model)"},
    {Py_tp_methods, model_methods},
    {0, NULL},
};

PyType_Spec pyherd_model_spec = {
    .name = "_herd.Model",
    .basicsize = sizeof(pyherd_model),
    .flags = Py_TPFLAGS_DEFAULT,
    .slots = model_slots,
};

/* ------------------------------------------------------------ Tensor */

static void tensor_dealloc(pyherd_tensor *self)
{
    Py_XDECREF(self->owner);
    pyherd_free_instance((PyObject *)self);
}

static int tensor_getbuffer(pyherd_tensor *self, Py_buffer *view, int flags)
{
    (void)flags; /* C-contiguous float32, writable: every request can be met */
    Py_ssize_t n = 1;
    for (int d = 0; d < self->ndim; d++)
        n *= self->shape[d];
    view->obj = Py_NewRef((PyObject *)self);
    view->buf = self->data;
    view->len = n * (Py_ssize_t)sizeof(float);
    view->readonly = 0;
    view->itemsize = sizeof(float);
    view->format = (flags & PyBUF_FORMAT) ? "f" : NULL;
    view->ndim = self->ndim;
    view->shape = self->shape;
    view->strides = self->strides;
    view->suboffsets = NULL;
    view->internal = NULL;
    return 0;
}

static PyType_Slot tensor_slots[] = {
    {Py_tp_dealloc, (void *)tensor_dealloc},
    {Py_tp_doc, (void *)"A model's tensor in place (numpy.asarray views it without a copy)"},
    {Py_bf_getbuffer, (void *)tensor_getbuffer},
    {0, NULL},
};

PyType_Spec pyherd_tensor_spec = {
    .name = "_herd.Tensor",
    .basicsize = sizeof(pyherd_tensor),
    .flags = Py_TPFLAGS_DEFAULT,
    .slots = tensor_slots,
};
