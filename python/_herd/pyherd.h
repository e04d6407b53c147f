/* herd's Python extension (_herd): a client of the public API (include/herd/herd.h)
 * only, like the CLI. herd/__init__.py builds the Python API on these types. Built on
 * Python's stable ABI (3.11 and later: Py_LIMITED_API, set by python/CMakeLists.txt), so
 * one build imports in any later Python, such as a GPU machine's own. */
#ifndef HERD_PYHERD_H
#define HERD_PYHERD_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "herd/herd.h"

/* herd.HerdError (and herd.InvalidArgument, also a ValueError): every failure of the
 * library, with herd's message. */
extern PyObject *pyherd_error, *pyherd_invalid_argument;
/* Raises for status st: "<what>: <herd_last_error()>" (what may be NULL); returns NULL. */
PyObject *pyherd_raise(herd_status st, const char *what);

typedef struct {
    PyObject_HEAD
    herd_dataset *ds;
} pyherd_dataset;

typedef struct {
    PyObject_HEAD
    herd_model *m;
    bool plan; /* layers without values (pipeline stages) */
} pyherd_model;

/* Heap types made from these specs when the module starts (the stable ABI has no
 * static types). */
extern PyTypeObject *pyherd_dataset_type, *pyherd_model_type, *pyherd_tensor_type;
extern PyType_Spec pyherd_dataset_spec, pyherd_model_spec, pyherd_tensor_spec;
/* A heap type's instance freed: its tp_free, then the reference it held on its type. */
void pyherd_free_instance(PyObject *self);

/* The process's group (herd_dist_init once: MPI cannot start twice), made on first use. */
herd_dist *pyherd_dist(PyObject **error);
/* The group of process set `set` (0: the job, made on first use) into *out, NULL for a
 * group of one; false with the exception set when the set is unknown or lacks this rank. */
bool pyherd_group(int set, herd_dist **out);

PyObject *pyherd_train(PyObject *self, PyObject *args, PyObject *kwargs);
PyObject *pyherd_dataset_open(PyObject *self, PyObject *args);
PyObject *pyherd_dataset_from_memory(PyObject *self, PyObject *args);
PyObject *pyherd_model_create(PyObject *self, PyObject *args, PyObject *kwargs);
PyObject *pyherd_allreduce_start(PyObject *self, PyObject *args);
PyObject *pyherd_allreduce_op_start(PyObject *self, PyObject *args);
PyObject *pyherd_allreduce_adasum_start(PyObject *self, PyObject *args);
PyObject *pyherd_allreduce_device_start(PyObject *self, PyObject *args);
PyObject *pyherd_wait(PyObject *self, PyObject *args);
PyObject *pyherd_broadcast(PyObject *self, PyObject *args);
PyObject *pyherd_allgather(PyObject *self, PyObject *args);
PyObject *pyherd_allgather_start(PyObject *self, PyObject *args);
PyObject *pyherd_reduce_scatter_start(PyObject *self, PyObject *args);
PyObject *pyherd_alltoall_start(PyObject *self, PyObject *args);
PyObject *pyherd_barrier(PyObject *self, PyObject *args);
PyObject *pyherd_set_activity(PyObject *self, PyObject *args);
/* timeline.c */
PyObject *pyherd_timeline_start(PyObject *self, PyObject *args);
PyObject *pyherd_timeline_now(PyObject *self, PyObject *unused);
PyObject *pyherd_timeline_record(PyObject *self, PyObject *args);
PyObject *pyherd_timeline_write(PyObject *self, PyObject *args);

#endif
