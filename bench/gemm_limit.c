/* The machine's fp32 limit that day, as herd reaches it: 1-thread dnnl_sgemm (the call
 * herd's CPU backend makes for every linear layer, src/backend/cpu/cpu_gemm.c) on a
 * square N x N x N product, best of R runs after warm-up. bench/lib.sh builds and runs it.
 *   cc -O2 bench/gemm_limit.c -ldnnl -o gemm_limit && OMP_NUM_THREADS=1 ./gemm_limit [N] [R] */
#include <oneapi/dnnl/dnnl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    const long n = argc > 1 ? atol(argv[1]) : 1024, reps = argc > 2 ? atol(argv[2]) : 20;
    if (n < 16 || n > 8192 || reps < 1) {
        fprintf(stderr, "gemm_limit: N in [16, 8192] and R >= 1\n");
        return 2;
    }
    float *a = malloc(sizeof(float) * n * n), *b = malloc(sizeof(float) * n * n),
          *c = malloc(sizeof(float) * n * n);
    if (!a || !b || !c) {
        fprintf(stderr, "gemm_limit: out of memory\n");
        return 1;
    }
    for (long i = 0; i < n * n; i++)
        a[i] = b[i] = (float)(i % 13) * 0.01f, c[i] = 0.0f;
    double best = 1e30;
    for (long r = -3; r < reps; r++) { /* 3 untimed warm-up runs */
        double t0 = now();
        if (dnnl_sgemm('N', 'N', n, n, n, 1.0f, a, n, b, n, 0.0f, c, n) != dnnl_success) {
            fprintf(stderr, "gemm_limit: dnnl_sgemm failed\n");
            return 1;
        }
        double dt = now() - t0;
        if (r >= 0 && dt < best)
            best = dt;
    }
    printf("gemm=dnnl_sgemm n=%ld threads=1 gflops=%.1f\n", n, 2.0 * n * n * n / best * 1e-9);
    free(a), free(b), free(c);
    return 0;
}
