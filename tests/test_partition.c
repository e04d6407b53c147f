/* Pipeline partitioning: valid cuts, the balanced split against brute force,
 * --stage-split's errors, measured costs. */
#include <float.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/partition.h"
#include "testutil.h"

static herd_model *plan(const char *name, int c, int hw)
{
    herd_layer_spec *specs;
    int n;
    herd_model *m = calloc(1, sizeof *m);
    assert_int_equal(herd_model_parse(name, 10, &specs, &n, m->name, sizeof m->name), HERD_OK);
    m->in_c = c, m->in_h = hw, m->in_w = hw, m->classes = 10;
    assert_int_equal(herd_model_plan(m, specs, n), HERD_OK);
    free(specs);
    return m;
}

static int find(const herd_model *m, const char *name)
{
    for (int i = 0; i < m->n_layers; i++)
        if (strcmp(m->layers[i].spec.name, name) == 0)
            return i;
    fail_msg("no layer %s", name);
    return -1;
}

static void test_valid_cuts(void **state)
{
    (void)state;
    herd_model *mlp = plan("mlp", 1, 28);
    for (int b = 1; b < mlp->n_layers; b++)
        assert_true(herd_partition_can_cut(mlp, b));
    assert_false(herd_partition_can_cut(mlp, 0));
    herd_model_free(mlp);
    herd_model *r = plan("resnet20", 3, 32);
    assert_true(herd_partition_can_cut(r, find(r, "layer1.1.conv1")));  /* between blocks */
    assert_false(herd_partition_can_cut(r, find(r, "layer1.0.conv2"))); /* the shortcut crosses */
    assert_false(herd_partition_can_cut(r, find(r, "layer1.0.bn1")));
    herd_model_free(r);
}

/* The slowest stage of every split into `stages`, by brute force over the cuts. */
static double brute(const herd_model *m, const double *cost, int stages, int from, int k)
{
    if (k == stages - 1) {
        double s = 0;
        for (int i = from; i < m->n_layers; i++)
            s += cost[i];
        return s;
    }
    double best = DBL_MAX, mine = 0;
    for (int b = from + 1; b < m->n_layers; b++) {
        mine += cost[b - 1];
        if (!herd_partition_can_cut(m, b))
            continue;
        double rest = brute(m, cost, stages, b, k + 1);
        double worst = rest > mine ? rest : mine;
        if (worst < best)
            best = worst;
    }
    return best;
}

static void test_balance_is_optimal(void **state)
{
    (void)state;
    herd_model *r = plan("resnet20", 3, 32);
    double *cost = malloc((size_t)r->n_layers * sizeof *cost);
    uint64_t seed = 7;
    for (int trial = 0; trial < 20; trial++) {
        for (int i = 0; i < r->n_layers; i++) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            cost[i] = (double)(seed >> 40) / (double)(1 << 24) + (trial % 2 ? 0 : 1e-3);
        }
        for (int stages = 2; stages <= 4; stages++) {
            int bounds[5];
            assert_int_equal(herd_partition_balance(r, cost, stages, bounds), HERD_OK);
            assert_int_equal(bounds[0], 0);
            assert_int_equal(bounds[stages], r->n_layers);
            double worst = 0;
            for (int s = 0; s < stages; s++) {
                assert_true(bounds[s] < bounds[s + 1]);
                if (s > 0)
                    assert_true(herd_partition_can_cut(r, bounds[s]));
                double sum = 0;
                for (int i = bounds[s]; i < bounds[s + 1]; i++)
                    sum += cost[i];
                worst = sum > worst ? sum : worst;
            }
            double want = brute(r, cost, stages, 0, 0);
            if (worst > want * (1 + 1e-12))
                fail_msg("trial %d, %d stages: slowest stage %.9g, the best split has %.9g", trial,
                         stages, worst, want);
        }
    }
    int bounds[65];
    assert_int_equal(herd_partition_balance(r, cost, 40, bounds), HERD_ERR_INVALID_ARG);
    assert_non_null(strstr(herd_last_error(), "at most"));
    free(cost);
    herd_model_free(r);
}

static void expect_parse_error(const herd_model *m, const char *split, int stages, const char *want)
{
    int bounds[8];
    assert_int_equal(herd_partition_parse(m, split, stages, bounds), HERD_ERR_INVALID_ARG);
    if (!strstr(herd_last_error(), want))
        fail_msg("--stage-split '%s': '%s' lacks '%s'", split, herd_last_error(), want);
}

