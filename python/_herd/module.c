/* _herd: errors, the process's group of ranks, the library's messages and what the
 * build offers. */
#include <stdio.h>
#include <string.h>

#include "pyherd.h"

PyObject *pyherd_error, *pyherd_invalid_argument;

PyObject *pyherd_raise(herd_status st, const char *what)
{
    PyObject *type = st == HERD_ERR_INVALID_ARG ? pyherd_invalid_argument : pyherd_error;
    PyObject *msg = what ? PyUnicode_FromFormat("%s: %s", what, herd_last_error())
                         : PyUnicode_FromString(herd_last_error());
    PyObject *exc = msg ? PyObject_CallFunctionObjArgs(type, msg, NULL) : NULL;
    Py_XDECREF(msg);
    if (!exc)
        return NULL;
    /* The status's name travels with it: herd.HerdError.status. */
    PyObject *status = PyUnicode_FromString(herd_status_name(st));
    if (status)
        PyObject_SetAttrString(exc, "status", status);
    Py_XDECREF(status);
    PyErr_SetObject(type, exc);
    Py_DECREF(exc);
    return NULL;
}

/* ------------------------------------------------------------ the group */

static herd_dist *dist;
static herd_dist_config dist_config;

/* The job was left (shutdown) after MPI had been joined: MPI cannot be joined again by
 * this process (MPI_Init after MPI_Finalize ends it with MPI's own abort). */
static bool left_mpi;

herd_dist *pyherd_dist(PyObject **error)
{
    if (dist)
        return dist;
    if (left_mpi) {
        PyErr_SetString(pyherd_error, "herd was shut down (herd.torch.shutdown(), or herd's "
                        "atexit): the job's MPI communicator is gone and one process cannot join "
                        "MPI twice; call shutdown() after the last use of herd");
        *error = NULL;
        return NULL;
    }
    herd_status st;
    Py_BEGIN_ALLOW_THREADS /* MPI_Init may wait for the other ranks */
    st = herd_dist_init(&dist_config, &dist);
    Py_END_ALLOW_THREADS
    if (st != HERD_OK) {
        dist = NULL;
        *error = pyherd_raise(st, "cannot join the distributed job");
        return NULL;
    }
    return dist;
}

/* Process sets (herd.torch's): slot 0 the job, the others groups of it, numbered alike on
 * every rank (each rank adds and removes them in the same order). A slot this rank is not
 * in holds nothing; one whose group is this rank alone holds NULL (a group of one). */
#define PYHERD_MAX_SETS 256
static struct {
    bool used, member;
    herd_dist *group;
} sets[PYHERD_MAX_SETS];

bool pyherd_group(int set, herd_dist **out)
{
    *out = NULL;
    if (set == 0) {
        PyObject *error = NULL;
        *out = pyherd_dist(&error);
        return *out != NULL;
    }
    if (set < 0 || set >= PYHERD_MAX_SETS || !sets[set].used) {
        PyErr_Format(pyherd_invalid_argument, "process set %d is not registered (removed, or never "
                     "added with add_process_set)", set);
        return false;
    }
    if (!sets[set].member) {
        PyErr_Format(pyherd_invalid_argument, "this rank (%d) is not in process set %d",
                     herd_dist_rank(dist), set);
        return false;
    }
    *out = sets[set].group;
    return true;
}

/* ([ranks of the job, increasing]) -> the set's number, the same on every rank: collective */
static PyObject *py_add_process_set(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *list;
    if (!PyArg_ParseTuple(args, "O", &list))
        return NULL;
    PyObject *error = NULL;
    herd_dist *d = pyherd_dist(&error);
    if (!d)
        return error;
    int slot = 1;
    while (slot < PYHERD_MAX_SETS && sets[slot].used)
        slot++;
    if (slot == PYHERD_MAX_SETS)
        return PyErr_Format(pyherd_error, "%d process sets at once: remove some first",
                            PYHERD_MAX_SETS - 1);
    PyObject *fast = PySequence_List(list);
    if (!fast)
        return NULL;
    Py_ssize_t n = PyList_Size(fast);
    int *ranks = PyMem_Calloc(n > 0 ? (size_t)n : 1, sizeof *ranks);
    bool member = false;
    for (Py_ssize_t i = 0; ranks && i < n; i++) {
        ranks[i] = (int)PyLong_AsLong(PyList_GetItem(fast, i));
        member |= ranks[i] == herd_dist_rank(d);
    }
    Py_DECREF(fast);
    if (!ranks || PyErr_Occurred()) {
        PyMem_Free(ranks);
        return ranks ? NULL : PyErr_NoMemory();
    }
    char name[32];
    snprintf(name, sizeof name, "process set %d", slot);
    herd_dist *group = NULL;
    herd_status st;
    Py_BEGIN_ALLOW_THREADS
    st = herd_dist_split(d, ranks, (int)n, name, &group);
    Py_END_ALLOW_THREADS
    PyMem_Free(ranks);
    if (st != HERD_OK)
        return pyherd_raise(st, NULL);
    sets[slot].used = true, sets[slot].member = member, sets[slot].group = group;
    return PyLong_FromLong(slot);
}

