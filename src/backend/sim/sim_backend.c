/* The simulated device ("sim"): the CPU backend's arithmetic behind a device's
 * interface, for testing device code paths without a GPU. Every op checks that each
 * pointer argument is device memory (a live allocation of sim_mem.c, the whole range
 * the op touches inside it) or, for the few host values, host memory, then runs the
 * CPU op on the shadow addresses; so results are the CPU backend's, bit for bit, and
 * a host buffer handed to a device op, or a device pointer read on the host, fails. */
#include <stdlib.h>
#include <string.h>

#include "backend/sim/sim.h"
#include "core/error.h"
#include "core/rng.h"

static const herd_backend *cpu(void) { return herd_backend_cpu(); }

/* The op's name for messages: each function is sim_<op>. */
#define OP (__func__ + 4)

/* void *arg##_d = the shadow of arg's bytes, or return the error. */
#define DEV(arg, bytes)                                             \
    void *arg##_d;                                                  \
    HERD_TRY(herd_sim_dev(OP, #arg, (arg), (bytes), &arg##_d))

#define HOST(arg) HERD_TRY(herd_sim_host(OP, #arg, (arg)))

/* Bytes of n elements; an overflow becomes a size no allocation has. */
static size_t nbytes(size_t n, size_t elem) { return n > SIZE_MAX / elem ? SIZE_MAX : n * elem; }
static size_t floats(size_t n) { return nbytes(n, sizeof(float)); }
static size_t doubles(size_t n) { return nbytes(n, sizeof(double)); }
/* n x c x hw values of a checked (positive) shape. */
static size_t nchw(int n, int c, int hw) { return (size_t)n * (size_t)c * (size_t)hw; }
/* A row-major rows x cols matrix with leading dimension ld. */
static size_t matrix(int rows, int cols, int ld)
{
    return rows > 0 && cols > 0 ? floats((size_t)(rows - 1) * (size_t)ld + (size_t)cols) : 0;
}

static bool sim_supports_op(herd_op op) { return cpu()->supports_op(op); }

static herd_status sim_set_threads(int threads) { return cpu()->set_threads(threads); }

static herd_status sim_set_precision(herd_precision p)
{
    if (p != HERD_PRECISION_FP32)
        return HERD_ERR(HERD_ERR_UNSUPPORTED,
                        "--precision %s is not available on the sim backend (a simulated device "
                        "that computes in fp32, for tests); use --precision fp32",
                        herd_precision_name(p));
    return cpu()->set_precision(p); /* the arithmetic it borrows */
}

static herd_status copy_args(const char *op, const void *dst, const void *src, size_t bytes)
{
    if (bytes && (!dst || !src))
        return HERD_ERR(HERD_ERR_INVALID_ARG, "sim: %s: NULL %s for %zu bytes", op,
                        dst ? "source" : "destination", bytes);
    return HERD_OK;
}

static herd_status sim_memcpy_h2d(void *dst, const void *src, size_t bytes)
{
    HERD_TRY(copy_args(OP, dst, src, bytes));
    if (!bytes)
        return HERD_OK;
    HOST(src);
    DEV(dst, bytes);
    memcpy(dst_d, src, bytes);
    return HERD_OK;
}

static herd_status sim_memcpy_d2h(void *dst, const void *src, size_t bytes)
{
    HERD_TRY(copy_args(OP, dst, src, bytes));
    if (!bytes)
        return HERD_OK;
    HOST(dst);
    DEV(src, bytes);
    memcpy(dst, src_d, bytes);
    return HERD_OK;
}

/* ------------------------------------------------------------ dense */

static herd_status sim_gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                            const float *a, int lda, const float *b, int ldb, float beta, float *c,
                            int ldc)
{
    bool empty;
    HERD_TRY(herd_gemm_check(trans_a, trans_b, m, n, k, a, lda, b, ldb, c, ldc, &empty));
    if (empty)
        return HERD_OK;
    DEV(a, trans_a ? matrix(k, m, lda) : matrix(m, k, lda));
    DEV(b, trans_b ? matrix(n, k, ldb) : matrix(k, n, ldb));
    DEV(c, matrix(m, n, ldc));
    HERD_SIM_SCALAR(OP, alpha);
    HERD_SIM_SCALAR(OP, beta);
    HERD_SIM_BITS(OP, trans_a);
    HERD_SIM_BITS(OP, trans_b);
    return HERD_SIM_RUN(cpu()->gemm(trans_a, trans_b, m, n, k, alpha, a_d, lda, b_d, ldb, beta, c_d,
                                    ldc));
}

static herd_status sim_bias_add(int rows, int cols, float *y, const float *bias)
{
    HERD_TRY(herd_check_bias_add(rows, cols, y, bias));
    DEV(y, floats((size_t)rows * (size_t)cols));
    DEV(bias, floats((size_t)cols));
    return HERD_SIM_RUN(cpu()->bias_add(rows, cols, y_d, bias_d));
}

static herd_status sim_bias_grad(int rows, int cols, const float *dy, float *db, float beta)
{
    HERD_TRY(herd_check_bias_grad(rows, cols, dy, db, beta));
    DEV(dy, floats((size_t)rows * (size_t)cols));
    DEV(db, floats((size_t)cols));
    HERD_SIM_SCALAR(OP, beta);
    return HERD_SIM_RUN(cpu()->bias_grad(rows, cols, dy_d, db_d, beta));
}

/* The exact linear ops on the device's memory; the weight gradient in plain mode only
 * (the exact sums of a device live on the host: exact_sum.c reads each slice back). */
static herd_status sim_exact_linear_fwd(int rows, int in, int out, const float *x,
                                        const float *w, const float *b, float *y)
{
    if (rows <= 0 || in <= 0 || out <= 0)
        return HERD_OK;
    DEV(x, floats((size_t)rows * (size_t)in));
    DEV(w, floats((size_t)out * (size_t)in));
    DEV(y, floats((size_t)rows * (size_t)out));
    void *b_d = NULL;
    if (b)
        HERD_TRY(herd_sim_dev(OP, "b", b, floats((size_t)out), &b_d));
    return HERD_SIM_RUN(cpu()->exact_linear_fwd(rows, in, out, x_d, w_d, b_d, y_d));
}

static herd_status sim_exact_linear_bwd_data(int rows, int in, int out, const float *dy,
                                             const float *w, float *dx)
{
    if (rows <= 0 || in <= 0 || out <= 0)
        return HERD_OK;
    DEV(dy, floats((size_t)rows * (size_t)out));
    DEV(w, floats((size_t)out * (size_t)in));
    DEV(dx, floats((size_t)rows * (size_t)in));
    return HERD_SIM_RUN(cpu()->exact_linear_bwd_data(rows, in, out, dy_d, w_d, dx_d));
}

static herd_status sim_exact_linear_wgrad(herd_exact_wgrad *j)
{
    if (j->w.sums || j->b.sums || !j->w.plain)
        return HERD_ERR(HERD_ERR_UNSUPPORTED, "exact_linear_wgrad on the sim device writes "
                        "plain gradients only (its exact sums are the host's)");
    if (j->rows <= 0 || j->in <= 0 || j->out <= 0)
        return HERD_OK;
    const float *dy = j->dy, *x = j->x, *wp = j->w.plain, *bp = j->b.plain;
    DEV(dy, floats((size_t)j->rows * (size_t)j->out));
    DEV(x, floats((size_t)j->rows * (size_t)j->in));
    DEV(wp, floats((size_t)j->out * (size_t)j->in));
    void *bp_d = NULL;
    if (bp)
        HERD_TRY(herd_sim_dev(OP, "bias gradient", bp, floats((size_t)j->out), &bp_d));
    herd_exact_wgrad host = *j;
    host.dy = dy_d, host.x = x_d, host.w.plain = wp_d, host.b.plain = bp_d;
    HERD_TRY(HERD_SIM_RUN(cpu()->exact_linear_wgrad(&host)));
    j->w.max_bits = host.w.max_bits, j->b.max_bits = host.b.max_bits;
    return HERD_OK;
}

/* ------------------------------------------------------------ convolution, pooling */

/* backend.c's checks read the description at the start of every backend's plan. */
struct herd_conv_plan {
    herd_conv_desc d;
    herd_conv_plan *cpu;
};

struct herd_pool_plan {
    herd_pool_desc d;
    herd_pool_plan *cpu;
};

static herd_status sim_conv2d_plan(const herd_conv_desc *d, herd_conv_plan **plan)
{
    herd_conv_desc fin;
    HERD_TRY(herd_check_conv2d_plan(d, plan, &fin));
    if (fin.bf16_in || fin.bf16_out) /* bf16_acts is NULL: models never ask */
        return HERD_ERR(HERD_ERR_UNSUPPORTED, "sim: conv2d_plan: the simulated device has no "
                        "bf16 activations");
    herd_conv_plan *p = herd_xcalloc(1, sizeof *p);
    if (!p)
        return HERD_ERR_NOMEM;
    p->d = fin;
    herd_status st = cpu()->conv2d_plan(&fin, &p->cpu);
    if (st != HERD_OK) {
        free(p);
        return st;
    }
    *plan = p;
    return HERD_OK;
}

static void sim_conv2d_plan_free(herd_conv_plan *p)
{
    if (!p)
        return;
    cpu()->conv2d_plan_free(p->cpu);
    free(p);
}

static size_t conv_x(const herd_conv_desc *d) { return floats(nchw(d->n, d->c_in, d->h_in * d->w_in)); }
static size_t conv_y(const herd_conv_desc *d) { return floats(nchw(d->n, d->c_out, d->h_out * d->w_out)); }
static size_t conv_w(const herd_conv_desc *d) { return floats(nchw(d->c_out, d->c_in, d->kh * d->kw)); }
static size_t conv_b(const herd_conv_desc *d) { return d->bias ? floats((size_t)d->c_out) : 0; }

static herd_status sim_conv2d_fwd(herd_conv_plan *p, const float *x, const float *w,
                                  const float *b, float *y)
{
    HERD_TRY(herd_check_conv2d_fwd(p, x, w, b, y));
    DEV(x, conv_x(&p->d));
    DEV(w, conv_w(&p->d));
    DEV(b, conv_b(&p->d));
    DEV(y, conv_y(&p->d));
    return HERD_SIM_RUN(cpu()->conv2d_fwd(p->cpu, x_d, w_d, b_d, y_d));
}

static herd_status sim_conv2d_bwd_data(herd_conv_plan *p, const float *dy, const float *w,
                                       float *dx)
{
    HERD_TRY(herd_check_conv2d_bwd_data(p, dy, w, dx));
    DEV(dy, conv_y(&p->d));
    DEV(w, conv_w(&p->d));
    DEV(dx, conv_x(&p->d));
    return HERD_SIM_RUN(cpu()->conv2d_bwd_data(p->cpu, dy_d, w_d, dx_d));
}

static herd_status sim_conv2d_bwd_weights(herd_conv_plan *p, const float *x, const float *dy,
                                          float *dw, float *db, float beta)
{
    HERD_TRY(herd_check_conv2d_bwd_weights(p, x, dy, dw, db, beta));
    DEV(x, conv_x(&p->d));
    DEV(dy, conv_y(&p->d));
    DEV(dw, conv_w(&p->d));
    DEV(db, conv_b(&p->d));
    HERD_SIM_SCALAR(OP, beta);
    return HERD_SIM_RUN(cpu()->conv2d_bwd_weights(p->cpu, x_d, dy_d, dw_d, db_d, beta));
}

static herd_status sim_pool_plan(const herd_pool_desc *d, herd_pool_plan **plan)
{
    herd_pool_desc fin;
    HERD_TRY(herd_check_pool_plan(d, plan, &fin));
    herd_pool_plan *p = herd_xcalloc(1, sizeof *p);
    if (!p)
        return HERD_ERR_NOMEM;
    p->d = fin;
    herd_status st = cpu()->pool_plan(&fin, &p->cpu);
    if (st != HERD_OK) {
        free(p);
        return st;
    }
    *plan = p;
    return HERD_OK;
}

static void sim_pool_plan_free(herd_pool_plan *p)
{
    if (!p)
        return;
    cpu()->pool_plan_free(p->cpu);
    free(p);
}

static size_t pool_x(const herd_pool_desc *d) { return floats(nchw(d->n, d->c, d->h_in * d->w_in)); }
static size_t pool_y(const herd_pool_desc *d) { return floats(nchw(d->n, d->c, d->h_out * d->w_out)); }

static herd_status sim_pool_fwd(herd_pool_plan *p, const float *x, float *y, bool training)
{
    HERD_TRY(herd_check_pool_fwd(p, x, y));
    DEV(x, pool_x(&p->d));
    DEV(y, pool_y(&p->d));
    HERD_SIM_BITS(OP, training);
    return HERD_SIM_RUN(cpu()->pool_fwd(p->cpu, x_d, y_d, training));
}

static herd_status sim_pool_bwd(herd_pool_plan *p, const float *dy, float *dx)
{
    if (!p || !dy || !dx) /* the CPU plan knows whether a training forward ran */
        return HERD_ERR(HERD_ERR_INVALID_ARG, "pool_bwd: NULL argument");
    DEV(dy, pool_y(&p->d));
    DEV(dx, pool_x(&p->d));
    return HERD_SIM_RUN(cpu()->pool_bwd(p->cpu, dy_d, dx_d));
}

static herd_status sim_global_avgpool_fwd(int n, int c, int hw, const float *x, float *y)
{
    HERD_TRY(herd_check_global_avgpool("global_avgpool_fwd", n, c, hw, x, y));
    DEV(x, floats(nchw(n, c, hw)));
    DEV(y, floats(nchw(n, c, 1)));
    return HERD_SIM_RUN(cpu()->global_avgpool_fwd(n, c, hw, x_d, y_d));
}

static herd_status sim_global_avgpool_bwd(int n, int c, int hw, const float *dy, float *dx)
{
    HERD_TRY(herd_check_global_avgpool("global_avgpool_bwd", n, c, hw, dy, dx));
    DEV(dy, floats(nchw(n, c, 1)));
    DEV(dx, floats(nchw(n, c, hw)));
    return HERD_SIM_RUN(cpu()->global_avgpool_bwd(n, c, hw, dy_d, dx_d));
}

/* ------------------------------------------------------------ batch norm */

static herd_status sim_bn_fwd_train(int n, int c, int hw, const float *x, const float *gamma,
                                    const float *beta, float *y, float *save_mean,
                                    float *save_invstd, float *running_mean, float *running_var,
                                    float momentum, float eps)
{
    HERD_TRY(herd_check_bn_fwd_train(n, c, hw, x, gamma, beta, y, save_mean, save_invstd,
                                     running_mean, running_var));
    size_t all = floats(nchw(n, c, hw)), ch = floats((size_t)c);
    DEV(x, all);
    DEV(gamma, ch);
    DEV(beta, ch);
    DEV(y, all);
    DEV(save_mean, ch);
    DEV(save_invstd, ch);
    DEV(running_mean, ch);
    DEV(running_var, ch);
    HERD_SIM_SCALAR(OP, momentum);
    HERD_SIM_SCALAR(OP, eps);
    return HERD_SIM_RUN(cpu()->bn_fwd_train(n, c, hw, x_d, gamma_d, beta_d, y_d, save_mean_d,
                                            save_invstd_d, running_mean_d, running_var_d, momentum,
                                            eps));
}

static herd_status sim_bn_fwd_infer(int n, int c, int hw, const float *x, const float *gamma,
                                    const float *beta, float *y, const float *running_mean,
                                    const float *running_var, float eps)
{
    HERD_TRY(herd_check_bn_fwd_infer(n, c, hw, x, gamma, beta, y, running_mean, running_var));
    size_t all = floats(nchw(n, c, hw)), ch = floats((size_t)c);
    DEV(x, all);
    DEV(gamma, ch);
    DEV(beta, ch);
    DEV(y, all);
    DEV(running_mean, ch);
    DEV(running_var, ch);
    HERD_SIM_SCALAR(OP, eps);
    return HERD_SIM_RUN(cpu()->bn_fwd_infer(n, c, hw, x_d, gamma_d, beta_d, y_d, running_mean_d,
                                            running_var_d, eps));
}

static herd_status sim_bn_bwd(int n, int c, int hw, const float *x, const float *dy,
                              const float *gamma, const float *save_mean, const float *save_invstd,
                              float *dx, float *dgamma, float *dbeta, float beta)
{
    HERD_TRY(herd_check_bn_bwd(n, c, hw, x, dy, gamma, save_mean, save_invstd, dgamma, dbeta,
                               beta));
    size_t all = floats(nchw(n, c, hw)), ch = floats((size_t)c);
    DEV(x, all);
    DEV(dy, all);
    DEV(gamma, ch);
    DEV(save_mean, ch);
    DEV(save_invstd, ch);
    DEV(dx, all);
    DEV(dgamma, ch);
    DEV(dbeta, ch);
    HERD_SIM_SCALAR(OP, beta);
    return HERD_SIM_RUN(cpu()->bn_bwd(n, c, hw, x_d, dy_d, gamma_d, save_mean_d, save_invstd_d,
                                      dx_d, dgamma_d, dbeta_d, beta));
}

/* The split ops' double arrays are device memory too: a GPU's kernels read them. */
static herd_status sim_bn_stats(int n, int c, int hw, const float *x, const double *sum,
                                int64_t count, double *out)
{
    HERD_TRY(herd_check_bn_stats(n, c, hw, x, sum, count, out));
    DEV(x, floats(nchw(n, c, hw)));
    DEV(sum, doubles((size_t)c));
    DEV(out, doubles((size_t)c));
    HERD_SIM_BITS(OP, count);
    return HERD_SIM_RUN(cpu()->bn_stats(n, c, hw, x_d, sum_d, count, out_d));
}

static herd_status sim_bn_apply_train(int n, int c, int hw, const float *x, const float *gamma,
                                      const float *beta, const double *sum, const double *sqdev,
                                      int64_t count, float *y, float *save_mean,
                                      float *save_invstd, float *running_mean, float *running_var,
                                      float momentum, float eps)
{
    HERD_TRY(herd_check_bn_apply_train(n, c, hw, x, gamma, beta, sum, sqdev, count, y, save_mean,
                                       save_invstd, running_mean, running_var));
    size_t all = floats(nchw(n, c, hw)), ch = floats((size_t)c), chd = doubles((size_t)c);
    DEV(x, all);
    DEV(gamma, ch);
    DEV(beta, ch);
    DEV(sum, chd);
    DEV(sqdev, chd);
    DEV(y, all);
    DEV(save_mean, ch);
    DEV(save_invstd, ch);
    DEV(running_mean, ch);
    DEV(running_var, ch);
    HERD_SIM_SCALAR(OP, momentum);
    HERD_SIM_SCALAR(OP, eps);
    HERD_SIM_BITS(OP, count);
    return HERD_SIM_RUN(cpu()->bn_apply_train(n, c, hw, x_d, gamma_d, beta_d, sum_d, sqdev_d, count,
                                              y_d, save_mean_d, save_invstd_d, running_mean_d,
                                              running_var_d, momentum, eps));
}

static herd_status sim_bn_bwd_reduce(int n, int c, int hw, const float *x, const float *dy,
                                     const float *save_mean, const float *save_invstd,
                                     double *sum_dy, double *sum_dy_xc, float *dgamma,
                                     float *dbeta, float beta)
{
    HERD_TRY(herd_check_bn_bwd_reduce(n, c, hw, x, dy, save_mean, save_invstd, sum_dy, sum_dy_xc,
                                      dgamma, dbeta, beta));
    size_t all = floats(nchw(n, c, hw)), ch = floats((size_t)c), chd = doubles((size_t)c);
    DEV(x, all);
    DEV(dy, all);
    DEV(save_mean, ch);
    DEV(save_invstd, ch);
    DEV(sum_dy, chd);
    DEV(sum_dy_xc, chd);
    DEV(dgamma, ch);
    DEV(dbeta, ch);
    HERD_SIM_SCALAR(OP, beta);
    return HERD_SIM_RUN(cpu()->bn_bwd_reduce(n, c, hw, x_d, dy_d, save_mean_d, save_invstd_d,
                                             sum_dy_d, sum_dy_xc_d, dgamma_d, dbeta_d, beta));
}

static herd_status sim_bn_bwd_apply(int n, int c, int hw, const float *x, const float *dy,
                                    const float *gamma, const float *save_mean,
                                    const float *save_invstd, const double *sum_dy,
                                    const double *sum_dy_xc, int64_t count, float *dx)
{
    HERD_TRY(herd_check_bn_bwd_apply(n, c, hw, x, dy, gamma, save_mean, save_invstd, sum_dy,
                                     sum_dy_xc, count, dx));
    size_t all = floats(nchw(n, c, hw)), ch = floats((size_t)c), chd = doubles((size_t)c);
    DEV(x, all);
    DEV(dy, all);
    DEV(gamma, ch);
    DEV(save_mean, ch);
    DEV(save_invstd, ch);
    DEV(sum_dy, chd);
    DEV(sum_dy_xc, chd);
    DEV(dx, all);
    HERD_SIM_BITS(OP, count);
    return HERD_SIM_RUN(cpu()->bn_bwd_apply(n, c, hw, x_d, dy_d, gamma_d, save_mean_d,
                                            save_invstd_d, sum_dy_d, sum_dy_xc_d, count, dx_d));
}

/* ------------------------------------------------------------ elementwise */

static herd_status sim_relu_fwd(size_t n, const float *x, float *y)
{
    DEV(x, floats(n));
    DEV(y, floats(n));
    return HERD_SIM_RUN(cpu()->relu_fwd(n, x_d, y_d));
}

static herd_status sim_relu_bwd(size_t n, const float *y, const float *dy, float *dx)
{
    DEV(y, floats(n));
    DEV(dy, floats(n));
    DEV(dx, floats(n));
    return HERD_SIM_RUN(cpu()->relu_bwd(n, y_d, dy_d, dx_d));
}

static herd_status sim_dropout_fwd(size_t n, const float *x, float *y, float *mask, float p,
                                   uint64_t seed)
{
    DEV(x, floats(n));
    DEV(y, floats(n));
    DEV(mask, floats(n));
    HERD_SIM_SCALAR(OP, p);
    HERD_SIM_BITS(OP, seed);
    return HERD_SIM_RUN(cpu()->dropout_fwd(n, x_d, y_d, mask_d, p, seed));
}

static herd_status sim_dropout_fwd_seeded(size_t n, const float *x, float *y, float *mask,
                                          float p, const uint64_t *seed, uint64_t stream)
{
    HERD_TRY(herd_check_dropout_fwd(n, x, y, mask, p));
    HERD_CHECK_ARRAYS("dropout_fwd_seeded", n, seed);
    DEV(x, floats(n));
    DEV(y, floats(n));
    DEV(mask, floats(n));
    DEV(seed, n ? sizeof *seed : 0);
    HERD_SIM_SCALAR(OP, p);
    HERD_SIM_BITS(OP, stream);
    if (herd_sim_recording() || n == 0)
        return HERD_OK;
    /* The seed as the op finds it when it runs. */
    uint64_t step_seed = *(const uint64_t *)seed_d;
    return cpu()->dropout_fwd(n, x_d, y_d, mask_d, p, herd_mix64(step_seed, stream));
}

static herd_status sim_mul(size_t n, const float *a, const float *b, float *y)
{
    DEV(a, floats(n));
    DEV(b, floats(n));
    DEV(y, floats(n));
    return HERD_SIM_RUN(cpu()->mul(n, a_d, b_d, y_d));
}

static herd_status sim_add(size_t n, const float *a, const float *b, float *y)
{
    DEV(a, floats(n));
    DEV(b, floats(n));
    DEV(y, floats(n));
    return HERD_SIM_RUN(cpu()->add(n, a_d, b_d, y_d));
}

static herd_status sim_axpy(size_t n, float alpha, const float *x, float *y)
{
    DEV(x, floats(n));
    DEV(y, floats(n));
    HERD_SIM_SCALAR(OP, alpha);
    return HERD_SIM_RUN(cpu()->axpy(n, alpha, x_d, y_d));
}

static herd_status sim_copy(size_t n, const float *x, float *y)
{
    DEV(x, floats(n));
    DEV(y, floats(n));
    return HERD_SIM_RUN(cpu()->copy(n, x_d, y_d));
}

static herd_status sim_fill(size_t n, float value, float *y)
{
    DEV(y, floats(n));
    HERD_SIM_SCALAR(OP, value);
    return HERD_SIM_RUN(cpu()->fill(n, value, y_d));
}

/* ------------------------------------------------------------ loss, optimizers */

static herd_status sim_softmax_xent(int n, int classes, const float *logits,
                                    const int32_t *labels, float smoothing, float *dlogits,
                                    double *loss_sum, long *correct)
{
    HERD_TRY(herd_check_softmax_xent(n, classes, logits, labels, smoothing));
    size_t all = floats((size_t)n * (size_t)classes);
    DEV(logits, all);
    DEV(labels, nbytes((size_t)n, sizeof(int32_t)));
    DEV(dlogits, all);
    HOST(loss_sum);
    HOST(correct);
    return HERD_SIM_RUN(cpu()->softmax_xent(n, classes, logits_d, labels_d, smoothing, dlogits_d,
                                            loss_sum, correct));
}

/* As CUDA's: a bad label is found when the totals are read, not at the call. */
static herd_status sim_softmax_xent_queued(int n, int classes, const float *logits,
                                           const int32_t *labels, float smoothing,
                                           float *dlogits, herd_xent_totals *totals)
{
    HERD_TRY(herd_check_softmax_xent(n, classes, logits, labels, smoothing));
    HERD_CHECK_ARRAYS("softmax_xent_queued", 1, totals);
    size_t all = floats((size_t)n * (size_t)classes);
    DEV(logits, all);
    DEV(labels, nbytes((size_t)n, sizeof(int32_t)));
    DEV(dlogits, all);
    DEV(totals, sizeof *totals);
    HERD_SIM_SCALAR(OP, smoothing);
    if (herd_sim_recording())
        return HERD_OK;
    const int32_t *y = labels_d;
    herd_xent_totals t = {.bad_row = INT32_MAX};
    for (int i = 0; i < n && t.bad_row == INT32_MAX; i++)
        if (y[i] < 0 || y[i] >= classes)
            t.bad_row = i, t.bad_label = y[i];
    long correct = 0;
    if (t.bad_row == INT32_MAX)
        HERD_TRY(cpu()->softmax_xent(n, classes, logits_d, labels_d, smoothing, dlogits_d,
                                     &t.loss_sum, &correct));
    t.correct = correct;
    memcpy(totals_d, &t, sizeof t);
    return HERD_OK;
}

static herd_status sim_sgd_update(size_t n, float *w, const float *g, float *momentum_buf,
                                  const herd_sgd_args *a)
{
    HERD_TRY(herd_check_sgd_update(n, w, g, momentum_buf, a));
    if (!n)
        return HERD_OK;
    HOST(a);
    DEV(w, floats(n));
    DEV(g, floats(n));
    DEV(momentum_buf, a->momentum != 0.0f ? floats(n) : 0);
    return HERD_SIM_RUN(cpu()->sgd_update(n, w_d, g_d, momentum_buf_d, a));
}

static herd_status sim_adamw_update(size_t n, float *w, const float *g, float *m, float *v,
                                    const herd_adamw_args *a)
{
    HERD_TRY(herd_check_adamw_update(n, w, g, m, v, a));
    if (!n)
        return HERD_OK;
    HOST(a);
    DEV(w, floats(n));
    DEV(g, floats(n));
    DEV(m, floats(n));
    DEV(v, floats(n));
    return HERD_SIM_RUN(cpu()->adamw_update(n, w_d, g_d, m_d, v_d, a));
}

static herd_status sim_grad_unscale_check(size_t n, float *x, float factor, bool *found_inf)
{
    DEV(x, floats(n));
    HOST(found_inf);
    HERD_SIM_SCALAR(OP, factor);
    return HERD_SIM_RUN(cpu()->grad_unscale_check(n, x_d, factor, found_inf));
}

static herd_status sim_sum_squares(size_t n, const float *x, double *out)
{
    DEV(x, floats(n));
    HOST(out);
    return HERD_SIM_RUN(cpu()->sum_squares(n, x_d, out));
}

static const herd_backend sim_backend = {
    .name = "sim",
    .host_memory = false,
    .supports_op = sim_supports_op,
    .alloc = herd_sim_alloc,
    .free = herd_sim_free,
    .set_threads = sim_set_threads,
    .memcpy_h2d = sim_memcpy_h2d,
    .memcpy_d2h = sim_memcpy_d2h,
    .gemm = sim_gemm,
    .bias_add = sim_bias_add,
    .bias_grad = sim_bias_grad,
    .exact_linear_fwd = sim_exact_linear_fwd,
    .exact_linear_bwd_data = sim_exact_linear_bwd_data,
    .exact_linear_wgrad = sim_exact_linear_wgrad,
    .conv2d_plan = sim_conv2d_plan,
    .conv2d_plan_free = sim_conv2d_plan_free,
    .conv2d_fwd = sim_conv2d_fwd,
    .conv2d_bwd_data = sim_conv2d_bwd_data,
    .conv2d_bwd_weights = sim_conv2d_bwd_weights,
    .pool_plan = sim_pool_plan,
    .pool_plan_free = sim_pool_plan_free,
    .pool_fwd = sim_pool_fwd,
    .pool_bwd = sim_pool_bwd,
    .global_avgpool_fwd = sim_global_avgpool_fwd,
    .global_avgpool_bwd = sim_global_avgpool_bwd,
    .bn_fwd_train = sim_bn_fwd_train,
    .bn_fwd_infer = sim_bn_fwd_infer,
    .bn_bwd = sim_bn_bwd,
    .bn_stats = sim_bn_stats,
    .bn_apply_train = sim_bn_apply_train,
    .bn_bwd_reduce = sim_bn_bwd_reduce,
    .bn_bwd_apply = sim_bn_bwd_apply,
    .relu_fwd = sim_relu_fwd,
    .relu_bwd = sim_relu_bwd,
    .dropout_fwd = sim_dropout_fwd,
    .dropout_fwd_seeded = sim_dropout_fwd_seeded,
    .mul = sim_mul,
    .add = sim_add,
    .axpy = sim_axpy,
    .copy = sim_copy,
    .fill = sim_fill,
    .softmax_xent = sim_softmax_xent,
    .softmax_xent_queued = sim_softmax_xent_queued,
    .xent_part_stats = herd_sim_xent_part_stats,
    .xent_part_grad = herd_sim_xent_part_grad,
    .embedding_fwd = herd_sim_embedding_fwd,
    .embedding_bwd = herd_sim_embedding_bwd,
    .layernorm_fwd = herd_sim_layernorm_fwd,
    .layernorm_bwd = herd_sim_layernorm_bwd,
    .gelu_fwd = herd_sim_gelu_fwd,
    .gelu_bwd = herd_sim_gelu_bwd,
    .attention_fwd = herd_sim_attention_fwd,
    .attention_bwd = herd_sim_attention_bwd,
    .sgd_update = sim_sgd_update,
    .adamw_update = sim_adamw_update,
    .grad_unscale_check = sim_grad_unscale_check,
    .sum_squares = sim_sum_squares,
    .set_precision = sim_set_precision,
    .bf16_acts = NULL,
    .set_memory_limit = herd_sim_set_memory_limit,
    .memory_usage = herd_sim_memory_usage,
    .memory_reset_peak = herd_sim_memory_reset_peak,
    .device_info = NULL,
    .timer_mark = herd_sim_timer_mark,
    .timer_elapsed = herd_sim_timer_elapsed,
    .timer_host_time = herd_sim_timer_host_time,
    .graph_capture = herd_sim_graph_capture,
    .graph_launch = herd_sim_graph_launch,
    .graph_free = herd_sim_graph_free,
};

const herd_backend *herd_backend_sim(void)
{
    if (herd_sim_mem_init() != HERD_OK)
        return NULL;
    return &sim_backend;
}
