/* herd plot: PNGs of the requested size for both modes, decoded (zlib) to check
 * that the curves and bars are drawn in their colours; bad inputs are refused. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "testutil.h"

typedef struct image {
    uint32_t width, height;
    int channels; /* 3 (RGB) or 4 (RGBA) */
    uint8_t *pixels;
} image;

static uint32_t be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static int paeth(int a, int b, int c)
{
    int p = a + b - c, pa = abs(p - a), pb = abs(p - b), pc = abs(p - c);
    return pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
}

/* Decodes an 8-bit RGB/RGBA, non-interlaced PNG (what cairo writes). */
static image read_png(const char *path)
{
    size_t len;
    uint8_t *buf = (uint8_t *)tu_read_file(path, &len);
    assert_memory_equal(buf, "\x89PNG\r\n\x1a\n", 8);
    assert_memory_equal(buf + 12, "IHDR", 4);
    image im = {.width = be32(buf + 16), .height = be32(buf + 20)};
    assert_int_equal(buf[24], 8);                   /* bit depth */
    assert_true(buf[25] == 2 || buf[25] == 6);      /* RGB or RGBA */
    assert_int_equal(buf[28], 0);                   /* not interlaced */
    im.channels = buf[25] == 6 ? 4 : 3;
    uint8_t *idat = malloc(len);
    size_t idat_len = 0;
    for (size_t off = 8; off + 12 <= len;) {
        uint32_t n = be32(buf + off);
        if (memcmp(buf + off + 4, "IDAT", 4) == 0) {
            memcpy(idat + idat_len, buf + off + 8, n);
            idat_len += n;
        }
        off += 12 + n;
    }
    size_t stride = (size_t)im.width * (size_t)im.channels;
    uLongf raw_len = (uLongf)((stride + 1) * im.height);
    uint8_t *raw = malloc(raw_len);
    assert_int_equal(uncompress(raw, &raw_len, idat, idat_len), Z_OK);
    assert_int_equal(raw_len, (stride + 1) * im.height);
    im.pixels = malloc(stride * im.height);
    for (uint32_t y = 0; y < im.height; y++) {
        const uint8_t *in = raw + y * (stride + 1) + 1;
        uint8_t *out = im.pixels + y * stride, *up = y ? out - stride : NULL;
        int filter = in[-1];
        for (size_t i = 0; i < stride; i++) {
            int a = i >= (size_t)im.channels ? out[i - (size_t)im.channels] : 0;
            int b = up ? up[i] : 0, c = up && i >= (size_t)im.channels ? up[i - (size_t)im.channels] : 0;
            int pred = filter == 0 ? 0 : filter == 1 ? a : filter == 2 ? b
                     : filter == 3 ? (a + b) / 2 : paeth(a, b, c);
            out[i] = (uint8_t)(in[i] + pred);
        }
    }
    free(raw);
    free(idat);
    free(buf);
    return im;
}

/* Pixels of exactly this colour. */
static long count_color(const image *im, uint8_t r, uint8_t g, uint8_t b)
{
    long n = 0;
    for (size_t i = 0; i < (size_t)im->width * im->height; i++) {
        const uint8_t *p = im->pixels + i * (size_t)im->channels;
        n += p[0] == r && p[1] == g && p[2] == b;
    }
    return n;
}

/* Dark pixels (text and axes, anti-aliased). */
static long count_dark(const image *im)
{
    long n = 0;
    for (size_t i = 0; i < (size_t)im->width * im->height; i++) {
        const uint8_t *p = im->pixels + i * (size_t)im->channels;
        n += p[0] < 80 && p[1] < 80 && p[2] < 80;
    }
    return n;
}

static char *write_metrics(const char *dir)
{
    char text[8192] = "";
    size_t len = 0;
    for (int step = 10; step <= 200; step += 10) {
        double loss = 2.3 / step * 10;
        len += (size_t)snprintf(text + len, sizeof text - len,
                                "{\"kind\":\"step\",\"epoch\":%d,\"step\":%d,\"time_s\":%g,"
                                "\"train_loss\":%g,\"train_acc\":%g,\"lr\":0.05,"
                                "\"samples_per_s\":%d,\"step_ms\":5,\"data_wait_ms\":0.1,"
                                "\"forward_ms\":2,\"backward_ms\":2.5,\"comm_wait_ms\":0.1,"
                                "\"optimizer_ms\":0.3}\n",
                                1 + (step - 1) / 100, step, step * 0.01, loss, 1 - loss / 3,
                                9000 + step);
        if (step % 100 == 0)
            len += (size_t)snprintf(text + len, sizeof text - len,
                                    "{\"kind\":\"epoch\",\"epoch\":%d,\"step\":%d,\"time_s\":1,"
                                    "\"train_loss\":%g,\"train_acc\":0.9,\"lr\":0.05,"
                                    "\"samples_per_s\":9000,\"step_ms\":5,\"data_wait_ms\":0.1,"
                                    "\"forward_ms\":2,\"backward_ms\":2.5,\"comm_wait_ms\":0.1,"
                                    "\"optimizer_ms\":0.3,\"test_loss\":%g,\"test_acc\":0.88}\n",
                                    step / 100, step, loss, loss * 1.2);
    }
    return tu_write_file(dir, "metrics.jsonl", text, len);
}

