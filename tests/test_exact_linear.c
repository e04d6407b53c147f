/* --deterministic's linear ops on the CPU (src/backend/cpu/cpu_exact_linear.c): the
 * AVX-512 kernels give the bits of the portable loops at every shape edge; a row's output
 * does not change with the rows beside it; a slice's weight gradient is the same bits
 * written alone (plain) as added with the others (sums), and the sums equal the per-slice
 * values rounded to the grid and added; the values are a linear layer's to rounding. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu.h"
#include "testutil.h"

static float *values(size_t n, unsigned seed)
{
    float *p = malloc((n ? n : 1) * sizeof *p);
    assert_non_null(p);
    srand(seed);
    for (size_t i = 0; i < n; i++) /* several binades, both signs, some exact zeros */
        p[i] = i % 13 == 5 ? 0.0f
                           : ldexpf((float)rand() / (float)RAND_MAX - 0.5f, rand() % 9 - 4);
    return p;
}

static void assert_same_bits(const float *a, const float *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], sizeof *a) != 0)
            fail_msg("value %zu: %.9g against %.9g", i, (double)a[i], (double)b[i]);
}

/* Shapes across the kernels' block edges (16 inputs, 4 and 32 outputs, 4 and 12 rows). */
static const int shapes[][3] = {{1, 1, 1},   {3, 17, 5},  {8, 16, 4},   {13, 33, 31},
                                {24, 64, 10}, {5, 100, 7}, {12, 31, 33}, {16, 784, 36}};

static void fwd_bwd_match_generic(void **state)
{
    (void)state;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int rows = shapes[s][0], in = shapes[s][1], out = shapes[s][2];
        float *x = values((size_t)rows * in, 1), *w = values((size_t)out * in, 2);
        float *b = values((size_t)out, 3), *dy = values((size_t)rows * out, 4);
        float *y1 = values((size_t)rows * out, 5), *y2 = values((size_t)rows * out, 6);
        float *d1 = values((size_t)rows * in, 7), *d2 = values((size_t)rows * in, 8);
        for (int bias = 0; bias < 2; bias++) {
            herd_cpu_exact_force_generic(false);
            assert_herd_ok(herd_cpu_exact_linear_fwd(rows, in, out, x, w, bias ? b : NULL, y1));
            assert_herd_ok(herd_cpu_exact_linear_bwd_data(rows, in, out, dy, w, d1));
            herd_cpu_exact_force_generic(true);
            assert_herd_ok(herd_cpu_exact_linear_fwd(rows, in, out, x, w, bias ? b : NULL, y2));
            assert_herd_ok(herd_cpu_exact_linear_bwd_data(rows, in, out, dy, w, d2));
            herd_cpu_exact_force_generic(false);
            assert_same_bits(y1, y2, (size_t)rows * out);
            assert_same_bits(d1, d2, (size_t)rows * in);
        }
        /* A linear layer's values (the last pass had the bias), to fp32 rounding. */
        for (int r = 0; r < rows; r++)
            for (int o = 0; o < out; o++) {
                double want = b[o], mag = fabs(b[o]);
                for (int k = 0; k < in; k++) {
                    want += (double)x[(size_t)r * in + k] * w[(size_t)o * in + k];
                    mag += fabs((double)x[(size_t)r * in + k] * w[(size_t)o * in + k]);
                }
                assert_true(fabs(y2[(size_t)r * out + o] - want) <= 1e-6 * (mag + 1e-30));
            }
        /* Each row alone gives its bits in the whole. */
        for (int r = 0; r < rows; r++) {
            assert_herd_ok(herd_cpu_exact_linear_fwd(1, in, out, x + (size_t)r * in, w, b,
                                                     y2 + (size_t)r * out));
            assert_herd_ok(herd_cpu_exact_linear_bwd_data(1, in, out, dy + (size_t)r * out, w,
                                                          d2 + (size_t)r * in));
        }
        assert_same_bits(y1, y2, (size_t)rows * out);
        assert_same_bits(d1, d2, (size_t)rows * in);
        free(x), free(w), free(b), free(dy), free(y1), free(y2), free(d1), free(d2);
    }
}

/* Small integers, so that slice values on a grid coarser than 1 fall on ties. */
static float *integers(size_t n, unsigned seed)
{
    float *p = values(n, seed);
    for (size_t i = 0; i < n; i++)
        p[i] = (float)(rand() % 17 - 8);
    return p;
}

/* The weight gradient of `slices` slices of `slice` rows: each slice written alone
 * (plain), then all of them into sums, with the AVX-512 kernels and the portable loops,
 * added to zeros or (fresh) written over whatever the sums held. */
