/* oneDNN helpers shared by convolution and pooling: ports with reorders, primitive
 * creation with a user scratchpad, execution on the shared stream. */
#include "backend/cpu/cpu.h"
#include "backend/cpu/cpu_dnnl.h"
#include "backend/cpu/cpu_ops.h"

#include <pthread.h>
#include <string.h>

herd_status herd_dnnl_typed_md(dnnl_memory_desc_t *md, int ndims, const dnnl_dim_t *dims,
                               dnnl_data_type_t type, bool any_layout)
{
    static const dnnl_format_tag_t plain[] = {dnnl_format_tag_undef, dnnl_a, dnnl_ab, dnnl_abc,
                                              dnnl_abcd};
    dnnl_format_tag_t tag = any_layout ? dnnl_format_tag_any : plain[ndims];
    HERD_DNNL(dnnl_memory_desc_init_by_tag(md, ndims, dims, type, tag), "memory descriptor");
    return HERD_OK;
}

herd_status herd_dnnl_plain_md(dnnl_memory_desc_t *md, int ndims, const dnnl_dim_t *dims,
                               bool any_layout)
{
    return herd_dnnl_typed_md(md, ndims, dims, dnnl_f32, any_layout);
}

static herd_status port_init(herd_dnnl_port *port, const dnnl_memory_desc_t *user_md,
                             const dnnl_memory_desc_t *prim_md, bool is_input, bool round_bf16,
                             bool transient, const char *what)
{
    dnnl_engine_t eng;
    dnnl_stream_t stream;
    HERD_TRY(herd_dnnl_get(&eng, &stream));
    if (round_bf16 && (dnnl_memory_desc_get_size(prim_md) % sizeof(float) ||
                       prim_md->data_type != dnnl_f32))
        return HERD_ERR(HERD_ERR_INTERNAL, "%s: rounding to bf16 needs an fp32 tensor", what);
    memset(port, 0, sizeof *port);
    port->round_bf16 = round_bf16;
    HERD_DNNL(dnnl_memory_create(&port->user, user_md, eng, DNNL_MEMORY_NONE), what);
    /* Rounding needs a copy: the caller's tensor (fp32 master weights) stays as it is. */
    if (!round_bf16 && dnnl_memory_desc_equal(user_md, prim_md)) {
        port->inner = port->user;
        return HERD_OK;
    }
    port->inner_bytes = dnnl_memory_desc_get_size(prim_md);
    port->transient = transient;
    if (!transient) {
        port->inner_buf = herd_cpu_alloc(port->inner_bytes);
        if (!port->inner_buf)
            return HERD_ERR_NOMEM; /* the allocator said why */
    }
    HERD_DNNL(dnnl_memory_create(&port->inner, prim_md, eng,
                                 transient ? DNNL_MEMORY_NONE : port->inner_buf), what);
    dnnl_primitive_desc_t rpd;
    const dnnl_memory_desc_t *src = is_input ? user_md : prim_md;
    const dnnl_memory_desc_t *dst = is_input ? prim_md : user_md;
    HERD_DNNL(dnnl_reorder_primitive_desc_create(&rpd, src, eng, dst, eng, NULL), what);
    dnnl_status_t st = dnnl_primitive_create(&port->reorder, rpd);
    dnnl_primitive_desc_destroy(rpd);
    HERD_DNNL(st, what);
    return HERD_OK;
}

herd_status herd_dnnl_port_init(herd_dnnl_port *port, const dnnl_memory_desc_t *user_md,
                                const dnnl_memory_desc_t *prim_md, bool is_input,
                                const char *what)
{
    return port_init(port, user_md, prim_md, is_input, false, false, what);
}

herd_status herd_dnnl_port_init_transient(herd_dnnl_port *port, const dnnl_memory_desc_t *user_md,
                                          const dnnl_memory_desc_t *prim_md, bool is_input,
                                          bool round_bf16, const char *what)
{
    return port_init(port, user_md, prim_md, is_input, round_bf16, true, what);
}

size_t herd_dnnl_port_transient_bytes(const herd_dnnl_port *port)
{
    return port->transient ? (port->inner_bytes + 63) / 64 * 64 : 0;
}

herd_status herd_dnnl_port_bind(herd_dnnl_port *port, void *buf, const char *what)
{
    if (!port->transient)
        return HERD_OK;
    port->inner_buf = buf;
    HERD_DNNL(dnnl_memory_set_data_handle(port->inner, buf), what);
    return HERD_OK;
}

herd_status herd_dnnl_port_init_bf16_rounded(herd_dnnl_port *port,
                                            const dnnl_memory_desc_t *user_md,
                                            const dnnl_memory_desc_t *prim_md, const char *what)
{
    return port_init(port, user_md, prim_md, true, true, false, what);
}