static void test_metrics_plot(void **state)
{
    (void)state;
    char *dir = tu_tempdir();
    char *metrics = write_metrics(dir);
    char png[512];
    snprintf(png, sizeof png, "%s/curves.png", dir);
    assert_herd_ok(herd_plot_metrics(metrics, png, NULL, 640, 720));
    image im = read_png(png);
    assert_int_equal(im.width, 640);
    assert_int_equal(im.height, 720);
    /* White page, train curves in blue, test curves in orange, black axes and text. */
    long pixels = (long)im.width * im.height;
    assert_true(count_color(&im, 255, 255, 255) > pixels / 2);
    assert_true(count_color(&im, 31, 119, 180) > 100);
    assert_true(count_color(&im, 255, 127, 14) > 20);
    assert_true(count_dark(&im) > 1000);
    free(im.pixels);

    /* One panel; the default height is 300 per panel. */
    assert_herd_ok(herd_plot_metrics(metrics, png, "throughput", 0, 0));
    im = read_png(png);
    assert_int_equal(im.width, 1000);
    assert_int_equal(im.height, 300);
    assert_true(count_color(&im, 31, 119, 180) > 100);
    assert_int_equal(count_color(&im, 255, 127, 14), 0); /* no test curve on throughput */
    free(im.pixels);

    assert_int_equal(herd_plot_metrics(metrics, png, "loss,speed", 0, 0), HERD_ERR_INVALID_ARG);
    assert_non_null(strstr(herd_last_error(), "speed"));
    assert_int_equal(herd_plot_metrics(metrics, png, NULL, 50, 50), HERD_ERR_INVALID_ARG);
    char *bad = tu_write_file(dir, "bad.jsonl", "{\"step\":1}\nnot json\n", 20);
    assert_int_equal(herd_plot_metrics(bad, png, NULL, 0, 0), HERD_ERR_FORMAT);
    assert_non_null(strstr(herd_last_error(), "line 2"));
    const char *two = "{\"step\":1}{\"step\":2}\n";
    char *glued = tu_write_file(dir, "glued.jsonl", two, strlen(two));
    assert_int_equal(herd_plot_metrics(glued, png, NULL, 0, 0), HERD_ERR_FORMAT);
    assert_non_null(strstr(herd_last_error(), "line 1 is not a metrics record"));
    free(glued);
    char missing[512];
    snprintf(missing, sizeof missing, "%s/none.jsonl", dir);
    assert_int_equal(herd_plot_metrics(missing, png, NULL, 0, 0), HERD_ERR_IO);
    snprintf(missing, sizeof missing, "%s/no/such/dir/x.png", dir);
    assert_int_equal(herd_plot_metrics(metrics, missing, NULL, 0, 0), HERD_ERR_IO);
    free(bad);
    free(metrics);
    tu_rmtree(dir);
    free(dir);
}

static void test_timeline_plot(void **state)
{
    (void)state;
    char *dir = tu_tempdir();
    char png[512];
    snprintf(png, sizeof png, "%s/steps.png", dir);
    const char *trace = HERD_TEST_DIR "/fixtures/timeline_2ranks.json";
    assert_herd_ok(herd_plot_timeline(trace, png, 900, 400));
    image im = read_png(png);
    assert_int_equal(im.width, 900);
    assert_int_equal(im.height, 400);
    /* Bars are flat fills: every phase's colour covers an area; rank 1's exposed
     * communication (1.8 ms) is 4.5x rank 0's (0.4 ms), so red covers far more
     * than a legend box. */
    const uint8_t colors[6][3] = {{148, 103, 189}, {31, 119, 180}, {255, 127, 14},
                                  {214, 39, 40}, {44, 160, 44}, {170, 170, 170}};
    long area[6];
    for (int k = 0; k < 6; k++) {
        area[k] = count_color(&im, colors[k][0], colors[k][1], colors[k][2]);
        assert_true(area[k] > 100);
    }
    /* backward (5.0 + 5.4 ms) outweighs forward (3.0 + 3.2 ms) */
    assert_true(area[2] > area[1]);
    free(im.pixels);

    /* Default size: 240 + 45 per rank. */
    assert_herd_ok(herd_plot_timeline(trace, png, 0, 0));
    im = read_png(png);
    assert_int_equal(im.width, 1000);
    assert_int_equal(im.height, 240 + 2 * 45);
    free(im.pixels);

    char *no_steps = tu_write_file(dir, "t.json", "{\"traceEvents\":[]}", 18);
    assert_int_equal(herd_plot_timeline(no_steps, png, 0, 0), HERD_ERR_FORMAT);
    assert_non_null(strstr(herd_last_error(), "step"));
    char *not_trace = tu_write_file(dir, "u.json", "[1,", 3);
    assert_int_equal(herd_plot_timeline(not_trace, png, 0, 0), HERD_ERR_FORMAT);
    char *trailing = tu_write_file(dir, "v.json", "[] []", 5); /* a second trace appended */
    assert_int_equal(herd_plot_timeline(trailing, png, 0, 0), HERD_ERR_FORMAT);
    assert_non_null(strstr(herd_last_error(), "is not a Chrome trace"));
    free(trailing);
    free(no_steps);
    free(not_trace);
    tu_rmtree(dir);
    free(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_metrics_plot),
        cmocka_unit_test(test_timeline_plot),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
