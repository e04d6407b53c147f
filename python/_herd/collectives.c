/* _herd's collectives on memory Python hands over by address (herd.torch passes
 * tensor.data_ptr(); it keeps the tensors alive until the collective completes). */
#include <limits.h>
#include <stdlib.h>

#include "pyherd.h"

static void *address(PyObject *obj)
{
    void *p = PyLong_AsVoidPtr(obj);
    return PyErr_Occurred() ? NULL : p;
}

/* A collective started: its ticket to wait for, or the exception. */
static PyObject *started(herd_status st, uint64_t ticket)
{
    return st == HERD_OK ? PyLong_FromUnsignedLongLong(ticket) : pyherd_raise(st, NULL);
}

/* The group of `set` (NULL: a group of one) and the buffer of a sum of n values at addr;
 * false with the exception set. */
static bool sum_of(PyObject *addr, Py_ssize_t n, const char *name, int set, herd_dist **d, void **buf)
{
    *buf = address(addr);
    if ((!*buf && PyErr_Occurred()) || !pyherd_group(set, d))
        return false;
    if (n < 0) {
        PyErr_Format(pyherd_invalid_argument, "%s: %zd values", name, n);
        return false;
    }
    return true;
}

/* (address, count, dtype, scale, wire, name[, set]) -> ticket: set a process set (0 the job) */
PyObject *pyherd_allreduce_start(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *addr;
    Py_ssize_t n;
    int type, wire;
    float scale;
    const char *name;
    int set = 0;
    if (!PyArg_ParseTuple(args, "Onifis|i", &addr, &n, &type, &scale, &wire, &name, &set))
        return NULL;
    void *buf;
    herd_dist *d;
    if (!sum_of(addr, n, name, set, &d, &buf))
        return NULL;
    uint64_t ticket;
    herd_status st = herd_dist_allreduce_start(d, buf, (size_t)n, (herd_dtype)type, scale,
                                               (herd_compress)wire, name, &ticket);
    return started(st, ticket);
}

/* (address, count, dtype, op, name[, set]) -> ticket: herd_reduce_op's min, max or product */
PyObject *pyherd_allreduce_op_start(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *addr;
    Py_ssize_t n;
    int type, op;
    const char *name;
    int set = 0;
    if (!PyArg_ParseTuple(args, "Oniis|i", &addr, &n, &type, &op, &name, &set))
        return NULL;
    void *buf;
    herd_dist *d;
    if (!sum_of(addr, n, name, set, &d, &buf))
        return NULL;
    uint64_t ticket;
    herd_status st = herd_dist_allreduce_op_start(d, buf, (size_t)n, (herd_dtype)type,
                                                  (herd_reduce_op)op, name, &ticket);
    return started(st, ticket);
}

/* (address, count, dtype, counts address, tensors, name[, set]) -> ticket: Horovod's Adasum
 * per tensor of counts (int64 values; address 0 with 0 tensors: one tensor of count) */
PyObject *pyherd_allreduce_adasum_start(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *addr, *counts_addr;
    Py_ssize_t n, tensors;
    int type;
    const char *name;
    int set = 0;
    if (!PyArg_ParseTuple(args, "OniOns|i", &addr, &n, &type, &counts_addr, &tensors, &name, &set))
        return NULL;
    void *buf;
    herd_dist *d;
    if (!sum_of(addr, n, name, set, &d, &buf))
        return NULL;
    const int64_t *counts = address(counts_addr);
    if (PyErr_Occurred())
        return NULL;
    if (tensors < 0 || (!counts) != (tensors == 0)) {
        PyErr_Format(pyherd_invalid_argument, "%s: %zd tensors at %p", name, tensors, (const void *)counts);
        return NULL;
    }
    uint64_t ticket;
    herd_status st = herd_dist_allreduce_adasum_start(d, buf, (size_t)n, (herd_dtype)type, counts,
                                                      (size_t)tensors, name, &ticket);
    return started(st, ticket);
}

