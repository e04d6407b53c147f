/* oneDNN matmul primitives made once per GEMM shape, for herd_cpu_gemm (fp32, operands
 * in place) and herd_cpu_gemm_bf16 (bf16 copies of the operands). A primitive made once
 * and reused beats dnnl_sgemm's per-call dispatch: on a 16-core Xeon, mlp's and lenet5's
 * training shapes took 620 us against 848 us at 16 threads, 5,260 against 5,378 us at 1;
 * 2-7% less per call at 1 thread on this project's 2-core AMD machine
 * (bench/bench_gemm.c, bench/results/2026-11-28-xeon-gemm.txt and -gemm-cpu.txt). */
#include <pthread.h>
#include <string.h>

#include "backend/cpu/cpu.h"
#include "backend/cpu/cpu_dnnl.h"
#include "backend/cpu/cpu_ops.h"

typedef struct matmul_entry {
    herd_matmul_shape shape;
    dnnl_primitive_t prim;
    dnnl_memory_t a, b, c, scratch; /* data handles set per call, by one caller at a time */
    dnnl_memory_desc_t ad, bd, cd, sd;
    size_t scratch_bytes;
    int busy;       /* calls executing the primitive now: not replaced meanwhile */
    bool mems_busy; /* a call holds a, b and c: another makes its own */
} matmul_entry;

/* Linear layers use a handful of shapes (three per layer and batch size); beyond the
 * table the oldest entry not executing is replaced. The lock guards the table, not the
 * execution: a primitive runs in several threads at once (--deterministic's slices on
 * threads), each with a scratchpad of its own thread's (oneDNN's library scratchpad is
 * shared: two threads in one primitive gave other bits). */
#define MATMUL_CACHE 64
static matmul_entry cache[MATMUL_CACHE];
static int cache_used, cache_next;
static pthread_mutex_t cache_mu = PTHREAD_MUTEX_INITIALIZER;

static void entry_free(matmul_entry *e)
{
    if (e->prim)
        dnnl_primitive_destroy(e->prim);
    dnnl_memory_t mems[] = {e->a, e->b, e->c, e->scratch};
    for (int i = 0; i < 4; i++)
        if (mems[i])
            dnnl_memory_destroy(mems[i]);
    memset(e, 0, sizeof *e);
}

static herd_status strided_md(dnnl_memory_desc_t *md, dnnl_dim_t rows, dnnl_dim_t cols,
                              dnnl_dim_t row_stride, dnnl_dim_t col_stride, dnnl_data_type_t t)
{
    dnnl_dims_t dims = {rows, cols}, strides = {row_stride, col_stride};
    HERD_DNNL(dnnl_memory_desc_init_by_strides(md, 2, dims, t, strides), "matmul descriptor");
    return HERD_OK;
}

static herd_status entry_make(matmul_entry *e, const herd_matmul_shape *s)
{
    dnnl_engine_t eng;
    dnnl_stream_t stream;
    HERD_TRY(herd_dnnl_get(&eng, &stream));
    dnnl_data_type_t t = s->bf16 ? dnnl_bf16 : dnnl_f32;
    const char *what = s->bf16 ? "bf16 matmul" : "fp32 matmul";
    dnnl_memory_desc_t a, b, c;
    HERD_TRY(s->trans_a ? strided_md(&a, s->m, s->k, 1, s->lda, t)
                        : strided_md(&a, s->m, s->k, s->lda, 1, t));
    HERD_TRY(s->trans_b ? strided_md(&b, s->k, s->n, 1, s->ldb, t)
                        : strided_md(&b, s->k, s->n, s->ldb, 1, t));
    HERD_TRY(strided_md(&c, s->m, s->n, s->ldc, 1, dnnl_f32));
    dnnl_matmul_desc_t md;
    HERD_DNNL(dnnl_matmul_desc_init(&md, &a, &b, NULL, &c), what);
    dnnl_primitive_attr_t attr;
    HERD_DNNL(dnnl_primitive_attr_create(&attr), what);
    dnnl_post_ops_t po = NULL;
    dnnl_status_t st = dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user);
    if (st == dnnl_success && s->alpha != 1.0f) /* C = alpha * AB + beta * C: scale, then add */
        st = dnnl_primitive_attr_set_output_scales(attr, 1, 0, &s->alpha);
    if (st == dnnl_success && s->beta != 0.0f && (st = dnnl_post_ops_create(&po)) == dnnl_success &&
        (st = dnnl_post_ops_append_sum(po, s->beta)) == dnnl_success)
        st = dnnl_primitive_attr_set_post_ops(attr, po);
    dnnl_primitive_desc_t pd = NULL;
    if (st == dnnl_success)
        st = dnnl_primitive_desc_create(&pd, &md, attr, eng, NULL);
    if (po)
        dnnl_post_ops_destroy(po);
    dnnl_primitive_attr_destroy(attr);
    HERD_DNNL(st, s->bf16 ? "bf16 matmul (the CPU's oneDNN has no bf16 kernel for it)" : what);
    const dnnl_memory_desc_t *sd = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    e->sd = *sd;
    e->scratch_bytes = dnnl_memory_desc_get_size(sd);
    st = dnnl_primitive_create(&e->prim, pd);
    dnnl_primitive_desc_destroy(pd);
    HERD_DNNL(st, what);
    e->shape = *s;
    e->ad = a, e->bd = b, e->cd = c;
    HERD_DNNL(dnnl_memory_create(&e->scratch, &e->sd, eng, DNNL_MEMORY_NONE), what);
    HERD_DNNL(dnnl_memory_create(&e->a, &a, eng, DNNL_MEMORY_NONE), what);
    HERD_DNNL(dnnl_memory_create(&e->b, &b, eng, DNNL_MEMORY_NONE), what);
    HERD_DNNL(dnnl_memory_create(&e->c, &c, eng, DNNL_MEMORY_NONE), what);
    return HERD_OK;
}