void herd_dnnl_port_free(herd_dnnl_port *port)
{
    herd_dnnl_port_unshare(port);
    if (port->reorder)
        dnnl_primitive_destroy(port->reorder);
    if (port->inner && port->inner != port->user)
        dnnl_memory_destroy(port->inner);
    if (port->user)
        dnnl_memory_destroy(port->user);
    if (!port->transient)
        herd_cpu_free(port->inner_buf);
    memset(port, 0, sizeof *port);
}

static herd_status run_reorder(herd_dnnl_port *port, dnnl_memory_t from, dnnl_memory_t to,
                               const char *what)
{
    dnnl_exec_arg_t args[2] = {herd_dnnl_arg(DNNL_ARG_FROM, from), herd_dnnl_arg(DNNL_ARG_TO, to)};
    return herd_dnnl_exec(port->reorder, 2, args, what);
}

herd_status herd_dnnl_port_in(herd_dnnl_port *port, const void *data, const char *what)
{
    if (!data)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "%s: NULL input", what);
    HERD_DNNL(dnnl_memory_set_data_handle(port->user, (void *)data), what);
    if (port->reorder)
        HERD_TRY(run_reorder(port, port->user, port->inner, what));
    if (port->round_bf16)
        herd_cpu_round_bf16(port->inner_buf, port->inner_bytes / sizeof(float));
    return HERD_OK;
}

herd_status herd_dnnl_port_out(herd_dnnl_port *port, void *data, const char *what)
{
    if (!data)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "%s: NULL output", what);
    HERD_DNNL(dnnl_memory_set_data_handle(port->user, data), what);
    return HERD_OK;
}

herd_status herd_dnnl_port_out_finish(herd_dnnl_port *port, const char *what)
{
    if (port->reorder)
        return run_reorder(port, port->inner, port->user, what);
    return HERD_OK;
}

herd_status herd_dnnl_create_pd(const void *op_desc, const_dnnl_primitive_desc_t hint,
                                dnnl_primitive_desc_t *pd, const char *what)
{
    dnnl_engine_t eng;
    dnnl_stream_t stream;
    HERD_TRY(herd_dnnl_get(&eng, &stream));
    dnnl_primitive_attr_t attr;
    HERD_DNNL(dnnl_primitive_attr_create(&attr), what);
    dnnl_status_t st = dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user);
    if (st == dnnl_success)
        st = dnnl_primitive_desc_create(pd, op_desc, attr, eng, hint);
    dnnl_primitive_attr_destroy(attr);
    HERD_DNNL(st, what);
    return HERD_OK;
}

herd_status herd_dnnl_create_prim(dnnl_primitive_desc_t *pd, dnnl_primitive_t *prim,
                                  const char *what)
{
    dnnl_status_t st = dnnl_primitive_create(prim, *pd);
    if (st != dnnl_success) {
        dnnl_primitive_desc_destroy(*pd);
        *pd = NULL;
    }
    HERD_DNNL(st, what);
    return HERD_OK;
}

herd_status herd_dnnl_create(const void *op_desc, const_dnnl_primitive_desc_t hint,
                             dnnl_primitive_desc_t *pd, dnnl_primitive_t *prim, const char *what)
{
    HERD_TRY(herd_dnnl_create_pd(op_desc, hint, pd, what));
    return herd_dnnl_create_prim(pd, prim, what);
}

size_t herd_dnnl_scratchpad_bytes(const_dnnl_primitive_desc_t pd)
{
    const dnnl_memory_desc_t *md = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    return md ? dnnl_memory_desc_get_size(md) : 0;
}

herd_status herd_dnnl_exec(dnnl_primitive_t prim, int nargs, const dnnl_exec_arg_t *args,
                           const char *what)
{
    dnnl_engine_t eng;
    dnnl_stream_t stream;
    HERD_TRY(herd_dnnl_get(&eng, &stream));
    HERD_DNNL(dnnl_primitive_execute(prim, stream, nargs, args), what);
    HERD_DNNL(dnnl_stream_wait(stream), what);
    return HERD_OK;
}

