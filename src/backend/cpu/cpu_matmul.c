/* oneDNN matmul primitives made once per GEMM shape, for herd_cpu_gemm (fp32, operands
 * in place) and herd_cpu_gemm_bf16 (bf16 copies of the operands). A primitive made once
 * and reused beats dnnl_sgemm's per-call dispatch: on a 16-core Xeon, mlp's and lenet5's
 * training shapes took 620 us against 848 us at 16 threads, 5,260 against 5,378 us at 1;
 * 2-7% less per call at 1 thread on this project's 2-core AMD machine
 * (bench/bench_gemm.c, bench/results/2026-11-28-xeon-gemm.txt and -gemm-cpu.txt). */
#include <pthread.h>
#include <string.h>

#include "backend/cpu/cpu_dnnl.h"
#include "backend/cpu/cpu_ops.h"

typedef struct matmul_entry {
    herd_matmul_shape shape;
    dnnl_primitive_t prim;
    dnnl_memory_t a, b, c; /* data handles set per call */
} matmul_entry;

/* Linear layers use a handful of shapes (three per layer and batch size); beyond the
 * table the oldest entry is replaced. The lock also serialises execution, since the
 * entry's memory objects are shared. */
#define MATMUL_CACHE 64
static matmul_entry cache[MATMUL_CACHE];
static int cache_used, cache_next;
static pthread_mutex_t cache_mu = PTHREAD_MUTEX_INITIALIZER;

static void entry_free(matmul_entry *e)
{
    if (e->prim)
        dnnl_primitive_destroy(e->prim);
    dnnl_memory_t mems[] = {e->a, e->b, e->c};
    for (int i = 0; i < 3; i++)
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
    dnnl_status_t st = dnnl_success;
    if (s->alpha != 1.0f) /* C = alpha * AB + beta * C: scale the product, then add */
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
    st = dnnl_primitive_create(&e->prim, pd);
    dnnl_primitive_desc_destroy(pd);
    HERD_DNNL(st, what);
    e->shape = *s;
    HERD_DNNL(dnnl_memory_create(&e->a, &a, eng, DNNL_MEMORY_NONE), what);
    HERD_DNNL(dnnl_memory_create(&e->b, &b, eng, DNNL_MEMORY_NONE), what);
    HERD_DNNL(dnnl_memory_create(&e->c, &c, eng, DNNL_MEMORY_NONE), what);
    return HERD_OK;
}

/* Callers hold cache_mu. */
static herd_status lookup(const herd_matmul_shape *s, matmul_entry **out)
{
    for (int i = 0; i < cache_used; i++)
        if (memcmp(&cache[i].shape, s, sizeof *s) == 0) {
            *out = &cache[i];
            return HERD_OK;
        }
    matmul_entry *e = &cache[cache_used < MATMUL_CACHE ? cache_used++ : cache_next];
    if (cache_used == MATMUL_CACHE)
        cache_next = (cache_next + 1) % MATMUL_CACHE;
    entry_free(e);
    herd_status st = entry_make(e, s);
    if (st != HERD_OK) {
        entry_free(e);
        return st;
    }
    *out = e;
    return HERD_OK;
}

herd_status herd_cpu_matmul(const herd_matmul_shape *s, const void *a, const void *b, float *c)
{
    pthread_mutex_lock(&cache_mu);
    matmul_entry *e;
    herd_status st = lookup(s, &e);
    if (st == HERD_OK) {
        dnnl_memory_set_data_handle(e->a, (void *)a);
        dnnl_memory_set_data_handle(e->b, (void *)b);
        dnnl_memory_set_data_handle(e->c, c);
        dnnl_exec_arg_t args[3] = {herd_dnnl_arg(DNNL_ARG_SRC, e->a),
                                   herd_dnnl_arg(DNNL_ARG_WEIGHTS, e->b),
                                   herd_dnnl_arg(DNNL_ARG_DST, e->c)};
        st = herd_dnnl_exec(e->prim, 3, args, s->bf16 ? "bf16 matmul" : "fp32 matmul");
    }
    pthread_mutex_unlock(&cache_mu);
    return st;
}