/* (device, address, count, scale, name) -> ticket: float32 in device memory */
PyObject *pyherd_allreduce_device_start(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *addr;
    Py_ssize_t n;
    float scale;
    const char *device, *name;
    if (!PyArg_ParseTuple(args, "sOnfs", &device, &addr, &n, &scale, &name))
        return NULL;
    void *buf;
    herd_dist *d;
    if (!sum_of(addr, n, name, 0, &d, &buf))
        return NULL;
    uint64_t ticket;
    herd_status st;
    Py_BEGIN_ALLOW_THREADS /* the first call makes the device's communicator, collectively */
    st = herd_dist_allreduce_device_start(d, device, buf, (size_t)n, scale, name, &ticket);
    Py_END_ALLOW_THREADS
    return started(st, ticket);
}

/* (ticket[, set]): the set whose queue gave the ticket */
PyObject *pyherd_wait(PyObject *self, PyObject *args)
{
    (void)self;
    unsigned long long ticket;
    int set = 0;
    if (!PyArg_ParseTuple(args, "K|i", &ticket, &set))
        return NULL;
    herd_dist *d;
    if (!pyherd_group(set, &d))
        return NULL;
    herd_status st;
    Py_BEGIN_ALLOW_THREADS
    st = herd_dist_wait(d, ticket);
    Py_END_ALLOW_THREADS
    return st == HERD_OK ? Py_NewRef(Py_None) : pyherd_raise(st, NULL);
}

/* (address, bytes, root[, set]): root counted in the set */
PyObject *pyherd_broadcast(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *addr;
    Py_ssize_t bytes;
    int root, set = 0;
    if (!PyArg_ParseTuple(args, "Oni|i", &addr, &bytes, &root, &set))
        return NULL;
    void *buf = address(addr);
    herd_dist *d;
    if (PyErr_Occurred() || !pyherd_group(set, &d))
        return NULL;
    herd_status st;
    Py_BEGIN_ALLOW_THREADS
    st = herd_dist_broadcast(d, buf, (size_t)bytes, root);
    Py_END_ALLOW_THREADS
    return st == HERD_OK ? Py_NewRef(Py_None) : pyherd_raise(st, NULL);
}

/* A count per rank of d from a Python sequence (malloc'd); NULL with the exception set. */
static size_t *rank_counts(PyObject *counts, herd_dist *d)
{
    PyObject *fast = PySequence_List(counts);
    if (!fast)
        return NULL;
    Py_ssize_t size = PyList_Size(fast);
    if (size != herd_dist_size(d)) {
        Py_DECREF(fast);
        PyErr_Format(pyherd_invalid_argument, "%zd counts for %d ranks", size, herd_dist_size(d));
        return NULL;
    }
    size_t *bytes_of = calloc((size_t)size, sizeof *bytes_of);
    for (Py_ssize_t r = 0; bytes_of && r < size; r++)
        bytes_of[r] = PyLong_AsSize_t(PyList_GetItem(fast, r));
    Py_DECREF(fast);
    if (!bytes_of || PyErr_Occurred()) {
        free(bytes_of);
        if (!bytes_of)
            PyErr_NoMemory();
        return NULL;
    }
    return bytes_of;
}

/* (mine address, all address, [bytes of each rank of the set][, set]) */
PyObject *pyherd_allgather(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *mine_addr, *all_addr, *counts;
    int set = 0;
    if (!PyArg_ParseTuple(args, "OOO|i", &mine_addr, &all_addr, &counts, &set))
        return NULL;
    void *mine = address(mine_addr), *all = address(all_addr);
    herd_dist *d;
    if (PyErr_Occurred() || !pyherd_group(set, &d))
        return NULL;
    size_t *bytes_of = rank_counts(counts, d);
    if (!bytes_of)
        return NULL;
    herd_status st;
    Py_BEGIN_ALLOW_THREADS
    st = herd_dist_allgather(d, mine, all, bytes_of);
    Py_END_ALLOW_THREADS
    free(bytes_of);
    return st == HERD_OK ? Py_NewRef(Py_None) : pyherd_raise(st, NULL);
}

