/* herd_train_config_set (the training options by name, for the CLI and Python), --threads' default
 * (herd_rank_threads) and herd_dataset_from_memory (Python's Dataset.from_numpy). */
#include <dirent.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#include "data/dataset.h"
#include "train/step.h"

static void test_every_option_sets_its_field(void **state)
{
    (void)state;
    herd_train_config c;
    herd_train_config_default(&c);
    assert_herd_ok(herd_train_config_set(&c, "lr", "0.25"));
    assert_true(c.lr == 0.25f);
    assert_herd_ok(herd_train_config_set(&c, "--batch-size", "96"));
    assert_herd_ok(herd_train_config_set(&c, "batch_size", "64")); /* Python's spelling */
    assert_int_equal(c.batch_size, 64);
    assert_herd_ok(herd_train_config_set(&c, "optimizer", "adamw"));
    assert_int_equal(c.optimizer, HERD_OPT_ADAMW);
    assert_herd_ok(herd_train_config_set(&c, "schedule", "cosine"));
    assert_int_equal(c.schedule, HERD_SCHED_COSINE);
    assert_herd_ok(herd_train_config_set(&c, "milestones", "3,7,11"));
    assert_int_equal(c.n_milestones, 3);
    assert_int_equal(c.milestones[2], 11);
    assert_herd_ok(herd_train_config_set(&c, "seed", "2147483647"));
    assert_true(c.seed == 2147483647u);
    assert_herd_ok(herd_train_config_set(&c, "max_steps", "1099511627776"));
    assert_true(c.max_steps == 1099511627776L);
    assert_herd_ok(herd_train_config_set(&c, "bucket-mb", "0.5"));
    assert_true(c.bucket_mb == 0.5);
    assert_herd_ok(herd_train_config_set(&c, "compress", "bf16"));
    assert_int_equal(c.compress, HERD_COMPRESS_BF16);
    assert_herd_ok(herd_train_config_set(&c, "pp_schedule", "gpipe"));
    assert_int_equal(c.pp_schedule, HERD_PP_SCHEDULE_GPIPE);
    assert_herd_ok(herd_train_config_set(&c, "zero", "2"));
    assert_int_equal(c.zero_stage, 2);
    assert_herd_ok(herd_train_config_set(&c, "loss-scale", "dynamic"));
    assert_true(c.dynamic_loss_scale);
    assert_herd_ok(herd_train_config_set(&c, "on_nonfinite", "skip"));
    assert_true(c.skip_nonfinite);
    assert_herd_ok(herd_train_config_set(&c, "lr-scaling", "linear"));
    assert_true(c.lr_scaling);
    assert_herd_ok(herd_train_config_set(&c, "elastic-batch", "scale"));
    assert_int_equal(c.elastic_batch, HERD_ELASTIC_SCALE);
    const char *dir = "/tmp/ckpt";
    assert_herd_ok(herd_train_config_set(&c, "checkpoint_dir", dir));
    assert_ptr_equal(c.checkpoint_dir, dir); /* kept, not copied: documented */
    /* Switches: no value, true/1 and false/0. */
    assert_herd_ok(herd_train_config_set(&c, "sync-bn", NULL));
    assert_true(c.sync_bn);
    assert_herd_ok(herd_train_config_set(&c, "sync_bn", "false"));
    assert_false(c.sync_bn);
    assert_herd_ok(herd_train_config_set(&c, "deterministic", "1"));
    assert_true(c.deterministic);
}

