/* Model files: the zoo builds with the documented sizes; bad files get clear errors. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/model.h"
#include "testutil.h"

static void test_zoo_sizes(void **state)
{
    (void)state;
    static const struct { const char *name; size_t params; } zoo[] = {
        {"mlp", 669706}, {"lenet5", 61706}, {"resnet20", 272186},
    };
    for (size_t i = 0; i < sizeof zoo / sizeof zoo[0]; i++) {
        herd_model *m;
        assert_herd_ok(herd_model_create_shape(zoo[i].name, 1, 28, 28, 10, &m));
        assert_int_equal(herd_model_param_count(m), zoo[i].params);
        assert_true(herd_model_flops_per_sample(m) > 0);
        herd_model_free(m);
    }
    /* resnet20 also takes CIFAR-shaped input. */
    herd_model *m;
    assert_herd_ok(herd_model_create_shape("resnet20", 3, 32, 32, 10, &m));
    assert_int_equal(herd_model_param_count(m), 272186 + 2 * 16 * 9);
    const char *name;
    int ndim;
    int64_t shape[4];
    assert_herd_ok(herd_model_tensor_info(m, 0, &name, &ndim, shape, NULL));
    assert_string_equal(name, "conv1.weight");
    assert_int_equal(ndim, 4);
    assert_int_equal(shape[1], 3);
    herd_model_free(m);
}

static void expect_error(const char *text, const char *needle)
{
    herd_layer_spec *specs = NULL;
    int n = 0;
    herd_status st = herd_model_parse_text(text, "bad.json", 10, &specs, &n);
    herd_model *m = NULL;
    if (st == HERD_OK) {
        /* Some mistakes only show once shapes are known. */
        m = calloc(1, sizeof *m);
        m->in_c = 1, m->in_h = 8, m->in_w = 8, m->classes = 10;
        st = herd_model_build(m, specs, n, 0);
        herd_model_free(m);
    }
    free(specs);
    assert_int_not_equal(st, HERD_OK);
    if (!strstr(herd_last_error(), needle))
        fail_msg("expected '%s' in: %s", needle, herd_last_error());
}

static void test_errors(void **state)
{
    (void)state;
    expect_error("{\"layers\": [", "bad.json:1:");
    expect_error("{\n  \"layers\": [\n  {\"type\": \"conv\"}]}", "unknown type 'conv'");
    expect_error("{\"layers\": [{\"type\": \"relu\", \"kernal\": 3}]}", "unknown key \"kernal\"");
    expect_error("{\"layers\": [{\"type\": \"relu\", \"input\": \"nope\"}]}", "'nope'");
    expect_error("{\"layers\": [{\"type\": \"relu\", \"name\": \"a\"}, {\"type\": \"relu\", \"name\": \"a\"}]}",
                 "used twice");
    expect_error("{\"layers\": []}", "non-empty \"layers\"");
    expect_error("{\"layers\": [{\"type\": \"linear\", \"out\": 10}]}", "flatten");
    expect_error("{\"layers\": [{\"type\": \"flatten\"}, {\"type\": \"linear\", \"out\": 7}]}", "classes");
    expect_error("{\"layers\": [{\"type\": \"conv2d\", \"name\": \"c\", \"out\": 2, \"kernel\": 3},"
                 "{\"type\": \"add\", \"inputs\": [\"c\", \"input\"]}, {\"type\": \"flatten\"},"
                 "{\"type\": \"linear\", \"out\": \"classes\"}]}",
                 "same shape");
    expect_error("{\"layers\": [{\"type\": \"conv2d\", \"out\": 2, \"kernel\": 30}, {\"type\": \"flatten\"},"
                 "{\"type\": \"linear\", \"out\": \"classes\"}]}",
                 "conv2d");
    expect_error("{\"layers\": [{\"type\": \"conv2d\", \"out\": -2, \"kernel\": 3}]}", "\"out\"");
    /* Comments are allowed and do not shift error positions. */
    expect_error("// a comment\n/* block\n comment */ {\"layers\": [\n{\"type\": }", "bad.json:4:");
}

/* Mistakes a lenient parser used to accept: trailing text, keys of another type, sizes
 * whose product overflowed int. */
