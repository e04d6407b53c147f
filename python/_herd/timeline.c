/* _herd's timeline (herd.torch.start_timeline): one per process, as Horovod's. */
#include "pyherd.h"

static herd_timeline *timeline; /* under the GIL */

/* (path): collective */
PyObject *pyherd_timeline_start(PyObject *self, PyObject *args)
{
    (void)self;
    const char *path;
    if (!PyArg_ParseTuple(args, "s", &path))
        return NULL;
    if (timeline)
        return PyErr_Format(pyherd_error, "a timeline is already being written: stop_timeline() first");
    PyObject *error = NULL;
    herd_dist *d = pyherd_dist(&error);
    if (!d)
        return error;
    herd_status st;
    herd_timeline *tl = NULL;
    Py_BEGIN_ALLOW_THREADS
    st = herd_timeline_start(d, path, &tl);
    Py_END_ALLOW_THREADS
    if (st != HERD_OK)
        return pyherd_raise(st, NULL);
    timeline = tl;
    Py_RETURN_NONE;
}

PyObject *pyherd_timeline_now(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    return PyFloat_FromDouble(herd_timeline_now());
}

/* (span, step, t0, t1): nothing without a timeline */
PyObject *pyherd_timeline_record(PyObject *self, PyObject *args)
{
    (void)self;
    int what;
    long step;
    double t0, t1;
    if (!PyArg_ParseTuple(args, "ildd", &what, &step, &t0, &t1))
        return NULL;
    herd_timeline_record(timeline, (herd_timeline_span)what, step, t0, t1);
    Py_RETURN_NONE;
}

/* (stop): collective; writes the events so far, and with stop finishes the file */
PyObject *pyherd_timeline_write(PyObject *self, PyObject *args)
{
    (void)self;
    int stop;
    if (!PyArg_ParseTuple(args, "p", &stop))
        return NULL;
    herd_timeline *tl = timeline;
    if (!tl)
        Py_RETURN_FALSE;
    if (stop)
        timeline = NULL;
    herd_status st;
    Py_BEGIN_ALLOW_THREADS
    st = stop ? herd_timeline_stop(tl) : herd_timeline_write(tl);
    Py_END_ALLOW_THREADS
    if (st != HERD_OK)
        return pyherd_raise(st, NULL);
    Py_RETURN_TRUE;
}