static herd_status scratch_init(const const_dnnl_primitive_desc_t *pds, int n, void **buf,
                                size_t *out_bytes, dnnl_memory_t *mem, const char *what)
{
    size_t bytes = 0;
    for (int i = 0; i < n; i++) {
        size_t b = herd_dnnl_scratchpad_bytes(pds[i]);
        bytes = b > bytes ? b : bytes;
    }
    if (out_bytes)
        *out_bytes = (bytes + 63) / 64 * 64;
    if (!bytes)
        return HERD_OK;
    dnnl_engine_t eng;
    dnnl_stream_t stream;
    HERD_TRY(herd_dnnl_get(&eng, &stream));
    if (buf) {
        *buf = herd_cpu_alloc(bytes);
        if (!*buf)
            return HERD_ERR_NOMEM; /* the allocator said why */
    }
    dnnl_memory_desc_t md;
    dnnl_dims_t dims = {(dnnl_dim_t)bytes};
    HERD_DNNL(dnnl_memory_desc_init_by_tag(&md, 1, dims, dnnl_u8, dnnl_a), what);
    HERD_DNNL(dnnl_memory_create(mem, &md, eng, buf ? *buf : DNNL_MEMORY_NONE), what);
    return HERD_OK;
}

herd_status herd_dnnl_scratch_init(const const_dnnl_primitive_desc_t *pds, int n, void **buf,
                                   dnnl_memory_t *mem, const char *what)
{
    return scratch_init(pds, n, buf, NULL, mem, what);
}

herd_status herd_dnnl_scratch_init_transient(const const_dnnl_primitive_desc_t *pds, int n,
                                             size_t *bytes, dnnl_memory_t *mem, const char *what)
{
    return scratch_init(pds, n, NULL, bytes, mem, what);
}

/* The arenas: one per call running at once (threads running convolutions together:
 * --deterministic's slices), each as big as the largest plan's need. */
typedef struct arena_slot {
    char *buf;
    size_t bytes;
    const void *owner; /* who used it last; NULL after it moved */
    bool busy;
} arena_slot;

#define ARENA_SLOTS 256
static struct {
    pthread_mutex_t mu; /* guards the table; a call holds its slot, not the lock */
    arena_slot slot[ARENA_SLOTS];
    int n;
    size_t need;
    int users;
} arena = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* Slot s holds arena.need bytes (its contents gone when it grows). Callers hold mu. */
static herd_status arena_fit(arena_slot *s)
{
    if (s->bytes >= arena.need)
        return HERD_OK;
    char *grown = herd_cpu_alloc(arena.need);
    if (!grown)
        return HERD_ERR_NOMEM; /* the allocator said why */
    herd_cpu_free(s->buf);
    s->buf = grown;
    s->bytes = arena.need;
    s->owner = NULL;
    return HERD_OK;
}

herd_status herd_dnnl_arena_join(size_t bytes)
{
    pthread_mutex_lock(&arena.mu);
    if (bytes > arena.need)
        arena.need = bytes;
    if (arena.n == 0)
        arena.n = 1;
    /* The slots not in use grow now: a plan too big fails when it is made. */
    herd_status st = HERD_OK;
    for (int i = 0; i < arena.n && st == HERD_OK; i++)
        if (!arena.slot[i].busy)
            st = arena_fit(&arena.slot[i]);
    if (st == HERD_OK)
        arena.users++;
    pthread_mutex_unlock(&arena.mu);
    return st;
}

void herd_dnnl_arena_leave(void)
{
    pthread_mutex_lock(&arena.mu);
    if (--arena.users == 0) {
        for (int i = 0; i < arena.n; i++)
            herd_cpu_free(arena.slot[i].buf);
        memset(arena.slot, 0, sizeof arena.slot);
        arena.n = 0;
        arena.need = 0;
    }
    pthread_mutex_unlock(&arena.mu);
}

herd_status herd_dnnl_arena_lock(const void *owner, herd_dnnl_arena_hold *h)
{
    pthread_mutex_lock(&arena.mu);
    /* The slot this owner left its copies in, else any free one, else a new one. */
    int pick = -1;
    for (int i = 0; i < arena.n && pick < 0; i++)
        if (!arena.slot[i].busy && arena.slot[i].owner == owner)
            pick = i;
    for (int i = 0; i < arena.n && pick < 0; i++)
        if (!arena.slot[i].busy)
            pick = i;
    if (pick < 0 && arena.n < ARENA_SLOTS)
        pick = arena.n++;
    herd_status st = pick < 0 ? HERD_ERR(HERD_ERR_INTERNAL, "%d convolutions at once: more than "
                                         "the arenas' table holds", ARENA_SLOTS)
                              : arena_fit(&arena.slot[pick]);
    if (st == HERD_OK) {
        arena_slot *s = &arena.slot[pick];
        s->busy = true;
        *h = (herd_dnnl_arena_hold){.base = s->buf, .kept = s->owner == owner, .slot = pick};
        s->owner = owner;
    }
    pthread_mutex_unlock(&arena.mu);
    return st;
}

void herd_dnnl_arena_unlock(const herd_dnnl_arena_hold *h)
{
    pthread_mutex_lock(&arena.mu);
    arena.slot[h->slot].busy = false;
    pthread_mutex_unlock(&arena.mu);
}
