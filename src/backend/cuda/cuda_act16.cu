/* 16-bit activations between layers on the GPU (backend.h's herd_bf16_act_ops), for
 * --precision bf16 and fp16: bf16 or IEEE half values by the context's precision, in
 * channels-last order (NHWC: per sample, per pixel, the c channel values), the layout
 * cuDNN's tensor-core convolutions read and write without transposing. The CPU keeps
 * oneDNN's nChw16c in the same table; layers never look inside, they only pass the
 * buffers between the table's ops and the convolutions.
 *
 * Values are converted to fp32 for arithmetic and rounded to nearest even once per
 * result. Batch norm on them is cuda_bn16.cu. */
#include "backend/cuda/cuda_half.cuh"

/* ---- layout conversions: per sample a c x hw <-> hw x c transpose through shared memory */

template <class H>
__global__ void k_to_nhwc(int c, int hw, const float *x, uint16_t *y)
{
    __shared__ float tile[TILE][TILE + 1];
    size_t base = (size_t)blockIdx.z * c * hw;
    int p0 = blockIdx.x * TILE, c0 = blockIdx.y * TILE;
    for (int j = threadIdx.y; j < TILE; j += TILE_ROWS) {
        int ch = c0 + j, p = p0 + threadIdx.x;
        if (ch < c && p < hw)
            tile[j][threadIdx.x] = x[base + (size_t)ch * hw + p];
    }
    __syncthreads();
    for (int j = threadIdx.y; j < TILE; j += TILE_ROWS) {
        int p = p0 + j, ch = c0 + threadIdx.x;
        if (ch < c && p < hw)
            y[base + (size_t)p * c + ch] = H::store(tile[threadIdx.x][j]);
    }
}

template <class H>
__global__ void k_from_nhwc(int c, int hw, const uint16_t *x, float *y, const float *bias,
                            bool accumulate)
{
    __shared__ float tile[TILE][TILE + 1];
    size_t base = (size_t)blockIdx.z * c * hw;
    int p0 = blockIdx.x * TILE, c0 = blockIdx.y * TILE;
    for (int j = threadIdx.y; j < TILE; j += TILE_ROWS) {
        int p = p0 + j, ch = c0 + threadIdx.x;
        if (ch < c && p < hw)
            tile[j][threadIdx.x] = H::load(x[base + (size_t)p * c + ch]);
    }
    __syncthreads();
    for (int j = threadIdx.y; j < TILE; j += TILE_ROWS) {
        int ch = c0 + j, p = p0 + threadIdx.x;
        if (ch < c && p < hw) {
            float v = tile[threadIdx.x][j];
            size_t i = base + (size_t)ch * hw + p;
            y[i] = accumulate ? y[i] + v : bias ? v + bias[ch] : v;
        }
    }
}

static herd_status check_layout(const char *op, int n, int c, int hw, const void *x, const void *y)
{
    if (n < 0 || c < 1 || hw < 1 || n > 65535)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "16-bit %s: n=%d c=%d hw=%d (the CUDA backend "
                        "takes 0 <= n <= 65535, c >= 1, hw >= 1)", op, n, c, hw);
    if (n > 0 && (!x || !y))
        return HERD_ERR(HERD_ERR_INVALID_ARG, "16-bit %s: a NULL array", op);
    return HERD_OK;
}

static dim3 transpose_grid(int n, int c, int hw)
{
    return dim3((hw + TILE - 1) / TILE, (c + TILE - 1) / TILE, n);
}

/* One pixel (a 1x1 convolution's weights) or one channel: the layouts are the same and
 * the conversion is a flat pass (the tiles would leave 31 of 32 threads idle). */
template <class H> __global__ void k_flat_to16(size_t n, const float *x, uint16_t *y)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        y[i] = H::store(x[i]);
}

template <class H>
__global__ void k_flat_from16(size_t n, int c, const uint16_t *x, float *y, const float *bias,
                              bool accumulate)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float v = H::load(x[i]);
        y[i] = accumulate ? y[i] + v : bias ? v + bias[i % c] : v;
    }
}

/* Few pixels (a 3x3 or 5x5 convolution's weights: hw of 9 or 25) leave most of a
 * 32-pixel tile idle: one thread per value instead, writes in order, reads gathered from
 * each output channel's small block (which the cache holds). */
#define SMALL_HW 26 /* up to 5x5 */

template <class H> __global__ void k_small_to_nhwc(size_t total, int c, int hw, const float *x,
                                                   uint16_t *y)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t pc = (size_t)c * hw, k = i / pc, r = i % pc; /* y is [k][p][ch] */
        int p = (int)(r / c), ch = (int)(r % c);
        y[i] = H::store(x[k * pc + (size_t)ch * hw + p]);
    }
}