static void free_set(int slot)
{
    herd_dist *group = sets[slot].group;
    sets[slot].used = sets[slot].member = false, sets[slot].group = NULL;
    Py_BEGIN_ALLOW_THREADS
    herd_dist_free(group);
    Py_END_ALLOW_THREADS
}

/* (set): its group freed; nothing of it may be pending */
static PyObject *py_remove_process_set(PyObject *self, PyObject *args)
{
    (void)self;
    int set;
    if (!PyArg_ParseTuple(args, "i", &set))
        return NULL;
    if (set <= 0 || set >= PYHERD_MAX_SETS || !sets[set].used)
        return PyErr_Format(pyherd_invalid_argument, "process set %d is not registered", set);
    free_set(set);
    Py_RETURN_NONE;
}

static PyObject *py_init(PyObject *self, PyObject *args, PyObject *kwargs)
{
    (void)self;
    static char *names[] = {"comm_timeout", "stall_warning", NULL};
    double timeout = 0, stall = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|dd", names, &timeout, &stall))
        return NULL;
    if (dist && ((timeout > 0 && timeout != dist_config.timeout_s) ||
                 (stall > 0 && stall != dist_config.stall_warning_s))) {
        PyErr_SetString(pyherd_invalid_argument,
                        "herd.init: the job was joined already with other timeouts; call herd.init "
                        "(with comm_timeout and stall_warning) before anything else of herd");
        return NULL;
    }
    dist_config.timeout_s = timeout;
    dist_config.stall_warning_s = stall;
    PyObject *error = NULL;
    if (!pyherd_dist(&error))
        return error;
    Py_RETURN_NONE;
}

static PyObject *py_rank(PyObject *self, PyObject *unused)
{
    (void)self, (void)unused;
    PyObject *error = NULL;
    herd_dist *d = pyherd_dist(&error);
    return d ? PyLong_FromLong(herd_dist_rank(d)) : error;
}

static PyObject *py_size(PyObject *self, PyObject *unused)
{
    (void)self, (void)unused;
    PyObject *error = NULL;
    herd_dist *d = pyherd_dist(&error);
    return d ? PyLong_FromLong(herd_dist_size(d)) : error;
}

static PyObject *py_local_rank(PyObject *self, PyObject *unused)
{
    (void)self, (void)unused;
    PyObject *error = NULL;
    herd_dist *d = pyherd_dist(&error);
    return d ? PyLong_FromLong(herd_dist_local_rank(d)) : error;
}

static PyObject *py_backend(PyObject *self, PyObject *unused)
{
    (void)self, (void)unused;
    PyObject *error = NULL;
    herd_dist *d = pyherd_dist(&error);
    return d ? PyUnicode_FromString(herd_dist_backend(d)) : error;
}

/* Leaves the job (MPI_Finalize when herd started MPI); atexit calls it. */
static PyObject *py_shutdown(PyObject *self, PyObject *unused)
{
    (void)self, (void)unused;
    for (int slot = 1; slot < PYHERD_MAX_SETS; slot++) /* a group before the job */
        if (sets[slot].used)
            free_set(slot);
    if (dist) {
        left_mpi = strcmp(herd_dist_backend(dist), "mpi") == 0;
        Py_BEGIN_ALLOW_THREADS
        herd_dist_free(dist);
        Py_END_ALLOW_THREADS
        dist = NULL;
    }
    Py_RETURN_NONE;
}

/* Ends every rank of the job: a rank that cannot go on must not leave the others
 * waiting in a collective. */
static PyObject *py_abort(PyObject *self, PyObject *args)
{
    (void)self;
    int code;
    const char *msg;
    if (!PyArg_ParseTuple(args, "is", &code, &msg))
        return NULL;
    if (!dist || herd_dist_size(dist) < 2)
        Py_RETURN_NONE;
    herd_dist_abort(dist, code, msg);
    Py_RETURN_NONE; /* not reached */
}

