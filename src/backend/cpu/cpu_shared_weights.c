/*
 * Weights in a primitive's layout, reordered once for every plan that reads the same
 * weights. Under --deterministic each slice of the step has its own model, so each of
 * its convolutions reordered the same weights again (resnet20 at slices of 4: twelve
 * 64x64x3x3 reorders a layer and step, more time than the convolutions). A port that
 * shares its weights' pointer and layouts with another port reads one copy, made again
 * only when the weights' bytes differ from those it was made from (a snapshot, compared
 * in full: no writer of the weights has to say it wrote). A port alone keeps its own
 * copy, as before, and pays only the lookup.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu.h"
#include "backend/cpu/cpu_dnnl.h"
#include "backend/cpu/cpu_ops.h"

struct herd_dnnl_shared_weights {
    const void *data; /* the caller's weights */
    dnnl_memory_desc_t user_md, prim_md;
    bool round_bf16;
    int users;          /* ports reading through this entry */
    void *snapshot;     /* the bytes `copy` was made from; NULL until two ports share */
    size_t user_bytes;
    void *copy;         /* the reordered weights */
    bool valid;
    struct herd_dnnl_shared_weights *next;
};

static pthread_mutex_t shared_mu = PTHREAD_MUTEX_INITIALIZER;
static struct herd_dnnl_shared_weights *shared_list;

static void entry_release(struct herd_dnnl_shared_weights *e)
{
    if (--e->users > 0)
        return;
    for (struct herd_dnnl_shared_weights **at = &shared_list; *at; at = &(*at)->next)
        if (*at == e) {
            *at = e->next;
            break;
        }
    free(e->snapshot);
    herd_cpu_free(e->copy);
    free(e);
}

static struct herd_dnnl_shared_weights *entry_find(const void *data, const dnnl_memory_desc_t *user_md,
                                                   const dnnl_memory_desc_t *prim_md, bool round)
{
    for (struct herd_dnnl_shared_weights *e = shared_list; e; e = e->next)
        if (e->data == data && e->round_bf16 == round && dnnl_memory_desc_equal(&e->user_md, user_md) &&
            dnnl_memory_desc_equal(&e->prim_md, prim_md))
            return e;
    struct herd_dnnl_shared_weights *e = calloc(1, sizeof *e);
    if (!e)
        return NULL;
    e->data = data;
    e->user_md = *user_md;
    e->prim_md = *prim_md;
    e->round_bf16 = round;
    e->user_bytes = dnnl_memory_desc_get_size(user_md);
    e->next = shared_list;
    shared_list = e;
    return e;
}

/* Joins the port to the entry for (data, its layouts), leaving the one it had. */
static herd_status port_attach(herd_dnnl_port *port, const void *data)
{
    struct herd_dnnl_shared_weights *e = port->shared;
    if (e && e->data == data) /* every call after the first */
        return HERD_OK;
    const dnnl_memory_desc_t *user_md, *prim_md;
    HERD_DNNL(dnnl_memory_get_memory_desc(port->user, &user_md), "shared weights");
    HERD_DNNL(dnnl_memory_get_memory_desc(port->inner, &prim_md), "shared weights");
    if (e)
        entry_release(e);
    port->shared = entry_find(data, user_md, prim_md, port->round_bf16);
    if (!port->shared)
        return HERD_NOMEM(sizeof *port->shared);
    port->shared->users++;
    return HERD_OK;
}

/* Whether e has its copy, made now if not (under shared_mu). Where memory (or
 * --memory-limit) refuses it, the ports read their own copies, as they did alone: the
 * same bytes, and set-up already sized those. */
static bool has_copy(herd_dnnl_port *port, struct herd_dnnl_shared_weights *e)
{
    if (e->copy)
        return true;
    e->copy = herd_cpu_alloc(port->inner_bytes);
    e->snapshot = malloc(e->user_bytes ? e->user_bytes : 1);
    if (e->copy && e->snapshot)
        return true;
    herd_cpu_free(e->copy);
    free(e->snapshot);
    e->copy = e->snapshot = NULL;
    return false;
}

/* Makes e's copy from data if it was made from other bytes (called under shared_mu). */
static herd_status refresh(herd_dnnl_port *port, struct herd_dnnl_shared_weights *e, const void *data,
                           const char *what)
{
    if (e->valid && memcmp(e->snapshot, data, e->user_bytes) == 0)
        return HERD_OK;
    e->valid = false;
    HERD_DNNL(dnnl_memory_set_data_handle(port->user, (void *)data), what);
    HERD_DNNL(dnnl_memory_set_data_handle(port->inner, e->copy), what);
    dnnl_exec_arg_t args[2] = {herd_dnnl_arg(DNNL_ARG_FROM, port->user),
                               herd_dnnl_arg(DNNL_ARG_TO, port->inner)};
    HERD_TRY(herd_dnnl_exec(port->reorder, 2, args, what));
    if (e->round_bf16)
        herd_cpu_round_bf16(e->copy, port->inner_bytes / sizeof(float));
    memcpy(e->snapshot, data, e->user_bytes);
    e->valid = true;
    return HERD_OK;
}

herd_status herd_dnnl_port_in_weights(herd_dnnl_port *port, const void *data, const char *what)
{
    if (!data)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "%s: NULL input", what);
    if (!port->reorder || port->transient) /* read in place, or a copy only for this call */
        return herd_dnnl_port_in(port, data, what);
    pthread_mutex_lock(&shared_mu);
    herd_status st = port_attach(port, data);
    struct herd_dnnl_shared_weights *e = port->shared;
    bool alone = st == HERD_OK && (e->users == 1 || !has_copy(port, e));
    if (st == HERD_OK && !alone)
        st = refresh(port, e, data, what);
    pthread_mutex_unlock(&shared_mu);
    if (st != HERD_OK)
        return st;
    if (!alone) {
        HERD_DNNL(dnnl_memory_set_data_handle(port->inner, e->copy), what);
        return HERD_OK;
    }
    /* The only reader (or no memory for a shared copy): its own copy, as before. */
    HERD_DNNL(dnnl_memory_set_data_handle(port->inner, port->inner_buf), what);
    return herd_dnnl_port_in(port, data, what);
}

void herd_dnnl_port_unshare(herd_dnnl_port *port)
{
    if (!port->shared)
        return;
    pthread_mutex_lock(&shared_mu);
    entry_release(port->shared);
    pthread_mutex_unlock(&shared_mu);
    port->shared = NULL;
}