template <class H>
__global__ void k_small_from_nhwc(size_t total, int c, int hw, const uint16_t *x, float *y,
                                  const float *bias, bool accumulate)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t pc = (size_t)c * hw, k = i / pc, r = i % pc; /* y is [k][ch][p] */
        int ch = (int)(r / hw), p = (int)(r % hw);
        float v = H::load(x[k * pc + (size_t)p * c + ch]);
        y[i] = accumulate ? y[i] + v : bias ? v + bias[ch] : v;
    }
}

template <class H> static herd_status to_nhwc(int n, int c, int hw, const float *x, uint16_t *y)
{
    if (hw == 1 || c == 1) {
        size_t total = (size_t)n * c * hw;
        k_flat_to16<H><<<herd_cuda_blocks(total), HERD_CUDA_THREADS, 0, stream()>>>(total, x, y);
        HERD_CUDA_LAUNCHED("k_flat_to16");
        return HERD_OK;
    }
    if (hw < SMALL_HW) {
        size_t total = (size_t)n * c * hw;
        k_small_to_nhwc<H><<<herd_cuda_blocks(total), HERD_CUDA_THREADS, 0, stream()>>>(total, c,
                                                                                        hw, x, y);
        HERD_CUDA_LAUNCHED("k_small_to_nhwc");
        return HERD_OK;
    }
    k_to_nhwc<H><<<transpose_grid(n, c, hw), dim3(TILE, TILE_ROWS), 0, stream()>>>(c, hw, x, y);
    HERD_CUDA_LAUNCHED("k_to_nhwc");
    return HERD_OK;
}

template <class H>
static herd_status from_nhwc(int n, int c, int hw, const uint16_t *x, float *y, const float *bias,
                             bool accumulate)
{
    if (hw == 1 || c == 1) { /* channel of flat index i: i % c when hw is 1, 0 when c is */
        size_t total = (size_t)n * c * hw;
        k_flat_from16<H><<<herd_cuda_blocks(total), HERD_CUDA_THREADS, 0, stream()>>>(
            total, hw == 1 ? c : 1, x, y, bias, accumulate);
        HERD_CUDA_LAUNCHED("k_flat_from16");
        return HERD_OK;
    }
    if (hw < SMALL_HW) {
        size_t total = (size_t)n * c * hw;
        k_small_from_nhwc<H><<<herd_cuda_blocks(total), HERD_CUDA_THREADS, 0, stream()>>>(
            total, c, hw, x, y, bias, accumulate);
        HERD_CUDA_LAUNCHED("k_small_from_nhwc");
        return HERD_OK;
    }
    k_from_nhwc<H><<<transpose_grid(n, c, hw), dim3(TILE, TILE_ROWS), 0, stream()>>>(
        c, hw, x, y, bias, accumulate);
    HERD_CUDA_LAUNCHED("k_from_nhwc");
    return HERD_OK;
}

extern "C" herd_status herd_cuda_to_nhwc16(int n, int c, int hw, const float *x, uint16_t *y)
{
    HERD_TRY(check_layout("from_f32", n, c, hw, x, y));
    return n == 0 ? HERD_OK : BY_FORMAT(to_nhwc, n, c, hw, x, y);
}

extern "C" herd_status herd_cuda_from_nhwc16(int n, int c, int hw, const uint16_t *x, float *y,
                                             const float *bias, bool accumulate)
{
    HERD_TRY(check_layout("to_f32", n, c, hw, x, y));
    return n == 0 ? HERD_OK : BY_FORMAT(from_nhwc, n, c, hw, x, y, bias, accumulate);
}

static herd_status act_from_f32(int n, int c, int hw, const float *x, uint16_t *y)
{
    return herd_cuda_to_nhwc16(n, c, hw, x, y);
}

static herd_status act_to_f32(int n, int c, int hw, const uint16_t *x, float *y)
{
    return herd_cuda_from_nhwc16(n, c, hw, x, y, NULL, false);
}

/* ---- elementwise: y = OP(a, b), eight values per thread where the buffers allow */

enum { EW_RELU, EW_RELU_BWD, EW_ADD };

template <int OP> __device__ static float ew(float a, float b)
{
    if (OP == EW_RELU) /* NaN passes, as on the CPU */
        return a > 0.0f || isnan(a) ? a : 0.0f;
    if (OP == EW_RELU_BWD) /* a = y, b = dy */
        return a > 0.0f ? b : 0.0f;
    return a + b;
}