static PyObject *py_bind_device(PyObject *self, PyObject *args)
{
    (void)self;
    const char *device;
    int threads = 0; /* train's option: 0 chooses as herd_train does */
    if (!PyArg_ParseTuple(args, "s|i", &device, &threads))
        return NULL;
    PyObject *error = NULL;
    herd_dist *d = pyherd_dist(&error);
    if (!d)
        return error;
    herd_status st = herd_dist_bind_device(d, device);
    if (st == HERD_OK)
        st = herd_device_set_threads(device, threads, d);
    return st == HERD_OK ? Py_NewRef(Py_None) : pyherd_raise(st, "cannot use the device");
}

static PyObject *py_set_memory_limit(PyObject *self, PyObject *args)
{
    (void)self;
    const char *device;
    unsigned long long bytes;
    if (!PyArg_ParseTuple(args, "sK", &device, &bytes))
        return NULL;
    herd_status st = herd_device_set_memory_limit(device, bytes);
    return st == HERD_OK ? Py_NewRef(Py_None) : pyherd_raise(st, "memory limit");
}

/* Under herd run --max-restarts: the failure line its supervisor reads (a failure in
 * set-up, before training began, is not restarted). */
static PyObject *py_report_failure(PyObject *self, PyObject *args)
{
    (void)self;
    long step;
    int started;
    const char *message;
    if (!PyArg_ParseTuple(args, "lps", &step, &started, &message))
        return NULL;
    herd_dist_report_failure(dist, step, started, message);
    Py_RETURN_NONE;
}

/* ------------------------------------------------------------ messages */

static bool quiet_info = true; /* read by herd_log_to_stderr, maybe on herd's thread */

static PyObject *py_set_quiet(PyObject *self, PyObject *args)
{
    (void)self;
    int quiet;
    if (!PyArg_ParseTuple(args, "p", &quiet))
        return NULL;
    quiet_info = quiet != 0;
    Py_RETURN_NONE;
}

/* ------------------------------------------------------------ the build */

static PyObject *py_build_info(PyObject *self, PyObject *unused)
{
    (void)self, (void)unused;
    return PyUnicode_FromString(herd_build_info());
}

static PyObject *py_cpu_isa(PyObject *self, PyObject *unused)
{
    (void)self, (void)unused;
    return PyUnicode_FromString(herd_cpu_isa());
}

static PyObject *py_have_nccl(PyObject *self, PyObject *unused)
{
    (void)self, (void)unused;
    return PyBool_FromLong(herd_have_nccl());
}

static PyObject *py_default_device(PyObject *self, PyObject *unused)
{
    (void)self, (void)unused;
    return PyUnicode_FromString(herd_default_device());
}

/* [(name, description)] of the model zoo. */
static PyObject *py_zoo(PyObject *self, PyObject *unused)
{
    (void)self, (void)unused;
    PyObject *list = PyList_New(0);
    const char *name;
    for (size_t i = 0; list && (name = herd_zoo_name(i)); i++) {
        PyObject *item = Py_BuildValue("(ss)", name, herd_zoo_description(i));
        if (!item || PyList_Append(list, item) < 0) {
            Py_XDECREF(item);
            Py_CLEAR(list);
            break;
        }
        Py_DECREF(item);
    }
    return list;
}

/* {name: takes_value} of herd_train_config_set's options. */
static PyObject *py_train_options(PyObject *self, PyObject *unused)
{
    (void)self, (void)unused;
    PyObject *d = PyDict_New();
    bool takes_value;
    const char *name;
    for (size_t i = 0; d && (name = herd_train_option_name(i, &takes_value)); i++)
        if (PyDict_SetItemString(d, name, takes_value ? Py_True : Py_False) < 0)
            Py_CLEAR(d);
    return d;
}

