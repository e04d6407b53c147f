/* The simulated device's transformer ops (and the vocabulary-parallel loss's): each
 * checks that its arrays are device memory covering what the op reads and writes, then
 * runs the CPU op on the shadows (so the CPU's bits), as sim_backend.c does for the
 * others. */
#include "backend/sim/sim.h"
#include "core/error.h"

static const herd_backend *cpu(void) { return herd_backend_cpu(); }

#define OP (__func__ + 4) /* sim_<op> */
#define DEV_BYTES(arg, bytes)                                       \
    void *arg##_d;                                                  \
    HERD_TRY(herd_sim_dev(OP, #arg, (arg), (bytes), &arg##_d))
#define DEV(arg, n) DEV_BYTES(arg, (n) * sizeof(float))

/* A size of a checked (positive) shape; negative ones are refused by the CPU op. */
static size_t prod(int a, int b) { return a > 0 && b > 0 ? (size_t)a * (size_t)b : 0; }

herd_status herd_sim_embedding_fwd(int n, int t, int c, int vocab, int first, int count,
                                   const float *tokens, const float *wte, const float *wpe,
                                   float *y)
{
    DEV(tokens, prod(n, t));
    DEV(wte, prod(count, c));
    DEV(wpe, prod(t, c));
    DEV(y, prod(n, t) * (c > 0 ? (size_t)c : 0));
    HERD_SIM_BITS(OP, first);
    HERD_SIM_BITS(OP, count);
    return HERD_SIM_RUN(cpu()->embedding_fwd(n, t, c, vocab, first, count, tokens_d, wte_d, wpe_d,
                                             y_d));
}

herd_status herd_sim_embedding_bwd(int n, int t, int c, int first, int count, int context,
                                   const float *tokens, const float *dy, float *dwte,
                                   float beta_wte, float *dwpe, float beta)
{
    DEV(tokens, prod(n, t));
    DEV(dy, prod(n, t) * (c > 0 ? (size_t)c : 0));
    DEV(dwte, prod(count, c));
    DEV(dwpe, prod(context, c));
    HERD_SIM_SCALAR(OP, beta_wte);
    HERD_SIM_SCALAR(OP, beta);
    return HERD_SIM_RUN(cpu()->embedding_bwd(n, t, c, first, count, context, tokens_d, dy_d, dwte_d,
                                             beta_wte, dwpe_d, beta));
}

herd_status herd_sim_layernorm_fwd(int rows, int c, const float *x, const float *gamma,
                                   const float *bias, float eps, float *y, float *mean,
                                   float *rstd)
{
    DEV(x, prod(rows, c));
    DEV(gamma, prod(1, c));
    DEV(bias, prod(1, c));
    DEV(y, prod(rows, c));
    DEV(mean, prod(rows, 1));
    DEV(rstd, prod(rows, 1));
    HERD_SIM_SCALAR(OP, eps);
    return HERD_SIM_RUN(cpu()->layernorm_fwd(rows, c, x_d, gamma_d, bias_d, eps, y_d, mean_d,
                                             rstd_d));
}

herd_status herd_sim_layernorm_bwd(int rows, int c, const float *x, const float *dy,
                                   const float *gamma, const float *mean, const float *rstd,
                                   float *dx, float *dgamma, float *dbias, float beta)
{
    DEV(x, prod(rows, c));
    DEV(dy, prod(rows, c));
    DEV(gamma, prod(1, c));
    DEV(mean, prod(rows, 1));
    DEV(rstd, prod(rows, 1));
    DEV(dx, prod(rows, c));
    DEV(dgamma, prod(1, c));
    DEV(dbias, prod(1, c));
    HERD_SIM_SCALAR(OP, beta);
    return HERD_SIM_RUN(cpu()->layernorm_bwd(rows, c, x_d, dy_d, gamma_d, mean_d, rstd_d, dx_d,
                                             dgamma_d, dbias_d, beta));
}

herd_status herd_sim_gelu_fwd(size_t n, const float *x, float *y)
{
    DEV(x, n);
    DEV(y, n);
    return HERD_SIM_RUN(cpu()->gelu_fwd(n, x_d, y_d));
}

herd_status herd_sim_gelu_bwd(size_t n, const float *x, const float *dy, float *dx)
{
    DEV(x, n);
    DEV(dy, n);
    DEV(dx, n);
    return HERD_SIM_RUN(cpu()->gelu_bwd(n, x_d, dy_d, dx_d));
}

herd_status herd_sim_attention_fwd(int n, int t, int c, int heads, const float *qkv, float *att,
                                   float *y)
{
    size_t rows = prod(n, t), width = c > 0 ? (size_t)c : 0;
    DEV(qkv, rows * 3 * width);
    DEV(att, prod(n, heads) * prod(t, t));
    DEV(y, rows * width);
    return HERD_SIM_RUN(cpu()->attention_fwd(n, t, c, heads, qkv_d, att_d, y_d));
}

herd_status herd_sim_attention_bwd(int n, int t, int c, int heads, const float *qkv,
                                   const float *att, const float *dy, float *dqkv)
{
    size_t rows = prod(n, t), width = c > 0 ? (size_t)c : 0;
    DEV(qkv, rows * 3 * width);
    DEV(att, prod(n, heads) * prod(t, t));
    DEV(dy, rows * width);
    DEV(dqkv, rows * 3 * width);
    return HERD_SIM_RUN(cpu()->attention_bwd(n, t, c, heads, qkv_d, att_d, dy_d, dqkv_d));
}

herd_status herd_sim_xent_part_stats(int n, int count, int first, const float *logits,
                                     const int32_t *labels, double *stats)
{
    DEV(logits, prod(n, count));
    DEV_BYTES(labels, prod(n, 1) * sizeof(int32_t));
    DEV_BYTES(stats, prod(n, HERD_XENT_STATS) * sizeof(double));
    return HERD_SIM_RUN(cpu()->xent_part_stats(n, count, first, logits_d, labels_d, stats_d));
}

herd_status herd_sim_xent_part_grad(int n, int count, int first, int classes, const float *logits,
                                    const int32_t *labels, const double *lse, float smoothing,
                                    float *dlogits)
{
    DEV(logits, prod(n, count));
    DEV_BYTES(labels, prod(n, 1) * sizeof(int32_t));
    DEV_BYTES(lse, prod(n, 1) * sizeof(double));
    DEV(dlogits, prod(n, count));
    return HERD_SIM_RUN(cpu()->xent_part_grad(n, count, first, classes, logits_d, labels_d, lse_d,
                                              smoothing, dlogits_d));
}
