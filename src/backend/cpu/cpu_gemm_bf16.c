/* GEMM in bf16 mixed precision: A and B become bf16, products accumulate in fp32,
 * C stays fp32. Natively through a oneDNN matmul made once per shape; emulated by
 * rounding copies of A and B to bf16 for dnnl_sgemm. */
#include <pthread.h>
#include <string.h>

#include "backend/cpu/cpu.h"
#include "backend/cpu/cpu_dnnl.h"
#include "backend/cpu/cpu_ops.h"
#include "core/half.h"

typedef struct gemm_shape {
    bool trans_a, trans_b;
    int m, n, k, ldc;
    float alpha, beta;
} gemm_shape;

typedef struct matmul_entry {
    gemm_shape shape;
    dnnl_primitive_t prim;
    dnnl_memory_t a, b, c; /* data handles set per call */
} matmul_entry;

/* Linear layers use a handful of shapes (three per layer and batch size); beyond the
 * table the oldest entry is replaced. The lock also serialises execution, since the
 * entry's memory objects and the copies' buffer are shared. */
#define MATMUL_CACHE 64
static matmul_entry cache[MATMUL_CACHE];
static int cache_used, cache_next;
static pthread_mutex_t cache_mu = PTHREAD_MUTEX_INITIALIZER;

/* The bf16 copies of A and B: kept and grown, since a fresh allocation per call costs
 * more in page faults than the matmul itself (measured on mlp). */
static void *copies;
static size_t copies_bytes;

static void *copies_buffer(size_t bytes)
{
    if (bytes <= copies_bytes)
        return copies;
    herd_cpu_free(copies);
    copies = herd_cpu_alloc(bytes);
    copies_bytes = copies ? bytes : 0;
    return copies;
}

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

/* A and B arrive as compact bf16 copies of their storage (ld = stored columns). */
static herd_status entry_make(matmul_entry *e, const gemm_shape *s)
{
    dnnl_engine_t eng;
    dnnl_stream_t stream;
    HERD_TRY(herd_dnnl_get(&eng, &stream));
    dnnl_memory_desc_t a, b, c;
    HERD_TRY(s->trans_a ? strided_md(&a, s->m, s->k, 1, s->m, dnnl_bf16)
                        : strided_md(&a, s->m, s->k, s->k, 1, dnnl_bf16));
    HERD_TRY(s->trans_b ? strided_md(&b, s->k, s->n, 1, s->k, dnnl_bf16)
                        : strided_md(&b, s->k, s->n, s->n, 1, dnnl_bf16));
    HERD_TRY(strided_md(&c, s->m, s->n, s->ldc, 1, dnnl_f32));
    dnnl_matmul_desc_t md;
    HERD_DNNL(dnnl_matmul_desc_init(&md, &a, &b, NULL, &c), "bf16 matmul descriptor");
    dnnl_primitive_attr_t attr;
    HERD_DNNL(dnnl_primitive_attr_create(&attr), "bf16 matmul attributes");
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
    HERD_DNNL(st, "bf16 matmul (the CPU's oneDNN has no bf16 kernel for it)");
    st = dnnl_primitive_create(&e->prim, pd);
    dnnl_primitive_desc_destroy(pd);
    HERD_DNNL(st, "bf16 matmul");
    e->shape = *s;
    HERD_DNNL(dnnl_memory_create(&e->a, &a, eng, DNNL_MEMORY_NONE), "bf16 matmul A");
    HERD_DNNL(dnnl_memory_create(&e->b, &b, eng, DNNL_MEMORY_NONE), "bf16 matmul B");
    HERD_DNNL(dnnl_memory_create(&e->c, &c, eng, DNNL_MEMORY_NONE), "bf16 matmul C");
    return HERD_OK;
}

/* Callers hold cache_mu. */
static herd_status lookup(const gemm_shape *s, matmul_entry **out)
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

static herd_status matmul(const gemm_shape *s, const uint16_t *a, const uint16_t *b, float *c)
{
    matmul_entry *e;
    HERD_TRY(lookup(s, &e));
    dnnl_memory_set_data_handle(e->a, (void *)a);
    dnnl_memory_set_data_handle(e->b, (void *)b);
    dnnl_memory_set_data_handle(e->c, c);
    dnnl_exec_arg_t args[3] = {herd_dnnl_arg(DNNL_ARG_SRC, e->a),
                               herd_dnnl_arg(DNNL_ARG_WEIGHTS, e->b),
                               herd_dnnl_arg(DNNL_ARG_DST, e->c)};
    return herd_dnnl_exec(e->prim, 3, args, "bf16 matmul");
}

/* A rows x cols matrix with leading dimension ld, copied compactly: as bf16 (to16)
 * or as fp32 rounded to bf16 (to32). The rows are converted inline: a parallel region
 * per row costs more than the row. */
static void compact(const float *x, int rows, int cols, int ld, uint16_t *to16, float *to32)
{
#pragma omp parallel for schedule(static) if ((size_t)rows * cols >= HERD_CPU_PAR_MIN)
    for (int r = 0; r < rows; r++) {
        const float *row = x + (size_t)r * ld;
        if (to16) {
            uint16_t *out = to16 + (size_t)r * cols;
            for (int i = 0; i < cols; i++)
                out[i] = herd_float_to_bf16(row[i]);
        } else {
            float *out = to32 + (size_t)r * cols;
            for (int i = 0; i < cols; i++)
                out[i] = herd_bf16_to_float(herd_float_to_bf16(row[i]));
        }
    }
}

herd_status herd_cpu_gemm_bf16(bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                               const float *a, int lda, const float *b, int ldb, float beta,
                               float *c, int ldc)
{
    bool native = herd_cpu_bf16() == HERD_CPU_BF16_NATIVE;
    size_t elem = native ? sizeof(uint16_t) : sizeof(float);
    /* Stored shapes: op(A) is m x k, op(B) is k x n. */
    int a_rows = trans_a ? k : m, a_cols = trans_a ? m : k;
    int b_rows = trans_b ? n : k, b_cols = trans_b ? k : n;
    size_t a_n = (size_t)a_rows * a_cols, b_n = (size_t)b_rows * b_cols;
    pthread_mutex_lock(&cache_mu);
    char *copy = copies_buffer((a_n + b_n) * elem);
    if (!copy) {
        pthread_mutex_unlock(&cache_mu);
        return HERD_ERR_NOMEM; /* the allocator said why */
    }
    herd_status st = HERD_OK;
    dnnl_status_t ds = dnnl_success;
    if (native) {
        uint16_t *a16 = (uint16_t *)copy, *b16 = a16 + a_n;
        compact(a, a_rows, a_cols, lda, a16, NULL);
        compact(b, b_rows, b_cols, ldb, b16, NULL);
        gemm_shape s = {trans_a, trans_b, m, n, k, ldc, alpha, beta};
        st = matmul(&s, a16, b16, c);
    } else {
        float *a32 = (float *)copy, *b32 = a32 + a_n;
        compact(a, a_rows, a_cols, lda, NULL, a32);
        compact(b, b_rows, b_cols, ldb, NULL, b32);
        ds = dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', m, n, k, alpha, a32, a_cols, b32,
                        b_cols, beta, c, ldc);
    }
    pthread_mutex_unlock(&cache_mu);
    HERD_DNNL(ds, "sgemm (bf16 emulation)");
    return st;
}
