/* fp32 GEMM on the training shapes of mlp and lenet5 (batch 128), 1 thread: dnnl_sgemm
 * (herd's fp32 path, cpu_gemm.c), a oneDNN matmul primitive made once per shape (strided
 * operands, as herd's bf16 matmul cache makes them), and OpenBLAS's cblas_sgemm.
 * Build: gcc -O2 bench/bench_gemm.c -ldnnl -lopenblas -o /tmp/bench_gemm
 * Run:   OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 OPENBLAS_CORETYPE=SkylakeX /tmp/bench_gemm */
#include <cblas.h>
#include <oneapi/dnnl/dnnl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

#define OK(x)                                                                                  \
    do {                                                                                       \
        if ((x) != dnnl_success) {                                                             \
            fprintf(stderr, "%s failed\n", #x);                                                \
            exit(1);                                                                           \
        }                                                                                      \
    } while (0)

static void md2(dnnl_memory_desc_t *md, dnnl_dim_t r, dnnl_dim_t c, dnnl_dim_t rs, dnnl_dim_t cs)
{
    dnnl_dims_t dims = {r, c}, strides = {rs, cs};
    OK(dnnl_memory_desc_init_by_strides(md, 2, dims, dnnl_f32, strides));
}

int main(void)
{
    /* m, n, k, trans_a, trans_b: forward x*W^T, backward dx = dy*W, dW = dy^T*x. */
    int shapes[][5] = {{128, 512, 784, 0, 1}, {128, 784, 512, 0, 0}, {512, 784, 128, 1, 0},
                       {128, 512, 512, 0, 1}, {128, 512, 512, 0, 0}, {512, 512, 128, 1, 0},
                       {128, 10, 512, 0, 1},  {128, 512, 10, 0, 0},  {10, 512, 128, 1, 0},
                       {128, 120, 400, 0, 1}, {120, 400, 128, 1, 0}};
    size_t cap = 1024 * 1024;
    float *a = malloc(cap * 4), *b = malloc(cap * 4), *c = malloc(cap * 4);
    for (size_t i = 0; i < cap; i++)
        a[i] = b[i] = (float)(i % 7) * 0.1f, c[i] = 0;
    dnnl_engine_t eng;
    dnnl_stream_t stream;
    OK(dnnl_engine_create(&eng, dnnl_cpu, 0));
    OK(dnnl_stream_create(&stream, eng, dnnl_stream_default_flags));
    double tot[3] = {0};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int m = shapes[s][0], n = shapes[s][1], k = shapes[s][2], ta = shapes[s][3], tb = shapes[s][4];
        int lda = ta ? m : k, ldb = tb ? k : n;
        dnnl_memory_desc_t amd, bmd, cmd;
        if (ta) md2(&amd, m, k, 1, lda); else md2(&amd, m, k, lda, 1);
        if (tb) md2(&bmd, k, n, 1, ldb); else md2(&bmd, k, n, ldb, 1);
        md2(&cmd, m, n, n, 1);
        dnnl_matmul_desc_t mm;
        OK(dnnl_matmul_desc_init(&mm, &amd, &bmd, NULL, &cmd));
        dnnl_primitive_desc_t pd;
        OK(dnnl_primitive_desc_create(&pd, &mm, NULL, eng, NULL));
        const char *impl = "?";
        dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl);
        dnnl_primitive_t prim;
        OK(dnnl_primitive_create(&prim, pd));
        dnnl_memory_t ma, mb, mc;
        OK(dnnl_memory_create(&ma, &amd, eng, a));
        OK(dnnl_memory_create(&mb, &bmd, eng, b));
        OK(dnnl_memory_create(&mc, &cmd, eng, c));
        dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}};
        double flop = 2.0 * m * n * k, best[3] = {1e9, 1e9, 1e9};
        for (int rep = 0; rep < 50; rep++) {
            double t0 = now();
            dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, 1, a, lda, b, ldb, 0, c, n);
            double t1 = now();
            OK(dnnl_primitive_execute(prim, stream, 3, args));
            OK(dnnl_stream_wait(stream));
            double t2 = now();
            cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                        m, n, k, 1, a, lda, b, ldb, 0, c, n);
            double t3 = now();
            double t[3] = {t1 - t0, t2 - t1, t3 - t2};
            for (int i = 0; i < 3; i++)
                if (t[i] < best[i])
                    best[i] = t[i];
        }
        for (int i = 0; i < 3; i++)
            tot[i] += best[i];
        printf("%4d x %4d x %4d %c%c  sgemm %6.1f  matmul %6.1f  openblas %6.1f GFLOP/s  (matmul: %s)\n",
               m, n, k, ta ? 'T' : 'N', tb ? 'T' : 'N', flop / best[0] * 1e-9, flop / best[1] * 1e-9,
               flop / best[2] * 1e-9, impl);
        dnnl_memory_destroy(ma), dnnl_memory_destroy(mb), dnnl_memory_destroy(mc);
        dnnl_primitive_destroy(prim), dnnl_primitive_desc_destroy(pd);
    }
    printf("all shapes, best times summed: sgemm %.1f us, matmul %.1f us, openblas %.1f us\n",
           tot[0] * 1e6, tot[1] * 1e6, tot[2] * 1e6);
    return 0;
}