static void test_strict(void **state)
{
    (void)state;
    const char *good = "{\"layers\": [{\"type\": \"flatten\"}, {\"type\": \"linear\", \"out\": \"classes\"}]}";
    char text[512];
    snprintf(text, sizeof text, "%s\n  }", good);
    expect_error(text, "bad.json:2:3: text after the end of the model's JSON object (starting '}')");
    snprintf(text, sizeof text, "%s {\"layers\": []}", good);
    expect_error(text, "bad.json:1:");
    /* Comments and blank lines after the object are fine. */
    snprintf(text, sizeof text, "%s\n// the end\n/* really */\n\n", good);
    herd_layer_spec *specs = NULL;
    int n = 0;
    assert_herd_ok(herd_model_parse_text(text, "good.json", 10, &specs, &n));
    assert_int_equal(n, 2);
    free(specs);
    /* "linear" mistyped as "relu" used to become a relu, dropping the layer's "out". */
    expect_error("{\"layers\": [{\"type\": \"flatten\"}, {\"type\": \"relu\", \"name\": \"fc\", \"out\": 10}]}",
                 "bad.json: layer 1 'fc' (relu): key \"out\" does not apply to a relu layer (it takes "
                 "no other keys besides type, name and input)");
    expect_error("{\"layers\": [{\"type\": \"maxpool\", \"kernel\": 2, \"bias\": false}]}",
                 "layer 0 'maxpool0' (maxpool): key \"bias\" does not apply to a maxpool layer (it "
                 "takes \"kernel\", \"stride\", \"pad\" besides");
    expect_error("{\"layers\": [{\"type\": \"dropout\", \"eps\": 0.1}]}", "key \"eps\" does not apply");
    expect_error("{\"layers\": [{\"type\": \"relu\", \"kernal\": 3}]}",
                 "layer 0 'relu0' (relu): unknown key \"kernal\"");
    expect_error("{\"layers\": [{\"type\": \"linear\", \"out\": 10, \"out\": 20}]}",
                 "layer 0 'linear0' (linear): key \"out\" is given twice");
    expect_error("{\"name\": \"x\", \"layer\": [], \"layers\": [{\"type\": \"relu\"}]}",
                 "unknown top-level key \"layer\"");
    expect_error("[1, 2]", "a model file is a JSON object");
    snprintf(text, sizeof text, "{\"layers\": [{\"type\": \"relu\"}], %s", good + 1);
    expect_error(text, "bad.json: top-level key \"layers\" is given twice");
    /* Out-of-range numbers are refused before any conversion to int. */
    expect_error("{\"layers\": [{\"type\": \"linear\", \"out\": 1e300}]}", "\"out\" must be an integer");
    expect_error("{\"layers\": [{\"type\": \"linear\", \"out\": 3000000000}]}", "\"out\" must be an integer");
    /* The value refused is echoed, as the file wrote it. */
    expect_error("{\"layers\": [{\"type\": \"linear\", \"out\": 1e30}]}", "in [1, 1048576], got 1e+30");
    expect_error("{\"layers\": [{\"type\": \"linear\", \"out\": \"10\"}]}", "got the string \"10\"");
    expect_error("{\"layers\": [{\"type\": \"dropout\", \"p\": true}]}", "got a boolean");
    /* A block comment that never ends would swallow what follows it unread. */
    snprintf(text, sizeof text, "%s\n  /* never closed", good);
    expect_error(text, "bad.json:2:3: a comment ('/*') that never ends");
    expect_error("{\"layers\": [/*/ {\"type\": \"relu\"}]}", "bad.json:1:13: a comment");
    /* C x H x W past int: once "out of memory allocating 18446743850872302712 bytes". */
    expect_error("{\"layers\": [{\"type\": \"conv2d\", \"name\": \"big\", \"out\": 1048576, \"kernel\": 1, "
                 "\"pad\": 1024}, {\"type\": \"flatten\"}, {\"type\": \"linear\", \"out\": \"classes\"}]}",
                 "layer 'big' (conv2d): its output would be 1048576 x 2056 x 2056 elements, over herd's "
                 "limit of 1073741824 per tensor");
    expect_error("{\"layers\": [{\"type\": \"conv2d\", \"out\": 64, \"kernel\": 1, \"pad\": 1024},"
                 "{\"type\": \"flatten\", \"name\": \"flat\"}, {\"type\": \"linear\", \"name\": \"fc\", \"out\": 1048576},"
                 "{\"type\": \"linear\", \"out\": \"classes\"}]}",
                 "layer 'fc' (linear): its weight would be 1048576 x 270536704 elements");
    expect_error("{\"layers\": [{\"type\": \"conv2d\", \"name\": \"wide\", \"out\": 1048576, \"kernel\": 1024, "
                 "\"pad\": 1000}]}",
                 "layer 'wide' (conv2d): its weight would be 1048576 x 1 x 1024 x 1024 elements");
    herd_model *m = NULL;
    assert_int_equal(herd_model_create_shape("mlp", 65536, 65536, 65536, 10, &m), HERD_ERR_INVALID_ARG);
    assert_non_null(strstr(herd_last_error(), "at most 1073741824 values per sample"));
}