static void test_bad_values_named(void **state)
{
    (void)state;
    herd_train_config c, before;
    herd_train_config_default(&c);
    before = c;
    tu_expect_error(herd_train_config_set(&c, "lr", "0"), HERD_ERR_INVALID_ARG,
                    "lr must be a number in [1e-12, 1000], got '0'", NULL);
    tu_expect_error(herd_train_config_set(&c, "lr", " 0.1"), HERD_ERR_INVALID_ARG, "got ' 0.1'", NULL);
    tu_expect_error(herd_train_config_set(&c, "epochs", "1e3"), HERD_ERR_INVALID_ARG,
                    "epochs must be an integer in [1, 100000], got '1e3'", NULL);
    tu_expect_error(herd_train_config_set(&c, "epochs", "0x10"), HERD_ERR_INVALID_ARG, "0x10", NULL);
    tu_expect_error(herd_train_config_set(&c, "--optimizer", "sgdw"), HERD_ERR_INVALID_ARG,
                    "--optimizer is sgd or adamw, got 'sgdw'", NULL);
    tu_expect_error(herd_train_config_set(&c, "schedule", "Cosine"), HERD_ERR_INVALID_ARG,
                    "schedule is constant, step or cosine", NULL);
    tu_expect_error(herd_train_config_set(&c, "milestones", "3,,5"), HERD_ERR_INVALID_ARG,
                    "milestones takes up to 8 epochs", "'3,,5'");
    tu_expect_error(herd_train_config_set(&c, "milestones", "1,2,3,4,5,6,7,8,9"), HERD_ERR_INVALID_ARG,
                    "up to 8", NULL);
    tu_expect_error(herd_train_config_set(&c, "zero", "3"), HERD_ERR_INVALID_ARG,
                    "zero 3 (sharding the parameters as well) is not offered", NULL);
    tu_expect_error(herd_train_config_set(&c, "sync_bn", "yes"), HERD_ERR_INVALID_ARG,
                    "sync_bn is a switch", "'yes'");
    tu_expect_error(herd_train_config_set(&c, "checkpoint-dir", ""), HERD_ERR_INVALID_ARG,
                    "checkpoint-dir needs a directory", NULL);
    tu_expect_error(herd_train_config_set(&c, "lr", NULL), HERD_ERR_INVALID_ARG, "lr needs a value", NULL);
    tu_expect_error(herd_train_config_set(&c, "model", "lenet5"), HERD_ERR_INVALID_ARG,
                    "unknown training option 'model'", NULL);
    tu_expect_error(herd_train_config_set(&c, "learning_rate", "0.1"), HERD_ERR_INVALID_ARG,
                    "unknown training option 'learning_rate'", NULL);
    /* A refusal is the user's input: no source line of herd in it, and nothing changed. */
    assert_null(strstr(herd_last_error(), ".c:"));
    assert_memory_equal(&c, &before, sizeof c);
}

/* Options that need others: refused by herd_train_config_check as herd_train refuses
 * them, in the user's words. */
static void test_combinations_checked(void **state)
{
    (void)state;
    herd_train_config c;
    herd_train_config_default(&c);
    assert_int_equal(herd_train_config_check(&c), HERD_OK);
    assert_int_equal(herd_train_config_set(&c, "resume", NULL), HERD_OK);
    tu_expect_error(herd_train_config_check(&c), HERD_ERR_INVALID_ARG, "--resume needs --checkpoint-dir", NULL);
    assert_null(strstr(herd_last_error(), ".c:"));
    herd_train_config_default(&c);
    assert_int_equal(herd_train_config_set(&c, "schedule", "step"), HERD_OK);
    tu_expect_error(herd_train_config_check(&c), HERD_ERR_INVALID_ARG, "--schedule step needs --milestones", NULL);
    assert_int_equal(herd_train_config_set(&c, "milestones", "3,5"), HERD_OK);
    assert_int_equal(herd_train_config_check(&c), HERD_OK);
    herd_train_config_default(&c);
    assert_int_equal(herd_train_config_set(&c, "batch-size", "10"), HERD_OK);
    assert_int_equal(herd_train_config_set(&c, "micro-batches", "3"), HERD_OK);
    tu_expect_error(herd_train_config_check(&c), HERD_ERR_INVALID_ARG,
                    "--batch-size 10 does not divide into --micro-batches 3", NULL);
    /* A library caller's compression outside herd_compress (the CLI's names cannot give one). */
    herd_train_config_default(&c);
    c.compress = (herd_compress)3;
    tu_expect_error(herd_train_config_check(&c), HERD_ERR_INVALID_ARG,
                    "compress is 0 (none), 1 (fp16) or 2 (bf16)", NULL);
}

/* Every option is one herd train takes, listed in its --help. */
static void test_names_are_the_cli_flags(void **state)
{
    (void)state;
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s train --help", HERD_BINARY);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    static char help[65536];
    size_t len = fread(help, 1, sizeof help - 1, p);
    help[len] = '\0';
    assert_int_equal(pclose(p), 0);
    bool takes_value;
    const char *name;
    size_t n = 0;
    for (size_t i = 0; (name = herd_train_option_name(i, &takes_value)); i++, n++) {
        char flag[80];
        snprintf(flag, sizeof flag, "--%s ", name);
        if (!strstr(help, flag))
            fail_msg("training option %s is not in herd train --help", flag);
        herd_train_config c;
        herd_train_config_default(&c);
        /* A switch takes no value; every other option refuses none. */
        assert_int_equal(herd_train_config_set(&c, name, NULL) == HERD_OK, !takes_value);
    }
    assert_true(n >= 40);
}