static void test_parse(void **state)
{
    (void)state;
    herd_model *r = plan("resnet20", 3, 32);
    int bounds[4];
    assert_int_equal(herd_partition_parse(r, "layer2.0.conv1,layer3.0.conv1", 3, bounds), HERD_OK);
    assert_int_equal(bounds[1], find(r, "layer2.0.conv1"));
    assert_int_equal(bounds[2], find(r, "layer3.0.conv1"));
    assert_int_equal(bounds[3], r->n_layers);
    expect_parse_error(r, "nosuch", 2, "has no layer 'nosuch'");
    expect_parse_error(r, "layer1.0.conv2", 2, "layer 'add8' reads 'relu1'");
    expect_parse_error(r, "layer2.0.conv1", 3, "needs 2 names, got 1");
    expect_parse_error(r, "layer2.0.conv1,layer3.0.conv1", 2, "needs 1 name, got more");
    expect_parse_error(r, "layer3.0.conv1,layer2.0.conv1", 3, "does not come after");
    expect_parse_error(r, "layer2.0.conv1,layer2.0.conv1", 3, "does not come after");
    expect_parse_error(r, "layer2.0.conv1,", 3, "ends with a comma");
    expect_parse_error(r, ",layer2.0.conv1", 3, "empty layer name at position 1");
    expect_parse_error(r, "conv1", 2, "is the first layer");
    herd_model_free(r);
}

/* Between a column-parallel linear and the row-parallel one that sums its parts a stage
 * never begins (its input would be a part), with or without --tensor-parallel. */
static void test_tensor_parts_stay(void **state)
{
    (void)state;
    const char *text =
        "{\"name\": \"pair\", \"layers\": [{\"type\": \"flatten\"},"
        "{\"type\": \"linear\", \"name\": \"fc1\", \"out\": 8, \"parallel\": \"column\"},"
        "{\"type\": \"relu\", \"name\": \"act\"},"
        "{\"type\": \"linear\", \"name\": \"fc2\", \"out\": 8, \"parallel\": \"row\"},"
        "{\"type\": \"relu\", \"name\": \"act2\"},"
        "{\"type\": \"linear\", \"name\": \"fc3\", \"out\": 4}]}";
    herd_layer_spec *specs;
    int n;
    herd_model *m = calloc(1, sizeof *m);
    assert_int_equal(herd_model_parse_text(text, "pair.json", 4, &specs, &n), HERD_OK);
    m->in_c = 1, m->in_h = 4, m->in_w = 4, m->classes = 4;
    assert_int_equal(herd_model_plan(m, specs, n), HERD_OK);
    free(specs);
    assert_true(herd_partition_can_cut(m, find(m, "fc1")));
    assert_false(herd_partition_can_cut(m, find(m, "act")));
    assert_false(herd_partition_can_cut(m, find(m, "fc2")));
    assert_true(herd_partition_can_cut(m, find(m, "act2")));
    double cost[6] = {0, 1, 1, 1, 0, 1};
    int bounds[3];
    assert_int_equal(herd_partition_balance(m, cost, 2, bounds), HERD_OK);
    assert_true(bounds[1] == find(m, "fc1") || bounds[1] >= find(m, "act2"));
    expect_parse_error(m, "fc2", 2, "'act' gives one tensor part of a column-parallel layer");
    herd_model_free(m);
}

static void test_costs_and_describe(void **state)
{
    (void)state;
    herd_model *m = plan("lenet5", 1, 28);
    double cost[64], flops[64];
    assert_int_equal(herd_partition_layer_costs(m, 4, true, cost), HERD_OK);
    assert_int_equal(herd_partition_layer_costs(m, 4, false, flops), HERD_OK);
    for (int i = 0; i < m->n_layers; i++)
        assert_true(cost[i] > 0 && cost[i] < 1);
    assert_true(flops[0] > 0);
    int bounds[3];
    assert_int_equal(herd_partition_balance(m, cost, 2, bounds), HERD_OK);
    herd_stage_info info[2];
    herd_partition_info(m, cost, bounds, 2, info);
    assert_int_equal(info[0].params + info[1].params, m->n_param_floats);
    assert_true(info[0].boundary_bytes > 0 && info[1].boundary_bytes == 0);
    char text[1024];
    herd_partition_describe(m, cost, bounds, 2, 16, text, sizeof text);
    assert_non_null(strstr(text, "stage 0: layers conv1.."));
    assert_non_null(strstr(text, "\nstage 1: layers "));
    herd_model_free(m);
    /* Measuring resnet50 allocates one layer at a time: a plan of 25 M parameters whose
     * layers are timed alone at a small batch. */
    herd_model *big = plan("resnet50", 3, 64);
    double *c = malloc((size_t)big->n_layers * sizeof *c);
    assert_int_equal(herd_partition_layer_costs(big, 1, true, c), HERD_OK);
    assert_null(big->params);
    free(c);
    herd_model_free(big);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid_cuts),
        cmocka_unit_test(test_tensor_parts_stay),
        cmocka_unit_test(test_balance_is_optimal),
        cmocka_unit_test(test_parse),
        cmocka_unit_test(test_costs_and_describe),
    };
    return tu_run(tests, NULL, NULL);
}
