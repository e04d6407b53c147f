/* _herd.train: herd_train with the options by name, the GIL released while it runs,
 * and a progress callback into Python that can stop it (Ctrl-C too). */
#include <stdio.h>
#include <stdlib.h>

#include "pyherd.h"

typedef struct {
    PyObject *fn;         /* callable(dict) -> bool or None, or NULL */
    bool console;         /* herd's progress bar on rank 0 */
    herd_console_progress bar;
    PyObject *exc_type, *exc_value, *exc_tb; /* raised in the callback: re-raised after */
} progress_state;

static PyObject *progress_dict(const herd_progress *p)
{
    return Py_BuildValue(
        "{s:i,s:i,s:l,s:l,s:l,s:d,s:d,s:d,s:d,s:d,s:d,s:d,s:d,s:i,s:i,s:O,s:O,s:d,s:d,s:d,s:l}",
        "epoch", p->epoch, "epochs", p->epochs, "step", p->step, "steps_per_epoch",
        p->steps_per_epoch, "global_step", p->global_step, "loss", p->loss, "acc", p->acc,
        "step_loss", p->step_loss, "lr", p->lr, "samples_per_s", p->samples_per_s,
        "epoch_samples_per_s", p->epoch_samples_per_s, "elapsed_s", p->elapsed_s, "eta_s",
        p->eta_s, "rank", p->rank, "world", p->world, "epoch_end", p->epoch_end ? Py_True : Py_False,
        "evaluated", p->evaluated ? Py_True : Py_False, "test_loss", p->test_loss, "test_acc",
        p->test_acc, "loss_scale", p->loss_scale, "skipped_steps", p->skipped_steps);
}

/* Runs on the training thread, which holds no GIL while herd_train runs. */
static bool on_progress(const herd_progress *p, void *user)
{
    progress_state *s = user;
    if (s->console && p->rank == 0)
        herd_console_progress_fn(p, &s->bar);
    PyGILState_STATE gil = PyGILState_Ensure();
    bool go_on = true;
    if (PyErr_CheckSignals() < 0) {
        go_on = false;
    } else if (s->fn) {
        PyObject *d = progress_dict(p);
        PyObject *r = d ? PyObject_CallFunctionObjArgs(s->fn, d, NULL) : NULL;
        Py_XDECREF(d);
        if (!r)
            go_on = false;
        else if (r != Py_None && !PyObject_IsTrue(r))
            go_on = false; /* returned False: stop, as herd_progress_fn does */
        Py_XDECREF(r);
    }
    if (PyErr_Occurred() && !s->exc_type)
        PyErr_Fetch(&s->exc_type, &s->exc_value, &s->exc_tb);
    PyErr_Clear();
    PyGILState_Release(gil);
    return go_on;
}

static PyObject *result_dict(const herd_train_result *r)
{
    PyObject *ranks = PyList_New(0);
    for (int i = 0; ranks && i < HERD_RESULT_RANKS && r->rank_memory_peak_bytes[i]; i++) {
        PyObject *v = PyLong_FromUnsignedLongLong(r->rank_memory_peak_bytes[i]);
        if (!v || PyList_Append(ranks, v) < 0)
            Py_CLEAR(ranks);
        Py_XDECREF(v);
    }
    if (!ranks)
        return NULL;
    return Py_BuildValue(
        "{s:i,s:l,s:d,s:d,s:d,s:d,s:d,s:d,s:{s:d,s:d,s:d,s:d,s:d,s:d},s:d,s:l,s:l,s:K,s:K,s:K,"
        "s:i,s:l,s:d,s:K,s:K,s:N}",
        "epochs", r->epochs_done, "steps", r->steps, "train_loss", r->train_loss, "train_acc",
        r->train_acc, "test_loss", r->test_loss, "test_acc", r->test_acc, "samples_per_s",
        r->samples_per_s, "wall_s", r->wall_s, "phases", "data_wait", r->phases.data_wait,
        "forward", r->phases.forward, "backward", r->phases.backward, "optimizer",
        r->phases.optimizer, "comm_wait", r->phases.comm_wait, "total", r->phases.total,
        "loss_scale", r->loss_scale, "skipped_steps", r->skipped_steps, "clipped_steps",
        r->clipped_steps, "param_bytes", (unsigned long long)r->state_bytes.params, "grad_bytes",
        (unsigned long long)r->state_bytes.grads, "optimizer_state_bytes",
        (unsigned long long)r->state_bytes.optimizer_state, "restarts", r->restarts, "lost_steps",
        r->lost_steps, "recovery_s", r->recovery_s, "memory_peak_bytes",
        (unsigned long long)r->memory_peak_bytes, "memory_peak_max_bytes",
        (unsigned long long)r->memory_peak_max_bytes, "rank_memory_peak_bytes", ranks);
}