static void test_dataset_from_memory(void **state)
{
    (void)state;
    enum { N = 6, C = 1, H = 4, W = 3 };
    uint8_t images[N * C * H * W];
    int32_t labels[N];
    for (int i = 0; i < N * C * H * W; i++)
        images[i] = (uint8_t)(i * 37 % 256);
    for (int i = 0; i < N; i++)
        labels[i] = i % 3;
    herd_dataset *ds = NULL;
    assert_herd_ok(herd_dataset_from_memory(images, labels, N, C, H, W, 3, NULL, NULL, &ds));
    assert_int_equal(herd_dataset_size(ds), N);
    int c, h, w, classes;
    herd_dataset_shape(ds, &c, &h, &w, &classes);
    assert_true(c == C && h == H && w == W && classes == 3);
    float mean[3], std[3], want_mean[3], want_std[3];
    herd_dataset_normalization(ds, mean, std);
    herd_pixel_stats(images, N, C, H * W, want_mean, want_std);
    assert_true(mean[0] == want_mean[0] && std[0] == want_std[0]);
    assert_true(mean[1] == 0.0f && std[1] == 1.0f);
    /* Copied: the caller's arrays may change afterwards. */
    uint64_t hash = herd_dataset_content_hash(ds);
    images[0] ^= 1;
    assert_true(herd_dataset_content_hash(ds) == hash);
    herd_dataset *other = NULL;
    float given_mean[1] = {0.5f}, given_std[1] = {0.25f};
    assert_herd_ok(herd_dataset_from_memory(images, labels, N, C, H, W, 3, given_mean, given_std, &other));
    assert_true(herd_dataset_content_hash(other) != hash); /* one pixel differs */
    herd_dataset_normalization(other, mean, std);
    assert_true(mean[0] == 0.5f && std[0] == 0.25f);
    herd_dataset_free(other);
    herd_dataset_free(ds);

    labels[4] = 3;
    tu_expect_error(herd_dataset_from_memory(images, labels, N, C, H, W, 3, NULL, NULL, &ds),
                    HERD_ERR_INVALID_ARG, "label 4 is 3, outside 0..2", NULL);
    assert_null(ds);
    labels[4] = 1;
    tu_expect_error(herd_dataset_from_memory(images, labels, N, 4, H, W, 3, NULL, NULL, &ds),
                    HERD_ERR_INVALID_ARG, "1 to 3 channels", "4 x 4 x 3");
    tu_expect_error(herd_dataset_from_memory(images, labels, N, C, H, W, 1, NULL, NULL, &ds),
                    HERD_ERR_INVALID_ARG, "classes must be in 2..65536", NULL);
    tu_expect_error(herd_dataset_from_memory(images, labels, N, C, H, W, 3, given_mean, NULL, &ds),
                    HERD_ERR_INVALID_ARG, "both mean and std", NULL);
    given_std[0] = 0;
    tu_expect_error(herd_dataset_from_memory(images, labels, N, C, H, W, 3, given_mean, given_std, &ds),
                    HERD_ERR_INVALID_ARG, "std must be > 0", NULL);
}