template <class H, int OP>
__global__ void k_ew(size_t n, bool vec, const uint16_t *a, const uint16_t *b, uint16_t *y)
{
    size_t tid = blockIdx.x * (size_t)blockDim.x + threadIdx.x, step = (size_t)gridDim.x * blockDim.x;
    size_t done = 0;
    if (vec) {
        size_t packs = n / 8;
        for (size_t p = tid; p < packs; p += step) {
            pack8 va, vb, vy;
            va.u = ((const uint4 *)a)[p];
            vb.u = b ? ((const uint4 *)b)[p] : make_uint4(0, 0, 0, 0);
#pragma unroll
            for (int j = 0; j < 8; j++)
                vy.h[j] = H::store(ew<OP>(H::load(va.h[j]), H::load(vb.h[j])));
            ((uint4 *)y)[p] = vy.u;
        }
        done = packs * 8;
    }
    for (size_t i = done + tid; i < n; i += step)
        y[i] = H::store(ew<OP>(H::load(a[i]), b ? H::load(b[i]) : 0.0f));
}

template <class H, int OP>
static herd_status ew_launch(size_t n, const uint16_t *a, const uint16_t *b, uint16_t *y)
{
    bool vec = aligned16(a) && aligned16(y) && (!b || aligned16(b));
    k_ew<H, OP><<<herd_cuda_blocks(vec ? n / 8 + 1 : n), HERD_CUDA_THREADS, 0, stream()>>>(
        n, vec, a, b, y);
    HERD_CUDA_LAUNCHED("k_ew (16-bit elementwise)");
    return HERD_OK;
}
template <class H> static herd_status relu_t(size_t n, const uint16_t *x, uint16_t *y)
{
    return ew_launch<H, EW_RELU>(n, x, NULL, y);
}
template <class H>
static herd_status relu_bwd_t(size_t n, const uint16_t *y, const uint16_t *dy, uint16_t *dx)
{
    return ew_launch<H, EW_RELU_BWD>(n, y, dy, dx);
}
template <class H>
static herd_status add_t(size_t n, const uint16_t *a, const uint16_t *b, uint16_t *y)
{
    return ew_launch<H, EW_ADD>(n, a, b, y);
}

#define CHECK_EW(op, n, ...)                                                                 \
    do {                                                                                     \
        HERD_CHECK_ARRAYS("16-bit " op, n, __VA_ARGS__);                                     \
        if ((n) == 0)                                                                        \
            return HERD_OK;                                                                  \
    } while (0)

static herd_status act_relu_fwd(size_t n, const uint16_t *x, uint16_t *y)
{
    CHECK_EW("relu_fwd", n, x, y);
    return BY_FORMAT(relu_t, n, x, y);
}
static herd_status act_relu_bwd(size_t n, const uint16_t *y, const uint16_t *dy, uint16_t *dx)
{
    CHECK_EW("relu_bwd", n, y, dy, dx);
    return BY_FORMAT(relu_bwd_t, n, y, dy, dx);
}
static herd_status act_add(size_t n, const uint16_t *a, const uint16_t *b, uint16_t *y)
{
    CHECK_EW("add", n, a, b, y);
    return BY_FORMAT(add_t, n, a, b, y);
}
static herd_status act_accumulate(size_t n, const uint16_t *x, uint16_t *y)
{
    CHECK_EW("accumulate", n, x, y);
    return BY_FORMAT(add_t, n, x, y, y);
}
static herd_status act_copy(size_t n, const uint16_t *x, uint16_t *y)
{
    CHECK_EW("copy", n, x, y);
    HERD_CUDA(cudaMemcpyAsync(y, x, n * sizeof *x, cudaMemcpyDeviceToDevice, stream()),
              "16-bit copy");
    return HERD_OK;
}

/* ---- global average pooling: [n][hw][c] 16-bit <-> [n][c] fp32 */

template <class H>
__global__ void k_gap16_fwd(int n, int c, int hw, const uint16_t *x, float *y)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x; /* (sample, channel) */
    if (i >= n * c)
        return;
    int s = i / c, ch = i % c;
    const uint16_t *xs = x + (size_t)s * hw * c + ch;
    float sum = 0.0f;
    for (int p = 0; p < hw; p++)
        sum += H::load(xs[(size_t)p * c]);
    y[i] = sum / (float)hw;
}

template <class H>
__global__ void k_gap16_bwd(size_t total, int c, int hw, const float *dy, uint16_t *dx)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t s = i / ((size_t)hw * c);
        dx[i] = H::store(dy[s * c + i % c] / (float)hw);
    }
}

