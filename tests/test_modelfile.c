/* Model files: the zoo builds with the documented sizes; bad files get clear errors. */
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
    free(path);
    tu_rmtree(dir);
    free(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_zoo_sizes),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_model_file_on_disk),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