/* (mine address, all address, address of an int32 count of bytes per rank of the set,
 * name[, set]) -> ticket: herd_dist_allgather_start; the caller keeps all three alive
 * until it has waited for the ticket */
PyObject *pyherd_allgather_start(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *mine_addr, *all_addr, *counts_addr;
    const char *name;
    int set = 0;
    if (!PyArg_ParseTuple(args, "OOOs|i", &mine_addr, &all_addr, &counts_addr, &name, &set))
        return NULL;
    void *mine = address(mine_addr), *all = address(all_addr), *counts = address(counts_addr);
    herd_dist *d;
    if (PyErr_Occurred() || !pyherd_group(set, &d))
        return NULL;
    uint64_t ticket;
    herd_status st = herd_dist_allgather_start(d, mine, all, counts, name, &ticket);
    return started(st, ticket);
}

/* (send address, [bytes to each rank], receive address, [bytes from each rank][, set])
 * -> ticket: herd_dist_alltoall_start; the caller keeps both buffers alive until it has
 * waited for the ticket */
PyObject *pyherd_alltoall_start(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *send_addr, *send_counts, *recv_addr, *recv_counts;
    int set = 0;
    if (!PyArg_ParseTuple(args, "OOOO|i", &send_addr, &send_counts, &recv_addr, &recv_counts, &set))
        return NULL;
    void *send = address(send_addr), *recv = address(recv_addr);
    herd_dist *d;
    if (PyErr_Occurred() || !pyherd_group(set, &d))
        return NULL;
    size_t *to = rank_counts(send_counts, d);
    size_t *from = to ? rank_counts(recv_counts, d) : NULL;
    if (!from) {
        free(to);
        return NULL;
    }
    uint64_t ticket;
    herd_status st = herd_dist_alltoall_start(d, send, to, recv, from, &ticket);
    free(to);
    free(from);
    return started(st, ticket);
}

/* (address, count, address of an int32 count per rank of the set, scale, wire, name[, set])
 * -> ticket: float32 herd_dist_reduce_scatter_start; the caller keeps the buffer and the
 * counts alive until it has waited for the ticket */
PyObject *pyherd_reduce_scatter_start(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *addr, *counts_addr;
    Py_ssize_t n;
    float scale;
    int wire;
    const char *name;
    int set = 0;
    if (!PyArg_ParseTuple(args, "OnOfis|i", &addr, &n, &counts_addr, &scale, &wire, &name, &set))
        return NULL;
    void *buf, *counts = address(counts_addr);
    herd_dist *d;
    if (PyErr_Occurred() || !sum_of(addr, n, name, set, &d, &buf))
        return NULL;
    uint64_t ticket;
    herd_status st = herd_dist_reduce_scatter_start(d, buf, (size_t)n, counts, scale, (herd_compress)wire,
                                                    name, &ticket);
    return started(st, ticket);
}

/* ([set]) */
PyObject *pyherd_barrier(PyObject *self, PyObject *args)
{
    (void)self;
    int set = 0;
    herd_dist *d;
    if (!PyArg_ParseTuple(args, "|i", &set) || !pyherd_group(set, &d))
        return NULL;
    herd_status st;
    Py_BEGIN_ALLOW_THREADS
    st = herd_dist_barrier(d);
    Py_END_ALLOW_THREADS
    return st == HERD_OK ? Py_NewRef(Py_None) : pyherd_raise(st, NULL);
}

PyObject *pyherd_set_activity(PyObject *self, PyObject *args)
{
    (void)self;
    const char *what;
    if (!PyArg_ParseTuple(args, "s", &what))
        return NULL;
    PyObject *error = NULL;
    herd_dist *d = pyherd_dist(&error);
    if (!d)
        return error;
    herd_dist_set_activity(d, what);
    Py_RETURN_NONE;
}