/* options: [(name, text or None)] in order, into cfg (the texts must outlive it). */
static int set_options(herd_train_config *cfg, PyObject *options)
{
    /* A list of the same items: the texts live as long as the caller's sequence does. */
    PyObject *fast = PySequence_List(options);
    if (!fast)
        return -1;
    for (Py_ssize_t i = 0; i < PyList_Size(fast); i++) {
        const char *name, *value = NULL;
        PyObject *v;
        if (!PyArg_ParseTuple(PyList_GetItem(fast, i), "sO", &name, &v) ||
            (v != Py_None && !(value = PyUnicode_AsUTF8AndSize(v, NULL)))) {
            Py_DECREF(fast);
            return -1;
        }
        herd_status st = herd_train_config_set(cfg, name, value);
        if (st != HERD_OK) {
            pyherd_raise(st, NULL);
            Py_DECREF(fast);
            return -1;
        }
    }
    Py_DECREF(fast);
    return 0;
}

PyObject *pyherd_train(PyObject *self, PyObject *args, PyObject *kwargs)
{
    (void)self;
    static char *names[] = {"model", "train", "test", "options", "progress", "console", NULL};
    PyObject *model, *train, *test = Py_None, *options, *fn = Py_None;
    int console = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O!O!OO|Op", names, pyherd_model_type, &model,
                                     pyherd_dataset_type, &train, &test, &options, &fn, &console))
        return NULL;
    if (test != Py_None && !PyObject_TypeCheck(test, pyherd_dataset_type))
        return PyErr_Format(PyExc_TypeError, "test data must be a herd data set or None");
    if (fn != Py_None && !PyCallable_Check(fn))
        return PyErr_Format(PyExc_TypeError, "progress must be callable, got %S",
                            (PyObject *)Py_TYPE(fn));
    herd_train_config cfg;
    herd_train_config_default(&cfg);
    if (set_options(&cfg, options) < 0)
        return NULL;
    PyObject *error = NULL;
    if (!(cfg.dist = pyherd_dist(&error)))
        return error;
    /* herd run --max-restarts says which attempt this is (restart accounting). */
    const char *told = getenv("HERD_RUN_RESTARTS");
    if (getenv("HERD_RUN_SUPERVISED") && cfg.checkpoint_dir)
        cfg.run_attempt = 1 + (told ? atoi(told) : 0);
    progress_state ps = {.fn = fn == Py_None ? NULL : fn, .console = console,
                         .bar = {.stream = stderr, .log_every = cfg.log_every}};
    herd_train_result res = {0};
    herd_status st;
    herd_model *m = ((pyherd_model *)model)->m;
    herd_dataset *tr = ((pyherd_dataset *)train)->ds;
    herd_dataset *te = test == Py_None ? NULL : ((pyherd_dataset *)test)->ds;
    Py_BEGIN_ALLOW_THREADS
    st = herd_train(m, tr, te, &cfg, on_progress, &ps, &res);
    Py_END_ALLOW_THREADS
    if (ps.exc_type) { /* the callback's exception (or KeyboardInterrupt) wins */
        PyErr_Restore(ps.exc_type, ps.exc_value, ps.exc_tb);
        return NULL;
    }
    if (st != HERD_OK) {
        herd_dist_report_failure(cfg.dist, res.steps, res.training_started, NULL);
        pyherd_raise(st, "training failed");
        /* Said to herd run's supervisor already: herd.train must not say it again. */
        PyObject *type, *value, *tb;
        PyErr_Fetch(&type, &value, &tb);
        PyErr_NormalizeException(&type, &value, &tb);
        if (value)
            PyObject_SetAttrString(value, "reported", Py_True);
        PyErr_Restore(type, value, tb);
        return NULL;
    }
    return result_dict(&res);
}