/* An entry to replace: a free one, else the oldest not executing; NULL when every one
 * is (as many calls at once as the table holds). Callers hold cache_mu. */
static matmul_entry *victim(void)
{
    if (cache_used < MATMUL_CACHE)
        return &cache[cache_used++];
    for (int tries = 0; tries < MATMUL_CACHE; tries++) {
        matmul_entry *e = &cache[cache_next];
        cache_next = (cache_next + 1) % MATMUL_CACHE;
        if (!e->busy)
            return e;
    }
    return NULL;
}

/* Callers hold cache_mu. */
static herd_status lookup(const herd_matmul_shape *s, matmul_entry **out)
{
    for (int i = 0; i < cache_used; i++)
        if (memcmp(&cache[i].shape, s, sizeof *s) == 0) {
            *out = &cache[i];
            return HERD_OK;
        }
    matmul_entry *e = victim();
    if (!e)
        return HERD_ERR(HERD_ERR_INTERNAL, "%d matmul shapes executing at once: more than the "
                        "cache of primitives holds", MATMUL_CACHE);
    entry_free(e);
    herd_status st = entry_make(e, s);
    if (st != HERD_OK) {
        entry_free(e);
        return st;
    }
    *out = e;
    return HERD_OK;
}

/* Executes e's primitive on a, b, c through mems (a, b, c and the scratchpad: the
 * entry's, or a call's own). */
static herd_status execute(const matmul_entry *e, dnnl_memory_t *mems, const void *a, const void *b,
                           float *c, const char *what)
{
    void *scratch = e->scratch_bytes ? herd_cpu_thread_buffer(HERD_CPU_MATMUL_SCRATCH, e->scratch_bytes) : NULL;
    if (e->scratch_bytes && !scratch)
        return HERD_ERR_NOMEM; /* the allocator said why */
    HERD_DNNL(dnnl_memory_set_data_handle(mems[0], (void *)a), what);
    HERD_DNNL(dnnl_memory_set_data_handle(mems[1], (void *)b), what);
    HERD_DNNL(dnnl_memory_set_data_handle(mems[2], c), what);
    HERD_DNNL(dnnl_memory_set_data_handle(mems[3], scratch), what);
    dnnl_exec_arg_t args[4] = {herd_dnnl_arg(DNNL_ARG_SRC, mems[0]), herd_dnnl_arg(DNNL_ARG_WEIGHTS, mems[1]),
                               herd_dnnl_arg(DNNL_ARG_DST, mems[2]),
                               herd_dnnl_arg(DNNL_ARG_SCRATCHPAD, mems[3])};
    return herd_dnnl_exec(e->prim, 4, args, what);
}

/* The same with memory objects of the call's own (another call holds the entry's). */
static herd_status execute_own(const matmul_entry *e, const void *a, const void *b, float *c,
                               const char *what)
{
    dnnl_engine_t eng;
    dnnl_stream_t stream;
    HERD_TRY(herd_dnnl_get(&eng, &stream));
    dnnl_memory_t mems[4] = {NULL, NULL, NULL, NULL};
    const dnnl_memory_desc_t *mds[4] = {&e->ad, &e->bd, &e->cd, &e->sd};
    dnnl_status_t made = dnnl_success;
    for (int i = 0; i < 4 && made == dnnl_success; i++)
        made = dnnl_memory_create(&mems[i], mds[i], eng, DNNL_MEMORY_NONE);
    herd_status st = made == dnnl_success ? execute(e, mems, a, b, c, what)
                                          : HERD_ERR(HERD_ERR_INTERNAL, "oneDNN %s failed: %s (status %d)", what,
                                                     herd_dnnl_status_str(made), (int)made);
    for (int i = 0; i < 4; i++)
        if (mems[i])
            dnnl_memory_destroy(mems[i]);
    return st;
}

herd_status herd_cpu_matmul(const herd_matmul_shape *s, const void *a, const void *b, float *c)
{
    const char *what = s->bf16 ? "bf16 matmul" : "fp32 matmul";
    pthread_mutex_lock(&cache_mu);
    matmul_entry *e = NULL;
    herd_status st = lookup(s, &e);
    bool entry_mems = false;
    if (st == HERD_OK) {
        e->busy++;
        entry_mems = !e->mems_busy;
        e->mems_busy = true;
    }
    pthread_mutex_unlock(&cache_mu);
    if (st != HERD_OK)
        return st;
    st = entry_mems ? execute(e, (dnnl_memory_t[]){e->a, e->b, e->c, e->scratch}, a, b, c, what)
                  : execute_own(e, a, b, c, what);
    pthread_mutex_lock(&cache_mu);
    e->busy--;
    if (entry_mems)
        e->mems_busy = false;
    pthread_mutex_unlock(&cache_mu);
    return st;
}