static PyMethodDef methods[] = {
    {"init", (PyCFunction)(void (*)(void))py_init, METH_VARARGS | METH_KEYWORDS, NULL},
    {"rank", py_rank, METH_NOARGS, NULL},
    {"size", py_size, METH_NOARGS, NULL},
    {"local_rank", py_local_rank, METH_NOARGS, NULL},
    {"backend", py_backend, METH_NOARGS, NULL},
    {"shutdown", py_shutdown, METH_NOARGS, NULL},
    {"abort", py_abort, METH_VARARGS, NULL},
    {"report_failure", py_report_failure, METH_VARARGS, NULL},
    {"bind_device", py_bind_device, METH_VARARGS, NULL},
    {"set_memory_limit", py_set_memory_limit, METH_VARARGS, NULL},
    {"set_quiet", py_set_quiet, METH_VARARGS, NULL},
    {"build_info", py_build_info, METH_NOARGS, NULL},
    {"cpu_isa", py_cpu_isa, METH_NOARGS, NULL},
    {"default_device", py_default_device, METH_NOARGS, NULL},
    {"have_nccl", py_have_nccl, METH_NOARGS, NULL},
    {"zoo", py_zoo, METH_NOARGS, NULL},
    {"train_options", py_train_options, METH_NOARGS, NULL},
    {"train", (PyCFunction)(void (*)(void))pyherd_train, METH_VARARGS | METH_KEYWORDS, NULL},
    {"dataset_open", pyherd_dataset_open, METH_VARARGS, NULL},
    {"dataset_from_memory", pyherd_dataset_from_memory, METH_VARARGS, NULL},
    {"model_create", (PyCFunction)(void (*)(void))pyherd_model_create, METH_VARARGS | METH_KEYWORDS, NULL},
    {"allreduce_start", pyherd_allreduce_start, METH_VARARGS, NULL},
    {"allreduce_op_start", pyherd_allreduce_op_start, METH_VARARGS, NULL},
    {"allreduce_adasum_start", pyherd_allreduce_adasum_start, METH_VARARGS, NULL},
    {"allreduce_device_start", pyherd_allreduce_device_start, METH_VARARGS, NULL},
    {"wait", pyherd_wait, METH_VARARGS, NULL},
    {"broadcast", pyherd_broadcast, METH_VARARGS, NULL},
    {"allgather", pyherd_allgather, METH_VARARGS, NULL},
    {"allgather_start", pyherd_allgather_start, METH_VARARGS, NULL},
    {"reduce_scatter_start", pyherd_reduce_scatter_start, METH_VARARGS, NULL},
    {"alltoall_start", pyherd_alltoall_start, METH_VARARGS, NULL},
    {"barrier", pyherd_barrier, METH_VARARGS, NULL},
    {"add_process_set", py_add_process_set, METH_VARARGS, NULL},
    {"remove_process_set", py_remove_process_set, METH_VARARGS, NULL},
    {"set_activity", pyherd_set_activity, METH_VARARGS, NULL},
    {"timeline_start", pyherd_timeline_start, METH_VARARGS, NULL},
    {"timeline_now", pyherd_timeline_now, METH_NOARGS, NULL},
    {"timeline_record", pyherd_timeline_record, METH_VARARGS, NULL},
    {"timeline_write", pyherd_timeline_write, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_herd", "herd's C library (use the herd package)", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyTypeObject *pyherd_dataset_type, *pyherd_model_type, *pyherd_tensor_type;

void pyherd_free_instance(PyObject *self)
{
    PyTypeObject *type = Py_TYPE(self);
    freefunc free_fn = (freefunc)PyType_GetSlot(type, Py_tp_free);
    free_fn(self);
    Py_DECREF(type); /* an instance of a heap type holds its type */
}

PyMODINIT_FUNC PyInit__herd(void)
{
    PyObject *m = PyModule_Create(&module);
    if (!m)
        return NULL;
    pyherd_error = PyErr_NewExceptionWithDoc("herd.HerdError",
                                             "A failure in herd's library, with its message; "
                                             ".status names the kind", NULL, NULL);
    PyObject *bases = pyherd_error ? PyTuple_Pack(2, pyherd_error, PyExc_ValueError) : NULL;
    pyherd_invalid_argument = bases ? PyErr_NewExceptionWithDoc(
                                          "herd.InvalidArgument",
                                          "A value herd refused (also a ValueError)", bases, NULL)
                                    : NULL;
    Py_XDECREF(bases);
    if (!pyherd_invalid_argument || PyModule_AddObjectRef(m, "HerdError", pyherd_error) < 0 ||
        PyModule_AddObjectRef(m, "InvalidArgument", pyherd_invalid_argument) < 0 ||
        !(pyherd_dataset_type = (PyTypeObject *)PyType_FromSpec(&pyherd_dataset_spec)) ||
        !(pyherd_model_type = (PyTypeObject *)PyType_FromSpec(&pyherd_model_spec)) ||
        !(pyherd_tensor_type = (PyTypeObject *)PyType_FromSpec(&pyherd_tensor_spec)) ||
        PyModule_AddObjectRef(m, "Dataset", (PyObject *)pyherd_dataset_type) < 0 ||
        PyModule_AddObjectRef(m, "Model", (PyObject *)pyherd_model_type) < 0 ||
        PyModule_AddStringConstant(m, "version", HERD_VERSION) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    herd_set_log_fn(herd_log_to_stderr, &quiet_info);
    return m;
}