static void test_model_file_on_disk(void **state)
{
    (void)state;
    char *dir = tu_tempdir();
    const char *text = "// tiny\n{\"name\": \"tiny\", \"layers\": [{\"type\": \"flatten\"},"
                       "{\"type\": \"linear\", \"name\": \"fc\", \"out\": \"classes\"}]}";
    char *path = tu_write_file(dir, "tiny.json", text, strlen(text));
    herd_model *m;
    assert_herd_ok(herd_model_create_shape(path, 1, 4, 4, 3, &m));
    assert_string_equal(herd_model_name(m), "tiny");
    assert_int_equal(herd_model_param_count(m), 16 * 3 + 3);
    herd_model_free(m);
    assert_int_equal(herd_model_create_shape("/nonexistent/model.json", 1, 4, 4, 3, &m), HERD_ERR_IO);
    assert_non_null(strstr(herd_last_error(), "/nonexistent/model.json"));
    /* Text hidden after a NUL byte: refused, naming its offset, not ignored. */
    char *nul = tu_write_file(dir, "nul.json", text, strlen(text) + 1);
    assert_int_equal(herd_model_create_shape(nul, 1, 4, 4, 3, &m), HERD_ERR_FORMAT);
    assert_non_null(strstr(herd_last_error(), "holds a NUL byte at offset 108"));
    free(nul);
    free(path);
    tu_rmtree(dir);
    free(dir);
}

/* The standard deviation of a tensor's values about 0, and whether all are 0. */
static double rms(const float *x, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += (double)x[i] * x[i];
    return sqrt(s / (double)n);
}

/* GPT-2's initialisation from "init_std" / "proj_init_std", and gpt2's size. */
static void test_gpt_init(void **state)
{
    (void)state;
    herd_model *m;
    int context, vocab;
    assert_herd_ok(herd_model_token_shape("gpt2", &context, &vocab));
    assert_int_equal(context, 1024);
    assert_int_equal(vocab, 50257);
    assert_herd_ok(herd_model_create_shape_plan("gpt2", 1, context, 1, vocab, &m));
    assert_int_equal(herd_model_param_count(m), 124439808); /* GPT-2 small, tied head */
    double per_token = herd_model_flops_per_sample(m) / context;
    assert_true(per_token > 2.6e8 && per_token < 2.7e8); /* ~2 x params + attention */
    herd_model_free(m);

    char *dir = tu_tempdir();
    const char *text =
        "{\"layers\": [{\"type\": \"embedding\", \"name\": \"embed\", \"vocab\": 64, "
        "\"context\": 16, \"out\": 256},"
        "{\"type\": \"attention\", \"name\": \"attn\", \"heads\": 4, \"init_std\": 0.02, "
        "\"proj_init_std\": 0.005},"
        "{\"type\": \"linear\", \"name\": \"fc\", \"out\": 512, \"per_position\": true, "
        "\"init_std\": 0.01},"
        "{\"type\": \"linear\", \"name\": \"back\", \"out\": 256, \"per_position\": true},"
        "{\"type\": \"lm_head\", \"name\": \"head\", \"tie\": \"embed\"}]}";
    char *path = tu_write_file(dir, "gptish.json", text, strlen(text));
    assert_herd_ok(herd_model_create_shape(path, 1, 16, 1, 64, &m));
    static const struct { const char *name; double std; } want[] = {
        {"embed.wte", 0.02}, {"attn.qkv.weight", 0.02}, {"attn.qkv.bias", 0},
        {"attn.proj.weight", 0.005}, {"attn.proj.bias", 0}, {"fc.weight", 0.01}, {"fc.bias", 0},
    };
    size_t found = 0;
    for (size_t i = 0; i < herd_model_tensor_count(m); i++) {
        const char *name;
        int ndim;
        int64_t shape[4];
        float *data;
        assert_herd_ok(herd_model_tensor_info(m, i, &name, &ndim, shape, &data));
        size_t n = 1;
        for (int d = 0; d < ndim; d++)
            n *= (size_t)shape[d];
        double got = rms(data, n);
        if (strcmp(name, "back.weight") == 0) /* no init_std: PyTorch's U(+-1/sqrt(512)) */
            assert_true(fabs(got - 1.0 / sqrt(3.0 * 512)) < 0.05 / sqrt(3.0 * 512));
        for (size_t k = 0; k < sizeof want / sizeof want[0]; k++) {
            if (strcmp(name, want[k].name) != 0)
                continue;
            found++;
            printf("  %-18s rms %.5f (want %.5f)\n", name, got, want[k].std);
            if (want[k].std == 0)
                assert_true(got == 0);
            else /* 16k values or more: the sample's rms is within 3% */
                assert_true(fabs(got / want[k].std - 1) < 0.03);
        }
    }
    assert_int_equal(found, sizeof want / sizeof want[0]);
    herd_model_free(m);
    expect_error("{\"layers\": [{\"type\": \"linear\", \"out\": 4, \"init_std\": -1}]}",
                 "\"init_std\" must be a number in");
    expect_error("{\"layers\": [{\"type\": \"gelu\", \"init_std\": 0.02}]}",
                 "key \"init_std\" does not apply to a gelu layer");
    free(path);
    tu_rmtree(dir);
    free(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_zoo_sizes),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_strict),
        cmocka_unit_test(test_model_file_on_disk),
        cmocka_unit_test(test_gpt_init),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