template <class H> static herd_status gap_fwd_t(int n, int c, int hw, const uint16_t *x, float *y)
{
    k_gap16_fwd<H><<<(n * c + 255) / 256, 256, 0, stream()>>>(n, c, hw, x, y);
    HERD_CUDA_LAUNCHED("k_gap16_fwd");
    return HERD_OK;
}
template <class H>
static herd_status gap_bwd_t(int n, int c, int hw, const float *dy, uint16_t *dx)
{
    size_t total = (size_t)n * c * hw;
    k_gap16_bwd<H><<<herd_cuda_blocks(total), HERD_CUDA_THREADS, 0, stream()>>>(total, c, hw, dy, dx);
    HERD_CUDA_LAUNCHED("k_gap16_bwd");
    return HERD_OK;
}

static herd_status act_gap_fwd(int n, int c, int hw, const uint16_t *x, float *y)
{
    HERD_TRY(check_layout("global_avgpool_fwd", n, c, hw, x, y));
    if ((long long)n * c > 0x7fffffff)
        return HERD_ERR(HERD_ERR_UNSUPPORTED, "16-bit global_avgpool_fwd: n x c = %lld",
                        (long long)n * c);
    return n == 0 ? HERD_OK : BY_FORMAT(gap_fwd_t, n, c, hw, x, y);
}
static herd_status act_gap_bwd(int n, int c, int hw, const float *dy, uint16_t *dx)
{
    HERD_TRY(check_layout("global_avgpool_bwd", n, c, hw, dy, dx));
    return n == 0 ? HERD_OK : BY_FORMAT(gap_bwd_t, n, c, hw, dy, dx);
}

/* ---- a 16-bit convolution's bias: y[r][ch] += bias[ch], db (+)= column sums */

template <class H>
__global__ void k_bias_add16(size_t total, int c, uint16_t *y, const float *bias)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x)
        y[i] = H::store(H::load(y[i]) + bias[i % c]);
}

/* One block per 32 channels, TILE_ROWS lanes over the rows, added in order. */
template <class H>
__global__ void k_bias_grad16(size_t rows, int c, const uint16_t *dy, float *db, float beta)
{
    __shared__ float part[TILE_ROWS][TILE + 1];
    int ch = blockIdx.x * TILE + threadIdx.x;
    float s = 0.0f;
    if (ch < c)
        for (size_t r = threadIdx.y; r < rows; r += TILE_ROWS)
            s += H::load(dy[r * c + ch]);
    part[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y == 0 && ch < c) {
        for (int j = 1; j < TILE_ROWS; j++)
            s += part[j][threadIdx.x];
        db[ch] = beta == 0.0f ? s : db[ch] + s;
    }
}

template <class H> static herd_status bias_add_t(size_t rows, int c, uint16_t *y, const float *bias)
{
    size_t total = rows * c;
    k_bias_add16<H><<<herd_cuda_blocks(total), HERD_CUDA_THREADS, 0, stream()>>>(total, c, y, bias);
    HERD_CUDA_LAUNCHED("k_bias_add16");
    return HERD_OK;
}
template <class H>
static herd_status bias_grad_t(size_t rows, int c, const uint16_t *dy, float *db, float beta)
{
    k_bias_grad16<H><<<(c + TILE - 1) / TILE, dim3(TILE, TILE_ROWS), 0, stream()>>>(rows, c, dy,
                                                                                  db, beta);
    HERD_CUDA_LAUNCHED("k_bias_grad16");
    return HERD_OK;
}

extern "C" herd_status herd_cuda_nhwc16_bias_add(size_t rows, int c, uint16_t *y,
                                                 const float *bias)
{
    return rows == 0 ? HERD_OK : BY_FORMAT(bias_add_t, rows, c, y, bias);
}

extern "C" herd_status herd_cuda_nhwc16_bias_grad(size_t rows, int c, const uint16_t *dy,
                                                  float *db, float beta)
{
    return BY_FORMAT(bias_grad_t, rows, c, dy, db, beta);
}

static bool act_in_use(void) { return herd_cuda_half(herd_cuda_ctx_get()); }

extern "C" const herd_bf16_act_ops herd_cuda_act16_ops = {
    act_in_use,      act_from_f32,       act_to_f32,       act_relu_fwd,    act_relu_bwd,
    act_add,         act_accumulate,     act_copy,         act_gap_fwd,     act_gap_bwd,
    herd_cuda_bn16_stats,      herd_cuda_bn16_apply_train, herd_cuda_bn16_fwd_infer,
    herd_cuda_bn16_bwd_reduce, herd_cuda_bn16_bwd_apply,
};
