/* dnnl_sgemm vs OpenBLAS cblas_sgemm on batch-128 training shapes, 1 thread.
 * Build: gcc -O2 bench/bench_gemm.c -ldnnl -lopenblas -o /tmp/bench_gemm
 * Run:   OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 /tmp/bench_gemm */
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
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int m = shapes[s][0], n = shapes[s][1], k = shapes[s][2], ta = shapes[s][3], tb = shapes[s][4];
        int lda = ta ? m : k, ldb = tb ? k : n;
        double flop = 2.0 * m * n * k, best_d = 1e9, best_o = 1e9;
        for (int rep = 0; rep < 30; rep++) {
            double t0 = now();
            dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, 1, a, lda, b, ldb, 0, c, n);
            double t1 = now();
            cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                        m, n, k, 1, a, lda, b, ldb, 0, c, n);
            double t2 = now();
            if (t1 - t0 < best_d) best_d = t1 - t0;
            if (t2 - t1 < best_o) best_o = t2 - t1;
        }
        printf("%4d x %4d x %4d %c%c  dnnl %6.1f GFLOP/s  openblas %6.1f GFLOP/s\n", m, n, k,
               ta ? 'T' : 'N', tb ? 'T' : 'N', flop / best_d * 1e-9, flop / best_o * 1e-9);
    }
    return 0;
}