static void wgrad_case_of(int slices, int slice, int in, int out, double scale, bool ints)
{
    int rows = slices * slice;
    float *x = ints ? integers((size_t)rows * in, 11) : values((size_t)rows * in, 11);
    float *dy = ints ? integers((size_t)rows * out, 12) : values((size_t)rows * out, 12);
    size_t nw = (size_t)out * in;
    float *pw = malloc(nw * sizeof *pw), *pb = malloc((size_t)out * sizeof *pb);
    double *want_w = calloc(nw, sizeof *want_w), *want_b = calloc((size_t)out, sizeof *want_b);
    /* Aligned as the training's sums: a fresh call streams whole lines into them. */
    double *sw = aligned_alloc(64, (nw * sizeof *sw + 63) / 64 * 64);
    double *sb = aligned_alloc(64, ((size_t)out * sizeof *sb + 63) / 64 * 64);
    assert_true(pw && pb && want_w && want_b && sw && sb);
    uint32_t max_w = 0, max_b = 0;
    for (int s = 0; s < slices; s++) {
        herd_exact_wgrad j = {.rows = slice, .slice = slice, .in = in, .out = out,
                              .dy = dy + (size_t)s * slice * out, .x = x + (size_t)s * slice * in,
                              .w = {.plain = pw}, .b = {.plain = pb}};
        herd_cpu_exact_force_generic(s % 2 == 1); /* the two alike: checked below */
        assert_herd_ok(herd_cpu_exact_linear_wgrad(&j));
        for (size_t i = 0; i < nw; i++)
            want_w[i] += rint((double)pw[i] * scale);
        for (int o = 0; o < out; o++)
            want_b[o] += rint((double)pb[o] * scale);
        max_w = j.w.max_bits > max_w ? j.w.max_bits : max_w;
        max_b = j.b.max_bits > max_b ? j.b.max_bits : max_b;
        /* The slice's values against double sums of its rows. */
        for (int o = 0; o < out; o++)
            for (int i = 0; i < in; i += 7) {
                double v = 0, mag = 0;
                for (int r = 0; r < slice; r++) {
                    double p = (double)j.dy[(size_t)r * out + o] * j.x[(size_t)r * in + i];
                    v += p, mag += fabs(p);
                }
                assert_true(fabs(pw[(size_t)o * in + i] - v) <= 1e-6 * mag);
            }
    }
    for (int run = 0; run < 4; run++) {
        bool generic = run % 2, fresh = run / 2;
        for (size_t i = 0; i < nw; i++)
            sw[i] = fresh ? 12345.0 + (double)i : 0.0;
        for (int o = 0; o < out; o++)
            sb[o] = fresh ? -777.0 : 0.0;
        herd_exact_wgrad j = {.rows = rows, .slice = slice, .in = in, .out = out, .dy = dy, .x = x,
                              .w = {.sums = sw, .grid = true, .scale = scale},
                              .b = {.sums = sb, .grid = true, .scale = scale}, .fresh = fresh};
        herd_cpu_exact_force_generic(generic);
        assert_herd_ok(herd_cpu_exact_linear_wgrad(&j));
        herd_cpu_exact_force_generic(false);
        assert_int_equal(j.w.max_bits, max_w);
        assert_int_equal(j.b.max_bits, max_b);
        assert_memory_equal(sw, want_w, nw * sizeof *sw);
        assert_memory_equal(sb, want_b, (size_t)out * sizeof *sb);
    }
    free(x), free(dy), free(pw), free(pb), free(want_w), free(want_b), free(sw), free(sb);
}

static void wgrad_case(int slices, int slice, int in, int out, double scale)
{
    wgrad_case_of(slices, slice, in, out, scale, false);
}

static void wgrad_slices(void **state)
{
    (void)state;
    wgrad_case(1, 8, 17, 5, 0x1p24);
    wgrad_case(3, 8, 64, 10, 0x1p20);
    wgrad_case(4, 4, 33, 31, 0x1p30);
    wgrad_case(2, 3, 100, 4, 0x1p10);
    wgrad_case(5, 8, 784, 36, 0x1p26);
    wgrad_case(20, 8, 50, 6, 0x1p22); /* 160 rows: two chunks, the second added to the first */
    wgrad_case(2, 8, 40, 6, 0x1p140); /* a scale fp32 cannot hold: the portable path */
    wgrad_case(300, 1, 20, 5, 0x1p20); /* 300 slices of a row: two chunks */
    /* Slice values halfway between two points of the grid: ties go to even, as rint's. */
    wgrad_case_of(6, 4, 37, 9, 0x1p-1, true);
    wgrad_case_of(6, 4, 37, 9, 0x1p-3, true);
}

/* The maximum only (a step without a grid yet), and a slice that is not finite. */
static void wgrad_max_only_and_nan(void **state)
{
    (void)state;
    enum { SLICE = 8, IN = 20, OUT = 6 };
    float *x = values(SLICE * IN, 21), *dy = values(SLICE * OUT, 22);
    double sums[OUT * IN] = {0}, bsums[OUT] = {0};
    herd_exact_wgrad j = {.rows = SLICE, .slice = SLICE, .in = IN, .out = OUT, .dy = dy, .x = x,
                          .w = {.sums = sums}, .b = {.sums = bsums}};
    assert_herd_ok(herd_cpu_exact_linear_wgrad(&j));
    assert_true(j.w.max_bits > 0 && j.w.max_bits < 0x7f800000u);
    for (int i = 0; i < OUT * IN; i++)
        assert_true(sums[i] == 0.0);
    x[3] = NAN;
    j.w.max_bits = j.b.max_bits = 0;
    assert_herd_ok(herd_cpu_exact_linear_wgrad(&j));
    assert_true(j.w.max_bits > 0x7f800000u);
    /* Refused: rows that are not whole slices, plain values of several slices. */
    j.rows = 12;
    assert_int_equal(herd_cpu_exact_linear_wgrad(&j), HERD_ERR_INVALID_ARG);
    float plain[OUT * IN];
    j.rows = 16, j.w = (herd_exact_grad_out){.plain = plain};
    assert_int_equal(herd_cpu_exact_linear_wgrad(&j), HERD_ERR_INVALID_ARG);
    free(x), free(dy);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(fwd_bwd_match_generic),
        cmocka_unit_test(wgrad_slices),
        cmocka_unit_test(wgrad_max_only_and_nan),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