static int threads_now(void)
{
    DIR *d = opendir("/proc/self/task");
    assert_non_null(d);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

/* herd_device_set_threads before the model: building and initialising one then runs on
 * the threads asked for (--threads 1 started a team of every core first, whose spinning
 * workers took a core from the rank beside it). Run first, before any team exists. */
/* herd_train_elastic_keeps, which herd run asks before a restart: the global batch of the
 * first ranks, in whole micro-batches no larger than the given one, on the new ranks. */
static void test_elastic_keeps(void **state)
{
    (void)state;
    herd_train_config c;
    herd_train_config_default(&c);
    assert_herd_ok(herd_train_config_set(&c, "batch-size", "16"));
    assert_true(herd_train_elastic_keeps(&c, 4, 4));  /* 64 as given */
    assert_false(herd_train_elastic_keeps(&c, 4, 3)); /* 64 over 3 */
    assert_true(herd_train_elastic_keeps(&c, 4, 2));  /* 2 x 16 x 2 */
    assert_true(herd_train_elastic_keeps(&c, 3, 2));  /* 48: 2 x 12 x 2 */
    assert_true(herd_train_elastic_keeps(&c, 4, 1));
    assert_herd_ok(herd_train_config_set(&c, "deterministic", NULL));
    assert_true(herd_train_elastic_keeps(&c, 3, 2)); /* 48 = 6 slices of 8: 3 a replica */
    assert_herd_ok(herd_train_config_set(&c, "batch-size", "8"));
    assert_false(herd_train_elastic_keeps(&c, 3, 2)); /* 24 = 3 slices over 2 */
    assert_herd_ok(herd_train_config_set(&c, "slice-size", "4"));
    assert_true(herd_train_elastic_keeps(&c, 3, 2)); /* 6 slices of 4 */
    assert_herd_ok(herd_train_config_set(&c, "batch-size", "16"));
    /* Whole replicas: 2 stages x 2 parts a replica. */
    assert_herd_ok(herd_train_config_set(&c, "pipeline-stages", "2"));
    assert_herd_ok(herd_train_config_set(&c, "tensor-parallel", "2"));
    assert_herd_ok(herd_train_config_set(&c, "micro-batches", "4"));
    assert_false(herd_train_elastic_keeps(&c, 8, 6)); /* 1.5 replicas */
    assert_true(herd_train_elastic_keeps(&c, 8, 4));
    assert_false(herd_train_elastic_keeps(&c, 12, 8)); /* 48 over 2: rounds of 4 slices of 4 */
    assert_true(herd_train_elastic_keeps(&c, 16, 8)); /* 64: 2 rounds a replica */
}

static void test_threads_set_before_the_model(void **state)
{
    (void)state;
    omp_set_num_threads(2); /* what OpenMP chooses on 2 cores without OMP_NUM_THREADS */
    assert_herd_ok(herd_device_set_threads("cpu", 1, NULL));
    assert_int_equal(omp_get_max_threads(), 1);
    int before = threads_now();
    herd_model *m = NULL;
    assert_herd_ok(herd_model_create_shape("lenet5", 1, 28, 28, 10, &m));
    assert_herd_ok(herd_model_init_params(m, 7));
    assert_int_equal(threads_now(), before);
    herd_model_free(m);
    assert_herd_ok(herd_device_set_threads("cpu", 2, NULL));
    assert_int_equal(omp_get_max_threads(), 2);
    tu_expect_error(herd_device_set_threads("cpu", -1, NULL), HERD_ERR_INVALID_ARG, "got -1", NULL);
    tu_expect_error(herd_device_set_threads("tpu", 1, NULL), HERD_ERR_INVALID_ARG, "tpu", NULL);
    omp_set_num_threads(1);
}

/* --threads' default: the user's OMP_NUM_THREADS, else the host's cores shared among
 * its ranks (never zero); a given --threads wins over both. */
static void test_rank_threads(void **state)
{
    (void)state;
    int t = -1;
    assert_herd_ok(herd_rank_threads(3, "7", 8, 4, &t));
    assert_int_equal(t, 3);
    assert_herd_ok(herd_rank_threads(0, "7", 8, 4, &t));
    assert_int_equal(t, 7);
    assert_herd_ok(herd_rank_threads(0, "6,2", 8, 4, &t)); /* nested levels: the outer */
    assert_int_equal(t, 6);
    assert_herd_ok(herd_rank_threads(0, NULL, 8, 4, &t));
    assert_int_equal(t, 2);
    assert_herd_ok(herd_rank_threads(0, NULL, 8, 3, &t));
    assert_int_equal(t, 2);
    assert_herd_ok(herd_rank_threads(0, NULL, 2, 4, &t));
    assert_int_equal(t, 1);
    assert_herd_ok(herd_rank_threads(0, NULL, 8, 1, &t));
    assert_int_equal(t, 8);
    t = -1;
    tu_expect_error(herd_rank_threads(0, "0", 8, 1, &t), HERD_ERR_INVALID_ARG,
                    "OMP_NUM_THREADS='0' is not a thread count", "--threads N");
    tu_expect_error(herd_rank_threads(0, "four", 8, 1, &t), HERD_ERR_INVALID_ARG, "'four'", NULL);
    tu_expect_error(herd_rank_threads(0, "4 ", 8, 1, &t), HERD_ERR_INVALID_ARG, "'4 '", NULL);
    assert_int_equal(t, -1); /* a refused value leaves the output alone */
    assert_herd_ok(herd_rank_threads(0, "", 8, 2, &t)); /* empty: unset, as OpenMP reads it */
    assert_int_equal(t, 4);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_threads_set_before_the_model),
        cmocka_unit_test(test_elastic_keeps),
        cmocka_unit_test(test_every_option_sets_its_field),
        cmocka_unit_test(test_bad_values_named),
        cmocka_unit_test(test_combinations_checked),
        cmocka_unit_test(test_names_are_the_cli_flags),
        cmocka_unit_test(test_dataset_from_memory),
        cmocka_unit_test(test_rank_threads),
    };
    return tu_run(tests, NULL, NULL);
}
